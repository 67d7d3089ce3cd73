# A primary with an asynchronous streaming standby (pmwal on both, each on
# its own ring) loses power under committing load (issue 11).
#
# Commits are acknowledged once in the primary's ring, and walsenders may
# stream WAL that pg_wal has not fsynced: after the restore, the WAL the
# standby received on the primary's timeline must be byte for byte the
# WAL in the primary's pg_wal, unless the restore ended recovery on a new
# timeline (a write window was open), and then only up to the fork.  The
# standby then catches up with the restarted primary, or, if it is ahead
# of the fork, refuses it rather than splicing histories.  Every commit
# acknowledged on the primary is present.
#
# Negative control: the same comparison against a copy of the primary
# started without its ring finds the standby ahead of that copy's WAL on
# the same timeline (the loss the ring prevents would show there).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::RecursiveCopy;
use Test::More;
use Time::HiRes ();

my $SEG = 16 * 1024 * 1024;

# The WAL in $datadir's pg_wal on timeline $tli, from $from to $to, as
# bytes (a missing segment ends it).
sub wal_bytes
{
	my ($datadir, $tli, $from, $to) = @_;
	my $bytes = '';
	for (my $p = $from; $p < $to;)
	{
		my $segno = int($p / $SEG);
		my $name = sprintf('%08X%08X%08X', $tli, int($segno / 256), $segno % 256);
		my $off = $p % $SEG;
		my $n = $SEG - $off < $to - $p ? $SEG - $off : $to - $p;
		open my $fh, '<:raw', "$datadir/pg_wal/$name" or last;
		sysseek($fh, $off, 0);
		my $buf = '';
		sysread($fh, $buf, $n);
		close $fh;
		$bytes .= $buf;
		last if length($buf) < $n;
		$p += $n;
	}
	return $bytes;
}

# Where timeline 1 ends in the history of the node's timeline (from the
# newest history file: a restore that ends on a new timeline leaves the
# one before it to a standby's promotion), or undef if the node is still
# on timeline 1.
sub tli1_end
{
	my ($datadir) = @_;
	my ($hist) = sort { $b cmp $a } glob("$datadir/pg_wal/*.history");
	return undef unless defined $hist;
	my ($lsn) = slurp_file($hist) =~ /^1\s+([0-9A-F]+\/[0-9A-F]+)/m;
	return lsn_num($lsn);
}

# Offset of the first byte that differs between $a and $b (over the
# shorter), or undef.
sub first_difference
{
	my ($a, $b) = @_;
	my $n = length($a) < length($b) ? length($a) : length($b);
	for (my $i = 0; $i < $n; $i += 8192)
	{
		my $len = $n - $i < 8192 ? $n - $i : 8192;
		next if substr($a, $i, $len) eq substr($b, $i, $len);
		for my $j ($i .. $i + $len - 1)
		{
			return $j if substr($a, $j, 1) ne substr($b, $j, 1);
		}
	}
	return undef;
}

my $primary = pmwal_node('primary', size => '64MB', init => { allows_streaming => 1 },
	conf => QUIET_WAL . "wal_keep_size = 1GB\n");
powercut_start($primary);
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
wait_accelerated($primary, 't') or die 'commits are not accelerated';
$primary->backup('b');
my $standby = pmwal_standby($primary, 'standby', 'b', size => '64MB');
$standby->start;
my $start = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()'));
$primary->wait_for_catchup($standby);

my $load = acked_load_start($primary, tag => 'load');
$primary->poll_query_until('postgres', 'SELECT count(*) >= 3000 FROM t')
  or die "the load does not run: ${ $load->{err} }";
$standby->poll_query_until('postgres', 'SELECT count(*) >= 1000 FROM t')
  or die 'the standby does not follow';
my $cut = powercut($primary);
note($cut->{summary});
acked_load_finish($load);
my $received = lsn_num($standby->safe_psql('postgres', 'SELECT pg_last_wal_receive_lsn()'));
note(sprintf('the standby received WAL up to %X/%X', $received / 2**32, $received % 2**32));

# negative control: the primary's data directory started without its ring
my $copy = PostgreSQL::Test::Cluster->new('primary_noring');
PostgreSQL::Test::RecursiveCopy::copypath($primary->data_dir, $copy->data_dir);
chmod 0700, $copy->data_dir;
unlink $copy->data_dir . '/postmaster.pid';
$copy->append_conf('postgresql.conf',
	"port = " . $copy->port . "\npmwal.path = ''\nrestart_after_crash = off\n");
if ($copy->start(fail_ok => 1))
{
	my $copy_end = lsn_num($copy->safe_psql('postgres', 'SELECT pg_current_wal_lsn()'));
	$copy->stop('immediate');
	cmp_ok($copy_end, '<', $received,
		'negative control: without the ring the primary goes on on timeline 1 before what the standby received');
}
else
{
	like(slurp_file($copy->logfile), qr/PANIC/,
		'negative control: without the ring the primary cannot even start');
}

my $offset = -s $primary->logfile;
$primary->start;
$primary->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the primary does not leave recovery';
my $log = slurp_file($primary->logfile, $offset);
like($log, qr/pmwal restored WAL/, 'the primary restored its ring');
my ($n, $missing) = acked_check($primary, $load);
is($missing, 0, "all $n commits acknowledged on the primary are present");

# the standby's WAL on timeline 1 against the primary's
my $fork = tli1_end($primary->data_dir);
my $upto = defined $fork && $fork < $received ? $fork : $received;
my $mine = wal_bytes($standby->data_dir, 1, $start, $upto);
my $theirs = wal_bytes($primary->data_dir, 1, $start, $upto);
is(length($mine), $upto - $start, 'the standby holds the WAL it received');
is(length($theirs), $upto - $start, "the primary's pg_wal holds timeline 1 up to there");
my $diff = first_difference($mine, $theirs);
ok(!defined $diff, sprintf('the standby\'s %d bytes of timeline 1 are the primary\'s', $upto - $start))
  or diag(sprintf('first difference at %X/%X', ($start + $diff) / 2**32, ($start + $diff) % 2**32));
if (!defined $fork)
{
	# no new timeline: the primary went on on timeline 1 from the end of
	# recovery, which must not be before what the standby has
	cmp_ok($primary->safe_psql('postgres', q{SELECT pg_current_wal_lsn() - '0/0'}), '>=', $received,
		'the primary goes on after what the standby received');
}

# the standby follows the primary, or refuses a fork it is ahead of
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
if (defined $fork && $received > $fork)
{
	note(sprintf('the standby is ahead of the fork at %X/%X', $fork / 2**32, $fork % 2**32));
	my $refused = 0;
	for (1 .. 300)
	{
		$refused = 1, last
		  if slurp_file($standby->logfile) =~ /(is not in this server's history|forked off current database system timeline|not a child of this server's history|requested starting point .* is ahead)/;
		Time::HiRes::sleep(0.1);
	}
	ok($refused, 'the standby refuses the fork it is ahead of');
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '0',
		'and did not splice the new timeline onto its WAL');
}
else
{
	$primary->wait_for_catchup($standby);
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '1',
		'the standby catches up with the restarted primary' . (defined $fork ? ' on its new timeline' : ''));
}

$standby->stop;
$primary->stop;
done_testing();

# A primary with an asynchronous streaming standby (pmwal on both, each on
# its own ring) loses power under committing load (issues 11, 20).
#
# Commits are acknowledged once their WAL is in the primary's ring, and
# PostgreSQL's flush pointer -- up to which walsenders stream -- moves only
# after that: a standby never receives WAL that a power cut of the primary
# can take.  The cut comes with the load running and a committer held at
# the sync layer's dangerous point (sync_before_publish: its WAL copied into
# the ring and written, the flush pointer not yet moved).  After the
# restore, the WAL the standby received is byte for byte the WAL in the
# primary's pg_wal, the primary stays on timeline 1 and goes on after what
# the standby received, the standby catches up, and every commit
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
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::RecursiveCopy;
use Test::More;

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
# the load goes on through the ring alone (flusher and WAL writer held)
# until a committer is held inside its WAL sync; the others then wait for
# WALWriteLock
my ($held) = hold_commit($primary, sub { 'INSERT INTO t VALUES (' . (-100 - $_[0]) . ')' });
my $flush = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
my $cut = powercut($primary);
note($cut->{summary});
acked_load_finish($load);
bg_psql_finish($held);
my $received = lsn_num($standby->safe_psql('postgres', 'SELECT pg_last_wal_receive_lsn()'));
note(sprintf('the standby received WAL up to %X/%X', $received / 2**32, $received % 2**32));
cmp_ok($received, '<=', $flush, "the standby received nothing beyond the primary's flush pointer");

# negative control: the primary's data directory started without its ring
# (and without its binding, which would refuse that start)
my $copy = PostgreSQL::Test::Cluster->new('primary_noring');
PostgreSQL::Test::RecursiveCopy::copypath($primary->data_dir, $copy->data_dir);
chmod 0700, $copy->data_dir;
unlink $copy->data_dir . '/postmaster.pid', $copy->data_dir . '/pg_wal/pmwal.binding';
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
is($primary->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
	'the primary stays on timeline 1');
my @history = glob($primary->data_dir . '/pg_wal/*.history');
is(scalar @history, 0, 'the primary has no timeline history file');

# the standby's WAL on timeline 1 against the primary's
my $mine = wal_bytes($standby->data_dir, 1, $start, $received);
my $theirs = wal_bytes($primary->data_dir, 1, $start, $received);
is(length($mine), $received - $start, 'the standby holds the WAL it received');
is(length($theirs), $received - $start, "the primary's pg_wal holds timeline 1 up to there");
my $diff = first_difference($mine, $theirs);
ok(!defined $diff, sprintf('the standby\'s %d bytes of timeline 1 are the primary\'s', $received - $start))
  or diag(sprintf('first difference at %X/%X', ($start + $diff) / 2**32, ($start + $diff) % 2**32));
cmp_ok($primary->safe_psql('postgres', q{SELECT pg_current_wal_lsn() - '0/0'}), '>=', $received,
	'the primary goes on after what the standby received');

# the standby follows the primary
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '1',
	'the standby catches up with the restarted primary');
my $rows = 'SELECT count(*), sum(id) FROM t';
is($standby->safe_psql('postgres', $rows), $primary->safe_psql('postgres', $rows),
	'and has exactly its rows');

$standby->stop;
$primary->stop;
done_testing();

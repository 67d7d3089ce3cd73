# Power cuts with WAL written through O_DIRECT.
#
# PostgreSQL opens WAL segments with O_DIRECT in two configurations:
# 15 under wal_level = minimal (no archiving, no WAL senders) with
# wal_sync_method = open_datasync or open_sync (xlog.c get_sync_bit:
# O_DIRECT | O_DSYNC; not when fsync is off); 16 and later only with
# debug_io_direct = 'wal', whatever the sync method (16 dropped the
# wal_level = minimal case).  The power-cut harness read the old content of
# each write with pread() on the server's own descriptor, which O_DIRECT
# refuses for an unaligned buffer: "libpowercut: cannot read the old
# content of a write: Invalid argument", the process aborted, and none of
# these configurations had a power-cut test.
#
# First the harness on plain files: dd writes through O_DIRECT with and
# without O_DSYNC, with and without an fsync after.  Then, under t/004's
# load (4 pgbench clients, unique ids, acknowledged ids logged client-side,
# a cut at a random moment), for each configuration a pmwal node and a
# stock node: nothing acknowledged is lost, amcheck is clean; what
# pmwal_status said before the cut is in the output.
#	(a) wal_level = minimal, max_wal_senders = 0, archive_mode = off,
#	    wal_sync_method = open_datasync: every major; O_DIRECT on 15 only
#	(b) debug_io_direct = 'wal' (wal_sync_method = fdatasync): 16+
#	(c) debug_io_direct = 'wal', wal_sync_method = open_datasync: 16+
# Negative controls, stock PostgreSQL with fsync = off and
# synchronous_commit = on (commits are acknowledged once their WAL is
# written, never synced), each of which the cut must make lose acknowledged
# commits:
#	(a) settings: on 15 the WAL is then opened without O_DIRECT (its
#	    O_DIRECT is always O_DSYNC too, durable at return: the plain-file
#	    check above is the control of that)
#	(b) settings, 16+: the WAL writes are O_DIRECT and not durable
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();
my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/
  or die 'pg_config --version names no major version';
my $cut_tool = "$FindBin::RealBin/../tools/powercut/powercut_cut";

# --- the harness itself: writes through O_DIRECT, on plain files ----------
# dd's buffers are page-aligned, as O_DIRECT wants them; "seek" makes dd
# open its output O_RDWR, as PostgreSQL does (a write-only descriptor took
# another path in the harness, a descriptor of its own, all along).
{
	my $dir = PostgreSQL::Test::Utils::tempdir('powercut_direct');
	my $d = "$dir/d";
	mkdir $d or die;
	my $B = 4096;
	PostgreSQL::Test::Utils::append_to_file("$dir/$_", $_ x $B) for qw(B C D E H);
	PostgreSQL::Test::Utils::append_to_file("$d/f", 'A' x (5 * $B));
	# the file as one letter per block ('?': a block of mixed bytes)
	my $blocks = sub {
		my $bytes = slurp_file($_[0]);
		return join('', map { /^(.)\1*$/s ? $1 : '?' } unpack("(a$B)*", $bytes));
	};
	my @dd = ('dd', "bs=$B", 'count=1', 'status=none');
	# (a sync is of the inode, not of the descriptor: the synced writes come
	# first, or their syncs would make the unsynced ones durable too)
	my @steps = (
		[ 'block 4: a buffered write and fsync (durable)',
		  [ $^X, '-e', q{
			use strict; use Fcntl; use IO::Handle;
			sysopen(my $fh, $ARGV[0], O_RDWR) or die;
			sysseek($fh, 4 * 4096, 0); syswrite($fh, 'G' x 4096) == 4096 or die;
			$fh->sync or die;
		}, "$d/f" ] ],
		[ 'block 2: O_DIRECT | O_DSYNC (durable at return)',
		  [ @dd, "if=$dir/C", "of=$d/f", 'seek=2', 'conv=notrunc', 'oflag=direct,dsync' ] ],
		[ 'block 3: O_DIRECT, then fsync (durable)',
		  [ @dd, "if=$dir/D", "of=$d/f", 'seek=3', 'conv=notrunc,fsync', 'oflag=direct' ] ],
		[ 'block 1: O_DIRECT, no sync (undone)',
		  [ @dd, "if=$dir/B", "of=$d/f", 'seek=1', 'conv=notrunc', 'oflag=direct' ] ],
		[ 'block 4: O_DIRECT over the buffered write, no sync (undone to its bytes)',
		  [ @dd, "if=$dir/H", "of=$d/f", 'seek=4', 'conv=notrunc', 'oflag=direct' ] ],
		[ 'block 5: O_DIRECT past the end, no sync (undone, the file shrinks back)',
		  [ @dd, "if=$dir/E", "of=$d/f", 'seek=5', 'conv=notrunc', 'oflag=direct' ] ],);
	{
		local $ENV{LD_PRELOAD} = PmwalTest::powercut_lib();
		local $ENV{POWERCUT_LOG} = "$dir/log";
		local $ENV{POWERCUT_DIR} = $d;
		for my $step (@steps)
		{
			my ($what, $cmd) = @$step;
			my ($out, $err) = ('', '');
			ok(IPC::Run::run($cmd, '>', \$out, '2>', \$err),
				"harness on O_DIRECT: $what: ran under libpowercut")
			  or diag("exit $?: $out$err");
		}
	}
	is($blocks->("$d/f"), 'ABCDHE', 'harness on O_DIRECT: every write reached the file');
	my $out = `$^X $cut_tool --verbose $dir/log $d`;
	note($out);
	like($out, qr/^powercut: 3 writes undone \(12288 bytes\), 0 files removed, 0 renames undone; 3 writes durable.*, 5 writes through O_DIRECT \(1 of them O_SYNC\/O_DSYNC\)/m,
		'harness on O_DIRECT: summary');
	is($blocks->("$d/f"), 'AACDG',
		'harness on O_DIRECT: unsynced writes undone to the old content, O_DSYNC and fsynced ones kept');
}

# --- the scenarios ------------------------------------------------------------

# Load the node under the harness, cut the power at a random moment,
# restart, check every acknowledged id.  The table and the extensions are
# made before the harness starts (a clean start and stop): what pg_wal holds
# then is the durable baseline, so that a node whose WAL is never synced
# (fsync = off) still finds its checkpoint.  Options: pmwal, expect_loss.
# Returns a hash: acked, missing, extra, cut (powercut_cut's), status
# (pmwal_status before the cut).
sub scenario
{
	my ($node, $tag, %opts) = @_;

	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal') if $opts{pmwal};
	$node->safe_psql('postgres', 'CREATE TABLE t (id bigint PRIMARY KEY); CREATE EXTENSION amcheck');
	$node->stop;

	$node->{ring_cut} = 'durable' if $opts{pmwal};
	powercut_start($node);
	my $load = acked_load_start($node, tag => $tag);
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "$tag: the load does not run: ${ $load->{err} }";
	Time::HiRes::sleep(0.5 + rand(2.0));
	my $status = $opts{pmwal} ? pmwal_status($node) : undef;
	my $cut = powercut($node);
	acked_load_finish($load);
	$node->start;

	my ($n, $missing, $extra) = acked_check($node, $load);
	my %r = (acked => $n, missing => $missing, extra => $extra, cut => $cut, status => $status);
	diag(sprintf('%s: %d commits acknowledged before the power cut, %d missing after restart; %s',
			$tag, $n, $missing, $cut->{summary}));
	diag(sprintf('%s: pmwal_status before the cut: accelerated %s, reason "%s", commit_path %s, '
			  . 'ring_writes %s, ring_syncs %s, pass_writes %s, pass_syncs %s, retires %s, anchors %s',
			$tag, map { $status->{$_} } qw(accelerated reason commit_path ring_writes ring_syncs
			  pass_writes pass_syncs retires anchors)))
	  if $status;
	cmp_ok($n, '>=', 300, "$tag: at least 300 commits were acknowledged");
	cmp_ok($cut->{undone}, '>', 0, "$tag: the power cut undid writes not yet synced")
	  if $opts{expect_loss};
	acked_verdict($node, $tag, $load, $n, $missing, $extra, $opts{expect_loss});
	$node->stop;
	return \%r;
}

my $quiet_wal = QUIET_WAL;
my %config = (
	a => "wal_level = minimal\nmax_wal_senders = 0\narchive_mode = off\n"
	  . "wal_sync_method = open_datasync\n",
	b => "debug_io_direct = 'wal'\nwal_sync_method = fdatasync\n",
	c => "debug_io_direct = 'wal'\nwal_sync_method = open_datasync\n",);
my %result;

# A pmwal node, a stock node and (for a and b) the negative control of
# configuration $c.
sub configuration
{
	my ($c) = @_;
	my $pm = pmwal_node("${c}_pmwal", size => '64MB',
		conf => $quiet_wal . $config{$c} . "pmwal.flush_interval = 60s\n");
	$result{"${c}_pmwal"} = scenario($pm, "${c}_pmwal", pmwal => 1);

	my $stock = PostgreSQL::Test::Cluster->new("${c}_stock");
	$stock->init;
	$stock->append_conf('postgresql.conf', $quiet_wal . $config{$c} . "fsync = on\n");
	$result{"${c}_stock"} = scenario($stock, "${c}_stock");

	return if $c eq 'c';
	my $neg = PostgreSQL::Test::Cluster->new("${c}_negative");
	$neg->init;
	$neg->append_conf('postgresql.conf',
		$quiet_wal . $config{$c} . "fsync = off\nsynchronous_commit = on\n");
	$result{"${c}_negative"} = scenario($neg, "${c}_negative", expect_loss => 1);
	return;
}

# What the harness saw: writes through O_DIRECT descriptors, and how many of
# those were O_SYNC/O_DSYNC (durable at return).
sub direct_writes
{
	my ($tag) = @_;
	my $cut = $result{$tag}{cut};
	return ($cut->{direct} // 0, $cut->{direct_sync} // 0);
}

# (a) every major
configuration('a');
for my $tag (qw(a_pmwal a_stock))
{
	my ($direct, $dsync) = direct_writes($tag);
	if ($major == 15)
	{
		cmp_ok($direct, '>', 0, "$tag: 15 wrote WAL through O_DIRECT ($direct writes)");
		is($dsync, $direct, "$tag: every O_DIRECT write was O_DSYNC too");
	}
	else
	{
		is($direct, 0, "$tag: $major writes WAL without O_DIRECT under wal_level = minimal");
	}
}
is((direct_writes('a_negative'))[0], 0,
	'a_negative: with fsync = off the WAL is opened without O_DIRECT');

SKIP:
{
	skip "debug_io_direct exists from PostgreSQL 16 on; this is $major", 2 if $major < 16;

	# (b) O_DIRECT without O_DSYNC: durable only at fdatasync
	configuration('b');
	for my $tag (qw(b_pmwal b_stock b_negative))
	{
		my ($direct, $dsync) = direct_writes($tag);
		cmp_ok($direct, '>', 0, "$tag: WAL written through O_DIRECT ($direct writes)");
		is($dsync, 0, "$tag: none of them O_DSYNC");
	}

	# (c) O_DIRECT | O_DSYNC, what 15 does under (a)
	configuration('c');
	for my $tag (qw(c_pmwal c_stock))
	{
		my ($direct, $dsync) = direct_writes($tag);
		cmp_ok($direct, '>', 0, "$tag: WAL written through O_DIRECT ($direct writes)");
		is($dsync, $direct, "$tag: every O_DIRECT write was O_DSYNC too");
	}
}

diag(join('; ',
		map { sprintf('%s: %d acknowledged, %d lost', $_, $result{$_}{acked}, $result{$_}{missing}) }
		  grep { $result{$_} } qw(a_pmwal a_stock a_negative b_pmwal b_stock b_negative c_pmwal c_stock))
	  . sprintf('; PostgreSQL %d, %.0f s', $major, Time::HiRes::time() - $started));

done_testing();

# Issue 20, case 5: power cuts during the primary's own recovery must leave
# it on its timeline with every acknowledged commit, and a streaming standby
# following it.
#
# The sync layer never forces a new timeline: a power cut leaves WAL that
# the flush pointer never covered, which no standby received.  So a primary
# with a streaming standby (stock PostgreSQL) is cut with a committer held
# at the build's dangerous point, and then cut again, at each start, at the
# places of pmwal's own recovery -- the restore written into pg_wal but not
# yet synced for the redo (restore_written), the restore synced but the
# ring not yet emptied (restore_before_empty), the ring emptied and bound
# anew but the binding file not yet written (bind_after_ring) -- and once
# more with PostgreSQL's end-of-recovery checkpoint not yet made (the
# checkpointer stopped before it; best effort, checked in the log).  After
# the last start: timeline 1, no history file, every acknowledged commit;
# the standby never had the held commit, reconnects without refusing and
# ends equal to the primary.
#
# PMWAL_OLD_BUILD=/work/old: the old build's forced timeline switch; a cut
# after recovery.signal went and the history file was written left the
# primary on timeline 1 with stray history files, and a standby holding a
# row the primary lost.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

sub children
{
	my ($ppid, $match) = @_;
	my @pids;
	opendir my $dh, '/proc' or die;
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open my $fh, '<', "/proc/$pid/stat" or next;
		my $stat = <$fh>;
		close $fh;
		next unless $stat && $stat =~ /\)\s+\S\s+(\d+)\s/ && $1 == $ppid;
		open my $ch, '<', "/proc/$pid/cmdline" or next;
		my $cmd = <$ch> // '';
		close $ch;
		push @pids, $pid if $cmd =~ $match;
	}
	closedir $dh;
	return @pids;
}

my $primary = mode_node('primary', size => '64MB', init => { allows_streaming => 1 },
	conf => QUIET_WAL . "wal_keep_size = 1GB\nlog_checkpoints = on\n");
powercut_start($primary);
create_pmwal($primary);
$primary->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE f (v text)');
wait_accelerated($primary, 't') or die 'commits are not accelerated';
$primary->backup('b');
my $standby = stock_standby($primary, 'standby', 'b', conf => "wal_retrieve_retry_interval = 200ms\n");
$standby->start;

my @acked = (1 .. 200);
$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for @acked;
# some 30 MB of WAL since the last checkpoint, so that redo takes a while
$primary->safe_psql('postgres', "INSERT INTO f SELECT repeat('x', 1000) FROM generate_series(1, 25000)");
push @acked, 201;
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (201)');
$primary->wait_for_catchup($standby);

my ($held) = hold_commit($primary, 'INSERT INTO t VALUES (9999)');
my $flush = $primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
my $received = $standby->safe_psql('postgres',
	'SELECT flushed_lsn FROM pg_stat_wal_receiver');
cmp_ok(lsn_num($received), '<=', lsn_num($flush),
	"the standby received WAL up to $received, not beyond the primary's flush pointer $flush");
my $cut = powercut($primary);
note("cut 1 (committer held): $cut->{summary}");
bg_psql_finish($held);
my $standby_held = $standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 9999');
is($standby_held, '0', 'the standby does not have the held commit');

unless (OLD_BUILD())
{
	for my $point (qw(restore_written restore_before_empty bind_after_ring))
	{
		my (undef, $offset) = powercut_start_paused($primary, $point, 120);
		like(slurp_file($primary->logfile, $offset), qr/pmwal test pause at "$point"/,
			"the restart is held at $point");
		$cut = powercut($primary);
		note("cut at $point: $cut->{summary}");
	}
}

# A cut before PostgreSQL's end-of-recovery checkpoint: the postmaster is
# held before it starts any child (at bind_after_ring), then let go, and
# its checkpointer is stopped as soon as it exists -- before redo (some
# 30 MB) ends; the log says whether the cut landed before the checkpoint.
# The old build, at its first restart after cut 1 (its forced archive
# recovery, the history file written): started without a hold.
{
	my $point = OLD_BUILD() ? undef : 'bind_after_ring';
	my ($pm, $offset) = powercut_start_paused($primary, $point, 120);
	my $deadline = Time::HiRes::time() + 120;
	until ($pm)
	{
		die 'no postmaster' if Time::HiRes::time() > $deadline;
		my $pidfile = $primary->data_dir . '/postmaster.pid';
		($pm) = split /\n/, slurp_file($pidfile) if -s $pidfile;
	}
	$primary->{_pid} = $pm;
	pause_release($primary, $point) if $point;
	my $ckpt;
	until ($ckpt)
	{
		die 'no checkpointer' if Time::HiRes::time() > $deadline;
		($ckpt) = children($pm, qr/checkpointer/);
	}
	kill 'STOP', $ckpt;
	my $redo_done = wait_log($primary, qr/redo done at|database system is ready/, $offset, 120);
	my $log = slurp_file($primary->logfile, $offset);
	my $landed = $log !~ /checkpoint complete: end-of-recovery|database system is ready to accept connections/;
	note('the checkpointer stopped ' . ($landed ? 'before' : 'AFTER')
		  . ' the end-of-recovery checkpoint; ' . ($redo_done // 'redo not done'));
	$cut = powercut($primary);
	note("cut before the end-of-recovery checkpoint: $cut->{summary}");
}

my $offset = -s $primary->logfile;
powercut_start($primary);
$primary->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the primary does not leave recovery';
is($primary->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
	'the primary is on timeline 1');
my @history = glob($primary->data_dir . '/pg_wal/*.history');
is(scalar @history, 0, 'the primary has no timeline history file') or diag("@history");
my $list = join(',', @acked);
is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @acked,
	'the primary has all ' . scalar(@acked) . ' acknowledged commits');

# the standby reconnects and follows
$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 301 .. 320;
$primary->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'")
  or diag('the standby does not reconnect');
standby_follows($primary, $standby, 'after the last cut');
# the held commit was never acknowledged: it may be lost, or kept (its WAL
# lay in the page the ring already claimed: the ring holds the newest
# version of each page it covers, copied before the write), but the
# standby has it exactly when the primary does
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 9999'),
	$primary->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 9999'),
	'the standby has the never-acknowledged commit exactly when the primary does');
$standby->stop;
$primary->stop;
done_testing();

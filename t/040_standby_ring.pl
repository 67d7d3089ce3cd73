# The standby's ring (issue 29): a synchronous standby running pmwal answers
# its walreceiver's WAL syncs from a ring of its own, so a commit at
# synchronous_commit = on waits for the standby's ring, not its disk.
#
# Each case: a pmwal primary whose every commit waits for one synchronous
# standby, committing load on the primary, the standby held at a moment,
# then the standby's power cut (every process SIGKILLed, its pg_wal cut to
# what was synced, its ring to what was drained), the primary lost (stopped
# at once, never used again), the standby started (its ring restored) and
# promoted: every commit the primary acknowledged is on it.
#
#  after_publish   the walreceiver held inside its sync, the ring's head
#                  published, its flush not yet reported to the primary
#  before_publish  the same, its WAL copied and written, the head not yet
#                  published
#  restartpoint    the checkpointer held at a restartpoint's pg_control
#                  write, before and after its real sync of pg_wal, while
#                  the walreceiver goes on through the ring
#  both            the walreceiver held after publishing, and the power cut
#                  of both nodes at once; both restarted (each ring
#                  restored), the standby streams on, and every
#                  acknowledged commit is on both
#  stock           the control: the same standby without pmwal, its
#                  walreceiver held by gdb inside its fdatasync
#
# The standby runs with shared_buffers = 1MB: the startup process evicts
# pages all the time, and each eviction moves minRecoveryPoint in
# pg_control.  Those writes sync nothing (control_syncs does not grow), and
# the cut comes with pg_control naming a minRecoveryPoint beyond what
# pg_wal holds durably: the restore puts it back.  Negative control: the
# standby's data directory promoted without its ring lacks acknowledged
# commits (or cannot even reach its minRecoveryPoint).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

sub status_of
{
	my ($node) = @_;
	return pmwal_status($node);
}

# After the standby's cut: the negative control, then the standby started,
# promoted, and checked.
sub promote_and_check
{
	my ($case, $standby, $load, %opts) = @_;
	standby_without_ring($case, $standby, $load) unless $opts{stock};
	standby_restart($case, $standby, %opts);
	promote_and_verdict($case, $standby, $load);
	$standby->stop;
	return;
}

# ---------------------------------------------------------------------------
# the walreceiver held inside its sync, after and before the head's move
# ---------------------------------------------------------------------------
for my $point ('sync_after_publish', 'sync_before_publish')
{
	my $case = $point eq 'sync_after_publish' ? 'after_publish' : 'before_publish';
	my ($primary, $standby) = standby_pair($case);
	my $mrp = $standby->safe_psql('postgres', 'SELECT min_recovery_end_lsn FROM pg_control_recovery()');
	my $load = standby_load_until($case, $primary, $standby, 2000);

	my $st = status_of($standby);
	is($st->{accelerated}, 'true', "$case: the standby's walreceiver syncs through the ring");
	is($st->{commit_path}, 'standby: received WAL synced through the ring',
		"$case: the standby's commit_path says so");
	cmp_ok($st->{ring_syncs}, '>', 100, "$case: its syncs were answered from the ring ($st->{ring_syncs})");
	my $offset = -s $standby->logfile;
	arm_all($standby, $point);
	my $pid = pause_wait($standby, $point, $offset);
	note("$case: walreceiver $pid held at $point");
	$st = status_of($standby);
	my $mrp2 = $standby->safe_psql('postgres', 'SELECT min_recovery_end_lsn FROM pg_control_recovery()');
	cmp_ok(lsn_num($mrp2), '>', lsn_num($mrp), "$case: minRecoveryPoint moved under the load ($mrp to $mrp2)");
	is($st->{control_syncs}, 0, "$case: no write of pg_control synced pg_wal (minRecoveryPoint only)");
	cmp_ok(lsn_num($mrp2), '>', lsn_num($st->{durable_lsn}),
		"$case: pg_control names a minRecoveryPoint ($mrp2) beyond what pg_wal holds durably ($st->{durable_lsn})");

	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	lose_primary($primary, $load);
	promote_and_check($case, $standby, $load);
}

# ---------------------------------------------------------------------------
# a restartpoint's pg_control write held before and after its real sync
# ---------------------------------------------------------------------------
for my $point ('control_before_sync', 'control_after_sync')
{
	my $case = "restartpoint_$point";
	my ($primary, $standby) = standby_pair($case);
	my $load = standby_load_until($case, $primary, $standby, 2000);
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$standby->poll_query_until('postgres',
		'SELECT pg_last_wal_replay_lsn() >= ' . $primary->safe_psql('postgres', "SELECT quote_literal(pg_current_wal_lsn())") . '::pg_lsn')
	  or die "$case: the standby does not replay the checkpoint";
	my $offset = -s $standby->logfile;
	arm_all($standby, $point);
	my $ckpt = bg_psql($standby, 'CHECKPOINT');
	my $pid = pause_wait($standby, $point, $offset);
	note("$case: process $pid held at $point");
	# the walreceiver goes on through the ring meanwhile -- until it
	# begins a new segment, for which it needs the ControlFileLock the held
	# process holds, as in stock PostgreSQL (so would a query here that
	# evicts a buffer: minRecoveryPoint)
	Time::HiRes::sleep(2);
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	bg_psql_finish($ckpt);
	lose_primary($primary, $load);
	promote_and_check($case, $standby, $load);
}

# ---------------------------------------------------------------------------
# both nodes cut at once, the walreceiver held after publishing
# ---------------------------------------------------------------------------
{
	my $case = 'both';
	my ($primary, $standby) = standby_pair($case, cut_primary => 1);
	my $load = standby_load_until($case, $primary, $standby, 2000);
	my $offset = -s $standby->logfile;
	arm_all($standby, 'sync_after_publish');
	pause_wait($standby, 'sync_after_publish', $offset);
	powercut_kill($standby);
	powercut_kill($primary);
	note("$case: standby: " . powercut_cut($standby)->{summary});
	note("$case: primary: " . powercut_cut($primary)->{summary});
	acked_load_finish($load);
	forget_pauses($standby);
	$primary->start;
	$offset = -s $standby->logfile;
	$standby->start;
	like(slurp_file($standby->logfile, $offset), qr/pmwal restored WAL/,
		"$case: the standby's ring was restored");
	$primary->wait_for_catchup($standby);
	for my $node ($primary, $standby)
	{
		my ($n, $missing, $extra) = acked_check($node, $load);
		cmp_ok($n, '>', 500, "$case: $n commits were acknowledged");
		is($missing, 0, "$case: all acknowledged commits are on the " . ($node == $primary ? 'primary' : 'standby'));
	}
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'),
		$primary->safe_psql('postgres', 'SELECT count(*) FROM t'),
		"$case: the standby holds what the primary holds");
	$standby->stop;
	$primary->stop;
}

# ---------------------------------------------------------------------------
# the stock control: the standby without pmwal, its walreceiver held by gdb
# inside its fdatasync
# ---------------------------------------------------------------------------
{
	my $case = 'stock';
	my ($primary, $standby) = standby_pair($case, stock => 1);
	my $load = standby_load_until($case, $primary, $standby, 2000);
	gdb_hold_walreceiver($standby, $case);
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	lose_primary($primary, $load);
	promote_and_check($case, $standby, $load, stock => 1);
}

done_testing();

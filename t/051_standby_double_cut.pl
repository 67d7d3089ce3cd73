# A standby cut twice (adversarial review 2 of the standby's ring): once with
# acknowledged WAL only in its ring, again while that ring's write-back runs
# (held at restore_written and at restore_before_empty), and once more after
# the restore, with its walreceiver streaming again into a ring anchored over
# WAL the first restore wrote back -- before any restartpoint, so pg_control
# still names the checkpoint from before the first cut and the second
# restore's proof reads across the first restore's WAL.
#
# A pmwal primary with one synchronous pmwal standby.  Phase 1: committing
# load, the standby's walreceiver held at its 100th sync answered from the
# ring (head published), its power cut; the primary stopped (immediate:
# its own ring synced at its exit) and started again.  The standby's restarts are
# held and cut at restore_written and restore_before_empty.  Phase 2: the
# standby started, streaming again; committing load, the walreceiver held
# again at its 100th ring sync, the standby cut and the primary lost.  The
# standby, started and promoted, must hold every commit of both loads.
#
# Negative controls: after each cut the standby's data directory promoted
# without its ring lacks acknowledged commits of that phase.
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

my $case = 'double';
my ($primary, $standby) = standby_pair($case, busy_startup => 0);
$primary->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 3000) g');
$primary->wait_for_catchup($standby);
is(pmwal_status($standby)->{accelerated}, 'true', 'the standby syncs through its ring');
my $ckpt0 = control_checkpoint($standby);

# phase 1
my $offset = -s $standby->logfile;
arm_all($standby, 'sync_after_publish:100');
my $load1 = acked_load_start($primary, tag => "${case}1", clients => 4);
my $pid = pause_wait($standby, 'sync_after_publish', $offset);
note("phase 1: walreceiver $pid held at its 100th sync answered from the ring");
my $cut = powercut($standby);
note("cut 1: $cut->{summary}");
# the primary stops (its committers waiting for the standby are not
# acknowledged) and starts again: its own ring is synced at its exit
$primary->stop('immediate');
acked_load_finish($load1);
$primary->start;
cmp_ok($load1->{total}, '>', 50, "phase 1: $load1->{total} commits were acknowledged");
standby_without_ring("${case}1", $standby, $load1);

forget_pauses($standby);
for my $point (qw(restore_written restore_before_empty))
{
	my (undef, $o) = powercut_start_paused($standby, $point, 120);
	like(slurp_file($standby->logfile, $o), qr/pmwal test pause at "$point"/,
		"the standby's restart is held at $point");
	$cut = powercut($standby);
	note("cut at $point: $cut->{summary}");
}

# phase 2: started, streaming again, its ring anchored anew
my $restart = -s $standby->logfile;
powercut_start($standby);
my $startlog = slurp_file($standby->logfile, $restart);
like($startlog, qr/pmwal restored WAL/, "the standby's ring was restored");
$primary->wait_for_catchup($standby);
make_sync_standby($primary, "${case}_standby");
is(control_checkpoint($standby), $ckpt0, 'no restartpoint since the first cut');

$offset = -s $standby->logfile;
arm_all($standby, 'sync_after_publish:100');
my $load2 = acked_load_start($primary, tag => "${case}2", clients => 4, base => 10_000_000_000);
$pid = pause_wait($standby, 'sync_after_publish', $offset);
my ($at) = slurp_file($standby->logfile, $restart) =~ /anchored at (\S+) on timeline/;
note("phase 2: walreceiver $pid held at its 100th ring sync; the ring was anchored at "
	  . ($at // '?') . '; pg_control names ' . control_checkpoint($standby));
$cut = powercut($standby);
note("cut 2: $cut->{summary}");
$primary->stop('immediate');
acked_load_finish($load2);
cmp_ok($load2->{total}, '>', 50, "phase 2: $load2->{total} commits were acknowledged");
standby_without_ring("${case}2", $standby, $load2);

forget_pauses($standby);
my $up;
($up, $startlog) = try_start($standby);
ok($up, 'the standby starts after its second power cut')
  or diag(join("\n", $startlog =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
SKIP:
{
	skip 'the standby did not start', 8 unless $up;
	like($startlog, qr/pmwal restored WAL/, "the standby's ring was restored again");
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the standby does not leave recovery';
	for my $load ($load1, $load2)
	{
		my ($n, $miss, $extra) = acked_check($standby, $load);
		acked_verdict($standby, "$case load base $load->{base}", $load, $n, $miss, $extra);
	}
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id < 0'), '3000',
		'the rows written before the cuts are there');
	$standby->stop;
}

done_testing();

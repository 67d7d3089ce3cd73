# pmwal.enabled switched off and on again by a reload on a standby under
# synchronous load (adversarial review 2 of the standby's ring).
#
# A pmwal primary with one synchronous pmwal standby, committing load.  On
# the standby pmwal.enabled is turned off (reload): the walreceiver's next
# write retires the ring (a real sync) and its writes and syncs go to
# pg_wal; meanwhile the startup process replays and pg_control's
# minRecoveryPoint moves (writes that sync nothing).  Then pmwal.enabled is
# turned on again: the next write anchors the ring anew -- inside a page,
# the walreceiver writes what it received -- after a real sync of what was
# written meanwhile.  The walreceiver is held at its 100th sync answered
# from the ring after that (head published), the standby's power is cut,
# the primary lost.  The standby, started (its ring restored) and
# promoted, must hold every commit the primary acknowledged.
#
# Negative control: the standby's data directory promoted without its ring
# lacks acknowledged commits.
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

my $case = 'enabled';
my ($primary, $standby) = standby_pair($case, busy_startup => 0);
$primary->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 3000) g');
$primary->wait_for_catchup($standby);
is(pmwal_status($standby)->{accelerated}, 'true', 'the standby syncs through its ring');

my $load = acked_load_start($primary, tag => $case, clients => 4);
$standby->poll_query_until('postgres', 'SELECT count(*) > 3200 FROM t')
  or die 'no load arrives';
my $mrp0 = controldata($standby)->{'Minimum recovery ending location'};
$standby->safe_psql('postgres',
	'ALTER SYSTEM SET pmwal.enabled = off; SELECT pg_reload_conf()');
ok(wait_accelerated($standby, 'f'), 'pmwal.enabled off: the ring is retired');
my $pass = pmwal_status($standby)->{pass_writes};
$standby->poll_query_until('postgres', "SELECT pass_writes > $pass + 200 FROM pmwal_status")
  or die 'the walreceiver writes nothing to pg_wal';
my $mrp1 = controldata($standby)->{'Minimum recovery ending location'};
note("minRecoveryPoint $mrp0, then $mrp1 with the ring retired");

my $offset = -s $standby->logfile;
arm_all($standby, 'sync_after_publish:100');
$standby->safe_psql('postgres',
	'ALTER SYSTEM SET pmwal.enabled = on; SELECT pg_reload_conf()');
my $pid = pause_wait($standby, 'sync_after_publish', $offset);
my ($at) = slurp_file($standby->logfile, $offset) =~ /anchored at (\S+) on timeline/;
ok(defined $at, 'pmwal.enabled on: the ring is anchored again' . (defined $at ? " at $at" : ''));
note("walreceiver $pid held at its 100th sync answered from the ring; minRecoveryPoint "
	  . controldata($standby)->{'Minimum recovery ending location'});
my ($up, $startlog) = standby_cut_and_start($case, $primary, $standby, $load);
SKIP:
{
	skip 'the standby did not start', 5 unless $up;
	like($startlog, qr/pmwal restored WAL/, "the standby's ring was restored");
	promote_and_verdict($case, $standby, $load, min => 50);
	$standby->stop;
}

done_testing();

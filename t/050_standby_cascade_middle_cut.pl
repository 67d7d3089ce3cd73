# A chain of three pmwal nodes, the middle one cut (adversarial review 2 of
# the standby's ring).
#
#	A (primary, pmwal) --sync--> B (standby, pmwal) --async--> C (standby of B, pmwal)
#
# A commits with B as its synchronous standby: each acknowledged commit is
# in B's ring (B's walreceiver's syncs are answered from it), and B's
# cascading walsender sends C what B's walreceiver reported flushed.  B's
# walreceiver is held at its 100th sync answered from the ring (head
# published), B's power is cut, A is lost; C runs on.
#
# B must start (its ring restored), C must reconnect to B and catch up
# without being ahead of it (C received only what B reported flushed, which
# B's ring holds), B is promoted and holds every commit A acknowledged,
# and C follows B onto the new timeline with the same rows as B.
#
# Negative control: B's data directory promoted without its ring lacks
# acknowledged commits.
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

my $CONF = QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\nhot_standby = on\n";
my $case = 'cascade';

my $na = pmwal_node("${case}_a", size => '64MB', init => { allows_streaming => 1 }, conf => $CONF);
$na->start;
$na->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE EXTENSION amcheck; CREATE TABLE t (id bigint PRIMARY KEY)');
$na->backup('b');
my $nb = pmwal_standby($na, "${case}_b", 'b', size => '64MB', conf => $CONF);
$nb->{ring_cut} = 'durable';
powercut_start($nb);
make_sync_standby($na, "${case}_b");
$na->wait_for_catchup($nb);
$nb->backup('bb');
my $nc = pmwal_standby($nb, "${case}_c", 'bb', size => '64MB', conf => $CONF);
$nc->start;
$nb->wait_for_catchup($nc, 'replay', $nb->lsn('replay'));

$na->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 3000) g');
$na->wait_for_catchup($nb);
$nb->wait_for_catchup($nc, 'replay', $nb->lsn('replay'));
is(pmwal_status($nb)->{accelerated}, 'true', 'B syncs through its ring');

my $offset = -s $nb->logfile;
arm_all($nb, 'sync_after_publish:100');
my $load = acked_load_start($na, tag => $case, clients => 4);
my $pid = pause_wait($nb, 'sync_after_publish', $offset);
note("B's walreceiver $pid held at its 100th sync answered from the ring");
# let C take what B sent it
sleep 1;
my $c_recv = $nc->safe_psql('postgres', 'SELECT pg_last_wal_receive_lsn()');
note("C received up to $c_recv");
my $cut = powercut($nb);
note($cut->{summary});
$na->stop('immediate');
acked_load_finish($load);

standby_without_ring($case, $nb, $load);

forget_pauses($nb);
my ($up, $startlog) = try_start($nb);
ok($up, 'B starts after its power cut')
  or diag(join("\n", $startlog =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
SKIP:
{
	skip 'B did not start', 8 unless $up;
	like($startlog, qr/pmwal restored WAL/, "B's ring was restored");
	$nb->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$c_recv'::pg_lsn")
	  or diag('B replays less than C received');
	my $b_end = $nb->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()');
	note("B replayed to $b_end after its restore; C had received $c_recv");
	ok($nc->poll_query_until('postgres',
			"SELECT pg_last_wal_replay_lsn() >= '$b_end'::pg_lsn"),
		'C catches up with B (it was not ahead of B)');

	$nb->promote;
	$nb->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'B does not leave recovery';
	my ($n, $miss, $extra) = acked_check($nb, $load);
	cmp_ok($n, '>', 50, "$n commits were acknowledged");
	acked_verdict($nb, $case, $load, $n, $miss, $extra);

	$nb->safe_psql('postgres', 'INSERT INTO t VALUES (-1000000)');
	my $lsn = $nb->lsn('insert');
	ok($nc->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn"),
		'C follows B onto the new timeline');
	is($nc->safe_psql('postgres', 'SELECT count(*), sum(id) FROM t'),
		$nb->safe_psql('postgres', 'SELECT count(*), sum(id) FROM t'),
		'C has the same rows as B');
	$nc->stop;
	$nb->stop;
}

done_testing();

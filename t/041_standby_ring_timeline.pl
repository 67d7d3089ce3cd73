# The standby's ring across a timeline switch (review of the standby ring,
# issue 29): a cascading standby "s2" (pmwal on a ring of its own) follows
# its upstream standby "s1" through s1's promotion onto timeline 2.  Its
# walreceiver streams timeline 2 from the start of the segment in which
# timeline 2 begins (PostgreSQL's RequestXLogStreaming always starts at a
# segment boundary), so the ring is anchored on timeline 2 at that segment's
# start: before the switch point, over bytes of timeline 1.
#
# s1, now the primary, commits with s2 as its synchronous standby; s2 is
# held (its walreceiver inside its sync, the head published) and its power
# is cut; s1 is lost.  s2 must start (its ring restored), be promoted, and
# hold every commit s1 acknowledged.
#
# Negative control: s2's data directory promoted without its ring lacks
# acknowledged commits (or cannot start).
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

my $primary = pmwal_node('tl_primary', size => '64MB', init => { allows_streaming => 1 },
	conf => $CONF);
$primary->start;
$primary->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE EXTENSION amcheck; CREATE TABLE t (id bigint PRIMARY KEY)');
$primary->backup('b');

my $s1 = pmwal_standby($primary, 'tl_s1', 'b', size => '64MB', conf => $CONF);
$s1->start;
$primary->wait_for_catchup($s1);
$s1->backup('b1');

my $s2 = pmwal_standby($s1, 'tl_s2', 'b1', size => '64MB', conf => $CONF);
$s2->{ring_cut} = 'durable';
powercut_start($s2);

# WAL into a new segment, well past its first page, so that timeline 2 begins
# inside that segment, not in its first page
$primary->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 100) g; SELECT pg_switch_wal()');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(101, 3000) g');
my $end = $primary->lsn('insert');
$primary->wait_for_catchup($s1);
$s2->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$end'::pg_lsn")
  or die 's2 does not catch up';
$primary->stop;

$s1->promote;
$s1->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 's1 does not leave recovery';
my $switch = $s1->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
note("s1 promoted; timeline 2 at about $switch; history files on s1: "
	  . join(' ', history_files($s1)));
$s2->poll_query_until('postgres',
	q{SELECT received_tli = 2 FROM pg_stat_wal_receiver})
  or die 's2 does not follow timeline 2';

make_sync_standby($s1, 'tl_s2');

my $load = acked_load_start($s1, tag => 'tl', clients => 4);
$s2->poll_query_until('postgres', 'SELECT count(*) >= 3000 + 2000 FROM t')
  or die "s2 does not follow: ${ $load->{err} }";

my $st = pmwal_status($s2);
note('s2 status: ' . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
is($st->{accelerated}, 'true', "s2's walreceiver syncs through the ring on timeline 2");
note('s2 ring: timeline ' . ring_read_u64($s2->{pmwal_ring}, 'timeline') . ', tail '
	  . lsn_format(ring_read_u64($s2->{pmwal_ring}, 'tail')) . ', head ' . lsn_format(ring_read_u64($s2->{pmwal_ring}, 'head')));

my $offset = -s $s2->logfile;
arm_all($s2, 'sync_after_publish');
my $pid = pause_wait($s2, 'sync_after_publish', $offset);
note("walreceiver $pid held at sync_after_publish");
note('s2 ring at the cut: timeline ' . ring_read_u64($s2->{pmwal_ring}, 'timeline') . ', tail '
	  . lsn_format(ring_read_u64($s2->{pmwal_ring}, 'tail')) . ', head ' . lsn_format(ring_read_u64($s2->{pmwal_ring}, 'head')));
my $cut = powercut($s2);
note($cut->{summary});
$s1->stop('immediate');
acked_load_finish($load);

standby_without_ring('s2', $s2, $load);

forget_pauses($s2);
my ($up, $log) = try_start($s2);
ok($up, 's2 starts after its power cut (its ring restored)')
  or diag(join("\n", $log =~ /((?:PANIC|FATAL|DETAIL|LOG):  pmwal.*)/g) . "\n"
	  . join("\n", $log =~ /((?:FATAL|DETAIL):  .*)/g));
SKIP:
{
	skip 's2 did not start', 4 unless $up;
	like($log, qr/pmwal restored WAL/, "s2's ring was restored");
	$s2->promote;
	$s2->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 's2 does not leave recovery';
	my ($n, $miss, $extra) = acked_check($s2, $load);
	cmp_ok($n, '>', 500, "$n commits were acknowledged");
	acked_verdict($s2, 'timeline', $load, $n, $miss, $extra);
	$s2->stop;
}

done_testing();

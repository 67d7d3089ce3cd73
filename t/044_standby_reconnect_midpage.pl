# The standby's ring anchored inside a page after its walreceiver
# reconnected (review of the standby ring, issue 29).
#
# A pmwal primary with one synchronous pmwal standby; the primary idle, the
# standby's walreceiver terminated (SIGTERM): it retires the ring at its exit (a real
# sync), the next walreceiver streams the segment again from its start up
# to where the last one stopped -- inside a page -- and those writes go to
# pg_wal only.  Then committing load: the first new write begins inside
# that page, and anchors the ring there, the page's beginning read from the
# segment.  The walreceiver is held at its 100th sync answered from the ring
# (head published), the standby's power is cut, the primary lost; the
# standby started (its ring restored) and promoted holds every commit the
# primary acknowledged.  Negative control: the standby without its ring
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

my $case = 'reconnect';
my ($primary, $standby) = standby_pair($case, busy_startup => 0);

# WAL through the ring, ending inside a page; then the primary is idle
$primary->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 3000) g');
my $end = $primary->lsn('flush');
$primary->wait_for_catchup($standby, 'flush', $end);
note("the primary flushed to $end (" . (lsn_num($end) % 8192) . ' bytes into its page)');
is(pmwal_status($standby)->{accelerated}, 'true', 'the standby syncs through its ring');

# the walreceiver reconnects and streams its segment again, to pg_wal only
my $old = $standby->safe_psql('postgres', 'SELECT pid FROM pg_stat_wal_receiver');
my $pass = pmwal_status($standby)->{pass_writes};
my $offset = -s $standby->logfile;
kill 'TERM', $old or die "could not signal walreceiver $old: $!";
$standby->poll_query_until('postgres',
	"SELECT pid <> $old AND status = 'streaming' FROM pg_stat_wal_receiver")
  or die 'no new walreceiver';
$standby->poll_query_until('postgres', "SELECT pass_writes > $pass FROM pmwal_status")
  or die 'the new walreceiver writes nothing';
my $st = pmwal_status($standby);
is($st->{accelerated}, 'false', 'the WAL streamed again did not anchor the ring');
note("after the reconnect: pass_writes $st->{pass_writes}, durable $st->{durable_lsn}, tail $st->{tail_lsn}, head $st->{head_lsn}");

# committing load: the first new write anchors the ring inside $end's page
arm_all($standby, 'sync_after_publish:100');
my $load = acked_load_start($primary, tag => $case, clients => 4);
my $pid = pause_wait($standby, 'sync_after_publish', $offset);
note("walreceiver $pid held at its 100th sync answered from the ring");
my $log = slurp_file($standby->logfile, $offset);
my ($at) = $log =~ /anchored at (\S+) on timeline/;
ok(defined $at, 'the ring was anchored again' . (defined $at ? " at $at" : ''));
is($at, lsn_format(lsn_num($end) - lsn_num($end) % 8192),
	"... at the page of $end, where the first new write began")
  if defined $at;
my ($up, $startlog) = standby_cut_and_start($case, $primary, $standby, $load);
SKIP:
{
	skip 'the standby did not start', 6 unless $up;
	like($startlog, qr/pmwal restored WAL/, "the standby's ring was restored");
	promote_and_verdict($case, $standby, $load, min => 50);
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id < 0'), '3000',
		'the rows written before the reconnect are there');
	$standby->stop;
}

done_testing();

# A standby restarted onto an upstream that is behind it (review of the
# standby ring, issue 29).
#
# s2, a standby running pmwal, received WAL up to X from the primary; it is
# restarted to stream from s1, another standby of the same primary that is
# behind it (flushed up to F < X, in the same segment).  s2's walreceiver
# streams the segment again from its start, up to F, which lies inside a
# page: the ring (anchored at the start, nothing written since the restart)
# zeroes the rest of that page and claims the whole page -- over WAL (F, X)
# that s2's pg_wal holds durably.  Then s2's power is cut.
#
# s2 must start again and hold every row it had replayed: its pg_wal has
# all of it; the ring holds nothing pg_wal lacks.
#
# Outcome: no refusal, nothing lost.  PostgreSQL's walreceiver starts with
# its flush position at the replay position (X) and syncs only what it
# writes past it; the write up to F is never synced, so the ring never
# publishes the page it zeroed after F (the flusher syncs pg_wal and frees
# the ring instead).  A walreceiver that syncs a write ending inside a page
# while pg_wal holds more of that page would need WAL received but not
# replayed before the restart, which a restarted standby replays before it
# starts its walreceiver.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $CONF = QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\nhot_standby = on\n";

my $primary = pmwal_node('ub_primary', size => '64MB', init => { allows_streaming => 1 },
	conf => $CONF);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
$primary->backup('b');
my $s1 = stock_standby($primary, 'ub_s1', 'b', conf => $CONF);
$s1->start;
my $s2 = pmwal_standby($primary, 'ub_s2', 'b', size => '64MB', conf => $CONF);
$s2->{ring_cut} = 'durable';
powercut_start($s2);

# F: both standbys have it
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
$primary->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1, 100) g');
my $f = $primary->lsn('flush');
$primary->wait_for_catchup($s1, 'replay', $f);
$primary->wait_for_catchup($s2, 'replay', $f);

# s1 stops at F (restarted without an upstream); s2 goes on to X
$s1->stop;
$s1->append_conf('postgresql.conf', "primary_conninfo = ''\n");
$primary->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(101, 1100) g');
my $x = $primary->lsn('flush');
$primary->wait_for_catchup($s2, 'replay', $x);
$s1->start;
note("F = $f, X = $x");
is($s2->safe_psql('postgres', 'SELECT count(*) FROM t'), '1100', 's2 replayed up to X');

# s2 restarted onto s1
$s2->stop;
$s2->enable_streaming($s1);
powercut_start($s2);
$s2->poll_query_until('postgres', qq{SELECT written_lsn >= '$f'::pg_lsn FROM pg_stat_wal_receiver})
  or die 's2 does not stream from s1';
# the walreceiver flushes only what lies past the replay position it
# started from (X): its write up to F is never synced, so the ring never
# claims the zeroed rest of F's page
sleep 2;
my $st = pmwal_status($s2);
note('s2 status: ' . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
my ($written, $flushed) = split /\|/, $s2->safe_psql('postgres',
	'SELECT written_lsn, flushed_lsn FROM pg_stat_wal_receiver');
note("s2 walreceiver: written $written, flushed $flushed; ring: tail $st->{tail_lsn}, head $st->{head_lsn}; F = $f, X = $x");
is($st->{ring_syncs}, 0, 'the walreceiver made no sync (nothing past X was written)');
ok($st->{bytes_in_use} == 0 || lsn_num($st->{head_lsn}) <= lsn_num($f),
	"the ring claims nothing past F's page beginning (ring [$st->{tail_lsn}, $st->{head_lsn}), $st->{bytes_in_use} bytes)");

my $cut = powercut($s2);
note($cut->{summary});

my ($up, $log) = try_start($s2);
ok($up, 's2 starts after its power cut')
  or diag(join("\n", $log =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
if ($up)
{
	is($s2->safe_psql('postgres', 'SELECT count(*) FROM t'), '1100',
		's2 holds every row it had replayed');
	$s2->stop;
}
$s1->stop;
$primary->stop;

done_testing();

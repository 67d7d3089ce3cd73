# WAL archiving and point-in-time recovery to a target that was only in
# the ring at the power cut (issues 11, 20).
#
# A primary archives its WAL (archive_mode = on).  With the WAL writer and
# the flusher off the CPU, nothing reaches pg_wal's disk any more: a
# restore point is created between two marker commits, more commits
# follow, and the power is cut.  The cut takes the restore point's WAL
# from pg_wal; the ring gives it back, the primary ends crash recovery on
# its timeline (the sync layer never forces a new one: nothing that was not
# durable can have left through the archiver) and archives it.  A node made
# from a base backup taken before the load then recovers from the archive
# to the restore point: it has every commit acknowledged before it and none
# after.
#
# Then the recovered node, its recovery_target_name still set, takes
# commits and loses power with a committer held at the sync layer's
# dangerous point (sync_before_publish): its restart is crash recovery,
# which no recovery target stops, on the timeline it was promoted to, with
# every acknowledged commit.
#
# Negative control: a copy of the cut data directory started without the
# ring has neither marker.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $SEG = 16 * 1024 * 1024;
my ($BEFORE, $AFTER) = (8_000_000_001, 8_000_000_002);

my $primary = pmwal_node('primary', size => '64MB', init => { has_archiving => 1, allows_streaming => 1 },
	conf => QUIET_WAL);
powercut_start($primary);
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
wait_accelerated($primary, 't') or die 'commits are not accelerated';
$primary->backup('b');

my $load1 = acked_load_start($primary, tag => 'before');
$primary->poll_query_until('postgres', 'SELECT count(*) >= 2000 FROM t')
  or die "the load does not run: ${ $load1->{err} }";
$load1->{h}->kill_kill;
acked_load_finish($load1);

stop_server_process($primary, $_) for qw(walwriter flusher);
$primary->safe_psql('postgres', "INSERT INTO t VALUES ($BEFORE)");
my $target = $primary->safe_psql('postgres', "SELECT pg_create_restore_point('inside_ring')");
$primary->safe_psql('postgres', "INSERT INTO t VALUES ($AFTER)");
my $load2 = acked_load_start($primary, tag => 'after', base => 20_000_000_000);
$primary->poll_query_until('postgres', 'SELECT count(*) >= 200 FROM t WHERE id > 20000000000')
  or die "the second load does not run: ${ $load2->{err} }";
my $cut = powercut($primary);
acked_load_finish($load2);

my $seg = sprintf('%08X%08X%08X', 1, 0, int(lsn_num($target) / $SEG));
my $off = lsn_num($target) % $SEG;
my $range = $cut->{undone_range}{$seg};
ok($range && $range->[0] <= $off && $off < $range->[1],
	"the cut took the restore point's WAL at $target from pg_wal")
  or diag(explain($cut->{undone_range}));
is(without_ring_query($primary, "SELECT count(*) FROM t WHERE id IN ($BEFORE, $AFTER)") // 'no start',
	'0', 'negative control: without the ring both markers are lost');

my $offset = -s $primary->logfile;
$primary->start;
$primary->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the primary does not finish recovery';
like(slurp_file($primary->logfile, $offset), qr/pmwal restored WAL/, 'the ring was restored');
is($primary->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
	'the primary stays on timeline 1');
my ($acked, $missing) = acked_check($primary, $load1);
my ($acked2, $missing2) = acked_check($primary, $load2);
is($missing + $missing2, 0,
	"the primary has all $acked + $acked2 commits acknowledged before and after the restore point");
# finish the segment that holds the restore point, and wait for the
# archive to have it
my $last = $primary->safe_psql('postgres', 'SELECT pg_walfile_name(pg_switch_wal())');
$primary->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")
  or die "the archiver does not archive $last";

# point-in-time recovery from the base backup and the archive
my $pitr = pmwal_standby($primary, 'pitr', 'b', init => { has_restoring => 1, standby => 0 },
	conf => "recovery_target_name = 'inside_ring'\nrecovery_target_action = 'promote'\n");
powercut_start($pitr);
$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the point-in-time recovery does not end';
like(slurp_file($pitr->logfile), qr/recovery stopping at restore point "inside_ring"/,
	'recovery stopped at the restore point');
my ($packed, $pmissing) = acked_check($pitr, $load1);
is($pmissing, 0, "the recovered node has all $packed commits acknowledged before the restore point");
is($pitr->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $BEFORE"), '1',
	'and the marker committed just before it');
is($pitr->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $AFTER OR id > 20000000000"), '0',
	'and nothing committed after it');

# The recovered node keeps its recovery_target_name in postgresql.conf.  It
# takes commits and loses power with a committer held inside its WAL sync:
# its restart must not stop at that target (it would stop before every
# commit since), nor leave its timeline, and must keep them all.
wait_accelerated($pitr, 't') or die 'commits on the recovered node are not accelerated';
my $pitr_tli = $pitr->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
my $load3 = acked_load_start($pitr, tag => 'pitr', base => 30_000_000_000);
$pitr->poll_query_until('postgres', 'SELECT count(*) >= 1000 FROM t WHERE id > 30000000000')
  or die "the load on the recovered node does not run: ${ $load3->{err} }";
$load3->{h}->kill_kill;
acked_load_finish($load3);
my ($held) = hold_commit($pitr, sub { 'INSERT INTO t VALUES (' . (9_000_000_000 + $_[0]) . ')' });
powercut($pitr);
bg_psql_finish($held);
$offset = -s $pitr->logfile;
$pitr->start;
$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the recovered node does not finish recovery after its power cut';
my $log = slurp_file($pitr->logfile, $offset);
like($log, qr/pmwal restored WAL/, 'the recovered node restored its ring');
unlike($log, qr/recovery stopping|starting archive recovery|starting point-in-time recovery/,
	'its restart was crash recovery: the recovery target left in postgresql.conf played no part');
is($pitr->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), $pitr_tli,
	"and it stays on timeline $pitr_tli");
my ($acked3, $missing3) = acked_check($pitr, $load3);
is($missing3, 0, "the recovered node has all $acked3 commits acknowledged since its recovery");
$pitr->stop;
$primary->stop;
done_testing();

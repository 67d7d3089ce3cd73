# A checkpoint's real sync races commits answered from the ring (issue 23's
# checkpoint window under synchronous replication; the defect is the first
# case of t/025h in the WAL-consumers review, fixed since).
#
# Before pg_control is written, ring_on_control_write() has pg_wal synced
# for real (ring_make_durable, under sync_lock) up to written_end as it was
# when the sync began, and then frees the ring.  Commits do not take
# sync_lock: while that sync runs they write on, are copied into the ring,
# have their syncs answered from it and are acknowledged (here: after the
# synchronous standby confirmed them).  Freeing the ring must not give up
# their WAL, which pg_wal has not synced: the ring keeps everything from the
# page the sync ended in.  Before the fix it was emptied, and a power cut
# before the flusher or the next checkpoint synced that WAL lost
# acknowledged commits -- which the standby had: it was ahead of the
# restored primary.
#
# The checkpointer is held at durable_after_sync (its real sync done, the
# ring not yet freed) while the load commits on, then at control_after_sync
# (ring freed, pg_control not yet written); then the power is cut.  Every
# commit acknowledged must be on the restarted primary and on the standby.
# Negative control: without the ring the same commits are missing (the
# test can see a loss at all).  On the build before the fix the restart is
# refused: "pmwal ring ... does not connect to the WAL in pg_wal; nothing
# was restored".
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pair = sync_pair();
my ($primary, $standby) = @$pair{qw(primary standby)};
my $tag = 'checkpoint sync race';

my $load = pair_load_start($pair, $tag);
my $offset = -s $primary->logfile;
pause_rearm($primary, $_) for qw(durable_after_sync control_after_sync);
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET pmwal.test_pause = 'durable_after_sync,control_after_sync'; SELECT pg_reload_conf()");
my $ckpt = bg_psql($primary, 'CHECKPOINT');
my $pid = pause_or_exit($primary, 'durable_after_sync', $offset, $ckpt);
my $ckpt_pid = $primary->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
is($pid, $ckpt_pid, "$tag: the checkpointer is held after its real sync, before it frees the ring");
# the next start must not hold anything
$primary->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause');
my $durable = pmwal_status($primary)->{durable_lsn};
pair_wait_rows($pair, $load, 300);
my $status = pmwal_status($primary);
cmp_ok(lsn_num($status->{head_lsn}), '>', lsn_num($durable),
	"$tag: commits acknowledged meanwhile are in the ring beyond the synced WAL ($durable .. $status->{head_lsn})");

pause_release($primary, 'durable_after_sync');
is(pause_wait($primary, 'control_after_sync', $offset), $ckpt_pid,
	"$tag: the checkpointer freed the ring and is held before it writes pg_control");
$status = pmwal_status($primary);
note("$tag: the ring now holds [$status->{tail_lsn}, $status->{head_lsn}), durable to $status->{durable_lsn}");
pair_wait_rows($pair, $load, 100);

my ($acked, $without, $err) = pair_cut($pair, $tag, $load);
bg_psql_finish($ckpt);
ok(!defined $without || $without > 0,
	"$tag: negative control: without its ring the primary lacks " . ($without // 'all') . ' acknowledged commits');
pair_restart_and_check($pair, $tag, $load, $acked);

$standby->stop;
$primary->stop;
done_testing();

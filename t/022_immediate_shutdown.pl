# An immediate shutdown is not a power cut (issue 11).
#
# "pg_ctl stop -m immediate" (what HA tools use to fail over fast) kills
# every server process, but the operating system keeps what they wrote.
# Once the last of them is gone, the postmaster syncs pg_wal and empties
# the ring (restore.c, pmwal_exit_sync): the next start restores nothing,
# and a power cut right after the stop takes nothing: every acknowledged
# commit is in pg_wal, durably -- even the data directory started without
# its ring has them all.
#
# The stop comes while a committer is held inside pmwal's answer to its
# WAL sync (sync_before_publish: its WAL written into pg_wal and copied
# into the ring, the ring's head not yet published, PostgreSQL's flush
# pointer not yet moved), after committing load with the flusher and the
# WAL writer stopped: the WAL of the commits acknowledged before it is in
# the ring and the page cache only.
# (The old test held it in its "write window" with walsenders running, the
# ring "exposed", and checked that no new timeline was forced at the next
# start: write window, exposure and forced timeline switch are gone.)
#
# Then a backend that does not answer the shutdown (stopped): the
# postmaster SIGKILLs it after 5 s, and syncs only once it is gone.  (A
# process still attached to shared memory when the postmaster exits keeps
# the ring for the next start's restore.)
#
# Negative control: the same held committer, but every process SIGKILLed
# (powercut_kill: the postmaster runs nothing at its exit): the power cut
# takes WAL, and the data directory without its ring lacks acknowledged
# commits; with the ring, the start restores them.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();
my $node = quiet_node('node');
my $ring = $node->{pmwal_ring};

quiesce($node);
my $load = short_load($node, 'load');
my ($held) = hold_commit($node, 'INSERT INTO t VALUES (9000000000)');
my $st = pmwal_status($node);
cmp_ok(lsn_num($st->{durable_lsn}), '<', lsn_num($st->{head_lsn}),
	"acknowledged WAL is in the ring only, not yet synced in pg_wal ($st->{durable_lsn} < $st->{head_lsn})");

my $offset = -s $node->logfile;
$node->stop('immediate');
bg_psql_finish($held);
like(slurp_file($node->logfile, $offset),
	qr/pmwal synced pg_wal after the last server process exited; the ring is empty/,
	'after the immediate shutdown the postmaster synced pg_wal and emptied the ring');
is(ring_read_u64($ring, 'head'), ring_read_u64($ring, 'tail'), 'the ring is empty');
my $cut = powercut_cut($node);
is($cut->{undone}, 0, 'a power cut now takes no WAL write');
my $n = without_ring_query($node, 'SELECT count(*) FROM t');
my ($acked) = $load->{total};
cmp_ok($n // 0, '>=', $acked, "the data directory without its ring has all $acked acknowledged commits");

$offset = -s $node->logfile;
powercut_start($node);
my $log = slurp_file($node->logfile, $offset);
unlike($log, qr/pmwal restored WAL/, 'the next start restores nothing');
unlike($log, qr/new timeline/, 'and stays on its timeline');
is($node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1', 'timeline 1');
my $missing;
($acked, $missing) = acked_check($node, $load);
is($missing, 0, "all $acked acknowledged commits are there");

# --- a backend that does not answer the shutdown -----------------------------
# committing load to its end, with the flusher and the WAL writer stopped
# (its WAL in the ring and the page cache only); then one idle session
# stopped (waiting for its client: nothing is half-written anywhere, so
# that the power cut below may take nothing at all)
stop_server_process($node, $_) for qw(walwriter flusher);
my $load2 = short_load($node, 'load2', base => 20_000_000_000);
my $straggler = $node->background_psql('postgres');
my $orphan = $straggler->query_safe('SELECT pg_backend_pid()');
kill 'STOP', $orphan;
$offset = -s $node->logfile;
# SIGQUIT reaches a stopped process only once it runs again: the
# postmaster waits 5 s, SIGKILLs it, and exits when it is gone
$node->stop('immediate');
eval { $straggler->quit };
$log = slurp_file($node->logfile, $offset);
like($log, qr/issuing SIGKILL to recalcitrant children.*pmwal synced pg_wal after the last server process exited; the ring is empty/s,
	'a straggler SIGKILLed by the postmaster is gone before the postmaster syncs');
$cut = powercut_cut($node);
is($cut->{undone}, 0, 'a power cut then takes no WAL write');
powercut_start($node);
($acked, $missing) = acked_check($node, $load2);
is($missing, 0, "all $acked commits acknowledged since are there");

# --- negative control: the same, but every process killed --------------------
quiesce($node);
my $load3 = short_load($node, 'load3', base => 30_000_000_000);
($held) = hold_commit($node, 'INSERT INTO t VALUES (9000000001)');
$cut = powercut($node);
bg_psql_finish($held);
cmp_ok($cut->{undone}, '>', 0, 'control: a power cut after a SIGKILL of every process takes WAL');
$n = without_ring_query($node, 'SELECT count(*) FROM t WHERE id > 30000000000');
cmp_ok($n // 0, '<', $load3->{total},
	"control: the data directory without its ring lacks acknowledged commits (" . ($n // 0) . " of $load3->{total})");
$offset = -s $node->logfile;
$node->start;
like(slurp_file($node->logfile, $offset), $restored_re, 'control: the next start restores the ring');
($acked, $missing) = acked_check($node, $load3);
is($missing, 0, "control: all $acked acknowledged commits are there");
$node->stop;

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

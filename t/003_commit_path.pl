# The commit path: PostgreSQL's WAL writes go into the ring and its WAL syncs
# are answered from it, and the counters say so; a WAL write too large for
# the ring retires it (synced for real) and the next one anchors it again;
# pmwal.enabled switches online; wal_sync_method = open_datasync and
# synchronous replication keep PostgreSQL's own behaviour; 2PC, DROP TABLE
# and a long transaction across checkpoints and WAL switches work; a killed
# flusher loses nothing.
use strict;
use warnings;
use FindBin;
use IPC::Run;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# wal_buffers = 16MB: a commit's flush can write more WAL at once than the
# 8 MB ring holds
my $node = pmwal_node(
	'commit',
	init => { allows_streaming => 1 },
	conf => qq{
max_prepared_transactions = 5
wal_writer_delay = 10s
wal_buffers = 16MB
});
$node->start;
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY, v text)');
ok(wait_accelerated($node, 't'), 'WAL syncs are answered from the ring');
ok($node->log_contains(qr/pmwal ring ".*" anchored at [0-9A-F]+\/[0-9A-F]+ on timeline 1; WAL syncs are answered from it/),
	'anchoring is logged');

# --- commits move the counters; PostgreSQL's WAL syncs are the ring's
my $before = pmwal_status($node);
$node->safe_psql('postgres', "INSERT INTO t VALUES ($_, 'x')") for 1 .. 200;
my $after = pmwal_status($node);
cmp_ok($after->{ring_syncs} - $before->{ring_syncs}, '>=', 200,
	'the WAL syncs of 200 commits were answered from the ring');
cmp_ok($after->{ring_writes} - $before->{ring_writes}, '>=', 200,
	'their WAL writes were copied into the ring');
cmp_ok($after->{bytes_copied}, '>', $before->{bytes_copied}, 'bytes copied are counted');
is($after->{pass_syncs} - $before->{pass_syncs}, 0, 'no WAL sync was left to the file system');
cmp_ok($after->{segments_synced} - $before->{segments_synced}, '<', 10,
	'pmwal synced segments in batches, not per commit');
is($after->{state}, 'in use', 'ring state is "in use"');
ok(defined $after->{flusher_pid} && $after->{flusher_pid} > 0, 'flusher pid is shown');

# read-only transactions cost nothing
$before = pmwal_status($node);
$node->safe_psql('postgres', 'SELECT count(*) FROM t') for 1 .. 20;
$after = pmwal_status($node);
is($after->{ring_syncs}, $before->{ring_syncs}, 'read-only transactions do not touch the ring');

# --- a WAL write larger than the ring retires it: everything is synced for
# real and PostgreSQL's syncs are real; the next small write anchors again
$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
$node->safe_psql('postgres', 'CHECKPOINT');
$before = pmwal_status($node);
$node->safe_psql('postgres', q{
BEGIN;
INSERT INTO t SELECT g, repeat('y', 200) FROM generate_series(1000, 21000) g;
SELECT pg_logical_emit_message(true, 'pmwal', repeat('y', 9000000));
COMMIT;});
$after = pmwal_status($node);
cmp_ok($after->{large_writes} - $before->{large_writes}, '>=', 1,
	'a WAL write larger than the ring is counted');
cmp_ok($after->{retires} - $before->{retires}, '>=', 1, 'and retired the ring');
ok($node->log_contains(qr/pmwal gave up its ring for ordinary WAL syncs: a single WAL write was larger than the ring/),
	'the retirement is logged with its reason');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 1000'), '20001',
	'the large commit is there');
$node->safe_psql('postgres', "INSERT INTO t VALUES (50000, 'after large')");
my $again = pmwal_status($node);
# The retirement may come from another process's write of the large record
# (a buffer's eviction), and the COMMIT's own write then anchors again before
# $after is read: count from before the large transaction.
cmp_ok($again->{anchors}, '>', $before->{anchors}, 'a small write after the retirement anchors the ring again');
cmp_ok($again->{ring_syncs}, '>', $after->{ring_syncs}, 'and its sync is answered from the ring');
is($again->{accelerated}, 'true', 'accelerated again');

# --- 2PC and DROP TABLE
$node->safe_psql('postgres', q{
BEGIN; INSERT INTO t VALUES (60000, '2pc'); PREPARE TRANSACTION 'p1';
COMMIT PREPARED 'p1';
BEGIN; INSERT INTO t VALUES (60001, '2pc rolled back'); PREPARE TRANSACTION 'p2';
ROLLBACK PREPARED 'p2';
CREATE TABLE doomed AS SELECT generate_series(1, 1000) AS g;
DROP TABLE doomed;
});
is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t WHERE id >= 60000'),
	'60000', 'COMMIT PREPARED and ROLLBACK PREPARED work');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_class WHERE relname = 'doomed'}),
	'0', 'DROP TABLE committed');

# --- a long open transaction across WAL switches and checkpoints
my $long = $node->background_psql('postgres');
$long->query_safe("BEGIN; INSERT INTO t VALUES (70000, 'long')");
for (1 .. 4)
{
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT g, 'filler' FROM generate_series(100000 * $_, 100000 * $_ + 5000) g");
	$node->safe_psql('postgres', 'SELECT pg_switch_wal(); CHECKPOINT;');
}
$long->query_safe('COMMIT');
$long->quit;
is($node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 70000'), 'long',
	'a transaction opened before several checkpoints commits');
ok(!$node->log_contains(qr/PANIC/), 'no PANIC');
cmp_ok(pmwal_status($node)->{control_syncs}, '>=', 4,
	'each checkpoint synced the ring\'s WAL before writing pg_control');
$node->safe_psql('postgres', "INSERT INTO t VALUES (70001, 'after')");
ok(wait_accelerated($node, 't'), 'still accelerated after recycling');

# --- pmwal.enabled off and on, online
$node->append_conf('postgresql.conf', 'pmwal.enabled = off');
$node->reload;
ok(wait_accelerated($node, 'f'), 'pmwal.enabled = off stops acceleration');
$node->safe_psql('postgres', "INSERT INTO t VALUES (80000, 'off')");
ok( $node->poll_query_until(
		'postgres', q{SELECT reason = 'pmwal.enabled is off' AND state = 'empty' AND bytes_in_use = 0 FROM pmwal_status}),
	'the next write retired the ring and the status says why');
$before = pmwal_status($node);
reset_wal_stats($node);
$node->safe_psql('postgres', "INSERT INTO t VALUES (80000 + $_, 'off')") for 1 .. 20;
$after = pmwal_status($node);
is($after->{ring_syncs}, $before->{ring_syncs}, 'disabled: no WAL sync is answered from the ring');
cmp_ok($after->{pass_syncs} - $before->{pass_syncs}, '>=', 20,
	'disabled: each commit\'s WAL sync goes to the file system');
$node->append_conf('postgresql.conf', 'pmwal.enabled = on');
$node->reload;
ok(wait_accelerated($node, 't'), 'pmwal.enabled = on resumes acceleration');
$node->safe_psql('postgres', "INSERT INTO t VALUES (90000, 'on again')");
cmp_ok(pmwal_status($node)->{ring_syncs}, '>', $after->{ring_syncs},
	'enabled again: WAL syncs are answered from the ring');

# --- the flusher terminated on its own comes back
# (it has no PGPROC in the proc array, so pg_terminate_backend cannot reach it)
my $pid = pmwal_status($node)->{flusher_pid};
kill 'TERM', $pid;
ok( $node->poll_query_until(
		'postgres', "SELECT accelerated AND flusher_pid <> $pid FROM pmwal_status"),
	'a terminated flusher is restarted');

# --- a synchronous standby requested: commits wait for it as in stock
# PostgreSQL (local flush through the ring, then the wait), and pmwal does
# not stand aside (issue 23)
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nosuchstandby'");
$node->reload;
ok( $node->poll_query_until(
		'postgres', q{SELECT current_setting('synchronous_standby_names') = 'nosuchstandby' AND accelerated FROM pmwal_status}),
	'a synchronous standby requested: WAL syncs are still answered from the ring');
my $syncrep = $node->background_psql('postgres', on_error_stop => 0);
$syncrep->query_until(qr/started/, "\\echo started\nINSERT INTO t VALUES (95000, 'syncrep');\n");
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	'the commit waits for the synchronous standby');
$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'});
$syncrep->quit;
$node->append_conf('postgresql.conf', "synchronous_standby_names = ''");
$node->reload;
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 95000'), '1',
	'a cancelled wait leaves the commit committed locally, as in stock PostgreSQL');

# --- the flusher killed with SIGKILL under load: the server crash-restarts,
# the ring is restored, no acknowledged commit is missing, and the flusher
# comes back.  pgbench's per-transaction log lists the acknowledged commits.
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->reload;
$node->safe_psql('postgres', 'CREATE TABLE acked (id bigint PRIMARY KEY)');
my $script = $node->basedir . '/acked.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"\\set id random(1, 1000000000000)\nINSERT INTO acked VALUES (:id + :client_id);\n");
my $txlog = $node->basedir . '/txlog';
my ($bench_out, $bench_err) = ('', '');
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-T', '60', '-f', $script, '-l',
	  "--log-prefix=$txlog", '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$bench_out, '2>', \$bench_err);
ok( $node->poll_query_until('postgres', 'SELECT count(*) >= 500 FROM acked'),
	'load is running');
$pid = pmwal_status($node)->{flusher_pid};
kill 'KILL', $pid;
$bench->finish;
ok($node->wait_for_log(qr/all server processes terminated; reinitializing/),
	'the server crash-restarts after the flusher was killed');
ok($node->poll_query_until('postgres', 'SELECT accelerated AND flusher_pid IS NOT NULL FROM pmwal_status'),
	'the flusher is back and commits are accelerated again');
my @acked;
for my $f (glob("$txlog.*"))
{
	for (split /\n/, slurp_file($f))
	{
		my @f = split / /;
		push @acked, $_ if @f >= 6 && $f[2] =~ /^\d+$/;
	}
}
my $acked_count = scalar @acked;
my $present = $node->safe_psql('postgres', 'SELECT count(*) FROM acked');
cmp_ok($acked_count, '>=', 500, "pgbench acknowledged $acked_count commits before the kill");
cmp_ok($present, '>=', $acked_count, "all $acked_count acknowledged commits are present ($present rows)");

# --- wal_sync_method = open_datasync: PostgreSQL writes WAL with O_DSYNC and
# never syncs it; pmwal retires the ring and leaves it to PostgreSQL, at a
# reload and at a start
$node->append_conf('postgresql.conf', 'wal_sync_method = open_datasync');
$node->reload;
$node->safe_psql('postgres', "INSERT INTO t VALUES (96000, 'dsync')");
ok( $node->poll_query_until(
		'postgres', q{SELECT NOT accelerated AND reason ~ 'open_datasync' FROM pmwal_status}),
	'switching to open_datasync at reload makes pmwal stand aside, and says why');
$node->restart;
$before = pmwal_status($node);
$node->safe_psql('postgres', "INSERT INTO t VALUES (96000 + $_, 'dsync')") for 1 .. 10;
$after = pmwal_status($node);
is($after->{ring_writes}, $before->{ring_writes}, 'open_datasync at start: WAL is not copied');
cmp_ok($after->{pass_writes} - $before->{pass_writes}, '>=', 10, 'open_datasync: WAL is written through');
$node->append_conf('postgresql.conf', 'wal_sync_method = fdatasync');
$node->restart;
$node->safe_psql('postgres', "INSERT INTO t VALUES (97000, 'fdatasync')");
ok(wait_accelerated($node, 't'), 'fdatasync again: accelerated');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 60000'), '20042',
	'all rows survived the restarts');

# --- summarize_wal (17 and later): the WAL summarizer reads WAL up to the
# flush pointer, which pmwal never moves past WAL that is not durable: it
# runs alongside the ring
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 170000)
{
	$node->append_conf('postgresql.conf', 'summarize_wal = on');
	$node->reload;
	$node->safe_psql('postgres', "INSERT INTO t VALUES (98000 + $_, 'summ')") for 1 .. 10;
	$node->safe_psql('postgres', 'CHECKPOINT');
	ok( $node->poll_query_until(
			'postgres', q{SELECT count(*) > 0 FROM pg_available_wal_summaries()}),
		'summarize_wal = on: WAL is summarized');
	is(pmwal_status($node)->{accelerated}, 'true', 'summarize_wal = on: still accelerated');
}
$node->stop;

done_testing();

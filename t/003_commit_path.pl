# The commit path: commits go through the ring and move the counters; a
# commit too large for the ring falls back and is counted; pmwal.enabled
# switches online; wal_sync_method = open_datasync is refused; 2PC, DROP
# TABLE and a long transaction across checkpoints and WAL switches work.
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

my $node = pmwal_node(
	'commit',
	init => { allows_streaming => 1 },
	conf => qq{
max_prepared_transactions = 5
wal_writer_delay = 10s
});
$node->start;
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY, v text)');
ok(wait_accelerated($node, 't'), 'commits are accelerated once the flusher anchored the ring');
ok($node->log_contains(qr/pmwal ring ".*" anchored at [0-9A-F]+\/[0-9A-F]+; commits are made durable through it/),
	'anchoring is logged');

# --- commits move the counters, and PostgreSQL stops fsyncing WAL
my $before = pmwal_status($node);
reset_wal_stats($node);
$node->safe_psql('postgres', "INSERT INTO t VALUES ($_, 'x')") for 1 .. 200;
my $after = pmwal_status($node);
cmp_ok($after->{ring_commits} - $before->{ring_commits}, '>=', 200,
	'200 commits went through the ring');
cmp_ok($after->{ring_copies}, '>', $before->{ring_copies}, 'WAL was copied into the ring');
cmp_ok($after->{bytes_copied}, '>', $before->{bytes_copied}, 'bytes copied are counted');
my $wal_syncs = wal_fsyncs($node);
cmp_ok($wal_syncs, '<', 20, "PostgreSQL itself fsynced WAL only $wal_syncs times for 200 commits");
is($after->{state}, 'in use', 'ring state is "in use"');
ok(defined $after->{flusher_pid} && $after->{flusher_pid} > 0, 'flusher pid is shown');

# read-only transactions cost nothing
$before = pmwal_status($node);
$node->safe_psql('postgres', 'SELECT count(*) FROM t') for 1 .. 20;
$after = pmwal_status($node);
is($after->{ring_commits}, $before->{ring_commits}, 'read-only transactions do not touch the ring');

# --- a commit whose WAL exceeds a quarter of the ring is synced instead
# (8MB ring: more than 2MB of WAL in one go; wal_writer_delay = 10s keeps
# the WAL writer from flushing it in between)
$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
$node->safe_psql('postgres', 'CHECKPOINT');
$before = pmwal_status($node);
# The 3MB logical message is one WAL record, inserted just before the commit
# record, so no flush by another process can cut the commit's tail short.
$node->safe_psql('postgres', q{
BEGIN;
INSERT INTO t SELECT g, repeat('y', 200) FROM generate_series(1000, 21000) g;
SELECT pg_logical_emit_message(true, 'pmwal', repeat('y', 3000000));
COMMIT;});
$after = pmwal_status($node);
is($after->{fallback_large} - $before->{fallback_large}, 1,
	'a commit larger than the copy limit falls back to a sync and is counted');
# Until the flusher has synced the large commit's WAL and started the ring
# over behind it, small commits fall back too (the ring would have to copy
# that gap first); wait for it, under load it can take a moment (CI).
my $large_end = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
ok($node->poll_query_until('postgres',
		"SELECT head_lsn >= '$large_end'::pg_lsn FROM pmwal_status"),
	'the flusher starts the ring over behind the large commit');
$after = pmwal_status($node);
cmp_ok($after->{segments_synced}, '>', $before->{segments_synced},
	'the large commit\'s WAL segments were synced');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 1000'), '20001',
	'the large commit is there');
$node->safe_psql('postgres', "INSERT INTO t VALUES (50000, 'after large')");
$after = pmwal_status($node);
cmp_ok($after->{ring_commits}, '>', $before->{ring_commits},
	'the next small commit goes through the ring again');

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

# --- a long open transaction across WAL switches and checkpoints: the
# segments its WAL started in are recycled before it commits
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
$node->safe_psql('postgres', "INSERT INTO t VALUES (70001, 'after')");
ok(wait_accelerated($node, 't'), 'still accelerated after recycling');

# --- pmwal.enabled off and on, online
$node->append_conf('postgresql.conf', 'pmwal.enabled = off');
$node->reload;
ok(wait_accelerated($node, 'f'), 'pmwal.enabled = off stops acceleration');
ok( $node->poll_query_until(
		'postgres', q{SELECT reason = 'pmwal.enabled is off' AND state = 'empty' AND bytes_in_use = 0 FROM pmwal_status}),
	'the flusher drained the ring and the status says why');
$before = pmwal_status($node);
reset_wal_stats($node);
$node->safe_psql('postgres', "INSERT INTO t VALUES (80000 + $_, 'off')") for 1 .. 20;
$after = pmwal_status($node);
is($after->{ring_commits}, $before->{ring_commits}, 'disabled: commits do not use the ring');
cmp_ok(wal_fsyncs($node), '>=', 20,
	'disabled: PostgreSQL fsyncs each commit itself');
$node->append_conf('postgresql.conf', 'pmwal.enabled = on');
$node->reload;
ok(wait_accelerated($node, 't'), 'pmwal.enabled = on resumes acceleration');
$node->safe_psql('postgres', "INSERT INTO t VALUES (90000, 'on again')");
cmp_ok(pmwal_status($node)->{ring_commits}, '>', $after->{ring_commits},
	'enabled again: commits use the ring');

# --- the flusher terminated on its own drains the ring and comes back
# (it has no PGPROC in the proc array, so pg_terminate_backend cannot reach it)
my $pid = pmwal_status($node)->{flusher_pid};
kill 'TERM', $pid;
ok( $node->poll_query_until(
		'postgres', "SELECT accelerated AND flusher_pid <> $pid FROM pmwal_status"),
	'a terminated flusher is restarted and anchors again');

# --- a synchronous standby requested: pmwal stands aside, and a commit
# still waits for the (absent) standby instead of being forced async
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nosuchstandby'");
$node->reload;
ok( $node->poll_query_until(
		'postgres', q{SELECT NOT accelerated AND reason ~ 'synchronous replication' FROM pmwal_status}),
	'a synchronous standby requested makes pmwal stand aside, and says why');
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
ok(wait_accelerated($node, 't'), 'without a synchronous standby, commits are accelerated again');

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
ok(wait_accelerated($node, 't'), 'the flusher is back and commits are accelerated again');
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

# --- wal_sync_method = open_datasync: refused at start, stood aside at reload
$node->append_conf('postgresql.conf', 'wal_sync_method = open_datasync');
$node->reload;
ok( $node->poll_query_until(
		'postgres', q{SELECT NOT accelerated AND reason = 'wal_sync_method is open_sync or open_datasync' FROM pmwal_status}),
	'switching to open_datasync at reload makes pmwal stand aside');
$node->stop;
my $log_pos = -s $node->logfile;
ok(!$node->start(fail_ok => 1), 'server refuses to start with open_datasync');
like(
	substr(slurp_file($node->logfile), $log_pos),
	qr/FATAL:  pmwal cannot be used with wal_sync_method = open_datasync/,
	'the refusal names the setting');
$node->append_conf('postgresql.conf', 'wal_sync_method = fdatasync');
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 60000'), '20029',
	'all rows survived the restarts');

# --- summarize_wal (17 and later): the WAL summarizer turns WAL up to the
# flush pointer into summary files that incremental backups trust; pmwal
# drains the ring and stands aside while it is on
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 170000)
{
	wait_accelerated($node, 't') or die 'commits are not accelerated';
	$node->append_conf('postgresql.conf', 'summarize_wal = on');
	$node->reload;
	ok( $node->poll_query_until(
			'postgres', q{SELECT NOT accelerated AND reason = 'summarize_wal is on' AND state = 'empty' FROM pmwal_status}),
		'summarize_wal = on: pmwal drains the ring and stands aside');
	my $before = pmwal_status($node);
	$node->safe_psql('postgres', "INSERT INTO t VALUES (90000 + $_, 'summ')") for 1 .. 10;
	is(pmwal_status($node)->{ring_commits}, $before->{ring_commits},
		'summarize_wal = on: commits do not use the ring');
	$node->append_conf('postgresql.conf', 'summarize_wal = off');
	$node->reload;
	ok(wait_accelerated($node, 't'), 'summarize_wal = off: pmwal takes commits again');
}

# --- an idle backend does not keep a removed segment's disk space (issue 9,
# item 7): the copy reads WAL through a mapping of its segment, which is
# released a second after the backend last copied
$node->append_conf('postgresql.conf', "wal_recycle = off\nwal_keep_size = 0\n");
$node->restart;
wait_accelerated($node, 't') or die 'commits are not accelerated';
my ($idle_in, $idle_out) = ('', '');
my $idle = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-f', '-' ],
	'<', \$idle_in, '>', \$idle_out);
$idle_in .= "INSERT INTO t VALUES (99999, 'idle'); SELECT pg_backend_pid();\n";
$idle->pump until $idle_out =~ /^(\d+)$/m;
my $idle_pid = $1;
my $maps = sub {
	open my $fh, '<', "/proc/$idle_pid/maps" or return '';
	local $/;
	my $m = <$fh>;
	return join("\n", grep { m{/pg_wal/} } split /\n/, $m);
};
# the segment it copied from is removed by later checkpoints
for (1 .. 3)
{
	$node->safe_psql('postgres', q{INSERT INTO t VALUES (-1, 'x'); DELETE FROM t WHERE id = -1; SELECT pg_switch_wal()});
	$node->safe_psql('postgres', 'CHECKPOINT');
}
my $released = 0;
for (1 .. 100)
{
	last if $released = $maps->() eq '';
	Time::HiRes::sleep(0.05);
}
ok($released, 'an idle backend no longer maps any WAL segment') or diag($maps->());
$idle_in .= "\\q\n";
$idle->finish;
$node->stop;

done_testing();

# The write window: between a commit's write without fsync and its ring
# copy, PostgreSQL trusts WAL that only the page cache holds.  Everything
# that could keep those bytes out of the ring is decided before the write,
# nothing waits after it, and no such write creates a segment file.
#
#	1. issue 9, item 3: the ring is nearly full and the flusher stopped; a
#	   commit writes 300 kB.  It must not write first and then wait: while
#	   it waits, another session evicts the page it updated; after a power
#	   cut the never-acknowledged update must not reappear when its xid is
#	   handed out again.
#	2. issue 9, item 5: a transaction without an xid that wrote WAL (here a
#	   non-transactional logical message) is not a commit anyone was
#	   promised: it must not wait for ring space.
#	3. issue 14, item 1: a write without fsync crosses into a new segment
#	   while the flusher is stopped, then a checkpoint writes its record
#	   there and the power goes: the segment's directory entry must be
#	   durable (the flusher prepared it), so the cluster starts and nothing
#	   acknowledged is lost.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;

# Checkpoint, then wait until the ring covers all WAL flushed: what the
# setup wrote outside commits (on 18, with data checksums, hint bits write
# whole pages) would otherwise count towards the first commit after the
# flusher stops, and every commit would be too large for the ring.
sub settle
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->poll_query_until('postgres', q{
SELECT GREATEST(head_lsn, durable_lsn) >= pg_current_wal_flush_lsn() FROM pmwal_status})
	  or die 'the ring does not catch up with the WAL flushed';
	return;
}

# Commit logical messages until the ring (8 MB, flusher stopped) holds
# within $slack bytes of its capacity, or a commit no longer fits.
sub fill_ring
{
	my ($node, $slack) = @_;
	for (1 .. 40)
	{
		my $st = pmwal_status($node);
		my $room = $st->{capacity} - $st->{bytes_in_use} - $slack;
		last if $room <= 0;
		my $full = $st->{fallback_full};
		my $size = $room > $MB ? $MB : ($room > 2000 ? $room - 1000 : 1000);
		$node->safe_psql('postgres',
			"SELECT pg_logical_emit_message(true, 'fill', repeat('x', $size))");
		last if pmwal_status($node)->{fallback_full} > $full;
	}
	return pmwal_status($node);
}

# --- 1. no waiting after the write (issue 9, item 3) ------------------------
{
	my $node = pmwal_node('evict', size => '8MB', conf => QUIET_WAL . q{
pmwal.flush_interval = 60s
shared_buffers = 16MB
wal_buffers = 4MB
autovacuum = off
});
	powercut_start($node);
	$node->safe_psql('postgres', q{
CREATE EXTENSION pmwal; CREATE EXTENSION pg_prewarm;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'orig');
CREATE TABLE filler AS SELECT g, repeat('f', 200) AS f FROM generate_series(1, 100000) g});
	# prune now: a later query that prunes a catalog page would write WAL
	# and, on the code before the fix, flush it (hiding the window)
	$node->safe_psql('postgres', 'VACUUM');
	wait_accelerated($node, 't') or die 'evict: commits are not accelerated';
	settle($node);
	# the WAL writer, woken by an asynchronous commit record, may flush it
	# for real before the committer's own write without fsync, hiding the
	# window: stopped, the committer's write is the one that counts
	stop_server_process($node, 'flusher');
	stop_server_process($node, 'walwriter');
	my $st = fill_ring($node, 200 * 1024);
	note("evict: the ring holds $st->{bytes_in_use} of $st->{capacity} bytes");

	# the update and a 300 kB message, then COMMIT: no room for it
	my $bg = bg_psql($node, 'BEGIN', q{UPDATE t SET v = 'unacked' WHERE id = 1},
		q{SELECT pg_logical_emit_message(true, 'big', repeat('y', 300000))}, 'COMMIT');
	$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE query = 'COMMIT' AND wait_event_type = 'Extension'})
	  or die 'evict: the commit does not wait for room';
	ok(1, 'evict: the commit waits for room in the ring');

	# evict the updated page: it is written to the data file now
	$node->safe_psql('postgres', q{SELECT pg_prewarm('filler', 'buffer') FROM generate_series(1, 3)});
	my $file = $node->data_dir . '/'
	  . $node->safe_psql('postgres', q{SELECT pg_relation_filepath('t')});
	ok(slurp_file($file) =~ /unacked/, 'evict: the page with the unacknowledged update is on disk');
	is($node->safe_psql('postgres', q{
SELECT count(*) FROM pg_stat_activity
 WHERE query = 'COMMIT' AND wait_event_type = 'Extension'}), '1',
		'evict: the commit still waits when the power goes');

	my $cut = powercut($node);
	note("evict: $cut->{summary}");
	my ($rc) = bg_psql_finish($bg);
	isnt($rc, 0, 'evict: the commit was never acknowledged');
	$node->start;
	my $v1 = $node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 1');
	# hand out the next xids: if the lost transaction's xid is among them,
	# its update becomes visible as if committed
	$node->safe_psql('postgres', 'SELECT txid_current()') for 1 .. 5;
	my $v2 = $node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 1');
	is($v2, $v1, "evict: the row stays as recovery left it ($v1) when xids are reused");
	$node->stop;
}

# --- 2. a transaction without an xid does not wait (issue 9, item 5) -------
{
	my $node = pmwal_node('readonly', size => '8MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die 'readonly: commits are not accelerated';
	settle($node);
	stop_server_process($node, 'flusher');
	stop_server_process($node, 'walwriter');
	fill_ring($node, 200 * 1024);

	# R writes WAL without an xid, then sleeps; C commits meanwhile (and,
	# the ring being full, waits for room); then R commits
	my $r = bg_psql($node, 'BEGIN', q{SELECT pg_logical_emit_message(false, 'r', 'x')},
		'SELECT pg_sleep(0.5)', 'COMMIT');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(0.5)'})
	  or die 'readonly: R does not run';
	my $waits = pmwal_status($node)->{space_waits};
	my $c = bg_psql($node, q{SELECT pg_logical_emit_message(true, 'c', repeat('z', 300000))});
	my $t0 = Time::HiRes::time();
	my ($rc_r) = bg_psql_finish($r);
	my $r_took = Time::HiRes::time() - $t0;
	bg_psql_finish($c);
	is($rc_r, 0, 'readonly: R committed');
	is(pmwal_status($node)->{space_waits} - $waits, 1,
		"readonly: only the commit with an xid waited for room (R's commit took ${r_took}s after C began)");
	$node->stop('immediate');
}

# --- 3. a checkpoint in a segment a write without fsync entered (14.1) -----
{
	my $node = pmwal_node('ckpt', size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\n");
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die 'ckpt: commits are not accelerated';
	my $load = acked_load_start($node, tag => 'ckpt');
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "ckpt: the load does not run: ${ $load->{err} }";
	my $prepared = pmwal_status($node)->{segments_prepared} // 0;
	stop_server_process($node, 'flusher');
	my $seg = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
	$node->poll_query_until('postgres',
		"SELECT pg_walfile_name(pg_current_wal_insert_lsn()) > '$seg'")
	  or die 'ckpt: the load does not reach the next segment';
	# no commit follows to carry the checkpoint record into the ring
	$load->{h}->kill_kill;
	acked_load_finish($load);
	$node->safe_psql('postgres', 'CHECKPOINT');
	cmp_ok($prepared, '>', 0, "ckpt: the flusher had prepared segments ahead ($prepared)");
	my $redo = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
	my $cut = powercut($node);
	note("ckpt: checkpoint redo $redo; $cut->{summary}");
	# The hazard is the directory entry of the segment holding the
	# checkpoint record: on the code before the fix a write without fsync
	# created it and nothing synced pg_wal/ (the cut then undid its rename
	# and the start failed with "could not locate a valid checkpoint
	# record").  Now the flusher created it ahead, with pg_wal/ synced.
	is($cut->{renames}, 0, 'ckpt: no segment rename was lost in the power cut');
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), 'ckpt: the server starts after the power cut')
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "ckpt: all $n acknowledged commits are present");
		$node->stop;
	}
}

done_testing();

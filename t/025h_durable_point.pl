# What pmwal gives up from its ring must be synced in pg_wal: three places
# where the sync layer gave up acknowledged WAL (adversarial review of the
# sync layer, issue 20; all three lost acknowledged commits, or left a start
# refused, before 9e5f472).  Each is a power cut with every acknowledged
# commit checked afterwards.
#
#	1. checkpoint: before every write of pg_control, pmwal syncs pg_wal for
#	   real and then gives up the ring (wal_ring.c ring_on_control_write ->
#	   ring_make_durable).  The real sync runs with sync_lock held, not
#	   ring_lock nor PostgreSQL's WALWriteLock: commits go on meanwhile,
#	   their syncs answered from the ring.  Giving up the whole ring
#	   afterwards gave up their WAL too: the checkpointer is held at
#	   durable_after_sync, a commit is acknowledged, the checkpointer goes
#	   on, the power is cut.
#	2. segment end: pmwal's durable point is the end of the last write its
#	   real sync covered, a page end.  XLogWrite rewrites the last, partial
#	   page at the next commit; when that page is the last of a segment, a
#	   later real sync (pmwal_sync_range) began at the next segment and never
#	   synced the rewritten page again, and the ring gave it up.  The WAL is
#	   padded to the last page of a segment, the flusher makes one pass
#	   there, a commit rewrites the page, another crosses into the next
#	   segment, the flusher makes another pass, the power is cut.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'the old build has neither point' if OLD_BUILD();

sub ring_note
{
	my ($node, $when) = @_;
	my $st = pmwal_status($node);
	note("$when: ring [$st->{tail_lsn}, $st->{head_lsn}), durable_lsn $st->{durable_lsn}");
	return $st;
}

# --- 1. a commit during a checkpoint's pg_control sync ------------------------
{
	my $node = mode_node('ckpt', size => '64MB', conf => QUIET_WAL . "pmwal.flush_interval = 60s\n");
	powercut_start($node);
	create_pmwal($node);
	$node->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY)');
	wait_accelerated($node, 't') or die 'commits are not accelerated';
	# a checkpoint first: what is written after it stays below the
	# checkpointer's early sync of pg_wal (ring_on_checkpointer_sync, which
	# passes durable_after_sync too), so the hold below is the one before
	# pg_control is written (on 19 the table's creation alone passed it)
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 20;
	stop_server_process($node, $_) for qw(walwriter flusher);

	# only the checkpointer reaches durable_after_sync now (the flusher is
	# held elsewhere, and no write finds the 64 MB ring full)
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = 'durable_after_sync'; SELECT pg_reload_conf()");
	my $ckpt = bg_psql($node, 'CHECKPOINT');
	my $ckpt_pid = pause_or_exit($node, 'durable_after_sync', $offset, $ckpt, 120);
	ok($ckpt_pid, 'checkpoint: the checkpointer is held between its real sync of pg_wal and giving up the ring');
	is($node->safe_psql('postgres', "SELECT backend_type FROM pg_stat_activity WHERE pid = $ckpt_pid"),
		'checkpointer', 'checkpoint: the process held is the checkpointer');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause; SELECT pg_reload_conf()');

	# commits meanwhile: one that rewrites the last page the checkpointer
	# synced, one that goes beyond it
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (1000)');
	$node->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(2000, 2999) g');
	my $commit_end = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	my $st = ring_note($node, 'checkpoint: while held');
	cmp_ok(lsn_num($st->{head_lsn}), '>=', $commit_end, 'checkpoint: the acknowledged commits are in the ring');

	pause_release($node, 'durable_after_sync');
	my ($rc, undef, $err) = bg_psql_finish($ckpt);
	is($rc, 0, 'checkpoint: the checkpoint finished') or diag($err);
	$st = ring_note($node, 'checkpoint: after it');
	cmp_ok(lsn_num($st->{tail_lsn}), '<', $commit_end,
		'checkpoint: the ring still holds the WAL its real sync did not cover');

	my $cut = powercut($node);
	note($cut->{summary});
	$node->start;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 1000'), '1001',
		'checkpoint: the 2 commits acknowledged during the checkpoint survived the power cut');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id < 1000'), '20',
		'checkpoint: and every commit before it');
	$node->stop;
}

# A node on 1 MB segments, its flusher held (flusher_sleep: one pass at a
# time), committed until the insert position lies in the last page of a
# segment.  Returns the node, the insert position and the segment's end.
sub segment_end_node
{
	my ($name) = @_;
	my $SEG = 1024 * 1024;
	my $node = mode_node($name, size => '64MB', init => { extra => ['--wal-segsize=1'] },
		conf => QUIET_WAL . "pmwal.flush_interval = 10ms\nfull_page_writes = off\nautovacuum = off\n");
	powercut_start($node);
	create_pmwal($node);
	$node->safe_psql('postgres', 'CREATE TABLE t (id int); INSERT INTO t VALUES (1); CHECKPOINT');
	wait_accelerated($node, 't') or die 'commits are not accelerated';
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (2)');
	flusher_hold($node, at => 'flusher_sleep');
	my $pos = pad_into_last_page($node, $SEG);
	return ($node, $pos, (int($pos / $SEG) + 1) * $SEG);
}

# --- 2. the rewritten last page of a segment ----------------------------------
{
	my ($node, $pos, $segend) = segment_end_node('segend');
	note(sprintf('segend: the insert position %X/%X is in the last page of the segment ending at %X/%X',
		$pos / 2**32, $pos % 2**32, $segend / 2**32, $segend % 2**32));
	flusher_pass($node);
	my $st = ring_note($node, 'segend: after a flusher pass');
	is(lsn_num($st->{durable_lsn}), $segend, 'segend: pmwal synced pg_wal up to the end of the segment');

	# C1 rewrites the segment's last page, C2 goes on into the next segment
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (100)');
	my $c1 = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	cmp_ok($c1, '<', $segend, 'segend: commit C1 ends in the last page of the segment');
	$node->safe_psql('postgres',
		"BEGIN; INSERT INTO t VALUES (101); SELECT pg_logical_emit_message(true, 'c2', repeat('y', 20000)); COMMIT");
	my $c2 = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	cmp_ok($c2, '>', $segend, 'segend: commit C2 ends in the next segment');
	flusher_pass($node);
	$st = ring_note($node, 'segend: after the next flusher pass');

	my $cut = powercut($node);
	note($cut->{summary});
	$node->append_conf('postgresql.conf', "pmwal.test_pause = ''\n");
	unlink $node->data_dir . '/postgresql.auto.conf';
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), 'segend: the node starts after the power cut')
	  or diag(slurp_file($node->logfile, $offset) =~ /((?:FATAL|PANIC):.*\n(?:.*DETAIL:.*)?)/);
	is($node->{_pid} ? $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id IN (100, 101)') : 'no start', '2',
		'segend: both commits acknowledged after the real sync at the end of the segment survived the power cut');
	$node->stop if $node->{_pid};
}

# --- 3. the ring retired after the last page of a segment was rewritten ------
# Same as 2, but the ring is retired (pmwal.enabled off) instead of freed by
# the flusher: a retirement syncs "everything written" for real, then
# empties the ring -- a sync that was skipped, as nothing seemed written
# since the durable point, though the last page was.  The retiring write
# (C2) rewrites that page in pg_wal and PostgreSQL syncs it itself: C2 is
# held by gdb before that sync (issue_xlog_fsync) when the power goes.
{
	my ($node, $pos, $segend) = segment_end_node('retire');
	flusher_pass($node);
	is(lsn_num(pmwal_status($node)->{durable_lsn}), $segend, 'retire: pmwal synced pg_wal up to the end of the segment');
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (100)');
	cmp_ok(lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()')), '<', $segend,
		'retire: commit C1 ends in the last page of the segment');
	# pmwal.enabled off; the flusher carries it to every process, and has
	# nothing to sync (nothing was written past the durable point)
	$node->append_conf('postgresql.conf', "pmwal.enabled = off\n");
	$node->reload;
	pause_release($node, 'flusher_sleep');
	$node->poll_query_until('postgres', "SELECT reason = 'pmwal.enabled is off' FROM pmwal_status")
	  or die 'pmwal.enabled does not go off';
	# C2's write is the first the ring cannot take: it retires the ring,
	# then rewrites the page in pg_wal, and PostgreSQL syncs it itself.
	# C2 is held by gdb before that sync.
	my $s = psql_session($node);
	gdb_hold_commit($node, $s,
		"BEGIN; INSERT INTO t VALUES (101); SELECT pg_logical_emit_message(true, 'c2', repeat('y', 20000)); COMMIT;\n");
	my $st = ring_note($node, 'retire: C2 held after the ring retired');
	is($st->{accelerated}, 'false', 'retire: the ring retired');
	my $cut = powercut($node);
	note($cut->{summary});
	unlink $node->data_dir . '/postgresql.auto.conf';
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), 'retire: the node starts after the power cut')
	  or diag(slurp_file($node->logfile, $offset) =~ /((?:FATAL|PANIC):.*\n(?:.*DETAIL:.*)?)/);
	is($node->{_pid} ? $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 100') : 'no start', '1',
		'retire: the commit acknowledged before the ring retired survived the power cut');
	$node->stop if $node->{_pid};
}

done_testing();

# The ring's positions never move backwards over acknowledged WAL.
#
# Each scenario holds a process at a test pause point (test_pause.c) at the
# moment a position moves, lets a commit be acknowledged meanwhile, then
# kills the server and cuts the power (tools/powercut) and counts what was
# acknowledged.  A negative control (the same data directory started
# without its ring) shows each time that only the ring held the commit.
#
#	1. issue 9, item 1: the flusher re-anchors the ring (restart_ring)
#	   after syncing to a new boundary B, while a commit has copied past B
#	   and was acknowledged.  The re-anchor must not move head back to B.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# A node under the power-cut log whose WAL only pmwal syncs.
sub quiet_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '8MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\n" . ($opts{conf} // ''));
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	return $node;
}

# Arm pause points in the flusher (it reads them at its next reload).
sub arm_flusher
{
	my ($node, $points) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = '$points'; SELECT pg_reload_conf()");
	return;
}

# --- 1. re-anchor racing a commit (issue 9, item 1) -------------------------
{
	my $node = quiet_node('reanchor');
	arm_flusher($node, 'restart_after_sync,restart_done');
	# pg_switch_wal() leaves the rest of the segment for the flusher to
	# cover: more than a quarter of the 8 MB ring, so it restarts the ring
	# at a freshly synced boundary.  The flusher may take a moment to read
	# the new setting; switch until it holds.
	my $offset = -s $node->logfile;
	my $id = 0;
	my $held;
	for (1 .. 50)
	{
		$id++;
		$node->safe_psql('postgres', "INSERT INTO t VALUES ($id); SELECT pg_switch_wal()");
		last if $held = eval { pause_wait($node, 'restart_after_sync', $offset, 2) };
	}
	ok($held, 'reanchor: the flusher is held after syncing to a new boundary');

	# meanwhile a commit copies past that boundary and is acknowledged
	my $ack = $node->safe_psql('postgres',
		"INSERT INTO t VALUES (1000000) RETURNING pg_current_wal_insert_lsn()");
	my $st = pmwal_status($node);
	my $head_acked = lsn_num($st->{head_lsn});
	cmp_ok($head_acked, '>', lsn_num($st->{tail_lsn}),
		"reanchor: the acknowledged commit is in the ring (head $st->{head_lsn})");

	pause_release($node, 'restart_after_sync');
	pause_wait($node, 'restart_done', $offset);
	$st = pmwal_status($node);
	cmp_ok(lsn_num($st->{head_lsn}), '>=', $head_acked,
		"reanchor: the ring head did not move back ($st->{head_lsn})");

	my $cut = powercut($node);
	note("reanchor: $cut->{summary}");
	is(without_ring_query($node, 'SELECT count(*) FROM t WHERE id = 1000000') // 'no start', '0',
		'reanchor: negative control: without the ring the acknowledged row is lost');
	pause_release($node, 'restart_done');
	$node->start;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 1000000'), '1',
		'reanchor: the acknowledged row survives the power cut');
	$node->stop;
}

done_testing();

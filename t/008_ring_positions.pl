# The ring's positions never move back over acknowledged WAL.
#
# With the sync layer (wal_ring.c) the ring's tail moves only after a real
# sync of pg_wal: the flusher's pass, a writer that finds the ring full,
# the retirement of the ring, and the sync before every write of
# pg_control.  Each scenario holds a process at a test pause point
# (test_pause.c) at such a move, lets a commit be acknowledged meanwhile
# where that is possible, then kills every server process and cuts the
# power (tools/powercut) and checks every acknowledged row.  A negative
# control -- the same data directory started without its ring
# (without_ring_query) -- shows each time that the cut did take WAL that
# only the ring held.
#
# The old test (issue 9, item 1: the flusher's re-anchor, restart_ring,
# racing a commit that copied past the new boundary) has no counterpart:
# the flusher never re-anchors the ring now; its pass only moves the tail
# up to the last page it synced (free_to), and a re-anchor happens only
# after a retirement, inside the WAL write that follows.  The moves there
# are now:
#
#	1. pass: the flusher held after its real syncs, before it moves the
#	   tail (durable_after_sync), while commits are acknowledged -- one
#	   ending in the page the sync covered last (XLogWrite writes it
#	   again), one beyond; then held after the move (flusher_after_free)
#	   while another is acknowledged.
#	2. seg_end_page: a pass that syncs up to the end of a segment whose
#	   last page is partly written; a commit then writes that page again
#	   (and the next segment on), and the next pass syncs only from
#	   durable_lsn's segment on and frees the ring past the page: the
#	   page's new version was in neither (FOUND BY THIS TEST: the restart
#	   was refused, "does not connect to the WAL in pg_wal", rows lost;
#	   fixed in 9e5f472: a real sync starts at the segment of the byte
#	   before durable_lsn).
#	3. ring_full: a writer that finds the (2 MB) ring full syncs pg_wal
#	   itself and frees it (ring_full counter); held after its sync
#	   (durable_after_sync).  It holds WALWriteLock there, so no commit
#	   can be acknowledged meanwhile: commits follow the move.
#	4. retire: pmwal.enabled off; the next WAL write retires the ring
#	   (retire_after_sync: everything synced, the ring still claiming its
#	   WAL), a power cut there (the restore writes WAL pg_wal already has:
#	   it must be accepted and change nothing); then commits with
#	   PostgreSQL's own (real) syncs, pmwal.enabled on, the next write
#	   anchors the ring again, commits through it, a power cut.
#	5. large_write: a single WAL write larger than the ring (2 MB ring,
#	   wal_buffers 16 MB) retires it (retire_after_sync), the next write
#	   anchors it again; commits through it, a power cut.
#	6. control: the sync before a pg_control write (CHECKPOINT), three
#	   rounds with a commit acknowledged while the checkpointer is held
#	   (a) before its sync (control_before_sync), (b) after its real
#	   sync, before it gives up the ring (durable_after_sync in the
#	   checkpointer: FOUND BY THIS TEST, the acknowledged row was lost:
#	   the ring was emptied over WAL the sync had not covered; fixed in
#	   9e5f472: it is given up only up to the page the next write may
#	   rewrite), (c) after
#	   the ring was given up, before pg_control is written
#	   (control_after_sync; the cut comes there, pg_control still naming
#	   the previous checkpoint).
#	7. checkpointer_presync: the checkpointer's real sync of pg_wal at its
#	   first sync of a data file, before the pg_control write (which then
#	   syncs, under ControlFileLock, only what came since); held before
#	   and after it, a commit acknowledged meanwhile, then a power cut.
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
my $SEG = 16 * 1024 * 1024;

# Negative control: how many of @ids a copy started without the ring lacks.
sub lost_without_ring
{
	my ($node, @ids) = @_;
	my $n = without_ring_query($node,
		'SELECT count(*) FROM t WHERE id IN (' . join(',', @ids) . ')');
	return defined $n ? @ids - $n : scalar @ids;
}

# After a power cut: the negative control, then the start with the ring
# and every acknowledged id there.
sub cut_and_check
{
	my ($node, $tag, $acked, $only_ring) = @_;
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $lost = lost_without_ring($node, @$only_ring);
	cmp_ok($lost, '>', 0,
		"$tag: negative control: without the ring $lost of the rows acknowledged through it (@$only_ring) are lost");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	# under the power-cut log again: a later round cuts once more
	ok(powercut_start($node, fail_ok => 1), "$tag: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC|DETAIL/ } split /\n/, slurp_file($node->logfile, $offset)));
	return unless $node->{_pid};
	is(ids_present($node, @$acked), join(',', sort { $a <=> $b } @$acked),
		"$tag: all " . scalar(@$acked) . ' acknowledged rows survive the power cut');
	return;
}

# --- 1. the flusher's pass ---------------------------------------------------
{
	my $tag = 'pass';
	my $node = quiet_node($tag);
	stop_server_process($node, 'walwriter');
	flusher_hold($node);
	arm_all($node, 'flusher_loop,durable_after_sync,flusher_after_free');
	# one round for the flusher to read the new points
	flusher_pass($node);
	# the first change of t's pages after the checkpoint, with its full
	# page images; then rows 1 to 5 in a fresh page, leaving room in it
	acked_insert($node, 0);
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	advance_to($node, $x - $x % 8192 + 8192 + 200, $x - $x % 8192 + 8192 + 1000);
	my @acked = (0 .. 5);
	acked_insert($node, $_) for 1 .. 5;
	flusher_release_to($node, 'durable_after_sync');
	my $st = pmwal_status($node);
	my $durable = lsn_num($st->{durable_lsn});
	note("$tag: held after the pass's sync: " . status_line($node));
	# a commit that ends in the page the sync covered last, and one beyond it
	my $f6 = acked_insert($node, 6);
	cmp_ok($f6 - 1, '<', $durable,
		"$tag: row 6 ends in the page the held sync covered last (" . lsn_text($f6) . ', durable ' . lsn_text($durable) . ')');
	advance_to($node, $durable + 8192, $durable + 3 * 8192);
	my $f7 = acked_insert($node, 7);
	cmp_ok($f7, '>', $durable, "$tag: row 7 lies beyond the held sync (" . lsn_text($f7) . ')');
	pause_release($node, 'durable_after_sync');
	pause_wait($node, 'flusher_after_free', 0);
	$st = pmwal_status($node);
	note("$tag: held after the tail's move: " . status_line($node));
	cmp_ok(lsn_num($st->{tail_lsn}), '<=', ($f6 - 1) - ($f6 - 1) % 8192,
		"$tag: the tail did not move past the page row 6 ends in ($st->{tail_lsn})");
	my $f8 = acked_insert($node, 8);
	push @acked, 6, 7, 8;
	cut_and_check($node, $tag, \@acked, [ 6, 7, 8 ]);
	$node->stop if $node->{_pid};
}

# --- 2. the last page of a segment, written again after a pass --------------
{
	my $tag = 'seg_end_page';
	my $node = quiet_node($tag);
	stop_server_process($node, 'walwriter');
	flusher_hold($node);
	# the first change of t's pages after the checkpoint, with its full
	# page images
	acked_insert($node, 0);
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $segend = $x - $x % $SEG + $SEG;
	my $P = $segend - 8192;
	advance_to($node, $P + 200, $P + 2000);
	my $f1 = acked_insert($node, 1);
	note("$tag: row 1 ends at " . lsn_text($f1) . ', in the last page of its segment (' . lsn_text($P) . ')');
	flusher_pass($node);
	my $st = pmwal_status($node);
	is($st->{durable_lsn}, lsn_text($segend), "$tag: the pass synced up to the end of the segment");
	my $f2 = acked_insert($node, 2);
	cmp_ok($f2, '<', $segend, "$tag: row 2 ends in the same page (" . lsn_text($f2) . '): it was written again');
	advance_to($node, $segend + 100, $segend + 4000);
	my $f3 = acked_insert($node, 3);
	flusher_pass($node);
	note("$tag: after the second pass: " . status_line($node));
	my $f4 = acked_insert($node, 4);
	cut_and_check($node, $tag, [ 0, 1, 2, 3, 4 ], [4]);
	$node->stop if $node->{_pid};
}

# --- 3. a writer finds the ring full ----------------------------------------
{
	my $tag = 'ring_full';
	my $node = quiet_node($tag, size => '2MB', conf => "wal_buffers = 256kB\n");
	$node->safe_psql('postgres', 'CREATE TABLE filler (id int, v text)');
	stop_server_process($node, $_) for qw(walwriter flusher);
	my @acked = (1 .. 3);
	acked_insert($node, $_) for @acked;
	my $full = pmwal_status($node)->{ring_full};
	my ($pid, $bg) = until_paused($node, 'durable_after_sync',
		[ "SET pmwal.test_pause = 'durable_after_sync'",
		  q{INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 40000) g} ]);
	my $st = pmwal_status($node);
	cmp_ok($st->{ring_full}, '>', $full, "$tag: a writer found the ring full and is held after its sync ($pid)");
	note("$tag: held: " . status_line($node));
	pause_release($node, 'durable_after_sync');
	my ($rc, $out, $err) = bg_psql_finish($bg);
	is($rc, 0, "$tag: the large insert committed") or diag($err);
	note("$tag: ring_full $st->{ring_full} -> " . pmwal_status($node)->{ring_full} . '; ' . status_line($node));
	acked_insert($node, $_) for 4 .. 6;
	push @acked, 4 .. 6;
	cut_and_check($node, $tag, \@acked, [ 4 .. 6 ]);
	if ($node->{_pid})
	{
		is($node->safe_psql('postgres', 'SELECT count(*) FROM filler'), '40000',
			"$tag: the large insert is there");
		$node->stop;
	}
}

# --- 4. retirement (pmwal.enabled off) and re-anchoring ---------------------
{
	my $tag = 'retire';
	my $node = quiet_node($tag);
	stop_server_process($node, 'walwriter');
	my $flusher = stop_server_process($node, 'flusher');
	my @acked = (1 .. 3);
	acked_insert($node, $_) for @acked;
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = off');
	arm_all($node, 'flusher_sleep,retire_after_sync');
	# the flusher carries pmwal.enabled to every process
	flusher_round($node, $flusher);
	like(pmwal_status($node)->{reason}, qr/pmwal.enabled is off/, "$tag: pmwal.enabled is off");
	my $offset = -s $node->logfile;
	my $held = bg_psql($node, 'INSERT INTO t VALUES (4)');
	my $pid = pause_or_exit($node, 'retire_after_sync', $offset, $held);
	ok($pid, "$tag: the next WAL write retires the ring: held after its real sync");
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	cmp_ok($head, '>', $tail, "$tag: the ring still claims its WAL (" . ring_words($node) . ')');
	# a power cut here: pg_wal holds, synced, all the ring claims
	my $cut = powercut($node);
	bg_psql_finish($held);
	note("$tag: $cut->{summary}");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	$offset = -s $node->logfile;
	powercut_start($node);
	like(slurp_file($node->logfile, $offset), $restored_re,
		"$tag: the ring's WAL, which pg_wal holds too, is restored (not refused)");
	is(ids_present($node, @acked), '1,2,3', "$tag: rows 1 to 3 survive the cut at the retirement");

	# pmwal.enabled is still off: PostgreSQL syncs for real
	acked_insert($node, $_) for 5 .. 7;
	push @acked, 5 .. 7;
	is(pmwal_status($node)->{accelerated}, 'false', "$tag: not accelerated while pmwal.enabled is off");
	my $anchors = pmwal_status($node)->{anchors};
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = on; SELECT pg_reload_conf()');
	# once the flusher has carried the setting, the next write anchors the
	# ring (after a real sync of what was written meanwhile)
	my $id = 100;
	for (1 .. 200)
	{
		acked_insert($node, ++$id);
		push @acked, $id;
		last if pmwal_status($node)->{accelerated} eq 'true';
		Time::HiRes::sleep(0.05);
	}
	my $st = pmwal_status($node);
	cmp_ok($st->{anchors}, '>', $anchors, "$tag: the ring was anchored again ($st->{anchors} anchors)");
	is($st->{accelerated}, 'true', "$tag: syncs are answered from the ring again");
	stop_server_process($node, $_) for qw(walwriter flusher);
	acked_insert($node, $_) for 8 .. 10;
	push @acked, 8 .. 10;
	cut_and_check($node, $tag, \@acked, [ 8 .. 10 ]);
	$node->stop if $node->{_pid};
}

# --- 5. a single write larger than the ring ---------------------------------
{
	my $tag = 'large_write';
	my $node = quiet_node($tag, size => '2MB', conf => "wal_buffers = 16MB\n");
	$node->safe_psql('postgres', 'CREATE TABLE filler (id int, v text)');
	stop_server_process($node, $_) for qw(walwriter flusher);
	my @acked = (1 .. 3);
	acked_insert($node, $_) for @acked;
	my $st0 = pmwal_status($node);
	# some 4 MB of WAL that wal_buffers holds until the COMMIT writes it
	my ($pid, $bg) = until_paused($node, 'retire_after_sync',
		[ "SET pmwal.test_pause = 'retire_after_sync'",
		  q{INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 30000) g} ]);
	my $st = pmwal_status($node);
	cmp_ok($st->{large_writes}, '>', $st0->{large_writes},
		"$tag: a write larger than the ring retires it: held after its real sync ($pid)");
	pause_release($node, 'retire_after_sync');
	my ($rc, $out, $err) = bg_psql_finish($bg);
	is($rc, 0, "$tag: the large insert committed") or diag($err);
	acked_insert($node, $_) for 4 .. 6;
	push @acked, 4 .. 6;
	$st = pmwal_status($node);
	note("$tag: retires $st0->{retires} -> $st->{retires}, anchors $st0->{anchors} -> $st->{anchors}, large_writes $st->{large_writes}");
	cmp_ok($st->{anchors}, '>', $st0->{anchors}, "$tag: the ring was anchored again");
	is($st->{accelerated}, 'true', "$tag: syncs are answered from the ring again");
	cut_and_check($node, $tag, \@acked, [ 4 .. 6 ]);
	if ($node->{_pid})
	{
		cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM filler'), '>=', 30000,
			"$tag: the large inserts are there");
		$node->stop;
	}
}

# --- 6. the sync before a pg_control write ----------------------------------
{
	my $tag = 'control';
	my $node = quiet_node($tag);
	my @acked;
	my $id = 0;
	for my $round (
		[ 'control_before_sync', 'before its sync' ],
		[ 'durable_after_sync', 'after its real sync, before it gives up the ring' ],
		[ 'control_after_sync', 'after giving up the ring, before pg_control is written' ])
	{
		my ($point, $what) = @$round;
		my $t = "$tag/$point";
		# each round checks its own rows: a round that lost some does not
		# fail the next
		@acked = ();
		stop_server_process($node, $_) for qw(walwriter flusher);
		push @acked, map { ++$id } 1 .. 3;
		acked_insert($node, $_) for @acked[-3 .. -1];
		my $ckpt_pid = $node->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
		arm_all($node, $point);
		my ($pid, $ckpt) = until_paused($node, $point, 'CHECKPOINT');
		is($pid, $ckpt_pid, "$t: the checkpointer is held $what");
		my @only_ring = (++$id);
		acked_insert($node, $id);
		if ($point eq 'durable_after_sync')
		{
			# one commit that ends in the page the sync covered last (written
			# again), one beyond the sync's end
			my $durable = lsn_num(pmwal_status($node)->{durable_lsn});
			advance_to($node, $durable + 100, $durable + 4000);
			acked_insert($node, ++$id);
			push @only_ring, $id;
		}
		push @acked, @only_ring;
		note("$t: rows @only_ring acknowledged meanwhile; " . status_line($node));
		if ($point ne 'control_after_sync')
		{
			pause_release($node, $point);
			my ($rc) = bg_psql_finish($ckpt);
			is($rc, 0, "$t: the checkpoint completed");
			disarm_all($node);
			note("$t: after the checkpoint: " . status_line($node));
		}
		if ($point eq 'control_before_sync')
		{
			# the checkpoint's sync covered the row acknowledged meanwhile;
			# one more after it, in the ring only
			@only_ring = (++$id);
			push @acked, $id;
			acked_insert($node, $id);
		}
		cut_and_check($node, $t, \@acked, \@only_ring);
		bg_psql_finish($ckpt) if $point eq 'control_after_sync';
		last unless $node->{_pid};
	}
	$node->stop if $node->{_pid};
}

# --- 7. the checkpointer's sync of pg_wal before its sync phase ------------
# A checkpoint's first sync of a data file syncs pg_wal for real first
# (ring_on_checkpointer_sync), so that the sync before the pg_control
# write, made under ControlFileLock, covers only what was written since.
# The checkpointer held before that sync and after it (after the ring was
# given up up to its last page), with a commit acknowledged meanwhile.
{
	my $tag = 'checkpointer_presync';
	my $node = quiet_node($tag);
	$node->safe_psql('postgres', 'CREATE TABLE filler (id int, v text)');
	my $id = 1000;
	for my $point ('checkpointer_before_presync', 'checkpointer_after_presync')
	{
		my $t = "$tag/$point";
		stop_server_process($node, $_) for qw(walwriter flusher);
		# dirty pages of t, so that the checkpoint syncs its file, and more
		# unsynced WAL than the checkpointer's sync is made for (128 kB)
		my @acked = map { ++$id } 1 .. 3;
		acked_insert($node, $_) for @acked;
		$node->safe_psql('postgres',
			q{INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 3000) g});
		my $before = pmwal_status($node);
		my $ckpt_pid = $node->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
		arm_all($node, $point);
		my ($pid, $ckpt) = until_paused($node, $point, 'CHECKPOINT');
		is($pid, $ckpt_pid, "$t: the checkpointer is held at its sync of a data file");
		my $held = pmwal_status($node);
		if ($point eq 'checkpointer_after_presync')
		{
			cmp_ok(lsn_num($held->{durable_lsn}), '>', lsn_num($before->{durable_lsn}),
				"$t: pg_wal was synced for real before the data file ($before->{durable_lsn} -> $held->{durable_lsn})");
		}
		my @only_ring = (++$id);
		acked_insert($node, $id);
		push @acked, @only_ring;
		note("$t: row @only_ring acknowledged meanwhile; " . status_line($node));
		cut_and_check($node, $t, \@acked, \@only_ring);
		bg_psql_finish($ckpt);
		last unless $node->{_pid};
	}
	$node->stop if $node->{_pid};
}

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

# Restore decisions (restore.c, binding.c): which rings holding WAL a start
# writes into pg_wal, and which it refuses, writing nothing.
#
# The restore proves the ring's WAL to be the cluster's own unbroken
# history before it writes a byte: it reads, with XLogReader, from the
# checkpoint record pg_control names -- in pg_wal, where a checkpoint's
# pg_control write has always synced it (wal_ring.c) -- through pg_wal's
# pages before the ring's tail and the ring's pages in [tail, head); every
# record pg_wal can read there must equal the ring's; after the last
# record that reads cleanly there may only be one record that continues
# past the head.  There is no last_end any more (the old cases 1, "damage
# after last_end", tested a word that no longer exists): head is the only
# word that claims WAL, and the ring's WAL after the last clean record is
# judged by what it is.
#
# Each case runs on a node of its own, with a ring holding WAL after the
# server was killed (by a simulated power cut, tools/powercut, unless said
# otherwise):
#
#	1. continues_past_head: a record still being inserted (an 8 MB
#	   logical message, its inserter stopped by gdb a few MB in) whose
#	   first pages a commit's sync published (the commit was inserted
#	   before it; gdb holds it at XLogFlush until the message is under
#	   way): the ring ends inside that record.  A legitimate ring:
#	   restored, the commit there.
#	2. pg_wal_beyond: the server killed without a power cut (pg_wal keeps
#	   every byte), then a record in the ring damaged: pg_wal reads on
#	   where the ring does not -- refused ("holds WAL that pg_wal has
#	   beyond it"), nothing written; with the byte back, restored.
#	3. ckpt_unreadable (issue 14 item 1): the checkpoint record pg_control
#	   names zeroed in pg_wal (it can only be damage now: it was synced
#	   before pg_control named it): refused ("pg_wal lacks the checkpoint
#	   record pg_control names"), the ring kept as it is; with the page
#	   back, restored.  Once with the redo point in the segment of the
#	   ring's tail, once in a later one (pg_switch_wal first).
#	4. backup_label (issue 9 item 7): a ring holding WAL and a
#	   backup_label (from a base backup of the same node) in the data
#	   directory: refused, nothing touched; without backup_label, restored.
#	5. resetwal (issue 9 item 7): the ring spans a segment boundary,
#	   pg_wal loses the segments from it on, pg_resetwal puts its
#	   checkpoint at that boundary, inside the ring's range: refused
#	   (pg_control now says shut down cleanly), nothing touched.
#	6. not_connected: pg_wal lost a page between the checkpoint record and
#	   the ring's tail (WAL a pass of the flusher had synced): the ring's
#	   WAL does not continue pg_wal's -- refused ("does not connect to the
#	   WAL in pg_wal"), nothing written; with the page back, restored.
#	7. other_history: after a power cut the data directory is unbound
#	   (pmwal_ctl unbind --force) and run without its ring, writing other
#	   WAL at the ring's LSNs; killed again, then the ring and even the
#	   binding file put back: refused, nothing written.
use strict;
use warnings;
use FindBin;
use File::Copy ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $SEG = 16 * 1024 * 1024;
my $started = Time::HiRes::time();
my $checked = 0;

# All acknowledged ids present.
sub check_acked
{
	my ($node, $load, $tag) = @_;
	my ($n, $missing) = acked_check($node, $load);
	note("$tag: $n acknowledged commits checked, $missing missing");
	cmp_ok($n, '>=', 300, "$tag: at least 300 commits were acknowledged");
	is($missing, 0, "$tag: all $n acknowledged commits are present");
	$checked += $n;
	return;
}

# The start goes on after the refusal was undone: restored, all there.
sub start_restores
{
	my ($node, $loads, $tag, $what) = @_;
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: $what, the server starts");
	like(slurp_file($node->logfile, $offset), $restored_re, "$tag: and restores the ring");
	return unless $node->{_pid};
	check_acked($node, shift @$loads, $tag);
	for my $load (@$loads)
	{
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "$tag: all $n commits acknowledged later are present");
	}
	$node->stop;
	return;
}

# --- 1. a record that continues past the head --------------------------------
{
	my $tag = 'continues_past_head';
	# small wal_buffers: the inserter of a large record soon finds no
	# initialised page ahead (the WAL writer initialises them ahead of
	# time); each page it then initialises itself it first reports how far
	# it got (WALInsertLockUpdateInsertingAt: LWLockUpdateVar), so that a
	# flush of WAL before it does not wait for its end
	my $node = quiet_node($tag, conf => "wal_buffers = 1MB\n");
	my $load = short_load($node, $tag);
	stop_server_process($node, 'walwriter');
	flusher_hold($node);
	# A's first MBs must not finish a segment: A writes its own pages as it
	# goes (wal_buffers 1 MB, no WAL writer), and the write that finishes a
	# segment syncs it, covering B's commit, so that B's flush then has
	# nothing to do and the head stays at the segment's end (seen once: A
	# from 0/1FFFFF0, the head at 0/2000000).  Near a segment's end, begin
	# a new one first.
	if ($node->safe_psql('postgres',
			'SELECT (pg_walfile_name_offset(pg_current_wal_insert_lsn())).file_offset') > 8 * 1024 * 1024)
	{
		$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	}
	# each session waits for an advisory lock the test holds until gdb is
	# attached to it
	my $locks = $node->background_psql('postgres');
	$locks->query_safe('SELECT pg_advisory_lock(41), pg_advisory_lock(42)');
	# B: a commit inserted, held by gdb before its flush
	my $b_psql = bg_psql($node, 'SELECT pg_advisory_lock(41)', 'INSERT INTO t VALUES (-1)');
	my $gdb = gdb_break(backend_pid_running($node, 'SELECT pg_advisory_lock(41)'), 'XLogFlush');
	$locks->query_safe('SELECT pg_advisory_unlock(41)');
	ok(gdb_wait_hit($gdb, 60, $b_psql->{h}), "$tag: B's commit record is inserted, B is held before its flush");
	my $a_from = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	# A: a record of 8 MB, stopped when it reports its progress for the
	# 200th time
	my $a_psql = bg_psql($node, 'SELECT pg_advisory_lock(42)',
		q{SELECT pg_logical_emit_message(false, 'huge', repeat('x', 8000000))});
	my $a_gdb = gdb_break(backend_pid_running($node, 'SELECT pg_advisory_lock(42)'), 'LWLockUpdateVar',
		nth => 200, leave_stopped => 1);
	$locks->query_safe('SELECT pg_advisory_unlock(42)');
	ok(gdb_wait_hit($a_gdb, 60, $a_psql->{h}), "$tag: A is stopped inside its record");
	$a_gdb->{h}->finish;
	$locks->quit;
	# B goes on: its flush writes up to where A's insertion got, its sync
	# publishes the ring's head there
	gdb_release($gdb);
	my $b_done = 0;
	for (1 .. 3000)
	{
		eval { $b_psql->{h}->pump_nb };
		last if $b_done = !$b_psql->{h}->pumpable;
		Time::HiRes::sleep(0.01);
	}
	ok($b_done, "$tag: B's commit was acknowledged while A's record is under way");
	my $head = ring_read_u64($node->{pmwal_ring}, 'head');
	ok($head > $a_from + 2 * 8192 && $head < $a_from + 8_000_000,
		"$tag: the ring's head (" . lsn_text($head) . ') lies inside A\'s record (from ' . lsn_text($a_from) . ')');
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	bg_psql_finish($a_psql);
	bg_psql_finish($b_psql);
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server starts")
	  or diag(join("\n", grep { /FATAL|DETAIL|PANIC/ } split /\n/, slurp_file($node->logfile, $offset)));
	my ($from, $to) = slurp_file($node->logfile, $offset) =~ $restored_re;
	is(lsn_num($to // '0/0'), $head, "$tag: restored up to the head, inside the record");
	if ($node->{_pid})
	{
		check_acked($node, $load, $tag);
		is(ids_present($node, -1), '-1', "$tag: B's commit is there");
		$node->stop;
	}
}

# --- 2. pg_wal reads on where the ring does not ------------------------------
{
	my $tag = 'pg_wal_beyond';
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	acked_insert($node, -1);
	# every process killed, no power cut: pg_wal keeps all it was given
	powercut_kill($node);
	delete $node->{powercut_log};
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	my $rec;
	for (my $p = $head - 4 * 8192; $p >= $tail; $p -= 8192)
	{
		last if $rec = first_record_in_page($node, $p);
	}
	ok($rec, "$tag: a record in the ring, before its last pages (" . lsn_text($rec // 0) . ')');
	my $at = $rec + 20;
	my $old = ring_rw($node, $at, 1);
	ring_rw($node, $at, 1, chr(ord($old) ^ 0xff));
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'the ring damaged where pg_wal is not');
	like($log, qr/FATAL:  pmwal ring "[^"]+" holds WAL that pg_wal has beyond it; nothing was restored/,
		"$tag: FATAL says pg_wal holds WAL beyond the ring's");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	ring_rw($node, $at, 1, $old);
	start_restores($node, [$load], $tag, 'with the byte back');
}

# --- 3. the checkpoint record pg_control names is unreadable ----------------
for my $variant ('same_segment', 'later_segment')
{
	my $tag = "ckpt_unreadable_$variant";
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	stop_server_process($node, $_) for qw(walwriter flusher);
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()') if $variant eq 'later_segment';
	$node->safe_psql('postgres', 'CHECKPOINT');
	my ($ckpt, $redo) = split /\|/,
	  $node->safe_psql('postgres', 'SELECT checkpoint_lsn, redo_lsn FROM pg_control_checkpoint()');
	# commits after the checkpoint: in the ring only
	my $load2 = short_load($node, "${tag}_2", base => 500_000_000, duration => 1);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	cmp_ok($head, '>', $tail, "$tag: the ring holds WAL (" . lsn_text($tail) . ' to ' . lsn_text($head) . ')');
	cmp_ok(lsn_num($ckpt) - lsn_num($ckpt) % 8192, '<=', $tail,
		"$tag: nothing in the ring is older than the checkpoint ($ckpt, redo $redo)");
	# the page holding the checkpoint record, zeroed in pg_wal
	my $page = lsn_num($ckpt) - lsn_num($ckpt) % 8192;
	my $saved = wal_rw($node, $page, 8192);
	wal_rw($node, $page, 8192, "\0" x 8192);
	my $words = ring_words($node);
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'checkpoint record unreadable');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" cannot be restored: pg_wal lacks the checkpoint record pg_control names; nothing was restored/,
		"$tag: FATAL says pg_wal lacks the checkpoint record");
	like($log, qr/DETAIL:  Reading the checkpoint record at \Q$ckpt\E from pg_wal failed/,
		"$tag: DETAIL names the checkpoint record");
	is(ring_words($node), $words, "$tag: the ring's header is unchanged (it was not emptied)");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	wal_rw($node, $page, 8192, $saved);
	start_restores($node, [ $load, $load2 ], $tag, 'with the checkpoint record\'s page back');
}

# --- 4. backup_label in the data directory (issue 9 item 7) ------------------
{
	my $tag = 'backup_label';
	my $node = quiet_node($tag, init => { allows_streaming => 1 });
	$node->backup('base');
	my $label = $node->backup_dir . '/base/backup_label';
	ok(-f $label, "$tag: a base backup of the node, with its backup_label");
	# the backup's pg_control write emptied the ring: a new load follows
	my $load = short_load($node, $tag);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	cmp_ok(ring_read_u64($ring, 'head'), '>', ring_read_u64($ring, 'tail'),
		"$tag: the ring holds WAL after the power cut");
	File::Copy::copy($label, $node->data_dir . '/backup_label') or die "copy: $!";
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'backup_label present');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" holds WAL, but this data directory is being restored from a base backup; nothing was restored/,
		"$tag: FATAL says the data directory is being restored from a base backup");
	like($log, qr/HINT:  .*pmwal_ctl dump.*pmwal_ctl reset --discard-wal/,
		"$tag: HINT names pmwal_ctl dump and reset");
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	unlink $node->data_dir . '/backup_label';
	start_restores($node, [$load], $tag, 'without backup_label');
}

# --- 5. pg_resetwal with a checkpoint inside the ring's range ---------------
{
	my $tag = 'resetwal';
	my $node = quiet_node($tag);
	stop_server_process($node, $_) for qw(walwriter flusher);
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $beyond = lsn_text($x - $x % $SEG + $SEG + 4 * 8192);
	my $load = acked_load_start($node, tag => $tag);
	# commits acknowledged a few pages into the next segment: the ring's
	# head is there
	$node->poll_query_until('postgres',
		"SELECT pg_current_wal_flush_lsn() >= '$beyond'::pg_lsn")
	  or die "$tag: the load does not reach the next segment";
	my $cut = powercut($node);
	acked_load_finish($load);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	my $boundary = ($tail - $tail % $SEG) + $SEG;
	cmp_ok($head, '>', $boundary,
		"$tag: the ring spans a segment boundary (" . lsn_text($tail) . ' to ' . lsn_text($head) . ')');
	# pg_wal lost the segments from that boundary on; pg_resetwal then
	# puts its checkpoint at the boundary, which the ring holds
	my $dir = $node->data_dir . '/pg_wal';
	opendir my $dh, $dir or die "could not read $dir: $!";
	my @gone = grep { /^[0-9A-F]{24}$/ && hex(substr($_, 8, 8)) * 256 + hex(substr($_, 16, 8)) >= $boundary / $SEG }
	  readdir $dh;
	closedir $dh;
	unlink map { "$dir/$_" } @gone;
	unlink $node->data_dir . '/postmaster.pid';
	command_ok([ 'pg_resetwal', '-f', '-D', $node->data_dir ], "$tag: pg_resetwal -f");
	my ($control) = run_command([ 'pg_controldata', '-D', $node->data_dir ]);
	my ($ckpt) = $control =~ /^Latest checkpoint location:\s+(\S+)$/m;
	ok(defined $ckpt && lsn_num($ckpt) >= $tail && lsn_num($ckpt) < $head,
		"$tag: the new checkpoint (" . ($ckpt // '?') . ') lies inside the ring\'s range');
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'after pg_resetwal');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" holds WAL, but the cluster was shut down cleanly since; nothing was restored/,
		"$tag: FATAL says the cluster was shut down cleanly since the ring was written");
	like($log, qr/DETAIL:  .*pg_resetwal/, "$tag: DETAIL names pg_resetwal among the causes");
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
}

# --- 6. pg_wal lost WAL before the ring's tail -------------------------------
{
	my $tag = 'not_connected';
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	stop_server_process($node, 'walwriter');
	flusher_hold($node);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $ckpt = lsn_num($node->safe_psql('postgres', 'SELECT checkpoint_lsn FROM pg_control_checkpoint()'));
	# WAL after the checkpoint, synced by a pass; then more, in the ring
	my $load2 = short_load($node, "${tag}_2", base => 500_000_000, duration => 1);
	flusher_pass($node);
	my $load3 = short_load($node, "${tag}_3", base => 600_000_000, duration => 1);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	my $page = $ckpt - $ckpt % 8192 + 8192;
	cmp_ok($page, '<', $tail - 8192, "$tag: pages lie between the checkpoint (" . lsn_text($ckpt)
		  . ') and the ring\'s tail (' . lsn_text($tail) . ')');
	$page = $tail - 2 * 8192;
	my $saved = wal_rw($node, $page, 8192);
	wal_rw($node, $page, 8192, "\0" x 8192);
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'a page of pg_wal before the ring lost');
	like($log, qr/FATAL:  pmwal ring "[^"]+" does not connect to the WAL in pg_wal; nothing was restored/,
		"$tag: FATAL says the ring does not connect to pg_wal");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	wal_rw($node, $page, 8192, $saved);
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	start_restores($node, [ $load, $load2, $load3 ], $tag, 'with the page back');
}

# --- 7. the data directory ran without its ring ------------------------------
{
	my $tag = 'other_history';
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my $binding = $node->data_dir . '/pg_wal/pmwal.binding';
	File::Copy::copy($ring, "$ring.saved") or die "copy: $!";
	File::Copy::copy($binding, "$binding.saved") or die "copy: $!";
	my $ring_words = ring_words($node);
	# the ring given up for lost: unbound, the server runs without it and
	# writes other WAL where the ring's was
	command_ok([ 'pmwal_ctl', 'unbind', '-D', $node->data_dir, '--force' ], "$tag: pmwal_ctl unbind --force");
	set_conf($node, 'pmwal.path' => '');
	powercut_start($node);
	$node->safe_psql('postgres', 'INSERT INTO t SELECT -g FROM generate_series(1, 20000) g');
	powercut_kill($node);
	delete $node->{powercut_log};
	# the ring put back, and the binding file too
	set_conf($node, 'pmwal.path' => $ring);
	File::Copy::copy("$ring.saved", $ring) or die "copy: $!";
	chmod 0600, $ring;
	File::Copy::copy("$binding.saved", $binding) or die "copy: $!";
	unlink "$ring.saved", "$binding.saved";
	is(ring_words($node), $ring_words, "$tag: the ring holds its WAL again");
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'the ring is not this history');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" (holds WAL of another history than pg_wal|is older than the cluster's last checkpoint); nothing was restored/,
		"$tag: FATAL says the ring is not the cluster's history");
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
}

note(sprintf('%d acknowledged commits checked present; %.0f s',
		$checked, Time::HiRes::time() - $started));

done_testing();

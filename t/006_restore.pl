# Restore before redo: the ring is written back into pg_wal at every start
# and crash-restart, proven first to continue pg_wal's history (restore.c:
# an XLogReader over pg_wal and the ring from pg_control's checkpoint),
# idempotent, and refused rather than guessed when its bytes are damaged or
# it is not the ring the cluster wrote last.
#
# Every scenario runs committing load (pgbench, unique ids recorded only
# once COMMIT returned) or single acknowledged commits, then (but in 2) a
# simulated power cut (tools/powercut) so that pg_wal really lacks what only
# the ring holds; in 1 and 5 the ring loses every line not flushed and
# drained, in 3 a random part of them (issue 12's ring cut).
# Scenarios:
#	1. restore after a power cut: logged with its range -- exactly the
#	   ring's [tail, head) --, bytes, records, segments, before redo; the
#	   ring lets go of the range; negative control: without the ring
#	   acknowledged commits are lost
#	2. SIGKILL without a power cut, then pg_wal's newest 64 kB overwritten
#	   with zeros: the restore rewrites them; negative control: the same
#	   with the ring emptied loses the commits in them
#	3. a second power cut during the restore, once after the segments
#	   were written (restore_written: pg_wal/ not yet synced), once after
#	   everything was synced (restore_before_empty: the ring not yet
#	   emptied): each next start verifies pg_wal again (now holding what
#	   the ring holds) and restores again
#	4. damaged ring bytes: one byte of a record's CRC flipped, a later
#	   page beginning new records: FATAL "holds damaged WAL", pg_wal and
#	   the ring untouched; with the byte put back, the start restores
#	   everything.  The same with the record's length made to reach past
#	   the head instead, only continuation pages after it (FOUND BY THIS
#	   TEST: the check of a record "that continues past the head" read
#	   only the continuation flag of the pages after it, not that they
#	   continue that record: the ring was accepted, the damaged record
#	   written into pg_wal, recovery stopped at it and every acknowledged
#	   commit after it was lost).
#	5. head is the only word that claims WAL (there is no last_end any
#	   more): a committer held after copying its write into the ring,
#	   before the write and before its sync publishes the head
#	   (write_after_copy), and the page after the head filled with
#	   garbage: the restore writes exactly [tail, head)
#	6. a stale copy of the ring put back is refused, not dropped, and
#	   nothing is written: (a) the flusher passed since the copy was made
#	   (binding.c: the ring's generation is behind the binding file's);
#	   (b) no pass, but a checkpoint since (same generation; restore.c:
#	   "older than the cluster's last checkpoint").  With the right ring
#	   back, the start restores everything.
#	7. crash-restart of one backend (restart_after_crash = on) under load:
#	   the restore runs before redo; load again, then a power cut: nothing
#	   acknowledged before or after the crash-restart lost
#	8. (replaces "a checkpoint whose redo point lies in a segment the
#	   flusher had not synced, its record's flush made a no-op by a commit
#	   written without fsync": nothing is written without being copied
#	   into the ring now, and pg_control is written only after a real
#	   sync.)  A checkpoint whose record lies in the page the flusher's
#	   last pass synced -- a commit wrote that page again first -- and a
#	   power cut: the checkpoint record pg_control names must be in pg_wal
#	   (FOUND BY THIS TEST: it was not; the sync before pg_control's write
#	   skipped WAL below durable_lsn, "could not locate a valid checkpoint
#	   record"; fixed in 9e5f472).  Once an online checkpoint, once the
#	   shutdown checkpoint of a clean stop (pg_ctl stop -m fast: before
#	   the fix a power cut after a clean stop left a cluster that could
#	   not start), the cut after the stop.
#	9. crash-restart with pg_wal's last page newer than the ring's copy
#	   of it: the copy into the ring and PostgreSQL's write read the WAL
#	   buffer one after the other, and a record inserted in between (past
#	   the flush request) is in pg_wal's page only.  Held there, a kill,
#	   a crash-restart (no power cut): the restore must go on (FOUND BY
#	   THIS TEST, first by chance in 7: "holds WAL that pg_wal has beyond
#	   it; nothing was restored", the server down).
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

my $started = Time::HiRes::time();
my $checked = 0;
my $SEG = 16 * 1024 * 1024;

sub loaded_and_cut
{
	my ($name, %opts) = @_;
	my ($node, $load) = loaded_node($name, conf => "pmwal.flush_interval = 60s\n" . ($opts{conf} // ''),
		ring_cut => $opts{ring_cut});
	Time::HiRes::sleep(0.3 + rand(1.0));
	if ($opts{kill_only})
	{
		# every process killed, no power cut: pg_wal keeps all it was given
		powercut_kill($node);
		delete $node->{powercut_log};
		acked_load_finish($load);
		return ($node, $load);
	}
	my $cut = powercut($node);
	acked_load_finish($load);
	cmp_ok($cut->{undone}, '>', 0, "$name: the power cut undid WAL writes not yet fsynced");
	return ($node, $load);
}

# All acknowledged ids present (or, with expect_loss, some missing);
# recheck => 1: the same load checked again, not counted twice.
sub check_acked
{
	my ($node, $load, $tag, %opts) = @_;
	my ($n, $missing) = acked_check($node, $load);
	note("$tag: $n acknowledged commits checked, $missing missing");
	cmp_ok($n, '>=', 300, "$tag: at least 300 commits were acknowledged");
	if ($opts{expect_loss})
	{
		cmp_ok($missing, '>', 0, "$tag: acknowledged commits are lost ($missing of $n)");
	}
	else
	{
		is($missing, 0, "$tag: all $n acknowledged commits are present");
		$checked += $n unless $opts{recheck};
	}
	return $missing;
}

# Negative control: a copy without the ring lacks acknowledged commits.
sub lost_without_ring
{
	my ($node, $load, $tag) = @_;
	my $n = without_ring_query($node, 'SELECT count(*) FROM t');
	my $lost = $load->{total} - ($n // 0);
	cmp_ok($lost, '>', 0,
		"$tag: negative control: without the ring $lost of $load->{total} acknowledged commits are missing");
	return;
}

# Zero pg_wal's bytes for [from, to), where the segment files exist.
sub zero_wal
{
	my ($node, $from, $to) = @_;
	my $zeroed = 0;
	while ($from < $to)
	{
		my $n = $SEG - $from % $SEG;
		$n = $to - $from if $n > $to - $from;
		if (-f segment_of($node, $from))
		{
			wal_rw($node, $from, $n, "\0" x $n);
			$zeroed += $n;
		}
		$from += $n;
	}
	return $zeroed;
}

# --- 1. restore after a power cut ------------------------------------------
{
	my ($node, $load) = loaded_and_cut('restore', ring_cut => 'durable');
	my $tail = ring_read_u64($node->{pmwal_ring}, 'tail');
	my $head = ring_read_u64($node->{pmwal_ring}, 'head');
	cmp_ok($head, '>', $tail, 'restore: the ring holds WAL after the power cut');
	lost_without_ring($node, $load, 'restore');
	my $offset = -s $node->logfile;
	$node->start;
	my $log = slurp_file($node->logfile, $offset);
	like($log, $restored_re, 'restore: one LOG line reports the restore');
	my ($from, $to, $bytes, $records, $segs) = $log =~ $restored_re;
	is(lsn_num($from // '0/0'), $tail, 'restore: restored from the ring tail');
	is(lsn_num($to // '0/0'), $head, 'restore: restored up to the ring head');
	is($bytes, $head - $tail, "restore: $bytes bytes restored, the whole range");
	cmp_ok($records, '>', 0, "restore: $records records verified");
	cmp_ok($segs, '>=', 1, "restore: $segs segments written");
	like($log, qr/pmwal restored WAL.*redo starts at/s,
		'restore: crash recovery ran after the restore');
	check_acked($node, $load, 'restore');
	# the restore marked the ring empty; the first write after recovery
	# anchors it anew
	acked_insert($node, -1);
	like(slurp_file($node->logfile, $offset), qr/pmwal restored WAL.*pmwal ring "[^"]+" anchored at/s,
		'restore: the ring is anchored anew after the restore');
	$node->stop;
	is(ring_state($node->{pmwal_ring}), RING_STATE_EMPTY,
		'restore: after a clean stop the ring is empty');
}

# --- 2. damaged pg_wal bytes: rewritten; negative control without the ring
for my $case ([ 'damaged', 0 ], [ 'damaged_noring', 1 ])
{
	my ($tag, $empty_ring) = @$case;
	# no power cut: pg_wal holds all its WAL, as after a crash of
	# PostgreSQL alone; then its newest bytes are damaged where the ring
	# has them too
	my ($node, $load) = loaded_and_cut($tag, kill_only => 1);
	my $ring = $node->{pmwal_ring};
	my $tail = ring_read_u64($ring, 'tail');
	my $head = ring_read_u64($ring, 'head');
	cmp_ok($head, '>', $tail, "$tag: the ring holds WAL after the kill");
	# the newest 64 kB the ring holds: hundreds of acknowledged commits,
	# well after the checkpoint record, which recovery must find
	my $zfrom = $head - 65536 > $tail ? $head - 65536 : $tail;
	my $zeroed = zero_wal($node, $zfrom, $head);
	cmp_ok($zeroed, '>', 0, "$tag: $zeroed bytes of pg_wal overwritten with zeros");
	if ($empty_ring)
	{
		ring_write_u64($ring, 'head', $tail);
		ring_write_u64($ring, 'state', RING_STATE_EMPTY);
	}
	my $offset = -s $node->logfile;
	if ($empty_ring && !$node->start(fail_ok => 1))
	{
		# the zeros hit WAL recovery cannot do without: the server does
		# not come up at all
		my ($why) = slurp_file($node->logfile, $offset) =~ /((?:PANIC|FATAL):  .*)/;
		ok(defined $why, "$tag: without the ring the server cannot recover: " . ($why // '?'));
		next;
	}
	$node->start unless $empty_ring;
	my $log = slurp_file($node->logfile, $offset);
	if ($empty_ring)
	{
		unlike($log, $restored_re, "$tag: nothing was restored");
	}
	else
	{
		my ($from, $to) = $log =~ $restored_re;
		ok(defined $from && lsn_num($from) <= $zfrom && lsn_num($to) == $head,
			"$tag: the ring was restored over the zeros");
	}
	check_acked($node, $load, $tag, expect_loss => $empty_ring);
	# a server that lost WAL may hold data pages newer than its WAL end
	$node->stop($empty_ring ? 'immediate' : 'fast');
}

# --- 3. a second power cut during the restore --------------------------------
{
	my $tag = 'killed_restore';
	my ($node, $load) = loaded_and_cut($tag, ring_cut => 'random');
	my $ring = $node->{pmwal_ring};
	my $tail = ring_read_u64($ring, 'tail');
	my $head = ring_read_u64($ring, 'head');
	for my $point ('restore_written', 'restore_before_empty')
	{
		my $offset = -s $node->logfile;
		ok((powercut_start_paused($node, $point))[0], "the restore reached its pause at $point");
		isnt(ring_state($ring), RING_STATE_EMPTY, "$tag/$point: the ring is not yet marked empty at the pause");
		my $cut = powercut($node);
		note("$tag/$point: second cut: $cut->{summary}");
		unlike(slurp_file($node->logfile, $offset), $restored_re,
			"$tag/$point: the killed restore did not finish");
		is(ring_read_u64($ring, 'tail') . '-' . ring_read_u64($ring, 'head'), "$tail-$head",
			"$tag/$point: the ring still holds the same WAL");
	}
	my $offset = -s $node->logfile;
	$node->start;
	my ($from, $to) = slurp_file($node->logfile, $offset) =~ $restored_re;
	ok(defined $to, "$tag: the next start restores again (pg_wal holding the ring's WAL is no refusal)");
	is(defined $to ? lsn_num($to) : -1, $head, "$tag: again up to the ring head");
	check_acked($node, $load, $tag);
	$node->stop;
}

# --- 4. damaged ring bytes ---------------------------------------------------
for my $damage ('xl_crc', 'xl_tot_len')
{
	my $tag = "flipped_$damage";
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	# the last commit holds two records of eight pages each: the ring's
	# last pages continue them, and the second begins in a page that
	# continues the first
	$node->safe_psql('postgres',
		"BEGIN; SELECT pg_logical_emit_message(true, 'big', repeat('x', 60000)); "
		  . "SELECT pg_logical_emit_message(true, 'big', repeat('y', 60000)); "
		  . "INSERT INTO t VALUES (-1); COMMIT");
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	# the pages that begin new records (not a continuation)
	my @fresh = grep { !ring_page_header($node, $_)->{contrecord} }
	  map { $tail + 8192 * $_ } 1 .. ($head - $tail) / 8192 - 1;
	my ($rec, $at, $bytes);
	if ($damage eq 'xl_crc')
	{
		# a record the ring holds whole, a few pages before its head
		# (xl_crc: offset 20 of the record header, never in padding)
		for (my $p = $head - 4 * 8192; $p >= $tail; $p -= 8192)
		{
			last if $rec = first_record_in_page($node, $p);
		}
		ok($rec, "$tag: a record the ring holds whole");
		($at, $bytes) = ($rec + 20, undef);
	}
	else
	{
		# a record after which every page up to the head continues some
		# record, at least three pages before the head: its length made to
		# reach past the head
		my $after = @fresh ? $fresh[-1] + 8192 : $tail + 8192;
		for (my $p = $after; $p < $head - 3 * 8192; $p += 8192)
		{
			last if $rec = first_record_in_page($node, $p);
		}
		ok($rec, "$tag: a record followed only by continuation pages");
		($at, $bytes) = ($rec, pack('L<', $head - $rec + 3 * 8192));
	}
	$rec //= $tail;
	$at //= $rec;
	note("$tag: damaging the record at " . lsn_text($rec) . ' (ring ' . lsn_text($tail) . ' to ' . lsn_text($head) . ')');
	my $old = ring_rw($node, $at, $bytes ? length $bytes : 1);
	ring_rw($node, $at, length $old, $bytes // chr(ord($old) ^ 0xff));
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'a damaged record in the ring');
	like($log, qr/FATAL:  pmwal ring "[^"]+" holds damaged WAL; nothing was restored/,
		"$tag: FATAL says the ring holds damaged WAL");
	like($log, qr/DETAIL:  Reading the ring's WAL \([0-9A-F\/]+ to [0-9A-F\/]+\) stopped at /,
		"$tag: DETAIL says where reading stopped");
	like($log, qr/HINT:  .*"pmwal_ctl inspect" and "pmwal_ctl verify" show what/,
		"$tag: HINT names pmwal_ctl");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	ring_rw($node, $at, length $old, $old);
	$node->start;
	check_acked($node, $load, "${tag}_repaired");
	is(ids_present($node, -1), '-1', "${tag}_repaired: and the last commit");
	$node->stop;
}

# --- 5. head is the only word that claims WAL --------------------------------
{
	my $tag = 'torn';
	my $node = quiet_node($tag, ring_cut => 'durable');
	my $load = short_load($node, $tag);
	my $ring = $node->{pmwal_ring};
	my ($held) = hold_commit($node, sub { 'INSERT INTO t VALUES (' . (8_999_999_999 + $_[0]) . ')' },
		point => 'write_after_copy');
	my $cut = powercut($node);
	bg_psql_finish($held);
	note("$tag: $cut->{summary}");
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	# more of what a copier that died before publishing leaves: garbage in
	# the page at the head
	my $garbage = join('', map { chr(int(rand(256))) } 1 .. 8192);
	ring_rw($node, $head, 8192, $garbage);
	my $offset = -s $node->logfile;
	$node->start;
	my ($from, $to, $bytes) = slurp_file($node->logfile, $offset) =~ $restored_re;
	is(defined $to ? lsn_num($to) : -1, $head, "$tag: restored up to the published head, not beyond");
	is($bytes // -1, $head - $tail, "$tag: no byte beyond the head was written");
	check_acked($node, $load, $tag);
	$node->stop;
}

# --- 6. a stale copy of the ring put back ------------------------------------
for my $variant ('generation', 'checkpoint')
{
	my $tag = "stale_$variant";
	my $node = quiet_node($tag);
	my $load = short_load($node, $tag);
	my $ring = $node->{pmwal_ring};
	my $flusher = flusher_hold($node);
	stop_server_process($node, 'walwriter');
	# the ring copied while it holds WAL and nothing writes
	my $copy_words = ring_words($node);
	File::Copy::copy($ring, "$ring.old") or die "copy: $!";
	my $load2 = short_load($node, "${tag}_2", base => 500_000_000, clients => 2, duration => 2);
	if ($variant eq 'generation')
	{
		my $gen = ring_read_u64($ring, 'generation');
		flusher_pass($node);
		cmp_ok(ring_read_u64($ring, 'generation'), '>', $gen, "$tag: the flusher passed: the ring's generation went up");
	}
	else
	{
		$node->safe_psql('postgres', 'CHECKPOINT');
	}
	my $id = acked_insert($node, -1);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	File::Copy::copy($ring, "$ring.new") or die "copy: $!";
	File::Copy::copy("$ring.old", $ring) or die "copy: $!";
	note("$tag: the copy put back: $copy_words");
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'a stale copy of the ring');
	like($log,
		$variant eq 'generation'
		? qr/FATAL:  pmwal ring "[^"]+" is older than this data directory's binding to it; nothing was restored/
		: qr/FATAL:  pmwal ring "[^"]+" is older than the cluster's last checkpoint; nothing was restored/,
		"$tag: FATAL says the ring is older than " . ($variant eq 'generation' ? 'the binding' : 'the last checkpoint'));
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
	File::Copy::copy("$ring.new", $ring) or die "copy: $!";
	unlink "$ring.old", "$ring.new";
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: with the right ring back the server starts");
	like(slurp_file($node->logfile, $offset), $restored_re, "$tag: and restores it");
	if ($node->{_pid})
	{
		check_acked($node, $load, $tag);
		my ($n, $missing) = acked_check($node, $load2);
		is($missing, 0, "$tag: all $n commits acknowledged after the copy are present");
		is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '1',
			"$tag: so is the last one");
		$node->stop;
	}
}

# --- 7. crash-restart of one backend, then a power cut ----------------------
{
	my ($node, $load) = loaded_node('backend_crash', conf => "pmwal.flush_interval = 60s\nrestart_after_crash = on\n");
	Time::HiRes::sleep(0.3 + rand(1.0));
	my $offset = -s $node->logfile;
	my $victim = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() LIMIT 1});
	ok($victim =~ /^\d+$/, "backend_crash: a pgbench backend to kill ($victim)");
	powercut_kill_one($victim);
	acked_load_finish($load);
	# psql must not knock while the server restarts (poll_query_until's
	# psql can exit before it reads its query: a broken pipe)
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
		'backend_crash: the postmaster reinitialised after the backend crash');
	like($log, qr/all server processes terminated; reinitializing.*pmwal restored WAL .*\(crash-restart\).*redo starts at/s,
		'backend_crash: the ring was restored at the crash-restart, before redo');
	# committing goes on after the crash-restart, through the ring anchored
	# anew; then the power goes: what the crash-restart restored and synced
	# and what was committed since must all be there
	wait_accelerated($node, 't') or die 'backend_crash: commits are not accelerated after the crash-restart';
	my $load2 = acked_load_start($node, tag => 'backend_crash_after', base => 500_000_000);
	$node->poll_query_until('postgres',
		'SELECT count(*) >= 300 FROM t WHERE id % 1000000000 > 500000000')
	  or die "backend_crash: the load does not run after the crash-restart: ${ $load2->{err} }";
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load2);
	note("backend_crash: cut after the crash-restart: $cut->{summary}");
	cmp_ok($cut->{undone}, '>', 0, 'backend_crash: the power cut undid WAL writes not yet fsynced');
	$node->start;
	check_acked($node, $load, 'backend_crash');
	check_acked($node, $load2, 'backend_crash_after');
	$node->stop;
}

# --- 8. a checkpoint in the page the flusher's last pass synced ------------
# Twice: an online checkpoint (CHECKPOINT), and the shutdown checkpoint of
# a clean stop (pg_ctl stop -m fast: the server says its WAL is durable
# when it returns).
for my $variant ('checkpoint', 'shutdown')
{
	my $tag = "${variant}_after_pass";
	my $node = quiet_node($tag);
	my $walwriter = stop_server_process($node, 'walwriter');
	flusher_hold($node);
	# the first change of t's pages after the checkpoint, with its full
	# page images
	acked_insert($node, 0);
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $P = $x - $x % 8192 + 8192;
	advance_to($node, $P + 200, $P + 2000);
	my $f1 = acked_insert($node, 1);
	flusher_pass($node);
	my $durable = lsn_num(pmwal_status($node)->{durable_lsn});
	my $f2 = acked_insert($node, 2);
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	if ($variant eq 'checkpoint')
	{
		$node->safe_psql('postgres', 'CHECKPOINT');
	}
	else
	{
		# the flusher and the WAL writer go on, to stop (nothing is left
		# for them to write)
		pause_release($node, 'flusher_loop');
		kill 'CONT', $walwriter;
		$node->stop('fast');
	}
	my ($control) = run_command([ 'pg_controldata', '-D', $node->data_dir ]);
	my ($ckpt) = $control =~ /^Latest checkpoint location:\s+(\S+)$/m;
	$ckpt = lsn_num($ckpt // '0/0');
	note("$tag: row 1 ends at " . lsn_text($f1) . ', the pass synced to ' . lsn_text($durable)
		  . ', row 2 ends at ' . lsn_text($f2) . ', the checkpoint record at ' . lsn_text($ckpt));
	cmp_ok($ckpt, '<', $durable, "$tag: the checkpoint record lies in the page the pass synced last");
	my $cut = $variant eq 'checkpoint' ? powercut($node) : powercut_cut($node);
	note("$tag: $cut->{summary}");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC/ } split /\n/, slurp_file($node->logfile, $offset)));
	if ($node->{_pid})
	{
		is(ids_present($node, 0, 1, 2), '0,1,2', "$tag: rows 0, 1 and 2 survive the power cut");
		$node->stop;
	}
}

# --- 9. crash-restart: pg_wal's last page newer than the ring's copy of it --
# The ring's copy of a write and the write itself both read PostgreSQL's
# WAL buffer, one after the other; an inserter may add to the partial last
# page in between (its record lies after the flush request, so it may be
# inserted meanwhile).  A committer B is held after its copy
# (write_after_copy), C inserts its commit record into the same page and
# waits for the WAL write lock; B writes the page -- with C's record --
# and is held in its sync (sync_before_publish); then B is killed: a
# crash-restart, no power cut, so pg_wal keeps the newer page.  The
# restore must not refuse (nor write the older copy over it).
{
	my $tag = 'newer_page';
	my $node = quiet_node($tag, conf => "restart_after_crash = on\n");
	my @pids = map { stop_server_process($node, $_) } qw(walwriter flusher);
	# the postmaster forgets the flusher's pause point, which the processes
	# of the crash-restart would inherit
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	acked_insert($node, $_) for 1 .. 3;
	my $offset = -s $node->logfile;
	pause_rearm($node, $_) for qw(write_after_copy sync_before_publish);
	my $b = bg_psql($node, "SET pmwal.test_pause = 'write_after_copy,sync_before_publish'",
		'INSERT INTO t VALUES (4)');
	my $b_pid = pause_or_exit($node, 'write_after_copy', $offset, $b)
	  or die "$tag: B did not pause";
	my $c = bg_psql($node, 'INSERT INTO t VALUES (5)');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'WALWrite' AND query = 'INSERT INTO t VALUES (5)'})
	  or die "$tag: C does not wait for the WAL write lock";
	pause_release($node, 'write_after_copy');
	pause_or_exit($node, 'sync_before_publish', $offset, $b) or die "$tag: B did not pause in its sync";
	note("$tag: B ($b_pid) wrote its page with C's record in it; " . status_line($node));
	$offset = -s $node->logfile;
	powercut_kill_one($b_pid);
	kill 'CONT', @pids;
	bg_psql_finish($b);
	bg_psql_finish($c);
	my $up = 0;
	for (1 .. 600)
	{
		my $log = slurp_file($node->logfile, $offset);
		last if $up = $log =~ /all server processes terminated; reinitializing.*database system is ready to accept connections/s;
		last if $log =~ /database system is shut down/;
		Time::HiRes::sleep(0.1);
	}
	my $log = slurp_file($node->logfile, $offset);
	ok($up, "$tag: the crash-restart completes")
	  or diag(join("\n", grep { /FATAL|DETAIL/ } split /\n/, $log));
	if ($up)
	{
		is(ids_present($node, 1 .. 3), '1,2,3', "$tag: the acknowledged rows are there");
		$node->stop;
	}
	else
	{
		$node->_update_pid(0);
	}
}

note(sprintf('%d acknowledged commits checked present across the restore scenarios; %.0f s',
		$checked, Time::HiRes::time() - $started));

done_testing();

# Restore before redo: the ring is written back into pg_wal at every start
# and crash-restart, verified first, idempotent, and refused rather than
# guessed when its bytes are damaged.
#
# Every scenario runs committing load (pgbench, unique ids recorded only
# once COMMIT returned), then (but in 2) a simulated power cut (t/004,
# tools/powercut) so that pg_wal really lacks what only the ring holds;
# in 1 and 5 the ring loses every line not flushed and drained, in 3 a
# random part of them (issue 12's ring cut).
# Scenarios:
#	1. restore after a power cut: logged with its range, bytes, records;
#	   the ring lets go of the restored range
#	2. SIGKILL without a power cut, then pg_wal's newest 64 kB overwritten
#	   with zeros: restore rewrites them; negative control: the same with
#	   the ring emptied loses the commits in them
#	3. SIGKILL and a second power cut during restore: the next start
#	   restores again
#	4. one byte flipped in the ring: FATAL, pg_wal and ring untouched;
#	   with the byte put back, the start restores everything
#	5. torn header: ring bytes written beyond the published head are
#	   ignored; the older head is valid
#	6. stale ring (all before the last checkpoint, put back from a copy):
#	   not restored, logged, dropped; nothing acknowledged lost
#	7. crash-restart of one backend (restart_after_crash = on) under load:
#	   the restore runs before redo; load again, then a power cut: nothing
#	   acknowledged before or after the crash-restart lost
#	8. a checkpoint whose redo point lies in a segment the (stopped)
#	   flusher had not synced, its record's flush made a no-op by a commit
#	   (gdb holds the checkpointer), then a power cut: the restore writes
#	   that segment from its start, so recovery finds its header
use strict;
use warnings;
use FindBin;
use Digest::SHA;
use File::Copy ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();
my $checked = 0;


my $restored_re =
  qr/pmwal restored WAL ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) from the ring into pg_wal: (\d+) bytes, (\d+) records, (\d+) segments/;

sub lsn
{
	my ($hi, $lo) = split m{/}, $_[0];
	return hex($hi) * 2**32 + hex($lo);
}

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
	diag("$tag: $n acknowledged commits checked, $missing missing");
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

# Offset of the byte at LSN $x in the ring file.
sub ring_offset
{
	my ($node, $x) = @_;
	return 4096 + $x % ring_field($node->{pmwal_ring}, 'capacity');
}

sub ring_poke
{
	my ($node, $offset, $bytes) = @_;
	open my $fh, '+<:raw', $node->{pmwal_ring} or die "open ring: $!";
	sysseek($fh, $offset, 0) or die;
	my $old;
	sysread($fh, $old, length $bytes) == length $bytes or die;
	sysseek($fh, $offset, 0) or die;
	syswrite($fh, $bytes) == length $bytes or die;
	close $fh;
	return $old;
}

# Path of the pg_wal segment that holds LSN $x (timeline 1, 16MB segments).
sub segment_of
{
	my ($node, $x) = @_;
	my $seg = int($x / (16 * 1024 * 1024));
	return sprintf('%s/pg_wal/%08X%08X%08X', $node->data_dir, 1, int($seg / 256), $seg % 256);
}

# Zero pg_wal's bytes for [from, to), where the segment files exist.
sub zero_wal
{
	my ($node, $from, $to) = @_;
	my $zeroed = 0;
	while ($from < $to)
	{
		my $segsize = 16 * 1024 * 1024;
		my $n = $segsize - $from % $segsize;
		$n = $to - $from if $n > $to - $from;
		my $path = segment_of($node, $from);
		if (-f $path)
		{
			open my $fh, '+<:raw', $path or die "open $path: $!";
			sysseek($fh, $from % $segsize, 0) or die;
			syswrite($fh, "\0" x $n) == $n or die;
			close $fh;
			$zeroed += $n;
		}
		$from += $n;
	}
	return $zeroed;
}

# Start without waiting (pg_ctl -W), under the power-cut log, with the
# restore held at its test pause point after writing pg_wal; returns once
# it is held.
sub start_paused_in_restore
{
	my ($node) = @_;
	my $log = $node->basedir . '/powercut.log';
	unlink $log;
	$node->{powercut_log} = $log;
	my $offset = -s $node->logfile;
	pause_rearm($node, 'restore_written');
	{
		local $ENV{LD_PRELOAD} = PmwalTest::powercut_lib();
		local $ENV{POWERCUT_LOG} = $log;
		local $ENV{POWERCUT_DIR} = $node->data_dir . '/pg_wal';
		system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
			'-o', '-c pmwal.test_pause=restore_written', '-W', 'start');
	}
	my $pid = pause_wait($node, 'restore_written', $offset);
	ok($pid, 'the restore reached its pause');
	my ($pm) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	$node->{_pid} = $pm;
	return $pm;
}

# --- 1. restore after a power cut ------------------------------------------
{
	my ($node, $load) = loaded_and_cut('restore', ring_cut => 'durable');
	my $tail = ring_read_u64($node->{pmwal_ring}, 'tail');
	my $head = ring_read_u64($node->{pmwal_ring}, 'head');
	cmp_ok($head, '>', $tail, 'restore: the ring holds WAL after the power cut');
	my $offset = -s $node->logfile;
	$node->start;
	my $log = slurp_file($node->logfile, $offset);
	like($log, $restored_re, 'restore: one LOG line reports the restore');
	my ($from, $to, $bytes, $records, $segs) = $log =~ $restored_re;
	is(lsn($to), $head, 'restore: restored up to the ring head');
	cmp_ok($bytes, '>', 0, "restore: $bytes bytes restored");
	cmp_ok($records, '>', 0, "restore: $records records verified");
	cmp_ok($segs, '>=', 1, "restore: $segs segments written");
	like($log, qr/pmwal restored WAL.*redo starts at/s,
		'restore: crash recovery ran after the restore');
	cmp_ok(lsn($from), '>=', $tail, 'restore: restored from the ring tail or later');
	is($bytes, $head - lsn($from), 'restore: byte count is the restored range');
	# the restore marked the ring empty (tail = head) before the flusher
	# anchored it anew, further on: nothing of the old range is left in it
	cmp_ok(ring_read_u64($node->{pmwal_ring}, 'tail'), '>=', $head,
		'restore: the ring no longer holds the restored range');
	check_acked($node, $load, 'restore');
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
		ring_write_u64($ring, 'last_end', $tail);
		ring_write_u64($ring, 'state', RING_STATE_EMPTY);
	}
	my $offset = -s $node->logfile;
	if ($empty_ring && !$node->start(fail_ok => 1))
	{
		# the zeros hit the checkpoint record (or other WAL recovery
		# cannot do without): the server does not come up at all
		my ($why) = slurp_file($node->logfile, $offset) =~ /((?:PANIC|FATAL):  .*)/;
		diag("$tag: $load->{total} acknowledged commits, the server cannot recover without the ring: "
			  . ($why // '?'));
		ok(defined $why,
			"$tag: without the ring the server cannot recover ("
			  . scalar(keys %{ $load->{acked} }) . ' clients, '
			  . "$load->{total} acknowledged commits unreachable)");
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
		ok(defined $from && lsn($from) <= $zfrom && lsn($to) == $head,
			"$tag: the ring was restored over the zeros");
	}
	check_acked($node, $load, $tag, expect_loss => $empty_ring);
	# a server that lost WAL may hold data pages newer than its WAL end
	$node->stop($empty_ring ? 'immediate' : 'fast');
}

# --- 3. SIGKILL and a power cut during restore ------------------------------
{
	my ($node, $load) = loaded_and_cut('killed_restore', ring_cut => 'random');
	my $ring = $node->{pmwal_ring};
	my $tail = ring_read_u64($ring, 'tail');
	my $head = ring_read_u64($ring, 'head');
	my $offset = -s $node->logfile;
	start_paused_in_restore($node);
	# the pause comes after the segments were written, before pg_wal/ is
	# synced and the ring is marked empty
	isnt(ring_state($ring), RING_STATE_EMPTY, 'killed_restore: the ring is not yet marked empty at the pause');
	my $cut = powercut($node);
	note("killed_restore: second cut: $cut->{summary}");
	unlike(slurp_file($node->logfile, $offset), $restored_re,
		'killed_restore: the killed restore did not finish');
	is(ring_read_u64($ring, 'tail') . '-' . ring_read_u64($ring, 'head'), "$tail-$head",
		'killed_restore: the ring still holds the same WAL');
	$offset = -s $node->logfile;
	$node->start;
	my (undef, $to) = slurp_file($node->logfile, $offset) =~ $restored_re;
	ok(defined $to, 'killed_restore: the next start restores again');
	is(defined $to ? lsn($to) : -1, $head, 'killed_restore: again up to the ring head');
	check_acked($node, $load, 'killed_restore');
	$node->stop;
}

# --- 4. one byte flipped in the ring's data area ----------------------------
{
	my ($node, $load) = loaded_and_cut('flipped');
	my $ring = $node->{pmwal_ring};
	# inside the last acknowledged record (xl_crc: record ends are 8-byte
	# aligned), never in its padding; if the record crossed a page boundary
	# just there, that byte is the unchecked padding of the page header:
	# take its xlp_pageaddr instead
	my $at = ring_read_u64($ring, 'last_end') - 20;
	$at -= 8 if $at % 8192 >= 16 && $at % 8192 < 24;
	cmp_ok($at, '>=', ring_read_u64($ring, 'tail'), 'flipped: the byte lies in the ring\'s range');
	my $off = ring_offset($node, $at);
	my $old = ring_poke($node, $off, 'x');
	ring_poke($node, $off, chr(ord($old) ^ 0xff));
	my $before = wal_fingerprint($node);
	my $offset = -s $node->logfile;
	ok(!$node->start(fail_ok => 1), 'flipped: the server refuses to start');
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/FATAL:  pmwal ring "[^"]+" holds damaged WAL; nothing was restored/,
		'flipped: FATAL says the ring holds damaged WAL');
	like($log, qr/DETAIL:  (Verifying the ring's WAL from [0-9A-F\/]+ to [0-9A-F\/]+ failed after [0-9A-F\/]+: |The ring's WAL from .* reads cleanly only to )/,
		'flipped: DETAIL says where verification failed');
	like($log, qr/HINT:  See "When the ring cannot be restored" in pmwal's README/,
		'flipped: HINT points to the documented procedure');
	is(wal_fingerprint($node), $before, 'flipped: pg_wal and the ring are unchanged');
	ring_poke($node, $off, $old);
	$node->start;
	check_acked($node, $load, 'flipped_repaired');
	$node->stop;
}

# --- 5. torn header: bytes beyond the published head ------------------------
{
	my ($node, $load) = loaded_and_cut('torn', ring_cut => 'durable');
	my $ring = $node->{pmwal_ring};
	my $head = ring_read_u64($ring, 'head');
	# a copier wrote (part of) the next WAL but died before publishing head
	my $garbage = join('', map { chr(int(rand(256))) } 1 .. 8192);
	ring_poke($node, ring_offset($node, $head), $garbage);
	my $offset = -s $node->logfile;
	$node->start;
	my ($from, $to, $bytes) = slurp_file($node->logfile, $offset) =~ $restored_re;
	is(defined $to ? lsn($to) : -1, $head, 'torn: restored up to the published head, not beyond');
	is($bytes, defined $from ? $head - lsn($from) : -1, 'torn: no byte beyond the head was written');
	check_acked($node, $load, 'torn');
	$node->stop;
}

# --- 6. stale ring -----------------------------------------------------------
{
	my ($node, $load) = loaded_and_cut('stale');
	my $ring = $node->{pmwal_ring};
	File::Copy::copy($ring, "$ring.old") or die "copy: $!";
	$node->start;
	# the next checkpoint's redo point lies in a later segment than
	# anything the old ring holds (a ring reaching into the redo point's
	# segment is restored, not dropped)
	$node->safe_psql('postgres', 'SELECT pg_switch_wal(); CHECKPOINT');
	check_acked($node, $load, 'stale');
	$node->stop;
	File::Copy::copy("$ring.old", $ring) or die "copy: $!";
	unlink "$ring.old";
	chmod 0600, $ring;
	my $old_head = ring_read_u64($ring, 'head');
	cmp_ok($old_head, '>', ring_read_u64($ring, 'tail'), 'stale: the old ring holds WAL');
	my $offset = -s $node->logfile;
	$node->start;
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/LOG:  pmwal ring "[^"]+" holds only WAL older than the last checkpoint; not restored/,
		'stale: LOG says the ring is older than the last checkpoint');
	unlike($log, $restored_re, 'stale: nothing was restored');
	cmp_ok(ring_read_u64($ring, 'tail'), '>=', $old_head, 'stale: the old WAL was dropped from the ring');
	# the old bytes were not written over the newer WAL
	check_acked($node, $load, 'stale_ring_back', recheck => 1);
	$node->stop;
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
	like($log, qr/all server processes terminated; reinitializing.*pmwal restored WAL .*redo starts at/s,
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

# --- 8. checkpoint while the flusher lags, then a power cut -----------------
# A checkpoint can put its redo point into a segment the flusher has not
# synced yet (it syncs a new segment within milliseconds, unless a slow
# fdatasync holds it up: here it is stopped).  With wal_keep_size the
# checkpoint removes no segment.  The power cut takes the segment's content
# written without fsync, first page included, although pg_control already
# points into it.  Recovery reads that first page (the segment's long
# header) before the checkpoint record, so the restore must write the
# segment from its start.
#
# The checkpointer's own XLogFlush of its record would be a real fdatasync
# of that segment, first page included, unless a commit's write without
# fsync got ahead of it: gdb holds the checkpointer there while a commit
# does exactly that.  The WAL writer is stopped too (it could flush the
# record for real meanwhile).
{
	my $tag = 'lagging_flusher';
	my ($node, $load) = loaded_node($tag, conf => "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\n");
	stop_server_process($node, $_) for qw(flusher walwriter);
	my $seg = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
	$node->poll_query_until('postgres',
		"SELECT pg_walfile_name(pg_current_wal_insert_lsn()) > '$seg'")
	  or die "$tag: the load does not reach the next segment";
	$load->{h}->kill_kill;
	acked_load_finish($load);
	# the load's backends gone: only the commit below writes during the
	# checkpoint
	$node->poll_query_until('postgres', q{
SELECT count(*) = 0 FROM pg_stat_activity
 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()})
	  or die "$tag: the load's backends do not exit";

	my $ckpt_pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
	# only the flush of the checkpoint record itself: CheckPointGuts flushes
	# too, for pages and SLRU buffers, with locks a commit may need
	my $gdb = gdb_break($ckpt_pid, 'XLogFlush if $_caller_is("CreateCheckPoint")');
	my $ckpt = bg_psql($node, 'CHECKPOINT');
	ok(gdb_wait_hit($gdb, 60, $ckpt->{h}), "$tag: the checkpointer is held at the flush of its record");
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
	gdb_release($gdb);
	my ($rc) = bg_psql_finish($ckpt);
	is($rc, 0, "$tag: the checkpoint completed");
	my $redo = lsn($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));

	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $ring = $node->{pmwal_ring};
	my $segstart = $redo - $redo % (16 * 1024 * 1024);
	cmp_ok(ring_read_u64($ring, 'tail'), '<', $segstart,
		"$tag: the ring holds the redo point's segment from its start");
	my $path = segment_of($node, $redo);
	my $magic;
	if (open my $fh, '<:raw', $path)
	{
		my $buf;
		$magic = unpack('v', $buf) if sysread($fh, $buf, 2) == 2;
		close $fh;
	}
	ok(!defined $magic || $magic != 0xD110,
		"$tag: the power cut took the first page of the redo point's segment ("
		  . (defined $magic ? sprintf('magic %04X', $magic) : 'no file') . ')');
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server recovers")
	  or diag(slurp_file($node->logfile, $offset));
	my ($from) = slurp_file($node->logfile, $offset) =~ $restored_re;
	ok(defined $from && lsn($from) <= $segstart,
		"$tag: restored from the start of the redo point's segment or earlier");
	if ($node->{_pid})
	{
		check_acked($node, $load, $tag);
		is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '1',
			"$tag: the commit made during the checkpoint is there");
		$node->stop;
	}
}

diag(sprintf('%d acknowledged commits checked present across the restore scenarios; %.0f s',
		$checked, Time::HiRes::time() - $started));

done_testing();

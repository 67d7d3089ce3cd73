# The ring under committing load: pmwal.enabled toggled, the ring retired
# and anchored again, a small ring wrapping hundreds of times, a writer
# killed between its copy and its drain, the flusher's error exit -- each
# held at a precise moment (the items of issue 14, third review), then a
# simulated power cut (tools/powercut, fsync = on) and a count of every
# acknowledged commit.  Each case runs on a node of its own; where it is
# about durability, a negative control (the same data directory started
# without its ring) shows that the cut really took what only the ring held.
#
#	1. (dropped with pmwal 1.x's gate, gate.c) issue 14, "ROLLBACK
#	   PREPARED": its flush is PostgreSQL's own, answered from the ring
#	   before it unlinks anything; t/012 cuts the power at its own WAL
#	   sync, at its unlink and after it returned.
#	2. issue 14, "pmwal.enabled toggled off and on under load, with the
#	   flusher held in its pass": three rounds under pgbench of
#	   (a) the flusher held inside its pass (durable_after_sync, holding
#	       sync_lock): commits go on through the ring, and pmwal.enabled =
#	       off does not take effect yet (the flusher carries the setting
#	       to shared memory);
#	   (b) released, it carries pmwal.enabled = off: the next writer
#	       retires the ring, held after its real sync (retire_after_sync);
#	       then commits are synced by PostgreSQL;
#	   (c) pmwal.enabled = on: the next write anchors the ring again;
#	   then a power cut at a random moment.  Then a power cut with the
#	   flusher held in its pass (the ring holds what came after its
#	   sync), and one with a writer held in a retirement (the other way
#	   round: everything acknowledged was synced before the hold, so the
#	   data directory alone must hold it).  Last, (d) a retirement right
#	   after a checkpoint, when commits since rewrote only the page the
#	   checkpoint's sync covered: the retiring writer is stopped by gdb at
#	   its first fdatasync; the acknowledged commit in that page must
#	   survive the power cut (before 9e5f472 the retirement's sync was
#	   skipped there -- durable_lsn is a page end and claimed the rewritten
#	   page -- and the ring emptied: until PostgreSQL's own fdatasync
#	   returned, the commit was in neither).
#	3. issue 14, "a 2 MB ring wrapping hundreds of times and filled to
#	   within one page, with a record spanning a segment boundary in the
#	   restore": WAL of more than 200 times the ring's capacity under load,
#	   then commits fill the ring (flusher held, WAL writer stopped) across
#	   a segment boundary to within one page of its capacity, none finding
#	   it full (ring_full) or too small (retires).  With a 2 MB ring the
#	   segment boundary is also the ring's wrap point.
#	4. issue 14, "a backend SIGKILLed mid-copy, then a crash-restart and a
#	   power cut": now a writer killed with its WAL copied into the ring but
#	   not drained (write_before_drain, holding WALWriteLock).
#	5. issue 14, "the flusher's error exit": an ERROR at the top of the
#	   flusher's loop under load; the postmaster starts it again.  The
#	   flusher is not needed for correctness any more: commits stay
#	   answered from the ring while it is down.
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;
my $SEG = 16 * $MB;
my $started = Time::HiRes::time();
my ($checked, $lost_total) = (0, 0);

# Start acknowledged load and wait until $rows of its commits are in.
sub start_load
{
	my ($node, $tag, %opts) = @_;
	my $load = acked_load_start($node, tag => $tag, %opts);
	wait_load($node, $load, $opts{rows} // 300);
	return $load;
}

# Wait until at least $n more of $load's rows than now are committed.
sub wait_load
{
	my ($node, $load, $n) = @_;
	my $base = $load->{base};
	my $where = "id % 1000000000 > $base AND id % 1000000000 < $base + 100000000";
	my $now = $node->safe_psql('postgres', "SELECT count(*) FROM t WHERE $where");
	$node->poll_query_until('postgres', "SELECT count(*) >= $now + $n FROM t WHERE $where")
	  or die "the load does not run: ${ $load->{err} }";
	return;
}

# Every acknowledged id of $load present; counts into the totals.
sub check_acked
{
	my ($node, $load, $tag, %opts) = @_;
	my ($n, $missing) = acked_check($node, $load);
	diag("$tag: $n acknowledged commits checked" . ($opts{recheck} ? ' again' : '')
		  . ", $missing missing");
	cmp_ok($n, '>', 0, "$tag: commits were acknowledged");
	is($missing, 0, "$tag: all $n acknowledged commits are present");
	unless ($opts{recheck})
	{
		$checked += $n;
		$lost_total += $missing;
	}
	return;
}

# Negative control: how many of the acknowledged ids of @loads a copy of
# the stopped node's data directory lacks when started without its ring
# (all of them if it cannot even start).  Returns (lost, acknowledged).
sub lost_without_ring
{
	my ($node, @loads) = @_;
	my (@ranges, $acked);
	for my $load (@loads)
	{
		for my $c (sort keys %{ $load->{acked} })
		{
			my $n = $load->{acked}{$c};
			my $lo = $load->{base} + $c * 1_000_000_000;
			$acked += $n;
			push @ranges, "(id > $lo AND id <= " . ($lo + $n) . ')';
		}
	}
	my $present = without_ring_query($node,
		'SELECT count(*) FROM t WHERE ' . join(' OR ', @ranges));
	return ((defined $present ? $acked - $present : $acked), $acked);
}

# Start the node again after a power cut (under the power-cut log again
# with "powercut"); a refused start is a failure of its own and ends the
# test with the server log's last lines.
sub restart
{
	my ($node, $tag, $powercut) = @_;
	my $offset = -s $node->logfile;
	my $ok = $powercut ? powercut_start($node, fail_ok => 1) : $node->start(fail_ok => 1);
	return 1 if $ok;
	diag(slurp_file($node->logfile, $offset));
	die "$tag: the server does not start after the power cut\n";
}

# Run one case; a case that dies fails, and the next one runs.
sub run_case
{
	my ($name, $case) = @_;
	eval { $case->(); 1 } or fail("case $name: $@");
	return;
}

# Set pmwal.enabled (and pmwal.test_pause) for every process.
sub set_enabled
{
	my ($node, $on, $points) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET pmwal.enabled = " . ($on ? 'on' : 'off'));
	arm_all($node, $points // '');
	return;
}

# --- 2. pmwal.enabled off and on under load, flusher held (issue 14) -------
run_case('2', sub {
	my $node = quiet_node('toggle', interval => '500ms');
	my $load = start_load($node, 'toggle');
	for my $round (1 .. 3)
	{
		# (a) the flusher held inside its pass, holding sync_lock
		my $offset = -s $node->logfile;
		arm_all($node, 'durable_after_sync');
		my $pid = pause_wait($node, 'durable_after_sync', $offset);
		my $st = pmwal_status($node);
		is($pid, $st->{flusher_pid}, "toggle $round: the flusher is held in its pass");
		wait_load($node, $load, 100);
		my $st2 = pmwal_status($node);
		cmp_ok($st2->{ring_syncs}, '>', $st->{ring_syncs},
			"toggle $round: 100 more commits, their syncs answered from the ring, while it is held");
		is($st2->{sync_rounds}, $st->{sync_rounds}, "toggle $round: no real sync meanwhile");
		$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = off; SELECT pg_reload_conf()');
		wait_load($node, $load, 100);
		my $st3 = pmwal_status($node);
		ok($st3->{accelerated} eq 'true' && $st3->{ring_syncs} > $st2->{ring_syncs},
			"toggle $round: pmwal.enabled = off waits for the held flusher to carry it ($st3->{accelerated})");

		# (b) released: the flusher carries it, the next writer retires the
		# ring and is held after its real sync
		$offset = -s $node->logfile;
		set_enabled($node, 0, 'retire_after_sync');
		pause_release($node, 'durable_after_sync');
		$pid = pause_wait($node, 'retire_after_sync', $offset);
		$st = pmwal_status($node);
		isnt($pid, $st->{flusher_pid}, "toggle $round: a writer is held in the retirement");
		is($st->{reason}, 'pmwal.enabled is off', "toggle $round: commits are not accelerated");
		disarm_all($node);
		pause_release($node, 'retire_after_sync');
		$node->wait_for_log(qr/pmwal gave up its ring for ordinary WAL syncs: pmwal.enabled is off/, $offset);
		$st = pmwal_status($node);
		wait_load($node, $load, 100);
		$st2 = pmwal_status($node);
		is($st2->{ring_syncs}, $st->{ring_syncs}, "toggle $round: 100 more commits, none answered from the ring");
		cmp_ok($st2->{pass_syncs}, '>', $st->{pass_syncs}, "toggle $round: PostgreSQL synced them itself");

		# (c) on again: the next write anchors the ring
		$offset = -s $node->logfile;
		set_enabled($node, 1);
		$node->wait_for_log(qr/pmwal ring "[^"]+" anchored at/, $offset);
		$st = pmwal_status($node);
		wait_load($node, $load, 200);
		cmp_ok(pmwal_status($node)->{ring_syncs}, '>', $st->{ring_syncs},
			"toggle $round: commits are answered from the ring again");
	}
	# the flusher off the CPU, then the cut at a random moment: what it
	# synced last is behind the load
	stop_server_process($node, 'flusher');
	Time::HiRes::sleep(0.1 + rand(1.0));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("toggle: cut after the last toggle: $cut->{summary}");
	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"toggle: negative control: without the ring $lost of $acked acknowledged commits are missing");
	forget_pauses($node);
	restart($node, 'toggle', 1);
	check_acked($node, $load, 'toggle');

	# a power cut with the flusher held in its pass, commits going on
	my $load2 = start_load($node, 'toggle_pass', base => 200_000_000);
	my $offset = -s $node->logfile;
	arm_all($node, 'durable_after_sync');
	pause_wait($node, 'durable_after_sync', $offset);
	wait_load($node, $load2, 100 + int(rand(200)));
	$cut = powercut($node);
	acked_load_finish($load2);
	note("toggle_pass: cut while the flusher is held in its pass: $cut->{summary}");
	($lost, $acked) = lost_without_ring($node, $load2);
	cmp_ok($lost, '>', 0,
		"toggle_pass: negative control: without the ring $lost of $acked acknowledged commits are missing");
	forget_pauses($node);
	restart($node, 'toggle_pass', 1);
	check_acked($node, $load2, 'toggle_pass');

	# a power cut with a writer held in the retirement
	my $load3 = start_load($node, 'toggle_retire', base => 500_000_000);
	$offset = -s $node->logfile;
	set_enabled($node, 0, 'retire_after_sync');
	pause_wait($node, 'retire_after_sync', $offset);
	$cut = powercut($node);
	acked_load_finish($load3);
	note("toggle_retire: cut while a writer is held in the retirement: $cut->{summary}");
	# Everything acknowledged was synced before the writer paused (the
	# load waits behind it): the data directory alone must hold them all.
	($lost, $acked) = lost_without_ring($node, $load3);
	is($lost, 0,
		"toggle_retire: without the ring too, all $acked acknowledged commits are there (the retirement synced before it paused)");
	forget_pauses($node);
	$node->append_conf('postgresql.auto.conf', "pmwal.enabled = on\n");
	restart($node, 'toggle_retire', 1);
	check_acked($node, $load3, 'toggle_retire');
	check_acked($node, $load2, 'toggle_pass', recheck => 1);
	check_acked($node, $load, 'toggle', recheck => 1);

	# (d) a retirement right after a checkpoint: the commit since rewrote
	# only the page the checkpoint's sync covered
	wait_accelerated($node, 't') or die 'toggle_ckpt: commits are not accelerated';
	$node->safe_psql('postgres', 'CREATE TABLE r (id int)');
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', 'INSERT INTO r VALUES (1)');
	my $st = pmwal_status($node);
	note("toggle_ckpt: after the checkpoint and a commit: ring [$st->{tail_lsn}, $st->{head_lsn}), durable $st->{durable_lsn}");
	set_enabled($node, 0);
	$node->poll_query_until('postgres', q{SELECT reason = 'pmwal.enabled is off' FROM pmwal_status})
	  or die 'toggle_ckpt: pmwal.enabled = off is not carried';
	stop_server_process($node, $_) for qw(walwriter flusher);
	my $s = psql_session($node);
	my $pid = session_pid($s);
	my $gdb = gdb_break($pid, 'fdatasync', leave_stopped => 1);
	send_and_wait($s, "INSERT INTO r VALUES (2);\n");
	ok(gdb_wait_hit($gdb, 120, $s->{h}), 'toggle_ckpt: the retiring writer is stopped at its first fdatasync');
	$gdb->{h}->finish;
	$st = pmwal_status($node);
	note("toggle_ckpt: ring [$st->{tail_lsn}, $st->{head_lsn}) $st->{state}, durable $st->{durable_lsn}");
	$cut = powercut($node);
	note("toggle_ckpt: $cut->{summary}");
	session_end($s);
	forget_pauses($node);
	$node->append_conf('postgresql.auto.conf', "pmwal.enabled = on\n");
	$offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), 'toggle_ckpt: the server starts after the power cut')
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		is($node->safe_psql('postgres', 'SELECT count(*) FROM r WHERE id = 1'), '1',
			'toggle_ckpt: the commit acknowledged before the retirement is there');
		$node->stop;
	}
});

# --- 3. a 2 MB ring wrapped hundreds of times, cut full across a segment ---
# boundary (issue 14)
run_case('3', sub {
	# wal_buffers = 1MB: no single WAL write is larger than the ring
	my $node = quiet_node('small_ring', size => '2MB', interval => '200ms', conf => "wal_buffers = 1MB\n");
	my $cap = pmwal_status($node)->{capacity};
	is($cap, 2 * $MB, 'small_ring: the ring holds 2 MB');
	$node->safe_psql('postgres', 'CREATE TABLE m (id int PRIMARY KEY)');
	my $insert = sub { lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()')) };

	# wrap: acknowledged inserts plus 100 kB logical messages
	my $load = start_load($node, 'small_ring');
	my $wrap = $node->basedir . '/wrap.sql';
	append_to_file($wrap, "SELECT pg_logical_emit_message(true, 'wrap', repeat('w', 100000));\n");
	my ($vout, $verr) = ('', '');
	my $from = $insert->();
	my $vol = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '2', '-j', '1', '-T', '600', '-f', $wrap,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$vout, '2>', \$verr);
	my $t0 = Time::HiRes::time();
	$node->poll_query_until('postgres',
		"SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn > $from + 200 * $cap")
	  or die "small_ring: the ring does not wrap: $verr";
	$vol->kill_kill;
	$load->{h}->kill_kill;
	acked_load_finish($load);
	my $st = pmwal_status($node);
	my $wal = $insert->() - $from;
	diag(sprintf('small_ring: %d MB of WAL, %.0f times the capacity, in %.1f s (%d ring writes, %d ring syncs; full %d, large %d, retires %d, anchors %d, sync rounds %d)',
			$wal / $MB, $wal / $cap, Time::HiRes::time() - $t0, $st->{ring_writes}, $st->{ring_syncs},
			$st->{ring_full}, $st->{large_writes}, $st->{retires}, $st->{anchors}, $st->{sync_rounds}));
	cmp_ok($wal, '>', 200 * $cap, 'small_ring: the WAL wrapped the ring more than 200 times');
	is($st->{retires}, 0, 'small_ring: the ring was never retired');

	# Then jump close to the next segment boundary with one
	# non-transactional message (the commit after it finds the ring full
	# again and again), and a checkpoint: the fill starts from a ring
	# holding only the page the checkpoint's record ended in, and what the
	# commit after it wrote.
	my $ins = $insert->();
	my $boundary = $ins - $ins % $SEG + $SEG;
	$boundary += $SEG if $boundary - $ins < 2 * $MB;
	$node->safe_psql('postgres',
		"SELECT pg_logical_emit_message(false, 'jump', repeat('j', " . ($boundary - $ins - 1800 * 1024) . '))');
	my $m_acked = 0;
	$node->safe_psql('postgres', 'INSERT INTO m VALUES (' . ++$m_acked . ')');
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', 'INSERT INTO m VALUES (' . ++$m_acked . ')');
	# hold the flusher at the top of its loop (holding no lock) and stop
	# the WAL writer
	my $offset = -s $node->logfile;
	arm_all($node, 'flusher_loop');
	pause_wait($node, 'flusher_loop', $offset);
	disarm_all($node);
	stop_server_process($node, 'walwriter');

	# fill: commits of a logical message and a row of m, each sized to fit
	# (its write may end at most capacity past the ring's tail), until
	# less than one page is left
	$st = pmwal_status($node);
	my $tail = lsn_num($st->{tail_lsn});
	cmp_ok($tail, '<', $boundary, "small_ring: the ring begins ($st->{tail_lsn}) before the segment boundary");
	my $first_fill = $m_acked + 1;
	my $crossing;
	for (1 .. 30)
	{
		my $at = $insert->();
		my $room = $tail + $cap - $at;
		my $size = $room - 600 - 24 * (int($room / 8168) + 2);
		$size = 400 * 1024 if $size > 400 * 1024;
		last if $size < 100;
		$node->safe_psql('postgres',
			'INSERT INTO m SELECT ' . ++$m_acked
			  . " FROM pg_logical_emit_message(true, 'fill', repeat('f', $size))");
		my $to = $insert->();
		$crossing = sprintf('%X-%X', $at, $to) if $at < $boundary && $to > $boundary;
	}
	my $fill = pmwal_status($node);
	my $head = lsn_num($fill->{head_lsn});
	my $left = lsn_num($fill->{tail_lsn}) + $cap - $head;
	diag(sprintf('small_ring: ring [%s, %s), %d of %d bytes; %d bytes left; segment boundary %X/%X; crossing %s',
			$fill->{tail_lsn}, $fill->{head_lsn}, $head - lsn_num($fill->{tail_lsn}), $cap, $left,
			int($boundary / 2**32), $boundary % 2**32, $crossing // 'none'));
	is($fill->{tail_lsn}, $st->{tail_lsn}, 'small_ring: nothing freed the ring during the fill');
	ok(defined $crossing, 'small_ring: a fill commit wrote a record across the segment boundary');
	ok($tail < $boundary && $head > $boundary && $boundary % $cap == 0,
		'small_ring: the ring holds WAL across the segment boundary, which is its wrap point');
	ok($left >= 0 && $left < 8192, "small_ring: the ring is full to within one page ($left bytes left)");
	is(join(',', map { $fill->{$_} - $st->{$_} } qw(ring_full large_writes retires pass_writes pass_syncs)),
		'0,0,0,0,0', 'small_ring: no fill commit found the ring full or too small');
	cmp_ok($fill->{ring_syncs} - $st->{ring_syncs}, '>=', $m_acked - $first_fill + 1,
		'small_ring: every fill commit was answered from the ring');

	my $cut = powercut($node);
	note("small_ring: $cut->{summary}");
	my $without = without_ring_query($node, "SELECT count(*) FROM m WHERE id >= $first_fill") // 0;
	my $fills = $m_acked - $first_fill + 1;
	cmp_ok($without, '<', $fills,
		"small_ring: negative control: without the ring only $without of $fills acknowledged fill commits are there");
	forget_pauses($node);
	$offset = -s $node->logfile;
	restart($node, 'small_ring');
	my ($from_lsn, $to_lsn) = slurp_file($node->logfile, $offset) =~
	  /pmwal restored WAL ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) from the ring/;
	ok(defined $from_lsn && int(lsn_num($from_lsn) / $SEG) != int(lsn_num($to_lsn) / $SEG),
		'small_ring: the restore wrote WAL ' . ($from_lsn // '?') . ' to ' . ($to_lsn // '?')
		  . ', across a segment boundary');
	check_acked($node, $load, 'small_ring');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM m'), $m_acked,
		"small_ring: all $m_acked acknowledged commits of the fill are there");
	$checked += $m_acked;
	$node->stop;
});

# --- 4. a writer SIGKILLed with its copy not drained (issue 14) -------------
run_case('4', sub {
	my $node = quiet_node('killed_copier', conf => "restart_after_crash = on\n");
	my $load = start_load($node, 'killed_copier');
	my ($bg, $victim, $try) = hold_at($node, 'write_before_drain',
		sub { 'INSERT INTO t VALUES (' . (100_000_000_000 + $_[0]) . ')' });
	note("killed_copier: writer $victim held with its WAL copied, not drained (try $try)");
	my $offset = -s $node->logfile;
	powercut_kill_one($victim);
	bg_psql_finish($bg);
	acked_load_finish($load);
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/\(PID $victim\) was terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
		'killed_copier: the postmaster reinitialised after the writer was killed');
	like($log, qr/all server processes terminated; reinitializing.*pmwal restored WAL .*redo starts at/s,
		'killed_copier: the ring was restored at the crash-restart, before redo');
	wait_accelerated($node, 't') or die 'killed_copier: commits are not accelerated after the crash-restart';
	my $load2 = start_load($node, 'killed_copier_after', base => 500_000_000);
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load2);
	note("killed_copier: cut after the crash-restart: $cut->{summary}");
	cmp_ok($cut->{undone}, '>', 0, 'killed_copier: the power cut undid WAL writes not yet synced');
	my ($lost, $acked) = lost_without_ring($node, $load2);
	cmp_ok($lost, '>', 0,
		"killed_copier: negative control: without the ring $lost of $acked commits acknowledged after the crash-restart are missing");
	restart($node, 'killed_copier');
	check_acked($node, $load, 'killed_copier');
	check_acked($node, $load2, 'killed_copier_after');
	$node->stop;
});

# --- 5. the flusher's error exit (issue 14) --------------------------------
# An ERROR in the flusher (here one raised at the top of its loop) ends it
# with exit code 1; the postmaster starts it again a second later.  Commits
# stay answered from the ring meanwhile, and nothing acknowledged is lost.
run_case('5', sub {
	my $node = quiet_node('flusher_error', interval => '1s');
	my $load = start_load($node, 'flusher_error');
	my $old = pmwal_status($node);
	my $offset = -s $node->logfile;
	arm_all($node, 'flusher_loop:error');
	$node->wait_for_log(qr/pmwal test error at "flusher_loop"/, $offset);
	# disarm at once, before the postmaster starts the flusher again
	disarm_all($node);

	my (@down, $new);
	my $deadline = Time::HiRes::time() + 60;
	while (1)
	{
		my %s;
		@s{qw(accelerated reason pid syncs)} = split /\|/, $node->safe_psql('postgres',
			q{SELECT accelerated, coalesce(reason, ''), coalesce(flusher_pid, 0), ring_syncs FROM pmwal_status});
		push @down, \%s if $s{pid} == 0;
		if ($s{pid} != 0 && $s{pid} != $old->{flusher_pid})
		{
			$new = \%s;
			last;
		}
		die 'flusher_error: the flusher does not come back' if Time::HiRes::time() > $deadline;
		Time::HiRes::usleep(10_000);
	}
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/background worker "pmwal flusher" \(PID $old->{flusher_pid}\) exited with exit code 1/,
		'flusher_error: the flusher exited with code 1 after the ERROR');
	my @errors = $log =~ /pmwal test error at "flusher_loop"/g;
	is(scalar @errors, 1, 'flusher_error: the restarted flusher did not fail again');
	ok(@down > 1 && !grep({ $_->{accelerated} ne 't' } @down),
		'flusher_error: while it was down, commits stayed accelerated (' . scalar(@down) . ' samples)');
	cmp_ok(@down ? $down[-1]{syncs} : 0, '>', @down ? $down[0]{syncs} : 0,
		'flusher_error: while it was down, WAL syncs were answered from the ring');
	wait_load($node, $load, 300);
	my $st = pmwal_status($node);
	$node->poll_query_until('postgres', "SELECT sync_rounds > $st->{sync_rounds} FROM pmwal_status")
	  or die 'flusher_error: the new flusher does not sync';
	ok(1, "flusher_error: the new flusher (pid $new->{pid}) syncs pg_wal");

	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("flusher_error: $cut->{summary}");
	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"flusher_error: negative control: without the ring $lost of $acked acknowledged commits are missing");
	forget_pauses($node);
	restart($node, 'flusher_error');
	check_acked($node, $load, 'flusher_error');
	$node->stop;
});

diag(sprintf('%d acknowledged commits checked, %d missing; %.0f s',
		$checked, $lost_total, Time::HiRes::time() - $started));

done_testing();

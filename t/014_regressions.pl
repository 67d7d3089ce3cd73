# Regressions for the items of issue 14 (third review) that need a process
# held at a precise moment, then a simulated power cut (tools/powercut,
# fsync = on) and a count of every acknowledged commit.  Each case runs on
# a node of its own; where it is about durability, a negative control (the
# same data directory started without its ring) shows that the cut really
# took what only the ring held.
#
#	1. issue 14, "ROLLBACK PREPARED": ROLLBACK PREPARED pauses new write
#	   windows and waits for the open ones (gate.c).
#	   (a) a committer held in its write window (commit_after_write):
#	       ROLLBACK PREPARED waits until it is released;
#	   (b) ROLLBACK PREPARED held after it paused new windows (gate_paused):
#	       a commit meanwhile opens no window (fallback_paused + 1).
#	2. issue 14, "pmwal.enabled toggled off and on under load, with the
#	   flusher held in its drain and in its re-anchor": three toggles under
#	   pgbench, then a power cut at a random moment; then a power cut while
#	   the flusher is held in its drain (there the control is the other way
#	   round: the drain synced before it paused, so the data directory alone
#	   must hold every acknowledged commit).
#	3. issue 14, "a 2 MB ring wrapping hundreds of times and filled to
#	   within one page, with a record spanning a segment boundary in the
#	   restore": more than 200 wraps under load, then commits fill the ring
#	   (flusher held) across a segment boundary to within one page of what
#	   write_window_open() lets a commit take (capacity - margin).  With a
#	   2 MB ring the segment boundary is also the ring's wrap point.
#	4. issue 14, "a backend SIGKILLed holding the ring lock mid-copy, then a
#	   crash-restart and a power cut" (copy_before_head).
#	5. issue 14, "still to find out and test: the flusher's error exit":
#	   an ERROR at the top of the flusher's loop under load; the postmaster
#	   starts it again, commits go on meanwhile the ordinary way.
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;
my $SEG = 16 * $MB;
my $started = Time::HiRes::time();
my ($checked, $lost_total) = (0, 0);

# A node under the power-cut log whose WAL only pmwal syncs, with table t
# for acked_load_start.
sub quiet_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		conf => QUIET_WAL
		  . 'pmwal.flush_interval = ' . ($opts{interval} // '60s') . "\n"
		  . "autovacuum = off\n" . ($opts{conf} // ''));
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	return $node;
}

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

# Arm (or, with '', disarm) pause points for the flusher: it reads the
# setting at the top of its loop after a reload.
sub set_flusher_pause
{
	my ($node, $points, $extra) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = '$points';\n"
		  . ($extra // '') . "SELECT pg_reload_conf();");
	return;
}

# Run a statement in the background with pmwal.test_pause = $point in that
# session, until a try stops at the point (under load a commit may find its
# WAL carried by another's copy and never get there).  $sql->($try) gives
# the statement of each try.
# Returns (handle, pid, try).
sub hold_session
{
	my ($node, $point, $sql) = @_;
	for my $try (1 .. 30)
	{
		my $offset = -s $node->logfile;
		my $bg = bg_psql($node, "SET pmwal.test_pause = '$point'", $sql->($try));
		my $deadline = Time::HiRes::time() + 10;
		while (Time::HiRes::time() < $deadline)
		{
			my $pid = pause_seen($node, $point, $offset);
			return ($bg, $pid, $try) if $pid;
			$bg->{h}->pump_nb;
			last unless $bg->{h}->pumpable;
			Time::HiRes::usleep(10_000);
		}
		$bg->{h}->kill_kill if $bg->{h}->pumpable;
		my ($rc, $out, $err) = bg_psql_finish($bg);
		die "hold_session: try $try failed: $err" if $rc;
	}
	die "hold_session: no try stopped at \"$point\"";
}

# Is a session running $query right now?
sub running
{
	my ($node, $query) = @_;
	$query =~ s/'/''/g;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query = '$query' AND state = 'active'");
}

# --- 1a. ROLLBACK PREPARED waits for an open write window (issue 14) -------
# A committer is held between its write without fsync and its ring copy
# (commit_after_write).  ROLLBACK PREPARED flushes its record and then
# unlinks the prepared transaction's state file: it must not run while a
# write window is open, so it waits until the committer is released.
{
	my $node = quiet_node('rollback_waits', conf => "max_prepared_transactions = 5\n");
	$node->safe_psql('postgres', q{
CREATE TABLE p (id int PRIMARY KEY);
BEGIN; INSERT INTO p VALUES (-1); PREPARE TRANSACTION 'x';
CHECKPOINT});
	ok(twophase_state_file($node, 'x'),
		'rollback_waits: the checkpoint wrote the state file of the prepared transaction');
	my $load = start_load($node, 'rollback_waits');

	my ($held, $a_pid, $a_id) = hold_session($node, 'commit_after_write',
		sub { "INSERT INTO p VALUES ($_[0])" });
	note("rollback_waits: committer $a_pid held in its write window (try $a_id)");
	my $paused_before = pmwal_status($node)->{fallback_paused};
	my $r = bg_psql($node, q{ROLLBACK PREPARED 'x'});
	Time::HiRes::sleep(1);
	is(running($node, q{ROLLBACK PREPARED 'x'}), '1',
		'rollback_waits: ROLLBACK PREPARED still runs after 1 s while a write window is open');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'x'}), '1',
		'rollback_waits: the transaction is still prepared');
	cmp_ok(pmwal_status($node)->{fallback_paused}, '>', $paused_before,
		'rollback_waits: meanwhile the load commits the ordinary way (fallback_paused)');

	pause_release($node, 'commit_after_write');
	my ($rc_a, undef, $err_a) = bg_psql_finish($held);
	my ($rc_r, undef, $err_r) = bg_psql_finish($r);
	is($rc_a, 0, "rollback_waits: the held commit is acknowledged once released $err_a");
	is($rc_r, 0, "rollback_waits: ROLLBACK PREPARED completes after it $err_r");
	wait_load($node, $load, 300);
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("rollback_waits: $cut->{summary}");

	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"rollback_waits: negative control: without the ring $lost of $acked acknowledged commits are missing");
	$node->start;
	check_acked($node, $load, 'rollback_waits');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'rollback_waits: the prepared transaction is rolled back after the power cut');
	is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM p'),
		join(',', 1 .. $a_id),
		"rollback_waits: the held committer's row ($a_id) and the earlier tries' are there, the prepared row is not");
	$node->stop;
}

# --- 1b. a commit while ROLLBACK PREPARED runs opens no window (issue 14) ---
{
	my $node = quiet_node('rollback_gate', conf => "max_prepared_transactions = 5\n");
	$node->safe_psql('postgres', q{
CREATE TABLE p (id int PRIMARY KEY);
BEGIN; INSERT INTO p VALUES (-2); PREPARE TRANSACTION 'y';
CHECKPOINT});
	my $offset = -s $node->logfile;
	my $r = bg_psql($node, "SET pmwal.test_pause = 'gate_paused'", q{ROLLBACK PREPARED 'y'});
	pause_wait($node, 'gate_paused', $offset);
	my $before = pmwal_status($node);
	$node->safe_psql('postgres', 'INSERT INTO p VALUES (2)');
	my $after = pmwal_status($node);
	is($after->{fallback_paused} - $before->{fallback_paused}, 1,
		'rollback_gate: the commit meanwhile completes the ordinary way (fallback_paused + 1)');
	is($after->{ring_commits} - $before->{ring_commits}, 0,
		'rollback_gate: it was not made durable through the ring');
	is(running($node, q{ROLLBACK PREPARED 'y'}), '1', 'rollback_gate: ROLLBACK PREPARED is still held');
	pause_release($node, 'gate_paused');
	my ($rc, undef, $err) = bg_psql_finish($r);
	is($rc, 0, "rollback_gate: ROLLBACK PREPARED completes $err");
	wait_accelerated($node, 't') or die 'rollback_gate: commits are not accelerated';

	my $load = start_load($node, 'rollback_gate');
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("rollback_gate: $cut->{summary}");
	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"rollback_gate: negative control: without the ring $lost of $acked acknowledged commits are missing");
	$node->start;
	check_acked($node, $load, 'rollback_gate');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'rollback_gate: the prepared transaction is rolled back after the power cut');
	is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM p'), '2',
		'rollback_gate: the commit made during the pause is there, the prepared row is not');
	$node->stop;
}

# --- 2. pmwal.enabled off and on under load, flusher held (issue 14) -------
{
	my $node = quiet_node('toggle');
	my $load = start_load($node, 'toggle');
	for my $round (1 .. 3)
	{
		# off: the flusher stops new windows, syncs, and is held before it
		# empties the ring
		pause_rearm($node, 'drain_after_sync');
		my $offset = -s $node->logfile;
		set_flusher_pause($node, 'drain_after_sync', "ALTER SYSTEM SET pmwal.enabled = off;\n");
		my $pid = pause_wait($node, 'drain_after_sync', $offset);
		my $st = pmwal_status($node);
		is($pid, $st->{flusher_pid}, "toggle $round: the flusher is held in its drain");
		is($st->{reason}, 'pmwal.enabled is off', "toggle $round: commits are not accelerated");
		wait_load($node, $load, 100);
		is(pmwal_status($node)->{ring_commits}, $st->{ring_commits},
			"toggle $round: 100 more commits, none through the ring, while the drain is held");
		pause_release($node, 'drain_after_sync');
		$node->wait_for_log(qr/pmwal drained the ring; commits are synced to pg_wal/, $offset);

		# on: the flusher syncs to a new boundary and is held before it
		# anchors the ring there
		pause_rearm($node, 'restart_after_sync');
		$offset = -s $node->logfile;
		set_flusher_pause($node, 'restart_after_sync', "ALTER SYSTEM SET pmwal.enabled = on;\n");
		$pid = pause_wait($node, 'restart_after_sync', $offset);
		$st = pmwal_status($node);
		is($st->{reason}, 'the pmwal flusher has not anchored the ring yet',
			"toggle $round: held in the re-anchor, commits are not accelerated yet");
		wait_load($node, $load, 100);
		is(pmwal_status($node)->{ring_commits}, $st->{ring_commits},
			"toggle $round: 100 more commits, none through the ring, while the re-anchor is held");
		pause_release($node, 'restart_after_sync');
		$node->wait_for_log(qr/pmwal ring "[^"]+" anchored at/, $offset);
		wait_accelerated($node, 't') or die "toggle $round: commits are not accelerated again";
		my $rc = pmwal_status($node)->{ring_commits};
		wait_load($node, $load, 200);
		cmp_ok(pmwal_status($node)->{ring_commits}, '>', $rc,
			"toggle $round: commits go through the ring again");
	}
	Time::HiRes::sleep(0.1 + rand(1.0));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("toggle: cut after the last toggle: $cut->{summary}");
	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"toggle: negative control: without the ring $lost of $acked acknowledged commits are missing");
	powercut_start($node);
	check_acked($node, $load, 'toggle');

	# a power cut while the flusher is held in its drain
	wait_accelerated($node, 't') or die 'toggle: commits are not accelerated after the restart';
	my $load2 = start_load($node, 'toggle_drain', base => 500_000_000);
	pause_rearm($node, 'drain_after_sync');
	my $offset = -s $node->logfile;
	set_flusher_pause($node, 'drain_after_sync', "ALTER SYSTEM SET pmwal.enabled = off;\n");
	pause_wait($node, 'drain_after_sync', $offset);
	wait_load($node, $load2, 100 + int(rand(200)));
	$cut = powercut($node);
	acked_load_finish($load2);
	note("toggle_drain: cut while the drain is held: $cut->{summary}");
	# Everything acknowledged through the ring was synced before the drain
	# paused, and every commit since was an ordinary synchronous one: the
	# data directory alone must hold them all.
	($lost, $acked) = lost_without_ring($node, $load2);
	is($lost, 0,
		"toggle_drain: without the ring too, all $acked acknowledged commits are there (the drain synced before it paused)");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	$offset = -s $node->logfile;
	$node->start;
	like(slurp_file($node->logfile, $offset), qr/pmwal restored WAL/,
		'toggle_drain: the ring held by the drain is restored');
	check_acked($node, $load2, 'toggle_drain');
	check_acked($node, $load, 'toggle', recheck => 1);
	$node->stop;
}

# --- 3. a 2 MB ring wrapped hundreds of times, cut full across a segment ---
# boundary (issue 14)
{
	my $node = quiet_node('small_ring', size => '2MB', interval => '200ms');
	my $cap = pmwal_status($node)->{capacity};
	is($cap, 2 * $MB, 'small_ring: the ring holds 2 MB');
	my $margin = $cap / 16 > 65536 ? $cap / 16 : 65536;    # window_margin()
	$node->safe_psql('postgres', 'CREATE TABLE m (id int PRIMARY KEY)');

	# wrap: acknowledged inserts plus 100 kB logical messages
	my $load = start_load($node, 'small_ring');
	my $wrap = $node->basedir . '/wrap.sql';
	append_to_file($wrap, "SELECT pg_logical_emit_message(true, 'wrap', repeat('w', 100000));\n");
	my ($vout, $verr) = ('', '');
	my $vol = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '2', '-j', '1', '-T', '300', '-f', $wrap,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$vout, '2>', \$verr);
	my $t0 = Time::HiRes::time();
	$node->poll_query_until('postgres', 'SELECT bytes_copied > 200 * capacity FROM pmwal_status')
	  or die "small_ring: the ring does not wrap: $verr";
	$vol->kill_kill;
	$load->{h}->kill_kill;
	acked_load_finish($load);
	my $st = pmwal_status($node);
	diag(sprintf('small_ring: %d bytes copied, %.0f times the capacity, in %.1f s (%d copies, %d syncs, fallbacks: full %d, large %d, segment %d, overrun %d)',
			$st->{bytes_copied}, $st->{bytes_copied} / $cap, Time::HiRes::time() - $t0,
			$st->{ring_copies}, $st->{syncs}, $st->{fallback_full}, $st->{fallback_large},
			$st->{fallback_segment}, $st->{fallback_overrun}));
	cmp_ok($st->{bytes_copied}, '>', 200 * $cap, 'small_ring: the ring wrapped more than 200 times');

	# No checkpoint may come during the fill (it would sync the WAL): one
	# now resets the distance.  Then jump close to the next segment
	# boundary with one non-transactional message; the small commit after
	# it is too large for the ring and syncs pg_wal.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $m_acked = 0;
	my $insert = sub { lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()')) };
	my $ins = $insert->();
	my $boundary = $ins - $ins % $SEG + $SEG;
	$boundary += $SEG if $boundary - $ins < $MB;
	$node->safe_psql('postgres',
		"SELECT pg_logical_emit_message(false, 'jump', repeat('j', " . ($boundary - $ins - 200 * 1024) . '))');
	$node->safe_psql('postgres', 'INSERT INTO m VALUES (' . ++$m_acked . ')') for 1 .. 3;
	# the flusher prepares the next segment and syncs; then hold it at the
	# top of its loop (holding no lock) and stop the WAL writer (it would
	# sync the WAL the ring holds)
	Time::HiRes::sleep(0.6);
	my $offset = -s $node->logfile;
	set_flusher_pause($node, 'flusher_loop');
	pause_wait($node, 'flusher_loop', $offset);
	stop_server_process($node, 'walwriter');

	# fill: commits of a logical message and a row of m, each sized to fit
	# what write_window_open() allows (insert + margin - page(tail) <=
	# capacity), until less than one page is left
	$st = pmwal_status($node);
	my $tail = lsn_num($st->{tail_lsn});
	my $tail_page = $tail - $tail % 8192;
	my $first_fill = $m_acked + 1;
	my $crossing;
	for (1 .. 20)
	{
		my $from = $insert->();
		my $room = $tail_page + $cap - $margin - $from;
		my $size = $room - 600 - 24 * (int($room / 8168) + 2);
		$size = 400 * 1024 if $size > 400 * 1024;
		last if $size < 100;
		$node->safe_psql('postgres',
			'INSERT INTO m SELECT ' . ++$m_acked
			  . " FROM pg_logical_emit_message(true, 'fill', repeat('f', $size))");
		my $to = $insert->();
		$crossing = "$from-$to" if $from < $boundary && $to > $boundary;
	}
	my $fill = pmwal_status($node);
	my $head = lsn_num($fill->{head_lsn});
	my $left = $tail_page + $cap - $margin - $head;
	diag(sprintf('small_ring: ring [%s, %s), %d of %d bytes from the tail page; %d bytes left for a commit (margin %d); segment boundary %X/%X',
			$fill->{tail_lsn}, $fill->{head_lsn}, $head - $tail_page, $cap, $left, $margin,
			int($boundary / 2**32), $boundary % 2**32));
	ok(defined $crossing, 'small_ring: a fill commit wrote a record across the segment boundary');
	ok($tail < $boundary && $head > $boundary, 'small_ring: the ring holds WAL across the segment boundary');
	ok($left >= 0 && $left < 8192, "small_ring: the ring is as full as a commit can make it (within one page: $left bytes)");
	is($fill->{ring_commits} - $st->{ring_commits}, $m_acked - $first_fill + 1,
		'small_ring: every fill commit went through the ring');
	is(join(',', map { $fill->{$_} - $st->{$_} } qw(fallback_full fallback_large fallback_segment fallback_overrun)),
		'0,0,0,0', 'small_ring: no fill commit fell back');

	my $cut = powercut($node);
	note("small_ring: $cut->{summary}");
	my $without = without_ring_query($node, "SELECT count(*) FROM m WHERE id >= $first_fill") // 0;
	my $fills = $m_acked - $first_fill + 1;
	cmp_ok($without, '<', $fills,
		"small_ring: negative control: without the ring only $without of $fills acknowledged fill commits are there");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	$offset = -s $node->logfile;
	$node->start;
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
}

# --- 4. a committer SIGKILLed holding ring_lock mid-copy (issue 14) --------
{
	my $node = quiet_node('killed_copier', conf => "restart_after_crash = on\n");
	my $load = start_load($node, 'killed_copier');
	my ($bg, $victim, $try) = hold_session($node, 'copy_before_head',
		sub { 'INSERT INTO t VALUES (' . (100_000_000_000 + $_[0]) . ')' });
	note("killed_copier: committer $victim held inside its copy with ring_lock (try $try)");
	Time::HiRes::sleep(0.2);
	my $offset = -s $node->logfile;
	powercut_kill_one($victim);
	bg_psql_finish($bg);
	acked_load_finish($load);
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/\(PID $victim\) was terminated by signal 9: Killed.*all server processes terminated; reinitializing/s,
		'killed_copier: the postmaster reinitialised after the copier was killed');
	like($log, qr/all server processes terminated; reinitializing.*pmwal restored WAL .*redo starts at/s,
		'killed_copier: the ring was restored at the crash-restart, before redo');
	wait_accelerated($node, 't') or die 'killed_copier: commits are not accelerated after the crash-restart';
	my $load2 = start_load($node, 'killed_copier_after', base => 500_000_000);
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load2);
	note("killed_copier: cut after the crash-restart: $cut->{summary}");
	cmp_ok($cut->{undone}, '>', 0, 'killed_copier: the power cut undid WAL writes not yet fsynced');
	my ($lost, $acked) = lost_without_ring($node, $load2);
	cmp_ok($lost, '>', 0,
		"killed_copier: negative control: without the ring $lost of $acked commits acknowledged after the crash-restart are missing");
	$node->start;
	check_acked($node, $load, 'killed_copier');
	check_acked($node, $load2, 'killed_copier_after');
	$node->stop;
}

# --- 5. the flusher's error exit (issue 14) --------------------------------
# An ERROR in the flusher (here one raised at the top of its loop) ends it
# with exit code 1; the postmaster starts it again a second later.  Meanwhile
# commits must go on the ordinary way, and nothing acknowledged may be lost.
{
	my $node = quiet_node('flusher_error');
	my $load = start_load($node, 'flusher_error');
	my $old = pmwal_status($node);
	my $offset = -s $node->logfile;
	set_flusher_pause($node, 'flusher_loop:error');
	$node->wait_for_log(qr/pmwal test error at "flusher_loop"/, $offset);
	# disarm at once, before the postmaster starts the flusher again
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause; SELECT pg_reload_conf()');
	my $at_error = $node->safe_psql('postgres', 'SELECT count(*) FROM t');

	my (@down, $new);
	my $deadline = Time::HiRes::time() + 60;
	while (1)
	{
		my %s;
		@s{qw(accelerated reason pid inactive rows)} = split /\|/, $node->safe_psql('postgres',
			q{SELECT accelerated, coalesce(reason, ''), coalesce(flusher_pid, 0), fallback_inactive,
			  (SELECT count(*) FROM t) FROM pmwal_status});
		push @down, \%s if $s{pid} == 0;
		if ($s{accelerated} eq 't' && $s{pid} != $old->{flusher_pid})
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
	like($log, qr/exited with exit code 1.*pmwal ring "[^"]+" anchored at/s,
		"flusher_error: the postmaster started the flusher again (pid $new->{pid}) and it anchored the ring");
	ok(@down > 0 && grep({ $_->{accelerated} eq 'f' && $_->{reason} eq 'the pmwal flusher is not running' } @down),
		'flusher_error: while it was down, commits were not accelerated (the pmwal flusher is not running); '
		  . scalar(@down) . ' samples');
	cmp_ok(@down ? $down[-1]{rows} : 0, '>', $at_error,
		'flusher_error: commits went on while the flusher was down ('
		  . ($at_error // '?') . ' rows at the error, ' . (@down ? $down[-1]{rows} : '?') . ' at the last look)');
	note("flusher_error: fallback_inactive $old->{fallback_inactive} before, $new->{inactive} after");

	wait_load($node, $load, 300);
	Time::HiRes::sleep(0.2 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("flusher_error: $cut->{summary}");
	my ($lost, $acked) = lost_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"flusher_error: negative control: without the ring $lost of $acked acknowledged commits are missing");
	$node->start;
	check_acked($node, $load, 'flusher_error');
	$node->stop;
}

diag(sprintf('%d acknowledged commits checked, %d missing; %.0f s',
		$checked, $lost_total, Time::HiRes::time() - $started));

done_testing();

# PmwalTest::Hold
#		Holding server processes at a chosen moment, on top of PmwalTest's
#		pause points and gdb: a session's statements held at a pause point, a
#		committer held at the build's dangerous point (or, on stock
#		PostgreSQL, by gdb in its WAL fdatasync) and the power cut that
#		follows, the flusher held and let go one pass at a time, a standby's
#		processes stopped, and the invariants every hold checks --
#		PostgreSQL's flush pointer never ahead of what the ring claims or
#		pmwal synced.
package PmwalTest::Hold;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

use PmwalTest;
use PmwalTest::OldBuild qw(hold_point);

our @EXPORT = qw(hold_at hold_commit quiesce hold_commit_or_stock cut_held gdb_hold_commit
  gdb_hold_walreceiver
  until_paused forget_pauses backend_pid_running
  flusher_hold flusher_pass flusher_release_to flusher_round
  flush_covered ring_holds_flush_page
  proc_of hold_proc release_proc);

# ---------------------------------------------------------------------------
# Statements held at a pause point armed in their own session
# ---------------------------------------------------------------------------

# Run $sql in a background psql whose session arms $point (a pause point,
# maybe with its ":N" suffix), and wait until it is held there.  $sql: one
# statement, a list of them (each its own transaction), or a function of
# the try number returning that: under load another session's flush may
# carry a commit's WAL, so that it never reaches its own sync; then (only
# with a function) it is tried again, up to $opts{tries} times (20).
# Options: tries, timeout (for each try, 60 s), quiesce (take the WAL
# writer and the flusher off the CPU first, quiesce below).  Returns the
# background psql (bg_psql), the pid, the try, and the tries that
# completed (acknowledged) before.
sub hold_at
{
	my ($node, $point, $sql, %opts) = @_;
	my $name = (split /:/, $point)[0];
	my $gen = ref $sql eq 'CODE' ? $sql : undef;
	quiesce($node) if $opts{quiesce};
	my @done;
	for my $try (1 .. ($gen ? $opts{tries} // 20 : 1))
	{
		my @stmts = $gen ? $gen->($try) : ref $sql ? @$sql : ($sql);
		@stmts = @{ $stmts[0] } if @stmts == 1 && ref $stmts[0];
		pause_rearm($node, $name);
		my $offset = -s $node->logfile;
		my $bg = bg_psql($node, "SET pmwal.test_pause = '$point'", @stmts);
		my $pid = pause_or_exit($node, $name, $offset, $bg, $opts{timeout});
		return ($bg, $pid, $try, \@done) if $pid;
		my ($rc, undef, $err) = bg_psql_finish($bg);
		die "hold_at: \"@stmts\" failed: $err" if $rc != 0;
		push @done, $try;
		note("hold_at: try $try went through without being held at $point"
			  . ' (another commit\'s flush covered it)' . ($gen ? '; again' : ''));
	}
	die "hold_at: no try reached $point";
}

# A committer held at this build's dangerous point (hold_point: inside the
# interposed WAL sync, its WAL copied into the ring and written, the head
# not yet published and PostgreSQL's flush pointer not yet moved), or at
# $opts{point}, with the WAL writer and the flusher off the CPU (they would
# otherwise make the held WAL durable first).  $sql as for hold_at; a
# function is tried up to 10 times.  Returns what hold_at returns.  The
# held backend holds WALWriteLock: every other commit waits until it is
# released.
sub hold_commit
{
	my ($node, $sql, %opts) = @_;
	return hold_at($node, $opts{point} // hold_point(), $sql,
		quiesce => 1, tries => 10, timeout => $opts{timeout} // 120);
}

# Take the WAL writer and (on a node with pmwal) the flusher off the CPU,
# once per server life (stop_server_process): nothing but the held commit
# and the commits a test makes then writes or syncs WAL.
sub quiesce
{
	my ($node) = @_;
	return if $node->{quiesced} && $node->{_pid} && $node->{quiesced} == $node->{_pid};
	stop_server_process($node, 'walwriter');
	stop_server_process($node, 'flusher') if $node->{pmwal_ring};
	$node->{quiesced} = $node->{_pid};
	return;
}

# The committer of $sql held at the moment its WAL is written and not yet
# synced: on a node with pmwal with hold_commit; with $stock (a control on
# stock PostgreSQL) with gdb_hold_commit, in a session of its own.
# Returns what cut_held takes: the held background psql (undef on stock)
# and the session (undef with pmwal).
sub hold_commit_or_stock
{
	my ($node, $sql, $stock) = @_;
	if ($stock)
	{
		my $s = psql_session($node);
		gdb_hold_commit($node, $s, "$sql;\n");
		return (undef, $s);
	}
	my ($held) = hold_commit($node, $sql);
	return ($held, undef);
}

# The power cut of a case whose committer is held ($held, from hold_commit)
# or whose stock control ran in session $s: the held commit must not have
# been acknowledged.  Returns powercut()'s summary.
sub cut_held
{
	my ($node, $tag, $held, $s) = @_;
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	if ($held)
	{
		my ($rc) = bg_psql_finish($held);
		isnt($rc, 0, "$tag: the held commit was never acknowledged");
	}
	else
	{
		eval { $s->{h}->finish };
	}
	return $cut;
}

# Hold the session $s's next commit with gdb inside the C library's
# fdatasync() of its WAL (PostgreSQL's issue_xlog_fsync: its WAL written,
# PostgreSQL's flush pointer not yet moved), the WAL writer off the CPU:
# the stock control's equivalent of sync_before_publish.  (Debian's
# binaries inline issue_xlog_fsync into XLogWrite: a breakpoint on it is
# never hit there; wal_sync_method is fdatasync, and a backend makes no
# other fdatasync call.)  Sends $sql and waits for the hit.  Returns the
# gdb handle (leave_stopped: the process stays SIGSTOPped at the
# breakpoint, untraced, for powercut_kill) and the pid.
sub gdb_hold_commit
{
	my ($node, $s, $sql) = @_;
	quiesce($node);
	my $pid = session_pid($s);
	my $gdb = gdb_break($pid, 'fdatasync', leave_stopped => 1);
	${ $s->{in} } .= $sql;
	gdb_wait_hit($gdb, 120, $s->{h}) or die 'the committer does not reach fdatasync';
	# leave_stopped: gdb stops the process and detaches
	my $deadline = time + 60;
	until (_stopped($pid))
	{
		die "the committer $pid is not stopped at fdatasync" if time > $deadline;
		$s->{h}->pump_nb;
		Time::HiRes::usleep(10_000);
	}
	return ($gdb, $pid);
}

# A standby's walreceiver held by gdb inside its fdatasync (a stock
# standby's equivalent of sync_before_publish: its WAL written, its flush
# not yet reported), left SIGSTOPped there for powercut_kill.  Returns
# its pid.
sub gdb_hold_walreceiver
{
	my ($node, $tag, $function) = @_;
	$function //= 'fdatasync';
	my $pid = proc_of($node, 'walreceiver');
	my $gdb = gdb_break($pid, $function, leave_stopped => 1);
	ok(gdb_wait_hit($gdb, 60), "$tag: the walreceiver is held in $function");
	$gdb->{h}->finish;
	return $pid;
}

sub _stopped
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh>;
	close $fh;
	return $stat =~ /\)\s+T\s/;
}

# ---------------------------------------------------------------------------
# Pause points armed for the whole server (arm_all)
# ---------------------------------------------------------------------------

# Run $sql in a background psql until some process pauses at $point, armed
# for every process (a process that has not yet read the armed setting
# lets the statement end; then it is run again): returns the pid that
# paused and the background psql of the run it paused in.
sub until_paused
{
	my ($node, $point, $sql, %opts) = @_;
	for my $try (1 .. ($opts{tries} // 30))
	{
		my $offset = -s $node->logfile;
		my $bg = bg_psql($node, ref $sql ? @$sql : $sql);
		my $pid = pause_or_exit($node, $point, $offset, $bg, $opts{timeout} // 60);
		return ($pid, $bg) if $pid;
		my ($rc, $out, $err) = bg_psql_finish($bg);
		die "until_paused: \"$sql\" failed: $err" if $rc != 0;
		Time::HiRes::sleep(0.1);
	}
	die "until_paused: no process paused at \"$point\"";
}

# After a power cut: the next start must not hold anything (a setting
# written by ALTER SYSTEM before the cut would arm the new processes).
sub forget_pauses
{
	my ($node) = @_;
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	unlink glob($node->data_dir . '/pmwal_test_release.*');
	return;
}

# The pid of the backend running exactly the query $query (waits for it).
sub backend_pid_running
{
	my ($node, $query) = @_;
	for (1 .. 600)
	{
		my $pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE query = '$query' AND pid <> pg_backend_pid()");
		return $pid if $pid =~ /^\d+$/;
		Time::HiRes::sleep(0.05);
	}
	die "no backend runs \"$query\"";
}

# ---------------------------------------------------------------------------
# The flusher held, and let go one pass at a time.  (stop_server_process
# holds it for good.)
# ---------------------------------------------------------------------------

# Hold the flusher, so that flusher_pass can let it make one pass at a time;
# returns its pid.  Two ways, by $opts{at}:
#	flusher_loop   (the default) at the top of its loop, armed with
#	               arm_all, pmwal.flush_interval set to 10ms: a pass is
#	               one round, which syncs when anything was written since
#	               the last one; flusher_release_to lets it go on to
#	               another point armed in it.
#	flusher_sleep  at the end of its loop, armed also at
#	               flusher_after_free: a pass waits until the flusher has
#	               synced pg_wal for real and freed the ring.  The setting
#	               stays in postgresql.auto.conf (only the flusher reaches
#	               those points); the test makes pmwal.flush_interval
#	               short, so that a pass is due whenever WAL was written
#	               since the last one.
sub flusher_hold
{
	my ($node, %opts) = @_;
	my $at = $opts{at} // 'flusher_loop';
	my $offset = -s $node->logfile;
	my $pid;
	if ($at eq 'flusher_loop')
	{
		$node->safe_psql('postgres', "ALTER SYSTEM SET pmwal.flush_interval = '10ms'");
		arm_all($node, 'flusher_loop');
		$pid = pause_wait($node, 'flusher_loop', $offset);
	}
	elsif ($at eq 'flusher_sleep')
	{
		pause_rearm($node, $_) for qw(flusher_sleep flusher_after_free);
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET pmwal.test_pause = 'flusher_sleep,flusher_after_free'; SELECT pg_reload_conf()");
		$pid = pause_wait($node, 'flusher_sleep', $offset, 120);
	}
	else
	{
		die "flusher_hold: no way to hold the flusher at $at";
	}
	$node->{held_flusher} = { pid => $pid, at => $at };
	return $pid;
}

# One pass of the flusher held by flusher_hold, which is held again where it
# was.
sub flusher_pass
{
	my ($node) = @_;
	my $held = $node->{held_flusher} or die 'flusher_pass: flusher_hold first';
	my $pid = $held->{pid};
	my $offset = -s $node->logfile;
	if ($held->{at} eq 'flusher_sleep')
	{
		pause_rearm($node, 'flusher_after_free');
		pause_release($node, 'flusher_sleep');
		pause_wait($node, 'flusher_after_free', $offset, 120);
		pause_rearm($node, 'flusher_sleep');
		$offset = -s $node->logfile;
		pause_release($node, 'flusher_after_free');
		pause_wait($node, 'flusher_sleep', $offset, 120);
		pause_rearm($node, 'flusher_after_free');
		return;
	}
	pause_release($node, 'flusher_loop');
	$node->wait_for_log(qr/pmwal test pause at "flusher_loop" released \(pid $pid\)/, $offset);
	pause_rearm($node, 'flusher_loop');
	# the round ends at the top of the loop again
	my $log;
	for (1 .. 6000)
	{
		$log = slurp_file($node->logfile, $offset);
		last if $log =~ /released \(pid $pid\).*pmwal test pause at "flusher_loop" \(pid $pid\)/s;
		Time::HiRes::sleep(0.01);
	}
	die 'flusher_pass: the flusher did not come round' unless
	  $log =~ /released \(pid $pid\).*pmwal test pause at "flusher_loop" \(pid $pid\)/s;
	return;
}

# Let the flusher held at flusher_loop (flusher_hold) go on, and wait until
# it stops at $point (one of the points armed in it).
sub flusher_release_to
{
	my ($node, $point) = @_;
	my $held = $node->{held_flusher};
	die 'flusher_release_to: flusher_hold at flusher_loop first'
	  unless $held && $held->{at} eq 'flusher_loop';
	my $pid = $held->{pid};
	my $offset = -s $node->logfile;
	pause_rearm($node, $point);
	pause_release($node, 'flusher_loop');
	$node->wait_for_log(qr/pmwal test pause at "flusher_loop" released \(pid $pid\)/, $offset);
	pause_rearm($node, 'flusher_loop');
	my $at = pause_wait($node, $point, $offset);
	die "flusher_release_to: pid $at, not the flusher ($pid), paused at $point" if $at != $pid;
	return;
}

# The flusher held at flusher_sleep by stop_server_process (pid $pid): let
# it run one round -- it reloads the configuration at its top -- and hold
# it there again.  pmwal.test_pause must still name flusher_sleep after
# the reload.
sub flusher_round
{
	my ($node, $pid) = @_;
	my $offset = -s $node->logfile;
	pause_release($node, 'flusher_sleep');
	$node->wait_for_log(qr/pmwal test pause at "flusher_sleep" released \(pid $pid\)/, $offset);
	pause_rearm($node, 'flusher_sleep');
	my $at = pause_wait($node, 'flusher_sleep', $offset);
	die "flusher_round: pid $at, not the flusher ($pid)" if $at != $pid;
	return;
}

# ---------------------------------------------------------------------------
# What every hold checks
# ---------------------------------------------------------------------------

# Is PostgreSQL's flush pointer covered: at most the ring's head or
# pmwal's durable point (its own real syncs)?  Only meaningful while the
# ring is anchored (state "in use"); a retired ring leaves the syncs to
# PostgreSQL.  Returns (ok, text).
sub flush_covered
{
	my ($node) = @_;
	my ($flush, $tail, $head, $durable, $state, $ok) = split /\|/, $node->safe_psql('postgres', q{
SELECT f, tail_lsn, head_lsn, durable_lsn, state, f <= GREATEST(head_lsn, durable_lsn)
  FROM pmwal_status, pg_current_wal_flush_lsn() f});
	my $text = "flush $flush, ring [$tail, $head) $state, pmwal durable $durable";
	return (1, "$text: not anchored") if $state ne 'in use';
	return ($ok eq 't', $text);
}

# Does the ring hold the page in which PostgreSQL's flush pointer lies,
# when nothing is being written?  That page is the one the next WAL write
# rewrites from its start (XLogWrite writes whole pages), adding records
# after the flush pointer: pmwal's real syncs made the page's present
# version durable, only the ring can keep the next one.  A ring whose tail
# lies beyond it cannot (the writer's sync publishes only the end of its
# write).  Returns (ok, text).
sub ring_holds_flush_page
{
	my ($node) = @_;
	my ($flush, $tail, $head, $ok) = split /\|/, $node->safe_psql('postgres', q{
SELECT f, tail_lsn, head_lsn,
       (tail_lsn - '0/0'::pg_lsn) <= floor((f - '0/0'::pg_lsn) / 8192) * 8192
  FROM pmwal_status, pg_current_wal_flush_lsn() f});
	return ($ok eq 't', "flush $flush, ring [$tail, $head)");
}

# ---------------------------------------------------------------------------
# A standby's processes: its walreceiver (nothing more is written, flushed
# or confirmed) or its startup process (received and flushed, not applied)
# stopped with SIGSTOP.
# ---------------------------------------------------------------------------
sub proc_of
{
	my ($node, $backend_type) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = '$backend_type'")
	  or die $node->name . " has no $backend_type";
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$backend_type'");
}

sub hold_proc
{
	my ($node, $backend_type) = @_;
	my $pid = proc_of($node, $backend_type);
	kill('STOP', $pid) or die "cannot stop $backend_type $pid: $!";
	return $pid;
}

sub release_proc
{
	my ($pid) = @_;
	kill('CONT', $pid);
	return;
}

1;

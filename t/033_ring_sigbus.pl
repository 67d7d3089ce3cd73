# SIGBUS from the ring's memory (issue 28, item 4).  The ring is a shared
# file mapping: a page of it that cannot be read -- the file truncated
# under a running server, or on real persistent memory a poisoned line --
# is a SIGBUS at the first access.  A backend that copies WAL into it dies
# of it (a crash-restart, as for any backend crash); the crash-restart's
# restore reads the ring in the postmaster, and must end in a FATAL naming
# the ring and what it could not read, never in a silent SIGBUS of the
# postmaster; and a later start must not go on without the ring's WAL.
#
# The postmaster runs as a child of this test (not daemonised by pg_ctl),
# so that its exit status can be seen.
#
#	data_cut: the ring holds acknowledged WAL (flusher held); the file is
#	   truncated inside that WAL, under the running server; the next commit
#	   dies of SIGBUS; the crash-restart's restore: FATAL naming the ring and
#	   exactly the WAL range that is gone, the postmaster exits with 1, not
#	   by a signal; a new start is refused, naming the WAL the ring held,
#	   and writes nothing.
#	header_cut: the file truncated to 0 bytes under the running server: the
#	   crash-restart ends in a FATAL that the ring's header cannot be read;
#	   a new start is refused.
#	spare_cut: the file truncated after the ring's WAL, which stays
#	   readable: the crash-restart restores it, gives the empty ring its size
#	   back (WARNING) and the server runs on, every acknowledged commit there.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Binding;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $HEADER = 4096;

# postmasters this test started; one left running is killed at the end
my @children;
END
{
	local $?;
	for my $pid (@children)
	{
		next unless waitpid($pid, POSIX::WNOHANG()) == 0;
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
}
my $PAGE = 8192;

# Start the postmaster of $node as a child of this test, its output
# appended to the node's log; wait until it accepts connections.  Returns
# its pid.
sub start_child
{
	my ($node) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open STDOUT, '>>', $node->logfile or die "log: $!";
		open STDERR, '>&', \*STDOUT or die "stderr: $!";
		exec('postgres', '-D', $node->data_dir) or POSIX::_exit(127);
	}
	push @children, $pid;
	# pg_isready, not a query: psql that finds no server yet may exit
	# before the query is written to it (a broken pipe in IPC::Run)
	my $deadline = Time::HiRes::time() + 180;
	until (system('pg_isready', '-q', '-h', $node->host, '-p', $node->port) == 0)
	{
		die $node->name . ': the server does not accept connections'
		  if Time::HiRes::time() > $deadline || waitpid($pid, POSIX::WNOHANG()) == $pid;
		Time::HiRes::sleep(0.1);
	}
	return $pid;
}

# Wait (up to $timeout s) for the child postmaster $pid to exit; returns its
# wait status, undef if it is still running.
sub wait_exit
{
	my ($pid, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 120);
	while (1)
	{
		return $? if waitpid($pid, POSIX::WNOHANG()) == $pid;
		return undef if Time::HiRes::time() >= $deadline;
		Time::HiRes::sleep(0.1);
	}
}

sub describe_status
{
	my ($st) = @_;
	return 'still running' unless defined $st;
	return POSIX::WIFSIGNALED($st)
	  ? 'killed by signal ' . POSIX::WTERMSIG($st)
	  : 'exit code ' . POSIX::WEXITSTATUS($st);
}

# A node on a 64 MB ring, started as a child, with table t, committing
# through the ring, and its flusher held (what is committed from now on is
# durable only in the ring).  restart_after_crash on: a backend's SIGBUS
# leads to a crash-restart.
sub sigbus_node
{
	my ($name) = @_;
	my $node = pmwal_node($name, size => '64MB',
		conf => "restart_after_crash = on\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\n"
		  . "wal_writer_delay = 10s\nwal_writer_flush_after = 1GB\n");
	my $pid = start_child($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int, v text)');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	stop_server_process($node, 'flusher');
	# acknowledged commits, some 40 WAL pages: only the ring holds them durably
	$node->safe_psql('postgres', "INSERT INTO t SELECT g, repeat('a', 100) FROM generate_series(1, 1000) g");
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_, 'one')") for 1001 .. 1010;
	return ($node, $pid);
}

# The ring's tail and head, and where in the file they are.
sub ring_range
{
	my ($ring) = @_;
	my $cap = ring_field($ring, 'capacity');
	my ($tail, $head) = map { ring_read_u64($ring, $_) } qw(tail head);
	return ($tail, $head, $cap);
}

# A commit that must make its backend copy WAL past the cut: it dies.
sub commit_into_cut
{
	my ($node) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"INSERT INTO t SELECT g, repeat('b', 1000) FROM generate_series(1, 2000) g");
	note("the commit into the cut: rc $rc, $err");
	return;
}

# --- data_cut ---------------------------------------------------------------
{
	my ($node, $pid) = sigbus_node('data_cut');
	my $R = $node->{pmwal_ring};
	ok(ring_holds($R), 'data_cut: the ring holds WAL');
	my ($tail, $head, $cap) = ring_range($R);
	my ($ot, $oh) = ($tail % $cap, $head % $cap);
	note('data_cut: ring holds ' . lsn_format($tail) . ' to ' . lsn_format($head));
	BAIL_OUT('data_cut: the ring\'s WAL wraps or is too short for this test')
	  if $ot >= $oh || $head - $tail < 4 * $PAGE;
	# keep the ring's first page of WAL; cut the rest
	my $cut = $HEADER + $ot + $PAGE;
	my $offset = -s $node->logfile;
	truncate($R, $cut) or die "truncate $R: $!";
	commit_into_cut($node);
	my $st = wait_exit($pid);
	my $log = slurp_file($node->logfile, $offset);
	note("data_cut: the postmaster: " . describe_status($st));
	like($log, qr/terminated by signal 7|PANIC/, 'data_cut: a process died reading or writing the ring');
	like($log, qr/all server processes terminated; reinitializing/, 'data_cut: a crash-restart followed');
	ok(defined $st && !POSIX::WIFSIGNALED($st), 'data_cut: the postmaster was not killed by a signal')
	  or diag('the postmaster: ' . describe_status($st) . "\nlog:\n$log");
	ok(defined $st && POSIX::WIFEXITED($st) && POSIX::WEXITSTATUS($st) == 1, 'data_cut: the postmaster exits with 1');
	($tail, $head) = ring_range($R);
	my $first = $tail + $PAGE;
	my ($from, $to) = (lsn_format($first), lsn_format($head));
	like($log, qr/FATAL:  could not read pmwal ring "\Q$R\E": its WAL from \Q$from\E to \Q$to\E cannot be read\n/,
		"data_cut: FATAL names the ring and the WAL it cannot read ($from to $to)");
	like($log, qr/DETAIL:  The ring holds this cluster's WAL from \Q${\ lsn_format($tail)}\E to \Q$to\E; \d+ of its \d+ pages.*: it was truncated while the server ran\.  Nothing was restored/,
		'data_cut: DETAIL says what the ring holds, that the file was truncated, and that nothing was restored');
	like($log, qr/HINT:  .*pmwal_ctl dump.*pmwal_ctl unbind --force/, 'data_cut: HINT says what to do');
	my ($msg) = $log =~ /(FATAL:  could not read pmwal ring.*\n(?:.*(?:DETAIL|HINT):  .*\n)*)/;
	case_line('data_cut: the postmaster: ' . describe_status($st) . "; log:\n" . ($msg // ($log =~ /((?:.*\n){1,8})\z/)[0]));

	# a start now must not go on without the ring's WAL
	refused_without_writing($node, 'data_cut a new start', files => [$R],
		fatal => qr/pmwal ring "\Q$R\E" has an impossible size\n/,
		detail => qr/The header says the ring holds WAL from \Q${\ lsn_format($tail)}\E to \Q$to\E/);
}

# --- header_cut -------------------------------------------------------------
{
	my ($node, $pid) = sigbus_node('header_cut');
	my $R = $node->{pmwal_ring};
	my $offset = -s $node->logfile;
	truncate($R, 0) or die "truncate $R: $!";
	commit_into_cut($node);
	my $st = wait_exit($pid);
	my $log = slurp_file($node->logfile, $offset);
	note("header_cut: the postmaster: " . describe_status($st));
	ok(defined $st && !POSIX::WIFSIGNALED($st), 'header_cut: the postmaster was not killed by a signal')
	  or diag('the postmaster: ' . describe_status($st) . "\nlog:\n$log");
	like($log, qr/FATAL:  could not read the header of pmwal ring "\Q$R\E"\n.*DETAIL:  Reading the ring's header \(file bytes 0 to 4095\) failed at byte \d+ \(SIGBUS\)\.  The file is now 0 bytes/,
		'header_cut: FATAL names the ring and the bytes it cannot read');
	my ($msg) = $log =~ /(FATAL:  could not read the header.*\n(?:.*(?:DETAIL|HINT):  .*\n)*)/;
	case_line('header_cut: the postmaster: ' . describe_status($st) . "; log:\n" . ($msg // ($log =~ /((?:.*\n){1,8})\z/)[0]));
	refused_without_writing($node, 'header_cut a new start', files => [$R],
		fatal => qr/file "\Q$R\E" is not a pmwal ring\n/);
}

# --- spare_cut --------------------------------------------------------------
{
	my ($node, $pid) = sigbus_node('spare_cut');
	my $R = $node->{pmwal_ring};
	my ($tail, $head, $cap) = ring_range($R);
	my ($ot, $oh) = ($tail % $cap, $head % $cap);
	BAIL_OUT('spare_cut: the ring\'s WAL wraps or ends too near the end of the ring')
	  if $ot >= $oh || $oh + 4 * $PAGE > $cap;
	# keep everything up to the ring's head and one page more
	my $cut = $HEADER + $oh + $PAGE;
	my $size = -s $R;
	my $offset = -s $node->logfile;
	truncate($R, $cut) or die "truncate $R: $!";
	commit_into_cut($node);
	# the server comes back (or the postmaster is gone)
	my ($st, $back);
	my $deadline = Time::HiRes::time() + 120;
	while (Time::HiRes::time() < $deadline)
	{
		$st = wait_exit($pid, 0);
		last if defined $st;
		if (system('pg_isready', '-q', '-h', $node->host, '-p', $node->port) == 0)
		{
			my ($rc, $out) = $node->psql('postgres', 'SELECT NOT pg_is_in_recovery()');
			if ($rc == 0 && $out eq 't')
			{
				$back = 1;
				last;
			}
		}
		Time::HiRes::sleep(0.2);
	}
	my $log = slurp_file($node->logfile, $offset);
	ok($back, 'spare_cut: the server runs again after the crash-restart')
	  or diag('the postmaster: ' . describe_status($st) . "\nlog:\n$log");
	like($log, qr/pmwal restored WAL \Q${\ lsn_format($tail)}\E to /, 'spare_cut: the ring\'s WAL was restored');
	like($log, qr/WARNING:  pmwal ring "\Q$R\E" was truncated while the server ran\n/,
		'spare_cut: WARNING that the file was truncated');
	is(-s $R, $size, 'spare_cut: the ring file has its size back');
	SKIP:
	{
		skip 'the server did not come back', 3 unless $back;
		is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), 1010, 'spare_cut: every acknowledged commit is there');
		$node->safe_psql('postgres', "INSERT INTO t VALUES (2000, 'after')");
		is(pmwal_status($node)->{accelerated}, 'true', 'spare_cut: commits go through the ring again');
		pause_release($node, 'flusher_sleep');
		kill 'INT', $pid;
		$st = wait_exit($pid);
		ok(defined $st && POSIX::WIFEXITED($st) && POSIX::WEXITSTATUS($st) == 0, 'spare_cut: a clean shutdown');
	}
	case_line('spare_cut: ' . ($back ? 'the server came back' : 'the postmaster: ' . describe_status($st)));
	if (!defined wait_exit($pid, 0) && kill(0, $pid))
	{
		kill 'KILL', $pid;
		wait_exit($pid);
	}
}

done_testing();

# hE.pm
#		Helpers shared by the tests converted to the sync layer (t/006, t/008,
#		t/009, t/015, t/022, t/023), on top of PmwalTest.pm:
#
#	quiet_node         a node whose WAL only pmwal syncs, table t, accelerated
#	until_paused (arm_all, disarm_all: PmwalTest)
#	                   pause points in every process (ALTER SYSTEM + reload),
#	                   and a statement run again until some process pauses
#	hold_flusher, flusher_pass, flusher_release_to, flusher_round
#	                   the flusher held at the top of its loop and let go one
#	                   round (one pass) at a time, or to another point
#	hold_commit        a committer held at a pause point (like hold_in_sync,
#	                   for a node whose WAL writer and flusher are stopped)
#	advance_to         the insert position moved into a chosen range
#	acked_insert, short_load, ids_present
#	                   acknowledged commits, and which of them are there
#	wal_rw, ring_rw, ring_page_header, segment_of, ring_words, status_line
#	                   the bytes of pg_wal and of the ring by LSN
#	start_refused, $restored_re
#	                   a start that must be refused; the restore's LOG line
#	gdb_stop_nth, backend_pid_running
#	                   a backend stopped at the n-th call of a function
package hE;

use strict;
use warnings;

use Exporter 'import';
use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

our @EXPORT = qw(quiet_node until_paused ring_words lsn_text
  acked_insert flush_lsn);

# LSN number as text X/Y.
sub lsn_text { return lsn_format($_[0]); }

# A node under the power-cut log whose WAL only pmwal syncs (QUIET_WAL, the
# flusher every 60 s, no autovacuum), with table t (bigint primary key),
# committing through the ring.  Options: size (64MB), conf, init, plain
# (no power-cut log), ring_cut.
sub quiet_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		init => $opts{init} // {},
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n" . ($opts{conf} // ''));
	$node->{ring_cut} = $opts{ring_cut} if $opts{ring_cut};
	if ($opts{plain}) { $node->start; }
	else              { powercut_start($node); }
	# VACUUM sets the hint bits of every catalog row there is, before the
	# checkpoint: a later reader would set them itself and write a full page
	# image of the catalog page (FPI_FOR_HINT, ~8 kB of WAL) in the middle of
	# a test's WAL layout (on 19, pg_type's last page, read by the next
	# connection's first query)
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); VACUUM; CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	return $node;
}

# Run $sql in a background psql until some process pauses at $point
# (a process that has not yet read the armed setting lets the statement
# end; then it is run again): returns the pid that paused and the
# background psql of the run it paused in.
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

# The ring's dynamic words, as one string.
sub ring_words
{
	my ($node) = @_;
	my $ring = $node->{pmwal_ring};
	return join(' ', map { sprintf('%s=%s', $_, lsn_text(ring_read_u64($ring, $_))) }
		  qw(tail head)) . sprintf(' state=%X generation=%d',
		ring_read_u64($ring, 'state'), ring_read_u64($ring, 'generation'));
}

# Insert $id into t in its own transaction; returns the WAL flush position
# after its COMMIT returned (its commit record is before it).
sub acked_insert
{
	my ($node, $id, $table) = @_;
	$node->safe_psql('postgres', 'INSERT INTO ' . ($table // 't') . " VALUES ($id)");
	return flush_lsn($node);
}

sub flush_lsn
{
	my ($node) = @_;
	return lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
}


push @EXPORT, qw(advance_to flusher_pass hold_flusher);

my $SEG = 16 * 1024 * 1024;

# Insert WAL (non-transactional logical messages, never flushed by
# themselves) until the insert position lies in [$from, $to).
sub advance_to
{
	my ($node, $from, $to) = @_;
	for (1 .. 1000)
	{
		my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
		return $x if $x >= $from && $x < $to;
		die sprintf('advance_to: insert position %s is past %s', lsn_text($x), lsn_text($to))
		  if $x >= $to;
		my $n = $from - $x > 2_000_000 ? 1_000_000 : int(($from - $x) / 2);
		$n = 1 if $n < 1;
		$node->safe_psql('postgres',
			"SELECT pg_logical_emit_message(false, 'pad', repeat('x', $n))");
	}
	die 'advance_to: no progress';
}

# The flusher held at the top of its loop (pause point flusher_loop), with
# a short pmwal.flush_interval: each flusher_pass() lets it run one round
# -- a pass when anything was written since the last one -- and holds it
# at the top of the loop again.
sub hold_flusher
{
	my ($node) = @_;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "ALTER SYSTEM SET pmwal.flush_interval = '10ms'");
	arm_all($node, 'flusher_loop');
	my $pid = pause_wait($node, 'flusher_loop', $offset);
	$node->{he_flusher} = $pid;
	return $pid;
}

sub flusher_pass
{
	my ($node) = @_;
	my $pid = $node->{he_flusher} or die 'flusher_pass: hold_flusher first';
	my $offset = -s $node->logfile;
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

# Let the flusher held at flusher_loop (hold_flusher) go on, and wait until
# it stops at $point (one of the points armed in it).
sub flusher_release_to
{
	my ($node, $point) = @_;
	my $pid = $node->{he_flusher} or die 'flusher_release_to: hold_flusher first';
	my $offset = -s $node->logfile;
	pause_rearm($node, $point);
	pause_release($node, 'flusher_loop');
	$node->wait_for_log(qr/pmwal test pause at "flusher_loop" released \(pid $pid\)/, $offset);
	pause_rearm($node, 'flusher_loop');
	my $at = pause_wait($node, $point, $offset);
	die "flusher_release_to: pid $at, not the flusher ($pid), paused at $point" if $at != $pid;
	return;
}

# The flusher held at flusher_sleep (stop_server_process): let it run one
# round -- it reloads the configuration at its top -- and hold it there
# again.  pmwal.test_pause must still name flusher_sleep after the reload.
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
push @EXPORT, qw(flusher_release_to flusher_round status_line);

# pmwal_status's positions, as one line.
sub status_line
{
	my ($node) = @_;
	my $st = pmwal_status($node);
	return join(' ', map { "$_=$st->{$_}" } qw(tail_lsn head_lsn durable_lsn state));
}

# ---------------------------------------------------------------------------
# Bytes of pg_wal and of the ring by LSN (timeline 1, 16 MB segments).
# ---------------------------------------------------------------------------
push @EXPORT, qw(segment_of wal_rw ring_rw ring_page_header start_refused
  $restored_re ids_present);

our $restored_re =
  qr/pmwal restored WAL ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) from the ring into pg_wal: (\d+) bytes, (\d+) records, (\d+) segments/;

sub segment_of
{
	my ($node, $x) = @_;
	my $seg = int($x / $SEG);
	return sprintf('%s/pg_wal/%08X%08X%08X', $node->data_dir, 1, int($seg / 256), $seg % 256);
}

# Read or (with $bytes) write pg_wal's bytes from LSN $from on.
sub wal_rw
{
	my ($node, $from, $len, $bytes) = @_;
	my $out = '';
	while ($len > 0)
	{
		my $n = $SEG - $from % $SEG;
		$n = $len if $n > $len;
		my $path = segment_of($node, $from);
		open my $fh, '+<:raw', $path or die "open $path: $!";
		sysseek($fh, $from % $SEG, 0) or die "seek $path: $!";
		if (defined $bytes)
		{
			syswrite($fh, substr($bytes, length($out), $n)) == $n or die "write $path: $!";
			$out .= substr($bytes, length($out), $n);
		}
		else
		{
			my $buf = '';
			sysread($fh, $buf, $n) == $n or die "short read of $path";
			$out .= $buf;
		}
		close $fh;
		$from += $n;
		$len -= $n;
	}
	return $out;
}

# Read or (with $bytes) write the ring's bytes of LSNs from $from on.
sub ring_rw
{
	my ($node, $from, $len, $bytes) = @_;
	my $cap = ring_field($node->{pmwal_ring}, 'capacity');
	my $out = '';
	open my $fh, '+<:raw', $node->{pmwal_ring} or die "open ring: $!";
	while ($len > 0)
	{
		my $n = $cap - $from % $cap;
		$n = $len if $n > $len;
		sysseek($fh, 4096 + $from % $cap, 0) or die "seek ring: $!";
		if (defined $bytes)
		{
			syswrite($fh, substr($bytes, length($out), $n)) == $n or die "write ring: $!";
			$out .= substr($bytes, length($out), $n);
		}
		else
		{
			my $buf = '';
			sysread($fh, $buf, $n) == $n or die 'short read of the ring';
			$out .= $buf;
		}
		$from += $n;
		$len -= $n;
	}
	close $fh;
	return $out;
}

# The page header of the WAL page at $page in the ring: a hash of magic,
# info, tli, pageaddr, rem_len; contrecord: XLP_FIRST_IS_CONTRECORD set;
# size: the header's size (long at a segment's start).
sub ring_page_header
{
	my ($node, $page) = @_;
	my %h;
	@h{qw(magic info tli pageaddr rem_len)} = unpack('v v V Q< V', ring_rw($node, $page, 20));
	$h{contrecord} = ($h{info} & 1) ? 1 : 0;
	$h{size} = ($h{info} & 2) ? 40 : 24;
	return \%h;
}

# A start that is expected to be refused; returns the log it wrote.  If the
# server came up after all, it is stopped again.
sub start_refused
{
	my ($node, $tag, $what) = @_;
	my $offset = -s $node->logfile;
	my $up = $node->start(fail_ok => 1);
	ok(!$up, "$tag: the server refuses to start ($what)");
	$node->stop('immediate') if $up;
	my $log = slurp_file($node->logfile, $offset);
	my @why = $log =~ /((?:PANIC|FATAL|DETAIL):  .*)/g;
	note("$tag: the start ended with: " . join(' | ', @why)) if @why;
	return $log;
}

# Which of the ids in @ids table t holds, as a comma-separated list.
sub ids_present
{
	my ($node, @ids) = @_;
	return $node->safe_psql('postgres',
		'SELECT coalesce(string_agg(id::text, \',\' ORDER BY id), \'\') FROM t WHERE id IN ('
		  . join(',', @ids) . ')');
}

# Committing load (acked_load_start) for a few seconds, to its end: every
# commit pgbench saw acknowledged is in its log (a pgbench killed before
# its end may not have written all of it).
push @EXPORT, qw(short_load);
sub short_load
{
	my ($node, $tag, %opts) = @_;
	my $load = acked_load_start($node, tag => $tag, duration => 3, %opts);
	acked_load_finish($load);
	die "$tag: the load did not run: ${ $load->{err} }" unless $load->{total} > 0;
	return $load;
}

# Stop process $pid (SIGSTOP, gdb detached) at the $n-th call of the
# exported function $function; returns once gdb is attached.  gdb_hit_nth
# waits until it is stopped there.  (PmwalTest's gdb_break stops at the
# first call.)
my $gdb_n = 0;
push @EXPORT, qw(gdb_stop_nth gdb_hit_nth backend_pid_running);
sub gdb_stop_nth
{
	my ($pid, $function, $n) = @_;
	my $base = PostgreSQL::Test::Utils::tempdir('gdbn') . '/gdb' . $gdb_n++;
	PostgreSQL::Test::Utils::append_to_file("$base.cmd", qq{set pagination off
set confirm off
handle SIGINT SIGUSR1 SIGUSR2 SIGHUP SIGTERM SIGQUIT SIGALRM SIGPIPE SIGCHLD nostop noprint pass
break $function
ignore 1 } . ($n - 1) . qq{
commands 1
silent
shell kill -STOP $pid
shell touch $base.hit
delete
detach
quit
end
shell touch $base.ready
continue
});
	my $out = '';
	my $h = IPC::Run::start([ 'gdb', '-q', '-nx', '-batch', '-x', "$base.cmd", '-p', $pid ],
		'<', \undef, '>&', \$out);
	my $g = { h => $h, out => \$out, base => $base, pid => $pid };
	my $deadline = Time::HiRes::time() + 120;
	until (-e "$base.ready")
	{
		die "gdb did not attach to $pid: $out" if Time::HiRes::time() > $deadline || !$h->pumpable;
		$h->pump_nb;
		Time::HiRes::usleep(20_000);
	}
	return $g;
}

sub gdb_hit_nth
{
	my ($g, $timeout, @pump) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 60);
	until (-e "$g->{base}.hit")
	{
		return 0 if Time::HiRes::time() > $deadline;
		$_->pump_nb for grep { $_->pumpable } ($g->{h}, @pump);
		Time::HiRes::usleep(20_000);
	}
	$g->{h}->finish;
	return 1;
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

# Like PmwalTest's hold_in_sync, for a node whose WAL writer and flusher
# the test has stopped already: a committer inserting $id into t, held at
# $point (default sync_before_publish).  Returns its background psql.
push @EXPORT, qw(hold_commit);
sub hold_commit
{
	my ($node, $id, $point) = @_;
	$point //= 'sync_before_publish';
	my $offset = -s $node->logfile;
	pause_rearm($node, $point);
	my $held = bg_psql($node, "SET pmwal.test_pause = '$point'", "INSERT INTO t VALUES ($id)");
	pause_or_exit($node, $point, $offset, $held)
	  or die "the commit of $id did not stop at $point: ${ $held->{err} }";
	return $held;
}

1;

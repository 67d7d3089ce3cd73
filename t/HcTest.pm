# HcTest.pm
#		Helpers of the WAL-consumer tests (t/025*_*.pl): the node under test in
#		one of three builds, a committer held at the build's dangerous point,
#		interactive sessions, and a stock control node.
#
# Modes, chosen by the environment:
#	(default)			the build under test (the installed pmwal.so, or
#						PMWAL_TEST_LIBDIR), held at its sync layer's
#						dangerous point: sync_before_publish, inside the
#						interposed WAL sync, the WAL copied into the ring and
#						written, the head not yet published and PostgreSQL's
#						flush pointer not yet moved.
#	PMWAL_OLD_BUILD=dir	the negative control: the build before the sync layer
#						(4b36e65, /work/old), extension SQL version 1.0, held
#						at its commit_after_write (written without fsync,
#						flush pointer moved, not yet in the ring).  The tests
#						run the same assertions; they are expected to fail
#						there (that is what the mode is for).
# A stock control (a node without pmwal, a committer held by gdb at
# issue_xlog_fsync) is part of the tests that ask for one.
package HcTest;

use strict;
use warnings;

use Exporter 'import';
use FindBin ();
use lib $FindBin::RealBin;
use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use Time::HiRes ();

our @EXPORT = qw(OLD_BUILD hc_mode hc_node hc_standby hc_extension hold_commit
  cut_held release_commit session stock_node gdb_hold_commit
  hold_point server_major wal_flush_lsn wait_log flusher_hold flusher_pass
  pad_into_last_page quiesce);

# The negative-control build, or undef.
sub OLD_BUILD { return $ENV{PMWAL_OLD_BUILD} }

# The negative control is expected to fail: waits that cannot end there
# should not take PostgreSQL's default 180 s each.
$PostgreSQL::Test::Utils::timeout_default = 30 if OLD_BUILD();

sub hc_mode { return OLD_BUILD() ? 'old build' : 'sync layer' }

# The dangerous point a committer is held at in this mode.
sub hold_point { return OLD_BUILD() ? 'commit_after_write' : 'sync_before_publish' }

sub server_major
{
	my ($v) = `pg_config --version` =~ /PostgreSQL (\d+)/;
	return $v;
}

# pmwal_node in this mode's build.
sub hc_node
{
	my ($name, %opts) = @_;
	local $ENV{PMWAL_TEST_LIBDIR} = OLD_BUILD() if OLD_BUILD();
	return pmwal_node($name, %opts);
}

sub hc_standby
{
	my ($primary, $name, $backup, %opts) = @_;
	local $ENV{PMWAL_TEST_LIBDIR} = OLD_BUILD() if OLD_BUILD();
	return pmwal_standby($primary, $name, $backup, %opts);
}

# CREATE EXTENSION pmwal in the version this mode's build knows.
sub hc_extension
{
	my ($node) = @_;
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal' . (OLD_BUILD() ? " VERSION '1.0'" : ''));
	return;
}

# Hold a committer at this mode's dangerous point ($opts{point} to choose
# another pause point): the flusher and the WAL writer are taken off the
# CPU first (they would otherwise make the held WAL durable, or close the
# old build's window), then $sql -- one statement, a list of them (one
# transaction each), or a function of the try number returning that --
# runs in a background psql whose session arms the point.  Returns the
# background psql (bg_psql), the held pid, and the tries that went through
# without being held.  Only with a function is a commit that was not held
# tried again (up to 10 tries): under concurrent commits another one's
# flush may cover it first (it then makes no WAL write of its own), and the
# old build may take the ordinary path for it.
sub hold_commit
{
	my ($node, $sql, %opts) = @_;
	quiesce($node);
	my $point = $opts{point} // hold_point();
	pause_rearm($node, $point);
	my @acked;
	for my $try (1 .. 10)
	{
		my @sql = ref $sql eq 'CODE' ? $sql->($try) : ref $sql ? @$sql : ($sql);
		my $offset = -s $node->logfile;
		my $held = bg_psql($node, "SET pmwal.test_pause = '$point'", @sql);
		my $pid = pause_or_exit($node, $point, $offset, $held, $opts{timeout} // 120);
		return ($held, $pid, \@acked) if $pid;
		my ($rc, $out, $err) = bg_psql_finish($held);
		die "the commit to hold failed: $err" if $rc != 0;
		die "the commit was not held at $point" unless ref $sql eq 'CODE';
		push @acked, $try;
		note("try $try went through without being held (another commit's flush covered it); again");
	}
	BAIL_OUT("no commit could be held at $point");
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

# Let a held committer go on.
sub release_commit
{
	my ($node, $held, $point) = @_;
	pause_release($node, $point // hold_point());
	return bg_psql_finish($held);
}

# Take the WAL writer and (on a node with pmwal) the flusher off the CPU,
# once per server life (stop_server_process): nothing but the held commit
# and the commits a test makes then writes or syncs WAL.
sub quiesce
{
	my ($node) = @_;
	return if $node->{hc_quiet} && $node->{_pid} && $node->{hc_quiet} == $node->{_pid};
	stop_server_process($node, 'walwriter');
	stop_server_process($node, 'flusher') if $node->{pmwal_ring};
	$node->{hc_quiet} = $node->{_pid};
	return;
}

# An interactive psql session (PmwalTest's psql_session).
sub session
{
	my ($node, $db) = @_;
	return psql_session($node, db => $db);
}

# A node without pmwal (stock PostgreSQL), fsync on, the WAL writer and
# checkpoints quiet, for the power-cut harness.
sub stock_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	$node->append_conf('postgresql.conf', QUIET_WAL . "fsync = on\n" . ($opts{conf} // ''));
	return $node;
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

sub _stopped
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh>;
	close $fh;
	return $stat =~ /\)\s+T\s/;
}

sub wal_flush_lsn
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
}

# Wait until the node's log after $offset matches $re; returns the match or
# undef after $timeout seconds.
sub wait_log
{
	my ($node, $re, $offset, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 60);
	while (Time::HiRes::time() < $deadline)
	{
		my $log = slurp_file($node->logfile, $offset // 0);
		return $1 // $& if $log =~ $re;
		Time::HiRes::usleep(100_000);
	}
	return undef;
}

# Hold the flusher for good at the end of its loop (flusher_sleep), armed
# also at flusher_after_free, so that flusher_pass can let it make exactly
# one pass.  The setting stays in postgresql.auto.conf (only the flusher
# reaches those points); with pmwal.flush_interval short, a pass is due
# whenever WAL was written since the last one.
sub flusher_hold
{
	my ($node) = @_;
	my $offset = -s $node->logfile;
	pause_rearm($node, $_) for qw(flusher_sleep flusher_after_free);
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = 'flusher_sleep,flusher_after_free'; SELECT pg_reload_conf()");
	return pause_wait($node, 'flusher_sleep', $offset, 120);
}

# One pass of a flusher held by flusher_hold: it syncs pg_wal for real and
# frees the ring, and is held again at flusher_sleep.
sub flusher_pass
{
	my ($node) = @_;
	my $offset = -s $node->logfile;
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

# Commit logical messages until the insert position lies in the last WAL
# page of a segment, between $lo and $hi bytes into that page (nothing else
# may write WAL meanwhile: wal_level minimal, autovacuum off).  Returns the
# insert position.
sub pad_into_last_page
{
	my ($node, $segsize, $lo, $hi) = @_;
	$lo //= 300;
	$hi //= 2500;
	for (1 .. 60)
	{
		my $l = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
		my $page = (int($l / $segsize) + 1) * $segsize - 8192;
		return $l if $l >= $page + $lo && $l <= $page + $hi;
		$page += $segsize if $l > $page + $hi;
		my $need = $page + int(($lo + $hi) / 2) - $l;
		my $size = $need - 200 - int($need / 8192) * 40;
		$size = 4_000_000 if $size > 4_000_000;
		$size = 1 if $size < 1;
		$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, 'pad', repeat('x', $size))");
	}
	die 'could not pad the WAL into the last page of a segment';
}

1;

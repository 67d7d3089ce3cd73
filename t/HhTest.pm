# HhTest.pm
#		Helpers of the synchronous replication tests (t/027*, issue 23): a
#		pmwal primary with real synchronous standbys, interactive sessions,
#		holding a standby, and reading what is on disk (WAL bytes, data
#		page LSNs, the relation map).
package HhTest;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run ();
use Time::HiRes ();
use Test::More;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PmwalTest;
use PostgreSQL::Test::RecursiveCopy;

our @EXPORT = qw(session
  wait_syncrep_wait proc_of hold_proc release_proc wait_sync_standbys
  acked_missing_sql acked_missing lsn_text disk_page_lsn_max
  relmap_filenode history_files stock_primary noring_query control_checkpoint
  windows_setup w_start_load w_wait_rows w_cut copy_broken w_restart_and_check);

my $SEG = 16 * 1024 * 1024;

# ---------------------------------------------------------------------------
# Interactive sessions (PmwalTest's psql_session), with command tags and
# ON_ERROR_STOP off, knowing their backend's pid.
# ---------------------------------------------------------------------------
sub session
{
	my ($node) = @_;
	my $s = psql_session($node, on_error_stop => 0, tags => 1);
	($s->{pid}) = send_and_wait($s, "SELECT pg_backend_pid();\n", qr/^(\d+)$/m) =~ /^(\d+)$/m;
	${ $s->{out} } = '';
	return $s;
}

# Wait until backend $pid of $node waits for synchronous replication (wait
# event SyncRep); dies after $timeout seconds.
sub wait_syncrep_wait
{
	my ($node, $pid, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 120);
	while (1)
	{
		return 1 if $node->safe_psql('postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid") eq 'SyncRep';
		die "backend $pid does not wait for synchronous replication"
		  if Time::HiRes::time() > $deadline;
		Time::HiRes::usleep(20_000);
	}
}

# ---------------------------------------------------------------------------
# Holding a standby: its walreceiver (nothing more is written, flushed or
# confirmed) or its startup process (received and flushed, not applied).
# ---------------------------------------------------------------------------
sub proc_of
{
	my ($node, $backend_type) = @_;
	my $pid;
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

# Wait until $n standbys stream to $primary as synchronous standbys.
sub wait_sync_standbys
{
	my ($primary, $n) = @_;
	return $primary->poll_query_until('postgres',
		"SELECT count(*) >= $n FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')");
}

# ---------------------------------------------------------------------------
# Acknowledged commits of an acked_load_start load, as one SQL query (for
# without_ring_query, which runs one) that returns how many are missing.
# acked_load_finish must have run.
# ---------------------------------------------------------------------------
sub acked_missing_sql
{
	my ($load) = @_;
	my @parts;
	for my $c (sort { $a <=> $b } keys %{ $load->{acked} })
	{
		my $n = $load->{acked}{$c};
		my $lo = $load->{base} + $c * 1_000_000_000;
		my $hi = $lo + $n;
		push @parts, "SELECT $n - count(*) AS m FROM $load->{table} WHERE id > $lo AND id <= $hi";
	}
	return 'SELECT coalesce(sum(m), 0) FROM (' . join(' UNION ALL ', @parts) . ') s';
}

sub acked_missing
{
	my ($node, $load) = @_;
	return $node->safe_psql('postgres', acked_missing_sql($load));
}

# ---------------------------------------------------------------------------
# On disk
# ---------------------------------------------------------------------------
sub lsn_text
{
	my ($n) = @_;
	return lsn_format($n);
}

# The highest page LSN (pd_lsn) among the pages of a relation's main fork
# as the data files hold them -- what a power cut leaves of them in this
# harness (tools/powercut cuts pg_wal only) -- and how many pages.
# $relpath: pg_relation_filepath().
sub disk_page_lsn_max
{
	my ($node, $relpath) = @_;
	my ($max, $pages) = (0, 0);
	for my $file (sort glob($node->data_dir . "/$relpath" . '{,.[0-9]*}'))
	{
		open my $fh, '<:raw', $file or next;
		my $page;
		while (sysread($fh, $page, 8192) == 8192)
		{
			my ($hi, $lo) = unpack('L<L<', $page);
			my $lsn = $hi * 2**32 + $lo;
			$max = $lsn if $lsn > $max;
			$pages++;
		}
		close $fh;
	}
	return ($max, $pages);
}

# The relfilenode that the relation map file $mapfile (global/ or
# base/DBOID/pg_filenode.map, as on disk) names for catalog $oid, or undef.
# Format (relmapper.c, the same in 15-18): int32 magic, int32
# num_mappings, then 64 pairs (Oid mapoid, RelFileNumber mapfilenumber).
sub relmap_filenode
{
	my ($mapfile, $oid) = @_;
	open my $fh, '<:raw', $mapfile or die "could not read $mapfile: $!";
	my $buf;
	sysread($fh, $buf, 8 + 64 * 8);
	close $fh;
	my ($magic, $n, @pairs) = unpack('L<l<' . ('L<' x 128), $buf);
	for my $i (0 .. $n - 1)
	{
		return $pairs[ 2 * $i + 1 ] if $pairs[ 2 * $i ] == $oid;
	}
	return undef;
}

# The latest checkpoint's location that pg_control names, read from the
# file (pg_controldata): a checkpointer held inside its pg_control update
# holds ControlFileLock, which pg_control_checkpoint() waits for.
sub control_checkpoint
{
	my ($node) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pg_controldata', '-D', $node->data_dir ], '>', \$out, '2>', \$err)
	  or die "pg_controldata failed: $err";
	my ($lsn) = $out =~ /^Latest checkpoint location:\s+(\S+)$/m
	  or die "pg_controldata printed no checkpoint location: $out";
	return $lsn;
}

# Timeline history files in a node's pg_wal.
sub history_files
{
	my ($node) = @_;
	return map { s{.*/}{}r } glob($node->data_dir . '/pg_wal/*.history');
}

# A primary without pmwal (the control), fsync on, ready for streaming.
sub stock_primary
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\nfsync = on\n" . ($opts{conf} // ''));
	return $node;
}

# Negative control, like PmwalTest's without_ring_query: a copy of the
# stopped node's data directory started without its ring runs $sql.
# Returns (result, stderr); the result is undef if the copy cannot start
# or the query fails (a data page ahead of the copy's WAL makes any
# process that writes it out fail: "xlog flush request ... is not
# satisfied").  The copy gets shared buffers enough not to evict.
my $noring_count = 0;
sub noring_query
{
	my ($node, $sql) = @_;
	my $copy = PostgreSQL::Test::Cluster->new($node->name . '_noring' . $noring_count++);
	PostgreSQL::Test::RecursiveCopy::copypath($node->data_dir, $copy->data_dir);
	chmod 0700, $copy->data_dir;
	unlink $copy->data_dir . '/postmaster.pid';
	unlink $copy->data_dir . '/pg_wal/pmwal.binding';
	$copy->append_conf('postgresql.conf',
		"port = " . $copy->port . "\npmwal.path = ''\nrestart_after_crash = off\n"
		  . "archive_mode = off\nshared_buffers = 128MB\nmax_connections = 30\n");
	my ($result, $err) = (undef, 'the copy does not start');
	if ($copy->start(fail_ok => 1))
	{
		my ($rc, $out);
		($rc, $out, $err) = $copy->psql('postgres', $sql);
		$result = $out if $rc == 0;
		$copy->stop('immediate');
	}
	$copy->clean_node;
	return ($result, $err);
}

# ---------------------------------------------------------------------------
# The window tests (t/027b, t/027c): a pmwal primary with a stock
# synchronous standby, synchronous_commit = on, 2 MB of shared buffers and
# an eager bgwriter (data pages go to disk outside checkpoints), and the
# ring's power cut on.  Returns a context hash for the w_* helpers.
# ---------------------------------------------------------------------------
sub windows_setup
{
	my $primary = pmwal_node('primary', size => '64MB', init => { allows_streaming => 1 },
		conf => QUIET_WAL . qq{
pmwal.flush_interval = 60s
wal_keep_size = 1GB
synchronous_commit = on
max_connections = 30
shared_buffers = 2MB
bgwriter_delay = 10ms
bgwriter_lru_maxpages = 1000
bgwriter_lru_multiplier = 10
});
	$primary->{ring_cut} = 'durable';
	powercut_start($primary);
	$primary->safe_psql('postgres', q{
CREATE EXTENSION pmwal; CREATE EXTENSION amcheck;
CREATE TABLE t (id bigint PRIMARY KEY);
CREATE TABLE w (id int, pad text);
CHECKPOINT});
	wait_accelerated($primary, 't') or die 'commits are not accelerated';
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new('standby');
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->append_conf('postgresql.conf',
		"shared_preload_libraries = ''\nwal_retrieve_retry_interval = 200ms\n");
	$standby->start;
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'standby'; SELECT pg_reload_conf()");
	wait_sync_standbys($primary, 1) or die 'the standby does not stream';
	return { primary => $primary, standby => $standby, base => 0 };
}

# A load of acknowledged commits into t (acked_load_start), with the WAL
# writer and the flusher stopped: from here on only the ring holds the WAL
# they write, until something syncs it for real (a pg_control write).
sub w_start_load
{
	my ($w, $tag) = @_;
	stop_server_process($w->{primary}, $_) for qw(walwriter flusher);
	$w->{base} += 100_000_000_000;
	my $load = acked_load_start($w->{primary}, tag => $tag =~ s/\W+/_/gr, base => $w->{base});
	w_wait_rows($w, $load, 200);
	return $load;
}

# Wait until the load has committed $n more rows.
sub w_wait_rows
{
	my ($w, $load, $n) = @_;
	my $range = "id > $load->{base} AND id < $load->{base} + 100000000000";
	my $have = $w->{primary}->safe_psql('postgres', "SELECT count(*) FROM t WHERE $range");
	$w->{primary}->poll_query_until('postgres', "SELECT count(*) >= $have + $n FROM t WHERE $range")
	  or die "the load does not run: ${ $load->{err} }";
	return;
}

# Power cut of the primary.  Returns how many commits the load saw
# acknowledged, the negative control's answer (noring_query) to the count
# of missing acknowledged commits followed by '|' and $extra_sql's answer,
# and its error output.
sub w_cut
{
	my ($w, $tag, $load, $extra_sql) = @_;
	my $c = powercut($w->{primary});
	note("$tag: $c->{summary}");
	my $acked = acked_load_finish($load);
	my $sql = acked_missing_sql($load);
	$sql = "SELECT ($sql)::text || '|' || ($extra_sql)::text" if $extra_sql;
	my ($without, $err) = noring_query($w->{primary}, $sql);
	note("$tag: without the ring: " . ($without // "no answer: $err"));
	return ($acked, $without, $err);
}

# The negative control's query failed because the copy is inconsistent:
# a data page on disk is ahead of its WAL (writing it out needs a flush
# beyond the WAL's end) or refers to pages the lost WAL would have written.
sub copy_broken
{
	my ($err) = @_;
	return defined $err
	  && $err =~ /xlog flush request [0-9A-F\/]+ is not satisfied|unexpected zero page|could not read block|invalid page in block|could not access status of transaction/;
}

# Restart after the cut: the ring is restored, every acknowledged commit is
# on the primary and, once it streams again, on the standby; no new
# timeline.  Returns false (after a failed test) if the primary does not
# start.
sub w_restart_and_check
{
	my ($w, $tag, $load, $acked) = @_;
	my ($primary, $standby) = @$w{qw(primary standby)};
	my $offset = -s $primary->logfile;
	unless (powercut_start($primary, fail_ok => 1))
	{
		my ($why) = slurp_file($primary->logfile, $offset) =~ /((?:FATAL|PANIC): .*)/;
		fail("$tag: the primary restarts after the power cut (" . ($why // 'no FATAL logged') . ')');
		return 0;
	}
	like(slurp_file($primary->logfile, $offset), qr/pmwal restored WAL/,
		"$tag: the primary restored its ring");
	is(acked_missing($primary, $load), 0,
		"$tag: all $acked acknowledged commits are on the primary after the power cut");
	ok(wait_sync_standbys($primary, 1), "$tag: the standby streams again");
	my $s = session($primary);
	send_and_wait($s, "INSERT INTO t VALUES (-$load->{base});\n", qr/INSERT 0 1/);
	session_close($s);
	$primary->wait_for_catchup($standby, 'replay');
	is(acked_missing($standby, $load), 0, "$tag: and on the standby");
	is(join(',', history_files($primary)), '', "$tag: no new timeline");
	return 1;
}

1;

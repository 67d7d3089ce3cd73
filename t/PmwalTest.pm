# PmwalTest.pm
#		What every pmwal TAP test needs: a node that preloads pmwal on an
#		emulated ring of its own in /dev/shm (and a stock one for controls),
#		the simulated power cut, committing load counted client-side, pause
#		points, gdb, interactive sessions, the negative control without the
#		ring, and the bytes of the ring, of pg_wal and of data files.
#
# The helpers of some tests build on it, each in a module named by its role:
#	PmwalTest::Hold      processes held at a moment: a committer in its
#	                     WAL sync, the flusher one pass at a time, a standby
#	PmwalTest::OldBuild  the old build (pmwal 1.1) as a negative control
#	PmwalTest::Binding   the ring binding: binding file, refused starts
#	PmwalTest::SyncRep   a primary with synchronous standbys
#
# The ring layout used here is documented in src/ring_format.h and docs/ring-format.md.
package PmwalTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PostgreSQL::Test::RecursiveCopy;
use File::Copy ();
use FindBin ();
use IPC::Run ();
use Time::HiRes ();

our @EXPORT = qw(pmwal_node pmwal_standby ring_bytes crc32c ring_read_u64 ring_write_u64
  ring_set_static ring_field ring_state RING_STATE_EMPTY RING_STATE_IN_USE
  RING_STATE_REINIT pmwal_status wait_accelerated);

# Every server these tests start treats /dev/shm as persistent memory.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

# PostgreSQL's TAP modules come from the newest source package Debian
# serves (tools/pg-versions); for an older server, undo what they write
# that it does not know.
my ($server_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
if (defined $server_major && $server_major < 18)
{
	no warnings 'redefine';
	my $init = \&PostgreSQL::Test::Cluster::init;
	*PostgreSQL::Test::Cluster::init = sub {
		my ($node) = @_;
		$init->(@_);
		my $conf = $node->data_dir . '/postgresql.conf';
		my $text = PostgreSQL::Test::Utils::slurp_file($conf);
		if ($text =~ s/^autovacuum_worker_slots\b.*\n//mg)
		{
			open my $fh, '>', $conf or die "could not write $conf: $!";
			print $fh $text;
			close $fh;
		}
		return;
	};
}

# Offsets in the ring header (ring_format.h).
my %static = (
	magic => [ 0, 'a8' ],
	format_version => [ 8, 'L<' ],
	header_size => [ 12, 'L<' ],
	system_identifier => [ 16, 'Q<' ],
	wal_segment_size => [ 24, 'L<' ],
	wal_block_size => [ 28, 'L<' ],
	capacity => [ 32, 'Q<' ],
	ring_id => [ 40, 'a16' ],
	crc => [ 56, 'L<' ],);
my %word = (tail => 64, head => 128, state => 192, timeline => 256, generation => 320);

no warnings 'portable';
use constant RING_STATE_EMPTY => 0x454d505459000001;
use constant RING_STATE_IN_USE => 0x494e555345000002;
use constant RING_STATE_REINIT => 0x5245494e49000003;
use warnings 'portable';

my @rings;

# A node with pmwal preloaded and fsync on.  Options: ring => path (default:
# a fresh one in /dev/shm), size => pmwal.size, conf => extra settings,
# init => hash of PostgreSQL::Test::Cluster::init parameters.
sub pmwal_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	_pmwal_conf($node, %opts);
	return $node;
}

# A standby of $primary made from its backup $backup, with pmwal on a ring
# of its own (the backup's postgresql.conf names the primary's); options as
# for pmwal_node, init => init_from_backup parameters (default: streaming).
sub pmwal_standby
{
	my ($primary, $name, $backup, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, $backup, %{ $opts{init} // { has_streaming => 1 } });
	_pmwal_conf($node, %opts);
	return $node;
}

sub _pmwal_conf
{
	my ($node, %opts) = @_;
	my $ring = $opts{ring} // '/dev/shm/pmwal_tap_' . $node->name . "_$$.ring";
	unless ($opts{ring})
	{
		unlink $ring;
		push @rings, $ring;
	}
	# PMWAL_TEST_LIBDIR: run against another build of pmwal.so (say, the
	# code before a fix, to see a test fail there)
	$node->append_conf('postgresql.conf',
		"dynamic_library_path = '$ENV{PMWAL_TEST_LIBDIR}:\$libdir'\n")
	  if $ENV{PMWAL_TEST_LIBDIR};
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pmwal'
pmwal.path = '$ring'
pmwal.size = } . ($opts{size} // '8MB') . qq{
fsync = on
} . ($opts{conf} // ''));
	$node->{pmwal_ring} = $ring;
	return;
}

# PostgreSQL's own WAL fsyncs since the last reset_wal_stats(): 18 moved
# them from pg_stat_wal.wal_sync to pg_stat_io (object 'wal').
push @EXPORT, qw(wal_fsyncs reset_wal_stats);
sub wal_fsyncs
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		server_version_num($node) >= 180000
		? q{SELECT coalesce(sum(fsyncs), 0)::bigint FROM pg_stat_io WHERE object = 'wal' AND context = 'normal'}
		: 'SELECT wal_sync FROM pg_stat_wal');
}

sub reset_wal_stats
{
	my ($node) = @_;
	$node->safe_psql('postgres', sprintf("SELECT pg_stat_reset_shared('%s')",
			server_version_num($node) >= 180000 ? 'io' : 'wal'));
	return;
}

# Path of the state file of prepared transaction $gid, or undef if there is
# none: pg_twophase/XXXXXXXX by xid, from 17 on with the epoch in front.
push @EXPORT, qw(twophase_state_file);
sub twophase_state_file
{
	my ($node, $gid) = @_;
	my $xid = $node->safe_psql('postgres',
		"SELECT transaction FROM pg_prepared_xacts WHERE gid = '$gid'");
	return undef if $xid eq '';
	my $name = sprintf('%08X', $xid);
	my ($file) = grep { m{/([0-9A-F]{8})?\Q$name\E$} }
	  glob($node->data_dir . '/pg_twophase/*');
	return $file;
}

# The major version of the server under test (pg_config's).
push @EXPORT, qw(server_major);
sub server_major { return $server_major; }

sub server_version_num
{
	my ($node) = @_;
	$node->{pmwal_version_num} //= $node->safe_psql('postgres', 'SHOW server_version_num');
	return $node->{pmwal_version_num};
}

# One row of pmwal_status as a hash (CREATE EXTENSION pmwal must be done).
sub pmwal_status
{
	my ($node) = @_;
	my $rows = $node->safe_psql('postgres',
		q{SELECT key, coalesce(value, '') FROM pmwal_status s, json_each_text(row_to_json(s))});
	my %h = map { split(/\|/, $_, 2) } split(/\n/, $rows);
	return \%h;
}

# Wait until pmwal_status.accelerated is $want ('t' or 'f').
sub wait_accelerated
{
	my ($node, $want) = @_;
	return $node->poll_query_until('postgres',
		'SELECT accelerated FROM pmwal_status', $want);
}

# The whole ring file, as bytes.
sub ring_bytes
{
	my ($path) = @_;
	open my $fh, '<:raw', $path or die "could not open $path: $!";
	local $/;
	my $bytes = <$fh>;
	close $fh;
	return $bytes;
}

# CRC-32C (Castagnoli), as PostgreSQL's pg_crc32c computes it.
my @crc_table;
sub crc32c
{
	my ($data) = @_;
	unless (@crc_table)
	{
		for my $i (0 .. 255)
		{
			my $c = $i;
			$c = ($c & 1) ? (($c >> 1) ^ 0x82F63B78) : ($c >> 1) for 1 .. 8;
			push @crc_table, $c;
		}
	}
	my $crc = 0xFFFFFFFF;
	$crc = $crc_table[ ($crc ^ $_) & 0xFF ] ^ ($crc >> 8)
	  for unpack('C*', $data);
	return $crc ^ 0xFFFFFFFF;
}

sub _rw
{
	my ($path, $offset, $len, $bytes) = @_;
	open my $fh, '+<:raw', $path or die "could not open $path: $!";
	sysseek($fh, $offset, 0) or die "seek: $!";
	my $buf;
	if (defined $bytes)
	{
		syswrite($fh, $bytes) == length($bytes) or die "write: $!";
	}
	else
	{
		sysread($fh, $buf, $len) == $len or die "read: $!";
	}
	close $fh;
	return $buf;
}

# Read or write one dynamic header word (tail, head, state, timeline,
# generation).
sub ring_read_u64
{
	my ($path, $name) = @_;
	die "ring_read_u64: no header word '$name'" unless exists $word{$name};
	return unpack('Q<', _rw($path, $word{$name}, 8));
}

sub ring_write_u64
{
	my ($path, $name, $value) = @_;
	die "ring_write_u64: no header word '$name'" unless exists $word{$name};
	_rw($path, $word{$name}, 8, pack('Q<', $value));
	return;
}

sub ring_state { return ring_read_u64($_[0], 'state'); }

# Read a static header field.
sub ring_field
{
	my ($path, $name) = @_;
	my ($off, $fmt) = @{ $static{$name} };
	return unpack($fmt, _rw($path, $off, $fmt eq 'Q<' ? 8 : $fmt eq 'a8' ? 8 : $fmt eq 'a16' ? 16 : 4));
}

# Change static header fields and, unless keep_crc => 1, recompute the CRC
# so that the header is valid again.
sub ring_set_static
{
	my ($path, %fields) = @_;
	my $keep_crc = delete $fields{keep_crc};
	for my $name (keys %fields)
	{
		my ($off, $fmt) = @{ $static{$name} };
		_rw($path, $off, 0, pack($fmt, $fields{$name}));
	}
	_rw($path, 56, 0, pack('L<', crc32c(_rw($path, 0, 56)))) unless $keep_crc;
	return;
}

END
{
	# with the ring record's files (tools/powercut/ringrecord.c)
	unlink map { ($_, "$_.durable", "$_.durable.ts", "$_.durable.lock", "$_.hazards", "$_.stops") } @rings;
}

# ---------------------------------------------------------------------------
# Simulated power loss (tools/powercut, README.md there).  A node started
# with powercut_start() runs under libpowercut.so, which logs every write
# and sync in its pg_wal; powercut_kill() stops and kills every server
# process; powercut_cut() then undoes in pg_wal whatever a power cut at that
# moment could have lost.  What is lost is decided from the system calls
# the server made, not from pmwal's or PostgreSQL's bookkeeping.
# ---------------------------------------------------------------------------
use Cwd ();
use File::Basename ();
use IPC::Run ();
use Time::HiRes ();

push @EXPORT, qw(powercut_start powercut_kill powercut_cut powercut
  acked_load_start acked_load_finish acked_check);

# Settings for a node whose WAL only pmwal syncs while a test loads it, so
# that a power cut has unsynced WAL to take: no WAL writer flush, no
# checkpoint, no crash-restart.
use constant QUIET_WAL => q{
shared_buffers = 64MB
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
checkpoint_timeout = 1h
max_wal_size = 1GB
restart_after_crash = off
log_statement = none
};
push @EXPORT, qw(QUIET_WAL);

my $powercut_tools =
  Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../tools/powercut');

# Path of libpowercut.so, built on first use (it is not part of PGXS).
sub powercut_lib
{
	my $lib = "$powercut_tools/libpowercut.so";
	if (!-f $lib || grep { -M $lib > -M "$powercut_tools/$_" } qw(powercut.c powercut.h ringrecord.c))
	{
		system('make', '-s', '-C', $powercut_tools) == 0
		  or BAIL_OUT("could not build $lib");
	}
	return $lib;
}

# Start $node with the power-cut log on, in a fresh log file.  The previous
# log, if any, was cut already: what it left on disk is the new baseline.
# With a ring cut asked for (the node's {ring_cut}, or PMWAL_RING_CUT), the
# ring is recorded too (tools/powercut/ringrecord.c): its durable image
# starts as the ring file as it is now; a ring the server creates gets one
# at its first flush.
sub powercut_start
{
	my ($node, %params) = @_;
	my $log = $node->basedir . '/powercut.log';
	my $ring = $node->{pmwal_ring};

	unlink $log;
	$node->{powercut_log} = $log;
	$ring = undef unless $node->{ring_cut} || $ENV{PMWAL_RING_CUT};
	$node->{ring_recorded} = defined $ring;
	if (defined $ring)
	{
		unlink "$ring.durable", "$ring.durable.ts", "$ring.durable.lock", "$ring.hazards",
		  "$ring.stops";
		if (-f $ring)
		{
			File::Copy::copy($ring, "$ring.durable") or die "copy $ring: $!";
			PostgreSQL::Test::Utils::append_to_file("$ring.durable.ts", '');
		}
	}
	local $ENV{LD_PRELOAD} = powercut_lib();
	local $ENV{POWERCUT_LOG} = $log;
	local $ENV{POWERCUT_DIR} = $node->data_dir . '/pg_wal';
	local $ENV{POWERCUT_RING} = $ring // '';
	return $node->start(%params);
}

# State letter of a process from /proc, '' when it is gone.  A zombie is
# not gone: a new postmaster takes a zombie's pid in postmaster.pid for a
# running server.
sub _proc_state
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return '';
	my $stat = <$fh>;
	close $fh;
	return '' unless defined $stat && $stat =~ /\)\s+(\S)\s/;
	return $1;
}

# Server processes: the pids in /proc whose file $file (stat, maps) has
# a line matching $match.
sub _procs_where
{
	my ($file, $match) = @_;
	my @pids;
	opendir my $dh, '/proc' or die "could not read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open my $fh, '<', "/proc/$pid/$file" or next;
		while (<$fh>)
		{
			if ($match->($_))
			{
				push @pids, $pid;
				last;
			}
		}
		close $fh;
	}
	closedir $dh;
	return @pids;
}

# Processes that map the file $path.
sub _mapping
{
	my ($path) = @_;
	return _procs_where('maps', sub { $_[0] =~ / \Q$path\E(?: \(deleted\))?$/ });
}

sub _children_of
{
	my ($ppid) = @_;
	return _procs_where('stat', sub { $_[0] =~ /\)\s+\S\s+(\d+)\s/ && $1 == $ppid });
}

# Stop the world, then kill it: SIGSTOP the postmaster (it forks no more),
# then every child, and wait until all of them are stopped -- a stopped
# process is not inside a system call, so no write and no log record is
# half done -- then SIGKILL them all and wait until they are gone.  The
# moment of the power cut is the moment the last process stopped.
sub powercut_kill
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	die "powercut_kill: node " . $node->name . " is not running" unless $pm;

	my %procs = ($pm => 1);
	kill 'STOP', $pm;
	my $deadline = time + 60;
	while (1)
	{
		for my $kid (_children_of($pm))
		{
			next if $procs{$kid};
			$procs{$kid} = 1;
			kill 'STOP', $kid;
		}
		my @running = grep { !_stopped_or_gone($_) } keys %procs;
		last unless @running;
		die "powercut_kill: processes @running do not stop" if time > $deadline;
		Time::HiRes::usleep(5_000);
	}
	# one more look: a fork the postmaster finished just before it stopped
	for my $kid (_children_of($pm))
	{
		$procs{$kid} = 1;
		kill 'STOP', $kid;
	}
	# a process of this server that is not a child of its postmaster (none
	# is expected) would go on holding the ring and shared memory, and the
	# next start would refuse: every process that maps the ring is stopped
	# too, and named
	if (defined $node->{pmwal_ring})
	{
		for my $pid (_mapping($node->{pmwal_ring}))
		{
			next if $procs{$pid};
			Test::More::diag("powercut_kill: process $pid maps the ring but is no child of the postmaster");
			$procs{$pid} = 1;
			kill 'STOP', $pid;
		}
	}
	my @pids = keys %procs;
	$node->{_pid} = undef;
	# not even a zombie may be left: a start would take its PID for a
	# running postmaster
	_kill_stopped('powercut_kill', $deadline, 0, @pids);
	note('killed ' . scalar(@pids) . ' server processes of node ' . $node->name);
	return scalar @pids;
}

# Apply the power cut to pg_wal from the log; returns the summary as a
# hash (undone, bytes, removed, renames, durable, records, direct,
# direct_sync, undone_range:
# file name => [from, to) of its undone writes) and notes the report.  The log is kept as powercut.log.cut for inspection.
sub powercut_cut
{
	my ($node) = @_;
	my $log = $node->{powercut_log} or die "powercut_cut: node was not started with powercut_start";
	my ($out, $err) = ('', '');
	IPC::Run::run([ $^X, "$powercut_tools/powercut_cut", '--verbose', $log,
			$node->data_dir . '/pg_wal' ], '>', \$out, '2>', \$err)
	  or die "powercut_cut failed: $err$out";
	note($out);
	my ($summary) = $out =~ /^(powercut: \d+ writes undone.*)$/m
	  or die "powercut_cut printed no summary: $out";
	my %s;
	@s{qw(undone bytes removed renames durable)} =
	  $summary =~ /(\d+) writes undone \((\d+) bytes\), (\d+) files removed, (\d+) renames undone; (\d+) writes durable/;
	($s{records}) = $summary =~ /(\d+) records/;
	# writes through O_DIRECT descriptors, and how many of them O_SYNC/O_DSYNC
	@s{qw(direct direct_sync)} =
	  $summary =~ /(\d+) writes through O_DIRECT \((\d+) of them/ ? ($1, $2) : (0, 0);
	$s{summary} = $summary;
	# per file, the byte range the undone writes spanned
	$s{undone_range}{$1} = [ $2, $3 ]
	  while $out =~ /^powercut: (\w+): undid \d+ writes, \d+ bytes, in \[(\d+), (\d+)\)/mg;
	rename $log, "$log.cut";
	delete $node->{powercut_log};
	ring_cut($node, \%s) if $node->{ring_recorded} && -f $node->{pmwal_ring};
	return \%s;
}

# The ring's part of the power cut (tools/powercut/ring_cut): lines that
# differ from the durable image are reverted per the mode -- the node's
# {ring_cut}, else PMWAL_RING_CUT -- with a seed from
# PMWAL_RING_CUT_SEED or a fresh one (noted, to replay a failure).  Adds
# ring_mode, ring_differ, ring_reverted and ring_summary to $s.
sub ring_cut
{
	my ($node, $s) = @_;
	my $mode = $node->{ring_cut} // $ENV{PMWAL_RING_CUT} // 'durable';
	my @seed = defined $ENV{PMWAL_RING_CUT_SEED} ? ('--seed', $ENV{PMWAL_RING_CUT_SEED}) : ();
	my ($out, $err) = ('', '');
	IPC::Run::run([ $^X, "$powercut_tools/ring_cut", '--mode', $mode, @seed,
			$node->{pmwal_ring} ], '>', \$out, '2>', \$err)
	  or die "ring_cut failed: $err$out";
	my ($summary) = $out =~ /^(ringcut: .*)$/m or die "ring_cut printed no summary: $out$err";
	note($summary);
	@$s{qw(ring_differ ring_reverted)} = $summary =~ /(\d+) lines differed, (\d+) reverted/;
	$s->{ring_mode} = $mode;
	$s->{ring_summary} = $summary;
	return;
}

# Kill and cut in one go.
sub powercut
{
	my ($node) = @_;
	powercut_kill($node);
	return powercut_cut($node);
}

# Start pgbench clients that insert unique ids into $opts{table} (a bigint
# primary key) in autocommit transactions.  Client c's n-th transaction
# inserts base + c * 1e9 + n; pgbench's per-transaction log (-l) has a line
# for each transaction only once the server acknowledged its COMMIT, so
# the ids acknowledged by client c are base + c * 1e9 + 1 .. + (its lines).
# Options: table, clients (4), base (0), duration (600 s), tag; big => N
# makes one transaction in N (on average) a large one that also inserts
# big_rows (5000) rows into the table "filler" (id int, v text) before its
# id, in the same transaction.
sub acked_load_start
{
	my ($node, %opts) = @_;
	my $table = $opts{table} // 't';
	my $clients = $opts{clients} // 4;
	my $base = $opts{base} // 0;
	my $tag = $opts{tag} // 'load';
	my $script = $node->basedir . "/$tag.sql";
	my $prefix = $node->basedir . "/$tag.txlog";
	my $next_id = "\\set n :n + 1\n\\set id :base + :client_id * 1000000000 + :n\n";
	my @scripts = ('-f', $opts{big} ? "$script\@$opts{big}" : $script);
	my ($out, $err) = ('', '');

	unlink glob("$prefix.*");
	PostgreSQL::Test::Utils::append_to_file($script,
		"$next_id" . "INSERT INTO $table VALUES (:id);\n")
	  unless -e $script;
	if ($opts{big})
	{
		my $big = $node->basedir . "/$tag.big.sql";
		my $rows = $opts{big_rows} // 5000;
		PostgreSQL::Test::Utils::append_to_file($big,
			"$next_id" . "BEGIN;\n"
			  . "INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, $rows) g;\n"
			  . "INSERT INTO $table VALUES (:id);\nCOMMIT;\n")
		  unless -e $big;
		push @scripts, '-f', "$big\@1";
	}
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', $clients, '-j', '1', '-T', $opts{duration} // 600,
		  @scripts, '-D', 'n=0', '-D', "base=$base", '-l', "--log-prefix=$prefix",
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err, prefix => $prefix, table => $table,
		clients => $clients, base => $base };
}

# Wait for pgbench to end (it does once the server is gone) and count the
# acknowledged transactions of each client.
sub acked_load_finish
{
	my ($load) = @_;
	$load->{h}->finish;
	my %acked = map { $_ => 0 } 0 .. $load->{clients} - 1;
	for my $f (glob("$load->{prefix}.*"))
	{
		open my $fh, '<', $f or die "could not read $f: $!";
		while (<$fh>)
		{
			my @f = split / /;
			$acked{ $f[0] }++ if @f >= 6 && $f[2] =~ /^\d+$/;
		}
		close $fh;
	}
	$load->{acked} = \%acked;
	my $total = 0;
	$total += $_ for values %acked;
	$load->{total} = $total;
	return $total;
}

# Check every acknowledged id against the table.  Returns (acknowledged,
# missing, extra): extra counts rows beyond the acknowledged ones, at most
# one per client (the transaction in flight at the kill) if the id scheme
# holds.
sub acked_check
{
	my ($node, $load) = @_;
	my ($acked, $missing, $extra) = (0, 0, 0);
	for my $c (sort { $a <=> $b } keys %{ $load->{acked} })
	{
		my $n = $load->{acked}{$c};
		my $lo = $load->{base} + $c * 1_000_000_000;
		my ($hi, $end) = ($lo + $n, $lo + 1_000_000_000);
		my ($present, $all) = split /\|/, $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE id <= $hi), count(*) FROM $load->{table} "
			  . "WHERE id > $lo AND id < $end");
		$acked += $n;
		$missing += $n - $present;
		$extra += $all - $present;
	}
	return ($acked, $missing, $extra);
}

# The verdict on acked_check's counts after a power cut: with expect_loss
# some acknowledged commits must be missing (a negative control); else every
# one is there, at most one unacknowledged commit per client (the one in
# flight at the kill), and amcheck finds t and its primary key consistent.
push @EXPORT, qw(acked_verdict);
sub acked_verdict
{
	my ($node, $tag, $load, $n, $missing, $extra, $expect_loss) = @_;
	if ($expect_loss)
	{
		Test::More::cmp_ok($missing, '>', 0, "$tag: acknowledged commits are lost ($missing of $n)");
		return;
	}
	Test::More::is($missing, 0, "$tag: all $n acknowledged commits are present");
	Test::More::cmp_ok($extra, '<=', $load->{clients},
		"$tag: at most one unacknowledged commit per client is present ($extra)");
	Test::More::is($node->safe_psql('postgres',
			q{SELECT bt_index_check('t_pkey', heapallindexed => true)}),
		'', "$tag: amcheck finds the primary key and the table consistent");
	return;
}

# Wait until the postmaster of $node is gone (a PANIC with
# restart_after_crash off, a FATAL at start).  Returns whether it is.
push @EXPORT, qw(wait_postmaster_gone);
sub wait_postmaster_gone
{
	my ($node) = @_;
	my $pid = $node->{_pid} or return 1;
	my $deadline = time + 120;
	while (kill(0, $pid) && time < $deadline)
	{
		continue_quit_stopped($node);
		Time::HiRes::sleep(0.1);
	}
	my $gone = !kill(0, $pid);
	$node->_update_pid(0) if $gone;
	return $gone;
}

# One probe of the ring's store order (issue 12): a node on a small ring
# (2 MB) under committing load in which one transaction in 20 inserts
# 20000 rows more -- some 3 MB of WAL, with wal_buffers (16 MB) large
# enough for PostgreSQL to write much of it in one pwrite.  So the ring is
# found full again and again (freed from its tail, wal_ring.c free_to),
# and now and then a single write is larger than it: the ring retires
# (synced for real, emptied, unanchored) and the next write anchors it
# again, an empty ring moved up over the WAL written meanwhile (anchor,
# move_empty).  With 5000 rows and the default wal_buffers (the load
# before the sync layer) no write is ever larger than the ring, and the
# only anchor is the first write after the start.  Options big, big_rows:
# acked_load_start's.  The ring record stops a process at $opts{stop}
# (hazard, random:P, claim: tools/powercut/ringrecord.c), or with 'none'
# the kill comes at a random moment; then everything is killed, pg_wal and
# the ring cut (ring mode $opts{ring_cut}) and the node restarted.
# $opts{libdir}: another build of pmwal.so (build_mutant).  Returns a
# hash: acked, missing (undef when the restart was refused), restarted,
# stopped (a stop happened), why (the FATAL or PANIC of a refused
# restart), cut, retires and anchors (how often the ring retired and was
# anchored, the first write's anchor included, from the server log).
push @EXPORT, qw(ring_probe build_mutant);

sub ring_probe
{
	my ($name, %opts) = @_;
	my $stop = $opts{stop} // 'none';
	my $node;
	{
		local $ENV{PMWAL_TEST_LIBDIR} = $opts{libdir} if $opts{libdir};
		$node = pmwal_node($name, size => $opts{size} // '2MB',
			conf => QUIET_WAL . "pmwal.flush_interval = 50ms\nwal_buffers = 16MB\n");
	}
	# the tables first: a stop inside this DDL would hold it forever
	$node->start;
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); '
		  . 'CREATE TABLE filler (id int, v text)');
	$node->stop;
	$node->{ring_cut} = $opts{ring_cut} // 'durable';
	my $run_from = -s $node->logfile;
	my $ring = $node->{pmwal_ring};
	{
		# the stops are armed once the server is up: a stop in the
		# postmaster's own header stores at the start (binding the ring;
		# a mutant gets those wrong too) would hold the start forever
		local $ENV{POWERCUT_RING_STOP} = $stop eq 'none' ? '' : $stop;
		local $ENV{POWERCUT_RING_ARM} = "$ring.arm";
		unlink "$ring.arm";
		powercut_start($node);
		PostgreSQL::Test::Utils::append_to_file("$ring.arm", '');
	}
	my $load = acked_load_start($node, tag => $name, big => $opts{big} // 20,
		big_rows => $opts{big_rows} // 20000);
	my $stopped = 0;
	my $deadline = Time::HiRes::time() + ($stop eq 'none' ? 1 + rand(2) : $opts{wait} // 8);
	while (Time::HiRes::time() < $deadline)
	{
		# every stop is logged there (hazards are logged before the arming too)
		if (-s "$ring.stops")
		{
			$stopped = 1;
			# the others run on a moment: their commits are acknowledged
			Time::HiRes::sleep(0.2);
			last;
		}
		Time::HiRes::sleep(0.01);
	}
	my $cut = powercut($node);
	unlink "$ring.arm";
	acked_load_finish($load);
	my $offset = -s $node->logfile;
	my $run_log = slurp_file($node->logfile, $run_from);
	my %r = (stopped => $stopped, cut => $cut, acked => $load->{total}, node => $node,
		retires => scalar(() = $run_log =~ /pmwal gave up its ring/g),
		anchors => scalar(() = $run_log =~ /pmwal ring .* anchored at/g));
	$r{restarted} = $node->start(fail_ok => 1);
	if ($r{restarted})
	{
		(undef, $r{missing}) = acked_check($node, $load);
		$node->stop('immediate');
	}
	else
	{
		($r{why}) = slurp_file($node->logfile, $offset) =~ /((?:FATAL|PANIC): .*)/;
	}
	return \%r;
}

# Copy what building pmwal.so needs (the Makefile, the SQL scripts, the
# control file and src/) from the checkout $top into $dir, for a build of
# its own there (mutants, the release build).
push @EXPORT, qw(copy_module_sources);

sub copy_module_sources
{
	my ($top, $dir) = @_;
	mkdir "$dir/src" or die "copy_module_sources: mkdir $dir/src: $!";
	for my $f (grep { -f $_ } glob("$top/Makefile $top/*.control $top/*.sql $top/src/*.c $top/src/*.h"))
	{
		(my $rel = $f) =~ s{^\Q$top\E/}{};
		File::Copy::copy($f, "$dir/$rel") or die "copy_module_sources: copy $f: $!";
	}
	return;
}

# Build pmwal.so with the single-point mutation $n of the ring's store
# order (PMWAL_MUTANT in pmwal.h) from this checkout into a directory of its
# own, for ring_probe's libdir; nothing is installed.
sub build_mutant
{
	my ($n) = @_;
	my $top = "$FindBin::RealBin/..";
	$top = "$FindBin::RealBin/../.." unless -f "$top/src/pmwal.h";
	my $dir = PostgreSQL::Test::Utils::tempdir("mutant_$n");
	copy_module_sources($top, $dir);
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'make', '-s', '-C', $dir, "PG_CPPFLAGS=-DPMWAL_MUTANT=$n", 'pmwal.so' ],
		'>', \$out, '2>', \$err)
	  or die "build_mutant $n failed: $out$err";
	return $dir;
}

# SIGKILL one server process of a node started with powercut_start(), the
# way powercut_kill() kills them all: SIGSTOP first, and SIGKILL only once
# it is stopped, so that it dies inside no system call -- a SIGKILL inside
# the writev() of a power-cut log record can cut the record short, and
# powercut_cut then refuses the log.
push @EXPORT, qw(powercut_kill_one);

sub powercut_kill_one
{
	my ($pid) = @_;
	kill('STOP', $pid) or die "powercut_kill_one: no process $pid: $!";
	my $deadline = time + 60;
	until (_stopped_or_gone($pid))
	{
		die "powercut_kill_one: process $pid does not stop" if time > $deadline;
		Time::HiRes::usleep(1_000);
	}
	# the postmaster, still running, reaps the zombie
	_kill_stopped('powercut_kill_one', $deadline, 1, $pid);
	return;
}

# Is the process stopped (SIGSTOP, or held by a debugger: 't'), or already
# gone?
sub _stopped_or_gone
{
	my $s = _proc_state($_[0]);
	return $s eq 'T' || $s eq 't' || $s eq 'Z' || $s eq '';
}

# SIGKILL stopped processes and wait until they are gone; with $zombie_ok a
# zombie counts as gone.
sub _kill_stopped
{
	my ($what, $deadline, $zombie_ok, @pids) = @_;
	kill 'KILL', @pids;
	while (my @alive = grep { my $s = _proc_state($_); $s ne '' && !($zombie_ok && $s eq 'Z') } @pids)
	{
		die "$what: processes @alive survive SIGKILL" if time > $deadline;
		Time::HiRes::usleep(1_000);
	}
	return;
}

# ---------------------------------------------------------------------------
# Test-only pause points (test_pause.c): pmwal.test_pause names the points a
# process stops at; it logs 'pmwal test pause at "point" (pid N)' and waits
# until the file pmwal_test_release.<point> exists in the data directory.
# ---------------------------------------------------------------------------
push @EXPORT, qw(pause_wait pause_or_exit pause_seen pause_release pause_rearm bg_psql
  bg_psql_finish without_ring_query lsn_num);

# Wait until a process logs its pause at $point after log offset $offset;
# returns its pid.  Dies after $timeout seconds (default 60).
sub pause_wait
{
	my ($node, $point, $offset, $timeout) = @_;
	return pause_or_exit($node, $point, $offset, undef, $timeout);
}

# Like pause_wait, for a point that the background psql $bg (bg_psql)
# should reach: returns the pid that paused, or 0 if $bg ended first.
sub pause_or_exit
{
	my ($node, $point, $offset, $bg, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 60);
	while (1)
	{
		my $pid = pause_seen($node, $point, $offset);
		return $pid if $pid;
		if ($bg)
		{
			eval { $bg->{h}->pump_nb };
			return pause_seen($node, $point, $offset) // 0
			  unless $bg->{h}->pumpable;
		}
		if (Time::HiRes::time() > $deadline)
		{
			# say what the server was doing instead
			for my $q ('SELECT * FROM pmwal_status',
				q{SELECT pid, backend_type, state, wait_event_type, wait_event, query FROM pg_stat_activity})
			{
				my ($rc, $out, $err) = $node->psql('postgres', $q, extra_params => ['-x']);
				Test::More::diag("$q:\n$out$err");
			}
			die "no pause at \"$point\" within the time allowed";
		}
		Time::HiRes::usleep(20_000);
	}
}

# The pid of a process that paused at $point after $offset, or undef.
sub pause_seen
{
	my ($node, $point, $offset) = @_;
	my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset // 0);
	return $log =~ /pmwal test pause at "\Q$point\E" \(pid (\d+)\)/ ? $1 : undef;
}

# Let every process held at $point go on (and any that reaches it later).
sub pause_release
{
	my ($node, $point) = @_;
	PostgreSQL::Test::Utils::append_to_file(
		$node->data_dir . "/pmwal_test_release.$point", '');
	return;
}

# Make $point hold processes again after a release.
sub pause_rearm
{
	my ($node, $point) = @_;
	unlink $node->data_dir . "/pmwal_test_release.$point";
	return;
}

# Interactive psql sessions: SQL sent through a pipe, stdout and stderr in
# one buffer (WARNINGs and DETAILs included), so that a test sees what the
# client saw, in order.  Options: db (postgres), on_error_stop (1), tags
# (0: -q, no command tags), pid (0: with 1, the backend's pid is asked for
# at once and kept in {pid}).
push @EXPORT, qw(psql_session send_and_wait session_pid session_output session_pumpable
  session_close session_end);

sub psql_session
{
	my ($node, %o) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', $o{tags} ? '-XAt' : '-XAtq', '-v', 'ON_ERROR_STOP=' . ($o{on_error_stop} // 1),
		  '-d', $node->connstr($o{db} // 'postgres'), '-f', '-' ],
		'<', \$in, '>&', \$out);
	my $s = { h => $h, in => \$in, out => \$out };
	if ($o{pid})
	{
		$s->{pid} = session_pid($s);
		${ $s->{out} } = '';
	}
	return $s;
}

# Send $sql; unless $re is undef, wait until the output (since this call)
# matches it and return the output.
sub send_and_wait
{
	my ($s, $sql, $re, $timeout) = @_;
	${ $s->{out} } = '';
	${ $s->{in} } .= $sql;
	$s->{h}->pump_nb if $s->{h}->pumpable;
	return undef unless defined $re;
	my $deadline = Time::HiRes::time() + ($timeout // 120);
	while (${ $s->{out} } !~ $re)
	{
		die "session: no match for $re in: ${ $s->{out} }"
		  if Time::HiRes::time() > $deadline || !$s->{h}->pumpable;
		$s->{h}->pump_nb;
		Time::HiRes::usleep(10_000);
	}
	return ${ $s->{out} };
}

sub session_pid
{
	my ($s) = @_;
	my ($pid) = send_and_wait($s, "SELECT 'pid=' || pg_backend_pid();\n", qr/^pid=(\d+)$/m)
	  =~ /^pid=(\d+)$/m;
	return $pid;
}

# What the client has received so far (since the last send).
sub session_output
{
	my ($s) = @_;
	eval { $s->{h}->pump_nb } if $s->{h}->pumpable;
	return ${ $s->{out} };
}

sub session_pumpable
{
	my ($s) = @_;
	eval { $s->{h}->pump_nb } if $s->{h}->pumpable;
	return $s->{h}->pumpable;
}

# End a session with \q.
sub session_close
{
	my ($s) = @_;
	${ $s->{in} } .= "\\q\n" if $s->{h}->pumpable;
	eval { $s->{h}->finish };
	return;
}

# End a session whose server is gone (or that is no longer needed).
sub session_end
{
	my ($s) = @_;
	$s->{h}->kill_kill if $s->{h}->pumpable;
	eval { $s->{h}->finish };
	return;
}

# The WAL in $datadir's pg_wal on timeline $tli from $from to $to, as bytes
# ($segsize: the WAL segment size; a missing segment ends it).
push @EXPORT, qw(wal_bytes first_difference);

sub wal_bytes
{
	my ($datadir, $tli, $from, $to, $segsize) = @_;
	$segsize //= 16 * 1024 * 1024;
	my $per_id = int(2**32 / $segsize);
	my $bytes = '';
	for (my $p = $from; $p < $to;)
	{
		my $segno = int($p / $segsize);
		my $name = sprintf('%08X%08X%08X', $tli, int($segno / $per_id), $segno % $per_id);
		my $off = $p % $segsize;
		my $n = $segsize - $off < $to - $p ? $segsize - $off : $to - $p;
		open my $fh, '<:raw', "$datadir/pg_wal/$name" or last;
		sysseek($fh, $off, 0);
		my $buf = '';
		sysread($fh, $buf, $n);
		close $fh;
		$bytes .= $buf;
		last if length($buf) < $n;
		$p += $n;
	}
	return $bytes;
}

# Offset of the first byte that differs between $a and $b (over the
# shorter), or undef.
sub first_difference
{
	my ($a, $b) = @_;
	my $n = length($a) < length($b) ? length($a) : length($b);
	for (my $i = 0; $i < $n; $i += 8192)
	{
		my $len = $n - $i < 8192 ? $n - $i : 8192;
		next if substr($a, $i, $len) eq substr($b, $i, $len);
		for my $j ($i .. $i + $len - 1)
		{
			return $j if substr($a, $j, 1) ne substr($b, $j, 1);
		}
	}
	return undef;
}

push @EXPORT, qw(arm_all disarm_all);

# Arm pause points for every server process (postgresql.auto.conf and a
# reload): the way to reach background processes (the checkpointer, the
# flusher) and writers nobody can name in advance.  The release files of
# @points are removed first.
sub arm_all
{
	my ($node, $points) = @_;
	pause_rearm($node, $_) for map { (split /:/)[0] } split /\s*,\s*/, $points;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = '$points'; SELECT pg_reload_conf()");
	_wait_reloaded($node, $points);
	return;
}

# A new backend sees the setting: the postmaster has reloaded and sent
# SIGHUP to every child, so each handles it before its next request.
sub _wait_reloaded
{
	my ($node, $want) = @_;
	$node->poll_query_until('postgres', 'SHOW pmwal.test_pause', $want)
	  or die "the setting pmwal.test_pause = '$want' does not arrive";
	return;
}

sub disarm_all
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause; SELECT pg_reload_conf()');
	_wait_reloaded($node, '');
	return;
}

# Run SQL in psql in the background (each element of @sql one -c, so one
# transaction each); returns a handle for bg_psql_finish.
sub bg_psql
{
	my ($node, @sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		  '-d', $node->connstr('postgres'), map { ('-c', $_) } @sql ],
		'>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err };
}

# Wait for a background psql to end; returns (exit code, stdout, stderr).
sub bg_psql_finish
{
	my ($bg) = @_;
	$bg->{h}->finish;
	return ($bg->{h}->result(0), ${ $bg->{out} }, ${ $bg->{err} });
}

# An LSN as the server and pmwal print it: 19 pads the low half to eight
# digits ("0/0163A2F8"), older servers do not ("0/163A2F8").
push @EXPORT, qw(lsn_format);
sub lsn_format
{
	my ($n) = @_;
	return sprintf(defined $server_major && $server_major >= 19 ? '%X/%08X' : '%X/%X',
		int($n / 2**32), $n % 2**32);
}

# LSN text (X/Y) as a number.
sub lsn_num
{
	my ($hi, $lo) = split m{/}, $_[0];
	return hex($hi) * 2**32 + hex($lo);
}

# Negative control for a power cut: start a copy of the stopped node's data
# directory without its ring (pmwal.path = '') and run $sql there.  Returns
# the result, or undef if the copy cannot even start.  What the copy lacks
# is exactly what only the ring held.  Options: conf (settings for the
# copy), fail_ok (a failing query does not die: returns the result, undef
# if the copy does not start or the query fails, and the error output --
# a data page ahead of the copy's WAL makes any process that writes it out
# fail: "xlog flush request ... is not satisfied"), promote (a standby's
# copy starts as a primary: its signal files removed).
my $without_ring_count = 0;
sub without_ring_query
{
	my ($node, $sql, %opts) = @_;
	my $copy = PostgreSQL::Test::Cluster->new($node->name . '_noring' . $without_ring_count++);
	PostgreSQL::Test::RecursiveCopy::copypath($node->data_dir, $copy->data_dir);
	chmod 0700, $copy->data_dir;
	unlink $copy->data_dir . '/postmaster.pid';
	# as if it had never had a ring: without its binding, which would make
	# the copy refuse to start without the ring it is bound to
	unlink $copy->data_dir . '/pg_wal/pmwal.binding';
	# a standby's copy, promoted: crash recovery, then a primary
	unlink map { $copy->data_dir . "/$_" } qw(standby.signal recovery.signal) if $opts{promote};
	$copy->append_conf('postgresql.conf',
		"port = " . $copy->port . "\npmwal.path = ''\nrestart_after_crash = off\n"
		  . "archive_mode = off\n" . ($opts{conf} // ''));
	my ($result, $err) = (undef, 'the copy does not start');
	if ($copy->start(fail_ok => 1))
	{
		if ($opts{fail_ok})
		{
			my ($rc, $out);
			($rc, $out, $err) = $copy->psql('postgres', $sql);
			$result = $out if $rc == 0;
		}
		else
		{
			$result = $copy->safe_psql('postgres', $sql);
		}
		$copy->stop('immediate');
	}
	$copy->clean_node;
	return $opts{fail_ok} ? ($result, $err) : $result;
}

# ---------------------------------------------------------------------------
# Holding a server process inside PostgreSQL itself, where pmwal has no pause
# point: gdb attached to it with a breakpoint on an exported function.
# ---------------------------------------------------------------------------
push @EXPORT, qw(gdb_break gdb_wait_hit gdb_release);

# Attach gdb to $pid with a breakpoint on $function, and let it run.  gdb
# talks to the test through files (its output to a pipe is buffered): it
# creates <base>.ready once the process runs again, <base>.hit when the
# breakpoint is reached, then waits for <base>.release, detaches and quits.
# With leave_stopped => 1 it SIGSTOPs the process at the breakpoint and
# detaches at once: the process stays stopped there, untraced, for
# powercut_kill (a traced process killed stays a zombie until its tracer
# looks).  With nth => N it stops at the N-th call, not the first.
my $gdb_count = 0;
my @gdbs;

# A test that dies while gdb holds a process: let it go, so that the
# nodes can be stopped (this END runs before PostgreSQL::Test::Cluster's).
END
{
	local $?;
	for my $g (grep { $_->{h}->pumpable } @gdbs)
	{
		PostgreSQL::Test::Utils::append_to_file("$g->{base}.release", '');
		my $deadline = Time::HiRes::time() + 10;
		while ($g->{h}->pumpable && Time::HiRes::time() < $deadline)
		{
			eval { $g->{h}->pump_nb };
			Time::HiRes::usleep(20_000);
		}
		eval { $g->{h}->kill_kill };
	}
}

sub gdb_break
{
	my ($pid, $function, %opts) = @_;
	my $base = PostgreSQL::Test::Utils::tempdir('gdb') . '/gdb' . $gdb_count++;
	# PostgreSQL's processes live on signals (latches, checkpoint
	# requests): gdb must pass them on without stopping
	PostgreSQL::Test::Utils::append_to_file("$base.cmd", qq{set pagination off
set confirm off
handle SIGINT SIGUSR1 SIGUSR2 SIGHUP SIGTERM SIGQUIT SIGALRM SIGPIPE SIGCHLD nostop noprint pass
break $function
} . ($opts{nth} && $opts{nth} > 1 ? 'ignore 1 ' . ($opts{nth} - 1) . "\n" : '') . qq{commands 1
silent
} . ($opts{leave_stopped}
	  ? "shell kill -STOP $pid\nshell touch $base.hit\n"
	  : "shell touch $base.hit\nshell while [ ! -e $base.release ]; do sleep 0.02; done\n") . qq{delete
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
	push @gdbs, $g;
	_gdb_wait_file($g, "$base.ready", 120)
	  or die "gdb did not attach to $pid: $out";
	$g->{out} = \$out;
	return $g;
}

# Wait for gdb's $file; @pump: IPC::Run harnesses to feed meanwhile.
sub _gdb_wait_file
{
	my ($g, $file, $timeout, @pump) = @_;
	my $deadline = Time::HiRes::time() + $timeout;
	until (-e $file)
	{
		return 0 if Time::HiRes::time() > $deadline || !$g->{h}->pumpable;
		$_->pump_nb for ($g->{h}, grep { $_->pumpable } @pump);
		Time::HiRes::usleep(20_000);
	}
	return 1;
}

# Wait until the process stops at the breakpoint, feeding the IPC::Run
# harnesses in @pump (the session that will run into it) meanwhile.
sub gdb_wait_hit
{
	my ($g, $timeout, @pump) = @_;
	return 1 if _gdb_wait_file($g, "$g->{base}.hit", $timeout // 60, @pump);
	diag("gdb: " . join("\n", grep { !/Reading symbols|No debugging symbols/ } split /\n/, ${ $g->{out} }));
	return 0;
}

# Let the process go on (without the breakpoint) and end gdb.
sub gdb_release
{
	my ($g) = @_;
	PostgreSQL::Test::Utils::append_to_file("$g->{base}.release", '');
	$g->{h}->finish;
	return;
}

# ---------------------------------------------------------------------------
# Small things several tests need.
# ---------------------------------------------------------------------------
use Digest::SHA ();
push @EXPORT, qw(stop_server_process continue_quit_stopped wal_fingerprint loaded_node set_conf log_has);

# Take the node's 'walwriter' or pmwal 'flusher' off the CPU, standing for
# a process the scheduler leaves there; returns its pid.  powercut_kill
# kills it with the rest.  Each is stopped where it holds no lock: a process
# stopped inside an LWLock (the WAL writer's WALWriteLock, the flusher's
# sync_lock) would leave every commit that falls back to an fsync waiting,
# and a backend waiting for an LWLock does not even notice its client go.
#  - The flusher is held at the pause point at the end of its loop, just
#    before it sleeps: the loop it just ran also prepared the segments
#    ahead of the insert position as of now (commits may write into them).
#    The setting is reset in postgresql.auto.conf at once, so that the next
#    start does not hold it again.
#  - The WAL writer and the background writer are SIGSTOPped until one
#    stops inside its main WaitLatch (its wait event says so).
sub stop_server_process
{
	my ($node, $which) = @_;
	if ($which eq 'flusher')
	{
		my $offset = -s $node->logfile;
		pause_rearm($node, 'flusher_sleep');
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET pmwal.test_pause = 'flusher_sleep'; SELECT pg_reload_conf()");
		my $pid = pause_wait($node, 'flusher_sleep', $offset);
		$node->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause');
		return $pid;
	}
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$which'");
	push @{ $node->{pmwal_sigstopped} }, $pid;
	my $idle = { walwriter => qr/^WalWriterMain$/,
		'background writer' => qr/^Bg[Ww]riter(?:Main|Hibernate)$/ }->{$which}
	  or die "stop_server_process: no idle wait event known for $which";
	for (1 .. 500)
	{
		kill('STOP', $pid) or die "cannot stop the $which ($pid): $!";
		return $pid if $node->safe_psql('postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid") =~ $idle;
		kill('CONT', $pid);
		Time::HiRes::sleep(0.01);
	}
	die "stop_server_process: the $which ($pid) is never stopped in $idle";
}

# Let a SIGSTOPped process (stop_server_process) act on the SIGQUIT the
# postmaster sent it after a crash: a stopped process cannot, and 18+'s
# postmaster waits a minute before it SIGKILLs such a child.  Continued only
# once SIGQUIT is pending, so it never runs on otherwise.
sub continue_quit_stopped
{
	my ($node) = @_;
	my @left;
	for my $pid (@{ $node->{pmwal_sigstopped} // [] })
	{
		my $status = eval { slurp_file("/proc/$pid/status") } or next;
		my ($state) = $status =~ /^State:\s+(\S)/m;
		next unless $state && $state eq 'T';
		my ($pending) = $status =~ /^SigPnd:\s+([0-9a-f]+)/m;
		my ($shared) = $status =~ /^ShdPnd:\s+([0-9a-f]+)/m;
		if ((hex($pending // 0) | hex($shared // 0)) & (1 << 2))
		{
			kill('CONT', $pid);
		}
		else
		{
			push @left, $pid;
		}
	}
	$node->{pmwal_sigstopped} = \@left;
	return;
}

# Digest of every file in the node's pg_wal and of each file in
# $opts{files} (default: the node's ring; 'missing' for one that does not
# exist), as one string.
sub wal_fingerprint
{
	my ($node, %opts) = @_;
	my $dir = $node->data_dir . '/pg_wal';
	my @lines;
	opendir my $dh, $dir or die "could not read $dir: $!";
	for my $f (sort grep { -f "$dir/$_" } readdir $dh)
	{
		push @lines, "pg_wal/$f " . Digest::SHA->new(256)->addfile("$dir/$f")->hexdigest;
	}
	closedir $dh;
	for my $f (@{ $opts{files} // [ $node->{pmwal_ring} ] })
	{
		push @lines, "$f " . (-e $f ? Digest::SHA->new(256)->addfile($f)->hexdigest : 'missing');
	}
	return join("\n", @lines);
}

# A fresh node (64 MB ring) under the power-cut log whose WAL only pmwal
# syncs (QUIET_WAL, then $opts{conf}), with table t (bigint primary key) and
# committing load running, 300 commits in; $opts{ring_cut}: cut the ring
# too, in that mode.  Returns the node and the load.
sub loaded_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		conf => QUIET_WAL . ($opts{conf} // ''));
	$node->{ring_cut} = $opts{ring_cut} if $opts{ring_cut};
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	my $load = acked_load_start($node, tag => $name);
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "$name: the load does not run: ${ $load->{err} }";
	return ($node, $load);
}

# Append settings to postgresql.conf; later lines win.
sub set_conf
{
	my ($node, %set) = @_;
	$node->append_conf('postgresql.conf',
		join('', map { "$_ = '$set{$_}'\n" } sort keys %set));
	return;
}

# The server log matches $re.
sub log_has
{
	my ($node, $re, $name) = @_;
	ok($node->log_contains($re), $name)
	  or diag("log " . $node->logfile . " does not match $re");
	return;
}

# ---------------------------------------------------------------------------
# Nodes, commits and starts several tests share.
# ---------------------------------------------------------------------------
push @EXPORT, qw(quiet_node stock_node stock_standby acked_insert short_load
  ids_present rows acked_missing_sql acked_missing try_start start_refused start_fine
  powercut_start_paused $restored_re wait_log controldata control_checkpoint
  standby_follows history_files);

# The restore's LOG line: the range it wrote, bytes, records, segments.
our $restored_re =
  qr/pmwal restored WAL ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) from the ring into pg_wal: (\d+) bytes, (\d+) records, (\d+) segments/;

# A node under the power-cut log whose WAL only pmwal syncs (QUIET_WAL, the
# flusher every $opts{interval} -- 60s --, no autovacuum), with table t
# (bigint primary key), committing through the ring.  Options: size
# (64MB), conf, init, interval, plain (no power-cut log), ring_cut.
sub quiet_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		init => $opts{init} // {},
		conf => QUIET_WAL . 'pmwal.flush_interval = ' . ($opts{interval} // '60s') . "\n"
		  . "autovacuum = off\n" . ($opts{conf} // ''));
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

# A node without pmwal (stock PostgreSQL, the control), fsync on, with
# QUIET_WAL's settings for the power-cut harness unless quiet_wal => 0.
# Options: init (PostgreSQL::Test::Cluster::init parameters), conf.
sub stock_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n"
		  . (($opts{quiet_wal} // 1) ? QUIET_WAL : '') . "fsync = on\n" . ($opts{conf} // ''));
	return $node;
}

# A streaming standby of $primary without pmwal, made from its backup
# $backup (the backup's postgresql.conf names the primary's ring: it is
# unloaded), with the settings $opts{conf}.
sub stock_standby
{
	my ($primary, $name, $backup, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, $backup, has_streaming => 1);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n" . ($opts{conf} // ''));
	return $node;
}

# Insert $id into t (or $table) in its own transaction; returns the WAL
# flush position after its COMMIT returned (its commit record is before
# it).
sub acked_insert
{
	my ($node, $id, $table) = @_;
	$node->safe_psql('postgres', 'INSERT INTO ' . ($table // 't') . " VALUES ($id)");
	return flush_lsn($node);
}

# Committing load (acked_load_start) for a few seconds, to its end: every
# commit pgbench saw acknowledged is in its log (a pgbench killed before
# its end may not have written all of it).
sub short_load
{
	my ($node, $tag, %opts) = @_;
	my $load = acked_load_start($node, tag => $tag, duration => 3, %opts);
	acked_load_finish($load);
	die "$tag: the load did not run: ${ $load->{err} }" unless $load->{total} > 0;
	return $load;
}

# Which of the ids in @ids table t holds, as a comma-separated list.
sub ids_present
{
	my ($node, @ids) = @_;
	return $node->safe_psql('postgres',
		'SELECT coalesce(string_agg(id::text, \',\' ORDER BY id), \'\') FROM t WHERE id IN ('
		  . join(',', @ids) . ')');
}

# Rows of a query as a comma-separated string.
sub rows
{
	my ($node, $sql) = @_;
	return join(',', split /\n/, $node->safe_psql('postgres', $sql));
}

# The acknowledged commits of an acked_load_start load (acked_load_finish
# done) as one SQL query that returns how many of them are missing: for a
# node that can run only one (without_ring_query).
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

# acked_check, and when that fails (a start without the ring can leave an
# index pointing at heap pages that never reached the disk: the bgwriter
# wrote pages whose WAL only the ring held), the same count by a
# sequential scan.  Returns (acknowledged, missing, how: 'index' or the
# error that made it count by 'seqscan').
sub acked_missing
{
	my ($node, $load) = @_;
	my @r = eval { acked_check($node, $load) };
	return (@r[0, 1], 'index') if @r;
	my $why = $@;
	$why =~ s/\n.*//s;
	my ($acked, $missing) = (0, 0);
	for my $c (sort { $a <=> $b } keys %{ $load->{acked} })
	{
		my $n = $load->{acked}{$c};
		my $lo = $load->{base} + $c * 1_000_000_000;
		my $present = $node->safe_psql('postgres',
			"SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;\n"
			  . "SELECT count(*) FROM $load->{table} WHERE id > $lo AND id <= " . ($lo + $n));
		$acked += $n;
		$missing += $n - $present;
	}
	return ($acked, $missing, "seqscan ($why)");
}

# Try to start the node; returns (started, the log of this attempt).  A node
# that started is left running.
sub try_start
{
	my ($node) = @_;
	my $offset = -s $node->logfile // 0;
	my $up = $node->start(fail_ok => 1);
	return ($up, slurp_file($node->logfile, $offset));
}

# A start that must be refused, on a fresh log (rotate_logfile: an assertion
# on the server log can only be satisfied by this attempt): no server runs
# afterwards; one that started after all is stopped again.  Returns the
# log of the attempt, and notes the PANIC, FATAL and DETAIL it ended with.
sub start_refused
{
	my ($node, $case, $what) = @_;
	$node->rotate_logfile;
	my $up = $node->start(fail_ok => 1);
	ok(!$up, "$case: the server refuses to start" . ($what ? " ($what)" : ''));
	ok(system('pg_ctl', 'status', '-s', '-D', $node->data_dir) >> 8 != 0,
		"$case: no server is running afterwards");
	$node->stop('immediate') if $up;
	my $log = -e $node->logfile ? slurp_file($node->logfile) : '';
	my @why = $log =~ /((?:PANIC|FATAL|DETAIL):  .*)/g;
	note("$case: the start ended with: " . join(' | ', @why)) if @why;
	return $log;
}

# A start that must succeed, on a fresh log (as start_refused); returns
# whether it did.
sub start_fine
{
	my ($node, $case) = @_;
	$node->rotate_logfile;
	my $started = $node->start(fail_ok => 1);
	ok($started, "$case: the server starts")
	  or diag(slurp_file($node->logfile));
	return $started;
}

# Start $node under the power-cut log without waiting for it (pg_ctl -W),
# with pmwal.test_pause = $point in the postmaster: returns once a process
# is held there (within $timeout seconds, 60), with the postmaster's pid
# and the log offset the attempt began at.  Without $point it returns at
# once (the pid undef).  The ring is not recorded anew.
sub powercut_start_paused
{
	my ($node, $point, $timeout) = @_;
	my $log = $node->basedir . '/powercut.log';
	unlink $log, $node->data_dir . '/postmaster.pid';
	$node->{powercut_log} = $log;
	my $offset = -s $node->logfile;
	pause_rearm($node, $point) if defined $point;
	{
		local $ENV{LD_PRELOAD} = powercut_lib();
		local $ENV{POWERCUT_LOG} = $log;
		local $ENV{POWERCUT_DIR} = $node->data_dir . '/pg_wal';
		system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
			(defined $point ? ('-o', "-c pmwal.test_pause=$point") : ()), '-W', 'start');
	}
	return (undef, $offset) unless defined $point;
	pause_wait($node, $point, $offset, $timeout);
	my ($pm) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	$node->{_pid} = $pm;
	return ($pm, $offset);
}

# Wait until the node's log after $offset matches $re; returns the match or
# undef after $timeout seconds (60).
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

# pg_controldata of the (stopped, or held) node, as a hash.  It reads the
# file: a checkpointer held inside its pg_control update holds
# ControlFileLock, which pg_control_checkpoint() waits for.
sub controldata
{
	my ($node) = @_;
	my ($out) = run_command([ 'pg_controldata', '-D', $node->data_dir ]);
	return { map { /^([^:]+):\s+(.*)$/ ? ($1 => $2) : () } split /\n/, $out };
}

# The latest checkpoint's location that pg_control names (controldata).
sub control_checkpoint
{
	my ($node) = @_;
	return controldata($node)->{'Latest checkpoint location'}
	  // die 'pg_controldata printed no checkpoint location';
}

# A streaming standby follows its (restarted) primary: it catches up, has
# exactly the primary's rows of t, and its log shows no refusal of the
# primary's history.
sub standby_follows
{
	my ($primary, $standby, $tag) = @_;
	eval { $primary->wait_for_catchup($standby, 'replay', $primary->lsn('flush')); 1 }
	  or diag("$tag: the standby does not catch up: $@");
	my $rows = 'SELECT count(*), sum(id) FROM t';
	is($standby->safe_psql('postgres', $rows), $primary->safe_psql('postgres', $rows),
		"$tag: the standby follows the primary and has exactly its rows");
	unlike(slurp_file($standby->logfile),
		qr/not in this server's history|forked off current database system timeline|requested starting point .* is ahead|new timeline \d+ forked/,
		"$tag: the standby refused nothing");
	return;
}

# Timeline history files in a node's pg_wal.
sub history_files
{
	my ($node) = @_;
	return map { s{.*/}{}r } glob($node->data_dir . '/pg_wal/*.history');
}

# ---------------------------------------------------------------------------
# WAL positions, and the bytes of pg_wal, the ring and the data files by LSN
# (timeline 1, 16 MB segments unless said otherwise).
# ---------------------------------------------------------------------------
push @EXPORT, qw(lsn_text insert_lsn flush_lsn advance_to pad_into_last_page
  segment_of wal_rw ring_rw ring_page_header first_record_in_page ring_words
  status_line disk_page_lsn_max relmap_filenode);

my $SEG = 16 * 1024 * 1024;

# LSN number as text X/Y (lsn_num's inverse).
sub lsn_text { return lsn_format($_[0]); }

sub insert_lsn
{
	my ($node) = @_;
	return lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
}

sub flush_lsn
{
	my ($node) = @_;
	return lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
}

# Insert WAL (non-transactional logical messages, never flushed by
# themselves) until the insert position lies in [$from, $to).
sub advance_to
{
	my ($node, $from, $to) = @_;
	for (1 .. 1000)
	{
		my $x = insert_lsn($node);
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
		my $l = insert_lsn($node);
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

# The first record that begins in the ring's page $page (after the
# continuation of a record from the page before), or undef.
sub first_record_in_page
{
	my ($node, $page) = @_;
	my $h = ring_page_header($node, $page);
	my $at = $page + $h->{size};
	if ($h->{contrecord})
	{
		return undef if $h->{rem_len} >= 8192 - $h->{size};
		$at += $h->{rem_len};
		$at += 8 - $at % 8 if $at % 8;
	}
	return $at + 24 <= $page + 8192 ? $at : undef;
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

# pmwal_status's positions, as one line.
sub status_line
{
	my ($node) = @_;
	my $st = pmwal_status($node);
	return join(' ', map { "$_=$st->{$_}" } qw(tail_lsn head_lsn durable_lsn state));
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

1;

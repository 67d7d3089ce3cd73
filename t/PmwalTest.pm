# PmwalTest.pm
#		What every pmwal TAP test needs: a node that preloads pmwal on an
#		emulated ring of its own in /dev/shm, and access to the ring's bytes.
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
# hash (undone, bytes, removed, renames, durable, records, undone_range:
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
# (0: -q, no command tags).
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
	return { h => $h, in => \$in, out => \$out };
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
# is exactly what only the ring held.
sub without_ring_query
{
	my ($node, $sql) = @_;
	my $copy = PostgreSQL::Test::Cluster->new($node->name . '_noring');
	PostgreSQL::Test::RecursiveCopy::copypath($node->data_dir, $copy->data_dir);
	chmod 0700, $copy->data_dir;
	unlink $copy->data_dir . '/postmaster.pid';
	# as if it had never had a ring: without its binding, which would make
	# the copy refuse to start without the ring it is bound to
	unlink $copy->data_dir . '/pg_wal/pmwal.binding';
	$copy->append_conf('postgresql.conf',
		"port = " . $copy->port . "\npmwal.path = ''\nrestart_after_crash = off\n"
		  . "archive_mode = off\n");
	my $result;
	if ($copy->start(fail_ok => 1))
	{
		$result = $copy->safe_psql('postgres', $sql);
		$copy->stop('immediate');
	}
	$copy->clean_node;
	return $result;
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
# looks).
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
commands 1
silent
shell touch $base.hit
} . ($opts{leave_stopped}
	  ? "shell kill -STOP $pid\n"
	  : "shell while [ ! -e $base.release ]; do sleep 0.02; done\n") . qq{delete
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
push @EXPORT, qw(stop_server_process wal_fingerprint loaded_node set_conf log_has);

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

# Hold a committer exactly inside its write window (pause point
# commit_after_write: written without fsync, not yet in the ring), with
# the WAL writer and the flusher off the CPU so that neither closes the
# window first.  The committer inserts $id_from + try into $table.  A
# commit may legitimately take the ordinary path instead of a window; then
# it is acknowledged, and another one is held: three tries.  Returns the
# background psql of the held commit (bg_psql), its id, and the ids that
# were acknowledged on the way.
push @EXPORT, qw(hold_in_write_window);
sub hold_in_write_window
{
	my ($node, $table, $id_from) = @_;
	stop_server_process($node, $_) for qw(walwriter flusher);
	my @acked;
	for my $try (1 .. 3)
	{
		my $id = $id_from + $try;
		my $before = pmwal_status($node);
		my $offset = -s $node->logfile;
		my $held = bg_psql($node, "SET pmwal.test_pause = 'commit_after_write'",
			"INSERT INTO $table VALUES ($id)");
		return ($held, $id, \@acked)
		  if pause_or_exit($node, 'commit_after_write', $offset, $held);
		my ($rc, $out, $err) = bg_psql_finish($held);
		die "the commit to hold failed: $err" if $rc != 0;
		push @acked, $id;
		my $after = pmwal_status($node);
		Test::More::diag("try $try: the commit did not open a write window; pmwal_status before and after:\n"
			  . join('', map { "  $_: $before->{$_} -> $after->{$_}\n" }
				  grep { ($before->{$_} // '') ne ($after->{$_} // '') } sort keys %$after));
	}
	BAIL_OUT('no commit could be held in its write window');
}

# Hold a committer inside pmwal's answer to its WAL sync (pause point
# sync_before_publish, wal_ring.c): its WAL is written into pg_wal and
# copied into the ring, the ring's head not yet published, PostgreSQL's
# flush pointer not yet moved -- the last moment before anything may
# trust that WAL.  The WAL writer and the flusher are taken off the CPU
# first, so that neither syncs the WAL before the committer does.  The
# committer inserts $id into $table.  Returns the background psql
# (bg_psql) of the held commit and its pid.  The held backend holds
# WALWriteLock: every other commit waits until it is released.
#
# Another session's flush may cover the commit first (it then needs no
# sync of its own and is acknowledged): up to three tries, each with the
# next id ($id, $id + 1, ...); returns the id held as a third value.
push @EXPORT, qw(hold_in_sync);
sub hold_in_sync
{
	my ($node, $table, $id, %opts) = @_;
	my $point = $opts{point} // 'sync_before_publish';
	stop_server_process($node, $_) for qw(walwriter flusher);
	for my $try (0 .. 2)
	{
		my $offset = -s $node->logfile;
		pause_rearm($node, $point);
		my $held = bg_psql($node, "SET pmwal.test_pause = '$point'",
			"INSERT INTO $table VALUES (" . ($id + $try) . ")");
		my $pid = pause_or_exit($node, $point, $offset, $held);
		return ($held, $pid, $id + $try) if $pid;
		my ($rc, $out, $err) = bg_psql_finish($held);
		die "the commit to hold failed: $err" if $rc != 0;
		Test::More::note("try $try: the commit of " . ($id + $try)
			  . " was covered by another flush; holding the next one");
	}
	BAIL_OUT("no commit into $table could be held at $point");
}

# Digest of every file in the node's pg_wal and of its ring.
sub wal_fingerprint
{
	my ($node) = @_;
	my $dir = $node->data_dir . '/pg_wal';
	my %h;
	opendir my $dh, $dir or die "could not read $dir: $!";
	for my $f (sort grep { -f "$dir/$_" } readdir $dh)
	{
		$h{$f} = Digest::SHA->new(256)->addfile("$dir/$f")->hexdigest;
	}
	closedir $dh;
	$h{ring} = Digest::SHA->new(256)->addfile($node->{pmwal_ring})->hexdigest;
	return join("\n", map { "$_ $h{$_}" } sort keys %h);
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

1;

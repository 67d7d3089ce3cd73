# PmwalTest::Binding
#		The ring binding (binding.c) for its tests (t/026*_binding_*.pl): a
#		node whose acknowledged WAL is only in its ring after a power cut,
#		the data directory's binding file, start attempts that must be
#		refused without writing anything, saved scenes to start again from,
#		and the operator's ways out (pmwal_ctl unbind, reset --discard-wal).
#
# Old-build mode (PmwalTest::OldBuild): run a test against the code before
# the binding existed (4b36e65, built at /work/old) with
#	PMWAL_TEST_LIBDIR=/work/old prove ...   (or PMWAL_TEST_OLD=/work/old)
# The tests then create extension version 1.0 and read the ring's format-1
# header.  In that mode the tests are expected to fail: each case prints a
# "case ...:" line saying what the build did.  Not a CI run.
package PmwalTest::Binding;

use strict;
use warnings;

use Exporter 'import';
use PmwalTest;
use PmwalTest::OldBuild;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::RecursiveCopy;
use Test::More;
use File::Copy ();
use File::Path ();
use Time::HiRes ();
use FindBin ();
use IPC::Run ();

our @EXPORT = qw(copy_of binding_node ring_only_cut refused_without_writing
  scene_save scene_restore ring_holds ring_gen binding_path binding_file
  binding_current unbind ring_discard wal_past case_line release_build_dir
  ring_head checkpoint_across);

$ENV{PMWAL_TEST_LIBDIR} //= $ENV{PMWAL_TEST_OLD} if $ENV{PMWAL_TEST_OLD};

# A print-out of what a case did, in both modes, for the report.
sub case_line
{
	my ($line) = @_;
	diag((testing_old_build() ? 'OLD BUILD ' : '') . "case $line");
	return;
}

# A node (64 MB ring) whose WAL only pmwal syncs under load (QUIET_WAL), with
# table t, started once and stopped cleanly: bound to its ring.
sub binding_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		conf => QUIET_WAL . ($opts{conf} // ''));
	$node->start;
	create_pmwal($node);
	$node->safe_psql('postgres',
		'CREATE TABLE t (id bigint PRIMARY KEY); CREATE TABLE f (id int, v text)');
	$node->stop;
	return $node;
}

# Start the (stopped) node under the power-cut log, commit under load with
# the flusher held (stop_server_process: it makes no more passes, WAL
# committed from now on is durable only in the ring) until $opts{commits} (2000) more ids are in t, then cut
# the power.  $opts{before_load}->($node) and $opts{before_cut}->($node, $load)
# run at those moments.  Returns the load (acked_load_finish done: its
# {total}) and the cut's summary.
sub ring_only_cut
{
	my ($node, %opts) = @_;
	my $tag = $opts{tag} // 'load';
	powercut_start($node);
	wait_accelerated($node, 't') or die $node->name . ': commits are not accelerated';
	$opts{before_load}->($node) if $opts{before_load};
	stop_server_process($node, 'flusher') unless $opts{flusher_runs};
	my $base = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
	my $load = acked_load_start($node, tag => $tag, base => $opts{base} // 0);
	my $want = $base + ($opts{commits} // 2000);
	$node->poll_query_until('postgres', "SELECT count(*) >= $want FROM t")
	  or die $node->name . ": the load does not run: ${ $load->{err} }";
	$opts{before_cut}->($node, $load) if $opts{before_cut};
	my $cut = powercut($node);
	acked_load_finish($load);
	note($node->name . ": $load->{total} commits acknowledged; $cut->{summary}");
	return ($load, $cut);
}

# A start that must be refused: FATAL matching $fatal (and DETAIL, HINT
# matching $detail, $hint, when given), the server down, and pg_wal, the
# binding file and every file in $files unchanged byte for byte (a file
# that did not exist still does not).  Returns whether it was refused; a
# server that started runs $opts{on_started} (to say what it did) and is
# stopped at once (immediate).
sub refused_without_writing
{
	my ($node, $case, %opts) = @_;
	my @files = @{ $opts{files} // [] };
	my $before = wal_fingerprint($node, files => \@files);
	my ($up, $log) = try_start($node);
	ok(!$up, "$case: the start is refused");
	if ($up)
	{
		case_line("$case: NOT refused: the server started");
		eval { $opts{on_started}->(); 1 } or diag("$case: $@") if $opts{on_started};
		$node->{started_unexpectedly} = 1;
		$node->stop('immediate');
	}
	if ($opts{fatal})
	{
		like($log, qr/FATAL:  $opts{fatal}/, "$case: FATAL says why")
		  or diag("log of the attempt:\n$log");
	}
	my ($detail) = $log =~ /FATAL:  .*\n(?:.*\n)*?.*DETAIL:  (.*)\n/;
	my ($hint) = $log =~ /FATAL:  .*\n(?:.*\n)*?.*HINT:  (.*)\n/;
	like($detail // '', $opts{detail}, "$case: DETAIL names both sides") if $opts{detail};
	like($hint // '', $opts{hint}, "$case: HINT gives the safe way") if $opts{hint};
	unlike($log, qr/pmwal (restored WAL|created ring file|bound ring)/,
		"$case: nothing restored, created or bound");
	is(wal_fingerprint($node, files => \@files), $before,
		"$case: pg_wal, the binding and the ring(s) are unchanged byte for byte");
	return !$up;
}

# The data directory as it is now (stopped), and the rings given, saved
# under the name $name; scene_restore puts them back.
sub scene_save
{
	my ($node, $name, @rings) = @_;
	my $dir = $node->basedir . "/scene_$name";
	File::Path::rmtree($dir);
	mkdir $dir or die "mkdir $dir: $!";
	PostgreSQL::Test::RecursiveCopy::copypath($node->data_dir, "$dir/pgdata");
	for my $i (0 .. $#rings)
	{
		next unless -e $rings[$i];
		File::Copy::copy($rings[$i], "$dir/ring$i") or die "copy $rings[$i]: $!";
	}
	$node->{binding_scenes}{$name} = [@rings];
	return;
}

sub scene_restore
{
	my ($node, $name) = @_;
	my $dir = $node->basedir . "/scene_$name";
	my @rings = @{ $node->{binding_scenes}{$name} or die "no scene $name" };
	File::Path::rmtree($node->data_dir);
	PostgreSQL::Test::RecursiveCopy::copypath("$dir/pgdata", $node->data_dir);
	chmod 0700, $node->data_dir;
	for my $i (0 .. $#rings)
	{
		unlink $rings[$i];
		next unless -e "$dir/ring$i";
		File::Copy::copy("$dir/ring$i", $rings[$i]) or die "copy to $rings[$i]: $!";
		chmod 0600, $rings[$i];
	}
	return;
}

# Does the ring hold WAL?  Reads either header format (1: the old build).
sub ring_holds
{
	my ($ring) = @_;
	return 0 unless -e $ring;
	my $v = ring_field($ring, 'format_version');
	open my $fh, '<:raw', $ring or die "$ring: $!";
	my $hdr;
	sysread($fh, $hdr, 512);
	close $fh;
	my ($tail, $head, $state) =
	  $v == 1
	  ? map { unpack('Q<', substr($hdr, $_, 8)) } (64, 192, 256)
	  : map { unpack('Q<', substr($hdr, $_, 8)) } (64, 128, 192);
	no warnings 'portable';
	return ($state == 0x494e555345000002 && $tail < $head) ? 1 : 0;
}

# The ring's head, either header format.
sub ring_head
{
	my ($ring) = @_;
	return unpack('Q<', substr(ring_bytes_head($ring), ring_field($ring, 'format_version') == 1 ? 192 : 128, 8));
}

sub ring_bytes_head
{
	my ($ring) = @_;
	open my $fh, '<:raw', $ring or die "$ring: $!";
	my $hdr;
	sysread($fh, $hdr, 4096);
	close $fh;
	return $hdr;
}

sub ring_gen
{
	my ($ring) = @_;
	return testing_old_build() ? 0 : ring_read_u64($ring, 'generation');
}

sub binding_path { return $_[0]->data_dir . '/pg_wal/pmwal.binding'; }

# The binding file's slots: a list of hashes (valid, generation, ring_id as
# hex, path, system_identifier), [] if there is no file.
sub binding_file
{
	my ($node) = @_;
	my $path = binding_path($node);
	return [] unless -e $path;
	my $bytes = slurp_file($path);
	my @slots;
	for my $i (0, 1)
	{
		my $s = substr($bytes, $i * 2048, 2048);
		last if length($s) < 2040;
		my ($magic, $version, $size, $sysid, $gen, $id, $rpath) =
		  unpack('a8 L< L< Q< Q< a16 Z1984', $s);
		my $crc = unpack('L<', substr($s, 2032, 4));
		push @slots, {
			valid => ($magic eq 'PMWALBND' && $version == 1 && $size == 2048 && $gen != 0
				  && crc32c(substr($s, 0, 2032)) == $crc) ? 1 : 0,
			generation => $gen,
			ring_id => unpack('H*', $id),
			path => $rpath,
			system_identifier => $sysid };
	}
	return \@slots;
}

# The binding as the server reads it (binding_pick: the valid slot with the
# higher generation, the first on a tie), or undef.
sub binding_current
{
	my ($node) = @_;
	my $best;
	for my $s (@{ binding_file($node) })
	{
		$best = $s if $s->{valid} && (!$best || $s->{generation} > $best->{generation});
	}
	return $best;
}

# The operator gives up the binding (accepts losing what only the bound
# ring held): pmwal_ctl unbind -D (with --force: even though the bound ring
# is there and holds WAL).  Until pmwal_ctl has that command (it is
# being written, see the design brief), the binding file is removed by
# hand when no pmwal_ctl is installed at all; an installed pmwal_ctl without
# it fails the test.
sub unbind
{
	my ($node, %opts) = @_;
	my ($out, $err) = ('', '');
	if (eval { IPC::Run::run([ 'pmwal_ctl', '--help' ], '>', \$out, '2>', \$err); 1 })
	{
		my @force = $opts{force} ? ('--force') : ();
		my $ok = eval { IPC::Run::run([ 'pmwal_ctl', 'unbind', @force, '-D', $node->data_dir ],
			'>', \$out, '2>', \$err) };
		ok($ok, "pmwal_ctl unbind @force -D succeeds") or diag("pmwal_ctl unbind: $out$err");
		note("pmwal_ctl unbind: $out$err");
		return if $ok;
	}
	else
	{
		note('no pmwal_ctl installed: the binding file is removed by hand, as pmwal_ctl unbind will');
	}
	unlink binding_path($node);
	return;
}

# Discard the ring's WAL, as "pmwal_ctl reset --discard-wal" does (by hand
# when no pmwal_ctl is installed): tail = head, state EMPTY.
sub ring_discard
{
	my ($ring) = @_;
	my ($out, $err) = ('', '');
	if (eval { IPC::Run::run([ 'pmwal_ctl', 'reset', '--discard-wal', $ring ], '>', \$out, '2>', \$err) })
	{
		note("pmwal_ctl reset --discard-wal: $out$err");
		return;
	}
	note("no usable pmwal_ctl ($out$err): the ring is emptied by hand");
	ring_write_u64($ring, 'tail', ring_read_u64($ring, 'head'));
	ring_write_u64($ring, 'state', RING_STATE_EMPTY);
	return;
}

# Commit WAL (rows of 1000 bytes into f) until the insert position is past
# $lsn.
sub wal_past
{
	my ($node, $lsn) = @_;
	for (1 .. 1000)
	{
		return if insert_lsn($node) > $lsn;
		$node->safe_psql('postgres',
			q{INSERT INTO f SELECT g, repeat('w', 1000) FROM generate_series(1, 2000) g});
	}
	die 'wal_past: the insert position does not pass the mark';
}

# A checkpoint whose redo point is below $lsn and whose record is above it:
# the checkpointer is held by gdb at CheckPointBuffers (after the redo point
# is fixed, before the record is written) while WAL is committed past $lsn.
# Issue 21's checkpoint was a timed one; the positions are what matter, and
# a CHECKPOINT requested from a session of its own fixes its redo point the
# same way without waiting out checkpoint_timeout's 30 s minimum.
# Returns pg_control_checkpoint()'s (redo_lsn, checkpoint_lsn) as numbers.
sub checkpoint_across
{
	my ($node, $lsn) = @_;
	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
	$node->safe_psql('postgres', q{INSERT INTO f VALUES (0, 'dirty')});
	my $before = $node->safe_psql('postgres', 'SELECT checkpoint_lsn FROM pg_control_checkpoint()');
	my $g = gdb_break($pid, 'CheckPointBuffers');
	my ($out, $err) = ('', '');
	my $requester = IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', 'CHECKPOINT' ],
		'>', \$out, '2>', \$err);
	gdb_wait_hit($g, 180) or die 'checkpoint_across: the checkpoint never reached CheckPointBuffers';
	wal_past($node, $lsn + 1024 * 1024);
	gdb_release($g);
	$requester->finish or die "checkpoint_across: CHECKPOINT failed: $err";
	$node->poll_query_until('postgres',
		"SELECT checkpoint_lsn <> '$before' FROM pg_control_checkpoint()")
	  or die 'checkpoint_across: the checkpoint does not complete';
	my ($redo, $ckpt) = split /\|/, $node->safe_psql('postgres',
		'SELECT redo_lsn, checkpoint_lsn FROM pg_control_checkpoint()');
	note('checkpoint across ' . lsn_text($lsn) . ": redo $redo, record $ckpt");
	return (lsn_num($redo), lsn_num($ckpt));
}

# A release build of pmwal.so (no PMWAL_TEST: no test pause points) from the
# sources of the build under test, in a directory of its own.
sub release_build_dir
{
	my $top = "$FindBin::RealBin/..";
	$top = $ENV{PMWAL_TEST_LIBDIR}
	  if $ENV{PMWAL_TEST_LIBDIR} && -f "$ENV{PMWAL_TEST_LIBDIR}/src/pmwal.h";
	my $dir = PostgreSQL::Test::Utils::tempdir('release');
	PmwalTest::copy_module_sources($top, $dir);
	my ($out, $err) = ('', '');
	# PMWAL_TEST off even when the make that runs these tests was given
	# PMWAL_TEST=1 (tools/test): make passes its command line on in MAKEFLAGS,
	# and only a command-line assignment overrides that
	delete local $ENV{PMWAL_TEST};
	IPC::Run::run([ 'make', '-s', '-C', $dir, 'PMWAL_TEST=', 'pmwal.so' ], '>', \$out, '2>', \$err)
	  or die "release build failed: $out$err";
	return ($dir, "$out$err");
}

# A file copy of $node's data directory (running or not), as a node of its
# own with the same postgresql.conf (so the same pmwal.path) on its own port.
sub copy_of
{
	my ($node, $name) = @_;
	my $copy = PostgreSQL::Test::Cluster->new($name);
	PostgreSQL::Test::RecursiveCopy::copypath($node->data_dir, $copy->data_dir);
	chmod 0700, $copy->data_dir;
	unlink $copy->data_dir . '/postmaster.pid';
	$copy->append_conf('postgresql.conf', 'port = ' . $copy->port . "\n");
	$copy->{pmwal_ring} = $node->{pmwal_ring};
	return $copy;
}

1;

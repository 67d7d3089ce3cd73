# The ring file itself (issue 14, items 2 and 3).
#
# A. A postmaster killed while it creates a ring, or re-initialises an empty
#    one to a new size, must leave something the next start takes over: the
#    postmaster is held at each store of the header protocol with a test
#    pause point (test_pause.c), killed there with SIGKILL, and the next
#    ordinary start must come up with a valid, usable ring of the new size.
# B. pmwal.path must not make the server write a file that is not its ring:
#    a symbolic link, a file pmwal did not initialise, a ring in a directory
#    others may write to are refused, and the files are left as they were.
#
# Each start attempt rotates the server log first, so an assertion on the
# log can only be satisfied by that attempt.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use Digest::SHA;
use Fcntl qw(O_WRONLY O_CREAT O_EXCL);
use Time::HiRes qw(usleep);
use PmwalTest;
use PmwalTest::OldBuild;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;

# How long a start that should stop at a pause point may take to get there.
my $PAUSE_CAP = 30;

# Files and links this test creates outside the nodes' own rings.
my @cleanup;
END { unlink @cleanup; }

# State letter of a process, '' once it is gone.
sub proc_state
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return '';
	my $stat = <$fh>;
	close $fh;
	return defined $stat && $stat =~ /\)\s+(\S)\s/ ? $1 : '';
}

# What a path is, to compare before and after: a link's target, or a file's
# size and digest, or "missing".
sub fingerprint
{
	my ($path) = @_;
	return "link -> " . readlink($path) if -l $path;
	return 'missing' unless -e $path;
	return sprintf('file, %d bytes, sha256 %s', -s $path,
		Digest::SHA->new(256)->addfile($path, 'b')->hexdigest);
}

# A new file at $path, mode 0600, holding $bytes.
sub make_file
{
	my ($path, $bytes) = @_;
	unlink $path;
	push @cleanup, $path;
	sysopen(my $fh, $path, O_WRONLY | O_CREAT | O_EXCL, 0600)
	  or die "could not create $path: $!";
	binmode $fh;
	print $fh $bytes or die "could not write $path: $!";
	close $fh or die "could not close $path: $!";
	chmod(0600, $path) or die "chmod: $!";
	return;
}

# Start the node in the background (pg_ctl -W) with pmwal.test_pause set to
# $pause, on a fresh log, and wait until the postmaster either logs a pause
# (returns the postmaster's pid, the server is left held there), or the
# server accepts connections without having paused (returns 0, the server
# runs), or it stops or $PAUSE_CAP seconds pass (returns undef).
sub start_paused
{
	my ($node, $pause) = @_;
	$node->rotate_logfile;
	system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
		'-o', "-c pmwal.test_pause=$pause", '-W', 'start');
	my $deadline = Time::HiRes::time() + $PAUSE_CAP;
	while (Time::HiRes::time() < $deadline)
	{
		my $log = -e $node->logfile ? slurp_file($node->logfile) : '';
		my $point = (split /:/, $pause)[0];
		if ($log =~ /pmwal test pause at "\Q$point\E" \(pid (\d+)\)/)
		{
			$node->{_pid} = $1;    # so that the END block kills it on failure
			return $1;
		}
		if ($log =~ /database system is ready to accept connections/)
		{
			$node->_update_pid(1);
			return 0;
		}
		last if $log =~ /FATAL|PANIC/;
		usleep(20_000);
	}
	diag("start with pmwal.test_pause=$pause neither paused nor became ready:\n"
		  . (-e $node->logfile ? slurp_file($node->logfile) : '(no log)'));
	$node->_update_pid(-1);
	$node->stop('immediate', fail_ok => 1) if $node->{_pid};
	return undef;
}

# SIGKILL the postmaster held at a pause point; wait until it is gone (and
# reaped: a zombie's pid in postmaster.pid would stop the next start).
sub kill_postmaster
{
	my ($node, $pid, $case) = @_;
	my ($pm) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	is($pm, $pid, "$case: the process held at the pause is the postmaster");
	kill('KILL', $pid) or die "could not kill $pid: $!";
	my $deadline = time + 60;
	while (proc_state($pid) ne '')
	{
		die "postmaster $pid does not go away" if time > $deadline;
		usleep(10_000);
	}
	$node->{_pid} = undef;
	my $ring = $node->{pmwal_ring};
	note("$case: after the kill, pmwal.path is "
		  . (-e $ring && -s $ring >= 4096
			? sprintf('%d bytes, state word 0x%016X', -s $ring, ring_state($ring))
			: 'missing'));
	return;
}

# The ring at $ring is a valid ring of $size_mb MB, empty or in use.
sub ring_valid
{
	my ($ring, $size_mb, $case) = @_;
	ok(-f $ring && !-l $ring, "$case: ring file exists")
	  or return;
	is(-s $ring, 4096 + $size_mb * $MB, "$case: ring file is header plus $size_mb MB");
	is(ring_field($ring, 'magic'), 'PMWALRNG', "$case: ring has the magic");
	is(ring_field($ring, 'crc'), crc32c(substr(ring_bytes($ring), 0, 56)),
		"$case: ring header CRC is valid");
	is(ring_field($ring, 'capacity'), $size_mb * $MB,
		"$case: ring header says $size_mb MB");
	my $state = ring_state($ring);
	ok($state == RING_STATE_EMPTY || $state == RING_STATE_IN_USE,
		"$case: ring is empty or in use")
	  or diag(sprintf('state word is 0x%016X', $state));
	return;
}

# The extension's SQL: the old build, given with PMWAL_TEST_LIBDIR, does
# not know the newest version (PmwalTest::OldBuild).
my $create_ext = create_pmwal_sql();

# The running node's ring is in use: commits go through it.
sub ring_usable
{
	my ($node, $case) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $create_ext);
	is($ret, 0, "$case: CREATE EXTENSION pmwal") or diag($err);
	my $accelerated = '';
	for (1 .. 300)
	{
		($ret, $accelerated) =
		  $node->psql('postgres', 'SELECT accelerated FROM pmwal_status');
		last if $accelerated eq 't';
		usleep(100_000);
	}
	is($accelerated, 't', "$case: pmwal_status says accelerated");
	return;
}

# After a kill: an ordinary start must come up on a valid ring of $size_mb
# MB that commits go through; the node is stopped again.
sub start_after_kill
{
	my ($node, $size_mb, $case) = @_;
	my $ring = $node->{pmwal_ring};
	if (!start_fine($node, "$case: next start"))
	{
		ok(0, "$case: no ring to check, the server did not start");
		return;
	}
	log_has($node,
		qr/LOG:  pmwal attached ring "\Q$ring\E": $size_mb MB, mode emulated, /,
		"$case: next start attached the ring with $size_mb MB");
	ok(!$node->log_contains(qr/FATAL|PANIC/), "$case: no FATAL at the next start");
	ring_valid($ring, $size_mb, "$case: running");
	ring_usable($node, $case);
	$node->stop;
	ring_valid($ring, $size_mb, "$case: stopped");
	return;
}

###########################################################################
# A. Issue 14 item 2: "A postmaster killed while it initialises or resizes
#    an empty ring leaves a ring that every later start refuses."
###########################################################################
my $node = pmwal_node('killed', size => '8MB', conf => "autovacuum = off\n");
my $ring = $node->{pmwal_ring};

# --- A1. first creation -----------------------------------------------------
# The new code builds the ring in an unnamed file (O_TMPFILE) and links it
# into place only once complete (pause point create_before_link); the only
# stores into the linked ring's header in place are the binding's (binding.c:
# the generation word, then the owner block), on a complete, empty ring.
# The old code created an empty file, sized it and stored into its header in
# place (header_store:N); a kill after its first store (REINIT into the
# all-zero header) left a file every later start refused as "not a pmwal
# ring".
{
	my $case = 'first creation, kill before the link';
	unlink $ring;
	my $pm = start_paused($node, 'create_before_link');
	ok($pm, "$case: the postmaster stops at create_before_link");
	if ($pm)
	{
		kill_postmaster($node, $pm, $case);
		ok(!-e $ring, "$case: nothing is left at pmwal.path");
		start_after_kill($node, 8, $case);
	}
	elsif (defined $pm)
	{
		$node->stop;
	}

	# Every store into the header in place: none at first creation.
	my $stores = 0;
	for my $n (1 .. 12)
	{
		$case = "first creation, kill at header store $n";
		$node->stop;
		unlink $ring;
		$pm = start_paused($node, "header_store:$n");
		ok(defined $pm, "$case: the start pauses or comes up within $PAUSE_CAP s")
		  or last;
		if (!$pm)
		{
			# no such store: this start created the ring without it
			ok(-e $ring, "$case: the start that did not pause created the ring");
			ring_usable($node, "$case (no pause)");
			$node->stop;
			ring_valid($ring, 8, "$case (no pause)");
			last;
		}
		$stores++;
		kill_postmaster($node, $pm, $case);
		start_after_kill($node, 8, $case);
	}
	is($stores, 2,
		'first creation: the ring is built whole, then linked; the only stores in place are the binding\'s (generation, owner)');
}

# --- A1b. what a kill left in a ring file created by pmwal 1.0 ---------------
# pmwal 1.0 stored REINIT into the all-zero header of the file it had just
# created before anything else; a postmaster killed right after (at its
# second header store) left this file, which every later start of 1.0
# refused as "not a pmwal ring".  It must be initialised again.  The state
# word of that header (format 1) is at byte 256 (in format 2 the timeline
# word is there).
{
	my $case = 'all-zero header with REINIT';
	$node->stop;
	unlink $ring;
	no warnings 'portable';
	make_file($ring, ("\0" x 256) . pack('Q<', RING_STATE_REINIT) . ("\0" x (4096 - 264 + 8 * $MB)));
	start_after_kill($node, 8, $case);
	log_has(
		$node,
		qr/LOG:  pmwal initialising ring "\Q$ring\E" with 8 MB\n.*DETAIL:  An initialisation of the empty ring was interrupted\.\n/,
		"$case: the interrupted initialisation is logged and done again");
}

# --- A2. resize of an empty ring --------------------------------------------
# pmwal.size changed between two clean starts, 16 MB -> 8 MB and 8 MB ->
# 16 MB.  The new code stores REINIT first, then resizes the file
# (header_resize: after REINIT, before ftruncate), then the header stores
# static, tail, head, timeline, EMPTY, and then the binding's generation and
# owner block: eight stores.  The old code
# resized before its first store: a kill after shrinking the file left a
# header describing more than the file holds ("has an impossible size").
for my $sizes ([ 16, 8 ], [ 8, 16 ])
{
	my ($from, $to) = @$sizes;

	# a fresh, empty ring of $from MB, made by a clean start and stop
	my $fresh = sub {
		my ($case) = @_;
		$node->stop;
		unlink $ring;
		set_conf($node, 'pmwal.size' => "${from}MB");
		$node->rotate_logfile;
		$node->start;
		$node->stop;
		is(ring_field($ring, 'capacity'), $from * $MB, "$case: ring prepared with $from MB");
		is(ring_state($ring), RING_STATE_EMPTY, "$case: prepared ring is empty");
		set_conf($node, 'pmwal.size' => "${to}MB");
	};

	my $case = "resize $from -> $to MB, kill at the resize";
	$fresh->($case);
	my $pm = start_paused($node, 'header_resize');
	ok($pm, "$case: the postmaster stops at header_resize");
	if ($pm)
	{
		kill_postmaster($node, $pm, $case);
		start_after_kill($node, $to, $case);
	}
	elsif (defined $pm)
	{
		$node->stop;
	}

	my $stores = 0;
	for my $n (1 .. 12)
	{
		$case = "resize $from -> $to MB, kill at header store $n";
		$fresh->($case);
		$pm = start_paused($node, "header_store:$n");
		ok(defined $pm, "$case: the start pauses or comes up within $PAUSE_CAP s")
		  or last;
		if (!$pm)
		{
			# past the last store: this start resized the ring
			ring_usable($node, "$case (no pause)");
			$node->stop;
			ring_valid($ring, $to, "$case (no pause)");
			last;
		}
		$stores++;
		kill_postmaster($node, $pm, $case);
		start_after_kill($node, $to, $case);
	}
	is($stores, 8,
		"resize $from -> $to MB: killed at each of the 8 header stores (REINIT, static, tail, head, timeline, EMPTY, generation, owner)");
}
$node->stop;

###########################################################################
# B. Issue 14 item 3: "pmwal.path follows another user's symlink and
#    overwrites the server user's files."  The test cannot make files of
#    another user, so the victims are the server's own files.
###########################################################################
my $rnode = pmwal_node('paths', conf => "autovacuum = off\n");
my $shm_ring = $rnode->{pmwal_ring};

# --- B5. /dev/shm itself (sticky, world-writable) keeps working -------------
like($shm_ring, qr{^/dev/shm/}, 'the default test ring is in /dev/shm');
ok(((stat '/dev/shm')[2] & 01002) == 01002, '/dev/shm is sticky and writable by others');
start_fine($rnode, '/dev/shm');
ring_usable($rnode, '/dev/shm');
# an empty catalog relation of this cluster, the victim of B1
my $victim = $rnode->data_dir . '/'
  . $rnode->safe_psql('postgres', q{SELECT pg_relation_filepath('pg_default_acl')});
$rnode->stop;
ring_valid($shm_ring, 8, '/dev/shm');

# --- B1. pmwal.path is a symbolic link to a file of the server's user -------
# (the link stands for one another user made in a sticky directory; the
# target, an empty catalog relation, for any file of the server's user)
{
	my $case = 'symlink to a catalog file';
	is(-s $victim, 0, "$case: $victim is an empty file");
	is((stat $victim)[2] & 07777, 0600, "$case: $victim has mode 0600");
	my $link = "/dev/shm/pmwal_tap_link_$$.ring";
	unlink $link;
	push @cleanup, $link;
	symlink($victim, $link) or die "symlink: $!";
	set_conf($rnode, 'pmwal.path' => $link);
	my ($before_link, $before_victim) = (fingerprint($link), fingerprint($victim));
	start_refused($rnode, $case);
	log_has(
		$rnode,
		qr/FATAL:  pmwal\.path "\Q$link\E" is a symbolic link\n.*DETAIL:  pmwal does not follow a symbolic link to its ring: whoever can change the link could make the server overwrite another file\.\n.*HINT:  Set pmwal\.path to the ring file itself\.\n/,
		"$case: FATAL with DETAIL and HINT");
	is(fingerprint($victim), $before_victim, "$case: the target is unchanged");
	is(-s $victim, 0, "$case: the target is still empty");
	is(fingerprint($link), $before_link, "$case: the link is unchanged");
}

# --- B2. pmwal.path is a symbolic link to a missing file ---------------------
{
	my $case = 'symlink to a missing file';
	my $missing = "/dev/shm/pmwal_tap_missing_$$.ring";
	my $link = "/dev/shm/pmwal_tap_dangling_$$.ring";
	unlink $missing, $link;
	push @cleanup, $missing, $link;
	symlink($missing, $link) or die "symlink: $!";
	set_conf($rnode, 'pmwal.path' => $link);
	my $before_link = fingerprint($link);
	start_refused($rnode, $case);
	log_has(
		$rnode,
		qr/FATAL:  pmwal\.path "\Q$link\E" is a symbolic link\n.*DETAIL:  pmwal does not follow a symbolic link to its ring: whoever can change the link could make the server overwrite another file\.\n.*HINT:  Set pmwal\.path to the ring file itself\.\n/,
		"$case: FATAL with DETAIL and HINT");
	ok(!-e $missing && !-l $missing, "$case: nothing created at the link's target");
	is(fingerprint($link), $before_link, "$case: the link is unchanged");
}

# --- B3. a file pmwal did not initialise ------------------------------------
my $not_ring_hint =
  q{pmwal only uses a ring it created itself and does not overwrite another file; correct pmwal.path, remove the file, or initialise a device with "pmwal_ctl init".};
{
	my $case = 'empty file';
	my $file = "/dev/shm/pmwal_tap_empty_$$.ring";
	make_file($file, '');
	set_conf($rnode, 'pmwal.path' => $file);
	my $before = fingerprint($file);
	start_refused($rnode, $case);
	is(fingerprint($file), $before, "$case: file unchanged");
	is(-s $file, 0, "$case: file still empty");
	ok($rnode->log_contains(qr/FATAL:  [^\n]*"\Q$file\E"/),
		"$case: FATAL names the file");
	log_has(
		$rnode,
		qr/FATAL:  file "\Q$file\E" is not a pmwal ring\n.*DETAIL:  The file is 0 bytes, smaller than the 4096-byte ring header\.\n.*HINT:  \Q$not_ring_hint\E\n/,
		"$case: FATAL \"is not a pmwal ring\" with the pmwal_ctl init HINT");

	$case = 'file with an all-zero header';
	$file = "/dev/shm/pmwal_tap_zero_$$.ring";
	make_file($file, "\0" x (4096 + 8 * $MB));
	set_conf($rnode, 'pmwal.path' => $file);
	$before = fingerprint($file);
	start_refused($rnode, $case);
	log_has(
		$rnode,
		qr/FATAL:  file "\Q$file\E" is not a pmwal ring\n.*DETAIL:  Its header is all zeros\.\n.*HINT:  \Q$not_ring_hint\E\n/,
		"$case: FATAL with DETAIL and the pmwal_ctl init HINT");
	is(fingerprint($file), $before, "$case: file unchanged");
}

# --- B4. the ring's directory ------------------------------------------------
{
	for my $mode (0777, 0770)
	{
		my $octal = sprintf('%04o', $mode);
		my $case = "directory $octal";
		my $dir = PostgreSQL::Test::Utils::tempdir;
		chmod($mode, $dir) or die "chmod: $!";
		is((stat $dir)[2] & 07777, $mode, "$case: directory has mode $octal");
		set_conf($rnode, 'pmwal.path' => "$dir/pmwal.ring");
		start_refused($rnode, $case);
		log_has(
			$rnode,
			qr/FATAL:  directory of pmwal ring "\Q$dir\E\/pmwal\.ring" is writable by other users\n.*DETAIL:  "\Q$dir\E" has permissions $octal and is not sticky: another user could replace the ring with a file of theirs\.\n.*HINT:  Put the ring in a directory only the server's user can write to \(chmod go-w\), or in a sticky one such as \/dev\/shm\.\n/,
			"$case: FATAL with DETAIL and HINT");
		opendir(my $dh, $dir) or die "opendir: $!";
		is_deeply([ grep { !/^\.\.?$/ } readdir $dh ], [], "$case: nothing created in it");
		closedir $dh;
	}

	# a sticky one is fine: others may not replace the server's ring there
	my $case = 'sticky directory 1777';
	my $dir = PostgreSQL::Test::Utils::tempdir;
	chmod(01777, $dir) or die "chmod: $!";
	is((stat $dir)[2] & 07777, 01777, "$case: directory has mode 1777");
	set_conf($rnode, 'pmwal.path' => "$dir/pmwal.ring");
	if (start_fine($rnode, "$case, creating the ring"))
	{
		ring_usable($rnode, $case);
		$rnode->stop;
	}
	ok(-f "$dir/pmwal.ring" && !-l "$dir/pmwal.ring", "$case: ring created");
	is((stat "$dir/pmwal.ring")[4], $>, "$case: ring owned by the server's user");
	if (start_fine($rnode, "$case, with the existing ring"))
	{
		$rnode->stop;
	}
	ring_valid("$dir/pmwal.ring", 8, $case);
}

done_testing();

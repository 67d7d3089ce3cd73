# Issue 21: what the binding must not refuse.  The ring is identified by its
# ring_id, not its path; pmwal.path may change freely after a clean
# shutdown; pmwal may be removed after a clean shutdown.
#	L1. the ring file moved to another path while the cluster was stopped
#	    cleanly: it starts, and the binding follows the ring to its path
#	L2. the ring file moved after a power cut: the start restores it from
#	    the new path, every acknowledged commit is there
#	L3. an immediate stop (the last process syncs pg_wal and empties the
#	    ring), then a new pmwal.path: it starts, nothing lost
#	L4. pmwal.path changed to a new ring after a clean shutdown: the start
#	    rebinds the data directory to the new ring -- and after a power cut
#	    before the flusher's first pass, that ring's WAL is restored, while
#	    a start on the previous ring is refused
#	L5. pmwal.path = '' after a clean shutdown: it starts, unbound; then a
#	    ring again
#	L6. shared_preload_libraries = '' after a clean shutdown, also with an
#	    immediate stop in between: pmwal back on its ring starts
#	L7. pmwal.size changed after a clean shutdown: the empty ring is
#	    re-initialised and keeps its ring_id
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PmwalTest::Binding;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $t0 = Time::HiRes::time();
my @cleanup;
END { unlink @cleanup; }

my $node = binding_node('c');
my $R = $node->{pmwal_ring};
my ($R3, $R4, $R5, $R6) = map { "/dev/shm/pmwal_tap_c${_}_$$.ring" } 3 .. 6;
push @cleanup, $R3, $R4, $R5, $R6;
my $base = 0;

sub ring_id { return unpack('H*', ring_field($_[0], 'ring_id')); }

# Start; must come up.  Returns the log of the start.
sub start_ok
{
	my ($case) = @_;
	my ($up, $log) = try_start($node);
	ok($up, "$case: the server starts") or diag($log);
	BAIL_OUT("$case: the server does not start") unless $up || $case =~ /^L4/;
	return $log;
}

# The binding names $ring (path and ring_id).
sub bound_to
{
	my ($ring, $case) = @_;
	return if testing_old_build();
	my $b = binding_current($node);
	is($b && $b->{path}, $ring, "$case: the binding names the ring's path")
	  or diag(explain(binding_file($node)));
	is($b && $b->{ring_id}, ring_id($ring), "$case: the binding names the ring's ring_id");
	return;
}

sub f_rows { return $node->safe_psql('postgres', 'SELECT count(*) FROM f'); }

# --- L1 -------------------------------------------------------------------
start_ok('L1 before');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (1, 'L1')});
$node->stop;
my $id = ring_id($R);
my $gen = ring_gen($R);
rename $R, $R3 or die "rename: $!";
set_conf($node, 'pmwal.path' => $R3);
my $log = start_ok('L1 ring moved after a clean stop');
like($log, qr/pmwal bound ring "\Q$R3\E" \(ring $id\) to this data directory/,
	'L1: the moved ring is bound at its new path') unless testing_old_build();
bound_to($R3, 'L1');
cmp_ok(ring_gen($R3), '>', $gen, 'L1: the ring\'s generation moved on') unless testing_old_build();
is(f_rows(), 1, 'L1: the data is there');
$node->stop;
ok(!-e $R, 'L1: nothing was created at the old path');

# --- L2 -------------------------------------------------------------------
my ($load) = ring_only_cut($node, tag => 'l2', base => $base);
$base += 100_000_000;
ok(ring_holds($R3), 'L2: the ring holds WAL after the cut');
rename $R3, $R4 or die "rename: $!";
set_conf($node, 'pmwal.path' => $R4);
$log = start_ok('L2 ring moved after a power cut');
like($log, qr/pmwal restored WAL/, 'L2: the ring was restored from its new path');
my ($n, $missing) = acked_missing($node, $load);
is($missing, 0, "L2: all $n acknowledged commits are present");
case_line("L2 ring moved after a power cut: $missing of $n missing");
bound_to($R4, 'L2');
$node->stop;

# --- L3 -------------------------------------------------------------------
start_ok('L3 before');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (3, 'L3')});
my $off = -s $node->logfile;
$node->stop('immediate');
like(slurp_file($node->logfile, $off),
	qr/pmwal synced pg_wal after the last server process exited; the ring is empty/,
	'L3: the last process synced pg_wal and emptied the ring') unless testing_old_build();
ok(!ring_holds($R4), 'L3: the ring holds no WAL after the immediate stop');
set_conf($node, 'pmwal.path' => $R5);
start_ok('L3 new pmwal.path after an immediate stop');
is($node->safe_psql('postgres', 'SELECT count(*) FROM f WHERE id = 3'), 1, 'L3: the last commit is there');
bound_to($R5, 'L3');
$node->stop;

# --- L4 -------------------------------------------------------------------
# (the build before the binding anchors its ring in the flusher, which is
# held here: it never accelerates; L4 is run on the binding build only)
SKIP:
{
skip 'L4 holds the flusher, which the old build needs to accelerate', 1 if testing_old_build();
# the ring bound at a generation of at least 5 (flusher passes), so that the
# binding file's slots hold generations above a new ring's first one
start_ok('L4 before');
for (1 .. 600)
{
	last if testing_old_build() || ring_gen($R5) >= 5;
	$node->safe_psql('postgres', q{INSERT INTO f VALUES (4, 'L4')});
	Time::HiRes::sleep(0.1);
}
cmp_ok(ring_gen($R5), '>=', 5, 'L4: the ring\'s generation is at least 5') unless testing_old_build();
$node->stop;
note('L4: binding file before the change: ', explain(binding_file($node)));
# a new ring; the flusher held at its first loop, before any pass
set_conf($node, 'pmwal.path' => $R6, 'pmwal.test_pause' => 'flusher_loop');
($load) = ring_only_cut($node, tag => 'l4', base => $base, flusher_runs => 1, commits => 1000,
	before_load => sub { bound_to($R6, 'L4 right after the rebinding start') });
set_conf($node, 'pmwal.test_pause' => '');
note('L4: binding file after the cut: ', explain(binding_file($node)));
ok(ring_holds($R6), 'L4: the new ring holds WAL after the cut');
scene_save($node, 'l4', $R5, $R6);
# the previous ring must not be accepted: the new one holds the WAL
set_conf($node, 'pmwal.path' => $R5);
refused_without_writing($node, 'L4 the previous ring after the cut', files => [ $R5, $R6 ],
	fatal => qr/pmwal cannot start: ring "\Q$R6\E" holds this cluster's acknowledged WAL\n/,
	on_started => sub {
		my ($n, $missing, $how) = acked_missing($node, $load);
		case_line("L4 the previous ring after the cut: the server started; $missing of $n acknowledged commits missing (counted by $how)");
	});
scene_restore($node, 'l4') if delete $node->{started_unexpectedly};
set_conf($node, 'pmwal.path' => $R6);
$log = start_ok('L4 the new ring after the cut');
if ($node->{_pid})
{
	like($log, qr/pmwal restored WAL/, 'L4: the new ring was restored');
	($n, $missing) = acked_missing($node, $load);
	is($missing, 0, "L4: all $n acknowledged commits are present");
	case_line("L4 the new ring after the cut: $missing of $n missing");
	$node->stop;
}
else
{
	case_line('L4 the new ring after the cut: refused: ' . (($log =~ /(FATAL:  .*)/)[0] // '?'));
	# put the data directory back on its feet for the rest: the new ring's
	# WAL given up (its commits are lost) and the binding with it
	scene_restore($node, 'l4');
	ring_discard($R6);
	unbind($node, force => 1);
	$node->start;
	$node->stop;
}
$base += 100_000_000;
}

# --- L5 -------------------------------------------------------------------
set_conf($node, 'pmwal.path' => '');
$log = start_ok("L5 pmwal.path = '' after a clean stop");
like($log, qr/pmwal is inactive because pmwal\.path is not set; the data directory is no longer bound to a ring/,
	'L5: the binding is given up, and the log says so') unless testing_old_build();
ok(!-e binding_path($node), 'L5: no binding file');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (5, 'L5')});
$node->stop;
set_conf($node, 'pmwal.path' => $R6);
start_ok('L5 back on a ring');
bound_to($R6, 'L5');
is($node->safe_psql('postgres', 'SELECT count(*) FROM f WHERE id = 5'), 1, 'L5: the commit made without a ring is there');
$node->stop;

# --- L6 -------------------------------------------------------------------
set_conf($node, shared_preload_libraries => '');
start_ok('L6 pmwal not loaded after a clean stop');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (6, 'L6')});
$node->stop('immediate');
start_ok('L6 pmwal not loaded, after an immediate stop');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (61, 'L6')});
$node->stop('immediate');
set_conf($node, shared_preload_libraries => 'pmwal');
$log = start_ok('L6 pmwal back on its ring, after an immediate stop without it');
unlike($log, qr/pmwal restored WAL/, 'L6: nothing restored');
is($node->safe_psql('postgres', 'SELECT count(*) FROM f WHERE id IN (6, 61)'), 2,
	'L6: the commits made without pmwal are there');
$node->stop;

# --- L7 -------------------------------------------------------------------
$id = ring_id($R6);
set_conf($node, 'pmwal.size' => '32MB');
$log = start_ok('L7 pmwal.size changed after a clean stop');
like($log, qr/pmwal re-initialising empty ring "\Q$R6\E" from 64 MB to 32 MB/, 'L7: the ring is re-initialised');
is(ring_id($R6), $id, 'L7: the ring keeps its ring_id') unless testing_old_build();
bound_to($R6, 'L7');
$node->stop;

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();

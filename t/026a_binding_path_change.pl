# Issue 21, cases 1 and 2: a configuration change after a power cut must not
# lose the acknowledged commits only the ring holds, and going back to an
# abandoned ring must not write its dead history over pg_wal.
#
# The data directory's binding file (pg_wal/pmwal.binding, binding.c) names
# the ring that may hold its acknowledged WAL.  After a crash:
#	1a. pmwal.path names a new file          -> refused, nothing created
#	1b. pmwal.path = ''                      -> refused
#	1c. the bound ring is missing at its path -> refused, no ring created
#	1d. a new path, and the bound ring is missing -> refused
#	1e. the binding file is damaged          -> refused
#	1f. control: pmwal.path as before        -> every acknowledged commit
#	1g. negative control: the operator gives the binding up (pmwal_ctl
#	    unbind --force) and starts on a new ring -> starts, loses commits
# Every refusal leaves pg_wal (the binding file included) and the rings
# byte for byte as they were, says why (FATAL), names both sides (DETAIL)
# and gives the safe way (HINT).
#	2a. after 1g's way out the cluster writes WAL past the old ring's head
#	    and stops cleanly; pmwal.path set back to the old ring: refused,
#	    pg_wal unchanged; back on the new ring it starts.
#	2b. after 1g's way out, a checkpoint begins below the old ring's
#	    head and ends above it, then an immediate stop; back to the old
#	    ring: refused, pg_wal unchanged; back on the new ring every later
#	    start works.  (With pmwal not loaded in between: t/026b.)
#
# On the build before the binding (PMWAL_TEST_LIBDIR=/work/old, see
# t/PmwalTest/OldBuild.pm) each case prints what it did; every refusal check
# fails there.  Each case that must be refused starts from the same saved
# scene (the data directory and the ring right after the cut), so that one
# case's damage on the old build does not decide the next.
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

my $node = binding_node('a');
my $R = $node->{pmwal_ring};
my $R2 = "/dev/shm/pmwal_tap_a_new_$$.ring";
my $away = "$R.away";
push @cleanup, $R2, $away;
my $id = qr/[0-9a-f]{32}/;

# Put the scene back if the old build started (and so changed) it.
sub scene_back
{
	my ($scene) = @_;
	return unless delete $node->{started_unexpectedly};
	scene_restore($node, $scene);
	unlink $R2;
}

# ---------------------------------------------------------------------------
# Case 1: WAL acknowledged only in the ring, then a power cut.
# ---------------------------------------------------------------------------
my ($load) = ring_only_cut($node, tag => 'a1');
cmp_ok($load->{total}, '>=', 2000, '1: at least 2000 commits acknowledged');
ok(ring_holds($R), '1: the ring holds WAL after the cut');
scene_save($node, 'cut1', $R);

my $count_lost = sub {
	my ($case) = @_;
	return sub {
		my ($n, $missing, $how) = acked_missing($node, $load);
		case_line("$case: the server started; $missing of $n acknowledged commits missing (counted by $how)");
	};
};

# 1a. a new file
set_conf($node, 'pmwal.path' => $R2);
refused_without_writing($node, '1a new pmwal.path', files => [ $R, $R2 ],
	fatal => qr/pmwal cannot start: ring "\Q$R\E" holds this cluster's acknowledged WAL\n/,
	detail => qr/ring $id \(generation \d+\) holds WAL from .* pmwal\.path now names "\Q$R2\E"/,
	hint => qr/Set pmwal\.path = '\Q$R\E' for one start/,
	on_started => $count_lost->('1a new pmwal.path'));
ok(!-e $R2, '1a: no ring created at the new path');
scene_back('cut1');

# 1b. no ring at all
set_conf($node, 'pmwal.path' => '');
refused_without_writing($node, "1b pmwal.path = ''", files => [$R],
	fatal => qr/pmwal cannot start: ring "\Q$R\E" holds this cluster's acknowledged WAL\n/,
	detail => qr/ring $id \(generation \d+\) holds WAL from .* pmwal\.path is empty\./,
	hint => qr/Set pmwal\.path = '\Q$R\E' for one start/,
	on_started => $count_lost->("1b pmwal.path = ''"));
scene_back('cut1');

# 1c. the bound ring is missing where it was (a reboot emptied /dev/shm, its
# directory's owner removed it: case 4)
rename $R, $away or die "rename: $!";
set_conf($node, 'pmwal.path' => $R);
refused_without_writing($node, '1c bound ring missing', files => [ $R, $away ],
	fatal => qr/pmwal ring "\Q$R\E" is missing, and it may hold this cluster's acknowledged WAL\n/,
	detail => qr/ring $id at that path \(generation \d+\)/,
	hint => qr/Put the ring back at "\Q$R\E".*pmwal_ctl unbind -D/,
	on_started => $count_lost->('1c bound ring missing'));
ok(!-e $R, '1c: no ring created in its place');
scene_back('cut1');

# 1d. a new path, and the bound ring is missing
rename $R, $away or die "rename: $!" if -e $R;
set_conf($node, 'pmwal.path' => $R2);
refused_without_writing($node, '1d new path, bound ring missing', files => [ $R, $R2, $away ],
	fatal => qr/pmwal cannot start: the ring that may hold this cluster's acknowledged WAL cannot be read\n/,
	detail => qr/ring "\Q$R\E" \(ring $id, generation \d+\), which cannot be opened: .*pmwal\.path now names "\Q$R2\E"/,
	hint => qr/Put that ring back at "\Q$R\E".*pmwal_ctl unbind -D/,
	on_started => $count_lost->('1d new path, bound ring missing'));
rename $away, $R or die "rename: $!" if -e $away;
scene_back('cut1');

# 1e. the binding file is damaged (both slots)
SKIP:
{
	skip 'the old build has no binding file', 6 if testing_old_build();
	my $b = binding_path($node);
	my $saved = slurp_file($b);
	my $bad = $saved;
	substr($bad, 100, 1) ^= "\x01";
	substr($bad, 2048 + 100, 1) ^= "\x01";
	open my $fh, '>:raw', $b or die;
	print $fh $bad;
	close $fh;
	set_conf($node, 'pmwal.path' => $R);
	# (the ring holds WAL: the refusal is binding.c's "holds WAL of another
	# data directory", whose DETAIL says the binding file is damaged)
	refused_without_writing($node, '1e damaged binding file', files => [$R],
		fatal => qr/pmwal ring "\Q$R\E" holds WAL|pmwal's binding file "pg_wal\/pmwal\.binding" is damaged/,
		detail => qr/binding file is damaged|binding file/,
		hint => qr/pmwal_ctl/);
	open $fh, '>:raw', $b or die;
	print $fh $saved;
	close $fh;
}

# 1f. control: the same path as before the cut
set_conf($node, 'pmwal.path' => $R);
my ($up, $log) = try_start($node);
ok($up, '1f same pmwal.path: the server starts');
like($log, qr/pmwal restored WAL [0-9A-F\/]+ to [0-9A-F\/]+ from the ring into pg_wal/,
	'1f: the ring was restored into pg_wal');
my ($n, $missing) = acked_check($node, $load);
is($missing, 0, "1f: all $n acknowledged commits are present");
case_line("1f same pmwal.path (control): $missing of $n missing");
$node->stop;

# ---------------------------------------------------------------------------
# 1g. The negative control, and the way out that leaves an abandoned ring
# holding WAL (the scene of case 2).
# ---------------------------------------------------------------------------
($load) = ring_only_cut($node, tag => 'a2', base => 500_000_000);
ok(ring_holds($R), '1g: the ring holds WAL after the second cut');
my $H = ring_head($R);
scene_save($node, 'cut2', $R);

# the operator accepts the loss: unbind (the ring is there and holds WAL:
# --force) and a new ring
my $way_out = sub {
	my ($case) = @_;
	unlink $R2;
	unbind($node, force => 1);
	set_conf($node, 'pmwal.path' => $R2);
	my ($up, $log) = try_start($node);
	ok($up, "$case: after unbind, the start on a new ring goes on") or diag($log);
	my ($n, $missing, $how) = acked_missing($node, $load);
	case_line("$case: after unbind, a new ring: $missing of $n acknowledged commits missing (counted by $how)");
	return ($n, $missing);
};
($n, $missing) = $way_out->('1g negative control');
cmp_ok($missing, '>', 0, "1g: without the ring, acknowledged commits are lost ($missing of $n)");
ok(ring_holds($R), '1g: the abandoned ring still holds its WAL');
my $binding = binding_current($node);
is($binding && $binding->{path}, $R2, '1g: the data directory is bound to the new ring')
  unless testing_old_build();

# 2a. new WAL past the old ring's head, a clean stop, back to the old ring
wal_past($node, $H + 1024 * 1024);
$node->safe_psql('postgres', q{INSERT INTO f VALUES (-1, 'after the way out')});
$node->stop;
set_conf($node, 'pmwal.path' => $R);
refused_without_writing($node, '2a back to the abandoned ring', files => [ $R, $R2 ],
	fatal => qr/pmwal ring "\Q$R\E" holds WAL/,
	detail => qr/\Q$R2\E/,
	hint => qr/pmwal|pmwal\.path/,
	on_started => sub { case_line('2a back to the abandoned ring: the server started on it') });
set_conf($node, 'pmwal.path' => $R2);
($up, $log) = try_start($node);
ok($up, '2a: back on the new ring the server starts') or diag($log);
is($up && $node->safe_psql('postgres', q{SELECT count(*) FROM f WHERE id = -1}), 1,
	'2a: the commit made after the way out is there');
$node->stop if $up;

# 2b. a checkpoint across the old ring's head, an immediate stop, back to the
# old ring
scene_restore($node, 'cut2');
$way_out->('2b way out');
my $at = insert_lsn($node);
cmp_ok($at, '<', $H, '2b: the new history is still below the old ring\'s head');
my ($redo, $ckpt) = checkpoint_across($node, $H);
ok($redo < $H && $ckpt > $H, '2b: the checkpoint begins below the old ring\'s head and ends above it');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (-2, 'after the checkpoint')});
$node->stop('immediate');
set_conf($node, 'pmwal.path' => $R);
refused_without_writing($node, '2b back to the abandoned ring after the checkpoint',
	files => [ $R, $R2 ],
	fatal => qr/pmwal ring "\Q$R\E" holds WAL/,
	detail => qr/\Q$R2\E/,
	hint => qr/pmwal|pmwal\.path/,
	on_started => sub { case_line('2b: the server started on the abandoned ring') });
# the safe way: the ring the data directory is bound to; every later start
set_conf($node, 'pmwal.path' => $R2) unless testing_old_build();
for my $try (1 .. 3)
{
	($up, $log) = try_start($node);
	ok($up, "2b: start $try after the refusal works") or diag($log);
	last unless $up;
	is($node->safe_psql('postgres', q{SELECT count(*) FROM f WHERE id = -2}), 1,
		"2b: start $try: the commit after the checkpoint is there");
	$try == 2 ? $node->stop('immediate') : $node->stop;
}
case_line('2b: ' . ($up ? 'later starts work' : 'a later start fails: ' . (($log =~ /((?:PANIC|FATAL):  .*)/)[0] // '?')));

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();

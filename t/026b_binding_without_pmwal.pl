# Issue 21, case 2 with pmwal not loaded in between: after a power cut the
# cluster is started once with shared_preload_libraries = '' (pmwal cannot
# refuse a start it is not loaded in: PostgreSQL recovers without the ring
# and writes a new history), and then with pmwal again, on the ring that
# still holds the old history.  That start must not write a byte of it:
#	2c. new WAL past the old ring's head, a clean stop
#	    -> refused: a cleanly shut down cluster owns no ring WAL
#	2d. a checkpoint that begins below the old ring's head and ends
#	    above it, then an immediate stop (pg_control: in production)
#	    -> refused by the restore's proof of history (restore.c)
#	2e. new WAL past the old ring's head and no checkpoint but the
#	    end-of-recovery one, then an immediate stop -> refused
# pg_wal and the ring stay byte for byte as they were; once the operator
# discards the dead ring (pmwal_ctl reset --discard-wal, what the hint
# offers), every later start works and has the new history.
#
# The build before the binding (PMWAL_TEST_LIBDIR=/work/old,
# t/PmwalTest/OldBuild.pm) restored the old ring over the new history: 2d
# then PANICked ("could not find redo location") at every later start.
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
my $node = binding_node('b');
my $R = $node->{pmwal_ring};

my ($load) = ring_only_cut($node, tag => 'b');
ok(ring_holds($R), 'the ring holds WAL after the cut');
my $H = ring_head($R);
scene_save($node, 'cut', $R);

# Start without pmwal after the cut: PostgreSQL's own crash recovery, which
# cannot have what only the ring holds.
sub start_without_pmwal
{
	my ($case) = @_;
	set_conf($node, shared_preload_libraries => '');
	$node->start;
	my ($n, $missing, $how) = acked_missing($node, $load);
	case_line("$case: pmwal not loaded: PostgreSQL recovered without the ring, $missing of $n acknowledged commits missing (counted by $how)");
	set_conf($node, shared_preload_libraries => 'pmwal');
	return;
}

# The operator discards the dead ring; then every later start works, with
# the row $marker of the new history.
sub later_starts
{
	my ($case, $marker) = @_;
	ring_discard($R) unless testing_old_build();
	my ($up, $log);
	for my $try (1 .. 3)
	{
		($up, $log) = try_start($node);
		ok($up, "$case: start $try after the refusal works") or diag($log);
		last unless $up;
		is($node->safe_psql('postgres', "SELECT count(*) FROM f WHERE id = $marker"), 1,
			"$case: start $try: the new history is there");
		$try == 2 ? $node->stop('immediate') : $node->stop;
	}
	case_line("$case: " . ($up ? 'later starts work' : 'a later start fails: ' . (($log =~ /((?:PANIC|FATAL):  .*)/)[0] // '?')));
	return;
}

my $said = sub {
	my ($case) = @_;
	return sub { case_line("$case: the server started on the dead ring: "
		  . ($node->log_contains(qr/pmwal restored WAL/) ? 'it restored the ring over the new history' : 'nothing restored')) };
};

# 2c. clean stop
start_without_pmwal('2c');
wal_past($node, $H + 1024 * 1024);
$node->safe_psql('postgres', q{INSERT INTO f VALUES (-1, 'new history')});
$node->stop;
refused_without_writing($node, '2c clean stop without pmwal', files => [$R],
	fatal => qr/pmwal ring "\Q$R\E" holds WAL, but the cluster was shut down cleanly since; nothing was restored\n/,
	detail => qr/The ring holds WAL from [0-9A-F\/]+ to [0-9A-F\/]+, and pg_control says the cluster shut down cleanly at [0-9A-F\/]+/,
	hint => qr/pmwal_ctl dump.*pmwal_ctl reset --discard-wal/,
	on_started => $said->('2c'));
later_starts('2c', -1);

# 2d. a checkpoint across the old head, an immediate stop
scene_restore($node, 'cut');
start_without_pmwal('2d');
cmp_ok(insert_lsn($node), '<', $H, '2d: the new history is still below the old ring\'s head');
my ($redo, $ckpt) = checkpoint_across($node, $H);
ok($redo < $H && $ckpt > $H, '2d: the checkpoint begins below the old ring\'s head and ends above it');
$node->safe_psql('postgres', q{INSERT INTO f VALUES (-2, 'new history')});
$node->stop('immediate');
is(controldata($node)->{'Database cluster state'}, 'in production',
	'2d: pg_control says the cluster did not shut down');
refused_without_writing($node, '2d checkpoint across the head, immediate stop', files => [$R],
	fatal => qr/pmwal ring "\Q$R\E" .*; nothing was restored\n/,
	detail => qr/ring holds WAL from [0-9A-F\/]+ to [0-9A-F\/]+.*checkpoint at [0-9A-F\/]+/,
	hint => qr/pmwal_ctl/,
	on_started => $said->('2d'));
later_starts('2d', -2);

# 2e. no checkpoint after the end-of-recovery one, an immediate stop
scene_restore($node, 'cut');
start_without_pmwal('2e');
wal_past($node, $H + 1024 * 1024);
$node->safe_psql('postgres', q{INSERT INTO f VALUES (-3, 'new history')});
$node->stop('immediate');
refused_without_writing($node, '2e no checkpoint, immediate stop', files => [$R],
	fatal => qr/pmwal ring "\Q$R\E" .*; nothing was restored\n/,
	hint => qr/pmwal_ctl/,
	on_started => $said->('2e'));
later_starts('2e', -3);

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();

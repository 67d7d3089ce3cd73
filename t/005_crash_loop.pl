# A crash loop under simulated power loss: pgbench inserts unique ids, every
# server process is killed at a random moment, the power cut takes away
# what was not fsynced in pg_wal (tools/powercut), the server restarts --
# its restore and recovery logged for the next cut -- and every transaction
# pgbench saw acknowledged must be there.
#
# 1 MB WAL segments and a small max_wal_size make segments fill, get
# created, recycled and renamed, and checkpoints run, many times in each
# iteration: the directory entries and segment switches a power cut can
# take away; one transaction in 3000 is a large one (5000 rows).  Every
# fourth iteration cuts the power early, within 0.3 s of the restart: before
# the flusher anchored the ring, while pgbench is still connecting.  In
# every other even iteration pmwal.enabled goes off and on again during the
# load, so that the cut may hit the flusher draining or re-anchoring the
# ring.
#
# PMWAL_CRASH_ITERATIONS sets the number of iterations (12 by default;
# bench/soak.sh runs 100), PMWAL_CRASH_SEGSIZE the WAL segment size in MB
# (1) and PMWAL_CRASH_CONF adds settings.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $iterations = $ENV{PMWAL_CRASH_ITERATIONS} // 12;
my $segsize = $ENV{PMWAL_CRASH_SEGSIZE} // 1;
my $started = Time::HiRes::time();

my $node = pmwal_node(
	'loop',
	init => { extra => ["--wal-segsize=$segsize"] },
	conf => q{
pmwal.size = 4MB
shared_buffers = 16MB
min_wal_size = 2MB
max_wal_size = 6MB
checkpoint_timeout = 30s
restart_after_crash = off
log_statement = none
log_checkpoints = on
} . ($ENV{PMWAL_CRASH_CONF} // '') . "\n");
$node->{ring_cut} = 'durable';
powercut_start($node);
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE EXTENSION amcheck; CREATE TABLE t (id bigint PRIMARY KEY); '
	  . 'CREATE TABLE filler (id int, v text)');

my @loads;
my $broken = 0;
my $restored = 0;
my %counted = (ring_syncs => 0, ring_full => 0, pass_syncs => 0);
for my $i (1 .. $iterations)
{
	my $early = $i % 4 == 0;
	my $toggle = $i % 4 == 2;
	my $base = $i * 10_000_000_000;
	ok(wait_accelerated($node, 't'), "iteration $i: commits are accelerated")
	  unless $early;
	my $load = acked_load_start($node, tag => "iter$i", base => $base, big => 3000);
	if ($early)
	{
		Time::HiRes::sleep(rand(0.3));
	}
	else
	{
		$node->poll_query_until('postgres', "SELECT count(*) >= 100 FROM t WHERE id > $base")
		  or die "iteration $i: the load does not run: ${ $load->{err} }";
		if ($toggle)
		{
			$node->safe_psql('postgres',
				'ALTER SYSTEM SET pmwal.enabled = off; SELECT pg_reload_conf()');
			Time::HiRes::sleep(rand(0.5));
			$node->safe_psql('postgres',
				'ALTER SYSTEM RESET pmwal.enabled; SELECT pg_reload_conf()');
		}
		Time::HiRes::sleep(rand(1.5));
	}
	unless ($early)
	{
		# pmwal's counters live in shared memory: read them before the cut
		my $st = pmwal_status($node);
		$counted{$_} += $st->{$_} for qw(ring_syncs ring_full pass_syncs);
	}
	# the ring's cut alternates: durable (every line not flushed and drained
	# reverted), random (each such line reverted or kept, seeded)
	$node->{ring_cut} = $i % 2 ? 'durable' : 'random';
	my $cut = powercut($node);
	$node->adjust_conf('postgresql.auto.conf', 'pmwal.enabled', undef) if $toggle;
	acked_load_finish($load);
	push @loads, $load;

	my $log_pos = -s $node->logfile;
	if (!powercut_start($node, fail_ok => 1))
	{
		fail("iteration $i: the server restarts after the power cut");
		diag(substr(slurp_file($node->logfile), $log_pos));
		$broken = 1;
		last;
	}
	$restored++ if substr(slurp_file($node->logfile), $log_pos) =~ /pmwal restored WAL/;
	my ($n, $missing, $extra) = acked_check($node, $load);
	is($missing, 0, "iteration $i: all $n acknowledged transactions are present ($cut->{undone} writes undone by the cut; ring $cut->{ring_mode}: $cut->{ring_differ} lines differed, $cut->{ring_reverted} reverted)");
	cmp_ok($extra, '<=', $load->{clients}, "iteration $i: at most one unacknowledged transaction per client ($extra)");
	$node->safe_psql('postgres', 'TRUNCATE filler');
}

# The data directory and the last cut's log (powercut.log.cut) stay for
# inspection when a test fails.
if ($broken)
{
	done_testing();
	exit;
}

# everything acknowledged in every iteration is still there, and consistent
my ($all_missing, $all_acked) = (0, 0);
for my $load (@loads)
{
	my ($n, $missing) = acked_check($node, $load);
	$all_acked += $n;
	$all_missing += $missing;
}
is($all_missing, 0, "after $iterations power cuts, all $all_acked acknowledged transactions are present");
is($node->safe_psql('postgres', q{SELECT bt_index_check('t_pkey', heapallindexed => true)}),
	'', 'amcheck finds the primary key and the table consistent');
ok(!$node->log_contains(qr/PANIC/), 'no PANIC in the server log');
cmp_ok($counted{ring_syncs}, '>', 0, 'the ring served the WAL syncs of the loads (pmwal was in the commit path)');
diag(sprintf('%d iterations, %d acknowledged transactions checked, %d missing; '
		  . 'the ring was restored in %d restarts; pmwal counted %d WAL syncs served by the ring, %d times the ring was full, '
		  . '%d syncs passed through; %.0f s',
		scalar(@loads), $all_acked, $all_missing, $restored,
		@counted{qw(ring_syncs ring_full pass_syncs)}, Time::HiRes::time() - $started));
$node->stop;

done_testing();

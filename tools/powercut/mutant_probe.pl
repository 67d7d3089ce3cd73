# One probe of tools/powercut/mutants: a pmwal node (pmwal.so from
# PMWAL_TEST_LIBDIR, maybe a mutant) under committing load, stopped at a
# random moment -- or at an ordering hazard, a random libpmem call
# boundary or a drain after which the ring's durable image claims WAL it
# does not hold, when PMWAL_PROBE_STOP says so (hazard, random:P,
# claim: tools/powercut/ringrecord.c) -- killed,
# power-cut (pg_wal, and the ring in mode PMWAL_RING_CUT), restarted.
# Prints one line (and appends it to PMWAL_PROBE_OUT):
#   PROBE acked=N missing=M restart=ok|refused stopped=yes|no ring="<ring_cut summary>"
# Run by the mutants script through prove (it needs PostgreSQL's TAP modules).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../../t";

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $stop = $ENV{PMWAL_PROBE_STOP} // 'none';
# A small ring (PMWAL_PROBE_SIZE, 2MB), and one transaction in
# PMWAL_PROBE_BIG (20) inserts 5000 rows more: more than a quarter of the
# ring, so it is flushed the ordinary way and the ring then starts over
# behind it -- a re-anchor of a ring in use, again and again
my $node = pmwal_node('probe', size => $ENV{PMWAL_PROBE_SIZE} // '2MB',
	conf => QUIET_WAL . "pmwal.flush_interval = 50ms\n");
{
	local $ENV{POWERCUT_RING_STOP} = $stop eq 'none' ? '' : $stop;
	powercut_start($node);
}
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CREATE TABLE filler (id int, v text)');
my $load = acked_load_start($node, tag => 'probe', big => $ENV{PMWAL_PROBE_BIG} // 20);
my $ring = $node->{pmwal_ring};
my $stopped = 'no';
my $deadline = Time::HiRes::time() + ($stop eq 'none' ? 1 + rand(2) : 8);
while (Time::HiRes::time() < $deadline)
{
	if (-s "$ring.stops" || ($stop eq 'hazard' && -s "$ring.hazards"))
	{
		$stopped = 'yes';
		# let the others run on a moment: their commits are acknowledged
		Time::HiRes::sleep(0.2);
		last;
	}
	Time::HiRes::sleep(0.01);
}
my $cut = powercut($node);
acked_load_finish($load);
my $offset = -s $node->logfile;
my $up = $node->start(fail_ok => 1);
my ($n, $missing) = ($load->{total}, 'n/a');
($n, $missing) = acked_check($node, $load) if $up;
my $why = '';
($why) = slurp_file($node->logfile, $offset) =~ /(FATAL: .*|PANIC: .*)/ unless $up;
my $line = "PROBE acked=$n missing=$missing restart=" . ($up ? 'ok' : 'refused')
  . " stopped=$stopped ring=\"$cut->{ring_summary}\"" . ($why ? " why=\"$why\"" : '') . "\n";
diag($line);
append_to_file($ENV{PMWAL_PROBE_OUT}, $line) if $ENV{PMWAL_PROBE_OUT};
$node->stop('immediate') if $up;
ok(1, 'probe ran');
done_testing();

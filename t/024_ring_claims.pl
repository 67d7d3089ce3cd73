# The ring's store order under a power cut of persistent memory (issue 12):
# no drain ever leaves the ring's durable part claiming WAL it does not
# hold, and the same probe catches a build that gets the order wrong.
#
# tools/powercut's ring record keeps what pmem holds after a power cut (a
# flushed line is durable at the same process's next drain) and, with
# POWERCUT_RING_STOP=claim, stops a process right after a drain that left
# that durable image claiming, between its tail and last_end, a WAL page
# it does not hold.  An order bug between two stores that are each
# persisted -- a re-anchor that publishes head and last_end before the
# tail -- leaves nothing undrained behind and lasts a few instructions:
# only such a stop finds it.
#
# The probe: a 2 MB ring whose load makes it start over again and again
# (one transaction in 20 is larger than a quarter of the ring), the claim
# stop, then kill, the pg_wal cut and the ring cut to the durable image.
#	(a) pmwal: no claim stop ever, and every acknowledged commit there
#	(b) negative control: the same build with the re-anchor's stores in
#	    the wrong order (-DPMWAL_MUTANT=4, built here): the probe stops it
#	    at a claim, and the restart refuses the ring or loses commits
# tools/powercut/mutants runs the full table (every mutant, stop and mode).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Utils;
use Test::More;

for my $mode ('durable', 'random')
{
	my $r = ring_probe("claims_$mode", stop => 'claim', ring_cut => $mode);
	diag("a_$mode: $r->{acked} acknowledged, stop: " . ($r->{stopped} ? 'yes' : 'no')
		  . ", $r->{cut}{ring_summary}");
	cmp_ok($r->{acked}, '>=', 300, "a_$mode: at least 300 commits were acknowledged");
	ok(!$r->{stopped}, "a_$mode: no drain left the durable ring claiming WAL it does not hold")
	  or diag(slurp_file("$r->{node}{pmwal_ring}.stops"));
	ok($r->{restarted}, "a_$mode: the node restarts after the cut") or diag($r->{why} // '');
	is($r->{missing}, 0, "a_$mode: all $r->{acked} acknowledged commits are present");
}

my $mutant = build_mutant(4);
my $r = ring_probe('claims_mutant', stop => 'claim', ring_cut => 'durable', libdir => $mutant);
diag("b_reanchor_order: $r->{acked} acknowledged, stop: " . ($r->{stopped} ? 'yes' : 'no')
	  . ', restart: ' . ($r->{restarted} ? "ok, $r->{missing} missing" : "refused: $r->{why}"));
ok($r->{stopped}, 'b_reanchor_order: a drain left the durable ring claiming WAL it does not hold');
ok(!$r->{restarted} || $r->{missing} > 0,
	'b_reanchor_order: the cut there refuses the restart or loses acknowledged commits');

done_testing();

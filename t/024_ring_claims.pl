# The ring's store order under a power cut of persistent memory (issue 12):
# no drain ever leaves the ring's durable part claiming WAL it does not
# hold, and the same probe catches a build that gets the order wrong.
#
# tools/powercut's ring record keeps what pmem holds after a power cut (a
# flushed line is durable at the same process's next drain) and, with
# POWERCUT_RING_STOP=claim, stops a process right after a drain that left
# that durable image claiming a WAL page it does not hold: state IN_USE,
# tail < head, and a page beginning in [tail, head) without its own
# address in its header.  An order bug between two stores that are each
# persisted -- an empty IN_USE ring moved up that stores its head before
# its tail, so that for an instant it claims [old tail, new head), which
# it never copied -- leaves nothing undrained behind and lasts a few
# instructions: only such a stop finds it.
#
# The probe (PmwalTest's ring_probe): a 2 MB ring under committing load in
# which one transaction in 20 writes more WAL than the ring holds, so the
# ring is found full again and again, and now and then retires for a write
# larger than itself and is anchored again by the next (an empty ring
# moved up); the claim stop, then kill, the pg_wal cut and the ring cut to
# the durable image.
#	(a) pmwal: no claim stop ever, and every acknowledged commit there
#	(b) negative control: the same build with an anchor that moves the
#	    empty ring up head first while it is IN_USE (-DPMWAL_MUTANT=4,
#	    tail_order, built here): the probe stops it at a claim, and the
#	    restart refuses the ring or loses commits
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
	diag("a_$mode: $r->{acked} acknowledged, $r->{retires} retires, $r->{anchors} anchors, stop: "
		  . ($r->{stopped} ? 'yes' : 'no') . ", $r->{cut}{ring_summary}");
	cmp_ok($r->{acked}, '>=', 300, "a_$mode: at least 300 commits were acknowledged");
	cmp_ok($r->{anchors}, '>', 1, "a_$mode: the ring retired under the load and was anchored again");
	ok(!$r->{stopped}, "a_$mode: no drain left the durable ring claiming WAL it does not hold")
	  or diag(slurp_file("$r->{node}{pmwal_ring}.stops"));
	ok($r->{restarted}, "a_$mode: the node restarts after the cut") or diag($r->{why} // '');
	is($r->{missing}, 0, "a_$mode: all $r->{acked} acknowledged commits are present");
}

my $mutant = build_mutant(4);
my $r = ring_probe('claims_mutant', stop => 'claim', ring_cut => 'durable', libdir => $mutant);
diag("b_tail_order: $r->{acked} acknowledged, stop: " . ($r->{stopped} ? 'yes' : 'no')
	  . ', restart: ' . ($r->{restarted} ? "ok, $r->{missing} missing" : "refused: $r->{why}"));
ok($r->{stopped}, 'b_tail_order: a drain left the durable ring claiming WAL it does not hold');
ok(!$r->{restarted} || $r->{missing} > 0,
	'b_tail_order: the cut there refuses the restart or loses acknowledged commits');

done_testing();

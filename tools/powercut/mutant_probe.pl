# One probe of tools/powercut/mutants: PmwalTest's ring_probe with pmwal.so
# from PMWAL_TEST_LIBDIR (maybe a mutant), the stop PMWAL_PROBE_STOP (none,
# hazard, random:P, claim) and the ring cut PMWAL_RING_CUT.  Prints one
# line (and appends it to PMWAL_PROBE_OUT):
#   PROBE acked=N missing=M restart=ok|refused stopped=yes|no retires=R anchors=A ring="<ring_cut summary>"
# Run by the mutants script through prove (it needs PostgreSQL's TAP modules).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../../t";

use PmwalTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $stop = $ENV{PMWAL_PROBE_STOP} // 'none';
my $r = ring_probe('probe', stop => $stop, ring_cut => $ENV{PMWAL_RING_CUT} // 'durable',
	libdir => $ENV{PMWAL_TEST_LIBDIR});
my $line = "PROBE acked=$r->{acked} missing=" . ($r->{missing} // 'n/a')
  . ' restart=' . ($r->{restarted} ? 'ok' : 'refused')
  . ' stopped=' . ($r->{stopped} ? 'yes' : 'no') . " retires=$r->{retires} anchors=$r->{anchors}"
  . " ring=\"$r->{cut}{ring_summary}\"" . ($r->{why} ? " why=\"$r->{why}\"" : '') . "\n";
diag($line);
append_to_file($ENV{PMWAL_PROBE_OUT}, $line) if $ENV{PMWAL_PROBE_OUT};
ok(1, 'probe ran');
done_testing();

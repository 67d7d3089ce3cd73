# Issue 21, cases 4 and 6.
#
# 4. A sticky ring directory (mode 1777) owned by another user, neither
#    root nor the server's user, is refused: its owner may remove or replace
#    any file in it, the ring too (after a crash that is case 1).  The test
#    runs unprivileged and cannot chown; tools/common.sh makes such a
#    directory when tools/test runs as root (owned by nobody, mode 1777) and
#    names it in PMWAL_TEST_STICKY_DIR.  Without it the test fails when CI is
#    set and skips otherwise.  A sticky directory owned by root (/dev/shm)
#    stays accepted.
# 6. The test pause points (pmwal.test_pause) exist only in the build for
#    the tests (make PMWAL_TEST=1): a release build -- made here from the
#    same sources without PMWAL_TEST -- has no such setting, and the
#    reserved prefix "pmwal" makes SET, ALTER SYSTEM and postgresql.conf
#    refuse or drop the name; the test build has it.
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
use File::Copy ();
use Time::HiRes ();

my $t0 = Time::HiRes::time();
my @cleanup;
END { unlink @cleanup; }

# ---------------------------------------------------------------------------
# 4. the sticky directory of another user
# ---------------------------------------------------------------------------
my $node = pmwal_node('e', conf => "autovacuum = off\n");
my $R = $node->{pmwal_ring};
my $sticky = $ENV{PMWAL_TEST_STICKY_DIR};

# /dev/shm: sticky, owned by root: accepted
my @shm = stat '/dev/shm';
is($shm[4], 0, '4: /dev/shm is owned by root');
is($shm[2] & 07777, 01777, '4: /dev/shm is sticky and writable by everyone');
like($R, qr{^/dev/shm/}, '4: the node\'s ring is in /dev/shm');
my ($up, $log) = try_start($node);
ok($up, '4: a ring in /dev/shm (sticky, owned by root) is accepted') or diag($log);
create_pmwal($node) if $up;
$node->stop if $up;

SKIP:
{
	if (!defined $sticky || !-d $sticky)
	{
		fail('4: PMWAL_TEST_STICKY_DIR names a sticky directory of another user (CI is set)')
		  if $ENV{CI};
		skip 'PMWAL_TEST_STICKY_DIR is not set or missing (tools/test makes it when run as root)', 1;
	}
	my @st = stat $sticky;
	ok($st[4] != 0 && $st[4] != $>, "4: $sticky is owned by another user (uid $st[4]), not root");
	is($st[2] & 07777, 01777, "4: $sticky has mode 1777");

	# a missing ring there
	my $ring = "$sticky/pmwal_tap_e_$$.ring";
	push @cleanup, $ring;
	set_conf($node, 'pmwal.path' => $ring);
	refused_without_writing($node, '4 sticky directory of another user, no ring', files => [ $R, $ring ],
		fatal => qr/directory of pmwal ring "\Q$ring\E" is writable by other users and owned by another user\n/,
		detail => qr/"\Q$sticky\E" is sticky with permissions 1777, but owned by user ID $st[4]: its owner may remove or replace the ring of any user\./,
		hint => qr/Put the ring in a directory owned by the server's user or by root\./,
		on_started => sub { case_line('4 no ring: the server started and ' . (-e $ring ? 'created its ring there' : 'made no ring')) });
	ok(!-e $ring, '4: no ring created there');

	# the server's own, valid ring there
	File::Copy::copy($R, $ring) or die "copy: $!";
	chmod 0600, $ring;
	refused_without_writing($node, '4 sticky directory of another user, a ring of the server\'s user',
		files => [ $R, $ring ],
		fatal => qr/directory of pmwal ring "\Q$ring\E" is writable by other users and owned by another user\n/,
		on_started => sub { case_line('4 own ring: the server started on it') });
	unlink $ring;
	set_conf($node, 'pmwal.path' => $R);
}

# ---------------------------------------------------------------------------
# 6. no test pause points in a release build
# ---------------------------------------------------------------------------
my ($reldir, $buildlog) = release_build_dir();
note("release build in $reldir: $buildlog");
my $so = slurp_file("$reldir/pmwal.so");
ok(index($so, 'pmwal test pause at') < 0, '6: the release build has no pause point code');
ok(index($so, 'pmwal.test_pause') < 0, '6: the release build does not name pmwal.test_pause');

my $rel;
{
	local $ENV{PMWAL_TEST_LIBDIR} = $reldir;
	$rel = pmwal_node('release', conf => "autovacuum = off\n");
}
$rel->start;
create_pmwal($rel);
$rel->safe_psql('postgres', 'CREATE TABLE t (id int)');

my ($rc, $out, $err) = $rel->psql('postgres', q{SET pmwal.test_pause = 'flusher_sleep'});
isnt($rc, 0, '6: SET pmwal.test_pause fails in a release build');
like($err, qr/invalid configuration parameter name "pmwal\.test_pause"/, '6: SET: invalid configuration parameter name');
like($err, qr/"pmwal" is a reserved prefix/, '6: SET: "pmwal" is a reserved prefix');
case_line('6 release build, SET: ' . ($rc ? ($err =~ /(ERROR:.*)/)[0] : 'accepted'));

($rc, $out, $err) = $rel->psql('postgres', q{ALTER SYSTEM SET pmwal.test_pause = 'flusher_sleep'});
isnt($rc, 0, '6: ALTER SYSTEM SET pmwal.test_pause fails in a release build');
like($err, qr/invalid configuration parameter name "pmwal\.test_pause"|unrecognized configuration parameter "pmwal\.test_pause"/,
	'6: ALTER SYSTEM: the parameter is refused');
case_line('6 release build, ALTER SYSTEM: ' . ($rc ? ($err =~ /(ERROR:.*)/)[0] : 'accepted'));
ok(slurp_file($rel->data_dir . '/postgresql.auto.conf') !~ /test_pause/,
	'6: nothing written into postgresql.auto.conf');

($rc, $out, $err) = $rel->psql('postgres', q{SHOW pmwal.test_pause});
isnt($rc, 0, '6: SHOW pmwal.test_pause fails in a release build');

# a role given SET on the parameter (PostgreSQL 15's GRANT ON PARAMETER)
$rel->safe_psql('postgres', 'CREATE ROLE tester LOGIN');
($rc, $out, $err) = $rel->psql('postgres', q{GRANT SET ON PARAMETER pmwal.test_pause TO tester});
note("GRANT SET ON PARAMETER pmwal.test_pause: rc $rc $err");
($rc, $out, $err) = $rel->psql('postgres', q{SET pmwal.test_pause = 'flusher_sleep'},
	extra_params => [ '-U', 'tester' ]);
isnt($rc, 0, '6: a role granted SET on it cannot set it either');

# postgresql.conf names it: the server starts, drops it, and nothing pauses
set_conf($rel, 'pmwal.test_pause' => 'flusher_sleep');
my $offset = -s $rel->logfile;
$rel->restart;
$rel->safe_psql('postgres', 'INSERT INTO t SELECT generate_series(1, 1000)') for 1 .. 5;
Time::HiRes::sleep(2.5);    # two flusher loops at least (pmwal.flush_interval 1 s)
my $rlog = slurp_file($rel->logfile, $offset);
like($rlog, qr/invalid configuration parameter name "pmwal\.test_pause", removing it/,
	'6: postgresql.conf: the name is dropped with a WARNING');
unlike($rlog, qr/pmwal test pause at/, '6: postgresql.conf: no process pauses');
$rel->stop;

# the test build has it
SKIP:
{
	skip 'the build under test is the old one (pause points always in)', 2 if testing_old_build();
	$node->start;
	($rc, $out, $err) = $node->psql('postgres', q{SET pmwal.test_pause = 'no_such_point'; SHOW pmwal.test_pause});
	is($rc, 0, '6: the test build has pmwal.test_pause') or diag($err);
	($rc, $out, $err) = $node->psql('postgres',
		q{ALTER SYSTEM SET pmwal.test_pause = 'no_such_point'; ALTER SYSTEM RESET pmwal.test_pause});
	is($rc, 0, '6: ALTER SYSTEM SET pmwal.test_pause works in the test build') or diag($err);
	$node->stop;
}

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();

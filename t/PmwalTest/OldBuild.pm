# PmwalTest::OldBuild
#		The old build as a negative control: several tests can run against
#		pmwal as it was before the sync layer and the binding (4b36e65,
#		pmwal 1.1, built at /work/old), where they are expected to fail --
#		that is what the modes are for; not a CI run.  Two ways in:
#
#	PMWAL_OLD_BUILD=dir	the nodes of the WAL-consumer tests (t/025*,
#						t/028) made with mode_node and mode_standby run the
#						old build, with extension SQL version 1.0,
#						and a committer is held at its dangerous point,
#						commit_after_write (written without fsync, flush
#						pointer moved, not yet in the ring), instead of the
#						sync layer's sync_before_publish (inside the
#						interposed WAL sync, the WAL copied into the ring and
#						written, the head not yet published and PostgreSQL's
#						flush pointer not yet moved).  The tests run the same
#						assertions.
#	PMWAL_TEST_LIBDIR=dir	every node of the test runs the pmwal.so in dir
#						(PmwalTest); testing_old_build() says whether that is
#						the build before the binding (recognised by what its
#						pmwal.so lacks: the binding file's name), for the
#						binding tests (t/026*, PmwalTest::Binding) and t/013.
package PmwalTest::OldBuild;

use strict;
use warnings;

use Exporter 'import';
use PmwalTest;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(OLD_BUILD mode_name hold_point mode_node mode_standby
  testing_old_build create_pmwal create_pmwal_sql);

# The old build's directory when the nodes run it (PMWAL_OLD_BUILD), or
# undef.
sub OLD_BUILD { return $ENV{PMWAL_OLD_BUILD} }

# The negative control is expected to fail: waits that cannot end there
# should not take PostgreSQL's default 180 s each.
$PostgreSQL::Test::Utils::timeout_default = 30 if OLD_BUILD();

sub mode_name { return OLD_BUILD() ? 'old build' : 'sync layer' }

# The dangerous point a committer is held at in this mode
# (PmwalTest::Hold's hold_commit).
sub hold_point { return OLD_BUILD() ? 'commit_after_write' : 'sync_before_publish' }

# pmwal_node and pmwal_standby in this mode's build.
sub mode_node
{
	my ($name, %opts) = @_;
	local $ENV{PMWAL_TEST_LIBDIR} = OLD_BUILD() if OLD_BUILD();
	return pmwal_node($name, %opts);
}

sub mode_standby
{
	my ($primary, $name, $backup, %opts) = @_;
	local $ENV{PMWAL_TEST_LIBDIR} = OLD_BUILD() if OLD_BUILD();
	return pmwal_standby($primary, $name, $backup, %opts);
}

# Is the pmwal.so under test (PMWAL_TEST_LIBDIR) the build before the
# binding (issue 21)?
my $testing_old_build;
sub testing_old_build
{
	return $testing_old_build if defined $testing_old_build;
	my $dir = $ENV{PMWAL_TEST_LIBDIR};
	$testing_old_build = 0;
	if ($dir && -f "$dir/pmwal.so")
	{
		my $so = slurp_file("$dir/pmwal.so");
		$testing_old_build = index($so, 'pmwal.binding') < 0 ? 1 : 0;
	}
	note('old-build mode: pmwal.so from ' . $dir . ' has no ring binding; the tests are expected to fail')
	  if $testing_old_build;
	return $testing_old_build;
}

# CREATE EXTENSION pmwal in the version the build knows: the old build does
# not know the columns of the newest version of pmwal_status; its version
# 1.0 has "accelerated" too.
sub create_pmwal_sql
{
	return 'CREATE EXTENSION IF NOT EXISTS pmwal'
	  . (OLD_BUILD() || testing_old_build() ? q{ VERSION '1.0'} : '');
}

sub create_pmwal
{
	my ($node) = @_;
	$node->safe_psql('postgres', create_pmwal_sql());
	return;
}

1;

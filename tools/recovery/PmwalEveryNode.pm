# PmwalEveryNode.pm
#		Loaded into PostgreSQL's own TAP tests by tools/recovery-suite
#		(PERL5OPT=-MPmwalEveryNode): every node a test makes, with init() or
#		init_from_backup(), preloads pmwal on an emulated ring of its own.
#
# PostgreSQL's TEMP_CONFIG reaches init() only; a standby made from a base
# backup would otherwise inherit its primary's ring path.  At the end each
# test appends to $PMWAL_SUITE_STATS how many of its nodes started and how
# many of those had pmwal attach a ring, so that the report can show that
# pmwal really ran everywhere.
package PmwalEveryNode;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();

$ENV{PMEM_IS_PMEM_FORCE} = '1';

my @nodes;
my @rings;

sub add_pmwal
{
	my ($node) = @_;
	my $ring = '/dev/shm/pmwal_suite_' . $node->name . "_$$.ring";
	unlink $ring;
	push @rings, $ring;
	push @nodes, $node;
	$node->append_conf('postgresql.conf', qq{
# pmwal on every node (tools/recovery/PmwalEveryNode.pm)
shared_preload_libraries = 'pmwal'
pmwal.path = '$ring'
pmwal.size = '16MB'
});
	return;
}

{
	no strict 'refs';
	no warnings 'redefine';
	for my $name (qw(init init_from_backup))
	{
		my $orig = \&{"PostgreSQL::Test::Cluster::$name"};
		*{"PostgreSQL::Test::Cluster::$name"} = sub {
			my @ret = $orig->(@_);
			add_pmwal($_[0]);
			return wantarray ? @ret : $ret[0];
		};
	}
}

# Runs before PostgreSQL::Test::Cluster's own END (END blocks run in the
# reverse order of their compilation), while the logs are still there.
END
{
	local $?;
	my ($started, $with_ring) = (0, 0);
	for my $node (@nodes)
	{
		my $log = $node->logfile;
		next unless -f $log;
		my $text = PostgreSQL::Test::Utils::slurp_file($log);
		next unless $text =~ /starting PostgreSQL/;
		$started++;
		$with_ring++ if $text =~ /pmwal (?:attached|created) ring/;
	}
	if (my $stats = $ENV{PMWAL_SUITE_STATS})
	{
		if (open my $fh, '>>', $stats)
		{
			print $fh "$started $with_ring\n";
			close $fh;
		}
	}
	unlink @rings;
}

1;

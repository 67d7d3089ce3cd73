# Issue 20, case 7: every ring size the README allows accelerates commits,
# and pmwal_status tells the truth about it.
#
# 1 MB WAL segments with a 64 MB ring, and 16 MB segments with a 512 MB
# ring (the two the old build never used: it asked for a margin of a
# sixteenth of the ring in prepared segments, and prepared two): 300
# commits, each with WAL of a hundredth of a segment, so that they cross
# three segments.  Every WAL write goes into the ring (ring_writes grows by
# at least 300, pass_writes stays 0), every WAL sync PostgreSQL counts
# (pg_stat_wal.wal_sync; pg_stat_io on 18) is answered from the ring
# (ring_syncs grows as much, pass_syncs not at all), accelerated = t.
#
# PMWAL_OLD_BUILD=/work/old: the old build's counters (ring_commits, and
# the fallbacks) showed 0 ring commits there while accelerated = t.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub counters
{
	my ($node) = @_;
	my $st = pmwal_status($node);
	return {
		accelerated => $st->{accelerated},
		reason => $st->{reason},
		ring => $st->{ring_writes} // $st->{ring_commits},
		pass => $st->{pass_writes} // (($st->{fallback_inactive} // 0) + ($st->{fallback_full} // 0)
			  + ($st->{fallback_large} // 0) + ($st->{fallback_read_error} // 0)
			  + ($st->{fallback_recycled} // 0) + ($st->{fallback_persist_error} // 0)),
		ring_syncs => $st->{ring_syncs},
		pass_syncs => $st->{pass_syncs},
	};
}

for my $cfg ([ 1, '64MB' ], [ 16, '512MB' ])
{
	my ($seg, $ring) = @$cfg;
	my $tag = "${seg} MB segments, $ring ring";
	my $node = mode_node("seg${seg}", size => $ring, init => { extra => ["--wal-segsize=$seg"] },
		conf => QUIET_WAL);
	$node->start;
	create_pmwal($node);
	$node->safe_psql('postgres', 'CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die "$tag: commits are not accelerated";
	$node->safe_psql('postgres', 'CHECKPOINT');
	reset_wal_stats($node);
	my $before = counters($node);
	my $first = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
	my $size = int($seg * 1024 * 1024 / 100);
	$node->safe_psql('postgres', join('', map {
		"BEGIN; INSERT INTO t VALUES ($_); SELECT pg_logical_emit_message(true, 'w', repeat('w', $size)); COMMIT;\n"
	} 1 .. 300));
	my $last = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
	my $after = counters($node);
	my $syncs = wal_fsyncs($node);
	note("$tag: WAL from $first to $last; before: " . join(', ', map { "$_=" . ($before->{$_} // '') } sort keys %$before)
		  . '; after: ' . join(', ', map { "$_=" . ($after->{$_} // '') } sort keys %$after)
		  . "; PostgreSQL counted $syncs WAL syncs");
	cmp_ok(hex(substr($last, 16)) - hex(substr($first, 16)), '>=', 2, "$tag: the commits crossed segments");
	is($after->{accelerated}, 'true', "$tag: accelerated = t") or diag("reason: $after->{reason}");
	cmp_ok($after->{ring} - $before->{ring}, '>=', 300, "$tag: the 300 commits went into the ring");
	is($after->{pass} - $before->{pass}, 0, "$tag: no WAL write went around the ring");
	SKIP:
	{
		skip 'the old build counts no syncs', 3 if OLD_BUILD();
		cmp_ok($syncs, '>=', 300, "$tag: PostgreSQL made its WAL syncs ($syncs)");
		cmp_ok($after->{ring_syncs} - $before->{ring_syncs}, '>=', $syncs,
			"$tag: the ring answered every one of them (" . ($after->{ring_syncs} - $before->{ring_syncs}) . ')');
		is($after->{pass_syncs} - $before->{pass_syncs}, 0, "$tag: none went to the file system");
	}
	$node->stop;
}

done_testing();

# Issue 20, case 6: a power cut must not cost the WAL archive anything:
# segments not yet archived stay in pg_wal and get archived, nothing not
# durable is archived, and point-in-time recovery from the archive
# recovers every acknowledged commit.
#
# archive_command fails (a flag file is missing).  Commits fill three
# segments, each finished with pg_switch_wal(): they wait in pg_wal with
# .ready.  A committer is held at the build's dangerous point (the sync
# layer: inside the interposed WAL sync, the flush pointer not yet moved),
# its commit finishing a segment, and the power is cut: that segment is not
# marked for the archiver meanwhile.  After the restart (crash recovery; the sync layer
# never asks for archive recovery) the three segments are still there and
# still .ready; then archiving works again, and a node recovered from the
# base backup and the archive has every acknowledged row.
#
# Control: the same on stock PostgreSQL (committer held by gdb in its WAL
# fdatasync).  PMWAL_OLD_BUILD=/work/old: its forced archive recovery
# treated the unarchived segments as removable and recycled them; the
# recovered node had 0 of 3,311 acknowledged rows.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub scenario
{
	my ($tag, $node, $stock) = @_;
	my $flag = $node->basedir . '/archive_ok';
	my $archive = $node->archive_dir;
	$node->append_conf('postgresql.conf', qq{archive_mode = on
archive_command = 'test -f "$flag" && cp "%p" "$archive/%f"'
});
	PostgreSQL::Test::Utils::append_to_file($flag, '');
	powercut_start($node);
	create_pmwal($node) unless $stock;
	$node->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY)');
	wait_accelerated($node, 't') or die "$tag: commits are not accelerated" unless $stock;
	$node->backup('b');
	unlink $flag;

	my @acked;
	my %ready;
	for my $batch (0 .. 2)
	{
		my @ids = map { $batch * 1000 + $_ } 1 .. 1000;
		$node->safe_psql('postgres', join('', map { "INSERT INTO t VALUES ($_);\n" } @ids));
		push @acked, @ids;
		my $seg = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_switch_wal())');
		$ready{$seg} = 1;
	}
	$node->poll_query_until('postgres', 'SELECT failed_count > 0 FROM pg_stat_archiver')
	  or die "$tag: archiving does not fail";
	my $status = $node->data_dir . '/pg_wal/archive_status';
	my $pending = grep { -e "$status/$_.ready" } keys %ready;
	is($pending, 3, "$tag: 3 finished segments wait for the failing archive_command");

	# the held commit finishes a segment: its first WAL sync is the one
	# after which PostgreSQL marks that segment .ready
	my $pos = pad_into_last_page($node, 16 * 1024 * 1024);
	my $seg = $node->safe_psql('postgres', "SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
	my $sql = "BEGIN; INSERT INTO t VALUES (99999); "
	  . "SELECT pg_logical_emit_message(true, 'h', repeat('h', 20000)); COMMIT";
	my ($held, $s) = hold_commit_or_stock($node, $sql, $stock);
	ok(!-e "$status/$seg.ready" && !-e "$status/$seg.done",
		"$tag: segment $seg, whose finishing sync is held, is not marked for the archiver");
	cut_held($node, $tag, $held, $s);

	my $offset = -s $node->logfile;
	$node->start;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$tag: the node does not leave recovery";
	unlike(slurp_file($node->logfile, $offset), qr/starting archive recovery/,
		"$tag: the restart ran crash recovery, not archive recovery");
	my $kept = grep { -f $node->data_dir . "/pg_wal/$_" } keys %ready;
	is($kept, 3, "$tag: the 3 segments not yet archived are still in pg_wal");
	$pending = grep { -e "$status/$_.ready" } keys %ready;
	is($pending, 3, "$tag: and still wait to be archived (.ready)");
	my $list = join(',', @acked);
	is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @acked,
		"$tag: the node has all " . scalar(@acked) . ' acknowledged rows');

	# archiving works again
	PostgreSQL::Test::Utils::append_to_file($flag, '');
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (5000)');
	push @acked, 5000;
	my $last = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_switch_wal())');
	$node->poll_query_until('postgres', "SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")
	  or diag("$tag: the archiver does not archive $last");
	my $archived = grep { -f "$archive/$_" } keys %ready;
	is($archived, 3, "$tag: the 3 segments are archived");

	# point-in-time recovery from the base backup and the archive
	my $pitr = PostgreSQL::Test::Cluster->new("${tag}_pitr");
	$pitr->init_from_backup($node, 'b', has_restoring => 1, standby => 0);
	$pitr->append_conf('postgresql.conf', "shared_preload_libraries = ''\narchive_mode = off\n");
	$pitr->start;
	$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or diag("$tag: the recovery from the archive does not end");
	$list = join(',', @acked);
	is($pitr->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @acked,
		"$tag: recovery from the archive recovers all " . scalar(@acked) . ' acknowledged rows');
	$pitr->stop;
	$node->stop;
	return;
}

(my $tag = mode_name()) =~ s/ /_/g;
scenario($tag, mode_node('primary', size => '64MB', init => { allows_streaming => 1 }, conf => QUIET_WAL), 0);
scenario('stock', stock_node('stock', init => { allows_streaming => 1 }), 1) unless OLD_BUILD();

done_testing();

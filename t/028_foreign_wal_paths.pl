# A file outside the data directory whose path merely ends in
# "pg_wal/<a WAL file name>" (found by the last adversarial review).
#
# Before the fix interpose.c classified a descriptor as a WAL segment from the path it was
# opened by: any path whose last two components were "pg_wal/<24 hex>", in
# any directory.  A server-side lo_export() (superuser, or a role granted
# EXECUTE on it, e.g. with pg_write_server_files) to such a path outside the
# data directory writes it with write(): pmwal takes that for a write into
# the cluster's own segment named by the file name, retires its ring and
# moved its written_end to the end of that segment
# (ring_on_wal_other_write).  When that segment exists ahead of the insert
# position (recycled segments do), pmwal's next real sync covers it and sets
# its durable point there: from then on every real sync begins at that
# segment (pmwal_sync_range starts at the segment of durable_lsn - 1), and
# the segment PostgreSQL is writing is never synced -- its syncs are
# answered from the ring, the flusher syncs the segments after it and then
# frees the ring.  A power cut loses every commit acknowledged meanwhile.
#
# The control exports the same bytes to a path that does not end in
# "pg_wal/": every commit survives.  Stock PostgreSQL writes such a file and
# forgets it.  Now only the data directory's own pg_wal/ and
# global/pg_control are pmwal's (interpose.c own_file), and a WAL file
# written by write(), writev() or pwritev() is synced for real after the
# write instead of guessing its range from its name.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use File::Path qw(make_path);
use PmwalTest;
use PmwalTest::OldBuild;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'the sync layer only' if OLD_BUILD();

my $SEG = 1024 * 1024;

sub scenario
{
	my ($tag, $leaf, $shutdown) = @_;
	my $node = mode_node($tag, size => '64MB', init => { extra => ['--wal-segsize=1'] },
		conf => QUIET_WAL . "pmwal.flush_interval = 10ms\nautovacuum = off\nmin_wal_size = 32MB\n");
	powercut_start($node);
	create_pmwal($node);
	$node->safe_psql('postgres', 'CREATE TABLE t (id int)');
	# recycled segments ahead of the insert position
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (0); SELECT pg_switch_wal()') for 1 .. 6;
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (0)');
	$node->safe_psql('postgres', 'CHECKPOINT');
	wait_accelerated($node, 't') or die 'commits are not accelerated';

	my $cur = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_lsn())');
	my $next = substr($cur, 0, 16) . sprintf('%08X', hex(substr($cur, 16)) + 1);
	is($node->safe_psql('postgres', "SELECT count(*) FROM pg_ls_waldir() WHERE name = '$next'"),
		'1', "$tag: segment $next, after the insert position's $cur, exists (recycled)");

	# the export: a file outside the data directory
	my $dir = $node->basedir . "/export/$leaf";
	make_path($dir);
	my $lo = $node->safe_psql('postgres', "SELECT lo_from_bytea(0, 'x')");
	$node->safe_psql('postgres', "SELECT lo_export($lo, '$dir/$next')");
	ok(-s "$dir/$next", "$tag: lo_export wrote $dir/$next");

	# acknowledged commits
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 50;
	if ($shutdown)
	{
		# a clean shutdown: its checkpoint's pg_control write syncs pg_wal
		# "for real" and retires the ring; the power goes after it
		$node->stop;
		ok($node->log_contains(qr/pmwal synced pg_wal at the shutdown checkpoint/),
			"$tag: the server shut down cleanly, pmwal synced pg_wal and emptied its ring");
		my $cut = powercut_cut($node);
		note($cut->{summary});
		my $offset = -s $node->logfile;
		ok($node->start(fail_ok => 1), "$tag: the node starts after the power cut")
		  or diag(slurp_file($node->logfile, $offset) =~ /((?:FATAL|PANIC):.*\n(?:.*DETAIL:.*)?)/);
		is($node->{_pid} ? $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id BETWEEN 1 AND 50') : 'no start',
			'50', "$tag: all 50 commits acknowledged before the clean shutdown survived the power cut");
		$node->stop if $node->{_pid};
		return;
	}
	# WAL moves two segments on; the flusher passes
	my $acked = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	$node->safe_psql('postgres', 'INSERT INTO t SELECT 1000 + g FROM generate_series(1, 60000) g');
	my $bulk = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	cmp_ok($bulk - $acked, '>', 2 * $SEG, "$tag: WAL went on two segments past the acknowledged commits");
	$node->poll_query_until('postgres',
		"SELECT tail_lsn >= '" . sprintf('%X/%X', $bulk / 2**32, $bulk % 2**32) . "'::pg_lsn - 65536 FROM pmwal_status")
	  or die "$tag: the flusher does not pass";
	my $st = pmwal_status($node);
	note("$tag: ring [$st->{tail_lsn}, $st->{head_lsn}), durable_lsn $st->{durable_lsn}");
	cmp_ok(lsn_num($st->{tail_lsn}), '>', $acked, "$tag: the ring gave up the acknowledged commits (synced, it says)");

	my $cut = powercut($node);
	note($cut->{summary});
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the node starts after the power cut")
	  or diag(slurp_file($node->logfile, $offset) =~ /((?:FATAL|PANIC):.*\n(?:.*DETAIL:.*)?)/);
	is($node->{_pid} ? $node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id BETWEEN 1 AND 50') : 'no start',
		'50', "$tag: all 50 acknowledged commits survived the power cut");
	$node->stop if $node->{_pid};
	return;
}

scenario('control', 'notwal');
scenario('export', 'pg_wal');
scenario('shutdown_control', 'notwal', 1);
scenario('shutdown', 'pg_wal', 1);

done_testing();

# Found by an adversarial review: under fsync = off pmwal promises that each
# WAL write is durable (docs/failures.md, operations.md; t/009).  A WAL
# write the ring cannot take -- here one larger than the ring -- retires the
# ring and goes to pg_wal only; the retirement relies on "PostgreSQL's syncs
# are real until the next write anchors the ring again", but under
# fsync = off PostgreSQL issues no sync at all (issue_xlog_fsync returns at
# once), and the flusher does not sync an unanchored ring (sync_due).  A
# COMMIT whose record lies in that write was acknowledged with its WAL only
# in the page cache, and a power cut lost all its rows (this test, before
# the fix).  The same held for the rest of a short write written through an
# unanchored ring.  Now pmwal syncs such a write for real right after it.
#
# Each case: fsync = off, a ring of 2 MB (the write is larger) or 64 MB
# (positive control: the write goes into the ring), one transaction of
# ~4 MB of WAL written by its COMMIT in one pwrite (wal_buffers 16 MB, the
# WAL writer and the background writer kept quiet, the WAL position at the
# start of a segment), acknowledged; then at once a power cut (all server
# processes SIGKILLed, unsynced writes to pg_wal undone), and a restart.
# Negative control: the 64 MB case's data directory without its ring lacks
# the rows (the harness did cut the WAL that only the ring held).
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $ROWS = 30000;
my $CONF = "fsync = off\nwal_buffers = 16MB\nbgwriter_lru_maxpages = 0\n";

# The retired ring: the flusher passes every 100 ms, so it has time to sync
# what it would.  The control's anchored ring: the flusher waits a minute,
# so that only the ring holds the acknowledged WAL when the power is cut
# (with 100 ms a slow machine let the flusher sync it first, and the
# negative control saw nothing to lose).
for my $case ([ 'small_ring', '2MB', 1, '100ms' ], [ 'large_ring', '64MB', 0, '60s' ])
{
	my ($tag, $size, $expect_retire, $interval) = @$case;
	my $node = quiet_node("fsoff_$tag", size => $size, interval => $interval, conf => $CONF);
	is($node->safe_psql('postgres', 'SHOW fsync'), 'off', "$tag: fsync is off");
	# the table is durable in pg_wal (pmwal syncs it before the checkpoint's
	# pg_control write); the next write begins a segment, anchoring the ring
	$node->safe_psql('postgres', 'CREATE TABLE big (id int, v text); CHECKPOINT');
	$node->safe_psql('postgres', 'SELECT pg_switch_wal(); INSERT INTO t VALUES (1)');
	my $st = pmwal_status($node);
	note("$tag: before: " . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
	my $offset = -s $node->logfile;
	my $retires = $st->{retires};
	my $before = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));

	# acknowledged: safe_psql returned after the COMMIT
	$node->safe_psql('postgres',
		"INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, $ROWS) g");
	$st = pmwal_status($node);
	note("$tag: after: " . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
	my $log = slurp_file($node->logfile, $offset);
	if ($expect_retire)
	{
		like($log, qr/pmwal gave up its ring for ordinary WAL syncs: a single WAL write was larger than the ring/,
			"$tag: the COMMIT's WAL write was larger than the ring: the ring retired");
		# what pmwal_status says now, with the acknowledged WAL in no ring
		# and synced by nobody
		note("$tag: pmwal_status after the acknowledged COMMIT: accelerated=$st->{accelerated}, "
			  . "commit_path=$st->{commit_path}, durable_lsn=$st->{durable_lsn}, head_lsn=$st->{head_lsn}, "
			  . "bytes_in_use=$st->{bytes_in_use}");
	}
	else
	{
		is($st->{retires}, $retires, "$tag: the ring did not retire");
	}

	# the retired ring: PostgreSQL syncs nothing under fsync = off, and the
	# flusher does not sync an unanchored ring, so pmwal must have synced
	# the write it could not take before the COMMIT returned (before the
	# fix nothing had, 2 s later still: all 30000 rows were lost).  The
	# anchored ring of the control is cut at once, before the flusher's
	# pass, so that its negative control shows the WAL only the ring held.
	my $cut;
	if ($expect_retire)
	{
		cmp_ok(lsn_num($st->{durable_lsn}) - $before, '>', 2 * 1024 * 1024,
			"$tag: the write larger than the ring was synced for real by the COMMIT's return "
			  . "(durable_lsn $st->{durable_lsn})");
		$cut = powercut($node);
		note("$tag: $cut->{summary}");
	}
	else
	{
		$cut = powercut($node);
		note("$tag: $cut->{summary}");
		cmp_ok($cut->{undone}, '>', 0, "$tag: the power cut undid unsynced WAL writes");
	}

	unless ($expect_retire)
	{
		my $n = without_ring_query($node, 'SELECT count(*) FROM big');
		ok(!defined $n || $n < $ROWS,
			"$tag: negative control: without the ring the acknowledged rows are missing ("
			  . ($n // 'no start') . " of $ROWS)");
	}
	$node->append_conf('postgresql.conf', "fsync = on\n");
	ok($node->start(fail_ok => 1), "$tag: the server starts after the power cut")
	  or next;
	my $n = $node->safe_psql('postgres', 'SELECT count(*) FROM big');
	is($n, $ROWS, "$tag: the acknowledged transaction's $ROWS rows are all there after the power cut");
	$node->stop;
}

done_testing();

# An adversarial review of 5ab2b54 (a WAL write of at most 64 kB is copied
# into a private buffer, and the ring and the segment both get that copy):
# I3 -- pg_wal gets exactly the bytes the ring holds -- through the
# snapshot, across a short write whose rest PostgreSQL writes from its WAL
# buffer after an inserter appended to the partial last page.
#
# The committing backend B's file size limit (RLIMIT_FSIZE, as in t/034)
# makes its next WAL write (a few pages: the snapshot path) short: a page
# and 100 bytes reach the file, the ring holds the whole write.
# B is held at write_short, before PostgreSQL writes the rest; then its
# limit is raised and B let go: the rest (from mid-page) is copied into the
# snapshot and the ring, and B is held again before its file write
# (write_after_copy, second hit).  Meanwhile C inserts a row: its records go
# into the WAL buffer B's rest was copied from, in the page the rest
# covers; C waits for the WAL write lock.  B writes the rest and is held
# in its sync (sync_before_publish).
#
# Checked: at write_short, the ring and pg_wal agree over what the file
# took; with B held in its sync, they agree byte for byte over B's whole
# write (C's record is in the WAL buffer only); after both commits, over
# everything the ring holds; after a power cut the server starts,
# restores the ring, and every acknowledged row is there; negative
# control: the data directory started without its ring lacks them.
# Shown to catch the hazard: with the snapshot path's file write made a
# pwrite of the caller's buffer (by hand, not committed), the check in
# B's sync fails at C's record (first difference at its LSN).
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

my $started = Time::HiRes::time();
my $SEG = 16 * 1024 * 1024;
my $PAGE = 8192;
my $BIG_INSERT = "INSERT INTO t SELECT g FROM generate_series(1001, 1300) g; SELECT 'inserted';";

# as t/034: the next WAL writes lie 12 MB into a segment, under a fresh
# power-cut log; walwriter, flusher and background writer stopped
sub short_write_node
{
	my ($tag) = @_;
	my $node = quiet_node($tag, conf => "wal_keep_size = 64MB\n");
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $seg = $x - $x % $SEG + $SEG;
	advance_to($node, $seg + 12 * 1024 * 1024, $seg + 12 * 1024 * 1024 + 512 * 1024);
	acked_insert($node, 0);
	$node->safe_psql('postgres', 'ALTER SYSTEM SET wal_keep_size = 0');
	$node->stop;
	powercut_cut($node);
	powercut_start($node);
	stop_server_process($node, $_) for ('walwriter', 'flusher', 'background writer');
	return $node;
}

sub same_bytes
{
	my ($node, $from, $len, $what) = @_;
	my $r = ring_rw($node, $from, $len);
	my $w = wal_rw($node, $from, $len);
	my $d = first_difference($r, $w);
	ok(!defined $d && length($r) == length($w),
		"$what: ring and pg_wal agree byte for byte over " . lsn_text($from) . " + $len"
		  . (defined $d ? ' (first difference at ' . lsn_text($from + $d) . ')' : ''));
	return;
}

{
	my $tag = 'snapshot_rest';
	my $node = short_write_node($tag);
	my @acked = (1 .. 5);
	acked_insert($node, $_) for @acked;

	my $s = psql_session($node);
	my $pid = session_pid($s);
	pause_rearm($node, $_) for qw(write_short write_after_copy sync_before_publish);
	send_and_wait($s, "SET pmwal.test_pause = 'write_short,write_after_copy:2,sync_before_publish'; SELECT 'armed';\n",
		qr/^armed$/m);
	my $f = flush_lsn($node);
	my $wstart = $f - $f % $PAGE;
	my $limit = $wstart % $SEG + $PAGE + 100;
	system('prlimit', '--pid', $pid, "--fsize=$limit:") == 0 or die "prlimit failed";
	my $offset = -s $node->logfile;
	send_and_wait($s, "$BIG_INSERT\n");
	is(pause_wait($node, 'write_short', $offset), $pid, "$tag: B's WAL write was short");
	my $ins = insert_lsn($node);
	cmp_ok($ins - $wstart, '<=', 8 * $PAGE, "$tag: B's write is at most 64 kB (the snapshot path)");
	same_bytes($node, $wstart, $PAGE + 100, "$tag: at write_short, what the file took");

	# the rest: copied into the snapshot and the ring, held before its file write
	system('prlimit', '--pid', $pid, '--fsize=unlimited:') == 0 or die 'prlimit failed';
	$offset = -s $node->logfile;
	pause_release($node, 'write_short');
	is(pause_wait($node, 'write_after_copy', $offset), $pid,
		"$tag: B's rest is in the ring, held before its file write");

	# C appends to the WAL buffer B's rest was copied from
	my $c = bg_psql($node, 'INSERT INTO t VALUES (6)');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'WALWrite' AND query = 'INSERT INTO t VALUES (6)'})
	  or die "$tag: C does not wait for the WAL write lock";
	my $ins_c = insert_lsn($node);
	cmp_ok($ins_c, '>', $ins, "$tag: C's records were inserted into B's last page while B is held");
	cmp_ok($ins_c, '<', $ins - $ins % $PAGE + $PAGE, "$tag: ... in the page B's rest covers");
	note("$tag: B's write from " . lsn_text($wstart) . ", insert position " . lsn_text($ins)
		  . ' before C, ' . lsn_text($ins_c) . ' after');

	# B writes the rest (the snapshot: without C's record) and is held in its sync
	$offset = -s $node->logfile;
	pause_release($node, 'write_after_copy');
	is(pause_wait($node, 'sync_before_publish', $offset), $pid, "$tag: B wrote the rest, held in its sync");
	my $wend = $ins - $ins % $PAGE + $PAGE;
	same_bytes($node, $wstart, $wend - $wstart, "$tag: B's whole write, with C's record in the WAL buffer only");
	pause_release($node, 'sync_before_publish');
	my $deadline = time + 120;
	Time::HiRes::sleep(0.05) until session_output($s) =~ /^inserted$/m || time > $deadline;
	like(session_output($s), qr/^inserted$/m, "$tag: B's commit acknowledged");
	session_close($s);
	bg_psql_finish($c);
	push @acked, 6, 1001 .. 1300;

	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	cmp_ok($head, '>=', $ins_c, "$tag: the ring's head covers C's commit");
	ok($tail <= $wstart, "$tag: the ring still holds B's write");
	same_bytes($node, $tail, $head - $tail, "$tag: after both commits, everything the ring holds");

	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $n = without_ring_query($node, 'SELECT count(*) FROM t WHERE id IN (' . join(',', @acked) . ')');
	cmp_ok(@acked - ($n // 0), '>', 0, "$tag: negative control: without the ring, acknowledged rows are lost");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	$offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC|DETAIL/ } split /\n/, slurp_file($node->logfile, $offset)));
	if ($node->{_pid})
	{
		like(slurp_file($node->logfile, $offset), $restored_re, "$tag: it restored the ring");
		is(ids_present($node, @acked), join(',', sort { $a <=> $b } @acked),
			"$tag: all " . scalar(@acked) . ' acknowledged rows survive the power cut');
		$node->stop;
	}
}

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

# A full ring, and segments created inside a WAL write: nothing PostgreSQL
# trusts may be outside the ring or pg_wal's durable part.
#
# A WAL write is copied into the ring before it is written, and PostgreSQL
# trusts it (moves its flush pointer) only after its sync, which pmwal
# answers from the ring.  (pmwal 1.x wrote a commit's WAL without fsync and
# copied it into the ring afterwards: between the two, its "write window",
# PostgreSQL trusted WAL only the page cache held; that build is case 1's
# negative control.)  At the sync layer's own dangerous points:
#
#	1. issue 9, item 3: a commit that needs more room than the ring has
#	   must not write first and then wait.  Now a writer that finds the
#	   ring full syncs pg_wal itself before it writes (wal_ring.c reserve,
#	   ring_make_durable); it is held there (durable_after_sync, holding
#	   WALWriteLock) while another session evicts the page its transaction
#	   updated: the eviction must wait for the WAL (the page must not reach
#	   disk), and after a power cut the never-acknowledged update must not
#	   reappear when its xid is handed out again.  Negative control: the
#	   old build held at its write window (commit_after_write) lets the
#	   page reach disk, and the update reappears (run when the old build is
#	   at hand: PMWAL_OLD_LIBDIR, default /work/old on PostgreSQL 15).
#	2. issue 9, item 5: a transaction without an xid that wrote WAL (a
#	   non-transactional logical message) is no commit anyone was
#	   promised: its COMMIT does not wait while a writer that found the
#	   ring full is held in its sync (a commit with an xid does wait).
#	3. issue 14, item 1: WAL crossing into a new segment (created by
#	   XLogFileInit inside a backend's write) while the flusher is
#	   stopped, then a checkpoint whose record lies there, then the power
#	   goes: the segment's directory entry must be durable.  Nobody
#	   prepares segments any more; PostgreSQL's own durable_rename syncs
#	   pg_wal/ (pmwal answers only syncs of WAL segment files).  The
#	   cluster must start, no rename may be undone, nothing acknowledged
#	   may be lost.  (t/016 holds a committer in its sync across new
#	   segments too.)
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

my $MB = 1024 * 1024;
my $started = Time::HiRes::time();

# Commit logical messages until the ring (flusher stopped) holds within
# $slack bytes of its capacity; no commit may find it full on the way.
sub fill_ring
{
	my ($node, $slack) = @_;
	my $full = pmwal_status($node)->{ring_full};
	for (1 .. 40)
	{
		my $st = pmwal_status($node);
		my $room = $st->{capacity} - $st->{bytes_in_use} - $slack;
		last if $room <= 20000;
		my $size = $room > $MB ? $MB : $room - 16384;
		$node->safe_psql('postgres',
			"SELECT pg_logical_emit_message(true, 'fill', repeat('x', $size))");
	}
	my $st = pmwal_status($node);
	die "fill_ring: a fill commit found the ring full" if $st->{ring_full} != $full;
	return $st;
}

# Is a session running $query waiting for the WAL write lock?
sub waits_for_walwrite
{
	my ($node, $query) = @_;
	$query =~ s/'/''/g;
	return $node->poll_query_until('postgres', qq{
SELECT count(*) > 0 FROM pg_stat_activity WHERE query = '$query' AND wait_event = 'WALWrite'});
}

# Wait until the background psql $bg running $query ends (1) or waits
# for the WAL write lock (0).
sub ends_or_waits
{
	my ($node, $bg, $query) = @_;
	$query =~ s/'/''/g;
	my $deadline = Time::HiRes::time() + 120;
	while ($bg->{h}->pumpable)
	{
		die "the query neither ends nor waits: $query" if Time::HiRes::time() > $deadline;
		return 0 if $node->safe_psql('postgres', qq{
SELECT count(*) FROM pg_stat_activity WHERE query = '$query' AND wait_event = 'WALWrite'}) ne '0';
		eval { $bg->{h}->pump_nb };
		Time::HiRes::usleep(50_000);
	}
	return 1;
}

# The evict scenario on $node: t(1, 'orig'), filler bigger than shared
# buffers; $hold->() holds the committer of t's update (returns the
# background psql) at the dangerous point.  Returns (the file of t holds
# the unacknowledged update, v after restart, v after xids were reused).
sub evict_case
{
	my ($node, $name, $hold) = @_;
	powercut_start($node);
	$node->safe_psql('postgres', q{
CREATE EXTENSION pg_prewarm;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'orig');
CREATE TABLE filler AS SELECT g, repeat('f', 200) AS f FROM generate_series(1, 100000) g});
	# prune now: a later query that prunes a catalog page would write WAL
	$node->safe_psql('postgres', 'VACUUM');
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $file = $node->data_dir . '/'
	  . $node->safe_psql('postgres', q{SELECT pg_relation_filepath('t')});
	my $bg = $hold->();

	# evict the updated page: three passes over filler through 16 MB of
	# shared buffers
	my $prewarm = q{SELECT pg_prewarm('filler', 'buffer') FROM generate_series(1, 3)};
	my $ev = bg_psql($node, $prewarm);
	my $done = ends_or_waits($node, $ev, $prewarm);
	note("$name: the eviction " . ($done ? 'completed' : 'waits'));
	my $on_disk = slurp_file($file) =~ /unacked/ ? 1 : 0;

	my $cut = powercut($node);
	note("$name: $cut->{summary}");
	my ($rc) = bg_psql_finish($bg);
	isnt($rc, 0, "$name: the commit of the update was never acknowledged");
	bg_psql_finish($ev);
	forget_pauses($node);
	$node->start;
	my $v1 = $node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 1');
	# hand out the next xids: if the lost transaction's xid is among them,
	# its update becomes visible as if committed
	$node->safe_psql('postgres', 'SELECT txid_current()') for 1 .. 5;
	my $v2 = $node->safe_psql('postgres', 'SELECT v FROM t WHERE id = 1');
	$node->stop;
	return ($on_disk, $v1, $v2, $done);
}

# --- 1. a writer that finds the ring full syncs before it writes -----------
{
	my $node = pmwal_node('evict', size => '8MB', conf => QUIET_WAL . q{
pmwal.flush_interval = 60s
shared_buffers = 16MB
wal_buffers = 4MB
autovacuum = off
});
	my ($on_disk, $v1, $v2, $evicted) = evict_case($node, 'evict', sub {
		$node->safe_psql('postgres', 'CREATE EXTENSION pmwal');
		wait_accelerated($node, 't') or die 'evict: commits are not accelerated';
		stop_server_process($node, $_) for qw(flusher walwriter);
		my $st = fill_ring($node, 200 * 1024);
		note("evict: the ring holds $st->{bytes_in_use} of $st->{capacity} bytes");
		# the update and a 300 kB message, then COMMIT: no room for it
		my ($bg, $pid) = hold_at($node, 'durable_after_sync', [ 'BEGIN',
			q{UPDATE t SET v = 'unacked' WHERE id = 1},
			q{SELECT pg_logical_emit_message(true, 'big', repeat('y', 300000))}, 'COMMIT' ]);
		my $held = pmwal_status($node);
		is($held->{ring_full} - $st->{ring_full}, 1,
			'evict: the commit found the ring full and is held in its own sync of pg_wal');
		my ($ok, $txt) = flush_covered($node);
		ok($ok, "evict: the flush pointer is covered while it is held ($txt)");
		return $bg;
	});
	ok(!$evicted, 'evict: the eviction of the updated page waits for its WAL');
	ok(!$on_disk, 'evict: the page with the unacknowledged update is not on disk when the power goes');
	is($v1, 'orig', 'evict: after the power cut the row is as it was');
	is($v2, $v1, 'evict: the row stays as it was when xids are reused');
}

# --- 1, negative control: the old build at its write window -----------------
SKIP:
{
	my $old = $ENV{PMWAL_OLD_LIBDIR} // (server_major() == 15 ? '/work/old' : '');
	skip 'the old build (PMWAL_OLD_LIBDIR) is not at hand', 3 unless $old && -f "$old/pmwal.so";
	my $node;
	{
		local $ENV{PMWAL_TEST_LIBDIR} = $old;
		$node = pmwal_node('evict_old', size => '8MB', conf => QUIET_WAL . q{
pmwal.flush_interval = 60s
shared_buffers = 16MB
wal_buffers = 4MB
autovacuum = off
});
	}
	my ($on_disk, $v1, $v2) = evict_case($node, 'evict_old', sub {
		$node->safe_psql('postgres', q{CREATE EXTENSION pmwal VERSION '1.0'});
		wait_accelerated($node, 't') or die 'evict_old: commits are not accelerated';
		stop_server_process($node, $_) for qw(flusher walwriter);
		my ($bg) = hold_at($node, 'commit_after_write', [ 'BEGIN',
			q{UPDATE t SET v = 'unacked' WHERE id = 1},
			q{SELECT pg_logical_emit_message(true, 'big', repeat('y', 300000))}, 'COMMIT' ]);
		return $bg;
	});
	ok($on_disk, 'negative control: the old build held in its write window lets the page reach disk');
	is($v1, 'orig', 'negative control: after the power cut the row looks as it was');
	isnt($v2, $v1, "negative control: when xids are reused the lost update reappears ($v2)");
}

# --- 2. a transaction without an xid does not wait (issue 9, item 5) -------
{
	my $node = pmwal_node('readonly', size => '8MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int); CHECKPOINT');
	wait_accelerated($node, 't') or die 'readonly: commits are not accelerated';
	stop_server_process($node, $_) for qw(flusher walwriter);
	my $st = fill_ring($node, 200 * 1024);

	# R writes WAL without an xid in an open transaction
	my $r = psql_session($node);
	send_and_wait($r, "BEGIN;\nSELECT pg_logical_emit_message(false, 'r', 'x');\nSELECT 'wrote';\n", qr/^wrote$/m);
	# C finds the ring full and is held in its sync, holding WALWriteLock
	my ($c) = hold_at($node, 'durable_after_sync',
		q{SELECT pg_logical_emit_message(true, 'c', repeat('z', 300000))});
	is(pmwal_status($node)->{ring_full} - $st->{ring_full}, 1, 'readonly: C found the ring full and is held');
	# X, a commit with an xid, waits behind C
	my $x = bg_psql($node, 'INSERT INTO t VALUES (1)');
	ok(waits_for_walwrite($node, 'INSERT INTO t VALUES (1)'), 'readonly: a commit with an xid waits for the WAL write lock');
	send_and_wait($r, "COMMIT;\nSELECT 'committed';\n", qr/^committed$/m, 30);
	ok(1, 'readonly: R, without an xid, commits while C is held');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE query = 'INSERT INTO t VALUES (1)' AND wait_event = 'WALWrite'}),
		'1', 'readonly: the commit with an xid still waits');
	my ($ok, $txt) = flush_covered($node);
	ok($ok, "readonly: the flush pointer is covered ($txt)");
	pause_release($node, 'durable_after_sync');
	my ($rc_c) = bg_psql_finish($c);
	my ($rc_x) = bg_psql_finish($x);
	is("$rc_c $rc_x", '0 0', 'readonly: C and the commit behind it complete once C is released');
	session_end($r);
	$node->stop('immediate');
}

# --- 3. a checkpoint in a segment created inside a WAL write (14.1) --------
{
	my $node = pmwal_node('ckpt', size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\n");
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die 'ckpt: commits are not accelerated';
	my $load = acked_load_start($node, tag => 'ckpt');
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "ckpt: the load does not run: ${ $load->{err} }";
	stop_server_process($node, 'flusher');
	# the newest segment file now (one may have been created ahead): the
	# load must write into one beyond it, which its writes create
	my ($syncs, @before) = split /\n/, $node->safe_psql('postgres',
		'SELECT sync_rounds::text FROM pmwal_status UNION ALL (SELECT name FROM pg_ls_waldir())');
	my ($seg) = reverse sort grep { /^[0-9A-F]{24}$/ } @before;
	$node->poll_query_until('postgres',
		"SELECT pg_walfile_name(pg_current_wal_insert_lsn()) > '$seg'")
	  or die 'ckpt: the load does not reach the next segment';
	$load->{h}->kill_kill;
	acked_load_finish($load);
	my %had = map { $_ => 1 } @before;
	my @new = grep { !$had{$_} } split /\n/, $node->safe_psql('postgres', 'SELECT name FROM pg_ls_waldir()');
	cmp_ok(scalar @new, '>', 0, "ckpt: the load's writes created a segment (@new)");
	is(pmwal_status($node)->{sync_rounds}, $syncs, 'ckpt: pmwal synced nothing meanwhile (flusher stopped)');
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $ckpt = $node->safe_psql('postgres', 'SELECT pg_walfile_name(checkpoint_lsn) FROM pg_control_checkpoint()');
	ok((grep { $_ eq $ckpt } @new), "ckpt: the checkpoint record is in it ($ckpt)");
	my $cut = powercut($node);
	note("ckpt: $cut->{summary}");
	# The hazard is the directory entry of the segment holding the
	# checkpoint record: pmwal 1.x (before issue 14's fix) created it
	# inside a write without fsync and nothing synced pg_wal/ (the cut then
	# undid its rename and the start failed with "could not locate a valid
	# checkpoint record").
	is($cut->{renames} + $cut->{removed}, 0, 'ckpt: no segment rename or creation was lost in the power cut');
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), 'ckpt: the server starts after the power cut')
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "ckpt: all $n acknowledged commits are present");
		$node->stop;
	}
}

diag(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

# New segments and checkpoints around a held WAL sync, and pages a real
# sync covered that are written again.
#
# PostgreSQL never writes WAL without its own sync: a segment XLogFileInit
# creates inside a WAL write is synced (its zeros, under the temporary
# name) and renamed into place by PostgreSQL's durable_rename, which fsyncs
# pg_wal/ for real (pmwal answers only syncs of WAL segment files).  What
# can go wrong is what the ring claims around such writes:
#
#	A. new segments written while a committer is held in its sync: committer
#	   A is held at sync_before_publish (its WAL written and copied, the
#	   ring's head not yet published, WALWriteLock held); several sessions
#	   insert WAL across more than one segment boundary meanwhile (logical
#	   messages and asynchronous commits, which need no flush); committer B
#	   waits behind A.  Released, B's flush writes all of it, creating
#	   segments inside its write, and its sync is answered from the ring.
#	   Then the power goes, (1) with the WAL only in the ring, or (2) after
#	   a checkpoint whose record lies in a segment created that way.  The
#	   cluster must start, no segment's directory entry may be lost, and A
#	   and B must be there.  Negative control (1): the data directory
#	   started without its ring lacks B.
#	B. a checkpoint's pg_control write (which syncs pg_wal for real and
#	   then empties the ring, wal_ring.c ring_on_control_write) racing a
#	   commit that has made room in the ring and copied its WAL into it but
#	   not written it yet (write_after_copy): the checkpointer is held at
#	   control_before_sync after its own record's flush, the committer W
#	   reaches write_after_copy, the checkpointer syncs and empties the
#	   ring, then W writes and its sync is answered from the ring.  W's
#	   WAL rewrites the page the checkpoint record ended in: it was synced
#	   before W wrote it, and the emptied ring no longer claims that page.
#	   The power goes; W was acknowledged and must be there.  (Before
#	   9e5f472 the pg_control write emptied the ring down to its head:
#	   W's commit was lost -- on PostgreSQL 15 -- or the restore refused
#	   to start, "does not connect to the WAL in pg_wal" -- on 18, where
#	   W's write went on into the next page.)
#	C. a checkpoint whose record lies in the page the previous checkpoint's
#	   sync covered: CHECKPOINT, a commit, CHECKPOINT, all in one WAL page,
#	   then the power goes (1) at once, (2) after a clean shutdown.  The
#	   second pg_control write must have synced its checkpoint record for
#	   real: XLogWrite rewrote that page, but pmwal's durable point (a page
#	   end) did not move.  (Before 9e5f472 that sync was skipped and the
#	   ring emptied: the cluster could not start -- "could not locate a
#	   valid checkpoint record" -- after a power cut, even after a clean
#	   shutdown.)
#	D. the last page of a segment rewritten after a real sync that ended
#	   there: a checkpoint whose record ends in the last page of a segment
#	   (its pg_control write syncs pg_wal up to that segment's end), then
#	   commits in that page, then a commit whose write goes on into the
#	   next segment, then a flusher pass (it frees the ring up to the last
#	   page written, so it must have synced the rewritten page, which lies
#	   before its durable point's segment), and one more commit.  The power goes; the commits in
#	   that page must be there.  Negative control: without the ring the
#	   last commit is missing.
#	   (Before 9e5f472 a sync began at the durable point's segment: the
#	   rewritten page was neither synced nor in the ring, and the restore
#	   refused to start, "does not connect to the WAL in pg_wal".)
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
my $SEG = 16 * $MB;
my $started = Time::HiRes::time();

sub waldir
{
	my ($node) = @_;
	return split /\n/, $node->safe_psql('postgres', 'SELECT name FROM pg_ls_waldir() ORDER BY 1');
}

# --- A. new segments written while a committer is held in its sync ---------
for my $then ('cut', 'checkpoint')
{
	my $name = "segment_$then";
	my $node = pmwal_node($name, size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_buffers = 128MB\n"
		  . "bgwriter_lru_maxpages = 0\nautovacuum = off\nwal_keep_size = 1GB\n");
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (0)');

	# A: held inside its WAL sync, holding WALWriteLock (the WAL writer and
	# the flusher are stopped first)
	my ($a, $apid) = hold_commit($node, sub { "INSERT INTO t VALUES ($_[0])" });
	note("$name: A (pid $apid) held at sync_before_publish");
	my ($ok, $txt) = flush_covered($node);
	ok($ok, "$name: while A is held, the flush pointer is covered ($txt)");

	my ($ins, $seg) = split /\|/, $node->safe_psql('postgres',
		q{SELECT pg_current_wal_insert_lsn(), pg_walfile_name(pg_current_wal_insert_lsn())});
	my @before = waldir($node);
	note("$name: insert $ins in $seg; pg_wal: @before");

	# three sessions insert WAL across two segment boundaries and commit
	# asynchronously: nothing of that needs a flush
	my $per = int((2 * $SEG - lsn_num($ins) % $SEG) / $MB / 3) + 2;
	my @w = map {
		bg_psql($node, 'SET synchronous_commit = off',
			"SELECT count(pg_logical_emit_message(false, 'w$_', repeat('x', $MB))) FROM generate_series(1, $per)",
			"INSERT INTO t VALUES (" . (100 + $_) . ')')
	} 1 .. 3;
	for my $w (@w)
	{
		my ($rc, undef, $err) = bg_psql_finish($w);
		is($rc, 0, "$name: a session inserted ${per} MB and committed asynchronously $err");
	}
	my $ins2 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	cmp_ok(int(lsn_num($ins2) / $SEG), '>=', int(lsn_num($ins) / $SEG) + 2,
		"$name: the insert position ($ins2) is two segments on");
	is(join(' ', waldir($node)), join(' ', @before), "$name: no segment was created yet");

	# B: a synchronous commit waits behind A
	my $b = bg_psql($node, 'INSERT INTO t VALUES (2)');
	$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE query = 'INSERT INTO t VALUES (2)' AND wait_event = 'WALWrite'})
	  or die "$name: B does not wait for the WAL write lock";
	ok(1, "$name: B waits for A's WALWriteLock");

	my $st0 = pmwal_status($node);
	pause_release($node, 'sync_before_publish');
	my ($rc_a, undef, $err_a) = bg_psql_finish($a);
	my ($rc_b, undef, $err_b) = bg_psql_finish($b);
	is($rc_a, 0, "$name: A acknowledged $err_a");
	is($rc_b, 0, "$name: B acknowledged $err_b");
	my @after = waldir($node);
	my %had = map { $_ => 1 } @before;
	my @new = grep { !$had{$_} } @after;
	note("$name: pg_wal after B: @after");
	cmp_ok(scalar @new, '>=', 1, "$name: B's write created segments (@new)");
	my $st = pmwal_status($node);
	cmp_ok($st->{ring_syncs} - $st0->{ring_syncs}, '>', 0,
		"$name: B's syncs were answered from the ring");
	is($st->{retires} - $st0->{retires}, 0, "$name: the ring was not retired");
	cmp_ok(lsn_num($st->{head_lsn}), '>=', lsn_num($ins2),
		"$name: the ring's head ($st->{head_lsn}) covers everything inserted");
	($ok, $txt) = flush_covered($node);
	ok($ok, "$name: after B, the flush pointer is covered ($txt)");

	if ($then eq 'checkpoint')
	{
		$node->safe_psql('postgres', 'CHECKPOINT');
		my $ckpt = $node->safe_psql('postgres',
			'SELECT pg_walfile_name(checkpoint_lsn) FROM pg_control_checkpoint()');
		ok((grep { $_ eq $ckpt } @new), "$name: the checkpoint record is in a segment B's write created ($ckpt)");
	}

	my $cut = powercut($node);
	note("$name: $cut->{summary}");
	is($cut->{removed} + $cut->{renames}, 0,
		"$name: no segment's directory entry was lost in the power cut (PostgreSQL's durable_rename synced pg_wal/)");
	cmp_ok($cut->{undone}, '>', 0, "$name: the cut undid WAL writes not yet synced")
	  if $then eq 'cut';
	if ($then eq 'cut')
	{
		my $without = without_ring_query($node, 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t WHERE id < 100') // 'no start';
		isnt($without, '0,1,2', "$name: negative control: without the ring, the acknowledged commits are not all there ($without)");
	}
	forget_pauses($node);
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$name: the server starts after the power cut")
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		like(slurp_file($node->logfile, $offset), qr/pmwal restored WAL/, "$name: the ring was restored")
		  if $then eq 'cut';
		is(rows($node, 'SELECT id FROM t WHERE id < 100 ORDER BY id'), '0,1,2',
			"$name: every acknowledged synchronous commit is there");
		$node->stop;
	}
}

# --- B. a checkpoint's pg_control write racing a commit's write -------------
{
	my $name = 'control_race';
	my $node = pmwal_node($name, size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n");
	powercut_start($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 3;
	stop_server_process($node, $_) for qw(walwriter flusher);

	# C: the checkpointer, held after its record's flush, before the sync
	# of its pg_control write
	my $offset = -s $node->logfile;
	arm_all($node, 'control_before_sync');
	my $ck = bg_psql($node, 'CHECKPOINT');
	my $cpid = pause_wait($node, 'control_before_sync', $offset);
	is($cpid, $node->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'}),
		"$name: the checkpointer is held before its pg_control write");
	my $st = pmwal_status($node);
	my $ckpt_end = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	note("$name: checkpoint record flushed to $ckpt_end; ring [$st->{tail_lsn}, $st->{head_lsn})");

	# W: a commit held after its copy into the ring, before its write
	my ($w, $wpid) = hold_at($node, 'write_after_copy', 'INSERT INTO t VALUES (4)');
	note("$name: W (pid $wpid) held at write_after_copy");

	# C syncs pg_wal, empties the ring, writes pg_control
	disarm_all($node);
	pause_release($node, 'control_before_sync');
	my ($rc_c, undef, $err_c) = bg_psql_finish($ck);
	is($rc_c, 0, "$name: the checkpoint completed $err_c");
	my ($ok, $txt) = ring_holds_flush_page($node);
	ok($ok, "$name: after the checkpoint, the page W rewrites is still in the ring ($txt)");

	# W writes, and its sync is answered from the ring
	pause_release($node, 'write_after_copy');
	my ($rc_w, undef, $err_w) = bg_psql_finish($w);
	is($rc_w, 0, "$name: W acknowledged $err_w");
	($ok, $txt) = ring_holds_flush_page($node);
	ok($ok, "$name: after W, the page holding W's commit is in the ring ($txt)");

	my $cut = powercut($node);
	note("$name: $cut->{summary}");
	my $without = without_ring_query($node, 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t') // 'no start';
	isnt($without, '1,2,3,4', "$name: negative control: without the ring W is missing ($without)");
	forget_pauses($node);
	$offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$name: the server starts after the power cut")
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		is(rows($node, 'SELECT id FROM t ORDER BY id'), '1,2,3,4',
			"$name: W's acknowledged commit is there");
		$node->stop;
	}
}

# --- C. a checkpoint in the page the previous checkpoint's sync covered -----
for my $then ('cut', 'clean_stop')
{
	my $name = "same_page_$then";
	my $node = pmwal_node($name, size => '16MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n");
	powercut_start($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	# CHECKPOINT, a commit, CHECKPOINT, until the second checkpoint's
	# record ends in the page the first one's sync covered last
	my ($try, $same, $ckpt, $durable);
	for $try (1 .. 10)
	{
		$node->safe_psql('postgres', 'CHECKPOINT');
		$durable = pmwal_status($node)->{durable_lsn};
		$node->safe_psql('postgres', "INSERT INTO t VALUES ($try)");
		$node->safe_psql('postgres', 'CHECKPOINT');
		($ckpt, $same) = split /\|/, $node->safe_psql('postgres',
			"SELECT checkpoint_lsn, pg_current_wal_flush_lsn() < '$durable' FROM pg_control_checkpoint()");
		last if $same eq 't';
	}
	ok($same eq 't', "$name: the second checkpoint's record ($ckpt) lies before the first one's durable point ($durable)");
	my $rows = rows($node, 'SELECT id FROM t ORDER BY id');
	if ($then eq 'clean_stop')
	{
		$node->stop;
		powercut_cut($node);
	}
	else
	{
		powercut($node);
	}
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$name: the server starts after the power cut")
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		is(rows($node, 'SELECT id FROM t ORDER BY id'), $rows, "$name: every acknowledged commit is there ($rows)");
		$node->stop;
	}
}

# --- D. the last page of a segment rewritten after a sync ended there -------
{
	my $name = 'segment_end_page';
	# pmwal.flush_interval = 1s: the flusher passes only when WAL was
	# written past its durable point, that is after the crossing
	my $node = pmwal_node($name, size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 1s\nautovacuum = off\nwal_buffers = 4MB\n");
	powercut_start($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	stop_server_process($node, 'walwriter');
	my $insert = sub { lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()')) };
	# the insert position into the last page of a segment, then a
	# checkpoint (its pg_control write syncs up to the segment's end), then
	# three commits that rewrite that page; again in the next segment if
	# they did not fit (full-page images after the checkpoint, on 18 of
	# hint bits too)
	my ($end, $durable, $flush, $rounds, $in_page, $base);
	for my $try (1 .. 5)
	{
		$base = 10 * $try;
		my $ins = $insert->();
		$end = $ins - $ins % $SEG + $SEG;
		$end += $SEG if $end - $ins < 64 * 1024;
		# messages until the insert position is some 7 kB before the
		# segment's end (8168 bytes of each 8192-byte page hold records)
		while ((my $gap = $end - 7000 - $ins) > 200)
		{
			my $size = int($gap * 8168 / 8192) - 100;
			$size = 1000 if $size < 1000;
			$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'jump', repeat('j', $size))");
			$ins = $insert->();
		}
		$node->safe_psql('postgres', "INSERT INTO t VALUES ($base)");
		$node->safe_psql('postgres', 'CHECKPOINT');
		($flush, $durable, $rounds) = split /\|/, $node->safe_psql('postgres',
			'SELECT pg_current_wal_flush_lsn(), durable_lsn, sync_rounds FROM pmwal_status');
		next unless lsn_num($durable) == $end && lsn_num($flush) > $end - 8192;
		$node->safe_psql('postgres', 'INSERT INTO t VALUES (' . ($base + $_) . ')') for 1 .. 3;
		$in_page = $insert->() < $end;
		last if $in_page;
	}
	is(lsn_num($durable), $end, "$name: the checkpoint's sync ended at the segment's end ($durable)");
	cmp_ok(lsn_num($flush), '>', $end - 8192, "$name: the WAL ended in the segment's last page ($flush)");
	ok($in_page, "$name: three commits after it in the segment's last page");
	# then one goes on into the next segment
	$node->safe_psql('postgres', "BEGIN; SELECT pg_logical_emit_message(true, 'over', repeat('o', 20000)); INSERT INTO t VALUES ($base + 4); COMMIT");
	cmp_ok($insert->(), '>', $end, "$name: a commit went on into the next segment");
	# a flusher pass (within pmwal.flush_interval)
	$node->poll_query_until('postgres', "SELECT sync_rounds > $rounds FROM pmwal_status")
	  or die "$name: the flusher does not pass";
	my $st = pmwal_status($node);
	note("$name: after the flusher's pass: ring [$st->{tail_lsn}, $st->{head_lsn}), durable $st->{durable_lsn}");
	# one more commit, which only the ring holds (the flusher stopped)
	stop_server_process($node, 'flusher');
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($base + 5)");
	my $cut = powercut($node);
	note("$name: $cut->{summary}");
	my $without = without_ring_query($node, "SELECT string_agg((id - $base)::text, ',' ORDER BY id) FROM t WHERE id > $base") // 'no start';
	isnt($without, '1,2,3,4,5', "$name: negative control: without the ring, acknowledged commits are missing ($without)");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$name: the server starts after the power cut")
	  or diag(slurp_file($node->logfile, $offset));
	if ($node->{_pid})
	{
		is(rows($node, "SELECT id - $base FROM t WHERE id > $base ORDER BY id"), '1,2,3,4,5',
			"$name: every acknowledged commit is there");
		$node->stop;
	}
}

diag(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

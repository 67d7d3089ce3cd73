# WAL before data under synchronous replication (issue 23): the relation
# map, the checkpoint record pg_control names and data pages never reach
# the disk ahead of the WAL the ring and pg_wal hold, on a pmwal primary
# with a synchronous standby (synchronous_commit = on).
#
# (The prototype of issue 23 switched fsync off for the commit's own flush,
# so that for a whole standby round trip each of them could get ahead of
# WAL neither fsynced nor in the ring.)  pmwal switches nothing off; it only
# answers the syncs of WAL segment files, and:
#
#  R. Relation map.  write_relmap_file() inserts XLOG_RELMAP_UPDATE and
#     XLogFlush()es it -- answered once the ring holds it -- before the map
#     file is written (15) or renamed into place (16 and later), and then
#     fsyncs the map file itself: pg_filenode.map is not a WAL segment, so
#     its fsync is real (enableFsync is never touched).  So the map on disk
#     never names a relfilenode whose WAL is lost.  Tested: the VACUUM FULL
#     of pg_class makes a real fsync() of the map file (strace), after its
#     WAL write; and VACUUM FULL pg_class under load, one of them waiting
#     for the standby (map written, commit flushed into the ring only),
#     then a power cut: the restored primary's pg_class is the one the map
#     names, amcheck clean, every acknowledged commit and table present.
#  K. Checkpoint record.  Before every write of pg_control pmwal syncs
#     everything written for real (ring_on_control_write): pg_control never
#     names a checkpoint record that only the ring holds.  Tested: (K1) a
#     checkpoint held at its first real sync of pg_wal after its pages
#     (checkpointer_before_presync after a data file, or
#     control_before_sync) -- the data pages it wrote are ahead of pg_wal's
#     durable WAL, only the ring has that WAL -- then a power cut; (K2) a checkpoint held after it wrote
#     pg_control (gdb at SyncPostCheckpoint) then a power cut: the record
#     pg_control names is in pg_wal after the cut, readable without the
#     ring.  Load goes on during both holds.
#  D. Data pages.  FlushBuffer() calls XLogFlush(page LSN) before it
#     writes a page; that flush is answered only once the ring holds the
#     WAL.  So a page on disk is never ahead of the WAL the ring and pg_wal
#     hold together.  Tested: pages written outside any checkpoint (by the
#     bgwriter and by backends evicting buffers, with 2 MB of shared
#     buffers) while pg_wal's durable WAL lags behind their LSNs, then a
#     power cut.  And (P) pages a checkpoint writes of an open
#     transaction, whose WAL only the checkpointer's own XLogFlush put
#     into the ring -- no commit publishes anything after it.  (K1 covers
#     pages written by a checkpoint under load.)
#
# The power cut leaves every data file write in place (tools/powercut cuts
# pg_wal only): the worst case for this rule, a page or map on disk
# whose WAL did not survive in pg_wal.  Each case has a negative control,
# the same data directory started without its ring: it lacks acknowledged
# commits, and (K1, D) has data pages with LSNs beyond the end of its WAL
# -- exactly what the ring prevents -- or cannot even answer (an index
# page refers to a page that only the lost WAL would have written).
#
# How each part fails when the rule is broken (checked by hand against
# modified builds, not kept): R, with the map's fsync a no-op (fsync = off,
# as the prototype had it for the commit): "fsynced it for real" fails.
# K, a build whose pg_control writes skip pmwal's real sync: the checkpoint
# completes naming a record only the ring holds; the restart is refused
# and the copy without the ring cannot start.  P, a build that answers the
# checkpointer's and the bgwriter's WAL syncs without publishing the ring's
# head: the restored WAL ends before the page (and the standby, which was
# sent that WAL, is ahead).  D runs under load, where any later commit
# publishes the head: it is not sharp against that build, P is.
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();

my $pair = sync_pair();
my ($primary, $standby) = @$pair{qw(primary standby)};

sub start_load { return pair_load_start($pair, @_); }
sub wait_rows { return pair_wait_rows($pair, @_); }
sub cut { return pair_cut($pair, @_); }
sub restart_and_check { return pair_restart_and_check($pair, @_); }

# --- R. the relation map ----------------------------------------------------
{
	my $tag = 'relmap';
	my $db = $primary->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'postgres'});
	my $map = $primary->data_dir . "/base/$db/pg_filenode.map";

	# the map file's own fsync is real, and comes after the WAL write
	my $s = client_session($primary);
	my $trace = $primary->basedir . '/relmap.strace';
	my ($sout, $serr) = ('', '');
	my $strace = IPC::Run::start(
		[ 'strace', '-y', '-e', 'trace=openat,write,pwrite64,fsync,fdatasync,rename,renameat,renameat2',
		  '-o', $trace, '-p', $s->{pid} ], '>', \$sout, '2>', \$serr);
	my $deadline = Time::HiRes::time() + 60;
	until ($serr =~ /attached/)
	{
		die "strace does not attach: $serr" if Time::HiRes::time() > $deadline || !$strace->pumpable;
		$strace->pump_nb;
		Time::HiRes::usleep(20_000);
	}
	my $before = pmwal_status($primary);
	send_and_wait($s, "VACUUM FULL pg_class;\n", qr/^VACUUM$/m);
	my $after = pmwal_status($primary);
	$strace->signal('INT');
	$strace->finish;
	my @calls = split /\n/, slurp_file($trace);
	# 15 writes the map in place; 16 and later write pg_filenode.map.tmp
	# and rename it into place: the step that makes the new map the map
	my ($visible) = grep { $calls[$_] =~ /^rename(?:at2?)?\(.*pg_filenode\.map\.tmp.*pg_filenode\.map"/ } 0 .. $#calls;
	($visible) = grep { $calls[$_] =~ /^write\(\d+<[^>]*pg_filenode\.map>/ } 0 .. $#calls
	  unless defined $visible;
	ok(defined $visible, "$tag: the backend wrote the map file") or diag(join("\n", @calls));
	ok((grep { /^fsync\(\d+<[^>]*pg_filenode\.map(?:\.tmp)?>\) = 0/ } @calls),
		"$tag: and fsynced it for real");
	ok(defined $visible && (grep { $calls[$_] =~ /^pwrite64\(\d+<[^>]*pg_wal\/[0-9A-F]{24}>/ } 0 .. $visible - 1),
		"$tag: after writing WAL (its relmap record)");
	ok(!(grep { /^f(?:data)?sync\(\d+<[^>]*pg_wal\/[0-9A-F]{24}>/ } @calls),
		"$tag: whose sync pmwal answered from the ring (no real WAL sync)");
	cmp_ok($after->{ring_syncs}, '>', $before->{ring_syncs}, "$tag: ring_syncs grew");
	session_close($s);

	# VACUUM FULL of pg_class and new tables under load
	my $load = start_load($tag);
	my @tables;
	for my $i (1 .. 3)
	{
		$primary->safe_psql('postgres',
			"CREATE TABLE ddl_$i (id int); INSERT INTO ddl_$i VALUES ($i); VACUUM FULL pg_class");
		push @tables, "ddl_$i";
	}
	wait_rows($load, 100);
	# one more, held waiting for the standby: its map file is written and
	# its commit is flushed -- into the ring only.  Until it ends it holds
	# pg_class locked (as in stock PostgreSQL): a new connection would wait
	# for it, so an observer session is opened, and its queries run, first.
	my $filenode = relmap_filenode($map, 1259);
	my $v = client_session($primary);
	my $o = client_session($primary);
	my $observe = "SELECT wait_event, durable_lsn, pg_current_wal_flush_lsn() FROM pg_stat_activity, pmwal_status WHERE pid = $v->{pid};\n";
	send_and_wait($o, $observe, qr/^\w*\|/m);
	my $receiver = hold_proc($standby, 'walreceiver');
	send_and_wait($v, "VACUUM FULL pg_class;\n");
	my ($durable, $flush);
	$deadline = Time::HiRes::time() + 120;
	while (1)
	{
		my $out = send_and_wait($o, $observe, qr/^\w*\|/m);
		($durable, $flush) = map { lsn_num($_) } $out =~ /^SyncRep\|(\S+)\|(\S+)$/m;
		last if defined $flush;
		die "$tag: the VACUUM FULL does not wait for the standby: $out" if Time::HiRes::time() > $deadline;
		Time::HiRes::usleep(50_000);
	}
	pass("$tag: VACUUM FULL pg_class waits for the standby");
	my $new_filenode = relmap_filenode($map, 1259);
	isnt($new_filenode, $filenode, "$tag: the map file on disk names pg_class's new relfilenode $new_filenode");
	cmp_ok($flush, '>', $durable, "$tag: its WAL is flushed beyond pg_wal's durable WAL (only the ring has it)");

	my ($acked, $without) = cut($tag, $load,
		q{(SELECT count(*) FROM pg_class WHERE relname LIKE 'ddl\__')});
	$_->{h}->kill_kill for ($v, $o);
	release_proc($receiver);
	my ($missing, $ddl) = split /\|/, $without // '';
	# (the tables may be there without their commits: VACUUM FULL froze
	# their pg_class rows into the new, fsynced pg_class the map names)
	ok(!defined $without || $missing > 0 || $ddl < 3,
		"$tag: negative control: without its ring the primary lacks acknowledged commits ("
		  . (defined $without ? "$missing missing, $ddl of 3 tables" : 'it cannot start') . ')');
	restart_and_check($tag, $load, $acked);
	is($primary->safe_psql('postgres', q{SELECT pg_relation_filenode('pg_class')}), $new_filenode,
		"$tag: the restored primary's pg_class is the one the map names (the waiting VACUUM FULL committed)");
	is($primary->safe_psql('postgres', 'SELECT ' . join(' + ', map { "(SELECT count(*) FROM $_)" } @tables)),
		scalar(@tables), "$tag: the tables created by acknowledged commits are there");
	is($primary->safe_psql('postgres', q{
SELECT count(*) FROM (
  SELECT bt_index_parent_check('pg_class_oid_index', true)
  UNION ALL SELECT bt_index_parent_check('pg_class_relname_nsp_index', true)
  UNION ALL SELECT bt_index_parent_check('pg_class_tblspc_relfilenode_index', true)) s}), '3',
		"$tag: amcheck: pg_class's indexes match its heap");
	is($primary->safe_psql('postgres', q{SELECT count(*) FROM verify_heapam('pg_class')}), '0',
		"$tag: amcheck: pg_class's heap is clean");
}

# A CHECKPOINT held at its first real sync of pg_wal after it wrote its
# pages: the checkpointer's own after a data file it synced (wal_ring.c
# ring_on_checkpointer_sync, when 128 kB or more wait), else the one before
# its pg_control write.  Returns the CHECKPOINT's session, the pid held and
# the point.
sub checkpoint_held_before_wal_sync
{
	my ($offset) = @_;
	my @points = qw(checkpointer_before_presync control_before_sync);
	pause_rearm($primary, $_) for @points;
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET pmwal.test_pause = '" . join(',', @points) . "'; SELECT pg_reload_conf()");
	my $ckpt = bg_psql($primary, 'CHECKPOINT');
	my $held_at;
	for (1 .. 3000)
	{
		($held_at) = grep { pause_seen($primary, $_, $offset) } @points;
		last if $held_at;
		Time::HiRes::usleep(20_000);
	}
	return ($ckpt, $held_at ? pause_seen($primary, $held_at, $offset) : undef, $held_at);
}

# --- K1. a checkpoint held before its real sync --------------------------------
{
	my $tag = 'checkpoint before sync';
	my $load = start_load($tag);
	my $ckpt_before = control_checkpoint($primary);
	my $offset = -s $primary->logfile;
	my ($ckpt, $pid, $held_at) = checkpoint_held_before_wal_sync($offset);
	ok($pid, "$tag: the checkpointer is held before its first real sync of pg_wal after its pages ("
		  . ($held_at // 'none') . ')');
	# the next start must not hold its own checkpoint
	$primary->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause');
	wait_rows($load, 300);
	my $durable = lsn_num(pmwal_status($primary)->{durable_lsn});
	my $relpath = $primary->safe_psql('postgres', q{SELECT pg_relation_filepath('t')});
	my ($page_lsn, $pages) = disk_page_lsn_max($primary, $relpath);
	cmp_ok($page_lsn, '>', $durable,
		"$tag: a page of t on disk (of $pages) has LSN " . lsn_text($page_lsn)
		  . ' beyond pg_wal\'s durable WAL ' . lsn_text($durable));
	is(control_checkpoint($primary), $ckpt_before,
		"$tag: pg_control still names the previous checkpoint");

	my ($acked, $without, $err) = cut($tag, $load, q{(SELECT redo_lsn FROM pg_control_checkpoint())});
	bg_psql_finish($ckpt);
	my ($missing, $end) = split /\|/, $without // '';
	ok((defined $without && $missing > 0 && lsn_num($end) < $page_lsn) || copy_broken($err),
		"$tag: negative control: without its ring acknowledged commits are missing and the page is ahead of the WAL");
	restart_and_check($tag, $load, $acked);
	my $redo = lsn_num($primary->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
	cmp_ok($page_lsn, '<=', $redo, "$tag: with its ring the WAL reaches beyond every page on disk");
	is($primary->safe_psql('postgres', q{SELECT bt_index_parent_check('t_pkey', true) IS NOT NULL}), 't',
		"$tag: amcheck: t's index matches its heap");
}

# --- K2. a checkpoint held after it wrote pg_control -------------------------
{
	my $tag = 'checkpoint after pg_control';
	my $load = start_load($tag);
	my $ckpt_before = control_checkpoint($primary);
	my $ckpt_pid = $primary->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
	my $gdb = gdb_break($ckpt_pid, 'SyncPostCheckpoint', leave_stopped => 1);
	my $ckpt = bg_psql($primary, 'CHECKPOINT');
	ok(gdb_wait_hit($gdb, 120, $ckpt->{h}), "$tag: the checkpointer is held after it wrote pg_control");
	wait_rows($load, 300);
	my $ckpt_lsn = control_checkpoint($primary);
	isnt($ckpt_lsn, $ckpt_before, "$tag: pg_control names the new checkpoint $ckpt_lsn");

	my ($acked, $without) = cut($tag, $load, q{(SELECT checkpoint_lsn FROM pg_control_checkpoint())});
	bg_psql_finish($ckpt);
	# the checkpoint record pg_control names survived in pg_wal itself
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pg_waldump', '--path', $primary->data_dir . '/pg_wal', '--timeline', '1',
			'--start', $ckpt_lsn, '--limit', '1' ], '>', \$out, '2>', \$err);
	my ($dumped) = $out =~ /lsn: ([0-9A-F]+\/[0-9A-F]+), prev [0-9A-F\/]+, desc: CHECKPOINT_ONLINE/;
	ok(defined $dumped && lsn_num($dumped) == lsn_num($ckpt_lsn),
		"$tag: after the cut pg_wal holds the checkpoint record pg_control names")
	  or diag("pg_waldump: $err$out");
	# a copy whose pg_control names a record it cannot read does not start
	# ("could not locate a valid checkpoint record")
	my ($missing, $ckpt_copy) = split /\|/, $without // '';
	ok(defined $without && $missing > 0 && lsn_num($ckpt_copy) > lsn_num($ckpt_lsn),
		"$tag: negative control: without its ring the primary starts from that checkpoint, and lacks "
		  . ($missing // '?') . ' acknowledged commits');
	restart_and_check($tag, $load, $acked);
	# the mirror image: the pg_control read at start never named WAL that
	# only the ring held
	is($primary->safe_psql('postgres', q{SELECT bt_index_parent_check('t_pkey', true) IS NOT NULL}), 't',
		"$tag: amcheck: t's index matches its heap");
}

# --- P. a page whose WAL only the checkpointer's own flush put in the ring ---
#
# No commit comes after the page is written (a commit's sync would publish
# everything copied so far and hide a checkpointer whose flush was not
# answered from the ring): an open transaction fills w, the checkpoint
# writes its newest pages, flushing their WAL itself, and is held before
# its pg_control write.
{
	my $tag = 'checkpoint page';
	# the background writer too: cleaning the transaction's newest pages, it
	# would flush their WAL (FlushBuffer) before the checkpoint does
	stop_server_process($primary, $_) for ('walwriter', 'flusher', 'background writer');
	$primary->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pageinspect');
	my $a = client_session($primary);
	send_and_wait($a, "BEGIN;\nINSERT INTO w SELECT g, repeat(md5(g::text), 60) FROM generate_series(100001, 102000) g;\n",
		qr/INSERT 0 2000/);
	# a backend that evicts a dirty page of w flushes the WAL up to that page,
	# and the ring takes whole pages: until the newest page of w (its LSN, in
	# shared buffers) is beyond the last page the ring holds, insert a few
	# rows more.  Not the WAL insert position: other WAL comes after w's
	# newest record (on 19, a hint bit's full-page image of a catalog page
	# that the test's own connections read: the head covered w's newest
	# page while the insert position was past it)
	my ($head, $newest);
	for my $more (1 .. 20)
	{
		$head = lsn_num(pmwal_status($primary)->{head_lsn});
		$newest = lsn_num($primary->safe_psql('postgres',
				q{SELECT max((page_header(get_raw_page('w', b))).lsn) FROM generate_series(greatest(0, pg_relation_size('w') / 8192 - 8), pg_relation_size('w') / 8192 - 1) b}));
		last if $newest > $head;
		my $from = 102000 + 50 * $more;
		send_and_wait($a, "INSERT INTO w SELECT g, repeat(md5(g::text), 60) FROM generate_series($from + 1, $from + 50) g;\n",
			qr/INSERT 0 50/);
	}
	cmp_ok($newest, '>', $head, "$tag: the newest page of w in shared buffers, of the open transaction, is beyond the ring's head");
	my $offset = -s $primary->logfile;
	my ($ckpt, $pid, $held_at) = checkpoint_held_before_wal_sync($offset);
	ok($pid, "$tag: the checkpoint wrote its pages and is held before its first real sync of pg_wal ("
		  . ($held_at // 'none') . ')');
	$primary->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause');
	my $relpath = $primary->safe_psql('postgres', q{SELECT pg_relation_filepath('w')});
	my ($page_lsn) = disk_page_lsn_max($primary, $relpath);
	cmp_ok($page_lsn, '>', $head,
		"$tag: a page of w on disk has LSN " . lsn_text($page_lsn) . ' beyond the ring\'s head before the checkpoint ' . lsn_text($head));
	my $durable = lsn_num(pmwal_status($primary)->{durable_lsn});
	cmp_ok($page_lsn, '>', $durable, "$tag: and beyond pg_wal's durable WAL " . lsn_text($durable));

	my $c = powercut($primary);
	note("$tag: $c->{summary}");
	$a->{h}->kill_kill;
	bg_psql_finish($ckpt);
	my ($end, $err) = without_ring_query($primary, 'SELECT redo_lsn FROM pg_control_checkpoint()',
		fail_ok => 1, conf => "shared_buffers = 128MB\nmax_connections = 30\n");
	ok((defined $end && lsn_num($end) < $page_lsn) || copy_broken($err),
		"$tag: negative control: without its ring the page is ahead of the WAL (which ends at "
		  . ($end // "?: $err") . ')');
	my $off = -s $primary->logfile;
	powercut_start($primary);
	like(slurp_file($primary->logfile, $off), qr/pmwal restored WAL/, "$tag: the primary restored its ring");
	my $redo = lsn_num($primary->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
	cmp_ok($page_lsn, '<=', $redo, "$tag: with its ring the WAL reaches beyond every page on disk");
	is($primary->safe_psql('postgres', q{SELECT count(*) FROM verify_heapam('w')}), '0',
		"$tag: amcheck: w's heap is clean");
	is($primary->safe_psql('postgres', 'SELECT count(*) FROM w WHERE id > 100000'), '0',
		"$tag: the open transaction's rows are not there");
	ok(wait_sync_standbys($primary, 1), "$tag: the standby streams again");
}

# --- D. data pages written outside a checkpoint --------------------------------
{
	my $tag = 'data pages';
	my $load = start_load($tag);
	my $ckpt_before = control_checkpoint($primary);
	my $clean = $primary->safe_psql('postgres', 'SELECT buffers_clean FROM pg_stat_bgwriter');
	# about 10 MB into w, through 2 MB of shared buffers
	$primary->safe_psql('postgres',
		q{INSERT INTO w SELECT g, repeat(md5(g::text), 60) FROM generate_series(1, 5000) g});
	wait_rows($load, 300);
	my $durable = lsn_num(pmwal_status($primary)->{durable_lsn});
	my $relpath = $primary->safe_psql('postgres', q{SELECT pg_relation_filepath('w')});
	my ($page_lsn, $pages) = disk_page_lsn_max($primary, $relpath);
	cmp_ok($page_lsn, '>', $durable,
		"$tag: a page of w on disk (of $pages) has LSN " . lsn_text($page_lsn)
		  . ' beyond pg_wal\'s durable WAL ' . lsn_text($durable));
	is(control_checkpoint($primary), $ckpt_before,
		"$tag: no checkpoint ran: the pages were written by the bgwriter and by backends");
	note("$tag: the bgwriter wrote "
		  . ($primary->safe_psql('postgres', 'SELECT buffers_clean FROM pg_stat_bgwriter') - $clean)
		  . ' buffers meanwhile');

	my ($acked, $without, $err) = cut($tag, $load,
		q{(SELECT redo_lsn FROM pg_control_checkpoint())::text || '|' || (SELECT count(*) FROM w)::text});
	my ($missing, $end, $rows) = split /\|/, $without // '';
	ok((defined $without && ($missing > 0 || $rows < 5000) && lsn_num($end) < $page_lsn) || copy_broken($err),
		"$tag: negative control: without its ring acknowledged commits are missing and the page is ahead of the WAL");
	restart_and_check($tag, $load, $acked);
	is($primary->safe_psql('postgres', 'SELECT count(*) FROM w'), '5000', "$tag: w is whole");
	my $redo = lsn_num($primary->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
	cmp_ok($page_lsn, '<=', $redo, "$tag: with its ring the WAL reaches beyond every page on disk");
	is($primary->safe_psql('postgres', q{SELECT count(*) FROM verify_heapam('w')}), '0',
		"$tag: amcheck: w's heap is clean");
}

ok(!$primary->log_contains(qr/PANIC/), 'the primary logged no PANIC');
$standby->stop;
$primary->stop;
note(sprintf('t/027b took %.0f s', Time::HiRes::time() - $started));
done_testing();

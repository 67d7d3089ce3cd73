# A WAL write that the file system takes only in part (a short write:
# ENOSPC, EDQUOT or EFBIG in the middle of it), and what the ring may claim
# meanwhile.
#
# PostgreSQL's XLogWrite writes whole WAL pages and, when pwrite() returns
# less than it asked for, writes the rest with another pwrite() (or PANICs
# if that fails).  pmwal copies each write into the ring, drains it, then
# writes the ring's copy into the segment.  The ring's head must always be
# a position it can be restored from -- the start of a WAL page, as the
# restore (and pmwal_ctl) require: a head or a tail inside a page makes
# the next start refuse the ring ("has inconsistent positions") with
# acknowledged commits in it.
#
# The short write here is real: the committing backend's RLIMIT_FSIZE is
# lowered (prlimit) to 100 bytes into the second page its next WAL write
# covers (a transaction of a few pages of WAL), so the kernel writes a page
# and 100 bytes -- past the head published before -- and returns; a write
# at the limit fails with EFBIG (PostgreSQL ignores SIGXFSZ).  The backend is held
# right after the short write, before PostgreSQL writes the rest (pause
# point write_short), and each case has another publisher of the ring's
# head come in there:
#
#	fsync_off   with fsync = off every WAL write publishes the ring's head
#	            itself; then the rest of the write fails (EFBIG) and
#	            PostgreSQL PANICs (restart_after_crash off), and the power
#	            is cut after the PANIC.
#	checkpoint  fsync = on; the checkpointer, held by gdb in durable_rename
#	            of a WAL segment it recycles (after its pg_control write),
#	            is let go while the backend is held: its fsync of the
#	            segment is answered from the ring and publishes the head.
#	            Then the power is cut.
#	anchor      the ring is unanchored (pmwal.enabled off) when the short
#	            write passes through; pmwal.enabled is turned on while the
#	            backend is held and its file size limit raised: the rest
#	            of the write -- starting inside a page -- is the first the
#	            ring could take.  It must not anchor the ring there (the
#	            ring does not hold the start of that page).  Then commits
#	            through the ring, and the power is cut.
#
# Each case: the ring's tail and head are page boundaries after the
# dangerous moment; the server starts after the power cut (no "has
# inconsistent positions") and every acknowledged row is there; negative
# control: the same data directory started without its ring lacks them.
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
my $WAL_PATH_RE = '^pg_wal/[0-9A-F]{24}$';
# a transaction whose WAL covers a few pages
my $BIG_INSERT = "INSERT INTO t SELECT g FROM generate_series(1001, 1300) g; SELECT 'inserted';";

# A node whose next WAL writes lie 12 MB into a segment, under a fresh
# power-cut log: a backend's file size limit can then sit inside a page
# its next WAL write covers, far above every other file it writes (its
# relations, the server log, the power-cut log).  The position is reached
# before a clean restart, which starts the power-cut log anew; the
# segments before it are kept (wal_keep_size, until that restart) for the
# next checkpoint to recycle.
# The WAL writer, the flusher and the background writer (which may flush
# WAL before it writes a page) are stopped, unless "keep" names them.
sub short_write_node
{
	my ($tag, %opts) = @_;
	my $node = quiet_node($tag, conf => "wal_keep_size = 64MB\n" . ($opts{conf} // ''));
	my $x = lsn_num($node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $seg = $x - $x % $SEG + $SEG;
	advance_to($node, $seg + 12 * 1024 * 1024, $seg + 12 * 1024 * 1024 + 512 * 1024);
	acked_insert($node, 0);
	# from the restart on, nothing keeps the old segments
	$node->safe_psql('postgres', 'ALTER SYSTEM SET wal_keep_size = 0');
	$node->stop;
	powercut_cut($node);
	powercut_start($node);
	my %keep = map { $_ => 1 } @{ $opts{keep} // [] };
	stop_server_process($node, $_) for grep { !$keep{$_} } ('walwriter', 'flusher', 'background writer');
	return $node;
}

# The ring's tail and head, each a WAL page boundary?
sub positions_whole_pages
{
	my ($node, $tag, $when) = @_;
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	ok($tail % $PAGE == 0 && $head % $PAGE == 0,
		"$tag: $when, the ring's tail and head are page boundaries (" . ring_words($node) . ')');
	return;
}

# A session whose next WAL write is short: it arms write_short, and its
# file size limit is set to 100 bytes into the second page its next WAL
# write covers (that write begins with the page of the WAL flush position:
# XLogWrite rewrites a partly written page from its start).  Returns the
# session and its pid.
sub short_write_session
{
	my ($node, $tag) = @_;
	my $s = psql_session($node);
	my $pid = session_pid($s);
	send_and_wait($s, "SET pmwal.test_pause = 'write_short'; SELECT 'armed';\n", qr/^armed$/m);
	my ($sigign) = slurp_file("/proc/$pid/status") =~ /^SigIgn:\s+([0-9a-f]+)$/m;
	ok(hex($sigign) & (1 << 24), "$tag: the backend ignores SIGXFSZ (a write at its file size limit fails with EFBIG)");
	my $f = flush_lsn($node);
	my $limit = ($f - $f % $PAGE) % $SEG + $PAGE + 100;
	system('prlimit', '--pid', $pid, "--fsize=$limit:") == 0
	  or die "$tag: prlimit --pid $pid --fsize=$limit: failed";
	note("$tag: backend $pid: file size limit $limit, WAL flushed to " . lsn_text($f));
	return ($s, $pid);
}

sub raise_limit
{
	my ($pid) = @_;
	system('prlimit', '--pid', $pid, '--fsize=unlimited:') == 0
	  or die "prlimit --pid $pid --fsize=unlimited: failed";
	return;
}

# After the power cut: the negative control, then the start with the ring,
# every acknowledged row there.
sub check_after_cut
{
	my ($node, $tag, $acked, $only_ring) = @_;
	my $n = without_ring_query($node,
		'SELECT count(*) FROM t WHERE id IN (' . join(',', @$only_ring) . ')');
	my $lost = @$only_ring - ($n // 0);
	cmp_ok($lost, '>', 0,
		"$tag: negative control: without the ring $lost of the " . scalar(@$only_ring)
		  . ' rows acknowledged through it are lost');
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC|DETAIL/ } split /\n/, slurp_file($node->logfile, $offset)));
	return unless $node->{_pid};
	like(slurp_file($node->logfile, $offset), $restored_re, "$tag: it restored the ring");
	is(ids_present($node, @$acked), join(',', sort { $a <=> $b } @$acked),
		"$tag: all " . scalar(@$acked) . ' acknowledged rows survive the power cut');
	$node->stop;
	return;
}

# --- fsync = off: the short write publishes the head itself --------------
{
	my $tag = 'fsync_off';
	my $node = short_write_node($tag, conf => "fsync = off\n");
	my @acked = (1 .. 5);
	acked_insert($node, $_) for @acked;
	my ($s, $pid) = short_write_session($node, $tag);
	my $offset = -s $node->logfile;
	send_and_wait($s, "$BIG_INSERT\n");
	is(pause_wait($node, 'write_short', $offset), $pid, "$tag: the backend's WAL write was short");
	positions_whole_pages($node, $tag, 'after the short write');
	# the rest of the write fails: PANIC
	pause_release($node, 'write_short');
	ok(wait_postmaster_gone($node), "$tag: the server stopped");
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/PANIC:  could not write to log file .*: File too large/,
		"$tag: PostgreSQL PANICked at the rest of the write");
	session_end($s);
	my $cut = powercut_cut($node);
	note("$tag: $cut->{summary}");
	check_after_cut($node, $tag, \@acked, \@acked);
}

# --- fsync = on: the checkpointer's sync of a recycled segment ------------
{
	my $tag = 'checkpoint';
	my $node = short_write_node($tag);
	my $ckpt = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	my $g = gdb_break($ckpt,
		qq{durable_rename if \$_regex((char *) \$rdi, "$WAL_PATH_RE") || \$_regex((char *) \$rsi, "$WAL_PATH_RE")});
	my $bg = bg_psql($node, 'CHECKPOINT');
	ok(gdb_wait_hit($g, 120, $bg->{h}),
		"$tag: the checkpointer is held in durable_rename of a WAL segment, after its pg_control write");
	# commits acknowledged through the ring after the checkpoint's sync
	my @acked = (1 .. 5);
	acked_insert($node, $_) for @acked;
	my ($s, $pid) = short_write_session($node, $tag);
	my $offset = -s $node->logfile;
	send_and_wait($s, "$BIG_INSERT\n");
	is(pause_wait($node, 'write_short', $offset), $pid, "$tag: the backend's WAL write was short");
	my $ring = $node->{pmwal_ring};
	my $head = ring_read_u64($ring, 'head');
	# the checkpointer's fsync of the segment it recycles publishes the head
	gdb_release($g);
	my $deadline = time + 60;
	Time::HiRes::sleep(0.05) while ring_read_u64($ring, 'head') == $head && time < $deadline;
	cmp_ok(ring_read_u64($ring, 'head'), '>', $head,
		"$tag: the checkpointer's sync of a WAL segment published the ring's head");
	positions_whole_pages($node, $tag, 'after the checkpointer published the head');
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	session_end($s);
	eval { bg_psql_finish($bg) };
	check_after_cut($node, $tag, \@acked, \@acked);
}

# --- the rest of a short write is the first the ring could take ------------
{
	my $tag = 'anchor';
	my $node = short_write_node($tag, keep => ['flusher']);
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = off; SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', q{SELECT reason = 'pmwal.enabled is off' FROM pmwal_status})
	  or die "$tag: the flusher did not carry pmwal.enabled = off";
	my @acked = (1);
	acked_insert($node, 1);    # retires the ring: syncs are real now
	my ($s, $pid) = short_write_session($node, $tag);
	my $offset = -s $node->logfile;
	send_and_wait($s, "$BIG_INSERT\n");
	is(pause_wait($node, 'write_short', $offset), $pid,
		"$tag: the backend's WAL write was short (written through: pmwal.enabled is off)");
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = on; SELECT pg_reload_conf()');
	$node->poll_query_until('postgres', q{SELECT reason IS NULL FROM pmwal_status})
	  or die "$tag: the flusher did not carry pmwal.enabled = on";
	raise_limit($pid);
	pause_release($node, 'write_short');
	my $deadline = time + 120;
	Time::HiRes::sleep(0.05) until session_output($s) =~ /^inserted$/m || time > $deadline;
	like(session_output($s), qr/^inserted$/m, "$tag: the rest was written, the transaction acknowledged");
	push @acked, 1001 .. 1300;
	session_close($s);
	positions_whole_pages($node, $tag, 'after the rest of the short write');
	stop_server_process($node, 'flusher');
	acked_insert($node, $_) for 2 .. 4;
	push @acked, 2 .. 4;
	my $st = pmwal_status($node);
	is($st->{accelerated}, 'true', "$tag: commits go through the ring again ($st->{anchors} anchors)");
	positions_whole_pages($node, $tag, 'after commits through the ring');
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	check_after_cut($node, $tag, \@acked, [ 2 .. 4 ]);
}

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

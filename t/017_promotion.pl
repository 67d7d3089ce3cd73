# Promotion (issue 11; converted to the sync layer): a standby that runs
# pmwal on a ring of its own is promoted, takes committing load, and loses
# power while a committer is held inside its WAL sync (sync_before_publish,
# WALWriteLock held: the commits behind it wait).
#
# In recovery pmwal copies nothing; the ring is anchored at the first WAL
# write after the promotion, on the new timeline (wal_ring.c
# follow_timeline, anchor).  That write rewrites the page in which the
# end-of-recovery record ends -- the page where timeline 2 begins, usually
# in its middle -- so the ring's tail is that page's start, before the
# switch point that timeline 2's history file names, until a flusher pass
# or a checkpoint moves it on.
#
#	1. first_page: before the first checkpoint on the new timeline (the
#	   checkpoint the promotion requests is held by gdb, so pg_control
#	   still names the standby's last restartpoint on timeline 1), with the
#	   flusher stopped as soon as it starts: the ring still begins at the
#	   page where timeline 2 begins, before the switch point.  (Found while
#	   converting this test: restore_timeline.c refuses such a ring --
#	   "does not descend from the cluster's timeline 1 before the ring
#	   starts" -- and the start fails; only the ring holds the commits
#	   acknowledged since the promotion.)
#	2. segment_boundary: the same, with timeline 2 beginning at a segment
#	   boundary (the standby replayed a segment switch of the primary and
#	   was disconnected there) and the flusher running: its first real
#	   sync on timeline 2 begins at the timeline's first byte (the byte
#	   before it is of timeline 1, and timeline 2 has no file for that
#	   segment; before 06d3b16 that sync PANICked).
#	3. before_checkpoint: like 1, after flusher passes moved the ring's
#	   tail past that page.
#	4. after_checkpoint: after that checkpoint completed.
#
# In each, the restore must put the ring's WAL back on timeline 2
# (restore_timeline.c: in 1 to 3 pg_control's checkpoint is on timeline
# 1, its minimum recovery point on 2), crash recovery must end on timeline
# 2 (the sync layer never forces a timeline switch; the code before it
# did, and this test checked for timelines 3 and 4), and every commit
# acknowledged on the new primary must be there.  Negative control: a copy
# started without the ring lacks some of them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $started = Time::HiRes::time();
my $primary = pmwal_node('primary', size => '16MB', init => { allows_streaming => 1 });
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
$primary->backup('b');
# WAL after the backup (whose end is a segment switch), so that the
# standbys' replay, and timeline 2, end and begin in the middle of a page
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (8000000000)');

my $SEG = 16 * 1024 * 1024;

# Let $standby replay up to a segment switch of the primary and nothing
# after it, and disconnect it there: its WAL then ends at a segment
# boundary.  Returns that boundary, or undef.
sub end_at_segment_boundary
{
	my ($standby) = @_;
	for (1 .. 5)
	{
		$standby->safe_psql('postgres', 'ALTER SYSTEM RESET primary_conninfo; SELECT pg_reload_conf()');
		my $boundary = $primary->safe_psql('postgres', 'SELECT pg_switch_wal(); SELECT pg_current_wal_lsn()');
		$boundary = (split /\n/, $boundary)[-1];
		$standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$boundary'")
		  or die 'the standby does not replay the switch';
		$standby->safe_psql('postgres', q{ALTER SYSTEM SET primary_conninfo = ''; SELECT pg_reload_conf()});
		$standby->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver')
		  or die 'the walreceiver does not stop';
		return $boundary
		  if $standby->safe_psql('postgres', "SELECT pg_last_wal_replay_lsn() = '$boundary'") eq 't'
		  && lsn_num($boundary) % $SEG == 0;
	}
	return undef;
}

for my $case ('first_page', 'segment_boundary', 'before_checkpoint', 'after_checkpoint')
{
	my $standby = pmwal_standby($primary, $case, 'b', size => '64MB',
		conf => QUIET_WAL . ($case eq 'first_page' ? "pmwal.flush_interval = 60s\n" : ''));
	powercut_start($standby);
	$primary->wait_for_catchup($standby);
	if ($case eq 'segment_boundary')
	{
		my $boundary = end_at_segment_boundary($standby);
		ok(defined $boundary, "$case: the standby's WAL ends at a segment boundary (" . ($boundary // 'none') . ')');
	}

	my $gdb;
	if ($case ne 'after_checkpoint')
	{
		my $ckpt_pid = $standby->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
		$gdb = gdb_break($ckpt_pid, 'CreateCheckPoint', leave_stopped => 1);
	}
	my $offset = -s $standby->logfile;
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: the standby does not leave recovery";
	$standby->poll_query_until('postgres', 'SELECT flusher_pid IS NOT NULL FROM pmwal_status')
	  or die "$case: the flusher does not start after the promotion";
	if ($gdb)
	{
		ok(gdb_wait_hit($gdb, 60), "$case: the checkpoint after the promotion is held");
		$gdb->{h}->finish;
		# the flusher, before it could pass once: the ring's tail stays at
		# the first write after the promotion
		stop_server_process($standby, $_) for grep { $case eq 'first_page' } qw(flusher walwriter);
	}
	else
	{
		$standby->poll_query_until('postgres',
			'SELECT timeline_id = 2 FROM pg_control_checkpoint()')
		  or die "$case: no checkpoint on the new timeline";
	}
	my $history = slurp_file($standby->data_dir . '/pg_wal/00000002.history');
	my ($switch) = $history =~ /^1\s+([0-9A-F]+\/[0-9A-F]+)/m
	  or die "$case: no switch point in 00000002.history: $history";
	note("$case: timeline 2 begins at $switch");

	ok(lsn_num($switch) % $SEG == 0, "$case: timeline 2 begins at a segment boundary")
	  if $case eq 'segment_boundary';
	my $rounds = pmwal_status($standby)->{sync_rounds};
	my $load = acked_load_start($standby, tag => $case, clients => 2);
	$standby->poll_query_until('postgres', 'SELECT count(*) >= 200 FROM t')
	  or die "$case: the load does not run: ${ $load->{err} }";
	if ($case eq 'segment_boundary')
	{
		# the flusher's first real sync on timeline 2: it begins where
		# the timeline's WAL begins (the byte before it is of timeline 1,
		# whose segment there has no timeline 2 file)
		my $deadline = Time::HiRes::time() + 60;
		my $passed;
		until ($passed || Time::HiRes::time() > $deadline || $standby->log_contains(qr/PANIC/, $offset))
		{
			my ($rc, $out) = $standby->psql('postgres', 'SELECT sync_rounds FROM pmwal_status');
			$passed = $rc == 0 && $out > $rounds;
			Time::HiRes::usleep(50_000);
		}
		ok($passed, "$case: the flusher synced pg_wal on timeline 2")
		  or diag(join '', grep { /PANIC|could not/ } split /^/, slurp_file($standby->logfile, $offset));
	}
	my ($anchor) = slurp_file($standby->logfile, $offset) =~
	  /pmwal ring "[^"]+" anchored at ([0-9A-F]+\/[0-9A-F]+) on timeline 2/;
	ok(defined $anchor, "$case: the ring was anchored on timeline 2 at the first write after the promotion ("
		  . ($anchor // 'none') . ')');
	is(ring_read_u64($standby->{pmwal_ring}, 'timeline'), 2, "$case: the ring holds WAL of timeline 2");
	if ($case eq 'before_checkpoint')
	{
		# flusher passes (pmwal.flush_interval = 1s) move the tail on
		$standby->poll_query_until('postgres',
			"SELECT tail_lsn > '$switch'::pg_lsn + 8192 FROM pmwal_status")
		  or die "$case: the ring's tail does not move past the switch point";
	}
	my $st = pmwal_status($standby);
	note("$case: ring [$st->{tail_lsn}, $st->{head_lsn}), $st->{sync_rounds} sync rounds");
	if ($case eq 'first_page')
	{
		# (the walreceiver synced what it received when it stopped; on
		# timeline 2 nothing is synced: pmwal's durable point is the anchor)
		is(lsn_num($st->{durable_lsn}), lsn_num($anchor // '0/0'),
			"$case: pmwal has synced nothing on timeline 2 since the promotion");
		my $sw = lsn_num($switch);
		ok($sw % 8192 != 0 && lsn_num($st->{tail_lsn}) == $sw - $sw % 8192,
			"$case: the ring begins ($st->{tail_lsn}) at the start of the page in which timeline 2 begins ($switch)");
	}

	# a committer held in its WAL sync; the load waits behind it
	stop_server_process($standby, $_) for grep { $case ne 'first_page' } qw(walwriter flusher);
	my ($held, $hpid, $try, $done) = hold_at($standby, 'sync_before_publish',
		sub { 'INSERT INTO t VALUES (' . (9_000_000_000 + $_[0]) . ')' });
	note("$case: committer $hpid held at sync_before_publish (try $try)");
	my ($ok, $txt) = flush_covered($standby);
	ok($ok, "$case: with a committer held in its sync, the flush pointer is covered ($txt)");
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	acked_load_finish($load);
	bg_psql_finish($held);
	cmp_ok($load->{total}, '>=', 200, "$case: $load->{total} commits were acknowledged on the new primary");

	my $pg_control = `pg_controldata -D ${\ $standby->data_dir }`;
	my ($ckpt_tli) = $pg_control =~ /Latest checkpoint's TimeLineID:\s+(\d+)/;
	is($ckpt_tli, $case eq 'after_checkpoint' ? 2 : 1,
		"$case: at the cut pg_control names the checkpoint of timeline $ckpt_tli");

	# negative control: what the ring alone held
	my $without = without_ring_query($standby, 'SELECT count(*) FROM t') // 0;
	cmp_ok($without, '<', $load->{total},
		"$case: negative control: without the ring, acknowledged commits are lost ($without rows for $load->{total} acknowledged)");

	forget_pauses($standby);
	$offset = -s $standby->logfile;
	ok($standby->start(fail_ok => 1), "$case: the new primary starts after the power cut")
	  or diag(slurp_file($standby->logfile, $offset));
	next unless $standby->{_pid};
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: recovery does not end";
	my $log = slurp_file($standby->logfile, $offset);
	like($log, qr/pmwal restored WAL/, "$case: the ring was restored");
	like($log, qr/pmwal ring "[^"]+" holds WAL of timeline 2, which descends from the checkpoint's timeline 1 at \Q$switch\E: restoring it on timeline 2/,
		"$case: the ring's WAL is restored on timeline 2")
	  if $case ne 'after_checkpoint';
	my ($n, $missing) = acked_check($standby, $load);
	is($missing, 0, "$case: all $n commits acknowledged on the new primary are present");
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id > 9000000000 AND id < 9000000000 + ' . $try),
		scalar @$done, "$case: the tries acknowledged before the held one are there");
	unlike($log, qr/selected new timeline ID/, "$case: crash recovery ends on timeline 2, no new timeline");
	is($standby->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '2',
		"$case: the server goes on on timeline 2");
	$standby->safe_psql('postgres', 'INSERT INTO t VALUES (9100000000)');
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = 9100000000'), '1',
		"$case: it takes commits again");
	$standby->stop;
}

diag(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

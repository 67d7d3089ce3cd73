# Issue 20, case 3 (PostgreSQL 17 and later): the WAL summarizer must never
# summarize WAL that a power cut can take.
#
# The summarizer reads WAL up to PostgreSQL's flush pointer and ends a
# summary file at each REDO record.  A checkpoint is held by gdb right after
# it inserted its REDO record (at CheckPointRelationMap); a committer then
# writes that record with its own commit and is held at the build's
# dangerous point (the sync layer: inside the interposed WAL sync, the flush
# pointer not yet moved).  summarize_wal is turned on meanwhile: the
# postmaster starts the summarizer at the reload.  Once it has read all it
# may, no summary may end beyond the flush pointer of before the hold.  Then
# the power is cut.  After the restart the summarizer goes on: no "record
# with incorrect prev-link", and it summarizes through the REDO record of a
# new checkpoint, the summaries contiguous.
#
# max_wal_senders = 0: the old build then ends recovery on timeline 1.
# Control: the same on stock PostgreSQL (the committer held by gdb in its
# WAL fdatasync).  PMWAL_OLD_BUILD (a build of 4b36e65 for this server):
# the summarizer summarized the REDO record only the window wrote, and
# after the cut failed every 10 s with "record with incorrect prev-link".
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
use Time::HiRes ();

plan skip_all => 'the WAL summarizer exists from PostgreSQL 17 on' if server_major() < 17;

sub summarizer_state
{
	my ($node) = @_;
	my ($lsn, $pending, $pid) = split /\|/, $node->safe_psql('postgres',
		'SELECT summarized_lsn, pending_lsn, summarizer_pid FROM pg_get_wal_summarizer_state()');
	return ($lsn, $pending, $pid);
}

# The summaries (start, end) in LSN order, as numbers.
sub summaries
{
	my ($node) = @_;
	return [ map { [ map { lsn_num($_) } split /\|/ ] } split /\n/, $node->safe_psql('postgres',
		'SELECT start_lsn, end_lsn FROM pg_available_wal_summaries() ORDER BY start_lsn') ];
}

sub scenario
{
	my ($tag, $node, $stock) = @_;
	powercut_start($node);
	create_pmwal($node) unless $stock;
	$node->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY)');
	wait_accelerated($node, 't') or die "$tag: commits are not accelerated" unless $stock;
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 20;
	quiesce($node);
	my $flush_before = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	# WAL inserted, not flushed, before the REDO record: after a cut that
	# takes it, new WAL begins below the REDO record's position
	$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'w', repeat('w', 1000))");

	# a checkpoint held right after its REDO record was inserted (at or
	# after $redo_from)
	my $redo_from = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	my $ckpt_pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
	my $gdb = gdb_break($ckpt_pid, 'CheckPointRelationMap', leave_stopped => 1);
	my $ckpt = bg_psql($node, 'CHECKPOINT');
	ok(gdb_wait_hit($gdb, 120, $ckpt->{h}), "$tag: a checkpoint is held after inserting its REDO record");
	my $redo = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');

	# a committer writes it and is held
	my ($held, $s) = hold_commit_or_stock($node, 'INSERT INTO t VALUES (1000)', $stock);
	my $flush = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	note("$tag: flush pointer $flush while the commit is held (before the hold: $flush_before; REDO inserted before $redo)");

	# the summarizer starts now and reads all it may
	$node->safe_psql('postgres', 'ALTER SYSTEM SET summarize_wal = on; SELECT pg_reload_conf()');
	$node->poll_query_until('postgres',
		'SELECT summarizer_pid IS NOT NULL AND pending_lsn >= pg_current_wal_flush_lsn() FROM pg_get_wal_summarizer_state()')
	  or die "$tag: the summarizer does not catch up";
	my ($summarized, $pending) = summarizer_state($node);
	my $ends = summaries($node);
	my $max_end = @$ends ? $ends->[-1][1] : 0;
	# a summary ends at a REDO record: none may end at the held one
	cmp_ok($max_end, '<', lsn_num($redo_from),
		sprintf("$tag: no summary ends at the REDO record the held commit wrote (at or after %s; the last ends at %X/%X, summarized to %s, read to %s)",
			$redo_from, $max_end / 2**32, $max_end % 2**32, $summarized, $pending));
	cmp_ok(lsn_num($pending), '<=', lsn_num($flush_before),
		"$tag: the summarizer read no WAL beyond the flush pointer of before the hold ($flush_before)");

	cut_held($node, $tag, $held, $s);
	eval { $ckpt->{h}->finish };

	my $offset = -s $node->logfile;
	$node->start;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$tag: the node does not leave recovery";
	is($node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
		"$tag: the node is still on timeline 1");
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 2001 .. 2030;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $new_redo = lsn_num($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
	my $deadline = Time::HiRes::time() + 60;
	my $got;
	while (1)
	{
		($got) = summarizer_state($node);
		last if lsn_num($got) >= $new_redo || Time::HiRes::time() > $deadline;
		Time::HiRes::sleep(0.2);
	}
	cmp_ok(lsn_num($got), '>=', $new_redo,
		"$tag: after the restart the summarizer summarizes through the new checkpoint's REDO record (summarized to $got)");
	my $log = slurp_file($node->logfile, $offset);
	unlike($log, qr/incorrect prev-link|could not read WAL from timeline/,
		"$tag: the summarizer reports no \"record with incorrect prev-link\" nor \"could not read WAL\" after the restart");
	my $all = summaries($node);
	my $gaps = grep { $all->[$_][0] != $all->[ $_ - 1 ][1] } 1 .. $#$all;
	is($gaps, 0, "$tag: the " . scalar(@$all) . ' summaries are contiguous');
	$node->stop;
	return;
}

scenario(mode_name(), mode_node('summarizer', size => '64MB', init => { allows_streaming => 1 }, conf => QUIET_WAL . "max_wal_senders = 0\n"), 0);
scenario('stock PostgreSQL', stock_node('stock', init => { allows_streaming => 1 }, conf => "max_wal_senders = 0\n"), 1) unless OLD_BUILD();

done_testing();

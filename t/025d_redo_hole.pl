# Issue 20, case 4: after a power cut, pg_wal must hold every segment a
# consumer still needs, with no hole before the checkpoint's redo segment.
#
# A logical slot needs WAL from before the last checkpoint.  With the
# flusher held and the WAL writer off the CPU, commits carry WAL from a
# segment k into k+1; a CHECKPOINT puts the redo point in k+1; more commits
# follow; the power is cut
#	a. with a committer held at the build's dangerous point
#	   (sync_before_publish), or
#	b. with the checkpointer held at control_before_sync: the checkpoint
#	   record written and its sync answered from the ring, pg_control not
#	   yet written, pmwal's real sync before it not yet made.
# After the restart: every acknowledged commit is there; pg_waldump reads
# the WAL from the slot's restart point to the end without a hole; the slot
# decodes every acknowledged commit.
#
# PMWAL_OLD_BUILD=/work/old (case a only; it has no pg_control sync): the
# restore wrote the ring back only from the redo segment, and the slot
# failed with "could not find record for logical decoding".
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
use IPC::Run ();

my $SEG = 1024 * 1024;

sub scenario
{
	my ($tag, $cut_at) = @_;
	my $node = mode_node($tag, size => '8MB', init => { allows_streaming => 'logical', extra => ['--wal-segsize=1'] },
		conf => QUIET_WAL . "max_wal_senders = 0\nautovacuum = off\n");
	powercut_start($node);
	create_pmwal($node);
	$node->safe_psql('postgres', q{CREATE TABLE t (id int PRIMARY KEY);
SELECT 1 FROM pg_create_logical_replication_slot('s', 'test_decoding')});
	wait_accelerated($node, 't') or die "$tag: commits are not accelerated";
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $restart_lsn = $node->safe_psql('postgres',
		q{SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 's'});
	quiesce($node);

	# commits from segment k into k+1
	my $k = int(insert_lsn($node) / $SEG);
	my $next = 1;
	my @acked;
	my $commit = sub {
		my $from = $next;
		$next += 100;
		$node->safe_psql('postgres',
			"INSERT INTO t SELECT g FROM generate_series($from, $from + 99) g");
		push @acked, $from .. $from + 99;
	};
	$commit->() while int(insert_lsn($node) / $SEG) == $k;
	$commit->() for 1 .. 3;
	note("$tag: commits carried the WAL from segment $k into " . int(insert_lsn($node) / $SEG));

	my ($held, $ckpt);
	if ($cut_at eq 'control_before_sync')
	{
		my $offset = -s $node->logfile;
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET pmwal.test_pause = 'control_before_sync'; SELECT pg_reload_conf()");
		$ckpt = bg_psql($node, 'CHECKPOINT');
		ok(pause_or_exit($node, 'control_before_sync', $offset, $ckpt, 120),
			"$tag: the checkpointer is held before the real sync of its pg_control write");
		$node->safe_psql('postgres', 'ALTER SYSTEM RESET pmwal.test_pause; SELECT pg_reload_conf()');
		$commit->() for 1 .. 5;
	}
	else
	{
		$node->safe_psql('postgres', 'CHECKPOINT');
		my $redo = lsn_num($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
		cmp_ok(int($redo / $SEG), '>', $k, "$tag: the checkpoint's redo point is after segment $k");
		$commit->() for 1 .. 5;
		($held) = hold_commit($node, "INSERT INTO t SELECT g FROM generate_series(900001, 900100) g");
	}
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	bg_psql_finish($_) for grep { defined } $held, $ckpt;

	$node->append_conf('postgresql.conf', "pmwal.test_pause = ''\n");
	$node->start;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$tag: the node does not leave recovery";
	my $list = join(',', @acked);
	is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @acked,
		"$tag: all " . scalar(@acked) . ' acknowledged rows are there');
	my $end = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'pg_waldump', '-q', '-p', $node->data_dir . '/pg_wal',
			'-s', $restart_lsn, '-e', $end ], '>', \$out, '2>', \$err);
	ok($ok, "$tag: pg_waldump reads the WAL from the slot's restart point $restart_lsn to $end")
	  or diag("pg_waldump: $out$err");
	my ($rc, $changes, $derr) = $node->psql('postgres',
		q{SELECT data FROM pg_logical_slot_get_changes('s', NULL, NULL)});
	is($rc, 0, "$tag: the slot decodes") or diag($derr);
	my %decoded = map { $_ => 1 } $changes =~ /^table public\.t: INSERT: id\[integer\]:(\d+)$/mg;
	my $missing = grep { !$decoded{$_} } @acked;
	is($missing, 0, "$tag: the slot decodes every acknowledged commit (" . scalar(@acked) . ')');
	$node->stop;
	return;
}

scenario('held_commit', 'held_commit');
scenario('control_sync', 'control_before_sync') unless OLD_BUILD();

done_testing();

# Issue 20, case 1: a logical slot must never decode, nor save its position
# past, WAL that a power cut can take.
#
# A 3,000-row INSERT is held at the build's dangerous point (the sync
# layer: inside the interposed WAL sync, its WAL copied into the ring and
# written, PostgreSQL's flush pointer not yet moved).  pg_logical_slot_
# get_changes runs meanwhile and saves the slot.  Then every server process
# is killed and the power cut.  After the restart:
#	- nothing the slot returned is missing from the node (it decoded only
#	  durable WAL);
#	- the slot's confirmed position is not beyond the end of the node's WAL;
#	- the node is still on timeline 1;
#	- the slot decodes each of 30 commits made after the restart.
# Run with max_wal_senders = 0 and = 10 (walsenders change nothing now), and
# on stock PostgreSQL (no pmwal; the committer held by gdb in its WAL
# fdatasync) as the control.  PMWAL_OLD_BUILD=/work/old runs it on the
# build before the sync layer, held at commit_after_write: there the slot
# decoded the 3,000 rows of the held commit, which the power cut took (3,020
# rows decoded, 20 on the node), and with max_wal_senders = 10 the node
# came back on timeline 3.  (Issue 20 also saw the saved slot position
# beyond the restarted WAL, so that 0 of 30 later commits decoded; that
# needs the slot saved with the window's position, which this test does
# not force.)
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

my $HELD_FROM = 100_001;
my $HELD_ROWS = 3000;

# The ids of table t that the slot returns now (and consumes).
sub decode
{
	my ($node) = @_;
	my $out = $node->safe_psql('postgres',
		q{SELECT data FROM pg_logical_slot_get_changes('s', NULL, NULL)});
	return [ $out =~ /^table public\.t: INSERT: id\[integer\]:(\d+)$/mg ];
}

sub scenario
{
	my ($tag, $node, $stock) = @_;
	powercut_start($node);
	create_pmwal($node) unless $stock;
	$node->safe_psql('postgres', q{CREATE TABLE t (id int PRIMARY KEY);
SELECT 1 FROM pg_create_logical_replication_slot('s', 'test_decoding')});
	wait_accelerated($node, 't') or die "$tag: commits are not accelerated" unless $stock;
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 20;
	my @decoded = @{ decode($node) };
	is(scalar @decoded, 20, "$tag: the slot decodes the 20 commits made first");

	# a checkpoint logs the running transactions: decoding that record
	# gives the slot a new restart point, so the next confirmation saves
	# the slot to disk at once (LogicalConfirmReceivedLocation)
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $insert = "INSERT INTO t SELECT g FROM generate_series($HELD_FROM, "
	  . ($HELD_FROM + $HELD_ROWS - 1) . ') g';
	my ($held, $s) = hold_commit_or_stock($node, $insert, $stock);
	my $flush = $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	my $got = decode($node);
	push @decoded, @$got;
	my $held_decoded = grep { $_ >= $HELD_FROM } @$got;
	is($held_decoded, 0, "$tag: the slot decodes none of the $HELD_ROWS rows of the held commit");
	my $confirmed = $node->safe_psql('postgres',
		q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'});
	cmp_ok(lsn_num($confirmed), '<=', lsn_num($flush),
		"$tag: while the commit is held the slot is confirmed at $confirmed, not beyond the flush pointer $flush");

	cut_held($node, $tag, $held, $s);

	$node->start;
	is($node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
		"$tag: the node is still on timeline 1");
	my $list = join(',', @decoded);
	is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @decoded,
		"$tag: every row the slot decoded before the power cut is on the node ("
		  . scalar(@decoded) . ')');
	my $end = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	$confirmed = $node->safe_psql('postgres',
		q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'});
	cmp_ok(lsn_num($confirmed), '<=', lsn_num($end),
		"$tag: the slot's position ($confirmed) is not beyond the end of the WAL ($end)");

	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 200_001 .. 200_030;
	my $after = grep { $_ > 200_000 } @{ decode($node) };
	is($after, 30, "$tag: the slot decodes the 30 commits made after the restart");
	$node->stop;
	return;
}

for my $senders (0, 10)
{
	my $node = mode_node("senders$senders", size => '64MB',
		init => { allows_streaming => 'logical' },
		conf => QUIET_WAL . "max_wal_senders = $senders\n");
	scenario(mode_name() . ", max_wal_senders = $senders", $node, 0);
}

unless (OLD_BUILD())
{
	my $node = stock_node('stock', init => { allows_streaming => 'logical' },
		conf => "max_wal_senders = 0\n");
	scenario('stock PostgreSQL', $node, 1);
}

done_testing();

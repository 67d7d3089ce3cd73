# Issue 20, case 2: a logical-replication subscriber running pmwal must
# never confirm to its publisher a transaction that a power cut can take.
#
# The apply worker commits asynchronously (synchronous_commit = off, the
# default for subscriptions): transaction X from the publisher is applied
# and committed on the subscriber with the WAL writer off the CPU, so its
# commit record is only in WAL buffers.  Then another committer on the
# subscriber writes all WAL up to its own commit -- X's too -- and is held
# at the build's dangerous point (the sync layer: inside the interposed WAL
# sync, PostgreSQL's flush pointer not yet moved).  The apply worker keeps
# sending feedback; its flush position comes from the flush pointer
# (get_flush_position), so the publisher's slot must not be confirmed past
# X.  Then the subscriber's power is cut.  After the restart X is gone from
# the subscriber, so the publisher must send it again: the subscriber ends
# equal to the publisher.
#
# Control: the same on a stock subscriber (no pmwal), the committer held by
# gdb in its WAL fdatasync.  PMWAL_OLD_BUILD=/work/old: the old build
# confirmed X and the subscriber ended with 20 rows fewer than the
# publisher, for good.
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

my $publisher = PostgreSQL::Test::Cluster->new('publisher');
$publisher->init(allows_streaming => 'logical');
$publisher->start;

my $ROWS = 'SELECT count(*), coalesce(sum(id), 0) FROM t';

sub scenario
{
	my ($tag, $sub, $stock) = @_;
	my $slot = "s_$tag";
	$slot =~ s/\W/_/g;
	$publisher->safe_psql('postgres', "DELETE FROM t") if $publisher->safe_psql('postgres',
		q{SELECT count(*) FROM pg_class WHERE relname = 't'}) eq '1';
	$publisher->safe_psql('postgres', q{
CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY);
CREATE PUBLICATION p FOR TABLE t}) unless $publisher->safe_psql('postgres',
		q{SELECT count(*) FROM pg_publication WHERE pubname = 'p'}) eq '1';
	$publisher->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1, 1000) g');

	powercut_start($sub);
	create_pmwal($sub) unless $stock;
	$sub->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE l (id int)');
	wait_accelerated($sub, 't') or die "$tag: commits are not accelerated" unless $stock;
	my $connstr = $publisher->connstr . ' dbname=postgres';
	$sub->safe_psql('postgres',
		"CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p WITH (slot_name = '$slot')");
	$sub->poll_query_until('postgres', 'SELECT count(*) = 1000 FROM t')
	  or die "$tag: the subscriber does not sync";
	$publisher->wait_for_catchup('s');

	# X: applied and committed asynchronously, its WAL only in WAL buffers
	quiesce($sub);
	my $before_x = $publisher->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	$publisher->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1001, 1020) g');
	my $x_end = $publisher->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	$sub->poll_query_until('postgres', 'SELECT count(*) = 1020 FROM t')
	  or die "$tag: the subscriber does not apply X";
	cmp_ok(lsn_num($sub->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()')), '<',
		lsn_num($sub->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()')),
		"$tag: X is applied on the subscriber, its commit not yet flushed");

	# another committer writes X's WAL with its own and is held
	my ($held, $s) = hold_commit_or_stock($sub, 'INSERT INTO l VALUES (1)', $stock);
	# two rounds of feedback from the apply worker while the commit is held
	my $t0 = $publisher->safe_psql('postgres', 'SELECT now()');
	$publisher->poll_query_until('postgres',
		"SELECT reply_time > '$t0'::timestamptz + interval '2 s' FROM pg_stat_replication WHERE application_name = 's'")
	  or die "$tag: no feedback from the subscriber";
	my ($confirmed, $flush) = split /\|/, $publisher->safe_psql('postgres',
		"SELECT s.confirmed_flush_lsn, r.flush_lsn FROM pg_replication_slots s, pg_stat_replication r WHERE s.slot_name = '$slot' AND r.application_name = 's'");
	cmp_ok(lsn_num($confirmed), '<', lsn_num($x_end),
		"$tag: the publisher's slot is not confirmed past X ($confirmed, X ends at $x_end)");
	cmp_ok(lsn_num($flush), '<', lsn_num($x_end),
		"$tag: the subscriber does not report X as flushed ($flush)");

	cut_held($sub, $tag, $held, $s);
	$sub->start;
	$publisher->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1021, 1050) g');
	$sub->poll_query_until('postgres', "SELECT count(*) >= 1050 FROM t");
	$publisher->wait_for_catchup('s');
	is($sub->safe_psql('postgres', $ROWS), $publisher->safe_psql('postgres', $ROWS),
		"$tag: the subscriber catches up and ends equal to the publisher (count, sum)");
	$sub->safe_psql('postgres', 'DROP SUBSCRIPTION s');
	$sub->stop;
	return;
}

scenario(mode_name(), mode_node('sub', size => '64MB',
		conf => QUIET_WAL . "wal_receiver_status_interval = 1s\n"), 0);
scenario('stock', stock_node('stock_sub', conf => "wal_receiver_status_interval = 1s\n"), 1)
  unless OLD_BUILD();

$publisher->stop;
done_testing();

# A streaming standby must never be ahead of its primary's durable WAL
# (issue 14, item 4; issue 20): it must not receive WAL that a power cut of
# the primary can take, and after such a cut it follows the restarted
# primary on the same timeline, without refusing and without a forked
# history.  (Replaces t/011_standby_exposure.pl: the exposure word and the
# forced timeline switch are gone.)
#
# A committer on the primary is held at each of the sync layer's dangerous
# points in turn -- write_before_drain (its WAL copied into the ring, not
# yet drained nor written) and sync_before_publish (copied, drained and
# written; inside the interposed WAL sync, the ring's head and PostgreSQL's
# flush pointer not yet moved) -- while a stock standby streams.  The
# standby keeps sending replies (wal_receiver_status_interval = 1 s), so
# the walsender runs its loop; after two rounds neither the walsender's
# sent_lsn nor the standby's flushed_lsn may pass the primary's flush
# pointer of before the hold, and the standby lacks the held row.  Then the
# primary's power is cut -- the ring too, at random, so that an undrained
# copy of the held write survives in part -- and it restarts: timeline 1, every acknowledged
# commit, and the standby reconnects, receives the new commits, ends equal
# to the primary, and every byte of timeline 1 it holds is the primary's.
#
# PMWAL_OLD_BUILD=/work/old (held at commit_after_write): the standby
# received and replayed the held commit, the primary lost it and ended
# recovery on timeline 3, and the standby refused to follow.
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

my $primary = mode_node('primary', size => '16MB', init => { allows_streaming => 1 },
	conf => QUIET_WAL . "wal_keep_size = 1GB\n");
# the ring is cut too: a line the held process copied but did not drain
# (write_before_drain) may survive or not, at random (seed noted)
$primary->{ring_cut} = 'random';
powercut_start($primary);
create_pmwal($primary);
$primary->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY)');
wait_accelerated($primary, 't') or die 'commits are not accelerated';
$primary->backup('b');
my $standby = stock_standby($primary, 'standby', 'b',
	conf => "wal_receiver_status_interval = 1s\nwal_retrieve_retry_interval = 200ms\n");
$standby->start;
my $start = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()'));

my @acked;
my $next = 1;
my @points = OLD_BUILD() ? ('commit_after_write') : ('write_before_drain', 'sync_before_publish');
for my $point (@points)
{
	$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for $next .. $next + 49;
	push @acked, $next .. $next + 49;
	$next += 50;
	$primary->wait_for_catchup($standby);
	my $flush_before = $primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
	my $held_id = 100_000 + $next;
	my ($held) = hold_commit($primary, "INSERT INTO t VALUES ($held_id)", point => $point);
	my $t0 = $primary->safe_psql('postgres', 'SELECT now()');
	$primary->poll_query_until('postgres',
		"SELECT reply_time > '$t0'::timestamptz + interval '2 s' FROM pg_stat_replication")
	  or die "$point: no replies from the standby";
	my ($sent, $flush) = split /\|/, $primary->safe_psql('postgres',
		'SELECT sent_lsn, pg_current_wal_flush_lsn() FROM pg_stat_replication');
	my $received = $standby->safe_psql('postgres', 'SELECT flushed_lsn FROM pg_stat_wal_receiver');
	cmp_ok(lsn_num($sent), '<=', lsn_num($flush_before),
		"$point: the walsender sent WAL up to $sent, not beyond the flush pointer of before the hold ($flush_before; now $flush)");
	cmp_ok(lsn_num($received), '<=', lsn_num($flush_before),
		"$point: the standby received WAL up to $received, not beyond it");
	is($standby->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), '0',
		"$point: the standby does not have the held commit");

	my $cut = powercut($primary);
	note("$point: $cut->{summary}");
	my ($rc) = bg_psql_finish($held);
	isnt($rc, 0, "$point: the held commit was never acknowledged");
	$received = lsn_num($standby->safe_psql('postgres', 'SELECT flushed_lsn FROM pg_stat_wal_receiver')
		  || $standby->safe_psql('postgres', 'SELECT pg_last_wal_receive_lsn()'));

	powercut_start($primary);
	$primary->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$point: the primary does not leave recovery";
	is($primary->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1',
		"$point: the primary is still on timeline 1");
	my $list = join(',', @acked);
	is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"), scalar @acked,
		"$point: the primary has all " . scalar(@acked) . ' acknowledged commits');

	# every byte of timeline 1 the standby holds is the primary's
	my $mine = wal_bytes($standby->data_dir, 1, $start, $received);
	my $theirs = wal_bytes($primary->data_dir, 1, $start, $received);
	my $diff = first_difference($mine, $theirs);
	ok(length($mine) == $received - $start && length($theirs) == length($mine) && !defined $diff,
		sprintf("$point: the standby's %d bytes of timeline 1 are the primary's", $received - $start))
	  or diag(sprintf('lengths %d and %d; first difference at %s', length($mine), length($theirs),
			defined $diff ? sprintf('%X/%X', ($start + $diff) / 2**32, ($start + $diff) % 2**32) : '-'));

	$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for $next .. $next + 19;
	push @acked, $next .. $next + 19;
	$next += 20;
	standby_follows($primary, $standby, $point);
}

$standby->stop;
$primary->stop;
done_testing();

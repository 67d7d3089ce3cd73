# A standby must not silently end up ahead of its primary's durable WAL
# (issue 14, item 4).
#
# Between a committer's write without fsync and its ring copy, PostgreSQL's
# flush pointer already covers that WAL, so a walsender ships it.  If the
# primary loses power inside that window, the restored primary lacks WAL a
# standby has replayed, and then writes different WAL at the same LSNs.
# pmwal marks the ring "exposed" before such a window opens (when WAL can
# leave the server at all), and a restore that finds the mark ends recovery
# on a new timeline: the standby then sees a fork behind its position and
# refuses to follow, instead of splicing two histories.
#
# The committer is held exactly in its window (pause point
# commit_after_write) while the standby replays its WAL; then the primary
# is killed and its power cut.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = pmwal_node('primary', size => '16MB', init => { allows_streaming => 1 },
	conf => QUIET_WAL . "pmwal.flush_interval = 60s\n");
powercut_start($primary);
$primary->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY)');
wait_accelerated($primary, 't') or die 'commits are not accelerated';
$primary->backup('b');

# a stock streaming standby (its own copy of postgresql.conf names the
# primary's ring: it must not load pmwal at all)
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$standby->start;

$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 50;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '50',
	'the standby has the 50 acknowledged rows');

# hold a committer between its write without fsync and its ring copy.  The
# WAL writer, woken by the asynchronous commit record, could flush it for
# real first, and the flusher copies a held committer's WAL within 10 ms:
# hold_in_write_window stops both, standing for a committer and a flusher
# that the scheduler leaves off the CPU.
my @acked = (1 .. 50);
my ($held, $held_id, $acked_on_the_way) = hold_in_write_window($primary, 't', 42000);
push @acked, @$acked_on_the_way;
ok($held, 'a commit is held in its write window');
my $flush = $primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
$standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$flush'")
  or die 'the standby does not replay the held commit';
is($standby->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), '1',
	'the standby replayed the commit the primary has not made durable');

my $cut = powercut($primary);
note("primary: $cut->{summary}");
my ($rc) = bg_psql_finish($held);
isnt($rc, 0, 'the held commit was never acknowledged');

my $offset = -s $primary->logfile;
$primary->start;
# archive recovery: pg_ctl returns once it has begun
$primary->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the primary does not finish recovery';
my $log = slurp_file($primary->logfile, $offset);
like($log, qr/WARNING:  pmwal: WAL after [0-9A-F\/]+ may have reached standbys or the WAL archive without surviving here; recovery will end on a new timeline/,
	'the primary says why it ends recovery on a new timeline');
like($log, qr/pmwal leaves timeline 2 to a standby's promotion: recovery ends on timeline 3 or later/,
	'timeline 2 is left to a promotion of the standby');
is($primary->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '3',
	'the primary is on timeline 3');
my $acked_list = join(',', @acked);
is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($acked_list)"), scalar(@acked),
	'the primary kept every acknowledged row');
is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), '0',
	'the primary lost the never-acknowledged row the standby has');
ok(!-e $primary->data_dir . '/recovery.signal', 'recovery.signal is gone after the recovery');

# the primary goes on; the standby must refuse, not splice
$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 100 .. 149;
my $refused = 0;
for (1 .. 300)
{
	last if $refused = slurp_file($standby->logfile) =~
	  /(is not in this server's history|forked off current database system timeline)/;
	Time::HiRes::sleep(0.1);
}
ok($refused, 'the standby refuses the primary\'s new history (it holds WAL beyond the fork)');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id >= 100 AND id < 200'), '0',
	'the standby applied none of the primary\'s new WAL');

# a standby that is not ahead follows the new timeline
my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
$primary->backup('b2');
$standby2->init_from_backup($primary, 'b2', has_streaming => 1);
$standby2->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$standby2->start;
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (150)');
$primary->wait_for_catchup($standby2);
is($standby2->safe_psql('postgres', "SELECT count(*) FROM t WHERE id <> $held_id"), 101 + @acked - 50,
	'a standby made after the fork follows timeline 3');

$standby2->stop;
$standby->stop('immediate');
$primary->stop;

done_testing();

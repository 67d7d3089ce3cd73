# A standby running pmwal is promoted where its WAL ends at a segment
# boundary (the primary's last record was a WAL switch): the new timeline
# has no file for the segment before the boundary.  pmwal's first real
# sync after the promotion (the checkpoint's pg_control write, the flusher)
# starts at the segment of the byte before its durable point, which it
# must not take for a segment that went missing: the new primary must run
# on, and keep what it acknowledged through a power cut.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'the old build has no durable point of this kind' if OLD_BUILD();

my $SEG = 16 * 1024 * 1024;
my $primary = mode_node('primary', size => '64MB', init => { allows_streaming => 1 }, conf => QUIET_WAL);
$primary->start;
create_pmwal($primary);
$primary->safe_psql('postgres', 'CREATE TABLE t (id int PRIMARY KEY)');
$primary->backup('b');
my $standby = mode_standby($primary, 'standby', 'b', size => '64MB', conf => QUIET_WAL);
$standby->start;

$primary->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 10;
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
$primary->wait_for_catchup($standby);
# nothing more from the primary: not even a shutdown checkpoint
$primary->stop('immediate');
my $end = lsn_num($standby->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()'));
is($end % $SEG, 0, sprintf('the standby\'s WAL ends at a segment boundary (%X/%X)', $end / 2**32, $end % 2**32));

my $offset = -s $standby->logfile;
powercut_kill($standby);
powercut_start($standby);
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby does not leave recovery';
$standby->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 11 .. 20;
my ($rc, $out, $err) = $standby->psql('postgres', 'CHECKPOINT');
is($rc, 0, 'a checkpoint on the new primary succeeds') or diag($err);
if ($rc != 0 && system('pg_ctl', 'status', '-D', $standby->data_dir) != 0)
{
	my $log = slurp_file($standby->logfile, $offset);
	fail('the new primary runs on: ' . (($log =~ /(PANIC:.*)/)[0] // 'it is gone'));
	$standby->{_pid} = undef;
	done_testing();
	exit;
}
$standby->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 21 .. 30;
my $log = slurp_file($standby->logfile, $offset);
unlike($log, qr/PANIC/, 'no PANIC on the new primary') or diag(($log =~ /(PANIC:.*)/)[0]);
is($standby->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '2',
	'the new primary is on timeline 2');
my $cut = powercut($standby);
note($cut->{summary});
$standby->start;
is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '30',
	'after a power cut the new primary has all 30 acknowledged rows');
$standby->stop;
done_testing();

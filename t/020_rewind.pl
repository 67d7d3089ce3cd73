# pg_rewind of an old primary whose ring still holds WAL (issues 11, 20).
#
# A primary with a streaming standby (pmwal on both) goes on committing
# after the standby stopped, so it holds acknowledged commits the standby
# never received, and loses power with a committer held at the sync
# layer's dangerous point (sync_before_publish): its ring holds WAL that
# pg_wal lacks.  The standby is promoted (timeline 2) and takes commits;
# pg_rewind then makes the old primary a copy of the new one.  pg_rewind
# first runs the old primary in single-user mode with fsync off
# ("postgres --single -F") to finish its crash recovery: pmwal restores the
# ring there, with real syncs, and the recovery ends on timeline 1 (the
# sync layer never forces a new timeline), so pg_rewind finds where the
# histories fork.  The rewound node starts as a standby of the new primary,
# its ring empty, with exactly the new primary's rows: every commit
# acknowledged there.
#
# Negative control: a copy of the old primary's data directory started
# without the ring lacks commits it acknowledged.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old = pmwal_node('old', size => '64MB', init => { allows_streaming => 1 },
	conf => QUIET_WAL . "wal_log_hints = on\nwal_keep_size = 1GB\n");
powercut_start($old);
$old->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
wait_accelerated($old, 't') or die 'commits are not accelerated';
$old->backup('b');
my $new = pmwal_standby($old, 'new', 'b', size => '64MB');
$new->start;

my $load = acked_load_start($old, tag => 'old');
$old->poll_query_until('postgres', 'SELECT count(*) >= 3000 FROM t')
  or die "the load does not run: ${ $load->{err} }";
$old->wait_for_catchup($new);
# the standby stops; the old primary commits on alone, through the ring
# (flusher and WAL writer held), until a committer is held in its WAL sync
$new->stop;
my $count = $old->safe_psql('postgres', 'SELECT count(*) FROM t');
$old->poll_query_until('postgres', "SELECT count(*) >= $count + 2000 FROM t")
  or die 'the load does not go on';
my ($held) = hold_commit($old, sub { 'INSERT INTO t VALUES (' . (-100 - $_[0]) . ')' });
my $cut = powercut($old);
note($cut->{summary});
acked_load_finish($load);
my ($rc) = bg_psql_finish($held);
isnt($rc, 0, 'the held commit was never acknowledged');
cmp_ok(ring_read_u64($old->{pmwal_ring}, 'head'), '>', ring_read_u64($old->{pmwal_ring}, 'tail'),
	"the old primary's ring holds WAL");
my $acked_list_sql = "SELECT count(*) FROM t";
my $noring = without_ring_query($old, 'SELECT count(*) FROM t');
cmp_ok($noring // 0, '<', $load->{total},
	"negative control: without the ring the old primary has " . ($noring // 'no start')
	  . " rows, fewer than the $load->{total} it acknowledged");

$new->start;
$new->promote;
$new->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby does not leave recovery';
my $load2 = acked_load_start($new, tag => 'new', base => 10_000_000_000);
$new->poll_query_until('postgres', 'SELECT count(*) >= 500 FROM t WHERE id > 10000000000')
  or die "the load on the new primary does not run: ${ $load2->{err} }";
$load2->{h}->kill_kill;
acked_load_finish($load2);
$new->safe_psql('postgres', 'CHECKPOINT');
my $new_tli = $new->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
is($new_tli, '2', 'the promoted standby is on timeline 2');

# pg_rewind copies postgresql.conf from the source: on one machine that
# names the new primary's ring (refused as in use); on real machines every
# node has its ring at the same path.  Keep the old primary's own.
my $conf = slurp_file($old->data_dir . '/postgresql.conf');

# pg_rewind, as an operator runs it: the old primary was not shut down
# cleanly, so pg_rewind runs its crash recovery in single-user mode first
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ 'pg_rewind', '--target-pgdata', $old->data_dir,
	  '--source-server', $new->connstr('postgres'), '--progress' ],
	'>', \$out, '2>', \$err);
ok($ok, 'pg_rewind succeeds');
note("pg_rewind:\n$out$err");
like($err, qr/executing "[^"]*postgres" for target server to complete crash recovery/,
	'pg_rewind ran the single-user crash recovery');
like($err, qr/pmwal restored WAL/, 'pmwal restored the ring in that single-user run');
unlike($err, qr/selected new timeline ID/, "the old primary's recovery ended on its timeline, 1");
like($err, qr/servers diverged at WAL location [0-9A-F\/]+ on timeline 1/,
	'pg_rewind found where the histories fork');
is(ring_read_u64($old->{pmwal_ring}, 'head'), ring_read_u64($old->{pmwal_ring}, 'tail'),
	"the old primary's ring is empty after the rewind");

# the old primary follows the new one
open my $fh, '>', $old->data_dir . '/postgresql.conf' or die $!;
print $fh $conf;
close $fh;
$old->enable_streaming($new);
$old->start;
$new->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
$new->wait_for_catchup($old);
my ($n, $missing) = acked_check($old, $load2);
is($missing, 0, "the rewound node has all $n commits acknowledged on the new primary");
is($old->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id = -1'), '1',
	'and follows the new primary');
my $rows = 'SELECT count(*), sum(id) FROM t';
is($old->safe_psql('postgres', $rows), $new->safe_psql('postgres', $rows),
	"the rewound node has exactly the new primary's rows");
$old->stop;
$new->stop;
done_testing();

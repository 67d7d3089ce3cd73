# pg_rewind of an old primary whose ring still holds WAL (issue 11).
#
# A primary with a streaming standby (pmwal on both) loses power with a
# committer held inside its write window, after the standby replayed that
# commit: the standby holds WAL the primary's restore will not have.  The
# standby is promoted and takes commits; pg_rewind then makes the old
# primary a copy of the new one.  pg_rewind first runs the old primary in
# single-user mode with fsync off ("postgres --single -F") to finish its
# crash recovery: pmwal restores the ring there, with real syncs, and, as
# a write window was open, recovery ends on a new timeline -- which must
# not be the one the standby's promotion took, or pg_rewind finds "the
# same timeline" and does nothing.  The rewound node starts as a standby
# of the new primary, its ring empty, with exactly the new primary's rows:
# every commit acknowledged there, and the held one the standby had.
#
# Run against the build before the timeline reservation (12a9b80), the
# old primary's recovery took timeline 2 as the promotion did, pg_rewind
# said "no rewind required", and the rewound node never caught up.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
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

# the load goes on through the ring alone while a committer is held in
# its window (the flusher is held too)
my ($held, $held_id) = hold_in_write_window($old, 't', 9_000_000_000);
my $flush = $old->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()');
$new->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$flush'")
  or die 'the standby does not replay the held commit';
is($new->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), '1',
	'the standby replayed a commit the old primary has not made durable');
my $cut = powercut($old);
note($cut->{summary});
acked_load_finish($load);
my ($rc) = bg_psql_finish($held);
isnt($rc, 0, 'the held commit was never acknowledged');
cmp_ok(ring_read_u64($old->{pmwal_ring}, 'head'), '>', ring_read_u64($old->{pmwal_ring}, 'tail'),
	"the old primary's ring holds WAL");

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
like($err, qr/recovery will end on a new timeline/, 'a write window was open: a new timeline');
like($err, qr/pmwal leaves timeline $new_tli to a standby's promotion/,
	"pmwal left timeline $new_tli to the standby's promotion");
my ($old_tli) = $err =~ /selected new timeline ID: (\d+)/;
isnt($old_tli // $new_tli, $new_tli,
	"the old primary's recovery ended on timeline " . ($old_tli // '?') . ", not the new primary's $new_tli");
like($err, qr/servers diverged at WAL location/, 'pg_rewind found where the histories fork');
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
is($old->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN (-1, $held_id)"), '2',
	'and the commit the standby had when the old primary lost it, and follows the new primary');
my $rows = 'SELECT count(*), sum(id) FROM t';
is($old->safe_psql('postgres', $rows), $new->safe_psql('postgres', $rows),
	"the rewound node has exactly the new primary's rows");
$old->stop;
$new->stop;
done_testing();

# An immediate shutdown is not a power cut (issue 11).
#
# "pg_ctl stop -m immediate" (what HA tools use to fail over fast) kills
# every server process, but the operating system keeps what they wrote.
# Once the last of them is gone, the postmaster syncs pg_wal and empties
# the ring: the next start restores nothing and does not end recovery on a
# new timeline, even though a committer was held inside its write window
# with walsenders running (the ring was exposed).  A power cut right after
# the stop takes nothing: every acknowledged commit is there.
#
# Then a backend that does not answer the shutdown (stopped): the
# postmaster SIGKILLs it after 5 s, and syncs only once it is gone.  (A
# process still attached to shared memory when the postmaster exits keeps
# the ring for the next start's restore; a postmaster that is killed runs
# nothing at all -- the power-cut tests.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = pmwal_node('node', size => '64MB', init => { allows_streaming => 1 }, conf => QUIET_WAL);
powercut_start($node);
$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
wait_accelerated($node, 't') or die 'commits are not accelerated';

my $load = acked_load_start($node, tag => 'load');
$node->poll_query_until('postgres', 'SELECT count(*) >= 2000 FROM t')
  or die "the load does not run: ${ $load->{err} }";
$load->{h}->kill_kill;
acked_load_finish($load);
my ($held, $held_id) = hold_in_write_window($node, 't', 9_000_000_000);
cmp_ok(ring_read_u64($node->{pmwal_ring}, 'exposed'), '>', 0, 'the ring is exposed');

my $offset = -s $node->logfile;
$node->stop('immediate');
bg_psql_finish($held);
like(slurp_file($node->logfile, $offset),
	qr/pmwal synced pg_wal from [0-9A-F\/]+ after the last server process exited; the ring is empty/,
	'after the immediate shutdown the postmaster synced pg_wal and emptied the ring');
is(ring_read_u64($node->{pmwal_ring}, 'head'), ring_read_u64($node->{pmwal_ring}, 'tail'), 'the ring is empty');
is(ring_read_u64($node->{pmwal_ring}, 'exposed'), 0, 'and not exposed');
my $cut = powercut_cut($node);
is($cut->{undone}, 0, 'a power cut now takes no WAL write');

$offset = -s $node->logfile;
powercut_start($node);
my $log = slurp_file($node->logfile, $offset);
unlike($log, qr/pmwal restored WAL/, 'the next start restores nothing');
unlike($log, qr/new timeline/, 'and stays on its timeline');
$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'no end of recovery';
is($node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '1', 'timeline 1');
my ($acked, $missing) = acked_check($node, $load);
is($missing, 0, "all $acked acknowledged commits are there");

# a backend that does not answer the shutdown
my $load2 = acked_load_start($node, tag => 'load2', base => 20_000_000_000);
$node->poll_query_until('postgres', 'SELECT count(*) >= 500 FROM t WHERE id > 20000000000')
  or die "the second load does not run: ${ $load2->{err} }";
my $orphan = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() LIMIT 1});
kill 'STOP', $orphan;
$offset = -s $node->logfile;
# SIGQUIT reaches a stopped process only once it runs again: the
# postmaster waits 5 s, SIGKILLs it, and exits when it is gone
$node->stop('immediate');
$load2->{h}->kill_kill;
acked_load_finish($load2);
like(slurp_file($node->logfile, $offset), qr/pmwal synced pg_wal .* the ring is empty/,
	'a straggler SIGKILLed by the postmaster is gone before the postmaster exits');
powercut_cut($node);
$node->start;
($acked, $missing) = acked_check($node, $load2);
is($missing, 0, "all $acked commits acknowledged since are there");
$node->stop;
done_testing();

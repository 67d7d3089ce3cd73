# A write window whose write runs past what was decided before it (found
# in review after issues 9 and 14).  write_window_open() checks that all WAL
# inserted so far stays in segments the flusher prepared, but the write
# (XLogFlush) also writes WAL other sessions insert while the window is
# open.  When that reaches a segment nobody prepared, XLogFileInit creates
# it inside the write without fsync: neither the file nor its pg_wal/ entry
# is synced.  The window must sync them before it closes (it counts a
# fallback_overrun); otherwise a later real flush into that segment -- a
# commit (1) or a checkpoint (2) -- is trusted while a power cut can still
# take the segment: an acknowledged commit is lost, or the checkpoint
# record pg_control names is gone and the cluster cannot start.
#
# Deterministic: commit A is held in its window before its write; the WAL
# writer and the flusher are stopped (the scheduler could leave them off
# the CPU); another session inserts more than a segment of WAL; A writes.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;

for my $then ('commit', 'checkpoint')
{
my $node = pmwal_node("then_$then", size => '128MB',
	conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_buffers = 128MB\nbgwriter_lru_maxpages = 0\nautovacuum = off\nwal_keep_size = 1GB\n");
powercut_start($node);
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id int PRIMARY KEY); CHECKPOINT');
wait_accelerated($node, 't') or die 'commits are not accelerated';
# the flusher has prepared the segments for the current position
$node->safe_psql('postgres', 'INSERT INTO t VALUES (0)');
$node->poll_query_until('postgres', 'SELECT segments_prepared >= 2 FROM pmwal_status')
  or die 'the flusher prepares no segments';


# A: a commit held inside its window, before its write
my $offset = -s $node->logfile;
my $a = bg_psql($node, q{SET pmwal.test_pause = 'commit_before_write'},
	'INSERT INTO t VALUES (1)');
my $apid = pause_wait($node, 'commit_before_write', $offset);
note("A held in its window (pid $apid)");

stop_server_process($node, $_) for qw(walwriter flusher);

my ($ins, $seg) = split /\|/, $node->safe_psql('postgres',
	q{SELECT pg_current_wal_insert_lsn(), pg_walfile_name(pg_current_wal_insert_lsn())});
my $st = pmwal_status($node);
note("insert $ins in $seg; prepared segments so far $st->{segments_prepared}");
my @before = split /\n/, $node->safe_psql('postgres', 'SELECT name FROM pg_ls_waldir() ORDER BY 1');
note("pg_wal before: @before");

# another session inserts ~ 2 segments of WAL without flushing it
my $off_in_seg = lsn_num($ins) % (16 * $MB);
my $need = int((32 * $MB - $off_in_seg) / $MB) + 2;
$node->safe_psql('postgres',
	"SELECT count(pg_logical_emit_message(false, 'p', repeat('x', $MB))) FROM generate_series(1, $need)");
my $ins2 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
note("inserted $need MB of WAL, insert now $ins2");

# A writes everything up to the insert position without fsync, copies it
pause_release($node, 'commit_before_write');
my $overruns = pmwal_status($node)->{fallback_overrun};
my ($rc) = bg_psql_finish($a);
is($rc, 0, "$then: A committed");
my @after = split /\n/, $node->safe_psql('postgres', 'SELECT name FROM pg_ls_waldir() ORDER BY 1');
note("pg_wal after A: @after");
$st = pmwal_status($node);
note("after A: head $st->{head_lsn} tail $st->{tail_lsn} fallback_overrun $st->{fallback_overrun}");
cmp_ok(scalar @after, '>', scalar @before, "$then: A's write created a segment");
is($st->{fallback_overrun} - $overruns, 1, "$then: A's window synced what its write created (fallback_overrun)");

# then a real flush into the segment A's write created: a commit B, or a
# checkpoint (wal_keep_size: no segment is recycled, whose rename would
# sync pg_wal/ by chance)
if ($then eq 'commit')
{
	$node->safe_psql('postgres', 'INSERT INTO t VALUES (2)');
}
else
{
	$node->safe_psql('postgres', 'CHECKPOINT');
}

my $cut = powercut($node);
note("cut: $cut->{summary}");
my $off2 = -s $node->logfile;
ok($node->start(fail_ok => 1), "$then: the server starts after the power cut")
  or diag(slurp_file($node->logfile, $off2));
if ($node->{_pid})
{
	is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t'),
		$then eq 'commit' ? '0,1,2' : '0,1', "$then: every acknowledged commit survives");
	$node->stop;
}
}
done_testing();

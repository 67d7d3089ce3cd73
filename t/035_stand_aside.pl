# pmwal_status tells the truth when pmwal cannot work as documented: pmwal
# stands aside -- WAL syncs are the file system's, as without pmwal --
# says why in pmwal_status.reason and in the server log, and never claims
# to accelerate commits it does not.
#
#	io_direct    debug_io_direct = 'wal' (16 and later): PostgreSQL opens
#	             its WAL segment files with O_DIRECT; pmwal leaves writes
#	             through such descriptors, and their syncs, to the file
#	             system.  It said accelerated = t, an empty reason and
#	             commit_path 'ring' while every sync was real (ring_writes
#	             0, pass_syncs in the thousands).
#	no_flusher   max_worker_processes = 0: the flusher cannot be
#	             registered (PostgreSQL only logs "too many background
#	             workers"), and pmwal.enabled, which the flusher carries to
#	             every process, went unheard: accelerated = t, flusher_pid
#	             NULL.  Nothing acknowledged is at stake -- the ring is
#	             restored in the postmaster before redo, without the
#	             flusher -- so pmwal starts, restores, and stands aside.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# pmwal stands aside on $node: status, counters, commit path.
sub check_stands_aside
{
	my ($node, $tag, $reason_re) = @_;
	my $before = pmwal_status($node);
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1000 .. 1019;
	my $st = pmwal_status($node);
	is($st->{accelerated}, 'false', "$tag: pmwal_status.accelerated is false");
	like($st->{reason}, $reason_re, "$tag: reason says why ($st->{reason})");
	is($st->{commit_path}, 'file system sync', "$tag: commit_path is the file system's sync");
	is($st->{ring_writes} - $before->{ring_writes}, 0, "$tag: no WAL was copied into the ring");
	is($st->{ring_syncs} - $before->{ring_syncs}, 0, "$tag: no WAL sync was answered from the ring");
	return $st;
}

# --- debug_io_direct = 'wal' ------------------------------------------------
SKIP:
{
	my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
	skip 'debug_io_direct exists from PostgreSQL 16 on', 1 if $major < 16;
	my $tag = 'io_direct';
	my $node = pmwal_node($tag, conf => "debug_io_direct = 'wal'\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 1 .. 20;
	my $st = check_stands_aside($node, $tag, qr/O_DIRECT/);
	cmp_ok($st->{pass_syncs}, '>=', 20, "$tag: PostgreSQL's WAL syncs are real ($st->{pass_syncs})");
	ok($node->log_contains(qr/LOG:  pmwal leaves WAL written with O_DIRECT to the file system\n.*DETAIL:  .*debug_io_direct.*\n.*HINT:  /),
		"$tag: the server log says why, with DETAIL and HINT");
	$node->stop;
}

# --- max_worker_processes = 0: no flusher -----------------------------------
{
	my $tag = 'no_flusher';
	my $node = quiet_node($tag);
	# acknowledged commits whose WAL only the ring holds, then a power cut
	stop_server_process($node, $_) for qw(walwriter flusher);
	my @acked = (1 .. 5);
	acked_insert($node, $_) for @acked;
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	$node->append_conf('postgresql.conf', "max_worker_processes = 0\n");
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: the server starts with max_worker_processes = 0");
	my $log = slurp_file($node->logfile, $offset);
	like($log, $restored_re, "$tag: the ring is restored without the flusher");
	is(ids_present($node, @acked), '1,2,3,4,5', "$tag: the acknowledged rows are there");
	like($log, qr/WARNING:  pmwal cannot serve WAL syncs from its ring: .*flusher.*\n.*DETAIL:  .*\n.*HINT:  .*max_worker_processes/,
		"$tag: the server log says why, with DETAIL and HINT");
	my $st = check_stands_aside($node, $tag, qr/flusher.*max_worker_processes/);
	is($st->{flusher_pid}, '', "$tag: flusher_pid is NULL");
	# pmwal.enabled is moot: nothing goes through the ring either way
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pmwal.enabled = off; SELECT pg_reload_conf()');
	$node->safe_psql('postgres', "INSERT INTO t VALUES (2000)");
	is(pmwal_status($node)->{accelerated}, 'false', "$tag: still not accelerated with pmwal.enabled = off");
	$node->stop;
}

done_testing();

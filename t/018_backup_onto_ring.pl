# A base backup restored onto a machine whose ring path still holds the
# ring of the server the backup came from (issue 11): backup_label and a
# signal file are present.
#
#	1. the ring's WAL is older than the backup (recovery.signal, WAL from
#	   the archive): nothing is at risk, the backup holds all of it.  The
#	   start must go on, drop the ring without writing it into pg_wal, and
#	   every commit acknowledged before the backup is there.
#	2. the ring's WAL goes past the backup's start (standby.signal): it may
#	   hold commits that exist nowhere else.  The start is refused with
#	   nothing written; with a ring path of its own the node starts.
#	3. a backup that carries the primary's binding file (pg_wal/pmwal.binding:
#	   a file-level backup copies pg_wal's other files; pg_basebackup does
#	   not), restored as a standby on a ring of its own (issue 21): it must
#	   bind its own ring, not keep the primary's binding; promoted, it
#	   commits through its ring and loses power before the flusher's first
#	   pass, and its restart restores every acknowledged commit.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Copy ();
use Time::HiRes ();

my $restored_re = qr/pmwal restored WAL/;

for my $case ('older', 'newer')
{
	my $primary = pmwal_node("primary_$case", size => '64MB',
		init => { allows_streaming => 1, has_archiving => 1 },
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\n");
	my $ring = $primary->{pmwal_ring};
	powercut_start($primary);
	$primary->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CREATE TABLE u (x int)');
	wait_accelerated($primary, 't') or die "$case: commits are not accelerated";
	$primary->backup('b') if $case eq 'newer';

	my $load = acked_load_start($primary, tag => $case);
	$primary->poll_query_until('postgres', 'SELECT count(*) >= 2000 FROM t')
	  or die "$case: the load does not run: ${ $load->{err} }";
	if ($case eq 'older')
	{
		# the ring as it was before the backup: with the load ended and the
		# flusher held it does not change, and the backup's own WAL (its
		# checkpoint) comes after all of it
		$load->{h}->kill_kill;
		acked_load_finish($load);
		stop_server_process($primary, 'flusher');
		$ring = "/dev/shm/pmwal_tap_older_copy_$$.ring";
		File::Copy::copy($primary->{pmwal_ring}, $ring) or die "copy: $!";
		chmod 0600, $ring;
		$primary->backup('b');
		# the archive must hold the backup's WAL whole before the server
		# goes (the test's archive_command, cp, is not atomic)
		# (a record first: a switch at a segment's very start does nothing)
		my $seg = $primary->safe_psql('postgres',
			q{SELECT pg_walfile_name(pg_logical_emit_message(false, 'archive', 'me'))});
		$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
		$primary->poll_query_until('postgres',
			"SELECT '$seg' <= last_archived_wal FROM pg_stat_archiver")
		  or die "$case: the backup's WAL is not archived";
		$primary->stop('immediate');
	}
	else
	{
		my $cut = powercut($primary);
		note("$case: $cut->{summary}");
		acked_load_finish($load);
	}
	my ($tail, $head) = map { ring_read_u64($ring, $_) } qw(tail head);
	cmp_ok($head, '>', $tail, "$case: the primary's ring holds WAL");
	my ($start_hi, $start_lo) = slurp_file($primary->backup_dir . '/b/backup_label')
	  =~ /START WAL LOCATION: ([0-9A-F]+)\/([0-9A-F]+)/;
	my $start = hex($start_hi) * 2**32 + hex($start_lo);
	if ($case eq 'older')
	{
		cmp_ok($head, '<=', $start, "$case: all of the ring's WAL precedes the backup's start");
	}
	else
	{
		cmp_ok($head, '>', $start, "$case: the ring's WAL goes past the backup's start");
	}

	# the backup, restored where the primary was, on the primary's ring
	my $node = pmwal_standby($primary, "restored_$case", 'b', ring => $ring, size => '64MB',
		init => $case eq 'older' ? { has_restoring => 1, standby => 0 } : { has_streaming => 1 });
	my $offset = -s $node->logfile;
	my $up = $node->start(fail_ok => 1);
	my $log = slurp_file($node->logfile, $offset);
	unlike($log, $restored_re, "$case: nothing of the ring is written into pg_wal");
	if ($case eq 'older')
	{
		ok($up, "$case: the restored node starts");
		like($log, qr/pmwal ring "[^"]+" holds only WAL older than the base backup this data directory is restored from; not restored/,
			"$case: the ring is dropped as older than the backup");
		is(ring_read_u64($ring, 'head'), ring_read_u64($ring, 'tail'), "$case: the ring is empty");
		$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
		  or die "$case: archive recovery does not end";
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "$case: all $n commits acknowledged before the backup are present");
		$node->stop;
		unlink $ring;
	}
	else
	{
		ok(!$up, "$case: the restored node refuses to start");
		$node->stop('immediate') if $up;
		like($log, qr/FATAL:  pmwal ring "[^"]+" holds WAL, but this data directory is being restored from a base backup; nothing was restored/,
			"$case: FATAL says why");
		is(ring_read_u64($ring, 'head'), $head, "$case: the ring still holds its WAL");
		# given a ring of its own, the node starts as the standby it is
		my $own = "/dev/shm/pmwal_tap_own_${case}_$$.ring";
		set_conf($node, 'pmwal.path' => $own);
		ok($node->start(fail_ok => 1), "$case: with a ring of its own the node starts");
		$node->stop('immediate') if $node->{_pid};
		unlink $own;
	}
}

# 3. a backup with the primary's binding file, on a ring of its own
{
	my $primary = pmwal_node('primary_file', size => '64MB',
		init => { allows_streaming => 1 },
		conf => QUIET_WAL . "pmwal.flush_interval = 100ms\n");
	my $ring = $primary->{pmwal_ring};
	$primary->start;
	$primary->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CREATE TABLE u (x int)');
	# flusher passes: the primary's binding at a generation well above a
	# new ring's first one
	for (1 .. 600)
	{
		last if ring_read_u64($ring, 'generation') >= 6;
		$primary->safe_psql('postgres', 'INSERT INTO u SELECT generate_series(1, 10)');
		Time::HiRes::sleep(0.05);
	}
	cmp_ok(ring_read_u64($ring, 'generation'), '>=', 6, 'file: the primary\'s ring is at generation 6 or more');
	$primary->backup('b');
	my $bfile = $primary->backup_dir . '/b/pg_wal/pmwal.binding';
	ok(!-e $bfile, 'file: pg_basebackup does not copy the binding file');
	File::Copy::copy($primary->data_dir . '/pg_wal/pmwal.binding', $bfile) or die "copy: $!";

	my $own = "/dev/shm/pmwal_tap_own_file_$$.ring";
	unlink $own;
	my $node = pmwal_standby($primary, 'restored_file', 'b', ring => $own, size => '64MB',
		conf => QUIET_WAL . "pmwal.test_pause = 'flusher_loop'\n");
	powercut_start($node);
	$node->safe_psql('postgres', 'SELECT pg_promote()');
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'file: the promotion does not end';
	my $bytes = slurp_file($node->data_dir . '/pg_wal/pmwal.binding');
	my ($best, $best_gen);
	for my $i (0, 1)
	{
		my ($magic, $gen, $path) = unpack('a8 x16 Q< x16 Z1984', substr($bytes, $i * 2048, 2048));
		next unless $magic eq 'PMWALBND'
		  && crc32c(substr($bytes, $i * 2048, 2032)) == unpack('L<', substr($bytes, $i * 2048 + 2032, 4));
		($best, $best_gen) = ($path, $gen) if !defined $best_gen || $gen > $best_gen;
	}
	is($best, $own, 'file: the restored node\'s binding names its own ring');
	wait_accelerated($node, 't') or die 'file: commits are not accelerated';
	my $load = acked_load_start($node, tag => 'file');
	$node->poll_query_until('postgres', 'SELECT count(*) >= 1000 FROM t')
	  or die "file: the load does not run: ${ $load->{err} }";
	my $cut = powercut($node);
	acked_load_finish($load);
	note("file: $cut->{summary}");
	$node->append_conf('postgresql.conf', "pmwal.test_pause = ''\n");
	my $offset = -s $node->logfile;
	my $up = $node->start(fail_ok => 1);
	ok($up, 'file: the promoted node restarts after the power cut')
	  or diag(slurp_file($node->logfile, $offset));
	if ($up)
	{
		like(slurp_file($node->logfile, $offset), $restored_re, 'file: its ring was restored');
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "file: all $n acknowledged commits are present");
		$node->stop;
	}
	unlink $own;
}

done_testing();

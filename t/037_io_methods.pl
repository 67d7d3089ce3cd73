# Every io_method the server has (18: sync, worker; 19, built with liburing:
# io_uring too): no WAL write or sync goes around pmwal.
#
# pmwal sees the calls the server binary makes through its procedure
# linkage table.  PostgreSQL 18 and 19 run relation I/O through their AIO
# subsystem: in the backend itself (io_method = sync), in I/O worker
# processes (worker, the default), or in the kernel through io_uring, which
# makes no libc call per I/O.  docs/versions.md (row 7 and the section on
# 19's I/O paths) shows from the binaries that AIO only ever reads there:
# no WAL write or sync is staged through it.  This test holds that on the
# running server, for each io_method, while AIO reads run beside committing
# clients (sequential scans of an unlogged table three times shared_buffers):
#	- every WAL write and sync went through the ring (no pass_writes, no
#	  pass_syncs) and AIO did run (pg_stat_io's relation reads; with
#	  worker, the I/O workers' read(2) bytes; with io_uring, the server's
#	  processes hold io_uring instances)
#	- at the power cut, before anything is undone, the ring's WAL is
#	  byte for byte what pg_wal holds over [tail, head) but for the page
#	  PostgreSQL rewrites next: a WAL write that did not go through pmwal
#	  (a write by io_uring, which neither pmwal nor the power-cut harness
#	  sees) would show there
#	- after the cut every acknowledged commit is there and amcheck is clean;
#	  negative control: a copy of the data directory started without its
#	  ring lacks acknowledged commits
# Before 18 there is no io_method: skipped.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use constant XLOG_BLCKSZ => 8192;
use constant RING_HEADER_SIZE => 4096;

my $probe = PostgreSQL::Test::Cluster->new('probe');
$probe->init;
$probe->start;
my $methods = $probe->safe_psql('postgres',
	q{SELECT coalesce((SELECT array_to_string(enumvals, ' ') FROM pg_settings WHERE name = 'io_method'), '')});
$probe->stop;
plan skip_all => 'this server has no io_method (AIO came with PostgreSQL 18)' if $methods eq '';
note("io_method values of this server: $methods");

# SQL: how many of the ids $load acknowledged are in t.
sub present_sql
{
	my ($load) = @_;
	my @terms;
	for my $c (sort { $a <=> $b } keys %{ $load->{acked} })
	{
		my $lo = $load->{base} + $c * 1_000_000_000;
		push @terms, "(id > $lo AND id <= " . ($lo + $load->{acked}{$c}) . ')';
	}
	# by the heap alone: without its ring the index may be ahead of the WAL
	return 'SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; '
	  . 'SELECT count(*) FROM t WHERE ' . (@terms ? join(' OR ', @terms) : 'false');
}

# Which processes of $node hold an io_uring instance (the postmaster
# creates them for every process, before forking).
sub io_uring_holders
{
	my ($node) = @_;
	my @pids = ($node->{_pid}, split /\n/, `pgrep -P $node->{_pid}`);
	return scalar grep {
		my $pid = $_;
		grep { (readlink($_) // '') eq 'anon_inode:[io_uring]' } glob("/proc/$pid/fd/*")
	} @pids;
}

for my $method (split / /, $methods)
{
	my $tag = "io_method = $method";
	my $node = pmwal_node("aio_$method", size => '64MB',
		conf => QUIET_WAL . qq{pmwal.flush_interval = 60s
shared_buffers = 16MB
io_method = $method
});
	$node->{ring_cut} = 'durable';
	powercut_start($node);
	is($node->safe_psql('postgres', 'SHOW io_method'), $method, "$tag: the server runs with it");
	$node->safe_psql('postgres', q{
CREATE EXTENSION pmwal; CREATE EXTENSION amcheck;
CREATE TABLE t (id bigint PRIMARY KEY);
CREATE UNLOGGED TABLE big (id int, pad text);
INSERT INTO big SELECT g, repeat('x', 500) FROM generate_series(1, 100000) g;
CHECKPOINT;
SELECT pg_stat_reset_shared('io');});
	ok(wait_accelerated($node, 't'), "$tag: commits are accelerated");
	my $before = pmwal_status($node);

	# AIO readers beside the committers
	my $reader_sql = $node->basedir . '/reader.sql';
	PostgreSQL::Test::Utils::append_to_file($reader_sql, "SELECT count(*) FROM big;\n");
	my ($rout, $rerr) = ('', '');
	my $readers = IPC::Run::start(
		[ 'pgbench', '-n', '-c', 2, '-j', '1', '-T', 600, '-f', $reader_sql,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$rout, '2>', \$rerr);
	my $load = acked_load_start($node, tag => "aio_$method");
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "$tag: the load does not run: ${ $load->{err} }";
	$node->poll_query_until('postgres',
		q{SELECT coalesce(sum(reads), 0) > 500 FROM pg_stat_io WHERE object = 'relation'})
	  or die "$tag: the readers do not read: $rerr";
	Time::HiRes::sleep(0.5 + rand(1.5));

	my $after = pmwal_status($node);
	cmp_ok($after->{ring_writes} - $before->{ring_writes}, '>', 0,
		"$tag: WAL writes went through the ring");
	cmp_ok($after->{ring_syncs} - $before->{ring_syncs}, '>', 0,
		"$tag: WAL syncs were answered from the ring");
	is($after->{pass_writes} - $before->{pass_writes}, 0, "$tag: no WAL write passed the ring");
	is($after->{pass_syncs} - $before->{pass_syncs}, 0, "$tag: no WAL sync was left to the file system");
	is($after->{retires} - $before->{retires}, 0, "$tag: the ring was never retired");
	my $reads = $node->safe_psql('postgres',
		q{SELECT coalesce(sum(reads), 0) FROM pg_stat_io WHERE object = 'relation'});
	cmp_ok($reads, '>', 500, "$tag: relation reads went through AIO meanwhile ($reads)");
	if ($method eq 'worker')
	{
		# (pg_stat_io counts an I/O for the process that issued it)
		my $read = 0;
		for my $pid (split /\n/, $node->safe_psql('postgres',
				q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'io worker'}))
		{
			open my $fh, '<', "/proc/$pid/io" or next;
			while (<$fh>) { $read += $1 if /^rchar: (\d+)/ }
			close $fh;
		}
		cmp_ok($read, '>', 10 * 1024 * 1024, "$tag: the I/O workers read ($read bytes)");
	}
	if ($method eq 'io_uring')
	{
		my $holders = io_uring_holders($node);
		cmp_ok($holders, '>', 0, "$tag: $holders server processes hold io_uring instances");
	}

	# the power cut; before anything is undone, the ring against pg_wal
	powercut_kill($node);
	my $ring = $node->{pmwal_ring};
	my ($tail, $head) = (ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'));
	my $capacity = ring_field($ring, 'capacity');
	my $to = $head - XLOG_BLCKSZ;
	cmp_ok($to - $tail, '>', 16 * XLOG_BLCKSZ,
		sprintf('%s: the ring holds WAL (%d bytes from %X/%X)', $tag, $head - $tail,
			$tail / 2**32, $tail % 2**32));
	my $all = ring_bytes($ring);
	my $in_ring = '';
	for (my $p = $tail; $p < $to;)
	{
		my $off = $p % $capacity;
		my $n = $capacity - $off < $to - $p ? $capacity - $off : $to - $p;
		$in_ring .= substr($all, RING_HEADER_SIZE + $off, $n);
		$p += $n;
	}
	my $in_wal = wal_bytes($node->data_dir, ring_read_u64($ring, 'timeline'), $tail, $to);
	is(length($in_wal), $to - $tail, "$tag: pg_wal holds the ring's range");
	my $diff = first_difference($in_ring, $in_wal);
	ok(!defined $diff, "$tag: the ring's WAL is pg_wal's, byte for byte, but for the page rewritten next")
	  or diag(sprintf('first difference at %X/%X', ($tail + $diff) / 2**32, ($tail + $diff) % 2**32));

	my $cut = powercut_cut($node);
	acked_load_finish($load);
	$readers->finish;
	cmp_ok($cut->{undone}, '>', 0, "$tag: the power cut undid WAL writes not yet fsynced");
	my $acked = $load->{total};
	cmp_ok($acked, '>=', 300, "$tag: $acked commits were acknowledged");
	my $without = without_ring_query($node, present_sql($load));
	ok(defined $without && $without < $acked,
		"$tag: negative control: without its ring, " . ($without // '?') . " of $acked acknowledged commits are there");

	$node->start;
	ok($node->log_contains(qr/pmwal restored WAL [0-9A-F\/]+ to [0-9A-F\/]+ from the ring into pg_wal/),
		"$tag: the ring was restored into pg_wal before redo");
	my ($n, $missing, $extra) = acked_check($node, $load);
	is($missing, 0, "$tag: all $n acknowledged commits are present");
	cmp_ok($extra, '<=', $load->{clients}, "$tag: at most one unacknowledged commit per client ($extra)");
	is($node->safe_psql('postgres', q{SELECT bt_index_check('t_pkey', heapallindexed => true)}),
		'', "$tag: amcheck finds t consistent");
	$node->stop;
}

done_testing();

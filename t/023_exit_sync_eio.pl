# A failed fsync of pg_wal and the ring (found by an adversarial review of
# t/022's mechanism; reworked for the sync layer).
#
# Linux reports a writeback error once per file (errseq): after a failed
# fsync the dirty pages are marked clean and never written again, and a
# later fsync of the same file -- on a descriptor opened afterwards --
# returns 0.  (This is why PostgreSQL PANICs on a failed fsync instead of
# retrying: data_sync_retry.)
#
# With the sync layer PostgreSQL's own WAL syncs are answered from the
# ring; the real syncs of pg_wal are pmwal's (wal_sync.c), each of which
# PANICs on failure: the flusher's pass, a writer that finds the ring full
# and makes room, and the sync before a pg_control write (a checkpoint).
# Each case makes one of them fail with EIO, with acknowledged commits
# whose WAL is only in the ring (and in pages the failed sync has now
# marked clean): the process PANICs, and with restart_after_crash = off
# the postmaster exits through proc_exit.  Its exit sync (restore.c,
# pmwal_exit_sync) must not trust a second fsync and empty the ring (as
# the first version of it did: every acknowledged commit of the failed
# range was gone after the power cut, 2322 of 2322): after a PANIC the
# ring stays, and the next start's restore writes its WAL anew.
#
#	flusher     the flusher's pass fails (restart_after_crash = off)
#	checkpoint  the sync before the checkpoint's pg_control write fails
#	            (restart_after_crash = off)
#	ring_full   a backend making room in a full (2 MB) ring fails
#	            (restart_after_crash = off)
#	restart     the flusher's pass fails with restart_after_crash = on:
#	            the crash-restart's restore rewrites the ring's WAL
#	exit_sync   no PANIC: an immediate shutdown, and the exit sync's own
#	            fsync fails: it leaves the ring as it is
#
# Negative control, each case: the data directory after the power cut,
# started without its ring, lacks acknowledged commits (the cut did take
# what only the ring held).
#
# The failure is modelled by an LD_PRELOAD shim in front of libpowercut:
# once a trigger file exists, the next fsync/fdatasync of a WAL segment
# fails with EIO without reaching the power-cut log; later syncs of that
# inode return 0 without reaching it either, until the file is written
# again (then they go through).  pmwal's own syncs go through it (pmwal
# calls the C library through its own linkage, which LD_PRELOAD serves);
# PostgreSQL's answered syncs never reach the C library.  Everything else
# is the power-cut harness.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();

my $shim_c = <<'EOC';
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int
wal_segment(int fd, struct stat *st)
{
	char		link[64], path[4096];
	ssize_t		n;
	const char *slash;

	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	slash = strrchr(path, '/');
	if (!slash || slash - path < 7 || strncmp(slash - 7, "/pg_wal", 7) != 0)
		return 0;
	if (strlen(slash + 1) != 24 || strspn(slash + 1, "0123456789ABCDEF") != 24)
		return 0;
	return fstat(fd, st) == 0;
}

/* last state recorded for the inode: 0, 'F' failed, 'R' written again */
static char
lookup(const char *state, struct stat *st)
{
	FILE	   *f = fopen(state, "r");
	unsigned long dev, ino;
	char		c, s = 0;

	if (!f)
		return 0;
	while (fscanf(f, "%lu %lu %c\n", &dev, &ino, &c) == 3)
		if (dev == (unsigned long) st->st_dev && ino == (unsigned long) st->st_ino)
			s = c;
	fclose(f);
	return s;
}

static void
record(const char *state, struct stat *st, char c)
{
	char		line[128];
	int			fd = open(state, O_WRONLY | O_CREAT | O_APPEND, 0600);
	int			n = snprintf(line, sizeof line, "%lu %lu %c\n",
							 (unsigned long) st->st_dev, (unsigned long) st->st_ino, c);

	if (fd >= 0)
	{
		if (write(fd, line, n) != n)
			abort();
		close(fd);
	}
}

/* -2: pass the sync through */
static int
sync_hook(int fd)
{
	const char *trig = getenv("EIO_TRIGGER");
	const char *state = getenv("EIO_STATE");
	struct stat st;
	char		s;
	char		used[4096];

	if (!trig || !state || !wal_segment(fd, &st))
		return -2;
	s = lookup(state, &st);
	if (s == 'F')
		return 0;				/* the error was reported: pages clean, not on disk */
	if (s == 0)
	{
		snprintf(used, sizeof used, "%s.used", trig);
		if (rename(trig, used) == 0)
		{
			record(state, &st, 'F');
			errno = EIO;
			return -1;
		}
	}
	return -2;
}

static void
write_hook(int fd)
{
	const char *state = getenv("EIO_STATE");
	struct stat st;

	if (state && access(state, F_OK) == 0 && wal_segment(fd, &st) && lookup(state, &st) == 'F')
		record(state, &st, 'R');
}

int
fdatasync(int fd)
{
	static int (*next) (int);
	int			rc = sync_hook(fd);

	if (rc != -2)
		return rc;
	if (!next)
		next = dlsym(RTLD_NEXT, "fdatasync");
	return next(fd);
}

int
fsync(int fd)
{
	static int (*next) (int);
	int			rc = sync_hook(fd);

	if (rc != -2)
		return rc;
	if (!next)
		next = dlsym(RTLD_NEXT, "fsync");
	return next(fd);
}

ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*next) (int, const void *, size_t, off_t);

	write_hook(fd);
	if (!next)
		next = dlsym(RTLD_NEXT, "pwrite");
	return next(fd, buf, n, off);
}

ssize_t
pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*next) (int, const void *, size_t, off_t);

	write_hook(fd);
	if (!next)
		next = dlsym(RTLD_NEXT, "pwrite64");
	return next(fd, buf, n, off);
}

ssize_t
write(int fd, const void *buf, size_t n)
{
	static ssize_t (*next) (int, const void *, size_t);

	write_hook(fd);
	if (!next)
		next = dlsym(RTLD_NEXT, "write");
	return next(fd, buf, n);
}
EOC

my $tmp = PostgreSQL::Test::Utils::tempdir();
PostgreSQL::Test::Utils::append_to_file("$tmp/eio.c", $shim_c);
system('cc', '-shared', '-fPIC', '-O1', '-o', "$tmp/libeio.so", "$tmp/eio.c", '-ldl') == 0
  or BAIL_OUT('could not build the EIO shim');

# powercut_start with the shim in front of libpowercut
sub start_with_eio
{
	my ($node) = @_;
	my $log = $node->basedir . '/powercut.log';
	unlink $log, $node->basedir . '/eio.state', $node->basedir . '/eio.trigger',
	  $node->basedir . '/eio.trigger.used';
	$node->{powercut_log} = $log;
	local $ENV{LD_PRELOAD} = "$tmp/libeio.so:" . PmwalTest::powercut_lib();
	local $ENV{POWERCUT_LOG} = $log;
	local $ENV{POWERCUT_DIR} = $node->data_dir . '/pg_wal';
	local $ENV{EIO_TRIGGER} = $node->basedir . '/eio.trigger';
	local $ENV{EIO_STATE} = $node->basedir . '/eio.state';
	return $node->start;
}

sub trigger_eio
{
	my ($node) = @_;
	PostgreSQL::Test::Utils::append_to_file($node->basedir . '/eio.trigger', '');
	return;
}

# One case: a node with the shim, acknowledged commits whose WAL only the
# ring holds, then $provoke->($node) makes a real sync fail.
sub run_case
{
	my ($name, %opts) = @_;
	my $restart = $opts{restart} // 'off';
	my $node = pmwal_node($name, size => $opts{size} // '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\nrestart_after_crash = $restart\n"
		  . ($opts{conf} // ''));
	start_with_eio($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); '
		  . 'CREATE TABLE filler (id int, v text); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	stop_server_process($node, 'walwriter');
	$opts{prepare}->($node) if $opts{prepare};
	my $load = acked_load_start($node, tag => $name, clients => 2, duration => 2);
	acked_load_finish($load);
	note("$name: $load->{total} commits acknowledged");
	my $st = pmwal_status($node);
	cmp_ok(lsn_num($st->{durable_lsn}), '<', lsn_num($st->{head_lsn}),
		"$name: acknowledged WAL is in the ring only ($st->{durable_lsn} < $st->{head_lsn})");

	my $offset = -s $node->logfile;
	trigger_eio($node);
	$opts{provoke}->($node);
	my $log;
	if ($restart eq 'off')
	{
		ok(wait_postmaster_gone($node), "$name: the postmaster exited");
		$log = slurp_file($node->logfile, $offset);
		like($log, qr/$opts{panic}/, "$name: the failed sync was reported ($opts{who})");
	}
	else
	{
		$node->wait_for_log(qr/terminating any other active server processes/, $offset);
		for (1 .. 100)
		{
			continue_quit_stopped($node);
			last unless @{ $node->{pmwal_sigstopped} };
			Time::HiRes::sleep(0.1);
		}
		$node->wait_for_log(qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
			$offset);
		$log = slurp_file($node->logfile, $offset);
		like($log, qr/$opts{panic}/, "$name: the failed sync PANICked ($opts{who})");
		like($log, qr/reinitializing.*pmwal restored WAL .*\(crash-restart\)/s,
			"$name: the crash-restart restored the ring");
		$node->stop('immediate');
	}
	note(join("\n", grep { /pmwal|PANIC|WARNING/ } split /\n/, $log));
	note('eio.state: ' . slurp_file($node->basedir . '/eio.state'));
	unlike($log, qr/pmwal synced pg_wal after the last server process exited; the ring is empty/,
		"$name: the exit sync did not empty the ring") if $restart eq 'off';

	my $cut = powercut_cut($node);
	note("$name: the power cut undid $cut->{undone} writes");
	if ($restart eq 'off')
	{
		cmp_ok(ring_read_u64($node->{pmwal_ring}, 'head'), '>', ring_read_u64($node->{pmwal_ring}, 'tail'),
			"$name: the ring still holds its WAL");
		my $n = without_ring_query($node, 'SELECT count(*) FROM t');
		cmp_ok($n // 0, '<', $load->{total},
			"$name: negative control: without the ring acknowledged commits are lost (" . ($n // 0) . " of $load->{total} there)");
	}
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	$offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$name: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC|DETAIL/ } split /\n/, slurp_file($node->logfile, $offset)));
	return unless $node->{_pid};
	like(slurp_file($node->logfile, $offset), $restored_re, "$name: it restored the ring")
	  if $restart eq 'off';
	my ($acked, $missing) = acked_check($node, $load);
	is($missing, 0, "$name: all $acked acknowledged commits are there after the power cut");
	$node->stop;
	return;
}

my $sync_panic = 'PANIC:  could not fsync file "pg_wal/[0-9A-F]{24}": Input/output error';

run_case('flusher',
	who => 'the flusher',
	prepare => sub { flusher_hold($_[0]) },
	provoke => sub {
		my ($node) = @_;
		pause_release($node, 'flusher_loop');
	},
	panic => $sync_panic);

run_case('checkpoint',
	who => 'the checkpointer',
	prepare => sub { stop_server_process($_[0], 'flusher') },
	provoke => sub { $_[0]->psql('postgres', 'CHECKPOINT') },
	panic => $sync_panic);

run_case('ring_full',
	who => 'a backend making room',
	size => '2MB',
	conf => "wal_buffers = 256kB\n",
	prepare => sub { stop_server_process($_[0], 'flusher') },
	provoke => sub {
		$_[0]->psql('postgres',
			q{INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 40000) g});
	},
	panic => $sync_panic);

run_case('restart',
	who => 'the flusher',
	restart => 'on',
	prepare => sub { flusher_hold($_[0]) },
	provoke => sub { pause_release($_[0], 'flusher_loop') },
	panic => $sync_panic);

run_case('exit_sync',
	who => 'none: the exit sync',
	prepare => sub { stop_server_process($_[0], 'flusher') },
	provoke => sub { $_[0]->stop('immediate') },
	panic => 'WARNING:  could not fsync file "pg_wal/[0-9A-F]{24}": Input/output error');

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();

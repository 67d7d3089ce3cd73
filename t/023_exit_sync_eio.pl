# The postmaster's exit sync after a failed fsync (found by an adversarial
# review of t/022's mechanism).
#
# Linux reports a writeback error once per file (errseq): after a failed
# fsync the dirty pages are marked clean and never written again, and a
# later fsync of the same file -- on a descriptor opened afterwards --
# returns 0.  (This is why PostgreSQL PANICs on a failed fsync instead of
# retrying: data_sync_retry.)
#
# pmwal acknowledges commits from the ring; when the sync of pg_wal behind
# the ring fails, the process PANICs and the ring is the only durable copy
# of that WAL.  With restart_after_crash = off the postmaster then exits
# through proc_exit.  Its exit sync must not trust a second fsync and
# empty the ring (as the first version of it did: every acknowledged
# commit of the failed range was gone after the power cut, 2322 of 2322):
# after a PANIC the ring stays, and the next start's restore writes its
# WAL anew.  The crash-restart case (restart_after_crash = on) is the
# control: its restore rewrites the ring's WAL.
#
# The failure is modelled by an LD_PRELOAD shim in front of libpowercut:
# once a trigger file exists, the next fsync/fdatasync of a WAL segment
# fails with EIO without reaching the power-cut log; later syncs of that
# inode return 0 without reaching it either, until the file is written
# again (then they go through).  Everything else is the power-cut harness.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

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
	my ($node, $restart) = @_;
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

sub run_case
{
	my ($name, $restart_after_crash) = @_;
	my $node = pmwal_node($name, size => '64MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nrestart_after_crash = $restart_after_crash\n");
	start_with_eio($node);
	$node->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	my $load = acked_load_start($node, tag => $name, clients => 2);
	$node->poll_query_until('postgres', 'SELECT count(*) >= 1500 FROM t')
	  or die "$name: the load does not run: ${ $load->{err} }";
	$load->{h}->kill_kill;
	acked_load_finish($load);
	note("$name: $load->{total} commits acknowledged");
	cmp_ok(ring_read_u64($node->{pmwal_ring}, 'head'), '>',
		ring_read_u64($node->{pmwal_ring}, 'tail'), "$name: the ring holds WAL not yet synced");

	# the next WAL fsync fails with EIO: the process PANICs
	my $offset = -s $node->logfile;
	PostgreSQL::Test::Utils::append_to_file($node->basedir . '/eio.trigger', '');
	$node->psql('postgres', 'CHECKPOINT');
	my $pid = $node->{_pid};
	if ($restart_after_crash eq 'off')
	{
		# the postmaster exits
		my $deadline = time + 60;
		sleep 1 while kill(0, $pid) && time < $deadline;
		ok(!kill(0, $pid), "$name: the postmaster exited after the PANIC");
		$node->_update_pid(0);
	}
	else
	{
		$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
		  or die "$name: no crash-restart";
		$node->stop;
	}
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/PANIC:.*could not (fsync|fdatasync)/, "$name: a WAL fsync failed: PANIC");
	note(join("\n", grep { /pmwal|PANIC/ } split /\n/, $log));
	note('eio.state: ' . slurp_file($node->basedir . '/eio.state'));

	my $cut = powercut_cut($node);
	note("$name: the power cut undid $cut->{undone} writes");
	$node->start;
	my ($acked, $missing) = acked_check($node, $load);
	is($missing, 0, "$name: all $acked acknowledged commits are there after the power cut");
	$node->stop;
}

run_case('crash_restart', 'on');
run_case('exit', 'off');
done_testing();

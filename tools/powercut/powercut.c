/*-------------------------------------------------------------------------
 *
 * powercut.c
 *		LD_PRELOAD library that records what a power cut could take away
 *		from the files under one directory: every write with the bytes it
 *		overwrites, every fsync/fdatasync with its begin and end, and every
 *		directory entry created, renamed or removed.
 *
 * Usage: LD_PRELOAD=libpowercut.so POWERCUT_LOG=/path/log
 * POWERCUT_DIR=$PGDATA/pg_wal.  Without both variables the library passes
 * every call through untouched.  powercut_cut reads the log after every
 * process was killed and undoes what was not durable (see README.md).
 *
 * Why this is an independent oracle: it watches the system calls, not
 * pmwal's or PostgreSQL's idea of what is flushed.  A write is durable only
 * if a sync of the same inode began after the write returned and that sync
 * returned too; a directory entry only if a sync of its directory did.
 *
 * How:
 * - A write logs an intent record holding the old content of the range
 *   it changes (read with pread before writing) and the file size, then
 *   writes, then logs the result.  A write whose result never got logged (the process
 *   was killed in between) is undone like any unsynced write.  Old content,
 *   not zeros, is what an undo must restore: PostgreSQL rewrites the last
 *   partial WAL page many times, and an earlier, synced version of that
 *   page must survive.
 * - Syncs log a begin and an end record.  Directory syncs (PostgreSQL
 *   opens the directory and fsyncs it) are told apart by fstat.
 * - Descriptors are resolved to paths through /proc/self/fd at each call,
 *   so nothing is cached that a fork, a close or an fd reused by a socket
 *   could make stale.
 * - Each record is appended with one writev() to a log opened with
 *   O_APPEND for that record alone; the file order is the total order of
 *   events across all processes.  A record that cannot be written is fatal
 *   (abort): a silent gap would make the oracle lie.
 *
 * Intercepted: open, open64, openat, openat64, creat, creat64 (only to log
 * files they create), write, pwrite, pwrite64, pwritev, pwritev64, fsync,
 * fdatasync, sync, syncfs, rename, renameat, renameat2, link, linkat,
 * unlink, unlinkat, and ftruncate/fallocate/posix_fallocate (logged as
 * unmodelled, like renameat2's RENAME_EXCHANGE).  PostgreSQL
 * 15 writes WAL with pwrite (XLogWrite, pmwal's restore), zero-fills new
 * segments with pwritev (pg_pwritev_with_retry), syncs with fdatasync or
 * fsync, and installs segments with rename.  Calls glibc makes internally
 * (stdio, opendir) do not go through these symbols; PostgreSQL does not
 * write WAL that way.  Not modelled: writev, mmap'ed writes,
 * sync_file_range (PostgreSQL uses it only to start writeback, never as a
 * durability point).
 *
 * O_DIRECT (WAL under debug_io_direct = 'wal', 16+; 15's open_datasync and
 * open_sync under wal_level = minimal) changes nothing in the model: the
 * write bypasses the page cache, not the device's volatile cache, so
 * without O_SYNC/O_DSYNC it is durable only at a later sync, like any
 * other; with them, at return.  Only the read of the old content differs
 * (read_old: a descriptor of its own), and the record says O_DIRECT.
 *
 * IDENTIFICATION
 *		tools/powercut/powercut.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "powercut.h"

#define EXPORT __attribute__((visibility("default")))

static int	(*real_open) (const char *, int, ...);
static int	(*real_open64) (const char *, int, ...);
static int	(*real_openat) (int, const char *, int, ...);
static int	(*real_openat64) (int, const char *, int, ...);
static int	(*real_creat) (const char *, mode_t);
static int	(*real_creat64) (const char *, mode_t);
static ssize_t (*real_write) (int, const void *, size_t);
static ssize_t (*real_pwrite) (int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64) (int, const void *, size_t, off64_t);
static ssize_t (*real_pwritev) (int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64) (int, const struct iovec *, int, off64_t);
static int	(*real_fsync) (int);
static int	(*real_fdatasync) (int);
static void (*real_sync) (void);
static int	(*real_syncfs) (int);
static int	(*real_rename) (const char *, const char *);
static int	(*real_renameat) (int, const char *, int, const char *);
static int	(*real_renameat2) (int, const char *, int, const char *, unsigned int);
static int	(*real_link) (const char *, const char *);
static int	(*real_linkat) (int, const char *, int, const char *, int);
static int	(*real_unlink) (const char *);
static int	(*real_unlinkat) (int, const char *, int);
static int	(*real_ftruncate) (int, off_t);
static int	(*real_fallocate) (int, int, off_t, off_t);
static int	(*real_posix_fallocate) (int, off_t, off_t);

static bool resolved = false;
static bool active = false;
/*
 * Copies, not getenv() pointers: PostgreSQL overwrites the original
 * environment area with its process title (ps_status.c).
 */
static char log_path[PATH_MAX];
static char watch_dir[PATH_MAX];
static size_t watch_len;
static bool watch_resolved = false;
static uint64_t counter = 0;
/*
 * POWERCUT_EXIT_AFTER_WRITE=N (t/004's self-check only): the Nth logged
 * write of the process exits it right after the write itself, before its
 * result is logged -- what a SIGKILL there does.
 */
static long exit_after_write = 0;

/* The next definition of "name" (libc's, libpmem's); aborts if none. */
void *
must_dlsym(const char *name)
{
	void	   *p = dlsym(RTLD_NEXT, name);

	if (p == NULL)
	{
		fprintf(stderr, "libpowercut: cannot find %s: %s\n", name, dlerror());
		abort();
	}
	return p;
}

/* Look up the real functions and read the environment, once per process. */
static void
resolve(void)
{
	const char *log;
	const char *dir;

	if (resolved)
		return;
	real_open = must_dlsym("open");
	real_open64 = must_dlsym("open64");
	real_openat = must_dlsym("openat");
	real_openat64 = must_dlsym("openat64");
	real_creat = must_dlsym("creat");
	real_creat64 = must_dlsym("creat64");
	real_write = must_dlsym("write");
	real_pwrite = must_dlsym("pwrite");
	real_pwrite64 = must_dlsym("pwrite64");
	real_pwritev = must_dlsym("pwritev");
	real_pwritev64 = must_dlsym("pwritev64");
	real_fsync = must_dlsym("fsync");
	real_fdatasync = must_dlsym("fdatasync");
	real_sync = must_dlsym("sync");
	real_syncfs = must_dlsym("syncfs");
	real_rename = must_dlsym("rename");
	real_renameat = must_dlsym("renameat");
	real_renameat2 = must_dlsym("renameat2");
	real_link = must_dlsym("link");
	real_linkat = must_dlsym("linkat");
	real_unlink = must_dlsym("unlink");
	real_unlinkat = must_dlsym("unlinkat");
	real_ftruncate = must_dlsym("ftruncate");
	real_fallocate = must_dlsym("fallocate");
	real_posix_fallocate = must_dlsym("posix_fallocate");

	log = getenv("POWERCUT_LOG");
	dir = getenv("POWERCUT_DIR");
	if (log != NULL && log[0] != '\0' && strlen(log) < sizeof(log_path) &&
		dir != NULL && dir[0] == '/' && strlen(dir) < sizeof(watch_dir))
	{
		strcpy(log_path, log);
		strcpy(watch_dir, dir);
		watch_len = strlen(watch_dir);
		while (watch_len > 1 && watch_dir[watch_len - 1] == '/')
			watch_dir[--watch_len] = '\0';
		active = true;
	}
	if (getenv("POWERCUT_EXIT_AFTER_WRITE") != NULL)
		exit_after_write = atol(getenv("POWERCUT_EXIT_AFTER_WRITE"));
	resolved = true;
}

__attribute__((constructor))
static void
powercut_init(void)
{
	resolve();
}

/*
 * The watched directory as the kernel names it (symlinks resolved), so that
 * it compares with /proc/self/fd links.  Retried until the directory exists.
 */
static void
resolve_watch_dir(void)
{
	char		buf[PATH_MAX];

	if (watch_resolved)
		return;
	if (realpath(watch_dir, buf) != NULL)
	{
		strcpy(watch_dir, buf);
		watch_len = strlen(watch_dir);
		watch_resolved = true;
	}
}

/* If "abs" is the watched directory or inside it, return the relative part. */
static const char *
relative_to_watch(const char *abs)
{
	resolve_watch_dir();
	if (strncmp(abs, watch_dir, watch_len) != 0)
		return NULL;
	if (abs[watch_len] == '\0')
		return abs + watch_len;
	if (abs[watch_len] == '/')
		return abs + watch_len + 1;
	return NULL;
}

static void
die(const char *what)
{
	int			save = errno;

	fprintf(stderr, "libpowercut: %s: %s (log %s)\n", what, strerror(save), log_path);
	abort();
}

/* Append one record; see powercut.h. */
static void
log_record(PcRecord *rec, const char *path, size_t pathlen,
		   const void *old, size_t oldlen)
{
	struct iovec iov[3];
	size_t		total = sizeof(*rec) + pathlen + oldlen;
	ssize_t		n;
	int			fd;

	rec->magic = PC_MAGIC;
	rec->pid = (int32_t) getpid();
	rec->pathlen = (uint16_t) pathlen;
	rec->oldlen = (uint32_t) oldlen;
	iov[0].iov_base = rec;
	iov[0].iov_len = sizeof(*rec);
	iov[1].iov_base = (void *) path;
	iov[1].iov_len = pathlen;
	iov[2].iov_base = (void *) old;
	iov[2].iov_len = oldlen;

	fd = real_open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		die("cannot open log");
	n = writev(fd, iov, 3);
	if (n < 0 || (size_t) n != total)
		die("cannot append to log");
	close(fd);
}

static uint64_t
next_id(void)
{
	return ((uint64_t) (uint32_t) getpid() << 32) | ++counter;
}

/*
 * If fd is a file or directory under the watched directory, copy its path
 * relative to it into rel and fill st.  Files already unlinked are not
 * watched: nothing a power cut does to them matters.
 */
static bool
watched_fd(int fd, char *rel, size_t relsize, struct stat *st)
{
	char		link[64];
	char		buf[PATH_MAX];
	ssize_t		n;
	const char *r;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0 || buf[0] != '/')
		return false;
	buf[n] = '\0';
	if (n > 10 && strcmp(buf + n - 10, " (deleted)") == 0)
		return false;
	r = relative_to_watch(buf);
	if (r == NULL || strlen(r) >= relsize)
		return false;
	if (fstat(fd, st) != 0)
		return false;
	strcpy(rel, r);
	return true;
}

/*
 * The absolute path of "path" (relative to dirfd) without following its
 * last component, relative to the watched directory; false if outside.
 */
static bool
watched_path(int dirfd, const char *path, char *rel, size_t relsize)
{
	char		abs[PATH_MAX];
	char		parent[PATH_MAX];
	char		real_parent[PATH_MAX];
	char		full[PATH_MAX];
	char	   *slash;
	const char *base;
	const char *r;

	if (path[0] == '/')
	{
		if (strlen(path) >= sizeof(abs))
			return false;
		strcpy(abs, path);
	}
	else
	{
		char		start[PATH_MAX];

		if (dirfd == AT_FDCWD)
		{
			if (getcwd(start, sizeof(start)) == NULL)
				return false;
		}
		else
		{
			char		link[64];
			ssize_t		n;

			snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
			n = readlink(link, start, sizeof(start) - 1);
			if (n <= 0)
				return false;
			start[n] = '\0';
		}
		if (snprintf(abs, sizeof(abs), "%s/%s", start, path) >= (int) sizeof(abs))
			return false;
	}

	/* split off the last component; the parent must resolve */
	while (strlen(abs) > 1 && abs[strlen(abs) - 1] == '/')
		abs[strlen(abs) - 1] = '\0';
	slash = strrchr(abs, '/');
	if (slash == NULL)
		return false;
	base = slash + 1;
	if (slash == abs)
		strcpy(parent, "/");
	else
	{
		memcpy(parent, abs, slash - abs);
		parent[slash - abs] = '\0';
	}
	if (realpath(parent, real_parent) == NULL)
		return false;
	if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || base[0] == '\0')
	{
		/* the directory itself, or its parent; only "." can be watched */
		if (strcmp(base, "..") == 0)
			return false;
		strcpy(full, real_parent);
	}
	else if (snprintf(full, sizeof(full), "%s/%s", strcmp(real_parent, "/") == 0 ? "" : real_parent,
					  base) >= (int) sizeof(full))
		return false;
	r = relative_to_watch(full);
	if (r == NULL || strlen(r) >= relsize)
		return false;
	strcpy(rel, r);
	return true;
}

/*
 * Read what [off, off + len) holds now; returns the bytes read.  A
 * descriptor opened O_DIRECT (PostgreSQL's WAL under debug_io_direct, or
 * 15's open_datasync under wal_level = minimal) refuses a read into an
 * unaligned buffer, or of an unaligned range, with EINVAL; one opened
 * write-only refuses any read with EBADF.  Both are read through a
 * descriptor of our own, without O_DIRECT: on Linux a buffered read sees
 * what earlier O_DIRECT writes wrote (they invalidate the page cache over
 * their range) and what earlier buffered writes wrote (an O_DIRECT write
 * flushes the page cache over its range first).
 */
static size_t
read_old(int fd, int fl, char *buf, size_t len, off_t off)
{
	size_t		done = 0;
	int			rfd = fd;
	bool		reopened = false;

	if (len > 0 && fl >= 0 && ((fl & O_DIRECT) || (fl & O_ACCMODE) == O_WRONLY))
	{
		char		link[64];

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		rfd = real_open(link, O_RDONLY | O_CLOEXEC);
		if (rfd < 0)
			die("cannot reopen an O_DIRECT or write-only file to read its old content");
		reopened = true;
	}
	while (done < len)
	{
		ssize_t		n = pread(rfd, buf + done, len - done, off + (off_t) done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("cannot read the old content of a write");
		if (n == 0)
			break;
		done += (size_t) n;
	}
	if (reopened)
		close(rfd);
	return done;
}

/* Byte i of the data described by iov. */
static unsigned char
iov_byte(const struct iovec *iov, int iovcnt, size_t i)
{
	for (int k = 0; k < iovcnt; k++)
	{
		if (i < iov[k].iov_len)
			return ((const unsigned char *) iov[k].iov_base)[i];
		i -= iov[k].iov_len;
	}
	return 0;
}

/*
 * Before a write of iov at off (off < 0: at the file position): log the
 * intent with the content it changes.  Returns the id to pass to
 * write_done, 0 if the file is not watched.
 */
static uint64_t
write_begin(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	PcRecord	rec = {0};
	struct stat st;
	char		rel[PATH_MAX];
	char		stackbuf[16384];
	char	   *old = stackbuf;
	size_t		len = 0;
	size_t		oldlen = 0;
	size_t		first = 0;
	size_t		last;
	int			fl;
	int			save = errno;

	if (!active || !watched_fd(fd, rel, sizeof(rel), &st) || !S_ISREG(st.st_mode))
	{
		errno = save;
		return 0;
	}
	for (int k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	fl = fcntl(fd, F_GETFL);
	if (off < 0)
		off = (fl >= 0 && (fl & O_APPEND)) ? st.st_size : lseek(fd, 0, SEEK_CUR);
	if (off < 0)
		die("cannot find the file position of a write");
	if (off < st.st_size)
		oldlen = (size_t) (st.st_size - off) < len ? (size_t) (st.st_size - off) : len;
	if (oldlen > sizeof(stackbuf) && (old = malloc(oldlen)) == NULL)
		die("out of memory");
	oldlen = read_old(fd, fl, old, oldlen, off);

	/* keep only the span the write changes */
	last = oldlen;
	if (iovcnt == 1)
	{
		const unsigned char *nb = iov[0].iov_base;

		while (first < last && (unsigned char) old[first] == nb[first])
			first++;
		while (last > first && (unsigned char) old[last - 1] == nb[last - 1])
			last--;
	}
	else
	{
		while (first < last && (unsigned char) old[first] == iov_byte(iov, iovcnt, first))
			first++;
		while (last > first && (unsigned char) old[last - 1] == iov_byte(iov, iovcnt, last - 1))
			last--;
	}

	rec.type = PC_WRITE;
	rec.flags = 0;
	if (fl >= 0 && (fl & (O_SYNC | O_DSYNC)))
		rec.flags |= PC_FLAG_SYNC_FD;
	if (fl >= 0 && (fl & O_DIRECT))
		rec.flags |= PC_FLAG_DIRECT_FD;
	rec.id = next_id();
	rec.ino = st.st_ino;
	rec.aux = first;
	rec.off = off;
	rec.len = (int64_t) len;
	rec.size = st.st_size;
	log_record(&rec, rel, strlen(rel), old + first, last - first);
	if (old != stackbuf)
		free(old);
	errno = save;
	return rec.id;
}

static void
write_done(uint64_t id, ssize_t result)
{
	PcRecord	rec = {0};
	int			save = errno;

	if (id == 0)
		return;
	if (exit_after_write > 0 && --exit_after_write == 0)
		_exit(0);
	rec.type = PC_WRITE_DONE;
	rec.id = id;
	rec.len = result;
	log_record(&rec, "", 0, NULL, 0);
	errno = save;
}

EXPORT ssize_t
write(int fd, const void *buf, size_t count)
{
	uint64_t	id;
	ssize_t		r;

	resolve();
	id = write_begin(fd, &(struct iovec) {(void *) buf, count}, 1, -1);
	r = real_write(fd, buf, count);
	write_done(id, r);
	return r;
}

EXPORT ssize_t
pwrite(int fd, const void *buf, size_t count, off_t offset)
{
	uint64_t	id;
	ssize_t		r;

	resolve();
	id = write_begin(fd, &(struct iovec) {(void *) buf, count}, 1, offset);
	r = real_pwrite(fd, buf, count, offset);
	write_done(id, r);
	return r;
}

EXPORT ssize_t
pwrite64(int fd, const void *buf, size_t count, off64_t offset)
{
	uint64_t	id;
	ssize_t		r;

	resolve();
	id = write_begin(fd, &(struct iovec) {(void *) buf, count}, 1, offset);
	r = real_pwrite64(fd, buf, count, offset);
	write_done(id, r);
	return r;
}

EXPORT ssize_t
pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	uint64_t	id;
	ssize_t		r;

	resolve();
	id = write_begin(fd, iov, iovcnt, offset);
	r = real_pwritev(fd, iov, iovcnt, offset);
	write_done(id, r);
	return r;
}

EXPORT ssize_t
pwritev64(int fd, const struct iovec *iov, int iovcnt, off64_t offset)
{
	uint64_t	id;
	ssize_t		r;

	resolve();
	id = write_begin(fd, iov, iovcnt, offset);
	r = real_pwritev64(fd, iov, iovcnt, offset);
	write_done(id, r);
	return r;
}

/* fsync and fdatasync: a begin record, the call, an end record. */
static int
sync_fd(int fd, int (*fn) (int))
{
	PcRecord	rec = {0};
	struct stat st;
	char		rel[PATH_MAX];
	int			r;
	int			save = errno;

	if (!active || !watched_fd(fd, rel, sizeof(rel), &st))
	{
		errno = save;
		return fn(fd);
	}
	rec.id = next_id();
	rec.ino = st.st_ino;
	if (S_ISDIR(st.st_mode))
	{
		rec.type = PC_DIRSYNC;
		log_record(&rec, rel, strlen(rel), NULL, 0);
	}
	else
	{
		rec.type = PC_FSYNC;
		log_record(&rec, rel, strlen(rel), NULL, 0);
	}
	errno = save;
	r = fn(fd);
	save = errno;
	rec.type = S_ISDIR(st.st_mode) ? PC_DIRSYNC_DONE : PC_FSYNC_DONE;
	rec.len = r;
	log_record(&rec, "", 0, NULL, 0);
	errno = save;
	return r;
}

EXPORT int
fsync(int fd)
{
	resolve();
	return sync_fd(fd, real_fsync);
}

EXPORT int
fdatasync(int fd)
{
	resolve();
	return sync_fd(fd, real_fdatasync);
}

EXPORT void
sync(void)
{
	PcRecord	rec = {0};

	resolve();
	if (!active)
	{
		real_sync();
		return;
	}
	rec.type = PC_SYNCALL;
	rec.id = next_id();
	log_record(&rec, "", 0, NULL, 0);
	real_sync();
	rec.type = PC_SYNCALL_DONE;
	log_record(&rec, "", 0, NULL, 0);
}

EXPORT int
syncfs(int fd)
{
	PcRecord	rec = {0};
	int			r;
	int			save;

	resolve();
	if (!active)
		return real_syncfs(fd);
	rec.type = PC_SYNCALL;
	rec.id = next_id();
	log_record(&rec, "", 0, NULL, 0);
	r = real_syncfs(fd);
	save = errno;
	rec.type = PC_SYNCALL_DONE;
	rec.len = r;
	log_record(&rec, "", 0, NULL, 0);
	errno = save;
	return r;
}

/*
 * open and friends: a file that the call created is logged.  With O_EXCL
 * success means created; otherwise the name is looked up first.  O_TRUNC
 * of a non-empty file is a size change the model does not cover.
 */
#define OPEN_CREATES	0x01
#define OPEN_TRUNCATES	0x02

static int
open_effects(int dirfd, const char *path, int flags)
{
	struct stat st;

	if (!active || !(flags & (O_CREAT | O_TRUNC)))
		return 0;
	if ((flags & O_CREAT) && (flags & O_EXCL))
		return OPEN_CREATES;
	if (fstatat(dirfd, path, &st, 0) != 0)
		return (errno == ENOENT && (flags & O_CREAT)) ? OPEN_CREATES : 0;
	return ((flags & O_TRUNC) && S_ISREG(st.st_mode) && st.st_size > 0 &&
			(flags & O_ACCMODE) != O_RDONLY) ? OPEN_TRUNCATES : 0;
}

static void
open_log(int fd, int effects)
{
	PcRecord	rec = {0};
	struct stat st;
	char		rel[PATH_MAX];

	if (fd < 0 || effects == 0 || !watched_fd(fd, rel, sizeof(rel), &st))
		return;
	rec.ino = st.st_ino;
	if (effects & OPEN_CREATES)
	{
		rec.type = PC_CREATE;
		log_record(&rec, rel, strlen(rel), NULL, 0);
	}
	else
	{
		rec.type = PC_UNMODELLED;
		log_record(&rec, "open O_TRUNC", 12, NULL, 0);
	}
}

/* Called around every open: resolve, and log what the open changed. */
static int
open_before(int dirfd, const char *path, int flags)
{
	int			save;
	int			effects;

	resolve();
	save = errno;
	effects = open_effects(dirfd, path, flags);
	errno = save;
	return effects;
}

static int
open_after(int fd, int effects)
{
	int			save = errno;

	if (effects && fd >= 0)
		open_log(fd, effects);
	errno = save;
	return fd;
}

/* The mode argument is there only when the flags ask for one. */
#define OPEN_MODE(flags, mode) \
	do { \
		if ((flags) & (O_CREAT | __O_TMPFILE)) \
		{ \
			va_list		ap; \
			va_start(ap, flags); \
			mode = (mode_t) va_arg(ap, int); \
			va_end(ap); \
		} \
	} while (0)

EXPORT int
open(const char *path, int flags, ...)
{
	mode_t		mode = 0;
	int			effects;

	OPEN_MODE(flags, mode);
	effects = open_before(AT_FDCWD, path, flags);
	return open_after(real_open(path, flags, mode), effects);
}

EXPORT int
open64(const char *path, int flags, ...)
{
	mode_t		mode = 0;
	int			effects;

	OPEN_MODE(flags, mode);
	effects = open_before(AT_FDCWD, path, flags);
	return open_after(real_open64(path, flags, mode), effects);
}

EXPORT int
openat(int dirfd, const char *path, int flags, ...)
{
	mode_t		mode = 0;
	int			effects;

	OPEN_MODE(flags, mode);
	effects = open_before(dirfd, path, flags);
	return open_after(real_openat(dirfd, path, flags, mode), effects);
}

EXPORT int
openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t		mode = 0;
	int			effects;

	OPEN_MODE(flags, mode);
	effects = open_before(dirfd, path, flags);
	return open_after(real_openat64(dirfd, path, flags, mode), effects);
}

EXPORT int
creat(const char *path, mode_t mode)
{
	int			effects = open_before(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC);

	return open_after(real_creat(path, mode), effects);
}

EXPORT int
creat64(const char *path, mode_t mode)
{
	int			effects = open_before(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC);

	return open_after(real_creat64(path, mode), effects);
}

/* The inode a name points to now (not following a last symlink), or 0. */
static uint64_t
name_ino(int dirfd, const char *path)
{
	struct stat st;

	return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_ino : 0;
}

/*
 * rename within the watched directory is logged as a rename; a file moved
 * in appears like a created one, a file moved out disappears like an
 * unlinked one.
 */
static int
do_rename(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		  int how, unsigned int flags)
{
	char		oldrel[PATH_MAX];
	char		newrel[PATH_MAX];
	bool		old_in = false;
	bool		new_in = false;
	uint64_t	ino = 0;
	uint64_t	replaced = 0;
	int			r;
	int			save = errno;

	if (active)
	{
		old_in = watched_path(olddirfd, oldpath, oldrel, sizeof(oldrel));
		new_in = watched_path(newdirfd, newpath, newrel, sizeof(newrel));
		if (old_in || new_in)
		{
			ino = name_ino(olddirfd, oldpath);
			replaced = name_ino(newdirfd, newpath);
		}
	}
	errno = save;
	if (how == 2)
		r = real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
	else if (how == 1)
		r = real_renameat(olddirfd, oldpath, newdirfd, newpath);
	else
		r = real_rename(oldpath, newpath);
	if (r == 0 && (old_in || new_in) && (flags & RENAME_EXCHANGE))
	{
		PcRecord	rec = {0};

		save = errno;
		rec.type = PC_UNMODELLED;
		rec.ino = ino;
		log_record(&rec, "renameat2 RENAME_EXCHANGE", 25, NULL, 0);
		errno = save;
	}
	else if (r == 0 && (old_in || new_in))
	{
		PcRecord	rec = {0};
		char		both[2 * PATH_MAX];
		size_t		ol = strlen(oldrel);
		size_t		nl = strlen(newrel);

		save = errno;
		rec.ino = ino;
		if (old_in && new_in)
		{
			rec.type = PC_RENAME;
			rec.aux = replaced;
			memcpy(both, oldrel, ol + 1);
			memcpy(both + ol + 1, newrel, nl);
			log_record(&rec, both, ol + 1 + nl, NULL, 0);
		}
		else if (new_in)
		{
			rec.type = PC_CREATE;
			rec.aux = replaced;
			log_record(&rec, newrel, nl, NULL, 0);
		}
		else
		{
			rec.type = PC_UNLINK;
			log_record(&rec, oldrel, ol, NULL, 0);
		}
		errno = save;
	}
	return r;
}

EXPORT int
rename(const char *oldpath, const char *newpath)
{
	resolve();
	return do_rename(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0, 0);
}

EXPORT int
renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
	resolve();
	return do_rename(olddirfd, oldpath, newdirfd, newpath, 1, 0);
}

EXPORT int
renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		  unsigned int flags)
{
	resolve();
	return do_rename(olddirfd, oldpath, newdirfd, newpath, 2, flags);
}

static int
do_link(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		int flags, bool at)
{
	char		rel[PATH_MAX];
	bool		in = false;
	int			r;
	int			save = errno;

	if (active)
		in = watched_path(newdirfd, newpath, rel, sizeof(rel));
	errno = save;
	r = at ? real_linkat(olddirfd, oldpath, newdirfd, newpath, flags)
		: real_link(oldpath, newpath);
	if (r == 0 && in)
	{
		PcRecord	rec = {0};

		save = errno;
		rec.type = PC_LINK;
		rec.ino = name_ino(newdirfd, newpath);
		log_record(&rec, rel, strlen(rel), NULL, 0);
		errno = save;
	}
	return r;
}

EXPORT int
link(const char *oldpath, const char *newpath)
{
	resolve();
	return do_link(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0, false);
}

EXPORT int
linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
	resolve();
	return do_link(olddirfd, oldpath, newdirfd, newpath, flags, true);
}

static int
do_unlink(int dirfd, const char *path, int flags, bool at)
{
	char		rel[PATH_MAX];
	bool		in = false;
	uint64_t	ino = 0;
	int			r;
	int			save = errno;

	if (active && (in = watched_path(dirfd, path, rel, sizeof(rel))))
		ino = name_ino(dirfd, path);
	errno = save;
	r = at ? real_unlinkat(dirfd, path, flags) : real_unlink(path);
	if (r == 0 && in)
	{
		PcRecord	rec = {0};

		save = errno;
		rec.type = PC_UNLINK;
		rec.ino = ino;
		log_record(&rec, rel, strlen(rel), NULL, 0);
		errno = save;
	}
	return r;
}

EXPORT int
unlink(const char *path)
{
	resolve();
	return do_unlink(AT_FDCWD, path, 0, false);
}

EXPORT int
unlinkat(int dirfd, const char *path, int flags)
{
	resolve();
	return do_unlink(dirfd, path, flags, true);
}

/* Size changes other than by writing are not modelled: say so loudly. */
static void
log_unmodelled(int fd, const char *what)
{
	PcRecord	rec = {0};
	struct stat st;
	char		rel[PATH_MAX];
	int			save = errno;

	if (active && watched_fd(fd, rel, sizeof(rel), &st) && S_ISREG(st.st_mode))
	{
		rec.type = PC_UNMODELLED;
		rec.ino = st.st_ino;
		log_record(&rec, what, strlen(what), NULL, 0);
	}
	errno = save;
}

EXPORT int
ftruncate(int fd, off_t length)
{
	resolve();
	log_unmodelled(fd, "ftruncate");
	return real_ftruncate(fd, length);
}

EXPORT int
fallocate(int fd, int mode, off_t offset, off_t len)
{
	resolve();
	log_unmodelled(fd, "fallocate");
	return real_fallocate(fd, mode, offset, len);
}

EXPORT int
posix_fallocate(int fd, off_t offset, off_t len)
{
	resolve();
	log_unmodelled(fd, "posix_fallocate");
	return real_posix_fallocate(fd, offset, len);
}

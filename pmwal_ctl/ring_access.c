/*-------------------------------------------------------------------------
 *
 * ring_access.c
 *		Opening, locking, mapping and persisting a ring, and checking its
 *		header, for every command of pmwal_ctl.
 *
 * Every ring path is opened as the server opens it: never through a
 * symbolic link, and only once it is known to be a regular file or a
 * character device (a FIFO would block an open for reading).  Every header
 * field is checked (ring_check_header, shared with the server) before any
 * arithmetic uses it, with or without -D.
 *
 * A character device is taken for a devdax device: its size comes from
 * sysfs, as in the server (ring_file.c), since lseek() and st_size give 0.
 * The lock is the server's flock(): holding it proves no server uses the
 * ring; a command that changes or reads the ring's WAL requires it.
 *
 * IDENTIFICATION
 *		pmwal_ctl/ring_access.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <fcntl.h>
#include <libpmem.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/logging.h"

#include "pmwal_ctl.h"

/* ---------------------------------------------------------------------
 * Opening and mapping a ring
 * --------------------------------------------------------------------- */

static const char *
file_type_name(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISLNK(mode))
		return "a symbolic link";
	return "not a regular file";
}

/*
 * Open a ring path as the server does: look at what the path names first
 * (O_PATH, which neither follows a link nor blocks on a FIFO), refuse a
 * symbolic link and anything but a regular file or a character device,
 * then open that very file.  Returns the descriptor, or -1 with "why"
 * filled in (and *missing set when the path does not exist); *st holds
 * what the path named, or zeros if even that is unknown.
 */
int
try_open_ring(const char *path, int flags, struct stat *st, bool *missing,
			  char *why, size_t whylen)
{
	struct stat now;
	int			pfd;
	int			fd;

	*missing = false;
	memset(st, 0, sizeof(struct stat));
	pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
	{
		*missing = errno == ENOENT;
		snprintf(why, whylen, "could not open ring \"%s\": %s", path, strerror(errno));
		return -1;
	}
	if (fstat(pfd, st) != 0)
	{
		snprintf(why, whylen, "could not stat ring \"%s\": %s", path, strerror(errno));
		close(pfd);
		return -1;
	}
	close(pfd);
	if (S_ISLNK(st->st_mode))
	{
		snprintf(why, whylen, "\"%s\" is a symbolic link", path);
		return -1;
	}
	if (!S_ISREG(st->st_mode) && !S_ISCHR(st->st_mode))
	{
		snprintf(why, whylen, "\"%s\" is %s, neither a regular file nor a devdax device",
				 path, file_type_name(st->st_mode));
		return -1;
	}
	fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | PG_BINARY);
	if (fd < 0 || fstat(fd, &now) != 0)
	{
		*missing = errno == ENOENT;
		snprintf(why, whylen, "could not open ring \"%s\": %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
	{
		snprintf(why, whylen, "ring \"%s\" was replaced while it was opened", path);
		close(fd);
		return -1;
	}
	/* O_NONBLOCK was for the open only */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
	{
		snprintf(why, whylen, "could not set flags of ring \"%s\": %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	*st = now;
	return fd;
}

/* Report a failure of try_open_ring() and exit. */
void
open_failed(const char *path, const struct stat *st, const char *why)
{
	pg_log_error("%s", why);
	if (S_ISLNK(st->st_mode))
		pg_log_error_hint("pmwal_ctl, like the server, does not follow a symbolic link to a ring: whoever can change the link could make it read or overwrite another file.  Give the ring file or device itself.");
	else if (S_ISDIR(st->st_mode))
		pg_log_error_hint("Give the ring file in that directory, for example \"%s/pmwal.ring\".", path);
	exit(EXIT_ERROR);
}

/*
 * Size of a ring: a regular file's size, or a devdax device's from sysfs
 * (lseek and st_size give 0 for one), read as the server's devdax_size()
 * in ring_file.c reads it.  False, with "why", if sysfs does not say.
 */
bool
ring_size(const char *path, const struct stat *st, uint64 *size, char *why, size_t whylen)
{
	char		sysfs[64];
	unsigned long long n = 0;
	FILE	   *f;

	if (S_ISREG(st->st_mode))
	{
		*size = (uint64) st->st_size;
		return true;
	}
	snprintf(sysfs, sizeof(sysfs), "/sys/dev/char/%u:%u/size",
			 major(st->st_rdev), minor(st->st_rdev));
	f = fopen(sysfs, "r");
	if (f == NULL)
	{
		snprintf(why, whylen, "could not determine the size of character device \"%s\" from \"%s\": %s",
				 path, sysfs, strerror(errno));
		return false;
	}
	if (fscanf(f, "%llu", &n) != 1 || n == 0)
	{
		fclose(f);
		snprintf(why, whylen, "could not determine the size of character device \"%s\" from \"%s\": it gives no size",
				 path, sysfs);
		return false;
	}
	fclose(f);
	*size = (uint64) n;
	return true;
}

/*
 * Map the whole ring through its descriptor.  Writable: a file on a DAX
 * file system maps with MAP_SYNC and a devdax device is persistent memory
 * (pmem_persist); so is anything with PMEM_IS_PMEM_FORCE=1, as in the
 * server; anything else is persisted with msync().  A file smaller than
 * the header is not mapped: ring_check_header() reports it from the size.
 */
void
map_ring(Ring *ring, bool writable)
{
	static PGAlignedBlock none;		/* the header of a file too small to have one */
	const char *force = getenv("PMEM_IS_PMEM_FORCE");
	bool		dax = false;
	char		why[MAXPGPATH + 128];

	if (!ring_size(ring->path, &ring->st, &ring->len, why, sizeof(why)))
	{
		pg_log_error("%s", why);
		pg_log_error_hint("A character device is taken for a devdax device, whose size sysfs gives; \"%s\" does not look like one.",
						  ring->path);
		exit(EXIT_ERROR);
	}
	if (ring->len < RING_HEADER_SIZE)
	{
		StaticAssertStmt(sizeof(none) >= RING_HEADER_SIZE, "header page too small");
		ring->base = NULL;
		ring->hdr = (RingHeader *) none.data;
		ring->data = NULL;
		return;
	}
	if (writable)
	{
		ring->base = mmap(NULL, ring->len, PROT_READ | PROT_WRITE,
						  MAP_SHARED_VALIDATE | MAP_SYNC, ring->fd, 0);
		dax = ring->base != MAP_FAILED;
		if (!dax)
			ring->base = mmap(NULL, ring->len, PROT_READ | PROT_WRITE, MAP_SHARED,
							  ring->fd, 0);
	}
	else
		ring->base = mmap(NULL, ring->len, PROT_READ, MAP_SHARED, ring->fd, 0);
	if (ring->base == MAP_FAILED)
		pg_fatal("could not map ring \"%s\": %m", ring->path);
	ring->is_pmem = dax || S_ISCHR(ring->st.st_mode) ||
		(force != NULL && strcmp(force, "1") == 0);
	ring->hdr = (RingHeader *) ring->base;
	ring->data = ring->base + RING_HEADER_SIZE;
}

void
lock_ring(Ring *ring)
{
	ring->locked = flock(ring->fd, LOCK_EX | LOCK_NB) == 0;
	if (!ring->locked && errno != EWOULDBLOCK)
		pg_fatal("could not lock ring \"%s\": %m", ring->path);
}

void
open_ring(Ring *ring, const char *path, bool writable)
{
	char		why[MAXPGPATH + 128];
	bool		missing;

	memset(ring, 0, sizeof(Ring));
	ring->path = path;
	ring->fd = try_open_ring(path, writable ? O_RDWR : O_RDONLY, &ring->st,
							 &missing, why, sizeof(why));
	if (ring->fd < 0)
		open_failed(path, &ring->st, why);
	lock_ring(ring);
	map_ring(ring, writable);
}

void
require_lock(Ring *ring)
{
	if (!ring->locked)
		pg_fatal("ring \"%s\" is in use by a running server; stop the server first", ring->path);
}

void
persist(Ring *ring, const void *addr, size_t len)
{
	if (ring->is_pmem)
		pmem_persist(addr, len);
	else if (pmem_msync(addr, len) != 0)
		pg_fatal("could not persist ring \"%s\": %m", ring->path);
}

/* ---------------------------------------------------------------------
 * The header
 * --------------------------------------------------------------------- */

/*
 * Check the header; with a data directory, against that cluster too.
 * Prints what is wrong with it, and returns the verdict: RING_OK, or
 * RING_INTERRUPTED_REINIT (usable: it holds nothing, and a server
 * initialises it again), or one a server refuses.
 */
RingCheck
check_header(Ring *ring, ControlFileData *control)
{
	RingExpect	expect = {0, 0, XLOG_BLCKSZ};
	char		detail[256];
	RingCheck	verdict;

	if (control)
	{
		expect.system_identifier = control->system_identifier;
		expect.wal_segment_size = control->xlog_seg_size;
	}
	verdict = ring_check_header(ring->hdr, ring->len, &expect, detail, sizeof(detail));
	if (verdict == RING_UNINITIALISED)
		printf(LABEL "uninitialised (all zero): not a pmwal ring, a server refuses it; \"pmwal_ctl init\" makes it one\n", "header:");
	else if (verdict == RING_INTERRUPTED_REINIT)
		printf(LABEL "an initialisation was interrupted: the ring holds no WAL, and a server (or \"pmwal_ctl init\") initialises it again (%s)\n",
			   "header:", detail);
	else if (verdict != RING_OK)
	{
		printf(LABEL "NOT USABLE: %s\n", "header:", detail);
		if (verdict == RING_BAD_RANGE)
			printf(LABEL "INCONSISTENT: %s\n", "positions:", position_problems(ring->hdr));
		if (verdict == RING_OLD_VERSION_WITH_WAL)
			printf(LABEL "start the server once with the pmwal that wrote the ring, so that it restores the WAL, and stop it cleanly; that version's pmwal_ctl dumps it\n",
				   "what to do:");
	}
	else
		printf(LABEL "ok\n", "header:");
	return verdict;
}

/*
 * Which checks of the dynamic words fail, in words, for a header whose
 * static part checked but whose positions do not (ring_check_header's
 * RING_BAD_RANGE, whose detail names no single check).
 */
char *
position_problems(const RingHeader *hdr)
{
	uint64		cap = hdr->st.s.capacity;
	char	   *list = pstrdup("");

#define ADD_PROBLEM(...) \
	do { \
		char	   *item = psprintf(__VA_ARGS__); \
		list = list[0] ? psprintf("%s; %s", list, item) : item; \
	} while (0)

	if (hdr->state.v != RING_STATE_EMPTY && hdr->state.v != RING_STATE_IN_USE)
		ADD_PROBLEM("the state word holds the unknown value 0x%016llX",
					(unsigned long long) hdr->state.v);
	else if (ring_holds_wal(hdr))
	{
		if (hdr->head.v - hdr->tail.v > cap)
			ADD_PROBLEM("the tail " PMWAL_LSN " and the head " PMWAL_LSN " are " UINT64_FORMAT " bytes apart, more than the capacity " UINT64_FORMAT,
						LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						hdr->head.v - hdr->tail.v, cap);
		if (hdr->tail.v % XLOG_BLCKSZ != 0)
			ADD_PROBLEM("the tail " PMWAL_LSN " is not on a page boundary", LSN_FORMAT_ARGS(hdr->tail.v));
		if (hdr->head.v % XLOG_BLCKSZ != 0)
			ADD_PROBLEM("the head " PMWAL_LSN " is not on a page boundary", LSN_FORMAT_ARGS(hdr->head.v));
		if (hdr->timeline.v == 0 || hdr->timeline.v > PG_UINT32_MAX)
			ADD_PROBLEM("the timeline word holds " UINT64_FORMAT ", which is no timeline",
						(uint64) hdr->timeline.v);
	}
#undef ADD_PROBLEM
	return list[0] ? list : pstrdup("the positions are inconsistent");
}

/* Would a server use a ring with this verdict? */
bool
ring_usable(RingCheck verdict)
{
	return verdict == RING_OK || verdict == RING_INTERRUPTED_REINIT;
}

/* Does the ring hold WAL?  Only a valid header can say so. */
bool
holds_wal(const Ring *ring, RingCheck verdict)
{
	return verdict == RING_OK && ring_holds_wal(ring->hdr);
}

/*-------------------------------------------------------------------------
 *
 * ringrecord.c
 *		The ring half of libpowercut: a record of what persistent memory
 *		really holds, kept from pmwal's libpmem calls and independent of
 *		pmwal's bookkeeping.
 *
 * On x86 with ADR a store reaches the persistence domain only when its
 * cache line is flushed (clwb, or a non-temporal store) and the flush is
 * fenced (sfence, pmem_drain).  A line that was not flushed may still
 * reach pmem at any time, through eviction.  The record models the first
 * rule and leaves the second to the cut (ring_cut, modes durable, random,
 * all):
 *
 *	- pmem_flush (and the flush inside pmem_persist, pmem_msync,
 *	  pmem_memcpy_*, pmem_memset_*) takes a copy of the flushed lines, with
 *	  a timestamp, into this process's pending list: cache-line granular,
 *	  as clwb writes back whole lines.
 *	- pmem_drain (and every *_persist) writes the pending copies of this
 *	  process into the "durable image" (RING.durable), a line only if its
 *	  copy is newer than the image's (RING.durable.ts), under a lock: the
 *	  image survives a SIGKILL.  Flushes that no drain followed are lost
 *	  with the process, as on hardware.
 *	- The image starts as what the ring file held when the server started
 *	  (the harness copies it; a ring created by the server starts as what
 *	  the file held at its first flush in any process).
 *
 * Ordering hazards: a flush of a header line (the first 4096 bytes: the
 * words that publish data, such as head) while this process still has
 * undrained flushes is logged in RING.hazards -- the header may reach pmem
 * before the data it points to.  With POWERCUT_RING_STOP=hazard the
 * process then stops itself (SIGSTOP) before that flush, freezing that
 * crash state for the harness to kill and cut; with random:P it stops at
 * any libpmem call with probability P; with claim right after a drain
 * that left the image claiming WAL it does not hold (below) -- every stop
 * logged in RING.stops.  With POWERCUT_RING_ARM=file, no process stops
 * before that file exists (the harness creates it once the server is up).
 *
 * Claims: the one stop that knows pmwal's ring format (ring_format.h,
 * format 2).  An ordering bug between two stores that are each persisted
 * (an empty IN_USE ring moved up that stores its head before its tail,
 * claiming for an instant what lies between) leaves no undrained flush
 * behind, only a window of a few instructions between two persists that
 * no random stop finds.  So with POWERCUT_RING_STOP=claim every drain
 * that changes the image's header checks what the image now claims: if
 * its state is IN_USE and tail < head, the ring holds WAL [tail, head) --
 * WAL that a restore writes back over pg_wal's -- and every WAL page that
 * begins there must carry its own address in its page header
 * (xlp_pageaddr; not xlp_magic, which differs per major version).  A page
 * that does not (a page of an older lap, or one never copied) makes the
 * process stop right after the drain, with the image in exactly that
 * state; the harness kills and cuts, and the restart shows what a power
 * cut there does.  An IN_USE claim in a header of another format stops it
 * too ("claim-unknown-format"): a claim this check cannot judge is not
 * passed.  A drain of WAL pages alone is not checked: a copy that
 * overwrote a claimed page of the previous lap (a ring written past its
 * capacity) goes unseen until the next header drain, which may set the
 * tail past it.
 *
 * Active when POWERCUT_RING names the ring file; the ring is found by the
 * address of the first call, in /proc/self/maps (pmwal maps it with its own
 * mmap; children inherit the mapping and what this file knows of it).
 *
 * IDENTIFICATION
 *		tools/powercut/ringrecord.c
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "powercut.h"

#define EXPORT __attribute__((visibility("default")))
#define LINE 64
#define HEADER_BYTES 4096

typedef struct Pending
{
	uint64_t	off;			/* line-aligned offset in the ring file */
	uint64_t	len;			/* multiple of LINE */
	uint64_t	ts;
	char	   *bytes;
} Pending;

static bool ring_resolved = false;
static bool ring_wanted = false;
static char ring_path[PATH_MAX];
static char *ring_base = NULL;	/* mapping of the ring file, once found */
static uint64_t ring_len = 0;
static bool ring_absent = false;	/* looked, no such mapping here */
static pid_t files_pid = 0;		/* the files below were opened by this pid */
static int	image_fd = -1;
static int	ts_fd = -1;
static int	lock_fd = -1;
static Pending *pending = NULL;
static int	npending = 0;
static int	maxpending = 0;
static pid_t pending_pid = 0;
static enum
{
	STOP_NONE, STOP_HAZARD, STOP_RANDOM, STOP_CLAIM
}			stop_mode = STOP_NONE;
static double stop_p = 0;
static char arm_path[PATH_MAX];	/* POWERCUT_RING_ARM; "" if none */
static bool armed = false;
static unsigned int rng_state = 0;
static int	depth = 0;			/* libpmem may call its own exported functions */

static void (*real_pmem_flush) (const void *, size_t);
static void (*real_pmem_drain) (void);
static void (*real_pmem_persist) (const void *, size_t);
static int	(*real_pmem_msync) (const void *, size_t);
static void *(*real_pmem_memcpy_nodrain) (void *, const void *, size_t);
static void *(*real_pmem_memcpy_persist) (void *, const void *, size_t);
static void *(*real_pmem_memset_nodrain) (void *, int, size_t);
static void *(*real_pmem_memset_persist) (void *, int, size_t);

static void
die(const char *what)
{
	fprintf(stderr, "libpowercut ring record: %s: %s\n", what, strerror(errno));
	abort();
}

static void
ring_resolve(void)
{
	const char *r;
	const char *s;

	if (ring_resolved)
		return;
	real_pmem_flush = must_dlsym("pmem_flush");
	real_pmem_drain = must_dlsym("pmem_drain");
	real_pmem_persist = must_dlsym("pmem_persist");
	real_pmem_msync = must_dlsym("pmem_msync");
	real_pmem_memcpy_nodrain = must_dlsym("pmem_memcpy_nodrain");
	real_pmem_memcpy_persist = must_dlsym("pmem_memcpy_persist");
	real_pmem_memset_nodrain = must_dlsym("pmem_memset_nodrain");
	real_pmem_memset_persist = must_dlsym("pmem_memset_persist");
	r = getenv("POWERCUT_RING");
	if (r != NULL && r[0] != '\0' && strlen(r) < sizeof(ring_path))
	{
		strcpy(ring_path, r);
		ring_wanted = true;
	}
	s = getenv("POWERCUT_RING_STOP");
	if (s != NULL && strcmp(s, "hazard") == 0)
		stop_mode = STOP_HAZARD;
	else if (s != NULL && strncmp(s, "random:", 7) == 0)
	{
		stop_mode = STOP_RANDOM;
		stop_p = atof(s + 7);
	}
	else if (s != NULL && strcmp(s, "claim") == 0)
		stop_mode = STOP_CLAIM;
	s = getenv("POWERCUT_RING_ARM");
	if (s != NULL && strlen(s) < sizeof(arm_path))
		strcpy(arm_path, s);
	ring_resolved = true;
}

/* Find the ring's mapping around addr in /proc/self/maps. */
static void
find_ring(const void *addr)
{
	FILE	   *f;
	char		line[PATH_MAX + 256];

	if (ring_base != NULL || ring_absent)
		return;
	f = fopen("/proc/self/maps", "r");
	if (f == NULL)
		die("open /proc/self/maps");
	while (fgets(line, sizeof(line), f) != NULL)
	{
		unsigned long lo,
					hi,
					off;
		int			n = 0;
		char	   *path;
		size_t		l;

		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &lo, &hi, &off, &n) < 3 || n == 0)
			continue;
		path = line + n;
		l = strlen(path);
		while (l > 0 && (path[l - 1] == '\n' || path[l - 1] == ' '))
			path[--l] = '\0';
		if ((uintptr_t) addr < lo || (uintptr_t) addr >= hi)
			continue;
		if (off == 0 && strcmp(path, ring_path) == 0)
		{
			ring_base = (char *) lo;
			ring_len = hi - lo;
		}
		break;
	}
	fclose(f);
	if (ring_base == NULL)
		ring_absent = true;
}

/* Copy the ring file into the image when there is none yet. */
static void
image_init(const char *image, const char *ts)
{
	struct stat st;
	int			src,
				dst;
	char		buf[1 << 16];
	ssize_t		n;

	if (stat(image, &st) == 0)
		return;
	src = open(ring_path, O_RDONLY | O_CLOEXEC);
	dst = open(image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (src < 0 || dst < 0)
	{
		if (dst < 0 && errno == EEXIST)
		{
			if (src >= 0)
				close(src);
			return;
		}
		die("create the durable image");
	}
	while ((n = read(src, buf, sizeof(buf))) > 0)
		if (write(dst, buf, n) != n)
			die("write the durable image");
	close(src);
	close(dst);
	dst = open(ts, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (dst < 0)
		die("create the image's timestamps");
	close(dst);
}

/* Open the image, its timestamps and its lock in this process. */
static void
open_files(void)
{
	char		image[PATH_MAX + 32];
	char		ts[PATH_MAX + 32];
	char		lock[PATH_MAX + 32];

	if (files_pid == getpid())
		return;
	snprintf(image, sizeof(image), "%s.durable", ring_path);
	snprintf(ts, sizeof(ts), "%s.durable.ts", ring_path);
	snprintf(lock, sizeof(lock), "%s.durable.lock", ring_path);
	if (lock_fd >= 0 && files_pid != 0)
	{
		/* inherited across fork: a lock of its own in this process */
		close(image_fd);
		close(ts_fd);
		close(lock_fd);
	}
	lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0)
		die("lock the durable image");
	image_init(image, ts);
	flock(lock_fd, LOCK_UN);
	image_fd = open(image, O_RDWR | O_CLOEXEC);
	ts_fd = open(ts, O_RDWR | O_CLOEXEC);
	if (image_fd < 0 || ts_fd < 0)
		die("open the durable image");
	files_pid = getpid();
}

/* Is [addr, addr+len) in the ring?  Sets *off. */
static bool
in_ring(const void *addr, size_t len, uint64_t *off)
{
	ring_resolve();
	if (!ring_wanted || len == 0 || depth > 0)
		return false;
	find_ring(addr);
	if (ring_base == NULL || (const char *) addr < ring_base ||
		(const char *) addr + len > ring_base + ring_len)
		return false;
	*off = (const char *) addr - ring_base;
	return true;
}

static uint64_t
now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t) t.tv_sec * 1000000000u + t.tv_nsec;
}

static void
log_line(const char *suffix, const char *what, uint64_t off)
{
	char		path[PATH_MAX + 32];
	char		msg[128];
	int			fd;
	int			n;

	snprintf(path, sizeof(path), "%s.%s", ring_path, suffix);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0)
		die("open the hazard log");
	n = snprintf(msg, sizeof(msg), "%d %s %llu %d\n", (int) getpid(), what,
				 (unsigned long long) off, npending);
	if (write(fd, msg, n) != n)
		die("write the hazard log");
	close(fd);
}

/*
 * May a process stop now?  Not before the file POWERCUT_RING_ARM names
 * exists, if it names one: the harness arms the stops once the server is
 * up, so that a stop in the postmaster's own header stores at the start
 * (binding the ring) does not hold the start forever, and the stops fall
 * where the load is.  Asked only when a stop is due, and remembered.
 */
static bool
stops_armed(void)
{
	if (!armed && (arm_path[0] == '\0' || access(arm_path, F_OK) == 0))
		armed = true;
	return armed;
}

/* A libpmem call on the ring begins: maybe stop here (random stops). */
static void
call_boundary(const char *what, uint64_t off)
{
	if (stop_mode != STOP_RANDOM)
		return;
	if (rng_state == 0)
		rng_state = (unsigned int) (getpid() ^ now_ns());
	if ((double) rand_r(&rng_state) / RAND_MAX < stop_p && stops_armed())
	{
		log_line("stops", what, off);
		raise(SIGSTOP);
	}
}

/* The flushed lines of [off, off+len): copied now, durable at a drain. */
static void
record_flush(uint64_t off, size_t len)
{
	uint64_t	lo = off & ~(uint64_t) (LINE - 1);
	uint64_t	hi = (off + len + LINE - 1) & ~(uint64_t) (LINE - 1);
	Pending    *p;

	if (hi > ring_len)
		hi = ring_len;
	if (pending_pid != getpid())
	{
		/* undrained flushes of the parent are not this process's */
		npending = 0;
		pending_pid = getpid();
	}
	/* the image of a ring the server created: the file at its first flush */
	open_files();
	if (lo < HEADER_BYTES && npending > 0)
	{
		log_line("hazards", "header-flush-before-drain", lo);
		if (stop_mode == STOP_HAZARD && stops_armed())
		{
			log_line("stops", "hazard", lo);
			raise(SIGSTOP);
		}
	}
	if (npending == maxpending)
	{
		maxpending = maxpending ? maxpending * 2 : 16;
		pending = realloc(pending, maxpending * sizeof(Pending));
		if (pending == NULL)
			die("record a flush");
	}
	p = &pending[npending++];
	p->off = lo;
	p->len = hi - lo;
	p->ts = now_ns();
	p->bytes = malloc(p->len);
	if (p->bytes == NULL)
		die("record a flush");
	memcpy(p->bytes, ring_base + lo, p->len);
}

/*
 * Offsets in the ring file of what the claim check reads (ring_format.h,
 * format 2: the static header in the first line, then one cache line per
 * dynamic word; and XLogPageHeaderData's xlp_pageaddr, at the same place
 * in every major version, unlike xlp_magic).
 */
#define RF_MAGIC		0		/* char[8] */
#define RF_MAGIC_TEXT	"PMWALRNG"
#define RF_VERSION		8		/* uint32 */
#define RF_FORMAT		2
#define RF_HEADER_SIZE	12		/* uint32 */
#define RF_BLOCK_SIZE	28		/* uint32 */
#define RF_CAPACITY		32		/* uint64 */
#define RF_TAIL			64
#define RF_HEAD			128
#define RF_STATE		192
#define RF_IN_USE		UINT64_C(0x494e555345000002)
#define RF_PAGEADDR		8

static uint64_t
image_u64(uint64_t off)
{
	uint64_t	v = 0;

	if (pread(image_fd, &v, sizeof(v), off) != (ssize_t) sizeof(v))
		die("read the durable image");
	return v;
}

static uint32_t
image_u32(uint64_t off)
{
	uint32_t	v = 0;

	if (pread(image_fd, &v, sizeof(v), off) != (ssize_t) sizeof(v))
		die("read the durable image");
	return v;
}

/*
 * With the image lock held: does the image's ring claim WAL it does not
 * hold?  Returns NULL if not; else what is wrong, and in *at the first WAL
 * page in [tail, head) that lacks its own address, or the format version
 * of a ring this check cannot read (a claim it cannot judge is reported,
 * not passed over).  Pages before "checked_to" were found whole by this
 * process's previous check of the same tail: a page's place in the ring is
 * written again only with that page, or with the page a capacity later,
 * which the server copies only after moving the tail past the first (a
 * build that broke that rule is not what this stop looks for).
 */
static const char *
image_bad_claim(uint64_t *at)
{
	static pid_t checked_pid = 0;
	static uint64_t checked_tail = 0;
	static uint64_t checked_to = 0;
	char		magic[8];
	uint64_t	tail = image_u64(RF_TAIL);
	uint64_t	head = image_u64(RF_HEAD);
	uint64_t	header_size;
	uint64_t	blcksz;
	uint64_t	cap;
	uint64_t	page;

	if (image_u64(RF_STATE) != RF_IN_USE || tail >= head)
		return NULL;
	if (pread(image_fd, magic, sizeof(magic), RF_MAGIC) != (ssize_t) sizeof(magic))
		die("read the durable image");
	header_size = image_u32(RF_HEADER_SIZE);
	blcksz = image_u32(RF_BLOCK_SIZE);
	cap = image_u64(RF_CAPACITY);
	if (memcmp(magic, RF_MAGIC_TEXT, sizeof(magic)) != 0 ||
		image_u32(RF_VERSION) != RF_FORMAT || blcksz == 0 || cap == 0)
	{
		*at = image_u32(RF_VERSION);
		return "claim-unknown-format";
	}
	/* the pages that begin in [tail, head); tail is page-aligned */
	page = tail + (blcksz - tail % blcksz) % blcksz;
	if (checked_pid == getpid() && checked_tail == tail && checked_to > page)
		page = checked_to;
	/* ends within cap / blcksz + 1 pages: two pages a capacity apart share a place */
	for (; page < head; page += blcksz)
	{
		uint64_t	off = header_size + page % cap;

		if (off + RF_PAGEADDR + 8 > ring_len || image_u64(off + RF_PAGEADDR) != page)
		{
			*at = page;
			return "claim";
		}
	}
	/* a forked child starts afresh: its parent's checks may be long past */
	checked_pid = getpid();
	checked_tail = tail;
	checked_to = page;
	return NULL;
}

/* This process's flushes become durable: into the image, newer lines only. */
static void
record_drain(void)
{
	const char *bad = NULL;
	uint64_t	bad_at = 0;
	bool		header = false;

	if (!ring_wanted || ring_base == NULL || pending_pid != getpid() || npending == 0 ||
		depth > 0)
		return;
	open_files();
	if (flock(lock_fd, LOCK_EX) != 0)
		die("lock the durable image");
	for (int i = 0; i < npending; i++)
	{
		Pending    *p = &pending[i];
		uint64_t	nlines = p->len / LINE;
		uint64_t   *ts = calloc(nlines, sizeof(uint64_t));
		ssize_t		got;

		if (ts == NULL)
			die("drain");
		got = pread(ts_fd, ts, nlines * sizeof(uint64_t), (p->off / LINE) * sizeof(uint64_t));
		if (got < 0)
			die("read the image's timestamps");
		for (uint64_t l = 0; l < nlines; l++)
		{
			uint64_t	first = l;

			if (ts[l] > p->ts)
				continue;
			while (l + 1 < nlines && ts[l + 1] <= p->ts)
				l++;
			if (pwrite(image_fd, p->bytes + first * LINE, (l - first + 1) * LINE,
					   p->off + first * LINE) != (ssize_t) ((l - first + 1) * LINE))
				die("write the durable image");
			for (uint64_t k = first; k <= l; k++)
				ts[k] = p->ts;
		}
		if (pwrite(ts_fd, ts, nlines * sizeof(uint64_t), (p->off / LINE) * sizeof(uint64_t)) !=
			(ssize_t) (nlines * sizeof(uint64_t)))
			die("write the image's timestamps");
		free(ts);
		free(p->bytes);
		header |= p->off < HEADER_BYTES;
	}
	npending = 0;
	if (stop_mode == STOP_CLAIM && header && stops_armed())
		bad = image_bad_claim(&bad_at);
	flock(lock_fd, LOCK_UN);
	if (bad != NULL)
	{
		/* once per process: the harness kills and cuts at the first */
		stop_mode = STOP_NONE;
		log_line("stops", bad, bad_at);
		raise(SIGSTOP);
	}
}

EXPORT void
pmem_flush(const void *addr, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(addr, len, &off);

	if (r)
		call_boundary("flush", off);
	depth++;
	real_pmem_flush(addr, len);
	depth--;
	if (r)
		record_flush(off, len);
}

EXPORT void
pmem_drain(void)
{
	ring_resolve();
	if (ring_base != NULL && depth == 0)
		call_boundary("drain", 0);
	depth++;
	real_pmem_drain();
	depth--;
	record_drain();
}

EXPORT void
pmem_persist(const void *addr, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(addr, len, &off);

	if (r)
		call_boundary("persist", off);
	depth++;
	real_pmem_persist(addr, len);
	depth--;
	if (r)
	{
		record_flush(off, len);
		record_drain();
	}
}

EXPORT int
pmem_msync(const void *addr, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(addr, len, &off);
	int			rc;

	if (r)
		call_boundary("msync", off);
	depth++;
	rc = real_pmem_msync(addr, len);
	depth--;
	if (r && rc == 0)
	{
		record_flush(off, len);
		record_drain();
	}
	return rc;
}

EXPORT void *
pmem_memcpy_nodrain(void *dst, const void *src, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(dst, len, &off);
	void	   *res;

	if (r)
		call_boundary("memcpy_nodrain", off);
	depth++;
	res = real_pmem_memcpy_nodrain(dst, src, len);
	depth--;
	if (r)
		record_flush(off, len);
	return res;
}

EXPORT void *
pmem_memcpy_persist(void *dst, const void *src, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(dst, len, &off);
	void	   *res;

	if (r)
		call_boundary("memcpy_persist", off);
	depth++;
	res = real_pmem_memcpy_persist(dst, src, len);
	depth--;
	if (r)
	{
		record_flush(off, len);
		record_drain();
	}
	return res;
}

EXPORT void *
pmem_memset_nodrain(void *dst, int c, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(dst, len, &off);
	void	   *res;

	if (r)
		call_boundary("memset_nodrain", off);
	depth++;
	res = real_pmem_memset_nodrain(dst, c, len);
	depth--;
	if (r)
		record_flush(off, len);
	return res;
}

EXPORT void *
pmem_memset_persist(void *dst, int c, size_t len)
{
	uint64_t	off;
	bool		r = in_ring(dst, len, &off);
	void	   *res;

	if (r)
		call_boundary("memset_persist", off);
	depth++;
	res = real_pmem_memset_persist(dst, c, len);
	depth--;
	if (r)
	{
		record_flush(off, len);
		record_drain();
	}
	return res;
}

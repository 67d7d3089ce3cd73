/*-------------------------------------------------------------------------
 *
 * pmwal_ctl.c
 *		Offline tool for pmwal rings: init, inspect, verify, dump and reset.
 *
 * Works on a ring that no server is using (it takes the ring's lock, as
 * the server does); "inspect" also reads a ring in use.
 *
 * "init" makes a path an empty ring of the cluster given with -D.  The
 * server adopts no file it did not create, so a devdax device, or a file
 * made by hand, must be initialised first.  init creates a missing file
 * exclusively, and otherwise overwrites only a file or device of the user
 * that is empty or whose header is all zero (or holds an interrupted
 * initialisation); never a symbolic link or a file others may access.
 * Other data, or a pmwal ring (which may hold WAL), only with --force, and
 * after printing what it overwrites: a devdax device that held something
 * else can be neither removed nor written with write(2), and the server
 * never overwrites a header it does not know.  Like the server's header
 * rewrite, it stores the state word REINIT first and EMPTY last, so that a
 * kill in between leaves a ring that init or a server initialises again.
 *
 * "verify" applies the checks of the server's restore: the header (identity
 * against a data directory given with -D), then every page header and
 * record CRC from the tail through the end of the last acknowledged commit
 * and on to the head, read by PostgreSQL's own XLogReader in pg_waldump
 * over a dump of the ring.  "dump" writes the ring's WAL as segment files
 * that pg_waldump reads; it creates every file exclusively (never through a
 * symbolic link, never over an existing file), in a directory of the user's
 * own that no one else may write to.  "reset" empties the ring, only with
 * --discard-wal, after printing what it discards.
 *
 * A character device is taken for a devdax device: its size comes from
 * sysfs, as in the server (ring_file.c), since lseek() and st_size give 0.
 *
 * IDENTIFICATION
 *		pmwal_ctl/pmwal_ctl.c
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

#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/logging.h"
#include "getopt_long.h"

#include "ring_format.h"

/* the limits of pmwal.size */
#define RING_MIN_MB			2
#define RING_MAX_MB			65536
#define RING_MB				((uint64) 1024 * 1024)

static const char *progname;

/* a file init created, removed if init fails before it is complete */
static const char *init_created = NULL;

typedef struct Ring
{
	const char *path;
	int			fd;
	char	   *base;
	size_t		len;
	bool		is_pmem;		/* writable only: persist with pmem_persist */
	bool		locked;			/* we hold the lock: no server uses it */
	RingHeader *hdr;
	char	   *data;
} Ring;

static void
usage(void)
{
	printf("%s initialises, inspects, verifies, dumps and resets pmwal rings of a stopped server.\n\n", progname);
	printf("Usage:\n");
	printf("  %s init -D DATADIR [--size=SIZE] [--force] RING\n", progname);
	printf("                                   make RING an empty ring of the cluster in DATADIR\n");
	printf("  %s inspect [-D DATADIR] RING     show the header, the WAL range and whether a start would restore it\n", progname);
	printf("  %s verify  [-D DATADIR] RING     check the ring as the server's restore does (uses pg_waldump)\n", progname);
	printf("  %s dump --to DIR RING            write the ring's WAL as segment files readable by pg_waldump\n", progname);
	printf("  %s reset --discard-wal RING      empty the ring, discarding the WAL it holds\n", progname);
	printf("\nRING is a regular file or a devdax device (a character device, sized from sysfs).\n");
	printf("init creates a missing RING (mode 0600), or takes an existing file or device of\n");
	printf("yours, accessible by you only, that is empty or whose first 4096 bytes are zero;\n");
	printf("it overwrites nothing else.\n");
	printf("\nOptions:\n");
	printf("  -D, --pgdata=DATADIR   compare with this cluster (system identifier, checkpoint);\n");
	printf("                         init: the cluster the ring is for\n");
	printf("      --size=SIZE        init: capacity of the data area in MB, %d to %d like pmwal.size\n", RING_MIN_MB, RING_MAX_MB);
	printf("                         (\"16\", \"16MB\" or \"1GB\"); needed for a missing or empty file;\n");
	printf("                         default: what the file or device holds after the header\n");
	printf("      --to=DIR           directory to dump into: yours and writable by no one else,\n");
	printf("                         created with mode 0700 if missing; existing files are not overwritten\n");
	printf("      --discard-wal      confirm that reset may discard WAL\n");
	printf("      --force            init: overwrite data that is not a pmwal ring, or a pmwal ring\n");
	printf("                         and the WAL it holds, after printing what it overwrites\n");
	printf("  -?, --help             show this help, then exit\n");
	printf("\nExit status: 0 when the ring is usable (verify: verified; init: initialised), 1 otherwise.\n");
}

/*
 * Size of a ring: a regular file's size, or a devdax device's from sysfs
 * (lseek and st_size give 0 for one), read as the server's devdax_size()
 * in ring_file.c reads it.
 */
static uint64
ring_size(const char *path, const struct stat *st)
{
	char		sysfs[64];
	unsigned long long size = 0;
	FILE	   *f;

	if (S_ISREG(st->st_mode))
		return (uint64) st->st_size;
	if (!S_ISCHR(st->st_mode))
		pg_fatal("ring \"%s\" is neither a regular file nor a devdax device", path);
	snprintf(sysfs, sizeof(sysfs), "/sys/dev/char/%u:%u/size",
			 major(st->st_rdev), minor(st->st_rdev));
	f = fopen(sysfs, "r");
	if (f == NULL)
	{
		pg_log_error("could not determine the size of character device \"%s\" from \"%s\": %m",
					 path, sysfs);
		pg_log_error_hint("A character device is taken for a devdax device, whose size sysfs gives; \"%s\" does not look like one.",
						  path);
		exit(1);
	}
	if (fscanf(f, "%llu", &size) != 1 || size == 0)
		pg_fatal("could not determine the size of character device \"%s\" from \"%s\": it gives no size",
				 path, sysfs);
	fclose(f);
	return (uint64) size;
}

/*
 * Map the whole ring through its descriptor.  Writable: a file on a DAX
 * file system maps with MAP_SYNC and a devdax device is persistent memory
 * (pmem_persist); so is anything with PMEM_IS_PMEM_FORCE=1, as in the
 * server; anything else is persisted with msync().
 */
static void
map_ring(Ring *ring, const struct stat *st, bool writable)
{
	uint64		size = ring_size(ring->path, st);
	const char *force = getenv("PMEM_IS_PMEM_FORCE");
	bool		dax = false;

	if (size < RING_HEADER_SIZE)
		pg_fatal("ring \"%s\" is " UINT64_FORMAT " bytes, smaller than the ring header",
				 ring->path, size);
	ring->len = size;
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
	ring->is_pmem = dax || S_ISCHR(st->st_mode) ||
		(force != NULL && strcmp(force, "1") == 0);
	ring->hdr = (RingHeader *) ring->base;
	ring->data = ring->base + RING_HEADER_SIZE;
}

static void
open_ring(Ring *ring, const char *path, bool writable)
{
	struct stat st;

	memset(ring, 0, sizeof(Ring));
	ring->path = path;
	ring->fd = open(path, (writable ? O_RDWR : O_RDONLY) | PG_BINARY);
	if (ring->fd < 0)
		pg_fatal("could not open ring \"%s\": %m", path);
	if (fstat(ring->fd, &st) != 0)
		pg_fatal("could not stat ring \"%s\": %m", path);
	ring->locked = flock(ring->fd, LOCK_EX | LOCK_NB) == 0;
	if (!ring->locked && errno != EWOULDBLOCK)
		pg_fatal("could not lock ring \"%s\": %m", path);
	map_ring(ring, &st, writable);
}

static void
require_lock(Ring *ring)
{
	if (!ring->locked)
		pg_fatal("ring \"%s\" is in use by a running server; stop the server first", ring->path);
}

/*
 * Check the header; with a data directory, against that cluster too.
 * Prints what is wrong with it, and returns the verdict: RING_OK, or
 * RING_INTERRUPTED_REINIT (usable: it holds nothing, and a server
 * initialises it again), or one a server refuses.
 */
static RingCheck
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
		printf("header:             uninitialised (all zero): not a pmwal ring, a server refuses it; \"pmwal_ctl init\" makes it one\n");
	else if (verdict == RING_INTERRUPTED_REINIT)
		printf("header:             an initialisation was interrupted: the ring holds no WAL, and a server (or \"pmwal_ctl init\") initialises it again\n");
	else if (verdict != RING_OK)
		printf("header:             NOT USABLE: %s\n", detail);
	return verdict;
}

/* Would a server use a ring with this verdict? */
static bool
ring_usable(RingCheck verdict)
{
	return verdict == RING_OK || verdict == RING_INTERRUPTED_REINIT;
}

static ControlFileData *
read_control(const char *datadir)
{
	ControlFileData *control;
	bool		crc_ok;

	if (datadir == NULL)
		return NULL;
	control = get_controlfile(datadir, &crc_ok);
	if (!crc_ok)
		pg_fatal("pg_control in \"%s\" has a wrong checksum", datadir);
	return control;
}

static int
cmd_inspect(Ring *ring, ControlFileData *control)
{
	RingHeader *hdr = ring->hdr;
	const RingStatic *st = &hdr->st.s;
	RingCheck	verdict;

	printf("ring:               %s\n", ring->path);
	printf("lock:               %s\n", ring->locked ? "free (no server uses the ring)" :
		   "held (a server uses the ring; positions may change while you look)");
	verdict = check_header(ring, control);
	if (verdict != RING_OK)
		return ring_usable(verdict) ? 0 : 1;
	printf("format version:     %u\n", st->format_version);
	printf("system identifier:  " UINT64_FORMAT "%s\n", st->system_identifier,
		   control ? " (matches the cluster)" : "");
	printf("timeline:           %u\n", st->timeline);
	printf("WAL segment size:   %u\n", st->wal_segment_size);
	printf("WAL block size:     %u\n", st->wal_block_size);
	printf("capacity:           " UINT64_FORMAT " bytes (" UINT64_FORMAT " MB)\n",
		   st->capacity, st->capacity / (1024 * 1024));
	printf("state:              %s\n", ring_state_name(hdr->state.v));
	printf("tail:               %X/%X\n", LSN_FORMAT_ARGS(hdr->tail.v));
	printf("last acknowledged:  %X/%X\n", LSN_FORMAT_ARGS(hdr->last_end.v));
	printf("head:               %X/%X\n", LSN_FORMAT_ARGS(hdr->head.v));
	if (hdr->exposed.v == 0)
		printf("exposed:            no\n");
	else if (hdr->state.v == RING_STATE_IN_USE)
		printf("exposed:            yes (since %X/%X): WAL after it may have reached a standby or the archive; a start ends recovery on a new timeline\n",
			   LSN_FORMAT_ARGS(hdr->exposed.v));
	else
		printf("exposed:            yes (since %X/%X), but the ring is not in use: a start ignores it\n",
			   LSN_FORMAT_ARGS(hdr->exposed.v));
	if (!ring_holds_wal(hdr))
	{
		printf("holds:              no WAL (empty)\n");
		printf("restore at start:   nothing to restore\n");
		return 0;
	}
	printf("holds:              " UINT64_FORMAT " bytes of WAL\n", hdr->head.v - hdr->tail.v);
	if (control == NULL)
		printf("restore at start:   yes, unless the cluster's last checkpoint is past the head (give -D to check)\n");
	else if (hdr->head.v <= control->checkPointCopy.redo)
		printf("restore at start:   no: all of it precedes the checkpoint redo point %X/%X (stale)\n",
			   LSN_FORMAT_ARGS(control->checkPointCopy.redo));
	else if (st->timeline > control->checkPointCopy.ThisTimeLineID)
		printf("restore at start:   on timeline %u if its history file in pg_wal shows it descends from the checkpoint's timeline %u before the ring starts (a promotion since the last checkpoint); REFUSED otherwise\n",
			   st->timeline, control->checkPointCopy.ThisTimeLineID);
	else if (st->timeline < control->checkPointCopy.ThisTimeLineID)
		printf("restore at start:   REFUSED unless the cluster's history (timeline %u) left timeline %u after the ring's head (then nothing is restored)\n",
			   control->checkPointCopy.ThisTimeLineID, st->timeline);
	else
		printf("restore at start:   yes: %X/%X to %X/%X (checkpoint redo point %X/%X)\n",
			   LSN_FORMAT_ARGS(RING_RESTORE_FROM(hdr->tail.v, control->checkPointCopy.redo,
											 st->wal_segment_size)),
			   LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPointCopy.redo));
	return 0;
}

/*
 * Open the directory to dump into, creating it (mode 0700) if it is missing.
 * The WAL may hold anything the cluster holds: the directory must be the
 * user's own, not a symbolic link, and writable by no one else, so that no
 * one can plant a file or a link in it for dump to write through.  Returns
 * a descriptor of the directory checked.
 */
static int
open_dump_dir(const char *dir)
{
	struct stat st;
	struct stat now;
	int			dirfd;

	if (lstat(dir, &st) != 0)
	{
		if (errno != ENOENT)
			pg_fatal("could not stat dump directory \"%s\": %m", dir);
		if (mkdir(dir, S_IRWXU) != 0 && errno != EEXIST)
			pg_fatal("could not create dump directory \"%s\": %m", dir);
		if (lstat(dir, &st) != 0)
			pg_fatal("could not stat dump directory \"%s\": %m", dir);
	}
	if (S_ISLNK(st.st_mode))
		pg_fatal("dump directory \"%s\" is a symbolic link; give the directory itself", dir);
	if (!S_ISDIR(st.st_mode))
		pg_fatal("dump directory \"%s\" is not a directory", dir);
	if (st.st_uid != geteuid())
	{
		pg_log_error("dump directory \"%s\" is owned by another user (user ID %u; you are %u)",
					 dir, (unsigned) st.st_uid, (unsigned) geteuid());
		pg_log_error_hint("The WAL is only written into a directory of your own that no one else can write to.");
		exit(1);
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
	{
		pg_log_error("dump directory \"%s\" is writable by group or others (permissions %04o)",
					 dir, (unsigned) (st.st_mode & 07777));
		pg_log_error_hint("The WAL is only written into a directory no one else can write to (chmod go-w), or into a missing one, which is created with mode 0700.");
		exit(1);
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dirfd < 0 || fstat(dirfd, &now) != 0)
		pg_fatal("could not open dump directory \"%s\": %m", dir);
	if (now.st_dev != st.st_dev || now.st_ino != st.st_ino)
		pg_fatal("dump directory \"%s\" was replaced while it was opened", dir);
	return dirfd;
}

static void
refuse_existing(const char *path)
{
	pg_log_error("could not dump into \"%s\": \"%s\" already exists", path, path);
	pg_log_error_hint("dump creates every file itself and overwrites nothing, not even through a symbolic link; remove the file or dump into a new directory.");
	exit(1);
}

/* Write the ring's WAL as segment files into "dir"; returns segments written. */
static int
dump_ring(Ring *ring, const char *dir)
{
	RingHeader *hdr = ring->hdr;
	uint32		segsize = hdr->st.s.wal_segment_size;
	uint64		cap = hdr->st.s.capacity;
	XLogRecPtr	from = RING_TAIL_PAGE(hdr->tail.v);
	XLogRecPtr	to = hdr->head.v;
	char	   *seg;
	int			nsegs = 0;
	int			dirfd = open_dump_dir(dir);

	/* refuse before writing anything if a file of a segment's name exists */
	for (XLogSegNo segno = from / segsize; from < to && segno <= (to - 1) / segsize; segno++)
	{
		char		name[MAXFNAMELEN];
		char		path[MAXPGPATH];
		struct stat st;

		XLogFileName(name, hdr->st.s.timeline, segno, segsize);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			refuse_existing(path);
		if (errno != ENOENT)
			pg_fatal("could not stat \"%s\": %m", path);
	}

	seg = pg_malloc(segsize);
	while (from < to)
	{
		XLogSegNo	segno = from / segsize;
		XLogRecPtr	segstart = segno * segsize;
		XLogRecPtr	segend = Min(segstart + segsize, to);
		char		name[MAXFNAMELEN];
		char		path[MAXPGPATH];
		int			fd;

		memset(seg, 0, segsize);
		if (from > segstart)
			ring_segment_header(seg, segstart, hdr, ring->data + RING_OFFSET(cap, from));
		for (XLogRecPtr p = from; p < segend;)
		{
			uint64		off = RING_OFFSET(cap, p);
			Size		n = Min(segend - p, cap - off);

			memcpy(seg + (p - segstart), ring->data + off, n);
			p += n;
		}
		XLogFileName(name, hdr->st.s.timeline, segno, segsize);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | PG_BINARY,
					S_IRUSR | S_IWUSR);
		if (fd < 0 && errno == EEXIST)
			refuse_existing(path);
		if (fd < 0 || write(fd, seg, segsize) != (ssize_t) segsize || close(fd) != 0)
			pg_fatal("could not write \"%s\": %m", path);
		nsegs++;
		from = segend;
	}
	pg_free(seg);
	close(dirfd);
	return nsegs;
}

/*
 * Run pg_waldump over [start, end) of the dump in "dir"; returns its output
 * (stdout and stderr) and sets *ok when it exited 0 without skipping bytes
 * at the start.
 */
static char *
run_waldump(const char *waldump, const char *dir, TimeLineID tli,
			XLogRecPtr start, XLogRecPtr end, bool *ok)
{
	char		cmd[MAXPGPATH * 3];
	char	   *out = pg_malloc0(8192);
	size_t		len = 0;
	FILE	   *fp;
	int			rc;

	snprintf(cmd, sizeof(cmd), "\"%s\" --quiet --path=\"%s\" --timeline=%u --start=%X/%X --end=%X/%X 2>&1",
			 waldump, dir, tli, LSN_FORMAT_ARGS(start), LSN_FORMAT_ARGS(end));
	fp = popen(cmd, "r");
	if (fp == NULL)
		pg_fatal("could not run \"%s\": %m", cmd);
	while (len < 8191 && fgets(out + len, 8192 - len, fp) != NULL)
		len = strlen(out);
	rc = pclose(fp);
	*ok = (rc == 0 && strstr(out, "first record is after") == NULL);
	return out;
}

/* First record start at or after "lsn", skipping a page header it points at. */
static XLogRecPtr
skip_page_header(XLogRecPtr lsn, uint32 segsize)
{
	if (lsn % segsize == 0)
		return lsn + SizeOfXLogLongPHD;
	if (lsn % XLOG_BLCKSZ == 0)
		return lsn + SizeOfXLogShortPHD;
	return lsn;
}

static int
cmd_verify(Ring *ring, ControlFileData *control, const char *argv0)
{
	RingHeader *hdr = ring->hdr;
	char		waldump[MAXPGPATH];
	char		dir[] = "/tmp/pmwal_ctl_verify_XXXXXX";
	XLogRecPtr	first;
	bool		ok;
	char	   *out;
	TimeLineID	tli = hdr->st.s.timeline;
	uint32		segsize = hdr->st.s.wal_segment_size;
	char		cmd[MAXPGPATH + 16];
	RingCheck	verdict;

	require_lock(ring);
	verdict = check_header(ring, control);
	if (!ring_usable(verdict))
		return 1;
	if (verdict == RING_OK)
		printf("header:             ok\n");
	if (!ring_holds_wal(hdr))
	{
		printf("WAL:                none (the ring is empty)\n");
		return 0;
	}
	if (control && hdr->head.v <= control->checkPointCopy.redo)
		printf("note:               all of it precedes the checkpoint redo point %X/%X; a start would not restore it\n",
			   LSN_FORMAT_ARGS(control->checkPointCopy.redo));

	if (find_my_exec(argv0, waldump) != 0)
		pg_fatal("could not find own program executable");
	*last_dir_separator(waldump) = '\0';
	strlcat(waldump, "/pg_waldump", sizeof(waldump));
	if (access(waldump, X_OK) != 0)
		strlcpy(waldump, "pg_waldump", sizeof(waldump));
	if (mkdtemp(dir) == NULL)
		pg_fatal("could not create a temporary directory: %m");
	(void) dump_ring(ring, dir);

	/*
	 * Every record through the end of the last acknowledged commit.  A tail
	 * at a page boundary is read from after the page header, as the
	 * restore's XLogReader does: pg_waldump started at the boundary itself
	 * reports the first record as "after" it.
	 */
	ok = true;
	out = "";
	first = skip_page_header(hdr->tail.v, segsize);
	if (hdr->last_end.v > first)
		out = run_waldump(waldump, dir, tli, first, hdr->last_end.v, &ok);
	if (ok && hdr->head.v > skip_page_header(hdr->last_end.v, segsize))
	{
		/* ...which must end exactly there, and the rest must read cleanly */
		out = run_waldump(waldump, dir, tli, skip_page_header(hdr->last_end.v, segsize),
						  hdr->head.v, &ok);

		/*
		 * pg_waldump finds no record at all after last_end when the head
		 * cuts off the first one (the flush pointer can stop mid-record),
		 * which the restore accepts as the end.  Read on from the tail
		 * then: that checks the cut-off record's header as the restore
		 * does, and any damage after last_end.
		 */
		if (!ok && strstr(out, "could not find a valid record after") != NULL)
			out = run_waldump(waldump, dir, tli, first, hdr->head.v, &ok);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf \"%s\"", dir);
	if (system(cmd) != 0)
		pg_log_warning("could not remove \"%s\"", dir);
	if (!ok)
	{
		printf("WAL:                DAMAGED between %X/%X and %X/%X; a start would refuse to restore it\n",
			   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
		printf("pg_waldump says:    %s", out);
		return 1;
	}
	printf("WAL:                ok: %X/%X to %X/%X reads cleanly through the last acknowledged commit at %X/%X\n",
		   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
		   LSN_FORMAT_ARGS(hdr->last_end.v));
	return 0;
}

static int
cmd_dump(Ring *ring, const char *dir)
{
	int			nsegs;

	require_lock(ring);
	if (!ring_usable(check_header(ring, NULL)))
		return 1;
	if (!ring_holds_wal(ring->hdr))
	{
		printf("the ring is empty; nothing to dump\n");
		return 0;
	}
	nsegs = dump_ring(ring, dir);
	printf("wrote WAL %X/%X to %X/%X into %d segment file(s) in \"%s\"\n",
		   LSN_FORMAT_ARGS(ring->hdr->tail.v), LSN_FORMAT_ARGS(ring->hdr->head.v), nsegs, dir);
	printf("read it with: pg_waldump --path=%s --start=%X/%X --end=%X/%X\n", dir,
		   LSN_FORMAT_ARGS(ring->hdr->tail.v), LSN_FORMAT_ARGS(ring->hdr->head.v));
	return 0;
}

static void
persist(Ring *ring, const void *addr, size_t len)
{
	if (ring->is_pmem)
		pmem_persist(addr, len);
	else if (pmem_msync(addr, len) != 0)
		pg_fatal("could not persist ring \"%s\": %m", ring->path);
}

static int
cmd_reset(Ring *ring)
{
	RingHeader *hdr = ring->hdr;
	RingCheck	verdict;

	require_lock(ring);
	verdict = check_header(ring, NULL);
	if (verdict == RING_UNINITIALISED || verdict == RING_INTERRUPTED_REINIT)
	{
		/*
		 * Not (yet) a ring: storing EMPTY would make a header that is not
		 * complete claim to be one.
		 */
		printf("the ring holds no WAL; left as it is\n");
		return 0;
	}
	if (verdict != RING_OK)
		pg_fatal("refusing to reset: the header is not usable; remove the file instead if it is not needed");
	if (ring_holds_wal(hdr))
		printf("discarding WAL %X/%X to %X/%X (" UINT64_FORMAT " bytes, acknowledged commits up to %X/%X)\n",
			   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   hdr->head.v - hdr->tail.v, LSN_FORMAT_ARGS(hdr->last_end.v));
	else
		printf("the ring holds no WAL\n");
	if (hdr->exposed.v != 0 && hdr->state.v == RING_STATE_IN_USE)
	{
		pg_log_warning("the ring was exposed since %X/%X: WAL after it may have reached a standby or the WAL archive without surviving in pg_wal",
					   LSN_FORMAT_ARGS(hdr->exposed.v));
		pg_log_warning_hint("After the reset, the start does not end recovery on a new timeline; rebuild such a standby, or rewind it with pg_rewind.");
	}
	hdr->tail.v = hdr->head.v;
	persist(ring, (const void *) &hdr->tail.v, sizeof(uint64));
	hdr->state.v = RING_STATE_EMPTY;
	persist(ring, (const void *) &hdr->state.v, sizeof(uint64));
	/* last: a start reads it only while the ring is in use */
	hdr->exposed.v = 0;
	persist(ring, (const void *) &hdr->exposed.v, sizeof(uint64));
	printf("ring \"%s\" is empty\n", ring->path);
	return 0;
}

/*
 * --size: whole MB (a bare number, or with "MB"), or "GB", in pmwal.size's
 * range; returns bytes.
 */
static uint64
parse_size(const char *arg)
{
	unsigned long long n = 0;
	const char *p = arg;

	while (*p >= '0' && *p <= '9' && n <= RING_MAX_MB)
		n = n * 10 + (*p++ - '0');
	if (p != arg && strcmp(p, "GB") == 0 && n <= RING_MAX_MB / 1024)
	{
		n *= 1024;
		p += 2;
	}
	else if (p != arg && strcmp(p, "MB") == 0)
		p += 2;
	if (p == arg || *p != '\0' || n < RING_MIN_MB || n > RING_MAX_MB)
		pg_fatal("--size must be between %d and %d MB, like pmwal.size, not \"%s\"",
				 RING_MIN_MB, RING_MAX_MB, arg);
	return (uint64) n * RING_MB;
}

/* The ring holds a copy of the WAL: only its user may access it (as the server checks). */
static void
check_ring_owner(const char *path, const struct stat *st)
{
	if (st->st_uid != geteuid())
	{
		pg_log_error("\"%s\" is owned by another user (user ID %u; you are %u)",
					 path, (unsigned) st->st_uid, (unsigned) geteuid());
		pg_log_error_hint("The ring holds a copy of the WAL: run pmwal_ctl init as the server's user, on a file or device of that user.");
		exit(1);
	}
	if ((st->st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		pg_log_error("\"%s\" has group or other access (permissions %04o)",
					 path, (unsigned) (st->st_mode & 07777));
		pg_log_error_hint("The ring holds a copy of the WAL and must be accessible by the server's user only: run chmod 0600 on it.");
		exit(1);
	}
}

/* atexit: remove a file init created if init did not complete it */
static void
init_cleanup(void)
{
	if (init_created != NULL)
		(void) unlink(init_created);
}

/* Give the regular file its size for "capacity", allocating its blocks (as the server does). */
static void
init_resize(Ring *ring, uint64 capacity)
{
	off_t		len = RING_HEADER_SIZE + capacity;
	int			rc;

	if (ftruncate(ring->fd, len) != 0)
		pg_fatal("could not resize ring \"%s\": %m", ring->path);
	rc = posix_fallocate(ring->fd, 0, len);
	if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
	{
		errno = rc;
		pg_fatal("could not allocate %lld bytes for ring \"%s\": %m", (long long) len, ring->path);
	}
	if (fsync(ring->fd) != 0)
		pg_fatal("could not fsync ring \"%s\": %m", ring->path);
}

/* init --force over a pmwal ring: which ring, and what WAL it holds */
static void
describe_overwritten_ring(const RingHeader *hdr, RingCheck verdict, const char *detail,
						  char *buf, size_t len)
{
	if (verdict != RING_OK)
		snprintf(buf, len, "a pmwal ring whose header is not usable (%s)", detail);
	else if (ring_holds_wal(hdr))
		snprintf(buf, len, "a pmwal ring of system identifier " UINT64_FORMAT
				 ", timeline %u, with WAL %X/%X to %X/%X (" UINT64_FORMAT
				 " bytes, acknowledged commits up to %X/%X) that is discarded",
				 hdr->st.s.system_identifier, hdr->st.s.timeline,
				 LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
				 hdr->head.v - hdr->tail.v, LSN_FORMAT_ARGS(hdr->last_end.v));
	else
		snprintf(buf, len, "an empty pmwal ring of system identifier " UINT64_FORMAT,
				 hdr->st.s.system_identifier);
}

/* init --force over other data: how much of its header is not zero, and where that begins */
static void
describe_overwritten_data(const char *page, char *buf, size_t len)
{
	char		hex[16 * 3 + 1];
	int			nonzero = 0;
	int			first = -1;

	for (int i = 0; i < RING_HEADER_SIZE; i++)
	{
		if (page[i] == 0)
			continue;
		nonzero++;
		if (first < 0)
			first = i;
	}
	for (int i = 0; i < 16 && first + i < RING_HEADER_SIZE; i++)
		snprintf(hex + i * 3, sizeof(hex) - i * 3, "%02x%s",
				 (unsigned char) page[first + i], i < 15 ? " " : "");
	snprintf(buf, len, "data that was not a pmwal ring (%d of its first %d bytes are not zero; at offset %d: %s)",
			 nonzero, RING_HEADER_SIZE, first, hex);
}

/*
 * Make "path" an empty ring of the cluster "control", with "size" bytes of
 * capacity (0: what the file or device holds after the header); with
 * "force", whatever it holds.
 */
static int
cmd_init(const char *path, ControlFileData *control, uint64 size, bool force)
{
	Ring		ring;
	RingHeader *hdr;
	struct stat lst;
	struct stat st;
	PGAlignedBlock page;
	uint64		avail;
	uint64		capacity;
	const char *what = "a new file";
	char		overwrote[512];
	RingExpect	expect = {0, 0, 0};
	char		detail[256];
	RingCheck	verdict;

	memset(&ring, 0, sizeof(ring));
	ring.path = path;
	if (control->xlog_blcksz != XLOG_BLCKSZ)
		pg_fatal("the cluster uses a WAL block size of %u bytes; this pmwal_ctl was built for %d",
				 control->xlog_blcksz, XLOG_BLCKSZ);

	/* open it: create a missing file exclusively, never follow a link */
	if (lstat(path, &lst) != 0)
	{
		if (errno != ENOENT)
			pg_fatal("could not stat \"%s\": %m", path);
		if (size == 0)
			pg_fatal("ring \"%s\" does not exist; give its size with --size to create it", path);
		ring.fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | PG_BINARY,
					   S_IRUSR | S_IWUSR);
		if (ring.fd < 0)
			pg_fatal("could not create ring \"%s\": %m", path);
		init_created = path;
		atexit(init_cleanup);
	}
	else
	{
		if (S_ISLNK(lst.st_mode))
		{
			pg_log_error("\"%s\" is a symbolic link", path);
			pg_log_error_hint("Neither pmwal_ctl init nor the server follows a link to the ring: give the file or device itself.");
			exit(1);
		}
		if (!S_ISREG(lst.st_mode) && !S_ISCHR(lst.st_mode))
			pg_fatal("\"%s\" is neither a regular file nor a devdax device", path);
		check_ring_owner(path, &lst);
		ring.fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | PG_BINARY);
		if (ring.fd < 0)
			pg_fatal("could not open \"%s\": %m", path);
	}
	if (fstat(ring.fd, &st) != 0)
		pg_fatal("could not stat \"%s\": %m", path);
	if (init_created == NULL && (st.st_dev != lst.st_dev || st.st_ino != lst.st_ino))
		pg_fatal("\"%s\" was replaced while it was opened", path);
	ring.locked = flock(ring.fd, LOCK_EX | LOCK_NB) == 0;
	if (!ring.locked && errno != EWOULDBLOCK)
		pg_fatal("could not lock ring \"%s\": %m", path);
	require_lock(&ring);

	/* what is there: read the header page (a device only maps) */
	memset(page.data, 0, RING_HEADER_SIZE);
	if (S_ISCHR(st.st_mode))
	{
		map_ring(&ring, &st, true);
		memcpy(page.data, ring.base, RING_HEADER_SIZE);
		avail = ring.len - RING_HEADER_SIZE;
	}
	else
	{
		ssize_t		n = pg_pread(ring.fd, page.data, RING_HEADER_SIZE, 0);

		if (n < 0 || (n < RING_HEADER_SIZE && n != st.st_size))
			pg_fatal("could not read \"%s\": %m", path);
		avail = st.st_size > RING_HEADER_SIZE ? st.st_size - RING_HEADER_SIZE : 0;
	}
	avail -= avail % XLOG_BLCKSZ;
	verdict = (S_ISREG(st.st_mode) && st.st_size < RING_HEADER_SIZE) ? RING_BAD_GEOMETRY :
		ring_check_header((RingHeader *) page.data, Max(ring.len, (uint64) st.st_size),
						  &expect, detail, sizeof(detail));
	if (init_created == NULL)
	{
		if (ring_all_zero(page.data, RING_HEADER_SIZE))
			what = S_ISCHR(st.st_mode) ? "a devdax device, its header all zero" :
				st.st_size == 0 ? "an empty file" : "its header was all zero";
		else if (verdict == RING_INTERRUPTED_REINIT)
			what = "an interrupted initialisation";
		else if (memcmp(page.data, RING_MAGIC, RING_MAGIC_LEN) == 0)
		{
			if (!force)
			{
				pg_log_error("\"%s\" already holds a pmwal ring", path);
				pg_log_error_hint("\"pmwal_ctl inspect\" shows what it holds; \"pmwal_ctl reset --discard-wal\" empties it, and a server re-initialises an empty ring to its pmwal.size; --force overwrites it, with any WAL it holds.");
				exit(1);
			}
			describe_overwritten_ring((RingHeader *) page.data, verdict, detail,
									  overwrote, sizeof(overwrote));
			what = overwrote;
		}
		else
		{
			if (!force)
			{
				pg_log_error("\"%s\" is not a pmwal ring, refusing to overwrite it", path);
				pg_log_error_detail("Its first %d bytes are not all zero.", RING_HEADER_SIZE);
				pg_log_error_hint("pmwal_ctl init only takes a missing path, an empty file or one whose first %d bytes are zero; remove the file if it is not needed, or give another path; --force overwrites it (a devdax device that held other data, for example).",
								  RING_HEADER_SIZE);
				exit(1);
			}
			describe_overwritten_data(page.data, overwrote, sizeof(overwrote));
			what = overwrote;
		}
	}

	/* the capacity */
	if (S_ISCHR(st.st_mode))
	{
		if (avail < RING_MIN_MB * RING_MB)
			pg_fatal("device \"%s\" holds " UINT64_FORMAT " bytes; a ring needs at least %d MB after its %d-byte header",
					 path, (uint64) ring.len, RING_MIN_MB, RING_HEADER_SIZE);
		if (size > avail)
			pg_fatal("--size is larger than the device \"%s\", which holds " UINT64_FORMAT " MB after the ring header",
					 path, avail / RING_MB);
		capacity = size ? size : Min(avail, RING_MAX_MB * RING_MB);
	}
	else if (size)
		capacity = size;
	else if (st.st_size == 0)
		pg_fatal("\"%s\" is empty; give the ring's size with --size", path);
	else if (avail < RING_MIN_MB * RING_MB)
		pg_fatal("\"%s\" holds " UINT64_FORMAT " bytes after the ring header, less than %d MB; give the ring's size with --size",
				 path, avail, RING_MIN_MB);
	else
		capacity = Min(avail, RING_MAX_MB * RING_MB);
	if (S_ISREG(st.st_mode))
	{
		if ((uint64) st.st_size != RING_HEADER_SIZE + capacity && size != 0)
		{
			init_resize(&ring, capacity);
			if (fstat(ring.fd, &st) != 0)
				pg_fatal("could not stat \"%s\": %m", path);
		}
		map_ring(&ring, &st, true);
	}

	if (what == overwrote)
	{
		printf("overwriting \"%s\", which holds %s\n", path, overwrote);
		fflush(stdout);
		what = "overwritten with --force";
	}

	/*
	 * Write the header: REINIT first (a kill from here on leaves a ring that
	 * init or a server initialises again), then everything else, then
	 * EMPTY.
	 */
	hdr = ring.hdr;
	if (hdr->state.v != RING_STATE_REINIT)
	{
		hdr->state.v = RING_STATE_REINIT;
		persist(&ring, (const void *) &hdr->state.v, sizeof(uint64));
	}
	memset(ring.base, 0, offsetof(RingHeader, state));
	memset(ring.base + offsetof(RingHeader, state) + sizeof(uint64), 0,
		   RING_HEADER_SIZE - offsetof(RingHeader, state) - sizeof(uint64));
	ring_fill_static(&hdr->st.s, control->system_identifier,
					 control->checkPointCopy.ThisTimeLineID,
					 control->xlog_seg_size, capacity);
	persist(&ring, ring.base, RING_HEADER_SIZE);
	hdr->state.v = RING_STATE_EMPTY;
	persist(&ring, (const void *) &hdr->state.v, sizeof(uint64));
	if (S_ISREG(st.st_mode) && fsync(ring.fd) != 0)
		pg_fatal("could not fsync ring \"%s\": %m", path);
	if (init_created != NULL)
	{
		char		dir[MAXPGPATH];
		int			dirfd;

		strlcpy(dir, path, sizeof(dir));
		get_parent_directory(dir);
		dirfd = open(dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0 || fsync(dirfd) != 0)
			pg_fatal("could not fsync the directory of ring \"%s\": %m", path);
		close(dirfd);
		init_created = NULL;
	}

	expect.system_identifier = control->system_identifier;
	expect.wal_segment_size = control->xlog_seg_size;
	expect.wal_block_size = XLOG_BLCKSZ;
	if (ring_check_header(hdr, ring.len, &expect, detail, sizeof(detail)) != RING_OK ||
		hdr->state.v != RING_STATE_EMPTY)
		pg_fatal("the header written to \"%s\" does not check: %s", path, detail);
	printf("initialised ring \"%s\" (%s): capacity " UINT64_FORMAT " MB (" UINT64_FORMAT " bytes), system identifier " UINT64_FORMAT ", timeline %u; it is empty\n",
		   path, what, capacity / RING_MB, capacity, control->system_identifier,
		   control->checkPointCopy.ThisTimeLineID);
	return 0;
}

int
main(int argc, char **argv)
{
	static struct option long_options[] = {
		{"pgdata", required_argument, NULL, 'D'},
		{"to", required_argument, NULL, 't'},
		{"discard-wal", no_argument, NULL, 'x'},
		{"size", required_argument, NULL, 's'},
		{"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, '?'},
		{NULL, 0, NULL, 0}
	};
	const char *command;
	const char *datadir = NULL;
	const char *to = NULL;
	bool		discard = false;
	bool		force = false;
	uint64		size = 0;
	int			c;
	Ring		ring;
	ControlFileData *control;

	pg_logging_init(argv[0]);
	progname = get_progname(argv[0]);
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-?") == 0)
	{
		usage();
		exit(argc < 2 ? 1 : 0);
	}
	command = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "D:?", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'D':
				datadir = optarg;
				break;
			case 't':
				to = optarg;
				break;
			case 'x':
				discard = true;
				break;
			case 's':
				size = parse_size(optarg);
				break;
			case 'f':
				force = true;
				break;
			default:
				/* "-?" asks for help; getopt also returns '?' for a bad option */
				if (strcmp(argv[optind - 1], "-?") == 0)
				{
					usage();
					exit(0);
				}
				pg_log_error_hint("Try \"%s --help\" for more information.", progname);
				exit(1);
		}
	}
	if (optind != argc - 1)
		pg_fatal("expected exactly one ring path; try \"%s --help\"", progname);
	control = read_control(datadir);

	if (force && strcmp(command, "init") != 0)
		pg_fatal("--force is only for init");
	if (strcmp(command, "init") == 0)
	{
		if (control == NULL)
			pg_fatal("init needs -D DATADIR, the data directory of the cluster the ring is for");
		return cmd_init(argv[optind], control, size, force);
	}
	if (strcmp(command, "inspect") == 0)
	{
		open_ring(&ring, argv[optind], false);
		return cmd_inspect(&ring, control);
	}
	if (strcmp(command, "verify") == 0)
	{
		open_ring(&ring, argv[optind], false);
		return cmd_verify(&ring, control, argv[0]);
	}
	if (strcmp(command, "dump") == 0)
	{
		if (to == NULL)
			pg_fatal("dump needs --to DIR");
		open_ring(&ring, argv[optind], false);
		return cmd_dump(&ring, to);
	}
	if (strcmp(command, "reset") == 0)
	{
		if (!discard)
			pg_fatal("reset discards the WAL the ring holds; confirm with --discard-wal");
		open_ring(&ring, argv[optind], true);
		return cmd_reset(&ring);
	}
	pg_fatal("unknown command \"%s\"; try \"%s --help\"", command, progname);
}

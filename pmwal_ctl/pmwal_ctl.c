/*-------------------------------------------------------------------------
 *
 * pmwal_ctl.c
 *		Offline tool for pmwal rings: init, inspect, verify, dump and reset,
 *		and unbind for a data directory whose ring is lost.
 *
 * Works on a ring that no server is using (it takes the ring's lock, as
 * the server does); "inspect" also reads a ring in use.  Every ring path
 * is opened as the server opens it: never through a symbolic link, and
 * only once it is known to be a regular file or a character device (a
 * FIFO would block an open for reading).  Every header field is checked
 * (ring_check_header) before any arithmetic uses it, with or without -D.
 *
 * The ring (format 2, ring_format.h) holds WAL iff its state is IN_USE and
 * tail < head; it then holds the whole pages [tail, head) at data offset
 * lsn % capacity, the newest version of each that the server wrote.
 *
 * "init" makes a path an empty ring of the cluster given with -D: a fresh
 * random ring_id, generation 0, the state word REINIT first and EMPTY
 * last, so that a kill in between leaves a ring that init or a server
 * initialises again.  The server adopts no file it did not create, so a
 * devdax device, or a file made by hand, must be initialised first.  init
 * creates a missing file exclusively; otherwise it takes only what is
 * provably empty -- a file or device every byte of which is zero (it reads
 * all of it), an empty file, or a ring whose initialisation was
 * interrupted -- and anything else (other data, a pmwal ring that may hold
 * WAL) only with --force, after printing what it overwrites.  A zero
 * first page proves nothing: other data may start further in.
 *
 * "verify" checks what a start's restore relies on and can be checked
 * without pg_wal: the header (identity against a data directory given
 * with -D), every page header in [tail, head) against its address, and
 * every record from the first one starting after the tail, read by
 * PostgreSQL's own XLogReader in pg_waldump over a dump of the ring: the
 * WAL must read cleanly into the last page, or end in a record that
 * continues past the head (never flushed whole, so never acknowledged).
 * Without a pg_waldump of this PostgreSQL version, verify says it could
 * not check the records, with an exit status of its own: a missing tool
 * must never read as a damaged ring, which an operator may then discard.
 *
 * "dump" writes the ring's WAL as segment files of the ring's timeline
 * that pg_waldump reads; it creates every file exclusively (never through
 * a symbolic link, never over an existing file), in a directory of the
 * user's own that no one else may write to.  "reset" empties the ring,
 * only with --discard-wal, after printing what it discards.
 *
 * "unbind" removes a data directory's binding file (pg_wal/pmwal.binding),
 * which makes a server that crashed refuse to start without the ring named
 * there: the way out when that ring is lost for good.  It refuses while a
 * server runs in the data directory, and, without --force, while the bound
 * ring is there and holds this data directory's WAL: a start on that ring
 * restores it, which is what the operator wants instead.
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

#include <dirent.h>
#include <fcntl.h>
#include <libpmem.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/logging.h"
#include "getopt_long.h"

#include "pmwal_version.h"
#include "ring_format.h"

/* the limits of pmwal.size */
#define RING_MIN_MB			2
#define RING_MAX_MB			65536
#define RING_MB				((uint64) 1024 * 1024)

/*
 * Exit statuses.  pg_fatal() exits with EXIT_ERROR.  A damaged ring and a
 * check that could not be made must differ: the first may lead an
 * operator to discard the ring's WAL.
 */
#define EXIT_OK				0	/* usable, verified, or done */
#define EXIT_ERROR			1	/* usage, a file that cannot be used, a refusal */
#define EXIT_UNUSABLE		2	/* a start would refuse the ring (its header;
								 * verify: or its WAL) */
#define EXIT_UNCHECKED		3	/* verify could not read the records */

/* the label column of the reports */
#define LABEL				"%-20s"

static const char *progname;

/* a file init created, removed if init fails before it is complete */
static const char *init_created = NULL;

/* verify's scratch directory, removed at exit */
static char verify_dir[MAXPGPATH] = "";

typedef struct Ring
{
	const char *path;
	int			fd;
	struct stat st;
	char	   *base;			/* NULL while not mapped */
	uint64		len;			/* the file's or device's size */
	bool		is_pmem;		/* writable only: persist with pmem_persist */
	bool		locked;			/* we hold the lock: no server uses it */
	RingHeader *hdr;
	char	   *data;
} Ring;

/* what a data directory's binding file holds */
typedef enum BindState
{
	BIND_ABSENT,
	BIND_VALID,
	BIND_DAMAGED,
	BIND_UNREADABLE
} BindState;

static void
usage(void)
{
	printf("%s initialises, inspects, verifies, dumps and resets pmwal rings of a stopped server,\n", progname);
	printf("and unbinds a data directory from a ring that is lost.\n\n");
	printf("Usage:\n");
	printf("  %s init -D DATADIR [--size=SIZE] [--force] RING\n", progname);
	printf("                                   make RING an empty ring of the cluster in DATADIR\n");
	printf("  %s inspect [-D DATADIR] RING     show the header, the WAL range, the binding and whether a start would restore it\n", progname);
	printf("  %s verify  [-D DATADIR] RING     check the ring's page headers and records (with pg_waldump)\n", progname);
	printf("  %s dump --to=DIR RING            write the ring's WAL as segment files readable by pg_waldump\n", progname);
	printf("  %s reset --discard-wal RING      empty the ring, discarding the WAL it holds\n", progname);
	printf("  %s unbind -D DATADIR [--force]   remove DATADIR's binding to its ring (pg_wal/%s)\n", progname, BINDING_FILE);
	printf("\nRING is a regular file or a devdax device (a character device, sized from sysfs);\n");
	printf("a symbolic link is refused, as the server refuses it.  init creates a missing RING\n");
	printf("(mode 0600), or takes an existing file or device of yours, accessible by you only,\n");
	printf("that is provably empty: of size 0, every byte zero (all of it is read), or an\n");
	printf("interrupted initialisation; it overwrites nothing else without --force.\n");
	printf("unbind lets a server whose bound ring is lost for good start without it; it refuses\n");
	printf("while a server runs in DATADIR, and without --force while the bound ring holds\n");
	printf("this data directory's WAL (start the server on that ring once instead).\n");
	printf("\nOptions:\n");
	printf("  -D, --pgdata=DATADIR   compare with this cluster (system identifier, binding, checkpoint);\n");
	printf("                         init: the cluster the ring is for; unbind: the data directory\n");
	printf("      --size=SIZE        init: capacity of the data area in MB, %d to %d like pmwal.size\n", RING_MIN_MB, RING_MAX_MB);
	printf("                         (\"16\", \"16MB\" or \"1GB\"); needed for a missing or empty file;\n");
	printf("                         default: what the file or device holds after the header\n");
	printf("      --to=DIR           dump: directory to dump into: yours and writable by no one else,\n");
	printf("                         created with mode 0700 if missing; existing files are not overwritten\n");
	printf("      --discard-wal      reset: confirm that reset may discard WAL\n");
	printf("      --force            init: overwrite what is not provably empty (other data, a pmwal\n");
	printf("                         ring and its WAL), after printing what it overwrites;\n");
	printf("                         unbind: remove the binding even though the bound ring holds\n");
	printf("                         this data directory's WAL, or cannot be checked\n");
	printf("  -V, --version          output version information, then exit\n");
	printf("  -?, --help             show this help, then exit\n");
	printf("\nverify and dump read the WAL with pg_waldump of PostgreSQL %s, looked for next to\n", PG_MAJORVERSION);
	printf("%s and then on PATH.\n", progname);
	printf("\nExit status:\n");
	printf("  %d  success: the ring is usable (inspect), its WAL verified (verify), or the command done\n", EXIT_OK);
	printf("  %d  error: bad usage, a file that cannot be opened or used, a server using the ring or\n", EXIT_ERROR);
	printf("     the data directory, a refusal of init or unbind without --force\n");
	printf("  %d  the ring is not usable or its WAL is damaged: a start would refuse it (inspect and\n", EXIT_UNUSABLE);
	printf("     dump: its header; verify: its header, page headers and records)\n");
	printf("  %d  verify could not check the records (no usable pg_waldump): nothing is known to be wrong\n", EXIT_UNCHECKED);
}

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
static int
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
static void
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
static bool
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
static void
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

static void
lock_ring(Ring *ring)
{
	ring->locked = flock(ring->fd, LOCK_EX | LOCK_NB) == 0;
	if (!ring->locked && errno != EWOULDBLOCK)
		pg_fatal("could not lock ring \"%s\": %m", ring->path);
}

static void
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

static void
require_lock(Ring *ring)
{
	if (!ring->locked)
		pg_fatal("ring \"%s\" is in use by a running server; stop the server first", ring->path);
}

static void
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
		printf(LABEL "uninitialised (all zero): not a pmwal ring, a server refuses it; \"pmwal_ctl init\" makes it one\n", "header:");
	else if (verdict == RING_INTERRUPTED_REINIT)
		printf(LABEL "an initialisation was interrupted: the ring holds no WAL, and a server (or \"pmwal_ctl init\") initialises it again (%s)\n",
			   "header:", detail);
	else if (verdict != RING_OK)
	{
		printf(LABEL "NOT USABLE: %s\n", "header:", detail);
		if (verdict == RING_OLD_VERSION_WITH_WAL)
			printf(LABEL "start the server once with the pmwal that wrote the ring, so that it restores the WAL, and stop it cleanly; that version's pmwal_ctl dumps it\n",
				   "what to do:");
	}
	else
		printf(LABEL "ok\n", "header:");
	return verdict;
}

/* Would a server use a ring with this verdict? */
static bool
ring_usable(RingCheck verdict)
{
	return verdict == RING_OK || verdict == RING_INTERRUPTED_REINIT;
}

/* Does the ring hold WAL?  Only a valid header can say so. */
static bool
holds_wal(const Ring *ring, RingCheck verdict)
{
	return verdict == RING_OK && ring_holds_wal(ring->hdr);
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

static void
format_time(int64 t, char *buf, size_t len)
{
	time_t		tt = (time_t) t;
	struct tm	tm;

	if (localtime_r(&tt, &tm) == NULL ||
		strftime(buf, len, "%Y-%m-%d %H:%M:%S %Z", &tm) == 0)
		snprintf(buf, len, "%lld (Unix time)", (long long) t);
}

/* ---------------------------------------------------------------------
 * The binding file
 * --------------------------------------------------------------------- */

/*
 * Read "datadir"'s binding file into *slot; "path" receives its path and
 * "why" what is wrong with it, if anything.
 */
static BindState
read_binding(const char *datadir, BindingSlot *slot, char *path, char *why, size_t whylen)
{
	char		file[2 * BINDING_SLOT_SIZE];
	const BindingSlot *best;
	ssize_t		n;
	int			fd;

	snprintf(path, MAXPGPATH, "%s/pg_wal/%s", datadir, BINDING_FILE);
	why[0] = '\0';
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return BIND_ABSENT;
		snprintf(why, whylen, "could not open \"%s\": %s", path,
				 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
		return BIND_UNREADABLE;
	}
	n = pg_pread(fd, file, sizeof(file), 0);
	close(fd);
	if (n < 0)
	{
		snprintf(why, whylen, "could not read \"%s\": %s", path, strerror(errno));
		return BIND_UNREADABLE;
	}
	best = binding_pick(file, (size_t) n);
	if (best == NULL)
	{
		snprintf(why, whylen, "neither of its two slots is valid (%lld bytes)", (long long) n);
		return BIND_DAMAGED;
	}
	memcpy(slot, best, sizeof(BindingSlot));
	return BIND_VALID;
}

/*
 * Is "slot" the binding a start accepts for this ring: the same ring_id,
 * and the ring at the binding's generation or one ahead (the flusher moves
 * the ring first)?  NULL if so, else why not.
 */
static char *
binding_mismatch(const RingHeader *hdr, const BindingSlot *slot)
{
	char		id[2 * RING_ID_LEN + 1];
	uint64		gen = hdr->generation.v;

	if (memcmp(slot->ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0)
	{
		ring_id_text(slot->ring_id, id);
		return psprintf("the data directory is bound to another ring (%s)", id);
	}
	if (slot->system_identifier != hdr->st.s.system_identifier)
		return psprintf("the binding is of the cluster with system identifier " UINT64_FORMAT ", the ring of " UINT64_FORMAT,
						slot->system_identifier, hdr->st.s.system_identifier);
	if (gen > slot->generation + 1)
		return psprintf("the ring is at generation " UINT64_FORMAT ", more than one ahead of the binding's " UINT64_FORMAT ": another copy of this data directory has bound it since",
						gen, slot->generation);
	if (gen < slot->generation)
		return psprintf("the ring is at generation " UINT64_FORMAT ", behind the binding's " UINT64_FORMAT ": it is an earlier copy of the ring",
						gen, slot->generation);
	return NULL;
}

/* The START WAL LOCATION of "datadir"'s backup_label; false without one. */
static bool
backup_label_start(const char *datadir, XLogRecPtr *start)
{
	char		path[MAXPGPATH];
	char		line[MAXPGPATH];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/backup_label", datadir);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	*start = InvalidXLogRecPtr;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		uint32		hi,
					lo;

		if (sscanf(line, "START WAL LOCATION: %X/%X", &hi, &lo) == 2)
		{
			*start = ((uint64) hi << 32) | lo;
			break;
		}
	}
	fclose(f);
	return true;
}

static bool
shut_down_cleanly(const ControlFileData *control)
{
	return control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY;
}

/* ---------------------------------------------------------------------
 * inspect
 * --------------------------------------------------------------------- */

/* The static fields and dynamic words, as the header records them. */
static void
print_fields(const Ring *ring, RingCheck verdict, ControlFileData *control)
{
	const RingHeader *hdr = ring->hdr;
	const RingStatic *st = &hdr->st.s;
	const RingOwner *owner = &hdr->owner;
	char		id[2 * RING_ID_LEN + 1];

	ring_id_text(st->ring_id, id);
	printf(LABEL "%u\n", "format version:", st->format_version);
	printf(LABEL "%s\n", "ring id:", id);
	printf(LABEL UINT64_FORMAT "%s\n", "system identifier:", st->system_identifier,
		   control && verdict == RING_OK ? " (matches the cluster)" : "");
	printf(LABEL "%u\n", "WAL segment size:", st->wal_segment_size);
	printf(LABEL "%u\n", "WAL block size:", st->wal_block_size);
	printf(LABEL UINT64_FORMAT " bytes (" UINT64_FORMAT " MB)\n", "capacity:",
		   st->capacity, st->capacity / RING_MB);
	printf(LABEL "%s\n", "state:", ring_state_name(hdr->state.v));
	printf(LABEL UINT64_FORMAT "\n", "timeline:", (uint64) hdr->timeline.v);
	printf(LABEL UINT64_FORMAT "\n", "generation:", (uint64) hdr->generation.v);
	printf(LABEL "%X/%X\n", "tail:", LSN_FORMAT_ARGS(hdr->tail.v));
	printf(LABEL "%X/%X\n", "head:", LSN_FORMAT_ARGS(hdr->head.v));
	if (ring_owner_valid(owner))
	{
		char		when[64];

		format_time(owner->bound_at, when, sizeof(when));
		printf(LABEL "data directory \"%.*s\", bound at generation " UINT64_FORMAT " on %s\n",
			   "owner:", (int) strnlen(owner->datadir, RING_OWNER_PATH_LEN), owner->datadir,
			   owner->generation, when);
	}
	else
		printf(LABEL "none recorded (no server has bound the ring since it was initialised)\n",
			   "owner:");
}

/* What a start of the cluster in "datadir" does with this ring's WAL (binding.c, restore.c). */
static void
print_restore(const RingHeader *hdr, ControlFileData *control, const char *datadir,
			  BindState bstate, const BindingSlot *slot)
{
	const char *label = "restore at start:";
	TimeLineID	tli = (TimeLineID) hdr->timeline.v;
	TimeLineID	ckpt_tli = control->checkPointCopy.ThisTimeLineID;
	XLogRecPtr	backup_start;
	char	   *mismatch;

	if (backup_label_start(datadir, &backup_start))
	{
		if (hdr->head.v <= backup_start)
			printf(LABEL "no: all of it precedes the start %X/%X of the base backup this data directory is restored from (backup_label); a start empties the ring\n",
				   label, LSN_FORMAT_ARGS(backup_start));
		else
			printf(LABEL "REFUSED: the data directory is being restored from a base backup (backup_label, start %X/%X), and the ring's WAL may be the WAL of the server the backup was taken from\n",
				   label, LSN_FORMAT_ARGS(backup_start));
		return;
	}
	if (bstate != BIND_VALID)
	{
		printf(LABEL "REFUSED: the ring holds WAL of another data directory: this one's binding is %s\n",
			   label, bstate == BIND_ABSENT ? "absent" :
			   bstate == BIND_DAMAGED ? "damaged" : "not readable");
		return;
	}
	if (slot->system_identifier != control->system_identifier)
	{
		printf(LABEL "REFUSED: the binding file is of another cluster (system identifier " UINT64_FORMAT ")\n",
			   label, slot->system_identifier);
		return;
	}
	if ((mismatch = binding_mismatch(hdr, slot)) != NULL)
	{
		printf(LABEL "REFUSED: %s\n", label, mismatch);
		return;
	}
	if (shut_down_cleanly(control))
	{
		printf(LABEL "REFUSED: pg_control says the cluster shut down cleanly at %X/%X since the ring was written; its WAL is not this cluster's history any more\n",
			   label, LSN_FORMAT_ARGS(control->checkPoint));
		return;
	}
	if (control->state != DB_IN_PRODUCTION && control->state != DB_SHUTDOWNING)
	{
		printf(LABEL "REFUSED: pg_control's state (%d) says the cluster was in recovery, when pmwal copies nothing\n",
			   label, (int) control->state);
		return;
	}
	if (tli > ckpt_tli)
		printf(LABEL "on timeline %u if its history file in pg_wal shows it descends from the checkpoint's timeline %u before the ring starts (a promotion since the last checkpoint); REFUSED otherwise\n",
			   label, tli, ckpt_tli);
	else if (tli < ckpt_tli)
		printf(LABEL "REFUSED unless the cluster's history (timeline %u) left timeline %u after the ring's head (then the ring is emptied)\n",
			   label, ckpt_tli, tli);
	else if (RING_PAGE(control->checkPoint) > hdr->tail.v || control->checkPoint >= hdr->head.v)
		printf(LABEL "REFUSED: the ring (%X/%X to %X/%X) does not cover the cluster's last checkpoint at %X/%X: it is not the ring the cluster wrote last\n",
			   label, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPoint));
	else
		printf(LABEL "yes: %X/%X to %X/%X, once it reads as the continuation of pg_wal from the checkpoint at %X/%X\n",
			   label, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPoint));
}

static int
cmd_inspect(Ring *ring, ControlFileData *control, const char *datadir)
{
	RingHeader *hdr = ring->hdr;
	RingCheck	verdict;
	BindingSlot slot;
	BindState	bstate = BIND_ABSENT;
	char		bpath[MAXPGPATH];
	char		why[MAXPGPATH + 128];

	printf(LABEL "%s\n", "ring:", ring->path);
	printf(LABEL "%s\n", "lock:", ring->locked ? "free (no server uses the ring)" :
		   "held (a server uses the ring; positions may change while you look)");
	verdict = check_header(ring, control);
	/* a header of this format: show what it records, usable or not */
	if (ring->len >= RING_HEADER_SIZE &&
		memcmp(hdr->st.s.magic, RING_MAGIC, RING_MAGIC_LEN) == 0 &&
		hdr->st.s.format_version == RING_FORMAT_VERSION)
		print_fields(ring, verdict, control);
	if (verdict == RING_OK)
	{
		if (ring_holds_wal(hdr))
			printf(LABEL UINT64_FORMAT " bytes of WAL (" UINT64_FORMAT " pages) of timeline " UINT64_FORMAT "\n",
				   "holds:", hdr->head.v - hdr->tail.v,
				   (hdr->head.v - hdr->tail.v) / XLOG_BLCKSZ, (uint64) hdr->timeline.v);
		else
			printf(LABEL "no WAL (empty)\n", "holds:");
	}

	if (datadir != NULL)
	{
		char		id[2 * RING_ID_LEN + 1];

		bstate = read_binding(datadir, &slot, bpath, why, sizeof(why));
		if (bstate == BIND_ABSENT)
			printf(LABEL "none: \"%s\" is absent; the data directory is not bound to a ring\n",
				   "binding:", bpath);
		else if (bstate != BIND_VALID)
			printf(LABEL "%s: \"%s\": %s\n", "binding:",
				   bstate == BIND_DAMAGED ? "DAMAGED" : "NOT READABLE", bpath, why);
		else
		{
			char	   *mismatch = NULL;

			ring_id_text(slot.ring_id, id);
			printf(LABEL "ring %s at \"%s\", generation " UINT64_FORMAT "\n",
				   "binding:", id, slot.ring_path, slot.generation);
			if (verdict == RING_OK && (mismatch = binding_mismatch(hdr, &slot)) == NULL)
				printf(LABEL "yes: the same ring, at the binding's generation%s\n",
					   "binding matches:", hdr->generation.v == slot.generation ? "" : " plus one");
			else if (verdict == RING_OK)
				printf(LABEL "NO: %s\n", "binding matches:", mismatch);
			else
				printf(LABEL "NO: the ring's header is not usable\n", "binding matches:");
		}
	}

	if (verdict != RING_OK)
		return ring_usable(verdict) ? EXIT_OK : EXIT_UNUSABLE;
	if (!ring_holds_wal(hdr))
		printf(LABEL "nothing to restore\n", "restore at start:");
	else if (control == NULL)
		printf(LABEL "yes, if the data directory bound to it did not shut down cleanly since and still names it at generation " UINT64_FORMAT " or one less (give -D to check)\n",
			   "restore at start:", (uint64) hdr->generation.v);
	else
		print_restore(hdr, control, datadir, bstate, &slot);
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * dump
 * --------------------------------------------------------------------- */

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
		exit(EXIT_ERROR);
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
	{
		pg_log_error("dump directory \"%s\" is writable by group or others (permissions %04o)",
					 dir, (unsigned) (st.st_mode & 07777));
		pg_log_error_hint("The WAL is only written into a directory no one else can write to (chmod go-w), or into a missing one, which is created with mode 0700.");
		exit(EXIT_ERROR);
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
	exit(EXIT_ERROR);
}

/* The ring's page that holds WAL page "page" (in [tail, head)). */
static XLogPageHeader
ring_page(const Ring *ring, XLogRecPtr page)
{
	return (XLogPageHeader) (ring->data + RING_OFFSET(ring->hdr->st.s.capacity, page));
}

/*
 * The first page of a segment whose WAL the ring holds only from a later
 * page on: pg_waldump (its XLogReader) reads and checks a segment's long
 * page header before any other page of it, so the dump gets one made from
 * the ring's header, of the timeline of the ring's first page.
 */
static void
synthetic_long_header(char *page, XLogRecPtr segstart, const Ring *ring, XLogRecPtr first)
{
	XLogLongPageHeader lh = (XLogLongPageHeader) page;
	XLogPageHeader fh = ring_page(ring, first);

	memset(page, 0, XLOG_BLCKSZ);
	lh->std.xlp_magic = XLOG_PAGE_MAGIC;
	lh->std.xlp_info = XLP_LONG_HEADER;
	lh->std.xlp_tli = fh->xlp_magic == XLOG_PAGE_MAGIC ? fh->xlp_tli :
		(TimeLineID) ring->hdr->timeline.v;
	lh->std.xlp_pageaddr = segstart;
	lh->xlp_sysid = ring->hdr->st.s.system_identifier;
	lh->xlp_seg_size = ring->hdr->st.s.wal_segment_size;
	lh->xlp_xlog_blcksz = ring->hdr->st.s.wal_block_size;
}

/*
 * Write the ring's WAL [tail, head) as segment files of the ring's timeline
 * into "dir"; returns the number of segments written.  Only for a ring
 * whose header checked (RING_OK) and that holds WAL: every field used here
 * was validated.
 */
static int
dump_ring(Ring *ring, const char *dir)
{
	RingHeader *hdr = ring->hdr;
	uint32		segsize = hdr->st.s.wal_segment_size;
	uint64		cap = hdr->st.s.capacity;
	TimeLineID	tli = (TimeLineID) hdr->timeline.v;
	XLogRecPtr	from = hdr->tail.v;
	XLogRecPtr	to = hdr->head.v;
	char	   *seg;
	int			nsegs = 0;
	int			dirfd;

	Assert(IsValidWalSegSize(segsize) && from % XLOG_BLCKSZ == 0 && from < to);
	dirfd = open_dump_dir(dir);

	/* refuse before writing anything if a file of a segment's name exists */
	for (XLogSegNo segno = from / segsize; segno <= (to - 1) / segsize; segno++)
	{
		char		name[MAXFNAMELEN];
		char		path[MAXPGPATH];
		struct stat st;

		XLogFileName(name, tli, segno, segsize);
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
			synthetic_long_header(seg, segstart, ring, from);
		for (XLogRecPtr p = from; p < segend;)
		{
			uint64		off = RING_OFFSET(cap, p);
			Size		n = Min(segend - p, cap - off);

			memcpy(seg + (p - segstart), ring->data + off, n);
			p += n;
		}
		XLogFileName(name, tli, segno, segsize);
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
 * Check the page header of every page in [tail, head) against its address
 * (and what a chain of continuation pages must say), as the XLogReader
 * does, and find the first record that starts at or after the tail (head
 * if none does: the ring holds only the middle of one record).  Returns
 * NULL, or what is wrong.  The ring's header checked (RING_OK).
 */
static char *
check_pages(const Ring *ring, XLogRecPtr *first)
{
	const RingHeader *hdr = ring->hdr;
	uint32		segsize = hdr->st.s.wal_segment_size;
	TimeLineID	tli = (TimeLineID) hdr->timeline.v;
	uint32		cont = 0;		/* continuation data the next page must begin with */

	*first = InvalidXLogRecPtr;
	for (XLogRecPtr p = hdr->tail.v; p < hdr->head.v; p += XLOG_BLCKSZ)
	{
		XLogPageHeader ph = ring_page(ring, p);
		bool		is_long = p % segsize == 0;
		uint32		hs = is_long ? SizeOfXLogLongPHD : SizeOfXLogShortPHD;
		uint32		space = XLOG_BLCKSZ - hs;

		if (ph->xlp_magic != XLOG_PAGE_MAGIC)
			return psprintf("the ring's page at %X/%X has no valid page header (magic %04X, not %04X)",
							LSN_FORMAT_ARGS(p), ph->xlp_magic, XLOG_PAGE_MAGIC);
		if (ph->xlp_pageaddr != p)
			return psprintf("the ring's page at %X/%X has the page header of %X/%X",
							LSN_FORMAT_ARGS(p), LSN_FORMAT_ARGS(ph->xlp_pageaddr));
		if ((ph->xlp_info & ~XLP_ALL_FLAGS) != 0 ||
			((ph->xlp_info & XLP_LONG_HEADER) != 0) != is_long)
			return psprintf("the ring's page at %X/%X has invalid info bits %04X in its page header",
							LSN_FORMAT_ARGS(p), ph->xlp_info);
		if (ph->xlp_tli == 0 || ph->xlp_tli > tli)
			return psprintf("the ring's page at %X/%X is of timeline %u, the ring's is %u",
							LSN_FORMAT_ARGS(p), ph->xlp_tli, tli);
		if (is_long)
		{
			XLogLongPageHeader lh = (XLogLongPageHeader) ph;

			if (lh->xlp_sysid != hdr->st.s.system_identifier ||
				lh->xlp_seg_size != segsize || lh->xlp_xlog_blcksz != XLOG_BLCKSZ)
				return psprintf("the ring's page at %X/%X has a long page header of another cluster or geometry (system identifier " UINT64_FORMAT ", segment size %u, block size %u)",
								LSN_FORMAT_ARGS(p), lh->xlp_sysid, lh->xlp_seg_size,
								lh->xlp_xlog_blcksz);
		}
		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) != 0 && ph->xlp_rem_len == 0)
			return psprintf("the ring's page at %X/%X continues a record, with 0 bytes left of it",
							LSN_FORMAT_ARGS(p));
		if (cont > 0 &&
			((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 || ph->xlp_rem_len != cont))
			return psprintf("the ring's page at %X/%X does not continue the record of the page before it (%u bytes of it left)",
							LSN_FORMAT_ARGS(p), cont);

		/* what the next page must begin with, and where records start */
		cont = 0;
		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) != 0 && ph->xlp_rem_len > space)
			cont = ph->xlp_rem_len - space;
		else if (XLogRecPtrIsInvalid(*first))
		{
			if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0)
				*first = p + hs;
			else if (MAXALIGN(ph->xlp_rem_len) < space)
				*first = p + hs + MAXALIGN(ph->xlp_rem_len);
			/* else the record ends with the page: the next page begins one */
		}
	}
	if (XLogRecPtrIsInvalid(*first))
		*first = hdr->head.v;
	return NULL;
}

/*
 * Does the record at "rec" continue past the head, every page after its
 * first one continuing it as it must?  For a ring whose first record
 * pg_waldump cannot read because the head cuts it off.
 */
static bool
record_continues_past_head(const Ring *ring, XLogRecPtr rec)
{
	uint32		tot = *(const uint32 *) (ring->data + RING_OFFSET(ring->hdr->st.s.capacity, rec));
	uint32		got = RING_PAGE(rec) + XLOG_BLCKSZ - rec;

	if (tot < SizeOfXLogRecord || tot <= got)
		return false;
	for (XLogRecPtr p = RING_PAGE(rec) + XLOG_BLCKSZ; p < ring->hdr->head.v; p += XLOG_BLCKSZ)
	{
		XLogPageHeader ph = ring_page(ring, p);

		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 || ph->xlp_rem_len != tot - got)
			return false;
		got += Min(ph->xlp_rem_len, XLOG_BLCKSZ - XLogPageHeaderSize(ph));
		if (got >= tot)
			return false;
	}
	return true;
}

/*
 * Where the record after one that ends at "end" begins: at the next 8-byte
 * boundary, after the page header if that is a page's start.
 */
static XLogRecPtr
next_record_start(XLogRecPtr end, uint32 segsize)
{
	XLogRecPtr	next = MAXALIGN64(end);

	if (next % segsize == 0)
		return next + SizeOfXLogLongPHD;
	if (next % XLOG_BLCKSZ == 0)
		return next + SizeOfXLogShortPHD;
	return next;
}

/* The command that reads [first, head) of a dump in "dir" with pg_waldump. */
static char *
waldump_command(const char *waldump, const char *dir, const RingHeader *hdr, XLogRecPtr first)
{
	return psprintf("%s --path=%s --timeline=%u --start=%X/%X --end=%X/%X",
					waldump, dir, (TimeLineID) hdr->timeline.v, LSN_FORMAT_ARGS(first),
					LSN_FORMAT_ARGS(hdr->head.v));
}

static int
cmd_dump(Ring *ring, const char *dir)
{
	RingHeader *hdr = ring->hdr;
	RingCheck	verdict;
	XLogRecPtr	first;
	char	   *wrong;
	int			nsegs;

	require_lock(ring);
	verdict = check_header(ring, NULL);
	if (!ring_usable(verdict))
		return EXIT_UNUSABLE;
	if (!holds_wal(ring, verdict))
	{
		printf("the ring is empty; nothing to dump\n");
		return EXIT_OK;
	}
	nsegs = dump_ring(ring, dir);
	printf("wrote WAL %X/%X to %X/%X of timeline %u into %d segment file(s) in \"%s\"\n",
		   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
		   (TimeLineID) hdr->timeline.v, nsegs, dir);
	if ((wrong = check_pages(ring, &first)) != NULL)
		printf("warning: %s; \"pmwal_ctl verify\" checks the ring\n", wrong);
	else if (first >= hdr->head.v)
		printf("the ring holds only the middle of one record, which pg_waldump cannot read\n");
	else
		printf("read it with: %s\n", waldump_command("pg_waldump", dir, hdr, first));
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * verify
 * --------------------------------------------------------------------- */

/*
 * Run "argv" (argv[0] a path, no shell) in the C locale, so that its
 * messages can be read, with its standard output and error into a pipe;
 * NULL if it cannot be started.
 */
static FILE *
spawn(char *const argv[], pid_t *pid)
{
	int			p[2];
	FILE	   *f;

	if (pipe(p) != 0)
		return NULL;
	fflush(NULL);
	*pid = fork();
	if (*pid < 0)
	{
		close(p[0]);
		close(p[1]);
		return NULL;
	}
	if (*pid == 0)
	{
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		close(p[1]);
		setenv("LC_ALL", "C", 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if ((f = fdopen(p[0], "r")) == NULL)
		close(p[0]);
	return f;
}

/* Wait for a child of spawn(); its wait status. */
static int
reap(FILE *f, pid_t pid)
{
	int			status = 0;

	fclose(f);
	while (waitpid(pid, &status, 0) < 0)
	{
		if (errno != EINTR)
			return -1;
	}
	return status;
}

/* The major version pg_waldump at "path" reports, or NULL. */
static char *
waldump_version(const char *path)
{
	char	   *argv[3];
	char		line[256] = "";
	char	   *version = NULL;
	FILE	   *f;
	pid_t		pid;

	argv[0] = (char *) path;
	argv[1] = "--version";
	argv[2] = NULL;
	if ((f = spawn(argv, &pid)) == NULL)
		return NULL;
	if (fgets(line, sizeof(line), f) != NULL &&
		strncmp(line, "pg_waldump (PostgreSQL) ", 24) == 0)
		version = pnstrdup(line + 24, strspn(line + 24, "0123456789"));
	if (reap(f, pid) != 0 && version != NULL)
	{
		pfree(version);
		version = NULL;
	}
	return version;
}

/*
 * Find pg_waldump of this PostgreSQL major version (WAL's page format
 * changes with it): next to pmwal_ctl, which is installed into the
 * server's bin directory, then on PATH.  False, with "why", if there is
 * none.
 */
static bool
find_waldump(const char *argv0, char *found, char *why, size_t whylen)
{
	char		self[MAXPGPATH];
	char	   *dirs;
	char	   *others = pstrdup("");
	const char *path_env = getenv("PATH");

	if (find_my_exec(argv0, self) == 0)
		*last_dir_separator(self) = '\0';
	else
		self[0] = '\0';
	dirs = psprintf("%s:%s", self, path_env ? path_env : "");
	for (char *dir = strtok(dirs, ":"); dir != NULL; dir = strtok(NULL, ":"))
	{
		struct stat st;
		char	   *version;

		if (dir[0] == '\0')
			continue;
		snprintf(found, MAXPGPATH, "%s/pg_waldump", dir);
		if (stat(found, &st) != 0 || !S_ISREG(st.st_mode) || access(found, X_OK) != 0)
			continue;
		version = waldump_version(found);
		if (version != NULL && strcmp(version, PG_MAJORVERSION) == 0)
			return true;
		others = psprintf("%s; \"%s\" is %s", others, found,
						  version ? psprintf("of PostgreSQL %s", version) :
						  "not a pg_waldump that runs");
	}
	snprintf(why, whylen, "no pg_waldump of PostgreSQL %s was found next to %s (in \"%s\") or on PATH%s",
			 PG_MAJORVERSION, progname, self, others);
	return false;
}

/* atexit: remove verify's scratch directory and the dump in it */
static void
remove_verify_dir(void)
{
	DIR		   *d;
	struct dirent *de;

	if (verify_dir[0] == '\0')
		return;
	if ((d = opendir(verify_dir)) != NULL)
	{
		while ((de = readdir(d)) != NULL)
		{
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				(void) unlinkat(dirfd(d), de->d_name, 0);
		}
		closedir(d);
	}
	if (rmdir(verify_dir) != 0)
		pg_log_warning("could not remove \"%s\": %m", verify_dir);
	verify_dir[0] = '\0';
}

/* What pg_waldump made of the dump. */
typedef struct WaldumpRun
{
	bool		ran;			/* it ran and exited */
	int			exit_code;
	uint64		nrecords;
	XLogRecPtr	end;			/* where the record after the last one it read
								 * begins: where reading stopped */
	char	   *error;			/* its "pg_waldump: ..." lines, if any */
	bool		skipped;		/* "first record is after" the start */
} WaldumpRun;

static void
run_waldump(const char *waldump, const char *dir, const RingHeader *hdr,
			XLogRecPtr first, WaldumpRun *run)
{
	char	   *argv[6];
	char	   *line = NULL;
	size_t		linecap = 0;
	FILE	   *f;
	pid_t		pid;
	int			status;

	memset(run, 0, sizeof(WaldumpRun));
	run->end = first;
	run->error = pstrdup("");
	argv[0] = (char *) waldump;
	argv[1] = psprintf("--path=%s", dir);
	argv[2] = psprintf("--timeline=%u", (TimeLineID) hdr->timeline.v);
	argv[3] = psprintf("--start=%X/%X", LSN_FORMAT_ARGS(first));
	argv[4] = psprintf("--end=%X/%X", LSN_FORMAT_ARGS(hdr->head.v));
	argv[5] = NULL;
	if ((f = spawn(argv, &pid)) == NULL)
	{
		run->error = psprintf("could not run \"%s\": %s", waldump, strerror(errno));
		return;
	}
	while (getline(&line, &linecap, f) > 0)
	{
		const char *len = strstr(line, "len (rec/tot):");
		const char *lsn = strstr(line, ", lsn: ");
		unsigned int rec,
					tot,
					hi,
					lo;

		if (strncmp(line, "pg_waldump: ", 12) == 0)
		{
			if (strlen(run->error) < 4096)
				run->error = psprintf("%s%s", run->error, line);
		}
		else if (strncmp(line, "first record is after", 21) == 0)
			run->skipped = true;
		else if (len && lsn && sscanf(len + 14, " %u/ %u", &rec, &tot) == 2 &&
				 sscanf(lsn + 7, "%X/%X", &hi, &lo) == 2)
		{
			run->nrecords++;
			run->end = next_record_start((((uint64) hi << 32) | lo) + tot,
										 hdr->st.s.wal_segment_size);
		}
	}
	free(line);
	/* one message, for a line of the report */
	if (run->error[0] != '\0' && run->error[strlen(run->error) - 1] == '\n')
		run->error[strlen(run->error) - 1] = '\0';
	status = reap(f, pid);
	run->ran = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) != 127;
	run->exit_code = run->ran ? WEXITSTATUS(status) : -1;
	if (!run->ran && run->error[0] == '\0')
		run->error = psprintf("\"%s\" did not run to its end (wait status %d)", waldump, status);
}

static int
cmd_verify(Ring *ring, ControlFileData *control, const char *argv0)
{
	RingHeader *hdr = ring->hdr;
	char		waldump[MAXPGPATH];
	char		why[2048];
	const char *tmp = getenv("TMPDIR");
	XLogRecPtr	first;
	XLogRecPtr	last_page;
	WaldumpRun	run;
	RingCheck	verdict;
	char	   *wrong;

	require_lock(ring);
	verdict = check_header(ring, control);
	if (!ring_usable(verdict))
		return EXIT_UNUSABLE;
	if (!holds_wal(ring, verdict))
	{
		printf(LABEL "none (the ring is empty)\n", "WAL:");
		return EXIT_OK;
	}
	last_page = hdr->head.v - XLOG_BLCKSZ;
	if (control && hdr->head.v <= control->checkPoint)
		printf(LABEL "all of it precedes the checkpoint at %X/%X; a start would not restore it\n",
			   "note:", LSN_FORMAT_ARGS(control->checkPoint));

	/* the page headers: no tool needed */
	if ((wrong = check_pages(ring, &first)) != NULL)
	{
		printf(LABEL "DAMAGED: %s; a start would refuse to restore it\n", "WAL:", wrong);
		return EXIT_UNUSABLE;
	}
	printf(LABEL UINT64_FORMAT " page%s from %X/%X to %X/%X, every page header valid\n", "pages:",
		   (hdr->head.v - hdr->tail.v) / XLOG_BLCKSZ,
		   hdr->head.v - hdr->tail.v == XLOG_BLCKSZ ? "" : "s",
		   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
	if (first >= hdr->head.v)
	{
		printf(LABEL "ok: %X/%X to %X/%X holds only the middle of one record, which begins before the tail and continues past the head\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
		return EXIT_OK;
	}

	/* the records: pg_waldump over a dump */
	if (!find_waldump(argv0, waldump, why, sizeof(why)))
	{
		printf(LABEL "NOT CHECKED: %s; the records from %X/%X to %X/%X were not read, and nothing is known to be wrong with them\n",
			   "WAL:", why, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(hdr->head.v));
		printf(LABEL "install PostgreSQL %s's pg_waldump (it comes with the server) or put its directory on PATH, then verify again\n",
			   "what to do:", PG_MAJORVERSION);
		return EXIT_UNCHECKED;
	}
	snprintf(verify_dir, sizeof(verify_dir), "%s/pmwal_ctl_verify_XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
	atexit(remove_verify_dir);
	if (mkdtemp(verify_dir) == NULL)
	{
		pg_log_error("could not create a temporary directory \"%s\": %m", verify_dir);
		verify_dir[0] = '\0';
		exit(EXIT_ERROR);
	}
	(void) dump_ring(ring, verify_dir);
	run_waldump(waldump, verify_dir, hdr, first, &run);
	remove_verify_dir();

	if (!run.ran ||
		(run.exit_code != 0 && strstr(run.error, "error in WAL record at") == NULL &&
		 strstr(run.error, "could not find a valid record after") == NULL))
	{
		/* it failed for a reason of its own, not over the WAL */
		printf(LABEL "NOT CHECKED: %s failed: %s; nothing is known to be wrong with the records\n",
			   "WAL:", waldump, run.error[0] ? run.error : "(no message)");
		return EXIT_UNCHECKED;
	}
	if (run.skipped)
	{
		printf(LABEL "DAMAGED: the first record after the tail does not begin at %X/%X, where the page headers put it; a start would refuse to restore it\n",
			   "WAL:", LSN_FORMAT_ARGS(first));
		return EXIT_UNUSABLE;
	}
	if (run.exit_code == 0)
		printf(LABEL "ok: %X/%X to %X/%X: " UINT64_FORMAT " records from %X/%X read cleanly to the head%s\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   run.nrecords, LSN_FORMAT_ARGS(first),
			   run.end < hdr->head.v ? ", and the record after them continues past it" : "");
	else if (run.end >= last_page)
		printf(LABEL "ok: %X/%X to %X/%X: " UINT64_FORMAT " records from %X/%X read cleanly up to %X/%X, in the last page, where the WAL ends\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   run.nrecords, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(run.end));
	else if (run.nrecords == 0 && record_continues_past_head(ring, first))
		printf(LABEL "ok: %X/%X to %X/%X: the first record, at %X/%X, continues past the head\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(first));
	else
	{
		printf(LABEL "DAMAGED: reading from %X/%X stopped at the record at %X/%X, before the last page at %X/%X; a start would refuse to restore it\n",
			   "WAL:", LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(run.end),
			   LSN_FORMAT_ARGS(last_page));
		printf(LABEL "%s\n", "pg_waldump says:", run.error);
		return EXIT_UNUSABLE;
	}
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * reset
 * --------------------------------------------------------------------- */

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
		return EXIT_OK;
	}
	if (verdict != RING_OK)
	{
		pg_log_error("refusing to reset ring \"%s\": its header is not usable", ring->path);
		pg_log_error_hint("A start refuses this ring whatever its positions say; remove the file if it is not needed, or make it a new ring with \"pmwal_ctl init --force\".");
		exit(EXIT_ERROR);
	}
	if (ring_holds_wal(hdr))
	{
		printf("discarding WAL %X/%X to %X/%X (" UINT64_FORMAT " bytes) of timeline " UINT64_FORMAT "\n",
			   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   hdr->head.v - hdr->tail.v, (uint64) hdr->timeline.v);
		if (ring_owner_valid(&hdr->owner))
			printf("commits acknowledged in it that data directory \"%.*s\" lacks are lost\n",
				   (int) strnlen(hdr->owner.datadir, RING_OWNER_PATH_LEN), hdr->owner.datadir);
	}
	else
		printf("the ring holds no WAL\n");
	/* as the server empties it: tail up to head, then the state */
	hdr->tail.v = hdr->head.v;
	persist(ring, (const void *) &hdr->tail.v, sizeof(uint64));
	hdr->state.v = RING_STATE_EMPTY;
	persist(ring, (const void *) &hdr->state.v, sizeof(uint64));
	printf("ring \"%s\" is empty\n", ring->path);
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * init
 * --------------------------------------------------------------------- */

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
		exit(EXIT_ERROR);
	}
	if ((st->st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		pg_log_error("\"%s\" has group or other access (permissions %04o)",
					 path, (unsigned) (st->st_mode & 07777));
		pg_log_error_hint("The ring holds a copy of the WAL and must be accessible by the server's user only: run chmod 0600 on it.");
		exit(EXIT_ERROR);
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

/* Offset of the first byte of [p, p + len) that is not zero, or -1. */
static int64
first_nonzero(const char *p, size_t len)
{
	static const char zeros[65536];

	for (size_t off = 0; off < len; off += sizeof(zeros))
	{
		size_t		n = Min(len - off, sizeof(zeros));

		if (memcmp(p + off, zeros, n) != 0)
		{
			for (size_t i = off; i < off + n; i++)
				if (p[i] != 0)
					return (int64) i;
		}
	}
	return -1;
}

/*
 * Offset of the first byte of the regular file "fd" that is not zero, or
 * -1: every byte is read, but holes (SEEK_DATA) are skipped.
 */
static int64
file_first_nonzero(int fd, const char *path, uint64 size)
{
	const size_t chunk = 1024 * 1024;
	char	   *buf = pg_malloc(chunk);
	uint64		pos = 0;
	int64		found = -1;

	while (pos < size && found < 0)
	{
		off_t		data = lseek(fd, (off_t) pos, SEEK_DATA);
		ssize_t		n;
		int64		at;

		if (data < 0 && errno == ENXIO)
			break;				/* nothing but a hole from here */
		if (data >= 0)
			pos = (uint64) data;
		else if (errno != EINVAL)
			pg_fatal("could not read \"%s\": %m", path);
		if (pos >= size)
			break;
		n = pg_pread(fd, buf, Min(chunk, size - pos), (off_t) pos);
		if (n <= 0)
			pg_fatal("could not read \"%s\" at offset " UINT64_FORMAT ": %s", path, pos,
					 n < 0 ? strerror(errno) : "unexpected end of file");
		if ((at = first_nonzero(buf, (size_t) n)) >= 0)
			found = (int64) pos + at;
		pos += (uint64) n;
	}
	pg_free(buf);
	return found;
}

/* init --force over a pmwal ring: which ring, and what WAL it holds */
static void
describe_overwritten_ring(const RingHeader *hdr, RingCheck verdict, const char *detail,
						  char *buf, size_t len)
{
	char		id[2 * RING_ID_LEN + 1];

	ring_id_text(hdr->st.s.ring_id, id);
	if (verdict != RING_OK)
		snprintf(buf, len, "a pmwal ring whose header is not usable (%s)", detail);
	else if (ring_holds_wal(hdr))
		snprintf(buf, len, "pmwal ring %s of system identifier " UINT64_FORMAT
				 ", with WAL %X/%X to %X/%X (" UINT64_FORMAT " bytes) of timeline " UINT64_FORMAT
				 " that is discarded",
				 id, hdr->st.s.system_identifier,
				 LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
				 hdr->head.v - hdr->tail.v, (uint64) hdr->timeline.v);
	else
		snprintf(buf, len, "empty pmwal ring %s of system identifier " UINT64_FORMAT,
				 id, hdr->st.s.system_identifier);
}

/* init --force over other data: where it begins, and its first bytes there */
static void
describe_overwritten_data(const unsigned char *bytes, int nbytes, int64 first,
						  char *buf, size_t len)
{
	char		hex[16 * 3 + 1] = "";

	for (int i = 0; i < nbytes && i < 16; i++)
		snprintf(hex + i * 3, sizeof(hex) - i * 3, "%02x%s", bytes[i],
				 i < nbytes - 1 && i < 15 ? " " : "");
	snprintf(buf, len, "data that was not a pmwal ring (its first byte that is not zero is at offset " INT64_FORMAT ": %s)",
			 first, hex);
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
	PGAlignedBlock page;
	uint64		avail;
	uint64		capacity;
	const char *what = "a new file";
	char		overwrote[768];
	char		why[MAXPGPATH + 128];
	RingExpect	expect = {0, 0, 0};
	char		detail[256];
	char		id[2 * RING_ID_LEN + 1];
	uint8		ring_id[RING_ID_LEN];
	RingCheck	verdict;
	bool		missing;
	bool		overwriting = false;

	memset(&ring, 0, sizeof(ring));
	ring.path = path;
	if (control->xlog_blcksz != XLOG_BLCKSZ)
		pg_fatal("the cluster uses a WAL block size of %u bytes; this pmwal_ctl was built for %d",
				 control->xlog_blcksz, XLOG_BLCKSZ);
	if (!IsValidWalSegSize(control->xlog_seg_size))
		pg_fatal("pg_control names a WAL segment size of %u bytes, which PostgreSQL does not allow",
				 control->xlog_seg_size);

	/* open it: create a missing file exclusively, never follow a link */
	ring.fd = try_open_ring(path, O_RDWR, &ring.st, &missing, why, sizeof(why));
	if (ring.fd < 0 && !missing)
	{
		/* another user's file: say so, rather than "permission denied" */
		if (S_ISREG(ring.st.st_mode) || S_ISCHR(ring.st.st_mode))
			check_ring_owner(path, &ring.st);
		open_failed(path, &ring.st, why);
	}
	if (ring.fd < 0)
	{
		if (size == 0)
			pg_fatal("ring \"%s\" does not exist; give its size with --size to create it", path);
		ring.fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | PG_BINARY,
					   S_IRUSR | S_IWUSR);
		if (ring.fd < 0)
			pg_fatal("could not create ring \"%s\": %m", path);
		init_created = path;
		atexit(init_cleanup);
		if (fstat(ring.fd, &ring.st) != 0)
			pg_fatal("could not stat \"%s\": %m", path);
	}
	else
		check_ring_owner(path, &ring.st);
	lock_ring(&ring);
	require_lock(&ring);

	/* what is there: the header page (a device only maps) */
	memset(page.data, 0, RING_HEADER_SIZE);
	if (S_ISCHR(ring.st.st_mode))
	{
		map_ring(&ring, true);
		if (ring.len < RING_HEADER_SIZE)
			pg_fatal("device \"%s\" holds " UINT64_FORMAT " bytes, less than a ring header", path, ring.len);
		memcpy(page.data, ring.base, RING_HEADER_SIZE);
		avail = ring.len - RING_HEADER_SIZE;
	}
	else
	{
		ssize_t		n = pg_pread(ring.fd, page.data, RING_HEADER_SIZE, 0);

		if (n < 0 || (n < RING_HEADER_SIZE && n != ring.st.st_size))
			pg_fatal("could not read \"%s\": %m", path);
		ring.len = (uint64) ring.st.st_size;
		avail = ring.len > RING_HEADER_SIZE ? ring.len - RING_HEADER_SIZE : 0;
	}
	avail -= avail % XLOG_BLCKSZ;
	verdict = ring_check_header((RingHeader *) page.data, Max(ring.len, (uint64) RING_HEADER_SIZE),
								&expect, detail, sizeof(detail));
	if (init_created == NULL)
	{
		int64		nonzero;

		if (S_ISREG(ring.st.st_mode) && ring.len == 0)
			what = "an empty file";
		else if (verdict == RING_INTERRUPTED_REINIT)
			what = "an interrupted initialisation";
		else if (memcmp(page.data, RING_MAGIC, RING_MAGIC_LEN) == 0)
		{
			if (!force)
			{
				pg_log_error("\"%s\" already holds a pmwal ring", path);
				pg_log_error_hint("\"pmwal_ctl inspect\" shows what it holds; \"pmwal_ctl reset --discard-wal\" empties it, and a server re-initialises an empty ring to its pmwal.size; --force overwrites it, with any WAL it holds.");
				exit(EXIT_ERROR);
			}
			describe_overwritten_ring((RingHeader *) page.data, verdict, detail,
									  overwrote, sizeof(overwrote));
			overwriting = true;
		}
		else
		{
			/* other data may begin anywhere: only every byte zero proves it empty */
			nonzero = first_nonzero(page.data, Min(ring.len, (uint64) RING_HEADER_SIZE));
			if (nonzero < 0 && ring.len > RING_HEADER_SIZE)
			{
				printf("reading all of \"%s\" (" UINT64_FORMAT " bytes) to prove it empty\n", path, ring.len);
				fflush(stdout);
				nonzero = S_ISCHR(ring.st.st_mode) ? first_nonzero(ring.base, ring.len) :
					file_first_nonzero(ring.fd, path, ring.len);
			}
			if (nonzero < 0)
				what = S_ISCHR(ring.st.st_mode) ? "a devdax device, all zero" : "all zero";
			else if (!force)
			{
				pg_log_error("\"%s\" is not a pmwal ring and not empty, refusing to overwrite it", path);
				pg_log_error_detail("Its byte at offset " INT64_FORMAT " is not zero%s.", nonzero,
									nonzero >= RING_HEADER_SIZE ? " (its first 4096 bytes are, which proves nothing)" : "");
				pg_log_error_hint("pmwal_ctl init takes only a missing path or a file or device every byte of which is zero; remove the file if it is not needed, or give another path; --force overwrites it (a devdax device that held other data, for example).");
				exit(EXIT_ERROR);
			}
			else
			{
				unsigned char bytes[16];
				int			nbytes = (int) Min((uint64) sizeof(bytes), ring.len - (uint64) nonzero);

				if (S_ISCHR(ring.st.st_mode))
					memcpy(bytes, ring.base + nonzero, nbytes);
				else if ((nbytes = (int) pg_pread(ring.fd, bytes, nbytes, (off_t) nonzero)) < 0)
					pg_fatal("could not read \"%s\": %m", path);
				describe_overwritten_data(bytes, nbytes, nonzero, overwrote, sizeof(overwrote));
				overwriting = true;
			}
		}
	}

	/* the capacity */
	if (S_ISCHR(ring.st.st_mode))
	{
		if (avail < RING_MIN_MB * RING_MB)
			pg_fatal("device \"%s\" holds " UINT64_FORMAT " bytes; a ring needs at least %d MB after its %d-byte header",
					 path, ring.len, RING_MIN_MB, RING_HEADER_SIZE);
		if (size > avail)
			pg_fatal("--size is larger than the device \"%s\", which holds " UINT64_FORMAT " MB after the ring header",
					 path, avail / RING_MB);
		capacity = size ? size : Min(avail, RING_MAX_MB * RING_MB);
	}
	else if (size)
		capacity = size;
	else if (ring.len == 0)
		pg_fatal("\"%s\" is empty; give the ring's size with --size", path);
	else if (avail < RING_MIN_MB * RING_MB)
		pg_fatal("\"%s\" holds " UINT64_FORMAT " bytes after the ring header, less than %d MB; give the ring's size with --size",
				 path, avail, RING_MIN_MB);
	else
		capacity = Min(avail, RING_MAX_MB * RING_MB);
	if (!pg_strong_random(ring_id, RING_ID_LEN))
		pg_fatal("could not generate a random ring identifier");
	if (S_ISREG(ring.st.st_mode))
	{
		if (ring.len != RING_HEADER_SIZE + capacity && size != 0)
		{
			init_resize(&ring, capacity);
			if (fstat(ring.fd, &ring.st) != 0)
				pg_fatal("could not stat \"%s\": %m", path);
		}
		map_ring(&ring, true);
	}

	if (overwriting)
	{
		printf("overwriting \"%s\", which holds %s\n", path, overwrote);
		fflush(stdout);
		what = "overwritten with --force";
	}

	/*
	 * Write the header: REINIT first (a kill from here on leaves a ring that
	 * init or a server initialises again), then everything else -- a new
	 * ring_id, no owner, positions, timeline and generation 0 -- then EMPTY.
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
	ring_fill_static(&hdr->st.s, control->system_identifier, control->xlog_seg_size,
					 capacity, ring_id);
	persist(&ring, ring.base, RING_HEADER_SIZE);
	hdr->state.v = RING_STATE_EMPTY;
	persist(&ring, (const void *) &hdr->state.v, sizeof(uint64));
	if (S_ISREG(ring.st.st_mode) && fsync(ring.fd) != 0)
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
	ring_id_text(ring_id, id);
	printf("initialised ring \"%s\" (%s): capacity " UINT64_FORMAT " MB (" UINT64_FORMAT " bytes), ring %s, system identifier " UINT64_FORMAT "; it is empty\n",
		   path, what, capacity / RING_MB, capacity, id, control->system_identifier);
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * unbind
 * --------------------------------------------------------------------- */

/*
 * The PID of a server running in "datadir", or 0: postmaster.pid's first
 * line (negative for a standalone backend), alive as kill(pid, 0) sees it.
 */
static long
running_server(const char *datadir)
{
	char		path[MAXPGPATH];
	char		line[64] = "";
	FILE	   *f;
	long		pid;

	snprintf(path, sizeof(path), "%s/postmaster.pid", datadir);
	if ((f = fopen(path, "r")) == NULL)
	{
		if (errno == ENOENT)
			return 0;
		pg_fatal("could not open \"%s\": %m", path);
	}
	if (fgets(line, sizeof(line), f) == NULL)
		line[0] = '\0';
	fclose(f);
	pid = labs(strtol(line, NULL, 10));
	if (pid <= 0 || pid == (long) getpid())
		return 0;
	if (kill((pid_t) pid, 0) == 0 || errno == EPERM)
		return pid;
	return 0;
}

/*
 * Does the ring the binding names hold this data directory's WAL, as the
 * server's start sees it (binding.c)?  Returns a description of what is
 * there; *holds is set when it holds WAL a start on it would restore, and
 * *unknown when that cannot be told.
 */
static char *
bound_ring_state(const BindingSlot *slot, bool *holds, bool *unknown)
{
	Ring		ring;
	char		why[MAXPGPATH + 128];
	char		detail[256];
	RingExpect	expect = {0, 0, XLOG_BLCKSZ};
	RingHeader *hdr;
	bool		missing;
	uint64		gen;

	*holds = *unknown = false;
	memset(&ring, 0, sizeof(ring));
	ring.path = slot->ring_path;
	ring.fd = try_open_ring(ring.path, O_RDONLY, &ring.st, &missing, why, sizeof(why));
	if (ring.fd < 0 && missing)
		return psprintf("ring \"%s\" is missing", ring.path);
	if (ring.fd < 0)
	{
		*unknown = true;
		return pstrdup(why);
	}
	if (!ring_size(ring.path, &ring.st, &ring.len, why, sizeof(why)))
	{
		*unknown = true;
		close(ring.fd);
		return pstrdup(why);
	}
	map_ring(&ring, false);
	hdr = ring.hdr;
	if (ring_check_header(hdr, ring.len, &expect, detail, sizeof(detail)) != RING_OK)
		return psprintf("\"%s\" is not a usable ring: %s", ring.path, detail);
	if (memcmp(hdr->st.s.ring_id, slot->ring_id, RING_ID_LEN) != 0)
	{
		char		id[2 * RING_ID_LEN + 1];

		ring_id_text(hdr->st.s.ring_id, id);
		return psprintf("\"%s\" is another ring now (%s)", ring.path, id);
	}
	gen = hdr->generation.v;
	if (!ring_holds_wal(hdr))
		return psprintf("ring \"%s\" is there and holds no WAL", ring.path);
	if (gen > slot->generation + 1)
		return psprintf("ring \"%s\" holds WAL %X/%X to %X/%X, but of another copy of this data directory, which bound it since (generation " UINT64_FORMAT ", the binding's " UINT64_FORMAT ")",
						ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						gen, slot->generation);
	*holds = true;
	return psprintf("ring \"%s\" holds WAL %X/%X to %X/%X (generation " UINT64_FORMAT ") that pg_wal may lack",
					ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v), gen);
}

static int
cmd_unbind(const char *datadir, ControlFileData *control, bool force)
{
	BindingSlot slot;
	BindState	bstate;
	char		path[MAXPGPATH];
	char		why[MAXPGPATH + 128];
	char		waldir[MAXPGPATH];
	char		id[2 * RING_ID_LEN + 1];
	long		pid;
	int			dirfd;

	if ((pid = running_server(datadir)) != 0)
	{
		pg_log_error("a server is running in \"%s\" (PID %ld, postmaster.pid)", datadir, pid);
		pg_log_error_hint("Stop it first; a running server's binding names the ring it uses.");
		exit(EXIT_ERROR);
	}
	bstate = read_binding(datadir, &slot, path, why, sizeof(why));
	if (bstate == BIND_ABSENT)
	{
		printf("\"%s\" is not bound to a ring (\"%s\" is absent); nothing to do\n", datadir, path);
		return EXIT_OK;
	}
	if (bstate == BIND_VALID)
	{
		bool		holds;
		bool		unknown;
		char	   *state;

		ring_id_text(slot.ring_id, id);
		printf("\"%s\" binds the data directory to ring %s at \"%s\", generation " UINT64_FORMAT "\n",
			   path, id, slot.ring_path, slot.generation);
		if (slot.system_identifier != control->system_identifier)
			printf("the binding is of another cluster (system identifier " UINT64_FORMAT ", this one's " UINT64_FORMAT "): a start ignores it\n",
				   slot.system_identifier, control->system_identifier);
		else if (shut_down_cleanly(control))
			printf("the cluster shut down cleanly: the binding claims no WAL, and a start does not need it removed\n");
		state = bound_ring_state(&slot, &holds, &unknown);
		printf("%s\n", state);
		if ((holds || unknown) && !force)
		{
			if (holds)
			{
				pg_log_error("refusing to unbind \"%s\": its ring holds WAL this data directory may need", datadir);
				pg_log_error_detail("%s; a start on that ring restores it into pg_wal.", state);
				pg_log_error_hint("Set pmwal.path = '%s' and start the server once, so that the WAL is restored; after a clean shutdown pmwal.path may change.  --force unbinds anyway, and the commits only that ring holds are lost.",
								  slot.ring_path);
			}
			else
			{
				pg_log_error("refusing to unbind \"%s\": whether its ring holds WAL cannot be told", datadir);
				pg_log_error_detail("%s.", state);
				pg_log_error_hint("Make the ring readable at \"%s\" and check it with \"pmwal_ctl inspect -D\"; --force unbinds anyway, and any commits only that ring holds are lost.",
								  slot.ring_path);
			}
			exit(EXIT_ERROR);
		}
		if (holds || unknown)
			pg_log_warning("unbinding with --force: the commits only ring \"%s\" holds are lost to this data directory",
						   slot.ring_path);
	}
	else
	{
		printf("\"%s\" %s: %s\n", path,
			   bstate == BIND_DAMAGED ? "is damaged" : "cannot be read", why);
		if (!force)
		{
			pg_log_error("refusing to unbind \"%s\": its binding file cannot be read, so which ring holds its WAL cannot be told", datadir);
			pg_log_error_hint("Find the ring the server used (pmwal.path), check it with \"pmwal_ctl inspect -D\" and start the server on it once; --force removes the binding file anyway.");
			exit(EXIT_ERROR);
		}
	}

	/* remove it, durably */
	if (unlink(path) != 0)
		pg_fatal("could not remove \"%s\": %m", path);
	snprintf(waldir, sizeof(waldir), "%s/pg_wal", datadir);
	dirfd = open(waldir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0 || fsync(dirfd) != 0)
		pg_fatal("could not fsync directory \"%s\": %m", waldir);
	close(dirfd);
	printf("removed \"%s\": the data directory is no longer bound to a ring, and its next start does not look for one\n",
		   path);
	return EXIT_OK;
}

/* ---------------------------------------------------------------------
 * main
 * --------------------------------------------------------------------- */

/* Refuse an option the command does not take. */
static void
only_for(bool given, const char *option, bool allowed, const char *commands)
{
	if (given && !allowed)
		pg_fatal("%s is only for %s", option, commands);
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
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	const char *command;
	const char *datadir = NULL;
	const char *to = NULL;
	bool		discard = false;
	bool		force = false;
	uint64		size = 0;
	int			c;
	int			npaths;
	Ring		ring;
	ControlFileData *control;

	pg_logging_init(argv[0]);
	progname = get_progname(argv[0]);
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-?") == 0)
	{
		usage();
		exit(argc < 2 ? EXIT_ERROR : EXIT_OK);
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
	{
		printf("%s (pmwal) %s\n", progname, PMWAL_VERSION);
		exit(EXIT_OK);
	}
	command = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "D:V?", long_options, NULL)) != -1)
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
			case 'V':
				printf("%s (pmwal) %s\n", progname, PMWAL_VERSION);
				exit(EXIT_OK);
			default:
				/* "-?" asks for help; getopt also returns '?' for a bad option */
				if (strcmp(argv[optind - 1], "-?") == 0)
				{
					usage();
					exit(EXIT_OK);
				}
				pg_log_error_hint("Try \"%s --help\" for more information.", progname);
				exit(EXIT_ERROR);
		}
	}

	npaths = argc - optind;
	if (strcmp(command, "unbind") == 0)
	{
		if (npaths != 0)
			pg_fatal("unbind takes no ring path, only -D DATADIR; try \"%s --help\"", progname);
	}
	else if (strcmp(command, "init") == 0 || strcmp(command, "inspect") == 0 ||
			 strcmp(command, "verify") == 0 || strcmp(command, "dump") == 0 ||
			 strcmp(command, "reset") == 0)
	{
		if (npaths != 1)
			pg_fatal("expected exactly one ring path; try \"%s --help\"", progname);
	}
	else
		pg_fatal("unknown command \"%s\"; try \"%s --help\"", command, progname);
	only_for(force, "--force",
			 strcmp(command, "init") == 0 || strcmp(command, "unbind") == 0, "init and unbind");
	only_for(size != 0, "--size", strcmp(command, "init") == 0, "init");
	only_for(to != NULL, "--to", strcmp(command, "dump") == 0, "dump");
	only_for(discard, "--discard-wal", strcmp(command, "reset") == 0, "reset");
	control = read_control(datadir);

	if (strcmp(command, "unbind") == 0)
	{
		if (control == NULL)
			pg_fatal("unbind needs -D DATADIR, the data directory to unbind");
		return cmd_unbind(datadir, control, force);
	}
	if (strcmp(command, "init") == 0)
	{
		if (control == NULL)
			pg_fatal("init needs -D DATADIR, the data directory of the cluster the ring is for");
		return cmd_init(argv[optind], control, size, force);
	}
	if (strcmp(command, "inspect") == 0)
	{
		open_ring(&ring, argv[optind], false);
		return cmd_inspect(&ring, control, datadir);
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
	/* reset */
	if (!discard)
		pg_fatal("reset discards the WAL the ring holds; confirm with --discard-wal");
	open_ring(&ring, argv[optind], true);
	return cmd_reset(&ring);
}

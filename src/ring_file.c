/*-------------------------------------------------------------------------
 *
 * ring_file.c
 *		Opening, creating, locking and mapping the pmwal ring, and
 *		persisting stores into it.
 *
 * The postmaster (or a standalone backend) attaches the ring once, before
 * the startup process exists.  Every child inherits the mapping and the
 * descriptor that holds the ring's flock(), so the ring stays locked until
 * the last process of this server is gone and a second server on the same
 * ring is refused (I5).  Every refusal is decided before anything is
 * written: a ring pmwal refuses is left byte for byte as it was.
 *
 * The ring is trusted by descriptor, not by path: it is opened with
 * O_NOFOLLOW relative to its directory, which others may not write to
 * (unless it is sticky, like /dev/shm), owner and mode are checked on that
 * descriptor, and the mapping is made from it.  pmwal never adopts a file
 * it did not initialise: a missing ring is built in an unnamed file
 * (O_TMPFILE) and linked into place only once complete, so no kill leaves
 * a half-made ring behind; an existing file that is not a pmwal ring is
 * refused.  A ring is created only where the data directory's binding
 * allows it (binding.c: a missing ring that may have held acknowledged WAL
 * is not silently replaced).  An empty ring may be re-initialised (new
 * size, a ring of format 1, a new identity of the data directory bound to
 * it: ring_follow_identity): its state word says REINIT before anything
 * else changes, so a kill at any store leaves a ring the next start
 * initialises again (I6); it keeps its ring_id.  A ring that holds WAL
 * never is.
 *
 * IDENTIFICATION
 *		ring_file.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <limits.h>
#include <libpmem.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "pmwal.h"

PmwalRing  *pmwal_ring = NULL;
static PmwalRing ring_storage;

static const char *ring_hint = "See docs/failures.md in pmwal's documentation; \"pmwal_ctl inspect\" shows what the ring holds.";

const char *
pmwal_mode_name(PmwalMode mode)
{
	switch (mode)
	{
		case PMWAL_MODE_PMEM:
			return "pmem";
		case PMWAL_MODE_EMULATED:
			return "emulated";
		case PMWAL_MODE_MSYNC:
			return "msync";
	}
	return "unknown";
}

/*
 * Make [addr, addr + len) of the mapping durable.  Returns false only in
 * msync mode, when msync() failed; errno is set.
 */
bool
ring_persist(const void *addr, size_t len)
{
	if (pmwal_ring->mode == PMWAL_MODE_MSYNC)
		return pmem_msync(addr, len) == 0;
	if (PMWAL_MUTANT == MUTANT_NO_DRAIN)
	{
		pmem_flush(addr, len);
		return true;
	}
	pmem_persist(addr, len);
	return true;
}

/*
 * An emulated ring lives in a tmpfs file, mapped with 4 kB pages, and no
 * process inherits another's page table entries for it (fork() does not
 * copy them for a shared mapping): every process faults on each ring page
 * it writes the first time, one write fault per 4 kB.  With 16 clients
 * that is every backend on nearly every page of the ring -- half a fault
 * per transaction in a 10 s run, under WALWriteLock.  A read fault maps
 * the 64 kB around it at once (the kernel's fault-around), writable for a
 * tmpfs mapping; so before a process first writes a 64 kB block of the
 * ring, it populates the block readable (MADV_POPULATE_READ: no load of
 * the ring's bytes, errors ignored -- the write then faults as before).
 * Only emulated: on persistent memory (DAX, MAP_SYNC) and in msync mode a
 * read mapping would still take a write fault, and DAX maps without
 * fault-around.  Nothing is stored; what the ring holds, and when, is
 * unchanged.
 */
#define POPULATE_BLOCK		((uint64) 65536)

static void
ring_populate(uint64 off, size_t n)
{
	static uint64 *populated;	/* one bit per block; this process's */
	static int	populated_pid;
	static char *populated_data;
	uint64		cap = pmwal_ring->capacity;
	uint64		b;

#ifdef MADV_POPULATE_READ
	if (populated_pid != MyProcPid || populated_data != pmwal_ring->data)
	{
		/* malloc, not palloc: XLogWrite runs in a critical section */
		free(populated);
		populated = calloc((cap + POPULATE_BLOCK - 1) / POPULATE_BLOCK / 64 + 1,
						   sizeof(uint64));
		populated_pid = MyProcPid;
		populated_data = pmwal_ring->data;
	}
	if (populated == NULL)
		return;
	for (b = off / POPULATE_BLOCK; b * POPULATE_BLOCK < off + n; b++)
	{
		if (populated[b / 64] & (UINT64CONST(1) << (b % 64)))
			continue;
		populated[b / 64] |= UINT64CONST(1) << (b % 64);
		(void) madvise(pmwal_ring->data + b * POPULATE_BLOCK,
					   Min(POPULATE_BLOCK, cap - b * POPULATE_BLOCK),
					   MADV_POPULATE_READ);
	}
#endif
}

/*
 * Copy WAL [start, start + len) into the ring, at its ring offsets, without
 * waiting for persistence; ring_drain() makes it durable.  On pmem, large
 * copies use non-temporal stores, so draining is one fence.
 */
void
ring_copy_in(XLogRecPtr start, const char *src, size_t len)
{
	uint64		cap = pmwal_ring->capacity;

	while (len > 0)
	{
		uint64		off = RING_OFFSET(cap, start);
		size_t		n = Min(len, cap - off);

		if (pmwal_ring->mode == PMWAL_MODE_EMULATED)
			ring_populate(off, n);
		if (pmwal_ring->mode == PMWAL_MODE_MSYNC)
			memcpy(pmwal_ring->data + off, src, n);
		else
			pmem_memcpy_nodrain(pmwal_ring->data + off, src, n);
		src += n;
		start += n;
		len -= n;
	}
}

/*
 * Write the ring's copy of WAL [start, start + len) to "fd" at "offset":
 * the bytes the ring holds, not the caller's buffer again, which
 * PostgreSQL's inserters may have added to since (past the flush request,
 * in the partial last page).  So pg_wal gets exactly what the ring holds
 * (I3).  Returns what pwrite() returns.
 */
ssize_t
ring_write_out(int fd, XLogRecPtr start, size_t len, off_t offset)
{
	uint64		cap = pmwal_ring->capacity;
	uint64		off = RING_OFFSET(cap, start);
	struct iovec iov[2];

	if (off + len <= cap)
		return pwrite(fd, pmwal_ring->data + off, len, offset);
	iov[0].iov_base = pmwal_ring->data + off;
	iov[0].iov_len = cap - off;
	iov[1].iov_base = pmwal_ring->data;
	iov[1].iov_len = len - (cap - off);
	return pwritev(fd, iov, 2, offset);
}

/* ---------------------------------------------------------------------
 * Reading a mapping that may not be readable
 *
 * A page of the ring's mapping that cannot be read -- the ring file
 * truncated under the running server, or on persistent memory a poisoned
 * line -- is a SIGBUS at the first access.  A backend or the flusher that
 * meets one dies of it, and the postmaster crash-restarts; but the
 * postmaster itself reads the ring at every start and crash-restart, to
 * check it and restore it, and a SIGBUS there would end the server without
 * a word.  Those reads go through ring_read_guarded(), which turns the
 * SIGBUS into a return value, so that the start ends in a FATAL saying what
 * could not be read.  The handler is installed only around each copy: a
 * SIGBUS anywhere else keeps its default action.
 * --------------------------------------------------------------------- */

static sigjmp_buf *volatile guard_jump = NULL;
static void *volatile guard_fault = NULL;

static void
guard_sigbus(int signo, siginfo_t *info, void *context)
{
	struct sigaction dfl;

	if (guard_jump != NULL)
	{
		guard_fault = info->si_addr;
		siglongjmp(*guard_jump, 1);
	}
	/* not a guarded read: what a SIGBUS does by default */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(signo, &dfl, NULL);
	raise(signo);
}

/*
 * Copy "len" bytes of the ring's mapping at "src" into "dst".  Returns
 * false if the mapping could not be read, with *fault_offset set to the
 * file offset of the byte whose read failed.
 */
bool
ring_read_guarded(void *dst, const void *src, size_t len, uint64 *fault_offset)
{
	struct sigaction sa;
	struct sigaction prev;
	sigset_t	bus;
	sigset_t	prev_mask;
	sigjmp_buf	jump;
	volatile bool ok = true;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &prev) != 0)
		elog(FATAL, "could not install a SIGBUS handler: %m");
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	sigprocmask(SIG_UNBLOCK, &bus, &prev_mask);
	if (sigsetjmp(jump, 1) == 0)
	{
		guard_jump = &jump;
		pg_compiler_barrier();
		memcpy(dst, src, len);
		pg_compiler_barrier();
	}
	else
	{
		ok = false;
		*fault_offset = (uint64) ((char *) guard_fault - (char *) pmwal_ring->hdr);
	}
	guard_jump = NULL;
	sigprocmask(SIG_SETMASK, &prev_mask, NULL);
	sigaction(SIGBUS, &prev, NULL);
	return ok;
}

/* Why the ring's mapping could not be read, as sentences for an errdetail. */
char *
ring_unreadable_reason(void)
{
	struct stat st;

	if (fstat(pmwal_ring->fd, &st) != 0)
		return psprintf("The ring file could not be examined: %m.");
	if (S_ISREG(st.st_mode) && (uint64) st.st_size < pmwal_ring->mapped_len)
		return psprintf("The file is now %lld bytes, shorter than the %zu bytes mapped when the server attached the ring: it was truncated while the server ran.",
						(long long) st.st_size, pmwal_ring->mapped_len);
	return psprintf("The ring has the size it had when the server attached it (%zu bytes): its memory itself could not be read (on persistent memory, a poisoned range).",
					pmwal_ring->mapped_len);
}

/* What to do about a ring that cannot be read, for an errhint. */
char *
ring_unreadable_hint(void)
{
	return psprintf("The server does not start without the WAL the ring holds.  \"pmwal_ctl inspect\" shows the ring; if the unreadable part can be repaired (on persistent memory, by clearing the poisoned range), start again; \"pmwal_ctl dump\" saves the ring's WAL once it can be read.  If that WAL is lost for good, move the ring file aside and run \"pmwal_ctl unbind --force -D %s\": the server then starts without it, and the cluster must be treated as damaged.",
					DataDir);
}

/*
 * Can the ring's header be read through the mapping?  At a crash-restart
 * the mapping is the one the first start made, and the file may have been
 * truncated since.  FATAL, naming the ring and the bytes, if not: what the
 * ring holds cannot be known, so the start cannot go on.
 */
void
ring_require_readable_header(void)
{
	PGAlignedBlock page;
	uint64		fault;

	StaticAssertStmt(sizeof(page) >= RING_HEADER_SIZE, "header page too small");
	if (ring_read_guarded(page.data, pmwal_ring->hdr, RING_HEADER_SIZE, &fault))
		return;
	ereport(FATAL,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("could not read the header of pmwal ring \"%s\"", pmwal_ring->path),
			 errdetail("Reading the ring's header (file bytes 0 to %d) failed at byte %llu (SIGBUS).  %s  Which WAL the ring holds cannot be known.",
					   RING_HEADER_SIZE - 1, (unsigned long long) fault,
					   ring_unreadable_reason()),
			 errhint("%s", ring_unreadable_hint())));
}

/*
 * Make the ring_copy_in() copies of WAL [start, end) durable.  Returns
 * false only in msync mode, when msync() failed.
 */
bool
ring_drain(XLogRecPtr start, XLogRecPtr end)
{
	uint64		cap = pmwal_ring->capacity;
	uint64		off = RING_OFFSET(cap, start);

	if (pmwal_ring->mode != PMWAL_MODE_MSYNC)
	{
		if (PMWAL_MUTANT != MUTANT_NO_DRAIN)
			pmem_drain();
		return true;
	}
	if (off + (end - start) <= cap)
		return pmem_msync(pmwal_ring->data + off, end - start) == 0;
	return pmem_msync(pmwal_ring->data + off, cap - off) == 0 &&
		pmem_msync(pmwal_ring->data, off + (end - start) - cap) == 0;
}

/* An aligned 8-byte store into a header word, persisted before returning. */
bool
ring_set_word(volatile uint64 *word, uint64 value)
{
	*word = value;
	return ring_persist((const void *) word, sizeof(uint64));
}

/* Like ring_set_word, where a failure cannot be handled but by stopping. */
void
ring_set_word_or_die(volatile uint64 *word, uint64 value)
{
	PMWAL_PAUSE_POINT("header_store");
	if (!ring_set_word(word, value))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
}

/*
 * Record in the empty ring which data directory binds it, at which
 * generation (for messages and pmwal_ctl; binding.c decides with the
 * generation word and the data directory's binding file).
 */
void
ring_write_owner(uint64 generation)
{
	RingOwner	owner;
	char		datadir[PATH_MAX];	/* realpath() needs PATH_MAX */

	Assert(!ring_holds_wal(pmwal_ring->hdr));
	memset(&owner, 0, sizeof(owner));
	owner.generation = generation;
	owner.bound_at = (int64) time(NULL);
	strlcpy(owner.datadir, realpath(DataDir, datadir) ? datadir : DataDir,
			sizeof(owner.datadir));
	owner.crc = ring_owner_crc(&owner);
	PMWAL_PAUSE_POINT("header_store");
	memcpy((void *) &pmwal_ring->hdr->owner, &owner, sizeof(owner));
	if (!ring_persist(&pmwal_ring->hdr->owner, sizeof(owner)))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
}

/* A fresh ring_id: random, so that no two rings share one. */
static void
new_ring_id(uint8 *ring_id)
{
	if (!pg_strong_random(ring_id, RING_ID_LEN))
		ereport(FATAL,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random ring identifier")));
}

/*
 * Write a fresh static header and leave the ring empty, keeping its
 * ring_id.  The state word says REINIT first, so a crash at any later
 * store is recognised as an interrupted initialisation of an empty ring
 * (ring_check_header).
 */
static void
ring_write_static(uint64 sysid, uint32 segment_size, uint64 capacity, const uint8 *ring_id)
{
	RingHeader *hdr = pmwal_ring->hdr;
	RingStatic	st;

	ring_fill_static(&st, sysid, segment_size, capacity, ring_id);
	if (hdr->state.v != RING_STATE_REINIT)
		ring_set_word_or_die(&hdr->state.v, RING_STATE_REINIT);
	PMWAL_PAUSE_POINT("header_store");
	memcpy((void *) &hdr->st.s, &st, sizeof(st));
	if (!ring_persist(&hdr->st.s, sizeof(st)))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
	ring_set_word_or_die(&hdr->tail.v, 0);
	ring_set_word_or_die(&hdr->head.v, 0);
	ring_set_word_or_die(&hdr->timeline.v, 0);
	ring_set_word_or_die(&hdr->state.v, RING_STATE_EMPTY);
	pmwal_ring->capacity = capacity;
}

/* Give a regular file the size "len", allocating its blocks. */
static void
ring_file_resize(int fd, const char *path, off_t len)
{
	int			rc;

	if (ftruncate(fd, len) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not resize pmwal ring \"%s\": %m", path)));
	rc = posix_fallocate(fd, 0, len);
	if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
	{
		errno = rc;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not allocate %lld bytes for pmwal ring \"%s\": %m",
						(long long) len, path)));
	}
	if (fsync(fd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not fsync pmwal ring \"%s\": %m", path)));
}

/*
 * Create the missing ring "name" in directory "dirfd", complete and empty,
 * and atomically: it is built in an unnamed file and linked into place
 * only when its header is written and synced.  A kill before the link
 * leaves nothing; someone else's file linked meanwhile is left alone and
 * checked like any existing file.
 */
static void
ring_create(int dirfd, const char *name, const char *path,
			ControlFileData *control, uint64 capacity)
{
	PGAlignedBlock page;
	RingHeader *hdr = (RingHeader *) page.data;
	uint8		ring_id[RING_ID_LEN];
	char		procpath[64];
	int			fd;

	fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, S_IRUSR | S_IWUSR);
	if (fd < 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not create pmwal ring \"%s\": %m", path),
				 errdetail("pmwal builds a new ring in an unnamed file (O_TMPFILE) in the ring's directory."),
				 errhint("Put the ring on a file system that supports O_TMPFILE (ext4, xfs, tmpfs).")));
	ring_file_resize(fd, path, RING_HEADER_SIZE + capacity);

	StaticAssertStmt(sizeof(page) >= RING_HEADER_SIZE, "header page too small");
	memset(page.data, 0, RING_HEADER_SIZE);
	new_ring_id(ring_id);
	ring_fill_static(&hdr->st.s, control->system_identifier,
					 control->xlog_seg_size, capacity, ring_id);
	hdr->state.v = RING_STATE_EMPTY;
	if (pg_pwrite(fd, page.data, RING_HEADER_SIZE, 0) != RING_HEADER_SIZE ||
		fsync(fd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not write pmwal ring \"%s\": %m", path)));
	PMWAL_PAUSE_POINT("create_before_link");

	snprintf(procpath, sizeof(procpath), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, procpath, dirfd, name, AT_SYMLINK_FOLLOW) != 0)
	{
		if (errno != EEXIST)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not create pmwal ring \"%s\": %m", path)));
		close(fd);
		return;					/* someone created it meanwhile; check it */
	}
	if (fsync(dirfd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not fsync the directory of pmwal ring \"%s\": %m", path)));
	close(fd);
	ereport(LOG,
			(errmsg("pmwal created ring file \"%s\"", path)));
}

/* Size of a devdax device, from sysfs (lseek and st_size give 0 for one). */
static uint64
devdax_size(const char *path, const struct stat *st)
{
	char		sysfs[64];
	unsigned long long size = 0;
	FILE	   *f;

	snprintf(sysfs, sizeof(sysfs), "/sys/dev/char/%u:%u/size",
			 major(st->st_rdev), minor(st->st_rdev));
	f = fopen(sysfs, "r");
	if (f == NULL || fscanf(f, "%llu", &size) != 1)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not determine the size of devdax device \"%s\" from \"%s\"", path, sysfs)));
	fclose(f);
	return size;
}

/*
 * The platform's persistence domain of the NVDIMM region holding the ring,
 * as the kernel exposes it (libnvdimm's region attribute
 * "persistence_domain": "memory_controller" with ADR, "cpu_cache" with
 * eADR; the region hides it when the platform claims neither: then an
 * empty string), into buf; false when the
 * ring is not on an NVDIMM region (tmpfs, an ordinary disk) or sysfs does
 * not say.  The ring's device (a pmem block device under a DAX file system,
 * or a devdax character device) sits below its region in sysfs.
 */
static bool
persistence_domain(const struct stat *st, char *buf, size_t len)
{
	char		link[64];
	char		dir[PATH_MAX];	/* realpath() needs PATH_MAX */
	bool		dev = S_ISCHR(st->st_mode);

	snprintf(link, sizeof(link), "/sys/dev/%s/%u:%u", dev ? "char" : "block",
			 major(dev ? st->st_rdev : st->st_dev), minor(dev ? st->st_rdev : st->st_dev));
	if (realpath(link, dir) == NULL)
		return false;
	while (strncmp(dir, "/sys/devices/", 13) == 0)
	{
		char		attr[PATH_MAX + 32];
		FILE	   *f;
		char	   *slash;

		snprintf(attr, sizeof(attr), "%s/persistence_domain", dir);
		if ((f = fopen(attr, "r")) != NULL)
		{
			if (fgets(buf, len, f) == NULL)
				buf[0] = '\0';	/* empty: the platform claims nothing */
			fclose(f);
			buf[strcspn(buf, "\n")] = '\0';
			return true;
		}
		if ((slash = strrchr(dir, '/')) == NULL)
			break;
		/* a region (regionN) hides the attribute when it claims nothing */
		if (strncmp(slash + 1, "region", 6) == 0 && isdigit((unsigned char) slash[7]))
		{
			buf[0] = '\0';
			return true;
		}
		*slash = '\0';
	}
	return false;
}

/*
 * Map the ring through its locked descriptor.  A file on a DAX file system
 * maps with MAP_SYNC (stores reach persistent memory without msync), a
 * devdax device always does; anything else is persisted with msync(), or,
 * with PMEM_IS_PMEM_FORCE=1 (libpmem's switch for trying it out), treated
 * as persistent memory: emulated.
 */
static void
ring_map(int fd, const char *path, const struct stat *st)
{
	size_t		len;
	void	   *addr;
	const char *force = getenv("PMEM_IS_PMEM_FORCE");
	bool		dax;

	len = S_ISCHR(st->st_mode) ? devdax_size(path, st) : (size_t) st->st_size;
	if (len < RING_HEADER_SIZE)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" has an impossible size", path),
				 errdetail("The file is %zu bytes, smaller than the %d-byte ring header.",
						   len, RING_HEADER_SIZE),
				 errhint("%s", ring_hint)));
	addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
	dax = addr != MAP_FAILED;
	if (!dax)
		addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (addr == MAP_FAILED)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not map pmwal ring \"%s\": %m", path)));

	pmwal_ring->hdr = (RingHeader *) addr;
	pmwal_ring->data = (char *) addr + RING_HEADER_SIZE;
	pmwal_ring->mapped_len = len;
	if (dax || S_ISCHR(st->st_mode))
		pmwal_ring->mode = PMWAL_MODE_PMEM;
	else if (force != NULL && strcmp(force, "1") == 0)
		pmwal_ring->mode = PMWAL_MODE_EMULATED;
	else
		pmwal_ring->mode = PMWAL_MODE_MSYNC;
}

static void
ring_unmap(void)
{
	munmap(pmwal_ring->hdr, pmwal_ring->mapped_len);
	pmwal_ring->hdr = NULL;
	pmwal_ring->data = NULL;
}

/* The ring is a copy of the WAL: only the server's user may touch it. */
static void
ring_check_ownership(const char *path, const struct stat *st)
{
	if (S_ISDIR(st->st_mode))
		ereport(FATAL,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("pmwal.path \"%s\" is a directory", path),
				 errhint("Set pmwal.path to a file in that directory, for example \"%s/pmwal.ring\".", path)));
	if (!S_ISREG(st->st_mode) && !S_ISCHR(st->st_mode))
		ereport(FATAL,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("pmwal.path \"%s\" is neither a regular file nor a devdax device", path)));
	if (st->st_uid != geteuid())
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("pmwal ring \"%s\" is owned by another user", path),
				 errdetail("The file is owned by user ID %u; the server runs as user ID %u.",
						   (unsigned) st->st_uid, (unsigned) geteuid()),
				 errhint("The ring holds a copy of the WAL; give it to the server's user (chown) or point pmwal.path elsewhere.")));
	if ((st->st_mode & (S_IRWXG | S_IRWXO)) != 0)
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("pmwal ring \"%s\" has group or other access", path),
				 errdetail("Its permissions are %04o; the ring holds a copy of the WAL and must be accessible by the server's user only.",
						   (unsigned) (st->st_mode & 07777)),
				 errhint("Run chmod 0600 on the file.")));
}

/*
 * Open the ring's directory; others must not be able to replace the ring
 * in it, unless the directory is sticky (the ring itself must then be the
 * server's, which ring_check_ownership checks).
 */
static int
ring_open_directory(const char *path, char **name)
{
	char	   *dir = pstrdup(path);
	struct stat st;
	int			dirfd;

	get_parent_directory(dir);
	*name = pstrdup(last_dir_separator(path) + 1);
	dirfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0 || fstat(dirfd, &st) != 0)
		ereport(FATAL,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("directory of pmwal ring \"%s\" does not exist", path),
				 errdetail("pmwal creates the ring file on first start, but \"%s\" is not an existing directory.", dir),
				 errhint("Create the directory on a DAX file system (or use /dev/shm to try pmwal), or correct pmwal.path.")));
	if (st.st_uid != 0 && st.st_uid != geteuid() &&
		(st.st_mode & (S_IWGRP | S_IWOTH)) == 0)
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("directory of pmwal ring \"%s\" is owned by another user", path),
				 errdetail("\"%s\" is owned by user ID %u: its owner may remove or replace the ring.",
						   dir, (unsigned) st.st_uid),
				 errhint("Put the ring in a directory owned by the server's user or by root.")));
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) != 0 &&
		st.st_uid != 0 && st.st_uid != geteuid())
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("directory of pmwal ring \"%s\" is writable by other users and owned by another user", path),
				 errdetail("\"%s\" is sticky with permissions %04o, but owned by user ID %u: its owner may remove or replace the ring of any user.",
						   dir, (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid),
				 errhint("Put the ring in a directory owned by the server's user or by root.")));
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
		ereport(FATAL,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("directory of pmwal ring \"%s\" is writable by other users", path),
				 errdetail("\"%s\" has permissions %04o and is not sticky: another user could replace the ring with a file of theirs.",
						   dir, (unsigned) (st.st_mode & 07777)),
				 errhint("Put the ring in a directory only the server's user can write to (chmod go-w), or in a sticky one such as /dev/shm.")));
	pfree(dir);
	return dirfd;
}

/*
 * Open the ring itself, never through a symbolic link, and check what it
 * is before opening it for writing: a file of another user gets its own
 * message rather than "permission denied".  Returns -1 if it is missing.
 */
static int
ring_open(int dirfd, const char *name, const char *path, struct stat *st)
{
	char		procpath[64];
	struct stat now;
	int			pfd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	int			fd;

	if (pfd < 0)
	{
		if (errno == ENOENT)
			return -1;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not open pmwal ring \"%s\": %m", path)));
	}
	if (fstat(pfd, st) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not stat pmwal ring \"%s\": %m", path)));
	if (S_ISLNK(st->st_mode))
		ereport(FATAL,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("pmwal.path \"%s\" is a symbolic link", path),
				 errdetail("pmwal does not follow a symbolic link to its ring: whoever can change the link could make the server overwrite another file."),
				 errhint("Set pmwal.path to the ring file itself.")));
	ring_check_ownership(path, st);

	/* reopen exactly that file for writing */
	snprintf(procpath, sizeof(procpath), "/proc/self/fd/%d", pfd);
	fd = open(procpath, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &now) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not open pmwal ring \"%s\": %m", path)));
	close(pfd);
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("pmwal ring \"%s\" was replaced while the server opened it", path)));
	*st = now;
	return fd;
}

/*
 * Turn a verdict of ring_check_header() that makes the ring unusable into a
 * refusal to start.
 */
static void
ring_refuse(RingCheck verdict, const char *path, const char *detail)
{
	const char *what;

	switch (verdict)
	{
		case RING_FOREIGN:
		case RING_UNINITIALISED:
			ereport(FATAL,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("file \"%s\" is not a pmwal ring", path),
					 detail[0] ? errdetail_internal("%s", detail)
					 : errdetail("Its header is all zeros."),
					 errhint("pmwal only uses a ring it created itself and does not overwrite another file; correct pmwal.path, remove the file, or initialise a device with \"pmwal_ctl init\".")));
			break;
		case RING_OTHER_CLUSTER:
			ereport(FATAL,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("pmwal ring \"%s\" belongs to another database cluster", path),
					 errdetail_internal("%s", detail),
					 errhint("Give this cluster its own ring in pmwal.path.  If the other cluster no longer exists, check with \"pmwal_ctl inspect\" that the ring holds nothing it needs, then remove the file.")));
			break;
		case RING_BAD_CRC:
			what = "has a damaged header";
			break;
		case RING_BAD_VERSION:
			what = "has an unsupported format";
			break;
		case RING_BAD_GEOMETRY:
			what = "has an impossible size";
			break;
		case RING_OTHER_SEGMENT_SIZE:
			what = "was written with another WAL segment size";
			break;
		case RING_OTHER_BLOCK_SIZE:
			what = "was written with another WAL block size";
			break;
		case RING_BAD_RANGE:
			what = "has inconsistent positions";
			break;
		case RING_OLD_VERSION_WITH_WAL:
			ereport(FATAL,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pmwal ring \"%s\" was written by an older pmwal and holds WAL", path),
					 errdetail_internal("%s", detail),
					 errhint("Start the server once with the pmwal that wrote the ring, so that it restores the WAL, and stop it cleanly; then upgrade.  \"pmwal_ctl dump\" of that version saves the WAL.")));
			break;
		default:
			elog(FATAL, "unexpected pmwal ring verdict %d", (int) verdict);
			return;
	}
	ereport(FATAL,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("pmwal ring \"%s\" %s", path, what),
			 errdetail_internal("%s", detail),
			 errhint("%s", ring_hint)));
}

/*
 * (Re-)initialise the empty ring with "capacity" bytes: the state word says
 * REINIT before the file changes size, so a kill anywhere in between leaves
 * a ring the next start initialises again.
 */
static void
ring_reinitialise(int fd, const char *path, const struct stat *st,
				  ControlFileData *control, uint64 capacity)
{
	RingHeader *hdr = pmwal_ring->hdr;
	uint8		ring_id[RING_ID_LEN];

	if (hdr->state.v != RING_STATE_REINIT)
		ring_set_word_or_die(&hdr->state.v, RING_STATE_REINIT);
	if (S_ISREG(st->st_mode) &&
		pmwal_ring->mapped_len != RING_HEADER_SIZE + capacity)
	{
		struct stat now;

		PMWAL_PAUSE_POINT("header_resize");
		ring_unmap();
		ring_file_resize(fd, path, RING_HEADER_SIZE + capacity);
		if (fstat(fd, &now) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not stat pmwal ring \"%s\": %m", path)));
		ring_map(fd, path, &now);
		hdr = pmwal_ring->hdr;
	}
	if (pmwal_ring->mapped_len < RING_HEADER_SIZE + capacity)
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pmwal.size is larger than the device \"%s\"", path),
				 errdetail("The device holds %llu bytes; the ring needs %llu.",
						   (unsigned long long) pmwal_ring->mapped_len,
						   (unsigned long long) (RING_HEADER_SIZE + capacity))));
	/* keep the ring's identity; a ring of format 1, or none, gets one */
	if (hdr->st.s.format_version == RING_FORMAT_VERSION &&
		memcmp(hdr->st.s.magic, RING_MAGIC, RING_MAGIC_LEN) == 0 &&
		!ring_all_zero((const char *) hdr->st.s.ring_id, RING_ID_LEN))
		memcpy(ring_id, hdr->st.s.ring_id, RING_ID_LEN);
	else
		new_ring_id(ring_id);
	ring_write_static(control->system_identifier, control->xlog_seg_size, capacity, ring_id);
}

/*
 * The ring's header names another system identifier or WAL segment size
 * than pg_control ("verdict", "detail": what ring_check_header found
 * first).  An empty ring that this data directory's binding names follows
 * the new identity: it is re-initialised with it, keeping its ring_id
 * (binding.c, pmwal_binding_may_follow, says when).  Any other is refused.
 */
static void
ring_follow_identity(int fd, const char *path, const struct stat *st,
					 ControlFileData *control, uint64 capacity,
					 RingCheck verdict, const char *detail)
{
	RingHeader *hdr = pmwal_ring->hdr;
	RingExpect	any = {0, 0, XLOG_BLCKSZ};
	char		rest[256];
	RingCheck	whole;
	char	   *why;
	StringInfoData changed;

	/* the rest of the header must be sound, whatever the identity */
	whole = ring_check_header(hdr, pmwal_ring->mapped_len, &any, rest, sizeof(rest));
	if (whole != RING_OK)
		ring_refuse(whole, path, rest);
	why = pmwal_binding_may_follow(control);
	if (why != NULL)
		ring_refuse(verdict, path, psprintf("%s  %s", detail, why));

	initStringInfo(&changed);
	if (hdr->st.s.system_identifier != control->system_identifier)
		appendStringInfo(&changed, "The system identifier changed from %llu to %llu.  ",
						 (unsigned long long) hdr->st.s.system_identifier,
						 (unsigned long long) control->system_identifier);
	if (hdr->st.s.wal_segment_size != control->xlog_seg_size)
		appendStringInfo(&changed, "The WAL segment size changed from %u to %u bytes.  ",
						 hdr->st.s.wal_segment_size, control->xlog_seg_size);
	ereport(LOG,
			(errmsg("pmwal ring \"%s\" follows the new identity of this data directory", path),
			 errdetail("%sThe ring holds no WAL, and this data directory's binding names it at its generation (%llu).",
					   changed.data, (unsigned long long) hdr->generation.v)));
	ring_reinitialise(fd, path, st, control, capacity);
}

/*
 * After the restore (the ring holds no WAL now, whatever it held is in
 * pg_wal): if the ring file was truncated while the server ran, give it
 * back the size of the mapping, so that the next write into the ring does
 * not fault.  What comes back reads as zeros; the ring is empty, so it
 * claims none of it.  Called at every start; a devdax device cannot be
 * truncated.
 */
void
ring_restore_size(void)
{
	struct stat st;

	Assert(!ring_holds_wal(pmwal_ring->hdr));
	if (fstat(pmwal_ring->fd, &st) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not stat pmwal ring \"%s\": %m", pmwal_ring->path)));
	if (!S_ISREG(st.st_mode) || (uint64) st.st_size >= pmwal_ring->mapped_len)
		return;
	ereport(WARNING,
			(errmsg("pmwal ring \"%s\" was truncated while the server ran", pmwal_ring->path),
			 errdetail("The file is %lld bytes; the server mapped %zu.  The ring holds no WAL now (any it held was restored into pg_wal), so pmwal gives the file its size back.",
					   (long long) st.st_size, pmwal_ring->mapped_len),
			 errhint("Only the server may change its ring file while it runs.")));
	ring_file_resize(pmwal_ring->fd, pmwal_ring->path, (off_t) pmwal_ring->mapped_len);
}

/*
 * Attach the ring named by pmwal.path, creating or re-initialising it where
 * that loses nothing.  Called once per server life, in the postmaster.
 */
void
pmwal_ring_attach(ControlFileData *control)
{
	const char *path = pmwal_path;
	uint64		capacity = (uint64) pmwal_size_mb * 1024 * 1024;
	struct stat st;
	RingExpect	expect;
	RingCheck	verdict;
	char		detail[256];
	char		domain[64];
	char	   *name;
	int			dirfd;
	int			fd;

	Assert(pmwal_ring == NULL);
	Assert(path != NULL && path[0] != '\0');

	dirfd = ring_open_directory(path, &name);
	fd = ring_open(dirfd, name, path, &st);
	if (fd < 0)
	{
		pmwal_binding_allows_new_ring(control, path);
		ring_create(dirfd, name, path, control, capacity);
		fd = ring_open(dirfd, name, path, &st);
		if (fd < 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open pmwal ring \"%s\": %m", path)));
	}
	close(dirfd);

	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		if (errno == EWOULDBLOCK)
			ereport(FATAL,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("pmwal ring \"%s\" is in use by another server", path),
					 errdetail("Another process holds the ring's lock: a running server, or processes left over from a server whose postmaster was killed."),
					 errhint("Each server needs its own ring.  Stop the other server or give this one another pmwal.path.")));
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not lock pmwal ring \"%s\": %m", path)));
	}

	/* pmwal creates its rings complete: a shorter file is not one of them */
	if (S_ISREG(st.st_mode) && st.st_size < RING_HEADER_SIZE)
	{
		snprintf(detail, sizeof(detail), "The file is %lld bytes, smaller than the %d-byte ring header.",
				 (long long) st.st_size, RING_HEADER_SIZE);
		ring_refuse(RING_FOREIGN, path, detail);
	}

	pmwal_ring = &ring_storage;
	pmwal_ring->fd = fd;
	pmwal_ring->capacity = capacity;
	pmwal_ring->path = MemoryContextStrdup(TopMemoryContext, path);
	ring_map(fd, path, &st);
	ring_require_readable_header();

	if (pmwal_ring->mode == PMWAL_MODE_MSYNC && pmwal_require_pmem)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pmwal ring \"%s\" is not on persistent memory", path),
				 errdetail("The file cannot be mapped with DAX, so each update would need msync()."),
				 errhint("Put pmwal.path on a DAX file system or a devdax device; or set pmwal.require_pmem = off to persist with msync(), durable but slower; or, only to try pmwal, set PMEM_IS_PMEM_FORCE=1 in the server's environment.")));

	expect.system_identifier = control->system_identifier;
	expect.wal_segment_size = control->xlog_seg_size;
	expect.wal_block_size = XLOG_BLCKSZ;
	verdict = ring_check_header(pmwal_ring->hdr, pmwal_ring->mapped_len,
								&expect, detail, sizeof(detail));
	if (verdict == RING_INTERRUPTED_REINIT)
	{
		ereport(LOG,
				(errmsg("pmwal initialising ring \"%s\" with %d MB", path, pmwal_size_mb),
				 errdetail_internal("%s", detail)));
		ring_reinitialise(fd, path, &st, control, capacity);
	}
	else if (verdict == RING_OTHER_CLUSTER || verdict == RING_OTHER_SEGMENT_SIZE)
		ring_follow_identity(fd, path, &st, control, capacity, verdict, detail);
	else if (verdict == RING_BAD_GEOMETRY && ring_holds_wal(pmwal_ring->hdr))
		ring_refuse(verdict, path,
					psprintf("%s  The header says the ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN ".",
							 detail, LSN_FORMAT_ARGS(pmwal_ring->hdr->tail.v),
							 LSN_FORMAT_ARGS(pmwal_ring->hdr->head.v)));
	else if (verdict != RING_OK)
		ring_refuse(verdict, path, detail);
	else if (pmwal_ring->hdr->st.s.capacity != capacity)
	{
		uint64		old = pmwal_ring->hdr->st.s.capacity;

		if (ring_holds_wal(pmwal_ring->hdr))
			ereport(FATAL,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pmwal ring \"%s\" holds WAL and its size differs from pmwal.size", path),
					 errdetail("The ring holds %llu MB of data area; pmwal.size is %d MB.",
							   (unsigned long long) (old / (1024 * 1024)), pmwal_size_mb),
					 errhint("Set pmwal.size back to %llu MB and restart, so that the WAL it holds is restored; the ring can be resized once it is empty.",
							 (unsigned long long) (old / (1024 * 1024)))));
		ereport(LOG,
				(errmsg("pmwal re-initialising empty ring \"%s\" from %llu MB to %d MB",
						path, (unsigned long long) (old / (1024 * 1024)), pmwal_size_mb)));
		ring_reinitialise(fd, path, &st, control, capacity);
	}
	else
		pmwal_ring->capacity = pmwal_ring->hdr->st.s.capacity;

	if (pmwal_ring->mode == PMWAL_MODE_EMULATED)
		ereport(WARNING,
				(errmsg("pmwal ring \"%s\" is emulated persistent memory", path),
				 errdetail("PMEM_IS_PMEM_FORCE=1 is set: commits survive a crash of PostgreSQL, but not a crash of the operating system or a power loss.")));
	else if (pmwal_ring->mode == PMWAL_MODE_MSYNC)
		ereport(LOG,
				(errmsg("pmwal ring \"%s\" is not on persistent memory; it is persisted with msync(), durable but slower", path)));
	if (!enableFsync)
		ereport(WARNING,
				(errmsg("fsync is off, so PostgreSQL's own flushes and checkpoints are not durable"),
				 errdetail("pmwal makes commits durable through the ring and syncs pg_wal itself, but a power loss can leave data files and pg_control ahead of the WAL.")));
	if (pmwal_ring->mode == PMWAL_MODE_PMEM && persistence_domain(&st, domain, sizeof(domain)))
	{
		if (strcmp(domain, "memory_controller") == 0 || strcmp(domain, "cpu_cache") == 0)
			ereport(LOG,
					(errmsg("pmwal ring \"%s\" is on persistent memory whose platform persistence domain is \"%s\"",
							path, domain)));
		else
			ereport(WARNING,
					(errmsg("pmwal ring \"%s\" is on persistent memory whose platform claims no persistence domain",
							path),
					 errdetail("The NVDIMM region's persistence_domain in sysfs is %s: the platform does not promise that flushed stores survive a power loss (ADR: \"memory_controller\", eADR: \"cpu_cache\"), and commits acknowledged through the ring are only as durable as it makes them.",
							   domain[0] ? domain : "absent"),
					 errhint("Check the platform's ADR or eADR support (ndctl list -Rv); an emulated NVDIMM claims none.")));
	}
	ereport(LOG,
			(errmsg("pmwal attached ring \"%s\": %llu MB, mode %s, %s",
					path, (unsigned long long) (pmwal_ring->capacity / (1024 * 1024)),
					pmwal_mode_name(pmwal_ring->mode),
					ring_state_name(pmwal_ring->hdr->state.v))));
	pfree(name);
}

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
 * written: a ring pmwal refuses is left byte for byte as it was.  An empty
 * ring may be re-initialised (new size, new timeline); a ring that holds WAL
 * never is.
 *
 * IDENTIFICATION
 *		ring_file.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <libpmem.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"

#include "pmwal.h"

PmwalRing  *pmwal_ring = NULL;
static PmwalRing ring_storage;

static const char *ring_hint = "See \"Refusals at start-up\" in pmwal's README; \"pmwal_ctl inspect\" shows what the ring holds.";

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
	pmem_persist(addr, len);
	return true;
}

/*
 * Copy into the ring without waiting for persistence; ring_drain() makes a
 * range of such copies durable.  On pmem, large copies use non-temporal
 * stores, so draining is one fence.
 */
void
ring_write(char *dst, const char *src, size_t len)
{
	if (pmwal_ring->mode == PMWAL_MODE_MSYNC)
		memcpy(dst, src, len);
	else
		pmem_memcpy_nodrain(dst, src, len);
}

/*
 * Make the ring_write() copies of WAL [start, end) durable.  Returns false
 * only in msync mode, when msync() failed.
 */
bool
ring_drain(XLogRecPtr start, XLogRecPtr end)
{
	uint64		cap = pmwal_ring->capacity;
	uint64		off = RING_OFFSET(cap, start);

	if (pmwal_ring->mode != PMWAL_MODE_MSYNC)
	{
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
static void
ring_set_word_or_die(volatile uint64 *word, uint64 value)
{
	PMWAL_PAUSE_POINT("header_store");
	if (!ring_set_word(word, value))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_path)));
}

/*
 * Write a fresh static header and leave the ring empty.  The state word says
 * REINIT while the static part is rewritten, so a crash in between is
 * recognised as an interrupted rewrite of an empty ring (ring_check_header).
 */
void
ring_write_static(uint64 sysid, TimeLineID tli, uint64 capacity)
{
	RingHeader *hdr = pmwal_ring->hdr;
	RingStatic	st;

	ring_fill_static(&st, sysid, tli, wal_segment_size, capacity);
	ring_set_word_or_die(&hdr->state.v, RING_STATE_REINIT);
	PMWAL_PAUSE_POINT("header_store");
	memcpy((void *) &hdr->st.s, &st, sizeof(st));
	if (!ring_persist(&hdr->st.s, sizeof(st)))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_path)));
	ring_set_word_or_die(&hdr->tail.v, 0);
	ring_set_word_or_die(&hdr->head.v, 0);
	ring_set_word_or_die(&hdr->last_end.v, 0);
	ring_set_word_or_die(&hdr->state.v, RING_STATE_EMPTY);
	pmwal_ring->capacity = capacity;
}

/* Refuse a path whose directory is missing; create the file otherwise. */
static void
ring_create(const char *path)
{
	char	   *dir = pstrdup(path);
	struct stat st;
	int			fd;

	get_parent_directory(dir);
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		ereport(FATAL,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("directory of pmwal ring \"%s\" does not exist", path),
				 errdetail("pmwal creates the ring file on first start, but \"%s\" is not an existing directory.", dir),
				 errhint("Create the directory on a DAX file system (or use /dev/shm to try pmwal), or correct pmwal.path.")));

	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
	if (fd < 0)
	{
		if (errno == EEXIST)
			return;				/* someone created it meanwhile; check it */
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not create pmwal ring \"%s\": %m", path)));
	}
	close(fd);
	ereport(LOG,
			(errmsg("pmwal created ring file \"%s\"", path)));
	pfree(dir);
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

static void
ring_map(const char *path, struct stat *opened)
{
	size_t		len;
	int			is_pmem;
	void	   *addr;
	struct stat now;
	const char *force = getenv("PMEM_IS_PMEM_FORCE");

	addr = pmem_map_file(path, 0, 0, 0, &len, &is_pmem);
	if (addr == NULL)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not map pmwal ring \"%s\": %s", path, pmem_errormsg())));
	if (stat(path, &now) != 0 || now.st_dev != opened->st_dev ||
		now.st_ino != opened->st_ino || now.st_rdev != opened->st_rdev)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("pmwal ring \"%s\" was replaced while the server opened it", path)));

	pmwal_ring->hdr = (RingHeader *) addr;
	pmwal_ring->data = (char *) addr + RING_HEADER_SIZE;
	pmwal_ring->mapped_len = len;
	if (!is_pmem)
		pmwal_ring->mode = PMWAL_MODE_MSYNC;
	else if (force != NULL && strcmp(force, "1") == 0)
		pmwal_ring->mode = PMWAL_MODE_EMULATED;
	else
		pmwal_ring->mode = PMWAL_MODE_PMEM;
}

static void
ring_unmap(void)
{
	pmem_unmap(pmwal_ring->hdr, pmwal_ring->mapped_len);
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
			ereport(FATAL,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("file \"%s\" is not a pmwal ring", path),
					 errdetail_internal("%s", detail),
					 errhint("pmwal does not overwrite a file it did not create; correct pmwal.path or remove the file.")));
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
 * Attach the ring named by pmwal.path, creating or re-initialising it where
 * that loses nothing.  Called once per server life, in the postmaster.
 */
void
pmwal_ring_attach(void)
{
	const char *path = pmwal_path;
	uint64		capacity = (uint64) pmwal_size_mb * 1024 * 1024;
	struct stat st;
	RingExpect	expect;
	RingCheck	verdict;
	char		detail[256];
	ControlFileData *control;
	bool		crc_ok;
	int			fd;

	Assert(pmwal_ring == NULL);
	if (path == NULL || path[0] == '\0')
	{
		ereport(LOG,
				(errmsg("pmwal is inactive because pmwal.path is not set")));
		return;
	}
	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("calculated CRC checksum does not match value stored in file \"%s\"",
						XLOG_CONTROL_FILE)));

	if (stat(path, &st) != 0)
	{
		if (errno != ENOENT)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not stat pmwal ring \"%s\": %m", path)));
		ring_create(path);
		if (stat(path, &st) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not stat pmwal ring \"%s\": %m", path)));
	}
	ring_check_ownership(path, &st);

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not open pmwal ring \"%s\": %m", path)));
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
	if (fstat(fd, &st) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not stat pmwal ring \"%s\": %m", path)));
	ring_check_ownership(path, &st);

	pmwal_ring = &ring_storage;
	pmwal_ring->fd = fd;
	pmwal_ring->capacity = capacity;

	/* A file created just now (or by hand, empty) has no header yet. */
	if (S_ISREG(st.st_mode) && st.st_size == 0)
		ring_file_resize(fd, path, RING_HEADER_SIZE + capacity);
	else if (S_ISREG(st.st_mode) && st.st_size < RING_HEADER_SIZE)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" has an impossible size", path),
				 errdetail("The file is %lld bytes, smaller than the %d-byte ring header.",
						   (long long) st.st_size, RING_HEADER_SIZE),
				 errhint("%s", ring_hint)));
	ring_map(path, &st);

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
	if (verdict != RING_OK && verdict != RING_UNINITIALISED &&
		verdict != RING_INTERRUPTED_REINIT)
		ring_refuse(verdict, path, detail);

	if (verdict == RING_OK && pmwal_ring->hdr->st.s.capacity != capacity)
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
		verdict = RING_UNINITIALISED;
	}
	else if (verdict == RING_UNINITIALISED || verdict == RING_INTERRUPTED_REINIT)
		ereport(LOG,
				(errmsg("pmwal initialising ring \"%s\" with %d MB", path, pmwal_size_mb),
				 detail[0] ? errdetail_internal("%s", detail) : 0));
	else
		pmwal_ring->capacity = pmwal_ring->hdr->st.s.capacity;

	if (verdict != RING_OK)
	{
		if (S_ISREG(st.st_mode) &&
			pmwal_ring->mapped_len != RING_HEADER_SIZE + capacity)
		{
			ring_unmap();
			ring_file_resize(fd, path, RING_HEADER_SIZE + capacity);
			ring_map(path, &st);
		}
		if (pmwal_ring->mapped_len < RING_HEADER_SIZE + capacity)
			ereport(FATAL,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pmwal.size is larger than the device \"%s\"", path),
					 errdetail("The device holds %llu bytes; the ring needs %llu.",
							   (unsigned long long) pmwal_ring->mapped_len,
							   (unsigned long long) (RING_HEADER_SIZE + capacity))));
		ring_write_static(control->system_identifier,
						  control->checkPointCopy.ThisTimeLineID, capacity);
	}

	if (pmwal_ring->mode == PMWAL_MODE_EMULATED)
		ereport(WARNING,
				(errmsg("pmwal ring \"%s\" is emulated persistent memory", path),
				 errdetail("PMEM_IS_PMEM_FORCE=1 is set: commits survive a crash of PostgreSQL, but not a crash of the operating system or a power loss.")));
	else if (pmwal_ring->mode == PMWAL_MODE_MSYNC)
		ereport(LOG,
				(errmsg("pmwal ring \"%s\" is not on persistent memory; it is persisted with msync(), durable but slower", path)));
	if (!enableFsync)
		ereport(WARNING,
				(errmsg("fsync is off, so pmwal cannot make commits durable"),
				 errdetail("pmwal writes the WAL to disk with fsync in the background; with fsync off, a power loss can lose acknowledged commits.")));
	ereport(LOG,
			(errmsg("pmwal attached ring \"%s\": %llu MB, mode %s, %s",
					path, (unsigned long long) (pmwal_ring->capacity / (1024 * 1024)),
					pmwal_mode_name(pmwal_ring->mode),
					ring_state_name(pmwal_ring->hdr->state.v))));
	pfree(control);
}

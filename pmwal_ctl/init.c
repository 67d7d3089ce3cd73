/*-------------------------------------------------------------------------
 *
 * init.c
 *		pmwal_ctl init and reset: the commands that write a ring's header,
 *		making a path an empty ring, or emptying one.
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
 * "reset" empties the ring, only with --discard-wal, after printing what
 * it discards, in the order the server empties it: tail up to head, then
 * the state.
 *
 * IDENTIFICATION
 *		pmwal_ctl/init.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/logging.h"

#include "pmwal_ctl.h"

/* a file init created, removed if init fails before it is complete */
static const char *init_created = NULL;

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
				 ", with WAL " PMWAL_LSN " to " PMWAL_LSN " (" UINT64_FORMAT " bytes) of timeline " UINT64_FORMAT
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
int
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

int
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
		if (verdict == RING_BAD_RANGE)
			pg_log_error_hint("Its positions are inconsistent, and it may hold acknowledged WAL: save it with \"pmwal_ctl dump\" first (docs/failures.md); then, if it is not needed, remove the file or make it a new ring with \"pmwal_ctl init --force\".");
		else
			pg_log_error_hint("A start refuses this ring whatever its positions say; remove the file if it is not needed, or make it a new ring with \"pmwal_ctl init --force\".");
		exit(EXIT_ERROR);
	}
	if (ring_holds_wal(hdr))
	{
		printf("discarding WAL " PMWAL_LSN " to " PMWAL_LSN " (" UINT64_FORMAT " bytes) of timeline " UINT64_FORMAT "\n",
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

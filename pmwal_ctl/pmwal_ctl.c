/*-------------------------------------------------------------------------
 *
 * pmwal_ctl.c
 *		Offline tool for pmwal rings: inspect, verify, dump and reset.
 *
 * Works on a ring that no server is using (it takes the ring's lock, as
 * the server does); "inspect" also reads a ring in use.  "verify" applies
 * the checks of the server's restore: the header (identity against a data
 * directory given with -D), then every page header and record CRC from the
 * tail through the end of the last acknowledged commit and on to the head,
 * read by PostgreSQL's own XLogReader in pg_waldump over a dump of the ring.
 * "dump" writes the ring's WAL as segment files that pg_waldump reads.
 * "reset" empties the ring, only with --discard-wal, after printing what it
 * discards.
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
#include <unistd.h>

#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/logging.h"
#include "getopt_long.h"

#include "ring_format.h"

static const char *progname;

typedef struct Ring
{
	const char *path;
	int			fd;
	char	   *base;
	size_t		len;
	int			is_pmem;		/* only for reset, mapped with libpmem */
	bool		locked;			/* we hold the lock: no server uses it */
	RingHeader *hdr;
	char	   *data;
} Ring;

static void
usage(void)
{
	printf("%s inspects, verifies, dumps and resets pmwal rings of a stopped server.\n\n", progname);
	printf("Usage:\n");
	printf("  %s inspect [-D DATADIR] RING     show the header, the WAL range and whether a start would restore it\n", progname);
	printf("  %s verify  [-D DATADIR] RING     check the ring as the server's restore does (uses pg_waldump)\n", progname);
	printf("  %s dump --to DIR RING            write the ring's WAL as segment files readable by pg_waldump\n", progname);
	printf("  %s reset --discard-wal RING      empty the ring, discarding the WAL it holds\n", progname);
	printf("\nOptions:\n");
	printf("  -D, --pgdata=DATADIR   compare with this cluster (system identifier, checkpoint)\n");
	printf("      --to=DIR           directory to dump into (created if missing)\n");
	printf("      --discard-wal      confirm that reset may discard WAL\n");
	printf("  -?, --help             show this help, then exit\n");
	printf("\nExit status: 0 when the ring is usable (verify: verified), 1 otherwise.\n");
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

	if (writable)
	{
		ring->base = pmem_map_file(path, 0, 0, 0, &ring->len, &ring->is_pmem);
		if (ring->base == NULL)
			pg_fatal("could not map ring \"%s\": %s", path, pmem_errormsg());
	}
	else
	{
		off_t		size = S_ISREG(st.st_mode) ? st.st_size : lseek(ring->fd, 0, SEEK_END);

		if (size < RING_HEADER_SIZE)
			pg_fatal("ring \"%s\" is %lld bytes, smaller than the ring header", path, (long long) size);
		ring->len = size;
		ring->base = mmap(NULL, ring->len, PROT_READ, MAP_SHARED, ring->fd, 0);
		if (ring->base == MAP_FAILED)
			pg_fatal("could not map ring \"%s\": %m", path);
	}
	ring->hdr = (RingHeader *) ring->base;
	ring->data = ring->base + RING_HEADER_SIZE;
}

static void
require_lock(Ring *ring)
{
	if (!ring->locked)
		pg_fatal("ring \"%s\" is in use by a running server; stop the server first", ring->path);
}

/* Check the header; with a data directory, against that cluster too. */
static bool
check_header(Ring *ring, ControlFileData *control, bool quiet)
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
	if (verdict == RING_OK)
		return true;
	if (!quiet)
	{
		if (verdict == RING_UNINITIALISED)
			printf("header:             uninitialised (all zero); a server would initialise it\n");
		else
			printf("header:             NOT USABLE: %s\n", detail);
	}
	return verdict == RING_UNINITIALISED;
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
	bool		ok;

	printf("ring:               %s\n", ring->path);
	printf("lock:               %s\n", ring->locked ? "free (no server uses the ring)" :
		   "held (a server uses the ring; positions may change while you look)");
	ok = check_header(ring, control, false);
	if (!ok || hdr->st.s.magic[0] == '\0')
		return ok ? 0 : 1;
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
	else if (st->timeline != control->checkPointCopy.ThisTimeLineID)
		printf("restore at start:   REFUSED: the cluster is on timeline %u\n",
			   control->checkPointCopy.ThisTimeLineID);
	else
		printf("restore at start:   yes: %X/%X to %X/%X (checkpoint redo point %X/%X)\n",
			   LSN_FORMAT_ARGS(RING_RESTORE_FROM(hdr->tail.v, control->checkPointCopy.redo,
											 st->wal_segment_size)),
			   LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPointCopy.redo));
	return 0;
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
	char	   *seg = pg_malloc(segsize);
	int			nsegs = 0;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		pg_fatal("could not create directory \"%s\": %m", dir);
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
			ring_segment_header(seg, segstart, hdr);
		for (XLogRecPtr p = from; p < segend;)
		{
			uint64		off = RING_OFFSET(cap, p);
			Size		n = Min(segend - p, cap - off);

			memcpy(seg + (p - segstart), ring->data + off, n);
			p += n;
		}
		XLogFileName(name, hdr->st.s.timeline, segno, segsize);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY, 0600);
		if (fd < 0 || write(fd, seg, segsize) != (ssize_t) segsize || close(fd) != 0)
			pg_fatal("could not write \"%s\": %m", path);
		nsegs++;
		from = segend;
	}
	pg_free(seg);
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

	require_lock(ring);
	if (!check_header(ring, control, false))
		return 1;
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
	if (!check_header(ring, NULL, false))
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

	require_lock(ring);
	if (!check_header(ring, NULL, false))
		pg_fatal("refusing to reset: the header is not usable; remove the file instead if it is not needed");
	if (hdr->st.s.magic[0] == '\0')
	{
		/*
		 * All zero: a server initialises it.  Writing the state word would
		 * leave a header without the magic, which a server refuses as not a
		 * pmwal ring.
		 */
		printf("the ring holds no WAL; left as it is\n");
		return 0;
	}
	if (ring_holds_wal(hdr))
		printf("discarding WAL %X/%X to %X/%X (" UINT64_FORMAT " bytes, acknowledged commits up to %X/%X)\n",
			   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   hdr->head.v - hdr->tail.v, LSN_FORMAT_ARGS(hdr->last_end.v));
	else
		printf("the ring holds no WAL\n");
	hdr->tail.v = hdr->head.v;
	persist(ring, (const void *) &hdr->tail.v, sizeof(uint64));
	hdr->state.v = RING_STATE_EMPTY;
	persist(ring, (const void *) &hdr->state.v, sizeof(uint64));
	printf("ring \"%s\" is empty\n", ring->path);
	return 0;
}

int
main(int argc, char **argv)
{
	static struct option long_options[] = {
		{"pgdata", required_argument, NULL, 'D'},
		{"to", required_argument, NULL, 't'},
		{"discard-wal", no_argument, NULL, 'x'},
		{"help", no_argument, NULL, '?'},
		{NULL, 0, NULL, 0}
	};
	const char *command;
	const char *datadir = NULL;
	const char *to = NULL;
	bool		discard = false;
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

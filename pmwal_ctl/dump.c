/*-------------------------------------------------------------------------
 *
 * dump.c
 *		pmwal_ctl dump: the ring's WAL as segment files that pg_waldump
 *		reads.
 *
 * "dump" writes the ring's WAL as segment files of the ring's timeline; it
 * creates every file exclusively (never through a symbolic link, never over
 * an existing file), in a directory of the user's own that no one else may
 * write to: the WAL may hold anything the cluster holds, and whoever could
 * plant a file or a link there could make dump overwrite another file.
 * verify dumps into a scratch directory of its own the same way.
 *
 * A ring whose positions are inconsistent is dumped too, not refused: it
 * may hold the newest acknowledged commits, and a dump is the only way to
 * get them out (dump_salvage).
 *
 * IDENTIFICATION
 *		pmwal_ctl/dump.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/logging.h"

#include "pmwal_ctl.h"

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

/*
 * The first page of a segment whose WAL the ring holds only from a later
 * page on: pg_waldump (its XLogReader) reads and checks a segment's long
 * page header before any other page of it, so the dump gets one made from
 * the ring's header, of the timeline of the ring's first page.
 */
static void
synthetic_long_header(char *page, XLogRecPtr segstart, const Ring *ring, XLogRecPtr first,
					  TimeLineID tli)
{
	XLogLongPageHeader lh = (XLogLongPageHeader) page;
	XLogPageHeader fh = ring_page(ring, first);

	memset(page, 0, XLOG_BLCKSZ);
	lh->std.xlp_magic = XLOG_PAGE_MAGIC;
	lh->std.xlp_info = XLP_LONG_HEADER;
	lh->std.xlp_tli = fh->xlp_magic == XLOG_PAGE_MAGIC ? fh->xlp_tli : tli;
	lh->std.xlp_pageaddr = segstart;
	lh->xlp_sysid = ring->hdr->st.s.system_identifier;
	lh->xlp_seg_size = ring->hdr->st.s.wal_segment_size;
	lh->xlp_xlog_blcksz = ring->hdr->st.s.wal_block_size;
}

/*
 * Write the ring's WAL [from, to) -- whole pages: [tail, head), or the
 * pages that read as WAL of a ring whose positions are inconsistent -- as
 * segment files of timeline "tli" into "dir"; returns the number of
 * segments written.  Only for a ring whose static header checked: every
 * field used here was validated.
 */
int
dump_ring(Ring *ring, const char *dir, XLogRecPtr from, XLogRecPtr to, TimeLineID tli)
{
	RingHeader *hdr = ring->hdr;
	uint32		segsize = hdr->st.s.wal_segment_size;
	uint64		cap = hdr->st.s.capacity;
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
			synthetic_long_header(seg, segstart, ring, from, tli);
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

/* The command that reads [first, end) of a dump in "dir" with pg_waldump. */
static char *
waldump_command(const char *waldump, const char *dir, TimeLineID tli, XLogRecPtr first,
				XLogRecPtr end)
{
	return psprintf("%s --path=%s --timeline=%u --start=" PMWAL_LSN " --end=" PMWAL_LSN,
					waldump, dir, tli, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(end));
}

/*
 * dump of a ring whose static header checked but whose positions do not
 * (RING_BAD_RANGE).  A start refuses such a ring, yet it may hold the
 * cluster's newest acknowledged commits -- a short WAL write can leave a
 * head inside a page -- so "cannot be read" must not become "nothing to
 * dump": what still reads as the ring's WAL is dumped instead of [tail,
 * head), whole pages from the page of the tail on, each with a valid page
 * header for its address that continues the page before it
 * (salvage_pages), and nothing else.  Says on stderr that the positions
 * were inconsistent and what it dumped.  EXIT_OK if it dumped anything,
 * EXIT_UNUSABLE (having written nothing) if not even the tail's page reads
 * as WAL.
 */
static int
dump_salvage(Ring *ring, const char *dir)
{
	RingHeader *hdr = ring->hdr;
	char	   *problems = position_problems(hdr);
	char	   *head_is;
	PageRun		run;
	int			nsegs;

	if (!salvage_pages(ring, &run))
	{
		pg_log_error("the ring's positions are inconsistent, and not even the page of its tail, " PMWAL_LSN ", reads as this ring's WAL: %s",
					 LSN_FORMAT_ARGS(run.from), run.stop);
		pg_log_error_detail("The positions: %s.  Nothing was dumped.", problems);
		pg_log_error_hint("\"pmwal_ctl inspect\" shows the header; keep a copy of the ring file before resetting or unbinding it.");
		return EXIT_UNUSABLE;
	}
	if (hdr->head.v > run.to)
		head_is = psprintf("that is short of the head, " PMWAL_LSN, LSN_FORMAT_ARGS(hdr->head.v));
	else if (hdr->head.v > run.from)
		head_is = psprintf("which covers the head, " PMWAL_LSN, LSN_FORMAT_ARGS(hdr->head.v));
	else
		head_is = psprintf("past the head, " PMWAL_LSN, LSN_FORMAT_ARGS(hdr->head.v));
	pg_log_warning("the ring's positions are inconsistent: %s", problems);
	pg_log_warning_detail("A start refuses this ring.  Dumped instead: the " UINT64_FORMAT " pages from the page of the tail, " PMWAL_LSN ", on whose page headers are valid for this ring and continue one another, up to " PMWAL_LSN ", %s: they end %s%s.",
						  (run.to - run.from) / XLOG_BLCKSZ, LSN_FORMAT_ARGS(run.from),
						  LSN_FORMAT_ARGS(run.to), head_is,
						  run.stop ? "where " : "with one whole lap of the ring",
						  run.stop ? run.stop : "");
	nsegs = dump_ring(ring, dir, run.from, run.to, run.tli);
	printf("wrote WAL " PMWAL_LSN " to " PMWAL_LSN " of timeline %u into %d segment file(s) in \"%s\"\n",
		   LSN_FORMAT_ARGS(run.from), LSN_FORMAT_ARGS(run.to), run.tli, nsegs, dir);
	if (run.first >= run.to)
		printf("the pages hold only the middle of one record, which pg_waldump cannot read\n");
	else
		printf("read it with: %s\n", waldump_command("pg_waldump", dir, run.tli, run.first, run.to));
	return EXIT_OK;
}

int
cmd_dump(Ring *ring, const char *dir)
{
	RingHeader *hdr = ring->hdr;
	RingCheck	verdict;
	XLogRecPtr	first;
	char	   *wrong;
	int			nsegs;

	require_lock(ring);
	verdict = check_header(ring, NULL);
	if (verdict == RING_BAD_RANGE)
		return dump_salvage(ring, dir);
	if (!ring_usable(verdict))
		return EXIT_UNUSABLE;
	if (!holds_wal(ring, verdict))
	{
		printf("the ring is empty; nothing to dump\n");
		return EXIT_OK;
	}
	nsegs = dump_ring(ring, dir, hdr->tail.v, hdr->head.v, (TimeLineID) hdr->timeline.v);
	printf("wrote WAL " PMWAL_LSN " to " PMWAL_LSN " of timeline %u into %d segment file(s) in \"%s\"\n",
		   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
		   (TimeLineID) hdr->timeline.v, nsegs, dir);
	if ((wrong = check_pages(ring, &first)) != NULL)
		printf("warning: %s; \"pmwal_ctl verify\" checks the ring\n", wrong);
	else if (first >= hdr->head.v)
		printf("the ring holds only the middle of one record, which pg_waldump cannot read\n");
	else
		printf("read it with: %s\n", waldump_command("pg_waldump", dir, (TimeLineID) hdr->timeline.v,
													 first, hdr->head.v));
	return EXIT_OK;
}

/*-------------------------------------------------------------------------
 *
 * restore.c
 *		Restore before redo: write the WAL that only the ring holds back into
 *		pg_wal before the startup process reads it.
 *
 * Runs in the postmaster (or a standalone backend) from the
 * shmem_startup_hook, at every start and every crash-restart, before the
 * startup process exists.  A ring holding WAL is first checked as a whole
 * -- its identity (I4), every page header and every record's CRC, read with
 * PostgreSQL's XLogReader over the ring, through the end of the last
 * acknowledged commit, and that it connects to the WAL pg_wal holds -- and
 * only then written into the segment files (created and zero-filled when
 * missing), each fdatasynced, pg_wal/ fsynced, and the ring marked empty.
 * A ring that fails any check stops the server and nothing is written.  A
 * restore killed at any point is simply done again at the next start: the
 * bytes are the ones PostgreSQL wrote for those LSNs (I3).
 *
 * After a crash, PostgreSQL may also have written WAL that is only in the
 * page cache (WAL past the ring's head, written but not yet copied): the
 * segments from the redo point on are fsynced before redo, so that a
 * power loss after recovery cannot take away what redo replayed.
 *
 * IDENTIFICATION
 *		restore.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/fd.h"

#include "pmwal.h"

static const char *restore_hint =
"See \"When the ring cannot be restored\" in pmwal's README: \"pmwal_ctl inspect\" and \"pmwal_ctl dump\" show what the ring holds.";

/* What the XLogReader callback needs to read WAL out of the ring. */
typedef struct RingReader
{
	XLogRecPtr	tail;
	XLogRecPtr	head;
	bool		hit_end;		/* a read needed bytes past the head */
} RingReader;

static int
ring_page_read(XLogReaderState *reader, XLogRecPtr page, int reqLen,
			   XLogRecPtr targetRecPtr, char *buf)
{
	RingReader *rr = (RingReader *) reader->private_data;
	Size		avail;

	/*
	 * The reader checks the long header on the first page of each segment
	 * it enters; when the ring starts after that page, give it one.
	 */
	if (page < RING_TAIL_PAGE(rr->tail) && page % wal_segment_size == 0)
	{
		ring_segment_header(buf, page, pmwal_ring->hdr);
		return XLOG_BLCKSZ;
	}
	if (page < RING_TAIL_PAGE(rr->tail) || page + reqLen > rr->head)
	{
		rr->hit_end = true;
		return -1;
	}
	avail = Min(XLOG_BLCKSZ, rr->head - page);
	/* pages never wrap: the capacity is a multiple of the page size */
	memcpy(buf, pmwal_ring->data + RING_OFFSET(pmwal_ring->capacity, page), avail);
	return (int) avail;
}

/*
 * Read every record in the ring from its tail.  Refuses (FATAL) unless the
 * records read cleanly at least through last_end; a record cut off by the
 * head after that is the expected end.  Returns the first record's xl_prev.
 */
static XLogRecPtr
verify_ring(uint64 sysid, XLogRecPtr tail, XLogRecPtr head, XLogRecPtr last_end,
			uint64 *nrecords)
{
	RingReader	rr = {tail, head, false};
	XLogReaderState *reader;
	XLogRecord *record;
	char	   *errormsg = NULL;
	XLogRecPtr	first_prev = InvalidXLogRecPtr;
	XLogRecPtr	verified = tail;

	reader = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = ring_page_read), &rr);
	if (reader == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while allocating a WAL reading processor")));
	reader->system_identifier = sysid;
	XLogBeginRead(reader, tail);
	*nrecords = 0;
	while ((record = XLogReadRecord(reader, &errormsg)) != NULL)
	{
		if (*nrecords == 0)
			first_prev = record->xl_prev;
		(*nrecords)++;
		verified = reader->EndRecPtr;
	}

	if (errormsg != NULL && !rr.hit_end)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds damaged WAL; nothing was restored", pmwal_path),
				 errdetail("Verifying the ring's WAL from %X/%X to %X/%X failed after %X/%X: %s.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
						   LSN_FORMAT_ARGS(verified), errormsg),
				 errhint("%s", restore_hint)));
	if (verified < last_end)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds damaged WAL; nothing was restored", pmwal_path),
				 errdetail("The ring's WAL from %X/%X reads cleanly only to %X/%X, short of %X/%X, the end of the last commit acknowledged through it.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(verified),
						   LSN_FORMAT_ARGS(last_end)),
				 errhint("%s", restore_hint)));
	XLogReaderFree(reader);
	return first_prev;
}

/*
 * The WAL before the ring's tail must be in pg_wal already: check that the
 * page holding the record before the ring's first one is there.
 */
static void
check_connects(XLogRecPtr tail, XLogRecPtr prev, TimeLineID tli)
{
	char		path[MAXPGPATH];
	XLogSegNo	segno;
	XLogRecPtr	page = prev - prev % XLOG_BLCKSZ;
	PGAlignedXLogBlock buf;
	XLogPageHeader ph = (XLogPageHeader) buf.data;
	int			fd;
	ssize_t		n = -1;

	XLByteToSeg(prev, segno, wal_segment_size);
	XLogFilePath(path, tli, segno, wal_segment_size);
	fd = open(path, O_RDONLY | PG_BINARY | O_CLOEXEC);
	if (fd >= 0)
	{
		n = pg_pread(fd, buf.data, XLOG_BLCKSZ,
					 XLogSegmentOffset(page, wal_segment_size));
		close(fd);
	}
	if (n != XLOG_BLCKSZ || ph->xlp_magic != XLOG_PAGE_MAGIC ||
		ph->xlp_pageaddr != page)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" does not connect to the WAL in pg_wal; nothing was restored", pmwal_path),
				 errdetail("The ring starts at %X/%X after the record at %X/%X, but \"%s\" does not hold that record's page.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(prev), path),
				 errhint("%s", restore_hint)));
}

static void
write_fully(int fd, const char *buf, Size len, off_t off, const char *path)
{
	while (len > 0)
	{
		ssize_t		n = pg_pwrite(fd, buf, len, off);

		if (n <= 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not write to file \"%s\": %m", path)));
		buf += n;
		len -= n;
		off += n;
	}
}

/*
 * Write WAL [from, to) from the ring into its segment files; returns the
 * number of segments written.  Each segment is fdatasynced before the next.
 */
static int
write_segments(XLogRecPtr from, XLogRecPtr to, TimeLineID tli)
{
	static const PGAlignedXLogBlock zeros;
	int			nsegs = 0;

	while (from < to)
	{
		char		path[MAXPGPATH];
		XLogSegNo	segno;
		uint32		off = XLogSegmentOffset(from, wal_segment_size);
		Size		n = Min(to - from, wal_segment_size - off);
		struct stat st;
		int			fd;

		XLByteToSeg(from, segno, wal_segment_size);
		XLogFilePath(path, tli, segno, wal_segment_size);
		fd = open(path, O_RDWR | O_CREAT | PG_BINARY | O_CLOEXEC, pg_file_create_mode);
		if (fd < 0 || fstat(fd, &st) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", path)));
		/* a missing or short segment is zero-filled to full size first */
		for (off_t z = st.st_size - st.st_size % XLOG_BLCKSZ; z < wal_segment_size; z += XLOG_BLCKSZ)
			if (z >= st.st_size)
				write_fully(fd, zeros.data, XLOG_BLCKSZ, z, path);

		for (Size done = 0; done < n;)
		{
			uint64		roff = RING_OFFSET(pmwal_ring->capacity, from + done);
			Size		piece = Min(n - done, pmwal_ring->capacity - roff);

			write_fully(fd, pmwal_ring->data + roff, piece, off + done, path);
			done += piece;
		}
		if (pg_fdatasync(fd) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not fdatasync file \"%s\": %m", path)));
		close(fd);
		nsegs++;
		from += n;
	}
	return nsegs;
}

/*
 * After a crash, WAL written but never synced may sit in the page cache
 * beyond the ring's head; redo will replay it, so make it durable first.
 */
static void
sync_segments_from(XLogSegNo first, TimeLineID tli)
{
	DIR		   *dir = AllocateDir(XLOGDIR);
	struct dirent *de;

	while ((de = ReadDir(dir, XLOGDIR)) != NULL)
	{
		TimeLineID	ftli;
		XLogSegNo	segno;
		char		path[MAXPGPATH];
		int			fd;

		if (!IsXLogFileName(de->d_name))
			continue;
		XLogFromFileName(de->d_name, &ftli, &segno, wal_segment_size);
		if (ftli != tli || segno < first)
			continue;
		snprintf(path, sizeof(path), XLOGDIR "/%s", de->d_name);
		fd = open(path, O_RDWR | PG_BINARY | O_CLOEXEC);
		if (fd < 0 || pg_fdatasync(fd) != 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not fdatasync file \"%s\": %m", path)));
		close(fd);
	}
	FreeDir(dir);
}

/* Mark the ring empty: its WAL is in pg_wal now. */
static void
empty_ring(RingHeader *hdr)
{
	if (!ring_set_word(&hdr->tail.v, hdr->head.v) ||
		!ring_set_word(&hdr->state.v, RING_STATE_EMPTY))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_path)));
}

/*
 * Restore the ring into pg_wal if it holds WAL that recovery needs.
 */
void
pmwal_restore(void)
{
	RingHeader *hdr;
	ControlFileData *control;
	bool		crc_ok;
	XLogRecPtr	tail;
	XLogRecPtr	head;
	XLogRecPtr	last_end;
	XLogRecPtr	redo;
	XLogRecPtr	from;
	XLogRecPtr	prev;
	TimeLineID	tli;
	uint64		nrecords;
	int			nsegs;
	instr_time	start;
	instr_time	elapsed;

	if (pmwal_ring == NULL)
		return;
	hdr = pmwal_ring->hdr;
	control = get_controlfile(DataDir, &crc_ok);
	redo = control->checkPointCopy.redo;
	tli = control->checkPointCopy.ThisTimeLineID;

	if (!ring_holds_wal(hdr))
	{
		if (control->state != DB_SHUTDOWNED && control->state != DB_SHUTDOWNED_IN_RECOVERY)
		{
			XLogSegNo	first;

			XLByteToSeg(redo, first, wal_segment_size);
			sync_segments_from(first, tli);
			fsync_fname_ext(XLOGDIR, true, false, FATAL);
		}
		pfree(control);
		return;
	}

	tail = hdr->tail.v;
	head = hdr->head.v;
	last_end = hdr->last_end.v;
	if (head <= redo)
	{
		ereport(LOG,
				(errmsg("pmwal ring \"%s\" holds only WAL older than the last checkpoint; not restored", pmwal_path),
				 errdetail("The ring holds %X/%X to %X/%X; the checkpoint's redo point is %X/%X.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(redo))));
		empty_ring(hdr);
		pfree(control);
		return;
	}
	if (hdr->st.s.timeline != tli)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds WAL of timeline %u, but the cluster is on timeline %u; nothing was restored",
						pmwal_path, hdr->st.s.timeline, tli),
				 errdetail("The ring holds %X/%X to %X/%X.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head)),
				 errhint("%s", restore_hint)));

	INSTR_TIME_SET_CURRENT(start);
	prev = verify_ring(control->system_identifier, tail, head, last_end, &nrecords);
	if (tail > redo && prev != InvalidXLogRecPtr)
		check_connects(tail, prev, tli);

	/*
	 * A checkpoint can put its redo point into a segment the flusher has
	 * not synced yet, so restore from the start of that segment where the
	 * ring holds it; where the tail lies after it, the flusher synced the
	 * segment before the tail moved into it.
	 */
	from = RING_RESTORE_FROM(tail, redo, wal_segment_size);
	nsegs = write_segments(from, head, tli);
	PMWAL_PAUSE_POINT("restore_written");
	if (control->state != DB_SHUTDOWNED && control->state != DB_SHUTDOWNED_IN_RECOVERY)
	{
		XLogSegNo	first;

		XLByteToSeg(Min(from, redo), first, wal_segment_size);
		sync_segments_from(first, tli);
	}
	fsync_fname_ext(XLOGDIR, true, false, FATAL);
	empty_ring(hdr);

	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	ereport(LOG,
			(errmsg("pmwal restored WAL %X/%X to %X/%X from the ring into pg_wal: %llu bytes, %llu records, %d segments, %.3f ms",
					LSN_FORMAT_ARGS(from), LSN_FORMAT_ARGS(head),
					(unsigned long long) (head - from), (unsigned long long) nrecords,
					nsegs, INSTR_TIME_GET_MILLISEC(elapsed))));
	pfree(control);
}

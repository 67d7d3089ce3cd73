/*-------------------------------------------------------------------------
 *
 * restore.c
 *		Restore before redo: write the WAL that only the ring holds back into
 *		pg_wal before the startup process reads it.
 *
 * Runs in the postmaster (or a standalone backend) from the
 * shmem_startup_hook, at every start and every crash-restart, before the
 * startup process exists, once binding.c has found the ring to be this
 * data directory's.  The ring holds [tail, head): the newest version of
 * every WAL page the server wrote since the tail, as it wrote it; before
 * the tail, pg_wal holds everything durably.  Nothing is written before the
 * ring's WAL is proven to be this cluster's own unbroken history (I4):
 *
 *	- pg_control's checkpoint record is read from pg_wal (a checkpoint's
 *	  pg_control write synced it for real, wal_ring.c), and the ring does
 *	  not begin before its page: a ring older than the checkpoint is not
 *	  the one the cluster wrote last;
 *	- from that record on, PostgreSQL's XLogReader reads the WAL as
 *	  recovery will see it after the restore -- pg_wal's pages before the
 *	  tail, the ring's in [tail, head) -- checking every page header and
 *	  every record's CRC and back link, so the ring's WAL continues
 *	  pg_wal's without a break;
 *	- every record pg_wal itself can read there must be byte for byte the
 *	  record the ring has at that place: pg_wal may hold less than the
 *	  ring (a power cut took it), never something else;
 *	- the WAL must read cleanly into the ring's last page (only there may a
 *	  record be cut short: the server writes the whole page holding the end
 *	  of what it flushes, with insertions after that end still under way),
 *	  or end in one record that continues past the head (never flushed, so
 *	  never acknowledged), all of whose pages the ring holds; anything else
 *	  is damage.
 *
 * Then [tail, head) is written into the segment files (created and
 * zero-filled when missing), each fdatasynced, every segment from the redo
 * point on synced (WAL that reached the page cache only may be replayed),
 * pg_wal/ fsynced, and only then the ring emptied.  A restore killed at any
 * point is done again at the next start: the bytes are the ones the server
 * wrote for those LSNs (I3).  Every sync here is real, whatever the fsync
 * setting.
 *
 * Every read of the ring's memory here is guarded (ring_read_guarded): a
 * page that cannot be read -- the ring file truncated under the running
 * server, a poisoned line of persistent memory -- ends the start with a
 * FATAL naming the ring and the WAL it cannot read, instead of a SIGBUS
 * that kills the postmaster without a word.  All of [tail, head) is read
 * once before anything is checked or written, so such a start writes
 * nothing.
 *
 * IDENTIFICATION
 *		restore.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/rmgr.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/pg_shmem.h"
#include "utils/elog.h"

#include "pmwal.h"

static const char *restore_hint =
"The ring was left as it is.  \"pmwal_ctl inspect\" and \"pmwal_ctl verify\" show what it holds, \"pmwal_ctl dump\" saves its WAL; only if nothing in it is needed, \"pmwal_ctl reset --discard-wal\" empties it.";

/* Which pages an XLogReader reads from the ring rather than pg_wal. */
typedef struct MergedView
{
	XLogRecPtr	tail;
	XLogRecPtr	head;
	bool		use_ring;		/* false: pg_wal only */
} MergedView;

/*
 * The ring's memory could not be read at "at" (file offset "fault"): end
 * the start with a FATAL naming the ring and the WAL that cannot be read,
 * found page by page over the ring's [tail, head).  "written": whether
 * some of the ring's WAL was written into pg_wal already.  The ring is left
 * as it is.
 */
static void
ring_unreadable(XLogRecPtr at, uint64 fault, bool written)
{
	XLogRecPtr	tail = pmwal_ring->hdr->tail.v;
	XLogRecPtr	head = pmwal_ring->hdr->head.v;
	XLogRecPtr	first = InvalidXLogRecPtr;
	XLogRecPtr	last = InvalidXLogRecPtr;
	uint64		bad = 0;
	PGAlignedXLogBlock page;

	for (XLogRecPtr p = tail; p < head; p += XLOG_BLCKSZ)
	{
		uint64		f;

		if (ring_read_guarded(page.data, pmwal_ring->data + RING_OFFSET(pmwal_ring->capacity, p),
							  XLOG_BLCKSZ, &f))
			continue;
		if (bad++ == 0)
			first = p;
		last = p + XLOG_BLCKSZ;
	}
	if (bad == 0)
	{
		/* readable again on the second look: name the page that was not */
		first = RING_PAGE(at);
		last = first + XLOG_BLCKSZ;
		bad = 1;
	}
	ereport(FATAL,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("could not read pmwal ring \"%s\": its WAL from " PMWAL_LSN " to " PMWAL_LSN " cannot be read",
					pmwal_ring->path, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(last)),
			 errdetail("The ring holds this cluster's WAL from " PMWAL_LSN " to " PMWAL_LSN "; %llu of its %llu pages, from " PMWAL_LSN " to " PMWAL_LSN ", cannot be read (SIGBUS at file offset %llu).  %s  %s",
					   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
					   (unsigned long long) bad,
					   (unsigned long long) ((head - tail) / XLOG_BLCKSZ),
					   LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(last),
					   (unsigned long long) fault, ring_unreadable_reason(),
					   written ? "Part of the ring's WAL was written into pg_wal already, exactly as the ring holds it; the ring was left as it is."
					   : "Nothing was restored; the ring was left as it is."),
			 errhint("%s", ring_unreadable_hint())));
}

/*
 * Copy the ring's WAL [from, from + len) into "buf", or end the start with
 * a FATAL (ring_unreadable) if the ring's memory cannot be read.  Every read
 * of the ring's data here goes through this.
 */
static void
read_ring(char *buf, XLogRecPtr from, size_t len, bool written)
{
	uint64		cap = pmwal_ring->capacity;

	while (len > 0)
	{
		uint64		off = RING_OFFSET(cap, from);
		size_t		n = Min(len, cap - off);
		uint64		fault;

		if (!ring_read_guarded(buf, pmwal_ring->data + off, n, &fault))
		{
			uint64		doff = fault - RING_HEADER_SIZE;

			ring_unreadable(doff >= off && doff < off + n ? from + (doff - off) : from,
							fault, written);
		}
		buf += n;
		from += n;
		len -= n;
	}
}

/*
 * Read all of the ring's WAL [tail, head) once before anything is checked
 * or written, so that WAL the ring cannot give back ends the start before
 * a byte is written.
 */
static void
require_readable(XLogRecPtr tail, XLogRecPtr head)
{
	const Size	chunk = 64 * XLOG_BLCKSZ;
	char	   *buf = palloc(chunk);

	for (XLogRecPtr p = tail; p < head; p += Min(chunk, head - p))
		read_ring(buf, p, Min(chunk, head - p), false);
	pfree(buf);
}

static int
merged_page_read(XLogReaderState *reader, XLogRecPtr page, int reqLen,
				 XLogRecPtr targetRecPtr, char *buf)
{
	MergedView *view = (MergedView *) reader->private_data;
	char		path[MAXPGPATH];
	XLogSegNo	segno;
	ssize_t		n;
	int			fd;

	if (view->use_ring && page >= view->tail && page < view->head)
	{
		/* whole pages: tail and head are page-aligned, pages never wrap */
		read_ring(buf, page, XLOG_BLCKSZ, false);
		return XLOG_BLCKSZ;
	}
	XLByteToSeg(page, segno, wal_segment_size);
	fd = pmwal_open_segment(segno, path);
	if (fd < 0)
		return -1;
	n = pg_pread(fd, buf, XLOG_BLCKSZ, XLogSegmentOffset(page, wal_segment_size));
	close(fd);
	return n == XLOG_BLCKSZ ? XLOG_BLCKSZ : -1;
}

static XLogReaderState *
open_reader(MergedView *view, uint64 sysid, XLogRecPtr start)
{
	XLogReaderState *reader;

	reader = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = merged_page_read), view);
	if (reader == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while allocating a WAL reading processor")));
	reader->system_identifier = sysid;
	XLogBeginRead(reader, start);
	return reader;
}

static bool
is_checkpoint_record(XLogRecord *record)
{
	uint8		info = record->xl_info & ~XLR_INFO_MASK;

	return record->xl_rmid == RM_XLOG_ID &&
		(info == XLOG_CHECKPOINT_SHUTDOWN || info == XLOG_CHECKPOINT_ONLINE);
}

static void
refuse(const char *what, const char *detail)
{
	ereport(FATAL,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("pmwal ring \"%s\" %s; nothing was restored", pmwal_ring->path, what),
			 errdetail_internal("%s", detail),
			 errhint("%s", restore_hint)));
}

/*
 * Reading the ring's WAL stopped at "end" (the end of the last record that
 * read cleanly), before its last page.  Everything the server wrote before
 * the page of the record it was flushing had been inserted completely, so
 * a record beginning there must read cleanly -- unless it was never
 * completely written: one that goes on past the head, whose pages in the
 * ring are all its continuation.  Returns NULL or what is wrong.
 */
static char *
check_ring_after(XLogRecPtr end, XLogRecPtr tail, XLogRecPtr head, TimeLineID tli)
{
	XLogRecPtr	rec = end;
	uint32		tot_len;
	uint32		got;
	PGAlignedXLogBlock buf;
	XLogPageHeader ph = (XLogPageHeader) buf.data;

	if (rec % XLOG_BLCKSZ == 0)
		rec += rec % wal_segment_size == 0 ? SizeOfXLogLongPHD : SizeOfXLogShortPHD;
	/* xl_tot_len comes first; records are MAXALIGNed, so it never spans pages */
	read_ring((char *) &tot_len, rec, sizeof(tot_len), false);
	if (tot_len < SizeOfXLogRecord)
		return psprintf("the record at " PMWAL_LSN " is %u bytes long", LSN_FORMAT_ARGS(rec), tot_len);

	/*
	 * Follow the record through the ring's pages as XLogReader would: each
	 * must continue it (xlp_rem_len: what is left of it), and it must not
	 * end before the head -- page headers included, which is why its LSN
	 * end is not rec + tot_len.
	 */
	got = Min(tot_len, RING_PAGE(rec) + XLOG_BLCKSZ - rec);
	for (XLogRecPtr page = RING_PAGE(rec) + XLOG_BLCKSZ; page < head; page += XLOG_BLCKSZ)
	{
		if (got >= tot_len)
			break;
		read_ring(buf.data, page, SizeOfXLogLongPHD, false);
		if (ph->xlp_magic != XLOG_PAGE_MAGIC || ph->xlp_pageaddr != page ||
			ph->xlp_tli > tli)
			return psprintf("the ring's page at " PMWAL_LSN " has no valid page header",
							LSN_FORMAT_ARGS(page));
		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 ||
			ph->xlp_rem_len != tot_len - got)
			return psprintf("the ring's page at " PMWAL_LSN " does not continue the record at " PMWAL_LSN " (%u bytes, %u of them before that page): it %s",
							LSN_FORMAT_ARGS(page), LSN_FORMAT_ARGS(rec), tot_len, got,
							(ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 ? "begins new records" :
							psprintf("continues one with %u bytes left", ph->xlp_rem_len));
		got += Min(tot_len - got, XLOG_BLCKSZ - XLogPageHeaderSize(ph));
	}
	if (got >= tot_len)
		return psprintf("the record at " PMWAL_LSN ", which the ring holds whole (%u bytes), does not read cleanly",
						LSN_FORMAT_ARGS(rec), tot_len);
	return NULL;
}

/*
 * Prove that the ring's WAL [tail, head) continues pg_wal's history from
 * pg_control's checkpoint record (see the file header).  Returns the number
 * of records read in the ring.
 */
static uint64
verify_history(ControlFileData *control, XLogRecPtr tail, XLogRecPtr head, TimeLineID tli)
{
	MergedView merged = {tail, head, true};
	MergedView disk = {tail, head, false};
	XLogReaderState *rm;
	XLogReaderState *rd;
	XLogRecord *m;
	XLogRecord *d;
	char	   *merr = NULL;
	char	   *derr = NULL;
	XLogRecPtr	ckpt = control->checkPoint;
	XLogRecPtr	end = InvalidXLogRecPtr;
	uint64		nrecords = 0;
	char	   *wrong;

	if (RING_PAGE(ckpt) > tail || ckpt >= head)
		refuse("is older than the cluster's last checkpoint",
			   psprintf("The ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN ", but pg_control names the checkpoint at " PMWAL_LSN ": with pmwal, pg_control names only WAL synced in pg_wal, and the ring holds what came after it.  The ring is not the one this cluster wrote last (a copy put back?).",
						LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(ckpt)));

	rd = open_reader(&disk, control->system_identifier, ckpt);
	d = XLogReadRecord(rd, &derr);
	if (d == NULL || !is_checkpoint_record(d))
		refuse("cannot be restored: pg_wal lacks the checkpoint record pg_control names",
			   psprintf("Reading the checkpoint record at " PMWAL_LSN " from pg_wal failed: %s.",
						LSN_FORMAT_ARGS(ckpt), derr ? derr : "it is not a checkpoint record"));
	rm = open_reader(&merged, control->system_identifier, ckpt);
	m = XLogReadRecord(rm, &merr);

	while (m != NULL)
	{
		if (rm->EndRecPtr > tail)
			nrecords++;
		if (d != NULL)
		{
			/*
			 * Both records passed their CRC check; a record's header ends
			 * with the CRC of all its bytes, so equal headers are equal
			 * records (the reader returns the header, not the raw bytes).
			 */
			if (rd->ReadRecPtr != rm->ReadRecPtr ||
				memcmp(d, m, sizeof(XLogRecord)) != 0)
				refuse("holds WAL of another history than pg_wal",
					   psprintf("At " PMWAL_LSN " pg_wal holds a record of %u bytes (%s), the ring %s of %u bytes (%s).  The cluster wrote other WAL at these locations after the ring's (it ran without this ring, or the ring belongs elsewhere).",
								LSN_FORMAT_ARGS(rd->ReadRecPtr), d->xl_tot_len,
								RmgrTable[d->xl_rmid].rm_name,
								rd->ReadRecPtr == rm->ReadRecPtr ? "one" : psprintf("one at " PMWAL_LSN, LSN_FORMAT_ARGS(rm->ReadRecPtr)),
								m->xl_tot_len, RmgrTable[m->xl_rmid].rm_name));
			d = XLogReadRecord(rd, &derr);
		}
		end = rm->EndRecPtr;
		m = XLogReadRecord(rm, &merr);
	}
	if (d != NULL && rd->ReadRecPtr < head)
		refuse("holds WAL that pg_wal has beyond it",
			   psprintf("The ring's WAL reads only to " PMWAL_LSN " (%s), but pg_wal holds a record at " PMWAL_LSN ": the ring is damaged, or older than pg_wal.",
						LSN_FORMAT_ARGS(end), merr ? merr : "end of WAL",
						LSN_FORMAT_ARGS(rd->ReadRecPtr)));
	if (end < tail)
		refuse("does not connect to the WAL in pg_wal",
			   psprintf("From the checkpoint at " PMWAL_LSN ", WAL reads only to " PMWAL_LSN ", before the ring begins at " PMWAL_LSN ": %s.",
						LSN_FORMAT_ARGS(ckpt), LSN_FORMAT_ARGS(end), LSN_FORMAT_ARGS(tail),
						merr ? merr : "end of WAL"));
	if (end < RING_PAGE(head - 1) &&
		(wrong = check_ring_after(end, tail, head, tli)) != NULL)
		refuse("holds damaged WAL",
			   psprintf("Reading the ring's WAL (" PMWAL_LSN " to " PMWAL_LSN ") stopped at " PMWAL_LSN " (%s), and %s.",
						LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(end),
						merr ? merr : "end of WAL", wrong));
	XLogReaderFree(rm);
	XLogReaderFree(rd);
	return nrecords;
}

/*
 * Write WAL [from, to) from the ring into its segment files on timeline
 * "tli"; returns the number of segments written.  Each is fdatasynced.
 */
static int
write_segments(XLogRecPtr from, XLogRecPtr to, TimeLineID tli)
{
	static const PGAlignedXLogBlock zeros;
	const Size	chunk = 64 * XLOG_BLCKSZ;
	char	   *buf = palloc(chunk);
	XLogRecPtr	start = from;
	int			nsegs = 0;

	while (from < to)
	{
		char		path[MAXPGPATH];
		uint32		off = XLogSegmentOffset(from, wal_segment_size);
		Size		n = Min(to - from, wal_segment_size - off);
		XLogSegNo	segno;
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
				pmwal_write_fully(fd, zeros.data, XLOG_BLCKSZ, z, path, FATAL);

		for (Size done = 0; done < n;)
		{
			Size		piece = Min(n - done, chunk);

			read_ring(buf, from + done, piece, from + done > start);
			pmwal_write_fully(fd, buf, piece, off + done, path, FATAL);
			done += piece;
		}
		pmwal_fsync_fd(fd, path, FATAL);
		close(fd);
		nsegs++;
		from += n;
	}
	pfree(buf);
	return nsegs;
}

/*
 * Sync every WAL segment from "first" on (any timeline) and pg_wal/: after
 * a crash, WAL written but never synced may sit in the page cache; redo
 * may replay it, so make it durable first.  False if a sync failed
 * (reported at "elevel").
 */
static bool
sync_segments_from(XLogSegNo first, int elevel)
{
	DIR		   *dir = AllocateDir(XLOGDIR);
	struct dirent *de;
	bool		ok = true;

	while ((de = ReadDirExtended(dir, XLOGDIR, elevel)) != NULL)
	{
		TimeLineID	ftli;
		XLogSegNo	segno;
		char		path[MAXPGPATH];

		if (!IsXLogFileName(de->d_name))
			continue;
		XLogFromFileName(de->d_name, &ftli, &segno, wal_segment_size);
		if (segno < first)
			continue;
		snprintf(path, sizeof(path), XLOGDIR "/%s", de->d_name);
		ok &= pmwal_fsync_path(path, false, elevel);
	}
	FreeDir(dir);
	ok &= pmwal_fsync_path(XLOGDIR, true, elevel);
	return ok;
}

/* Mark the ring empty: its WAL is in pg_wal now. */
static bool
empty_ring(RingHeader *hdr)
{
	return ring_set_word(&hdr->tail.v, hdr->head.v) &&
		ring_set_word(&hdr->state.v, RING_STATE_EMPTY);
}

/*
 * Restore the ring into pg_wal as "plan" says (binding.c decided whose it
 * is).  "crash_restart": the postmaster reinitialises after a process
 * crashed.
 */
void
pmwal_restore(ControlFileData *control, RestorePlan plan, bool crash_restart)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	tail = hdr->tail.v;
	XLogRecPtr	head = hdr->head.v;
	XLogSegNo	redo_seg;
	TimeLineID	tli;
	uint64		nrecords;
	int			nsegs;
	instr_time	start;
	instr_time	elapsed;

	XLByteToSeg(control->checkPointCopy.redo, redo_seg, wal_segment_size);
	if (plan == RESTORE_NOTHING)
	{
		if (!pmwal_cluster_shut_down(control))
			sync_segments_from(redo_seg, FATAL);
		if (hdr->state.v == RING_STATE_IN_USE && !empty_ring(hdr))
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
		return;
	}
	if (plan == RESTORE_DROP)
	{
		if (!empty_ring(hdr))
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
		return;
	}

	INSTR_TIME_SET_CURRENT(start);
	require_readable(tail, head);
	pmwal_restore_history_init(control);
	tli = pmwal_restore_timeline(control, (TimeLineID) hdr->timeline.v, tail, head);
	if (tli == 0)
		refuse("holds WAL of a timeline the cluster left behind",
			   psprintf("The ring holds WAL of timeline %u from " PMWAL_LSN " to " PMWAL_LSN ", all before the checkpoint at " PMWAL_LSN ".",
						(TimeLineID) hdr->timeline.v, LSN_FORMAT_ARGS(tail),
						LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(control->checkPoint)));
	nrecords = verify_history(control, tail, head, tli);

	nsegs = write_segments(tail, head, tli);
	PMWAL_PAUSE_POINT("restore_written");
	sync_segments_from(Min(tail / wal_segment_size, redo_seg), FATAL);
	PMWAL_PAUSE_POINT("restore_before_empty");
	if (!empty_ring(hdr))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));

	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	ereport(LOG,
			(errmsg("pmwal restored WAL " PMWAL_LSN " to " PMWAL_LSN " from the ring into pg_wal: %llu bytes, %llu records, %d segments, %.3f ms%s",
					LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
					(unsigned long long) (head - tail), (unsigned long long) nrecords,
					nsegs, INSTR_TIME_GET_MILLISEC(elapsed),
					crash_restart ? " (crash-restart)" : "")));
}

/*
 * Is this process the only one attached to PostgreSQL's shared memory?
 * Every server process but the logger inherits the attachment, and a
 * process that is gone has dropped it: the count is PostgreSQL's own test
 * for a server still running in a data directory.
 */
static bool
last_process_attached(void)
{
	struct shmid_ds ds;
	int			shmid;

	/* PostgreSQL keeps the segment's key */
	if (UsedShmemSegID == 0)
		return false;
	shmid = shmget((key_t) UsedShmemSegID, sizeof(PGShmemHeader), 0);
	return shmid >= 0 && shmctl(shmid, IPC_STAT, &ds) == 0 && ds.shm_nattch == 1;
}

/*
 * on_shmem_exit of the process that attached the ring (the postmaster, or a
 * standalone backend such as pg_rewind's "postgres --single -F").
 *
 * An immediate shutdown (or a crash with restart_after_crash off) leaves
 * the ring holding WAL.  Once no other server process is left, everything
 * any of them wrote is in the page cache: synced now, it is durable in
 * pg_wal, and the ring is emptied, so the next start restores nothing.
 * Not at a crash-restart's own reset of shared memory (no proc_exit): its
 * restore follows at once.  Not after a PANIC either: a failed fsync (the
 * usual reason for one) leaves pages in the page cache that look clean but
 * never reached the disk, and a second fsync reports success; the next
 * start's restore writes the ring's WAL anew instead.  If a sync fails
 * here, the ring stays too.
 */
void
pmwal_exit_sync(int code, Datum arg)
{
	ControlFileData *control;
	bool		crc_ok;
	XLogSegNo	first;
	RingHeader *hdr;
	RingHeader	copy;
	uint64		fault;

	if (pmwal_ring == NULL || !proc_exit_inprogress)
		return;
	hdr = pmwal_ring->hdr;
	/* the mapping may have become unreadable (ring_read_guarded) */
	if (!ring_read_guarded(&copy, hdr, sizeof(copy), &fault))
	{
		ereport(WARNING,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not read the header of pmwal ring \"%s\"; it was left as it is",
						pmwal_ring->path),
				 errdetail("Reading the ring's header failed at byte %llu (SIGBUS).  %s",
						   (unsigned long long) fault, ring_unreadable_reason())));
		return;
	}
	if (!ring_holds_wal(&copy) || !last_process_attached() ||
		pg_atomic_read_u32(&pmwal_shared->panicked) != 0)
		return;
	control = get_controlfile(DataDir, &crc_ok);
	XLByteToSeg(Min(control->checkPointCopy.redo, hdr->tail.v), first, wal_segment_size);
	if (sync_segments_from(first, WARNING))
	{
		if (empty_ring(hdr))
			ereport(LOG,
					(errmsg("pmwal synced pg_wal after the last server process exited; the ring is empty")));
		else
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
	}
	pfree(control);
}

/*
 * Remember in shared memory that some server process PANICked, for
 * pmwal_exit_sync: emit_log_hook runs in the PANICking process just before
 * it aborts.
 */
static emit_log_hook_type prev_emit_log_hook = NULL;

static void
note_panic(ErrorData *edata)
{
	if (edata->elevel >= PANIC && pmwal_shared != NULL)
		pg_atomic_write_u32(&pmwal_shared->panicked, 1);
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
pmwal_watch_panics(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = note_panic;
}

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
 * acknowledged commit, that it connects to the WAL pg_wal holds, and that
 * it agrees with pg_wal on the checkpoint record pg_control names -- and
 * only then is every verified record written into the segment files
 * (created and zero-filled when missing), each fdatasynced, pg_wal/
 * fsynced, the checkpoint record checked readable, and the ring marked
 * empty.  A ring that fails any check stops the server and nothing is
 * written.  A restore killed at any point is simply done again at the next
 * start: the bytes are the ones PostgreSQL wrote for those LSNs (I3).
 * Every sync here is real, whatever the fsync setting.
 *
 * After a crash, PostgreSQL may also have written WAL that is only in the
 * page cache (WAL past the ring's head, written but not yet copied): the
 * segments from the redo point on are fsynced before redo, so that a
 * power loss after recovery cannot take away what redo replayed.
 *
 * If the ring says a write window was open ("exposed"), WAL beyond what
 * survives may have reached a standby or the WAL archive.  Recovery then
 * ends on a new timeline (recovery.signal), so that a standby or archive
 * ahead of this server sees the fork and stops, instead of splicing two
 * histories at the same LSNs; the timeline ID a standby's promotion would
 * take is left to it (restore_timeline.c).  Not at a crash-restart of a
 * running postmaster: the page cache kept that WAL.
 *
 * The ring's WAL goes back on its own timeline, which right after a
 * promotion may be newer than the one pg_control names; reading pg_wal
 * follows the timeline history (restore_timeline.c).
 *
 * A data directory restored from a base backup (backup_label) is not given
 * a ring's WAL: the ring may belong to the server the backup came from.  A
 * ring whose WAL all precedes the backup's start is only dropped (the
 * backup holds it); one that goes past it is refused.
 * After pg_resetwal the ring's WAL no longer fits the cluster's history.
 * Both are refused, touching nothing.
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
#include "storage/shmem.h"
#include "utils/guc.h"

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
		ring_segment_header(buf, page, pmwal_ring->hdr,
							pmwal_ring->data + RING_OFFSET(pmwal_ring->capacity,
														   RING_TAIL_PAGE(rr->tail)));
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
 * head after that is the expected end.  Returns the first record's xl_prev,
 * and in *verified_end the end of the last record that read cleanly: only
 * that much is written back, never bytes after it that merely sent the
 * reader past the head.
 */
static XLogRecPtr
verify_ring(uint64 sysid, XLogRecPtr tail, XLogRecPtr head, XLogRecPtr last_end,
			uint64 *nrecords, XLogRecPtr *verified_end)
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

	/*
	 * Damage before last_end may hide an acknowledged commit: refuse.  A
	 * read that fails after it -- a record the head cuts off, or bytes
	 * nobody acknowledged through the ring -- ends what is written back;
	 * pg_wal keeps whatever it holds there.
	 */
	if (errormsg != NULL && !rr.hit_end && verified < last_end)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds damaged WAL; nothing was restored", pmwal_path),
				 errdetail("Verifying the ring's WAL from %X/%X to %X/%X failed after %X/%X: %s.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
						   LSN_FORMAT_ARGS(verified), errormsg),
				 errhint("%s", restore_hint)));
	if (errormsg != NULL && !rr.hit_end)
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds damaged WAL after the last commit acknowledged through it; restoring only up to %X/%X",
						pmwal_path, LSN_FORMAT_ARGS(verified)),
				 errdetail("Reading the ring's WAL failed after %X/%X, before its head %X/%X: %s.",
						   LSN_FORMAT_ARGS(verified), LSN_FORMAT_ARGS(head), errormsg)));
	if (verified < last_end)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds damaged WAL; nothing was restored", pmwal_path),
				 errdetail("The ring's WAL from %X/%X reads cleanly only to %X/%X, short of %X/%X, the end of the last commit acknowledged through it.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(verified),
						   LSN_FORMAT_ARGS(last_end)),
				 errhint("%s", restore_hint)));
	XLogReaderFree(reader);
	*verified_end = verified;
	return first_prev;
}

/*
 * The WAL before the ring's tail must be in pg_wal already: check that the
 * page holding the record before the ring's first one is there.
 */
static void
check_connects(XLogRecPtr tail, XLogRecPtr prev)
{
	char		path[MAXPGPATH];
	XLogSegNo	segno;
	XLogRecPtr	page = prev - prev % XLOG_BLCKSZ;
	PGAlignedXLogBlock buf;
	XLogPageHeader ph = (XLogPageHeader) buf.data;
	int			fd;
	ssize_t		n = -1;

	XLByteToSeg(prev, segno, wal_segment_size);
	fd = pmwal_open_segment(segno, path);
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
		pmwal_fsync_fd(fd, path, FATAL);
		close(fd);
		nsegs++;
		from += n;
	}
	return nsegs;
}

/*
 * Sync every WAL segment from "first" on (any timeline) and pg_wal/: after
 * a crash, WAL written but never synced may sit in the page cache beyond
 * the ring's head; redo will replay it, so make it durable first.  False
 * if a sync failed (reported at "elevel").
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

/* Mark the ring empty (its WAL is in pg_wal now) and not exposed. */
static void
empty_ring(RingHeader *hdr)
{
	if (!ring_set_word(&hdr->tail.v, hdr->head.v) ||
		!ring_set_word(&hdr->exposed.v, 0) ||
		!ring_set_word(&hdr->state.v, RING_STATE_EMPTY))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_path)));
}

/* Reading records from pg_wal's segment files, along the history. */
static int
pg_wal_page_read(XLogReaderState *reader, XLogRecPtr page, int reqLen,
				 XLogRecPtr targetRecPtr, char *buf)
{
	char		path[MAXPGPATH];
	XLogSegNo	segno;
	int			fd;
	ssize_t		n;

	XLByteToSeg(page, segno, wal_segment_size);
	fd = pmwal_open_segment(segno, path);
	if (fd < 0)
		return -1;
	n = pg_pread(fd, buf, XLOG_BLCKSZ, XLogSegmentOffset(page, wal_segment_size));
	close(fd);
	return n == XLOG_BLCKSZ ? XLOG_BLCKSZ : -1;
}

/*
 * Read the checkpoint record pg_control names from pg_wal.  Returns its
 * xl_prev and, in *end, where it ends; false with *why set if it cannot be
 * read.
 */
static bool
read_checkpoint_record(ControlFileData *control, XLogRecPtr *prev,
					   XLogRecPtr *end, char **why)
{
	XLogReaderState *reader;
	XLogRecord *record;
	bool		ok;

	reader = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = pg_wal_page_read), NULL);
	if (reader == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory while allocating a WAL reading processor")));
	reader->system_identifier = control->system_identifier;
	XLogBeginRead(reader, control->checkPoint);
	*why = NULL;
	record = XLogReadRecord(reader, why);
	ok = record != NULL &&
		record->xl_rmid == RM_XLOG_ID &&
		((record->xl_info & ~XLR_INFO_MASK) == XLOG_CHECKPOINT_SHUTDOWN ||
		 (record->xl_info & ~XLR_INFO_MASK) == XLOG_CHECKPOINT_ONLINE);
	if (ok)
	{
		*prev = record->xl_prev;
		*end = reader->EndRecPtr;
	}
	else if (*why == NULL)
		*why = pstrdup(record ? "it is not a checkpoint record" : "it cannot be read");
	else
		*why = pstrdup(*why);
	XLogReaderFree(reader);
	return ok;
}

/*
 * Refuse to empty a ring while the checkpoint record pg_control names
 * cannot be read: neither the ring nor pg_wal would have it afterwards.
 */
static void
require_checkpoint_record(ControlFileData *control, XLogRecPtr tail, XLogRecPtr head)
{
	XLogRecPtr	prev;
	XLogRecPtr	end;
	char	   *why;

	if (!read_checkpoint_record(control, &prev, &end, &why))
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" was kept: the checkpoint record at %X/%X that pg_control names is in neither the ring nor pg_wal",
						pmwal_path, LSN_FORMAT_ARGS(control->checkPoint)),
				 errdetail("The ring holds %X/%X to %X/%X; reading the checkpoint record from pg_wal failed: %s.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), why),
				 errhint("%s", restore_hint)));
}

/*
 * The ring and pg_wal must describe one history.  After pg_resetwal the
 * checkpoint record in pg_wal has no predecessor (xl_prev is zero) and the
 * ring's WAL at the same LSNs is older; where the ring holds the checkpoint
 * record, its bytes must be pg_wal's.
 */
static void
check_same_history(ControlFileData *control, XLogRecPtr tail, XLogRecPtr verified)
{
	XLogRecPtr	ckpt = control->checkPoint;
	XLogRecPtr	prev;
	XLogRecPtr	end;
	char	   *why;
	bool		differs = false;

	if (!read_checkpoint_record(control, &prev, &end, &why))
		return;					/* the restore will have to supply it */
	if (tail <= ckpt && end <= verified)
	{
		char		path[MAXPGPATH];
		char	   *disk = palloc(end - ckpt);
		XLogSegNo	segno;
		int			fd;

		XLByteToSeg(ckpt, segno, wal_segment_size);
		fd = pmwal_open_segment(segno, path);
		if (fd >= 0 && XLogSegmentOffset(ckpt, wal_segment_size) + (end - ckpt) <= (uint64) wal_segment_size &&
			pg_pread(fd, disk, end - ckpt, XLogSegmentOffset(ckpt, wal_segment_size)) == (ssize_t) (end - ckpt))
		{
			for (XLogRecPtr p = ckpt; p < end && !differs; p++)
				differs = disk[p - ckpt] !=
					pmwal_ring->data[RING_OFFSET(pmwal_ring->capacity, p)];
		}
		if (fd >= 0)
			close(fd);
		pfree(disk);
	}
	if (prev == InvalidXLogRecPtr || differs)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds WAL of another history than pg_wal; nothing was restored", pmwal_path),
				 errdetail("The ring holds WAL from %X/%X, but pg_wal's checkpoint record at %X/%X %s.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(ckpt),
						   prev == InvalidXLogRecPtr ? "has no predecessor (pg_resetwal was run)"
						   : "differs from the ring's bytes at that location"),
				 errhint("The ring's WAL cannot be replayed into this cluster; \"pmwal_ctl dump\" saves it, \"pmwal_ctl reset --discard-wal\" lets the server start.")));
}

/*
 * The WAL location a base backup starts from, as its backup_label says
 * ("START WAL LOCATION: X/X (file ...)"); 0 if the file cannot be read or
 * names none, so that nothing counts as older than the backup.
 */
static XLogRecPtr
backup_label_start(void)
{
	FILE	   *f = AllocateFile(BACKUP_LABEL_FILE, "r");
	char		line[MAXPGPATH];
	XLogRecPtr	start = InvalidXLogRecPtr;

	if (f == NULL)
		return InvalidXLogRecPtr;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		uint32		hi,
					lo;

		if (sscanf(line, "START WAL LOCATION: %X/%X", &hi, &lo) == 2)
		{
			start = ((uint64) hi << 32) | lo;
			break;
		}
	}
	FreeFile(f);
	return start;
}

/*
 * What pmwal writes into the recovery.signal it creates (PostgreSQL ignores
 * the content), so that a later start can tell it from one an operator
 * created for a point-in-time recovery.
 */
#define OWN_SIGNAL_TEXT "created by pmwal: end recovery on a new timeline after a power cut\n"

static bool
own_recovery_signal(void)
{
	char		buf[sizeof(OWN_SIGNAL_TEXT)] = {0};
	int			fd = open(RECOVERY_SIGNAL_FILE, O_RDONLY | PG_BINARY | O_CLOEXEC);
	ssize_t		n;

	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n == (ssize_t) strlen(OWN_SIGNAL_TEXT) && strcmp(buf, OWN_SIGNAL_TEXT) == 0;
}

/*
 * The archive recovery pmwal asks for only has to end on a new timeline:
 * it needs a restore_command (one that finds nothing, when none is set),
 * and must not stop at a recovery target left in postgresql.conf from an
 * earlier point-in-time recovery (stock crash recovery ignores those).  It
 * replays this server's own timeline, the one crash recovery would
 * ('current'), not the newest one an archive shared with a promoted
 * standby knows.  Set for this postmaster's life; the settings matter only
 * in recovery.
 */
static void
own_recovery_settings(void)
{
	static const char *const targets[] = {
		"recovery_target", "recovery_target_lsn", "recovery_target_name",
		"recovery_target_time", "recovery_target_xid"
	};
	const char *restore_command = GetConfigOption("restore_command", false, false);

	if (restore_command == NULL || restore_command[0] == '\0')
		SetConfigOption("restore_command", "false", PGC_POSTMASTER, PGC_S_OVERRIDE);
	for (size_t i = 0; i < lengthof(targets); i++)
	{
		const char *value = GetConfigOption(targets[i], true, false);

		if (value != NULL && value[0] != '\0')
		{
			ereport(LOG,
					(errmsg("pmwal: recovery ignores %s = '%s' (the recovery pmwal asked for only ends on a new timeline)",
							targets[i], value)));
			SetConfigOption(targets[i], "", PGC_POSTMASTER, PGC_S_OVERRIDE);
		}
	}
	SetConfigOption("recovery_target_timeline", "current", PGC_POSTMASTER, PGC_S_OVERRIDE);

	/*
	 * A standalone backend (pg_rewind's "postgres --single") cannot run
	 * archive recovery as a hot standby: PostgreSQL 18 then takes a second
	 * sinval slot for itself (FATAL "sinval slot for backend 0 is already
	 * in use").  Nothing could connect anyway.
	 */
	if (!IsUnderPostmaster && !IsPostmasterEnvironment)
		SetConfigOption("hot_standby", "off", PGC_POSTMASTER, PGC_S_OVERRIDE);
}

/*
 * A write window may have been open at the crash: WAL beyond what survives
 * may be on a standby or in the archive.  End recovery on a new timeline.
 *
 * A primary promoted since its last checkpoint still has the minimum
 * recovery point its promotion left in pg_control (the first checkpoint
 * clears it).  Crash recovery ignores it, but archive recovery would take
 * it for the point of consistency and check there for references to pages
 * that WAL after it removes (PANIC "WAL contains references to invalid
 * pages").  It is cleared first, as that checkpoint would have, keeping
 * its timeline, in pg_control and in the copy in shared memory that
 * PostgreSQL read before this restore runs: recovery then replays pg_wal
 * to its end before it ends on a new timeline, as crash recovery would.
 */
static void
end_recovery_on_new_timeline(ControlFileData *control, XLogRecPtr exposed_at)
{
	ControlFileData *shared;
	bool		found;
	struct stat st;

	if (stat(STANDBY_SIGNAL_FILE, &st) == 0)
		return;					/* a standby follows its primary's timeline */
	if (control->minRecoveryPoint != InvalidXLogRecPtr &&
		(control->state == DB_IN_PRODUCTION || control->state == DB_IN_CRASH_RECOVERY ||
		 control->state == DB_SHUTDOWNING))
	{
		ereport(LOG,
				(errmsg("pmwal clears the minimum recovery point %X/%X left in pg_control by a promotion, before recovery ends on a new timeline",
						LSN_FORMAT_ARGS(control->minRecoveryPoint))));
		control->minRecoveryPoint = InvalidXLogRecPtr;
		update_controlfile(DataDir, control, true);
		/* the startup process reads the copy PostgreSQL made at start */
		shared = ShmemInitStruct("Control File", sizeof(ControlFileData), &found);
		Assert(found);
		shared->minRecoveryPoint = InvalidXLogRecPtr;
	}
	if (stat(RECOVERY_SIGNAL_FILE, &st) != 0)
	{
		int			fd;

		pmwal_reserve_promotion_timeline(control, exposed_at);
		fd = open(RECOVERY_SIGNAL_FILE, O_WRONLY | O_CREAT | O_EXCL | PG_BINARY | O_CLOEXEC,
							  pg_file_create_mode);

		if (fd < 0)
			ereport(FATAL,
					(errcode_for_file_access(),
					 errmsg("could not create file \"%s\": %m", RECOVERY_SIGNAL_FILE)));
		write_fully(fd, OWN_SIGNAL_TEXT, strlen(OWN_SIGNAL_TEXT), 0, RECOVERY_SIGNAL_FILE);
		pmwal_fsync_fd(fd, RECOVERY_SIGNAL_FILE, FATAL);
		close(fd);
		pmwal_fsync_path(".", true, FATAL);
		own_recovery_settings();
	}
	ereport(WARNING,
			(errmsg("pmwal: WAL after %X/%X may have reached standbys or the WAL archive without surviving here; recovery will end on a new timeline",
					LSN_FORMAT_ARGS(exposed_at)),
			 errdetail("The server stopped while a commit had written WAL without fsync that the ring did not hold yet; walsenders and the archiver may have sent it."),
			 errhint("A standby or archive that holds WAL beyond the end of this recovery will refuse the new timeline; rebuild such a standby or rewind it with pg_rewind.")));
}

/*
 * Restore the ring into pg_wal if it holds WAL that recovery needs.
 * "crash_restart": the postmaster reinitialises after a process crashed
 * (the page cache kept everything written).
 */
void
pmwal_restore(bool crash_restart)
{
	RingHeader *hdr;
	ControlFileData *control;
	bool		crc_ok;
	bool		clean;
	XLogRecPtr	tail;
	XLogRecPtr	head;
	XLogRecPtr	last_end;
	XLogRecPtr	exposed;
	XLogRecPtr	redo;
	XLogRecPtr	redo_seg_start;
	XLogRecPtr	from;
	XLogRecPtr	verified;
	XLogRecPtr	prev;
	XLogSegNo	redo_seg;
	TimeLineID	tli;
	uint64		nrecords;
	int			nsegs;
	struct stat st;
	instr_time	start;
	instr_time	elapsed;

	if (pmwal_ring == NULL)
		return;
	/*
	 * A start after one that asked for a new timeline and did not finish
	 * (unless an operator has made the node a standby since).
	 */
	if (!crash_restart && own_recovery_signal() && stat(STANDBY_SIGNAL_FILE, &st) != 0)
		own_recovery_settings();
	hdr = pmwal_ring->hdr;
	control = get_controlfile(DataDir, &crc_ok);
	redo = control->checkPointCopy.redo;
	clean = control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY;
	XLByteToSeg(redo, redo_seg, wal_segment_size);
	redo_seg_start = redo - XLogSegmentOffset(redo, wal_segment_size);
	exposed = hdr->state.v == RING_STATE_IN_USE ? hdr->exposed.v : 0;
	tail = hdr->tail.v;
	head = hdr->head.v;
	last_end = hdr->last_end.v;

	/*
	 * Recovery needs nothing before the redo point, and the restore makes
	 * everything after it durable: that is where pmwal's syncs start.
	 */
	pmwal_advance(&pmwal_shared->durable_lsn, redo);

	if (!ring_holds_wal(hdr))
	{
		if (!clean)
			sync_segments_from(redo_seg, FATAL);
		if (exposed != 0)
		{
			if (!crash_restart)
				end_recovery_on_new_timeline(control, exposed);
			empty_ring(hdr);
		}
		pfree(control);
		return;
	}

	if (stat(BACKUP_LABEL_FILE, &st) == 0)
	{
		XLogRecPtr	backup_start = backup_label_start();

		if (head <= backup_start)
		{
			ereport(LOG,
					(errmsg("pmwal ring \"%s\" holds only WAL older than the base backup this data directory is restored from; not restored", pmwal_path),
					 errdetail("The ring holds %X/%X to %X/%X; the backup starts at %X/%X (\"%s\").",
							   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
							   LSN_FORMAT_ARGS(backup_start), BACKUP_LABEL_FILE)));
			empty_ring(hdr);
			pfree(control);
			return;
		}
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" holds WAL, but this data directory is being restored from a base backup; nothing was restored", pmwal_path),
				 errdetail("The ring holds %X/%X to %X/%X, and \"%s\" exists.  That WAL may belong to the server the backup was taken from.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), BACKUP_LABEL_FILE),
				 errhint("If that server is gone and its archive lacks this WAL, save it with \"pmwal_ctl dump\" into the archive; then \"pmwal_ctl reset --discard-wal\", or give this server another pmwal.path.")));
	}

	pmwal_restore_history_init(control);
	if (head <= redo_seg_start)
	{
		require_checkpoint_record(control, tail, head);
		ereport(LOG,
				(errmsg("pmwal ring \"%s\" holds only WAL older than the last checkpoint; not restored", pmwal_path),
				 errdetail("The ring holds %X/%X to %X/%X; the checkpoint's redo point is %X/%X.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(redo))));
		empty_ring(hdr);
		pfree(control);
		return;
	}
	tli = pmwal_restore_timeline(control, hdr->st.s.timeline, tail, head);
	if (tli == 0)
	{
		require_checkpoint_record(control, tail, head);
		ereport(LOG,
				(errmsg("pmwal ring \"%s\" holds only WAL of timeline %u that the cluster's history contains before its last checkpoint; not restored",
						pmwal_path, hdr->st.s.timeline),
				 errdetail("The ring holds %X/%X to %X/%X; the checkpoint's redo point is %X/%X.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), LSN_FORMAT_ARGS(redo))));
		empty_ring(hdr);
		pfree(control);
		return;
	}

	INSTR_TIME_SET_CURRENT(start);
	prev = verify_ring(control->system_identifier, tail, head, last_end, &nrecords, &verified);
	if (tail > redo && prev != InvalidXLogRecPtr)
		check_connects(tail, prev);
	check_same_history(control, tail, verified);

	/*
	 * A checkpoint can put its redo point into a segment the flusher has
	 * not synced yet, so restore from the start of that segment where the
	 * ring holds it; where the tail lies after it, the flusher synced the
	 * segment before the tail moved into it.
	 */
	from = RING_RESTORE_FROM(tail, redo, wal_segment_size);
	nsegs = write_segments(from, verified, tli);
	PMWAL_PAUSE_POINT("restore_written");
	if (!clean)
		sync_segments_from(Min(from, redo) / wal_segment_size, FATAL);
	else
		pmwal_fsync_path(XLOGDIR, true, FATAL);
	require_checkpoint_record(control, tail, head);
	if (exposed != 0 && !crash_restart)
		end_recovery_on_new_timeline(control, exposed);
	PMWAL_PAUSE_POINT("restore_before_empty");
	empty_ring(hdr);

	INSTR_TIME_SET_CURRENT(elapsed);
	INSTR_TIME_SUBTRACT(elapsed, start);
	ereport(LOG,
			(errmsg("pmwal restored WAL %X/%X to %X/%X from the ring into pg_wal: %llu bytes, %llu records, %d segments, %.3f ms",
					LSN_FORMAT_ARGS(from), LSN_FORMAT_ARGS(verified),
					(unsigned long long) (verified - from), (unsigned long long) nrecords,
					nsegs, INSTR_TIME_GET_MILLISEC(elapsed))));
	pfree(control);
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
 * Under fsync = off, PostgreSQL's shutdown checkpoint was not synced, and
 * pg_control may name it after a power cut: sync pg_wal for real.
 *
 * An immediate shutdown (or a crash with restart_after_crash off) leaves
 * the ring holding WAL, maybe exposed.  Once no other server process is
 * left, everything any of them wrote -- all the ring holds, all a walsender
 * or the archiver could have sent -- is in the page cache: synced now, it
 * is durable in pg_wal, and the ring is emptied.  The next start then
 * neither restores nor ends recovery on a new timeline, as after a
 * crash-restart.  Not at a crash-restart's own reset of shared memory
 * (no proc_exit): its restore follows at once.  Not after a PANIC either:
 * a failed fsync (the usual reason for one) leaves pages in the page cache
 * that look clean but never reached the disk, and a second fsync reports
 * success; the next start's restore writes the ring's WAL anew instead.
 * If a sync fails here, the ring stays too.
 */
void
pmwal_exit_sync(int code, Datum arg)
{
	ControlFileData *control;
	bool		crc_ok;
	XLogSegNo	first;
	RingHeader *hdr;
	bool		ring_needed;

	if (pmwal_ring == NULL)
		return;
	hdr = pmwal_ring->hdr;
	ring_needed = hdr->state.v == RING_STATE_IN_USE &&
		(ring_holds_wal(hdr) || hdr->exposed.v != 0) &&
		proc_exit_inprogress && last_process_attached() &&
		pg_atomic_read_u32(&pmwal_shared->panicked) == 0;
	if (enableFsync && !ring_needed)
		return;
	control = get_controlfile(DataDir, &crc_ok);
	XLByteToSeg(control->checkPointCopy.redo, first, wal_segment_size);
	if (sync_segments_from(first, WARNING) && ring_needed)
	{
		if (ring_set_word(&hdr->tail.v, hdr->head.v) &&
			ring_set_word(&hdr->exposed.v, 0) &&
			ring_set_word(&hdr->state.v, RING_STATE_EMPTY))
			ereport(LOG,
					(errmsg("pmwal synced pg_wal from %X/%X after the last server process exited; the ring is empty",
							LSN_FORMAT_ARGS(control->checkPointCopy.redo))));
		else
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_path)));
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

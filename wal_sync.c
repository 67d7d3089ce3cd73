/*-------------------------------------------------------------------------
 *
 * wal_sync.c
 *		Making WAL durable in pg_wal: syncing segment files and pg_wal/, and
 *		preparing the segments that commits will write next.
 *
 * WAL that pmwal let PostgreSQL write without fsync is synced here, by the
 * flusher in large batches, and by a committer whose commit could not go
 * through the ring.  PostgreSQL itself never syncs these segments: its
 * flush pointer already claims them flushed, and segments created or
 * finished inside an XLogFlush without fsync never had their file or
 * pg_wal/ entry synced either.  So that no write without fsync has to
 * create a segment file, the flusher prepares the segments ahead of the
 * insert position (pmwal_prepare_segments): created by PostgreSQL's own
 * XLogFileInit, synced, and pg_wal/ synced; a commit whose WAL would reach
 * further is flushed the ordinary way (FALLBACK_SEGMENT).
 *
 * Every sync here is the system call itself, never pg_fsync() and friends:
 * those do nothing under fsync = off, and pmwal empties the ring or moves
 * its tail on the strength of these syncs.
 *
 * durable_lsn only moves to record boundaries, because the ring may be
 * re-anchored there.  A segment that a completed checkpoint removed or
 * recycled is skipped: nothing in it is needed by recovery any more.
 * Failing to sync WAL is a PANIC, as it is in PostgreSQL.
 *
 * Locking: sync_lock serialises syncs and segment preparation; a waiter
 * often finds its WAL synced by the holder.  ring_lock is taken after
 * sync_lock, never before.
 *
 * IDENTIFICATION
 *		wal_sync.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/rmgr.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"

#include "pmwal.h"

/*
 * fsync (or fdatasync, for a file) "fd" for real, whatever the fsync
 * setting says; failure is reported at "elevel" (and false returned, when
 * that is below ERROR).
 */
bool
pmwal_fsync_fd(int fd, const char *path, int elevel)
{
	int			rc;

	pgstat_report_wait_start(WAIT_EVENT_WAL_SYNC);
	rc = fdatasync(fd);
	pgstat_report_wait_end();
	if (rc != 0)
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", path)));
	return rc == 0;
}

/* Like pmwal_fsync_fd, by path; "isdir" for a directory. */
bool
pmwal_fsync_path(const char *path, bool isdir, int elevel)
{
	int			fd = open(path, (isdir ? O_RDONLY : O_RDWR) | PG_BINARY | O_CLOEXEC);
	bool		ok;

	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
		return false;
	}
	if (isdir)
	{
		ok = fsync(fd) == 0;
		if (!ok)
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not fsync file \"%s\": %m", path)));
	}
	else
		ok = pmwal_fsync_fd(fd, path, elevel);
	close(fd);
	return ok;
}

/* fdatasync one segment; false if a checkpoint removed it meanwhile. */
static bool
sync_segment(XLogSegNo segno, TimeLineID tli)
{
	char		path[MAXPGPATH];
	int			fd;

	XLogFilePath(path, tli, segno, wal_segment_size);
	fd = open(path, O_RDWR | PG_BINARY | O_CLOEXEC);
	if (fd < 0)
	{
		if (errno == ENOENT && segno <= XLogGetLastRemovedSegno())
			return false;
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	pmwal_fsync_fd(fd, path, PANIC);
	close(fd);
	pmwal_count(CTR_SEGMENTS_SYNCED, 1);
	return true;
}

static TimeLineID
current_tli(void)
{
	return pmwal_shared->tli ? pmwal_shared->tli : GetWALInsertionTimeLine();
}

/* With sync_lock held: make pg_wal/'s entries up to "segno" durable. */
static void
sync_directory_upto(XLogSegNo segno)
{
	if (segno <= pmwal_shared->dir_synced_segno)
		return;
	pmwal_fsync_path(XLOGDIR, true, PANIC);
	pmwal_shared->dir_synced_segno = segno;
	pmwal_count(CTR_DIR_SYNCS, 1);
}

/*
 * Sync every segment holding WAL between durable_lsn and "upto", and
 * pg_wal/ when one of them has not been covered by a directory sync yet;
 * then move durable_lsn to "boundary", a record boundary <= upto (or
 * InvalidXLogRecPtr when the caller knows none).
 */
void
pmwal_sync_upto(XLogRecPtr upto, XLogRecPtr boundary)
{
	XLogRecPtr	durable;
	XLogSegNo	first;
	XLogSegNo	last;
	TimeLineID	tli;

	Assert(boundary == InvalidXLogRecPtr || boundary <= upto);
	LWLockAcquire(pmwal_shared->sync_lock, LW_EXCLUSIVE);
	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	if (upto <= durable)
	{
		LWLockRelease(pmwal_shared->sync_lock);
		return;
	}
	tli = current_tli();
	XLByteToSeg(durable, first, wal_segment_size);
	XLByteToSeg(upto - 1, last, wal_segment_size);
	first = Max(first, XLogGetLastRemovedSegno() + 1);
	for (XLogSegNo segno = first; segno <= last; segno++)
		(void) sync_segment(segno, tli);
	sync_directory_upto(last);
	if (boundary != InvalidXLogRecPtr)
		pmwal_advance(&pmwal_shared->durable_lsn, boundary);
	pmwal_count(CTR_SYNCS, 1);
	LWLockRelease(pmwal_shared->sync_lock);

	if (pmwal_ring != NULL && boundary != InvalidXLogRecPtr)
	{
		pmwal_advance(&pmwal_shared->ack_lsn, boundary);
		pmwal_advance(&pmwal_shared->cover_lsn, boundary);
	}
}

/*
 * For WAL up to "end" that PostgreSQL flushed itself: make sure it
 * survives a power cut.  That flush was a real one -- and then nothing
 * needs doing -- unless a write without fsync got ahead of it and made it
 * a no-op; the bytes of such a write are in the ring once its window
 * closes.  Otherwise cover "end" with the ring (without waiting) or with a
 * sync.  "end" is the end of a commit record when is_commit.
 */
void
pmwal_ensure_durable(XLogRecPtr end, bool is_commit)
{
	int			rc;

	if (end <= pg_atomic_read_u64(is_commit ? &pmwal_shared->ack_lsn
								  : &pmwal_shared->cover_lsn))
		return;
	if (enableFsync && pg_atomic_read_u32(&pmwal_shared->writes_open) == 0)
	{
		pg_memory_barrier();
		if (pg_atomic_read_u64(&pmwal_shared->nosync_upto) <=
			pg_atomic_read_u64(&pmwal_shared->cover_lsn))
			return;
	}
	rc = ring_append(end, is_commit, COPY_COVER);
	if (rc != RING_APPEND_OK)
		pmwal_sync_upto(end, is_commit ? end : InvalidXLogRecPtr);
}

/*
 * The flusher: make sure pg_wal/ holds the segment of "insert" and the one
 * after it on timeline "tli", created, synced and with a synced directory
 * entry, and publish that in prepared_segno.  Returns the number of
 * segments prepared.  XLogFileInit creates a segment the way PostgreSQL
 * does (or opens the one a checkpoint recycled); its own syncs depend on
 * the fsync setting, so the file and pg_wal/ are synced here again.
 */
int
pmwal_prepare_segments(XLogRecPtr insert, TimeLineID tli)
{
	XLogSegNo	first;
	XLogSegNo	target;
	XLogSegNo	have = pg_atomic_read_u64(&pmwal_shared->prepared_segno);
	int			n = 0;

	XLByteToSeg(insert, first, wal_segment_size);
	target = first + 1;
	if (have >= target)
		return 0;
	first = Max(first, have + 1);

	LWLockAcquire(pmwal_shared->sync_lock, LW_EXCLUSIVE);
	for (XLogSegNo segno = first; segno <= target; segno++)
	{
		char		path[MAXPGPATH];
		int			fd = XLogFileInit(segno, tli);

		XLogFilePath(path, tli, segno, wal_segment_size);
		pmwal_fsync_fd(fd, path, PANIC);
		close(fd);
		n++;
	}
	pmwal_fsync_path(XLOGDIR, true, PANIC);
	pmwal_shared->dir_synced_segno = Max(pmwal_shared->dir_synced_segno, target);
	pmwal_count(CTR_DIR_SYNCS, 1);
	pg_atomic_write_u64(&pmwal_shared->prepared_segno, target);
	LWLockRelease(pmwal_shared->sync_lock);
	pmwal_count(CTR_SEGMENTS_PREPARED, n);
	return n;
}

/*
 * Write a WAL record that does nothing and return its end: a record
 * boundary to anchor the ring at when no commit provides one.
 */
XLogRecPtr
pmwal_write_boundary(void)
{
	static char marker[] = "pmwal";

	XLogBeginInsert();
	XLogRegisterData(marker, sizeof(marker));
	return XLogInsert(RM_XLOG_ID, XLOG_NOOP);
}

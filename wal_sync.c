/*-------------------------------------------------------------------------
 *
 * wal_sync.c
 *		Making WAL durable in pg_wal: syncing segment files and pg_wal/.
 *
 * WAL that pmwal let PostgreSQL write without fsync is synced here, by the
 * flusher in large batches, and by a committer whose commit could not go
 * through the ring (the fallback).  PostgreSQL itself never syncs these
 * segments: its flush pointer already claims them flushed, and segments
 * created or finished inside an XLogFlush without fsync never had their
 * file or pg_wal/ entry synced either.
 *
 * durable_lsn only moves to record boundaries, because the ring may be
 * re-anchored there.  A segment that a completed checkpoint removed or
 * recycled is skipped: nothing in it is needed by recovery any more.
 * Failing to sync WAL is a PANIC, as it is in PostgreSQL.
 *
 * Locking: sync_lock serialises syncs; a waiter often finds its WAL synced
 * by the holder.  ring_lock is taken after sync_lock, never before.
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
	pgstat_report_wait_start(WAIT_EVENT_WAL_SYNC);
	if (pg_fdatasync(fd) != 0)
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not fdatasync file \"%s\": %m", path)));
	pgstat_report_wait_end();
	close(fd);
	pmwal_count(CTR_SEGMENTS_SYNCED, 1);
	return true;
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
	tli = pmwal_shared->tli ? pmwal_shared->tli : GetWALInsertionTimeLine();
	XLByteToSeg(durable, first, wal_segment_size);
	XLByteToSeg(upto - 1, last, wal_segment_size);
	first = Max(first, XLogGetLastRemovedSegno() + 1);
	for (XLogSegNo segno = first; segno <= last; segno++)
		(void) sync_segment(segno, tli);

	if (last > pmwal_shared->dir_synced_segno)
	{
		fsync_fname_ext(XLOGDIR, true, false, PANIC);
		pmwal_shared->dir_synced_segno = last;
		pmwal_count(CTR_DIR_SYNCS, 1);
	}
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
 * Make the WAL up to "end" durable by syncing pg_wal, because the ring
 * could not take it.  "end" is the end of a commit record or, when
 * is_boundary is false, only a position that must be covered.
 */
void
pmwal_fallback(XLogRecPtr end, bool is_boundary, PmwalFallback reason)
{
	pmwal_count(CTR_FALLBACK_FIRST + reason, 1);
	pmwal_sync_upto(end, is_boundary ? end : InvalidXLogRecPtr);
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

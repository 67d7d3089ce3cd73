/*-------------------------------------------------------------------------
 *
 * flusher.c
 *		The pmwal flusher: a background worker that makes the WAL behind
 *		the ring durable in pg_wal and frees the ring's space.
 *
 * Commits only copy WAL into the ring; nobody else syncs it (see
 * wal_sync.c).  The flusher fdatasyncs the segments behind the ring's head
 * in large batches -- when a segment is complete, when the ring is half
 * full, when pmwal.flush_interval has passed, or at once when a committer
 * waits for room -- and then moves the ring's tail.  It also copies WAL
 * that reached the flush pointer without a commit carrying it into the ring
 * (a backend that exited mid-copy, flushes by other processes), so that the
 * ring always covers the flush pointer.
 *
 * Commits use the ring only while the flusher runs: it anchors the ring
 * after recovery at a point it has really synced, and drains it (syncs
 * everything, leaves the ring empty) when pmwal.enabled is turned off and
 * when it is asked to shut down.  If it dies, commits fall back to syncing
 * pg_wal until it is back.
 *
 * IDENTIFICATION
 *		flusher.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "pmwal.h"

/* How often the flusher looks for WAL to copy while WAL is being written. */
#define BUSY_POLL_MS	10

/* After this long without new WAL, it only wakes every flush_interval. */
#define IDLE_AFTER_MS	1000

void
pmwal_flusher_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strcpy(worker.bgw_library_name, "pmwal");
	strcpy(worker.bgw_function_name, "pmwal_flusher_main");
	strcpy(worker.bgw_name, "pmwal flusher");
	strcpy(worker.bgw_type, "pmwal flusher");
	RegisterBackgroundWorker(&worker);
}

static bool restart_ring(bool accept);

/* Whatever way the flusher exits, commits must stop relying on it. */
static void
flusher_exit(int code, Datum arg)
{
	pg_atomic_write_u32(&pmwal_shared->accepting, 0);
	pmwal_shared->flusher_latch = NULL;
	pmwal_shared->flusher_pid = 0;
	ConditionVariableBroadcast(&pmwal_shared->space_cv);
}

/*
 * Sync all WAL written so far and return a record boundary before which
 * everything is durable: the end of a record we write for the purpose.
 */
static XLogRecPtr
sync_to_new_boundary(void)
{
	XLogRecPtr	boundary = pmwal_write_boundary();

	XLogFlush(boundary);

	/*
	 * Until pmwal first writes WAL without fsync in this server life, all
	 * WAL was flushed by PostgreSQL itself, segment files and pg_wal/
	 * entries included: the XLogFlush above made the boundary durable.
	 */
	if (pg_atomic_read_u64(&pmwal_shared->nosync_upto) == 0)
		pmwal_advance(&pmwal_shared->durable_lsn, boundary);
	else
		pmwal_sync_upto(boundary, boundary);
	return boundary;
}

/*
 * Start the ring over, empty, at a freshly synced boundary.  With
 * "accept", commits may use it from now on.
 */
static bool
restart_ring(bool accept)
{
	XLogRecPtr	boundary = sync_to_new_boundary();
	RingHeader *hdr = pmwal_ring->hdr;
	TimeLineID	tli = GetWALInsertionTimeLine();
	int			rc;

	PMWAL_PAUSE_POINT("restart_after_sync");

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	pmwal_shared->tli = tli;
	if (hdr->st.s.timeline != tli)
	{
		/* The ring must be empty before its header may be rewritten. */
		(void) ring_set_word(&hdr->tail.v, hdr->head.v);
		ring_write_static(hdr->st.s.system_identifier, tli, pmwal_ring->capacity);
		ereport(LOG,
				(errmsg("pmwal ring now holds WAL of timeline %u", tli)));
	}
	rc = ring_reanchor_locked(boundary);
	if (rc == RING_APPEND_OK)
		pg_atomic_write_u32(&pmwal_shared->accepting, accept ? 1 : 0);
	LWLockRelease(pmwal_shared->ring_lock);
	PMWAL_PAUSE_POINT("restart_done");
	if (rc != RING_APPEND_OK)
		ereport(LOG,
				(errmsg("pmwal could not anchor the ring at %X/%X (%s); will retry",
						LSN_FORMAT_ARGS(boundary),
						pmwal_fallback_name((PmwalFallback) rc))));
	return rc == RING_APPEND_OK;
}

/* Stop taking commits, sync everything and leave the ring empty. */
static void
drain_ring(void)
{
	XLogRecPtr	boundary;

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	pg_atomic_write_u32(&pmwal_shared->accepting, 0);
	LWLockRelease(pmwal_shared->ring_lock);

	boundary = sync_to_new_boundary();
	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	(void) ring_set_word(&pmwal_ring->hdr->tail.v, boundary);
	(void) ring_set_word(&pmwal_ring->hdr->head.v, boundary);
	(void) ring_set_word(&pmwal_ring->hdr->last_end.v, boundary);
	(void) ring_set_word(&pmwal_ring->hdr->state.v, RING_STATE_EMPTY);
	ring_publish_acks();
	LWLockRelease(pmwal_shared->ring_lock);
	ConditionVariableBroadcast(&pmwal_shared->space_cv);
}

/*
 * Sync the segments behind the head and move the tail to the newest record
 * boundary that is now durable.
 */
static void
sync_and_free(void)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	head;
	XLogRecPtr	last_end;
	bool		stuck;

	LWLockAcquire(pmwal_shared->ring_lock, LW_SHARED);
	head = hdr->head.v;
	last_end = hdr->last_end.v;
	LWLockRelease(pmwal_shared->ring_lock);

	pmwal_sync_upto(head, last_end);

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	if (last_end > hdr->tail.v && last_end <= hdr->head.v &&
		last_end <= pg_atomic_read_u64(&pmwal_shared->durable_lsn))
		(void) ring_set_word(&hdr->tail.v, last_end);
	stuck = hdr->head.v - RING_TAIL_PAGE(hdr->tail.v) >= pmwal_ring->capacity / 2;
	LWLockRelease(pmwal_shared->ring_lock);

	/*
	 * Without commits, no record boundary arrives to move the tail to; make
	 * one.
	 */
	if (stuck)
		(void) restart_ring(true);
	ConditionVariableBroadcast(&pmwal_shared->space_cv);
}

/*
 * Copy WAL up to "flush" that no commit carried into the ring.  The flusher
 * never waits for room it should make itself: when the ring is full or the
 * gap is too large, it syncs everything and starts the ring over.
 */
static void
copy_gap(XLogRecPtr flush)
{
	int			rc;

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	rc = ring_copy_locked(flush, false);
	LWLockRelease(pmwal_shared->ring_lock);
	if (rc == RING_NEED_SPACE)
	{
		sync_and_free();
		LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
		rc = ring_copy_locked(flush, false);
		LWLockRelease(pmwal_shared->ring_lock);
	}
	if (rc != RING_APPEND_OK)
		(void) restart_ring(true);
}

/* Is it time to sync?  See the file header for the triggers. */
static bool
sync_due(TimestampTz last_sync)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	XLogRecPtr	head = hdr->head.v;
	XLogSegNo	head_seg;
	XLogSegNo	durable_seg;

	if (head <= durable)
		return false;
	if (pg_atomic_read_u32(&pmwal_shared->space_waiters) > 0)
		return true;
	if (head - RING_TAIL_PAGE(hdr->tail.v) >= pmwal_ring->capacity / 2)
		return true;
	XLByteToSeg(head, head_seg, wal_segment_size);
	XLByteToSeg(durable, durable_seg, wal_segment_size);
	if (head_seg > durable_seg)
		return true;
	return TimestampDifferenceExceeds(last_sync, GetCurrentTimestamp(),
									  pmwal_flush_interval);
}

void
pmwal_flusher_main(Datum main_arg)
{
	TimestampTz last_sync = GetCurrentTimestamp();
	TimestampTz last_activity = last_sync;
	XLogRecPtr	last_flush = InvalidXLogRecPtr;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (pmwal_ring == NULL)
		proc_exit(0);			/* nothing to do; don't restart */

	before_shmem_exit(flusher_exit, 0);
	pmwal_shared->flusher_pid = MyProcPid;
	pmwal_shared->flusher_latch = MyLatch;

	for (;;)
	{
		bool		accepting;
		XLogRecPtr	flush;
		long		timeout;

		ResetLatch(MyLatch);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (ShutdownRequestPending)
			break;

		accepting = pg_atomic_read_u32(&pmwal_shared->accepting) != 0;
		if (!accepting && pmwal_enabled && !pmwal_sync_method_conflicts())
		{
			if (restart_ring(true))
				ereport(LOG,
						(errmsg("pmwal ring \"%s\" anchored at %X/%X; commits are made durable through it",
								pmwal_path, LSN_FORMAT_ARGS(pmwal_ring->hdr->head.v))));
		}
		else if (accepting && (!pmwal_enabled || pmwal_sync_method_conflicts()))
		{
			drain_ring();
			ereport(LOG,
					(errmsg("pmwal drained the ring; commits are synced to pg_wal until it is enabled again")));
		}
		else if (accepting)
		{
			/* Cover WAL that reached the flush pointer without a commit. */
			flush = GetFlushRecPtr(NULL);
			if (flush > pg_atomic_read_u64(&pmwal_shared->cover_lsn))
				copy_gap(flush);
			if (sync_due(last_sync))
			{
				sync_and_free();
				last_sync = GetCurrentTimestamp();
			}
			if (flush != last_flush)
			{
				last_flush = flush;
				last_activity = GetCurrentTimestamp();
			}
		}

		timeout = pmwal_flush_interval;
		if (!TimestampDifferenceExceeds(last_activity, GetCurrentTimestamp(), IDLE_AFTER_MS))
			timeout = Min(timeout, BUSY_POLL_MS);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	}

	/*
	 * Leave nothing behind that only the ring holds.  Exit with 1, so that
	 * the postmaster starts the flusher again if the server keeps running
	 * (someone terminated just the flusher); at shutdown it does not.
	 */
	drain_ring();
	ring_close_segment();
	ereport(LOG,
			(errmsg("pmwal drained the ring at %X/%X before the flusher exits",
					LSN_FORMAT_ARGS(pmwal_ring->hdr->head.v))));
	proc_exit(1);
}

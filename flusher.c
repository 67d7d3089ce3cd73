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
 * (a committer descheduled or killed after its write, flushes by other
 * processes), so that the ring always covers the flush pointer; it
 * prepares the segments commits will write next (wal_sync.c); and it
 * clears the ring's exposure mark when no write window is open
 * (wal_copy.c).
 *
 * Commits use the ring only while the flusher runs: it anchors the ring
 * after recovery at a point it has really synced, and drains it (syncs
 * everything, leaves the ring empty) when pmwal.enabled is turned off and
 * when it is asked to shut down.  If it dies -- killed, or after an ERROR,
 * when it exits with 1 and the postmaster starts it again a second later --
 * commits fall back to flushing pg_wal until it is back; the ring keeps
 * what it holds, and windows already open still copy into it.
 *
 * IDENTIFICATION
 *		flusher.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/timeline.h"
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
 * The sync is pmwal's own, real whatever the fsync setting.
 */
static XLogRecPtr
sync_to_new_boundary(void)
{
	XLogRecPtr	boundary = pmwal_write_boundary();

	XLogFlush(boundary);
	pmwal_sync_upto(boundary, boundary);
	return boundary;
}

/*
 * Stop new write windows, wait for the open ones, sync everything and
 * leave the ring empty.  Someone making sure flushed WAL is covered may
 * still have copied past the boundary; then sync again.
 */
static void
drain_ring(void)
{
	RingHeader *hdr = pmwal_ring->hdr;

	pg_atomic_write_u32(&pmwal_shared->accepting, 0);
	wait_for_writes_closed();
	for (;;)
	{
		XLogRecPtr	boundary = sync_to_new_boundary();
		bool		done = false;

		PMWAL_PAUSE_POINT("drain_after_sync");
		LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
		if (hdr->state.v != RING_STATE_IN_USE)
			done = true;		/* never anchored since the restore emptied it */
		else if (hdr->head.v <= boundary)
		{
			(void) ring_reanchor_locked(boundary);
			(void) ring_set_word(&hdr->state.v, RING_STATE_EMPTY);
			ring_publish_acks();
			done = true;
		}
		LWLockRelease(pmwal_shared->ring_lock);
		if (done)
			break;
	}
	exposure_clear_if_quiet();
	ConditionVariableBroadcast(&pmwal_shared->space_cv);
}

/*
 * The ring holds WAL of one timeline.  When the insertion timeline differs
 * (after a promotion), the ring is drained, and its header rewritten while
 * it is empty and no window is open.  The new timeline's segment files
 * begin where it branched off: pmwal syncs from there on (what came before
 * is the older timelines' WAL, in their files, which recovery wrote).
 */
/* Where timeline "tli" branched off its parent (0 for the first one). */
static XLogRecPtr
timeline_begin(TimeLineID tli)
{
	List	   *history = readTimeLineHistory(tli);
	XLogRecPtr	begin = ((TimeLineHistoryEntry *) linitial(history))->begin;

	list_free_deep(history);
	return begin;
}

static void
follow_timeline(TimeLineID tli)
{
	RingHeader *hdr = pmwal_ring->hdr;

	if (pmwal_shared->tli == tli && hdr->st.s.timeline == tli)
		return;
	if (pg_atomic_read_u32(&pmwal_shared->accepting) || ring_holds_wal(hdr))
		drain_ring();
	wait_for_writes_closed();
	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	pmwal_shared->tli = tli;
	pg_atomic_write_u64(&pmwal_shared->prepared_segno, 0);
	pmwal_advance(&pmwal_shared->durable_lsn, timeline_begin(tli));
	if (hdr->st.s.timeline != tli)
	{
		ring_write_static(hdr->st.s.system_identifier, tli, pmwal_ring->capacity);
		ereport(LOG,
				(errmsg("pmwal ring now holds WAL of timeline %u", tli)));
	}
	LWLockRelease(pmwal_shared->ring_lock);
}

/*
 * Anchor the ring at a freshly synced boundary, or, when it already holds
 * WAL past it, only move its tail there (ring_reanchor_locked never moves
 * anything back: commits go on meanwhile).  With "accept", commits may use
 * it from now on.
 */
static bool
restart_ring(bool accept)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	XLogRecPtr	boundary;
	int			rc;

	follow_timeline(tli);
	(void) pmwal_prepare_segments(GetXLogInsertRecPtr(), tli);
	boundary = sync_to_new_boundary();
	PMWAL_PAUSE_POINT("restart_after_sync");

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	rc = ring_reanchor_locked(boundary);
	if (rc == RING_APPEND_OK && accept)
		pg_atomic_write_u32(&pmwal_shared->accepting, 1);
	LWLockRelease(pmwal_shared->ring_lock);
	PMWAL_PAUSE_POINT("restart_done");
	if (rc != RING_APPEND_OK)
		ereport(LOG,
				(errmsg("pmwal could not anchor the ring at %X/%X (%s); will retry",
						LSN_FORMAT_ARGS(boundary),
						pmwal_fallback_name((PmwalFallback) rc))));
	return rc == RING_APPEND_OK;
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
	PMWAL_PAUSE_POINT("free_after_sync");

	LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
	if (last_end <= pg_atomic_read_u64(&pmwal_shared->durable_lsn))
		(void) ring_reanchor_locked(last_end);
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
	rc = ring_copy_locked(flush, false, COPY_FLUSHER);
	LWLockRelease(pmwal_shared->ring_lock);
	if (rc == RING_NEED_SPACE)
	{
		sync_and_free();
		LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE);
		rc = ring_copy_locked(flush, false, COPY_FLUSHER);
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

/* At a reload: say what turning fsync off means now. */
static void
reload_config(void)
{
	bool		fsync_was = enableFsync;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	if (fsync_was && !enableFsync)
		ereport(WARNING,
				(errmsg("fsync is off, so PostgreSQL's own flushes and checkpoints are no longer durable"),
				 errdetail("pmwal keeps making commits durable through the ring and syncs pg_wal itself, but a power loss can leave data files and pg_control ahead of the WAL.")));
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
		bool		idle;
		XLogRecPtr	flush;
		long		timeout;

		ResetLatch(MyLatch);
		if (ConfigReloadPending)
			reload_config();
		if (ShutdownRequestPending)
			break;
		PMWAL_PAUSE_POINT("flusher_loop");

		accepting = pg_atomic_read_u32(&pmwal_shared->accepting) != 0;
		if (!accepting && pmwal_enabled && !pmwal_ring_unusable())
		{
			if (restart_ring(true))
				ereport(LOG,
						(errmsg("pmwal ring \"%s\" anchored at %X/%X; commits are made durable through it",
								pmwal_path, LSN_FORMAT_ARGS(pmwal_ring->hdr->head.v))));
		}
		else if (accepting && (!pmwal_enabled || pmwal_ring_unusable()))
		{
			drain_ring();
			ereport(LOG,
					(errmsg("pmwal drained the ring; commits are synced to pg_wal until it is enabled again")));
		}
		else if (accepting)
		{
			(void) pmwal_prepare_segments(GetXLogInsertRecPtr(), pmwal_shared->tli);
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
		exposure_clear_if_quiet();

		/*
		 * While WAL is being written, poll often: a committer descheduled
		 * after its write relies on this to have its WAL copied.  Idle,
		 * sleep until the next interval or until a committer wakes us.
		 */
		idle = TimestampDifferenceExceeds(last_activity, GetCurrentTimestamp(), IDLE_AFTER_MS);
		timeout = idle ? pmwal_flush_interval : Min(pmwal_flush_interval, BUSY_POLL_MS);
		pg_atomic_write_u32(&pmwal_shared->flusher_idle, idle ? 1 : 0);
		pg_memory_barrier();
		if (idle && pg_atomic_read_u32(&pmwal_shared->writes_open) > 0)
			timeout = BUSY_POLL_MS;
		PMWAL_PAUSE_POINT("flusher_sleep");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, pmwal_shared->wait_event_flusher);
	}

	/*
	 * Leave nothing behind that only the ring holds.  Exit with 1, so that
	 * the postmaster starts the flusher again if the server keeps running
	 * (someone terminated just the flusher); at shutdown it does not.
	 */
	pg_atomic_write_u32(&pmwal_shared->flusher_idle, 0);
	drain_ring();
	wal_read_close();
	ereport(LOG,
			(errmsg("pmwal drained the ring at %X/%X before the flusher exits",
					LSN_FORMAT_ARGS(pmwal_ring->hdr->head.v))));
	proc_exit(1);
}

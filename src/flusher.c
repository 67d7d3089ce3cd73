/*-------------------------------------------------------------------------
 *
 * flusher.c
 *		The pmwal flusher: a background worker that makes the WAL behind
 *		the ring durable in pg_wal and frees the ring's space.
 *
 * WAL syncs are answered from the ring (wal_ring.c); nobody else syncs the
 * segment files.  The flusher fdatasyncs them in large batches -- when a
 * segment is complete, when the ring is a quarter full (a writer wakes it),
 * or when pmwal.flush_interval has passed -- and then moves the ring's
 * tail.  After each such pass it raises the ring's generation, and the data
 * directory's binding file follows (binding.c): a copy of the ring taken
 * before the pass is then recognised as stale.
 *
 * It runs from the postmaster's start, so on a standby too, where the
 * walreceiver's WAL goes into the ring.
 *
 * The flusher is not needed for correctness: a writer that finds the ring
 * full syncs pg_wal itself.  If it dies, the postmaster starts it again a
 * second later.  It also carries pmwal.enabled, a reloadable setting, to
 * every process (pmwal_shared->enabled): without a flusher, pmwal cannot
 * work as documented, and if the postmaster has no background worker slot
 * for it (max_worker_processes), pmwal stands aside (pmwal.c).
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
#include "pmwal_compat.h"

/*
 * Register the flusher; false if the postmaster has no background worker
 * slot left for it (RegisterBackgroundWorker then only logs "too many
 * background workers"): the flusher must be in the postmaster's list.  A
 * standalone backend (postgres --single, as pg_rewind runs it) starts no
 * background workers at all, and pmwal works there without its flusher,
 * as it always did: a writer that finds the ring full frees it.
 */
bool
pmwal_flusher_register(void)
{
	BackgroundWorker worker;
	pmwal_bgworker_iter it;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	strcpy(worker.bgw_library_name, "pmwal");
	strcpy(worker.bgw_function_name, "pmwal_flusher_main");
	strcpy(worker.bgw_name, "pmwal flusher");
	strcpy(worker.bgw_type, "pmwal flusher");
	RegisterBackgroundWorker(&worker);
	if (!IsPostmasterEnvironment)
		return true;

	pmwal_bgworker_foreach(it)
	{
		RegisteredBgWorker *rw = pmwal_bgworker_of(it);

		if (strcmp(rw->rw_worker.bgw_library_name, "pmwal") == 0 &&
			strcmp(rw->rw_worker.bgw_function_name, "pmwal_flusher_main") == 0)
			return true;
	}
	return false;
}

/* A writer found the ring filling up. */
void
pmwal_wake_flusher(void)
{
	Latch	   *latch = pmwal_shared->flusher_latch;

	if (latch != NULL)
		SetLatch(latch);
}

static void
flusher_exit(int code, Datum arg)
{
	pmwal_shared->flusher_latch = NULL;
	pmwal_shared->flusher_pid = 0;
}

/* Is it time to sync?  See the file header for the triggers. */
static bool
sync_due(TimestampTz last_sync)
{
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	XLogRecPtr	written = pg_atomic_read_u64(&pmwal_shared->written_end);
	XLogSegNo	written_seg;
	XLogSegNo	durable_seg;

	if (written <= durable || pg_atomic_read_u32(&pmwal_shared->anchored) == 0)
		return false;
	if (written - pmwal_ring->hdr->tail.v >= pmwal_ring->capacity / 4)
		return true;
	XLByteToSeg(written - 1, written_seg, wal_segment_size);
	XLByteToSeg(durable, durable_seg, wal_segment_size);
	if (written_seg > durable_seg)
		return true;
	return TimestampDifferenceExceeds(last_sync, GetCurrentTimestamp(),
									  pmwal_flush_interval);
}

/* At a reload: carry pmwal.enabled, and say what fsync = off means now. */
static void
reload_config(void)
{
	bool		fsync_was = enableFsync;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	pg_atomic_write_u32(&pmwal_shared->enabled, pmwal_enabled ? 1 : 0);
	if (fsync_was && !enableFsync)
		ereport(WARNING,
				(errmsg("fsync is off, so PostgreSQL's own flushes and checkpoints are no longer durable"),
				 errdetail("pmwal keeps WAL written from now on durable in the ring, but a power loss can leave data files and pg_control ahead of the WAL.")));
}

void
pmwal_flusher_main(Datum main_arg)
{
	TimestampTz last_sync = GetCurrentTimestamp();

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (pmwal_ring == NULL)
		proc_exit(0);			/* nothing to do; don't restart */

	before_shmem_exit(flusher_exit, 0);
	pmwal_shared->flusher_pid = MyProcPid;
	pmwal_shared->flusher_latch = MyLatch;
	pg_atomic_write_u32(&pmwal_shared->enabled, pmwal_enabled ? 1 : 0);

	for (;;)
	{
		ResetLatch(MyLatch);
		if (ConfigReloadPending)
			reload_config();
		if (ShutdownRequestPending)
			break;
		PMWAL_PAUSE_POINT("flusher_loop");

		if (sync_due(last_sync))
		{
			ring_make_durable();
			PMWAL_PAUSE_POINT("flusher_after_free");
			pmwal_generation_bump();
			last_sync = GetCurrentTimestamp();
		}

		PMWAL_PAUSE_POINT("flusher_sleep");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 pmwal_flush_interval, pmwal_shared->wait_event_flusher);
	}

	/*
	 * Exit with 1, so that the postmaster starts the flusher again if the
	 * server keeps running (someone terminated just the flusher); at
	 * shutdown it does not.  Nothing is left to do: the shutdown
	 * checkpoint's pg_control write syncs what the ring holds.
	 */
	proc_exit(1);
}

/*-------------------------------------------------------------------------
 *
 * commit.c
 *		The commit path: asynchronous inside, durable outside.
 *
 * PostgreSQL has no hook inside XLogFlush, so pmwal works at commit level:
 *
 *	1. At XACT_EVENT_PRE_COMMIT, synchronous_commit is switched off for this
 *	   commit only, so RecordTransactionCommit inserts the commit record
 *	   without waiting for an fsync.
 *	2. At XACT_EVENT_COMMIT -- after the commit is recorded, before the
 *	   client hears of it -- XLogFlush writes the WAL up to the commit record
 *	   into the segment files with enableFsync off for exactly that call,
 *	   and the ring is made to hold it (wal_copy.c).
 *	3. If the ring cannot take it, the commit is made durable by syncing
 *	   pg_wal (wal_sync.c).  A commit is never acknowledged without its WAL
 *	   persisted in the ring or synced in pg_wal (I1).
 *
 * Commits that pmwal does not switch to asynchronous (a synchronous standby
 * is requested, pmwal.enabled is off, the flusher is not running) are
 * flushed by PostgreSQL itself.  That flush is a no-op when an earlier
 * write without fsync already moved the flush pointer past them, so they
 * too are checked here and covered by the ring or a sync.
 *
 * Nothing here may raise an ERROR after the commit is recorded: that would
 * be a PANIC.  Failures fall back to syncing; a failed sync is a PANIC, as
 * in PostgreSQL.
 *
 * IDENTIFICATION
 *		commit.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"

#include "pmwal.h"

/* Set at PRE_COMMIT, consumed at COMMIT or ABORT of the same transaction. */
static bool forced_async = false;
static int	saved_synchronous_commit;
static XLogRecPtr commit_end_before;

/*
 * XLogFlush without fsync: write the WAL up to "end" into the page cache
 * and advance the flush pointer.  lies_running and nosync_upto let commits
 * that PostgreSQL flushes itself tell whether that flush can be trusted.
 * There is no PG_TRY here on purpose: the transaction is already committed,
 * so an error inside XLogFlush is a PANIC and nothing needs restoring.
 */
static void
write_without_fsync(XLogRecPtr end)
{
	bool		save_fsync = enableFsync;

	pg_atomic_fetch_add_u32(&pmwal_shared->lies_running, 1);
	enableFsync = false;
	XLogFlush(end);
	enableFsync = save_fsync;
	pmwal_advance(&pmwal_shared->nosync_upto, GetFlushRecPtr(NULL));
	pg_atomic_fetch_sub_u32(&pmwal_shared->lies_running, 1);
}

/* Steps 2 and 3 for a commit that pmwal made asynchronous. */
static void
commit_through_ring(XLogRecPtr end)
{
	int			rc = RING_APPEND_OK;

	if (end > pg_atomic_read_u64(&pmwal_shared->ack_lsn))
	{
		write_without_fsync(end);
		PMWAL_PAUSE_POINT("commit_after_write");
		rc = ring_append(end, true);
	}
	if (rc == RING_APPEND_OK)
		pmwal_count(CTR_RING_COMMITS, 1);
	else
		pmwal_fallback(end, true, (PmwalFallback) rc);
}

/*
 * For WAL up to "end" that PostgreSQL flushed itself: make sure it is
 * durable, unless no write without fsync could have made that flush a
 * no-op.
 */
static void
ensure_flushed_durable(XLogRecPtr end, bool is_commit)
{
	int			rc;

	if (end <= pg_atomic_read_u64(is_commit ? &pmwal_shared->ack_lsn
								  : &pmwal_shared->cover_lsn))
		return;
	if (pg_atomic_read_u32(&pmwal_shared->lies_running) == 0)
	{
		pg_memory_barrier();
		if (pg_atomic_read_u64(&pmwal_shared->nosync_upto) <=
			pg_atomic_read_u64(&pmwal_shared->durable_lsn))
			return;
	}
	rc = ring_append(end, is_commit);
	if (rc != RING_APPEND_OK)
		pmwal_fallback(end, is_commit, (PmwalFallback) rc);
}

/* May this commit be made asynchronous and carried by the ring? */
static bool
may_force_async(void)
{
	return pmwal_ring != NULL &&
		pmwal_enabled &&
		synchronous_commit > SYNCHRONOUS_COMMIT_OFF &&
		pg_atomic_read_u32(&pmwal_shared->accepting) != 0 &&
		pmwal_stand_aside_reason() == NULL;
}

static void
pmwal_xact_callback(XactEvent event, void *arg)
{
	bool		was_forced;
	XLogRecPtr	end;

	if (pmwal_ring == NULL)
		return;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			commit_end_before = XactLastCommitEnd;
			if (may_force_async())
			{
				saved_synchronous_commit = synchronous_commit;
				synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
				forced_async = true;
			}
			break;

		case XACT_EVENT_COMMIT:
			was_forced = forced_async;
			if (forced_async)
			{
				synchronous_commit = saved_synchronous_commit;
				forced_async = false;
			}
			end = XactLastCommitEnd;
			if (end == commit_end_before ||
				synchronous_commit == SYNCHRONOUS_COMMIT_OFF)
				break;			/* no WAL, or no durability wanted */

			HOLD_INTERRUPTS();
			if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
			{
				if (was_forced)
					commit_through_ring(end);
				else
					ensure_flushed_durable(end, true);
			}
			else if (end <= GetFlushRecPtr(NULL))
			{
				/* no commit record of ours, but WAL PostgreSQL flushed: 2PC */
				ensure_flushed_durable(end, true);
			}
			RESUME_INTERRUPTS();
			break;

		case XACT_EVENT_PREPARE:
			/* EndPrepare flushed the PREPARE record; make that true. */
			if (synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
			{
				HOLD_INTERRUPTS();
				ensure_flushed_durable(GetFlushRecPtr(NULL), false);
				RESUME_INTERRUPTS();
			}
			break;

		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (forced_async)
			{
				synchronous_commit = saved_synchronous_commit;
				forced_async = false;
			}
			break;

		default:
			break;
	}
}

void
pmwal_commit_init(void)
{
	RegisterXactCallback(pmwal_xact_callback, NULL);
}

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
 *	   client hears of it -- pmwal first decides whether the ring can take
 *	   the WAL (write_window_open, wal_copy.c).  If so, XLogFlush writes the
 *	   WAL up to the commit record into the segment files with enableFsync
 *	   off for exactly that call, and the ring is made to hold it.
 *	3. If not, the commit is made durable the ordinary way: XLogFlush with
 *	   fsync, then pmwal_ensure_durable (wal_sync.c).  A commit is never
 *	   acknowledged without its WAL persisted in the ring or synced in
 *	   pg_wal (I1), and nothing waits between a write without fsync and its
 *	   copy.
 *
 * Commits that pmwal does not switch to asynchronous (a synchronous standby
 * is requested, pmwal.enabled is off, the flusher is not running), commits
 * that PostgreSQL flushes although synchronous_commit is off (they drop
 * relations, or forced a synchronous commit), PREPARE TRANSACTION and COMMIT
 * or ROLLBACK PREPARED are flushed by PostgreSQL itself.  That flush is a
 * no-op when another backend's write without fsync already moved the flush
 * pointer past them, so they are checked here and covered by the ring or a
 * sync -- before the files of dropped relations are unlinked, which
 * PostgreSQL does after this callback.
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
#include "access/xlog_internal.h"
#include "miscadmin.h"

#include "pmwal.h"

/* Set at PRE_COMMIT, consumed at COMMIT or ABORT of the same transaction. */
static bool forced_async = false;
static int	saved_synchronous_commit;
static XLogRecPtr commit_end_before;

/*
 * XLogFlush without fsync: write the WAL up to "end" into the page cache
 * and advance the flush pointer.  Only inside a write window.  There is no
 * PG_TRY here on purpose: the transaction is already committed, so an error
 * inside XLogFlush is a PANIC and nothing needs restoring.
 */
static void
write_without_fsync(XLogRecPtr end)
{
	bool		save_fsync = enableFsync;

	enableFsync = false;
	XLogFlush(end);
	enableFsync = save_fsync;
	pmwal_advance(&pmwal_shared->nosync_upto, GetFlushRecPtr(NULL));
}

/*
 * Did the write reach a segment the flusher had not prepared?  Then it
 * created that segment's file (WAL others inserted after the window was
 * opened got written too), and neither the file nor its pg_wal/ entry is
 * synced: the window syncs them before it closes, or a later real flush
 * into that segment could be trusted without its directory entry.
 */
static bool
write_created_segment(void)
{
	XLogSegNo	last;

	XLByteToSeg(GetFlushRecPtr(NULL) - 1, last, wal_segment_size);
	return last > pg_atomic_read_u64(&pmwal_shared->prepared_segno);
}

/* The ordinary way: PostgreSQL's flush, then make sure it holds. */
static void
commit_fallback(XLogRecPtr end, PmwalFallback reason)
{
	pmwal_count(CTR_FALLBACK_FIRST + reason, 1);
	XLogFlush(end);
	pmwal_ensure_durable(end, true);
}

/* Steps 2 and 3 for a commit that pmwal made asynchronous. */
static void
commit_through_ring(XLogRecPtr end)
{
	int			rc;

	if (end <= pg_atomic_read_u64(&pmwal_shared->ack_lsn))
	{
		/* another commit's copy already carried this one */
		pmwal_count(CTR_RING_COMMITS, 1);
		return;
	}
	rc = write_window_open(end);
	if (rc != RING_APPEND_OK)
	{
		commit_fallback(end, (PmwalFallback) rc);
		return;
	}
	PMWAL_PAUSE_POINT("commit_before_write");
	write_without_fsync(end);
	PMWAL_PAUSE_POINT("commit_after_write");
	rc = write_created_segment() ? FALLBACK_OVERRUN : ring_append(end, true, COPY_WINDOW);
	if (rc != RING_APPEND_OK)
	{
		/* no waiting after the write: sync what it wrote, now */
		pmwal_count(CTR_FALLBACK_FIRST + rc, 1);
		pmwal_sync_upto(GetFlushRecPtr(NULL), end);
	}
	else
		pmwal_count(CTR_RING_COMMITS, 1);
	write_window_close();
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

/* XACT_EVENT_COMMIT: see the file header. */
static void
at_commit(bool was_forced)
{
	XLogRecPtr	end = XactLastCommitEnd;
	XLogRecPtr	flush;

	if (end == commit_end_before)
		return;					/* this transaction wrote no WAL */

	HOLD_INTERRUPTS();
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
	{
		if (was_forced)
			commit_through_ring(end);
		else if (synchronous_commit > SYNCHRONOUS_COMMIT_OFF ||
				 end <= GetFlushRecPtr(NULL))
			pmwal_ensure_durable(end, true);	/* PostgreSQL flushed it */
	}
	else if (pmwal_finishing_prepared())
	{
		/*
		 * COMMIT or ROLLBACK PREPARED flushed its record; the wrapper
		 * transaction has no xid.  If the wrapper wrote WAL after that
		 * record, cover what is flushed (a record boundary is only known
		 * for "end").
		 */
		flush = GetFlushRecPtr(NULL);
		if (end <= flush)
			pmwal_ensure_durable(end, true);
		else
			pmwal_ensure_durable(flush, false);
	}
	/* else: no xid, e.g. HOT pruning: nothing was promised about it */
	RESUME_INTERRUPTS();
}

static void
pmwal_xact_callback(XactEvent event, void *arg)
{
	bool		was_forced;

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
			PMWAL_PAUSE_POINT("commit_callback");
			was_forced = forced_async;
			if (forced_async)
			{
				synchronous_commit = saved_synchronous_commit;
				forced_async = false;
			}
			at_commit(was_forced);
			break;

		case XACT_EVENT_PREPARE:
			/* EndPrepare flushed the PREPARE record, always; make that true */
			HOLD_INTERRUPTS();
			pmwal_ensure_durable(GetFlushRecPtr(NULL), false);
			RESUME_INTERRUPTS();
			break;

		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			(void) pmwal_finishing_prepared();
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

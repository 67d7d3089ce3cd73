/*-------------------------------------------------------------------------
 *
 * wal_copy.c
 *		The write window: deciding whether a commit may write its WAL without
 *		fsync, copying WAL from pg_wal into the ring and moving the ring's
 *		positions.
 *
 * A committer writes its WAL into the segment files without fsync (an
 * XLogFlush with fsync disabled; see commit.c).  From that moment on,
 * PostgreSQL trusts that WAL: the bgwriter writes data pages ahead of it,
 * checkpoints complete, walsenders and the archiver ship it.  Until the
 * ring holds it, only the page cache does.  That stretch -- the *write
 * window* -- is kept to one copy by deciding everything before the write:
 *
 *	write_window_open()	checks that the ring will have room for all WAL
 *						inserted so far plus a margin, that the copy will not
 *						be too large, and that the WAL stays in segments the
 *						flusher has prepared (created, synced, directory
 *						entry synced); it may wait for room here, before
 *						anything is written.  Then it announces the window
 *						(writes_open) and marks the ring "exposed".
 *	ring_append()		after the write: copies everything up to the flush
 *						pointer into the ring.  It never waits for room; if
 *						WAL inserted by others meanwhile does not fit, the
 *						commit syncs pg_wal at once (FALLBACK_OVERRUN).
 *	write_window_close()
 *
 * What bounds the window: the copy itself (microseconds); if the committer
 * is descheduled after its write, the next committer's copy or the
 * flusher's, which polls every 10 ms while windows open; if it dies, the
 * postmaster restarts every process and the restore syncs pg_wal from the
 * page cache before redo.  Only a power cut inside the window can lose the
 * window's WAL, and nothing acknowledged depends on it.
 *
 * The "exposed" word of the ring says that a window may be open: WAL
 * beyond the ring's head may have reached a standby or the archive.  It is
 * set before the first window after a quiet moment and cleared by the
 * flusher when no window is open and the ring covers the flush pointer; a
 * restore that finds it set ends recovery on a new timeline (restore.c).
 * The committer increments writes_open and then looks at exposure_clearing;
 * the flusher sets exposure_clearing and then looks at writes_open: one of
 * them always sees the other.  A committer that sees a clearing in progress
 * bumps the word by compare-and-swap instead of waiting for the flusher.
 *
 * The copy reads the segment files (wal_read.c); every page header in the
 * copied range must carry the address it was copied for.  Anything that
 * goes wrong returns a fallback reason.  Nothing here may
 * raise an ERROR: it runs after the commit is recorded.
 *
 * Locking: everything that reads or changes the ring's tail, head or
 * last_end holds ring_lock; copiers take it with LWLockAcquireOrWait, so
 * that commits arriving while a copy runs simply find themselves carried.
 * The positions only move forward: ring_advance_word() refuses anything
 * else.
 *
 * IDENTIFICATION
 *		wal_copy.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/walsender.h"
#include "utils/timestamp.h"

#include "pmwal.h"

/* The longest a committer waits for room before it falls back. */
#define SPACE_WAIT_MS		1000

/* More than this much WAL to copy at once is made durable by a sync. */
static uint64
copy_limit(void)
{
	return pmwal_ring->capacity / 4;
}

/* Does every page that begins in [start, end) carry its own address? */
static bool
ring_pages_valid(XLogRecPtr start, XLogRecPtr end)
{
	XLogRecPtr	page = start + (XLOG_BLCKSZ - start % XLOG_BLCKSZ) % XLOG_BLCKSZ;

	for (; page < end; page += XLOG_BLCKSZ)
	{
		XLogPageHeader ph = (XLogPageHeader)
		(pmwal_ring->data + RING_OFFSET(pmwal_ring->capacity, page));

		if (ph->xlp_magic != XLOG_PAGE_MAGIC || ph->xlp_pageaddr != page)
			return false;
	}
	return true;
}

/*
 * Copy WAL [start, end) into its place in the ring and persist it, in at
 * most two pieces when the range wraps around.
 */
static int
ring_fill(XLogRecPtr start, XLogRecPtr end)
{
	uint64		cap = pmwal_ring->capacity;
	XLogRecPtr	from = start;

	while (from < end)
	{
		uint64		off = RING_OFFSET(cap, from);
		Size		n = Min(end - from, cap - off);
		int			rc;

		rc = wal_read(pmwal_ring->data + off, from, n, pmwal_shared->tli);
		if (rc != RING_APPEND_OK)
			return rc;
		from += n;
	}
	return ring_drain(start, end) ? RING_APPEND_OK : FALLBACK_PERSIST;
}

/* Recompute the positions commits look at from the ring and durable_lsn. */
void
ring_publish_acks(void)
{
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	RingHeader *hdr = pmwal_ring->hdr;

	pmwal_advance(&pmwal_shared->ack_lsn, Max(hdr->last_end.v, durable));
	pmwal_advance(&pmwal_shared->cover_lsn, Max(hdr->head.v, durable));
}

/*
 * Move tail, head or last_end forward to "to".  Moving one backwards would
 * uncover WAL that ack_lsn and cover_lsn still claim (they only grow), so it
 * is a bug, and stops the server rather than risk an acknowledged commit.
 */
static bool
ring_advance_word(volatile uint64 *word, XLogRecPtr to)
{
	if (to < *word)
		elog(PANIC, "pmwal ring position would move back from %X/%X to %X/%X",
			 LSN_FORMAT_ARGS(*word), LSN_FORMAT_ARGS(to));
	if (to == *word)
		return true;
	if (PMWAL_MUTANT == MUTANT_NO_PERSIST &&
		(word == &pmwal_ring->hdr->head.v || word == &pmwal_ring->hdr->last_end.v))
	{
		*word = to;
		return true;
	}
	return ring_set_word(word, to);
}

/*
 * Let the ring start at "at", a record boundary before which all WAL is
 * durable in pg_wal.  If the ring already reaches "at", only its tail moves
 * up (last_end first, so that last_end >= tail always holds).  Otherwise
 * the ring starts over, empty, at "at": the tail moves first, so a crash
 * between the stores leaves tail >= head, an empty ring; then the start of
 * the tail's page is copied (a restore reads that page's header), then head
 * and last_end.  Nothing ever moves back: a commit may have copied past
 * "at" while the caller synced up to it.
 */
int
ring_reanchor_locked(XLogRecPtr at)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	page = at - at % XLOG_BLCKSZ;

	Assert(at <= pg_atomic_read_u64(&pmwal_shared->durable_lsn));
	if (hdr->state.v == RING_STATE_IN_USE && hdr->head.v >= at)
	{
		if (at > hdr->tail.v &&
			(!ring_advance_word(&hdr->last_end.v, Max(hdr->last_end.v, at)) ||
			 !ring_advance_word(&hdr->tail.v, at)))
			return FALLBACK_PERSIST;
		ring_publish_acks();
		return RING_APPEND_OK;
	}

	if (PMWAL_MUTANT == MUTANT_REANCHOR_ORDER &&
		(!ring_set_word(&hdr->head.v, at) || !ring_set_word(&hdr->last_end.v, at)))
		return FALLBACK_PERSIST;
	if (hdr->state.v == RING_STATE_IN_USE ? !ring_advance_word(&hdr->tail.v, at)
		: !ring_set_word(&hdr->tail.v, at))
		return FALLBACK_PERSIST;
	PMWAL_PAUSE_POINT("reanchor_after_tail");
	if (page < at)
	{
		int			rc = ring_fill(page, at);

		if (rc != RING_APPEND_OK)
			return rc;
	}
	if (!ring_set_word(&hdr->head.v, at) ||
		!ring_set_word(&hdr->last_end.v, at))
		return FALLBACK_PERSIST;
	if (hdr->state.v != RING_STATE_IN_USE &&
		!ring_set_word(&hdr->state.v, RING_STATE_IN_USE))
		return FALLBACK_PERSIST;
	ring_publish_acks();
	return RING_APPEND_OK;
}

/*
 * With ring_lock held: make the ring hold everything up to the flush
 * pointer, and, for a commit, let last_end reach "end".  "end" must be
 * flushed already.  "kind" says who copies: a committer inside its write
 * window (the ring was sized for it before the write, and it may copy even
 * while new windows are refused), the flusher, or anyone else making sure
 * WAL PostgreSQL flushed is covered (only while the ring accepts commits).
 * Returns RING_APPEND_OK, RING_NEED_SPACE or a fallback.
 */
int
ring_copy_locked(XLogRecPtr end, bool is_commit, CopyKind kind)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	XLogRecPtr	head;
	XLogRecPtr	pending;
	XLogRecPtr	flush;
	XLogRecPtr	last_end;

	if (hdr->state.v != RING_STATE_IN_USE ||
		(kind == COPY_COVER && !pg_atomic_read_u32(&pmwal_shared->accepting)))
		return FALLBACK_INACTIVE;

	/* After a sync got ahead of the ring, the ring starts over there. */
	if (hdr->head.v < durable)
	{
		int			rc = ring_reanchor_locked(durable);

		if (rc != RING_APPEND_OK)
			return rc;
	}
	head = hdr->head.v;

	/* Every registered commit end was flushed before it was registered. */
	pending = pg_atomic_read_u64(&pmwal_shared->pending_end);
	pg_memory_barrier();
	flush = GetFlushRecPtr(NULL);
	Assert(flush >= end);

	if (flush > head)
	{
		int			rc;

		if (flush - RING_TAIL_PAGE(hdr->tail.v) > pmwal_ring->capacity)
			return RING_NEED_SPACE;
		if (kind != COPY_WINDOW && flush - head > copy_limit())
			return FALLBACK_LARGE;
		if (PMWAL_MUTANT == MUTANT_HEAD_FIRST &&
			(!ring_advance_word(&hdr->head.v, flush) ||
			 !ring_advance_word(&hdr->last_end.v, Max(hdr->last_end.v, flush))))
			return FALLBACK_PERSIST;
		rc = ring_fill(head, flush);
		if (rc != RING_APPEND_OK)
			return rc;
		if (!ring_pages_valid(head, flush))
			return FALLBACK_RECYCLED;
		PMWAL_PAUSE_POINT("copy_before_head");
		if (!ring_advance_word(&hdr->head.v, flush))
			return FALLBACK_PERSIST;
		pmwal_count(CTR_COPIES, 1);
		pmwal_count(CTR_BYTES_COPIED, flush - head);
		if (kind == COPY_FLUSHER)
			pmwal_count(CTR_GAP_COPIES, 1);
	}

	last_end = Max(hdr->last_end.v, Min(pending, flush));
	if (is_commit)
		last_end = Max(last_end, end);
	if (last_end > hdr->last_end.v)
	{
		PMWAL_PAUSE_POINT("copy_before_last_end");
		if (!ring_advance_word(&hdr->last_end.v, last_end))
			return FALLBACK_PERSIST;
	}
	ring_publish_acks();
	return RING_APPEND_OK;
}

/*
 * Wait, at most SPACE_WAIT_MS in all, for the flusher to free room.
 * Returns false once the time is up.  Only ever called before a write.
 */
static bool
wait_for_space(TimestampTz *deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	long		remaining;
	Latch	   *flusher = pmwal_shared->flusher_latch;

	if (*deadline == 0)
	{
		*deadline = TimestampTzPlusMilliseconds(now, SPACE_WAIT_MS);
		pmwal_count(CTR_SPACE_WAITS, 1);
	}
	remaining = TimestampDifferenceMilliseconds(now, *deadline);
	if (remaining <= 0)
		return false;

	pg_atomic_fetch_add_u32(&pmwal_shared->space_waiters, 1);
	if (flusher)
		SetLatch(flusher);
	ConditionVariablePrepareToSleep(&pmwal_shared->space_cv);
	(void) ConditionVariableTimedSleep(&pmwal_shared->space_cv,
									   Min(remaining, 10),
									   pmwal_shared->wait_event_space);
	ConditionVariableCancelSleep();
	pg_atomic_fetch_sub_u32(&pmwal_shared->space_waiters, 1);
	return true;
}

/*
 * WAL that others insert between a committer's look at the insert position
 * and its write also gets written, and must fit too.
 */
static uint64
window_margin(void)
{
	return Max(UINT64CONST(65536), pmwal_ring->capacity / 16);
}

/*
 * Will the ring be able to take all WAL inserted so far, up to "insert",
 * plus the margin?  Reads the tail without the lock: it only moves forward,
 * so an old value only makes the answer more careful.  A ring whose head a
 * sync has overtaken starts over at durable_lsn with the next copy.
 */
static int
ring_room_for(XLogRecPtr insert)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	limit = insert + window_margin();
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	XLogRecPtr	cover = pg_atomic_read_u64(&pmwal_shared->cover_lsn);
	XLogRecPtr	tail = hdr->head.v < durable ? durable : hdr->tail.v;
	XLogSegNo	limit_seg;

	if (insert > cover && insert - cover > copy_limit())
		return FALLBACK_LARGE;
	XLByteToSeg(limit, limit_seg, wal_segment_size);
	if (limit_seg > pg_atomic_read_u64(&pmwal_shared->prepared_segno))
		return FALLBACK_SEGMENT;
	if (limit - RING_TAIL_PAGE(tail) > pmwal_ring->capacity)
		return RING_NEED_SPACE;
	return RING_APPEND_OK;
}

/*
 * Can WAL leave this server before it is durable?  Only through walsenders
 * (standbys, pg_receivewal, pg_basebackup) or the archiver; both settings
 * need a restart to change.
 */
static bool
wal_may_be_shipped(void)
{
	return max_wal_senders > 0 || XLogArchivingActive();
}

/*
 * Persist that a write window may be open (see the file header).  Usually
 * the mark is set already and nothing is written.  While the flusher decides
 * whether to clear it, the committer does not wait: it bumps the word with
 * a compare-and-swap, so that the flusher's own compare-and-swap to zero
 * fails, or, if that came first, sets it again.  False if the store cannot
 * be persisted (msync mode): the caller then does not open a window.
 */
static bool
exposure_mark(void)
{
	uint64	   *word = (uint64 *) &pmwal_ring->hdr->exposed.v;
	uint64		old;

	if (pg_atomic_read_u32(&pmwal_shared->exposure_clearing) == 0)
	{
		pg_read_barrier();
		if (pg_atomic_read_u32(&pmwal_shared->exposure_marked))
			return true;
	}
	old = *word;
	while (!__atomic_compare_exchange_n(word, &old,
										Max(pmwal_ring->hdr->head.v, old + 1),
										false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (!ring_persist(word, sizeof(uint64)))
		return false;
	pg_atomic_write_u32(&pmwal_shared->exposure_marked, 1);
	return true;
}

/*
 * The flusher: clear the exposure mark when no write window is open and the
 * ring (or a sync) covers everything flushed.  The word is read before
 * writes_open is looked at, and cleared only if it still holds that value.
 */
void
exposure_clear_if_quiet(void)
{
	uint64	   *word = (uint64 *) &pmwal_ring->hdr->exposed.v;
	uint64		seen;

	if (!pg_atomic_read_u32(&pmwal_shared->exposure_marked) && *word == 0)
		return;
	pg_atomic_write_u32(&pmwal_shared->exposure_clearing, 1);
	pg_memory_barrier();
	seen = *word;
	pg_memory_barrier();
	if (pg_atomic_read_u32(&pmwal_shared->writes_open) == 0 &&
		GetFlushRecPtr(NULL) <= pg_atomic_read_u64(&pmwal_shared->cover_lsn) &&
		(seen == 0 ||
		 __atomic_compare_exchange_n(word, &seen, 0, false,
									 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) &&
		ring_persist(word, sizeof(uint64)))
		pg_atomic_write_u32(&pmwal_shared->exposure_marked, 0);
	pg_write_barrier();
	pg_atomic_write_u32(&pmwal_shared->exposure_clearing, 0);
}

/*
 * Before a commit writes its WAL without fsync: may it?  Returns
 * RING_APPEND_OK with the window open (call write_window_close() after the
 * copy), or the reason to make this commit durable the ordinary way.  This
 * is the only place a committer waits for room.
 */
int
write_window_open(XLogRecPtr end)
{
	TimestampTz deadline = 0;
	int			rc;

	for (;;)
	{
		rc = ring_room_for(Max(end, GetXLogInsertRecPtr()));
		if (rc != RING_NEED_SPACE)
			break;
		if (!wait_for_space(&deadline))
			return FALLBACK_FULL;
	}
	if (rc != RING_APPEND_OK)
	{
		if (rc == FALLBACK_SEGMENT && pmwal_shared->flusher_latch)
			SetLatch(pmwal_shared->flusher_latch);
		return rc;
	}

	/* announce, then look: see drain_ring() and pmwal_pause_writes() */
	pg_atomic_fetch_add_u32(&pmwal_shared->writes_open, 1);
	if (!pg_atomic_read_u32(&pmwal_shared->accepting))
		rc = FALLBACK_INACTIVE;
	else if (pg_atomic_read_u32(&pmwal_shared->paused))
		rc = FALLBACK_PAUSED;
	else if (wal_may_be_shipped() && !exposure_mark())
		rc = FALLBACK_PERSIST;
	if (rc != RING_APPEND_OK)
	{
		write_window_close();
		return rc;
	}
	if (pg_atomic_read_u32(&pmwal_shared->flusher_idle) && pmwal_shared->flusher_latch)
		SetLatch(pmwal_shared->flusher_latch);
	return RING_APPEND_OK;
}

void
write_window_close(void)
{
	pg_atomic_fetch_sub_u32(&pmwal_shared->writes_open, 1);
}

/*
 * Wait until no write window is open.  Callers have stopped new ones first
 * (accepting = 0 or paused > 0).  Windows never wait, so this is short.
 */
void
wait_for_writes_closed(void)
{
	pg_memory_barrier();
	while (pg_atomic_read_u32(&pmwal_shared->writes_open) > 0)
	{
		CHECK_FOR_INTERRUPTS();
		pg_usleep(100L);
	}
}

/*
 * Make sure the ring holds the WAL up to "end" (already flushed).  For a
 * commit, "end" is the end of its commit record and it is acknowledged
 * through last_end; otherwise it only has to be covered.  Never waits for
 * room: a committer inside its write window that finds the ring too full
 * (WAL inserted by others after it looked) gets FALLBACK_OVERRUN, anyone
 * else RING_NEED_SPACE or another fallback reason.
 */
int
ring_append(XLogRecPtr end, bool is_commit, CopyKind kind)
{
	pg_atomic_uint64 *goal = is_commit ? &pmwal_shared->ack_lsn : &pmwal_shared->cover_lsn;

	if (is_commit)
		pmwal_advance(&pmwal_shared->pending_end, end);
	for (;;)
	{
		int			rc;

		if (pg_atomic_read_u64(goal) >= end)
			return RING_APPEND_OK;
		if (!LWLockAcquireOrWait(pmwal_shared->ring_lock, LW_EXCLUSIVE))
			continue;			/* someone copied meanwhile: look again */
		rc = ring_copy_locked(end, is_commit, kind);
		LWLockRelease(pmwal_shared->ring_lock);
		if (rc == RING_NEED_SPACE && kind == COPY_WINDOW)
			rc = FALLBACK_OVERRUN;
		return rc;
	}
}

/*-------------------------------------------------------------------------
 *
 * wal_copy.c
 *		Copying WAL from pg_wal into the ring and moving the ring's head.
 *
 * A committer has written its WAL into the segment files (XLogFlush without
 * fsync; see commit.c).  Here the ring is made to hold every byte up to
 * PostgreSQL's flush pointer, so one copier carries every commit that is
 * already written: group commit for free.  The bytes are read back from the
 * segment files, through a mapping of the page cache.  A segment that a
 * completed checkpoint has recycled is never read: XLogGetLastRemovedSegno()
 * is checked before and after the copy, and every page header in the copied range must carry the address it
 * was copied for.  Anything that goes wrong returns a fallback reason; the
 * caller then makes the commit durable by syncing pg_wal (wal_sync.c).
 * Nothing here may raise an ERROR: it runs after the commit is recorded.
 *
 * Locking: everything that reads or changes the ring's tail, head or
 * last_end holds ring_lock; copiers take it with LWLockAcquireOrWait, so
 * that commits arriving while a copy runs simply find themselves carried.
 *
 * IDENTIFICATION
 *		wal_copy.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/timestamp.h"

#include "pmwal.h"

/* The longest a committer waits for room before it falls back. */
#define SPACE_WAIT_MS		1000

/*
 * This process's read-only mapping of the segment it last copied from.
 * Reading through a mapping of the page cache costs no system call per
 * commit.  A mapping never outlives its segment's identity unnoticed: the
 * segment number is checked against the last removed one around each copy.
 */
static char *seg_map = NULL;
static XLogSegNo seg_segno;
static TimeLineID seg_tli;

void
ring_close_segment(void)
{
	if (seg_map != NULL)
		munmap(seg_map, wal_segment_size);
	seg_map = NULL;
}

/* More than this much WAL to copy at once is made durable by a sync. */
static uint64
copy_limit(void)
{
	return pmwal_ring->capacity / 4;
}

/* Map segment "segno" of timeline "tli"; false if that is impossible. */
static bool
map_segment(XLogSegNo segno, TimeLineID tli)
{
	char		path[MAXPGPATH];
	struct stat st;
	int			fd;
	void	   *map;

	ring_close_segment();
	XLogFilePath(path, tli, segno, wal_segment_size);
	fd = open(path, O_RDONLY | PG_BINARY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* a short file would turn a read past its end into SIGBUS */
	if (fstat(fd, &st) != 0 || st.st_size < wal_segment_size)
	{
		close(fd);
		return false;
	}
	map = mmap(NULL, wal_segment_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return false;
	seg_map = map;
	seg_segno = segno;
	seg_tli = tli;
	return true;
}

/*
 * Copy "len" bytes of WAL starting at "start" from pg_wal to "dst" in the
 * ring, without waiting for them to be persisted.  Returns RING_APPEND_OK
 * or a fallback reason.
 */
static int
wal_copy(char *dst, XLogRecPtr start, Size len, TimeLineID tli)
{
	XLogSegNo	first;
	XLogSegNo	last;

	XLByteToSeg(start, first, wal_segment_size);
	XLByteToSeg(start + len - 1, last, wal_segment_size);
	if (first <= XLogGetLastRemovedSegno())
		return FALLBACK_RECYCLED;

	while (len > 0)
	{
		XLogSegNo	segno;
		uint32		off = XLogSegmentOffset(start, wal_segment_size);
		Size		n = Min(len, wal_segment_size - off);

		XLByteToSeg(start, segno, wal_segment_size);
		if ((seg_map == NULL || seg_segno != segno || seg_tli != tli) &&
			!map_segment(segno, tli))
			return FALLBACK_READ;
		ring_write(dst, seg_map + off, n);
		dst += n;
		start += n;
		len -= n;
	}

	/* A checkpoint may have recycled the segment while we copied it. */
	if (last <= XLogGetLastRemovedSegno())
		return FALLBACK_RECYCLED;
	return RING_APPEND_OK;
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

		rc = wal_copy(pmwal_ring->data + off, from, n, pmwal_shared->tli);
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
 * Make the ring an empty range at "at", a record boundary before which all
 * WAL is durable in pg_wal.  The ring always holds [page of tail, head), so
 * that a restore can read the page header of the tail's page: that prefix
 * is copied first.  The tail moves before the head: a crash between the
 * stores leaves tail >= head, an empty ring.
 */
int
ring_reanchor_locked(XLogRecPtr at)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	page = at - at % XLOG_BLCKSZ;

	Assert(at <= pg_atomic_read_u64(&pmwal_shared->durable_lsn));
	if (!ring_set_word(&hdr->tail.v, at))
		return FALLBACK_PERSIST;
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
 * flushed already.  Returns RING_APPEND_OK, RING_NEED_SPACE or a fallback.
 */
int
ring_copy_locked(XLogRecPtr end, bool is_commit)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	XLogRecPtr	head;
	XLogRecPtr	pending;
	XLogRecPtr	flush;
	XLogRecPtr	last_end;

	if (!pg_atomic_read_u32(&pmwal_shared->accepting))
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

		if (flush - head > copy_limit())
			return FALLBACK_LARGE;
		if (flush - RING_TAIL_PAGE(hdr->tail.v) > pmwal_ring->capacity)
			return RING_NEED_SPACE;
		rc = ring_fill(head, flush);
		if (rc != RING_APPEND_OK)
			return rc;
		if (!ring_pages_valid(head, flush))
			return FALLBACK_RECYCLED;
		if (!ring_set_word(&hdr->head.v, flush))
			return FALLBACK_PERSIST;
		pmwal_count(CTR_COPIES, 1);
		pmwal_count(CTR_BYTES_COPIED, flush - head);
		if (!is_commit)
			pmwal_count(CTR_GAP_COPIES, 1);
	}

	last_end = Max(hdr->last_end.v, Min(pending, flush));
	if (is_commit)
		last_end = Max(last_end, end);
	if (last_end > hdr->last_end.v && !ring_set_word(&hdr->last_end.v, last_end))
		return FALLBACK_PERSIST;
	ring_publish_acks();
	return RING_APPEND_OK;
}

/*
 * Wait, at most SPACE_WAIT_MS in all, for the flusher to free room.
 * Returns false once the time is up.
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
									   Min(remaining, 10), PG_WAIT_EXTENSION);
	ConditionVariableCancelSleep();
	pg_atomic_fetch_sub_u32(&pmwal_shared->space_waiters, 1);
	return true;
}

/*
 * Make sure the ring holds the WAL up to "end" (already flushed).  For a
 * commit, "end" is the end of its commit record and it is acknowledged
 * through last_end; otherwise it only has to be covered.  Returns
 * RING_APPEND_OK, or why the caller must fall back to syncing pg_wal.
 */
int
ring_append(XLogRecPtr end, bool is_commit)
{
	pg_atomic_uint64 *goal = is_commit ? &pmwal_shared->ack_lsn : &pmwal_shared->cover_lsn;
	TimestampTz deadline = 0;

	if (is_commit)
		pmwal_advance(&pmwal_shared->pending_end, end);
	for (;;)
	{
		int			rc;

		if (pg_atomic_read_u64(goal) >= end)
			return RING_APPEND_OK;
		if (!pg_atomic_read_u32(&pmwal_shared->accepting))
			return FALLBACK_INACTIVE;
		if (!LWLockAcquireOrWait(pmwal_shared->ring_lock, LW_EXCLUSIVE))
			continue;			/* someone copied meanwhile: look again */
		rc = ring_copy_locked(end, is_commit);
		LWLockRelease(pmwal_shared->ring_lock);
		if (rc != RING_NEED_SPACE)
			return rc;
		if (!wait_for_space(&deadline))
			return FALLBACK_FULL;
	}
}

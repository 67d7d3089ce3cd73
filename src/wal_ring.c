/*-------------------------------------------------------------------------
 *
 * wal_ring.c
 *		The sync layer: what a write into a WAL segment, a sync of one, and
 *		a write of pg_control do while pmwal runs (interpose.c calls here).
 *
 * A write into a WAL segment is first copied into the ring, at the ring
 * offset of its LSN, and drained (persisted); then the ring's copy is
 * written into the segment -- not the caller's buffer again: PostgreSQL's
 * inserters may be adding records to its partial last page meanwhile, and
 * pg_wal must get exactly what the ring holds (I3).  (A small write is
 * first copied into private memory, which both the ring and the segment
 * get: the same bytes, read from cache.)  A sync of a WAL segment
 * publishes the ring's head over everything copied -- one persisted
 * 8-byte store -- and returns: the ring now holds, persisted, every byte
 * written to any segment since the ring's tail, and every byte before the
 * tail is synced in pg_wal (I1, I2).  PostgreSQL
 * moves its flush pointer, and wakes walsenders and the archiver, only
 * after that, so nothing that reads the flush pointer ever sees WAL that
 * is neither in the ring nor synced (I7).  The ring always holds the newest
 * version of each page it covers: the copy comes before the write.
 *
 * The ring is "anchored" while every WAL write since it was anchored went
 * into it; only then are syncs answered from it.  A write the ring cannot
 * take -- pmwal.enabled off, a WAL file opened with O_SYNC, O_DSYNC or
 * O_DIRECT, a single write larger than the ring, a write that is not a
 * pwrite -- first retires the ring: everything written so far is synced
 * for real, the ring emptied and unanchored, and from then on PostgreSQL's
 * own syncs are real.  So the ring is never older than what pg_wal holds
 * durably, and a restore never writes older bytes over newer ones.  The
 * next write the ring can take anchors it again, after a real sync of
 * whatever was written meanwhile.  A ring that is full is not waited for:
 * the writer syncs pg_wal itself, as the flusher would have, and frees the
 * ring (CTR_FULL).
 *
 * Before pg_control is written (a checkpoint, a state change), everything
 * written so far is synced for real and the ring given up but for the
 * page the next write may rewrite (its synced version is durable too).
 * So pg_control never names WAL that only the ring holds, the ring never
 * holds WAL older than the checkpoint pg_control names (which bounds a
 * stale ring, binding.c), never reaches into a segment a checkpoint may
 * remove, and -- the shutdown checkpoint's last write retires the ring --
 * a cluster that pg_control says was shut down cleanly owns nothing in
 * any ring.
 *
 * PostgreSQL rewrites its last, partial WAL page at the next write, so
 * "synced up to durable_lsn" does not cover a page rewritten since: a real
 * sync starts at the segment of the byte before durable_lsn and is skipped
 * only when nothing was written since the last one (writes_done).
 *
 * On a standby the walreceiver's writes go into the ring the same way, and
 * its syncs are answered from it: a synchronous commit on the primary then
 * waits for the standby's ring, not for its disk.  The walreceiver writes
 * what it received, which may end inside a page: the rest of that page in
 * the ring is zeroed, and the ring claims the whole page, as it claims the
 * primary's partial last page.  It is anchored only at or after the page of
 * the checkpoint pg_control names (a restartpoint's), never while a
 * backup_label says the data directory is still being restored from a base
 * backup, and never over WAL the walreceiver writes again after a
 * reconnect (that is in pg_wal already), nor before the page where the
 * timeline it streams began (it streams a new timeline from the beginning
 * of that segment); it may begin inside a page, whose beginning is then
 * read from the segment, synced.  When the walreceiver exits, it syncs what
 * it wrote for real and retires the ring: the startup process, which
 * writes WAL only at a promotion's end and may rename or remove the old
 * timeline's segments there, never finds WAL unsynced or only in the ring.
 * So does the end of its stream of a timeline, where it closes its segment
 * inside it and waits for a new start point without exiting
 * (ring_on_wal_close).
 * Everything else in recovery writes and syncs as in stock PostgreSQL; on
 * a primary, the ring, emptied by the restore, is anchored at the first
 * write after recovery.
 *
 * In recovery, pg_control is written at every advance of minRecoveryPoint
 * (a buffer flushed), which a real sync of pg_wal at each would make as
 * slow as the walreceiver's own syncs.  Such a write -- the same checkpoint,
 * the state still "in archive recovery" -- needs none: minRecoveryPoint is
 * at most what was replayed, so received and answered from the ring, and
 * the restore writes the ring back before the startup process reads
 * minRecoveryPoint.  A restartpoint names a new checkpoint, and a state
 * change (promotion, shutdown) a new state: those sync for real as on a
 * primary, so the checkpoint pg_control names is always in pg_wal, and the
 * ring never begins before its page (else the ring is retired).
 *
 * Every positional change of the ring is made so that each intermediate
 * state claims only bytes the ring holds, or nothing (I6): head only grows
 * over copied bytes; tail grows up to head, or head and tail are moved
 * together through an empty state.  And every position stored is one a
 * restore accepts (ring_positions_valid, ring_format.h: WAL page
 * boundaries): what the ring may claim is what it copied, whole pages --
 * PostgreSQL writes whole pages -- not how much of it the file write took.
 * A write the file system takes only in part (ENOSPC, EDQUOT or EFBIG
 * midway) leaves the ring holding, persisted, the whole range it copied
 * before the write; PostgreSQL then writes the rest (or PANICs), and a
 * sync answered meanwhile claims that range.  The rest begins inside a
 * page: the ring takes it only if it holds that page's beginning -- it is
 * never anchored there.
 *
 * IDENTIFICATION
 *		wal_ring.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"

#include "pmwal.h"

#define RING_LOCK()		LWLockAcquire(pmwal_shared->ring_lock, LW_EXCLUSIVE)
#define RING_UNLOCK()	LWLockRelease(pmwal_shared->ring_lock)
#define SYNC_LOCK()		LWLockAcquire(pmwal_shared->sync_lock, LW_EXCLUSIVE)
#define SYNC_UNLOCK()	LWLockRelease(pmwal_shared->sync_lock)

/* Is this the walreceiver of a standby? */
static bool
receiving(void)
{
	return MyBackendType == B_WAL_RECEIVER;
}

/*
 * Does pmwal follow this process's WAL writes at all?  Not in a process
 * without a PGPROC (the postmaster), and in recovery only the
 * walreceiver's.
 */
static bool
tracking(void)
{
	return pmwal_ring != NULL && pmwal_shared != NULL && MyProc != NULL &&
		(receiving() || !RecoveryInProgress());
}

static bool ring_holds_before(XLogRecPtr lsn, TimeLineID tli);

static bool
anchored(void)
{
	return pg_atomic_read_u32(&pmwal_shared->anchored) != 0;
}

/* ---------------------------------------------------------------------
 * Moving the ring's positions (ring_lock held)
 * --------------------------------------------------------------------- */

static void
persist_word(volatile uint64 *word, uint64 value)
{
	if (PMWAL_MUTANT == MUTANT_NO_PERSIST && word == &pmwal_ring->hdr->head.v)
	{
		*word = value;
		return;
	}
	if (!ring_set_word(word, value))
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
}

/*
 * Store the ring's tail or head.  The write side never computes a position
 * the restore would refuse; this is the last check that it did not: a
 * PANIC leaves the ring as it was, which the next start restores.  Not in
 * a store-order mutant (tools/powercut/mutants), which must reach the
 * claims the ring cut is there to catch.
 */
static void
persist_position(volatile uint64 *word, XLogRecPtr lsn)
{
	RingHeader *hdr = pmwal_ring->hdr;
	XLogRecPtr	tail = word == &hdr->tail.v ? lsn : hdr->tail.v;
	XLogRecPtr	head = word == &hdr->head.v ? lsn : hdr->head.v;

	if (PMWAL_MUTANT == 0 && !ring_positions_valid(tail, head, pmwal_ring->capacity))
		elog(PANIC, "pmwal: ring positions " PMWAL_LSN " to " PMWAL_LSN " are not whole WAL pages within the ring's capacity",
			 LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head));
	persist_word(word, lsn);
}

/*
 * Claim everything copied up to "end" (copied and drained already), and the
 * rest of its page: the server's own writes end on a page boundary; the
 * walreceiver's may not, and the rest of that page is zeroes in the ring.
 */
static void
publish(XLogRecPtr end)
{
	RingHeader *hdr = pmwal_ring->hdr;

	end = RING_PAGE_END(end);
	if (end > hdr->head.v)
		persist_position(&hdr->head.v, end);
}

/*
 * Move an empty ring (tail >= head) to "at", keeping it empty at every
 * store: downwards head first, upwards tail first.
 */
static void
move_empty(XLogRecPtr at)
{
	RingHeader *hdr = pmwal_ring->hdr;

	if (at < hdr->head.v || PMWAL_MUTANT == MUTANT_TAIL_ORDER)
	{
		persist_position(&hdr->head.v, at);
		persist_position(&hdr->tail.v, at);
	}
	else
	{
		persist_position(&hdr->tail.v, at);
		persist_position(&hdr->head.v, at);
	}
}

/* Give up the ring's WAL before "to" (synced in pg_wal), page-aligned. */
static void
free_to(XLogRecPtr to)
{
	RingHeader *hdr = pmwal_ring->hdr;

	if (to <= hdr->tail.v || to > pmwal_shared->copied_end)
		return;
	/* head may lag what was copied; everything up to "to" was */
	if (to > hdr->head.v)
		persist_position(&hdr->head.v, to);
	persist_position(&hdr->tail.v, to);
}

/* Give up all the ring's WAL (synced in pg_wal). */
static void
empty_ring(void)
{
	RingHeader *hdr = pmwal_ring->hdr;

	if (hdr->tail.v < hdr->head.v)
		persist_position(&hdr->tail.v, hdr->head.v);
}

/* ---------------------------------------------------------------------
 * Real syncs
 * --------------------------------------------------------------------- */

/*
 * Sync everything written so far for real; then, if the ring is anchored,
 * give up all of it but the page the next write may rewrite (PostgreSQL
 * rewrites its last, partial WAL page: a write that came meanwhile may
 * have done so after the sync).
 */
void
ring_make_durable(void)
{
	XLogRecPtr	upto;

	SYNC_LOCK();
	upto = pg_atomic_read_u64(&pmwal_shared->written_end);
	pmwal_sync_range(upto);
	PMWAL_PAUSE_POINT("durable_after_sync");
	RING_LOCK();
	if (anchored())
	{
		if (upto > 0)
			free_to(RING_PAGE(upto - 1));
	}
	RING_UNLOCK();
	SYNC_UNLOCK();
}

/* The flusher: the WAL before "durable" was synced; free the ring there. */
void
ring_free_up_to(XLogRecPtr durable)
{
	if (durable == 0)
		return;
	RING_LOCK();
	if (anchored())
		free_to(RING_PAGE(durable - 1));
	RING_UNLOCK();
}

/*
 * Stop answering syncs from the ring: sync everything for real, empty and
 * unanchor it; "why" goes to the log.
 */
static void
retire_ring(const char *why, bool log)
{
	RingHeader *hdr = pmwal_ring->hdr;

	if (!anchored())
		return;
	SYNC_LOCK();
	pmwal_sync_range(pg_atomic_read_u64(&pmwal_shared->written_end));
	PMWAL_PAUSE_POINT("retire_after_sync");
	RING_LOCK();
	pg_atomic_write_u32(&pmwal_shared->anchored, 0);
	empty_ring();
	persist_word(&hdr->state.v, RING_STATE_EMPTY);
	RING_UNLOCK();
	SYNC_UNLOCK();
	pmwal_count(CTR_RETIRES, 1);
	if (log)
		ereport(LOG,
				(errmsg("pmwal gave up its ring for ordinary WAL syncs: %s", why)));
}

static void
retire(const char *why)
{
	retire_ring(why, true);
}

/* ---------------------------------------------------------------------
 * Following what is written
 * --------------------------------------------------------------------- */

/*
 * The first WAL write this pmwal follows (after the restore and recovery,
 * everything before it is durable), or the first on a new timeline (the
 * ring holds one timeline: the old one's WAL is synced first).
 */
static void
follow_timeline(TimeLineID tli, XLogRecPtr start)
{
	if (pg_atomic_read_u64(&pmwal_shared->durable_lsn) != 0 &&
		pmwal_shared->tli == tli)
		return;
	if (pg_atomic_read_u64(&pmwal_shared->durable_lsn) != 0)
	{
		retire("the WAL timeline changed");
		SYNC_LOCK();
		pmwal_sync_range(pg_atomic_read_u64(&pmwal_shared->written_end));
		SYNC_UNLOCK();
	}
	SYNC_LOCK();
	RING_LOCK();
	pmwal_shared->tli = tli;
	pmwal_shared->tli_start = start;
	pg_atomic_write_u64(&pmwal_shared->durable_lsn, start);
	pg_atomic_write_u64(&pmwal_shared->written_end, start);
	RING_UNLOCK();
	SYNC_UNLOCK();
}

static void
note_written(XLogRecPtr end)
{
	pmwal_advance(&pmwal_shared->written_end, end);
	pg_atomic_fetch_add_u64(&pmwal_shared->writes_done, 1);
}

/*
 * A write went to pg_wal only because of how its WAL file was opened
 * (FD_WAL_PASS): remember why, for pmwal_status, and say so in the log when
 * that changes -- pmwal may never have been anchored, so that no retirement
 * says it.
 */
static void
note_pass_cause(WalPassCause cause)
{
	if (pg_atomic_read_u32(&pmwal_shared->pass_cause) == (uint32) cause ||
		pg_atomic_exchange_u32(&pmwal_shared->pass_cause, cause) == (uint32) cause)
		return;
	if (cause == PASS_OPEN_DIRECT)
		ereport(LOG,
				(errmsg("pmwal leaves WAL written with O_DIRECT to the file system"),
				 errdetail("PostgreSQL opens WAL segment files with O_DIRECT because debug_io_direct includes \"wal\".  pmwal does not copy such writes into its ring, so PostgreSQL's own WAL syncs are real and commits are not accelerated."),
				 errhint("Remove \"wal\" from debug_io_direct to make commits durable through the ring.")));
	else
		ereport(LOG,
				(errmsg("pmwal leaves WAL written with O_SYNC or O_DSYNC to the file system"),
				 errdetail("wal_sync_method is open_sync or open_datasync: each WAL write is durable when it returns, and PostgreSQL does not sync WAL files.  pmwal does not copy such writes into its ring, so commits are not accelerated."),
				 errhint("Set wal_sync_method to fdatasync to make commits durable through the ring.")));
}

/*
 * pmwal_status: why the last WAL write went to pg_wal only, if that was
 * because of how its file was opened -- which every write through such a
 * file meets again -- or NULL.
 */
const char *
ring_pass_reason(void)
{
	switch ((WalPassCause) pg_atomic_read_u32(&pmwal_shared->pass_cause))
	{
		case PASS_OPEN_DIRECT:
			return "WAL files are opened with O_DIRECT (debug_io_direct includes wal): PostgreSQL's WAL writes and syncs go to the file system";
		case PASS_OPEN_SYNC:
			return "WAL files are opened with O_SYNC or O_DSYNC: PostgreSQL's WAL writes go to the file system";
		case PASS_NONE:
			break;
	}
	return NULL;
}

/* Is this write [start, start + len) one the ring may take?  Sets *why if not. */
static bool
copy_allowed(const WalFd *w, XLogRecPtr start, size_t len, const char **why)
{
	if (w->kind != FD_WAL)
		*why = w->pass_cause == PASS_OPEN_DIRECT ?
			"a WAL file is opened with O_DIRECT (debug_io_direct includes wal)" :
			"a WAL file is opened with O_SYNC or O_DSYNC (wal_sync_method open_datasync or open_sync)";
	else if (pg_atomic_read_u32(&pmwal_shared->enabled) == 0)
		*why = "pmwal.enabled is off";
	else if (len > pmwal_ring->capacity - XLOG_BLCKSZ)
		*why = "a single WAL write was larger than the ring";
	else if (!RING_POSITION_VALID(start + len) && !receiving())
		*why = "a WAL write did not end at a WAL page boundary";	/* XLogWrite's do */
	else
		return true;
	return false;
}

/* Anchor the unanchored ring at "start": everything before it is durable. */
static void
anchor(TimeLineID tli, XLogRecPtr start)
{
	RingHeader *hdr = pmwal_ring->hdr;

	Assert(!anchored() && !ring_holds_wal(hdr));
	if (hdr->timeline.v != tli)
		persist_word(&hdr->timeline.v, tli);
	if (PMWAL_MUTANT == MUTANT_TAIL_ORDER)
		persist_word(&hdr->state.v, RING_STATE_IN_USE);
	move_empty(start);
	persist_word(&hdr->state.v, RING_STATE_IN_USE);
	pmwal_shared->copied_end = start;
	pg_atomic_write_u32(&pmwal_shared->anchored, 1);
	pmwal_count(CTR_ANCHORS, 1);
	ereport(LOG,
			(errmsg("pmwal ring \"%s\" anchored at " PMWAL_LSN " on timeline %u; WAL syncs are answered from it",
					pmwal_ring->path, LSN_FORMAT_ARGS(start), tli)));
}

/*
 * Where the timeline the walreceiver writes began (its history file, which
 * the walreceiver fetched before it streams that timeline): the walreceiver
 * streams a new timeline from the beginning of the segment in which it
 * began, the old timeline's WAL first.  The ring holds one timeline from
 * the page where it began (restore_timeline.c): the bytes before are
 * written through, synced by PostgreSQL.  Kept per timeline in the
 * walreceiver.
 */
static TimeLineID received_tli = 0;
static XLogRecPtr received_tli_begin = InvalidXLogRecPtr;

static void
note_received_timeline(TimeLineID tli)
{
	List	   *history;
	ListCell   *cell;

	if (tli == received_tli)
		return;
	received_tli_begin = InvalidXLogRecPtr;
	if (tli > 1)
	{
		history = readTimeLineHistory(tli);
		foreach(cell, history)
		{
			TimeLineHistoryEntry *entry = (TimeLineHistoryEntry *) lfirst(cell);

			if (entry->tli == tli)
				received_tli_begin = entry->begin;
		}
		list_free_deep(history);
	}
	received_tli = tli;
}

/*
 * Was anything written since the last real sync of pg_wal?  An unanchored
 * ring is anchored only after that is synced too.
 */
static bool
written_since_sync(XLogRecPtr durable, XLogRecPtr written)
{
	return durable < written ||
		pg_atomic_read_u64(&pmwal_shared->writes_done) != pmwal_shared->synced_writes;
}

/*
 * May the walreceiver's write [start, end) anchor the unanchored ring (see
 * the file header)?  With ring_lock held.
 */
static bool
may_anchor_received(XLogRecPtr start, XLogRecPtr end)
{
	struct stat st;

	if (end <= pg_atomic_read_u64(&pmwal_shared->written_end) ||
		end <= GetXLogReplayRecPtr(NULL))
		return false;			/* written again after a reconnect or a
								 * restart: pg_wal has it */
	if (RING_PAGE(start) < RING_PAGE(pmwal_shared->control_checkpoint))
		return false;			/* before the restartpoint's page */
	if (RING_PAGE(start) < RING_PAGE(received_tli_begin))
		return false;			/* the old timeline's WAL, on the new one */
	if (stat(BACKUP_LABEL_FILE, &st) == 0)
		return false;			/* the base backup's WAL is not ours yet */
	return true;
}

/*
 * Anchor the unanchored ring under the walreceiver's write at "start",
 * which may lie inside a page: the ring begins at that page, and the
 * page's beginning is read from the segment ("fd", the write's "offset"),
 * where a real sync made it durable (reserve).  False if it cannot be
 * read: the write then goes to pg_wal only.
 */
static bool
anchor_received(int fd, const WalFd *w, XLogRecPtr start, off_t offset)
{
	XLogRecPtr	page = RING_PAGE(start);
	size_t		before = start - page;
	PGAlignedXLogBlock buf;

	if (before > 0 && pg_pread(fd, buf.data, before, offset - before) != (ssize_t) before)
		return false;
	anchor(w->tli, page);
	if (before > 0)
	{
		ring_copy_in(page, buf.data, before);
		if (!ring_drain(page, start))
			ereport(PANIC,
					(errcode_for_file_access(),
					 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
		pmwal_shared->copied_end = start;
	}
	return true;
}

/*
 * Make room in the ring for the write [start, end) through "fd" at
 * "offset" and decide whether it goes into the ring.  Returns false when
 * the ring cannot take it: then the ring is retired (or was not anchored)
 * and the write goes to pg_wal only, synced by PostgreSQL.
 */
static bool
reserve(int fd, const WalFd *w, XLogRecPtr start, XLogRecPtr end, off_t offset)
{
	RingHeader *hdr = pmwal_ring->hdr;
	uint64		cap = pmwal_ring->capacity;
	XLogRecPtr	claim_end = RING_PAGE_END(end);

	for (;;)
	{
		XLogRecPtr	written = pg_atomic_read_u64(&pmwal_shared->written_end);
		XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
		bool		need_sync = false;

		RING_LOCK();
		if (anchored() &&
			(start > pmwal_shared->copied_end ||
			 (written > 0 && start < RING_PAGE(written - 1)) ||
			 (start < hdr->tail.v && ring_holds_wal(hdr)) ||
			 (!RING_POSITION_VALID(start) && start < hdr->tail.v) ||
			 (receiving() && (start != pmwal_shared->copied_end || start < hdr->tail.v))))
		{
			/*
			 * XLogWrite writes on from the page it wrote last, and the
			 * walreceiver from the byte it wrote last: a write after a gap,
			 * or back before that, is never expected (but from a
			 * walreceiver that streams again); nor the rest of a short
			 * write into a page whose beginning the ring does not hold.
			 */
			RING_UNLOCK();
			retire(receiving() ?
				   "the walreceiver wrote WAL again that it had written before" :
				   "a WAL write did not follow the previous one");
			continue;
		}
		if (!anchored() && receiving())
		{
			if (!may_anchor_received(start, end))
			{
				RING_UNLOCK();
				return false;
			}
			if (written_since_sync(durable, written))
				need_sync = true;	/* what was written meanwhile, first */
			else
			{
				bool		ok = anchor_received(fd, w, start, offset);

				RING_UNLOCK();
				return ok;
			}
		}
		else if (!anchored() && !RING_POSITION_VALID(start))
		{
			/*
			 * The rest of a short write that went to pg_wal only: the ring
			 * lacks the beginning of its page, so it is not anchored here.
			 * It is written through (PostgreSQL's sync of it is real, or
			 * pmwal's without fsync); the next write begins on a page and
			 * anchors the ring.
			 */
			RING_UNLOCK();
			return false;
		}
		else if (!anchored())
		{
			if (written_since_sync(durable, written))
				need_sync = true;	/* what was written meanwhile, first */
			else
			{
				anchor(w->tli, start);
				RING_UNLOCK();
				return true;
			}
		}
		else
		{
			XLogRecPtr	tail = hdr->tail.v;

			if (start < tail)
			{
				/* an empty ring: the write rewrites the page at its tail */
				move_empty(start);
				tail = start;
			}
			if (claim_end - tail <= cap)
			{
				RING_UNLOCK();
				return true;
			}
			need_sync = true;	/* full: free it */
		}
		RING_UNLOCK();

		Assert(need_sync);
		(void) need_sync;
		if (anchored())
		{
			/* full: sync what was written before this write, and free it */
			pmwal_count(CTR_FULL, 1);
			ring_make_durable();
			RING_LOCK();
			if (anchored() && claim_end - Min(hdr->tail.v, start) > cap)
			{
				RING_UNLOCK();
				pmwal_count(CTR_LARGE, 1);
				retire("a single WAL write was larger than the ring");
				return false;
			}
			RING_UNLOCK();
		}
		else
		{
			SYNC_LOCK();
			pmwal_sync_range(written);
			SYNC_UNLOCK();
		}
	}
}

/*
 * The walreceiver exits: sync what it received for real and retire the
 * ring (see the file header).  A walreceiver that is killed takes the
 * server down with it, and the restore follows.
 */
static void
walreceiver_exit(int code, Datum arg)
{
	LWLockReleaseAll();
	if (!anchored())
	{
		/* what it wrote to pg_wal only, which the startup process may rename */
		SYNC_LOCK();
		pmwal_sync_range(pg_atomic_read_u64(&pmwal_shared->written_end));
		SYNC_UNLOCK();
		return;
	}
	retire_ring("the walreceiver stopped", false);
	ereport(LOG,
			(errmsg("pmwal synced the WAL the walreceiver received for real; the ring is empty until it streams again")));
}

/* ---------------------------------------------------------------------
 * Entry points
 * --------------------------------------------------------------------- */

/*
 * A WAL write up to this size is first copied into private memory, and
 * both the ring and the segment get that copy: the same bytes (I3), as
 * when the segment gets the ring's copy, but the file write reads cached
 * memory instead of what was just stored into the ring with non-temporal
 * stores -- on persistent memory, a read of the device inside the WAL
 * write, under WALWriteLock.  Larger writes (a group of commits, a full
 * WAL buffer) write the ring's copy out.
 */
#define WRITE_SNAPSHOT_SIZE		(8 * XLOG_BLCKSZ)

static union
{
	char		data[WRITE_SNAPSHOT_SIZE];
	double		force_align;
}			write_snapshot;

static const PGAlignedXLogBlock zero_page;

static bool walreceiver_exit_registered = false;

ssize_t
ring_on_wal_pwrite(int fd, const WalFd *w, const void *buf, size_t len, off_t offset)
{
	XLogRecPtr	start;
	const char *why = NULL;
	const char *src;
	ssize_t		rc;

	if (!tracking() || len == 0)
		return pwrite(fd, buf, len, offset);
	if (receiving())
	{
		if (!walreceiver_exit_registered)
		{
			before_shmem_exit(walreceiver_exit, 0);
			walreceiver_exit_registered = true;
		}
		note_received_timeline(w->tli);
	}
	XLogSegNoOffsetToRecPtr(w->segno, offset, wal_segment_size, start);
	follow_timeline(w->tli, start);

	if (!copy_allowed(w, start, len, &why) || !reserve(fd, w, start, start + len, offset))
	{
		if (why != NULL)
		{
			if (w->kind == FD_WAL && len > pmwal_ring->capacity - XLOG_BLCKSZ)
				pmwal_count(CTR_LARGE, 1);
			retire(why);
		}
		if (w->kind == FD_WAL_PASS)
			note_pass_cause((WalPassCause) w->pass_cause);
		rc = pwrite(fd, buf, len, offset);
		if (rc > 0)
			note_written(start + rc);
		pmwal_count(CTR_PASS_WRITES, 1);

		/*
		 * Without fsync PostgreSQL never syncs: each write is a durability
		 * point, as for the writes the ring takes (below).  A write it
		 * cannot take (larger than the ring, the rest of a short write) is
		 * synced for real here -- unless pmwal is switched off, or the
		 * file's own flags decide (O_DSYNC, O_DIRECT): then fsync = off
		 * means what it means without pmwal.
		 */
		if (rc > 0 && !enableFsync && w->kind == FD_WAL &&
			pg_atomic_read_u32(&pmwal_shared->enabled) != 0)
		{
			SYNC_LOCK();
			pmwal_sync_range(pg_atomic_read_u64(&pmwal_shared->written_end));
			SYNC_UNLOCK();
		}
		/* a short write: PostgreSQL writes the rest next (or PANICs) */
		if (rc > 0 && (size_t) rc < len)
			PMWAL_PAUSE_POINT("write_short");
		return rc;
	}

	/* into the ring first, persisted, then into the segment */
	if (PMWAL_MUTANT == MUTANT_HEAD_FIRST)
	{
		RING_LOCK();
		publish(start + len);
		RING_UNLOCK();
	}
	src = buf;
	if (len <= sizeof(write_snapshot.data))
	{
		memcpy(write_snapshot.data, buf, len);
		src = write_snapshot.data;
	}
	ring_copy_in(start, src, len);
	/* a walreceiver's write may end inside a page: zeroes after it */
	if (!RING_POSITION_VALID(start + len))
		ring_copy_in(start + len, zero_page.data, RING_PAGE_END(start + len) - (start + len));
	PMWAL_PAUSE_POINT("write_before_drain");
	if (!ring_drain(start, RING_PAGE_END(start + len)))
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
	PMWAL_PAUSE_POINT("write_after_copy");
	/* what the ring holds: the caller's buffer may have grown since */
	if (src != buf)
		rc = pwrite(fd, src, len, offset);
	else
		rc = ring_write_out(fd, start, len, offset);
	if (rc <= 0)
		return rc;				/* PostgreSQL retries, or PANICs */

	/*
	 * The ring holds all of [start, start + len), persisted: that is what
	 * it may claim, whole pages, even if the file took less (a short write:
	 * PostgreSQL writes the rest next, or PANICs).  pg_wal has what the
	 * write took (written_end), and only that is synced for real.
	 */
	RING_LOCK();
	pmwal_shared->copied_end = Max(pmwal_shared->copied_end, start + len);
	note_written(start + rc);
	if (pg_atomic_read_u32(&pmwal_shared->pass_cause) != PASS_NONE)
		pg_atomic_write_u32(&pmwal_shared->pass_cause, PASS_NONE);
	/* without fsync, PostgreSQL never syncs: a write is its durability point */
	if (!enableFsync)
		publish(pmwal_shared->copied_end);
	if (pmwal_shared->copied_end - pmwal_ring->hdr->tail.v >= pmwal_ring->capacity / 4)
		pmwal_wake_flusher();
	RING_UNLOCK();
	pmwal_count(CTR_RING_WRITES, 1);
	pmwal_count(CTR_BYTES_COPIED, rc);
	if ((size_t) rc < len)
		PMWAL_PAUSE_POINT("write_short");
	return rc;
}

/*
 * A WAL file is written some other way than by pwrite (PostgreSQL does not
 * do that; the ring is given up rather than trusted without it).
 */
void
ring_on_wal_other_write(const WalFd *w)
{
	if (!tracking())
		return;
	retire("a WAL file was written by a call other than pwrite()");

	/*
	 * The write's range is unknown, and not to be guessed from the file's
	 * name: moving written_end to the end of that segment moved the durable
	 * point there too, past the segment being written, which pmwal then
	 * never synced again (pmwal_sync_range begins at the durable point).
	 * The write is synced for real after it (ring_after_wal_other_write);
	 * the next anchor syncs what was written before it again.
	 */
	pg_atomic_fetch_add_u64(&pmwal_shared->writes_done, 1);
	pmwal_count(CTR_PASS_WRITES, 1);
}

/* ... and after that write: sync it for real, through pmwal's own linkage. */
void
ring_after_wal_other_write(int fd, const WalFd *w)
{
	if (!tracking())
		return;
	if (fdatasync(fd) != 0)
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not fsync WAL segment %u/%llu after a write other than pwrite(): %m",
						w->tli, (unsigned long long) w->segno)));
}

int
ring_on_wal_sync(int fd, const WalFd *w, bool datasync)
{
	bool		served = false;

	if (tracking() && w->kind == FD_WAL && anchored())
	{
		PMWAL_PAUSE_POINT("sync_before_publish");
		RING_LOCK();
		if (anchored())
		{
			publish(pmwal_shared->copied_end);
			served = true;
		}
		RING_UNLOCK();
	}
	if (!served)
	{
		pmwal_count(CTR_PASS_SYNCS, 1);
		return datasync ? fdatasync(fd) : fsync(fd);
	}
	PMWAL_PAUSE_POINT("sync_after_publish");
#ifdef PMWAL_TEST_PAUSES
	/* the same, only at a sync of a segment's end (t/045) */
	if (XLogSegmentOffset(pmwal_shared->copied_end, wal_segment_size) == 0)
		PMWAL_PAUSE_POINT("sync_after_publish_segment_end");
#endif
	pmwal_count(CTR_RING_SYNCS, 1);
	return 0;
}

/*
 * A WAL segment is closed.  The walreceiver closes the segment it writes at
 * a segment switch (XLogWalRcvClose: it wrote up to the segment's end), and
 * inside the segment when its stream of a timeline ended (its upstream was
 * promoted, or has no more WAL on the timeline asked for): it flushes,
 * closes the segment and waits for a new start point, without exiting.  Then
 * the ring is retired, as at the walreceiver's exit: the startup process may
 * now replay the next timeline from the archive, and move pg_control's
 * checkpoint (a restartpoint) or its minRecoveryPoint onto it (a write that
 * syncs nothing), while a ring still anchored on the old timeline holds the
 * page where that timeline ends, zeroes after it; a restore after a power
 * cut would read that page against the new timeline's and refuse the ring
 * (t/052).  A segment switch, and a close of another segment (the new
 * segment's durable_rename), leave the ring as it is.
 */
void
ring_on_wal_close(const WalFd *w)
{
	XLogRecPtr	written;
	XLogSegNo	last;

	if (!tracking() || !receiving() || !anchored())
		return;
	written = pg_atomic_read_u64(&pmwal_shared->written_end);
	if (written == 0 || w->tli != pmwal_shared->tli)
		return;
	XLByteToSeg(written - 1, last, wal_segment_size);
	if (w->segno != last || XLogSegmentOffset(written, wal_segment_size) == 0)
		return;
	retire("the walreceiver's stream ended inside a WAL segment");
}

/*
 * The checkpointer synced a file that is not WAL: its sync phase, just
 * before it writes pg_control (a checkpoint's, or on a standby a
 * restartpoint's).  That write syncs pg_wal for real
 * (ring_on_control_write), and PostgreSQL makes it under ControlFileLock,
 * for which a WAL writer installing a new segment waits while it holds
 * WALWriteLock -- so every commit waits for that sync.  Syncing pg_wal
 * after each such file, while the checkpointer holds neither lock, leaves
 * the sync under the lock only the WAL written since the last (and less than
 * CHECKPOINTER_PRESYNC_MIN is not worth a sync of its own).  Nothing
 * changes for durability: this is the same real sync, earlier.
 */
#define CHECKPOINTER_PRESYNC_MIN	(16 * XLOG_BLCKSZ)

void
ring_on_checkpointer_sync(void)
{
	/*
	 * Only in the sync phase of a checkpoint (ProcessSyncRequests, between
	 * CheckPointGuts' two time stamps), after its pages were written: not
	 * at the fsyncs before (replication origins, slots, two-phase state),
	 * some of which hold locks.  Less than the minimum is a short sync
	 * under the lock too.
	 */
	if (CheckpointStats.ckpt_sync_t == 0 || CheckpointStats.ckpt_sync_end_t != 0 ||
		pmwal_ring == NULL || pmwal_shared == NULL || !anchored() ||
		LWLockHeldByMe(WALWriteLock) || LWLockHeldByMe(ControlFileLock) ||
		pg_atomic_read_u64(&pmwal_shared->written_end) <
		pg_atomic_read_u64(&pmwal_shared->durable_lsn) + CHECKPOINTER_PRESYNC_MIN)
		return;
	PMWAL_PAUSE_POINT("checkpointer_before_presync");
	ring_make_durable();
	PMWAL_PAUSE_POINT("checkpointer_after_presync");
}

/*
 * pg_control as the postmaster found it at the start (after the restore):
 * what a write of it in recovery is compared with.
 */
void
ring_note_control(const ControlFileData *control)
{
	pmwal_shared->control_checkpoint = control->checkPoint;
	pmwal_shared->control_state = control->state;
}

/*
 * Is this write of pg_control ("control") one that moves only
 * minRecoveryPoint (or a base backup's end) in recovery: the same
 * checkpoint, still in archive recovery?  Such a write needs no sync of
 * pg_wal (see the file header).  Remembers what it names.
 */
static bool
control_write_in_recovery_only(const ControlFileData *control)
{
	bool		same;

	RING_LOCK();
	same = control->state == DB_IN_ARCHIVE_RECOVERY &&
		pmwal_shared->control_state == DB_IN_ARCHIVE_RECOVERY &&
		control->checkPoint == pmwal_shared->control_checkpoint;
	pmwal_shared->control_checkpoint = control->checkPoint;
	pmwal_shared->control_state = control->state;
	RING_UNLOCK();
	return same;
}

/*
 * pg_control is about to be written ("buf": the ControlFileData written, if
 * known): sync everything written so far for real and give up the ring's
 * WAL (see the file header).  At the shutdown checkpoint's (or shutdown
 * restartpoint's) last write, the ring is retired: emptied, unanchored and
 * marked empty; nothing is written after it.
 */
void
ring_on_control_write(const void *buf, size_t len)
{
	const ControlFileData *control = NULL;
	bool		shutdown;

	if (pmwal_ring == NULL || pmwal_shared == NULL || MyProc == NULL)
		return;
	if (buf != NULL && len >= sizeof(ControlFileData))
		control = (const ControlFileData *) buf;
	if (control != NULL && control_write_in_recovery_only(control))
		return;
	shutdown = control != NULL &&
		(control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY);
	if (!anchored() &&
		pg_atomic_read_u64(&pmwal_shared->written_end) <=
		pg_atomic_read_u64(&pmwal_shared->durable_lsn))
		return;
	PMWAL_PAUSE_POINT("control_before_sync");
	if (shutdown && anchored())
	{
		retire_ring("the server shut down", false);
		ereport(LOG,
				(errmsg("pmwal synced pg_wal at the shutdown checkpoint; the ring is empty")));
	}
	else
	{
		ring_make_durable();

		/*
		 * A restartpoint at WAL the walreceiver has not written again yet;
		 * or one on a newer timeline than the ring's: replayed from the
		 * archive while the walreceiver, its upstream promoted, waits for
		 * a new start point (it does not exit, so the ring stays anchored
		 * on the old timeline, holding the page where that timeline ends,
		 * past the point where the new one left it).  A restore with
		 * pg_control on the new timeline refuses such a ring (t/052).
		 */
		if (control != NULL && control->state == DB_IN_ARCHIVE_RECOVERY &&
			ring_holds_before(RING_PAGE(control->checkPoint),
							  control->checkPointCopy.ThisTimeLineID))
			retire_ring("a restartpoint names WAL before the ring's beginning, or a newer timeline", false);
	}
	pmwal_count(CTR_CONTROL_SYNCS, 1);
	PMWAL_PAUSE_POINT("control_after_sync");
}

/*
 * Does the anchored ring hold WAL before "lsn", or WAL of a timeline older
 * than "tli"?
 */
static bool
ring_holds_before(XLogRecPtr lsn, TimeLineID tli)
{
	bool		before;

	RING_LOCK();
	before = anchored() &&
		(pmwal_ring->hdr->tail.v < lsn || pmwal_ring->hdr->timeline.v < tli);
	RING_UNLOCK();
	return before;
}

/* Are WAL syncs answered from the ring right now? */
bool
ring_anchored(void)
{
	return pmwal_shared != NULL && anchored();
}

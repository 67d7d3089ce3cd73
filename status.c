/*-------------------------------------------------------------------------
 *
 * status.c
 *		The pmwal_status() function behind the pmwal_status view.
 *
 * One row: where the ring is and how it is persisted, the WAL range it
 * holds, whether commits are accelerated right now and why not, and the
 * counters since the server (re)started.  The ring's positions are read
 * under ring_lock, so that they describe one moment.
 *
 * IDENTIFICATION
 *		status.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"

#include "pmwal.h"

PG_FUNCTION_INFO_V1(pmwal_status);

/* path, mode, capacity, tail, head, bytes_in_use, state, durable_lsn,
 * accelerated, reason, flusher_pid, then the counters */
#define STATUS_FIXED_COLS	11
#define STATUS_COLS			(STATUS_FIXED_COLS + NUM_COUNTERS)

/*
 * The counters in column order: those of version 1.0 of the view first, so
 * that a server with the 1.0 SQL still installed sees the columns it knows.
 */
static const PmwalCounter counter_columns[NUM_COUNTERS] = {
	CTR_RING_COMMITS, CTR_COPIES, CTR_BYTES_COPIED, CTR_GAP_COPIES,
	CTR_SPACE_WAITS, CTR_SYNCS, CTR_SEGMENTS_SYNCED, CTR_DIR_SYNCS,
	CTR_FALLBACK_FIRST + FALLBACK_INACTIVE, CTR_FALLBACK_FIRST + FALLBACK_FULL,
	CTR_FALLBACK_FIRST + FALLBACK_LARGE, CTR_FALLBACK_FIRST + FALLBACK_READ,
	CTR_FALLBACK_FIRST + FALLBACK_RECYCLED, CTR_FALLBACK_FIRST + FALLBACK_PERSIST,
	/* 1.1 */
	CTR_SEGMENTS_PREPARED, CTR_FALLBACK_FIRST + FALLBACK_SEGMENT,
	CTR_FALLBACK_FIRST + FALLBACK_PAUSED, CTR_FALLBACK_FIRST + FALLBACK_OVERRUN,
};

/* Why commits are not accelerated right now, or NULL if they are. */
static const char *
not_accelerated_reason(void)
{
	const char *reason;

	if (pmwal_ring == NULL)
		return "pmwal.path is not set";
	if (!pmwal_enabled)
		return "pmwal.enabled is off";
	if ((reason = pmwal_stand_aside_reason()) != NULL)
		return reason;
	if (!pg_atomic_read_u32(&pmwal_shared->accepting))
		return pmwal_shared->flusher_pid == 0 ?
			"the pmwal flusher is not running" :
			"the pmwal flusher has not anchored the ring yet";
	return NULL;
}

Datum
pmwal_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[STATUS_COLS];
	bool		nulls[STATUS_COLS];
	const char *reason;
	int			i = 0;

	pmwal_check_loaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));
	reason = not_accelerated_reason();

	values[i++] = CStringGetTextDatum(pmwal_path ? pmwal_path : "");
	if (pmwal_ring == NULL)
	{
		for (; i < 8; i++)
			nulls[i] = true;
	}
	else
	{
		RingHeader *hdr = pmwal_ring->hdr;
		XLogRecPtr	tail;
		XLogRecPtr	head;
		uint64		state;

		LWLockAcquire(pmwal_shared->ring_lock, LW_SHARED);
		tail = hdr->tail.v;
		head = hdr->head.v;
		state = hdr->state.v;
		LWLockRelease(pmwal_shared->ring_lock);

		values[i++] = CStringGetTextDatum(pmwal_mode_name(pmwal_ring->mode));
		values[i++] = Int64GetDatum((int64) pmwal_ring->capacity);
		values[i++] = LSNGetDatum(tail);
		values[i++] = LSNGetDatum(head);
		values[i++] = Int64GetDatum(head > tail ? (int64) (head - tail) : 0);
		values[i++] = CStringGetTextDatum(ring_state_name(state));
		values[i++] = LSNGetDatum(pg_atomic_read_u64(&pmwal_shared->durable_lsn));
	}
	values[i++] = BoolGetDatum(reason == NULL);
	if (reason)
		values[i++] = CStringGetTextDatum(reason);
	else
		nulls[i++] = true;
	if (pmwal_shared->flusher_pid != 0)
		values[i++] = Int32GetDatum(pmwal_shared->flusher_pid);
	else
		nulls[i++] = true;
	Assert(i == STATUS_FIXED_COLS);
	for (int c = 0; c < NUM_COUNTERS && i < tupdesc->natts; c++)
		values[i++] = Int64GetDatum((int64) pmwal_counter_total(counter_columns[c]));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*-------------------------------------------------------------------------
 *
 * status.c
 *		The pmwal_status() function behind the pmwal_status view.
 *
 * One row: where the ring is and how it is persisted, the WAL range it
 * holds, whether WAL syncs are answered from it right now and why not, the
 * binding's generation, the library's version, and the counters since the
 * server (re)started.  The ring's positions are read under ring_lock, so
 * that they describe one moment.
 *
 * IDENTIFICATION
 *		status.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "funcapi.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"

#include "pmwal.h"

PG_FUNCTION_INFO_V1(pmwal_status);

/*
 * Which way a commit's WAL flush is made durable, and what it waits for
 * after that: the ring, the ring and then the synchronous standbys (the
 * standby wait is PostgreSQL's own, after the local flush, unchanged), or
 * the file system's sync.  Commits at synchronous_commit = local or off,
 * in any configuration, wait for no standby.
 */
static const char *
commit_path(const char *not_accelerated)
{
	bool		standbys = max_wal_senders > 0 &&
		SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0';

	/*
	 * A standby: what the walreceiver's flush, which a synchronous commit
	 * on the primary waits for, is made durable by.  The primary cannot
	 * see that (nothing in the replication protocol says it), so its own
	 * row says only "synchronous standby"; this row says it on the standby.
	 */
	if (RecoveryInProgress())
		return not_accelerated ? "standby: received WAL synced by the file system" :
			"standby: received WAL synced through the ring";
	if (not_accelerated)
		return standbys ? "file system sync, then synchronous standby" : "file system sync";
	return standbys ? "ring, then synchronous standby" : "ring";
}

/*
 * path, mode, capacity, tail_lsn, head_lsn, bytes_in_use, state,
 * durable_lsn, accelerated, reason, commit_path, flusher_pid, generation,
 * ring_id, library_version, then the counters in PmwalCounter order
 */
#define STATUS_FIXED_COLS	15
#define STATUS_COLS			(STATUS_FIXED_COLS + NUM_COUNTERS)

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
	if (tupdesc->natts != STATUS_COLS)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed version of extension \"pmwal\" does not match its library %s",
						PMWAL_VERSION),
				 errhint("Run ALTER EXTENSION pmwal UPDATE.")));
	memset(nulls, 0, sizeof(nulls));
	reason = pmwal_not_accelerated_reason();

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
	values[i++] = CStringGetTextDatum(commit_path(reason));
	if (pmwal_shared->flusher_pid != 0)
		values[i++] = Int32GetDatum(pmwal_shared->flusher_pid);
	else
		nulls[i++] = true;
	if (pmwal_ring != NULL)
	{
		char		id[2 * RING_ID_LEN + 1];

		ring_id_text(pmwal_ring->hdr->st.s.ring_id, id);
		values[i++] = Int64GetDatum((int64) pmwal_ring->hdr->generation.v);
		values[i++] = CStringGetTextDatum(id);
	}
	else
	{
		nulls[i++] = true;
		nulls[i++] = true;
	}
	values[i++] = CStringGetTextDatum(PMWAL_VERSION);
	Assert(i == STATUS_FIXED_COLS);
	for (int c = 0; c < NUM_COUNTERS; c++)
		values[i++] = Int64GetDatum((int64) pmwal_counter_total((PmwalCounter) c));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

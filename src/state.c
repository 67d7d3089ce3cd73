/*-------------------------------------------------------------------------
 *
 * state.c
 *		pmwal's shared memory: locks, positions and counters.
 *
 * The ring itself is a mapping inherited from the postmaster; what lives
 * here is what processes must agree on that is not part of the ring.  It is
 * created afresh at every start and crash-restart, so the counters count
 * since then.  Counters live in one slot per process (by pgprocno), written
 * only by their owner, so that counting a commit touches no shared cache
 * line; pmwal_status adds the slots up.
 *
 * IDENTIFICATION
 *		state.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "pmwal.h"
#include "pmwal_compat.h"

#define PMWAL_TRANCHE		"pmwal"
#define PMWAL_NUM_LOCKS		2

PmwalShared *pmwal_shared = NULL;

/* One process's counters, padded to keep owners off each other's lines. */
typedef union PmwalCounterSlot
{
	pg_atomic_uint64 c[NUM_COUNTERS];
	char		pad[TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(pg_atomic_uint64) * NUM_COUNTERS)];
} PmwalCounterSlot;

static PmwalCounterSlot *counter_slots = NULL;

/* A slot per PGPROC that runs code, and a shared one for the postmaster. */
static int
counter_slot_count(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + 1;
}

Size
pmwal_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(PmwalShared)),
					mul_size(counter_slot_count(), sizeof(PmwalCounterSlot)));
}

/* Called from the shmem_request_hook. */
void
pmwal_shmem_request(void)
{
	RequestAddinShmemSpace(pmwal_shmem_size());
	RequestNamedLWLockTranche(PMWAL_TRANCHE, PMWAL_NUM_LOCKS);
}

/* Called from the shmem_startup_hook, at start and at every crash-restart. */
void
pmwal_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	pmwal_shared = ShmemInitStruct("pmwal", pmwal_shmem_size(), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(PMWAL_TRANCHE);

		memset(pmwal_shared, 0, sizeof(PmwalShared));
		pmwal_shared->ring_lock = &locks[0].lock;
		pmwal_shared->sync_lock = &locks[1].lock;
		pg_atomic_init_u32(&pmwal_shared->enabled, pmwal_enabled ? 1 : 0);
		pg_atomic_init_u32(&pmwal_shared->anchored, 0);
		pg_atomic_init_u64(&pmwal_shared->durable_lsn, 0);
		pg_atomic_init_u64(&pmwal_shared->written_end, 0);
		pg_atomic_init_u64(&pmwal_shared->writes_done, 0);
		pg_atomic_init_u32(&pmwal_shared->pass_cause, PASS_NONE);
		pg_atomic_init_u32(&pmwal_shared->panicked, 0);
		pmwal_shared->wait_event_flusher = pmwal_new_wait_event("PmwalFlusherMain");
	}
	counter_slots = (PmwalCounterSlot *) ((char *) pmwal_shared + MAXALIGN(sizeof(PmwalShared)));
	if (!found)
	{
		for (int s = 0; s < counter_slot_count(); s++)
			for (int i = 0; i < NUM_COUNTERS; i++)
				pg_atomic_init_u64(&counter_slots[s].c[i], 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
pmwal_count(PmwalCounter counter, uint64 n)
{
	pg_atomic_uint64 *c;

	if (MyProc == NULL)
	{
		c = &counter_slots[counter_slot_count() - 1].c[counter];
		pg_atomic_fetch_add_u64(c, n);
		return;
	}
	c = &counter_slots[PMWAL_MY_PROC_NUMBER].c[counter];
	pg_atomic_write_u64(c, pg_atomic_read_u64(c) + n);
}

uint64
pmwal_counter_total(PmwalCounter counter)
{
	uint64		total = 0;

	for (int s = 0; s < counter_slot_count(); s++)
		total += pg_atomic_read_u64(&counter_slots[s].c[counter]);
	return total;
}

/* Move a monotonic position forward to "to", never backward. */
void
pmwal_advance(pg_atomic_uint64 *lsn, XLogRecPtr to)
{
	uint64		cur = pg_atomic_read_u64(lsn);

	while (cur < to)
	{
		if (pg_atomic_compare_exchange_u64(lsn, &cur, to))
			break;
	}
}

/*-------------------------------------------------------------------------
 *
 * pmwal.h
 *		Declarations shared by the files of the pmwal extension.
 *
 * Each .c file owns one concern: pmwal.c is the door (GUCs, hooks, worker
 * registration), ring_format.c the on-media layout, ring_file.c opening and
 * persisting the ring, state.c the shared memory, status.c the SQL view.
 *
 * IDENTIFICATION
 *		pmwal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_H
#define PMWAL_H

#include "access/xlogdefs.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "ring_format.h"

/*
 * Verified against PostgreSQL 15 to 18 (docs/versions.md): shmem_request_hook
 * and MarkGUCPrefixReserved are new in 15, and the commit path's correctness
 * rests on how each version's XLogFlush, RecordTransactionCommit and the
 * checkpointer treat the flush pointer.  Another major version must be
 * checked against DESIGN.md's hazards before it is allowed here; the names
 * that differ between versions are in pmwal_compat.h.
 */
#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 190000
#error "pmwal supports PostgreSQL 15 to 18"
#endif

/* How the ring's updates are made durable. */
typedef enum PmwalMode
{
	PMWAL_MODE_PMEM,			/* real persistent memory: cache flushes */
	PMWAL_MODE_EMULATED,		/* PMEM_IS_PMEM_FORCE=1: flushes, no power safety */
	PMWAL_MODE_MSYNC			/* ordinary mapping: msync() */
} PmwalMode;

/*
 * The mapped ring, as seen by this process.  Set up once by the postmaster
 * (or a standalone backend) and inherited by every child through fork(),
 * together with the descriptor that holds the ring's lock.
 */
typedef struct PmwalRing
{
	RingHeader *hdr;
	char	   *data;			/* hdr + RING_HEADER_SIZE */
	uint64		capacity;		/* bytes of WAL the data area holds */
	size_t		mapped_len;
	int			fd;				/* holds the flock() that owns the ring */
	PmwalMode	mode;
} PmwalRing;

/* pmwal.c: GUC variables */
extern PGDLLIMPORT char *pmwal_path;
extern PGDLLIMPORT int pmwal_size_mb;
extern PGDLLIMPORT bool pmwal_enabled;
extern PGDLLIMPORT bool pmwal_require_pmem;

/*
 * Single-point mutations of the ring's store order (wal_copy.c,
 * ring_file.c), compiled in only by tools/powercut/mutants
 * (-DPMWAL_MUTANT=n) to show that the ring cut catches them (issue 12).
 * 0 in every real build.
 */
#ifndef PMWAL_MUTANT
#define PMWAL_MUTANT 0
#endif
#define MUTANT_NO_DRAIN			1	/* ring persists flush but never drain */
#define MUTANT_HEAD_FIRST		2	/* head, last_end published before the copy */
#define MUTANT_NO_PERSIST		3	/* head and last_end stored, not persisted */
#define MUTANT_REANCHOR_ORDER	4	/* re-anchor stores head before tail */

/* ring_file.c */
extern PmwalRing *pmwal_ring;	/* NULL while pmwal is inactive */
extern void pmwal_ring_attach(void);
extern const char *pmwal_mode_name(PmwalMode mode);
extern bool ring_persist(const void *addr, size_t len);
extern bool ring_set_word(volatile uint64 *word, uint64 value);
extern void ring_write(char *dst, const char *src, size_t len);
extern bool ring_drain(XLogRecPtr start, XLogRecPtr end);
extern void ring_write_static(uint64 sysid, TimeLineID tli, uint64 capacity);

/*
 * Why a commit could not be made durable through the ring and was made
 * durable the ordinary way (a flush with fsync, then pmwal's own sync)
 * instead.  All but FALLBACK_OVERRUN are decided before the commit's WAL is
 * written, so that PostgreSQL never trusts WAL that neither the ring nor a
 * sync holds for longer than one copy.
 */
typedef enum PmwalFallback
{
	FALLBACK_INACTIVE,			/* the ring was not accepting commits */
	FALLBACK_FULL,				/* no room in the ring within the bounded wait */
	FALLBACK_LARGE,				/* more WAL to copy than pmwal copies at once */
	FALLBACK_READ,				/* WAL could not be read back from pg_wal */
	FALLBACK_RECYCLED,			/* the range's segment was already recycled */
	FALLBACK_PERSIST,			/* persisting the ring failed (msync mode) */
	FALLBACK_SEGMENT,			/* the WAL would enter a segment not prepared */
	FALLBACK_PAUSED,			/* an irreversible statement runs (2PC, DROP DATABASE) */
	FALLBACK_OVERRUN,			/* after the write: WAL inserted meanwhile did
								 * not fit; synced at once */
	NUM_FALLBACKS
} PmwalFallback;

/* Results of an attempt to put WAL into the ring, besides a PmwalFallback. */
#define RING_APPEND_OK		(-1)
#define RING_NEED_SPACE		(-2)	/* only from ring_copy_locked */

/* Counters shown by pmwal_status; reset when the server (re)starts. */
typedef enum PmwalCounter
{
	CTR_RING_COMMITS,			/* commits made durable through the ring */
	CTR_COPIES,					/* copies of WAL into the ring */
	CTR_BYTES_COPIED,
	CTR_GAP_COPIES,				/* copies made by the flusher, not a commit */
	CTR_SPACE_WAITS,			/* times a committer waited for room */
	CTR_SYNCS,					/* sync rounds of pg_wal */
	CTR_SEGMENTS_SYNCED,		/* fdatasync() calls on segments */
	CTR_DIR_SYNCS,				/* fsync() calls on pg_wal/ */
	CTR_SEGMENTS_PREPARED,		/* segments the flusher created or synced ahead */
	CTR_FALLBACK_FIRST,			/* one counter per PmwalFallback */
	NUM_COUNTERS = CTR_FALLBACK_FIRST + NUM_FALLBACKS
} PmwalCounter;

/*
 * State every process consults.  Positions are LSNs.
 *
 *	durable_lsn		all WAL before it is fsynced in pg_wal, directory entries
 *					included; always a record boundary
 *	ack_lsn			a commit record ending at or before it may be
 *					acknowledged: Max(ring last_end, durable_lsn)
 *	cover_lsn		all WAL before it survives a power loss:
 *					Max(ring head, durable_lsn)
 *	pending_end		highest commit end that is waiting for the ring; the
 *					copier moves last_end up to it
 *	writes_open		commits between their announcement (before their write
 *					without fsync) and the end of their ring copy
 *	nosync_upto		highest flush pointer a write without fsync left behind
 *	prepared_segno	pg_wal/ holds every segment up to this one of timeline
 *					"tli", created and synced with its directory entry
 *	accepting		a commit may start a write without fsync
 *	paused			statements that must see only real flushes are running
 *	exposure_*		mirror of the ring's "exposed" word, and the flusher's
 *					handshake for clearing it (see wal_copy.c)
 *
 * All positions only move forward.  ring_lock serialises copying into the
 * ring and every change of the ring's tail, head and last_end.  sync_lock
 * serialises syncing pg_wal and advancing durable_lsn; ring_lock is taken
 * after it, never before.
 */
typedef struct PmwalShared
{
	LWLock	   *ring_lock;
	LWLock	   *sync_lock;

	/*
	 * Every commit reads the first group and writes the other two; each
	 * group has a cache line of its own so that the writes of one core do
	 * not keep invalidating what the other core only reads.
	 */
	pg_atomic_uint32 accepting pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint32 paused;
	pg_atomic_uint32 exposure_marked;
	pg_atomic_uint32 exposure_clearing;
	pg_atomic_uint32 flusher_idle;
	pg_atomic_uint64 durable_lsn;
	pg_atomic_uint64 ack_lsn;
	pg_atomic_uint64 cover_lsn;
	pg_atomic_uint64 prepared_segno;
	pg_atomic_uint64 pending_end pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint32 writes_open pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint64 nosync_upto;

	/* the rest is read and written by the flusher and under ring_lock */
	TimeLineID	tli pg_attribute_aligned(PG_CACHE_LINE_SIZE);	/* timeline of the WAL in the ring */
	XLogSegNo	dir_synced_segno;	/* pg_wal/ fsynced since it existed */
	pid_t		flusher_pid;
	Latch	   *flusher_latch;
	pg_atomic_uint32 panicked;	/* a process PANICked since the last reset */
	ConditionVariable space_cv; /* committers waiting for room */
	pg_atomic_uint32 space_waiters;

	/* wait events: a committer waiting for room, the flusher's sleep */
	uint32		wait_event_space;
	uint32		wait_event_flusher;
} PmwalShared;

extern PmwalShared *pmwal_shared;
extern Size pmwal_shmem_size(void);
extern void pmwal_shmem_request(void);
extern void pmwal_shmem_init(void);
extern void pmwal_count(PmwalCounter counter, uint64 n);
extern uint64 pmwal_counter_total(PmwalCounter counter);
extern void pmwal_advance(pg_atomic_uint64 *lsn, XLogRecPtr to);
extern const char *pmwal_fallback_name(PmwalFallback reason);

/* pmwal.c */
extern PGDLLIMPORT int pmwal_flush_interval;
extern void pmwal_check_loaded(void);
extern const char *pmwal_stand_aside_reason(void);
extern bool pmwal_sync_method_conflicts(void);
extern bool pmwal_ring_unusable(void);

/* commit.c */
extern void pmwal_commit_init(void);

/* wal_copy.c */

/* Who copies WAL into the ring; see ring_copy_locked(). */
typedef enum CopyKind
{
	COPY_WINDOW,				/* a committer after its write without fsync */
	COPY_FLUSHER,				/* the flusher, covering a gap */
	COPY_COVER					/* anyone making sure flushed WAL is covered */
} CopyKind;

extern int	write_window_open(XLogRecPtr end);
extern void write_window_close(void);
extern int	ring_append(XLogRecPtr end, bool is_commit, CopyKind kind);
extern int	ring_copy_locked(XLogRecPtr end, bool is_commit, CopyKind kind);
extern int	ring_reanchor_locked(XLogRecPtr at);
extern void ring_publish_acks(void);
extern void exposure_clear_if_quiet(void);
extern void wait_for_writes_closed(void);

/* wal_read.c */
extern int	wal_read(char *dst, XLogRecPtr start, Size len, TimeLineID tli);
extern void wal_read_close(void);

/* wal_sync.c */
extern void pmwal_sync_upto(XLogRecPtr upto, XLogRecPtr boundary);
extern void pmwal_ensure_durable(XLogRecPtr end, bool is_commit);
extern XLogRecPtr pmwal_write_boundary(void);
extern bool pmwal_fsync_fd(int fd, const char *path, int elevel);
extern bool pmwal_fsync_path(const char *path, bool isdir, int elevel);
extern int	pmwal_prepare_segments(XLogRecPtr upto, TimeLineID tli);

/* restore.c */
extern void pmwal_restore(bool crash_restart);
extern void pmwal_exit_sync(int code, Datum arg);
extern void pmwal_watch_panics(void);

/* restore_timeline.c */
struct ControlFileData;
extern void pmwal_restore_history_init(struct ControlFileData *control);
extern TimeLineID pmwal_restore_timeline(struct ControlFileData *control, TimeLineID ring_tli,
										 XLogRecPtr tail, XLogRecPtr head);
extern int	pmwal_open_segment(XLogSegNo segno, char *path);
extern void pmwal_reserve_promotion_timeline(struct ControlFileData *control,
											 XLogRecPtr shipped_after);

/* gate.c */
extern void pmwal_gate_init(void);
extern bool pmwal_finishing_prepared(void);

/* test_pause.c: test-only pause points, inert unless pmwal.test_pause is set */
extern PGDLLIMPORT char *pmwal_test_pause;
extern PGDLLIMPORT bool pmwal_pause_armed;
extern void pmwal_test_pause_assign(const char *newval, void *extra);
extern void pmwal_pause_point_slow(const char *point);
#define PMWAL_PAUSE_POINT(point) \
	do { \
		if (unlikely(pmwal_pause_armed)) \
			pmwal_pause_point_slow(point); \
	} while (0)

/* flusher.c */
extern void pmwal_flusher_register(void);
PGDLLEXPORT void pmwal_flusher_main(Datum main_arg);

#endif							/* PMWAL_H */

/*-------------------------------------------------------------------------
 *
 * pmwal.h
 *		Declarations shared by the files of the pmwal extension.
 *
 * pmwal serves the sync of PostgreSQL's WAL segment files from a ring of
 * persistent memory: every write the server makes into a WAL segment is
 * also copied into the ring, and the segment's fdatasync/fsync returns
 * once the ring holds everything written, persisted.  PostgreSQL's own
 * flush pointer, and everything that trusts it, stays true.  The files:
 *
 *	pmwal.c			the door: GUCs, hooks, worker registration
 *	interpose.c		puts pmwal in front of the server's WAL system calls
 *	wal_ring.c		what a WAL write, a WAL sync and a pg_control write do
 *	wal_sync.c		real syncs of pg_wal
 *	flusher.c		the background worker that makes the ring's WAL durable
 *					in pg_wal and frees the ring
 *	binding.c		which ring holds this data directory's WAL, and refusing
 *					to start on any other
 *	restore.c		writing the ring back into pg_wal before redo
 *	restore_timeline.c	reading pg_wal along the cluster's timelines
 *	ring_file.c		opening, creating, locking and mapping the ring
 *	ring_format.c	the on-media layouts (shared with pmwal_ctl)
 *	state.c			shared memory and counters
 *	status.c		the pmwal_status view
 *	test_pause.c	test-only pause points (test builds only)
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
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "pmwal_compat.h"
#include "pmwal_version.h"
#include "ring_format.h"

struct ControlFileData;

/*
 * Verified against PostgreSQL 15 to 19 (docs/versions.md): which system
 * calls each version's XLogWrite, issue_xlog_fsync and update_controlfile
 * make, that the server binary makes them through its PLT, and (18, 19)
 * that its AIO subsystem, io_uring included, never writes or syncs WAL.
 * Another major version must be checked the same way before it is allowed
 * here.
 */
#if PG_VERSION_NUM < 150000 || PG_VERSION_NUM >= 200000
#error "pmwal supports PostgreSQL 15 to 19"
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
	char	   *path;			/* pmwal.path as attached */
} PmwalRing;

/* pmwal.c: GUC variables */
extern PGDLLIMPORT char *pmwal_path;
extern PGDLLIMPORT int pmwal_size_mb;
extern PGDLLIMPORT bool pmwal_enabled;
extern PGDLLIMPORT bool pmwal_require_pmem;
extern PGDLLIMPORT int pmwal_flush_interval;

/*
 * Single-point mutations of the ring's store order (wal_ring.c,
 * ring_file.c), compiled in only by tools/powercut/mutants
 * (-DPMWAL_MUTANT=n) to show that the ring cut catches them.  0 in every
 * real build.
 */
#ifndef PMWAL_MUTANT
#define PMWAL_MUTANT 0
#endif
#define MUTANT_NO_DRAIN			1	/* copies are flushed, never drained */
#define MUTANT_HEAD_FIRST		2	/* head published before the copy */
#define MUTANT_NO_PERSIST		3	/* head stored, not persisted */
#define MUTANT_TAIL_ORDER		4	/* an empty ring moved up: head before tail */

/* ring_file.c */
extern PmwalRing *pmwal_ring;	/* NULL while pmwal is inactive */
extern void pmwal_ring_attach(struct ControlFileData *control);
extern const char *pmwal_mode_name(PmwalMode mode);
extern bool ring_persist(const void *addr, size_t len);
extern bool ring_set_word(volatile uint64 *word, uint64 value);
extern void ring_set_word_or_die(volatile uint64 *word, uint64 value);
extern void ring_copy_in(XLogRecPtr start, const char *src, size_t len);
extern bool ring_drain(XLogRecPtr start, XLogRecPtr end);
extern ssize_t ring_write_out(int fd, XLogRecPtr start, size_t len, off_t offset);
extern void ring_write_owner(uint64 generation);
extern bool ring_read_guarded(void *dst, const void *src, size_t len, uint64 *fault_offset);
extern char *ring_unreadable_reason(void);
extern char *ring_unreadable_hint(void);
extern void ring_require_readable_header(void);
extern void ring_restore_size(void);

/* Counters shown by pmwal_status; reset when the server (re)starts. */
typedef enum PmwalCounter
{
	CTR_RING_WRITES,			/* WAL writes copied into the ring */
	CTR_BYTES_COPIED,
	CTR_RING_SYNCS,				/* WAL syncs answered from the ring */
	CTR_PASS_WRITES,			/* WAL writes not copied (see reason) */
	CTR_PASS_SYNCS,				/* WAL syncs left to the file system */
	CTR_FULL,					/* a write found the ring full and made room */
	CTR_LARGE,					/* a write larger than the ring could take */
	CTR_RETIRES,				/* the ring was given up for ordinary syncs */
	CTR_ANCHORS,				/* the ring was anchored at a write */
	CTR_SYNC_ROUNDS,			/* rounds of real syncs of pg_wal */
	CTR_SEGMENTS_SYNCED,		/* fdatasync() calls on segments */
	CTR_DIR_SYNCS,				/* fsync() calls on pg_wal/ */
	CTR_CONTROL_SYNCS,			/* real syncs before a pg_control write */
	NUM_COUNTERS
} PmwalCounter;

/*
 * State every process consults.  Positions are LSNs on the timeline "tli".
 *
 *	anchored		every WAL write since the ring was anchored was copied
 *					into it: a WAL sync may be answered from the ring
 *	copied_end		end of what was copied (and drained) into the ring: what
 *					a sync answered from the ring claims; a page boundary
 *	written_end		end of what was written into pg_wal's segment files:
 *					what real syncs cover; behind copied_end after a short
 *					write, until PostgreSQL has written the rest
 *	durable_lsn		everything written before it is synced in pg_wal by a
 *					real sync of pmwal's, directory entries included; 0
 *					until the first WAL write after recovery (everything
 *					before that is durable: the restore and PostgreSQL's own
 *					syncs during recovery made it so)
 *
 * ring_lock serialises every change of these and of the ring's tail and
 * head; sync_lock serialises real syncs and advancing durable_lsn, and is
 * taken before ring_lock, never after.  WAL writes themselves are
 * serialised by PostgreSQL (XLogWrite runs under WALWriteLock).
 */
typedef struct PmwalShared
{
	LWLock	   *ring_lock;
	LWLock	   *sync_lock;

	/* read by every WAL write and sync */
	pg_atomic_uint32 enabled pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	pg_atomic_uint32 anchored;
	pg_atomic_uint64 durable_lsn;
	pg_atomic_uint64 written_end;
	pg_atomic_uint64 writes_done;	/* WAL writes that returned */
	pg_atomic_uint32 pass_cause;	/* WalPassCause of the last WAL write:
									 * PASS_NONE once one went into the ring */

	/* under ring_lock */
	XLogRecPtr	copied_end pg_attribute_aligned(PG_CACHE_LINE_SIZE);
	TimeLineID	tli;
	uint64		synced_writes;	/* writes_done covered by the last real sync
								 * (under sync_lock) */
	XLogSegNo	dir_synced_segno;	/* pg_wal/ fsynced since it held this
									 * (under sync_lock) */
	XLogRecPtr	tli_start;		/* where pmwal began following timeline tli
								 * (follow_timeline; under sync_lock) */
	XLogRecPtr	control_checkpoint; /* the checkpoint pg_control names, and */
	uint32		control_state;	/* its state: as found at the start, then as
								 * each write of it said (ring_lock) */

	pid_t		flusher_pid;
	Latch	   *flusher_latch;
	pg_atomic_uint32 panicked;	/* a process PANICked since the last reset */
	uint32		wait_event_flusher;
} PmwalShared;

extern PmwalShared *pmwal_shared;
extern Size pmwal_shmem_size(void);
extern void pmwal_shmem_request(void);
extern void pmwal_shmem_init(void);
extern void pmwal_count(PmwalCounter counter, uint64 n);
extern uint64 pmwal_counter_total(PmwalCounter counter);
extern void pmwal_advance(pg_atomic_uint64 *lsn, XLogRecPtr to);

/* pmwal.c */
extern void pmwal_check_loaded(void);
extern const char *pmwal_not_accelerated_reason(void);

/* interpose.c */

/* What a descriptor the server opened is to pmwal. */
typedef enum WalFdKind
{
	FD_OTHER = 0,
	FD_WAL,						/* a WAL segment file */
	FD_WAL_PASS,				/* one opened with O_SYNC, O_DSYNC or O_DIRECT */
	FD_CONTROL					/* global/pg_control */
} WalFdKind;

/*
 * Why writes through a WAL descriptor go to pg_wal only, whatever the ring
 * could take: how the file was opened.  The last such write is remembered
 * (pmwal_shared->pass_cause) for pmwal_status.
 */
typedef enum WalPassCause
{
	PASS_NONE = 0,
	PASS_OPEN_SYNC,				/* O_SYNC or O_DSYNC: wal_sync_method open_* */
	PASS_OPEN_DIRECT			/* O_DIRECT only: debug_io_direct = 'wal' */
} WalPassCause;

typedef struct WalFd
{
	uint8		kind;			/* WalFdKind */
	uint8		pass_cause;		/* WalPassCause, for FD_WAL_PASS */
	TimeLineID	tli;
	XLogSegNo	segno;
} WalFd;

extern bool pmwal_interpose_install(char **why);
extern bool pmwal_interposed(void);

/* wal_ring.c: called by interpose.c for the server's WAL descriptors */
extern ssize_t ring_on_wal_pwrite(int fd, const WalFd *wfd, const void *buf,
								  size_t len, off_t offset);
extern void ring_on_wal_other_write(const WalFd *wfd);
extern void ring_after_wal_other_write(int fd, const WalFd *wfd);
extern int	ring_on_wal_sync(int fd, const WalFd *wfd, bool datasync);
extern void ring_on_wal_close(const WalFd *wfd);
extern void ring_on_control_write(const void *buf, size_t len);
extern void ring_on_checkpointer_sync(void);
extern void ring_make_durable(void);
extern void ring_free_up_to(XLogRecPtr durable);
extern const char *ring_pass_reason(void);
extern void ring_note_control(const struct ControlFileData *control);
extern bool ring_anchored(void);

/* wal_sync.c */
extern void pmwal_sync_range(XLogRecPtr upto);
extern bool pmwal_fsync_fd(int fd, const char *path, int elevel);
extern bool pmwal_fsync_path(const char *path, bool isdir, int elevel);
extern bool pmwal_write_fully(int fd, const char *buf, size_t len, off_t off,
							  const char *path, int elevel);

/* binding.c: what a start does with the ring it found */
typedef enum RestorePlan
{
	RESTORE_NOTHING,			/* the ring holds no WAL */
	RESTORE_DROP,				/* it holds only WAL a base backup has: empty it */
	RESTORE_WRITE				/* it holds this cluster's WAL: restore it */
} RestorePlan;

extern void pmwal_binding_allows_new_ring(struct ControlFileData *control, const char *path);
extern void pmwal_binding_inactive(struct ControlFileData *control);
extern char *pmwal_binding_may_follow(struct ControlFileData *control);
extern RestorePlan pmwal_binding_check(struct ControlFileData *control);
extern void pmwal_binding_take(struct ControlFileData *control);
extern void pmwal_generation_bump(void);

/* restore.c */
extern void pmwal_restore(struct ControlFileData *control, RestorePlan plan,
						  bool crash_restart);
extern void pmwal_exit_sync(int code, Datum arg);
extern void pmwal_watch_panics(void);
extern bool pmwal_cluster_shut_down(struct ControlFileData *control);

/* restore_timeline.c */
extern void pmwal_restore_history_init(struct ControlFileData *control);
extern TimeLineID pmwal_restore_timeline(struct ControlFileData *control, TimeLineID ring_tli,
										 XLogRecPtr tail, XLogRecPtr head);
extern int	pmwal_open_segment(XLogSegNo segno, char *path);

/*
 * test_pause.c: test-only pause points, compiled in only when pmwal is
 * built for its tests (make PMWAL_TEST=1, as tools/test does): a release
 * build has neither the points nor the setting pmwal.test_pause.
 */
#ifdef PMWAL_TEST_PAUSES
extern PGDLLIMPORT char *pmwal_test_pause;
extern PGDLLIMPORT bool pmwal_pause_armed;
extern void pmwal_test_pause_define(void);
extern void pmwal_pause_point_slow(const char *point);
#define PMWAL_PAUSE_POINT(point) \
	do { \
		if (unlikely(pmwal_pause_armed)) \
			pmwal_pause_point_slow(point); \
	} while (0)
#else
#define PMWAL_PAUSE_POINT(point)	((void) 0)
#endif

/* flusher.c */
extern bool pmwal_flusher_register(void);
extern void pmwal_wake_flusher(void);
PGDLLEXPORT void pmwal_flusher_main(Datum main_arg);

#endif							/* PMWAL_H */

/*-------------------------------------------------------------------------
 *
 * pmwal_ctl.h
 *		Declarations shared by the files of pmwal_ctl, the offline tool for
 *		pmwal rings.
 *
 * pmwal_ctl is a frontend program: it reads the ring with the same checks
 * as the server (../src/ring_format.c, built into it too) and prints what
 * it finds.  One concern per file:
 *
 *	pmwal_ctl.c		the door: usage, options, dispatch to a command
 *	ring_access.c	opening, locking, mapping and persisting a ring; its header
 *	datadir.c		what it reads of a data directory: pg_control, the binding
 *					file, backup_label, postmaster.pid
 *	wal_pages.c		the WAL pages a ring holds and the checks of their headers
 *	inspect.c		inspect
 *	dump.c			dump, and the dump verify reads
 *	verify.c		verify, with pg_waldump
 *	init.c			init and reset
 *	unbind.c		unbind
 *
 * IDENTIFICATION
 *		pmwal_ctl/pmwal_ctl.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_CTL_H
#define PMWAL_CTL_H

#include <sys/stat.h>

#include "access/xlog_internal.h"
#include "catalog/pg_control.h"

#include "pmwal_compat.h"
#include "ring_format.h"

/* the limits of pmwal.size */
#define RING_MIN_MB			2
#define RING_MAX_MB			65536
#define RING_MB				((uint64) 1024 * 1024)

/*
 * Exit statuses.  pg_fatal() exits with EXIT_ERROR.  A damaged ring and a
 * check that could not be made must differ: the first may lead an
 * operator to discard the ring's WAL.
 */
#define EXIT_OK				0	/* usable, verified, or done */
#define EXIT_ERROR			1	/* usage, a file that cannot be used, a refusal */
#define EXIT_UNUSABLE		2	/* a start would refuse the ring (its header;
								 * verify: or its WAL) */
#define EXIT_UNCHECKED		3	/* verify could not read the records */

/* the label column of the reports */
#define LABEL				"%-20s"

extern const char *progname;

typedef struct Ring
{
	const char *path;
	int			fd;
	struct stat st;
	char	   *base;			/* NULL while not mapped */
	uint64		len;			/* the file's or device's size */
	bool		is_pmem;		/* writable only: persist with pmem_persist */
	bool		locked;			/* we hold the lock: no server uses it */
	RingHeader *hdr;
	char	   *data;
} Ring;

/* what a data directory's binding file holds */
typedef enum BindState
{
	BIND_ABSENT,
	BIND_VALID,
	BIND_DAMAGED,
	BIND_UNREADABLE
} BindState;

/*
 * The pages of a ring with inconsistent positions that still read as its
 * WAL (salvage_pages): whole pages [from, to) of timeline "tli".
 */
typedef struct PageRun
{
	TimeLineID	tli;			/* the timeline the pages were checked against */
	XLogRecPtr	from;			/* the page of the tail */
	XLogRecPtr	to;				/* end of the last page that reads as WAL */
	XLogRecPtr	first;			/* the first record starting in [from, to), or to */
	char	   *stop;			/* why the page at "to" does not read as WAL;
								 * NULL when the run is a whole lap */
} PageRun;

/* ring_access.c */
extern int	try_open_ring(const char *path, int flags, struct stat *st, bool *missing,
						  char *why, size_t whylen);
pmwal_noreturn extern void open_failed(const char *path, const struct stat *st, const char *why);
extern bool ring_size(const char *path, const struct stat *st, uint64 *size,
					  char *why, size_t whylen);
extern void map_ring(Ring *ring, bool writable);
extern void lock_ring(Ring *ring);
extern void open_ring(Ring *ring, const char *path, bool writable);
extern void require_lock(Ring *ring);
extern void persist(Ring *ring, const void *addr, size_t len);
extern RingCheck check_header(Ring *ring, ControlFileData *control);
extern bool ring_usable(RingCheck verdict);
extern bool holds_wal(const Ring *ring, RingCheck verdict);
extern char *position_problems(const RingHeader *hdr);

/* datadir.c */
extern ControlFileData *read_control(const char *datadir);
extern BindState read_binding(const char *datadir, BindingSlot *slot, char *path,
							  char *why, size_t whylen);
extern char *binding_mismatch(const RingHeader *hdr, const BindingSlot *slot);
extern bool backup_label_start(const char *datadir, XLogRecPtr *start);
extern bool shut_down_cleanly(const ControlFileData *control);
extern long running_server(const char *datadir);

/* wal_pages.c */
extern XLogPageHeader ring_page(const Ring *ring, XLogRecPtr page);
extern char *check_pages(const Ring *ring, XLogRecPtr *first);
extern bool record_continues_past_head(const Ring *ring, XLogRecPtr rec);
extern bool salvage_pages(const Ring *ring, PageRun *run);
extern XLogRecPtr next_record_start(XLogRecPtr end, uint32 segsize);

/* the commands */
extern int	cmd_inspect(Ring *ring, ControlFileData *control, const char *datadir);
extern int	dump_ring(Ring *ring, const char *dir, XLogRecPtr from, XLogRecPtr to,
					  TimeLineID tli);
extern int	cmd_dump(Ring *ring, const char *dir);
extern int	cmd_verify(Ring *ring, ControlFileData *control, const char *argv0);
extern int	cmd_init(const char *path, ControlFileData *control, uint64 size, bool force);
extern int	cmd_reset(Ring *ring);
extern int	cmd_unbind(const char *datadir, ControlFileData *control, bool force);

#endif							/* PMWAL_CTL_H */

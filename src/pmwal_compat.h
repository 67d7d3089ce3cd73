/*-------------------------------------------------------------------------
 *
 * pmwal_compat.h
 *		The differences between the PostgreSQL major versions pmwal builds
 *		against (15 to 19), in one place.
 *
 * Only names, signatures and formats differ here; which system calls each
 * version's WAL code makes was checked against the interposer
 * (docs/versions.md).
 * The first part is for pmwal_ctl (a frontend program) too; the rest only
 * for the server module.
 *
 * IDENTIFICATION
 *		pmwal_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_COMPAT_H
#define PMWAL_COMPAT_H

/*
 * 18 replaced the attribute pg_attribute_noreturn(), written after a
 * declaration, with pg_noreturn, written first (C11 _Noreturn; in 19 C23's
 * [[noreturn]] where the compiler has it, which must open the declaration:
 * "pmwal_noreturn extern void f(void);").  Before 18, GCC's attribute is
 * allowed there too.
 */
#if PG_VERSION_NUM >= 180000
#define pmwal_noreturn				pg_noreturn
#else
#define pmwal_noreturn				pg_attribute_noreturn()
#endif

/*
 * How an LSN is printed (with LSN_FORMAT_ARGS): as the server prints it, so
 * that pmwal's messages and pmwal_ctl's output read like the server's log,
 * pg_waldump and pg_lsn.  19 pads the low half to eight digits
 * ("0/0163A2F8"); before, "0/163A2F8".  Input accepts either.
 */
#if PG_VERSION_NUM >= 190000
#define PMWAL_LSN					"%X/%08X"
#else
#define PMWAL_LSN					"%X/%X"
#endif

#ifndef FRONTEND

#include "access/xlog.h"
#include "storage/proc.h"

/* 17 renamed sync_method and its values */
#if PG_VERSION_NUM >= 170000
#define pmwal_wal_sync_method		wal_sync_method
#define PMWAL_SYNC_METHOD_OPEN		WAL_SYNC_METHOD_OPEN
#define PMWAL_SYNC_METHOD_OPEN_DSYNC WAL_SYNC_METHOD_OPEN_DSYNC
#else
#define pmwal_wal_sync_method		sync_method
#define PMWAL_SYNC_METHOD_OPEN		SYNC_METHOD_OPEN
#define PMWAL_SYNC_METHOD_OPEN_DSYNC SYNC_METHOD_OPEN_DSYNC
#endif

/* 17 replaced MyProc->pgprocno with MyProcNumber */
#if PG_VERSION_NUM >= 170000
#define PMWAL_MY_PROC_NUMBER		MyProcNumber
#else
#define PMWAL_MY_PROC_NUMBER		(MyProc->pgprocno)
#endif

/*
 * pmwal's own wait events, from 17 on; 15 and 16 show "Extension".  Called
 * once in the postmaster's shmem startup, so every process inherits the ids
 * and no committer ever takes the lock WaitEventExtensionNew needs.
 */
#include "utils/wait_event.h"
#if PG_VERSION_NUM >= 170000
#define pmwal_new_wait_event(name)	WaitEventExtensionNew(name)
#else
#define pmwal_new_wait_event(name)	PG_WAIT_EXTENSION
#endif


/*
 * The postmaster's list of registered background workers (read once, in
 * _PG_init, to see whether the flusher got a slot): an slist until 17, a
 * dlist from 18 on.
 */
#include "postmaster/bgworker_internals.h"
#if PG_VERSION_NUM >= 180000
#define pmwal_bgworker_iter			dlist_iter
#define pmwal_bgworker_foreach(it)	dlist_foreach(it, &BackgroundWorkerList)
#define pmwal_bgworker_of(it)		dlist_container(RegisteredBgWorker, rw_lnode, (it).cur)
#else
#define pmwal_bgworker_iter			slist_iter
#define pmwal_bgworker_foreach(it)	slist_foreach(it, &BackgroundWorkerList)
#define pmwal_bgworker_of(it)		slist_container(RegisteredBgWorker, rw_lnode, (it).cur)
#endif

#endif							/* !FRONTEND */

#endif							/* PMWAL_COMPAT_H */

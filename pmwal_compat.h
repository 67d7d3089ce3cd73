/*-------------------------------------------------------------------------
 *
 * pmwal_compat.h
 *		The differences between the PostgreSQL major versions pmwal builds
 *		against (15 to 18), in one place.
 *
 * Only names and signatures differ here; what each version's WAL code does
 * with the flush pointer was checked against DESIGN.md's hazards (README,
 * "Supported versions").
 *
 * IDENTIFICATION
 *		pmwal_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_COMPAT_H
#define PMWAL_COMPAT_H

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
 * Settings of newer versions under which WAL that pmwal wrote without fsync
 * would be read or written in ways it was not proven with; the ring is
 * drained and commits are left to PostgreSQL while one is on.  The WAL
 * summarizer (17) turns WAL up to the flush pointer into summary files that
 * incremental backups trust, and nothing would tell it that a power cut
 * took part of that WAL; debug_io_direct = wal (16) is a developer setting
 * pmwal is not tested with.
 */
#if PG_VERSION_NUM >= 170000
#include "postmaster/walsummarizer.h"
#endif
#if PG_VERSION_NUM >= 160000
#include "storage/fd.h"
#endif

static inline const char *
pmwal_version_conflict(void)
{
#if PG_VERSION_NUM >= 170000
	if (summarize_wal)
		return "summarize_wal is on";
#endif
#if PG_VERSION_NUM >= 160000
	if (io_direct_flags & IO_DIRECT_WAL)
		return "debug_io_direct includes wal";
#endif
	return NULL;
}

#endif							/* PMWAL_COMPAT_H */

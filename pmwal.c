/*-------------------------------------------------------------------------
 *
 * pmwal.c
 *		Durable commits through a ring of persistent memory: the door.
 *
 * pmwal keeps the newest WAL in a ring on a DAX-mapped file so that a
 * COMMIT can return once its commit record is persisted there, instead of
 * after an fsync of pg_wal.  This file defines the GUCs, installs the hooks
 * and registers the background worker; the work is done in the other files
 * (see pmwal.h).  pmwal must be loaded by shared_preload_libraries: it needs
 * shared memory, and its ring must be restored before the startup process
 * replays WAL.
 *
 * IDENTIFICATION
 *		pmwal.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "pmwal.h"
#include "pmwal_compat.h"

PG_MODULE_MAGIC;

/* GUC variables */
char	   *pmwal_path = NULL;
int			pmwal_size_mb = 64;
bool		pmwal_enabled = true;
bool		pmwal_require_pmem = true;
int			pmwal_flush_interval = 1000;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);
static void pmwal_shmem_request_hook(void);
static void pmwal_shmem_startup_hook(void);
static bool check_pmwal_path(char **newval, void **extra, GucSource source);

/* Every setting _PG_init defines (add new ones here too); see refuse_invalid_settings(). */
static const char *const pmwal_setting_names[] = {
	"pmwal.path", "pmwal.size", "pmwal.enabled", "pmwal.require_pmem",
	"pmwal.flush_interval", "pmwal.test_pause"
};

/* pmwal runs only from shared_preload_libraries. */
static void
refuse_not_preloaded(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("pmwal must be loaded via shared_preload_libraries"),
			 errhint("Add pmwal to shared_preload_libraries in postgresql.conf and restart the server.")));
}

void
pmwal_check_loaded(void)
{
	if (pmwal_shared == NULL)
		refuse_not_preloaded();
}

/*
 * PostgreSQL applies the values postgresql.conf gave pmwal's settings before
 * pmwal defined them with elevel WARNING only, and keeps the default for a
 * value it rejects: a mistyped pmwal.path would leave pmwal silently
 * inactive, a bad pmwal.size would pick another ring size.  Validate those
 * values again, without applying them, and refuse to start on a bad one.
 */
static void
refuse_invalid_settings(char **raw)
{
	for (size_t i = 0; i < lengthof(pmwal_setting_names); i++)
		if (raw[i] != NULL)
			(void) set_config_option(pmwal_setting_names[i], raw[i],
									 PGC_POSTMASTER, PGC_S_FILE,
									 GUC_ACTION_SET, false, FATAL, false);
}

void
_PG_init(void)
{
	char	   *raw[lengthof(pmwal_setting_names)];

	if (!process_shared_preload_libraries_in_progress)
		refuse_not_preloaded();

	/* the values set before pmwal was loaded, as placeholders */
	for (size_t i = 0; i < lengthof(pmwal_setting_names); i++)
	{
		const char *v = GetConfigOption(pmwal_setting_names[i], true, false);

		raw[i] = v ? pstrdup(v) : NULL;
	}

	DefineCustomStringVariable("pmwal.path",
							   "Ring of persistent memory that holds the newest WAL.",
							   "An absolute path to a file on a DAX file system or to a devdax device. Empty leaves pmwal inactive.",
							   &pmwal_path,
							   "",
							   PGC_POSTMASTER,
							   0,
							   check_pmwal_path, NULL, NULL);

	DefineCustomIntVariable("pmwal.size",
							"Capacity of the ring's data area.",
							NULL,
							&pmwal_size_mb,
							64, 2, 65536,
							PGC_POSTMASTER,
							GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("pmwal.enabled",
							 "Whether commits are made durable through the ring.",
							 NULL,
							 &pmwal_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("pmwal.require_pmem",
							 "Refuse to start unless the ring is mapped as persistent memory.",
							 "When off, a ring on ordinary storage is persisted with msync().",
							 &pmwal_require_pmem,
							 true,
							 PGC_POSTMASTER,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pmwal.flush_interval",
							"Longest time the flusher leaves WAL in the ring without syncing it to pg_wal.",
							"The flusher also syncs whenever a segment is complete or the ring is half full.",
							&pmwal_flush_interval,
							1000, 10, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable("pmwal.test_pause",
							   "Test-only pause points to hold processes at (not for production).",
							   "A comma-separated list of point names; see test_pause.c.",
							   &pmwal_test_pause,
							   "",
							   PGC_SUSET,
							   GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							   NULL, pmwal_test_pause_assign, NULL);

	MarkGUCPrefixReserved("pmwal");
	refuse_invalid_settings(raw);

	if (pmwal_path[0] != '\0')
	{
		pmwal_watch_panics();
		pmwal_flusher_register();
		pmwal_commit_init();
		pmwal_gate_init();
	}

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = pmwal_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = pmwal_shmem_startup_hook;
}

static void
pmwal_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	pmwal_shmem_request();
}

/*
 * Runs in the postmaster before the startup process, at the first start and
 * at every crash-restart.  The ring is attached once per server life and
 * restored into pg_wal every time, before redo.
 */
static void
pmwal_shmem_startup_hook(void)
{
	static bool attached = false;
	bool		crash_restart = attached;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	pmwal_shmem_init();
	if (!attached)
	{
		pmwal_ring_attach();
		attached = true;
		if (pmwal_ring != NULL && pmwal_sync_method_conflicts())
			ereport(FATAL,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("pmwal cannot be used with wal_sync_method = %s",
							GetConfigOption("wal_sync_method", false, false)),
					 errdetail("pmwal writes WAL without syncing it and syncs the segments itself; a WAL file opened with O_SYNC or O_DSYNC while pmwal writes it would silently stop being synced."),
					 errhint("Set wal_sync_method to fdatasync (the default on Linux) or fsync, or leave pmwal.path empty.")));
	}
	pmwal_restore(crash_restart);
	/* registered anew at every crash-restart: shmem_exit ran the old one */
	on_shmem_exit(pmwal_exit_sync, 0);
}

/*
 * wal_sync_method open_sync and open_datasync sync through the file's open
 * flags, which PostgreSQL leaves off for a file it opens while fsync is
 * disabled -- as it is while pmwal writes WAL.
 */
bool
pmwal_sync_method_conflicts(void)
{
	return pmwal_wal_sync_method == PMWAL_SYNC_METHOD_OPEN ||
		pmwal_wal_sync_method == PMWAL_SYNC_METHOD_OPEN_DSYNC;
}

/* Must the flusher drain the ring and keep it drained?  See the callers. */
bool
pmwal_ring_unusable(void)
{
	return pmwal_sync_method_conflicts() || pmwal_version_conflict() != NULL;
}

/*
 * Why pmwal must leave commits to PostgreSQL even though the ring works, or
 * NULL.  Forcing a commit asynchronous would skip the wait for synchronous
 * standbys, which reads the same synchronous_commit.
 */
const char *
pmwal_stand_aside_reason(void)
{
	if (SyncRepRequested() && SyncRepStandbyNames != NULL &&
		SyncRepStandbyNames[0] != '\0')
		return "synchronous replication is requested (synchronous_standby_names is set)";
	if (pmwal_sync_method_conflicts())
		return "wal_sync_method is open_sync or open_datasync";
	return pmwal_version_conflict();
}

static bool
check_pmwal_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (!is_absolute_path(*newval))
	{
		GUC_check_errdetail("pmwal.path must be an absolute path.");
		return false;
	}
	if ((*newval)[strlen(*newval) - 1] == '/')
	{
		GUC_check_errdetail("pmwal.path must name a file, not a directory.");
		return false;
	}
	return true;
}

/*-------------------------------------------------------------------------
 *
 * pmwal.c
 *		Durable commits through a ring of persistent memory: the door.
 *
 * pmwal keeps the newest WAL in a ring on a DAX-mapped file and answers
 * the server's syncs of its WAL segment files from it: a COMMIT returns
 * once its WAL is persisted there, instead of after an fsync of pg_wal.
 * This file defines the GUCs, installs the hooks, puts pmwal in front of
 * the server's WAL system calls and registers the background worker; the
 * work is done in the other files (see pmwal.h).  pmwal must be loaded by
 * shared_preload_libraries: it needs shared memory, it must be in front
 * of the WAL calls of every server process, and its ring must be restored
 * before the startup process replays WAL.
 *
 * IDENTIFICATION
 *		pmwal.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

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
	"pmwal.flush_interval"
#ifdef PMWAL_TEST_PAUSES
	,"pmwal.test_pause"
#endif
};

/*
 * Why pmwal stands aside for this server's life -- it restores the ring,
 * but answers no WAL sync from it -- and what to do about it (NULL: it does
 * not).  Decided in _PG_init, in the postmaster; kept in TopMemoryContext,
 * which every server process inherits (a backend drops PostmasterContext).
 */
static char *stand_aside_reason = NULL;
static char *stand_aside_hint = NULL;

static void
stand_aside(const char *reason, const char *hint)
{
	stand_aside_reason = MemoryContextStrdup(TopMemoryContext, reason);
	stand_aside_hint = MemoryContextStrdup(TopMemoryContext, hint);
}

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
							"The flusher also syncs whenever a segment is complete or the ring is a quarter full.",
							&pmwal_flush_interval,
							1000, 10, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

#ifdef PMWAL_TEST_PAUSES
	pmwal_test_pause_define();
#endif

	MarkGUCPrefixReserved("pmwal");
	refuse_invalid_settings(raw);

	/*
	 * pmwal works as documented only with its flusher -- it carries
	 * pmwal.enabled to every process -- and in front of the server's WAL
	 * calls.  Without either it stands aside: nothing acknowledged depends
	 * on the ring then, and the ring is still restored at every start.
	 */
	if (pmwal_path[0] != '\0')
	{
		char	   *why;

		pmwal_watch_panics();
		if (!pmwal_flusher_register())
			stand_aside(psprintf("no background worker slot is left for the pmwal flusher (max_worker_processes = %d)",
								 max_worker_processes),
						"Raise max_worker_processes, counting the background workers of every library in shared_preload_libraries, and restart the server.");
		else if (!pmwal_interpose_install(&why))
			stand_aside(psprintf("the server's WAL calls are not interposed: %s", why),
						"pmwal needs a server binary linked dynamically against the C library, on x86-64 or aarch64.");
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
 * at every crash-restart.  The ring is attached once per server life,
 * checked against the data directory and restored into pg_wal every time,
 * before redo, and then bound to the data directory afresh.
 */
static void
pmwal_shmem_startup_hook(void)
{
	static bool attached = false;
	bool		crash_restart = attached;
	ControlFileData *control;
	bool		crc_ok;
	RestorePlan plan;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	pmwal_shmem_init();

	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("calculated CRC checksum does not match value stored in file \"%s\"",
						XLOG_CONTROL_FILE)));
	if (!attached)
	{
		attached = true;
		if (pmwal_path[0] == '\0')
			pmwal_binding_inactive(control);
		else
		{
			pmwal_ring_attach(control);
			if (stand_aside_reason != NULL)
				ereport(WARNING,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("pmwal cannot serve WAL syncs from its ring: %s", stand_aside_reason),
						 errdetail("WAL is synced to pg_wal as without pmwal; the ring is only restored."),
						 errhint("%s", stand_aside_hint)));
		}
	}
	if (pmwal_ring != NULL)
	{
		/* at a crash-restart, the mapping is the first start's */
		ring_require_readable_header();
		plan = pmwal_binding_check(control);
		pmwal_restore(control, plan, crash_restart);
		ring_restore_size();
		pmwal_binding_take(control);
		ring_note_control(control);
		/* registered anew at every crash-restart: shmem_exit ran the old one */
		on_shmem_exit(pmwal_exit_sync, 0);
	}
	pfree(control);
}

/*
 * Why WAL syncs are not answered from the ring right now, or NULL if they
 * are (or will be, from the next WAL write on: a ring retired for a write
 * it could not take is anchored again at the next one).  What the last WAL
 * write met decides too (ring_pass_reason): a setting is not the only
 * thing that makes pmwal leave WAL to the file system.
 */
const char *
pmwal_not_accelerated_reason(void)
{
	const char *pass;

	if (pmwal_ring == NULL)
		return "pmwal.path is not set";
	if (stand_aside_reason != NULL)
		return stand_aside_reason;
	if (!pmwal_interposed())
		return "the server's WAL calls are not interposed";
	if (pg_atomic_read_u32(&pmwal_shared->enabled) == 0)
		return "pmwal.enabled is off";
	if (pmwal_wal_sync_method == PMWAL_SYNC_METHOD_OPEN ||
		pmwal_wal_sync_method == PMWAL_SYNC_METHOD_OPEN_DSYNC)
		return "wal_sync_method is open_sync or open_datasync: PostgreSQL writes WAL with O_SYNC or O_DSYNC and never syncs it";
	if (RecoveryInProgress() && !ring_anchored())
		return "the server is in recovery, and no walreceiver streams WAL into the ring now: the WAL it reads or receives is synced by PostgreSQL";
	if ((pass = ring_pass_reason()) != NULL)
		return pass;
	return NULL;
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
	if (strlen(*newval) >= BINDING_PATH_LEN)
	{
		GUC_check_errdetail("pmwal.path must be shorter than %d bytes.", BINDING_PATH_LEN);
		return false;
	}
	return true;
}

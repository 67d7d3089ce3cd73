/*-------------------------------------------------------------------------
 *
 * test_pause.c
 *		Test-only pause points: hold a process at a named place in pmwal's
 *		code, so that a test can kill it exactly there.  NOT FOR PRODUCTION.
 *
 * Durability claims are proven by holding a process at a dangerous moment
 * (a commit between its write and its ring copy, the flusher between a sync
 * and the tail's move, a restore between writing pg_wal and emptying the
 * ring, ...) and then killing the server and cutting the power.  Each such
 * place calls PMWAL_PAUSE_POINT("name").  The point is inert -- one branch
 * on a variable that is false -- unless the superuser-only setting
 * pmwal.test_pause names it:
 *
 *	pmwal.test_pause = 'name[:N][:error], ...'
 *
 * A process reaching an armed point logs
 *		pmwal test pause at "name" (pid N)
 * and waits until the file "pmwal_test_release.name" exists in the data
 * directory (or 10 minutes pass), then goes on.  ":N" arms only the N-th
 * time this process reaches the point; ":error" raises an ERROR there
 * instead of waiting, to test how pmwal handles one.  The setting can be
 * given in postgresql.conf (the postmaster's restore, the flusher after a
 * reload) or with SET in a session.
 *
 * IDENTIFICATION
 *		test_pause.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "pmwal.h"

/* GUC pmwal.test_pause, and whether it names anything */
char	   *pmwal_test_pause = NULL;
bool		pmwal_pause_armed = false;

#define PAUSE_MAX_WAIT_MS	(10 * 60 * 1000)

/* How often this process reached each point it counted (for ":N"). */
#define MAX_COUNTED_POINTS	16
static struct
{
	char		name[NAMEDATALEN];
	int			hits;
}			counted[MAX_COUNTED_POINTS];

static int
count_hit(const char *point)
{
	int			i;

	for (i = 0; i < MAX_COUNTED_POINTS && counted[i].name[0] != '\0'; i++)
		if (strcmp(counted[i].name, point) == 0)
			return ++counted[i].hits;
	if (i == MAX_COUNTED_POINTS)
		return 0;
	strlcpy(counted[i].name, point, NAMEDATALEN);
	return counted[i].hits = 1;
}

void
pmwal_test_pause_assign(const char *newval, void *extra)
{
	pmwal_pause_armed = newval != NULL && newval[0] != '\0';
}

/*
 * Is "point" armed?  Sets *error when it is armed to fail rather than wait.
 * Entries are "name", "name:N", "name:error" or "name:N:error".
 */
static bool
point_armed(const char *point, bool *error)
{
	char	   *copy = pstrdup(pmwal_test_pause);
	List	   *entries;
	ListCell   *lc;
	bool		armed = false;
	bool		counted_once = false;
	int			hit = 0;

	if (!SplitIdentifierString(copy, ',', &entries))
		return false;
	foreach(lc, entries)
	{
		char	   *entry = lfirst(lc);
		char	   *colon = strchr(entry, ':');
		size_t		len = colon ? (size_t) (colon - entry) : strlen(entry);
		int			nth = 0;

		if (strlen(point) != len || strncmp(entry, point, len) != 0)
			continue;
		*error = false;
		while (colon != NULL)
		{
			char	   *arg = colon + 1;

			colon = strchr(arg, ':');
			if (strncmp(arg, "error", 5) == 0)
				*error = true;
			else
				nth = atoi(arg);
		}
		if (nth > 0)
		{
			if (!counted_once)
			{
				hit = count_hit(point);
				counted_once = true;
			}
			if (hit != nth)
				continue;
		}
		armed = true;
		break;
	}
	list_free(entries);
	pfree(copy);
	return armed;
}

/* The slow part of PMWAL_PAUSE_POINT: only runs while something is armed. */
void
pmwal_pause_point_slow(const char *point)
{
	char		release[MAXPGPATH];
	struct stat st;
	bool		error = false;

	if (!point_armed(point, &error))
		return;
	if (error)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("pmwal test error at \"%s\"", point)));

	ereport(LOG,
			(errmsg("pmwal test pause at \"%s\" (pid %d)", point, MyProcPid)));
	snprintf(release, sizeof(release), "%s/pmwal_test_release.%s", DataDir, point);
	for (int waited = 0; stat(release, &st) != 0; waited += 10)
	{
		if (waited >= PAUSE_MAX_WAIT_MS)
		{
			ereport(LOG,
					(errmsg("pmwal test pause at \"%s\" gives up waiting for \"%s\"",
							point, release)));
			return;
		}
		if (IsUnderPostmaster && !PostmasterIsAlive())
			proc_exit(1);
		pg_usleep(10000L);
	}
	ereport(LOG,
			(errmsg("pmwal test pause at \"%s\" released (pid %d)", point, MyProcPid)));
}

/*-------------------------------------------------------------------------
 *
 * test_pause.c
 *		Test-only pause points: hold a process at a named place in pmwal's
 *		code, so that a test can kill it exactly there.
 *
 * Compiled in only when pmwal is built for its tests (make PMWAL_TEST=1,
 * which tools/test and CI do), like PostgreSQL's injection points: a
 * release build has neither the points nor the setting, so no role can
 * hold a server process or make one fail.
 *
 * Durability claims are proven by holding a process at a dangerous moment
 * (a WAL sync between its copy into the ring and the publication of the
 * ring's head, the flusher between a sync and the tail's move, a restore
 * between writing pg_wal and emptying the ring, ...) and then killing the
 * server and cutting the power.  Each such place calls
 * PMWAL_PAUSE_POINT("name"): one branch on a variable that is false unless
 * the superuser-only setting pmwal.test_pause names something:
 *
 *	pmwal.test_pause = 'name[:N][:error], ...'
 *
 * A process reaching an armed point logs
 *		pmwal test pause at "name" (pid N)
 * and waits until the file "pmwal_test_release.name" exists in the data
 * directory (or 10 minutes pass), then goes on.  ":N" arms only the N-th
 * time this process reaches the point; ":error" raises an ERROR there
 * instead of waiting.  Many points are inside the server's WAL writes,
 * that is inside critical sections: nothing here allocates memory.
 *
 * IDENTIFICATION
 *		test_pause.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef PMWAL_TEST_PAUSES

#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/guc.h"

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

static void
test_pause_assign(const char *newval, void *extra)
{
	pmwal_pause_armed = newval != NULL && newval[0] != '\0';
}

void
pmwal_test_pause_define(void)
{
	DefineCustomStringVariable("pmwal.test_pause",
							   "Test-only pause points to hold processes at (test builds only).",
							   "A comma-separated list of point names; see test_pause.c.",
							   &pmwal_test_pause,
							   "",
							   PGC_SUSET,
							   GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							   NULL, test_pause_assign, NULL);
}

/*
 * Is "point" armed?  Sets *error when it is armed to fail rather than wait.
 * Entries are "name", "name:N", "name:error" or "name:N:error", separated
 * by commas and optional spaces.
 */
static bool
point_armed(const char *point, bool *error)
{
	const char *p = pmwal_test_pause;
	size_t		plen = strlen(point);
	bool		counted_once = false;
	int			hit = 0;

	while (p != NULL && *p != '\0')
	{
		const char *end = strchr(p, ',');
		size_t		len = end ? (size_t) (end - p) : strlen(p);
		const char *name;
		size_t		nlen;
		int			nth = 0;

		while (len > 0 && (*p == ' ' || *p == '"'))
			p++, len--;
		name = p;
		nlen = strcspn(name, ":,\" ");
		if (nlen > len)
			nlen = len;
		if (nlen == plen && strncmp(name, point, plen) == 0)
		{
			const char *arg = name + nlen;

			*error = false;
			while (arg < p + len && *arg == ':')
			{
				arg++;
				if (strncmp(arg, "error", 5) == 0)
					*error = true;
				else
					nth = atoi(arg);
				arg += strcspn(arg, ":,");
			}
			if (nth > 0)
			{
				if (!counted_once)
				{
					hit = count_hit(point);
					counted_once = true;
				}
				if (hit == nth)
					return true;
			}
			else
				return true;
		}
		p = end ? end + 1 : NULL;
	}
	return false;
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

#endif							/* PMWAL_TEST_PAUSES */

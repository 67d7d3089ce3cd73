/*-------------------------------------------------------------------------
 *
 * verify.c
 *		pmwal_ctl verify: what a start's restore relies on, checked without
 *		pg_wal; the records are read by pg_waldump over a dump of the ring.
 *
 * "verify" checks the header (identity against a data directory given
 * with -D), every page header in [tail, head) against its address, and
 * every record from the first one starting after the tail, read by
 * PostgreSQL's own XLogReader in pg_waldump over a dump of the ring: the
 * WAL must read cleanly into the last page, or end in a record that
 * continues past the head (never flushed whole, so never acknowledged).
 * Without a pg_waldump of this PostgreSQL version, verify says it could
 * not check the records, with an exit status of its own: a missing tool
 * must never read as a damaged ring, which an operator may then discard.
 *
 * IDENTIFICATION
 *		pmwal_ctl/verify.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/logging.h"

#include "pmwal_ctl.h"

/* verify's scratch directory, removed at exit */
static char verify_dir[MAXPGPATH] = "";

/*
 * Run "argv" (argv[0] a path, no shell) in the C locale, so that its
 * messages can be read, with its standard output and error into a pipe;
 * NULL if it cannot be started.
 */
static FILE *
spawn(char *const argv[], pid_t *pid)
{
	int			p[2];
	FILE	   *f;

	if (pipe(p) != 0)
		return NULL;
	fflush(NULL);
	*pid = fork();
	if (*pid < 0)
	{
		close(p[0]);
		close(p[1]);
		return NULL;
	}
	if (*pid == 0)
	{
		dup2(p[1], STDOUT_FILENO);
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		close(p[1]);
		setenv("LC_ALL", "C", 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if ((f = fdopen(p[0], "r")) == NULL)
		close(p[0]);
	return f;
}

/* Wait for a child of spawn(); its wait status. */
static int
reap(FILE *f, pid_t pid)
{
	int			status = 0;

	fclose(f);
	while (waitpid(pid, &status, 0) < 0)
	{
		if (errno != EINTR)
			return -1;
	}
	return status;
}

/* The major version pg_waldump at "path" reports, or NULL. */
static char *
waldump_version(const char *path)
{
	char	   *argv[3];
	char		line[256] = "";
	char	   *version = NULL;
	FILE	   *f;
	pid_t		pid;

	argv[0] = (char *) path;
	argv[1] = "--version";
	argv[2] = NULL;
	if ((f = spawn(argv, &pid)) == NULL)
		return NULL;
	if (fgets(line, sizeof(line), f) != NULL &&
		strncmp(line, "pg_waldump (PostgreSQL) ", 24) == 0)
		version = pnstrdup(line + 24, strspn(line + 24, "0123456789"));
	if (reap(f, pid) != 0 && version != NULL)
	{
		pfree(version);
		version = NULL;
	}
	return version;
}

/*
 * Find pg_waldump of this PostgreSQL major version (WAL's page format
 * changes with it): next to pmwal_ctl, which is installed into the
 * server's bin directory, then on PATH.  False, with "why", if there is
 * none.
 */
static bool
find_waldump(const char *argv0, char *found, char *why, size_t whylen)
{
	char		self[MAXPGPATH];
	char	   *dirs;
	char	   *others = pstrdup("");
	const char *path_env = getenv("PATH");

	if (find_my_exec(argv0, self) == 0)
		*last_dir_separator(self) = '\0';
	else
		self[0] = '\0';
	dirs = psprintf("%s:%s", self, path_env ? path_env : "");
	for (char *dir = strtok(dirs, ":"); dir != NULL; dir = strtok(NULL, ":"))
	{
		struct stat st;
		char	   *version;

		if (dir[0] == '\0')
			continue;
		snprintf(found, MAXPGPATH, "%s/pg_waldump", dir);
		if (stat(found, &st) != 0 || !S_ISREG(st.st_mode) || access(found, X_OK) != 0)
			continue;
		version = waldump_version(found);
		if (version != NULL && strcmp(version, PG_MAJORVERSION) == 0)
			return true;
		others = psprintf("%s; \"%s\" is %s", others, found,
						  version ? psprintf("of PostgreSQL %s", version) :
						  "not a pg_waldump that runs");
	}
	snprintf(why, whylen, "no pg_waldump of PostgreSQL %s was found next to %s (in \"%s\") or on PATH%s",
			 PG_MAJORVERSION, progname, self, others);
	return false;
}

/* atexit: remove verify's scratch directory and the dump in it */
static void
remove_verify_dir(void)
{
	DIR		   *d;
	struct dirent *de;

	if (verify_dir[0] == '\0')
		return;
	if ((d = opendir(verify_dir)) != NULL)
	{
		while ((de = readdir(d)) != NULL)
		{
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				(void) unlinkat(dirfd(d), de->d_name, 0);
		}
		closedir(d);
	}
	if (rmdir(verify_dir) != 0)
		pg_log_warning("could not remove \"%s\": %m", verify_dir);
	verify_dir[0] = '\0';
}

/* What pg_waldump made of the dump. */
typedef struct WaldumpRun
{
	bool		ran;			/* it ran and exited */
	int			exit_code;
	uint64		nrecords;
	XLogRecPtr	end;			/* where the record after the last one it read
								 * begins: where reading stopped */
	char	   *error;			/* its "pg_waldump: ..." lines, if any */
	bool		skipped;		/* "first record is after" the start */
} WaldumpRun;

static void
run_waldump(const char *waldump, const char *dir, const RingHeader *hdr,
			XLogRecPtr first, WaldumpRun *run)
{
	char	   *argv[6];
	char	   *line = NULL;
	size_t		linecap = 0;
	FILE	   *f;
	pid_t		pid;
	int			status;

	memset(run, 0, sizeof(WaldumpRun));
	run->end = first;
	run->error = pstrdup("");
	argv[0] = (char *) waldump;
	argv[1] = psprintf("--path=%s", dir);
	argv[2] = psprintf("--timeline=%u", (TimeLineID) hdr->timeline.v);
	argv[3] = psprintf("--start=" PMWAL_LSN, LSN_FORMAT_ARGS(first));
	argv[4] = psprintf("--end=" PMWAL_LSN, LSN_FORMAT_ARGS(hdr->head.v));
	argv[5] = NULL;
	if ((f = spawn(argv, &pid)) == NULL)
	{
		run->error = psprintf("could not run \"%s\": %s", waldump, strerror(errno));
		return;
	}
	while (getline(&line, &linecap, f) > 0)
	{
		const char *len = strstr(line, "len (rec/tot):");
		const char *lsn = strstr(line, ", lsn: ");
		unsigned int rec,
					tot,
					hi,
					lo;

		if (strncmp(line, "pg_waldump: ", 12) == 0)
		{
			if (strlen(run->error) < 4096)
				run->error = psprintf("%s%s", run->error, line);
		}
		else if (strncmp(line, "first record is after", 21) == 0)
			run->skipped = true;
		else if (len && lsn && sscanf(len + 14, " %u/ %u", &rec, &tot) == 2 &&
				 sscanf(lsn + 7, "%X/%X", &hi, &lo) == 2)
		{
			run->nrecords++;
			run->end = next_record_start((((uint64) hi << 32) | lo) + tot,
										 hdr->st.s.wal_segment_size);
		}
	}
	free(line);
	/* one message, for a line of the report */
	if (run->error[0] != '\0' && run->error[strlen(run->error) - 1] == '\n')
		run->error[strlen(run->error) - 1] = '\0';
	status = reap(f, pid);
	run->ran = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) != 127;
	run->exit_code = run->ran ? WEXITSTATUS(status) : -1;
	if (!run->ran && run->error[0] == '\0')
		run->error = psprintf("\"%s\" did not run to its end (wait status %d)", waldump, status);
}

int
cmd_verify(Ring *ring, ControlFileData *control, const char *argv0)
{
	RingHeader *hdr = ring->hdr;
	char		waldump[MAXPGPATH];
	char		why[2048];
	const char *tmp = getenv("TMPDIR");
	XLogRecPtr	first;
	XLogRecPtr	last_page;
	WaldumpRun	run;
	RingCheck	verdict;
	char	   *wrong;

	require_lock(ring);
	verdict = check_header(ring, control);
	if (!ring_usable(verdict))
		return EXIT_UNUSABLE;
	if (!holds_wal(ring, verdict))
	{
		printf(LABEL "none (the ring is empty)\n", "WAL:");
		return EXIT_OK;
	}
	last_page = hdr->head.v - XLOG_BLCKSZ;
	if (control && hdr->head.v <= control->checkPoint)
		printf(LABEL "all of it precedes the checkpoint at " PMWAL_LSN "; a start would not restore it\n",
			   "note:", LSN_FORMAT_ARGS(control->checkPoint));

	/* the page headers: no tool needed */
	if ((wrong = check_pages(ring, &first)) != NULL)
	{
		printf(LABEL "DAMAGED: %s; a start would refuse to restore it\n", "WAL:", wrong);
		return EXIT_UNUSABLE;
	}
	printf(LABEL UINT64_FORMAT " page%s from " PMWAL_LSN " to " PMWAL_LSN ", every page header valid\n", "pages:",
		   (hdr->head.v - hdr->tail.v) / XLOG_BLCKSZ,
		   hdr->head.v - hdr->tail.v == XLOG_BLCKSZ ? "" : "s",
		   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
	if (first >= hdr->head.v)
	{
		printf(LABEL "ok: " PMWAL_LSN " to " PMWAL_LSN " holds only the middle of one record, which begins before the tail and continues past the head\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
		return EXIT_OK;
	}

	/* the records: pg_waldump over a dump */
	if (!find_waldump(argv0, waldump, why, sizeof(why)))
	{
		printf(LABEL "NOT CHECKED: %s; the records from " PMWAL_LSN " to " PMWAL_LSN " were not read, and nothing is known to be wrong with them\n",
			   "WAL:", why, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(hdr->head.v));
		printf(LABEL "install PostgreSQL %s's pg_waldump (it comes with the server) or put its directory on PATH, then verify again\n",
			   "what to do:", PG_MAJORVERSION);
		return EXIT_UNCHECKED;
	}
	snprintf(verify_dir, sizeof(verify_dir), "%s/pmwal_ctl_verify_XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
	atexit(remove_verify_dir);
	if (mkdtemp(verify_dir) == NULL)
	{
		pg_log_error("could not create a temporary directory \"%s\": %m", verify_dir);
		verify_dir[0] = '\0';
		exit(EXIT_ERROR);
	}
	(void) dump_ring(ring, verify_dir, hdr->tail.v, hdr->head.v, (TimeLineID) hdr->timeline.v);
	run_waldump(waldump, verify_dir, hdr, first, &run);
	remove_verify_dir();

	if (!run.ran ||
		(run.exit_code != 0 && strstr(run.error, "error in WAL record at") == NULL &&
		 strstr(run.error, "could not find a valid record after") == NULL))
	{
		/* it failed for a reason of its own, not over the WAL */
		printf(LABEL "NOT CHECKED: %s failed: %s; nothing is known to be wrong with the records\n",
			   "WAL:", waldump, run.error[0] ? run.error : "(no message)");
		return EXIT_UNCHECKED;
	}
	if (run.skipped)
	{
		printf(LABEL "DAMAGED: the first record after the tail does not begin at " PMWAL_LSN ", where the page headers put it; a start would refuse to restore it\n",
			   "WAL:", LSN_FORMAT_ARGS(first));
		return EXIT_UNUSABLE;
	}
	if (run.exit_code == 0)
		printf(LABEL "ok: " PMWAL_LSN " to " PMWAL_LSN ": " UINT64_FORMAT " records from " PMWAL_LSN " read cleanly to the head%s\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   run.nrecords, LSN_FORMAT_ARGS(first),
			   run.end < hdr->head.v ? ", and the record after them continues past it" : "");
	else if (run.end >= last_page)
		printf(LABEL "ok: " PMWAL_LSN " to " PMWAL_LSN ": " UINT64_FORMAT " records from " PMWAL_LSN " read cleanly up to " PMWAL_LSN ", in the last page, where the WAL ends\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   run.nrecords, LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(run.end));
	else if (run.nrecords == 0 && record_continues_past_head(ring, first))
		printf(LABEL "ok: " PMWAL_LSN " to " PMWAL_LSN ": the first record, at " PMWAL_LSN ", continues past the head\n",
			   "WAL:", LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(first));
	else
	{
		printf(LABEL "DAMAGED: reading from " PMWAL_LSN " stopped at the record at " PMWAL_LSN ", before the last page at " PMWAL_LSN "; a start would refuse to restore it\n",
			   "WAL:", LSN_FORMAT_ARGS(first), LSN_FORMAT_ARGS(run.end),
			   LSN_FORMAT_ARGS(last_page));
		printf(LABEL "%s\n", "pg_waldump says:", run.error);
		return EXIT_UNUSABLE;
	}
	return EXIT_OK;
}

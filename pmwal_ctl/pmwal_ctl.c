/*-------------------------------------------------------------------------
 *
 * pmwal_ctl.c
 *		Offline tool for pmwal rings: init, inspect, verify, dump and reset,
 *		and unbind for a data directory whose ring is lost.  This file is
 *		the door: usage, options and dispatch to the commands.
 *
 * Works on a ring that no server is using (it takes the ring's lock, as
 * the server does); "inspect" also reads a ring in use.  Every option is
 * checked against the command before anything is opened, and each command
 * lives in a file of its own (pmwal_ctl.h lists them).  The exit statuses
 * are documented in usage() and the manual page, pmwal_ctl.1: a damaged
 * ring and a check that could not be made must never look alike.
 *
 * IDENTIFICATION
 *		pmwal_ctl/pmwal_ctl.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include "common/logging.h"
#include "getopt_long.h"

#include "pmwal_ctl.h"
#include "pmwal_version.h"

const char *progname;

static void
usage(void)
{
	printf("%s initialises, inspects, verifies, dumps and resets pmwal rings of a stopped server,\n", progname);
	printf("and unbinds a data directory from a ring that is lost.\n\n");
	printf("Usage:\n");
	printf("  %s init -D DATADIR [--size=SIZE] [--force] RING\n", progname);
	printf("                                   make RING an empty ring of the cluster in DATADIR\n");
	printf("  %s inspect [-D DATADIR] RING     show the header, the WAL range, the binding and whether a start would restore it\n", progname);
	printf("  %s verify  [-D DATADIR] RING     check the ring's page headers and records (with pg_waldump)\n", progname);
	printf("  %s dump --to=DIR RING            write the ring's WAL as segment files readable by pg_waldump\n", progname);
	printf("  %s reset --discard-wal RING      empty the ring, discarding the WAL it holds\n", progname);
	printf("  %s unbind -D DATADIR [--force]   remove DATADIR's binding to its ring (pg_wal/%s)\n", progname, BINDING_FILE);
	printf("\nRING is a regular file or a devdax device (a character device, sized from sysfs);\n");
	printf("a symbolic link is refused, as the server refuses it.  init creates a missing RING\n");
	printf("(mode 0600), or takes an existing file or device of yours, accessible by you only,\n");
	printf("that is provably empty: of size 0, every byte zero (all of it is read), or an\n");
	printf("interrupted initialisation; it overwrites nothing else without --force.\n");
	printf("unbind lets a server whose bound ring is lost for good start without it; it refuses\n");
	printf("while a server runs in DATADIR, and without --force while the bound ring holds\n");
	printf("this data directory's WAL (start the server on that ring once instead), or is there\n");
	printf("but cannot be read or proven empty (it may hold WAL: dump it first).\n");
	printf("dump writes the WAL of a ring whose positions are inconsistent too (a start refuses it):\n");
	printf("the whole pages from its tail on that read as its WAL, saying so on stderr.\n");
	printf("\nOptions:\n");
	printf("  -D, --pgdata=DATADIR   compare with this cluster (system identifier, binding, checkpoint);\n");
	printf("                         init: the cluster the ring is for; unbind: the data directory\n");
	printf("      --size=SIZE        init: capacity of the data area in MB, %d to %d like pmwal.size\n", RING_MIN_MB, RING_MAX_MB);
	printf("                         (\"16\", \"16MB\" or \"1GB\"); needed for a missing or empty file;\n");
	printf("                         default: what the file or device holds after the header\n");
	printf("      --to=DIR           dump: directory to dump into: yours and writable by no one else,\n");
	printf("                         created with mode 0700 if missing; existing files are not overwritten\n");
	printf("      --discard-wal      reset: confirm that reset may discard WAL\n");
	printf("      --force            init: overwrite what is not provably empty (other data, a pmwal\n");
	printf("                         ring and its WAL), after printing what it overwrites;\n");
	printf("                         unbind: remove the binding even though the bound ring holds\n");
	printf("                         this data directory's WAL, or cannot be read or checked\n");
	printf("  -V, --version          output version information, then exit\n");
	printf("  -?, --help             show this help, then exit\n");
	printf("\nverify and dump read the WAL with pg_waldump of PostgreSQL %s, looked for next to\n", PG_MAJORVERSION);
	printf("%s and then on PATH.\n", progname);
	printf("\nExit status:\n");
	printf("  %d  success: the ring is usable (inspect), its WAL verified (verify), or the command done\n", EXIT_OK);
	printf("  %d  error: bad usage, a file that cannot be opened or used, a server using the ring or\n", EXIT_ERROR);
	printf("     the data directory, a refusal of init or unbind without --force\n");
	printf("  %d  the ring is not usable or its WAL is damaged: a start would refuse it (inspect: its\n", EXIT_UNUSABLE);
	printf("     header; verify: its header, page headers and records; dump: its header, but dump exits\n");
	printf("     0 when only the positions are inconsistent and it wrote the pages that read as WAL)\n");
	printf("  %d  verify could not check the records (no usable pg_waldump): nothing is known to be wrong\n", EXIT_UNCHECKED);
}

/*
 * --size: whole MB (a bare number, or with "MB"), or "GB", in pmwal.size's
 * range; returns bytes.
 */
static uint64
parse_size(const char *arg)
{
	unsigned long long n = 0;
	const char *p = arg;

	while (*p >= '0' && *p <= '9' && n <= RING_MAX_MB)
		n = n * 10 + (*p++ - '0');
	if (p != arg && strcmp(p, "GB") == 0 && n <= RING_MAX_MB / 1024)
	{
		n *= 1024;
		p += 2;
	}
	else if (p != arg && strcmp(p, "MB") == 0)
		p += 2;
	if (p == arg || *p != '\0' || n < RING_MIN_MB || n > RING_MAX_MB)
		pg_fatal("--size must be between %d and %d MB, like pmwal.size, not \"%s\"",
				 RING_MIN_MB, RING_MAX_MB, arg);
	return (uint64) n * RING_MB;
}

/* Refuse an option the command does not take. */
static void
only_for(bool given, const char *option, bool allowed, const char *commands)
{
	if (given && !allowed)
		pg_fatal("%s is only for %s", option, commands);
}

int
main(int argc, char **argv)
{
	static struct option long_options[] = {
		{"pgdata", required_argument, NULL, 'D'},
		{"to", required_argument, NULL, 't'},
		{"discard-wal", no_argument, NULL, 'x'},
		{"size", required_argument, NULL, 's'},
		{"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, '?'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	const char *command;
	const char *datadir = NULL;
	const char *to = NULL;
	bool		discard = false;
	bool		force = false;
	uint64		size = 0;
	int			c;
	int			npaths;
	Ring		ring;
	ControlFileData *control;

	pg_logging_init(argv[0]);
	progname = get_progname(argv[0]);
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-?") == 0)
	{
		usage();
		exit(argc < 2 ? EXIT_ERROR : EXIT_OK);
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
	{
		printf("%s (pmwal) %s\n", progname, PMWAL_VERSION);
		exit(EXIT_OK);
	}
	command = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "D:V?", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'D':
				datadir = optarg;
				break;
			case 't':
				to = optarg;
				break;
			case 'x':
				discard = true;
				break;
			case 's':
				size = parse_size(optarg);
				break;
			case 'f':
				force = true;
				break;
			case 'V':
				printf("%s (pmwal) %s\n", progname, PMWAL_VERSION);
				exit(EXIT_OK);
			default:
				/* "-?" asks for help; getopt also returns '?' for a bad option */
				if (strcmp(argv[optind - 1], "-?") == 0)
				{
					usage();
					exit(EXIT_OK);
				}
				pg_log_error_hint("Try \"%s --help\" for more information.", progname);
				exit(EXIT_ERROR);
		}
	}

	npaths = argc - optind;
	if (strcmp(command, "unbind") == 0)
	{
		if (npaths != 0)
			pg_fatal("unbind takes no ring path, only -D DATADIR; try \"%s --help\"", progname);
	}
	else if (strcmp(command, "init") == 0 || strcmp(command, "inspect") == 0 ||
			 strcmp(command, "verify") == 0 || strcmp(command, "dump") == 0 ||
			 strcmp(command, "reset") == 0)
	{
		if (npaths != 1)
			pg_fatal("expected exactly one ring path; try \"%s --help\"", progname);
	}
	else
		pg_fatal("unknown command \"%s\"; try \"%s --help\"", command, progname);
	only_for(force, "--force",
			 strcmp(command, "init") == 0 || strcmp(command, "unbind") == 0, "init and unbind");
	only_for(size != 0, "--size", strcmp(command, "init") == 0, "init");
	only_for(to != NULL, "--to", strcmp(command, "dump") == 0, "dump");
	only_for(discard, "--discard-wal", strcmp(command, "reset") == 0, "reset");
	control = read_control(datadir);

	if (strcmp(command, "unbind") == 0)
	{
		if (control == NULL)
			pg_fatal("unbind needs -D DATADIR, the data directory to unbind");
		return cmd_unbind(datadir, control, force);
	}
	if (strcmp(command, "init") == 0)
	{
		if (control == NULL)
			pg_fatal("init needs -D DATADIR, the data directory of the cluster the ring is for");
		return cmd_init(argv[optind], control, size, force);
	}
	if (strcmp(command, "inspect") == 0)
	{
		open_ring(&ring, argv[optind], false);
		return cmd_inspect(&ring, control, datadir);
	}
	if (strcmp(command, "verify") == 0)
	{
		open_ring(&ring, argv[optind], false);
		return cmd_verify(&ring, control, argv[0]);
	}
	if (strcmp(command, "dump") == 0)
	{
		if (to == NULL)
			pg_fatal("dump needs --to DIR");
		open_ring(&ring, argv[optind], false);
		return cmd_dump(&ring, to);
	}
	/* reset */
	if (!discard)
		pg_fatal("reset discards the WAL the ring holds; confirm with --discard-wal");
	open_ring(&ring, argv[optind], true);
	return cmd_reset(&ring);
}

/*-------------------------------------------------------------------------
 *
 * unbind.c
 *		pmwal_ctl unbind: removing a data directory's binding file, the way
 *		out when the ring it names is lost for good.
 *
 * "unbind" removes a data directory's binding file (pg_wal/pmwal.binding),
 * which makes a server that crashed refuse to start without the ring named
 * there.  It refuses while a server runs in the data directory, and,
 * without --force, while the bound ring is there and holds this data
 * directory's WAL: a start on that ring restores it, which is what the
 * operator wants instead.  It refuses, too, while something is at the
 * bound ring's path that it cannot prove empty: a file it cannot read, or
 * a header a start would refuse.  "I cannot read it" is never "it holds
 * nothing": the binding is what keeps the next start from running without
 * the commits only that ring holds, and once it is gone nothing does.
 *
 * IDENTIFICATION
 *		pmwal_ctl/unbind.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/logging.h"

#include "pmwal_ctl.h"

/* What is at the bound ring's path, as unbind judges it */
typedef enum BoundRing
{
	BOUND_FREE,					/* missing, another ring, proven to hold no WAL,
								 * or holding only another copy's: unbind may go on */
	BOUND_HOLDS,				/* holds WAL a start on it restores */
	BOUND_UNREADABLE,			/* cannot be opened or sized */
	BOUND_NOT_A_RING			/* there, but its header is not usable: it may be
								 * that ring, and hold anything */
} BoundRing;

/* "detail" without its final period, for a clause */
static char *
clause(const char *detail)
{
	size_t		len = strlen(detail);

	return pnstrdup(detail, len > 0 && detail[len - 1] == '.' ? len - 1 : len);
}

/*
 * Does the ring the binding names hold this data directory's WAL, as the
 * server's start sees it (binding.c)?  Returns a description of what is
 * there in *state.  Only what is proven counts as free: a ring that is
 * missing, another ring (its own valid header says so), or one whose
 * header says it holds no WAL.  A header a start would refuse proves
 * nothing -- a head left inside a page by a short WAL write makes the
 * ring unusable while it holds the newest acknowledged commits -- and
 * neither does a file that cannot be read.
 */
static BoundRing
bound_ring_state(const BindingSlot *slot, char **state)
{
	Ring		ring;
	char		why[MAXPGPATH + 128];
	char		detail[256];
	RingExpect	expect = {0, 0, XLOG_BLCKSZ};
	RingHeader *hdr;
	RingCheck	verdict;
	bool		missing;
	uint64		gen;

	memset(&ring, 0, sizeof(ring));
	ring.path = slot->ring_path;
	ring.fd = try_open_ring(ring.path, O_RDONLY, &ring.st, &missing, why, sizeof(why));
	if (ring.fd < 0 && missing)
	{
		*state = psprintf("ring \"%s\" is missing", ring.path);
		return BOUND_FREE;
	}
	if (ring.fd < 0)
	{
		*state = pstrdup(why);
		return BOUND_UNREADABLE;
	}
	if (!ring_size(ring.path, &ring.st, &ring.len, why, sizeof(why)))
	{
		close(ring.fd);
		*state = pstrdup(why);
		return BOUND_UNREADABLE;
	}
	map_ring(&ring, false);
	hdr = ring.hdr;
	verdict = ring_check_header(hdr, ring.len, &expect, detail, sizeof(detail));
	if (verdict == RING_INTERRUPTED_REINIT)
	{
		/* only ever a ring that holds nothing (ring_format.h) */
		*state = psprintf("ring \"%s\" holds no WAL: %s", ring.path, clause(detail));
		return BOUND_FREE;
	}
	if ((verdict == RING_OK || verdict == RING_BAD_RANGE) &&
		memcmp(hdr->st.s.ring_id, slot->ring_id, RING_ID_LEN) != 0)
	{
		char		id[2 * RING_ID_LEN + 1];

		/* a static header that checked names its ring */
		ring_id_text(hdr->st.s.ring_id, id);
		*state = psprintf("\"%s\" is another ring now (%s)", ring.path, id);
		return BOUND_FREE;
	}
	if (verdict == RING_BAD_RANGE)
	{
		*state = psprintf("\"%s\" is not a usable ring: its positions are inconsistent: %s",
						  ring.path, position_problems(hdr));
		return BOUND_NOT_A_RING;
	}
	if (verdict != RING_OK)
	{
		*state = psprintf("\"%s\" is not a usable ring: %s", ring.path, clause(detail));
		return BOUND_NOT_A_RING;
	}
	gen = hdr->generation.v;
	if (!ring_holds_wal(hdr))
	{
		*state = psprintf("ring \"%s\" is there and holds no WAL", ring.path);
		return BOUND_FREE;
	}
	if (gen > slot->generation + 1)
	{
		*state = psprintf("ring \"%s\" holds WAL " PMWAL_LSN " to " PMWAL_LSN ", but of another copy of this data directory, which bound it since (generation " UINT64_FORMAT ", the binding's " UINT64_FORMAT ")",
						  ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						  gen, slot->generation);
		return BOUND_FREE;
	}
	*state = psprintf("ring \"%s\" holds WAL " PMWAL_LSN " to " PMWAL_LSN " (generation " UINT64_FORMAT ") that pg_wal may lack",
					  ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v), gen);
	return BOUND_HOLDS;
}

int
cmd_unbind(const char *datadir, ControlFileData *control, bool force)
{
	BindingSlot slot;
	BindState	bstate;
	char		path[MAXPGPATH];
	char		why[MAXPGPATH + 128];
	char		waldir[MAXPGPATH];
	char		id[2 * RING_ID_LEN + 1];
	long		pid;
	int			dirfd;

	if ((pid = running_server(datadir)) != 0)
	{
		pg_log_error("a server is running in \"%s\" (PID %ld, postmaster.pid)", datadir, pid);
		pg_log_error_hint("Stop it first; a running server's binding names the ring it uses.");
		exit(EXIT_ERROR);
	}
	bstate = read_binding(datadir, &slot, path, why, sizeof(why));
	if (bstate == BIND_ABSENT)
	{
		printf("\"%s\" is not bound to a ring (\"%s\" is absent); nothing to do\n", datadir, path);
		return EXIT_OK;
	}
	if (bstate == BIND_VALID)
	{
		BoundRing	bound;
		char	   *state;

		ring_id_text(slot.ring_id, id);
		printf("\"%s\" binds the data directory to ring %s at \"%s\", generation " UINT64_FORMAT "\n",
			   path, id, slot.ring_path, slot.generation);
		if (slot.system_identifier != control->system_identifier)
			printf("the binding is of another cluster (system identifier " UINT64_FORMAT ", this one's " UINT64_FORMAT "): a start ignores it\n",
				   slot.system_identifier, control->system_identifier);
		else if (shut_down_cleanly(control))
			printf("the cluster shut down cleanly: the binding claims no WAL, and a start does not need it removed\n");
		bound = bound_ring_state(&slot, &state);
		printf("%s\n", state);
		if (bound != BOUND_FREE && !force)
		{
			if (bound == BOUND_HOLDS)
			{
				pg_log_error("refusing to unbind \"%s\": its ring holds WAL this data directory may need", datadir);
				pg_log_error_detail("%s; a start on that ring restores it into pg_wal.", state);
				pg_log_error_hint("Set pmwal.path = '%s' and start the server once, so that the WAL is restored; after a clean shutdown pmwal.path may change.  --force unbinds anyway, and the commits only that ring holds are lost.",
								  slot.ring_path);
			}
			else if (bound == BOUND_NOT_A_RING)
			{
				pg_log_error("refusing to unbind \"%s\": its ring \"%s\" cannot be read, so it may hold acknowledged WAL",
							 datadir, slot.ring_path);
				pg_log_error_detail("%s; a start refuses it, and the binding is what keeps a start from running without the commits only that ring holds.",
									state);
				pg_log_error_hint("Save what it holds first with \"pmwal_ctl dump --to=DIR %s\" (it writes out the WAL pages of a ring whose positions are inconsistent; keep a copy of anything else); then --force unbinds, and the commits only that ring holds are lost to this data directory.",
								  slot.ring_path);
			}
			else
			{
				pg_log_error("refusing to unbind \"%s\": whether its ring holds WAL cannot be told", datadir);
				pg_log_error_detail("%s.", state);
				pg_log_error_hint("Make the ring readable at \"%s\" and check it with \"pmwal_ctl inspect -D\"; --force unbinds anyway, and any commits only that ring holds are lost.",
								  slot.ring_path);
			}
			exit(EXIT_ERROR);
		}
		if (bound != BOUND_FREE)
			pg_log_warning("unbinding with --force: the commits only ring \"%s\" holds are lost to this data directory",
						   slot.ring_path);
	}
	else
	{
		printf("\"%s\" %s: %s\n", path,
			   bstate == BIND_DAMAGED ? "is damaged" : "cannot be read", why);
		if (!force)
		{
			pg_log_error("refusing to unbind \"%s\": its binding file cannot be read, so which ring holds its WAL cannot be told", datadir);
			pg_log_error_hint("Find the ring the server used (pmwal.path), check it with \"pmwal_ctl inspect -D\" and start the server on it once; --force removes the binding file anyway.");
			exit(EXIT_ERROR);
		}
	}

	/* remove it, durably */
	if (unlink(path) != 0)
		pg_fatal("could not remove \"%s\": %m", path);
	snprintf(waldir, sizeof(waldir), "%s/pg_wal", datadir);
	dirfd = open(waldir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0 || fsync(dirfd) != 0)
		pg_fatal("could not fsync directory \"%s\": %m", waldir);
	close(dirfd);
	printf("removed \"%s\": the data directory is no longer bound to a ring, and its next start does not look for one\n",
		   path);
	return EXIT_OK;
}

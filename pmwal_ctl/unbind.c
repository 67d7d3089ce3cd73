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
 * operator wants instead.
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

/*
 * Does the ring the binding names hold this data directory's WAL, as the
 * server's start sees it (binding.c)?  Returns a description of what is
 * there; *holds is set when it holds WAL a start on it would restore, and
 * *unknown when that cannot be told.
 */
static char *
bound_ring_state(const BindingSlot *slot, bool *holds, bool *unknown)
{
	Ring		ring;
	char		why[MAXPGPATH + 128];
	char		detail[256];
	RingExpect	expect = {0, 0, XLOG_BLCKSZ};
	RingHeader *hdr;
	bool		missing;
	uint64		gen;

	*holds = *unknown = false;
	memset(&ring, 0, sizeof(ring));
	ring.path = slot->ring_path;
	ring.fd = try_open_ring(ring.path, O_RDONLY, &ring.st, &missing, why, sizeof(why));
	if (ring.fd < 0 && missing)
		return psprintf("ring \"%s\" is missing", ring.path);
	if (ring.fd < 0)
	{
		*unknown = true;
		return pstrdup(why);
	}
	if (!ring_size(ring.path, &ring.st, &ring.len, why, sizeof(why)))
	{
		*unknown = true;
		close(ring.fd);
		return pstrdup(why);
	}
	map_ring(&ring, false);
	hdr = ring.hdr;
	if (ring_check_header(hdr, ring.len, &expect, detail, sizeof(detail)) != RING_OK)
		return psprintf("\"%s\" is not a usable ring: %s", ring.path, detail);
	if (memcmp(hdr->st.s.ring_id, slot->ring_id, RING_ID_LEN) != 0)
	{
		char		id[2 * RING_ID_LEN + 1];

		ring_id_text(hdr->st.s.ring_id, id);
		return psprintf("\"%s\" is another ring now (%s)", ring.path, id);
	}
	gen = hdr->generation.v;
	if (!ring_holds_wal(hdr))
		return psprintf("ring \"%s\" is there and holds no WAL", ring.path);
	if (gen > slot->generation + 1)
		return psprintf("ring \"%s\" holds WAL %X/%X to %X/%X, but of another copy of this data directory, which bound it since (generation " UINT64_FORMAT ", the binding's " UINT64_FORMAT ")",
						ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						gen, slot->generation);
	*holds = true;
	return psprintf("ring \"%s\" holds WAL %X/%X to %X/%X (generation " UINT64_FORMAT ") that pg_wal may lack",
					ring.path, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v), gen);
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
		bool		holds;
		bool		unknown;
		char	   *state;

		ring_id_text(slot.ring_id, id);
		printf("\"%s\" binds the data directory to ring %s at \"%s\", generation " UINT64_FORMAT "\n",
			   path, id, slot.ring_path, slot.generation);
		if (slot.system_identifier != control->system_identifier)
			printf("the binding is of another cluster (system identifier " UINT64_FORMAT ", this one's " UINT64_FORMAT "): a start ignores it\n",
				   slot.system_identifier, control->system_identifier);
		else if (shut_down_cleanly(control))
			printf("the cluster shut down cleanly: the binding claims no WAL, and a start does not need it removed\n");
		state = bound_ring_state(&slot, &holds, &unknown);
		printf("%s\n", state);
		if ((holds || unknown) && !force)
		{
			if (holds)
			{
				pg_log_error("refusing to unbind \"%s\": its ring holds WAL this data directory may need", datadir);
				pg_log_error_detail("%s; a start on that ring restores it into pg_wal.", state);
				pg_log_error_hint("Set pmwal.path = '%s' and start the server once, so that the WAL is restored; after a clean shutdown pmwal.path may change.  --force unbinds anyway, and the commits only that ring holds are lost.",
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
		if (holds || unknown)
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

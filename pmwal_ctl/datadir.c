/*-------------------------------------------------------------------------
 *
 * datadir.c
 *		What pmwal_ctl reads of a data directory: pg_control, the binding
 *		file, backup_label and postmaster.pid.
 *
 * The tool judges a ring against a data directory as a start of the server
 * would (binding.c, restore.c), without a server: these are the same files,
 * read with the same rules, and nothing here writes.  The binding file
 * (pg_wal/pmwal.binding) names the ring that may hold the cluster's
 * acknowledged WAL; ring_format.c picks its valid slot, as the server does.
 *
 * IDENTIFICATION
 *		pmwal_ctl/datadir.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "common/controldata_utils.h"
#include "common/logging.h"

#include "pmwal_ctl.h"

ControlFileData *
read_control(const char *datadir)
{
	ControlFileData *control;
	bool		crc_ok;

	if (datadir == NULL)
		return NULL;
	control = get_controlfile(datadir, &crc_ok);
	if (!crc_ok)
		pg_fatal("pg_control in \"%s\" has a wrong checksum", datadir);
	return control;
}

/*
 * Read "datadir"'s binding file into *slot; "path" receives its path and
 * "why" what is wrong with it, if anything.
 */
BindState
read_binding(const char *datadir, BindingSlot *slot, char *path, char *why, size_t whylen)
{
	char		file[2 * BINDING_SLOT_SIZE];
	const BindingSlot *best;
	ssize_t		n;
	int			fd;

	snprintf(path, MAXPGPATH, "%s/pg_wal/%s", datadir, BINDING_FILE);
	why[0] = '\0';
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return BIND_ABSENT;
		snprintf(why, whylen, "could not open \"%s\": %s", path,
				 errno == ELOOP ? "it is a symbolic link" : strerror(errno));
		return BIND_UNREADABLE;
	}
	n = pg_pread(fd, file, sizeof(file), 0);
	close(fd);
	if (n < 0)
	{
		snprintf(why, whylen, "could not read \"%s\": %s", path, strerror(errno));
		return BIND_UNREADABLE;
	}
	best = binding_pick(file, (size_t) n);
	if (best == NULL)
	{
		snprintf(why, whylen, "neither of its two slots is valid (%lld bytes)", (long long) n);
		return BIND_DAMAGED;
	}
	memcpy(slot, best, sizeof(BindingSlot));
	return BIND_VALID;
}

/*
 * Is "slot" the binding a start accepts for this ring: the same ring_id,
 * and the ring at the binding's generation or one ahead (the flusher moves
 * the ring first)?  NULL if so, else why not.
 */
char *
binding_mismatch(const RingHeader *hdr, const BindingSlot *slot)
{
	char		id[2 * RING_ID_LEN + 1];
	uint64		gen = hdr->generation.v;

	if (memcmp(slot->ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0)
	{
		ring_id_text(slot->ring_id, id);
		return psprintf("the data directory is bound to another ring (%s)", id);
	}
	if (slot->system_identifier != hdr->st.s.system_identifier)
		return psprintf("the binding is of the cluster with system identifier " UINT64_FORMAT ", the ring of " UINT64_FORMAT,
						slot->system_identifier, hdr->st.s.system_identifier);
	if (gen > slot->generation + 1)
		return psprintf("the ring is at generation " UINT64_FORMAT ", more than one ahead of the binding's " UINT64_FORMAT ": another copy of this data directory has bound it since",
						gen, slot->generation);
	if (gen < slot->generation)
		return psprintf("the ring is at generation " UINT64_FORMAT ", behind the binding's " UINT64_FORMAT ": it is an earlier copy of the ring",
						gen, slot->generation);
	return NULL;
}

/* The START WAL LOCATION of "datadir"'s backup_label; false without one. */
bool
backup_label_start(const char *datadir, XLogRecPtr *start)
{
	char		path[MAXPGPATH];
	char		line[MAXPGPATH];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/backup_label", datadir);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	*start = InvalidXLogRecPtr;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		uint32		hi,
					lo;

		if (sscanf(line, "START WAL LOCATION: %X/%X", &hi, &lo) == 2)
		{
			*start = ((uint64) hi << 32) | lo;
			break;
		}
	}
	fclose(f);
	return true;
}

bool
shut_down_cleanly(const ControlFileData *control)
{
	return control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY;
}

/*
 * The PID of a server running in "datadir", or 0: postmaster.pid's first
 * line (negative for a standalone backend), alive as kill(pid, 0) sees it.
 */
long
running_server(const char *datadir)
{
	char		path[MAXPGPATH];
	char		line[64] = "";
	FILE	   *f;
	long		pid;

	snprintf(path, sizeof(path), "%s/postmaster.pid", datadir);
	if ((f = fopen(path, "r")) == NULL)
	{
		if (errno == ENOENT)
			return 0;
		pg_fatal("could not open \"%s\": %m", path);
	}
	if (fgets(line, sizeof(line), f) == NULL)
		line[0] = '\0';
	fclose(f);
	pid = labs(strtol(line, NULL, 10));
	if (pid <= 0 || pid == (long) getpid())
		return 0;
	if (kill((pid_t) pid, 0) == 0 || errno == EPERM)
		return pid;
	return 0;
}

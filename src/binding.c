/*-------------------------------------------------------------------------
 *
 * binding.c
 *		Which ring holds this data directory's acknowledged WAL (I4), and
 *		refusing every start that could lose it or write another history
 *		over pg_wal.
 *
 * The binding is two-way.  The data directory's binding file
 * (pg_wal/pmwal.binding, ring_format.h) names the ring -- its random
 * ring_id, its path -- and a generation; the ring's header carries the
 * same generation and, for messages, the data directory that bound it.
 * Each start that binds the (then empty) ring raises the ring's generation
 * by two and then records it in the binding file; the flusher raises it by
 * one after each pass, ring first.  So the ring of a data directory is
 * always at the binding file's generation or one ahead, and:
 *
 *	- a file copy of the data directory (cp -a, a snapshot) keeps the
 *	  generation it was copied at, and the original's next start moves the
 *	  ring two ahead of it: the copy is refused the ring's WAL;
 *	- a copy of the ring put back is behind the binding file (if the
 *	  flusher passed since the copy was made);
 *	- a start whose pmwal.path names another ring, or none, or a ring that
 *	  is missing, while the cluster crashed and its bound ring may hold
 *	  WAL, is refused: pmwal reads the bound ring, and lets the start go on
 *	  only if that ring is empty or has been bound by someone else since.
 *
 * A ring holding WAL is restored only into the data directory whose
 * binding it carries, only if pg_control says the cluster did not shut
 * down cleanly (a clean shutdown's last pg_control write synced and
 * emptied the ring, wal_ring.c), and restore.c then proves the WAL is this
 * cluster's own unbroken history before it writes a byte.  A data
 * directory restored from a base backup (backup_label; pg_rewind writes
 * one too) may carry the binding of the server it came from: its binding
 * file is not trusted, and a ring holding WAL past the backup's start is
 * refused.  Every refusal names both sides and writes nothing.
 *
 * pg_createsubscriber (a new system identifier) and pg_resetwal
 * --wal-segsize change the identity the ring's header records, on a
 * cluster stopped cleanly, and keep the binding file: an empty ring that
 * the binding names at its generation follows the new identity
 * (pmwal_binding_may_follow); any other ring of another identity is
 * refused.
 *
 * The binding file is written off the commit path: at a start, and by the
 * flusher.  A slot is written in place and synced; two slots alternate, so
 * a torn write leaves the previous generation.
 *
 * IDENTIFICATION
 *		binding.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/file_perm.h"
#include "miscadmin.h"

#include "pmwal.h"

#define BINDING_PATH	XLOGDIR "/" BINDING_FILE

typedef enum BindingState
{
	BINDING_ABSENT,
	BINDING_VALID,
	BINDING_DAMAGED
} BindingState;

/* The way out when the bound ring is lost for good. */
static char *
unbind_hint_text(void)
{
	return psprintf("If that ring is lost for good, \"pmwal_ctl unbind -D %s\" lets the server start without what only it held; the cluster must then be treated as damaged (pages written from WAL only that ring held may be on disk).",
					DataDir);
}

#define unbind_hint unbind_hint_text()

/* The generation the binding file holds, as this process last wrote it. */
static uint64 written_generation = 0;

/* ---------------------------------------------------------------------
 * The binding file
 * --------------------------------------------------------------------- */

/*
 * Read the binding file; a file that cannot be read is reported at
 * "elevel" and, when that is below ERROR, taken as damaged.
 */
static BindingState
binding_read_at(BindingSlot *slot, int elevel)
{
	char		file[2 * BINDING_SLOT_SIZE];
	const BindingSlot *best;
	ssize_t		n;
	int			fd;

	fd = open(BINDING_PATH, O_RDONLY | O_NOFOLLOW | PG_BINARY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return BINDING_ABSENT;
	n = fd < 0 ? -1 : pg_pread(fd, file, sizeof(file), 0);
	if (n < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", BINDING_PATH)));
		if (fd >= 0)
			close(fd);
		return BINDING_DAMAGED;
	}
	close(fd);
	best = binding_pick(file, n);
	if (best == NULL)
		return BINDING_DAMAGED;
	memcpy(slot, best, sizeof(BindingSlot));
	return BINDING_VALID;
}

static BindingState
binding_read(BindingSlot *slot)
{
	return binding_read_at(slot, FATAL);
}

static void
fill_slot(BindingSlot *slot, uint64 sysid, uint64 generation)
{
	memset(slot, 0, sizeof(BindingSlot));
	memcpy(slot->magic, BINDING_MAGIC, RING_MAGIC_LEN);
	slot->version = BINDING_VERSION;
	slot->slot_size = BINDING_SLOT_SIZE;
	slot->system_identifier = sysid;
	slot->generation = generation;
	memcpy(slot->ring_id, pmwal_ring->hdr->st.s.ring_id, RING_ID_LEN);
	strlcpy(slot->ring_path, pmwal_ring->path, BINDING_PATH_LEN);
	slot->crc = binding_slot_crc(slot);
}

/*
 * May the binding "slot" be written into the existing file in place, into
 * the slot of its generation?  Only if the file's binding is of the same
 * ring and cluster at a lower generation: the other slot then holds a lower
 * generation too, and binding_pick() takes the new one.  A binding of
 * another ring (pmwal.path changed after a clean shutdown, a data directory
 * restored from a file-level backup) may have any generation, higher than
 * the new ring's: written into one slot only, the other slot would still
 * name the old ring, and win.
 */
static bool
binding_in_place(const BindingSlot *slot)
{
	BindingSlot cur;

	return binding_read_at(&cur, WARNING) == BINDING_VALID &&
		memcmp(cur.ring_id, slot->ring_id, RING_ID_LEN) == 0 &&
		cur.system_identifier == slot->system_identifier &&
		cur.generation < slot->generation;
}

/*
 * Record the binding at "generation".  The slot for this generation is
 * written in place when binding_in_place() allows it; otherwise the file is
 * created complete (both slots) under another name and renamed into place.
 * Returns false (reported at elevel) when that failed.
 */
static bool
binding_write(uint64 sysid, uint64 generation, int elevel)
{
	char		buf[BINDING_SLOT_SIZE];
	BindingSlot *slot = (BindingSlot *) buf;
	struct stat st;
	int			fd;

	memset(buf, 0, sizeof(buf));
	fill_slot(slot, sysid, generation);
	if (lstat(BINDING_PATH, &st) != 0 || !binding_in_place(slot))
	{
		const char *tmp = BINDING_PATH ".tmp";

		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | PG_BINARY | O_CLOEXEC,
				  pg_file_create_mode);
		if (fd < 0)
		{
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not create file \"%s\": %m", tmp)));
			return false;
		}
		if (!pmwal_write_fully(fd, buf, sizeof(buf), 0, tmp, elevel) ||
			!pmwal_write_fully(fd, buf, sizeof(buf), BINDING_SLOT_SIZE, tmp, elevel) ||
			!pmwal_fsync_fd(fd, tmp, elevel))
		{
			close(fd);
			return false;
		}
		close(fd);
		if (rename(tmp, BINDING_PATH) != 0)
		{
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not rename file \"%s\" to \"%s\": %m", tmp, BINDING_PATH)));
			return false;
		}
		if (!pmwal_fsync_path(XLOGDIR, true, elevel))
			return false;
	}
	else
	{
		fd = open(BINDING_PATH, O_WRONLY | O_NOFOLLOW | PG_BINARY | O_CLOEXEC);
		if (fd < 0)
		{
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", BINDING_PATH)));
			return false;
		}
		if (!pmwal_write_fully(fd, buf, sizeof(buf), (generation % 2) * BINDING_SLOT_SIZE,
							   BINDING_PATH, elevel) ||
			!pmwal_fsync_fd(fd, BINDING_PATH, elevel))
		{
			close(fd);
			return false;
		}
		close(fd);
	}
	written_generation = generation;
	return true;
}

static void
binding_remove(void)
{
	if (unlink(BINDING_PATH) != 0 && errno != ENOENT)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", BINDING_PATH)));
	pmwal_fsync_path(XLOGDIR, true, FATAL);
}

/* ---------------------------------------------------------------------
 * Decisions
 * --------------------------------------------------------------------- */

bool
pmwal_cluster_shut_down(ControlFileData *control)
{
	return control->state == DB_SHUTDOWNED ||
		control->state == DB_SHUTDOWNED_IN_RECOVERY;
}

static bool
restored_from_backup(void)
{
	struct stat st;

	return stat(BACKUP_LABEL_FILE, &st) == 0;
}

/*
 * The WAL location a base backup starts from, as its backup_label says
 * ("START WAL LOCATION: X/X (file ...)"); 0 if the file cannot be read or
 * names none, so that nothing counts as older than the backup.
 */
static XLogRecPtr
backup_label_start(void)
{
	FILE	   *f = fopen(BACKUP_LABEL_FILE, "r");
	char		line[MAXPGPATH];
	XLogRecPtr	start = InvalidXLogRecPtr;

	if (f == NULL)
		return InvalidXLogRecPtr;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		uint32		hi,
					lo;

		if (sscanf(line, "START WAL LOCATION: %X/%X", &hi, &lo) == 2)
		{
			start = ((uint64) hi << 32) | lo;
			break;
		}
	}
	fclose(f);
	return start;
}

/*
 * Does the data directory claim, through its binding file, that a ring
 * may hold WAL this start needs?  Only when it crashed (a clean shutdown
 * left every ring empty of its WAL) and is not a base backup.
 */
static BindingState
claimed_binding(ControlFileData *control, BindingSlot *slot)
{
	BindingState state;

	if (pmwal_cluster_shut_down(control) || restored_from_backup())
		return BINDING_ABSENT;
	state = binding_read(slot);
	if (state == BINDING_DAMAGED)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal's binding file \"%s\" is damaged", BINDING_PATH),
				 errdetail("The cluster did not shut down cleanly, and the file that names the ring holding its acknowledged WAL cannot be read."),
				 errhint("Check with \"pmwal_ctl inspect\" which ring holds this cluster's WAL and set pmwal.path to it.  %s",
						 unbind_hint)));
	if (state == BINDING_VALID && slot->system_identifier != control->system_identifier)
		return BINDING_ABSENT;	/* another cluster's file: not a claim on us */
	return state;
}

/*
 * Read the header of the ring the binding names, at its path, without
 * taking it.  FATAL unless it is verifiably holding none of this data
 * directory's WAL: missing, another file, or holding WAL of this binding.
 */
static void
require_bound_ring_free(const BindingSlot *slot, const char *why_looking)
{
	PGAlignedBlock page;
	RingHeader *hdr = (RingHeader *) page.data;
	RingExpect	expect = {0};
	char		detail[256];
	char		id[2 * RING_ID_LEN + 1];
	int			fd;
	ssize_t		n;

	ring_id_text(slot->ring_id, id);
	fd = open(slot->ring_path, O_RDONLY | O_NOFOLLOW | PG_BINARY | O_CLOEXEC);
	if (fd < 0)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal cannot start: the ring that may hold this cluster's acknowledged WAL cannot be read"),
				 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring \"%s\" (ring %s, generation %llu), which cannot be opened: %m.  %s",
						   slot->ring_path, id, (unsigned long long) slot->generation,
						   why_looking),
				 errhint("Put that ring back at \"%s\" and set pmwal.path to it for one start, so that its WAL is restored.  %s",
						 slot->ring_path, unbind_hint)));
	n = pg_pread(fd, page.data, RING_HEADER_SIZE, 0);
	close(fd);
	/*
	 * That ring, by its id, but its header does not check (inconsistent
	 * positions, a damaged field): it may still hold the WAL.  Not "gone".
	 */
	if (n == RING_HEADER_SIZE &&
		memcmp(hdr->st.s.ring_id, slot->ring_id, RING_ID_LEN) == 0 &&
		ring_check_header(hdr, RING_HEADER_SIZE + hdr->st.s.capacity, &expect,
						  detail, sizeof(detail)) != RING_OK)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal cannot start: the ring that may hold this cluster's acknowledged WAL cannot be read"),
				 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring %s at \"%s\" (generation %llu).  The file there is that ring, but its header does not check: %s  %s",
						   id, slot->ring_path, (unsigned long long) slot->generation,
						   detail, why_looking),
				 errhint("The ring may still hold that WAL: \"pmwal_ctl inspect\" says what it holds, and \"pmwal_ctl dump\" gets it out (see pmwal's docs/failures.md) before anything else is done with the ring or the binding.")));
	if (n != RING_HEADER_SIZE ||
		ring_check_header(hdr, RING_HEADER_SIZE + hdr->st.s.capacity, &expect,
						  detail, sizeof(detail)) != RING_OK ||
		memcmp(hdr->st.s.ring_id, slot->ring_id, RING_ID_LEN) != 0)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal cannot start: the ring that may hold this cluster's acknowledged WAL is gone"),
				 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring %s at \"%s\" (generation %llu), but that file is not that ring any more.  %s",
						   id, slot->ring_path, (unsigned long long) slot->generation,
						   why_looking),
				 errhint("%s", unbind_hint)));
	if (hdr->generation.v < slot->generation)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal cannot start: the ring that may hold this cluster's acknowledged WAL was replaced by an older copy of itself"),
				 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring %s at \"%s\" at generation %llu, but the file there is at generation %llu: an earlier copy, without the WAL acknowledged since.  %s",
						   id, slot->ring_path, (unsigned long long) slot->generation,
						   (unsigned long long) hdr->generation.v, why_looking),
				 errhint("Put the ring that was at \"%s\" back and set pmwal.path to it for one start.  %s",
						 slot->ring_path, unbind_hint)));
	if (ring_holds_wal(hdr) && hdr->generation.v <= slot->generation + 1)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal cannot start: ring \"%s\" holds this cluster's acknowledged WAL", slot->ring_path),
				 errdetail("The cluster did not shut down cleanly, and ring %s (generation %llu) holds WAL from " PMWAL_LSN " to " PMWAL_LSN " that pg_wal may lack.  %s",
						   id, (unsigned long long) hdr->generation.v,
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   why_looking),
				 errhint("Set pmwal.path = '%s' for one start, so that its WAL is restored; after a clean shutdown pmwal.path may change.",
						 slot->ring_path)));
	if (ring_holds_wal(hdr))
		ereport(WARNING,
				(errmsg("pmwal: ring \"%s\" that this data directory was bound to has been bound by another data directory since",
						slot->ring_path),
				 errdetail("The ring is at generation %llu, this data directory's binding at %llu: a copy of this data directory used it.",
						   (unsigned long long) hdr->generation.v,
						   (unsigned long long) slot->generation)));
}

/*
 * The ring at "path" is missing: may pmwal create a new one there?  Not if
 * the cluster crashed and its bound ring -- this one -- may hold WAL.
 */
void
pmwal_binding_allows_new_ring(ControlFileData *control, const char *path)
{
	BindingSlot slot;

	if (claimed_binding(control, &slot) != BINDING_VALID)
		return;
	if (strcmp(slot.ring_path, path) == 0)
	{
		char		id[2 * RING_ID_LEN + 1];

		ring_id_text(slot.ring_id, id);
		ereport(FATAL,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("pmwal ring \"%s\" is missing, and it may hold this cluster's acknowledged WAL", path),
				 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring %s at that path (generation %llu).  pmwal does not create a new ring in its place.",
						   id, (unsigned long long) slot.generation),
				 errhint("Put the ring back at \"%s\", so that its WAL is restored.  %s",
						 path, unbind_hint)));
	}
	require_bound_ring_free(&slot, psprintf("pmwal.path now names \"%s\".", path));
}

/*
 * pmwal.path is empty: pmwal stays inactive.  The binding goes, unless the
 * cluster crashed with WAL in the bound ring.
 */
void
pmwal_binding_inactive(ControlFileData *control)
{
	BindingSlot slot;
	struct stat st;

	if (claimed_binding(control, &slot) == BINDING_VALID)
		require_bound_ring_free(&slot, "pmwal.path is empty.");
	if (lstat(BINDING_PATH, &st) == 0)
	{
		binding_remove();
		ereport(LOG,
				(errmsg("pmwal is inactive because pmwal.path is not set; the data directory is no longer bound to a ring")));
	}
	else
		ereport(LOG,
				(errmsg("pmwal is inactive because pmwal.path is not set")));
}

/*
 * Did this data directory bind the ring last (the ring's owner block, as
 * ring_write_owner() wrote it)?  A ring without a valid owner block does
 * not say: then yes.  A file copy of a data directory taken while its
 * server ran shares its binding file, generation included, and only the
 * place differs.
 */
static bool
owner_is_this_datadir(const RingHeader *hdr)
{
	char		here[PATH_MAX];

	if (!ring_owner_valid(&hdr->owner))
		return true;
	return strcmp(hdr->owner.datadir, realpath(DataDir, here) ? here : DataDir) == 0;
}

/*
 * The attached ring's header names another system identifier or WAL segment
 * size than pg_control: may the ring follow the data directory's new
 * identity?  pg_createsubscriber gives a standby a new system identifier and
 * pg_resetwal --wal-segsize another segment size; both run on a cluster
 * stopped cleanly (so the ring holds nothing) and leave pg_wal/pmwal.binding
 * in place.  The ring follows only if nothing is at stake in it and it is
 * provably this data directory's own: it holds no WAL; the data directory
 * is not a base backup; its binding file names this ring, was written for
 * the ring's old system identifier, and is at the ring's generation (or one
 * behind: the flusher raises the ring's first); and the ring was bound last
 * from this data directory's path.  Returns NULL if it may, else a sentence
 * saying why not, for the refusal's detail.
 */
char *
pmwal_binding_may_follow(ControlFileData *control)
{
	RingHeader *hdr = pmwal_ring->hdr;
	BindingSlot slot;
	BindingState state;
	char		rid[2 * RING_ID_LEN + 1];
	char		bid[2 * RING_ID_LEN + 1];
	char		here[PATH_MAX];

	if (ring_holds_wal(hdr))
		return psprintf("The ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN ", written under the old identity; pmwal gives a ring a new identity only while it holds nothing.",
						LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v));
	if (restored_from_backup())
		return psprintf("This data directory is being restored from a base backup (\"%s\" exists): the binding file it carries is not trusted.",
						BACKUP_LABEL_FILE);
	state = binding_read_at(&slot, WARNING);
	if (state == BINDING_ABSENT)
		return psprintf("This data directory has no binding file (\"%s\"): it never bound this ring.",
						BINDING_PATH);
	if (state == BINDING_DAMAGED)
		return psprintf("This data directory's binding file (\"%s\") is damaged.", BINDING_PATH);
	ring_id_text(hdr->st.s.ring_id, rid);
	if (memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0)
		return psprintf("This data directory is bound to ring %s at \"%s\", not to this ring (%s).",
						(ring_id_text(slot.ring_id, bid), bid), slot.ring_path, rid);
	if (slot.system_identifier != hdr->st.s.system_identifier)
		return psprintf("This data directory's binding to the ring was written for system identifier %llu, the ring for %llu.",
						(unsigned long long) slot.system_identifier,
						(unsigned long long) hdr->st.s.system_identifier);
	if (hdr->generation.v < slot.generation)
		return psprintf("The ring is at generation %llu, this data directory's binding at %llu: the ring file is an earlier copy of itself.",
						(unsigned long long) hdr->generation.v,
						(unsigned long long) slot.generation);
	if (hdr->generation.v > slot.generation + 1)
		return psprintf("The ring is at generation %llu, this data directory's binding at %llu: another copy of this data directory has used the ring since.",
						(unsigned long long) hdr->generation.v,
						(unsigned long long) slot.generation);
	if (!owner_is_this_datadir(hdr))
		return psprintf("The ring was bound last by the data directory %s, not by this one (%s): this data directory is a copy of that one.",
						hdr->owner.datadir, realpath(DataDir, here) ? here : DataDir);
	return NULL;
}

/*
 * The attached ring, checked against the data directory: what the start
 * does with it.  FATAL where it must not be used.
 */
RestorePlan
pmwal_binding_check(ControlFileData *control)
{
	RingHeader *hdr = pmwal_ring->hdr;
	const char *path = pmwal_ring->path;
	BindingSlot slot;
	BindingState state = BINDING_ABSENT;
	char		rid[2 * RING_ID_LEN + 1];
	char		bid[2 * RING_ID_LEN + 1];
	const char *owner = ring_owner_valid(&hdr->owner) ? hdr->owner.datadir : "unknown";

	ring_id_text(hdr->st.s.ring_id, rid);
	if (!ring_holds_wal(hdr))
	{
		state = claimed_binding(control, &slot);
		if (state != BINDING_VALID)
			return RESTORE_NOTHING;
		ring_id_text(slot.ring_id, bid);
		if (memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0)
		{
			if (strcmp(slot.ring_path, path) == 0)
				ereport(FATAL,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("pmwal ring \"%s\" is not the ring that may hold this cluster's acknowledged WAL", path),
						 errdetail("The cluster did not shut down cleanly; its WAL was made durable in ring %s at this path (generation %llu), but the file there now is ring %s.",
								   bid, (unsigned long long) slot.generation, rid),
						 errhint("Put ring %s back at \"%s\".  %s", bid, path, unbind_hint)));
			require_bound_ring_free(&slot, psprintf("pmwal.path now names \"%s\".", path));
		}
		else if (hdr->generation.v < slot.generation)
			ereport(FATAL,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("pmwal ring \"%s\" is older than this data directory's binding to it", path),
					 errdetail("The cluster did not shut down cleanly.  The ring is at generation %llu, the data directory's binding at %llu: the ring file was replaced by an earlier copy of itself, and the acknowledged WAL it held since is not in it.",
							   (unsigned long long) hdr->generation.v,
							   (unsigned long long) slot.generation),
					 errhint("Put the ring that was at \"%s\" back.  %s", path, unbind_hint)));
		return RESTORE_NOTHING;
	}

	/* the ring holds WAL: whose, and may it be written into pg_wal? */
	if (restored_from_backup())
	{
		XLogRecPtr	backup_start = backup_label_start();

		if (hdr->head.v <= backup_start)
		{
			ereport(LOG,
					(errmsg("pmwal ring \"%s\" holds only WAL older than the base backup this data directory is restored from; not restored", path),
					 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN "; the backup starts at " PMWAL_LSN " (\"%s\").",
							   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
							   LSN_FORMAT_ARGS(backup_start), BACKUP_LABEL_FILE)));
			return RESTORE_DROP;
		}
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" holds WAL, but this data directory is being restored from a base backup; nothing was restored", path),
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN ", and \"%s\" exists.  That WAL may belong to the server the backup was taken from (data directory %s).",
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   BACKUP_LABEL_FILE, owner),
				 errhint("If that server is gone and its archive lacks this WAL, save it with \"pmwal_ctl dump\" into the archive; then \"pmwal_ctl reset --discard-wal\", or give this server another pmwal.path.")));
	}

	state = binding_read(&slot);
	if (state == BINDING_VALID &&
		memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0 &&
		slot.system_identifier == control->system_identifier &&
		ring_owner_valid(&hdr->owner) && owner_is_this_datadir(hdr))
	{
		/* this data directory wrote the ring's WAL, and left the ring since */
		ring_id_text(slot.ring_id, bid);
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" holds WAL this data directory left behind; nothing was restored", path),
				 errdetail("This data directory wrote the ring's WAL (ring %s, generation %llu, from " PMWAL_LSN " to " PMWAL_LSN "), but it has been bound since to ring %s at \"%s\" (generation %llu): the ring's WAL is not the cluster's history any more.",
						   rid, (unsigned long long) hdr->generation.v,
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   bid, slot.ring_path, (unsigned long long) slot.generation),
				 errhint("Set pmwal.path = '%s', the ring this data directory is bound to.  \"pmwal_ctl dump\" saves this ring's WAL; \"pmwal_ctl reset --discard-wal\" empties it.",
						 slot.ring_path)));
	}
	if (state != BINDING_VALID ||
		memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0 ||
		slot.system_identifier != control->system_identifier)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("pmwal ring \"%s\" holds WAL of another data directory; nothing was restored", path),
				 errdetail("The ring (ring %s, generation %llu, bound by data directory %s) holds WAL from " PMWAL_LSN " to " PMWAL_LSN ", but %s.",
						   rid, (unsigned long long) hdr->generation.v, owner,
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   state == BINDING_ABSENT ? "this data directory has no binding file (" BINDING_PATH ")"
						   : state == BINDING_DAMAGED ? "this data directory's binding file is damaged"
						   : psprintf("this data directory is bound to ring %s at \"%s\"",
									  (ring_id_text(slot.ring_id, bid), bid), slot.ring_path)),
				 errhint("Give this server its own ring in pmwal.path; start the data directory the ring belongs to on it.  \"pmwal_ctl inspect\" shows the ring.")));
	if (hdr->generation.v > slot.generation + 1)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("pmwal ring \"%s\" holds WAL of another copy of this data directory; nothing was restored", path),
				 errdetail("The ring is at generation %llu, this data directory's binding at %llu: the ring was bound since by a copy of this data directory (%s), whose WAL it holds from " PMWAL_LSN " to " PMWAL_LSN ".",
						   (unsigned long long) hdr->generation.v,
						   (unsigned long long) slot.generation, owner,
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v)),
				 errhint("Start that copy on this ring so that it restores its WAL; give this server its own ring.")));
	if (hdr->generation.v < slot.generation)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" is older than this data directory's binding to it; nothing was restored", path),
				 errdetail("The ring is at generation %llu, the data directory's binding at %llu: the ring file was replaced by an earlier copy of itself (WAL " PMWAL_LSN " to " PMWAL_LSN "), and the acknowledged WAL it held since is not in it.",
						   (unsigned long long) hdr->generation.v,
						   (unsigned long long) slot.generation,
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v)),
				 errhint("Put the ring that was at \"%s\" back.  \"pmwal_ctl reset --discard-wal\" starts without it.", path)));
	if (!owner_is_this_datadir(hdr))
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("pmwal ring \"%s\" holds WAL of the server in data directory %s, not of this one; nothing was restored", path, owner),
				 errdetail("The ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN " at generation %llu, written by the server of %s; this data directory (%s) is bound to the ring at that generation too: it is a file copy of that data directory taken while its server ran.",
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   (unsigned long long) hdr->generation.v, owner, DataDir),
				 errhint("Start the server of %s on this ring, so that it restores its WAL; give this server its own ring.  If this data directory was moved here from %s, move it back for one start.",
						 owner, owner)));
	if (pmwal_cluster_shut_down(control))
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" holds WAL, but the cluster was shut down cleanly since; nothing was restored", path),
				 errdetail("The ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN ", and pg_control says the cluster shut down cleanly at " PMWAL_LSN ".  A clean shutdown with pmwal leaves the ring empty: since the ring was written, the cluster ran without it (pmwal.path changed, or pmwal not loaded), or pg_resetwal reset its WAL; the ring's WAL is not this cluster's history any more.",
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   LSN_FORMAT_ARGS(control->checkPoint)),
				 errhint("\"pmwal_ctl dump\" saves the ring's WAL; \"pmwal_ctl reset --discard-wal\" empties it.")));
	/*
	 * In recovery pmwal copies nothing, but a recovery's end is not one
	 * store: StartupXLOG sets SharedRecoveryState to DONE -- from then on
	 * backends write WAL and pmwal answers their syncs from the ring -- and
	 * only then writes DB_IN_PRODUCTION into pg_control.  A crash between
	 * the two leaves acknowledged WAL in the ring and pg_control in crash
	 * or archive recovery; PostgreSQL's crash recovery starts from that
	 * state, and the ring's WAL is proven like any other (restore.c).
	 */
	if (control->state != DB_IN_PRODUCTION && control->state != DB_SHUTDOWNING &&
		control->state != DB_IN_CRASH_RECOVERY && control->state != DB_IN_ARCHIVE_RECOVERY)
		ereport(FATAL,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pmwal ring \"%s\" holds WAL, but the cluster never finished starting; nothing was restored", path),
				 errdetail("The ring holds WAL from " PMWAL_LSN " to " PMWAL_LSN ", but pg_control's state is %d: pmwal copies WAL only once a start or a recovery has ended.",
						   LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
						   (int) control->state),
				 errhint("\"pmwal_ctl dump\" saves the ring's WAL; \"pmwal_ctl reset --discard-wal\" empties it.")));
	return RESTORE_WRITE;
}

/*
 * Bind the (now empty) ring to this data directory at a new generation:
 * two above what either side recorded, ring first.
 */
void
pmwal_binding_take(ControlFileData *control)
{
	RingHeader *hdr = pmwal_ring->hdr;
	BindingSlot slot;
	uint64		generation = hdr->generation.v;
	char		id[2 * RING_ID_LEN + 1];

	Assert(!ring_holds_wal(hdr));
	if (!restored_from_backup() && binding_read(&slot) == BINDING_VALID &&
		memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) == 0)
		generation = Max(generation, slot.generation);
	generation += 2;
	ring_set_word_or_die(&hdr->generation.v, generation);
	ring_write_owner(generation);
	PMWAL_PAUSE_POINT("bind_after_ring");
	binding_write(control->system_identifier, generation, FATAL);
	ring_id_text(hdr->st.s.ring_id, id);
	ereport(LOG,
			(errmsg("pmwal bound ring \"%s\" (ring %s) to this data directory at generation %llu",
					pmwal_ring->path, id, (unsigned long long) generation)));
}

/*
 * The flusher, after a pass: one generation up, ring first, then the
 * binding file.  If the binding file could not be written, the ring stays
 * one ahead of it (which a start accepts) until it can be.
 */
void
pmwal_generation_bump(void)
{
	RingHeader *hdr = pmwal_ring->hdr;
	uint64		generation = hdr->generation.v;
	BindingSlot slot;

	if (written_generation == 0)
	{
		/* a flusher that just started: what does the file hold? */
		if (binding_read(&slot) != BINDING_VALID ||
			memcmp(slot.ring_id, hdr->st.s.ring_id, RING_ID_LEN) != 0)
			return;				/* not bound (a base backup in recovery) */
		written_generation = slot.generation;
	}
	if (generation > written_generation)
	{
		/* the last write failed: catch up first */
		(void) binding_write(hdr->st.s.system_identifier, generation, WARNING);
		return;
	}
	generation++;
	if (!ring_set_word(&hdr->generation.v, generation))
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not persist pmwal ring \"%s\": %m", pmwal_ring->path)));
	PMWAL_PAUSE_POINT("generation_after_ring");
	(void) binding_write(hdr->st.s.system_identifier, generation, WARNING);
}

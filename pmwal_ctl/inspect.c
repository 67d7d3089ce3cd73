/*-------------------------------------------------------------------------
 *
 * inspect.c
 *		pmwal_ctl inspect: the ring's header, positions and owner, and with
 *		-D the data directory's binding and what a start would do.
 *
 * The only command that also reads a ring a server is using (it says so:
 * the positions may change while it looks).  It shows what a header of
 * this format records even when the header is not usable, since that is
 * when an operator needs it, and it predicts a start's verdict with the
 * server's own rules (binding.c, restore.c) rather than a rule of its own.
 * Of a ring whose positions are inconsistent it says which check failed
 * and which pages from the tail on still read as WAL: a start refuses such
 * a ring, but it may hold the newest acknowledged commits.
 *
 * IDENTIFICATION
 *		pmwal_ctl/inspect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <time.h>

#include "pmwal_ctl.h"

static void
format_time(int64 t, char *buf, size_t len)
{
	time_t		tt = (time_t) t;
	struct tm	tm;

	if (localtime_r(&tt, &tm) == NULL ||
		strftime(buf, len, "%Y-%m-%d %H:%M:%S %Z", &tm) == 0)
		snprintf(buf, len, "%lld (Unix time)", (long long) t);
}

/* The static fields and dynamic words, as the header records them. */
static void
print_fields(const Ring *ring, RingCheck verdict, ControlFileData *control)
{
	const RingHeader *hdr = ring->hdr;
	const RingStatic *st = &hdr->st.s;
	const RingOwner *owner = &hdr->owner;
	char		id[2 * RING_ID_LEN + 1];

	ring_id_text(st->ring_id, id);
	printf(LABEL "%u\n", "format version:", st->format_version);
	printf(LABEL "%s\n", "ring id:", id);
	printf(LABEL UINT64_FORMAT "%s\n", "system identifier:", st->system_identifier,
		   control && verdict == RING_OK ? " (matches the cluster)" : "");
	printf(LABEL "%u\n", "WAL segment size:", st->wal_segment_size);
	printf(LABEL "%u\n", "WAL block size:", st->wal_block_size);
	printf(LABEL UINT64_FORMAT " bytes (" UINT64_FORMAT " MB)\n", "capacity:",
		   st->capacity, st->capacity / RING_MB);
	printf(LABEL "%s\n", "state:", ring_state_name(hdr->state.v));
	printf(LABEL UINT64_FORMAT "\n", "timeline:", (uint64) hdr->timeline.v);
	printf(LABEL UINT64_FORMAT "\n", "generation:", (uint64) hdr->generation.v);
	printf(LABEL PMWAL_LSN "\n", "tail:", LSN_FORMAT_ARGS(hdr->tail.v));
	printf(LABEL PMWAL_LSN "\n", "head:", LSN_FORMAT_ARGS(hdr->head.v));
	if (ring_owner_valid(owner))
	{
		char		when[64];

		format_time(owner->bound_at, when, sizeof(when));
		printf(LABEL "data directory \"%.*s\", bound at generation " UINT64_FORMAT " on %s\n",
			   "owner:", (int) strnlen(owner->datadir, RING_OWNER_PATH_LEN), owner->datadir,
			   owner->generation, when);
	}
	else
		printf(LABEL "none recorded (no server has bound the ring since it was initialised)\n",
			   "owner:");
}

/* What a start of the cluster in "datadir" does with this ring's WAL (binding.c, restore.c). */
static void
print_restore(const RingHeader *hdr, ControlFileData *control, const char *datadir,
			  BindState bstate, const BindingSlot *slot)
{
	const char *label = "restore at start:";
	TimeLineID	tli = (TimeLineID) hdr->timeline.v;
	TimeLineID	ckpt_tli = control->checkPointCopy.ThisTimeLineID;
	XLogRecPtr	backup_start;
	char	   *mismatch;

	if (backup_label_start(datadir, &backup_start))
	{
		if (hdr->head.v <= backup_start)
			printf(LABEL "no: all of it precedes the start " PMWAL_LSN " of the base backup this data directory is restored from (backup_label); a start empties the ring\n",
				   label, LSN_FORMAT_ARGS(backup_start));
		else
			printf(LABEL "REFUSED: the data directory is being restored from a base backup (backup_label, start " PMWAL_LSN "), and the ring's WAL may be the WAL of the server the backup was taken from\n",
				   label, LSN_FORMAT_ARGS(backup_start));
		return;
	}
	if (bstate != BIND_VALID)
	{
		printf(LABEL "REFUSED: the ring holds WAL of another data directory: this one's binding is %s\n",
			   label, bstate == BIND_ABSENT ? "absent" :
			   bstate == BIND_DAMAGED ? "damaged" : "not readable");
		return;
	}
	if (slot->system_identifier != control->system_identifier)
	{
		printf(LABEL "REFUSED: the binding file is of another cluster (system identifier " UINT64_FORMAT ")\n",
			   label, slot->system_identifier);
		return;
	}
	if ((mismatch = binding_mismatch(hdr, slot)) != NULL)
	{
		printf(LABEL "REFUSED: %s\n", label, mismatch);
		return;
	}
	if (shut_down_cleanly(control))
	{
		printf(LABEL "REFUSED: pg_control says the cluster shut down cleanly at " PMWAL_LSN " since the ring was written; its WAL is not this cluster's history any more\n",
			   label, LSN_FORMAT_ARGS(control->checkPoint));
		return;
	}
	if (control->state != DB_IN_PRODUCTION && control->state != DB_SHUTDOWNING)
	{
		printf(LABEL "REFUSED: pg_control's state (%d) says the cluster was in recovery, when pmwal copies nothing\n",
			   label, (int) control->state);
		return;
	}
	if (tli > ckpt_tli)
		printf(LABEL "on timeline %u if its history file in pg_wal shows it descends from the checkpoint's timeline %u before the ring starts (a promotion since the last checkpoint); REFUSED otherwise\n",
			   label, tli, ckpt_tli);
	else if (tli < ckpt_tli)
		printf(LABEL "REFUSED unless the cluster's history (timeline %u) left timeline %u after the ring's head (then the ring is emptied)\n",
			   label, ckpt_tli, tli);
	else if (RING_PAGE(control->checkPoint) > hdr->tail.v || control->checkPoint >= hdr->head.v)
		printf(LABEL "REFUSED: the ring (" PMWAL_LSN " to " PMWAL_LSN ") does not cover the cluster's last checkpoint at " PMWAL_LSN ": it is not the ring the cluster wrote last\n",
			   label, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPoint));
	else
		printf(LABEL "yes: " PMWAL_LSN " to " PMWAL_LSN ", once it reads as the continuation of pg_wal from the checkpoint at " PMWAL_LSN "\n",
			   label, LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
			   LSN_FORMAT_ARGS(control->checkPoint));
}

/*
 * A ring whose positions are inconsistent (RING_BAD_RANGE): a start refuses
 * it, but its data area may still hold the cluster's newest acknowledged
 * commits.  Says which pages from the tail on still read as its WAL, which
 * dump writes out; true if there are any.
 */
static bool
print_pages(const Ring *ring)
{
	const RingHeader *hdr = ring->hdr;
	PageRun		run;

	if (!salvage_pages(ring, &run))
	{
		printf(LABEL "none: %s, so nothing from the tail on reads as this ring's WAL\n",
			   "WAL pages:", run.stop);
		return false;
	}
	printf(LABEL UINT64_FORMAT " pages from " PMWAL_LSN " to " PMWAL_LSN " read as this ring's WAL (from the page of the tail on, valid page headers that continue one another), %s; \"pmwal_ctl dump\" writes them out\n",
		   "WAL pages:", (run.to - run.from) / XLOG_BLCKSZ,
		   LSN_FORMAT_ARGS(run.from), LSN_FORMAT_ARGS(run.to),
		   hdr->head.v > run.to ? "short of the head" :
		   hdr->head.v > run.from ? "the head among them" : "past the head");
	return true;
}

int
cmd_inspect(Ring *ring, ControlFileData *control, const char *datadir)
{
	RingHeader *hdr = ring->hdr;
	RingCheck	verdict;
	BindingSlot slot;
	BindState	bstate = BIND_ABSENT;
	char		bpath[MAXPGPATH];
	char		why[MAXPGPATH + 128];
	bool		has_pages = false;

	printf(LABEL "%s\n", "ring:", ring->path);
	printf(LABEL "%s\n", "lock:", ring->locked ? "free (no server uses the ring)" :
		   "held (a server uses the ring; positions may change while you look)");
	verdict = check_header(ring, control);
	/* a header of this format: show what it records, usable or not */
	if (ring->len >= RING_HEADER_SIZE &&
		memcmp(hdr->st.s.magic, RING_MAGIC, RING_MAGIC_LEN) == 0 &&
		hdr->st.s.format_version == RING_FORMAT_VERSION)
		print_fields(ring, verdict, control);
	if (verdict == RING_OK)
	{
		if (ring_holds_wal(hdr))
			printf(LABEL UINT64_FORMAT " bytes of WAL (" UINT64_FORMAT " pages) of timeline " UINT64_FORMAT "\n",
				   "holds:", hdr->head.v - hdr->tail.v,
				   (hdr->head.v - hdr->tail.v) / XLOG_BLCKSZ, (uint64) hdr->timeline.v);
		else
			printf(LABEL "no WAL (empty)\n", "holds:");
	}
	else if (verdict == RING_BAD_RANGE)
		has_pages = print_pages(ring);

	if (datadir != NULL)
	{
		char		id[2 * RING_ID_LEN + 1];

		bstate = read_binding(datadir, &slot, bpath, why, sizeof(why));
		if (bstate == BIND_ABSENT)
			printf(LABEL "none: \"%s\" is absent; the data directory is not bound to a ring\n",
				   "binding:", bpath);
		else if (bstate != BIND_VALID)
			printf(LABEL "%s: \"%s\": %s\n", "binding:",
				   bstate == BIND_DAMAGED ? "DAMAGED" : "NOT READABLE", bpath, why);
		else
		{
			char	   *mismatch = NULL;

			ring_id_text(slot.ring_id, id);
			printf(LABEL "ring %s at \"%s\", generation " UINT64_FORMAT "\n",
				   "binding:", id, slot.ring_path, slot.generation);
			if (verdict == RING_OK && (mismatch = binding_mismatch(hdr, &slot)) == NULL)
				printf(LABEL "yes: the same ring, at the binding's generation%s\n",
					   "binding matches:", hdr->generation.v == slot.generation ? "" : " plus one");
			else if (verdict == RING_OK)
				printf(LABEL "NO: %s\n", "binding matches:", mismatch);
			else if (verdict == RING_BAD_RANGE && (mismatch = binding_mismatch(hdr, &slot)) == NULL)
				printf(LABEL "yes: the same ring, at the binding's generation%s; but a start refuses its positions\n",
					   "binding matches:", hdr->generation.v == slot.generation ? "" : " plus one");
			else if (verdict == RING_BAD_RANGE)
				printf(LABEL "NO: %s\n", "binding matches:", mismatch);
			else
				printf(LABEL "NO: the ring's header is not usable\n", "binding matches:");
		}
	}

	if (verdict == RING_BAD_RANGE)
	{
		printf(LABEL "REFUSED: a start refuses the ring for its inconsistent positions\n",
			   "restore at start:");
		if (has_pages)
			printf(LABEL "the ring may hold acknowledged WAL: save it with \"pmwal_ctl dump\" before anything else, and neither reset nor unbind it until then (docs/failures.md)\n",
				   "what to do:");
		else
			printf(LABEL "nothing from the tail on reads as WAL, but the ring may be damaged rather than empty: keep a copy of the file before resetting or unbinding it (docs/failures.md)\n",
				   "what to do:");
	}
	if (verdict != RING_OK)
		return ring_usable(verdict) ? EXIT_OK : EXIT_UNUSABLE;
	if (!ring_holds_wal(hdr))
		printf(LABEL "nothing to restore\n", "restore at start:");
	else if (control == NULL)
		printf(LABEL "yes, if the data directory bound to it did not shut down cleanly since and still names it at generation " UINT64_FORMAT " or one less (give -D to check)\n",
			   "restore at start:", (uint64) hdr->generation.v);
	else
		print_restore(hdr, control, datadir, bstate, &slot);
	return EXIT_OK;
}

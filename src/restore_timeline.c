/*-------------------------------------------------------------------------
 *
 * restore_timeline.c
 *		Timelines for the restore: on which timeline the ring's WAL goes
 *		back into pg_wal, and which segment file holds a given LSN.
 *
 * pg_control names the timeline of the last checkpoint.  Right after a
 * promotion it still names the old one: the standby's last restartpoint
 * was on it, and the first checkpoint on the new timeline takes a while.
 * The ring is anchored on the new timeline at the first write after the
 * promotion, so a crash in between leaves a ring whose WAL belongs to a
 * newer timeline than pg_control's.  PostgreSQL's crash recovery follows the promotion there
 * (pg_control's minRecoveryPointTLI names it, and its history file is in
 * pg_wal), so the ring's WAL is restored into that timeline's segment
 * files when the new timeline's history says it descends from the
 * checkpoint's timeline before the checkpoint's end and before the ring
 * starts.  The other cases, refused with nothing written:
 *
 *	- a newer timeline that recovery would not follow, or whose history
 *	  does not contain the checkpoint's timeline at that point;
 *	- an older timeline whose WAL goes past the point where the cluster's
 *	  history left it (after pg_rewind, or a failover): those commits were
 *	  acknowledged on a history this cluster no longer has.
 *
 * An older timeline whose WAL all lies before that point is only older
 * than the checkpoint: the caller empties the ring.
 *
 * Reading pg_wal follows the history as PostgreSQL's XLogFileReadAnyTLI
 * does: the newest timeline whose segment exists, among those that began
 * at or before the segment.
 *
 * IDENTIFICATION
 *		restore_timeline.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_control.h"

#include "pmwal.h"

/* The history the restore reads pg_wal along, newest timeline first. */
static List *restore_history = NIL;

static const char *timeline_hint =
"\"pmwal_ctl dump\" saves the ring's WAL, \"pmwal_ctl reset --discard-wal\" lets the server start without it.";

static TimeLineHistoryEntry *
history_entry(List *history, TimeLineID tli)
{
	ListCell   *lc;

	foreach(lc, history)
	{
		TimeLineHistoryEntry *e = (TimeLineHistoryEntry *) lfirst(lc);

		if (e->tli == tli)
			return e;
	}
	return NULL;
}

/*
 * Start from the history PostgreSQL's crash recovery reads along: that of
 * the newer of the checkpoint's timeline and the minimum recovery point's.
 */
void
pmwal_restore_history_init(ControlFileData *control)
{
	restore_history = readTimeLineHistory(Max(control->minRecoveryPointTLI,
											  control->checkPointCopy.ThisTimeLineID));
}

/*
 * Decide on which timeline the ring's WAL, of timeline ring_tli from tail
 * to head, is restored; FATAL where it must not be.  Returns 0 when the
 * ring holds only WAL of an older timeline that the cluster's history
 * already contains up to head (nothing to restore).  Also sets the
 * history that pmwal_open_segment follows.
 */
TimeLineID
pmwal_restore_timeline(ControlFileData *control, TimeLineID ring_tli,
					   XLogRecPtr tail, XLogRecPtr head)
{
	TimeLineID	ckpt_tli = control->checkPointCopy.ThisTimeLineID;
	TimeLineID	target;
	TimeLineHistoryEntry *from;
	TimeLineHistoryEntry *ring;
	struct stat st;

	if (ring_tli == ckpt_tli)
		return ring_tli;

	if (ring_tli < ckpt_tli)
	{
		/* the ring is of a timeline this cluster's history left behind */
		ring = history_entry(restore_history, ring_tli);
		if (ring != NULL && ring->end != InvalidXLogRecPtr && head <= ring->end &&
			head <= control->checkPointCopy.redo)
			return 0;
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds WAL of timeline %u that is not part of this cluster's history; nothing was restored",
						pmwal_ring->path, ring_tli),
				 ring != NULL && ring->end != InvalidXLogRecPtr ?
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN ", but the cluster (timeline %u) left timeline %u at " PMWAL_LSN ".  Commits acknowledged after that point were made on a history that was abandoned (pg_rewind or a failover).",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), ckpt_tli,
						   ring_tli, LSN_FORMAT_ARGS(ring->end)) :
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN "; the history of the cluster's timeline %u does not contain timeline %u.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), ckpt_tli, ring_tli),
				 errhint("%s", timeline_hint)));
	}

	/*
	 * A newer timeline: the one crash recovery targets (as PostgreSQL
	 * computes it), or archive recovery follows the newest timeline.
	 */
	target = Max(control->minRecoveryPointTLI, ckpt_tli);
	if (target != ring_tli &&
		stat(RECOVERY_SIGNAL_FILE, &st) != 0 && stat(STANDBY_SIGNAL_FILE, &st) != 0)
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds WAL of timeline %u, but recovery would replay timeline %u; nothing was restored",
						pmwal_ring->path, ring_tli, target),
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN ".  pg_control names timeline %u for its last checkpoint and %u for its minimum recovery point.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
						   ckpt_tli, control->minRecoveryPointTLI),
				 errhint("%s", timeline_hint)));

	restore_history = readTimeLineHistory(ring_tli);
	from = history_entry(restore_history, ckpt_tli);
	ring = history_entry(restore_history, ring_tli);
	/*
	 * The ring is anchored at the first write after the promotion, which
	 * rewrites from its start the page in which the new timeline begins
	 * (XLogWrite writes whole pages): the ring may begin in that page,
	 * before the switch point; its bytes there are the old timeline's, as
	 * the new timeline's first segment holds them.
	 */
	if (from == NULL || from->end == InvalidXLogRecPtr ||
		control->checkPoint >= from->end || tail < RING_PAGE(ring->begin))
		ereport(FATAL,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("pmwal ring \"%s\" holds WAL of timeline %u, which does not descend from the cluster's timeline %u before the ring starts; nothing was restored",
						pmwal_ring->path, ring_tli, ckpt_tli),
				 from == NULL || from->end == InvalidXLogRecPtr ?
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN "; the history file of timeline %u in pg_wal does not name timeline %u.",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head), ring_tli, ckpt_tli) :
				 errdetail("The ring holds " PMWAL_LSN " to " PMWAL_LSN "; timeline %u began at " PMWAL_LSN ", and timeline %u, of the checkpoint at " PMWAL_LSN ", ended at " PMWAL_LSN ".",
						   LSN_FORMAT_ARGS(tail), LSN_FORMAT_ARGS(head),
						   ring_tli, LSN_FORMAT_ARGS(ring->begin), ckpt_tli,
						   LSN_FORMAT_ARGS(control->checkPoint), LSN_FORMAT_ARGS(from->end)),
				 errhint("%s", timeline_hint)));
	ereport(LOG,
			(errmsg("pmwal ring \"%s\" holds WAL of timeline %u, which descends from the checkpoint's timeline %u at " PMWAL_LSN ": restoring it on timeline %u",
					pmwal_ring->path, ring_tli, ckpt_tli, LSN_FORMAT_ARGS(from->end), ring_tli)));
	return ring_tli;
}

/*
 * Open the segment file that holds segno along the restore's history:
 * the newest timeline that began at or before it and whose file exists.
 * Returns the descriptor (or -1) and the path tried last in path.
 */
int
pmwal_open_segment(XLogSegNo segno, char *path)
{
	ListCell   *lc;

	foreach(lc, restore_history)
	{
		TimeLineHistoryEntry *e = (TimeLineHistoryEntry *) lfirst(lc);
		XLogSegNo	beginseg = 0;
		int			fd;

		if (e->begin != InvalidXLogRecPtr)
			XLByteToSeg(e->begin, beginseg, wal_segment_size);
		if (beginseg > segno)
			continue;
		XLogFilePath(path, e->tli, segno, wal_segment_size);
		fd = open(path, O_RDONLY | PG_BINARY | O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT)
			return fd;
	}
	return -1;
}

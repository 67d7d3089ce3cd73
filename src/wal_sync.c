/*-------------------------------------------------------------------------
 *
 * wal_sync.c
 *		Real syncs of pg_wal: the segment files pmwal answered syncs for
 *		from the ring, and pg_wal/ itself.
 *
 * The flusher syncs the WAL behind the ring in large batches; a writer
 * that finds the ring full, a write the ring cannot take, and a pg_control
 * write sync it themselves (wal_ring.c).  Each call syncs every segment
 * between durable_lsn and the given end, on the ring's timeline, and
 * pg_wal/ once per segment, then moves durable_lsn there.
 *
 * Every sync here is the system call itself, made through pmwal's own
 * linkage (interpose.c redirects only the server binary's calls), never
 * pg_fsync() and friends: those do nothing under fsync = off, and pmwal
 * empties the ring or moves its tail on the strength of these syncs.
 * Failing to sync WAL is a PANIC, as it is in PostgreSQL.
 *
 * IDENTIFICATION
 *		wal_sync.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/wait_event.h"

#include "pmwal.h"

/*
 * fsync (or fdatasync, for a file) "fd" for real, whatever the fsync
 * setting says; failure is reported at "elevel" (and false returned, when
 * that is below ERROR).
 */
bool
pmwal_fsync_fd(int fd, const char *path, int elevel)
{
	int			rc;

	pgstat_report_wait_start(WAIT_EVENT_WAL_SYNC);
	rc = fdatasync(fd);
	pgstat_report_wait_end();
	if (rc != 0)
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", path)));
	return rc == 0;
}

/*
 * pwrite all of "buf" at "off"; a failure is reported at "elevel" (and
 * false returned, when that is below ERROR).
 */
bool
pmwal_write_fully(int fd, const char *buf, size_t len, off_t off,
				  const char *path, int elevel)
{
	while (len > 0)
	{
		ssize_t		n = pg_pwrite(fd, buf, len, off);

		if (n <= 0)
		{
			if (n == 0)
				errno = ENOSPC;
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not write to file \"%s\": %m", path)));
			return false;
		}
		buf += n;
		len -= n;
		off += n;
	}
	return true;
}

/* Like pmwal_fsync_fd, by path; "isdir" for a directory. */
bool
pmwal_fsync_path(const char *path, bool isdir, int elevel)
{
	int			fd = open(path, (isdir ? O_RDONLY : O_RDWR) | PG_BINARY | O_CLOEXEC);
	bool		ok;

	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
		return false;
	}
	if (isdir)
	{
		ok = fsync(fd) == 0;
		if (!ok)
			ereport(elevel,
					(errcode_for_file_access(),
					 errmsg("could not fsync file \"%s\": %m", path)));
	}
	else
		ok = pmwal_fsync_fd(fd, path, elevel);
	close(fd);
	return ok;
}

/* fdatasync one segment; a segment a checkpoint removed is skipped. */
static void
sync_segment(XLogSegNo segno, TimeLineID tli)
{
	char		path[MAXPGPATH];
	int			fd;

	XLogFilePath(path, tli, segno, wal_segment_size);
	fd = open(path, O_RDWR | PG_BINARY | O_CLOEXEC);
	if (fd < 0)
	{
		if (errno == ENOENT && segno <= XLogGetLastRemovedSegno())
			return;
		ereport(PANIC,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	pmwal_fsync_fd(fd, path, PANIC);
	close(fd);
	pmwal_count(CTR_SEGMENTS_SYNCED, 1);
}

/*
 * With sync_lock held: sync every segment holding WAL between durable_lsn
 * and "upto", and pg_wal/ when one of them has not been covered by a
 * directory sync yet; then move durable_lsn to "upto".
 */
void
pmwal_sync_range(XLogRecPtr upto)
{
	XLogRecPtr	durable = pg_atomic_read_u64(&pmwal_shared->durable_lsn);
	uint64		writes = pg_atomic_read_u64(&pmwal_shared->writes_done);
	TimeLineID	tli = pmwal_shared->tli;
	XLogSegNo	first;
	XLogSegNo	last;

	Assert(LWLockHeldByMe(pmwal_shared->sync_lock));
	if (upto <= durable && writes == pmwal_shared->synced_writes)
		return;
	upto = Max(upto, durable);
	/*
	 * PostgreSQL rewrites its last, partial page: the one before durable_lsn
	 * -- unless durable_lsn is where this timeline's WAL began: the byte
	 * before it is of another timeline (a promotion at a segment boundary
	 * has no segment of the new timeline before it).
	 */
	XLByteToSeg(durable > pmwal_shared->tli_start ? durable - 1 : durable, first,
				wal_segment_size);
	XLByteToSeg(upto - 1, last, wal_segment_size);
	for (XLogSegNo segno = first; segno <= last; segno++)
		sync_segment(segno, tli);
	if (last > pmwal_shared->dir_synced_segno)
	{
		pmwal_fsync_path(XLOGDIR, true, PANIC);
		pmwal_shared->dir_synced_segno = last;
		pmwal_count(CTR_DIR_SYNCS, 1);
	}
	pg_atomic_write_u64(&pmwal_shared->durable_lsn, upto);
	pmwal_shared->synced_writes = writes;
	pmwal_count(CTR_SYNC_ROUNDS, 1);
}

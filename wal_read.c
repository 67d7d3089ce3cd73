/*-------------------------------------------------------------------------
 *
 * wal_read.c
 *		Reading WAL back from pg_wal's segment files for the ring copy.
 *
 * A committer copies the WAL it just wrote from the page cache into the
 * ring.  It reads through a read-only mapping of the segment, kept from one
 * commit to the next: no system call per commit.  A segment that a
 * completed checkpoint has recycled is never read: XLogGetLastRemovedSegno()
 * is checked before and after the copy.
 *
 * A mapping keeps its file's disk space even after a checkpoint removes the
 * segment, so it must not outlive its use: one second after a process last
 * copied, a timeout unmaps it (an idle backend runs no code that could).
 * The handler runs in signal context and unmaps only when no copy is
 * reading through the mapping at that moment; a copy in progress keeps it
 * until the next time.
 *
 * IDENTIFICATION
 *		wal_read.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"
#include "utils/timeout.h"

#include "pmwal.h"

/* How long an unused mapping lives. */
#define SEGMENT_IDLE_MS		1000

/* This process's mapping of the segment it last read from. */
static char *volatile seg_map = NULL;
static XLogSegNo seg_segno;
static TimeLineID seg_tli;

/* A read is using seg_map: the timeout must leave it alone. */
static volatile sig_atomic_t seg_in_use = false;
static TimeoutId seg_timeout = MAX_TIMEOUTS;

void
wal_read_close(void)
{
	char	   *map = seg_map;

	seg_map = NULL;
	if (map != NULL)
		munmap(map, wal_segment_size);
}

/* Timeout handler, in signal context: see the file header. */
static void
segment_idle_timeout(void)
{
	if (!seg_in_use)
		wal_read_close();
}

/* Map segment "segno" of timeline "tli"; false if that is impossible. */
static bool
map_segment(XLogSegNo segno, TimeLineID tli)
{
	char		path[MAXPGPATH];
	struct stat st;
	int			fd;
	void	   *map;

	wal_read_close();
	XLogFilePath(path, tli, segno, wal_segment_size);
	fd = open(path, O_RDONLY | PG_BINARY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* a short file would turn a read past its end into SIGBUS */
	if (fstat(fd, &st) != 0 || st.st_size < wal_segment_size)
	{
		close(fd);
		return false;
	}
	map = mmap(NULL, wal_segment_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return false;
	seg_segno = segno;
	seg_tli = tli;
	seg_map = map;
	return true;
}

/* After a read: unmap the segment once it has not been used for a while. */
static void
arm_idle_timeout(void)
{
	if (seg_map == NULL || !IsUnderPostmaster)
		return;
	if (seg_timeout == MAX_TIMEOUTS)
		seg_timeout = RegisterTimeout(USER_TIMEOUT, segment_idle_timeout);
	if (!get_timeout_active(seg_timeout))
		enable_timeout_after(seg_timeout, SEGMENT_IDLE_MS);
}

/*
 * Copy "len" bytes of WAL starting at "start" from pg_wal to "dst" in the
 * ring, without waiting for them to be persisted.  Returns RING_APPEND_OK
 * or a fallback reason.
 */
int
wal_read(char *dst, XLogRecPtr start, Size len, TimeLineID tli)
{
	XLogSegNo	first;
	XLogSegNo	last;
	int			rc = RING_APPEND_OK;

	XLByteToSeg(start, first, wal_segment_size);
	XLByteToSeg(start + len - 1, last, wal_segment_size);
	if (first <= XLogGetLastRemovedSegno())
		return FALLBACK_RECYCLED;

	seg_in_use = true;
	pg_compiler_barrier();
	while (len > 0)
	{
		XLogSegNo	segno;
		uint32		off = XLogSegmentOffset(start, wal_segment_size);
		Size		n = Min(len, wal_segment_size - off);

		XLByteToSeg(start, segno, wal_segment_size);
		if ((seg_map == NULL || seg_segno != segno || seg_tli != tli) &&
			!map_segment(segno, tli))
		{
			rc = FALLBACK_READ;
			break;
		}
		ring_write(dst, seg_map + off, n);
		dst += n;
		start += n;
		len -= n;
	}
	pg_compiler_barrier();
	seg_in_use = false;
	arm_idle_timeout();

	/* A checkpoint may have recycled the segment while we copied it. */
	if (rc == RING_APPEND_OK && last <= XLogGetLastRemovedSegno())
		return FALLBACK_RECYCLED;
	return rc;
}

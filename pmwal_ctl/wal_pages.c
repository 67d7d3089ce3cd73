/*-------------------------------------------------------------------------
 *
 * wal_pages.c
 *		The WAL pages a ring holds: where each lives, the checks of their
 *		page headers, and where records begin.
 *
 * The ring (format 2, ring_format.h) holds WAL iff its state is IN_USE and
 * tail < head; it then holds the whole pages [tail, head) at data offset
 * lsn % capacity, the newest version of each that the server wrote.  The
 * page headers are checked against their addresses as the XLogReader (and
 * so the restore) checks them, without pg_waldump, so that verify and dump
 * can say what is wrong even where no pg_waldump is installed.
 *
 * A ring whose positions are inconsistent (a start refuses it) may still
 * hold the cluster's newest acknowledged commits: the pages from its tail
 * on that read as its WAL are found by these same checks (salvage_pages),
 * never by trusting the positions.
 *
 * IDENTIFICATION
 *		pmwal_ctl/wal_pages.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include "pmwal_ctl.h"

/* The ring's page that holds WAL page "page" (in [tail, head)). */
XLogPageHeader
ring_page(const Ring *ring, XLogRecPtr page)
{
	return (XLogPageHeader) (ring->data + RING_OFFSET(ring->hdr->st.s.capacity, page));
}

/*
 * Check the page header of every page in [from, to) against its address
 * (and what a chain of continuation pages must say), as the XLogReader
 * does, for WAL of timeline "tli" or an earlier one, and find the first
 * record that starts at or after "from" ("to" if none does: the pages hold
 * only the middle of one record).  Returns NULL, or what is wrong, with
 * *bad the page it is wrong at.  The ring's static header checked.
 */
static char *
check_page_run(const Ring *ring, XLogRecPtr from, XLogRecPtr to, TimeLineID tli,
			   XLogRecPtr *first, XLogRecPtr *bad)
{
	const RingHeader *hdr = ring->hdr;
	uint32		segsize = hdr->st.s.wal_segment_size;
	uint32		cont = 0;		/* continuation data the next page must begin with */

	*first = InvalidXLogRecPtr;
	for (XLogRecPtr p = from; p < to; p += XLOG_BLCKSZ)
	{
		XLogPageHeader ph = ring_page(ring, p);
		bool		is_long = p % segsize == 0;
		uint32		hs = is_long ? SizeOfXLogLongPHD : SizeOfXLogShortPHD;
		uint32		space = XLOG_BLCKSZ - hs;

		*bad = p;
		if (ph->xlp_magic != XLOG_PAGE_MAGIC)
			return psprintf("the ring's page at " PMWAL_LSN " has no valid page header (magic %04X, not %04X)",
							LSN_FORMAT_ARGS(p), ph->xlp_magic, XLOG_PAGE_MAGIC);
		if (ph->xlp_pageaddr != p)
			return psprintf("the ring's page at " PMWAL_LSN " has the page header of " PMWAL_LSN,
							LSN_FORMAT_ARGS(p), LSN_FORMAT_ARGS(ph->xlp_pageaddr));
		if ((ph->xlp_info & ~XLP_ALL_FLAGS) != 0 ||
			((ph->xlp_info & XLP_LONG_HEADER) != 0) != is_long)
			return psprintf("the ring's page at " PMWAL_LSN " has invalid info bits %04X in its page header",
							LSN_FORMAT_ARGS(p), ph->xlp_info);
		if (ph->xlp_tli == 0 || ph->xlp_tli > tli)
			return psprintf("the ring's page at " PMWAL_LSN " is of timeline %u, the ring's is %u",
							LSN_FORMAT_ARGS(p), ph->xlp_tli, tli);
		if (is_long)
		{
			XLogLongPageHeader lh = (XLogLongPageHeader) ph;

			if (lh->xlp_sysid != hdr->st.s.system_identifier ||
				lh->xlp_seg_size != segsize || lh->xlp_xlog_blcksz != XLOG_BLCKSZ)
				return psprintf("the ring's page at " PMWAL_LSN " has a long page header of another cluster or geometry (system identifier " UINT64_FORMAT ", segment size %u, block size %u)",
								LSN_FORMAT_ARGS(p), lh->xlp_sysid, lh->xlp_seg_size,
								lh->xlp_xlog_blcksz);
		}
		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) != 0 && ph->xlp_rem_len == 0)
			return psprintf("the ring's page at " PMWAL_LSN " continues a record, with 0 bytes left of it",
							LSN_FORMAT_ARGS(p));
		if (cont > 0 &&
			((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 || ph->xlp_rem_len != cont))
			return psprintf("the ring's page at " PMWAL_LSN " does not continue the record of the page before it (%u bytes of it left)",
							LSN_FORMAT_ARGS(p), cont);

		/* what the next page must begin with, and where records start */
		cont = 0;
		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) != 0 && ph->xlp_rem_len > space)
			cont = ph->xlp_rem_len - space;
		else if (XLogRecPtrIsInvalid(*first))
		{
			if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0)
				*first = p + hs;
			else if (MAXALIGN(ph->xlp_rem_len) < space)
				*first = p + hs + MAXALIGN(ph->xlp_rem_len);
			/* else the record ends with the page: the next page begins one */
		}
	}
	*bad = InvalidXLogRecPtr;
	if (XLogRecPtrIsInvalid(*first))
		*first = to;
	return NULL;
}

/*
 * Check the page header of every page in [tail, head) (check_page_run),
 * and find the first record that starts at or after the tail (head if none
 * does: the ring holds only the middle of one record).  Returns NULL, or
 * what is wrong.  The ring's header checked (RING_OK).
 */
char *
check_pages(const Ring *ring, XLogRecPtr *first)
{
	const RingHeader *hdr = ring->hdr;
	XLogRecPtr	bad;

	return check_page_run(ring, hdr->tail.v, hdr->head.v, (TimeLineID) hdr->timeline.v,
						  first, &bad);
}

/*
 * The pages of a ring whose positions are inconsistent (RING_BAD_RANGE:
 * its static header checked, its dynamic words do not) that still read as
 * its WAL: from the page of the tail on, every page whose header is valid
 * for its address and continues the page before it, up to the first that
 * is not, and at most one lap of the ring.  The timeline is the timeline
 * word's, or, when that holds no timeline, that of the tail's page.  Each
 * page header names its own address (and a segment's first page the
 * cluster and geometry), so no page of another lap, cluster or timeline
 * is taken; the head is not trusted either way.  False, with run->stop
 * saying why, if not even the tail's page reads as WAL.
 */
bool
salvage_pages(const Ring *ring, PageRun *run)
{
	const RingHeader *hdr = ring->hdr;
	uint64		cap = hdr->st.s.capacity;

	memset(run, 0, sizeof(PageRun));
	run->from = RING_PAGE(hdr->tail.v);
	run->to = run->from;
	run->first = run->from;
	if (run->from > PG_UINT64_MAX - cap)
	{
		run->stop = psprintf("the tail " PMWAL_LSN " is no WAL position", LSN_FORMAT_ARGS(hdr->tail.v));
		return false;
	}
	if (hdr->timeline.v != 0 && hdr->timeline.v <= PG_UINT32_MAX)
		run->tli = (TimeLineID) hdr->timeline.v;
	else
	{
		XLogPageHeader ph = ring_page(ring, run->from);

		run->tli = ph->xlp_magic == XLOG_PAGE_MAGIC ? ph->xlp_tli : 0;
	}
	run->stop = check_page_run(ring, run->from, run->from + cap, run->tli, &run->first, &run->to);
	if (run->stop == NULL)
		run->to = run->from + cap;
	if (XLogRecPtrIsInvalid(run->first) || run->first > run->to)
		run->first = run->to;
	return run->to > run->from;
}

/*
 * Does the record at "rec" continue past the head, every page after its
 * first one continuing it as it must?  For a ring whose first record
 * pg_waldump cannot read because the head cuts it off.
 */
bool
record_continues_past_head(const Ring *ring, XLogRecPtr rec)
{
	uint32		tot = *(const uint32 *) (ring->data + RING_OFFSET(ring->hdr->st.s.capacity, rec));
	uint32		got = RING_PAGE(rec) + XLOG_BLCKSZ - rec;

	if (tot < SizeOfXLogRecord || tot <= got)
		return false;
	for (XLogRecPtr p = RING_PAGE(rec) + XLOG_BLCKSZ; p < ring->hdr->head.v; p += XLOG_BLCKSZ)
	{
		XLogPageHeader ph = ring_page(ring, p);

		if ((ph->xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 || ph->xlp_rem_len != tot - got)
			return false;
		got += Min(ph->xlp_rem_len, XLOG_BLCKSZ - XLogPageHeaderSize(ph));
		if (got >= tot)
			return false;
	}
	return true;
}

/*
 * Where the record after one that ends at "end" begins: at the next 8-byte
 * boundary, after the page header if that is a page's start.
 */
XLogRecPtr
next_record_start(XLogRecPtr end, uint32 segsize)
{
	XLogRecPtr	next = MAXALIGN64(end);

	if (next % segsize == 0)
		return next + SizeOfXLogLongPHD;
	if (next % XLOG_BLCKSZ == 0)
		return next + SizeOfXLogShortPHD;
	return next;
}

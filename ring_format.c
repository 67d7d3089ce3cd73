/*-------------------------------------------------------------------------
 *
 * ring_format.c
 *		Checks of the pmwal ring header, shared by the server and pmwal_ctl.
 *
 * Nothing here writes to the ring or reports errors itself: callers decide
 * what a verdict means (the server refuses to start, the tool prints it), so
 * both apply exactly the same rules.  See ring_format.h for the layout.
 *
 * IDENTIFICATION
 *		ring_format.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef FRONTEND
#include "postgres.h"
#else
#include "postgres_fe.h"
#endif

#include "access/xlog_internal.h"

#include "ring_format.h"

pg_crc32c
ring_static_crc(const RingStatic *st)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, st, offsetof(RingStatic, crc));
	FIN_CRC32C(crc);
	return crc;
}

void
ring_fill_static(RingStatic *st, uint64 sysid, TimeLineID tli,
				 uint32 wal_segment_size, uint64 capacity)
{
	memset(st, 0, sizeof(RingStatic));
	memcpy(st->magic, RING_MAGIC, RING_MAGIC_LEN);
	st->format_version = RING_FORMAT_VERSION;
	st->header_size = RING_HEADER_SIZE;
	st->system_identifier = sysid;
	st->timeline = tli;
	st->wal_segment_size = wal_segment_size;
	st->wal_block_size = XLOG_BLCKSZ;
	st->capacity = capacity;
	st->crc = ring_static_crc(st);
}

/* Are all "len" bytes at "p" zero? */
bool
ring_all_zero(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != 0)
			return false;
	return true;
}

/*
 * Classify a mapped header.  "detail" receives one sentence naming what
 * differs, for errdetail or the tool's output.
 */
RingCheck
ring_check_header(const RingHeader *hdr, uint64 mapped_len,
				  const RingExpect *expect, char *detail, size_t detail_len)
{
	const RingStatic *st = &hdr->st.s;
	pg_crc32c	crc;

	detail[0] = '\0';
	if (mapped_len < RING_HEADER_SIZE)
	{
		snprintf(detail, detail_len, "The file is %llu bytes, smaller than the %d-byte ring header.",
				 (unsigned long long) mapped_len, RING_HEADER_SIZE);
		return RING_BAD_GEOMETRY;
	}
	if (ring_all_zero((const char *) hdr, RING_HEADER_SIZE))
		return RING_UNINITIALISED;

	/*
	 * REINIT is only ever stored on a ring that holds nothing, before any
	 * other part of the header changes: an initialisation (or a resize)
	 * was interrupted, whatever the rest says.  pmwal 1.0 stored it into an
	 * all-zero header first; that is one too.
	 */
	if (hdr->state.v == RING_STATE_REINIT &&
		(memcmp(st->magic, RING_MAGIC, RING_MAGIC_LEN) == 0 ||
		 (ring_all_zero((const char *) hdr, offsetof(RingHeader, state)) &&
		  ring_all_zero((const char *) hdr + offsetof(RingHeader, exposed),
				   RING_HEADER_SIZE - offsetof(RingHeader, exposed)))))
	{
		snprintf(detail, detail_len, "An initialisation of the empty ring was interrupted.");
		return RING_INTERRUPTED_REINIT;
	}
	if (memcmp(st->magic, RING_MAGIC, RING_MAGIC_LEN) != 0)
	{
		snprintf(detail, detail_len, "The file does not start with the pmwal ring magic \"%s\".",
				 RING_MAGIC);
		return RING_FOREIGN;
	}
	crc = ring_static_crc(st);
	if (!EQ_CRC32C(crc, st->crc))
	{
		snprintf(detail, detail_len, "The header checksum is %08X, but its contents give %08X.",
				 st->crc, crc);
		return RING_BAD_CRC;
	}
	if (st->format_version != RING_FORMAT_VERSION)
	{
		snprintf(detail, detail_len, "The ring has format version %u; this pmwal reads version %d.",
				 st->format_version, RING_FORMAT_VERSION);
		return RING_BAD_VERSION;
	}
	if (st->header_size != RING_HEADER_SIZE || st->capacity == 0 ||
		st->capacity % XLOG_BLCKSZ != 0 ||
		st->capacity > mapped_len - RING_HEADER_SIZE)
	{
		snprintf(detail, detail_len, "The header describes %llu data bytes after a %u-byte header, but the file holds %llu bytes.",
				 (unsigned long long) st->capacity, st->header_size,
				 (unsigned long long) mapped_len);
		return RING_BAD_GEOMETRY;
	}
	if (expect->system_identifier != 0 &&
		st->system_identifier != expect->system_identifier)
	{
		snprintf(detail, detail_len, "The ring belongs to the cluster with system identifier %llu; this cluster's is %llu.",
				 (unsigned long long) st->system_identifier,
				 (unsigned long long) expect->system_identifier);
		return RING_OTHER_CLUSTER;
	}
	if (expect->wal_segment_size != 0 &&
		st->wal_segment_size != expect->wal_segment_size)
	{
		snprintf(detail, detail_len, "The ring was written with a WAL segment size of %u bytes; this cluster uses %u.",
				 st->wal_segment_size, expect->wal_segment_size);
		return RING_OTHER_SEGMENT_SIZE;
	}
	if (expect->wal_block_size != 0 &&
		st->wal_block_size != expect->wal_block_size)
	{
		snprintf(detail, detail_len, "The ring was written with a WAL block size of %u bytes; this server uses %u.",
				 st->wal_block_size, expect->wal_block_size);
		return RING_OTHER_BLOCK_SIZE;
	}
	if (hdr->state.v != RING_STATE_EMPTY && hdr->state.v != RING_STATE_IN_USE &&
		hdr->state.v != RING_STATE_REINIT)
	{
		snprintf(detail, detail_len, "The state word holds the unknown value 0x%016llX.",
				 (unsigned long long) hdr->state.v);
		return RING_BAD_RANGE;
	}
	if (ring_holds_wal(hdr) &&
		(hdr->head.v - RING_TAIL_PAGE(hdr->tail.v) > st->capacity ||
		 hdr->last_end.v < hdr->tail.v || hdr->last_end.v > hdr->head.v))
	{
		snprintf(detail, detail_len, "The ring claims WAL from %X/%X to %X/%X (complete to %X/%X) in %llu bytes of capacity.",
				 LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
				 LSN_FORMAT_ARGS(hdr->last_end.v),
				 (unsigned long long) st->capacity);
		return RING_BAD_RANGE;
	}
	return RING_OK;
}

/* Does the ring hold WAL that a restore would have to write back? */
bool
ring_holds_wal(const RingHeader *hdr)
{
	return hdr->state.v == RING_STATE_IN_USE && hdr->tail.v < hdr->head.v;
}

const char *
ring_state_name(uint64 state)
{
	if (state == RING_STATE_EMPTY)
		return "empty";
	if (state == RING_STATE_IN_USE)
		return "in use";
	if (state == RING_STATE_REINIT)
		return "reinitialising";
	return "invalid";
}

/*
 * Fill "page" (XLOG_BLCKSZ bytes) with the long page header that begins the
 * segment starting at "segstart", as PostgreSQL writes it, and zeros.  The
 * ring holds WAL from the page of its tail on; readers that insist on
 * seeing the segment's first page (XLogReader, pg_waldump) get this one.
 * It carries the timeline of "first", the ring's first page after it:
 * right after a promotion that page may still be of the old timeline
 * (the new one began inside it), and a reader refuses a timeline that
 * goes backwards from one page to the next.
 */
void
ring_segment_header(char *page, XLogRecPtr segstart, const RingHeader *hdr,
					const char *first)
{
	const XLogPageHeaderData *fh = (const XLogPageHeaderData *) first;

	XLogLongPageHeader lh = (XLogLongPageHeader) page;

	memset(page, 0, XLOG_BLCKSZ);
	lh->std.xlp_magic = XLOG_PAGE_MAGIC;
	lh->std.xlp_info = XLP_LONG_HEADER;
	lh->std.xlp_tli = fh->xlp_magic == XLOG_PAGE_MAGIC ? fh->xlp_tli : hdr->st.s.timeline;
	lh->std.xlp_pageaddr = segstart;
	lh->xlp_sysid = hdr->st.s.system_identifier;
	lh->xlp_seg_size = hdr->st.s.wal_segment_size;
	lh->xlp_xlog_blcksz = hdr->st.s.wal_block_size;
}

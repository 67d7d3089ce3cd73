/*-------------------------------------------------------------------------
 *
 * ring_format.h
 *		On-media layout of the pmwal ring and the checks every reader of it
 *		applies, shared by the server and the offline tool pmwal_ctl.
 *
 * The ring is a file on a DAX file system (or a devdax device): a 4 KiB
 * header followed by "capacity" bytes of WAL.  The WAL byte at LSN x lives at
 * data offset x % capacity, so restoring the ring needs no index.
 *
 * The header has a static part, written only while the ring holds nothing
 * and protected by a CRC, and five dynamic words, each on its own cache line
 * and only ever updated with an aligned 8-byte store that is persisted
 * before anything depending on it (I6 in DESIGN.md):
 *
 *	tail		everything before it is durable in pg_wal; a record boundary
 *	last_end	end of the newest record known complete in the ring, so that
 *				a restore can prove it verified everything acknowledged
 *	head		the ring holds WAL [tail, head)
 *	state		RING_STATE_*; REINIT marks a header being (re)written: only
 *				ever stored on a ring that holds nothing, so a ring found in
 *				that state may always be initialised again
 *	exposed		non-zero while WAL written without fsync may be ahead of
 *				head (the ring's head when it was set): a standby or the
 *				archive may hold WAL that a power cut takes from pg_wal
 *				(added in pmwal 1.1; rings of 1.0 hold zero there)
 *
 * The ring holds WAL iff state is IN_USE and tail < head; its data area
 * then holds [start of the tail's page, head), so that the first page's
 * header is there for a restore to check.  Stores happen in
 * the order data, head, last_end when extending and tail alone when the
 * ring is drained, so a crash between any two stores leaves either the old
 * or the new range, or an empty ring.
 *
 * IDENTIFICATION
 *		ring_format.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_RING_FORMAT_H
#define PMWAL_RING_FORMAT_H

#include "access/xlogdefs.h"
#include "port/pg_crc32c.h"

#define RING_MAGIC				"PMWALRNG"
#define RING_MAGIC_LEN			8
#define RING_FORMAT_VERSION		1
#define RING_HEADER_SIZE		4096
#define RING_CACHE_LINE			64

/* values of the state word */
#define RING_STATE_EMPTY		UINT64CONST(0x454d505459000001)	/* holds nothing */
#define RING_STATE_IN_USE		UINT64CONST(0x494e555345000002)	/* may hold WAL */
#define RING_STATE_REINIT		UINT64CONST(0x5245494e49000003)	/* header rewrite */

typedef struct RingStatic
{
	char		magic[RING_MAGIC_LEN];
	uint32		format_version;
	uint32		header_size;
	uint64		system_identifier;
	uint32		timeline;
	uint32		wal_segment_size;
	uint32		wal_block_size;
	uint32		reserved;
	uint64		capacity;
	pg_crc32c	crc;			/* CRC-32C of the fields above */
} RingStatic;

typedef struct RingHeader
{
	union
	{
		RingStatic	s;
		char		line[RING_CACHE_LINE];
	}			st;
	union
	{
		volatile uint64 v;
		char		line[RING_CACHE_LINE];
	}			tail;
	union
	{
		volatile uint64 v;
		char		line[RING_CACHE_LINE];
	}			last_end;
	union
	{
		volatile uint64 v;
		char		line[RING_CACHE_LINE];
	}			head;
	union
	{
		volatile uint64 v;
		char		line[RING_CACHE_LINE];
	}			state;
	union
	{
		volatile uint64 v;
		char		line[RING_CACHE_LINE];
	}			exposed;
} RingHeader;

StaticAssertDecl(sizeof(RingStatic) <= RING_CACHE_LINE, "ring static header exceeds a cache line");
StaticAssertDecl(sizeof(RingHeader) <= RING_HEADER_SIZE, "ring header exceeds its page");

/* What the server or the tool expects of a ring; zero fields are not checked. */
typedef struct RingExpect
{
	uint64		system_identifier;
	uint32		wal_segment_size;
	uint32		wal_block_size;
} RingExpect;

/* Verdict of ring_check_header(); RING_OK and RING_INTERRUPTED_REINIT are usable. */
typedef enum RingCheck
{
	RING_OK,
	RING_UNINITIALISED,			/* header page all zero: not a ring pmwal made */
	RING_INTERRUPTED_REINIT,	/* state REINIT: an initialisation of an empty
								 * ring was interrupted; initialise again */
	RING_FOREIGN,				/* not a pmwal ring */
	RING_BAD_VERSION,
	RING_BAD_CRC,
	RING_BAD_GEOMETRY,			/* header_size or capacity impossible */
	RING_OTHER_CLUSTER,
	RING_OTHER_SEGMENT_SIZE,
	RING_OTHER_BLOCK_SIZE,
	RING_BAD_RANGE				/* dynamic words inconsistent */
} RingCheck;

/*
 * The ring holds WAL from the start of the tail's page, so that the page
 * header of the first page is always at hand: head - RING_TAIL_PAGE(tail)
 * never exceeds the capacity.
 */
#define RING_TAIL_PAGE(tail)	((tail) - (tail) % XLOG_BLCKSZ)

/*
 * Where a restore starts writing: recovery needs nothing before the redo
 * point, but it reads the first page (the long header) of the redo point's
 * segment before anything else in it, and a power cut may have taken that
 * page or the whole file while the ring held it; WAL from the tail on may
 * not be durable.  Everything from here on is in [tail, head) and so
 * verified before it is written.
 */
#define RING_RESTORE_FROM(tail, redo, segsize) \
	Max((tail), (redo) - (redo) % (segsize))

/* Byte offset of LSN "lsn" inside the data area. */
#define RING_OFFSET(capacity, lsn)	((uint64) (lsn) % (uint64) (capacity))

extern pg_crc32c ring_static_crc(const RingStatic *st);
extern void ring_fill_static(RingStatic *st, uint64 sysid, TimeLineID tli,
							 uint32 wal_segment_size, uint64 capacity);
extern RingCheck ring_check_header(const RingHeader *hdr, uint64 mapped_len,
								   const RingExpect *expect,
								   char *detail, size_t detail_len);
extern bool ring_holds_wal(const RingHeader *hdr);
extern bool ring_all_zero(const char *p, size_t len);
extern const char *ring_state_name(uint64 state);
extern void ring_segment_header(char *page, XLogRecPtr segstart,
								const RingHeader *hdr, const char *first);

#endif							/* PMWAL_RING_FORMAT_H */

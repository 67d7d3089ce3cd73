/*-------------------------------------------------------------------------
 *
 * ring_format.h
 *		On-media layout of the pmwal ring and of the data directory's
 *		binding file, and the checks every reader of them applies; shared
 *		by the server and the offline tool pmwal_ctl.
 *
 * The ring is a file on a DAX file system (or a devdax device): a 4 KiB
 * header followed by "capacity" bytes of WAL.  The WAL byte at LSN x lives
 * at data offset x % capacity, so restoring the ring needs no index.  The
 * ring is pmwal's copy of what the server wrote into its WAL segment files
 * and has not yet made durable there: the restore writes it back exactly
 * as the server wrote it.
 *
 * The header has a static part, written only while the ring holds nothing
 * and protected by a CRC, five dynamic words, each on its own cache line
 * and only ever updated with an aligned 8-byte store that is persisted
 * before anything depending on it (I6 in DESIGN.md), and the owner block,
 * written only while the ring is empty:
 *
 *	tail		page-aligned; everything before it is durable in pg_wal
 *	head		page-aligned; the ring holds WAL [tail, head), the newest
 *				version of each of those pages the server wrote
 *	state		RING_STATE_*; REINIT marks a header being (re)written: only
 *				ever stored on a ring that holds nothing, so a ring found in
 *				that state may always be initialised again
 *	timeline	timeline of the WAL in the ring; changed only while empty
 *	generation	counts the ring's bindings and the flusher's passes; the
 *				data directory's binding file records it too, so a stale
 *				copy of the ring, or a ring another copy of the data
 *				directory has used since, is recognised (binding.c)
 *
 * The ring holds WAL iff state is IN_USE and tail < head.  head only grows
 * while the ring holds WAL.  A range is given up by moving tail up to (at
 * most) head; a position is moved by storing tail and head so that every
 * intermediate state claims only bytes the ring holds, or nothing.
 *
 * The binding file (pg_wal/pmwal.binding in the data directory) names the
 * ring that may hold the cluster's acknowledged WAL: its ring_id, path and
 * generation, in two slots written alternately, each with its CRC, so that
 * a torn write leaves the previous one.
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
#define RING_FORMAT_VERSION		2
#define RING_HEADER_SIZE		4096
#define RING_CACHE_LINE			64
#define RING_ID_LEN				16

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
	uint32		wal_segment_size;
	uint32		wal_block_size;
	uint64		capacity;
	uint8		ring_id[RING_ID_LEN];	/* random, made when the ring is created */
	pg_crc32c	crc;			/* CRC-32C of the fields above */
} RingStatic;

#define RING_OWNER_PATH_LEN		1024

/* Who bound the ring last, for messages and pmwal_ctl; not a check. */
typedef struct RingOwner
{
	uint64		generation;		/* the generation of that binding */
	int64		bound_at;		/* Unix time */
	char		datadir[RING_OWNER_PATH_LEN];
	pg_crc32c	crc;
} RingOwner;

#define RING_WORD(name) \
	union \
	{ \
		volatile uint64 v; \
		char		line[RING_CACHE_LINE]; \
	}			name

typedef struct RingHeader
{
	union
	{
		RingStatic	s;
		char		line[RING_CACHE_LINE];
	}			st;
	RING_WORD(tail);
	RING_WORD(head);
	RING_WORD(state);
	RING_WORD(timeline);
	RING_WORD(generation);
	char		pad[1024 - 6 * RING_CACHE_LINE];
	RingOwner	owner;
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
	RING_OLD_VERSION_WITH_WAL,	/* a ring of format 1 that holds WAL */
	RING_BAD_CRC,
	RING_BAD_GEOMETRY,			/* header_size or capacity impossible */
	RING_OTHER_CLUSTER,
	RING_OTHER_SEGMENT_SIZE,
	RING_OTHER_BLOCK_SIZE,
	RING_BAD_RANGE				/* dynamic words inconsistent */
} RingCheck;

/* Byte offset of LSN "lsn" inside the data area. */
#define RING_OFFSET(capacity, lsn)	((uint64) (lsn) % (uint64) (capacity))

/* Start of the WAL page holding "lsn". */
#define RING_PAGE(lsn)				((lsn) - (lsn) % XLOG_BLCKSZ)

/* The first page boundary at or after "lsn". */
#define RING_PAGE_END(lsn)			RING_PAGE((lsn) + XLOG_BLCKSZ - 1)

/*
 * The one rule for the ring's positions, applied where the server stores
 * them (wal_ring.c) and wherever they are read back (ring_check_header:
 * the server's start, pmwal_ctl): tail and head are WAL page boundaries,
 * and the WAL between them fits the data area.  The restore writes whole
 * pages from the tail to the head; a position inside a page is one it
 * cannot start from or stop at, and a ring claiming one is refused.
 */
#define RING_POSITION_VALID(lsn)	((lsn) % XLOG_BLCKSZ == 0)

extern pg_crc32c ring_static_crc(const RingStatic *st);
extern pg_crc32c ring_owner_crc(const RingOwner *owner);
extern void ring_fill_static(RingStatic *st, uint64 sysid, uint32 wal_segment_size,
							 uint64 capacity, const uint8 *ring_id);
extern RingCheck ring_check_header(const RingHeader *hdr, uint64 mapped_len,
								   const RingExpect *expect,
								   char *detail, size_t detail_len);
extern bool ring_holds_wal(const RingHeader *hdr);
extern bool ring_positions_valid(XLogRecPtr tail, XLogRecPtr head, uint64 capacity);
extern bool ring_all_zero(const char *p, size_t len);
extern const char *ring_state_name(uint64 state);
extern void ring_id_text(const uint8 *ring_id, char *buf);	/* 33 bytes */
extern bool ring_owner_valid(const RingOwner *owner);

/*
 * The binding file.  Two slots of BINDING_SLOT_SIZE bytes; the valid slot
 * with the higher generation is the binding.
 */
#define BINDING_FILE			"pmwal.binding"		/* in pg_wal/ */
#define BINDING_MAGIC			"PMWALBND"
#define BINDING_VERSION			1
#define BINDING_SLOT_SIZE		2048
#define BINDING_PATH_LEN		1984

typedef struct BindingSlot
{
	char		magic[RING_MAGIC_LEN];
	uint32		version;
	uint32		slot_size;
	uint64		system_identifier;
	uint64		generation;
	uint8		ring_id[RING_ID_LEN];
	char		ring_path[BINDING_PATH_LEN];
	pg_crc32c	crc;			/* of the fields above */
} BindingSlot;

StaticAssertDecl(sizeof(BindingSlot) <= BINDING_SLOT_SIZE, "binding slot too large");

extern pg_crc32c binding_slot_crc(const BindingSlot *slot);
extern bool binding_slot_valid(const BindingSlot *slot);

/*
 * The newer valid slot of a binding file's contents (2 * BINDING_SLOT_SIZE
 * bytes, or fewer: a short file), or NULL if neither is valid.
 */
extern const BindingSlot *binding_pick(const char *file, size_t len);

#endif							/* PMWAL_RING_FORMAT_H */

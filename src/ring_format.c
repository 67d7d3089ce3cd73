/*-------------------------------------------------------------------------
 *
 * ring_format.c
 *		Checks of the pmwal ring header and of the binding file, shared by
 *		the server and pmwal_ctl.
 *
 * Nothing here writes or reports errors itself: callers decide what a
 * verdict means (the server refuses to start, the tool prints it), so both
 * apply exactly the same rules.  See ring_format.h for the layouts.
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

#include "pmwal_compat.h"
#include "ring_format.h"

/*
 * Format 1 (pmwal 1.0 and 1.1): the same magic and version offset, a
 * 52-byte static header with its CRC at byte 48, and tail, head and state
 * at bytes 64, 192 and 256.  Read only to tell an empty one (initialised
 * anew) from one holding WAL (refused: the pmwal that wrote it restores it).
 */
#define V1_CRC_OFFSET		48
#define V1_TAIL_OFFSET		64
#define V1_HEAD_OFFSET		192
#define V1_STATE_OFFSET		256

static uint64
word_at(const RingHeader *hdr, size_t offset)
{
	return *(const volatile uint64 *) ((const char *) hdr + offset);
}

/* CRC-32C of the first "len" bytes at "p". */
static pg_crc32c
crc_of(const void *p, size_t len)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, p, len);
	FIN_CRC32C(crc);
	return crc;
}

pg_crc32c
ring_static_crc(const RingStatic *st)
{
	return crc_of(st, offsetof(RingStatic, crc));
}

pg_crc32c
ring_owner_crc(const RingOwner *owner)
{
	return crc_of(owner, offsetof(RingOwner, crc));
}

bool
ring_owner_valid(const RingOwner *owner)
{
	pg_crc32c	crc = ring_owner_crc(owner);

	return owner->generation != 0 && EQ_CRC32C(crc, owner->crc);
}

void
ring_fill_static(RingStatic *st, uint64 sysid, uint32 wal_segment_size,
				 uint64 capacity, const uint8 *ring_id)
{
	memset(st, 0, sizeof(RingStatic));
	memcpy(st->magic, RING_MAGIC, RING_MAGIC_LEN);
	st->format_version = RING_FORMAT_VERSION;
	st->header_size = RING_HEADER_SIZE;
	st->system_identifier = sysid;
	st->wal_segment_size = wal_segment_size;
	st->wal_block_size = XLOG_BLCKSZ;
	st->capacity = capacity;
	memcpy(st->ring_id, ring_id, RING_ID_LEN);
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

void
ring_id_text(const uint8 *ring_id, char *buf)
{
	for (int i = 0; i < RING_ID_LEN; i++)
		sprintf(buf + 2 * i, "%02x", ring_id[i]);
}

/* A header of format 1: empty (true) or holding WAL (false). */
static bool
v1_is_empty(const RingHeader *hdr)
{
	return word_at(hdr, V1_STATE_OFFSET) != RING_STATE_IN_USE ||
		word_at(hdr, V1_TAIL_OFFSET) >= word_at(hdr, V1_HEAD_OFFSET);
}

static bool
v1_crc_ok(const RingHeader *hdr)
{
	pg_crc32c	crc = crc_of(hdr, V1_CRC_OFFSET);

	return EQ_CRC32C(crc, *(const pg_crc32c *) ((const char *) hdr + V1_CRC_OFFSET));
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
	 * pmwal 1.0 stored REINIT into the all-zero header of a ring file it had
	 * just created, into format 1's state word, before anything else: a kill
	 * right after left a header that is all zero but that word.  An
	 * initialisation of an empty ring was interrupted there too (1.1 took it
	 * as one; format 2 has the timeline word at that place, never REINIT).
	 */
	if (word_at(hdr, V1_STATE_OFFSET) == RING_STATE_REINIT &&
		ring_all_zero((const char *) hdr, V1_STATE_OFFSET) &&
		ring_all_zero((const char *) hdr + V1_STATE_OFFSET + sizeof(uint64),
					  RING_HEADER_SIZE - V1_STATE_OFFSET - sizeof(uint64)))
	{
		snprintf(detail, detail_len, "An initialisation of the empty ring was interrupted.");
		return RING_INTERRUPTED_REINIT;
	}

	/*
	 * REINIT is only ever stored on a ring that holds nothing, before any
	 * other part of the header changes: an initialisation (or a resize)
	 * was interrupted, whatever the rest says.
	 */
	if (hdr->state.v == RING_STATE_REINIT &&
		memcmp(st->magic, RING_MAGIC, RING_MAGIC_LEN) == 0)
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
	if (st->format_version == 1 && v1_crc_ok(hdr))
	{
		if (v1_is_empty(hdr))
		{
			snprintf(detail, detail_len, "The ring has format 1 (pmwal 1.1 or older) and holds nothing.");
			return RING_INTERRUPTED_REINIT;
		}
		snprintf(detail, detail_len, "The ring has format 1 (pmwal 1.1 or older) and holds WAL from " PMWAL_LSN " to " PMWAL_LSN ".",
				 LSN_FORMAT_ARGS(word_at(hdr, V1_TAIL_OFFSET)),
				 LSN_FORMAT_ARGS(word_at(hdr, V1_HEAD_OFFSET)));
		return RING_OLD_VERSION_WITH_WAL;
	}
	crc = ring_static_crc(st);
	if (st->format_version == RING_FORMAT_VERSION && !EQ_CRC32C(crc, st->crc))
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
	if (st->wal_segment_size == 0 || st->wal_segment_size % XLOG_BLCKSZ != 0 ||
		!IsValidWalSegSize(st->wal_segment_size))
	{
		snprintf(detail, detail_len, "The header names a WAL segment size of %u bytes, which PostgreSQL does not allow.",
				 st->wal_segment_size);
		return RING_BAD_GEOMETRY;
	}
	if (st->wal_block_size != XLOG_BLCKSZ)
	{
		snprintf(detail, detail_len, "The ring was written with a WAL block size of %u bytes; this build uses %u.",
				 st->wal_block_size, (unsigned) XLOG_BLCKSZ);
		return RING_OTHER_BLOCK_SIZE;
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
	if (hdr->state.v != RING_STATE_EMPTY && hdr->state.v != RING_STATE_IN_USE)
	{
		snprintf(detail, detail_len, "The state word holds the unknown value 0x%016llX.",
				 (unsigned long long) hdr->state.v);
		return RING_BAD_RANGE;
	}
	if (ring_holds_wal(hdr) &&
		(!ring_positions_valid(hdr->tail.v, hdr->head.v, st->capacity) ||
		 hdr->timeline.v == 0 || hdr->timeline.v > PG_UINT32_MAX))
	{
		snprintf(detail, detail_len, "The ring claims WAL of timeline %llu from " PMWAL_LSN " to " PMWAL_LSN " in %llu bytes of capacity.",
				 (unsigned long long) hdr->timeline.v,
				 LSN_FORMAT_ARGS(hdr->tail.v), LSN_FORMAT_ARGS(hdr->head.v),
				 (unsigned long long) st->capacity);
		return RING_BAD_RANGE;
	}
	return RING_OK;
}

/*
 * May the ring claim WAL [tail, head)?  The rule of ring_format.h: both
 * page boundaries, and (unless the range is empty) no more WAL than the
 * data area holds.
 */
bool
ring_positions_valid(XLogRecPtr tail, XLogRecPtr head, uint64 capacity)
{
	return RING_POSITION_VALID(tail) && RING_POSITION_VALID(head) &&
		(head <= tail || head - tail <= capacity);
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

pg_crc32c
binding_slot_crc(const BindingSlot *slot)
{
	return crc_of(slot, offsetof(BindingSlot, crc));
}

bool
binding_slot_valid(const BindingSlot *slot)
{
	pg_crc32c	crc;

	if (memcmp(slot->magic, BINDING_MAGIC, RING_MAGIC_LEN) != 0 ||
		slot->version != BINDING_VERSION || slot->slot_size != BINDING_SLOT_SIZE ||
		slot->generation == 0 ||
		memchr(slot->ring_path, '\0', BINDING_PATH_LEN) == NULL)
		return false;
	crc = binding_slot_crc(slot);
	return EQ_CRC32C(crc, slot->crc);
}

const BindingSlot *
binding_pick(const char *file, size_t len)
{
	const BindingSlot *best = NULL;

	for (int i = 0; i < 2; i++)
	{
		const BindingSlot *slot = (const BindingSlot *) (file + i * BINDING_SLOT_SIZE);

		if (len < (size_t) (i + 1) * BINDING_SLOT_SIZE || !binding_slot_valid(slot))
			continue;
		if (best == NULL || slot->generation > best->generation)
			best = slot;
	}
	return best;
}

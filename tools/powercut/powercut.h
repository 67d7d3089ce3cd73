/*-------------------------------------------------------------------------
 *
 * powercut.h
 *		The record format of the power-cut log, shared by libpowercut.so
 *		(which writes it) and documented for powercut_cut (which reads it).
 *
 * The log is one file opened with O_APPEND; each record is appended with
 * one writev() of header, path and old bytes.  On a local file system an
 * O_APPEND write is done under the inode lock, so records of concurrent
 * processes never interleave and the file order is a total order of the
 * events: an event logged after another happened after it.
 *
 * All integers are little-endian (the machine's order on x86-64 and
 * arm64).  A record is the 64-byte header, then "pathlen" bytes of path
 * (relative to POWERCUT_DIR; a rename has "old\0new"), then "oldlen" bytes
 * of the content a write is about to overwrite.  Only the span from the
 * first to the last byte that the write changes is kept (aux is where it
 * starts, relative to off): the bytes around it are the same before and
 * after, and WAL's partial last page is rewritten whole at every commit,
 * so this keeps the log about as large as the WAL instead of a page per
 * commit.
 *
 * IDENTIFICATION
 *		tools/powercut/powercut.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef POWERCUT_H
#define POWERCUT_H

#include <stdint.h>

#define PC_MAGIC		0x54554350	/* "PCUT" */

/* Record types */
#define PC_WRITE		'W'		/* a write is about to happen: ino, off, len,
								 * size before, old bytes at off + aux */
#define PC_WRITE_DONE	'w'		/* it returned: id, len = result (-1: failed) */
#define PC_FSYNC		'F'		/* fsync/fdatasync of a file begins: id, ino */
#define PC_FSYNC_DONE	'f'		/* it returned: id, len = result */
#define PC_DIRSYNC		'D'		/* fsync of a directory begins: id, path */
#define PC_DIRSYNC_DONE	'd'		/* it returned: id, len = result */
#define PC_SYNCALL		'G'		/* sync() or syncfs() begins: id */
#define PC_SYNCALL_DONE	'g'		/* it returned: id, len = result */
#define PC_CREATE		'C'		/* a new file appeared: path, ino */
#define PC_LINK			'L'		/* a new name for an existing file: path, ino */
#define PC_RENAME		'R'		/* path "old\0new", ino, aux = inode of the
								 * file it replaced, 0 if none */
#define PC_UNLINK		'U'		/* path, ino */
#define PC_UNMODELLED	'X'		/* ftruncate/fallocate: path = what, ino */

/* Record flags */
#define PC_FLAG_SYNC_FD	0x01	/* write to a descriptor opened O_SYNC/O_DSYNC */
#define PC_FLAG_DIRECT_FD 0x02	/* write to a descriptor opened O_DIRECT
								 * (noted only: durable as any other) */

typedef struct PcRecord
{
	uint32_t	magic;
	uint8_t		type;
	uint8_t		flags;
	uint16_t	pathlen;
	int32_t		pid;
	uint32_t	oldlen;
	uint64_t	id;				/* pairs a begin with its end */
	uint64_t	ino;
	uint64_t	aux;			/* see the record types */
	int64_t		off;
	int64_t		len;
	int64_t		size;
} PcRecord;

/* Perl: unpack('V C C v l< V Q< Q< Q< q< q< q<', $header) */
_Static_assert(sizeof(PcRecord) == 64, "PcRecord must be 64 bytes");

/* shared by powercut.c and ringrecord.c (hidden: not exported) */
extern void *must_dlsym(const char *name);

#endif							/* POWERCUT_H */

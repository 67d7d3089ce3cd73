/*-------------------------------------------------------------------------
 *
 * interpose.c
 *		Put pmwal in front of the system calls the server makes on its WAL
 *		segment files and on pg_control.
 *
 * PostgreSQL publishes its WAL flush pointer -- what walsenders, logical
 * decoding, the archiver, the WAL summarizer and the checkpointer all take
 * as durable -- only after the fdatasync (or fsync) of the segment file
 * returns.  That sync is the one place where pmwal can make WAL durable
 * before anyone trusts it, without changing PostgreSQL: pmwal copies every
 * write into a WAL segment into its ring, and answers the segment's sync
 * once the ring holds, persisted, everything written (wal_ring.c).
 *
 * The server binary calls open, close, pwrite, write, fsync, fdatasync and
 * their relatives through its procedure linkage table.  In the postmaster,
 * from _PG_init (shared_preload_libraries), pmwal rewrites those entries
 * of the binary's global offset table to point at the wrappers below;
 * every server process is forked from the postmaster and inherits them.
 * Only the binary's own calls are redirected: libraries, and pmwal itself,
 * keep calling the C library.  An entry the binary's RELRO protects is
 * made writable for the store and read-only again.
 *
 * The wrappers know which descriptors are WAL segments from the path they
 * were opened by (pg_wal/ and a WAL file name: timeline and segment come
 * from it) and which is pg_control; everything else passes straight
 * through, at the cost of one table lookup.  PostgreSQL opens and closes
 * those files with open() and close() only, so the table is exact.  A
 * binary that imports a call that could write a file and that pmwal does
 * not wrap (creat, pwritev2) is not interposed at all, and pmwal stands
 * aside: it never serves a sync whose writes it may not have seen.
 *
 * IDENTIFICATION
 *		interpose.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "miscadmin.h"

#include "pmwal.h"

/* Descriptors beyond this are not classified (PostgreSQL uses far fewer). */
#define FD_TABLE_SIZE	65536

static WalFd fd_table[FD_TABLE_SIZE];
static bool interposed = false;
static char failure[256];

#if defined(__x86_64__)
#define RELOC_JUMP_SLOT		R_X86_64_JUMP_SLOT
#define RELOC_GLOB_DAT		R_X86_64_GLOB_DAT
#define RELOC_ABS64			R_X86_64_64
#elif defined(__aarch64__)
#define RELOC_JUMP_SLOT		R_AARCH64_JUMP_SLOT
#define RELOC_GLOB_DAT		R_AARCH64_GLOB_DAT
#define RELOC_ABS64			R_AARCH64_ABS64
#endif

/* ---------------------------------------------------------------------
 * Which descriptor is what
 * --------------------------------------------------------------------- */

static bool
path_ends_with(const char *path, const char *suffix)
{
	size_t		plen = strlen(path);
	size_t		slen = strlen(suffix);

	return plen >= slen && strcmp(path + plen - slen, suffix) == 0 &&
		(plen == slen || path[plen - slen - 1] == '/');
}

/*
 * Is "rel", the end of "path", this data directory's own file?  The server
 * opens its WAL and pg_control relative to the data directory, its working
 * directory ("pg_wal/...", "./pg_wal/..." in a base backup), or under the
 * absolute DataDir (update_controlfile).  A path that merely ends the same
 * way elsewhere -- lo_export() to "/tmp/x/pg_wal/<WAL file name>" -- is not
 * the cluster's: taken for a WAL segment, its write retired the ring and
 * moved written_end, and so the durable point, to the segment its name
 * says, past the segment being written, which no real sync covered again.
 */
static bool
own_file(const char *path, const char *rel)
{
	size_t		plen = rel - path;
	size_t		dlen;

	if (plen == 0 || (plen == 2 && strncmp(path, "./", 2) == 0))
		return true;
	if (DataDir == NULL)
		return false;
	dlen = strlen(DataDir);
	return plen == dlen + 1 && strncmp(path, DataDir, dlen) == 0 && path[dlen] == '/';
}

static void
classify(int fd, const char *path, int flags)
{
	const char *name;
	WalFd		w = {FD_OTHER, PASS_NONE, 0, 0};

	if (fd < 0)
		return;
	name = strrchr(path, '/');
	name = name ? name + 1 : path;
	if (IsXLogFileName(name) && name - path >= 7 &&
		strncmp(name - 7, XLOGDIR "/", 7) == 0 && own_file(path, name - 7))
	{
		if (flags & (O_SYNC | O_DSYNC))
			w.pass_cause = PASS_OPEN_SYNC;
		else if (flags & O_DIRECT)
			w.pass_cause = PASS_OPEN_DIRECT;
		w.kind = w.pass_cause != PASS_NONE ? FD_WAL_PASS : FD_WAL;
		XLogFromFileName(name, &w.tli, &w.segno, wal_segment_size);
	}
	else if (path_ends_with(path, XLOG_CONTROL_FILE) &&
			 own_file(path, path + strlen(path) - strlen(XLOG_CONTROL_FILE)))
		w.kind = FD_CONTROL;

	if (fd < FD_TABLE_SIZE)
		fd_table[fd] = w;
	else if (w.kind != FD_OTHER)
		elog(PANIC, "pmwal: descriptor %d of \"%s\" is beyond the %d it can follow",
			 fd, path, FD_TABLE_SIZE);
}

static inline const WalFd *
lookup(int fd)
{
	if (fd >= 0 && fd < FD_TABLE_SIZE && fd_table[fd].kind != FD_OTHER)
		return &fd_table[fd];
	return NULL;
}

static void
forget(int fd)
{
	if (fd >= 0 && fd < FD_TABLE_SIZE)
		fd_table[fd].kind = FD_OTHER;
}

/* ---------------------------------------------------------------------
 * The wrappers.  Each calls the C library's function (through pmwal's own
 * linkage, which this file does not touch) and preserves its errno.
 * --------------------------------------------------------------------- */

static mode_t
open_mode(int flags, va_list ap)
{
	if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE)
		return (mode_t) va_arg(ap, int);
	return 0;
}

static int
wrap_open(const char *path, int flags,...)
{
	va_list		ap;
	mode_t		mode;
	int			fd;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	fd = open(path, flags, mode);
	classify(fd, path, flags);
	return fd;
}

/* glibc's _FORTIFY_SOURCE entry for open() with two arguments */
static int
wrap_open_2(const char *path, int flags)
{
	int			fd = open(path, flags);

	classify(fd, path, flags);
	return fd;
}

static int
wrap_openat(int dirfd, const char *path, int flags,...)
{
	va_list		ap;
	mode_t		mode;
	int			fd;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	fd = openat(dirfd, path, flags, mode);
	/* relative to a directory other than the working one: not ours */
	if (dirfd == AT_FDCWD || path[0] == '/')
		classify(fd, path, flags);
	else
		forget(fd);
	return fd;
}

static int
wrap_close(int fd)
{
	const WalFd *w = lookup(fd);

	if (w && w->kind == FD_WAL)
		ring_on_wal_close(w);
	forget(fd);
	return close(fd);
}

/* A descriptor duplicated from "oldfd" is what oldfd is. */
static int
inherit(int oldfd, int fd)
{
	if (fd >= 0 && fd < FD_TABLE_SIZE)
	{
		const WalFd *w = lookup(oldfd);

		if (w)
			fd_table[fd] = *w;
		else
			forget(fd);
	}
	return fd;
}

static int
wrap_dup(int oldfd)
{
	return inherit(oldfd, dup(oldfd));
}

static int
wrap_dup2(int oldfd, int newfd)
{
	return inherit(oldfd, dup2(oldfd, newfd));
}

static int
wrap_dup3(int oldfd, int newfd, int flags)
{
	return inherit(oldfd, dup3(oldfd, newfd, flags));
}

/* A write of any kind that is not a pwrite into a WAL segment. */
static void
before_other_write(int fd, const void *buf, size_t len)
{
	const WalFd *w = lookup(fd);

	if (w == NULL)
		return;
	if (w->kind == FD_CONTROL)
		ring_on_control_write(buf, len);
	else
		ring_on_wal_other_write(w);
}

static ssize_t
wrap_pwrite(int fd, const void *buf, size_t len, off_t offset)
{
	const WalFd *w = lookup(fd);

	if (w != NULL && w->kind != FD_CONTROL)
		return ring_on_wal_pwrite(fd, w, buf, len, offset);
	if (w != NULL)
		ring_on_control_write(offset == 0 ? buf : NULL, len);
	return pwrite(fd, buf, len, offset);
}

/* ... and after it (rc: what the call returned); errno is preserved. */
static ssize_t
after_other_write(int fd, ssize_t rc)
{
	const WalFd *w = lookup(fd);

	if (rc > 0 && w != NULL && w->kind != FD_CONTROL)
	{
		int			save_errno = errno;

		ring_after_wal_other_write(fd, w);
		errno = save_errno;
	}
	return rc;
}

static ssize_t
wrap_write(int fd, const void *buf, size_t len)
{
	before_other_write(fd, buf, len);
	return after_other_write(fd, write(fd, buf, len));
}

static ssize_t
wrap_writev(int fd, const struct iovec *iov, int iovcnt)
{
	before_other_write(fd, iovcnt > 0 ? iov[0].iov_base : NULL,
					   iovcnt > 0 ? iov[0].iov_len : 0);
	return after_other_write(fd, writev(fd, iov, iovcnt));
}

static ssize_t
wrap_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
	before_other_write(fd, iovcnt > 0 && offset == 0 ? iov[0].iov_base : NULL,
					   iovcnt > 0 ? iov[0].iov_len : 0);
	return after_other_write(fd, pwritev(fd, iov, iovcnt, offset));
}

/*
 * The checkpointer's sync of a file that is not WAL (a checkpoint's sync
 * phase): then pmwal syncs pg_wal, after it, so that the pg_control write
 * that follows finds little left to sync (wal_ring.c).
 */
static int
checkpointer_sync(int fd, bool datasync)
{
	int			rc = datasync ? fdatasync(fd) : fsync(fd);
	int			save_errno = errno;

	if (rc == 0)
		ring_on_checkpointer_sync();
	errno = save_errno;
	return rc;
}

static int
wrap_fdatasync(int fd)
{
	const WalFd *w = lookup(fd);

	if (w != NULL && w->kind != FD_CONTROL)
		return ring_on_wal_sync(fd, w, true);
	if (w == NULL && MyBackendType == B_CHECKPOINTER)
		return checkpointer_sync(fd, true);
	return fdatasync(fd);
}

static int
wrap_fsync(int fd)
{
	const WalFd *w = lookup(fd);

	if (w != NULL && w->kind != FD_CONTROL)
		return ring_on_wal_sync(fd, w, false);
	if (w == NULL && MyBackendType == B_CHECKPOINTER)
		return checkpointer_sync(fd, false);
	return fsync(fd);
}

/* ---------------------------------------------------------------------
 * Installing the wrappers into the server binary's GOT
 * --------------------------------------------------------------------- */

typedef struct Wrapper
{
	const char *name;
	void	   *fn;
} Wrapper;

static const Wrapper wrappers[] = {
	{"open", (void *) wrap_open},
	{"open64", (void *) wrap_open},	/* the same call on 64-bit systems */
	{"__open_2", (void *) wrap_open_2},
	{"__open64_2", (void *) wrap_open_2},
	{"openat", (void *) wrap_openat},
	{"openat64", (void *) wrap_openat},
	{"close", (void *) wrap_close},
	{"dup", (void *) wrap_dup},
	{"dup2", (void *) wrap_dup2},
	{"dup3", (void *) wrap_dup3},
	{"pwrite", (void *) wrap_pwrite},
	{"pwrite64", (void *) wrap_pwrite},
	{"write", (void *) wrap_write},
	{"writev", (void *) wrap_writev},
	{"pwritev", (void *) wrap_pwritev},
	{"pwritev64", (void *) wrap_pwritev},
	{"fsync", (void *) wrap_fsync},
	{"fdatasync", (void *) wrap_fdatasync},
};

/* Calls the server must make through the wrappers for pmwal to be sound. */
static const char *const required[] = {
	"open", "close", "pwrite", "write", "fsync", "fdatasync"
};

/* Calls that could write a WAL file behind pmwal's back. */
static const char *const unwrapped_writers[] = {
	"creat", "creat64", "pwritev2", "pwritev64v2", "__openat_2", "__openat64_2"
};

typedef struct Binary
{
	ElfW(Addr)	base;
	const ElfW(Phdr) *phdr;
	ElfW(Half)	phnum;
	bool		found;
} Binary;

static int
find_binary(struct dl_phdr_info *info, size_t size, void *arg)
{
	Binary	   *b = (Binary *) arg;

	/* the first object is the program itself */
	b->base = info->dlpi_addr;
	b->phdr = info->dlpi_phdr;
	b->phnum = info->dlpi_phnum;
	b->found = true;
	return 1;
}

/* A dynamic-section address: relocated in place by ld.so, or not. */
static ElfW(Addr)
dyn_addr(const Binary *b, ElfW(Addr) v)
{
	return v < b->base ? v + b->base : v;
}

static const Wrapper *
wrapper_for(const char *name)
{
	for (size_t i = 0; i < lengthof(wrappers); i++)
		if (strcmp(wrappers[i].name, name) == 0)
			return &wrappers[i];
	return NULL;
}

/* Store "fn" into the GOT slot, whatever the slot's page protection. */
static bool
patch_slot(void **slot, void *fn, ElfW(Addr) relro_start, ElfW(Addr) relro_end)
{
	long		pagesize = sysconf(_SC_PAGESIZE);
	ElfW(Addr)	page = (ElfW(Addr)) slot & ~((ElfW(Addr)) pagesize - 1);
	bool		relro = (ElfW(Addr)) slot >= relro_start && (ElfW(Addr)) slot < relro_end;

	if (mprotect((void *) page, pagesize, PROT_READ | PROT_WRITE) != 0)
		return false;
	*slot = fn;
	if (relro && mprotect((void *) page, pagesize, PROT_READ) != 0)
		return false;
	return *slot == fn;
}

/*
 * Check (apply = false) or apply the wrappers to one relocation table;
 * false with "failure" set.  "seen" marks the required calls found.
 */
static bool
patch_relocations(const Binary *b, const ElfW(Rela) *rela, size_t count,
				  const ElfW(Sym) *symtab, const char *strtab,
				  ElfW(Addr) relro_start, ElfW(Addr) relro_end,
				  bool apply, bool *seen)
{
	for (size_t i = 0; i < count; i++)
	{
		unsigned long type = ELF64_R_TYPE(rela[i].r_info);
		unsigned long symidx = ELF64_R_SYM(rela[i].r_info);
		const char *name;
		const Wrapper *w;

		if (symidx == 0 ||
			(type != RELOC_JUMP_SLOT && type != RELOC_GLOB_DAT && type != RELOC_ABS64))
			continue;
		name = strtab + symtab[symidx].st_name;
		for (size_t u = 0; u < lengthof(unwrapped_writers); u++)
			if (strcmp(name, unwrapped_writers[u]) == 0)
			{
				snprintf(failure, sizeof(failure),
						 "the server binary calls %s(), which pmwal does not interpose", name);
				return false;
			}
		if ((w = wrapper_for(name)) == NULL)
			continue;
		for (size_t r = 0; r < lengthof(required); r++)
			if (strcmp(name, required[r]) == 0)
				seen[r] = true;
		if (apply &&
			!patch_slot((void **) (b->base + rela[i].r_offset), w->fn,
						relro_start, relro_end))
		{
			snprintf(failure, sizeof(failure),
					 "could not redirect the server binary's calls of %s(): %m", name);
			return false;
		}
	}
	return true;
}

/*
 * Install the wrappers; in the postmaster (or a standalone backend), once.
 * Returns false, with *why saying why, when the binary cannot be
 * interposed; nothing is changed then.
 */
bool
pmwal_interpose_install(char **why)
{
#ifdef RELOC_JUMP_SLOT
	Binary		b = {0};
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Rela) *jmprel = NULL;
	const ElfW(Rela) *rela = NULL;
	size_t		jmprelsz = 0;
	size_t		relasz = 0;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	ElfW(Addr)	relro_start = 0;
	ElfW(Addr)	relro_end = 0;
	bool		seen[lengthof(required)] = {0};
	bool		pltrel_is_rela = true;

	*why = failure;
	if (interposed)
		return true;
	dl_iterate_phdr(find_binary, &b);
	if (!b.found)
	{
		snprintf(failure, sizeof(failure), "the server binary's program headers cannot be found");
		return false;
	}
	for (int i = 0; i < b.phnum; i++)
	{
		if (b.phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *) (b.base + b.phdr[i].p_vaddr);
		else if (b.phdr[i].p_type == PT_GNU_RELRO)
		{
			relro_start = b.base + b.phdr[i].p_vaddr;
			relro_end = relro_start + b.phdr[i].p_memsz;
		}
	}
	if (dyn == NULL)
	{
		snprintf(failure, sizeof(failure), "the server binary is linked statically");
		return false;
	}
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
	{
		switch (d->d_tag)
		{
			case DT_JMPREL:
				jmprel = (const ElfW(Rela) *) dyn_addr(&b, d->d_un.d_ptr);
				break;
			case DT_PLTRELSZ:
				jmprelsz = d->d_un.d_val;
				break;
			case DT_PLTREL:
				pltrel_is_rela = d->d_un.d_val == DT_RELA;
				break;
			case DT_RELA:
				rela = (const ElfW(Rela) *) dyn_addr(&b, d->d_un.d_ptr);
				break;
			case DT_RELASZ:
				relasz = d->d_un.d_val;
				break;
			case DT_SYMTAB:
				symtab = (const ElfW(Sym) *) dyn_addr(&b, d->d_un.d_ptr);
				break;
			case DT_STRTAB:
				strtab = (const char *) dyn_addr(&b, d->d_un.d_ptr);
				break;
		}
	}
	if (symtab == NULL || strtab == NULL || !pltrel_is_rela)
	{
		snprintf(failure, sizeof(failure), "the server binary's dynamic section is not one pmwal reads");
		return false;
	}
	/* check everything first, so that a refusal changes nothing */
	for (int apply = 0; apply <= 1; apply++)
	{
		if (!patch_relocations(&b, jmprel, jmprelsz / sizeof(ElfW(Rela)), symtab, strtab,
							   relro_start, relro_end, apply, seen) ||
			!patch_relocations(&b, rela, relasz / sizeof(ElfW(Rela)), symtab, strtab,
							   relro_start, relro_end, apply, seen))
			return false;
		for (size_t r = 0; r < lengthof(required); r++)
			if (!seen[r])
			{
				snprintf(failure, sizeof(failure),
						 "the server binary does not call %s() through its procedure linkage table",
						 required[r]);
				return false;
			}
	}
	interposed = true;
	return true;
#else
	snprintf(failure, sizeof(failure), "pmwal interposes WAL syncs on x86-64 and aarch64 only");
	*why = failure;
	return false;
#endif
}

bool
pmwal_interposed(void)
{
	return interposed;
}

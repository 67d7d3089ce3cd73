/*
 * bench/slowdisk.c -- a directory whose flushes take as long as a cloud
 * volume's, for bench/compare.sh -W (the standby's pg_wal on a slow disk).
 *
 *   slowdisk BACKING_DIR FLUSH_US MOUNTPOINT [fuse options]
 *
 * A FUSE file system that passes every operation through to BACKING_DIR,
 * with the kernel's writeback cache on, so that writes land in the page
 * cache as on any local file system and only a sync waits for the device.
 * Each fsync and fdatasync (and fsync of a directory) first syncs the
 * backing file for real and then waits until FLUSH_US microseconds have
 * passed since it began: the flush latency of a network block device (a
 * cloud volume's is 0.5-2 ms), where this machine's local disk takes about
 * 0.1 ms.  Concurrent syncs wait side by side, as concurrent flushes of a
 * network volume do.  Nothing else is slowed down; pmwal is not touched
 * (the latency lives in the storage, as dm-delay's would, and dm-delay is
 * not available here).
 *
 * Built by bench/compare.sh -W with the fuse3 development package; mounted
 * by the unprivileged benchmark user (fusermount3), so the files it creates
 * belong to that user.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int	backing_fd;			/* the backing directory */
static long flush_us;			/* the least time a sync takes */

/* A FUSE path ("/a/b") as a path relative to the backing directory. */
static const char *
rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

#define RET(expr) return (expr) < 0 ? -errno : 0

/* Sync fd for real, then wait out the rest of the flush latency. */
static int
slow_sync(int fd, int datasync)
{
	struct timespec start,
				now;
	long		elapsed_us;
	int			rc;

	clock_gettime(CLOCK_MONOTONIC, &start);
	rc = datasync ? fdatasync(fd) : fsync(fd);
	if (rc < 0)
		return -errno;
	clock_gettime(CLOCK_MONOTONIC, &now);
	elapsed_us = (now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000;
	if (elapsed_us < flush_us)
	{
		struct timespec rest = {(flush_us - elapsed_us) / 1000000L,
		((flush_us - elapsed_us) % 1000000L) * 1000};

		while (nanosleep(&rest, &rest) < 0 && errno == EINTR)
			;
	}
	return 0;
}

static void *
sd_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	/* writes go to the page cache; a sync writes them back, then flushes */
	if (conn->capable & FUSE_CAP_WRITEBACK_CACHE)
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	cfg->use_ino = 0;
	cfg->entry_timeout = 1.0;
	cfg->attr_timeout = 1.0;
	cfg->negative_timeout = 0;
	return NULL;
}

static int
sd_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	if (fi)
		RET(fstat(fi->fh, st));
	RET(fstatat(backing_fd, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int
sd_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t offset,
		   struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	int			fd = openat(backing_fd, rel(path), O_RDONLY | O_DIRECTORY);
	DIR		   *dir;
	struct dirent *de;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (dir == NULL)
	{
		int			err = errno;

		close(fd);
		return -err;
	}
	while ((de = readdir(dir)) != NULL)
	{
		struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t) de->d_type << 12};

		if (filler(buf, de->d_name, &st, 0, 0))
			break;
	}
	closedir(dir);
	return 0;
}

static int
sd_mkdir(const char *path, mode_t mode)
{
	RET(mkdirat(backing_fd, rel(path), mode));
}

static int
sd_rmdir(const char *path)
{
	RET(unlinkat(backing_fd, rel(path), AT_REMOVEDIR));
}

static int
sd_unlink(const char *path)
{
	RET(unlinkat(backing_fd, rel(path), 0));
}

static int
sd_rename(const char *from, const char *to, unsigned int flags)
{
	RET(renameat2(backing_fd, rel(from), backing_fd, rel(to), flags));
}

static int
sd_link(const char *from, const char *to)
{
	RET(linkat(backing_fd, rel(from), backing_fd, rel(to), 0));
}

static int
sd_symlink(const char *target, const char *path)
{
	RET(symlinkat(target, backing_fd, rel(path)));
}

static int
sd_readlink(const char *path, char *buf, size_t size)
{
	ssize_t		n = readlinkat(backing_fd, rel(path), buf, size - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int
sd_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	if (fi)
		RET(fchmod(fi->fh, mode));
	RET(fchmodat(backing_fd, rel(path), mode, 0));
}

static int
sd_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	int			fd,
				rc;

	if (fi)
		RET(ftruncate(fi->fh, size));
	fd = openat(backing_fd, rel(path), O_WRONLY);
	if (fd < 0)
		return -errno;
	rc = ftruncate(fd, size) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

static int
sd_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	if (fi)
		RET(futimens(fi->fh, tv));
	RET(utimensat(backing_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

/*
 * With the writeback cache the kernel reads pages that a write covers only
 * in part, and appends itself: a file opened write-only is opened for
 * reading too, and without O_APPEND.  O_DIRECT, O_SYNC and O_DSYNC stay
 * with the kernel, which sends a sync (slow_sync) after each such write;
 * the backing file is written through its page cache (FUSE's buffers are
 * not aligned for O_DIRECT).
 */
static int
backing_flags(int flags)
{
	if ((flags & O_ACCMODE) == O_WRONLY)
		flags = (flags & ~O_ACCMODE) | O_RDWR;
	return flags & ~(O_APPEND | O_DIRECT | O_SYNC | O_DSYNC);
}

static int
sd_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int			fd = openat(backing_fd, rel(path), backing_flags(fi->flags) | O_CREAT, mode);

	if (fd < 0)
		return -errno;
	fi->fh = fd;
	return 0;
}

static int
sd_open(const char *path, struct fuse_file_info *fi)
{
	int			fd = openat(backing_fd, rel(path), backing_flags(fi->flags));

	if (fd < 0)
		return -errno;
	fi->fh = fd;
	return 0;
}

static int
sd_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t		n = pread(fi->fh, buf, size, off);

	return n < 0 ? -errno : (int) n;
}

static int
sd_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t		n = pwrite(fi->fh, buf, size, off);

	return n < 0 ? -errno : (int) n;
}

static int
sd_statfs(const char *path, struct statvfs *st)
{
	RET(fstatvfs(backing_fd, st));
}

static int
sd_flush(const char *path, struct fuse_file_info *fi)
{
	return 0;					/* close(2) does not sync */
}

static int
sd_release(const char *path, struct fuse_file_info *fi)
{
	close(fi->fh);
	return 0;
}

static int
sd_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	return slow_sync(fi->fh, datasync);
}

static int
sd_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	int			fd = openat(backing_fd, rel(path), O_RDONLY | O_DIRECTORY);
	int			rc;

	if (fd < 0)
		return -errno;
	rc = slow_sync(fd, datasync);
	close(fd);
	return rc;
}

static int
sd_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	RET(fallocate(fi->fh, mode, off, len));
}

static const struct fuse_operations slowdisk_ops = {
	.init = sd_init,
	.getattr = sd_getattr,
	.readdir = sd_readdir,
	.mkdir = sd_mkdir,
	.rmdir = sd_rmdir,
	.unlink = sd_unlink,
	.rename = sd_rename,
	.link = sd_link,
	.symlink = sd_symlink,
	.readlink = sd_readlink,
	.chmod = sd_chmod,
	.truncate = sd_truncate,
	.utimens = sd_utimens,
	.create = sd_create,
	.open = sd_open,
	.read = sd_read,
	.write = sd_write,
	.statfs = sd_statfs,
	.flush = sd_flush,
	.release = sd_release,
	.fsync = sd_fsync,
	.fsyncdir = sd_fsyncdir,
	.fallocate = sd_fallocate,
};

int
main(int argc, char **argv)
{
	char	   *end;

	if (argc < 4)
	{
		fprintf(stderr, "usage: %s BACKING_DIR FLUSH_US MOUNTPOINT [fuse options]\n", argv[0]);
		return 2;
	}
	backing_fd = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (backing_fd < 0)
	{
		fprintf(stderr, "%s: cannot open the backing directory \"%s\": %s\n",
				argv[0], argv[1], strerror(errno));
		return 1;
	}
	flush_us = strtol(argv[2], &end, 10);
	if (*argv[2] == '\0' || *end != '\0' || flush_us < 0 || flush_us > 1000000)
	{
		fprintf(stderr, "%s: FLUSH_US must be 0-1000000 microseconds, not \"%s\"\n",
				argv[0], argv[2]);
		return 2;
	}
	umask(0);
	/* the program's name, then the mount point and FUSE's own options */
	argv[2] = argv[0];
	return fuse_main(argc - 2, argv + 2, &slowdisk_ops, NULL);
}

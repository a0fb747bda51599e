/*
 * ulfs.h - C interface of ulfs, an in-process POSIX file system.
 *
 * One host file (an "image") holds the whole file system. ulfs_mount() maps
 * it into this process's memory; after that, every call below is a plain
 * function call: no system call on the data path.
 *
 * Link with libulfs_c.a (add -lpthread -ldl -lm) or libulfs_c.so.
 * The declarations use POSIX types (ssize_t, off_t, struct timespec), so in
 * strict ISO C modes (-std=c99, -std=c11) define _POSIX_C_SOURCE=200809L (or
 * _GNU_SOURCE) before the first #include; gcc's default gnu modes need
 * nothing.
 *
 * Conventions, for every function below:
 *   - The first argument is the handle returned by ulfs_mount() (except for
 *     ulfs_mkfs() and ulfs_mount() themselves).
 *   - The signature mirrors the POSIX function of the same name without the
 *     "ulfs_" prefix. Flags and constants are the host's own (O_CREAT,
 *     SEEK_END, AT_SYMLINK_NOFOLLOW, UTIME_NOW, ...).
 *   - The return value is the result (0, a count, a descriptor, an offset)
 *     on success, or a negative errno value (-ENOENT, -EEXIST, ...; Linux
 *     numbers) on failure. errno is never set.
 *   - A NULL pointer where a pointer is required gives -EFAULT; a negative
 *     offset or length gives -EINVAL. A panic inside the library gives -EIO
 *     (it never crashes the caller), and the handle turns read-only: every
 *     change is then -EROFS, nothing more is committed, and the image is
 *     not marked clean (the half-done call may not be trusted).
 *   - A call that fails changes nothing on the image.
 *   - The first ulfs_mount() installs a SIGBUS handler for the process, so
 *     that a fault on an image's mapping (the image file truncated by
 *     another program, a device I/O error, a hole in a sparse image on a
 *     full host) becomes -EIO and a read-only handle instead of killing the
 *     process. Other SIGBUS signals go to the handler that was there
 *     before. A program that installs its own SIGBUS handler after mounting
 *     must call the one it replaces for signals that are not its own.
 *   - Paths are NUL-terminated byte strings inside the image, not required
 *     to be UTF-8; relative paths start at the handle's working directory
 *     (initially "/").
 *   - Descriptors are small integers private to one handle; they are not
 *     host descriptors.
 *   - By default a handle takes no lock: one thread at a time may call into
 *     it (different threads one after the other is fine). A handle mounted
 *     with ULFS_THREADSAFE may be used by any number of threads at once;
 *     each call then takes the handle's mutex. ulfs_unmount must still be
 *     the last call, made when no other thread is inside the handle.
 *     Different handles on different images are independent.
 *   - Byte counts of one read or write are capped at 0x7ffff000, as Linux.
 */
#ifndef ULFS_H
#define ULFS_H

#include <fcntl.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <time.h>

/* Declared by <sys/stat.h> only under _GNU_SOURCE; ulfs_statx takes a
 * pointer to it either way. */
struct statx;

#ifdef __cplusplus
extern "C" {
#endif

/* A mounted file system: an image, its descriptor table and working
 * directory. Opaque; created by ulfs_mount() (or ulfs_connect(), for an
 * image a server owns), freed by ulfs_unmount(). */
typedef struct ulfs ulfs_t;

/* ulfs_mount() flag: mount read-only (writes fail with -EROFS). */
#define ULFS_RDONLY 1
/* ulfs_mount flag: the handle may be shared by threads (see above). */
#define ULFS_THREADSAFE 2

/* ulfs_rename2() flags, as renameat2(2). */
#define ULFS_RENAME_NOREPLACE 1u /* fail with -EEXIST if newpath exists */
#define ULFS_RENAME_EXCHANGE 2u  /* atomically swap oldpath and newpath */

/* statfs() f_type of an ulfs file system ("ULFS"). */
#define ULFS_MAGIC 0x554c4653

/* ---------------------------------------------------------------------- */
/* Whole image                                                            */
/* ---------------------------------------------------------------------- */

/*
 * Creates an empty file system in the host file `image`, `size` bytes long,
 * or on a block device (its first `size` bytes, at most its size; 0 for all
 * of it). An image in use by a mount gives -EBUSY, even with `force`.
 *
 * `options` is NULL or a comma-separated list of:
 *   label=TEXT         volume label (UTF-8, at most 63 bytes, no comma)
 *   force              overwrite an existing non-empty file, or a device
 *                      that holds data (else -EEXIST)
 *   mode=journal       journaled metadata, crash-consistent (the default)
 *   mode=none          no journal: in place, as the published ULFS
 *   journal_blocks=N   journal size in 4 KiB blocks (decimal, N > 0)
 * An unknown or malformed option gives -EINVAL; empty items are ignored.
 *
 * Returns 0, or -errno.
 */
int ulfs_mkfs(const char *image, uint64_t size, const char *options);

/*
 * Mounts the file system in the host file `image`. `flags` is 0 or a mix of
 * ULFS_RDONLY and ULFS_THREADSAFE (anything else: EINVAL).
 *
 * Returns the handle, or NULL on failure with the *positive* errno stored in
 * *err when `err` is not NULL (e.g. ENOENT, EINVAL or EUCLEAN for a file that
 * is not a valid image, EBUSY for an image another mount holds: one
 * read-write mount, or any number of read-only ones, at a time).
 */
ulfs_t *ulfs_mount(const char *image, int flags, int *err);

/*
 * Connects to a server (`ulfs serve IMAGE --socket SOCKET`) that owns an
 * image, instead of mounting it here: several programs can then use one
 * image at once. The handle is a process of the server's, with its own
 * descriptors and working directory ("/"), and every call is judged by
 * this process's user and groups as the kernel reports them to the server
 * (a file this user may not read is -EACCES). Every ulfs_* call works on
 * the handle as on a mounted image; ulfs_unmount() disconnects (the server
 * closes the handle's descriptors and goes on serving others);
 * ulfs_set_memory_budget() is -EOPNOTSUPP. `flags` is 0 or
 * ULFS_THREADSAFE.
 *
 * Returns the handle, or NULL with the *positive* errno in *err (when `err`
 * is not NULL): ENOENT or ECONNREFUSED when no server listens at `socket`,
 * EPROTO for a server of another protocol version, EAGAIN when it serves
 * as many clients as it takes. Once the server is gone (stopped or
 * killed), calls on the handle fail with -ENOTCONN.
 */
ulfs_t *ulfs_connect(const char *socket, int flags, int *err);

/*
 * Flushes everything to the image, closes all descriptors and frees `fs`.
 * The handle is freed even when the flush fails; it must not be used again.
 *
 * Returns 0, or -errno.
 */
int ulfs_unmount(ulfs_t *fs);

/* Makes everything done so far durable, as syncfs(2). Returns 0 or -errno. */
int ulfs_sync(ulfs_t *fs);

/*
 * Fills *buf with file system statistics (f_type = ULFS_MAGIC, block size,
 * free blocks and inodes, ...) as statfs(2); `path` is any file inside.
 * Returns 0 or -errno.
 */
int ulfs_statfs(ulfs_t *fs, const char *path, struct statfs *buf);

/* ulfs_set_memory_budget() `bytes`: the budget the memory cgroup allows. */
#define ULFS_BUDGET_AUTO (-1)

/*
 * Keeps the image's file data mapped in within about `bytes` from now on:
 * past it, pages of file data already used are written back and dropped
 * (the first ones touched stay), and sequential reads are read ahead, so a
 * process under a memory limit streams through more data than fits without
 * thrashing. 0: no budget, the host's page cache decides. ULFS_BUDGET_AUTO:
 * half of what the process's memory cgroup leaves free (no budget without a
 * limit), which is also what every mount starts with. Metadata is never
 * dropped. Returns 0 or -errno (EINVAL for another negative `bytes`).
 */
int ulfs_set_memory_budget(ulfs_t *fs, int64_t bytes);

/* ---------------------------------------------------------------------- */
/* Paths                                                                  */
/* ---------------------------------------------------------------------- */

/*
 * Opens the file at `path` with the host's O_* `flags` (O_RDONLY, O_WRONLY,
 * O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY, O_NOFOLLOW, ...);
 * `mode` gives the permission bits of a file created by O_CREAT.
 * Returns the new descriptor (the lowest free one), or -errno.
 */
int ulfs_open(ulfs_t *fs, const char *path, int flags, mode_t mode);

/* Fills *st for `path`, following a final symlink. Returns 0 or -errno. */
int ulfs_stat(ulfs_t *fs, const char *path, struct stat *st);

/* Fills *st for `path`; a final symlink is described itself. 0 or -errno. */
int ulfs_lstat(ulfs_t *fs, const char *path, struct stat *st);

/* Creates directory `path` with permission bits `mode`. 0 or -errno. */
int ulfs_mkdir(ulfs_t *fs, const char *path, mode_t mode);

/* Removes the empty directory `path` (-ENOTEMPTY otherwise). 0 or -errno. */
int ulfs_rmdir(ulfs_t *fs, const char *path);

/*
 * Removes the name `path` (not a directory: -EISDIR). The file lives on
 * while descriptors refer to it. Returns 0 or -errno.
 */
int ulfs_unlink(ulfs_t *fs, const char *path);

/* Atomically renames `oldpath` to `newpath`, replacing it. 0 or -errno. */
int ulfs_rename(ulfs_t *fs, const char *oldpath, const char *newpath);

/*
 * As renameat2(2): `flags` is 0, ULFS_RENAME_NOREPLACE or
 * ULFS_RENAME_EXCHANGE. Returns 0 or -errno.
 */
int ulfs_rename2(ulfs_t *fs, const char *oldpath, const char *newpath,
                 unsigned flags);

/* Makes `newpath` another name (hard link) of `oldpath`. 0 or -errno. */
int ulfs_link(ulfs_t *fs, const char *oldpath, const char *newpath);

/* Creates symlink `linkpath` whose content is `target`. 0 or -errno. */
int ulfs_symlink(ulfs_t *fs, const char *target, const char *linkpath);

/*
 * Copies the content of symlink `path` into `buf`, as readlink(2): at most
 * `size` bytes, silently truncated, NOT NUL-terminated.
 * Returns the number of bytes copied, or -errno (-EINVAL if `path` is not a
 * symlink or `size` is 0).
 */
ssize_t ulfs_readlink(ulfs_t *fs, const char *path, char *buf, size_t size);

/* Sets the size of file `path` to `length` (zero-filling). 0 or -errno. */
int ulfs_truncate(ulfs_t *fs, const char *path, off_t length);

/* Sets the permission bits of `path`. Returns 0 or -errno. */
int ulfs_chmod(ulfs_t *fs, const char *path, mode_t mode);

/*
 * Sets owner and group of `path` (following a final symlink); (uid_t)-1 or
 * (gid_t)-1 leaves that field unchanged. No permission checks are made in
 * library mode. Returns 0 or -errno.
 */
int ulfs_chown(ulfs_t *fs, const char *path, uid_t owner, gid_t group);

/* As ulfs_chown(), but changes a final symlink itself. 0 or -errno. */
int ulfs_lchown(ulfs_t *fs, const char *path, uid_t owner, gid_t group);

/* Changes the handle's working directory to `path`. 0 or -errno. */
int ulfs_chdir(ulfs_t *fs, const char *path);

/*
 * Copies the absolute path of the working directory, NUL-terminated, into
 * `buf` of `size` bytes. Unlike getcwd(3) it returns an int:
 * the length of the path INCLUDING the terminating NUL on success,
 * -ERANGE if `size` is too small (buf is left unchanged),
 * -EFAULT if `buf` is NULL, or another -errno.
 */
int ulfs_getcwd(ulfs_t *fs, char *buf, size_t size);

/* ---------------------------------------------------------------------- */
/* Descriptors                                                            */
/* ---------------------------------------------------------------------- */

/* Closes `fd`. Returns 0 or -errno (-EBADF for a descriptor not open). */
int ulfs_close(ulfs_t *fs, int fd);

/*
 * Reads up to `count` bytes at the file offset into `buf` and advances the
 * offset. Returns the number of bytes read (0 at end of file) or -errno.
 */
ssize_t ulfs_read(ulfs_t *fs, int fd, void *buf, size_t count);

/*
 * Writes up to `count` bytes from `buf` at the file offset (at the end of
 * file with O_APPEND) and advances the offset. Returns the number of bytes
 * written or -errno.
 */
ssize_t ulfs_write(ulfs_t *fs, int fd, const void *buf, size_t count);

/* As ulfs_read() at `offset`; the file offset is unchanged. */
ssize_t ulfs_pread(ulfs_t *fs, int fd, void *buf, size_t count, off_t offset);

/* As ulfs_write() at `offset`; the file offset is unchanged. */
ssize_t ulfs_pwrite(ulfs_t *fs, int fd, const void *buf, size_t count,
                    off_t offset);

/*
 * Reads into `iovcnt` buffers in order, as readv(2) (iovcnt in 0..1024,
 * else -EINVAL). Returns the total number of bytes read or -errno.
 */
ssize_t ulfs_readv(ulfs_t *fs, int fd, const struct iovec *iov, int iovcnt);

/* Writes `iovcnt` buffers in order, as writev(2). Total bytes or -errno. */
ssize_t ulfs_writev(ulfs_t *fs, int fd, const struct iovec *iov, int iovcnt);

/*
 * Moves the file offset: `whence` is SEEK_SET, SEEK_CUR, SEEK_END,
 * SEEK_DATA or SEEK_HOLE. Returns the new offset or -errno (-EINVAL for a
 * resulting negative offset, -ENXIO for SEEK_DATA/SEEK_HOLE past the end).
 */
off_t ulfs_lseek(ulfs_t *fs, int fd, off_t offset, int whence);

/* Fills *st for the open file `fd`. Returns 0 or -errno. */
int ulfs_fstat(ulfs_t *fs, int fd, struct stat *st);

/*
 * Reads entries of the open directory `fd` into `dirp`, as getdents64(2):
 * a sequence of records laid out as
 *     struct linux_dirent64 {
 *         uint64_t d_ino; int64_t d_off; unsigned short d_reclen;
 *         unsigned char d_type; char d_name[];   // NUL-terminated
 *     };
 * each d_reclen bytes long (8-byte aligned); d_type is DT_DIR, DT_REG,
 * DT_LNK, ... and "." and ".." are included.
 * Returns the number of bytes filled, 0 at the end of the directory, or
 * -errno (-EINVAL if `count` is too small for the next record, -ENOTDIR if
 * `fd` is not a directory).
 */
ssize_t ulfs_getdents64(ulfs_t *fs, int fd, void *dirp, size_t count);

/* Sets the size of the open file to `length`. Returns 0 or -errno. */
int ulfs_ftruncate(ulfs_t *fs, int fd, off_t length);

/* Makes the file's data and metadata durable. Returns 0 or -errno. */
int ulfs_fsync(ulfs_t *fs, int fd);

/* Makes the file's data (and size) durable. Returns 0 or -errno. */
int ulfs_fdatasync(ulfs_t *fs, int fd);

/* As ulfs_utimensat() on the open file `fd` (futimens(3)). 0 or -errno. */
int ulfs_futimens(ulfs_t *fs, int fd, const struct timespec times[2]);

/* Sets the permission bits of the open file. Returns 0 or -errno. */
int ulfs_fchmod(ulfs_t *fs, int fd, mode_t mode);

/* As ulfs_chown() on the open file `fd`. Returns 0 or -errno. */
int ulfs_fchown(ulfs_t *fs, int fd, uid_t owner, gid_t group);

/*
 * Duplicates `oldfd` onto the lowest free descriptor; both share one file
 * offset and status flags. Returns the new descriptor or -errno.
 */
int ulfs_dup(ulfs_t *fs, int oldfd);

/*
 * Duplicates `oldfd` onto `newfd`, closing `newfd` first if it is open
 * (nothing happens if they are equal). Returns `newfd` or -errno.
 */
int ulfs_dup2(ulfs_t *fs, int oldfd, int newfd);

/*
 * Manipulates the byte range [offset, offset+len) of the open file, as
 * fallocate(2): mode 0 reserves the blocks and extends the size if needed;
 * other modes (FALLOC_FL_KEEP_SIZE, ...) give -EOPNOTSUPP where the library
 * does not support them. `offset` < 0 or `len` <= 0 gives -EINVAL.
 * Returns 0 or -errno.
 */
int ulfs_fallocate(ulfs_t *fs, int fd, int mode, off_t offset, off_t len);

/*
 * Directory-relative calls, as Linux defines them. `dirfd` is a directory
 * descriptor of this handle or AT_FDCWD (the handle's working directory);
 * an absolute path ignores it. A directory descriptor stays a valid
 * starting point after its directory is renamed. Each returns what its
 * POSIX namesake returns, or -errno.
 */

/* openat(2). Returns the new descriptor or -errno. */
int ulfs_openat(ulfs_t *fs, int dirfd, const char *path, int flags, mode_t mode);

/* mkdirat(2). */
int ulfs_mkdirat(ulfs_t *fs, int dirfd, const char *path, mode_t mode);

/*
 * mknodat(2). A regular file (type S_IFREG or 0) is created empty. ulfs does
 * not store FIFOs, sockets or device nodes: -EPERM, as a Linux file system
 * without mknod answers (after -EEXIST for a name in use). S_IFDIR gives
 * -EPERM, any other type -EINVAL.
 */
int ulfs_mknodat(ulfs_t *fs, int dirfd, const char *path, mode_t mode, dev_t dev);

/* unlinkat(2): flags 0 or AT_REMOVEDIR. */
int ulfs_unlinkat(ulfs_t *fs, int dirfd, const char *path, int flags);

/* renameat(2). */
int ulfs_renameat(ulfs_t *fs, int olddirfd, const char *oldpath,
                  int newdirfd, const char *newpath);

/* renameat2(2): flags 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
int ulfs_renameat2(ulfs_t *fs, int olddirfd, const char *oldpath,
                   int newdirfd, const char *newpath, unsigned int flags);

/* linkat(2): flags 0, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH. */
int ulfs_linkat(ulfs_t *fs, int olddirfd, const char *oldpath,
                int newdirfd, const char *newpath, int flags);

/* symlinkat(2): a symlink `linkpath` (relative to newdirfd) holding `target`. */
int ulfs_symlinkat(ulfs_t *fs, const char *target, int newdirfd,
                   const char *linkpath);

/* readlinkat(2): as ulfs_readlink(), `path` relative to `dirfd`. */
ssize_t ulfs_readlinkat(ulfs_t *fs, int dirfd, const char *path, char *buf,
                        size_t size);

/* fstatat(2): flags 0, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, AT_NO_AUTOMOUNT. */
int ulfs_fstatat(ulfs_t *fs, int dirfd, const char *path, struct stat *st,
                 int flags);

/*
 * statx(2): flags as ulfs_fstatat's plus AT_STATX_FORCE_SYNC or
 * AT_STATX_DONT_SYNC (no effect: the handle is never out of date); `mask`
 * asks for fields. stx_mask says which are filled: STATX_BASIC_STATS, plus
 * STATX_BTIME (the birth time) when asked for.
 */
int ulfs_statx(ulfs_t *fs, int dirfd, const char *path, int flags,
               unsigned int mask, struct statx *stx);

/*
 * faccessat(2) with glibc's flags (the faccessat2 system call): `mode` is
 * F_OK or any of R_OK | W_OK | X_OK; flags 0, AT_EACCESS,
 * AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH. The permission bits are judged as
 * the kernel would for this process: its real ids (effective ones with
 * AT_EACCESS) and supplementary groups, root reading and writing anything
 * and executing what has an execute bit. Only the file itself is judged,
 * not search permission on the directories leading to it (no ulfs call
 * checks permissions: the library serves one program). Write access on a
 * read-only handle is -EROFS.
 */
int ulfs_faccessat(ulfs_t *fs, int dirfd, const char *path, int mode, int flags);

/* access(2): ulfs_faccessat(fs, AT_FDCWD, path, mode, 0). */
int ulfs_access(ulfs_t *fs, const char *path, int mode);

/*
 * fchmodat(2): flags 0, AT_SYMLINK_NOFOLLOW (-EOPNOTSUPP on a symlink, as
 * Linux), AT_EMPTY_PATH.
 */
int ulfs_fchmodat(ulfs_t *fs, int dirfd, const char *path, mode_t mode,
                  int flags);

/*
 * fchownat(2): (uid_t)-1 / (gid_t)-1 leave an id unchanged; flags 0,
 * AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
 */
int ulfs_fchownat(ulfs_t *fs, int dirfd, const char *path, uid_t owner,
                  gid_t group, int flags);

/*
 * utimensat(2): sets access (times[0]) and modification (times[1]) times.
 * `times` NULL means both now; a tv_nsec of UTIME_NOW or UTIME_OMIT means
 * now / unchanged; any other tv_nsec outside 0..999999999 gives -EINVAL.
 * flags 0, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH.
 */
int ulfs_utimensat(ulfs_t *fs, int dirfd, const char *path,
                   const struct timespec times[2], int flags);

/* fchdir(2): the directory open as `fd` becomes the working directory. */
int ulfs_fchdir(ulfs_t *fs, int fd);

#ifdef __cplusplus
}
#endif

#endif /* ULFS_H */

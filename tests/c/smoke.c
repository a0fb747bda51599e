/*
 * smoke.c - end-to-end check of the ulfs C ABI through include/ulfs.h.
 *
 * Usage: smoke IMAGE-PATH   (the file is created; it should not exist)
 *
 * Creates a file system in IMAGE-PATH, exercises the calls of the header,
 * unmounts, remounts and checks that the data persisted. Prints one line
 * "ok <check>" per check and stops with "FAIL <check>: ..." and exit status 1
 * at the first failure. Run by crates/ulfs-capi/tests/c_program.rs, linked
 * once against libulfs_c.a and once against libulfs_c.so.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ulfs.h"

static int checks;

/* Fails the program unless `cond` holds; `what` names the check. */
#define CHECK(cond, what, ...)                                                 \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("FAIL " what ": " #cond "\n", ##__VA_ARGS__);               \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
        checks++;                                                              \
        printf("ok " what "\n", ##__VA_ARGS__);                                \
    } while (0)

/* Fails unless the call `expr` returned exactly `want` (printing both). */
#define CHECK_EQ(expr, want, what)                                             \
    do {                                                                       \
        long long got_ = (long long)(expr);                                    \
        long long want_ = (long long)(want);                                   \
        if (got_ != want_) {                                                   \
            printf("FAIL %s: %s returned %lld (%s), wanted %lld\n", what,      \
                   #expr, got_, got_ < 0 ? strerror((int)-got_) : "-",         \
                   want_);                                                     \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
        checks++;                                                              \
        printf("ok %s\n", what);                                               \
    } while (0)

/* Fails unless `expr` is >= 0; yields its value. */
static long long must(long long v, const char *expr, const char *what) {
    if (v < 0) {
        printf("FAIL %s: %s returned %lld (%s)\n", what, expr, v,
               strerror((int)-v));
        fflush(stdout);
        exit(1);
    }
    checks++;
    printf("ok %s\n", what);
    return v;
}
#define MUST(expr, what) must((long long)(expr), #expr, what)

/* The record layout getdents64 fills (glibc does not declare it). */
struct dirent64_rec {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Reads the directory `fd` with a buffer of `bufsize` bytes; records in
 * `found[i]` the d_type of each entry of `names` (0 if absent) and returns
 * the number of entries seen. */
static int walk_dir(ulfs_t *fs, int fd, size_t bufsize, const char **names,
                    int n, unsigned char *found) {
    char buf[4096] __attribute__((aligned(8)));
    int seen = 0;
    memset(found, 0, (size_t)n);
    for (;;) {
        ssize_t got = ulfs_getdents64(fs, fd, buf, bufsize);
        if (got < 0) {
            printf("FAIL getdents64(bufsize %zu): %s\n", bufsize,
                   strerror((int)-got));
            exit(1);
        }
        if (got == 0)
            break;
        for (ssize_t pos = 0; pos < got;) {
            struct dirent64_rec *d = (struct dirent64_rec *)(buf + pos);
            if (d->d_reclen == 0 || pos + d->d_reclen > got ||
                d->d_reclen % 8 != 0 || d->d_ino == 0) {
                printf("FAIL getdents64: bad record at %zd (reclen %u)\n", pos,
                       d->d_reclen);
                exit(1);
            }
            for (int i = 0; i < n; i++)
                if (strcmp(d->d_name, names[i]) == 0)
                    found[i] = d->d_type ? d->d_type : 0xff;
            seen++;
            pos += d->d_reclen;
        }
    }
    return seen;
}

static int read_all(ulfs_t *fs, const char *path, char *buf, size_t size) {
    int fd = ulfs_open(fs, path, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    ssize_t n = ulfs_read(fs, fd, buf, size);
    ulfs_close(fs, fd);
    return (int)n;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE-PATH\n", argv[0]);
        return 2;
    }
    const char *image = argv[1];
    char buf[256];
    struct stat st;
    int err = 0;

    /* --- mkfs and mount --- */
    CHECK_EQ(ulfs_mkfs(image, 1 << 20, "bogus"), -EINVAL, "mkfs rejects unknown option");
    CHECK_EQ(ulfs_mkfs(NULL, 1 << 20, NULL), -EFAULT, "mkfs NULL image is EFAULT");
    CHECK_EQ(ulfs_mkfs(image, 64 << 20, "label=smoke"), 0, "mkfs");
    CHECK_EQ(ulfs_mkfs(image, 64 << 20, NULL), -EEXIST, "mkfs refuses a non-empty file without force");
    CHECK_EQ(ulfs_mkfs(image, 64 << 20, "label=smoke,force"), 0, "mkfs force");

    CHECK(ulfs_mount(image, 4, &err) == NULL && err == EINVAL, "mount rejects unknown flags");
    CHECK(ulfs_mount(NULL, 0, &err) == NULL && err == EFAULT, "mount NULL image is EFAULT");
    CHECK(ulfs_mount("/nonexistent/ulfs.img", 0, &err) == NULL && err == ENOENT,
          "mount missing image is ENOENT");
    CHECK(ulfs_mount("/nonexistent/ulfs.img", 0, NULL) == NULL, "mount accepts NULL err");
    err = 0;
    ulfs_t *fs = ulfs_mount(image, 0, &err);
    CHECK(fs != NULL, "mount (err %d)", err);

    /* --- directories and a file --- */
    CHECK_EQ(ulfs_mkdir(fs, "/d", 0755), 0, "mkdir /d");
    CHECK_EQ(ulfs_mkdir(fs, "/d/sub", 0700), 0, "mkdir /d/sub");
    int fd = (int)MUST(ulfs_open(fs, "/d/f", O_CREAT | O_RDWR, 0644), "open O_CREAT /d/f");

    /* --- write, read, pread, pwrite --- */
    CHECK_EQ(ulfs_write(fs, fd, "hello world\n", 12), 12, "write 12 bytes");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_CUR), 12, "offset advanced to 12");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_SET), 0, "lseek SEEK_SET 0");
    memset(buf, 0, sizeof buf);
    CHECK_EQ(ulfs_read(fs, fd, buf, sizeof buf), 12, "read back 12 bytes");
    CHECK(memcmp(buf, "hello world\n", 12) == 0, "read data matches");
    CHECK_EQ(ulfs_read(fs, fd, buf, sizeof buf), 0, "read at EOF is 0");
    CHECK_EQ(ulfs_pwrite(fs, fd, "WORLD", 5, 6), 5, "pwrite at 6");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_CUR), 12, "pwrite left the offset alone");
    CHECK_EQ(ulfs_pread(fs, fd, buf, 5, 6), 5, "pread at 6");
    CHECK(memcmp(buf, "WORLD", 5) == 0, "pread data matches");
    CHECK_EQ(ulfs_pread(fs, fd, buf, 5, -1), -EINVAL, "pread negative offset is EINVAL");
    CHECK_EQ(ulfs_pwrite(fs, fd, buf, 5, -1), -EINVAL, "pwrite negative offset is EINVAL");
    CHECK_EQ(ulfs_pread(fs, fd, NULL, 4, 0), -EFAULT, "read into NULL is EFAULT");

    /* --- lseek, writev, readv --- */
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_END), 12, "lseek SEEK_END 0");
    CHECK_EQ(ulfs_lseek(fs, fd, -5, SEEK_END), 7, "lseek SEEK_END -5");
    CHECK_EQ(ulfs_lseek(fs, fd, -100, SEEK_CUR), -EINVAL, "lseek before 0 is EINVAL");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_END), 12, "lseek back to the end");
    struct iovec wv[3] = {
        {.iov_base = "abc", .iov_len = 3},
        {.iov_base = NULL, .iov_len = 0},
        {.iov_base = "defg", .iov_len = 4},
    };
    CHECK_EQ(ulfs_writev(fs, fd, wv, 3), 7, "writev 3 iovecs");
    CHECK_EQ(ulfs_writev(fs, fd, wv, -1), -EINVAL, "writev negative count is EINVAL");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_SET), 0, "rewind");
    char r1[10], r2[32];
    struct iovec rv[2] = {{.iov_base = r1, .iov_len = sizeof r1},
                          {.iov_base = r2, .iov_len = sizeof r2}};
    CHECK_EQ(ulfs_readv(fs, fd, rv, 2), 19, "readv 2 iovecs");
    CHECK(memcmp(r1, "hello WORL", 10) == 0 && memcmp(r2, "D\nabcdefg", 9) == 0,
          "readv data matches");

    /* --- fstat --- */
    MUST(ulfs_fstat(fs, fd, &st), "fstat");
    CHECK(st.st_size == 19, "fstat st_size 19 (got %lld)", (long long)st.st_size);
    CHECK(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644,
          "fstat st_mode regular 0644 (got %o)", (unsigned)st.st_mode);
    CHECK(st.st_nlink == 1, "fstat st_nlink 1");
    CHECK(st.st_ino != 0, "fstat st_ino nonzero");
    CHECK(st.st_blksize > 0 && (st.st_blksize & (st.st_blksize - 1)) == 0,
          "fstat st_blksize power of two (got %ld)", (long)st.st_blksize);
    CHECK(st.st_blocks > 0, "fstat st_blocks nonzero");
    CHECK(st.st_atim.tv_sec > 0 && st.st_mtim.tv_sec > 0 && st.st_ctim.tv_sec > 0,
          "fstat timestamps nonzero");
    ino_t f_ino = st.st_ino;
    CHECK_EQ(ulfs_fstat(fs, fd, NULL), -EFAULT, "fstat NULL buffer is EFAULT");

    /* --- getdents64 --- */
    int dfd = (int)MUST(ulfs_open(fs, "/d", O_RDONLY | O_DIRECTORY, 0), "open /d O_DIRECTORY");
    const char *names[] = {".", "..", "sub", "f"};
    unsigned char found[4];
    int seen = walk_dir(fs, dfd, 4096, names, 4, found);
    CHECK(seen == 4, "getdents64 sees 4 entries (got %d)", seen);
    CHECK(found[0] == DT_DIR && found[1] == DT_DIR, "getdents64 has . and .. as DT_DIR");
    CHECK(found[2] == DT_DIR, "getdents64 has sub as DT_DIR (d_type %u)", found[2]);
    CHECK(found[3] == DT_REG, "getdents64 has f as DT_REG (d_type %u)", found[3]);
    CHECK_EQ(ulfs_lseek(fs, dfd, 0, SEEK_SET), 0, "rewind directory");
    seen = walk_dir(fs, dfd, 32, names, 4, found);
    CHECK(seen == 4 && found[2] && found[3], "getdents64 with a 32-byte buffer");
    CHECK_EQ(ulfs_getdents64(fs, fd, buf, sizeof buf), -ENOTDIR, "getdents64 on a file is ENOTDIR");
    CHECK_EQ(ulfs_close(fs, dfd), 0, "close directory");

    /* --- rename, link, symlink --- */
    CHECK_EQ(ulfs_rename(fs, "/d/f", "/d/g"), 0, "rename /d/f /d/g");
    CHECK_EQ(ulfs_stat(fs, "/d/f", &st), -ENOENT, "old name is gone");
    MUST(ulfs_stat(fs, "/d/g", &st), "stat new name");
    CHECK(st.st_ino == f_ino && st.st_size == 19, "renamed file keeps inode and size");
    CHECK_EQ(ulfs_link(fs, "/d/g", "/d/h"), 0, "link /d/g /d/h");
    MUST(ulfs_fstat(fs, fd, &st), "fstat after link");
    CHECK(st.st_nlink == 2, "nlink is 2 after link (got %lu)", (unsigned long)st.st_nlink);
    CHECK_EQ(ulfs_symlink(fs, "g", "/d/s"), 0, "symlink g /d/s");
    CHECK_EQ(ulfs_readlink(fs, "/d/s", buf, sizeof buf), 1, "readlink length");
    CHECK(buf[0] == 'g', "readlink content");
    CHECK_EQ(ulfs_symlink(fs, "/d/sub/../g", "/d/long"), 0, "symlink with a longer target");
    CHECK_EQ(ulfs_readlink(fs, "/d/long", buf, 4), 4, "readlink truncates");
    CHECK(memcmp(buf, "/d/s", 4) == 0, "readlink truncated content");
    CHECK_EQ(ulfs_readlink(fs, "/d/g", buf, sizeof buf), -EINVAL, "readlink on a file is EINVAL");
    MUST(ulfs_lstat(fs, "/d/s", &st), "lstat symlink");
    CHECK(S_ISLNK(st.st_mode) && st.st_size == 1, "lstat sees a symlink of size 1");
    MUST(ulfs_stat(fs, "/d/s", &st), "stat through symlink");
    CHECK(S_ISREG(st.st_mode) && st.st_ino == f_ino, "stat follows the symlink");

    /* --- truncate, ftruncate, fallocate --- */
    CHECK_EQ(ulfs_truncate(fs, "/d/h", 5), 0, "truncate to 5");
    MUST(ulfs_fstat(fs, fd, &st), "fstat after truncate");
    CHECK(st.st_size == 5, "size is 5 after truncate");
    CHECK_EQ(ulfs_truncate(fs, "/d/h", -1), -EINVAL, "truncate negative is EINVAL");
    CHECK_EQ(ulfs_ftruncate(fs, fd, 8), 0, "ftruncate to 8");
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(ulfs_pread(fs, fd, buf, sizeof buf, 0), 8, "pread after ftruncate");
    CHECK(memcmp(buf, "hello\0\0\0", 8) == 0, "ftruncate zero-fills");
    int fa = (int)MUST(ulfs_open(fs, "/d/big", O_CREAT | O_WRONLY | O_EXCL, 0600), "create /d/big");
    CHECK_EQ(ulfs_fallocate(fs, fa, 0, 0, 8192), 0, "fallocate 8192");
    MUST(ulfs_fstat(fs, fa, &st), "fstat after fallocate");
    CHECK(st.st_size == 8192, "fallocate extends the size (got %lld)", (long long)st.st_size);
    CHECK_EQ(ulfs_fallocate(fs, fa, 0, 0, 0), -EINVAL, "fallocate zero length is EINVAL");
    CHECK_EQ(ulfs_close(fs, fa), 0, "close /d/big");

    /* --- metadata: chmod, chown, utimensat, futimens --- */
    CHECK_EQ(ulfs_chmod(fs, "/d/g", 0600), 0, "chmod 0600");
    CHECK_EQ(ulfs_fchmod(fs, fd, 0640), 0, "fchmod 0640");
    CHECK_EQ(ulfs_chown(fs, "/d/g", 1234, (gid_t)-1), 0, "chown uid 1234");
    CHECK_EQ(ulfs_fchown(fs, fd, (uid_t)-1, 4321), 0, "fchown gid 4321");
    struct timespec times[2] = {{.tv_sec = 1000000000, .tv_nsec = 5},
                                {.tv_sec = 1234567890, .tv_nsec = 123456789}};
    CHECK_EQ(ulfs_utimensat(fs, AT_FDCWD, "/d/g", times, 0), 0, "utimensat");
    MUST(ulfs_stat(fs, "/d/g", &st), "stat after metadata changes");
    CHECK((st.st_mode & 07777) == 0640, "mode is 0640");
    CHECK(st.st_uid == 1234 && st.st_gid == 4321, "owner is 1234:4321");
    CHECK(st.st_atim.tv_sec == 1000000000 && st.st_atim.tv_nsec == 5 &&
              st.st_mtim.tv_sec == 1234567890 && st.st_mtim.tv_nsec == 123456789,
          "utimensat set both times");
    struct timespec bad[2] = {{0, -2}, {0, 0}};
    CHECK_EQ(ulfs_utimensat(fs, AT_FDCWD, "/d/g", bad, 0), -EINVAL, "utimensat bad tv_nsec is EINVAL");
    int nfd = (int)MUST(ulfs_open(fs, "/d/now", O_CREAT | O_WRONLY, 0644), "create /d/now");
    CHECK_EQ(ulfs_close(fs, nfd), 0, "close /d/now");
    CHECK_EQ(ulfs_futimens(fs, fd, NULL), 0, "futimens NULL (now)");
    MUST(ulfs_fstat(fs, fd, &st), "fstat after futimens");
    CHECK(st.st_mtim.tv_sec > 1234567890, "futimens NULL set mtime to now");

    /* --- statfs, sync --- */
    struct statfs sf;
    CHECK_EQ(ulfs_statfs(fs, "/", &sf), 0, "statfs");
    CHECK(sf.f_type == ULFS_MAGIC, "statfs f_type is ULFS_MAGIC");
    CHECK(sf.f_bsize > 0 && sf.f_blocks > 0 && sf.f_bfree <= sf.f_blocks &&
              sf.f_bavail <= sf.f_blocks && sf.f_files > 0,
          "statfs counts plausible");
    CHECK_EQ(ulfs_fsync(fs, fd), 0, "fsync");
    CHECK_EQ(ulfs_fdatasync(fs, fd), 0, "fdatasync");
    CHECK_EQ(ulfs_sync(fs), 0, "sync");

    /* --- dup, dup2 --- */
    int fd2 = (int)MUST(ulfs_dup(fs, fd), "dup");
    CHECK(fd2 != fd, "dup gives a new descriptor");
    CHECK_EQ(ulfs_lseek(fs, fd, 0, SEEK_SET), 0, "rewind original");
    CHECK_EQ(ulfs_read(fs, fd, buf, 2), 2, "read 2 via original");
    CHECK_EQ(ulfs_lseek(fs, fd2, 0, SEEK_CUR), 2, "dup shares the offset");
    CHECK_EQ(ulfs_dup2(fs, fd, 50), 50, "dup2 onto 50");
    CHECK_EQ(ulfs_read(fs, 50, buf, 3), 3, "read via dup2 descriptor");
    CHECK(memcmp(buf, "llo", 3) == 0, "dup2 descriptor shares the offset");
    CHECK_EQ(ulfs_close(fs, 50), 0, "close 50");
    CHECK_EQ(ulfs_close(fs, fd2), 0, "close dup");

    /* --- chdir, getcwd, relative paths --- */
    CHECK_EQ(ulfs_chdir(fs, "/d/sub"), 0, "chdir /d/sub");
    CHECK_EQ(ulfs_getcwd(fs, buf, sizeof buf), 7, "getcwd returns length with NUL");
    CHECK(strcmp(buf, "/d/sub") == 0, "getcwd is /d/sub (got %s)", buf);
    CHECK_EQ(ulfs_getcwd(fs, buf, 6), -ERANGE, "getcwd small buffer is ERANGE");
    CHECK_EQ(ulfs_getcwd(fs, NULL, 64), -EFAULT, "getcwd NULL is EFAULT");
    int rfd = (int)MUST(ulfs_open(fs, "rel", O_CREAT | O_WRONLY, 0644), "open relative path");
    CHECK_EQ(ulfs_write(fs, rfd, "relative", 8), 8, "write relative file");
    CHECK_EQ(ulfs_close(fs, rfd), 0, "close relative file");
    MUST(ulfs_stat(fs, "/d/sub/rel", &st), "relative file is in /d/sub");
    CHECK_EQ(ulfs_chdir(fs, ".."), 0, "chdir ..");
    CHECK_EQ(ulfs_getcwd(fs, buf, sizeof buf), 3, "getcwd after chdir ..");
    CHECK(strcmp(buf, "/d") == 0, "getcwd is /d");
    CHECK_EQ(ulfs_chdir(fs, "g"), -ENOTDIR, "chdir to a file is ENOTDIR");
    CHECK_EQ(ulfs_chdir(fs, "/"), 0, "chdir /");

    /* --- directory-relative calls --- */
    CHECK_EQ(ulfs_mkdirat(fs, AT_FDCWD, "/at", 0755), 0, "mkdirat AT_FDCWD");
    int afd = (int)MUST(ulfs_open(fs, "/at", O_RDONLY | O_DIRECTORY, 0), "open /at");
    CHECK_EQ(ulfs_mkdirat(fs, afd, "sub", 0700), 0, "mkdirat relative to a dirfd");
    int ofd = (int)MUST(ulfs_openat(fs, afd, "sub/f", O_CREAT | O_WRONLY, 0640), "openat relative");
    CHECK_EQ(ulfs_write(fs, ofd, "at!", 3), 3, "write through openat");
    CHECK_EQ(ulfs_close(fs, ofd), 0, "close openat file");
    CHECK_EQ(ulfs_rename(fs, "/at", "/at2"), 0, "rename the directory under its descriptor");
    MUST(ulfs_fstatat(fs, afd, "sub/f", &st, 0), "fstatat after the rename");
    CHECK(st.st_size == 3 && (st.st_mode & 0777) == 0640, "fstatat sees the file");
    CHECK_EQ(ulfs_symlinkat(fs, "sub/f", afd, "ln"), 0, "symlinkat");
    CHECK_EQ(ulfs_readlinkat(fs, afd, "ln", buf, sizeof buf), 5, "readlinkat");
    CHECK(memcmp(buf, "sub/f", 5) == 0, "readlinkat content");
    MUST(ulfs_fstatat(fs, afd, "ln", &st, AT_SYMLINK_NOFOLLOW), "fstatat NOFOLLOW");
    CHECK(S_ISLNK(st.st_mode), "fstatat NOFOLLOW sees the link");
    MUST(ulfs_fstatat(fs, afd, "", &st, AT_EMPTY_PATH), "fstatat AT_EMPTY_PATH");
    CHECK(S_ISDIR(st.st_mode), "fstatat AT_EMPTY_PATH stats the dirfd");
    struct statx stx;
    memset(&stx, 0xff, sizeof stx);
    CHECK_EQ(ulfs_statx(fs, afd, "sub/f", 0, STATX_BASIC_STATS | STATX_BTIME, &stx), 0, "statx");
    CHECK((stx.stx_mask & (STATX_BASIC_STATS | STATX_BTIME)) == (STATX_BASIC_STATS | STATX_BTIME) &&
              stx.stx_size == 3 && stx.stx_btime.tv_sec > 0 && stx.stx_attributes == 0,
          "statx fields and mask");
    CHECK_EQ(ulfs_statx(fs, afd, "sub/f", 0, 0x80000000u, &stx), -EINVAL, "statx reserved mask bit");
    CHECK_EQ(ulfs_faccessat(fs, afd, "sub/f", F_OK, 0), 0, "faccessat F_OK");
    CHECK_EQ(ulfs_faccessat(fs, afd, "nope", F_OK, 0), -ENOENT, "faccessat missing is ENOENT");
    CHECK_EQ(ulfs_faccessat(fs, afd, "sub/f", 0x40, 0), -EINVAL, "faccessat bad mode");
    CHECK_EQ(ulfs_access(fs, "/at2/sub/f", R_OK), 0, "access R_OK");
    CHECK_EQ(ulfs_mknodat(fs, afd, "node", S_IFREG | 0600, 0), 0, "mknodat regular");
    CHECK_EQ(ulfs_mknodat(fs, afd, "fifo", S_IFIFO | 0600, 0), -EPERM, "mknodat FIFO is EPERM");
    CHECK_EQ(ulfs_mknodat(fs, afd, "node", S_IFIFO | 0600, 0), -EEXIST, "mknodat existing is EEXIST");
    CHECK_EQ(ulfs_fchmodat(fs, afd, "node", 0604, 0), 0, "fchmodat");
    CHECK_EQ(ulfs_fchownat(fs, afd, "node", 7, 8, 0), 0, "fchownat");
    MUST(ulfs_fstatat(fs, afd, "node", &st, 0), "fstatat node");
    CHECK(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0604 && st.st_uid == 7 && st.st_gid == 8,
          "mknodat, fchmodat, fchownat");
    CHECK_EQ(ulfs_linkat(fs, afd, "node", AT_FDCWD, "/at2/node2", 0), 0, "linkat");
    CHECK_EQ(ulfs_renameat2(fs, afd, "node", afd, "node2", RENAME_EXCHANGE), 0, "renameat2 EXCHANGE");
    CHECK_EQ(ulfs_renameat(fs, afd, "node2", afd, "node3"), 0, "renameat");
    struct timespec at_times[2] = {{5, 0}, {6, 0}};
    CHECK_EQ(ulfs_utimensat(fs, afd, "ln", at_times, AT_SYMLINK_NOFOLLOW), 0, "utimensat NOFOLLOW");
    MUST(ulfs_fstatat(fs, afd, "ln", &st, AT_SYMLINK_NOFOLLOW), "fstatat link times");
    CHECK(st.st_mtim.tv_sec == 6 && st.st_atim.tv_sec == 5, "utimensat set the link's times");
    CHECK_EQ(ulfs_unlinkat(fs, afd, "sub", AT_REMOVEDIR), -ENOTEMPTY, "unlinkat non-empty dir");
    CHECK_EQ(ulfs_unlinkat(fs, afd, "sub/f", 0), 0, "unlinkat file");
    CHECK_EQ(ulfs_unlinkat(fs, afd, "sub", AT_REMOVEDIR), 0, "unlinkat AT_REMOVEDIR");
    CHECK_EQ(ulfs_fchdir(fs, afd), 0, "fchdir");
    CHECK_EQ(ulfs_getcwd(fs, buf, sizeof buf), 5, "getcwd after fchdir");
    CHECK(strcmp(buf, "/at2") == 0, "fchdir went to the renamed directory (got %s)", buf);
    CHECK_EQ(ulfs_chdir(fs, "/"), 0, "chdir / again");
    CHECK_EQ(ulfs_close(fs, afd), 0, "close /at2");

    /* --- error cases --- */
    CHECK_EQ(ulfs_open(fs, "/nope", O_RDONLY, 0), -ENOENT, "open missing is ENOENT");
    CHECK_EQ(ulfs_open(fs, "/d/nope/x", O_CREAT | O_WRONLY, 0644), -ENOENT, "create under missing dir is ENOENT");
    CHECK_EQ(ulfs_open(fs, "/d/g", O_CREAT | O_EXCL | O_WRONLY, 0644), -EEXIST, "O_EXCL on existing is EEXIST");
    CHECK_EQ(ulfs_mkdir(fs, "/d", 0755), -EEXIST, "mkdir existing is EEXIST");
    CHECK_EQ(ulfs_rmdir(fs, "/d"), -ENOTEMPTY, "rmdir non-empty is ENOTEMPTY");
    CHECK_EQ(ulfs_close(fs, 999), -EBADF, "close unknown fd is EBADF");
    CHECK_EQ(ulfs_read(fs, -1, buf, 1), -EBADF, "read fd -1 is EBADF");
    CHECK_EQ(ulfs_open(fs, "/d/g/x", O_CREAT | O_WRONLY, 0644), -ENOTDIR, "file as directory is ENOTDIR");
    CHECK_EQ(ulfs_stat(fs, "/d/g/x", &st), -ENOTDIR, "stat through a file is ENOTDIR");
    CHECK_EQ(ulfs_unlink(fs, "/d/sub"), -EISDIR, "unlink a directory is EISDIR");
    CHECK_EQ(ulfs_rename2(fs, "/d/h", "/d/g", ULFS_RENAME_NOREPLACE), -EEXIST, "rename2 NOREPLACE is EEXIST");
    CHECK_EQ(ulfs_open(fs, NULL, O_RDONLY, 0), -EFAULT, "open NULL path is EFAULT");
    CHECK_EQ(ulfs_stat(NULL, "/", &st), -EFAULT, "NULL handle is EFAULT");

    /* --- unlink while open, then unmount --- */
    int tfd = (int)MUST(ulfs_open(fs, "/d/tmp", O_CREAT | O_RDWR, 0600), "create /d/tmp");
    CHECK_EQ(ulfs_write(fs, tfd, "ghost", 5), 5, "write /d/tmp");
    CHECK_EQ(ulfs_unlink(fs, "/d/tmp"), 0, "unlink open file");
    CHECK_EQ(ulfs_pread(fs, tfd, buf, 5, 0), 5, "unlinked file still readable");
    CHECK_EQ(ulfs_close(fs, tfd), 0, "close unlinked file");
    CHECK_EQ(ulfs_close(fs, fd), 0, "close /d/g");
    CHECK_EQ(ulfs_unmount(fs), 0, "unmount");
    CHECK_EQ(ulfs_unmount(NULL), -EFAULT, "unmount NULL is EFAULT");

    /* --- remount read-only: everything persisted --- */
    fs = ulfs_mount(image, ULFS_RDONLY, &err);
    CHECK(fs != NULL, "remount read-only (err %d)", err);
    memset(buf, 0, sizeof buf);
    CHECK_EQ(read_all(fs, "/d/g", buf, sizeof buf), 8, "persisted /d/g has 8 bytes");
    CHECK(memcmp(buf, "hello\0\0\0", 8) == 0, "persisted /d/g content");
    MUST(ulfs_stat(fs, "/d/h", &st), "persisted hard link");
    CHECK(st.st_nlink == 2 && st.st_ino == f_ino && (st.st_mode & 07777) == 0640 &&
              st.st_uid == 1234 && st.st_gid == 4321,
          "persisted inode metadata");
    CHECK_EQ(ulfs_readlink(fs, "/d/s", buf, sizeof buf), 1, "persisted symlink");
    CHECK_EQ(read_all(fs, "/d/sub/rel", buf, sizeof buf), 8, "persisted relative file");
    CHECK(memcmp(buf, "relative", 8) == 0, "persisted relative file content");
    CHECK_EQ(ulfs_stat(fs, "/d/tmp", &st), -ENOENT, "unlinked file is gone");
    MUST(ulfs_stat(fs, "/d/big", &st), "persisted /d/big");
    CHECK(st.st_size == 8192, "persisted fallocate size");
    dfd = (int)MUST(ulfs_open(fs, "/d", O_RDONLY | O_DIRECTORY, 0), "open /d after remount");
    const char *names2[] = {"g", "h", "s", "long", "sub", "big", "now", "f"};
    unsigned char found2[8];
    seen = walk_dir(fs, dfd, sizeof buf, names2, 8, found2);
    CHECK(seen == 9 && found2[0] == DT_REG && found2[1] == DT_REG && found2[2] == DT_LNK &&
              found2[4] == DT_DIR && found2[6] && !found2[7],
          "persisted directory listing (%d entries)", seen);
    CHECK_EQ(ulfs_close(fs, dfd), 0, "close /d");
    CHECK_EQ(ulfs_open(fs, "/d/new", O_CREAT | O_WRONLY, 0644), -EROFS, "create on read-only mount is EROFS");
    CHECK_EQ(ulfs_mkdir(fs, "/x", 0755), -EROFS, "mkdir on read-only mount is EROFS");
    CHECK_EQ(ulfs_unmount(fs), 0, "unmount read-only");

    /* --- remount read-write once more --- */
    fs = ulfs_mount(image, 0, &err);
    CHECK(fs != NULL, "remount read-write (err %d)", err);
    CHECK_EQ(ulfs_unlink(fs, "/d/h"), 0, "unlink hard link");
    MUST(ulfs_stat(fs, "/d/g", &st), "stat after unlinking the link");
    CHECK(st.st_nlink == 1, "nlink back to 1");
    CHECK_EQ(ulfs_unmount(fs), 0, "final unmount");

    printf("smoke: all %d checks passed\n", checks);
    return 0;
}

/*
 * served.c - the C ABI on a handle from ulfs_connect(): the same calls as
 * on a mounted image, answered by a server (ulfs serve).
 *
 * Usage: served SOCKET-PATH   (a server must listen there)
 *
 * Prints "ok <check>" per check, "FAIL <check>: ..." and exit status 1 at
 * the first failure. Leaves /served/data ("hello from C") in the image for
 * the caller to check. Run by crates/ulfs-capi/tests/c_program.rs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ulfs.h"

static int checks;

#define CHECK(cond, what)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("FAIL " what ": " #cond "\n");                              \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
        checks++;                                                              \
        printf("ok " what "\n");                                               \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: served SOCKET\n");
        return 2;
    }
    int err = 0;
    CHECK(ulfs_connect("/nonexistent/ulfs.sock", 0, &err) == NULL && err == ENOENT,
          "connect to nothing is ENOENT");
    CHECK(ulfs_connect(argv[1], 99, &err) == NULL && err == EINVAL, "bad flags are EINVAL");
    ulfs_t *fs = ulfs_connect(argv[1], 0, &err);
    CHECK(fs != NULL, "connect");
    CHECK(ulfs_mkdir(fs, "/served", 0755) == 0, "mkdir");
    CHECK(ulfs_mkdir(fs, "/served", 0755) == -EEXIST, "mkdir twice is EEXIST");
    int fd = ulfs_open(fs, "/served/data", O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0, "open");
    const char msg[] = "hello from C";
    CHECK(ulfs_write(fs, fd, msg, sizeof msg - 1) == (ssize_t)(sizeof msg - 1), "write");
    CHECK(ulfs_lseek(fs, fd, 0, SEEK_SET) == 0, "lseek");
    char buf[64] = {0};
    CHECK(ulfs_read(fs, fd, buf, sizeof buf) == (ssize_t)(sizeof msg - 1), "read");
    CHECK(memcmp(buf, msg, sizeof msg - 1) == 0, "read back the bytes");
    struct stat st;
    CHECK(ulfs_fstat(fs, fd, &st) == 0 && st.st_size == (off_t)(sizeof msg - 1), "fstat");
    CHECK(ulfs_stat(fs, "/served/data", &st) == 0 && S_ISREG(st.st_mode), "stat");
    CHECK(ulfs_rename(fs, "/served/data", "/served/tmp") == 0, "rename");
    CHECK(ulfs_rename(fs, "/served/tmp", "/served/data") == 0, "rename back");
    CHECK(ulfs_close(fs, fd) == 0, "close");
    CHECK(ulfs_close(fs, fd) == -EBADF, "close twice is EBADF");
    CHECK(ulfs_chdir(fs, "/served") == 0, "chdir");
    CHECK(ulfs_getcwd(fs, buf, sizeof buf) >= 0 && strcmp(buf, "/served") == 0, "getcwd");
    CHECK(ulfs_set_memory_budget(fs, 1 << 20) == -EOPNOTSUPP,
          "a server's memory budget is not the client's");
    CHECK(ulfs_unmount(fs) == 0, "disconnect");
    printf("served: all %d checks passed\n", checks);
    return 0;
}

/*
 * installed.c - a C program built the way a user builds one against an
 * installed ulfs: `#include <ulfs.h>` and the flags of `pkg-config ulfs`.
 *
 * Usage: installed IMAGE-PATH   (the file is created)
 *
 * Makes a file system in IMAGE-PATH, writes /hello, unmounts, mounts it
 * read-only and reads /hello back. Then prints the file the dynamic loader
 * loaded libulfs_c from ("libulfs_c: PATH"), or "libulfs_c: static" when
 * the library was linked in. Exit status 0 when every step worked.
 * Run by crates/ulfs-capi/tests/install.rs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include <ulfs.h>

static const char text[] = "hello from an installed ulfs\n";

#define TRY(call)                                                              \
    do {                                                                       \
        long r_ = (long)(call);                                                \
        if (r_ < 0) {                                                          \
            printf("FAIL %s: %s\n", #call, strerror((int)-r_));                \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static int find_ulfs(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (strstr(info->dlpi_name, "libulfs_c") != NULL) {
        *(const char **)data = info->dlpi_name;
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: installed IMAGE-PATH\n");
        return 2;
    }
    const char *image = argv[1];
    int err = 0;

    TRY(ulfs_mkfs(image, 16u << 20, "label=installed"));
    ulfs_t *fs = ulfs_mount(image, 0, &err);
    if (fs == NULL) {
        printf("FAIL mount: %s\n", strerror(err));
        return 1;
    }
    int fd = ulfs_open(fs, "/hello", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    TRY(fd);
    ssize_t n = ulfs_write(fs, fd, text, sizeof text - 1);
    TRY(n);
    if ((size_t)n != sizeof text - 1) {
        printf("FAIL short write: %zd\n", n);
        return 1;
    }
    TRY(ulfs_close(fs, fd));
    TRY(ulfs_unmount(fs));

    fs = ulfs_mount(image, ULFS_RDONLY, &err);
    if (fs == NULL) {
        printf("FAIL read-only mount: %s\n", strerror(err));
        return 1;
    }
    char buf[128] = {0};
    fd = ulfs_open(fs, "/hello", O_RDONLY, 0);
    TRY(fd);
    n = ulfs_read(fs, fd, buf, sizeof buf - 1);
    TRY(n);
    TRY(ulfs_close(fs, fd));
    TRY(ulfs_unmount(fs));
    if ((size_t)n != sizeof text - 1 || memcmp(buf, text, sizeof text - 1) != 0) {
        printf("FAIL read back %zd bytes: %s\n", n, buf);
        return 1;
    }
    printf("read back: %s", buf);

    const char *lib = NULL;
    dl_iterate_phdr(find_ulfs, &lib);
    printf("libulfs_c: %s\n", lib != NULL ? lib : "static");
    return 0;
}

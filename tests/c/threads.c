/*
 * One ulfs handle shared by several threads, mounted with ULFS_THREADSAFE:
 * each thread creates, writes, reads back and lists its own files, and all
 * of them append to one shared file. Afterwards the image is remounted and
 * everything is checked again. Exits 0 and prints "threads: ok" on success.
 *
 * Usage: threads IMAGE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ulfs.h"

#define THREADS 4
#define FILES 1000
#define RECORD 64

static ulfs_t *fs;
static pthread_barrier_t start;
static int failures;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);               \
        }                                                                     \
    } while (0)

static void content(int t, int i, char *buf, size_t n)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = (char)('a' + (t * 7 + i * 3 + (int)k) % 26);
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    char path[64], want[300], got[300];
    snprintf(path, sizeof path, "/t%d", t);
    /* All threads start together, so their calls really overlap. */
    pthread_barrier_wait(&start);
    CHECK(ulfs_mkdir(fs, path, 0755) == 0, "mkdir %s", path);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof path, "/t%d/f%d", t, i);
        size_t n = 1 + (size_t)(i * 13 % 290);
        content(t, i, want, n);
        int fd = ulfs_open(fs, path, O_CREAT | O_RDWR | O_EXCL, 0644);
        CHECK(fd >= 0, "open %s: %d", path, fd);
        if (fd < 0)
            continue;
        CHECK(ulfs_write(fs, fd, want, n) == (ssize_t)n, "write %s", path);
        CHECK(ulfs_pread(fs, fd, got, n, 0) == (ssize_t)n, "pread %s", path);
        CHECK(memcmp(got, want, n) == 0, "data of %s", path);
        CHECK(ulfs_close(fs, fd) == 0, "close %s", path);

        char rec[RECORD];
        memset(rec, 'A' + t, sizeof rec);
        int log = ulfs_open(fs, "/shared.log", O_WRONLY | O_APPEND, 0);
        CHECK(log >= 0, "open log: %d", log);
        if (log >= 0) {
            CHECK(ulfs_write(fs, log, rec, sizeof rec) == RECORD, "append");
            CHECK(ulfs_close(fs, log) == 0, "close log");
        }
        if (i % 10 == 9) {
            struct stat st;
            snprintf(path, sizeof path, "/t%d", t);
            CHECK(ulfs_stat(fs, path, &st) == 0, "stat %s", path);
        }
    }
    return NULL;
}

/* Every thread's files, with the right contents; returns how many. */
static int verify(void)
{
    int seen = 0;
    char path[64], want[300], got[300];
    for (int t = 0; t < THREADS; t++) {
        for (int i = 0; i < FILES; i++) {
            snprintf(path, sizeof path, "/t%d/f%d", t, i);
            size_t n = 1 + (size_t)(i * 13 % 290);
            content(t, i, want, n);
            int fd = ulfs_open(fs, path, O_RDONLY, 0);
            if (fd < 0)
                continue;
            if (ulfs_read(fs, fd, got, sizeof got) == (ssize_t)n && memcmp(got, want, n) == 0)
                seen++;
            ulfs_close(fs, fd);
        }
    }
    return seen;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: threads IMAGE\n");
        return 2;
    }
    const char *image = argv[1];
    int err = 0;
    if (ulfs_mkfs(image, 32 << 20, NULL) != 0)
        return 1;
    fs = ulfs_mount(image, ULFS_THREADSAFE, &err);
    if (!fs) {
        fprintf(stderr, "mount: errno %d\n", err);
        return 1;
    }
    int log = ulfs_open(fs, "/shared.log", O_CREAT | O_WRONLY, 0644);
    CHECK(log >= 0 && ulfs_close(fs, log) == 0, "create log");

    pthread_t th[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create");
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);

    struct stat st;
    CHECK(ulfs_stat(fs, "/shared.log", &st) == 0, "stat log");
    CHECK(st.st_size == (off_t)THREADS * FILES * RECORD, "log size %lld",
          (long long)st.st_size);
    CHECK(verify() == THREADS * FILES, "files before remount");
    CHECK(ulfs_unmount(fs) == 0, "unmount");

    /* Unknown flag bits are still refused. */
    fs = ulfs_mount(image, 4, &err);
    CHECK(fs == NULL && err == EINVAL, "flag 4 is EINVAL");

    fs = ulfs_mount(image, ULFS_RDONLY | ULFS_THREADSAFE, &err);
    CHECK(fs != NULL, "remount: errno %d", err);
    if (fs) {
        CHECK(verify() == THREADS * FILES, "files after remount");
        CHECK(ulfs_unmount(fs) == 0, "final unmount");
    }
    if (failures) {
        fprintf(stderr, "threads: %d failures\n", failures);
        return 1;
    }
    printf("threads: ok (%d threads x %d files)\n", THREADS, FILES);
    return 0;
}

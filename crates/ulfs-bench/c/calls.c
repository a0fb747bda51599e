/*
 * calls.c - per-call cost of a C program's file calls, for
 * `ulfs-bench-preload` (the same binary on tmpfs and under `ulfs run`).
 * Usage: calls DIR N. Prints "name nanoseconds-per-call" lines, each the
 * median of 5 timed passes of N calls, after one untimed pass.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static volatile long sink;

#define PASSES 5
#define MEASURE(name, n, body)                                                   \
    do {                                                                         \
        double t[PASSES];                                                        \
        for (int pass = -1; pass < PASSES; pass++) {                             \
            double t0 = now_ns();                                                \
            for (long i = 0; i < (n); i++) {                                     \
                body;                                                            \
            }                                                                    \
            if (pass >= 0)                                                       \
                t[pass] = (now_ns() - t0) / (n);                                 \
        }                                                                        \
        qsort(t, PASSES, sizeof t[0], cmp);                                      \
        printf("%s %.1f\n", name, t[PASSES / 2]);                                \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/bench-file", argv[1]);
    long n = atol(argv[2]);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    static char buf[1 << 20];
    memset(buf, 7, sizeof buf);
    if (write(fd, buf, sizeof buf) != sizeof buf) {
        perror("write");
        return 1;
    }
    struct stat st;
    MEASURE("lseek", n, sink += lseek(fd, 0, SEEK_SET));
    MEASURE("fstat", n, { fstat(fd, &st); sink += st.st_ino; });
    MEASURE("open+close", n / 10, {
        int f = open(path, O_RDONLY);
        sink += f;
        close(f);
    });
    MEASURE("pread-4k", n / 10, sink += pread(fd, buf, 4096, (i * 4096) % (1 << 20)));
    close(fd);
    unlink(path);
    return 0;
}

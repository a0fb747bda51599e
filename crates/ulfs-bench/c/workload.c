/*
 * The workloads of `ulfs bench`, written once and compiled twice (build.rs):
 *
 *   - with POSIX calls (open, pread, lseek, getdents64, ...): the peers
 *     host-tmpfs and host-ext4 (a directory on that file system), memcpy,
 *     and ulfs-preload, ulfs-preload-none and ulfs-preload-ext4 (the same
 *     code under `ulfs run`, its calls served from the image by the
 *     preloaded library);
 *   - with BENCH_ULFS defined, with ulfs's C API (ulfs_open, ulfs_pread,
 *     ...) on a mounted image: the peers ulfs-journal and ulfs-none; or on
 *     a handle from ulfs_connect() to a `ulfs serve` of the image (the
 *     worker's argument `server:SOCKET`): the peer ulfs-server.
 *
 * So every peer runs the same loop; the only difference left is the call.
 * Each call goes through a `static inline` wrapper that turns its result
 * into "value or -errno", so both builds share the code below with no
 * dispatch on the timed path.
 *
 * A worker is a long-lived process (`ulfs-bench --internal-worker ...`): it reads one
 * request per line on stdin, does it in its working directory, and writes
 * one line: `ok V...` (times in nanoseconds, sizes in KiB) or `err TEXT`.
 * Untimed setup (populating directories, removing files) happens inside
 * the request, outside the timer.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#ifdef BENCH_ULFS
#include "ulfs.h"
static ulfs_t *FS;
#define ENTRY ulfs_bench_worker_ulfs
static inline long b_open(const char *p, int f, mode_t m) { return ulfs_open(FS, p, f, m); }
static inline long b_close(int fd) { return ulfs_close(FS, fd); }
static inline long b_pread(int fd, void *b, size_t n, off_t o) { return ulfs_pread(FS, fd, b, n, o); }
static inline long b_pwrite(int fd, const void *b, size_t n, off_t o) { return ulfs_pwrite(FS, fd, b, n, o); }
static inline long b_read(int fd, void *b, size_t n) { return ulfs_read(FS, fd, b, n); }
static inline long b_write(int fd, const void *b, size_t n) { return ulfs_write(FS, fd, b, n); }
static inline long b_lseek(int fd, off_t o, int w) { return ulfs_lseek(FS, fd, o, w); }
static inline long b_fstat(int fd, struct stat *st) { return ulfs_fstat(FS, fd, st); }
static inline long b_fsync(int fd) { return ulfs_fsync(FS, fd); }
static inline long b_unlink(const char *p) { return ulfs_unlink(FS, p); }
static inline long b_mkdir(const char *p, mode_t m) { return ulfs_mkdir(FS, p, m); }
static inline long b_rmdir(const char *p) { return ulfs_rmdir(FS, p); }
static inline long b_stat(const char *p, struct stat *st) { return ulfs_stat(FS, p, st); }
static inline long b_statfs(const char *p, struct statfs *st) { return ulfs_statfs(FS, p, st); }
static inline long b_getdents(int fd, void *b, size_t n) { return ulfs_getdents64(FS, fd, b, n); }
static inline long b_sync(void) { return ulfs_sync(FS); }
#else
#define ENTRY ulfs_bench_worker_posix
#define R(x) long r = (x); return r < 0 ? -errno : r
static inline long b_open(const char *p, int f, mode_t m) { R(open(p, f, m)); }
static inline long b_close(int fd) { R(close(fd)); }
static inline long b_pread(int fd, void *b, size_t n, off_t o) { R(pread(fd, b, n, o)); }
static inline long b_pwrite(int fd, const void *b, size_t n, off_t o) { R(pwrite(fd, b, n, o)); }
static inline long b_read(int fd, void *b, size_t n) { R(read(fd, b, n)); }
static inline long b_write(int fd, const void *b, size_t n) { R(write(fd, b, n)); }
static inline long b_lseek(int fd, off_t o, int w) { R(lseek(fd, o, w)); }
static inline long b_fstat(int fd, struct stat *st) { R(fstat(fd, st)); }
static inline long b_fsync(int fd) { R(fsync(fd)); }
static inline long b_unlink(const char *p) { R(unlink(p)); }
static inline long b_mkdir(const char *p, mode_t m) { R(mkdir(p, m)); }
static inline long b_rmdir(const char *p) { R(rmdir(p)); }
static inline long b_stat(const char *p, struct stat *st) { R(stat(p, st)); }
static inline long b_statfs(const char *p, struct statfs *st) { R(statfs(p, st)); }
/* glibc's getdents64 (not the raw system call): under `ulfs run` the
 * preloaded library serves it for image directories. */
static inline long b_getdents(int fd, void *b, size_t n) { R(getdents64(fd, b, n)); }
static inline long b_sync(void) { sync(); return 0; }
#undef R
#endif

/* The answer to the current request; `fail` formats it as an error. */
static char reply[256];

static int fail(const char *what, long err) {
    snprintf(reply, sizeof reply, "err %s: %s", what, strerror((int)(err < 0 ? -err : err)));
    return -1;
}

static int failmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(reply, sizeof reply, "err ");
    vsnprintf(reply + n, sizeof reply - n, fmt, ap);
    va_end(ap);
    return -1;
}

static inline uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* SplitMix64 with a fixed seed: every peer sees the same order. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void rng_seed(uint64_t s) { rng_state = s; }

/* Keeps the compiler from dropping loops whose results are unused. */
static volatile uint64_t sink;

#define MIB (1u << 20)
static unsigned char *big_w, *big_r; /* 1 MiB each */

static int need_buffers(void) {
    if (big_w) return 0;
    big_w = malloc(MIB);
    big_r = malloc(MIB);
    if (!big_w || !big_r) return failmsg("out of memory");
    rng_seed(42);
    for (size_t i = 0; i < MIB; i += 8) {
        uint64_t v = rng_next();
        memcpy(big_w + i, &v, 8);
    }
    return 0;
}

/* A file kept open across requests (lseek, fstat). */
static long keep_open(const char *name, long *fd) {
    if (*fd >= 0) return 0;
    long r = b_open(name, O_CREAT | O_RDWR, 0644);
    if (r < 0) return fail(name, r);
    *fd = r;
    return 0;
}

static int do_lseek(uint64_t n) {
    static long fd = -1;
    if (keep_open("lseek.dat", &fd)) return -1;
    long bad = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) bad |= b_lseek((int)fd, 0, SEEK_SET);
    uint64_t t = now_ns() - t0;
    if (bad) return fail("lseek", bad < 0 ? bad : -EIO); /* every call returns 0 */
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* `ulfs bench server`: the least a call can do, n times, on an empty file
 * kept open: lseek(fd, 0, SEEK_CUR) only reads the offset: on the kernel a
 * system call; in process a C call (the slow path: only SEEK_SET has a
 * fast one); through FUSE the kernel's own (no request); through `ulfs
 * serve` the client's own too (it keeps the offset of a description only
 * it has). */
static int do_null(uint64_t n) {
    static long fd = -1;
    if (keep_open("null.dat", &fd)) return -1;
    long bad = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) bad |= b_lseek((int)fd, 0, SEEK_CUR);
    uint64_t t = now_ns() - t0;
    if (bad) return fail("lseek", bad < 0 ? bad : -EIO); /* every call returns 0 */
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* The round trip: statfs of a file, n times, which neither the client of
 * `ulfs serve` nor the kernel over FUSE answers from a cache (the server,
 * FUSE's daemon: one request and its answer each; the kernel caches the
 * file's name, so no lookup is sent). (lseek SEEK_END was the round trip
 * until the client answered it from its kept fstat.) */
static int do_roundtrip(uint64_t n) {
    static long fd = -1;
    if (keep_open("null.dat", &fd)) return -1;
    struct statfs st;
    long bad = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) bad |= b_statfs("null.dat", &st);
    uint64_t t = now_ns() - t0;
    if (bad) return fail("statfs", bad);
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* The round trip (statfs), n times, each after `pause_us` of sleep
 * (untimed): what one call costs when the caller was quiet, as a program
 * that does other work between its calls. Through `ulfs serve` the
 * channel has then gone to sleep (the server's worker polls a quiet
 * client for --spin-us, 20 µs by default), and the call wakes it; through
 * FUSE the daemon's thread sleeps in read(/dev/fuse) and is woken the
 * same way. Each call is timed on its own, so each time includes about
 * one clock read. */
static int do_null_idle(uint64_t n, uint64_t pause_us) {
    static long fd = -1;
    if (keep_open("null.dat", &fd)) return -1;
    struct timespec pause = {(time_t)(pause_us / 1000000), (long)(pause_us % 1000000) * 1000};
    struct statfs st;
    long bad = 0;
    uint64_t t = 0;
    for (uint64_t i = 0; i < n; i++) {
        nanosleep(&pause, NULL);
        uint64_t t0 = now_ns();
        bad |= b_statfs("null.dat", &st);
        t += now_ns() - t0;
    }
    if (bad) return fail("statfs", bad);
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

static int do_fstat(uint64_t n) {
    static long fd = -1;
    if (keep_open("fstat.dat", &fd)) return -1;
    struct stat st;
    long bad = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        bad |= b_fstat((int)fd, &st);
        sink += st.st_ino;
    }
    uint64_t t = now_ns() - t0;
    if (bad) return fail("fstat", bad);
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* Chunk offsets of 1 MiB in a random order (the same for every peer). */
static uint32_t *chunk_order(size_t chunk, size_t *count) {
    size_t n = MIB / chunk;
    uint32_t *order = malloc(n * sizeof *order);
    if (!order) return NULL;
    for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    rng_seed(7 + chunk);
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_next() % i;
        uint32_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    *count = n;
    return order;
}

/* Fig. 6: per chunk, a write then a read of it, chunks in random order:
 * `fresh` or `over` (an existing file) with pwrite + pread; `seek-fresh`
 * and `seek-over` with lseek + write + lseek + read, the original ULFS's
 * shape (it has no pread/pwrite); `memcpy` the same bytes moved. */
static int do_raw(const char *how, size_t chunk) {
    if (chunk == 0 || chunk > MIB || MIB % chunk) return failmsg("raw: chunk must divide 1 MiB");
    if (need_buffers()) return -1;
    int seek = strncmp(how, "seek-", 5) == 0;
    if (seek) how += 5;
    int fresh = strcmp(how, "fresh") == 0;
    int memcpy_only = !seek && strcmp(how, "memcpy") == 0;
    if (!fresh && !memcpy_only && strcmp(how, "over"))
        return failmsg("raw: fresh, over, seek-fresh, seek-over or memcpy");
    size_t n;
    uint32_t *order = chunk_order(chunk, &n);
    if (!order) return failmsg("out of memory");
    long fd = -1;
    const char *name = fresh ? "raw-fresh.dat" : "raw-over.dat";
    if (!memcpy_only) {
        if (fresh) b_unlink(name);
        fd = b_open(name, O_CREAT | O_RDWR, 0644);
        if (fd < 0) { free(order); return fail(name, fd); }
        struct stat st;
        if (!fresh && b_fstat((int)fd, &st) == 0 && st.st_size < (off_t)MIB) {
            long w = b_pwrite((int)fd, big_w, MIB, 0);
            if (w != (long)MIB) { b_close((int)fd); free(order); return fail("prefill", w < 0 ? w : -EIO); }
        }
    }
    /* New bytes for every request: an overwrite that is lost would leave
     * the last request's bytes, which must not pass for this one's. And a
     * read that claims success without filling the buffer must not find
     * them there either. */
    static uint64_t request;
    rng_seed(0x5eed0000 + ++request);
    for (size_t i = 0; i < MIB; i += 8) {
        uint64_t v = rng_next();
        memcpy(big_w + i, &v, 8);
    }
    memset(big_r, 0, MIB);
    long bad = 0;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        size_t off = (size_t)order[i] * chunk;
        if (memcpy_only) {
            memcpy(big_r + off, big_w + off, chunk);
            memcpy(big_w + off, big_r + off, chunk);
            continue;
        }
        if (seek) {
            if (b_lseek((int)fd, (off_t)off, SEEK_SET) != (long)off) bad++;
            if (b_write((int)fd, big_w + off, chunk) != (long)chunk) bad++;
            if (b_lseek((int)fd, (off_t)off, SEEK_SET) != (long)off) bad++;
            if (b_read((int)fd, big_r + off, chunk) != (long)chunk) bad++;
            continue;
        }
        if (b_pwrite((int)fd, big_w + off, chunk, (off_t)off) != (long)chunk) bad++;
        if (b_pread((int)fd, big_r + off, chunk, (off_t)off) != (long)chunk) bad++;
    }
    uint64_t t = now_ns() - t0;
    free(order);
    if (bad) {
        if (fd >= 0) b_close((int)fd);
        return failmsg("raw: %ld short transfers", bad);
    }
    if (memcmp(big_r, big_w, MIB)) {
        if (fd >= 0) b_close((int)fd);
        return failmsg("raw: data read back differs from data written");
    }
    if (!memcpy_only) {
        /* Untimed: the whole file in one read, so a chunk written to the
         * wrong place (and read back from it) shows too. */
        memset(big_r, 0, MIB);
        long r = b_pread((int)fd, big_r, MIB, 0);
        b_close((int)fd);
        if (fresh) b_unlink(name);
        if (r != (long)MIB || memcmp(big_r, big_w, MIB))
            return failmsg("raw: the file does not hold what was written where it was written");
    }
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* Fig. 7: N files of 1 MiB, written then read, one call per file; or in
 * calls of `chunk` bytes (at most 64 KiB) so that the process itself
 * needs little memory (fig. 9, under tight memory limits). */
static unsigned char small_w[64 << 10], small_r[64 << 10];

static int do_files(uint64_t n, size_t chunk) {
    unsigned char *wbuf, *rbuf;
    if (chunk == MIB) {
        if (need_buffers()) return -1;
        wbuf = big_w;
        rbuf = big_r;
    } else if (chunk >= 8 && chunk <= sizeof small_w && MIB % chunk == 0) {
        for (size_t i = 0; i < chunk; i++) small_w[i] = (unsigned char)(i * 7 + 1);
        wbuf = small_w;
        rbuf = small_r;
    } else {
        return failmsg("files: a chunk of 1 MiB, or one that divides it from 8 bytes to 64 KiB");
    }
    char name[64];
    long err = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n && !err; i++) {
        snprintf(name, sizeof name, "file%06llu", (unsigned long long)i);
        /* Each file starts with its number: reading the wrong file shows. */
        memcpy(wbuf, &i, 8);
        long fd = b_open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) { err = fd; break; }
        for (size_t done = 0; done < MIB && !err; done += chunk) {
            long w = b_write((int)fd, wbuf, chunk);
            if (w != (long)chunk) err = w < 0 ? w : -ENOSPC;
        }
        b_close((int)fd);
    }
    uint64_t tw = now_ns() - t0;
    memset(rbuf, 0, chunk);
    uint64_t wrong = 0;
    t0 = now_ns();
    for (uint64_t i = 0; i < n && !err; i++) {
        snprintf(name, sizeof name, "file%06llu", (unsigned long long)i);
        long fd = b_open(name, O_RDONLY, 0);
        if (fd < 0) { err = fd; break; }
        for (size_t done = 0; done < MIB && !err; done += chunk) {
            long r = b_read((int)fd, rbuf, chunk);
            if (r != (long)chunk) err = r < 0 ? r : -EIO;
            uint64_t stamp;
            memcpy(&stamp, rbuf, 8);
            wrong += stamp != i;
        }
        b_close((int)fd);
    }
    uint64_t tr = now_ns() - t0;
    for (uint64_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "file%06llu", (unsigned long long)i);
        b_unlink(name);
    }
    if (err) return fail("files", err);
    if (wrong) return failmsg("files: %llu chunks came from another file", (unsigned long long)wrong);
    if (n && memcmp(rbuf, wbuf, chunk)) return failmsg("files: data read back differs");
    snprintf(reply, sizeof reply, "ok %llu %llu", (unsigned long long)tw, (unsigned long long)tr);
    return 0;
}

/* A directory named `dir` holding `n` empty files "e0000000"..., made once
 * per worker (later requests find it complete). */
static int populate(const char *dir, uint64_t n) {
    char name[96];
    struct stat st;
    snprintf(name, sizeof name, "%s/e%07llu", dir, (unsigned long long)(n ? n - 1 : 0));
    if (n && b_stat(name, &st) == 0) return 0;
    long r = b_mkdir(dir, 0755);
    if (r < 0 && r != -EEXIST) return fail(dir, r);
    for (uint64_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s/e%07llu", dir, (unsigned long long)i);
        long fd = b_open(name, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) return fail(name, fd);
        b_close((int)fd);
    }
    return 0;
}

/* Fig. 10: list a directory of N entries with getdents64, `reps` times. */
static int do_readdir(uint64_t n, size_t bufsize, uint64_t reps) {
    if (bufsize < 512 || bufsize > MIB) return failmsg("readdir: buffer of 512 B to 1 MiB");
    char dir[48];
    snprintf(dir, sizeof dir, "rd-%llu", (unsigned long long)n);
    if (populate(dir, n)) return -1;
    char *buf = malloc(bufsize);
    if (!buf) return failmsg("out of memory");
    uint64_t seen = 0;
    long err = 0;
    uint64_t t0 = now_ns();
    for (uint64_t r = 0; r < reps && !err; r++) {
        long fd = b_open(dir, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) { err = fd; break; }
        for (;;) {
            long got = b_getdents((int)fd, buf, bufsize);
            if (got < 0) { err = got; break; }
            if (got == 0) break;
            for (long off = 0; off < got;) {
                struct dirent64 *d = (struct dirent64 *)(buf + off);
                if (d->d_reclen == 0) { err = -EIO; break; } /* would loop for ever */
                sink += d->d_ino;
                seen++;
                off += d->d_reclen;
            }
        }
        b_close((int)fd);
    }
    uint64_t t = now_ns() - t0;
    free(buf);
    if (err) return fail("readdir", err);
    if (reps && seen != reps * (n + 2))
        return failmsg("readdir: %llu entries seen, %llu expected", (unsigned long long)seen,
                       (unsigned long long)(reps * (n + 2)));
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* The file-systems-as-processes loop: create, 4 KiB write, fsync, close. */
static int do_fsync(uint64_t n) {
    if (need_buffers()) return -1;
    char name[48];
    long err = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "sync%06llu", (unsigned long long)i);
        long fd = b_open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) { err = fd; break; }
        long w = b_write((int)fd, big_w, 4096);
        if (w != 4096) err = w < 0 ? w : -ENOSPC;
        long s = b_fsync((int)fd);
        if (s < 0 && !err) err = s;
        b_close((int)fd);
        if (err) break;
    }
    uint64_t t = now_ns() - t0;
    for (uint64_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "sync%06llu", (unsigned long long)i);
        b_unlink(name);
    }
    b_sync(); /* the removals are not the next request's to pay for */
    if (err) return fail("fsync loop", err);
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* open() of existing and of missing names in a directory of N entries;
 * `m` opens of each kind. */
static int do_open(uint64_t n, uint64_t m) {
    if (n == 0) return failmsg("open: the directory needs entries");
    char dir[48], name[96];
    snprintf(dir, sizeof dir, "op-%llu", (unsigned long long)n);
    if (populate(dir, n)) return -1;
    uint64_t *picks = malloc(m * sizeof *picks);
    if (!picks) return failmsg("out of memory");
    rng_seed(n);
    for (uint64_t i = 0; i < m; i++) picks[i] = rng_next() % n;
    long err = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < m; i++) {
        snprintf(name, sizeof name, "%s/e%07llu", dir, (unsigned long long)picks[i]);
        long fd = b_open(name, O_RDONLY, 0);
        if (fd < 0) { err = fd; break; }
        b_close((int)fd);
    }
    uint64_t te = now_ns() - t0;
    uint64_t wrong = 0;
    t0 = now_ns();
    for (uint64_t i = 0; i < m && !err; i++) {
        snprintf(name, sizeof name, "%s/m%07llu", dir, (unsigned long long)picks[i]);
        long fd = b_open(name, O_RDONLY, 0);
        if (fd != -ENOENT) {
            wrong++;
            if (fd >= 0) b_close((int)fd);
        }
    }
    uint64_t tm = now_ns() - t0;
    free(picks);
    if (err) return fail("open of an existing name", err);
    if (wrong) return failmsg("open of a missing name did not give ENOENT %llu times", (unsigned long long)wrong);
    snprintf(reply, sizeof reply, "ok %llu %llu", (unsigned long long)te, (unsigned long long)tm);
    return 0;
}

/* N files created in one new directory, then unlinked in creation order. */
static int do_create(uint64_t n) {
    const char *dir = "cr";
    char name[48];
    long r = b_mkdir(dir, 0755);
    if (r < 0) return fail("create: mkdir", r);
    long err = 0;
    uint64_t made = 0;
    uint64_t t0 = now_ns();
    for (; made < n; made++) {
        snprintf(name, sizeof name, "cr/f%07llu", (unsigned long long)made);
        long fd = b_open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) { err = fd; break; }
        b_close((int)fd);
    }
    uint64_t tc = now_ns() - t0;
    t0 = now_ns();
    for (uint64_t i = 0; i < made; i++) {
        snprintf(name, sizeof name, "cr/f%07llu", (unsigned long long)i);
        long u = b_unlink(name);
        if (u < 0 && !err) err = u;
    }
    uint64_t tu = now_ns() - t0;
    b_rmdir(dir);
    if (err) return fail("create", err);
    snprintf(reply, sizeof reply, "ok %llu %llu", (unsigned long long)tc, (unsigned long long)tu);
    return 0;
}

/* `ulfs bench fuse` stamps the first 8 bytes of every 4 KiB block with
 * the request's salt and the block's number: a block read from the wrong
 * place, or left from an earlier round, shows. */
#define BLOCK 4096u
static inline uint64_t stamp_of(uint64_t salt, uint64_t block) { return salt << 32 | block; }

/* A new file `name` of `mib` MiB written in calls of `call` bytes (a
 * multiple of BLOCK dividing 1 MiB), each block stamped with `salt`, and
 * closed without fsync; `*t` is the time from open to close included. */
static int write_stamped(const char *name, uint64_t mib, size_t call, uint64_t salt, uint64_t *t) {
    uint64_t blocks = mib * (MIB / BLOCK), per_call = call / BLOCK;
    b_unlink(name);
    long err = 0;
    uint64_t t0 = now_ns();
    long fd = b_open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return fail(name, fd);
    for (uint64_t b = 0; b < blocks && !err; b += per_call) {
        unsigned char *buf = big_w + (b * BLOCK) % MIB;
        for (uint64_t k = 0; k < per_call; k++) {
            uint64_t s = stamp_of(salt, b + k);
            memcpy(buf + k * BLOCK, &s, 8);
        }
        long w = b_write((int)fd, buf, call);
        if (w != (long)call) err = w < 0 ? w : -ENOSPC;
    }
    /* Through FUSE with writeback_cache the close is where the gathered
     * writes are sent: its error is the write's. */
    long c = b_close((int)fd);
    *t = now_ns() - t0;
    if (err) return fail(name, err);
    if (c < 0) return fail(name, c);
    return 0;
}

/* Untimed: every block of `name` read back (1 MiB preads) and its stamp
 * checked, and nothing past its end. */
static int check_stamped(const char *name, uint64_t mib, uint64_t salt) {
    long fd = b_open(name, O_RDONLY, 0);
    if (fd < 0) return fail(name, fd);
    long err = 0;
    uint64_t wrong = 0;
    for (uint64_t m = 0; m < mib && !err; m++) {
        long r = b_pread((int)fd, big_r, MIB, (off_t)(m * MIB));
        if (r != (long)MIB) { err = r < 0 ? r : -EIO; break; }
        for (uint64_t k = 0; k < MIB / BLOCK; k++) {
            uint64_t s;
            memcpy(&s, big_r + k * BLOCK, 8);
            wrong += s != stamp_of(salt, m * (MIB / BLOCK) + k);
        }
    }
    long tail = err ? 0 : b_pread((int)fd, big_r, BLOCK, (off_t)(mib * MIB));
    b_close((int)fd);
    if (err) return fail(name, err);
    if (tail != 0) return failmsg("%s: %ld bytes past the end of the file", name, tail);
    if (wrong) return failmsg("%s: %llu blocks do not hold what was written there", name, (unsigned long long)wrong);
    return 0;
}

/* `ulfs bench fuse`, the data path: a new file of `mib` MiB written in
 * 1 MiB calls, read back in 1 MiB calls from a new open, read at `reads`
 * random 4 KiB blocks (fixed seed) from another new open, then a second
 * new file of the same size written in 4 KiB calls. Each time covers its
 * open and close: through FUSE each is a request, and without
 * FOPEN_KEEP_CACHE an open is where the kernel drops the file's cached
 * pages. The timed reads check a stamp or two per call; every block is
 * checked after, untimed. Answers the four times. */
static int do_seqio(uint64_t mib, uint64_t reads) {
    if (mib == 0 || reads == 0) return failmsg("seqio: a size and a number of reads");
    if (need_buffers()) return -1;
    static uint64_t request;
    uint64_t salt = ++request * 2, blocks = mib * (MIB / BLOCK);
    const char *name = "seqio.dat", *small = "seqio-4k.dat";
    uint64_t tw, tr, trr, tw4;
    if (write_stamped(name, mib, MIB, salt, &tw)) return -1;

    long err = 0;
    uint64_t wrong = 0;
    uint64_t t0 = now_ns();
    long fd = b_open(name, O_RDONLY, 0);
    if (fd < 0) return fail(name, fd);
    for (uint64_t m = 0; m < mib; m++) {
        long r = b_read((int)fd, big_r, MIB);
        if (r != (long)MIB) { err = r < 0 ? r : -EIO; break; }
        uint64_t first, last;
        memcpy(&first, big_r, 8);
        memcpy(&last, big_r + MIB - BLOCK, 8);
        wrong += first != stamp_of(salt, m * (MIB / BLOCK));
        wrong += last != stamp_of(salt, m * (MIB / BLOCK) + MIB / BLOCK - 1);
    }
    b_close((int)fd);
    tr = now_ns() - t0;
    if (err) return fail("seqio: read", err);

    uint64_t *picks = malloc(reads * sizeof *picks);
    if (!picks) return failmsg("out of memory");
    rng_seed(0xf05e + mib);
    for (uint64_t i = 0; i < reads; i++) picks[i] = rng_next() % blocks;
    t0 = now_ns();
    fd = b_open(name, O_RDONLY, 0);
    if (fd < 0) { free(picks); return fail(name, fd); }
    for (uint64_t i = 0; i < reads; i++) {
        long r = b_pread((int)fd, big_r, BLOCK, (off_t)(picks[i] * BLOCK));
        if (r != (long)BLOCK) { err = r < 0 ? r : -EIO; break; }
        uint64_t s;
        memcpy(&s, big_r, 8);
        wrong += s != stamp_of(salt, picks[i]);
    }
    b_close((int)fd);
    trr = now_ns() - t0;
    free(picks);
    if (err) return fail("seqio: random read", err);
    if (wrong) return failmsg("seqio: %llu reads found another block's stamp", (unsigned long long)wrong);
    if (check_stamped(name, mib, salt)) return -1;
    b_unlink(name);

    if (write_stamped(small, mib, BLOCK, salt + 1, &tw4)) return -1;
    if (check_stamped(small, mib, salt + 1)) return -1;
    b_unlink(small);
    snprintf(reply, sizeof reply, "ok %llu %llu %llu %llu", (unsigned long long)tw, (unsigned long long)tr,
             (unsigned long long)trr, (unsigned long long)tw4);
    return 0;
}

/* `ulfs bench fuse`, names: `n` empty files created in one new directory,
 * then each stat'ed by name, then each unlinked, in creation order. */
static int do_metadata(uint64_t n) {
    const char *dir = "md";
    char name[48];
    long r = b_mkdir(dir, 0755);
    if (r < 0) return fail("metadata: mkdir", r);
    long err = 0;
    uint64_t made = 0, wrong = 0;
    uint64_t t0 = now_ns();
    for (; made < n; made++) {
        snprintf(name, sizeof name, "md/f%07llu", (unsigned long long)made);
        long fd = b_open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) { err = fd; break; }
        b_close((int)fd);
    }
    uint64_t tc = now_ns() - t0;
    struct stat st;
    t0 = now_ns();
    for (uint64_t i = 0; i < made && !err; i++) {
        snprintf(name, sizeof name, "md/f%07llu", (unsigned long long)i);
        long s = b_stat(name, &st);
        if (s < 0) { err = s; break; }
        wrong += !S_ISREG(st.st_mode) || st.st_size != 0;
    }
    uint64_t ts = now_ns() - t0;
    t0 = now_ns();
    for (uint64_t i = 0; i < made; i++) {
        snprintf(name, sizeof name, "md/f%07llu", (unsigned long long)i);
        long u = b_unlink(name);
        if (u < 0 && !err) err = u;
    }
    uint64_t tu = now_ns() - t0;
    r = b_rmdir(dir);
    if (err) return fail("metadata", err);
    if (r < 0) return fail("metadata: rmdir (not empty after every unlink?)", r);
    if (wrong) return failmsg("metadata: %llu files were not empty regular files", (unsigned long long)wrong);
    snprintf(reply, sizeof reply, "ok %llu %llu %llu", (unsigned long long)tc, (unsigned long long)ts,
             (unsigned long long)tu);
    return 0;
}

/* `ulfs bench server`: n preads of 4 KiB from a 1 MiB file (written and
 * read whole once, untimed, when the worker first needs it, so it is
 * cached: in the kernel's page cache, the image's mapping, the server's),
 * block after block, wrapping; each block's stamp checked. */
static int do_pread4k(uint64_t n) {
    static long fd = -1;
    static unsigned char block[BLOCK];
    const uint64_t salt = 0x4b;
    const char *name = "pread.dat";
    if (fd < 0) {
        if (need_buffers()) return -1;
        b_unlink(name);
        long f = b_open(name, O_CREAT | O_EXCL | O_RDWR, 0644);
        if (f < 0) return fail(name, f);
        for (uint64_t b = 0; b < MIB / BLOCK; b++) {
            uint64_t s = stamp_of(salt, b);
            memcpy(big_w + b * BLOCK, &s, 8);
        }
        long w = b_pwrite((int)f, big_w, MIB, 0);
        long r = w == (long)MIB ? b_pread((int)f, big_r, MIB, 0) : 0;
        if (w != (long)MIB || r != (long)MIB || memcmp(big_r, big_w, MIB)) {
            b_close((int)f);
            return w < 0 ? fail(name, w) : r < 0 ? fail(name, r) : failmsg("%s: not read back as written", name);
        }
        fd = f;
    }
    long err = 0;
    uint64_t wrong = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        uint64_t b = i % (MIB / BLOCK);
        long r = b_pread((int)fd, block, BLOCK, (off_t)(b * BLOCK));
        if (r != (long)BLOCK) { err = r < 0 ? r : -EIO; break; }
        uint64_t s;
        memcpy(&s, block, 8);
        wrong += s != stamp_of(salt, b);
    }
    uint64_t t = now_ns() - t0;
    if (err) return fail("pread 4 KiB", err);
    if (wrong) return failmsg("pread 4 KiB: %llu reads found another block's stamp", (unsigned long long)wrong);
    snprintf(reply, sizeof reply, "ok %llu", (unsigned long long)t);
    return 0;
}

/* N empty files in "mnt" (the mount experiment's image), untimed. */
static int do_populate(uint64_t n) {
    if (populate("mnt", n)) return -1;
    long r = b_sync();
    if (r < 0) return fail("sync", r);
    snprintf(reply, sizeof reply, "ok");
    return 0;
}

/* VmRSS and VmHWM of this process, in KiB (host /proc, never the image). */
static int do_status(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return fail("/proc/self/status", -errno);
    char line[256];
    unsigned long long rss = 0, hwm = 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "VmRSS: %llu", &rss);
        sscanf(line, "VmHWM: %llu", &hwm);
    }
    fclose(f);
    snprintf(reply, sizeof reply, "ok %llu %llu", rss, hwm);
    return 0;
}

static uint64_t mount_ns;

/* How long this process's mount took (0 in the POSIX build: there is
 * none, or `ulfs run` did it before main) and VmRSS now: asked first, the
 * resident memory right after mount. */
static int do_mounted(void) {
    unsigned long long ns = mount_ns;
    if (do_status()) return -1;
    unsigned long long rss = 0;
    sscanf(reply, "ok %llu", &rss);
    snprintf(reply, sizeof reply, "ok %llu %llu", ns, rss);
    return 0;
}

#ifndef BENCH_ULFS
/* Fig. 13 and 14 run the real libgdbm and libsqlite3, loaded at run time
 * so that the benchmark builds and runs without them (their experiments
 * are then skipped with the reason). Only the POSIX build has them: the
 * libraries make their own calls, which only `ulfs run` can serve. */
typedef struct { char *dptr; int dsize; } datum;
static void *(*gdbm_open_)(const char *, int, int, int, void (*)(const char *));
static int (*gdbm_store_)(void *, datum, datum, int);
static datum (*gdbm_fetch_)(void *, datum);
static int (*gdbm_close_)(void *);

static int load_gdbm(void) {
    if (gdbm_open_) return 0;
    void *h = dlopen("libgdbm.so.6", RTLD_NOW);
    if (!h) return failmsg("missing: libgdbm.so.6 (Debian: libgdbm6): %s", dlerror());
    *(void **)&gdbm_open_ = dlsym(h, "gdbm_open");
    *(void **)&gdbm_store_ = dlsym(h, "gdbm_store");
    *(void **)&gdbm_fetch_ = dlsym(h, "gdbm_fetch");
    *(void **)&gdbm_close_ = dlsym(h, "gdbm_close");
    if (!gdbm_open_ || !gdbm_store_ || !gdbm_fetch_ || !gdbm_close_) {
        gdbm_open_ = NULL;
        return failmsg("missing: gdbm_open/store/fetch/close in libgdbm.so.6");
    }
    return 0;
}

enum { GDBM_READER_ = 0, GDBM_NEWDB_ = 3, GDBM_REPLACE_ = 1 };

static int do_gdbm(uint64_t n) {
    if (load_gdbm()) return -1;
    const char *db = "bench.gdbm";
    b_unlink(db);
    uint64_t t0 = now_ns();
    void *g = gdbm_open_(db, 0, GDBM_NEWDB_, 0644, NULL);
    if (!g) return failmsg("gdbm_open of a new database failed (errno %d)", errno);
    long bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = i, v = i * 2654435761u;
        datum key = {(char *)&k, 4}, val = {(char *)&v, 4};
        if (gdbm_store_(g, key, val, GDBM_REPLACE_)) bad++;
    }
    gdbm_close_(g);
    uint64_t ts = now_ns() - t0;
    t0 = now_ns();
    g = gdbm_open_(db, 0, GDBM_READER_, 0, NULL);
    if (!g) return failmsg("gdbm_open for reading failed (errno %d)", errno);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = i, v;
        datum key = {(char *)&k, 4};
        datum got = gdbm_fetch_(g, key);
        if (!got.dptr || got.dsize != 4) { bad++; continue; }
        memcpy(&v, got.dptr, 4);
        if (v != i * 2654435761u) bad++;
        free(got.dptr);
    }
    gdbm_close_(g);
    uint64_t tf = now_ns() - t0;
    b_unlink(db);
    if (bad) return failmsg("gdbm: %ld items not stored or fetched back wrong", bad);
    snprintf(reply, sizeof reply, "ok %llu %llu", (unsigned long long)ts, (unsigned long long)tf);
    return 0;
}

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
static int (*sq_open)(const char *, sqlite3 **);
static int (*sq_close)(sqlite3 *);
static int (*sq_exec)(sqlite3 *, const char *, void *, void *, char **);
static int (*sq_prepare)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
static int (*sq_bind_int)(sqlite3_stmt *, int, int);
static int (*sq_bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
static int (*sq_bind_double)(sqlite3_stmt *, int, double);
static int (*sq_step)(sqlite3_stmt *);
static int (*sq_reset)(sqlite3_stmt *);
static int (*sq_finalize)(sqlite3_stmt *);
static int (*sq_column_int)(sqlite3_stmt *, int);
static const char *(*sq_errmsg)(sqlite3 *);

static int load_sqlite(void) {
    if (sq_open) return 0;
    void *h = dlopen("libsqlite3.so.0", RTLD_NOW);
    if (!h) return failmsg("missing: libsqlite3.so.0 (Debian: libsqlite3-0): %s", dlerror());
    struct { void **fn; const char *name; } syms[] = {
        {(void **)&sq_open, "sqlite3_open"},       {(void **)&sq_close, "sqlite3_close"},
        {(void **)&sq_exec, "sqlite3_exec"},       {(void **)&sq_prepare, "sqlite3_prepare_v2"},
        {(void **)&sq_bind_int, "sqlite3_bind_int"}, {(void **)&sq_bind_text, "sqlite3_bind_text"},
        {(void **)&sq_bind_double, "sqlite3_bind_double"}, {(void **)&sq_step, "sqlite3_step"},
        {(void **)&sq_reset, "sqlite3_reset"},     {(void **)&sq_finalize, "sqlite3_finalize"},
        {(void **)&sq_column_int, "sqlite3_column_int"}, {(void **)&sq_errmsg, "sqlite3_errmsg"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (!*syms[i].fn) {
            sq_open = NULL;
            return failmsg("missing: %s in libsqlite3.so.0", syms[i].name);
        }
    }
    return 0;
}

enum { SQ_OK = 0, SQ_ROW = 100, SQ_DONE = 101 };

static int do_sqlite(uint64_t n) {
    if (load_sqlite()) return -1;
    const char *path = "bench.sqlite";
    b_unlink(path);
    sqlite3 *db = NULL;
    if (sq_open(path, &db) != SQ_OK) {
        int e = failmsg("sqlite3_open: %s", db ? sq_errmsg(db) : "out of memory");
        if (db) sq_close(db);
        return e;
    }
    char *msg = NULL;
    if (sq_exec(db, "PRAGMA journal_mode=DELETE; CREATE TABLE t(id INTEGER, s TEXT, f REAL)", NULL, NULL,
                &msg) != SQ_OK) {
        int e = failmsg("sqlite3 schema: %s", sq_errmsg(db));
        sq_close(db);
        return e;
    }
    sqlite3_stmt *ins = NULL, *sel = NULL;
    if (sq_prepare(db, "INSERT INTO t VALUES(?1, ?2, ?3)", -1, &ins, NULL) != SQ_OK ||
        sq_prepare(db, "SELECT id, s, f FROM t", -1, &sel, NULL) != SQ_OK) {
        int e = failmsg("sqlite3_prepare: %s", sq_errmsg(db));
        sq_finalize(ins);
        sq_close(db);
        return e;
    }
    rng_seed(14);
    long bad = 0;
    char text[24];
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rng_next();
        snprintf(text, sizeof text, "%016llx", (unsigned long long)r);
        sq_bind_int(ins, 1, (int)i);
        sq_bind_text(ins, 2, text, -1, NULL);
        sq_bind_double(ins, 3, (double)(r >> 11) / 9007199254740992.0);
        if (sq_step(ins) != SQ_DONE) bad++;
        sq_reset(ins);
    }
    uint64_t ti = now_ns() - t0;
    uint64_t rows = 0;
    t0 = now_ns();
    int rc;
    while ((rc = sq_step(sel)) == SQ_ROW) {
        sink += (uint64_t)sq_column_int(sel, 0);
        rows++;
    }
    uint64_t tsel = now_ns() - t0;
    if (rc != SQ_DONE) bad++;
    sq_finalize(ins);
    sq_finalize(sel);
    sq_close(db);
    b_unlink(path);
    if (bad) return failmsg("sqlite: %ld statements failed", bad);
    if (rows != n) return failmsg("sqlite: %llu rows selected, %llu inserted", (unsigned long long)rows,
                                  (unsigned long long)n);
    snprintf(reply, sizeof reply, "ok %llu %llu", (unsigned long long)ti, (unsigned long long)tsel);
    return 0;
}
#endif

/* One request; its answer is left in `reply`. */
static void serve(char *line) {
    char op[32] = "";
    char word[32] = "";
    unsigned long long a = 0, b = 0;
    int got = sscanf(line, "%31s", op);
    if (got != 1) {
        failmsg("empty request");
        return;
    }
    if (!strcmp(op, "lseek") && sscanf(line, "%*s %llu", &a) == 1) do_lseek(a);
    else if (!strcmp(op, "fstat") && sscanf(line, "%*s %llu", &a) == 1) do_fstat(a);
    else if (!strcmp(op, "null") && sscanf(line, "%*s %llu", &a) == 1) do_null(a);
    else if (!strcmp(op, "roundtrip") && sscanf(line, "%*s %llu", &a) == 1) do_roundtrip(a);
    else if (!strcmp(op, "null-idle") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) do_null_idle(a, b);
    else if (!strcmp(op, "pread4k") && sscanf(line, "%*s %llu", &a) == 1) do_pread4k(a);
    else if (!strcmp(op, "raw") && sscanf(line, "%*s %31s %llu", word, &a) == 2) do_raw(word, (size_t)a);
    else if (!strcmp(op, "files") && (got = sscanf(line, "%*s %llu %llu", &a, &b)) >= 1)
        do_files(a, got == 2 ? (size_t)b : MIB);
    else if (!strcmp(op, "readdir") && sscanf(line, "%*s %llu %llu %31s", &a, &b, word) == 3)
        do_readdir(a, (size_t)b, strtoull(word, NULL, 10));
    else if (!strcmp(op, "fsync") && sscanf(line, "%*s %llu", &a) == 1) do_fsync(a);
    else if (!strcmp(op, "open") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) do_open(a, b);
    else if (!strcmp(op, "create") && sscanf(line, "%*s %llu", &a) == 1) do_create(a);
    else if (!strcmp(op, "seqio") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) do_seqio(a, b);
    else if (!strcmp(op, "metadata") && sscanf(line, "%*s %llu", &a) == 1) do_metadata(a);
    else if (!strcmp(op, "populate") && sscanf(line, "%*s %llu", &a) == 1) do_populate(a);
    else if (!strcmp(op, "status")) do_status();
    else if (!strcmp(op, "mounted")) do_mounted();
#ifndef BENCH_ULFS
    else if (!strcmp(op, "gdbm") && sscanf(line, "%*s %llu", &a) == 1) do_gdbm(a);
    else if (!strcmp(op, "sqlite") && sscanf(line, "%*s %llu", &a) == 1) do_sqlite(a);
#endif
    else failmsg("unknown or malformed request: %.100s", line);
}

/* Writes all of `s` and a newline to stdout (a host pipe). */
static int answer(const char *s) {
    size_t len = strlen(s);
    char out[300];
    if (len > sizeof out - 2) len = sizeof out - 2;
    memcpy(out, s, len);
    out[len++] = '\n';
    for (size_t done = 0; done < len;) {
        ssize_t w = write(1, out + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

/*
 * The worker's main loop. POSIX build: `where` is the working directory
 * (made if missing). ulfs build: `where` is the image, mounted here, or
 * `server:SOCKET`, a server of the image to connect to; the work happens
 * in the image's directory /w.
 * Returns the process's exit status.
 */
int ENTRY(const char *where) {
#ifdef BENCH_ULFS
    int err = 0;
    /* Read-only (ULFS_BENCH_READ_ONLY set): work in the root, which a
     * read-only mount cannot add /w to. */
    int read_only = getenv("ULFS_BENCH_READ_ONLY") != NULL;
    /* `server:SOCKET`: connect to the `ulfs serve` listening there (its
     * worker started it: ulfs-server) instead of mounting an image. */
    const char *sock = strncmp(where, "server:", 7) == 0 ? where + 7 : NULL;
    if (sock && (read_only || getenv("ULFS_BENCH_NO_BUDGET"))) {
        fprintf(stderr, "ulfs-bench worker: a server's client cannot be read-only or unbudgeted\n");
        return 1;
    }
    uint64_t t0 = now_ns();
    if (sock) {
        /* Between the server's bind and listen a connect is refused:
         * retried for a few seconds. */
        for (;;) {
            FS = ulfs_connect(sock, 0, &err);
            if (FS || (err != ECONNREFUSED && err != ENOENT) || now_ns() - t0 > 5000000000ull) break;
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    } else {
        FS = ulfs_mount(where, read_only ? ULFS_RDONLY : 0, &err);
    }
    mount_ns = now_ns() - t0;
    if (!FS) {
        fprintf(stderr, "ulfs-bench worker: %s %s: %s\n", sock ? "connect" : "mount", sock ? sock : where,
                strerror(err));
        return 1;
    }
    /* ULFS_BENCH_NO_BUDGET: no memory budget, whatever the cgroup allows
     * (fig. 9's curve without it). */
    if (getenv("ULFS_BENCH_NO_BUDGET") && ulfs_set_memory_budget(FS, 0) < 0) {
        fprintf(stderr, "ulfs-bench worker: ulfs_set_memory_budget failed\n");
        return 1;
    }
    long r = read_only ? 0 : ulfs_mkdir(FS, "/w", 0755);
    if (r < 0 && r != -EEXIST) {
        fprintf(stderr, "ulfs-bench worker: mkdir /w: %s\n", strerror((int)-r));
        return 1;
    }
    r = ulfs_chdir(FS, read_only ? "/" : "/w");
#else
    long r = mkdir(where, 0755);
    r = chdir(where) < 0 ? -errno : 0;
#endif
    if (r < 0) {
        fprintf(stderr, "ulfs-bench worker: chdir %s: %s\n", where, strerror((int)-r));
        return 1;
    }
    /* Requests are short lines on a host pipe: read it directly, byte
     * runs into a line buffer, so no stdio stream is involved. */
    static char buf[4096];
    size_t have = 0;
    int status = 0;
    for (;;) {
        char *nl = memchr(buf, '\n', have);
        if (!nl) {
            if (have == sizeof buf) { status = 2; break; }
            ssize_t got = read(0, buf + have, sizeof buf - have);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break; /* the parent is done */
            have += (size_t)got;
            continue;
        }
        *nl = 0;
        if (!strcmp(buf, "quit")) break;
        reply[0] = 0;
        serve(buf);
        if (answer(reply)) { status = 1; break; }
        size_t used = (size_t)(nl + 1 - buf);
        memmove(buf, nl + 1, have - used);
        have -= used;
    }
#ifdef BENCH_ULFS
    r = ulfs_unmount(FS);
    if (r < 0) {
        fprintf(stderr, "ulfs-bench worker: %s: %s\n", sock ? "disconnect" : "unmount", strerror((int)-r));
        return 1;
    }
#endif
    return status;
}

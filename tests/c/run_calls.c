/*
 * run_calls.c - libc calls a program makes, printed as a transcript, for
 * `ulfs run` to be compared with the same program on tmpfs
 * (crates/ulfs-cli/tests/run.rs). Usage: run_calls DIR HOSTFILE
 * where DIR is the directory to work in (a tmpfs directory, or /ulfs/...)
 * and HOSTFILE a writable file on the host.
 *
 * Covers what the shell, coreutils and python transcripts do not reach:
 * scandir, readdir_r, telldir/seekdir, getdents64, copy_file_range and
 * sendfile in both directions, posix_fallocate, close_range, dup2 onto a
 * low number, fcntl status flags, fdopen/fileno, and threads working on
 * the directory at once.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "run_common.h"

static int no_dots(const struct dirent *d) {
    return strcmp(d->d_name, ".") && strcmp(d->d_name, "..");
}

/* nftw's visits, collected and sorted (directory order is each file
 * system's own). */
static char *seen[256];
static int nseen;
static size_t dir_len;

static int visit(const char *path, const struct stat *st, int kind, struct FTW *f) {
    char line[512];
    snprintf(line, sizeof line, "%s kind=%d level=%d base=%s size=%lld", path + dir_len, kind,
             f->level, path + f->base, kind == FTW_F ? (long long)st->st_size : -1LL);
    if (nseen < 256)
        seen[nseen++] = strdup(line);
    return 0;
}

static int by_text(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk(int flags, const char *what) {
    nseen = 0;
    dir_len = strlen(dir);
    int r = nftw(dir, visit, 8, flags);
    qsort(seen, nseen, sizeof seen[0], by_text);
    printf("nftw %s: %d, %d visits\n", what, r, nseen);
    for (int i = 0; i < nseen; i++) {
        printf("  %s\n", seen[i]);
        free(seen[i]);
    }
}

#define THREADS 6
#define ROUNDS 200

/* Each thread works on its own names (`at` is not thread-safe). */
static void *worker(void *arg) {
    long id = (long)arg;
    char name[4200], buf[256], back[256];
    for (int r = 0; r < ROUNDS; r++) {
        snprintf(name, sizeof name, "%s/t%ld-%d", dir, id, r % 7);
        int n = snprintf(buf, sizeof buf, "thread %ld round %d\n", id, r);
        int fd = open(name, O_CREAT | O_TRUNC | O_RDWR, 0644);
        if (fd < 0 || write(fd, buf, n) != n || pread(fd, back, n, 0) != n ||
            memcmp(buf, back, n) != 0 || close(fd) != 0)
            return (void *)1;
        struct stat st;
        if (stat(name, &st) != 0 || st.st_size != n)
            return (void *)1;
        if (r % 7 == 6)
            for (int k = 0; k < 7; k++) {
                snprintf(name, sizeof name, "%s/t%ld-%d", dir, id, k);
                if (unlink(name) != 0)
                    return (void *)1;
            }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    dir = argv[1];
    const char *host = argv[2];

    /* A few files, and scandir sorted by name. */
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof n, "f%d", 4 - i);
        int fd = open(at(n), O_CREAT | O_WRONLY, 0644);
        check(fd >= 0 && write(fd, n, strlen(n)) == (ssize_t)strlen(n), "create");
        check(close(fd) == 0, "close");
    }
    struct dirent **list;
    int n = scandir(dir, &list, no_dots, alphasort);
    check(n >= 0, "scandir");
    printf("scandir:");
    for (int i = 0; i < n; i++) {
        printf(" %s", list[i]->d_name);
        free(list[i]);
    }
    printf(" (%d)\n", n);
    free(list);

    /* readdir_r, telldir and seekdir back to a remembered entry. */
    DIR *d = opendir(dir);
    check(d != NULL, "opendir");
    struct dirent ent, *res;
    long mark = -1;
    char marked[256] = "";
    int count = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    while (readdir_r(d, &ent, &res) == 0 && res != NULL) {
        count++;
        if (count == 3) {
            mark = telldir(d);
        } else if (count == 4) {
            strcpy(marked, ent.d_name);
        }
    }
    seekdir(d, mark);
    struct dirent *again = readdir(d);
    printf("readdir_r: %d entries; seekdir back: %s\n", count,
           again && strcmp(again->d_name, marked) == 0 ? "same entry" : "different");
#pragma GCC diagnostic pop
    rewinddir(d);
    int first = 0;
    while (readdir(d))
        first++;
    printf("rewinddir: %d entries again\n", first);
    check(closedir(d) == 0, "closedir");

    /* getdents64 through glibc's wrapper. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    check(dfd >= 0, "open dir");
    char dbuf[4096];
    int total = 0;
    ssize_t got;
    while ((got = getdents64(dfd, dbuf, sizeof dbuf)) > 0)
        for (ssize_t off = 0; off < got; off += ((struct dirent64 *)(dbuf + off))->d_reclen)
            total++;
    printf("getdents64: %d entries\n", total);
    close(dfd);

    /* copy_file_range and sendfile: host -> dir -> dir -> host. */
    int h = open(host, O_CREAT | O_TRUNC | O_RDWR, 0644);
    check(h >= 0, "open host");
    char big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7);
    check(write(h, big, sizeof big) == sizeof big, "write host");
    int a = open(at("copy-a"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    off_t in_off = 1000;
    ssize_t c = copy_file_range(h, &in_off, a, NULL, 50000, 0);
    printf("copy_file_range host->dir: %zd, in offset %lld, out offset %lld\n", c,
           (long long)in_off, (long long)lseek(a, 0, SEEK_CUR));
    int b = open(at("copy-b"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    off_t from = 10;
    c = sendfile(b, a, &from, 30000);
    printf("sendfile dir->dir: %zd, offset %lld\n", c, (long long)from);
    check(ftruncate(h, 0) == 0 && lseek(h, 0, SEEK_SET) == 0, "reset host");
    lseek(b, 0, SEEK_SET);
    c = copy_file_range(b, NULL, h, NULL, 1 << 20, 0);
    printf("copy_file_range dir->host: %zd\n", c);
    char back[30000];
    check(pread(h, back, sizeof back, 0) == sizeof back, "read back");
    printf("content kept: %s\n", memcmp(back, big + 1010, sizeof back) == 0 ? "yes" : "no");
    close(h);
    close(b);

    /* posix_fallocate, status flags, dup2 onto a low number, fdopen. */
    printf("posix_fallocate: %d, size %lld\n", posix_fallocate(a, 0, 200000),
           (long long)lseek(a, 0, SEEK_END));
    int fl = fcntl(a, F_GETFL);
    fcntl(a, F_SETFL, fl | O_APPEND);
    printf("F_GETFL append: %s, cloexec: %d\n",
           fcntl(a, F_GETFL) & O_APPEND ? "yes" : "no", fcntl(a, F_GETFD));
    int saved = dup(0);
    check(dup2(a, 0) == 0, "dup2 onto 0");
    struct stat st;
    check(fstat(0, &st) == 0, "fstat 0");
    printf("dup2 onto 0: size %lld\n", (long long)st.st_size);
    dup2(saved, 0);
    close(saved);
    FILE *f = fdopen(a, "a");
    check(f != NULL, "fdopen");
    fprintf(f, "tail");
    check(fstat(fileno(f), &st) == 0, "fstat fileno");
    fclose(f);
    check(stat(at("copy-a"), &st) == 0, "stat");
    printf("fdopen append: size %lld\n", (long long)st.st_size);

    /* preadv/pwritev at an offset, and pwritev2 at the file offset (-1). */
    int v = open(at("vec"), O_CREAT | O_TRUNC | O_RDWR, 0644);
    char p1[] = "hello ", p2[] = "vectors";
    struct iovec wv[2] = {{p1, 6}, {p2, 7}};
    printf("pwritev: %zd\n", pwritev(v, wv, 2, 100));
    char r1[4], r2[20] = "";
    struct iovec rv[2] = {{r1, 4}, {r2, sizeof r2}};
    ssize_t rn = preadv(v, rv, 2, 100);
    printf("preadv: %zd %.4s|%.*s\n", rn, r1, (int)(rn > 4 ? rn - 4 : 0), r2);
    printf("pwritev2 at the file offset: %zd, offset now %lld\n", pwritev2(v, wv, 1, -1, 0),
           (long long)lseek(v, 0, SEEK_CUR));
    close(v);
    sync();

    /* nftw over the directory: physical, and depth-first. */
    mkdir(at("sub"), 0755);
    symlink("f0", at("sub/link"));
    symlink("nowhere", at("sub/dangling"));
    walk(FTW_PHYS, "physical");
    walk(FTW_DEPTH, "depth-first, following links");

    /* close_range closes image descriptors too. */
    int x = open(at("f0"), O_RDONLY);
    int y = dup(x);
    check(close_range(x < y ? x : y, x < y ? y : x, 0) == 0, "close_range");
    printf("close_range: read after %s\n", read(x, back, 1) < 0 && errno == EBADF ? "EBADF" : "?");

    /* Threads on the directory at once. */
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += r != NULL;
    }
    n = scandir(dir, &list, no_dots, alphasort);
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
    printf("threads: %d failed, %d entries left\n", bad, n);
    return 0;
}

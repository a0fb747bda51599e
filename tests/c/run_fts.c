/*
 * run_fts.c - glibc's fts(3) over a small tree, printed as a transcript,
 * for `ulfs run` to be compared with the same program on tmpfs. Usage:
 * run_fts DIR, where DIR is an empty directory to work in (a tmpfs
 * directory, or /ulfs/...).
 *
 * Builds DIR/t (files, nested and empty directories, a symlink to a file,
 * a dangling one, one to a directory, and one to `.`), then walks it
 * physically and logically (with FTS_COMFOLLOW and a missing root), with
 * fts_set(FTS_SKIP) on one directory and fts_children on another, whose
 * entries fts_read must then return. Walk lines are sorted (directory
 * order is each file system's own), except for a walk with a comparison
 * function, whose order is fixed, and which also uses FTS_AGAIN and
 * FTS_FOLLOW.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_common.h"
static size_t dir_len;

static void file(const char *name, int size) {
    int fd = open(at(name), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    check(fd >= 0, name);
    for (int i = 0; i < size; i++)
        check(write(fd, "x", 1) == 1, "write");
    check(close(fd) == 0, "close");
}

static char *seen[256];
static int nseen;

/* One line per entry, its path relative to DIR. Also checks the fields
 * programs rely on: lengths, the name at the end of the path, the parent's
 * level. */
static void record(const FTSENT *e) {
    char line[512];
    const char *rel = e->fts_path + dir_len;
    int ok = e->fts_pathlen == strlen(e->fts_path) && e->fts_namelen == strlen(e->fts_name) &&
             strcmp(e->fts_path + e->fts_pathlen - e->fts_namelen, e->fts_name) == 0 &&
             e->fts_parent->fts_level == e->fts_level - 1 && e->fts_accpath != NULL;
    char extra[64] = "";
    if (e->fts_info == FTS_F)
        snprintf(extra, sizeof extra, " size=%lld", (long long)e->fts_statp->st_size);
    else if (e->fts_info == FTS_NS || e->fts_info == FTS_DNR || e->fts_info == FTS_ERR)
        snprintf(extra, sizeof extra, " errno=%s", strerror(e->fts_errno));
    else if (e->fts_info == FTS_DC)
        snprintf(extra, sizeof extra, " cycle-level=%d", e->fts_cycle->fts_level);
    snprintf(line, sizeof line, "%s info=%d level=%d namelen=%d%s%s", rel, e->fts_info,
             e->fts_level, e->fts_namelen, extra, ok ? "" : " BAD-FIELDS");
    if (nseen < 256)
        seen[nseen++] = strdup(line);
}

static int by_text(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void flush(const char *what, int sorted) {
    if (sorted)
        qsort(seen, nseen, sizeof seen[0], by_text);
    printf("%s: %d entries\n", what, nseen);
    for (int i = 0; i < nseen; i++) {
        printf("  %s\n", seen[i]);
        free(seen[i]);
    }
    nseen = 0;
}

static int by_name(const FTSENT **a, const FTSENT **b) {
    return strcmp((*a)->fts_name, (*b)->fts_name);
}

/* A walk of the roots; skips t/skipme, and lists t/sub with fts_children
 * (checking that fts_read then returns those same entries). */
static void walk(char *const *roots, int options, const char *what) {
    FTS *fts = fts_open(roots, options, NULL);
    check(fts != NULL, "fts_open");
    FTSENT *kids[16];
    int nkids = 0, reused = 0;
    FTSENT *e;
    while ((e = fts_read(fts)) != NULL) {
        record(e);
        for (int i = 0; i < nkids; i++)
            if (e == kids[i]) {
                kids[i] = NULL; /* counted once (a directory comes twice) */
                reused++;
            }
        if (e->fts_info == FTS_D && strcmp(e->fts_name, "skipme") == 0)
            check(fts_set(fts, e, FTS_SKIP) == 0, "fts_set");
        if (e->fts_info == FTS_D && strcmp(e->fts_name, "sub") == 0 && e->fts_level == 1) {
            char *names[16];
            for (FTSENT *k = fts_children(fts, 0); k != NULL && nkids < 16; k = k->fts_link) {
                names[nkids] = k->fts_name;
                kids[nkids++] = k;
            }
            qsort(names, nkids, sizeof names[0], by_text);
            char line[256] = "children of t/sub:";
            for (int i = 0; i < nkids; i++) {
                strcat(line, " ");
                strcat(line, names[i]);
            }
            if (nseen < 256)
                seen[nseen++] = strdup(line);
        }
    }
    check(errno == 0, "fts_read");
    check(fts_close(fts) == 0, "fts_close");
    char line[64];
    snprintf(line, sizeof line, "fts_children entries returned by fts_read: %d of %d", reused,
             nkids);
    seen[nseen++] = strdup(line);
    flush(what, 1);
}

/* Sorted by name, so in walk order: a.txt is read twice (FTS_AGAIN), and
 * the symlink dirlink followed into (FTS_FOLLOW). */
static void ordered(char *const *roots) {
    FTS *fts = fts_open(roots, FTS_PHYSICAL, by_name);
    check(fts != NULL, "fts_open sorted");
    int again = 0;
    FTSENT *e;
    while ((e = fts_read(fts)) != NULL) {
        record(e);
        if (strcmp(e->fts_name, "a.txt") == 0 && !again++)
            check(fts_set(fts, e, FTS_AGAIN) == 0, "fts_set again");
        if (strcmp(e->fts_name, "dirlink") == 0 && e->fts_info == FTS_SL)
            check(fts_set(fts, e, FTS_FOLLOW) == 0, "fts_set follow");
    }
    check(fts_close(fts) == 0, "fts_close");
    flush("physical, sorted by name", 0);
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    dir = argv[1];
    dir_len = strlen(dir);

    check(mkdir(at("t"), 0755) == 0, "mkdir t");
    check(mkdir(at("t/sub"), 0755) == 0, "mkdir");
    check(mkdir(at("t/sub/deep"), 0755) == 0, "mkdir");
    check(mkdir(at("t/skipme"), 0755) == 0, "mkdir");
    check(mkdir(at("t/empty"), 0755) == 0, "mkdir");
    file("t/a.txt", 10);
    file("t/sub/b.txt", 100);
    file("t/sub/deep/c.txt", 3);
    file("t/skipme/hidden.txt", 7);
    check(symlink("a.txt", at("t/link_to_a")) == 0, "symlink");
    check(symlink("nowhere", at("t/dangling")) == 0, "symlink");
    check(symlink("sub", at("t/dirlink")) == 0, "symlink");
    check(symlink(".", at("t/loop")) == 0, "symlink");

    char *tree[] = {at("t"), NULL};
    walk(tree, FTS_PHYSICAL, "physical");
    char *two[] = {at("t/link_to_a"), at("t/missing"), at("t"), NULL};
    walk(two, FTS_LOGICAL | FTS_COMFOLLOW, "logical, command-line symlinks followed");
    char *link[] = {at("t/dirlink"), NULL};
    walk(link, FTS_PHYSICAL, "physical, a symlink root");
    walk(link, FTS_PHYSICAL | FTS_COMFOLLOW, "physical, a followed symlink root");
    walk(tree, FTS_PHYSICAL | FTS_SEEDOT, "physical, with dots");
    ordered(tree);

    /* fts_children before the first fts_read lists the roots (named by the
     * whole path given, until fts_read returns them). */
    FTS *fts = fts_open(two, FTS_PHYSICAL, by_name);
    check(fts != NULL, "fts_open");
    printf("roots:");
    for (FTSENT *k = fts_children(fts, FTS_NAMEONLY); k != NULL; k = k->fts_link)
        printf(" %s", k->fts_name + dir_len);
    printf("\n");
    check(fts_close(fts) == 0, "fts_close");
    return 0;
}

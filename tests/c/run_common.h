/*
 * run_common.h - what the `ulfs run` test programs (run_calls.c,
 * run_fts.c, ...) share: the directory they work in, a check that stops
 * the program with the failing call named, paths below the directory, and
 * a file's content shown in a transcript.
 * Header-only (static functions): each program is one compiled file.
 */
#ifndef RUN_COMMON_H
#define RUN_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The directory the program works in (argv[1]). */
static const char *dir;

/* Stops the program, naming the call that failed and errno, unless `ok`. */
static void check(int ok, const char *what) {
    if (!ok) {
        printf("FAIL %s: %s\n", what, strerror(errno));
        exit(1);
    }
}

/* `dir/name`, in one of 8 rotating buffers (not thread-safe). */
static char *at(const char *name) {
    static char buf[8][4096];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

/* Prints `name: [its content]` for a file of the directory; a long file
 * as its size, first and last bytes. */
static inline void show_file(const char *name) {
    static char buf[1 << 16];
    FILE *f = fopen(at(name), "r");
    check(f != NULL, name);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    if (n > 200)
        printf("%s: %zu bytes, starts [%.20s], ends [%s]\n", name, n, buf, buf + n - 20);
    else
        printf("%s: [%s]\n", name, buf);
}

#endif

/*
 * run_printf.c - the variadic output calls on files of the directory
 * argv[1] (an image directory under `ulfs run`, or tmpfs for the
 * reference): dprintf and vdprintf on a descriptor, fwprintf and
 * vfwprintf on a stream, wprintf on a standard output that is a file
 * (in a child, after freopen), long results, a bad descriptor, a
 * character the C locale lacks, %m. Built twice by
 * the test, plain and with _FORTIFY_SOURCE (which calls the __*_chk
 * forms). Prints a transcript that must equal the tmpfs run's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <locale.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>

#include "run_common.h"


static int my_vdprintf(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vdprintf(fd, fmt, ap);
    va_end(ap);
    return n;
}

static int my_vfwprintf(FILE *f, const wchar_t *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vfwprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: run_printf DIR\n");
        return 2;
    }
    dir = argv[1];

    /* In the C locale a character past ASCII is written as '?'; %m is the
     * errno the program left. */
    FILE *c = fopen(at("c-locale.txt"), "w");
    check(c != NULL, "fopen c-locale.txt");
    printf("fwprintf in the C locale: %d\n", fwprintf(c, L"caf\u00e9 %d\n", 1));
    errno = ENOENT;
    printf("fwprintf %%m: %d\n", fwprintf(c, L"[%m]\n"));
    check(fclose(c) == 0, "fclose c-locale.txt");
    show_file("c-locale.txt");
    int m = open(at("m.txt"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    errno = EACCES;
    printf("dprintf %%m: %d\n", dprintf(m, "[%m]\n"));
    close(m);
    show_file("m.txt");

    check(setlocale(LC_ALL, "C.UTF-8") != NULL, "setlocale C.UTF-8");

    int fd = open(at("d.txt"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(fd >= 0, "open d.txt");
    printf("dprintf: %d\n", dprintf(fd, "%s-%d-%.2f-%c|", "dp", 42, 3.5, 'z'));
    printf("vdprintf: %d\n", my_vdprintf(fd, "%05d %x %s\n", 7, 255, "end"));
    printf("dprintf long: %d\n", dprintf(fd, "%30000d|\n", 1));
    close(fd);
    show_file("d.txt");

    errno = 0;
    int n = dprintf(fd, "closed %d\n", 1);
    printf("dprintf on a closed descriptor: %d %s\n", n, strerror(errno));

    FILE *f = fopen(at("w.txt"), "w");
    check(f != NULL, "fopen w.txt");
    printf("fwprintf: %d\n", fwprintf(f, L"%ls %d %s|", L"wide-\u00e9\u4e2d", 7, "narrow"));
    printf("vfwprintf: %d\n", my_vfwprintf(f, L"%lc%lc %5.1f\n", L'\u00fc', L'x', 2.25));
    printf("fwprintf long: %d\n", fwprintf(f, L"%5000ls|\n", L"pad"));
    check(fclose(f) == 0, "fclose w.txt");
    show_file("w.txt");

    fflush(stdout);
    pid_t pid = fork();
    check(pid >= 0, "fork");
    if (pid == 0) {
        /* freopen: stdout is byte-oriented already (the parent printed),
         * and only a reopen clears a stream's orientation. */
        if (freopen(at("o.txt"), "w", stdout) == NULL)
            _exit(3);
        int w = wprintf(L"child wprintf %d %ls\n", 5, L"\u00e9t\u00e9");
        fflush(stdout);
        _exit(w == 20 ? 0 : 4);
    }
    int status;
    check(waitpid(pid, &status, 0) == pid, "waitpid");
    printf("child: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    show_file("o.txt");
    return 0;
}

/*
 * The variadic and va_list calls of libc that `ulfs run` must serve on image
 * files: dprintf/vdprintf on an image descriptor, and the formatted wide
 * calls (fwprintf, wprintf and their v- and fortified forms) on a stream of
 * an image file. Stable Rust cannot define a C-variadic function, so these
 * bodies are C; the exported names are Rust naked functions that jump here
 * (variadic.rs), because the cdylib exports only the Rust crate's symbols.
 *
 * Everything not ours goes to libc's own definition (RTLD_NEXT), unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <wchar.h>

/* glibc's fortified formatters (no public prototypes). */
int __vasprintf_chk(char **result, int flag, const char *fmt, va_list ap);
int __vswprintf_chk(wchar_t *s, size_t n, int flag, size_t slen, const wchar_t *fmt,
                    va_list ap);

/* variadic.rs: whether the library serves this descriptor or stream. */
int ulfs_preload_serves_fd(int fd);
int ulfs_preload_serves_stream(FILE *f);

/* Largest formatted wide text held in memory at once (wide characters). */
#define WIDE_MAX (1u << 24)

static void *next_definition(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

/* Writes all of buf through write(), which the library serves for image
 * descriptors (and refuses with EBADF for its own). */
static int write_all(int fd, const char *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, buf + done, len - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

/* Formats into memory and writes it to image descriptor fd; `flag` >= 0:
 * with the fortified formatter's checks. */
static int format_to_fd(int fd, int flag, const char *fmt, va_list ap)
{
    char *text = NULL;
    int n = flag >= 0 ? __vasprintf_chk(&text, flag, fmt, ap) : vasprintf(&text, fmt, ap);
    if (n < 0)
        return -1;
    int rc = write_all(fd, text, (size_t)n);
    free(text);
    return rc < 0 ? -1 : n;
}

int ulfs_c_vdprintf(int fd, const char *fmt, va_list ap)
{
    if (!ulfs_preload_serves_fd(fd)) {
        int (*real)(int, const char *, va_list) = next_definition("vdprintf");
        return real(fd, fmt, ap);
    }
    return format_to_fd(fd, -1, fmt, ap);
}

int ulfs_c_dprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vdprintf(fd, fmt, ap);
    va_end(ap);
    return n;
}

int ulfs_c_vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
    if (!ulfs_preload_serves_fd(fd)) {
        int (*real)(int, int, const char *, va_list) = next_definition("__vdprintf_chk");
        return real(fd, flag, fmt, ap);
    }
    return format_to_fd(fd, flag, fmt, ap);
}

int ulfs_c_dprintf_chk(int fd, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vdprintf_chk(fd, flag, fmt, ap);
    va_end(ap);
    return n;
}

/* Formats wide text and puts it on a stream of an image file through
 * fputws (wide.rs: a multibyte character at a time, in the locale).
 * `flag` >= 0: the fortified formatter, with its checks (%n in a
 * writable format aborts, as glibc's __*_chk calls do). */
static int wide_to_stream(FILE *f, int flag, const wchar_t *fmt, va_list ap)
{
    size_t cap = 256;
    wchar_t *text = NULL;
    int n;
    for (;;) {
        wchar_t *grown = realloc(text, cap * sizeof(wchar_t));
        if (grown == NULL) {
            free(text);
            errno = ENOMEM;
            return -1;
        }
        text = grown;
        /* errno as the program left it: %m prints it. */
        int saved = errno;
        va_list again;
        va_copy(again, ap);
        n = flag >= 0 ? __vswprintf_chk(text, cap, flag, cap, fmt, again)
                      : vswprintf(text, cap, fmt, again);
        va_end(again);
        if (n >= 0) {
            errno = saved;
            break;
        }
        /* -1 is both "too small" and an encoding error (errno set to
         * EILSEQ): grow, to a bound, only for the first. */
        if ((errno == EILSEQ && saved != EILSEQ) || cap >= WIDE_MAX) {
            free(text);
            if (errno != EILSEQ)
                errno = EOVERFLOW;
            return -1;
        }
        cap *= 4;
    }
    int rc = n == 0 ? 0 : fputws(text, f);
    free(text);
    return rc < 0 ? -1 : n;
}

int ulfs_c_vfwprintf(FILE *f, const wchar_t *fmt, va_list ap)
{
    if (!ulfs_preload_serves_stream(f)) {
        int (*real)(FILE *, const wchar_t *, va_list) = next_definition("vfwprintf");
        return real(f, fmt, ap);
    }
    return wide_to_stream(f, -1, fmt, ap);
}

int ulfs_c_fwprintf(FILE *f, const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vfwprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

int ulfs_c_vwprintf(const wchar_t *fmt, va_list ap)
{
    return ulfs_c_vfwprintf(stdout, fmt, ap);
}

int ulfs_c_wprintf(const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vfwprintf(stdout, fmt, ap);
    va_end(ap);
    return n;
}

int ulfs_c_vfwprintf_chk(FILE *f, int flag, const wchar_t *fmt, va_list ap)
{
    if (!ulfs_preload_serves_stream(f)) {
        int (*real)(FILE *, int, const wchar_t *, va_list) = next_definition("__vfwprintf_chk");
        return real(f, flag, fmt, ap);
    }
    return wide_to_stream(f, flag, fmt, ap);
}

int ulfs_c_fwprintf_chk(FILE *f, int flag, const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vfwprintf_chk(f, flag, fmt, ap);
    va_end(ap);
    return n;
}

int ulfs_c_vwprintf_chk(int flag, const wchar_t *fmt, va_list ap)
{
    return ulfs_c_vfwprintf_chk(stdout, flag, fmt, ap);
}

int ulfs_c_wprintf_chk(int flag, const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = ulfs_c_vfwprintf_chk(stdout, flag, fmt, ap);
    va_end(ap);
    return n;
}

/* The argument list of an execl call, from arg0 to its NULL, as a
 * NULL-terminated argv (malloc'd); for execle, *envp gets the environment
 * that follows the NULL. */
static char **exec_argv(const char *arg0, va_list ap, char ***envp)
{
    size_t n = 0;
    if (arg0 != NULL) {
        va_list count;
        va_copy(count, ap);
        n = 1;
        while (va_arg(count, char *) != NULL)
            n++;
        va_end(count);
    }
    char **argv = malloc((n + 1) * sizeof *argv);
    if (argv == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    argv[0] = (char *)arg0;
    for (size_t i = 1; i < n; i++)
        argv[i] = va_arg(ap, char *);
    if (n > 0)
        (void)va_arg(ap, char *); /* the terminating NULL */
    argv[n] = NULL;
    if (envp != NULL)
        *envp = va_arg(ap, char **);
    return argv;
}

/* Frees argv keeping the exec's errno, and returns -1 (an exec that
 * returns failed). */
static int exec_failed(char **argv)
{
    int saved = errno;
    free(argv);
    errno = saved;
    return -1;
}

/* The execl forms reach the library's execv, execvp and execve (process.rs),
 * which hand the image over; glibc's own would call execve internally, out of
 * the library's sight. */
/* execl or execlp: the list as an argv, to `exec` (execv or execvp). */
static int exec_list(int (*exec)(const char *, char *const[]), const char *path,
                     const char *arg0, va_list ap)
{
    char **argv = exec_argv(arg0, ap, NULL);
    if (argv == NULL)
        return -1;
    exec(path, argv);
    return exec_failed(argv);
}

int ulfs_c_execl(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    int r = exec_list(execv, path, arg0, ap);
    va_end(ap);
    return r;
}

int ulfs_c_execlp(const char *file, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    int r = exec_list(execvp, file, arg0, ap);
    va_end(ap);
    return r;
}

int ulfs_c_execle(const char *path, const char *arg0, ...)
{
    char **envp;
    va_list ap;
    va_start(ap, arg0);
    char **argv = exec_argv(arg0, ap, &envp);
    va_end(ap);
    if (argv == NULL)
        return -1;
    execve(path, argv, envp);
    return exec_failed(argv);
}

/*
 * run_std_streams.c - the standard streams on files of the directory
 * argv[1] (an image directory under `ulfs run`, or tmpfs for the
 * reference): stdio after dup2 onto 1 and 2 and back, freopen of stdout
 * and stdin, reading stdin from a file, a child started with the file as
 * its standard output, _exit in a child, and (last: stdout is gone after)
 * fclose(stdout) closing descriptor 1. Prints a
 * transcript (on the saved terminal descriptor) that must equal the
 * tmpfs run's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_common.h"

/* The transcript goes to a copy of the original standard output. */
static FILE *out;

static void show(const char *name) {
    char buf[512];
    FILE *f = fopen(at(name), "r");
    check(f != NULL, name);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    fprintf(out, "%s: [%s]\n", name, buf);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: run_std_streams DIR\n");
        return 2;
    }
    dir = argv[1];
    int saved_out = dup(1), saved_err = dup(2);
    check(saved_out >= 0 && saved_err >= 0, "dup");
    out = fdopen(dup(saved_out), "w");
    check(out != NULL, "fdopen");
    setvbuf(out, NULL, _IONBF, 0);

    /* stdio on descriptor 1 moved onto a file, then back. */
    fflush(stdout);
    int fd = open(at("dup2"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(fd >= 0, "open dup2");
    check(dup2(fd, 1) == 1, "dup2 onto 1");
    close(fd);
    printf("printf %d\n", 42);
    puts("puts");
    fputs("fputs\n", stdout);
    putchar('c');
    putchar('\n');
    fwrite("fwrite\n", 1, 7, stdout);
    fprintf(stdout, "fileno %d\n", fileno(stdout));
    fflush(stdout);
    check(dup2(saved_out, 1) == 1, "dup2 back");
    show("dup2");

    /* stderr (unbuffered) onto a file: perror and fprintf. */
    fd = open(at("err"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(dup2(fd, 2) == 2, "dup2 onto 2");
    close(fd);
    errno = ENOENT;
    perror("perror");
    fprintf(stderr, "stderr %s\n", "line");
    check(dup2(saved_err, 2) == 2, "dup2 back onto 2");
    show("err");

    /* freopen of stdout onto a file, appending. */
    FILE *f = fopen(at("fre"), "w");
    fputs("first\n", f);
    fclose(f);
    fflush(stdout);
    check(freopen(at("fre"), "a", stdout) != NULL, "freopen stdout");
    printf("appended via freopen\n");
    fflush(stdout);
    check(dup2(saved_out, 1) == 1, "dup2 back after freopen");
    show("fre");

    /* stdin from a file: fgets, getchar, scanf. */
    f = fopen(at("in"), "w");
    fputs("line one\nX\n17 abc\n", f);
    fclose(f);
    check(freopen(at("in"), "r", stdin) != NULL, "freopen stdin");
    char line[64];
    check(fgets(line, sizeof line, stdin) != NULL, "fgets");
    int ch = getchar();
    int n;
    char word[16];
    check(scanf("%d %15s", &n, word) == 2, "scanf");
    fprintf(out, "stdin: [%.8s] [%c] %d %s eof=%d\n", line, ch, n, word, getchar() == '\n' && getchar() == EOF);

    /* A child started with the file as its standard output, writing
     * after the parent's own line, then the parent again: one offset. */
    fd = open(at("child"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(dup2(fd, 1) == 1, "dup2 for the child");
    close(fd);
    check(write(1, "parent\n", 7) == 7, "write parent");
    pid_t pid = fork();
    if (pid == 0) {
        execlp("sh", "sh", "-c", "echo child-sh; ls -d /", (char *)NULL);
        _exit(127);
    }
    int status;
    check(waitpid(pid, &status, 0) == pid, "waitpid");
    check(write(1, "parent again\n", 13) == 13, "write parent again");
    check(dup2(saved_out, 1) == 1, "dup2 back after the child");
    fprintf(out, "child status %d\n", WEXITSTATUS(status));
    show("child");

    /* _exit in a forked child does not write the parent's buffered
     * output a second time. */
    fd = open(at("buffered"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(dup2(fd, 1) == 1, "dup2 for _exit");
    close(fd);
    printf("buffered once\n");
    pid = fork();
    if (pid == 0)
        _exit(0);
    check(waitpid(pid, &status, 0) == pid, "waitpid _exit");
    fflush(stdout);
    check(dup2(saved_out, 1) == 1, "dup2 back after _exit");
    show("buffered");

    /* fclose(stdout) closes descriptor 1 (and the file keeps its data). */
    fd = open(at("closed"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    check(dup2(fd, 1) == 1, "dup2 for fclose");
    close(fd);
    printf("before fclose\n");
    check(fclose(stdout) == 0, "fclose stdout");
    fprintf(out, "descriptor 1 after fclose(stdout): %s\n", fcntl(1, F_GETFD) < 0 && errno == EBADF ? "closed" : "open");
    show("closed");
    return 0;
}

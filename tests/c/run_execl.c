/*
 * run_execl.c - writes into DIR, then replaces itself with execl, execlp
 * or execle (chosen by argv[2]) running `ls -1 DIR`: what it wrote must be
 * there for the new program (glibc's execl family reaches execve through
 * internal calls, so `ulfs run` serves these variadic calls itself).
 * `many` runs `ls -1 DIR` with 30 more arguments (the name of DIR again),
 * past any fixed count of parameters.
 * Usage: run_execl DIR l|lp|le|many
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/written-before-exec-%s", argv[1], argv[2]);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || write(fd, "important\n", 10) != 10 || close(fd) != 0)
        return 1;
    snprintf(path, sizeof path, "%s/dir-before-exec-%s", argv[1], argv[2]);
    if (mkdir(path, 0755) != 0)
        return 1;
    fflush(stdout);
    char *env[] = {"LC_ALL=C", NULL};
    if (strcmp(argv[2], "l") == 0)
        execl("/bin/ls", "ls", "-1", argv[1], (char *)NULL);
    else if (strcmp(argv[2], "many") == 0) {
        const char *d = argv[1];
        execl("/bin/ls", "ls", "-1", "-d", d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d,
              d, d, d, d, d, d, d, d, d, (char *)NULL);
    } else if (strcmp(argv[2], "lp") == 0)
        execlp("ls", "ls", "-1", argv[1], (char *)NULL);
    else
        execle("/bin/ls", "ls", "-1", argv[1], (char *)NULL, env);
    perror("exec");
    return 1;
}

/*
 * run_spawn_actions.c - posix_spawn file actions on files of the directory
 * argv[1] (an image directory under `ulfs run`, or tmpfs for the
 * reference): a child's standard output dup2'd from an open file (one
 * offset shared with the parent), its standard input from a file, an
 * addopen of a path in the directory (created and truncated), an addopen
 * that fails (the spawn reports the error), addclose, and a host path
 * opened by addopen. Prints a transcript that must equal the tmpfs run's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_common.h"

extern char **environ;


/* Spawns argv with the actions; returns the spawn's result and the
 * child's exit status. */
static void run(const char *what, posix_spawn_file_actions_t *fa, char *const argv[]) {
    fflush(stdout);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], fa, NULL, argv, environ);
    int status = -1;
    if (r == 0)
        check(waitpid(pid, &status, 0) == pid, "waitpid");
    printf("%s: spawn %s, exit %d\n", what, r == 0 ? "ok" : strerror(r),
           r == 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: run_spawn_actions DIR\n");
        return 2;
    }
    dir = argv[1];
    char *echo[] = {"echo", "from the child", NULL};
    char *cat[] = {"cat", NULL};
    posix_spawn_file_actions_t fa;

    /* dup2 of an image file onto 1, between the parent's own writes. */
    int fd = open(at("shared"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(fd >= 0 && write(fd, "head\n", 5) == 5, "shared");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    run("dup2 stdout", &fa, echo);
    posix_spawn_file_actions_destroy(&fa);
    check(write(fd, "tail\n", 5) == 5 && close(fd) == 0, "tail");
    show_file("shared");

    /* Standard input from a file, output to another (addopen). */
    fd = open(at("in"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    check(fd >= 0 && write(fd, "line one\nline two\n", 18) == 18, "in");
    check(lseek(fd, 5, SEEK_SET) == 5, "lseek");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 0);
    posix_spawn_file_actions_addopen(&fa, 1, at("out"), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    posix_spawn_file_actions_addclose(&fa, fd);
    run("stdin from a file, addopen stdout", &fa, cat);
    posix_spawn_file_actions_destroy(&fa);
    printf("offset after the child read: %ld\n", (long)lseek(fd, 0, SEEK_CUR));
    close(fd);
    show_file("out");

    /* addopen truncates what was there; relative to the working
     * directory. */
    check(chdir(dir) == 0, "chdir");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "out", O_WRONLY | O_TRUNC, 0);
    run("addopen relative", &fa, echo);
    posix_spawn_file_actions_destroy(&fa);
    show_file("out");

    /* An addopen that cannot succeed: the spawn says why. */
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, at("missing/out"), O_CREAT | O_WRONLY, 0600);
    run("addopen in a missing directory", &fa, echo);
    posix_spawn_file_actions_destroy(&fa);

    /* A host path still opens in the child. */
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, at("from-null"), O_CREAT | O_WRONLY, 0644);
    run("host addopen", &fa, cat);
    posix_spawn_file_actions_destroy(&fa);
    show_file("from-null");
    return 0;
}

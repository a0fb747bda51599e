/*
 * run_locks.c - record locks and flock between processes on files of the
 * directory argv[1] (an image directory under `ulfs run`, or tmpfs for the
 * reference): a child sees its parent's POSIX lock (EAGAIN, F_GETLK names
 * the parent), waits for it with F_SETLKW until the parent unlocks, flock
 * and OFD locks conflict across processes, a lock goes when its process
 * exits or is killed or closes a descriptor a hand-over left pending, a
 * signal ends F_SETLKW (also one that comes while the request is still
 * trying, not sleeping; not one whose handler restarts calls), lockf, offsets past off_t, flock conversion
 * letting the old lock go first, and POSIX locks survive an exec except
 * on files whose descriptors the exec closes. Prints a transcript
 * that must equal the tmpfs run's.
 * Usage: run_locks DIR  (run_locks DIR after-exec: the exec'd half)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run_common.h"

static void on_alarm(int sig) { (void)sig; }

static int lock(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl);
}

/* F_GETLK for a write lock on [start, start+len): what is in the way. */
static void show_getlk(int fd, off_t start, off_t len, pid_t expect) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    check(fcntl(fd, F_GETLK, &fl) == 0, "F_GETLK");
    if (fl.l_type == F_UNLCK)
        printf("getlk: unlocked\n");
    else
        printf("getlk: %s [%ld, +%ld) held by the expected process: %s\n",
               fl.l_type == F_WRLCK ? "write" : "read", (long)fl.l_start, (long)fl.l_len,
               fl.l_pid == expect ? "yes" : "no");
}

static void append(const char *name, const char *line) {
    int fd = open(at(name), O_CREAT | O_WRONLY | O_APPEND, 0644);
    check(fd >= 0 && write(fd, line, strlen(line)) == (ssize_t)strlen(line), "append");
    close(fd);
}


static int wait_child(pid_t p) {
    int status;
    check(waitpid(p, &status, 0) == p, "waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The exec'd half: the lock taken before the exec is still this
 * process's, as a child sees. */
static int after_exec(void) {
    int fd = open(at("exec.lock"), O_RDWR);
    check(fd >= 0, "open exec.lock");
    pid_t me = getpid();
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        int c = open(at("exec.lock"), O_RDWR);
        show_getlk(c, 0, 1, me);
        c = open(at("cloexec.lock"), O_RDWR);
        show_getlk(c, 0, 1, me);
        fflush(stdout);
        _exit(0);
    }
    printf("exec child: %d\n", wait_child(p));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: run_locks DIR\n");
        return 2;
    }
    dir = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3)
        return after_exec();

    /* A child meets its parent's POSIX lock, then waits for it. */
    int fd = open(at("db"), O_CREAT | O_RDWR, 0644);
    check(fd >= 0, "open db");
    check(lock(fd, F_SETLK, F_WRLCK, 0, 100) == 0, "parent lock");
    pid_t parent = getpid();
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        int c = open(at("db"), O_RDWR);
        check(c >= 0, "child open");
        int r = lock(c, F_SETLK, F_WRLCK, 0, 10);
        printf("child F_SETLK: %d %s\n", r, r < 0 ? strerror(errno) : "");
        r = lock(c, F_SETLK, F_RDLCK, 100, 10);
        printf("child F_SETLK past the range: %d\n", r);
        show_getlk(c, 5, 10, parent);
        flock(c, LOCK_EX | LOCK_NB) == 0 ? printf("child flock: ok\n") : printf("child flock: %s\n", strerror(errno));
        check(lock(c, F_SETLKW, F_WRLCK, 0, 10) == 0, "child F_SETLKW");
        append("log", "child has the lock\n");
        _exit(0);
    }
    usleep(200 * 1000);
    append("log", "parent unlocks\n");
    check(lock(fd, F_SETLK, F_UNLCK, 0, 0) == 0, "parent unlock");
    printf("child: %d\n", wait_child(p));
    show_file("log");
    /* The child's lock went with it. */
    printf("parent F_SETLK after the child exited: %d\n", lock(fd, F_SETLK, F_WRLCK, 0, 10));
    check(lock(fd, F_SETLK, F_UNLCK, 0, 0) == 0, "unlock");

    /* flock between two processes, and a killed holder. */
    fflush(stdout);
    p = fork();
    if (p == 0) {
        int c = open(at("flk"), O_CREAT | O_RDWR, 0644);
        check(c >= 0 && flock(c, LOCK_EX) == 0, "child flock");
        int o = open(at("db"), O_RDWR);
        check(o >= 0 && lock(o, F_SETLK, F_WRLCK, 0, 0) == 0, "child lock");
        append("log2", "child locked\n");
        for (;;)
            pause();
    }
    int f = open(at("flk"), O_CREAT | O_RDWR, 0644);
    check(f >= 0, "open flk");
    for (int i = 0; i < 500; i++) {
        struct stat st;
        if (stat(at("log2"), &st) == 0 && st.st_size > 0)
            break;
        usleep(10 * 1000);
    }
    int r = flock(f, LOCK_EX | LOCK_NB);
    printf("parent flock while the child holds it: %d %s\n", r, r < 0 ? strerror(errno) : "");
    r = lock(fd, F_SETLK, F_RDLCK, 50, 1);
    printf("parent F_SETLK while the child holds it: %d %s\n", r, r < 0 ? strerror(errno) : "");
    kill(p, SIGKILL);
    printf("child: %d\n", wait_child(p));
    printf("parent flock after the kill: %d\n", flock(f, LOCK_EX | LOCK_NB));
    printf("parent F_SETLK after the kill: %d\n", lock(fd, F_SETLK, F_WRLCK, 0, 0));
    close(f);
    close(fd);

    /* Closing a descriptor that a hand-over left pending ends the lock. */
    int pc = open(at("pending"), O_CREAT | O_RDWR, 0644);
    check(pc >= 0 && lock(pc, F_SETLK, F_WRLCK, 0, 0) == 0, "pending lock");
    fflush(stdout);
    p = fork();
    if (p == 0)
        _exit(0);
    wait_child(p);
    close(pc);
    fflush(stdout);
    p = fork();
    if (p == 0) {
        int c = open(at("pending"), O_RDWR);
        show_getlk(c, 0, 1, parent);
        flock(c, LOCK_EX);
        _exit(0);
    }
    wait_child(p);

    /* A signal ends F_SETLKW (a handler without SA_RESTART). */
    int in = open(at("intr"), O_CREAT | O_RDWR, 0644);
    check(in >= 0 && lock(in, F_SETLK, F_WRLCK, 0, 0) == 0, "intr lock");
    fflush(stdout);
    p = fork();
    if (p == 0) {
        struct sigaction sa = {.sa_handler = on_alarm};
        sigaction(SIGALRM, &sa, NULL);
        int c = open(at("intr"), O_RDWR);
        ualarm(200 * 1000, 0);
        int r = lock(c, F_SETLKW, F_WRLCK, 0, 0);
        printf("F_SETLKW interrupted: %d %s\n", r, r < 0 ? strerror(errno) : "");
        _exit(0);
    }
    wait_child(p);

    /* The signal comes while the child is not asleep in the wait: the
     * parent keeps the image busy (no blocking call, so no hand-over)
     * when the alarm fires, and only then waits for the child, so the
     * child's request is still trying when the signal comes. It must end
     * with EINTR all the same (it waited for ever: its parent holds the
     * lock and waits for it). A child still waiting after 10 s is
     * killed, and the transcript says so. */
    fflush(stdout);
    p = fork();
    if (p == 0) {
        struct sigaction sa = {.sa_handler = on_alarm};
        sigaction(SIGALRM, &sa, NULL);
        int c = open(at("intr"), O_RDWR);
        ualarm(100 * 1000, 0);
        int r = lock(c, F_SETLKW, F_WRLCK, 0, 0);
        printf("F_SETLKW interrupted while trying: %d %s\n", r, r < 0 ? strerror(errno) : "");
        _exit(0);
    }
    {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        char b = 'x';
        do {
            check(pwrite(in, &b, 1, 0) == 1, "pwrite while busy");
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 400);
        int status, waited = 0;
        while (waitpid(p, &status, WNOHANG) == 0 && waited < 10000) {
            usleep(10 * 1000);
            waited += 10;
        }
        if (waited >= 10000) {
            kill(p, SIGKILL);
            waitpid(p, &status, 0);
            printf("F_SETLKW interrupted while trying: still waiting after 10 s\n");
        }
    }

    /* A handler with SA_RESTART does not end F_SETLKW, even with another
     * signal's handler (never raised) that does not restart calls. */
    int rs = open(at("restart"), O_CREAT | O_RDWR, 0644);
    check(rs >= 0 && lock(rs, F_SETLK, F_WRLCK, 0, 0) == 0, "restart lock");
    fflush(stdout);
    p = fork();
    if (p == 0) {
        struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
        sigaction(SIGALRM, &sa, NULL);
        struct sigaction other = {.sa_handler = on_alarm};
        sigaction(SIGUSR1, &other, NULL);
        int c = open(at("restart"), O_RDWR);
        ualarm(100 * 1000, 0);
        int r = lock(c, F_SETLKW, F_WRLCK, 0, 0);
        printf("F_SETLKW with an SA_RESTART handler: %d %s\n", r, r < 0 ? strerror(errno) : "");
        _exit(0);
    }
    usleep(300 * 1000);
    check(lock(rs, F_SETLK, F_UNLCK, 0, 0) == 0, "restart unlock");
    wait_child(p);
    close(rs);

    /* lockf, an offset past off_t, flock conversion across processes. */
    check(lseek(in, 0, SEEK_SET) == 0 && lockf(in, F_TLOCK, 0) == 0, "lockf");
    fflush(stdout);
    p = fork();
    if (p == 0) {
        int c = open(at("intr"), O_RDWR);
        int r = lockf(c, F_TEST, 0);
        printf("lockf F_TEST: %d %s\n", r, r < 0 ? strerror(errno) : "");
        r = lockf(c, F_TLOCK, 0);
        printf("lockf F_TLOCK: %d %s\n", r, r < 0 ? strerror(errno) : "");
        r = lock(c, F_SETLK, F_RDLCK, INT64_MAX, 10);
        printf("F_SETLK past off_t: %d %s\n", r, r < 0 ? strerror(errno) : "");
        _exit(0);
    }
    wait_child(p);
    close(in);
    int sh = open(at("conv"), O_CREAT | O_RDWR, 0644);
    check(sh >= 0 && flock(sh, LOCK_SH) == 0, "flock shared");
    fflush(stdout);
    p = fork();
    if (p == 0) {
        int c = open(at("conv"), O_RDWR);
        check(flock(c, LOCK_SH) == 0, "child flock shared");
        int r = flock(c, LOCK_EX | LOCK_NB);
        printf("child flock upgrade: %d %s\n", r, r < 0 ? strerror(errno) : "");
        append("conv-log", "child tried\n");
        usleep(300 * 1000);
        _exit(0);
    }
    for (int i = 0; i < 500; i++) {
        struct stat st;
        if (stat(at("conv-log"), &st) == 0 && st.st_size > 0)
            break;
        usleep(10 * 1000);
    }
    /* The child's failed upgrade let its shared lock go. */
    printf("parent flock upgrade: %d\n", flock(sh, LOCK_EX | LOCK_NB));
    wait_child(p);
    close(sh);

    /* POSIX locks survive an exec, except on files whose descriptors the
     * exec closes. */
    int cl = open(at("cloexec.lock"), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    check(cl >= 0 && lock(cl, F_SETLK, F_WRLCK, 0, 0) == 0, "cloexec lock");
    int e = open(at("exec.lock"), O_CREAT | O_RDWR, 0644);
    check(e >= 0 && lock(e, F_SETLK, F_WRLCK, 0, 0) == 0, "exec lock");
    fflush(stdout);
    execl("/proc/self/exe", "run_locks", dir, "after-exec", (char *)NULL);
    check(0, "execl");
    return 1;
}

/*
 * run_signal_reentry.c - a single-threaded program whose signal handler
 * calls into the image while the program itself is inside a call on it.
 * Under `ulfs run` a program with one thread takes no lock (owner.rs in
 * ulfs-preload): such a call must fail with EDEADLK, never hang (as it
 * did on the lock) or see the file system in the middle of a change.
 * The program writes, reads back and stats one file of argv[1] for a
 * while, a timer interrupting it every 200 us with a handler that stats
 * the same file. Prints what the handler's calls met and whether every
 * read gave back what was written.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "run_common.h"

static int fd;
static volatile sig_atomic_t calls, refused, other;

static void on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    struct stat st;
    calls++;
    if (fstat(fd, &st) != 0) {
        if (errno == EDEADLK)
            refused++;
        else
            other++;
    }
    errno = saved;
}

static long elapsed_ns(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: run_signal_reentry DIR\n");
        return 2;
    }
    dir = argv[1];
    fd = open(at("f"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    check(fd >= 0, "open");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    check(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    struct itimerval every = {{0, 200}, {0, 200}};
    check(setitimer(ITIMER_REAL, &every, NULL) == 0, "setitimer");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char block[512], back[512];
    long rounds = 0;
    int mismatches = 0;
    /* At least 0.3 s and 200 interruptions, at most 20 s. */
    while ((elapsed_ns(&t0) < 300000000L || calls < 200) && elapsed_ns(&t0) < 20000000000L) {
        memset(block, (int)(rounds & 0xff), sizeof block);
        off_t at_off = (rounds % 64) * 512;
        check(pwrite(fd, block, sizeof block, at_off) == sizeof block, "pwrite");
        check(pread(fd, back, sizeof back, at_off) == sizeof back, "pread");
        mismatches += memcmp(block, back, sizeof back) != 0;
        struct stat st;
        check(fstat(fd, &st) == 0, "fstat");
        check(st.st_size == (rounds < 63 ? at_off + 512 : 64 * 512), "size");
        rounds++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    check(setitimer(ITIMER_REAL, &off, NULL) == 0, "setitimer off");
    check(close(fd) == 0, "close");
    printf("handler calls: %s\n", calls >= 200 ? "at least 200" : "too few");
    printf("handler failures other than EDEADLK: %d\n", (int)other);
    printf("handler refused mid-call: %s\n", refused > 0 ? "yes" : "no");
    printf("read back as written: %s\n", mismatches == 0 ? "yes" : "no");
    return 0;
}

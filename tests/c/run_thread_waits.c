/*
 * run_thread_waits.c - a process that holds the image (it has just
 * written a file of the directory argv[1]) then waits where no descriptor
 * is read: on a condition variable (pthread_cond_wait, and
 * pthread_cond_timedwait with a far deadline), on a semaphore
 * (sem_clockwait), and in the open of a FIFO. What it waits for comes from
 * a child process that must first write into the image itself (under
 * `ulfs run` it needs the image the parent holds) and then tells, through
 * a file or the FIFO in the host directory argv[2]. A thread of the parent
 * watches for that file with raw system calls the library does not see,
 * so only the wait itself can let the image go. Prints a transcript that
 * must equal the tmpfs run's; an alarm ends a run that waits on itself.
 * Usage: run_thread_waits DIR HOSTDIR
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run_common.h"

static const char *host;
static char done_path[4096];
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static sem_t sem;
static int done, use_sem;

/* Sleeps 10 ms with the raw system call (no library wait). */
static void raw_sleep(void) {
    struct timespec t = {0, 10 * 1000 * 1000};
    syscall(SYS_nanosleep, &t, NULL);
}

/* Waits (at most 15 s) for the child's file on the host, then wakes the
 * main thread. */
static void *watch(void *arg) {
    (void)arg;
    struct stat st;
    for (int i = 0; i < 1500 && syscall(SYS_newfstatat, AT_FDCWD, done_path, &st, 0) != 0; i++)
        raw_sleep();
    if (use_sem) {
        sem_post(&sem);
        return NULL;
    }
    pthread_mutex_lock(&mutex);
    done = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

/* Starts `sh -c script` (the image is handed over at the fork). */
static pid_t start(const char *script) {
    fflush(stdout);
    pid_t p = fork();
    check(p >= 0, "fork");
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", script, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* Writes an image file: the parent holds the image again. */
static void hold(const char *name) {
    int fd = open(at(name), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(fd >= 0 && write(fd, "held\n", 5) == 5 && close(fd) == 0, name);
}

static void finish(const char *kind, pid_t p) {
    int status;
    check(waitpid(p, &status, 0) == p, "waitpid");
    char name[64], buf[64] = "";
    snprintf(name, sizeof name, "from-child-%s", kind);
    int fd = open(at(name), O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = 0;
        close(fd);
    }
    printf("%s: child exit %d, wrote [%s]\n", kind, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           strtok(buf, "\n") ? buf : "");
}

static void phase(const char *kind) {
    snprintf(done_path, sizeof done_path, "%s/done-%s", host, kind);
    unlink(done_path);
    done = 0;
    use_sem = strcmp(kind, "sem") == 0;
    char script[8192];
    snprintf(script, sizeof script, "sleep 0.2; echo %s > '%s/from-child-%s' && : > '%s'", kind,
             dir, kind, done_path);
    pid_t p = start(script);
    hold(kind);
    pthread_t t;
    check(pthread_create(&t, NULL, watch, NULL) == 0, "pthread_create");
    if (use_sem) {
        struct timespec far;
        clock_gettime(CLOCK_MONOTONIC, &far);
        far.tv_sec += 60;
        while (sem_clockwait(&sem, CLOCK_MONOTONIC, &far) != 0 && errno == EINTR)
            ;
    } else {
        pthread_mutex_lock(&mutex);
        struct timespec far;
        clock_gettime(CLOCK_REALTIME, &far);
        far.tv_sec += 60;
        while (!done) {
            if (strcmp(kind, "cond") == 0)
                pthread_cond_wait(&cond, &mutex);
            else if (pthread_cond_timedwait(&cond, &mutex, &far) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&mutex);
    }
    pthread_join(t, NULL);
    finish(kind, p);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: run_thread_waits DIR HOSTDIR\n");
        return 2;
    }
    dir = argv[1];
    host = argv[2];
    alarm(60);
    check(sem_init(&sem, 0, 0) == 0, "sem_init");
    phase("cond");
    phase("timedcond");
    phase("sem");

    /* The FIFO: the child writes into the image, then opens the FIFO for
     * writing; the parent's open for reading blocks until it does. */
    char fifo[4096], script[8192];
    snprintf(fifo, sizeof fifo, "%s/fifo", host);
    unlink(fifo);
    check(mkfifo(fifo, 0600) == 0, "mkfifo");
    snprintf(script, sizeof script, "sleep 0.2; echo fifo > '%s/from-child-fifo' && echo through > '%s'",
             dir, fifo);
    pid_t p = start(script);
    hold("fifo");
    int fd = open(fifo, O_RDONLY);
    check(fd >= 0, "open fifo");
    char buf[64] = "";
    ssize_t n = read(fd, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    printf("fifo read [%s]\n", strtok(buf, "\n") ? buf : "");
    finish("fifo", p);
    return 0;
}

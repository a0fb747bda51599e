/*
 * run_thread_forks.c - eight threads each writing files of the directory
 * argv[1] while threads of the same process fork children (which exec
 * /bin/true, or read the parent's descriptor and exit). Under `ulfs run` a
 * fork hands the image over: every image descriptor becomes pending and is
 * opened again at the next mount, possibly while another thread is between
 * looking its descriptor up and using it. No call may fail; the files must
 * hold what was written. Prints a transcript that must equal the tmpfs
 * run's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run_common.h"

#define THREADS 8
#define FILES 60

static int failures;
static pthread_mutex_t failures_lock = PTHREAD_MUTEX_INITIALIZER;

static void failed(int t, int i, const char *what) {
    pthread_mutex_lock(&failures_lock);
    failures++;
    fprintf(stderr, "thread %d file %d: %s: %s\n", t, i, what, strerror(errno));
    pthread_mutex_unlock(&failures_lock);
}

static void *work(void *arg) {
    int t = (int)(long)arg;
    char path[4096], buf[16];
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof path, "%s/t%d-%d", dir, t, i);
        int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fd < 0) {
            failed(t, i, "open");
            continue;
        }
        for (int k = 0; k < 20; k++)
            if (write(fd, "0123456789", 10) != 10)
                failed(t, i, "write");
        if (i % 4 == t % 4) {
            pid_t p = fork();
            if (p == 0) {
                if (i % 8 == 1)
                    _exit(pread(fd, buf, 4, 0) == 4 ? 0 : 1);
                execl("/bin/true", "true", (char *)NULL);
                _exit(9);
            }
            int status = 0;
            if (p < 0)
                failed(t, i, "fork");
            else if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failed(t, i, "child");
        }
        if (pread(fd, buf, 10, 50) != 10 || memcmp(buf, "0123456789", 10) != 0)
            failed(t, i, "pread");
        if (lseek(fd, 0, SEEK_END) != 200)
            failed(t, i, "lseek");
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size != 200)
            failed(t, i, "fstat");
        if (close(fd) != 0)
            failed(t, i, "close");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: run_thread_forks DIR\n");
        return 2;
    }
    dir = argv[1];
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++)
        check(pthread_create(&th[i], NULL, work, (void *)i) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    long total = 0;
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < FILES; i++) {
            struct stat st;
            char name[64];
            snprintf(name, sizeof name, "t%d-%d", t, i);
            check(stat(at(name), &st) == 0, name);
            total += st.st_size;
        }
    printf("failures: %d, bytes: %ld\n", failures, total);
    return failures != 0;
}

/*
 * A FUSE file system holding one file, /img, whose bytes are those of a
 * host file, and whose writes fail on demand: while the control file holds
 * a nonzero errno, every WRITE request fails with it. The memory budget's
 * tests (crates/ulfs/tests/budget_faults.rs) mount an ulfs image on it to
 * make the kernel's writeback of the image fail, as a dying disk or a
 * full network file system would.
 *
 * Usage: failing_fuse BACKING CONTROL MOUNTPOINT [FUSE OPTIONS...]
 */
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int backing = -1;
static const char *control;

/* The errno writes fail with now (0: they succeed). */
static int failing(void) {
    FILE *f = fopen(control, "r");
    int e = 0;
    if (f) {
        if (fscanf(f, "%d", &e) != 1) e = 0;
        fclose(f);
    }
    return e;
}

static int is_img(const char *path) { return strcmp(path, "/img") == 0; }

static int do_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    memset(st, 0, sizeof *st);
    if (strcmp(path, "/") == 0) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
        return 0;
    }
    if (!is_img(path)) return -ENOENT;
    struct stat b;
    if (fstat(backing, &b) != 0) return -errno;
    st->st_mode = S_IFREG | 0644;
    st->st_nlink = 1;
    st->st_size = b.st_size;
    st->st_blocks = b.st_blocks;
    st->st_blksize = 4096;
    return 0;
}

static int do_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off, (void)fi, (void)flags;
    if (strcmp(path, "/") != 0) return -ENOENT;
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    fill(buf, "img", NULL, 0, 0);
    return 0;
}

static int do_open(const char *path, struct fuse_file_info *fi) {
    (void)fi;
    return is_img(path) ? 0 : -ENOENT;
}

static int do_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi) {
    (void)path, (void)fi;
    ssize_t n = pread(backing, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int do_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi) {
    (void)path, (void)fi;
    int e = failing();
    if (e) return -e;
    ssize_t n = pwrite(backing, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static int do_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path, (void)datasync, (void)fi;
    return fdatasync(backing) ? -errno : 0;
}

static const struct fuse_operations ops = {
    .getattr = do_getattr,
    .readdir = do_readdir,
    .open = do_open,
    .read = do_read,
    .write = do_write,
    .fsync = do_fsync,
};

int main(int argc, char *argv[]) {
    if (argc < 4) {
        fprintf(stderr, "usage: failing_fuse BACKING CONTROL MOUNTPOINT [FUSE OPTIONS...]\n");
        return 2;
    }
    backing = open(argv[1], O_RDWR);
    if (backing < 0) {
        perror(argv[1]);
        return 1;
    }
    control = argv[2];
    argv[2] = argv[0];
    return fuse_main(argc - 2, argv + 2, &ops, NULL);
}

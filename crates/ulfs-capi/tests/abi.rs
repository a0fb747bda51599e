//! The C ABI called from Rust on a real mounted image: argument checking
//! that needs a live handle (NULL buffers on valid descriptors, negative
//! offsets, overlapping `readv` iovecs, `getcwd`/`readlink` buffer sizes,
//! mount flags and errors) and the handle's life cycle.

use std::ffi::{CString, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ulfs_c::*;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// A fresh image in a temp dir, mounted read-write.
struct Mounted {
    _dir: tempfile::TempDir,
    image: CString,
    fs: *mut ulfs_t,
}

impl Mounted {
    fn new() -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let image = cpath(&dir.path().join("abi.img"));
        // SAFETY: valid NUL-terminated strings; `err` is a valid int.
        unsafe {
            assert_eq!(
                ulfs_mkfs(image.as_ptr(), 16 << 20, c"label=abi".as_ptr()),
                0
            );
            let mut err: c_int = 0;
            let fs = ulfs_mount(image.as_ptr(), 0, &mut err);
            assert!(!fs.is_null(), "mount failed: errno {err}");
            Mounted {
                _dir: dir,
                image,
                fs,
            }
        }
    }

    /// Creates `path` holding `data`; returns an O_RDWR descriptor on it.
    fn file(&self, path: &std::ffi::CStr, data: &[u8]) -> c_int {
        // SAFETY: live handle, valid string and buffer.
        unsafe {
            let fd = ulfs_open(self.fs, path.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
            assert!(fd >= 0, "open: {fd}");
            assert_eq!(
                ulfs_write(self.fs, fd, data.as_ptr().cast(), data.len()),
                data.len() as isize
            );
            fd
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: the handle is live and not used after this.
        let r = unsafe { ulfs_unmount(self.fs) };
        if !std::thread::panicking() {
            assert_eq!(r, 0);
        }
    }
}

const EFAULT: isize = -(libc::EFAULT as isize);
const EINVAL: isize = -(libc::EINVAL as isize);

#[test]
fn null_buffers_on_valid_descriptors() {
    let m = Mounted::new();
    let fd = m.file(c"/f", b"hello");
    let null = std::ptr::null_mut();
    // SAFETY: live handle; NULL buffers are what is tested and are rejected.
    unsafe {
        assert_eq!(ulfs_pread(m.fs, fd, null, 5, 0), EFAULT);
        assert_eq!(ulfs_pwrite(m.fs, fd, null, 5, 0), EFAULT);
        assert_eq!(ulfs_write(m.fs, fd, null, 1), EFAULT);
        // A zero-length transfer needs no buffer.
        assert_eq!(ulfs_write(m.fs, fd, null, 0), 0);
        assert_eq!(ulfs_pread(m.fs, fd, null, 0, 0), 0);
        assert_eq!(ulfs_fstat(m.fs, fd, std::ptr::null_mut()), -libc::EFAULT);
        assert_eq!(
            ulfs_stat(m.fs, c"/f".as_ptr(), std::ptr::null_mut()),
            -libc::EFAULT
        );
        assert_eq!(
            ulfs_stat(m.fs, std::ptr::null(), std::ptr::null_mut()),
            -libc::EFAULT
        );
        assert_eq!(
            ulfs_statfs(m.fs, c"/".as_ptr(), std::ptr::null_mut()),
            -libc::EFAULT
        );
        assert_eq!(ulfs_getdents64(m.fs, fd, null, 64), EFAULT);
        assert_eq!(
            ulfs_readlink(m.fs, c"/f".as_ptr(), std::ptr::null_mut(), 8),
            EFAULT
        );
        assert_eq!(ulfs_getcwd(m.fs, std::ptr::null_mut(), 8), -libc::EFAULT);
        assert_eq!(
            ulfs_rename(m.fs, c"/f".as_ptr(), std::ptr::null()),
            -libc::EFAULT
        );
        let bad = [libc::iovec {
            iov_base: null,
            iov_len: 3,
        }];
        assert_eq!(ulfs_writev(m.fs, fd, bad.as_ptr(), 1), EFAULT);
        assert_eq!(ulfs_readv(m.fs, fd, std::ptr::null(), 1), EFAULT);
        assert_eq!(ulfs_close(m.fs, fd), 0);
    }
}

#[test]
fn negative_offsets_and_lengths() {
    let m = Mounted::new();
    let fd = m.file(c"/f", b"hello");
    let mut b = [0u8; 4];
    // SAFETY: live handle, valid buffers and strings.
    unsafe {
        assert_eq!(ulfs_pread(m.fs, fd, b.as_mut_ptr().cast(), 4, -1), EINVAL);
        assert_eq!(
            ulfs_pwrite(m.fs, fd, b.as_ptr().cast(), 4, i64::MIN),
            EINVAL
        );
        assert_eq!(ulfs_ftruncate(m.fs, fd, -1), -libc::EINVAL);
        assert_eq!(ulfs_truncate(m.fs, c"/f".as_ptr(), -4096), -libc::EINVAL);
        assert_eq!(ulfs_fallocate(m.fs, fd, 0, -1, 10), -libc::EINVAL);
        assert_eq!(ulfs_fallocate(m.fs, fd, 0, 0, 0), -libc::EINVAL);
        assert_eq!(ulfs_fallocate(m.fs, fd, 0, 0, -5), -libc::EINVAL);
        assert_eq!(ulfs_readv(m.fs, fd, std::ptr::null(), -1), EINVAL);
        assert_eq!(ulfs_writev(m.fs, fd, std::ptr::null(), 1025), EINVAL);
        // The file is untouched by the rejected calls.
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), 0);
        assert_eq!(st.assume_init().st_size, 5);
    }
}

#[test]
fn readv_with_overlapping_iovecs_uses_kernel_order() {
    let m = Mounted::new();
    let fd = m.file(c"/f", b"abcdefgh");
    let mut buf = [b'.'; 8];
    let p = buf.as_mut_ptr();
    // SAFETY: both iovecs lie inside `buf`; live handle.
    unsafe {
        let iov = [
            libc::iovec {
                iov_base: p.cast(),
                iov_len: 4,
            },
            libc::iovec {
                iov_base: p.add(2).cast(),
                iov_len: 4,
            },
        ];
        assert_eq!(ulfs_lseek(m.fs, fd, 0, libc::SEEK_SET), 0);
        assert_eq!(ulfs_readv(m.fs, fd, iov.as_ptr(), 2), 8);
    }
    // "abcd" lands at 0..4, then "efgh" at 2..6 over it.
    assert_eq!(&buf, b"abefgh..");
}

#[test]
fn readv_and_writev_disjoint() {
    let m = Mounted::new();
    let fd = m.file(c"/f", b"");
    let (a, b) = (*b"0123", *b"456789");
    let (mut x, mut y) = ([0u8; 3], [0u8; 7]);
    // SAFETY: all iovecs point into live local arrays; live handle.
    unsafe {
        let w = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut _,
                iov_len: 4,
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: 6,
            },
        ];
        assert_eq!(ulfs_writev(m.fs, fd, w.as_ptr(), 2), 10);
        let r = [
            libc::iovec {
                iov_base: x.as_mut_ptr().cast(),
                iov_len: 3,
            },
            libc::iovec {
                iov_base: y.as_mut_ptr().cast(),
                iov_len: 7,
            },
        ];
        assert_eq!(ulfs_lseek(m.fs, fd, 0, libc::SEEK_SET), 0);
        assert_eq!(ulfs_readv(m.fs, fd, r.as_ptr(), 2), 10);
        assert_eq!(ulfs_readv(m.fs, fd, r.as_ptr(), 0), 0);
    }
    assert_eq!(&x, b"012");
    assert_eq!(&y, b"3456789");
}

#[test]
fn getcwd_and_readlink_buffer_sizes() {
    let m = Mounted::new();
    let mut b = [0x55 as c_char; 16];
    // SAFETY: live handle; `b` is writable for 16 bytes.
    unsafe {
        assert_eq!(ulfs_getcwd(m.fs, b.as_mut_ptr(), 16), 2);
        assert_eq!(&b[..2], &[b'/' as c_char, 0]);
        assert_eq!(ulfs_mkdir(m.fs, c"/abc".as_ptr(), 0o755), 0);
        assert_eq!(ulfs_chdir(m.fs, c"abc".as_ptr()), 0);
        b = [0x55; 16];
        assert_eq!(ulfs_getcwd(m.fs, b.as_mut_ptr(), 4), -libc::ERANGE);
        assert_eq!(b[0], 0x55, "buffer untouched on ERANGE");
        assert_eq!(ulfs_getcwd(m.fs, b.as_mut_ptr(), 0), -libc::ERANGE);
        assert_eq!(ulfs_getcwd(m.fs, b.as_mut_ptr(), 5), 5);
        assert_eq!(std::ffi::CStr::from_ptr(b.as_ptr()), c"/abc");

        assert_eq!(
            ulfs_symlink(m.fs, c"target-name".as_ptr(), c"/l".as_ptr()),
            0
        );
        b = [0x55; 16];
        assert_eq!(
            ulfs_readlink(m.fs, c"/l".as_ptr(), b.as_mut_ptr(), 0),
            EINVAL
        );
        assert_eq!(ulfs_readlink(m.fs, c"/l".as_ptr(), b.as_mut_ptr(), 6), 6);
        assert_eq!(
            &b[..7].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"target\x55"
        );
        assert_eq!(ulfs_readlink(m.fs, c"/l".as_ptr(), b.as_mut_ptr(), 16), 11);
    }
}

#[test]
fn non_utf8_paths_round_trip() {
    let m = Mounted::new();
    let name = CString::new(&b"/caf\xe9-\xff"[..]).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: live handle, NUL-terminated names, valid stat buffer.
    unsafe {
        assert_eq!(ulfs_mkdir(m.fs, name.as_ptr(), 0o755), 0);
        assert_eq!(ulfs_stat(m.fs, name.as_ptr(), st.as_mut_ptr()), 0);
        assert_eq!(st.assume_init().st_mode & libc::S_IFMT, libc::S_IFDIR);
        assert_eq!(ulfs_rmdir(m.fs, name.as_ptr()), 0);
    }
}

/// fstat and lseek have a fast path (no panic guard) for the common call:
/// what it answers is what the guarded path and stat answer, and every
/// error still comes back as the guarded path gives it.
#[test]
fn fast_fstat_and_lseek_answer_as_the_slow_ones() {
    let m = Mounted::new();
    let fd = m.file(c"/f", b"12345");
    let stat_of = |path: &std::ffi::CStr| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: live handle, valid string and buffer.
        assert_eq!(
            unsafe { ulfs_stat(m.fs, path.as_ptr(), st.as_mut_ptr()) },
            0
        );
        // SAFETY: filled by the call.
        unsafe { st.assume_init() }
    };
    // SAFETY: a live handle (or NULL), valid buffers unless NULL on purpose.
    unsafe {
        for extra in [0usize, 3, 4096] {
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), 0);
            let st = st.assume_init();
            let by_path = stat_of(c"/f");
            assert_eq!(st.st_ino, by_path.st_ino);
            assert_eq!(st.st_size, by_path.st_size);
            assert_eq!(st.st_mode, by_path.st_mode);
            assert_eq!(st.st_mtime_nsec, by_path.st_mtime_nsec);
            assert_eq!(st.st_blocks, by_path.st_blocks);
            let pad = vec![1u8; extra];
            assert_eq!(ulfs_lseek(m.fs, fd, 0, libc::SEEK_END), st.st_size);
            assert_eq!(
                ulfs_write(m.fs, fd, pad.as_ptr().cast(), extra),
                extra as isize
            );
            assert_eq!(ulfs_lseek(m.fs, fd, 2, libc::SEEK_SET), 2);
            let mut two = [0u8; 2];
            assert_eq!(ulfs_read(m.fs, fd, two.as_mut_ptr().cast(), 2), 2);
            assert_eq!(&two, b"34");
        }
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        assert_eq!(ulfs_fstat(m.fs, 999, st.as_mut_ptr()), -libc::EBADF);
        assert_eq!(ulfs_fstat(m.fs, -1, st.as_mut_ptr()), -libc::EBADF);
        assert_eq!(ulfs_fstat(m.fs, fd, std::ptr::null_mut()), -libc::EFAULT);
        assert_eq!(
            ulfs_fstat(std::ptr::null_mut(), fd, st.as_mut_ptr()),
            -libc::EFAULT
        );
        assert_eq!(
            ulfs_lseek(m.fs, 999, 0, libc::SEEK_SET),
            -(libc::EBADF as i64)
        );
        assert_eq!(
            ulfs_lseek(m.fs, -1, 0, libc::SEEK_SET),
            -(libc::EBADF as i64)
        );
        assert_eq!(
            ulfs_lseek(m.fs, fd, -1, libc::SEEK_SET),
            -(libc::EINVAL as i64)
        );
        assert_eq!(
            ulfs_lseek(std::ptr::null_mut(), fd, 0, libc::SEEK_SET),
            -(libc::EFAULT as i64)
        );
        assert_eq!(ulfs_close(m.fs, fd), 0);
        assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), -libc::EBADF);
        assert_eq!(
            ulfs_lseek(m.fs, fd, 0, libc::SEEK_SET),
            -(libc::EBADF as i64)
        );
    }
}

/// An `O_PATH` descriptor takes the fast paths' rules too: fstat answers
/// (fast, then guarded), lseek is EBADF (the fast SEEK_SET as the others),
/// and nothing reads or writes through it, whatever access mode came
/// with the flag.
#[test]
fn o_path_descriptor_on_the_fast_paths() {
    let m = Mounted::new();
    let rw = m.file(c"/f", b"12345");
    let ebadf = -(libc::EBADF as isize);
    // SAFETY: a live handle, valid strings and buffers.
    unsafe {
        let fd = ulfs_open(m.fs, c"/f".as_ptr(), libc::O_PATH | libc::O_RDWR, 0);
        assert!(fd >= 0, "open: {fd}");
        for _ in 0..2 {
            // The second fstat finds the inode decoded: the fast path.
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), 0);
            assert_eq!(st.assume_init().st_size, 5);
        }
        for whence in [libc::SEEK_SET, libc::SEEK_CUR, libc::SEEK_END] {
            assert_eq!(ulfs_lseek(m.fs, fd, 1, whence), ebadf as i64);
        }
        let mut b = [0u8; 4];
        assert_eq!(ulfs_read(m.fs, fd, b.as_mut_ptr().cast(), 4), ebadf);
        assert_eq!(ulfs_pread(m.fs, fd, b.as_mut_ptr().cast(), 4, 0), ebadf);
        assert_eq!(ulfs_write(m.fs, fd, b.as_ptr().cast(), 4), ebadf);
        assert_eq!(ulfs_pwrite(m.fs, fd, b.as_ptr().cast(), 4, 0), ebadf);
        assert_eq!(ulfs_ftruncate(m.fs, fd, 0), ebadf as c_int);
        assert_eq!(ulfs_fchmod(m.fs, fd, 0o600), ebadf as c_int);
        assert_eq!(ulfs_close(m.fs, fd), 0);
        // The file's own descriptor still seeks the fast way.
        assert_eq!(ulfs_lseek(m.fs, rw, 1, libc::SEEK_SET), 1);
        assert_eq!(ulfs_close(m.fs, rw), 0);
    }
}

#[test]
fn memory_budget_values() {
    let m = Mounted::new();
    let fd = m.file(c"/t", b"data");
    // SAFETY: a live handle (or NULL, which must give EFAULT).
    unsafe {
        assert_eq!(
            ulfs_set_memory_budget(std::ptr::null_mut(), 0),
            -libc::EFAULT
        );
        assert_eq!(ulfs_set_memory_budget(m.fs, -2), -libc::EINVAL);
        assert_eq!(ulfs_set_memory_budget(m.fs, i64::MIN), -libc::EINVAL);
        for ok in [ULFS_BUDGET_AUTO, 0, 1, 8 << 20, i64::MAX] {
            assert_eq!(ulfs_set_memory_budget(m.fs, ok), 0, "{ok}");
            let mut buf = [0u8; 4];
            assert_eq!(ulfs_pread(m.fs, fd, buf.as_mut_ptr().cast(), 4, 0), 4);
            assert_eq!(&buf, b"data");
        }
    }
}

#[test]
fn mount_flags_errors_and_read_only() {
    let m = Mounted::new();
    // SAFETY: valid strings and out-pointers; each handle is unmounted once.
    unsafe {
        let mut err: c_int = 0;
        assert!(ulfs_mount(m.image.as_ptr(), 4, &mut err).is_null());
        assert_eq!(err, libc::EINVAL);
        assert!(ulfs_mount(std::ptr::null(), 0, &mut err).is_null());
        assert_eq!(err, libc::EFAULT);
        assert!(ulfs_mount(c"".as_ptr(), 0, &mut err).is_null());
        assert_eq!(err, libc::ENOENT);
        assert!(ulfs_mount(c"/nonexistent/x.img".as_ptr(), 0, std::ptr::null_mut()).is_null());
        assert_eq!(ulfs_unmount(std::ptr::null_mut()), -libc::EFAULT);

        let dir = tempfile::tempdir().unwrap();
        let img = cpath(&dir.path().join("ro.img"));
        assert_eq!(
            ulfs_mkfs(img.as_ptr(), 16 << 20, c"label=x,bogus".as_ptr()),
            -libc::EINVAL
        );
        assert_eq!(ulfs_mkfs(img.as_ptr(), 16 << 20, std::ptr::null()), 0);
        let fs = ulfs_mount(img.as_ptr(), ULFS_RDONLY, &mut err);
        assert!(!fs.is_null(), "read-only mount: errno {err}");
        assert_eq!(ulfs_mkdir(fs, c"/d".as_ptr(), 0o755), -libc::EROFS);
        assert_eq!(
            ulfs_open(fs, c"/f".as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644),
            -libc::EROFS
        );
        let mut sf = std::mem::MaybeUninit::<libc::statfs>::uninit();
        assert_eq!(ulfs_statfs(fs, c"/".as_ptr(), sf.as_mut_ptr()), 0);
        assert_eq!(sf.assume_init().f_type as u64, ulfs::ULFS_MAGIC);
        assert_eq!(ulfs_unmount(fs), 0);
    }
}

#[test]
fn utimensat_special_values() {
    let m = Mounted::new();
    let fd = m.file(c"/t", b"x");
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: live handle, valid strings, timespec arrays of two.
    unsafe {
        let set = [
            libc::timespec {
                tv_sec: 100,
                tv_nsec: 1,
            },
            libc::timespec {
                tv_sec: 200,
                tv_nsec: 2,
            },
        ];
        assert_eq!(
            ulfs_utimensat(m.fs, libc::AT_FDCWD, c"/t".as_ptr(), set.as_ptr(), 0),
            0
        );
        let omit_atime = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            libc::timespec {
                tv_sec: 300,
                tv_nsec: 3,
            },
        ];
        assert_eq!(ulfs_futimens(m.fs, fd, omit_atime.as_ptr()), 0);
        assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), 0);
        let s = st.assume_init();
        assert_eq!((s.st_atime, s.st_atime_nsec), (100, 1));
        assert_eq!((s.st_mtime, s.st_mtime_nsec), (300, 3));
        let bad = [libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000_000,
        }; 2];
        assert_eq!(ulfs_futimens(m.fs, fd, bad.as_ptr()), -libc::EINVAL);
        assert_eq!(
            ulfs_utimensat(m.fs, libc::AT_FDCWD, c"/t".as_ptr(), std::ptr::null(), 0),
            0
        );
        assert_eq!(ulfs_fstat(m.fs, fd, st.as_mut_ptr()), 0);
        assert!(st.assume_init().st_mtime > 300);
    }
}

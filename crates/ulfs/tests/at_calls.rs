//! The directory-relative calls (openat, mkdirat, unlinkat, fstatat,
//! readlinkat, symlinkat, linkat, renameat2, fchmodat, fchownat,
//! utimensat, fchdir, faccessat, statx, mknodat) against Linux itself: each
//! step runs on ulfs and, with the same arguments, on a tmpfs directory of
//! the host through libc, and the results and errnos must agree.
//!
//! Descriptors are named by handle so the two sides' numbers may differ.
//! The image root stands for the host directory: an absolute path is taken
//! below it on the host, and ulfs's AT_FDCWD (the working directory) is a
//! descriptor of the matching host directory, so the test never changes the
//! host process's working directory (tests run in parallel threads).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use ulfs::{Fs, MountOptions, RENAME_EXCHANGE, RENAME_NOREPLACE, Timespec, UTIME_NOW, UTIME_OMIT};

mod common;

use common::StatView;

/// A directory descriptor argument.
#[derive(Clone, Copy, Debug)]
enum H {
    /// AT_FDCWD.
    Cwd,
    /// A number open on neither side.
    Bad,
    /// A descriptor opened earlier in the sequence.
    Fd(usize),
}

/// What a call returned, comparable across the two sides.
#[derive(Debug, PartialEq)]
enum Out {
    Ok,
    Opened,
    Stat(StatView),
    Bytes(Vec<u8>),
}

type R = Result<Out, i32>;

const BAD_FD: i32 = 9_999;

struct Pair {
    fs: Fs,
    _img_dir: tempfile::TempDir,
    host: tempfile::TempDir,
    /// (ulfs descriptor, host descriptor) per handle.
    fds: Vec<(i32, i32)>,
    /// Host descriptor standing for ulfs's working directory.
    host_cwd: i32,
    steps: usize,
}

fn host_base() -> tempfile::TempDir {
    // tmpfs is the reference the model test uses too; /tmp otherwise.
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).unwrap()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn rc(r: libc::c_int) -> R {
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(Out::Ok)
    }
}

fn host_stat(st: &libc::stat) -> StatView {
    StatView::new(
        st.st_mode,
        st.st_nlink,
        st.st_size as u64,
        st.st_uid,
        st.st_gid,
    )
}

fn ulfs_stat(st: &ulfs::Stat) -> StatView {
    StatView::new(st.mode, st.nlink, st.size, st.uid, st.gid)
}

fn ue<T>(r: ulfs::Result<T>, f: impl FnOnce(T) -> Out) -> R {
    r.map(f).map_err(|e| e.raw())
}

fn ts(times: Option<[Timespec; 2]>) -> Option<[libc::timespec; 2]> {
    times.map(|t| {
        t.map(|t| libc::timespec {
            tv_sec: t.sec,
            tv_nsec: t.nsec,
        })
    })
}

impl Pair {
    fn new() -> Pair {
        let (img_dir, img) = common::image_in(32 << 20, ulfs::Mode::Journal);
        let fs = Fs::mount(&img, MountOptions::default()).unwrap();
        let host = host_base();
        let root = cstr(host.path().as_os_str().as_bytes());
        // SAFETY: a NUL-terminated path; the descriptor is ours to close.
        let host_cwd = unsafe { libc::open(root.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(host_cwd >= 0);
        Pair {
            fs,
            _img_dir: img_dir,
            host,
            fds: Vec::new(),
            host_cwd,
            steps: 0,
        }
    }

    fn ufd(&self, h: H) -> i32 {
        match h {
            H::Cwd => libc::AT_FDCWD,
            H::Bad => BAD_FD,
            H::Fd(i) => self.fds[i].0,
        }
    }

    fn hfd(&self, h: H) -> i32 {
        match h {
            H::Cwd => self.host_cwd,
            H::Bad => BAD_FD,
            H::Fd(i) => self.fds[i].1,
        }
    }

    /// The host path for an image path: absolute ones are below the
    /// host directory.
    fn hp(&self, path: &str) -> CString {
        if let Some(rest) = path.strip_prefix('/') {
            let mut p: PathBuf = self.host.path().to_path_buf();
            p.push(rest);
            let mut b = p.as_os_str().as_bytes().to_vec();
            if path.ends_with('/') && !b.ends_with(b"/") {
                b.push(b'/');
            }
            cstr(&b)
        } else {
            cstr(path.as_bytes())
        }
    }

    fn same(&mut self, what: &str, u: R, h: R) -> R {
        self.steps += 1;
        assert_eq!(
            u, h,
            "step {}: {what}: ulfs (left) vs Linux (right)",
            self.steps
        );
        u
    }

    fn openat(&mut self, d: H, path: &str, flags: i32, mode: u32) -> Result<H, i32> {
        let u = self.fs.openat(self.ufd(d), path, flags, mode);
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path; the descriptor is ours.
        let h = unsafe { libc::openat(self.hfd(d), p.as_ptr(), flags | libc::O_CLOEXEC, mode) };
        let ur = u.map(|_| Out::Opened).map_err(|e| e.raw());
        let hr = if h < 0 {
            Err(last_errno())
        } else {
            Ok(Out::Opened)
        };
        self.same(&format!("openat({d:?}, {path:?}, {flags:#x})"), ur, hr)?;
        self.fds.push((u.unwrap(), h));
        Ok(H::Fd(self.fds.len() - 1))
    }

    fn open_ok(&mut self, d: H, path: &str, flags: i32) -> H {
        self.openat(d, path, flags, 0o644).expect("opened on both")
    }

    fn close(&mut self, h: H) {
        let (u, hfd) = (self.ufd(h), self.hfd(h));
        self.fs.close(u).unwrap();
        // SAFETY: closing a descriptor this test opened.
        unsafe { libc::close(hfd) };
    }

    fn mkdirat(&mut self, d: H, path: &str, mode: u32) -> R {
        let u = ue(self.fs.mkdirat(self.ufd(d), path, mode), |()| Out::Ok);
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path.
        let h = rc(unsafe { libc::mkdirat(self.hfd(d), p.as_ptr(), mode) });
        self.same(&format!("mkdirat({d:?}, {path:?})"), u, h)
    }

    fn unlinkat(&mut self, d: H, path: &str, flags: i32) -> R {
        let u = ue(self.fs.unlinkat(self.ufd(d), path, flags), |()| Out::Ok);
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path.
        let h = rc(unsafe { libc::unlinkat(self.hfd(d), p.as_ptr(), flags) });
        self.same(&format!("unlinkat({d:?}, {path:?}, {flags:#x})"), u, h)
    }

    fn fstatat(&mut self, d: H, path: &str, flags: i32) -> R {
        let u = ue(self.fs.fstatat(self.ufd(d), path, flags), |s| {
            Out::Stat(ulfs_stat(&s))
        });
        let p = self.hp(path);
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a writable stat buffer.
        let r = unsafe { libc::fstatat(self.hfd(d), p.as_ptr(), &mut st, flags) };
        let h = if r < 0 {
            Err(last_errno())
        } else {
            Ok(Out::Stat(host_stat(&st)))
        };
        self.same(&format!("fstatat({d:?}, {path:?}, {flags:#x})"), u, h)
    }

    fn readlinkat(&mut self, d: H, path: &str) -> R {
        let u = ue(self.fs.readlinkat(self.ufd(d), path), Out::Bytes);
        let p = self.hp(path);
        let mut buf = vec![0u8; 4096];
        // SAFETY: a NUL-terminated path and a writable buffer of that length.
        let n = unsafe {
            libc::readlinkat(self.hfd(d), p.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        let h = if n < 0 {
            Err(last_errno())
        } else {
            buf.truncate(n as usize);
            Ok(Out::Bytes(buf))
        };
        self.same(&format!("readlinkat({d:?}, {path:?})"), u, h)
    }

    fn symlinkat(&mut self, target: &str, d: H, path: &str) -> R {
        let u = ue(self.fs.symlinkat(target, self.ufd(d), path), |()| Out::Ok);
        let (t, p) = (cstr(target.as_bytes()), self.hp(path));
        // SAFETY: NUL-terminated strings.
        let h = rc(unsafe { libc::symlinkat(t.as_ptr(), self.hfd(d), p.as_ptr()) });
        self.same(&format!("symlinkat({target:?}, {d:?}, {path:?})"), u, h)
    }

    fn linkat(&mut self, od: H, old: &str, nd: H, new: &str, flags: i32) -> R {
        let u = ue(
            self.fs.linkat(self.ufd(od), old, self.ufd(nd), new, flags),
            |()| Out::Ok,
        );
        let (o, n) = (self.hp(old), self.hp(new));
        // SAFETY: NUL-terminated paths.
        let h =
            rc(unsafe { libc::linkat(self.hfd(od), o.as_ptr(), self.hfd(nd), n.as_ptr(), flags) });
        self.same(
            &format!("linkat({od:?}, {old:?}, {nd:?}, {new:?}, {flags:#x})"),
            u,
            h,
        )
    }

    fn renameat2(&mut self, od: H, old: &str, nd: H, new: &str, flags: u32) -> R {
        let u = ue(
            self.fs
                .renameat2(self.ufd(od), old, self.ufd(nd), new, flags),
            |()| Out::Ok,
        );
        let (o, n) = (self.hp(old), self.hp(new));
        // SAFETY: NUL-terminated paths; renameat2 reads nothing else.
        let h = rc(unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                self.hfd(od),
                o.as_ptr(),
                self.hfd(nd),
                n.as_ptr(),
                flags,
            ) as libc::c_int
        });
        self.same(
            &format!("renameat2({od:?}, {old:?}, {nd:?}, {new:?}, {flags})"),
            u,
            h,
        )
    }

    /// `fchmodat2`, the syscall that takes flags (Linux 6.6); a host
    /// without it skips the step, counted and printed.
    fn fchmodat(&mut self, d: H, path: &str, mode: u32, flags: i32) -> R {
        let u = ue(self.fs.fchmodat(self.ufd(d), path, mode, flags), |()| {
            Out::Ok
        });
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path.
        let h = rc(unsafe {
            libc::syscall(libc::SYS_fchmodat2, self.hfd(d), p.as_ptr(), mode, flags) as libc::c_int
        });
        if h == Err(libc::ENOSYS) {
            println!("SKIP fchmodat2 step: the host kernel has no fchmodat2");
            return u;
        }
        self.same(
            &format!("fchmodat({d:?}, {path:?}, {mode:o}, {flags:#x})"),
            u,
            h,
        )
    }

    fn fchownat(&mut self, d: H, path: &str, uid: u32, gid: u32, flags: i32) -> R {
        let u = ue(self.fs.fchownat(self.ufd(d), path, uid, gid, flags), |()| {
            Out::Ok
        });
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path.
        let h = rc(unsafe { libc::fchownat(self.hfd(d), p.as_ptr(), uid, gid, flags) });
        self.same(
            &format!("fchownat({d:?}, {path:?}, {uid}, {gid}, {flags:#x})"),
            u,
            h,
        )
    }

    fn utimensat(&mut self, d: H, path: &str, times: Option<[Timespec; 2]>, flags: i32) -> R {
        let u = ue(self.fs.utimensat(self.ufd(d), path, times, flags), |()| {
            Out::Ok
        });
        let p = self.hp(path);
        let t = ts(times);
        let tp = t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: a NUL-terminated path and NULL or two timespecs.
        let h = rc(unsafe { libc::utimensat(self.hfd(d), p.as_ptr(), tp, flags) });
        self.same(
            &format!("utimensat({d:?}, {path:?}, {times:?}, {flags:#x})"),
            u,
            h,
        )
    }

    /// atime and mtime of `path` (from `d`, not following) on both sides.
    fn times_equal(&mut self, d: H, path: &str) {
        let s = self
            .fs
            .fstatat(self.ufd(d), path, libc::AT_SYMLINK_NOFOLLOW)
            .unwrap();
        let p = self.hp(path);
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a writable stat buffer.
        let r =
            unsafe { libc::fstatat(self.hfd(d), p.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        assert_eq!(r, 0);
        assert_eq!(
            (s.atime.sec, s.atime.nsec, s.mtime.sec, s.mtime.nsec),
            (st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec),
            "times of {path:?}"
        );
    }

    fn faccessat(&mut self, d: H, path: &str, mode: i32, flags: i32) -> R {
        let u = ue(self.fs.faccessat(self.ufd(d), path, mode, flags), |()| {
            Out::Ok
        });
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path; faccessat2 reads nothing else.
        let h = rc(unsafe {
            libc::syscall(libc::SYS_faccessat2, self.hfd(d), p.as_ptr(), mode, flags) as libc::c_int
        });
        self.same(
            &format!("faccessat({d:?}, {path:?}, {mode:#o}, {flags:#x})"),
            u,
            h,
        )
    }

    /// statx on both sides: the common stat fields, and on ulfs a mask
    /// holding the basic stats (and the birth time when asked for).
    fn statx(&mut self, d: H, path: &str, flags: i32, mask: u32) -> R {
        let u = self.fs.statx(self.ufd(d), path, flags, mask);
        if let Ok(x) = &u {
            let want = libc::STATX_BASIC_STATS | (mask & libc::STATX_BTIME);
            assert_eq!(x.mask, want, "statx mask for {mask:#x}");
            let c = x.to_libc();
            assert_eq!((c.stx_ino, c.stx_size), (x.stat.ino, x.stat.size));
            if mask & libc::STATX_BTIME != 0 {
                assert!(c.stx_btime.tv_sec > 0, "a birth time");
            }
        }
        let u = ue(u, |x| Out::Stat(ulfs_stat(&x.stat)));
        let p = self.hp(path);
        // SAFETY: zeroed memory is a valid `struct statx`.
        let mut x: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a writable statx buffer.
        let r = unsafe { libc::statx(self.hfd(d), p.as_ptr(), flags, mask, &mut x) };
        let h = if r < 0 {
            Err(last_errno())
        } else {
            Ok(Out::Stat(StatView::new(
                x.stx_mode as u32,
                x.stx_nlink as u64,
                x.stx_size,
                x.stx_uid,
                x.stx_gid,
            )))
        };
        self.same(
            &format!("statx({d:?}, {path:?}, {flags:#x}, {mask:#x})"),
            u,
            h,
        )
    }

    /// mknodat of a regular file, or of a type both sides refuse.
    fn mknodat(&mut self, d: H, path: &str, mode: u32) -> R {
        let u = ue(self.fs.mknodat(self.ufd(d), path, mode, 0), |()| Out::Ok);
        let p = self.hp(path);
        // SAFETY: a NUL-terminated path.
        let h = rc(unsafe { libc::mknodat(self.hfd(d), p.as_ptr(), mode, 0) });
        self.same(&format!("mknodat({d:?}, {path:?}, {mode:#o})"), u, h)
    }

    fn fchdir(&mut self, h: H) -> R {
        let u = ue(self.fs.fchdir(self.ufd(h)), |()| Out::Ok);
        let hfd = self.hfd(h);
        // The host side only checks what fchdir would: a directory
        // descriptor becomes the stand-in for the working directory.
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a writable buffer.
        let r = if unsafe { libc::fstat(hfd, &mut st) } < 0 {
            Err(last_errno())
        } else if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            Err(libc::ENOTDIR)
        } else {
            // SAFETY: dup of a valid descriptor.
            self.host_cwd = unsafe { libc::dup(hfd) };
            Ok(Out::Ok)
        };
        self.same(&format!("fchdir({h:?})"), u, r)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for &(_, h) in &self.fds {
            // SAFETY: closing descriptors this test opened.
            unsafe { libc::close(h) };
        }
    }
}

const RD_DIR: i32 = libc::O_RDONLY | libc::O_DIRECTORY;
const CREAT: i32 = libc::O_CREAT | libc::O_WRONLY;

fn e(errno: i32) -> R {
    Err(errno)
}

#[test]
fn dirfd_resolution_and_its_errors() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    t.mkdirat(a, "b", 0o750).unwrap();
    let f = t.open_ok(a, "b/f", CREAT);
    t.fstatat(a, "b/f", 0).unwrap();
    t.fstatat(a, "b", 0).unwrap();
    t.fstatat(f, "", libc::AT_EMPTY_PATH).unwrap();
    t.fstatat(a, "", libc::AT_EMPTY_PATH).unwrap();
    t.fstatat(H::Cwd, "", libc::AT_EMPTY_PATH).unwrap();
    // A relative path needs a directory descriptor.
    assert_eq!(t.fstatat(f, "x", 0), e(libc::ENOTDIR));
    assert_eq!(t.fstatat(f, ".", 0), e(libc::ENOTDIR));
    assert_eq!(t.fstatat(H::Bad, "x", 0), e(libc::EBADF));
    assert_eq!(t.fstatat(H::Bad, "", libc::AT_EMPTY_PATH), e(libc::EBADF));
    // An empty path without AT_EMPTY_PATH fails on the name first.
    assert_eq!(t.fstatat(H::Bad, "", 0), e(libc::ENOENT));
    assert_eq!(t.fstatat(a, "", 0), e(libc::ENOENT));
    // Absolute paths ignore dirfd, even a bad one.
    t.fstatat(H::Bad, "/a/b", 0).unwrap();
    t.fstatat(f, "/a/b/f", 0).unwrap();
    assert_eq!(t.fstatat(a, "b", 0x4000_0000), e(libc::EINVAL));
    t.fstatat(a, "b", libc::AT_NO_AUTOMOUNT).unwrap();
    assert_eq!(
        t.openat(H::Bad, "b", libc::O_RDONLY, 0).err(),
        Some(libc::EBADF)
    );
    assert_eq!(
        t.openat(f, "b", libc::O_RDONLY, 0).err(),
        Some(libc::ENOTDIR)
    );
    assert_eq!(t.openat(a, "", libc::O_RDONLY, 0).err(), Some(libc::ENOENT));
    t.openat(H::Bad, "/a", RD_DIR, 0).unwrap();
    assert_eq!(t.mkdirat(f, "x", 0o755), e(libc::ENOTDIR));
    assert_eq!(t.mkdirat(H::Bad, "x", 0o755), e(libc::EBADF));
    assert_eq!(t.mkdirat(a, "b", 0o755), e(libc::EEXIST));
    t.mkdirat(a, "../top", 0o700).unwrap();
    t.fstatat(H::Cwd, "top", 0).unwrap();
}

#[test]
fn dirfd_survives_rename_and_removal() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    t.mkdirat(H::Cwd, "a/b", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    let b = t.open_ok(a, "b", RD_DIR);
    t.renameat2(H::Cwd, "a", H::Cwd, "z", 0).unwrap();
    t.renameat2(a, "b", H::Cwd, "y", 0).unwrap();
    // Both descriptors still walk from their directories.
    let _ = t.open_ok(b, "f", CREAT);
    t.fstatat(H::Cwd, "y/f", 0).unwrap();
    t.mkdirat(a, "c", 0o755).unwrap();
    t.fstatat(H::Cwd, "z/c", 0).unwrap();
    assert_eq!(t.fstatat(H::Cwd, "a", 0), e(libc::ENOENT));
    t.fstatat(b, "..", 0).unwrap();
    t.fstatat(b, "../z/c", 0).unwrap();
    // A removed directory: nothing can be found or made in it.
    t.mkdirat(H::Cwd, "gone", 0o755).unwrap();
    let g = t.open_ok(H::Cwd, "gone", RD_DIR);
    t.unlinkat(H::Cwd, "gone", libc::AT_REMOVEDIR).unwrap();
    assert_eq!(t.openat(g, "x", CREAT, 0o644).err(), Some(libc::ENOENT));
    assert_eq!(t.mkdirat(g, "x", 0o755), e(libc::ENOENT));
    assert_eq!(t.symlinkat("t", g, "x"), e(libc::ENOENT));
    assert_eq!(t.fstatat(g, "x", 0), e(libc::ENOENT));
    t.fstatat(g, ".", 0).unwrap();
    // The working directory follows fchdir, also into a renamed directory.
    t.fchdir(a).unwrap();
    t.mkdirat(H::Cwd, "viacwd", 0o755).unwrap();
    t.fstatat(H::Bad, "/z/viacwd", 0).unwrap();
    let f = t.open_ok(H::Cwd, "file", CREAT);
    assert_eq!(t.fchdir(f), e(libc::ENOTDIR));
    assert_eq!(t.fchdir(H::Bad), e(libc::EBADF));
    t.close(b);
}

#[test]
fn unlinkat_and_renameat2() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    t.mkdirat(a, "b", 0o755).unwrap();
    let _ = t.open_ok(a, "b/f", CREAT);
    assert_eq!(t.unlinkat(a, "b", 0), e(libc::EISDIR));
    assert_eq!(t.unlinkat(a, "b", libc::AT_REMOVEDIR), e(libc::ENOTEMPTY));
    assert_eq!(t.unlinkat(a, "b/f", libc::AT_REMOVEDIR), e(libc::ENOTDIR));
    assert_eq!(t.unlinkat(a, "b/f", 0x1), e(libc::EINVAL));
    assert_eq!(t.unlinkat(a, ".", libc::AT_REMOVEDIR), e(libc::EINVAL));
    assert_eq!(t.unlinkat(a, "..", libc::AT_REMOVEDIR), e(libc::ENOTEMPTY));
    assert_eq!(t.unlinkat(a, "b/f/", 0), e(libc::ENOTDIR));
    assert_eq!(t.unlinkat(H::Bad, "b", 0), e(libc::EBADF));
    assert_eq!(t.unlinkat(a, "nope", 0), e(libc::ENOENT));
    t.mkdirat(H::Cwd, "c", 0o755).unwrap();
    let c = t.open_ok(H::Cwd, "c", RD_DIR);
    let _ = t.open_ok(c, "g", CREAT);
    assert_eq!(
        t.renameat2(a, "b/f", c, "g", RENAME_NOREPLACE),
        e(libc::EEXIST)
    );
    t.renameat2(a, "b/f", c, "g", RENAME_EXCHANGE).unwrap();
    t.renameat2(c, "g", a, "b/h", 0).unwrap();
    assert_eq!(t.renameat2(H::Bad, "x", c, "y", 0), e(libc::EBADF));
    assert_eq!(t.renameat2(a, "b/h", H::Bad, "y", 0), e(libc::EBADF));
    assert_eq!(
        t.renameat2(a, "b/h", c, "y", RENAME_EXCHANGE | RENAME_NOREPLACE),
        e(libc::EINVAL)
    );
    t.renameat2(H::Bad, "/a/b/h", H::Bad, "/c/h2", 0).unwrap();
    t.unlinkat(c, "h2", 0).unwrap();
    t.unlinkat(a, "b/f", 0).unwrap();
    t.unlinkat(a, "b", libc::AT_REMOVEDIR).unwrap();
    assert_eq!(t.fstatat(a, "b", 0), e(libc::ENOENT));
}

#[test]
fn symlinks_and_links_at() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    t.mkdirat(H::Cwd, "a/b", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    let f = t.open_ok(a, "b/f", CREAT);
    t.symlinkat("b/f", a, "l").unwrap();
    assert_eq!(t.readlinkat(a, "l"), Ok(Out::Bytes(b"b/f".to_vec())));
    assert_eq!(t.readlinkat(a, "b"), e(libc::EINVAL));
    assert_eq!(t.readlinkat(a, ""), e(libc::ENOENT));
    assert_eq!(t.readlinkat(H::Cwd, ""), e(libc::ENOENT));
    assert_eq!(t.readlinkat(H::Bad, ""), e(libc::EBADF));
    assert_eq!(t.readlinkat(f, "l"), e(libc::ENOTDIR));
    t.fstatat(a, "l", libc::AT_SYMLINK_NOFOLLOW).unwrap();
    t.fstatat(a, "l", 0).unwrap();
    assert_eq!(t.symlinkat("", a, "e"), e(libc::ENOENT));
    assert_eq!(t.symlinkat("x", a, "l"), e(libc::EEXIST));
    assert_eq!(t.symlinkat("x", H::Bad, "m"), e(libc::EBADF));
    // linkat links the symlink itself unless AT_SYMLINK_FOLLOW.
    t.linkat(a, "l", a, "l2", 0).unwrap();
    t.fstatat(a, "l2", libc::AT_SYMLINK_NOFOLLOW).unwrap();
    t.linkat(a, "l", H::Cwd, "l3", libc::AT_SYMLINK_FOLLOW)
        .unwrap();
    t.fstatat(a, "b/f", 0).unwrap();
    t.linkat(f, "", a, "l4", libc::AT_EMPTY_PATH).unwrap();
    t.fstatat(a, "b/f", 0).unwrap();
    assert_eq!(
        t.linkat(a, "", a, "l5", libc::AT_EMPTY_PATH),
        e(libc::EPERM)
    );
    assert_eq!(t.linkat(a, "", a, "l5", 0), e(libc::ENOENT));
    assert_eq!(t.linkat(a, "b", a, "l5", 0), e(libc::EPERM));
    assert_eq!(t.linkat(a, "l", a, "l5", 0x4000_0000), e(libc::EINVAL));
    assert_eq!(t.linkat(H::Bad, "l", a, "l5", 0), e(libc::EBADF));
    assert_eq!(t.linkat(a, "l", H::Bad, "l5", 0), e(libc::EBADF));
    assert_eq!(t.linkat(a, "l", f, "l5", 0), e(libc::ENOTDIR));
    // An unlinked file cannot be linked back (no O_TMPFILE here).
    let g = t.open_ok(a, "g", CREAT);
    t.unlinkat(a, "g", 0).unwrap();
    assert_eq!(
        t.linkat(g, "", a, "g2", libc::AT_EMPTY_PATH),
        e(libc::ENOENT)
    );
    // O_CREAT through a dangling relative symlink creates next to the link,
    // in dirfd's directory, not in the working directory.
    t.symlinkat("made", a, "dl").unwrap();
    let _ = t.open_ok(a, "dl", CREAT);
    t.fstatat(a, "made", 0).unwrap();
    assert_eq!(t.fstatat(H::Cwd, "made", 0), e(libc::ENOENT));
    t.symlinkat("../a/b", a, "up").unwrap();
    t.fstatat(a, "up/f", 0).unwrap();
    let _ = t.open_ok(a, "up/new", CREAT);
    t.fstatat(a, "b/new", 0).unwrap();
}

#[test]
fn attribute_calls_at() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    let f = t.open_ok(a, "f", CREAT);
    t.symlinkat("f", a, "l").unwrap();
    t.fchmodat(a, "f", 0o600, 0).unwrap();
    t.fstatat(a, "f", 0).unwrap();
    t.fchmodat(a, "l", 0o640, 0).unwrap();
    t.fstatat(a, "f", 0).unwrap();
    assert_eq!(
        t.fchmodat(a, "l", 0o600, libc::AT_SYMLINK_NOFOLLOW),
        e(libc::EOPNOTSUPP)
    );
    t.fchmodat(f, "", 0o604, libc::AT_EMPTY_PATH).unwrap();
    t.fchmodat(a, "", 0o711, libc::AT_EMPTY_PATH).unwrap();
    t.fstatat(H::Cwd, "a", 0).unwrap();
    assert_eq!(t.fchmodat(a, "f", 0o600, 0x4000_0000), e(libc::EINVAL));
    assert_eq!(t.fchmodat(H::Bad, "f", 0o600, 0), e(libc::EBADF));
    assert_eq!(t.fchmodat(a, "", 0o600, 0), e(libc::ENOENT));

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        t.fchownat(a, "l", 1, 2, libc::AT_SYMLINK_NOFOLLOW).unwrap();
        t.fstatat(a, "l", libc::AT_SYMLINK_NOFOLLOW).unwrap();
        t.fstatat(a, "f", 0).unwrap();
        t.fchownat(a, "l", 3, u32::MAX, 0).unwrap();
        t.fstatat(a, "f", 0).unwrap();
        t.fchownat(f, "", u32::MAX, 5, libc::AT_EMPTY_PATH).unwrap();
        t.fstatat(a, "f", 0).unwrap();
        assert_eq!(t.fchownat(a, "f", 1, 1, 0x4000_0000), e(libc::EINVAL));
        assert_eq!(t.fchownat(H::Bad, "f", 1, 1, 0), e(libc::EBADF));
    } else {
        println!("SKIP fchownat steps: not root, the host refuses chown");
    }

    let at = |sec| Timespec {
        sec,
        nsec: 123_456_789,
    };
    let omit = Timespec {
        sec: 0,
        nsec: UTIME_OMIT,
    };
    let now = Timespec {
        sec: 0,
        nsec: UTIME_NOW,
    };
    t.utimensat(a, "f", Some([at(1_000), at(2_000)]), 0)
        .unwrap();
    t.times_equal(a, "f");
    t.utimensat(
        a,
        "l",
        Some([at(3_000), at(4_000)]),
        libc::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    t.times_equal(a, "l");
    t.utimensat(a, "l", Some([omit, at(5_000)]), 0).unwrap();
    t.times_equal(a, "f");
    t.utimensat(f, "", Some([at(6_000), omit]), libc::AT_EMPTY_PATH)
        .unwrap();
    t.times_equal(a, "f");
    t.utimensat(H::Cwd, "a", Some([at(7_000), at(8_000)]), 0)
        .unwrap();
    t.times_equal(H::Cwd, "a");
    // Both UTIME_OMIT: nothing to do, so nothing is even looked up.
    t.utimensat(H::Bad, "nope", Some([omit, omit]), 0x4000_0000)
        .unwrap();
    assert_eq!(
        t.utimensat(H::Bad, "nope", Some([now, now]), 0),
        e(libc::EBADF)
    );
    assert_eq!(
        t.utimensat(a, "f", Some([now, now]), 0x4000_0000),
        e(libc::EINVAL)
    );
    assert_eq!(t.utimensat(a, "nope", None, 0), e(libc::ENOENT));
    let bad = Timespec {
        sec: 0,
        nsec: 1_000_000_000,
    };
    assert_eq!(t.utimensat(a, "nope", Some([bad, now]), 0), e(libc::ENOENT));
    assert_eq!(t.utimensat(a, "f", Some([bad, now]), 0), e(libc::EINVAL));
    assert_eq!(t.utimensat(a, "", None, 0), e(libc::ENOENT));
    t.utimensat(a, "f", None, 0).unwrap();
    assert!(t.steps > 30);
}

#[test]
fn access_statx_and_mknod_at() {
    let mut t = Pair::new();
    t.mkdirat(H::Cwd, "a", 0o755).unwrap();
    let a = t.open_ok(H::Cwd, "a", RD_DIR);
    let f = t.open_ok(a, "f", CREAT);
    t.symlinkat("f", a, "l").unwrap();
    t.symlinkat("nowhere", a, "dangling").unwrap();

    // faccessat: existence, modes, flags, bad arguments.
    t.faccessat(a, "f", libc::F_OK, 0).unwrap();
    t.faccessat(a, "f", libc::R_OK | libc::W_OK, 0).unwrap();
    t.faccessat(a, "f", libc::R_OK, libc::AT_EACCESS).unwrap();
    // No execute bit: refused even to root.
    assert_eq!(t.faccessat(a, "f", libc::X_OK, 0), e(libc::EACCES));
    t.fchmodat(a, "f", 0o744, 0).unwrap();
    t.faccessat(a, "f", libc::X_OK, 0).unwrap();
    t.faccessat(H::Cwd, "a", libc::X_OK, 0).unwrap();
    assert_eq!(t.faccessat(a, "dangling", libc::F_OK, 0), e(libc::ENOENT));
    t.faccessat(a, "dangling", libc::F_OK, libc::AT_SYMLINK_NOFOLLOW)
        .unwrap();
    t.faccessat(f, "", libc::R_OK, libc::AT_EMPTY_PATH).unwrap();
    assert_eq!(t.faccessat(a, "", libc::F_OK, 0), e(libc::ENOENT));
    assert_eq!(t.faccessat(a, "f", 0o10, 0), e(libc::EINVAL));
    assert_eq!(
        t.faccessat(a, "f", libc::F_OK, 0x4000_0000),
        e(libc::EINVAL)
    );
    assert_eq!(t.faccessat(H::Bad, "f", libc::F_OK, 0), e(libc::EBADF));
    assert_eq!(t.faccessat(a, "f/x", libc::F_OK, 0), e(libc::ENOTDIR));

    // statx: the same fields as fstatat, with the flags of both.
    let basic = libc::STATX_BASIC_STATS;
    t.statx(a, "f", 0, basic).unwrap();
    t.statx(a, "l", 0, basic | libc::STATX_BTIME).unwrap();
    t.statx(a, "l", libc::AT_SYMLINK_NOFOLLOW, 0).unwrap();
    t.statx(f, "", libc::AT_EMPTY_PATH, basic).unwrap();
    t.statx(H::Cwd, "a", libc::AT_STATX_DONT_SYNC, basic)
        .unwrap();
    t.statx(a, "f", libc::AT_STATX_FORCE_SYNC, basic).unwrap();
    assert_eq!(
        t.statx(a, "f", libc::AT_STATX_SYNC_TYPE, basic),
        e(libc::EINVAL)
    );
    assert_eq!(
        t.statx(a, "f", 0, libc::STATX__RESERVED as u32),
        e(libc::EINVAL)
    );
    assert_eq!(t.statx(a, "nope", 0, basic), e(libc::ENOENT));
    assert_eq!(t.statx(H::Bad, "f", 0, basic), e(libc::EBADF));

    // mknodat: regular files are made as by open; the types refused
    // before the path is looked at agree with Linux.
    t.mknodat(a, "r", libc::S_IFREG | 0o640).unwrap();
    t.fstatat(a, "r", 0).unwrap();
    t.mknodat(a, "z", 0o600).unwrap();
    t.fstatat(a, "z", 0).unwrap();
    assert_eq!(t.mknodat(a, "r", libc::S_IFREG), e(libc::EEXIST));
    assert_eq!(t.mknodat(a, "d", libc::S_IFDIR | 0o755), e(libc::EPERM));
    assert_eq!(t.mknodat(a, "x", 0o170000), e(libc::EINVAL));
    assert_eq!(t.mknodat(a, "no/x", libc::S_IFREG), e(libc::ENOENT));
    assert_eq!(t.mknodat(H::Bad, "x", libc::S_IFREG), e(libc::EBADF));
    // FIFOs, sockets and device nodes are not stored: EPERM, and nothing
    // is left behind (the host makes them; ulfs is compared with itself).
    for ty in [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK] {
        let ua = t.ufd(a);
        assert_eq!(
            t.fs.mknodat(ua, "special", ty | 0o600, 0),
            Err(ulfs::Errno::EPERM)
        );
        assert_eq!(
            t.fs.fstatat(ua, "special", 0).err(),
            Some(ulfs::Errno::ENOENT)
        );
        assert_eq!(
            t.fs.mknodat(ua, "f", ty | 0o600, 0),
            Err(ulfs::Errno::EEXIST)
        );
    }
    assert!(t.steps > 30);
}

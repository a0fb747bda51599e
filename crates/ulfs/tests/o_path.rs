//! `O_PATH` descriptors against Linux: a descriptor opened with `O_PATH`
//! names a file without opening it, whatever access mode came with the
//! flag. Every call that takes its descriptor through the kernel's `fdget`
//! (read, write, lseek, ftruncate, fchmod, getdents64, F_SETFL, ...) says
//! EBADF; the calls that take it through `fdget_raw` (close, dup, F_GETFL,
//! fstat, fstatfs, fchdir, and every *at call given it as `dirfd` or with
//! AT_EMPTY_PATH) work. Each call runs on ulfs and, with the same
//! arguments, on a tmpfs directory of the host, and the answers (value or
//! errno) must agree call for call. An `O_PATH` open checks no permission
//! on the file, so a descriptor of a file its opener may not read must
//! not read it either (as a server's client could otherwise).

mod common;

use common::StatView;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ulfs::fs::Volume;
use ulfs::posix::perm::Creds;
use ulfs::posix::{Ctx, Deferred, Process, SharedCtx};
use ulfs::{Errno, Fs, Identity, Mode, MountOptions, Timespec, UTIME_OMIT};
use ulfs_testkit::host_files::is_root;

/// What a call answered, comparable across the two sides.
#[derive(Debug, PartialEq)]
enum Out {
    /// A return value both file systems define the same way (0 for calls
    /// that only succeed or fail).
    Num(i64),
    Stat(StatView),
    Bytes(Vec<u8>),
    /// A new descriptor, with what F_GETFL says of it.
    Fd(i32),
}

/// The lseek calls both sides make: (name, offset, whence).
const LSEEKS: [(&str, i64, i32); 6] = [
    ("lseek SET", 0, libc::SEEK_SET),
    ("lseek SET 2", 2, libc::SEEK_SET),
    ("lseek CUR", 0, libc::SEEK_CUR),
    ("lseek END", 0, libc::SEEK_END),
    ("lseek DATA", 0, libc::SEEK_DATA),
    ("lseek bad whence", 0, 99),
];

type R = Result<Out, i32>;

/// One side's answers, named so the two lists are compared call by call.
#[derive(Default)]
struct Answers(Vec<(&'static str, R)>);

impl Answers {
    fn push(&mut self, call: &'static str, r: R) {
        self.0.push((call, r));
    }
}

fn assert_same(what: &str, ulfs: Answers, linux: Answers) {
    assert_eq!(ulfs.0.len(), linux.0.len(), "{what}: the two lists differ");
    for ((call, u), (host_call, h)) in ulfs.0.into_iter().zip(linux.0) {
        assert_eq!(call, host_call, "{what}: the two lists differ");
        assert_eq!(u, h, "{what}: {call}: ulfs (left) vs Linux (right)");
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).unwrap()
}

/// A host call's return value, or its errno.
fn h(r: i64) -> R {
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(Out::Num(r))
    }
}

fn u<T>(r: ulfs::Result<T>, f: impl FnOnce(T) -> Out) -> R {
    r.map(f).map_err(|e| e.raw())
}

fn done(r: ulfs::Result<()>) -> R {
    u(r, |()| Out::Num(0))
}

fn count(r: ulfs::Result<usize>) -> R {
    u(r, |n| Out::Num(n as i64))
}

fn host_stat(st: &libc::stat) -> Out {
    Out::Stat(StatView::new(
        st.st_mode,
        st.st_nlink,
        st.st_size as u64,
        st.st_uid,
        st.st_gid,
    ))
}

fn ulfs_stat(st: ulfs::Stat) -> Out {
    Out::Stat(StatView::new(st.mode, st.nlink, st.size, st.uid, st.gid))
}

/// A new host descriptor: what F_GETFL says of it, then closed.
fn host_fd(fd: i32) -> R {
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: F_GETFL takes no argument; closing our own descriptor.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::close(fd);
        Ok(Out::Fd(fl))
    }
}

/// A new ulfs descriptor, as `host_fd`.
fn ulfs_fd(fs: &mut Fs, fd: ulfs::Result<i32>) -> R {
    let fd = fd.map_err(|e| e.raw())?;
    let fl = fs.fcntl_getfl(fd).unwrap();
    fs.close(fd).unwrap();
    Ok(Out::Fd(fl))
}

/// `fchdir(fd)` on the host, from a thread with a working directory of
/// its own (`unshare(CLONE_FS)`): the process's is shared by the tests,
/// which run in parallel threads. (Not in a forked child: it would hold
/// the other tests' images open, and their locks, while it lives.)
fn host_fchdir(fd: i32) -> R {
    std::thread::spawn(move || {
        // SAFETY: unshare(CLONE_FS) and fchdir take no pointers; they
        // change this thread's working directory only.
        unsafe {
            assert_eq!(libc::unshare(libc::CLONE_FS), 0, "unshare");
            h(libc::fchdir(fd).into())
        }
    })
    .join()
    .unwrap()
}

/// The tree both sides hold, and the mode each node has (for an fchmod
/// that, should it wrongly succeed, changes nothing).
const NODES: &[(&str, i32, u32)] = &[
    ("f", 0, 0o644),
    ("d", 0, 0o755),
    // A symlink descriptor exists only with O_NOFOLLOW.
    ("l", libc::O_NOFOLLOW, 0o777),
];

const CONTENT: &[u8] = b"hello\n";

fn ulfs_tree(fs: &mut Fs) {
    let fd = fs
        .open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    fs.write(fd, CONTENT).unwrap();
    fs.close(fd).unwrap();
    fs.chmod("/f", 0o644).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    fs.chmod("/d", 0o755).unwrap();
    let fd = fs
        .open("/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    fs.close(fd).unwrap();
    fs.chmod("/d/f", 0o644).unwrap();
    fs.symlink("f", "/l").unwrap();
}

fn host_tree(root: &Path) {
    std::fs::write(root.join("f"), CONTENT).unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/f"), b"").unwrap();
    std::os::unix::fs::symlink("f", root.join("l")).unwrap();
    for (name, mode) in [("f", 0o644), ("d", 0o755), ("d/f", 0o644)] {
        use std::os::unix::fs::PermissionsExt;
        let perm = std::fs::Permissions::from_mode(mode);
        std::fs::set_permissions(root.join(name), perm).unwrap();
    }
}

fn host_base() -> tempfile::TempDir {
    // tmpfs is the reference the other comparison tests use too.
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn fresh() -> (tempfile::TempDir, Fs) {
    let (dir, img) = common::image_in(16 << 20, Mode::Journal);
    let fs = Fs::mount(&img, MountOptions::default()).unwrap();
    (dir, fs)
}

/// Whether the host has fchmodat2 (Linux 6.6); without it that call is
/// not compared.
fn host_has_fchmodat2() -> bool {
    // SAFETY: an invalid descriptor and a valid empty string: the call only
    // says whether it exists.
    let r = unsafe { libc::syscall(libc::SYS_fchmodat2, -1, c"".as_ptr(), 0, 0) };
    !(r < 0 && last_errno() == libc::ENOSYS)
}

/// Every call the list names, on ulfs descriptor `fd` (an `O_PATH` one of
/// a node of mode `mode`). Ends with the descriptor closed.
fn ulfs_calls(fs: &mut Fs, fd: i32, mode: u32) -> Answers {
    let mut a = Answers::default();
    let mut buf = [0u8; 64];
    let omit = Timespec {
        sec: 0,
        nsec: UTIME_OMIT,
    };
    a.push("F_GETFL", u(fs.fcntl_getfl(fd), |f| Out::Num(f.into())));
    a.push("read", count(fs.read(fd, &mut buf[..4])));
    a.push("read nothing", count(fs.read(fd, &mut [])));
    a.push("pread", count(fs.pread(fd, &mut buf[..4], 0)));
    {
        let (x, y) = buf.split_at_mut(2);
        let mut iov = [
            std::io::IoSliceMut::new(x),
            std::io::IoSliceMut::new(&mut y[..2]),
        ];
        a.push("readv", count(fs.readv(fd, &mut iov)));
    }
    a.push("write", count(fs.write(fd, b"x")));
    a.push("write nothing", count(fs.write(fd, b"")));
    a.push("pwrite", count(fs.pwrite(fd, b"x", 0)));
    let iov = [std::io::IoSlice::new(b"x"), std::io::IoSlice::new(b"y")];
    a.push("writev", count(fs.writev(fd, &iov)));
    for (call, off, whence) in LSEEKS {
        a.push(call, u(fs.lseek(fd, off, whence), |o| Out::Num(o as i64)));
    }
    a.push("ftruncate", done(fs.ftruncate(fd, 0)));
    a.push("fallocate", done(fs.fallocate(fd, 0, 0, 10)));
    a.push("fallocate nothing", done(fs.fallocate(fd, 0, 0, 0)));
    a.push("fsync", done(fs.fsync(fd)));
    a.push("fdatasync", done(fs.fdatasync(fd)));
    a.push(
        "getdents64",
        u(fs.getdents64(fd, &mut buf), |_| Out::Num(0)),
    );
    a.push("fchmod", done(fs.fchmod(fd, mode)));
    a.push("fchown", done(fs.fchown(fd, u32::MAX, u32::MAX)));
    a.push("futimens now", done(fs.futimens(fd, None)));
    a.push("futimens omit", done(fs.futimens(fd, Some([omit; 2]))));
    a.push("F_SETFL", done(fs.fcntl_setfl(fd, libc::O_APPEND)));
    a.push(
        "F_GETFL after F_SETFL",
        u(fs.fcntl_getfl(fd), |f| Out::Num(f.into())),
    );
    a.push("fstat", u(fs.fstat(fd), ulfs_stat));
    for (call, path, flags) in [
        ("fstatat empty", "", libc::AT_EMPTY_PATH),
        (
            "fstatat empty nofollow",
            "",
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        ),
        ("fstatat empty, no flag", "", 0),
        ("fstatat f", "f", 0),
    ] {
        a.push(call, u(fs.fstatat(fd, path, flags), ulfs_stat));
    }
    let x = fs.statx(fd, "", libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS);
    a.push("statx empty", u(x, |x| ulfs_stat(x.stat)));
    a.push("fstatfs", u(fs.fstatfs(fd), |_| Out::Num(0)));
    let dup = fs.dup(fd);
    a.push("dup", ulfs_fd(fs, dup));
    let dup = fs.dupfd(fd, 50);
    a.push("F_DUPFD", ulfs_fd(fs, dup));
    let dup = fs.dup2(fd, 60);
    a.push("dup2", ulfs_fd(fs, dup));
    for (call, path, flags) in [
        ("openat empty", "", libc::O_RDONLY),
        ("openat empty O_PATH", "", libc::O_PATH),
        ("openat .", ".", libc::O_RDONLY),
        ("openat f", "f", libc::O_RDONLY),
        ("openat f O_PATH", "f", libc::O_PATH),
    ] {
        let opened = fs.openat(fd, path, flags, 0);
        a.push(call, ulfs_fd(fs, opened));
    }
    let made = fs.openat(fd, "new", libc::O_CREAT | libc::O_WRONLY, 0o644);
    a.push("openat O_CREAT", ulfs_fd(fs, made));
    a.push("unlinkat", done(fs.unlinkat(fd, "new", 0)));
    a.push("mkdirat", done(fs.mkdirat(fd, "nd", 0o755)));
    a.push("rmdir at", done(fs.unlinkat(fd, "nd", libc::AT_REMOVEDIR)));
    a.push("symlinkat", done(fs.symlinkat("f", fd, "sl")));
    a.push("unlinkat symlink", done(fs.unlinkat(fd, "sl", 0)));
    a.push("readlinkat empty", u(fs.readlinkat(fd, ""), Out::Bytes));
    a.push("faccessat empty", done(fs.faccessat(fd, "", libc::R_OK, 0)));
    for (call, mode) in [
        ("faccessat2 empty R", libc::R_OK),
        ("faccessat2 empty W", libc::W_OK),
    ] {
        a.push(call, done(fs.faccessat(fd, "", mode, libc::AT_EMPTY_PATH)));
    }
    let utimens = fs.utimensat(fd, "", None, libc::AT_EMPTY_PATH);
    a.push("utimensat empty", done(utimens));
    if host_has_fchmodat2() {
        let chmod = fs.fchmodat(fd, "", mode, libc::AT_EMPTY_PATH);
        a.push("fchmodat2 empty", done(chmod));
    }
    let chown = fs.fchownat(fd, "", u32::MAX, u32::MAX, libc::AT_EMPTY_PATH);
    a.push("fchownat empty", done(chown));
    if is_root() {
        let link = fs.linkat(fd, "", libc::AT_FDCWD, "/linked", libc::AT_EMPTY_PATH);
        let linked = done(link);
        if linked.is_ok() {
            fs.unlink("/linked").unwrap();
        }
        a.push("linkat empty", linked);
    }
    let reopened = fs.ctx().reopen(fd, libc::O_RDONLY);
    a.push("open /proc/self/fd", ulfs_fd(fs, reopened));
    let chdir = done(fs.fchdir(fd));
    fs.chdir("/").unwrap();
    a.push("fchdir", chdir);
    a.push("close", done(fs.close(fd)));
    a.push("close again", done(fs.close(fd)));
    a
}

/// `ulfs_calls`, on host descriptor `fd`; `root` is the tmpfs directory
/// standing for the image's root (`rootfd` open on it).
fn host_calls(root: &Path, rootfd: i32, fd: i32, mode: u32) -> Answers {
    let mut a = Answers::default();
    let mut buf = [0u8; 64];
    let p = buf.as_mut_ptr().cast::<libc::c_void>();
    let omit = [libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_OMIT,
    }; 2];
    let x = b"xy".as_ptr().cast::<libc::c_void>();
    // SAFETY: every call gets `fd` (ours), buffers valid for the lengths
    // given, and NUL-terminated strings; descriptors the calls make are
    // closed by `host_fd`.
    unsafe {
        a.push("F_GETFL", h(libc::fcntl(fd, libc::F_GETFL).into()));
        a.push("read", h(libc::read(fd, p, 4) as i64));
        a.push("read nothing", h(libc::read(fd, p, 0) as i64));
        a.push("pread", h(libc::pread(fd, p, 4, 0) as i64));
        let iov = [
            libc::iovec {
                iov_base: p,
                iov_len: 2,
            },
            libc::iovec {
                iov_base: p.add(2),
                iov_len: 2,
            },
        ];
        a.push("readv", h(libc::readv(fd, iov.as_ptr(), 2) as i64));
        a.push("write", h(libc::write(fd, x, 1) as i64));
        a.push("write nothing", h(libc::write(fd, x, 0) as i64));
        a.push("pwrite", h(libc::pwrite(fd, x, 1, 0) as i64));
        let iov = [
            libc::iovec {
                iov_base: x.cast_mut(),
                iov_len: 1,
            },
            libc::iovec {
                iov_base: x.add(1).cast_mut(),
                iov_len: 1,
            },
        ];
        a.push("writev", h(libc::writev(fd, iov.as_ptr(), 2) as i64));
        for (call, off, whence) in LSEEKS {
            a.push(call, h(libc::lseek(fd, off, whence)));
        }
        a.push("ftruncate", h(libc::ftruncate(fd, 0).into()));
        a.push("fallocate", h(libc::fallocate(fd, 0, 0, 10).into()));
        a.push("fallocate nothing", h(libc::fallocate(fd, 0, 0, 0).into()));
        a.push("fsync", h(libc::fsync(fd).into()));
        a.push("fdatasync", h(libc::fdatasync(fd).into()));
        let n = libc::syscall(libc::SYS_getdents64, fd, p, buf.len());
        a.push("getdents64", h(n).map(|_| Out::Num(0)));
        a.push("fchmod", h(libc::fchmod(fd, mode).into()));
        a.push("fchown", h(libc::fchown(fd, u32::MAX, u32::MAX).into()));
        a.push(
            "futimens now",
            h(libc::futimens(fd, std::ptr::null()).into()),
        );
        a.push("futimens omit", h(libc::futimens(fd, omit.as_ptr()).into()));
        let setfl = libc::fcntl(fd, libc::F_SETFL, libc::O_APPEND);
        a.push("F_SETFL", h(setfl.into()));
        let getfl = libc::fcntl(fd, libc::F_GETFL);
        a.push("F_GETFL after F_SETFL", h(getfl.into()));
        let mut st = std::mem::zeroed::<libc::stat>();
        let r = libc::fstat(fd, &mut st);
        a.push("fstat", h(r.into()).map(|_| host_stat(&st)));
        for (call, path, flags) in [
            ("fstatat empty", c"", libc::AT_EMPTY_PATH),
            (
                "fstatat empty nofollow",
                c"",
                libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            ),
            ("fstatat empty, no flag", c"", 0),
            ("fstatat f", c"f", 0),
        ] {
            let r = libc::fstatat(fd, path.as_ptr(), &mut st, flags);
            a.push(call, h(r.into()).map(|_| host_stat(&st)));
        }
        let mut sx = std::mem::zeroed::<libc::statx>();
        let r = libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BASIC_STATS,
            &mut sx,
        );
        let view = || {
            Out::Stat(StatView::new(
                sx.stx_mode.into(),
                sx.stx_nlink.into(),
                sx.stx_size,
                sx.stx_uid,
                sx.stx_gid,
            ))
        };
        a.push("statx empty", h(r.into()).map(|_| view()));
        let mut sfs = std::mem::zeroed::<libc::statfs>();
        a.push("fstatfs", h(libc::fstatfs(fd, &mut sfs).into()));
        a.push("dup", host_fd(libc::dup(fd)));
        a.push("F_DUPFD", host_fd(libc::fcntl(fd, libc::F_DUPFD, 50)));
        a.push("dup2", host_fd(libc::dup2(fd, 60)));
        for (call, path, flags) in [
            ("openat empty", c"", libc::O_RDONLY),
            ("openat empty O_PATH", c"", libc::O_PATH),
            ("openat .", c".", libc::O_RDONLY),
            ("openat f", c"f", libc::O_RDONLY),
            ("openat f O_PATH", c"f", libc::O_PATH),
        ] {
            a.push(call, host_fd(libc::openat(fd, path.as_ptr(), flags)));
        }
        let made = libc::openat(fd, c"new".as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
        a.push("openat O_CREAT", host_fd(made));
        a.push("unlinkat", h(libc::unlinkat(fd, c"new".as_ptr(), 0).into()));
        a.push(
            "mkdirat",
            h(libc::mkdirat(fd, c"nd".as_ptr(), 0o755).into()),
        );
        let rmdir = libc::unlinkat(fd, c"nd".as_ptr(), libc::AT_REMOVEDIR);
        a.push("rmdir at", h(rmdir.into()));
        let symlink = libc::symlinkat(c"f".as_ptr(), fd, c"sl".as_ptr());
        a.push("symlinkat", h(symlink.into()));
        let unlink = libc::unlinkat(fd, c"sl".as_ptr(), 0);
        a.push("unlinkat symlink", h(unlink.into()));
        let n = libc::readlinkat(fd, c"".as_ptr(), p.cast(), buf.len());
        let target = h(n as i64).map(|_| Out::Bytes(buf[..n as usize].to_vec()));
        a.push("readlinkat empty", target);
        let access = libc::faccessat(fd, c"".as_ptr(), libc::R_OK, 0);
        a.push("faccessat empty", h(access.into()));
        for (call, mode) in [
            ("faccessat2 empty R", libc::R_OK),
            ("faccessat2 empty W", libc::W_OK),
        ] {
            let r = libc::syscall(
                libc::SYS_faccessat2,
                fd,
                c"".as_ptr(),
                mode,
                libc::AT_EMPTY_PATH,
            );
            a.push(call, h(r));
        }
        let utimens = libc::utimensat(fd, c"".as_ptr(), std::ptr::null(), libc::AT_EMPTY_PATH);
        a.push("utimensat empty", h(utimens.into()));
        if host_has_fchmodat2() {
            let r = libc::syscall(
                libc::SYS_fchmodat2,
                fd,
                c"".as_ptr(),
                mode,
                libc::AT_EMPTY_PATH,
            );
            a.push("fchmodat2 empty", h(r));
        }
        let chown = libc::fchownat(fd, c"".as_ptr(), u32::MAX, u32::MAX, libc::AT_EMPTY_PATH);
        a.push("fchownat empty", h(chown.into()));
        if is_root() {
            let linked = cstr(root.join("linked").as_os_str().as_bytes());
            let r = libc::linkat(
                fd,
                c"".as_ptr(),
                rootfd,
                c"linked".as_ptr(),
                libc::AT_EMPTY_PATH,
            );
            let r = h(r.into());
            if r.is_ok() {
                libc::unlink(linked.as_ptr());
            }
            a.push("linkat empty", r);
        }
        let proc_path = cstr(format!("/proc/self/fd/{fd}").as_bytes());
        let reopened = libc::open(proc_path.as_ptr(), libc::O_RDONLY);
        a.push("open /proc/self/fd", host_fd(reopened));
        a.push("fchdir", host_fchdir(fd));
        a.push("close", h(libc::close(fd).into()));
        a.push("close again", h(libc::close(fd).into()));
    }
    a
}

/// Every call, on an `O_PATH` descriptor of a file, a directory and a
/// symlink, with each access mode beside `O_PATH`: ulfs answers as Linux.
#[test]
fn o_path_descriptors_answer_every_call_as_linux() {
    let (_img, mut fs) = fresh();
    ulfs_tree(&mut fs);
    let host = host_base();
    host_tree(host.path());
    let root = cstr(host.path().as_os_str().as_bytes());
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let rootfd = unsafe { libc::open(root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
    assert!(rootfd >= 0);
    for &(name, nofollow, mode) in NODES {
        for acc in [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY] {
            let flags = libc::O_PATH | acc | nofollow;
            let what = format!("{name} opened with {flags:#o}");
            let ufd = fs.open(format!("/{name}"), flags, 0);
            let path = cstr(host.path().join(name).as_os_str().as_bytes());
            // SAFETY: a NUL-terminated path; `host_calls` closes it.
            let hfd = unsafe { libc::open(path.as_ptr(), flags) };
            assert!(hfd >= 0, "{what}: host open: {}", last_errno());
            let ufd = ufd.unwrap_or_else(|e| panic!("{what}: ulfs open: {e:?}"));
            let ulfs = ulfs_calls(&mut fs, ufd, mode);
            let linux = host_calls(host.path(), rootfd, hfd, mode);
            assert_same(&what, ulfs, linux);
        }
    }
    // Nothing reached the files through the descriptors.
    let st = fs.stat("/f").unwrap();
    assert_eq!((st.size, st.mode & 0o7777), (CONTENT.len() as u64, 0o644));
    // SAFETY: our own descriptor.
    unsafe { libc::close(rootfd) };
    fs.unmount().unwrap();
}

/// What `open` does with the flags beside `O_PATH`: Linux keeps only
/// O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC (no O_CREAT, O_TRUNC, O_TMPFILE or
/// access mode, and no EINVAL for their combinations), and F_GETFL shows
/// O_PATH with the two kept.
#[test]
fn open_flags_beside_o_path_as_linux() {
    let (_img, mut fs) = fresh();
    ulfs_tree(&mut fs);
    let host = host_base();
    host_tree(host.path());
    let opens: &[(&str, i32)] = &[
        ("f", libc::O_ACCMODE),
        (
            "f",
            libc::O_APPEND | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_RDWR,
        ),
        ("f", libc::O_NOATIME | libc::O_SYNC),
        ("new", libc::O_CREAT),
        ("f", libc::O_CREAT | libc::O_EXCL),
        ("f", libc::O_WRONLY | libc::O_TRUNC),
        ("f", libc::O_DIRECTORY),
        ("f/", 0),
        ("d", libc::O_RDWR),
        ("d", libc::O_CREAT | libc::O_DIRECTORY),
        ("d", libc::O_RDWR | libc::O_NOFOLLOW | libc::O_DIRECTORY),
        ("d", libc::O_TMPFILE | libc::O_RDWR),
        ("l", 0),
        ("l", libc::O_NOFOLLOW | libc::O_RDWR),
        ("l", libc::O_NOFOLLOW | libc::O_DIRECTORY),
        ("l/", libc::O_NOFOLLOW),
        ("missing", 0),
    ];
    for &(name, extra) in opens {
        let flags = libc::O_PATH | extra;
        let what = format!("open {name:?} with {flags:#o}");
        let ufd = fs.open(format!("/{name}"), flags, 0o644);
        let ulfs = ufd.map_err(|e| e.raw()).map(|fd| {
            let fl = fs.fcntl_getfl(fd).unwrap();
            let st = fs.fstat(fd).unwrap();
            fs.close(fd).unwrap();
            (fl, st.mode)
        });
        let mut path = host.path().join(name).as_os_str().as_bytes().to_vec();
        if name.ends_with('/') {
            path.push(b'/');
        }
        let path = cstr(&path);
        // SAFETY: a NUL-terminated path; the descriptor is closed here.
        let linux = unsafe {
            let fd = libc::open(path.as_ptr(), flags, 0o644);
            if fd < 0 {
                Err(last_errno())
            } else {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                let mut st = std::mem::zeroed::<libc::stat>();
                assert_eq!(libc::fstat(fd, &mut st), 0);
                libc::close(fd);
                Ok((fl, st.st_mode))
            }
        };
        assert_eq!(ulfs, linux, "{what}: ulfs (left) vs Linux (right)");
    }
    // O_TRUNC and O_CREAT did nothing.
    assert_eq!(fs.stat("/f").unwrap().size, CONTENT.len() as u64);
    assert_eq!(fs.stat("/new"), Err(Errno::ENOENT));
}

/// An `O_PATH` open asks nothing of the volume either: no EROFS for an
/// access mode on a read-only volume (as on a read-only mount).
#[test]
fn o_path_opens_on_a_read_only_volume() {
    let (_dir, img) = common::image_in(16 << 20, Mode::Journal);
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    ulfs_tree(&mut fs);
    fs.unmount().unwrap();
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    let mut fs = Fs::mount(&img, opts).unwrap();
    assert_eq!(fs.open("/f", libc::O_RDWR, 0), Err(Errno::EROFS));
    for flags in [libc::O_RDWR, libc::O_WRONLY | libc::O_TRUNC] {
        let fd = fs.open("/f", libc::O_PATH | flags, 0).unwrap();
        assert_eq!(fs.write(fd, b"x"), Err(Errno::EBADF));
        fs.close(fd).unwrap();
    }
    assert_eq!(fs.stat("/f").unwrap().size, CONTENT.len() as u64);
}

const SECRET: &[u8] = b"top secret";

/// A root-owned file of mode 0600 on a fresh volume.
fn secret(ctx: &mut Ctx<'_>) {
    let fd = ctx
        .open("/secret", libc::O_CREAT | libc::O_WRONLY, 0o600)
        .unwrap();
    ctx.write(fd, SECRET).unwrap();
    ctx.close(fd).unwrap();
    ctx.chown("/secret", 0, 0).unwrap();
    ctx.chmod("/secret", 0o600).unwrap();
}

fn a_user() -> Identity {
    Identity::Verified(Creds::new(1000, 1000, Vec::new()))
}

/// The file is untouched: its bytes, size and mode.
fn assert_untouched(ctx: &mut Ctx<'_>) {
    let st = ctx.stat("/secret").unwrap();
    assert_eq!((st.size, st.mode & 0o7777, st.uid), (10, 0o600, 0));
    let fd = ctx.open("/secret", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 32];
    assert_eq!(ctx.read(fd, &mut buf).unwrap(), SECRET.len());
    assert_eq!(&buf[..SECRET.len()], SECRET);
    ctx.close(fd).unwrap();
}

/// A user who may not open a root-owned 0600 file opens it with
/// `O_PATH|O_RDWR` (as Linux allows: the open checks no permission on the
/// file), and can then neither read, write, truncate nor reopen it through
/// that descriptor, nor through a copy of it.
#[test]
fn o_path_reads_and_writes_nothing_for_an_unprivileged_user() {
    let (_img, mut fs) = fresh();
    secret(&mut fs.ctx());
    fs.set_identity(a_user());
    assert_eq!(fs.open("/secret", libc::O_RDONLY, 0), Err(Errno::EACCES));
    assert_eq!(fs.open("/secret", libc::O_RDWR, 0), Err(Errno::EACCES));
    for acc in [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY] {
        let opened = fs.open("/secret", libc::O_PATH | acc, 0).unwrap();
        let dup = fs.dup(opened).unwrap();
        for fd in [opened, dup] {
            let mut buf = [0u8; 32];
            let ebadf = Err(Errno::EBADF);
            assert_eq!(fs.read(fd, &mut buf), ebadf);
            assert_eq!(fs.pread(fd, &mut buf, 0), ebadf);
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            assert_eq!(fs.readv(fd, &mut iov), ebadf);
            assert_eq!(fs.write(fd, b"mine"), ebadf);
            assert_eq!(fs.pwrite(fd, b"mine", 0), ebadf);
            let iov = [std::io::IoSlice::new(b"mine")];
            assert_eq!(fs.writev(fd, &iov), ebadf);
            assert_eq!(fs.ftruncate(fd, 0).map(|()| 0), ebadf);
            assert_eq!(fs.fallocate(fd, 0, 0, 100).map(|()| 0), ebadf);
            assert_eq!(fs.lseek(fd, 0, libc::SEEK_SET).map(|_| 0), ebadf);
            assert_eq!(fs.fcntl_setfl(fd, libc::O_APPEND).map(|()| 0), ebadf);
            assert_eq!(fs.fchmod(fd, 0o666).map(|()| 0), ebadf);
            assert_eq!(fs.fchown(fd, 1000, 1000).map(|()| 0), ebadf);
            assert_eq!(fs.futimens(fd, None).map(|()| 0), ebadf);
            assert_eq!(fs.fsync(fd).map(|()| 0), ebadf);
            // Reopening the descriptor is an open of the file: judged.
            assert_eq!(fs.ctx().reopen(fd, libc::O_RDONLY), Err(Errno::EACCES));
            // What a path-only descriptor may do, it does.
            assert_eq!(fs.fstat(fd).unwrap().size, SECRET.len() as u64);
            assert_eq!(fs.fcntl_getfl(fd), Ok(libc::O_PATH));
        }
        fs.close(dup).unwrap();
        fs.close(opened).unwrap();
    }
    fs.set_identity(Identity::Host);
    assert_untouched(&mut fs.ctx());
}

/// The calls a server runs with its volume shared (reads, and the read
/// lease of its clients' direct reads) and a forked client's copy of the
/// descriptor refuse an `O_PATH` descriptor as the exclusive calls do.
#[test]
fn o_path_reads_nothing_through_shared_calls_or_a_fork() {
    let (_dir, img) = common::image_in(16 << 20, Mode::Journal);
    let mut vol = Volume::mount(&img, MountOptions::default()).unwrap();
    let mut host = Process::new(&mut vol, Identity::Host);
    secret(&mut Ctx {
        vol: &mut vol,
        proc: &mut host,
    });
    let mut user = Process::new(&mut vol, a_user());
    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut user,
    };
    let fd = ctx.open("/secret", libc::O_PATH | libc::O_RDWR, 0).unwrap();
    let mut child = ctx.fork(a_user());
    let mut buf = [0u8; 32];
    let mut child_ctx = Ctx {
        vol: &mut vol,
        proc: &mut child,
    };
    assert_eq!(child_ctx.pread(fd, &mut buf, 0), Err(Errno::EBADF));
    assert_eq!(child_ctx.pwrite(fd, b"mine", 0), Err(Errno::EBADF));
    child_ctx.exit().unwrap();
    let mut later = Deferred::default();
    let mut shared = SharedCtx {
        vol: &vol,
        proc: &mut user,
    };
    assert_eq!(shared.read(fd, &mut buf, &mut later), Err(Errno::EBADF));
    assert_eq!(shared.pread(fd, &mut buf, 0, &mut later), Err(Errno::EBADF));
    assert_eq!(shared.lease(fd, 0, 8).map(|_| 0), Err(Errno::EBADF));
    assert_eq!(shared.fstat(fd).unwrap().size, SECRET.len() as u64);
    assert!(later.is_empty());
    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut user,
    };
    ctx.exit().unwrap();
    assert_untouched(&mut Ctx {
        vol: &mut vol,
        proc: &mut host,
    });
}

/// A symlink's `O_PATH` descriptor holds the link open: removed meanwhile,
/// it still answers fstat and readlinkat, and is freed at the last close
/// (the image is clean after).
#[test]
fn o_path_symlink_outlives_its_name() {
    let (_dir, img) = common::image_in(16 << 20, Mode::Journal);
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    fs.symlink("target", "/l").unwrap();
    let fd = fs.open("/l", libc::O_PATH | libc::O_NOFOLLOW, 0).unwrap();
    fs.unlink("/l").unwrap();
    let st = fs.fstat(fd).unwrap();
    assert_eq!((st.mode & libc::S_IFMT, st.nlink), (libc::S_IFLNK, 0));
    assert_eq!(fs.readlinkat(fd, "").unwrap(), b"target");
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    let report = ulfs::fsck(&img, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems);
}

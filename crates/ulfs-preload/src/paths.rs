//! The interposed calls that name files by path: the stat family (with
//! glibc's pre-2.33 `__xstat` forms), `statx`, `access`/`faccessat`,
//! `mkdir`, `mknod`, `rmdir`, `unlink`, `rename`, `link`, `symlink`,
//! `readlink`, `truncate`, `chmod`, `chown`, `utimensat`, their `*at`
//! forms, and the working directory (`chdir`, `fchdir`, `getcwd`). Each
//! routes its path (`route.rs`); a call naming one path in the image and
//! one outside (rename, link) fails with EXDEV, as across two file
//! systems.
//!
//! A call that follows its last component and is given a descriptor's
//! `/proc/self/fd/N` link (or `/dev/fd/N`, `/dev/stdin`, ...) acts on the
//! file open as N, as the kernel follows those links: for an image
//! descriptor that is the image's file (the engine's `AT_EMPTY_PATH` form),
//! never the kernel placeholder standing for it. A call on the link itself
//! (`lstat`, `readlink`, `unlink`, ...) stays with the kernel, which
//! answers for its `/proc` entry as it would for any file.

use std::ffi::{c_char, c_int, c_uint};
use ulfs_client::Backend;

use libc::{gid_t, mode_t, off_t, size_t, ssize_t, uid_t};

use crate::fds;
use crate::io::{arg, c_path};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::{Image, image};
use crate::{fail, ret};

/// Where one path argument goes, resolved to what the callee takes.
enum Side {
    /// libc's function, with this dirfd and path pointer (the program's,
    /// or a rewritten one kept alive in `_keep`).
    Host(c_int, *const c_char, Option<std::ffi::CString>),
    /// ulfs: a directory descriptor, a path in the image, and the flag the
    /// call adds: `AT_EMPTY_PATH` when the path was a followed
    /// `/proc/self/fd/N` link (the descriptor is then N and the path
    /// empty), else 0.
    Image(&'static Image, c_int, Vec<u8>, c_int),
}

impl Side {
    fn host_path(&self) -> *const c_char {
        match self {
            Side::Host(_, p, keep) => keep.as_ref().map_or(*p, |c| c.as_ptr()),
            Side::Image(..) => std::ptr::null(),
        }
    }
}

/// Routes one path argument of a call that does not follow its last
/// component.
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn side(dirfd: c_int, path: *const c_char) -> Side {
    // SAFETY: by the contract.
    unsafe { side_following(dirfd, path, false) }
}

/// Routes one path argument; `follows` says whether the call follows its
/// last component, which makes a `/proc/self/fd/N` link to an image
/// descriptor name the file open as N.
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn side_following(dirfd: c_int, path: *const c_char, follows: bool) -> Side {
    // SAFETY: by the contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        return Side::Host(dirfd, path, None);
    };
    if follows && let Some(u) = fds::proc_fd_path(p) {
        return Side::Image(image, u, Vec::new(), libc::AT_EMPTY_PATH);
    }
    match route(image, dirfd, p) {
        Route::Host { dirfd, path: None } => Side::Host(dirfd, path, None),
        Route::Host {
            dirfd,
            path: Some(abs),
        } => Side::Host(dirfd, path, Some(c_path(abs))),
        Route::Image { dirfd, path } => Side::Image(image, dirfd, path, 0),
    }
}

/// Defines an interposed call of one path (and optionally a directory
/// descriptor): the image side runs `$image` with `fs`, `d` (the ulfs
/// directory descriptor), `p` (the image path) and, for a call that says
/// when it `follows` its last component, `e` (the flag to add to the
/// call's: `AT_EMPTY_PATH` for a followed `/proc/self/fd/N` link); the host
/// side calls libc's function of the same name with the same arguments.
macro_rules! path_call {
    ($(#[$doc:meta])* $name:ident(@at $dirfd:ident, $path:ident $(, $a:ident: $t:ty)*) -> $r:ty
        => |$fs:ident, $d:ident, $p:ident| $image:expr) => {
        path_call!($(#[$doc])* $name(@at $dirfd, $path $(, $a: $t)*) -> $r, follows false
            => |$fs, $d, $p, _e| $image);
    };
    ($(#[$doc:meta])* $name:ident($path:ident $(, $a:ident: $t:ty)*) -> $r:ty
        => |$fs:ident, $d:ident, $p:ident| $image:expr) => {
        path_call!($(#[$doc])* $name($path $(, $a: $t)*) -> $r, follows false
            => |$fs, $d, $p, _e| $image);
    };
    ($(#[$doc:meta])* $name:ident(@at $dirfd:ident, $path:ident $(, $a:ident: $t:ty)*) -> $r:ty,
        follows $follows:expr => |$fs:ident, $d:ident, $p:ident, $e:ident| $image:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($dirfd: c_int, $path: *const c_char $(, $a: $t)*) -> $r {
            // SAFETY: the caller's contract.
            match unsafe { side_following($dirfd, $path, $follows) } {
                Side::Image(image, $d, $p, $e) => ret(image.with(|$fs| $image)),
                s @ Side::Host(..) => {
                    let f = real!($name: unsafe extern "C" fn(c_int, *const c_char $(, $t)*) -> $r);
                    let Side::Host(dirfd, ..) = s else { unreachable!() };
                    // SAFETY: the program's own arguments (or the rewritten path).
                    unsafe { f(dirfd, s.host_path() $(, $a)*) }
                }
            }
        }
    };
    ($(#[$doc:meta])* $name:ident($path:ident $(, $a:ident: $t:ty)*) -> $r:ty,
        follows $follows:expr => |$fs:ident, $d:ident, $p:ident, $e:ident| $image:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($path: *const c_char $(, $a: $t)*) -> $r {
            // SAFETY: the caller's contract.
            match unsafe { side_following(libc::AT_FDCWD, $path, $follows) } {
                Side::Image(image, $d, $p, $e) => ret(image.with(|$fs| $image)),
                s @ Side::Host(..) => {
                    let f = real!($name: unsafe extern "C" fn(*const c_char $(, $t)*) -> $r);
                    // SAFETY: the program's own arguments (or the rewritten path).
                    unsafe { f(s.host_path() $(, $a)*) }
                }
            }
        }
    };
}

/// Fills a `struct stat` from ulfs.
///
/// # Safety
/// `st` NULL or writable for one `struct stat`.
unsafe fn put_stat(st: *mut libc::stat, s: ulfs::Stat) -> ulfs::Result<c_int> {
    if st.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    // SAFETY: non-NULL and writable by the contract.
    unsafe { st.write(s.to_libc()) };
    Ok(0)
}

/// `mknodat` in the image, under the program's umask.
fn mknod_at(fs: &mut Backend, d: c_int, p: &[u8], mode: mode_t, dev: u64) -> ulfs::Result<c_int> {
    fs.set_umask_to(crate::umask::current())?;
    fs.mknodat(d, p, mode, dev).map(|()| 0)
}

/// `mkdirat` in the image, under the program's umask.
pub fn mkdir_at(fs: &mut Backend, d: c_int, p: &[u8], mode: mode_t) -> ulfs::Result<c_int> {
    fs.set_umask_to(crate::umask::current())?;
    fs.mkdirat(d, p, mode).map(|()| 0)
}

/// `truncate` of an image path, or, when `e` says the path was the
/// followed `/proc/self/fd` link of descriptor `d`, of the file open as
/// `d`: opened anew for writing (the permission truncate needs), cut and
/// closed.
fn truncate_either(fs: &mut Backend, d: c_int, p: &[u8], e: c_int, len: u64) -> ulfs::Result<()> {
    if e == 0 {
        return fs.truncate(p, len);
    }
    let w = fs.reopen(d, libc::O_WRONLY)?;
    let cut = fs.ftruncate(w, len);
    // Linux's truncate opens no descriptor: the process's locks stay.
    let closed = fs.close_kept(w);
    cut.and(closed)
}

path_call!(
    /// `stat(2)`.
    stat(path, st: *mut libc::stat) -> c_int, follows true
        // SAFETY: stat's contract.
        => |fs, d, p, e| unsafe { put_stat(st, fs.fstatat(d, &p, e)?) }
);
path_call!(
    /// `stat64`: `stat`.
    stat64(path, st: *mut libc::stat) -> c_int, follows true
        // SAFETY: stat's contract.
        => |fs, d, p, e| unsafe { put_stat(st, fs.fstatat(d, &p, e)?) }
);
path_call!(
    /// `lstat(2)`.
    lstat(path, st: *mut libc::stat) -> c_int
        // SAFETY: lstat's contract.
        => |fs, d, p| unsafe { put_stat(st, fs.fstatat(d, &p, libc::AT_SYMLINK_NOFOLLOW)?) }
);
path_call!(
    /// `lstat64`: `lstat`.
    lstat64(path, st: *mut libc::stat) -> c_int
        // SAFETY: lstat's contract.
        => |fs, d, p| unsafe { put_stat(st, fs.fstatat(d, &p, libc::AT_SYMLINK_NOFOLLOW)?) }
);
path_call!(
    /// `fstatat(2)` (`newfstatat`).
    fstatat(@at dirfd, path, st: *mut libc::stat, flags: c_int) -> c_int,
        follows flags & libc::AT_SYMLINK_NOFOLLOW == 0
        // SAFETY: fstatat's contract.
        => |fs, d, p, e| unsafe { put_stat(st, fs.fstatat(d, &p, flags | e)?) }
);
path_call!(
    /// `fstatat64`: `fstatat`.
    fstatat64(@at dirfd, path, st: *mut libc::stat, flags: c_int) -> c_int,
        follows flags & libc::AT_SYMLINK_NOFOLLOW == 0
        // SAFETY: fstatat's contract.
        => |fs, d, p, e| unsafe { put_stat(st, fs.fstatat(d, &p, flags | e)?) }
);

/// glibc before 2.33 compiled the stat calls into these `__xstat` forms;
/// programs built then still call them.
macro_rules! xstat {
    ($name:ident, $flags:expr) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int {
            // SAFETY: the caller's contract.
            let follows = $flags & libc::AT_SYMLINK_NOFOLLOW == 0;
            match unsafe { side_following(libc::AT_FDCWD, path, follows) } {
                // SAFETY: the stat buffer's contract.
                Side::Image(image, d, p, e) => {
                    ret(image.with(|fs| unsafe { put_stat(st, fs.fstatat(d, &p, $flags | e)?) }))
                }
                s @ Side::Host(..) => {
                    let f = real!($name: unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat) -> c_int);
                    // SAFETY: the program's own arguments.
                    unsafe { f(ver, s.host_path(), st) }
                }
            }
        }
    };
}
xstat!(__xstat, 0);
xstat!(__xstat64, 0);
xstat!(__lxstat, libc::AT_SYMLINK_NOFOLLOW);
xstat!(__lxstat64, libc::AT_SYMLINK_NOFOLLOW);

/// `__fxstatat` (glibc before 2.33's `fstatat`).
///
/// # Safety
/// As libc's function of this name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fxstatat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { side_following(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
        // SAFETY: the stat buffer's contract.
        Side::Image(image, d, p, e) => {
            ret(image.with(|fs| unsafe { put_stat(st, fs.fstatat(d, &p, flags | e)?) }))
        }
        s @ Side::Host(..) => {
            let f = real!(__fxstatat: unsafe extern "C" fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int);
            let Side::Host(dirfd, ..) = s else {
                unreachable!()
            };
            // SAFETY: the program's own arguments.
            unsafe { f(ver, dirfd, s.host_path(), st, flags) }
        }
    }
}

/// # Safety
/// As libc's function of this name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fxstatat64(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __fxstatat(ver, dirfd, path, st, flags) }
}

path_call!(
    /// `statx(2)`.
    statx(@at dirfd, path, flags: c_int, mask: c_uint, stx: *mut libc::statx) -> c_int,
        follows flags & libc::AT_SYMLINK_NOFOLLOW == 0 => |fs, d, p, e| {
            if stx.is_null() {
                return Err(ulfs::Errno::EFAULT);
            }
            let x = fs.statx(d, &p, flags | e, mask)?;
            // SAFETY: non-NULL and writable by statx's contract.
            unsafe { stx.write(x.to_libc()) };
            Ok(0)
        }
);
path_call!(
    /// `access(2)`.
    access(path, mode: c_int) -> c_int, follows true
        => |fs, d, p, e| fs.faccessat(d, &p, mode, e).map(|()| 0)
);
path_call!(
    /// `euidaccess(3)`: access for the effective ids.
    euidaccess(path, mode: c_int) -> c_int, follows true
        => |fs, d, p, e| fs.faccessat(d, &p, mode, libc::AT_EACCESS | e).map(|()| 0)
);
path_call!(
    /// `eaccess(3)`: `euidaccess`.
    eaccess(path, mode: c_int) -> c_int, follows true
        => |fs, d, p, e| fs.faccessat(d, &p, mode, libc::AT_EACCESS | e).map(|()| 0)
);
path_call!(
    /// `faccessat(2)` with glibc's flags.
    faccessat(@at dirfd, path, mode: c_int, flags: c_int) -> c_int, follows flags & libc::AT_SYMLINK_NOFOLLOW == 0
        => |fs, d, p, e| fs.faccessat(d, &p, mode, flags | e).map(|()| 0)
);
path_call!(
    /// `mkdir(2)`.
    mkdir(path, mode: mode_t) -> c_int => |fs, d, p| mkdir_at(fs, d, &p, mode)
);
path_call!(
    /// `mkdirat(2)`.
    mkdirat(@at dirfd, path, mode: mode_t) -> c_int
        => |fs, d, p| mkdir_at(fs, d, &p, mode)
);
path_call!(
    /// `mknod(2)`: regular files; ulfs stores no FIFOs, sockets or devices.
    mknod(path, mode: mode_t, dev: libc::dev_t) -> c_int
        => |fs, d, p| mknod_at(fs, d, &p, mode, dev)
);
path_call!(
    /// `mknodat(2)`.
    mknodat(@at dirfd, path, mode: mode_t, dev: libc::dev_t) -> c_int
        => |fs, d, p| mknod_at(fs, d, &p, mode, dev)
);
path_call!(
    /// `mkfifo(3)`: glibc makes it with an internal `mknodat`, out of this
    /// library's sight, so a FIFO named in the image was made on the host
    /// (relative to the kernel's working directory). In the image: as
    /// `mknod`, which stores no FIFOs (EPERM).
    mkfifo(path, mode: mode_t) -> c_int
        => |fs, d, p| mknod_at(fs, d, &p, libc::S_IFIFO | mode, 0)
);
path_call!(
    /// `mkfifoat(3)`.
    mkfifoat(@at dirfd, path, mode: mode_t) -> c_int
        => |fs, d, p| mknod_at(fs, d, &p, libc::S_IFIFO | mode, 0)
);

/// glibc before 2.33 compiled `mknod` and `mknodat` into these forms;
/// programs built then still call them.
///
/// # Safety
/// As libc's function of this name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __xmknodat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *mut libc::dev_t,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { side(dirfd, path) } {
        Side::Image(image, d, p, _) => {
            // SAFETY: NULL or one dev_t, by the contract.
            let dev = if dev.is_null() { 0 } else { unsafe { *dev } };
            ret(image.with(|fs| mknod_at(fs, d, &p, mode, dev)))
        }
        s @ Side::Host(..) => {
            let f = real!(__xmknodat: unsafe extern "C" fn(c_int, c_int, *const c_char, mode_t, *mut libc::dev_t) -> c_int);
            let Side::Host(dirfd, ..) = s else {
                unreachable!()
            };
            // SAFETY: the program's own arguments (or the rewritten path).
            unsafe { f(ver, dirfd, s.host_path(), mode, dev) }
        }
    }
}

/// # Safety
/// As libc's function of this name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __xmknod(
    ver: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *mut libc::dev_t,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __xmknodat(ver, libc::AT_FDCWD, path, mode, dev) }
}

path_call!(
    /// `lchmod(3)`: glibc's is an internal `fchmodat` with
    /// AT_SYMLINK_NOFOLLOW.
    lchmod(path, mode: mode_t) -> c_int
        => |fs, d, p| fs.fchmodat(d, &p, mode, libc::AT_SYMLINK_NOFOLLOW).map(|()| 0)
);
/// `futimesat(2)`: `utimes` relative to `dirfd`; a NULL path changes the
/// file open as `dirfd`, as Linux's does.
///
/// # Safety
/// As libc's `futimesat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    if path.is_null()
        && let Some(u) = fds::ulfs_fd(dirfd)
        && let Some(image) = image()
    {
        // SAFETY: NULL or two timevals, by futimesat's contract.
        let t = unsafe { times_of_timeval(tv) };
        return ret(image.with(|fs| fs.futimens(u, t?)).map(|()| 0));
    }
    // SAFETY: the caller's contract.
    match unsafe { side_following(dirfd, path, true) } {
        Side::Image(image, d, p, e) => ret(image.with(|fs| {
            // SAFETY: NULL or two timevals, by futimesat's contract.
            let t = unsafe { times_of_timeval(tv) }?;
            fs.utimensat(d, &p, t, e).map(|()| 0)
        })),
        s @ Side::Host(..) => {
            let f = real!(futimesat: unsafe extern "C" fn(c_int, *const c_char, *const libc::timeval) -> c_int);
            let Side::Host(dirfd, ..) = s else {
                unreachable!()
            };
            // SAFETY: the program's own arguments (or the rewritten path).
            unsafe { f(dirfd, s.host_path(), tv) }
        }
    }
}
path_call!(
    /// `rmdir(2)`.
    rmdir(path) -> c_int => |fs, d, p| fs.unlinkat(d, &p, libc::AT_REMOVEDIR).map(|()| 0)
);
path_call!(
    /// `unlink(2)`.
    unlink(path) -> c_int => |fs, d, p| fs.unlinkat(d, &p, 0).map(|()| 0)
);
path_call!(
    /// `remove(3)`: `unlink`, or `rmdir` for a directory (glibc's calls
    /// both internally, out of this library's sight).
    remove(path) -> c_int => |fs, d, p| match fs.unlinkat(d, &p, 0) {
        Err(ulfs::Errno::EISDIR) => fs.unlinkat(d, &p, libc::AT_REMOVEDIR).map(|()| 0),
        r => r.map(|()| 0),
    }
);
path_call!(
    /// `unlinkat(2)`.
    unlinkat(@at dirfd, path, flags: c_int) -> c_int
        => |fs, d, p| fs.unlinkat(d, &p, flags).map(|()| 0)
);
path_call!(
    /// `truncate(2)`.
    truncate(path, len: off_t) -> c_int, follows true => |fs, d, p, e| {
        let len = u64::try_from(len).map_err(|_| ulfs::Errno::EINVAL)?;
        truncate_either(fs, d, &p, e, len).map(|()| 0)
    }
);
path_call!(
    /// `truncate64`: `truncate`.
    truncate64(path, len: off_t) -> c_int, follows true => |fs, d, p, e| {
        let len = u64::try_from(len).map_err(|_| ulfs::Errno::EINVAL)?;
        truncate_either(fs, d, &p, e, len).map(|()| 0)
    }
);
path_call!(
    /// `chmod(2)`.
    chmod(path, mode: mode_t) -> c_int, follows true
        => |fs, d, p, e| fs.fchmodat(d, &p, mode, e).map(|()| 0)
);
path_call!(
    /// `fchmodat(2)`.
    fchmodat(@at dirfd, path, mode: mode_t, flags: c_int) -> c_int, follows flags & libc::AT_SYMLINK_NOFOLLOW == 0
        => |fs, d, p, e| fs.fchmodat(d, &p, mode, flags | e).map(|()| 0)
);
path_call!(
    /// `chown(2)`.
    chown(path, uid: uid_t, gid: gid_t) -> c_int, follows true
        => |fs, d, p, e| fs.fchownat(d, &p, uid, gid, e).map(|()| 0)
);
path_call!(
    /// `lchown(2)`.
    lchown(path, uid: uid_t, gid: gid_t) -> c_int
        => |fs, d, p| fs.fchownat(d, &p, uid, gid, libc::AT_SYMLINK_NOFOLLOW).map(|()| 0)
);
path_call!(
    /// `fchownat(2)`.
    fchownat(@at dirfd, path, uid: uid_t, gid: gid_t, flags: c_int) -> c_int,
        follows flags & libc::AT_SYMLINK_NOFOLLOW == 0
        => |fs, d, p, e| fs.fchownat(d, &p, uid, gid, flags | e).map(|()| 0)
);
/// `utimensat(2)`; a NULL path (Linux's own extension, which glibc's
/// `futimens` uses) changes the file open as `dirfd`.
///
/// # Safety
/// As libc's `utimensat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    if path.is_null()
        && let Some(u) = fds::ulfs_fd(dirfd)
        && let Some(image) = image()
    {
        // SAFETY: NULL or two timespecs, by utimensat's contract.
        let t = unsafe { times_of(times) };
        return ret(image.with(|fs| fs.futimens(u, t)).map(|()| 0));
    }
    // SAFETY: the caller's contract.
    match unsafe { side_following(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) } {
        Side::Image(image, d, p, e) => {
            // SAFETY: NULL or two timespecs, by utimensat's contract.
            let t = unsafe { times_of(times) };
            ret(image
                .with(|fs| fs.utimensat(d, &p, t, flags | e))
                .map(|()| 0))
        }
        s @ Side::Host(..) => {
            let f = real!(utimensat: unsafe extern "C" fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int);
            let Side::Host(dirfd, ..) = s else {
                unreachable!()
            };
            // SAFETY: the program's own arguments (or the rewritten path).
            unsafe { f(dirfd, s.host_path(), times, flags) }
        }
    }
}

/// The `[atime, mtime]` of a microsecond `timeval` pair (NULL: both now);
/// EINVAL for microseconds out of range, as the kernel says.
///
/// # Safety
/// `tv` NULL or readable for two timevals.
pub unsafe fn times_of_timeval(
    tv: *const libc::timeval,
) -> ulfs::Result<Option<[ulfs::Timespec; 2]>> {
    if tv.is_null() {
        return Ok(None);
    }
    // SAFETY: readable for two timevals by the contract.
    let t = unsafe { std::slice::from_raw_parts(tv, 2) };
    if t.iter().any(|v| !(0..1_000_000).contains(&v.tv_usec)) {
        return Err(ulfs::Errno::EINVAL);
    }
    Ok(Some([0, 1].map(|i| ulfs::Timespec {
        sec: t[i].tv_sec,
        nsec: t[i].tv_usec * 1000,
    })))
}

path_call!(
    /// `utimes(2)`.
    utimes(path, tv: *const libc::timeval) -> c_int, follows true => |fs, d, p, e| {
        // SAFETY: NULL or two timevals, by utimes's contract.
        let t = unsafe { times_of_timeval(tv) }?;
        fs.utimensat(d, &p, t, e).map(|()| 0)
    }
);
path_call!(
    /// `lutimes(3)`.
    lutimes(path, tv: *const libc::timeval) -> c_int => |fs, d, p| {
        // SAFETY: NULL or two timevals, by lutimes's contract.
        let t = unsafe { times_of_timeval(tv) }?;
        fs.utimensat(d, &p, t, libc::AT_SYMLINK_NOFOLLOW).map(|()| 0)
    }
);
path_call!(
    /// `utime(2)`: whole seconds.
    utime(path, buf: *const libc::utimbuf) -> c_int, follows true => |fs, d, p, e| {
        let t = (!buf.is_null()).then(|| {
            // SAFETY: non-NULL, so one utimbuf by utime's contract.
            let b = unsafe { &*buf };
            [b.actime, b.modtime].map(|sec| ulfs::Timespec { sec, nsec: 0 })
        });
        fs.utimensat(d, &p, t, e).map(|()| 0)
    }
);

/// The `[atime, mtime]` a C `times` argument holds (NULL: both now).
///
/// # Safety
/// `times` NULL or readable for two timespecs.
pub unsafe fn times_of(times: *const libc::timespec) -> Option<[ulfs::Timespec; 2]> {
    if times.is_null() {
        return None;
    }
    // SAFETY: readable for two timespecs by the contract.
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    Some([0, 1].map(|i| ulfs::Timespec {
        sec: t[i].tv_sec,
        nsec: t[i].tv_nsec,
    }))
}

/// Copies a symlink's content into a C buffer, as readlink(2) does.
///
/// # Safety
/// `buf` NULL or writable for `size` bytes.
unsafe fn put_link(target: Vec<u8>, buf: *mut c_char, size: size_t) -> ulfs::Result<ssize_t> {
    if buf.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    let n = target.len().min(size);
    // SAFETY: `buf` is writable for `size >= n` bytes by the contract.
    unsafe { std::ptr::copy_nonoverlapping(target.as_ptr(), buf.cast(), n) };
    Ok(n as ssize_t)
}

path_call!(
    /// `readlink(2)`.
    readlink(path, buf: *mut c_char, size: size_t) -> ssize_t
        // SAFETY: readlink's contract.
        => |fs, d, p| unsafe { put_link(fs.readlinkat(d, &p)?, buf, size) }
);
path_call!(
    /// `readlinkat(2)`.
    readlinkat(@at dirfd, path, buf: *mut c_char, size: size_t) -> ssize_t
        // SAFETY: readlinkat's contract.
        => |fs, d, p| unsafe { put_link(fs.readlinkat(d, &p)?, buf, size) }
);

/// `symlinkat(2)`: the link's path is routed; its target is stored as
/// given.
///
/// # Safety
/// As libc's `symlinkat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { (side(dirfd, path), arg(target)) } {
        (Side::Image(image, d, p, _), Some(t)) => {
            ret(image.with(|fs| fs.symlinkat(t, d, &p)).map(|()| 0))
        }
        (Side::Image(..), None) => fail(libc::EFAULT),
        (s @ Side::Host(..), _) => {
            let f = real!(symlinkat: unsafe extern "C" fn(*const c_char, c_int, *const c_char) -> c_int);
            let Side::Host(dirfd, ..) = s else {
                unreachable!()
            };
            // SAFETY: the program's own arguments.
            unsafe { f(target, dirfd, s.host_path()) }
        }
    }
}

/// `symlink(2)`.
///
/// # Safety
/// As libc's `symlink`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { symlinkat(target, libc::AT_FDCWD, path) }
}

/// A call on two routed paths: both in the image, both on the host, or
/// EXDEV. Only the first may be followed (`linkat`'s AT_SYMLINK_FOLLOW);
/// `img` gets its added flag.
///
/// # Safety
/// Both paths NULL or NUL-terminated.
unsafe fn two_paths(
    (od, a, follows_first): (c_int, *const c_char, bool),
    nd: c_int,
    b: *const c_char,
    host: impl FnOnce(c_int, *const c_char, c_int, *const c_char) -> c_int,
    img: impl FnOnce(&mut Backend, c_int, &[u8], c_int, &[u8], c_int) -> ulfs::Result<()>,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { (side_following(od, a, follows_first), side(nd, b)) } {
        (Side::Image(image, d1, p1, e1), Side::Image(_, d2, p2, _)) => {
            ret(image.with(|fs| img(fs, d1, &p1, d2, &p2, e1)).map(|()| 0))
        }
        (s1 @ Side::Host(..), s2 @ Side::Host(..)) => {
            let (Side::Host(d1, ..), Side::Host(d2, ..)) = (&s1, &s2) else {
                unreachable!()
            };
            host(*d1, s1.host_path(), *d2, s2.host_path())
        }
        _ => fail(libc::EXDEV),
    }
}

type TwoPathFn = unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char) -> c_int;

/// `renameat2(2)`.
///
/// # Safety
/// As libc's `renameat2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat2(
    od: c_int,
    a: *const c_char,
    nd: c_int,
    b: *const c_char,
    flags: c_uint,
) -> c_int {
    let host = |d1, p1, d2, p2| {
        let f = real!(renameat2: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int);
        // SAFETY: the program's own arguments.
        unsafe { f(d1, p1, d2, p2, flags) }
    };
    // SAFETY: the caller's contract.
    unsafe {
        two_paths((od, a, false), nd, b, host, |fs, d1, p1, d2, p2, _| {
            fs.renameat2(d1, p1, d2, p2, flags)
        })
    }
}

/// `renameat(2)`.
///
/// # Safety
/// As libc's `renameat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat(
    od: c_int,
    a: *const c_char,
    nd: c_int,
    b: *const c_char,
) -> c_int {
    let host = |d1, p1, d2, p2| {
        let f = real!(renameat: TwoPathFn);
        // SAFETY: the program's own arguments.
        unsafe { f(d1, p1, d2, p2) }
    };
    // SAFETY: the caller's contract.
    unsafe {
        two_paths((od, a, false), nd, b, host, |fs, d1, p1, d2, p2, _| {
            fs.renameat2(d1, p1, d2, p2, 0)
        })
    }
}

/// `rename(2)`.
///
/// # Safety
/// As libc's `rename`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { renameat(libc::AT_FDCWD, a, libc::AT_FDCWD, b) }
}

/// `linkat(2)`.
///
/// # Safety
/// As libc's `linkat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn linkat(
    od: c_int,
    a: *const c_char,
    nd: c_int,
    b: *const c_char,
    flags: c_int,
) -> c_int {
    let host = |d1, p1, d2, p2| {
        let f = real!(linkat: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int);
        // SAFETY: the program's own arguments.
        unsafe { f(d1, p1, d2, p2, flags) }
    };
    // SAFETY: the caller's contract.
    unsafe {
        let follows = flags & libc::AT_SYMLINK_FOLLOW != 0;
        two_paths((od, a, follows), nd, b, host, |fs, d1, p1, d2, p2, e| {
            // A followed /proc/self/fd/N link (how a program links an
            // O_TMPFILE file) links the descriptor's file.
            let flags = if e == 0 {
                flags
            } else {
                (flags & !libc::AT_SYMLINK_FOLLOW) | e
            };
            fs.linkat(d1, p1, d2, p2, flags)
        })
    }
}

/// `link(2)`.
///
/// # Safety
/// As libc's `link`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { linkat(libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0) }
}

// ------------------------------------------------------ working directory

/// Records that the working directory is now ulfs's (inside the image).
fn enter_image(image: &Image, fs: &mut Backend) -> ulfs::Result<()> {
    let p = fs.getcwd()?;
    let mut cwd = image.cwd();
    cwd.path = [image.prefix.as_slice(), if p == b"/" { b"" } else { &p }].concat();
    cwd.in_image = true;
    cwd.ino = None;
    cwd.gone = false;
    Ok(())
}

/// Records that the working directory is the kernel's again.
fn leave_image(image: &Image) {
    let p = std::env::current_dir()
        .map(|p| p.into_os_string().into_encoded_bytes())
        .unwrap_or_else(|_| b"/".to_vec());
    let mut cwd = image.cwd();
    cwd.path = p;
    cwd.in_image = false;
    cwd.ino = None;
    cwd.gone = false;
}

/// `chdir(2)`.
///
/// # Safety
/// As libc's `chdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { side_following(libc::AT_FDCWD, path, true) } {
        Side::Image(image, d, p, e) => ret(image.with(|fs| {
            if e != 0 {
                fs.fchdir(d)?;
            } else if d != libc::AT_FDCWD {
                return Err(ulfs::Errno::EBADF);
            } else {
                fs.chdir(&p)?;
            }
            enter_image(image, fs).map(|()| 0)
        })),
        s @ Side::Host(..) => {
            let f = real!(chdir: unsafe extern "C" fn(*const c_char) -> c_int);
            // SAFETY: the program's own argument (or the rewritten path).
            let r = unsafe { f(s.host_path()) };
            if r == 0
                && let Some(image) = image()
            {
                leave_image(image);
            }
            r
        }
    }
}

/// `fchdir(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn fchdir(fd: c_int) -> c_int {
    match (fds::ulfs_fd(fd), image()) {
        (Some(u), Some(image)) => ret(image.with(|fs| {
            fs.fchdir(u)?;
            enter_image(image, fs).map(|()| 0)
        })),
        _ => {
            let f = real!(fchdir: unsafe extern "C" fn(c_int) -> c_int);
            // SAFETY: the program's own descriptor.
            let r = unsafe { f(fd) };
            if r == 0
                && let Some(image) = image()
            {
                leave_image(image);
            }
            r
        }
    }
}

/// `getcwd(3)`, with glibc's extension: a NULL `buf` gets a malloc'd one
/// (of `size` bytes, or as long as needed when `size` is 0).
///
/// # Safety
/// As libc's `getcwd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let real_getcwd = real!(getcwd: unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char);
    let Some(image) = image() else {
        // SAFETY: the program's own arguments.
        return unsafe { real_getcwd(buf, size) };
    };
    if image.cwd().in_image {
        // Mounted again if it was let go: the directory may be gone.
        image.ensure_mounted();
    }
    {
        let cwd = image.cwd();
        if !cwd.in_image {
            drop(cwd);
            // SAFETY: the program's own arguments.
            return unsafe { real_getcwd(buf, size) };
        }
        if cwd.gone {
            fail::<i32>(libc::ENOENT);
            return std::ptr::null_mut();
        }
    }
    let path = match image.with(|fs| fs.getcwd()) {
        Ok(p) => [image.prefix.as_slice(), if p == b"/" { b"" } else { &p }].concat(),
        Err(e) => {
            fail::<i32>(e.raw());
            return std::ptr::null_mut();
        }
    };
    let need = path.len() + 1;
    let (out, cap) = if buf.is_null() {
        let cap = if size == 0 { need } else { size };
        // SAFETY: malloc of a positive size; the caller frees it.
        (unsafe { libc::malloc(cap) }.cast::<c_char>(), cap)
    } else {
        (buf, size)
    };
    if out.is_null() {
        fail::<i32>(libc::ENOMEM);
        return std::ptr::null_mut();
    }
    if need > cap {
        if buf.is_null() {
            // SAFETY: allocated above.
            unsafe { libc::free(out.cast()) };
        }
        fail::<i32>(if cap == 0 { libc::EINVAL } else { libc::ERANGE });
        return std::ptr::null_mut();
    }
    // SAFETY: `out` is writable for `cap >= need` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), out.cast::<u8>(), path.len());
        *out.add(path.len()) = 0;
    }
    out
}

//! Extended attributes of image files. ulfs stores none: a listing is
//! empty and a lookup finds nothing (ENODATA), which tools such as `ls -l`
//! (looking for ACLs and security labels) and `cp -a` take quietly;
//! setting one is ENOTSUP, the answer of a file system without them.
//! The file must exist all the same (ENOENT, ENOTDIR as for `stat`).

use std::ffi::{c_char, c_int, c_void};

use libc::{size_t, ssize_t};

use crate::fds;
use crate::io::{arg, c_path};
use crate::real::real;
use crate::ret;
use crate::route::{Route, route};
use crate::state::image;

/// What an xattr call on an image file answers, once the file is found.
#[derive(Clone, Copy)]
enum Answer {
    /// An empty list.
    Empty,
    NoData,
    NotSupported,
}

fn answer(a: Answer) -> ulfs::Result<ssize_t> {
    match a {
        Answer::Empty => Ok(0),
        Answer::NoData => Err(ulfs::Errno(libc::ENODATA)),
        Answer::NotSupported => Err(ulfs::Errno::EOPNOTSUPP),
    }
}

/// Routes a path xattr call: `Some(result)` for an image file, `None` for
/// libc (with the path to give it).
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn on_path(
    path: *const c_char,
    follow: bool,
    a: Answer,
) -> Result<ssize_t, Option<std::ffi::CString>> {
    // SAFETY: by the contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        return Err(None);
    };
    if follow && let Some(u) = fds::proc_fd_path(p) {
        // A descriptor's /proc/self/fd link: the file open as it.
        return Ok(ret(image.with(|fs| {
            fs.fstatat(u, b"", libc::AT_EMPTY_PATH)
                .and_then(|_| answer(a))
        })));
    }
    match route(image, libc::AT_FDCWD, p) {
        Route::Host { path, .. } => Err(path.map(c_path)),
        Route::Image { dirfd, path } => {
            let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
            Ok(ret(image.with(|fs| {
                fs.fstatat(dirfd, &path, flags).and_then(|_| answer(a))
            })))
        }
    }
}

macro_rules! path_xattr {
    ($name:ident, $follow:expr, $answer:expr, ($($a:ident: $t:ty),*) -> $r:ty) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> $r {
            // SAFETY: the caller's contract.
            match unsafe { on_path(path, $follow, $answer) } {
                Ok(v) => v as $r,
                Err(rewritten) => {
                    let f = real!($name: unsafe extern "C" fn(*const c_char $(, $t)*) -> $r);
                    let p = rewritten.as_ref().map_or(path, |c| c.as_ptr());
                    // SAFETY: the program's own arguments (or the rewritten path).
                    unsafe { f(p $(, $a)*) }
                }
            }
        }
    };
}

macro_rules! fd_xattr {
    ($name:ident, $answer:expr, ($($a:ident: $t:ty),*) -> $r:ty) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(fd: c_int $(, $a: $t)*) -> $r {
            match fds::ulfs_fd(fd) {
                Some(u) => {
                    let r = image().map_or(Err(ulfs::Errno::EBADF), |i| {
                        i.with(|fs| fs.fstat(u).and_then(|_| answer($answer)))
                    });
                    ret(r) as $r
                }
                None => {
                    let f = real!($name: unsafe extern "C" fn(c_int $(, $t)*) -> $r);
                    // SAFETY: the program's own arguments.
                    unsafe { f(fd $(, $a)*) }
                }
            }
        }
    };
}

path_xattr!(getxattr, true, Answer::NoData, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t);
path_xattr!(lgetxattr, false, Answer::NoData, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t);
path_xattr!(listxattr, true, Answer::Empty, (list: *mut c_char, size: size_t) -> ssize_t);
path_xattr!(llistxattr, false, Answer::Empty, (list: *mut c_char, size: size_t) -> ssize_t);
path_xattr!(setxattr, true, Answer::NotSupported, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int);
path_xattr!(lsetxattr, false, Answer::NotSupported, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int);
path_xattr!(removexattr, true, Answer::NoData, (name: *const c_char) -> c_int);
path_xattr!(lremovexattr, false, Answer::NoData, (name: *const c_char) -> c_int);
fd_xattr!(fgetxattr, Answer::NoData, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t);
fd_xattr!(flistxattr, Answer::Empty, (list: *mut c_char, size: size_t) -> ssize_t);
fd_xattr!(fsetxattr, Answer::NotSupported, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int);
fd_xattr!(fremovexattr, Answer::NoData, (name: *const c_char) -> c_int);

//! File-system information for image paths and descriptors: `statfs`,
//! `fstatfs`, `statvfs`, `fstatvfs` (and their `64` forms) answer with the
//! image's own numbers (`ulfs::Fs::statfs`), so `df /ulfs` shows the image;
//! `pathconf` and `fpathconf` with its limits (glibc's would ask the
//! kernel's statfs of the path, which the host does not have).

use std::ffi::{c_char, c_int, c_long};

use crate::fds;
use crate::io::{arg, c_path};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;
use crate::{fail, ret};

/// `statvfs` from `statfs`, as glibc derives it (`f_flag` says read-only).
fn vfs(s: &ulfs::StatFs, read_only: bool) -> libc::statvfs {
    // SAFETY: plain integers; all-zero is a valid value.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    v.f_bsize = s.bsize as _;
    v.f_frsize = s.frsize as _;
    v.f_blocks = s.blocks as _;
    v.f_bfree = s.bfree as _;
    v.f_bavail = s.bavail as _;
    v.f_files = s.files as _;
    v.f_ffree = s.ffree as _;
    v.f_favail = s.ffree as _;
    v.f_fsid = s.fsid as _;
    v.f_namemax = s.namelen as _;
    v.f_flag = if read_only { libc::ST_RDONLY } else { 0 } as _;
    v
}

/// The image's statfs for a path call, or `None` for libc (with the path
/// to give it, when rewritten).
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn for_path(
    path: *const c_char,
) -> Result<ulfs::Result<(ulfs::StatFs, bool)>, Option<std::ffi::CString>> {
    // SAFETY: by the contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        return Err(None);
    };
    if let Some(u) = fds::proc_fd_path(p) {
        // A descriptor's /proc/self/fd link: the file system of the file
        // open as it.
        return Ok(image.with(|fs| {
            let s = fs.fstatfs(u)?;
            Ok((s, fs.is_read_only()))
        }));
    }
    match route(image, libc::AT_FDCWD, p) {
        Route::Host { path, .. } => Err(path.map(c_path)),
        Route::Image { path, .. } => Ok(image.with(|fs| {
            let s = fs.statfs(&path)?;
            Ok((s, fs.is_read_only()))
        })),
    }
}

fn for_fd(fd: c_int) -> Option<ulfs::Result<(ulfs::StatFs, bool)>> {
    let u = fds::ulfs_fd(fd)?;
    let image = image()?;
    Some(image.with(|fs| {
        let s = fs.fstatfs(u)?;
        Ok((s, fs.is_read_only()))
    }))
}

/// Writes `v` to `out` (EFAULT for NULL).
///
/// # Safety
/// `out` NULL or writable for one `T`.
unsafe fn put<T>(out: *mut T, v: T) -> c_int {
    if out.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: non-NULL and writable by the contract.
    unsafe { out.write(v) };
    0
}

/// `pathconf`'s answer for a file of the image whose statfs is `s`: the
/// limits that depend on the file system are ulfs's; the others are as
/// glibc answers them for any file (its `pathconf` of `/`).
fn image_pathconf(s: &ulfs::StatFs, name: c_int) -> c_long {
    match name {
        // A link count stops below u32::MAX (EMLINK).
        libc::_PC_LINK_MAX => (u32::MAX - 1) as c_long,
        libc::_PC_NAME_MAX => s.namelen as c_long,
        // Bits of the largest size, and a sign bit.
        libc::_PC_FILESIZEBITS => (65 - ulfs::fs::MAX_FILE_SIZE.leading_zeros()) as c_long,
        libc::_PC_SYMLINK_MAX => ulfs::format::inode::SYMLINK_MAX as c_long,
        libc::_PC_2_SYMLINKS => 1,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => {
            s.bsize as c_long
        }
        // No recommendation: -1 with errno unchanged, as glibc says it.
        libc::_PC_REC_INCR_XFER_SIZE | libc::_PC_REC_MAX_XFER_SIZE => -1,
        _ => {
            let f = real!(pathconf: unsafe extern "C" fn(*const c_char, c_int) -> c_long);
            // SAFETY: a NUL-terminated literal path.
            unsafe { f(c"/".as_ptr(), name) }
        }
    }
}

/// `pathconf(3)`.
///
/// # Safety
/// As libc's `pathconf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> c_long {
    // SAFETY: the caller's contract.
    match unsafe { for_path(path) } {
        Ok(Ok((s, _))) => image_pathconf(&s, name),
        Ok(Err(e)) => ret::<c_int>(Err(e)) as c_long,
        Err(rewritten) => {
            let f = real!(pathconf: unsafe extern "C" fn(*const c_char, c_int) -> c_long);
            let p = rewritten.as_ref().map_or(path, |c| c.as_ptr());
            // SAFETY: the program's own arguments (or the rewritten path).
            unsafe { f(p, name) }
        }
    }
}

/// `fpathconf(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn fpathconf(fd: c_int, name: c_int) -> c_long {
    match for_fd(fd) {
        Some(Ok((s, _))) => image_pathconf(&s, name),
        Some(Err(e)) => ret::<c_int>(Err(e)) as c_long,
        None => {
            let f = real!(fpathconf: unsafe extern "C" fn(c_int, c_int) -> c_long);
            // SAFETY: the program's own arguments.
            unsafe { f(fd, name) }
        }
    }
}

macro_rules! path_info {
    ($name:ident, $t:ty, |$s:ident, $ro:ident| $conv:expr) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut $t) -> c_int {
            // SAFETY: the caller's contract.
            match unsafe { for_path(path) } {
                // SAFETY: `out` by the caller's contract.
                Ok(Ok(($s, $ro))) => unsafe { put(out, $conv) },
                Ok(Err(e)) => ret::<c_int>(Err(e)),
                Err(rewritten) => {
                    let f = real!($name: unsafe extern "C" fn(*const c_char, *mut $t) -> c_int);
                    let p = rewritten.as_ref().map_or(path, |c| c.as_ptr());
                    // SAFETY: the program's own arguments (or the rewritten path).
                    unsafe { f(p, out) }
                }
            }
        }
    };
}

macro_rules! fd_info {
    ($name:ident, $t:ty, |$s:ident, $ro:ident| $conv:expr) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, out: *mut $t) -> c_int {
            match for_fd(fd) {
                // SAFETY: `out` by the caller's contract.
                Some(Ok(($s, $ro))) => unsafe { put(out, $conv) },
                Some(Err(e)) => ret::<c_int>(Err(e)),
                None => {
                    let f = real!($name: unsafe extern "C" fn(c_int, *mut $t) -> c_int);
                    // SAFETY: the program's own arguments.
                    unsafe { f(fd, out) }
                }
            }
        }
    };
}

path_info!(statfs, libc::statfs, |s, _ro| s.to_libc());
path_info!(statfs64, libc::statfs, |s, _ro| s.to_libc());
path_info!(statvfs, libc::statvfs, |s, ro| vfs(&s, ro));
path_info!(statvfs64, libc::statvfs, |s, ro| vfs(&s, ro));
fd_info!(fstatfs, libc::statfs, |s, _ro| s.to_libc());
fd_info!(fstatfs64, libc::statfs, |s, _ro| s.to_libc());
fd_info!(fstatvfs, libc::statvfs, |s, ro| vfs(&s, ro));
fd_info!(fstatvfs64, libc::statvfs, |s, ro| vfs(&s, ro));

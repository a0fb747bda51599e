//! Directory-relative calls of the C ABI (`ulfs_openat`, `ulfs_mkdirat`,
//! `ulfs_fstatat`, `ulfs_statx`, ...): the `*at` forms of the path calls as
//! Linux defines them, with `AT_FDCWD` and the `AT_*` flags. Each takes the
//! handle first and otherwise mirrors its POSIX name exactly, so a
//! preloader or a port can forward a libc call argument for argument.
//! `dirfd` is a descriptor of the same handle (or `AT_FDCWD`).

use std::ffi::{c_char, c_int, c_uint};

use libc::{dev_t, gid_t, mode_t, size_t, ssize_t, uid_t};
use ulfs::Errno;

use crate::ffi::{
    c_bytes, c_times, fs_mut, guard_fs, out_buf, path_op, put, ssize, two_path_op, ulfs_t,
};

/// `openat(2)`: as `ulfs_open`, `path` relative to `dirfd`. Returns the new
/// descriptor or `-errno`.
///
/// # Safety
/// `fs` NULL or a live handle used by no other thread during the call;
/// `path` NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_openat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `path` is NULL or NUL-terminated, by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        fs.openat(dirfd, path, flags, mode)
    })
}

/// `mkdirat(2)`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_mkdirat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.mkdirat(dirfd, p, mode)) }
}

/// `mknodat(2)`: a regular file (type `S_IFREG` or 0) is created empty;
/// FIFOs, sockets and device nodes are not stored by ulfs (`-EPERM`).
/// Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_mknodat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: dev_t,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.mknodat(dirfd, p, mode, dev)) }
}

/// `unlinkat(2)`: `flags` 0 or `AT_REMOVEDIR`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_unlinkat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.unlinkat(dirfd, p, flags)) }
}

/// `renameat2(2)`: `flags` 0, `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
/// Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_renameat2(
    fs: *mut ulfs_t,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe {
        two_path_op(fs, oldpath, newpath, |fs, a, b| {
            fs.renameat2(olddirfd, a, newdirfd, b, flags)
        })
    }
}

/// `renameat(2)`: `ulfs_renameat2` with flags 0.
///
/// # Safety
/// As `ulfs_openat`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_renameat(
    fs: *mut ulfs_t,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { ulfs_renameat2(fs, olddirfd, oldpath, newdirfd, newpath, 0) }
}

/// `linkat(2)`: `flags` 0, `AT_SYMLINK_FOLLOW`, `AT_EMPTY_PATH`. Returns 0
/// or `-errno`.
///
/// # Safety
/// As `ulfs_openat`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_linkat(
    fs: *mut ulfs_t,
    olddirfd: c_int,
    oldpath: *const c_char,
    newdirfd: c_int,
    newpath: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe {
        two_path_op(fs, oldpath, newpath, |fs, a, b| {
            fs.linkat(olddirfd, a, newdirfd, b, flags)
        })
    }
}

/// `symlinkat(2)`: a symlink at `linkpath` (relative to `newdirfd`) holding
/// `target`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`, for both strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_symlinkat(
    fs: *mut ulfs_t,
    target: *const c_char,
    newdirfd: c_int,
    linkpath: *const c_char,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe {
        two_path_op(fs, target, linkpath, |fs, t, l| {
            fs.symlinkat(t, newdirfd, l)
        })
    }
}

/// `readlinkat(2)`: as `ulfs_readlink`, `path` relative to `dirfd`. Returns
/// the byte count (not NUL-terminated, silently truncated) or `-errno`.
///
/// # Safety
/// As `ulfs_openat`; `buf` NULL or writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_readlinkat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `path` is NULL or NUL-terminated, by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        if size == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: `buf` is NULL or writable for `size` bytes, by the contract.
        let out = unsafe { out_buf(buf.cast(), size) }?;
        let target = fs.readlinkat(dirfd, path)?;
        let n = target.len().min(out.len());
        out[..n].copy_from_slice(&target[..n]);
        ssize(n)
    })
}

/// `fstatat(2)`: `flags` 0, `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`,
/// `AT_NO_AUTOMOUNT`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`; `st` NULL or writable for one `struct stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fstatat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `path` is NULL or NUL-terminated, by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        if st.is_null() {
            return Err(Errno::EFAULT);
        }
        let s = fs.fstatat(dirfd, path, flags)?;
        // SAFETY: `st` is valid for one `struct stat`, by the caller's contract.
        unsafe { put(st, s.to_libc()) }?;
        Ok(0)
    })
}

/// `statx(2)`: `flags` as `ulfs_fstatat`'s plus `AT_STATX_*_SYNC`; `mask`
/// asks for fields and `stx_mask` says which are filled
/// (`STATX_BASIC_STATS`, and `STATX_BTIME` when asked for). Returns 0 or
/// `-errno`.
///
/// # Safety
/// As `ulfs_openat`; `stx` NULL or writable for one `struct statx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_statx(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `path` is NULL or NUL-terminated, by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        if stx.is_null() {
            return Err(Errno::EFAULT);
        }
        let x = fs.statx(dirfd, path, flags, mask)?;
        // SAFETY: `stx` is valid for one `struct statx`, by the contract.
        unsafe { put(stx, x.to_libc()) }?;
        Ok(0)
    })
}

/// `faccessat(3)` (the `faccessat2` system call): `mode` `F_OK` or any of
/// `R_OK | W_OK | X_OK`, `flags` 0, `AT_EACCESS`, `AT_SYMLINK_NOFOLLOW`,
/// `AT_EMPTY_PATH`. Judged for the process's real ids (effective with
/// `AT_EACCESS`), as the kernel would. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_faccessat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.faccessat(dirfd, p, mode, flags)) }
}

/// `access(2)`: `ulfs_faccessat(fs, AT_FDCWD, path, mode, 0)`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_access(fs: *mut ulfs_t, path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.access(p, mode)) }
}

/// `fchmodat(2)`: `flags` 0, `AT_SYMLINK_NOFOLLOW` (`-EOPNOTSUPP` on a
/// symlink, as Linux), `AT_EMPTY_PATH`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fchmodat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.fchmodat(dirfd, p, mode, flags)) }
}

/// `fchownat(2)`: `(uid_t)-1` / `(gid_t)-1` leave an id unchanged; `flags`
/// 0, `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fchownat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.fchownat(dirfd, p, uid, gid, flags)) }
}

/// `utimensat(2)`: access (`times[0]`) and modification (`times[1]`)
/// times; `times` NULL means both now; a `tv_nsec` of `UTIME_NOW` or
/// `UTIME_OMIT` means now / unchanged, any other outside 0..999999999 is
/// `-EINVAL`. `flags` 0, `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`. Returns 0
/// or `-errno`.
///
/// # Safety
/// As `ulfs_openat`; `times` NULL or readable for two `struct timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_utimensat(
    fs: *mut ulfs_t,
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    // SAFETY: `times` is NULL or readable for two timespecs, by the contract.
    let times = match unsafe { c_times(times) } {
        Ok(t) => t,
        Err(e) => return -e.raw(),
    };
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.utimensat(dirfd, p, times, flags)) }
}

/// `fchdir(2)`: the directory open as `fd` becomes the working directory.
/// Returns 0 or `-errno`.
///
/// # Safety
/// `fs` NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fchdir(fs: *mut ulfs_t, fd: c_int) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        fs.fchdir(fd)?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_handle_is_efault_everywhere() {
        let null = std::ptr::null_mut();
        let p = c"/a".as_ptr();
        let at = libc::AT_FDCWD;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        let mut sx = std::mem::MaybeUninit::<libc::statx>::uninit();
        let mut b = [0 as c_char; 8];
        let e = -libc::EFAULT;
        // SAFETY: every call gets a NULL handle; the other pointers are valid.
        unsafe {
            assert_eq!(ulfs_openat(null, at, p, 0, 0), e);
            assert_eq!(ulfs_mkdirat(null, at, p, 0o755), e);
            assert_eq!(ulfs_mknodat(null, at, p, libc::S_IFREG, 0), e);
            assert_eq!(ulfs_unlinkat(null, at, p, 0), e);
            assert_eq!(ulfs_renameat2(null, at, p, at, p, 0), e);
            assert_eq!(ulfs_renameat(null, at, p, at, p), e);
            assert_eq!(ulfs_linkat(null, at, p, at, p, 0), e);
            assert_eq!(ulfs_symlinkat(null, p, at, p), e);
            assert_eq!(ulfs_readlinkat(null, at, p, b.as_mut_ptr(), 8), e as isize);
            assert_eq!(ulfs_fstatat(null, at, p, st.as_mut_ptr(), 0), e);
            assert_eq!(ulfs_statx(null, at, p, 0, 0, sx.as_mut_ptr()), e);
            assert_eq!(ulfs_faccessat(null, at, p, libc::F_OK, 0), e);
            assert_eq!(ulfs_access(null, p, libc::F_OK), e);
            assert_eq!(ulfs_fchmodat(null, at, p, 0o644, 0), e);
            assert_eq!(ulfs_fchownat(null, at, p, 0, 0, 0), e);
            assert_eq!(ulfs_utimensat(null, at, p, std::ptr::null(), 0), e);
            assert_eq!(ulfs_fchdir(null, 3), e);
        }
    }
}

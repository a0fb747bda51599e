//! Path calls of the C ABI: everything that names a file by a path inside the
//! image (`ulfs_open`, `ulfs_stat`, `ulfs_mkdir`, `ulfs_rename`, ...), plus the
//! working directory (`ulfs_chdir`, `ulfs_getcwd`).
//!
//! Paths are NUL-terminated byte strings handed to the core unchanged (they
//! need not be UTF-8); relative paths start at the handle's working
//! directory. Each body checks the C arguments and forwards to the
//! `ulfs::Fs` method of the same name; `open`, `stat`, `lstat` and
//! `readlink` are their `*at` forms (at.rs) with `AT_FDCWD`.

use std::ffi::{c_char, c_int, c_uint};

use libc::{gid_t, mode_t, off_t, size_t, ssize_t, uid_t};
use ulfs::Errno;

use crate::ffi::{fs_mut, guard_fs, offset, out_buf, path_op, two_path_op, ulfs_t};

/// Opens (and with `O_CREAT` creates, with permission bits `mode`) the file
/// at `path`. `flags` are the host's `O_*` flags. Returns the new descriptor
/// (the lowest free one) or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the
/// call; `path` NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_open(
    fs: *mut ulfs_t,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { crate::at::ulfs_openat(fs, libc::AT_FDCWD, path, flags, mode) }
}

/// Fills `*st` for the file at `path`, following a final symlink. Returns 0
/// or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_open`; `path` NULL or NUL-terminated; `st` NULL or valid
/// for writing one `struct stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_stat(
    fs: *mut ulfs_t,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { crate::at::ulfs_fstatat(fs, libc::AT_FDCWD, path, st, 0) }
}

/// As `ulfs_stat`, but a final symlink is reported itself.
///
/// # Safety
/// As `ulfs_stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_lstat(
    fs: *mut ulfs_t,
    path: *const c_char,
    st: *mut libc::stat,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { crate::at::ulfs_fstatat(fs, libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW) }
}

/// Creates a directory with permission bits `mode`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_mkdir(fs: *mut ulfs_t, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.mkdir(p, mode)) }
}

/// Removes an empty directory. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_rmdir(fs: *mut ulfs_t, path: *const c_char) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.rmdir(p)) }
}

/// Removes a name of a non-directory. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_unlink(fs: *mut ulfs_t, path: *const c_char) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.unlink(p)) }
}

/// Atomically renames `oldpath` to `newpath`, replacing it. Returns 0 or
/// `-errno`.
///
/// # Safety
/// As `ulfs_open`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_rename(
    fs: *mut ulfs_t,
    oldpath: *const c_char,
    newpath: *const c_char,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { two_path_op(fs, oldpath, newpath, |fs, a, b| fs.rename(a, b)) }
}

/// As `renameat2(2)`: `flags` is 0, `ULFS_RENAME_NOREPLACE` or
/// `ULFS_RENAME_EXCHANGE`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_rename2(
    fs: *mut ulfs_t,
    oldpath: *const c_char,
    newpath: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { two_path_op(fs, oldpath, newpath, |fs, a, b| fs.rename2(a, b, flags)) }
}

/// Makes `newpath` another name of the file at `oldpath`. Returns 0 or
/// `-errno`.
///
/// # Safety
/// As `ulfs_open`, for both paths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_link(
    fs: *mut ulfs_t,
    oldpath: *const c_char,
    newpath: *const c_char,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { two_path_op(fs, oldpath, newpath, |fs, a, b| fs.link(a, b)) }
}

/// Creates a symlink at `linkpath` whose content is `target`. Returns 0 or
/// `-errno`.
///
/// # Safety
/// As `ulfs_open`, for both strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_symlink(
    fs: *mut ulfs_t,
    target: *const c_char,
    linkpath: *const c_char,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { two_path_op(fs, target, linkpath, |fs, t, l| fs.symlink(t, l)) }
}

/// Copies the symlink's content into `buf`, truncated to `size` bytes and not
/// NUL-terminated, as `readlink(2)`. Returns the byte count or `-errno`
/// (`-EINVAL` for `size` 0 or a non-symlink).
///
/// # Safety
/// As `ulfs_open`; `buf` NULL or writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_readlink(
    fs: *mut ulfs_t,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    // SAFETY: the same contract as this function's.
    unsafe { crate::at::ulfs_readlinkat(fs, libc::AT_FDCWD, path, buf, size) }
}

/// Sets the size of the file at `path` to `len`. Returns 0 or `-errno`;
/// negative `len` is `-EINVAL`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_truncate(fs: *mut ulfs_t, path: *const c_char, len: off_t) -> c_int {
    let Ok(len) = offset(len) else {
        return -libc::EINVAL;
    };
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.truncate(p, len)) }
}

/// Sets the permission bits of the file at `path`. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_chmod(fs: *mut ulfs_t, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.chmod(p, mode)) }
}

/// Sets the owner of the file at `path` (following a final symlink);
/// `(uid_t)-1` / `(gid_t)-1` leave a field unchanged. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_chown(
    fs: *mut ulfs_t,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.chown(p, uid, gid)) }
}

/// As `ulfs_chown`, but a final symlink is changed itself.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_lchown(
    fs: *mut ulfs_t,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.lchown(p, uid, gid)) }
}

/// Changes the handle's working directory. Returns 0 or `-errno`.
///
/// # Safety
/// As `ulfs_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_chdir(fs: *mut ulfs_t, path: *const c_char) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { path_op(fs, path, |fs, p| fs.chdir(p)) }
}

/// Copies the absolute path of the working directory, NUL-terminated, into
/// `buf`. Returns the length *including* the NUL, `-ERANGE` if `size` is too
/// small (`buf` then unchanged), or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_open`; `buf` NULL or writable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_getcwd(fs: *mut ulfs_t, buf: *mut c_char, size: size_t) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        if buf.is_null() {
            return Err(Errno::EFAULT);
        }
        let cwd = fs.getcwd()?;
        let need = cwd.len() + 1;
        if need > size {
            return Err(Errno::ERANGE);
        }
        // SAFETY: `buf` is non-NULL and writable for `size >= need` bytes.
        let out = unsafe { out_buf(buf.cast(), need) }?;
        out[..cwd.len()].copy_from_slice(&cwd);
        out[cwd.len()] = 0;
        c_int::try_from(need).map_err(|_| Errno::ERANGE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_handle_is_efault_everywhere() {
        let null = std::ptr::null_mut();
        let p = c"/a".as_ptr();
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        let mut b = [0 as c_char; 8];
        let e = -libc::EFAULT;
        // SAFETY: every call gets a NULL handle; the other pointers are valid.
        unsafe {
            assert_eq!(ulfs_open(null, p, 0, 0), e);
            assert_eq!(ulfs_stat(null, p, st.as_mut_ptr()), e);
            assert_eq!(ulfs_lstat(null, p, st.as_mut_ptr()), e);
            assert_eq!(ulfs_mkdir(null, p, 0o755), e);
            assert_eq!(ulfs_rmdir(null, p), e);
            assert_eq!(ulfs_unlink(null, p), e);
            assert_eq!(ulfs_rename(null, p, p), e);
            assert_eq!(ulfs_rename2(null, p, p, 0), e);
            assert_eq!(ulfs_link(null, p, p), e);
            assert_eq!(ulfs_symlink(null, p, p), e);
            assert_eq!(ulfs_readlink(null, p, b.as_mut_ptr(), 8), e as isize);
            assert_eq!(ulfs_truncate(null, p, 0), e);
            assert_eq!(ulfs_chmod(null, p, 0o644), e);
            assert_eq!(ulfs_chown(null, p, 0, 0), e);
            assert_eq!(ulfs_lchown(null, p, 0, 0), e);
            assert_eq!(ulfs_chdir(null, p), e);
            assert_eq!(ulfs_getcwd(null, b.as_mut_ptr(), 8), e);
        }
    }

    #[test]
    fn argument_errors_before_the_handle_is_needed() {
        let null = std::ptr::null_mut();
        let bad = [libc::timespec {
            tv_sec: 0,
            tv_nsec: -5,
        }; 2];
        // SAFETY: NULL handles and NULL strings are rejected by the ABI; `bad`
        // holds two timespecs.
        unsafe {
            assert_eq!(ulfs_truncate(null, c"/a".as_ptr(), -1), -libc::EINVAL);
            assert_eq!(
                crate::at::ulfs_utimensat(null, libc::AT_FDCWD, c"/a".as_ptr(), bad.as_ptr(), 0),
                -libc::EINVAL
            );
        }
    }
}

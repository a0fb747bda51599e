//! Descriptor calls of the C ABI: everything whose second argument is an
//! `int fd` (`ulfs_close`, `ulfs_read`, ..., `ulfs_fallocate`).
//!
//! Each body checks the C arguments (NULL buffers, negative offsets, iovec
//! counts) and forwards to the `ulfs::Fs` method of the same name.
//! `ulfs_readv`/`ulfs_writev` live in `vectored.rs`.

use std::ffi::{c_int, c_void};

use libc::{gid_t, mode_t, off_t, size_t, ssize_t, uid_t};
use ulfs::Errno;

use crate::ffi::{c_times, fs_mut, fs_unlocked, guard_fs, in_buf, offset, out_buf, ssize, ulfs_t};

/// Closes `fd`. Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_close(fs: *mut ulfs_t, fd: c_int) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        unsafe { fs_mut(fs) }?.close(fd)?;
        Ok(0)
    })
}

/// Reads up to `n` bytes at the file offset. Returns the count or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `buf` NULL or writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_read(
    fs: *mut ulfs_t,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `buf` is NULL or writable for `n` bytes, by the contract.
        let buf = unsafe { out_buf(buf.cast(), n) }?;
        ssize(fs.read(fd, buf)?)
    })
}

/// Writes up to `n` bytes at the file offset (at the end with `O_APPEND`).
/// Returns the count or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `buf` NULL or readable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_write(
    fs: *mut ulfs_t,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `buf` is NULL or readable for `n` bytes, by the contract.
        let buf = unsafe { in_buf(buf.cast(), n) }?;
        ssize(fs.write(fd, buf)?)
    })
}

/// Reads up to `n` bytes at offset `off` (not moving the file offset).
/// Returns the count or `-errno`; negative `off` is `-EINVAL`.
///
/// # Safety
/// As `ulfs_read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_pread(
    fs: *mut ulfs_t,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        let off = offset(off)?;
        // SAFETY: `buf` is NULL or writable for `n` bytes, by the contract.
        let buf = unsafe { out_buf(buf.cast(), n) }?;
        ssize(fs.pread(fd, buf, off)?)
    })
}

/// Writes up to `n` bytes at offset `off` (not moving the file offset).
/// Returns the count or `-errno`; negative `off` is `-EINVAL`.
///
/// # Safety
/// As `ulfs_write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_pwrite(
    fs: *mut ulfs_t,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        let off = offset(off)?;
        // SAFETY: `buf` is NULL or readable for `n` bytes, by the contract.
        let buf = unsafe { in_buf(buf.cast(), n) }?;
        ssize(fs.pwrite(fd, buf, off)?)
    })
}

/// Moves the file offset (`SEEK_SET`, `SEEK_CUR`, `SEEK_END`, `SEEK_DATA`,
/// `SEEK_HOLE`). Returns the new offset or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_lseek(
    fs: *mut ulfs_t,
    fd: c_int,
    off: off_t,
    whence: c_int,
) -> off_t {
    // The common call, SEEK_SET to an offset on a handle without a lock,
    // calls nothing that can panic (`Fs::seek_to`), so it needs no panic
    // guard and no stack frame; everything else, errors included, goes
    // the guarded way.
    if whence == libc::SEEK_SET && off >= 0 {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        if let Some(fs) = unsafe { fs_unlocked(fs) }
            && fs.seek_to(fd, off as u64).is_ok()
        {
            return off;
        }
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { lseek_guarded(fs, fd, off, whence) }
}

#[inline(never)]
unsafe fn lseek_guarded(fs: *mut ulfs_t, fd: c_int, off: off_t, whence: c_int) -> off_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let pos = unsafe { fs_mut(fs) }?.lseek(fd, off, whence)?;
        off_t::try_from(pos).map_err(|_| Errno::EOVERFLOW)
    })
}

/// Fills `*st` for the open file. Returns 0 or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `st` NULL or valid for writing one `struct stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fstat(fs: *mut ulfs_t, fd: c_int, st: *mut libc::stat) -> c_int {
    // The common call, on a handle without a lock and a file whose inode
    // is decoded already, calls nothing that can panic
    // (`Fs::fstat_libc_decoded`): no panic guard, no stack frame.
    // Everything else, errors included, goes the guarded way.
    if !st.is_null() {
        // SAFETY: `fs` is NULL or live and unshared, and `st` valid for
        // one `struct stat`, by the caller's contract.
        if let Some(fs) = unsafe { fs_unlocked(fs) }
            && fs.fstat_libc_decoded(fd, unsafe { &mut *st.cast() })
        {
            return 0;
        }
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { fstat_guarded(fs, fd, st) }
}

#[inline(never)]
unsafe fn fstat_guarded(fs: *mut ulfs_t, fd: c_int, st: *mut libc::stat) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        if st.is_null() {
            return Err(Errno::EFAULT);
        }
        // SAFETY: `st` is non-NULL and valid for writing one `struct stat`
        // by the contract; `MaybeUninit` makes no claim on what it holds.
        let out = unsafe { &mut *st.cast::<std::mem::MaybeUninit<libc::stat>>() };
        fs.fstat_libc(fd, out)?;
        Ok(0)
    })
}

/// Reads directory entries as `struct linux_dirent64` records (`d_ino`,
/// `d_off`, `d_reclen`, `d_type`, `d_name`), as `getdents64(2)`. Returns the
/// number of bytes filled, 0 at the end, or `-errno` (`-EINVAL` when `count`
/// is too small for the next record).
///
/// # Safety
/// `fs` as for `ulfs_close`; `dirp` NULL or writable for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_getdents64(
    fs: *mut ulfs_t,
    fd: c_int,
    dirp: *mut c_void,
    count: size_t,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `dirp` is NULL or writable for `count` bytes, by the contract.
        let buf = unsafe { out_buf(dirp.cast(), count) }?;
        ssize(fs.getdents64(fd, buf)?)
    })
}

/// Sets the open file's size to `len`. Returns 0 or `-errno`; negative `len`
/// is `-EINVAL`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_ftruncate(fs: *mut ulfs_t, fd: c_int, len: off_t) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        fs.ftruncate(fd, offset(len)?)?;
        Ok(0)
    })
}

/// Makes the file's data and metadata durable. Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fsync(fs: *mut ulfs_t, fd: c_int) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        unsafe { fs_mut(fs) }?.fsync(fd)?;
        Ok(0)
    })
}

/// Makes the file's data (and the metadata needed to read it) durable.
/// Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fdatasync(fs: *mut ulfs_t, fd: c_int) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        unsafe { fs_mut(fs) }?.fdatasync(fd)?;
        Ok(0)
    })
}

/// Sets the open file's access and modification times, as `futimens(3)`.
/// Returns 0 or `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `times` NULL or readable for two `timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_futimens(
    fs: *mut ulfs_t,
    fd: c_int,
    times: *const libc::timespec,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `times` is NULL or readable for two timespecs, by the contract.
        let times = unsafe { c_times(times) }?;
        fs.futimens(fd, times)?;
        Ok(0)
    })
}

/// Sets the open file's permission bits. Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fchmod(fs: *mut ulfs_t, fd: c_int, mode: mode_t) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        unsafe { fs_mut(fs) }?.fchmod(fd, mode)?;
        Ok(0)
    })
}

/// Sets the open file's owner; `(uid_t)-1` / `(gid_t)-1` leave a field
/// unchanged. Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fchown(fs: *mut ulfs_t, fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        unsafe { fs_mut(fs) }?.fchown(fd, uid, gid)?;
        Ok(0)
    })
}

/// Duplicates `fd` onto the lowest free descriptor (sharing offset and
/// flags). Returns the new descriptor or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_dup(fs: *mut ulfs_t, fd: c_int) -> c_int {
    // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
    guard_fs(fs, || unsafe { fs_mut(fs) }?.dup(fd))
}

/// Duplicates `oldfd` onto `newfd`, closing `newfd` first if open. Returns
/// `newfd` or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_dup2(fs: *mut ulfs_t, oldfd: c_int, newfd: c_int) -> c_int {
    // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
    guard_fs(fs, || unsafe { fs_mut(fs) }?.dup2(oldfd, newfd))
}

/// Allocates (mode 0) or otherwise manipulates the byte range `[off,
/// off+len)`, as `fallocate(2)`. Returns 0 or `-errno`; negative `off` or
/// non-positive `len` is `-EINVAL`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_fallocate(
    fs: *mut ulfs_t,
    fd: c_int,
    mode: c_int,
    off: off_t,
    len: off_t,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        fs.fallocate(fd, mode, off as u64, len as u64)?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_handle_and_bad_arguments() {
        let null = std::ptr::null_mut();
        let mut b = [0u8; 8];
        let efault = -libc::EFAULT;
        // SAFETY: every call gets a NULL handle, which the ABI rejects before
        // touching any other pointer; the buffers are valid anyway.
        unsafe {
            assert_eq!(ulfs_close(null, 0), efault);
            assert_eq!(
                ulfs_read(null, 0, b.as_mut_ptr().cast(), 8),
                efault as isize
            );
            assert_eq!(ulfs_write(null, 0, b.as_ptr().cast(), 8), efault as isize);
            assert_eq!(
                ulfs_pread(null, 0, b.as_mut_ptr().cast(), 8, -1),
                efault as isize
            );
            assert_eq!(
                ulfs_pwrite(null, 0, b.as_ptr().cast(), 8, 0),
                efault as isize
            );
            assert_eq!(ulfs_lseek(null, 0, 0, libc::SEEK_SET), i64::from(efault));
            assert_eq!(ulfs_fstat(null, 0, std::ptr::null_mut()), efault);
            assert_eq!(
                ulfs_getdents64(null, 0, b.as_mut_ptr().cast(), 8),
                efault as isize
            );
            assert_eq!(ulfs_ftruncate(null, 0, 0), efault);
            assert_eq!(ulfs_fsync(null, 0), efault);
            assert_eq!(ulfs_fdatasync(null, 0), efault);
            assert_eq!(ulfs_futimens(null, 0, std::ptr::null()), efault);
            assert_eq!(ulfs_fchmod(null, 0, 0o644), efault);
            assert_eq!(ulfs_fchown(null, 0, 0, 0), efault);
            assert_eq!(ulfs_dup(null, 0), efault);
            assert_eq!(ulfs_dup2(null, 0, 1), efault);
            assert_eq!(ulfs_fallocate(null, 0, 0, 0, 1), efault);
        }
    }
}

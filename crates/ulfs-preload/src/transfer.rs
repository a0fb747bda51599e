//! Copies between descriptors inside the kernel (`copy_file_range`,
//! `sendfile`) when one side is an image file: done here with reads and
//! writes through this library, in both directions (image to host, host
//! to image, image to image), with the offsets and return values of the
//! kernel's calls. Between two host descriptors the kernel does it.

use std::ffi::{c_int, c_uint, c_void};

use libc::{off_t, size_t, ssize_t};

use crate::fds;
use crate::real::real;

/// The chunk one step moves.
const CHUNK: usize = 128 * 1024;

/// Reads at most `buf.len()` bytes from `fd` (at `*off` when given,
/// advancing it; else at the descriptor's offset).
fn read_from(fd: c_int, buf: &mut [u8], off: Option<&mut i64>) -> ssize_t {
    let p = buf.as_mut_ptr().cast::<c_void>();
    match off {
        Some(o) => {
            // SAFETY: `buf` is valid for its length.
            let n = unsafe { crate::io::pread(fd, p, buf.len(), *o) };
            if n > 0 {
                *o += n as i64;
            }
            n
        }
        // SAFETY: as above.
        None => unsafe { crate::io::read(fd, p, buf.len()) },
    }
}

/// Writes all of `buf` to `fd` (at `*off` when given, advancing it);
/// returns the bytes written, or -1 if nothing was.
fn write_to(fd: c_int, buf: &[u8], mut off: Option<&mut i64>) -> ssize_t {
    let mut done = 0;
    while done < buf.len() {
        let p = buf[done..].as_ptr().cast::<c_void>();
        let n = match off.as_deref_mut() {
            // SAFETY: `buf[done..]` is valid for its length.
            Some(o) => unsafe { crate::io::pwrite(fd, p, buf.len() - done, *o) },
            // SAFETY: as above.
            None => unsafe { crate::io::write(fd, p, buf.len() - done) },
        };
        if n <= 0 {
            return if done > 0 { done as ssize_t } else { n };
        }
        if let Some(o) = off.as_deref_mut() {
            *o += n as i64;
        }
        done += n as usize;
    }
    done as ssize_t
}

/// Moves up to `len` bytes, as the kernel's copy calls: the count moved,
/// 0 at end of input, or -1 with errno when nothing moved.
fn copy(
    fd_in: c_int,
    mut off_in: Option<&mut i64>,
    fd_out: c_int,
    mut off_out: Option<&mut i64>,
    len: usize,
) -> ssize_t {
    let mut buf = vec![0u8; len.min(CHUNK)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(buf.len());
        let n = read_from(fd_in, &mut buf[..want], off_in.as_deref_mut());
        if n < 0 {
            return if total > 0 { total as ssize_t } else { n };
        }
        if n == 0 {
            break;
        }
        let w = write_to(fd_out, &buf[..n as usize], off_out.as_deref_mut());
        if w < 0 {
            return if total > 0 { total as ssize_t } else { w };
        }
        total += w as usize;
        if (w as usize) < n as usize {
            break;
        }
    }
    total as ssize_t
}

/// The offset behind a pointer argument (NULL: the descriptor's own).
///
/// # Safety
/// `p` NULL or valid for reading and writing one offset.
unsafe fn offset_arg<'a>(p: *mut off_t) -> Option<&'a mut i64> {
    // SAFETY: by the contract.
    (!p.is_null()).then(|| unsafe { &mut *p })
}

/// `copy_file_range(2)`.
///
/// # Safety
/// As libc's `copy_file_range`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off_t,
    fd_out: c_int,
    off_out: *mut off_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if fds::is_library(fd_in) || fds::is_library(fd_out) {
        return crate::fail(libc::EBADF);
    }
    if fds::ulfs_fd(fd_in).is_none() && fds::ulfs_fd(fd_out).is_none() {
        let f = real!(copy_file_range: unsafe extern "C" fn(c_int, *mut off_t, c_int, *mut off_t, size_t, c_uint) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) };
    }
    if flags != 0 {
        return crate::fail(libc::EINVAL);
    }
    // SAFETY: the offsets by copy_file_range's contract.
    unsafe { copy(fd_in, offset_arg(off_in), fd_out, offset_arg(off_out), len) }
}

/// `sendfile(2)`: from `fd_in` (at `*offset` when given) to `fd_out` at
/// its own offset.
///
/// # Safety
/// As libc's `sendfile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    fd_out: c_int,
    fd_in: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    if fds::is_library(fd_in) || fds::is_library(fd_out) {
        return crate::fail(libc::EBADF);
    }
    if fds::ulfs_fd(fd_in).is_none() && fds::ulfs_fd(fd_out).is_none() {
        let f = real!(sendfile: unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd_out, fd_in, offset, count) };
    }
    // SAFETY: the offset by sendfile's contract.
    unsafe { copy(fd_in, offset_arg(offset), fd_out, None, count) }
}

/// # Safety
/// As libc's `sendfile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    fd_out: c_int,
    fd_in: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe { sendfile(fd_out, fd_in, offset, count) }
}

//! stdio streams on image files. glibc's `fopen` opens through an
//! internal call this library cannot see, and its streams read and write
//! their descriptor the same way, so a stream on an image file is a
//! `fopencookie` stream whose reads, writes, seeks and close go through
//! this library's own `read`, `write`, `lseek` and `close` (`fopen`,
//! `fopen64`, `fdopen`). `fileno` of such a stream is its image
//! descriptor (glibc would say -1 for a cookie stream), so the common
//! `fstat(fileno(f))` works. `freopen` onto an image path cannot keep the
//! stream object and is refused with EOPNOTSUPP (docs/RUN.md).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{LazyLock, Mutex};

use libc::{size_t, ssize_t};

use crate::fds;
use crate::io::{arg, c_path, open_image};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t,
    write: unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t,
    seek: unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int,
    close: unsafe extern "C" fn(*mut c_void) -> c_int,
}

unsafe extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The cookie is the stream's kernel descriptor (a placeholder of an image
/// file), carried in the pointer.
fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: glibc hands a buffer valid for `n` bytes.
    unsafe { crate::io::read(fd_of(cookie), buf.cast(), n) }
}

pub unsafe extern "C" fn cookie_write(
    cookie: *mut c_void,
    buf: *const c_char,
    n: size_t,
) -> ssize_t {
    // SAFETY: glibc hands a buffer valid for `n` bytes.
    let r = unsafe { crate::io::write(fd_of(cookie), buf.cast(), n) };
    // A cookie write must not return -1 for a partial failure with data
    // taken; 0 tells glibc the write failed (it sets the error flag).
    r.max(0)
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: glibc hands a valid offset to read and update.
    let pos = crate::io::lseek(fd_of(cookie), unsafe { *off }, whence);
    if pos < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *off = pos };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    let fd = fd_of(cookie);
    forget_streams_of(fd);
    crate::io::close(fd)
}

/// The cookie streams made here: `FILE *` -> image descriptor.
fn streams() -> std::sync::MutexGuard<'static, HashMap<usize, c_int>> {
    static STREAMS: LazyLock<Mutex<HashMap<usize, c_int>>> = LazyLock::new(Default::default);
    STREAMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `open` flags for an `fopen` mode ("r", "w+", "ae", "wx", ...); EINVAL
/// for a mode that starts with anything else.
fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.iter().take_while(|&&b| b != b',').any(|&b| b == b'+');
    let mut flags = match (mode.first()?, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    for &b in mode.iter().skip(1).take_while(|&&b| b != b',') {
        match b {
            b'e' => flags |= libc::O_CLOEXEC,
            b'x' => flags |= libc::O_EXCL,
            _ => {}
        }
    }
    Some(flags)
}

/// A cookie stream over image descriptor `fd` (closed with the stream).
fn stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let f = cookie_stream(fd, mode, cookie_write, cookie_close);
    if !f.is_null() {
        // glibc buffers a file stream by the file's block size (a cookie
        // stream would get BUFSIZ): the same writes then reach the file
        // at the same moments as on a kernel file system.
        // SAFETY: a zeroed `stat` is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid for writing; the stream is not used yet.
        if unsafe { crate::io::fstat(fd, &mut st) } == 0 && st.st_blksize > 0 {
            unsafe {
                libc::setvbuf(
                    f,
                    std::ptr::null_mut(),
                    libc::_IOFBF,
                    st.st_blksize as usize,
                )
            };
        }
    }
    f
}

/// A cookie stream over host descriptor `fd` whose reads and writes go
/// through this library's (which take turns on the image, `turns.rs`) and
/// whose close leaves the descriptor to its owner (`popen_streams.rs`).
pub fn host_stream(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    unsafe extern "C" fn leave_open(_cookie: *mut c_void) -> c_int {
        0
    }
    cookie_stream(fd, mode, cookie_write, leave_open)
}

type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// A cookie stream over descriptor `fd` reading and seeking through this
/// library's calls, with `write` and `close` (the standard streams of
/// `std_streams.rs` bring their own), known to `fileno` and byte-oriented.
pub fn cookie_stream(
    fd: c_int,
    mode: *const c_char,
    write: WriteFn,
    close: CloseFn,
) -> *mut libc::FILE {
    let io = CookieIo {
        read: cookie_read,
        write,
        seek: cookie_seek,
        close,
    };
    // SAFETY: a NUL-terminated mode; the cookie is a plain integer.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if !f.is_null() {
        streams().insert(f as usize, fd);
        byte_oriented(f);
    }
    f
}

unsafe extern "C" {
    fn fwide(f: *mut libc::FILE, mode: c_int) -> c_int;
}

/// glibc's cookie streams have no wide-character side: wide calls on one
/// would crash. Oriented to bytes, they fail instead (WEOF, -1), as on a
/// stream already used for bytes.
fn byte_oriented(f: *mut libc::FILE) {
    // SAFETY: a stream just made.
    unsafe { fwide(f, -1) };
}

/// The cookie streams on descriptor `fd` are being closed (glibc frees
/// the stream after its close function, which knows only the cookie).
pub fn forget_streams_of(fd: c_int) {
    streams().retain(|_, v| *v != fd);
}

/// Whether `f` is a cookie stream this library made.
pub fn is_cookie_stream(f: *mut libc::FILE) -> bool {
    streams().contains_key(&(f as usize))
}

/// A cookie stream is about to be freed by its maker.
pub fn forget_stream(f: *mut libc::FILE) {
    streams().remove(&(f as usize));
}

/// `fileno(3)`: a stream on an image file shows its image descriptor.
///
/// # Safety
/// As libc's `fileno`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    if let Some(&fd) = streams().get(&(f as usize)) {
        return fd;
    }
    let real_fileno = real!(fileno: unsafe extern "C" fn(*mut libc::FILE) -> c_int);
    // SAFETY: the program's own stream.
    unsafe { real_fileno(f) }
}

/// # Safety
/// As libc's `fileno_unlocked`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    if let Some(&fd) = streams().get(&(f as usize)) {
        return fd;
    }
    let real_fileno = real!(fileno_unlocked: unsafe extern "C" fn(*mut libc::FILE) -> c_int);
    // SAFETY: the program's own stream.
    unsafe { real_fileno(f) }
}

/// `fopen(3)`.
///
/// # Safety
/// As libc's `fopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let real_fopen =
        real!(fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut libc::FILE);
    // SAFETY: by fopen's contract.
    let (Some(image), Some(p), Some(m)) = (image(), unsafe { arg(path) }, unsafe { arg(mode) })
    else {
        // SAFETY: the program's own arguments.
        return unsafe { real_fopen(path, mode) };
    };
    if fds::proc_fd_path(p).is_some() {
        let Some(flags) = mode_flags(m) else {
            crate::fail::<c_int>(libc::EINVAL);
            return std::ptr::null_mut();
        };
        // SAFETY: `path` is the program's NUL-terminated path; this
        // library's open reopens the image file it names.
        let fd = unsafe { crate::io::open(path, flags, 0o666) };
        if fd < 0 {
            return std::ptr::null_mut();
        }
        let f = stream(fd, mode);
        if f.is_null() {
            crate::io::close(fd);
        }
        return f;
    }
    match route(image, libc::AT_FDCWD, p) {
        // SAFETY: the program's own arguments.
        Route::Host { path: None, .. } => unsafe { real_fopen(path, mode) },
        Route::Host {
            path: Some(abs), ..
        } => {
            let c = c_path(abs);
            // SAFETY: a NUL-terminated path and the program's mode.
            unsafe { real_fopen(c.as_ptr(), mode) }
        }
        Route::Image { dirfd, path } => {
            let Some(flags) = mode_flags(m) else {
                crate::fail::<c_int>(libc::EINVAL);
                return std::ptr::null_mut();
            };
            let fd = open_image(image, dirfd, &path, flags, 0o666);
            if fd < 0 {
                return std::ptr::null_mut();
            }
            let f = stream(fd, mode);
            if f.is_null() {
                crate::io::close(fd);
            }
            f
        }
    }
}

/// `fopen64`: `fopen`.
///
/// # Safety
/// As libc's `fopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    unsafe { fopen(path, mode) }
}

/// `fdopen(3)`.
///
/// # Safety
/// As libc's `fdopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    if fds::is_library(fd) {
        crate::fail::<c_int>(libc::EBADF);
        return std::ptr::null_mut();
    }
    if fds::ulfs_fd(fd).is_some() {
        // SAFETY: by fdopen's contract.
        if unsafe { arg(mode) }.and_then(mode_flags).is_none() {
            crate::fail::<c_int>(libc::EINVAL);
            return std::ptr::null_mut();
        }
        return stream(fd, mode);
    }
    let f = real!(fdopen: unsafe extern "C" fn(c_int, *const c_char) -> *mut libc::FILE);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, mode) }
}

/// `freopen(3)`: onto a host path as libc does. A standard stream onto an
/// image path: the file is opened and moved onto the standard descriptor,
/// and the stream that follows it there (`std_streams.rs`) is returned.
/// Any other stream onto an image path: EOPNOTSUPP (the stream object
/// would have to become a cookie stream).
///
/// # Safety
/// As libc's `freopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    let real_freopen = real!(freopen: unsafe extern "C" fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE);
    if path.is_null() && streams().contains_key(&(stream as usize)) {
        // SAFETY: by freopen's contract.
        return unsafe { reopen_same(mode, stream) };
    }
    // SAFETY: by freopen's contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        // SAFETY: the program's own arguments.
        return unsafe { real_freopen(path, mode, stream) };
    };
    match route(image, libc::AT_FDCWD, p) {
        // SAFETY: the program's own arguments.
        Route::Host { path: None, .. } => unsafe { real_freopen(path, mode, stream) },
        Route::Host {
            path: Some(abs), ..
        } => {
            let c = c_path(abs);
            // SAFETY: a NUL-terminated path and the program's arguments.
            unsafe { real_freopen(c.as_ptr(), mode, stream) }
        }
        Route::Image { dirfd, path } if crate::std_streams::std_fd_of(stream).is_some() => {
            let std_fd = crate::std_streams::std_fd_of(stream).unwrap_or(1);
            // SAFETY: by freopen's contract.
            let Some(flags) = unsafe { arg(mode) }.and_then(mode_flags) else {
                crate::fail::<c_int>(libc::EINVAL);
                return std::ptr::null_mut();
            };
            // SAFETY: flushing the program's live stream, as freopen does.
            unsafe { libc::fflush(stream) };
            let fd = open_image(image, dirfd, &path, flags & !libc::O_CLOEXEC, 0o666);
            if fd < 0 {
                return std::ptr::null_mut();
            }
            crate::std_streams::reopen_onto(std_fd, fd)
        }
        Route::Image { .. } => {
            crate::warn(
                "ulfs run: freopen of a stream other than stdin, stdout or stderr onto a path in the image is not supported",
            );
            crate::fail::<c_int>(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// `freopen(NULL, mode, stream)` of a cookie stream (glibc would reopen
/// `/proc/self/fd/N` by the stream's descriptor, which a cookie stream
/// lacks, and abort): the same descriptor with the new mode, as Linux
/// gives. Programs do it to make a standard stream binary, which changes
/// nothing on Linux; a "w" mode truncates the file, "a" appends, as the
/// reopen would.
///
/// # Safety
/// `mode` NUL-terminated; `stream` a cookie stream of this library.
unsafe fn reopen_same(mode: *const c_char, stream: *mut libc::FILE) -> *mut libc::FILE {
    // SAFETY: by the contract.
    let Some(flags) = unsafe { arg(mode) }.and_then(mode_flags) else {
        crate::fail::<c_int>(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // SAFETY: the program's live stream.
    unsafe { libc::fflush(stream) };
    let fd = streams().get(&(stream as usize)).copied().unwrap_or(-1);
    if fds::ulfs_fd(fd).is_some() {
        if flags & libc::O_TRUNC != 0 {
            crate::io::ftruncate(fd, 0);
            crate::io::lseek(fd, 0, libc::SEEK_SET);
        }
        if flags & libc::O_APPEND != 0 {
            let fl = crate::io::fcntl(fd, libc::F_GETFL, 0);
            crate::io::fcntl(fd, libc::F_SETFL, (fl | libc::O_APPEND) as libc::c_long);
        }
    }
    stream
}

/// # Safety
/// As libc's `freopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: the caller's contract.
    unsafe { freopen(path, mode, stream) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fopen_modes_become_open_flags() {
        let m = |s: &str| mode_flags(s.as_bytes());
        assert_eq!(m("r"), Some(libc::O_RDONLY));
        assert_eq!(m("rb+"), Some(libc::O_RDWR));
        assert_eq!(m("w"), Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC));
        assert_eq!(
            m("a+e"),
            Some(libc::O_RDWR | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC)
        );
        assert_eq!(
            m("wx"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL)
        );
        assert_eq!(m("r,ccs=UTF-8"), Some(libc::O_RDONLY));
        assert_eq!(m("q"), None);
        assert_eq!(m(""), None);
    }
}

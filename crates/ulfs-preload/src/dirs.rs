//! Directory streams of image directories. glibc's `opendir` and
//! `readdir` reach the kernel through internal calls this library cannot
//! see, so for an image directory the whole stream is implemented here
//! over `getdents64`: `opendir`, `fdopendir`, `readdir`/`readdir64`,
//! `rewinddir`, `dirfd` and `closedir`. A stream is a `UlfsDir` the
//! program holds as an opaque `DIR *`; the registry tells ours from
//! glibc's, whose streams go to glibc.

use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use crate::fail;
use crate::fds;
use crate::io::{arg, open_image};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;

/// The `getdents64` buffer of one stream.
const BUF: usize = 32 * 1024;

struct UlfsDir {
    /// The stream's kernel descriptor (a placeholder of an image file).
    fd: c_int,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// What the last `readdir` returned (valid until the next call).
    ent: libc::dirent64,
}

/// The `DIR *`s that are ours.
static OURS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn is_ours(d: *mut libc::DIR) -> bool {
    let g = OURS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref().is_some_and(|s| s.contains(&(d as usize)))
}

/// A stream over image descriptor `fd` (which the stream then owns).
fn new_stream(fd: c_int) -> *mut libc::DIR {
    let dir = Box::new(UlfsDir {
        fd,
        buf: vec![0; BUF],
        pos: 0,
        len: 0,
        // SAFETY: a dirent64 is plain integers and bytes: zero is valid.
        ent: unsafe { std::mem::zeroed() },
    });
    let p = Box::into_raw(dir) as usize;
    let mut g = OURS.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashSet::new).insert(p);
    p as *mut libc::DIR
}

/// `opendir(3)`.
///
/// # Safety
/// As libc's `opendir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    let real_opendir = real!(opendir: unsafe extern "C" fn(*const c_char) -> *mut libc::DIR);
    // SAFETY: by opendir's contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        // SAFETY: the program's own argument.
        return unsafe { real_opendir(path) };
    };
    match route(image, libc::AT_FDCWD, p) {
        // SAFETY: the program's own argument.
        Route::Host { path: None, .. } => unsafe { real_opendir(path) },
        Route::Host {
            path: Some(abs), ..
        } => {
            let c = crate::io::c_path(abs);
            // SAFETY: a NUL-terminated path.
            unsafe { real_opendir(c.as_ptr()) }
        }
        Route::Image { dirfd, path } => {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
            let fd = open_image(image, dirfd, &path, flags, 0);
            if fd < 0 {
                std::ptr::null_mut()
            } else {
                new_stream(fd)
            }
        }
    }
}

/// `fdopendir(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    match fds::ulfs_fd(fd) {
        Some(u) => {
            let is_dir = image().map(|i| i.with(|fs| fs.fstat(u).map(|s| s.is_dir())));
            match is_dir {
                Some(Ok(true)) => new_stream(fd),
                Some(Ok(false)) => {
                    fail::<i32>(libc::ENOTDIR);
                    std::ptr::null_mut()
                }
                Some(Err(e)) => {
                    fail::<i32>(e.raw());
                    std::ptr::null_mut()
                }
                None => {
                    fail::<i32>(libc::EBADF);
                    std::ptr::null_mut()
                }
            }
        }
        None => {
            let f = real!(fdopendir: unsafe extern "C" fn(c_int) -> *mut libc::DIR);
            // SAFETY: the program's own descriptor.
            unsafe { f(fd) }
        }
    }
}

/// The next record of an image stream, or NULL at the end (errno kept)
/// or on an error (errno set).
fn next(d: &mut UlfsDir) -> *mut libc::dirent64 {
    if d.pos >= d.len {
        let Some(u) = fds::ulfs_fd(d.fd) else {
            fail::<i32>(libc::EBADF);
            return std::ptr::null_mut();
        };
        let buf = &mut d.buf;
        let r = image().map(|i| i.with(|fs| fs.getdents64(u, buf)));
        match r {
            Some(Ok(0)) => return std::ptr::null_mut(),
            Some(Ok(n)) => {
                d.pos = 0;
                d.len = n;
            }
            Some(Err(e)) => {
                fail::<i32>(e.raw());
                return std::ptr::null_mut();
            }
            None => {
                fail::<i32>(libc::EBADF);
                return std::ptr::null_mut();
            }
        }
    }
    // A linux_dirent64 record: ino u64, off i64, reclen u16, type u8, name.
    let r = &d.buf[d.pos..d.len];
    let reclen = u16::from_ne_bytes([r[16], r[17]]) as usize;
    let name = &r[19..reclen];
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
    d.ent.d_ino = u64::from_ne_bytes(r[0..8].try_into().expect("8 bytes"));
    d.ent.d_off = i64::from_ne_bytes(r[8..16].try_into().expect("8 bytes"));
    d.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    d.ent.d_type = r[18];
    let n = name.len().min(d.ent.d_name.len() - 1);
    for (dst, &src) in d.ent.d_name.iter_mut().zip(&name[..n]) {
        *dst = src as c_char;
    }
    d.ent.d_name[n] = 0;
    d.pos += reclen;
    &mut d.ent
}

/// `readdir64(3)`.
///
/// # Safety
/// As libc's `readdir64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    if !is_ours(dir) {
        let f = real!(readdir64: unsafe extern "C" fn(*mut libc::DIR) -> *mut libc::dirent64);
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: registered streams are live `UlfsDir`s, used by one thread
    // at a time as POSIX requires of a stream.
    next(unsafe { &mut *dir.cast::<UlfsDir>() })
}

/// `readdir(3)`: `struct dirent` and `struct dirent64` are one layout on
/// 64-bit Linux.
///
/// # Safety
/// As libc's `readdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir(dir: *mut libc::DIR) -> *mut libc::dirent {
    if !is_ours(dir) {
        let f = real!(readdir: unsafe extern "C" fn(*mut libc::DIR) -> *mut libc::dirent);
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: as in readdir64.
    next(unsafe { &mut *dir.cast::<UlfsDir>() }).cast()
}

/// `rewinddir(3)`.
///
/// # Safety
/// As libc's `rewinddir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rewinddir(dir: *mut libc::DIR) {
    if !is_ours(dir) {
        let f = real!(rewinddir: unsafe extern "C" fn(*mut libc::DIR));
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: as in readdir64.
    let d = unsafe { &mut *dir.cast::<UlfsDir>() };
    d.pos = 0;
    d.len = 0;
    crate::io::lseek(d.fd, 0, libc::SEEK_SET);
}

/// `dirfd(3)`.
///
/// # Safety
/// As libc's `dirfd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dirfd(dir: *mut libc::DIR) -> c_int {
    if !is_ours(dir) {
        let f = real!(dirfd: unsafe extern "C" fn(*mut libc::DIR) -> c_int);
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: as in readdir64.
    unsafe { (*dir.cast::<UlfsDir>()).fd }
}

/// `closedir(3)`.
///
/// # Safety
/// As libc's `closedir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dir: *mut libc::DIR) -> c_int {
    let ours = {
        let mut g = OURS.lock().unwrap_or_else(|e| e.into_inner());
        g.as_mut().is_some_and(|s| s.remove(&(dir as usize)))
    };
    if !ours {
        let f = real!(closedir: unsafe extern "C" fn(*mut libc::DIR) -> c_int);
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: it was registered, so it is a `Box<UlfsDir>` we made; it is
    // no longer registered, so nothing else frees it.
    let d = unsafe { Box::from_raw(dir.cast::<UlfsDir>()) };
    crate::io::close(d.fd)
}

//! Directory streams of image directories. glibc's `opendir` and
//! `readdir` reach the kernel through internal calls this library cannot
//! see, so for an image directory the whole stream is implemented here
//! over `getdents64`: `opendir`, `fdopendir`, `readdir`/`readdir64` (and
//! their `_r` forms), `telldir`, `seekdir`, `rewinddir`, `dirfd`,
//! `closedir`, and `scandir`/`scandir64`/`scandirat` on top. A stream is a
//! `UlfsDir` the program holds as an opaque `DIR *`; the registry tells
//! ours from glibc's, whose streams go to glibc.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void};
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
    /// `telldir`: the cookie of the next entry to return.
    at: i64,
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
        at: 0,
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
    if let Some(u) = fds::proc_fd_path(p) {
        // A descriptor's /proc/self/fd link: the directory open as it.
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let fd = crate::io::reopen_image(image, u, flags);
        return if fd < 0 {
            std::ptr::null_mut()
        } else {
            new_stream(fd)
        };
    }
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
    d.at = d.ent.d_off;
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
    seek(d, 0);
}

fn seek(d: &mut UlfsDir, at: i64) {
    d.pos = 0;
    d.len = 0;
    d.at = at;
    crate::io::lseek(d.fd, at, libc::SEEK_SET);
}

/// `telldir(3)`.
///
/// # Safety
/// As libc's `telldir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn telldir(dir: *mut libc::DIR) -> libc::c_long {
    if !is_ours(dir) {
        let f = real!(telldir: unsafe extern "C" fn(*mut libc::DIR) -> libc::c_long);
        // SAFETY: the program's own stream.
        return unsafe { f(dir) };
    }
    // SAFETY: as in readdir64.
    unsafe { (*dir.cast::<UlfsDir>()).at }
}

/// `seekdir(3)`: back to a position `telldir` gave.
///
/// # Safety
/// As libc's `seekdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn seekdir(dir: *mut libc::DIR, loc: libc::c_long) {
    if !is_ours(dir) {
        let f = real!(seekdir: unsafe extern "C" fn(*mut libc::DIR, libc::c_long));
        // SAFETY: the program's own stream.
        return unsafe { f(dir, loc) };
    }
    // SAFETY: as in readdir64.
    seek(unsafe { &mut *dir.cast::<UlfsDir>() }, loc);
}

/// `readdir64_r(3)`: the next entry copied into `entry`; `*result` NULL
/// at the end. Returns an error number.
///
/// # Safety
/// As libc's `readdir64_r`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64_r(
    dir: *mut libc::DIR,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    if !is_ours(dir) {
        let f = real!(readdir64_r: unsafe extern "C" fn(*mut libc::DIR, *mut libc::dirent64, *mut *mut libc::dirent64) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(dir, entry, result) };
    }
    let saved = crate::errno();
    fail::<c_int>(0);
    // SAFETY: as in readdir64.
    let e = next(unsafe { &mut *dir.cast::<UlfsDir>() });
    let err = crate::errno();
    fail::<c_int>(saved);
    // SAFETY: `entry` and `result` are writable by the contract.
    unsafe {
        if e.is_null() {
            *result = std::ptr::null_mut();
            return err;
        }
        entry.write(*e);
        *result = entry;
    }
    0
}

/// `readdir_r(3)`: as `readdir64_r`.
///
/// # Safety
/// As libc's `readdir_r`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir_r(
    dir: *mut libc::DIR,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    if !is_ours(dir) {
        let f = real!(readdir_r: unsafe extern "C" fn(*mut libc::DIR, *mut libc::dirent64, *mut *mut libc::dirent64) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(dir, entry, result) };
    }
    // SAFETY: the caller's contract.
    unsafe { readdir64_r(dir, entry, result) }
}

type Filter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
type Compar =
    Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// `scandir` over an image directory stream: the entries `filter`
/// accepts, each in its own malloc'd copy, sorted with `compar`.
fn scan(
    dir: *mut libc::DIR,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    let mut got: Vec<*mut libc::dirent64> = Vec::new();
    let free_all = |got: &[*mut libc::dirent64]| {
        for &e in got {
            // SAFETY: each was malloc'd below.
            unsafe { libc::free(e.cast()) };
        }
    };
    fail::<c_int>(0);
    loop {
        // SAFETY: `dir` is one of our live streams.
        let e = next(unsafe { &mut *dir.cast::<UlfsDir>() });
        if e.is_null() {
            break;
        }
        // SAFETY: `filter` is the program's function, given a live entry.
        if let Some(f) = filter
            && unsafe { f(e) } == 0
        {
            continue;
        }
        let size = std::mem::size_of::<libc::dirent64>();
        // SAFETY: malloc of a positive size.
        let copy = unsafe { libc::malloc(size) }.cast::<libc::dirent64>();
        if copy.is_null() {
            free_all(&got);
            return fail(libc::ENOMEM);
        }
        // SAFETY: `copy` holds one dirent64; `e` is a live one.
        unsafe { copy.write(*e) };
        got.push(copy);
    }
    let err = crate::errno();
    if err != 0 {
        free_all(&got);
        return fail(err);
    }
    if let Some(c) = compar {
        // The program's comparison, through qsort as glibc's scandir does.
        // SAFETY: `got` holds `len` pointers; `c` compares two of them.
        unsafe {
            libc::qsort(
                got.as_mut_ptr().cast(),
                got.len(),
                std::mem::size_of::<*mut libc::dirent64>(),
                Some(std::mem::transmute::<
                    unsafe extern "C" fn(
                        *mut *const libc::dirent64,
                        *mut *const libc::dirent64,
                    ) -> c_int,
                    unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
                >(c)),
            )
        };
    }
    let n = got.len();
    // SAFETY: malloc for the array the caller frees.
    let arr = unsafe { libc::malloc(n.max(1) * std::mem::size_of::<*mut libc::dirent64>()) }
        .cast::<*mut libc::dirent64>();
    if arr.is_null() {
        free_all(&got);
        return fail(libc::ENOMEM);
    }
    // SAFETY: `arr` holds `n` pointers; `list` is writable by the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(got.as_ptr(), arr, n);
        *list = arr;
    }
    n as c_int
}

/// `scandirat(3)`; `scandir` is this with AT_FDCWD.
///
/// # Safety
/// As libc's `scandirat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandirat(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: by the contract.
    let routed = match (image(), unsafe { arg(path) }) {
        (Some(image), Some(p)) => match route(image, dirfd, p) {
            Route::Image { dirfd, path } => Some((image, dirfd, path)),
            Route::Host { .. } => None,
        },
        _ => None,
    };
    let Some((image, d, p)) = routed else {
        let f = real!(scandirat: unsafe extern "C" fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(dirfd, path, list, filter, compar) };
    };
    let fd = open_image(
        image,
        d,
        &p,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        return -1;
    }
    let dir = new_stream(fd);
    let n = scan(dir, list, filter, compar);
    let saved = crate::errno();
    // SAFETY: the stream was made above.
    unsafe { closedir(dir) };
    fail::<c_int>(saved);
    n
}

/// `scandir(3)`.
///
/// # Safety
/// As libc's `scandir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandir(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { scandir_route(path) } {
        // SAFETY: the caller's contract.
        true => unsafe { scandirat(libc::AT_FDCWD, path, list, filter, compar) },
        false => {
            let f = real!(scandir: unsafe extern "C" fn(*const c_char, *mut *mut *mut libc::dirent64, Filter, Compar) -> c_int);
            // SAFETY: the program's own arguments.
            unsafe { f(path, list, filter, compar) }
        }
    }
}

/// `scandir64(3)`: `scandir`.
///
/// # Safety
/// As libc's `scandir64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandir64(
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { scandir(path, list, filter, compar) }
}

/// Whether `path` is an image directory's (so scandir is served here).
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn scandir_route(path: *const c_char) -> bool {
    // SAFETY: by the contract.
    match (image(), unsafe { arg(path) }) {
        (Some(image), Some(p)) => matches!(route(image, libc::AT_FDCWD, p), Route::Image { .. }),
        _ => false,
    }
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

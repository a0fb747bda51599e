//! The standard streams follow descriptors 0-2 onto image files.
//!
//! glibc's `stdin`, `stdout` and `stderr` read and write descriptors 0-2
//! through internal calls this library cannot see, which would reach the
//! kernel's placeholder and fail with EBADF. So while descriptor 0, 1 or
//! 2 stands for an image file, its stream is a cookie stream (`stdio.rs`)
//! that goes through this library's own `read` and `write`, and when the
//! descriptor leaves the image the original stream comes back. The swap
//! replaces the `stdin`/`stdout`/`stderr` variables, which every object
//! of the program reads, glibc's `printf` and `puts` included. That is
//! what a shell needs for `echo x > /ulfs/f` (it moves the file onto
//! descriptor 1 and runs its builtin in the same process) and a program
//! started with an image file as a standard stream (`ls > /ulfs/out`,
//! `inherit.rs`).
//!
//! A standard stream on a pipe or a socket becomes a cookie stream when
//! the process first mounts the image (`on_first_mount`), so that its
//! stdio takes turns on the image with the other processes of a pipeline.
//! glibc's cookie streams have no wide-character side: `wide.rs` serves
//! the character and string calls on them; the formatted ones
//! (`wprintf`) fail there, so a stream already used for wide characters
//! is left as it is, and a process that never touches the image keeps
//! glibc's streams.
//!
//! Output the old stream holds is flushed before the descriptor changes
//! (to where it was going); the kernel would let it go to the new file,
//! which only a program that forgets to flush before `dup2` notices.
//! Code that saved `stdout`'s value before a swap keeps the original
//! stream.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use crate::fds;

unsafe extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Where libc keeps the stream of standard descriptor `fd` (0-2).
fn variable(fd: c_int) -> *mut *mut libc::FILE {
    match fd {
        0 => &raw mut stdin,
        1 => &raw mut stdout,
        _ => &raw mut stderr,
    }
}

/// A standard stream's swap: the original stream and the cookie stream
/// standing in for it (as addresses: they belong to libc).
#[derive(Clone, Copy)]
struct Swap {
    original: usize,
    cookie: usize,
}

fn swaps() -> MutexGuard<'static, [Option<Swap>; 3]> {
    static SWAPS: Mutex<[Option<Swap>; 3]> = Mutex::new([None, None, None]);
    SWAPS.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The standard descriptor whose cookie stream this thread is closing
    /// through `fclose` (its close must not flush or free it again), or
    /// -1.
    static CLOSING: Cell<c_int> = const { Cell::new(-1) };
    /// The standard descriptor whose cookie stream this thread is freeing
    /// after the descriptor left the image (its leftovers go nowhere, and
    /// the descriptor is not closed), or -1.
    static DETACHING: Cell<c_int> = const { Cell::new(-1) };
}

fn is_std(fd: c_int) -> bool {
    (0..=2).contains(&fd)
}

/// Before descriptor `fd` changes hands (a `dup2` onto it, a `close` of
/// it) where an image file is involved: its stream's buffered output goes
/// to where it was going.
pub fn before_change(fd: c_int) {
    if !(1..=2).contains(&fd) || CLOSING.get() == fd {
        return;
    }
    // SAFETY: reading libc's stream variable; flushing a live stream.
    unsafe { libc::fflush(*variable(fd)) };
}

/// After descriptor `fd` may have changed: its stream follows it onto or
/// off an image file.
pub fn follow(fd: c_int) {
    if !is_std(fd) {
        return;
    }
    let mut swaps = swaps();
    let slot = &mut swaps[fd as usize];
    let image = fds::is_image(fd);
    // A cookie stream stays while the descriptor is an image file, or
    // still a pipe or a socket (`on_first_mount`).
    let keep = image || (slot.is_some() && is_pipe_or_socket(fd));
    match (image, keep, *slot) {
        (true, _, None) => *slot = install(fd),
        (_, false, Some(swap)) => {
            uninstall(fd, swap);
            *slot = None;
        }
        _ => {}
    }
}

fn install(fd: c_int) -> Option<Swap> {
    let mode = if fd == 0 { c"r" } else { c"w" };
    let cookie = crate::stdio::cookie_stream(fd, mode.as_ptr(), std_write, std_close);
    if cookie.is_null() {
        return None;
    }
    let (buffering, size) = match fd {
        2 => (libc::_IONBF, 0),
        // glibc's buffer for a file, a pipe or a socket: a page.
        _ => (libc::_IOFBF, 4096),
    };
    // SAFETY: a stream just made, not yet used; glibc allocates the
    // buffer.
    unsafe { libc::setvbuf(cookie, std::ptr::null_mut(), buffering, size) };
    // SAFETY: libc's variable, swapped while no stream call of this
    // library is in progress on it.
    let original = unsafe { std::mem::replace(&mut *variable(fd), cookie) };
    Some(Swap {
        original: original as usize,
        cookie: cookie as usize,
    })
}

fn uninstall(fd: c_int, swap: Swap) {
    // SAFETY: libc's variable gets its own stream back.
    unsafe { *variable(fd) = swap.original as *mut libc::FILE };
    if CLOSING.get() == fd {
        // The program's fclose is freeing the cookie stream.
        return;
    }
    DETACHING.set(fd);
    let cookie = swap.cookie as *mut libc::FILE;
    crate::stdio::forget_stream(cookie);
    // SAFETY: the cookie stream this module made, closed once.
    unsafe { libc::fclose(cookie) };
    DETACHING.set(-1);
}

unsafe extern "C" fn std_write(
    cookie: *mut libc::c_void,
    buf: *const libc::c_char,
    n: libc::size_t,
) -> libc::ssize_t {
    if DETACHING.get() == cookie as usize as c_int {
        return n as libc::ssize_t;
    }
    // SAFETY: glibc hands a buffer valid for `n` bytes.
    unsafe { crate::stdio::cookie_write(cookie, buf, n) }
}

unsafe extern "C" fn std_close(cookie: *mut libc::c_void) -> c_int {
    let fd = cookie as usize as c_int;
    if DETACHING.get() == fd {
        return 0;
    }
    // The program closes its standard stream: the descriptor goes too,
    // and the original stream comes back.
    crate::stdio::forget_streams_of(fd);
    CLOSING.set(fd);
    let r = crate::io::close(fd);
    CLOSING.set(-1);
    r
}

/// glibc's `struct _IO_FILE` as far as the read buffer (its public
/// layout, `<bits/types/struct_FILE.h>`).
#[repr(C)]
struct FilePrefix {
    flags: c_int,
    read_ptr: *mut libc::c_char,
    read_end: *mut libc::c_char,
}

unsafe extern "C" {
    fn fwide(f: *mut libc::FILE, mode: c_int) -> c_int;
}

fn is_pipe_or_socket(fd: c_int) -> bool {
    let fstat = crate::real::real!(fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int);
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writing.
    let ok = unsafe { fstat(fd, &mut st) } == 0;
    ok && matches!(st.st_mode & libc::S_IFMT, libc::S_IFIFO | libc::S_IFSOCK)
}

/// When the process first mounts the image (it holds it from now on,
/// with the file system's lock held): a standard stream on a pipe or a
/// socket becomes a cookie stream too, so that stdio on it takes turns on
/// the image (`turns.rs`) rather than block on the pipe holding it
/// (`grep x /ulfs/a | tee /ulfs/b`). Not a stream already used for wide
/// characters (cookie streams have none), nor a standard input with read
/// data still buffered; output buffered so far is flushed first. A
/// process that never touches the image keeps glibc's streams.
pub fn on_first_mount() {
    let mut swaps = swaps();
    for fd in 0..=2 {
        if swaps[fd as usize].is_some() || !is_pipe_or_socket(fd) {
            continue;
        }
        // SAFETY: libc's live stream.
        let original = unsafe { *variable(fd) };
        // SAFETY: asking a live stream's orientation changes nothing.
        if original.is_null() || unsafe { fwide(original, 0) } > 0 {
            continue;
        }
        if fd == 0 {
            // SAFETY: the public prefix of glibc's FILE.
            let p = unsafe { &*original.cast::<FilePrefix>() };
            if p.read_ptr != p.read_end {
                continue;
            }
        } else {
            // SAFETY: a live stream; glibc writes with its own call.
            unsafe { libc::fflush(original) };
        }
        // SAFETY: the public prefix of glibc's FILE.
        let flags = unsafe { (*original.cast::<FilePrefix>()).flags };
        swaps[fd as usize] = install(fd);
        if let Some(swap) = swaps[fd as usize] {
            keep_buffering(flags, swap.cookie as *mut libc::FILE);
        }
    }
}

/// The buffering the program chose for the original stream (glibc's
/// `_IO_UNBUFFERED` and `_IO_LINE_BUF` flags), on the cookie stream.
fn keep_buffering(flags: c_int, cookie: *mut libc::FILE) {
    const UNBUFFERED: c_int = 0x2;
    const LINE_BUF: c_int = 0x200;
    let mode = if flags & UNBUFFERED != 0 {
        libc::_IONBF
    } else if flags & LINE_BUF != 0 {
        libc::_IOLBF
    } else {
        return;
    };
    // SAFETY: a stream just made, not yet used.
    unsafe {
        libc::setvbuf(
            cookie,
            std::ptr::null_mut(),
            mode,
            if mode == libc::_IONBF { 0 } else { 4096 },
        )
    };
}

/// The standard descriptor whose stream `stream` is (the one in libc's
/// variable now, or the original a cookie stream stands in for).
pub fn std_fd_of(stream: *mut libc::FILE) -> Option<c_int> {
    let swaps = swaps();
    (0..=2).find(|&fd| {
        // SAFETY: reading libc's variable.
        let now = unsafe { *variable(fd) };
        now == stream || swaps[fd as usize].is_some_and(|s| s.original == stream as usize)
    })
}

/// `freopen` of standard stream `fd` onto an image file `opened` (a
/// descriptor it just opened): the file moves onto the standard
/// descriptor, and the stream that now serves it is returned.
pub fn reopen_onto(fd: c_int, opened: c_int) -> *mut libc::FILE {
    let moved = crate::io::dup2(opened, fd);
    crate::io::close(opened);
    if moved < 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: reading libc's variable.
    unsafe { *variable(fd) }
}

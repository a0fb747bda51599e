//! `popen` and `pclose`. glibc's `popen` stream reads and writes its pipe
//! with internal calls: a program that holds the image (it wrote an image
//! file since the `popen`) and then blocks on the stream would keep the
//! image from its command, which may need it to make the output the
//! program waits for. So the program gets a cookie stream over the pipe
//! whose reads and writes are this library's, which take turns on the
//! image (`turns.rs`); glibc's stream is kept for `pclose`, which waits
//! for the command.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{LazyLock, Mutex, MutexGuard};

use libc::FILE;

use crate::real::real;

/// The program's stream -> glibc's `popen` stream behind it.
fn opened() -> MutexGuard<'static, HashMap<usize, usize>> {
    static OPENED: LazyLock<Mutex<HashMap<usize, usize>>> = LazyLock::new(Default::default);
    OPENED.lock().unwrap_or_else(|e| e.into_inner())
}

/// `popen(3)`: the image is let go of first (the command may need it), as
/// for `posix_spawn`.
///
/// # Safety
/// As libc's `popen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    crate::process::before_shell();
    let env = crate::process::shell_token();
    let f = real!(popen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE);
    // SAFETY: the program's own arguments.
    let glibc = unsafe { f(command, mode) };
    if glibc.is_null()
        && let Some(env) = env
    {
        env.failed();
        return glibc;
    }
    drop(env);
    if glibc.is_null() || crate::state::image().is_none() {
        return glibc;
    }
    let fileno = real!(fileno: unsafe extern "C" fn(*mut FILE) -> c_int);
    // SAFETY: the stream just made.
    let fd = unsafe { fileno(glibc) };
    // SAFETY: a NUL-terminated mode by the contract.
    let reading = unsafe { *mode } == b'r' as c_char;
    let ours = crate::stdio::host_stream(fd, if reading { c"r" } else { c"w" }.as_ptr());
    if ours.is_null() {
        return glibc;
    }
    opened().insert(ours as usize, glibc as usize);
    ours
}

/// `pclose(3)`: for a stream of `popen` above, its buffered output is
/// written, then glibc's stream closes and the command is waited for.
///
/// # Safety
/// As libc's `pclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pclose(stream: *mut FILE) -> c_int {
    let f = real!(pclose: unsafe extern "C" fn(*mut FILE) -> c_int);
    let Some(glibc) = opened().remove(&(stream as usize)) else {
        // SAFETY: the program's own stream.
        return unsafe { f(stream) };
    };
    crate::stdio::forget_stream(stream);
    // SAFETY: the cookie stream `popen` made, closed once: it flushes what
    // it holds (through the library's write) and leaves the pipe open.
    unsafe { libc::fclose(stream) };
    // SAFETY: glibc's own popen stream.
    unsafe { f(glibc as *mut FILE) }
}

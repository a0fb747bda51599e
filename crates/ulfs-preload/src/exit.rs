//! Committing the image when the program ends: through `exit` and a return
//! from `main` (an `atexit` handler registered at load, before `main`, so
//! it runs after every handler the program registers), and through
//! `_exit` / `_Exit`, which this library defines. On `exit`, stdio
//! buffers are flushed first (libc flushes them only after the last
//! handler, which would be too late for streams on image files); `_exit`
//! flushes none, as libc's does not (a child of `fork` calling `_exit`
//! must not write out the parent's buffered output a second time). A
//! program killed by a signal leaves its last commit; the journal replays
//! it at the next mount.

use crate::real::real;

extern "C" fn at_exit() {
    if crate::state::image().is_some() {
        // SAFETY: fflush(NULL) flushes every open stream.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        commit();
    }
}

/// Writes mappings back and commits the image for good.
fn commit() {
    if let Some(image) = crate::state::image() {
        crate::mmap::write_back_all();
        image.close();
    }
}

/// Registers the exit handler (once, at load).
pub fn install() {
    if crate::state::image().is_some() {
        // SAFETY: registers a plain function with no arguments.
        unsafe { libc::atexit(at_exit) };
    }
}

/// `_exit(2)`: commits the image first.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    commit();
    let real_exit = real!(_exit: unsafe extern "C" fn(libc::c_int) -> !);
    // SAFETY: libc's _exit, with the program's status.
    unsafe { real_exit(status) }
}

/// `_Exit(3)`: as `_exit`.
#[unsafe(no_mangle)]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    _exit(status)
}

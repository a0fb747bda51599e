//! `libulfs_preload.so`: the library `ulfs run` puts in `LD_PRELOAD` so an
//! unmodified, dynamically linked program reads and writes an image's
//! files in its own process. It defines libc's file functions (`open`,
//! `read`, `stat`, `opendir`, ...); a call naming a path under the prefix
//! (or a descriptor of an image file) is served by `ulfs::Fs` as a plain
//! function call, everything else goes on to libc unchanged.
//!
//! - `state`: the image mounted at load time from the environment, and the
//!   program's working directory; committed at exit (`exit.rs`);
//! - `route`: which side serves a path;
//! - `fds`: image descriptors as real kernel descriptor numbers;
//! - `real`: libc's own definitions, for everything not ours;
//! - `io`, `paths`, `dirs`, `stdio`, `xattr`: the interposed calls on
//!   descriptors, on paths, on directory streams, on stdio streams, and
//!   for extended attributes;
//! - `process`: `fork`, `vfork` and the `exec` calls, which hand the image
//!   over between processes (one writer at a time);
//! - `inherit`: open image files handed over to the next process that
//!   mounts the image (across `exec` through the environment), with the
//!   offsets they share;
//! - `shared`: the memory every process of a run maps (shared offsets,
//!   who waits for the image);
//! - `turns`: a process holding the image never blocks on a host
//!   descriptor while another waits for it;
//! - `waits`: nor in `wait`, `poll`, `select`, `epoll_wait` or a sleep;
//! - `cond_waits`: nor on a condition variable;
//! - `std_streams`: `stdin`/`stdout`/`stderr` follow descriptors 0-2 onto
//!   image files;
//! - `wide`: wide-character stdio on streams of image files;
//! - `variadic`: `dprintf` and the formatted wide output calls, whose
//!   variadic bodies are C (`variadic.c`);
//! - `tempfiles`: `mkstemp` and friends, `mkdtemp`, for image templates;
//! - `transfer`: `copy_file_range` and `sendfile` with an image file on
//!   either side;
//! - `ftw`: `nftw` and `ftw` over image trees;
//! - `fts`: glibc's `fts_open` and friends over image trees;
//! - `fsinfo`, `resolve`: `statfs`/`statvfs`, and `realpath`, for image
//!   paths;
//! - `locks`: record locks and `flock` on image files, emulated in the
//!   process; `lock_waits`: a blocking request's wait, which no signal
//!   slips past;
//! - `mmap`: mappings of image files, as filled anonymous memory (shared
//!   writable ones written back);
//! - `exit`: committing the image when the program ends.
//!
//! What is covered and what is not: docs/RUN.md.

mod real;

mod cond_waits;
mod credentials;
mod dirs;
mod exit;
mod fds;
mod fsinfo;
mod fts;
mod ftw;
mod inherit;
mod io;
mod lock_waits;
mod locks;
mod mmap;
mod owner;
mod paths;
mod popen_streams;
mod process;
mod resolve;
mod route;
mod served;
mod shared;
mod spawn_actions;
mod state;
mod std_streams;
mod stdio;
mod tempfiles;
mod transfer;
mod turns;
mod umask;
mod variadic;
mod waits;
mod wide;
mod xattr;

/// Sets errno and returns -1, the libc convention for a failed call.
fn fail<T: From<i8>>(e: i32) -> T {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
    T::from(-1)
}

/// Sets this thread's errno.
fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// This thread's errno.
fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// A ulfs result as libc returns it: the value, or -1 with errno set.
fn ret<T: From<i8>>(r: ulfs::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(e.raw()),
    }
}

/// Writes a message to standard error without going through anything this
/// library interposes.
fn warn(msg: &str) {
    let mut line = Vec::with_capacity(msg.len() + 1);
    line.extend_from_slice(msg.as_bytes());
    line.push(b'\n');
    // SAFETY: a valid buffer of that length; descriptor 2 may be closed,
    // which only makes the write fail.
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

/// Reports a condition the program cannot run under, and exits with 127
/// (as a shell does for a command that cannot be run).
fn fatal(parts: &[&str]) -> ! {
    warn(&parts.concat());
    // SAFETY: ends the process. A raw system call: this library defines
    // `_exit` itself, to commit the image first.
    unsafe { libc::syscall(libc::SYS_exit_group, 127) };
    unreachable!("exit_group returned")
}

/// Runs when the dynamic linker loads the library, before the program's
/// `main`.
extern "C" fn load() {
    state::init();
    if state::image().is_some() {
        // Served, nothing is handed over between processes: no shared
        // table of offsets, no pending descriptors.
        if served::socket().is_none() {
            shared::init();
            inherit::init();
        }
        for fd in 0..=2 {
            std_streams::follow(fd);
        }
    }
    process::record_env();
    exit::install();
}

#[used]
#[unsafe(link_section = ".init_array")]
static LOAD: extern "C" fn() = load;

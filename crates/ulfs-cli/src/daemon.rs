//! Serving in the background, as `ulfs mount` and `ulfs serve` do by
//! default: the command returns once the service is in place, or with the
//! reason it could not be, and a server process goes on.
//!
//! A fork before anything is opened: the child sets up the service and
//! tells the parent over a pipe ("ok", or the error), then detaches from
//! the terminal; so every failure (a bad image, one in use, a busy mount
//! point or socket) reaches the user with the command's exit status.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// Forks a server running `serve`, which calls `ready` once it serves;
/// returns when it said so, or with what it reported instead.
pub fn daemonize(serve: impl FnOnce(&mut dyn FnMut()) -> Result<(), String>) -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-int array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nobody.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the command is single-threaded here (nothing has started a
    // thread: argument parsing only), so the child may go on running
    // ordinary Rust code.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(read_end);
            let code = serve_in_child(serve, std::fs::File::from(write_end));
            std::process::exit(code)
        }
        _child => {
            drop(write_end);
            let mut said = String::new();
            let _ = std::fs::File::from(read_end).read_to_string(&mut said);
            match said.as_str() {
                "ok" => Ok(()),
                "" => Err("the server ended without a word".into()),
                why => Err(why.to_owned()),
            }
        }
    }
}

/// The server: a session of its own, detached from the terminal once it
/// serves; its errors go to the parent until then.
fn serve_in_child(
    serve: impl FnOnce(&mut dyn FnMut()) -> Result<(), String>,
    pipe: std::fs::File,
) -> i32 {
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe { libc::setsid() };
    let mut pipe = Some(pipe);
    let mut ready = || {
        // Closed once written: the parent reads to the end.
        if let Some(mut p) = pipe.take() {
            let _ = p.write_all(b"ok");
        }
        detach();
    };
    let served = serve(&mut ready);
    match served {
        Ok(()) => 0,
        Err(why) => {
            if let Some(mut p) = pipe.take() {
                let _ = p.write_all(why.as_bytes());
            }
            1
        }
    }
}

/// Standard streams to /dev/null and the working directory to `/`, so
/// the server holds no terminal and no directory busy.
fn detach() {
    let _ = std::env::set_current_dir("/");
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this
            // process owns; /dev/null stays open for the call.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

//! Taking turns on the image with the other processes of a run. One
//! process holds the image at a time (`state.rs`); the others wait for it.
//! So that a pipeline whose processes all use the image does not wait on
//! itself (`cat /ulfs/a | sort > /ulfs/b`: `cat` fills the pipe while the
//! shell's child waits for the image to open `b` before it becomes
//! `sort`), a process that holds the image never blocks on a host
//! descriptor (a pipe, a socket, a terminal) while another process waits:
//! before a read or write that could block, it polls the descriptor, and
//! while it is not ready checks every `RECHECK` whether someone waits
//! (`shared.rs`); if so, it lets go of the image first. A process that
//! holds nothing does the call straight away.
//!
//! Writes of more than `CHUNK` bytes to a descriptor that may block part
//! way (not a regular file) go in pieces, each after the descriptor is
//! ready, so that none blocks; a pipe's atomic writes (`PIPE_BUF`, 4 KiB)
//! stay whole.
//!
//! A write to a pipe nobody reads any more commits the image before its
//! SIGPIPE is delivered: the signal ends most programs (a writer in
//! `... | head -1`) before their exit could commit, and the image must
//! keep what they wrote, as a kernel file system would.
//!
//! This covers the program's own `read`, `write`, `readv` and `writev`,
//! and the standard streams' stdio, which goes through them
//! (`std_streams.rs`). A `writev` of more than a pipe holds is not split.

use std::ffi::c_void;

use libc::{c_int, size_t, ssize_t};

/// How often a process holding the image, waiting for a host descriptor,
/// looks for a process waiting for the image.
pub const RECHECK_MS: c_int = 20;

/// The largest piece of a write that cannot block once the descriptor is
/// ready (a pipe takes `PIPE_BUF` bytes then).
const CHUNK: usize = libc::PIPE_BUF;

/// Lets go of the image for the process waiting for it.
pub fn give_way() {
    if let Some(i) = crate::state::image() {
        i.hand_over_now();
    }
}

/// Commits the image's running transaction.
fn commit_now() {
    if let Some(i) = crate::state::image() {
        let _ = i.with_no_turn(|fs| fs.sync());
    }
}

/// Returns once `fd` is ready for `events` (or polling it fails), or once
/// this process no longer holds the image, having let go of it if another
/// process waits meanwhile.
/// `false` when a signal interrupted the wait and the program has a
/// handler that does not restart calls: the call must then fail with
/// EINTR, as it would have. (Which signal came is not known here; a
/// handler installed with `SA_RESTART`, or none, lets the wait go on.)
#[must_use]
fn wait_ready(fd: c_int, events: libc::c_short) -> bool {
    let errno = crate::errno();
    let go_on = wait_ready_inner(fd, events);
    crate::set_errno(errno);
    go_on
}

/// Whether a blocking call on `fd` returns at once (`O_NONBLOCK`).
fn non_blocking(fd: c_int) -> bool {
    let fcntl =
        crate::real::real!(fcntl: unsafe extern "C" fn(c_int, c_int, libc::c_long) -> c_int);
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Whether some signal has a handler that does not restart calls.
pub fn a_handler_interrupts() -> bool {
    (1..libc::SIGRTMAX()).any(handler_interrupts)
}

/// Whether `sig` has a handler that does not restart calls.
pub fn handler_interrupts(sig: c_int) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; querying only.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut act) } == 0;
    ok && act.sa_sigaction != libc::SIG_DFL
        && act.sa_sigaction != libc::SIG_IGN
        && act.sa_flags & libc::SA_RESTART == 0
}

fn wait_ready_inner(fd: c_int, events: libc::c_short) -> bool {
    if crate::fds::inside_library() || non_blocking(fd) {
        return true;
    }
    loop {
        if !crate::state::held_here() {
            return true;
        }
        if crate::shared::wanted() {
            give_way();
            return true;
        }
        // The descriptor, and the run's wake-up eventfd, which a process
        // starting to wait for the image signals.
        let wake = crate::shared::wake_fd().unwrap_or(-1);
        let mut p = [
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let poll = crate::real::real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
        // SAFETY: two valid pollfds (a negative fd is skipped).
        let r = unsafe { poll(p.as_mut_ptr(), 2, RECHECK_MS) };
        if p[1].revents & libc::POLLIN != 0 {
            crate::shared::drain_wake();
        }
        if r < 0 && crate::errno() == libc::EINTR {
            if a_handler_interrupts() {
                return false;
            }
            continue;
        }
        if r < 0 || p[0].revents != 0 {
            // Ready, or an error the call itself will report.
            return true;
        }
    }
}

/// Before a read of host descriptor `fd`: `false` when the read must
/// fail with EINTR (see `wait_ready`).
#[inline]
pub fn before_read(fd: c_int) -> bool {
    !crate::state::held_here() || wait_ready(fd, libc::POLLIN)
}

/// A write of a host descriptor while this process holds the image:
/// SIGPIPE is held back during the call, and if the call meets a pipe
/// nobody reads (EPIPE) the image is committed before the signal is let
/// through (it is delivered when the mask is restored, unless the program
/// blocks or ignores it itself).
fn guarded(call: impl FnOnce() -> ssize_t) -> ssize_t {
    // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset.
    let (mut pipe, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigsets; this thread's mask only.
    let masked = unsafe {
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) == 0
    };
    let r = call();
    let err = crate::errno();
    if r < 0 && err == libc::EPIPE {
        commit_now();
    }
    if masked {
        // SAFETY: restoring this thread's own mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    crate::set_errno(err);
    r
}

/// A write of host descriptor `fd` that is not split (`writev`), done by
/// `call`.
#[inline]
pub fn write_whole(fd: c_int, call: impl FnOnce() -> ssize_t) -> ssize_t {
    if !crate::state::held_here() {
        return call();
    }
    if !wait_ready(fd, libc::POLLOUT) {
        crate::set_errno(libc::EINTR);
        return -1;
    }
    if crate::state::held_here() {
        guarded(call)
    } else {
        call()
    }
}

/// Whether a write to `fd` could block part way (not a regular file or a
/// block device, whose writes never wait on another process).
fn may_block_part_way(fd: c_int) -> bool {
    let fstat = crate::real::real!(fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int);
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writing.
    if unsafe { fstat(fd, &mut st) } != 0 {
        return false;
    }
    !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFBLK)
}

type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;

/// `write` of host descriptor `fd` with libc's `real`, taking turns.
///
/// # Safety
/// As `write`: `buf` valid for `n` bytes.
pub unsafe fn write(fd: c_int, buf: *const c_void, n: size_t, real: WriteFn) -> ssize_t {
    if !crate::state::held_here() {
        // SAFETY: the caller's contract.
        return unsafe { real(fd, buf, n) };
    }
    if n <= CHUNK || non_blocking(fd) || !may_block_part_way(fd) {
        // SAFETY: the caller's contract.
        return write_whole(fd, || unsafe { real(fd, buf, n) });
    }
    let mut done = 0usize;
    while done < n {
        if crate::state::held_here() && !wait_ready(fd, libc::POLLOUT) {
            if done > 0 {
                break;
            }
            crate::set_errno(libc::EINTR);
            return -1;
        }
        // Still holding the image: a piece the ready descriptor takes
        // without blocking; else the rest at once.
        let holding = crate::state::held_here();
        let piece = if holding {
            CHUNK.min(n - done)
        } else {
            n - done
        };
        // SAFETY: `buf + done` is valid for `n - done` bytes.
        let at = unsafe { buf.cast::<u8>().add(done).cast() };
        // SAFETY: as above.
        let call = || unsafe { real(fd, at, piece) };
        let r = if holding { guarded(call) } else { call() };
        if r < 0 {
            return if done > 0 { done as ssize_t } else { r };
        }
        done += r as usize;
        if (r as usize) < piece && !holding {
            // Interrupted part way, as the kernel's write may be.
            break;
        }
    }
    done as ssize_t
}

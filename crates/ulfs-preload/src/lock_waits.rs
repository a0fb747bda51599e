//! How a blocking lock request (`F_SETLKW`, `F_OFD_SETLKW`, `flock`
//! without `LOCK_NB`) waits without losing a signal. Linux ends such a
//! wait with EINTR when a handler that does not restart calls runs; the
//! emulation here tries the lock, sleeps a few milliseconds, and tries
//! again, so a signal that came while it was trying (or waiting for its
//! turn on the image) ran its handler outside the sleep and went unseen:
//! the request waited on, for ever when the holder was waiting for it
//! (found as a hung test: a child's `F_SETLKW` with a 200 ms alarm, its
//! parent holding the lock and waiting for the child).
//!
//! So the program's signals are held back (blocked) for the whole
//! request and let in only inside the sleep, atomically (`ppoll` with the
//! program's own mask): one that came at any moment is delivered there,
//! and the sleep says EINTR. Signals a fault raises (SIGSEGV, SIGBUS,
//! SIGFPE, SIGILL, SIGTRAP, SIGSYS) are never held back: blocked, a fault
//! would kill the process instead of reaching its handler.

use std::ffi::c_int;

/// The calling thread's signal mask as it was before the request; put
/// back when dropped.
pub struct HeldSignals {
    before: libc::sigset_t,
}

impl HeldSignals {
    /// Blocks every signal but the fault signals for this thread.
    pub fn hold() -> HeldSignals {
        // SAFETY: zeroed sigset_t values are valid out-parameters, filled
        // by sigfillset/pthread_sigmask before any use.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `all` and `before` are valid sigset_t; the signal numbers
        // are valid; the mask changes this thread only.
        unsafe {
            libc::sigfillset(&mut all);
            for sig in FAULTS {
                libc::sigdelset(&mut all, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut before);
        }
        HeldSignals { before }
    }

    /// Sleeps `ms` milliseconds with the program's own mask; false when a
    /// handler that does not restart calls ran meanwhile (or had come
    /// since [`hold`](Self::hold)): the request must end with EINTR.
    pub fn pause(&self, ms: i64) -> bool {
        let ppoll = crate::real::real!(ppoll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int);
        let t = libc::timespec {
            tv_sec: 0,
            tv_nsec: ms * 1_000_000,
        };
        // SAFETY: no descriptors; a valid relative time and signal mask.
        let r = unsafe { ppoll(std::ptr::null_mut(), 0, &t, &self.before) };
        !(r < 0 && crate::errno() == libc::EINTR && crate::turns::a_handler_interrupts())
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        // SAFETY: `before` is the mask pthread_sigmask gave back; this
        // thread's only.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut()) };
    }
}

/// Signals raised by faults, which must never be blocked.
const FAULTS: [c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

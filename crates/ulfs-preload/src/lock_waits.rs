//! How a blocking lock request (`F_SETLKW`, `F_OFD_SETLKW`, `flock`
//! without `LOCK_NB`) waits without losing a signal. Linux ends such a
//! wait with EINTR when a signal whose handler does not restart calls
//! comes, and only then: a handler with `SA_RESTART` runs and the wait goes
//! on, a signal with its default action does what it does at once. The
//! emulation here tries the lock, sleeps a few milliseconds, and tries
//! again. It used to end the wait when its sleep was interrupted and some
//! signal had a non-restarting handler: a signal that came while it was
//! trying (or waiting for its turn on the image) was missed, and the
//! request could wait for ever (found as a hung test: a child's `F_SETLKW`
//! with a 200 ms alarm, its parent holding the lock and waiting for it);
//! and a restarting handler ended the wait whenever any handler did not
//! restart (in process, always: the library's own SIGBUS handler does not).
//!
//! So the signals that would end the wait, those with a handler that does
//! not restart calls (the fault signals aside: the library's SIGBUS
//! handler is for faults of its own mapping), are held back (blocked) for
//! the whole request. Every other signal comes as it would. After each
//! sleep the request looks at what is pending: one of the held signals
//! ends it with EINTR, its handler running as the mask is put back, before
//! the call returns, as Linux runs it before the call returns. A held
//! signal is seen within one sleep (a few milliseconds). A handler
//! installed by another thread during the wait is not held back (the set
//! is taken when the request starts).

use std::ffi::c_int;

/// The signals held back for one request, and the thread's mask before
/// it; the mask is put back when dropped.
pub struct HeldSignals {
    before: libc::sigset_t,
    held: libc::sigset_t,
}

impl HeldSignals {
    /// Blocks, for this thread, the signals that would end the wait: not
    /// blocked already, not a fault signal, with a handler that does not
    /// restart calls.
    pub fn hold() -> HeldSignals {
        // SAFETY: zeroed sigset_t values are valid out-parameters, set by
        // sigemptyset/pthread_sigmask before any other use.
        let mut held: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut before: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sigset_t out-parameters; querying the mask only.
        unsafe {
            libc::sigemptyset(&mut held);
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut before);
        }
        for sig in 1..libc::SIGRTMAX() {
            // SAFETY: `before` is a valid set; `sig` a signal number.
            let blocked = unsafe { libc::sigismember(&before, sig) } == 1;
            if blocked || FAULTS.contains(&sig) || !crate::turns::handler_interrupts(sig) {
                continue;
            }
            // SAFETY: `held` is a valid set; `sig` a signal number.
            unsafe { libc::sigaddset(&mut held, sig) };
        }
        // SAFETY: `held` is a valid set; the mask changes this thread only.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &held, std::ptr::null_mut()) };
        HeldSignals { before, held }
    }

    /// Sleeps `ms` milliseconds (other signals come meanwhile as they
    /// would); false when one of the held signals is pending: the request
    /// must end with EINTR.
    pub fn pause(&self, ms: i64) -> bool {
        let nanosleep = crate::real::real!(nanosleep: unsafe extern "C" fn(*const libc::timespec, *mut libc::timespec) -> c_int);
        let t = libc::timespec {
            tv_sec: 0,
            tv_nsec: ms * 1_000_000,
        };
        // SAFETY: a valid relative time; no remainder wanted. An EINTR
        // here is a signal that was not held: its handler restarts calls,
        // and the wait goes on.
        unsafe { nanosleep(&t, std::ptr::null_mut()) };
        // SAFETY: a zeroed sigset_t is a valid out-parameter for sigpending.
        let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::sigpending(&mut pending) };
        !(1..libc::SIGRTMAX()).any(|sig| {
            // SAFETY: valid sets and signal numbers.
            unsafe {
                libc::sigismember(&self.held, sig) == 1 && libc::sigismember(&pending, sig) == 1
            }
        })
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        // SAFETY: `before` is the mask this thread had; putting it back
        // delivers any held signal now, before the call returns.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut()) };
    }
}

/// Signals raised by faults, never held back (blocked, a fault would kill
/// the process instead of reaching its handler).
const FAULTS: [c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

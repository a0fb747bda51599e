//! Waits on a condition variable (`pthread_cond_wait`,
//! `pthread_cond_timedwait`, `pthread_cond_clockwait`) while this process
//! holds the image: a thread that waits for another thread, which may be
//! waiting for a process that wants the image, must not keep the image
//! from it (the waits on descriptors, children and time are `waits.rs`).
//!
//! While the image is held, the wait is a slice of `turns::RECHECK_MS`,
//! the image handed over first if another process waits for it. A slice
//! that runs out before the program's own deadline returns 0: a spurious
//! wake-up, which POSIX allows and every correct caller handles by
//! checking its predicate and waiting again (looping here instead could
//! sleep through a signal sent between two slices, while this thread held
//! the mutex). A process that does not hold the image waits in one call.

use libc::{c_int, clockid_t, pthread_cond_t, pthread_mutex_t, timespec};

use crate::real::real;
use crate::state::held_here;
use crate::turns::{RECHECK_MS, give_way};

type ClockWait = unsafe extern "C" fn(
    *mut pthread_cond_t,
    *mut pthread_mutex_t,
    clockid_t,
    *const timespec,
) -> c_int;

/// Deadlines at or past this many seconds are the realtime clock's (the
/// epoch was 2001-09-09 then); below it, the monotonic clock's (uptime).
/// `pthread_cond_timedwait` takes the clock the condition variable was
/// made with, which is not readable from outside it.
const REALTIME_FROM_SEC: i64 = 1_000_000_000;

fn now(clock: clockid_t) -> timespec {
    // SAFETY: a zeroed timespec is valid.
    let mut t: timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid for writing.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t
}

fn later(t: timespec, ms: i64) -> timespec {
    let ns = t.tv_nsec + ms * 1_000_000;
    timespec {
        tv_sec: t.tv_sec + ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    }
}

fn before_or_at(a: &timespec, b: &timespec) -> bool {
    (a.tv_sec, a.tv_nsec) <= (b.tv_sec, b.tv_nsec)
}

/// Whether the wait may block holding the image: hands it over first if
/// another process waits for it. Keeps errno.
fn still_holding() -> bool {
    if crate::fds::inside_library() {
        return false;
    }
    if held_here() && crate::shared::wanted() {
        let errno = crate::errno();
        give_way();
        crate::set_errno(errno);
    }
    held_here()
}

/// One slice on `clock`, or the program's own wait (`deadline`, or none)
/// when it ends first; `own` makes the program's own call.
///
/// # Safety
/// The program's condition variable and mutex, locked by this thread.
unsafe fn sliced(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    clock: clockid_t,
    deadline: Option<timespec>,
    own: impl FnOnce() -> c_int,
) -> c_int {
    let slice_end = later(now(clock), RECHECK_MS as i64);
    if deadline.is_some_and(|d| before_or_at(&d, &slice_end)) {
        return own();
    }
    let clockwait = real!(pthread_cond_clockwait: ClockWait);
    // SAFETY: as the caller's; a valid deadline on a clock that exists.
    match unsafe { clockwait(cond, mutex, clock, &slice_end) } {
        libc::ETIMEDOUT => 0,
        r => r,
    }
}

/// `pthread_cond_wait(3)`.
///
/// # Safety
/// As libc's `pthread_cond_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_wait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
) -> c_int {
    let f = real!(pthread_cond_wait: unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t) -> c_int);
    if !still_holding() {
        // SAFETY: the program's own arguments.
        return unsafe { f(cond, mutex) };
    }
    // SAFETY: the program's own arguments.
    unsafe { sliced(cond, mutex, libc::CLOCK_MONOTONIC, None, || 0) }
}

/// `pthread_cond_timedwait(3)`.
///
/// # Safety
/// As libc's `pthread_cond_timedwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_timedwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    deadline: *const timespec,
) -> c_int {
    let f = real!(pthread_cond_timedwait: unsafe extern "C" fn(*mut pthread_cond_t, *mut pthread_mutex_t, *const timespec) -> c_int);
    if deadline.is_null() || !still_holding() {
        // SAFETY: the program's own arguments.
        return unsafe { f(cond, mutex, deadline) };
    }
    // SAFETY: a valid timespec by the contract.
    let d = unsafe { *deadline };
    let clock = if d.tv_sec >= REALTIME_FROM_SEC {
        libc::CLOCK_REALTIME
    } else {
        libc::CLOCK_MONOTONIC
    };
    let own = || {
        // SAFETY: the program's own arguments.
        unsafe { f(cond, mutex, deadline) }
    };
    // SAFETY: the program's own arguments.
    unsafe { sliced(cond, mutex, clock, Some(d), own) }
}

/// `pthread_cond_clockwait(3)`.
///
/// # Safety
/// As libc's `pthread_cond_clockwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_clockwait(
    cond: *mut pthread_cond_t,
    mutex: *mut pthread_mutex_t,
    clock: clockid_t,
    deadline: *const timespec,
) -> c_int {
    let f = real!(pthread_cond_clockwait: ClockWait);
    let known = matches!(clock, libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC);
    if deadline.is_null() || !known || !still_holding() {
        // SAFETY: the program's own arguments.
        return unsafe { f(cond, mutex, clock, deadline) };
    }
    // SAFETY: a valid timespec by the contract.
    let d = unsafe { *deadline };
    let own = || {
        // SAFETY: the program's own arguments.
        unsafe { f(cond, mutex, clock, deadline) }
    };
    // SAFETY: the program's own arguments.
    unsafe { sliced(cond, mutex, clock, Some(d), own) }
}

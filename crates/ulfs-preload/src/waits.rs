//! Calls that wait (for a child, for descriptors, for time) while the
//! process may hold the image. A process that holds the image and waits
//! must not keep it from the processes it waits for (`sort > /ulfs/s &`
//! then `wait`; python's `Popen(...).wait()` after writing an image file;
//! `make -j`): `turns.rs` covers reads and writes of host descriptors,
//! this module the rest.
//!
//! - `wait`, `waitpid`, `wait3`, `wait4`, `waitid` without `WNOHANG`,
//!   and the waits for a signal (`sigsuspend`, `pause`, `sigwait`,
//!   `sigwaitinfo`: dash's `wait` is a `sigsuspend`): the image is handed
//!   over first (the child is the likeliest to need it).
//! - `poll`, `ppoll`, `select`, `epoll_wait`, `nanosleep`,
//!   `clock_nanosleep`, `sleep`, `usleep` with a timeout: the wait goes in
//!   slices of `turns::RECHECK_MS`, and the image is handed over as soon
//!   as another process waits for it (an event loop holding image files
//!   hands nothing over while nobody asks). Once the image is let go, the
//!   rest of the wait is one call.
//!
//! - `pselect`, `epoll_pwait`: sliced as `select` and `epoll_wait`
//!   (GNU make waits for its jobs in `pselect`); `sigtimedwait` hands
//!   over as the other signal waits;
//! - `recv`, `recvfrom`, `recvmsg`, `accept`, `accept4` on a blocking
//!   socket: as a read of a pipe (`turns.rs`);
//! - `sem_wait`, `sem_timedwait`, `sem_clockwait`: sliced the same way
//!   (semaphores shared between processes, as python's `multiprocessing`
//!   queues use, and python's locks);
//! - condition variables: `cond_waits.rs`.
//!
//! A process that holds nothing makes each call straight away. Other
//! waits on threads and shared memory (`pthread_mutex_lock`, raw
//! futexes) are not covered.

use libc::{c_int, c_long, c_uint, pid_t, timespec};

use crate::real::real;
use crate::state::held_here;
use crate::turns::{RECHECK_MS, give_way};

/// Hands the image over before a wait for a child that may block.
fn before_child_wait(options: c_int) {
    if options & libc::WNOHANG == 0 && held_here() {
        let errno = crate::errno();
        give_way();
        crate::set_errno(errno);
    }
}

/// A wait for a child (`wait`, `waitpid`, `wait3`, `wait4`; `call` makes
/// it with the options given). The image is handed over first. With more
/// than one thread, another thread may mount it again during the wait,
/// and then, once the threads that used it are done, nothing would hand
/// it over while the child waits for it (a child that needs the image
/// then waited out its 10 s and failed): so the wait goes in slices
/// (`WNOHANG`, then a short sleep, growing to `RECHECK_MS`), handing the
/// image over whenever another process waits for it.
fn wait_child(options: c_int, mut call: impl FnMut(c_int) -> pid_t) -> pid_t {
    before_child_wait(options);
    if options & libc::WNOHANG != 0 || crate::owner::single_threaded() {
        return call(options);
    }
    let mut slice_us: i64 = 200;
    loop {
        let r = call(options | libc::WNOHANG);
        // A child's change (> 0) or an error (ECHILD, EINTR, ...).
        if r != 0 {
            return r;
        }
        if held_here() && crate::shared::wanted() {
            let errno = crate::errno();
            give_way();
            crate::set_errno(errno);
        }
        let pause = timespec {
            tv_sec: 0,
            tv_nsec: slice_us * 1000,
        };
        // The system call itself: the library's own `nanosleep` is the
        // program's sliced one.
        // SAFETY: a valid timespec; a null remainder is allowed.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &pause as *const timespec,
                std::ptr::null_mut::<timespec>(),
            )
        };
        slice_us = (slice_us * 2).min(RECHECK_MS as i64 * 1000);
    }
}

/// `wait(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn wait(status: *mut c_int) -> pid_t {
    let f = real!(waitpid: unsafe extern "C" fn(pid_t, *mut c_int, c_int) -> pid_t);
    // SAFETY: the program's own arguments (`wait` is `waitpid(-1, .., 0)`).
    wait_child(0, |o| unsafe { f(-1, status, o) })
}

/// `waitpid(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    let f = real!(waitpid: unsafe extern "C" fn(pid_t, *mut c_int, c_int) -> pid_t);
    // SAFETY: the program's own arguments.
    wait_child(options, |o| unsafe { f(pid, status, o) })
}

/// `wait3(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn wait3(status: *mut c_int, options: c_int, usage: *mut libc::rusage) -> pid_t {
    let f = real!(wait3: unsafe extern "C" fn(*mut c_int, c_int, *mut libc::rusage) -> pid_t);
    // SAFETY: the program's own arguments.
    wait_child(options, |o| unsafe { f(status, o, usage) })
}

/// `wait4(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut libc::rusage,
) -> pid_t {
    let f =
        real!(wait4: unsafe extern "C" fn(pid_t, *mut c_int, c_int, *mut libc::rusage) -> pid_t);
    // SAFETY: the program's own arguments.
    wait_child(options, |o| unsafe { f(pid, status, o, usage) })
}

/// `waitid(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    info: *mut libc::siginfo_t,
    options: c_int,
) -> c_int {
    before_child_wait(options);
    let f = real!(waitid: unsafe extern "C" fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(idtype, id, info, options) }
}

/// Before waiting for a signal: the image is handed over (the signal is
/// most often a child's end, and dash's `wait` waits this way).
fn before_signal_wait() {
    if held_here() {
        let errno = crate::errno();
        give_way();
        crate::set_errno(errno);
    }
}

/// `sigsuspend(2)`.
///
/// # Safety
/// As libc's `sigsuspend`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> c_int {
    before_signal_wait();
    let f = real!(sigsuspend: unsafe extern "C" fn(*const libc::sigset_t) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(mask) }
}

/// `pause(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn pause() -> c_int {
    before_signal_wait();
    let f = real!(pause: unsafe extern "C" fn() -> c_int);
    // SAFETY: no arguments.
    unsafe { f() }
}

/// `sigwait(3)`.
///
/// # Safety
/// As libc's `sigwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
    before_signal_wait();
    let f = real!(sigwait: unsafe extern "C" fn(*const libc::sigset_t, *mut c_int) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(set, sig) }
}

/// `sigwaitinfo(2)`.
///
/// # Safety
/// As libc's `sigwaitinfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwaitinfo(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
) -> c_int {
    before_signal_wait();
    let f = real!(sigwaitinfo: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(set, info) }
}

/// `sem_wait(3)`: while the image is held, in slices of `sem_timedwait`
/// (python's `multiprocessing` queues lock with semaphores shared between
/// processes, one of which may wait for the image).
///
/// # Safety
/// As libc's `sem_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_wait(sem: *mut libc::sem_t) -> c_int {
    let f = real!(sem_wait: unsafe extern "C" fn(*mut libc::sem_t) -> c_int);
    let timed =
        real!(sem_timedwait: unsafe extern "C" fn(*mut libc::sem_t, *const timespec) -> c_int);
    loop {
        if held_here() && crate::shared::wanted() {
            let errno = crate::errno();
            give_way();
            crate::set_errno(errno);
        }
        if !held_here() {
            // SAFETY: the program's own semaphore.
            return unsafe { f(sem) };
        }
        let until = realtime_in(RECHECK_MS as i64);
        // SAFETY: the program's semaphore and a valid deadline.
        let r = unsafe { timed(sem, &until) };
        if r == 0 || crate::errno() != libc::ETIMEDOUT {
            return r;
        }
    }
}

/// `sem_timedwait(3)`: sliced the same way up to the program's deadline
/// (CLOCK_REALTIME, as the call takes it).
///
/// # Safety
/// As libc's `sem_timedwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_timedwait(sem: *mut libc::sem_t, deadline: *const timespec) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { sem_wait_until(sem, libc::CLOCK_REALTIME, deadline) }
}

/// `sem_clockwait(3)` (what python's locks wait in): as `sem_timedwait`,
/// on the program's clock.
///
/// # Safety
/// As libc's `sem_clockwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_clockwait(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    deadline: *const timespec,
) -> c_int {
    // SAFETY: the program's own arguments.
    unsafe { sem_wait_until(sem, clock, deadline) }
}

/// Waits on `sem` up to `deadline` on `clock`, in slices while the image
/// is held.
///
/// # Safety
/// As libc's `sem_clockwait`.
unsafe fn sem_wait_until(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    deadline: *const timespec,
) -> c_int {
    let timed = real!(sem_clockwait: unsafe extern "C" fn(*mut libc::sem_t, libc::clockid_t, *const timespec) -> c_int);
    let known = matches!(clock, libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC);
    if deadline.is_null() || !known || !held_here() {
        // SAFETY: the program's own arguments.
        return unsafe { timed(sem, clock, deadline) };
    }
    // SAFETY: a valid timespec by the contract.
    let end = unsafe { *deadline };
    loop {
        if held_here() && crate::shared::wanted() {
            let errno = crate::errno();
            give_way();
            crate::set_errno(errno);
        }
        let ns = now_ns(clock) + RECHECK_MS as i64 * 1_000_000;
        let slice = timespec {
            tv_sec: ns / 1_000_000_000,
            tv_nsec: ns % 1_000_000_000,
        };
        let last = !held_here() || (slice.tv_sec, slice.tv_nsec) >= (end.tv_sec, end.tv_nsec);
        let until = if last { end } else { slice };
        // SAFETY: the program's semaphore and a valid deadline.
        let r = unsafe { timed(sem, clock, &until) };
        if r == 0 || last || crate::errno() != libc::ETIMEDOUT {
            return r;
        }
    }
}

/// The realtime clock `ms` milliseconds from now.
fn realtime_in(ms: i64) -> timespec {
    let ns = now_ns(libc::CLOCK_REALTIME) + ms * 1_000_000;
    timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    }
}

/// Milliseconds since an arbitrary start (the monotonic clock).
fn now_ms() -> i64 {
    // SAFETY: a zeroed timespec is valid; CLOCK_MONOTONIC always exists.
    let mut t: timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid for writing.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec * 1000 + t.tv_nsec / 1_000_000
}

/// Runs a wait of `timeout_ms` (negative: for ever) as `slice(ms)` calls
/// (a slice returns 0 when its time ran out with nothing to report) while
/// this process holds the image, handing it over when another process
/// waits; then the rest as one call. Returns the first slice's result
/// that is not 0, or 0 when the whole time ran out.
fn in_slices(timeout_ms: i64, mut slice: impl FnMut(i64) -> c_int) -> c_int {
    if timeout_ms == 0 || !held_here() || crate::fds::inside_library() {
        return slice(timeout_ms);
    }
    let deadline = (timeout_ms > 0).then(|| now_ms() + timeout_ms);
    loop {
        let left = deadline.map(|d| (d - now_ms()).max(0));
        if held_here() && crate::shared::wanted() {
            let errno = crate::errno();
            give_way();
            crate::set_errno(errno);
        }
        if !held_here() {
            return slice(left.unwrap_or(-1));
        }
        // Still holding (nobody waits, or the files cannot be handed
        // over): one slice, then look again.
        let ms = left.map_or(RECHECK_MS as i64, |l| l.min(RECHECK_MS as i64));
        let r = slice(ms);
        if r != 0 || left.is_some_and(|l| l <= RECHECK_MS as i64) {
            return r;
        }
    }
}

/// `poll(2)`.
///
/// # Safety
/// As libc's `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let f = real!(poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    // SAFETY: the program's own arguments, with a shorter timeout.
    in_slices(timeout as i64, |ms| unsafe { f(fds, n, ms as c_int) })
}

/// `ppoll(2)`: sliced the same way (the signal mask applies to each
/// slice).
///
/// # Safety
/// As libc's `ppoll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let f = real!(ppoll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const timespec, *const libc::sigset_t) -> c_int);
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: a valid timespec by ppoll's contract.
        let t = unsafe { *timeout };
        t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
    };
    if ms != 0 && held_here() {
        return in_slices(ms, |slice| {
            let t = timespec {
                tv_sec: slice / 1000,
                tv_nsec: (slice % 1000) * 1_000_000,
            };
            let tp = if slice < 0 { std::ptr::null() } else { &t };
            // SAFETY: the program's arguments, with a shorter timeout.
            unsafe { f(fds, n, tp, sigmask) }
        });
    }
    // SAFETY: the program's own arguments.
    unsafe { f(fds, n, timeout, sigmask) }
}

/// A `select`-shaped wait of `ms` (negative: for ever) in slices while
/// the image is held: the sets are restored before each slice (a slice
/// that times out clears them). `call(slice_ms)` makes one slice.
///
/// # Safety
/// Each set NULL or valid.
unsafe fn sets_in_slices(
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    ms: i64,
    mut call: impl FnMut(i64) -> c_int,
) -> c_int {
    // SAFETY: each set is NULL or valid, by the contract.
    let saved = unsafe { [rd, wr, ex].map(|s| (!s.is_null()).then(|| *s)) };
    in_slices(ms, |slice| {
        for (s, copy) in [rd, wr, ex].into_iter().zip(&saved) {
            if let Some(c) = copy {
                // SAFETY: restoring the program's set.
                unsafe { *s = *c };
            }
        }
        call(slice)
    })
}

/// `select(2)`.
///
/// # Safety
/// As libc's `select`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    type SelectFn = unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::timeval,
    ) -> c_int;
    let f = real!(select: SelectFn);
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: a valid timeval by select's contract.
        let t = unsafe { *timeout };
        t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000
    };
    if ms == 0 || !held_here() {
        // SAFETY: the program's own arguments.
        return unsafe { f(nfds, rd, wr, ex, timeout) };
    }
    let start = now_ms();
    // SAFETY: the program's sets, by select's contract.
    let r = unsafe {
        sets_in_slices(rd, wr, ex, ms, |slice| {
            let mut t = libc::timeval {
                tv_sec: slice / 1000,
                tv_usec: (slice % 1000) * 1000,
            };
            let tp = if slice < 0 {
                std::ptr::null_mut()
            } else {
                &mut t
            };
            f(nfds, rd, wr, ex, tp)
        })
    };
    if !timeout.is_null() {
        // Linux leaves the time not slept in the timeout.
        let left = (ms - (now_ms() - start)).max(0);
        // SAFETY: the program's timeval.
        unsafe {
            (*timeout).tv_sec = left / 1000;
            (*timeout).tv_usec = (left % 1000) * 1000;
        }
    }
    r
}

/// `pselect(2)` (GNU make waits for its jobs this way).
///
/// # Safety
/// As libc's `pselect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *const timespec,
    sigmask: *const libc::sigset_t,
) -> c_int {
    type PselectFn = unsafe extern "C" fn(
        c_int,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *mut libc::fd_set,
        *const timespec,
        *const libc::sigset_t,
    ) -> c_int;
    let f = real!(pselect: PselectFn);
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: a valid timespec by pselect's contract.
        let t = unsafe { *timeout };
        t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
    };
    if ms == 0 || !held_here() {
        // SAFETY: the program's own arguments.
        return unsafe { f(nfds, rd, wr, ex, timeout, sigmask) };
    }
    // SAFETY: the program's sets, by pselect's contract.
    unsafe {
        sets_in_slices(rd, wr, ex, ms, |slice| {
            let t = timespec {
                tv_sec: slice / 1000,
                tv_nsec: (slice % 1000) * 1_000_000,
            };
            let tp = if slice < 0 { std::ptr::null() } else { &t };
            f(nfds, rd, wr, ex, tp, sigmask)
        })
    }
}

/// `epoll_pwait(2)`.
///
/// # Safety
/// As libc's `epoll_pwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    sigmask: *const libc::sigset_t,
) -> c_int {
    let f = real!(epoll_pwait: unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int);
    // SAFETY: the program's own arguments, with a shorter timeout.
    in_slices(timeout as i64, |ms| unsafe {
        f(epfd, events, max, ms as c_int, sigmask)
    })
}

/// `sigtimedwait(2)`: as `sigwaitinfo` unless it only polls.
///
/// # Safety
/// As libc's `sigtimedwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const timespec,
) -> c_int {
    // SAFETY: a valid timespec when not NULL.
    let polls = !timeout.is_null() && unsafe { (*timeout).tv_sec == 0 && (*timeout).tv_nsec == 0 };
    if !polls {
        before_signal_wait();
    }
    let f = real!(sigtimedwait: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t, *const timespec) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(set, info, timeout) }
}

/// `epoll_wait(2)`.
///
/// # Safety
/// As libc's `epoll_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let f = real!(epoll_wait: unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int);
    // SAFETY: the program's own arguments, with a shorter timeout.
    in_slices(timeout as i64, |ms| unsafe {
        f(epfd, events, max, ms as c_int)
    })
}

/// `clock_nanosleep(2)` (relative sleeps are sliced; an absolute one, or
/// one interrupted by a signal, ends as the kernel's would).
///
/// # Safety
/// As libc's `clock_nanosleep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let f = real!(clock_nanosleep: unsafe extern "C" fn(libc::clockid_t, c_int, *const timespec, *mut timespec) -> c_int);
    if flags & libc::TIMER_ABSTIME != 0
        || req.is_null()
        || !held_here()
        || crate::fds::inside_library()
    {
        // SAFETY: the program's own arguments.
        return unsafe { f(clock, flags, req, rem) };
    }
    // SAFETY: a valid timespec by the contract.
    let want = unsafe { *req };
    let total_ns = want
        .tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(want.tv_nsec);
    let start = now_ns(clock);
    loop {
        let left = total_ns - (now_ns(clock) - start);
        if left <= 0 {
            return 0;
        }
        if held_here() && crate::shared::wanted() {
            give_way();
        }
        let holding = held_here();
        let piece = if holding {
            left.min(RECHECK_MS as i64 * 1_000_000)
        } else {
            left
        };
        let t = timespec {
            tv_sec: piece / 1_000_000_000,
            tv_nsec: piece % 1_000_000_000,
        };
        // SAFETY: a valid relative timespec; no remainder wanted.
        let r = unsafe { f(clock, 0, &t, std::ptr::null_mut()) };
        if r != 0 {
            if !rem.is_null() {
                let left = (total_ns - (now_ns(clock) - start)).max(0);
                // SAFETY: the program's remainder.
                unsafe {
                    *rem = timespec {
                        tv_sec: left / 1_000_000_000,
                        tv_nsec: left % 1_000_000_000,
                    };
                }
            }
            return r;
        }
    }
}

fn now_ns(clock: libc::clockid_t) -> i64 {
    // SAFETY: a zeroed timespec is valid.
    let mut t: timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid for writing; an unknown clock leaves it zero.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// `nanosleep(2)`.
///
/// # Safety
/// As libc's `nanosleep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    // SAFETY: the caller's contract is nanosleep's.
    let r = unsafe { clock_nanosleep(libc::CLOCK_MONOTONIC, 0, req, rem) };
    if r != 0 {
        crate::set_errno(r);
        return -1;
    }
    0
}

/// `usleep(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn usleep(us: libc::useconds_t) -> c_int {
    let t = timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: (us % 1_000_000) as c_long * 1000,
    };
    // SAFETY: a valid timespec; no remainder wanted.
    unsafe { nanosleep(&t, std::ptr::null_mut()) }
}

/// `sleep(3)`: the seconds not slept when a signal ends it.
#[unsafe(no_mangle)]
pub extern "C" fn sleep(secs: c_uint) -> c_uint {
    let t = timespec {
        tv_sec: secs as libc::time_t,
        tv_nsec: 0,
    };
    // SAFETY: a zeroed timespec is valid.
    let mut rem: timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid timespecs.
    if unsafe { nanosleep(&t, &mut rem) } == 0 {
        0
    } else {
        // The whole seconds left, as glibc's sleep returns them.
        rem.tv_sec as c_uint
    }
}

/// Before a receive or an accept on host socket `fd` that may block:
/// `false` when it must fail with EINTR (`turns::before_read`).
fn before_receive(fd: c_int, flags: c_int) -> bool {
    flags & libc::MSG_DONTWAIT != 0 || crate::turns::before_read(fd)
}

/// `recv(2)`.
///
/// # Safety
/// As libc's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut libc::c_void, n: usize, flags: c_int) -> isize {
    if !before_receive(fd, flags) {
        return crate::fail(libc::EINTR);
    }
    let f = real!(recv: unsafe extern "C" fn(c_int, *mut libc::c_void, usize, c_int) -> isize);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, buf, n, flags) }
}

/// `recvfrom(2)`.
///
/// # Safety
/// As libc's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut libc::c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    if !before_receive(fd, flags) {
        return crate::fail(libc::EINTR);
    }
    type RecvFromFn = unsafe extern "C" fn(
        c_int,
        *mut libc::c_void,
        usize,
        c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
    ) -> isize;
    let f = real!(recvfrom: RecvFromFn);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, buf, n, flags, addr, len) }
}

/// `recvmsg(2)`.
///
/// # Safety
/// As libc's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    if !before_receive(fd, flags) {
        return crate::fail(libc::EINTR);
    }
    let f = real!(recvmsg: unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> isize);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, msg, flags) }
}

/// `accept(2)`.
///
/// # Safety
/// As libc's `accept`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    if !before_receive(fd, 0) {
        return crate::fail(libc::EINTR);
    }
    let f = real!(accept: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, addr, len) }
}

/// `accept4(2)`.
///
/// # Safety
/// As libc's `accept4`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    if !before_receive(fd, 0) {
        return crate::fail(libc::EINTR);
    }
    let f = real!(accept4: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(fd, addr, len, flags) }
}

//! When a worker may spin. A worker that has served a channel polls it a
//! little longer (`--spin-us`) before it lets the channel sleep, because
//! a client calling back to back then needs no wake-up; past the first
//! microseconds it yields between looks, so that a client sharing its CPU
//! can run.
//!
//! That bet is right while the CPUs are the server's and its clients'.
//! When other programs keep them busy, a spinning worker is one more
//! CPU-bound thread: the scheduler preempts it for whole time slices, and
//! every request that arrives meanwhile waits a slice (milliseconds).
//! PostMark through the server, 0.2 s on this quiet two-core machine, took
//! more than a minute next to two busy loops (FUSE: 5 s, tmpfs: 0.5 s). A
//! worker that sleeps instead is woken by the client's kick like any
//! sleeper, which the scheduler runs promptly: the same PostMark then
//! takes about 2 s. So a yield that took long (another program ran for a
//! slice) ends the spin, and for a while the worker does not spin at all.
//!
//! Only the worker backs off. Clients keep spinning for their answers
//! (5 µs, then FUTEX_WAIT): with several client programs on two cores
//! their yields go to each other, often for longer than a slice's worth of
//! their own work, and clients that backed off too lost half their
//! throughput (PostMark, 2 programs) to sleeps and wakes.

use std::time::{Duration, Instant};

/// A yield that took at least this long let another thread run for most
/// of a time slice: the CPU is contended. (An uncontended `sched_yield`
/// returns in under a microsecond; a client served on the same CPU hands
/// it back in a few.)
pub(crate) const CONTENDED_YIELD: Duration = Duration::from_millis(1);

/// How long a worker that saw a contended yield lets channels sleep at
/// once instead of spinning, before it tries spinning again.
pub(crate) const CONTENDED_FOR: Duration = Duration::from_millis(100);

/// One worker's memory of contention.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SpinPolicy {
    quiet_until: Option<Instant>,
}

impl SpinPolicy {
    /// Whether spinning is worth it at `now`.
    pub fn may_spin(&mut self, now: Instant) -> bool {
        match self.quiet_until {
            Some(t) if now < t => false,
            Some(_) => {
                self.quiet_until = None;
                true
            }
            None => true,
        }
    }

    /// Yields the CPU once; false, and no spinning for [`CONTENDED_FOR`],
    /// if the yield took [`CONTENDED_YIELD`] or more.
    pub fn yield_cpu(&mut self) -> bool {
        let before = Instant::now();
        std::thread::yield_now();
        let after = Instant::now();
        self.saw_yield(after - before, after)
    }

    fn saw_yield(&mut self, took: Duration, now: Instant) -> bool {
        if took >= CONTENDED_YIELD {
            self.quiet_until = Some(now + CONTENDED_FOR);
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_yield_stops_spinning_for_a_while_then_spinning_resumes() {
        let mut p = SpinPolicy::default();
        let t0 = Instant::now();
        assert!(p.may_spin(t0));
        assert!(p.saw_yield(Duration::from_micros(3), t0));
        assert!(p.may_spin(t0));
        assert!(!p.saw_yield(CONTENDED_YIELD, t0));
        assert!(!p.may_spin(t0));
        assert!(!p.may_spin(t0 + CONTENDED_FOR / 2));
        assert!(p.may_spin(t0 + CONTENDED_FOR));
        assert!(p.may_spin(t0 + CONTENDED_FOR / 2));
    }

    /// A thread that never yields, on the same CPU: the yield lets it run
    /// (for a slice, far past CONTENDED_YIELD) at least once in a while.
    #[test]
    fn a_busy_thread_on_the_same_cpu_is_seen_as_contention() {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `allowed` is a cpu_set_t of the size given; 0 is this thread.
        let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut allowed) };
        assert_eq!(r, 0, "sched_getaffinity");
        // SAFETY: the index is below CPU_SETSIZE; `allowed` is initialised.
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
            .expect("a CPU this thread may run on");
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` is below CPU_SETSIZE; the set is ours.
        unsafe { libc::CPU_SET(cpu, &mut one) };
        let pin = move || {
            // SAFETY: `one` is a valid set; 0 is the calling thread.
            let r = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) };
            assert_eq!(r, 0, "sched_setaffinity");
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        pin();
        let mut p = SpinPolicy::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = false;
        while !seen && Instant::now() < deadline {
            seen = !p.yield_cpu();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        assert!(
            seen,
            "no yield to a busy thread on the same CPU took a slice"
        );
        assert!(!p.may_spin(Instant::now()));
    }
}

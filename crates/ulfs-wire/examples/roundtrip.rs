//! NOP round-trip latency, client → server → client, between two
//! processes, through a real channel (memfd and eventfd passed by
//! SCM_RIGHTS over a SEQPACKET socketpair).
//!
//! - busy: the server spins on its ring and the client spins on its
//!   completion; no system call on either side. The target is
//!   under 1 µs here.
//! - sleep/wake: the server goes idle after every answer (sleeps in
//!   poll on the kick eventfd) and the client sleeps at once in
//!   FUTEX_WAIT: each round trip is an eventfd write, a wakeup, a
//!   FUTEX_WAKE and a wakeup.
//!
//! `cargo run --release --example roundtrip -p ulfs-wire [-- N]`.
//! With two CPUs or more the server is pinned to CPU 1 and the client to
//! CPU 0, so the numbers are cross-core and repeatable.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use ulfs_wire::channel::drain_kick;
use ulfs_wire::{ClientChannel, Cqe, Geometry, Op, Req, ServerChannel, control};

const ROLE: &str = "ULFS_WIRE_RT_SERVER";

/// Pins this process to `cpu` of `n`. `n` is counted before anyone pins:
/// a pinned parent's child would count only its parent's one CPU.
fn pin(cpu: usize, n: usize) -> bool {
    if n < 2 {
        return false;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu % n);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

fn hung_up(sock: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(sock, PollFlags::RDHUP)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0) > 0
}

/// The server process: `busy` spins on the ring forever, otherwise it
/// sleeps on the kick whenever the ring is empty.
fn server(sock: OwnedFd, busy: bool, ncpu: usize) {
    pin(1, ncpu);
    let control::Msg::Hello { want_sq, want_data } = control::recv(sock.as_fd()).unwrap() else {
        panic!("expected HELLO");
    };
    let geo = Geometry::negotiate(want_sq, want_data, 1 << 20);
    let (mut chan, memfd, kick) = ServerChannel::create(geo).unwrap();
    control::send_welcome(sock.as_fd(), 1, &geo, memfd.as_fd(), kick.as_fd()).unwrap();
    drop(memfd);
    let mut empty: u32 = 0;
    loop {
        if let Some(r) = chan.next_request() {
            let req = r.expect("the client keeps to the protocol");
            let res = if req.op == Op::Nop as u16 { 0 } else { -38 };
            chan.complete(Cqe::ok(req.tag, res));
            continue;
        }
        if busy {
            std::hint::spin_loop();
            empty = empty.wrapping_add(1);
            // A system call now and then, to notice the client leaving.
            if empty.is_multiple_of(1 << 20) && hung_up(&sock) {
                return;
            }
            continue;
        }
        if !chan.set_idle() {
            continue;
        }
        let mut fds = [
            PollFd::new(&kick, PollFlags::IN),
            PollFd::new(&sock, PollFlags::RDHUP),
        ];
        rustix::event::poll(&mut fds, None).unwrap();
        let hup = !fds[1].revents().is_empty();
        chan.clear_idle();
        drain_kick(kick.as_fd());
        if hup && !chan.has_pending() {
            return;
        }
    }
}

struct Result {
    mean_ns: f64,
    p50_ns: u64,
    p99_ns: u64,
    kicks: u64,
    sleeps: u64,
}

fn run(mode: &str, n: u32, ncpu: usize) -> Result {
    let (mine, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    // The child inherits its end: the only fd without close-on-exec.
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, format!("{mode}:{}:{ncpu}", theirs.as_raw_fd()))
        .spawn()
        .unwrap();
    drop(theirs);
    let w = control::hello(mine.as_fd(), 4, 4096).unwrap();
    let mut c = ClientChannel::attach(w.geometry, w.memfd, w.kick, mine).unwrap();
    let busy = mode == "busy";
    c.set_spin(if busy {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    });
    let nop = Req::new(Op::Nop);
    for _ in 0..n / 10 {
        c.call(nop).unwrap();
    }
    let before = c.stats();
    let t = Instant::now();
    for _ in 0..n {
        c.call(nop).unwrap();
    }
    let mean_ns = t.elapsed().as_nanos() as f64 / n as f64;
    let after = c.stats();
    // Percentiles of batches of BATCH calls (per-call means): a clock
    // read around every single call would perturb what it measures.
    const BATCH: u32 = 64;
    let mut lat: Vec<u64> = (0..(n / BATCH).clamp(10, 20_000))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..BATCH {
                c.call(nop).unwrap();
            }
            t.elapsed().as_nanos() as u64 / BATCH as u64
        })
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    drop(c);
    child.wait().unwrap();
    Result {
        mean_ns,
        p50_ns: pct(0.5),
        p99_ns: pct(0.99),
        kicks: after.kicks - before.kicks,
        sleeps: after.sleeps - before.sleeps,
    }
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let mut it = role.split(':');
        let (mode, fd, ncpu) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        // SAFETY: the parent passed this fd number, inherited open, and
        // nothing else in this process owns it.
        let sock = unsafe { OwnedFd::from_raw_fd(fd.parse().unwrap()) };
        server(sock, mode == "busy", ncpu.parse().unwrap());
        return;
    }
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = pin(0, ncpu);
    println!(
        "NOP round trips between two processes ({ncpu} CPUs, {})",
        if pinned {
            "client on CPU 0, server on CPU 1"
        } else {
            "unpinned"
        }
    );
    for (mode, n) in [("busy", n), ("sleep", (n / 20).max(1000))] {
        let r = run(mode, n, ncpu);
        println!(
            "{mode:>5}: {n:>8} calls  mean {:>8.0} ns  p50 {:>7} ns  p99 {:>7} ns  \
             ({:.2} kicks, {:.2} futex sleeps per call; p50/p99 over batches of 64)",
            r.mean_ns,
            r.p50_ns,
            r.p99_ns,
            r.kicks as f64 / n as f64,
            r.sleeps as f64 / n as f64,
        );
    }
}

//! The threads that serve channels. All of them wait in one epoll, on the
//! listening socket, on each client's socket (its HELLO, its hang-up) and
//! on each idle channel's kick eventfd, each armed one-shot so that one
//! event goes to one worker. A kicked channel joins the ready queue; a
//! worker takes the channel at its head and serves it:
//!
//! 1. every request in its ring, up to `BATCH`; a channel that still has
//!    more goes to the back of the queue, so a client that floods the
//!    server gets its turn and no more (and the epoll is looked at, without
//!    waiting, between turns, so a new client's kick is never starved);
//! 2. when the ring is empty, the worker keeps polling it for `spin`: a
//!    client issuing calls back to back is served with no system call on
//!    either side. Past the first microseconds it also looks at the kicks
//!    of other channels (an epoll of their own, `Shared::kicks`, polled
//!    without waiting) and gives way as soon as another channel waits:
//!    several clients that compute between calls (PostMark, a compiler)
//!    are then served in turn, rather than each waiting out the others'
//!    spins;
//! 3. then the channel is let sleep: `server_idle` is set (the client will
//!    kick), the ring checked once more (the client may have published
//!    just before it saw the flag), and the kick re-armed.
//!
//! A worker never sleeps on memory a client controls, and never blocks on
//! a client: sockets are non-blocking, and nothing a request does waits
//! for another client.

use crate::Shared;
use crate::clients::{Client, State};
use crate::dispatch::{Call, Scratch};
use crate::spin::SpinPolicy;
use rustix::event::epoll::{self, Event, EventData, EventFlags};
use rustix::event::{PollFd, PollFlags};
use std::os::fd::AsFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use ulfs::Errno;
use ulfs_wire::{Cqe, Msg, Refusal, ServerChannel};

/// Requests served from one channel before the others get their turn.
const BATCH: u32 = 16;

const LISTENER: u64 = u64::MAX;
const STOP: u64 = u64::MAX - 1;
const KICKS: u64 = u64::MAX - 2;
const KIND_SOCKET: u64 = 0;
const KIND_KICK: u64 = 1;

fn token(id: u64, kind: u64) -> EventData {
    EventData::new_u64(id << 1 | kind)
}

fn sys(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// The listener (non-blocking, one-shot: one worker accepts at a time) and
/// the stop eventfd (level-triggered: once written, every worker sees it).
pub(crate) fn register_fixed(s: &Shared) -> Result<(), Errno> {
    rustix::io::ioctl_fionbio(&s.listener, true).map_err(sys)?;
    epoll::add(
        &s.epoll,
        &s.listener,
        EventData::new_u64(LISTENER),
        EventFlags::IN | EventFlags::ONESHOT,
    )
    .map_err(sys)?;
    epoll::add(
        &s.epoll,
        &s.stop_fd,
        EventData::new_u64(STOP),
        EventFlags::IN,
    )
    .map_err(sys)?;
    // Level-triggered: readable while any kick waits in it.
    epoll::add(
        &s.epoll,
        &s.kicks,
        EventData::new_u64(KICKS),
        EventFlags::IN,
    )
    .map_err(sys)
}

/// Whether a kick waits in the kicks' epoll (without taking it).
fn kicked(s: &Shared) -> bool {
    let mut fds = [PollFd::new(&s.kicks, PollFlags::IN)];
    matches!(rustix::event::poll(&mut fds, Some(&ZERO)), Ok(n) if n > 0)
}

const ZERO: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// Moves the kicked channels into the ready queue, without waiting.
fn take_kicks(s: &Shared) {
    let mut events = [Event {
        flags: EventFlags::empty(),
        data: EventData::new_u64(0),
    }; 16];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    while let Ok(n) = epoll::wait(&s.kicks, &mut events[..], Some(&zero)) {
        for ev in &events[..n] {
            s.push_ready(ev.data.u64() >> 1);
        }
        if n < events.len() {
            break;
        }
    }
}

const SOCKET_EVENTS: EventFlags = EventFlags::IN
    .union(EventFlags::RDHUP)
    .union(EventFlags::ONESHOT);

pub(crate) fn watch_socket(s: &Shared, c: &Client) -> Result<(), Errno> {
    epoll::add(&s.epoll, &c.sock, token(c.id, KIND_SOCKET), SOCKET_EVENTS).map_err(sys)
}

pub(crate) fn rearm_socket(s: &Shared, c: &Client) -> Result<(), Errno> {
    epoll::modify(&s.epoll, &c.sock, token(c.id, KIND_SOCKET), SOCKET_EVENTS).map_err(sys)
}

pub(crate) fn watch_kick(s: &Shared, c: &Client, st: &State) -> Result<(), Errno> {
    let kick = st.kick.as_ref().ok_or(Errno::EINVAL)?;
    epoll::add(
        &s.kicks,
        kick,
        token(c.id, KIND_KICK),
        EventFlags::IN | EventFlags::ONESHOT,
    )
    .map_err(sys)
}

fn rearm_kick(s: &Shared, c: &Client, st: &State) {
    if let Some(kick) = &st.kick {
        let _ = epoll::modify(
            &s.kicks,
            kick,
            token(c.id, KIND_KICK),
            EventFlags::IN | EventFlags::ONESHOT,
        );
    }
}

pub(crate) fn unwatch(s: &Shared, c: &Client, st: &State) {
    let _ = epoll::delete(&s.epoll, &c.sock);
    if let Some(kick) = &st.kick {
        let _ = epoll::delete(&s.kicks, kick);
    }
}

/// One worker's loop, until the server stops.
pub(crate) fn run(s: &Shared) {
    let mut scratch = Scratch::new(ulfs_wire::layout::DEFAULT_DATA_LEN as usize);
    let mut spin = SpinPolicy::default();
    let mut events = vec![
        Event {
            flags: EventFlags::empty(),
            data: EventData::new_u64(0),
        };
        64
    ];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        if s.stopping.load(Ordering::Acquire) {
            return;
        }
        // Look at the epoll without waiting while channels are queued.
        let busy = !s.ready_is_empty();
        let n = match epoll::wait(&s.epoll, &mut events[..], busy.then_some(&zero)) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                eprintln!("ulfs serve: epoll: {e}");
                return;
            }
        };
        for ev in &events[..n] {
            match ev.data.u64() {
                STOP => return,
                LISTENER => accept_all(s),
                KICKS => take_kicks(s),
                t => {
                    let Some(c) = s.clients.get(t >> 1) else {
                        continue;
                    };
                    if t & 1 == KIND_KICK {
                        s.push_ready(c.id);
                    } else {
                        s.clients.on_socket(s, &c);
                    }
                }
            }
        }
        if let Some(id) = s.pop_ready()
            && let Some(c) = s.clients.get(id)
        {
            serve(s, &c, &mut scratch, &mut spin);
        }
    }
}

/// Connections taken per listener event: a flood of connections is taken
/// in turns with the channels, not by one worker for as long as it lasts.
const ACCEPT_BATCH: usize = 64;

fn accept_all(s: &Shared) {
    for _ in 0..ACCEPT_BATCH {
        match s.with_fd_room(|| s.listener.accept()) {
            Ok(sock) => s.clients.accept(s, sock),
            Err(e) if e == Errno(libc::EAGAIN) => break,
            // Out of descriptors: the connection stays in the backlog and
            // the listener readable, so re-arming it as is would spin on
            // the error (and leave the client waiting). The spare
            // descriptor makes room to take the connection and refuse it.
            Err(e) if e == Errno(libc::EMFILE) || e == Errno(libc::ENFILE) => {
                // Linux takes the descriptor before it looks at the queue:
                // EMFILE says nothing about whether anyone waits.
                if !someone_waits(s) {
                    break;
                }
                match refuse_without_fds(s, e) {
                    Spare::Refused => {}
                    Spare::Empty => break,
                    Spare::Lost => {
                        // No room even so (ENFILE, or the room was taken):
                        // wait a little before the next try, not spin.
                        log_once(s, e);
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        break;
                    }
                }
            }
            Err(e) => {
                log_once(s, e);
                break;
            }
        }
    }
    rearm_listener(s);
}

/// Lets the next worker take connections (after a turn of accepting, or
/// after a panic that may have cut one short).
pub(crate) fn rearm_listener(s: &Shared) {
    let _ = epoll::modify(
        &s.epoll,
        &s.listener,
        EventData::new_u64(LISTENER),
        EventFlags::IN | EventFlags::ONESHOT,
    );
}

/// Takes one connection with the spare descriptor's room and refuses it
/// (EMFILE). The refused socket, shut down (its client sees the REFUSED,
/// then the end), becomes the next spare: closing it and opening another
/// would leave a moment in which another thread's new descriptor could
/// take the room for good.
fn refuse_without_fds(s: &Shared, e: Errno) -> Spare {
    let mut spare = s.spare();
    let Some(room) = spare.take().or_else(crate::open_spare) else {
        return Spare::Lost;
    };
    drop(room);
    match s.listener.accept() {
        Ok(sock) => {
            let why = "the server is out of file descriptors";
            crate::clients::tell(&sock, Msg::Refused(Refusal::new(e, why)));
            let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Both);
            *spare = Some(sock);
            Spare::Refused
        }
        Err(again) => {
            *spare = crate::open_spare();
            if again == Errno(libc::EAGAIN) && spare.is_some() {
                Spare::Empty
            } else {
                Spare::Lost
            }
        }
    }
}

/// Whether a connection waits in the listener's queue (a listening
/// socket is readable exactly then).
fn someone_waits(s: &Shared) -> bool {
    let mut fds = [PollFd::new(&s.listener, PollFlags::IN)];
    matches!(rustix::event::poll(&mut fds, Some(&ZERO)), Ok(n) if n > 0)
}

/// What [`refuse_without_fds`] did.
enum Spare {
    /// Took a connection and refused it.
    Refused,
    /// Nothing was waiting (and the spare is back).
    Empty,
    /// No room to take one.
    Lost,
}

/// An accept error, said once per kind rather than once per connection.
fn log_once(s: &Shared, e: Errno) {
    if s.accept_error.swap(e.0, Ordering::Relaxed) != e.0 {
        eprintln!("ulfs serve: accept: {e}");
    }
}

/// Serves one channel for a turn (see the module comment).
fn serve(s: &Shared, c: &Arc<Client>, scratch: &mut Scratch, spin: &mut SpinPolicy) {
    let mut st = c.lock();
    if st.dead {
        return;
    }
    let State {
        chan,
        kick,
        proc,
        lock_owner,
        exec_token,
        ..
    } = &mut *st;
    let lock_owner = *lock_owner;
    let (Some(chan), Some(kick), Some(proc)) = (chan, kick.as_ref(), proc) else {
        return;
    };
    ulfs_wire::channel::drain_kick(kick.as_fd());
    chan.clear_idle();
    let data_len = chan.geometry().data_len as usize;
    if scratch.data.len() < data_len {
        // A fresh zeroed buffer, not a resize: its pages are the kernel's
        // zero pages until a request uses them, so a worker that once
        // served a 64 MiB channel holds only what was used.
        scratch.data = vec![0; data_len];
    }
    let mut served = 0;
    loop {
        if c.leaving.load(Ordering::Relaxed) {
            // Torn down meanwhile: the teardown waits for this lock.
            return;
        }
        match chan.next_request() {
            Some(Ok(req)) => {
                let cqe = answer(s, c, lock_owner, exec_token, chan, proc, scratch, &req);
                chan.complete(cqe);
                served += 1;
                if served >= BATCH {
                    drop(st);
                    s.push_ready(c.id);
                    return;
                }
            }
            Some(Err(_broken)) => {
                drop(st);
                s.clients.remove(s, c);
                return;
            }
            None => {
                if spin_until_pending(chan, s, spin) {
                    continue;
                }
                if chan.set_idle() {
                    rearm_kick(s, c, &st);
                    return;
                }
            }
        }
    }
}

/// Polls the ring for the configured spin time; true once a request is
/// there. Not while other programs want the CPUs (`crate::spin`): the
/// channel then goes to sleep at once and its next request wakes it.
fn spin_until_pending(chan: &ServerChannel, s: &Shared, spin: &mut SpinPolicy) -> bool {
    let start = Instant::now();
    if s.cfg.spin.is_zero() || !spin.may_spin(start) {
        return chan.has_pending();
    }
    let until = start + s.cfg.spin;
    let mut looked = start;
    loop {
        for _ in 0..64 {
            if chan.has_pending() {
                return true;
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        if now >= until || s.stopping.load(Ordering::Relaxed) {
            return chan.has_pending();
        }
        // Another channel waiting (queued, or kicked: the kicks' epoll is
        // only looked at, its events left for whichever worker takes them,
        // an idle one woken by them included): this one, quiet for a
        // while, is let sleep and the worker goes back to the others.
        if now - looked >= YIELD_AFTER {
            looked = now;
            if s.ready_len.load(Ordering::Relaxed) > 0 || kicked(s) {
                return chan.has_pending();
            }
        }
        // Past the first microseconds, let the CPU go between looks: a
        // client on this very CPU (two cores, or more threads than cores)
        // cannot send its next request while we spin, and would wait out
        // the whole spin each call (measured: 19 us a call, all on one
        // CPU). With nothing else to run, the yield returns at once; a
        // yield that gave another program a time slice ends the spin.
        if now - start >= YIELD_AFTER && !spin.yield_cpu() {
            return chan.has_pending();
        }
    }
}

/// How long a worker spins before it yields between looks at the ring.
const YIELD_AFTER: std::time::Duration = std::time::Duration::from_micros(2);

/// One request's answer. A panic in the engine is the server's bug, not
/// the client's: the client gets EIO, and the volume is abandoned
/// (read-only, nothing more committed), as the library does after a
/// caught panic, because the call may have been cut in half.
#[allow(clippy::too_many_arguments)]
fn answer(
    s: &Shared,
    client: &Client,
    lock_owner: u64,
    exec_token: &mut Option<crate::adopt::ExecToken>,
    chan: &mut ServerChannel,
    proc: &mut ulfs::posix::Process,
    scratch: &mut Scratch,
    req: &ulfs_wire::Req,
) -> Cqe {
    let r = catch_unwind(AssertUnwindSafe(|| {
        Call {
            vol: &s.vol,
            proc,
            chan,
            scratch,
            limits: &s.cfg.limits,
            locks: &s.locks,
            maps: &s.maps,
            client,
            lock_owner,
            exec_token,
            shared: s,
        }
        .answer(req)
    }));
    r.unwrap_or_else(|_| {
        s.vol.abandon();
        Cqe::err(req.tag, Errno::EIO)
    })
}

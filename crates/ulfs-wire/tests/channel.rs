//! The channel within one process: a hostile client poking the shared
//! memory directly, both ends over a socketpair in two threads, and the
//! sleep/wake and death paths.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Rng, client, fnv, serve, welcome};
use rustix::event::{PollFd, PollFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use ulfs_wire::layout::*;
use ulfs_wire::{
    Broken, ClientChannel, Cqe, Errno, Geometry, Op, Req, ServerChannel, Span, control,
};

const ENOTCONN: Errno = Errno(libc::ENOTCONN);
const EPROTO: Errno = Errno(libc::EPROTO);

/// The client's view of a channel, mapped by hand: what a hostile client
/// can do to the server.
struct Raw {
    base: NonNull<u8>,
    len: usize,
}

impl Raw {
    fn map(fd: &OwnedFd, len: usize) -> Raw {
        // SAFETY: a fresh shared mapping of a memfd at least `len` long.
        let p = unsafe {
            rustix::mm::mmap(
                ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )
        }
        .unwrap();
        Raw {
            base: NonNull::new(p.cast()).unwrap(),
            len,
        }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (checked); only used atomically.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }

    fn write_req(&self, g: &Geometry, index: u32, req: Req) {
        let off = g.sq_off() + (index & (g.sq_entries - 1)) as usize * REQ_SIZE;
        // SAFETY: a slot inside the SQ, aligned.
        unsafe { ptr::write_volatile(self.base.as_ptr().add(off).cast::<Req>(), req) }
    }

    fn read_cqe(&self, g: &Geometry, index: u32) -> Cqe {
        let off = g.cq_off() + (index & (g.cq_entries - 1)) as usize * CQE_SIZE;
        // SAFETY: a slot inside the CQ, aligned.
        unsafe { ptr::read_volatile(self.base.as_ptr().add(off).cast::<Cqe>()) }
    }

    fn data(&self, g: &Geometry, off: usize, len: usize) -> Vec<u8> {
        assert!(g.data_off as usize + off + len <= self.len);
        let mut v = vec![0u8; len];
        // SAFETY: in bounds (checked), into a private buffer.
        unsafe {
            ptr::copy_nonoverlapping(
                self.base.as_ptr().add(g.data_off as usize + off),
                v.as_mut_ptr(),
                len,
            )
        };
        v
    }

    fn put_data(&self, g: &Geometry, off: usize, bytes: &[u8]) {
        assert!(g.data_off as usize + off + bytes.len() <= self.len);
        // SAFETY: in bounds (checked), from a private buffer.
        unsafe {
            ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.as_ptr().add(g.data_off as usize + off),
                bytes.len(),
            )
        };
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len).unwrap() };
    }
}

fn raw_channel(g: Geometry) -> (ServerChannel, Raw) {
    let (s, memfd, _kick) = ServerChannel::create(g).unwrap();
    let raw = Raw::map(&memfd, g.total_len());
    (s, raw)
}

fn tagged(op: Op, tag: u32) -> Req {
    let mut r = Req::new(op);
    r.tag = tag;
    r
}

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// Both ends, connected the real way: HELLO, WELCOME with the fds over
/// SCM_RIGHTS. Returns the server's channel, kick and socket end.
fn connected(want_sq: u32, want_data: u32) -> (ServerChannel, OwnedFd, OwnedFd, ClientChannel) {
    let (cs, ss) = seqpacket_pair();
    control::send_hello(cs.as_fd(), want_sq, want_data).unwrap();
    let (chan, kick) = welcome(&ss, MAX_DATA_LEN);
    let control::Msg::Welcome(w) = control::recv(cs.as_fd()).unwrap() else {
        panic!("expected WELCOME");
    };
    assert_eq!(w.client_id, 42);
    assert_eq!(w.geometry, chan.geometry());
    let c = ClientChannel::attach(w.geometry, w.memfd, w.kick, cs).unwrap();
    (chan, kick, ss, c)
}

#[test]
fn the_header_describes_the_channel() {
    let g = Geometry::new(8, 16, 8192).unwrap();
    let (s, memfd, _kick) = ServerChannel::create(g).unwrap();
    let st = rustix::fs::fstat(&memfd).unwrap();
    assert_eq!(st.st_size as usize, g.total_len());
    let seals = rustix::fs::fcntl_get_seals(&memfd).unwrap();
    use rustix::fs::SealFlags;
    assert!(seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL));
    // Sealed: the client cannot shrink it under the server.
    assert!(rustix::fs::ftruncate(&memfd, 4096).is_err());
    let raw = Raw::map(&memfd, g.total_len());
    // SAFETY: the header page is in the mapping.
    let header = unsafe { std::slice::from_raw_parts(raw.base.as_ptr(), 40).to_vec() };
    assert_eq!(&header[0..8], b"ulfschn1");
    assert_eq!(u32::from_ne_bytes(header[8..12].try_into().unwrap()), 1);
    assert_eq!(u32::from_ne_bytes(header[12..16].try_into().unwrap()), 8);
    assert_eq!(u32::from_ne_bytes(header[16..20].try_into().unwrap()), 16);
    assert_eq!(
        u64::from_ne_bytes(header[24..32].try_into().unwrap()),
        g.data_off as u64
    );
    assert_eq!(u64::from_ne_bytes(header[32..40].try_into().unwrap()), 8192);
    assert_eq!(
        raw.word(OFF_SERVER_STATE).load(Ordering::Acquire),
        STATE_ALIVE
    );
    drop(s);
    assert_eq!(
        raw.word(OFF_SERVER_STATE).load(Ordering::Acquire),
        STATE_GONE,
        "drop marks GONE"
    );
}

#[test]
fn a_jump_of_sq_tail_breaks_the_channel_for_good() {
    let g = Geometry::default();
    for bad in [g.sq_entries + 1, u32::MAX, 1 << 31] {
        let (mut s, raw) = raw_channel(g);
        raw.word(OFF_SQ_TAIL).store(bad, Ordering::Release);
        assert!(s.has_pending(), "a broken ring is work: to report it");
        assert_eq!(s.next_request(), Some(Err(Broken)));
        assert!(s.is_broken());
        // Putting it back does not mend it.
        raw.word(OFF_SQ_TAIL).store(1, Ordering::Release);
        assert_eq!(s.next_request(), Some(Err(Broken)));
    }
    // A full ring is not broken: exactly sq_entries pending is allowed.
    let (mut s, raw) = raw_channel(g);
    for i in 0..g.sq_entries {
        raw.write_req(&g, i, tagged(Op::Nop, 1000 + i));
    }
    raw.word(OFF_SQ_TAIL).store(g.sq_entries, Ordering::Release);
    for i in 0..g.sq_entries {
        let r = s.next_request().unwrap().unwrap();
        assert_eq!(r.tag, 1000 + i);
        assert_eq!(raw.word(OFF_SQ_HEAD).load(Ordering::Acquire), i + 1);
        s.complete(Cqe::ok(r.tag, i as i64));
    }
    assert_eq!(s.next_request(), None);
    assert!(!s.is_broken());
}

#[test]
fn a_client_that_never_takes_completions_stalls_only_itself() {
    let g = Geometry::new(4, 4, 4096).unwrap();
    let (mut s, raw) = raw_channel(g);
    let submit = |from: u32, to: u32| {
        for i in from..to {
            raw.write_req(&g, i, tagged(Op::Nop, i));
        }
        raw.word(OFF_SQ_TAIL).store(to, Ordering::Release);
    };
    submit(0, 4);
    for i in 0..4 {
        let r = s.next_request().unwrap().unwrap();
        assert_eq!(r.tag, i);
        s.complete(Cqe::ok(i, 7));
    }
    assert_eq!(raw.word(OFF_CQ_TAIL).load(Ordering::Acquire), 4);
    assert_eq!(raw.read_cqe(&g, 2), Cqe::ok(2, 7));
    // Four more, but cq_head is still 0: the CQ is full.
    submit(4, 8);
    assert_eq!(s.next_request(), None);
    assert!(!s.has_pending());
    assert!(s.set_idle(), "nothing it can do: the server may sleep");
    assert_eq!(raw.word(OFF_SERVER_IDLE).load(Ordering::Acquire), 1);
    s.clear_idle();
    // One completion taken: one request can be, and no more.
    raw.word(OFF_CQ_HEAD).store(1, Ordering::Release);
    assert!(s.has_pending());
    assert_eq!(s.next_request().unwrap().unwrap().tag, 4);
    assert_eq!(s.next_request(), None, "its slot is reserved for request 4");
    s.complete(Cqe::ok(4, 0));
    // A cq_head past cq_tail is nonsense: treated as full, no panic.
    raw.word(OFF_CQ_HEAD).store(100, Ordering::Release);
    assert_eq!(s.next_request(), None);
    raw.word(OFF_CQ_HEAD).store(u32::MAX, Ordering::Release);
    assert_eq!(s.next_request(), None);
    // Taking them all frees the CQ for the rest.
    raw.word(OFF_CQ_HEAD).store(5, Ordering::Release);
    for want in 5..8 {
        assert_eq!(s.next_request().unwrap().unwrap().tag, want);
    }
    assert_eq!(s.next_request(), None);
    assert!(!s.is_broken());
}

#[test]
fn spans_outside_the_data_area_are_efault() {
    let g = Geometry::new(4, 4, 8192).unwrap();
    let (mut s, raw) = raw_channel(g);
    let mut buf = [0u8; 64];
    for span in [
        Span::new(8192, 1),
        Span::new(8190, 3),
        Span::new(u32::MAX, 1),
        Span::new(1, u32::MAX),
        Span::new(u32::MAX, u32::MAX),
    ] {
        assert_eq!(
            s.copy_in(span, &mut buf[..1]),
            Err(Errno::EFAULT),
            "{span:?}"
        );
        assert_eq!(s.copy_out(span, &buf[..1]), Err(Errno::EFAULT), "{span:?}");
    }
    // A span shorter than the buffer is EFAULT too.
    assert_eq!(
        s.copy_in(Span::new(0, 8), &mut buf[..9]),
        Err(Errno::EFAULT)
    );
    assert_eq!(s.copy_out(Span::new(0, 8), &buf[..9]), Err(Errno::EFAULT));
    // The last bytes are reachable, and the copies are real.
    raw.put_data(&g, 8184, b"ABCDEFGH");
    let mut eight = [0u8; 8];
    s.copy_in(Span::new(8184, 8), &mut eight).unwrap();
    assert_eq!(&eight, b"ABCDEFGH");
    s.copy_out(Span::new(8188, 4), b"wxyz").unwrap();
    assert_eq!(raw.data(&g, 8184, 8), b"ABCDwxyz");
    // A shorter copy fills the start of a longer span.
    s.copy_out(Span::new(100, 50), b"hi").unwrap();
    assert_eq!(raw.data(&g, 100, 2), b"hi");
    s.copy_in(Span::new(8184, 100), &mut [0u8; 0]).unwrap_err();
    s.copy_in(Span::new(8184, 8), &mut [0u8; 0]).unwrap();
}

#[test]
fn path_rules() {
    let g = Geometry::new(4, 4, 16384).unwrap();
    let (s, raw) = raw_channel(g);
    let mut buf = [0u8; 4096];
    raw.put_data(&g, 0, b"/a/b");
    assert_eq!(s.path(Span::new(0, 4), &mut buf), Ok(&b"/a/b"[..]));
    assert_eq!(s.path(Span::new(0, 0), &mut buf), Err(Errno::ENOENT));
    assert_eq!(s.path_or_empty(Span::new(0, 0), &mut buf), Ok(&b""[..]));
    assert_eq!(
        s.path_or_empty(Span::new(20000, 0), &mut buf),
        Err(Errno::EFAULT)
    );
    assert_eq!(s.path(Span::new(16380, 8), &mut buf), Err(Errno::EFAULT));
    raw.put_data(&g, 100, b"a\0b");
    assert_eq!(s.path(Span::new(100, 3), &mut buf), Err(Errno::EINVAL));
    raw.put_data(&g, 4096, &[b'x'; 4096]);
    assert_eq!(
        s.path(Span::new(4096, 4095), &mut buf).map(<[u8]>::len),
        Ok(4095)
    );
    assert_eq!(
        s.path(Span::new(4096, 4096), &mut buf),
        Err(Errno::ENAMETOOLONG)
    );
    assert_eq!(
        s.path(Span::new(4096, 8000), &mut buf),
        Err(Errno::ENAMETOOLONG)
    );
}

#[test]
fn attach_checks_what_it_maps() {
    let (cs, _ss) = seqpacket_pair();
    let g = Geometry::default();
    let (s, memfd, kick) = ServerChannel::create(g).unwrap();
    let dup = |fd: &OwnedFd| fd.try_clone().unwrap();
    let sock = || dup(&cs);
    // Another geometry than the memfd's.
    let other = Geometry::new(64, 64, 8192).unwrap();
    assert_eq!(
        ClientChannel::attach(other, dup(&memfd), dup(&kick), sock()).err(),
        Some(EPROTO)
    );
    // An impossible geometry.
    let mut bad = g;
    bad.sq_entries = 3;
    assert_eq!(
        ClientChannel::attach(bad, dup(&memfd), dup(&kick), sock()).err(),
        Some(EPROTO)
    );
    // An unsealed memfd of the right size.
    let loose = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&loose, g.total_len() as u64).unwrap();
    assert_eq!(
        ClientChannel::attach(g, loose, dup(&kick), sock()).err(),
        Some(EPROTO)
    );
    // A header that does not say what WELCOME said.
    let raw = Raw::map(&memfd, g.total_len());
    raw.word(OFF_SQ_ENTRIES).store(128, Ordering::Release);
    assert_eq!(
        ClientChannel::attach(g, dup(&memfd), dup(&kick), sock()).err(),
        Some(EPROTO)
    );
    raw.word(OFF_SQ_ENTRIES).store(64, Ordering::Release);
    // Requests already in flight.
    raw.word(OFF_SQ_TAIL).store(1, Ordering::Release);
    assert_eq!(
        ClientChannel::attach(g, dup(&memfd), dup(&kick), sock()).err(),
        Some(EPROTO)
    );
    raw.word(OFF_SQ_TAIL).store(0, Ordering::Release);
    assert!(ClientChannel::attach(g, dup(&memfd), dup(&kick), sock()).is_ok());
    // A channel the server already let go.
    s.mark_gone();
    assert_eq!(
        ClientChannel::attach(g, memfd, kick, sock()).err(),
        Some(ENOTCONN)
    );
}

#[test]
fn thousands_of_round_trips_between_two_threads() {
    let (cs, ss) = seqpacket_pair();
    let server = thread::spawn(move || {
        let (chan, kick) = welcome(&ss, 1 << 20);
        serve(chan, kick, ss, Duration::from_micros(20))
    });
    let w = control::hello(cs.as_fd(), 16, 256 << 10).unwrap();
    assert_eq!(
        (w.geometry.sq_entries, w.geometry.data_len),
        (16, 256 << 10)
    );
    let mut c = ClientChannel::attach(w.geometry, w.memfd, w.kick, cs).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut scratch = Vec::new();
    let mut sent = 0u64;
    for i in 0..5000 {
        let len = match i % 4 {
            0 => 0,
            1 => rng.next() as usize % 64,
            2 => rng.next() as usize % 4096,
            _ => rng.next() as usize % (128 << 10),
        };
        client::echo(&mut c, &mut rng, len, &mut scratch);
        sent += 1;
    }
    // Errors come back as -errno, and the channel carries on.
    let mut r = Req::new(Op::Write);
    r.p1 = Span::new(250 << 10, 10 << 10);
    r.p2 = Span::new(0, 10);
    assert_eq!(c.call(r).unwrap().result(), Err(Errno::EFAULT));
    r.op = 0xffff;
    assert_eq!(c.call(r).unwrap().result(), Err(Errno::ENOSYS));
    let p = c.put(0, b"/dir/name").unwrap();
    let mut r = Req::new(Op::Chdir);
    r.p1 = p;
    r.p2 = Span::new(4096, 100);
    assert_eq!(c.call(r).unwrap().result(), Ok(9));
    assert_eq!(c.get(Span::new(4096, 9)).unwrap(), b"/dir/name");
    r.p1 = c.put(0, b"/a\0b").unwrap();
    assert_eq!(c.call(r).unwrap().result(), Err(Errno::EINVAL));
    r.p1 = Span::new(0, 0);
    assert_eq!(c.call(r).unwrap().result(), Err(Errno::ENOENT));
    sent += 5;
    // Pipelined: the ring full, answers in order.
    let n = c.geometry().sq_entries;
    for i in 0..n {
        c.submit(&tagged(Op::Nop, 10_000 + i)).unwrap();
    }
    assert_eq!(
        c.submit(&tagged(Op::Nop, 0)),
        Err(Errno::EAGAIN),
        "no more than sq_entries in flight"
    );
    for i in 0..n {
        assert_eq!(c.wait(10_000 + i).unwrap(), Cqe::ok(10_000 + i, 0));
    }
    assert_eq!(c.wait(1).unwrap_err(), Errno::EINVAL, "nothing in flight");
    sent += n as u64;
    // A wrong tag is a protocol error.
    c.submit(&tagged(Op::Nop, 5)).unwrap();
    assert_eq!(c.wait(6).unwrap_err(), EPROTO);
    sent += 1;
    drop(c);
    assert_eq!(
        server.join().unwrap(),
        sent,
        "the server saw the hangup and every request"
    );
}

#[test]
fn an_idle_server_is_woken_by_a_submit() {
    let (mut s, kick, _ss, mut c) = connected(4, 4096);
    // Busy server: no kick.
    c.submit(&tagged(Op::Nop, 1)).unwrap();
    assert_eq!(c.stats().kicks, 0);
    let r = s.next_request().unwrap().unwrap();
    s.complete(Cqe::ok(r.tag, 0));
    c.wait(1).unwrap();

    let (ready_tx, ready_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        assert!(s.set_idle(), "nothing pending");
        ready_tx.send(()).unwrap();
        let mut fds = [PollFd::new(&kick, PollFlags::IN)];
        let five = rustix::event::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        let t = Instant::now();
        let n = rustix::event::poll(&mut fds, Some(&five)).unwrap();
        let slept = t.elapsed();
        s.clear_idle();
        ulfs_wire::channel::drain_kick(kick.as_fd());
        assert_eq!(n, 1, "woken by the kick, not the timeout");
        let r = s.next_request().unwrap().unwrap();
        s.complete(Cqe::ok(r.tag, 99));
        // The kick was drained: the next poll would sleep.
        let mut fds = [PollFd::new(&kick, PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&zero)).unwrap(), 0);
        (slept, s)
    });
    ready_rx.recv().unwrap();
    thread::sleep(Duration::from_millis(30));
    c.submit(&tagged(Op::Nop, 2)).unwrap();
    assert_eq!(c.stats().kicks, 1);
    assert_eq!(c.wait(2).unwrap().res, 99);
    let (slept, _s) = server.join().unwrap();
    assert!(slept < Duration::from_secs(4), "slept {slept:?}");
}

#[test]
fn a_sleeping_client_is_woken_by_a_completion() {
    let (mut s, _kick, _ss, mut c) = connected(4, 4096);
    c.set_spin(Duration::ZERO);
    let (tx, rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let r = loop {
            if let Some(r) = s.next_request() {
                break r.unwrap();
            }
            thread::yield_now();
        };
        // Long enough for the client to be in FUTEX_WAIT, far shorter
        // than its 100 ms slice.
        thread::sleep(Duration::from_millis(20));
        tx.send(Instant::now()).unwrap();
        s.complete(Cqe::ok(r.tag, 5));
        s
    });
    c.submit(&tagged(Op::Nop, 3)).unwrap();
    let cqe = c.wait(3).unwrap();
    let done = Instant::now();
    let completed = rx.recv().unwrap();
    let s = server.join().unwrap();
    assert_eq!(cqe.res, 5);
    let st = c.stats();
    assert!(st.sleeps >= 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "woken, not timed out: {st:?}");
    assert_eq!(s.wakes(), 1, "the server saw client_waiting and woke it");
    // Woken by the completion (no slice ran out: `timeouts` above), so
    // after it; how soon is the benchmark's business, not a test's.
    assert!(done >= completed);
}

#[test]
fn a_server_marking_gone_wakes_a_waiting_client_with_enotconn() {
    let (mut s, _kick, _ss, mut c) = connected(4, 4096);
    c.set_spin(Duration::ZERO);
    // An answer published before GONE is still delivered.
    c.submit(&tagged(Op::Nop, 1)).unwrap();
    c.submit(&tagged(Op::Nop, 2)).unwrap();
    let r = s.next_request().unwrap().unwrap();
    s.complete(Cqe::ok(r.tag, 0));
    let server = thread::spawn(move || {
        let _second = s.next_request().unwrap().unwrap();
        thread::sleep(Duration::from_millis(20));
        s.mark_gone();
        (Instant::now(), s)
    });
    assert_eq!(c.wait(1).unwrap().tag, 1);
    let t = Instant::now();
    assert_eq!(c.wait(2).unwrap_err(), ENOTCONN);
    let (gone_at, _s) = server.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(Instant::now() >= gone_at);
    assert_eq!(
        c.stats().timeouts,
        0,
        "woken by mark_gone, not by a timeout"
    );
    assert!(c.server_gone());
    assert_eq!(c.submit(&tagged(Op::Nop, 3)).unwrap_err(), ENOTCONN);
}

#[test]
fn a_server_hanging_up_gives_enotconn_after_a_slice() {
    let (mut s, _kick, ss, mut c) = connected(4, 4096);
    c.submit(&tagged(Op::Nop, 1)).unwrap();
    let _taken = s.next_request().unwrap().unwrap();
    // The server's socket closes, but nobody marks the channel GONE: what
    // a SIGKILL looks like (its mapping also goes, but ours stays).
    drop(ss);
    let t = Instant::now();
    assert_eq!(c.wait(1).unwrap_err(), ENOTCONN);
    let took = t.elapsed();
    // At least one slice, then found out (not hung).
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(c.stats().timeouts >= 1);
    drop(s);
}

#[test]
fn fnv_is_sensitive() {
    // The echo check depends on it.
    assert_ne!(fnv(b"ab"), fnv(b"ba"));
}

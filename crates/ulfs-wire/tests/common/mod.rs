//! A miniature server for the tests: the loop a real worker runs (take,
//! answer, spin, go idle, sleep on the kick and the socket), with a few
//! test meanings for the request codes.
//!
//! - NOP → 0.
//! - WRITE: `p1` copied in, reversed, copied out to `p2` → its length,
//!   `aux[0]` = FNV-1a of the reversed bytes.
//! - CHDIR: the path in `p1` (checked by `ServerChannel::path`) copied out
//!   to `p2` → its length.
//! - FSYNC: never answered (a server that hangs, for the death tests).
//! - Anything else → -ENOSYS.

#![allow(dead_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use ulfs_wire::channel::{PathBuf, drain_kick};
use ulfs_wire::{Cqe, Errno, Geometry, Op, Req, ServerChannel, control};

pub fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A small deterministic generator, so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}

fn handle(
    chan: &mut ServerChannel,
    req: &Req,
    bounce: &mut [u8],
    path: &mut PathBuf,
) -> Option<Cqe> {
    let tag = req.tag;
    let r: Result<Cqe, Errno> = match Op::from_u16(req.op) {
        Some(Op::Nop) => Ok(Cqe::ok(tag, 0)),
        Some(Op::Write) => (|| {
            let n = req.p1.len as usize;
            let buf = bounce.get_mut(..n).ok_or(Errno::EFAULT)?;
            chan.copy_in(req.p1, buf)?;
            buf.reverse();
            chan.copy_out(req.p2, buf)?;
            let mut c = Cqe::ok(tag, n as i64);
            c.aux[0] = fnv(buf);
            Ok(c)
        })(),
        Some(Op::Chdir) => (|| {
            let n = chan.path(req.p1, path)?.len();
            chan.copy_out(req.p2, &path[..n])?;
            Ok(Cqe::ok(tag, n as i64))
        })(),
        Some(Op::Fsync) => return None,
        _ => Err(Errno::ENOSYS),
    };
    Some(r.unwrap_or_else(|e| Cqe::err(tag, e)))
}

/// Serves `chan` until the client hangs up or breaks the ring. Spins
/// `spin` on an empty ring before going idle. Returns the requests taken.
pub fn serve(mut chan: ServerChannel, kick: OwnedFd, sock: OwnedFd, spin: Duration) -> u64 {
    let mut bounce = vec![0u8; chan.geometry().data_len as usize];
    let mut path: PathBuf = [0; ulfs::format::PATH_MAX];
    let mut n = 0;
    loop {
        while let Some(r) = chan.next_request() {
            let Ok(req) = r else {
                chan.mark_gone();
                let _ = control::send_gone(sock.as_fd());
                return n;
            };
            n += 1;
            if let Some(c) = handle(&mut chan, &req, &mut bounce, &mut path) {
                chan.complete(c);
            }
        }
        let t = Instant::now();
        while !chan.has_pending() && t.elapsed() < spin {
            std::hint::spin_loop();
        }
        if chan.has_pending() || !chan.set_idle() {
            continue;
        }
        let mut fds = [
            PollFd::new(&kick, PollFlags::IN),
            PollFd::new(&sock, PollFlags::RDHUP),
        ];
        let second = rustix::event::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        let _ = rustix::event::poll(&mut fds, Some(&second));
        let hup = fds[1]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR);
        chan.clear_idle();
        drain_kick(kick.as_fd());
        if hup && !chan.has_pending() {
            return n;
        }
    }
}

/// The server's side of a connection: reads HELLO, grants a channel,
/// answers WELCOME. Returns what `serve` needs.
pub fn welcome(sock: &OwnedFd, max_data: u32) -> (ServerChannel, OwnedFd) {
    let control::Msg::Hello { want_sq, want_data } = control::recv(sock.as_fd()).unwrap() else {
        panic!("expected HELLO");
    };
    let geo = Geometry::negotiate(want_sq, want_data, max_data);
    let (chan, memfd, kick) = ServerChannel::create(geo).unwrap();
    control::send_welcome(sock.as_fd(), 42, &geo, memfd.as_fd(), kick.as_fd()).unwrap();
    (chan, kick)
}

/// Client requests of the test meanings, with their checks.
pub mod client {
    use super::*;
    use ulfs_wire::{ClientChannel, Span};

    /// Sends `len` random bytes through WRITE and checks they come back
    /// reversed, where they were asked to go.
    pub fn echo(c: &mut ClientChannel, rng: &mut Rng, len: usize, scratch: &mut Vec<u8>) {
        let data_len = c.geometry().data_len as usize;
        assert!(2 * len <= data_len);
        scratch.resize(len, 0);
        rng.fill(scratch);
        // Put input and output at varying places, never overlapping.
        let room = data_len - 2 * len;
        let off1 = if room == 0 {
            0
        } else {
            rng.next() as usize % room
        };
        let p1 = c.put(off1 as u32, scratch).unwrap();
        let p2 = Span::new((off1 + len) as u32, len as u32);
        let mut req = Req::new(Op::Write);
        req.p1 = p1;
        req.p2 = p2;
        let cqe = c.call(req).unwrap();
        assert_eq!(cqe.result(), Ok(len as u64));
        scratch.reverse();
        assert_eq!(c.get(p2).unwrap(), &scratch[..]);
        assert_eq!(cqe.aux[0], fnv(scratch));
    }
}

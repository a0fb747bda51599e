//! File locks through the server (LOCK, op.rs): POSIX record locks
//! (`F_SETLK`, `F_SETLKW`, `F_GETLK`), open-file-description locks
//! (`F_OFD_*`) and `flock`, held in the server's one table for all its
//! clients, so they exclude other processes as the kernel's do.
//!
//! The server never waits: a lock another owner is in the way of is
//! refused at once with the holder ([`LockAnswer::Blocked`]). Waiting
//! (`F_SETLKW`, `flock` without `LOCK_NB`) is this side's loop
//! ([`Client::lock_wait`], or [`Client::lock_wait_with`] for a caller that
//! must stop on a signal), so a server worker is never held by a client
//! that waits, and a holder that dies frees its locks at its teardown.
//!
//! What the preload needs is here in its own words: a request made from a
//! `struct flock` or a `flock(2)` operation, and an answer that fills a
//! `struct flock` back ([`Holder::to_flock`]).

use std::time::Duration;

use ulfs::{Errno, Fd, Result};
use ulfs_wire::layout::CQE_WOULD_BLOCK;
use ulfs_wire::op::{LOCK_FLOCK, LOCK_GET, LOCK_OFD, LOCK_POSIX, LOCK_SET};
use ulfs_wire::{Op, Req, Span};

use crate::Client;

/// Whose rules a lock follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockClass {
    /// `F_SETLK`/`F_SETLKW`/`F_GETLK`: the process's.
    Posix,
    /// `F_OFD_SETLK`/`F_OFD_SETLKW`/`F_OFD_GETLK`: the open file
    /// description's.
    Ofd,
    /// `flock(2)`: the description's, the whole file, apart from the
    /// other two.
    Flock,
}

/// Set (or clear) a lock, or ask who is in the way of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockCmd {
    Set,
    /// `F_GETLK`: what would be in the way of the request.
    Get,
}

/// One lock request, as a `struct flock` says it (or a `flock(2)`
/// operation). The server resolves `whence` (it holds the offset and the
/// size) and checks everything as Linux does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRequest {
    pub class: LockClass,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub kind: i32,
    /// `SEEK_SET`, `SEEK_CUR` or `SEEK_END` (ignored for `flock`).
    pub whence: i32,
    pub start: i64,
    /// 0: to the end of the file, whatever its size; negative: the bytes
    /// before `start`.
    pub len: i64,
}

impl LockRequest {
    /// A POSIX (`LockClass::Posix`) or OFD request from a `struct flock`.
    /// (An OFD request's `l_pid` must be 0, which Linux checks before
    /// anything reaches the lock: the caller's to check.)
    pub fn from_flock(class: LockClass, l: &libc::flock) -> LockRequest {
        LockRequest {
            class,
            kind: l.l_type as i32,
            whence: l.l_whence as i32,
            start: l.l_start,
            len: l.l_len,
        }
    }

    /// A `flock(2)` operation: `LOCK_SH`, `LOCK_EX` or `LOCK_UN`, with or
    /// without `LOCK_NB` (which says whether to wait: the caller's
    /// choice of [`Client::lock`] or [`Client::lock_wait`]). EINVAL for
    /// anything else, as `flock` says.
    pub fn flock(op: i32) -> Result<LockRequest> {
        let kind = match op & !libc::LOCK_NB {
            libc::LOCK_SH => libc::F_RDLCK,
            libc::LOCK_EX => libc::F_WRLCK,
            libc::LOCK_UN => libc::F_UNLCK,
            _ => return Err(Errno::EINVAL),
        };
        Ok(LockRequest {
            class: LockClass::Flock,
            kind,
            whence: libc::SEEK_SET,
            start: 0,
            len: 0,
        })
    }
}

/// A lock in a request's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// A write (exclusive) lock, else a read (shared) one.
    pub write: bool,
    pub start: u64,
    /// 0: it runs to the end of any file.
    pub len: u64,
    /// The holding process for a POSIX lock (as the kernel told the
    /// server when it connected); -1 for a lock of an open file
    /// description (OFD, `flock`), as Linux reports it.
    pub pid: i32,
}

impl Holder {
    /// `F_GETLK`'s answer: `struct flock` describing the holder
    /// (`l_whence` SEEK_SET).
    pub fn to_flock(&self) -> libc::flock {
        // SAFETY: `struct flock` is plain integers; all zeros is a valid
        // value (and fills any padding the target has).
        let mut l: libc::flock = unsafe { std::mem::zeroed() };
        l.l_type = if self.write {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        } as _;
        l.l_whence = libc::SEEK_SET as _;
        l.l_start = self.start as i64;
        l.l_len = self.len as i64;
        l.l_pid = self.pid;
        l
    }
}

/// What the server answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockAnswer {
    /// SET: the lock is set (or cleared).
    Granted,
    /// SET: another owner's lock is in the way (`F_SETLK`'s EAGAIN);
    /// GET: this one would be (`F_GETLK`'s answer).
    Blocked(Holder),
    /// GET: nothing is in the way (`F_GETLK` answers `F_UNLCK`).
    Free,
}

/// How long [`Client::lock_wait`] sleeps between tries: from the first
/// value, doubling up to the second.
const WAIT_FIRST: Duration = Duration::from_micros(100);
const WAIT_MOST: Duration = Duration::from_millis(10);

/// What one SET came back with, before the holder's details are asked.
enum Tried {
    Granted,
    /// The holder's `[start, len]` (op.rs: what a refused SET carries).
    Blocked([u64; 2]),
}

impl Client {
    fn lock_req(fd: Fd, cmd: LockCmd, q: &LockRequest) -> Req {
        let class = match q.class {
            LockClass::Posix => LOCK_POSIX,
            LockClass::Ofd => LOCK_OFD,
            LockClass::Flock => LOCK_FLOCK,
        };
        let cmd = match cmd {
            LockCmd::Set => LOCK_SET,
            LockCmd::Get => LOCK_GET,
        };
        Self::req(
            Op::Lock,
            fd,
            [class, cmd, q.kind as i64 as u64, q.whence as i64 as u64],
        )
    }

    /// The range's 16 bytes at the start of the data area (POSIX and OFD;
    /// a `flock` sends none).
    fn lock_range(&mut self, q: &LockRequest) -> Result<Span> {
        if q.class == LockClass::Flock {
            return Ok(Span::EMPTY);
        }
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&q.start.to_le_bytes());
        b[8..].copy_from_slice(&q.len.to_le_bytes());
        self.chan.put(0, &b)
    }

    fn try_set(&mut self, fd: Fd, q: &LockRequest) -> Result<Tried> {
        if q.whence == libc::SEEK_CUR {
            // Sent past `call` (its answer may be a refusal with a
            // holder): the server's copy of a kept offset by hand.
            self.sync_kept_offset(fd)?;
        }
        let mut r = Self::lock_req(fd, LockCmd::Set, q);
        r.p1 = self.lock_range(q)?;
        let cqe = self.chan.call(r)?;
        if cqe.flags & CQE_WOULD_BLOCK != 0 && cqe.res == -(libc::EAGAIN as i64) {
            return Ok(Tried::Blocked(cqe.aux));
        }
        cqe.result()?;
        Ok(Tried::Granted)
    }

    fn get(&mut self, fd: Fd, q: &LockRequest) -> Result<LockAnswer> {
        let mut r = Self::lock_req(fd, LockCmd::Get, q);
        r.p1 = self.lock_range(q)?;
        let cqe = self.call(r)?;
        // op.rs: `res = type | (pid as u32) << 8`, `aux = [start, len]`.
        let typ = (cqe.res & 0xff) as i32;
        if typ == libc::F_UNLCK {
            return Ok(LockAnswer::Free);
        }
        if typ != libc::F_RDLCK && typ != libc::F_WRLCK {
            return Err(Errno::EIO);
        }
        Ok(LockAnswer::Blocked(Holder {
            write: typ == libc::F_WRLCK,
            start: cqe.aux[0],
            len: cqe.aux[1],
            pid: (cqe.res >> 8) as u32 as i32,
        }))
    }

    /// One lock call, answered at once: SET gives `Granted` or `Blocked`
    /// (the holder, with its pid), GET gives `Blocked` or `Free`. Errors
    /// are `fcntl`'s and `flock`'s: EBADF (a bad descriptor, or a lock its
    /// open mode does not allow), EINVAL, EOVERFLOW, ENOLCK (past the
    /// server's caps).
    pub fn lock(&mut self, fd: Fd, cmd: LockCmd, q: &LockRequest) -> Result<LockAnswer> {
        if cmd == LockCmd::Get {
            return self.get(fd, q);
        }
        // A refused SET carries the holder's range only: the rest (its
        // mode, its pid) is a GET of the same request. Should the holder
        // let go in between, the SET is simply tried again.
        let mut range = [0, 0];
        for _ in 0..8 {
            match self.try_set(fd, q)? {
                Tried::Granted => return Ok(LockAnswer::Granted),
                Tried::Blocked(r) => range = r,
            }
            if let LockAnswer::Blocked(h) = self.get(fd, q)? {
                return Ok(LockAnswer::Blocked(h));
            }
        }
        // Locks that come and go faster than two calls: whoever it is.
        Ok(LockAnswer::Blocked(Holder {
            write: true,
            start: range[0],
            len: range[1],
            pid: 0,
        }))
    }

    /// A SET that waits until it is granted (`F_SETLKW`, `flock` without
    /// `LOCK_NB`): tried again after short sleeps (100 µs, doubling up to
    /// 10 ms) while another owner is in the way. Never EINTR: a caller
    /// that must stop on a signal uses [`Client::lock_wait_with`].
    pub fn lock_wait(&mut self, fd: Fd, q: &LockRequest) -> Result<()> {
        let mut pause = WAIT_FIRST;
        self.lock_wait_with(fd, q, || {
            std::thread::sleep(pause);
            pause = (pause * 2).min(WAIT_MOST);
            Ok(())
        })
    }

    /// As [`Client::lock_wait`], with the caller's `pause` between tries:
    /// it sleeps as it likes, and an error it returns (EINTR after a
    /// signal) ends the wait with that error.
    pub fn lock_wait_with(
        &mut self,
        fd: Fd,
        q: &LockRequest,
        mut pause: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        loop {
            match self.try_set(fd, q)? {
                Tried::Granted => return Ok(()),
                Tried::Blocked(_) => pause()?,
            }
        }
    }
}

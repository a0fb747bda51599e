//! Reads without a request (docs/SERVE.md "Direct reads"): a `pread` of a
//! file nobody is changing is copied straight from this process's own
//! read-only mapping of the image, guarded by a read lease
//! (`ulfs::fs::changes`), instead of going to the server and back.
//!
//! - **The view**, set up once per client, after its first few reads or
//!   fstats answered by the server (a short-lived program reading a file
//!   or two would spend more on it than it saves): DIRECT gives the server's
//!   change board and the image's name; this process opens the image
//!   itself, so the kernel decides whether it may read it, and maps it
//!   (`ulfs::store::ImageView`). Anything missing (an older server, an
//!   image this process may not open, another file at that path) and
//!   every read is a request, as before.
//! - **Leases**, per descriptor, taken at the descriptor's third read
//!   (a file opened, read once and closed is not worth one): LEASE gives
//!   the file's size and block runs from the block read on, and the
//!   generation of the file's counter on the board. A read copies from the
//!   view only if the counter has that generation before the copy and
//!   still has it after; otherwise the lease is taken again, and a read it
//!   cannot serve goes to the server. A lease also ends after a second
//!   (so an atime that relatime makes due by age alone is still moved)
//!   and when its descriptor is closed or replaced (`forget`).
//! - The server refuses a lease when a read would move the file's atime
//!   (EAGAIN: the read goes to the server, which moves it, and the next
//!   read asks again), or would at the next clock tick (EALREADY: asked
//!   again a tick later), or the file has shared mappings (EBUSY; any
//!   other refusal too: asked again only after a while, its reads going
//!   to the server meanwhile).
//!
//! - **fstat** of a followed descriptor is answered from the last answer
//!   while the file's counter keeps the generation read before that
//!   answer was asked for (the counter moves with every change of an
//!   open inode, so the answer is what the server would give).
//!
//! A read that failed its check after copying may have written into the
//! caller's buffer beyond what the server's answer then fills (only when
//! another client changed the file during the copy).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ulfs::fs::changes::{ChangeView, Lease, slot_of};
use ulfs::store::ImageView;
use ulfs::{Errno, Fd, Result, Stat};
use ulfs_wire::{Op, Span};

use crate::Client;

/// Reads and fstats answered by the server before the view is set up.
const SERVED_BEFORE_VIEW: u32 = 4;
/// Reads of one descriptor answered by the server before it takes a lease.
const SERVED_BEFORE_LEASE: u32 = 2;
/// How long a lease is trusted at most.
const LEASE_LIFE: Duration = Duration::from_secs(1);
/// How long a descriptor whose lease was refused for its atime waits
/// before asking again: a clock tick (the server's coarse clock moves every
/// 4 ms at most), after which a read through the server has moved it.
const ATIME_REFUSED_FOR: Duration = Duration::from_millis(5);
/// How long a descriptor whose lease was refused otherwise waits before
/// asking again.
const REFUSED_FOR: Duration = Duration::from_millis(50);
/// Runs asked for per lease (a file written in order has one per 2 MiB).
const MOST_RUNS: usize = 512;
/// Descriptors followed at once (the oldest is forgotten past it).
const MOST_FOLLOWED: usize = 64;

const BS: u64 = ulfs::format::BLOCK_SIZE as u64;

/// A client's direct reads (see the module comment).
#[derive(Default)]
pub(crate) struct Direct {
    view: View,
    /// Reads the server answered while there was no view.
    served: u32,
    followed: Vec<Followed>,
    off: bool,
}

#[derive(Default)]
enum View {
    #[default]
    NotYet,
    Unavailable,
    Ready(Box<Ready>),
}

struct Ready {
    image: ImageView,
    board: ChangeView,
}

struct Followed {
    fd: Fd,
    served: u32,
    lease: Option<(Lease, Instant)>,
    refused_until: Option<Instant>,
    /// The file's inode number, once an fstat told it.
    ino: Option<ulfs::Ino>,
    /// The last fstat's answer and the generation its slot had before it
    /// was asked: still the answer while the slot keeps that generation.
    stat: Option<(Stat, u64)>,
}

impl Direct {
    /// The descriptor `fd` names another file, or none, from now on.
    pub(crate) fn forget(&mut self, fd: Fd) {
        self.followed.retain(|f| f.fd != fd);
    }

    fn followed(&mut self, fd: Fd) -> &mut Followed {
        let i = match self.followed.iter().position(|f| f.fd == fd) {
            Some(i) => i,
            None => {
                if self.followed.len() >= MOST_FOLLOWED {
                    self.followed.remove(0);
                }
                self.followed.push(Followed {
                    fd,
                    served: 0,
                    lease: None,
                    refused_until: None,
                    ino: None,
                    stat: None,
                });
                self.followed.len() - 1
            }
        };
        &mut self.followed[i]
    }
}

/// Whether a request leaves every descriptor naming what it named (so the
/// leases held by descriptor stay where they are). Exhaustive: a new
/// request must be placed here.
pub(crate) fn keeps_descriptors(op: Op) -> bool {
    match op {
        Op::Openat
        | Op::Reopen
        | Op::Close
        | Op::Dup
        | Op::Dupfd
        | Op::Dup2
        | Op::PrepareFork
        | Op::PrepareExec
        | Op::SetMaxFds
        | Op::CopyRange
        | Op::ChdirIno => false,
        Op::Nop
        | Op::CancelToken
        | Op::Umask
        | Op::Getcwd
        | Op::Chdir
        | Op::Fchdir
        | Op::Sync
        | Op::FcntlGetfl
        | Op::FcntlSetfl
        | Op::FileDescription
        | Op::Read
        | Op::Pread
        | Op::Write
        | Op::Pwrite
        | Op::Lseek
        | Op::Ftruncate
        | Op::Fallocate
        | Op::Fsync
        | Op::Fdatasync
        | Op::Getdents64
        | Op::Fstat
        | Op::Fstatat
        | Op::Statx
        | Op::Statfs
        | Op::Fstatfs
        | Op::Faccessat
        | Op::Readlinkat
        | Op::Mkdirat
        | Op::Mknodat
        | Op::Unlinkat
        | Op::Renameat2
        | Op::Linkat
        | Op::Symlinkat
        | Op::Truncate
        | Op::Utimensat
        | Op::Futimens
        | Op::Fchmodat
        | Op::Fchmod
        | Op::Fchownat
        | Op::Fchown
        | Op::Lock
        | Op::MapShared
        | Op::Msync
        | Op::Unmap
        | Op::Direct
        | Op::Lease => true,
    }
}

impl Client {
    /// Keeps the leases by descriptor true across `req` (before it is
    /// sent) and its answer `res` (after).
    pub(crate) fn descriptors_before(&mut self, op: Op, fd: Fd, fd2: Fd) {
        match op {
            Op::Close => self.direct.forget(fd),
            Op::Dup2 => self.direct.forget(fd2),
            Op::Openat | Op::Reopen | Op::Dup | Op::Dupfd => {}
            _ => self.direct.followed.clear(),
        }
    }

    pub(crate) fn descriptors_after(&mut self, op: Op, res: i64) {
        if matches!(op, Op::Openat | Op::Reopen | Op::Dup | Op::Dupfd)
            && let Ok(fd) = Fd::try_from(res)
        {
            self.direct.forget(fd);
        }
    }

    /// Turns direct reads on or off for this client (on by default; off,
    /// every read is a request, as for a benchmark of the round trip).
    pub fn set_direct_reads(&mut self, on: bool) {
        self.direct.off = !on;
        if !on {
            self.direct.followed.clear();
        }
    }

    /// Whether this client reads leased files straight from its view of
    /// the image now (the view is set up after its first reads).
    pub fn direct_reads_ready(&self) -> bool {
        matches!(self.direct.view, View::Ready(_))
    }

    /// `pread` from the view, or None when it must be a request.
    pub(crate) fn pread_direct(&mut self, fd: Fd, buf: &mut [u8], off: u64) -> Option<usize> {
        if buf.is_empty() || !self.view_ready() {
            return None;
        }
        let now = Instant::now();
        let f = self.direct.followed(fd);
        if f.refused_until.is_some_and(|t| now < t) {
            return None;
        }
        if f.lease.is_none() {
            f.served += 1;
            if f.served <= SERVED_BEFORE_LEASE {
                return None;
            }
        }
        // Once with the lease held, once more with a fresh one. The lease
        // is used where it is kept: a read copies no lease (its runs are
        // a vector: an allocation per read otherwise).
        for fresh in [false, true] {
            if fresh && let Err(e) = self.take_lease(fd, off) {
                let f = self.direct.followed(fd);
                f.lease = None;
                // EAGAIN (an atime due) ends with the read the server now
                // makes; EALREADY (due again at the next tick) a tick
                // later; anything else is asked about again only after a
                // while.
                f.refused_until = match e {
                    Errno::EAGAIN => None,
                    Errno(libc::EALREADY) => Some(now + ATIME_REFUSED_FOR),
                    _ => Some(now + REFUSED_FOR),
                };
                return None;
            }
            let Direct { view, followed, .. } = &self.direct;
            let View::Ready(view) = view else {
                return None;
            };
            let lease = followed
                .iter()
                .find(|f| f.fd == fd)
                .and_then(|f| f.lease.as_ref())
                .filter(|(l, taken)| now < *taken + LEASE_LIFE && covers(l, off, buf.len()));
            let copied = match lease {
                Some((lease, _)) => copy_leased(view, lease, buf, off),
                None if fresh => Copied::Uncovered,
                None => continue,
            };
            match copied {
                Copied::Done(n) => return Some(n),
                Copied::Stale => self.direct.followed(fd).lease = None,
                Copied::Uncovered => return None,
                Copied::Lost => {
                    // The view lost bytes (the image shrank under it):
                    // the server says what the file holds from now on.
                    self.direct.view = View::Unavailable;
                    self.direct.followed.clear();
                    return None;
                }
            }
        }
        None
    }

    /// `fstat(fd)`'s answer kept from the last one, while the file's
    /// counter says nothing changed since: every change of an open inode
    /// (size, times, mode, owner, links, blocks) bumps it.
    pub(crate) fn fstat_kept(&self, fd: Fd) -> Option<Stat> {
        let View::Ready(view) = &self.direct.view else {
            return None;
        };
        let f = self.direct.followed.iter().find(|f| f.fd == fd)?;
        let (st, generation) = f.stat.as_ref()?;
        (view.board.load(slot_of(st.ino)) == *generation).then_some(*st)
    }

    /// Before an fstat request: the generation of the file's slot, when
    /// its inode number is known.
    pub(crate) fn fstat_before(&self, fd: Fd) -> Option<u64> {
        let View::Ready(view) = &self.direct.view else {
            return None;
        };
        if self.direct.off {
            return None;
        }
        let f = self.direct.followed.iter().find(|f| f.fd == fd)?;
        Some(view.board.load(slot_of(f.ino?)))
    }

    /// After an fstat request: its answer, kept if the slot's generation
    /// was read before it was asked.
    pub(crate) fn fstat_after(&mut self, fd: Fd, st: &Stat, before: Option<u64>) {
        if self.direct.off || !matches!(self.direct.view, View::Ready(_)) {
            return;
        }
        let f = self.direct.followed(fd);
        f.stat = match (f.ino, before) {
            (Some(ino), Some(g)) if ino == st.ino => Some((*st, g)),
            _ => None,
        };
        f.ino = Some(st.ino);
    }

    /// Whether the view is there; counts the calls that would have used
    /// it, and sets it up after the first few (a failure is for good:
    /// every read is then a request).
    pub(crate) fn view_ready(&mut self) -> bool {
        // A server that stopped answers nothing more, from the view either
        // (the request path says ENOTCONN). One load of a word the server
        // writes once.
        if self.direct.off || self.chan.server_gone() {
            return false;
        }
        match self.direct.view {
            View::Ready(_) => true,
            View::Unavailable => false,
            View::NotYet => {
                self.direct.served += 1;
                if self.direct.served > SERVED_BEFORE_VIEW {
                    self.direct.view = match self.open_view() {
                        Ok(v) => View::Ready(Box::new(v)),
                        Err(_) => View::Unavailable,
                    };
                }
                false
            }
        }
    }

    fn open_view(&mut self) -> Result<Ready> {
        let room = (self.data_len().min(ulfs::format::PATH_MAX)) as u32;
        let mut r = Self::req(Op::Direct, -1, [0; 4]);
        r.p1 = Span::new(0, room);
        let cqe = self.call(r)?;
        let board = self.take_object(cqe.tag, 0)?;
        let path = self.chan.get(Span::new(0, cqe.res as u32))?.to_vec();
        let board = ChangeView::map(std::os::fd::AsFd::as_fd(&board))?;
        let path = Path::new(std::ffi::OsStr::from_bytes(&path));
        let image = ImageView::open(path, cqe.aux[0], cqe.aux[1])?;
        Ok(Ready { image, board })
    }

    /// Asks for a lease of `fd` from `off` and keeps it.
    fn take_lease(&mut self, fd: Fd, off: u64) -> Result<()> {
        let room = ulfs_wire::lease::lease_len(MOST_RUNS).min(self.data_len());
        let mut r = Self::req(Op::Lease, fd, [off, MOST_RUNS as u64, 0, 0]);
        r.p1 = Span::new(0, room as u32);
        let cqe = self.call(r)?;
        let n = ulfs_wire::lease::lease_len(cqe.res as usize);
        let bytes = self.chan.get(Span::new(0, n as u32))?;
        let lease = ulfs_wire::lease::decode(bytes).ok_or(Errno::EPROTO)?;
        let f = self.direct.followed(fd);
        f.lease = Some((lease, Instant::now()));
        f.refused_until = None;
        Ok(())
    }
}

/// Whether `lease` says where every byte of `[off, off + len)` below the
/// file's size is (a read past the end needs nothing more).
fn covers(lease: &Lease, off: u64, len: usize) -> bool {
    let end = off.saturating_add(len as u64).min(lease.size);
    if off >= end {
        return true;
    }
    let (first, last) = (off / BS, (end - 1) / BS);
    match (lease.runs.first(), lease.runs.last()) {
        (Some(a), Some(z)) => a.first <= first && last < z.first + z.blocks as u64,
        _ => false,
    }
}

enum Copied {
    Done(usize),
    /// The file changed: the lease is over.
    Stale,
    /// The lease does not say where some of it is.
    Uncovered,
    /// The view lost bytes.
    Lost,
}

fn copy_leased(view: &Ready, lease: &Lease, buf: &mut [u8], off: u64) -> Copied {
    if view.board.load(lease.slot) != lease.generation {
        return Copied::Stale;
    }
    if !covers(lease, off, buf.len()) {
        return Copied::Uncovered;
    }
    let n = lease.size.saturating_sub(off).min(buf.len() as u64) as usize;
    let mut done = 0;
    // Runs in order, no gaps (decode checked): find the first, walk on.
    let mut i = lease
        .runs
        .partition_point(|r| r.first + r.blocks as u64 <= off / BS);
    while done < n {
        let at = off + done as u64;
        let Some(run) = lease.runs.get(i) else {
            return Copied::Uncovered;
        };
        let lblk = at / BS;
        let run_end = (run.first + run.blocks as u64).saturating_mul(BS);
        let take = (run_end.saturating_sub(at) as usize).min(n - done);
        if take == 0 {
            return Copied::Uncovered;
        }
        let dst = &mut buf[done..done + take];
        if run.bid == 0 {
            dst.fill(0);
        } else {
            // A server's numbers, checked: past the view is as lost.
            let image_off = run
                .bid
                .checked_add(lblk - run.first)
                .and_then(|b| b.checked_mul(BS))
                .and_then(|o| o.checked_add(at % BS));
            match image_off {
                Some(o) if view.image.read(o, dst).is_ok() => {}
                _ => return Copied::Lost,
            }
        }
        done += take;
        i += 1;
    }
    if view.board.load_after_reads(lease.slot) != lease.generation {
        return Copied::Stale;
    }
    Copied::Done(n)
}

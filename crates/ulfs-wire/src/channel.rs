//! Both ends of a channel: the server's [`ServerChannel`] (creates the
//! memfd, takes requests, answers) and the client's [`ClientChannel`]
//! (submits, waits). This module owns every access to the shared mapping,
//! so the rules for memory another process can write live in one place.
//!
//! # Trust
//!
//! The client can write any byte of the mapping at any time, so the
//! server:
//! - keeps its own geometry and its own copies of the indices it owns
//!   (`sq_head`, `cq_tail`), and never reads a word it owns back;
//! - copies each `Req` out once (a volatile read) and works on the copy;
//! - checks every span against its own `data_len` in `u64`, and moves data
//!   with raw-pointer copies, never a `&[u8]`/`&mut [u8]` over the shared
//!   bytes (a reference would promise the compiler that nobody else writes
//!   them); a torn copy is the client's own problem, because every check
//!   is made on the private copy afterwards;
//! - treats `sq_tail` as hostile: more than `sq_entries` pending is
//!   [`Broken`], the only disconnecting error;
//! - takes a request only when the CQ has room for its answer, so a client
//!   that never advances `cq_head` stalls only itself;
//! - never sleeps on the client's memory: it waits on the kick eventfd.
//!
//! The memfd is sealed against shrinking before it is shared, so no access
//! can take a SIGBUS. The client trusts the server (it is the file system)
//! and uses plain slices of its own mapping for the data area.
//!
//! # Orderings
//!
//! Each side publishes its index with a Release store after writing the
//! slots it covers, and reads the other side's index with an Acquire load
//! before touching the slots it covers: the client's `sq_tail` covers the
//! `Req`s (and the data they point at), the server's `cq_tail` covers the
//! `Cqe`s (and the data they filled), the client's `cq_head` hands CQ slots
//! back to the server. The server's `sq_head` is informative: the client
//! bounds itself by completions (at most `sq_entries` requests without
//! their answer, and `cq_entries >= sq_entries`), and a completion is only
//! written after its request was copied out.
//!
//! # Sleep and wake
//!
//! Each direction is a Dekker-style handshake, "publish, fence, look":
//!
//! - Client to server. Client: store `sq_tail` (Release); `fence(SeqCst)`;
//!   load `server_idle`, and write the kick eventfd if it is set. Server
//!   going to sleep: store `server_idle = 1`; `fence(SeqCst)`; load
//!   `sq_tail`, and sleep (in epoll on the kick) only if nothing is
//!   pending ([`ServerChannel::set_idle`]).
//! - Server to client. Server: store `cq_tail` (Release); `fence(SeqCst)`;
//!   load `client_waiting`, and FUTEX_WAKE `cq_tail` if it is set. Client
//!   going to sleep: store `client_waiting = 1`; `fence(SeqCst)`; load
//!   `cq_tail`, and FUTEX_WAIT on the value it saw.
//!
//! Why no wakeup is lost: the two SeqCst fences are totally ordered. If the
//! sleeper's fence comes first, the publisher's later load sees the flag
//! set and it wakes (kick / FUTEX_WAKE). If the publisher's fence comes
//! first, the sleeper's later load sees the new index and it does not
//! sleep. (Both loads seeing old values is the store-buffering outcome the
//! fences forbid.) The remaining gap, a FUTEX_WAKE that comes between the
//! client's check and its FUTEX_WAIT, is closed by the kernel: FUTEX_WAIT
//! compares `cq_tail` with the value the client saw under the futex's hash
//! lock, and the server changed it before waking, so the wait returns at
//! once. The eventfd has no gap: it is a counter, a kick written before
//! the server's epoll_wait is still there when it looks.
//!
//! The futex is not PRIVATE: the word lives in a memfd mapped by two
//! processes, and a shared futex is keyed by the file and offset.
//!
//! A client never sleeps unbounded: FUTEX_WAIT has a 100 ms timeout, after
//! which it checks `server_state == GONE` (a server that said goodbye;
//! [`ServerChannel::mark_gone`] also wakes it) and polls the control
//! socket for a hangup (a server killed without a word). Either is
//! ENOTCONN.
//!
//! Flags are only hints in the other direction: a stale `server_idle`
//! costs a spurious kick, a stale `client_waiting` a spurious FUTEX_WAKE.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use rustix::thread::futex;
use ulfs::Errno;
use ulfs::format::PATH_MAX;

use crate::PROTOCOL_VERSION;
use crate::layout::*;

/// How long a client sleeps in FUTEX_WAIT before it checks that the server
/// is still there.
pub const WAIT_SLICE: Duration = Duration::from_millis(100);

/// How long a client spins on `cq_tail` before it sleeps, unless told
/// otherwise ([`ClientChannel::set_spin`]): about one server round trip
/// when both are running, far below the cost of a futex sleep and wake.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(5);

/// How long a client spins before it yields between looks at the ring.
const YIELD_AFTER: Duration = Duration::from_micros(1);

/// Spins between two clock reads: a clock read is ~20 ns, a spin a few.
const SPIN_BATCH: u32 = 64;

/// The client broke the ring protocol (`sq_tail` moved by more than the
/// ring holds). The server answers nothing more on this channel, marks it
/// GONE and tears it down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broken;

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the client broke the channel's ring protocol")
    }
}

impl std::error::Error for Broken {}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

const ENOTCONN: Errno = Errno(libc::ENOTCONN);
const EPROTO: Errno = Errno(libc::EPROTO);

/// One `mmap` of a channel memfd, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it can
// be used and unmapped from any thread. Every access goes through atomics
// or raw copies whose callers hold the right borrow (`&mut` for writes of
// non-atomic bytes), so sharing `&Mapping` across threads adds no race
// inside this process.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize) -> Result<Mapping, Errno> {
        // SAFETY: a fresh shared mapping of `len` bytes of a memfd whose
        // size is at least `len` (the caller sized or checked it) and
        // sealed against shrinking; no existing memory is affected.
        let p = unsafe {
            rustix::mm::mmap(
                ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(errno)?;
        let base = NonNull::new(p.cast::<u8>()).ok_or(Errno::ENOMEM)?;
        Ok(Mapping { base, len })
    }

    /// The header word at `off` (one of the `OFF_*` line offsets).
    #[inline]
    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(64) && off + 4 <= HEADER_LEN);
        // SAFETY: `off` is a 64-byte-aligned offset inside the header page,
        // so the pointer is in bounds and aligned for a u32; the mapping
        // lives as long as `&self`. An `AtomicU32` has u32's layout and any
        // bits are a valid value, and the only accesses to these words,
        // from either process, are atomic (or, from a hostile client,
        // hardware stores, which the atomics tolerate).
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }

    #[inline]
    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.len);
        // SAFETY: `off <= len`, so the result is in the mapping or one
        // past its end.
        unsafe { self.base.as_ptr().add(off) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping made in `new`, and no
        // reference into it outlives `self` (every accessor borrows self).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A path buffer for [`ServerChannel::path`]: one per worker, so paths are
/// copied out of shared memory without allocating.
pub type PathBuf = [u8; PATH_MAX];

/// The server's end of one channel.
pub struct ServerChannel {
    map: Mapping,
    /// The server's own copy: shared memory's is informative only.
    geo: Geometry,
    /// Next request to take (the server's copy of `sq_head`).
    sq_head: u32,
    /// Next completion slot (the server's copy of `cq_tail`).
    cq_tail: u32,
    /// Requests taken and not yet completed: their CQ slots are reserved.
    taken: u32,
    /// The client's `cq_head` as last read (see `cq_has_room`). Private to
    /// the server; atomic only so that `has_pending(&self)` can refresh it
    /// and the channel stays `Sync` (Relaxed accesses are plain moves).
    cq_head_seen: AtomicU32,
    broken: bool,
    wakes: u64,
}

impl ServerChannel {
    /// A new channel: memfd created, sized, sealed (SHRINK, GROW, SEAL),
    /// mapped and its header written; and its kick eventfd (non-blocking,
    /// so neither side can ever block on it). Returns the channel and the
    /// two fds to send in WELCOME; the server keeps the kick for its epoll
    /// and may close the memfd once sent (its mapping stays).
    pub fn create(geo: Geometry) -> Result<(ServerChannel, OwnedFd, OwnedFd), Errno> {
        geo.validate()?;
        let memfd = rustix::fs::memfd_create(
            "ulfs-channel",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(errno)?;
        rustix::fs::ftruncate(&memfd, geo.total_len() as u64).map_err(errno)?;
        rustix::fs::fcntl_add_seals(
            &memfd,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )
        .map_err(errno)?;
        let map = Mapping::new(memfd.as_fd(), geo.total_len())?;
        // SAFETY: the mapping is fresh and not shared yet (the memfd has
        // not left this process), each write is in the header page at the
        // naturally aligned offset its type needs (checked by layout.rs's
        // asserts).
        unsafe {
            ptr::write(map.at(OFF_MAGIC).cast::<[u8; 8]>(), MAGIC);
            ptr::write(
                map.at(OFF_VERSION).cast::<u32>(),
                u32::from(PROTOCOL_VERSION),
            );
            ptr::write(map.at(OFF_SQ_ENTRIES).cast::<u32>(), geo.sq_entries);
            ptr::write(map.at(OFF_CQ_ENTRIES).cast::<u32>(), geo.cq_entries);
            ptr::write(map.at(OFF_DATA_OFF).cast::<u64>(), u64::from(geo.data_off));
            ptr::write(map.at(OFF_DATA_LEN).cast::<u64>(), u64::from(geo.data_len));
        }
        map.word(OFF_SERVER_STATE)
            .store(STATE_ALIVE, Ordering::Release);
        let kick = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(errno)?;
        let chan = ServerChannel {
            map,
            geo,
            sq_head: 0,
            cq_tail: 0,
            taken: 0,
            cq_head_seen: AtomicU32::new(0),
            broken: false,
            wakes: 0,
        };
        Ok((chan, memfd, kick))
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Requests the client published and the server has not taken, or
    /// `Err(Broken)` if `sq_tail` is impossible.
    #[inline]
    fn pending(&self) -> Result<u32, Broken> {
        if self.broken {
            return Err(Broken);
        }
        // Acquire: pairs with the client's Release of `sq_tail`, so the
        // `Req`s (and their data) it covers are visible.
        let tail = self.map.word(OFF_SQ_TAIL).load(Ordering::Acquire);
        let pending = tail.wrapping_sub(self.sq_head);
        if pending > self.geo.sq_entries {
            Err(Broken)
        } else {
            Ok(pending)
        }
    }

    /// Whether the CQ has a free slot beyond those reserved for requests
    /// already taken. A `cq_head` the client moved past `cq_tail` (or
    /// anywhere impossible) reads as "full": it stalls only that client.
    ///
    /// The `cq_head` seen last is tried first: its line is written by the
    /// client on every completion it takes, and reading it on every request
    /// would cost a cache miss per round trip while the CQ is nearly empty.
    /// An old value only underestimates the room (an honest `cq_head` only
    /// grows), so the shared word is read only when the CQ looks full.
    #[inline]
    fn cq_has_room(&self) -> bool {
        let room = |head: u32| {
            let used = self.cq_tail.wrapping_add(self.taken).wrapping_sub(head);
            used < self.geo.cq_entries
        };
        if room(self.cq_head_seen.load(Ordering::Relaxed)) {
            return true;
        }
        // Acquire: pairs with the client's Release of `cq_head`, so its
        // reads of the slots it hands back are done before we rewrite them.
        let head = self.map.word(OFF_CQ_HEAD).load(Ordering::Acquire);
        self.cq_head_seen.store(head, Ordering::Relaxed);
        room(head)
    }

    /// The next request, copied out of the ring, or `None` when there is
    /// none or its answer would have no CQ slot yet. `Some(Err(Broken))`
    /// once the client broke the ring protocol (and ever after).
    pub fn next_request(&mut self) -> Option<Result<Req, Broken>> {
        match self.pending() {
            Err(b) => {
                self.broken = true;
                return Some(Err(b));
            }
            Ok(0) => return None,
            Ok(_) => {}
        }
        if !self.cq_has_room() {
            return None;
        }
        let slot = (self.sq_head & (self.geo.sq_entries - 1)) as usize;
        let off = self.geo.sq_off() + slot * REQ_SIZE;
        // SAFETY: `slot < sq_entries`, so the 64-byte record lies in the
        // SQ, inside the mapping, 64-byte aligned. A volatile read copies
        // it exactly once: every later check is made on this private copy,
        // whatever the client writes meanwhile. Any bits are a valid `Req`
        // (integers only).
        let req = unsafe { ptr::read_volatile(self.map.at(off).cast::<Req>()) };
        self.sq_head = self.sq_head.wrapping_add(1);
        self.taken += 1;
        // Release: our read of the slot is done before the client can see
        // it free (informative; see the module comment).
        self.map
            .word(OFF_SQ_HEAD)
            .store(self.sq_head, Ordering::Release);
        Some(Ok(req))
    }

    /// Answers the oldest request taken and not yet answered (answers go
    /// in request order), and wakes the client if it sleeps.
    pub fn complete(&mut self, cqe: Cqe) {
        debug_assert!(self.taken > 0, "a completion without a request");
        self.taken = self.taken.saturating_sub(1);
        let slot = (self.cq_tail & (self.geo.cq_entries - 1)) as usize;
        let off = self.geo.cq_off() + slot * CQE_SIZE;
        // SAFETY: `slot < cq_entries`, so the 32-byte record lies in the
        // CQ, inside the mapping, aligned. The slot was reserved when its
        // request was taken (the client had handed it back).
        unsafe { ptr::write_volatile(self.map.at(off).cast::<Cqe>(), cqe) };
        self.cq_tail = self.cq_tail.wrapping_add(1);
        let tail = self.map.word(OFF_CQ_TAIL);
        // Release: the Cqe and any data copied out are visible before the
        // client can see the new tail.
        tail.store(self.cq_tail, Ordering::Release);
        // See "Sleep and wake" above.
        fence(Ordering::SeqCst);
        if self.map.word(OFF_CLIENT_WAITING).load(Ordering::Relaxed) != 0 {
            self.wakes += 1;
            let _ = futex::wake(tail, futex::Flags::empty(), i32::MAX as u32);
        }
    }

    /// Whether there is work: a request that can be taken now, or a broken
    /// ring to report. A request whose answer has no CQ slot does not
    /// count: an honest client never has one (it keeps at most
    /// `sq_entries` outstanding), and a dishonest one may wait for its
    /// next kick.
    pub fn has_pending(&self) -> bool {
        match self.pending() {
            Err(Broken) => true,
            Ok(0) => false,
            Ok(_) => self.cq_has_room(),
        }
    }

    /// About to sleep on this channel's kick: sets `server_idle`, fences,
    /// and looks again. Returns `true` if the server may sleep now (any
    /// later submit will kick); `false` if work arrived, in which case the
    /// flag is already cleared again.
    pub fn set_idle(&self) -> bool {
        self.map.word(OFF_SERVER_IDLE).store(1, Ordering::Relaxed);
        // See "Sleep and wake" above.
        fence(Ordering::SeqCst);
        if self.has_pending() {
            self.clear_idle();
            false
        } else {
            true
        }
    }

    /// Back at work on this channel (woken): clients stop kicking.
    pub fn clear_idle(&self) {
        self.map.word(OFF_SERVER_IDLE).store(0, Ordering::Relaxed);
    }

    /// The server lets the channel go: `server_state = GONE`, and a
    /// sleeping client is woken to see it. Also done on drop.
    pub fn mark_gone(&self) {
        self.map
            .word(OFF_SERVER_STATE)
            .store(STATE_GONE, Ordering::Release);
        fence(Ordering::SeqCst);
        let _ = futex::wake(
            self.map.word(OFF_CQ_TAIL),
            futex::Flags::empty(),
            i32::MAX as u32,
        );
    }

    /// Whether `next_request` has reported [`Broken`].
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// FUTEX_WAKEs done by `complete` (the client was asleep).
    pub fn wakes(&self) -> u64 {
        self.wakes
    }

    /// EFAULT unless `span` lies in the data area and `n <= span.len`;
    /// otherwise the offset of the span in the mapping.
    #[inline]
    fn window(&self, span: Span, n: usize) -> Result<usize, Errno> {
        if span.fits(self.geo.data_len) && n as u64 <= span.len as u64 {
            Ok(self.geo.data_off as usize + span.off as usize)
        } else {
            Err(Errno::EFAULT)
        }
    }

    /// Copies `dst.len()` bytes from the start of `span` into `dst`:
    /// EFAULT if the span leaves the data area or is shorter than `dst`.
    pub fn copy_in(&self, span: Span, dst: &mut [u8]) -> Result<(), Errno> {
        let off = self.window(span, dst.len())?;
        // SAFETY: `window` checked `off..off + dst.len()` lies in the data
        // area, inside the mapping; `dst` is private memory, so the two do
        // not overlap. A raw copy forms no reference to the shared bytes;
        // if the client rewrites them meanwhile, `dst` gets some mix of
        // bytes, which is all the client can achieve (checks come after).
        unsafe { ptr::copy_nonoverlapping(self.map.at(off), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` to the start of `span`: EFAULT if the span leaves the
    /// data area or is shorter than `src`.
    pub fn copy_out(&mut self, span: Span, src: &[u8]) -> Result<(), Errno> {
        let off = self.window(span, src.len())?;
        // SAFETY: as in `copy_in`, the other way; `&mut self` keeps this
        // process's other accesses to the data area out meanwhile.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.map.at(off), src.len()) };
        Ok(())
    }

    /// The path in `span`, copied into `buf`, checked as the engine checks
    /// paths (`namei::check_path`): outside the data area EFAULT, empty
    /// ENOENT, `PATH_MAX` bytes or more ENAMETOOLONG (PATH_MAX counts the
    /// NUL), a NUL inside EINVAL. The check runs on the copy.
    pub fn path<'b>(&self, span: Span, buf: &'b mut PathBuf) -> Result<&'b [u8], Errno> {
        self.window(span, 0)?;
        let n = span.len as usize;
        if n == 0 {
            return Err(Errno::ENOENT);
        }
        if n >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let dst = &mut buf[..n];
        self.copy_in(span, dst)?;
        ulfs::posix::namei::check_path(dst)?;
        Ok(dst)
    }

    /// The bytes of a path in `span`, copied into `buf` as they are, for a
    /// call that checks its paths itself, in its own order (as the engine
    /// does: rename walks its first path before it looks at the second,
    /// as Linux does). Only EFAULT outside the data area; a path of
    /// `PATH_MAX` bytes or more is cut to `PATH_MAX`, which the engine
    /// still finds too long (ENAMETOOLONG).
    pub fn raw_path<'b>(&self, span: Span, buf: &'b mut PathBuf) -> Result<&'b [u8], Errno> {
        self.window(span, 0)?;
        let n = (span.len as usize).min(PATH_MAX);
        let dst = &mut buf[..n];
        self.copy_in(Span::new(span.off, n as u32), dst)?;
        Ok(dst)
    }

    /// As [`ServerChannel::path`], but an empty span is an empty path (for
    /// `AT_EMPTY_PATH`).
    pub fn path_or_empty<'b>(&self, span: Span, buf: &'b mut PathBuf) -> Result<&'b [u8], Errno> {
        if span.len == 0 {
            self.window(span, 0)?;
            return Ok(&buf[..0]);
        }
        self.path(span, buf)
    }
}

impl Drop for ServerChannel {
    fn drop(&mut self) {
        // A client still attached learns at once that nobody will answer.
        self.mark_gone();
    }
}

/// Empties a kick eventfd after the server woke on it, so the next epoll
/// round sleeps until the next kick. Non-blocking: nothing to read is fine.
pub fn drain_kick(kick: BorrowedFd<'_>) {
    let mut buf = [0u8; 8];
    let _ = rustix::io::read(kick, &mut buf);
}

/// Counters of a client's slow paths, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests submitted.
    pub requests: u64,
    /// Kick eventfd writes (the server was idle).
    pub kicks: u64,
    /// FUTEX_WAIT calls.
    pub sleeps: u64,
    /// FUTEX_WAITs that ran out their [`WAIT_SLICE`].
    pub timeouts: u64,
}

/// The client's end of one channel. One user at a time (`&mut self`): a
/// multi-threaded client puts it behind its own lock. A forked child must
/// not use its parent's (the mapping is shared with the parent): it drops
/// it and ADOPTs its own.
pub struct ClientChannel {
    map: Mapping,
    geo: Geometry,
    kick: OwnedFd,
    sock: OwnedFd,
    sq_tail: u32,
    cq_head: u32,
    next_tag: u32,
    spin: Duration,
    stats: ClientStats,
}

impl ClientChannel {
    /// Maps the channel a WELCOME described. `geo` is the WELCOME's
    /// geometry; the memfd must be exactly its size and sealed against
    /// resizing (else mapping it could SIGBUS), and the header must agree
    /// with it, say ALIVE, and have nothing in flight: otherwise EPROTO.
    /// `sock` is the control socket, kept to notice a dead server and for
    /// the caller's later messages ([`ClientChannel::socket`]). The memfd
    /// is closed once mapped.
    pub fn attach(
        geo: Geometry,
        memfd: OwnedFd,
        kick: OwnedFd,
        sock: OwnedFd,
    ) -> Result<ClientChannel, Errno> {
        geo.validate().map_err(|_| EPROTO)?;
        let st = rustix::fs::fstat(&memfd).map_err(errno)?;
        if st.st_size as u64 != geo.total_len() as u64 {
            return Err(EPROTO);
        }
        let seals = rustix::fs::fcntl_get_seals(&memfd).map_err(errno)?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL) {
            return Err(EPROTO);
        }
        let map = Mapping::new(memfd.as_fd(), geo.total_len())?;
        drop(memfd);
        // SAFETY: each read is at a naturally aligned offset in the header
        // page of a mapping at least a page long; volatile because the
        // server wrote them from another process.
        let (magic, version, sq, cq, data_off, data_len) = unsafe {
            (
                ptr::read_volatile(map.at(OFF_MAGIC).cast::<[u8; 8]>()),
                ptr::read_volatile(map.at(OFF_VERSION).cast::<u32>()),
                ptr::read_volatile(map.at(OFF_SQ_ENTRIES).cast::<u32>()),
                ptr::read_volatile(map.at(OFF_CQ_ENTRIES).cast::<u32>()),
                ptr::read_volatile(map.at(OFF_DATA_OFF).cast::<u64>()),
                ptr::read_volatile(map.at(OFF_DATA_LEN).cast::<u64>()),
            )
        };
        let agrees = magic == MAGIC
            && version == u32::from(PROTOCOL_VERSION)
            && sq == geo.sq_entries
            && cq == geo.cq_entries
            && data_off == u64::from(geo.data_off)
            && data_len == u64::from(geo.data_len);
        if !agrees {
            return Err(EPROTO);
        }
        if map.word(OFF_SERVER_STATE).load(Ordering::Acquire) != STATE_ALIVE {
            return Err(ENOTCONN);
        }
        let idx = |off| map.word(off).load(Ordering::Acquire);
        let sq_tail = idx(OFF_SQ_TAIL);
        let cq_head = idx(OFF_CQ_HEAD);
        if sq_tail != idx(OFF_SQ_HEAD) || cq_head != idx(OFF_CQ_TAIL) || sq_tail != cq_head {
            return Err(EPROTO);
        }
        Ok(ClientChannel {
            map,
            geo,
            kick,
            sock,
            sq_tail,
            cq_head,
            next_tag: 1,
            spin: DEFAULT_SPIN,
            stats: ClientStats::default(),
        })
    }

    /// Connects to the server at `path`, says HELLO and attaches the
    /// channel it grants. Returns the channel and the client id. A REFUSED
    /// answer is its errno.
    pub fn connect(
        path: &std::path::Path,
        want_sq: u32,
        want_data: u32,
    ) -> Result<(ClientChannel, u64), Errno> {
        let sock = crate::control::connect(path)?;
        let w = crate::control::hello(sock.as_fd(), want_sq, want_data)?;
        let id = w.client_id;
        Ok((
            ClientChannel::attach(w.geometry, w.memfd, w.kick, sock)?,
            id,
        ))
    }

    /// Connects to the server at `path` and ADOPTs the process a
    /// PREPARE_FORK or PREPARE_EXEC set aside under `token` (a forked
    /// child, or the program an exec started). Returns the channel and the
    /// client id; a REFUSED answer is its errno (EACCES for a token that is
    /// not this process's, or no longer there).
    pub fn adopt(
        path: &std::path::Path,
        token: &[u8; 16],
        kind: crate::control::AdoptKind,
    ) -> Result<(ClientChannel, u64), Errno> {
        let sock = crate::control::connect(path)?;
        let w = crate::control::adopt(sock.as_fd(), token, kind)?;
        let id = w.client_id;
        Ok((
            ClientChannel::attach(w.geometry, w.memfd, w.kick, sock)?,
            id,
        ))
    }

    /// Lets the caller move the channel's two descriptors (the control
    /// socket, then the kick eventfd): a library living inside another
    /// program keeps its own descriptors out of the program's numbering.
    /// `relocate` returns a duplicate to keep instead (the old one is
    /// closed), or `None` to keep the old one.
    pub fn relocate_fds(&mut self, mut relocate: impl FnMut(BorrowedFd<'_>) -> Option<OwnedFd>) {
        if let Some(sock) = relocate(self.sock.as_fd()) {
            self.sock = sock;
        }
        if let Some(kick) = relocate(self.kick.as_fd()) {
            self.kick = kick;
        }
    }

    /// The socket and kick descriptors, in that order.
    pub fn raw_fds(&self) -> [i32; 2] {
        use std::os::fd::AsRawFd;
        [self.sock.as_raw_fd(), self.kick.as_raw_fd()]
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The control socket (for messages other than the channel's).
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// How long `wait` spins before sleeping; zero sleeps at once.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Requests submitted whose completion has not been taken.
    pub fn in_flight(&self) -> u32 {
        self.sq_tail.wrapping_sub(self.cq_head)
    }

    /// Whether the server has said it is gone.
    pub fn server_gone(&self) -> bool {
        self.map.word(OFF_SERVER_STATE).load(Ordering::Acquire) == STATE_GONE
    }

    /// The data area, whole. The server writes it only within the out
    /// spans of requests in flight, so what a completed request filled is
    /// stable until the next request naming those bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: `data_off..data_off + data_len` is inside the mapping
        // (attach checked the size); it lives as long as `&self`. The
        // client trusts the server to write only the spans it was given.
        unsafe {
            std::slice::from_raw_parts(
                self.map.at(self.geo.data_off as usize),
                self.geo.data_len as usize,
            )
        }
    }

    /// The data area, writable: stage a request's input here.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` keeps this process's other
        // views out.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.map.at(self.geo.data_off as usize),
                self.geo.data_len as usize,
            )
        }
    }

    /// Copies `bytes` to offset `off` of the data area → their span;
    /// EFAULT if they do not fit.
    pub fn put(&mut self, off: u32, bytes: &[u8]) -> Result<Span, Errno> {
        let len = u32::try_from(bytes.len()).map_err(|_| Errno::EFAULT)?;
        let span = Span::new(off, len);
        if !span.fits(self.geo.data_len) {
            return Err(Errno::EFAULT);
        }
        self.data_mut()[off as usize..][..bytes.len()].copy_from_slice(bytes);
        Ok(span)
    }

    /// The bytes of `span`; EFAULT if it leaves the data area.
    pub fn get(&self, span: Span) -> Result<&[u8], Errno> {
        if !span.fits(self.geo.data_len) {
            return Err(Errno::EFAULT);
        }
        Ok(&self.data()[span.off as usize..][..span.len as usize])
    }

    /// Publishes `req` (its `tag` as given). EAGAIN if `sq_entries`
    /// requests are already in flight (take a completion first); ENOTCONN
    /// if the server is gone. Kicks the server if it is idle.
    pub fn submit(&mut self, req: &Req) -> Result<(), Errno> {
        if self.in_flight() >= self.geo.sq_entries {
            return Err(Errno::EAGAIN);
        }
        if self.server_gone() {
            return Err(ENOTCONN);
        }
        self.stats.requests += 1;
        let slot = (self.sq_tail & (self.geo.sq_entries - 1)) as usize;
        let off = self.geo.sq_off() + slot * REQ_SIZE;
        // SAFETY: `slot < sq_entries`, so the record lies in the SQ, in the
        // mapping, aligned. The server copied this slot's previous request
        // out before answering it, and that answer has been taken (fewer
        // than `sq_entries` are in flight).
        unsafe { ptr::write_volatile(self.map.at(off).cast::<Req>(), *req) };
        self.sq_tail = self.sq_tail.wrapping_add(1);
        // Release: the Req and its data are visible before the new tail.
        self.map
            .word(OFF_SQ_TAIL)
            .store(self.sq_tail, Ordering::Release);
        // See "Sleep and wake" above.
        fence(Ordering::SeqCst);
        if self.map.word(OFF_SERVER_IDLE).load(Ordering::Relaxed) != 0 {
            self.stats.kicks += 1;
            // EAGAIN means the counter is saturated: the server has kicks
            // enough. Nothing else can fail on an eventfd we hold.
            let _ = rustix::io::write(&self.kick, &1u64.to_ne_bytes());
        }
        Ok(())
    }

    /// The next completion if one is there, without waiting. EPROTO if
    /// the server published more completions than requests.
    pub fn try_complete(&mut self) -> Result<Option<Cqe>, Errno> {
        // Acquire: pairs with the server's Release of `cq_tail`, so the Cqe
        // and the data it filled are visible.
        let tail = self.map.word(OFF_CQ_TAIL).load(Ordering::Acquire);
        let ready = tail.wrapping_sub(self.cq_head);
        if ready == 0 {
            return Ok(None);
        }
        if ready > self.in_flight() {
            return Err(EPROTO);
        }
        let slot = (self.cq_head & (self.geo.cq_entries - 1)) as usize;
        let off = self.geo.cq_off() + slot * CQE_SIZE;
        // SAFETY: `slot < cq_entries`, so the record lies in the CQ, in the
        // mapping, aligned; any bits are a valid `Cqe`.
        let cqe = unsafe { ptr::read_volatile(self.map.at(off).cast::<Cqe>()) };
        self.cq_head = self.cq_head.wrapping_add(1);
        // Release: our read of the slot is done before the server reuses it.
        self.map
            .word(OFF_CQ_HEAD)
            .store(self.cq_head, Ordering::Release);
        Ok(Some(cqe))
    }

    /// Waits for the next completion and checks it answers `tag` (the
    /// server answers in order; another tag is EPROTO). ENOTCONN if the
    /// server is gone, EINVAL if nothing is in flight.
    pub fn wait(&mut self, tag: u32) -> Result<Cqe, Errno> {
        let cqe = self.wait_next()?;
        if cqe.tag == tag { Ok(cqe) } else { Err(EPROTO) }
    }

    /// Waits for the next completion, whatever its tag: spins for the spin
    /// time, then sleeps in FUTEX_WAIT slices of [`WAIT_SLICE`], checking
    /// between slices that the server is still there.
    pub fn wait_next(&mut self) -> Result<Cqe, Errno> {
        if self.in_flight() == 0 {
            return Err(Errno::EINVAL);
        }
        if let Some(c) = self.try_complete()? {
            return Ok(c);
        }
        if !self.spin.is_zero() {
            let start = Instant::now();
            loop {
                for _ in 0..SPIN_BATCH {
                    std::hint::spin_loop();
                    if let Some(c) = self.try_complete()? {
                        return Ok(c);
                    }
                }
                let spun = start.elapsed();
                if spun >= self.spin {
                    break;
                }
                // Past the first microsecond, let the CPU go between looks:
                // the server's worker may be waiting for this very CPU.
                if spun >= YIELD_AFTER {
                    std::thread::yield_now();
                }
            }
        }
        let r = self.sleep_for_completion();
        self.map
            .word(OFF_CLIENT_WAITING)
            .store(0, Ordering::Relaxed);
        r
    }

    fn sleep_for_completion(&mut self) -> Result<Cqe, Errno> {
        let slice = futex::Timespec {
            tv_sec: WAIT_SLICE.as_secs() as i64,
            tv_nsec: WAIT_SLICE.subsec_nanos() as _,
        };
        loop {
            self.map
                .word(OFF_CLIENT_WAITING)
                .store(1, Ordering::Relaxed);
            // See "Sleep and wake" above.
            fence(Ordering::SeqCst);
            let seen = self.map.word(OFF_CQ_TAIL).load(Ordering::Acquire);
            if seen != self.cq_head
                && let Some(c) = self.try_complete()?
            {
                return Ok(c);
            }
            // Answers published before GONE are still taken above.
            if self.server_gone() {
                return Err(ENOTCONN);
            }
            self.stats.sleeps += 1;
            let tail = self.map.word(OFF_CQ_TAIL);
            match futex::wait(tail, futex::Flags::empty(), seen, Some(&slice)) {
                // Woken, or `cq_tail` had moved on: look again.
                Ok(()) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::TIMEDOUT) => {
                    self.stats.timeouts += 1;
                    if self.hung_up() {
                        // A last look: the server may have answered and
                        // then died.
                        return self.try_complete()?.ok_or(ENOTCONN);
                    }
                }
                Err(e) => return Err(errno(e)),
            }
        }
    }

    /// Whether the control socket's other end is closed: the server died
    /// (its process's fds close, even on SIGKILL).
    fn hung_up(&self) -> bool {
        let mut fds = [PollFd::new(&self.sock, PollFlags::RDHUP)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut fds, Some(&zero)) {
            Ok(0) => false,
            Ok(_) => fds[0]
                .revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL),
            Err(_) => false,
        }
    }

    /// Submits `req` under a fresh tag and waits for its answer.
    pub fn call(&mut self, mut req: Req) -> Result<Cqe, Errno> {
        req.tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1);
        self.submit(&req)?;
        self.wait(req.tag)
    }
}

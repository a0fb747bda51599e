//! Memory every process of a run shares: a `memfd` the first process
//! makes at load and every later one inherits (its number travels in
//! `ULFS_RUN_SHARED`; the descriptor is the library's, at a high number,
//! kept across exec). It holds
//!
//! - the *slots* of open file descriptions that several processes hold,
//!   with the offset they share (`inherit.rs`);
//! - who is *waiting* for the image: a process that finds the image held
//!   by another puts its pid here while it waits, and the holder, at its
//!   next call on a host descriptor (where it may block on a pipe the
//!   waiter is to fill or drain), lets go of the image if it can
//!   (`state.rs`). That is what keeps `cat /ulfs/a | sort > /ulfs/b` from
//!   waiting on itself.
//!
//! - the *record locks* every process holds on image files (`locks.rs`):
//!   written by a process as it lets go of the image, read by the next to
//!   mount it. Only the process holding the image reads or writes them, so
//!   the image lock is their lock.
//!
//! An `eventfd` goes with it (its number after the memory's in
//! `ULFS_RUN_SHARED`): a waiter signals it, so a holder polling a pipe
//! wakes at once rather than at its next look.
//!
//! Slot 0 is the header: the magic (in its offset) and the waiting pid
//! (in its count). Every bit pattern is a valid slot (atomic integers), so
//! a process killed half way leaves nothing unsafe, only a slot held for
//! the rest of the run.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::fds;
use crate::real::real;

/// The shared memory's descriptor.
pub const ENV_SHARED: &str = "ULFS_RUN_SHARED";

#[repr(C)]
struct Slot {
    refs: AtomicU32,
    _pad: u32,
    offset: AtomicU64,
}

const SLOTS: usize = 16384;
const SLOT_BYTES: usize = SLOTS * std::mem::size_of::<Slot>();
/// Words of one lock record (`locks.rs` says what they hold).
pub const LOCK_WORDS: usize = 5;
/// Most lock records the run holds at once (past it, ENOLCK).
pub const LOCK_RECORDS: usize = 4096;
/// The lock area after the slots: a count, then the records.
const LOCK_AREA_WORDS: usize = 1 + LOCK_RECORDS * LOCK_WORDS;
const BYTES: usize = SLOT_BYTES + LOCK_AREA_WORDS * 8;
/// "ulfsrun2", in the header's offset field (2: with the lock area).
const MAGIC: u64 = u64::from_le_bytes(*b"ulfsrun2");

struct Table {
    slots: &'static [Slot],
    locks: &'static [AtomicU64],
}

static TABLE: OnceLock<Table> = OnceLock::new();

fn table() -> Option<&'static [Slot]> {
    TABLE.get().map(|t| t.slots)
}

/// The run's lock records (each `LOCK_WORDS` words). Call only while
/// holding the image.
pub fn read_locks() -> Vec<[u64; LOCK_WORDS]> {
    let Some(area) = TABLE.get().map(|t| t.locks) else {
        return Vec::new();
    };
    // Whatever another process left: a count past the area is cut.
    let n = (area[0].load(Ordering::Acquire) as usize).min(LOCK_RECORDS);
    (0..n)
        .map(|i| std::array::from_fn(|w| area[1 + i * LOCK_WORDS + w].load(Ordering::Relaxed)))
        .collect()
}

/// Replaces the run's lock records. Call only while holding the image.
/// False (nothing written) when there are more than `LOCK_RECORDS`, or
/// no shared memory.
pub fn write_locks(records: &[[u64; LOCK_WORDS]]) -> bool {
    let Some(area) = TABLE.get().map(|t| t.locks) else {
        return false;
    };
    if records.len() > LOCK_RECORDS {
        return false;
    }
    for (i, r) in records.iter().enumerate() {
        for (w, v) in r.iter().enumerate() {
            area[1 + i * LOCK_WORDS + w].store(*v, Ordering::Relaxed);
        }
    }
    area[0].store(records.len() as u64, Ordering::Release);
    true
}

/// Whether the run has shared memory for locks.
pub fn has_lock_area() -> bool {
    TABLE.get().is_some()
}

/// Maps the shared memory behind `fd` (`fresh`: just made, to be stamped
/// with the magic; otherwise it must carry it).
fn map(fd: i32, fresh: bool) -> Option<Table> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let fstat = real!(fstat: unsafe extern "C" fn(libc::c_int, *mut libc::stat) -> libc::c_int);
    // SAFETY: `st` is valid for writing.
    if unsafe { fstat(fd, &mut st) } != 0
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
        || st.st_size as usize != BYTES
    {
        return None;
    }
    let mmap = real!(mmap: unsafe extern "C" fn(*mut libc::c_void, libc::size_t, libc::c_int, libc::c_int, libc::c_int, libc::off_t) -> *mut libc::c_void);
    // SAFETY: a fresh shared mapping of the whole file, never unmapped.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is BYTES long, page-aligned, lives as long as
    // the process, and every bit pattern is a valid slot.
    let slots = unsafe { std::slice::from_raw_parts(p.cast::<Slot>(), SLOTS) };
    // SAFETY: the lock area follows the slots inside the same mapping
    // (8-aligned: SLOT_BYTES is a multiple of 16); every bit pattern is a
    // valid atomic word.
    let locks = unsafe {
        std::slice::from_raw_parts(
            p.cast::<u8>().add(SLOT_BYTES).cast::<AtomicU64>(),
            LOCK_AREA_WORDS,
        )
    };
    if fresh {
        slots[0].offset.store(MAGIC, Ordering::Release);
    } else if slots[0].offset.load(Ordering::Acquire) != MAGIC {
        let munmap =
            real!(munmap: unsafe extern "C" fn(*mut libc::c_void, libc::size_t) -> libc::c_int);
        // SAFETY: the mapping just made, unused.
        unsafe { munmap(p, BYTES) };
        return None;
    }
    Some(Table { slots, locks })
}

/// At load: maps the run's shared memory, or makes it in the run's first
/// process. A number in the environment that is not the run's memory (a
/// program closed it, or set the variable itself) is ignored: the
/// process then makes its own, shared with what it starts.
pub fn init() {
    let given = std::env::var(ENV_SHARED).ok();
    let mut numbers = given
        .iter()
        .flat_map(|v| v.split(','))
        .map(|n| n.parse::<i32>().ok());
    let (memory, wake) = (numbers.next().flatten(), numbers.next().flatten());
    if let Some(fd) = memory
        && let Some(t) = map(fd, false)
    {
        fds::set_shared_file(fd);
        let _ = TABLE.set(t);
        if let Some(w) = wake.filter(|&w| is_eventfd(w)) {
            fds::set_wake_file(w);
        }
        return;
    }
    make();
}

fn is_eventfd(fd: i32) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|p| p.as_os_str() == "anon_inode:[eventfd]")
}

fn make() -> Option<()> {
    // SAFETY: a NUL-terminated name; no flags (the memory crosses execs).
    let fd = unsafe { libc::memfd_create(c"ulfs-run".as_ptr(), 0) };
    if fd < 0 {
        return None;
    }
    let ftruncate = real!(ftruncate: unsafe extern "C" fn(libc::c_int, libc::off_t) -> libc::c_int);
    // SAFETY: sizing the memfd just made.
    if unsafe { ftruncate(fd, BYTES as libc::off_t) } != 0 {
        fds::close_kernel(fd);
        return None;
    }
    let fd = fds::move_high(fd, false);
    if fd < 0 {
        return None;
    }
    let Some(t) = map(fd, true) else {
        fds::close_kernel(fd);
        return None;
    };
    fds::set_shared_file(fd);
    let _ = TABLE.set(t);
    // SAFETY: a fresh eventfd, no flags (it crosses execs).
    let wake = unsafe { libc::eventfd(0, 0) };
    let wake = if wake >= 0 {
        fds::move_high(wake, false)
    } else {
        -1
    };
    if wake >= 0 {
        fds::set_wake_file(wake);
    }
    let value = format!("{fd},{wake}");
    // SAFETY: at load, before `main`: no other thread reads the
    // environment. Programs started by `system` or `posix_spawn` find the
    // memory through it.
    unsafe { std::env::set_var(ENV_SHARED, &value) };
    Some(())
}

/// The environment entry that passes the memory on to an exec.
pub fn env_entry() -> Option<String> {
    table()?;
    let wake = fds::wake_file().unwrap_or(-1);
    Some(format!("{ENV_SHARED}={},{wake}", fds::shared_file()?))
}

/// The descriptor a holder polls to wake when someone starts waiting.
pub fn wake_fd() -> Option<i32> {
    fds::wake_file()
}

/// A holder woke on the wake descriptor: its count goes back to zero.
pub fn drain_wake() {
    if let Some(w) = fds::wake_file() {
        let mut v: libc::eventfd_t = 0;
        // SAFETY: a valid out-parameter; glibc reads with its own call.
        unsafe { libc::eventfd_read(w, &mut v) };
    }
}

/// A free slot, taken (one holder) with `offset`.
pub fn take(offset: u64) -> Option<u32> {
    let t = table()?;
    let i = 1 + t[1..].iter().position(|s| {
        s.refs
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })?;
    t[i].offset.store(offset, Ordering::Release);
    Some(i as u32)
}

fn slot(i: u32) -> Option<&'static Slot> {
    (i != 0).then(|| table()?.get(i as usize)).flatten()
}

/// Whether slot `i` exists in this run's memory.
pub fn exists(i: u32) -> bool {
    slot(i).is_some()
}

/// One more process holds slot `i`.
pub fn hold(i: u32) {
    if let Some(s) = slot(i) {
        s.refs.fetch_add(1, Ordering::AcqRel);
    }
}

/// One holder fewer.
pub fn release(i: u32) {
    if let Some(s) = slot(i) {
        let _ = s
            .refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
    }
}

pub fn offset(i: u32) -> Option<u64> {
    Some(slot(i)?.offset.load(Ordering::Acquire))
}

pub fn set_offset(i: u32, offset: u64) {
    if let Some(s) = slot(i) {
        s.offset.store(offset, Ordering::Release);
    }
}

/// This process waits for the image (`on`), or no longer does.
pub fn want(on: bool) {
    let Some(t) = table() else {
        return;
    };
    let me = std::process::id();
    if on {
        let before = t[0].refs.swap(me, Ordering::AcqRel);
        if before != me
            && let Some(w) = fds::wake_file()
        {
            // SAFETY: the run's eventfd; glibc writes with its own call.
            unsafe { libc::eventfd_write(w, 1) };
        }
    } else {
        let _ = t[0]
            .refs
            .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Whether another live process waits for the image (one load when none
/// does).
#[inline]
pub fn wanted() -> bool {
    let Some(t) = table() else {
        return false;
    };
    let pid = t[0].refs.load(Ordering::Relaxed);
    pid != 0 && pid != std::process::id() && waiter_alive(pid)
}

#[cold]
fn waiter_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 || crate::errno() == libc::EPERM;
    if !alive && let Some(t) = table() {
        let _ = t[0]
            .refs
            .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
    alive
}

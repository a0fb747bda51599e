//! Faults on the image mapping: a SIGBUS raised by an access to a mapped
//! image becomes an error the store reports, never the death of the process.
//!
//! An access to a `MAP_SHARED` mapping raises SIGBUS when the kernel cannot
//! produce the page: the file was truncated under the mapping, the device
//! returned an I/O error, or the page is a hole that the host file system
//! has no room to fill (tmpfs allocates a page even to read a hole). The
//! default action kills the process; ulfs promises its caller errors.
//!
//! The mechanism:
//! - Every `MmapStore` registers its mapping (address range, descriptor,
//!   writability) in a fixed static table of atomics (`TABLE`) for its
//!   life; registration and removal take no lock and the table is never
//!   reallocated, so the handler reads it safely at any instant. Each slot
//!   is a seqlock: its sequence number is odd while the slot changes, and
//!   the handler trusts a slot only if it read the same even number before
//!   and after reading the range.
//! - The first registration installs a process-wide SIGBUS handler
//!   (`SA_SIGINFO | SA_ONSTACK`, so it runs on the alternate signal stack
//!   Rust's std gives its threads) and keeps the previous disposition.
//! - The handler looks up the faulting address (`si_addr`, trusted only for
//!   kernel-generated signals, `si_code > 0`). In a registered mapping it
//!   maps an anonymous zero page over the faulting page (`mmap MAP_FIXED |
//!   MAP_ANONYMOUS | MAP_PRIVATE`) and returns, so the access completes and
//!   reads zeros. If the page is a hole inside the file of a read-only
//!   mapping, zeros are exactly the file's content and nothing is recorded
//!   (a read-only mount of a sparse image on a full tmpfs reads correctly).
//!   Otherwise the bytes are lost: the slot's `faulted` flag and the global
//!   fault count are raised, and the store reports it from then on
//!   (`BlockStore::faulted`; `flush` fails with EIO). The journal then
//!   counts as failed (`Journal::has_failed`), which makes the volume
//!   read-only as a failed flush does, and `Volume::read_at` fails with
//!   EIO: zeros now stand where the lost bytes were, on pages no one can
//!   name any more, so no read of file data is trusted.
//! - Any other SIGBUS is passed on: to the previous handler if there was
//!   one (std's stack-overflow handler, or the host program's), called with
//!   the same arguments, in the form (SA_SIGINFO or not) it was installed
//!   with. std's handler restores the default action and returns, so the
//!   fault repeats and kills; for a signal sent by a process (`kill -BUS`),
//!   which does not repeat, ulfs raises it again once the previous handler
//!   has restored the default, so it kills too. If
//!   the previous disposition was the default, the default is restored and
//!   the signal raised again, so it kills as it would have without ulfs
//!   (it is blocked while the handler runs and is delivered on return). If
//!   it was ignored, a signal sent by a process stays ignored and a fault
//!   kills (what Linux does for an ignored fault).
//!
//! The handler allocates nothing, takes no lock, and calls only
//! async-signal-safe system calls (mmap, fstat, lseek, sigaction, raise);
//! it saves and restores `errno`. The hot path pays nothing: no system
//! call, and one relaxed atomic load per check.
//!
//! Limits: a host program that installs its own SIGBUS handler after ulfs
//! and does not chain to the previous one turns this off. With more than
//! `SLOTS` mappings at once the extra ones are unprotected (as before).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering, fence};

/// Mappings that can be registered at once.
const SLOTS: usize = 4096;

struct Slot {
    /// Held by a registration (claimed before its fields are written).
    claimed: AtomicBool,
    /// Even: stable. Odd: being changed.
    seq: AtomicUsize,
    start: AtomicUsize,
    /// 0: free.
    len: AtomicUsize,
    fd: AtomicI32,
    writable: AtomicBool,
    faulted: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            claimed: AtomicBool::new(false),
            seq: AtomicUsize::new(0),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            writable: AtomicBool::new(false),
            faulted: AtomicBool::new(false),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// Faults that lost bytes, in any mapping of this process, ever.
static FAULTS: AtomicU64 = AtomicU64::new(0);

/// The SIGBUS disposition before ulfs installed its handler.
static PREVIOUS: OnceLock<Previous> = OnceLock::new();
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

struct Previous(libc::sigaction);
// SAFETY: a plain C struct of integers and function addresses, written once
// before the handler can read it and never changed after.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

/// Faults that lost bytes so far in this process. Cheap (one relaxed load):
/// while it is 0, no store needs asking.
#[inline]
pub fn fault_count() -> u64 {
    // The handler runs on the thread whose access faulted, between two of
    // its instructions: keep the compiler from moving this load across the
    // accesses it is meant to follow.
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    let n = FAULTS.load(Ordering::Relaxed);
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    n
}

/// A mapping registered with the handler; unregistered on drop (which must
/// come before the mapping is unmapped, so no later mapping at the same
/// address is mistaken for it).
#[derive(Debug)]
pub struct Registration {
    slot: Option<usize>,
}

impl Registration {
    /// Registers `len` bytes mapped at `start` from offset 0 of `fd`. The
    /// descriptor must stay open while registered.
    pub fn new(start: *const u8, len: usize, fd: i32, writable: bool) -> Registration {
        install();
        for (i, s) in TABLE.iter().enumerate() {
            if s.claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            // Seqlock write: odd, fence, fields, even (Release).
            s.seq.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::Release);
            s.start.store(start as usize, Ordering::Relaxed);
            s.fd.store(fd, Ordering::Relaxed);
            s.writable.store(writable, Ordering::Relaxed);
            s.faulted.store(false, Ordering::Relaxed);
            s.len.store(len, Ordering::Relaxed);
            s.seq.fetch_add(1, Ordering::Release);
            return Registration { slot: Some(i) };
        }
        Registration { slot: None }
    }

    /// A fault lost bytes of this mapping.
    #[inline]
    pub fn faulted(&self) -> bool {
        self.slot
            .is_some_and(|i| TABLE[i].faulted.load(Ordering::Relaxed))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let s = &TABLE[i];
            s.seq.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::Release);
            s.len.store(0, Ordering::Relaxed);
            s.start.store(0, Ordering::Relaxed);
            s.fd.store(-1, Ordering::Relaxed);
            s.seq.fetch_add(1, Ordering::Release);
            s.claimed.store(false, Ordering::Release);
        }
    }
}

/// Installs the handler once per process, after recording the previous
/// disposition (so the handler always finds it).
fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: sysconf has no memory arguments.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        PAGE_SIZE.store(
            if page > 0 { page as usize } else { 4096 },
            Ordering::Relaxed,
        );
        // SAFETY: sigaction structs are plain data and zeroed is a valid
        // start (no flags; the mask is emptied). The handler's body is
        // async-signal-safe (see the module comment). A handler another
        // thread installs between the two sigaction calls would be lost;
        // only a program racing ulfs's first mount could do that.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return;
            }
            let _ = PREVIOUS.set(Previous(old));
            let mut new: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_sigbus;
            new.sa_sigaction = handler as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGBUS, &new, std::ptr::null_mut());
        }
    });
}

/// The registered slot whose range holds `addr`, if any.
fn find(addr: usize) -> Option<&'static Slot> {
    TABLE.iter().find(|s| {
        let before = s.seq.load(Ordering::Acquire);
        if before % 2 == 1 {
            return false;
        }
        let start = s.start.load(Ordering::Relaxed);
        let len = s.len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let after = s.seq.load(Ordering::Relaxed);
        before == after && len > 0 && addr >= start && addr - start < len
    })
}

/// If the page at `offset` of `fd` is a hole inside the file (so its
/// content is zeros), where that hole ends: the next data, or the end of
/// the file. Leaves the file position as it was.
fn hole_end(fd: i32, offset: usize) -> Option<usize> {
    let offset = libc::off_t::try_from(offset).ok()?;
    // SAFETY: fstat writes only into `st`, a local; lseek takes no memory.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0
            || st.st_mode & libc::S_IFMT != libc::S_IFREG
            || offset >= st.st_size
        {
            return None;
        }
        let pos = libc::lseek(fd, 0, libc::SEEK_CUR);
        // -1 (ENXIO): no data from here to the end, a hole to the end.
        let data = libc::lseek(fd, offset, libc::SEEK_DATA);
        if pos >= 0 {
            libc::lseek(fd, pos, libc::SEEK_SET);
        }
        match data {
            d if d == offset => None,
            d if d > offset => Some(d.min(st.st_size) as usize),
            _ => Some(st.st_size as usize),
        }
    }
}

/// Replaces the faulting page of a registered mapping with a zero page and
/// records the loss; for a hole of a read-only mapping, the whole hole, and
/// nothing is lost. False if the pages could not be replaced.
fn absorb(slot: &Slot, addr: usize) -> bool {
    let page = PAGE_SIZE.load(Ordering::Relaxed);
    let base = addr & !(page - 1);
    let start = slot.start.load(Ordering::Relaxed);
    let len = slot.len.load(Ordering::Relaxed);
    let writable = slot.writable.load(Ordering::Relaxed);
    // A hole of a read-only mapping reads as the zeros it holds; one call
    // covers the rest of the hole, so a large hole costs one fault and one
    // mapping, not one per page. Only whole pages of hole count (a page
    // larger than the host's blocks may hold data after a hole).
    let off = base - start;
    let hole = if writable {
        None
    } else {
        hole_end(slot.fd.load(Ordering::Relaxed), off)
            .map(|end| (end.min(len) & !(page - 1)).saturating_sub(off))
            .filter(|&span| span > 0)
    };
    let span = hole.unwrap_or(page);
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: `base .. base + span` lies inside a mapping this process
    // registered and still owns (it unregisters before unmapping; `span`
    // stops at the mapping's end, `len`, a whole number of pages as the
    // kernel rounds it); MAP_FIXED replaces those pages only. The bytes seen
    // through them become zeros, which the fault flag below (or the file's
    // own hole) accounts for.
    let got = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            span,
            prot,
            libc::MAP_FIXED | libc::MAP_ANONYMOUS | libc::MAP_PRIVATE,
            -1,
            0,
        )
    };
    if got == libc::MAP_FAILED {
        return false;
    }
    if hole.is_none() {
        slot.faulted.store(true, Ordering::Relaxed);
        FAULTS.fetch_add(1, Ordering::Relaxed);
    }
    true
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; the pointer is valid for the thread.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler;
    // si_addr is meaningful for kernel-generated SIGBUS (si_code > 0).
    let addr =
        unsafe { (!info.is_null() && (*info).si_code > 0).then(|| (*info).si_addr() as usize) };
    if let Some(addr) = addr
        && let Some(slot) = find(addr)
        && absorb(slot, addr)
    {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        return;
    }
    pass_on(sig, info, ctx, addr.is_some());
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands a SIGBUS that is not ulfs's to whatever would have had it.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, fault: bool) {
    let Some(Previous(prev)) = PREVIOUS.get() else {
        return die(sig);
    };
    match prev.sa_sigaction {
        libc::SIG_DFL => die(sig),
        libc::SIG_IGN if fault => die(sig),
        libc::SIG_IGN => {}
        f if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous disposition was installed with
            // SA_SIGINFO, so this address is such a handler.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(f) };
            f(sig, info, ctx);
            reraise_if_reset(sig, fault);
        }
        f => {
            // SAFETY: installed without SA_SIGINFO: a one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(f) };
            f(sig);
            reraise_if_reset(sig, fault);
        }
    }
}

/// A handler that restores the default action and returns (std's does so
/// for a SIGBUS that is not a stack overflow) counts on the fault to happen
/// again and kill. A signal sent by a process does not happen again, so it
/// is raised once more for the default action to take place.
fn reraise_if_reset(sig: libc::c_int, fault: bool) {
    if fault {
        return;
    }
    // SAFETY: sigaction only writes the local; raise is async-signal-safe.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut now) == 0
            && now.sa_sigaction == libc::SIG_DFL
        {
            libc::raise(sig);
        }
    }
}

/// Restores the default action and raises the signal again: it is blocked
/// while this handler runs and kills the process when the handler returns.
fn die(sig: libc::c_int) {
    // SAFETY: sigaction and raise are async-signal-safe; the struct is a
    // local.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        libc::raise(sig);
    }
}

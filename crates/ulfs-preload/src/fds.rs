//! Descriptors of image files are real kernel descriptor numbers: each one
//! holds a placeholder (an `O_PATH` descriptor of a private empty memfd, so
//! numbering, `dup2` onto 0-2, poll limits and close-on-exec behave as the
//! kernel does, and a placeholder that escapes to a call this library does
//! not serve fails with EBADF, or acts on that memfd, rather than touch
//! some other file: `open_placeholder`). This table
//! maps a placeholder's number to its ulfs descriptor.
//!
//! A descriptor can also be *pending*: an image file this process holds
//! while the image is let go (it came across an exec, or the process
//! handed the image over at a `fork`), to be opened again when the image
//! is next mounted (`inherit.rs` owns those). The table never hands out a
//! pending entry: looking one up mounts the image, which opens it again.
//!
//! The lookup is on the path of every `read` and `write` of the program,
//! image or not, so it is one atomic load from a fixed array indexed by
//! the descriptor number: no lock, no allocation. Numbers past the array
//! (a process with more than `SLOTS` descriptors open) are not given to
//! image files: opening one then fails with EMFILE.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicUsize, Ordering};

use crate::real::real;

/// Kernel descriptor numbers the table covers.
const SLOTS: usize = 1 << 16;

/// Per kernel descriptor: -1 when it is not an image file's, `PENDING`
/// while it waits for the image to be mounted again, else the ulfs
/// descriptor.
static TABLE: OnceLock<Box<[AtomicI64]>> = OnceLock::new();

fn table() -> &'static [AtomicI64] {
    TABLE.get_or_init(|| (0..SLOTS).map(|_| AtomicI64::new(-1)).collect())
}

/// The table's mark for a pending descriptor.
const PENDING: i64 = -2;

fn entry(fd: i32) -> Option<&'static AtomicI64> {
    TABLE.get()?.get(usize::try_from(fd).ok()?)
}

/// The ulfs descriptor behind kernel descriptor `fd`, if it is an image
/// file's (a pending one is opened again first, by mounting the image).
#[inline]
pub fn ulfs_fd(fd: i32) -> Option<i32> {
    let v = entry(fd)?.load(Ordering::Acquire);
    if v >= 0 {
        return Some(v as i32);
    }
    if v == PENDING {
        return resolve_pending(fd);
    }
    None
}

/// How often a pending descriptor is opened again before giving up: each
/// retry means another thread handed the image over (a `fork`, a wait)
/// between this thread's mount and its look at the table.
const RESOLVE_TRIES: u32 = 1000;

#[cold]
fn resolve_pending(fd: i32) -> Option<i32> {
    for _ in 0..RESOLVE_TRIES {
        if !crate::inherit::resolve() {
            return None;
        }
        match entry(fd)?.load(Ordering::Acquire) {
            v if v >= 0 => return Some(v as i32),
            PENDING => continue,
            _ => return None,
        }
    }
    None
}

/// The ulfs descriptor behind `fd` as the table holds it now, without
/// opening a pending one (for the hand-over itself).
pub fn bound(fd: i32) -> Option<i32> {
    let v = entry(fd)?.load(Ordering::Acquire);
    (v >= 0).then_some(v as i32)
}

/// Whether `fd` stands for an image file, bound or pending (nothing is
/// mounted to tell).
pub fn is_image(fd: i32) -> bool {
    entry(fd).is_some_and(|e| e.load(Ordering::Acquire) != -1)
}

/// Marks `fd` pending (it held an image file, or came across an exec
/// holding one).
pub fn pend(fd: i32) {
    if fd >= 0
        && (fd as usize) < SLOTS
        && table()[fd as usize].swap(PENDING, Ordering::AcqRel) == -1
    {
        OPEN.fetch_add(1, Ordering::Relaxed);
    }
}

/// The descriptor placeholders are duplicated from (`open_placeholder`,
/// close-on-exec, kept high so it stays out of the program's
/// way, and kept from the program's closes: `is_library`): a `dup` costs
/// less than an `open` with its path walk. -1 until first needed.
static BASE: AtomicI64 = AtomicI64::new(-1);

/// Lowest number the base descriptor takes.
const BASE_MIN: i32 = 1000;

/// A placeholder names a private empty memfd, not a shared host file: a
/// call this library does not route that reaches the kernel with it (a
/// path call on `/proc/self/fd/N`: the kernel follows the link to what
/// the placeholder names) then changes nothing anyone else sees. Named by
/// `/dev/null` it was the host's `/dev/null` itself, whose mode, owner
/// and times a program running as root changed that way. The memfd is
/// sealed empty (no write, no growing): a path this library does not see
/// as an image descriptor's (`/proc/<parent>/fd/N` from a child) that
/// reopens it for writing fails loudly (EPERM) rather than writing bytes
/// nobody reads. `/dev/null` is kept as the fallback where no memfd can
/// be made or reopened (an old kernel, a sandbox without /proc).
fn open_placeholder(cloexec: bool) -> i32 {
    let open = real!(open: unsafe extern "C" fn(*const libc::c_char, libc::c_int, libc::c_uint) -> libc::c_int);
    let flags = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: a NUL-terminated literal name; no memory is passed.
    let memfd = unsafe {
        libc::memfd_create(
            c"ulfs-placeholder".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    // SAFETY: sealing a memfd this function just made.
    if memfd >= 0 && unsafe { fcntl(memfd, libc::F_ADD_SEALS, seals as libc::c_long) } != 0 {
        close_kernel(memfd);
    } else if memfd >= 0 {
        let path = std::ffi::CString::new(format!("/proc/self/fd/{memfd}")).expect("no NUL");
        // SAFETY: a NUL-terminated path we made.
        let fd = unsafe { open(path.as_ptr(), flags, 0) };
        close_kernel(memfd);
        if fd >= 0 {
            return fd;
        }
    }
    // SAFETY: a NUL-terminated literal path.
    unsafe { open(c"/dev/null".as_ptr(), flags, 0) }
}

fn base() -> i32 {
    let b = BASE.load(Ordering::Relaxed);
    if b >= 0 {
        return b as i32;
    }
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    let fd = open_placeholder(true);
    if fd < 0 {
        return -1;
    }
    // SAFETY: duplicating our own descriptor.
    let high = unsafe { fcntl(fd, libc::F_DUPFD_CLOEXEC, BASE_MIN as libc::c_long) };
    close_kernel(fd);
    if high >= 0
        && BASE
            .compare_exchange(-1, high as i64, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        close_kernel(high);
        return BASE.load(Ordering::Relaxed) as i32;
    }
    high
}

/// The image file's descriptor while mounted (-1 otherwise): the
/// library's, not the program's, though it lives in the same table.
static IMAGE_FD: AtomicI64 = AtomicI64::new(-1);

/// Moves a freshly opened image file to a descriptor at `BASE_MIN` or
/// above (close-on-exec) and records it as the library's.
pub fn library_file(file: std::fs::File) -> std::fs::File {
    use std::os::fd::{AsRawFd, FromRawFd};
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    // SAFETY: duplicating a descriptor we own.
    let high = unsafe {
        fcntl(
            file.as_raw_fd(),
            libc::F_DUPFD_CLOEXEC,
            BASE_MIN as libc::c_long,
        )
    };
    let file = if high >= 0 {
        // The lock belongs to the open file description, which the new
        // descriptor shares: closing the old one keeps it.
        drop(file);
        // SAFETY: `high` is a fresh descriptor nothing else owns.
        unsafe { std::fs::File::from_raw_fd(high) }
    } else {
        file
    };
    IMAGE_FD.store(file.as_raw_fd() as i64, Ordering::Release);
    file
}

/// Before the library closes the image file (at an unmount).
pub fn release_library_file() {
    IMAGE_FD.store(-1, Ordering::Release);
}

/// The run's shared table of handed-over files (`inherit.rs`), once this
/// process has it (-1 before): the library's too.
static SHARED_FD: AtomicI64 = AtomicI64::new(-1);

/// Records the shared table's descriptor as the library's.
pub fn set_shared_file(fd: i32) {
    SHARED_FD.store(fd as i64, Ordering::Release);
}

/// The run's wake-up eventfd (`shared.rs`), once this process has it.
static WAKE_FD: AtomicI64 = AtomicI64::new(-1);

pub fn set_wake_file(fd: i32) {
    WAKE_FD.store(fd as i64, Ordering::Release);
}

pub fn wake_file() -> Option<i32> {
    let fd = WAKE_FD.load(Ordering::Acquire);
    (fd >= 0).then_some(fd as i32)
}

/// The shared table's descriptor, once there is one.
pub fn shared_file() -> Option<i32> {
    let fd = SHARED_FD.load(Ordering::Acquire);
    (fd >= 0).then_some(fd as i32)
}

/// A descriptor of the library's own at `BASE_MIN` or above, kept across
/// an exec when `cloexec` is false; the old one is closed. -1 on failure.
pub fn move_high(fd: i32, cloexec: bool) -> i32 {
    let high = dup_from(fd, BASE_MIN, cloexec);
    close_kernel(fd);
    high
}

/// A duplicate of the library's descriptor `fd` at the lowest free number
/// from `min` (close-on-exec as asked), or -1.
fn dup_from(fd: i32, min: i32, cloexec: bool) -> i32 {
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    let cmd = if cloexec {
        libc::F_DUPFD_CLOEXEC
    } else {
        libc::F_DUPFD
    };
    // SAFETY: duplicating a descriptor the library owns.
    unsafe { fcntl(fd, cmd, min as libc::c_long) }
}

/// The connection to `ulfs serve` (its socket and kick eventfd) while
/// the run is served (`served.rs`).
static SERVER_FDS: [AtomicI64; 2] = [AtomicI64::new(-1), AtomicI64::new(-1)];

/// Records the connection's descriptors as the library's (-1: none).
pub fn set_server_fds(fds: [i32; 2]) {
    for (slot, fd) in SERVER_FDS.iter().zip(fds) {
        slot.store(fd as i64, Ordering::Release);
    }
}

/// A close-on-exec duplicate of the library's descriptor `fd` at
/// `BASE_MIN` or above, or -1.
pub fn dup_high(fd: std::os::fd::BorrowedFd<'_>) -> i32 {
    use std::os::fd::AsRawFd;
    dup_from(fd.as_raw_fd(), BASE_MIN, true)
}

/// The library's own descriptors (-1 for those it has not made).
fn library_fds() -> [i64; 6] {
    [
        IMAGE_FD.load(Ordering::Acquire),
        BASE.load(Ordering::Relaxed),
        SHARED_FD.load(Ordering::Acquire),
        WAKE_FD.load(Ordering::Acquire),
        SERVER_FDS[0].load(Ordering::Acquire),
        SERVER_FDS[1].load(Ordering::Acquire),
    ]
}

thread_local! {
    /// How deep this thread is in the library's own work on the image
    /// (its store flocks, maps, stats and syncs the image file through
    /// the same libc symbols the program's calls come through).
    static INSIDE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The depth of the library's own work while the process has one thread
/// (owner.rs): a plain static then, which saves the two thread-local look-
/// ups (`__tls_get_addr`, in a shared library) every call would make.
static INSIDE_ALONE: AtomicU32 = AtomicU32::new(0);

/// Whether this thread is in the library's own work (holding the file
/// system's lock, perhaps): its host reads and writes must not take
/// turns on the image, which would hand the image over from inside.
pub fn inside_library() -> bool {
    INSIDE_ALONE.load(Ordering::Relaxed) > 0 || INSIDE.with(|c| c.get() > 0)
}

/// While alive, this thread's calls are the library's own: its
/// descriptors are open to them.
pub struct LibraryCall {
    /// Counted in `INSIDE_ALONE` (the process had one thread).
    alone: bool,
}

impl LibraryCall {
    #[inline]
    pub fn enter() -> Self {
        let alone = crate::owner::single_threaded();
        if alone {
            // One thread (and its signal handlers): no read-modify-write.
            let depth = INSIDE_ALONE.load(Ordering::Relaxed);
            INSIDE_ALONE.store(depth + 1, Ordering::Relaxed);
        } else {
            INSIDE.with(|c| c.set(c.get() + 1));
        }
        LibraryCall { alone }
    }
}

impl Drop for LibraryCall {
    #[inline]
    fn drop(&mut self) {
        if self.alone {
            let depth = INSIDE_ALONE.load(Ordering::Relaxed);
            INSIDE_ALONE.store(depth.saturating_sub(1), Ordering::Relaxed);
        } else {
            INSIDE.with(|c| c.set(c.get().saturating_sub(1)));
        }
    }
}

/// Whether `fd` is one of the library's own descriptors (the image file,
/// the placeholder base, the shared memory, the wake-up eventfd) and the
/// call is the program's: then the descriptor is not open, for it.
pub fn is_library(fd: i32) -> bool {
    fd >= 0 && library_fds().contains(&(fd as i64)) && !inside_library()
}

/// The library's descriptors in `[first, last]`, in order.
pub fn library_in(first: u32, last: u32) -> Vec<i32> {
    let mut v: Vec<i32> = library_fds()
        .into_iter()
        .filter(|&f| f >= first as i64 && f <= last as i64)
        .map(|f| f as i32)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A fresh placeholder descriptor (`O_CLOEXEC` as asked), or -errno:
/// the lowest free number, as an `open` would give.
pub fn placeholder(cloexec: bool) -> Result<i32, i32> {
    let b = base();
    let mut fd = if b >= 0 { dup_from(b, 0, cloexec) } else { -1 };
    if fd < 0 {
        // No base (the table was full at BASE_MIN): one by one.
        fd = open_placeholder(cloexec);
    }
    if fd < 0 {
        return Err(crate::errno());
    }
    if fd as usize >= SLOTS {
        close_kernel(fd);
        return Err(libc::EMFILE);
    }
    Ok(fd)
}

/// How many kernel descriptors stand for image files.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Records that kernel descriptor `fd` stands for ulfs descriptor `u`.
pub fn bind(fd: i32, u: i32) {
    if table()[fd as usize].swap(u as i64, Ordering::AcqRel) == -1 {
        OPEN.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forgets `fd`; returns the ulfs descriptor it stood for. A pending one
/// is forgotten without mounting (nothing of it is open yet).
pub fn unbind(fd: i32) -> Option<i32> {
    let v = entry(fd)?.swap(-1, Ordering::AcqRel);
    if v != -1 {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
    if v == PENDING {
        crate::inherit::forget(fd);
    }
    (v >= 0).then_some(v as i32)
}

/// The kernel descriptors in `[first, last]` that stand for image files,
/// bound or pending.
pub fn bound_in(first: u32, last: u32) -> Vec<i32> {
    let Some(t) = TABLE.get() else {
        return Vec::new();
    };
    let end = (last as usize).min(SLOTS - 1);
    (first as usize..=end)
        .filter(|&fd| t[fd].load(Ordering::Acquire) != -1)
        .map(|fd| fd as i32)
        .collect()
}

/// How many image descriptors are open.
pub fn open_count() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// Forgets every image descriptor (in the child of a fork that did not
/// take the image along): the kernel descriptors stay, as the
/// placeholders they are, and fail with EBADF if used.
pub fn forget_all() {
    if let Some(t) = TABLE.get() {
        for e in t.iter() {
            e.store(-1, Ordering::Release);
        }
    }
    OPEN.store(0, Ordering::Relaxed);
}

/// Closes a kernel descriptor, ignoring the outcome (a placeholder).
pub fn close_kernel(fd: i32) {
    let close = real!(close: unsafe extern "C" fn(libc::c_int) -> libc::c_int);
    // SAFETY: closing a descriptor this library opened.
    unsafe { close(fd) };
}

/// The image descriptor a `/proc/self/fd/N`-style path names: the
/// process's descriptor directory (`/proc/self/fd`, `/proc/thread-self/fd`,
/// `/proc/<own pid>/fd`, `/dev/fd`) or `/dev/stdin`, `/dev/stdout`,
/// `/dev/stderr`, when N stands for an image file.
pub fn proc_fd_path(p: &[u8]) -> Option<i32> {
    TABLE.get()?;
    ulfs_fd(proc_fd_number(p)?)
}

/// The descriptor number a `/proc/self/fd/N`-style path names (after
/// folding `//` and `.`; a `..` is left to the kernel, which must find
/// what it climbs from; N in decimal, no sign or leading zero, as /proc
/// names it).
pub fn proc_fd_number(p: &[u8]) -> Option<i32> {
    // A trailing `/` or `/.` asks for a directory: the kernel's to judge.
    if p.first() != Some(&b'/') || p.ends_with(b"/") || p.ends_with(b"/.") {
        return None;
    }
    let folded;
    let p = if p.windows(2).any(|w| w == b"//") || p.windows(3).any(|w| w == b"/./") {
        folded = crate::route::fold_dots(p);
        &folded[..]
    } else {
        p
    };
    let n: &[u8] = match p {
        b"/dev/stdin" => b"0",
        b"/dev/stdout" => b"1",
        b"/dev/stderr" => b"2",
        _ => p
            .strip_prefix(b"/dev/fd/")
            .or_else(|| p.strip_prefix(b"/proc/self/fd/"))
            .or_else(|| p.strip_prefix(b"/proc/thread-self/fd/"))
            .or_else(|| {
                // Only a path of a pid costs a getpid and a format.
                let rest = p.strip_prefix(b"/proc/")?;
                if !rest.first()?.is_ascii_digit() {
                    return None;
                }
                let own = format!("/proc/{}/fd/", std::process::id());
                p.strip_prefix(own.as_bytes())
            })?,
    };
    let decimal = n.iter().all(u8::is_ascii_digit) && (n == b"0" || n.first() != Some(&b'0'));
    if !decimal {
        return None;
    }
    std::str::from_utf8(n).ok()?.parse().ok()
}

//! Memory mappings of image files. The kernel cannot map an image file
//! (it is bytes inside the image, not a host file), so a mapping is made
//! of anonymous memory filled from the file with `pread`:
//!
//! - private mappings, and shared read-only ones, are copies taken at
//!   `mmap` time (what a program sees until it writes, or until the file
//!   changes under a shared read-only mapping, which is the one difference
//!   from the kernel's page cache);
//! - shared writable mappings (SQLite's WAL index, gdbm) are written back
//!   to the file with `pwrite` at `msync`, `munmap` and exit, clamped to
//!   the file's size (a shared mapping never extends a file). Processes
//!   share no mapped memory, so one is refused (ENODEV, with a message)
//!   while another process of the run has the file mapped so.
//!
//! Each mapping keeps a descriptor of its own (a `dup` of the program's),
//! so it outlives a `close`, as a kernel mapping does. Mappings made by
//! the dynamic linker (`dlopen` of a library inside the image) do not come
//! through here.
//!
//! Served (`ulfs run --server`), a shared mapping is a real shared mapping
//! of the server's memfd for the file (MAP_SHARED through the server's
//! `maps.rs`): every process mapping the file shares its pages, reads and
//! writes through the server see them, and the server writes them back
//! (at `msync`, at the file's last unmap, at shutdown). Such a mapping is
//! an *object* here (it keeps a descriptor of its own too, for the server
//! to grow it by at `mremap`), and the server is told of its end once no
//! record of it is left in this process (a partial `munmap` splits one
//! record in two).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use libc::{off_t, size_t};

use crate::fail;
use crate::fds;
use crate::real::real;
use crate::state::image;

type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;

/// One mapping of an image file.
#[derive(Clone, Copy)]
struct Mapping {
    addr: usize,
    len: usize,
    /// The mapping's own ulfs descriptor.
    ufd: c_int,
    /// File offset of `addr`.
    off: u64,
    /// Shared and writable: written back.
    write_back: bool,
    /// The protection asked for (a grown mapping gets it back after the
    /// new part is filled).
    prot: c_int,
    /// The file's inode.
    ino: u64,
    /// The process that made it (a fork's child has a copy).
    pid: u32,
    /// Served: the server's object it maps.
    object: Option<u64>,
}

/// Served objects this process maps: MAP_SHARED requests made for each
/// (each needs its UNMAP), and records of `MAPS` on it.
static OBJECTS: LazyLock<Mutex<std::collections::HashMap<u64, (u32, u32)>>> =
    LazyLock::new(Default::default);

fn objects() -> MutexGuard<'static, std::collections::HashMap<u64, (u32, u32)>> {
    OBJECTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `records` more (or fewer) records of `object`, after `requests` more
/// MAP_SHARED for it; with no record left, the server is told of each
/// request's end.
fn count_object(object: u64, requests: u32, records: i64) {
    let done = {
        let mut all = objects();
        let e = all.entry(object).or_insert((0, 0));
        e.0 += requests;
        e.1 = (e.1 as i64 + records).max(0) as u32;
        if e.1 == 0 {
            all.remove(&object).map(|(r, _)| r)
        } else {
            None
        }
    };
    if let (Some(requests), Some(image)) = (done, image()) {
        for _ in 0..requests {
            let _ = image.with(|b| match crate::served::client(b) {
                Some(c) => c.unmap(object),
                None => Ok(()),
            });
        }
    }
}

/// A served shared mapping: the server's memfd for the file, mapped here.
fn map_served(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    u: c_int,
    off: off_t,
) -> ulfs::Result<*mut c_void> {
    let image = image().ok_or(ulfs::Errno::EBADF)?;
    let (object, memfd, own, ino) = image.with(|b| {
        let c = crate::served::client(b).ok_or(ulfs::Errno::ENODEV)?;
        let (object, memfd) = c.map_shared(u, off as u64, len as u64, prot)?;
        let (own, ino) = (c.dup(u), c.fstat(u).map(|s| s.ino));
        match (own, ino) {
            (Ok(own), Ok(ino)) => Ok((object, memfd, own, ino)),
            (own, ino) => {
                let _ = c.unmap(object);
                if let Ok(own) = own {
                    let _ = c.close_kept(own);
                }
                Err(ino.err().unwrap_or(ulfs::Errno::EMFILE))
            }
        }
    })?;
    let real_mmap = real!(mmap: MmapFn);
    let flags = (flags & !libc::MAP_TYPE) | libc::MAP_SHARED;
    use std::os::fd::AsRawFd;
    // SAFETY: the program's own address, length and flags, over the
    // server's memfd, which covers `[off, off + len)`.
    let p = unsafe { real_mmap(addr, len, prot, flags, memfd.as_raw_fd(), off) };
    drop(memfd);
    if p == libc::MAP_FAILED {
        let e = crate::errno();
        let _ = image.with(|b| close_own(b, own));
        count_object(object, 1, 0);
        return Err(ulfs::Errno(e));
    }
    record([Mapping {
        addr: p as usize,
        len,
        ufd: own,
        off: off as u64,
        write_back: false,
        prot,
        ino,
        pid: std::process::id(),
        object: Some(object),
    }]);
    count_object(object, 1, 1);
    Ok(p)
}

/// The mappings of image files. Its lock is never held while the file
/// system's is taken (the file system itself maps and unmaps the image
/// under its own lock, which comes through `munmap` here).
static MAPS: LazyLock<Mutex<Vec<Mapping>>> = LazyLock::new(Default::default);

/// How many mappings `MAPS` holds: `munmap` and `msync` of other memory
/// (most of them) look at this alone.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn maps() -> MutexGuard<'static, Vec<Mapping>> {
    MAPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records mappings (and their count, read without the lock).
fn record(new: impl IntoIterator<Item = Mapping>) {
    let mut all = maps();
    all.extend(new);
    COUNT.store(all.len(), Ordering::Relaxed);
}

fn page() -> usize {
    // SAFETY: sysconf has no memory effects.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// `mmap(2)`.
///
/// # Safety
/// As libc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let real_mmap = real!(mmap: MmapFn);
    let anonymous = flags & libc::MAP_ANONYMOUS != 0;
    if !anonymous && fds::is_library(fd) {
        // The library's descriptor is not open, for the program.
        fail::<c_int>(libc::EBADF);
        return libc::MAP_FAILED;
    }
    let (Some(u), false) = (fds::ulfs_fd(fd), anonymous) else {
        // SAFETY: the program's own arguments.
        return unsafe { real_mmap(addr, len, prot, flags, fd, off) };
    };
    match map_image(addr, len, prot, flags, u, off) {
        Ok(p) => p,
        Err(e) => {
            fail::<c_int>(e.raw());
            libc::MAP_FAILED
        }
    }
}

/// # Safety
/// As libc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

fn map_image(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    u: c_int,
    off: off_t,
) -> ulfs::Result<*mut c_void> {
    let image = image().ok_or(ulfs::Errno::EBADF)?;
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(page()) {
        return Err(ulfs::Errno::EINVAL);
    }
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED
        || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    let write_back = shared && prot & libc::PROT_WRITE != 0;
    if shared && crate::served::socket().is_some() {
        return map_served(addr, len, prot, flags, u, off);
    }
    // The kernel's checks against the open mode: any mapping needs read
    // access, a shared writable one write access too.
    let (acc, ino, elsewhere) = image.with(|fs| {
        let ino = fs.fstat(u)?.ino;
        Ok((fs.fcntl_getfl(u)?, ino, crate::locks::mapped_elsewhere(ino)))
    })?;
    let acc = acc & libc::O_ACCMODE;
    if acc == libc::O_WRONLY || (write_back && acc == libc::O_RDONLY) {
        return Err(ulfs::Errno::EACCES);
    }
    if write_back && let Some(pid) = elsewhere {
        // The processes of a run do not share mapped memory: two writing
        // one file through mappings would each miss the other's stores
        // (SQLite's WAL index loses rows). Refused, as the kernel refuses
        // a mapping a file system cannot make.
        crate::warn(&format!(
            "ulfs run: mmap: process {pid} has this file mapped shared and writable; processes of a run do not share mapped memory: refused (ENODEV)"
        ));
        return Err(ulfs::Errno::ENODEV);
    }
    let own = image.with(|fs| fs.dup(u))?;
    let real_mmap = real!(mmap: MmapFn);
    let anon_flags = (flags & !(libc::MAP_TYPE | libc::MAP_SHARED_VALIDATE))
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping where the program asked (MAP_FIXED
    // included, which is its own promise about that range).
    let p = unsafe { real_mmap(addr, len, prot | libc::PROT_WRITE, anon_flags, -1, 0) };
    if p == libc::MAP_FAILED {
        let _ = image.with(|fs| close_own(fs, own));
        return Err(ulfs::Errno(crate::errno()));
    }
    // SAFETY: `p` is a fresh writable mapping of `len` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    let filled = image.with(|fs| {
        let mut done = 0;
        while done < len {
            let n = fs.pread(own, &mut buf[done..], off as u64 + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(())
    });
    if let Err(e) = filled {
        // SAFETY: unmapping what was just mapped.
        unsafe { libc::syscall(libc::SYS_munmap, p, len) };
        let _ = image.with(|fs| close_own(fs, own));
        return Err(e);
    }
    if prot & libc::PROT_WRITE == 0 {
        // SAFETY: the range was just mapped; back to what was asked.
        unsafe { libc::mprotect(p, len, prot) };
    }
    record([Mapping {
        addr: p as usize,
        len,
        ufd: own,
        off: off as u64,
        write_back,
        prot,
        ino,
        pid: std::process::id(),
        object: None,
    }]);
    Ok(p)
}

/// Writes back the part `[from, to)` of a shared writable mapping.
fn write_back(m: &Mapping, from: usize, to: usize) -> ulfs::Result<()> {
    let Some(image) = image() else {
        return Ok(());
    };
    image.with(|fs| {
        let size = fs.fstat(m.ufd)?.size;
        let file_at = m.off + (from - m.addr) as u64;
        let end = (file_at + (to - from) as u64).min(size);
        if end <= file_at {
            return Ok(());
        }
        // SAFETY: `[from, from + (end - file_at))` lies inside the live
        // mapping `m`, which is readable (it was mapped writable).
        let bytes =
            unsafe { std::slice::from_raw_parts(from as *const u8, (end - file_at) as usize) };
        let mut done = 0;
        while done < bytes.len() {
            done += fs.pwrite(m.ufd, &bytes[done..], file_at + done as u64)?;
        }
        Ok(())
    })
}

/// MSYNC of the part `[from, to)` of a served mapping (the server writes
/// the file from its memfd).
fn sync_object(m: &Mapping, object: u64, from: usize, to: usize, flags: c_int) -> ulfs::Result<()> {
    let Some(image) = image() else {
        return Ok(());
    };
    let start = from - from % page();
    let file_at = m.off + (start - m.addr) as u64;
    image.with(|b| match crate::served::client(b) {
        Some(c) => c.msync(object, file_at, (to - start) as u64, flags),
        None => Ok(()),
    })
}

/// `msync(2)`: shared writable mappings of image files are written back.
///
/// # Safety
/// As libc's `msync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if COUNT.load(Ordering::Relaxed) > 0 {
        let (a, b) = (addr as usize, addr as usize + len);
        let hit: Vec<Mapping> = maps()
            .iter()
            .filter(|m| {
                (m.write_back || m.object.is_some()) && a.max(m.addr) < b.min(m.addr + m.len)
            })
            .copied()
            .collect();
        for m in hit {
            let (from, to) = (a.max(m.addr), b.min(m.addr + m.len));
            let r = match m.object {
                Some(object) => sync_object(&m, object, from, to, flags),
                None => write_back(&m, from, to),
            };
            if let Err(e) = r {
                return fail(e.raw());
            }
        }
    }
    let f = real!(msync: unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    unsafe { f(addr, len, flags) }
}

/// `munmap(2)`: what is unmapped of a shared writable mapping is written
/// back first; each mapping touched lets go of its descriptor, and what
/// stays mapped on either side keeps a new one.
///
/// # Safety
/// As libc's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let f = real!(munmap: unsafe extern "C" fn(*mut c_void, size_t) -> c_int);
    if COUNT.load(Ordering::Relaxed) == 0 {
        // SAFETY: the program's own arguments.
        return unsafe { f(addr, len) };
    }
    let (a, b) = (addr as usize, addr as usize + len);
    let hit: Vec<Mapping> = {
        let mut all = maps();
        let (hit, kept): (Vec<Mapping>, Vec<Mapping>) = all
            .drain(..)
            .partition(|m| a.max(m.addr) < b.min(m.addr + m.len));
        *all = kept;
        COUNT.store(all.len(), Ordering::Relaxed);
        hit
    };
    let mut rest = Vec::new();
    for m in &hit {
        let (from, to) = (a.max(m.addr), b.min(m.addr + m.len));
        if m.write_back {
            let _ = write_back(m, from, to);
        }
        if m.addr < from {
            rest.push(Mapping {
                len: from - m.addr,
                ufd: dup_own(m.ufd),
                ..*m
            });
        }
        if to < m.addr + m.len {
            rest.push(Mapping {
                addr: to,
                len: m.addr + m.len - to,
                off: m.off + (to - m.addr) as u64,
                ufd: dup_own(m.ufd),
                ..*m
            });
        }
    }
    if let Some(image) = image() {
        for m in &hit {
            let _ = image.with(|fs| close_own(fs, m.ufd));
        }
    }
    // Served objects: the records left of each, against those gone.
    let mut change: Vec<(u64, i64)> = Vec::new();
    for (m, d) in hit
        .iter()
        .map(|m| (m, -1))
        .chain(rest.iter().map(|m| (m, 1)))
    {
        if let Some(o) = m.object {
            match change.iter_mut().find(|(x, _)| *x == o) {
                Some(c) => c.1 += d,
                None => change.push((o, d)),
            }
        }
    }
    if !rest.is_empty() {
        record(rest);
    }
    // SAFETY: the program's own arguments.
    let r = unsafe { f(addr, len) };
    // A munmap the kernel refused leaves the memory mapped: the server's
    // objects stay (told of their end at exit instead).
    if r == 0 {
        for (o, d) in change {
            count_object(o, 0, d);
        }
    }
    r
}

/// Another descriptor for a mapping split in two.
/// Closes a mapping's own descriptor: the process's POSIX locks stay (a
/// mapping's end closes no descriptor on Linux), and in process, where
/// this library keeps the locks, the description's OFD and `flock` locks
/// end when this was its last descriptor, as they do when a kernel
/// mapping holding the last reference goes (a server sees to both
/// itself).
fn close_own(fs: &mut ulfs_client::Backend, u: c_int) -> ulfs::Result<()> {
    let last = match fs.local() {
        Some(_) => fs.file_description(u).ok().filter(|d| d.refs == 1),
        None => None,
    };
    fs.close_kept(u)?;
    if let Some(d) = last {
        crate::locks::release_owner(crate::locks::Owner::Ofd(d.id));
        crate::locks::release_owner(crate::locks::Owner::Flock(d.id));
    }
    Ok(())
}

fn dup_own(u: c_int) -> c_int {
    image()
        .and_then(|i| i.with(|fs| fs.dup(u)).ok())
        .unwrap_or(u)
}

/// The ulfs descriptors the live mappings hold (a hand-over notes them
/// with the program's, and gives them back under the same numbers).
pub fn descriptors() -> Vec<c_int> {
    if count() == 0 {
        return Vec::new();
    }
    maps().iter().map(|m| m.ufd).collect()
}

/// How many mappings of image files are live (each holds the image
/// open, as a descriptor does).
/// The inodes of the shared writable mappings this process made (for the
/// other processes of the run to see: `locks.rs`).
pub fn shared_writable_inos() -> Vec<u64> {
    if count() == 0 {
        return Vec::new();
    }
    let me = std::process::id();
    let mut inos: Vec<u64> = maps()
        .iter()
        .filter(|m| m.write_back && m.pid == me)
        .map(|m| m.ino)
        .collect();
    inos.sort_unstable();
    inos.dedup();
    inos
}

pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// At exit and before an exec: every shared writable mapping is written
/// back.
pub fn write_back_all() {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let all: Vec<Mapping> = maps().iter().filter(|m| m.write_back).copied().collect();
    for m in all {
        let _ = write_back(&m, m.addr, m.addr + m.len);
    }
}

/// `mremap` of a served mapping: a grown part is covered by the server's
/// memfd first (one more MAP_SHARED of that range), then the kernel
/// remaps.
///
/// # Safety
/// `remap` is the real mremap with the program's arguments but the length.
unsafe fn remap_object(
    m: Mapping,
    object: u64,
    old_len: usize,
    new_len: usize,
    remap: impl FnOnce(usize) -> *mut c_void,
) -> *mut c_void {
    let mut grew = 0;
    if new_len > old_len
        && let Some(image) = image()
    {
        let ufd = image.with(|b| {
            let c = crate::served::client(b).ok_or(ulfs::Errno::ENODEV)?;
            let (o, memfd) = c.map_shared(m.ufd, m.off, new_len as u64, m.prot)?;
            drop(memfd);
            Ok(o)
        });
        match ufd {
            Ok(o) if o == object => grew = 1,
            Ok(o) => count_object(o, 1, 0),
            Err(e) => {
                fail::<c_int>(e.raw());
                record([m]);
                return libc::MAP_FAILED;
            }
        }
    }
    let p = remap(new_len);
    let moved = if p == libc::MAP_FAILED {
        m
    } else {
        Mapping {
            addr: p as usize,
            len: new_len,
            ..m
        }
    };
    record([moved]);
    count_object(object, grew, 0);
    p
}

/// `mremap(2)` of a mapping of an image file: the memory is moved or
/// resized by the kernel (it is anonymous memory), the record follows it,
/// and a grown part is filled from the file. Other memory goes to libc.
/// (Without this, a resized mapping's record kept the old address, and
/// the write-back at exit read unmapped memory.)
///
/// # Safety
/// As libc's `mremap`; `new_addr` is read only with MREMAP_FIXED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let f = real!(mremap: unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void);
    let tracked = if COUNT.load(Ordering::Relaxed) > 0 {
        let mut all = maps();
        let i = all
            .iter()
            .position(|m| m.addr == old as usize && m.len == old_len);
        let m = i.map(|i| all.remove(i));
        COUNT.store(all.len(), Ordering::Relaxed);
        m
    } else {
        None
    };
    let Some(m) = tracked else {
        // SAFETY: the program's own arguments.
        return unsafe { f(old, old_len, new_len, flags, new_addr) };
    };
    if let Some(object) = m.object {
        // SAFETY: as above; the kernel moves or resizes the memfd mapping.
        return unsafe {
            remap_object(m, object, old_len, new_len, |l| {
                f(old, old_len, l, flags, new_addr)
            })
        };
    }
    if m.write_back {
        let _ = write_back(&m, m.addr, m.addr + m.len);
    }
    // SAFETY: the program's own arguments, on memory that is anonymous.
    let p = unsafe { f(old, old_len, new_len, flags, new_addr) };
    let moved = if p == libc::MAP_FAILED {
        m
    } else {
        if new_len > old_len {
            // SAFETY: `[p + old_len, p + new_len)` is the grown, mapped part.
            unsafe {
                let tail = p.cast::<u8>().add(old_len);
                libc::mprotect(p, new_len, m.prot | libc::PROT_WRITE);
                let buf = std::slice::from_raw_parts_mut(tail, new_len - old_len);
                let at = m.off + old_len as u64;
                let _ = image().map(|i| {
                    i.with(|fs| {
                        let mut done = 0;
                        while done < buf.len() {
                            let n = fs.pread(m.ufd, &mut buf[done..], at + done as u64)?;
                            if n == 0 {
                                break;
                            }
                            done += n;
                        }
                        Ok(())
                    })
                });
                libc::mprotect(p, new_len, m.prot);
            }
        }
        Mapping {
            addr: p as usize,
            len: new_len,
            ..m
        }
    };
    record([moved]);
    p
}

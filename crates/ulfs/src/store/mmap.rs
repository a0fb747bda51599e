//! The real store: the image (a regular file or a block device) mapped
//! MAP_SHARED into the process.
//!
//! The mapping is the whole data path: reads and writes of file data are
//! memcpy to and from it, with no system call. Block ids come from the image,
//! so every access is range-checked here and an out-of-range id is EUCLEAN,
//! never an out-of-bounds access.
//!
//! One process owns an image at a time: a read-write store holds an
//! exclusive `flock` on the image for its life, a read-only one a shared
//! lock, so a second writer (another program, `ulfs import`, `fsck --repair`,
//! `mkfs --force`) is refused with EBUSY instead of corrupting the image,
//! and a reader never sees a writer's half-installed transaction. On a block
//! device a writer also opens with O_EXCL, which the kernel refuses while
//! the device is mounted.

use super::fault::Registration;
use super::residency::{Action, Residency};
use super::{BlockStore, MemoryBudget};
use crate::errno::{Errno, Result};
use crate::format::{BLOCK_SIZE, Bid, Block};
use memmap2::{Mmap, MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Tracking {
    Off,
    /// An `Auto` budget under a memory limit: what the limit leaves free
    /// is read at the first access of file data, not at mount (it reads
    /// the group's `memory.stat`, which mount time need not pay).
    Undecided,
    On,
}

/// `Tracking` in an atomic byte: read on every access of file data, by
/// several threads when reads share the volume; relaxed, a plain load.
struct TrackingCell(AtomicU8);

impl TrackingCell {
    fn new(t: Tracking) -> TrackingCell {
        TrackingCell(AtomicU8::new(t as u8))
    }

    #[inline]
    fn get(&self) -> Tracking {
        match self.0.load(Relaxed) {
            0 => Tracking::Off,
            1 => Tracking::Undecided,
            _ => Tracking::On,
        }
    }

    fn set(&self, t: Tracking) {
        self.0.store(t as u8, Relaxed);
    }
}

enum Mapping {
    ReadOnly(Mmap),
    ReadWrite(MmapMut),
}

pub struct MmapStore {
    // Declared before `map`, so dropped first: the mapping is unregistered
    // from the SIGBUS handler before it is unmapped (store/fault.rs).
    fault: Registration,
    map: Mapping,
    // Kept open so that `flush` can reach the device, and for the SIGBUS
    // handler, which looks at it to tell a hole from a lost page.
    file: File,
    /// The process that opened (and locked) the image: only it lets go of
    /// the lock when the store goes (`Drop`).
    locked_by: u32,
    blocks: u64,
    /// Whether file data is tracked for a memory budget: a plain load on
    /// every access of file data, so no budget costs next to nothing.
    tracking: TrackingCell,
    /// The budget's bookkeeping while `tracking` is `On`. Behind a mutex:
    /// a read of file data (`data`, through `&self`) is tracked too, and
    /// reads may run side by side; taken only under a budget, and with
    /// `try_lock`: a touch that finds it busy goes untracked, as a nested
    /// one always did.
    residency: Mutex<Residency>,
    /// The limit an `Undecided` budget is taken from.
    limit: Mutex<Option<super::budget::CgroupLimit>>,
    /// A writeback the budget waited for failed. The kernel reports a
    /// writeback error once per open file description, and the budget's
    /// `sync_file_range` took it, so msync will not: every later flush
    /// fails with EIO instead (and the volume turns read-only, as after a
    /// failed msync).
    writeback_failed: AtomicBool,
}

/// Size in bytes of a regular file or block device.
pub fn backing_size(file: &mut File) -> std::io::Result<u64> {
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        // A block device reports size 0 in its metadata; its end tells.
        file.seek(SeekFrom::End(0))
    } else {
        Ok(meta.len())
    }
}

/// Whether the path is a block device.
pub fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Opens an image for a store: read-write or read-only, locked as the
/// module comment says. EBUSY if another open file holds a conflicting lock.
/// EISDIR for a directory and ENOTBLK for other special files (checked
/// before opening: opening a FIFO would block).
pub fn open_locked(path: &Path, read_only: bool) -> std::io::Result<File> {
    let kind = std::fs::metadata(path)?.file_type();
    if kind.is_dir() {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !kind.is_file() && !kind.is_block_device() {
        return Err(std::io::Error::from_raw_os_error(libc::ENOTBLK));
    }
    let mut opts = OpenOptions::new();
    opts.read(true).write(!read_only);
    if !read_only && kind.is_block_device() {
        opts.custom_flags(libc::O_EXCL);
    }
    let file = opts.open(path)?;
    lock_image(&file, read_only)?;
    Ok(file)
}

/// Takes the image's lock on an open file: shared for a reader, exclusive
/// for a writer; EBUSY if another open file holds a conflicting one. Where
/// the host file system has no `flock` (some network and FUSE file
/// systems) the image is used unlocked, as before locking existed.
pub fn lock_image(file: &File, read_only: bool) -> std::io::Result<()> {
    let locked = if read_only {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match locked {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(std::io::Error::from_raw_os_error(libc::EBUSY))
        }
        Err(std::fs::TryLockError::Error(e))
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS)
            ) =>
        {
            Ok(())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

impl Drop for MmapStore {
    /// The image's lock ends with the store, even while another process
    /// still holds a copy of its descriptor: a fork (of a thread of a
    /// program that mounts images) shares the open file description, and
    /// with it the `flock`, until it execs or exits; closing ours alone
    /// would leave the image "in use" that long. A forked child dropping
    /// its copy of the store (`ulfs run` abandons it) must not: the lock
    /// is its parent's, which goes on writing.
    fn drop(&mut self) {
        if std::process::id() == self.locked_by {
            let _ = self.file.unlock();
        }
    }
}

impl MmapStore {
    /// Opens, locks and maps the whole image. Fails with the OS error if it
    /// cannot be opened or mapped, EBUSY if another open holds it, and
    /// EINVAL if it is smaller than two blocks.
    pub fn open(path: &Path, read_only: bool) -> std::io::Result<MmapStore> {
        let file = open_locked(path, read_only)?;
        MmapStore::from_file(file, read_only)
    }

    /// Maps an image already opened (and locked) by `open_locked`; the lock
    /// lives as long as the store. A writable regular file is made whole
    /// first (store/holes.rs): a sparse image on a full host is refused with
    /// an `ErrorKind::StorageFull` error naming the shortfall.
    pub fn from_file(file: File, read_only: bool) -> std::io::Result<MmapStore> {
        MmapStore::map_file(file, read_only, true)
    }

    /// Maps a writable image and leaves its holes as they are: for mkfs
    /// of an image asked to stay sparse (`MkfsOptions::sparse`), which
    /// writes only a few blocks. Should the host fill up under it, a store
    /// into a hole faults, and store/fault.rs turns that into EIO.
    pub fn from_sparse_file(file: File) -> std::io::Result<MmapStore> {
        MmapStore::map_file(file, false, false)
    }

    fn map_file(mut file: File, read_only: bool, fill: bool) -> std::io::Result<MmapStore> {
        let size = backing_size(&mut file)?;
        let meta = file.metadata()?;
        if fill && !read_only && meta.file_type().is_file() {
            super::holes::fill_holes(&file, size, meta.blocks().saturating_mul(512))?;
        }
        let blocks = size / BLOCK_SIZE as u64;
        if blocks < 2 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let len = usize::try_from(blocks * BLOCK_SIZE as u64)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        let map = if read_only {
            // SAFETY: the mapping is only read through `&[u8]`. ulfs assumes
            // (and documents) that the process owns its image. If a third
            // party truncates it anyway, or the device fails, the access
            // raises SIGBUS, which store/fault.rs turns into a zero page and
            // an EIO from this store rather than a crash.
            Mapping::ReadOnly(unsafe { opts.map(&file)? })
        } else {
            // SAFETY: as above; the file was opened read-write and the
            // mapping is MAP_SHARED so stores reach the image.
            Mapping::ReadWrite(unsafe { opts.map_mut(&file)? })
        };
        let start = match &map {
            Mapping::ReadOnly(m) => m.as_ptr(),
            Mapping::ReadWrite(m) => m.as_ptr(),
        };
        let fault = Registration::new(start, len, file.as_raw_fd(), !read_only);
        Ok(MmapStore {
            fault,
            map,
            file,
            locked_by: std::process::id(),
            blocks,
            tracking: TrackingCell::new(Tracking::Off),
            residency: Mutex::new(Residency::new(0)),
            limit: Mutex::new(None),
            writeback_failed: AtomicBool::new(false),
        })
    }

    /// Tracks a touch of file data for the budget and does what it asks;
    /// decides an `Auto` budget first.
    #[inline(never)]
    fn note_data(&self, bid: Bid, write: bool) {
        if self.tracking.get() == Tracking::Undecided {
            let limit = self.limit.lock().ok().and_then(|mut l| l.take());
            self.start_tracking(limit.and_then(|l| l.budget()));
        }
        // After a fault the mapping may hold the zero pages the SIGBUS
        // handler put in (store/fault.rs): dropping those would change
        // what reads see. The budget ends there.
        if self.fault.faulted() {
            self.start_tracking(None);
        }
        if self.tracking.get() != Tracking::On {
            return;
        }
        let Ok(mut r) = self.residency.try_lock() else {
            return;
        };
        r.touch(bid, write, |a| self.carry_out(a));
    }

    /// Tracks file data for a budget of `bytes` from now on (None: not at
    /// all). With a budget the kernel's own read-ahead on faults is turned
    /// off (MADV_RANDOM): it reads up to the device's `read_ahead_kb`
    /// around a fault (8 MiB on some virtual disks), more than a tight
    /// budget holds; the budget reads ahead itself, within its window.
    fn start_tracking(&self, bytes: Option<u64>) {
        // A writable store releases only what it can write back first:
        // not on a file whose file system has no sync_file_range (flags 0
        // is a no-op that says whether the call works there).
        // SAFETY: an fd call that touches no memory.
        let can_sync = || unsafe { libc::sync_file_range(self.file.as_raw_fd(), 0, 0, 0) } == 0;
        let bytes = bytes.filter(|_| !self.faulted() && (self.is_read_only() || can_sync()));
        let advice = match bytes {
            Some(b) => {
                if let Ok(mut r) = self.residency.try_lock() {
                    *r = Residency::new(b.div_ceil(BLOCK_SIZE as u64));
                }
                self.tracking.set(Tracking::On);
                libc::MADV_RANDOM
            }
            None => {
                self.tracking.set(Tracking::Off);
                libc::MADV_NORMAL
            }
        };
        self.advise_whole(advice);
    }

    /// MADV_RANDOM or MADV_NORMAL over the whole mapping.
    fn advise_whole(&self, advice: libc::c_int) {
        let whole = self.bytes();
        // SAFETY: the range is this store's whole mapping; RANDOM and
        // NORMAL only change how the kernel reads ahead on faults.
        unsafe {
            libc::madvise(whole.as_ptr() as *mut libc::c_void, whole.len(), advice);
        }
    }

    /// Carries out one of the budget's actions. They are hints, and none
    /// may lose a byte: a range is dropped from the page cache only after
    /// its dirty pages were written back without error. On an error the
    /// budget ends (the pages keep what was written, as without a budget)
    /// and every later flush fails (`writeback_failed`).
    fn carry_out(&self, action: Action) {
        let (Action::ReadAhead { first, count }
        | Action::WriteBack { first, count }
        | Action::Release { first, count }) = action;
        let end = (first as u64 + count as u64).min(self.blocks);
        // An error earlier in this touch may have ended the budget.
        if first as u64 >= end || self.tracking.get() != Tracking::On {
            return;
        }
        let offset = first as usize * BLOCK_SIZE;
        let len = (end - first as u64) as usize * BLOCK_SIZE;
        let (pos, bytes) = (offset as libc::off_t, len as libc::off_t);
        let fd = self.file.as_raw_fd();
        let at = self.bytes()[offset..].as_ptr() as *mut libc::c_void;
        // SAFETY (all calls): the range lies inside this store's mapping,
        // MAP_SHARED over the image. WILLNEED only reads ahead. DONTNEED on
        // a shared file mapping unmaps the pages but keeps their contents
        // (a dirty page stays dirty in the page cache), so every byte reads
        // the same afterwards and a reference into the range sees no
        // change; the exceptions, zero pages put in by the SIGBUS handler
        // and pages whose writeback failed, end the budget before they
        // could be dropped (`note_data`, and the error path below). The fd
        // calls touch no memory.
        match action {
            Action::ReadAhead { .. } => unsafe {
                libc::madvise(at, len, libc::MADV_WILLNEED);
            },
            // Started, not waited for; an error here (the pages stay
            // dirty) shows at the release's wait, or at the next flush.
            Action::WriteBack { .. } => unsafe {
                libc::sync_file_range(fd, pos, bytes, libc::SYNC_FILE_RANGE_WRITE);
            },
            Action::Release { .. } => unsafe {
                libc::madvise(at, len, libc::MADV_DONTNEED);
                if !self.is_read_only() {
                    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
                    if libc::sync_file_range(fd, pos, bytes, how) != 0 {
                        // Not known written: nothing is dropped, now or
                        // later (a failed page is clean but holds the only
                        // copy of its bytes), and the error is kept.
                        self.writeback_failed.store(true, Relaxed);
                        self.start_tracking(None);
                        return;
                    }
                }
                libc::posix_fadvise(fd, pos, bytes, libc::POSIX_FADV_DONTNEED);
            },
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.map {
            Mapping::ReadOnly(m) => m,
            Mapping::ReadWrite(m) => m,
        }
    }
}

impl BlockStore for MmapStore {
    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn backing_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.file.as_fd())
    }

    fn is_read_only(&self) -> bool {
        matches!(self.map, Mapping::ReadOnly(_))
    }

    #[inline]
    fn block(&self, bid: Bid) -> Result<&Block> {
        if bid as u64 >= self.blocks {
            return Err(Errno::EUCLEAN);
        }
        let off = bid as usize * BLOCK_SIZE;
        Ok(self.bytes()[off..off + BLOCK_SIZE]
            .try_into()
            .expect("block-sized slice"))
    }

    #[inline]
    fn block_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if bid as u64 >= self.blocks {
            return Err(Errno::EUCLEAN);
        }
        let off = bid as usize * BLOCK_SIZE;
        match &mut self.map {
            Mapping::ReadOnly(_) => Err(Errno::EROFS),
            Mapping::ReadWrite(m) => Ok((&mut m[off..off + BLOCK_SIZE])
                .try_into()
                .expect("block-sized slice")),
        }
    }

    #[inline]
    fn data(&self, bid: Bid) -> Result<&Block> {
        if self.tracking.get() != Tracking::Off {
            self.note_data(bid, false);
        }
        self.block(bid)
    }

    #[inline]
    fn data_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.tracking.get() != Tracking::Off {
            self.note_data(bid, true);
        }
        self.block_mut(bid)
    }

    /// A new budget starts its bookkeeping afresh (what the old one left
    /// mapped in stays until the host evicts it).
    fn set_memory_budget(&mut self, budget: MemoryBudget) {
        match budget {
            // Under a limit: no read-ahead around faults from the start (on
            // a disk that reads 8 MiB ahead, the metadata faults of the
            // first calls alone would fill a tight limit); the budget is
            // decided at the first access of file data.
            MemoryBudget::Auto => match super::budget::cgroup_limit() {
                Some(limit) => {
                    *self.limit.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(limit);
                    self.tracking.set(Tracking::Undecided);
                    self.advise_whole(libc::MADV_RANDOM);
                }
                None => self.start_tracking(None),
            },
            other => self.start_tracking(other.resolve()),
        }
    }

    /// msync(MS_SYNC) of the whole mapping: the kernel writes the dirty
    /// pages (it tracks them; the cost follows what was written, not the
    /// image size) and waits. EIO once a fault lost bytes of the mapping:
    /// what was written there never reached the image.
    fn flush(&mut self) -> Result<()> {
        let flushed = match &self.map {
            Mapping::ReadOnly(_) => Ok(()),
            Mapping::ReadWrite(m) => m.flush().map_err(|_| Errno::EIO),
        };
        if flushed.is_err() {
            self.writeback_failed.store(true, Relaxed);
            self.start_tracking(None);
        }
        if self.faulted() {
            return Err(Errno::EIO);
        }
        flushed
    }

    /// `msync(MS_SYNC)` of the range only: the host writes back those
    /// pages and flushes its device, not every page dirtied since (the
    /// homes a commit installed, which a checkpoint flushes later).
    fn flush_range(&mut self, first: Bid, count: u32) -> Result<()> {
        let offset = first as usize * BLOCK_SIZE;
        let len = count as usize * BLOCK_SIZE;
        let flushed = match &self.map {
            Mapping::ReadOnly(_) => Ok(()),
            Mapping::ReadWrite(m) if offset + len <= m.len() => {
                m.flush_range(offset, len).map_err(|_| Errno::EIO)
            }
            Mapping::ReadWrite(_) => Err(Errno::EUCLEAN),
        };
        if flushed == Err(Errno::EIO) {
            self.writeback_failed.store(true, Relaxed);
            self.start_tracking(None);
        }
        if self.faulted() {
            return Err(Errno::EIO);
        }
        flushed
    }

    #[inline]
    fn faulted(&self) -> bool {
        self.fault.faulted() || self.writeback_failed.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, vec![0u8; 4 * BLOCK_SIZE]).unwrap();
        let mut s = MmapStore::open(&p, false).unwrap();
        assert_eq!(s.blocks(), 4);
        s.block_mut(3).unwrap()[0] = 9;
        assert_eq!(s.block(4).unwrap_err(), Errno::EUCLEAN);
        s.flush().unwrap();
        drop(s);
        let mut r = MmapStore::open(&p, true).unwrap();
        assert_eq!(r.block(3).unwrap()[0], 9);
        assert_eq!(r.block_mut(3).unwrap_err(), Errno::EROFS);
        std::fs::write(&p, [0u8; 100]).unwrap();
        assert!(MmapStore::open(&p, true).is_err());
    }

    #[test]
    fn one_writer_or_many_readers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, vec![0u8; 4 * BLOCK_SIZE]).unwrap();
        let busy = |r: std::io::Result<MmapStore>| r.err().and_then(|e| e.raw_os_error());
        let w = MmapStore::open(&p, false).unwrap();
        assert_eq!(busy(MmapStore::open(&p, false)), Some(libc::EBUSY));
        assert_eq!(busy(MmapStore::open(&p, true)), Some(libc::EBUSY));
        drop(w);
        let r1 = MmapStore::open(&p, true).unwrap();
        let r2 = MmapStore::open(&p, true).unwrap();
        assert_eq!(busy(MmapStore::open(&p, false)), Some(libc::EBUSY));
        drop((r1, r2));
        MmapStore::open(&p, false).unwrap();
    }
}

//! Change counters of open inodes, published in shared memory, and the
//! read leases they guard: what lets a client of `ulfs serve` read file
//! data straight from its own read-only mapping of the image, with no
//! request, and still never read what the file no longer holds.
//!
//! **The board** (`ChangeBoard`) is a memfd of `SLOTS` 64-bit counters,
//! written by the volume only. Inode `ino`'s counter is slot
//! `slot_of(ino)`; several inodes share a slot, so a change of one ends
//! the others' leases too (a round trip more for them, never a wrong
//! answer). The volume adds one to the counter every time the decoded
//! inode of an open file changes (`OpenInodes`: size, times, block map
//! and block count of an open file change there and nowhere else, and a
//! call that writes an inode slot writes the open entry through). A file
//! that is not open anywhere has no lease, so it needs no counter.
//!
//! **A lease** (`Volume::lease`) is the counter's value, the file's size
//! and the map from file blocks to image blocks over a stretch of the
//! file, taken together under the volume's lock. It is granted only when a
//! read would change nothing (relatime finds no atime due, no fault lost
//! bytes of the image). A holder reads a block at `bid * BLOCK_SIZE` of
//! the image, and trusts what it read only if the counter, read again
//! after the copy, still has the leased value: whatever could make those
//! bytes another file's (a truncate or hole punch freeing the block, which
//! then waits for the next commit before anyone may reuse it) or make the
//! size or the next read's atime different, changed the counter first.
//! Overwrites in place need nothing: the holder's mapping and the
//! server's are the same page cache, so the holder sees them as the
//! server does.
//!
//! **Ordering.** The volume has one writer at a time (the server's
//! exclusive lock), so a bump is a load, a store and a release fence, made
//! *before* any byte of the file changes in place (a write's copy, a
//! truncate's or a hole punch's zeroing: `Volume::end_leases`) and again
//! as the inode changes. A reader does acquire load, copy, acquire fence,
//! load: if the copy saw a byte written after the first bump, the fence
//! makes the second load see that bump; a lease is only granted under the
//! volume's lock, so never in the middle of a change. The board is sealed
//! against every write but the volume's own mapping's (FUTURE_WRITE): a
//! reader cannot set a counter back.

use crate::errno::{Errno, Result};
use crate::types::Ino;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Counters on the board: 128 KiB.
pub const SLOTS: u32 = 16_384;

/// The board's size in bytes.
const BOARD_BYTES: usize = SLOTS as usize * 8;

/// A board's seals: fixed size, no writes but the volume's own mapping's,
/// no seal more.
const SEALS: rustix::fs::SealFlags = rustix::fs::SealFlags::SHRINK
    .union(rustix::fs::SealFlags::GROW)
    .union(rustix::fs::SealFlags::FUTURE_WRITE)
    .union(rustix::fs::SealFlags::SEAL);

/// The slot of inode `ino` (Fibonacci hashing: consecutive inode numbers,
/// the common case of files made together, land far apart).
#[inline]
pub fn slot_of(ino: Ino) -> u32 {
    (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) as u32 % SLOTS
}

/// The volume's side: the board, writable.
pub struct ChangeBoard {
    memfd: OwnedFd,
    map: memmap2::MmapRaw,
}

impl ChangeBoard {
    /// A new board, every counter zero.
    pub fn new() -> Result<ChangeBoard> {
        let memfd = rustix::fs::memfd_create(
            "ulfs-changes",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        rustix::fs::ftruncate(&memfd, BOARD_BYTES as u64).map_err(|e| Errno(e.raw_os_error()))?;
        let map = memmap2::MmapOptions::new()
            .len(BOARD_BYTES)
            .map_raw(&memfd)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        // Only this mapping may write it from now on: a reader could reopen
        // its read-only descriptor writable through /proc (a memfd's mode
        // lets it), and a counter set back would keep a lease alive across
        // a change. FUTURE_WRITE refuses every write and writable mapping
        // made after it; the mode keeps other users from even reopening.
        // Its size is fixed: a reader's mapping can never lose its pages.
        rustix::fs::fchmod(&memfd, rustix::fs::Mode::from_raw_mode(0o400))
            .map_err(|e| Errno(e.raw_os_error()))?;
        rustix::fs::fcntl_add_seals(&memfd, SEALS).map_err(|e| Errno(e.raw_os_error()))?;
        Ok(ChangeBoard { memfd, map })
    }

    #[inline]
    fn counter(&self, slot: u32) -> &AtomicU64 {
        debug_assert!(slot < SLOTS);
        // SAFETY: the mapping is BOARD_BYTES long, page-aligned and lives
        // as long as `self`; slot < SLOTS keeps the 8-byte counter inside
        // it and aligned. Other processes only read it.
        unsafe { &*(self.map.as_mut_ptr() as *const AtomicU64).add((slot % SLOTS) as usize) }
    }

    /// Inode `ino` is about to change, or changed: every lease on it
    /// ends. Called before any byte of the file changes in place (and
    /// again as its inode changes): the fence orders the bump before the
    /// stores that follow, so a reader whose copy saw one of them sees the
    /// bump when it looks again (`ChangeView::load_after_reads`).
    #[inline]
    pub fn bump(&self, ino: Ino) {
        let c = self.counter(slot_of(ino));
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Ends every lease (after something that could change any file, as a
    /// repair rewriting inode slots).
    pub fn bump_all(&self) {
        for slot in 0..SLOTS {
            let c = self.counter(slot);
            c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        }
        fence(Ordering::Release);
    }

    /// The counter of `ino`'s slot now.
    #[inline]
    pub fn value(&self, ino: Ino) -> u64 {
        self.counter(slot_of(ino)).load(Ordering::Acquire)
    }

    /// A descriptor of the board that can only be read (a reopen of the
    /// memfd through /proc: write access cannot be taken back from a
    /// descriptor passed on), for a client to map.
    pub fn read_only_fd(&self) -> Result<OwnedFd> {
        let path = format!("/proc/self/fd/{}", self.memfd.as_raw_fd());
        rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| Errno(e.raw_os_error()))
    }

    /// The board's own descriptor (writable).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }
}

/// A reader's side: a board mapped read-only.
pub struct ChangeView {
    map: memmap2::Mmap,
}

impl ChangeView {
    /// Maps the board behind `fd` (as `ChangeBoard::read_only_fd` gives
    /// it); EINVAL for a file that is not a sealed board.
    pub fn map(fd: BorrowedFd<'_>) -> Result<ChangeView> {
        let st = rustix::fs::fstat(fd).map_err(|e| Errno(e.raw_os_error()))?;
        let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| Errno(e.raw_os_error()))?;
        // A board that could shrink would turn our reads into SIGBUS; one
        // that others could write would not be the volume's word.
        if st.st_size as usize != BOARD_BYTES || !seals.contains(SEALS) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a read-only shared mapping of a memfd sealed against
        // shrinking, of exactly its size: every page stays backed. Its
        // bytes change under us (the volume's process writes them): they
        // are only read as atomics (`load`).
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(BOARD_BYTES)
                .map(fd.as_raw_fd())
        }
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        Ok(ChangeView { map })
    }

    /// The counter of `slot` now (acquire: what the volume did before it
    /// last bumped this slot is visible after).
    #[inline]
    pub fn load(&self, slot: u32) -> u64 {
        self.counter(slot).load(Ordering::Acquire)
    }

    /// The counter of `slot` after the reads before it (a copy under a
    /// lease): if those reads saw anything written after a bump, this sees
    /// the bump.
    #[inline]
    pub fn load_after_reads(&self, slot: u32) -> u64 {
        fence(Ordering::Acquire);
        self.counter(slot).load(Ordering::Relaxed)
    }

    #[inline]
    fn counter(&self, slot: u32) -> &AtomicU64 {
        // SAFETY: as `ChangeBoard::counter`: in bounds and aligned (the
        // mapping is BOARD_BYTES long and page-aligned); AtomicU64 has the
        // layout of u64, and we only load.
        unsafe { &*(self.map.as_ptr() as *const AtomicU64).add((slot % SLOTS) as usize) }
    }
}

/// One stretch of a leased file: file blocks `first .. first + blocks`
/// are image blocks `bid .. bid + blocks`, or a hole when `bid` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRun {
    pub first: u64,
    pub blocks: u32,
    pub bid: u64,
}

/// What `Volume::lease` grants (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The counter's slot (`slot_of(ino)`).
    pub slot: u32,
    /// Its value when the lease was taken.
    pub generation: u64,
    /// The file's size then.
    pub size: u64,
    /// From the block holding the asked offset on, in order, with no gap,
    /// up to the end of the file or as many runs as were asked for.
    pub runs: Vec<LeaseRun>,
}

impl super::Volume {
    /// Publishes every change of an open inode on `board` from now on
    /// (a server, before its first client).
    pub fn set_change_board(&mut self, board: std::sync::Arc<ChangeBoard>) {
        self.open.set_board(board);
    }

    /// A read lease on `ino` from the block holding `off` (see the module
    /// comment), of at most `max_runs` runs. EAGAIN when a read now would
    /// change something (relatime finds its atime due: a read moves it),
    /// or the volume publishes no changes; EALREADY when the atime was
    /// moved in this clock tick and a read at the next tick would move it
    /// again (it is not newer than the last change); EISDIR/EINVAL for
    /// what is not a regular file; EIO once a fault lost bytes of the
    /// image. `ino` must be open (only open files publish their changes):
    /// the caller holds it by a descriptor.
    pub fn lease(&self, ino: Ino, off: u64, max_runs: usize) -> Result<Lease> {
        let Some(board) = self.open.board() else {
            return Err(Errno::EAGAIN);
        };
        if self.open.refs(ino) == 0 {
            return Err(Errno::EAGAIN);
        }
        // Read before anything it covers: a change after this is a bump
        // the holder will see.
        let generation = board.value(ino);
        let inode = self.inode(ino)?;
        super::file::readable(&inode)?;
        if self.bytes_lost() {
            return Err(Errno::EIO);
        }
        if self.atime_due_for(&inode) {
            return Err(Errno::EAGAIN);
        }
        if self.atime_may_fall_due(&inode) {
            return Err(Errno(libc::EALREADY));
        }
        let bs = crate::format::BLOCK_SIZE as u64;
        let end = inode.size.div_ceil(bs);
        let mut lblk = off / bs;
        let mut runs: Vec<LeaseRun> = Vec::new();
        while lblk < end && runs.len() < max_runs {
            // `bid` is `lblk`'s block; its run may begin before `lblk`
            // (where the pointer array says) and end past the file: only
            // what is left of both.
            let (bid, first, len) = self.bmap_run(&inode, lblk)?;
            let run_end = if bid == 0 {
                // A hole: to the next mapped block, whole subtrees at once.
                self.bmap_seek(&inode, lblk, true)?.unwrap_or(end)
            } else {
                first + len as u64
            };
            let blocks = run_end
                .min(end)
                .saturating_sub(lblk)
                .clamp(1, u32::MAX as u64) as u32;
            let bid = bid as u64;
            match runs.last_mut() {
                Some(r) if r.bid == 0 && bid == 0 => r.blocks += blocks,
                _ => runs.push(LeaseRun {
                    first: lblk,
                    blocks,
                    bid,
                }),
            }
            lblk += blocks as u64;
        }
        Ok(Lease {
            slot: slot_of(ino),
            generation,
            size: inode.size,
            runs,
        })
    }

    /// Ends every lease on `ino` now: before its bytes change in place
    /// (see "Ordering" above), or are to be read from elsewhere than the
    /// image (a server's shared mapping of the file). Free without a board.
    #[inline]
    pub fn end_leases(&self, ino: Ino) {
        if let Some(b) = self.open.board() {
            b.bump(ino);
        }
    }

    /// `end_leases` of an open file, on the write path: without a board
    /// (in process) one test of a pointer and nothing else.
    #[inline(always)]
    pub(super) fn end_leases_open(&self, id: super::OpenId) {
        if let Some(b) = self.open.board() {
            b.bump(self.open_ino(id));
        }
    }

    /// The image file behind the volume, for a client to map it read-only
    /// beside the server; None for an image that is not a file of its own
    /// (a v1 image translated into memory, a simulated disk) or whose
    /// newest bytes are not all in it.
    pub fn image_fd(&self) -> Option<BorrowedFd<'_>> {
        // A read-only mount that replayed its log in memory reads file
        // data from there, not from the image's blocks.
        if self.v1.is_some() || self.j.replayed_in_memory() {
            return None;
        }
        self.j.store().backing_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_sees_the_boards_bumps_and_cannot_write() {
        let board = ChangeBoard::new().unwrap();
        let fd = board.read_only_fd().unwrap();
        let view = ChangeView::map(fd.as_fd()).unwrap();
        let s = slot_of(7);
        assert_eq!(view.load(s), 0);
        board.bump(7);
        board.bump(7);
        assert_eq!(view.load(s), 2);
        assert_eq!(board.value(7), 2);
        board.bump_all();
        assert_eq!(view.load_after_reads(s), 3);
        // The descriptor a client gets cannot be written through, nor
        // reopened writable (root may reopen it: then neither a write nor
        // a writable mapping is let through, and the counters stay).
        let w = rustix::io::write(&fd, &[1u8; 8]);
        assert!(w.is_err(), "a read-only board descriptor took a write");
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
        if let Ok(rw) = rustix::fs::open(path.as_str(), flags, rustix::fs::Mode::empty()) {
            assert!(rustix::io::write(&rw, &[0u8; 8]).is_err(), "a write");
            // SAFETY: a mapping that must be refused; nothing uses it.
            let m = unsafe {
                memmap2::MmapOptions::new()
                    .len(4096)
                    .map_mut(rw.as_raw_fd())
            };
            assert!(m.is_err(), "a writable mapping of the board");
        }
        assert_eq!(view.load(s), 3);
    }

    /// A read-only mount that replayed a log in memory has file data the
    /// image's blocks do not: no view of the image is offered for it.
    #[test]
    fn an_image_whose_log_was_replayed_in_memory_is_not_offered() {
        use crate::fs::{MkfsOptions, Mode, MountOptions, Volume, mkfs};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let opts = MkfsOptions {
            size: 16 << 20,
            mode: Mode::Journal,
            ..Default::default()
        };
        mkfs(&p, &opts).unwrap();
        let ro = MountOptions {
            read_only: true,
            ..Default::default()
        };
        let clean = Volume::mount(&p, ro).unwrap();
        assert!(clean.image_fd().is_some(), "a clean image is offered");
        drop(clean);
        let mut v = Volume::mount(&p, MountOptions::default()).unwrap();
        let root = v.root();
        let ino = v
            .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        v.write_at(ino, b"logged", 0).unwrap();
        v.sync().unwrap();
        // A crash: the log holds the transaction, the homes may not.
        v.abandon();
        drop(v);
        let replayed = Volume::mount(&p, ro).unwrap();
        assert!(
            replayed.image_fd().is_none(),
            "offered with its log in memory"
        );
    }

    #[test]
    fn neighbouring_inodes_land_in_different_slots() {
        let slots: std::collections::HashSet<u32> = (1..=1000).map(slot_of).collect();
        assert!(slots.len() > 990, "{} distinct slots of 1000", slots.len());
        assert!((1..100_000).all(|i| slot_of(i) < SLOTS));
    }

    #[test]
    fn a_file_that_is_not_a_board_is_refused() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(BOARD_BYTES as u64).unwrap();
        assert_eq!(ChangeView::map(f.as_fd()).err(), Some(Errno::EINVAL));
    }
}

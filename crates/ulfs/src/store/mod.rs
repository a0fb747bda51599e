//! Where blocks live. `BlockStore` is what every layer above needs of the
//! medium: bounds-checked block access and a durability barrier.
//!
//! `MmapStore` is the real one (the image mapped MAP_SHARED; `fault` turns
//! a SIGBUS on that mapping into an error, `holes` makes a sparse image
//! whole before it is written, `residency` keeps its file data within a
//! memory budget, which `budget` finds). `SimDisk` is
//! a simulated disk for crash testing: it remembers what is durable and
//! what was written since the last flush, so tests can produce every state
//! a power cut could leave.

mod budget;
pub(crate) mod fault;
mod holes;
mod mmap;
mod residency;
pub mod sim;
mod view;

pub use budget::{MIN_BUDGET, MemoryBudget, cgroup_headroom};
pub(crate) use holes::free_bytes;
pub use mmap::{MmapStore, backing_size, is_block_device, lock_image, open_locked};
pub use sim::{Fate, SimDisk};
pub use view::ImageView;

use crate::errno::Result;
use crate::format::{Bid, Block};

/// A block device as the file system sees it.
///
/// Contract: `block_mut` may be written at any time; nothing written is
/// durable until `flush` returns Ok, and until then any subset of the
/// written blocks may reach the medium, each possibly torn at 512-byte
/// sector granularity (this is what a MAP_SHARED mapping gives: the kernel
/// writes dirty pages back when it likes). Ids are checked: past the end is
/// EUCLEAN, writing a read-only store is EROFS. `Sync`: a volume may be
/// read by several threads at once under a shared lock (`ulfs mount`), so
/// whatever a `&self` method keeps for itself must be safe to share.
pub trait BlockStore: Send + Sync {
    fn blocks(&self) -> u64;
    fn is_read_only(&self) -> bool;
    fn block(&self, bid: Bid) -> Result<&Block>;
    fn block_mut(&mut self, bid: Bid) -> Result<&mut Block>;
    /// A block of file data, to read: `block`, and the store learns that
    /// file data is read there (a store keeping a memory budget tracks
    /// these: store/residency.rs). Metadata goes through `block`.
    #[inline]
    fn data(&self, bid: Bid) -> Result<&Block> {
        self.block(bid)
    }
    /// A block of file data, to write: `block_mut`, as `data` says.
    #[inline]
    fn data_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        self.block_mut(bid)
    }
    /// Keeps the file data mapped in within `budget` from now on. Stores
    /// held in memory have nothing to keep and ignore it (without looking
    /// up the cgroup an `Auto` budget would need).
    fn set_memory_budget(&mut self, budget: MemoryBudget) {
        let _ = budget;
    }
    /// Makes every write so far durable and waits; EIO if it could not.
    fn flush(&mut self) -> Result<()>;
    /// Makes the writes so far to blocks `first .. first + count` durable
    /// and waits; EIO if it could not. Other blocks written may or may not
    /// reach the medium. A commit for fsync flushes only its log records
    /// this way: everything it needs durable is in them. By default the
    /// whole store is flushed, which is never less.
    fn flush_range(&mut self, first: Bid, count: u32) -> Result<()> {
        let _ = (first, count);
        self.flush()
    }
    /// An access to the medium failed since the store was opened (a host
    /// file truncated under it, an I/O error): the bytes read there were
    /// zeros instead, and what was written there is lost. Sticky; cheap
    /// (one atomic load).
    fn faulted(&self) -> bool {
        false
    }
    /// The file the store maps, if it is one: a client of a server maps
    /// it read-only to read file data without a request (fs/changes.rs).
    fn backing_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// The simulated disk behind this store, for crash tests.
    fn as_sim(&self) -> Option<&SimDisk> {
        None
    }
}

/// Copies file bytes between a caller's buffer and a block of the image,
/// in pieces of at most 2 KiB. glibc's memcpy switches to `rep movsb` at
/// 4 KiB on AVX2 machines, and on some AMD processors (this project's CI
/// machines among them) that runs five times slower when source and
/// destination are not equally aligned, the usual case here: a page-aligned
/// block against a buffer from malloc, at 16 bytes past a page. Measured
/// with a 4 KiB write and read per block: 391 µs per MiB in one piece,
/// 82 µs in 2 KiB pieces, 67 µs with both aligned (`hot_path` bench,
/// `overwrite-65536`). Below the threshold glibc copies with vector
/// registers, fast at any alignment.
#[inline]
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 2048;
    if dst.len() <= PIECE {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
    }
}

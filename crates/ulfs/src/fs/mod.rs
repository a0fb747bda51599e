//! The file-system engine: one mounted image as a `Volume`. Allocation,
//! inodes, block maps, directories and the inode-level operations live in
//! the submodules, each as an `impl Volume` block over the primitives here.
//!
//! A `Volume` knows nothing of descriptors, offsets or working directories
//! (that is `posix`): a server can hold one `Volume` for many clients.
//! Mutation takes `&mut self`, so the single-owner case needs no lock.

mod alloc;
mod attrs;
mod bmap;
mod calls;
pub mod changes;
mod dir;
mod file;
mod inodes;
mod kernel_refs;
mod mkfs;
mod mount;
mod open_inodes;
mod ops;
mod repair;
mod resize;
mod shared;

pub use attrs::SetTime;
pub use dir::DirItem;
pub use file::MAX_FILE_SIZE;
pub use mkfs::{MkfsOptions, format_store, min_journal, mkfs};
pub use mount::{Info, Mode, MountOptions};
pub(crate) use mount::{Reap, store_error};
pub use open_inodes::OpenId;
pub use ops::dtype_of;
pub(crate) use repair::{SharedBefore, ns, orphans};
pub use resize::{InTheWay, Resized};
pub use shared::SharedVolume;

use crate::errno::{Errno, Result};
use crate::format::superblock::{SB_PRIMARY, SB_SECONDARY, Superblock};
use crate::format::{Bid, Block};
use crate::txn::Journal;
use crate::types::{Ino, Timespec};

pub struct Volume {
    pub(crate) j: Journal,
    /// The superblock as of now. Structural fields (list heads) are written
    /// back at the end of the transaction that changed them; counters at
    /// each checkpoint.
    pub(crate) sb: Superblock,
    sb_dirty: bool,
    /// Allocation cursor: the group and bitmap word where the last block was
    /// found, so allocation does not rescan full groups or words.
    alloc_group: u32,
    alloc_word: usize,
    /// Open inodes: references, so an unlinked file lives until its last
    /// close, and decoded inodes for the data path (`open_inodes.rs`). Kept
    /// here, not in a descriptor table, because several tables (server
    /// clients) can hold the same inode.
    open: open_inodes::OpenInodes,
    /// The lookups a kernel client holds (`kernel_refs.rs`): like open
    /// references, they keep an unlinked inode alive.
    kernel_refs: kernel_refs::KernelRefs,
    read_only: bool,
    /// Journal mode: commit the running transaction at this many blocks...
    commit_blocks: usize,
    /// ...or when its first change is this old.
    commit_interval: std::time::Duration,
    /// What replay found at mount.
    replayed: crate::txn::Replayed,
    /// The image had been unmounted cleanly before this mount.
    was_clean: bool,
    hash_key: (u64, u64),
    dev: u64,
    /// Stamps every change with this time instead of the clock
    /// (`MountOptions::fixed_time`).
    fixed_time: Option<crate::types::Timespec>,
    /// Reads leave atime alone (`set_no_atime`: a `noatime` mount).
    no_atime: bool,
    /// The call in progress: what to restore if it fails (`calls.rs`).
    call: Option<calls::CallStart>,
    /// The volume is the translation of an original ULFS image (`v1/`):
    /// what that image records.
    v1: Option<crate::v1::Facts>,
}

// Reads may share a volume between threads (`read_shared`, `lookup`,
// `stat_ino`, `read_dir`, `remember` under a read lock in `ulfs mount`):
// whatever a `&self` call keeps for itself is atomic or locked.
const _: fn() = || {
    fn shared_between_threads<T: Sync + Send>() {}
    shared_between_threads::<Volume>();
};

impl Volume {
    /// `noatime`: reads and listings no longer move atime (a FUSE mount
    /// asked so; the kernel cannot do it for the file system).
    pub fn set_no_atime(&mut self, on: bool) {
        self.no_atime = on;
    }

    pub fn root(&self) -> Ino {
        self.sb.root_ino
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Makes the volume the read-only translation of an original ULFS
    /// image (`v1::mount`): every change is EROFS from now on.
    pub(crate) fn seal_as_v1(&mut self, facts: crate::v1::Facts) {
        self.read_only = true;
        self.v1 = Some(facts);
    }

    /// The time changes are stamped with: the clock, or the mount's fixed
    /// time (reproducible images).
    #[inline]
    pub(crate) fn now(&self) -> crate::types::Timespec {
        self.fixed_time.unwrap_or_else(crate::types::Timespec::now)
    }

    /// Fails with EROFS when the volume cannot be changed.
    #[inline]
    pub fn writable(&self) -> Result<()> {
        if self.read_only || self.j.has_failed() {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// A metadata block for reading.
    #[inline]
    pub(crate) fn meta(&self, bid: Bid) -> Result<&Block> {
        self.j.meta(bid)
    }

    /// A metadata block for writing, through the transaction.
    #[inline]
    pub(crate) fn meta_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        self.j.meta_mut(bid)
    }

    /// A metadata block for a write that changes only the given 256-byte
    /// parts of it (`Journal::meta_mut_parts`).
    #[inline]
    pub(crate) fn meta_mut_parts(&mut self, bid: Bid, parts: &[usize]) -> Result<&mut Block> {
        self.j.meta_mut_parts(bid, parts)
    }

    /// Checks that `bid` may be a pointer to an allocatable block: in the
    /// data area and not a group's map block (no inode, index or block map
    /// ever points at one; reading a map block as file data would show
    /// bitmap bytes that change under the file).
    #[inline]
    pub(crate) fn check_bid(&self, bid: Bid) -> Result<Bid> {
        match self.bid_fault(bid) {
            None => Ok(bid),
            Some(_) => Err(Errno::EUCLEAN),
        }
    }

    /// Why `bid` cannot be a pointer (as messages say it), or None.
    #[inline]
    pub(crate) fn bid_fault(&self, bid: Bid) -> Option<&'static str> {
        if bid < self.sb.first_group || bid as u64 >= self.sb.total_blocks {
            Some("outside the data area")
        } else if (bid - self.sb.first_group).is_multiple_of(crate::format::GROUP_SPAN) {
            Some("at a map block")
        } else {
            None
        }
    }

    /// Ends one operation. In place, structural superblock changes are
    /// written now. With a journal the operation joins the running
    /// transaction, which commits once it is big or old enough.
    pub fn commit(&mut self) -> Result<()> {
        if !self.j.is_journaled() {
            if self.sb_dirty {
                self.write_superblock(SB_PRIMARY)?;
                self.sb_dirty = false;
            }
            self.j.commit();
            return Ok(());
        }
        let due = self.txn_full()
            || self.j.age().is_some_and(|a| a >= self.commit_interval)
            || self
                .open
                .dirty_since()
                .is_some_and(|since| self.is_due_at(since, Timespec::now()));
        if due {
            self.commit_txn()?;
        }
        // Freed blocks come back only after a commit and a checkpoint; when
        // they are much of the free space (a big delete on a full disk),
        // bring them back now, at the end of an operation, where committing
        // is safe.
        let q = self.j.quarantined() as u64;
        if q > 0
            && (q * 2 > self.sb.free_blocks
                || self.sb.free_blocks - q.min(self.sb.free_blocks) < 256)
        {
            self.commit_txn()?;
            self.j.checkpoint()?;
        }
        Ok(())
    }

    /// Journal: whether inode changes made at `since` (and kept in open
    /// inodes) make the running transaction as old as the commit interval
    /// at `now`. A clock that went back says yes, so nothing waits for it
    /// to catch up.
    #[inline]
    pub(crate) fn is_due_at(&self, since: Timespec, now: Timespec) -> bool {
        // Compared, not subtracted: `since` is i128 nanoseconds, a
        // multiplication on every write of the fast path.
        self.j.is_journaled() && (now < since || now >= since.plus(self.commit_interval))
    }

    /// Journal: commits the running transaction with the superblock and
    /// the changes kept in open inodes in it.
    pub(crate) fn commit_txn(&mut self) -> Result<()> {
        self.write_back_inodes()?;
        self.commit_txn_now(false).map(drop)
    }

    /// Journal: whether the running transaction is as big as a commit
    /// should be, counting the inode blocks that writing back the open
    /// inodes' changes may add.
    pub(super) fn txn_full(&self) -> bool {
        self.j.pending() + self.open.dirty_count() >= self.commit_blocks
    }

    /// `commit_txn` once the open inodes are written back; `for_sync`: a
    /// commit that fsync waits for (`Journal::commit_for_sync`).
    /// Returns whether a commit for sync committed anything.
    fn commit_txn_now(&mut self, for_sync: bool) -> Result<bool> {
        if self.j.pending() > 0 || self.sb_dirty {
            self.write_superblock(SB_PRIMARY)?;
            self.sb_dirty = false;
        }
        let committed = if for_sync {
            self.j.commit_for_sync()?
        } else {
            self.j.commit_txn()?;
            false
        };
        self.rebase_call();
        Ok(committed)
    }

    /// Whether the running transaction has room for about `blocks` more
    /// (operations that can grow without bound, like a huge write, commit
    /// what they have done so far when it has not).
    pub(crate) fn txn_room(&self, blocks: usize) -> bool {
        self.j.pending() + blocks + 1 < self.j.capacity()
    }

    /// Makes everything done so far durable. In place: seals checksums,
    /// writes the primary superblock, flushes, then the secondary copy and
    /// flushes again, so at every instant one valid copy exists. Journal:
    /// commits the running transaction (or, with nothing to commit, flushes
    /// file data).
    pub fn sync(&mut self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        if self.j.is_journaled() {
            self.write_back_inodes()?;
            // A commit flushed what the fsync promises; with nothing to
            // commit, file data written in place is flushed alone.
            let committed = self.commit_txn_now(true)?;
            return if committed {
                Ok(())
            } else {
                self.j.flush_data()
            };
        }
        self.write_back_inodes()?;
        self.sb.seq += 1;
        self.write_superblock(SB_PRIMARY)?;
        self.sb_dirty = false;
        self.j.checkpoint()?;
        self.write_superblock(SB_SECONDARY)?;
        self.j.checkpoint()
    }

    /// Journal mode, at unmount: everything committed and checkpointed, then
    /// the secondary superblock refreshed in place (it is not journaled: a
    /// torn secondary is harmless while the primary is valid).
    pub(crate) fn sync_clean(&mut self) -> Result<()> {
        if !self.j.is_journaled() {
            return self.sync();
        }
        self.sb.seq += 1;
        self.sb_dirty = true;
        self.commit_txn()?;
        self.j.checkpoint()?;
        let sb = self.sb.clone();
        sb.encode(self.j.direct_mut(SB_SECONDARY)?);
        self.j.flush_data()
    }

    fn write_superblock(&mut self, which: Bid) -> Result<()> {
        self.sb.write_time = self.now().sec;
        let sb = self.sb.clone();
        sb.encode(self.j.meta_mut(which)?);
        Ok(())
    }

    pub(crate) fn dev(&self) -> u64 {
        self.dev
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::Inode;

    fn volume_with(size: u64, mode: Mode) -> (tempfile::TempDir, Volume) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        mkfs(
            &p,
            &MkfsOptions {
                size,
                mode,
                ..Default::default()
            },
        )
        .unwrap();
        let v = Volume::mount(&p, MountOptions::default()).unwrap();
        (dir, v)
    }

    fn volume(size: u64) -> (tempfile::TempDir, Volume) {
        volume_with(size, Mode::Journal)
    }

    #[test]
    fn a_block_map_run_is_the_consecutive_blocks_around_a_block() {
        // Two groups: a map block lies inside the data area.
        let (_d, mut v) = volume(256 << 20);
        let d = v.sb.first_group + 1;
        let mut inode = Inode::default();
        inode.map[..7].copy_from_slice(&[d, d + 1, d + 2, 0, d + 10, d + 11, d + 20]);
        assert_eq!(v.bmap_run(&inode, 0).unwrap(), (d, 0, 3));
        assert_eq!(v.bmap_run(&inode, 1).unwrap(), (d + 1, 0, 3));
        assert_eq!(v.bmap_run(&inode, 2).unwrap(), (d + 2, 0, 3));
        assert_eq!(v.bmap_run(&inode, 3).unwrap(), (0, 3, 1));
        assert_eq!(v.bmap_run(&inode, 5).unwrap(), (d + 11, 4, 2));
        assert_eq!(v.bmap_run(&inode, 6).unwrap(), (d + 20, 6, 1));
        // A run never takes in a map block: pointers that reach one stop it.
        let map_block = v.sb.first_group + crate::format::GROUP_SPAN;
        inode.map[..3].copy_from_slice(&[map_block - 2, map_block - 1, map_block]);
        assert_eq!(v.bmap_run(&inode, 0).unwrap(), (map_block - 2, 0, 2));
        assert_eq!(v.bmap_run(&inode, 2), Err(Errno::EUCLEAN));
        // In an indirect block: a file written in order is one run there.
        let root = v.root();
        let ino = v
            .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        let data = vec![5u8; 40 * crate::format::BLOCK_SIZE];
        v.write_at(ino, &data, 0).unwrap();
        let inode = v.inode(ino).unwrap();
        let (bid, first, len) = v.bmap_run(&inode, 30).unwrap();
        assert_eq!((first, len), (12, 28));
        assert_eq!(bid, v.bmap(&inode, 30).unwrap());
        assert_eq!(bid - 18, v.bmap(&inode, 12).unwrap());
    }

    #[test]
    fn allocation_is_contiguous_and_reuses_freed_blocks() {
        for mode in [Mode::None, Mode::Journal] {
            let (_d, mut v) = volume_with(4 << 20, mode);
            let a = v.alloc_block(0).unwrap();
            let b = v.alloc_block(a + 1).unwrap();
            assert_eq!(b, a + 1);
            // Make the allocation durable-visible, so freeing it matters.
            v.commit_txn().unwrap();
            let free = v.sb.free_blocks;
            v.free_block(a).unwrap();
            assert_eq!(v.sb.free_blocks, free + 1);
            assert_eq!(
                v.free_block(a),
                Err(Errno::EUCLEAN),
                "double free is refused"
            );
            if mode == Mode::Journal {
                // Freed in the running transaction: not reusable until that
                // transaction is committed and checkpointed.
                assert_ne!(v.alloc_block(a).unwrap(), a);
                v.commit_txn().unwrap();
                v.j.checkpoint().unwrap();
            }
            assert_eq!(v.alloc_block(a).unwrap(), a);
            let mut n = 0;
            while v.alloc_block(0).is_ok() {
                n += 1;
            }
            assert_eq!(v.sb.free_blocks, 0, "{mode}");
            assert!(n > 800, "{mode}: {n}");
            assert_eq!(v.alloc_block(0), Err(Errno::ENOSPC));
        }
    }

    /// Finding: statfs said 10 free inodes on an image that then took
    /// 25,873 files. The estimate must be near what really fits.
    #[test]
    fn statfs_estimates_the_files_that_fit() {
        let (_d, mut v) = volume(4 << 20);
        let estimate = v.statfs().ffree;
        let root = v.root();
        let mut made = 0u64;
        'fill: for d in 0.. {
            let name = format!("dir-{d}");
            let Ok(dir) = v.create(root, name.as_bytes(), libc::S_IFDIR | 0o755, 0, 0, b"") else {
                break;
            };
            made += 1;
            for f in 0..1000 {
                let name = format!("file-{f:06}.txt");
                if v.create(dir, name.as_bytes(), libc::S_IFREG | 0o644, 0, 0, b"")
                    .is_err()
                {
                    break 'fill;
                }
                made += 1;
            }
        }
        let (lo, hi) = (made * 7 / 10, made * 13 / 10);
        assert!(
            (lo..=hi).contains(&estimate),
            "estimated {estimate} free inodes, {made} fit"
        );
    }

    #[test]
    fn inode_slots_fill_blocks_and_come_back() {
        let (_d, mut v) = volume(4 << 20);
        let mut inos = Vec::new();
        for _ in 0..40 {
            let mut i = Inode {
                mode: libc::S_IFREG | 0o600,
                nlink: 1,
                ..Default::default()
            };
            inos.push(v.alloc_inode(&mut i).unwrap());
        }
        // 15 slots per block: 40 inodes (plus the root) span three blocks.
        let blocks: std::collections::HashSet<_> = inos.iter().map(|i| i / 16).collect();
        assert_eq!(blocks.len(), 3);
        let victim = inos[3];
        v.free_inode(victim).unwrap();
        assert_eq!(v.inode(victim), Err(Errno::EUCLEAN));
        let mut i = Inode {
            mode: libc::S_IFREG,
            nlink: 1,
            ..Default::default()
        };
        assert_eq!(
            v.alloc_inode(&mut i).unwrap(),
            victim,
            "a freed slot is reused first"
        );
    }
}

//! Growing and shrinking a volume (`ulfs resize`), offline: the image's
//! size in blocks changes in one transaction, so that a crash anywhere
//! leaves it at the old size or the new one, checking clean.
//!
//! What a size is made of (FORMAT.md §2, §5): the superblock's
//! `total_blocks` and `group_count`, and the map blocks. The last group is
//! cut at the end of the image, its bits for positions past the end set.
//! - **Growing** (the store must already hold the new size): the old last
//!   group's positions that come into the image are cleared, map blocks
//!   are written for the new groups (past the new end: set), and the
//!   superblock counts the new blocks as free.
//! - **Shrinking** works when nothing past the new end is in use: the new
//!   last group's positions past the new end are set, the groups wholly
//!   past it are dropped; the file is cut afterwards by the caller. (Moving
//!   blocks out of the way, as resize2fs does, is not done: the error says
//!   how much is in the way.)
//!
//! In mode `journal` every change is one transaction of the log: the new
//! map blocks, the changed one and the superblock are installed together
//! or not at all. In mode `none` they are written in place, with the
//! guarantees every change has there (a crash may leave stale checksums
//! for `fsck --repair` to reseal).

use super::Volume;
use super::mkfs::{MIN_BLOCKS, min_journal};
use crate::errno::{Errno, Result};
use crate::format::*;

/// What a resize changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resized {
    pub old_blocks: u64,
    pub new_blocks: u64,
    pub old_groups: u32,
    pub new_groups: u32,
}

/// Why a shrink cannot be done: blocks in use past the new end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InTheWay {
    pub blocks: u64,
    pub first: u64,
}

impl Volume {
    /// The smallest and largest sizes in blocks `resize` accepts now, the
    /// largest bounded by the store (the caller grows the file first) and
    /// by the journal, which must hold a transaction touching every group.
    pub fn resize_limits(&self) -> (u64, u64) {
        let sb = &self.sb;
        let min = MIN_BLOCKS + sb.journal_blocks as u64;
        let mut max = self.j.store().blocks().min(u32::MAX as u64 + 1);
        if sb.journal_blocks > 0 {
            // groups * 2 + 64 <= journal
            let groups = (sb.journal_blocks as u64).saturating_sub(64) / 2;
            max = max.min(sb.first_group as u64 + groups.max(1) * GROUP_SPAN as u64);
        }
        (min, max)
    }

    /// Blocks in use at or past `new_total` (map blocks of groups that
    /// would go do not count), for a shrink to refuse with.
    pub fn in_use_past(&self, new_total: u64) -> Result<Option<InTheWay>> {
        let sb = &self.sb;
        let (mut count, mut first) = (0u64, None);
        for g in 0..sb.group_count {
            let map = sb.map_bid(g) as u64;
            let end = (map + GROUP_SPAN as u64).min(sb.total_blocks);
            if end <= new_total {
                continue;
            }
            let b = self.meta(map as Bid)?;
            for bid in (map + 1).max(new_total)..end {
                let i = (bid - map - 1) as usize;
                if b[MAP_BITMAP + i / 8] & (1 << (i % 8)) != 0 {
                    count += 1;
                    first.get_or_insert(bid);
                }
            }
        }
        Ok(first.map(|first| InTheWay {
            blocks: count,
            first,
        }))
    }

    /// Changes the image's size to `new_total` blocks and makes it
    /// durable. EINVAL outside `resize_limits`; ENOSPC when a shrink finds
    /// blocks in use past the new end (`in_use_past` says which).
    pub fn resize(&mut self, new_total: u64) -> Result<Resized> {
        self.writable()?;
        let (min, max) = self.resize_limits();
        if new_total < min || new_total > max {
            return Err(Errno::EINVAL);
        }
        if new_total < self.sb.total_blocks && self.in_use_past(new_total)?.is_some() {
            return Err(Errno::ENOSPC);
        }
        let resized = self.atomic(|v| v.resize_op(new_total))?;
        self.sync()?;
        Ok(resized)
    }

    fn resize_op(&mut self, new_total: u64) -> Result<Resized> {
        let old_total = self.sb.total_blocks;
        let old_groups = self.sb.group_count;
        let first_group = self.sb.first_group as u64;
        let new_groups = (new_total - first_group).div_ceil(GROUP_SPAN as u64) as u32;
        if self.sb.journal_blocks > 0 && self.sb.journal_blocks < min_journal(new_groups as u64) {
            return Err(Errno::EINVAL);
        }
        let mut free = self.sb.free_blocks;
        // Groups present before and after: their real positions change.
        for g in 0..old_groups.min(new_groups) {
            let map = self.sb.map_bid(g);
            let covered = |total: u64| (total - map as u64 - 1).min(MAP_BITS as u64) as u32;
            let (was, now) = (covered(old_total), covered(new_total));
            if was == now {
                continue;
            }
            let b = self.meta_mut(map)?;
            let mut group_free = get_u32(b, MAP_FREE);
            for i in was.min(now)..was.max(now) {
                let (off, mask) = (MAP_BITMAP + (i / 8) as usize, 1u8 << (i % 8));
                if now > was {
                    // Came into the image: free.
                    b[off] &= !mask;
                    group_free += 1;
                    free += 1;
                } else {
                    // Left the image (checked free): set, as mkfs does.
                    debug_assert!(b[off] & mask == 0);
                    b[off] |= mask;
                    group_free -= 1;
                    free -= 1;
                }
            }
            put_u32(b, MAP_FREE, group_free);
        }
        // New groups: a map block each, free but for positions past the end.
        for g in old_groups..new_groups {
            let map = self.sb.map_bid(g);
            let covered = (new_total - map as u64 - 1).min(MAP_BITS as u64) as u32;
            let b = self.meta_mut(map)?;
            b.fill(0);
            init_block(b, MAGIC_MAP);
            put_u32(b, MAP_FREE, covered);
            put_u32(b, MAP_GROUP, g);
            for i in covered..MAP_BITS {
                b[MAP_BITMAP + (i / 8) as usize] |= 1 << (i % 8);
            }
            free += covered as u64;
        }
        // Groups dropped: their blocks were free (checked), their map
        // blocks were never counted.
        for g in new_groups..old_groups {
            let map = self.sb.map_bid(g) as u64;
            let covered = (old_total - map - 1).min(MAP_BITS as u64);
            free -= covered;
        }
        self.sb.total_blocks = new_total;
        self.sb.group_count = new_groups;
        self.sb.free_blocks = free;
        self.sb_dirty = true;
        // The allocation cursor may point into a group that went.
        self.alloc_group = 0;
        self.alloc_word = 0;
        self.commit()?;
        Ok(Resized {
            old_blocks: old_total,
            new_blocks: new_total,
            old_groups,
            new_groups,
        })
    }
}

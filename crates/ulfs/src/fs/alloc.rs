//! Block allocation over the group bitmaps (map blocks).
//!
//! Each group is one map block followed by the `MAP_BITS` blocks it covers;
//! the map block's header keeps the group's free count, so full groups are
//! skipped without reading their bitmaps. A cursor remembers the group and
//! word of the last allocation: allocation never scans the whole bitmap per
//! call, and sequential files come out contiguous.

use super::Volume;
use crate::errno::{Errno, Result};
use crate::format::*;

impl Volume {
    /// Allocates one block, preferring `goal` (e.g. the block after a file's
    /// previous one) when it is free. The block's contents are not cleared.
    pub(crate) fn alloc_block(&mut self, goal: Bid) -> Result<Bid> {
        self.writable()?;
        #[cfg(test)]
        fault_injection::on_alloc()?;
        match self.alloc_once(goal) {
            // Blocks freed by committed transactions come back at a
            // checkpoint, which does not touch the running transaction.
            Err(Errno::ENOSPC) if self.j.quarantined_committed() > 0 => {
                self.j.checkpoint()?;
                self.alloc_once(goal)
            }
            r => r,
        }
    }

    fn alloc_once(&mut self, goal: Bid) -> Result<Bid> {
        if self.sb.free_blocks == 0 {
            return Err(Errno::ENOSPC);
        }
        if goal != 0
            && let Some(g) = self.sb.group_of(goal)
            && goal != self.sb.map_bid(g)
            && !self.j.is_quarantined(goal)
            && self.try_take(g, goal)?
        {
            self.j.note_alloc(goal);
            return Ok(goal);
        }
        if let Some(hint) = self.j.take_reuse_hint() {
            self.prefer(hint);
        }
        let quarantine = self.j.has_quarantine();
        let groups = self.sb.group_count;
        for step in 0..=groups {
            let g = (self.alloc_group + step) % groups;
            let map = self.sb.map_bid(g);
            let b = self.meta(map)?;
            if magic(b) != MAGIC_MAP {
                return Err(Errno::EUCLEAN);
            }
            if get_u32(b, MAP_FREE) == 0 {
                continue;
            }
            let words = (BLOCK_SIZE - MAP_BITMAP) / 8;
            let start = if step == 0 {
                self.alloc_word.min(words - 1)
            } else {
                0
            };
            // Two passes: from the cursor to the end, then from the start.
            // Quarantined blocks (freed, not yet safe to reuse) are skipped.
            let found = (start..words).chain(0..start).find_map(|w| {
                let mut free = !get_u64(b, MAP_BITMAP + 8 * w);
                while free != 0 {
                    let bit = free.trailing_zeros() as usize;
                    let bid = map as u64 + 1 + (w * 64 + bit) as u64;
                    if !quarantine || !self.j.is_quarantined(bid as Bid) {
                        return Some((w, bid));
                    }
                    free &= free - 1;
                }
                None
            });
            let Some((w, bid)) = found else {
                if quarantine {
                    continue;
                }
                // The free count lied: the map block is damaged.
                return Err(Errno::EUCLEAN);
            };
            if bid >= self.sb.total_blocks {
                if quarantine {
                    continue;
                }
                return Err(Errno::EUCLEAN);
            }
            self.alloc_group = g;
            self.alloc_word = w;
            let taken = self.try_take(g, bid as Bid)?;
            debug_assert!(taken);
            self.j.note_alloc(bid as Bid);
            return Ok(bid as Bid);
        }
        Err(Errno::ENOSPC)
    }

    /// Moves the allocation cursor back to `bid`, a block that became
    /// reusable below it: a block freed earlier has its page in memory
    /// already, where one never used costs a page fault (and on a sparse
    /// image, host space).
    fn prefer(&mut self, bid: Bid) {
        let Some(g) = self.sb.group_of(bid) else {
            return;
        };
        if bid == self.sb.map_bid(g) {
            return;
        }
        let word = (bid - self.sb.map_bid(g) - 1) as usize / 64;
        if (g, word) < (self.alloc_group, self.alloc_word) {
            self.alloc_group = g;
            self.alloc_word = word;
        }
    }

    /// Bit position of `bid` in its group's map block.
    fn bit_of(&self, g: u32, bid: Bid) -> (Bid, usize, u64) {
        let map = self.sb.map_bid(g);
        let i = (bid - map - 1) as usize;
        (map, MAP_BITMAP + (i / 64) * 8, 1u64 << (i % 64))
    }

    /// Marks `bid` used if it is free; returns whether it was taken.
    fn try_take(&mut self, g: u32, bid: Bid) -> Result<bool> {
        let (map, off, mask) = self.bit_of(g, bid);
        let b = self.meta(map)?;
        if magic(b) != MAGIC_MAP {
            return Err(Errno::EUCLEAN);
        }
        if get_u64(b, off) & mask != 0 {
            return Ok(false);
        }
        // The header (free count) and the bitmap word change.
        let b = self.meta_mut_parts(map, &[0, off / 256])?;
        let v = get_u64(b, off) | mask;
        put_u64(b, off, v);
        let free = get_u32(b, MAP_FREE);
        put_u32(b, MAP_FREE, free.saturating_sub(1));
        self.sb.free_blocks = self.sb.free_blocks.saturating_sub(1);
        Ok(true)
    }

    /// Returns a block to the free pool. Freeing a free block means the
    /// image is damaged: EUCLEAN, and nothing changes.
    pub(crate) fn free_block(&mut self, bid: Bid) -> Result<()> {
        let g = self.sb.group_of(bid).ok_or(Errno::EUCLEAN)?;
        if bid == self.sb.map_bid(g) {
            return Err(Errno::EUCLEAN);
        }
        let (map, off, mask) = self.bit_of(g, bid);
        let b = self.meta_mut_parts(map, &[0, off / 256])?;
        if magic(b) != MAGIC_MAP || get_u64(b, off) & mask == 0 {
            return Err(Errno::EUCLEAN);
        }
        let v = get_u64(b, off) & !mask;
        put_u64(b, off, v);
        let free = get_u32(b, MAP_FREE).saturating_add(1).min(MAP_BITS);
        put_u32(b, MAP_FREE, free);
        self.sb.free_blocks = (self.sb.free_blocks + 1).min(self.sb.data_blocks());
        self.j.forget(bid);
        Ok(())
    }

    /// Recomputes the superblock's free-block count from the groups' own
    /// counts: O(groups), one header read per 128 MiB, for images that were
    /// not unmounted cleanly (their superblock counter may be stale).
    pub(crate) fn recount_free_blocks(&mut self) -> Result<()> {
        let mut free = 0u64;
        for g in 0..self.sb.group_count {
            let b = self.meta(self.sb.map_bid(g))?;
            if magic(b) != MAGIC_MAP {
                return Err(Errno::EUCLEAN);
            }
            free += get_u32(b, MAP_FREE).min(MAP_BITS) as u64;
        }
        self.sb.free_blocks = free.min(self.sb.data_blocks());
        Ok(())
    }

    /// Allocates a block for metadata and gives it zeroed, with its magic.
    pub(crate) fn alloc_meta(&mut self, goal: Bid, magic: u32) -> Result<Bid> {
        let bid = self.alloc_block(goal)?;
        init_block(self.meta_mut(bid)?, magic);
        Ok(bid)
    }
}

/// Tests make the n-th allocation from now fail, or panic, to check that a
/// call cut off anywhere leaves no trace (fs/calls.rs).
#[cfg(test)]
pub(crate) mod fault_injection {
    use crate::errno::{Errno, Result};
    use std::cell::Cell;

    #[derive(Clone, Copy)]
    pub(crate) enum Fault {
        Fail,
        Panic,
    }

    thread_local! {
        static PLAN: Cell<Option<(u32, Fault)>> = const { Cell::new(None) };
    }

    /// The allocation after `n` more succeed fails (or panics); once.
    pub(crate) fn arm(n: u32, fault: Fault) {
        PLAN.with(|p| p.set(Some((n, fault))));
    }

    /// Whether the armed fault is still waiting (the call did not reach it).
    pub(crate) fn disarm() -> bool {
        PLAN.with(|p| p.take().is_some())
    }

    pub(super) fn on_alloc() -> Result<()> {
        PLAN.with(|p| match p.get() {
            Some((0, fault)) => {
                p.set(None);
                match fault {
                    Fault::Fail => Err(Errno::ENOSPC),
                    Fault::Panic => panic!("injected panic in an allocation"),
                }
            }
            Some((n, fault)) => {
                p.set(Some((n - 1, fault)));
                Ok(())
            }
            None => Ok(()),
        })
    }
}

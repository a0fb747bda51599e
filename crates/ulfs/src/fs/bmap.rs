//! Block maps: where a file's logical block `n` lives. Twelve direct
//! pointers in the inode, then single, double and triple indirect blocks of
//! 1020 pointers each (a radix tree of depth at most 3), so any offset of a
//! file costs at most three pointer reads, and holes (null pointers, or null
//! subtrees) take no space.

use super::Volume;
use crate::errno::{Errno, Result};
use crate::format::inode::Inode;
use crate::format::*;
use crate::types::Ino;

const P: u64 = PTRS_PER_BLOCK;

/// The three indirect trees: (slot in `Inode::map`, depth, first logical block).
const TREES: [(usize, u32, u64); 3] = [
    (N_DIRECT, 1, N_DIRECT as u64),
    (N_DIRECT + 1, 2, N_DIRECT as u64 + P),
    (N_DIRECT + 2, 3, N_DIRECT as u64 + P + P * P),
];

/// Where logical block `lblk` hangs: (slot in the inode map, depth, the
/// index to follow at each level from the top).
fn map_path(lblk: u64) -> Result<(usize, usize, [usize; 3])> {
    if lblk < N_DIRECT as u64 {
        return Ok((lblk as usize, 0, [0; 3]));
    }
    for (slot, depth, base) in TREES {
        let span = P.pow(depth);
        if lblk < base + span {
            let mut rel = lblk - base;
            let mut idx = [0usize; 3];
            for d in (0..depth as usize).rev() {
                idx[d] = (rel % P) as usize;
                rel /= P;
            }
            return Ok((slot, depth as usize, idx));
        }
    }
    Err(Errno::EFBIG)
}

/// Where a block pointer lives: in the inode's map, or in an indirect
/// block at an index.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MapSlot {
    Inode(usize),
    Indirect(Bid, usize),
}

#[inline]
fn ptr(b: &Block, i: usize) -> Bid {
    get_u32(b, IND_PTRS + 4 * i)
}

impl Volume {
    /// An indirect block, checked.
    fn indirect(&self, bid: Bid) -> Result<&Block> {
        self.check_bid(bid)?;
        let b = self.meta(bid)?;
        if magic(b) != MAGIC_INDIRECT {
            return Err(Errno::EUCLEAN);
        }
        Ok(b)
    }

    /// The physical block of logical block `lblk`, or 0 for a hole.
    pub(crate) fn bmap(&self, inode: &Inode, lblk: u64) -> Result<Bid> {
        let (slot, depth, idx) = map_path(lblk)?;
        let mut bid = inode.map[slot];
        for &i in &idx[..depth] {
            if bid == 0 {
                return Ok(0);
            }
            bid = ptr(self.indirect(bid)?, i);
        }
        if bid != 0 {
            self.check_bid(bid)?;
        }
        Ok(bid)
    }

    /// The physical block of `lblk` (0 for a hole) and the run around it:
    /// the logical blocks next to it whose pointers, in the same pointer
    /// array (the inode's direct map, or one indirect block), name the
    /// physical blocks next to it, as (first logical block, its physical
    /// block, length). A file written in order is a few long runs, so an
    /// open file remembers the run and finds any block in it without a
    /// pointer read (`OpenInodes::cached_map`).
    pub(crate) fn bmap_run(&self, inode: &Inode, lblk: u64) -> Result<(Bid, u64, u32)> {
        let (slot, depth, idx) = map_path(lblk)?;
        let mut leaf = None;
        let mut bid = inode.map[slot];
        for (level, &i) in idx[..depth].iter().enumerate() {
            if bid == 0 {
                return Ok((0, lblk, 1));
            }
            let b = self.indirect(bid)?;
            if level + 1 == depth {
                leaf = Some(b);
            }
            bid = ptr(b, i);
        }
        if bid == 0 {
            return Ok((0, lblk, 1));
        }
        self.check_bid(bid)?;
        // The pointer array and the index of `lblk` in it.
        let (at, count): (usize, usize) = match leaf {
            None => (slot, N_DIRECT),
            Some(_) => (idx[depth - 1], P as usize),
        };
        let get = |i: usize| match leaf {
            None => inode.map[i],
            Some(b) => ptr(b, i),
        };
        let follows = |i: usize, want: u64| {
            let b = get(i);
            b as u64 == want && self.bid_fault(b).is_none()
        };
        let mut first = at;
        while first > 0
            && follows(
                first - 1,
                (bid as u64).wrapping_sub((at - first + 1) as u64),
            )
        {
            first -= 1;
        }
        let mut end = at + 1;
        while end < count && follows(end, bid as u64 + (end - at) as u64) {
            end += 1;
        }
        let back = (at - first) as u64;
        Ok((bid, lblk - back, (end - first) as u32))
    }

    /// The physical block of `lblk`, allocating it (and any missing indirect
    /// blocks) when absent. Returns (block, freshly allocated). A fresh data
    /// block holds stale bytes: the caller writes or zeroes all of it.
    pub(crate) fn bmap_alloc(
        &mut self,
        ino: Ino,
        inode: &mut Inode,
        lblk: u64,
        goal: Bid,
    ) -> Result<(Bid, bool)> {
        let (slot, depth, idx) = map_path(lblk)?;
        if depth == 0 {
            if inode.map[slot] != 0 {
                return Ok((self.check_bid(inode.map[slot])?, false));
            }
            let bid = self.alloc_block(goal)?;
            inode.map[slot] = bid;
            inode.blocks = inode.blocks.saturating_add(1);
            return Ok((bid, true));
        }
        if inode.map[slot] == 0 {
            inode.map[slot] = self.new_indirect(ino, goal)?;
            inode.blocks = inode.blocks.saturating_add(1);
        }
        let mut parent = inode.map[slot];
        for (level, &i) in idx[..depth].iter().enumerate() {
            let child = ptr(self.indirect(parent)?, i);
            if child != 0 {
                parent = self.check_bid(child)?;
                continue;
            }
            let last = level + 1 == depth;
            let new = if last {
                self.alloc_block(goal)?
            } else {
                self.new_indirect(ino, goal)?
            };
            self.set_ptr(parent, i, new)?;
            inode.blocks = inode.blocks.saturating_add(1);
            if last {
                return Ok((new, true));
            }
            parent = new;
        }
        Ok((parent, false))
    }

    /// Where the pointer to logical block `lblk` lives, when every indirect
    /// block above it exists; `None` when one on the way is missing
    /// (allocating those is `bmap_alloc`'s work).
    pub(crate) fn map_slot(&self, inode: &Inode, lblk: u64) -> Result<Option<MapSlot>> {
        let (slot, depth, idx) = map_path(lblk)?;
        if depth == 0 {
            return Ok(Some(MapSlot::Inode(slot)));
        }
        let mut parent = inode.map[slot];
        for &i in &idx[..depth - 1] {
            if parent == 0 {
                return Ok(None);
            }
            parent = ptr(self.indirect(parent)?, i);
        }
        if parent == 0 {
            return Ok(None);
        }
        self.indirect(parent)?;
        Ok(Some(MapSlot::Indirect(parent, idx[depth - 1])))
    }

    /// Sets pointer `i` of indirect block `bid` (only that part of the
    /// block changes, so a call's undo record keeps only that part).
    pub(super) fn set_ptr(&mut self, bid: Bid, i: usize, to: Bid) -> Result<()> {
        let at = IND_PTRS + 4 * i;
        put_u32(self.meta_mut_parts(bid, &[at / 256])?, at, to);
        Ok(())
    }

    fn new_indirect(&mut self, ino: Ino, goal: Bid) -> Result<Bid> {
        let bid = self.alloc_meta(goal, MAGIC_INDIRECT)?;
        put_u64(self.meta_mut(bid)?, IND_OWNER, ino);
        Ok(bid)
    }

    /// Clears the mapping of one logical block and frees its data block
    /// (indirect blocks stay; they are freed by truncation).
    pub(crate) fn bmap_unmap(&mut self, inode: &mut Inode, lblk: u64) -> Result<()> {
        let (slot, depth, idx) = map_path(lblk)?;
        if depth == 0 {
            if inode.map[slot] != 0 {
                self.free_block(inode.map[slot])?;
                inode.map[slot] = 0;
                inode.blocks = inode.blocks.saturating_sub(1);
            }
            return Ok(());
        }
        let mut parent = inode.map[slot];
        for (level, &i) in idx[..depth].iter().enumerate() {
            if parent == 0 {
                return Ok(());
            }
            let child = ptr(self.indirect(parent)?, i);
            if level + 1 == depth && child != 0 {
                self.free_block(child)?;
                self.set_ptr(parent, i, 0)?;
                inode.blocks = inode.blocks.saturating_sub(1);
                return Ok(());
            }
            parent = child;
        }
        Ok(())
    }

    /// Frees every block of logical index >= `from`, and the indirect blocks
    /// left empty.
    pub(crate) fn bmap_truncate(&mut self, inode: &mut Inode, from: u64) -> Result<()> {
        for i in (from.min(N_DIRECT as u64) as usize)..N_DIRECT {
            if inode.map[i] != 0 {
                self.free_block(inode.map[i])?;
                inode.map[i] = 0;
                inode.blocks = inode.blocks.saturating_sub(1);
            }
        }
        for (slot, depth, base) in TREES {
            let root = inode.map[slot];
            if root == 0 || from >= base + P.pow(depth) {
                continue;
            }
            if from <= base {
                inode.blocks = inode.blocks.saturating_sub(self.free_subtree(root, depth)?);
                inode.map[slot] = 0;
            } else {
                let (freed, empty) = self.free_partial(root, depth, base, from)?;
                inode.blocks = inode.blocks.saturating_sub(freed);
                if empty {
                    self.free_block(root)?;
                    inode.blocks = inode.blocks.saturating_sub(1);
                    inode.map[slot] = 0;
                }
            }
        }
        Ok(())
    }

    /// Frees an indirect block of the given depth and everything below it;
    /// returns the number of blocks freed.
    fn free_subtree(&mut self, bid: Bid, depth: u32) -> Result<u64> {
        let mut freed = 0;
        for i in 0..P as usize {
            let child = ptr(self.indirect(bid)?, i);
            if child == 0 {
                continue;
            }
            if depth > 1 {
                freed += self.free_subtree(self.check_bid(child)?, depth - 1)?;
            } else {
                self.free_block(child)?;
                freed += 1;
            }
        }
        self.free_block(bid)?;
        Ok(freed + 1)
    }

    /// Frees the entries of `bid` (covering logical blocks from `base`) at or
    /// past `from`. Returns (blocks freed, whether `bid` is now empty).
    fn free_partial(&mut self, bid: Bid, depth: u32, base: u64, from: u64) -> Result<(u64, bool)> {
        let span = P.pow(depth - 1);
        let mut freed = 0;
        let mut empty = true;
        for i in 0..P as usize {
            let child = ptr(self.indirect(bid)?, i);
            if child == 0 {
                continue;
            }
            let child_base = base + i as u64 * span;
            let drop_child = if child_base >= from {
                freed += if depth > 1 {
                    self.free_subtree(self.check_bid(child)?, depth - 1)?
                } else {
                    self.free_block(child)?;
                    1
                };
                true
            } else if depth > 1 && child_base + span > from {
                let (f, child_empty) =
                    self.free_partial(self.check_bid(child)?, depth - 1, child_base, from)?;
                freed += f;
                if child_empty {
                    self.free_block(child)?;
                    freed += 1;
                }
                child_empty
            } else {
                false
            };
            if drop_child {
                self.set_ptr(bid, i, 0)?;
            } else {
                empty = false;
            }
        }
        Ok((freed, empty))
    }

    /// The first logical block >= `from` that is mapped (`data`) or a hole
    /// (`!data`), skipping whole null or full subtrees. `None` past the
    /// largest possible file.
    pub(crate) fn bmap_seek(&self, inode: &Inode, from: u64, data: bool) -> Result<Option<u64>> {
        for i in from..N_DIRECT as u64 {
            if (inode.map[i as usize] != 0) == data {
                return Ok(Some(i));
            }
        }
        for (slot, depth, base) in TREES {
            if from >= base + P.pow(depth) {
                continue;
            }
            let start = from.max(base);
            let root = inode.map[slot];
            if root == 0 {
                if data {
                    continue;
                }
                return Ok(Some(start));
            }
            if let Some(x) = self.seek_in(root, depth, base, start, data)? {
                return Ok(Some(x));
            }
        }
        Ok(None)
    }

    fn seek_in(
        &self,
        bid: Bid,
        depth: u32,
        base: u64,
        from: u64,
        data: bool,
    ) -> Result<Option<u64>> {
        let span = P.pow(depth - 1);
        let first = ((from - base) / span) as usize;
        for i in first..P as usize {
            let child_base = base + i as u64 * span;
            let start = from.max(child_base);
            let child = ptr(self.indirect(bid)?, i);
            if child == 0 {
                if !data {
                    return Ok(Some(start));
                }
                continue;
            }
            if depth == 1 {
                if data {
                    return Ok(Some(start));
                }
                continue;
            }
            if let Some(x) =
                self.seek_in(self.check_bid(child)?, depth - 1, child_base, start, data)?
            {
                return Ok(Some(x));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cover_each_tree() {
        assert_eq!(map_path(0).unwrap(), (0, 0, [0; 3]));
        assert_eq!(map_path(11).unwrap(), (11, 0, [0; 3]));
        assert_eq!(map_path(12).unwrap(), (12, 1, [0, 0, 0]));
        assert_eq!(map_path(12 + 1019).unwrap(), (12, 1, [1019, 0, 0]));
        assert_eq!(map_path(12 + 1020).unwrap(), (13, 2, [0, 0, 0]));
        assert_eq!(map_path(12 + 1020 + 1020 + 5).unwrap(), (13, 2, [1, 5, 0]));
        let t = 12 + P + P * P;
        assert_eq!(map_path(t).unwrap(), (14, 3, [0, 0, 0]));
        assert_eq!(map_path(t + P * P + 2 * P + 3).unwrap(), (14, 3, [1, 2, 3]));
        assert_eq!(map_path(MAX_FILE_BLOCKS), Err(Errno::EFBIG));
        assert!(map_path(MAX_FILE_BLOCKS - 1).is_ok());
    }
}

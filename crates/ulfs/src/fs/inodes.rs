//! The inode table: inodes live 15 to an inode block (slot 0 is the block's
//! header), and an inode number encodes (block, slot), so reading an inode
//! is O(1) with no table to scan. Inode blocks sit on two lists rooted in
//! the superblock: all of them (for fsck), and those with a free slot (for
//! allocation, which takes the head in O(1)).

use super::Volume;
use crate::errno::{Errno, Result};
use crate::format::inode::Inode;
use crate::format::*;
use crate::types::Ino;

/// How many full blocks allocation may pop off a stale free list (left by a
/// crash in mode `none`) before calling the list damaged.
const STALE_POPS_MAX: usize = 4096;

impl Volume {
    /// Locates a live inode: (block, byte offset of the slot).
    fn inode_slot(&self, ino: Ino) -> Result<(Bid, usize)> {
        let (bid, slot) = ino_split(ino).ok_or(Errno::EUCLEAN)?;
        self.check_bid(bid)?;
        let b = self.meta(bid)?;
        if magic(b) != MAGIC_INODES || get_u16(b, IBLK_USED) & (1 << slot) == 0 {
            return Err(Errno::EUCLEAN);
        }
        Ok((bid, slot * INODE_SIZE))
    }

    /// Reads inode `ino`, validated: it must be a live slot of an inode block
    /// and pass `Inode::validate`, the one check fsck applies too.
    /// An open inode's decoded copy is its current value
    /// (`open_inodes.rs`), newer than the slot when the fast path changed it.
    pub(crate) fn inode(&self, ino: Ino) -> Result<Inode> {
        if let Some(cached) = self.open.cached(ino) {
            return Ok(cached.clone());
        }
        let (bid, off) = self.inode_slot(ino)?;
        Inode::decode_valid(&self.meta(bid)?[off..off + INODE_SIZE]).map_err(|_| Errno::EUCLEAN)
    }

    /// Writes inode `ino` back (and the decoded copy of an open inode).
    pub(crate) fn put_inode(&mut self, ino: Ino, inode: &Inode) -> Result<()> {
        self.put_slot(ino, inode)?;
        let in_call = self.call.is_some();
        self.open.wrote_through(ino, inode, in_call);
        Ok(())
    }

    /// Encodes `inode` into the slot of `ino`, within the transaction.
    pub(super) fn put_slot(&mut self, ino: Ino, inode: &Inode) -> Result<()> {
        let (bid, off) = self.inode_slot(ino)?;
        let b = self.j.meta_mut_parts(bid, &[off / INODE_SIZE])?;
        inode.encode(&mut b[off..off + INODE_SIZE]);
        Ok(())
    }

    /// Allocates an inode slot and writes `inode` into it.
    pub(crate) fn alloc_inode(&mut self, inode: &mut Inode) -> Result<Ino> {
        self.writable()?;
        self.sb.next_generation = self.sb.next_generation.wrapping_add(1);
        inode.generation = self.sb.next_generation;
        let mut pops = 0;
        let bid = loop {
            let head = self.sb.inode_free_head;
            if head == 0 {
                break self.new_inode_block()?;
            }
            self.check_bid(head)?;
            let b = self.meta(head)?;
            // Bit 0 marks the header slot taken; with it clear the lowest
            // free slot would be the header itself, and writing an inode
            // there would destroy the block's other 15.
            if magic(b) != MAGIC_INODES || get_u16(b, IBLK_USED) & 1 == 0 {
                return Err(Errno::EUCLEAN);
            }
            if get_u16(b, IBLK_USED) != IBLK_FULL {
                break head;
            }
            pops += 1;
            if pops > STALE_POPS_MAX {
                return Err(Errno::EUCLEAN);
            }
            self.sb.inode_free_head = get_u32(b, IBLK_NEXT_FREE);
            self.sb_dirty = true;
        };
        let b = self.meta_mut(bid)?;
        let used = get_u16(b, IBLK_USED);
        let slot = (!used).trailing_zeros() as usize;
        let used = used | (1 << slot);
        put_u16(b, IBLK_USED, used);
        inode.encode(&mut b[slot * INODE_SIZE..(slot + 1) * INODE_SIZE]);
        if used == IBLK_FULL {
            let next = get_u32(b, IBLK_NEXT_FREE);
            put_u32(b, IBLK_NEXT_FREE, 0);
            self.sb.inode_free_head = next;
            self.sb_dirty = true;
        }
        self.sb.free_inodes = self.sb.free_inodes.saturating_sub(1);
        self.sb.used_inodes += 1;
        Ok(ino_of(bid, slot as u64))
    }

    fn new_inode_block(&mut self) -> Result<Bid> {
        let bid = self.alloc_meta(0, MAGIC_INODES)?;
        let all = self.sb.inode_all_head;
        let b = self.meta_mut(bid)?;
        put_u32(b, IBLK_NEXT_ALL, all);
        put_u32(b, IBLK_NEXT_FREE, 0);
        put_u16(b, IBLK_USED, 1);
        self.sb.inode_all_head = bid;
        self.sb.inode_free_head = bid;
        self.sb.free_inodes += INODES_PER_BLOCK - 1;
        self.sb_dirty = true;
        Ok(bid)
    }

    /// Releases the slot of `ino` (its blocks must already be freed).
    pub(crate) fn free_inode(&mut self, ino: Ino) -> Result<()> {
        let (bid, off) = self.inode_slot(ino)?;
        let free_head = self.sb.inode_free_head;
        let b = self.meta_mut(bid)?;
        b[off..off + INODE_SIZE].fill(0);
        let used = get_u16(b, IBLK_USED);
        put_u16(b, IBLK_USED, used & !(1 << (off / INODE_SIZE)));
        if used == IBLK_FULL {
            put_u32(b, IBLK_NEXT_FREE, free_head);
            self.sb.inode_free_head = bid;
            self.sb_dirty = true;
        }
        self.sb.free_inodes += 1;
        self.sb.used_inodes = self.sb.used_inodes.saturating_sub(1);
        Ok(())
    }
}

//! The one walk of the list of all inode blocks, shared by fsck
//! (`fsck/check.rs`, which reports where it breaks and which inode blocks
//! it lost) and repair (`fs/repair.rs`, which relinks them), so the check
//! reports what the repair rebuilds. Reads find an inode from its number,
//! not through the list, so a list that lost blocks (broken, or cut short
//! by a damaged link) still reads: the blocks it lost are found again from
//! the directory entries that name their inodes (the header is enough
//! there) and, when the list is broken or holds a block failing its
//! checksum, by scanning the data area for inode blocks (header and
//! checksum, or slots that all validate), leaving out any block a live
//! inode references as data: a
//! block's kind is known from what points to it, so content alone never
//! overrides a reference.

use super::MAX_INDEX_DEPTH;
use crate::format::dirnode::*;
use crate::format::inode::{FLAG_INLINE, Inode};
use crate::format::*;
use crate::fs::Volume;
use std::collections::HashSet;

/// The header of an inode block: its magic, and bit 0 (the header slot) set.
fn has_inode_header(b: &Block) -> bool {
    magic(b) == MAGIC_INODES && get_u16(b, IBLK_USED) & 1 != 0
}

/// What the walk of the list found.
#[derive(Default)]
pub(crate) struct InodeList {
    /// The inode blocks on the list, in list order, up to where it breaks.
    pub blocks: Vec<Bid>,
    /// The block where it broke, when the list named it from a trusted
    /// place (the superblock, or a block whose checksum holds) but it is
    /// not an inode block: it was one, and lost its header.
    pub headless: Option<Bid>,
    /// Why the list stops before its end, if it does.
    pub broken: Option<String>,
    /// A block on it fails its checksum, so the link it holds to the next
    /// is not to be trusted either (it may end the list early, or skip).
    pub suspect: bool,
}

impl Volume {
    /// Follows the list of all inode blocks while it is sound. `taken`
    /// says a block has another use (the superblock and journal region,
    /// map blocks), which the list must not name.
    pub(crate) fn inode_list(&self, taken: &dyn Fn(Bid) -> bool) -> InodeList {
        let mut out = InodeList::default();
        let mut seen = HashSet::new();
        let mut bid = self.sb.inode_all_head;
        // The superblock's checksum was verified at mount.
        let mut trusted = true;
        while bid != 0 {
            let why = if let Some(why) = self.bid_fault(bid) {
                Some(format!("the inode block list points {why} ({bid})"))
            } else if taken(bid) {
                Some(format!(
                    "the inode block list names block {bid}, which has another use"
                ))
            } else if !seen.insert(bid) {
                Some(format!("the inode block list loops at block {bid}"))
            } else {
                None
            };
            if why.is_some() {
                out.broken = why;
                return out;
            }
            let b = match self.meta(bid) {
                Ok(b) if magic(b) == MAGIC_INODES => b,
                _ => {
                    out.broken = Some(format!(
                        "block {bid} on the inode list is not an inode block"
                    ));
                    out.headless = trusted.then_some(bid);
                    return out;
                }
            };
            trusted = block_crc_ok(b);
            out.suspect |= !trusted;
            out.blocks.push(bid);
            bid = get_u32(b, IBLK_NEXT_ALL);
        }
        out
    }

    /// The inode blocks the list lost, which the repair relinks: blocks
    /// holding inodes that directory entries name (reads find an inode
    /// from its number, not through the list, so such an inode reads fine
    /// while the list misses it); and, when the list is broken or a block
    /// on it fails its checksum, the block the list trusted that lost its
    /// header and every block of the data area that is an inode block by
    /// its own content. Blocks a live inode references as data are left
    /// out.
    pub(crate) fn inode_blocks_off_list(
        &self,
        list: &InodeList,
        taken: &dyn Fn(Bid) -> bool,
    ) -> Vec<Bid> {
        let mut known: HashSet<Bid> = list.blocks.iter().copied().collect();
        let mut extra: Vec<Bid> = list.headless.into_iter().collect();
        if list.broken.is_some() || list.suspect {
            extra.extend(self.scan_inode_blocks(taken, &known));
        }
        known.extend(extra.iter().copied());
        let named = self.named_inode_blocks(&mut known, &mut extra, taken);
        // Named by entries and sealed as an inode block: two witnesses,
        // which a pointer of some inode to it as data does not outweigh
        // (that inode may be the damaged one; the claims then cut it).
        let sure: HashSet<Bid> = extra
            .iter()
            .copied()
            .filter(|b| named.contains(b) && self.meta(*b).is_ok_and(block_crc_ok))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        self.drop_referenced(&list.blocks, &mut extra, &sure);
        extra
    }

    /// Adds to `extra` the inode blocks (by their header) holding inodes
    /// that entries of the directories in `known` blocks name, until no
    /// more are found. Returns every block an entry (or the superblock's
    /// root) names an inode in, known before or not.
    fn named_inode_blocks(
        &self,
        known: &mut HashSet<Bid>,
        extra: &mut Vec<Bid>,
        taken: &dyn Fn(Bid) -> bool,
    ) -> HashSet<Bid> {
        let mut named_blocks = HashSet::new();
        let mut todo: Vec<Bid> = known.iter().copied().collect();
        // The root is named by the superblock.
        let mut named = vec![self.sb.root_ino];
        loop {
            for ino in named.drain(..) {
                let Some((nb, _)) = ino_split(ino) else {
                    continue;
                };
                named_blocks.insert(nb);
                if known.contains(&nb) || taken(nb) || self.check_bid(nb).is_err() {
                    continue;
                }
                // Named by an entry: the magic is enough, as it is for
                // every read (`Volume::inode`; a block's kind is known from
                // what points to it), so a block whose checksum went stale
                // in a crash, or whose header lost bit 0, keeps the slots
                // that still read, although another part of it is damaged.
                if self.meta(nb).is_ok_and(|b| magic(b) == MAGIC_INODES) {
                    known.insert(nb);
                    extra.push(nb);
                    todo.push(nb);
                }
            }
            let Some(bid) = todo.pop() else { break };
            let Ok(b) = self.meta(bid) else { continue };
            if magic(b) != MAGIC_INODES {
                continue;
            }
            let used = get_u16(b, IBLK_USED);
            for s in 1..INODES_PER_BLOCK as usize {
                if used & (1 << s) == 0 {
                    continue;
                }
                let Ok(d) = Inode::decode_valid(&b[s * INODE_SIZE..(s + 1) * INODE_SIZE]) else {
                    continue;
                };
                if d.is_dir() {
                    let _ = self.dir_read(&d, 0, |it| {
                        named.push(it.ino);
                        true
                    });
                }
            }
        }
        named_blocks
    }

    /// An inode block by its own content: magic, header bit 0, and a valid
    /// checksum or used slots that all validate.
    fn looks_like_inode_block(&self, b: &Block) -> bool {
        if !has_inode_header(b) {
            return false;
        }
        let used = get_u16(b, IBLK_USED);
        let slots_ok = (1..INODES_PER_BLOCK as usize)
            .filter(|s| used & (1 << s) != 0)
            .all(|s| Inode::decode_valid(&b[s * INODE_SIZE..(s + 1) * INODE_SIZE]).is_ok());
        block_crc_ok(b) || slots_ok
    }

    /// Every block of the data area that is an inode block by its own
    /// content: magic, header bit 0, and a valid checksum or used slots
    /// that all validate. Map blocks and `known` blocks are skipped.
    fn scan_inode_blocks(&self, taken: &dyn Fn(Bid) -> bool, known: &HashSet<Bid>) -> Vec<Bid> {
        let mut out = Vec::new();
        for bid in self.sb.first_group as u64..self.sb.total_blocks {
            let bid = bid as Bid;
            if taken(bid) || known.contains(&bid) {
                continue;
            }
            if self.meta(bid).is_ok_and(|b| self.looks_like_inode_block(b)) {
                out.push(bid);
            }
        }
        out
    }

    /// Drops from `extra` the blocks that a live inode (of `list` or of
    /// `extra` itself) references as data, an indirect block or an index
    /// node: such a block is file content that looks like an inode block.
    /// Blocks in `sure` stay.
    fn drop_referenced(&self, list: &[Bid], extra: &mut Vec<Bid>, sure: &HashSet<Bid>) {
        loop {
            let mut refs = HashSet::new();
            for &bid in list.iter().chain(extra.iter()) {
                let Ok(b) = self.meta(bid) else { continue };
                let used = if magic(b) == MAGIC_INODES {
                    get_u16(b, IBLK_USED)
                } else {
                    0xFFFE
                };
                for s in 1..INODES_PER_BLOCK as usize {
                    if used & (1 << s) == 0 {
                        continue;
                    }
                    if let Ok(i) = Inode::decode_valid(&b[s * INODE_SIZE..(s + 1) * INODE_SIZE]) {
                        self.loose_refs(&i, &mut refs);
                    }
                }
            }
            let n = extra.len();
            extra.retain(|b| sure.contains(b) || !refs.contains(b));
            if extra.len() == n {
                return;
            }
        }
    }

    /// The blocks an inode's map or index points at, following only
    /// blocks of the right kind, bounded; damage is skipped, not reported.
    fn loose_refs(&self, i: &Inode, out: &mut HashSet<Bid>) {
        if i.is_symlink() && i.flags & FLAG_INLINE != 0 {
            return;
        }
        let mut stack: Vec<(Bid, u32)> = Vec::new();
        if i.is_dir() {
            stack.push((i.map[0], MAX_INDEX_DEPTH));
        } else {
            for (n, &p) in i.map.iter().enumerate() {
                stack.push((p, n.saturating_sub(N_DIRECT - 1) as u32));
            }
        }
        while let Some((bid, depth)) = stack.pop() {
            if bid == 0 || self.check_bid(bid).is_err() || !out.insert(bid) {
                continue;
            }
            let Ok(b) = self.meta(bid) else { continue };
            let children = match magic(b) {
                MAGIC_INDIRECT if !i.is_dir() && depth > 0 => PTRS_PER_BLOCK as usize,
                MAGIC_DIR_INNER if i.is_dir() && depth > 0 => node_count(b).min(INNER_CAP),
                _ => 0,
            };
            for k in 0..children {
                let c = if i.is_dir() {
                    inner_entry(b, k).1
                } else {
                    get_u32(b, IND_PTRS + 4 * k)
                };
                stack.push((c, depth - 1));
            }
        }
    }
}

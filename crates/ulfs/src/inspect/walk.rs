//! The walks the reports share: a file's block map, a directory's index
//! tree, and the list of inode blocks. Each applies the rules reads apply
//! (FORMAT.md 2, 6, 8, 9: pointers inside the data area and never at a map
//! block, the magic a pointer's slot calls for, tree levels strictly
//! decreasing) and hands every step to a callback, damage included, so a
//! report can show what is wrong where it is. They are bounded whatever
//! the image holds: each indirect block and index node is followed once
//! (a visited set), the block map is at most 3 levels deep and the index
//! at most 8, and list walks stop at a block seen before.
//!
//! Why not fsck's walks (`fs/repair/`): those record which blocks are
//! claimed and what is wrong, not logical block numbers, tree levels or
//! the node each entry sits in, and they need a mounted volume, which a
//! damaged image may not give.

use super::Inspector;
use super::text::magic_text;
use crate::format::dirnode::*;
use crate::format::inode::{FLAG_INLINE, Inode};
use crate::format::*;
use std::collections::HashSet;
use std::fmt;

const P: u64 = PTRS_PER_BLOCK;

/// Deepest directory index ulfs builds and reads.
pub(super) const MAX_INDEX_DEPTH: u32 = 8;

/// Where a block pointer is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Holder {
    /// `map[i]` of the inode.
    Inode(usize),
    /// Entry `i` of indirect block `bid`.
    Indirect(Bid, usize),
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Inode(i) => write!(f, "map[{i}] of the inode"),
            Holder::Indirect(b, i) => write!(f, "ptr[{i}] of indirect block {b}"),
        }
    }
}

/// One step of a block-map walk, in logical order.
pub(super) enum MapStep<'a> {
    /// Logical block `lblk` is physical block `bid`.
    Data { lblk: u64, bid: Bid, at: Holder },
    /// An indirect block `level` levels above the data (1: its pointers
    /// name data blocks), covering logical blocks `first .. first + span`.
    Indirect {
        bid: Bid,
        level: u32,
        first: u64,
        span: u64,
        at: Holder,
        block: &'a Block,
    },
    /// A pointer that reads refuse: logical blocks `first .. first + span`
    /// cannot be reached through it.
    Bad {
        first: u64,
        span: u64,
        ptr: Bid,
        at: Holder,
        why: String,
    },
}

/// One step of an index walk, in key order (depth first).
pub(super) enum DirStep<'a> {
    /// A block with a directory node's magic, `depth` below the root.
    Node {
        bid: Bid,
        depth: u32,
        parent: Option<Bid>,
        block: &'a Block,
    },
    /// A pointer the walk does not follow, and why.
    Bad {
        bid: Bid,
        depth: u32,
        parent: Option<Bid>,
        why: String,
    },
}

/// The inode blocks found.
pub(super) struct InodeBlocks {
    /// On the list of all inode blocks, in list order, up to where it
    /// breaks.
    pub list: Vec<Bid>,
    /// Why the list stops early.
    pub broken: Option<String>,
    /// When it breaks: blocks of the data area that carry the inode-block
    /// header but are not on the list (found by a scan, as the repair
    /// finds them).
    pub scanned: Vec<Bid>,
}

impl Inspector {
    /// Walks the block map of a file or long symlink (an inline symlink
    /// has none), in logical order.
    pub(super) fn walk_map<'s>(&'s self, inode: &Inode, f: &mut dyn FnMut(MapStep<'s>)) {
        if inode.is_symlink() && inode.flags & FLAG_INLINE != 0 {
            return;
        }
        for (i, &p) in inode.map.iter().enumerate().take(N_DIRECT) {
            if p != 0 {
                self.map_data(i as u64, p, Holder::Inode(i), f);
            }
        }
        let mut seen = HashSet::new();
        let mut first = N_DIRECT as u64;
        for (slot, level) in [(N_DIRECT, 1), (N_DIRECT + 1, 2), (N_DIRECT + 2, 3)] {
            let p = inode.map[slot];
            if p != 0 {
                self.map_indirect(p, level, first, Holder::Inode(slot), &mut seen, f);
            }
            first += P.pow(level);
        }
    }

    fn map_data<'s>(&'s self, lblk: u64, bid: Bid, at: Holder, f: &mut dyn FnMut(MapStep<'s>)) {
        match self.bid_fault(bid) {
            Some(why) => f(MapStep::Bad {
                first: lblk,
                span: 1,
                ptr: bid,
                at,
                why: format!("points {why}"),
            }),
            None => f(MapStep::Data { lblk, bid, at }),
        }
    }

    fn map_indirect<'s>(
        &'s self,
        bid: Bid,
        level: u32,
        first: u64,
        at: Holder,
        seen: &mut HashSet<Bid>,
        f: &mut dyn FnMut(MapStep<'s>),
    ) {
        let span = P.pow(level);
        let bad = |why: String| MapStep::Bad {
            first,
            span,
            ptr: bid,
            at,
            why,
        };
        if let Some(why) = self.bid_fault(bid) {
            return f(bad(format!("points {why}")));
        }
        if !seen.insert(bid) {
            return f(bad(
                "names an indirect block already named (not followed)".into()
            ));
        }
        let b = match self.read(bid) {
            Ok(b) if magic(b) == MAGIC_INDIRECT => b,
            Ok(b) => {
                return f(bad(format!(
                    "names a block that is not an indirect block (magic {})",
                    magic_text(magic(b))
                )));
            }
            Err(e) => return f(bad(format!("names an unreadable block ({e})"))),
        };
        f(MapStep::Indirect {
            bid,
            level,
            first,
            span,
            at,
            block: b,
        });
        let child_span = P.pow(level - 1);
        for i in 0..P as usize {
            let c = get_u32(b, IND_PTRS + 4 * i);
            if c == 0 {
                continue;
            }
            let child_first = first + i as u64 * child_span;
            let at = Holder::Indirect(bid, i);
            if level > 1 {
                self.map_indirect(c, level - 1, child_first, at, seen, f);
            } else {
                self.map_data(child_first, c, at, f);
            }
        }
    }

    /// Walks a directory index from its root node, depth first in key
    /// order.
    pub(super) fn walk_dir<'s>(&'s self, root: Bid, f: &mut dyn FnMut(DirStep<'s>)) {
        let mut seen = HashSet::new();
        self.dir_node(root, 0, None, &mut seen, f);
    }

    fn dir_node<'s>(
        &'s self,
        bid: Bid,
        depth: u32,
        parent: Option<(Bid, u16)>,
        seen: &mut HashSet<Bid>,
        f: &mut dyn FnMut(DirStep<'s>),
    ) {
        let pbid = parent.map(|p| p.0);
        let bad = |why: String| DirStep::Bad {
            bid,
            depth,
            parent: pbid,
            why,
        };
        if depth >= MAX_INDEX_DEPTH {
            return f(bad(format!("deeper than {MAX_INDEX_DEPTH} levels")));
        }
        if let Some(why) = self.bid_fault(bid) {
            return f(bad(format!("the pointer to it points {why}")));
        }
        if !seen.insert(bid) {
            return f(bad("named twice in the index (not followed again)".into()));
        }
        let b = match self.read(bid) {
            Ok(b) => b,
            Err(e) => return f(bad(format!("unreadable ({e})"))),
        };
        match magic(b) {
            MAGIC_DIR_LEAF => {
                f(DirStep::Node {
                    bid,
                    depth,
                    parent: pbid,
                    block: b,
                });
            }
            MAGIC_DIR_INNER => {
                let level = inner_level(b);
                if let Some((_, above)) = parent
                    && level >= above
                {
                    return f(bad(format!(
                        "an inner node of level {level} below one of level {above}: \
                         levels must decrease (not followed)"
                    )));
                }
                f(DirStep::Node {
                    bid,
                    depth,
                    parent: pbid,
                    block: b,
                });
                if inner_check(b).is_err() {
                    return;
                }
                for i in 0..node_count(b) {
                    let child = inner_entry(b, i).1;
                    self.dir_node(child, depth + 1, Some((bid, level)), seen, f);
                }
            }
            m => f(bad(format!(
                "not a directory node (magic {})",
                magic_text(m)
            ))),
        }
    }

    /// The inode blocks: the list of all of them, and when it breaks, a
    /// scan of the data area for blocks with the inode-block header that
    /// it lost.
    pub(super) fn inode_blocks(&self) -> InodeBlocks {
        let mut out = InodeBlocks {
            list: Vec::new(),
            broken: None,
            scanned: Vec::new(),
        };
        let Some(sb) = &self.sb else {
            out.broken = Some("no superblock".into());
            return out;
        };
        let mut seen = HashSet::new();
        let mut bid = sb.inode_all_head;
        while bid != 0 {
            let why = if let Some(why) = self.bid_fault(bid) {
                Some(format!("the inode block list points {why} ({bid})"))
            } else if !seen.insert(bid) {
                Some(format!("the inode block list loops at block {bid}"))
            } else {
                match self.read(bid) {
                    Ok(b) if magic(b) == MAGIC_INODES => {
                        out.list.push(bid);
                        bid = get_u32(b, IBLK_NEXT_ALL);
                        None
                    }
                    Ok(b) => Some(format!(
                        "block {bid} on the inode block list is not an inode block (magic {})",
                        magic_text(magic(b))
                    )),
                    Err(e) => Some(format!("block {bid} on the inode block list: {e}")),
                }
            };
            if why.is_some() {
                out.broken = why;
                break;
            }
        }
        if out.broken.is_some() {
            for bid in sb.first_group as u64..sb.total_blocks {
                let bid = bid as Bid;
                if seen.contains(&bid) || self.bid_fault(bid).is_some() {
                    continue;
                }
                if self
                    .read(bid)
                    .is_ok_and(|b| magic(b) == MAGIC_INODES && get_u16(b, IBLK_USED) & 1 != 0)
                {
                    out.scanned.push(bid);
                }
            }
        }
        out
    }
}

/// The used slots of inode block `b`: (slot, decoded inode, what
/// `Inode::validate` says).
pub(super) fn used_slots(b: &Block) -> Vec<(usize, Inode, Result<(), &'static str>)> {
    let used = get_u16(b, IBLK_USED);
    (1..INODES_PER_BLOCK as usize)
        .filter(|s| used & (1 << s) != 0)
        .map(|s| {
            let i = Inode::decode(&b[s * INODE_SIZE..(s + 1) * INODE_SIZE]);
            let v = i.validate();
            (s, i, v)
        })
        .collect()
}

//! The one walk of a file's (or long symlink's) block map, shared by fsck
//! (`fsck/check.rs`, which turns its findings into problem lines) and
//! repair (`fs/repair.rs`, which acts on them), so that what the check
//! accepts the repair leaves alone and what the repair cuts, copies or
//! fixes the check reports. It applies every rule of FORMAT.md section 8
//! that reads and writes rely on: each pointer inside the data area, each
//! pointer of an indirect slot (at the depth its slot gives) naming a block
//! with the indirect magic, an indirect block claimed once (one used twice
//! is cut, not followed), a data block claimed once (a second claim is kept
//! and given a copy by repair), and an indirect block's owner and checksum.
//! The walk never writes; its order (direct slots, then each indirect
//! subtree depth first, in slot order) decides which owner of a doubly
//! named block is the later one.

use crate::errno::Errno;
use crate::format::inode::{FLAG_INLINE, Inode};
use crate::format::*;
use crate::fs::Volume;
use crate::types::Ino;

/// Where a block pointer lives: a slot of the inode's map, or an entry of
/// an indirect block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PtrAt {
    Inode(usize),
    Indirect(Bid, usize),
}

impl PtrAt {
    /// What holds the pointer, as messages name it.
    pub(crate) fn holder(self) -> String {
        match self {
            PtrAt::Inode(_) => "its inode".into(),
            PtrAt::Indirect(b, _) => format!("indirect block {b}"),
        }
    }
}

/// Why a pointer cannot stand (repair cuts it: it becomes a hole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// Outside the data area (or the image), or at a map block.
    Outside(&'static str),
    /// In an indirect slot, naming a block without the indirect magic.
    NotIndirect,
    /// In an indirect slot, naming a block that cannot be read.
    Unreadable(Errno),
    /// Naming an indirect block that already has an owner.
    SharedIndirect,
}

/// One pointer that cannot stand.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BadPtr {
    pub at: PtrAt,
    pub bid: Bid,
    pub why: Bad,
}

impl BadPtr {
    /// The finding as fsck reports it, naming the block that holds the
    /// pointer.
    pub(crate) fn problem(&self, ino: Ino) -> String {
        let (holder, bid) = (self.at.holder(), self.bid);
        match self.why {
            Bad::Outside(why) => format!("inode {ino}: {holder} points {why} ({bid})"),
            Bad::NotIndirect => {
                format!("inode {ino}: block {bid}, named by {holder}, is not an indirect block")
            }
            Bad::Unreadable(e) => {
                format!("inode {ino}: indirect block {bid}, named by {holder}, is unreadable ({e})")
            }
            Bad::SharedIndirect => {
                format!("inode {ino} (named by {holder}): block {bid} is referenced twice")
            }
        }
    }

    /// The pointer names a block another pointer names too.
    pub(crate) fn is_shared(&self) -> bool {
        self.why == Bad::SharedIndirect
    }
}

/// What the walk of one block map found.
#[derive(Default)]
pub(crate) struct BmapWalk {
    /// Blocks the map names that stand and that this map claimed, data and
    /// indirect, each with where its pointer is, in walk order.
    pub blocks: Vec<(Bid, PtrAt)>,
    /// Indirect blocks among them.
    pub indirect: Vec<Bid>,
    /// Pointers that cannot stand.
    pub bad: Vec<BadPtr>,
    /// Data blocks (in the data area) that already had an owner when this
    /// map named them: they stay named and counted; repair gives this map a
    /// copy.
    pub shared: Vec<(PtrAt, Bid)>,
    /// Indirect blocks of this map whose owner field names another inode.
    pub wrong_owner: Vec<(Bid, Ino)>,
    /// Indirect blocks of this map whose checksum fails.
    pub stale: Vec<Bid>,
}

impl BmapWalk {
    /// The blocks the inode owns once the bad pointers are gone: what its
    /// `blocks` field must say.
    pub(crate) fn count(&self) -> u64 {
        (self.blocks.len() + self.shared.len()) as u64
    }
}

impl Volume {
    /// Walks the block map of file or long symlink `ino`. `take` claims a
    /// block for it and says false when the block had an owner already
    /// (repair's claims, fsck's owned set; `|_| true` only gathers). An
    /// inline symlink has no block map: the walk finds nothing.
    pub(crate) fn bmap_walk(
        &self,
        ino: Ino,
        inode: &Inode,
        take: &mut dyn FnMut(Bid) -> bool,
    ) -> BmapWalk {
        let mut w = BmapWalk::default();
        if inode.is_symlink() && inode.flags & FLAG_INLINE != 0 {
            return w;
        }
        for (i, &p) in inode.map.iter().enumerate().take(N_DIRECT) {
            if p != 0 {
                self.bmap_data(PtrAt::Inode(i), p, take, &mut w);
            }
        }
        for (slot, depth) in [(N_DIRECT, 1), (N_DIRECT + 1, 2), (N_DIRECT + 2, 3)] {
            let p = inode.map[slot];
            if p != 0 {
                self.bmap_indirect(ino, PtrAt::Inode(slot), p, depth, take, &mut w);
            }
        }
        w
    }

    /// A pointer to a data block.
    fn bmap_data(&self, at: PtrAt, bid: Bid, take: &mut dyn FnMut(Bid) -> bool, w: &mut BmapWalk) {
        if let Some(why) = self.bid_fault(bid) {
            w.bad.push(BadPtr {
                at,
                bid,
                why: Bad::Outside(why),
            });
        } else if take(bid) {
            w.blocks.push((bid, at));
        } else {
            w.shared.push((at, bid));
        }
    }

    /// A pointer to an indirect block `depth` levels above the data.
    fn bmap_indirect(
        &self,
        ino: Ino,
        at: PtrAt,
        bid: Bid,
        depth: u32,
        take: &mut dyn FnMut(Bid) -> bool,
        w: &mut BmapWalk,
    ) {
        let bad = |why| BadPtr { at, bid, why };
        if let Some(why) = self.bid_fault(bid) {
            w.bad.push(bad(Bad::Outside(why)));
            return;
        }
        let b = match self.meta(bid) {
            Ok(b) if magic(b) == MAGIC_INDIRECT => b,
            Ok(_) => return w.bad.push(bad(Bad::NotIndirect)),
            Err(e) => return w.bad.push(bad(Bad::Unreadable(e))),
        };
        if !take(bid) {
            w.bad.push(bad(Bad::SharedIndirect));
            return;
        }
        w.blocks.push((bid, at));
        w.indirect.push(bid);
        let owner = get_u64(b, IND_OWNER);
        if owner != ino {
            w.wrong_owner.push((bid, owner));
        }
        if !block_crc_ok(b) {
            w.stale.push(bid);
        }
        for i in 0..PTRS_PER_BLOCK as usize {
            let c = get_u32(b, IND_PTRS + 4 * i);
            if c == 0 {
                continue;
            }
            let at = PtrAt::Indirect(bid, i);
            if depth > 1 {
                self.bmap_indirect(ino, at, c, depth - 1, take, w);
            } else {
                self.bmap_data(at, c, take, w);
            }
        }
    }
}

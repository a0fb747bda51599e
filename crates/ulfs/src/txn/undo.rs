//! The undo record of the call in progress: what each metadata block held
//! before the call first changed it, and which blocks the call added to or
//! took from the journal's block sets. `Journal` fills it (`meta_mut`,
//! `meta_mut_parts`, `forget`, `note_alloc`) and plays it back in reverse
//! when a call fails (txn/mod.rs, "Every call is atomic").
//!
//! It lives apart from the journal because its cost is on the data path:
//! every write updates an inode, and most allocate, so recording must be
//! cheap. A small change (an inode, a bitmap word and count, one block
//! pointer) records only the 256-byte parts of the block it changes, not
//! the whole block, and the set of blocks already recorded is a short list
//! (a call touches a handful of blocks) that becomes a hash map only for
//! calls that touch many.

use super::{BidMap, BidSet};
use crate::format::{BLOCK_SIZE, Bid, Block};
use crate::types::Timespec;

/// Bytes in one part of a block (an inode slot is one part).
pub(super) const PART: usize = 256;
const PARTS: usize = BLOCK_SIZE / PART;

/// What a block held before the call changed it.
// The part is kept inline, so recording a small change allocates nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Before {
    /// Journal mode, no shadow yet: the home is still what it held.
    Home,
    /// The whole block (a shadow, or the home in place).
    Whole(Box<Block>),
    /// One 256-byte part of it.
    Part { part: u8, bytes: [u8; PART] },
}

/// Bit of a block's "recorded" mask meaning the whole block (bits below it
/// are its parts).
const WHOLE: u32 = 1 << PARTS;
/// Blocks tracked in the short list before moving to the map.
const SHORT: usize = 16;

/// Which blocks (or parts of them) the record already holds.
#[derive(Default)]
struct Recorded {
    short: Vec<(Bid, u32)>,
    many: BidMap<u32>,
}

impl Recorded {
    /// Marks `bits` of `bid` recorded; returns the bits it had before.
    fn mark(&mut self, bid: Bid, bits: u32) -> u32 {
        if self.many.is_empty() {
            if let Some(e) = self.short.iter_mut().find(|e| e.0 == bid) {
                let had = e.1;
                e.1 |= bits;
                return had;
            }
            if self.short.len() < SHORT {
                self.short.push((bid, bits));
                return 0;
            }
            self.many.extend(self.short.drain(..));
        }
        let e = self.many.entry(bid).or_insert(0);
        let had = *e;
        *e |= bits;
        had
    }

    fn clear(&mut self) {
        self.short.clear();
        if self.many.capacity() > 4096 {
            self.many = BidMap::default();
        } else {
            self.many.clear();
        }
    }
}

/// The record of one call (see the module comment).
#[derive(Default)]
pub(super) struct CallUndo {
    /// A call is in progress.
    pub open: bool,
    /// First changes, in order; played back in reverse.
    pub before: Vec<(Bid, Before)>,
    recorded: Recorded,
    /// The block the last `meta_mut` recorded whole (repeated writes of one
    /// block cost one comparison).
    last_whole: Option<Bid>,
    /// Length of the log order and the transaction's start when the call
    /// (or its last commit) began.
    pub order_len: usize,
    pub began: Option<Timespec>,
    pub freed_added: Vec<Bid>,
    pub fresh_added: Vec<Bid>,
    pub fresh_removed: Vec<Bid>,
    /// Blocks the call freed: not reused before it ends, since undoing the
    /// call gives them back to their owner.
    pub freed: BidSet,
    /// Buffers for whole-block copies, kept so calls do not allocate.
    spare: Vec<Box<Block>>,
}

impl CallUndo {
    /// Whether the whole of `bid` must be recorded now (and notes that it
    /// is).
    #[inline]
    pub fn needs_whole(&mut self, bid: Bid) -> bool {
        if self.last_whole == Some(bid) {
            return false;
        }
        self.last_whole = Some(bid);
        self.recorded.mark(bid, WHOLE) & WHOLE == 0
    }

    /// Whether part `part` of `bid` must be recorded now.
    #[inline]
    pub fn needs_part(&mut self, bid: Bid, part: usize) -> bool {
        if self.last_whole == Some(bid) {
            return false;
        }
        let had = self.recorded.mark(bid, 1 << part);
        had & (WHOLE | 1 << part) == 0
    }

    /// A copy of `b` in a reused buffer.
    pub fn copy(&mut self, b: &Block) -> Box<Block> {
        let mut c = self
            .spare
            .pop()
            .unwrap_or_else(|| Box::new([0; BLOCK_SIZE]));
        c.copy_from_slice(b);
        c
    }

    /// Gives a buffer back for reuse.
    pub fn recycle(&mut self, b: Box<Block>) {
        self.spare.push(b);
    }

    /// Forgets everything recorded: the call's changes so far stay.
    /// `order_len` and `began` describe the transaction as of now.
    pub fn rebase(&mut self, order_len: usize, began: Option<Timespec>) {
        self.order_len = order_len;
        self.began = began;
        self.last_whole = None;
        let nothing = self.before.is_empty()
            && self.recorded.short.is_empty()
            && self.recorded.many.is_empty()
            && self.freed.is_empty()
            && self.freed_added.is_empty()
            && self.fresh_added.is_empty()
            && self.fresh_removed.is_empty();
        if nothing {
            return;
        }
        let spare = &mut self.spare;
        for (_, before) in self.before.drain(..) {
            if let Before::Whole(b) = before {
                spare.push(b);
            }
        }
        self.recorded.clear();
        self.freed_added.clear();
        self.fresh_added.clear();
        self.fresh_removed.clear();
        self.freed.clear();
    }
}

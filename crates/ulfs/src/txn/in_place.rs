//! Mode `none` (in place, as published ULFS): a metadata write lands in the
//! mapping at once, and its block's CRC32C is sealed at the next checkpoint
//! (`sync`, unmount) rather than at every write. This module remembers the
//! blocks written since the last checkpoint: they are the ones to seal, and
//! the ones whose checksums are known to be stale until then, so a read
//! must not check them.

use super::BidSet;
use crate::format::{Bid, seal_block};
use crate::store::BlockStore;

#[derive(Default)]
pub(super) struct InPlace {
    unsealed: BidSet,
    /// The block written last (already in `unsealed`): a run of writes to
    /// one block costs one comparison.
    last: Option<Bid>,
}

impl InPlace {
    /// `bid` was written in place.
    #[inline]
    pub fn wrote(&mut self, bid: Bid) {
        if self.last != Some(bid) {
            self.unsealed.insert(bid);
            self.last = Some(bid);
        }
    }

    /// `bid` was freed: it may hold file data next, which sealing must not
    /// touch.
    pub fn forget(&mut self, bid: Bid) {
        self.unsealed.remove(&bid);
        if self.last == Some(bid) {
            self.last = None;
        }
    }

    /// Whether `bid` was written since the last checkpoint (its checksum is
    /// stale until then).
    pub fn is_unsealed(&self, bid: Bid) -> bool {
        self.unsealed.contains(&bid)
    }

    /// Seals the checksum of every block written since the last call.
    pub fn seal(&mut self, store: &mut dyn BlockStore) {
        for bid in self.unsealed.drain() {
            if let Ok(b) = store.block_mut(bid) {
                seal_block(b);
            }
        }
        self.last = None;
    }
}

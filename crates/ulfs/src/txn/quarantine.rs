//! Blocks freed and not yet reusable (mode `journal`).
//!
//! A block freed by a transaction stays out of reach until that transaction
//! commits: reusing it earlier could put file data where the durable state
//! still expects the old contents. A freed block with a copy in the log (it
//! was metadata) waits further, for the checkpoint that empties the log,
//! since a replay would write that copy over whatever the block holds by
//! then. A block allocated and freed within one transaction was never seen
//! allocated by any durable state or log record, and is reusable at once.
//! Each release reports the lowest block it made reusable, whose page is
//! likely still in memory, so allocation can prefer it (`Journal::
//! take_reuse_hint`).

use super::BidSet;
use crate::format::Bid;

#[derive(Default)]
pub(super) struct Quarantine {
    /// Freed by the running transaction.
    pub running: BidSet,
    /// Freed by committed transactions while a copy of them is in the log:
    /// reusable after the next checkpoint.
    pub committed: BidSet,
    /// Blocks with a copy in the log since the last checkpoint.
    pub in_log: BidSet,
    /// Blocks allocated by the running transaction.
    pub fresh: BidSet,
}

impl Quarantine {
    #[inline]
    pub fn contains(&self, bid: Bid) -> bool {
        self.running.contains(&bid) || self.committed.contains(&bid)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.committed.is_empty()
    }

    pub fn len(&self) -> usize {
        self.running.len() + self.committed.len()
    }

    /// The running transaction committed: what it freed without a copy in
    /// the log is reusable now, the rest waits for the checkpoint. Returns
    /// the lowest block released.
    pub fn release_committed(&mut self) -> Option<Bid> {
        self.fresh.clear();
        let mut lowest = None;
        for bid in self.running.drain() {
            if self.in_log.contains(&bid) {
                self.committed.insert(bid);
            } else if lowest.is_none_or(|l| bid < l) {
                lowest = Some(bid);
            }
        }
        lowest
    }

    /// The log is empty: every block freed by a committed transaction is
    /// reusable. Returns the lowest.
    pub fn release_checkpointed(&mut self) -> Option<Bid> {
        self.in_log.clear();
        self.committed.drain().min()
    }
}

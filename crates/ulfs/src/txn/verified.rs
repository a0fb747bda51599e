//! The checksum cache: which metadata blocks this mount has already
//! checked (or written), so that a block's CRC32C is computed at its first
//! read, not at every read.
//!
//! It is a fixed table of block ids, direct-mapped (a block's slot is its
//! id modulo the table size), not a bit per block: its size does not grow
//! with the image (a bit per block was 32 MiB for a 1 TiB image, allocated
//! and zeroed at every mount), so mounting costs the same for any image.
//! Two blocks that share a slot evict each other, and forgetting is always
//! safe: a block no longer in the table is checked again at its next read,
//! one CRC of 4 KiB. Consecutive blocks take consecutive slots, so a
//! working set of metadata smaller than the table (8,192 blocks, 32 MiB of
//! metadata) rarely collides.
//!
//! What must never be forgotten, blocks written in place whose checksums
//! are sealed only at the next checkpoint, mode `none` keeps in its own
//! dirty set (in_place.rs), which `Journal::meta` asks before checking.

use crate::format::Bid;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Slots in the table (a power of two): 64 KiB.
const SLOTS: usize = 1 << 13;

pub(super) struct Verified {
    /// `bid + 1` of the block checked in each slot; 0 for none. Empty when
    /// checksums are not verified at all. Atomic so that reads under a
    /// shared lock (`ulfs mount`'s request loops) may check and remember
    /// blocks side by side; relaxed, since a slot only ever holds an id
    /// that was checked, and a lost update only means one more check
    /// (plain loads and stores on x86).
    slots: Box<[AtomicU64]>,
}

impl Verified {
    /// A table that remembers nothing yet; `enabled: false` makes one that
    /// is never asked (checksums not verified).
    pub fn new(enabled: bool) -> Verified {
        let slots = if enabled { SLOTS } else { 0 };
        Verified {
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Whether checksums are verified at all.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        !self.slots.is_empty()
    }

    #[inline]
    fn slot(&self, bid: Bid) -> Option<&AtomicU64> {
        self.slots.get(bid as usize & (SLOTS - 1))
    }

    /// Whether `bid` was checked (or written) and not evicted since.
    #[inline]
    pub fn contains(&self, bid: Bid) -> bool {
        self.slot(bid)
            .is_some_and(|s| s.load(Relaxed) == bid as u64 + 1)
    }

    /// `bid` holds a valid checksum (checked, or written by us).
    #[inline]
    pub fn insert(&self, bid: Bid) {
        if let Some(s) = self.slot(bid) {
            s.store(bid as u64 + 1, Relaxed);
        }
    }

    /// `bid` must be checked again at its next read.
    #[inline]
    pub fn remove(&self, bid: Bid) {
        if let Some(s) = self.slot(bid)
            && s.load(Relaxed) == bid as u64 + 1
        {
            s.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_evicted_or_removed() {
        let v = Verified::new(true);
        v.insert(7);
        assert!(v.contains(7));
        assert!(!v.contains(8));
        v.insert(7 + SLOTS as Bid);
        assert!(!v.contains(7), "evicted by a block that shares its slot");
        assert!(v.contains(7 + SLOTS as Bid));
        v.remove(7);
        assert!(
            v.contains(7 + SLOTS as Bid),
            "removing another id is a no-op"
        );
        v.remove(7 + SLOTS as Bid);
        assert!(!v.contains(7 + SLOTS as Bid));
        v.insert(Bid::MAX);
        assert!(v.contains(Bid::MAX) && !v.contains(Bid::MAX - 1));
    }

    #[test]
    fn disabled_remembers_nothing() {
        let v = Verified::new(false);
        assert!(!v.is_enabled());
        v.insert(3);
        assert!(!v.contains(3));
    }
}

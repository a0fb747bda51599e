//! Reporting a metadata block that fails its check on read: which block,
//! and whether it is damaged metadata or no metadata at all. Kept like
//! `errno`, per thread, so that an EUCLEAN coming up through any number of
//! layers can still name the block behind it (`ulfs` prints it, fsck
//! counts it).

use crate::format::Bid;
use std::cell::Cell;

/// A metadata block that failed its check on read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    pub block: Bid,
    /// The block does not even carry a metadata header: it was overwritten
    /// (zeroed, or file data), or the pointer that led to it is damaged.
    /// Otherwise it is metadata whose checksum does not match.
    pub not_metadata: bool,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.block;
        if self.not_metadata {
            write!(
                f,
                "block {b} holds no metadata: it was overwritten, or the pointer that leads to it is damaged"
            )
        } else {
            write!(f, "metadata block {b} fails its checksum")
        }
    }
}

thread_local! {
    /// The metadata block whose check failed most recently on this thread.
    static LAST_DAMAGE: Cell<Option<Damage>> = const { Cell::new(None) };
}

/// Records the damage behind the EUCLEAN about to be returned.
pub(super) fn report(damage: Damage) {
    LAST_DAMAGE.with(|c| c.set(Some(damage)));
}

/// The metadata block whose checksum last failed on this thread.
pub fn last_damaged_block() -> Option<Bid> {
    LAST_DAMAGE.with(|c| c.get()).map(|d| d.block)
}

/// The damage behind the last EUCLEAN on this thread, if a block check
/// caused it; taking it clears it, so a later error cannot name a block
/// that an earlier one found.
pub fn take_damage() -> Option<Damage> {
    LAST_DAMAGE.with(|c| c.take())
}

/// Whether a block header's magic names a metadata block that `meta`
/// reads (superblock copies and journal records are read otherwise).
pub(super) fn is_metadata_magic(m: u32) -> bool {
    use crate::format::*;
    [
        MAGIC_MAP,
        MAGIC_INODES,
        MAGIC_INDIRECT,
        MAGIC_DIR_LEAF,
        MAGIC_DIR_INNER,
        MAGIC_SUPER,
    ]
    .contains(&m)
}

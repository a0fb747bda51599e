//! Replay at mount: re-applies every complete transaction in the log, in
//! order, and numbers the next one so that no record left in the region
//! can ever be taken for it. Reads only what it applies, plus one block.
//!
//! Replay walks from the first log block with the header's sequence
//! number `H`: a descriptor of the expected number, its copies, more
//! descriptors, then a commit record whose count and CRC32C match the
//! copies. The first block that does not fit ends it (a torn or stale
//! record, a damaged one, or the end of the region), at sequence `s`.
//! Replaying twice writes the same bytes twice, so a crash during replay
//! is harmless.
//!
//! Records numbered `s` or more may lie beyond the stop only if a commit
//! numbered `s` was written: transaction `s + 1` is written only once that
//! commit is durable, and transaction `s` starts where replay stopped (or
//! replay would have stopped inside it). So when the block where replay
//! stopped is zeros, or an intact record numbered below `s` (what a clean
//! unmount leaves: the first record of the previous round of the log),
//! nothing newer can follow and the next transaction is `s`. Otherwise
//! (a torn or damaged record, a commit that does not match) replay does not
//! look further, as it once did by reading the whole region: the next
//! transaction is numbered `H + blocks`, past any record the region can
//! hold, since the transactions written after a header take at least
//! three blocks each and every older record is numbered below `H`
//! (log.rs's invariant).

use super::Replayed;
use super::log::Log;
use super::verified::Verified;
use crate::errno::{Errno, Result};
use crate::format::journal::*;
use crate::format::{Bid, Block, block_crc_ok};
use crate::store::BlockStore;

/// What the log holds at one position.
enum Found {
    /// A complete transaction: (home, log position) of each copy, and the
    /// block after its commit record.
    Transaction(Vec<(Bid, Bid)>, Bid),
    /// No transaction `seq` begins and ends here: replay stops at this
    /// block.
    Stop(Bid),
}

impl Log {
    /// Replays the log into `store` (on a read-only store into the
    /// shadows, so the replayed state is what reads see) and sets the next
    /// sequence number. Returns what was replayed, and whether the header
    /// must be written before the next transaction (the next sequence
    /// number moved).
    pub(super) fn replay(
        &mut self,
        store: &mut dyn BlockStore,
        verified: &Verified,
    ) -> Result<(Replayed, bool)> {
        let first = self.next_seq;
        let mut seq = first;
        let mut at = self.start + 1;
        let mut done = Replayed::default();
        let stop = loop {
            let (copies, next) = match self.find(&*store, at, seq)? {
                Found::Transaction(copies, next) => (copies, next),
                Found::Stop(stop) => break stop,
            };
            for (home, pos) in copies {
                let copy = *store.block(pos)?;
                if store.is_read_only() {
                    self.shadows.insert(home, Box::new(copy));
                } else {
                    store.block_mut(home)?.copy_from_slice(&copy);
                }
                // A metadata copy is sealed; a file data copy (logged by
                // a commit for fsync) is not, and is not metadata.
                if block_crc_ok(&copy) {
                    verified.insert(home);
                }
                done.blocks += 1;
            }
            done.transactions += 1;
            seq += 1;
            at = next;
        };
        if !self.ends_cleanly(&*store, stop, seq)? {
            seq = seq.max(first + self.blocks as u64);
            if seq >= SEQ_LIMIT {
                return Err(Errno::EUCLEAN);
            }
        }
        let moved = seq != self.next_seq;
        self.next_seq = seq;
        if moved {
            self.installed = true;
            self.pos = at - (self.start + 1);
        }
        Ok((done, moved))
    }

    /// Reads transaction `seq` starting at log block `at`.
    fn find(&self, store: &dyn BlockStore, mut at: Bid, seq: u64) -> Result<Found> {
        let end = self.start + self.blocks;
        let total = store.blocks();
        let mut copies = Vec::new();
        let mut crc = 0u32;
        loop {
            if at >= end {
                return Ok(Found::Stop(at));
            }
            let b = store.block(at)?;
            if let Some((n, data_crc)) = commit_decode(b, seq) {
                if n as usize != copies.len() || data_crc != crc || copies.is_empty() {
                    return Ok(Found::Stop(at));
                }
                return Ok(Found::Transaction(copies, at + 1));
            }
            let Some(homes) = descriptor_decode(b, seq) else {
                return Ok(Found::Stop(at));
            };
            if at as u64 + 1 + homes.len() as u64 > end as u64 {
                return Ok(Found::Stop(at));
            }
            for (i, &home) in homes.iter().enumerate() {
                // Never replay over the log itself, or outside the image.
                if home as u64 >= total || (home >= self.start && home < end) || home == 1 {
                    return Ok(Found::Stop(at));
                }
                let pos = at + 1 + i as u32;
                crc = crc32c::crc32c_append(crc, &store.block(pos)?[..]);
                copies.push((home, pos));
            }
            at += 1 + homes.len() as u32;
        }
    }

    /// Whether replay, stopped at `stop` before transaction `seq`, stopped
    /// where nothing newer can follow (see the module comment).
    fn ends_cleanly(&self, store: &dyn BlockStore, stop: Bid, seq: u64) -> Result<bool> {
        if stop >= self.start + self.blocks {
            return Ok(true);
        }
        let b: &Block = store.block(stop)?;
        Ok(b.iter().all(|&x| x == 0) || (is_record(b) && record_seq(b) < seq))
    }
}

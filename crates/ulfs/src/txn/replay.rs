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
//! New transactions must never reuse the number of a record left in the
//! region: a stale descriptor or commit numbered like a new transaction
//! could be paired with it. The number is kept only in the one case where
//! nothing can be left: replay applied nothing, and stopped at the first
//! log block, which is zeros or an intact record older than `H` (what a
//! clean unmount leaves). There, no record numbered `H` or more exists:
//! transaction `H` is the first written after the header, at the first log
//! block, and is always committed with two flushes (`Journal::commit_with`),
//! so none of its records can be durable without its first descriptor,
//! which is not there; later transactions are written only once it is
//! committed. In every other case (something replayed, a torn or damaged
//! record, a transaction begun) the next transaction is numbered
//! `H + blocks`, past any record the region can hold (transactions written
//! after a header take at least three blocks each, and every older record
//! is numbered below `H`: log.rs's invariant), and the header says so
//! before anything new is written. Replay never reads the rest of the
//! region to find out.

use super::Replayed;
use super::log::Log;
use crate::errno::{Errno, Result};
use crate::format::journal::*;
use crate::format::{Bid, Block};
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
    pub(super) fn replay(&mut self, store: &mut dyn BlockStore) -> Result<(Replayed, bool)> {
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
                    // File data copies too (a commit for fsync logs them):
                    // `Journal::data` reads them from here.
                    self.shadows.insert(home, Box::new(copy));
                } else {
                    store.block_mut(home)?.copy_from_slice(&copy);
                }
                // Not marked verified: a copy may be file data, so each
                // home is checked at its first read as metadata.
                done.blocks += 1;
            }
            done.transactions += 1;
            seq += 1;
            at = next;
        };
        if seq != first || !self.ends_cleanly(&*store, stop, seq)? {
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

    /// Whether replay, having applied nothing, stopped where no record
    /// numbered `seq` or more can be (see the module comment): at the first
    /// log block, holding zeros or an older record.
    fn ends_cleanly(&self, store: &dyn BlockStore, stop: Bid, seq: u64) -> Result<bool> {
        if stop != self.start + 1 {
            return Ok(false);
        }
        let b: &Block = store.block(stop)?;
        Ok(b.iter().all(|&x| x == 0) || (is_record(b) && record_seq(b) < seq))
    }
}

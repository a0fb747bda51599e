//! Transactions over metadata blocks: the only door through which the file
//! system changes a metadata block ([`Journal::meta_mut`]).
//!
//! Two modes sit behind the same calls:
//!
//! - **In place** (mode `none`, as published ULFS; in_place.rs): a write
//!   lands in the mapping at once, its checksum sealed at the next
//!   checkpoint (`sync`, unmount). A crash can leave anything.
//! - **Journal** (mode `journal`; log.rs, replay.rs): writes go to private
//!   shadows; `commit_txn` writes them to the log, flushes (so file data
//!   written so far is durable before the commit record: ext4's
//!   `data=ordered`), writes the commit record, flushes, and only then
//!   installs them at home. A commit for fsync (`commit_for_sync`) logs
//!   the few file data blocks the transaction wrote with the metadata and
//!   flushes once, only its log records. `checkpoint` flushes the homes
//!   and empties the log. Replay at mount re-applies every complete
//!   transaction.
//!   Blocks freed wait in quarantine (quarantine.rs) until reusing them is
//!   safe.
//!
//! File data blocks bypass transactions (`data`, `data_mut`).
//!
//! **Every call is atomic.** A transaction spans many calls, so a call that
//! fails half-way must not leave its changes in it. Between `begin_call`
//! and `end_call` the journal keeps an undo record of the call (undo.rs):
//! the first time a metadata block is written in the call, what it held
//! before (in mode `journal` the previous shadow, or nothing when the home
//! is still current; in place a copy of the home), plus the blocks the call
//! added to or took from the freed and fresh sets. Freeing a block copies
//! nothing (freeing changes no byte, and a block freed by a call is not
//! allocated again before it ends): only a shadow the free drops, and in
//! place the mark that a block still needs sealing, are recorded. `undo_call` puts
//! all of it back, so a failed call leaves no trace in either mode. A
//! commit in the middle of a call (a huge write commits its finished part)
//! moves the undo point to that commit: what is committed is a consistent
//! state and stays. Blocks freed by a call are not reused by the same call,
//! because undoing the call gives them back to their owner. File data
//! written by the call into blocks it had allocated is dropped with the
//! allocation; overwritten bytes of existing data are not restored (as on
//! Linux, a write that fails part-way may have changed them).
//!
//! A metadata block read from the image has its CRC32C verified the first
//! time (EUCLEAN on a mismatch, the block remembered for the error report:
//! damage.rs; what was verified: verified.rs), unless the image was left by
//! a crash in mode `none`, whose checksums are known to be stale until
//! `fsck --repair`.

use crate::errno::{Errno, Result};
use crate::format::journal::*;
use crate::format::{Bid, Block, block_crc_ok};
use crate::store::BlockStore;
use crate::types::Timespec;
use in_place::InPlace;
use log::Log;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use undo::CallUndo;
use verified::Verified;

mod call;
mod damage;
mod in_place;
mod log;
mod quarantine;
mod replay;
mod undo;
mod verified;

pub use damage::{Damage, last_damaged_block, take_damage};

/// Whether a block header's magic is a journal record's (or header's).
fn is_journal_magic(m: u32) -> bool {
    matches!(m, MAGIC_DESCRIPTOR | MAGIC_COMMIT | MAGIC_JOURNAL_HEADER)
}

/// A hasher for block ids and inode numbers: they are already well spread
/// integers, and their look-ups sit on the data path (shadows here, open
/// inodes in `fs`), so a multiply is all it needs.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type BidMap<V> = HashMap<Bid, V, BuildHasherDefault<IdHasher>>;
type BidSet = HashSet<Bid, BuildHasherDefault<IdHasher>>;

pub struct Journal {
    store: Box<dyn BlockStore>,
    /// Mode `journal`: the log and the running transaction.
    log: Option<Log>,
    /// Mode `none`: blocks written since the last checkpoint.
    in_place: InPlace,
    verified: Verified,
    /// A flush failed: nothing more may be written.
    failed: bool,
    /// The undo record of the call in progress (undo.rs).
    call: CallUndo,
    /// A read-only mount replayed the log into the shadows, file data
    /// copies included, which `data` must then read.
    replayed_in_memory: bool,
    /// The lowest block that became reusable since allocation last asked:
    /// a block freed and already paged in, which allocation prefers to
    /// blocks of the image never touched.
    reuse_hint: Option<Bid>,
}

/// What replay found and applied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    pub transactions: u64,
    pub blocks: u64,
}

impl Journal {
    fn with_store(store: Box<dyn BlockStore>, verify: bool) -> Journal {
        Journal {
            store,
            log: None,
            in_place: InPlace::default(),
            verified: Verified::new(verify),
            failed: false,
            call: CallUndo::default(),
            replayed_in_memory: false,
            reuse_hint: None,
        }
    }

    /// Mode `none`: writes land in place.
    pub fn in_place(store: Box<dyn BlockStore>, verify: bool) -> Journal {
        Journal::with_store(store, verify)
    }

    /// Mode `journal` over the region `start .. start + blocks`: replays
    /// what the log holds (into the store, or, on a read-only store, into
    /// the shadows, so the replayed state is what reads see).
    pub fn journaled(
        store: Box<dyn BlockStore>,
        start: Bid,
        blocks: u32,
        verify: bool,
    ) -> Result<(Journal, Replayed)> {
        if blocks < 3 {
            return Err(Errno::EUCLEAN);
        }
        let mut j = Journal::with_store(store, verify);
        let next_seq = header_decode(j.store.block(start)?).ok_or(Errno::EUCLEAN)?;
        let mut log = Log::new(start, blocks, next_seq);
        let (replayed, moved) = log.replay(&mut *j.store)?;
        j.replayed_in_memory = j.store.is_read_only() && !log.shadows.is_empty();
        j.log = Some(log);
        // The header must say where the next transaction will be looked
        // for before one is written.
        if moved && !j.store.is_read_only() {
            j.checkpoint()?;
        }
        Ok((j, replayed))
    }

    /// Writes an empty journal region (mkfs). `zeroed`: the store is known
    /// to hold zeros there (a new sparse file), so only the header is
    /// written and the rest of the region stays a hole.
    pub fn format_region(
        store: &mut dyn BlockStore,
        start: Bid,
        blocks: u32,
        zeroed: bool,
    ) -> Result<()> {
        if !zeroed {
            for bid in start..start + blocks {
                store.block_mut(bid)?.fill(0);
            }
        }
        header_encode(store.block_mut(start)?, 1);
        Ok(())
    }

    /// A read-only store whose log was replayed into memory: some blocks'
    /// newest contents (file data included) are here, not in the store.
    pub(crate) fn replayed_in_memory(&self) -> bool {
        self.replayed_in_memory
    }

    pub fn store(&self) -> &dyn BlockStore {
        &*self.store
    }

    /// Gives the store back.
    pub fn into_store(self) -> Box<dyn BlockStore> {
        self.store
    }

    pub fn is_journaled(&self) -> bool {
        self.log.is_some()
    }

    /// A flush failed earlier, or an access to the store faulted (the host
    /// file truncated, an I/O error: store/fault.rs); the volume is
    /// read-only from then on.
    pub fn has_failed(&self) -> bool {
        self.failed || self.store.faulted()
    }

    /// Blocks the running transaction holds (0 in place).
    pub fn pending(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.shadows.len())
    }

    /// How long ago the running transaction made its first change.
    pub fn age(&self) -> Option<std::time::Duration> {
        self.log
            .as_ref()
            .and_then(|l| l.began)
            .map(|t| Timespec::monotonic().since(t))
    }

    /// Log blocks a transaction may hold in all.
    pub fn capacity(&self) -> usize {
        self.log.as_ref().map_or(usize::MAX, |l| {
            let cap = l.capacity() as usize;
            cap - cap.div_ceil(DESC_CAP) - 1
        })
    }

    /// Whether `bid` was freed by a transaction not yet checkpointed.
    #[inline]
    pub fn is_quarantined(&self, bid: Bid) -> bool {
        self.call.freed.contains(&bid)
            || self
                .log
                .as_ref()
                .is_some_and(|l| l.quarantine.contains(bid))
    }

    /// Whether anything is quarantined (so allocation must look).
    #[inline]
    pub fn has_quarantine(&self) -> bool {
        !self.call.freed.is_empty() || self.log.as_ref().is_some_and(|l| !l.quarantine.is_empty())
    }

    /// Blocks freed and not yet reusable.
    pub fn quarantined(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.quarantine.len())
    }

    /// Blocks freed by committed transactions, reusable after a checkpoint.
    pub fn quarantined_committed(&self) -> usize {
        self.log
            .as_ref()
            .map_or(0, |l| l.quarantine.committed.len())
    }

    /// A block as the running transaction sees it, unverified (superblock
    /// copies, which carry and check their own CRC).
    pub fn peek(&self, bid: Bid) -> Result<&Block> {
        if let Some(log) = &self.log
            && let Some(s) = log.shadows.get(&bid)
        {
            return Ok(s);
        }
        self.store.block(bid)
    }

    /// Reads a metadata block as the running transaction sees it.
    #[inline]
    pub fn meta(&self, bid: Bid) -> Result<&Block> {
        if let Some(log) = &self.log
            && !log.shadows.is_empty()
            && let Some(s) = log.shadows.get(&bid)
        {
            return Ok(s);
        }
        let b = self.store.block(bid)?;
        if self.verified.is_enabled() && !self.verified.contains(bid) {
            self.verify(bid, b)?;
        }
        Ok(b)
    }

    /// Checks the checksum of `b`, home of metadata block `bid`, at its
    /// first read (or its first since it left the checksum cache).
    #[inline(never)]
    fn verify(&self, bid: Bid, b: &Block) -> Result<()> {
        // Written in place since the last checkpoint: sealed only then.
        if self.log.is_none() && self.in_place.is_unsealed(bid) {
            return Ok(());
        }
        if !block_crc_ok(b) {
            // A page of the mapping was lost (store/fault.rs): zeros stand
            // in for it, and the medium, not the block, is at fault.
            if self.store.faulted() {
                return Err(Errno::EIO);
            }
            damage::report(Damage {
                block: bid,
                not_metadata: !damage::is_metadata_magic(crate::format::magic(b)),
            });
            return Err(Errno::EUCLEAN);
        }
        self.verified.insert(bid);
        Ok(())
    }

    /// Writes a metadata block within the running transaction.
    #[inline]
    pub fn meta_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        if self.call.open && self.call.needs_whole(bid) {
            self.remember_whole(bid)?;
        }
        self.write_block(bid)
    }

    /// `meta_mut` without the undo record (the caller recorded).
    #[inline]
    fn write_block(&mut self, bid: Bid) -> Result<&mut Block> {
        let Some(log) = &mut self.log else {
            let b = self.store.block_mut(bid)?;
            self.in_place.wrote(bid);
            self.verified.insert(bid);
            return Ok(b);
        };
        if self.store.is_read_only() {
            return Err(Errno::EROFS);
        }
        if !log.shadows.contains_key(&bid) {
            log.add_shadow(bid, self.store.block(bid)?);
        }
        self.verified.insert(bid);
        Ok(log.shadows.get_mut(&bid).expect("shadow made"))
    }

    /// A block written in place even in journal mode: only the secondary
    /// superblock, refreshed after a checkpoint.
    pub fn direct_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        self.store.block_mut(bid)
    }

    /// Reads a file data block.
    #[inline]
    pub fn data(&self, bid: Bid) -> Result<&Block> {
        if self.replayed_in_memory
            && let Some(log) = &self.log
            && let Some(copy) = log.shadows.get(&bid)
        {
            return Ok(copy);
        }
        self.store.data(bid)
    }

    /// Writes a file data block (not journaled: data=ordered semantics).
    #[inline]
    pub fn data_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        if let Some(log) = &mut self.log {
            log.note_data_write(bid);
        }
        self.store.data_mut(bid)
    }

    /// Keeps the file data mapped in within `budget`: store/residency.rs.
    pub fn set_memory_budget(&mut self, budget: crate::store::MemoryBudget) {
        self.store.set_memory_budget(budget);
    }

    /// A block was allocated by the running transaction.
    #[inline]
    pub fn note_alloc(&mut self, bid: Bid) {
        if let Some(log) = &mut self.log
            && log.quarantine.fresh.insert(bid)
            && self.call.open
        {
            self.call.fresh_added.push(bid);
        }
    }

    /// A block was freed: drop what the transaction held of it, and keep it
    /// from reuse until it is safe.
    pub fn forget(&mut self, bid: Bid) {
        if self.call.open {
            // Freeing changes nothing in the block, and a block freed by a
            // call is not allocated again before the call ends
            // (`is_quarantined`): its bytes need no copy in the undo record
            // (a whole freed file would be copied into memory), and a write
            // to it later in the call records its own before-image. Only a
            // shadow dropped here must be given back if the call is undone.
            let shadowed = self
                .log
                .as_ref()
                .is_some_and(|l| l.shadows.contains_key(&bid));
            if shadowed && self.call.needs_whole(bid) {
                let _ = self.remember_whole(bid);
            } else if self.log.is_none() && self.in_place.is_unsealed(bid) {
                // In place: undo marks it written again (to be sealed),
                // without a copy and without marking it recorded.
                self.call.before.push((bid, undo::Before::Home));
            }
            self.call.freed.insert(bid);
        }
        self.in_place.forget(bid);
        // It may hold file data next: read as metadata again, it is checked.
        self.verified.remove(bid);
        let Some(log) = &mut self.log else {
            self.hint_reuse(bid);
            return;
        };
        log.drop_shadow(bid);
        if log.quarantine.fresh.remove(&bid) {
            if self.call.open {
                self.call.fresh_removed.push(bid);
            }
            self.hint_reuse(bid);
        } else if log.quarantine.running.insert(bid) && self.call.open {
            self.call.freed_added.push(bid);
        }
    }

    /// `bid` can be allocated again (once the call that freed it is over).
    #[inline]
    fn hint_reuse(&mut self, bid: Bid) {
        if self.reuse_hint.is_none_or(|h| bid < h) {
            self.reuse_hint = Some(bid);
        }
    }

    /// Offers the lowest of blocks just released, if any.
    fn hint_released(&mut self, lowest: Option<Bid>) {
        if let Some(bid) = lowest {
            self.hint_reuse(bid);
        }
    }

    /// The lowest block that became reusable since the last time allocation
    /// asked, if any (see `reuse_hint`).
    #[inline]
    pub fn take_reuse_hint(&mut self) -> Option<Bid> {
        self.reuse_hint.take()
    }

    /// Stops all changes: nothing more is written, nothing more committed
    /// (after a panic in a call, whose state cannot be trusted).
    pub fn latch_read_only(&mut self) {
        self.failed = true;
    }

    /// EIO, latching the journal read-only, if an access to the store
    /// faulted: what the mapping holds can no longer be trusted to reach
    /// the image, so nothing more is committed.
    fn unless_faulted(&mut self) -> Result<()> {
        if self.store.faulted() {
            self.failed = true;
            return Err(Errno::EIO);
        }
        Ok(())
    }

    /// Flushes the store; a failure latches the journal read-only.
    fn flush(&mut self) -> Result<()> {
        self.flush_with(|store| store.flush())
    }

    /// `flush` of blocks `first .. first + count` only.
    fn flush_range(&mut self, first: Bid, count: u32) -> Result<()> {
        self.flush_with(|store| store.flush_range(first, count))
    }

    /// Runs one of the store's flushes; a failure latches the journal
    /// read-only and is EIO.
    fn flush_with(&mut self, flush: impl FnOnce(&mut dyn BlockStore) -> Result<()>) -> Result<()> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        flush(&mut *self.store).map_err(|e| {
            self.failed = true;
            if e == Errno::EIO { e } else { Errno::EIO }
        })
    }

    /// Makes file data written so far durable (fsync with nothing to commit).
    pub fn flush_data(&mut self) -> Result<()> {
        if self.log.as_ref().is_some_and(|l| !l.relog.is_empty()) {
            // File data with an older copy in the log was written: the log
            // is emptied before the new bytes are durable, or a replay
            // would put the old ones back.
            return self.checkpoint();
        }
        self.flush()
    }

    /// Commits the running transaction (journal mode; nothing to do in
    /// place): the copies are written to the log and flushed with the file
    /// data written so far, then the commit record is written and flushed.
    pub fn commit_txn(&mut self) -> Result<()> {
        self.commit_with(None).map(drop)
    }

    /// Commits the running transaction for fsync: with one flush, not two,
    /// when the file data blocks the transaction allocated (and logged
    /// data blocks written since) are few. They are logged with the
    /// metadata, so the commit record's CRC covers them and the record
    /// need not wait for them to be durable (docs/FORMAT.md 13.3).
    /// Returns whether it committed anything (then everything written so
    /// far that the fsync promises is durable).
    pub fn commit_for_sync(&mut self) -> Result<bool> {
        let data = self.log.as_ref().and_then(|l| l.data_to_log());
        // A data block that begins like a journal record is not logged: in
        // the log it could be taken for one (an image kept in a file).
        let store = &*self.store;
        let data = data.filter(|d| {
            d.iter().all(|&bid| {
                store
                    .block(bid)
                    .is_ok_and(|b| !is_journal_magic(crate::format::magic(b)))
            })
        });
        self.commit_with(data)
    }

    /// Commits, logging the file data blocks `data` and flushing once if
    /// given, or flushing before the commit record if not.
    fn commit_with(&mut self, data: Option<Vec<Bid>>) -> Result<bool> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        self.unless_faulted()?;
        let Some(log) = &mut self.log else {
            return Ok(false);
        };
        let copies = log.shadows.len() + data.as_ref().map_or(0, Vec::len);
        let data = data.filter(|_| Log::footprint(copies) <= log.capacity());
        if log.shadows.is_empty() && data.as_ref().is_none_or(Vec::is_empty) {
            log.began = None;
            let released = log.quarantine.release_committed();
            self.hint_released(released);
            if self.call.open {
                self.rebase_call();
            }
            return Ok(false);
        }
        let logs_data = data.is_some();
        let data = data.unwrap_or_default();
        let need = Log::footprint(log.shadows.len() + data.len());
        if need > log.capacity() {
            // Cannot happen with a journal sized by mkfs (min_journal); if
            // it does, stop changing the image rather than fail every
            // commit from now on. The durable state is the last commit.
            self.failed = true;
            return Err(Errno::EIO);
        }
        // Logged file data written since, and not logged again by this
        // commit, must not be replayed over what this flush makes durable.
        if log.pos + need > log.capacity() || (!logs_data && !log.relog.is_empty()) {
            self.checkpoint()?;
        }
        let log = self.log.as_mut().expect("journaled");
        // The first transaction after the header is never committed with
        // one flush: with two, none of its records is durable without its
        // first descriptor, which replay relies on (replay.rs).
        let one_flush = logs_data && log.pos > 0;
        let first = log.start + 1 + log.pos;
        log.write_copies(&mut *self.store, &data)?;
        if !one_flush {
            // Data blocks and the log copies are durable before the commit
            // record can be: ordered mode.
            self.flush()?;
        }
        // With one flush the commit record is written before anything is
        // known to be durable: not over copies read from a mapping that
        // lost pages.
        self.unless_faulted()?;
        let log = self.log.as_mut().expect("journaled");
        log.write_commit(&mut *self.store)?;
        if one_flush {
            // Everything the commit needs durable is in its log records:
            // the homes written in place wait for the checkpoint.
            let end = log.start + 1 + log.pos;
            self.flush_range(first, end - first)?;
        } else {
            self.flush()?;
        }
        let log = self.log.as_mut().expect("journaled");
        let released = log.install(&mut *self.store)?;
        self.hint_released(released);
        if self.call.open {
            // What is committed stays: the undo point moves here.
            self.rebase_call();
        }
        Ok(true)
    }

    /// Journal: makes the installed homes durable and empties the log.
    /// In place: seals the checksums of blocks written since the last
    /// checkpoint and flushes.
    pub fn checkpoint(&mut self) -> Result<()> {
        let Some(log) = &mut self.log else {
            self.seal();
            return self.flush();
        };
        if log.is_empty() {
            // Nothing in the log: blocks freed by committed transactions
            // are safe to reuse already.
            let released = log.emptied();
            self.hint_released(released);
            return Ok(());
        }
        self.flush()?;
        let log = self.log.as_mut().expect("journaled");
        log.write_header(&mut *self.store)?;
        self.flush()?;
        let released = self.log.as_mut().expect("journaled").emptied();
        self.hint_released(released);
        Ok(())
    }

    /// Seals checksums in place without flushing.
    pub fn seal(&mut self) {
        self.in_place.seal(&mut *self.store);
    }

    /// Ends an operation; in place there is nothing to install.
    #[inline]
    pub fn commit(&mut self) {}
}

#[cfg(test)]
mod tests;

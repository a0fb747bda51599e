//! Transactions over metadata blocks: the only door through which the file
//! system changes a metadata block ([`Journal::meta_mut`]).
//!
//! Two modes sit behind the same calls:
//!
//! - **In place** (mode `none`, as published ULFS): a write lands in the
//!   mapping at once; the block is remembered so its CRC32C can be sealed at
//!   the next checkpoint (`sync`, unmount). A crash can leave anything.
//! - **Journal** (mode `journal`): the first write of a block in the running
//!   transaction makes a private *shadow* copy, and reads see the shadow.
//!   No page of the mapping is ever dirtied with metadata that is not yet
//!   durable in the journal. `commit_txn` seals the shadows, writes them to
//!   the log after a descriptor, flushes (so file data written so far is
//!   durable before the commit record: ext4's `data=ordered`), writes the
//!   commit record (sequence number + CRC32C of the copies), flushes, and
//!   only then installs the shadows at home. `checkpoint` flushes the homes
//!   and empties the log by advancing the header's sequence number. Replay
//!   at mount re-applies every complete transaction after the header's
//!   sequence, in order; a torn or stale record ends it. Replaying twice
//!   writes the same bytes twice, so a crash during replay is harmless.
//!
//! Blocks freed by a transaction are *quarantined* until its commit:
//! reusing one earlier could put file data where the durable state still
//! expects the old contents. A freed block with a copy in the log (it was
//! metadata) waits further, for the checkpoint that empties the log, since
//! a replay would write that copy over whatever the block holds by then.
//! Blocks that become reusable are offered to allocation first
//! (`take_reuse_hint`): their pages are already in memory.
//!
//! File data blocks bypass transactions (`data`, `data_mut`).
//!
//! **Every call is atomic.** A transaction spans many calls, so a call that
//! fails half-way must not leave its changes in it. Between `begin_call`
//! and `end_call` the journal keeps an undo record of the call: the first
//! time a metadata block is written or freed in the call, what it held
//! before (in mode `journal` the previous shadow, or nothing when the home
//! is still current; in place a copy of the home), plus the blocks the call
//! added to or took from the freed and fresh sets. `undo_call` puts all of
//! it back, so a failed call leaves no trace in either mode. A commit in
//! the middle of a call (a huge write commits its finished part) moves the
//! undo point to that commit: what is committed is a consistent state and
//! stays. Blocks freed by a call are not reused by the same call, because
//! undoing the call gives them back to their owner. File data written by
//! the call into blocks it had allocated is dropped with the allocation;
//! overwritten bytes of existing data are not restored (as on Linux, a
//! write that fails part-way may have changed them).
//!
//! A metadata block read from the image has its CRC32C verified the first
//! time (EUCLEAN on a mismatch, the block remembered for the error report),
//! unless the image was left by a crash in mode `none`, whose checksums are
//! known to be stale until `fsck --repair`.

use crate::errno::{Errno, Result};
use crate::format::journal::*;
use crate::format::{BLOCK_SIZE, Bid, Block, block_crc_ok, seal_block};
use crate::store::BlockStore;
use crate::types::Timespec;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use undo::{Before, CallUndo, PART};

mod undo;

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
    /// Like `errno`: the metadata block whose check failed most recently on
    /// this thread, so an EUCLEAN can be reported with the block named.
    static LAST_DAMAGE: Cell<Option<Damage>> = const { Cell::new(None) };
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

type BidMap<V> = HashMap<Bid, V, BuildHasherDefault<IdHasher>>;
type BidSet = HashSet<Bid, BuildHasherDefault<IdHasher>>;

/// Whether a block header's magic names a metadata block that `meta`
/// reads (superblock copies and journal records are read otherwise).
fn is_metadata_magic(m: u32) -> bool {
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

/// Puts back 256-byte part `part` of a block.
fn put_part(b: &mut Block, part: u8, bytes: &[u8; PART]) {
    let at = part as usize * PART;
    b[at..at + PART].copy_from_slice(bytes);
}

/// The journal region and the running transaction (mode `journal`).
struct Log {
    /// First block of the region: the header. The log follows it.
    start: Bid,
    /// Blocks of the region, header included.
    blocks: u32,
    /// Next free log block, counted from `start + 1`.
    pos: u32,
    /// Sequence number the next commit gets.
    next_seq: u64,
    shadows: BidMap<Box<Block>>,
    /// Shadows in the order they were first written (the log order).
    order: Vec<Bid>,
    /// Shadow buffers kept for reuse, so commits do not allocate.
    spare: Vec<Box<Block>>,
    /// When the running transaction made its first change (monotonic).
    began: Option<Timespec>,
    freed_running: BidSet,
    /// Freed by committed transactions while a copy of them is in the log:
    /// reusable after the next checkpoint (a replay would write the copy).
    freed_committed: BidSet,
    /// Blocks with a copy in the log since the last checkpoint.
    in_log: BidSet,
    /// Blocks allocated by the running transaction: freeing one of these
    /// needs no quarantine, since no durable state or log record has ever
    /// seen it allocated.
    fresh: BidSet,
    /// Homes were installed since the last checkpoint.
    installed: bool,
}

impl Log {
    fn capacity(&self) -> u32 {
        self.blocks - 1
    }

    /// Log blocks a transaction of `n` copies takes.
    fn footprint(n: usize) -> u32 {
        (n + n.div_ceil(DESC_CAP) + 1) as u32
    }
}

pub struct Journal {
    store: Box<dyn BlockStore>,
    log: Option<Log>,
    /// In place: metadata blocks written since the last checkpoint.
    dirty: HashSet<Bid>,
    last_dirty: Option<Bid>,
    /// One bit per block: its checksum was verified (or we wrote it).
    verified: Vec<Cell<u64>>,
    verify: bool,
    /// A flush failed: nothing more may be written.
    failed: bool,
    /// The undo record of the call in progress (`undo.rs`).
    call: CallUndo,
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
        let words = (store.blocks() as usize).div_ceil(64);
        Journal {
            store,
            log: None,
            dirty: HashSet::new(),
            last_dirty: None,
            verified: (0..if verify { words } else { 0 })
                .map(|_| Cell::new(0))
                .collect(),
            verify,
            failed: false,
            call: CallUndo::default(),
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
        j.log = Some(Log {
            start,
            blocks,
            pos: 0,
            next_seq,
            shadows: BidMap::default(),
            order: Vec::new(),
            spare: Vec::new(),
            began: None,
            freed_running: BidSet::default(),
            freed_committed: BidSet::default(),
            in_log: BidSet::default(),
            fresh: BidSet::default(),
            installed: false,
        });
        let replayed = j.replay()?;
        Ok((j, replayed))
    }

    /// Writes an empty journal region (mkfs).
    pub fn format_region(store: &mut dyn BlockStore, start: Bid, blocks: u32) -> Result<()> {
        for bid in start..start + blocks {
            store.block_mut(bid)?.fill(0);
        }
        header_encode(store.block_mut(start)?, 1);
        Ok(())
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
                .is_some_and(|l| l.freed_running.contains(&bid) || l.freed_committed.contains(&bid))
    }

    /// Whether anything is quarantined (so allocation must look).
    #[inline]
    pub fn has_quarantine(&self) -> bool {
        !self.call.freed.is_empty()
            || self
                .log
                .as_ref()
                .is_some_and(|l| !l.freed_running.is_empty() || !l.freed_committed.is_empty())
    }

    /// Blocks freed and not yet reusable.
    pub fn quarantined(&self) -> usize {
        self.log
            .as_ref()
            .map_or(0, |l| l.freed_running.len() + l.freed_committed.len())
    }

    /// Blocks freed by committed transactions, reusable after a checkpoint.
    pub fn quarantined_committed(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.freed_committed.len())
    }

    fn mark_verified(&self, bid: Bid) {
        if let Some(w) = self.verified.get(bid as usize / 64) {
            w.set(w.get() | 1 << (bid % 64));
        }
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
        if self.verify
            && let Some(w) = self.verified.get(bid as usize / 64)
            && w.get() & (1 << (bid % 64)) == 0
        {
            if !block_crc_ok(b) {
                // A page of the mapping was lost (store/fault.rs): zeros
                // stand in for it, and the medium, not the block, is at
                // fault.
                if self.store.faulted() {
                    return Err(Errno::EIO);
                }
                let not_metadata = !is_metadata_magic(crate::format::magic(b));
                let damage = Damage {
                    block: bid,
                    not_metadata,
                };
                LAST_DAMAGE.with(|c| c.set(Some(damage)));
                return Err(Errno::EUCLEAN);
            }
            w.set(w.get() | 1 << (bid % 64));
        }
        Ok(b)
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
        self.mark_verified(bid);
        let Some(log) = &mut self.log else {
            let b = self.store.block_mut(bid)?;
            if self.last_dirty != Some(bid) {
                self.dirty.insert(bid);
                self.last_dirty = Some(bid);
            }
            return Ok(b);
        };
        if self.store.is_read_only() {
            return Err(Errno::EROFS);
        }
        if !log.shadows.contains_key(&bid) {
            let home = self.store.block(bid)?;
            let mut shadow = log.spare.pop().unwrap_or_else(|| Box::new([0; BLOCK_SIZE]));
            shadow.copy_from_slice(home);
            log.shadows.insert(bid, shadow);
            log.order.push(bid);
            log.began.get_or_insert_with(Timespec::monotonic);
        }
        Ok(log.shadows.get_mut(&bid).expect("shadow just made"))
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
        self.store.block(bid)
    }

    /// Writes a file data block (not journaled: data=ordered semantics).
    #[inline]
    pub fn data_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        self.store.block_mut(bid)
    }

    /// A block was allocated by the running transaction.
    #[inline]
    pub fn note_alloc(&mut self, bid: Bid) {
        if let Some(log) = &mut self.log
            && log.fresh.insert(bid)
            && self.call.open
        {
            self.call.fresh_added.push(bid);
        }
    }

    /// A block was freed: drop what the transaction held of it, and keep it
    /// from reuse until it is safe.
    pub fn forget(&mut self, bid: Bid) {
        if self.call.open {
            // The undo of the call needs what the block held; a block that
            // cannot be read (outside the image) has nothing to give back.
            if self.call.needs_whole(bid) {
                let _ = self.remember_whole(bid);
            }
            self.call.freed.insert(bid);
        }
        self.dirty.remove(&bid);
        if self.last_dirty == Some(bid) {
            self.last_dirty = None;
        }
        let Some(log) = &mut self.log else {
            self.hint_reuse(bid);
            return;
        };
        if let Some(s) = log.shadows.remove(&bid) {
            log.spare.push(s);
        }
        if log.fresh.remove(&bid) {
            if self.call.open {
                self.call.fresh_removed.push(bid);
            }
            self.hint_reuse(bid);
        } else if log.freed_running.insert(bid) && self.call.open {
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

    /// The lowest block that became reusable since the last time allocation
    /// asked, if any (see `reuse_hint`).
    #[inline]
    pub fn take_reuse_hint(&mut self) -> Option<Bid> {
        self.reuse_hint.take()
    }

    /// Begins a call: from here its changes can be undone.
    pub fn begin_call(&mut self) {
        debug_assert!(!self.call.open, "calls do not nest");
        // The record is empty: every call ends in `end_call` or `undo_call`
        // (a call cut off by a panic is undone before the next begins).
        self.call.open = true;
        let log = self.log.as_ref();
        self.call.order_len = log.map_or(0, |l| l.order.len());
        self.call.began = log.and_then(|l| l.began);
    }

    /// Whether a call began and neither ended nor was undone: the call
    /// panicked and the panic was caught.
    pub fn in_call(&self) -> bool {
        self.call.open
    }

    /// Ends a call that succeeded: its changes stay.
    pub fn end_call(&mut self) {
        self.rebase_call();
        self.call.open = false;
    }

    /// Moves the undo point to now: the call's changes so far stay (after
    /// a commit in the middle of a call, or at its end).
    fn rebase_call(&mut self) {
        let log = self.log.as_ref();
        self.call
            .rebase(log.map_or(0, |l| l.order.len()), log.and_then(|l| l.began));
    }

    /// Records what `bid` holds before the call first changes it.
    fn remember_whole(&mut self, bid: Bid) -> Result<()> {
        let before = match &self.log {
            Some(log) => match log.shadows.get(&bid) {
                Some(s) => Before::Whole(self.call.copy(s)),
                None => Before::Home,
            },
            None => Before::Whole(self.call.copy(self.store.block(bid)?)),
        };
        self.call.before.push((bid, before));
        Ok(())
    }

    /// Writes metadata block `bid` within the running transaction, like
    /// `meta_mut`, for a caller that changes only the 256-byte parts
    /// `parts` of it (an inode slot; a bitmap word and the map header's
    /// free count; one block pointer): a call's undo record keeps only
    /// those parts, so a small change on the data path costs a 256-byte
    /// copy instead of a whole block. The caller must change nothing else.
    #[inline]
    pub fn meta_mut_parts(&mut self, bid: Bid, parts: &[usize]) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        if self.call.open {
            let shadowed = self.log.as_ref().map(|l| l.shadows.get(&bid));
            match shadowed {
                // Journal, no shadow yet: undo drops the shadow.
                Some(None) => {
                    if self.call.needs_whole(bid) {
                        self.call.before.push((bid, Before::Home));
                    }
                }
                _ => {
                    for &part in parts {
                        if !self.call.needs_part(bid, part) {
                            continue;
                        }
                        let block = match shadowed {
                            Some(Some(s)) => &s[..],
                            _ => &self.store.block(bid)?[..],
                        };
                        let mut bytes = [0; PART];
                        bytes.copy_from_slice(&block[part * PART..(part + 1) * PART]);
                        let part = part as u8;
                        self.call.before.push((bid, Before::Part { part, bytes }));
                    }
                }
            }
        }
        self.write_block(bid)
    }

    /// Undoes everything the call in progress changed since it began (or
    /// since a commit inside it), and ends it. If a block cannot be put
    /// back, the journal latches read-only rather than go on from a state
    /// that is neither before nor after the call.
    pub fn undo_call(&mut self) {
        let mut before = std::mem::take(&mut self.call.before);
        let mut ok = true;
        while let Some((bid, was)) = before.pop() {
            match &mut self.log {
                Some(log) => match was {
                    Before::Home => {
                        if let Some(s) = log.shadows.remove(&bid) {
                            log.spare.push(s);
                        }
                        // The home is current again: verified on next read.
                        if let Some(w) = self.verified.get(bid as usize / 64) {
                            w.set(w.get() & !(1 << (bid % 64)));
                        }
                    }
                    Before::Whole(copy) => {
                        if let Some(s) = log.shadows.insert(bid, copy) {
                            self.call.recycle(s);
                        }
                    }
                    Before::Part { part, bytes } => match log.shadows.get_mut(&bid) {
                        Some(s) => put_part(s, part, &bytes),
                        None => ok = false,
                    },
                },
                None => {
                    match self.store.block_mut(bid) {
                        Ok(home) => match was {
                            Before::Whole(copy) => {
                                home.copy_from_slice(&copy[..]);
                                self.call.recycle(copy);
                            }
                            Before::Part { part, bytes } => put_part(home, part, &bytes),
                            Before::Home => {}
                        },
                        Err(_) => ok = false,
                    }
                    // Sealed at the next checkpoint, as any block written.
                    self.dirty.insert(bid);
                    self.last_dirty = None;
                }
            }
        }
        if let Some(log) = &mut self.log {
            log.order.truncate(self.call.order_len);
            log.began = self.call.began;
            for bid in &self.call.freed_added {
                log.freed_running.remove(bid);
            }
            for bid in &self.call.fresh_added {
                log.fresh.remove(bid);
            }
            log.fresh.extend(self.call.fresh_removed.iter().copied());
        }
        if !ok {
            self.failed = true;
        }
        self.call.before = before;
        self.call.rebase(0, None);
        self.call.open = false;
    }

    /// Stops all changes: nothing more is written, nothing more committed
    /// (after a panic in a call, whose state cannot be trusted).
    pub fn latch_read_only(&mut self) {
        self.failed = true;
    }

    /// Flushes the store; a failure latches the journal read-only.
    fn flush(&mut self) -> Result<()> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        self.store.flush().map_err(|e| {
            self.failed = true;
            if e == Errno::EIO { e } else { Errno::EIO }
        })
    }

    /// Makes file data written so far durable (fsync with nothing to commit).
    pub fn flush_data(&mut self) -> Result<()> {
        self.flush()
    }

    /// Commits the running transaction (journal mode; nothing to do in place).
    pub fn commit_txn(&mut self) -> Result<()> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        let Some(log) = &self.log else { return Ok(()) };
        if log.shadows.is_empty() {
            let log = self.log.as_mut().expect("journaled");
            log.began = None;
            log.fresh.clear();
            self.release_committed_frees();
            if self.call.open {
                self.rebase_call();
            }
            return Ok(());
        }
        let n = log.shadows.len();
        let need = Log::footprint(n);
        if need > log.capacity() {
            // Cannot happen with a journal sized by mkfs (min_journal); if
            // it does, stop changing the image rather than fail every
            // commit from now on. The durable state is the last commit.
            self.failed = true;
            return Err(Errno::EIO);
        }
        if log.pos + need > log.capacity() {
            self.checkpoint()?;
        }
        self.write_log()?;
        // Data blocks and the log copies are durable before the commit
        // record can be: ordered mode.
        self.flush()?;
        let log = self.log.as_mut().expect("journaled");
        let (seq, at) = (log.next_seq, log.start + 1 + log.pos);
        let data_crc = self.copies_crc();
        commit_encode(self.store.block_mut(at)?, seq, n as u32, data_crc);
        self.flush()?;
        self.install()?;
        if self.call.open {
            // What is committed stays: the undo point moves here.
            self.rebase_call();
        }
        Ok(())
    }

    /// Writes descriptors and sealed copies of every shadow to the log.
    fn write_log(&mut self) -> Result<()> {
        let log = self.log.as_mut().expect("journaled");
        // A block freed (its shadow dropped) and written again in the same
        // transaction was pushed twice: each block goes to the log once, so
        // the commit record's count is the number of copies written.
        let mut seen = BidSet::default();
        let order: Vec<Bid> = log
            .order
            .iter()
            .copied()
            .filter(|b| log.shadows.contains_key(b) && seen.insert(*b))
            .collect();
        debug_assert_eq!(order.len(), log.shadows.len());
        log.order = order;
        let mut at = log.start + 1 + log.pos;
        let seq = log.next_seq;
        log.in_log.extend(log.order.iter().copied());
        for chunk in log.order.chunks(DESC_CAP) {
            descriptor_encode(self.store.block_mut(at)?, seq, chunk);
            at += 1;
            for bid in chunk {
                let shadow = log.shadows.get_mut(bid).expect("ordered shadow");
                seal_block(shadow);
                self.store.block_mut(at)?.copy_from_slice(&shadow[..]);
                at += 1;
            }
        }
        log.pos = at - (log.start + 1);
        Ok(())
    }

    /// CRC32C of the shadows in log order (what the commit record vouches for).
    fn copies_crc(&self) -> u32 {
        let log = self.log.as_ref().expect("journaled");
        log.order
            .iter()
            .fold(0, |c, bid| crc32c::crc32c_append(c, &log.shadows[bid][..]))
    }

    /// After a durable commit record: shadows go home, the log advances.
    fn install(&mut self) -> Result<()> {
        let log = self.log.as_mut().expect("journaled");
        for bid in std::mem::take(&mut log.order) {
            if let Some(s) = log.shadows.remove(&bid) {
                self.store.block_mut(bid)?.copy_from_slice(&s[..]);
                log.spare.push(s);
            }
        }
        log.pos += 1; // the commit block
        log.next_seq += 1;
        log.began = None;
        log.fresh.clear();
        log.installed = true;
        self.release_committed_frees();
        Ok(())
    }

    /// The blocks freed by the transaction just committed: those without a
    /// copy in the log are reusable now (no durable state or replay refers
    /// to them any more); the others wait for the checkpoint.
    fn release_committed_frees(&mut self) {
        let log = self.log.as_mut().expect("journaled");
        let mut lowest = None;
        for bid in log.freed_running.drain() {
            if log.in_log.contains(&bid) {
                log.freed_committed.insert(bid);
            } else if lowest.is_none_or(|l| bid < l) {
                lowest = Some(bid);
            }
        }
        if let Some(bid) = lowest {
            self.hint_reuse(bid);
        }
    }

    /// At a checkpoint: the log is empty, every freed block is reusable.
    fn release_checkpointed_frees(&mut self) {
        let log = self.log.as_mut().expect("journaled");
        let lowest = log.freed_committed.drain().min();
        log.in_log.clear();
        if let Some(bid) = lowest {
            self.hint_reuse(bid);
        }
    }

    /// Journal: makes the installed homes durable and empties the log.
    /// In place: seals the checksums of blocks written since the last
    /// checkpoint and flushes.
    pub fn checkpoint(&mut self) -> Result<()> {
        let Some(log) = &self.log else {
            self.seal();
            return self.flush();
        };
        if log.pos == 0 && !log.installed {
            // Nothing in the log: blocks freed by committed transactions
            // are safe to reuse already.
            self.release_checkpointed_frees();
            return Ok(());
        }
        self.flush()?;
        let log = self.log.as_mut().expect("journaled");
        let (start, seq) = (log.start, log.next_seq);
        header_encode(self.store.block_mut(start)?, seq);
        self.flush()?;
        let log = self.log.as_mut().expect("journaled");
        log.pos = 0;
        log.installed = false;
        self.release_checkpointed_frees();
        Ok(())
    }

    /// Seals checksums in place without flushing.
    pub fn seal(&mut self) {
        for bid in self.dirty.drain() {
            if let Ok(b) = self.store.block_mut(bid) {
                seal_block(b);
            }
        }
        self.last_dirty = None;
    }

    /// Ends an operation; in place there is nothing to install.
    #[inline]
    pub fn commit(&mut self) {}

    /// Re-applies every complete transaction in the log, then checkpoints
    /// (read-write) so the log is empty again.
    fn replay(&mut self) -> Result<Replayed> {
        let mut done = Replayed::default();
        let read_only = self.store.is_read_only();
        let (start, blocks, mut seq) = {
            let log = self.log.as_ref().expect("journaled");
            (log.start, log.blocks, log.next_seq)
        };
        let end = start + blocks;
        let total = self.store.blocks();
        let mut at = start + 1;
        'txns: loop {
            let mut copies: Vec<(Bid, Bid)> = Vec::new(); // (home, log position)
            let mut crc = 0u32;
            loop {
                if at >= end {
                    break 'txns;
                }
                let b = self.store.block(at)?;
                if let Some((n, data_crc)) = commit_decode(b, seq) {
                    if n as usize != copies.len() || data_crc != crc || copies.is_empty() {
                        break 'txns;
                    }
                    at += 1;
                    break;
                }
                let Some(homes) = descriptor_decode(b, seq) else {
                    break 'txns;
                };
                if at as u64 + 1 + homes.len() as u64 > end as u64 {
                    break 'txns;
                }
                for (i, &home) in homes.iter().enumerate() {
                    // Never replay over the log itself, or outside the image.
                    if home as u64 >= total || (home >= start && home < end) || home == 1 {
                        break 'txns;
                    }
                    let pos = at + 1 + i as u32;
                    crc = crc32c::crc32c_append(crc, &self.store.block(pos)?[..]);
                    copies.push((home, pos));
                }
                at += 1 + homes.len() as u32;
            }
            for (home, pos) in copies {
                let copy = *self.store.block(pos)?;
                if read_only {
                    let log = self.log.as_mut().expect("journaled");
                    log.shadows.insert(home, Box::new(copy));
                } else {
                    self.store.block_mut(home)?.copy_from_slice(&copy);
                }
                self.mark_verified(home);
                done.blocks += 1;
            }
            done.transactions += 1;
            seq += 1;
        }
        // Number new transactions above every sequence still written in
        // the region: if replay stopped early (a damaged record), complete
        // records of later transactions may remain, and must never be taken
        // for new ones.
        for bid in start + 1..end {
            let b = self.store.block(bid)?;
            if is_record(b) {
                seq = seq.max(record_seq(b) + 1);
            }
        }
        let log = self.log.as_mut().expect("journaled");
        let moved = seq != log.next_seq;
        log.next_seq = seq;
        // The header must say where the next transaction will be looked
        // for before one is written: checkpoint whenever replay changed it.
        if !read_only && moved {
            log.installed = true;
            log.pos = at - (start + 1);
            self.checkpoint()?;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{MAGIC_MAP, init_block};
    use crate::store::{Fate, SimDisk};

    fn in_place() -> Journal {
        Journal::in_place(Box::new(SimDisk::new(8)), false)
    }

    #[test]
    fn checkpoint_seals_what_was_written() {
        let mut j = in_place();
        init_block(j.meta_mut(3).unwrap(), MAGIC_MAP);
        j.meta_mut(3).unwrap()[100] = 1;
        init_block(j.meta_mut(4).unwrap(), MAGIC_MAP);
        j.commit();
        assert!(!block_crc_ok(j.meta(3).unwrap()));
        j.checkpoint().unwrap();
        assert!(block_crc_ok(j.meta(3).unwrap()));
        assert!(block_crc_ok(j.meta(4).unwrap()));
    }

    #[test]
    fn forgotten_blocks_are_not_sealed() {
        let mut j = in_place();
        init_block(j.meta_mut(5).unwrap(), MAGIC_MAP);
        j.forget(5);
        // The block now holds file data; sealing must not touch its bytes.
        j.data_mut(5).unwrap().fill(0xAB);
        j.checkpoint().unwrap();
        assert!(j.data(5).unwrap().iter().all(|&b| b == 0xAB));
    }

    fn journaled_disk() -> SimDisk {
        let mut d = SimDisk::new(64);
        Journal::format_region(&mut d, 2, 16).unwrap();
        d.flush().unwrap();
        d
    }

    fn open(d: SimDisk) -> (Journal, Replayed) {
        Journal::journaled(Box::new(d), 2, 16, true).unwrap()
    }

    fn disk_of(j: &Journal) -> &SimDisk {
        j.store().as_sim().unwrap()
    }

    #[test]
    fn shadows_stay_private_until_commit() {
        let (mut j, _) = open(journaled_disk());
        init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
        j.meta_mut(40).unwrap()[200] = 7;
        assert_eq!(j.meta(40).unwrap()[200], 7, "reads see the shadow");
        assert_eq!(
            disk_of(&j).current()[40 * BLOCK_SIZE + 200],
            0,
            "the home is untouched"
        );
        j.commit_txn().unwrap();
        assert_eq!(
            disk_of(&j).current()[40 * BLOCK_SIZE + 200],
            7,
            "installed after commit"
        );
        assert!(block_crc_ok(j.meta(40).unwrap()));
    }

    #[test]
    fn replay_applies_committed_and_ignores_torn() {
        let (mut j, _) = open(journaled_disk());
        init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
        j.meta_mut(40).unwrap()[200] = 1;
        j.commit_txn().unwrap();
        // Power cut after the commit: homes written or not, replay fixes it.
        let lost = disk_of(&j).crash_image(|_| Fate::Lost);
        let (j2, r) = open(SimDisk::from_image(lost));
        assert_eq!(r.transactions, 1);
        assert_eq!(j2.meta(40).unwrap()[200], 1);
        // A second transaction whose commit record never made it.
        j.meta_mut(41).unwrap()[300] = 2;
        j.write_log().unwrap();
        j.flush().unwrap();
        let (j3, r) = open(SimDisk::from_image(disk_of(&j).current().to_vec()));
        assert_eq!(r.transactions, 1, "no commit record, no replay");
        assert_eq!(j3.data(41).unwrap()[300], 0);
    }

    #[test]
    fn replay_twice_is_replay_once() {
        let (mut j, _) = open(journaled_disk());
        init_block(j.meta_mut(50).unwrap(), MAGIC_MAP);
        j.meta_mut(50).unwrap()[9] = 9;
        j.commit_txn().unwrap();
        let img = disk_of(&j).crash_image(|_| Fate::Lost);
        // Crash in the middle of replay: capture the disk at each of its
        // flushes, with every write in flight torn.
        let mids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut d = SimDisk::from_image(img);
        let sink = mids.clone();
        d.on_flush(move |disk| {
            sink.lock()
                .unwrap()
                .push(disk.crash_image(|_| Fate::Torn(0b1010_0101)))
        });
        let _ = open(d);
        let mids = mids.lock().unwrap();
        assert!(!mids.is_empty());
        for mid in mids.iter() {
            let (j2, _) = open(SimDisk::from_image(mid.clone()));
            assert_eq!(j2.meta(50).unwrap()[9], 9);
        }
    }

    #[test]
    fn freed_blocks_wait_for_their_commit() {
        let (mut j, _) = open(journaled_disk());
        j.forget(45);
        assert!(j.is_quarantined(45), "the durable state still has it");
        assert_eq!(j.take_reuse_hint(), None);
        j.commit_txn().unwrap();
        assert!(!j.is_quarantined(45), "committed, and no copy in the log");
        assert_eq!(j.take_reuse_hint(), Some(45), "offered for reuse");
    }

    #[test]
    fn freed_blocks_with_a_copy_in_the_log_wait_for_a_checkpoint() {
        let (mut j, _) = open(journaled_disk());
        init_block(j.meta_mut(45).unwrap(), MAGIC_MAP);
        j.commit_txn().unwrap();
        j.forget(45);
        j.commit_txn().unwrap();
        assert!(
            j.is_quarantined(45),
            "a replay would write the logged copy over its next contents"
        );
        j.checkpoint().unwrap();
        assert!(!j.is_quarantined(45));
        assert_eq!(j.take_reuse_hint(), Some(45));
        // The log is empty again: the same block freed once more (after
        // being written as data) needs only its commit.
        j.forget(45);
        j.commit_txn().unwrap();
        assert!(!j.is_quarantined(45));
    }

    #[test]
    fn blocks_allocated_and_freed_in_one_transaction_need_no_quarantine() {
        let (mut j, _) = open(journaled_disk());
        j.note_alloc(46);
        j.forget(46);
        assert!(
            !j.is_quarantined(46),
            "never durable, never logged: reusable"
        );
        j.note_alloc(47);
        j.commit_txn().unwrap();
        j.forget(47);
        assert!(j.is_quarantined(47), "allocated by a committed transaction");
    }

    /// Regression (found by the real-process crash test): a block freed and
    /// written again in one transaction must be logged once, or the commit
    /// record's count does not match and replay drops the transaction.
    #[test]
    fn block_freed_and_rewritten_in_one_transaction_replays() {
        let (mut j, _) = open(journaled_disk());
        j.note_alloc(40);
        init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
        j.forget(40);
        init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
        j.meta_mut(40).unwrap()[100] = 4;
        j.meta_mut(41).unwrap()[100] = 1;
        j.commit_txn().unwrap();
        j.meta_mut(42).unwrap()[100] = 2;
        j.commit_txn().unwrap();
        let (j2, r) = open(SimDisk::from_image(disk_of(&j).crash_image(|_| Fate::Lost)));
        assert_eq!(r.transactions, 2);
        assert_eq!(j2.meta(40).unwrap()[100], 4);
        assert_eq!(j2.data(42).unwrap()[100], 2);
    }

    /// After a replay that stopped at a damaged record, new transactions
    /// are numbered past every record left in the region.
    #[test]
    fn new_transactions_are_numbered_past_leftover_records() {
        let (mut j, _) = open(journaled_disk());
        for i in 0..3u8 {
            j.meta_mut(40 + i as u32).unwrap()[7] = i + 1;
            j.commit_txn().unwrap();
        }
        let mut img = disk_of(&j).crash_image(|_| Fate::Lost);
        // Damage the first transaction's descriptor (log block 3).
        img[3 * BLOCK_SIZE + 40] ^= 1;
        let (j2, r) = open(SimDisk::from_image(img));
        assert_eq!(r.transactions, 0);
        let next = j2.log.as_ref().unwrap().next_seq;
        assert!(
            next > 3,
            "leftover records of transactions 2 and 3: next is {next}"
        );
        // ...and the header says so before anything new is logged: a
        // transaction committed now must be found by the next replay.
        assert_eq!(header_decode(j2.store().block(2).unwrap()), Some(next));
        let mut j2 = j2;
        j2.meta_mut(45).unwrap()[500] = 5;
        j2.commit_txn().unwrap();
        let (j3, r) = open(SimDisk::from_image(
            disk_of(&j2).crash_image(|_| Fate::Lost),
        ));
        assert_eq!(r.transactions, 1);
        assert_eq!(j3.meta(45).unwrap()[500], 5);
    }

    #[test]
    fn flush_failure_latches_read_only() {
        let mut d = journaled_disk();
        d.fail_flushes(true);
        let (mut j, _) = open(d);
        j.meta_mut(40).unwrap()[0] = 1;
        assert_eq!(j.commit_txn(), Err(Errno::EIO));
        assert_eq!(j.meta_mut(41).unwrap_err(), Errno::EROFS);
        assert_eq!(j.commit_txn(), Err(Errno::EROFS));
    }

    #[test]
    fn damaged_block_is_reported_not_trusted() {
        let mut d = SimDisk::new(8);
        init_block(d.block_mut(5).unwrap(), MAGIC_MAP);
        seal_block(d.block_mut(5).unwrap());
        d.block_mut(5).unwrap()[999] ^= 1;
        let j = Journal::in_place(Box::new(d), true);
        assert_eq!(j.meta(5).unwrap_err(), Errno::EUCLEAN);
        assert_eq!(last_damaged_block(), Some(5));
        let damage = take_damage().unwrap();
        assert_eq!((damage.block, damage.not_metadata), (5, false));
        assert_eq!(take_damage(), None, "taken once");
    }

    #[test]
    fn a_block_without_a_header_is_not_blamed_for_its_checksum() {
        let mut d = SimDisk::new(8);
        d.block_mut(6).unwrap().fill(0x5a);
        let j = Journal::in_place(Box::new(d), true);
        assert_eq!(j.meta(6).unwrap_err(), Errno::EUCLEAN);
        let damage = take_damage().unwrap();
        assert!(damage.not_metadata);
        assert!(damage.to_string().contains("pointer"), "{damage}");
    }
}

//! The write-ahead log of mode `journal`: the running transaction's shadow
//! blocks and how they reach the log region and then their homes.
//!
//! The first write of a metadata block in a transaction makes a private
//! *shadow* copy, and reads see the shadow, so no page of the mapping is
//! dirtied with metadata that is not yet durable in the log. A commit
//! (sequenced by `Journal::commit_txn`, which owns the flushes between the
//! steps) writes the sealed shadows to the log after descriptors, then the
//! commit record (sequence number + CRC32C of the copies), then installs
//! the shadows at home. A checkpoint empties the log by writing the
//! header's sequence number past every transaction in it. Replay, at
//! mount, is replay.rs. Layouts: docs/FORMAT.md, "Journal".
//!
//! Invariant (replay relies on it): the transactions written since the
//! header was last written lie one after another from the first log block,
//! numbered from the header's sequence number up; every other record in
//! the region has a lower number. The first of them is committed with two
//! flushes (its first descriptor durable before its commit record); later
//! ones may be committed with one (`Journal::commit_for_sync`).

use super::quarantine::Quarantine;
use super::{BidMap, BidSet};
use crate::errno::Result;
use crate::format::journal::*;
use crate::format::{BLOCK_SIZE, Bid, Block, seal_block};
use crate::store::BlockStore;
use crate::types::Timespec;

pub(super) struct Log {
    /// First block of the region: the header. The log follows it.
    pub start: Bid,
    /// Blocks of the region, header included.
    pub blocks: u32,
    /// Next free log block, counted from `start + 1`.
    pub pos: u32,
    /// Sequence number the next commit gets.
    pub next_seq: u64,
    pub shadows: BidMap<Box<Block>>,
    /// Shadows in the order they were first written (the log order).
    pub order: Vec<Bid>,
    /// Shadow buffers kept for reuse, so commits do not allocate.
    pub spare: Vec<Box<Block>>,
    /// When the running transaction made its first change (monotonic).
    pub began: Option<Timespec>,
    pub quarantine: Quarantine,
    /// Homes were installed since the last checkpoint.
    pub installed: bool,
    /// File data blocks with a copy in the log since the last checkpoint
    /// (logged by a commit for fsync: see `data_to_log`).
    pub logged_data: BidSet,
    /// Those of them written since: a replay must not put the logged copy
    /// back over what was written, so the next commit logs them again, or
    /// the log is emptied first.
    pub relog: BidSet,
    /// File data blocks written by the running transaction, while they are
    /// at most [`DATA_LOG_LIMIT`] (one more means "too many").
    written: BidSet,
    /// The block last added to `written`: a run of writes to one block
    /// costs one comparison.
    last_written: Option<Bid>,
    /// Copies written by `write_copies` and their CRC32C, for the commit
    /// record.
    copies: u32,
    copies_crc: u32,
}

/// At most this many file data blocks are logged by a commit for fsync
/// (64 KiB): beyond it, writing them twice costs more than the flush it
/// saves.
pub const DATA_LOG_LIMIT: usize = 16;

impl Log {
    /// The region `start .. start + blocks`, whose header says the next
    /// transaction is `next_seq`.
    pub fn new(start: Bid, blocks: u32, next_seq: u64) -> Log {
        Log {
            start,
            blocks,
            pos: 0,
            next_seq,
            shadows: BidMap::default(),
            order: Vec::new(),
            spare: Vec::new(),
            began: None,
            quarantine: Quarantine::default(),
            installed: false,
            logged_data: BidSet::default(),
            relog: BidSet::default(),
            written: BidSet::default(),
            last_written: None,
            copies: 0,
            copies_crc: 0,
        }
    }

    /// Log blocks (the region without its header).
    pub fn capacity(&self) -> u32 {
        self.blocks - 1
    }

    /// Log blocks a transaction of `n` copies takes.
    pub fn footprint(n: usize) -> u32 {
        (n + n.div_ceil(DESC_CAP) + 1) as u32
    }

    /// Makes the shadow of `bid` (which has none) from its home.
    #[inline]
    pub fn add_shadow(&mut self, bid: Bid, home: &Block) {
        let mut shadow = self
            .spare
            .pop()
            .unwrap_or_else(|| Box::new([0; BLOCK_SIZE]));
        shadow.copy_from_slice(home);
        self.shadows.insert(bid, shadow);
        self.order.push(bid);
        self.began.get_or_insert_with(Timespec::monotonic);
    }

    /// Drops the shadow of `bid` (freed, or its change undone).
    pub fn drop_shadow(&mut self, bid: Bid) {
        if let Some(s) = self.shadows.remove(&bid) {
            self.spare.push(s);
        }
    }

    /// The file data blocks a commit for fsync logs so that one flush
    /// makes it durable: every data block the transaction wrote. Without a
    /// copy in the log they would have to be durable before the commit
    /// record (ordered mode: a block the transaction allocated, or the
    /// zeroed tail of a truncated file, must not show older bytes once the
    /// commit is replayed), which takes a flush of its own. `None` if they
    /// are more than [`DATA_LOG_LIMIT`].
    pub fn data_to_log(&self) -> Option<Vec<Bid>> {
        (self.written.len() <= DATA_LOG_LIMIT).then(|| self.written.iter().copied().collect())
    }

    /// A file data block is about to be written.
    #[inline]
    pub fn note_data_write(&mut self, bid: Bid) {
        if self.last_written == Some(bid) {
            return;
        }
        self.last_written = Some(bid);
        if self.written.len() <= DATA_LOG_LIMIT {
            self.written.insert(bid);
        }
        if !self.logged_data.is_empty() && self.logged_data.contains(&bid) {
            self.relog.insert(bid);
        }
    }

    /// Writes descriptors, sealed copies of every shadow and copies of the
    /// file data blocks `data` to the log.
    pub fn write_copies(&mut self, store: &mut dyn BlockStore, data: &[Bid]) -> Result<()> {
        // A block freed (its shadow dropped) and written again in the same
        // transaction was pushed twice: each block goes to the log once, so
        // the commit record's count is the number of copies written.
        let mut seen = BidSet::default();
        let shadows = &self.shadows;
        self.order
            .retain(|b| shadows.contains_key(b) && seen.insert(*b));
        debug_assert_eq!(self.order.len(), self.shadows.len());
        let homes: Vec<Bid> = self.order.iter().chain(data).copied().collect();
        let mut at = self.start + 1 + self.pos;
        let seq = self.next_seq;
        let mut crc = 0;
        for chunk in homes.chunks(DESC_CAP) {
            descriptor_encode(store.block_mut(at)?, seq, chunk);
            at += 1;
            for bid in chunk {
                let copy: Block = match self.shadows.get_mut(bid) {
                    Some(shadow) => {
                        seal_block(shadow);
                        **shadow
                    }
                    // File data: as it is at home, not sealed.
                    None => *store.block(*bid)?,
                };
                store.block_mut(at)?.copy_from_slice(&copy);
                crc = crc32c::crc32c_append(crc, &copy);
                at += 1;
            }
        }
        self.quarantine.in_log.extend(homes.iter().copied());
        for bid in data {
            self.relog.remove(bid);
            self.logged_data.insert(*bid);
        }
        self.copies = homes.len() as u32;
        self.copies_crc = crc;
        self.pos = at - (self.start + 1);
        Ok(())
    }

    /// Writes the commit record after the copies.
    pub fn write_commit(&mut self, store: &mut dyn BlockStore) -> Result<()> {
        let at = self.start + 1 + self.pos;
        commit_encode(
            store.block_mut(at)?,
            self.next_seq,
            self.copies,
            self.copies_crc,
        );
        self.pos += 1;
        Ok(())
    }

    /// After a durable commit record: the shadows go home, the next
    /// transaction begins. Returns the lowest block the commit made
    /// reusable.
    pub fn install(&mut self, store: &mut dyn BlockStore) -> Result<Option<Bid>> {
        for bid in std::mem::take(&mut self.order) {
            if let Some(s) = self.shadows.remove(&bid) {
                store.block_mut(bid)?.copy_from_slice(&s[..]);
                self.spare.push(s);
            }
        }
        self.next_seq += 1;
        self.began = None;
        self.installed = true;
        self.written.clear();
        self.last_written = None;
        Ok(self.quarantine.release_committed())
    }

    /// Whether a checkpoint has anything to make durable.
    pub fn is_empty(&self) -> bool {
        self.pos == 0 && !self.installed
    }

    /// Empties the log once the installed homes are durable: the header
    /// says replay starts past every transaction written.
    pub fn write_header(&mut self, store: &mut dyn BlockStore) -> Result<()> {
        header_encode(store.block_mut(self.start)?, self.next_seq);
        Ok(())
    }

    /// The header is durable: the log is empty. Returns the lowest block
    /// the checkpoint made reusable.
    pub fn emptied(&mut self) -> Option<Bid> {
        self.pos = 0;
        self.installed = false;
        self.logged_data.clear();
        self.relog.clear();
        self.quarantine.release_checkpointed()
    }
}

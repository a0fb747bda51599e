//! Transactions over metadata blocks: the only door through which the file
//! system changes a metadata block.
//!
//! Every first write of a metadata block in a transaction goes through
//! [`Journal::meta_mut`]. In mode `none` (this release, as published ULFS)
//! the write lands in place in the mapping and the block is remembered so its
//! CRC32C can be sealed at the next checkpoint (`sync`, `fsync`, unmount).
//! The journal mode adds shadow copies, commit records and replay behind the
//! same calls, without touching the file-system logic above.
//!
//! File data blocks bypass transactions (`data`, `data_mut`): like ext4's
//! `data=ordered`, only metadata is journaled.

use crate::errno::Result;
use crate::format::{Bid, Block, seal_block};
use crate::store::BlockStore;
use std::collections::HashSet;

pub struct Journal {
    store: Box<dyn BlockStore>,
    /// Metadata blocks written since the last checkpoint; their CRCs are
    /// stale until sealed.
    dirty: HashSet<Bid>,
    /// The last block added to `dirty`: the data path touches the same inode
    /// block call after call, and this spares it the hash.
    last_dirty: Option<Bid>,
}

impl Journal {
    pub fn new(store: Box<dyn BlockStore>) -> Journal {
        Journal {
            store,
            dirty: HashSet::new(),
            last_dirty: None,
        }
    }

    /// Gives the store back (after unmount).
    pub fn into_store(self) -> Box<dyn BlockStore> {
        self.store
    }

    pub fn store(&self) -> &dyn BlockStore {
        &*self.store
    }

    /// Reads a metadata block as the current transaction sees it.
    #[inline]
    pub fn meta(&self, bid: Bid) -> Result<&Block> {
        self.store.block(bid)
    }

    /// Writes a metadata block within the current transaction.
    #[inline]
    pub fn meta_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        let b = self.store.block_mut(bid)?;
        if self.last_dirty != Some(bid) {
            self.dirty.insert(bid);
            self.last_dirty = Some(bid);
        }
        Ok(b)
    }

    /// Reads a file data block.
    #[inline]
    pub fn data(&self, bid: Bid) -> Result<&Block> {
        self.store.block(bid)
    }

    /// Writes a file data block (not journaled: data=ordered semantics).
    #[inline]
    pub fn data_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        self.store.block_mut(bid)
    }

    /// Ends the current transaction. In mode `none` its writes are already
    /// in place, so there is nothing to install.
    #[inline]
    pub fn commit(&mut self) {}

    /// Forgets a freed metadata block: it will not be sealed, since its
    /// bytes now belong to whoever allocates it next.
    pub fn forget(&mut self, bid: Bid) {
        self.dirty.remove(&bid);
        if self.last_dirty == Some(bid) {
            self.last_dirty = None;
        }
    }

    /// Checkpoint: seals the CRC of every block written since the last one
    /// and flushes the mapping to stable storage.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.seal();
        self.store.flush()
    }

    /// Seals CRCs without flushing (unmount of a read-only store does neither).
    pub fn seal(&mut self) {
        for bid in self.dirty.drain() {
            if let Ok(b) = self.store.block_mut(bid) {
                seal_block(b);
            }
        }
        self.last_dirty = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BLOCK_SIZE, MAGIC_MAP, block_crc_ok, init_block};

    fn journal() -> (tempfile::TempDir, Journal) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, vec![0u8; 8 * BLOCK_SIZE]).unwrap();
        (
            dir,
            Journal::new(Box::new(crate::store::MmapStore::open(&p, false).unwrap())),
        )
    }

    #[test]
    fn checkpoint_seals_what_was_written() {
        let (_d, mut j) = journal();
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
        let (_d, mut j) = journal();
        init_block(j.meta_mut(5).unwrap(), MAGIC_MAP);
        j.forget(5);
        // The block now holds file data; sealing must not touch its bytes.
        j.data_mut(5).unwrap().fill(0xAB);
        j.checkpoint().unwrap();
        assert!(j.data(5).unwrap().iter().all(|&b| b == 0xAB));
    }
}

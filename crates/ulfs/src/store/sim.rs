//! `SimDisk`: a simulated disk for crash testing.
//!
//! It keeps two images: what is durable, and what has been written (the
//! "page cache"). `flush` makes the written image durable. Between flushes
//! it knows exactly which blocks were written, so a test can build any
//! state a power cut could leave: the durable image plus any subset of the
//! written blocks, each whole, lost, or torn at 512-byte sectors (see the
//! `BlockStore` contract). A flush hook lets a test look at the disk just
//! before each flush, the moment with the most writes in flight.

use super::BlockStore;
use crate::errno::{Errno, Result};
use crate::format::{BLOCK_SIZE, Bid, Block};
use std::collections::BTreeSet;

/// Sectors per block: the torn-write granularity.
pub const SECTORS: usize = BLOCK_SIZE / 512;

/// What a power cut did to one block written since the last flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The write never reached the medium.
    Lost,
    /// The whole block reached the medium.
    Written,
    /// Only the sectors whose bit is set in the mask reached the medium.
    Torn(u8),
}

type FlushHook = Box<dyn FnMut(&SimDisk) + Send + Sync>;

pub struct SimDisk {
    durable: Vec<u8>,
    written: Vec<u8>,
    unflushed: BTreeSet<Bid>,
    flushes: u64,
    read_only: bool,
    fail_flushes: bool,
    hook: Option<FlushHook>,
    /// Blocks read so far (tests of what a mount reads).
    reads: std::sync::atomic::AtomicU64,
}

impl SimDisk {
    /// A zeroed disk of `blocks` blocks.
    pub fn new(blocks: u64) -> SimDisk {
        SimDisk::from_image(vec![0; blocks as usize * BLOCK_SIZE])
    }

    /// A disk whose durable contents are `image` (whole blocks).
    pub fn from_image(mut image: Vec<u8>) -> SimDisk {
        image.truncate(image.len() / BLOCK_SIZE * BLOCK_SIZE);
        SimDisk {
            written: image.clone(),
            durable: image,
            unflushed: BTreeSet::new(),
            flushes: 0,
            read_only: false,
            fail_flushes: false,
            hook: None,
            reads: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The same disk, read-only.
    pub fn read_only(mut self) -> SimDisk {
        self.read_only = true;
        self
    }

    /// What survives a power cut that keeps nothing since the last flush.
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// What a process reading the disk sees now.
    pub fn current(&self) -> &[u8] {
        &self.written
    }

    /// Blocks written since the last flush.
    pub fn unflushed(&self) -> impl Iterator<Item = Bid> + '_ {
        self.unflushed.iter().copied()
    }

    pub fn blocks_read(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn flush_count(&self) -> u64 {
        self.flushes
    }

    /// The image a power cut would leave now, each unflushed block treated
    /// as `fate` says.
    pub fn crash_image(&self, mut fate: impl FnMut(Bid) -> Fate) -> Vec<u8> {
        let mut img = self.durable.clone();
        for &bid in &self.unflushed {
            let off = bid as usize * BLOCK_SIZE;
            let mask = match fate(bid) {
                Fate::Lost => 0,
                Fate::Written => 0xFF,
                Fate::Torn(m) => m,
            };
            for s in 0..SECTORS {
                if mask & (1 << s) != 0 {
                    let r = off + s * 512..off + (s + 1) * 512;
                    img[r.clone()].copy_from_slice(&self.written[r]);
                }
            }
        }
        img
    }

    /// From now on every flush fails with EIO (and makes nothing durable).
    pub fn fail_flushes(&mut self, fail: bool) {
        self.fail_flushes = fail;
    }

    /// Called with the disk just before each flush takes effect.
    pub fn on_flush(&mut self, hook: impl FnMut(&SimDisk) + Send + Sync + 'static) {
        self.hook = Some(Box::new(hook));
    }

    /// A flush of the written blocks in `blocks`: the hook sees the disk
    /// first, then they become durable (or EIO, nothing durable, when
    /// flushes fail).
    fn flush_blocks(&mut self, blocks: impl std::ops::RangeBounds<Bid>) -> Result<()> {
        if let Some(mut hook) = self.hook.take() {
            hook(self);
            self.hook = Some(hook);
        }
        if self.fail_flushes {
            return Err(Errno::EIO);
        }
        let done: Vec<Bid> = self.unflushed.range(blocks).copied().collect();
        for bid in done {
            let off = bid as usize * BLOCK_SIZE;
            self.durable[off..off + BLOCK_SIZE]
                .copy_from_slice(&self.written[off..off + BLOCK_SIZE]);
            self.unflushed.remove(&bid);
        }
        self.flushes += 1;
        Ok(())
    }

    fn range(&self, bid: Bid) -> Result<std::ops::Range<usize>> {
        let off = bid as usize * BLOCK_SIZE;
        if off + BLOCK_SIZE > self.written.len() {
            return Err(Errno::EUCLEAN);
        }
        Ok(off..off + BLOCK_SIZE)
    }
}

impl BlockStore for SimDisk {
    fn blocks(&self) -> u64 {
        (self.written.len() / BLOCK_SIZE) as u64
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn block(&self, bid: Bid) -> Result<&Block> {
        let r = self.range(bid)?;
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(self.written[r].try_into().expect("block-sized slice"))
    }

    fn block_mut(&mut self, bid: Bid) -> Result<&mut Block> {
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let r = self.range(bid)?;
        self.unflushed.insert(bid);
        Ok((&mut self.written[r])
            .try_into()
            .expect("block-sized slice"))
    }

    fn flush(&mut self) -> Result<()> {
        self.flush_blocks(..)
    }

    /// Only the range becomes durable; every other block written stays in
    /// flight, for the crash states to lose, keep or tear.
    fn flush_range(&mut self, first: Bid, count: u32) -> Result<()> {
        self.flush_blocks(first..first.saturating_add(count))
    }

    fn as_sim(&self) -> Option<&SimDisk> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_images_mix_durable_and_written() {
        let mut d = SimDisk::new(4);
        d.block_mut(1).unwrap().fill(1);
        d.flush().unwrap();
        d.block_mut(1).unwrap().fill(2);
        d.block_mut(2).unwrap().fill(3);
        assert_eq!(d.unflushed().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(d.durable()[BLOCK_SIZE], 1);
        let lost = d.crash_image(|_| Fate::Lost);
        assert!(lost[BLOCK_SIZE..2 * BLOCK_SIZE].iter().all(|&b| b == 1));
        let torn = d.crash_image(|b| {
            if b == 1 {
                Fate::Torn(0b0000_0001)
            } else {
                Fate::Written
            }
        });
        assert!(torn[BLOCK_SIZE..BLOCK_SIZE + 512].iter().all(|&b| b == 2));
        assert!(
            torn[BLOCK_SIZE + 512..2 * BLOCK_SIZE]
                .iter()
                .all(|&b| b == 1)
        );
        assert!(torn[2 * BLOCK_SIZE..3 * BLOCK_SIZE].iter().all(|&b| b == 3));
        d.fail_flushes(true);
        assert_eq!(d.flush(), Err(Errno::EIO));
        assert_eq!(d.durable()[2 * BLOCK_SIZE], 0);
    }
}

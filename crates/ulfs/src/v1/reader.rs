//! Reading an original ULFS ("v1") image, as ../shared/FORMAT-ULFS-V1.md
//! (and docs/FORMAT-V1.md) describe it: the superblock, the list of inode
//! blocks, inodes, directory entries and file blocks.
//!
//! The v1 format has no checksums, so every number read is checked before
//! it is used: a block id inside the image and not a pointer to the
//! superblock, an inode slot inside its block, a known inode type, a name
//! that ends within its field, a size the image could hold. Every chain is
//! walked with a record of where it has been, so a loop in the inode block
//! list or in a file's chain of block-id blocks is an error, never a hang;
//! a loop in the directory tree is the translation's to catch
//! (`translate.rs`). Errors name the block or inode at fault.
//!
//! The image is read through a store (opened read-only under a shared
//! lock when given a path) and never written.

use crate::errno::Errno;
use crate::error::Error;
use crate::store::{BlockStore, MmapStore};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The superblock's magic number.
pub const MAGIC: u32 = 0x1108_9160;
const BS: usize = 4096;
/// Inodes in one inode block, after its 16-byte header.
const INODES_PER_BLOCK: usize = 170;
const INODE_SIZE: usize = 24;
const INODE_BLOCK_HEADER: usize = 16;
const FIRST_INODE_BLOCK: u32 = 2;
/// Directory entries in one block (the last 28 bytes are unused).
const DIRENTS_PER_BLOCK: usize = 113;
const DIRENT_SIZE: usize = 36;
const NAME_FIELD: usize = 26;
/// Block ids in a bid block, after its `next` pointer.
const BIDS_PER_BID_BLOCK: u64 = 1023;
const TYPE_FREE: u32 = 0;
const TYPE_DIR: u32 = 4;
const TYPE_FILE: u32 = 8;

/// Whether a block 0 starts with the v1 superblock's magic.
pub fn has_v1_magic(block0: &[u8]) -> bool {
    block0.len() >= 4 && le32(block0, 0) == MAGIC
}

/// Whether the file at `path` starts with the v1 superblock's magic.
/// Asked before every mount: it reads the first page and no more (a
/// plain read would have the kernel read ahead, and under a memory budget
/// those pages count against the image).
pub fn is_v1_image(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    // SAFETY: advice on a descriptor we own; it touches no memory.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut magic = [0u8; 4];
    file.read_exact_at(&mut magic, 0)
        .is_ok_and(|()| u32::from_le_bytes(magic) == MAGIC)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// A v1 inode, checked: its kind, size and first two pointers.
#[derive(Clone, Copy, Debug)]
pub struct Inode {
    /// `ino_start` of its block plus its slot.
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    first_data: u32,
    first_bid_block: u32,
}

/// A directory entry: a name and the inode it names.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: Vec<u8>,
    pub inode: Inode,
}

/// Facts about a v1 image for `ulfs info`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Blocks the superblock says the image has.
    pub max_blocks: u64,
    /// Blocks the allocation maps mark in use (within the image).
    pub used_blocks: u64,
    /// Inode slots in use.
    pub used_inodes: u64,
    /// Blocks in the list of inode blocks.
    pub inode_blocks: u64,
}

pub struct V1Image {
    store: Box<dyn BlockStore>,
    /// Blocks that may be read: the superblock's count, which the file
    /// must hold whole.
    blocks: u32,
    /// Every inode block in the list, with its first inode number.
    inode_blocks: HashMap<u32, u64>,
    shown: String,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl V1Image {
    /// Opens the image at `path` read-only and checks it (`from_store`).
    pub fn open(path: &Path) -> Result<V1Image, Error> {
        let shown = path.display().to_string();
        let store = MmapStore::open(path, true).map_err(|e| Error::io(&shown, e))?;
        V1Image::from_store(Box::new(store), &shown)
    }

    /// Checks the superblock and the inode block list of the image in
    /// `store` (`shown` names it in messages); only reads it.
    pub fn from_store(store: Box<dyn BlockStore>, shown: &str) -> Result<V1Image, Error> {
        let shown = shown.to_string();
        let damaged = |what: String| Error::new(Errno::EUCLEAN, format!("{shown}: {what}"));
        let file_blocks = store.blocks();
        let sb = match store.block(0) {
            Ok(b) if has_v1_magic(b) => b,
            _ => return Err(damaged("not an original ULFS (v1) image".into())),
        };
        if file_blocks < 4 {
            return Err(damaged(format!(
                "an original ULFS (v1) image cut to {file_blocks} blocks: truncated"
            )));
        }
        let max_blocks = le32(sb, 4);
        if (max_blocks as u64) > file_blocks {
            return Err(damaged(format!(
                "the superblock says {max_blocks} blocks, the file holds {file_blocks}: truncated"
            )));
        }
        if max_blocks < 4 {
            return Err(damaged(format!("the superblock says {max_blocks} blocks")));
        }
        let mut image = V1Image {
            store,
            blocks: max_blocks,
            inode_blocks: HashMap::new(),
            shown,
        };
        image.inode_blocks = image.walk_inode_blocks()?;
        Ok(image)
    }

    fn damaged(&self, what: impl std::fmt::Display) -> Error {
        Error::new(
            Errno::EUCLEAN,
            format!("{}: damaged v1 image: {what}", self.shown),
        )
    }

    /// Block `bid`, which must lie inside the image and not be the
    /// superblock (0 is "none" in every pointer).
    fn block(&self, bid: u32, what: impl Fn() -> String) -> Result<&[u8], Error> {
        if bid == 0 || bid >= self.blocks {
            return Err(self.damaged(format!(
                "{} points to block {bid}, outside 1..{}",
                what(),
                self.blocks
            )));
        }
        self.store
            .block(bid)
            .map(|b| &b[..])
            .map_err(|e| self.damaged(format!("{} points to block {bid}: {e}", what())))
    }

    /// The inode block list from block 2, each with its first inode number.
    fn walk_inode_blocks(&self) -> Result<HashMap<u32, u64>, Error> {
        let mut seen = HashMap::new();
        let mut bid = FIRST_INODE_BLOCK;
        while bid != 0 {
            let b = self.block(bid, || "the inode block list".into())?;
            if seen.insert(bid, le32(b, 8) as u64).is_some() {
                return Err(self.damaged(format!("the inode block list loops at block {bid}")));
            }
            bid = le32(b, 0);
        }
        Ok(seen)
    }

    /// The root directory: slot 0 of the first inode block.
    pub fn root(&self) -> Result<Inode, Error> {
        let root = self.inode(FIRST_INODE_BLOCK, 0, || "the root".into())?;
        if root.kind != Kind::Dir {
            return Err(self.damaged("the root is not a directory"));
        }
        Ok(root)
    }

    /// The inode in slot `slot` of inode block `bid`, checked.
    fn inode(&self, bid: u32, slot: u16, what: impl Fn() -> String) -> Result<Inode, Error> {
        let Some(&ino_start) = self.inode_blocks.get(&bid) else {
            return Err(self.damaged(format!(
                "{} names inode block {bid}, which is not in the inode block list",
                what()
            )));
        };
        if slot as usize >= INODES_PER_BLOCK {
            return Err(self.damaged(format!(
                "{} names slot {slot} of an inode block (at most {})",
                what(),
                INODES_PER_BLOCK - 1
            )));
        }
        let b = self.block(bid, &what)?;
        let at = INODE_BLOCK_HEADER + slot as usize * INODE_SIZE;
        let raw = &b[at..at + INODE_SIZE];
        let ino = ino_start + slot as u64;
        let kind = match le32(raw, 0) {
            TYPE_DIR => Kind::Dir,
            TYPE_FILE => Kind::File,
            TYPE_FREE => {
                return Err(self.damaged(format!("{} names inode {ino}, which is free", what())));
            }
            t => {
                return Err(self.damaged(format!("inode {ino} has an unknown type {t}")));
            }
        };
        let size = le64(raw, 8);
        if size.div_ceil(BS as u64) > self.blocks as u64 {
            return Err(self.damaged(format!(
                "inode {ino} claims {size} bytes, more than the image holds"
            )));
        }
        Ok(Inode {
            ino,
            kind,
            size,
            first_data: le32(raw, 16),
            first_bid_block: le32(raw, 20),
        })
    }

    /// Calls `f` with each block of `inode`'s contents in order (None for
    /// a hole, which reads as zeros), `size` rounded up to whole blocks.
    pub fn for_each_block(
        &self,
        inode: &Inode,
        mut f: impl FnMut(Option<&[u8]>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let blocks = inode.size.div_ceil(BS as u64);
        let what = |k: u64| move || format!("block {k} of inode {}", inode.ino);
        if blocks == 0 {
            return Ok(());
        }
        f(self.data(inode.first_data, what(0))?)?;
        let mut chain = inode.first_bid_block;
        let mut visited = HashSet::new();
        let mut k = 1;
        while k < blocks {
            if chain == 0 {
                // The chain ends early: the rest is a hole.
                for _ in k..blocks {
                    f(None)?;
                }
                return Ok(());
            }
            if !visited.insert(chain) {
                return Err(self.damaged(format!(
                    "the block chain of inode {} loops at block {chain}",
                    inode.ino
                )));
            }
            let ids = self.block(chain, || format!("the block chain of inode {}", inode.ino))?;
            for i in 0..BIDS_PER_BID_BLOCK.min(blocks - k) {
                let bid = le32(ids, 4 + 4 * i as usize);
                f(self.data(bid, what(k + i))?)?;
            }
            k += BIDS_PER_BID_BLOCK;
            chain = le32(ids, 0);
        }
        Ok(())
    }

    fn data(&self, bid: u32, what: impl Fn() -> String) -> Result<Option<&[u8]>, Error> {
        if bid == 0 {
            return Ok(None);
        }
        self.block(bid, what).map(Some)
    }

    /// The entries of directory `dir` but `.` and `..`, in slot order.
    pub fn entries(&self, dir: &Inode) -> Result<Vec<Entry>, Error> {
        let mut out = Vec::new();
        let slots = dir.size / BS as u64 * DIRENTS_PER_BLOCK as u64
            + (dir.size % BS as u64).div_ceil(DIRENT_SIZE as u64);
        let mut slot = 0u64;
        self.for_each_block(dir, |block| {
            for i in 0..DIRENTS_PER_BLOCK {
                if slot >= slots {
                    break;
                }
                slot += 1;
                let Some(block) = block else { continue };
                let raw = &block[i * DIRENT_SIZE..(i + 1) * DIRENT_SIZE];
                let Some(len) = raw[..NAME_FIELD].iter().position(|&c| c == 0) else {
                    return Err(self.damaged(format!(
                        "a name in directory inode {} does not end in its 26 bytes",
                        dir.ino
                    )));
                };
                let name = &raw[..len];
                if name.is_empty() || name == b"." || name == b".." {
                    continue;
                }
                if name.contains(&b'/') {
                    return Err(self.damaged(format!(
                        "directory inode {} holds a name with '/': {:?}",
                        dir.ino,
                        String::from_utf8_lossy(name)
                    )));
                }
                let (bid, idx) = (le32(raw, 28), u16::from_le_bytes([raw[32], raw[33]]));
                let inode = self.inode(bid, idx, || {
                    format!(
                        "entry {:?} of directory inode {}",
                        String::from_utf8_lossy(name),
                        dir.ino
                    )
                })?;
                out.push(Entry {
                    name: name.to_vec(),
                    inode,
                });
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// What the allocation maps and the inode blocks record.
    pub fn facts(&self) -> Facts {
        let mut used_blocks = 0u64;
        let span = (BS as u64 - 4) * 8;
        let mut map_bid = 1u64;
        while map_bid < self.blocks as u64 {
            let Ok(b) = self.store.block(map_bid as u32) else {
                break;
            };
            if le32(b, 0) != u32::MAX {
                // The map block itself counts as used.
                used_blocks += 1;
                for i in 0..span {
                    let bid = map_bid + 1 + i;
                    if bid >= self.blocks as u64 {
                        break;
                    }
                    if b[4 + (i / 8) as usize] & (0x80 >> (i % 8)) != 0 {
                        used_blocks += 1;
                    }
                }
            }
            map_bid += span + 1;
        }
        let mut used_inodes = 0u64;
        for &bid in self.inode_blocks.keys() {
            let Ok(b) = self.store.block(bid) else {
                continue;
            };
            for slot in 0..INODES_PER_BLOCK {
                let o = INODE_BLOCK_HEADER + slot * INODE_SIZE;
                if le32(b, o) != TYPE_FREE {
                    used_inodes += 1;
                }
            }
        }
        Facts {
            // The superblock counts as used too.
            max_blocks: self.blocks as u64,
            used_blocks: used_blocks + 1,
            used_inodes,
            inode_blocks: self.inode_blocks.len() as u64,
        }
    }

    /// The image's size in bytes, as its superblock says.
    pub fn bytes(&self) -> u64 {
        self.blocks as u64 * BS as u64
    }
}

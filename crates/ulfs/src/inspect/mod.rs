//! `inspect`: a read-only look inside an image, the library behind
//! `ulfs debug IMAGE` (a small debugfs). An [`Inspector`] is opened once
//! and answers, each as a report that is both structured data and, through
//! `Display`, text for people:
//!
//! - [`Inspector::superblock`]: both copies, field by field, and which one
//!   mount takes and why (`superblock.rs`);
//! - [`Inspector::block`]: what a block is by position and by magic, its
//!   header and checksum, a decoded view, a hex dump (`block.rs`);
//! - [`Inspector::inode`]: every field of an inode and where it lives
//!   (`inode.rs`); [`Inspector::resolve`] finds one by path;
//! - [`Inspector::dir_tree`]: a directory's B+tree (`dirtree.rs`);
//! - [`Inspector::block_map`]: a file's logical to physical runs, holes and
//!   indirect blocks (`bmap.rs`);
//! - [`Inspector::journal`]: the journal header, every record in the log
//!   and what replay would install (`journal.rs`);
//! - [`Inspector::owner`]: who owns a block, by a walk of every inode
//!   (`owner.rs`).
//!
//! The image is never written. The store must be read-only (a writable one
//! is refused, so no code path here can write, whatever it calls), it is
//! mounted read-only without checksum verification, as fsck mounts it, so
//! that damaged blocks can still be shown, and a journal with committed
//! transactions is replayed in memory only: the reports show what the file
//! system reads, and say where that differs from the bytes on disk. When
//! the image cannot be mounted at all (both superblocks damaged, a damaged
//! journal header, an unreadable group map after a crash), the raw blocks
//! remain: every report but path resolution still works from the
//! superblock copy mount would have picked, if one decodes, and says that
//! the journal was not replayed.
//!
//! The walks here are this module's own (`walk.rs`), not fsck's: they must
//! name logical block numbers, tree levels and roles, which fsck's claim
//! sets do not keep, and they must work when no volume could be mounted.
//! They apply the same pointer rules (`bid_fault`: FORMAT.md 2 and 8).
//! Every number read from the image is checked before it is used as an
//! index, a length or a pointer, and every walk is bounded (visited sets,
//! depth limits, `total_blocks`), so a damaged image gives a report or an
//! error, never a panic or a hang.

mod block;
mod bmap;
mod dirtree;
mod inode;
mod journal;
mod owner;
mod superblock;
mod text;
mod walk;

pub use block::{BlockDecoded, BlockReport};
pub use bmap::{BlockMap, Extent, IndirectBlock};
pub use dirtree::{DirEntry, DirNode, DirNodeKind, DirTree};
pub use inode::InodeReport;
pub use journal::{JournalHeader, JournalReport, Record, RecordKind, ReplayPlan, Transaction};
pub use owner::{Owner, OwnerReport, Role};
pub use superblock::{SbField, SbVerdict, SuperblockCopy, SuperblockReport};

use crate::errno::Errno;
use crate::error::Error;
use crate::format::superblock::{MODE_JOURNAL, Superblock};
use crate::format::*;
use crate::fs::{Info, MountOptions, Volume};
use crate::store::{BlockStore, MemoryBudget, MmapStore};
use crate::types::Ino;
use std::fmt;
use std::path::Path;

/// How many items of a long list the text of a report shows when the
/// caller does not say (entries per leaf, runs of a block map, homes of a
/// transaction, ...). `None` in place of a limit shows them all.
pub const DEFAULT_LIMIT: usize = 16;

/// An image opened for inspection. Open it once, then ask it anything:
/// every method only reads.
pub struct Inspector {
    shown: String,
    backing: Backing,
    /// The geometry every report works from: the mounted superblock (after
    /// replay), or, when mounting failed, the copy mount would have taken,
    /// if one decodes.
    sb: Option<Superblock>,
}

enum Backing {
    /// Mounted read-only: reads see the journal replayed in memory.
    Mounted(Box<Volume>),
    /// Not mountable: the raw blocks, and why the mount failed.
    Raw {
        store: Box<dyn BlockStore>,
        why: Error,
    },
}

/// Where a block lies in the image's layout (FORMAT.md 2), whatever it
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    PrimarySuperblock,
    SecondarySuperblock,
    JournalHeader,
    /// A block of the journal region after its header.
    JournalLog,
    /// Before the data area but in no journal region (mkfs leaves none).
    Reserved,
    MapBlock {
        group: u32,
    },
    /// A block of the data area that group `group`'s bitmap covers.
    Data {
        group: u32,
        bit: u32,
    },
    /// In the image file but past the file system's `total_blocks`.
    PastEnd,
    /// No superblock copy can be read to say.
    Unknown,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::PrimarySuperblock => f.write_str("primary superblock"),
            Place::SecondarySuperblock => f.write_str("secondary superblock"),
            Place::JournalHeader => f.write_str("journal region, header"),
            Place::JournalLog => f.write_str("journal region, log"),
            Place::Reserved => f.write_str("reserved, before the data area"),
            Place::MapBlock { group } => write!(f, "map block of group {group}"),
            Place::Data { group, bit } => write!(f, "data area, group {group}, bitmap bit {bit}"),
            Place::PastEnd => f.write_str("past the end of the file system (ignored)"),
            Place::Unknown => f.write_str("unknown (no superblock copy can be read)"),
        }
    }
}

fn damaged(msg: String) -> Error {
    Error::new(Errno::EUCLEAN, msg)
}

fn invalid(msg: String) -> Error {
    Error::new(Errno::EINVAL, msg)
}

/// Whether block 0 holds the magic of an original ULFS (v1) image.
fn is_v1(b: Option<&Block>) -> bool {
    b.is_some_and(|b| get_u32(b, 0) == 0x1108_9160)
}

impl Inspector {
    /// Opens the image at `image` for inspection (read-only, shared lock:
    /// a read-write mount elsewhere makes this EBUSY).
    pub fn open(image: impl AsRef<Path>) -> Result<Inspector, Error> {
        let path = image.as_ref();
        let shown = path.display().to_string();
        Inspector::open_store_with(&shown, &|| {
            MmapStore::open(path, true)
                .map(|s| Box::new(s) as Box<dyn BlockStore>)
                .map_err(|e| crate::fs::store_error(&shown, e))
        })
    }

    /// Opens the image that `make` gives a read-only store of (`shown`
    /// names it in messages). `make` is called again when the image cannot
    /// be mounted, for a store of its raw blocks: a failed mount consumes
    /// the store it was given. A store that is not read-only is refused.
    pub fn open_store_with(
        shown: &str,
        make: &dyn Fn() -> Result<Box<dyn BlockStore>, Error>,
    ) -> Result<Inspector, Error> {
        let store = make()?;
        if !store.is_read_only() {
            return Err(invalid(format!(
                "{shown}: inspect reads only through a read-only store"
            )));
        }
        if is_v1(store.block(0).ok()) {
            let why = Error::new(
                Errno::EOPNOTSUPP,
                format!(
                    "{shown}: an original ULFS (v1) image; inspect reads format 2 images \
                     (`ulfs convert` translates it): only its raw blocks can be shown"
                ),
            );
            return Ok(Inspector {
                shown: shown.to_string(),
                backing: Backing::Raw { store, why },
                sb: None,
            });
        }
        let opts = MountOptions {
            read_only: true,
            // As fsck: damaged blocks are shown, not refused.
            verify_checksums: false,
            // Reads here are few and scattered: a budget would only cost
            // the cgroup lookup at the first read of file data.
            memory_budget: MemoryBudget::Unlimited,
            ..Default::default()
        };
        match Volume::mount_store(store, opts, shown) {
            Ok(vol) => {
                let sb = vol.sb.clone();
                Ok(Inspector {
                    shown: shown.to_string(),
                    backing: Backing::Mounted(Box::new(vol)),
                    sb: Some(sb),
                })
            }
            Err(why) => {
                let store = make()?;
                let sb = superblock::pick(&*store).ok();
                Ok(Inspector {
                    shown: shown.to_string(),
                    backing: Backing::Raw { store, why },
                    sb,
                })
            }
        }
    }

    /// The name the image is shown by in messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Why the image could not be mounted (then reports work from its raw
    /// blocks, unreplayed, and paths cannot be resolved), or None.
    pub fn mount_error(&self) -> Option<&Error> {
        match &self.backing {
            Backing::Mounted(_) => None,
            Backing::Raw { why, .. } => Some(why),
        }
    }

    /// What `ulfs info` shows, when the image is mounted.
    pub fn info(&self) -> Option<Info> {
        match &self.backing {
            Backing::Mounted(v) => Some(v.info()),
            Backing::Raw { .. } => None,
        }
    }

    fn volume(&self) -> Result<&Volume, Error> {
        match &self.backing {
            Backing::Mounted(v) => Ok(v),
            Backing::Raw { why, .. } => Err(Error::new(
                why.errno,
                format!("the file system cannot be mounted ({why})"),
            )),
        }
    }

    /// The image as it is on disk.
    fn store(&self) -> &dyn BlockStore {
        match &self.backing {
            Backing::Mounted(v) => v.j.store(),
            Backing::Raw { store, .. } => &**store,
        }
    }

    /// The superblock every report works from, or why there is none.
    fn geometry(&self) -> Result<&Superblock, Error> {
        self.sb.as_ref().ok_or_else(|| {
            let why = self
                .mount_error()
                .map_or(String::new(), |e| format!(": {e}"));
            damaged(format!("no superblock copy can be read{why}"))
        })
    }

    /// Whether the image has a journal (mode `journal`).
    fn journaled(&self) -> bool {
        self.sb
            .as_ref()
            .is_some_and(|sb| sb.mode == MODE_JOURNAL && sb.journal_blocks > 0)
    }

    fn read_error(&self, bid: Bid, e: Errno) -> Error {
        if e == Errno::EUCLEAN {
            invalid(format!(
                "block {bid} is past the end of the image ({} blocks)",
                self.store().blocks()
            ))
        } else {
            Error::new(e, format!("block {bid}: unreadable ({e})"))
        }
    }

    /// Block `bid` as the file system reads it: with the journal's
    /// committed copies replayed (in memory), when it was mounted.
    fn read(&self, bid: Bid) -> Result<&Block, Error> {
        let r = match &self.backing {
            Backing::Mounted(v) => v.j.peek(bid),
            Backing::Raw { store, .. } => store.block(bid),
        };
        r.map_err(|e| self.read_error(bid, e))
    }

    /// Block `bid` as it is on disk.
    fn read_disk(&self, bid: Bid) -> Result<&Block, Error> {
        self.store().block(bid).map_err(|e| self.read_error(bid, e))
    }

    /// Whether replay (in memory) gives block `bid` other bytes than the
    /// disk holds.
    fn replay_differs(&self, bid: Bid) -> bool {
        match (self.read(bid), self.read_disk(bid)) {
            (Ok(a), Ok(b)) => a[..] != b[..],
            _ => false,
        }
    }

    /// Why `bid` cannot be a pointer to an allocatable block (outside the
    /// data area, or a map block), as `Volume::bid_fault` says it.
    fn bid_fault(&self, bid: Bid) -> Option<&'static str> {
        let Some(sb) = &self.sb else {
            return Some("in an image without a readable superblock");
        };
        if bid < sb.first_group || bid as u64 >= sb.total_blocks {
            Some("outside the data area")
        } else if (bid - sb.first_group).is_multiple_of(GROUP_SPAN) {
            Some("at a map block")
        } else {
            None
        }
    }

    /// Where block `bid` lies in the layout.
    pub fn place(&self, bid: Bid) -> Place {
        match bid {
            0 => return Place::PrimarySuperblock,
            1 => return Place::SecondarySuperblock,
            _ => {}
        }
        let Some(sb) = &self.sb else {
            return Place::Unknown;
        };
        if bid as u64 >= sb.total_blocks {
            return Place::PastEnd;
        }
        if bid < sb.first_group {
            let jend = sb.journal_start as u64 + sb.journal_blocks as u64;
            return if sb.journal_blocks == 0 || (bid as u64) >= jend || bid < sb.journal_start {
                Place::Reserved
            } else if bid == sb.journal_start {
                Place::JournalHeader
            } else {
                Place::JournalLog
            };
        }
        let rel = bid - sb.first_group;
        let group = rel / GROUP_SPAN;
        match rel % GROUP_SPAN {
            0 => Place::MapBlock { group },
            bit => Place::Data {
                group,
                bit: bit - 1,
            },
        }
    }

    /// Whether the bitmap marks data-area block `bid` in use: None when
    /// the block is not in the data area or its group's map block is not
    /// one.
    fn bitmap_bit(&self, bid: Bid) -> Option<bool> {
        let Place::Data { group, bit } = self.place(bid) else {
            return None;
        };
        let map = self.sb.as_ref()?.map_bid(group);
        let b = self.read(map).ok()?;
        if magic(b) != MAGIC_MAP {
            return None;
        }
        Some(b[MAP_BITMAP + (bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }

    /// A block id given by a caller, checked against the image.
    fn check_arg_bid(&self, bid: u64) -> Result<Bid, Error> {
        let blocks = self.store().blocks();
        if bid >= blocks || bid > u32::MAX as u64 {
            return Err(invalid(format!(
                "block {bid} is past the end of the image ({blocks} blocks)"
            )));
        }
        Ok(bid as Bid)
    }

    /// The inode a path names, resolved with the file system's own lookup
    /// from the root (a relative path too). Symlinks are followed in the
    /// middle of the path, not at its end, so a symlink's own inode can
    /// be inspected. Needs a mounted image.
    pub fn resolve(&self, path: impl AsRef<[u8]>) -> Result<Ino, Error> {
        let vol = self.volume()?;
        let path = path.as_ref();
        let shown = text::quoted(path);
        let fail =
            |what: &[u8], e: Errno| Error::new(e, format!("{shown}: {}: {e}", text::quoted(what)));
        let mut todo: Vec<Vec<u8>> = components(path);
        let mut ino = vol.root();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            match &name[..] {
                b"." => continue,
                b".." => {
                    ino = vol.parent_of(ino).map_err(|e| fail(&name, e))?;
                    continue;
                }
                _ => {}
            }
            let next = vol.lookup(ino, &name).map_err(|e| fail(&name, e))?;
            let is_link = vol
                .stat_ino(next)
                .is_ok_and(|st| st.mode & libc::S_IFMT == libc::S_IFLNK);
            if is_link && !todo.is_empty() {
                links += 1;
                if links > 40 {
                    return Err(fail(&name, Errno::ELOOP));
                }
                let target = vol.readlink_ino(next).map_err(|e| fail(&name, e))?;
                if target.first() == Some(&b'/') {
                    ino = vol.root();
                }
                todo.extend(components(&target));
                continue;
            }
            ino = next;
        }
        Ok(ino)
    }

    /// What a command-line argument names: an absolute path (`/a/b`), or
    /// an inode number (`51`).
    pub fn target(&self, spec: &str) -> Result<Ino, Error> {
        if spec.starts_with('/') {
            return self.resolve(spec);
        }
        spec.parse::<u64>().map_err(|_| {
            invalid(format!(
                "{spec:?}: expected an inode number or an absolute path"
            ))
        })
    }
}

/// A path's components, last first (a stack to pop).
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&c| c == b'/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

//! Who owns a block. Its position says it for the superblocks, the
//! journal region and the map blocks; in the data area nothing in a block
//! says whose it is (file data has no header, and a block's kind is known
//! from what points to it, FORMAT.md 1), so every inode is walked: the
//! inode blocks (the list of all of them, and when it breaks a scan for
//! the ones it lost), then each live slot's index tree or block map. The
//! bitmap is read too, so that the two disagreeing (referenced but free,
//! used but unreferenced) shows. Every owner found is listed: a block named
//! twice is damage, and both names matter.
//!
//! The cost is fsck's, O(image metadata), for each question; a debugger
//! asks one at a time.

use super::journal::LogBlock;
use super::text::{magic_kind, type_name};
use super::walk::{DirStep, MapStep, used_slots};
use super::{Inspector, Place};
use crate::error::Error;
use crate::format::dirnode::inner_level;
use crate::format::*;
use crate::types::Ino;
use std::fmt;

/// What a block is to its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Superblock {
        primary: bool,
    },
    JournalHeader,
    JournalDescriptor {
        seq: u64,
    },
    /// A copy in the log of home block `home`.
    JournalCopy {
        seq: u64,
        home: Bid,
    },
    JournalCommit {
        seq: u64,
    },
    /// A log block holding no record the scan recognises.
    JournalUnused,
    /// Before the data area, outside the journal.
    Reserved,
    MapBlock {
        group: u32,
    },
    /// An inode block: slots 1..=15, inodes `first..=last`, the used ones
    /// in `used`. `on_list`: on the list of all inode blocks (else found
    /// by scanning where the list breaks).
    InodeBlock {
        first: Ino,
        last: Ino,
        used: Vec<Ino>,
        on_list: bool,
    },
    /// Logical block `lblk` of inode `ino`.
    Data {
        ino: Ino,
        lblk: u64,
    },
    /// An indirect block of inode `ino`, `level` levels above the data,
    /// covering logical blocks `first .. first + span`.
    Indirect {
        ino: Ino,
        level: u32,
        first: u64,
        span: u64,
    },
    /// A node of directory `ino`'s index, `depth` below its root.
    DirLeaf {
        ino: Ino,
        depth: u32,
    },
    DirInner {
        ino: Ino,
        level: u16,
        depth: u32,
    },
}

/// One owner of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub role: Role,
    /// What names the block ("map[3] of the inode", "ptr[7] of indirect
    /// block 120", "entry 2 of inner node 99", ...), when something does.
    pub held_by: String,
    /// The owning inode's mode and link count, for inode roles.
    pub inode: Option<(u32, u32)>,
    /// The owning inode fails validation (reads refuse it).
    pub invalid_inode: bool,
}

/// Who owns a block.
#[derive(Debug, Clone)]
pub struct OwnerReport {
    pub bid: Bid,
    pub place: Place,
    /// In the data area: whether its group's bitmap marks it used (None:
    /// not in the data area, or the map block is not one).
    pub bitmap: Option<bool>,
    pub owners: Vec<Owner>,
    /// Live inode slots walked (0 when the position alone answered).
    pub inodes_walked: u64,
    /// When nothing owns it: what its bytes look like.
    pub looks_like: Option<String>,
    pub notes: Vec<String>,
}

impl Inspector {
    /// Who owns block `bid`, found by position or by a walk of every
    /// inode.
    pub fn owner(&self, bid: u64) -> Result<OwnerReport, Error> {
        let bid = self.check_arg_bid(bid)?;
        let place = self.place(bid);
        let mut r = OwnerReport {
            bid,
            place,
            bitmap: self.bitmap_bit(bid),
            owners: Vec::new(),
            inodes_walked: 0,
            looks_like: None,
            notes: Vec::new(),
        };
        let by_place = |role| Owner {
            role,
            held_by: String::new(),
            inode: None,
            invalid_inode: false,
        };
        match place {
            Place::PrimarySuperblock | Place::SecondarySuperblock => {
                r.owners.push(by_place(Role::Superblock {
                    primary: place == Place::PrimarySuperblock,
                }));
            }
            Place::JournalHeader => r.owners.push(by_place(Role::JournalHeader)),
            Place::JournalLog => {
                let sb = self.geometry()?;
                let (_, what) = self.scan_log(sb.journal_start, sb.journal_blocks);
                let idx = (bid - sb.journal_start - 1) as usize;
                let role = match what.get(idx) {
                    Some(LogBlock::Descriptor { seq }) => Role::JournalDescriptor { seq: *seq },
                    Some(LogBlock::Commit { seq }) => Role::JournalCommit { seq: *seq },
                    Some(LogBlock::Copy {
                        desc,
                        index,
                        home,
                        seq,
                    }) => {
                        r.owners.push(Owner {
                            role: Role::JournalCopy {
                                seq: *seq,
                                home: *home,
                            },
                            held_by: format!("entry {index} of the descriptor at {desc}"),
                            inode: None,
                            invalid_inode: false,
                        });
                        return Ok(r);
                    }
                    _ => Role::JournalUnused,
                };
                r.owners.push(by_place(role));
            }
            Place::Reserved => r.owners.push(by_place(Role::Reserved)),
            Place::MapBlock { group } => r.owners.push(by_place(Role::MapBlock { group })),
            Place::PastEnd => r
                .notes
                .push("past the file system's end: no structure can name it".into()),
            Place::Unknown => {
                r.notes
                    .push("no superblock can be read: nothing says what the block is".into());
            }
            Place::Data { .. } => self.walk_owners(bid, &mut r),
        }
        Ok(r)
    }

    /// Walks every inode for the names of `target`.
    fn walk_owners(&self, target: Bid, r: &mut OwnerReport) {
        let blocks = self.inode_blocks();
        if let Some(why) = &blocks.broken {
            r.notes.push(format!(
                "{why}; {} inode blocks found by scanning the data area",
                blocks.scanned.len()
            ));
        }
        let all = blocks
            .list
            .iter()
            .map(|&b| (b, true))
            .chain(blocks.scanned.iter().map(|&b| (b, false)));
        for (ib, on_list) in all {
            let Ok(b) = self.read(ib) else { continue };
            let slots = used_slots(b);
            if ib == target {
                r.owners.push(Owner {
                    role: Role::InodeBlock {
                        first: ino_of(ib, 1),
                        last: ino_of(ib, INODES_PER_BLOCK - 1),
                        used: slots.iter().map(|s| ino_of(ib, s.0 as u64)).collect(),
                        on_list,
                    },
                    held_by: if on_list {
                        "the list of all inode blocks".into()
                    } else {
                        "nothing (found by scanning)".into()
                    },
                    inode: None,
                    invalid_inode: false,
                });
            }
            for (slot, inode, valid) in slots {
                let ino = ino_of(ib, slot as u64);
                r.inodes_walked += 1;
                let owner = |role, held_by: String| Owner {
                    role,
                    held_by,
                    inode: Some((inode.mode, inode.nlink)),
                    invalid_inode: valid.is_err(),
                };
                if inode.is_dir() {
                    if inode.map[0] == 0 {
                        continue;
                    }
                    self.walk_dir(inode.map[0], &mut |step| {
                        let DirStep::Node {
                            bid,
                            depth,
                            parent,
                            block,
                        } = step
                        else {
                            return;
                        };
                        if bid != target {
                            return;
                        }
                        let held_by = match parent {
                            None => "map[0] of the inode (the index root)".into(),
                            Some(p) => format!("inner node {p}"),
                        };
                        let role = if magic(block) == MAGIC_DIR_INNER {
                            Role::DirInner {
                                ino,
                                level: inner_level(block),
                                depth,
                            }
                        } else {
                            Role::DirLeaf { ino, depth }
                        };
                        r.owners.push(owner(role, held_by));
                    });
                } else {
                    self.walk_map(&inode, &mut |step| match step {
                        MapStep::Data { lblk, bid, at } if bid == target => {
                            r.owners
                                .push(owner(Role::Data { ino, lblk }, at.to_string()));
                        }
                        MapStep::Indirect {
                            bid,
                            level,
                            first,
                            span,
                            at,
                            ..
                        } if bid == target => r.owners.push(owner(
                            Role::Indirect {
                                ino,
                                level,
                                first,
                                span,
                            },
                            at.to_string(),
                        )),
                        _ => {}
                    });
                }
            }
        }
        if r.owners.len() > 1 {
            r.notes.push(format!(
                "named {} times: a block has one owner at most (fsck reports it, the repair \
                 gives later owners a copy or cuts them)",
                r.owners.len()
            ));
        }
        match (r.bitmap, r.owners.is_empty()) {
            (Some(false), false) => r
                .notes
                .push("referenced, but the bitmap marks it free: damage".into()),
            (None, _) => r
                .notes
                .push("its group's map block is damaged: the bitmap cannot say".into()),
            _ => {}
        }
        if r.owners.is_empty()
            && let Ok(b) = self.read(target)
        {
            r.looks_like = Some(match magic_kind(magic(b)) {
                Some(kind)
                    if matches!(magic(b), MAGIC_INDIRECT | MAGIC_DIR_LEAF | MAGIC_DIR_INNER) =>
                {
                    format!("a {kind} whose owner field says inode {}", get_u64(b, 8))
                }
                Some(kind) => format!("a {kind}"),
                None if b.iter().all(|&x| x == 0) => "zeros".into(),
                None => "data without a metadata header".into(),
            });
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Superblock { primary: true } => f.write_str("the primary superblock"),
            Role::Superblock { primary: false } => f.write_str("the secondary superblock"),
            Role::JournalHeader => f.write_str("the journal header"),
            Role::JournalDescriptor { seq } => {
                write!(f, "a journal descriptor of transaction {seq}")
            }
            Role::JournalCopy { seq, home } => {
                write!(f, "a journal copy of block {home} (transaction {seq})")
            }
            Role::JournalCommit { seq } => write!(f, "the journal commit of transaction {seq}"),
            Role::JournalUnused => f.write_str("a journal log block holding no record"),
            Role::Reserved => f.write_str("reserved (before the data area, outside the journal)"),
            Role::MapBlock { group } => write!(f, "the map block of group {group}"),
            Role::InodeBlock {
                first,
                last,
                used,
                on_list,
            } => {
                write!(
                    f,
                    "an inode block holding slots 1..=15, inodes {first}..={last} ({} in use: {})",
                    used.len(),
                    super::text::runs(used.iter().copied(), Some(8))
                )?;
                if !on_list {
                    f.write_str(", NOT on the inode block list")?;
                }
                Ok(())
            }
            Role::Data { ino, lblk } => write!(f, "data block {lblk} (logical) of inode {ino}"),
            Role::Indirect {
                ino,
                level,
                first,
                span,
            } => write!(
                f,
                "an indirect block of inode {ino} at level {level}, covering logical blocks {}",
                super::text::range(*first, *span)
            ),
            Role::DirLeaf { ino, depth } => {
                write!(
                    f,
                    "a leaf of directory {ino}'s index ({depth} below its root)"
                )
            }
            Role::DirInner { ino, level, depth } => write!(
                f,
                "an inner node of directory {ino}'s index (level {level}, {depth} below its root)"
            ),
        }
    }
}

impl fmt::Display for OwnerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {}: {}", self.bid, self.place)?;
        match self.bitmap {
            Some(true) => writeln!(f, "; marked used in the bitmap")?,
            Some(false) => writeln!(f, "; free in the bitmap (bit clear)")?,
            None => writeln!(f)?,
        }
        for o in &self.owners {
            write!(f, "owner: {}", o.role)?;
            if let Some((mode, nlink)) = o.inode {
                write!(f, " ({}", type_name(mode))?;
                if nlink == 0 {
                    f.write_str(", unlinked: nlink 0")?;
                }
                if o.invalid_inode {
                    f.write_str(", an INVALID inode")?;
                }
                f.write_str(")")?;
            }
            if !o.held_by.is_empty() {
                write!(f, ", named by {}", o.held_by)?;
            }
            writeln!(f)?;
        }
        if self.owners.is_empty() && matches!(self.place, Place::Data { .. }) {
            let walked = self.inodes_walked;
            match self.bitmap {
                Some(true) => writeln!(
                    f,
                    "owner: none: marked used but unreferenced (no structure of the {walked} \
                     inodes walked names it)"
                )?,
                _ => writeln!(
                    f,
                    "owner: none: free (no structure of the {walked} inodes walked names it)"
                )?,
            }
        }
        if let Some(l) = &self.looks_like {
            writeln!(f, "its bytes look like {l}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

//! A file's block map (FORMAT.md 8) as runs: logical blocks to physical
//! blocks, coalesced where both are consecutive, the holes between them up
//! to the end of the file, pointers that reads refuse, and the indirect
//! blocks at each level with the logical range each covers. Null subtrees
//! cost nothing to skip: holes are the gaps between what the walk finds,
//! so a sparse file of a terabyte is a few lines.

use super::text::{more, range, type_name};
use super::walk::{Holder, MapStep};
use super::{Inspector, invalid};
use crate::error::Error;
use crate::format::*;
use crate::types::Ino;
use std::fmt;

/// One run of logical blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extent {
    /// Logical blocks `logical .. logical + len` are physical blocks
    /// `physical .. physical + len`.
    Mapped {
        logical: u64,
        physical: Bid,
        len: u64,
    },
    /// Not allocated: reads as zeros.
    Hole { logical: u64, len: u64 },
    /// Unreachable: the pointer to them (in `held_by`) is refused by reads
    /// (and cut by the repair).
    Bad {
        logical: u64,
        len: u64,
        ptr: Bid,
        held_by: String,
        why: String,
    },
}

impl Extent {
    pub fn logical(&self) -> u64 {
        match self {
            Extent::Mapped { logical, .. }
            | Extent::Hole { logical, .. }
            | Extent::Bad { logical, .. } => *logical,
        }
    }

    pub fn len(&self) -> u64 {
        match self {
            Extent::Mapped { len, .. } | Extent::Hole { len, .. } | Extent::Bad { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One indirect block of the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndirectBlock {
    pub bid: Bid,
    /// Levels above the data: 1 names data blocks.
    pub level: u32,
    /// The tree it belongs to: 1 single (`map[12]`), 2 double, 3 triple.
    pub tree: u32,
    /// Logical blocks it covers: `first .. first + span`.
    pub first: u64,
    pub span: u64,
    pub held_by: String,
    /// Its non-zero pointers.
    pub pointers: usize,
    pub owner: u64,
    /// (stored, computed) checksum.
    pub crc: (u32, u32),
}

/// A file's block map.
#[derive(Debug, Clone)]
pub struct BlockMap {
    pub ino: Ino,
    pub mode: u32,
    pub size: u64,
    /// The file's length in blocks (`ceil(size / 4096)`).
    pub size_blocks: u64,
    /// What the inode's `blocks` field says.
    pub blocks_field: u64,
    /// An inline symlink: no block map.
    pub inline: bool,
    /// In logical order, from block 0 to the end of the file or of the
    /// last mapped block, whichever is further.
    pub extents: Vec<Extent>,
    /// In walk order (each tree depth first).
    pub indirect: Vec<IndirectBlock>,
    pub data_blocks: u64,
    pub problems: Vec<String>,
    /// Extents (and indirect blocks) the text shows (None: all).
    pub limit: Option<usize>,
}

impl BlockMap {
    /// The physical block of logical block `lblk`: Some(0) for a hole,
    /// None past the extents or in a bad run.
    pub fn physical(&self, lblk: u64) -> Option<Bid> {
        self.extents.iter().find_map(|e| match *e {
            Extent::Mapped {
                logical,
                physical,
                len,
            } if (logical..logical + len).contains(&lblk) => {
                Some(physical + (lblk - logical) as Bid)
            }
            Extent::Hole { logical, len } if (logical..logical + len).contains(&lblk) => Some(0),
            _ => None,
        })
    }
}

/// Adds the hole from `cursor` to `to`, if there is one.
fn hole_to(extents: &mut Vec<Extent>, cursor: u64, to: u64) {
    if to > cursor {
        extents.push(Extent::Hole {
            logical: cursor,
            len: to - cursor,
        });
    }
}

impl Inspector {
    /// The block map of file (or long symlink) `ino`. `limit`: extents
    /// and indirect blocks the text shows (None: all).
    pub fn block_map(&self, ino: Ino, limit: Option<usize>) -> Result<BlockMap, Error> {
        let l = self.load_live(ino)?;
        let i = &l.inode;
        if i.is_dir() {
            return Err(invalid(format!(
                "inode {ino} is a directory: its blocks form an index tree (see the directory tree)"
            )));
        }
        let mut m = BlockMap {
            ino,
            mode: i.mode,
            size: i.size,
            size_blocks: i.size.div_ceil(BLOCK_SIZE as u64),
            blocks_field: i.blocks,
            inline: i.is_symlink() && i.flags & crate::format::inode::FLAG_INLINE != 0,
            extents: Vec::new(),
            indirect: Vec::new(),
            data_blocks: 0,
            problems: Vec::new(),
            limit,
        };
        if let Some(why) = l.invalid {
            m.problems
                .push(format!("the inode fails validation ({why}); shown anyway"));
        }
        let mut cursor = 0u64;
        let mut extents: Vec<Extent> = Vec::new();
        let mut indirect = Vec::new();
        let mut problems = Vec::new();
        let mut data = 0u64;
        self.walk_map(i, &mut |step| match step {
            MapStep::Data { lblk, bid, .. } => {
                hole_to(&mut extents, cursor, lblk);
                data += 1;
                match extents.last_mut() {
                    Some(Extent::Mapped {
                        logical,
                        physical,
                        len,
                    }) if *logical + *len == lblk && *physical as u64 + *len == bid as u64 => {
                        *len += 1
                    }
                    _ => extents.push(Extent::Mapped {
                        logical: lblk,
                        physical: bid,
                        len: 1,
                    }),
                }
                cursor = lblk + 1;
            }
            MapStep::Bad {
                first,
                span,
                ptr,
                at,
                why,
            } => {
                hole_to(&mut extents, cursor, first);
                problems.push(format!(
                    "logical {}: pointer {ptr} in {at} {why}",
                    range(first, span)
                ));
                extents.push(Extent::Bad {
                    logical: first,
                    len: span,
                    ptr,
                    held_by: at.to_string(),
                    why,
                });
                cursor = first + span;
            }
            MapStep::Indirect {
                bid,
                level,
                first,
                span,
                at,
                block,
            } => {
                let owner = get_u64(block, IND_OWNER);
                let crc = (get_u32(block, HDR_CRC), block_crc(block));
                if owner != ino {
                    problems.push(format!(
                        "indirect block {bid} is marked as belonging to inode {owner}"
                    ));
                }
                if crc.0 != crc.1 {
                    problems.push(format!("indirect block {bid} fails its checksum"));
                }
                let tree = match at {
                    Holder::Inode(slot) => (slot - N_DIRECT + 1) as u32,
                    Holder::Indirect(..) => 0,
                };
                indirect.push(IndirectBlock {
                    bid,
                    level,
                    tree,
                    first,
                    span,
                    held_by: at.to_string(),
                    pointers: (0..PTRS_PER_BLOCK as usize)
                        .filter(|&k| get_u32(block, IND_PTRS + 4 * k) != 0)
                        .count(),
                    owner,
                    crc,
                });
            }
        });
        // The tree of a nested indirect block is its top's.
        let mut tree = 0;
        for b in &mut indirect {
            if b.tree != 0 {
                tree = b.tree;
            } else {
                b.tree = tree;
            }
        }
        // An inline symlink's size counts the target's bytes, not blocks.
        if !m.inline {
            hole_to(&mut extents, cursor, m.size_blocks.max(cursor));
        }
        let owned = data + indirect.len() as u64;
        if owned != i.blocks {
            problems.push(format!(
                "the inode records {} blocks, the map holds {data} data and {} indirect blocks",
                i.blocks,
                indirect.len()
            ));
        }
        m.extents = extents;
        m.indirect = indirect;
        m.data_blocks = data;
        m.problems.extend(problems);
        Ok(m)
    }
}

impl fmt::Display for BlockMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "block map of inode {} ({}): size {} bytes = {} blocks; {} data and {} indirect blocks \
             mapped (the inode records {})",
            self.ino,
            type_name(self.mode),
            self.size,
            self.size_blocks,
            self.data_blocks,
            self.indirect.len(),
            self.blocks_field
        )?;
        if self.inline {
            writeln!(
                f,
                "  an inline symlink: the target is in the inode, no blocks"
            )?;
        }
        let shown = self.limit.unwrap_or(usize::MAX);
        if !self.extents.is_empty() {
            writeln!(f, "  {:<24} {:<24} blocks", "logical", "physical")?;
        }
        for e in self.extents.iter().take(shown) {
            let past =
                if e.logical() + e.len() > self.size_blocks && !matches!(e, Extent::Hole { .. }) {
                    "  (past the end of the file)"
                } else {
                    ""
                };
            match e {
                Extent::Mapped {
                    logical,
                    physical,
                    len,
                } => writeln!(
                    f,
                    "  {:<24} {:<24} {len}{past}",
                    range(*logical, *len),
                    range(*physical as u64, *len)
                )?,
                Extent::Hole { logical, len } => {
                    writeln!(f, "  {:<24} {:<24} {len}", range(*logical, *len), "hole")?
                }
                Extent::Bad {
                    logical,
                    len,
                    ptr,
                    held_by,
                    why,
                } => writeln!(
                    f,
                    "  {:<24} BAD: pointer {ptr} in {held_by} {why} ({len} blocks unreachable)",
                    range(*logical, *len)
                )?,
            }
        }
        let mut s = String::new();
        more(&mut s, "  ", self.extents.len(), self.limit, "runs");
        f.write_str(&s)?;
        if !self.indirect.is_empty() {
            writeln!(f, "indirect blocks ({}):", self.indirect.len())?;
            for b in self.indirect.iter().take(shown) {
                let tree = match b.tree {
                    1 => "single",
                    2 => "double",
                    3 => "triple",
                    _ => "?",
                };
                let pad = "  ".repeat((b.tree.saturating_sub(b.level)) as usize + 1);
                writeln!(
                    f,
                    "{pad}{} {tree} indirect, level {}, in {}: covers logical {}, {} pointers, owner {}, crc {}",
                    b.bid,
                    b.level,
                    b.held_by,
                    range(b.first, b.span),
                    b.pointers,
                    b.owner,
                    super::text::crc_verdict(b.crc.0, b.crc.1)
                )?;
            }
            let mut s = String::new();
            more(
                &mut s,
                "  ",
                self.indirect.len(),
                self.limit,
                "indirect blocks",
            );
            f.write_str(&s)?;
        }
        if self.problems.is_empty() {
            writeln!(f, "problems: none")?;
        } else {
            writeln!(f, "problems ({}):", self.problems.len())?;
            for p in self.problems.iter().take(shown.max(50)) {
                writeln!(f, "  {p}")?;
            }
            let mut s = String::new();
            more(
                &mut s,
                "  ",
                self.problems.len(),
                Some(shown.max(50)),
                "problems",
            );
            f.write_str(&s)?;
        }
        Ok(())
    }
}

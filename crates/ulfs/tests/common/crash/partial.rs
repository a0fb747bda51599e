//! Calls that commit part of their work: a huge write, a fallocate or a
//! hole punch commits what it has done when the running transaction is
//! full (`txn_room` in fs/file.rs), so a crash can show the state after
//! the previous calls plus a part of that call. This module says exactly
//! which parts the code can commit, and builds those states for the
//! checker:
//! - write (`write_at`): `copy_in` stops only at a block boundary after at
//!   least one chunk, the inode (size = max(old, end of the part), mtime)
//!   is written and the transaction committed; data is flushed before the
//!   commit record. So: the first d bytes of the write, for every d with
//!   off + d on a block boundary, 0 < d < len.
//! - fallocate mode 0 / KEEP_SIZE (`preallocate`): commits before
//!   allocating block L, for L past the first block of the range; the size
//!   is set only at the end. So: blocks first..L allocated (holes zeroed),
//!   size unchanged, for first < L < last.
//! - PUNCH_HOLE|KEEP_SIZE (`punch_hole`): commits before handling the
//!   block at pos, pos a block boundary past `off`; the end is first cut
//!   at the size. So: off..pos punched (whole blocks unmapped, a partial
//!   first block zeroed), for off < pos < end, pos on a block boundary.
//!
//! The times a committed part leaves: a write's part has stamped mtime
//! (unknown); fallocate and punch stamp only at their end (unchanged).

use super::*;

/// One call that may commit part of its work.
#[derive(Clone, Debug)]
pub struct Partial {
    /// Index of the call (the state before it is snaps[op]).
    pub op: usize,
    /// Model id of the file.
    pub id: u32,
    pub kind: PartialKind,
}

#[derive(Clone, Debug)]
pub enum PartialKind {
    Write {
        off: u64,
        data: Arc<Vec<u8>>,
    },
    Falloc {
        off: u64,
        end: u64,
    },
    /// `end` already cut at the size.
    Punch {
        off: u64,
        end: u64,
    },
}

impl PartialKind {
    pub const NAMES: [&'static str; 3] = ["write", "fallocate", "punch"];

    /// Index into `NAMES`.
    pub fn index(&self) -> usize {
        match self {
            PartialKind::Write { .. } => 0,
            PartialKind::Falloc { .. } => 1,
            PartialKind::Punch { .. } => 2,
        }
    }
}

impl Partial {
    /// The states a crash may show with part of this call committed, as far
    /// as `found` can tell them apart (its file's size and allocated
    /// pages); those that differ only in bytes the data rules leave loose
    /// are represented by the first and last of them.
    pub fn candidates(&self, base: &Tree, found: &Found) -> Vec<Tree> {
        let Some(path) = base
            .nodes
            .iter()
            .find(|(_, n)| **n == Node::File(self.id))
            .map(|(p, _)| p.clone())
        else {
            // Unlinked but open: nothing of it is visible after a crash.
            return Vec::new();
        };
        let Some(FNode::File(ff)) = found.nodes.get(&path) else {
            return Vec::new();
        };
        let fd = &base.files[&self.id];
        let mut ends: Vec<u64> = Vec::new();
        match &self.kind {
            PartialKind::Write { off, data } => {
                let end = off + data.len() as u64;
                for b in (off / PAGE + 1..end.div_ceil(PAGE)).map(|b| b * PAGE) {
                    let size = fd.size.max(b);
                    if ff.size == size
                        && alloc_matches(ff, *off, end, size, |pg| {
                            pg < b / PAGE || fd.pages.contains_key(&pg)
                        })
                    {
                        ends.push(b);
                    }
                }
            }
            PartialKind::Falloc { off, end } => {
                let (first, last) = (off / PAGE, end.div_ceil(PAGE));
                for l in first + 1..last {
                    if ff.size == fd.size
                        && alloc_matches(ff, *off, *end, fd.size, |pg| {
                            pg < l || fd.pages.contains_key(&pg)
                        })
                    {
                        ends.push(l);
                    }
                }
            }
            PartialKind::Punch { off, end } => {
                // Between two allocated pages every cut point leaves the
                // same state: try one cut after each allocated page of the
                // range (the file is often sparse and the range huge).
                let (lo, hi) = (off / PAGE, end.div_ceil(PAGE));
                let cuts: BTreeSet<u64> = fd
                    .pages
                    .range(lo..hi)
                    .map(|(pg, _)| (pg + 1) * PAGE)
                    .chain([(lo + 1) * PAGE])
                    .filter(|b| b > off && b < end)
                    .collect();
                for b in cuts {
                    let gone = |pg: u64| pg * PAGE >= *off && (pg + 1) * PAGE <= b;
                    let sparse = fd.pages.range(lo..hi).map(|(k, _)| *k);
                    let found = ff.pages.range(lo..hi).map(|(k, _)| *k);
                    let ok = ff.size == fd.size
                        && sparse.chain(found).all(|pg| {
                            pg * PAGE >= fd.size
                                || ff.pages.contains_key(&pg)
                                    == (!gone(pg) && fd.pages.contains_key(&pg))
                        });
                    if ok {
                        ends.push(b);
                    }
                }
            }
        }
        if ends.len() > 2 {
            ends = vec![ends[0], ends[ends.len() - 1]];
        }
        ends.into_iter()
            .map(|e| {
                let mut t = base.clone();
                let f = t.file_mut(self.id);
                match &self.kind {
                    PartialKind::Write { off, data } => {
                        f.write(*off, &data[..(e - off) as usize]);
                        f.attrs.times = None;
                    }
                    PartialKind::Falloc { off, .. } => f.preallocate(off / PAGE, e, None),
                    PartialKind::Punch { off, .. } => {
                        f.punch(*off, e);
                    }
                }
                t
            })
            .collect()
    }
}

/// Whether `found`'s pages in the range off..end (below `size`) are
/// allocated exactly where `present` says.
fn alloc_matches(
    ff: &FoundFile,
    off: u64,
    end: u64,
    size: u64,
    present: impl Fn(u64) -> bool,
) -> bool {
    (off / PAGE..end.div_ceil(PAGE))
        .take_while(|pg| pg * PAGE < size)
        .all(|pg| ff.pages.contains_key(&pg) == present(pg))
}

//! A directory's B+tree (FORMAT.md 9): every node depth first in key
//! order, inner nodes with their keys and children, leaves with their
//! entries, then the leaf chain compared with the tree's leaves, and the
//! counts compared with what the inode records. Each rule of section 9
//! that a walk can judge is judged here too (owner, levels, key ranges
//! and order, each key's hash), and what breaks one is listed, not
//! refused: the report is for looking at damaged trees as well.
//!
//! The text shows at most a limit of entries per node (a directory of a
//! million entries has thousands of leaves); the structured report keeps
//! them all.

use super::text::{crc_verdict, dtype_name, more, quoted};
use super::walk::{DirStep, MAX_INDEX_DEPTH};
use super::{Inspector, invalid};
use crate::error::Error;
use crate::format::dirnode::*;
use crate::format::*;
use crate::types::Ino;
use siphasher::sip::SipHasher24;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};
use std::hash::Hasher;

/// Smallest key (FORMAT.md 9.1): bit 62 set, bits 63 and 61 clear.
const KEY_BASE: u64 = 1 << 62;

/// One entry of a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub key: u64,
    pub ino: u64,
    pub dtype: u8,
    pub name: Vec<u8>,
    /// The key's upper bits are the name's hash under the image's key.
    pub hash_ok: bool,
}

#[derive(Debug, Clone)]
pub enum DirNodeKind {
    Inner {
        level: u16,
        /// (key, child) of each entry; entry 0's key is not used for
        /// routing.
        children: Vec<(u64, Bid)>,
    },
    Leaf {
        heap: u16,
        next: Bid,
        entries: Vec<DirEntry>,
    },
    /// A pointer the walk could not follow.
    Bad { why: String },
}

#[derive(Debug, Clone)]
pub struct DirNode {
    pub bid: Bid,
    /// 0 for the root.
    pub depth: u32,
    pub parent: Option<Bid>,
    pub owner: u64,
    /// (stored, computed) checksum.
    pub crc: (u32, u32),
    /// Declared entry count of the node.
    pub count: usize,
    pub kind: DirNodeKind,
}

/// A directory's index tree.
#[derive(Debug, Clone)]
pub struct DirTree {
    pub ino: Ino,
    /// The index root (the inode's `map[0]`; 0: no tree).
    pub root: Bid,
    /// Levels from the root to the leaves (1: the root is a leaf; 0: no
    /// tree).
    pub depth: u32,
    pub nodes: Vec<DirNode>,
    /// The leaf chain from the leftmost leaf, as followed.
    pub chain: Vec<Bid>,
    /// Records in the tree's leaves.
    pub entries: u64,
    /// What the inode records: entries, blocks, size.
    pub inode_entries: u64,
    pub inode_blocks: u64,
    pub inode_size: u64,
    /// Rules of FORMAT.md 9 the tree breaks.
    pub problems: Vec<String>,
    /// Entries (and inner entries) per node the text shows (None: all).
    pub limit: Option<usize>,
}

impl DirTree {
    pub fn leaves(&self) -> impl Iterator<Item = &DirNode> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.kind, DirNodeKind::Leaf { .. }))
    }

    pub fn inner_nodes(&self) -> impl Iterator<Item = &DirNode> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.kind, DirNodeKind::Inner { .. }))
    }

    /// Every entry, in tree order.
    pub fn all_entries(&self) -> impl Iterator<Item = &DirEntry> {
        self.nodes.iter().flat_map(|n| match &n.kind {
            DirNodeKind::Leaf { entries, .. } => entries.as_slice(),
            _ => &[],
        })
    }
}

impl Inspector {
    /// The base key of `name` under the image's hash key (sequence 0).
    pub(super) fn name_key(&self, name: &[u8]) -> Option<u64> {
        let k = &self.sb.as_ref()?.hash_key;
        let k0 = u64::from_le_bytes(k[..8].try_into().ok()?);
        let k1 = u64::from_le_bytes(k[8..].try_into().ok()?);
        let mut h = SipHasher24::new_with_keys(k0, k1);
        h.write(name);
        Some(KEY_BASE | ((h.finish() >> 7) << 4))
    }

    /// The entry with exactly `key` under index root `root`, by descent:
    /// (its leaf, the entry).
    pub(super) fn entry_by_key(&self, root: Bid, key: u64) -> Option<(Bid, DirEntry)> {
        let mut bid = root;
        let mut above = u16::MAX;
        for _ in 0..=MAX_INDEX_DEPTH {
            if self.bid_fault(bid).is_some() {
                return None;
            }
            let b = self.read(bid).ok()?;
            match magic(b) {
                MAGIC_DIR_LEAF => {
                    leaf_check(b).ok()?;
                    let i = leaf_lower_bound(b, key).ok()?;
                    let r = leaf_rec(b, i).ok().filter(|r| r.key == key)?;
                    return Some((bid, self.entry(&r)));
                }
                MAGIC_DIR_INNER => {
                    inner_check(b).ok()?;
                    let level = inner_level(b);
                    if level >= above {
                        return None;
                    }
                    above = level;
                    bid = inner_entry(b, inner_child_for(b, key)).1;
                }
                _ => return None,
            }
        }
        None
    }

    fn entry(&self, r: &Rec) -> DirEntry {
        DirEntry {
            key: r.key,
            ino: r.ino,
            dtype: r.dtype,
            name: r.name.to_vec(),
            hash_ok: self.name_key(r.name) == Some(r.key & !0xF),
        }
    }

    /// Directory `ino`'s index tree. `limit`: entries per node the text
    /// shows (None: all; the structure holds all either way).
    pub fn dir_tree(&self, ino: Ino, limit: Option<usize>) -> Result<DirTree, Error> {
        let l = self.load_live(ino)?;
        let d = &l.inode;
        if !d.is_dir() {
            return Err(invalid(format!(
                "inode {ino} is not a directory ({})",
                super::text::type_name(d.mode)
            )));
        }
        let mut t = DirTree {
            ino,
            root: d.map[0],
            depth: 0,
            nodes: Vec::new(),
            chain: Vec::new(),
            entries: 0,
            inode_entries: d.entries,
            inode_blocks: d.blocks,
            inode_size: d.size,
            problems: Vec::new(),
            limit,
        };
        if let Some(why) = l.invalid {
            t.problems
                .push(format!("the inode fails validation ({why}); shown anyway"));
        }
        if d.map[1..].iter().any(|&p| p != 0) {
            t.problems
                .push("map[1..15] of the directory inode are not all zero".into());
        }
        if t.root != 0 {
            self.tree_nodes(ino, &mut t);
            self.leaf_chain(&mut t);
        }
        let blocks = t
            .nodes
            .iter()
            .filter(|n| !matches!(n.kind, DirNodeKind::Bad { .. }))
            .count() as u64;
        if t.entries != d.entries {
            t.problems.push(format!(
                "the inode records {} entries, the leaves hold {}",
                d.entries, t.entries
            ));
        }
        if blocks != d.blocks || d.size != d.blocks.saturating_mul(BLOCK_SIZE as u64) {
            t.problems.push(format!(
                "the inode records {} blocks and size {}, the index has {blocks} nodes",
                d.blocks, d.size
            ));
        }
        Ok(t)
    }

    /// Walks the tree into `t.nodes`, judging each node.
    fn tree_nodes(&self, ino: Ino, t: &mut DirTree) {
        // Key range of each node, from its parent's entries (the root's is
        // everything), and each inner node's level.
        let mut ranges: HashMap<Bid, (u64, u64)> = HashMap::new();
        let mut levels: HashMap<Bid, u16> = HashMap::new();
        ranges.insert(t.root, (0, u64::MAX));
        let mut last_key: Option<u64> = None;
        let mut nodes = Vec::new();
        let mut problems = Vec::new();
        let mut entries = 0u64;
        let mut leaf_depth: Option<u32> = None;
        self.walk_dir(t.root, &mut |step| match step {
            DirStep::Bad {
                bid,
                depth,
                parent,
                why,
            } => {
                problems.push(format!("node {bid}: {why}"));
                nodes.push(DirNode {
                    bid,
                    depth,
                    parent,
                    owner: 0,
                    crc: (0, 0),
                    count: 0,
                    kind: DirNodeKind::Bad { why },
                });
            }
            DirStep::Node {
                bid,
                depth,
                parent,
                block: b,
            } => {
                let owner = get_u64(b, NODE_OWNER);
                let crc = (get_u32(b, HDR_CRC), block_crc(b));
                if owner != ino {
                    problems.push(format!("node {bid} belongs to inode {owner}"));
                }
                if crc.0 != crc.1 {
                    problems.push(format!("node {bid} fails its checksum"));
                }
                let (lo, hi) = ranges.get(&bid).copied().unwrap_or((0, u64::MAX));
                let count = node_count(b);
                let kind = if magic(b) == MAGIC_DIR_INNER {
                    let level = inner_level(b);
                    if let Some(p) = parent
                        && levels.get(&p).is_some_and(|&pl| pl != level + 1)
                    {
                        problems.push(format!(
                            "inner node {bid} has level {level} under a node of level {}",
                            levels[&p]
                        ));
                    }
                    levels.insert(bid, level);
                    if let Err(e) = inner_check(b) {
                        problems.push(format!("inner node {bid}: {e}"));
                        DirNodeKind::Inner {
                            level,
                            children: Vec::new(),
                        }
                    } else {
                        let children: Vec<(u64, Bid)> =
                            (0..count).map(|i| inner_entry(b, i)).collect();
                        for (i, &(k, child)) in children.iter().enumerate() {
                            let from = if i == 0 { lo } else { k };
                            let to = children.get(i + 1).map_or(hi, |e| e.0);
                            if from > to || from < lo || to > hi {
                                problems.push(format!(
                                    "inner node {bid}: key of entry {i} out of order"
                                ));
                            }
                            ranges.entry(child).or_insert((from, to));
                        }
                        DirNodeKind::Inner { level, children }
                    }
                } else {
                    if let Some(p) = parent
                        && levels.get(&p).is_some_and(|&pl| pl != 1)
                    {
                        problems.push(format!(
                            "leaf {bid} under an inner node of level {}",
                            levels[&p]
                        ));
                    }
                    match leaf_depth {
                        Some(d) if d != depth => problems.push(format!(
                            "leaf {bid} is {depth} levels below the root, others {d}"
                        )),
                        _ => leaf_depth = Some(depth),
                    }
                    if let Err(e) = leaf_check(b) {
                        problems.push(format!("leaf {bid}: {e}"));
                    }
                    // The slot array cannot hold more than the block does,
                    // whatever the count says.
                    let slots = count.min((BLOCK_SIZE - NODE_HDR) / 2);
                    let mut list = Vec::with_capacity(slots);
                    for i in 0..slots {
                        match leaf_rec(b, i) {
                            Ok(r) => {
                                let e = self.entry(&r);
                                if !e.hash_ok {
                                    problems.push(format!(
                                        "leaf {bid}: entry {} is filed under the wrong hash",
                                        quoted(&e.name)
                                    ));
                                }
                                if e.key < lo || e.key >= hi {
                                    problems.push(format!(
                                        "leaf {bid}: key {:#018x} outside the node's range",
                                        e.key
                                    ));
                                }
                                if e.key >> 61 != KEY_BASE >> 61 {
                                    problems
                                        .push(format!("leaf {bid}: malformed key {:#018x}", e.key));
                                }
                                if last_key.is_some_and(|k| e.key <= k) {
                                    problems.push(format!(
                                        "leaf {bid}: key {:#018x} not above the one before",
                                        e.key
                                    ));
                                }
                                last_key = Some(e.key);
                                list.push(e);
                            }
                            Err(e) => problems.push(format!("leaf {bid}, slot {i}: {e}")),
                        }
                    }
                    entries += list.len() as u64;
                    DirNodeKind::Leaf {
                        heap: get_u16(b, 18),
                        next: leaf_next(b),
                        entries: list,
                    }
                };
                nodes.push(DirNode {
                    bid,
                    depth,
                    parent,
                    owner,
                    crc,
                    count,
                    kind,
                });
            }
        });
        t.depth = match nodes.first().map(|n| &n.kind) {
            Some(DirNodeKind::Inner { level, .. }) => *level as u32 + 1,
            Some(DirNodeKind::Leaf { .. }) => 1,
            _ => 0,
        };
        if let Some(d) = leaf_depth
            && t.depth != 0
            && d + 1 != t.depth
        {
            problems.push(format!(
                "the root's level says {} levels, the leaves are {} below it",
                t.depth,
                d + 1
            ));
        }
        t.nodes = nodes;
        t.entries = entries;
        t.problems.extend(problems);
    }

    /// Follows the leaf chain from the leftmost leaf and compares it with
    /// the tree's leaves, in order.
    fn leaf_chain(&self, t: &mut DirTree) {
        let tree: Vec<Bid> = t.leaves().map(|n| n.bid).collect();
        let Some(&first) = tree.first() else {
            return;
        };
        let mut seen = HashSet::new();
        let mut at = first;
        while at != 0 {
            if !seen.insert(at) {
                t.problems.push(format!("the leaf chain loops at {at}"));
                break;
            }
            if let Some(why) = self.bid_fault(at) {
                t.problems
                    .push(format!("the leaf chain points {why} ({at})"));
                break;
            }
            match self.read(at) {
                Ok(b) if magic(b) == MAGIC_DIR_LEAF => {
                    t.chain.push(at);
                    at = leaf_next(b);
                }
                _ => {
                    t.problems
                        .push(format!("the leaf chain reaches {at}, which is not a leaf"));
                    break;
                }
            }
        }
        if t.chain != tree {
            t.problems.push(
                "the leaf chain does not visit exactly the tree's leaves, left to right".into(),
            );
        }
    }
}

impl fmt::Display for DirTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.root == 0 {
            writeln!(
                f,
                "directory {}: no index tree (map[0] = 0): no entry was ever added",
                self.ino
            )?;
        } else {
            let inner = self.inner_nodes().count();
            let leaves = self.leaves().count();
            writeln!(
                f,
                "directory {}: index root {}, depth {}, {inner} inner nodes, {leaves} leaves, {} entries",
                self.ino, self.root, self.depth, self.entries
            )?;
        }
        writeln!(
            f,
            "  the inode records {} entries, {} blocks, size {}",
            self.inode_entries, self.inode_blocks, self.inode_size
        )?;
        let limit = self.limit;
        let shown = limit.unwrap_or(usize::MAX);
        for n in &self.nodes {
            let pad = "  ".repeat(n.depth as usize + 1);
            let crc = crc_verdict(n.crc.0, n.crc.1);
            match &n.kind {
                DirNodeKind::Bad { why } => writeln!(f, "{pad}node {}: BAD: {why}", n.bid)?,
                DirNodeKind::Inner { level, children } => {
                    writeln!(
                        f,
                        "{pad}inner {} (level {level}, {} entries, owner {}, crc {crc})",
                        n.bid, n.count, n.owner
                    )?;
                    for (i, (k, c)) in children.iter().enumerate().take(shown) {
                        if i == 0 {
                            writeln!(f, "{pad}  [0] {:<18} -> {c}", "(lowest)")?;
                        } else {
                            writeln!(f, "{pad}  [{i}] {k:#018x} -> {c}")?;
                        }
                    }
                    let mut s = String::new();
                    more(
                        &mut s,
                        &format!("{pad}  "),
                        children.len(),
                        limit,
                        "entries",
                    );
                    f.write_str(&s)?;
                }
                DirNodeKind::Leaf {
                    heap,
                    next,
                    entries,
                } => {
                    writeln!(
                        f,
                        "{pad}leaf {} ({} entries, heap {heap:#06x}, next {next}, owner {}, crc {crc})",
                        n.bid, n.count, n.owner
                    )?;
                    for e in entries.iter().take(shown) {
                        let hash = if e.hash_ok { "" } else { "  (WRONG HASH)" };
                        writeln!(
                            f,
                            "{pad}  {:#018x}  ino {:<8} {:<5} {}{hash}",
                            e.key,
                            e.ino,
                            dtype_name(e.dtype),
                            quoted(&e.name)
                        )?;
                    }
                    let mut s = String::new();
                    more(&mut s, &format!("{pad}  "), entries.len(), limit, "entries");
                    f.write_str(&s)?;
                }
            }
        }
        if !self.chain.is_empty() {
            let mut line = String::new();
            for (i, b) in self.chain.iter().enumerate() {
                if i >= shown {
                    let _ = write!(line, " -> ... {} more", self.chain.len() - i);
                    break;
                }
                if i > 0 {
                    line.push_str(" -> ");
                }
                let _ = write!(line, "{b}");
            }
            writeln!(f, "leaf chain ({} leaves): {line}", self.chain.len())?;
        }
        if self.problems.is_empty() {
            writeln!(f, "problems: none")?;
        } else {
            writeln!(f, "problems ({}):", self.problems.len())?;
            for p in self.problems.iter().take(shown.max(DEFAULT_PROBLEMS)) {
                writeln!(f, "  {p}")?;
            }
            let mut s = String::new();
            more(
                &mut s,
                "  ",
                self.problems.len(),
                Some(shown.max(DEFAULT_PROBLEMS)),
                "problems",
            );
            f.write_str(&s)?;
        }
        Ok(())
    }
}

/// Problems are few on a sound tree and many on a wrecked one: at least
/// this many are shown whatever the entry limit.
const DEFAULT_PROBLEMS: usize = 50;

//! Directories: a B+tree per directory, keyed by a keyed hash of the name.
//!
//! Keys are SipHash-2-4 of the name under the image's secret 128-bit seed,
//! cut to 57 bits, with 4 low bits left for a collision sequence number:
//! `key = 2^62 | (hash >> 7) << 4 | seq`, so every key and `key + 1` (the
//! `d_off` after it) is a positive `i64`. Leaves are slotted pages sorted by
//! key, chained left to right; inner nodes route by key. Lookup, insert and
//! remove are O(log n). A `getdents` cookie is the key to resume from, so
//! cookies stay valid while the directory changes: no entry is returned
//! twice and none that stays present is skipped. Leaves are not merged when
//! entries go; an emptied directory's blocks are freed by `rmdir`.

use super::Volume;
use crate::errno::{Errno, Result};
use crate::format::dirnode::*;
use crate::format::inode::Inode;
use crate::format::*;
use crate::types::Ino;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// Smallest entry key; cookies below it name `.` and `..`.
pub const KEY_BASE: u64 = 1 << 62;
const SEQ_MASK: u64 = 0xF;
/// Largest key `name_key` (plus a collision sequence) can make: a stored
/// key above it is damage, and readdir's cookie (key + 1) must not wrap.
const KEY_MAX: u64 = KEY_BASE | ((u64::MAX >> 7) << 4) | SEQ_MASK;
/// Deepest tree ulfs builds (root level <= 7 holds far beyond 2^32 entries).
const MAX_DEPTH: usize = 8;

/// One entry, as handed to `dir_read`'s callback.
#[derive(Debug, Clone, Copy)]
pub struct DirItem<'a> {
    pub key: u64,
    pub ino: Ino,
    pub dtype: u8,
    pub name: &'a [u8],
}

/// An owned copy of a leaf record, for rewriting leaves.
type OwnedRec = (u64, u64, u8, Vec<u8>);

fn as_recs(v: &[OwnedRec]) -> Vec<Rec<'_>> {
    v.iter()
        .map(|r| Rec {
            key: r.0,
            ino: r.1,
            dtype: r.2,
            name: &r.3,
        })
        .collect()
}

/// Where an entry was found.
struct Found {
    leaf: Bid,
    idx: usize,
    key: u64,
    ino: Ino,
}

/// The path from the root to a leaf: (node, child index) per inner level.
struct TreePath {
    nodes: [(Bid, usize); MAX_DEPTH],
    len: usize,
    leaf: Bid,
}

fn corrupt(_: NodeError) -> Errno {
    Errno::EUCLEAN
}

impl Volume {
    /// The base key of `name` (sequence 0).
    pub(crate) fn name_key(&self, name: &[u8]) -> u64 {
        let mut h = SipHasher24::new_with_keys(self.hash_key.0, self.hash_key.1);
        h.write(name);
        KEY_BASE | ((h.finish() >> 7) << 4)
    }

    /// Descends from `root` to the leaf whose range holds `key`.
    fn find_leaf(&self, root: Bid, key: u64) -> Result<TreePath> {
        let mut path = TreePath {
            nodes: [(0, 0); MAX_DEPTH],
            len: 0,
            leaf: 0,
        };
        let mut bid = root;
        let mut level_above = u16::MAX;
        loop {
            self.check_bid(bid)?;
            let b = self.meta(bid)?;
            match magic(b) {
                MAGIC_DIR_LEAF => {
                    leaf_check(b).map_err(corrupt)?;
                    path.leaf = bid;
                    return Ok(path);
                }
                MAGIC_DIR_INNER => {
                    inner_check(b).map_err(corrupt)?;
                    let level = inner_level(b);
                    // Levels strictly decrease, so a damaged tree cannot loop.
                    if level >= level_above || path.len == MAX_DEPTH {
                        return Err(Errno::EUCLEAN);
                    }
                    level_above = level;
                    let i = inner_child_for(b, key);
                    path.nodes[path.len] = (bid, i);
                    path.len += 1;
                    bid = inner_entry(b, i).1;
                }
                _ => return Err(Errno::EUCLEAN),
            }
        }
    }

    /// Visits the entries whose key lies in `name`'s collision group, in
    /// key order, until `f` returns true. Returns what `f` stopped at.
    fn scan_group(
        &self,
        dir: &Inode,
        name: &[u8],
        mut f: impl FnMut(&Rec, Bid, usize) -> bool,
    ) -> Result<Option<Found>> {
        let root = dir.map[0];
        if root == 0 {
            return Ok(None);
        }
        let base = self.name_key(name);
        let mut leaf = self.find_leaf(root, base)?.leaf;
        let mut i = leaf_lower_bound(self.meta(leaf)?, base).map_err(corrupt)?;
        // A group spans at most two leaves in practice, but a run of emptied
        // leaves can sit between them; the walk ends at the first key past
        // the group.
        for _ in 0..=u16::MAX {
            let b = self.meta(leaf)?;
            while i < node_count(b) {
                let r = leaf_rec(b, i).map_err(corrupt)?;
                if r.key > base | SEQ_MASK {
                    return Ok(None);
                }
                if f(&r, leaf, i) {
                    return Ok(Some(Found {
                        leaf,
                        idx: i,
                        key: r.key,
                        ino: r.ino,
                    }));
                }
                i += 1;
            }
            let next = leaf_next(b);
            if next == 0 {
                return Ok(None);
            }
            self.check_bid(next)?;
            leaf_check(self.meta(next)?).map_err(corrupt)?;
            leaf = next;
            i = 0;
        }
        Err(Errno::EUCLEAN)
    }

    /// Looks `name` up: (key, inode, d_type).
    pub(crate) fn dir_lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<(u64, Ino, u8)>> {
        let mut dtype = 0;
        let found = self.scan_group(dir, name, |r, _, _| {
            dtype = r.dtype;
            r.name == name
        })?;
        Ok(found.map(|f| (f.key, f.ino, dtype)))
    }

    /// The name of the entry with exactly `key` (for `getcwd`).
    pub(crate) fn dir_name_of(&self, dir: &Inode, key: u64) -> Result<Option<Vec<u8>>> {
        if dir.map[0] == 0 {
            return Ok(None);
        }
        let leaf = self.find_leaf(dir.map[0], key)?.leaf;
        let b = self.meta(leaf)?;
        let i = leaf_lower_bound(b, key).map_err(corrupt)?;
        if i < node_count(b) {
            let r = leaf_rec(b, i).map_err(corrupt)?;
            if r.key == key {
                return Ok(Some(r.name.to_vec()));
            }
        }
        Ok(None)
    }

    /// Adds `name -> ino`; EEXIST if present. Updates `dir` (root, blocks,
    /// size, entries) in memory; the caller writes it back. Returns the key.
    /// A name `check_name` refuses never reaches a leaf.
    pub(crate) fn dir_insert(
        &mut self,
        dino: Ino,
        dir: &mut Inode,
        name: &[u8],
        ino: Ino,
        dtype: u8,
    ) -> Result<u64> {
        check_name(name)?;
        let base = self.name_key(name);
        let mut used_seqs: u16 = 0;
        let mut exists = false;
        self.scan_group(dir, name, |r, _, _| {
            used_seqs |= 1 << (r.key & SEQ_MASK);
            exists |= r.name == name;
            exists
        })?;
        if exists {
            return Err(Errno::EEXIST);
        }
        if used_seqs == u16::MAX {
            // 16 names sharing 57 hash bits under a secret seed: not a
            // real-world case, but refuse rather than mis-index.
            return Err(Errno::ENOSPC);
        }
        let key = base | (!used_seqs).trailing_zeros() as u64;
        if dir.map[0] == 0 {
            let leaf = self.alloc_meta(0, MAGIC_DIR_LEAF)?;
            leaf_init(self.meta_mut(leaf)?, dino);
            dir.map[0] = leaf;
            dir.blocks = dir.blocks.saturating_add(1);
        }
        let path = self.find_leaf(dir.map[0], key)?;
        let rec = Rec {
            key,
            ino,
            dtype,
            name,
        };
        self.leaf_put(dino, dir, path, &rec)?;
        dir.entries = dir.entries.saturating_add(1);
        dir.size = dir.blocks.saturating_mul(BLOCK_SIZE as u64);
        Ok(key)
    }

    /// Inserts into the leaf at the end of `path`, compacting or splitting.
    fn leaf_put(&mut self, dino: Ino, dir: &mut Inode, path: TreePath, rec: &Rec) -> Result<()> {
        let leaf = path.leaf;
        let b = self.meta_mut(leaf)?;
        let i = leaf_lower_bound(b, rec.key).map_err(corrupt)?;
        if leaf_insert(b, i, rec) {
            return Ok(());
        }
        // Gather live records (owned: the block is about to be rewritten).
        let mut recs: Vec<OwnedRec> = Vec::with_capacity(node_count(b) + 1);
        for j in 0..node_count(b) {
            let r = leaf_rec(b, j).map_err(corrupt)?;
            recs.push((r.key, r.ino, r.dtype, r.name.to_vec()));
        }
        recs.insert(i, (rec.key, rec.ino, rec.dtype, rec.name.to_vec()));
        let foot = |r: &OwnedRec| {
            Rec {
                key: r.0,
                ino: r.1,
                dtype: r.2,
                name: &r.3,
            }
            .footprint()
        };
        let total: usize = recs.iter().map(foot).sum();
        if total <= LEAF_ROOM {
            leaf_rebuild(b, &as_recs(&recs));
            return Ok(());
        }
        // Split by bytes: the left half keeps the block (so the parent's
        // pointer stays right), the right half moves to a new leaf.
        let mut acc = 0;
        let mut cut = 0;
        while cut < recs.len() - 1 && acc + foot(&recs[cut]) <= total / 2 {
            acc += foot(&recs[cut]);
            cut += 1;
        }
        let cut = cut.max(1);
        let right = self.alloc_meta(leaf, MAGIC_DIR_LEAF)?;
        dir.blocks = dir.blocks.saturating_add(1);
        let old_next = leaf_next(self.meta(leaf)?);
        let rb = self.meta_mut(right)?;
        leaf_init(rb, dino);
        leaf_set_next(rb, old_next);
        leaf_rebuild(rb, &as_recs(&recs[cut..]));
        let lb = self.meta_mut(leaf)?;
        leaf_set_next(lb, right);
        leaf_rebuild(lb, &as_recs(&recs[..cut]));
        self.insert_up(dino, dir, &path.nodes[..path.len], recs[cut].0, right, 0)
    }

    /// Adds (sep, child) to the parent at the end of `up`; splits upward as
    /// needed, growing a new root when the old one splits. `child_level` is
    /// the level of `child`.
    fn insert_up(
        &mut self,
        dino: Ino,
        dir: &mut Inode,
        up: &[(Bid, usize)],
        sep: u64,
        child: Bid,
        child_level: u16,
    ) -> Result<()> {
        let Some((&(parent, idx), rest)) = up.split_last() else {
            let old_root = dir.map[0];
            let root = self.alloc_meta(old_root, MAGIC_DIR_INNER)?;
            dir.blocks = dir.blocks.saturating_add(1);
            let b = self.meta_mut(root)?;
            inner_init(b, dino, child_level + 1);
            inner_push(b, 0, old_root);
            inner_push(b, sep, child);
            dir.map[0] = root;
            return Ok(());
        };
        let b = self.meta_mut(parent)?;
        let level = inner_level(b);
        if inner_insert(b, idx + 1, sep, child) {
            return Ok(());
        }
        let mut entries = inner_truncate(b, 0);
        entries.insert(idx + 1, (sep, child));
        let half = entries.len() / 2;
        for &(k, c) in &entries[..half] {
            inner_push(b, k, c);
        }
        let right = self.alloc_meta(parent, MAGIC_DIR_INNER)?;
        dir.blocks = dir.blocks.saturating_add(1);
        let rb = self.meta_mut(right)?;
        inner_init(rb, dino, level);
        for &(k, c) in &entries[half..] {
            inner_push(rb, k, c);
        }
        self.insert_up(dino, dir, rest, entries[half].0, right, level)
    }

    /// Removes `name`; returns the inode it named. ENOENT if absent.
    pub(crate) fn dir_remove(&mut self, dir: &mut Inode, name: &[u8]) -> Result<Ino> {
        let f = self
            .scan_group(dir, name, |r, _, _| r.name == name)?
            .ok_or(Errno::ENOENT)?;
        leaf_remove(self.meta_mut(f.leaf)?, f.idx);
        dir.entries = dir.entries.saturating_sub(1);
        Ok(f.ino)
    }

    /// Points the existing entry `name` at another inode (rename over it).
    pub(crate) fn dir_repoint(
        &mut self,
        dir: &Inode,
        name: &[u8],
        ino: Ino,
        dtype: u8,
    ) -> Result<u64> {
        let f = self
            .scan_group(dir, name, |r, _, _| r.name == name)?
            .ok_or(Errno::ENOENT)?;
        leaf_set_ino(self.meta_mut(f.leaf)?, f.idx, ino, dtype);
        Ok(f.key)
    }

    /// Calls `f` for each entry with key >= `from`, in key order, until it
    /// returns false.
    pub(crate) fn dir_read(
        &self,
        dir: &Inode,
        from: u64,
        mut f: impl FnMut(DirItem) -> bool,
    ) -> Result<()> {
        if dir.map[0] == 0 {
            return Ok(());
        }
        let mut leaf = self.find_leaf(dir.map[0], from)?.leaf;
        let mut i = leaf_lower_bound(self.meta(leaf)?, from).map_err(corrupt)?;
        let mut last_key = from.saturating_sub(1);
        // Each leaf is visited once; a chain longer than the image has
        // blocks is a cycle of emptied leaves.
        for _ in 0..self.sb.total_blocks {
            let b = self.meta(leaf)?;
            while i < node_count(b) {
                let r = leaf_rec(b, i).map_err(corrupt)?;
                // Keys must grow along the chain; anything else is a damaged
                // (possibly cyclic) chain, and stopping is the only safe move.
                if r.key < last_key || !(KEY_BASE..=KEY_MAX).contains(&r.key) {
                    return Err(Errno::EUCLEAN);
                }
                last_key = r.key;
                if !f(DirItem {
                    key: r.key,
                    ino: r.ino,
                    dtype: r.dtype,
                    name: r.name,
                }) {
                    return Ok(());
                }
                i += 1;
            }
            let next = leaf_next(b);
            if next == 0 {
                return Ok(());
            }
            if next == leaf {
                return Err(Errno::EUCLEAN);
            }
            self.check_bid(next)?;
            leaf_check(self.meta(next)?).map_err(corrupt)?;
            leaf = next;
            i = 0;
        }
        Err(Errno::EUCLEAN)
    }

    /// Frees every block of a directory's tree (the directory is empty).
    pub(crate) fn dir_free_all(&mut self, dir: &mut Inode) -> Result<()> {
        if dir.map[0] != 0 {
            self.free_node(dir.map[0], MAX_DEPTH)?;
        }
        dir.map[0] = 0;
        dir.blocks = 0;
        dir.size = 0;
        Ok(())
    }

    fn free_node(&mut self, bid: Bid, budget: usize) -> Result<()> {
        self.check_bid(bid)?;
        let b = self.meta(bid)?;
        if magic(b) == MAGIC_DIR_INNER {
            inner_check(b).map_err(corrupt)?;
            if budget == 0 {
                return Err(Errno::EUCLEAN);
            }
            let children: Vec<Bid> = (0..node_count(b)).map(|i| inner_entry(b, i).1).collect();
            for c in children {
                self.free_node(c, budget - 1)?;
            }
        } else if magic(b) != MAGIC_DIR_LEAF {
            return Err(Errno::EUCLEAN);
        }
        self.free_block(bid)
    }

    /// Whether a directory has no entries besides `.` and `..`.
    pub(crate) fn dir_is_empty(&self, dir: &Inode) -> bool {
        dir.entries == 0
    }

    /// Visits every block of a directory's tree (for fsck).
    pub(crate) fn dir_blocks(&self, dir: &Inode, f: &mut dyn FnMut(Bid)) -> Result<()> {
        fn walk(v: &Volume, bid: Bid, budget: usize, f: &mut dyn FnMut(Bid)) -> Result<()> {
            v.check_bid(bid)?;
            f(bid);
            let b = v.meta(bid)?;
            match magic(b) {
                MAGIC_DIR_LEAF => leaf_check(b).map_err(corrupt),
                MAGIC_DIR_INNER if budget > 0 => {
                    inner_check(b).map_err(corrupt)?;
                    for i in 0..node_count(b) {
                        walk(v, inner_entry(b, i).1, budget - 1, f)?;
                    }
                    Ok(())
                }
                _ => Err(Errno::EUCLEAN),
            }
        }
        if dir.map[0] != 0 {
            walk(self, dir.map[0], MAX_DEPTH, f)?;
        }
        Ok(())
    }
}

/// Whether `name` may be a directory entry: 1 to NAME_MAX bytes, no `/`
/// or NUL, not `.` or `..`. Every entry the fs layer makes is checked
/// here, whoever calls it (the posix layer checks paths before, a FUSE
/// request comes with a name of up to 1,024 bytes): a longer name does
/// not fit a leaf record's one-byte length.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        Err(Errno::ENOENT)
    } else if name.len() > crate::format::NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}

/// The check for a name that is looked up rather than made: too long is
/// ENAMETOOLONG, as Linux's lookups say, anything else merely not found.
pub(crate) fn check_lookup_name(name: &[u8]) -> Result<()> {
    if name.len() > crate::format::NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

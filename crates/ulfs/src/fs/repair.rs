//! Repairs at the volume level, used by `fsck --repair`: the primitives
//! that put a damaged image's structures back in order, through the same
//! transactions as every other change (so in journal mode a repair is as
//! crash-safe as any operation).
//!
//! [`Volume::repair`] runs, in this order:
//!
//! 1. **Inode blocks.** The list of all inode blocks is walked; it is cut
//!    at the first link that does not lead to an unused inode block (a
//!    loop, a pointer outside the data area, a wrong magic). Used slots
//!    that do not hold a valid inode are freed. The free-slot list and the
//!    inode counters are rebuilt from the slot bitmaps.
//! 2. **Ownership.** Every block is given to at most one owner, in a fixed
//!    order: superblocks and journal region, map blocks, inode blocks,
//!    directory indexes (directories in inode order), then the block maps
//!    of files and long symlinks (in inode order). A block referenced
//!    again later, or a pointer outside the data area, or an indirect
//!    block with the wrong magic, is cut from the later owner: the pointer
//!    becomes a hole (reads as zeros). The first owner keeps the bytes; we
//!    do not copy them, since nothing tells whose bytes they are.
//! 3. **Directory indexes.** An index that breaks any rule (node kind,
//!    owner, level, key order and ranges, hash placement, leaf chain,
//!    entry and block counts, a node also used elsewhere) is rebuilt: the
//!    records of every leaf reachable through the tree or the leaf chain
//!    are read (each record checked on its own), the directory gets a
//!    fresh, empty index, and the records are inserted again, dropping
//!    invalid names, dead inodes and duplicate names.
//! 4. **Bitmaps.** Every group's map block is rewritten from the set of
//!    owned blocks (leaks freed, used blocks marked, free counts exact),
//!    and the superblock's free count with them. A checkpoint follows, so
//!    blocks freed here are reused only after it.
//! 5. **Namespace.** A walk from the root drops entries naming dead
//!    inodes, second links to a directory, and fixes `d_type`, parent
//!    pointers and name keys. Live inodes it does not reach are attached
//!    under `/lost+found` (made with mode 0700 when missing) as `#<ino>`,
//!    topmost directory of an unreachable subtree first.
//! 6. **Link counts**: the number of entries naming an inode; 2 plus its
//!    subdirectories for a directory.
//! 7. **Checksums**: every reachable metadata block whose CRC does not
//!    match is written through the transaction, so the next checkpoint
//!    seals it (after a crash in mode `none`, blocks changed since the last
//!    checkpoint carry stale CRCs).

use super::Volume;
use super::dir::KEY_BASE;
use super::dtype_of;
use crate::errno::{Errno, Result};
use crate::format::dirnode::*;
use crate::format::inode::{FLAG_INLINE, Inode};
use crate::format::*;
use crate::types::{DT_DIR, DT_UNKNOWN, Ino};
use std::collections::{HashMap, HashSet};

/// Deepest directory index (as `dir.rs` builds and accepts).
const MAX_INDEX_DEPTH: u32 = 8;
const P: usize = PTRS_PER_BLOCK as usize;
/// Most log lines kept; further fixes are counted.
const LOG_MAX: usize = 1000;
/// Operations per transaction while rebuilding, so that a large repair
/// does not become one huge transaction.
const BATCH: usize = 256;

/// What a repair did, and what it found but could not do.
#[derive(Debug, Default)]
pub(crate) struct RepairLog {
    pub fixed: Vec<String>,
    pub unfixed: Vec<String>,
    more: usize,
    resealed: u64,
}

impl RepairLog {
    fn fix(&mut self, msg: String) {
        if self.fixed.len() < LOG_MAX {
            self.fixed.push(msg);
        } else {
            self.more += 1;
        }
    }

    fn cannot(&mut self, msg: String) {
        if self.unfixed.len() < LOG_MAX {
            self.unfixed.push(msg);
        }
    }

    /// Adds the summary lines (checksums resealed, fixes not listed).
    fn finish(&mut self) {
        if self.resealed > 0 {
            let n = self.resealed;
            self.fixed.push(format!(
                "resealed the stale checksum of {n} metadata block{}",
                if n == 1 { "" } else { "s" }
            ));
            self.resealed = 0;
        }
        if self.more > 0 {
            self.fixed
                .push(format!("... and {} more fixes not listed", self.more));
            self.more = 0;
        }
    }
}

/// One bit per block of the image: which blocks have an owner.
struct Claims {
    bits: Vec<u64>,
    total: u64,
}

impl Claims {
    fn new(total: u64) -> Claims {
        Claims {
            bits: vec![0; (total as usize).div_ceil(64)],
            total,
        }
    }

    fn has(&self, bid: Bid) -> bool {
        (bid as u64) < self.total && self.bits[bid as usize / 64] & (1 << (bid % 64)) != 0
    }

    /// Gives `bid` an owner; false if it has one already or is outside.
    fn take(&mut self, bid: Bid) -> bool {
        if bid as u64 >= self.total || self.has(bid) {
            return false;
        }
        self.bits[bid as usize / 64] |= 1 << (bid % 64);
        true
    }
}

/// What the repair knows of one live inode.
#[derive(Clone, Copy)]
struct Facts {
    dtype: u8,
    /// Directory entries naming it (the root counts as named once).
    refs: u32,
    subdirs: u32,
}

/// State of one repair run.
struct Repair {
    claims: Claims,
    facts: HashMap<Ino, Facts>,
    /// Live inodes, in the order of the inode-block list.
    live: Vec<Ino>,
    /// Directories whose index is rebuilt: (directory, why, salvaged
    /// records).
    rebuild: Vec<(Ino, String, Vec<Salvaged>)>,
}

/// A record read from a damaged index: (name, inode).
type Salvaged = (Vec<u8>, Ino);

/// What the strict walk of a directory index gathers.
#[derive(Default)]
struct IndexWalk {
    nodes: Vec<Bid>,
    leaves: Vec<Bid>,
    seen: HashSet<Bid>,
    records: u64,
    last_key: Option<u64>,
    /// Names of the current collision group (same key base), to catch
    /// duplicate names.
    group: (u64, Vec<Vec<u8>>),
}

/// A name a directory entry may carry.
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&c| c == b'/' || c == 0)
}

fn shown(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

impl Volume {
    /// Repairs the mounted (read-write) volume; see the module comment for
    /// what is fixed and in which order. `progress` gets (done, total).
    /// Returns what was done, and `Err` if the repair had to stop (what it
    /// fixed until then is in the log and on the image).
    pub(crate) fn repair(&mut self, progress: &mut dyn FnMut(u64, u64)) -> (RepairLog, Result<()>) {
        let mut log = RepairLog::default();
        let res = self.repair_all(&mut log, progress);
        log.finish();
        (log, res)
    }

    fn repair_all(
        &mut self,
        log: &mut RepairLog,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        self.writable()?;
        let mut r = Repair {
            claims: Claims::new(self.sb.total_blocks),
            facts: HashMap::new(),
            live: Vec::new(),
            rebuild: Vec::new(),
        };
        for bid in 0..self.sb.first_group {
            r.claims.take(bid);
        }
        for g in 0..self.sb.group_count {
            r.claims.take(self.sb.map_bid(g));
        }
        self.repair_inode_blocks(&mut r, log)?;
        self.repair_inode_lists(log)?;
        self.commit()?;

        // Ownership: directory indexes first, then file block maps.
        let total = r.live.len() as u64 * 2;
        let mut done = 0u64;
        for ino in r.live.clone() {
            if r.facts[&ino].dtype == DT_DIR {
                self.repair_claim_dir(&mut r, ino, log)?;
            }
            done += 1;
            if done.is_multiple_of(4096) {
                progress(done, total);
            }
        }
        for ino in r.live.clone() {
            if r.facts[&ino].dtype != DT_DIR {
                self.repair_claim_file(&mut r, ino, log)?;
                self.commit()?;
            }
            done += 1;
            if done.is_multiple_of(4096) {
                progress(done, total);
            }
        }
        self.repair_bitmaps(&r.claims, log)?;
        // Blocks freed above may be handed out by what follows: make the
        // new bitmaps durable first.
        self.commit()?;
        self.sync()?;

        for (dino, why, recs) in std::mem::take(&mut r.rebuild) {
            self.rebuild_dir(&r, dino, &why, recs, log)?;
        }
        let root = self.sb.root_ino;
        let root_ok = r.facts.get(&root).is_some_and(|f| f.dtype == DT_DIR);
        if !root_ok {
            log.cannot(format!(
                "root inode {root} is not a live directory: the namespace cannot be rebuilt"
            ));
        } else {
            if let Some(f) = r.facts.get_mut(&root) {
                f.refs = 1;
            }
            self.repair_walk(&mut r, root, log)?;
            self.repair_lost_found(&mut r, log)?;
            self.repair_links(&r, log)?;
        }
        self.repair_inode_lists(log)?;
        self.commit()?;
        progress(total, total);
        Ok(())
    }

    /// Marks a metadata block for resealing if its checksum is stale.
    fn reseal_if_stale(&mut self, bid: Bid, log: &mut RepairLog) -> Result<()> {
        if !block_crc_ok(self.meta(bid)?) {
            self.meta_mut(bid)?;
            log.resealed += 1;
        }
        Ok(())
    }

    /// Step 1: the list of all inode blocks and their slots.
    fn repair_inode_blocks(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        let mut prev: Bid = 0;
        let mut bid = self.sb.inode_all_head;
        while bid != 0 {
            let usable = self.check_bid(bid).is_ok()
                && magic(self.meta(bid)?) == MAGIC_INODES
                && r.claims.take(bid);
            if !usable {
                if prev == 0 {
                    self.sb.inode_all_head = 0;
                    self.sb_dirty = true;
                } else {
                    put_u32(self.meta_mut(prev)?, IBLK_NEXT_ALL, 0);
                }
                log.fix(format!(
                    "inode block list: cut before block {bid}, which is not a usable inode block"
                ));
                break;
            }
            self.reseal_if_stale(bid, log)?;
            let b = self.meta(bid)?;
            let was = get_u16(b, IBLK_USED);
            let next = get_u32(b, IBLK_NEXT_ALL);
            let mut used = was | 1;
            for slot in 1..INODES_PER_BLOCK {
                if used & (1 << slot) == 0 {
                    continue;
                }
                let ino = ino_of(bid, slot);
                let off = slot as usize * INODE_SIZE;
                let inode = Inode::decode(&self.meta(bid)?[off..off + INODE_SIZE]);
                let dtype = dtype_of(inode.mode);
                if dtype == DT_UNKNOWN {
                    used &= !(1 << slot);
                    self.meta_mut(bid)?[off..off + INODE_SIZE].fill(0);
                    log.fix(format!(
                        "inode {ino}: slot in use but not a valid inode (mode {:#o}): freed",
                        inode.mode
                    ));
                    continue;
                }
                r.facts.insert(
                    ino,
                    Facts {
                        dtype,
                        refs: 0,
                        subdirs: 0,
                    },
                );
                r.live.push(ino);
            }
            if used != was {
                put_u16(self.meta_mut(bid)?, IBLK_USED, used);
            }
            prev = bid;
            bid = next;
        }
        Ok(())
    }

    /// The free-slot list and the inode counters, from the slot bitmaps of
    /// the (already sane) list of all inode blocks.
    fn repair_inode_lists(&mut self, log: &mut RepairLog) -> Result<()> {
        let mut all = Vec::new();
        let (mut used, mut free) = (0u64, 0u64);
        let mut bid = self.sb.inode_all_head;
        while bid != 0 && (all.len() as u64) < self.sb.total_blocks {
            let b = self.meta(bid)?;
            let bits = get_u16(b, IBLK_USED);
            let n = (bits >> 1).count_ones() as u64;
            used += n;
            free += INODES_PER_BLOCK - 1 - n;
            all.push((bid, bits != IBLK_FULL));
            bid = get_u32(b, IBLK_NEXT_ALL);
        }
        let want: HashSet<Bid> = all.iter().filter(|x| x.1).map(|x| x.0).collect();
        // The existing list is kept when it holds exactly the blocks with a
        // free slot, each once.
        let mut seen = HashSet::new();
        let mut cur = self.sb.inode_free_head;
        let mut sound = true;
        while cur != 0 {
            if !want.contains(&cur) || !seen.insert(cur) {
                sound = false;
                break;
            }
            cur = get_u32(self.meta(cur)?, IBLK_NEXT_FREE);
        }
        if !sound || seen.len() != want.len() {
            let members: Vec<Bid> = all.iter().filter(|x| x.1).map(|x| x.0).collect();
            for (i, &m) in members.iter().enumerate() {
                let next = members.get(i + 1).copied().unwrap_or(0);
                if get_u32(self.meta(m)?, IBLK_NEXT_FREE) != next {
                    put_u32(self.meta_mut(m)?, IBLK_NEXT_FREE, next);
                }
            }
            self.sb.inode_free_head = members.first().copied().unwrap_or(0);
            self.sb_dirty = true;
            log.fix(format!(
                "inode free-slot list rebuilt ({} blocks with a free slot)",
                members.len()
            ));
        }
        if self.sb.used_inodes != used || self.sb.free_inodes != free {
            log.fix(format!(
                "superblock inode counts {} used / {} free set to {used} / {free}",
                self.sb.used_inodes, self.sb.free_inodes
            ));
            self.sb.used_inodes = used;
            self.sb.free_inodes = free;
            self.sb_dirty = true;
        }
        Ok(())
    }

    /// Step 2 for a directory: claims a sound index, or salvages the
    /// records of a damaged one for rebuilding.
    fn repair_claim_dir(&mut self, r: &mut Repair, dino: Ino, log: &mut RepairLog) -> Result<()> {
        let d = self.inode(dino)?;
        match self.index_sound(dino, &d, &r.claims) {
            Ok(nodes) => {
                for n in nodes {
                    r.claims.take(n);
                    self.reseal_if_stale(n, log)?;
                }
            }
            Err(why) => {
                let recs = self.salvage_dir(dino, &d);
                r.rebuild.push((dino, why, recs));
            }
        }
        Ok(())
    }

    /// Checks a directory's index against every rule; returns its nodes
    /// when it is sound, else why not.
    fn index_sound(
        &self,
        dino: Ino,
        d: &Inode,
        claims: &Claims,
    ) -> std::result::Result<Vec<Bid>, String> {
        if d.map[1..].iter().any(|&p| p != 0) {
            return Err("stray block pointers in the directory inode".into());
        }
        let mut w = IndexWalk::default();
        if d.map[0] != 0 {
            self.index_walk(dino, d.map[0], (0, u64::MAX), None, 0, &mut w, claims)?;
            for (i, &leaf) in w.leaves.iter().enumerate() {
                let want = w.leaves.get(i + 1).copied().unwrap_or(0);
                let next = self.meta(leaf).map(leaf_next).unwrap_or(0);
                if next != want {
                    return Err(format!("leaf chain broken after leaf {leaf}"));
                }
            }
        }
        if w.records != d.entries {
            return Err(format!(
                "records {} entries, the index holds {}",
                d.entries, w.records
            ));
        }
        if w.nodes.len() as u64 != d.blocks || d.size != d.blocks * BLOCK_SIZE as u64 {
            return Err(format!(
                "records {} blocks and size {}, the index has {} nodes",
                d.blocks,
                d.size,
                w.nodes.len()
            ));
        }
        Ok(w.nodes)
    }

    #[allow(clippy::too_many_arguments)]
    fn index_walk(
        &self,
        dino: Ino,
        bid: Bid,
        (lo, hi): (u64, u64),
        want_level: Option<u16>,
        depth: u32,
        w: &mut IndexWalk,
        claims: &Claims,
    ) -> std::result::Result<(), String> {
        if depth >= MAX_INDEX_DEPTH {
            return Err("index deeper than possible".into());
        }
        if self.check_bid(bid).is_err() {
            return Err(format!("index pointer {bid} outside the data area"));
        }
        if claims.has(bid) || !w.seen.insert(bid) {
            return Err(format!("index block {bid} is also used elsewhere"));
        }
        let b = self
            .meta(bid)
            .map_err(|e| format!("index block {bid} unreadable ({e})"))?;
        if get_u64(b, NODE_OWNER) != dino {
            return Err(format!(
                "index block {bid} belongs to inode {}",
                get_u64(b, NODE_OWNER)
            ));
        }
        w.nodes.push(bid);
        match magic(b) {
            MAGIC_DIR_LEAF => {
                if want_level.is_some_and(|l| l != 0) {
                    return Err(format!("leaf {bid} at the wrong depth"));
                }
                leaf_check(b).map_err(|e| format!("leaf {bid}: {e}"))?;
                for i in 0..node_count(b) {
                    let rec = leaf_rec(b, i).map_err(|e| format!("leaf {bid}: {e}"))?;
                    let key = rec.key;
                    if key < lo || key >= hi {
                        return Err(format!("leaf {bid} holds a key outside its range"));
                    }
                    if key >> 61 != KEY_BASE >> 61 {
                        return Err(format!("leaf {bid} holds a malformed key"));
                    }
                    if !valid_name(rec.name) {
                        return Err(format!("leaf {bid} holds an invalid name"));
                    }
                    if self.name_key(rec.name) != key & !0xF {
                        return Err(format!(
                            "entry {} is filed under the wrong hash",
                            shown(rec.name)
                        ));
                    }
                    if w.last_key.is_some_and(|last| key <= last) {
                        return Err("keys out of order".into());
                    }
                    if w.group.0 != key & !0xF {
                        w.group = (key & !0xF, Vec::new());
                    }
                    if w.group.1.iter().any(|n| n == rec.name) {
                        return Err(format!("name {} appears twice", shown(rec.name)));
                    }
                    w.group.1.push(rec.name.to_vec());
                    w.last_key = Some(key);
                    w.records += 1;
                }
                w.leaves.push(bid);
                Ok(())
            }
            MAGIC_DIR_INNER => {
                inner_check(b).map_err(|e| format!("index node {bid}: {e}"))?;
                let level = inner_level(b);
                if want_level.is_some_and(|l| l != level) {
                    return Err(format!("index node {bid} at the wrong level"));
                }
                let entries: Vec<(u64, Bid)> =
                    (0..node_count(b)).map(|i| inner_entry(b, i)).collect();
                for (i, &(k, child)) in entries.iter().enumerate() {
                    let k = if i == 0 { lo } else { k };
                    let next = entries.get(i + 1).map_or(hi, |e| e.0);
                    if k > next || k < lo || next > hi {
                        return Err(format!("index node {bid} keys out of order"));
                    }
                    self.index_walk(
                        dino,
                        child,
                        (k, next),
                        Some(level - 1),
                        depth + 1,
                        w,
                        claims,
                    )?;
                }
                Ok(())
            }
            _ => Err(format!("block {bid} is not an index node")),
        }
    }

    /// Reads every record that can be read from a damaged index: the
    /// leaves reachable through the tree and through the leaf chain, each
    /// record checked on its own. Returns (name, inode) pairs.
    fn salvage_dir(&self, dino: Ino, d: &Inode) -> Vec<Salvaged> {
        let mut seen = HashSet::new();
        let mut leaves = Vec::new();
        let is_ours = |bid: Bid| -> Option<&Block> {
            let b = self.meta(self.check_bid(bid).ok()?).ok()?;
            (get_u64(b, NODE_OWNER) == dino).then_some(b)
        };
        let mut stack = vec![(d.map[0], 0u32)];
        while let Some((bid, depth)) = stack.pop() {
            if bid == 0 || depth > MAX_INDEX_DEPTH || !seen.insert(bid) {
                continue;
            }
            let Some(b) = is_ours(bid) else { continue };
            match magic(b) {
                MAGIC_DIR_LEAF => leaves.push(bid),
                MAGIC_DIR_INNER => {
                    for i in 0..node_count(b).min(INNER_CAP) {
                        stack.push((inner_entry(b, i).1, depth + 1));
                    }
                }
                _ => {}
            }
        }
        let mut i = 0;
        while i < leaves.len() {
            if let Some(b) = is_ours(leaves[i]) {
                let next = leaf_next(b);
                if next != 0
                    && is_ours(next).is_some_and(|n| magic(n) == MAGIC_DIR_LEAF)
                    && seen.insert(next)
                {
                    leaves.push(next);
                }
            }
            i += 1;
        }
        let mut out = Vec::new();
        for leaf in leaves {
            let Some(b) = is_ours(leaf) else { continue };
            let count = node_count(b).min((BLOCK_SIZE - NODE_HDR) / 2);
            for i in 0..count {
                let off = get_u16(b, NODE_HDR + 2 * i) as usize;
                if off < NODE_HDR || off + REC_NAME > BLOCK_SIZE {
                    continue;
                }
                let len = b[off + REC_NLEN] as usize;
                if off + REC_NAME + len > BLOCK_SIZE {
                    continue;
                }
                let name = &b[off + REC_NAME..off + REC_NAME + len];
                out.push((name.to_vec(), get_u64(b, off + REC_INO)));
            }
        }
        out
    }

    /// Step 2 for a file or long symlink: claims its block map, cutting
    /// pointers that cannot stand, and fixes its block count.
    fn repair_claim_file(&mut self, r: &mut Repair, ino: Ino, log: &mut RepairLog) -> Result<()> {
        let mut inode = self.inode(ino)?;
        let mut count = 0u64;
        let mut cut = 0u64;
        if !(inode.is_symlink() && inode.flags & FLAG_INLINE != 0) {
            for i in 0..N_DIRECT {
                let p = inode.map[i];
                if p == 0 {
                    continue;
                }
                if self.check_bid(p).is_ok() && r.claims.take(p) {
                    count += 1;
                } else {
                    inode.map[i] = 0;
                    cut += 1;
                }
            }
            for (slot, depth) in [(N_DIRECT, 1), (N_DIRECT + 1, 2), (N_DIRECT + 2, 3)] {
                let p = inode.map[slot];
                if p == 0 {
                    continue;
                }
                if self.indirect_ok(p) && r.claims.take(p) {
                    count += 1 + self.repair_indirect(r, ino, p, depth, &mut cut, log)?;
                } else {
                    inode.map[slot] = 0;
                    cut += 1;
                }
            }
        }
        if cut > 0 {
            log.fix(format!(
                "inode {ino}: {cut} block pointer{} outside the image, to a wrong kind of block \
                 or to a block owned elsewhere cut (now holes)",
                if cut == 1 { "" } else { "s" }
            ));
        }
        let mut changed = cut > 0;
        if inode.blocks != count {
            log.fix(format!(
                "inode {ino}: block count {} set to {count}",
                inode.blocks
            ));
            inode.blocks = count;
            changed = true;
        }
        if changed {
            self.put_inode(ino, &inode)?;
        }
        Ok(())
    }

    fn indirect_ok(&self, bid: Bid) -> bool {
        self.check_bid(bid).is_ok() && self.meta(bid).is_ok_and(|b| magic(b) == MAGIC_INDIRECT)
    }

    /// Claims the subtree under indirect block `bid` (already claimed);
    /// returns the blocks it holds below itself.
    fn repair_indirect(
        &mut self,
        r: &mut Repair,
        ino: Ino,
        bid: Bid,
        depth: u32,
        cut: &mut u64,
        log: &mut RepairLog,
    ) -> Result<u64> {
        if get_u64(self.meta(bid)?, IND_OWNER) != ino {
            put_u64(self.meta_mut(bid)?, IND_OWNER, ino);
            log.fix(format!("inode {ino}: owner of indirect block {bid} set"));
        }
        self.reseal_if_stale(bid, log)?;
        let mut count = 0;
        for i in 0..P {
            let c = get_u32(self.meta(bid)?, IND_PTRS + 4 * i);
            if c == 0 {
                continue;
            }
            let ok = if depth > 1 {
                self.indirect_ok(c)
            } else {
                self.check_bid(c).is_ok()
            };
            if !ok || !r.claims.take(c) {
                put_u32(self.meta_mut(bid)?, IND_PTRS + 4 * i, 0);
                *cut += 1;
                continue;
            }
            count += 1;
            if depth > 1 {
                count += self.repair_indirect(r, ino, c, depth - 1, cut, log)?;
            }
        }
        Ok(count)
    }

    /// Step 4: every map block rewritten from the owned blocks.
    fn repair_bitmaps(&mut self, claims: &Claims, log: &mut RepairLog) -> Result<()> {
        let total = self.sb.total_blocks;
        let mut free_total = 0u64;
        for g in 0..self.sb.group_count {
            let map = self.sb.map_bid(g);
            let mut want = [0u8; BLOCK_SIZE];
            init_block(&mut want, MAGIC_MAP);
            put_u32(&mut want, MAP_GROUP, g);
            let mut free = 0u32;
            for i in 0..MAP_BITS {
                let bid = map as u64 + 1 + i as u64;
                if bid >= total || claims.has(bid as Bid) {
                    want[MAP_BITMAP + (i / 8) as usize] |= 1 << (i % 8);
                } else {
                    free += 1;
                }
            }
            put_u32(&mut want, MAP_FREE, free);
            free_total += free as u64;
            let cur = self.meta(map)?;
            let same =
                cur[..HDR_CRC] == want[..HDR_CRC] && cur[HDR_CRC + 4..] == want[HDR_CRC + 4..];
            if same {
                self.reseal_if_stale(map, log)?;
                continue;
            }
            if magic(cur) != MAGIC_MAP || get_u32(cur, MAP_GROUP) != g {
                log.fix(format!("group {g}: map block {map} rewritten (bad header)"));
            }
            let (mut leaked, mut unmarked) = (0u32, 0u32);
            for i in 0..MAP_BITS as usize {
                let (was, now) = (
                    cur[MAP_BITMAP + i / 8] & (1 << (i % 8)) != 0,
                    want[MAP_BITMAP + i / 8] & (1 << (i % 8)) != 0,
                );
                match (was, now) {
                    (true, false) => leaked += 1,
                    (false, true) => unmarked += 1,
                    _ => {}
                }
            }
            if leaked > 0 {
                log.fix(format!("group {g}: {leaked} leaked blocks freed"));
            }
            if unmarked > 0 {
                log.fix(format!(
                    "group {g}: {unmarked} referenced blocks marked used"
                ));
            }
            let recorded = get_u32(cur, MAP_FREE);
            if recorded != free {
                log.fix(format!("group {g}: free count {recorded} set to {free}"));
            }
            self.meta_mut(map)?.copy_from_slice(&want);
            self.commit()?;
        }
        if self.sb.free_blocks != free_total {
            log.fix(format!(
                "superblock free block count {} set to {free_total}",
                self.sb.free_blocks
            ));
            self.sb.free_blocks = free_total;
            self.sb_dirty = true;
        }
        self.alloc_group = 0;
        self.alloc_word = 0;
        Ok(())
    }

    /// Step 3: gives a directory a fresh index holding the salvaged records.
    fn rebuild_dir(
        &mut self,
        r: &Repair,
        dino: Ino,
        why: &str,
        recs: Vec<Salvaged>,
        log: &mut RepairLog,
    ) -> Result<()> {
        let mut d = self.inode(dino)?;
        d.map = [0; N_MAP];
        d.blocks = 0;
        d.size = 0;
        d.entries = 0;
        let (mut kept, mut dropped) = (0u64, 0u64);
        for (n, (name, ino)) in recs.into_iter().enumerate() {
            let Some(f) = r
                .facts
                .get(&ino)
                .filter(|_| valid_name(&name) && ino != dino)
            else {
                dropped += 1;
                continue;
            };
            match self.dir_insert(dino, &mut d, &name, ino, f.dtype) {
                Ok(_) => kept += 1,
                Err(Errno::EEXIST) | Err(Errno::ENOSPC) => dropped += 1,
                Err(e) => return Err(e),
            }
            if n % BATCH == BATCH - 1 {
                self.put_inode(dino, &d)?;
                self.commit()?;
            }
        }
        self.put_inode(dino, &d)?;
        self.commit()?;
        log.fix(format!(
            "directory {dino}: index damaged ({why}); rebuilt with {kept} entries{}",
            if dropped > 0 {
                format!(", {dropped} invalid or duplicate records dropped")
            } else {
                String::new()
            }
        ));
        Ok(())
    }

    /// Step 5: walks the namespace from `top`, counting links and fixing
    /// entries, parent pointers and name keys on the way.
    fn repair_walk(&mut self, r: &mut Repair, top: Ino, log: &mut RepairLog) -> Result<()> {
        let root = self.sb.root_ino;
        let mut stack = vec![top];
        while let Some(dir) = stack.pop() {
            let mut items = Vec::new();
            let res = self.read_dir(dir, 0, |it| {
                items.push((it.name.to_vec(), it.key, it.ino, it.dtype));
                true
            });
            if let Err(e) = res {
                log.cannot(format!("directory {dir}: index unreadable ({e})"));
                continue;
            }
            let mut d = self.inode(dir)?;
            let mut removed = false;
            for (name, key, ino, dtype) in items {
                let f = r.facts.get(&ino).copied();
                let why = match f {
                    None => Some("names a free or invalid inode"),
                    Some(f) if f.dtype == DT_DIR && (ino == root || f.refs > 0) => {
                        Some("is a second link to a directory")
                    }
                    Some(_) if !valid_name(&name) => Some("has an invalid name"),
                    Some(_) => None,
                };
                let Some(f) = f.filter(|_| why.is_none()) else {
                    self.dir_remove(&mut d, &name)?;
                    removed = true;
                    log.fix(format!(
                        "directory {dir}: entry {} {} (inode {ino}): removed",
                        shown(&name),
                        why.unwrap_or_default()
                    ));
                    continue;
                };
                if dtype != f.dtype {
                    self.dir_repoint(&d, &name, ino, f.dtype)?;
                    log.fix(format!(
                        "directory {dir}: entry {}: d_type set to {}",
                        shown(&name),
                        f.dtype
                    ));
                }
                if let Some(fe) = r.facts.get_mut(&ino) {
                    fe.refs += 1;
                }
                if f.dtype == DT_DIR {
                    if let Some(fd) = r.facts.get_mut(&dir) {
                        fd.subdirs += 1;
                    }
                    let mut c = self.inode(ino)?;
                    if c.parent != dir || c.name_key != key {
                        log.fix(format!(
                            "directory {ino} ({}): parent pointer and name key set",
                            shown(&name)
                        ));
                        c.parent = dir;
                        c.name_key = key;
                        self.put_inode(ino, &c)?;
                    }
                    stack.push(ino);
                }
            }
            if removed {
                self.put_inode(dir, &d)?;
            }
            self.commit()?;
        }
        Ok(())
    }

    /// Step 5, continued: live inodes nothing reaches go to /lost+found.
    fn repair_lost_found(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        let root = self.sb.root_ino;
        let unreached: Vec<Ino> = r
            .live
            .iter()
            .copied()
            .filter(|i| *i != root && r.facts[i].refs == 0)
            .collect();
        if unreached.is_empty() {
            return Ok(());
        }
        let lf = match self.lookup(root, b"lost+found") {
            Ok(ino) if r.facts.get(&ino).is_some_and(|f| f.dtype == DT_DIR) => ino,
            Ok(_) => {
                log.cannot(format!(
                    "/lost+found is not a directory: {} unreachable inodes left unattached",
                    unreached.len()
                ));
                return Ok(());
            }
            Err(Errno::ENOENT) => {
                let ino = self.create(root, b"lost+found", libc::S_IFDIR | 0o700, 0, 0, b"")?;
                r.facts.insert(
                    ino,
                    Facts {
                        dtype: DT_DIR,
                        refs: 1,
                        subdirs: 0,
                    },
                );
                r.live.push(ino);
                if let Some(f) = r.facts.get_mut(&root) {
                    f.subdirs += 1;
                }
                log.fix("created /lost+found".into());
                ino
            }
            Err(e) => return Err(e),
        };
        // Directories first, each at the top of its unreachable subtree, so
        // that what hangs below it keeps its place.
        for &u in &unreached {
            if r.facts[&u].dtype != DT_DIR || r.facts[&u].refs > 0 {
                continue;
            }
            let mut top = u;
            for _ in 0..unreached.len() {
                let p = self.inode(top)?.parent;
                let climb = p != top
                    && p != root
                    && r.facts
                        .get(&p)
                        .is_some_and(|f| f.dtype == DT_DIR && f.refs == 0);
                if !climb {
                    break;
                }
                top = p;
            }
            self.attach(r, lf, top, log)?;
            self.repair_walk(r, top, log)?;
        }
        for &u in &unreached {
            if r.facts[&u].refs == 0 {
                self.attach(r, lf, u, log)?;
            }
        }
        Ok(())
    }

    /// Links `ino` into lost+found as `#<ino>`.
    fn attach(&mut self, r: &mut Repair, lf: Ino, ino: Ino, log: &mut RepairLog) -> Result<()> {
        let dtype = r.facts[&ino].dtype;
        let mut l = self.inode(lf)?;
        let mut name = format!("#{ino}");
        let mut n = 0;
        let key = loop {
            match self.dir_insert(lf, &mut l, name.as_bytes(), ino, dtype) {
                Ok(k) => break k,
                Err(Errno::EEXIST) if n < 100 => {
                    n += 1;
                    name = format!("#{ino}.{n}");
                }
                Err(e) => return Err(e),
            }
        };
        self.put_inode(lf, &l)?;
        if let Some(f) = r.facts.get_mut(&ino) {
            f.refs += 1;
        }
        if dtype == DT_DIR {
            if let Some(f) = r.facts.get_mut(&lf) {
                f.subdirs += 1;
            }
            let mut c = self.inode(ino)?;
            c.parent = lf;
            c.name_key = key;
            self.put_inode(ino, &c)?;
        }
        self.commit()?;
        log.fix(format!(
            "inode {ino} was unreachable: attached as /lost+found/{name}"
        ));
        Ok(())
    }

    /// Step 6: link counts, and the root's parent pointer.
    fn repair_links(&mut self, r: &Repair, log: &mut RepairLog) -> Result<()> {
        let root = self.sb.root_ino;
        for (n, &ino) in r.live.iter().enumerate() {
            let f = r.facts[&ino];
            if f.refs == 0 {
                continue;
            }
            let want = if f.dtype == DT_DIR {
                2u32.saturating_add(f.subdirs)
            } else {
                f.refs
            };
            let mut i = self.inode(ino)?;
            let mut changed = false;
            if i.nlink != want {
                log.fix(format!("inode {ino}: link count {} set to {want}", i.nlink));
                i.nlink = want;
                changed = true;
            }
            if ino == root && (i.parent != root || i.name_key != 0) {
                log.fix("root directory: parent pointer set to itself".into());
                i.parent = root;
                i.name_key = 0;
                changed = true;
            }
            if changed {
                self.put_inode(ino, &i)?;
            }
            if n % BATCH == BATCH - 1 {
                self.commit()?;
            }
        }
        Ok(())
    }
}

//! Repairs at the volume level, used by `fsck --repair`: the primitives
//! that put a damaged image's structures back in order, through the same
//! transactions as every other change (so in journal mode a repair is as
//! crash-safe as any operation).
//!
//! [`Volume::repair`] runs, in this order:
//!
//! 1. **Inode blocks.** The list of all inode blocks is followed while it
//!    is sound. The inode blocks it lost are found again (`inode_list.rs`:
//!    from the entries naming their inodes, and by scanning the data area
//!    by header and checksum where the list breaks, leaving out blocks that
//!    a live inode references as data), a block the list trusted that lost
//!    its header gets a new one, and the list is relinked. Used slots that fail `Inode::validate` are quarantined:
//!    cleared (their entries go in step 5), never resealed as they are.
//!    The free-slot list and the inode counters are rebuilt from the slot
//!    bitmaps.
//! 2. **Ownership.** Every block is given to at most one owner, in a fixed
//!    order: superblocks and journal region, map blocks, inode blocks,
//!    then the inodes whose inode block carries a valid checksum before the
//!    others (so a damaged inode cannot take a block from one that reads
//!    fine), each group directory indexes first, then block maps of files
//!    and long symlinks, in inode order (block maps with the walk fsck
//!    uses too, `bmap_walk.rs`). A data block mapped again by a
//!    later owner is copied for it after step 4, from the bytes the
//!    first check kept (so both read what they read before, even when the
//!    repair changed the block for its first owner). A pointer outside the data area or at a map block, an
//!    indirect block with the wrong magic, or an indirect block or index
//!    node used twice, is cut from the later owner: the pointer becomes a
//!    hole (reads as zeros).
//! 3. **Directory indexes.** An index that breaks any rule (node kind,
//!    owner, level, key order and ranges, hash placement, leaf chain,
//!    entry and block counts, a node also used elsewhere) is rebuilt: the
//!    records of every leaf reachable through the tree or the leaf chain
//!    are read (each record checked on its own), then those of unowned
//!    leaves marked in use whose owner field names the directory (found by
//!    scanning: a damaged index pointer must not cost the entries), the
//!    directory gets a fresh, empty index, and the records are inserted
//!    again, dropping invalid names, dead inodes and duplicate names.
//! 4. **Bitmaps.** Every group's map block is rewritten from the set of
//!    owned blocks (used blocks marked, free counts exact), and the
//!    superblock's free count with them. Blocks marked used that nothing
//!    owns are freed as leaks only when nothing was lost on the way; when
//!    something that may have owned blocks was lost (a quarantined inode, a
//!    broken inode-block list, a cut pointer, a damaged block that had to
//!    be trusted), they are kept (but for blocks of zeros, which hold
//!    nothing), and step 5 gives them to files in `/lost+found`. A checkpoint follows, so blocks freed here are reused
//!    only after it.
//! 5. **Namespace.** A walk from the root, judged by the rules fsck uses
//!    (`ns_walk.rs`), drops entries naming dead
//!    inodes, second links to a directory, and fixes `d_type`, parent
//!    pointers and name keys. The orphan list keeps only true orphans
//!    (`orphan_walk.rs`). A directory whose inode was lost is made again
//!    as `/lost+found/#<old ino>` from the leaves that name it as owner,
//!    so what it held keeps its names. Live inodes still not reached are
//!    attached under `/lost+found` (made with mode 0700 when missing) as `#<ino>`,
//!    topmost directory of an unreachable subtree first. Blocks kept in
//!    step 4 become `/lost+found/#blocks-<first block>`, regular files of
//!    up to 1032 blocks each, in block order.
//! 6. **Link counts**: the number of entries naming an inode; 2 plus its
//!    subdirectories for a directory.
//! 7. **Checksums**: every reachable metadata block whose CRC does not
//!    match is written through the transaction, so the next checkpoint
//!    seals it (after a crash in mode `none`, blocks changed since the last
//!    checkpoint carry stale CRCs).

mod bmap_walk;
mod index;
mod inode_list;
pub(crate) mod ns_walk;
pub(crate) use ns_walk as ns;
pub(crate) mod orphan_walk;
pub(crate) use orphan_walk as orphans;

use super::Volume;
use super::dtype_of;
use crate::errno::{Errno, Result};
use crate::format::dirnode::*;
use crate::format::inode::Inode;
use crate::format::superblock::INCOMPAT_SPECIAL_FILES;
use crate::format::*;
use crate::types::{DT_DIR, Ino};
pub(crate) use index::{shown, valid_name};
use std::collections::{HashMap, HashSet};

use bmap_walk::PtrAt;
use index::MAX_INDEX_DEPTH;
use ns_walk::Facts;
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
    /// Every checksum was to be valid (a clean image, or journal mode):
    /// a mismatch was damage, not a crash's stale seal.
    sealed: bool,
    /// Something that may have owned blocks was lost (`Repair::lossy`): a
    /// later round must keep unowned blocks too, since what tells it so is
    /// gone by then.
    pub lossy: bool,
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
            let s = if n == 1 { "" } else { "s" };
            self.fixed.push(if self.sealed {
                // Not a crash's leftover: the user should know the repair
                // trusted what those blocks say.
                format!(
                    "resealed the damaged checksum of {n} metadata block{s}, trusting what they \
                     hold (every checksum was to be valid, so the mismatch was damage); blocks no \
                     longer claimed by anything are kept in /lost+found"
                )
            } else {
                format!("resealed the stale checksum of {n} metadata block{s}")
            });
            self.resealed = 0;
        }
        if self.more > 0 {
            self.fixed
                .push(format!("... and {} more fixes not listed", self.more));
            self.more = 0;
        }
    }
}

/// The records of a leaf that can be read, each checked on its own.
fn leaf_records(b: &Block, out: &mut Vec<Salvaged>) {
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

/// Orders salvaged records so that, of a name with several records (damage
/// wrote one name over another's record), the one a lookup of the damaged
/// index finds comes first: that is the file readers saw under the name,
/// and the rebuild keeps the first record of a name (the others' inodes go
/// to /lost+found). Leaf order decided before, which kept a misfiled
/// record's file under the name when its leaf came first.
fn keep_what_lookup_finds(recs: &mut [Salvaged], lookup: impl Fn(&[u8]) -> Option<Ino>) {
    let mut count: HashMap<&[u8], u32> = HashMap::new();
    for (name, _) in recs.iter() {
        *count.entry(name).or_default() += 1;
    }
    let doubled: HashMap<Vec<u8>, Option<Ino>> = count
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(name, _)| (name.to_vec(), lookup(name)))
        .collect();
    if doubled.is_empty() {
        return;
    }
    recs.sort_by_key(|(name, ino)| doubled.get(name).is_some_and(|seen| *seen != Some(*ino)));
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

/// State of one repair run.
struct Repair {
    claims: Claims,
    facts: HashMap<Ino, Facts>,
    /// Live inodes, in the order of the inode-block list.
    live: Vec<Ino>,
    /// Directories whose index is rebuilt: (directory, why, salvaged
    /// records).
    rebuild: Vec<(Ino, String, Vec<Salvaged>)>,
    /// Live inodes whose inode block carried a valid checksum: they claim
    /// their blocks before the others, so a damaged inode cannot take a
    /// block from one that reads fine.
    sealed: HashSet<Ino>,
    /// Something that may have referenced blocks was lost (a quarantined
    /// inode, a broken inode-block list, a cut pointer, a damaged block
    /// that had to be trusted): blocks marked used that nothing claims are
    /// then kept, in /lost+found, instead of being freed as leaks.
    lossy: bool,
    /// Blocks kept that way.
    kept: Vec<Bid>,
    /// Data blocks that a later owner also maps: (owner, where its
    /// pointer is, the block). Each later owner gets a copy once the
    /// bitmaps are rebuilt, so both files read as they did.
    clones: Vec<(Ino, PtrAt, Bid)>,
    /// The root directory was made again (`remake_root`).
    lost_root: bool,
    /// Records of leaves whose owner is no live inode: a directory whose
    /// inode was lost, by its old number.
    lost_dirs: std::collections::BTreeMap<Ino, Vec<Salvaged>>,
    /// Blocks fsck found referenced twice, as they read before the repair
    /// changed anything: a later owner's copy is made from these bytes.
    shared_before: SharedBefore,
    /// True orphans (unlinked while open), left on the orphan list.
    orphans: HashSet<Ino>,
    /// Unclaimed directory leaves whose records a rebuild took
    /// (`salvage_lost_leaves`): freed, not kept for /lost+found.
    salvaged_leaves: HashSet<Bid>,
}

/// Bytes of blocks found referenced twice, read before the repair.
pub(crate) type SharedBefore = HashMap<Bid, Box<Block>>;

/// A record read from a damaged index: (name, inode).
type Salvaged = (Vec<u8>, Ino);

impl Volume {
    /// Repairs the mounted (read-write) volume; see the module comment for
    /// what is fixed and in which order. `progress` gets (done, total).
    /// Returns what was done, and `Err` if the repair had to stop (what it
    /// fixed until then is in the log and on the image).
    /// `sealed` says the image's checksums were all to be valid (it was
    /// unmounted cleanly, or it has a journal): a block that fails its own
    /// is then damage, not a crash's stale seal. `lossy` says an earlier
    /// round lost something (see `RepairLog::lossy`).
    pub(crate) fn repair(
        &mut self,
        sealed: bool,
        lossy: bool,
        shared_before: SharedBefore,
        progress: &mut dyn FnMut(u64, u64),
    ) -> (RepairLog, Result<()>) {
        let mut log = RepairLog {
            lossy,
            ..Default::default()
        };
        let sealed = sealed || self.j.is_journaled();
        log.sealed = sealed;
        // Repair reads and writes inode slots directly: open inodes are
        // written back first and decoded again afterwards.
        let res = self.write_back_inodes().and_then(|()| {
            self.open.forget_decoded();
            self.repair_all(sealed, shared_before, &mut log, progress)
        });
        self.open.forget_decoded();
        log.finish();
        (log, res)
    }

    fn repair_all(
        &mut self,
        sealed: bool,
        shared_before: SharedBefore,
        log: &mut RepairLog,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        self.writable()?;
        let mut r = Repair {
            claims: Claims::new(self.sb.total_blocks),
            facts: HashMap::new(),
            live: Vec::new(),
            rebuild: Vec::new(),
            sealed: HashSet::new(),
            lossy: log.lossy,
            kept: Vec::new(),
            clones: Vec::new(),
            lost_root: false,
            salvaged_leaves: HashSet::new(),
            orphans: HashSet::new(),
            lost_dirs: Default::default(),
            shared_before,
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

        // Ownership: inodes in sound blocks first, then the others; within
        // each, directory indexes first, then file block maps.
        let total = r.live.len() as u64 * 2;
        let mut done = 0u64;
        for sound in [true, false] {
            for dirs in [true, false] {
                for ino in r.live.clone() {
                    if r.sealed.contains(&ino) != sound || (r.facts[&ino].dtype == DT_DIR) != dirs {
                        continue;
                    }
                    if dirs {
                        self.repair_claim_dir(&mut r, ino, log)?;
                    } else {
                        self.repair_claim_file(&mut r, ino, log)?;
                        self.commit()?;
                    }
                    done += 1;
                    if done.is_multiple_of(4096) {
                        progress(done, total);
                    }
                }
            }
        }
        if sealed && log.resealed > 0 {
            r.lossy = true;
        }
        self.salvage_lost_leaves(&mut r)?;
        if r.lossy {
            log.lossy = true;
            self.keep_unclaimed(&mut r)?;
        }
        self.repair_bitmaps(&r.claims, log)?;
        // Blocks freed above may be handed out by what follows: make the
        // new bitmaps durable first.
        self.commit()?;
        self.sync()?;

        self.repair_clones(&mut r, log)?;
        for (dino, why, recs) in std::mem::take(&mut r.rebuild) {
            self.rebuild_dir(&r, dino, &why, recs, log)?;
        }
        let root = self.sb.root_ino;
        let root_ok = r.facts.get(&root).is_some_and(|f| f.dtype == DT_DIR);
        if !root_ok {
            log.cannot(format!(
                "root inode {root} is not a live directory: the namespace cannot be rebuilt"
            ));
            if !r.kept.is_empty() {
                log.cannot(format!(
                    "{} blocks in use that nothing reaches were kept marked in use",
                    r.kept.len()
                ));
            }
        } else {
            if let Some(f) = r.facts.get_mut(&root) {
                f.refs = 1;
            }
            self.repair_walk(&mut r, root, log)?;
            self.repair_orphan_list(&mut r, log)?;
            self.repair_lost_found(&mut r, log)?;
            self.repair_links(&r, log)?;
            self.repair_kept_blocks(&mut r, log)?;
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
    ///
    /// The list is followed as far as it is sound; the inode blocks it lost
    /// are not given up (`Volume::inode_blocks_off_list`: found from the
    /// entries naming their inodes and, where the list breaks, by
    /// scanning; never a block a live inode references as data). A block
    /// the list points at from a trusted place (the superblock, or a block
    /// whose checksum holds) but that lost its header was an inode block:
    /// it gets a new header keeping the slots that still hold valid
    /// inodes. The list is relinked from what was found. Used slots that
    /// fail `Inode::validate` are quarantined: cleared, their entries
    /// dropped later, and the blocks they may have owned kept (step 4)
    /// rather than freed.
    fn repair_inode_blocks(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        let walk = self.inode_list(&|b| r.claims.has(b));
        let extra = self.inode_blocks_off_list(&walk, &|b| r.claims.has(b));
        let broken = walk.broken.is_some() || !extra.is_empty();
        if broken {
            r.lossy = true;
        }
        let list = walk.blocks;
        let mut all = list.clone();
        for &bid in &extra {
            if magic(self.meta(bid)?) != MAGIC_INODES {
                self.reheader_inode_block(bid)?;
                log.fix(format!(
                    "inode block {bid} lost its header: rebuilt, keeping the slots that hold valid inodes"
                ));
            }
            all.push(bid);
        }
        if broken {
            log.fix(format!(
                "inode block list was broken: relinked with {} blocks, {} of them found again (by the entries naming their inodes, or by scanning)",
                all.len(),
                all.len() - list.len()
            ));
        }
        self.relink_inode_list(&all)?;
        for &bid in &all {
            r.claims.take(bid);
            self.repair_inode_slots(r, bid, log)?;
        }
        self.remake_root(r, &all, log)
    }

    /// A root inode that was lost (its slot cleared or never found) is made
    /// again in its slot, as an empty directory, when its inode block is on
    /// the list; what it held is found again after the claims
    /// (`salvage_lost_leaves`) or goes to /lost+found. A live root that is
    /// not a directory is garbage (no image has one) and is quarantined
    /// first.
    fn remake_root(&mut self, r: &mut Repair, all: &[Bid], log: &mut RepairLog) -> Result<()> {
        let root = self.sb.root_ino;
        let Some((bid, slot)) = ino_split(root) else {
            return Ok(());
        };
        match r.facts.get(&root) {
            Some(f) if f.dtype == DT_DIR => return Ok(()),
            _ if !all.contains(&bid) => return Ok(()),
            Some(_) => {
                r.facts.remove(&root);
                r.live.retain(|&i| i != root);
                r.sealed.remove(&root);
                log.fix(format!(
                    "root inode {root} is not a directory: quarantined (slot cleared)"
                ));
            }
            None => {}
        }
        let now = self.now();
        self.sb.next_generation = self.sb.next_generation.wrapping_add(1);
        let inode = Inode {
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            generation: self.sb.next_generation,
            parent: root,
            ..Default::default()
        };
        let b = self.meta_mut(bid)?;
        let used = get_u16(b, IBLK_USED) | 1 << slot;
        put_u16(b, IBLK_USED, used);
        inode.encode(&mut b[slot * INODE_SIZE..(slot + 1) * INODE_SIZE]);
        self.sb_dirty = true;
        r.facts.insert(
            root,
            Facts {
                dtype: DT_DIR,
                refs: 0,
                subdirs: 0,
            },
        );
        r.live.push(root);
        r.lossy = true;
        r.lost_root = true;
        log.fix(format!(
            "root directory {root} was lost: made again, its entries found by scanning \
             or put in /lost+found"
        ));
        Ok(())
    }

    /// After the claims: leaves that a directory being rebuilt lost from its
    /// index (a damaged pointer, or a root made again) give their records
    /// back. They are found by scanning the blocks nothing claims and the
    /// bitmaps mark in use, for directory leaves with a valid checksum
    /// whose owner field names that directory. Their records join the
    /// rebuild (after those read through the index, so a name found both
    /// ways keeps the index's inode), and the leaves themselves are freed
    /// with the old index rather than kept for /lost+found: what they held
    /// is in the new index. When something was lost, leaves whose owner is
    /// no live inode are gathered too, by owner, for `repair_lost_dirs`.
    fn salvage_lost_leaves(&mut self, r: &mut Repair) -> Result<()> {
        let root = self.sb.root_ino;
        if r.lost_root && !r.rebuild.iter().any(|(d, ..)| *d == root) {
            r.rebuild
                .push((root, "the root directory was lost".into(), Vec::new()));
        }
        if r.rebuild.is_empty() && !r.lossy {
            return Ok(());
        }
        let wanted: HashMap<Ino, usize> = r
            .rebuild
            .iter()
            .enumerate()
            .map(|(i, (dino, ..))| (*dino, i))
            .collect();
        for bid in self.sb.first_group as u64..self.sb.total_blocks {
            let bid = bid as Bid;
            if r.claims.has(bid) || !self.marked_in_use(bid)? {
                continue;
            }
            let Ok(b) = self.meta(bid) else { continue };
            if magic(b) != MAGIC_DIR_LEAF || !block_crc_ok(b) || leaf_check(b).is_err() {
                continue;
            }
            let owner = get_u64(b, NODE_OWNER);
            if let Some(&i) = wanted.get(&owner) {
                leaf_records(b, &mut r.rebuild[i].2);
                r.salvaged_leaves.insert(bid);
            } else if !r.facts.contains_key(&owner) {
                // The leaf of a directory whose inode was lost: its names
                // can still be given to what it held (`repair_lost_dirs`).
                leaf_records(b, r.lost_dirs.entry(owner).or_default());
                r.salvaged_leaves.insert(bid);
            }
        }
        Ok(())
    }

    /// Whether the bitmaps mark `bid` in use; a map block that is not one
    /// any more says nothing, so all its blocks count as marked.
    fn marked_in_use(&self, bid: Bid) -> Result<bool> {
        let Some(g) = self.sb.group_of(bid) else {
            return Ok(false);
        };
        let map = self.sb.map_bid(g);
        if bid == map {
            return Ok(true);
        }
        let b = self.meta(map)?;
        let i = bid - map - 1;
        Ok(magic(b) != MAGIC_MAP || b[MAP_BITMAP + (i / 8) as usize] & (1 << (i % 8)) != 0)
    }

    /// Gives a block that the list trusted to be an inode block a fresh
    /// header; slots that do not hold a valid inode are cleared.
    fn reheader_inode_block(&mut self, bid: Bid) -> Result<()> {
        let b = self.meta_mut(bid)?;
        let mut used = 1u16;
        for s in 1..INODES_PER_BLOCK as usize {
            let slot = &mut b[s * INODE_SIZE..(s + 1) * INODE_SIZE];
            if Inode::decode_valid(slot).is_ok() {
                used |= 1 << s;
            } else {
                slot.fill(0);
            }
        }
        b[..INODE_SIZE].fill(0);
        put_u32(b, 0, MAGIC_INODES);
        put_u16(b, IBLK_USED, used);
        Ok(())
    }

    /// Makes the list of all inode blocks exactly `all`, in that order.
    fn relink_inode_list(&mut self, all: &[Bid]) -> Result<()> {
        let head = all.first().copied().unwrap_or(0);
        if self.sb.inode_all_head != head {
            self.sb.inode_all_head = head;
            self.sb_dirty = true;
        }
        for (i, &bid) in all.iter().enumerate() {
            let next = all.get(i + 1).copied().unwrap_or(0);
            if get_u32(self.meta(bid)?, IBLK_NEXT_ALL) != next {
                put_u32(self.meta_mut(bid)?, IBLK_NEXT_ALL, next);
            }
        }
        Ok(())
    }

    /// The slots of one inode block: valid inodes become live, used slots
    /// that fail validation are quarantined (cleared), never resealed.
    fn repair_inode_slots(&mut self, r: &mut Repair, bid: Bid, log: &mut RepairLog) -> Result<()> {
        let b = self.meta(bid)?;
        let sealed = block_crc_ok(b);
        let was = get_u16(b, IBLK_USED);
        let mut used = was | 1;
        for slot in 1..INODES_PER_BLOCK {
            if used & (1 << slot) == 0 {
                continue;
            }
            let ino = ino_of(bid, slot);
            let off = slot as usize * INODE_SIZE;
            let inode = match Inode::decode_valid(&self.meta(bid)?[off..off + INODE_SIZE]) {
                Ok(i) => i,
                Err(why) => {
                    used &= !(1 << slot);
                    self.meta_mut(bid)?[off..off + INODE_SIZE].fill(0);
                    r.lossy = true;
                    log.fix(format!(
                        "inode {ino}: slot in use but not a valid inode ({why}): quarantined \
                         (slot cleared, its blocks kept)"
                    ));
                    continue;
                }
            };
            if inode.is_special() && self.sb.feat_incompat & INCOMPAT_SPECIAL_FILES == 0 {
                // Kept, and the image marked as holding special files, so
                // that a reader without them refuses it (FORMAT.md §4).
                self.sb.feat_incompat |= INCOMPAT_SPECIAL_FILES;
                self.sb_dirty = true;
                log.fix(format!(
                    "inode {ino} is a special file: the image's special-files feature set"
                ));
            }
            r.facts.insert(
                ino,
                Facts {
                    dtype: dtype_of(inode.mode),
                    refs: 0,
                    subdirs: 0,
                },
            );
            r.live.push(ino);
            if sealed {
                r.sealed.insert(ino);
            }
        }
        if was & 1 == 0 {
            log.fix(format!(
                "inode block {bid}: the header's own bit in the slot bitmap set again"
            ));
        }
        if used != was {
            put_u16(self.meta_mut(bid)?, IBLK_USED, used);
        }
        // Every slot left in use is valid: the block may be sealed now
        // (a block changed above is sealed at the checkpoint anyway).
        if !sealed {
            self.meta_mut(bid)?;
            log.resealed += 1;
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
        match self.index_check(dino, &d, &|b| r.claims.has(b)) {
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

    /// Reads every record that can be read from a damaged index: the
    /// leaves reachable through the tree and through the leaf chain, each
    /// record checked on its own. Returns (name, inode) pairs.
    fn salvage_dir(&self, dino: Ino, d: &Inode) -> Vec<Salvaged> {
        let mut seen = HashSet::new();
        let mut leaves = Vec::new();
        // A node reached from this directory's index is its own unless its
        // owner field names another live directory (which may own it): a
        // damaged owner field alone must not cost the entries, which reads
        // still find (reads do not look at the owner).
        let is_ours = |bid: Bid| -> Option<&Block> {
            let b = self.meta(self.check_bid(bid).ok()?).ok()?;
            let owner = get_u64(b, NODE_OWNER);
            let other_dir = owner != dino && self.inode(owner).is_ok_and(|i| i.is_dir());
            (!other_dir).then_some(b)
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
            leaf_records(b, &mut out);
        }
        keep_what_lookup_finds(&mut out, |name| {
            self.dir_lookup(d, name)
                .ok()
                .flatten()
                .map(|(_, ino, _)| ino)
        });
        out
    }

    /// Step 2 for a file or long symlink: claims its block map with the
    /// walk fsck uses too (`bmap_walk.rs`), cuts the pointers that cannot
    /// stand, queues a copy for each data block owned elsewhere, fixes the
    /// owner field of its indirect blocks, and sets its block count.
    fn repair_claim_file(&mut self, r: &mut Repair, ino: Ino, log: &mut RepairLog) -> Result<()> {
        let mut inode = self.inode(ino)?;
        let w = self.bmap_walk(ino, &inode, &mut |b| r.claims.take(b));
        // Owners first, then stale checksums, block by block in walk order,
        // and only then the cuts: a block changed before its checksum is
        // judged would count as resealed.
        let owners: HashSet<Bid> = w.wrong_owner.iter().map(|x| x.0).collect();
        for &bid in &w.indirect {
            if owners.contains(&bid) {
                put_u64(self.meta_mut(bid)?, IND_OWNER, ino);
                log.fix(format!("inode {ino}: owner of indirect block {bid} set"));
            }
            self.reseal_if_stale(bid, log)?;
        }
        for &(at, shared) in &w.shared {
            r.clones.push((ino, at, shared));
        }
        for bad in &w.bad {
            match bad.at {
                PtrAt::Inode(i) => inode.map[i] = 0,
                PtrAt::Indirect(bid, i) => put_u32(self.meta_mut(bid)?, IND_PTRS + 4 * i, 0),
            }
        }
        let cut = w.bad.len() as u64;
        let count = w.count();
        if cut > 0 {
            r.lossy = true;
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

    /// Step 4, after the bitmaps: each data block that a later owner also
    /// maps is copied for it (as e2fsck clones multiply-claimed blocks), so
    /// both read what they read before. Without space left, the later
    /// owner's pointer is cut instead.
    fn repair_clones(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        for (ino, at, shared) in std::mem::take(&mut r.clones) {
            let new = match self.alloc_block(shared) {
                Ok(b) => {
                    let bytes = match r.shared_before.get(&shared) {
                        Some(b) => **b,
                        None => *self.j.data(shared)?,
                    };
                    self.j.data_mut(b)?.copy_from_slice(&bytes);
                    log.fix(format!(
                        "inode {ino}: block {shared} is also another file's: given a copy (block {b})"
                    ));
                    b
                }
                Err(Errno::ENOSPC) => {
                    r.lossy = true;
                    log.fix(format!(
                        "inode {ino}: block {shared} is also another file's and no space is left \
                         for a copy: pointer cut (now a hole)"
                    ));
                    0
                }
                Err(e) => return Err(e),
            };
            match at {
                PtrAt::Inode(i) => {
                    let mut inode = self.inode(ino)?;
                    inode.map[i] = new;
                    if new == 0 {
                        inode.blocks = inode.blocks.saturating_sub(1);
                    }
                    self.put_inode(ino, &inode)?;
                }
                PtrAt::Indirect(bid, i) => {
                    put_u32(self.meta_mut(bid)?, IND_PTRS + 4 * i, new);
                    if new == 0 {
                        let mut inode = self.inode(ino)?;
                        inode.blocks = inode.blocks.saturating_sub(1);
                        self.put_inode(ino, &inode)?;
                    }
                }
            }
            self.commit()?;
        }
        Ok(())
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
        let mut dropped = 0u64;
        let mut valid = Vec::new();
        for (name, ino) in recs {
            match r.facts.get(&ino) {
                Some(f) if valid_name(&name) && ino != dino => valid.push((name, ino, f.dtype)),
                _ => dropped += 1,
            }
        }
        let (kept, refused, no_space) = self.insert_batched(dino, &mut d, valid)?;
        dropped += refused;
        if no_space > 0 {
            log.cannot(format!(
                "directory {dino}: {no_space} entries could not be put back: no space left"
            ));
        }
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
    /// entries, parent pointers and name keys on the way, by the rules
    /// fsck judges them with (`ns_walk.rs`).
    fn repair_walk(&mut self, r: &mut Repair, top: Ino, log: &mut RepairLog) -> Result<()> {
        let mut stack = vec![top];
        while let Some(dir) = stack.pop() {
            let entries = match self.ns_judge(dir, &mut r.facts) {
                Ok(e) => e,
                Err(e) => {
                    log.cannot(format!("directory {dir}: index unreadable ({e})"));
                    continue;
                }
            };
            let mut d = self.inode(dir)?;
            let mut removed = false;
            for e in entries {
                let (name, ino) = (&e.name, e.ino);
                if let Some(why) = e.drop {
                    self.dir_remove(&mut d, name)?;
                    removed = true;
                    log.fix(format!(
                        "directory {dir}: entry {} {} (inode {ino}): removed",
                        shown(name),
                        why.why()
                    ));
                    continue;
                }
                if let Some(dtype) = e.dtype {
                    self.dir_repoint(&d, name, ino, dtype)?;
                    log.fix(format!(
                        "directory {dir}: entry {}: d_type set to {dtype}",
                        shown(name)
                    ));
                }
                if let Some(stale) = e.subdir {
                    if stale.is_some() {
                        let mut c = self.inode(ino)?;
                        log.fix(format!(
                            "directory {ino} ({}): parent pointer and name key set",
                            shown(name)
                        ));
                        c.parent = dir;
                        c.name_key = e.key;
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

    /// Step 5, continued: the orphan list keeps exactly the true orphans
    /// on it (`orphan_walk.rs`), in their order; the unmount that ends the
    /// repair frees them, as any mount would. A member a directory names,
    /// or with links, is taken off (the latter goes to /lost+found with
    /// what else nothing reaches), and a list that breaks is cut there.
    fn repair_orphan_list(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        let walk = self.orphan_walk(&r.facts);
        if let Some(why) = &walk.broken {
            log.fix(format!("orphan list: {why}: cut there"));
        }
        let mut kept = Vec::new();
        for &o in &walk.members {
            let mut i = self.inode(o)?;
            match orphans::misplaced(&r.facts[&o], i.nlink) {
                Some(why) => {
                    log.fix(format!("orphan list: inode {o} {why}: taken off"));
                    i.next_orphan = 0;
                    self.put_inode(o, &i)?;
                }
                None => kept.push(o),
            }
        }
        r.orphans.extend(kept.iter().copied());
        if kept.len() == walk.members.len() && walk.broken.is_none() {
            return Ok(());
        }
        for (n, &o) in kept.iter().enumerate() {
            let mut i = self.inode(o)?;
            i.next_orphan = kept.get(n + 1).copied().unwrap_or(0);
            self.put_inode(o, &i)?;
        }
        self.sb.orphan_head = kept.first().copied().unwrap_or(0);
        self.sb_dirty = true;
        self.commit()
    }

    /// Step 5, continued: a directory whose inode was lost but whose leaves
    /// were found by their owner field is made again as
    /// `/lost+found/#<its old number>`, holding the names of its leaves
    /// that lead to live inodes nothing else reaches; so what it held keeps
    /// its names (e2fsck would leave them as `#<ino>`).
    fn repair_lost_dirs(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        for (old, recs) in std::mem::take(&mut r.lost_dirs) {
            let unreached = |r: &Repair, name: &[u8], ino: Ino| {
                valid_name(name)
                    && !r.orphans.contains(&ino)
                    && r.facts.get(&ino).is_some_and(|f| f.refs == 0)
            };
            if !recs.iter().any(|(name, ino)| unreached(r, name, *ino)) {
                continue;
            }
            let Some(lf) = self.lost_found_dir(r, log)? else {
                return Ok(());
            };
            let name = self.free_name(lf, &format!("#{old}"))?;
            let dino = self.repair_mkdir(r, lf, &name)?;
            let mut d = self.inode(dino)?;
            let mut named = HashSet::new();
            let recs = recs
                .into_iter()
                .filter(|(name, ino)| unreached(r, name, *ino) && named.insert(*ino))
                .map(|(name, ino)| (name, ino, r.facts[&ino].dtype))
                .collect();
            let (_, _, no_space) = self.insert_batched(dino, &mut d, recs)?;
            if no_space > 0 {
                log.cannot(format!(
                    "directory {old}: {no_space} entries could not be put back: no space left"
                ));
            }
            log.fix(format!(
                "directory {old} was lost: its entries found by scanning are in /lost+found/{}",
                shown(&name)
            ));
            // Counts the links it gives and sets its subdirectories'
            // parent pointers.
            self.repair_walk(r, dino, log)?;
        }
        Ok(())
    }

    /// Makes directory `name` (mode 0700) in `parent`, known to the repair
    /// as live and named once.
    fn repair_mkdir(&mut self, r: &mut Repair, parent: Ino, name: &[u8]) -> Result<Ino> {
        let ino = self.create(parent, name, libc::S_IFDIR | 0o700, 0, 0, b"")?;
        r.facts.insert(
            ino,
            Facts {
                dtype: DT_DIR,
                refs: 1,
                subdirs: 0,
            },
        );
        r.live.push(ino);
        if let Some(f) = r.facts.get_mut(&parent) {
            f.subdirs += 1;
        }
        Ok(ino)
    }

    /// Inserts `recs` (name, inode, type) into directory `dino`, whose
    /// inode `d` is, committing every `BATCH` records so that a large
    /// directory does not become one huge transaction. Returns (inserted,
    /// refused as duplicate names, refused for want of space).
    fn insert_batched(
        &mut self,
        dino: Ino,
        d: &mut Inode,
        recs: Vec<(Vec<u8>, Ino, u8)>,
    ) -> Result<(u64, u64, u64)> {
        let (mut kept, mut refused, mut no_space) = (0u64, 0u64, 0u64);
        for (n, (name, ino, dtype)) in recs.into_iter().enumerate() {
            match self.dir_insert(dino, d, &name, ino, dtype) {
                Ok(_) => kept += 1,
                Err(Errno::EEXIST) => refused += 1,
                Err(Errno::ENOSPC) => no_space += 1,
                Err(e) => return Err(e),
            }
            if n % BATCH == BATCH - 1 {
                self.put_inode(dino, d)?;
                self.commit()?;
            }
        }
        self.put_inode(dino, d)?;
        self.commit()?;
        Ok((kept, refused, no_space))
    }

    /// `base`, or `base.N` for the first N that `dir` does not hold yet.
    fn free_name(&self, dir: Ino, base: &str) -> Result<Vec<u8>> {
        for n in 0..1000 {
            let name = if n == 0 {
                base.to_string()
            } else {
                format!("{base}.{n}")
            };
            match self.lookup(dir, name.as_bytes()) {
                Err(Errno::ENOENT) => return Ok(name.into_bytes()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Err(Errno::EEXIST)
    }

    /// Step 5, continued: live inodes nothing reaches go to /lost+found.
    fn repair_lost_found(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        self.repair_lost_dirs(r, log)?;
        let root = self.sb.root_ino;
        let unreached: Vec<Ino> = r
            .live
            .iter()
            .copied()
            .filter(|i| *i != root && r.facts[i].refs == 0 && !r.orphans.contains(i))
            .collect();
        if unreached.is_empty() {
            return Ok(());
        }
        let Some(lf) = self.lost_found_dir(r, log)? else {
            log.cannot(format!(
                "/lost+found is not a directory: {} unreachable inodes left unattached",
                unreached.len()
            ));
            return Ok(());
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

    /// /lost+found, made (mode 0700) when missing; None when the name is
    /// taken by something that is not a directory.
    fn lost_found_dir(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<Option<Ino>> {
        let root = self.sb.root_ino;
        match self.lookup(root, b"lost+found") {
            Ok(ino) if r.facts.get(&ino).is_some_and(|f| f.dtype == DT_DIR) => Ok(Some(ino)),
            Ok(_) => Ok(None),
            Err(Errno::ENOENT) => {
                let ino = self.repair_mkdir(r, root, b"lost+found")?;
                log.fix("created /lost+found".into());
                Ok(Some(ino))
            }
            Err(e) => Err(e),
        }
    }

    /// Step 4, before the bitmaps when something was lost: blocks marked
    /// in use that nothing claims may be the data of what was lost, so
    /// they are claimed (kept) rather than freed. A block of zeros holds
    /// nothing to lose and is freed: a group whose map block was lost is
    /// all "marked", and keeping its never-used blocks would leave the
    /// repair itself no space to rebuild what it must.
    fn keep_unclaimed(&mut self, r: &mut Repair) -> Result<()> {
        let total = self.sb.total_blocks;
        for g in 0..self.sb.group_count {
            let map = self.sb.map_bid(g);
            let b = self.meta(map)?;
            let whole = magic(b) != MAGIC_MAP;
            for i in 0..MAP_BITS {
                let bid = map as u64 + 1 + i as u64;
                if bid >= total {
                    break;
                }
                let marked = whole || b[MAP_BITMAP + (i / 8) as usize] & (1 << (i % 8)) != 0;
                let bid = bid as Bid;
                if !marked || r.salvaged_leaves.contains(&bid) || r.claims.has(bid) {
                    continue;
                }
                if self.j.data(bid)?.iter().all(|&x| x == 0) {
                    continue;
                }
                r.claims.take(bid);
                r.kept.push(bid);
            }
        }
        Ok(())
    }

    /// Step 5, last: the kept blocks become the contents of regular files
    /// `/lost+found/#blocks-<first block>`, up to 1032 blocks each (twelve
    /// direct pointers and one indirect block), in block order, so that
    /// nothing is lost and the image is consistent; deleting the files
    /// frees the space.
    fn repair_kept_blocks(&mut self, r: &mut Repair, log: &mut RepairLog) -> Result<()> {
        if r.kept.is_empty() {
            return Ok(());
        }
        let Some(lf) = self.lost_found_dir(r, log)? else {
            log.cannot(format!(
                "/lost+found is not a directory: {} blocks in use that nothing reaches were kept \
                 marked in use",
                r.kept.len()
            ));
            return Ok(());
        };
        let kept = std::mem::take(&mut r.kept);
        for chunk in kept.chunks(N_DIRECT + P) {
            let name = format!("#blocks-{}", chunk[0]);
            let ino = self.create(lf, name.as_bytes(), libc::S_IFREG | 0o600, 0, 0, b"")?;
            let mut i = self.inode(ino)?;
            for (n, &bid) in chunk.iter().take(N_DIRECT).enumerate() {
                i.map[n] = bid;
            }
            if chunk.len() > N_DIRECT {
                let ind = self.alloc_meta(0, MAGIC_INDIRECT)?;
                let b = self.meta_mut(ind)?;
                put_u64(b, IND_OWNER, ino);
                for (n, &bid) in chunk[N_DIRECT..].iter().enumerate() {
                    put_u32(b, IND_PTRS + 4 * n, bid);
                }
                i.map[N_DIRECT] = ind;
                i.blocks = 1;
            }
            i.blocks += chunk.len() as u64;
            i.size = chunk.len() as u64 * BLOCK_SIZE as u64;
            self.put_inode(ino, &i)?;
            self.commit()?;
            log.fix(format!(
                "{} blocks in use that nothing reaches kept as /lost+found/{name}",
                chunk.len()
            ));
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
            let want = f.nlink();
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

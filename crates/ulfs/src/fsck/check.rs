//! The checker: reads a mounted image without changing it.
//!
//! It walks what is reachable from the root and compares it with what the
//! image claims: every block referenced once and marked used in the group
//! bitmaps (and no block marked used that nothing references), group and
//! superblock free counts, link counts, directory parent pointers, and the
//! directory index invariants (node kinds, key order within and across
//! leaves, each key matching its name's hash, entry counts). Inodes that are
//! live but unreachable are reported unless they are orphans awaiting
//! release. Cost is O(image metadata); it is a tool, not the mount path.
//!
//! The rules are the repair's: the inode-block list, directory indexes,
//! block maps and namespace are judged by the walks in `fs/repair/`, and
//! blocks are claimed in the order repair gives them owners, so what this
//! check accepts the repair leaves alone and what the repair changes this
//! check reports.

use super::{FsckOptions, FsckReport};
use crate::format::inode::Inode;
use crate::format::superblock::{
    INCOMPAT_SPECIAL_FILES, RO_COMPAT_KNOWN, SB_PRIMARY, SB_SECONDARY, STATE_CLEAN, Superblock,
};
use crate::format::*;
use crate::fs::Volume;
use crate::fs::ns::{Entry, Facts, Stray};
use crate::fs::orphans::misplaced;
use crate::types::Ino;
use std::collections::{HashMap, HashSet};

/// Checks a mounted volume. `strict` also judges what a cleanly unmounted
/// image guarantees (checksums, counters) when the image was not unmounted
/// cleanly: repair uses it, since it fixes those too.
pub(super) fn check_volume(vol: &Volume, opts: &mut FsckOptions, strict: bool) -> FsckReport {
    check_volume_shared(vol, opts, strict).0
}

/// `check_volume`, and the blocks it found referenced twice.
pub(super) fn check_volume_shared(
    vol: &Volume,
    opts: &mut FsckOptions,
    strict: bool,
) -> (FsckReport, HashSet<Bid>) {
    let mut c = Checker::new(vol, strict);
    c.run(opts);
    (c.report, c.dups)
}

struct Checker<'a> {
    vol: &'a Volume,
    report: FsckReport,
    /// Which blocks something references (one bit per block).
    owned: Vec<u64>,
    /// What the namespace walk counted of each live inode.
    facts: HashMap<Ino, Facts>,
    /// Judge checksums and counters whatever the image's state.
    strict: bool,
    /// Blocks referenced twice (`name_shared_blocks` names every owner).
    dups: HashSet<Bid>,
    /// Findings are not recorded (a second walk that only gathers).
    quiet: bool,
    /// Live inodes whose inode block carries a valid checksum: they claim
    /// their blocks first, as in repair.
    sealed: HashSet<Ino>,
    /// Live inodes reached from the root, and orphans: what is counted as
    /// files, directories and symlinks.
    reached: HashSet<Ino>,
}

impl<'a> Checker<'a> {
    fn new(vol: &'a Volume, strict: bool) -> Self {
        let words = (vol.sb.total_blocks as usize).div_ceil(64);
        Checker {
            vol,
            report: FsckReport::default(),
            owned: vec![0; words],
            facts: HashMap::new(),
            strict,
            dups: HashSet::new(),
            quiet: false,
            sealed: HashSet::new(),
            reached: HashSet::new(),
        }
    }

    fn problem(&mut self, msg: String) {
        if self.quiet {
            return;
        }
        // A badly damaged image can produce millions of findings; the first
        // thousand say enough.
        if self.report.problems.len() < 1000 {
            self.report.problems.push(msg);
        }
    }

    /// Every read verifies a metadata block's checksum and refuses the
    /// block when it fails, so the check judges them always, whatever the
    /// mode and state: an image that left a crash in mode `journal` is
    /// replayed whole and sealed; one in mode `none` needs `--repair`.
    fn verify_crc(&mut self, bid: Bid, what: &str) {
        match self.vol.meta(bid) {
            Ok(b) if block_crc_ok(b) => {}
            // A store that verifies checksums on read refuses the block.
            Ok(_) | Err(_) => self.problem(format!("{what}: block {bid} fails its checksum")),
        }
    }

    /// Reads a metadata block; a block that cannot be read is a problem.
    fn read(&mut self, bid: Bid, what: &str) -> Option<&'a Block> {
        match self.vol.meta(bid) {
            Ok(b) => Some(b),
            Err(e) => {
                self.problem(format!("{what}: block {bid} unreadable ({e})"));
                None
            }
        }
    }

    /// Whether exact counters are judged: on a cleanly unmounted image, and
    /// in mode `none`, where a `sync` leaves them exact and a crash at any
    /// other moment leaves an image that needs `--repair` (so a check must
    /// say so, not call it clean). After a crash in mode `journal` the
    /// replayed image is consistent but its free counters are hints until
    /// the next mount recounts them; no read fails because of them.
    fn judge_counters(&self) -> bool {
        self.strict || self.vol.sb.state == STATE_CLEAN || !self.vol.j.is_journaled()
    }

    /// Both superblock copies must always be valid (a stale one is fine).
    /// A crash cannot tear one: a superblock fills less than the first
    /// 512-byte sector of its block and the rest is zero, so a write
    /// reaches the medium whole or not at all (docs/FORMAT.md).
    fn check_superblocks(&mut self) {
        let blocks = self.vol.j.store().blocks();
        for (which, name) in [(SB_PRIMARY, "primary"), (SB_SECONDARY, "secondary")] {
            let ok = self
                .vol
                .meta(which)
                .map(|b| Superblock::decode(b, blocks).is_ok())
                .unwrap_or(false);
            if !ok {
                self.problem(format!("the {name} superblock copy is damaged"));
            }
        }
        // Such an image refuses every change: calling it clean would promise
        // what `mkdir` or `import` then fails to do.
        let unknown = self.vol.sb.feat_ro_compat & !RO_COMPAT_KNOWN;
        if unknown != 0 {
            self.problem(format!(
                "the image has read-only-compatible features this version does not know \
                 ({unknown:#x}): it can be read, not changed nor repaired"
            ));
        }
    }

    /// Records that `what` references `bid`.
    fn claim(&mut self, bid: Bid, what: &str) {
        if bid as u64 >= self.vol.sb.total_blocks {
            self.problem(format!("{what}: block {bid} is outside the image"));
            return;
        }
        let (w, m) = (bid as usize / 64, 1u64 << (bid % 64));
        if self.owned[w] & m != 0 {
            self.problem(format!("{what}: block {bid} is referenced twice"));
            self.dups.insert(bid);
        }
        self.owned[w] |= m;
    }

    fn run(&mut self, opts: &mut FsckOptions) {
        let sb = self.vol.sb.clone();
        self.check_superblocks();
        for bid in 0..sb.first_group {
            self.claim(bid, "superblock/journal region");
        }
        for g in 0..sb.group_count {
            self.claim(sb.map_bid(g), "map block");
        }
        let live = self.inode_blocks();
        self.walk_tree(&live, opts);
        self.check_links(&live);
        self.claim_all(&live);
        self.name_shared_blocks(&live);
        self.check_bitmaps();
        let used = self
            .owned
            .iter()
            .map(|w| w.count_ones() as u64)
            .sum::<u64>();
        self.report.used_blocks = used;
    }

    /// For each block referenced twice, names every inode whose map or
    /// index names it and where (the damaged one may be either). A second
    /// walk of the block maps, made only when there are such blocks.
    fn name_shared_blocks(&mut self, live: &[(Ino, Inode)]) {
        if self.dups.is_empty() {
            return;
        }
        let mut names: HashMap<Bid, Vec<String>> = HashMap::new();
        self.quiet = true;
        for (ino, inode) in live {
            let mut blocks = Vec::new();
            if inode.is_dir() {
                let _ = self
                    .vol
                    .dir_blocks(inode, &mut |b| blocks.push((b, "its index".to_string())));
            } else {
                let w = self.vol.bmap_walk(*ino, inode, &mut |_| true);
                blocks.extend(w.blocks.into_iter().map(|(b, at)| (b, at.holder())));
            }
            for (b, holder) in blocks {
                if self.dups.contains(&b) {
                    names
                        .entry(b)
                        .or_default()
                        .push(format!("inode {ino} (named by {holder})"));
                }
            }
        }
        self.quiet = false;
        let mut shared: Vec<_> = names.into_iter().collect();
        shared.sort();
        for (b, who) in shared {
            self.problem(format!("block {b} is named by {}", who.join(" and ")));
        }
    }

    /// Walks the list of all inode blocks (with the walk repair uses,
    /// `Volume::inode_list`); returns every live inode. Where the list
    /// breaks, the inode blocks it lost are counted as repair would find
    /// them again.
    fn inode_blocks(&mut self) -> Vec<(Ino, Inode)> {
        let mut live = Vec::new();
        let mut free_slots = 0;
        // Inode blocks with a free slot: what the free-slot list must hold.
        let mut with_free = HashSet::new();
        let sb = self.vol.sb.clone();
        let taken =
            |b: Bid| b < sb.first_group || sb.group_of(b).is_some_and(|g| sb.map_bid(g) == b);
        let list = self.vol.inode_list(&taken);
        if let Some(why) = &list.broken {
            self.problem(why.clone());
        }
        let lost = self.vol.inode_blocks_off_list(&list, &taken);
        if let Some(first) = lost.first() {
            self.problem(format!(
                "{} inode blocks are not on the inode block list (first {first}); \
                 --repair relinks them",
                lost.len()
            ));
        }
        for bid in list.blocks {
            let Some(b) = self.read(bid, "inode block list") else {
                break;
            };
            let used = get_u16(b, IBLK_USED);
            if used & 1 == 0 {
                // Reads do not look at bit 0, but allocation would take
                // the header slot for an inode.
                self.problem(format!(
                    "inode block {bid}: the header's own bit in the slot bitmap is clear"
                ));
            }
            if used != IBLK_FULL {
                with_free.insert(bid);
            }
            self.claim(bid, "inode block");
            self.verify_crc(bid, "inode block");
            let sealed = block_crc_ok(b);
            for slot in 1..INODES_PER_BLOCK {
                let ino = ino_of(bid, slot);
                if used & (1 << slot) == 0 {
                    free_slots += 1;
                    continue;
                }
                let off = slot as usize * INODE_SIZE;
                // The same judgement as every read's (`Volume::inode`).
                match Inode::decode_valid(&b[off..off + INODE_SIZE]) {
                    Ok(i) => {
                        if sealed {
                            self.sealed.insert(ino);
                        }
                        if i.is_special() && self.vol.sb.feat_incompat & INCOMPAT_SPECIAL_FILES == 0
                        {
                            self.problem(format!(
                                "inode {ino} is a special file, but the superblock does not \
                                 have the special-files feature"
                            ));
                        }
                        live.push((ino, i));
                    }
                    Err(why) => self.problem(format!(
                        "inode {ino}: slot in use but not a valid inode ({why})"
                    )),
                }
            }
        }
        let clean = self.judge_counters();
        let sb = &self.vol.sb;
        if clean && (live.len() as u64 != sb.used_inodes || free_slots != sb.free_inodes) {
            let msg = format!(
                "superblock counts {} used / {} free inodes, the inode blocks hold {} / {free_slots}",
                sb.used_inodes,
                sb.free_inodes,
                live.len()
            );
            self.problem(msg);
        }
        if clean {
            self.check_free_list(&with_free);
        }
        live
    }

    /// The free-slot list must hold exactly the inode blocks with a free
    /// slot, each once (after a crash it may hold full blocks, which
    /// allocation skips, so this is judged like the counters).
    fn check_free_list(&mut self, with_free: &HashSet<Bid>) {
        let mut seen = HashSet::new();
        let mut bid = self.vol.sb.inode_free_head;
        while bid != 0 {
            if !with_free.contains(&bid) {
                self.problem(format!(
                    "inode free-slot list holds block {bid}, which is not an inode block with a free slot"
                ));
                return;
            }
            if !seen.insert(bid) {
                self.problem("inode free-slot list loops".into());
                return;
            }
            bid = self
                .vol
                .meta(bid)
                .map(|b| get_u32(b, IBLK_NEXT_FREE))
                .unwrap_or(0);
        }
        if seen.len() != with_free.len() {
            self.problem(format!(
                "inode free-slot list misses {} inode blocks with a free slot",
                with_free.len() - seen.len()
            ));
        }
    }

    /// Walks directories from the root, claiming every block of every
    /// reachable inode. Which entries stand and what they count is judged
    /// by the repair's rules (`Volume::ns_judge`).
    fn walk_tree(&mut self, live: &[(Ino, Inode)], opts: &mut FsckOptions) {
        let by_ino: HashMap<Ino, &Inode> = live.iter().map(|(i, n)| (*i, n)).collect();
        self.facts = live.iter().map(|(i, n)| (*i, Facts::of(n))).collect();
        let root = self.vol.sb.root_ino;
        let Some(root_inode) = by_ino.get(&root) else {
            self.problem(format!("root inode {root} is not a live inode"));
            return;
        };
        if !root_inode.is_dir() {
            self.problem("root inode is not a directory".into());
            return;
        }
        if root_inode.parent != root {
            self.problem(format!(
                "root directory's parent pointer is {}, not itself",
                root_inode.parent
            ));
        }
        let total = live.len() as u64;
        let mut done = 0u64;
        let mut stack = vec![root];
        if let Some(f) = self.facts.get_mut(&root) {
            f.refs = 1;
        }
        self.reached.insert(root);
        while let Some(dir) = stack.pop() {
            let d = by_ino[&dir];
            for e in self.dir_entries(dir, d) {
                let shown = String::from_utf8_lossy(&e.name).into_owned();
                let (ino, key) = (e.ino, e.key);
                let leaf = || match self.vol.leaf_holding(d, key) {
                    Some(l) => format!(" (leaf {l})"),
                    None => String::new(),
                };
                match e.drop {
                    Some(Stray::Dead) => {
                        let at = leaf();
                        self.problem(format!(
                            "directory {dir}: entry {shown:?}{at} names a free or invalid inode {ino}"
                        ));
                        continue;
                    }
                    Some(Stray::SecondDirLink) => {
                        self.problem(format!(
                            "directory {ino} is linked from more than one place"
                        ));
                        continue;
                    }
                    Some(why) => {
                        let at = leaf();
                        self.problem(format!(
                            "directory {dir}: entry {shown:?}{at} {} (inode {ino})",
                            why.why()
                        ));
                        continue;
                    }
                    None => {}
                }
                if e.dtype.is_some() {
                    let at = leaf();
                    self.problem(format!(
                        "directory {dir}: entry {shown:?}{at} has the wrong d_type"
                    ));
                }
                if let Some(Some((parent, name_key))) = e.subdir {
                    if parent != dir {
                        self.problem(format!(
                            "directory {ino} ({shown:?}): parent pointer {parent} should be {dir}"
                        ));
                    }
                    if name_key != key {
                        self.problem(format!("directory {ino} ({shown:?}): stale name key"));
                    }
                }
                if e.subdir.is_some() {
                    stack.push(ino);
                }
                if e.first {
                    self.reached.insert(ino);
                    done += 1;
                    if done.is_multiple_of(4096) {
                        opts.report(done, total);
                    }
                }
            }
        }
        opts.report(total, total);
    }

    /// Claims the blocks of every live inode in the order repair gives
    /// them owners (`fs/repair.rs`, step 2): inodes in inode blocks with a
    /// valid checksum first, within each directories first, in the order
    /// of the inode-block list. So the later owner of a block named twice,
    /// which fsck reports, is the one repair gives a copy or cuts. An
    /// inode nothing reaches still owns its blocks: repair attaches it
    /// under /lost+found with them.
    fn claim_all(&mut self, live: &[(Ino, Inode)]) {
        for sound in [true, false] {
            for dirs in [true, false] {
                for (ino, inode) in live {
                    if self.sealed.contains(ino) == sound && inode.is_dir() == dirs {
                        self.claim_inode(*ino, inode);
                    }
                }
            }
        }
    }

    /// Claims an inode's blocks and checks its block count.
    fn claim_inode(&mut self, ino: Ino, inode: &Inode) {
        if inode.is_dir() {
            self.claim_dir(ino, inode);
        } else {
            self.claim_file(ino, inode);
        }
        if !self.reached.contains(&ino) {
            return;
        }
        match inode.file_type() {
            libc::S_IFDIR => self.report.dirs += 1,
            libc::S_IFLNK => self.report.symlinks += 1,
            _ => self.report.files += 1,
        }
    }

    /// Claims a directory's index nodes.
    fn claim_dir(&mut self, ino: Ino, inode: &Inode) {
        let mut blocks = Vec::new();
        let res = self.vol.dir_blocks(inode, &mut |b| blocks.push(b));
        for &b in &blocks {
            self.verify_crc(b, &format!("inode {ino}"));
            let owner = self
                .vol
                .meta(b)
                .map(|blk| get_u64(blk, IND_OWNER))
                .unwrap_or(ino);
            if owner != ino {
                self.problem(format!(
                    "inode {ino}: block {b} is marked as belonging to inode {owner}"
                ));
            }
        }
        if let Err(e) = res {
            self.problem(format!("inode {ino}: damaged block map or index ({e:?})"));
        }
        self.check_count(ino, inode, blocks.len() as u64);
        for b in blocks {
            self.claim(b, &format!("inode {ino} (named by its index)"));
        }
    }

    /// Claims the blocks of a file's (or long symlink's) block map with the
    /// walk repair uses too (`Volume::bmap_walk`), and reports each of its
    /// findings naming the block that holds the pointer: what it reports is
    /// what repair cuts, copies or fixes.
    fn claim_file(&mut self, ino: Ino, inode: &Inode) {
        let vol = self.vol;
        let total = vol.sb.total_blocks;
        let owned = &mut self.owned;
        let w = vol.bmap_walk(ino, inode, &mut |b| {
            let (i, m) = (b as usize / 64, 1u64 << (b % 64));
            if b as u64 >= total || owned[i] & m != 0 {
                return false;
            }
            owned[i] |= m;
            true
        });
        for bad in &w.bad {
            if bad.is_shared() {
                self.dups.insert(bad.bid);
            }
            self.problem(bad.problem(ino));
        }
        for &(at, bid) in &w.shared {
            self.dups.insert(bid);
            let holder = at.holder();
            self.problem(format!(
                "inode {ino} (named by {holder}): block {bid} is referenced twice"
            ));
        }
        for &(bid, owner) in &w.wrong_owner {
            self.problem(format!(
                "inode {ino}: block {bid} is marked as belonging to inode {owner}"
            ));
        }
        for &bid in &w.stale {
            self.problem(format!("inode {ino}: block {bid} fails its checksum"));
        }
        self.check_count(ino, inode, w.count());
    }

    /// An inode's `blocks` field against what it owns.
    fn check_count(&mut self, ino: Ino, inode: &Inode, owns: u64) {
        if owns != inode.blocks {
            self.problem(format!(
                "inode {ino}: records {} blocks but owns {owns}",
                inode.blocks
            ));
        }
    }

    /// Reads and judges a directory's entries (`Volume::ns_judge`), after
    /// judging its index (`Volume::index_check`): both are what repair
    /// uses too, so the two agree on what is damaged. Double references
    /// of blocks are found by the claims, not here.
    fn dir_entries(&mut self, dino: Ino, d: &Inode) -> Vec<Entry> {
        if let Err(why) = self.vol.index_check(dino, d, &|_| false) {
            self.problem(format!("directory {dino}: damaged index: {why}"));
        }
        match self.vol.ns_judge(dino, &mut self.facts) {
            Ok(entries) => entries,
            Err(e) => {
                self.problem(format!("directory {dino}: index unreadable ({e:?})"));
                Vec::new()
            }
        }
    }

    /// Link counts, the orphan list, and live inodes nothing reaches.
    fn check_links(&mut self, live: &[(Ino, Inode)]) {
        let walk = self.vol.orphan_walk(&self.facts);
        if let Some(why) = &walk.broken {
            self.problem(format!("orphan list: {why}"));
        }
        let nlinks: HashMap<Ino, u32> = live.iter().map(|(i, n)| (*i, n.nlink)).collect();
        let mut orphans = HashSet::new();
        for &o in &walk.members {
            match misplaced(&self.facts[&o], nlinks[&o]) {
                Some(why) => self.problem(format!("orphan list: inode {o} {why}")),
                // Unlinked while open: it still owns its blocks until the
                // last close (or the next mount) frees them.
                None => {
                    orphans.insert(o);
                }
            }
        }
        for (ino, inode) in live {
            let Some(s) = self.facts.get(ino).copied() else {
                continue;
            };
            if s.refs == 0 {
                if orphans.contains(ino) {
                    self.reached.insert(*ino);
                } else {
                    self.problem(format!("inode {ino} is in use but no directory reaches it"));
                }
                continue;
            }
            let want = s.nlink();
            if inode.nlink != want {
                self.problem(format!(
                    "inode {ino}: link count {} should be {want}",
                    inode.nlink
                ));
            }
        }
    }

    /// Compares the group bitmaps with what was claimed.
    fn check_bitmaps(&mut self) {
        let sb = self.vol.sb.clone();
        let mut free_total = 0u64;
        for g in 0..sb.group_count {
            let map = sb.map_bid(g);
            let Some(b) = self.read(map, &format!("group {g}")) else {
                continue;
            };
            if magic(b) != MAGIC_MAP {
                self.problem(format!("group {g}: map block {map} has a bad magic"));
                continue;
            }
            if get_u32(b, MAP_GROUP) != g {
                self.problem(format!(
                    "group {g}: map block {map} says it is group {}",
                    get_u32(b, MAP_GROUP)
                ));
            }
            let b = *b;
            self.verify_crc(map, &format!("group {g} map"));
            let mut leaked = Vec::new();
            let mut unmarked = Vec::new();
            for i in 0..MAP_BITS {
                let bid = map as u64 + 1 + i as u64;
                let marked = b[MAP_BITMAP + (i / 8) as usize] & (1 << (i % 8)) != 0;
                if bid >= sb.total_blocks {
                    continue;
                }
                let owned = self.owned[bid as usize / 64] & (1 << (bid % 64)) != 0;
                match (marked, owned) {
                    (false, false) | (true, true) => {}
                    (true, false) => leaked.push(bid),
                    (false, true) => unmarked.push(bid),
                }
            }
            if !leaked.is_empty() {
                self.problem(format!(
                    "group {g} (map block {map}): {} blocks marked used but unreferenced (first {})",
                    leaked.len(),
                    leaked[0]
                ));
            }
            if !unmarked.is_empty() {
                self.problem(format!(
                    "group {g} (map block {map}): {} referenced blocks marked free (first {})",
                    unmarked.len(),
                    unmarked[0]
                ));
            }
            let recorded = get_u32(&b, MAP_FREE);
            let marked_free = (0..MAP_BITS)
                .filter(|&i| map as u64 + 1 + (i as u64) < sb.total_blocks)
                .filter(|&i| b[MAP_BITMAP + (i / 8) as usize] & (1 << (i % 8)) == 0)
                .count() as u32;
            if recorded != marked_free {
                self.problem(format!(
                    "group {g} (map block {map}): free count {recorded} but the bitmap has {marked_free} free"
                ));
            }
            free_total += marked_free as u64;
        }
        if self.judge_counters() && free_total != sb.free_blocks {
            self.problem(format!(
                "superblock counts {} free blocks, the bitmaps {free_total}",
                sb.free_blocks
            ));
        }
    }
}

//! The one walk of a directory index, shared by fsck (`fsck/check.rs`,
//! which reports what it finds) and repair (`fs/repair.rs`, which rebuilds
//! an index this walk refuses), so that what the check accepts the repair
//! leaves alone and what the repair rebuilds the check reports. It checks
//! every rule of FORMAT.md section 9: node kinds, owners, levels, key
//! ranges and order, hash placement, names, duplicate names, the leaf
//! chain, and the directory inode's entry and block counts and size.

use crate::format::dirnode::*;
use crate::format::inode::Inode;
use crate::format::*;
use crate::fs::Volume;
use crate::fs::dir::KEY_BASE;
use crate::types::Ino;
use std::collections::HashSet;

/// Deepest directory index (as `dir.rs` builds and accepts).
pub(crate) const MAX_INDEX_DEPTH: u32 = 8;

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
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&c| c == b'/' || c == 0)
}

pub(crate) fn shown(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

impl Volume {
    /// Checks a directory's index against every rule of FORMAT.md 9 (D1-D8)
    /// and the directory inode's counts; returns its nodes when it is
    /// sound, else why not. `used_elsewhere` says a block already has
    /// another owner (repair's claims; fsck finds double references on its
    /// own and passes `|_| false`).
    pub(crate) fn index_check(
        &self,
        dino: Ino,
        d: &Inode,
        used_elsewhere: &dyn Fn(Bid) -> bool,
    ) -> std::result::Result<Vec<Bid>, String> {
        if d.map[1..].iter().any(|&p| p != 0) {
            return Err("stray block pointers in the directory inode".into());
        }
        let mut w = IndexWalk::default();
        if d.map[0] != 0 {
            self.index_walk(
                dino,
                d.map[0],
                (0, u64::MAX),
                None,
                0,
                &mut w,
                used_elsewhere,
            )?;
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
        used_elsewhere: &dyn Fn(Bid) -> bool,
    ) -> std::result::Result<(), String> {
        if depth >= MAX_INDEX_DEPTH {
            return Err("index deeper than possible".into());
        }
        if let Some(why) = self.bid_fault(bid) {
            return Err(format!("index pointer {bid} {why}"));
        }
        if used_elsewhere(bid) || !w.seen.insert(bid) {
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
                            "leaf {bid}: entry {} is filed under the wrong hash",
                            shown(rec.name)
                        ));
                    }
                    if w.last_key.is_some_and(|last| key <= last) {
                        return Err(format!("leaf {bid}: keys out of order"));
                    }
                    if w.group.0 != key & !0xF {
                        w.group = (key & !0xF, Vec::new());
                    }
                    if w.group.1.iter().any(|n| n == rec.name) {
                        return Err(format!(
                            "leaf {bid}: name {} appears twice",
                            shown(rec.name)
                        ));
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
                        used_elsewhere,
                    )?;
                }
                Ok(())
            }
            _ => Err(format!("block {bid} is not an index node")),
        }
    }

    /// The leaf whose range holds `key` in directory `d`'s index, if the
    /// path to it can be followed (to name the block in a report).
    pub(crate) fn leaf_holding(&self, d: &Inode, key: u64) -> Option<Bid> {
        let mut bid = d.map[0];
        for _ in 0..=MAX_INDEX_DEPTH {
            let b = self.meta(self.check_bid(bid).ok()?).ok()?;
            match magic(b) {
                MAGIC_DIR_LEAF => return Some(bid),
                MAGIC_DIR_INNER if inner_check(b).is_ok() => {
                    bid = inner_entry(b, inner_child_for(b, key)).1;
                }
                _ => return None,
            }
        }
        None
    }
}

//! Open inodes: the references that keep an unlinked file alive while it is
//! open, and the decoded inode of each open file, so the data path (fstat,
//! lseek, read, write) works on an inode reached by index instead of
//! finding, verifying, decoding and re-encoding a 256-byte slot per call.
//!
//! **Invariant.** An entry's inode, when decoded, is that inode's current
//! value. A *clean* entry equals the slot as the transaction sees it; a
//! *dirty* one is newer, and is written back (`write_back_inodes`) before
//! anything else could read or depend on the slot: at the start of every
//! atomic call (`calls.rs`), before every commit and checkpoint, and when
//! its last reference goes. Calls write inodes through (`put_inode` updates
//! the entry too), so only the fast paths of `file.rs` leave an entry dirty:
//! a write (size, mtime, ctime, and the block map and block count of the
//! blocks it allocated, whose bitmap and pointer blocks are in the running
//! transaction) and the atime of a read. A call that fails is undone in the
//! journal; the entries it wrote through are then decoded again from the
//! restored slots. A writer of raw inode slots (repair) forgets every
//! decoded entry.
//!
//! The durability window is unchanged: a dirty entry counts as a change of
//! the running transaction (`dirty_since`), so the transaction commits when
//! it is as old as the commit interval, as it would have with the slot
//! written; and it counts as one block towards the transaction's size
//! (`Volume::txn_full`), so writing every dirty entry back always fits.

use super::Volume;
use crate::errno::Result;
use crate::format::inode::Inode;
use crate::txn::IdHasher;
use crate::types::{Ino, Timespec};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// An open inode of a volume, as `open_ref` handed it out: an index, so
/// the data path reaches the decoded inode without hashing. Valid until the
/// reference is dropped by `close_ref`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenId(u32);

impl OpenId {
    /// An id for tests of tables that never reach a volume.
    #[cfg(test)]
    pub(crate) fn test(n: u32) -> OpenId {
        OpenId(n)
    }
}

pub(crate) struct Entry {
    ino: Ino,
    refs: u32,
    /// Decoded on first use (`Volume::open_inode`). Changed only through
    /// `inode_mut`, which keeps `libc_stat` true.
    inode: Option<Inode>,
    /// fstat's answer built from `inode`, kept until the inode changes:
    /// a program polling fstat gets a 144-byte copy instead of a field by
    /// field fill of the C struct (half the call).
    libc_stat: Option<libc::stat>,
    dirty: bool,
    /// The two runs of blocks last looked up through the decoded inode,
    /// newest first: logical blocks `first .. first + len` are physical
    /// blocks `bid .. bid + len` (`Volume::bmap_run`), so calls anywhere
    /// in a file written in order find their block without a pointer
    /// read (two: a file's direct blocks and its first indirect block are
    /// apart). Valid while the block map is unchanged, that is until a
    /// call writes the inode (every change to a block map does) or the
    /// inode is decoded again; filling a hole (`alloc_open`) is
    /// remembered as a run of one.
    last_map: [Option<MapRun>; 2],
}

impl Entry {
    /// The decoded inode, to change: fstat's cached answer goes.
    #[inline]
    fn inode_mut(&mut self) -> &mut Option<Inode> {
        self.libc_stat = None;
        &mut self.inode
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct MapRun {
    pub first: u64,
    pub bid: crate::format::Bid,
    pub len: u32,
}

#[derive(Default)]
pub(crate) struct OpenInodes {
    by_ino: HashMap<Ino, u32, BuildHasherDefault<IdHasher>>,
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Entries with changes not yet in their slots.
    dirty: Vec<u32>,
    /// When the oldest of those changes was made.
    dirty_since: Option<Timespec>,
    /// Entries the call in progress wrote through: decoded again if the
    /// call is undone.
    touched: Vec<u32>,
    /// Where changes of open inodes are published for lease holders
    /// outside the process (`changes.rs`); a server's volume has one.
    board: Option<std::sync::Arc<super::changes::ChangeBoard>>,
}

impl OpenInodes {
    pub(crate) fn refs(&self, ino: Ino) -> u32 {
        self.by_ino
            .get(&ino)
            .map_or(0, |&i| self.entries[i as usize].refs)
    }

    /// Whether changes wait to be written back, and since when.
    pub(crate) fn dirty_since(&self) -> Option<Timespec> {
        self.dirty_since
    }

    /// The decoded inode of `ino` if it is open and decoded.
    #[inline]
    pub(crate) fn cached(&self, ino: Ino) -> Option<&Inode> {
        let &i = self.by_ino.get(&ino)?;
        self.entries[i as usize].inode.as_ref()
    }

    /// Publishes the changes of open inodes on `board` from now on.
    pub(crate) fn set_board(&mut self, board: std::sync::Arc<super::changes::ChangeBoard>) {
        self.board = Some(board);
    }

    pub(crate) fn board(&self) -> Option<&super::changes::ChangeBoard> {
        self.board.as_deref()
    }

    /// The decoded inode of `ino` changes: its leases end.
    #[inline]
    fn publish(&self, ino: Ino) {
        if let Some(b) = &self.board {
            b.bump(ino);
        }
    }

    /// A call wrote `inode` to the slot of `ino`: the entry follows.
    pub(crate) fn wrote_through(&mut self, ino: Ino, inode: &Inode, in_call: bool) {
        if let Some(&i) = self.by_ino.get(&ino) {
            self.publish(ino);
            let e = &mut self.entries[i as usize];
            *e.inode_mut() = Some(inode.clone());
            e.last_map = [None; 2];
            if in_call {
                self.touched.push(i);
            }
        }
    }

    /// The call in progress ended; `undone` if its changes were rolled back.
    pub(crate) fn end_call(&mut self, undone: bool) {
        if undone {
            for &i in &self.touched {
                if let Some(e) = self.entries.get_mut(i as usize)
                    && !e.dirty
                {
                    if let Some(b) = &self.board {
                        b.bump(e.ino);
                    }
                    *e.inode_mut() = None;
                    e.last_map = [None; 2];
                }
            }
        }
        self.touched.clear();
    }

    /// Forgets every decoded inode (after raw writes to inode slots). Dirty
    /// entries must have been written back first.
    pub(crate) fn forget_decoded(&mut self) {
        debug_assert!(self.dirty.is_empty());
        if let Some(b) = &self.board {
            b.bump_all();
        }
        for e in &mut self.entries {
            *e.inode_mut() = None;
            e.last_map = [None; 2];
        }
    }

    /// The decoded inode of `id`; `Volume::open_inode` decoded it.
    #[inline]
    pub(crate) fn decoded(&self, id: OpenId) -> &Inode {
        self.entries[id.0 as usize]
            .inode
            .as_ref()
            .expect("decoded by open_inode")
    }

    #[inline]
    pub(crate) fn decoded_mut(&mut self, id: OpenId) -> &mut Inode {
        if let Some(b) = &self.board {
            b.bump(self.entries[id.0 as usize].ino);
        }
        self.entries[id.0 as usize]
            .inode_mut()
            .as_mut()
            .expect("decoded by open_inode")
    }

    /// fstat's `struct stat` for `id` if its inode is decoded, built by
    /// `build` on the first call after the inode last changed; never
    /// panics (the C API's fast `fstat` runs without a panic guard).
    #[inline(always)]
    pub(crate) fn libc_stat_if(
        &mut self,
        id: OpenId,
        build: impl FnOnce(Ino, &Inode) -> libc::stat,
    ) -> Option<&libc::stat> {
        let e = self.entries.get_mut(id.0 as usize)?;
        if e.libc_stat.is_none() {
            e.libc_stat = Some(build(e.ino, e.inode.as_ref()?));
        }
        e.libc_stat.as_ref()
    }

    /// The physical block of `lblk` if it is in the run last looked up.
    #[inline]
    pub(crate) fn cached_map(&self, id: OpenId, lblk: u64) -> Option<crate::format::Bid> {
        let runs = &self.entries[id.0 as usize].last_map;
        runs.iter().flatten().find_map(|r| {
            (lblk.wrapping_sub(r.first) < r.len as u64)
                .then(|| r.bid + (lblk - r.first) as crate::format::Bid)
        })
    }

    #[inline]
    pub(crate) fn remember_map(&mut self, id: OpenId, run: MapRun) {
        let runs = &mut self.entries[id.0 as usize].last_map;
        runs[1] = runs[0];
        runs[0] = Some(run);
    }

    /// Marks the entry of `id` changed at `now`.
    #[inline]
    pub(crate) fn mark_dirty(&mut self, id: OpenId, now: Timespec) {
        let e = &mut self.entries[id.0 as usize];
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(id.0);
            self.dirty_since.get_or_insert(now);
        }
    }

    /// How many entries wait to be written back.
    pub(crate) fn dirty_count(&self) -> usize {
        self.dirty.len()
    }
}

impl Volume {
    /// Takes an open reference (a descriptor, or a working directory, now
    /// refers to `ino`).
    pub fn open_ref(&mut self, ino: Ino) -> OpenId {
        let open = &mut self.open;
        if let Some(&i) = open.by_ino.get(&ino) {
            open.entries[i as usize].refs += 1;
            return OpenId(i);
        }
        let entry = Entry {
            ino,
            refs: 1,
            inode: None,
            libc_stat: None,
            dirty: false,
            last_map: [None; 2],
        };
        let i = match open.free.pop() {
            Some(i) => {
                open.entries[i as usize] = entry;
                i
            }
            None => {
                open.entries.push(entry);
                (open.entries.len() - 1) as u32
            }
        };
        open.by_ino.insert(ino, i);
        OpenId(i)
    }

    /// Open references to `ino`.
    pub(crate) fn open_refs(&self, ino: Ino) -> u32 {
        self.open.refs(ino)
    }

    /// Drops an open reference; returns whether it was the last. The entry
    /// goes with the last one, its changes written back first.
    pub(super) fn drop_open_ref(&mut self, ino: Ino) -> Result<bool> {
        let Some(&i) = self.open.by_ino.get(&ino) else {
            return Ok(false);
        };
        let e = &mut self.open.entries[i as usize];
        e.refs -= 1;
        if e.refs > 0 {
            return Ok(false);
        }
        if e.dirty {
            self.write_back_inodes()?;
        }
        let open = &mut self.open;
        open.by_ino.remove(&ino);
        *open.entries[i as usize].inode_mut() = None;
        open.free.push(i);
        Ok(true)
    }

    /// The decoded inode of an open file, decoding it on first use.
    #[inline]
    pub(crate) fn open_inode(&mut self, id: OpenId) -> Result<&Inode> {
        let i = id.0 as usize;
        if self.open.entries[i].inode.is_none() {
            let inode = self.inode(self.open.entries[i].ino)?;
            *self.open.entries[i].inode_mut() = Some(inode);
        }
        Ok(self.open.entries[i]
            .inode
            .as_ref()
            .expect("decoded just above"))
    }

    /// The inode number behind an open id.
    #[inline]
    pub(crate) fn open_ino(&self, id: OpenId) -> Ino {
        self.open.entries[id.0 as usize].ino
    }

    /// Records that the fast path changed the decoded inode of `id` at
    /// `now`, and ends the operation as `commit` does when the change makes
    /// the transaction due: as old as the commit interval, or as big as a
    /// commit should be counting a block per dirty entry (so thousands of
    /// open files each read once, an atime change each, never make a
    /// transaction bigger than the log). The check here is the cheap one,
    /// on the time the caller read.
    #[inline]
    pub(crate) fn open_changed(&mut self, id: OpenId, now: Timespec) -> Result<()> {
        self.open.mark_dirty(id, now);
        let due = self.txn_full()
            || self
                .open
                .dirty_since
                .is_some_and(|since| self.is_due_at(since, now));
        if due { self.commit() } else { Ok(()) }
    }

    /// Writes every dirty entry back to its slot (within the running
    /// transaction, outside any call's undo record when no call is open).
    /// All of them, before any commit: the transaction may hold bitmap and
    /// pointer blocks of the fast path's allocations, which are consistent
    /// only with their inodes. `open_changed` keeps the dirty entries few
    /// enough that their slots always fit in the transaction.
    pub(crate) fn write_back_inodes(&mut self) -> Result<()> {
        while let Some(&i) = self.open.dirty.last() {
            let e = &self.open.entries[i as usize];
            let (ino, inode) = (e.ino, e.inode.clone().expect("a dirty entry is decoded"));
            self.put_slot(ino, &inode)?;
            self.open.entries[i as usize].dirty = false;
            self.open.dirty.pop();
        }
        self.open.dirty_since = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::alloc::fault_injection::{Fault, arm, disarm};
    use super::super::{MkfsOptions, Mode, MountOptions, mkfs};
    use super::*;
    use crate::errno::Errno;

    /// A call that wrote an open inode through and then failed is undone
    /// in the journal; the decoded copy must follow the restored slot, and
    /// the fast path's earlier change (written back before the call) stays.
    #[test]
    fn an_undone_call_leaves_the_open_inode_as_the_slot() {
        for mode in [Mode::Journal, Mode::None] {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("img");
            let opts = MkfsOptions {
                size: 8 << 20,
                mode,
                ..Default::default()
            };
            mkfs(&p, &opts).unwrap();
            let mut v = Volume::mount(&p, MountOptions::default()).unwrap();
            let root = v.root();
            let ino = v
                .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
                .unwrap();
            let id = v.open_ref(ino);
            assert_eq!(v.write_open(id, &[1; 100], 0), Ok(100));
            // Fast path: inside the block just allocated.
            assert_eq!(v.write_open(id, &[2; 50], 100), Ok(50));
            assert!(v.open.dirty_since().is_some(), "{mode}");
            let before = v.stat_open(id).unwrap();
            // fstat's kept answer, built now, must not outlive the undo.
            assert_eq!(v.libc_stat_open(id).unwrap().st_size, 150);
            // Needs an indirect block, then a data block, whose allocation
            // fails: nothing is written, yet the inode was changed (and
            // written through) before the failure.
            arm(1, Fault::Fail);
            assert_eq!(v.write_open(id, &[3; 10], 12 * 4096), Err(Errno::ENOSPC));
            assert!(!disarm(), "the fault was reached");
            assert_eq!(v.stat_open(id).unwrap(), before, "{mode}");
            assert_eq!(v.stat_ino(ino).unwrap(), before, "{mode}");
            let kept = v.libc_stat_open(id).unwrap();
            assert_eq!(
                (kept.st_size, kept.st_blocks),
                (150, before.blocks as i64),
                "{mode}"
            );
            assert!(v.open.dirty_since().is_none(), "{mode}: written back");
            v.close_ref(ino).unwrap();
            v.unmount().unwrap();
            drop(v);
            let v = Volume::mount(&p, MountOptions::default()).unwrap();
            let st = v.stat_ino(ino).unwrap();
            assert_eq!((st.size, st.mtime), (150, before.mtime), "{mode}");
        }
    }
}

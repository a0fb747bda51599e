//! File contents at the inode level: read and write at an offset, truncate,
//! fallocate. Data moves by memcpy between the caller's buffer and the
//! mapped image; only the inode and block-map blocks go through the
//! transaction.

use super::bmap::MapSlot;
use super::open_inodes::MapRun;
use super::{OpenId, Volume};
use crate::errno::{Errno, Result};
use crate::format::inode::Inode;
use crate::format::*;
use crate::store::copy_bytes;
use crate::types::{Ino, Timespec};

const BS: u64 = BLOCK_SIZE as u64;
/// Largest file size in bytes.
pub const MAX_FILE_SIZE: u64 = MAX_FILE_BLOCKS * BS;

/// `fallocate` modes ulfs implements.
const FALLOC_KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const FALLOC_PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;

impl Volume {
    /// Reads up to `buf.len()` bytes at `off`; holes read as zeros.
    pub fn read_at(&mut self, ino: Ino, buf: &mut [u8], off: u64) -> Result<usize> {
        let read = self.inode(ino).and_then(|inode| {
            readable(&inode)?;
            self.copy_out(&inode, buf, off).map(|n| (inode, n))
        });
        if self.bytes_lost() {
            return Err(Errno::EIO);
        }
        let (inode, n) = read?;
        // Even a read of nothing (at the end, or of length 0) is an access
        // on Linux (tmpfs's shmem_file_read_iter).
        self.accessed(ino, inode)?;
        Ok(n)
    }

    /// `read` with shared access to the volume, so that several threads
    /// may read at once (`ulfs mount`'s request loops under a read lock).
    /// atime is left alone: the second value says whether the read made
    /// it due (relatime: the first read after a change, or a day after the
    /// last update), for the caller to record with `touch_atime` once it
    /// has the volume to itself.
    pub fn read_shared(&self, ino: Ino, buf: &mut [u8], off: u64) -> Result<(usize, bool)> {
        let inode = self.inode(ino)?;
        readable(&inode)?;
        let read = self.copy_out(&inode, buf, off);
        if self.bytes_lost() {
            return Err(Errno::EIO);
        }
        Ok((read?, self.atime_due_for(&inode)))
    }

    /// Once a fault lost bytes of the mapping (store/fault.rs), zeros
    /// stand where they were, and any page may be one of them: a read
    /// answers EIO, not wrong data (nor a misleading EUCLEAN). One relaxed
    /// load while no fault has happened in the process.
    #[inline]
    pub(super) fn bytes_lost(&self) -> bool {
        crate::store::fault::fault_count() != 0 && self.j.store().faulted()
    }

    /// Whether reading or listing `ino` now would move its atime
    /// (`touch_atime` moves it); for callers that defer the update.
    pub fn atime_due(&self, ino: Ino) -> Result<bool> {
        Ok(self.atime_due_for(&self.inode(ino)?))
    }

    /// Linux's relatime rule, and no update on a volume that cannot
    /// change (read-only, or turned so after a failure).
    /// Whether relatime finds `inode`'s atime due now, or would at the
    /// next clock tick with nothing else changing (an atime equal to now
    /// and not newer than the last change is left alone only within this
    /// tick): a read lease must not outlive either.
    pub(super) fn atime_may_fall_due(&self, inode: &Inode) -> bool {
        !(self.no_atime || self.writable().is_err()) && needs_atime_update(inode, self.now())
    }

    pub(super) fn atime_due_for(&self, inode: &Inode) -> bool {
        if self.no_atime || self.writable().is_err() {
            return false;
        }
        let now = self.now();
        // An atime equal to now is not changed (atime_needs_update).
        needs_atime_update(inode, now) && inode.atime != now
    }

    /// `read` of an open file: works on its decoded inode, and touches no
    /// slot (the atime change stays in the open inode until written back).
    pub fn read_open(&mut self, id: OpenId, buf: &mut [u8], off: u64) -> Result<usize> {
        self.open_inode(id)?;
        readable(self.open.decoded(id))?;
        let read = self.copy_out_open(id, buf, off);
        if self.bytes_lost() {
            return Err(Errno::EIO);
        }
        let n = read?;
        if self.no_atime {
            return Ok(n);
        }
        let now = self.now();
        let inode = self.open.decoded(id);
        // Linux's atime_needs_update: an atime equal to now is not changed
        // (with the coarse clock, reads after writes in one tick change
        // nothing).
        if needs_atime_update(inode, now) && inode.atime != now && self.writable().is_ok() {
            self.open.decoded_mut(id).atime = now;
            self.open_changed(id, now)?;
        }
        Ok(n)
    }

    /// `write` of an open file at `off`. Block by block, the bytes are
    /// copied straight into the file's block, and a missing block is
    /// allocated and pointed to (when the indirect blocks above it exist),
    /// with size, times and the map changed in the decoded inode: no slot
    /// encoded, no call to undo, since each block's change is made whole or
    /// not begun. Whatever the fast path cannot do (a missing indirect
    /// block, no space, an error to report) goes on through `write_at`
    /// from the first byte it did not write.
    pub fn write_open(&mut self, id: OpenId, buf: &[u8], off: u64) -> Result<usize> {
        let done = self.write_fast(id, buf, off)?;
        // A write of nothing still gets `write_at`'s checks (EROFS,
        // EISDIR): Linux makes them before it looks at the length.
        if done == buf.len() && done > 0 {
            return Ok(done);
        }
        let ino = self.open_ino(id);
        match self.write_at(ino, &buf[done..], off + done as u64) {
            Ok(n) => Ok(done + n),
            Err(_) if done > 0 => Ok(done),
            Err(e) => Err(e),
        }
    }

    /// The fast part of `write_open`: writes block by block until a block
    /// it cannot write (anything unusual is left to `write_at` to judge
    /// and report). Returns the bytes written.
    fn write_fast(&mut self, id: OpenId, buf: &[u8], off: u64) -> Result<usize> {
        if buf.is_empty() || off >= MAX_FILE_SIZE || self.writable().is_err() {
            return Ok(0);
        }
        if self.open_inode(id).is_err() || !self.open.decoded(id).is_reg() {
            return Ok(0);
        }
        let n = buf.len().min((MAX_FILE_SIZE - off) as usize);
        // Leases end before the first byte changes (fs/changes.rs).
        self.end_leases_open(id);
        // The clock is read once per call.
        let now = self.now();
        let mut done = 0;
        let mut allocated = false;
        while done < n {
            if allocated && self.txn_full() {
                // Allocations filled the transaction: commit what is
                // written, the size moved with it (as `write_at_op` does).
                self.stamp_write(id, off + done as u64, now);
                self.commit_txn()?;
            }
            let pos = off + done as u64;
            let lblk = pos / BS;
            let boff = (pos % BS) as usize;
            let chunk = (BLOCK_SIZE - boff).min(n - done);
            let (bid, fresh) = match self.open_bmap(id, lblk) {
                Ok(0) => match self.alloc_open(id, lblk, now) {
                    Ok(Some(bid)) => (bid, true),
                    _ => break,
                },
                Ok(bid) => (bid, false),
                Err(_) => break,
            };
            allocated |= fresh;
            let Ok(blk) = self.j.data_mut(bid) else { break };
            if fresh {
                // A block never written holds stale bytes; what the write
                // does not cover must read as zeros.
                blk[..boff].fill(0);
                blk[boff + chunk..].fill(0);
            }
            copy_bytes(&mut blk[boff..boff + chunk], &buf[done..done + chunk]);
            done += chunk;
        }
        // A block allocated and then not written (the volume failed
        // between) changes the map, not the size.
        let end = if done > 0 { off + done as u64 } else { 0 };
        // An overwrite in the tick of the last change changes no metadata
        // (Linux's file_update_time leaves equal times alone): nothing to
        // write back, and fstat's kept answer stays.
        if allocated || (done > 0 && self.write_changes_inode(id, end, now)) {
            self.stamp_write(id, end, now);
            self.open_changed(id, now)?;
        }
        if allocated {
            // Bitmap and pointer blocks joined the transaction.
            self.commit()?;
        }
        Ok(done)
    }

    /// Whether a write up to `end` at `now` changes the decoded inode.
    #[inline]
    fn write_changes_inode(&self, id: OpenId, end: u64, now: Timespec) -> bool {
        let inode = self.open.decoded(id);
        end > inode.size || inode.mtime != now || inode.ctime != now
    }

    /// A write up to `end` at `now` in the decoded inode: the size grows
    /// to it, mtime and ctime move.
    fn stamp_write(&mut self, id: OpenId, end: u64, now: Timespec) {
        let inode = self.open.decoded_mut(id);
        inode.size = inode.size.max(end);
        inode.mtime = now;
        inode.ctime = now;
        self.open.mark_dirty(id, now);
    }

    /// Allocates logical block `lblk` of an open file, when the indirect
    /// blocks above it exist: `None` when one is missing.
    fn alloc_open(&mut self, id: OpenId, lblk: u64, now: Timespec) -> Result<Option<Bid>> {
        let Some(at) = self.map_slot(self.open.decoded(id), lblk)? else {
            return Ok(None);
        };
        // Next to the block before it, as `copy_in` places blocks.
        let goal = match lblk {
            0 => 0,
            _ => self.open_bmap(id, lblk - 1)?.wrapping_add(1),
        };
        let bid = self.alloc_block(goal)?;
        if let MapSlot::Indirect(parent, i) = at
            && let Err(e) = self.set_ptr(parent, i, bid)
        {
            // Nothing points to it: give it back (the volume has latched
            // read-only if writing failed, and commits nothing more).
            let _ = self.free_block(bid);
            return Err(e);
        }
        let inode = self.open.decoded_mut(id);
        if let MapSlot::Inode(slot) = at {
            inode.map[slot] = bid;
        }
        inode.blocks = inode.blocks.saturating_add(1);
        // Changed with the bitmap and pointer blocks in the transaction:
        // written back with them.
        self.open.mark_dirty(id, now);
        let run = MapRun {
            first: lblk,
            bid,
            len: 1,
        };
        self.open.remember_map(id, run);
        Ok(Some(bid))
    }

    /// Records an access to `ino` (a read, a directory listed, a symlink
    /// read) in its atime under Linux's `relatime` rule. A volume that went
    /// read-only after a failure still reads, without the update.
    pub fn touch_atime(&mut self, ino: Ino) -> Result<()> {
        let inode = self.inode(ino)?;
        self.accessed(ino, inode)
    }

    fn accessed(&mut self, ino: Ino, mut inode: Inode) -> Result<()> {
        if self.atime_due_for(&inode) {
            inode.atime = self.now();
            self.put_inode(ino, &inode)?;
            self.commit()?;
        }
        Ok(())
    }

    /// The physical block of `lblk` of an open file (0 for a hole), through
    /// its last look-up when it is the same block.
    #[inline]
    fn open_bmap(&mut self, id: OpenId, lblk: u64) -> Result<Bid> {
        if let Some(bid) = self.open.cached_map(id, lblk) {
            return Ok(bid);
        }
        let (bid, first, len) = self.bmap_run(self.open.decoded(id), lblk)?;
        if bid != 0 {
            let run = MapRun {
                first,
                bid: bid - (lblk - first) as Bid,
                len,
            };
            self.open.remember_map(id, run);
        }
        Ok(bid)
    }

    /// `copy_out` for an open file (its inode decoded).
    fn copy_out_open(&mut self, id: OpenId, buf: &mut [u8], off: u64) -> Result<usize> {
        let size = self.open.decoded(id).size;
        copy_range(size, buf, off, |lblk, boff, dst| {
            match self.open_bmap(id, lblk)? {
                0 => dst.fill(0),
                bid => copy_bytes(dst, &self.j.data(bid)?[boff..boff + dst.len()]),
            }
            Ok(())
        })
    }

    /// Copies file bytes out without touching the inode.
    pub(crate) fn copy_out(&self, inode: &Inode, buf: &mut [u8], off: u64) -> Result<usize> {
        copy_range(inode.size, buf, off, |lblk, boff, dst| {
            match self.bmap(inode, lblk)? {
                0 => dst.fill(0),
                bid => copy_bytes(dst, &self.j.data(bid)?[boff..boff + dst.len()]),
            }
            Ok(())
        })
    }

    /// Writes `buf` at `off`, allocating blocks as needed. A write cut short
    /// by ENOSPC returns the bytes written so far (or ENOSPC if none).
    pub(super) fn write_at_op(&mut self, ino: Ino, buf: &[u8], off: u64) -> Result<usize> {
        self.writable()?;
        let mut inode = self.inode(ino)?;
        if !inode.is_reg() {
            return Err(if inode.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        }
        if buf.is_empty() {
            return Ok(0);
        }
        self.end_leases(ino);
        // As Linux's generic_write_check_limits: a write that starts below
        // the largest file size is cut short at it, one at or past it fails.
        if off >= MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let buf = &buf[..buf.len().min((MAX_FILE_SIZE - off) as usize)];
        let mut done = 0;
        loop {
            // `copy_in` stops early when space runs out or the running
            // transaction is full; an error means nothing was written.
            let result = self.copy_in(ino, &mut inode, &buf[done..], off + done as u64);
            if let Ok(n) = result {
                done += n;
                inode.size = inode.size.max(off + done as u64);
                let now = self.now();
                inode.mtime = now;
                inode.ctime = now;
            }
            // Blocks may have been mapped even when nothing was copied, so
            // the inode is written back either way.
            self.put_inode(ino, &inode)?;
            match result {
                Ok(n) if n > 0 && done < buf.len() => {
                    // A full transaction: commit the consistent prefix (the
                    // file holds the bytes written so far) and go on.
                    self.commit_txn()?;
                    inode = self.inode(ino)?;
                }
                Ok(_) if done > 0 => break,
                Ok(_) => {
                    self.commit()?;
                    return Err(Errno::ENOSPC);
                }
                Err(e) if done == 0 => {
                    self.commit()?;
                    return Err(e);
                }
                Err(_) => break,
            }
        }
        self.commit()?;
        Ok(done)
    }

    fn copy_in(&mut self, ino: Ino, inode: &mut Inode, buf: &[u8], off: u64) -> Result<usize> {
        let mut done = 0;
        let mut goal: Bid = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            let lblk = pos / BS;
            let boff = (pos % BS) as usize;
            let chunk = (BLOCK_SIZE - boff).min(buf.len() - done);
            if goal == 0 && lblk > 0 {
                goal = self.bmap(inode, lblk - 1)?.wrapping_add(1);
            }
            // Room for a bitmap block, three indirect blocks, the inode
            // and the superblock.
            if done > 0 && !self.txn_room(8) {
                return Ok(done);
            }
            let (bid, fresh) = match self.bmap_alloc(ino, inode, lblk, goal) {
                Ok(x) => x,
                Err(Errno::ENOSPC) if done > 0 => return Ok(done),
                Err(e) => return Err(e),
            };
            let blk = self.j.data_mut(bid)?;
            if fresh && chunk < BLOCK_SIZE {
                blk[..boff].fill(0);
                blk[boff + chunk..].fill(0);
            }
            copy_bytes(&mut blk[boff..boff + chunk], &buf[done..done + chunk]);
            goal = bid.wrapping_add(1);
            done += chunk;
        }
        Ok(done)
    }

    /// Sets the size of a regular file: shrinking frees the blocks past the
    /// end, growing leaves a hole.
    pub(super) fn truncate_ino_op(&mut self, ino: Ino, len: u64) -> Result<()> {
        self.writable()?;
        let mut inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Errno::EISDIR);
        }
        if !inode.is_reg() {
            return Err(Errno::EINVAL);
        }
        if len > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        // Its tail is zeroed in place: leases end first.
        self.end_leases(ino);
        self.set_size(&mut inode, len)?;
        let now = self.now();
        inode.mtime = now;
        inode.ctime = now;
        self.put_inode(ino, &inode)?;
        self.commit()
    }

    /// Changes `inode.size`, freeing blocks past a smaller size and zeroing
    /// the tail of the new last block so a later extension reads zeros.
    pub(crate) fn set_size(&mut self, inode: &mut Inode, len: u64) -> Result<()> {
        if len < inode.size || inode.blocks > 0 {
            self.bmap_truncate(inode, len.div_ceil(BS))?;
            let tail = (len % BS) as usize;
            if tail != 0 {
                let bid = self.bmap(inode, len / BS)?;
                if bid != 0 {
                    self.j.data_mut(bid)?[tail..].fill(0);
                }
            }
        }
        inode.size = len;
        Ok(())
    }

    /// `fallocate`: mode 0 allocates (zeroed) and may extend the size;
    /// KEEP_SIZE allocates without extending; PUNCH_HOLE|KEEP_SIZE frees.
    pub(super) fn fallocate_ino_op(
        &mut self,
        ino: Ino,
        mode: i32,
        off: u64,
        len: u64,
    ) -> Result<()> {
        self.writable()?;
        let mut inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Errno::EISDIR);
        }
        if !inode.is_reg() {
            return Err(Errno::ENODEV);
        }
        let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        // A punched hole's partial blocks are zeroed in place.
        self.end_leases(ino);
        let result = match mode {
            0 | FALLOC_KEEP_SIZE => self.preallocate(ino, &mut inode, off, end, mode == 0),
            m if m == FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE => {
                self.punch_hole(ino, &mut inode, off, end)
            }
            _ => Err(Errno::EOPNOTSUPP),
        };
        inode.ctime = self.now();
        self.put_inode(ino, &inode)?;
        self.commit()?;
        result
    }

    fn preallocate(
        &mut self,
        ino: Ino,
        inode: &mut Inode,
        off: u64,
        end: u64,
        grow: bool,
    ) -> Result<()> {
        // Refuse up front what cannot fit, rather than fill the volume and
        // then fail (tmpfs undoes a failed fallocate; this never starts one
        // it can see will fail). Each pointer block maps 1020 blocks.
        let range = off / BS..end.div_ceil(BS);
        let mut holes = 0u64;
        for lblk in range.clone() {
            if self.bmap(inode, lblk)? == 0 {
                holes += 1;
            }
        }
        if holes + holes.div_ceil(PTRS_PER_BLOCK) + 2 > self.sb.free_blocks {
            return Err(Errno::ENOSPC);
        }
        let mut goal = 0;
        for lblk in range {
            if !self.txn_room(8) {
                // Commit the blocks allocated so far (a consistent state:
                // preallocated blocks beyond the size are allowed).
                self.put_inode(ino, inode)?;
                self.commit_txn()?;
            }
            let (bid, fresh) = self.bmap_alloc(ino, inode, lblk, goal)?;
            if fresh {
                self.j.data_mut(bid)?.fill(0);
            }
            goal = bid + 1;
        }
        if grow && end > inode.size {
            inode.size = end;
            inode.mtime = self.now();
        }
        Ok(())
    }

    fn punch_hole(&mut self, ino: Ino, inode: &mut Inode, off: u64, end: u64) -> Result<()> {
        let end = end.min(inode.size.max(off));
        let mut pos = off;
        while pos < end {
            if !self.txn_room(8) {
                // Commit the hole punched so far: a consistent state.
                self.put_inode(ino, inode)?;
                self.commit_txn()?;
            }
            let lblk = pos / BS;
            let boff = (pos % BS) as usize;
            let chunk = (BLOCK_SIZE - boff).min((end - pos) as usize);
            if chunk == BLOCK_SIZE {
                self.bmap_unmap(inode, lblk)?;
            } else {
                let bid = self.bmap(inode, lblk)?;
                if bid != 0 {
                    self.j.data_mut(bid)?[boff..boff + chunk].fill(0);
                }
            }
            pos += chunk as u64;
        }
        inode.mtime = self.now();
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE from `off`, as Linux reports them.
    pub fn seek_data_hole(&self, ino: Ino, off: u64, data: bool) -> Result<u64> {
        let inode = self.inode(ino)?;
        if off >= inode.size {
            return Err(Errno::ENXIO);
        }
        let found = self.bmap_seek(&inode, off / BS, data)?;
        let at = match found {
            Some(lblk) => (lblk * BS).max(off),
            None => inode.size,
        };
        if data {
            if at >= inode.size {
                Err(Errno::ENXIO)
            } else {
                Ok(at)
            }
        } else {
            Ok(at.min(inode.size))
        }
    }
}

/// Fills `buf` from a file of `size` bytes at `off`, block by block:
/// `fill(lblk, offset in the block, dst)` copies one block's part. Returns
/// the bytes filled (short at the end of the file).
#[inline]
fn copy_range(
    size: u64,
    buf: &mut [u8],
    off: u64,
    mut fill: impl FnMut(u64, usize, &mut [u8]) -> Result<()>,
) -> Result<usize> {
    if off >= size {
        return Ok(0);
    }
    let n = (buf.len() as u64).min(size - off) as usize;
    let mut done = 0;
    while done < n {
        let pos = off + done as u64;
        let boff = (pos % BS) as usize;
        let chunk = (BLOCK_SIZE - boff).min(n - done);
        fill(pos / BS, boff, &mut buf[done..done + chunk])?;
        done += chunk;
    }
    Ok(n)
}

/// Only regular files are read: a directory is EISDIR, anything else
/// EINVAL, as read(2) says.
#[inline]
pub(super) fn readable(inode: &Inode) -> Result<()> {
    if inode.is_reg() {
        Ok(())
    } else if inode.is_dir() {
        Err(Errno::EISDIR)
    } else {
        Err(Errno::EINVAL)
    }
}

/// Linux's `relatime`: touch atime only when it is not newer than the last
/// change or is a day old, so reads do not write metadata on every call.
fn needs_atime_update(inode: &Inode, now: Timespec) -> bool {
    inode.atime <= inode.mtime
        || inode.atime <= inode.ctime
        || now.sec - inode.atime.sec >= 24 * 3600
}

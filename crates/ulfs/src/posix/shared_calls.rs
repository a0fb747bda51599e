//! The calls a server runs with the volume shared (`SharedVolume::shared`),
//! side by side for different clients: reads, and stats by descriptor or by
//! path. They borrow the volume shared (`&Volume`) and only their own
//! process exclusively, so they cannot change the volume; what Linux would
//! change on the way, the access times of the file read and of the
//! symlinks followed, is handed back as `Deferred` for the caller to record
//! afterwards with the volume to itself, and only when relatime makes it
//! due (so a read of a file already read since its last change takes no
//! write lock at all).
//!
//! Each call answers exactly what the same call of `Ctx` answers: the
//! checks are shared with it (`calls::readable`, `Process::resolve`), and
//! the volume's shared reads see the open files' decoded inodes, so a
//! write's new size is seen before it is written back.

use super::calls::{check_flags, p, readable};
use super::process::Process;
use crate::errno::Result;
use crate::fs::Volume;
use crate::fs::changes::Lease;
use crate::types::{Fd, Ino, Stat, Statx};

/// One process's read-only calls on a shared volume.
pub struct SharedCtx<'a> {
    pub vol: &'a Volume,
    pub proc: &'a mut Process,
}

/// Access times a shared call found due, to record with the volume to
/// itself (`apply`).
#[derive(Default, Debug)]
pub struct Deferred {
    atimes: Vec<Ino>,
}

impl Deferred {
    pub fn is_empty(&self) -> bool {
        self.atimes.is_empty()
    }

    /// Records the access times. A failure fails nothing: the call that
    /// deferred them has its answer (as Linux's touch_atime on a volume
    /// that cannot be written).
    pub fn apply(&mut self, vol: &mut Volume) {
        for ino in self.atimes.drain(..) {
            let _ = vol.touch_atime(ino);
        }
    }
}

impl SharedCtx<'_> {
    /// `read(2)`: as `Ctx::read`.
    pub fn read(&mut self, fd: Fd, buf: &mut [u8], later: &mut Deferred) -> Result<usize> {
        let (f, off) = readable(self.proc, fd, None, buf.len())?;
        let ino = f.ino;
        let n = self.read_ino(ino, buf, off, later)?;
        self.proc.fds.get_mut(fd)?.set_offset(off + n as u64);
        Ok(n)
    }

    /// `pread(2)`: as `Ctx::pread`.
    pub fn pread(
        &mut self,
        fd: Fd,
        buf: &mut [u8],
        off: u64,
        later: &mut Deferred,
    ) -> Result<usize> {
        let (f, off) = readable(self.proc, fd, Some(off), buf.len())?;
        let ino = f.ino;
        self.read_ino(ino, buf, off, later)
    }

    fn read_ino(&self, ino: Ino, buf: &mut [u8], off: u64, later: &mut Deferred) -> Result<usize> {
        let (n, due) = self.vol.read_shared(ino, buf, off)?;
        if due {
            later.atimes.push(ino);
        }
        Ok(n)
    }

    /// A read lease on `fd`'s file from the block holding `off`
    /// (`Volume::lease`), after pread's checks of the descriptor; with the
    /// file's inode number.
    pub fn lease(&self, fd: Fd, off: u64, max_runs: usize) -> Result<(Ino, Lease)> {
        let (f, off) = readable(self.proc, fd, Some(off), 0)?;
        let ino = f.ino;
        Ok((ino, self.vol.lease(ino, off, max_runs)?))
    }

    /// `fstat(2)`.
    pub fn fstat(&self, fd: Fd) -> Result<Stat> {
        self.vol.stat_ino(self.proc.fds.get(fd)?.ino)
    }

    /// `fstatat(2)`: as `Ctx::fstatat`.
    pub fn fstatat(
        &self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        flags: i32,
        later: &mut Deferred,
    ) -> Result<Stat> {
        check_flags(
            flags,
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT,
        )?;
        let ino = self.proc.resolve(
            self.vol,
            dirfd,
            p(&path),
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            flags & libc::AT_EMPTY_PATH != 0,
            &mut later.atimes,
        )?;
        self.vol.stat_ino(ino)
    }

    /// `statx(2)`: as `Ctx::statx`.
    pub fn statx(
        &self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        flags: i32,
        mask: u32,
        later: &mut Deferred,
    ) -> Result<Statx> {
        let sync = super::calls::statx_sync_flags(flags, mask)?;
        let stat = self.fstatat(dirfd, path, flags & !sync, later)?;
        Ok(super::calls::statx_of(stat, mask))
    }
}

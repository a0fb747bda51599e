//! The syscall-shaped API. `Fs` is one mounted volume plus one process's
//! view of it (`Process`: descriptor table, working directory, umask);
//! every call is written once, in `calls.rs`, over a borrowed pair of the
//! two (`Ctx`), so a server pairing one volume with a process per client
//! runs the very same code. Every call returns `Result<_, Errno>` with the
//! errno Linux would give.

mod access;
mod calls;
pub mod dirents;
pub mod fdtable;
pub mod locks;
pub mod namei;
pub mod perm;
mod process;
mod shared_calls;

pub use calls::{Ctx, check_range, readv_by, writev_by};
pub use fdtable::Closed;
pub use process::{Identity, Process};
pub use shared_calls::{Deferred, SharedCtx};

use crate::errno::Result;
use crate::error::Error;
use crate::fs::{Info, MountOptions, Volume};
use crate::types::*;
use std::io::{IoSlice, IoSliceMut};
use std::path::Path;

/// A mounted ulfs image with one descriptor table: the POSIX API.
pub struct Fs {
    vol: Volume,
    proc: Process,
    unmounted: bool,
}

impl Fs {
    /// Mounts an image. A file that is not a ulfs image, or a damaged one,
    /// is refused with an error that says why.
    pub fn mount(image: impl AsRef<Path>, opts: MountOptions) -> std::result::Result<Fs, Error> {
        Ok(Fs::over(Volume::mount(image.as_ref(), opts)?))
    }

    /// Mounts the image held by any store (a `SimDisk` in crash tests).
    pub fn mount_store(
        store: Box<dyn crate::store::BlockStore>,
        opts: MountOptions,
    ) -> std::result::Result<Fs, Error> {
        Ok(Fs::over(Volume::mount_store(store, opts, "image")?))
    }

    /// One process view over a mounted volume, starting at the root.
    fn over(mut vol: Volume) -> Fs {
        let proc = Process::new(&mut vol, Identity::Host);
        Fs {
            vol,
            proc,
            unmounted: false,
        }
    }

    /// The simulated disk under this file system, if it runs on one.
    pub fn sim_disk(&self) -> Option<&crate::store::SimDisk> {
        self.vol.j.store().as_sim()
    }

    /// Closes every descriptor, makes everything durable and marks the
    /// image clean.
    pub fn unmount(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.unmounted {
            return Ok(());
        }
        self.unmounted = true;
        let _ = self.ctx().exit();
        self.vol.unmount()
    }

    pub fn info(&self) -> Info {
        self.vol.info()
    }

    /// Called when a panic went through a call on this file system and was
    /// caught (`SharedFs` and the C API do it): the volume becomes
    /// read-only for good and nothing more is committed (`Volume::abandon`).
    pub fn abandon(&mut self) {
        self.vol.abandon();
    }

    /// Keeps the image's file data mapped in within `budget` from now on
    /// (`MountOptions::memory_budget` sets it at mount).
    pub fn set_memory_budget(&mut self, budget: crate::MemoryBudget) {
        self.vol.set_memory_budget(budget);
    }

    /// The volume under this process view (for tools such as fsck).
    pub fn volume(&self) -> &Volume {
        &self.vol
    }

    /// This file system's process and volume, paired for one call.
    #[inline(always)]
    pub fn ctx(&mut self) -> Ctx<'_> {
        Ctx {
            vol: &mut self.vol,
            proc: &mut self.proc,
        }
    }

    /// Who this file system's calls are made for: the host process by
    /// default (privileged), or a verified user whose every call is judged
    /// by Linux's permission rules, as a server judges its clients (also
    /// for an application that serves its own users from an image).
    pub fn set_identity(&mut self, identity: Identity) {
        self.proc.identity = identity;
    }

    /// The descriptor limit (default `fdtable::MAX_FDS`, 1,048,576, Linux's
    /// `nr_open`): descriptors are numbered below it.
    pub fn max_fds(&self) -> usize {
        self.proc.fds.max_fds()
    }
}

/// Each call of `Ctx`, on the `Fs`'s own process: one line per call here,
/// so the public API cannot drift from the implementation. Always inlined:
/// `Ctx` is two pointers into `Fs`, gone once inlined, so the hot path
/// (fstat, lseek, pread) compiles as before the split.
macro_rules! forward {
    ($(fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        impl Fs {
            $(
                #[doc = concat!("[`Ctx::", stringify!($name), "`] on this file system's process.")]
                #[inline(always)]
                pub fn $name(&mut self $(, $arg: $ty)*) -> $ret {
                    self.ctx().$name($($arg),*)
                }
            )*
        }
    };
}

forward! {
    fn set_max_fds(&mut self, max: usize) -> Result<()>;
    fn umask(&mut self, mask: u32) -> u32;
    fn open(&mut self, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd>;
    fn openat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd>;
    fn open_ino(&mut self, ino: Ino, flags: i32) -> Result<Fd>;
    fn close(&mut self, fd: Fd) -> Result<()>;
    fn dup(&mut self, fd: Fd) -> Result<Fd>;
    fn dupfd(&mut self, fd: Fd, lowest: Fd) -> Result<Fd>;
    fn file_description(&mut self, fd: Fd) -> Result<FileDescription>;
    fn fcntl_getfl(&mut self, fd: Fd) -> Result<i32>;
    fn fcntl_setfl(&mut self, fd: Fd, flags: i32) -> Result<()>;
    fn dup2(&mut self, old: Fd, new: Fd) -> Result<Fd>;
    fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn pread(&mut self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize>;
    fn readv(&mut self, fd: Fd, bufs: &mut [IoSliceMut<'_>]) -> Result<usize>;
    fn write(&mut self, fd: Fd, buf: &[u8]) -> Result<usize>;
    fn pwrite(&mut self, fd: Fd, buf: &[u8], off: u64) -> Result<usize>;
    fn writev(&mut self, fd: Fd, bufs: &[IoSlice<'_>]) -> Result<usize>;
    fn lseek(&mut self, fd: Fd, off: i64, whence: i32) -> Result<u64>;
    fn seek_to(&mut self, fd: Fd, off: u64) -> Result<u64>;
    fn fstat(&mut self, fd: Fd) -> Result<Stat>;
    fn fstat_libc(&mut self, fd: Fd, out: &mut std::mem::MaybeUninit<libc::stat>) -> Result<()>;
    fn fstat_libc_decoded(&mut self, fd: Fd, out: &mut std::mem::MaybeUninit<libc::stat>) -> bool;
    fn ftruncate(&mut self, fd: Fd, len: u64) -> Result<()>;
    fn fallocate(&mut self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()>;
    fn fsync(&mut self, fd: Fd) -> Result<()>;
    fn fdatasync(&mut self, fd: Fd) -> Result<()>;
    fn sync(&mut self) -> Result<()>;
    fn commit_if_due(&mut self) -> Result<()>;
    fn getdents64(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn stat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
    fn lstat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
    fn fstatat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32) -> Result<Stat>;
    fn statx(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32, mask: u32) -> Result<Statx>;
    fn mkdir(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()>;
    fn mknod(&mut self, path: impl AsRef<[u8]>, mode: u32, dev: u64) -> Result<()>;
    fn mknodat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: u32, dev: u64) -> Result<()>;
    fn mkdirat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: u32) -> Result<()>;
    fn rmdir(&mut self, path: impl AsRef<[u8]>) -> Result<()>;
    fn unlink(&mut self, path: impl AsRef<[u8]>) -> Result<()>;
    fn unlinkat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32) -> Result<()>;
    fn rename(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()>;
    fn rename2(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>, flags: u32) -> Result<()>;
    fn renameat2(&mut self, olddirfd: Fd, old: impl AsRef<[u8]>, newdirfd: Fd, new: impl AsRef<[u8]>, flags: u32) -> Result<()>;
    fn link(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()>;
    fn linkat(&mut self, olddirfd: Fd, old: impl AsRef<[u8]>, newdirfd: Fd, new: impl AsRef<[u8]>, flags: i32) -> Result<()>;
    fn symlink(&mut self, target: impl AsRef<[u8]>, linkpath: impl AsRef<[u8]>) -> Result<()>;
    fn symlinkat(&mut self, target: impl AsRef<[u8]>, newdirfd: Fd, linkpath: impl AsRef<[u8]>) -> Result<()>;
    fn readlink(&mut self, path: impl AsRef<[u8]>) -> Result<Vec<u8>>;
    fn readlinkat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>) -> Result<Vec<u8>>;
    fn truncate(&mut self, path: impl AsRef<[u8]>, len: u64) -> Result<()>;
    fn utimensat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, times: Option<[Timespec; 2]>, flags: i32) -> Result<()>;
    fn futimens(&mut self, fd: Fd, times: Option<[Timespec; 2]>) -> Result<()>;
    fn chmod(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()>;
    fn fchmodat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: u32, flags: i32) -> Result<()>;
    fn fchmod(&mut self, fd: Fd, mode: u32) -> Result<()>;
    fn chown(&mut self, path: impl AsRef<[u8]>, uid: u32, gid: u32) -> Result<()>;
    fn lchown(&mut self, path: impl AsRef<[u8]>, uid: u32, gid: u32) -> Result<()>;
    fn fchownat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, uid: u32, gid: u32, flags: i32) -> Result<()>;
    fn fchown(&mut self, fd: Fd, uid: u32, gid: u32) -> Result<()>;
    fn statfs(&mut self, path: impl AsRef<[u8]>) -> Result<StatFs>;
    fn fstatfs(&mut self, fd: Fd) -> Result<StatFs>;
    fn chdir(&mut self, path: impl AsRef<[u8]>) -> Result<()>;
    fn chdir_ino(&mut self, ino: Ino) -> Result<()>;
    fn fchdir(&mut self, fd: Fd) -> Result<()>;
    fn getcwd(&mut self) -> Result<Vec<u8>>;
    fn access(&mut self, path: impl AsRef<[u8]>, mode: i32) -> Result<()>;
    fn faccessat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: i32, flags: i32) -> Result<()>;
}

impl Drop for Fs {
    fn drop(&mut self) {
        // Dropped by a panic's unwinding: the panic may have cut a call in
        // half, so nothing is committed and the image is not marked clean.
        if std::thread::panicking() {
            self.abandon();
        }
        let _ = self.shutdown();
    }
}

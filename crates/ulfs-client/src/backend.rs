//! An image, whichever process owns it: mounted in this process
//! (`ulfs::Fs`) or served by `ulfs serve` (`Client`). Both offer the same
//! calls with the same names, arguments and errnos, so a layer that serves
//! programs (the C API's handles, `ulfs run`'s preload library) writes each
//! call once, over `Backend`; the match costs one predictable branch. Hot
//! paths that need a local `Fs` directly (the C API's `ulfs_lseek` and
//! `ulfs_fstat`) match `Backend::Local` themselves.

use std::io::{IoSlice, IoSliceMut};
use ulfs::{Errno, Fd, FileDescription, Fs, MemoryBudget, Result, Stat, StatFs, Statx, Timespec};

use crate::Client;

// The local file system stays inline, so the hot path reaches it with no
// load more than before; a client is boxed, as it is large and rare.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    Local(Fs),
    Remote(Box<Client>),
}

macro_rules! forward {
    ($(fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        impl Backend {
            $(
                #[inline(always)]
                pub fn $name(&mut self $(, $arg: $ty)*) -> $ret {
                    match self {
                        Backend::Local(fs) => fs.$name($($arg),*),
                        Backend::Remote(c) => c.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

forward! {
    fn openat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd>;
    fn close(&mut self, fd: Fd) -> Result<()>;
    fn dup(&mut self, fd: Fd) -> Result<Fd>;
    fn dup2(&mut self, old: Fd, new: Fd) -> Result<Fd>;
    fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn pread(&mut self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize>;
    fn readv(&mut self, fd: Fd, bufs: &mut [IoSliceMut<'_>]) -> Result<usize>;
    fn write(&mut self, fd: Fd, buf: &[u8]) -> Result<usize>;
    fn pwrite(&mut self, fd: Fd, buf: &[u8], off: u64) -> Result<usize>;
    fn writev(&mut self, fd: Fd, bufs: &[IoSlice<'_>]) -> Result<usize>;
    fn lseek(&mut self, fd: Fd, off: i64, whence: i32) -> Result<u64>;
    fn fstat_libc(&mut self, fd: Fd, out: &mut std::mem::MaybeUninit<libc::stat>) -> Result<()>;
    fn fstat(&mut self, fd: Fd) -> Result<Stat>;
    fn stat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
    fn lstat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
    fn fstatfs(&mut self, fd: Fd) -> Result<StatFs>;
    fn readlink(&mut self, path: impl AsRef<[u8]>) -> Result<Vec<u8>>;
    fn file_description(&mut self, fd: Fd) -> Result<FileDescription>;
    fn fcntl_getfl(&mut self, fd: Fd) -> Result<i32>;
    fn fcntl_setfl(&mut self, fd: Fd, flags: i32) -> Result<()>;
    fn dupfd(&mut self, fd: Fd, lowest: Fd) -> Result<Fd>;
    fn ftruncate(&mut self, fd: Fd, len: u64) -> Result<()>;
    fn fallocate(&mut self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()>;
    fn fsync(&mut self, fd: Fd) -> Result<()>;
    fn fdatasync(&mut self, fd: Fd) -> Result<()>;
    fn sync(&mut self) -> Result<()>;
    fn getdents64(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn fstatat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32) -> Result<Stat>;
    fn statx(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32, mask: u32) -> Result<Statx>;
    fn mkdir(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()>;
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
    fn chdir(&mut self, path: impl AsRef<[u8]>) -> Result<()>;
    fn fchdir(&mut self, fd: Fd) -> Result<()>;
    fn getcwd(&mut self) -> Result<Vec<u8>>;
    fn access(&mut self, path: impl AsRef<[u8]>, mode: i32) -> Result<()>;
    fn faccessat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: i32, flags: i32) -> Result<()>;
}

impl Backend {
    /// A new open file description of the file open as `fd`, with
    /// `flags` (opening `/proc/self/fd/N`).
    pub fn reopen(&mut self, fd: Fd, flags: i32) -> Result<Fd> {
        match self {
            Backend::Local(fs) => {
                let ino = fs.fstat(fd)?.ino;
                fs.open_ino(ino, flags)
            }
            Backend::Remote(c) => c.reopen(fd, flags),
        }
    }

    /// Closes a descriptor the caller kept for itself (a mapping's): the
    /// process's POSIX locks on the file stay (`Client::close_kept`; in
    /// process the caller keeps its locks itself).
    pub fn close_kept(&mut self, fd: Fd) -> Result<()> {
        match self {
            Backend::Local(fs) => fs.close(fd),
            Backend::Remote(c) => c.close_kept(fd),
        }
    }

    /// Makes the process's umask `mask` before a call that creates a file,
    /// for a layer whose program keeps its umask elsewhere (the preload:
    /// the kernel's): a store in process; a request to a server only when
    /// it changed.
    pub fn set_umask_to(&mut self, mask: u32) -> Result<()> {
        match self {
            Backend::Local(fs) => {
                fs.umask(mask);
                Ok(())
            }
            Backend::Remote(c) => c.set_umask_to(mask),
        }
    }

    /// Whether the image may not be written. A server's clients learn it
    /// from their writes' EROFS: false for them.
    pub fn is_read_only(&self) -> bool {
        match self {
            Backend::Local(fs) => fs.volume().is_read_only(),
            Backend::Remote(_) => false,
        }
    }

    /// The local file system, when the image is mounted here.
    pub fn local(&mut self) -> Option<&mut Fs> {
        match self {
            Backend::Local(fs) => Some(fs),
            Backend::Remote(_) => None,
        }
    }

    /// After a panic in a call: a local volume turns read-only for good
    /// (`Fs::abandon`); a server's volume is the server's business.
    pub fn abandon(&mut self) {
        if let Backend::Local(fs) = self {
            fs.abandon();
        }
    }

    /// EOPNOTSUPP for a server's image: its memory is the server's.
    pub fn set_memory_budget(&mut self, budget: MemoryBudget) -> Result<()> {
        match self {
            Backend::Local(fs) => {
                fs.set_memory_budget(budget);
                Ok(())
            }
            Backend::Remote(_) => Err(Errno::EOPNOTSUPP),
        }
    }

    /// Unmounts a local image; disconnects from a server (which closes the
    /// client's descriptors and goes on serving others).
    pub fn unmount(self) -> Result<()> {
        match self {
            Backend::Local(fs) => fs.unmount(),
            Backend::Remote(c) => {
                drop(c);
                Ok(())
            }
        }
    }
}

//! What the model test runs ulfs through: the library itself (`Fs`), or
//! a server (`ulfs serve`, in this process's threads) and a client of it,
//! so that every call the model makes is also checked against tmpfs
//! through the wire: its encoding, the server's dispatch, and the answer.

use std::path::Path;
use ulfs::fs::Volume;
use ulfs::{Fd, Fs, MountOptions, Result, Stat, Statx, Timespec};
use ulfs_client::Client;
use ulfs_server::{Config, Server};

/// How a case reaches ulfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Library,
    Server,
}

pub enum Target {
    Library(Box<Fs>),
    /// The client first: it is dropped before the server stops.
    Served(Box<Client>, Option<Server>),
}

impl Target {
    /// Mounts `img` (or serves it, with its socket beside it) and connects.
    pub fn mount(img: &Path, via: Via) -> std::result::Result<Target, String> {
        match via {
            Via::Library => Fs::mount(img, MountOptions::default())
                .map(|fs| Target::Library(Box::new(fs)))
                .map_err(|e| e.to_string()),
            Via::Server => {
                let vol = Volume::mount(img, MountOptions::default()).map_err(|e| e.to_string())?;
                let mut cfg = Config::new(img.with_extension("sock"));
                cfg.workers = 1;
                let server = Server::start(vol, cfg).map_err(|e| e.to_string())?;
                let client = Client::connect(img.with_extension("sock"))
                    .map_err(|e| format!("connect: {e}"))?;
                Ok(Target::Served(Box::new(client), Some(server)))
            }
        }
    }

    /// Unmounts (or disconnects and stops the server, which unmounts).
    pub fn unmount(self) -> Result<()> {
        match self {
            Target::Library(fs) => fs.unmount(),
            Target::Served(client, mut server) => {
                drop(client);
                let server = server.take().expect("a running server");
                server.stopper().stop();
                server.join()
            }
        }
    }
}

macro_rules! forward {
    ($(fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        impl Target {
            $(
                pub fn $name(&mut self $(, $arg: $ty)*) -> $ret {
                    match self {
                        Target::Library(fs) => fs.$name($($arg),*),
                        Target::Served(c, _) => c.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

forward! {
    fn open(&mut self, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd>;
    fn openat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd>;
    fn close(&mut self, fd: Fd) -> Result<()>;
    fn dup(&mut self, fd: Fd) -> Result<Fd>;
    fn dup2(&mut self, old: Fd, new: Fd) -> Result<Fd>;
    fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn pread(&mut self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize>;
    fn write(&mut self, fd: Fd, buf: &[u8]) -> Result<usize>;
    fn pwrite(&mut self, fd: Fd, buf: &[u8], off: u64) -> Result<usize>;
    fn lseek(&mut self, fd: Fd, off: i64, whence: i32) -> Result<u64>;
    fn fstat(&mut self, fd: Fd) -> Result<Stat>;
    fn ftruncate(&mut self, fd: Fd, len: u64) -> Result<()>;
    fn fsync(&mut self, fd: Fd) -> Result<()>;
    fn fdatasync(&mut self, fd: Fd) -> Result<()>;
    fn getdents64(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize>;
    fn stat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
    fn lstat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat>;
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
    fn readlink(&mut self, path: impl AsRef<[u8]>) -> Result<Vec<u8>>;
    fn readlinkat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>) -> Result<Vec<u8>>;
    fn truncate(&mut self, path: impl AsRef<[u8]>, len: u64) -> Result<()>;
    fn utimensat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, times: Option<[Timespec; 2]>, flags: i32) -> Result<()>;
    fn chmod(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()>;
    fn fchmod(&mut self, fd: Fd, mode: u32) -> Result<()>;
    fn chown(&mut self, path: impl AsRef<[u8]>, uid: u32, gid: u32) -> Result<()>;
    fn fchown(&mut self, fd: Fd, uid: u32, gid: u32) -> Result<()>;
    fn chdir(&mut self, path: impl AsRef<[u8]>) -> Result<()>;
    fn fchdir(&mut self, fd: Fd) -> Result<()>;
    fn getcwd(&mut self) -> Result<Vec<u8>>;
    fn faccessat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: i32, flags: i32) -> Result<()>;
}

//! The copy engine behind `ulfs cp`: one algorithm for every pair of
//! sides — host to image, image to host, image to image (one image or
//! two), and host to host for an operand of a command that has an image
//! elsewhere.
//!
//! A side is reached through handles (`Dir`, `DirAt`, `File`) that are
//! either host descriptors or descriptors of a mounted image, and every
//! call below a command-line operand is made relative to an open
//! directory on each side, as import and export do: depth is bounded by
//! memory, not PATH_MAX (the host side keeps at most 64 directories open,
//! hostwalk.rs). The images live in one `Images` table that the handles
//! index, so a copy inside one image borrows its single mount once per
//! call instead of needing two.
//!
//! What is kept follows cp(1): without `archive`, a copy gets the source's
//! permission bits less the umask, new times and the caller as owner, and
//! hard links become separate files; with it, modes (set-id bits too),
//! times (ns), owners (into an image always, on the host only as root,
//! the only one allowed to give files away) and hard links within the
//! copy are kept. Symlinks inside a tree are always copied as symlinks. A
//! failing entry is reported and the copy goes on with the rest.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File as HostFile;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use ulfs::{Errno, Fd, Stat, Timespec};

use crate::dir;
use crate::error::{CliError, CliResult, Failures};
use crate::hostfs::{self, DirRef, HostDir, HostStat};
use crate::hostwalk::HostStack;
use crate::images::Images;
use crate::progress::{Progress, Unit};

const CHUNK: usize = 1 << 20;

/// Which side a handle or operand is on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Side {
    Host,
    Image(usize),
}

/// What a copy needs of a `stat`, from either side.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub nlink: u64,
    pub dev: u64,
    pub ino: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
}

impl Meta {
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    pub fn id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    fn times(&self) -> [Timespec; 2] {
        [self.atime, self.mtime]
    }

    fn from_image(st: &Stat) -> Meta {
        Meta {
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            nlink: st.nlink,
            dev: st.dev,
            ino: st.ino,
            atime: st.atime,
            mtime: st.mtime,
        }
    }

    fn from_host(st: &HostStat) -> Meta {
        let [atime, mtime] = hostfs::stat_times(st);
        Meta {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            nlink: st.st_nlink,
            dev: st.st_dev,
            ino: st.st_ino,
            atime,
            mtime,
        }
    }

    fn from_std(m: &std::fs::Metadata) -> Meta {
        Meta {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: m.size(),
            nlink: m.nlink(),
            dev: m.dev(),
            ino: m.ino(),
            atime: Timespec {
                sec: m.atime(),
                nsec: m.atime_nsec(),
            },
            mtime: Timespec {
                sec: m.mtime(),
                nsec: m.mtime_nsec(),
            },
        }
    }
}

/// A failed call on one side.
#[derive(Debug)]
pub enum Failure {
    Image(Errno),
    Host(io::Error),
}

impl Failure {
    pub fn at(self, ctx: impl Into<String>) -> CliError {
        match self {
            Failure::Image(e) => CliError::errno(ctx, e),
            Failure::Host(e) => CliError::io(ctx, &e),
        }
    }

    fn is_enoent(&self) -> bool {
        match self {
            Failure::Image(e) => *e == Errno::ENOENT,
            Failure::Host(e) => e.raw_os_error() == Some(libc::ENOENT),
        }
    }

    fn is_eexist(&self) -> bool {
        match self {
            Failure::Image(e) => *e == Errno::EEXIST,
            Failure::Host(e) => e.kind() == io::ErrorKind::AlreadyExists,
        }
    }
}

/// An open directory, owned.
pub enum Dir {
    Host(HostDir),
    Image(usize, Fd),
}

impl Dir {
    pub fn at(&self) -> DirAt<'_> {
        match self {
            Dir::Host(h) => DirAt::Host(h.as_dir()),
            Dir::Image(i, fd) => DirAt::Image(*i, *fd),
        }
    }

    pub fn close(self, imgs: &mut Images) {
        if let Dir::Image(i, fd) = self {
            let _ = imgs.fs(i).close(fd);
        }
    }
}

/// An open directory to make calls relative to.
#[derive(Clone, Copy)]
pub enum DirAt<'a> {
    Host(DirRef<'a>),
    Image(usize, Fd),
}

impl DirAt<'_> {
    pub fn side(self) -> Side {
        match self {
            DirAt::Host(_) => Side::Host,
            DirAt::Image(i, _) => Side::Image(i),
        }
    }

    /// The directory's own (device, inode).
    pub fn id(self, imgs: &mut Images) -> Result<(u64, u64), Failure> {
        match self {
            DirAt::Host(d) => d
                .stat()
                .map(|st| (st.st_dev, st.st_ino))
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .fstat(fd)
                .map(|st| (st.dev, st.ino))
                .map_err(Failure::Image),
        }
    }

    /// Sorted names, and the failure that cut the listing short if any.
    fn names(self, imgs: &mut Images) -> (Vec<Vec<u8>>, Option<Failure>) {
        match self {
            DirAt::Host(d) => match d.names() {
                Ok(names) => (names, None),
                Err(e) => (Vec::new(), Some(Failure::Host(e))),
            },
            DirAt::Image(i, fd) => {
                let (names, failed) = dir::read_dir_fd(imgs.fs(i), fd);
                (names, failed.map(Failure::Image))
            }
        }
    }

    /// `lstat` of the entry `name`.
    pub fn lstat(self, imgs: &mut Images, name: &[u8]) -> Result<Meta, Failure> {
        match self {
            DirAt::Host(d) => d
                .stat_at(name)
                .map(|st| Meta::from_host(&st))
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .fstatat(fd, name, libc::AT_SYMLINK_NOFOLLOW)
                .map(|st| Meta::from_image(&st))
                .map_err(Failure::Image),
        }
    }

    /// The subdirectory `name` (`..` included), never through a symlink.
    pub fn open_dir(self, imgs: &mut Images, name: &[u8]) -> Result<Dir, Failure> {
        match self {
            DirAt::Host(d) => d.open_dir_at(name).map(Dir::Host).map_err(Failure::Host),
            DirAt::Image(i, fd) => {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                imgs.fs(i)
                    .openat(fd, name, flags, 0)
                    .map(|fd| Dir::Image(i, fd))
                    .map_err(Failure::Image)
            }
        }
    }

    fn mkdir(self, imgs: &mut Images, name: &[u8], mode: u32) -> Result<(), Failure> {
        match self {
            DirAt::Host(d) => d.mkdir_at(name, mode).map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs.fs(i).mkdirat(fd, name, mode).map_err(Failure::Image),
        }
    }

    fn symlink(self, imgs: &mut Images, target: &[u8], name: &[u8]) -> Result<(), Failure> {
        match self {
            DirAt::Host(d) => d.symlink_at(target, name).map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .symlinkat(target, fd, name)
                .map_err(Failure::Image),
        }
    }

    fn readlink(self, imgs: &mut Images, name: &[u8]) -> Result<Vec<u8>, Failure> {
        match self {
            DirAt::Host(d) => d.readlink_at(name).map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs.fs(i).readlinkat(fd, name).map_err(Failure::Image),
        }
    }

    fn open_read(self, imgs: &mut Images, name: &[u8]) -> Result<File, Failure> {
        match self {
            // O_NONBLOCK: should a fifo have taken the file's place since
            // it was stat'ed, opening it must not wait for a writer.
            DirAt::Host(d) => d
                .open_file_at(name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                .map(File::Host)
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .openat(fd, name, libc::O_RDONLY | libc::O_NOFOLLOW, 0)
                .map(|fd| File::Image(i, fd))
                .map_err(Failure::Image),
        }
    }

    /// A new file `name` (never an existing one: the caller removed it).
    fn create(self, imgs: &mut Images, name: &[u8], mode: u32) -> Result<File, Failure> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        match self {
            DirAt::Host(d) => d
                .open_file_at(name, flags, mode)
                .map(File::Host)
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .openat(fd, name, flags | libc::O_NOFOLLOW, mode)
                .map(|fd| File::Image(i, fd))
                .map_err(Failure::Image),
        }
    }

    /// What the entry `name` names, through a symlink.
    fn stat(self, imgs: &mut Images, name: &[u8]) -> Result<Meta, Failure> {
        match self {
            DirAt::Host(d) => d
                .stat_follow_at(name)
                .map(|st| Meta::from_host(&st))
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .fstatat(fd, name, 0)
                .map(|st| Meta::from_image(&st))
                .map_err(Failure::Image),
        }
    }

    /// The existing regular file `name` names (through a symlink), emptied
    /// for writing: its inode, links, owner and mode stay, as with cp(1).
    fn open_existing(self, imgs: &mut Images, name: &[u8]) -> Result<File, Failure> {
        let flags = libc::O_WRONLY | libc::O_TRUNC;
        match self {
            DirAt::Host(d) => d
                .open_through_at(name, flags)
                .map(File::Host)
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs
                .fs(i)
                .openat(fd, name, flags, 0)
                .map(|fd| File::Image(i, fd))
                .map_err(Failure::Image),
        }
    }

    /// A second name `name` for the file open as `file` (same side).
    fn link(self, imgs: &mut Images, file: &File, name: &[u8]) -> Result<(), Failure> {
        match (self, file) {
            (DirAt::Host(d), File::Host(f)) => d.link_at(f, name).map_err(Failure::Host),
            (DirAt::Image(i, dir), File::Image(j, fd)) if i == *j => imgs
                .fs(i)
                .linkat(*fd, b"", dir, name, libc::AT_EMPTY_PATH)
                .map_err(Failure::Image),
            // Links are only made on the side the first copy was made.
            _ => Err(Failure::Image(Errno::EXDEV)),
        }
    }

    fn unlink(self, imgs: &mut Images, name: &[u8]) -> Result<(), Failure> {
        match self {
            DirAt::Host(d) => d.remove_non_dir_at(name).map_err(Failure::Host),
            DirAt::Image(i, fd) => imgs.fs(i).unlinkat(fd, name, 0).map_err(Failure::Image),
        }
    }

    /// Owner, mode (never for a symlink) and times, each when given, of
    /// the entry `name` (not following a symlink), or of this directory
    /// itself for an empty name.
    fn set_attrs(
        self,
        imgs: &mut Images,
        name: &[u8],
        owner: Option<(u32, u32)>,
        mode: Option<u32>,
        times: Option<[Timespec; 2]>,
    ) -> Result<(), Failure> {
        match self {
            DirAt::Host(d) => d
                .set_attrs_at(name, owner, mode, times)
                .map_err(Failure::Host),
            DirAt::Image(i, fd) => {
                let fs = imgs.fs(i);
                let nofollow = libc::AT_SYMLINK_NOFOLLOW;
                let r = if name.is_empty() {
                    owner
                        .map_or(Ok(()), |(u, g)| fs.fchown(fd, u, g))
                        .and_then(|()| mode.map_or(Ok(()), |m| fs.fchmod(fd, m)))
                        .and_then(|()| times.map_or(Ok(()), |t| fs.futimens(fd, Some(t))))
                } else {
                    owner
                        .map_or(Ok(()), |(u, g)| fs.fchownat(fd, name, u, g, nofollow))
                        .and_then(|()| mode.map_or(Ok(()), |m| fs.fchmodat(fd, name, m, 0)))
                        .and_then(|()| {
                            times.map_or(Ok(()), |t| fs.utimensat(fd, name, Some(t), nofollow))
                        })
                };
                r.map_err(Failure::Image)
            }
        }
    }
}

/// An open regular file.
pub enum File {
    Host(HostFile),
    Image(usize, Fd),
}

impl File {
    fn read_at(&self, imgs: &mut Images, buf: &mut [u8], off: u64) -> Result<usize, Failure> {
        match self {
            File::Host(f) => loop {
                match f.read_at(buf, off) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r.map_err(Failure::Host),
                }
            },
            File::Image(i, fd) => imgs.fs(*i).pread(*fd, buf, off).map_err(Failure::Image),
        }
    }

    fn write_all_at(
        &self,
        imgs: &mut Images,
        mut data: &[u8],
        mut off: u64,
    ) -> Result<(), Failure> {
        match self {
            File::Host(f) => f.write_all_at(data, off).map_err(Failure::Host),
            File::Image(i, fd) => {
                let fs = imgs.fs(*i);
                while !data.is_empty() {
                    let n = fs.pwrite(*fd, data, off).map_err(Failure::Image)?;
                    if n == 0 {
                        // A write that makes no progress would loop forever.
                        return Err(Failure::Image(Errno::EIO));
                    }
                    data = data.get(n..).ok_or(Failure::Image(Errno::EIO))?;
                    off += n as u64;
                }
                Ok(())
            }
        }
    }

    /// Byte ranges below `size` that hold data (holes are skipped).
    fn segments(&self, imgs: &mut Images, size: u64) -> Result<Vec<(u64, u64)>, Failure> {
        match self {
            File::Host(f) => hostfs::data_segments(f, size).map_err(Failure::Host),
            File::Image(i, fd) => image_segments(imgs.fs(*i), *fd, size).map_err(Failure::Image),
        }
    }

    fn set_len(&self, imgs: &mut Images, len: u64) -> Result<(), Failure> {
        match self {
            File::Host(f) => f.set_len(len).map_err(Failure::Host),
            File::Image(i, fd) => imgs.fs(*i).ftruncate(*fd, len).map_err(Failure::Image),
        }
    }

    fn set_attrs(
        &self,
        imgs: &mut Images,
        owner: Option<(u32, u32)>,
        mode: Option<u32>,
        times: Option<[Timespec; 2]>,
    ) -> Result<(), Failure> {
        match self {
            File::Host(f) => {
                hostfs::set_fd_attrs(f.as_raw_fd(), owner, mode, times).map_err(Failure::Host)
            }
            File::Image(i, fd) => {
                let fs = imgs.fs(*i);
                owner
                    .map_or(Ok(()), |(u, g)| fs.fchown(*fd, u, g))
                    .and_then(|()| mode.map_or(Ok(()), |m| fs.fchmod(*fd, m)))
                    .and_then(|()| times.map_or(Ok(()), |t| fs.futimens(*fd, Some(t))))
                    .map_err(Failure::Image)
            }
        }
    }

    fn close(self, imgs: &mut Images) {
        if let File::Image(i, fd) = self {
            let _ = imgs.fs(i).close(fd);
        }
    }
}

/// Data ranges of an image file through SEEK_DATA/SEEK_HOLE.
fn image_segments(fs: &mut ulfs::Fs, fd: Fd, size: u64) -> ulfs::Result<Vec<(u64, u64)>> {
    crate::hostfs::segments_by(size, |off, whence| {
        let off = i64::try_from(off).map_err(|_| Errno::EOVERFLOW)?;
        match fs.lseek(fd, off, whence) {
            Ok(pos) => Ok(Some(pos)),
            Err(e) if e == Errno::ENXIO => Ok(None),
            Err(e) => Err(e),
        }
    })
}

fn host_path(path: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(path))
}

/// `lstat` (or `stat`, with `follow`) of an operand.
pub fn stat_path(
    imgs: &mut Images,
    side: Side,
    path: &[u8],
    follow: bool,
) -> Result<Meta, Failure> {
    match side {
        Side::Host => {
            let p = host_path(path);
            let m = if follow {
                std::fs::metadata(p)
            } else {
                std::fs::symlink_metadata(p)
            };
            m.map(|m| Meta::from_std(&m)).map_err(Failure::Host)
        }
        Side::Image(i) => {
            let fs = imgs.fs(i);
            let st = if follow {
                fs.stat(path)
            } else {
                fs.lstat(path)
            };
            st.map(|st| Meta::from_image(&st)).map_err(Failure::Image)
        }
    }
}

/// Opens the directory an operand names (a symlink to one is followed).
pub fn open_dir_path(imgs: &mut Images, side: Side, path: &[u8]) -> Result<Dir, Failure> {
    match side {
        Side::Host => HostDir::open(host_path(path))
            .map(Dir::Host)
            .map_err(Failure::Host),
        Side::Image(i) => imgs
            .fs(i)
            .open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map(|fd| Dir::Image(i, fd))
            .map_err(Failure::Image),
    }
}

/// Where a source entry is read from: an entry of an open directory, or a
/// command-line operand (followed if it is a symlink and `follow`).
#[derive(Clone, Copy)]
pub enum Src<'a> {
    At(DirAt<'a>, &'a [u8]),
    Path(Side, &'a [u8], bool),
}

impl Src<'_> {
    fn side(self) -> Side {
        match self {
            Src::At(d, _) => d.side(),
            Src::Path(side, _, _) => side,
        }
    }

    fn readlink(self, imgs: &mut Images) -> Result<Vec<u8>, Failure> {
        match self {
            Src::At(d, name) => d.readlink(imgs, name),
            Src::Path(Side::Host, path, _) => std::fs::read_link(host_path(path))
                .map(|t| t.into_os_string().into_vec())
                .map_err(Failure::Host),
            Src::Path(Side::Image(i), path, _) => imgs.fs(i).readlink(path).map_err(Failure::Image),
        }
    }

    fn open_read(self, imgs: &mut Images) -> Result<File, Failure> {
        let nofollow = |follow: bool| if follow { 0 } else { libc::O_NOFOLLOW };
        match self {
            Src::At(d, name) => d.open_read(imgs, name),
            Src::Path(Side::Host, path, follow) => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nofollow(follow) | libc::O_NONBLOCK)
                .open(host_path(path))
                .map(File::Host)
                .map_err(Failure::Host),
            Src::Path(Side::Image(i), path, follow) => imgs
                .fs(i)
                .open(path, libc::O_RDONLY | nofollow(follow), 0)
                .map(|fd| File::Image(i, fd))
                .map_err(Failure::Image),
        }
    }
}

/// Why an entry was not copied, or which side a failure was on.
pub enum Fault {
    Src(Failure),
    Dst(Failure),
    /// A refusal about the destination, in words.
    DstSays(String),
    /// Not copied, and not an error: a warning.
    Skipped(&'static str),
}

/// The directories of a walk on one side, from the operand down.
enum Chain {
    Host(HostStack),
    Image(usize, Vec<Fd>),
}

impl Chain {
    fn new(top: Dir) -> Chain {
        match top {
            Dir::Host(h) => Chain::Host(HostStack::new(h)),
            Dir::Image(i, fd) => Chain::Image(i, vec![fd]),
        }
    }

    fn top(&self) -> DirAt<'_> {
        match self {
            Chain::Host(s) => DirAt::Host(s.top()),
            Chain::Image(i, fds) => DirAt::Image(*i, *fds.last().expect("the top stays open")),
        }
    }

    /// Makes the subdirectory `name` of the current directory current.
    fn enter(&mut self, imgs: &mut Images, name: &[u8]) -> Result<(), Failure> {
        match self {
            Chain::Host(s) => {
                let d = s.top().open_dir_at(name).map_err(Failure::Host)?;
                s.push(d);
            }
            Chain::Image(i, fds) => {
                let parent = *fds.last().expect("the top stays open");
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                let fd = imgs
                    .fs(*i)
                    .openat(parent, name, flags, 0)
                    .map_err(Failure::Image)?;
                fds.push(fd);
            }
        }
        Ok(())
    }

    fn leave(&mut self, imgs: &mut Images) -> Result<(), Failure> {
        match self {
            Chain::Host(s) => s.pop().map_err(Failure::Host),
            Chain::Image(i, fds) => {
                if let Some(fd) = fds.pop() {
                    let _ = imgs.fs(*i).close(fd);
                }
                Ok(())
            }
        }
    }

    fn close(self, imgs: &mut Images) {
        if let Chain::Image(i, fds) = self {
            for fd in fds {
                let _ = imgs.fs(i).close(fd);
            }
        }
    }
}

/// Names for messages: the operands as shown, and where below them the
/// walk is (joined only when a message needs it: it costs the depth).
pub struct Place<'a> {
    pub src: &'a str,
    pub dst: &'a str,
    pub below: &'a [Vec<u8>],
}

impl Place<'_> {
    fn join(top: &str, below: &[Vec<u8>], name: &[u8]) -> String {
        let mut s = top.to_string();
        for n in below.iter().map(|n| n.as_slice()).chain([name]) {
            if n.is_empty() {
                continue;
            }
            if !s.ends_with('/') {
                s.push('/');
            }
            s.push_str(&String::from_utf8_lossy(n));
        }
        s
    }

    pub fn src(&self, name: &[u8]) -> String {
        Place::join(self.src, self.below, name)
    }

    pub fn dst(&self, name: &[u8]) -> String {
        Place::join(self.dst, self.below, name)
    }
}

#[derive(Clone, Copy)]
pub struct Options {
    /// `-a`: keep modes, owners, times and hard links.
    pub archive: bool,
    /// Owners may be set on the host (root).
    pub host_owner: bool,
    /// The umask a copy without `archive` applies to directories it makes
    /// (files get it from the side's own creation call).
    pub umask: u32,
}

struct Frame {
    items: std::vec::IntoIter<(Vec<u8>, Meta)>,
    meta: Meta,
    created: bool,
}

pub struct Copier<'a> {
    pub imgs: &'a mut Images,
    opts: Options,
    buf: Vec<u8>,
    /// Source (side, dev, ino) of a multiply-linked file -> its copy (kept
    /// open to link to) and how many more names to expect.
    links: HashMap<(Side, u64, u64), (File, u64)>,
    progress: Progress,
    /// Directories' stats from the pre-scan, if there was one.
    dir_stats: DirStats,
    pub failures: Failures,
}

impl<'a> Copier<'a> {
    pub fn new(
        imgs: &'a mut Images,
        opts: Options,
        total_bytes: u64,
        dir_stats: DirStats,
    ) -> Copier<'a> {
        Copier {
            imgs,
            opts,
            buf: vec![0u8; CHUNK],
            links: HashMap::new(),
            dir_stats,
            progress: Progress::new("copying", Unit::Bytes, total_bytes),
            failures: Failures::default(),
        }
    }

    /// Closes what was kept open for hard links, clears the bar, and
    /// gives the outcome: an error if anything failed.
    pub fn finish(mut self) -> CliResult {
        for (file, _) in std::mem::take(&mut self.links).into_values() {
            file.close(self.imgs);
        }
        self.progress.finish();
        self.failures.finish()
    }

    pub fn report(&mut self, e: CliError) {
        self.failures.report(e);
    }

    pub fn report_fault(
        &mut self,
        f: Fault,
        src: impl FnOnce() -> String,
        dst: impl FnOnce() -> String,
    ) {
        match f {
            Fault::Src(f) => self.failures.report(f.at(format!("cp: {}", src()))),
            Fault::Dst(f) => self.failures.report(f.at(format!("cp: {}", dst()))),
            Fault::DstSays(msg) => self
                .failures
                .report(CliError::new(format!("cp: {}", dst()), msg)),
            Fault::Skipped(why) => eprintln!("ulfs: cp: {}: {why}", src()),
        }
    }

    fn owner_for(&self, dst: Side, meta: &Meta) -> Option<(u32, u32)> {
        let allowed = matches!(dst, Side::Image(_)) || self.opts.host_owner;
        (self.opts.archive && allowed).then_some((meta.uid, meta.gid))
    }

    /// Copies one command-line operand that is not a directory to the
    /// entry `name` of `dst`, reporting a failure.
    pub fn top_leaf(&mut self, src: Src, meta: &Meta, dst: DirAt, name: &[u8], place: &Place) {
        match self.leaf(src, meta, dst, name) {
            Ok(()) => {}
            // What a tree's walk passes over with a warning is a failure
            // when it was asked for by name.
            Err(Fault::Skipped(why)) => {
                let why = why.strip_prefix("skipping ").unwrap_or(why);
                let msg = format!("not copied: {why}");
                self.report(CliError::new(format!("cp: {}", place.src(b"")), msg));
            }
            Err(f) => self.report_fault(f, || place.src(b""), || place.dst(b"")),
        }
    }

    /// Makes the directory `name` in `dst` for a source directory; an
    /// existing directory is merged into. Returns whether it was made.
    pub fn make_dir(&mut self, dst: DirAt, name: &[u8]) -> Result<bool, Fault> {
        // Owner-writable until its contents are in; its mode is set last.
        match dst.mkdir(self.imgs, name, 0o700) {
            Ok(()) => Ok(true),
            Err(f) if f.is_eexist() => match dst.lstat(self.imgs, name) {
                Ok(m) if m.is_dir() => Ok(false),
                Ok(_) => Err(Fault::DstSays(
                    "cannot overwrite non-directory with directory".into(),
                )),
                Err(f) => Err(Fault::Dst(f)),
            },
            Err(f) => Err(Fault::Dst(f)),
        }
    }

    /// Copies the tree below the source directory `src` (stat'ed as
    /// `meta`) into the directory `dst` (made by this copy if `created`),
    /// then gives `dst` the source's attributes. Both are closed after.
    pub fn tree(&mut self, src: Dir, dst: Dir, meta: &Meta, created: bool, place: &Place) {
        let mut src = Chain::new(src);
        let mut dst = Chain::new(dst);
        let mut below: Vec<Vec<u8>> = Vec::new();
        let items = self.list(
            src.top(),
            &Place {
                below: &below,
                ..*place
            },
        );
        let mut frames = vec![Frame {
            items,
            meta: *meta,
            created,
        }];
        while let Some(frame) = frames.last_mut() {
            let Some((name, meta)) = frame.items.next() else {
                let frame = frames.pop().expect("a frame");
                if let Err(f) = self.dir_attrs(dst.top(), &frame.meta, frame.created) {
                    let at = Place {
                        below: &below,
                        ..*place
                    };
                    self.report_fault(Fault::Dst(f), || at.src(b""), || at.dst(b""));
                }
                if frames.is_empty() {
                    break;
                }
                let left = src.leave(self.imgs).and_then(|()| dst.leave(self.imgs));
                if let Err(f) = left {
                    // Lost our place: nothing more can go where it should.
                    let at = Place {
                        below: &below,
                        ..*place
                    };
                    self.report(f.at(format!("cp: {}", at.src(b""))));
                    break;
                }
                below.pop();
                continue;
            };
            let at = Place {
                below: &below,
                ..*place
            };
            if !meta.is_dir() {
                if let Err(f) = self.leaf(Src::At(src.top(), &name), &meta, dst.top(), &name) {
                    self.report_fault(f, || at.src(&name), || at.dst(&name));
                }
                continue;
            }
            let created = match self.make_dir(dst.top(), &name) {
                Ok(created) => created,
                Err(f) => {
                    self.report_fault(f, || at.src(&name), || at.dst(&name));
                    continue;
                }
            };
            if let Err(f) = src.enter(self.imgs, &name) {
                self.report_fault(Fault::Src(f), || at.src(&name), String::new);
                continue;
            }
            if let Err(f) = dst.enter(self.imgs, &name) {
                self.report_fault(Fault::Dst(f), String::new, || at.dst(&name));
                let _ = src.leave(self.imgs);
                continue;
            }
            below.push(name);
            let side = src.top().side();
            let meta = self
                .dir_stats
                .remove(&(side, meta.dev, meta.ino))
                .unwrap_or(meta);
            let items = self.list(
                src.top(),
                &Place {
                    below: &below,
                    ..*place
                },
            );
            frames.push(Frame {
                items,
                meta,
                created,
            });
        }
        src.close(self.imgs);
        dst.close(self.imgs);
    }

    /// The entries of a source directory, each lstat'ed; failures are
    /// reported and what could be read is returned.
    fn list(&mut self, dir: DirAt, at: &Place) -> std::vec::IntoIter<(Vec<u8>, Meta)> {
        let (names, failed) = dir.names(self.imgs);
        if let Some(f) = failed {
            self.report(f.at(format!("cp: {}", at.src(b""))));
        }
        let mut items = Vec::with_capacity(names.len());
        for name in names {
            match dir.lstat(self.imgs, &name) {
                Ok(meta) => items.push((name, meta)),
                Err(f) => self.report(f.at(format!("cp: {}", at.src(&name)))),
            }
        }
        items.into_iter()
    }

    /// A directory's attributes once its contents are in: the source's
    /// with `archive`; else, for one this copy made, its mode less the
    /// umask (cp(1) leaves an existing directory alone).
    fn dir_attrs(&mut self, dst: DirAt, meta: &Meta, created: bool) -> Result<(), Failure> {
        if self.opts.archive {
            let owner = self.owner_for(dst.side(), meta);
            let mode = Some(meta.mode & 0o7777);
            dst.set_attrs(self.imgs, b"", owner, mode, Some(meta.times()))
        } else if created {
            let mode = Some(meta.mode & 0o777 & !self.opts.umask);
            dst.set_attrs(self.imgs, b"", None, mode, None)
        } else {
            Ok(())
        }
    }

    /// Copies a non-directory `src` to the entry `name` of `dst`. As cp(1)
    /// does, a regular file there (or one a symlink there names) is
    /// written into, keeping its inode, links, owner and mode; a symlink
    /// (or a second name of a file already copied, with -a) replaces what
    /// is there; anything else there is refused, never replaced.
    fn leaf(&mut self, src: Src, meta: &Meta, dst: DirAt, name: &[u8]) -> Result<(), Fault> {
        if !meta.is_file() && !meta.is_symlink() {
            return Err(Fault::Skipped(
                "skipping special file (only files, directories and symlinks are copied)",
            ));
        }
        if src.side() == Side::Host && self.imgs.is_image(meta.dev, meta.ino) {
            return Err(Fault::Skipped("skipping the image itself"));
        }
        let exists = match dst.lstat(self.imgs, name) {
            Ok(d) if d.is_dir() => {
                return Err(Fault::DstSays(
                    "cannot overwrite directory with non-directory".into(),
                ));
            }
            Ok(d) if dst.side() == Side::Host && self.imgs.is_image(d.dev, d.ino) => {
                return Err(Fault::DstSays(
                    "is an image this command uses; refusing to overwrite it".into(),
                ));
            }
            Ok(_) => true,
            Err(f) if f.is_enoent() => false,
            Err(f) => return Err(Fault::Dst(f)),
        };
        let key = (src.side(), meta.dev, meta.ino);
        let second_name = self.opts.archive && meta.nlink > 1 && self.links.contains_key(&key);
        let write_into = exists && !meta.is_symlink() && !second_name;
        if write_into {
            match dst.stat(self.imgs, name) {
                Ok(t) if t.is_file() => {
                    if dst.side() == Side::Host && self.imgs.is_image(t.dev, t.ino) {
                        return Err(Fault::DstSays(
                            "names an image this command uses; refusing to overwrite it".into(),
                        ));
                    }
                }
                Ok(t) if t.is_dir() => {
                    return Err(Fault::DstSays(
                        "names a directory; cannot overwrite it with a non-directory".into(),
                    ));
                }
                Ok(_) => {
                    return Err(Fault::DstSays(
                        "is not a regular file (a device, FIFO or socket); not writing into it"
                            .into(),
                    ));
                }
                Err(f) if f.is_enoent() => {
                    return Err(Fault::DstSays(
                        "is a dangling symlink; not writing through it".into(),
                    ));
                }
                Err(f) => return Err(Fault::Dst(f)),
            }
        } else if exists {
            dst.unlink(self.imgs, name).map_err(Fault::Dst)?;
        }
        let owner = self.owner_for(dst.side(), meta);
        if meta.is_symlink() {
            let target = src.readlink(self.imgs).map_err(Fault::Src)?;
            dst.symlink(self.imgs, &target, name).map_err(Fault::Dst)?;
            if self.opts.archive {
                dst.set_attrs(self.imgs, name, owner, None, Some(meta.times()))
                    .map_err(Fault::Dst)?;
            }
            return Ok(());
        }
        if second_name && let Some((first, left)) = self.links.get_mut(&key) {
            dst.link(self.imgs, first, name).map_err(Fault::Dst)?;
            *left -= 1;
            if *left == 0
                && let Some((file, _)) = self.links.remove(&key)
            {
                file.close(self.imgs);
            }
            return Ok(());
        }
        let input = src.open_read(self.imgs).map_err(Fault::Src)?;
        let mode = if self.opts.archive {
            0o600
        } else {
            meta.mode & 0o777
        };
        let opened = if write_into {
            dst.open_existing(self.imgs, name)
        } else {
            dst.create(self.imgs, name, mode)
        };
        let output = match opened {
            Ok(f) => f,
            Err(f) => {
                input.close(self.imgs);
                return Err(Fault::Dst(f));
            }
        };
        let copied = self.data(&input, &output, meta.size);
        input.close(self.imgs);
        let done = copied.and_then(|()| {
            if self.opts.archive {
                let mode = Some(meta.mode & 0o7777);
                output
                    .set_attrs(self.imgs, owner, mode, Some(meta.times()))
                    .map_err(Fault::Dst)
            } else {
                Ok(())
            }
        });
        if done.is_ok() && self.opts.archive && meta.nlink > 1 {
            self.links.insert(key, (output, meta.nlink - 1));
        } else {
            output.close(self.imgs);
        }
        done
    }

    /// Copies the data of `input` (whose stat said `size` bytes) to
    /// `output`: holes stay holes, and the file is read to its real end,
    /// so a file that grew or shrank while it was read (or a /proc file,
    /// whose stat size is not its length) is stored as read.
    fn data(&mut self, input: &File, output: &File, size: u64) -> Result<(), Fault> {
        let segments = input.segments(self.imgs, size).map_err(Fault::Src)?;
        let mut read = 0u64;
        let end = crate::hostfs::read_segments(segments, size, CHUNK, |off, want| {
            let n = self.chunk(input, output, off, want)?;
            read += n as u64;
            Ok(n)
        })?;
        let len = if end.shrank {
            end.end
        } else {
            // Data that ended below the size: a trailing hole.
            end.end.max(size)
        };
        output.set_len(self.imgs, len).map_err(Fault::Dst)?;
        // Holes count as done, so the bar ends near the scanned total.
        self.progress.add(size.saturating_sub(read));
        Ok(())
    }

    fn chunk(
        &mut self,
        input: &File,
        output: &File,
        off: u64,
        want: usize,
    ) -> Result<usize, Fault> {
        let buf = &mut self.buf[..want];
        let n = input.read_at(self.imgs, buf, off).map_err(Fault::Src)?;
        let data = buf.get(..n).ok_or(Fault::Src(Failure::Image(Errno::EIO)))?;
        output
            .write_all_at(self.imgs, data, off)
            .map_err(Fault::Dst)?;
        self.progress.add(n as u64);
        Ok(n)
    }
}

/// Directories' stats as a pre-scan saw them, by (side, dev, ino).
pub type DirStats = HashMap<(Side, u64, u64), Meta>;

/// Bytes a copy of the operand will write, for the progress bar (each
/// hard-linked file once); what cannot be read counts as nothing, the
/// copy reports it. Each directory's stat, as its parent's listing gave
/// it before the scan read the directory (which moves its atime), goes
/// into `dirs`, for the times `-a` gives its copy.
pub fn scan(
    imgs: &mut Images,
    side: Side,
    path: &[u8],
    meta: &Meta,
    recursive: bool,
    dirs: &mut DirStats,
) -> u64 {
    if !meta.is_dir() {
        return if meta.is_file() { meta.size } else { 0 };
    }
    if !recursive {
        return 0;
    }
    let Ok(top) = open_dir_path(imgs, side, path) else {
        return 0;
    };
    let mut chain = Chain::new(top);
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut frames: Vec<std::vec::IntoIter<Vec<u8>>> = Vec::new();
    let mut entered = true;
    loop {
        if std::mem::take(&mut entered) {
            let dir = chain.top();
            let (names, _) = dir.names(imgs);
            let mut subdirs = Vec::new();
            for name in names {
                let Ok(m) = dir.lstat(imgs, &name) else {
                    continue;
                };
                if m.is_dir() {
                    dirs.insert((side, m.dev, m.ino), m);
                    subdirs.push(name);
                } else if m.is_file() && (m.nlink < 2 || seen.insert(m.id())) {
                    total = total.saturating_add(m.size);
                }
            }
            frames.push(subdirs.into_iter());
        }
        let Some(frame) = frames.last_mut() else {
            break;
        };
        match frame.next() {
            Some(name) => entered = chain.enter(imgs, &name).is_ok(),
            None => {
                frames.pop();
                if frames.is_empty() || chain.leave(imgs).is_err() {
                    break;
                }
            }
        }
    }
    chain.close(imgs);
    total
}

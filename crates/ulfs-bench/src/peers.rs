//! The file systems under test behind one trait: ulfs through its Rust API
//! (in either durability mode) and the host kernel through libc.
//!
//! The workloads are generic over [`Peer`], so each peer's loop is
//! monomorphized and inlined: the only difference left between the timed
//! loops is the file system call itself, not dispatch overhead. For the
//! in-memory workloads all peers live on `/dev/shm` (when it exists) so the
//! comparison is between code paths, not between a disk and RAM; for the
//! fsync workload they all live on the host disk ([`disk_dir`]).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// The smallest set of calls the workloads need. Names are single
/// path components inside the peer's private directory.
pub trait Peer {
    /// Opens a new, empty file for reading and writing; fails if it exists,
    /// so a leftover from a previous repetition cannot go unnoticed.
    fn create(&mut self, name: &str) -> io::Result<i32>;
    /// Opens an existing file for reading.
    fn open_read(&mut self, name: &str) -> io::Result<i32>;
    fn close(&mut self, fd: i32) -> io::Result<()>;
    /// `fsync(fd)`: durable on the medium behind the peer.
    fn fsync(&mut self, fd: i32) -> io::Result<()>;
    /// Makes everything durable, untimed: used between repetitions so one
    /// repetition's leftovers (unlinks) are not committed by the next one's
    /// first fsync.
    fn sync_all(&mut self) -> io::Result<()>;
    fn unlink(&mut self, name: &str) -> io::Result<()>;
    /// `lseek(fd, 0, SEEK_SET)`.
    fn rewind(&mut self, fd: i32) -> io::Result<u64>;
    /// `fstat(fd)`, of which only `st_ino` is used, as in the paper.
    fn ino(&mut self, fd: i32) -> io::Result<u64>;
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> io::Result<usize>;
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> io::Result<usize>;
}

/// Where both peers keep their files: tmpfs when the machine has it, so
/// neither side pays for a disk.
pub fn memory_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Where the fsync workload keeps its files and images: the host's temp
/// directory, which is on the machine's disk file system unless TMPDIR
/// says otherwise ([`fs_kind`] reports which it was).
pub fn disk_dir() -> PathBuf {
    std::env::temp_dir()
}

/// Names the file system holding `dir`, so the report says whether the
/// "tmpfs" peer really was tmpfs and the "ext4" one really ext4.
pub fn fs_kind(dir: &Path) -> String {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: `libc::statfs` is a plain C struct of integers; all-zero bytes
    // are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path that outlives the call and `st`
    // is a valid, writable `statfs`.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown".into();
    }
    match st.f_type {
        libc::TMPFS_MAGIC => "tmpfs".into(),
        // ext2, ext3 and ext4 share one magic number.
        libc::EXT4_SUPER_MAGIC => format!("ext4 (f_type {:#x})", st.f_type),
        other => format!("f_type {other:#x}"),
    }
}

pub struct UlfsPeer {
    fs: ulfs::Fs,
    image: PathBuf,
    // Dropped after `fs` (field order), so the image outlives the mount.
    _dir: TempDir,
}

impl UlfsPeer {
    /// A fresh `size`-byte image in `mode` in a temporary directory under
    /// `parent`, mounted, prefaulted and synced. The workloads unlink their
    /// files after every repetition, so the image needs to hold one
    /// repetition's files with room to spare.
    pub fn new(parent: &Path, mode: ulfs::Mode, size: u64) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ulfs-bench-img.")
            .tempdir_in(parent)?;
        let image = dir.path().join("bench.img");
        let opts = ulfs::MkfsOptions {
            size,
            label: "ulfs-bench".into(),
            mode,
            ..Default::default()
        };
        ulfs::mkfs(&image, &opts).map_err(to_io)?;
        let fs = ulfs::Fs::mount(&image, ulfs::MountOptions::default()).map_err(to_io)?;
        let mut peer = UlfsPeer {
            fs,
            image,
            _dir: dir,
        };
        peer.prefault()?;
        // On a disk, the prefault's dirty pages are written back here,
        // untimed, instead of by the first measured fsync.
        peer.sync_all()?;
        Ok(peer)
    }

    /// Fills the image once and frees it again, so every block the runs
    /// allocate is already backed by a host page. Without this, each
    /// repetition's fresh file lands on blocks never touched before (the
    /// allocator moves on through the image rather than reusing what was
    /// just freed), so read-after-write pays a host page fault per block
    /// until the whole image has been touched once, and the median would
    /// depend on how many repetitions a cell happened to run. The cold cost
    /// is real but one-time per image; bench-findings.md gives its size.
    /// On a disk image it also turns the preallocated (unwritten) extents
    /// of the host file into written ones, which a fresh image's first
    /// flushes would otherwise pay for in the host's journal.
    fn prefault(&mut self) -> io::Result<()> {
        const NAME: &str = "prefault";
        let buf = vec![0xA5u8; 1 << 20];
        let fd = self.create(NAME)?;
        let mut off = 0u64;
        loop {
            match self.fs.pwrite(fd, &buf, off) {
                Ok(n) if n == buf.len() => off += n as u64,
                Ok(_) | Err(ulfs::Errno::ENOSPC) => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.close(fd)?;
        self.unlink(NAME)
    }

    pub fn image(&self) -> &Path {
        &self.image
    }

    /// Unmounts explicitly so that an error there is reported, not
    /// swallowed by `Drop`.
    pub fn finish(self) -> io::Result<()> {
        self.fs.unmount().map_err(io::Error::from)
    }
}

fn to_io(e: ulfs::Error) -> io::Error {
    io::Error::new(io::Error::from(e.errno).kind(), e.message)
}

fn ulfs_path(name: &str) -> String {
    format!("/{name}")
}

impl Peer for UlfsPeer {
    fn create(&mut self, name: &str) -> io::Result<i32> {
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
        Ok(self.fs.open(ulfs_path(name), flags, 0o644)?)
    }

    fn open_read(&mut self, name: &str) -> io::Result<i32> {
        Ok(self.fs.open(ulfs_path(name), libc::O_RDONLY, 0)?)
    }

    fn close(&mut self, fd: i32) -> io::Result<()> {
        Ok(self.fs.close(fd)?)
    }

    fn fsync(&mut self, fd: i32) -> io::Result<()> {
        Ok(self.fs.fsync(fd)?)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        Ok(self.fs.sync()?)
    }

    fn unlink(&mut self, name: &str) -> io::Result<()> {
        Ok(self.fs.unlink(ulfs_path(name))?)
    }

    #[inline]
    fn rewind(&mut self, fd: i32) -> io::Result<u64> {
        Ok(self.fs.lseek(fd, 0, libc::SEEK_SET)?)
    }

    #[inline]
    fn ino(&mut self, fd: i32) -> io::Result<u64> {
        Ok(self.fs.fstat(fd)?.ino)
    }

    #[inline]
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> io::Result<usize> {
        Ok(self.fs.pwrite(fd, buf, off)?)
    }

    #[inline]
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> io::Result<usize> {
        Ok(self.fs.pread(fd, buf, off)?)
    }
}

pub struct HostPeer {
    dir: TempDir,
}

impl HostPeer {
    pub fn new(parent: &Path) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ulfs-bench-host.")
            .tempdir_in(parent)?;
        Ok(HostPeer { dir })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> io::Result<CString> {
        CString::new(self.dir.path().join(name).as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }
}

/// Turns a libc return value into a `Result`, reading errno on failure.
#[inline]
fn check(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

impl Peer for HostPeer {
    fn create(&mut self, name: &str) -> io::Result<i32> {
        let path = self.path(name)?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY: `path` is a NUL-terminated string that outlives the call;
        // the mode argument is passed because O_CREAT is set.
        let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644 as libc::c_uint) };
        check(fd as isize).map(|_| fd)
    }

    fn open_read(&mut self, name: &str) -> io::Result<i32> {
        let path = self.path(name)?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        check(fd as isize).map(|_| fd)
    }

    fn close(&mut self, fd: i32) -> io::Result<()> {
        // SAFETY: `fd` was returned by `create` or `open_read` and is
        // closed only once.
        check(unsafe { libc::close(fd) } as isize).map(drop)
    }

    fn fsync(&mut self, fd: i32) -> io::Result<()> {
        // SAFETY: fsync only reads its integer argument; a bad `fd` is
        // reported as EBADF.
        check(unsafe { libc::fsync(fd) } as isize).map(drop)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        let path = self.path(".")?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        check(fd as isize)?;
        // SAFETY: `fd` was just opened and is closed once, below.
        let synced = check(unsafe { libc::syncfs(fd) } as isize);
        // SAFETY: as above.
        let closed = check(unsafe { libc::close(fd) } as isize);
        synced.and(closed).map(drop)
    }

    fn unlink(&mut self, name: &str) -> io::Result<()> {
        let path = self.path(name)?;
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        check(unsafe { libc::unlink(path.as_ptr()) } as isize).map(drop)
    }

    #[inline]
    fn rewind(&mut self, fd: i32) -> io::Result<u64> {
        // SAFETY: lseek only reads its integer arguments; a bad `fd` is
        // reported as EBADF, not undefined behaviour.
        check(unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } as isize).map(|o| o as u64)
    }

    #[inline]
    fn ino(&mut self, fd: i32) -> io::Result<u64> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is valid writable memory for one `struct stat`.
        check(unsafe { libc::fstat(fd, st.as_mut_ptr()) } as isize)?;
        // SAFETY: fstat succeeded, so it filled in the whole struct.
        Ok(unsafe { st.assume_init_ref() }.st_ino)
    }

    #[inline]
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> io::Result<usize> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the
        // duration of the call.
        check(unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t) })
    }

    #[inline]
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the
        // duration of the call and not aliased elsewhere.
        check(unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t) })
    }
}

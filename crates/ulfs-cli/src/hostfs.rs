//! Host-side file system helpers for import and export: directories held
//! open and used as the base of every call (openat, fstatat, mkdirat, ...,
//! so no host path is ever longer than one name), timestamps with
//! nanoseconds, symlink-safe attribute changes and sparse-file discovery.
//!
//! std has none of the *at calls, no `lutimes` and no SEEK_DATA/SEEK_HOLE;
//! the libc calls that fill those gaps are kept here, behind safe
//! functions.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use ulfs::Timespec;

/// Byte ranges of `file` (of length `size`) that hold data, skipping holes.
/// Falls back to "all data" where the host file system cannot tell.
pub fn data_segments(file: &File, size: u64) -> io::Result<Vec<(u64, u64)>> {
    let fd = file.as_raw_fd();
    segments_by(size, |off, whence| seek(fd, off, whence))
}

/// Where reading a file's data ranges to the file's real end stopped
/// (`read_segments`).
pub struct ReadEnd {
    /// The offset after the last byte read.
    pub end: u64,
    /// The end of the data read within the ranges (before any read past
    /// the stat size).
    pub reached: u64,
    /// A read in the ranges found the end early: the file shrank (or, as
    /// sysfs files, its stat size is not its length).
    pub shrank: bool,
}

/// Reads a file whose stat said `size` bytes through `chunk(off, len)`
/// (bytes read at `off`, at most `len`; 0 at the end): the data ranges
/// `segments` in pieces of at most `piece` bytes, then, unless the file
/// ended early, on past the stat size (a file that grew, or a /proc file
/// whose stat size is not its length). Import and cp share it.
pub fn read_segments<E>(
    segments: Vec<(u64, u64)>,
    size: u64,
    piece: usize,
    mut chunk: impl FnMut(u64, usize) -> Result<usize, E>,
) -> Result<ReadEnd, E> {
    let mut reached = 0;
    for (start, stop) in segments {
        let mut off = start;
        while off < stop {
            let want = usize::try_from(stop - off).unwrap_or(usize::MAX).min(piece);
            let n = chunk(off, want)?;
            if n == 0 {
                return Ok(ReadEnd {
                    end: off,
                    reached: off,
                    shrank: true,
                });
            }
            off += n as u64;
        }
        reached = off;
    }
    let mut off = size;
    loop {
        let n = chunk(off, piece)?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(ReadEnd {
        end: off,
        reached,
        shrank: false,
    })
}

/// The data ranges of a file of `size` bytes found with `seek(off,
/// SEEK_DATA | SEEK_HOLE)` (`None`: no data at or after `off`), for host
/// files and image files alike.
pub fn segments_by<E>(
    size: u64,
    mut seek: impl FnMut(u64, i32) -> Result<Option<u64>, E>,
) -> Result<Vec<(u64, u64)>, E> {
    let mut segments = Vec::new();
    let mut off = 0u64;
    while off < size {
        let Some(start) = seek(off, libc::SEEK_DATA)? else {
            break;
        };
        if start >= size {
            break;
        }
        let end = seek(start, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
        if end <= start {
            // Inconsistent answers (a file changing under us): copy the rest.
            segments.push((start, size));
            break;
        }
        segments.push((start, end));
        off = end;
    }
    Ok(segments)
}

/// lseek that reports "no more data" (ENXIO) as `None` and treats a file
/// system without SEEK_DATA support (EINVAL) as one big data segment.
fn seek(fd: libc::c_int, off: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off_t =
        libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: lseek on a descriptor we own (borrowed from a live `File`).
    let r = unsafe { libc::lseek(fd, off_t, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(off)),
        Some(libc::EINVAL) => Ok(Some(u64::MAX)),
        _ => Err(err),
    }
}

/// Changing owners needs privileges; only root can restore them.
pub fn can_chown() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The process's umask, read without changing it (umask(2) can only swap
/// it, a race with any other thread); 022, the usual one, where /proc does
/// not say.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// -1 from a libc call becomes the errno it set.
fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cname(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A host directory held open: import and export make every host call
/// relative to one (openat, fstatat, mkdirat, ...), so a tree deeper than
/// PATH_MAX is walked like any other. `id` is its (dev, ino), to make sure
/// a directory found again through `..` is the same one.
pub struct HostDir {
    pub(crate) fd: OwnedFd,
    pub(crate) id: (u64, u64),
}

/// `struct stat` of a host object (std cannot build a `Metadata` from a
/// descriptor-relative lookup).
pub type HostStat = libc::stat;

impl HostDir {
    /// Opens the directory `path` (a symlink to one is followed: it is a
    /// command-line operand).
    pub fn open(path: &Path) -> io::Result<HostDir> {
        let c = cname(path.as_os_str().as_bytes())?;
        // SAFETY: a NUL-terminated path; the descriptor returned is owned
        // by the `OwnedFd` made from it just below.
        let fd = cvt(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        HostDir::from_fd(fd)
    }

    fn from_fd(fd: libc::c_int) -> io::Result<HostDir> {
        // SAFETY: `fd` was just opened by us and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = fstat(fd.as_raw_fd())?;
        Ok(HostDir {
            fd,
            id: (st.st_dev, st.st_ino),
        })
    }

    /// Calls relative to this directory.
    pub fn as_dir(&self) -> DirRef<'_> {
        DirRef {
            fd: self.fd.as_fd(),
        }
    }
}

/// A directory to make calls relative to, held open by someone else.
#[derive(Clone, Copy)]
pub struct DirRef<'a> {
    pub(crate) fd: BorrowedFd<'a>,
}

impl DirRef<'_> {
    pub fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// The subdirectory `name`, not following a symlink.
    pub fn open_dir_at(&self, name: &[u8]) -> io::Result<HostDir> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        HostDir::from_fd(self.openat(name, flags, 0)?)
    }

    /// The parent directory, through `..` (the caller checks its identity).
    pub(crate) fn open_dir_at_dotdot(&self) -> io::Result<HostDir> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        HostDir::from_fd(self.openat(b"..", flags, 0)?)
    }

    fn openat(&self, name: &[u8], flags: libc::c_int, mode: u32) -> io::Result<libc::c_int> {
        let c = cname(name)?;
        // SAFETY: a NUL-terminated name relative to a descriptor we hold;
        // the caller takes ownership of the descriptor returned.
        cvt(unsafe { libc::openat(self.raw(), c.as_ptr(), flags, mode) })
    }

    /// Opens the file `name` (never through a symlink) as a `File`.
    pub fn open_file_at(&self, name: &[u8], flags: libc::c_int, mode: u32) -> io::Result<File> {
        let fd = self.openat(name, flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode)?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    pub fn stat(&self) -> io::Result<HostStat> {
        fstat(self.raw())
    }

    /// `fstatat` of what an entry names, through a symlink.
    pub fn stat_follow_at(&self, name: &[u8]) -> io::Result<HostStat> {
        let c = cname(name)?;
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: HostStat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated name and a writable stat buffer.
        cvt(unsafe { libc::fstatat(self.raw(), c.as_ptr(), &mut st, 0) })?;
        Ok(st)
    }

    /// Opens what the entry `name` names, through a symlink, as cp opens
    /// an existing destination.
    pub fn open_through_at(&self, name: &[u8], flags: libc::c_int) -> io::Result<File> {
        let fd = self.openat(name, flags | libc::O_CLOEXEC, 0)?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// `fstatat(AT_SYMLINK_NOFOLLOW)` of an entry.
    pub fn stat_at(&self, name: &[u8]) -> io::Result<HostStat> {
        let c = cname(name)?;
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: HostStat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated name and a writable stat buffer.
        cvt(unsafe { libc::fstatat(self.raw(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
        Ok(st)
    }

    /// The entries except `.` and `..`, sorted bytewise.
    pub fn names(&self) -> io::Result<Vec<Vec<u8>>> {
        // fdopendir takes the descriptor it is given: give it a copy.
        // SAFETY: dup of a descriptor we hold.
        let copy = cvt(unsafe { libc::fcntl(self.raw(), libc::F_DUPFD_CLOEXEC, 0) })?;
        // SAFETY: `copy` is a directory descriptor we own; on success the
        // stream owns it, on failure we close it.
        let dir = unsafe { libc::fdopendir(copy) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: `copy` is ours and was not taken.
            unsafe { libc::close(copy) };
            return Err(e);
        }
        let mut names = Vec::new();
        // SAFETY: `dir` is a valid stream; the copy shares its offset with
        // `self`, so start from the beginning.
        unsafe { libc::rewinddir(dir) };
        let failed = loop {
            // readdir reports errors only through errno.
            // SAFETY: errno is thread-local and writable.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `dir` is a valid, open stream.
            let ent = unsafe { libc::readdir(dir) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                break (e.raw_os_error() != Some(0)).then_some(e);
            }
            // SAFETY: readdir returned a valid entry whose d_name is
            // NUL-terminated; it stays valid until the next readdir call.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        };
        // SAFETY: `dir` is a valid stream, closed exactly once.
        unsafe { libc::closedir(dir) };
        if let Some(e) = failed {
            return Err(e);
        }
        names.sort_unstable();
        Ok(names)
    }

    pub fn mkdir_at(&self, name: &[u8], mode: u32) -> io::Result<()> {
        let c = cname(name)?;
        // SAFETY: a NUL-terminated name.
        cvt(unsafe { libc::mkdirat(self.raw(), c.as_ptr(), mode) }).map(drop)
    }

    pub fn symlink_at(&self, target: &[u8], name: &[u8]) -> io::Result<()> {
        let (t, c) = (cname(target)?, cname(name)?);
        // SAFETY: NUL-terminated strings.
        cvt(unsafe { libc::symlinkat(t.as_ptr(), self.raw(), c.as_ptr()) }).map(drop)
    }

    pub fn readlink_at(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        let c = cname(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: a NUL-terminated name and a writable buffer of that size.
        let n =
            unsafe { libc::readlinkat(self.raw(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// Removes whatever non-directory is at `name`, so a new entry can take
    /// its place without writing through an old symlink or hard link.
    pub fn remove_non_dir_at(&self, name: &[u8]) -> io::Result<()> {
        match self.stat_at(name) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e),
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                Err(io::Error::from_raw_os_error(libc::EISDIR))
            }
            Ok(_) => {
                let c = cname(name)?;
                // SAFETY: a NUL-terminated name.
                cvt(unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) }).map(drop)
            }
        }
    }

    /// A second name `name` for the file open as `file`: linkat with
    /// AT_EMPTY_PATH (root, or Linux 6.10+ for a file this process opened),
    /// else through /proc/self/fd.
    pub fn link_at(&self, file: &File, name: &[u8]) -> io::Result<()> {
        let c = cname(name)?;
        // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH names the
        // open file itself; `c` is NUL-terminated.
        let r = unsafe {
            libc::linkat(
                file.as_raw_fd(),
                c"".as_ptr(),
                self.raw(),
                c.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let proc_path = cname(format!("/proc/self/fd/{}", file.as_raw_fd()).as_bytes())?;
        // SAFETY: NUL-terminated paths.
        cvt(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc_path.as_ptr(),
                self.raw(),
                c.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })
        .map(drop)
    }

    /// Owner (when `owner` is given), mode (not for symlinks), then times
    /// (when given) of the entry `name`, or of this directory itself for an
    /// empty name.
    pub fn set_attrs_at(
        &self,
        name: &[u8],
        owner: Option<(u32, u32)>,
        mode: Option<u32>,
        times: Option<[Timespec; 2]>,
    ) -> io::Result<()> {
        let c = cname(name)?;
        let flags = libc::AT_SYMLINK_NOFOLLOW;
        if name.is_empty() {
            return set_fd_attrs(self.raw(), owner, mode, times);
        }
        if let Some((uid, gid)) = owner {
            // SAFETY: a NUL-terminated name.
            cvt(unsafe { libc::fchownat(self.raw(), c.as_ptr(), uid, gid, flags) })?;
        }
        if let Some(mode) = mode {
            // SAFETY: a NUL-terminated name (fchmodat follows a symlink:
            // callers pass no mode for symlinks).
            cvt(unsafe { libc::fchmodat(self.raw(), c.as_ptr(), mode, 0) })?;
        }
        let Some(times) = times else {
            return Ok(());
        };
        let ts = timespecs(times);
        // SAFETY: a NUL-terminated name and two valid timespecs.
        cvt(unsafe { libc::utimensat(self.raw(), c.as_ptr(), ts.as_ptr(), flags) }).map(drop)
    }
}

fn timespecs(times: [Timespec; 2]) -> [libc::timespec; 2] {
    times.map(|t| libc::timespec {
        tv_sec: t.sec as _,
        tv_nsec: t.nsec as _,
    })
}

/// Owner, mode, then times (each when given) of an open host file.
pub fn set_fd_attrs(
    fd: libc::c_int,
    owner: Option<(u32, u32)>,
    mode: Option<u32>,
    times: Option<[Timespec; 2]>,
) -> io::Result<()> {
    if let Some((uid, gid)) = owner {
        // SAFETY: fchown of a descriptor the caller holds.
        cvt(unsafe { libc::fchown(fd, uid, gid) })?;
    }
    if let Some(mode) = mode {
        // SAFETY: fchmod of a descriptor the caller holds.
        cvt(unsafe { libc::fchmod(fd, mode) })?;
    }
    let Some(times) = times else {
        return Ok(());
    };
    let ts = timespecs(times);
    // SAFETY: two valid timespecs for a descriptor the caller holds.
    cvt(unsafe { libc::futimens(fd, ts.as_ptr()) }).map(drop)
}

fn fstat(fd: libc::c_int) -> io::Result<HostStat> {
    // SAFETY: zeroed memory is a valid `struct stat`.
    let mut st: HostStat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a writable buffer.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// `[atime, mtime]` of a host stat.
pub fn stat_times(st: &HostStat) -> [Timespec; 2] {
    [
        Timespec {
            sec: st.st_atime,
            nsec: st.st_atime_nsec,
        },
        Timespec {
            sec: st.st_mtime,
            nsec: st.st_mtime_nsec,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn segments_cover_written_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let f = File::create(&path).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", 16 << 20).unwrap();
        let size = f.metadata().unwrap().len();
        let segs = data_segments(&f, size).unwrap();
        assert!(segs.first().is_some_and(|s| s.0 == 0 && s.1 >= 4));
        assert!(segs.last().is_some_and(|s| s.0 <= 16 << 20 && s.1 == size));
        let covered: u64 = segs.iter().map(|(a, b)| b - a).sum();
        assert!(covered <= size);
    }

    #[test]
    fn set_attrs_at_keeps_nanoseconds_on_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("l")).unwrap();
        let t = [
            Timespec {
                sec: 1_000_000_000,
                nsec: 123,
            },
            Timespec {
                sec: 1_234_567_890,
                nsec: 987_654_321,
            },
        ];
        let host = HostDir::open(dir.path()).unwrap();
        host.as_dir()
            .set_attrs_at(b"l", None, None, Some(t))
            .unwrap();
        let st = host.as_dir().stat_at(b"l").unwrap();
        assert_eq!(stat_times(&st), t);
        assert_eq!(host.as_dir().readlink_at(b"l").unwrap(), b"nowhere");
        assert_eq!(host.as_dir().names().unwrap(), vec![b"l".to_vec()]);
    }
}

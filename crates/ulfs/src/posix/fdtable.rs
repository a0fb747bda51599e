//! Descriptors and open file descriptions, kept apart from the volume so a
//! server can give each client its own table over one shared volume.
//!
//! As in POSIX, a descriptor names an open file description (offset, access
//! mode, O_APPEND); `dup` makes a second descriptor for the same description,
//! so the two share one offset.
//!
//! An `O_PATH` descriptor names a file without opening it: its description
//! is path-only, neither readable nor writable whatever access mode came
//! with the flag. Calls reach descriptions two ways, as Linux's two
//! look-ups: `get` (`fdget_raw`: close, dup, F_GETFL, fstat, a dirfd)
//! takes any descriptor, `get_io` (`fdget`: read, write, lseek, fchmod,
//! ...) refuses a path-only one with EBADF. The check matters beyond
//! POSIX: an `O_PATH` open checks no permission on the file, so a
//! path-only description that could be read would read any file.
//!
//! A server's client that forks hands its child a copy of its table
//! (`FdTable::fork`): the two tables then hold the same descriptions, whose
//! offset and status flags move to a `Shared` part both copies point to
//! (`sh -c 'cmd1; cmd2' > f` appends each command's output after the
//! other's). Each copy still holds its own open reference, so a table
//! closes its copy exactly as before; the description is gone, for its
//! OFD and flock locks, when the last copy closes (`Closed::last`). The
//! in-process `Fs` never forks its table, so its descriptions keep their
//! offset inline and pay one never-taken branch for the shared case.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::errno::{Errno, Result};
use crate::fs::OpenId;
use crate::types::{Fd, Ino};

/// Every description's id, unique in this address space (a server's
/// clients share one table of OFD and flock locks keyed by it).
static NEXT_DESCRIPTION: AtomicU64 = AtomicU64::new(1);

/// Default limit on descriptors per table: Linux's `nr_open` default
/// (1,048,576). `Fs::set_max_fds` changes it; EMFILE past it.
pub const MAX_FDS: usize = 1 << 20;

/// The highest limit a table accepts: descriptors are `i32`.
pub const MAX_FDS_CEILING: usize = i32::MAX as usize;

#[derive(Debug, Clone)]
pub struct OpenFile {
    pub ino: Ino,
    /// The volume's open inode (`Volume::open_ref`).
    pub open: OpenId,
    pub readable: bool,
    pub writable: bool,
    /// Opened with `O_PATH` (see the module comment).
    pub path_only: bool,
    pub is_dir: bool,
    /// Byte offset for files; the readdir cookie for directories (while
    /// `shared` is `None`).
    offset: u64,
    /// The file status flags `fcntl(F_GETFL)` reports (access mode and
    /// the `STATUS_FLAGS` the open or a later F_SETFL gave).
    status: i32,
    /// Descriptors of this table that refer to it.
    refs: u32,
    id: u64,
    /// Offset and status, once another process's table holds the
    /// description too.
    shared: Option<Arc<Shared>>,
}

/// What the processes sharing a description see change together.
/// Relaxed atomics: a call that moves the offset holds its volume lock
/// (a server's writers are serialized; two readers sharing one offset may
/// read the same bytes, which Linux prevents with `f_pos_lock`: noted in
/// docs/SERVE.md).
#[derive(Debug)]
struct Shared {
    offset: AtomicU64,
    status: AtomicI32,
}

/// What closing a descriptor ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    pub ino: Ino,
    /// The description's id (`FileDescription::id`).
    pub description: u64,
    /// No other descriptor of this table refers to the description: the
    /// table's open reference to the inode is dropped.
    pub last_here: bool,
    /// No descriptor of any table does: its OFD and flock locks go.
    pub last: bool,
    /// How dropping the table's open reference went (`Ctx::close_noting`;
    /// an error there, as a failed write-back of the inode, is close's
    /// answer, but the descriptor is closed all the same, with what that
    /// ends).
    pub released: Result<()>,
}

/// The flags an open file description keeps, as Linux's `f_flags` shows
/// them to F_GETFL (everything the open was given but the creation flags
/// and O_CLOEXEC); `O_LARGEFILE` is always set, as on 64-bit Linux.
pub const STATUS_FLAGS: i32 = libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_ASYNC
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_DIRECTORY
    | libc::O_NOFOLLOW;

/// The kernel's `O_LARGEFILE`, which F_GETFL shows on every file of a
/// 64-bit process (glibc's headers define the flag as 0 there, so the
/// `libc` constant cannot be used).
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub const O_LARGEFILE_KERNEL: i32 = 0o400000;
#[cfg(not(any(target_arch = "aarch64", target_arch = "arm")))]
pub const O_LARGEFILE_KERNEL: i32 = 0o100000;

/// What F_GETFL shows of an `O_PATH` open's flags: Linux keeps only these
/// (and O_CLOEXEC, a descriptor's flag), with no access mode and no
/// O_LARGEFILE.
pub const PATH_FLAGS: i32 = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// What F_SETFL may change (Linux's SETFL_MASK).
pub const SETFL_FLAGS: i32 =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME | libc::O_ASYNC;

impl OpenFile {
    pub fn new(ino: Ino, open: OpenId, flags: i32, is_dir: bool) -> OpenFile {
        let path_only = flags & libc::O_PATH != 0;
        let acc = flags & libc::O_ACCMODE;
        let status = if path_only {
            flags & PATH_FLAGS
        } else {
            (flags & (libc::O_ACCMODE | STATUS_FLAGS)) | O_LARGEFILE_KERNEL
        };
        OpenFile {
            ino,
            open,
            readable: !path_only && (acc == libc::O_RDONLY || acc == libc::O_RDWR),
            writable: !path_only && (acc == libc::O_WRONLY || acc == libc::O_RDWR),
            path_only,
            is_dir,
            offset: 0,
            status,
            refs: 1,
            id: NEXT_DESCRIPTION.fetch_add(1, Ordering::Relaxed),
            shared: None,
        }
    }

    /// Unique among the descriptions of this address space, and the same
    /// in every table a fork copied it to.
    pub fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    pub fn offset(&self) -> u64 {
        match &self.shared {
            None => self.offset,
            Some(s) => s.offset.load(Ordering::Relaxed),
        }
    }

    #[inline]
    pub fn set_offset(&mut self, off: u64) {
        match &self.shared {
            None => self.offset = off,
            Some(s) => s.offset.store(off, Ordering::Relaxed),
        }
    }

    #[inline]
    pub fn status(&self) -> i32 {
        match &self.shared {
            None => self.status,
            Some(s) => s.status.load(Ordering::Relaxed),
        }
    }

    pub fn set_status(&mut self, status: i32) {
        match &self.shared {
            None => self.status = status,
            Some(s) => s.status.store(status, Ordering::Relaxed),
        }
    }

    #[inline]
    pub fn append(&self) -> bool {
        self.status() & libc::O_APPEND != 0
    }

    /// The description as a second table will hold it: offset and status
    /// moved to the part both point to.
    fn share(&mut self) -> OpenFile {
        let shared = self
            .shared
            .get_or_insert_with(|| {
                Arc::new(Shared {
                    offset: AtomicU64::new(self.offset),
                    status: AtomicI32::new(self.status),
                })
            })
            .clone();
        OpenFile {
            shared: Some(shared),
            ..self.clone()
        }
    }

    /// Whether another table holds this description too.
    fn shared_elsewhere(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| Arc::strong_count(s) > 1)
    }
}

/// What a descriptor refers to: its description, and that description's
/// open inode (fixed for the description's life), so fstat reaches the
/// inode in two dependent loads instead of three.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The description's index plus one (a zero niche keeps
    /// `Option<Slot>` at 8 bytes).
    file_plus_one: std::num::NonZeroU32,
    open: OpenId,
}

impl Slot {
    #[inline]
    fn file(self) -> u32 {
        self.file_plus_one.get() - 1
    }
}

pub struct FdTable {
    fds: Vec<Option<Slot>>,
    /// Which descriptors are taken, so the lowest free one is found
    /// without scanning the table (Linux's open_fds/full_fds_bits pair).
    used: FdBitmap,
    files: Vec<Option<OpenFile>>,
    free_files: Vec<u32>,
    max_fds: usize,
}

impl Default for FdTable {
    fn default() -> FdTable {
        FdTable {
            fds: Vec::new(),
            used: FdBitmap::default(),
            files: Vec::new(),
            free_files: Vec::new(),
            max_fds: MAX_FDS,
        }
    }
}

impl FdTable {
    /// The descriptor limit: new descriptors are numbered below it.
    pub fn max_fds(&self) -> usize {
        self.max_fds
    }

    /// Sets the descriptor limit (as RLIMIT_NOFILE: descriptors already
    /// open above it stay open). EINVAL past `MAX_FDS_CEILING`.
    pub fn set_max_fds(&mut self, max: usize) -> Result<()> {
        if max > MAX_FDS_CEILING {
            return Err(Errno::EINVAL);
        }
        self.max_fds = max;
        Ok(())
    }

    fn lowest_free_fd(&self, from: usize) -> Result<usize> {
        let fd = self.used.first_clear(from);
        if fd >= self.max_fds {
            Err(Errno::EMFILE)
        } else {
            Ok(fd)
        }
    }

    fn bind(&mut self, fd: usize, file: u32, open: OpenId) {
        if fd >= self.fds.len() {
            self.fds.resize(fd + 1, None);
        }
        let file_plus_one =
            std::num::NonZeroU32::new(file + 1).expect("fewer than 2^32 - 1 descriptions");
        self.fds[fd] = Some(Slot {
            file_plus_one,
            open,
        });
        self.used.set(fd);
    }

    /// Installs a new open file description at the lowest free descriptor.
    pub fn insert(&mut self, file: OpenFile) -> Result<Fd> {
        let fd = self.lowest_free_fd(0)?;
        let open = file.open;
        let idx = match self.free_files.pop() {
            Some(i) => {
                self.files[i as usize] = Some(file);
                i
            }
            None => {
                self.files.push(Some(file));
                (self.files.len() - 1) as u32
            }
        };
        self.bind(fd, idx, open);
        Ok(fd as Fd)
    }

    #[inline]
    fn slot(&self, fd: Fd) -> Option<Slot> {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.fds.get(i).copied().flatten())
    }

    #[inline]
    fn index(&self, fd: Fd) -> Result<u32> {
        self.slot(fd).map(Slot::file).ok_or(Errno::EBADF)
    }

    /// The open inode behind `fd`, without reaching its description;
    /// never panics (the C API's fast `fstat`).
    #[inline]
    pub fn open_of(&self, fd: Fd) -> Option<OpenId> {
        self.slot(fd).map(|s| s.open)
    }

    /// The description behind any open descriptor, a path-only one
    /// included (Linux's `fdget_raw`).
    #[inline]
    pub fn get(&self, fd: Fd) -> Result<&OpenFile> {
        let i = self.index(fd)?;
        self.files
            .get(i as usize)
            .and_then(Option::as_ref)
            .ok_or(Errno::EBADF)
    }

    /// `get`, to change the description. Never panics.
    #[inline]
    pub fn get_mut(&mut self, fd: Fd) -> Result<&mut OpenFile> {
        let i = self.index(fd)?;
        self.files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .ok_or(Errno::EBADF)
    }

    /// The description behind `fd` for a call Linux makes through `fdget`:
    /// EBADF for a path-only one too.
    #[inline]
    pub fn get_io(&self, fd: Fd) -> Result<&OpenFile> {
        match self.get(fd)? {
            f if f.path_only => Err(Errno::EBADF),
            f => Ok(f),
        }
    }

    /// `get_io`, to change the description. Never panics (the C API's
    /// fast `lseek` relies on it: it runs without a panic guard).
    #[inline]
    pub fn get_io_mut(&mut self, fd: Fd) -> Result<&mut OpenFile> {
        match self.get_mut(fd)? {
            f if f.path_only => Err(Errno::EBADF),
            f => Ok(f),
        }
    }

    /// The open file description behind `fd`: its id and how many
    /// descriptors of this table refer to it.
    pub fn description(&self, fd: Fd) -> Result<(u64, u32)> {
        let f = self.get(fd)?;
        Ok((f.id, f.refs))
    }

    /// Closes `fd`; returns the inode when this was the description's last
    /// descriptor (the caller drops its open reference).
    pub fn close(&mut self, fd: Fd) -> Result<Option<Ino>> {
        let closed = self.close_noting(fd)?;
        Ok(closed.last_here.then_some(closed.ino))
    }

    /// Closes `fd`, saying what ended with it.
    pub fn close_noting(&mut self, fd: Fd) -> Result<Closed> {
        let i = self.index(fd)?;
        self.fds[fd as usize] = None;
        self.used.clear(fd as usize);
        let file = self.files[i as usize].as_mut().ok_or(Errno::EBADF)?;
        file.refs -= 1;
        let mut closed = Closed {
            ino: file.ino,
            description: file.id,
            last_here: file.refs == 0,
            last: false,
            released: Ok(()),
        };
        if closed.last_here {
            closed.last = !file.shared_elsewhere();
            self.files[i as usize] = None;
            self.free_files.push(i);
        }
        Ok(closed)
    }

    /// Whether any descriptor of this table refers to inode `ino`.
    pub fn holds_ino(&self, ino: Ino) -> bool {
        self.files.iter().flatten().any(|f| f.ino == ino)
    }

    /// A copy of the table for a forked child: the same descriptors, for
    /// the same descriptions (offsets and status flags shared from now
    /// on). Returns the inode of every description, each of which the
    /// caller references once more for the copy.
    pub fn fork(&mut self) -> (FdTable, Vec<Ino>) {
        let mut inos = Vec::new();
        let files = self
            .files
            .iter_mut()
            .map(|f| {
                f.as_mut().map(|f| {
                    inos.push(f.ino);
                    f.share()
                })
            })
            .collect();
        let copy = FdTable {
            fds: self.fds.clone(),
            used: self.used.clone(),
            files,
            free_files: self.free_files.clone(),
            max_fds: self.max_fds,
        };
        (copy, inos)
    }

    /// A second descriptor, >= `from`, for the description of `fd`
    /// (`dup`, and `fcntl(F_DUPFD)`: EINVAL for `from` past the limit).
    pub fn dup_from(&mut self, fd: Fd, from: usize) -> Result<Fd> {
        let i = self.index(fd)?;
        if from >= self.max_fds {
            return Err(Errno::EINVAL);
        }
        let new = self.lowest_free_fd(from)?;
        let file = self.files[i as usize].as_mut().ok_or(Errno::EBADF)?;
        file.refs += 1;
        let open = file.open;
        self.bind(new, i, open);
        Ok(new as Fd)
    }

    /// Makes `new` refer to the description of `old`. Returns what closing
    /// a descriptor already at `new` ended, if one was.
    pub fn dup2(&mut self, old: Fd, new: Fd) -> Result<(Fd, Option<Closed>)> {
        let i = self.index(old)?;
        if new < 0 || new as usize >= self.max_fds {
            return Err(Errno::EBADF);
        }
        if old == new {
            return Ok((new, None));
        }
        let closed = if self.index(new).is_ok() {
            Some(self.close_noting(new)?)
        } else {
            None
        };
        let file = self.files[i as usize].as_mut().ok_or(Errno::EBADF)?;
        file.refs += 1;
        let open = file.open;
        self.bind(new as usize, i, open);
        Ok((new, closed))
    }

    /// Every open descriptor (for unmount).
    pub fn open_fds(&self) -> Vec<Fd> {
        (0..self.fds.len())
            .filter(|&i| self.fds[i].is_some())
            .map(|i| i as Fd)
            .collect()
    }
}

/// A set of descriptor numbers with a summary level: bit `w` of `full`
/// says word `w` of `bits` is all ones. Finding the lowest clear bit from
/// a point costs one word test plus a scan of the summary, 64 times
/// smaller than the table; set and clear are O(1).
#[derive(Default, Clone)]
struct FdBitmap {
    bits: Vec<u64>,
    full: Vec<u64>,
}

impl FdBitmap {
    fn set(&mut self, n: usize) {
        let w = n / 64;
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
            self.full.resize(self.bits.len().div_ceil(64), 0);
        }
        self.bits[w] |= 1 << (n % 64);
        if self.bits[w] == u64::MAX {
            self.full[w / 64] |= 1 << (w % 64);
        }
    }

    fn clear(&mut self, n: usize) {
        let w = n / 64;
        if let Some(word) = self.bits.get_mut(w) {
            *word &= !(1 << (n % 64));
            self.full[w / 64] &= !(1 << (w % 64));
        }
    }

    /// The lowest number >= `from` not in the set.
    fn first_clear(&self, from: usize) -> usize {
        let w = from / 64;
        let Some(&word) = self.bits.get(w) else {
            return from;
        };
        let free = !word & (u64::MAX << (from % 64));
        if free != 0 {
            return w * 64 + free.trailing_zeros() as usize;
        }
        // The first word after `w` that is not full, by the summary.
        let next = w + 1;
        let mut s = next / 64;
        let mut mask = u64::MAX.checked_shl((next % 64) as u32).unwrap_or(0);
        while let Some(&summary) = self.full.get(s) {
            let open = !summary & mask;
            if open != 0 {
                let word = s * 64 + open.trailing_zeros() as usize;
                return match self.bits.get(word) {
                    Some(&b) => word * 64 + (!b).trailing_zeros() as usize,
                    None => word * 64,
                };
            }
            s += 1;
            mask = u64::MAX;
        }
        self.bits.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open file whose inode and flags the test does not look at.
    fn any_file() -> OpenFile {
        OpenFile::new(1, OpenId::test(0), 0, false)
    }

    #[test]
    fn lowest_fd_dup_and_shared_description() {
        let mut t = FdTable::default();
        let a = t
            .insert(OpenFile::new(10, OpenId::test(0), libc::O_RDWR, false))
            .unwrap();
        let b = t
            .insert(OpenFile::new(11, OpenId::test(0), libc::O_RDONLY, false))
            .unwrap();
        assert_eq!((a, b), (0, 1));
        let c = t.dup_from(a, 0).unwrap();
        assert_eq!(c, 2);
        t.get_mut(a).unwrap().set_offset(77);
        assert_eq!(t.get(c).unwrap().offset(), 77);
        assert_eq!(t.close(a).unwrap(), None);
        assert_eq!(t.close(c).unwrap(), Some(10));
        assert_eq!(t.get(c).unwrap_err(), Errno::EBADF);
        let (n, closed) = t.dup2(b, 5).unwrap();
        assert_eq!((n, closed), (5, None));
        assert_eq!(
            t.insert(OpenFile::new(12, OpenId::test(0), 0, false))
                .unwrap(),
            0
        );
        assert_eq!(t.dup2(9, 1).unwrap_err(), Errno::EBADF);
    }

    /// A forked copy holds the same descriptions: offsets and status
    /// flags move together, each table closes its own descriptors, and the
    /// description ends (for its locks) only with the last copy's close.
    #[test]
    fn forked_tables_share_descriptions_until_the_last_close() {
        let mut parent = FdTable::default();
        let a = parent
            .insert(OpenFile::new(10, OpenId::test(0), libc::O_WRONLY, false))
            .unwrap();
        let b = parent.dup_from(a, 0).unwrap();
        parent.get_mut(a).unwrap().set_offset(5);
        let (mut child, inos) = parent.fork();
        assert_eq!(inos, vec![10]);
        assert_eq!(child.get(a).unwrap().offset(), 5);
        child.get_mut(b).unwrap().set_offset(9);
        assert_eq!(parent.get(a).unwrap().offset(), 9);
        let flags = parent.get(a).unwrap().status() | libc::O_APPEND;
        parent.get_mut(b).unwrap().set_status(flags);
        assert!(child.get(a).unwrap().append());
        let id = parent.get(a).unwrap().id();
        assert_eq!(child.description(b).unwrap(), (id, 2));
        // The child's closes end its references only.
        let c = child.close_noting(a).unwrap();
        assert_eq!((c.last_here, c.last), (false, false));
        let c = child.close_noting(b).unwrap();
        assert_eq!(
            (c.ino, c.description, c.last_here, c.last),
            (10, id, true, false)
        );
        assert_eq!(child.get(a).unwrap_err(), Errno::EBADF);
        assert_eq!(parent.get(a).unwrap().offset(), 9);
        parent.close(a).unwrap();
        let c = parent.close_noting(b).unwrap();
        assert_eq!((c.last_here, c.last), (true, true));
        // A new description never takes an old one's id.
        let n = parent.insert(any_file()).unwrap();
        assert_ne!(parent.get(n).unwrap().id(), id);
    }

    /// An `O_PATH` description, whatever access mode came with the flag:
    /// neither readable nor writable, F_GETFL shows O_PATH and the flags
    /// Linux keeps, and `get_io` refuses it (and its copies) where `get`
    /// takes it.
    #[test]
    fn path_only_description() {
        let mut t = FdTable::default();
        let flags = libc::O_PATH | libc::O_RDWR | libc::O_NOFOLLOW | libc::O_APPEND;
        let fd = t
            .insert(OpenFile::new(10, OpenId::test(0), flags, false))
            .unwrap();
        let f = t.get(fd).unwrap();
        assert!(f.path_only && !f.readable && !f.writable);
        assert_eq!(f.status(), libc::O_PATH | libc::O_NOFOLLOW);
        assert_eq!(t.get_io(fd).unwrap_err(), Errno::EBADF);
        assert_eq!(t.get_io_mut(fd).unwrap_err(), Errno::EBADF);
        let dup = t.dup_from(fd, 0).unwrap();
        assert_eq!(t.get_io(dup).unwrap_err(), Errno::EBADF);
        let (child, _) = t.fork();
        assert_eq!(child.get_io(fd).unwrap_err(), Errno::EBADF);
        let rw = t
            .insert(OpenFile::new(11, OpenId::test(0), libc::O_RDWR, false))
            .unwrap();
        assert!(t.get_io(rw).unwrap().writable);
        assert!(t.get_io_mut(rw).is_ok());
    }

    #[test]
    fn emfile_at_the_limit_and_dup_respects_it() {
        let mut t = FdTable::default();
        t.set_max_fds(8).unwrap();
        for want in 0..8 {
            assert_eq!(t.insert(any_file()).unwrap(), want);
        }
        assert_eq!(t.insert(any_file()), Err(Errno::EMFILE));
        assert_eq!(t.dup_from(0, 0), Err(Errno::EMFILE));
        assert_eq!(t.dup_from(0, 8), Err(Errno::EINVAL));
        assert_eq!(t.dup2(0, 8).unwrap_err(), Errno::EBADF);
        t.close(5).unwrap();
        t.close(3).unwrap();
        assert_eq!(t.dup_from(0, 4).unwrap(), 5);
        assert_eq!(t.insert(any_file()).unwrap(), 3);
        assert_eq!(t.insert(any_file()), Err(Errno::EMFILE));
        // Lowering the limit keeps what is open; raising it lets more in.
        t.set_max_fds(4).unwrap();
        assert!(t.get(7).is_ok());
        t.set_max_fds(9).unwrap();
        assert_eq!(t.dup2(0, 8).unwrap().0, 8);
        assert_eq!(t.set_max_fds(MAX_FDS_CEILING + 1), Err(Errno::EINVAL));
    }

    /// The default limit is reachable (a linear scan made the millionth
    /// open take a million steps), and numbering stays lowest-free over
    /// the whole range.
    #[test]
    fn default_limit_reached_with_lowest_free_numbering() {
        let mut t = FdTable::default();
        for want in 0..MAX_FDS as Fd {
            assert_eq!(t.insert(any_file()).unwrap(), want);
        }
        assert_eq!(t.insert(any_file()), Err(Errno::EMFILE));
        for fd in [MAX_FDS as Fd - 1, 700_001, 70_000, 64, 63, 0] {
            t.close(fd).unwrap();
        }
        for want in [0, 63, 64, 70_000, 700_001, MAX_FDS as Fd - 1] {
            assert_eq!(t.insert(any_file()).unwrap(), want);
        }
        assert_eq!(t.insert(any_file()), Err(Errno::EMFILE));
    }

    #[test]
    fn bitmap_first_clear() {
        let mut b = FdBitmap::default();
        assert_eq!(b.first_clear(0), 0);
        assert_eq!(b.first_clear(1000), 1000);
        for n in 0..64 * 70 {
            b.set(n);
        }
        assert_eq!(b.first_clear(0), 64 * 70);
        assert_eq!(b.first_clear(5000), 5000);
        b.clear(64 * 65 + 3);
        assert_eq!(b.first_clear(0), 64 * 65 + 3);
        assert_eq!(b.first_clear(64 * 65 + 4), 64 * 70);
        b.set(64 * 65 + 3);
        b.set(64 * 200);
        assert_eq!(b.first_clear(64 * 70), 64 * 70);
        assert_eq!(b.first_clear(64 * 200), 64 * 200 + 1);
    }
}

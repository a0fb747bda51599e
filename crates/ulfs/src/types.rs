//! Plain data types shared by the syscall-shaped API and its callers:
//! `Stat`, `StatFs`, `Timespec`, and the Linux flag constants ulfs accepts.
//!
//! They live apart from the file-system logic so that the C ABI, the CLI and
//! (later) the preloader and server can speak them without pulling in the
//! engine.

/// Descriptor number, as in POSIX.
pub type Fd = i32;

/// Inode number: stable for the life of a file (see docs/FORMAT.md).
pub type Ino = u64;

/// A point in time, as `struct timespec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: i64,
}

impl Timespec {
    /// The current time for file timestamps. Like the kernel (which stamps
    /// files with `current_time()`, a coarse clock), this reads
    /// CLOCK_REALTIME_COARSE: a vDSO read with no system call, several
    /// times cheaper than the precise clock, and the same granularity
    /// Linux file systems show.
    #[inline]
    pub fn now() -> Timespec {
        coarse_clock(libc::CLOCK_REALTIME_COARSE).unwrap_or_else(|| {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos() as i64,
            }
        })
    }

    /// CLOCK_MONOTONIC_COARSE, for ages (how old the running transaction
    /// is, checked at the end of every call): as cheap as `now`, where
    /// `Instant::now` reads the precise clock.
    #[inline]
    pub fn monotonic() -> Timespec {
        coarse_clock(libc::CLOCK_MONOTONIC_COARSE).unwrap_or_else(|| {
            // No coarse clock (not Linux): `Instant` has no public epoch,
            // so count from the first call.
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            let d = START.get_or_init(std::time::Instant::now).elapsed();
            Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos() as i64,
            }
        })
    }

    /// `self + d` (saturating at the end of time): a deadline computed
    /// once, so a check against it is a comparison, not a division.
    pub fn plus(self, d: std::time::Duration) -> Timespec {
        let mut sec = self
            .sec
            .saturating_add(d.as_secs().min(i64::MAX as u64) as i64);
        let mut nsec = self.nsec + d.subsec_nanos() as i64;
        if nsec >= 1_000_000_000 {
            nsec -= 1_000_000_000;
            sec = sec.saturating_add(1);
        }
        Timespec { sec, nsec }
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn since(self, earlier: Timespec) -> std::time::Duration {
        let ns =
            (self.sec - earlier.sec) as i128 * 1_000_000_000 + (self.nsec - earlier.nsec) as i128;
        std::time::Duration::from_nanos(ns.clamp(0, u64::MAX as i128) as u64)
    }
}

/// One read of a coarse clock: a vDSO read with no system call.
#[inline]
fn coarse_clock(clock: libc::clockid_t) -> Option<Timespec> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only fills it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then_some(Timespec {
        sec: ts.tv_sec,
        nsec: ts.tv_nsec,
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (year, month
/// 1..=12, day 1..=31): Howard Hinnant's `days_from_civil`, exact for every
/// year, so tools can show and parse dates without a date library.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day) of a day count
/// from 1970-01-01. Every day count of an i64 second count is in range.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Everything `struct stat` carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: Ino,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    pub blksize: u64,
    /// In 512-byte units, as `st_blocks`.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Birth (creation) time: `statx`'s `stx_btime`; `struct stat` has no
    /// room for it.
    pub btime: Timespec,
}

impl Stat {
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    /// A FIFO, socket or device: a name and metadata, no contents.
    pub fn is_special(&self) -> bool {
        crate::format::inode::is_special_type(self.mode & libc::S_IFMT)
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    /// The system's `struct stat`, every field filled.
    pub fn to_libc(&self) -> libc::stat {
        // SAFETY: `libc::stat` is a plain C struct of integers, for which
        // all-zero bytes are a valid value (padding fields included).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_dev = self.dev as _;
        st.st_ino = self.ino as _;
        st.st_mode = self.mode as _;
        st.st_nlink = self.nlink as _;
        st.st_uid = self.uid as _;
        st.st_gid = self.gid as _;
        st.st_rdev = self.rdev as _;
        st.st_size = self.size as _;
        st.st_blksize = self.blksize as _;
        st.st_blocks = self.blocks as _;
        st.st_atime = self.atime.sec as _;
        st.st_atime_nsec = self.atime.nsec as _;
        st.st_mtime = self.mtime.sec as _;
        st.st_mtime_nsec = self.mtime.nsec as _;
        st.st_ctime = self.ctime.sec as _;
        st.st_ctime_nsec = self.ctime.nsec as _;
        st
    }
}

/// What `statx(2)` reports: a `Stat` and the `stx_mask` saying which of
/// its fields are filled (the basic stats always, the birth time when asked
/// for; ulfs has no mount id, attributes or direct-I/O alignments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statx {
    pub mask: u32,
    pub stat: Stat,
}

impl Statx {
    /// The system's `struct statx`; fields outside `mask` are zero.
    pub fn to_libc(&self) -> libc::statx {
        // SAFETY: `libc::statx` is a plain C struct of integers (and
        // padding), for which all-zero bytes are a valid value.
        let mut x: libc::statx = unsafe { std::mem::zeroed() };
        let s = &self.stat;
        let ts = |t: Timespec| {
            // SAFETY: as above: integers and a private padding field.
            let mut x: libc::statx_timestamp = unsafe { std::mem::zeroed() };
            x.tv_sec = t.sec;
            x.tv_nsec = t.nsec as u32;
            x
        };
        x.stx_mask = self.mask;
        x.stx_blksize = s.blksize as u32;
        x.stx_nlink = s.nlink as u32;
        x.stx_uid = s.uid;
        x.stx_gid = s.gid;
        x.stx_mode = s.mode as u16;
        x.stx_ino = s.ino;
        x.stx_size = s.size;
        x.stx_blocks = s.blocks;
        x.stx_atime = ts(s.atime);
        x.stx_mtime = ts(s.mtime);
        x.stx_ctime = ts(s.ctime);
        if self.mask & libc::STATX_BTIME != 0 {
            x.stx_btime = ts(s.btime);
        }
        x.stx_rdev_major = libc::major(s.rdev as libc::dev_t);
        x.stx_rdev_minor = libc::minor(s.rdev as libc::dev_t);
        x.stx_dev_major = libc::major(s.dev as libc::dev_t);
        x.stx_dev_minor = libc::minor(s.dev as libc::dev_t);
        x
    }
}

/// An open file description, as `Fs::file_description` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileDescription {
    /// Shared by every descriptor of the description (and by a forked
    /// copy in a server); never reused in the address space.
    pub id: u64,
    pub ino: Ino,
    /// Descriptors referring to it.
    pub refs: u32,
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    /// `f_type`: ulfs's magic number.
    pub fs_type: u64,
    pub bsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub fsid: u64,
    pub namelen: u64,
    pub frsize: u64,
}

impl StatFs {
    /// The system's `struct statfs`.
    pub fn to_libc(&self) -> libc::statfs {
        // SAFETY: `libc::statfs` is a plain C struct of integers; all-zero is valid.
        let mut s: libc::statfs = unsafe { std::mem::zeroed() };
        s.f_type = self.fs_type as _;
        s.f_bsize = self.bsize as _;
        s.f_blocks = self.blocks as _;
        s.f_bfree = self.bfree as _;
        s.f_bavail = self.bavail as _;
        s.f_files = self.files as _;
        s.f_ffree = self.ffree as _;
        s.f_namelen = self.namelen as _;
        s.f_frsize = self.frsize as _;
        // SAFETY: `fsid_t` is two ints in a C struct; we write its bytes.
        unsafe {
            let p = &mut s.f_fsid as *mut libc::fsid_t as *mut [i32; 2];
            *p = [self.fsid as i32, (self.fsid >> 32) as i32];
        }
        s
    }
}

/// Flags for `rename2` (as `renameat2`).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `nsec` values of `utimensat`.
pub const UTIME_NOW: i64 = libc::UTIME_NOW;
pub const UTIME_OMIT: i64 = libc::UTIME_OMIT;

/// `d_type` values of `getdents64`.
pub const DT_UNKNOWN: u8 = 0;
pub const DT_DIR: u8 = 4;
pub const DT_REG: u8 = 8;
pub const DT_LNK: u8 = 10;

/// `f_type` of `statfs` for ulfs images.
pub const ULFS_MAGIC: u64 = 0x554c_4653; // "ULFS"

//! The request codes, and what every field of a [`Req`](crate::Req) and
//! [`Cqe`](crate::Cqe) means for each: this module's doc comments are the
//! protocol's reference table (plan §2.3).
//!
//! Numbers are stable: groups start on multiples of 16 and a code is never
//! reused. A code the server does not know is answered `-ENOSYS`
//! ([`Op::from_u16`] gives `None`).
//!
//! # Conventions
//!
//! - `fd`/`fd2` are the client's ulfs descriptors (or `AT_FDCWD`) for the
//!   `*at` calls' directory. Unused ones are `-1`.
//! - `a[i]` are integers; `i32` arguments are stored sign-extended and read
//!   with `as i32`, `u32` ones with `as u32`.
//! - `p1`/`p2` are spans of the data area. Paths carry no NUL: an empty
//!   one is ENOENT, one of `PATH_MAX` bytes or more ENAMETOOLONG, one with
//!   a NUL inside EINVAL (the `*at` calls given `AT_EMPTY_PATH` accept an
//!   empty `p1`). Inputs come first (`p1`, then `p2` for a second path);
//!   an output goes to `p2`, except for `READ`/`PREAD`/`GETDENTS64`, whose
//!   only span `p1` is the buffer. A span outside the data area is
//!   `-EFAULT`; an output span too small for its record is `-EFAULT`.
//! - `res >= 0` is the value, `res < 0` is `-errno`. `aux` is zero unless
//!   a row says otherwise. An output longer than its span (GETCWD,
//!   READLINKAT) is cut, with `CQE_TRUNCATED` set and the full length in
//!   `aux[0]`.
//! - Stat records are [`WireStat`](crate::WireStat) /
//!   [`WireStatFs`](crate::WireStatFs), 128 bytes each.
//! - Times (UTIMENSAT, FUTIMENS) are 32 bytes in `p2`: four little-endian
//!   `i64`, atime sec, atime nsec, mtime sec, mtime nsec (`UTIME_NOW` /
//!   `UTIME_OMIT` in the nsec fields as usual); an empty `p2` is a NULL
//!   `times` (both now). See [`crate::stat::encode_times`].
//!
//! # Table
//!
//! | op | fd | fd2 | a | p1 | p2 | res / aux |
//! |---|---|---|---|---|---|---|
//! | NOP | | | | | | 0 |
//! | UMASK | | | `[0]` mask | | | old mask |
//! | SET_MAX_FDS | | | `[0]` limit | | | 0 |
//! | GETCWD | | | | | out | length written; cut: aux\[0\] full length |
//! | CHDIR | | | | path | | 0 |
//! | FCHDIR | fd | | | | | 0 |
//! | CHDIR_INO | | | `[0]` ino | | | 0 |
//! | PREPARE_FORK | | | `[0]` 1: the child has this process's memory (a fork), 0: not (a spawn) | | | 0; aux = token (16 bytes, LE) |
//! | PREPARE_EXEC | | | `[0]` 1: the same process goes on (a new connection after a change of ids), 0: an exec | | | 0; aux = token |
//! | SYNC | | | | | | 0 |
//! | CANCEL_TOKEN | | | `[0]`, `[1]` the token's halves (LE) | | | 0 |
//! | OPENAT | dirfd | | `[0]` flags, `[1]` mode | path | | fd; `CQE_OFFSET_YOURS` |
//! | REOPEN | fd | | `[0]` flags | | | new fd; `CQE_OFFSET_YOURS` |
//! | CLOSE | fd | | `[0]` bit 0: a descriptor the client kept for itself | | | 0 |
//! | DUP | fd | | | | | new fd |
//! | DUPFD | fd | | `[0]` lowest | | | new fd |
//! | DUP2 | old | new | | | | new |
//! | FCNTL_GETFL | fd | | | | | flags |
//! | FCNTL_SETFL | fd | | `[0]` flags | | | 0 |
//! | FILE_DESCRIPTION | fd | | | | | refs; aux = \[id, ino\] |
//! | READ | fd | | | buffer | | count |
//! | PREAD | fd | | `[0]` offset | buffer | | count |
//! | WRITE | fd | | | data | | count |
//! | PWRITE | fd | | `[0]` offset | data | | count |
//! | LSEEK | fd | | `[0]` offset (i64), `[1]` whence | | | new offset |
//! | FTRUNCATE | fd | | `[0]` length | | | 0 |
//! | FALLOCATE | fd | | `[0]` mode, `[1]` offset, `[2]` length | | | 0 |
//! | FSYNC, FDATASYNC | fd | | | | | 0 |
//! | GETDENTS64 | fd | | | buffer | | bytes |
//! | COPY_RANGE | in | out | `[0]` off_in, `[1]` off_out (`u64::MAX`: the description's offset), `[2]` len (≤ 16 MiB), `[3]` flags | | | bytes copied |
//! | FSTAT | fd | | | | out WireStat | 0 |
//! | FSTATAT | dirfd | | `[0]` AT flags | path | out WireStat | 0 |
//! | STATX | dirfd | | `[0]` AT flags, `[1]` mask | path | out WireStat (with mask) | 0 |
//! | STATFS | | | | path | out WireStatFs | 0 |
//! | FSTATFS | fd | | | | out WireStatFs | 0 |
//! | FACCESSAT | dirfd | | `[0]` mode, `[1]` AT flags | path | | 0 |
//! | READLINKAT | dirfd | | | path | out | length written; cut: aux\[0\] full length |
//! | MKDIRAT | dirfd | | `[0]` mode | path | | 0 |
//! | MKNODAT | dirfd | | `[0]` mode, `[1]` dev | path | | 0 |
//! | UNLINKAT | dirfd | | `[0]` AT flags | path | | 0 |
//! | RENAMEAT2 | olddirfd | newdirfd | `[0]` RENAME flags | old | new | 0 |
//! | LINKAT | olddirfd | newdirfd | `[0]` AT flags | old | new | 0 |
//! | SYMLINKAT | newdirfd | | | target | linkpath | 0 |
//! | TRUNCATE | | | `[0]` length | path | | 0 |
//! | UTIMENSAT | dirfd | | `[0]` AT flags | path | times | 0 |
//! | FUTIMENS | fd | | | | times | 0 |
//! | FCHMODAT | dirfd | | `[0]` mode, `[1]` AT flags | path | | 0 |
//! | FCHMOD | fd | | `[0]` mode | | | 0 |
//! | FCHOWNAT | dirfd | | `[0]` uid, `[1]` gid (`u32::MAX`: keep), `[2]` AT flags | path | | 0 |
//! | FCHOWN | fd | | `[0]` uid, `[1]` gid | | | 0 |
//! | LOCK | fd | | `[0]` class, `[1]` cmd, `[2]` type, `[3]` whence | start `i64`, len `i64` (16 bytes; none for flock) | | SET: 0, or `-EAGAIN` + `CQE_WOULD_BLOCK`, aux = holder \[start, len\]; GET: `type \| pid << 8`, aux = \[start, len\]; see [`Op::Lock`] |
//! | MAP_SHARED | fd | | `[0]` offset, `[1]` length, `[2]` prot | | | object id (memfd in an OBJECT message before it) |
//! | MSYNC | | | `[0]` object, `[1]` file offset, `[2]` length, `[3]` flags | | | 0 |
//! | UNMAP | | | `[0]` object | | | 0 |
//! | DIRECT | | | | out: the image's path | | path length, aux = \[device, inode\]; the board in an OBJECT message before it |
//! | LEASE | fd | | `[0]` offset, `[1]` most runs | out: lease record (`crate::lease`) | | runs |

macro_rules! ops {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $wire:literal; )*) => {
        /// A request code. `#[repr(u16)]`: `op as u16` is what goes in
        /// [`Req::op`](crate::Req::op).
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op {
            $( $(#[$doc])* $name = $code, )*
        }

        impl Op {
            /// Every code, in numeric order.
            pub const ALL: &'static [Op] = &[$(Op::$name),*];

            /// The code for `v`, or `None` for one this build does not
            /// know (answered `-ENOSYS`).
            #[inline]
            pub const fn from_u16(v: u16) -> Option<Op> {
                match v {
                    $( $code => Some(Op::$name), )*
                    _ => None,
                }
            }

            /// The protocol's name for the code (`"OPENAT"`), for logs.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Op::$name => $wire, )*
                }
            }
        }
    };
}

ops! {
    // Session: the process's own state in the server.
    /// Nothing; answers 0. For latency measurement and liveness.
    Nop = 0, "NOP";
    /// `umask(a[0])` → the old mask.
    Umask = 1, "UMASK";
    /// The process's descriptor limit (`RLIMIT_NOFILE`) = `a[0]`.
    SetMaxFds = 2, "SET_MAX_FDS";
    /// Working directory into `p2` (no NUL) → its length; cut to the span
    /// with `CQE_TRUNCATED` and the full length in `aux[0]`.
    Getcwd = 3, "GETCWD";
    /// `chdir(p1)`.
    Chdir = 4, "CHDIR";
    /// `fchdir(fd)`.
    Fchdir = 5, "FCHDIR";
    /// Working directory = inode `a[0]`, allowed only for an inode the
    /// client holds open (inheritance of a cwd across exec).
    ChdirIno = 6, "CHDIR_INO";
    /// About to fork: the server copies the process and answers 0 with a
    /// 16-byte token in `aux` (little-endian halves); the child presents
    /// it in ADOPT(Fork) on its own connection. `a[0]` 1: the child holds
    /// the parent's shared mappings (a fork), 0: not (a spawn).
    PrepareFork = 7, "PREPARE_FORK";
    /// About to exec: a token for ADOPT(Exec), by which the program the
    /// exec starts (the same pid) takes this process once the exec has
    /// closed this connection; the process goes on as it is until then.
    /// `a[0]` 1: a new connection of the same process (after a change of
    /// ids) whose shared mappings go along.
    PrepareExec = 8, "PREPARE_EXEC";
    /// `sync()`.
    Sync = 9, "SYNC";
    /// The fork, spawn or exec prepared under the token in `a[0]`, `a[1]`
    /// (its little-endian halves) did not happen: a process set aside
    /// for a child exits now, as one nobody adopts does after 30 s (its
    /// descriptions, and the OFD and `flock` locks on them, are let go at
    /// once); an exec's reserved token is dropped. Only the client that
    /// prepared it may: EACCES for another's, ENOENT for one not there.
    CancelToken = 10, "CANCEL_TOKEN";

    // Descriptors.
    /// `openat(fd, p1, a[0] as i32 flags, a[1] as u32 mode)` → fd.
    Openat = 16, "OPENAT";
    /// A new description of `fd`'s inode with flags `a[0]` → new fd
    /// (replaces `open_ino`; `/proc/self/fd/N` reopening).
    Reopen = 17, "REOPEN";
    /// `close(fd)`. Drops the client's POSIX locks on the file (any
    /// descriptor of it, as Linux), and the description's OFD and `flock`
    /// locks if this was its last descriptor. With `a[0]` bit 0, a
    /// descriptor the client kept for itself (a mapping's, a path call's):
    /// the process's POSIX locks stay, as the end of a mapping leaves them
    /// on Linux, but only while the process has another descriptor of the
    /// file (a lock never outlives the last).
    Close = 18, "CLOSE";
    /// `dup(fd)` → new fd.
    Dup = 19, "DUP";
    /// `fcntl(fd, F_DUPFD, a[0])` → the lowest free fd `>= a[0]`.
    Dupfd = 20, "DUPFD";
    /// `dup2(fd, fd2)` → `fd2`. Closing a descriptor already at `fd2`
    /// releases locks as CLOSE does.
    Dup2 = 21, "DUP2";
    /// `fcntl(fd, F_GETFL)` → status flags.
    FcntlGetfl = 22, "FCNTL_GETFL";
    /// `fcntl(fd, F_SETFL, a[0])`.
    FcntlSetfl = 23, "FCNTL_SETFL";
    /// `fd`'s description → `refs` in `res`, `aux = [id, ino]`.
    FileDescription = 24, "FILE_DESCRIPTION";

    // Data.
    /// `read(fd)` into `p1` (the span's length is the count asked) → bytes
    /// read. A transfer longer than the data area is split by the client.
    Read = 32, "READ";
    /// `pread(fd, p1, a[0])` → bytes read.
    Pread = 33, "PREAD";
    /// `write(fd, p1)` → bytes written. One request is one atomic write
    /// (O_APPEND included) up to the data area's size.
    Write = 34, "WRITE";
    /// `pwrite(fd, p1, a[0])` → bytes written.
    Pwrite = 35, "PWRITE";
    /// `lseek(fd, a[0] as i64, a[1] as i32 whence)` → the new offset.
    Lseek = 36, "LSEEK";
    /// `ftruncate(fd, a[0])`.
    Ftruncate = 37, "FTRUNCATE";
    /// `fallocate(fd, a[0] as i32 mode, a[1] offset, a[2] length)`.
    Fallocate = 38, "FALLOCATE";
    /// `fsync(fd)`.
    Fsync = 39, "FSYNC";
    /// `fdatasync(fd)`.
    Fdatasync = 40, "FDATASYNC";
    /// `getdents64(fd)` into `p1` → bytes of records.
    Getdents64 = 41, "GETDENTS64";
    /// `copy_file_range(fd, a[0], fd2, a[1], a[2], a[3] as u32 flags)`
    /// inside the server. An offset of `u64::MAX` means "the description's
    /// own offset, advanced" (a NULL `off_in`/`off_out`). `a[2]` above
    /// 16 MiB is cut to 16 MiB (FUSE's `COPY_MAX`) → bytes copied.
    CopyRange = 42, "COPY_RANGE";

    // Stat.
    /// `fstat(fd)` → 0, a `WireStat` in `p2`.
    Fstat = 48, "FSTAT";
    /// `fstatat(fd, p1, a[0] as i32 flags)` → 0, a `WireStat` in `p2`.
    Fstatat = 49, "FSTATAT";
    /// `statx(fd, p1, a[0] as i32 flags, a[1] as u32 mask)` → 0, a
    /// `WireStat` with its `mask` in `p2`.
    Statx = 50, "STATX";
    /// `statfs(p1)` → 0, a `WireStatFs` in `p2`.
    Statfs = 51, "STATFS";
    /// `fstatfs(fd)` → 0, a `WireStatFs` in `p2`.
    Fstatfs = 52, "FSTATFS";
    /// `faccessat(fd, p1, a[0] as i32 mode, a[1] as i32 flags)`.
    Faccessat = 53, "FACCESSAT";
    /// `readlinkat(fd, p1)` into `p2` → bytes written; cut to the span with
    /// `CQE_TRUNCATED` and the full length in `aux[0]`.
    Readlinkat = 54, "READLINKAT";

    // Names.
    /// `mkdirat(fd, p1, a[0] as u32 mode)`.
    Mkdirat = 64, "MKDIRAT";
    /// `mknodat(fd, p1, a[0] as u32 mode, a[1] dev)`.
    Mknodat = 65, "MKNODAT";
    /// `unlinkat(fd, p1, a[0] as i32 flags)`.
    Unlinkat = 66, "UNLINKAT";
    /// `renameat2(fd, p1, fd2, p2, a[0] as u32 flags)`.
    Renameat2 = 67, "RENAMEAT2";
    /// `linkat(fd, p1, fd2, p2, a[0] as i32 flags)`.
    Linkat = 68, "LINKAT";
    /// `symlinkat(p1 target, fd, p2 linkpath)`.
    Symlinkat = 69, "SYMLINKAT";
    /// `truncate(p1, a[0])`.
    Truncate = 70, "TRUNCATE";

    // Attributes.
    /// `utimensat(fd, p1, times in p2, a[0] as i32 flags)`; an empty `p2`
    /// is NULL times.
    Utimensat = 80, "UTIMENSAT";
    /// `futimens(fd, times in p2)`; an empty `p2` is NULL times.
    Futimens = 81, "FUTIMENS";
    /// `fchmodat(fd, p1, a[0] as u32 mode, a[1] as i32 flags)`.
    Fchmodat = 82, "FCHMODAT";
    /// `fchmod(fd, a[0] as u32 mode)`.
    Fchmod = 83, "FCHMOD";
    /// `fchownat(fd, p1, a[0] as u32 uid, a[1] as u32 gid, a[2] as i32
    /// flags)`; `u32::MAX` keeps an id.
    Fchownat = 84, "FCHOWNAT";
    /// `fchown(fd, a[0] as u32 uid, a[1] as u32 gid)`.
    Fchown = 85, "FCHOWN";

    // Locks.
    /// A lock call on `fd`: `fcntl`'s `F_SETLK`/`F_GETLK` (POSIX),
    /// `F_OFD_SETLK`/`F_OFD_GETLK` (OFD), or `flock(2)`.
    ///
    /// - `a[0]` class: [`LOCK_POSIX`] (the lock belongs to the client's
    ///   lock owner, its process), [`LOCK_OFD`] or [`LOCK_FLOCK`] (to the
    ///   open file description).
    /// - `a[1]` cmd: [`LOCK_SET`] (set, or with `F_UNLCK` clear) or
    ///   [`LOCK_GET`] (who would be in the way).
    /// - `a[2]` type: `F_RDLCK`, `F_WRLCK`, `F_UNLCK`; a flock's
    ///   `LOCK_SH`, `LOCK_EX`, `LOCK_UN` are sent as these three
    ///   (`LOCK_NB` is the client's business: the server never waits).
    /// - `a[3]` whence, `SEEK_SET/CUR/END`, resolved by the server, which
    ///   owns the description's offset and the file's size.
    /// - `p1`: exactly 16 bytes, start `i64` and len `i64`, little-endian,
    ///   as `struct flock`'s `l_start`/`l_len` (len 0: to the end of any
    ///   file; negative: the bytes before start). A flock has no range:
    ///   `p1` is ignored, it covers the whole file.
    ///
    /// Errors, in Linux's order: EBADF (not an open descriptor); EINVAL
    /// (unknown class or cmd, `p1` not 16 bytes, GET of anything but
    /// `F_RDLCK`/`F_WRLCK`); EFAULT (`p1` outside the data area); EINVAL
    /// (unknown whence, a start before 0), EOVERFLOW (past `OFF_MAX`),
    /// EINVAL (SET of an unknown type); EBADF (SET of `F_RDLCK` on a
    /// descriptor not open for reading, `F_WRLCK` not open for writing; a
    /// flock needs neither); ENOLCK (past the server's caps on lock
    /// records). An OFD request's `l_pid` must be 0: the client checks
    /// it, it does not travel.
    ///
    /// The server never waits. SET → 0 when granted; when another owner
    /// is in the way, `res = -EAGAIN` with `CQE_WOULD_BLOCK` in `flags`
    /// and `aux = [start, len]` of the lowest lock in the way (len 0: to
    /// the end of any file); its mode and pid are a GET away. The client
    /// sleeps and retries for `F_SETLKW` or a blocking flock.
    ///
    /// GET → `res = type | (pid as u32 as i64) << 8` of the lowest lock in
    /// the way (bits 0-7 its type, bits 8-39 its pid: the holder's pid as
    /// the kernel told the server, or -1, `0xffff_ffff`, for an OFD or
    /// flock lock, as Linux reports them) with `aux = [start, len]`; or
    /// `res = F_UNLCK` when nothing is in the way. A process's own POSIX
    /// locks, and a description's own locks, are never in its way.
    ///
    /// Released: a client's POSIX locks on a file at any CLOSE (or DUP2
    /// onto) of a descriptor of that file, all of them when it goes; a
    /// description's OFD and flock locks when its last descriptor closes.
    Lock = 96, "LOCK";

    // Shared mappings.
    /// `mmap(MAP_SHARED)` of `fd` at file offset `a[0]` (page-aligned),
    /// length `a[1]`, prot `a[2]` (`PROT_READ`, `PROT_WRITE`, `PROT_EXEC`
    /// bits only) → an object id.
    ///
    /// The server keeps one *object* per mapped file, a memfd holding the
    /// file's bytes at the file's offsets: every mapping of the file, by
    /// any client, gets the same object id and maps the same memfd, so
    /// their stores are coherent. The memfd comes over the control
    /// socket in an OBJECT message (control.rs) with the request's tag and
    /// the object id, sent *before* the answer, so a client holding the
    /// answer reads it without waiting. The memfd is at least `a[0] +
    /// a[1]` rounded up to a page long, holds the file's bytes there
    /// (zeros past its end), and is open for writing only if `fd` is
    /// (then a later `mprotect(PROT_WRITE)` works, as the kernel allows);
    /// it cannot be shrunk or sealed. The client maps it itself and may
    /// close it once mapped.
    ///
    /// While an object exists, the server's READ/PREAD of the file see its
    /// bytes, WRITE/PWRITE and truncations change them too, and the file
    /// gets them back (up to its size) at MSYNC, at the object's last
    /// UNMAP, when a client holding it goes, and at shutdown.
    ///
    /// Errors, in Linux's order: EINVAL (unaligned offset, unknown prot
    /// bits); EBADF; EINVAL (zero length); ENOMEM (a length that cannot be
    /// rounded up), EOVERFLOW (past `OFF_MAX`); EACCES (`fd` not open for
    /// reading, or `PROT_WRITE` without `fd` open for writing); ENODEV
    /// (not a regular file); ENOMEM (past the server's bounds on mappings
    /// per client and mapped bytes). Each success is one mapping of the
    /// client's, ended by one UNMAP.
    MapShared = 112, "MAP_SHARED";
    /// `msync` of object `a[0]`'s file range `[a[1], a[1] + a[2])`
    /// (`a[1]` page-aligned), flags `a[3]` (`MS_ASYNC`, `MS_SYNC`,
    /// `MS_INVALIDATE`): the server writes the object's bytes there back
    /// into the file (up to its size; only pages that differ), and with
    /// `MS_SYNC` makes the volume durable, as fsync. EINVAL for unknown
    /// flags, `MS_ASYNC` with `MS_SYNC`, an unaligned offset, or an object
    /// the client does not map; ENOMEM for a range that wraps.
    Msync = 113, "MSYNC";
    /// Ends one of the client's mappings of object `a[0]` (after its
    /// `munmap`); EINVAL if it has none. The object's last mapping, of
    /// any client, writes it back into the file and closes it.
    Unmap = 114, "UNMAP";

    // Reads without a request (docs/SERVE.md "Direct reads").
    /// Offers the client a read-only view of the image: the server sends
    /// its change board (`ulfs::fs::changes`), a sealed memfd open for
    /// reading only, in an OBJECT message with this request's tag and
    /// object id 0, before the answer; then answers the length of the
    /// image's absolute path, written into `p1`, with `aux = [device,
    /// inode]` of the image file. The client opens that path itself (the
    /// kernel judges whether it may read the image) and uses the view only
    /// if it is that device and inode. ENOSYS when the server offers no
    /// view (its image is not a file of its own, or /proc is missing);
    /// EACCES when the image file's mode bits (as they are now) do not let
    /// the client read it (the board is only for those who could read
    /// every file); EALREADY when this connection was answered once (each
    /// answer sends a descriptor);
    /// ENAMETOOLONG when the path does not fit `p1`; EFAULT for a `p1`
    /// outside the data area.
    Direct = 128, "DIRECT";
    /// A read lease on `fd`'s file from the block holding offset `a[0]`,
    /// of at most `a[1]` runs, written into `p1` as `crate::lease`'s
    /// record → the number of runs. The client reads the leased blocks
    /// straight from its view of the image, and trusts a copy only while
    /// the board's counter keeps the leased generation (`ulfs::fs::changes`).
    /// Errors: EPERM (this connection was not given the board by DIRECT),
    /// EBADF (not open, or not for reading), EISDIR, EINVAL (not
    /// a regular file), EFAULT (`p1` outside the data area or too small
    /// for one run), EAGAIN (no lease now: a read would move the file's
    /// atime; a READ/PREAD does, after which a lease may be granted),
    /// EALREADY (the atime was moved in the server's current clock tick
    /// and is not newer than the file's last change, so relatime moves it
    /// again at the next tick: no lease before then),
    /// EBUSY (the file has shared mappings: its bytes are not all in the
    /// image while they last), EIO (the server lost bytes of its image).
    Lease = 129, "LEASE";
}

/// `LOCK` classes (`a[0]`).
pub const LOCK_POSIX: u64 = 0;
pub const LOCK_OFD: u64 = 1;
pub const LOCK_FLOCK: u64 = 2;
/// `LOCK` commands (`a[1]`).
pub const LOCK_SET: u64 = 0;
pub const LOCK_GET: u64 = 1;

/// `COPY_RANGE` offset meaning "the description's offset" (NULL pointer).
pub const OFFSET_NONE: u64 = u64::MAX;
/// `COPY_RANGE` moves at most this much per request.
pub const COPY_MAX: u64 = 16 << 20;

impl From<Op> for u16 {
    fn from(op: Op) -> u16 {
        op as u16
    }
}

/// A 16-byte token as two words, its little-endian halves: how
/// PREPARE_FORK's and PREPARE_EXEC's answers carry it in `aux`, and
/// CANCEL_TOKEN in `a[0]`, `a[1]`.
pub fn token_words(t: &[u8; 16]) -> [u64; 2] {
    [
        u64::from_le_bytes(t[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(t[8..].try_into().expect("8 bytes")),
    ]
}

/// The token two words carry (`token_words` undone).
pub fn token_from_words(w: [u64; 2]) -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&w[0].to_le_bytes());
    t[8..].copy_from_slice(&w[1].to_le_bytes());
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for &op in Op::ALL {
            assert_eq!(Op::from_u16(op as u16), Some(op));
        }
        let known: std::collections::HashSet<u16> = Op::ALL.iter().map(|&o| o as u16).collect();
        assert_eq!(known.len(), Op::ALL.len(), "codes are distinct");
        for v in 0..=u16::MAX {
            assert_eq!(Op::from_u16(v).is_some(), known.contains(&v));
        }
    }

    #[test]
    fn tokens_travel_as_two_words() {
        let t: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(token_from_words(token_words(&t)), t);
        assert_eq!(
            token_words(&t)[0],
            u64::from_le_bytes(t[..8].try_into().unwrap())
        );
    }

    #[test]
    fn numbering_is_stable() {
        // These numbers are on the wire: a change here breaks every
        // client built before it.
        assert_eq!(Op::Nop as u16, 0);
        assert_eq!(Op::Sync as u16, 9);
        assert_eq!(Op::CancelToken as u16, 10);
        assert_eq!(Op::Openat as u16, 16);
        assert_eq!(Op::FileDescription as u16, 24);
        assert_eq!(Op::Read as u16, 32);
        assert_eq!(Op::CopyRange as u16, 42);
        assert_eq!(Op::Fstat as u16, 48);
        assert_eq!(Op::Readlinkat as u16, 54);
        assert_eq!(Op::Mkdirat as u16, 64);
        assert_eq!(Op::Truncate as u16, 70);
        assert_eq!(Op::Utimensat as u16, 80);
        assert_eq!(Op::Fchown as u16, 85);
        assert_eq!(Op::Lock as u16, 96);
        assert_eq!(Op::Unmap as u16, 114);
        assert_eq!(Op::Direct as u16, 128);
        assert_eq!(Op::Lease as u16, 129);
        assert_eq!(Op::ALL.len(), 57);
        assert_eq!(Op::Renameat2.name(), "RENAMEAT2");
    }
}

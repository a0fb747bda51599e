//! The calls a crash workload makes: each `Op` is exactly one POSIX call,
//! and `Loose` marks bytes that data=ordered lets differ.

use super::*;

#[derive(Clone, Debug)]
pub enum Op {
    Open {
        slot: usize,
        path: Path,
        flags: i32,
    },
    Close {
        slot: usize,
    },
    Pwrite {
        slot: usize,
        off: u64,
        len: usize,
        fill: u64,
    },
    /// `write` on an O_APPEND descriptor.
    Append {
        slot: usize,
        len: usize,
        fill: u64,
    },
    Ftruncate {
        slot: usize,
        len: u64,
    },
    Fsync {
        slot: usize,
    },
    Sync,
    Truncate {
        path: Path,
        len: u64,
    },
    Mkdir {
        path: Path,
    },
    Rmdir {
        path: Path,
    },
    Unlink {
        path: Path,
    },
    Rename {
        from: Path,
        to: Path,
        flags: u32,
    },
    Link {
        from: Path,
        to: Path,
    },
    Symlink {
        target: Path,
        path: Path,
    },
    Chmod {
        path: Path,
        perm: u32,
    },
    Fdatasync {
        slot: usize,
    },
    /// `fallocate`: mode 0, KEEP_SIZE or PUNCH_HOLE|KEEP_SIZE.
    Fallocate {
        slot: usize,
        mode: i32,
        off: u64,
        len: u64,
    },
    /// `utimensat` with explicit (atime, mtime).
    Utimens {
        path: Path,
        times: [Timespec; 2],
    },
    Futimens {
        slot: usize,
        times: [Timespec; 2],
    },
    Chown {
        path: Path,
        uid: u32,
        gid: u32,
    },
    Fchown {
        slot: usize,
        uid: u32,
        gid: u32,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Open { slot, path, flags } => {
                write!(f, "open#{slot}({}, {flags:#o})", show(path))
            }
            Op::Close { slot } => write!(f, "close#{slot}"),
            Op::Pwrite {
                slot,
                off,
                len,
                fill,
            } => write!(f, "pwrite#{slot}(off {off}, len {len}, fill {fill:#x})"),
            Op::Append { slot, len, fill } => {
                write!(f, "append#{slot}(len {len}, fill {fill:#x})")
            }
            Op::Ftruncate { slot, len } => write!(f, "ftruncate#{slot}({len})"),
            Op::Fsync { slot } => write!(f, "fsync#{slot}"),
            Op::Sync => write!(f, "sync"),
            Op::Truncate { path, len } => write!(f, "truncate({}, {len})", show(path)),
            Op::Mkdir { path } => write!(f, "mkdir({})", show(path)),
            Op::Rmdir { path } => write!(f, "rmdir({})", show(path)),
            Op::Unlink { path } => write!(f, "unlink({})", show(path)),
            Op::Rename { from, to, flags } => {
                write!(f, "rename({}, {}, {flags})", show(from), show(to))
            }
            Op::Link { from, to } => write!(f, "link({}, {})", show(from), show(to)),
            Op::Symlink { target, path } => {
                write!(f, "symlink({}, {})", show(target), show(path))
            }
            Op::Chmod { path, perm } => write!(f, "chmod({}, {perm:o})", show(path)),
            Op::Fdatasync { slot } => write!(f, "fdatasync#{slot}"),
            Op::Fallocate {
                slot,
                mode,
                off,
                len,
            } => write!(f, "fallocate#{slot}(mode {mode:#x}, off {off}, len {len})"),
            Op::Utimens { path, times } => write!(
                f,
                "utimensat({}, {}.{:09}, {}.{:09})",
                show(path),
                times[0].sec,
                times[0].nsec,
                times[1].sec,
                times[1].nsec
            ),
            Op::Futimens { slot, times } => write!(
                f,
                "futimens#{slot}({}.{:09}, {}.{:09})",
                times[0].sec, times[0].nsec, times[1].sec, times[1].nsec
            ),
            Op::Chown { path, uid, gid } => write!(f, "chown({}, {uid}, {gid})", show(path)),
            Op::Fchown { slot, uid, gid } => write!(f, "fchown#{slot}({uid}, {gid})"),
        }
    }
}

/// Bytes that may legitimately differ from the chosen prefix state.
#[derive(Clone, Debug)]
pub struct Loose {
    /// Index of the call that made them loose.
    pub op: usize,
    /// A truncate's zeroed tail: loose only in states before that truncate.
    pub trunc_tail: bool,
    pub id: u32,
    pub start: u64,
    pub end: u64,
}

//! The operations of the model test: each `Op` is one POSIX call on a
//! path or a descriptor slot, printed so a failing case reads as code.

use super::*;

/// A path, printed as a string (long names abbreviated).
#[derive(Clone, PartialEq, Eq)]
pub struct P(pub Vec<u8>);

impl fmt::Debug for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p(\"{}\")", show_path(&self.0))
    }
}

pub fn show_path(p: &[u8]) -> String {
    let mut out = String::new();
    for (i, c) in p.split(|&b| b == b'/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        if c.len() > 16 && c.iter().all(|&b| b == c[0]) {
            out.push_str(&format!("{{{}x{}}}", c[0] as char, c.len()));
        } else {
            out.push_str(&String::from_utf8_lossy(c));
        }
    }
    out
}

/// `p("a/b")`, with `{Lx255}` standing for 255 'L's (as printed by Debug).
#[allow(dead_code)]
pub fn p(s: &str) -> P {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('{') {
        out.extend_from_slice(&rest.as_bytes()[..i]);
        let j = rest[i..].find('}').expect("unterminated {") + i;
        let inner = &rest[i + 1..j];
        let (ch, n) = inner.split_at(1);
        let n: usize = n[1..].parse().expect("bad repeat");
        out.extend(std::iter::repeat_n(ch.as_bytes()[0], n));
        rest = &rest[j + 1..];
    }
    out.extend_from_slice(rest.as_bytes());
    P(out)
}

/// Open flags, printed symbolically.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Flags(pub i32);

pub const FLAG_NAMES: [(i32, &str); 6] = [
    (libc::O_CREAT, "O_CREAT"),
    (libc::O_EXCL, "O_EXCL"),
    (libc::O_TRUNC, "O_TRUNC"),
    (libc::O_APPEND, "O_APPEND"),
    (libc::O_DIRECTORY, "O_DIRECTORY"),
    (libc::O_NOFOLLOW, "O_NOFOLLOW"),
];

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acc = match self.0 & libc::O_ACCMODE {
            libc::O_RDONLY => "O_RDONLY",
            libc::O_WRONLY => "O_WRONLY",
            _ => "O_RDWR",
        };
        write!(f, "Flags(libc::{acc}")?;
        for (bit, name) in FLAG_NAMES {
            if self.0 & bit != 0 {
                write!(f, " | libc::{name}")?;
            }
        }
        write!(f, ")")
    }
}

/// A mode, printed in octal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct M(pub u32);

impl fmt::Debug for M {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "M(0o{:o})", self.0)
    }
}

/// `lseek` whence, printed symbolically.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Whence(pub i32);

impl fmt::Debug for Whence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = match self.0 {
            libc::SEEK_SET => "SEEK_SET",
            libc::SEEK_CUR => "SEEK_CUR",
            libc::SEEK_END => "SEEK_END",
            libc::SEEK_DATA => "SEEK_DATA",
            libc::SEEK_HOLE => "SEEK_HOLE",
            _ => "?",
        };
        write!(f, "Whence(libc::{n})")
    }
}

/// A logical descriptor. Values below `OPEN_SLOT_PICKS` pick (modulo) among
/// the descriptors that are open on both sides; the others pick (modulo)
/// among every descriptor the case has obtained, closed ones included (which
/// exercises EBADF). The trace prints which slot was resolved.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct S(pub u8);

impl fmt::Debug for S {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S({})", self.0)
    }
}

/// A directory argument of a directory-relative call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum D {
    /// `AT_FDCWD`.
    Cwd,
    /// A descriptor slot (see `S`).
    Slot(S),
}

#[derive(Clone, Debug)]
pub enum Op {
    Open(P, Flags, M),
    Close(S),
    Read(S, usize),
    Write(S, usize, u8),
    Pread(S, usize, u64),
    Pwrite(S, usize, u64, u8),
    Lseek(S, i64, Whence),
    Fstat(S),
    Stat(P),
    Lstat(P),
    Mkdir(P, M),
    Rmdir(P),
    Unlink(P),
    Rename(P, P),
    Rename2(P, P, u32),
    Link(P, P),
    /// (target, linkpath)
    Symlink(P, P),
    Readlink(P),
    Truncate(P, u64),
    Ftruncate(S, u64),
    Chmod(P, M),
    Dup(S),
    Dup2(S, S),
    /// Rewind the descriptor and list it to the end with this buffer size.
    Getdents(S, usize),
    /// open(path, O_RDONLY | O_DIRECTORY), list, close.
    ListDir(P),
    Fsync(S),
    Fdatasync(S),
    Fchmod(S, M),
    /// (path, uid, gid); u32::MAX leaves one unchanged. Root only (a
    /// non-root host refuses most changes of owner; ulfs does not check).
    Chown(P, u32, u32),
    Fchown(S, u32, u32),
    /// Changes the working directory (relative paths follow it).
    Chdir(P),
    Getcwd,
    // The directory-relative calls (at_ops.rs).
    Openat(D, P, Flags, M),
    Mkdirat(D, P, M),
    /// (dir, path, flags: 0, AT_REMOVEDIR or an invalid bit)
    Unlinkat(D, P, i32),
    Renameat2(D, P, D, P, u32),
    /// (old dir, old path, new dir, new path, flags)
    Linkat(D, P, D, P, i32),
    Fstatat(D, P, i32),
    Statx(D, P, i32),
    /// (dir, path, mode, flags)
    Faccessat(D, P, i32, i32),
    /// (dir, path, type and permission bits): regular files, and the types
    /// Linux refuses before looking at the path (ulfs refuses FIFOs,
    /// sockets and devices, which tmpfs makes: not generated).
    Mknodat(D, P, M),
    Readlinkat(D, P),
    Fchdir(S),
}

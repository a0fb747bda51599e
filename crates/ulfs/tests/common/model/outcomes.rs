//! What a call returned on either side (`Out`, `St`), compared and printed.

use super::*;

/// The stat fields that must agree.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct St {
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    /// `None` for directories (their st_size legitimately differs).
    pub size: Option<u64>,
}

impl fmt::Debug for St {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.mode & libc::S_IFMT {
            libc::S_IFDIR => "dir",
            libc::S_IFREG => "reg",
            libc::S_IFLNK => "lnk",
            _ => "other",
        };
        write!(
            f,
            "{{{kind} 0o{:o} nlink={} owner={}:{}",
            self.mode & 0o7777,
            self.nlink,
            self.uid,
            self.gid
        )?;
        if let Some(s) = self.size {
            write!(f, " size={s}")?;
        }
        write!(f, "}}")
    }
}

impl St {
    pub fn new(mode: u32, nlink: u64, size: u64, uid: u32, gid: u32) -> St {
        let size = (mode & libc::S_IFMT != libc::S_IFDIR).then_some(size);
        St {
            mode,
            nlink,
            uid,
            gid,
            size,
        }
    }
    pub fn from_ulfs(s: &Stat) -> St {
        St::new(s.mode, s.nlink, s.size, s.uid, s.gid)
    }
    pub fn from_host(s: &libc::stat) -> St {
        St::new(s.st_mode, s.st_nlink, s.st_size as u64, s.st_uid, s.st_gid)
    }
}

/// (atime, mtime, ctime) as (seconds, nanoseconds).
pub type Times = [(i64, i64); 3];

/// Sorted (name, d_type) list of a directory.
pub type Listing = Vec<(Vec<u8>, u8)>;

#[derive(Clone, PartialEq, Eq)]
pub enum Out {
    Ok,
    /// A new descriptor (its number is not compared).
    Fd,
    Num(u64),
    Data(Vec<u8>),
    /// A symlink target or working directory.
    Path(Vec<u8>),
    Stat(St),
    Names(Listing),
    Err(i32),
    /// Not comparable here (see the op); nothing was done on either side.
    Skip(&'static str),
}

pub fn errno_name(e: i32) -> String {
    match Errno(e).name() {
        Some(n) => n.to_string(),
        None => format!("errno {e}"),
    }
}

/// Run-length summary of bytes: `[3x'a', 4093x00]`.
pub fn show_bytes(b: &[u8]) -> String {
    let mut runs: Vec<(u8, usize)> = Vec::new();
    for &x in b {
        match runs.last_mut() {
            Some((y, n)) if *y == x => *n += 1,
            _ => runs.push((x, 1)),
        }
    }
    let mut s = format!("{} bytes [", b.len());
    for (i, (x, n)) in runs.iter().enumerate() {
        if i == 12 {
            s.push_str(", ...");
            break;
        }
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&format!("{n}x{x:02x}"));
    }
    s.push(']');
    s
}

impl fmt::Debug for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Out::Ok => write!(f, "Ok"),
            Out::Fd => write!(f, "Ok(fd)"),
            Out::Num(n) => write!(f, "Ok({n})"),
            Out::Data(d) => write!(f, "Ok({})", show_bytes(d)),
            Out::Path(p) => write!(f, "Ok(\"{}\")", show_path(p)),
            Out::Stat(s) => write!(f, "Ok({s:?})"),
            Out::Names(l) => {
                write!(f, "Ok([")?;
                for (i, (n, t)) in l.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}:{t}", show_path(n))?;
                }
                write!(f, "])")
            }
            Out::Err(e) => write!(f, "Err({})", errno_name(*e)),
            Out::Skip(why) => write!(f, "skipped ({why})"),
        }
    }
}

//! What a tree shows a reader: every path with its kind and content (file
//! bytes, link target, or nothing for a directory), or the errno its read
//! gave. Walks are bounded (entries, bytes, depth) so that a damaged image
//! that claims huge sizes or endless directories cannot make a test hang.

use std::collections::BTreeMap;
use ulfs::{Errno, Fs};

/// What one path shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    Dir,
    /// A file's size and the bytes read (at most `Budget::file_bytes`).
    File {
        size: u64,
        bytes: Vec<u8>,
    },
    Link(Vec<u8>),
    /// Listed, but its read (stat, open, read, readlink, getdents) failed.
    Unreadable(Errno),
}

impl Shown {
    pub fn is_readable(&self) -> bool {
        !matches!(self, Shown::Unreadable(_))
    }
}

/// Limits of one walk.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub entries: usize,
    pub file_bytes: usize,
    pub depth: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            entries: 20_000,
            file_bytes: 1 << 20,
            depth: 64,
        }
    }
}

/// Paths (from the root, `/`-joined) to what they show.
pub type Snapshot = BTreeMap<Vec<u8>, Shown>;

/// Walks the tree from the root.
pub fn snapshot(fs: &mut Fs, budget: Budget) -> Snapshot {
    let mut out = Snapshot::new();
    let mut todo = vec![(b"/".to_vec(), 0usize)];
    while let Some((dir, depth)) = todo.pop() {
        let names = match list(fs, &dir, budget.entries) {
            Ok(names) => names,
            Err(e) => {
                out.insert(dir, Shown::Unreadable(e));
                continue;
            }
        };
        out.insert(dir.clone(), Shown::Dir);
        for name in names {
            if out.len() >= budget.entries {
                return out;
            }
            let mut path = dir.clone();
            if path.len() > 1 {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            match fs.lstat(&path) {
                Ok(st) if st.is_dir() => {
                    if depth < budget.depth {
                        todo.push((path, depth + 1));
                    }
                }
                Ok(st) if st.mode & libc::S_IFMT == libc::S_IFLNK => {
                    let shown = fs
                        .readlink(&path)
                        .map_or_else(Shown::Unreadable, Shown::Link);
                    out.insert(path, shown);
                }
                Ok(st) => {
                    let shown = read(fs, &path, st.size, budget.file_bytes)
                        .unwrap_or_else(Shown::Unreadable);
                    out.insert(path, shown);
                }
                Err(e) => {
                    out.insert(path, Shown::Unreadable(e));
                }
            }
        }
    }
    out
}

/// The names in a directory (without `.` and `..`), at most `max`.
fn list(fs: &mut Fs, dir: &[u8], max: usize) -> Result<Vec<Vec<u8>>, Errno> {
    let fd = fs.open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut names = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    let result = loop {
        match fs.getdents64(fd, &mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                for d in ulfs::parse_dirents(&buf[..n]) {
                    if d.name != b"." && d.name != b".." {
                        names.push(d.name);
                    }
                }
                if names.len() > max {
                    break Ok(());
                }
            }
            Err(e) => break Err(e),
        }
    };
    let _ = fs.close(fd);
    result.map(|()| names)
}

fn read(fs: &mut Fs, path: &[u8], size: u64, max: usize) -> Result<Shown, Errno> {
    let fd = fs.open(path, libc::O_RDONLY, 0)?;
    let want = size.min(max as u64) as usize;
    let mut bytes = vec![0u8; want];
    let mut done = 0;
    let result = loop {
        if done == want {
            break Ok(());
        }
        match fs.pread(fd, &mut bytes[done..], done as u64) {
            Ok(0) => break Ok(()),
            Ok(n) => done += n,
            Err(e) => break Err(e),
        }
    };
    let _ = fs.close(fd);
    result?;
    bytes.truncate(done);
    Ok(Shown::File { size, bytes })
}

/// What `before` could read that `after` no longer shows the same:
/// (path, before, after) for each loss.
pub fn losses<'a>(
    before: &'a Snapshot,
    after: &'a Snapshot,
) -> Vec<(&'a [u8], &'a Shown, Option<&'a Shown>)> {
    before
        .iter()
        .filter(|(_, shown)| shown.is_readable())
        .filter_map(|(path, shown)| {
            let now = after.get(path);
            (now != Some(shown)).then_some((path.as_slice(), shown, now))
        })
        .collect()
}

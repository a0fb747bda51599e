//! What a tree shows a reader: every path with its kind and content (file
//! bytes, link target, or nothing for a directory), or the errno its read
//! gave. Walks are bounded (entries, bytes, depth) so that a damaged image
//! that claims huge sizes or endless directories cannot make a test hang.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use ulfs::{Errno, Fs, MountOptions};

/// What one path shows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

    fn kind(&self) -> &'static str {
        match self {
            Shown::Dir => "a directory",
            Shown::File { .. } => "a file",
            Shown::Link(_) => "a symlink",
            Shown::Unreadable(_) => "unreadable",
        }
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
            // A damaged entry can list a name no path can reach (empty, or
            // with a slash or NUL in it): listed, but not readable.
            if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
                out.insert(path, Shown::Unreadable(Errno::EUCLEAN));
                continue;
            }
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

/// A file's bytes: all of them, or for a file longer than `max` its first
/// and last `max / 2` (a garbage size must not make a walk read without
/// end, and a damaged middle still shows at one edge or the other).
fn read(fs: &mut Fs, path: &[u8], size: u64, max: usize) -> Result<Shown, Errno> {
    let fd = fs.open(path, libc::O_RDONLY, 0)?;
    let bytes = if size <= max as u64 {
        read_range(fs, fd, 0, max)
    } else {
        let edge = max / 2;
        read_range(fs, fd, 0, edge).and_then(|mut head| {
            head.extend(read_range(fs, fd, size - edge as u64, edge)?);
            Ok(head)
        })
    };
    let _ = fs.close(fd);
    Ok(Shown::File {
        size,
        bytes: bytes?,
    })
}

/// Up to `len` bytes from `off` (fewer at the end of the file).
fn read_range(fs: &mut Fs, fd: ulfs::Fd, off: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut data = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match fs.pread(fd, &mut data[done..], off + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    data.truncate(done);
    Ok(data)
}

/// What a read-only mount of the image at `img` shows (checksums verified,
/// as every command reads), or why it does not mount.
pub fn snapshot_image(img: &Path, budget: Budget) -> Result<Snapshot, ulfs::Error> {
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    Fs::mount(img, opts).map(|mut fs| snapshot(&mut fs, budget))
}

/// Only what reads, on the image at `img` (nothing if it does not mount):
/// the state the repair promise is stated in.
pub fn readable(img: &Path) -> Snapshot {
    let mut seen = snapshot_image(img, Budget::default()).unwrap_or_default();
    seen.retain(|_, shown| shown.is_readable());
    seen
}

/// What a listing shows but a read refuses, on the image at `img`: one
/// line per path. An image that fsck calls clean must give none.
pub fn unreadable(img: &Path) -> Vec<String> {
    match snapshot_image(img, Budget::default()) {
        Ok(seen) => seen
            .iter()
            .filter_map(|(path, shown)| match shown {
                Shown::Unreadable(e) => Some(format!("{}: {e}", String::from_utf8_lossy(path))),
                _ => None,
            })
            .collect(),
        Err(e) => vec![format!("the image does not mount: {e}")],
    }
}

/// The readable paths of `before` that `after` lost or changed, one line
/// each; empty when the repair promise holds.
pub fn lost_or_changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    losses(before, after)
        .into_iter()
        .map(|(path, was, now)| {
            let path = String::from_utf8_lossy(path);
            match now {
                None => format!("{path}: lost (was {})", was.kind()),
                Some(Shown::Unreadable(e)) => format!("{path}: no longer reads ({e})"),
                Some(now) if now.kind() != was.kind() => {
                    format!("{path}: was {}, now {}", was.kind(), now.kind())
                }
                Some(_) => format!("{path}: content changed"),
            }
        })
        .collect()
}

/// One loss: a path, what it showed before, and what it shows now.
pub type Loss<'a> = (&'a [u8], &'a Shown, Option<&'a Shown>);

/// What `before` could read that `after` no longer shows the same.
///
/// A repair may move a name: when a directory's index pointer is damaged,
/// a read can list another directory's entries in its place, and the
/// repair, putting the true entries back, shows those names under their
/// own directory again (or under `/lost+found/#<ino>` when that directory
/// is not reachable). So a path counts as kept when the same last name
/// showing the same thing appears at a path that did not show it before;
/// each such new path excuses one old path, so a name that was readable
/// twice and kept once still counts one loss.
pub fn losses<'a>(before: &'a Snapshot, after: &'a Snapshot) -> Vec<Loss<'a>> {
    let mut moved_to: HashMap<(&[u8], &Shown), usize> = HashMap::new();
    for (path, shown) in after {
        if shown.is_readable() && before.get(path) != Some(shown) {
            *moved_to.entry((last_name(path), shown)).or_default() += 1;
        }
    }
    before
        .iter()
        .filter(|(_, shown)| shown.is_readable())
        .filter_map(|(path, shown)| {
            let now = after.get(path);
            if now == Some(shown) {
                return None;
            }
            if let Some(n) = moved_to.get_mut(&(last_name(path), shown))
                && *n > 0
            {
                *n -= 1;
                return None;
            }
            Some((path.as_slice(), shown, now))
        })
        .collect()
}

/// The last component of a path (`/` for the root).
fn last_name(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&c| c == b'/') {
        Some(i) if i + 1 < path.len() => &path[i + 1..],
        _ => path,
    }
}

/// What a host directory shows, in `snapshot`'s terms (paths from `/` as
/// the directory): for differential tests that run the same calls on an
/// image and on the host.
pub fn snapshot_host(root: &Path) -> Snapshot {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Snapshot::new();
    let mut todo = vec![(root.to_path_buf(), b"/".to_vec())];
    while let Some((dir, shown)) = todo.pop() {
        out.insert(shown.clone(), Shown::Dir);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("a host directory")
            .map(|e| e.expect("a host entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let mut path = shown.clone();
            if path.len() > 1 {
                path.push(b'/');
            }
            path.extend_from_slice(e.file_name().as_bytes());
            let t = e.file_type().expect("a host file type");
            if t.is_dir() {
                todo.push((e.path(), path));
            } else if t.is_symlink() {
                let target = std::fs::read_link(e.path()).expect("a host symlink");
                out.insert(path, Shown::Link(target.as_os_str().as_bytes().to_vec()));
            } else {
                let bytes = std::fs::read(e.path()).expect("a host file");
                let size = bytes.len() as u64;
                out.insert(path, Shown::File { size, bytes });
            }
        }
    }
    out
}

//! What a user can read from an image, as a map from path to what the path
//! holds, and the comparison that the repair promise is stated in: every
//! file and directory readable before `fsck --repair` is still readable,
//! with the same content, afterwards (issue 6, requirement 4).
//!
//! The walk is best effort on purpose: an entry that cannot be read (its
//! inode, index or data is damaged) is left out rather than failing the
//! walk, so a snapshot of a damaged image is "what is readable now".

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use ulfs::{Fs, MountOptions};

/// Longest file a snapshot reads whole; of a longer one (a valid but
/// damaged size can say a terabyte) it reads the first and the last
/// `EDGE` bytes, so a test never reads without end.
const READ_CAP: u64 = 64 << 20;
const EDGE: u64 = 1 << 20;

/// What one readable path holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(Vec<u8>),
    /// A file longer than `READ_CAP`: its size, first and last bytes.
    Large(u64, Vec<u8>, Vec<u8>),
    Symlink(Vec<u8>),
}

pub type Snapshot = BTreeMap<String, Node>;

/// Everything readable on the image at `img`, through an ordinary
/// read-only mount (checksums verified, as every command reads). An image
/// that does not mount has nothing readable.
pub fn readable(img: &Path) -> Snapshot {
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    match Fs::mount(img, opts) {
        Ok(mut fs) => readable_in(&mut fs),
        Err(_) => Snapshot::new(),
    }
}

/// Everything readable through the mounted `fs`.
pub fn readable_in(fs: &mut Fs) -> Snapshot {
    walk(fs).0
}

/// What a listing shows but a read then refuses, on the image at `img`:
/// one line per path (a directory that cannot be listed, an entry whose
/// stat, read or readlink fails). An image fsck calls clean must give none.
pub fn unreadable(img: &Path) -> Vec<String> {
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    match Fs::mount(img, opts) {
        Ok(mut fs) => walk(&mut fs).1,
        Err(e) => vec![format!("the image does not mount: {e}")],
    }
}

/// The walk behind both: (what reads, what is listed but does not read).
fn walk(fs: &mut Fs) -> (Snapshot, Vec<String>) {
    let mut out = Snapshot::new();
    let mut bad = Vec::new();
    if let Err(e) = fs.stat("/") {
        bad.push(format!("/: {e}"));
        return (out, bad);
    }
    out.insert("/".into(), Node::Dir);
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let shown = if dir.is_empty() { "/" } else { dir.as_str() };
        let ino = match fs.stat(shown) {
            Ok(st) => st.ino,
            Err(e) => {
                bad.push(format!("{shown}: {e}"));
                continue;
            }
        };
        let mut names = Vec::new();
        let listed = fs.volume().read_dir(ino, 0, |it| {
            names.push(it.name.to_vec());
            true
        });
        if let Err(e) = listed {
            // A directory that cannot be listed is not readable.
            out.remove(shown);
            bad.push(format!("{shown}: cannot be listed: {e}"));
            continue;
        }
        for n in names {
            let path = format!("{dir}/{}", String::from_utf8_lossy(&n));
            let st = match fs.lstat(&path) {
                Ok(st) => st,
                Err(e) => {
                    bad.push(format!("{path}: {e}"));
                    continue;
                }
            };
            match st.mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    out.insert(path.clone(), Node::Dir);
                    stack.push(path);
                }
                libc::S_IFLNK => match fs.readlink(&path) {
                    Ok(t) => {
                        out.insert(path, Node::Symlink(t));
                    }
                    Err(e) => bad.push(format!("{path}: readlink: {e}")),
                },
                _ => match read_file(fs, &path, st.size) {
                    Some(node) => {
                        out.insert(path, node);
                    }
                    None => bad.push(format!("{path}: cannot be read ({} bytes)", st.size)),
                },
            }
        }
    }
    (out, bad)
}

/// A file's content (whole, or its edges when it is long), or None when
/// any read fails.
fn read_file(fs: &mut Fs, path: &str, size: u64) -> Option<Node> {
    let fd = fs.open(path, libc::O_RDONLY, 0).ok()?;
    let node = if size > READ_CAP {
        let head = read_range(fs, fd, 0, EDGE);
        let tail = read_range(fs, fd, size - EDGE, EDGE);
        match (head, tail) {
            (Some(h), Some(t)) if t.len() as u64 == EDGE => Some(Node::Large(size, h, t)),
            _ => None,
        }
    } else {
        read_range(fs, fd, 0, READ_CAP + 1)
            .filter(|d| d.len() as u64 <= READ_CAP)
            .map(Node::File)
    };
    let _ = fs.close(fd);
    node
}

/// Up to `len` bytes from `off`, to the end of the file; None on an error.
fn read_range(fs: &mut Fs, fd: ulfs::Fd, off: u64, len: u64) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while (data.len() as u64) < len {
        let want = buf.len().min((len - data.len() as u64) as usize);
        match fs.pread(fd, &mut buf[..want], off + data.len() as u64) {
            Ok(0) => break,
            Ok(k) => data.extend_from_slice(&buf[..k]),
            Err(_) => return None,
        }
    }
    Some(data)
}

/// The paths of `before` that `after` lost or changed, each with what
/// happened; empty when the repair promise holds.
pub fn lost_or_changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (path, node) in before {
        match after.get(path) {
            None => out.push(format!("{path}: no longer readable")),
            Some(n) if n != node => out.push(format!("{path}: {} became {}", what(node), what(n))),
            Some(_) => {}
        }
    }
    out
}

fn what(n: &Node) -> String {
    match n {
        Node::Dir => "a directory".into(),
        Node::File(d) => format!("a file of {} bytes", d.len()),
        Node::Large(size, ..) => format!("a file of {size} bytes"),
        Node::Symlink(t) => format!("a symlink to {:?}", String::from_utf8_lossy(t)),
    }
}

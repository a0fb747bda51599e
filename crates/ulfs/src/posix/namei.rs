//! Path resolution: `.`, `..`, repeated and trailing slashes, symlinks in
//! every component (ELOOP after 40), ENAMETOOLONG past 255-byte names or
//! 4096-byte paths. Linux on tmpfs is the reference for every corner.

use super::perm::{self, Creds};
use crate::errno::{Errno, Result};
use crate::format::{NAME_MAX, PATH_MAX};
use crate::fs::Volume;
use crate::types::Ino;

/// Symlinks followed in one resolution before ELOOP, as Linux.
pub const MAX_SYMLINKS: u32 = 40;

/// The outcome of walking a path to its last component.
#[derive(Debug)]
pub struct Walk {
    /// The directory holding the last component.
    pub parent: Ino,
    /// The last component (`.`, `..`, or `/` for a path of only slashes).
    pub name: Vec<u8>,
    /// What the last component names, if it exists.
    pub ino: Option<Ino>,
    /// The path ended in a slash: its target must be a directory.
    pub trailing_slash: bool,
}

impl Walk {
    /// The last component is `.` or `..`, or the path is "/".
    pub fn is_dot(&self) -> bool {
        self.name == b"." || self.name == b".." || self.name == b"/"
    }

    /// ENAMETOOLONG for a last component past NAME_MAX (from `Last::Entry`),
    /// or ENOENT if its directory was removed.
    pub fn name_fits(&self, vol: &Volume) -> Result<()> {
        if self.name.len() > NAME_MAX {
            Err(name_too_long(vol, self.parent))
        } else {
            Ok(())
        }
    }
}

/// How the last component of a path is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// Look it up and follow it if it is a symlink (stat, open).
    Follow,
    /// Look it up, and follow a symlink only when a trailing slash asks for
    /// a directory (lstat, readlink).
    NoFollow,
    /// Never follow it, never fail on it: calls that create or remove the
    /// name itself (mkdir, unlink, rename, symlink, link, open O_CREAT).
    /// A name longer than NAME_MAX comes back unlooked-up for the caller
    /// to judge in Linux's order.
    Entry,
}

/// What Linux's `getname` refuses before any lookup: an empty path
/// (ENOENT), one of PATH_MAX bytes or more (ENAMETOOLONG). A NUL inside a
/// Rust path is EINVAL: a C path ends there, so it could name an entry no
/// C program can reach.
pub fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if path.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Walks `path` from directory `cwd` (the working directory or a
/// `dirfd`) to its last component, treated as `last` says. Each symlink
/// followed is added to `followed`, whatever the outcome (Linux touches a
/// link's atime when it follows it; the caller, who may write, does that).
/// With `who`, every directory a name is looked up in must give them
/// search permission (Linux's `may_lookup`, EACCES), the last name's
/// directory included.
pub fn walk(
    vol: &Volume,
    cwd: Ino,
    path: &[u8],
    last_rule: Last,
    followed: &mut Vec<Ino>,
    who: Option<&Creds>,
) -> Result<Walk> {
    check_path(path)?;
    let mut buf: Vec<u8> = path.to_vec();
    let mut pos = 0;
    let mut dir = if buf[0] == b'/' { vol.root() } else { cwd };
    let mut links = 0;
    loop {
        while pos < buf.len() && buf[pos] == b'/' {
            pos += 1;
        }
        if pos == buf.len() {
            // Only slashes: the path is "/" (Linux's LAST_ROOT).
            return Ok(Walk {
                parent: dir,
                name: b"/".to_vec(),
                ino: Some(dir),
                trailing_slash: true,
            });
        }
        if let Some(who) = who {
            perm::may_lookup(&vol.stat_ino(dir)?, who)?;
        }
        let start = pos;
        while pos < buf.len() && buf[pos] != b'/' {
            pos += 1;
        }
        let comp = &buf[start..pos];
        let rest = buf[pos..].iter().position(|&c| c != b'/');
        let last = rest.is_none();
        let trailing_slash = last && pos < buf.len();
        if comp.len() > NAME_MAX {
            if last && last_rule == Last::Entry {
                return Ok(Walk {
                    parent: dir,
                    name: comp.to_vec(),
                    ino: None,
                    trailing_slash,
                });
            }
            return Err(name_too_long(vol, dir));
        }
        vol.dir_inode(dir)?; // ENOTDIR when walking through a file
        if comp == b"." || comp == b".." {
            let target = if comp == b".." {
                parent_of(vol, dir)?
            } else {
                dir
            };
            if last {
                return Ok(Walk {
                    parent: dir,
                    name: comp.to_vec(),
                    ino: Some(target),
                    trailing_slash,
                });
            }
            dir = target;
            continue;
        }
        let found = match vol.lookup(dir, comp) {
            Ok(ino) => Some(ino),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(e),
        };
        let Some(ino) = found else {
            if last {
                return Ok(Walk {
                    parent: dir,
                    name: comp.to_vec(),
                    ino: None,
                    trailing_slash,
                });
            }
            return Err(Errno::ENOENT);
        };
        let st = vol.stat_ino(ino)?;
        let follow = !last
            || match last_rule {
                Last::Follow => true,
                Last::NoFollow => trailing_slash,
                Last::Entry => false,
            };
        if st.is_symlink() && follow {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(Errno::ELOOP);
            }
            let target = vol.readlink_ino(ino)?;
            followed.push(ino);
            if target.is_empty() {
                return Err(Errno::ENOENT);
            }
            if target[0] == b'/' {
                dir = vol.root();
            }
            let mut next = target;
            next.extend_from_slice(&buf[pos..]);
            buf = next;
            pos = 0;
            continue;
        }
        if last {
            return Ok(Walk {
                parent: dir,
                name: comp.to_vec(),
                ino: Some(ino),
                trailing_slash,
            });
        }
        if !st.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        dir = ino;
    }
}

/// The error for a name past NAME_MAX in `dir`. Linux looks nothing up in a
/// removed directory (ENOENT) before the file system judges the name.
fn name_too_long(vol: &Volume, dir: Ino) -> Errno {
    match vol.dir_inode(dir) {
        Ok(d) if d.nlink == 0 => Errno::ENOENT,
        Err(e) => e,
        Ok(_) => Errno::ENAMETOOLONG,
    }
}

/// `..` of a directory (the root is its own parent).
fn parent_of(vol: &Volume, dir: Ino) -> Result<Ino> {
    if dir == vol.root() {
        return Ok(dir);
    }
    Ok(vol.dir_inode(dir)?.parent)
}

/// Resolves `path` to an existing inode, enforcing the trailing-slash rule.
pub fn resolve(
    vol: &Volume,
    cwd: Ino,
    path: &[u8],
    follow: bool,
    followed: &mut Vec<Ino>,
    who: Option<&Creds>,
) -> Result<Ino> {
    let last = if follow { Last::Follow } else { Last::NoFollow };
    let w = walk(vol, cwd, path, last, followed, who)?;
    let ino = w.ino.ok_or(Errno::ENOENT)?;
    if w.trailing_slash && !vol.stat_ino(ino)?.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok(ino)
}

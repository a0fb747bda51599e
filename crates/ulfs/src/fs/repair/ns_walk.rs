//! The one judgement of the namespace, shared by fsck (`fsck/check.rs`,
//! which reports) and repair (`fs/repair.rs`, which fixes), so that what
//! the check accepts the repair leaves alone and what the repair changes
//! the check reports: which entries of a directory stand (N1, N2, names),
//! which carry a wrong `d_type`, which subdirectories have a stale parent
//! pointer or name key (N3), and the link counts every inode must have
//! (N4) from the entries that stand. Each side drives the walk from the
//! root itself (repair changes a directory before going on, and attaches
//! what it did not reach under /lost+found); the rules are here.

use super::index::valid_name;
use crate::errno::Result;
use crate::format::inode::Inode;
use crate::fs::Volume;
use crate::fs::dtype_of;
use crate::types::{DT_DIR, Ino};
use std::collections::HashMap;

/// What the namespace walk knows of one live inode.
#[derive(Clone, Copy)]
pub(crate) struct Facts {
    pub dtype: u8,
    /// Entries naming it that stand (the root counts as named once).
    pub refs: u32,
    pub subdirs: u32,
}

impl Facts {
    pub(crate) fn of(inode: &Inode) -> Facts {
        Facts {
            dtype: dtype_of(inode.mode),
            refs: 0,
            subdirs: 0,
        }
    }

    /// The link count the entries that stand give it.
    pub(crate) fn nlink(&self) -> u32 {
        if self.dtype == DT_DIR {
            2u32.saturating_add(self.subdirs)
        } else {
            self.refs
        }
    }
}

/// Why an entry cannot stand (repair removes it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stray {
    /// It names a free or invalid inode.
    Dead,
    /// It names a directory already named (or the root).
    SecondDirLink,
    /// Its name is not one an entry may carry.
    BadName,
}

impl Stray {
    pub(crate) fn why(self) -> &'static str {
        match self {
            Stray::Dead => "names a free or invalid inode",
            Stray::SecondDirLink => "is a second link to a directory",
            Stray::BadName => "has an invalid name",
        }
    }
}

/// The judgement of one entry of a directory.
pub(crate) struct Entry {
    pub name: Vec<u8>,
    pub key: u64,
    pub ino: Ino,
    /// Why it must go, if it must.
    pub drop: Option<Stray>,
    /// The `d_type` it should carry, if it carries another.
    pub dtype: Option<u8>,
    /// First entry naming it: its inode is reached here.
    pub first: bool,
    /// A subdirectory reached here for the first time, to walk next, with
    /// its (parent pointer, name key) when they are not (the directory,
    /// this entry's key).
    pub subdir: Option<Option<(Ino, u64)>>,
}

impl Volume {
    /// Judges the entries of directory `dir` against `facts` (the live
    /// inodes), counting each entry that stands into them. `Err` when the
    /// directory cannot be listed.
    pub(crate) fn ns_judge(&self, dir: Ino, facts: &mut HashMap<Ino, Facts>) -> Result<Vec<Entry>> {
        let root = self.sb.root_ino;
        let mut items = Vec::new();
        self.read_dir(dir, 0, |it| {
            items.push((it.name.to_vec(), it.key, it.ino, it.dtype));
            true
        })?;
        let mut out = Vec::with_capacity(items.len());
        for (name, key, ino, dtype) in items {
            let f = facts.get(&ino).copied();
            let drop = match f {
                None => Some(Stray::Dead),
                Some(f) if f.dtype == DT_DIR && (ino == root || f.refs > 0) => {
                    Some(Stray::SecondDirLink)
                }
                Some(_) if !valid_name(&name) => Some(Stray::BadName),
                Some(_) => None,
            };
            let mut e = Entry {
                name,
                key,
                ino,
                drop,
                dtype: None,
                first: false,
                subdir: None,
            };
            let Some(f) = f.filter(|_| drop.is_none()) else {
                out.push(e);
                continue;
            };
            if dtype != f.dtype {
                e.dtype = Some(f.dtype);
            }
            e.first = f.refs == 0;
            if let Some(fe) = facts.get_mut(&ino) {
                fe.refs += 1;
            }
            if f.dtype == DT_DIR {
                if let Some(fd) = facts.get_mut(&dir) {
                    fd.subdirs += 1;
                }
                let c = self.inode(ino)?;
                let stale =
                    (c.parent != dir || c.name_key != key).then_some((c.parent, c.name_key));
                e.subdir = Some(stale);
            }
            out.push(e);
        }
        Ok(out)
    }
}

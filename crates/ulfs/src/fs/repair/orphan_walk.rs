//! The one judgement of the orphan list (FORMAT §11), shared by fsck
//! (`fsck/check.rs`, which reports) and repair (`fs/repair.rs`, which
//! rewrites the list), so that they agree on which inodes may wait on it.
//!
//! The list matters more than its size suggests: every read-write mount
//! frees the inodes on it whose link count is 0. A damaged pointer that
//! names a free slot makes every read-write mount fail, and one that names
//! a linked file whose link count was also damaged would have that file
//! destroyed. So the list is followed only through live inodes, at most
//! once each, and a member stands only if no directory names it and its
//! link count is 0 (unlinked while open, as `unlink` leaves it).

use super::ns_walk::Facts;
use crate::fs::Volume;
use crate::types::Ino;
use std::collections::{HashMap, HashSet};

/// The orphan list as far as it can be followed.
pub(crate) struct OrphanWalk {
    /// Members in list order, each a live inode, none twice.
    pub members: Vec<Ino>,
    /// Why the list stops before its end, if it does.
    pub broken: Option<String>,
}

/// Why a member of the list may not stay on it (`refs` from the namespace
/// walk, `nlink` as stored), or None when it is a true orphan.
pub(crate) fn misplaced(f: &Facts, nlink: u32) -> Option<String> {
    if f.refs > 0 {
        Some("is named by a directory".into())
    } else if nlink != 0 {
        Some(format!("has link count {nlink}"))
    } else {
        None
    }
}

impl Volume {
    /// Follows the list from the superblock through the inodes `facts`
    /// knows as live.
    pub(crate) fn orphan_walk(&self, facts: &HashMap<Ino, Facts>) -> OrphanWalk {
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        let mut o = self.sb.orphan_head;
        let broken = loop {
            if o == 0 {
                break None;
            }
            if !facts.contains_key(&o) {
                break Some(format!(
                    "inode {o} is not in use (the list is damaged there)"
                ));
            }
            if !seen.insert(o) {
                break Some(format!("inode {o} comes round again (the list loops)"));
            }
            members.push(o);
            match self.inode(o) {
                Ok(i) => o = i.next_orphan,
                Err(e) => break Some(format!("inode {o} cannot be read ({e})")),
            }
        };
        OrphanWalk { members, broken }
    }
}

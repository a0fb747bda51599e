//! Kernel references: the lookup counts a kernel client (a FUSE mount)
//! holds on the inodes it has been told about, kept apart from open
//! references (`open_inodes.rs`).
//!
//! Why both: the kernel reaches an inode without opening it (an `O_PATH`
//! descriptor, a working directory, a cached dentry) and asks for it by
//! number until it forgets it. An inode whose last link goes while the
//! kernel knows it therefore lives on as an orphan, as one held open does,
//! and is freed by whichever goes last: its last open reference or the
//! kernel's last forget. Until then `stat` answers with nlink 0, as Linux
//! file systems do, and the inode number cannot be reused under the
//! kernel's feet.
//!
//! The counts live only in memory. What survives a crash is the orphan
//! list, and the next mount frees everything on it; a clean unmount frees
//! it too (`Volume::unmount`). Counts are the kernel's to keep exact (every
//! entry it is sent adds one, every forget says how many go), so a forget
//! of more than is held, or of an inode never remembered, only empties the
//! count: it cannot free an inode someone else holds.

use super::Volume;
use crate::errno::Result;
use crate::txn::IdHasher;
use crate::types::Ino;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Mutex;

type Counts = HashMap<Ino, u64, BuildHasherDefault<IdHasher>>;

/// Behind a mutex: lookups are answered under shared access to the volume
/// (several request loops at once), and each adds to a count. Calls that
/// have the volume to themselves reach the counts without locking.
#[derive(Default)]
pub(crate) struct KernelRefs {
    counts: Mutex<Counts>,
}

impl KernelRefs {
    fn counts(&mut self) -> &mut Counts {
        self.counts.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn held(&mut self, ino: Ino) -> bool {
        self.counts().contains_key(&ino)
    }
}

impl Volume {
    /// The kernel was sent an entry for `ino` (lookup, create, link,
    /// readdirplus): one more lookup it will forget. Takes the volume
    /// shared: lookups are reads.
    pub fn remember(&self, ino: Ino) {
        let mut counts = self
            .kernel_refs
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *counts.entry(ino).or_insert(0) += 1;
    }

    /// The kernel forgot `n` lookups of `ino`. The last one frees an
    /// inode that has no link and no open reference left.
    pub fn forget(&mut self, ino: Ino, n: u64) -> Result<()> {
        let counts = self.kernel_refs.counts();
        let Some(count) = counts.get_mut(&ino) else {
            return Ok(());
        };
        *count = count.saturating_sub(n);
        if *count > 0 {
            return Ok(());
        }
        counts.remove(&ino);
        if self.open_refs(ino) > 0 || self.read_only {
            return Ok(());
        }
        self.atomic(|v| v.free_if_orphan(ino))
    }

    /// How many lookups of `ino` the kernel holds (tests).
    #[cfg(test)]
    pub(crate) fn kernel_lookups(&mut self, ino: Ino) -> u64 {
        self.kernel_refs.counts().get(&ino).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MkfsOptions, MountOptions, mkfs};
    use super::*;
    use std::path::{Path, PathBuf};

    fn volume(dir: &tempfile::TempDir) -> (PathBuf, Volume) {
        let p = dir.path().join("img");
        let opts = MkfsOptions {
            size: 8 << 20,
            ..Default::default()
        };
        mkfs(&p, &opts).unwrap();
        let v = Volume::mount(&p, MountOptions::default()).unwrap();
        (p, v)
    }

    fn file(v: &mut Volume, name: &[u8], bytes: &[u8]) -> Ino {
        let root = v.root();
        let ino = v
            .create(root, name, libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        v.write_at(ino, bytes, 0).unwrap();
        ino
    }

    fn used_inodes(v: &Volume) -> u64 {
        v.info().used_inodes
    }

    /// Unmounts and checks the image.
    fn assert_clean(mut v: Volume, image: &Path) {
        v.unmount().unwrap();
        drop(v);
        let report = crate::fsck(image, &mut Default::default()).unwrap();
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    #[test]
    fn an_unlinked_inode_the_kernel_knows_lives_until_its_last_forget() {
        let dir = tempfile::tempdir().unwrap();
        let (image, mut v) = volume(&dir);
        let root = v.root();
        let before = used_inodes(&v);
        let ino = file(&mut v, b"f", b"hello");
        v.remember(ino);
        v.remember(ino);
        v.unlink(root, b"f").unwrap();
        let st = v.stat_ino(ino).unwrap();
        assert_eq!((st.nlink, st.size), (0, 5));
        let mut buf = [0u8; 5];
        assert_eq!(v.read_at(ino, &mut buf, 0).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        v.forget(ino, 1).unwrap();
        assert_eq!(v.stat_ino(ino).unwrap().nlink, 0, "one lookup is left");
        assert_eq!(used_inodes(&v), before + 1);
        v.forget(ino, 1).unwrap();
        assert_eq!(v.kernel_lookups(ino), 0);
        assert_eq!(used_inodes(&v), before, "the inode went back");
        assert_clean(v, &image);
    }

    #[test]
    fn open_references_and_lookups_free_the_inode_whichever_goes_last() {
        let dir = tempfile::tempdir().unwrap();
        let (image, mut v) = volume(&dir);
        let root = v.root();
        let before = used_inodes(&v);
        for forget_first in [true, false] {
            let ino = file(&mut v, b"f", b"data");
            v.remember(ino);
            let _open = v.open_ref(ino);
            v.unlink(root, b"f").unwrap();
            if forget_first {
                v.forget(ino, 1).unwrap();
                assert_eq!(v.stat_ino(ino).unwrap().nlink, 0, "still open");
                v.close_ref(ino).unwrap();
            } else {
                v.close_ref(ino).unwrap();
                assert_eq!(v.stat_ino(ino).unwrap().nlink, 0, "still known");
                v.forget(ino, 1).unwrap();
            }
            assert_eq!(used_inodes(&v), before, "forget_first {forget_first}");
        }
        assert_clean(v, &image);
    }

    #[test]
    fn a_removed_directory_the_kernel_knows_still_answers() {
        let dir = tempfile::tempdir().unwrap();
        let (image, mut v) = volume(&dir);
        let root = v.root();
        let before = used_inodes(&v);
        let d = v
            .create(root, b"d", libc::S_IFDIR | 0o755, 0, 0, b"")
            .unwrap();
        v.remember(d);
        v.rmdir(root, b"d").unwrap();
        assert_eq!(v.stat_ino(d).unwrap().nlink, 0);
        let mut names = Vec::new();
        v.read_dir(d, 0, |e| {
            names.push(e.name.to_vec());
            true
        })
        .unwrap();
        assert!(names.iter().all(|n| n == b"." || n == b".."), "{names:?}");
        v.forget(d, 1).unwrap();
        assert_eq!(used_inodes(&v), before);
        assert_clean(v, &image);
    }

    #[test]
    fn forgetting_too_much_or_the_unknown_frees_nothing_held() {
        let dir = tempfile::tempdir().unwrap();
        let (image, mut v) = volume(&dir);
        let root = v.root();
        let linked = file(&mut v, b"linked", b"x");
        v.remember(linked);
        v.forget(linked, 10).unwrap();
        v.forget(linked, 1).unwrap();
        assert_eq!(v.stat_ino(linked).unwrap().nlink, 1, "a linked file stays");
        let open = file(&mut v, b"open", b"y");
        let _id = v.open_ref(open);
        v.unlink(root, b"open").unwrap();
        v.forget(open, 3).unwrap();
        assert_eq!(v.stat_ino(open).unwrap().nlink, 0, "still open");
        v.forget(root, 1).unwrap();
        assert_eq!(v.stat_ino(root).unwrap().nlink, 2);
        v.close_ref(open).unwrap();
        assert_clean(v, &image);
    }

    #[test]
    fn orphans_the_kernel_knew_are_freed_by_the_next_mount_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let (image, mut v) = volume(&dir);
        let root = v.root();
        let before = used_inodes(&v);
        let ino = file(&mut v, b"f", &[7u8; 9000]);
        v.remember(ino);
        v.unlink(root, b"f").unwrap();
        v.sync().unwrap();
        assert_eq!(used_inodes(&v), before + 1);
        // A crash: dropped without unmounting, the image is not clean.
        drop(v);
        let v = Volume::mount(&image, MountOptions::default()).unwrap();
        assert_eq!(used_inodes(&v), before);
        assert_clean(v, &image);
    }
}

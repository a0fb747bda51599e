//! The public operations of a `Volume` that change the image, each one
//! atomic: a call that fails leaves no trace.
//!
//! A transaction spans many calls, so failure atomicity cannot rest on the
//! transaction alone, nor on each operation undoing its own steps by hand.
//! Every operation here runs inside [`Volume::atomic`]: the journal keeps an
//! undo record of the call (txn/mod.rs, "Every call is atomic") and this module
//! keeps the volume's in-memory state at the call's start (the superblock
//! and the allocation cursor). On an error both are put back. A commit in
//! the middle of a call (a huge write, fallocate or hole punch commits its
//! finished part when the transaction is full) moves the undo point: the
//! committed part is a consistent state and stays.
//!
//! A call that never returned (it panicked, and someone caught the panic)
//! is found open by the next call or by [`Volume::abandon`]: its changes
//! are undone and the volume turns read-only for good, so nothing a panic
//! half-did is ever committed or marked clean.
//!
//! The operations themselves are the `*_op` functions of `ops.rs` and
//! `file.rs`; they may assume they run inside a call.

use super::Volume;
use super::ops::NewInode;
use crate::errno::{Errno, Result};
use crate::format::inode::Inode;
use crate::format::superblock::Superblock;
use crate::types::Ino;

/// The volume's in-memory state when the call in progress began, or at its
/// last commit.
pub(super) struct CallStart {
    sb: Superblock,
    sb_dirty: bool,
    alloc_group: u32,
    alloc_word: usize,
}

impl Volume {
    fn call_start(&self) -> CallStart {
        CallStart {
            sb: self.sb.clone(),
            sb_dirty: self.sb_dirty,
            alloc_group: self.alloc_group,
            alloc_word: self.alloc_word,
        }
    }

    /// Runs `op` as one atomic call (see the module comment).
    pub(super) fn atomic<T>(&mut self, op: impl FnOnce(&mut Volume) -> Result<T>) -> Result<T> {
        if self.j.in_call() {
            self.abandon();
        }
        // The fast paths' changes go to their slots first, outside the
        // call: they are done, whatever becomes of this call.
        if self.open.dirty_since().is_some() {
            self.write_back_inodes()?;
        }
        self.call = Some(self.call_start());
        self.j.begin_call();
        let result = op(self);
        match result {
            Ok(_) => {
                self.j.end_call();
                self.open.end_call(false);
            }
            Err(_) => self.undo_call(),
        }
        self.call = None;
        result
    }

    /// A commit inside a call: what it committed stays if the call fails
    /// later.
    pub(super) fn rebase_call(&mut self) {
        if self.call.is_some() {
            self.call = Some(self.call_start());
        }
    }

    fn undo_call(&mut self) {
        self.j.undo_call();
        self.open.end_call(true);
        if let Some(start) = self.call.take() {
            self.sb = start.sb;
            self.sb_dirty = start.sb_dirty;
            self.alloc_group = start.alloc_group;
            self.alloc_word = start.alloc_word;
        }
    }

    /// After a panic: undoes the call the panic interrupted, if any, and
    /// makes the volume read-only for good. Nothing more is written, the
    /// running transaction is never committed and the image is not marked
    /// clean: the next mount finds the last committed state (mode
    /// `journal`), or an image that `fsck --repair` checks (mode `none`).
    pub fn abandon(&mut self) {
        if self.j.in_call() {
            self.undo_call();
        }
        self.j.latch_read_only();
    }

    /// Creates `name` in `dir` with the given mode (S_IFREG, S_IFDIR or
    /// S_IFLNK plus permission bits). For a symlink, `target` is its content.
    pub fn create(
        &mut self,
        dir: Ino,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        target: &[u8],
    ) -> Result<Ino> {
        let new = NewInode {
            mode,
            uid,
            gid,
            target,
            rdev: 0,
        };
        self.atomic(|v| v.create_op(dir, name, &new))
    }

    /// Creates the special file `name` in `dir`: `mode` is S_IFIFO,
    /// S_IFSOCK, S_IFCHR or S_IFBLK plus permission bits, `rdev` the
    /// device number of a device. The first one sets the image's
    /// `INCOMPAT_SPECIAL_FILES` feature. Regular files, directories and
    /// symlinks are `create`'s.
    pub fn mknod(
        &mut self,
        dir: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> Result<Ino> {
        if !crate::format::inode::is_special_type(mode & libc::S_IFMT) {
            return Err(Errno::EINVAL);
        }
        let rdev = match mode & libc::S_IFMT {
            libc::S_IFCHR | libc::S_IFBLK => rdev,
            _ => 0,
        };
        let new = NewInode {
            mode,
            uid,
            gid,
            target: b"",
            rdev,
        };
        self.atomic(|v| v.create_op(dir, name, &new))
    }

    /// Adds a hard link `dir/name` to `ino`.
    pub fn link(&mut self, ino: Ino, dir: Ino, name: &[u8]) -> Result<()> {
        self.atomic(|v| v.link_op(ino, dir, name))
    }

    /// Removes a non-directory entry.
    pub fn unlink(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.atomic(|v| v.unlink_op(dir, name))
    }

    /// Removes an empty directory entry.
    pub fn rmdir(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.atomic(|v| v.rmdir_op(dir, name))
    }

    /// `renameat2` at the inode level.
    pub fn rename(
        &mut self,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.atomic(|v| v.rename_op(sdir, sname, ddir, dname, flags))
    }

    /// Changes attributes in one transaction; `f` edits the inode. ctime is
    /// set afterwards, as every attribute change does.
    pub fn setattr(&mut self, ino: Ino, f: impl FnOnce(&mut Inode)) -> Result<()> {
        self.atomic(|v| v.setattr_op(ino, f))
    }

    /// Drops an open reference; the last one frees an unlinked inode.
    pub fn close_ref(&mut self, ino: Ino) -> Result<()> {
        self.atomic(|v| v.close_ref_op(ino))
    }

    /// Writes `buf` at `off`, allocating blocks as needed. A write cut short
    /// by ENOSPC returns the bytes written so far (or ENOSPC if none).
    pub fn write_at(&mut self, ino: Ino, buf: &[u8], off: u64) -> Result<usize> {
        self.atomic(|v| v.write_at_op(ino, buf, off))
    }

    /// Sets the size of a regular file: shrinking frees the blocks past the
    /// end, growing leaves a hole.
    pub fn truncate_ino(&mut self, ino: Ino, len: u64) -> Result<()> {
        self.atomic(|v| v.truncate_ino_op(ino, len))
    }

    /// `fallocate`: mode 0 allocates (zeroed) and may extend the size;
    /// KEEP_SIZE allocates without extending; PUNCH_HOLE|KEEP_SIZE frees.
    pub fn fallocate_ino(&mut self, ino: Ino, mode: i32, off: u64, len: u64) -> Result<()> {
        self.atomic(|v| v.fallocate_ino_op(ino, mode, off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::super::alloc::fault_injection::{Fault, arm, disarm};
    use super::super::{MkfsOptions, Mode, MountOptions, mkfs};
    use super::*;
    use crate::errno::Errno;
    use crate::format::{BLOCK_SIZE, Bid, MAP_BITMAP, get_u64};

    fn volume(dir: &tempfile::TempDir, mode: Mode) -> Volume {
        let p = dir.path().join("img");
        let opts = MkfsOptions {
            size: 16 << 20,
            mode,
            ..Default::default()
        };
        mkfs(&p, &opts).unwrap();
        Volume::mount(&p, MountOptions::default()).unwrap()
    }

    /// What the volume shows: its superblock and the bytes of every block
    /// in use (the region before the data area, and each data-area block
    /// its group map marks used), as checksums. A call undone must leave it
    /// identical.
    fn view(v: &Volume) -> (Superblock, Vec<(Bid, u32)>) {
        let sb = v.sb.clone();
        let mut blocks = Vec::new();
        for bid in 0..sb.total_blocks as Bid {
            let used = match sb.group_of(bid) {
                None => true,
                Some(g) => {
                    let map = sb.map_bid(g);
                    bid == map || {
                        let i = (bid - map - 1) as usize;
                        let word = get_u64(v.j.peek(map).unwrap(), MAP_BITMAP + i / 64 * 8);
                        word & (1 << (i % 64)) != 0
                    }
                }
            };
            if used {
                blocks.push((bid, crc32c::crc32c(v.j.peek(bid).unwrap())));
            }
        }
        (sb, blocks)
    }

    const DIR_ENTRIES: usize = 400;
    /// Links in the root that the rename case moves into the directory.
    const RENAMES: usize = 1300;

    /// A volume with a directory big enough that inserting splits leaves,
    /// a file with indirect blocks, and work left in the running
    /// transaction (so undo has shadows from earlier calls to keep).
    fn populated(dir: &tempfile::TempDir, mode: Mode) -> (Volume, Ino, Ino) {
        let mut v = volume(dir, mode);
        let root = v.root();
        // Fill half the image first, so that later allocations come from
        // a later part of the group's bitmap than its header.
        let filler = v
            .create(root, b"filler", libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        v.write_at(filler, &vec![1u8; 8 << 20], 0).unwrap();
        let d = v
            .create(root, b"d", libc::S_IFDIR | 0o755, 0, 0, b"")
            .unwrap();
        for i in 0..DIR_ENTRIES {
            let name = format!("entry-with-a-longish-name-{i:05}");
            v.create(d, name.as_bytes(), libc::S_IFREG | 0o644, 0, 0, b"")
                .unwrap();
        }
        let f = v
            .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        v.write_at(f, &vec![7u8; 20 * BLOCK_SIZE], 0).unwrap();
        for i in 0..RENAMES {
            v.link(f, root, format!("r-{i}").as_bytes()).unwrap();
        }
        v.commit_txn().unwrap();
        v.create(root, b"pending", libc::S_IFREG | 0o600, 0, 0, b"")
            .unwrap();
        (v, d, f)
    }

    /// Every operation that allocates, cut off at each of its allocations
    /// in turn: the failed call leaves the volume exactly as it was.
    #[test]
    fn a_failed_call_leaves_no_trace() {
        type Op = fn(&mut Volume, Ino, Ino, u32) -> Result<()>;
        let ops: [(&str, Op); 7] = [
            ("create", |v, d, _, k| {
                let name = format!("new-{k}");
                v.create(d, name.as_bytes(), libc::S_IFREG | 0o644, 0, 0, b"")
                    .map(drop)
            }),
            ("mkdir", |v, d, _, k| {
                let name = format!("sub-{k}");
                v.create(d, name.as_bytes(), libc::S_IFDIR | 0o755, 0, 0, b"")
                    .map(drop)
            }),
            ("long symlink", |v, d, _, k| {
                let name = format!("ln-{k}");
                v.create(
                    d,
                    name.as_bytes(),
                    libc::S_IFLNK | 0o777,
                    0,
                    0,
                    &[b'x'; 300],
                )
                .map(drop)
            }),
            ("link", |v, d, f, k| {
                let name = format!("hard-{k}");
                v.link(f, d, name.as_bytes())
            }),
            ("rename", |v, d, _, k| {
                // Into the big directory, under a new name: it grows by one
                // entry a call, so leaves split now and then.
                let root = v.root();
                let (from, to) = (format!("r-{k}"), format!("moved-{k}"));
                v.rename(root, from.as_bytes(), d, to.as_bytes(), 0)
            }),
            ("write", |v, _, f, k| {
                // Past the end: only new blocks (a failure at the first
                // allocation is a failed call; later ones cut it short).
                let at = (1 << 20) + k as u64 * 4 * BLOCK_SIZE as u64;
                v.write_at(f, &[1u8; 3 * BLOCK_SIZE], at).map(drop)
            }),
            ("fallocate", |v, _, f, k| {
                let at = (8 << 20) + k as u64 * 64 * BLOCK_SIZE as u64;
                v.fallocate_ino(f, 0, at, 40 * BLOCK_SIZE as u64)
            }),
        ];
        for mode in [Mode::Journal, Mode::None] {
            for (what, op) in ops {
                let dir = tempfile::tempdir().unwrap();
                let (mut v, d, f) = populated(&dir, mode);
                // Cut each call off at its first, second and third
                // allocation; calls that allocate less run to the end (and
                // make later calls allocate: new inode blocks, leaf splits).
                let mut failures = [0; 3];
                let mut call = 0;
                for (k, failed) in failures.iter_mut().enumerate() {
                    let tries = call + 400;
                    while *failed < 2 && call < tries {
                        call += 1;
                        let before = view(&v);
                        arm(k as u32, Fault::Fail);
                        let r = op(&mut v, d, f, call);
                        if disarm() {
                            r.unwrap_or_else(|e| panic!("{mode} {what}: {e}"));
                            continue;
                        }
                        match r {
                            Err(e) => {
                                assert_eq!(e, Errno::ENOSPC, "{mode} {what} at {k}");
                                assert!(view(&v) == before, "{mode} {what}: trace left at {k}");
                                *failed += 1;
                            }
                            // A write cut short by ENOSPC returns what it wrote.
                            Ok(()) => assert_eq!(what, "write", "{mode} at {k}"),
                        }
                    }
                }
                assert!(failures[0] > 0, "{mode} {what}: never cut off");
                v.unmount().unwrap();
                drop(v);
                let report = crate::fsck(dir.path().join("img"), &mut Default::default()).unwrap();
                assert!(report.is_clean(), "{mode} {what}: {:?}", report.problems);
            }
        }
    }

    /// A panic in the middle of a call, caught by the caller: the call is
    /// undone, the volume turns read-only, and the running transaction is
    /// never committed nor the image marked clean.
    #[test]
    fn a_caught_panic_abandons_the_volume() {
        for mode in [Mode::Journal, Mode::None] {
            let dir = tempfile::tempdir().unwrap();
            let (mut v, _, f) = populated(&dir, mode);
            let root = v.root();
            v.sync().unwrap();
            v.create(root, b"after-sync", libc::S_IFREG, 0, 0, b"")
                .unwrap();
            let before = view(&v);
            arm(1, Fault::Panic);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                v.write_at(f, &[3u8; 4 * BLOCK_SIZE], 2 << 20)
            }));
            assert!(caught.is_err());
            assert_eq!(
                v.create(root, b"next", libc::S_IFREG, 0, 0, b""),
                Err(Errno::EROFS),
                "{mode}"
            );
            assert!(view(&v) == before, "{mode}: the cut call was undone");
            assert_eq!(v.lookup(root, b"after-sync").map(drop), Ok(()));
            assert_eq!(v.unmount(), Err(Errno::EROFS));
            drop(v);
            let v = Volume::mount(&dir.path().join("img"), MountOptions::default()).unwrap();
            assert!(!v.was_clean, "{mode}: not marked clean");
            assert_eq!(v.stat_ino(f).unwrap().size, 20 * BLOCK_SIZE as u64);
            if mode == Mode::Journal {
                // The running transaction (after the sync) was dropped.
                assert_eq!(v.lookup(root, b"after-sync"), Err(Errno::ENOENT));
                drop(v);
                let report = crate::fsck(dir.path().join("img"), &mut Default::default()).unwrap();
                assert!(report.is_clean(), "{:?}", report.problems);
            }
        }
    }

    /// The same through `SharedFs`: the panic poisons its lock, and the
    /// next user finds the file system read-only.
    #[test]
    fn shared_fs_goes_read_only_after_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        mkfs(&p, &MkfsOptions::default()).unwrap();
        let fs = crate::SharedFs::new(crate::Fs::mount(&p, MountOptions::default()).unwrap());
        fs.lock().mkdir("/a", 0o755).unwrap();
        let shared = fs.clone();
        let caught = std::thread::spawn(move || {
            let mut g = shared.lock();
            let fd = g.open("/b", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
            arm(0, Fault::Panic);
            let _ = g.write(fd, b"data");
        })
        .join();
        assert!(caught.is_err());
        let mut g = fs.lock();
        assert_eq!(g.mkdir("/c", 0o755), Err(Errno::EROFS));
        assert!(g.stat("/a").is_ok(), "reads go on");
        assert_eq!(g.stat("/b").unwrap().size, 0, "the write was undone");
    }

    /// An `Fs` dropped by a panic's unwinding commits nothing.
    #[test]
    fn drop_during_a_panic_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        mkfs(&p, &MkfsOptions::default()).unwrap();
        let path = p.clone();
        let caught = std::panic::catch_unwind(move || {
            let mut fs = crate::Fs::mount(&path, MountOptions::default()).unwrap();
            fs.mkdir("/durable", 0o755).unwrap();
            fs.sync().unwrap();
            fs.mkdir("/pending", 0o755).unwrap();
            panic!("the program fails with the file system in hand");
        });
        assert!(caught.is_err());
        let mut fs = crate::Fs::mount(&p, MountOptions::default()).unwrap();
        assert!(!fs.volume().was_clean);
        assert!(fs.stat("/durable").is_ok());
        assert_eq!(fs.stat("/pending").map(drop), Err(Errno::ENOENT));
    }
}

#[cfg(test)]
mod undo_tests {
    use super::super::{MkfsOptions, Mode, MountOptions, mkfs};
    use super::*;
    use crate::format::{BLOCK_SIZE, N_DIRECT};

    /// Mode none: a truncate that frees an indirect block written since
    /// the last sync and then fails (EUCLEAN on a later, damaged tree)
    /// leaves the file readable, before and after a remount (the freed
    /// block's checksum is still sealed at the next checkpoint).
    #[test]
    fn a_failed_truncate_keeps_a_freed_indirect_block_readable() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let opts = MkfsOptions {
            size: 16 << 20,
            mode: Mode::None,
            ..Default::default()
        };
        mkfs(&p, &opts).unwrap();
        let mut v = Volume::mount(&p, MountOptions::default()).unwrap();
        let root = v.root();
        let f = v
            .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        v.sync().unwrap();
        v.write_at(f, &vec![7u8; 20 * BLOCK_SIZE], 0).unwrap();
        let mut buf = vec![0u8; BLOCK_SIZE];
        assert_eq!(
            v.read_at(f, &mut buf, 15 * BLOCK_SIZE as u64),
            Ok(BLOCK_SIZE)
        );
        // Damage: the double-indirect slot points at a data block of f.
        let data0 = v.inode(f).unwrap().map[0];
        v.setattr(f, |i| i.map[N_DIRECT + 1] = data0).unwrap();
        let r = v.truncate_ino(f, 0);
        assert!(r.is_err(), "{r:?}");
        // Undo the damage and read what the file held.
        v.setattr(f, |i| i.map[N_DIRECT + 1] = 0).unwrap();
        let read = v.read_at(f, &mut buf, 15 * BLOCK_SIZE as u64);
        v.unmount().unwrap();
        drop(v);
        let mut v = Volume::mount(&p, MountOptions::default()).unwrap();
        let again = v.read_at(f, &mut buf, 15 * BLOCK_SIZE as u64);
        assert_eq!((read, again), (Ok(BLOCK_SIZE), Ok(BLOCK_SIZE)));
    }
}

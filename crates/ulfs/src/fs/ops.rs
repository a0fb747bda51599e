//! Namespace and attribute operations at the inode level: create, link,
//! unlink, rmdir, rename, attribute changes, and the life cycle of an inode
//! (open references, orphans of unlinked-but-open files, destruction).
//!
//! Callers pass a parent directory's inode number and a single name
//! component; path walking is `posix`'s job. The public entry points are in
//! `calls.rs`, which runs each `*_op` here as one atomic call: an operation
//! may stop at its first error without undoing its earlier steps.

use super::Volume;
use crate::errno::{Errno, Result};
use crate::format::BLOCK_SIZE;
use crate::format::inode::{FLAG_INLINE, INLINE_MAX, Inode, is_special_type};
use crate::format::superblock::INCOMPAT_SPECIAL_FILES;
use crate::types::*;

/// `d_type` of a mode.
pub fn dtype_of(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => DT_DIR,
        libc::S_IFREG => DT_REG,
        libc::S_IFLNK => DT_LNK,
        libc::S_IFIFO => libc::DT_FIFO,
        libc::S_IFSOCK => libc::DT_SOCK,
        libc::S_IFCHR => libc::DT_CHR,
        libc::S_IFBLK => libc::DT_BLK,
        _ => DT_UNKNOWN,
    }
}

/// Bounds the walk up parent pointers (rename loop check, getcwd).
pub(crate) const MAX_TREE_DEPTH: usize = 1 << 16;

/// What `create_op` makes: any type but a directory's contents.
#[derive(Clone, Copy)]
pub(super) struct NewInode<'a> {
    /// Type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// A symlink's target; empty for other types.
    pub target: &'a [u8],
    /// A device's number; 0 for other types.
    pub rdev: u64,
}

impl Volume {
    /// A directory's inode, or ENOTDIR.
    pub(crate) fn dir_inode(&self, ino: Ino) -> Result<Inode> {
        let d = self.inode(ino)?;
        if !d.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    /// Looks up one name in directory `dir`: the inode it names.
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Ino> {
        super::dir::check_lookup_name(name)?;
        let d = self.dir_inode(dir)?;
        match self.dir_lookup(&d, name)? {
            Some((_, ino, _)) => Ok(ino),
            None => Err(Errno::ENOENT),
        }
    }

    /// The parent of directory `dir` (the root is its own): what `..`
    /// names, for listings.
    pub fn parent_of(&self, dir: Ino) -> Result<Ino> {
        if dir == self.root() {
            return Ok(dir);
        }
        Ok(self.dir_inode(dir)?.parent)
    }

    /// `stat` of an inode.
    pub fn stat_ino(&self, ino: Ino) -> Result<Stat> {
        let i = self.inode(ino)?;
        Ok(stat_of(self.dev(), ino, &i))
    }

    /// `fstat` of an open file, from its decoded inode.
    #[inline(always)]
    pub fn stat_open(&mut self, id: super::OpenId) -> Result<Stat> {
        let dev = self.dev();
        let ino = self.open_ino(id);
        Ok(stat_of(dev, ino, self.open_inode(id)?))
    }

    /// fstat's C `struct stat` of an open file if its inode is decoded
    /// (any call on it since it was opened decodes it), kept from one call
    /// to the next while the inode is unchanged.
    #[inline(always)]
    pub fn libc_stat_open_decoded(&mut self, id: super::OpenId) -> Option<&libc::stat> {
        let dev = self.dev();
        self.open
            .libc_stat_if(id, |ino, inode| stat_of(dev, ino, inode).to_libc())
    }

    /// `libc_stat_open_decoded`, decoding the inode first if need be.
    #[inline]
    pub fn libc_stat_open(&mut self, id: super::OpenId) -> Result<&libc::stat> {
        self.open_inode(id)?;
        self.libc_stat_open_decoded(id).ok_or(Errno::EIO)
    }

    /// The size of an open file (SEEK_END, O_APPEND).
    #[inline]
    pub fn size_open(&mut self, id: super::OpenId) -> Result<u64> {
        Ok(self.open_inode(id)?.size)
    }

    /// Creates `name` in `dir` as `new` says: its type and permission
    /// bits, owner, a symlink's target, a device's number.
    pub(super) fn create_op(&mut self, dir: Ino, name: &[u8], new: &NewInode) -> Result<Ino> {
        let NewInode {
            mode,
            uid,
            gid,
            target,
            rdev,
        } = *new;
        self.writable()?;
        super::dir::check_name(name)?;
        let ty = mode & libc::S_IFMT;
        let special = is_special_type(ty);
        if !special && !matches!(ty, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK) {
            return Err(Errno::EINVAL);
        }
        let mut d = self.dir_inode(dir)?;
        if d.nlink == 0 {
            return Err(Errno::ENOENT); // the directory was removed
        }
        if self.dir_lookup(&d, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let now = self.now();
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        // A set-group-ID directory hands its group to new entries, and its
        // set-group-ID bit to new subdirectories (inode_init_owner).
        let (mode, gid) = if d.mode & libc::S_ISGID != 0 {
            (if is_dir { mode | libc::S_ISGID } else { mode }, d.gid)
        } else {
            (mode, gid)
        };
        let mut inode = Inode {
            mode,
            nlink: if is_dir { 2 } else { 1 },
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            parent: if is_dir { dir } else { 0 },
            ..Default::default()
        };
        if special {
            inode.rdev = rdev;
            // The first special file marks the image, so that a reader
            // without them refuses it rather than take them for damage.
            if self.sb.feat_incompat & INCOMPAT_SPECIAL_FILES == 0 {
                self.sb.feat_incompat |= INCOMPAT_SPECIAL_FILES;
                self.sb_dirty = true;
            }
        }
        if mode & libc::S_IFMT == libc::S_IFLNK && target.len() <= INLINE_MAX {
            inode.flags |= FLAG_INLINE;
            inode.inline[..target.len()].copy_from_slice(target);
            inode.size = target.len() as u64;
        }
        // A step that fails leaves nothing behind: the call is undone
        // whole (calls.rs).
        let ino = self.alloc_inode(&mut inode)?;
        if mode & libc::S_IFMT == libc::S_IFLNK && inode.flags & FLAG_INLINE == 0 {
            self.write_symlink_body(ino, target)?;
        }
        let key = self.dir_insert(dir, &mut d, name, ino, dtype_of(mode))?;
        if is_dir {
            d.nlink = d.nlink.saturating_add(1);
            let mut child = self.inode(ino)?;
            child.name_key = key;
            self.put_inode(ino, &child)?;
        }
        d.mtime = now;
        d.ctime = now;
        self.put_inode(dir, &d)?;
        self.commit()?;
        Ok(ino)
    }

    fn write_symlink_body(&mut self, ino: Ino, target: &[u8]) -> Result<()> {
        let mut inode = self.inode(ino)?;
        let (bid, _) = self.bmap_alloc(ino, &mut inode, 0, 0)?;
        let blk = self.j.data_mut(bid)?;
        blk[..target.len()].copy_from_slice(target);
        blk[target.len()..].fill(0);
        inode.size = target.len() as u64;
        self.put_inode(ino, &inode)
    }

    /// The target of a symlink.
    pub fn readlink_ino(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.inode(ino)?;
        if !inode.is_symlink() {
            return Err(Errno::EINVAL);
        }
        let len = inode.size as usize;
        if len > crate::format::PATH_MAX {
            return Err(Errno::EUCLEAN);
        }
        if inode.flags & FLAG_INLINE != 0 {
            return inode
                .inline
                .get(..len)
                .map(<[u8]>::to_vec)
                .ok_or(Errno::EUCLEAN);
        }
        let mut out = vec![0u8; len];
        self.copy_out(&inode, &mut out, 0)?;
        Ok(out)
    }

    /// Adds a hard link `dir/name` to `ino`.
    pub(super) fn link_op(&mut self, ino: Ino, dir: Ino, name: &[u8]) -> Result<()> {
        self.writable()?;
        super::dir::check_name(name)?;
        let mut target = self.inode(ino)?;
        if target.is_dir() {
            return Err(Errno::EPERM);
        }
        if target.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if target.nlink >= u32::MAX - 1 {
            return Err(Errno::EMLINK);
        }
        let mut d = self.dir_inode(dir)?;
        if d.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        self.dir_insert(dir, &mut d, name, ino, dtype_of(target.mode))?;
        let now = self.now();
        d.mtime = now;
        d.ctime = now;
        self.put_inode(dir, &d)?;
        target.nlink += 1;
        target.ctime = now;
        self.put_inode(ino, &target)?;
        self.commit()
    }

    /// Removes a non-directory entry.
    pub(super) fn unlink_op(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.writable()?;
        super::dir::check_lookup_name(name)?;
        let mut d = self.dir_inode(dir)?;
        let (_, ino, _) = self.dir_lookup(&d, name)?.ok_or(Errno::ENOENT)?;
        if self.inode(ino)?.is_dir() {
            return Err(Errno::EISDIR);
        }
        self.dir_remove(&mut d, name)?;
        let now = self.now();
        d.mtime = now;
        d.ctime = now;
        self.put_inode(dir, &d)?;
        self.drop_link(ino)?;
        self.commit()
    }

    /// Removes an empty directory entry.
    pub(super) fn rmdir_op(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        self.writable()?;
        super::dir::check_lookup_name(name)?;
        let mut d = self.dir_inode(dir)?;
        let (_, ino, _) = self.dir_lookup(&d, name)?.ok_or(Errno::ENOENT)?;
        let victim = self.dir_inode(ino)?;
        if !self.dir_is_empty(&victim) {
            return Err(Errno::ENOTEMPTY);
        }
        self.dir_remove(&mut d, name)?;
        let now = self.now();
        d.nlink = d.nlink.saturating_sub(1);
        d.mtime = now;
        d.ctime = now;
        self.put_inode(dir, &d)?;
        self.kill_dir(ino)?;
        self.commit()
    }

    /// A directory lost its entry: it is gone once no descriptor holds it.
    fn kill_dir(&mut self, ino: Ino) -> Result<()> {
        let mut v = self.inode(ino)?;
        v.nlink = 0;
        v.ctime = self.now();
        self.dir_free_all(&mut v)?;
        self.put_inode(ino, &v)?;
        self.release_if_unused(ino)
    }

    /// One link to `ino` went away.
    fn drop_link(&mut self, ino: Ino) -> Result<()> {
        let mut t = self.inode(ino)?;
        t.nlink = t.nlink.saturating_sub(1);
        t.ctime = self.now();
        self.put_inode(ino, &t)?;
        if t.nlink == 0 {
            self.release_if_unused(ino)?;
        }
        Ok(())
    }

    /// Frees an inode with no links now, or makes it an orphan until its
    /// last open reference and the kernel's last lookup of it go.
    fn release_if_unused(&mut self, ino: Ino) -> Result<()> {
        if self.open_refs(ino) > 0 || self.kernel_refs.held(ino) {
            let mut t = self.inode(ino)?;
            t.next_orphan = self.sb.orphan_head;
            self.put_inode(ino, &t)?;
            self.sb.orphan_head = ino;
            self.sb_dirty = true;
            Ok(())
        } else {
            self.destroy(ino)
        }
    }

    /// Frees an inode and everything it owns.
    pub(crate) fn destroy(&mut self, ino: Ino) -> Result<()> {
        let mut t = self.inode(ino)?;
        if t.is_dir() {
            self.dir_free_all(&mut t)?;
        } else if t.flags & FLAG_INLINE == 0 {
            self.bmap_truncate(&mut t, 0)?;
        }
        self.free_inode(ino)
    }

    /// Drops an open reference; the last one frees an unlinked inode the
    /// kernel does not know.
    pub(super) fn close_ref_op(&mut self, ino: Ino) -> Result<()> {
        if !self.drop_open_ref(ino)? {
            return Ok(());
        }
        self.free_if_orphan(ino)
    }

    /// Frees `ino`, which nothing holds open, if it has no link left and
    /// the kernel does not know it.
    pub(super) fn free_if_orphan(&mut self, ino: Ino) -> Result<()> {
        if self.read_only || self.kernel_refs.held(ino) {
            return Ok(());
        }
        let t = self.inode(ino)?;
        if t.nlink == 0 {
            self.unlink_orphan(ino)?;
            self.destroy(ino)?;
            self.commit()?;
        }
        Ok(())
    }

    /// Takes `ino` off the orphan list.
    fn unlink_orphan(&mut self, ino: Ino) -> Result<()> {
        let next = self.inode(ino)?.next_orphan;
        if self.sb.orphan_head == ino {
            self.sb.orphan_head = next;
            self.sb_dirty = true;
            return Ok(());
        }
        let mut cur = self.sb.orphan_head;
        for _ in 0..=self.orphan_walk_limit() {
            if cur == 0 {
                return Ok(());
            }
            let mut c = self.inode(cur)?;
            if c.next_orphan == ino {
                c.next_orphan = next;
                return self.put_inode(cur, &c);
            }
            cur = c.next_orphan;
        }
        Err(Errno::EUCLEAN)
    }

    /// Longest orphan list that can be real: every inode slot the image
    /// could hold. Bounds walks of a list read from a possibly damaged image.
    fn orphan_walk_limit(&self) -> u64 {
        self.sb
            .total_blocks
            .saturating_mul(crate::format::INODES_PER_BLOCK)
    }

    /// Frees orphans left by a crash or a process that exited with files
    /// open: O(orphans), run at mount.
    pub(crate) fn reap_orphans(&mut self) -> Result<()> {
        for _ in 0..=self.orphan_walk_limit() {
            let ino = self.sb.orphan_head;
            if ino == 0 {
                return Ok(());
            }
            let t = self.inode(ino)?;
            self.sb.orphan_head = t.next_orphan;
            self.sb_dirty = true;
            if t.nlink == 0 {
                self.destroy(ino)?;
            }
        }
        Err(Errno::EUCLEAN)
    }

    /// Changes attributes in one transaction; `f` edits the inode. ctime is
    /// set afterwards, as every attribute change does.
    pub(super) fn setattr_op(&mut self, ino: Ino, f: impl FnOnce(&mut Inode)) -> Result<()> {
        self.writable()?;
        let mut t = self.inode(ino)?;
        f(&mut t);
        t.ctime = self.now();
        self.put_inode(ino, &t)?;
        self.commit()
    }

    /// Whether `ino` is `ancestor` or lies below it.
    pub(crate) fn is_within(&self, mut ino: Ino, ancestor: Ino) -> Result<bool> {
        for _ in 0..MAX_TREE_DEPTH {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == self.root() {
                return Ok(false);
            }
            ino = self.dir_inode(ino)?.parent;
        }
        Err(Errno::ELOOP)
    }

    /// `renameat2` at the inode level.
    pub(super) fn rename_op(
        &mut self,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.writable()?;
        super::dir::check_lookup_name(sname)?;
        super::dir::check_name(dname)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Errno::EINVAL);
        }
        let sd = self.dir_inode(sdir)?;
        let dd = self.dir_inode(ddir)?;
        let (_, src, _) = self.dir_lookup(&sd, sname)?.ok_or(Errno::ENOENT)?;
        let dst = self.dir_lookup(&dd, dname)?.map(|(_, ino, _)| ino);
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        let s = self.inode(src)?;
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Errno::ENOENT)?;
            return self.exchange(sdir, sname, src, ddir, dname, dst);
        }
        if s.is_dir() && sdir != ddir && self.is_within(ddir, src)? {
            return Err(Errno::EINVAL);
        }
        if let Some(dst) = dst {
            if dst == src {
                return Ok(()); // same inode: POSIX says do nothing
            }
            let t = self.inode(dst)?;
            // Linux's lock_rename trap: a target that contains the source.
            if t.is_dir() && self.is_within(sdir, dst)? {
                return Err(Errno::ENOTEMPTY);
            }
            match (s.is_dir(), t.is_dir()) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !self.dir_is_empty(&t) => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
        }
        let now = self.now();
        // Insert (or repoint) first: it is the step that can fail for lack
        // of space, and failing before the removal changes nothing.
        let mut d = self.inode(ddir)?;
        let key = match dst {
            Some(_) => self.dir_repoint(&d, dname, src, dtype_of(s.mode))?,
            None => self.dir_insert(ddir, &mut d, dname, src, dtype_of(s.mode))?,
        };
        d.mtime = now;
        d.ctime = now;
        self.put_inode(ddir, &d)?;
        let mut sd = self.inode(sdir)?;
        self.dir_remove(&mut sd, sname)?;
        sd.mtime = now;
        sd.ctime = now;
        self.put_inode(sdir, &sd)?;
        let mut moved = self.inode(src)?;
        moved.ctime = now;
        if moved.is_dir() {
            moved.parent = ddir;
            moved.name_key = key;
        }
        self.put_inode(src, &moved)?;
        if moved.is_dir() && sdir != ddir {
            self.adjust_nlink(sdir, -1)?;
            self.adjust_nlink(ddir, 1)?;
        }
        if let Some(dst) = dst {
            if self.inode(dst)?.is_dir() {
                self.adjust_nlink(ddir, -1)?;
                self.kill_dir(dst)?;
            } else {
                self.drop_link(dst)?;
            }
        }
        self.commit()
    }

    fn adjust_nlink(&mut self, ino: Ino, by: i32) -> Result<()> {
        let mut t = self.inode(ino)?;
        t.nlink = t.nlink.saturating_add_signed(by);
        self.put_inode(ino, &t)
    }

    /// RENAME_EXCHANGE: swaps two entries atomically.
    fn exchange(
        &mut self,
        sdir: Ino,
        sname: &[u8],
        src: Ino,
        ddir: Ino,
        dname: &[u8],
        dst: Ino,
    ) -> Result<()> {
        if src == dst {
            return Ok(());
        }
        let s = self.inode(src)?;
        let t = self.inode(dst)?;
        if sdir != ddir {
            if s.is_dir() && self.is_within(ddir, src)? {
                return Err(Errno::EINVAL);
            }
            if t.is_dir() && self.is_within(sdir, dst)? {
                return Err(Errno::EINVAL);
            }
        }
        let now = self.now();
        let dkey = self.dir_repoint(&self.inode(ddir)?, dname, src, dtype_of(s.mode))?;
        let skey = self.dir_repoint(&self.inode(sdir)?, sname, dst, dtype_of(t.mode))?;
        for (ino, parent, key) in [(src, ddir, dkey), (dst, sdir, skey)] {
            let mut x = self.inode(ino)?;
            x.ctime = now;
            if x.is_dir() {
                x.parent = parent;
                x.name_key = key;
            }
            self.put_inode(ino, &x)?;
        }
        if sdir != ddir && s.is_dir() != t.is_dir() {
            let (lost, gained) = if s.is_dir() {
                (sdir, ddir)
            } else {
                (ddir, sdir)
            };
            self.adjust_nlink(lost, -1)?;
            self.adjust_nlink(gained, 1)?;
        }
        for dir in [sdir, ddir] {
            let mut x = self.inode(dir)?;
            x.mtime = now;
            x.ctime = now;
            self.put_inode(dir, &x)?;
        }
        self.commit()
    }

    /// The path of directory `ino` from the root, by parent pointers and
    /// the name keys that directories keep of their own entries.
    pub fn path_of_dir(&self, mut ino: Ino) -> Result<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        for _ in 0..MAX_TREE_DEPTH {
            if ino == self.root() {
                let mut out = Vec::new();
                for p in parts.iter().rev() {
                    out.push(b'/');
                    out.extend_from_slice(p);
                }
                if out.is_empty() {
                    out.push(b'/');
                }
                return Ok(out);
            }
            let d = self.dir_inode(ino)?;
            if d.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            let parent = self.dir_inode(d.parent)?;
            let name = self
                .dir_name_of(&parent, d.name_key)?
                .ok_or(Errno::EUCLEAN)?;
            parts.push(name);
            ino = d.parent;
        }
        Err(Errno::ELOOP)
    }
}

impl Volume {
    /// Entries of directory `ino` with key >= `from`, in key order, until
    /// `f` returns false.
    pub fn read_dir(
        &self,
        ino: Ino,
        from: u64,
        f: impl FnMut(super::DirItem) -> bool,
    ) -> Result<()> {
        let d = self.dir_inode(ino)?;
        self.dir_read(&d, from, f)
    }

    /// What `statfs` reports. Inodes are made on demand, so the free inode
    /// count is an estimate, as on btrfs: the free slots of existing inode
    /// blocks, plus the empty files the free blocks could hold, each taking
    /// an inode slot (15 to a block) and a directory entry (a leaf holds
    /// 14 to 184): about 12 files a block.
    pub fn statfs(&self) -> StatFs {
        let sb = &self.sb;
        const FILES_PER_FREE_BLOCK: u64 = 12;
        let ffree = sb.free_inodes + sb.free_blocks * FILES_PER_FREE_BLOCK;
        StatFs {
            fs_type: ULFS_MAGIC,
            bsize: BLOCK_SIZE as u64,
            blocks: sb.data_blocks(),
            bfree: sb.free_blocks,
            bavail: sb.free_blocks,
            files: sb.used_inodes + ffree,
            ffree,
            fsid: self.dev(),
            namelen: crate::format::NAME_MAX as u64,
            frsize: BLOCK_SIZE as u64,
        }
    }
}

/// What `stat` reports of inode `ino`.
#[inline(always)]
fn stat_of(dev: u64, ino: Ino, i: &Inode) -> Stat {
    Stat {
        dev,
        ino,
        mode: i.mode,
        nlink: i.nlink as u64,
        uid: i.uid,
        gid: i.gid,
        rdev: i.rdev,
        size: i.size,
        blksize: BLOCK_SIZE as u64,
        blocks: i.blocks.saturating_mul(BLOCK_SIZE as u64 / 512),
        atime: i.atime,
        mtime: i.mtime,
        ctime: i.ctime,
        btime: i.btime,
    }
}

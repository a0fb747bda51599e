//! The FUSE requests, served at the inode level by one `Volume`: what the
//! kernel asks (lookup, getattr, read, rename, ...) becomes the volume's
//! inode-level call of the same meaning, and its `Errno` the reply.
//!
//! **What is serialized.** The mount runs several request loops
//! (`threads=`, one per core by default). Requests that only read the
//! volume (lookup, getattr, read, readdir, readdirplus, readlink, statfs,
//! lseek) share it under a read lock and run side by side; every request
//! that changes it (a write, a create, a setattr, an open or release,
//! which take and drop open references) has it to itself, because the
//! volume's changes are transactions on one running journal transaction
//! and its write path keeps decoded inodes (`&mut self`). A read that
//! makes atime due (relatime: the first read after a change) records it
//! afterwards, under the write lock; reads after it find nothing to do.
//! The kernel's caches (attributes, entries, pages) answer most repeated
//! requests without asking.
//!
//! **Lifetimes.** Each open handle (open, create, opendir) holds an open
//! reference on its inode, and every entry sent to the kernel (lookup,
//! create, mkdir, mknod, symlink, link, readdirplus) one lookup, which the
//! kernel gives back with forget; the volume keeps the two apart
//! (`Volume::remember`/`forget`). An inode unlinked while either is held
//! lives on, so a file unlinked while open or while reached by an
//! `O_PATH` descriptor or a working directory still answers, with nlink 0,
//! as on any Linux file system; the last of them frees it. A reused inode
//! slot has a new generation number, so the kernel never mistakes it for
//! the old file.
//!
//! **Permissions** are the kernel's (`default_permissions` is always on):
//! it checks the modes and owners the image stores before it asks.

use crate::attr::{InoMap, file_attr, file_type_of_dtype, kernel_time};
use crate::handles::{Handle, Handles};
use crate::options::MountConfig;
use fuser::{
    CopyFileRangeFlags, Errno as FuseErrno, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};
use ulfs::fs::{SetTime, SharedVolume, Volume};
use ulfs::{Errno, Ino, Result};

/// How long the kernel may trust an answer. One mount is the only writer
/// of its image (the image lock refuses a second), and every change passes
/// through the kernel, which updates or drops what it cached; so the only
/// thing a long timeout can leave stale is atime after a read, which the
/// kernel itself marks stale.
const TTL: Duration = Duration::from_secs(1);

/// The largest write the kernel is asked to send in one request.
const MAX_WRITE: u32 = 1 << 20;

/// The most one copy_file_range request copies.
const COPY_MAX: u64 = 16 << 20;

/// What an open of `ino` answers. The kernel's cached pages of the file
/// are kept from one open to the next (FOPEN_KEEP_CACHE; without it every
/// open drops them, and a file read again is read from the server again)
/// when that loses nothing: this mount is its image's only writer and
/// every change to a file's bytes passes through the kernel, which updates
/// or drops its pages (writes, truncates, fallocate, and copy_file_range,
/// whose target range it drops); but a read the cache answers never
/// reaches the server, so atime could not move. Under relatime a read
/// moves atime only when it is due (the first read after a change, or a
/// day after the last update): then the pages are dropped, the first read
/// comes here and records it, and the next open keeps them again.
fn open_flags(vol: &Volume, ino: Ino) -> FopenFlags {
    if vol.atime_due(ino) == Ok(false) {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    }
}

thread_local! {
    /// Each request loop's buffer for reads (up to the kernel's largest
    /// read request): allocated and zeroed once, not per request.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub struct UlfsFuse {
    core: SharedVolume,
    handles: RwLock<Handles>,
    map: InoMap,
    cfg: MountConfig,
}

/// Commits the volume from outside the request loops: on a timer, so that
/// an idle mount's changes are as durable as the commit interval says
/// (fuser has no SYNCFS request: sync(2) does not reach the server), and
/// before a signal's unmount. `commit_if_due` is false once the volume is
/// unmounted.
pub type Committer = SharedVolume;

// A panic while serving a request leaves the handles as the call left
// them; go on past the poison, as `SharedVolume` does for the volume.
fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

impl UlfsFuse {
    pub fn new(mut vol: Volume, cfg: MountConfig) -> UlfsFuse {
        let map = InoMap { root: vol.root() };
        vol.set_no_atime(cfg.no_atime());
        UlfsFuse {
            core: SharedVolume::new(vol),
            handles: RwLock::new(Handles::default()),
            map,
            cfg,
        }
    }

    pub fn committer(&self) -> Committer {
        self.core.clone()
    }

    /// `-o sync` (every change) and `-o dirsync` (changes of names): the
    /// change is durable before the request is answered. The kernel passes
    /// these flags on to no FUSE file system, so the server keeps them.
    fn settle(&self, vol: &mut Volume, names: bool) -> Result<()> {
        if self.cfg.sync_writes() || (names && self.cfg.sync_dirs()) {
            vol.sync()?;
        }
        Ok(())
    }

    /// Runs `f` with the volume to itself, or EIO once it is unmounted.
    fn with<T>(&self, f: impl FnOnce(&mut Volume) -> Result<T>) -> Result<T> {
        self.core.exclusive(f)
    }

    /// Runs `f` on the volume shared with other readers, or EIO once it
    /// is unmounted.
    fn with_shared<T>(&self, f: impl FnOnce(&Volume) -> Result<T>) -> Result<T> {
        self.core.shared(f)
    }

    fn handle(&self, fh: FileHandle) -> Result<Handle> {
        read(&self.handles).get(fh)
    }

    /// A handle holding an open reference on `ino`.
    fn open_handle(&self, vol: &mut Volume, ino: Ino) -> FileHandle {
        let open = vol.open_ref(ino);
        write(&self.handles).insert(Handle { ino, open })
    }

    fn close_handle(&self, fh: FileHandle) -> Result<()> {
        self.core.exclusive(|vol| {
            let h = write(&self.handles).remove(fh)?;
            vol.close_ref(h.ino)
        })
    }

    /// The entry of `ino` for the kernel, which holds one more lookup of
    /// it from now on (counted before the reply leaves, so the volume's
    /// count is never below the kernel's).
    fn entry_of(&self, vol: &Volume, ino: Ino) -> Result<(fuser::FileAttr, Generation)> {
        let entry = entry_attr(vol, ino, self.map, &self.cfg)?;
        vol.remember(ino);
        Ok(entry)
    }

    /// Answers with the entry of the inode `f` makes or links (with the
    /// volume to itself), or with its error.
    fn reply_entry(&self, reply: ReplyEntry, f: impl FnOnce(&mut Volume) -> Result<Ino>) {
        match self.with(|vol| {
            let ino = f(vol)?;
            self.entry_of(vol, ino)
        }) {
            Ok((attr, generation)) => reply.entry(&TTL, &attr, generation),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Creates `name` in `parent` as the request's user, and answers with
    /// its entry.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        target: &[u8],
        reply: ReplyEntry,
    ) {
        let parent = self.map.to_ulfs(parent);
        self.reply_entry(reply, |vol| {
            let ino = vol.create(parent, name.as_bytes(), mode, req.uid(), req.gid(), target)?;
            self.settle(vol, true)?;
            Ok(ino)
        })
    }

    /// A listing made with the volume shared: records the directory's
    /// atime first when the listing made it due.
    fn listed(&self, dir: Ino, r: Result<bool>) -> Result<()> {
        if r? {
            self.record_atime(dir);
        }
        Ok(())
    }

    /// Records an atime a shared read found due (see the module comment).
    /// A failure is the read's business no more: it has its bytes.
    fn record_atime(&self, ino: Ino) {
        let _ = self.with(|vol| vol.touch_atime(ino));
    }

    /// Releases every handle the kernel left open and unmounts the volume
    /// (committing its journal, marking the image clean); once.
    fn shut_down(&mut self) {
        let unmounted = self.core.unmount(|vol| {
            for h in write(&self.handles).drain() {
                let _ = vol.close_ref(h.ino);
            }
        });
        if let Some(Err(e)) = unmounted {
            eprintln!("ulfs mount: unmounting the image: {e}");
        }
    }
}

/// A session that never started (the mount failed) or ended without
/// `destroy` still leaves the image clean.
impl Drop for UlfsFuse {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Answers a request that returns nothing but success or an errno.
fn empty(reply: ReplyEmpty, r: Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

fn errno(e: Errno) -> FuseErrno {
    FuseErrno::from_i32(e.0)
}

fn entry_attr(
    vol: &Volume,
    ino: Ino,
    map: InoMap,
    cfg: &MountConfig,
) -> Result<(fuser::FileAttr, Generation)> {
    let stat = vol.stat_ino(ino)?;
    let generation = vol.generation(ino)?;
    Ok((file_attr(&stat, map, cfg), Generation(generation as u64)))
}

fn set_time(t: Option<TimeOrNow>) -> SetTime {
    match t {
        None => SetTime::Omit,
        Some(TimeOrNow::Now) => SetTime::Now,
        Some(TimeOrNow::SpecificTime(t)) => SetTime::At(kernel_time(t)),
    }
}

impl Filesystem for UlfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Best effort: an older kernel answers with what it can do.
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let mut want = InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
        if self.cfg.writeback_cache {
            want |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        let _ = config.add_capabilities(want);
        Ok(())
    }

    fn destroy(&mut self) {
        self.shut_down();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = self.map.to_ulfs(parent);
        // Shared: a lookup is a read (remember counts under its own lock).
        let r = self.with_shared(|vol| {
            let ino = vol.lookup(parent, name.as_bytes())?;
            self.entry_of(vol, ino)
        });
        match r {
            Ok((attr, generation)) => reply.entry(&TTL, &attr, generation),
            Err(e) => reply.error(errno(e)),
        }
    }

    // batch_forget: fuser's default calls this for each inode (its
    // ForgetOne type is not exported, so it cannot be overridden).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let ino = self.map.to_ulfs(ino);
        // No reply: a failure to free an orphan leaves it on the orphan
        // list, for the unmount or the next mount to free.
        let _ = self.with(|vol| vol.forget(ino, nlookup));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = self.map.to_ulfs(ino);
        // An open file's newest attributes are its open inode's, which
        // `stat_ino` answers with: the handle adds nothing.
        let _ = fh;
        let r = self.with_shared(|vol| vol.stat_ino(ino));
        match r {
            Ok(s) => reply.attr(&TTL, &file_attr(&s, self.map, &self.cfg)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = self.map.to_ulfs(ino);
        let r = self.with(|vol| {
            // The kernel sends what one call changed; POSIX orders a
            // truncate's size before the times it also sets.
            if let Some(size) = size {
                vol.truncate_ino(ino, size)?;
            }
            if uid.is_some() || gid.is_some() {
                vol.set_owner(ino, uid, gid)?;
            }
            // After the owner: a chown drops set-ID bits, and the kernel
            // sends the mode it wants kept with the same request.
            if let Some(mode) = mode {
                vol.set_mode(ino, mode)?;
            }
            if atime.is_some() || mtime.is_some() {
                vol.set_times(ino, set_time(atime), set_time(mtime))?;
            }
            self.settle(vol, true)?;
            vol.stat_ino(ino)
        });
        match r {
            Ok(s) => reply.attr(&TTL, &file_attr(&s, self.map, &self.cfg)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = self.map.to_ulfs(ino);
        // Reading a symlink is an access (Linux's readlink moves atime).
        match self.with_shared(|vol| Ok((vol.readlink_ino(ino)?, vol.atime_due(ino)?))) {
            Ok((target, atime_due)) => {
                if atime_due {
                    self.record_atime(ino);
                }
                reply.data(&target)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = mode & libc::S_IFMT;
        let perm = mode & 0o7777 & !umask;
        if kind == libc::S_IFREG || kind == 0 {
            return self.make(req, parent, name, libc::S_IFREG | perm, b"", reply);
        }
        // FIFOs, sockets and devices are names and metadata in the image;
        // the kernel itself serves what opening one means.
        let parent = self.map.to_ulfs(parent);
        self.reply_entry(reply, |vol| {
            let (uid, gid) = (req.uid(), req.gid());
            let ino = vol.mknod(parent, name.as_bytes(), kind | perm, rdev as u64, uid, gid)?;
            self.settle(vol, true)?;
            Ok(ino)
        })
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mode = libc::S_IFDIR | (mode & 0o7777 & !umask);
        self.make(req, parent, name, mode, b"", reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = self.map.to_ulfs(parent);
        empty(
            reply,
            self.with(|vol| {
                vol.unlink(parent, name.as_bytes())?;
                self.settle(vol, true)
            }),
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = self.map.to_ulfs(parent);
        empty(
            reply,
            self.with(|vol| {
                vol.rmdir(parent, name.as_bytes())?;
                self.settle(vol, true)
            }),
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        self.make(req, parent, link_name, libc::S_IFLNK | 0o777, target, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (from, to) = (self.map.to_ulfs(parent), self.map.to_ulfs(newparent));
        let r = self.with(|vol| {
            vol.rename(from, name.as_bytes(), to, newname.as_bytes(), flags.bits())?;
            self.settle(vol, true)
        });
        empty(reply, r)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (ino, dir) = (self.map.to_ulfs(ino), self.map.to_ulfs(newparent));
        self.reply_entry(reply, |vol| {
            vol.link(ino, dir, newname.as_bytes())?;
            self.settle(vol, true)?;
            Ok(ino)
        })
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // O_TRUNC never comes here: without FUSE_ATOMIC_O_TRUNC (not
        // asked for) the kernel truncates with a setattr first.
        let ino = self.map.to_ulfs(ino);
        let r = self.with(|vol| {
            if vol.stat_ino(ino)?.is_dir() {
                return Err(Errno::EISDIR);
            }
            Ok((self.open_handle(vol, ino), open_flags(vol, ino)))
        });
        match r {
            Ok((fh, flags)) => reply.opened(fh, flags),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        READ_BUF.with_borrow_mut(|buf| {
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            let buf = &mut buf[..size];
            let r = self.with_shared(|vol| {
                let h = self.handle(fh)?;
                let (n, atime_due) = vol.read_shared(h.ino, buf, offset)?;
                Ok((h.ino, n, atime_due))
            });
            match r {
                Ok((ino, n, atime_due)) => {
                    // Before the reply: a stat after this read sees its atime.
                    if atime_due {
                        self.record_atime(ino);
                    }
                    reply.data(&buf[..n])
                }
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.with(|vol| {
            let open = self.handle(fh)?.open;
            let n = vol.write_open(open, data, offset)?;
            self.settle(vol, false)?;
            Ok(n)
        });
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) promises nothing durable; the journal's commit interval
        // bounds what a crash can lose, and fsync makes it durable. So
        // there is nothing to do, and ENOSYS tells the kernel never to
        // send FLUSH again (it still writes back what it cached first):
        // one round trip less on every close.
        reply.error(FuseErrno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.close_handle(fh))
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.with(|vol| vol.sync()))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = self.map.to_ulfs(ino);
        let r = self.with(|vol| {
            if !vol.stat_ino(ino)?.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            Ok(self.open_handle(vol, ino))
        });
        match r {
            // No FOPEN_CACHE_DIR: every listing comes here (and moves atime).
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dir = self.map.to_ulfs(ino);
        let r = self.with_shared(|vol| {
            list_dir(vol, dir, offset, |ino, next, dtype, name| {
                let name = OsStr::from_bytes(name);
                reply.add(self.map.to_fuse(ino), next, file_type_of_dtype(dtype), name)
            })
        });
        match self.listed(dir, r) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = self.map.to_ulfs(ino);
        let r = self.with_shared(|vol| {
            let mut entries = Vec::new();
            let atime_due = list_dir(vol, dir, offset, |ino, next, _, name| {
                entries.push((ino, next, name.to_vec()));
                // Attributes are looked up below, outside the listing;
                // the kernel's buffer decides how many fit.
                entries.len() >= 4096
            })?;
            let mut sent = Vec::with_capacity(entries.len());
            for (ino, next, name) in entries {
                let (attr, generation) = entry_attr(vol, ino, self.map, &self.cfg)?;
                if reply.add(
                    self.map.to_fuse(ino),
                    next,
                    OsStr::from_bytes(&name),
                    &TTL,
                    &attr,
                    generation,
                ) {
                    break;
                }
                // The kernel takes a lookup of every entry it is sent but
                // "." and "..".
                if name != b"." && name != b".." {
                    sent.push(ino);
                }
            }
            for ino in sent {
                vol.remember(ino);
            }
            Ok(atime_due)
        });
        match self.listed(dir, r) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.close_handle(fh))
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.with(|vol| vol.sync()))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with_shared(|vol| Ok(vol.statfs())) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.bfree,
                s.bavail,
                s.files,
                s.ffree,
                s.bsize as u32,
                s.namelen as u32,
                s.frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = self.map.to_ulfs(parent);
        let kind = mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != 0 {
            return reply.error(FuseErrno::EPERM);
        }
        let mode = libc::S_IFREG | (mode & 0o7777 & !umask);
        let r = self.with(|vol| {
            let ino = vol.create(parent, name.as_bytes(), mode, req.uid(), req.gid(), b"")?;
            self.settle(vol, true)?;
            let (attr, generation) = self.entry_of(vol, ino)?;
            let flags = open_flags(vol, ino);
            Ok((attr, generation, self.open_handle(vol, ino), flags))
        });
        match r {
            Ok((attr, generation, fh, flags)) => reply.created(&TTL, &attr, generation, fh, flags),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let ino = self.map.to_ulfs(ino);
        empty(
            reply,
            self.with(|vol| {
                vol.fallocate_ino(ino, mode, offset, length)?;
                self.settle(vol, false)
            }),
        )
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel asks only for SEEK_DATA and SEEK_HOLE. With the
        // writeback cache the newest size and bytes may still be the
        // kernel's, not the image's: ENOSYS makes the kernel answer
        // itself (all data up to its size), which is never wrong.
        if self.cfg.writeback_cache {
            return reply.error(FuseErrno::ENOSYS);
        }
        let ino = self.map.to_ulfs(ino);
        let r = self.with_shared(|vol| {
            if offset < 0 {
                return Err(Errno::ENXIO);
            }
            match whence {
                libc::SEEK_DATA | libc::SEEK_HOLE => {
                    vol.seek_data_hole(ino, offset as u64, whence == libc::SEEK_DATA)
                }
                _ => Err(Errno::EINVAL),
            }
        });
        match r {
            Ok(off) => reply.offset(off as i64),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // Copied inside the volume, a piece at a time, with no trip of the
        // bytes through the kernel; the kernel caps `len` to what fits the
        // reply (an u32).
        let r = self.with(|vol| {
            let (src, dst) = (self.handle(fh_in)?.open, self.handle(fh_out)?.open);
            // At most COPY_MAX a request, so that other requests wait no
            // longer than that copy; a short count makes the caller go on.
            let len = len.min(COPY_MAX);
            let mut buf = vec![0u8; (len.min(MAX_WRITE as u64)) as usize];
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(buf.len() as u64) as usize;
                let n = vol.read_open(src, &mut buf[..want], offset_in + done)?;
                if n == 0 {
                    break;
                }
                let w = vol.write_open(dst, &buf[..n], offset_out + done)?;
                done += w as u64;
                if w < n {
                    break;
                }
            }
            self.settle(vol, false)?;
            Ok(done)
        });
        match r {
            Ok(n) => reply.written(n.min(u32::MAX as u64) as u32),
            Err(e) => reply.error(errno(e)),
        }
    }
}

/// Lists `dir` from the FUSE offset `offset` as `getdents64` does: `.` at
/// offset 0, `..` at 1, then entries in hash order, each with the offset
/// of the next (its key + 1). `add` returns true when the reply is full.
/// Returns whether the listing made the directory's atime due.
fn list_dir(
    vol: &Volume,
    dir: Ino,
    offset: u64,
    mut add: impl FnMut(Ino, u64, u8, &[u8]) -> bool,
) -> Result<bool> {
    let d = vol.stat_ino(dir)?;
    if !d.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    if d.nlink == 0 {
        return Ok(false);
    }
    let mut cookie = offset;
    if cookie == 0 {
        if add(dir, 1, libc::DT_DIR, b".") {
            return vol.atime_due(dir);
        }
        cookie = 1;
    }
    if cookie == 1 {
        let parent = vol.parent_of(dir)?;
        if add(parent, 2, libc::DT_DIR, b"..") {
            return vol.atime_due(dir);
        }
        cookie = 2;
    }
    vol.read_dir(dir, cookie, |item| {
        !add(item.ino, item.key + 1, item.dtype, item.name)
    })?;
    vol.atime_due(dir)
}

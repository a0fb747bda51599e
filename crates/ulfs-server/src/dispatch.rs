//! One request to one answer: decodes a `Req` (already copied out of the
//! client's ring), runs the call for the client's process on the shared
//! volume, and encodes the `Cqe`. Every call is the engine's own
//! (`posix::Ctx`, or `posix::SharedCtx` for the reads and stats that may
//! run beside other clients'), so a client is answered exactly as the
//! in-process library answers, errno order included.
//!
//! What runs under which lock (docs/SERVE.md says why):
//! - the process's own state only (umask, dup, F_GETFL/F_SETFL, lseek
//!   SEEK_SET/SEEK_CUR, NOP): the volume's exclusive lock all the same in
//!   this first version, held for nanoseconds, because the `Ctx` calls are
//!   written over a `&mut Volume`;
//! - READ, PREAD, FSTAT, FSTATAT, STATX: the shared lock, side by side with
//!   other clients' reads; an access time they find due is recorded after,
//!   under the exclusive lock (a READ or PREAD of a file with a shared
//!   mapping takes the exclusive lock, to see the mapping's bytes);
//! - everything else: the exclusive lock.
//!
//! Shared mappings (`maps.rs`) and locks (`locks.rs`) hook in here: a call
//! that reads, writes or resizes a mapped file keeps the mapping coherent
//! with it, and CLOSE and DUP2 release the locks the closed descriptor
//! ends. The volume is always taken before either table's own mutex.
//!
//! Nothing here trusts the request: spans are checked by the channel
//! (`copy_in`, `copy_out`, `raw_path`: EFAULT outside the data area),
//! lengths are bounded by the worker's buffer (the data area's size),
//! unknown codes are ENOSYS, and the engine checks every path, descriptor
//! and flag as it does for the library, in the same order (paths are
//! handed over as bytes, not judged here: a rename whose first path fails
//! its walk answers that error even when its second path is empty, as
//! Linux does; the model test runs through the server to hold that).

use crate::Limits;
use crate::clients::Client;
use crate::locks::{self, Locks};
use crate::maps::{self, MapReq, Maps};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use ulfs::fs::SharedVolume;
use ulfs::posix::{Ctx, Deferred, Process, SharedCtx};
use ulfs::{Errno, Fd, Result, Stat};
use ulfs_wire::channel::PathBuf;
use ulfs_wire::layout::{CQE_OFFSET_YOURS, CQE_TRUNCATED, CQE_WOULD_BLOCK};
use ulfs_wire::stat::decode_times;
use ulfs_wire::{Cqe, Op, Req, ServerChannel, Span, WireStat, WireStatFs};

/// A worker's private buffers: requests' data is copied through them, so
/// the engine never sees memory a client can write.
pub(crate) struct Scratch {
    pub data: Vec<u8>,
    pub path1: Box<PathBuf>,
    pub path2: Box<PathBuf>,
    pub later: Deferred,
}

impl Scratch {
    pub fn new(data_len: usize) -> Scratch {
        Scratch {
            data: vec![0; data_len],
            path1: Box::new([0; ulfs::format::PATH_MAX]),
            path2: Box::new([0; ulfs::format::PATH_MAX]),
            later: Deferred::default(),
        }
    }
}

/// What a request needs: the volume, the client's process and channel, the
/// worker's buffers, the server's locks and mappings, and who the client
/// is.
pub(crate) struct Call<'a> {
    pub vol: &'a SharedVolume,
    pub proc: &'a mut Process,
    pub chan: &'a mut ServerChannel,
    pub scratch: &'a mut Scratch,
    pub limits: &'a Limits,
    pub locks: &'a Locks,
    pub maps: &'a Maps,
    pub client: &'a Client,
    /// `State::lock_owner`, for the call's duration.
    pub lock_owner: u64,
    /// `State::exec_token`.
    pub exec_token: &'a mut Option<crate::adopt::ExecToken>,
    /// The server, for what outlives a call (processes set aside).
    pub shared: &'a crate::Shared,
}

/// `fd`'s stat if its file has a shared mapping (the state a call that
/// changes the file compares with afterwards); `None` otherwise, at the
/// cost of one atomic load while nothing is mapped.
fn mapped(maps: &Maps, c: &mut Ctx<'_>, fd: Fd) -> Option<Stat> {
    if !maps.active() {
        return None;
    }
    c.fstat(fd).ok().filter(|st| maps.has(st.ino))
}

/// Whether the client may keep the offset of the description just opened
/// as `fd` itself (`CQE_OFFSET_YOURS`): a regular file, opened neither
/// `O_PATH` (whose lseek is EBADF) nor `O_APPEND` (whose writes move the
/// offset to an end only the server knows).
fn offset_yours(c: &mut Ctx<'_>, fd: Fd) -> bool {
    let flags = c.fcntl_getfl(fd).unwrap_or(libc::O_PATH);
    flags & (libc::O_PATH | libc::O_APPEND) == 0 && c.fstat(fd).is_ok_and(|st| st.is_file())
}

impl Call<'_> {
    /// Runs `req` and answers it.
    pub fn answer(&mut self, req: &Req) -> Cqe {
        let Some(op) = Op::from_u16(req.op) else {
            return Cqe::err(req.tag, Errno::ENOSYS);
        };
        let mut cqe = Cqe::ok(req.tag, 0);
        match self.run(op, req, &mut cqe) {
            Ok(v) => cqe.res = v,
            // A lock in the way: -EAGAIN, and the holder in `aux`.
            Err(e) if cqe.flags & CQE_WOULD_BLOCK != 0 => cqe.res = -(e.0 as i64),
            Err(e) => cqe = Cqe::err(req.tag, e),
        }
        cqe
    }

    fn exclusive<T>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> Result<T>) -> Result<T> {
        let proc = &mut *self.proc;
        self.vol.exclusive(|vol| f(&mut Ctx { vol, proc }))
    }

    /// A call under the shared lock, then the access times it deferred.
    fn shared<T>(
        &mut self,
        f: impl FnOnce(&mut SharedCtx<'_>, &mut [u8], &mut Deferred) -> Result<T>,
    ) -> Result<T> {
        let (proc, scratch) = (&mut *self.proc, &mut *self.scratch);
        let r = self.vol.shared(|vol| {
            f(
                &mut SharedCtx { vol, proc },
                &mut scratch.data,
                &mut scratch.later,
            )
        });
        self.apply_later();
        r
    }

    /// The request's input bytes (`p1`), copied into the worker's buffer.
    fn input(&mut self, span: Span) -> Result<usize> {
        let n = span.len as usize;
        if n > self.scratch.data.len() {
            return Err(Errno::EFAULT);
        }
        self.chan.copy_in(span, &mut self.scratch.data[..n])?;
        Ok(n)
    }

    /// The length of an output buffer `span` (READ, PREAD, GETDENTS64),
    /// checked before the call runs: a span outside the data area is
    /// EFAULT with nothing done, as Linux checks a buffer before it reads
    /// (a read that consumed file data, or moved a directory's position,
    /// and then could not hand it over would lose it).
    fn out_len(&self, span: Span) -> Result<usize> {
        let n = span.len as usize;
        if !span.fits(self.chan.geometry().data_len) || n > self.scratch.data.len() {
            return Err(Errno::EFAULT);
        }
        Ok(n)
    }

    fn out_stat(&mut self, span: Span, st: WireStat) -> Result<i64> {
        self.chan.copy_out(span, st.as_bytes())?;
        Ok(0)
    }

    /// A variable-length answer into `span`: cut to fit, with the full
    /// length in `aux[0]`.
    fn out_bytes(&mut self, span: Span, bytes: &[u8], cqe: &mut Cqe) -> Result<i64> {
        // The whole span must lie in the data area (op.rs), not only the
        // part this answer fills.
        if !span.fits(self.chan.geometry().data_len) {
            return Err(Errno::EFAULT);
        }
        let n = bytes.len().min(span.len as usize);
        self.chan
            .copy_out(Span::new(span.off, n as u32), &bytes[..n])?;
        if n < bytes.len() {
            cqe.flags |= CQE_TRUNCATED;
            cqe.aux[0] = bytes.len() as u64;
        }
        Ok(n as i64)
    }

    fn run(&mut self, op: Op, r: &Req, cqe: &mut Cqe) -> Result<i64> {
        let (a0, a1, a2) = (r.a[0], r.a[1], r.a[2]);
        match op {
            Op::Nop => Ok(0),
            Op::Umask => Ok(self.exclusive(|c| Ok(c.umask(a0 as u32)))? as i64),
            Op::SetMaxFds => {
                // As setrlimit above the hard limit: EPERM.
                if a0 > self.limits.max_fds as u64 {
                    return Err(Errno::EPERM);
                }
                self.exclusive(|c| c.set_max_fds(a0 as usize))?;
                Ok(0)
            }
            Op::Getcwd => {
                let cwd = self.exclusive(|c| c.getcwd())?;
                self.out_bytes(r.p2, &cwd, cqe)
            }
            Op::Chdir => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| Ctx { vol, proc }.chdir(&*path))?;
                Ok(0)
            }
            Op::Fchdir => self.exclusive(|c| c.fchdir(r.fd)).map(|()| 0),
            Op::Sync => self.exclusive(|c| c.sync()).map(|()| 0),
            Op::Openat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let (proc, maps) = (&mut *self.proc, self.maps);
                let (new, yours) = self.vol.exclusive(|vol| {
                    let mut c = Ctx { vol, proc };
                    let new = c.openat(r.fd, &*path, a0 as i32, a1 as u32)?;
                    // O_TRUNC emptied a file that may be mapped.
                    if a0 as i32 & libc::O_TRUNC != 0
                        && let Some(st) = mapped(maps, &mut c, new)
                    {
                        let _ = maps.zeroed(st.ino, st.size, u64::MAX);
                    }
                    Ok((new, offset_yours(&mut c, new)))
                })?;
                if yours {
                    cqe.flags |= CQE_OFFSET_YOURS;
                }
                Ok(new as i64)
            }
            Op::Close => {
                let closed = self.exclusive(|c| c.close_noting(r.fd))?;
                // A descriptor the client says it kept for itself leaves
                // the process's POSIX locks only while the process still
                // has the file open: a lock never outlives its last
                // descriptor, whatever a client claims (it would stay on
                // the inode number, for the next file to get it).
                if a0 & 1 == 0 || !self.proc.holds_ino(closed.ino) {
                    self.locks.closed(self.lock_owner, &closed);
                } else {
                    self.locks.kept_closed(&closed);
                }
                closed.released.map(|()| 0)
            }
            Op::Dup => Ok(self.exclusive(|c| c.dup(r.fd))? as i64),
            Op::Dup2 => {
                let (new, closed) = self.exclusive(|c| c.dup2_noting(r.fd, r.fd2))?;
                if let Some(closed) = closed {
                    self.locks.closed(self.lock_owner, &closed);
                    closed.released?;
                }
                Ok(new as i64)
            }
            Op::FcntlGetfl => Ok(self.exclusive(|c| c.fcntl_getfl(r.fd))? as i64),
            Op::FcntlSetfl => self
                .exclusive(|c| c.fcntl_setfl(r.fd, a0 as i32))
                .map(|()| 0),
            Op::FileDescription => {
                let d = self.exclusive(|c| c.file_description(r.fd))?;
                cqe.aux = [d.id, d.ino];
                Ok(d.refs as i64)
            }
            Op::Read | Op::Pread => {
                let len = self.out_len(r.p1)?;
                let maps = self.maps;
                // `None`: the file has a shared mapping (no mapping can be
                // made while the shared lock is held, so the answer holds
                // for the read).
                let n = self.shared(|c, buf, later| {
                    if maps.active() && c.fstat(r.fd).is_ok_and(|st| maps.has(st.ino)) {
                        return Ok(None);
                    }
                    if op == Op::Read {
                        c.read(r.fd, &mut buf[..len], later).map(Some)
                    } else {
                        c.pread(r.fd, &mut buf[..len], a0, later).map(Some)
                    }
                })?;
                let n = match n {
                    Some(n) => n,
                    None => self.read_mapped(op, r, len)?,
                };
                self.chan.copy_out(r.p1, &self.scratch.data[..n])?;
                Ok(n as i64)
            }
            Op::Write | Op::Pwrite => {
                let n = self.input(r.p1)?;
                let (proc, data, maps) = (&mut *self.proc, &self.scratch.data[..n], self.maps);
                let w = self.vol.exclusive(|vol| {
                    let mut c = Ctx { vol, proc };
                    let before = mapped(maps, &mut c, r.fd);
                    let w = if op == Op::Write {
                        c.write(r.fd, data)?
                    } else {
                        c.pwrite(r.fd, data, a0)?
                    };
                    if let Some(st) = before
                        && w > 0
                    {
                        // The write is done: a failure to copy it into
                        // the mapping cannot undo it (and is as unlikely
                        // as a failed write to memory).
                        let _ = wrote_mapped(maps, &mut c, op, r, &data[..w], &st);
                    }
                    Ok(w)
                })?;
                Ok(w as i64)
            }
            Op::Lseek => Ok(self.exclusive(|c| c.lseek(r.fd, a0 as i64, a1 as i32))? as i64),
            Op::Ftruncate => {
                let maps = self.maps;
                self.exclusive(|c| {
                    let before = mapped(maps, c, r.fd);
                    c.ftruncate(r.fd, a0)?;
                    if let Some(st) = before {
                        let _ = maps.zeroed(st.ino, st.size.min(a0), u64::MAX);
                    }
                    Ok(0)
                })
            }
            Op::Fallocate => {
                let maps = self.maps;
                self.exclusive(|c| {
                    let before = mapped(maps, c, r.fd);
                    c.fallocate(r.fd, a0 as i32, a1, a2)?;
                    if let Some(st) = before {
                        if a0 as i32 & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                            let _ = maps.zeroed(st.ino, a1, a1.saturating_add(a2));
                        }
                        if let Ok(now) = c.fstat(r.fd)
                            && now.size > st.size
                        {
                            let _ = maps.zeroed(st.ino, st.size, u64::MAX);
                        }
                    }
                    Ok(0)
                })
            }
            Op::Fsync => self.exclusive(|c| c.fsync(r.fd)).map(|()| 0),
            Op::Fdatasync => self.exclusive(|c| c.fdatasync(r.fd)).map(|()| 0),
            Op::Getdents64 => {
                let len = self.out_len(r.p1)?;
                let (proc, buf) = (&mut *self.proc, &mut self.scratch.data[..len]);
                let n = self
                    .vol
                    .exclusive(|vol| Ctx { vol, proc }.getdents64(r.fd, buf))?;
                self.chan.copy_out(r.p1, &self.scratch.data[..n])?;
                Ok(n as i64)
            }
            Op::Fstat => {
                let st = self.shared(|c, _, _| c.fstat(r.fd))?;
                self.out_stat(r.p2, WireStat::from_stat(&st))
            }
            Op::Fstatat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let (proc, later) = (&mut *self.proc, &mut self.scratch.later);
                let st = self
                    .vol
                    .shared(|vol| SharedCtx { vol, proc }.fstatat(r.fd, &*path, a0 as i32, later));
                self.apply_later();
                self.out_stat(r.p2, WireStat::from_stat(&st?))
            }
            Op::Statx => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let (proc, later) = (&mut *self.proc, &mut self.scratch.later);
                let x = self.vol.shared(|vol| {
                    SharedCtx { vol, proc }.statx(r.fd, &*path, a0 as i32, a1 as u32, later)
                });
                self.apply_later();
                self.out_stat(r.p2, WireStat::from_statx(&x?))
            }
            Op::Statfs => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                let s = self.vol.exclusive(|vol| Ctx { vol, proc }.statfs(&*path))?;
                self.chan.copy_out(r.p2, WireStatFs::new(&s).as_bytes())?;
                Ok(0)
            }
            Op::Fstatfs => {
                let s = self.exclusive(|c| c.fstatfs(r.fd))?;
                self.chan.copy_out(r.p2, WireStatFs::new(&s).as_bytes())?;
                Ok(0)
            }
            Op::Faccessat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.faccessat(r.fd, &*path, a0 as i32, a1 as i32)
                })?;
                Ok(0)
            }
            Op::Readlinkat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                let target = self
                    .vol
                    .exclusive(|vol| Ctx { vol, proc }.readlinkat(r.fd, &*path))?;
                self.out_bytes(r.p2, &target, cqe)
            }
            Op::Mkdirat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.mkdirat(r.fd, &*path, a0 as u32))?;
                Ok(0)
            }
            Op::Mknodat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.mknodat(r.fd, &*path, a0 as u32, a1))?;
                Ok(0)
            }
            Op::Unlinkat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.unlinkat(r.fd, &*path, a0 as i32))?;
                Ok(0)
            }
            Op::Renameat2 => {
                let old = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let new = self.chan.raw_path(r.p2, &mut self.scratch.path2)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.renameat2(r.fd, &*old, r.fd2, &*new, a0 as u32)
                })?;
                Ok(0)
            }
            Op::Linkat => {
                let old = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let new = self.chan.raw_path(r.p2, &mut self.scratch.path2)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.linkat(r.fd, &*old, r.fd2, &*new, a0 as i32)
                })?;
                Ok(0)
            }
            Op::Symlinkat => {
                let target = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let link = self.chan.raw_path(r.p2, &mut self.scratch.path2)?;
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.symlinkat(&*target, r.fd, &*link))?;
                Ok(0)
            }
            Op::Truncate => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let (proc, maps) = (&mut *self.proc, self.maps);
                self.vol.exclusive(|vol| {
                    let mut c = Ctx { vol, proc };
                    let before = if maps.active() {
                        c.stat(&*path).ok().filter(|st| maps.has(st.ino))
                    } else {
                        None
                    };
                    c.truncate(&*path, a0)?;
                    if let Some(st) = before {
                        let _ = maps.zeroed(st.ino, st.size.min(a0), u64::MAX);
                    }
                    Ok(())
                })?;
                Ok(0)
            }
            Op::Utimensat | Op::Futimens => {
                let mut raw = [0u8; ulfs_wire::stat::TIMES_LEN];
                let times = if r.p2.len == 0 {
                    None
                } else {
                    if r.p2.len as usize != raw.len() {
                        return Err(Errno::EINVAL);
                    }
                    self.chan.copy_in(r.p2, &mut raw)?;
                    decode_times(&raw)?
                };
                if op == Op::Futimens {
                    return self.exclusive(|c| c.futimens(r.fd, times)).map(|()| 0);
                }
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.utimensat(r.fd, &*path, times, a0 as i32))?;
                Ok(0)
            }
            Op::Fchmodat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.fchmodat(r.fd, &*path, a0 as u32, a1 as i32)
                })?;
                Ok(0)
            }
            Op::Fchmod => self.exclusive(|c| c.fchmod(r.fd, a0 as u32)).map(|()| 0),
            Op::Fchownat => {
                let path = self.chan.raw_path(r.p1, &mut self.scratch.path1)?;
                let proc = &mut *self.proc;
                self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.fchownat(r.fd, &*path, a0 as u32, a1 as u32, a2 as i32)
                })?;
                Ok(0)
            }
            Op::Fchown => self
                .exclusive(|c| c.fchown(r.fd, a0 as u32, a1 as u32))
                .map(|()| 0),
            Op::Dupfd => Ok(self.exclusive(|c| c.dupfd(r.fd, a0 as i32))? as i64),
            Op::Lock => self.lock(r, cqe),
            Op::MapShared => self.map_shared(r),
            Op::Direct => self.direct(r, cqe),
            Op::Lease => self.lease(r),
            Op::Msync => self.msync(r),
            Op::Unmap => {
                let (maps, client) = (self.maps, self.client.id);
                self.vol.exclusive(|vol| maps.unmap(vol, client, a0))?;
                Ok(0)
            }
            Op::PrepareFork => self.prepare_fork(a0 & 1 != 0, cqe),
            Op::PrepareExec => self.prepare_exec(a0 & 1 != 0, cqe),
            Op::CancelToken => {
                let t = ulfs_wire::op::token_from_words([a0, a1]);
                let s = self.shared;
                if let Some(p) = s.tokens.cancel(&t, self.client.id)? {
                    crate::adopt::retire(s, p);
                }
                if self.exec_token.is_some_and(|(e, _)| e == t) {
                    *self.exec_token = None;
                }
                Ok(0)
            }
            Op::Reopen => {
                let maps = self.maps;
                let (new, yours) = self.exclusive(|c| {
                    let new = c.reopen(r.fd, a0 as i32)?;
                    // O_TRUNC emptied a file that may be mapped, as OPENAT.
                    if a0 as i32 & libc::O_TRUNC != 0
                        && let Some(st) = mapped(maps, c, new)
                    {
                        let _ = maps.zeroed(st.ino, st.size, u64::MAX);
                    }
                    Ok((new, offset_yours(c, new)))
                })?;
                if yours {
                    cqe.flags |= CQE_OFFSET_YOURS;
                }
                Ok(new as i64)
            }
            // Not served yet: server-side copies, and a working directory
            // by inode (the client's is kept here across fork and exec).
            Op::ChdirIno | Op::CopyRange => Err(Errno::ENOSYS),
        }
    }

    /// The client's pid, which a token is made for; EACCES for a process
    /// the server cannot see (another pid namespace): nobody could prove
    /// to be its child or successor.
    fn pid(&self) -> Result<u32> {
        match u32::try_from(self.client.pid) {
            Ok(0) | Err(_) => Err(Errno::EACCES),
            Ok(pid) => Ok(pid),
        }
    }

    /// PREPARE_FORK: a copy of the process set aside under a token
    /// (`adopt.rs`), in `aux`. The child gets a lock owner of its own
    /// (POSIX locks are not inherited); with `memory` (a fork, not a
    /// spawn) it also holds the parent's shared mappings, which its memory
    /// has.
    fn prepare_fork(&mut self, memory: bool, cqe: &mut Cqe) -> Result<i64> {
        let s = self.shared;
        let pid = self.pid()?;
        let identity = self.proc.identity().clone();
        let child = self.exclusive(|c| Ok(c.fork(identity)))?;
        let owner = s.tokens.new_owner();
        let holder = if memory { owner } else { 0 };
        s.tokens.hold_owner(owner);
        if memory {
            s.maps.inherit(self.client.id, holder);
        }
        let pending = crate::adopt::Pending {
            proc: child,
            kind: ulfs_wire::AdoptKind::Fork,
            pid,
            uid: self.client.creds.uid(),
            client: self.client.id,
            lock_owner: owner,
            holder,
            made: std::time::Instant::now(),
        };
        match s.tokens.put(pending) {
            Ok(t) => {
                cqe.aux = ulfs_wire::op::token_words(&t);
                Ok(0)
            }
            Err((e, p)) => {
                crate::adopt::retire(s, *p);
                Err(e)
            }
        }
    }

    /// PREPARE_EXEC: a token reserved for the program the exec starts; the
    /// process itself goes on as it is until its connection ends
    /// (`adopt.rs`). `memory`: the process keeps its memory (a new
    /// connection after a change of ids), so its shared mappings go along.
    fn prepare_exec(&mut self, memory: bool, cqe: &mut Cqe) -> Result<i64> {
        let s = self.shared;
        let pid = self.pid()?;
        if let Some((old, _)) = self.exec_token.take() {
            s.tokens.unreserve(&old);
        }
        let t = s.tokens.reserve(self.client.id, pid)?;
        *self.exec_token = Some((t, memory));
        cqe.aux = ulfs_wire::op::token_words(&t);
        Ok(0)
    }

    /// DIRECT (op.rs): the board in an OBJECT message, then the image's
    /// path into `p1` and its identity in `aux`.
    fn direct(&mut self, r: &Req, cqe: &mut Cqe) -> Result<i64> {
        let offer = self.shared.direct.as_ref().ok_or(crate::direct::NO_OFFER)?;
        // The image's mode now, not at start: a chmod since counts.
        let owner = self
            .vol
            .shared(|v| Ok(v.image_fd().and_then(|fd| rustix::fs::fstat(fd).ok())))?
            .ok_or(crate::direct::NO_OFFER)?;
        if !crate::direct::may_read(&owner, &self.client.creds) {
            return Err(Errno::EACCES);
        }
        if self.client.direct_given.load(Ordering::Relaxed) {
            return Err(Errno(libc::EALREADY));
        }
        if !r.p1.fits(self.chan.geometry().data_len) {
            return Err(Errno::EFAULT);
        }
        if offer.path.len() > r.p1.len as usize {
            return Err(Errno::ENAMETOOLONG);
        }
        let board = self.shared.with_fd_room(|| offer.board_fd())?;
        self.client.direct_given.store(true, Ordering::Relaxed);
        ulfs_wire::control::send_object(self.client.sock.as_fd(), r.tag, 0, false, board.as_fd())?;
        self.chan
            .copy_out(Span::new(r.p1.off, offer.path.len() as u32), &offer.path)?;
        cqe.aux = [offer.dev, offer.ino];
        Ok(offer.path.len() as i64)
    }

    /// LEASE (op.rs), under the shared lock: none for a file with shared
    /// mappings (its bytes are the object's, not the image's).
    fn lease(&mut self, r: &Req) -> Result<i64> {
        // Block numbers are for a client that may read the image (DIRECT
        // said so) and has the board that guards them.
        if !self.client.direct_given.load(Ordering::Relaxed) {
            return Err(Errno::EPERM);
        }
        let len = self.out_len(r.p1)?;
        let most = ulfs_wire::lease::runs_fitting(len).min(r.a[1] as usize);
        if most == 0 {
            return Err(Errno::EFAULT);
        }
        let maps = self.maps;
        let (n, runs) = self.shared(|c, buf, _| {
            let (ino, lease) = c.lease(r.fd, r.a[0], most)?;
            if maps.active() && maps.has(ino) {
                return Err(Errno::EBUSY);
            }
            let n = ulfs_wire::lease::encode(&lease, &mut buf[..len]).ok_or(Errno::EFAULT)?;
            Ok((n, lease.runs.len()))
        })?;
        self.chan
            .copy_out(Span::new(r.p1.off, n as u32), &self.scratch.data[..n])?;
        Ok(runs as i64)
    }

    /// READ or PREAD of a file with a shared mapping: with the volume to
    /// itself (so no write or write-back runs meanwhile), the file's bytes
    /// and then the mapping's over them where it covers.
    fn read_mapped(&mut self, op: Op, r: &Req, len: usize) -> Result<usize> {
        let (proc, maps) = (&mut *self.proc, self.maps);
        let buf = &mut self.scratch.data[..len];
        self.vol.exclusive(|vol| {
            let mut c = Ctx { vol, proc };
            let ino = c.fstat(r.fd)?.ino;
            let (off, n) = if op == Op::Read {
                let off = c.lseek(r.fd, 0, libc::SEEK_CUR)?;
                (off, c.read(r.fd, buf)?)
            } else {
                (r.a[0], c.pread(r.fd, buf, r.a[0])?)
            };
            maps.overlay(ino, off, &mut buf[..n])?;
            Ok(n)
        })
    }

    /// LOCK (op.rs): the descriptor first (EBADF before anything, as
    /// fcntl's `fdget`), then the request, then the table.
    fn lock(&mut self, r: &Req, cqe: &mut Cqe) -> Result<i64> {
        let (d, fl) = self.exclusive(|c| Ok((c.file_description(r.fd)?, c.fcntl_getfl(r.fd)?)))?;
        // An O_PATH descriptor takes no lock (fcntl's and flock's fdget).
        if fl & libc::O_PATH != 0 {
            return Err(Errno::EBADF);
        }
        let acc = fl & libc::O_ACCMODE;
        let mut q = locks::decode(r)?;
        if locks::wants_range(r) {
            let mut b = [0u8; 16];
            if r.p1.len as usize != b.len() {
                return Err(Errno::EINVAL);
            }
            self.chan.copy_in(r.p1, &mut b)?;
            q = q.with_range(r, &b);
        }
        let (mut pos, mut size) = (0, 0);
        if q.class != locks::Class::Flock {
            match q.whence {
                libc::SEEK_CUR => pos = self.exclusive(|c| c.lseek(r.fd, 0, libc::SEEK_CUR))?,
                libc::SEEK_END => size = self.exclusive(|c| c.fstat(r.fd))?.size,
                _ => {}
            }
        }
        let target = locks::Target {
            ino: d.ino,
            description: d.id,
            readable: acc != libc::O_WRONLY,
            writable: acc != libc::O_RDONLY,
            pos,
            size,
        };
        let who = locks::Who {
            lock_owner: self.lock_owner,
            pid: self.client.pid,
        };
        self.locks.request(who, &q, &target, cqe)
    }

    /// MAP_SHARED (op.rs), with Linux's checks in Linux's order: an
    /// unaligned offset (the syscall's own check, before the descriptor),
    /// the descriptor, a zero length, a length or range that overflows,
    /// then the open mode (EACCES: any mapping needs read access, a
    /// writable shared one write access), then what the file is (ENODEV
    /// for anything but a regular file). The memfd goes to the client
    /// over its socket before the answer.
    fn map_shared(&mut self, r: &Req) -> Result<i64> {
        let (off, len, prot) = (r.a[0], r.a[1], r.a[2]);
        if !off.is_multiple_of(maps::page_size()) {
            return Err(Errno::EINVAL);
        }
        let known = (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64;
        if prot & !known != 0 {
            return Err(Errno::EINVAL);
        }
        let (proc, maps) = (&mut *self.proc, self.maps);
        let (client, sock, tag) = (self.client.id, self.client.sock.as_fd(), r.tag);
        // The object's memfd is kept: made with the spare in place
        // (`Shared::with_fd_room`; the spare's lock is taken before the
        // volume's, as everywhere).
        let id = self.shared.with_fd_room(|| {
            self.vol.exclusive(|vol| {
                let mut c = Ctx { vol, proc };
                let d = c.file_description(r.fd)?;
                // An O_PATH descriptor maps nothing (mmap's fdget).
                if c.fcntl_getfl(r.fd)? & libc::O_PATH != 0 {
                    return Err(Errno::EBADF);
                }
                if len == 0 {
                    return Err(Errno::EINVAL);
                }
                let pages = len
                    .checked_next_multiple_of(maps::page_size())
                    .ok_or(Errno::ENOMEM)?;
                if off
                    .checked_add(pages)
                    .is_none_or(|end| end > i64::MAX as u64)
                {
                    return Err(Errno::EOVERFLOW);
                }
                let acc = c.fcntl_getfl(r.fd)? & libc::O_ACCMODE;
                let writable = acc != libc::O_RDONLY;
                if (prot & libc::PROT_WRITE as u64 != 0 && !writable) || acc == libc::O_WRONLY {
                    return Err(Errno::EACCES);
                }
                if c.fstat(r.fd)?.mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(Errno::ENODEV);
                }
                let q = MapReq {
                    client,
                    ino: d.ino,
                    off,
                    len,
                    writable,
                };
                let id = maps.map(vol, &q, |id, writable, memfd| {
                    ulfs_wire::control::send_object(sock, tag, id, writable, memfd)
                })?;
                // The file's bytes are the object's now: no read lease
                // holds.
                vol.end_leases(q.ino);
                Ok(id)
            })
        })?;
        Ok(id as i64)
    }

    /// MSYNC (op.rs), with msync's checks: unknown flags, or MS_ASYNC with
    /// MS_SYNC, EINVAL; an unaligned offset EINVAL; a range that wraps
    /// ENOMEM. MS_SYNC also makes the file durable, as fsync.
    fn msync(&mut self, r: &Req) -> Result<i64> {
        let (id, off, len, flags) = (r.a[0], r.a[1], r.a[2], r.a[3]);
        let known = (libc::MS_ASYNC | libc::MS_INVALIDATE | libc::MS_SYNC) as u64;
        let both = (libc::MS_ASYNC | libc::MS_SYNC) as u64;
        if flags & !known != 0 || flags & both == both {
            return Err(Errno::EINVAL);
        }
        if !off.is_multiple_of(maps::page_size()) {
            return Err(Errno::EINVAL);
        }
        if off.checked_add(len).is_none() {
            return Err(Errno::ENOMEM);
        }
        let (maps, client) = (self.maps, self.client.id);
        self.vol.exclusive(|vol| {
            maps.msync(vol, client, id, off, len)?;
            if flags & libc::MS_SYNC as u64 != 0 {
                vol.sync()?;
            }
            Ok(0)
        })
    }

    /// Records the access times a shared call deferred (with the volume
    /// to itself), if it deferred any.
    fn apply_later(&mut self) {
        if !self.scratch.later.is_empty() {
            let later = &mut self.scratch.later;
            let _ = self.vol.exclusive(|vol| {
                later.apply(vol);
                Ok(())
            });
        }
    }
}

/// A WRITE or PWRITE of `data` to a mapped file whose state before was
/// `before`: the same bytes go into the mapping. Where they went: before
/// the description's new offset (WRITE, appending or not), at the end of
/// the file (PWRITE on an O_APPEND descriptor, which Linux appends), or
/// at the offset asked.
fn wrote_mapped(
    maps: &Maps,
    c: &mut Ctx<'_>,
    op: Op,
    r: &Req,
    data: &[u8],
    before: &Stat,
) -> Result<()> {
    let size = c.fstat(r.fd)?.size;
    let n = data.len() as u64;
    let at = if op == Op::Write {
        c.lseek(r.fd, 0, libc::SEEK_CUR)?.saturating_sub(n)
    } else if c.fcntl_getfl(r.fd)? & libc::O_APPEND != 0 {
        size.saturating_sub(n)
    } else {
        r.a[0]
    };
    maps.wrote(before.ino, at, data, before.size, size)
}

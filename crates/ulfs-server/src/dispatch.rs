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
//!   under the exclusive lock;
//! - everything else: the exclusive lock.
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
use ulfs::fs::SharedVolume;
use ulfs::posix::{Ctx, Deferred, Process, SharedCtx};
use ulfs::{Errno, Result};
use ulfs_wire::channel::PathBuf;
use ulfs_wire::layout::CQE_TRUNCATED;
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
/// worker's buffers.
pub(crate) struct Call<'a> {
    pub vol: &'a SharedVolume,
    pub proc: &'a mut Process,
    pub chan: &'a mut ServerChannel,
    pub scratch: &'a mut Scratch,
    pub limits: &'a Limits,
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
                let proc = &mut *self.proc;
                let new = self.vol.exclusive(|vol| {
                    Ctx { vol, proc }.openat(r.fd, &*path, a0 as i32, a1 as u32)
                })?;
                Ok(new as i64)
            }
            Op::Close => self.exclusive(|c| c.close(r.fd)).map(|()| 0),
            Op::Dup => Ok(self.exclusive(|c| c.dup(r.fd))? as i64),
            Op::Dup2 => Ok(self.exclusive(|c| c.dup2(r.fd, r.fd2))? as i64),
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
                let n = self.shared(|c, buf, later| {
                    if op == Op::Read {
                        c.read(r.fd, &mut buf[..len], later)
                    } else {
                        c.pread(r.fd, &mut buf[..len], a0, later)
                    }
                })?;
                self.chan.copy_out(r.p1, &self.scratch.data[..n])?;
                Ok(n as i64)
            }
            Op::Write | Op::Pwrite => {
                let n = self.input(r.p1)?;
                let (proc, data) = (&mut *self.proc, &self.scratch.data[..n]);
                let w = self.vol.exclusive(|vol| {
                    let mut c = Ctx { vol, proc };
                    if op == Op::Write {
                        c.write(r.fd, data)
                    } else {
                        c.pwrite(r.fd, data, a0)
                    }
                })?;
                Ok(w as i64)
            }
            Op::Lseek => Ok(self.exclusive(|c| c.lseek(r.fd, a0 as i64, a1 as i32))? as i64),
            Op::Ftruncate => self.exclusive(|c| c.ftruncate(r.fd, a0)).map(|()| 0),
            Op::Fallocate => self
                .exclusive(|c| c.fallocate(r.fd, a0 as i32, a1, a2))
                .map(|()| 0),
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
                let proc = &mut *self.proc;
                self.vol
                    .exclusive(|vol| Ctx { vol, proc }.truncate(&*path, a0))?;
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
            // Not served yet: inheritance across fork and exec, locks,
            // shared mappings, server-side copies, reopening by inode.
            Op::ChdirIno
            | Op::PrepareFork
            | Op::PrepareExec
            | Op::Reopen
            | Op::CopyRange
            | Op::Lock
            | Op::MapShared
            | Op::Msync
            | Op::Unmap => Err(Errno::ENOSYS),
        }
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

//! A client of `ulfs serve`: the calls of the in-process `Fs`, with the
//! same names, arguments and errnos, answered by a server that owns the
//! image. One `Client` is one process of the server's (its own
//! descriptors, working directory and umask, judged by the credentials the
//! kernel gave the server for this connection) and has one request in
//! flight at a time, as `Fs` has one call at a time: `&mut self`.
//!
//! The data area of the channel is laid out per call: a path in the first
//! page, a second path in the second, an output record after them; reads
//! and writes use the whole area, and longer ones are split (a read may
//! then be short, and a write longer than the area is not atomic against
//! other clients' writes: docs/SERVE.md).
//!
//! Once the server is gone (it stopped, or was killed), every call fails
//! with ENOTCONN.

mod backend;
mod direct;
pub mod locks;
pub mod maps;
mod offsets;
mod session;

pub use backend::Backend;
pub use session::Token;
use std::path::Path;
use ulfs::{Errno, Fd, Result, Stat, StatFs, Statx, Timespec};
use ulfs_wire::layout::{CQE_OFFSET_YOURS, CQE_TRUNCATED};
use ulfs_wire::{ClientChannel, Cqe, Op, Req, Span, WireStat, WireStatFs};

/// Where a call's first path goes in the data area.
const P1: u32 = 0;
/// Where a second path goes (rename, link, symlink).
const P2: u32 = 4096;
/// Where a fixed-size answer (a stat) or a name (readlink, getcwd) goes.
const OUT: u32 = 8192;
const OUT_LEN: u32 = 4096;

/// One process of a server.
pub struct Client {
    chan: ClientChannel,
    id: u64,
    direct: direct::Direct,
    offsets: offsets::Offsets,
    /// The server's umask for this process as this client last set it
    /// (a new connection's is 022; an adopted process's is not known).
    umask: Option<u32>,
}

fn p(path: &impl AsRef<[u8]>) -> &[u8] {
    path.as_ref()
}

impl Client {
    /// Connects to the server listening at `socket`. ENOENT or
    /// ECONNREFUSED when no server listens there; EPROTO when it speaks
    /// another version of the protocol.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Client> {
        let (chan, id) = ClientChannel::connect(socket.as_ref(), 0, 0)?;
        Ok(Client {
            chan,
            id,
            direct: Default::default(),
            offsets: Default::default(),
            umask: Some(0o022),
        })
    }

    /// The server's number for this client (in its logs).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The channel, for tests and benchmarks that look at its counters.
    pub fn channel(&self) -> &ClientChannel {
        &self.chan
    }

    fn data_len(&self) -> usize {
        self.chan.geometry().data_len as usize
    }

    pub(crate) fn call(&mut self, req: Req) -> Result<Cqe> {
        let op = Op::from_u16(req.op);
        if let Some(op) = op
            && (self.offsets.any() || op == Op::PrepareExec)
        {
            self.offsets_before(op, &req)?;
        }
        let op = op.filter(|&op| !direct::keeps_descriptors(op));
        if let Some(op) = op {
            self.descriptors_before(op, req.fd, req.fd2);
        }
        let cqe = self.chan.call(req)?;
        cqe.result()?;
        if let Some(op) = op {
            self.descriptors_after(op, cqe.res);
            self.offsets_after(op, &req, &cqe)?;
        }
        Ok(cqe)
    }

    /// Before a request that uses the server's copy of an offset kept
    /// here: brings it up to date, and gives it back for good where the
    /// request shares it or makes it the server's to move (offsets.rs).
    fn offsets_before(&mut self, op: Op, req: &Req) -> Result<()> {
        match op {
            Op::PrepareFork | Op::PrepareExec => {
                self.give_back_all()?;
                if op == Op::PrepareExec {
                    // Until the exec, other threads may open files: their
                    // offsets must be the server's too, for the program the
                    // exec starts. (If the exec fails, the caller may keep
                    // offsets again: `set_kept_offsets`, as `ulfs run` does.)
                    self.offsets.off = true;
                }
            }
            // Closed even when close fails (as Linux closes it).
            Op::Close => self.offsets.closed(req.fd),
            Op::FcntlSetfl if req.a[0] as i32 & libc::O_APPEND != 0 => self.give_back(req.fd)?,
            Op::CopyRange => {
                self.give_back(req.fd)?;
                self.give_back(req.fd2)?;
            }
            Op::Lock if req.a[3] as i32 == libc::SEEK_CUR => self.sync_kept_offset(req.fd)?,
            // Not sent for a kept offset (read and write become pread and
            // pwrite), but should one be, the server's copy is right.
            Op::Read | Op::Write | Op::Lseek | Op::Getdents64 => self.sync_kept_offset(req.fd)?,
            _ => {}
        }
        Ok(())
    }

    /// After a request that changed descriptors: the offsets kept here
    /// follow.
    fn offsets_after(&mut self, op: Op, req: &Req, cqe: &Cqe) -> Result<()> {
        let new = Fd::try_from(cqe.res).unwrap_or(-1);
        let dup = match op {
            Op::Openat | Op::Reopen if cqe.flags & CQE_OFFSET_YOURS != 0 => {
                self.offsets.opened(new, req.a[0] as i32);
                return Ok(());
            }
            Op::Dup | Op::Dupfd => self.offsets.duplicated(req.fd, new),
            Op::Dup2 => self.offsets.duplicated(req.fd, req.fd2),
            _ => return Ok(()),
        };
        if let Err(u) = dup {
            // The new descriptor is too high to follow here: the server
            // keeps the description's offset from now on.
            let fd = u.fd;
            self.sync_offset(u)?;
            self.offsets.give_back(fd);
        }
        Ok(())
    }

    /// Tells the server a kept offset (an LSEEK of one of the
    /// description's descriptors).
    fn sync_offset(&mut self, u: offsets::Unsynced) -> Result<()> {
        let a = [u.offset, libc::SEEK_SET as u64, 0, 0];
        self.chan.call(Self::req(Op::Lseek, u.fd, a))?.result()?;
        self.offsets.set_synced(u.fd, u.offset);
        Ok(())
    }

    /// Turns kept offsets on or off for this client (on by default; off,
    /// the server keeps every offset, as for a benchmark of the round
    /// trip). Turning them off hands the kept ones back to the server.
    pub fn set_kept_offsets(&mut self, on: bool) -> Result<()> {
        if !on {
            self.give_back_all()?;
        }
        self.offsets.off = !on;
        Ok(())
    }

    /// Syncs every offset kept here and leaves them all to the server.
    fn give_back_all(&mut self) -> Result<()> {
        for u in self.offsets.all_unsynced() {
            self.sync_offset(u)?;
        }
        self.offsets.give_back_all();
        Ok(())
    }

    /// Tells the server `fd`'s kept offset, if it is kept here and the
    /// server's copy is stale.
    pub(crate) fn sync_kept_offset(&mut self, fd: Fd) -> Result<()> {
        match self.offsets.unsynced(fd) {
            Some(u) => self.sync_offset(u),
            None => Ok(()),
        }
    }

    /// Syncs `fd`'s kept offset, if any, and leaves it to the server.
    fn give_back(&mut self, fd: Fd) -> Result<()> {
        self.sync_kept_offset(fd)?;
        self.offsets.give_back(fd);
        Ok(())
    }

    fn call_res(&mut self, req: Req) -> Result<u64> {
        Ok(self.call(req)?.res as u64)
    }

    pub(crate) fn req(op: Op, fd: Fd, a: [u64; 4]) -> Req {
        let mut r = Req::new(op);
        r.fd = fd;
        r.a = a;
        r
    }

    /// Stages a path at `off`: ENAMETOOLONG (as the engine says) for one
    /// that cannot fit the page.
    fn put_path(&mut self, off: u32, path: &[u8]) -> Result<Span> {
        if path.len() >= ulfs::format::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.chan.put(off, path)
    }

    fn path_call(&mut self, op: Op, fd: Fd, path: &[u8], a: [u64; 4]) -> Result<u64> {
        let mut r = Self::req(op, fd, a);
        r.p1 = self.put_path(P1, path)?;
        self.call_res(r)
    }

    fn two_path_call(
        &mut self,
        op: Op,
        (fd, one): (Fd, &[u8]),
        (fd2, two): (Fd, &[u8]),
        a: [u64; 4],
    ) -> Result<()> {
        let mut r = Self::req(op, fd, a);
        r.fd2 = fd2;
        r.p1 = self.put_path(P1, one)?;
        r.p2 = self.put_path(P2, two)?;
        self.call_res(r).map(drop)
    }

    fn stat_of(&self) -> Result<WireStat> {
        let bytes = self.chan.get(Span::new(OUT, 128))?;
        WireStat::from_bytes(bytes).ok_or(Errno::EIO)
    }

    /// A name the server wrote at OUT (cut to the span if longer).
    fn name_of(&self, cqe: &Cqe) -> Result<Vec<u8>> {
        if cqe.flags & CQE_TRUNCATED != 0 {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(self.chan.get(Span::new(OUT, cqe.res as u32))?.to_vec())
    }

    // ------------------------------------------------------------ session

    /// A request that does nothing: the round trip alone.
    pub fn nop(&mut self) -> Result<()> {
        self.call_res(Req::new(Op::Nop)).map(drop)
    }

    /// `umask(2)`, which cannot fail: with the server gone it answers the
    /// default 022 (the next call that can fail says ENOTCONN).
    pub fn umask(&mut self, mask: u32) -> u32 {
        self.umask = None;
        let old = self.call_res(Self::req(Op::Umask, -1, [mask as u64, 0, 0, 0]));
        if old.is_ok() {
            self.umask = Some(mask & 0o777);
        }
        old.map_or(0o022, |m| m as u32)
    }

    /// Makes the process's umask `mask` (a request only when it is not
    /// what this client last set): for a layer whose program sets its
    /// umask elsewhere, before a call that creates a file.
    pub fn set_umask_to(&mut self, mask: u32) -> Result<()> {
        if self.umask == Some(mask & 0o777) {
            return Ok(());
        }
        self.call_res(Self::req(Op::Umask, -1, [mask as u64, 0, 0, 0]))?;
        self.umask = Some(mask & 0o777);
        Ok(())
    }

    pub fn set_max_fds(&mut self, max: usize) -> Result<()> {
        self.call_res(Self::req(Op::SetMaxFds, -1, [max as u64, 0, 0, 0]))
            .map(drop)
    }

    pub fn getcwd(&mut self) -> Result<Vec<u8>> {
        let mut r = Req::new(Op::Getcwd);
        r.p2 = Span::new(OUT, OUT_LEN);
        let cqe = self.call(r)?;
        self.name_of(&cqe)
    }

    pub fn chdir(&mut self, path: impl AsRef<[u8]>) -> Result<()> {
        self.path_call(Op::Chdir, -1, p(&path), [0; 4]).map(drop)
    }

    pub fn fchdir(&mut self, fd: Fd) -> Result<()> {
        self.call_res(Self::req(Op::Fchdir, fd, [0; 4])).map(drop)
    }

    pub fn sync(&mut self) -> Result<()> {
        self.call_res(Req::new(Op::Sync)).map(drop)
    }

    // -------------------------------------------------------- descriptors

    pub fn open(&mut self, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<Fd> {
        self.openat(libc::AT_FDCWD, path, flags, mode)
    }

    pub fn openat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        flags: i32,
        mode: u32,
    ) -> Result<Fd> {
        let a = [flags as i64 as u64, mode as u64, 0, 0];
        self.path_call(Op::Openat, dirfd, p(&path), a)
            .map(|fd| fd as Fd)
    }

    pub fn close(&mut self, fd: Fd) -> Result<()> {
        self.call_res(Self::req(Op::Close, fd, [0; 4])).map(drop)
    }

    /// Closes a descriptor this process's library kept for itself (a
    /// mapping's): the process's POSIX locks on the file stay, as the end
    /// of a mapping leaves them on Linux.
    pub fn close_kept(&mut self, fd: Fd) -> Result<()> {
        self.call_res(Self::req(Op::Close, fd, [1, 0, 0, 0]))
            .map(drop)
    }

    pub fn dup(&mut self, fd: Fd) -> Result<Fd> {
        self.call_res(Self::req(Op::Dup, fd, [0; 4]))
            .map(|f| f as Fd)
    }

    pub fn dupfd(&mut self, fd: Fd, lowest: Fd) -> Result<Fd> {
        let a = [lowest as i64 as u64, 0, 0, 0];
        self.call_res(Self::req(Op::Dupfd, fd, a)).map(|f| f as Fd)
    }

    pub fn dup2(&mut self, old: Fd, new: Fd) -> Result<Fd> {
        let mut r = Self::req(Op::Dup2, old, [0; 4]);
        r.fd2 = new;
        self.call_res(r).map(|f| f as Fd)
    }

    pub fn fcntl_getfl(&mut self, fd: Fd) -> Result<i32> {
        self.call_res(Self::req(Op::FcntlGetfl, fd, [0; 4]))
            .map(|f| f as i32)
    }

    pub fn fcntl_setfl(&mut self, fd: Fd, flags: i32) -> Result<()> {
        let a = [flags as i64 as u64, 0, 0, 0];
        self.call_res(Self::req(Op::FcntlSetfl, fd, a)).map(drop)
    }

    // --------------------------------------------------------------- data

    /// Reads into `buf` through the data area, a piece at a time: stops at
    /// a short piece (the end of the file), as `Fs::readv` does.
    fn read_pieces(&mut self, fd: Fd, buf: &mut [u8], mut at: Option<u64>) -> Result<usize> {
        let mut done = 0;
        loop {
            let n = (buf.len() - done).min(self.data_len());
            let op = if at.is_some() { Op::Pread } else { Op::Read };
            let mut r = Self::req(op, fd, [at.unwrap_or(0), 0, 0, 0]);
            r.p1 = Span::new(0, n as u32);
            let got = match self.call_res(r) {
                Ok(got) => got as usize,
                Err(e) if done == 0 => return Err(e),
                Err(_) => return Ok(done),
            };
            buf[done..done + got].copy_from_slice(&self.chan.data()[..got]);
            done += got;
            if let Some(off) = at.as_mut() {
                *off += got as u64;
            }
            if got < n || done == buf.len() {
                return Ok(done);
            }
        }
    }

    fn write_pieces(&mut self, fd: Fd, buf: &[u8], mut at: Option<u64>) -> Result<usize> {
        let mut done = 0;
        loop {
            let n = (buf.len() - done).min(self.data_len());
            let op = if at.is_some() { Op::Pwrite } else { Op::Write };
            let mut r = Self::req(op, fd, [at.unwrap_or(0), 0, 0, 0]);
            r.p1 = self.chan.put(0, &buf[done..done + n])?;
            let put = match self.call_res(r) {
                Ok(put) => put as usize,
                Err(e) if done == 0 => return Err(e),
                Err(_) => return Ok(done),
            };
            done += put;
            if let Some(off) = at.as_mut() {
                *off += put as u64;
            }
            if put < n || done == buf.len() {
                return Ok(done);
            }
        }
    }

    /// `read(2)`: a `pread` at the offset when this client keeps it
    /// (offsets.rs), else through the server.
    pub fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        if let Some(at) = self.offsets.get(fd) {
            let n = self.pread(fd, buf, at)?;
            self.offsets.set(fd, at + n as u64);
            return Ok(n);
        }
        self.read_pieces(fd, buf, None)
    }

    /// `pread(2)`: straight from this process's view of the image when
    /// the file has a read lease (`direct.rs`), else through the server.
    pub fn pread(&mut self, fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
        if let Some(n) = self.pread_direct(fd, buf, off) {
            return Ok(n);
        }
        self.read_pieces(fd, buf, Some(off))
    }

    /// `write(2)`: a `pwrite` at the offset when this client keeps it
    /// (never for `O_APPEND`), else through the server.
    pub fn write(&mut self, fd: Fd, buf: &[u8]) -> Result<usize> {
        if let Some(at) = self.offsets.get(fd) {
            let n = self.write_pieces(fd, buf, Some(at))?;
            self.offsets.set(fd, at + n as u64);
            return Ok(n);
        }
        self.write_pieces(fd, buf, None)
    }

    pub fn pwrite(&mut self, fd: Fd, buf: &[u8], off: u64) -> Result<usize> {
        self.write_pieces(fd, buf, Some(off))
    }

    /// `readv(2)`: one buffer after the other, stopping at a short read, as
    /// `Fs::readv`.
    /// `readv(2)`: one request for the whole vector when it fits the data
    /// area (its range checked as one, as Linux's, and no other client's
    /// write landing between its pieces); else a buffer at a time.
    pub fn readv(&mut self, fd: Fd, bufs: &mut [std::io::IoSliceMut<'_>]) -> Result<usize> {
        let total = bufs.iter().fold(0usize, |t, b| t.saturating_add(b.len()));
        if bufs.len() <= 1 || total > self.data_len() {
            if let Some(at) = self.offsets.get_for(fd, libc::O_RDONLY) {
                ulfs::posix::check_range(at, total)?;
            }
            return ulfs::posix::readv_by(bufs, |b| self.read(fd, b));
        }
        let kept = self.offsets.get(fd);
        let op = if kept.is_some() { Op::Pread } else { Op::Read };
        let mut r = Self::req(op, fd, [kept.unwrap_or(0), 0, 0, 0]);
        r.p1 = Span::new(0, total as u32);
        let got = self.call_res(r)? as usize;
        let mut from = &self.chan.data()[..got];
        for b in bufs.iter_mut() {
            let n = b.len().min(from.len());
            b[..n].copy_from_slice(&from[..n]);
            from = &from[n..];
        }
        if let Some(at) = kept {
            self.offsets.set(fd, at + got as u64);
        }
        Ok(got)
    }

    /// `writev(2)`, as `Fs::writev`.
    /// `writev(2)`: as `readv`, one request when the vector fits the data
    /// area, which keeps an `O_APPEND` record whole against other
    /// clients' appends.
    pub fn writev(&mut self, fd: Fd, bufs: &[std::io::IoSlice<'_>]) -> Result<usize> {
        let total = bufs.iter().fold(0usize, |t, b| t.saturating_add(b.len()));
        if bufs.len() <= 1 || total > self.data_len() {
            if let Some(at) = self.offsets.get_for(fd, libc::O_WRONLY) {
                ulfs::posix::check_range(at, total)?;
            }
            return ulfs::posix::writev_by(bufs, |b| self.write(fd, b));
        }
        let mut put = 0;
        for b in bufs {
            self.chan.put(put as u32, b)?;
            put += b.len();
        }
        let kept = self.offsets.get(fd);
        let op = if kept.is_some() {
            Op::Pwrite
        } else {
            Op::Write
        };
        let mut r = Self::req(op, fd, [kept.unwrap_or(0), 0, 0, 0]);
        r.p1 = Span::new(0, total as u32);
        let n = self.call_res(r)? as usize;
        if let Some(at) = kept {
            self.offsets.set(fd, at + n as u64);
        }
        Ok(n)
    }

    /// `lseek(fd, off, SEEK_SET)`.
    pub fn seek_to(&mut self, fd: Fd, off: u64) -> Result<u64> {
        self.lseek(fd, off as i64, libc::SEEK_SET)
    }

    /// `lseek(2)`: answered here when this client keeps the offset (with
    /// the engine's rules: a result below 0 or past `i64::MAX` is EINVAL):
    /// SEEK_SET and SEEK_CUR from the offset, SEEK_END from the size of
    /// the kept fstat answer while the file is unchanged (the first
    /// SEEK_END asks for that answer: one request either way); the rest
    /// through the server.
    pub fn lseek(&mut self, fd: Fd, off: i64, whence: i32) -> Result<u64> {
        if let Some(at) = self.offsets.get(fd) {
            let new = match whence {
                libc::SEEK_SET => Some(off),
                libc::SEEK_CUR => Some((at as i64).checked_add(off).ok_or(Errno::EINVAL)?),
                libc::SEEK_END if self.view_ready() => {
                    let size = match self.fstat_kept(fd) {
                        Some(st) => st.size,
                        None => self.fstat(fd)?.size,
                    };
                    Some((size as i64).checked_add(off).ok_or(Errno::EINVAL)?)
                }
                _ => None,
            };
            if let Some(new) = new {
                let new = u64::try_from(new).map_err(|_| Errno::EINVAL)?;
                self.offsets.set(fd, new);
                return Ok(new);
            }
            // SEEK_DATA, SEEK_HOLE (and SEEK_END before the view is set
            // up): from the file, not the offset; the server moves its
            // copy to the answer.
            let a = [off as u64, whence as i64 as u64, 0, 0];
            let new = self.chan.call(Self::req(Op::Lseek, fd, a))?.result()?;
            self.offsets.set_synced(fd, new);
            return Ok(new);
        }
        let a = [off as u64, whence as i64 as u64, 0, 0];
        self.call_res(Self::req(Op::Lseek, fd, a))
    }

    pub fn ftruncate(&mut self, fd: Fd, len: u64) -> Result<()> {
        self.call_res(Self::req(Op::Ftruncate, fd, [len, 0, 0, 0]))
            .map(drop)
    }

    pub fn fallocate(&mut self, fd: Fd, mode: i32, off: u64, len: u64) -> Result<()> {
        let a = [mode as i64 as u64, off, len, 0];
        self.call_res(Self::req(Op::Fallocate, fd, a)).map(drop)
    }

    pub fn fsync(&mut self, fd: Fd) -> Result<()> {
        self.call_res(Self::req(Op::Fsync, fd, [0; 4])).map(drop)
    }

    pub fn fdatasync(&mut self, fd: Fd) -> Result<()> {
        self.call_res(Self::req(Op::Fdatasync, fd, [0; 4]))
            .map(drop)
    }

    /// `getdents64(2)` into `buf` (at most the data area's size per call).
    pub fn getdents64(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let n = buf.len().min(self.data_len());
        let mut r = Self::req(Op::Getdents64, fd, [0; 4]);
        r.p1 = Span::new(0, n as u32);
        let got = self.call_res(r)? as usize;
        buf[..got].copy_from_slice(&self.chan.data()[..got]);
        Ok(got)
    }

    // --------------------------------------------------------------- stat

    /// `fstat(2)`: the last answer again while the file is unchanged
    /// (`direct.rs`), else through the server.
    pub fn fstat(&mut self, fd: Fd) -> Result<Stat> {
        if self.view_ready()
            && let Some(st) = self.fstat_kept(fd)
        {
            return Ok(st);
        }
        let before = self.fstat_before(fd);
        let mut r = Self::req(Op::Fstat, fd, [0; 4]);
        r.p2 = Span::new(OUT, 128);
        self.call(r)?;
        let st = self.stat_of()?.stat();
        self.fstat_after(fd, &st, before);
        Ok(st)
    }

    /// `fstat` into a C `struct stat`.
    pub fn fstat_libc(
        &mut self,
        fd: Fd,
        out: &mut std::mem::MaybeUninit<libc::stat>,
    ) -> Result<()> {
        out.write(self.fstat(fd)?.to_libc());
        Ok(())
    }

    pub fn stat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.fstatat(libc::AT_FDCWD, path, 0)
    }

    pub fn lstat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.fstatat(libc::AT_FDCWD, path, libc::AT_SYMLINK_NOFOLLOW)
    }

    pub fn fstatat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32) -> Result<Stat> {
        let mut r = Self::req(Op::Fstatat, dirfd, [flags as i64 as u64, 0, 0, 0]);
        r.p1 = self.put_path(P1, p(&path))?;
        r.p2 = Span::new(OUT, 128);
        self.call(r)?;
        Ok(self.stat_of()?.stat())
    }

    pub fn statx(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        flags: i32,
        mask: u32,
    ) -> Result<Statx> {
        let a = [flags as i64 as u64, mask as u64, 0, 0];
        let mut r = Self::req(Op::Statx, dirfd, a);
        r.p1 = self.put_path(P1, p(&path))?;
        r.p2 = Span::new(OUT, 128);
        self.call(r)?;
        Ok(self.stat_of()?.statx())
    }

    fn statfs_of(&self) -> Result<StatFs> {
        let bytes = self.chan.get(Span::new(OUT, 128))?;
        Ok(WireStatFs::from_bytes(bytes).ok_or(Errno::EIO)?.statfs())
    }

    pub fn statfs(&mut self, path: impl AsRef<[u8]>) -> Result<StatFs> {
        let mut r = Req::new(Op::Statfs);
        r.p1 = self.put_path(P1, p(&path))?;
        r.p2 = Span::new(OUT, 128);
        self.call(r)?;
        self.statfs_of()
    }

    pub fn fstatfs(&mut self, fd: Fd) -> Result<StatFs> {
        let mut r = Self::req(Op::Fstatfs, fd, [0; 4]);
        r.p2 = Span::new(OUT, 128);
        self.call(r)?;
        self.statfs_of()
    }

    pub fn access(&mut self, path: impl AsRef<[u8]>, mode: i32) -> Result<()> {
        self.faccessat(libc::AT_FDCWD, path, mode, 0)
    }

    pub fn faccessat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        mode: i32,
        flags: i32,
    ) -> Result<()> {
        let a = [mode as i64 as u64, flags as i64 as u64, 0, 0];
        self.path_call(Op::Faccessat, dirfd, p(&path), a).map(drop)
    }

    pub fn readlink(&mut self, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.readlinkat(libc::AT_FDCWD, path)
    }

    pub fn readlinkat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let mut r = Self::req(Op::Readlinkat, dirfd, [0; 4]);
        r.p1 = self.put_path(P1, p(&path))?;
        r.p2 = Span::new(OUT, OUT_LEN);
        let cqe = self.call(r)?;
        self.name_of(&cqe)
    }

    // -------------------------------------------------------------- names

    pub fn mkdir(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.mkdirat(libc::AT_FDCWD, path, mode)
    }

    pub fn mkdirat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.path_call(Op::Mkdirat, dirfd, p(&path), [mode as u64, 0, 0, 0])
            .map(drop)
    }

    pub fn mknodat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        mode: u32,
        dev: u64,
    ) -> Result<()> {
        self.path_call(Op::Mknodat, dirfd, p(&path), [mode as u64, dev, 0, 0])
            .map(drop)
    }

    pub fn unlink(&mut self, path: impl AsRef<[u8]>) -> Result<()> {
        self.unlinkat(libc::AT_FDCWD, path, 0)
    }

    pub fn rmdir(&mut self, path: impl AsRef<[u8]>) -> Result<()> {
        self.unlinkat(libc::AT_FDCWD, path, libc::AT_REMOVEDIR)
    }

    pub fn unlinkat(&mut self, dirfd: Fd, path: impl AsRef<[u8]>, flags: i32) -> Result<()> {
        let a = [flags as i64 as u64, 0, 0, 0];
        self.path_call(Op::Unlinkat, dirfd, p(&path), a).map(drop)
    }

    pub fn rename(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()> {
        self.renameat2(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
    }

    /// `renameat2` from the working directory.
    pub fn rename2(
        &mut self,
        old: impl AsRef<[u8]>,
        new: impl AsRef<[u8]>,
        flags: u32,
    ) -> Result<()> {
        self.renameat2(libc::AT_FDCWD, old, libc::AT_FDCWD, new, flags)
    }

    pub fn renameat2(
        &mut self,
        olddirfd: Fd,
        old: impl AsRef<[u8]>,
        newdirfd: Fd,
        new: impl AsRef<[u8]>,
        flags: u32,
    ) -> Result<()> {
        self.two_path_call(
            Op::Renameat2,
            (olddirfd, p(&old)),
            (newdirfd, p(&new)),
            [flags as u64, 0, 0, 0],
        )
    }

    pub fn link(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<()> {
        self.linkat(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
    }

    pub fn linkat(
        &mut self,
        olddirfd: Fd,
        old: impl AsRef<[u8]>,
        newdirfd: Fd,
        new: impl AsRef<[u8]>,
        flags: i32,
    ) -> Result<()> {
        self.two_path_call(
            Op::Linkat,
            (olddirfd, p(&old)),
            (newdirfd, p(&new)),
            [flags as i64 as u64, 0, 0, 0],
        )
    }

    pub fn symlink(&mut self, target: impl AsRef<[u8]>, linkpath: impl AsRef<[u8]>) -> Result<()> {
        self.symlinkat(target, libc::AT_FDCWD, linkpath)
    }

    pub fn symlinkat(
        &mut self,
        target: impl AsRef<[u8]>,
        newdirfd: Fd,
        linkpath: impl AsRef<[u8]>,
    ) -> Result<()> {
        // The target is stored verbatim: an empty one is the engine's
        // ENOENT, a NUL in it EINVAL, as for the library.
        self.two_path_call(
            Op::Symlinkat,
            (newdirfd, p(&target)),
            (newdirfd, p(&linkpath)),
            [0; 4],
        )
    }

    pub fn truncate(&mut self, path: impl AsRef<[u8]>, len: u64) -> Result<()> {
        self.path_call(Op::Truncate, -1, p(&path), [len, 0, 0, 0])
            .map(drop)
    }

    // --------------------------------------------------------- attributes

    pub fn utimensat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        times: Option<[Timespec; 2]>,
        flags: i32,
    ) -> Result<()> {
        let mut r = Self::req(Op::Utimensat, dirfd, [flags as i64 as u64, 0, 0, 0]);
        r.p1 = self.put_path(P1, p(&path))?;
        if let Some(t) = times {
            r.p2 = self.chan.put(P2, &ulfs_wire::stat::encode_times(&t))?;
        }
        self.call_res(r).map(drop)
    }

    pub fn futimens(&mut self, fd: Fd, times: Option<[Timespec; 2]>) -> Result<()> {
        let mut r = Self::req(Op::Futimens, fd, [0; 4]);
        if let Some(t) = times {
            r.p2 = self.chan.put(P2, &ulfs_wire::stat::encode_times(&t))?;
        }
        self.call_res(r).map(drop)
    }

    pub fn chmod(&mut self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.fchmodat(libc::AT_FDCWD, path, mode, 0)
    }

    pub fn fchmodat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        mode: u32,
        flags: i32,
    ) -> Result<()> {
        let a = [mode as u64, flags as i64 as u64, 0, 0];
        self.path_call(Op::Fchmodat, dirfd, p(&path), a).map(drop)
    }

    pub fn fchmod(&mut self, fd: Fd, mode: u32) -> Result<()> {
        self.call_res(Self::req(Op::Fchmod, fd, [mode as u64, 0, 0, 0]))
            .map(drop)
    }

    pub fn chown(&mut self, path: impl AsRef<[u8]>, uid: u32, gid: u32) -> Result<()> {
        self.fchownat(libc::AT_FDCWD, path, uid, gid, 0)
    }

    pub fn lchown(&mut self, path: impl AsRef<[u8]>, uid: u32, gid: u32) -> Result<()> {
        self.fchownat(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW)
    }

    pub fn fchownat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        uid: u32,
        gid: u32,
        flags: i32,
    ) -> Result<()> {
        let a = [uid as u64, gid as u64, flags as i64 as u64, 0];
        self.path_call(Op::Fchownat, dirfd, p(&path), a).map(drop)
    }

    pub fn fchown(&mut self, fd: Fd, uid: u32, gid: u32) -> Result<()> {
        self.call_res(Self::req(Op::Fchown, fd, [uid as u64, gid as u64, 0, 0]))
            .map(drop)
    }

    /// The open file description `fd` refers to, as `Fs::file_description`.
    pub fn file_description(&mut self, fd: Fd) -> Result<ulfs::FileDescription> {
        let cqe = self.call(Self::req(Op::FileDescription, fd, [0; 4]))?;
        Ok(ulfs::FileDescription {
            id: cqe.aux[0],
            ino: cqe.aux[1],
            refs: cqe.res as u32,
        })
    }
}

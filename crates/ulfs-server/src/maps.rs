//! Shared mappings of image files (`mmap(MAP_SHARED)` by clients): the
//! kernel cannot map bytes that live inside the image, so the server keeps,
//! per inode that has live shared mappings, one memfd (an *object*) holding
//! the file's bytes, and every client mapping that inode maps that memfd.
//! Their stores then meet in the kernel's page cache, as two processes'
//! mappings of one host file do (SQLite's `-shm` WAL index relies on it).
//!
//! **Coverage.** An object holds the page ranges its mappings asked for
//! (sorted, disjoint), at their file offsets: memfd offset = file offset,
//! so a window far into a large file costs only its own pages. Newly
//! covered pages are filled from the file where it has bytes and are zero
//! past its end.
//!
//! **Coherence** while an object exists (the callers are in
//! `dispatch.rs`): the server's reads of the inode see the object's bytes
//! where it covers (the object is the newest copy: clients store into it
//! without telling anyone); writes go to the file and to the object; a
//! size change zeroes the object past the smaller of the two sizes (a
//! shrink's cut, or a growth's new bytes, which read as zeros). The file
//! gets the object's bytes, up to its size, at MSYNC, at the last UNMAP of
//! the object (or the teardown of the last client holding it) and at the
//! server's shutdown; only pages that differ are written, so a mapping
//! nobody stored into changes nothing (no mtime, no blocks in a hole).
//!
//! **Trust.** A client holding a writable memfd can write any byte of it,
//! and that is the point; but it must not be able to hurt the others: the
//! memfd is sealed against shrinking (a shrink would turn the other
//! clients' mappings into SIGBUS) and against new seals (a client's
//! F_SEAL_WRITE would stop the server's writes and every later writable
//! mapping). A client whose descriptor is read-only gets a read-only
//! descriptor of the memfd (reopened through `/proc/self/fd`), so it can
//! neither store into its mapping nor `mprotect` it writable, as the
//! kernel refuses for a read-only file. The server reads and writes the
//! memfd with `pread`/`pwrite`, never through a mapping of its own, so
//! nothing a client does to the memfd can fault the server.
//!
//! **Locking.** Every call here is made with the volume held exclusively
//! (the caller's `SharedVolume::exclusive`), and takes the table's own
//! mutex inside it: the order is always volume, then maps. So a write and
//! a write-back of the same bytes never interleave, and no object is made
//! or dropped while a shared read of the volume runs.
//!
//! **Bounds.** `Limits::max_maps_per_client` mappings per client and
//! `Limits::max_mapped_bytes` of coverage in all objects: ENOMEM past
//! them, as `mmap` says when it runs out.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{FallocateFlags, MemfdFlags, OFlags, SealFlags};
use ulfs::fs::{OpenId, Volume};
use ulfs::{Errno, Ino, Result};

/// Bytes moved per step when filling and writing back.
const CHUNK: usize = 256 << 10;

fn sys(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// The host's page size: mappings are made of whole pages.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// File ranges an object holds: page-aligned, sorted, disjoint and not
/// touching.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Coverage(Vec<(u64, u64)>);

impl Coverage {
    fn bytes(&self) -> u64 {
        self.0.iter().map(|(s, e)| e - s).sum()
    }

    /// The covered parts of `[from, to)`.
    fn within(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0
            .iter()
            .filter(move |(s, e)| *s < to && from < *e)
            .map(move |(s, e)| ((*s).max(from), (*e).min(to)))
    }

    /// The parts of `[from, to)` not covered.
    fn gaps(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut at = from;
        for (s, e) in self.within(from, to) {
            if at < s {
                gaps.push((at, s));
            }
            at = e;
        }
        if at < to {
            gaps.push((at, to));
        }
        gaps
    }

    /// Adds `[from, to)`, merging neighbours.
    fn add(&mut self, from: u64, to: u64) {
        let (mut s, mut e) = (from, to);
        self.0.retain(|&(a, b)| {
            let joins = a <= e && s <= b;
            if joins {
                s = s.min(a);
                e = e.max(b);
            }
            !joins
        });
        let at = self.0.partition_point(|&(a, _)| a < s);
        self.0.insert(at, (s, e));
    }
}

/// One inode's shared bytes.
struct Object {
    ino: Ino,
    /// The open reference the object holds on the inode, as a kernel
    /// mapping holds its file: an unlinked file stays until the last
    /// mapping goes, and its bytes can still be written back.
    open: OpenId,
    memfd: OwnedFd,
    /// A read-only descriptor of the same memfd, made at the first
    /// mapping through a read-only descriptor.
    read_only: Option<OwnedFd>,
    covered: Coverage,
    /// Mappings per client.
    refs: HashMap<u64, u32>,
}

impl Object {
    fn memfd_len(&self) -> Result<u64> {
        Ok(rustix::fs::fstat(&self.memfd).map_err(sys)?.st_size as u64)
    }

    /// Zeroes `[from, to)` of the memfd (a hole in tmpfs: no memory).
    fn zero(&self, from: u64, to: u64) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let punched = rustix::fs::fallocate(
            &self.memfd,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            from,
            to - from,
        );
        if punched.is_ok() {
            return Ok(());
        }
        let zeros = vec![0u8; CHUNK.min((to - from) as usize)];
        let mut at = from;
        while at < to {
            let n = zeros.len().min((to - at) as usize);
            write_all(self.memfd.as_fd(), &zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Fills `[from, to)` (not covered before) from the file: its bytes
    /// where it has them, zeros past its end and in its holes.
    fn fill(&self, vol: &Volume, from: u64, to: u64) -> Result<()> {
        // Whatever a client wrote there before it was covered goes.
        self.zero(from, to)?;
        let size = vol.stat_ino(self.ino)?.size;
        let mut buf = vec![0u8; CHUNK];
        let mut at = from;
        while at < to.min(size) {
            let n = CHUNK.min((to.min(size) - at) as usize);
            let (got, _) = vol.read_shared(self.ino, &mut buf[..n], at)?;
            if got == 0 {
                break;
            }
            if buf[..got].iter().any(|&b| b != 0) {
                write_all(self.memfd.as_fd(), &buf[..got], at)?;
            }
            at += got as u64;
        }
        Ok(())
    }

    /// Writes the object's bytes in `[from, to)`, up to the file's size,
    /// back into the file: the pages that differ from what the file holds.
    fn write_back(&self, vol: &mut Volume, from: u64, to: u64) -> Result<()> {
        let size = vol.stat_ino(self.ino)?.size;
        let page = page_size() as usize;
        let (mut mine, mut file) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
        let parts: Vec<(u64, u64)> = self.covered.within(from, to.min(size)).collect();
        for (s, e) in parts {
            let mut at = s;
            while at < e {
                let n = CHUNK.min((e - at) as usize);
                read_all(self.memfd.as_fd(), &mut mine[..n], at)?;
                let (got, _) = vol.read_shared(self.ino, &mut file[..n], at)?;
                file[got..n].fill(0);
                let mut p = 0;
                while p < n {
                    // A run of pages that differ, written in one call.
                    let differs = |p: usize| {
                        let q = (p + page).min(n);
                        mine[p..q] != file[p..q]
                    };
                    if !differs(p) {
                        p += page;
                        continue;
                    }
                    let mut q = p;
                    while q < n && differs(q) {
                        q += page;
                    }
                    let q = q.min(n);
                    let mut done = p;
                    while done < q {
                        let w = vol.write_open(self.open, &mine[done..q], at + done as u64)?;
                        if w == 0 {
                            return Err(Errno::ENOSPC);
                        }
                        done += w;
                    }
                    p = q;
                }
                at += n as u64;
            }
        }
        Ok(())
    }
}

fn read_all(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], off + done as u64) {
            // Past the memfd's end (it never shrinks, so only beyond
            // what was ever covered): zeros.
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(sys(e)),
        }
    }
    Ok(())
}

fn write_all(fd: BorrowedFd<'_>, buf: &[u8], off: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pwrite(fd, &buf[done..], off + done as u64) {
            Ok(0) => return Err(Errno::ENOSPC),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(sys(e)),
        }
    }
    Ok(())
}

#[derive(Default)]
struct Inner {
    objects: HashMap<u64, Object>,
    by_ino: HashMap<Ino, u64>,
    /// Mappings per client, in all its objects.
    per_client: HashMap<u64, usize>,
    /// Bytes covered by all objects.
    bytes: u64,
    next_id: u64,
}

/// The server's objects (in `Shared`).
pub(crate) struct Maps {
    inner: Mutex<Inner>,
    /// Objects alive: the data path looks at this alone while nothing is
    /// mapped, which is almost always.
    live: AtomicUsize,
    max_per_client: usize,
    max_bytes: u64,
}

/// What a MAP_SHARED asks for, checked by the caller against the
/// descriptor as Linux's `mmap` does.
pub(crate) struct MapReq {
    pub client: u64,
    pub ino: Ino,
    /// Page-aligned.
    pub off: u64,
    /// Not zero; rounded up to pages here.
    pub len: u64,
    /// The descriptor is writable: the client gets a writable memfd.
    pub writable: bool,
}

impl Maps {
    pub fn new(limits: &crate::Limits) -> Maps {
        Maps {
            inner: Mutex::new(Inner::default()),
            live: AtomicUsize::new(0),
            max_per_client: limits.max_maps_per_client,
            max_bytes: limits.max_mapped_bytes,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Each change leaves the table consistent before it can panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any object exists (a relaxed hint: every decision that
    /// matters is made again under the mutex, with the volume held).
    #[inline]
    pub fn active(&self) -> bool {
        self.live.load(Ordering::Relaxed) != 0
    }

    /// Whether `ino` has an object.
    pub fn has(&self, ino: Ino) -> bool {
        self.active() && self.inner().by_ino.contains_key(&ino)
    }

    /// A new mapping of `q.client`: the object of `q.ino` (made now if
    /// there is none) covers `[off, off + len)`, and `send` hands the
    /// client the memfd, open for writing or not as its descriptor. The
    /// mapping counts only once `send` succeeded. → the object id.
    pub fn map(
        &self,
        vol: &mut Volume,
        q: &MapReq,
        send: impl FnOnce(u64, bool, BorrowedFd<'_>) -> Result<()>,
    ) -> Result<u64> {
        // As do_mmap (the caller checked in Linux's order already; the
        // table does not count on it): a length that cannot be rounded up
        // to pages is ENOMEM, a range past what a file offset holds
        // EOVERFLOW.
        let len = q
            .len
            .checked_next_multiple_of(page_size())
            .ok_or(Errno::ENOMEM)?;
        let end = q
            .off
            .checked_add(len)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(Errno::EOVERFLOW)?;
        let mut inner = self.inner();
        let Inner {
            objects,
            by_ino,
            per_client,
            bytes,
            next_id,
        } = &mut *inner;
        if per_client.get(&q.client).copied().unwrap_or(0) >= self.max_per_client {
            return Err(Errno::ENOMEM);
        }
        let existing = by_ino.get(&q.ino).copied();
        let new_bytes = match existing.and_then(|id| objects.get(&id)) {
            Some(o) => o.covered.gaps(q.off, end).iter().map(|(s, e)| e - s).sum(),
            None => end - q.off,
        };
        if bytes.saturating_add(new_bytes) > self.max_bytes {
            return Err(Errno::ENOMEM);
        }
        let id = match existing {
            Some(id) => id,
            None => {
                let memfd = rustix::fs::memfd_create(
                    "ulfs-object",
                    MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
                )
                .map_err(sys)?;
                rustix::fs::fcntl_add_seals(&memfd, SealFlags::SHRINK | SealFlags::SEAL)
                    .map_err(sys)?;
                *next_id += 1;
                let open = vol.open_ref(q.ino);
                objects.insert(
                    *next_id,
                    Object {
                        ino: q.ino,
                        open,
                        memfd,
                        read_only: None,
                        covered: Coverage::default(),
                        refs: HashMap::new(),
                    },
                );
                by_ino.insert(q.ino, *next_id);
                self.live.fetch_add(1, Ordering::Relaxed);
                *next_id
            }
        };
        let o = objects.get_mut(&id).expect("inserted or found above");
        let done = (|| {
            if o.memfd_len()? < end {
                rustix::fs::ftruncate(&o.memfd, end).map_err(sys)?;
            }
            for (s, e) in o.covered.gaps(q.off, end) {
                o.fill(vol, s, e)?;
                o.covered.add(s, e);
                *bytes += e - s;
            }
            if !q.writable && o.read_only.is_none() {
                let path = format!("/proc/self/fd/{}", o.memfd.as_raw_fd());
                let ro = rustix::fs::open(
                    path.as_str(),
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                // Without /proc there is no read-only way to share it.
                .map_err(|_| Errno::ENODEV)?;
                o.read_only = Some(ro);
            }
            let fd = match (&o.read_only, q.writable) {
                (Some(ro), false) => ro.as_fd(),
                _ => o.memfd.as_fd(),
            };
            send(id, q.writable, fd)
        })();
        match done {
            Ok(()) => {
                *o.refs.entry(q.client).or_default() += 1;
                *per_client.entry(q.client).or_default() += 1;
                Ok(id)
            }
            Err(e) => {
                if o.refs.is_empty() {
                    // Nobody was given it: it held nothing of anyone's.
                    self.close(vol, &mut inner, id, false);
                }
                Err(e)
            }
        }
    }

    /// Drops one mapping of `client` on object `id` (EINVAL if it has
    /// none); the object's last mapping writes it back and closes it.
    pub fn unmap(&self, vol: &mut Volume, client: u64, id: u64) -> Result<()> {
        let mut inner = self.inner();
        let o = inner.objects.get_mut(&id).ok_or(Errno::EINVAL)?;
        let n = o.refs.get_mut(&client).ok_or(Errno::EINVAL)?;
        *n -= 1;
        if *n == 0 {
            o.refs.remove(&client);
        }
        let last = o.refs.is_empty();
        if let Some(c) = inner.per_client.get_mut(&client) {
            *c -= 1;
            if *c == 0 {
                inner.per_client.remove(&client);
            }
        }
        if last {
            self.close(vol, &mut inner, id, true);
        }
        Ok(())
    }

    /// Writes `[off, off + len)` of object `id` back into the file (up to
    /// its size). EINVAL unless `client` maps the object.
    pub fn msync(&self, vol: &mut Volume, client: u64, id: u64, off: u64, len: u64) -> Result<()> {
        let inner = self.inner();
        let o = inner.objects.get(&id).ok_or(Errno::EINVAL)?;
        if !o.refs.contains_key(&client) {
            return Err(Errno::EINVAL);
        }
        o.write_back(vol, off, off.saturating_add(len))
    }

    /// A client went: each of its mappings goes as an UNMAP would.
    pub fn drop_client(&self, vol: &mut Volume, client: u64) {
        if !self.active() {
            return;
        }
        let mut inner = self.inner();
        if inner.per_client.remove(&client).is_none() {
            return;
        }
        let mut emptied = Vec::new();
        for (&id, o) in inner.objects.iter_mut() {
            if o.refs.remove(&client).is_some() && o.refs.is_empty() {
                emptied.push(id);
            }
        }
        for id in emptied {
            self.close(vol, &mut inner, id, true);
        }
    }

    /// A fork: `holder` (the child's process, set aside until a child
    /// adopts it) holds the same mappings as `client`, as the child's
    /// memory does, so the objects outlive the parent's unmaps while the
    /// child may store into them. Not counted against the per-client cap:
    /// the kernel made these mappings, not a request.
    pub fn inherit(&self, client: u64, holder: u64) {
        if !self.active() {
            return;
        }
        let mut inner = self.inner();
        let mut n = 0;
        for o in inner.objects.values_mut() {
            if let Some(&r) = o.refs.get(&client) {
                o.refs.insert(holder, r);
                n += r as usize;
            }
        }
        if n > 0 {
            inner.per_client.insert(holder, n);
        }
    }

    /// The mappings `holder` holds become `client`'s (the child adopted
    /// its process).
    pub fn rehome(&self, holder: u64, client: u64) {
        if !self.active() {
            return;
        }
        let mut inner = self.inner();
        let Some(n) = inner.per_client.remove(&holder) else {
            return;
        };
        *inner.per_client.entry(client).or_default() += n;
        for o in inner.objects.values_mut() {
            if let Some(r) = o.refs.remove(&holder) {
                *o.refs.entry(client).or_default() += r;
            }
        }
    }

    /// The server stops: every object is written back and closed.
    pub fn close_all(&self, vol: &mut Volume) {
        let mut inner = self.inner();
        let ids: Vec<u64> = inner.objects.keys().copied().collect();
        for id in ids {
            self.close(vol, &mut inner, id, true);
        }
        inner.per_client.clear();
    }

    /// Removes object `id`, written back first if `write_back`, and lets
    /// go of its inode. A write-back that fails (a volume turned
    /// read-only, a full one) loses the stores, as a kernel's failed
    /// writeback of a mapping does: the mapping's munmap succeeds all the
    /// same.
    fn close(&self, vol: &mut Volume, inner: &mut Inner, id: u64, write_back: bool) {
        let Some(o) = inner.objects.remove(&id) else {
            return;
        };
        inner.by_ino.remove(&o.ino);
        inner.bytes -= o.covered.bytes();
        self.live.fetch_sub(1, Ordering::Relaxed);
        if write_back && let Err(e) = o.write_back(vol, 0, u64::MAX) {
            eprintln!(
                "ulfs serve: writing back a shared mapping of inode {}: {e}",
                o.ino
            );
        }
        let _ = vol.close_ref(o.ino);
    }

    /// A read of `ino` at `off` found `buf` in the file: the object's
    /// bytes replace it where the object covers.
    pub fn overlay(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<()> {
        let inner = self.inner();
        let Some(o) = inner.by_ino.get(&ino).and_then(|id| inner.objects.get(id)) else {
            return Ok(());
        };
        for (s, e) in o.covered.within(off, off.saturating_add(buf.len() as u64)) {
            let from = (s - off) as usize;
            let to = (e - off) as usize;
            read_all(o.memfd.as_fd(), &mut buf[from..to], s)?;
        }
        Ok(())
    }

    /// A write put `data` at `off` of `ino`, whose size went from `old`
    /// to `new`: the object gets the same bytes where it covers, after
    /// zeros past the old end (bytes a growth adds read as zeros, except
    /// those written).
    pub fn wrote(&self, ino: Ino, off: u64, data: &[u8], old: u64, new: u64) -> Result<()> {
        let inner = self.inner();
        let Some(o) = inner.by_ino.get(&ino).and_then(|id| inner.objects.get(id)) else {
            return Ok(());
        };
        if new > old {
            for (s, e) in o.covered.within(old, u64::MAX) {
                o.zero(s, e)?;
            }
        }
        for (s, e) in o.covered.within(off, off.saturating_add(data.len() as u64)) {
            let from = (s - off) as usize;
            let to = (e - off) as usize;
            write_all(o.memfd.as_fd(), &data[from..to], s)?;
        }
        Ok(())
    }

    /// `ino`'s bytes in `[from, to)` became zeros (a truncation, either
    /// way, from the smaller size; a punched hole): so do the object's.
    pub fn zeroed(&self, ino: Ino, from: u64, to: u64) -> Result<()> {
        let inner = self.inner();
        let Some(o) = inner.by_ino.get(&ino).and_then(|id| inner.objects.get(id)) else {
            return Ok(());
        };
        for (s, e) in o.covered.within(from, to) {
            o.zero(s, e)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_merges_and_reports_gaps() {
        let mut c = Coverage::default();
        c.add(8192, 12288);
        c.add(0, 4096);
        assert_eq!(c.gaps(0, 16384), vec![(4096, 8192), (12288, 16384)]);
        c.add(4096, 8192);
        assert_eq!(c.0, vec![(0, 12288)]);
        c.add(20480, 24576);
        c.add(12288, 16384);
        assert_eq!(c.0, vec![(0, 16384), (20480, 24576)]);
        assert_eq!(c.bytes(), 20480);
        assert_eq!(
            c.within(100, 22000).collect::<Vec<_>>(),
            vec![(100, 16384), (20480, 22000)]
        );
        assert!(c.gaps(0, 16384).is_empty());
        assert_eq!(c.gaps(16000, 21000), vec![(16384, 20480)]);
        c.add(0, 30000);
        assert_eq!(c.0, vec![(0, 30000)]);
        assert_eq!(c.within(30000, 40000).count(), 0);
    }
}

//! One interface (`Side`) over both the host and ulfs, so each step runs
//! the same way on both.

use super::*;

/// One side of the comparison; both implement the same operations so the
/// harness can run a step on each and compare.
pub trait Side {
    fn open(&mut self, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32>;
    fn close(&mut self, fd: i32) -> Result<(), i32>;
    fn read(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32>;
    fn write(&mut self, fd: i32, buf: &[u8]) -> Result<usize, i32>;
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> Result<usize, i32>;
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32>;
    fn lseek(&mut self, fd: i32, off: i64, whence: i32) -> Result<u64, i32>;
    fn fstat(&mut self, fd: i32) -> Result<St, i32>;
    fn stat(&mut self, p: &[u8]) -> Result<St, i32>;
    fn lstat(&mut self, p: &[u8]) -> Result<St, i32>;
    fn mkdir(&mut self, p: &[u8], mode: u32) -> Result<(), i32>;
    fn rmdir(&mut self, p: &[u8]) -> Result<(), i32>;
    fn unlink(&mut self, p: &[u8]) -> Result<(), i32>;
    fn rename2(&mut self, a: &[u8], b: &[u8], flags: u32) -> Result<(), i32>;
    fn link(&mut self, a: &[u8], b: &[u8]) -> Result<(), i32>;
    fn symlink(&mut self, t: &[u8], l: &[u8]) -> Result<(), i32>;
    fn readlink(&mut self, p: &[u8]) -> Result<Vec<u8>, i32>;
    fn truncate(&mut self, p: &[u8], n: u64) -> Result<(), i32>;
    fn ftruncate(&mut self, fd: i32, n: u64) -> Result<(), i32>;
    fn chmod(&mut self, p: &[u8], mode: u32) -> Result<(), i32>;
    fn dup(&mut self, fd: i32) -> Result<i32, i32>;
    fn dup2(&mut self, a: i32, b: i32) -> Result<i32, i32>;
    fn getdents64(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32>;
    fn fsync(&mut self, fd: i32) -> Result<(), i32>;
    fn fdatasync(&mut self, fd: i32) -> Result<(), i32>;
    fn fchmod(&mut self, fd: i32, mode: u32) -> Result<(), i32>;
    fn chown(&mut self, p: &[u8], uid: u32, gid: u32) -> Result<(), i32>;
    fn fchown(&mut self, fd: i32, uid: u32, gid: u32) -> Result<(), i32>;
    fn chdir(&mut self, p: &[u8]) -> Result<(), i32>;
    fn getcwd(&mut self) -> Result<Vec<u8>, i32>;
    /// (atime, mtime, ctime) of `p` (lstat).
    fn times(&mut self, p: &[u8]) -> Result<Times, i32>;
    /// Sets atime and mtime of `p` (not following a final symlink).
    fn set_times(&mut self, p: &[u8], a: (i64, i64), m: (i64, i64)) -> Result<(), i32>;
    /// Maps a model path to this side's path.
    fn map(&self, p: &[u8]) -> Vec<u8>;
}

pub fn unit<T>(r: Result<T, i32>) -> Result<(), i32> {
    r.map(|_| ())
}

pub struct HostSide {
    /// Prefix prepended to every path ("" when chrooted).
    pub prefix: Vec<u8>,
}

impl Side for HostSide {
    fn open(&mut self, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        host::open(p, flags, mode)
    }
    fn close(&mut self, fd: i32) -> Result<(), i32> {
        unit(host::close(fd))
    }
    fn read(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        host::read(fd, buf).map(|n| n as usize)
    }
    fn write(&mut self, fd: i32, buf: &[u8]) -> Result<usize, i32> {
        host::write(fd, buf).map(|n| n as usize)
    }
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> Result<usize, i32> {
        host::pread(fd, buf, off).map(|n| n as usize)
    }
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32> {
        host::pwrite(fd, buf, off).map(|n| n as usize)
    }
    fn lseek(&mut self, fd: i32, off: i64, whence: i32) -> Result<u64, i32> {
        host::lseek(fd, off, whence).map(|n| n as u64)
    }
    fn fstat(&mut self, fd: i32) -> Result<St, i32> {
        host::fstat(fd).map(|s| St::from_host(&s))
    }
    fn stat(&mut self, p: &[u8]) -> Result<St, i32> {
        host::stat(p).map(|s| St::from_host(&s))
    }
    fn lstat(&mut self, p: &[u8]) -> Result<St, i32> {
        host::lstat(p).map(|s| St::from_host(&s))
    }
    fn mkdir(&mut self, p: &[u8], mode: u32) -> Result<(), i32> {
        unit(host::mkdir(p, mode))
    }
    fn rmdir(&mut self, p: &[u8]) -> Result<(), i32> {
        unit(host::rmdir(p))
    }
    fn unlink(&mut self, p: &[u8]) -> Result<(), i32> {
        unit(host::unlink(p))
    }
    fn rename2(&mut self, a: &[u8], b: &[u8], flags: u32) -> Result<(), i32> {
        unit(host::rename2(a, b, flags))
    }
    fn link(&mut self, a: &[u8], b: &[u8]) -> Result<(), i32> {
        unit(host::link(a, b))
    }
    fn symlink(&mut self, t: &[u8], l: &[u8]) -> Result<(), i32> {
        unit(host::symlink(t, l))
    }
    fn readlink(&mut self, p: &[u8]) -> Result<Vec<u8>, i32> {
        host::readlink(p)
    }
    fn truncate(&mut self, p: &[u8], n: u64) -> Result<(), i32> {
        unit(host::truncate(p, n))
    }
    fn ftruncate(&mut self, fd: i32, n: u64) -> Result<(), i32> {
        unit(host::ftruncate(fd, n))
    }
    fn chmod(&mut self, p: &[u8], mode: u32) -> Result<(), i32> {
        unit(host::chmod(p, mode))
    }
    fn dup(&mut self, fd: i32) -> Result<i32, i32> {
        host::dup(fd)
    }
    fn dup2(&mut self, a: i32, b: i32) -> Result<i32, i32> {
        host::dup2(a, b)
    }
    fn getdents64(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        host::getdents64(fd, buf).map(|n| n as usize)
    }
    fn fsync(&mut self, fd: i32) -> Result<(), i32> {
        unit(host::fsync(fd))
    }
    fn fdatasync(&mut self, fd: i32) -> Result<(), i32> {
        unit(host::fdatasync(fd))
    }
    fn fchmod(&mut self, fd: i32, mode: u32) -> Result<(), i32> {
        unit(host::fchmod(fd, mode))
    }
    fn chown(&mut self, p: &[u8], uid: u32, gid: u32) -> Result<(), i32> {
        unit(host::chown(p, uid, gid))
    }
    fn fchown(&mut self, fd: i32, uid: u32, gid: u32) -> Result<(), i32> {
        unit(host::fchown(fd, uid, gid))
    }
    fn chdir(&mut self, p: &[u8]) -> Result<(), i32> {
        unit(host::chdir(p))
    }
    fn getcwd(&mut self) -> Result<Vec<u8>, i32> {
        host::getcwd()
    }
    fn times(&mut self, p: &[u8]) -> Result<Times, i32> {
        host::times(p)
    }
    fn set_times(&mut self, p: &[u8], a: (i64, i64), m: (i64, i64)) -> Result<(), i32> {
        unit(host::set_times(p, a, m))
    }
    fn map(&self, p: &[u8]) -> Vec<u8> {
        map_path(&self.prefix, p)
    }
}

pub struct UlfsSide {
    pub fs: Target,
    pub prefix: Vec<u8>,
}

pub fn ue<T>(r: ulfs::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.raw())
}

impl Side for UlfsSide {
    fn open(&mut self, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        ue(self.fs.open(p, flags, mode))
    }
    fn close(&mut self, fd: i32) -> Result<(), i32> {
        ue(self.fs.close(fd))
    }
    fn read(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        ue(self.fs.read(fd, buf))
    }
    fn write(&mut self, fd: i32, buf: &[u8]) -> Result<usize, i32> {
        ue(self.fs.write(fd, buf))
    }
    fn pread(&mut self, fd: i32, buf: &mut [u8], off: u64) -> Result<usize, i32> {
        ue(self.fs.pread(fd, buf, off))
    }
    fn pwrite(&mut self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32> {
        ue(self.fs.pwrite(fd, buf, off))
    }
    fn lseek(&mut self, fd: i32, off: i64, whence: i32) -> Result<u64, i32> {
        ue(self.fs.lseek(fd, off, whence))
    }
    fn fstat(&mut self, fd: i32) -> Result<St, i32> {
        ue(self.fs.fstat(fd)).map(|s| St::from_ulfs(&s))
    }
    fn stat(&mut self, p: &[u8]) -> Result<St, i32> {
        ue(self.fs.stat(p)).map(|s| St::from_ulfs(&s))
    }
    fn lstat(&mut self, p: &[u8]) -> Result<St, i32> {
        ue(self.fs.lstat(p)).map(|s| St::from_ulfs(&s))
    }
    fn mkdir(&mut self, p: &[u8], mode: u32) -> Result<(), i32> {
        ue(self.fs.mkdir(p, mode))
    }
    fn rmdir(&mut self, p: &[u8]) -> Result<(), i32> {
        ue(self.fs.rmdir(p))
    }
    fn unlink(&mut self, p: &[u8]) -> Result<(), i32> {
        ue(self.fs.unlink(p))
    }
    fn rename2(&mut self, a: &[u8], b: &[u8], flags: u32) -> Result<(), i32> {
        if flags == 0 {
            ue(self.fs.rename(a, b))
        } else {
            ue(self.fs.rename2(a, b, flags))
        }
    }
    fn link(&mut self, a: &[u8], b: &[u8]) -> Result<(), i32> {
        ue(self.fs.link(a, b))
    }
    fn symlink(&mut self, t: &[u8], l: &[u8]) -> Result<(), i32> {
        ue(self.fs.symlink(t, l))
    }
    fn readlink(&mut self, p: &[u8]) -> Result<Vec<u8>, i32> {
        ue(self.fs.readlink(p))
    }
    fn truncate(&mut self, p: &[u8], n: u64) -> Result<(), i32> {
        ue(self.fs.truncate(p, n))
    }
    fn ftruncate(&mut self, fd: i32, n: u64) -> Result<(), i32> {
        ue(self.fs.ftruncate(fd, n))
    }
    fn chmod(&mut self, p: &[u8], mode: u32) -> Result<(), i32> {
        ue(self.fs.chmod(p, mode))
    }
    fn dup(&mut self, fd: i32) -> Result<i32, i32> {
        ue(self.fs.dup(fd))
    }
    fn dup2(&mut self, a: i32, b: i32) -> Result<i32, i32> {
        ue(self.fs.dup2(a, b))
    }
    fn getdents64(&mut self, fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        ue(self.fs.getdents64(fd, buf))
    }
    fn fsync(&mut self, fd: i32) -> Result<(), i32> {
        ue(self.fs.fsync(fd))
    }
    fn fdatasync(&mut self, fd: i32) -> Result<(), i32> {
        ue(self.fs.fdatasync(fd))
    }
    fn fchmod(&mut self, fd: i32, mode: u32) -> Result<(), i32> {
        ue(self.fs.fchmod(fd, mode))
    }
    fn chown(&mut self, p: &[u8], uid: u32, gid: u32) -> Result<(), i32> {
        ue(self.fs.chown(p, uid, gid))
    }
    fn fchown(&mut self, fd: i32, uid: u32, gid: u32) -> Result<(), i32> {
        ue(self.fs.fchown(fd, uid, gid))
    }
    fn chdir(&mut self, p: &[u8]) -> Result<(), i32> {
        ue(self.fs.chdir(p))
    }
    fn getcwd(&mut self) -> Result<Vec<u8>, i32> {
        ue(self.fs.getcwd())
    }
    fn times(&mut self, p: &[u8]) -> Result<Times, i32> {
        let st = ue(self.fs.lstat(p))?;
        Ok([
            (st.atime.sec, st.atime.nsec),
            (st.mtime.sec, st.mtime.nsec),
            (st.ctime.sec, st.ctime.nsec),
        ])
    }
    fn set_times(&mut self, p: &[u8], a: (i64, i64), m: (i64, i64)) -> Result<(), i32> {
        let ts = |(sec, nsec)| ulfs::Timespec { sec, nsec };
        ue(self.fs.utimensat(
            libc::AT_FDCWD,
            p,
            Some([ts(a), ts(m)]),
            libc::AT_SYMLINK_NOFOLLOW,
        ))
    }
    fn map(&self, p: &[u8]) -> Vec<u8> {
        map_path(&self.prefix, p)
    }
}

/// `prefix` + `p`, keeping "" as "" (ENOENT on both sides).
pub fn map_path(prefix: &[u8], p: &[u8]) -> Vec<u8> {
    if prefix.is_empty() || p.is_empty() {
        return p.to_vec();
    }
    let mut v = prefix.to_vec();
    if p[0] != b'/' {
        v.push(b'/');
    }
    v.extend_from_slice(p);
    v
}

/// Parses linux_dirent64 records into `out`.
pub fn parse_dirents(buf: &[u8], out: &mut Listing) -> Result<(), String> {
    let mut i = 0;
    while i < buf.len() {
        if i + 20 > buf.len() {
            return Err(format!(
                "truncated dirent record at byte {i} of {}",
                buf.len()
            ));
        }
        let reclen = u16::from_ne_bytes([buf[i + 16], buf[i + 17]]) as usize;
        if reclen < 20 || i + reclen > buf.len() {
            return Err(format!(
                "bad d_reclen {reclen} at byte {i} of {}",
                buf.len()
            ));
        }
        let dtype = buf[i + 18];
        let name_area = &buf[i + 19..i + reclen];
        let Some(nul) = name_area.iter().position(|&b| b == 0) else {
            return Err(format!("dirent name without NUL at byte {i}"));
        };
        out.push((name_area[..nul].to_vec(), dtype));
        i += reclen;
    }
    Ok(())
}

/// Reads a directory descriptor to its end; the sorted listing or the first errno.
pub fn list_fd(side: &mut dyn Side, fd: i32, bufsz: usize) -> Result<Result<Listing, i32>, String> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; bufsz];
    for _ in 0..100_000 {
        match side.getdents64(fd, &mut buf) {
            Ok(0) => {
                out.sort();
                return Ok(Ok(out));
            }
            Ok(n) if n <= buf.len() => parse_dirents(&buf[..n], &mut out)?,
            Ok(n) => return Err(format!("getdents64 returned {n} > buffer {}", buf.len())),
            Err(e) => return Ok(Err(e)),
        }
    }
    Err("getdents64 never reached the end of the directory".into())
}

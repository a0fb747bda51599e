//! The host side of the model test: raw libc calls on the kernel's tmpfs.

use super::*;

pub fn cpath(p: &[u8]) -> CString {
    CString::new(p.to_vec()).expect("generated paths hold no NUL")
}

pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Turns a libc return value into `Ok(value)` / `Err(errno)`.
pub fn hr<T: Into<i64> + Copy>(r: T) -> Result<i64, i32> {
    let v: i64 = r.into();
    if v < 0 { Err(last_errno()) } else { Ok(v) }
}

pub mod host {
    use super::*;

    pub fn open(p: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        let c = cpath(p);
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        hr(unsafe { libc::open(c.as_ptr(), flags, mode as libc::c_uint) }).map(|v| v as i32)
    }
    pub fn close(fd: i32) -> Result<i64, i32> {
        // SAFETY: closing a descriptor number has no memory-safety effect;
        // the model only passes its own descriptors or the closed sentinel.
        hr(unsafe { libc::close(fd) })
    }
    pub fn read(fd: i32, buf: &mut [u8]) -> Result<i64, i32> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        hr(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } as i64)
    }
    pub fn write(fd: i32, buf: &[u8]) -> Result<i64, i32> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        hr(unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) } as i64)
    }
    pub fn pread(fd: i32, buf: &mut [u8], off: u64) -> Result<i64, i32> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        hr(
            unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t) }
                as i64,
        )
    }
    pub fn pwrite(fd: i32, buf: &[u8], off: u64) -> Result<i64, i32> {
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes.
        hr(unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t) } as i64)
    }
    pub fn lseek(fd: i32, off: i64, whence: i32) -> Result<i64, i32> {
        // SAFETY: lseek touches no memory of ours.
        hr(unsafe { libc::lseek(fd, off, whence) })
    }
    fn stat_with(f: impl FnOnce(*mut libc::stat) -> libc::c_int) -> Result<libc::stat, i32> {
        // SAFETY: `libc::stat` is plain integers; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        hr(f(&mut st)).map(|_| st)
    }
    pub fn fstat(fd: i32) -> Result<libc::stat, i32> {
        // SAFETY: `st` points to a live, writable `libc::stat`.
        stat_with(|st| unsafe { libc::fstat(fd, st) })
    }
    pub fn stat(p: &[u8]) -> Result<libc::stat, i32> {
        let c = cpath(p);
        // SAFETY: valid C string; `st` points to a live, writable `libc::stat`.
        stat_with(|st| unsafe { libc::stat(c.as_ptr(), st) })
    }
    pub fn lstat(p: &[u8]) -> Result<libc::stat, i32> {
        let c = cpath(p);
        // SAFETY: valid C string; `st` points to a live, writable `libc::stat`.
        stat_with(|st| unsafe { libc::lstat(c.as_ptr(), st) })
    }
    pub fn mkdir(p: &[u8], mode: u32) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::mkdir(c.as_ptr(), mode) })
    }
    pub fn rmdir(p: &[u8]) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::rmdir(c.as_ptr()) })
    }
    pub fn unlink(p: &[u8]) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::unlink(c.as_ptr()) })
    }
    pub fn rename2(a: &[u8], b: &[u8], flags: u32) -> Result<i64, i32> {
        let (ca, cb) = (cpath(a), cpath(b));
        if flags == 0 {
            // SAFETY: valid C strings.
            return hr(unsafe { libc::rename(ca.as_ptr(), cb.as_ptr()) });
        }
        // SAFETY: renameat2(olddirfd, oldpath, newdirfd, newpath, flags) with
        // valid C strings and AT_FDCWD.
        hr(unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                flags as libc::c_uint,
            )
        })
    }
    pub fn link(a: &[u8], b: &[u8]) -> Result<i64, i32> {
        let (ca, cb) = (cpath(a), cpath(b));
        // SAFETY: valid C strings.
        hr(unsafe { libc::link(ca.as_ptr(), cb.as_ptr()) })
    }
    pub fn symlink(t: &[u8], l: &[u8]) -> Result<i64, i32> {
        let (ct, cl) = (cpath(t), cpath(l));
        // SAFETY: valid C strings.
        hr(unsafe { libc::symlink(ct.as_ptr(), cl.as_ptr()) })
    }
    pub fn readlink(p: &[u8]) -> Result<Vec<u8>, i32> {
        let c = cpath(p);
        let mut buf = vec![0u8; 8192];
        // SAFETY: valid C string; `buf` is writable for `buf.len()` bytes.
        let n =
            hr(unsafe { libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) } as i64)?;
        buf.truncate(n as usize);
        Ok(buf)
    }
    pub fn truncate(p: &[u8], n: u64) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::truncate(c.as_ptr(), n as libc::off_t) })
    }
    pub fn ftruncate(fd: i32, n: u64) -> Result<i64, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::ftruncate(fd, n as libc::off_t) })
    }
    pub fn chmod(p: &[u8], mode: u32) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::chmod(c.as_ptr(), mode) })
    }
    /// (atime, mtime, ctime) of `p`, not following a final symlink.
    pub fn times(p: &[u8]) -> Result<Times, i32> {
        let st = lstat(p)?;
        Ok([
            (st.st_atime, st.st_atime_nsec),
            (st.st_mtime, st.st_mtime_nsec),
            (st.st_ctime, st.st_ctime_nsec),
        ])
    }
    /// utimensat(AT_FDCWD, p, [a, m], AT_SYMLINK_NOFOLLOW).
    pub fn set_times(p: &[u8], a: (i64, i64), m: (i64, i64)) -> Result<i64, i32> {
        let c = cpath(p);
        let ts = [
            libc::timespec {
                tv_sec: a.0,
                tv_nsec: a.1,
            },
            libc::timespec {
                tv_sec: m.0,
                tv_nsec: m.1,
            },
        ];
        // SAFETY: valid C string; `ts` is two live timespecs.
        hr(unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }
    pub fn chown(p: &[u8], uid: u32, gid: u32) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string.
        hr(unsafe { libc::chown(c.as_ptr(), uid, gid) })
    }
    pub fn fchown(fd: i32, uid: u32, gid: u32) -> Result<i64, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::fchown(fd, uid, gid) })
    }
    pub fn dup(fd: i32) -> Result<i32, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::dup(fd) }).map(|v| v as i32)
    }
    pub fn dup2(a: i32, b: i32) -> Result<i32, i32> {
        // SAFETY: `b` is always a descriptor this case owns (an open slot),
        // so no unrelated descriptor of the process is replaced.
        hr(unsafe { libc::dup2(a, b) }).map(|v| v as i32)
    }
    pub fn getdents64(fd: i32, buf: &mut [u8]) -> Result<i64, i32> {
        // SAFETY: `buf` is writable for `buf.len()` bytes.
        hr(unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) })
    }
    pub fn fsync(fd: i32) -> Result<i64, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::fsync(fd) })
    }
    pub fn fdatasync(fd: i32) -> Result<i64, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::fdatasync(fd) })
    }
    pub fn fchmod(fd: i32, mode: u32) -> Result<i64, i32> {
        // SAFETY: no memory is passed.
        hr(unsafe { libc::fchmod(fd, mode) })
    }
    pub fn chdir(p: &[u8]) -> Result<i64, i32> {
        let c = cpath(p);
        // SAFETY: valid C string; only called in a thread with a private
        // fs_struct (after unshare(CLONE_FS)), so no other thread is affected.
        hr(unsafe { libc::chdir(c.as_ptr()) })
    }
    pub fn getcwd() -> Result<Vec<u8>, i32> {
        let mut buf = vec![0u8; 8192];
        // SAFETY: `buf` is writable for `buf.len()` bytes; on success getcwd
        // stores a NUL-terminated string in it.
        let r = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if r.is_null() {
            return Err(last_errno());
        }
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(n);
        Ok(buf)
    }
}

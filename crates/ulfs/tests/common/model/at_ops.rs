//! The directory-relative calls of the model test (openat, mkdirat,
//! unlinkat, renameat2, linkat, fstatat, statx, faccessat, mknodat,
//! readlinkat, fchdir): their two sides and their steps. A directory
//! argument is `AT_FDCWD` or a descriptor slot (a file's slot gives
//! ENOTDIR, a closed one EBADF, on both sides alike). With `AT_FDCWD` a
//! path is mapped like every other path of the model; from a descriptor a
//! relative path is used as it is, and an absolute one mapped.

use super::*;

/// One side's directory-relative calls.
pub trait AtSide {
    fn openat(&mut self, d: i32, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32>;
    fn mkdirat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32>;
    fn unlinkat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<(), i32>;
    fn renameat2(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: u32) -> Result<(), i32>;
    fn linkat(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: i32) -> Result<(), i32>;
    fn fstatat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32>;
    fn statx(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32>;
    fn faccessat(&mut self, d: i32, p: &[u8], mode: i32, flags: i32) -> Result<(), i32>;
    fn mknodat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32>;
    fn readlinkat(&mut self, d: i32, p: &[u8]) -> Result<Vec<u8>, i32>;
    fn fchdir(&mut self, fd: i32) -> Result<(), i32>;
}

fn unit_rc(r: libc::c_int) -> Result<(), i32> {
    hr(r).map(|_| ())
}

impl AtSide for HostSide {
    fn openat(&mut self, d: i32, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        let c = cpath(p);
        // SAFETY: a NUL-terminated path that outlives the call.
        hr(unsafe { libc::openat(d, c.as_ptr(), flags, mode as libc::c_uint) }).map(|v| v as i32)
    }
    fn mkdirat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32> {
        let c = cpath(p);
        // SAFETY: as above.
        unit_rc(unsafe { libc::mkdirat(d, c.as_ptr(), mode) })
    }
    fn unlinkat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<(), i32> {
        let c = cpath(p);
        // SAFETY: as above.
        unit_rc(unsafe { libc::unlinkat(d, c.as_ptr(), flags) })
    }
    fn renameat2(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: u32) -> Result<(), i32> {
        let (a, b) = (cpath(a), cpath(b));
        // SAFETY: NUL-terminated paths; renameat2 reads nothing else.
        let r =
            unsafe { libc::syscall(libc::SYS_renameat2, od, a.as_ptr(), nd, b.as_ptr(), flags) };
        unit_rc(r as libc::c_int)
    }
    fn linkat(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: i32) -> Result<(), i32> {
        let (a, b) = (cpath(a), cpath(b));
        // SAFETY: NUL-terminated paths.
        unit_rc(unsafe { libc::linkat(od, a.as_ptr(), nd, b.as_ptr(), flags) })
    }
    fn fstatat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32> {
        let c = cpath(p);
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a writable stat buffer.
        hr(unsafe { libc::fstatat(d, c.as_ptr(), &mut st, flags) })?;
        Ok(St::from_host(&st))
    }
    fn statx(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32> {
        let c = cpath(p);
        // SAFETY: zeroed memory is a valid `struct statx`.
        let mut x: libc::statx = unsafe { std::mem::zeroed() };
        let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
        // SAFETY: a NUL-terminated path and a writable statx buffer.
        hr(unsafe { libc::statx(d, c.as_ptr(), flags, mask, &mut x) })?;
        Ok(St::new(
            x.stx_mode as u32,
            x.stx_nlink as u64,
            x.stx_size,
            x.stx_uid,
            x.stx_gid,
        ))
    }
    fn faccessat(&mut self, d: i32, p: &[u8], mode: i32, flags: i32) -> Result<(), i32> {
        let c = cpath(p);
        // SAFETY: a NUL-terminated path; faccessat2 reads nothing else.
        let r = unsafe { libc::syscall(libc::SYS_faccessat2, d, c.as_ptr(), mode, flags) };
        unit_rc(r as libc::c_int)
    }
    fn mknodat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32> {
        let c = cpath(p);
        // SAFETY: a NUL-terminated path.
        unit_rc(unsafe { libc::mknodat(d, c.as_ptr(), mode, 0) })
    }
    fn readlinkat(&mut self, d: i32, p: &[u8]) -> Result<Vec<u8>, i32> {
        let c = cpath(p);
        let mut buf = vec![0u8; 4096];
        // SAFETY: a NUL-terminated path and a writable buffer of that length.
        let n = unsafe { libc::readlinkat(d, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(hr(n as i64)? as usize);
        Ok(buf)
    }
    fn fchdir(&mut self, fd: i32) -> Result<(), i32> {
        // SAFETY: fchdir touches no memory of ours.
        unit_rc(unsafe { libc::fchdir(fd) })
    }
}

impl AtSide for UlfsSide {
    fn openat(&mut self, d: i32, p: &[u8], flags: i32, mode: u32) -> Result<i32, i32> {
        ue(self.fs.openat(d, p, flags, mode))
    }
    fn mkdirat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32> {
        ue(self.fs.mkdirat(d, p, mode))
    }
    fn unlinkat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<(), i32> {
        ue(self.fs.unlinkat(d, p, flags))
    }
    fn renameat2(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: u32) -> Result<(), i32> {
        ue(self.fs.renameat2(od, a, nd, b, flags))
    }
    fn linkat(&mut self, od: i32, a: &[u8], nd: i32, b: &[u8], flags: i32) -> Result<(), i32> {
        ue(self.fs.linkat(od, a, nd, b, flags))
    }
    fn fstatat(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32> {
        ue(self.fs.fstatat(d, p, flags)).map(|s| St::from_ulfs(&s))
    }
    fn statx(&mut self, d: i32, p: &[u8], flags: i32) -> Result<St, i32> {
        let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
        let x = ue(self.fs.statx(d, p, flags, mask))?;
        // What statx promises: the basic stats and the birth time, which
        // the stat fields compared here must agree with.
        assert_eq!(x.mask, mask, "statx mask");
        Ok(St::from_ulfs(&x.stat))
    }
    fn faccessat(&mut self, d: i32, p: &[u8], mode: i32, flags: i32) -> Result<(), i32> {
        ue(self.fs.faccessat(d, p, mode, flags))
    }
    fn mknodat(&mut self, d: i32, p: &[u8], mode: u32) -> Result<(), i32> {
        ue(self.fs.mknodat(d, p, mode, 0))
    }
    fn readlinkat(&mut self, d: i32, p: &[u8]) -> Result<Vec<u8>, i32> {
        ue(self.fs.readlinkat(d, p))
    }
    fn fchdir(&mut self, fd: i32) -> Result<(), i32> {
        ue(self.fs.fchdir(fd))
    }
}

/// Runs `f` on both sides with their own (dirfd, path) arguments.
macro_rules! both {
    ($h:expr, $d:expr, $p:expr, |$side:ident, $fd:ident, $path:ident| $body:expr) => {{
        let mut out = [Out::Ok, Out::Ok];
        let (hfd, ufd) = $h.dirfds($d);
        let hpath = $h.at_path(&$h.host, $d, $p);
        let upath = $h.at_path(&$h.ulfs, $d, $p);
        {
            let ($side, $fd, $path) = (&mut $h.host as &mut dyn AtSide, hfd, &hpath[..]);
            out[0] = $body;
        }
        {
            let ($side, $fd, $path) = (&mut $h.ulfs as &mut dyn AtSide, ufd, &upath[..]);
            out[1] = $body;
        }
        out
    }};
}

impl Harness {
    /// (host, ulfs) descriptors for a directory argument.
    pub fn dirfds(&self, d: D) -> (i32, i32) {
        match d {
            D::Cwd => (libc::AT_FDCWD, libc::AT_FDCWD),
            D::Slot(s) => {
                let (_, h, u) = self.fds(s);
                (h, u)
            }
        }
    }

    /// A path as one side takes it with directory argument `d`.
    pub fn at_path(&self, side: &dyn Side, d: D, p: &P) -> Vec<u8> {
        match d {
            D::Slot(_) if p.0.first() != Some(&b'/') => p.0.clone(),
            _ => side.map(&p.0),
        }
    }

    /// Runs one directory-relative step; `None` for any other op.
    pub fn step_at(&mut self, op: &Op) -> Option<Result<(Out, Out), String>> {
        let ok = |r: Result<(), i32>| ok_or_err(r, |_| Out::Ok);
        // AT_FDCWD with an empty path (AT_EMPTY_PATH) names the working
        // directory itself: the process's, on the host, unless chrooted.
        let cwd_itself = |d: &D, p: &P| *d == D::Cwd && p.0.is_empty();
        let names_cwd = match op {
            Op::Openat(d, p, ..)
            | Op::Mkdirat(d, p, _)
            | Op::Unlinkat(d, p, _)
            | Op::Fstatat(d, p, _)
            | Op::Statx(d, p, _)
            | Op::Faccessat(d, p, ..)
            | Op::Mknodat(d, p, _)
            | Op::Readlinkat(d, p) => cwd_itself(d, p),
            Op::Renameat2(a, p, b, q, _) | Op::Linkat(a, p, b, q, _) => {
                cwd_itself(a, p) || cwd_itself(b, q)
            }
            _ => false,
        };
        if names_cwd && !self.chrooted {
            let o = Out::Skip("working directory is process-wide without chroot");
            return Some(Ok((o.clone(), o)));
        }
        let res = match op {
            Op::Openat(d, p, fl, m) => {
                let [h, u] = both!(self, *d, p, |s, fd, path| ok_or_err(
                    s.openat(fd, path, fl.0, m.0).map(|v| v as i64),
                    |v| Out::Num(v as u64)
                ));
                // Keep what opened (so Drop closes the host one).
                let fd_of = |o: &Out| match o {
                    Out::Num(v) => Some(*v as i32),
                    _ => None,
                };
                match (fd_of(&h), fd_of(&u)) {
                    (Some(hf), Some(uf)) => self.slots.push(Some((hf, uf))),
                    (Some(hf), None) => self.slots.push(Some((hf, CLOSED_FD))),
                    _ => {}
                }
                let fd = |o: Out| if fd_of(&o).is_some() { Out::Fd } else { o };
                [fd(h), fd(u)]
            }
            Op::Mkdirat(d, p, m) => both!(self, *d, p, |s, fd, path| ok(s.mkdirat(fd, path, m.0))),
            Op::Unlinkat(d, p, fl) => {
                both!(self, *d, p, |s, fd, path| ok(s.unlinkat(fd, path, *fl)))
            }
            Op::Fstatat(d, p, fl) => both!(self, *d, p, |s, fd, path| ok_or_err(
                s.fstatat(fd, path, *fl),
                Out::Stat
            )),
            Op::Statx(d, p, fl) => both!(self, *d, p, |s, fd, path| ok_or_err(
                s.statx(fd, path, *fl),
                Out::Stat
            )),
            Op::Faccessat(d, p, mode, fl) => both!(self, *d, p, |s, fd, path| ok(
                s.faccessat(fd, path, *mode, *fl)
            )),
            Op::Mknodat(d, p, m) => both!(self, *d, p, |s, fd, path| ok(s.mknodat(fd, path, m.0))),
            Op::Readlinkat(d, p) => both!(self, *d, p, |s, fd, path| ok_or_err(
                s.readlinkat(fd, path),
                Out::Path
            )),
            Op::Renameat2(od, a, nd, b, fl) => {
                self.two_paths(*od, a, *nd, b, |s, ofd, a, nfd, b| {
                    ok(s.renameat2(ofd, a, nfd, b, *fl))
                })
            }
            Op::Linkat(od, a, nd, b, fl) => self.two_paths(*od, a, *nd, b, |s, ofd, a, nfd, b| {
                ok(s.linkat(ofd, a, nfd, b, *fl))
            }),
            Op::Fchdir(_) if !self.chrooted => {
                let o = Out::Skip("working directory is process-wide without chroot");
                [o.clone(), o]
            }
            Op::Fchdir(slot) => {
                let (_, h, u) = self.fds(*slot);
                [ok(self.host.fchdir(h)), ok(self.ulfs.fchdir(u))]
            }
            _ => return None,
        };
        let [h, u] = res;
        Some(Ok((h, u)))
    }

    /// A call taking two (dirfd, path) pairs, on both sides.
    fn two_paths(
        &mut self,
        od: D,
        a: &P,
        nd: D,
        b: &P,
        f: impl Fn(&mut dyn AtSide, i32, &[u8], i32, &[u8]) -> Out,
    ) -> [Out; 2] {
        let ((ho, uo), (hn, un)) = (self.dirfds(od), self.dirfds(nd));
        let (ha, hb) = (
            self.at_path(&self.host, od, a),
            self.at_path(&self.host, nd, b),
        );
        let (ua, ub) = (
            self.at_path(&self.ulfs, od, a),
            self.at_path(&self.ulfs, nd, b),
        );
        [
            f(&mut self.host, ho, &ha, hn, &hb),
            f(&mut self.ulfs, uo, &ua, un, &ub),
        ]
    }
}

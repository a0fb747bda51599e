//! The harness: runs each step on both sides, compares results, offsets,
//! open descriptors and finally the whole tree.

use super::*;

/// How the host tree is reached.
pub enum HostMode {
    /// This thread is chrooted into the host tree: paths are used as they are.
    Chroot,
    /// Both trees live under an identical `PREFIX_DEPTH`-deep prefix.
    Prefix,
}

pub struct Harness {
    pub host: HostSide,
    pub ulfs: UlfsSide,
    pub chrooted: bool,
    /// Every descriptor obtained so far: Some((host fd, ulfs fd)) while open.
    pub slots: Slots,
    pub trace: Vec<String>,
    /// Steps run, and the reasons of those that were skipped (not run on
    /// either side, so not compared).
    pub stats: CaseStats,
}

/// What a case ran.
#[derive(Default, Debug, Clone)]
pub struct CaseStats {
    pub steps: u64,
    /// Steps that succeeded (on both sides, as they agreed).
    pub succeeded: u64,
    pub skipped: Vec<&'static str>,
    /// Nodes whose atime/mtime change was compared, summed over steps.
    pub times_checked: u64,
}

/// Skip reasons that come from running without privileges (root, or
/// CAP_SYS_CHROOT): in CI, which runs as root, there must be none.
pub const PRIVILEGE_SKIPS: [&str; 3] = [
    SKIP_CHOWN,
    "working directory is process-wide without chroot",
    "absolute symlink target without chroot",
];
const SKIP_CHOWN: &str = "only root may give files away on the host";

/// Sentinel times set before each step: an update to "now" shows as a
/// change whatever the clocks' granularity (tmpfs stamps with the coarse
/// tick clock, ulfs with nanoseconds, so comparing values would not do).
const OLD_ATIME: (i64, i64) = (1_000_000_000, 111);
const OLD_MTIME: (i64, i64) = (1_000_000_500, 222);

/// A node whose times were set before a step: path, atime, mtime, and on
/// sampled steps the ctimes (host, ulfs) the setting left.
pub type Watched = (
    Vec<u8>,
    (i64, i64),
    (i64, i64),
    Option<((i64, i64), (i64, i64))>,
);

/// Every n-th step also compares whether ctime changed: that needs a wait
/// for the host's coarse clock to tick past the ctime the setup left.
const CTIME_EVERY: usize = 8;

/// CLOCK_REALTIME_COARSE now, the clock tmpfs stamps with.
fn coarse_now() -> (i64, i64) {
    // SAFETY: `ts` is a live, writable timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the clock id is valid on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
}

/// The descriptor slots; host descriptors still open are closed on drop.
#[derive(Default)]
pub struct Slots(pub Vec<Option<(i32, i32)>>);

impl Drop for Slots {
    fn drop(&mut self) {
        for (h, _) in self.0.iter().flatten() {
            let _ = host::close(*h);
        }
    }
}

impl std::ops::Deref for Slots {
    type Target = Vec<Option<(i32, i32)>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

pub fn ok_or_err<T>(r: Result<T, i32>, f: impl FnOnce(T) -> Out) -> Out {
    match r {
        Ok(v) => f(v),
        Err(e) => Out::Err(e),
    }
}

impl Harness {
    /// Resolves a slot to (slot index, host fd, ulfs fd); closed or absent
    /// slots give the closed sentinel on both sides.
    pub fn fds(&self, s: S) -> (Option<usize>, i32, i32) {
        if self.slots.is_empty() {
            return (None, CLOSED_FD, CLOSED_FD);
        }
        let open: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect();
        let i = if s.0 < OPEN_SLOT_PICKS && !open.is_empty() {
            open[s.0 as usize % open.len()]
        } else {
            s.0 as usize % self.slots.len()
        };
        match self.slots[i] {
            Some((h, u)) => (Some(i), h, u),
            None => (Some(i), CLOSED_FD, CLOSED_FD),
        }
    }

    pub fn describe(&self, s: S) -> String {
        match self.fds(s) {
            (None, ..) => "no slot yet: closed fd".into(),
            (Some(i), CLOSED_FD, _) => format!("slot {i}: closed"),
            (Some(i), h, u) => format!("slot {i}: host fd {h}, ulfs fd {u}"),
        }
    }

    /// Runs one op on both sides, returning (host, ulfs) outcomes.
    pub fn step(&mut self, op: &Op) -> Result<(Out, Out), String> {
        if let Some(r) = self.step_at(op) {
            return r;
        }
        let hp = |p: &P, h: &HostSide| h.map(&p.0);
        let mut res: [Out; 2] = [Out::Ok, Out::Ok];
        match op {
            Op::Open(p, fl, m) => {
                let hr = self.host.open(&hp(p, &self.host), fl.0, m.0);
                let ur = self.ulfs.open(&self.ulfs.map(&p.0), fl.0, m.0);
                match (hr, ur) {
                    (Ok(h), Ok(u)) => {
                        self.slots.push(Some((h, u)));
                        res = [Out::Fd, Out::Fd];
                    }
                    (hr, ur) => {
                        // Keep whatever did open, so Drop closes the host one.
                        if let Ok(h) = hr {
                            self.slots.push(Some((h, CLOSED_FD)));
                        }
                        res = [ok_or_err(hr, |_| Out::Fd), ok_or_err(ur, |_| Out::Fd)];
                    }
                }
            }
            Op::Close(s) => {
                let (i, h, u) = self.fds(*s);
                let hr = self.host.close(h);
                let ur = self.ulfs.close(u);
                if let (Some(i), Ok(())) = (i, hr) {
                    self.slots[i] = None;
                }
                res = [ok_or_err(hr, |_| Out::Ok), ok_or_err(ur, |_| Out::Ok)];
            }
            Op::Read(s, n) | Op::Pread(s, n, _) => {
                let (_, h, u) = self.fds(*s);
                let off = if let Op::Pread(_, _, o) = op {
                    Some(*o)
                } else {
                    None
                };
                for (k, (side, fd)) in [
                    (&mut self.host as &mut dyn Side, h),
                    (&mut self.ulfs as &mut dyn Side, u),
                ]
                .into_iter()
                .enumerate()
                {
                    let mut buf = vec![0xEEu8; *n];
                    let r = match off {
                        Some(o) => side.pread(fd, &mut buf, o),
                        None => side.read(fd, &mut buf),
                    };
                    res[k] = ok_or_err(r, |m| {
                        buf.truncate(m.min(*n));
                        Out::Data(buf)
                    });
                }
            }
            Op::Write(s, n, b) | Op::Pwrite(s, n, _, b) => {
                let (_, h, u) = self.fds(*s);
                let off = if let Op::Pwrite(_, _, o, _) = op {
                    Some(*o)
                } else {
                    None
                };
                // Distinct bytes per position so misplaced data shows.
                let buf: Vec<u8> = (0..*n).map(|i| b.wrapping_add((i / 7) as u8)).collect();
                for (k, (side, fd)) in [
                    (&mut self.host as &mut dyn Side, h),
                    (&mut self.ulfs as &mut dyn Side, u),
                ]
                .into_iter()
                .enumerate()
                {
                    let r = match off {
                        Some(o) => side.pwrite(fd, &buf, o),
                        None => side.write(fd, &buf),
                    };
                    res[k] = ok_or_err(r, |m| Out::Num(m as u64));
                }
            }
            Op::Lseek(s, off, w) => {
                let (_, h, u) = self.fds(*s);
                // Offsets of directory descriptors are opaque cookies.
                if let Ok(st) = host::fstat(h)
                    && st.st_mode & libc::S_IFMT == libc::S_IFDIR
                {
                    let o = Out::Skip("lseek on a directory descriptor");
                    return Ok((o.clone(), o));
                }
                res = [
                    ok_or_err(self.host.lseek(h, *off, w.0), Out::Num),
                    ok_or_err(self.ulfs.lseek(u, *off, w.0), Out::Num),
                ];
            }
            Op::Fstat(s) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.fstat(h), Out::Stat),
                    ok_or_err(self.ulfs.fstat(u), Out::Stat),
                ];
            }
            Op::Stat(p) => {
                res = [
                    ok_or_err(self.host.stat(&hp(p, &self.host)), Out::Stat),
                    ok_or_err(self.ulfs.stat(&self.ulfs.map(&p.0)), Out::Stat),
                ];
            }
            Op::Lstat(p) => {
                res = [
                    ok_or_err(self.host.lstat(&hp(p, &self.host)), Out::Stat),
                    ok_or_err(self.ulfs.lstat(&self.ulfs.map(&p.0)), Out::Stat),
                ];
            }
            Op::Mkdir(p, m) => {
                res = [
                    ok_or_err(self.host.mkdir(&hp(p, &self.host), m.0), |_| Out::Ok),
                    ok_or_err(self.ulfs.mkdir(&self.ulfs.map(&p.0), m.0), |_| Out::Ok),
                ];
            }
            Op::Rmdir(p) => {
                res = [
                    ok_or_err(self.host.rmdir(&hp(p, &self.host)), |_| Out::Ok),
                    ok_or_err(self.ulfs.rmdir(&self.ulfs.map(&p.0)), |_| Out::Ok),
                ];
            }
            Op::Unlink(p) => {
                res = [
                    ok_or_err(self.host.unlink(&hp(p, &self.host)), |_| Out::Ok),
                    ok_or_err(self.ulfs.unlink(&self.ulfs.map(&p.0)), |_| Out::Ok),
                ];
            }
            Op::Rename(a, b) | Op::Rename2(a, b, _) => {
                let fl = if let Op::Rename2(_, _, f) = op { *f } else { 0 };
                res = [
                    ok_or_err(
                        self.host
                            .rename2(&hp(a, &self.host), &hp(b, &self.host), fl),
                        |_| Out::Ok,
                    ),
                    ok_or_err(
                        self.ulfs
                            .rename2(&self.ulfs.map(&a.0), &self.ulfs.map(&b.0), fl),
                        |_| Out::Ok,
                    ),
                ];
            }
            Op::Link(a, b) => {
                res = [
                    ok_or_err(
                        self.host.link(&hp(a, &self.host), &hp(b, &self.host)),
                        |_| Out::Ok,
                    ),
                    ok_or_err(
                        self.ulfs.link(&self.ulfs.map(&a.0), &self.ulfs.map(&b.0)),
                        |_| Out::Ok,
                    ),
                ];
            }
            Op::Symlink(t, l) => {
                if !self.chrooted && t.0.first() == Some(&b'/') {
                    let o = Out::Skip("absolute symlink target without chroot");
                    return Ok((o.clone(), o));
                }
                res = [
                    ok_or_err(self.host.symlink(&t.0, &hp(l, &self.host)), |_| Out::Ok),
                    ok_or_err(self.ulfs.symlink(&t.0, &self.ulfs.map(&l.0)), |_| Out::Ok),
                ];
            }
            Op::Readlink(p) => {
                res = [
                    ok_or_err(self.host.readlink(&hp(p, &self.host)), Out::Path),
                    ok_or_err(self.ulfs.readlink(&self.ulfs.map(&p.0)), Out::Path),
                ];
            }
            Op::Truncate(p, n) => {
                res = [
                    ok_or_err(self.host.truncate(&hp(p, &self.host), *n), |_| Out::Ok),
                    ok_or_err(self.ulfs.truncate(&self.ulfs.map(&p.0), *n), |_| Out::Ok),
                ];
            }
            Op::Ftruncate(s, n) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.ftruncate(h, *n), |_| Out::Ok),
                    ok_or_err(self.ulfs.ftruncate(u, *n), |_| Out::Ok),
                ];
            }
            Op::Chmod(p, m) => {
                res = [
                    ok_or_err(self.host.chmod(&hp(p, &self.host), m.0), |_| Out::Ok),
                    ok_or_err(self.ulfs.chmod(&self.ulfs.map(&p.0), m.0), |_| Out::Ok),
                ];
            }
            Op::Dup(s) => {
                let (_, h, u) = self.fds(*s);
                let hr = self.host.dup(h);
                let ur = self.ulfs.dup(u);
                match (hr, ur) {
                    (Ok(h2), Ok(u2)) => self.slots.push(Some((h2, u2))),
                    (Ok(h2), Err(_)) => self.slots.push(Some((h2, CLOSED_FD))),
                    _ => {}
                }
                res = [ok_or_err(hr, |_| Out::Fd), ok_or_err(ur, |_| Out::Fd)];
            }
            Op::Dup2(a, b) => {
                let (_, ha, ua) = self.fds(*a);
                let (_, hb, ub) = self.fds(*b);
                // The target must be a descriptor this case owns on both sides:
                // dup2 onto a closed number could clobber an unrelated host fd.
                if hb == CLOSED_FD || ub == CLOSED_FD {
                    let o = Out::Skip("dup2 target is not an open slot");
                    return Ok((o.clone(), o));
                }
                let check = |r: Result<i32, i32>, want: i32| match r {
                    Ok(v) if v == want => Out::Ok,
                    Ok(v) => Out::Num(v as u64),
                    Err(e) => Out::Err(e),
                };
                res = [
                    check(self.host.dup2(ha, hb), hb),
                    check(self.ulfs.dup2(ua, ub), ub),
                ];
            }
            Op::Getdents(s, bufsz) => {
                let (_, h, u) = self.fds(*s);
                for (k, (side, fd)) in [
                    (&mut self.host as &mut dyn Side, h),
                    (&mut self.ulfs as &mut dyn Side, u),
                ]
                .into_iter()
                .enumerate()
                {
                    res[k] = match side.lseek(fd, 0, libc::SEEK_SET) {
                        Err(e) => Out::Err(e),
                        Ok(_) => ok_or_err(list_fd(side, fd, *bufsz)?, Out::Names),
                    };
                }
            }
            Op::ListDir(p) => {
                for (k, side) in [
                    &mut self.host as &mut dyn Side,
                    &mut self.ulfs as &mut dyn Side,
                ]
                .into_iter()
                .enumerate()
                {
                    let path = side.map(&p.0);
                    res[k] = match side.open(&path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                        Err(e) => Out::Err(e),
                        Ok(fd) => {
                            let l = list_fd(side, fd, 4096)?;
                            side.close(fd)
                                .map_err(|e| format!("close of listing fd: {}", errno_name(e)))?;
                            ok_or_err(l, Out::Names)
                        }
                    };
                }
            }
            Op::Fsync(s) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.fsync(h), |_| Out::Ok),
                    ok_or_err(self.ulfs.fsync(u), |_| Out::Ok),
                ];
            }
            Op::Fdatasync(s) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.fdatasync(h), |_| Out::Ok),
                    ok_or_err(self.ulfs.fdatasync(u), |_| Out::Ok),
                ];
            }
            Op::Fchmod(s, m) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.fchmod(h, m.0), |_| Out::Ok),
                    ok_or_err(self.ulfs.fchmod(u, m.0), |_| Out::Ok),
                ];
            }
            Op::Chown(..) | Op::Fchown(..) if !is_root() => {
                let o = Out::Skip(SKIP_CHOWN);
                return Ok((o.clone(), o));
            }
            Op::Chown(p, uid, gid) => {
                res = [
                    ok_or_err(self.host.chown(&hp(p, &self.host), *uid, *gid), |_| Out::Ok),
                    ok_or_err(self.ulfs.chown(&self.ulfs.map(&p.0), *uid, *gid), |_| {
                        Out::Ok
                    }),
                ];
            }
            Op::Fchown(s, uid, gid) => {
                let (_, h, u) = self.fds(*s);
                res = [
                    ok_or_err(self.host.fchown(h, *uid, *gid), |_| Out::Ok),
                    ok_or_err(self.ulfs.fchown(u, *uid, *gid), |_| Out::Ok),
                ];
            }
            Op::Chdir(_) | Op::Getcwd if !self.chrooted => {
                let o = Out::Skip("working directory is process-wide without chroot");
                return Ok((o.clone(), o));
            }
            Op::Chdir(p) => {
                res = [
                    ok_or_err(self.host.chdir(&p.0), |_| Out::Ok),
                    ok_or_err(self.ulfs.chdir(&p.0), |_| Out::Ok),
                ];
            }
            Op::Getcwd => {
                res = [
                    ok_or_err(self.host.getcwd(), Out::Path),
                    ok_or_err(self.ulfs.getcwd(), Out::Path),
                ];
            }
            _ => return Err(format!("{op:?} is no classic call: step_at runs it")),
        }
        let [h, u] = res;
        Ok((h, u))
    }

    /// After each step: every open descriptor has the same stat and (for
    /// regular files) the same offset on both sides.
    pub fn check_descriptors(&mut self) -> Result<(), String> {
        for (i, slot) in self.slots.clone().into_iter().enumerate() {
            let Some((h, u)) = slot else { continue };
            let hs = self.host.fstat(h);
            let us = self.ulfs.fstat(u);
            if hs != us {
                return Err(format!(
                    "after this step, fstat of slot {i} differs: host {:?}, ulfs {:?}",
                    ok_or_err(hs, Out::Stat),
                    ok_or_err(us, Out::Stat)
                ));
            }
            if let Ok(st) = hs
                && st.mode & libc::S_IFMT == libc::S_IFREG
            {
                let ho = self.host.lseek(h, 0, libc::SEEK_CUR);
                let uo = self.ulfs.lseek(u, 0, libc::SEEK_CUR);
                if ho != uo {
                    return Err(format!(
                        "after this step, the offset of slot {i} differs: host {:?}, ulfs {:?}",
                        ok_or_err(ho, Out::Num),
                        ok_or_err(uo, Out::Num)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Model paths of every node, from the host tree ("/" first).
    pub fn all_paths(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut out = vec![b"/".to_vec()];
        let mut i = 0;
        while i < out.len() && out.len() < 500 {
            let dir = out[i].clone();
            i += 1;
            let hp = self.host.map(&dir);
            match host::lstat(&hp) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
                _ => continue,
            }
            let Ok(fd) = self.host.open(&hp, libc::O_RDONLY | libc::O_DIRECTORY, 0) else {
                continue;
            };
            let l = list_fd(&mut self.host, fd, 4096)?;
            let _ = self.host.close(fd);
            for (name, _) in l.unwrap_or_default() {
                if name != b"." && name != b".." {
                    let mut p = dir.clone();
                    if p.last() != Some(&b'/') {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&name);
                    out.push(p);
                }
            }
        }
        Ok(out)
    }

    /// Before step `n`: every node gets atime and mtime in the past, or an
    /// atime in the future (relatime then leaves it alone), on both sides.
    pub fn reset_times(&mut self, n: usize) -> Result<Vec<Watched>, String> {
        let future = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(2_000_000_000, |d| d.as_secs() as i64)
            + 3 * 86_400;
        let mut set = Vec::new();
        for (i, p) in self.all_paths()?.into_iter().enumerate() {
            let a = if (n + i) % 3 == 2 {
                (future, 333)
            } else {
                OLD_ATIME
            };
            let h = self.host.set_times(&self.host.map(&p), a, OLD_MTIME);
            let u = self.ulfs.set_times(&self.ulfs.map(&p), a, OLD_MTIME);
            match (h, u) {
                (Ok(()), Ok(())) => set.push((p, a, OLD_MTIME, None)),
                (Err(_), Err(_)) => {}
                (h, u) => {
                    return Err(format!(
                        "utimensat({}) (setting up the time check) differs: host {:?}, ulfs {:?}",
                        show_path(&p),
                        ok_or_err(h, |_| Out::Ok),
                        ok_or_err(u, |_| Out::Ok)
                    ));
                }
            }
        }
        if n.is_multiple_of(CTIME_EVERY) {
            let mut latest = (0, 0);
            for w in &mut set {
                if let (Ok(h), Ok(u)) = (
                    self.host.times(&self.host.map(&w.0)),
                    self.ulfs.times(&self.ulfs.map(&w.0)),
                ) {
                    w.3 = Some((h[2], u[2]));
                    latest = latest.max(h[2]).max(u[2]);
                }
            }
            // A ctime stamped by the step must differ from the setup's on
            // both sides (ulfs stamps with the same coarse clock).
            while coarse_now() <= latest {
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
        }
        Ok(set)
    }

    /// After a step: for every node watched, atime and mtime changed on
    /// both sides or on neither (Linux's rules, relatime for atime), and
    /// where they changed their order against ctime is the same.
    pub fn check_times(&mut self, watched: &[Watched]) -> Result<(), String> {
        for (p, a, m, ctimes) in watched {
            let (Ok(h), Ok(u)) = (
                self.host.times(&self.host.map(p)),
                self.ulfs.times(&self.ulfs.map(p)),
            ) else {
                // Gone (or not the same on both sides, which the step's
                // own comparison and the final tree comparison catch).
                continue;
            };
            self.stats.times_checked += 1;
            if let Some((hc0, uc0)) = ctimes
                && (h[2] != *hc0) != (u[2] != *uc0)
            {
                let word = |c: bool| if c { "changed" } else { "unchanged" };
                return Err(format!(
                    "after this step, ctime of {}: host {}, ulfs {}",
                    show_path(p),
                    word(h[2] != *hc0),
                    word(u[2] != *uc0)
                ));
            }
            let changed = |t: &Times| (t[0] != *a, t[1] != *m);
            let word = |c: bool| if c { "changed" } else { "unchanged" };
            let (hc, uc) = (changed(&h), changed(&u));
            let real = uc;
            if hc != uc {
                return Err(format!(
                    "after this step, times of {} differ (Linux's rules, relatime): host atime {}, mtime {}; \
                     ulfs atime {}, mtime {} (atime was set {:?}, mtime {:?})",
                    show_path(p),
                    word(hc.0),
                    word(hc.1),
                    word(uc.0),
                    word(uc.1),
                    a,
                    m
                ));
            }
            // Where the step stamped both, the stamps agree in order.
            if hc.1 && real.1 && h[1].cmp(&h[2]) != u[1].cmp(&u[2]) {
                return Err(format!(
                    "after this step, {}: mtime vs ctime is {:?} on the host, {:?} in ulfs",
                    show_path(p),
                    h[1].cmp(&h[2]),
                    u[1].cmp(&u[2])
                ));
            }
            if hc.0 && hc.1 && real.0 && real.1 && h[0].cmp(&h[1]) != u[0].cmp(&u[1]) {
                return Err(format!(
                    "after this step, {}: atime vs mtime is {:?} on the host, {:?} in ulfs",
                    show_path(p),
                    h[0].cmp(&h[1]),
                    u[0].cmp(&u[1])
                ));
            }
        }
        Ok(())
    }

    /// ulfs's times of every node (by model path).
    pub fn ulfs_times(&mut self) -> Result<Vec<(Vec<u8>, Times)>, String> {
        let mut out = Vec::new();
        for p in self.all_paths()? {
            let t = self
                .ulfs
                .times(&self.ulfs.map(&p))
                .map_err(|e| format!("lstat {}: {}", show_path(&p), errno_name(e)))?;
            out.push((p, t));
        }
        Ok(out)
    }

    pub fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for (n, op) in ops.iter().enumerate() {
            let watched = self.reset_times(n).map_err(|e| self.fail(n, op, &e))?;
            let slots_desc = match op {
                Op::Close(s)
                | Op::Read(s, _)
                | Op::Write(s, ..)
                | Op::Pread(s, ..)
                | Op::Pwrite(s, ..)
                | Op::Lseek(s, ..)
                | Op::Fstat(s)
                | Op::Ftruncate(s, _)
                | Op::Dup(s)
                | Op::Getdents(s, _)
                | Op::Fsync(s)
                | Op::Fdatasync(s)
                | Op::Fchmod(s, _)
                | Op::Fchdir(s)
                | Op::Fchown(s, ..) => format!("  [{}]", self.describe(*s)),
                Op::Dup2(a, b) => format!("  [{} -> {}]", self.describe(*a), self.describe(*b)),
                _ => String::new(),
            };
            let (h, u) = self.step(op).map_err(|e| self.fail(n, op, &e))?;
            self.stats.steps += 1;
            match h {
                Out::Skip(why) => self.stats.skipped.push(why),
                Out::Err(_) => {}
                _ => self.stats.succeeded += 1,
            }
            let line = if h == u {
                format!("#{n:<3} {op:?} -> {h:?}{slots_desc}")
            } else {
                format!(
                    "#{n:<3} {op:?}{slots_desc}\n      host (tmpfs): {h:?}\n      ulfs:         {u:?}"
                )
            };
            self.trace.push(line);
            if h != u {
                return Err(self.fail(n, op, "results differ"));
            }
            self.check_descriptors().map_err(|e| self.fail(n, op, &e))?;
            self.check_times(&watched)
                .map_err(|e| self.fail(n, op, &e))?;
        }
        self.compare_trees().map_err(|e| {
            format!(
                "final tree comparison failed: {e}\n{}",
                self.trace.join("\n")
            )
        })
    }

    pub fn fail(&self, n: usize, op: &Op, why: &str) -> String {
        format!(
            "step #{n} ({op:?}): {why}\ntrace:\n{}",
            self.trace.join("\n")
        )
    }

    /// Recursive comparison of both trees.
    pub fn compare_trees(&mut self) -> Result<(), String> {
        let mut budget = 10_000;
        self.compare_dir(b"/", &mut budget)
    }

    pub fn compare_dir(&mut self, dir: &[u8], budget: &mut u32) -> Result<(), String> {
        let mut listings: Vec<Listing> = Vec::new();
        for side in [
            &mut self.host as &mut dyn Side,
            &mut self.ulfs as &mut dyn Side,
        ] {
            let path = side.map(dir);
            let fd = side
                .open(&path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|e| format!("open dir {}: {}", show_path(dir), errno_name(e)))?;
            let l = list_fd(side, fd, 4096)?;
            side.close(fd).map_err(errno_name)?;
            listings.push(l.map_err(|e| format!("list {}: {}", show_path(dir), errno_name(e)))?);
        }
        if listings[0] != listings[1] {
            return Err(format!(
                "directory {} lists differently:\n  host: {:?}\n  ulfs: {:?}",
                show_path(dir),
                Out::Names(listings[0].clone()),
                Out::Names(listings[1].clone())
            ));
        }
        for (name, _) in &listings[0] {
            if name == b"." || name == b".." {
                continue;
            }
            *budget = budget.checked_sub(1).ok_or("tree too large")?;
            let mut child = dir.to_vec();
            if child.last() != Some(&b'/') {
                child.push(b'/');
            }
            child.extend_from_slice(name);
            self.compare_entry(&child, budget)?;
        }
        // The directory's own stat (nlink counts subdirectories).
        let hs = self.host.lstat(&self.host.map(dir));
        let us = self.ulfs.lstat(&self.ulfs.map(dir));
        if hs != us {
            return Err(format!(
                "lstat {} differs: host {:?}, ulfs {:?}",
                show_path(dir),
                ok_or_err(hs, Out::Stat),
                ok_or_err(us, Out::Stat)
            ));
        }
        Ok(())
    }

    pub fn compare_entry(&mut self, path: &[u8], budget: &mut u32) -> Result<(), String> {
        let hs = self.host.lstat(&self.host.map(path));
        let us = self.ulfs.lstat(&self.ulfs.map(path));
        if hs != us {
            return Err(format!(
                "lstat {} differs: host {:?}, ulfs {:?}",
                show_path(path),
                ok_or_err(hs, Out::Stat),
                ok_or_err(us, Out::Stat)
            ));
        }
        let st = hs.map_err(|e| format!("lstat {}: {}", show_path(path), errno_name(e)))?;
        match st.mode & libc::S_IFMT {
            libc::S_IFDIR => self.compare_dir(path, budget),
            libc::S_IFLNK => {
                let h = self.host.readlink(&self.host.map(path));
                let u = self.ulfs.readlink(&self.ulfs.map(path));
                if h != u {
                    return Err(format!(
                        "readlink {} differs: host {:?}, ulfs {:?}",
                        show_path(path),
                        ok_or_err(h, Out::Path),
                        ok_or_err(u, Out::Path)
                    ));
                }
                Ok(())
            }
            libc::S_IFREG => self.compare_file(path, st.size.unwrap_or(0)),
            _ => Err(format!("unexpected file type at {}", show_path(path))),
        }
    }

    pub fn compare_file(&mut self, path: &[u8], size: u64) -> Result<(), String> {
        let hfd = self
            .host
            .open(&self.host.map(path), libc::O_RDONLY | libc::O_NOFOLLOW, 0)
            .map_err(|e| format!("host open {}: {}", show_path(path), errno_name(e)))?;
        let r = (|| {
            let ufd = self
                .ulfs
                .open(&self.ulfs.map(path), libc::O_RDONLY | libc::O_NOFOLLOW, 0)
                .map_err(|e| format!("ulfs open {}: {}", show_path(path), errno_name(e)))?;
            let r = self.compare_contents(path, hfd, ufd, size);
            self.ulfs
                .close(ufd)
                .map_err(|e| format!("ulfs close: {}", errno_name(e)))?;
            r
        })();
        let _ = host::close(hfd);
        r
    }

    /// Compares file contents; for big sparse files only the host's data
    /// regions plus samples of each hole (start, middle, end) are read.
    pub fn compare_contents(
        &mut self,
        path: &[u8],
        hfd: i32,
        ufd: i32,
        size: u64,
    ) -> Result<(), String> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        if size <= 2 << 20 {
            ranges.push((0, size));
        } else {
            let mut pos = 0u64;
            while pos < size {
                let data = match host::lseek(hfd, pos as i64, libc::SEEK_DATA) {
                    Ok(d) => d as u64,
                    Err(_) => size,
                };
                if data > pos {
                    // A hole [pos, data): sample it.
                    for o in [
                        pos,
                        pos + (data - pos) / 2,
                        data.saturating_sub(4096).max(pos),
                    ] {
                        ranges.push((o, (o + 4096).min(data)));
                    }
                }
                if data >= size {
                    break;
                }
                let hole = host::lseek(hfd, data as i64, libc::SEEK_HOLE)
                    .map(|h| h as u64)
                    .unwrap_or(size);
                ranges.push((data, hole));
                pos = hole;
            }
        }
        const CHUNK: u64 = 64 << 10;
        for (start, end) in ranges {
            let mut o = start;
            while o < end {
                let n = (end - o).min(CHUNK) as usize;
                let mut hb = vec![0u8; n];
                let mut ub = vec![0u8; n];
                let hn = self.host.pread(hfd, &mut hb, o);
                let un = self.ulfs.pread(ufd, &mut ub, o);
                let hn = hn.map(|m| {
                    hb.truncate(m);
                    hb
                });
                let un = un.map(|m| {
                    ub.truncate(m.min(n));
                    ub
                });
                if hn != un {
                    return Err(format!(
                        "contents of {} (size {size}) differ in [{o}, {}): host {:?}, ulfs {:?}",
                        show_path(path),
                        o + n as u64,
                        ok_or_err(hn, Out::Data),
                        ok_or_err(un, Out::Data)
                    ));
                }
                o += n as u64;
            }
        }
        Ok(())
    }
}

//! `torture`: the writer process of the real-process crash test
//! (`tests/real_crash.rs`, issue 3 requirement 6).
//!
//! `torture IMAGE [--seed N] [--log PATH] [--max-ops N] [--commit-blocks N]`
//! mounts IMAGE read-write (the journal's commit size from the seed unless
//! given) and runs, until killed (or for `--max-ops` operations), a
//! seeded mix of metadata and data operations: create, write, append,
//! truncate, rename (files and whole subtrees), link, unlink, symlink,
//! mkdir, rmdir, and files unlinked while still open, in a few directories.
//!
//! Every few operations it makes one more *durable step* `N`:
//! - it writes `/durable/NNNNNN` with content that is a pure function of `N`
//!   ([`durable_content`]), then fsyncs the file and its directory;
//! - every third step it also replaces `/atomic` the classic way (write
//!   `/atomic.tmp`, fsync it, rename over `/atomic`, fsync `/`), with
//!   content that names its generation ([`atomic_content`]);
//! - after those fsyncs return it appends `fsync N atomic G` to the log, a
//!   host file opened O_APPEND and written with write + fdatasync, so the
//!   log line itself is durable before the next operation starts.
//!
//! So a line in the log is a promise ulfs made: whatever state the image is
//! in after a crash *after* that line was written, `/durable/1..=N` exist
//! with their exact content and `/atomic` holds one whole generation
//! `>= G` (rename is atomic, and the renamed file's data was fsynced).
//! [`check_image`] verifies that promise and more (mount with replay,
//! every file readable, fsck clean before and after the read-write mount);
//! the test compiles this file as a module to share it, and
//! `torture --check IMAGE --log PATH` runs it by hand on a kept image.
//!
//! Restarted on an image it crashed on, `torture` continues the numbering
//! after the last logged step (a step that was begun but not logged is
//! rewritten from scratch).
//!
//! Exit status: 0 after `--max-ops`, 1 for usage errors, 2 when ulfs
//! returned an error the workload does not expect (printed on stderr).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use ulfs::{Errno, Fd, Fs, FsckOptions, MountOptions};

// ------------------------------------------------------------------ spec

/// splitmix64: the one mixing function used for the RNG and for contents.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small seeded generator (splitmix64 stream).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(mix(seed ^ 0x5EED))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// `len` bytes derived from `(tag, key)`.
fn pattern(tag: u64, key: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(&mix(tag ^ mix(key) ^ i.wrapping_mul(0x100_0000_01B3)).to_le_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

pub fn durable_path(k: u64) -> String {
    format!("/durable/{k:06}")
}

/// The exact content of `/durable/NNNNNN` for step `k`: a header naming
/// `k` (so a mix-up reads as one), then 0..2500 bytes, and every 16th step
/// a multi-block file (4 KiB..16 KiB).
pub fn durable_content(k: u64) -> Vec<u8> {
    let len = if k.is_multiple_of(16) {
        4096 + mix(k) % 12_288
    } else {
        mix(k) % 2500
    };
    let mut out = format!("durable {k}\n").into_bytes();
    out.extend(pattern(1, k, len as usize));
    out
}

/// The content of `/atomic` at generation `g`: `atomic G len L\n` and `L`
/// bytes derived from `g`.
pub fn atomic_content(g: u64) -> Vec<u8> {
    let len = mix(g ^ 0xA70) % 9000;
    let mut out = format!("atomic {g} len {len}\n").into_bytes();
    out.extend(pattern(2, g, len as usize));
    out
}

/// The generation whose exact content `bytes` is, or why it is none.
pub fn parse_atomic(bytes: &[u8]) -> Result<u64, String> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("no header line in {} bytes", bytes.len()))?;
    let head = String::from_utf8_lossy(&bytes[..nl]);
    let g = head
        .strip_prefix("atomic ")
        .and_then(|r| r.split(' ').next())
        .and_then(|g| g.parse::<u64>().ok())
        .ok_or_else(|| format!("bad header {head:?}"))?;
    if bytes != atomic_content(g).as_slice() {
        return Err(format!(
            "header says generation {g} but the {} bytes are not its content ({} bytes)",
            bytes.len(),
            atomic_content(g).len()
        ));
    }
    Ok(g)
}

/// What the log promises: steps `1..=fsyncs` durable, `/atomic` at least
/// at generation `atomic` (0: no promise yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Logged {
    pub fsyncs: u64,
    pub atomic: u64,
}

/// Reads the log: complete lines only (a line cut by the kill promises
/// nothing), which must number the steps 1, 2, 3, ... in order.
pub fn read_log(path: &Path) -> Result<Logged, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Logged::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let text = String::from_utf8_lossy(&text);
    let mut at = Logged::default();
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop(); // after the last '\n': empty, or a cut line
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        let parsed = match f.as_slice() {
            ["fsync", n, "atomic", g] => n.parse::<u64>().ok().zip(g.parse::<u64>().ok()),
            _ => None,
        };
        let (n, g) = parsed.ok_or_else(|| format!("bad log line {line:?}"))?;
        if n != at.fsyncs + 1 || g < at.atomic {
            return Err(format!("log line {line:?} does not follow {at:?}"));
        }
        at = Logged {
            fsyncs: n,
            atomic: g,
        };
    }
    Ok(at)
}

/// Reads a whole file through the `Fs` API; its size must match fstat.
fn read_all(fs: &mut Fs, path: &str) -> Result<Vec<u8>, Errno> {
    let fd = fs.open(path, libc::O_RDONLY, 0)?;
    let res = (|| {
        let size = fs.fstat(fd)?.size;
        let mut out = vec![0u8; size as usize];
        let mut at = 0;
        while at < out.len() {
            let n = fs.read(fd, &mut out[at..])?;
            if n == 0 {
                return Err(Errno::EIO);
            }
            at += n;
        }
        let mut extra = [0u8; 1];
        if fs.read(fd, &mut extra)? != 0 {
            return Err(Errno::EIO);
        }
        Ok(out)
    })();
    fs.close(fd)?;
    res
}

/// Every entry under `dir`, depth first; files are read whole, symlinks
/// read, directories listed. Any error is a finding.
fn walk_tree(fs: &mut Fs, dir: &str, seen: &mut u64) -> Result<(), String> {
    let fd = fs
        .open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| format!("open {dir}: {e}"))?;
    let mut entries = Vec::new();
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = match fs.getdents64(fd, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ = fs.close(fd);
                return Err(format!("getdents64 {dir}: {e}"));
            }
        };
        if n == 0 {
            break;
        }
        entries.extend(ulfs::parse_dirents(&buf[..n]));
    }
    fs.close(fd).map_err(|e| format!("close {dir}: {e}"))?;
    for d in entries {
        if d.name == b"." || d.name == b".." {
            continue;
        }
        *seen += 1;
        let path = format!(
            "{}/{}",
            dir.trim_end_matches('/'),
            String::from_utf8_lossy(&d.name)
        );
        let st = fs.lstat(&path).map_err(|e| format!("lstat {path}: {e}"))?;
        if st.is_dir() {
            walk_tree(fs, &path, seen)?;
        } else if st.is_symlink() {
            fs.readlink(&path)
                .map_err(|e| format!("readlink {path}: {e}"))?;
        } else {
            read_all(fs, &path).map_err(|e| format!("read {path}: {e}"))?;
        }
    }
    Ok(())
}

fn fsck_clean(image: &Path, when: &str) -> Result<(), String> {
    let report = ulfs::fsck(image, &mut FsckOptions::default())
        .map_err(|e| format!("fsck {when} could not check the image: {e}"))?;
    if !report.is_clean() {
        return Err(format!(
            "fsck {when} found {} problem(s):\n  {}",
            report.problems.len(),
            report.problems.join("\n  ")
        ));
    }
    Ok(())
}

/// Checks a crashed image against what the log promised: fsck clean as it
/// lies (read-only, journal replayed in memory); a read-write mount
/// succeeds (replay); `/durable/1..=N` exact; `/atomic` one whole
/// generation `>= G`; every file, directory and symlink readable; a clean
/// unmount; fsck clean again. Mounting read-write changes the image, so
/// check a copy if the original is to be kept. Returns a one-line summary.
pub fn check_image(image: &Path, logged: Logged) -> Result<String, String> {
    fsck_clean(image, "of the crashed image (before any read-write mount)")?;
    let mut fs = Fs::mount(image, MountOptions::default())
        .map_err(|e| format!("read-write mount (journal replay) failed: {e}"))?;
    let replayed = fs.info().journal_replayed;
    for k in 1..=logged.fsyncs {
        let path = durable_path(k);
        let got = read_all(&mut fs, &path).map_err(|e| {
            format!(
                "{path} (fsync {k} <= logged {}) unreadable: {e}",
                logged.fsyncs
            )
        })?;
        let want = durable_content(k);
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "{path} (fsync {k} <= logged {}) has {} bytes, want {}; first difference at {:?}",
                logged.fsyncs,
                got.len(),
                want.len(),
                first
            ));
        }
    }
    if logged.atomic > 0 {
        let got = read_all(&mut fs, "/atomic")
            .map_err(|e| format!("/atomic (logged generation {}): {e}", logged.atomic))?;
        let g = parse_atomic(&got)
            .map_err(|e| format!("/atomic is torn (logged generation {}): {e}", logged.atomic))?;
        if g < logged.atomic {
            return Err(format!(
                "/atomic went back to generation {g}, but generation {} was logged durable",
                logged.atomic
            ));
        }
    }
    let mut seen = 0;
    walk_tree(&mut fs, "/", &mut seen)?;
    fs.unmount()
        .map_err(|e| format!("unmount after the checks failed: {e}"))?;
    fsck_clean(image, "after replay and unmount")?;
    Ok(format!(
        "{} durable files, atomic >= {}, {seen} entries, {replayed} transactions replayed",
        logged.fsyncs, logged.atomic
    ))
}

// ------------------------------------------------------------------ writer

const TOPS: [&str; 3] = ["/a", "/b", "/c"];

/// Errors a random namespace operation may meet on a tree it does not
/// model (a missing parent, a name taken, a directory not empty, ...).
fn expected(e: Errno) -> bool {
    [
        Errno::ENOENT,
        Errno::EEXIST,
        Errno::ENOTEMPTY,
        Errno::EISDIR,
        Errno::ENOTDIR,
        Errno::EINVAL,
        Errno::EPERM,
        Errno::ELOOP,
        Errno::EBUSY,
    ]
    .contains(&e)
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("torture: {what}: {e}");
    std::process::exit(2);
}

/// `r`'s value, `None` for an error a random namespace op may meet; any
/// other error ends the run.
fn ok<T>(what: &str, r: ulfs::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if expected(e) => None,
        Err(e) => die(what, e),
    }
}

struct Writer {
    fs: Fs,
    rng: Rng,
    log: Option<std::fs::File>,
    step: u64,
    atomic: u64,
    /// Descriptors kept open across operations (their paths may be gone:
    /// unlinked-while-open files are orphans at a crash).
    held: Vec<Fd>,
    ops: u64,
}

impl Writer {
    /// A random path: `/a/f3`, `/b/d1/f0`, `/c/d2/d0/f5`, or a directory
    /// name at those depths.
    fn path(&mut self, dir: bool) -> String {
        let mut p = TOPS[self.rng.below(3) as usize].to_string();
        let depth = match self.rng.below(10) {
            0..=5 => 0,
            6..=8 => 1,
            _ => 2,
        };
        for _ in 0..depth {
            p += &format!("/d{}", self.rng.below(4));
        }
        if dir {
            p + &format!("/d{}", self.rng.below(4))
        } else {
            p + &format!("/f{}", self.rng.below(12))
        }
    }

    fn write_some(&mut self, fd: Fd, append: bool) {
        let len = match self.rng.below(10) {
            0..=6 => self.rng.range(1, 3000),
            7..=8 => self.rng.range(3000, 12_000),
            _ => self.rng.range(12_000, 40_000),
        } as usize;
        let data = pattern(3, self.rng.next_u64(), len);
        let r = if append || self.rng.chance(50) {
            self.fs.write(fd, &data)
        } else {
            let off = self.rng.below(48 << 10);
            self.fs.pwrite(fd, &data, off)
        };
        match r {
            Ok(n) if n == len => {}
            Ok(n) => die("short write", format!("{n} of {len}")),
            Err(e) => die("write", e),
        }
    }

    fn one_op(&mut self) {
        self.ops += 1;
        match self.rng.below(100) {
            // create / overwrite
            0..=19 => {
                let p = self.path(false);
                let mut flags = libc::O_CREAT | libc::O_WRONLY;
                if self.rng.chance(30) {
                    flags |= libc::O_TRUNC;
                }
                if let Some(fd) = ok("open for write", self.fs.open(&p, flags, 0o644)) {
                    self.write_some(fd, false);
                    self.fs.close(fd).unwrap_or_else(|e| die("close", e));
                }
            }
            // append
            20..=29 => {
                let p = self.path(false);
                let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND;
                if let Some(fd) = ok("open for append", self.fs.open(&p, flags, 0o644)) {
                    self.write_some(fd, true);
                    self.fs.close(fd).unwrap_or_else(|e| die("close", e));
                }
            }
            // truncate (shrink or grow)
            30..=36 => {
                let p = self.path(false);
                let len = self.rng.below(60 << 10);
                ok("truncate", self.fs.truncate(&p, len));
            }
            // rename a file, or a directory with its subtree
            37..=48 => {
                let dir = self.rng.chance(25);
                let (a, b) = (self.path(dir), self.path(dir));
                ok("rename", self.fs.rename(&a, &b));
            }
            // hard link
            49..=54 => {
                let (a, b) = (self.path(false), self.path(false));
                ok("link", self.fs.link(&a, &b));
            }
            // unlink
            55..=66 => {
                let p = self.path(false);
                ok("unlink", self.fs.unlink(&p));
            }
            // symlink
            67..=69 => {
                let (a, b) = (self.path(false), self.path(false));
                ok("symlink", self.fs.symlink(&a, &b));
            }
            // mkdir
            70..=78 => {
                let p = self.path(true);
                ok("mkdir", self.fs.mkdir(&p, 0o755));
            }
            // rmdir
            79..=84 => {
                let p = self.path(true);
                ok("rmdir", self.fs.rmdir(&p));
            }
            // hold a file open, then unlink it while open and keep writing
            85..=91 => {
                if self.held.len() < 3 {
                    let p = self.path(false);
                    let flags = libc::O_CREAT | libc::O_RDWR;
                    if let Some(fd) = ok("open to hold", self.fs.open(&p, flags, 0o644)) {
                        self.write_some(fd, false);
                        if self.rng.chance(60) {
                            ok("unlink held", self.fs.unlink(&p));
                        }
                        self.held.push(fd);
                    }
                } else {
                    let i = self.rng.below(self.held.len() as u64) as usize;
                    let fd = self.held[i];
                    if self.rng.chance(50) {
                        self.write_some(fd, false);
                    } else {
                        self.held.swap_remove(i);
                        self.fs.close(fd).unwrap_or_else(|e| die("close held", e));
                    }
                }
            }
            // an fsync that is not logged (commits mid-stream)
            92..=93 => {
                self.fs.sync().unwrap_or_else(|e| die("sync", e));
            }
            // read something back
            _ => {
                let p = self.path(false);
                if let Some(fd) = ok("open for read", self.fs.open(&p, libc::O_RDONLY, 0)) {
                    let mut buf = vec![0u8; 16 << 10];
                    let off = self.rng.below(32 << 10);
                    self.fs
                        .pread(fd, &mut buf, off)
                        .unwrap_or_else(|e| die("pread", e));
                    self.fs.close(fd).unwrap_or_else(|e| die("close", e));
                }
            }
        }
    }

    /// Operations until the next durable step: mostly a few, sometimes
    /// hundreds, so that a good share of the run is spent in ulfs's own
    /// code (where a freeze lands mid-operation) rather than waiting in
    /// msync and fdatasync (where it lands between operations).
    fn gap(&mut self) -> u64 {
        if self.rng.chance(70) {
            self.rng.range(1, 40)
        } else {
            self.rng.range(100, 1000)
        }
    }

    /// Writes `content` to `path` in one to three write calls.
    fn write_file(&mut self, path: &str, content: &[u8]) -> Fd {
        let flags = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY;
        let fd = self
            .fs
            .open(path, flags, 0o644)
            .unwrap_or_else(|e| die(&format!("create {path}"), e));
        let pieces = self.rng.range(1, 3) as usize;
        let mut at = 0;
        for i in 0..pieces {
            let end = if i + 1 == pieces {
                content.len()
            } else {
                at + (self.rng.below(content.len() as u64 - at as u64 + 1) as usize)
            };
            let n = self
                .fs
                .write(fd, &content[at..end])
                .unwrap_or_else(|e| die(&format!("write {path}"), e));
            if n != end - at {
                die(&format!("short write {path}"), n);
            }
            at = end;
        }
        fd
    }

    fn fsync_path(&mut self, path: &str, dir: bool) {
        let flags = if dir {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else {
            libc::O_RDONLY
        };
        let fd = self
            .fs
            .open(path, flags, 0)
            .unwrap_or_else(|e| die(&format!("open {path}"), e));
        self.fs
            .fsync(fd)
            .unwrap_or_else(|e| die(&format!("fsync {path}"), e));
        self.fs.close(fd).unwrap_or_else(|e| die("close", e));
    }

    /// Removes `path` and everything under it (any error ends the run:
    /// nothing else changes the tree meanwhile).
    fn rm_tree(&mut self, path: &str) {
        let fd = self
            .fs
            .open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .unwrap_or_else(|e| die(&format!("open {path}"), e));
        let mut names = Vec::new();
        let mut buf = vec![0u8; 32 << 10];
        loop {
            let n = self
                .fs
                .getdents64(fd, &mut buf)
                .unwrap_or_else(|e| die(&format!("getdents64 {path}"), e));
            if n == 0 {
                break;
            }
            for d in ulfs::parse_dirents(&buf[..n]) {
                if d.name != b"." && d.name != b".." {
                    names.push((d.name, d.dtype));
                }
            }
        }
        self.fs.close(fd).unwrap_or_else(|e| die("close", e));
        for (name, dtype) in names {
            let child = format!("{path}/{}", String::from_utf8_lossy(&name));
            if dtype == ulfs::DT_DIR {
                self.rm_tree(&child);
                self.fs
                    .rmdir(&child)
                    .unwrap_or_else(|e| die(&format!("rmdir {child}"), e));
            } else {
                self.fs
                    .unlink(&child)
                    .unwrap_or_else(|e| die(&format!("unlink {child}"), e));
            }
        }
    }

    /// Keeps the image from filling up on a long run: when less than a
    /// quarter is free, the workload trees are emptied (a burst of unlinks
    /// and rmdirs, itself good to crash in). The durable files stay.
    fn prune_if_full(&mut self) {
        let st = self.fs.statfs("/").unwrap_or_else(|e| die("statfs", e));
        if st.bavail < st.blocks / 4 {
            for top in TOPS {
                self.rm_tree(top);
            }
        }
    }

    /// One durable step (see the top of the file), then its log line.
    fn durable_step(&mut self) {
        self.prune_if_full();
        let k = self.step + 1;
        let path = durable_path(k);
        let fd = self.write_file(&path, &durable_content(k));
        self.fs
            .fsync(fd)
            .unwrap_or_else(|e| die(&format!("fsync {path}"), e));
        self.fs.close(fd).unwrap_or_else(|e| die("close", e));
        self.fsync_path("/durable", true);
        if k.is_multiple_of(3) {
            let fd = self.write_file("/atomic.tmp", &atomic_content(k));
            self.fs
                .fsync(fd)
                .unwrap_or_else(|e| die("fsync /atomic.tmp", e));
            self.fs.close(fd).unwrap_or_else(|e| die("close", e));
            self.fs
                .rename("/atomic.tmp", "/atomic")
                .unwrap_or_else(|e| die("rename /atomic.tmp /atomic", e));
            self.fsync_path("/", true);
            self.atomic = k;
        }
        self.step = k;
        if let Some(log) = self.log.as_mut() {
            let line = format!("fsync {k} atomic {}\n", self.atomic);
            log.write_all(line.as_bytes())
                .unwrap_or_else(|e| die("log write", e));
            log.sync_data().unwrap_or_else(|e| die("log fdatasync", e));
        }
    }
}

struct Args {
    image: String,
    seed: u64,
    log: Option<String>,
    max_ops: Option<u64>,
    commit_blocks: Option<u32>,
    check: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: torture IMAGE [--seed N] [--log PATH] [--max-ops N] [--commit-blocks N]\n       torture --check IMAGE --log PATH"
    );
    std::process::exit(1);
}

fn parse_args() -> Args {
    let mut args = Args {
        image: String::new(),
        seed: 1,
        log: None,
        max_ops: None,
        commit_blocks: None,
        check: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--seed" => args.seed = value().parse().unwrap_or_else(|_| usage()),
            "--log" => args.log = Some(value()),
            "--max-ops" => args.max_ops = Some(value().parse().unwrap_or_else(|_| usage())),
            "--commit-blocks" => {
                args.commit_blocks = Some(value().parse().unwrap_or_else(|_| usage()))
            }
            "--check" => args.check = true,
            _ if a.starts_with('-') || !args.image.is_empty() => usage(),
            _ => args.image = a,
        }
    }
    if args.image.is_empty() {
        usage();
    }
    args
}

fn main() {
    let args = parse_args();
    let logged = match &args.log {
        Some(p) => read_log(Path::new(p)).unwrap_or_else(|e| die("log", e)),
        None => Logged::default(),
    };
    if args.check {
        match check_image(Path::new(&args.image), logged) {
            Ok(summary) => println!("clean: {summary}"),
            Err(e) => die("check failed", e),
        }
        return;
    }
    // Half the seeds keep the default commit policy; the others commit
    // every few metadata blocks, so commits, installs and checkpoints (the
    // journal wraps) happen in the middle of the workload, not only at
    // fsync.
    let commit_blocks = args.commit_blocks.unwrap_or_else(|| {
        let mut r = Rng::new(args.seed ^ 0xC0);
        if r.chance(50) {
            0
        } else {
            r.range(1, 32) as u32
        }
    });
    let opts = MountOptions {
        commit_blocks,
        ..Default::default()
    };
    let fs =
        Fs::mount(&args.image, opts).unwrap_or_else(|e| die(&format!("mount {}", args.image), e));
    let log = args.log.as_ref().map(|p| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(p)
            .unwrap_or_else(|e| die(&format!("open log {p}"), e))
    });
    let mut w = Writer {
        fs,
        rng: Rng::new(args.seed),
        log,
        step: logged.fsyncs,
        atomic: logged.atomic,
        held: Vec::new(),
        ops: 0,
    };
    for d in ["/durable", "/a", "/b", "/c"] {
        if let Err(e) = w.fs.mkdir(d, 0o755)
            && e != Errno::EEXIST
        {
            die(&format!("mkdir {d}"), e);
        }
    }
    let mut until_step = w.gap();
    loop {
        if args.max_ops.is_some_and(|m| w.ops >= m) {
            break;
        }
        w.one_op();
        until_step -= 1;
        if until_step == 0 {
            w.durable_step();
            until_step = w.gap();
        }
    }
    for fd in std::mem::take(&mut w.held) {
        w.fs.close(fd).unwrap_or_else(|e| die("close held", e));
    }
    w.fs.unmount().unwrap_or_else(|e| die("unmount", e));
}

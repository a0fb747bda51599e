//! `ulfs du`: disk usage of image trees, as du(1): each directory's total
//! after its contents (with `-a` files too), `-s` for one total per
//! operand, `-c` for a grand total, `-d N` to print only N levels down.
//!
//! Usage is what the image spends (`st_blocks`, in KiB by default, the
//! unit of du(1)), directories' own index blocks included, so the numbers
//! add up to what `info` counts as used; `--apparent-size` and `-b` sum
//! file lengths instead. A file with several hard links counts once, at
//! its first name, as du(1) does. Trees are walked by descriptor
//! (walk.rs), so depth is bounded by memory only.

use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::Path;

use ulfs::{Errno, Fd, Fs, Stat};

use crate::error::{CliError, CliResult, Failures};
use crate::format::du_human;
use crate::image::{self, Access};
use crate::imgpath::show;
use crate::walk::{self, At, Item};

pub struct Options {
    pub all: bool,
    pub summarize: bool,
    pub max_depth: Option<usize>,
    pub human: bool,
    /// `-b`: apparent sizes, in bytes.
    pub bytes: bool,
    pub apparent: bool,
    pub total: bool,
}

impl Options {
    fn apparent(&self) -> bool {
        self.apparent || self.bytes
    }

    fn size(&self, st: &Stat) -> u64 {
        if self.apparent() {
            st.size
        } else {
            st.blocks.saturating_mul(512)
        }
    }

    fn shown(&self, bytes: u64) -> String {
        if self.human {
            du_human(bytes)
        } else if self.bytes {
            bytes.to_string()
        } else {
            bytes.div_ceil(1024).to_string()
        }
    }

    fn prints(&self, depth: usize) -> bool {
        let max = if self.summarize {
            Some(0)
        } else {
            self.max_depth
        };
        max.is_none_or(|m| depth <= m)
    }
}

pub fn run(image_path: &Path, paths: &[Vec<u8>], opts: &Options) -> CliResult {
    let mut failures = Failures::default();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let io_err = |e: &std::io::Error| CliError::io("du: stdout", e);
    image::with_fs("du", image_path, Access::ReadOnly, |fs| {
        let _ = fs.set_max_fds(ulfs::posix::fdtable::MAX_FDS_CEILING);
        let mut du = Du {
            opts,
            out: &mut out,
            failures: &mut failures,
            seen: HashSet::new(),
            totals: Vec::new(),
            io: Ok(()),
        };
        let mut grand = 0u64;
        for path in paths {
            grand = grand.saturating_add(du.operand(fs, path));
            if du.io.is_err() {
                break;
            }
        }
        if opts.total && du.io.is_ok() {
            du.io = du.line(grand, b"total");
        }
        std::mem::replace(&mut du.io, Ok(())).map_err(|e| io_err(&e))?;
        out.flush().map_err(|e| io_err(&e))
    })?;
    failures.finish()
}

struct Du<'a, W: Write> {
    opts: &'a Options,
    out: &'a mut W,
    failures: &'a mut Failures,
    /// Inodes with several links already counted.
    seen: HashSet<u64>,
    /// The running total of each directory entered, from the operand down.
    totals: Vec<u64>,
    /// The first failure to write stdout: nothing more is worth doing.
    io: std::io::Result<()>,
}

impl<W: Write> Du<'_, W> {
    fn line(&mut self, bytes: u64, path: &[u8]) -> std::io::Result<()> {
        self.out.write_all(self.opts.shown(bytes).as_bytes())?;
        self.out.write_all(b"\t")?;
        self.out.write_all(path)?;
        self.out.write_all(b"\n")
    }

    fn print(&mut self, bytes: u64, path: &[u8]) {
        if self.io.is_ok() {
            self.io = self.line(bytes, path);
        }
    }

    /// Counts a non-directory once; its size, or 0 if counted before.
    fn count(&mut self, st: &Stat) -> u64 {
        if st.nlink > 1 && !st.is_dir() && !self.seen.insert(st.ino) {
            return 0;
        }
        self.opts.size(st)
    }

    /// The usage below and of `path`, printed as the options say.
    fn operand(&mut self, fs: &mut Fs, path: &[u8]) -> u64 {
        let st = match fs.lstat(path) {
            Ok(st) => st,
            Err(e) => {
                self.failures
                    .report(CliError::errno(format!("du: {}", show(path)), e));
                return 0;
            }
        };
        if !st.is_dir() {
            let n = self.count(&st);
            self.print(n, path);
            return n;
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let fd = match fs.open(path, flags, 0) {
            Ok(fd) => fd,
            Err(e) => {
                self.failures
                    .report(CliError::errno(format!("du: {}", show(path)), e));
                return 0;
            }
        };
        self.totals = vec![self.opts.size(&st)];
        walk::walk(fs, fd, path, self);
        let _ = fs.close(fd);
        let total = self.totals.pop().unwrap_or(0);
        self.print(total, path);
        total
    }
}

impl<W: Write> walk::Visit for Du<'_, W> {
    fn dir(&mut self, _fs: &mut Fs, _dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
        if at.depth() > 0 {
            self.totals.push(0);
        }
        let mut subdirs = Vec::new();
        for item in items {
            if item.stat.is_dir() {
                subdirs.push(item.name);
                continue;
            }
            let n = self.count(&item.stat);
            if let Some(t) = self.totals.last_mut() {
                *t = t.saturating_add(n);
            }
            if self.opts.all && self.opts.prints(at.depth() + 1) {
                self.print(n, &at.child(&item.name));
            }
        }
        subdirs
    }

    fn leave(&mut self, fs: &mut Fs, _parent: Fd, fd: Fd, at: &At) {
        let mut total = self.totals.pop().unwrap_or(0);
        match fs.fstat(fd) {
            Ok(st) => total = total.saturating_add(self.opts.size(&st)),
            Err(e) => self.error(&at.path(), e),
        }
        if self.opts.prints(at.depth()) {
            self.print(total, &at.path());
        }
        if let Some(t) = self.totals.last_mut() {
            *t = t.saturating_add(total);
        }
    }

    fn error(&mut self, path: &[u8], e: Errno) {
        self.failures
            .report(CliError::errno(format!("du: {}", show(path)), e));
    }

    fn stop(&self) -> bool {
        self.io.is_err()
    }
}

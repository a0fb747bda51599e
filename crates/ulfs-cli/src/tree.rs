//! `ulfs tree` (and `ulfs ls --tree`): an image directory drawn as
//! tree(1) draws one, then how many directories and files it holds.
//!
//! Hidden names are shown (as `ls` here shows them: an image has no
//! hidden files, only names), sorted bytewise, symlinks with their
//! targets and never followed. The walk is a loop over an explicit stack
//! of open directories, so depth is bounded by memory, not by the call
//! stack; `-L` bounds it on request.

use std::io::{BufWriter, Write};
use std::path::Path;

use ulfs::{Fd, Fs};

use crate::dir;
use crate::error::{CliError, CliResult, Failures, errno_text};
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::walk::Item;

pub struct Options {
    /// `-L`: levels below the operand to show (none: all).
    pub level: Option<usize>,
    /// `-d`: directories only.
    pub dirs_only: bool,
}

pub fn run(image_path: &Path, path: &[u8], opts: &Options) -> CliResult {
    let mut failures = Failures::default();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    image::with_fs("tree", image_path, Access::ReadOnly, |fs| {
        let _ = fs.set_max_fds(ulfs::posix::fdtable::MAX_FDS_CEILING);
        draw(fs, path, opts, &mut out, &mut failures)
            .and_then(|()| out.flush())
            .map_err(|e| CliError::io("tree: stdout", &e))
    })?;
    failures.finish()
}

struct Frame {
    fd: Fd,
    items: Vec<Item>,
    next: usize,
}

/// The entries of the directory open as `fd`, each lstat'ed; failures
/// are reported and what could be read is drawn.
fn list(
    fs: &mut Fs,
    fd: Fd,
    path: &dyn Fn() -> Vec<u8>,
    failures: &mut Failures,
    dirs_only: bool,
) -> Vec<Item> {
    let (names, failed) = dir::read_dir_fd(fs, fd);
    if let Some(e) = failed {
        failures.report(CliError::errno(format!("tree: {}", show(&path())), e));
    }
    let mut items = Vec::with_capacity(names.len());
    for name in names {
        match fs.fstatat(fd, &name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if dirs_only && !stat.is_dir() => {}
            Ok(stat) => items.push(Item { name, stat }),
            Err(e) => failures.report(CliError::errno(
                format!("tree: {}", show(&imgpath::join(&path(), &name))),
                e,
            )),
        }
    }
    items
}

/// A name as one line of the drawing: control characters (a newline in
/// a name would break the tree) shown as `?`, as tree(1) does.
fn printable(name: &[u8]) -> impl Iterator<Item = u8> + '_ {
    name.iter()
        .map(|&b| if b < 0x20 || b == 0x7f { b'?' } else { b })
}

fn draw(
    fs: &mut Fs,
    path: &[u8],
    opts: &Options,
    out: &mut impl Write,
    failures: &mut Failures,
) -> std::io::Result<()> {
    let top = match fs.lstat(path) {
        Ok(st) => st,
        Err(e) => {
            failures.report(CliError::errno(format!("tree: {}", show(path)), e));
            return Ok(());
        }
    };
    out.write_all(path)?;
    if !top.is_dir() {
        if top.is_symlink() {
            let target = fs.readlink(path).unwrap_or_else(|_| b"?".to_vec());
            out.write_all(b" -> ")?;
            out.write_all(&target)?;
        }
        out.write_all(b"\n")?;
        return summary(out, 0, 1);
    }
    out.write_all(b"\n")?;
    let fd = match fs.open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(e) => {
            failures.report(CliError::errno(format!("tree: {}", show(path)), e));
            return Ok(());
        }
    };
    // Names below the operand, for messages only.
    let mut names: Vec<Vec<u8>> = Vec::new();
    let here = |names: &[Vec<u8>]| {
        let mut p = path.to_vec();
        for n in names {
            p = imgpath::join(&p, n);
        }
        p
    };
    let items = list(fs, fd, &|| here(&names), failures, opts.dirs_only);
    let mut frames = vec![Frame { fd, items, next: 0 }];
    let (mut dirs, mut files) = (0u64, 0u64);
    let written = loop {
        let Some(frame) = frames.last_mut() else {
            break Ok(());
        };
        if frame.next == frame.items.len() {
            let done = frames.pop().expect("a frame");
            let _ = fs.close(done.fd);
            names.pop();
            continue;
        }
        let i = frame.next;
        frame.next += 1;
        let parent = frame.fd;
        let last = frame.next == frame.items.len();
        let Item { name, stat } = std::mem::replace(
            &mut frame.items[i],
            Item {
                name: Vec::new(),
                stat: Default::default(),
            },
        );
        let mut line = Vec::new();
        for f in &frames[..frames.len() - 1] {
            let done = f.next == f.items.len();
            line.extend_from_slice(if done { "    " } else { "│   " }.as_bytes());
        }
        line.extend_from_slice(if last { "└── " } else { "├── " }.as_bytes());
        line.extend(printable(&name));
        if stat.is_symlink() {
            let target = fs
                .readlinkat(parent, &name)
                .unwrap_or_else(|_| b"?".to_vec());
            line.extend_from_slice(b" -> ");
            line.extend(printable(&target));
        }
        let mut opened = None;
        if stat.is_dir() {
            dirs += 1;
            if opts.level.is_none_or(|l| frames.len() < l) {
                let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
                match fs.openat(parent, &name, flags, 0) {
                    Ok(fd) => opened = Some(fd),
                    Err(e) => {
                        line.extend_from_slice(format!("  [{}]", errno_text(e)).as_bytes());
                        let at = imgpath::join(&here(&names), &name);
                        failures.report(CliError::errno(format!("tree: {}", show(&at)), e));
                    }
                }
            }
        } else {
            files += 1;
        }
        line.push(b'\n');
        if let Err(e) = out.write_all(&line) {
            if let Some(fd) = opened {
                let _ = fs.close(fd);
            }
            break Err(e);
        }
        if let Some(fd) = opened {
            names.push(name);
            let items = list(fs, fd, &|| here(&names), failures, opts.dirs_only);
            frames.push(Frame { fd, items, next: 0 });
        }
    };
    for frame in frames {
        let _ = fs.close(frame.fd);
    }
    written?;
    summary(out, dirs, files)
}

fn summary(out: &mut impl Write, dirs: u64, files: u64) -> std::io::Result<()> {
    let d = if dirs == 1 {
        "directory"
    } else {
        "directories"
    };
    let f = if files == 1 { "file" } else { "files" };
    writeln!(out, "\n{dirs} {d}, {files} {f}")
}

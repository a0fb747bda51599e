//! `ulfs ls`: list image directories like `ls -1`, `ls -l` and `ls -R`, or
//! as JSON (`--json`, json.rs) so scripts need not parse text.
//!
//! Names are written as raw bytes (they are bytes in the image) and sorted
//! bytewise, so output is stable and can be compared with `LC_ALL=C ls`.
//! Owners are shown as numbers: the image's uid/gid need not exist on the
//! host that inspects it. Trees are walked by descriptor (walk.rs), so
//! depth is bounded by memory, not by PATH_MAX.

use std::io::{BufWriter, Write};
use std::path::Path;

use ulfs::{Errno, Fd, Fs, Stat};

use crate::error::{CliError, CliResult, Failures};
use crate::format::{local_time, mode_string};
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::json;
use crate::walk::{self, At, Item};

pub struct Options {
    pub long: bool,
    pub recursive: bool,
    /// One JSON array of every entry listed (with -R, of the whole tree).
    pub json: bool,
}

/// Where listed entries go: text lines, or elements of one JSON array.
enum Out<'a, W: Write> {
    Text(&'a mut W),
    Json(json::ArrayWriter<&'a mut W>),
}

pub fn run(image_path: &Path, path: &[u8], opts: &Options) -> CliResult {
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failures = Failures::default();
    image::with_fs("ls", image_path, Access::ReadOnly, |fs| {
        let listed = if opts.json {
            // The array is written even when the operand fails, so stdout
            // is always one valid JSON document.
            json::ArrayWriter::new(&mut out).and_then(|w| {
                let mut sink = Out::Json(w);
                list(fs, path, opts, &mut sink, &mut failures)?;
                match sink {
                    Out::Json(w) => w.finish().map(drop),
                    Out::Text(_) => Ok(()),
                }
            })
        } else {
            list(fs, path, opts, &mut Out::Text(&mut out), &mut failures)
        };
        listed.map_err(|e| stdout_error(&e))?;
        out.flush().map_err(|e| stdout_error(&e))
    })?;
    failures.finish()
}

fn stdout_error(e: &std::io::Error) -> CliError {
    CliError::io("ls: stdout", e)
}

fn list<W: Write>(
    fs: &mut Fs,
    path: &[u8],
    opts: &Options,
    out: &mut Out<W>,
    failures: &mut Failures,
) -> std::io::Result<()> {
    let ctx = |p: &[u8]| format!("ls: {}", show(p));
    let stat = match fs.lstat(path) {
        Ok(st) => st,
        Err(e) => {
            failures.report(CliError::errno(ctx(path), e));
            return Ok(());
        }
    };
    // Like ls: a symlink operand to a directory is listed as the directory,
    // except in long mode where the link itself is shown.
    let is_dir = stat.is_dir()
        || (stat.is_symlink()
            && !opts.long
            && !opts.json
            && fs.stat(path).is_ok_and(|s| s.is_dir()));
    if !is_dir {
        let item = Item {
            name: path.to_vec(),
            stat,
        };
        return write_items(fs, libc::AT_FDCWD, None, &[item], opts, out);
    }
    let top = match fs.open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => fd,
        Err(e) => {
            failures.report(CliError::errno(ctx(path), e));
            return Ok(());
        }
    };
    let mut lister = Lister {
        opts,
        out,
        failures,
        first: true,
        io: Ok(()),
    };
    walk::walk(fs, top, path, &mut lister);
    let _ = fs.close(top);
    lister.io
}

/// `ls` over the walk: each directory's entries as it is entered; with
/// -R a "path:" header first and its subdirectories after.
struct Lister<'a, 'o, W: Write> {
    opts: &'a Options,
    out: &'a mut Out<'o, W>,
    failures: &'a mut Failures,
    first: bool,
    /// The first failure to write stdout: nothing more is worth listing.
    io: std::io::Result<()>,
}

impl<W: Write> Lister<'_, '_, W> {
    fn print(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: &[Item]) -> std::io::Result<()> {
        if let (true, Out::Text(out)) = (self.opts.recursive, &mut *self.out) {
            if !self.first {
                out.write_all(b"\n")?;
            }
            out.write_all(&at.path())?;
            out.write_all(b":\n")?;
        }
        self.first = false;
        write_items(fs, dir, Some(at), items, self.opts, self.out)
    }
}

impl<W: Write> walk::Visit for Lister<'_, '_, W> {
    fn dir(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
        if let Err(e) = self.print(fs, dir, at, &items) {
            self.io = Err(e);
            return Vec::new();
        }
        if !self.opts.recursive {
            return Vec::new();
        }
        items
            .into_iter()
            .filter(|i| i.stat.is_dir())
            .map(|i| i.name)
            .collect()
    }

    fn error(&mut self, path: &[u8], e: Errno) {
        self.failures
            .report(CliError::errno(format!("ls: {}", show(path)), e));
    }

    fn stop(&self) -> bool {
        self.io.is_err()
    }
}

/// Items of the directory open as `dir` and found at `at` (AT_FDCWD and
/// no `at`, with a path as name, for a single operand).
fn write_items<W: Write>(
    fs: &mut Fs,
    dir: Fd,
    at: Option<&At>,
    items: &[Item],
    opts: &Options,
    out: &mut Out<W>,
) -> std::io::Result<()> {
    let out = match out {
        Out::Text(out) => &mut **out,
        Out::Json(w) => {
            for item in items {
                let (path, name) = match at {
                    Some(at) => (at.child(&item.name), item.name.as_slice()),
                    None => (
                        item.name.clone(),
                        imgpath::file_name(&item.name).unwrap_or(&item.name),
                    ),
                };
                let target = item
                    .stat
                    .is_symlink()
                    .then(|| fs.readlinkat(dir, &item.name).ok())
                    .flatten();
                w.push(&json::entry(&path, name, &item.stat, target.as_deref()))?;
            }
            return Ok(());
        }
    };
    if !opts.long {
        for item in items {
            out.write_all(&item.name)?;
            out.write_all(b"\n")?;
        }
        return Ok(());
    }
    let width =
        |f: &dyn Fn(&Stat) -> String| items.iter().map(|i| f(&i.stat).len()).max().unwrap_or(0);
    let w_nlink = width(&|s| s.nlink.to_string());
    let w_uid = width(&|s| s.uid.to_string());
    let w_gid = width(&|s| s.gid.to_string());
    let w_size = width(&|s| s.size.to_string());
    for item in items {
        let s = &item.stat;
        write!(
            out,
            "{} {:>w_nlink$} {:>w_uid$} {:>w_gid$} {:>w_size$} {} ",
            mode_string(s.mode),
            s.nlink,
            s.uid,
            s.gid,
            s.size,
            local_time(s.mtime),
        )?;
        out.write_all(&item.name)?;
        if s.is_symlink() {
            // An unreadable target is shown as such rather than failing the
            // whole listing: the entry itself was found.
            let target = fs
                .readlinkat(dir, &item.name)
                .unwrap_or_else(|_| b"?".to_vec());
            out.write_all(b" -> ")?;
            out.write_all(&target)?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

//! `ulfs ls`: list image directories like `ls -1`, `ls -l` and `ls -R`.
//!
//! Names are written as raw bytes (they are bytes in the image) and sorted
//! bytewise, so output is stable and can be compared with `LC_ALL=C ls`.
//! Owners are shown as numbers: the image's uid/gid need not exist on the
//! host that inspects it.

use std::io::{BufWriter, Write};
use std::path::Path;

use ulfs::{Fs, Stat};

use crate::dir;
use crate::error::{CliError, CliResult, Failures};
use crate::format::{local_time, mode_string};
use crate::image::{self, Access};
use crate::imgpath::{self, show};

pub struct Options {
    pub long: bool,
    pub recursive: bool,
}

/// One line of output: the name to print and what `lstat` said about it.
struct Item {
    name: Vec<u8>,
    path: Vec<u8>,
    stat: Stat,
}

pub fn run(image_path: &Path, path: &[u8], opts: &Options) -> CliResult {
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failures = Failures::default();
    image::with_fs("ls", image_path, Access::ReadOnly, |fs| {
        list(fs, path, opts, &mut out, &mut failures).map_err(|e| stdout_error(&e))?;
        out.flush().map_err(|e| stdout_error(&e))
    })?;
    failures.finish()
}

fn stdout_error(e: &std::io::Error) -> CliError {
    CliError::io("ls: stdout", e)
}

fn list(
    fs: &mut Fs,
    path: &[u8],
    opts: &Options,
    out: &mut impl Write,
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
        || (stat.is_symlink() && !opts.long && fs.stat(path).is_ok_and(|s| s.is_dir()));
    if !is_dir {
        let item = Item {
            name: path.to_vec(),
            path: path.to_vec(),
            stat,
        };
        return write_items(fs, &[item], opts, out);
    }

    // Explicit stack instead of recursion: a hostile image may nest
    // directories deeper than our stack. Pushing children in reverse keeps
    // ls -R's depth-first order.
    let mut pending = vec![path.to_vec()];
    let mut first = true;
    while let Some(dir_path) = pending.pop() {
        if opts.recursive {
            if !first {
                out.write_all(b"\n")?;
            }
            out.write_all(&dir_path)?;
            out.write_all(b":\n")?;
        }
        first = false;
        let entries = match dir::read_dir(fs, &dir_path) {
            Ok(entries) => entries,
            Err(e) => {
                failures.report(CliError::errno(ctx(&dir_path), e));
                continue;
            }
        };
        let mut items = Vec::with_capacity(entries.len());
        for name in entries {
            let child = imgpath::join(&dir_path, &name);
            match fs.lstat(&child) {
                Ok(stat) => items.push(Item {
                    name,
                    path: child,
                    stat,
                }),
                Err(e) => failures.report(CliError::errno(ctx(&child), e)),
            }
        }
        write_items(fs, &items, opts, out)?;
        if opts.recursive {
            pending.extend(
                items
                    .iter()
                    .rev()
                    .filter(|i| i.stat.is_dir())
                    .map(|i| i.path.clone()),
            );
        }
    }
    Ok(())
}

fn write_items(
    fs: &mut Fs,
    items: &[Item],
    opts: &Options,
    out: &mut impl Write,
) -> std::io::Result<()> {
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
            let target = fs.readlink(&item.path).unwrap_or_else(|_| b"?".to_vec());
            out.write_all(b" -> ")?;
            out.write_all(&target)?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

//! `ulfs stat`: everything an image records about a file, as stat(1)
//! shows it, or as JSON (json.rs) so scripts need not parse text.
//!
//! The text mirrors stat(1)'s default layout, less what the image cannot
//! know (owner names: an image's uids need not exist on the host that
//! reads it) and with times in full (nanoseconds and zone). Like stat(1)
//! it goes on past an operand that fails and exits 1 at the end.

use std::io::{BufWriter, Write};
use std::path::Path;

use ulfs::Stat;

use crate::error::{CliError, CliResult, Failures};
use crate::format::{full_local_time, mode_string, type_words};
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::json;

pub struct Options {
    /// `-L`: follow a symlink operand.
    pub dereference: bool,
    pub json: bool,
}

pub fn run(image_path: &Path, paths: &[Vec<u8>], opts: &Options) -> CliResult {
    let mut failures = Failures::default();
    let stdout = std::io::stdout();
    let out = BufWriter::new(stdout.lock());
    let io_err = |e: std::io::Error| CliError::io("stat: stdout", &e);
    image::with_fs("stat", image_path, Access::ReadOnly, |fs| {
        let mut found = Vec::new();
        for path in paths {
            let st = if opts.dereference {
                fs.stat(path)
            } else {
                fs.lstat(path)
            };
            match st {
                Ok(st) => {
                    let target = st.is_symlink().then(|| fs.readlink(path).ok()).flatten();
                    found.push((path, st, target));
                }
                Err(e) => failures.report(CliError::errno(format!("stat: {}", show(path)), e)),
            }
        }
        if opts.json {
            let mut w = json::ArrayWriter::new(out).map_err(io_err)?;
            for (path, st, target) in &found {
                let name = imgpath::file_name(path).unwrap_or(path);
                w.push(&json::entry(path, name, st, target.as_deref()))
                    .map_err(io_err)?;
            }
            w.finish().map_err(io_err)?;
        } else {
            let mut out = out;
            for (path, st, target) in &found {
                write_text(&mut out, path, st, target.as_deref()).map_err(io_err)?;
            }
            out.flush().map_err(io_err)?;
        }
        Ok(())
    })?;
    failures.finish()
}

fn write_text(
    out: &mut impl Write,
    path: &[u8],
    st: &Stat,
    target: Option<&[u8]>,
) -> std::io::Result<()> {
    out.write_all(b"  File: ")?;
    out.write_all(path)?;
    if let Some(t) = target {
        out.write_all(b" -> ")?;
        out.write_all(t)?;
    }
    out.write_all(b"\n")?;
    writeln!(
        out,
        "  Size: {:<15} Blocks: {:<10} IO Block: {:<6} {}",
        st.size,
        st.blocks,
        st.blksize,
        type_words(st.mode, st.size)
    )?;
    writeln!(out, "Inode: {:<14} Links: {}", st.ino, st.nlink)?;
    writeln!(
        out,
        "Access: ({:04o}/{})  Uid: {:>5}   Gid: {:>5}",
        st.mode & 0o7777,
        mode_string(st.mode),
        st.uid,
        st.gid
    )?;
    writeln!(out, "Access: {}", full_local_time(st.atime))?;
    writeln!(out, "Modify: {}", full_local_time(st.mtime))?;
    writeln!(out, "Change: {}", full_local_time(st.ctime))?;
    writeln!(out, " Birth: {}", full_local_time(st.btime))
}

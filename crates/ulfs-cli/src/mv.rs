//! `ulfs mv`: move or rename entries inside one image, as mv(1) does on
//! one file system: every move is one rename(2), atomic, so a directory of
//! any size moves in O(log n) and a failed move changes nothing.
//!
//! This module owns mv(1)'s choices around the rename: a DST that is an
//! existing directory receives the sources under their own names, several
//! sources need such a DST, and the refusals rename(2) gives only as an
//! errno (a directory into itself, a directory over a file and the other
//! way round, a file onto itself) get words. Moving between images is
//! `cp -a` then `rm -r`: not one atomic step, so not mv.

use std::path::Path;

use ulfs::{Errno, Fs};

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::{self, show};

pub fn run(image_path: &Path, paths: &[Vec<u8>], no_clobber: bool) -> CliResult {
    let Some((dst, srcs)) = paths.split_last().filter(|(_, s)| !s.is_empty()) else {
        return Err(CliError::new("mv", "missing destination operand").with_code(crate::EXIT_USAGE));
    };
    let mut failures = Failures::default();
    image::with_fs("mv", image_path, Access::ReadWrite, |fs| {
        let into_dir = fs.stat(dst).is_ok_and(|st| st.is_dir());
        if srcs.len() > 1 && !into_dir {
            return Err(CliError::new(
                format!("mv: {}", show(dst)),
                "Not a directory (the target of several sources must be an existing directory)",
            ));
        }
        for src in srcs {
            let target = if into_dir {
                match imgpath::file_name(src) {
                    Some(name) => imgpath::join(dst, name),
                    None => {
                        failures
                            .report(CliError::errno(format!("mv: {}", show(src)), Errno::EBUSY));
                        continue;
                    }
                }
            } else {
                dst.clone()
            };
            if let Err(e) = move_one(fs, src, &target, no_clobber) {
                failures.report(e);
            }
        }
        Ok(())
    })?;
    failures.finish()
}

fn move_one(fs: &mut Fs, src: &[u8], target: &[u8], no_clobber: bool) -> CliResult {
    let ctx = || format!("mv: {} -> {}", show(src), show(target));
    if imgpath::is_root(src) {
        return Err(CliError::new(ctx(), "cannot move the root directory"));
    }
    let from = fs
        .lstat(src)
        .map_err(|e| CliError::errno(format!("mv: {}", show(src)), e))?;
    match fs.lstat(target) {
        Ok(to) if to.ino == from.ino => {
            return Err(CliError::new(ctx(), "are the same file"));
        }
        // -n: an existing target is kept, silently, as mv(1) -n does.
        Ok(_) if no_clobber => return Ok(()),
        Ok(to) if to.is_dir() && !from.is_dir() => {
            return Err(CliError::new(
                ctx(),
                "cannot overwrite directory with non-directory",
            ));
        }
        Ok(to) if !to.is_dir() && from.is_dir() => {
            return Err(CliError::new(
                ctx(),
                "cannot overwrite non-directory with directory",
            ));
        }
        _ => {}
    }
    let flags = if no_clobber {
        ulfs::RENAME_NOREPLACE
    } else {
        0
    };
    fs.rename2(src, target, flags).map_err(|e| match e {
        e if e == Errno::EINVAL && from.is_dir() => {
            CliError::new(ctx(), "cannot move a directory into itself")
        }
        e => CliError::errno(ctx(), e),
    })
}

//! `ulfs ln`: hard and symbolic links inside one image, as ln(1) makes
//! them: LINK may be an existing directory that receives each TARGET under
//! its own name, a symlink's target is stored verbatim (resolved only when
//! used, relative to the link's directory), and `-f` replaces an existing
//! non-directory.
//!
//! A hard link is checked before it is made so its refusals name the right
//! operand: a missing TARGET is the target's failure, and a directory
//! gets words instead of link(2)'s bare EPERM.

use std::path::Path;

use ulfs::{Errno, Fs};

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::{self, show};

pub struct Options {
    pub symbolic: bool,
    pub force: bool,
}

pub fn run(image_path: &Path, paths: &[Vec<u8>], opts: &Options) -> CliResult {
    let Some((dst, targets)) = paths.split_last().filter(|(_, t)| !t.is_empty()) else {
        return Err(CliError::new("ln", "missing link name operand").with_code(crate::EXIT_USAGE));
    };
    let mut failures = Failures::default();
    image::with_fs("ln", image_path, Access::ReadWrite, |fs| {
        let into_dir = fs.stat(dst).is_ok_and(|st| st.is_dir());
        if targets.len() > 1 && !into_dir {
            return Err(CliError::new(
                format!("ln: {}", show(dst)),
                "Not a directory (the link name of several targets must be an existing directory)",
            ));
        }
        for target in targets {
            let link = if into_dir {
                match imgpath::file_name(target) {
                    Some(name) => imgpath::join(dst, name),
                    None => {
                        failures.report(CliError::new(
                            format!("ln: {}", show(target)),
                            "has no name to give the link",
                        ));
                        continue;
                    }
                }
            } else {
                dst.clone()
            };
            if let Err(e) = link_one(fs, target, &link, opts) {
                failures.report(e);
            }
        }
        Ok(())
    })?;
    failures.finish()
}

fn link_one(fs: &mut Fs, target: &[u8], link: &[u8], opts: &Options) -> CliResult {
    let at_link = |e: Errno| CliError::errno(format!("ln: {}", show(link)), e);
    if !opts.symbolic {
        let st = fs
            .lstat(target)
            .map_err(|e| CliError::errno(format!("ln: {}", show(target)), e))?;
        if st.is_dir() {
            return Err(CliError::new(
                format!("ln: {}", show(target)),
                "hard link not allowed for directory",
            ));
        }
        if opts.force && fs.lstat(link).is_ok_and(|l| l.ino == st.ino) {
            return Err(CliError::new(
                format!("ln: {} -> {}", show(target), show(link)),
                "are the same file",
            ));
        }
    }
    if opts.force {
        match fs.lstat(link) {
            Ok(st) if st.is_dir() => {
                return Err(CliError::new(
                    format!("ln: {}", show(link)),
                    "cannot overwrite directory",
                ));
            }
            Ok(_) => fs.unlink(link).map_err(at_link)?,
            Err(_) => {}
        }
    }
    if opts.symbolic {
        fs.symlink(target, link).map_err(at_link)
    } else {
        fs.link(target, link).map_err(at_link)
    }
}

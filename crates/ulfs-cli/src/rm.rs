//! `ulfs rm`: remove files, and with `-r` whole directory trees.
//!
//! Mirrors rm(1): a directory without `-r` is an error (it is rarely what
//! was meant), the root is never removed, and a failure on one operand does
//! not stop the others, nor does one failing entry inside a tree. Trees
//! are removed by descriptor, so their depth is bounded by memory only.

use std::path::Path;

use ulfs::{Errno, Fd, Fs};

use crate::error::{CliError, CliResult, Failures, at_path};
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::walk::{self, At, Item};

pub fn run(image_path: &Path, paths: &[Vec<u8>], recursive: bool) -> CliResult {
    let mut failures = Failures::default();
    image::with_fs("rm", image_path, Access::ReadWrite, |fs| {
        for path in paths {
            let ctx = || format!("rm: {}", show(path));
            if imgpath::is_root(path) {
                failures.report(CliError::new(
                    ctx(),
                    "refusing to remove the root directory",
                ));
                continue;
            }
            let removed = match fs.lstat(path) {
                Err(e) => Err(CliError::errno(ctx(), e)),
                Ok(st) if st.is_dir() && !recursive => Err(CliError::new(
                    ctx(),
                    "Is a directory (use -r to remove it and its contents)",
                )),
                Ok(st) if st.is_dir() => remove_tree(fs, path),
                Ok(_) => fs.unlink(path).map_err(|e| CliError::errno(ctx(), e)),
            };
            if let Err(e) = removed {
                failures.report(e);
            }
        }
        Ok(())
    })?;
    failures.finish()
}

/// Removes the tree below `top` and then `top`, by descriptor (walk.rs):
/// files as each directory is entered, each directory once everything
/// below it is gone. Like rm(1) it goes on past a failure, reports each,
/// and leaves the directories above a failure in place (they cannot be
/// empty) rather than report them too.
fn remove_tree(fs: &mut Fs, top: &[u8]) -> CliResult {
    let fd = fs
        .open(
            top,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(at_path("rm", top))?;
    let mut remover = Remover {
        failures: Failures::default(),
        failed_below: vec![false],
    };
    walk::walk(fs, fd, top, &mut remover);
    let closed = fs.close(fd);
    let failed = remover.failed_below.pop().unwrap_or(true);
    if !failed {
        closed.map_err(at_path("rm", top))?;
        fs.rmdir(top).map_err(at_path("rm", top))?;
    }
    remover.failures.finish()
}

struct Remover {
    failures: Failures,
    /// Per open directory, from the top: did something below it fail?
    failed_below: Vec<bool>,
}

impl Remover {
    fn fail(&mut self, e: CliError) {
        self.failures.report(e);
        if let Some(f) = self.failed_below.last_mut() {
            *f = true;
        }
    }
}

impl walk::Visit for Remover {
    fn dir(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
        if at.depth() > 0 {
            self.failed_below.push(false);
        }
        let mut subdirs = Vec::new();
        for item in items {
            if item.stat.is_dir() {
                subdirs.push(item.name);
            } else if let Err(e) = fs.unlinkat(dir, &item.name, 0) {
                self.fail(CliError::errno(
                    format!("rm: {}", show(&at.child(&item.name))),
                    e,
                ));
            }
        }
        subdirs
    }

    fn leave(&mut self, fs: &mut Fs, parent: Fd, _fd: Fd, at: &At) {
        let failed = self.failed_below.pop().unwrap_or(true);
        if failed {
            // The parent cannot be emptied either.
            if let Some(f) = self.failed_below.last_mut() {
                *f = true;
            }
            return;
        }
        if let Err(e) = fs.unlinkat(parent, at.name(), libc::AT_REMOVEDIR) {
            self.fail(CliError::errno(format!("rm: {}", show(&at.path())), e));
        }
    }

    fn error(&mut self, path: &[u8], e: Errno) {
        self.fail(CliError::errno(format!("rm: {}", show(path)), e));
    }
}

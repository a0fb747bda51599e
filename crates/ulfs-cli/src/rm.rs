//! `ulfs rm`: remove files, and with `-r` whole directory trees.
//!
//! Mirrors rm(1): a directory without `-r` is an error (it is rarely what
//! was meant), the root is never removed, and a failure on one operand does
//! not stop the others.

use std::path::Path;

use ulfs::Fs;

use crate::dir;
use crate::error::{CliError, CliResult, Failures, at_path};
use crate::image::{self, Access};
use crate::imgpath::{self, show};

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

/// Depth-first removal without recursion (a deep tree must not overflow the
/// stack). Each directory is visited twice: once to delete its files and
/// queue its subdirectories, and again, after them, to remove it.
fn remove_tree(fs: &mut Fs, top: &[u8]) -> CliResult {
    let mut stack: Vec<(Vec<u8>, bool)> = vec![(top.to_vec(), false)];
    while let Some((path, emptied)) = stack.pop() {
        if emptied {
            fs.rmdir(&path).map_err(at_path("rm", &path))?;
            continue;
        }
        stack.push((path.clone(), true));
        for name in dir::read_dir(fs, &path).map_err(at_path("rm", &path))? {
            let child = imgpath::join(&path, &name);
            let st = fs.lstat(&child).map_err(at_path("rm", &child))?;
            if st.is_dir() {
                stack.push((child, false));
            } else {
                fs.unlink(&child).map_err(at_path("rm", &child))?;
            }
        }
    }
    Ok(())
}

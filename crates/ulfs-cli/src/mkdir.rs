//! `ulfs mkdir`: create directories in the image, optionally with parents.

use std::path::Path;

use crate::dir;
use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::show;

/// `rwxr-xr-x`: what mkdir(1) yields under the usual umask 022. In
/// library mode there is no umask, so the CLI picks the familiar result.
const DIR_MODE: u32 = 0o755;

pub fn run(image_path: &Path, paths: &[Vec<u8>], parents: bool) -> CliResult {
    let mut failures = Failures::default();
    image::with_fs("mkdir", image_path, Access::ReadWrite, |fs| {
        for path in paths {
            let made = if parents {
                dir::mkdir_p(fs, path, DIR_MODE)
            } else {
                fs.mkdir(path, DIR_MODE)
            };
            if let Err(e) = made {
                failures.report(CliError::errno(format!("mkdir: {}", show(path)), e));
            }
        }
        Ok(())
    })?;
    failures.finish()
}

//! `ulfs fsck`: check an image and map the outcome to fsck(8)-style exit
//! codes, so scripts can tell "damaged" (4) from "could not look" (8).

use std::path::Path;

use ulfs::FsckOptions;

use crate::error::{CliError, CliResult};
use crate::image;
use crate::progress::{Progress, Unit};

pub const EXIT_ERRORS_FOUND: i32 = 4;
pub const EXIT_OPERATIONAL_ERROR: i32 = 8;

pub fn run(image_path: &Path) -> CliResult {
    let ctx = format!("fsck: {}", image_path.display());
    // The callback must be 'static, so the bar is owned by the closure and
    // cleared when fsck drops its options.
    let mut progress = Progress::new("checking", Unit::Steps, 0);
    let mut opts = FsckOptions {
        progress: Some(Box::new(move |done, total| progress.set(done, total))),
    };
    let report = ulfs::fsck(image_path, &mut opts);
    drop(opts);
    let report = report.map_err(|e| {
        image::whole_image_error("fsck", image_path, &e).with_code(EXIT_OPERATIONAL_ERROR)
    })?;
    for problem in &report.problems {
        println!("{problem}");
    }
    println!(
        "{}: {} files, {} directories, {} symlinks, {} blocks used",
        image_path.display(),
        report.files,
        report.dirs,
        report.symlinks,
        report.used_blocks
    );
    if report.is_clean() {
        println!("clean");
        Ok(())
    } else {
        Err(CliError::new(
            &ctx,
            format!(
                "image is damaged; {} problem(s) listed above",
                report.problems.len()
            ),
        )
        .with_code(EXIT_ERRORS_FOUND))
    }
}

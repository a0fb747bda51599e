//! `ulfs fsck`: check an image (and with `--repair`, fix it) and map the
//! outcome to fsck(8)'s exit codes, so scripts can tell "repaired" (1),
//! "damaged" (4) and "could not look" (8) apart.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use ulfs::{FsckOptions, FsckReport};

use crate::error::{CliError, CliResult};
use crate::image;
use crate::progress::{Progress, Unit};

pub const EXIT_ERRORS_CORRECTED: i32 = 1;
pub const EXIT_ERRORS_FOUND: i32 = 4;
pub const EXIT_OPERATIONAL_ERROR: i32 = 8;

/// Options whose callbacks drive a progress bar on stderr, one bar per
/// phase (checking, repairing, re-checking). The bar shows only on a
/// terminal and once a phase has run for a while, so small images and
/// pipes never see it.
fn options() -> FsckOptions {
    let bar = Rc::new(RefCell::new(Progress::new("checking", Unit::Steps, 0)));
    let for_phase = Rc::clone(&bar);
    FsckOptions {
        progress: Some(Box::new(move |done, total| {
            bar.borrow_mut().set(done, total)
        })),
        phase: Some(Box::new(move |name| {
            let mut p = for_phase.borrow_mut();
            p.finish();
            *p = Progress::new(name, Unit::Steps, 0);
        })),
    }
}

fn summary(image_path: &Path, report: &FsckReport) {
    println!(
        "{}: {} files, {} directories, {} symlinks, {} blocks used",
        image_path.display(),
        report.files,
        report.dirs,
        report.symlinks,
        report.used_blocks
    );
}

fn operational(image_path: &Path, e: &ulfs::Error) -> CliError {
    image::whole_image_error("fsck", image_path, e).with_code(EXIT_OPERATIONAL_ERROR)
}

pub fn run(image_path: &Path, repair: bool) -> CliResult {
    if repair {
        return run_repair(image_path);
    }
    let ctx = format!("fsck: {}", image_path.display());
    let mut opts = options();
    let report = ulfs::fsck(image_path, &mut opts);
    // Dropping the options clears the bar before anything is printed.
    drop(opts);
    let report = report.map_err(|e| operational(image_path, &e))?;
    for problem in &report.problems {
        println!("{problem}");
    }
    summary(image_path, &report);
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

fn run_repair(image_path: &Path) -> CliResult {
    let ctx = format!("fsck: {}", image_path.display());
    let mut opts = options();
    let res = ulfs::fsck_repair(image_path, &mut opts);
    drop(opts);
    let r = res.map_err(|e| operational(image_path, &e))?;
    for problem in &r.found {
        println!("{problem}");
    }
    for fix in &r.fixed {
        println!("fixed: {fix}");
    }
    for problem in &r.remaining {
        println!("remaining: {problem}");
    }
    summary(image_path, &r.report);
    match r.exit_code() {
        0 => {
            println!("clean");
            Ok(())
        }
        EXIT_ERRORS_CORRECTED => {
            println!("repaired ({} fix(es) listed above)", r.fixed.len());
            Err(CliError::reported(EXIT_ERRORS_CORRECTED))
        }
        _ => Err(CliError::new(
            &ctx,
            format!(
                "{} problem(s) could not be repaired; listed above",
                r.remaining.len()
            ),
        )
        .with_code(EXIT_ERRORS_FOUND)),
    }
}

//! The `ulfs` binary run by a test: its output, success with stdout, or a
//! refusal (exit 1) with stderr. The binary's path is the test crate's
//! (`env!("CARGO_BIN_EXE_ulfs")`), passed in.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

pub fn run<S: AsRef<OsStr>>(ulfs: &Path, args: &[S]) -> Output {
    Command::new(ulfs).args(args).output().expect("run ulfs")
}

/// Runs and requires success; stdout.
pub fn ok<S: AsRef<OsStr>>(ulfs: &Path, args: &[S]) -> String {
    let out = run(ulfs, args);
    assert!(
        out.status.success(),
        "ulfs {:?} failed ({:?}): {}",
        shown(args),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs and requires the ordinary failure status (1); stderr.
pub fn refused<S: AsRef<OsStr>>(ulfs: &Path, args: &[S]) -> String {
    let out = run(ulfs, args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "ulfs {:?}: {:?}: {err}",
        shown(args),
        out.status
    );
    err
}

fn shown<S: AsRef<OsStr>>(args: &[S]) -> Vec<String> {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

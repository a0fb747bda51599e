//! `ulfs run --memory-budget`: a program streaming more file data than its
//! budget leaves little of the image in the host's page cache, and the
//! same run with `--memory-budget none` (or 0) leaves (nearly) all of it;
//! a sandboxed program keeps its budget; bad values are refused before the
//! program starts.
//!
//! The image is under Cargo's target directory, on the disk (pages of a
//! file on tmpfs cannot be dropped). The preload library must have been
//! built with the binary (scripts/test.sh builds the workspace first).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use ulfs_testkit::page_cache::{evict, resident_pages};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");
const MIB: usize = 1 << 20;

fn image() -> (tempfile::TempDir, PathBuf) {
    let lib = Path::new(ULFS).with_file_name("libulfs_preload.so");
    assert!(
        lib.is_file(),
        "{} is missing: cargo build --workspace",
        lib.display()
    );
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let img = dir.path().join("run.img");
    let out = Command::new(ULFS)
        .args(["mkfs", img.to_str().unwrap(), "64M"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, img)
}

/// `ulfs run IMG OPTIONS -- sh -c SCRIPT`.
fn run(img: &Path, options: &[&str], script: &str) -> Output {
    Command::new(ULFS)
        .arg("run")
        .arg(img)
        .args(options)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

fn must(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Writes 24 MiB into the image with dd and reads it back with cmp under
/// `ulfs run OPTIONS`; returns the image's resident pages after each.
fn stream(options: &[&str]) -> (usize, usize) {
    let (_dir, img) = image();
    evict(&img);
    let write = "dd if=/dev/zero of=/ulfs/big bs=64k count=384 2>/dev/null";
    must(run(&img, options, write));
    let written = resident_pages(&img);
    evict(&img);
    let read = "cmp -n 25165824 /ulfs/big /dev/zero && wc -c < /ulfs/big";
    let out = must(run(&img, options, read));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (24 * MIB).to_string()
    );
    (written, resident_pages(&img))
}

/// The budget's pages of file data, plus metadata and journal the stream
/// touched (never released), stay well under this many pages.
const BOUND: usize = 4 * MIB / 4096;

#[test]
fn a_budget_keeps_a_stream_out_of_the_page_cache() {
    let (written, read) = stream(&["--memory-budget", "512K"]);
    assert!(written < BOUND, "{written} pages resident after writing");
    assert!(read < BOUND, "{read} pages resident after reading");
    // Without one, the host keeps the stream: the bound above means
    // something.
    for none in ["none", "0"] {
        let (written, read) = stream(&["--memory-budget", none]);
        let most = 24 * MIB / 4096 * 9 / 10;
        assert!(
            written > most,
            "{none}: {written} pages resident after writing"
        );
        assert!(read > most, "{none}: {read} pages resident after reading");
    }
}

#[test]
fn a_sandboxed_program_keeps_its_budget() {
    let (written, read) = stream(&["--sandbox", "--memory-budget", "512K"]);
    assert!(written < BOUND, "{written} pages resident after writing");
    assert!(read < BOUND, "{read} pages resident after reading");
}

#[test]
fn a_bad_budget_is_refused_before_the_program_runs() {
    let (_dir, img) = image();
    for bad in ["", "lots", "1.5M", "-1", "8X"] {
        let out = run(&img, &["--memory-budget", bad], "echo ran");
        assert_eq!(out.status.code(), Some(2), "--memory-budget {bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--memory-budget"), "{bad:?}: {err}");
        assert!(out.stdout.is_empty(), "{bad:?}: the program ran");
    }
    for good in ["auto", "none", "0", "8M", "65536"] {
        let out = run(&img, &["--memory-budget", good], "echo ran");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n", "{good}");
    }
}

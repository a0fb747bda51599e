//! `ulfs convert` (original ULFS images into ulfs images), the other
//! commands on a v1 image (read-only, the file untouched), and `ulfs
//! resize` (grow, shrink, refusals that say why and change nothing).

use std::path::{Path, PathBuf};
use std::process::Output;

use ulfs_testkit::cli;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

type Args<'a> = [&'a dyn AsRef<std::ffi::OsStr>];

fn os<'a>(args: &'a Args<'a>) -> Vec<&'a std::ffi::OsStr> {
    args.iter().map(|a| a.as_ref()).collect()
}

fn ulfs(args: &Args) -> Output {
    cli::run(Path::new(ULFS), &os(args))
}

fn ok(args: &Args) -> String {
    cli::ok(Path::new(ULFS), &os(args))
}

fn refused(args: &Args) -> String {
    cli::refused(Path::new(ULFS), &os(args))
}

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/ulfs-v1/sample-v1.img")
}

fn assert_clean(image: &Path) {
    let out = ok(&[&"fsck", &image]);
    assert!(out.contains("clean"), "{out}");
}

#[test]
fn a_v1_image_is_read_by_every_reading_command_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.img");
    std::fs::copy(sample(), &v1).unwrap();
    let before = std::fs::read(&v1).unwrap();
    let listing = ok(&[&"ls", &v1, &"/"]);
    assert!(
        listing.contains("README.txt") && listing.contains("data"),
        "{listing}"
    );
    assert_eq!(ok(&[&"cat", &v1, &"/README.txt"]), "ULFS v1 sample image\n");
    let info = ok(&[&"info", &v1]);
    assert!(info.contains("original ULFS (v1)"), "{info}");
    let out = dir.path().join("out");
    ok(&[&"export", &v1, &"/", &out]);
    assert_eq!(
        std::fs::metadata(out.join("data/big")).unwrap().len(),
        6_291_579
    );
    assert_clean(&v1);
    let err = refused(&[&"mkdir", &v1, &"/new"]);
    assert!(err.contains("v1") && err.contains("ulfs convert"), "{err}");
    // fsck's "could not be checked" status (8), with the reason.
    let out = ulfs(&[&"fsck", &"--repair", &v1]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{err}");
    assert!(err.contains("never writes"), "{err}");
    let err = refused(&[&"resize", &v1, &"64M"]);
    assert!(err.contains("ulfs convert"), "{err}");
    assert!(
        std::fs::read(&v1).unwrap() == before,
        "the v1 image changed"
    );
}

#[test]
fn convert_makes_a_clean_writable_image_and_refuses_what_it_should() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.img");
    let out = ok(&[&"convert", &sample(), &new]);
    assert!(out.contains("files"), "{out}");
    assert_clean(&new);
    assert_eq!(
        ok(&[&"cat", &new, &"/README.txt"]),
        "ULFS v1 sample image\n"
    );
    ok(&[&"mkdir", &new, &"/writable"]);
    // An existing image is not replaced without --force.
    let err = refused(&[&"convert", &sample(), &new]);
    assert!(err.contains("--force"), "{err}");
    ok(&[&"convert", &"--force", &sample(), &new]);
    // Not a v1 image: refused, nothing made.
    let other = dir.path().join("other.img");
    let err = refused(&[&"convert", &new, &other]);
    assert!(err.contains("not an original ULFS"), "{err}");
    assert!(!other.exists());
    // A damaged v1 image: the error names the damage, nothing is left.
    let bad = dir.path().join("bad.img");
    let mut bytes = std::fs::read(sample()).unwrap();
    bytes[2 * 4096..2 * 4096 + 4].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&bad, bytes).unwrap();
    let err = refused(&[&"convert", &bad, &other]);
    assert!(err.contains("loops"), "{err}");
    assert!(!other.exists(), "a half-made image was left");
}

#[test]
fn resize_grows_and_shrinks_a_file_image_and_says_why_when_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ok(&[&"mkfs", &img, &"32M"]);
    let host = dir.path().join("f");
    std::fs::write(&host, vec![9u8; 3 << 20]).unwrap();
    ok(&[&"import", &img, &dir.path().join("f"), &"/"]);
    ok(&[&"resize", &img, &"300M"]);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 300 << 20);
    assert_clean(&img);
    let info = ok(&[&"info", &img]);
    assert!(info.contains("76800"), "{info}");
    // Fill the grown room past 200 MiB, so a shrink to 64M is in its way.
    let big = dir.path().join("big");
    std::fs::write(&big, vec![1u8; 200 << 20]).unwrap();
    ok(&[&"import", &img, &big, &"/"]);
    let before = std::fs::read(&img).unwrap();
    let err = refused(&[&"resize", &img, &"64M"]);
    assert!(err.contains("in use past"), "{err}");
    // A refusal leaves the image as it was but for the mount's own
    // record (count, time), and marked clean.
    let info = ok(&[&"info", &img, &"--json"]);
    assert!(info.contains("\"clean\": true"), "{info}");
    let changed = std::fs::read(&img)
        .unwrap()
        .iter()
        .zip(&before)
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        changed < 4096,
        "{changed} bytes changed by a refused resize"
    );
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        300 << 20,
        "unchanged"
    );
    ok(&[&"rm", &img, &"/big"]);
    ok(&[&"resize", &img, &"40M"]);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 40 << 20);
    assert_clean(&img);
    assert_eq!(
        ok(&[&"cat", &img, &"/f"]).len(),
        3 << 20,
        "the file survived both"
    );
    // Too small, and an image in use, are refused and change nothing.
    let err = refused(&[&"resize", &img, &"64K"]);
    assert!(err.contains("below the smallest"), "{err}");
    let info = ok(&[&"info", &img, &"--json"]);
    assert!(info.contains("\"clean\": true"), "{info}");
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 40 << 20);
    let held = std::fs::File::open(&img).unwrap();
    held.lock().unwrap();
    let err = refused(&[&"resize", &img, &"50M"]);
    assert!(err.contains("in use"), "{err}");
    drop(held);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 40 << 20);
}

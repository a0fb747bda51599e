//! `ulfs debug`: requests from the command line and from stdin, answers
//! that name what they should (a file's blocks and their owner), errors
//! for bad requests, and an image left byte for byte as it was.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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

fn image_with_a_file(dir: &Path) -> std::path::PathBuf {
    let img = dir.join("img");
    ok(&[&"mkfs", &img, &"16M"]);
    let host = dir.join("f");
    std::fs::write(&host, vec![3u8; 5 * 4096]).unwrap();
    ok(&[&"import", &img, &host, &"/"]);
    img
}

#[test]
fn requests_name_a_files_blocks_and_their_owner() {
    let dir = tempfile::tempdir().unwrap();
    let img = image_with_a_file(dir.path());
    let before = std::fs::read(&img).unwrap();
    let map = ok(&[&"debug", &img, &"map", &"/f"]);
    // "0..=4   FIRST..=LAST   5": the file's one run of five blocks.
    let run = map
        .lines()
        .find(|l| l.trim_start().starts_with("0..=4"))
        .unwrap_or_else(|| panic!("{map}"));
    let first: u64 = run
        .split_whitespace()
        .nth(1)
        .unwrap()
        .split("..")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let owner = ok(&[&"debug", &img, &"owner", &first.to_string()]);
    assert!(owner.contains("data block 0 (logical) of inode"), "{owner}");
    let inode = ok(&[&"debug", &img, &"inode", &"/f"]);
    assert!(
        inode.contains("regular") && inode.contains("20480"),
        "{inode}"
    );
    let sb = ok(&[&"debug", &img, &"superblock"]);
    assert!(sb.contains("total_blocks") && sb.contains("4096"), "{sb}");
    let root = ok(&[&"debug", &img, &"tree", &"/"]);
    assert!(root.contains("\"f\""), "{root}");
    let journal = ok(&[&"debug", &img, &"journal"]);
    assert!(journal.contains("header"), "{journal}");
    let hex = ok(&[&"debug", &img, &"block", &first.to_string(), &"--disk"]);
    assert!(hex.contains("0303 0303"), "{hex}");
    assert!(
        std::fs::read(&img).unwrap() == before,
        "debug changed the image"
    );
}

#[test]
fn a_session_reads_requests_from_stdin_and_bad_ones_fail() {
    let dir = tempfile::tempdir().unwrap();
    let img = image_with_a_file(dir.path());
    let mut child = Command::new(ULFS)
        .arg("debug")
        .arg(&img)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"help\n\ninode /f\nnonsense 1\nowner\nblock 99999999\nquit\nsuperblock\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("owner N") && stdout.contains("regular"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("total_blocks"),
        "stopped at quit: {stdout}"
    );
    assert!(stderr.contains("unknown request \"nonsense\""), "{stderr}");
    assert!(stderr.contains("owner needs a block number"), "{stderr}");
    assert_eq!(stderr.matches("ulfs debug:").count(), 3, "{stderr}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed request fails the session"
    );
    // From the command line: errors with the CLI's shape.
    let out = ulfs(&[&"debug", &img, &"inode", &"/missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("ulfs: debug: "));
    let out = ulfs(&[&"debug", &img, &"superblock", &"extra"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("too many arguments"));
    let out = ulfs(&[&"debug", &dir.path().join("nothing.img"), &"superblock"]);
    assert_eq!(out.status.code(), Some(1));
}

//! The `ulfs` commands of issue 6, finding 1, on an image that a sparse copy
//! left full of holes, on a host file system with no room left: none may
//! die by a signal (they all did, with SIGBUS). Read-only commands work; a
//! writing one is refused naming the missing bytes. Needs root for the
//! small tmpfs; elsewhere it prints a SKIPPED line.

#[path = "../../ulfs/tests/common/host.rs"]
mod host;

use host::{Tmpfs, make_sparse};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use ulfs_testkit::skip::skip;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn ulfs(args: &[&str], image: &std::path::Path) -> Output {
    let out = Command::new(ULFS)
        .arg(args[0])
        .arg(image)
        .args(&args[1..])
        .output()
        .expect("run ulfs");
    assert_eq!(
        out.status.signal(),
        None,
        "ulfs {args:?} died by a signal: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(args: &[&str], image: &std::path::Path) -> String {
    let out = ulfs(args, image);
    assert!(
        out.status.success(),
        "ulfs {args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn commands_on_a_sparse_image_on_a_full_host() {
    let t = match Tmpfs::mount(40 << 20) {
        Ok(t) => t,
        Err(why) => return skip("commands_on_a_sparse_image_on_a_full_host", &why),
    };
    let img = t.path().join("q.img");
    ok(&["mkfs", "16M"], &img);
    ok(&["mkdir", "/kept"], &img);
    assert!(make_sparse(&img) > 8 << 20);
    t.fill();
    assert!(ok(&["info"], &img).contains("total blocks:   4096"));
    assert!(ok(&["ls", "/"], &img).contains("kept"));
    ok(&["fsck"], &img);
    let out = ulfs(&["mkdir", "/d"], &img);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("more bytes are needed"), "{err}");
    // A clean image needs no writing mount to be repaired: exit 0 or a
    // refusal, but no signal.
    ulfs(&["fsck", "--repair"], &img);
    // With room again, the writing commands work and the image is whole.
    t.unfill();
    ok(&["mkdir", "/d"], &img);
    assert!(host::allocated(&img) >= 16 << 20);
    ok(&["fsck"], &img);
}

#[test]
fn commands_on_a_truncated_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    ok(&["mkfs", "16M"], &img);
    ok(&["mkdir", "/kept"], &img);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    for args in [
        &["info"][..],
        &["ls", "/"],
        &["fsck"],
        &["mkdir", "/d"],
        &["fsck", "--repair"],
    ] {
        let out = ulfs(args, &img);
        assert!(!out.status.success(), "{args:?} accepted a cut image");
    }
}

/// `mkfs --sparse` on a host with no room even for the metadata it writes:
/// ENOSPC in words, not "Read-only file system", no signal, no image left.
#[test]
fn mkfs_sparse_on_a_full_host_says_so() {
    let t = match Tmpfs::mount(8 << 20) {
        Ok(t) => t,
        Err(why) => return skip("mkfs_sparse_on_a_full_host_says_so", &why),
    };
    t.fill();
    let img = t.path().join("s.img");
    let out = ulfs(&["mkfs", "1G", "--sparse"], &img);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the host file system is full"), "{err}");
    assert!(!err.contains("Read-only"), "{err}");
    assert!(
        std::fs::metadata(&img).map_or(0, |m| m.len()) == 0,
        "a half-made image was left"
    );
    t.unfill();
    ok(&["mkfs", "1G", "--sparse"], &img);
    assert!(ok(&["info"], &img).contains("total blocks:   262144"));
}

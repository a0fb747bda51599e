//! The pjdfstest POSIX conformance suite (../shared/third_party/pjdfstest,
//! built by scripts/pjdfstest.sh) run as root inside `ulfs mount`: every
//! test file must pass (none is skipped), and the image must check clean
//! afterwards. Skipped, with the reason, without FUSE or root (the suite
//! changes owners and runs as other users).

use std::path::{Path, PathBuf};
use std::process::Command;
use ulfs_testkit::fuse_mount::{FuseMount, unavailable};
use ulfs_testkit::skip::skip;

#[test]
fn pjdfstest_passes_inside_the_mount() {
    const TEST: &str = "pjdfstest_passes_inside_the_mount";
    if let Some(why) = unavailable() {
        return skip(TEST, &why);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(TEST, "pjdfstest must run as root");
    }
    let ulfs = PathBuf::from(env!("CARGO_BIN_EXE_ulfs"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let (image, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
    std::fs::create_dir(&mnt).unwrap();
    let made = Command::new(&ulfs)
        .args(["mkfs".as_ref(), image.as_os_str(), "128M".as_ref()])
        .output()
        .unwrap();
    assert!(made.status.success());
    // The suite runs as root and as uids 65534 and 65533: other users
    // need allow_other (permissions are the kernel's, from the image).
    let m = FuseMount::start(&ulfs, &image, &mnt, &["allow_other"]).unwrap();
    let run = Command::new(root.join("scripts/pjdfstest.sh"))
        .arg(&mnt)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| !l.ends_with(" ok") && l.contains(".t ..."))
        .collect();
    assert!(
        run.status.success(),
        "pjdfstest failed ({}):\n{}\n{}",
        run.status,
        failed.join("\n"),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("Result: PASS"), "{out}");
    assert!(m.unmount().success());
    let fsck = Command::new(&ulfs)
        .arg("fsck")
        .arg(&image)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck after pjdfstest: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

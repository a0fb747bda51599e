//! The pjdfstest POSIX conformance suite (../shared/third_party/pjdfstest,
//! built by scripts/pjdfstest.sh) run as root under `ulfs run --server`:
//! the suite's shell scripts, `prove` and the `pjdfstest` binary are all
//! served programs, and the binary changes its ids for the permission
//! tests (uids 65534 and 65533), which the server then judges them by.
//! Every file must pass except those in pjdfstest-served-skips.txt, each
//! skipped for a stated reason; the image must check clean afterwards.

use std::path::Path;
use std::process::Command;
use ulfs_testkit::kernel_diff::{Server, new_image};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

#[test]
fn pjdfstest_passes_through_the_server() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return ulfs_testkit::skip::skip(
            "pjdfstest_passes_through_the_server",
            "pjdfstest must run as root",
        );
    }
    let ulfs = Path::new(ULFS);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Built (and its tools installed) by the host, not through the server.
    let built = Command::new(root.join("scripts/pjdfstest.sh"))
        .arg("--build-only")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let img = new_image(ulfs, dir.path(), "img");
    let socket = dir.path().join("sock");
    // Other users connect too (the suite's setuid'd binary).
    let server = Server::start(ulfs, &img, &socket, &["--socket-mode", "666"]);
    let served = |args: &[&str]| {
        let mut c = Command::new(ulfs);
        c.arg("run")
            .arg("--server")
            .arg(&socket)
            .arg("--")
            .args(args);
        c
    };
    assert!(served(&["mkdir", "/ulfs/t"]).status().unwrap().success());
    let skips = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pjdfstest-served-skips.txt");
    let run = served(&[
        root.join("scripts/pjdfstest.sh").to_str().unwrap(),
        "/ulfs/t",
    ])
    .env("PJDFSTEST_SKIP", &skips)
    .output()
    .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| !l.ends_with(" ok") && l.contains(".t ..") && !l.starts_with("skipped"))
        .collect();
    server.stop();
    assert!(
        run.status.success() && out.contains("Result: PASS"),
        "pjdfstest through the server failed ({}):\n{}\n{}",
        run.status,
        failed.join("\n"),
        String::from_utf8_lossy(&run.stderr)
    );
    ulfs_testkit::cli::ok(ulfs, &["fsck", img.to_str().unwrap()]);
}

//! What a program under `ulfs run` reaches through the kernel descriptor
//! that stands for an image file (its placeholder, crates/ulfs-preload
//! fds.rs): path calls on `/proc/self/fd/N` that the library does not
//! route go to the kernel, which follows the link to whatever the
//! placeholder names. That must never be a file anyone else uses: it was
//! the host's `/dev/null`, whose mode, owner and times such a program
//! running as root changed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn attributes(p: &Path) -> (u32, u32, u32, i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.atime())
}

#[test]
fn path_calls_through_an_image_descriptor_leave_dev_null_alone() {
    let lib = Path::new(ULFS).with_file_name("libulfs_preload.so");
    assert!(
        lib.is_file(),
        "build the workspace first: {}",
        lib.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs_testkit::cli::ok(Path::new(ULFS), &["mkfs", img.to_str().unwrap(), "16M"]);
    let null = Path::new("/dev/null");
    let before = attributes(null);
    // Every descriptor kind a program holds: O_PATH, read-only, and one
    // dup'ed onto stdin (/dev/stdin).
    let script = r#"
import os
open('/ulfs/x', 'w').write('data')
for flags in (os.O_PATH, os.O_RDONLY):
    fd = os.open('/ulfs/x', flags)
    p = '/proc/self/fd/%d' % fd
    for call in (lambda: os.chmod(p, 0o600), lambda: os.utime(p, (1, 1)),
                 lambda: os.chown(p, 4242, 4242)):
        try:
            call()
        except OSError:
            pass
    os.close(fd)
fd = os.open('/ulfs/x', os.O_RDONLY)
os.dup2(fd, 0)
for call in (lambda: os.chmod('/dev/stdin', 0o600), lambda: os.chown('/dev/stdin', 4242, 4242)):
    try:
        call()
    except OSError:
        pass
print('done')
"#;
    let out = Command::new(ULFS)
        .args(["run", img.to_str().unwrap(), "--", "python3", "-c", script])
        .output()
        .unwrap();
    let after = attributes(null);
    if after != before {
        // Put it back before failing: the machine needs its /dev/null.
        let _ = Command::new("chmod").args(["666", "/dev/null"]).status();
        let _ = Command::new("chown").args(["0:0", "/dev/null"]).status();
        let _ = Command::new("touch").arg("/dev/null").status();
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(after, before, "the host's /dev/null was changed");
}

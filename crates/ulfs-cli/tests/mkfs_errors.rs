//! `ulfs mkfs` on paths and sizes that cannot make an image (issue 6,
//! finding 10): each is refused with a message that says why, and leaves
//! nothing behind.

use std::process::{Command, Output};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn mkfs(image: &std::path::Path, size: &str) -> Output {
    Command::new(ULFS)
        .arg("mkfs")
        .arg(image)
        .arg(size)
        .output()
        .expect("run ulfs")
}

fn refused(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{:?}: {err}", out.status);
    err
}

#[test]
fn a_character_device_is_named_as_such() {
    let err = refused(&mkfs("/dev/null".as_ref(), "16M"));
    assert!(
        err.contains("/dev/null: is a character device")
            && err.contains("regular file or a block device"),
        "{err}"
    );
}

#[test]
fn a_fifo_or_a_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = refused(&mkfs(&fifo, "16M"));
    assert!(err.contains("is a FIFO"), "{err}");
    let err = refused(&mkfs(dir.path(), "16M"));
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn a_size_past_the_format_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("x");
    for size in ["16P", "17592186044417", "17T"] {
        let err = refused(&mkfs(&img, size));
        assert!(
            err.contains("larger than the largest image") && err.contains("16 TiB"),
            "{size}: {err}"
        );
        assert!(!img.exists(), "{size}: left a file behind");
    }
}

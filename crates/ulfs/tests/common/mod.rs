//! Helpers shared by the integration tests: a fresh image in a temporary
//! directory that lives as long as the returned guard, and the stat fields
//! a comparison with the host's file systems looks at.

use std::path::PathBuf;
use ulfs::{MkfsOptions, Mode, mkfs};

/// A new image of `size` bytes in `mode`, at `<tempdir>/t.img`.
pub fn image_in(size: u64, mode: Mode) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(
        &img,
        &MkfsOptions {
            size,
            mode,
            ..Default::default()
        },
    )
    .unwrap();
    (dir, img)
}

/// The stat fields ulfs and a host file system define the same way, for
/// tests that compare the two call for call (directory sizes and link
/// counts are each file system's own business).
#[allow(dead_code)]
#[derive(Debug, PartialEq)]
pub struct StatView {
    pub mode: u32,
    pub nlink: Option<u64>,
    pub size: Option<u64>,
    pub uid: u32,
    pub gid: u32,
}

#[allow(dead_code)]
impl StatView {
    pub fn new(mode: u32, nlink: u64, size: u64, uid: u32, gid: u32) -> StatView {
        let dir = mode & libc::S_IFMT == libc::S_IFDIR;
        StatView {
            mode,
            nlink: (!dir).then_some(nlink),
            size: (!dir).then_some(size),
            uid,
            gid,
        }
    }
}

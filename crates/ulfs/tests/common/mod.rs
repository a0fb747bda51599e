//! Helpers shared by the integration tests: a fresh image in a temporary
//! directory that lives as long as the returned guard.

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

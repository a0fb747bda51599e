//! `ulfs mkfs --sparse`: an image that takes host space only for what mkfs
//! writes, so that one larger than the host's free space can be made,
//! checked and read; a read-write mount reserves the rest first.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn ulfs(args: &[&str], image: &Path) -> Output {
    let (verb, rest) = args.split_first().expect("a verb");
    Command::new(ULFS)
        .arg(verb)
        .arg(image)
        .args(rest)
        .output()
        .expect("run ulfs")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn allocated(image: &Path) -> u64 {
    std::fs::metadata(image).unwrap().blocks() * 512
}

#[test]
fn a_terabyte_image_takes_megabytes_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    ok(&ulfs(&["mkfs", "1T", "--sparse"], &img));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 1 << 40);
    // The group maps (one block per 128 MiB) and a few blocks more.
    let used = allocated(&img);
    assert!(used < 64 << 20, "{used} bytes allocated");
    let info = ok(&ulfs(&["info"], &img));
    assert!(
        info.contains("1.0 TiB") && info.contains("journal:"),
        "{info}"
    );
    ok(&ulfs(&["fsck"], &img));
    ok(&ulfs(&["ls", "/"], &img));
}

#[test]
fn a_read_write_mount_reserves_the_whole_image_first() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("s.img");
    ok(&ulfs(&["mkfs", "64M", "--sparse"], &img));
    assert!(allocated(&img) < 4 << 20, "{}", allocated(&img));
    ok(&ulfs(&["mkdir", "/d"], &img));
    assert!(allocated(&img) >= 64 << 20, "holes filled before writing");
    assert!(ok(&ulfs(&["ls", "/"], &img)).contains('d'));
    ok(&ulfs(&["fsck"], &img));
}

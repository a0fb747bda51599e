//! An image on a block device: a loop device over a file. Runs where
//! `losetup` works (root, loop driver present); elsewhere it prints a
//! `SKIPPED:` line (and fails under `ULFS_REQUIRE_ALL_TESTS=1`).

use std::process::Command;

use ulfs::{Fs, FsckOptions, MkfsOptions, MountOptions, fsck, mkfs};
use ulfs_testkit::skip;

struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// A loop device over `file`, or why there is none.
fn attach(file: &std::path::Path) -> Result<Loop, String> {
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(file)
        .output()
        .map_err(|e| format!("needs losetup ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "needs a loop device (losetup -f: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let name = String::from_utf8(out.stdout).map_err(|e| format!("losetup output: {e}"))?;
    Ok(Loop(name.trim().to_string()))
}

#[test]
fn image_on_a_loop_device() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(48 << 20)
        .unwrap();
    let dev = match attach(&backing) {
        Ok(dev) => dev,
        Err(reason) => return skip::skip("image_on_a_loop_device", &reason),
    };
    let with = |size: u64, force: bool| MkfsOptions {
        size,
        force,
        ..Default::default()
    };
    // Larger than the device: refused, nothing written.
    let e = mkfs(&dev.0, &with(64 << 20, false)).unwrap_err();
    assert_eq!(e.errno, ulfs::Errno::EINVAL, "{e}");
    assert!(e.message.contains("the device holds"), "{e}");
    // A prefix of the device.
    mkfs(&dev.0, &with(8 << 20, false)).unwrap();
    let fs = Fs::mount(&dev.0, MountOptions::default()).unwrap();
    assert_eq!(fs.info().total_blocks, (8 << 20) / 4096);
    // In use: refused even with --force.
    let e = mkfs(&dev.0, &with(0, true)).unwrap_err();
    assert_eq!(e.errno, ulfs::Errno::EBUSY, "{e}");
    fs.unmount().unwrap();
    // Holds an image now: refused without --force.
    let e = mkfs(&dev.0, &with(0, false)).unwrap_err();
    assert_eq!(e.errno, ulfs::Errno::EEXIST, "{e}");
    // 0 is the whole device.
    mkfs(&dev.0, &with(0, true)).unwrap();
    let mut fs = Fs::mount(&dev.0, MountOptions::default()).unwrap();
    assert_eq!(fs.info().total_blocks, (48 << 20) / 4096);
    fs.mkdir("/on-device", 0o755).unwrap();
    let fd = fs
        .open("/on-device/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.write(fd, &data).unwrap(), data.len());
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    let mut fs = Fs::mount(
        &dev.0,
        MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let fd = fs.open("/on-device/f", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(fs.read(fd, &mut back).unwrap(), data.len());
    assert!(back == data);
    drop(fs);
    assert!(
        fsck(&dev.0, &mut FsckOptions::default())
            .unwrap()
            .is_clean()
    );
}

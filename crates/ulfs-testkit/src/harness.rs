//! The fuzz harnesses. Each takes arbitrary bytes and panics when ulfs
//! breaks a promise, so that the fuzzer (and the replay test) see it:
//!
//! - [`mount_and_use`]: a sample image damaged as the input says is
//!   checked, mounted and used (walk, then a script of changes, unmount,
//!   check again). Nothing may panic or hang, and when `fsck` calls the
//!   damaged image clean every path must read and it must mount
//!   read-write (fsck is honest).
//! - [`repair_never_worse`]: the damaged image is repaired twice; what was
//!   readable before is readable after with the same content, the repair
//!   changes something exactly when fsck found something, and a repair
//!   that succeeded leaves nothing for a second one.
//! - [`ops_against_host`]: a call sequence decoded from the input runs on a
//!   fresh ulfs image and in a host directory; results and errnos must
//!   agree call by call, the trees must agree at the end and again after a
//!   remount, and the image must check clean.

use crate::damage;
use crate::sample::sample_image;
use crate::snapshot::{Budget, Shown, Snapshot, losses, snapshot};
use std::sync::{Arc, Mutex};
use ulfs::store::{BlockStore, SimDisk};
use ulfs::{Fs, FsckOptions, Mode, MountOptions};

/// A small walk: fuzz inputs must run in milliseconds.
const SMALL: Budget = Budget {
    entries: 600,
    file_bytes: 256 << 10,
    depth: 16,
};

fn mode_of(byte: u8) -> Mode {
    if byte & 1 == 0 {
        Mode::Journal
    } else {
        Mode::None
    }
}

/// The sample image in the input's mode with the input's damage.
fn damaged(data: &[u8]) -> Vec<u8> {
    let mode = mode_of(data.first().copied().unwrap_or(0));
    let sample = sample_image(mode);
    let mut image = sample.to_vec();
    let targets = damage::used_blocks(sample);
    damage::apply(
        &mut image,
        &targets,
        &damage::decode(data.get(1..).unwrap_or(&[])),
    );
    image
}

/// A simulated disk over `image` that keeps the image as of its last flush
/// in `last` (unmount's is the final image).
fn disk_recording(image: Vec<u8>, last: &Arc<Mutex<Vec<u8>>>) -> Box<dyn BlockStore> {
    let mut disk = SimDisk::from_image(image);
    let sink = last.clone();
    disk.on_flush(move |d| *sink.lock().expect("image lock") = d.current().to_vec());
    Box::new(disk)
}

fn read_only() -> MountOptions {
    MountOptions {
        read_only: true,
        ..Default::default()
    }
}

fn check(image: Vec<u8>) -> Option<ulfs::FsckReport> {
    ulfs::fsck_store(
        Box::new(SimDisk::from_image(image).read_only()),
        &mut FsckOptions::default(),
    )
    .ok()
}

/// See the module comment.
pub fn mount_and_use(data: &[u8]) {
    let image = damaged(data);
    let clean = check(image.clone()).is_some_and(|r| r.is_clean());
    let disk = SimDisk::from_image(image.clone()).read_only();
    if let Ok(mut fs) = Fs::mount_store(Box::new(disk), read_only()) {
        let seen = snapshot(&mut fs, SMALL);
        if clean {
            for (path, shown) in &seen {
                assert!(
                    shown.is_readable(),
                    "fsck calls the image clean but {} reads as {shown:?}",
                    String::from_utf8_lossy(path)
                );
            }
        }
    } else {
        assert!(!clean, "fsck calls the image clean but it does not mount");
    }
    let last = Arc::new(Mutex::new(Vec::new()));
    let mut fs = match Fs::mount_store(disk_recording(image, &last), MountOptions::default()) {
        Ok(fs) => fs,
        Err(e) => {
            assert!(
                !clean,
                "fsck calls the image clean but a read-write mount fails: {e}"
            );
            return;
        }
    };
    snapshot(&mut fs, SMALL);
    change_things(&mut fs);
    let _ = fs.unmount();
    let after = std::mem::take(&mut *last.lock().expect("image lock"));
    if !after.is_empty() {
        check(after);
    }
}

/// A script of changes touching every structure of the sample; failures
/// are expected on a damaged image and ignored: only a panic or a hang is
/// a finding here.
fn change_things(fs: &mut Fs) {
    let _ = fs.mkdir("/fz", 0o755);
    if let Ok(fd) = fs.open("/fz/new", libc::O_CREAT | libc::O_RDWR, 0o644) {
        let _ = fs.pwrite(fd, &[0x5a; 20_000], 0);
        let _ = fs.pwrite(fd, b"tail", 70_000);
        let _ = fs.fallocate(fd, 0, 0, 100_000);
        let _ = fs.fsync(fd);
        let _ = fs.close(fd);
    }
    let _ = fs.rename("/docs/small.txt", "/fz/moved");
    let _ = fs.unlink("/hard-link");
    let _ = fs.truncate("/docs/medium.bin", 1000);
    let _ = fs.truncate("/docs/deep/indirect.bin", 300_000);
    let _ = fs.symlink("../docs", "/fz/up");
    let _ = fs.link("/empty", "/fz/empty-again");
    let _ = fs.rename("/big", "/fz/big");
    let _ = fs.unlink("/fz/big/entry-0003-with-a-longer-name");
    let _ = fs.rmdir("/docs/deep");
    let _ = fs.unlink("/sparse");
    let _ = fs.mkdir("/fz/big/sub", 0o700);
    let _ = fs.sync();
}

/// See the module comment.
pub fn repair_never_worse(data: &[u8]) {
    let dir = scratch_dir();
    let path = dir.path().join("img");
    std::fs::write(&path, damaged(data)).expect("write the image");
    let before = read_tree(&path);
    let first = ulfs::fsck_repair(&path, &mut FsckOptions::default());
    let after = read_tree(&path);
    let lost = losses(&before, &after);
    assert!(
        lost.is_empty(),
        "repair ({}) lost what was readable: {}",
        match &first {
            Ok(r) => format!("exit {}", r.exit_code()),
            Err(e) => e.to_string(),
        },
        describe(&lost)
    );
    // One judgement for both (requirement: what fsck accepts the repair
    // leaves alone, and what the repair changes fsck reported).
    if let Ok(r) = &first {
        assert!(
            !r.found.is_empty() || r.fixed.is_empty(),
            "fsck found nothing but the repair fixed {:?}",
            r.fixed
        );
        assert!(
            r.found.is_empty() || !r.fixed.is_empty() || !r.remaining.is_empty(),
            "fsck found {:?} but the repair fixed nothing and the image then checks clean",
            r.found
        );
    }
    if let Ok(r) = first
        && r.remaining.is_empty()
    {
        let second =
            ulfs::fsck_repair(&path, &mut FsckOptions::default()).expect("a repaired image checks");
        assert_eq!(
            second.exit_code(),
            0,
            "a second repair found {:?} and fixed {:?}",
            second.found,
            second.fixed
        );
    }
}

fn describe(lost: &[crate::snapshot::Loss]) -> String {
    lost.iter()
        .take(5)
        .map(|(p, was, now)| {
            format!(
                "{} was {} now {:?}",
                String::from_utf8_lossy(p),
                short(was),
                now.map(short)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn short(s: &Shown) -> String {
    match s {
        Shown::File { size, bytes } => format!("file of {size} ({} read)", bytes.len()),
        other => format!("{other:?}"),
    }
}

/// What a read-only mount of the image shows (nothing if it cannot mount).
fn read_tree(path: &std::path::Path) -> Snapshot {
    match Fs::mount(path, read_only()) {
        Ok(mut fs) => snapshot(&mut fs, SMALL),
        Err(_) => Snapshot::new(),
    }
}

/// A directory for scratch images: memory-backed where the host has it.
fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("a temporary directory")
}

pub use crate::host_model::ops_against_host;

//! The memory budget (`MountOptions::memory_budget`): with one, a stream of
//! file data larger than the budget leaves little of the image in the
//! host's page cache, and nothing written is lost on the way (released
//! pages are written back first); without one, the page cache keeps it
//! all. Residency is read with mincore(2) (ulfs_testkit::page_cache).
//!
//! The image is under Cargo's target directory, on the disk: pages of a
//! file on tmpfs cannot be dropped at all.

use std::path::{Path, PathBuf};
use ulfs::{Fs, MemoryBudget, MkfsOptions, Mode, MountOptions};
use ulfs_testkit::page_cache::{evict, resident_pages};

const MIB: usize = 1 << 20;
const FILE: usize = 24 * MIB;
const BUDGET: u64 = 512 << 10;

fn image(mode: Mode) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let img = dir.path().join("t.img");
    let opts = MkfsOptions {
        size: 64 << 20,
        mode,
        ..Default::default()
    };
    ulfs::mkfs(&img, &opts).unwrap();
    (dir, img)
}

fn byte_at(i: usize) -> u8 {
    (i / 4096 * 7 + i % 251) as u8
}

/// Writes a FILE-byte file in 64 KiB calls, reads it back and checks it;
/// returns the image's resident pages after each half.
fn stream(img: &Path, budget: MemoryBudget) -> (usize, usize) {
    evict(img);
    let opts = MountOptions {
        memory_budget: budget,
        ..Default::default()
    };
    let mut fs = Fs::mount(img, opts).unwrap();
    let fd = fs
        .open("/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let mut chunk = vec![0u8; 64 << 10];
    for start in (0..FILE).step_by(chunk.len()) {
        for (k, b) in chunk.iter_mut().enumerate() {
            *b = byte_at(start + k);
        }
        assert_eq!(fs.write(fd, &chunk).unwrap(), chunk.len());
    }
    let after_write = resident_pages(img);
    for start in (0..FILE).step_by(chunk.len()) {
        assert_eq!(fs.pread(fd, &mut chunk, start as u64).unwrap(), chunk.len());
        let bad = chunk
            .iter()
            .enumerate()
            .position(|(k, b)| *b != byte_at(start + k));
        assert_eq!(bad, None, "byte {} of the file read back wrong", start);
    }
    let after_read = resident_pages(img);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    (after_write, after_read)
}

/// Every byte of /big as written, read through a new mount.
fn check_after_remount(img: &Path) {
    evict(img);
    let mut fs = Fs::mount(img, MountOptions::default()).unwrap();
    let fd = fs.open("/big", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; MIB];
    for start in (0..FILE).step_by(MIB) {
        assert_eq!(fs.pread(fd, &mut buf, start as u64).unwrap(), MIB);
        assert!(
            buf.iter()
                .enumerate()
                .all(|(k, b)| *b == byte_at(start + k))
        );
    }
    fs.unmount().unwrap();
}

#[test]
fn a_stream_larger_than_the_budget_stays_within_it_and_loses_nothing() {
    for mode in [Mode::Journal, Mode::None] {
        let (_dir, img) = image(mode);
        let (written, read) = stream(&img, MemoryBudget::Bytes(BUDGET));
        // The budget's pages of file data, plus the metadata and the
        // journal the stream touched (never released), well under 4 MiB.
        let bound = 4 * MIB / 4096;
        assert!(
            written < bound,
            "{mode:?}: {written} pages resident after writing"
        );
        assert!(
            read < bound,
            "{mode:?}: {read} pages resident after reading"
        );
        check_after_remount(&img);
    }
}

#[test]
fn without_a_budget_the_page_cache_keeps_the_stream() {
    let (_dir, img) = image(Mode::Journal);
    let (written, read) = stream(&img, MemoryBudget::Unlimited);
    // What makes the test above mean something: the same stream, no
    // budget, and the host keeps (nearly) all of it.
    let most = FILE / 4096 * 9 / 10;
    assert!(written > most, "{written} pages resident after writing");
    assert!(read > most, "{read} pages resident after reading");
    check_after_remount(&img);
}

#[test]
fn a_budget_changed_after_mount_applies_from_then_on() {
    let (_dir, img) = image(Mode::Journal);
    evict(&img);
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    fs.set_memory_budget(MemoryBudget::Bytes(BUDGET));
    let fd = fs
        .open("/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let chunk = vec![7u8; MIB];
    for _ in 0..FILE / MIB {
        fs.write(fd, &chunk).unwrap();
    }
    assert!(resident_pages(&img) < 4 * MIB / 4096);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
}

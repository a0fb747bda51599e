//! `Volume::resize`: growing within a group and across group boundaries,
//! shrinking onto a free tail, refusing a tail in use, and crash safety:
//! a power cut at any flush of a resize (each unflushed block lost,
//! written or torn) leaves an image that opens at the old or the new size,
//! checks clean, and holds every file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use ulfs::fs::Volume;
use ulfs::store::{BlockStore, Fate, SimDisk};
use ulfs::{Errno, FsckOptions, MkfsOptions, MountOptions, format_store, fsck_store};
use ulfs_testkit::rng::Rng;

const BS: u64 = 4096;

/// Files written before each resize: (name, bytes).
fn files() -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..20u8)
        .map(|i| {
            let name = format!("f{i}").into_bytes();
            let len = 1000 + i as usize * 3001;
            (
                name,
                (0..len).map(|k| (k as u8).wrapping_mul(i + 1)).collect(),
            )
        })
        .collect()
}

fn populate(vol: &mut Volume) {
    let root = vol.root();
    for (name, bytes) in files() {
        let ino = vol
            .create(root, &name, libc::S_IFREG | 0o644, 0, 0, b"")
            .unwrap();
        vol.write_at(ino, &bytes, 0).unwrap();
    }
    vol.sync().unwrap();
}

fn holds_the_files(vol: &mut Volume) {
    let root = vol.root();
    for (name, bytes) in files() {
        let ino = vol.lookup(root, &name).unwrap();
        let mut got = vec![0u8; bytes.len()];
        assert_eq!(vol.read_at(ino, &mut got, 0).unwrap(), bytes.len());
        assert!(got == bytes, "{}", String::from_utf8_lossy(&name));
    }
}

fn assert_clean(img: Vec<u8>, what: &str) {
    let store = Box::new(SimDisk::from_image(img).read_only());
    let report = fsck_store(store, &mut FsckOptions::default()).unwrap();
    assert!(report.is_clean(), "{what}: {:?}", report.problems);
}

/// A simulated disk of `disk` blocks holding an image of `image` blocks,
/// with files; its flushes snapshot crash images once `armed`.
struct Setup {
    vol: Volume,
    armed: Arc<AtomicBool>,
    crashes: Crashes,
}

/// Crash images taken at flushes, each with what it stands for.
type Crashes = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

fn setup(disk: u64, image: u64, seed: u64) -> Setup {
    let armed = Arc::new(AtomicBool::new(false));
    let crashes = Arc::new(Mutex::new(Vec::new()));
    let mut sim = SimDisk::new(disk);
    let (a, c) = (armed.clone(), crashes.clone());
    let rng = Mutex::new(Rng::new(seed));
    sim.on_flush(move |d| {
        if !a.load(Ordering::SeqCst) {
            return;
        }
        let mut c = c.lock().unwrap();
        let n = c.len();
        c.push((
            format!("flush {n}, all lost"),
            d.crash_image(|_| Fate::Lost),
        ));
        c.push((
            format!("flush {n}, all written"),
            d.crash_image(|_| Fate::Written),
        ));
        let mut rng = rng.lock().unwrap();
        c.push((
            format!("flush {n}, random"),
            d.crash_image(|_| match rng.below(3) {
                0 => Fate::Lost,
                1 => Fate::Written,
                _ => Fate::Torn(rng.below(256) as u8),
            }),
        ));
    });
    let opts = MkfsOptions {
        size: image * BS,
        journal_blocks: Some(256),
        ..Default::default()
    };
    let store: Box<dyn BlockStore> = format_store(Box::new(sim), &opts).unwrap();
    let mut vol = Volume::mount_store(store, MountOptions::default(), "sim").unwrap();
    populate(&mut vol);
    Setup {
        vol,
        armed,
        crashes,
    }
}

/// Resizes from `from` to `to` blocks on a disk of `disk`, then checks
/// the result and every crash image taken on the way.
fn resize_with_crashes(disk: u64, from: u64, to: u64) {
    let mut s = setup(disk, from, from ^ to);
    s.armed.store(true, Ordering::SeqCst);
    let r = s.vol.resize(to).unwrap();
    s.armed.store(false, Ordering::SeqCst);
    assert_eq!((r.old_blocks, r.new_blocks), (from, to));
    assert_eq!(s.vol.info().total_blocks, to);
    holds_the_files(&mut s.vol);
    let free = s.vol.info().free_blocks;
    s.vol.unmount().unwrap();
    let crashes = std::mem::take(&mut *s.crashes.lock().unwrap());
    assert!(crashes.len() >= 3, "the resize flushed");
    let mut seen = (0, 0);
    for (what, img) in crashes {
        let mut vol = Volume::mount_store(
            Box::new(SimDisk::from_image(img.clone())),
            MountOptions::default(),
            "crash",
        )
        .unwrap_or_else(|e| panic!("{from} -> {to}, {what}: {e}"));
        let total = vol.info().total_blocks;
        assert!(
            total == from || total == to,
            "{from} -> {to}, {what}: opens at {total} blocks"
        );
        if total == to {
            assert_eq!(vol.info().free_blocks, free, "{what}");
            seen.1 += 1;
        } else {
            seen.0 += 1;
        }
        holds_the_files(&mut vol);
        drop(vol);
        assert_clean(img, &format!("{from} -> {to}, {what}"));
    }
    // Crashes on both sides of the commit were tried.
    assert!(seen.0 > 0 && seen.1 > 0, "old/new sizes seen: {seen:?}");
}

#[test]
fn growing_within_a_group_survives_a_crash_anywhere() {
    resize_with_crashes(6000, 2000, 6000);
}

#[test]
fn shrinking_onto_a_free_tail_survives_a_crash_anywhere() {
    resize_with_crashes(6000, 6000, 3000);
}

#[test]
fn growing_across_group_boundaries_survives_a_crash_anywhere() {
    // The first group ends at 2 + 256 + 32,641 blocks: 32,899.
    resize_with_crashes(34_000, 32_000, 34_000);
}

/// Grown by whole groups, the new room is usable: a file filling it is
/// written and read back, and the image checks clean; shrunk back once
/// the file is gone.
#[test]
fn grown_room_is_allocated_and_shrinks_back_when_freed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    let small = 3000u64;
    let big = 70_000u64;
    let opts = MkfsOptions {
        size: small * BS,
        sparse: true,
        ..Default::default()
    };
    ulfs::mkfs(&path, &opts).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(big * BS)
        .unwrap();
    let mut vol = Volume::mount(&path, MountOptions::default()).unwrap();
    populate(&mut vol);
    let before = vol.info().free_blocks;
    let r = vol.resize(big).unwrap();
    assert_eq!((r.old_groups, r.new_groups), (1, 3));
    let info = vol.info();
    assert_eq!(info.total_blocks, big);
    // Every new block but the two new map blocks is free.
    assert_eq!(info.free_blocks, before + (big - small) - 2);
    // Fill most of the new room.
    let root = vol.root();
    let ino = vol
        .create(root, b"big", libc::S_IFREG | 0o644, 0, 0, b"")
        .unwrap();
    let chunk = vec![0xabu8; 1 << 20];
    let want = (big - small - 2000) * BS;
    let mut at = 0;
    while at < want {
        at += vol.write_at(ino, &chunk, at).unwrap() as u64;
    }
    assert_eq!(vol.stat_ino(ino).unwrap().size, at);
    // A shrink with the file in the way is refused, and says how much.
    let in_the_way = vol.in_use_past(small).unwrap().unwrap();
    assert!(in_the_way.blocks > 60_000, "{in_the_way:?}");
    assert_eq!(vol.resize(small), Err(Errno::ENOSPC));
    assert_eq!(vol.info().total_blocks, big, "nothing changed");
    vol.unlink(root, b"big").unwrap();
    vol.sync().unwrap();
    let r = vol.resize(small).unwrap();
    assert_eq!(r.new_groups, 1);
    assert_eq!(vol.info().free_blocks, before);
    holds_the_files(&mut vol);
    // Out of bounds: below the smallest image, above the store.
    assert_eq!(vol.resize(10), Err(Errno::EINVAL));
    assert_eq!(vol.resize(big + 1), Err(Errno::EINVAL));
    vol.unmount().unwrap();
    drop(vol);
    let report = ulfs::fsck(&path, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

/// Mode `none` resizes too (in place, with that mode's guarantees).
#[test]
fn an_image_without_a_journal_grows_and_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    let opts = MkfsOptions {
        size: 2000 * BS,
        mode: ulfs::Mode::None,
        ..Default::default()
    };
    ulfs::mkfs(&path, &opts).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(40_000 * BS).unwrap();
    let mut vol = Volume::mount(&path, MountOptions::default()).unwrap();
    populate(&mut vol);
    assert_eq!(vol.resize(40_000).unwrap().new_groups, 2);
    holds_the_files(&mut vol);
    vol.resize(2500).unwrap();
    holds_the_files(&mut vol);
    vol.unmount().unwrap();
    drop(vol);
    let report = ulfs::fsck(&path, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

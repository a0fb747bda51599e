//! Guarantee 3: a corrupt or hostile image gives errors, never a panic, an
//! out-of-bounds access or a hang. A populated image is damaged at random
//! (seeded, so a failure replays), then mounted, walked, read, changed and
//! checked; every call may fail, none may crash.

use ulfs::{Fs, FsckOptions, MkfsOptions, MountOptions, fsck, mkfs};

/// xorshift64*: a tiny deterministic generator, enough to pick bytes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn populated() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(
        &img,
        &MkfsOptions {
            size: 2 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..120 {
        let fd = fs
            .open(
                format!("/d/file-with-a-longer-name-{i}"),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        fs.write(fd, &vec![i as u8; (i * 331) % 20000]).unwrap();
        fs.close(fd).unwrap();
    }
    let fd = fs
        .open("/sparse", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    fs.pwrite(fd, b"x", 1 << 32).unwrap();
    fs.close(fd).unwrap();
    fs.symlink("d/file-with-a-longer-name-3", "/s").unwrap();
    fs.unmount().unwrap();
    let bytes = std::fs::read(&img).unwrap();
    (dir, img, bytes)
}

/// Everything a program might do on a mounted image; results are ignored,
/// only crashes matter.
fn exercise(fs: &mut Fs) {
    let mut stack = vec![b"/".to_vec()];
    let mut buf = vec![0u8; 8192];
    let mut visited = 0;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > 200 {
            break;
        }
        let Ok(fd) = fs.open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0) else {
            continue;
        };
        for _ in 0..50 {
            let Ok(n) = fs.getdents64(fd, &mut buf) else {
                break;
            };
            if n == 0 {
                break;
            }
            for d in ulfs::parse_dirents(&buf[..n]) {
                if d.name == b"." || d.name == b".." {
                    continue;
                }
                let mut p = dir.clone();
                if p.last() != Some(&b'/') {
                    p.push(b'/');
                }
                p.extend_from_slice(&d.name);
                let _ = fs.lstat(&p);
                let _ = fs.readlink(&p);
                if let Ok(f) = fs.open(&p, libc::O_RDWR, 0) {
                    let mut data = vec![0u8; 70000];
                    let _ = fs.read(f, &mut data);
                    let _ = fs.lseek(f, 0, libc::SEEK_DATA);
                    let _ = fs.lseek(f, 0, libc::SEEK_HOLE);
                    let _ = fs.pwrite(f, b"overwrite", 4000);
                    let _ = fs.ftruncate(f, 100);
                    let _ = fs.close(f);
                }
                stack.push(p);
            }
        }
        let _ = fs.close(fd);
    }
    let _ = fs.mkdir("/d/new", 0o755);
    let _ = fs.rename("/d", "/e");
    let _ = fs.unlink("/s");
    let _ = fs.stat("/e/file-with-a-longer-name-7");
    for i in 0..20 {
        if let Ok(fd) = fs.open(format!("/new{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644) {
            let _ = fs.write(fd, &[1u8; 9000]);
            let _ = fs.close(fd);
        }
    }
}

#[test]
fn random_damage_never_crashes() {
    let (_d, img, pristine) = populated();
    let blocks = pristine.len() / 4096;
    let seed = std::env::var("ULFS_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    let rounds = std::env::var("ULFS_HOSTILE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut rng = Rng(seed);
    // Only blocks that hold metadata are worth damaging: find them by magic.
    let meta: Vec<usize> = (0..blocks)
        .filter(|&b| {
            let m = &pristine[b * 4096..b * 4096 + 4];
            [b"ULFS", b"UMAP", b"UINO", b"UIND", b"UDLF", b"UDIN"]
                .iter()
                .any(|k| m == *k)
        })
        .collect();
    assert!(meta.len() > 5);
    let mut mounted = 0;
    for round in 0..rounds {
        let mut bytes = pristine.clone();
        for _ in 0..1 + rng.next() % 8 {
            let b = meta[(rng.next() % meta.len() as u64) as usize];
            let at = b * 4096 + (rng.next() % 4096) as usize;
            // Mix single-bit flips with wild values in integer fields.
            match rng.next() % 3 {
                0 => bytes[at] ^= 1 << (rng.next() % 8),
                1 => bytes[at] = rng.next() as u8,
                _ => {
                    let v = rng.next().to_le_bytes();
                    let end = (at + 4).min(bytes.len());
                    bytes[at..end].copy_from_slice(&v[..end - at]);
                }
            }
        }
        std::fs::write(&img, &bytes).unwrap();
        eprintln!("round {round} (seed {seed:#x})");
        let _ = fsck(&img, &mut FsckOptions::default());
        if let Ok(mut fs) = Fs::mount(&img, MountOptions::default()) {
            mounted += 1;
            exercise(&mut fs);
        }
    }
    // Superblock damage is repaired by the second copy, so most rounds mount.
    assert!(
        mounted > rounds / 3,
        "only {mounted} of {rounds} damaged images mounted"
    );
}

/// An image captured while mounted, with committed transactions still in
/// its log, then damaged in the journal region: replay must stop at what
/// does not check out, never apply garbage, never crash.
#[test]
fn damaged_journal_never_crashes_replay() {
    // On tmpfs when there is one: this test is about replay, not the disk.
    let dir = match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let img = dir.path().join("j.img");
    mkfs(
        &img,
        &MkfsOptions {
            size: 4 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    for i in 0..40 {
        let fd = fs
            .open(format!("/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        fs.write(fd, &vec![i as u8; 3000]).unwrap();
        fs.fsync(fd).unwrap();
        fs.close(fd).unwrap();
    }
    // The "crash": the image as it is now, log not checkpointed.
    let pristine = std::fs::read(&img).unwrap();
    drop(fs);
    let journal: Vec<usize> = (2..64)
        .filter(|&b| {
            [b"UJHD", b"UJDS", b"UJCM"]
                .iter()
                .any(|k| &pristine[b * 4096..b * 4096 + 4] == *k)
        })
        .collect();
    assert!(journal.len() > 3, "the log holds transactions");
    let mut rng = Rng(0x0106);
    let crashed = dir.path().join("crashed.img");
    for _ in 0..80 {
        let mut bytes = pristine.clone();
        for _ in 0..1 + rng.next() % 4 {
            let b = journal[(rng.next() % journal.len() as u64) as usize];
            let at = b * 4096 + (rng.next() % 64) as usize;
            bytes[at] ^= 1 << (rng.next() % 8);
        }
        std::fs::write(&crashed, &bytes).unwrap();
        let _ = fsck(&crashed, &mut FsckOptions::default());
        if let Ok(mut fs) = Fs::mount(&crashed, MountOptions::default()) {
            exercise(&mut fs);
        }
    }
}

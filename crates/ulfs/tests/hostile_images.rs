//! Guarantee 3: a corrupt or hostile image gives errors, never a panic, an
//! out-of-bounds access or a hang. A populated image is damaged at random
//! (seeded, so a failure replays), then mounted, walked, read, changed and
//! checked; every call may fail, none may crash. Random damage mostly
//! fails the checksum first; `crafted_damage_with_valid_checksums_*`
//! damage a structure field and recompute the block's CRC32C, so the
//! structure checks of mount, read and fsck are what meets it.

use std::sync::mpsc;
use std::time::Duration;
use ulfs::{Errno, Fs, FsckOptions, MkfsOptions, MountOptions, fsck, mkfs};
use ulfs_testkit::rng::Rng;

#[path = "common/damage.rs"]
mod damage;

/// A temporary directory on tmpfs when there is one: these tests commit
/// (and so flush the image) often, which a disk makes slow.
fn fast_tempdir() -> tempfile::TempDir {
    match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

fn populated() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = fast_tempdir();
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
        for _ in 0..1 + rng.next_u64() % 8 {
            let b = meta[(rng.next_u64() % meta.len() as u64) as usize];
            let at = b * 4096 + (rng.next_u64() % 4096) as usize;
            // Mix single-bit flips with wild values in integer fields.
            match rng.next_u64() % 3 {
                0 => bytes[at] ^= 1 << (rng.next_u64() % 8),
                1 => bytes[at] = rng.next_u64() as u8,
                _ => {
                    let v = rng.next_u64().to_le_bytes();
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
        for _ in 0..1 + rng.next_u64() % 4 {
            let b = journal[(rng.next_u64() % journal.len() as u64) as usize];
            let at = b * 4096 + (rng.next_u64() % 64) as usize;
            bytes[at] ^= 1 << (rng.next_u64() % 8);
        }
        std::fs::write(&crashed, &bytes).unwrap();
        let _ = fsck(&crashed, &mut FsckOptions::default());
        if let Ok(mut fs) = Fs::mount(&crashed, MountOptions::default()) {
            exercise(&mut fs);
        }
    }
}

/// What reading a crafted image did: errors by errno, and how far it got.
#[derive(Default, Debug)]
struct Outcome {
    mounted: bool,
    errors: std::collections::BTreeMap<String, u32>,
}

/// Lists every directory and reads every file and symlink it can reach
/// (bounded), noting each error; then the writing calls of `exercise`.
fn read_everything(fs: &mut Fs, out: &mut Outcome) {
    let mut note = |what: &str, e: Errno| {
        *out.errors.entry(format!("{what}: {e:?}")).or_default() += 1;
    };
    let mut stack = vec![b"/".to_vec()];
    let mut buf = vec![0u8; 16384];
    let mut visited = 0;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > 300 {
            break;
        }
        let fd = match fs.open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => fd,
            Err(e) => {
                note("open dir", e);
                continue;
            }
        };
        for _ in 0..100 {
            let n = match fs.getdents64(fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    note("getdents64", e);
                    break;
                }
            };
            for d in ulfs::parse_dirents(&buf[..n]) {
                if d.name == b"." || d.name == b".." {
                    continue;
                }
                let mut p = dir.clone();
                if p.last() != Some(&b'/') {
                    p.push(b'/');
                }
                p.extend_from_slice(&d.name);
                let st = match fs.lstat(&p) {
                    Ok(st) => st,
                    Err(e) => {
                        note("lstat", e);
                        continue;
                    }
                };
                if st.is_dir() {
                    stack.push(p);
                } else if st.mode & libc::S_IFMT == libc::S_IFLNK {
                    if let Err(e) = fs.readlink(&p) {
                        note("readlink", e);
                    }
                } else {
                    match fs.open(&p, libc::O_RDONLY, 0) {
                        Ok(f) => {
                            let mut data = vec![0u8; 1 << 16];
                            // Bounded: a file may claim any size.
                            for _ in 0..8 {
                                match fs.read(f, &mut data) {
                                    Ok(0) => break,
                                    Ok(_) => {}
                                    Err(e) => {
                                        note("read", e);
                                        break;
                                    }
                                }
                            }
                            if let Err(e) = fs.lseek(f, 0, libc::SEEK_DATA)
                                && e != Errno::ENXIO
                            {
                                note("SEEK_DATA", e);
                            }
                            let _ = fs.close(f);
                        }
                        Err(e) => note("open file", e),
                    }
                }
            }
        }
        let _ = fs.close(fd);
    }
}

/// Mounts, reads everything, changes things, unmounts, checks, each step
/// free to fail but not to panic; in a thread of its own so that a hang is
/// reported, not waited for.
fn run_bounded(img: std::path::PathBuf, what: String) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut out = Outcome::default();
        let _ = fsck(&img, &mut FsckOptions::default());
        if let Ok(mut fs) = Fs::mount(&img, MountOptions::default()) {
            out.mounted = true;
            read_everything(&mut fs, &mut out);
            exercise(&mut fs);
            let _ = fs.unmount();
        }
        let _ = fsck(&img, &mut FsckOptions::default());
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => t.join().unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("panic on a crafted image ({what}): {msg}")
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let msg = match t.join() {
                Err(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
                Ok(_) => String::new(),
            };
            panic!("panic on a crafted image ({what}): {msg}")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("no answer within 30 s on a crafted image ({what}): a hang")
        }
    }
}

fn crafted_rounds(pristine: &[u8], dir: &std::path::Path, seed: u64, rounds: usize) {
    let mut rng = Rng(seed);
    let img = dir.join("crafted.img");
    let mut mounted = 0;
    let mut errors: std::collections::BTreeMap<String, u32> = Default::default();
    for round in 0..rounds {
        let mut bytes = pristine.to_vec();
        let n = 1 + rng.next_u64() % 2;
        let what: Vec<String> = (0..n)
            .map(|_| damage::damage_sealed(&mut bytes, &mut || rng.next_u64()))
            .collect();
        let what = format!("round {round}, seed {seed:#x}: {}", what.join("; "));
        std::fs::write(&img, &bytes).unwrap();
        let out = run_bounded(img.clone(), what);
        mounted += out.mounted as usize;
        for (k, v) in out.errors {
            *errors.entry(k).or_default() += v;
        }
    }
    eprintln!("{rounds} crafted images, {mounted} mounted; errors met: {errors:#?}");
    assert!(
        mounted > rounds / 4,
        "only {mounted} of {rounds} crafted images mounted: the damage is not reaching the structure checks"
    );
}

fn round_count(default: usize) -> usize {
    std::env::var("ULFS_HOSTILE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Structure fields damaged with checksums recomputed (superblock fields,
/// inode fields, inode-block headers, directory leaf and inner records,
/// block pointers, indirect blocks, map blocks): mount, reading every file
/// and directory, writing and fsck give clean errors, never a panic or a
/// hang.
#[test]
fn crafted_damage_with_valid_checksums_never_crashes() {
    let (dir, _img, pristine) = populated();
    let seed = std::env::var("ULFS_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0c4a_f7ed_u64);
    crafted_rounds(&pristine, dir.path(), seed, round_count(1000));
}

/// The same on an image whose journal holds committed transactions
/// (descriptor bids, counts, sequence numbers, commit records and the
/// journal header damaged and resealed).
#[test]
fn crafted_journal_records_with_valid_checksums_never_crash() {
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
    fs.mkdir("/d", 0o755).unwrap();
    for i in 0..40 {
        let fd = fs
            .open(format!("/d/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        fs.write(fd, &vec![i as u8; 3000 + i * 700]).unwrap();
        fs.fsync(fd).unwrap();
        fs.close(fd).unwrap();
    }
    let pristine = std::fs::read(&img).unwrap();
    drop(fs);
    // Only the journal region: the log and its header.
    let mut bytes = pristine.clone();
    let journal: Vec<usize> = damage::meta_blocks(&pristine)
        .into_iter()
        .filter(|&b| {
            [b"UJHD", b"UJDS", b"UJCM"]
                .iter()
                .any(|k| &pristine[b * 4096..b * 4096 + 4] == *k)
        })
        .collect();
    assert!(journal.len() > 3, "the log holds transactions");
    // Blank the magic of every other metadata block in a scratch copy, so
    // that `damage_sealed` picks journal records only; the damage is then
    // carried over to the real image block by block.
    for b in damage::meta_blocks(&pristine) {
        if !journal.contains(&b) {
            bytes[b * 4096..b * 4096 + 4].copy_from_slice(b"____");
        }
    }
    let mut rng = Rng(0x10c4);
    let path = dir.path().join("crafted.img");
    let rounds = round_count(400);
    for round in 0..rounds {
        let mut scratch = bytes.clone();
        let what = damage::damage_sealed(&mut scratch, &mut || rng.next_u64());
        let mut img = pristine.clone();
        for &b in &journal {
            img[b * 4096..(b + 1) * 4096].copy_from_slice(&scratch[b * 4096..(b + 1) * 4096]);
        }
        std::fs::write(&path, &img).unwrap();
        run_bounded(path.clone(), format!("journal round {round}: {what}"));
    }
}

/// A directory leaf whose last record carries a key no name can hash to
/// (u64::MAX), checksum recomputed: listing the directory is EUCLEAN, not
/// an overflow in the readdir cookie (found by the crafted-damage test).
#[test]
fn leaf_key_beyond_the_hash_range_is_euclean() {
    use ulfs::format::{get_u16, put_u64, seal_block};
    let (_dir, img, mut bytes) = populated();
    // The last such block: the first ones may be copies in the journal.
    let leaf = damage::meta_blocks(&bytes)
        .into_iter()
        .rfind(|&b| {
            &bytes[b * 4096..b * 4096 + 4] == b"UDLF" && get_u16(&bytes[b * 4096..], 16) > 3
        })
        .expect("a directory leaf with records");
    let blk: &mut [u8; 4096] = (&mut bytes[leaf * 4096..(leaf + 1) * 4096])
        .try_into()
        .unwrap();
    let count = get_u16(blk, 16) as usize;
    let last = get_u16(blk, 32 + 2 * (count - 1)) as usize;
    put_u64(blk, last, u64::MAX);
    seal_block(blk);
    std::fs::write(&img, &bytes).unwrap();
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    let fd = fs
        .open("/d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut res = Ok(1);
    while matches!(res, Ok(n) if n > 0) {
        res = fs.getdents64(fd, &mut buf);
    }
    assert_eq!(res, Err(Errno::EUCLEAN));
}

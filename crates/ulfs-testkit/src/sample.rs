//! Small sample images, made once per process in memory.
//!
//! A sample is the same bytes in every run (fixed uuid, hash key and
//! time): a fuzz input or a damage test names blocks and offsets of it, and
//! must mean the same damage in every process. With the random hash key
//! of a default mkfs, names landed in other leaves in each run, so a
//! failing input failed only sometimes.

use std::sync::{Arc, Mutex, OnceLock};
use ulfs::store::SimDisk;
use ulfs::{Fs, MkfsOptions, Mode, MountOptions, Timespec, format_store};

/// Size of a sample image: small enough to copy for every fuzz input.
pub const SAMPLE_BYTES: u64 = 2 << 20;

/// The bytes of a cleanly unmounted sample image in `mode`.
pub fn sample_image(mode: Mode) -> &'static [u8] {
    static JOURNAL: OnceLock<Vec<u8>> = OnceLock::new();
    static NONE: OnceLock<Vec<u8>> = OnceLock::new();
    let cell = match mode {
        Mode::Journal => &JOURNAL,
        Mode::None => &NONE,
    };
    cell.get_or_init(|| make_sample(mode))
}

/// The bytes of an empty image in `mode` (the size of a sample).
pub fn empty_image(mode: Mode) -> &'static [u8] {
    static JOURNAL: OnceLock<Vec<u8>> = OnceLock::new();
    static NONE: OnceLock<Vec<u8>> = OnceLock::new();
    let cell = match mode {
        Mode::Journal => &JOURNAL,
        Mode::None => &NONE,
    };
    cell.get_or_init(|| build(mode, |_| Ok(())))
}

fn make_sample(mode: Mode) -> Vec<u8> {
    build(mode, populate)
}

/// The time every sample is stamped with (2026-01-01).
const SAMPLE_TIME: Timespec = Timespec {
    sec: 1_767_225_600,
    nsec: 0,
};

/// A fresh image with `fill` run on it, cleanly unmounted.
fn build(mode: Mode, fill: fn(&mut Fs) -> ulfs::Result<()>) -> Vec<u8> {
    let opts = MkfsOptions {
        size: SAMPLE_BYTES,
        mode,
        journal_blocks: (mode == Mode::Journal).then_some(96),
        uuid: Some(*b"ulfs-sample-uuid"),
        hash_key: Some(*b"sample-hash-key!"),
        fixed_time: Some(SAMPLE_TIME),
        ..Default::default()
    };
    // The image as of the last flush: unmount's, which marks it clean.
    let last_flush = Arc::new(Mutex::new(Vec::new()));
    let mut disk = SimDisk::new(SAMPLE_BYTES / 4096);
    let sink = last_flush.clone();
    disk.on_flush(move |d| *sink.lock().expect("sample lock") = d.current().to_vec());
    let store = format_store(Box::new(disk), &opts).expect("format the sample");
    let fixed = MountOptions {
        fixed_time: Some(SAMPLE_TIME),
        ..Default::default()
    };
    let mut fs = Fs::mount_store(store, fixed).expect("mount the sample");
    fill(&mut fs).expect("populate the sample");
    fs.unmount().expect("unmount the sample");
    std::mem::take(&mut *last_flush.lock().expect("sample lock"))
}

/// Every kind of structure, small.
fn populate(fs: &mut Fs) -> ulfs::Result<()> {
    fs.mkdir("/docs", 0o755)?;
    fs.mkdir("/docs/deep", 0o700)?;
    fs.mkdir("/big", 0o755)?;
    // Enough entries for an inner node above several leaves.
    for i in 0..240 {
        write(
            fs,
            &format!("/big/entry-{i:04}-with-a-longer-name"),
            &[i as u8; 7],
        )?;
    }
    write(fs, "/empty", b"")?;
    write(fs, "/docs/small.txt", b"hello, ulfs\n")?;
    let pattern: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    // Past 12 direct blocks: a single indirect block.
    write(fs, "/docs/deep/indirect.bin", &pattern[..60_000])?;
    write(fs, "/docs/medium.bin", &pattern)?;
    let fd = fs.open("/sparse", libc::O_CREAT | libc::O_WRONLY, 0o644)?;
    fs.pwrite(fd, b"far", 5 << 20)?;
    fs.close(fd)?;
    fs.symlink("docs/small.txt", "/short-link")?;
    fs.symlink(format!("/docs/{}", "x".repeat(200)), "/long-link")?;
    fs.link("/docs/small.txt", "/hard-link")?;
    Ok(())
}

fn write(fs: &mut Fs, path: &str, data: &[u8]) -> ulfs::Result<()> {
    let fd = fs.open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    let mut done = 0;
    while done < data.len() {
        done += fs.write(fd, &data[done..])?;
    }
    fs.close(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_the_same_bytes_every_time_it_is_made() {
        for mode in [Mode::Journal, Mode::None] {
            let (a, b) = (make_sample(mode), make_sample(mode));
            assert_eq!(a.len(), b.len());
            let differ = a
                .chunks(4096)
                .zip(b.chunks(4096))
                .filter(|(x, y)| x != y)
                .count();
            assert_eq!(
                differ, 0,
                "{mode:?}: {differ} blocks differ between two builds"
            );
        }
    }
}

//! Small sample images, made once per process in memory.

use std::sync::{Arc, Mutex, OnceLock};
use ulfs::store::SimDisk;
use ulfs::{Fs, MkfsOptions, Mode, MountOptions, format_store};

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

/// A fresh image with `fill` run on it, cleanly unmounted.
fn build(mode: Mode, fill: fn(&mut Fs) -> ulfs::Result<()>) -> Vec<u8> {
    let opts = MkfsOptions {
        size: SAMPLE_BYTES,
        mode,
        journal_blocks: (mode == Mode::Journal).then_some(96),
        ..Default::default()
    };
    // The image as of the last flush: unmount's, which marks it clean.
    let last_flush = Arc::new(Mutex::new(Vec::new()));
    let mut disk = SimDisk::new(SAMPLE_BYTES / 4096);
    let sink = last_flush.clone();
    disk.on_flush(move |d| *sink.lock().expect("sample lock") = d.current().to_vec());
    let store = format_store(Box::new(disk), &opts).expect("format the sample");
    let mut fs = Fs::mount_store(store, MountOptions::default()).expect("mount the sample");
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

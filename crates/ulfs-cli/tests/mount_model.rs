//! `ulfs mount` against the host's tmpfs as the model: the same random
//! operations (write, truncate, read, mmap read, rename, unlink, mkdir,
//! rmdir, fsync) made through the mount and in a tmpfs directory must give
//! the same results, and the trees must be equal at the end and after a
//! remount. Also: four processes at once, and an unmount while files are
//! still open. Each test leaves the image fsck-clean.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use ulfs_testkit::fuse_mount::{FuseMount, Scratch};
use ulfs_testkit::rng::Rng;

fn ulfs() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ulfs"))
}

fn setup(test: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    Scratch::new(test, &ulfs(), "128M").map(|s| (s.dir, s.image, s.mnt))
}

fn assert_clean(image: &Path) {
    ulfs_testkit::fuse_mount::assert_clean(&ulfs(), image)
}

const NAMES: [&str; 10] = [
    "a", "b", "c", "d1", "d2", "d1/x", "d1/y", "d2/x", "d1/e", "d1/e/z",
];

/// One operation's outcome: a value shown as text, or an errno.
type Outcome = Result<String, i32>;

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// The bytes of `len` at `off` of the file at `p`, read through a shared
/// read-only mapping of the whole file.
fn mmap_read(p: &Path, off: u64, len: usize) -> Outcome {
    let f = File::open(p).map_err(errno)?;
    let meta = f.metadata().map_err(errno)?;
    if !meta.is_file() {
        // What a directory maps as differs (tmpfs: ENODEV); not the point.
        return Err(libc::EISDIR);
    }
    let size = meta.len() as usize;
    if size == 0 {
        return Ok(String::new());
    }
    // SAFETY: a fresh read-only shared mapping of an open file, unmapped
    // below; the slice is read within the file's size only.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        if m == libc::MAP_FAILED {
            return Err(errno(std::io::Error::last_os_error()));
        }
        let all = std::slice::from_raw_parts(m as *const u8, size);
        let start = (off as usize).min(size);
        let end = (start + len).min(size);
        let sum = crc(&all[start..end]);
        libc::munmap(m, size);
        Ok(format!("{} bytes crc {sum:08x}", end - start))
    }
}

fn crc(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ x as u32).wrapping_mul(0x0100_0193)
    })
}

/// Runs one random operation under `root`.
fn apply(root: &Path, op: u64, a: &str, b: &str, x: u64, y: u64) -> Outcome {
    let (pa, pb) = (root.join(a), root.join(b));
    match op {
        0..=3 => {
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&pa)
                .map_err(errno)?;
            let off = x % 300_000;
            let len = (y % 20_000) as usize;
            let buf: Vec<u8> = (0..len).map(|i| (i as u64 ^ x) as u8).collect();
            f.write_all_at(&buf, off).map_err(errno)?;
            Ok(format!("wrote {len}"))
        }
        4 => {
            let f = OpenOptions::new().write(true).open(&pa).map_err(errno)?;
            f.set_len(x % 400_000).map_err(errno)?;
            Ok("truncated".into())
        }
        5..=6 => {
            let f = File::open(&pa).map_err(errno)?;
            let mut buf = vec![0u8; (y % 50_000) as usize];
            let n = f.read_at(&mut buf, x % 350_000).map_err(errno)?;
            Ok(format!("{n} bytes crc {:08x}", crc(&buf[..n])))
        }
        7 => mmap_read(&pa, x % 350_000, (y % 50_000) as usize),
        8 => fs::rename(&pa, &pb)
            .map(|()| "renamed".into())
            .map_err(errno),
        9 => fs::remove_file(&pa)
            .map(|()| "unlinked".into())
            .map_err(errno),
        10 => fs::create_dir(&pa).map(|()| "made".into()).map_err(errno),
        11 => fs::remove_dir(&pa)
            .map(|()| "removed".into())
            .map_err(errno),
        12 => fs::metadata(&pa)
            .map(|m| {
                format!(
                    "dir {} size {}",
                    m.is_dir(),
                    if m.is_dir() { 0 } else { m.len() }
                )
            })
            .map_err(errno),
        _ => {
            let f = File::open(&pa).map_err(errno)?;
            f.sync_all().map(|()| "synced".into()).map_err(errno)
        }
    }
}

/// Every path under `root` with its kind and, for files, size and crc.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let mut names: Vec<_> = fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let m = fs::symlink_metadata(root.join(&r)).unwrap();
            if m.is_dir() {
                out.push(format!("{}/", r.display()));
                todo.push(r);
            } else {
                let data = fs::read(root.join(&r)).unwrap();
                out.push(format!("{} {} {:08x}", r.display(), data.len(), crc(&data)));
            }
        }
    }
    out.sort();
    out
}

fn model_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// 10,000 random operations (ULFS_MOUNT_MODEL_OPS for more, and
/// ULFS_MOUNT_MODEL_SEED for another sequence).
#[test]
fn random_operations_through_the_mount_agree_with_tmpfs() {
    let Some((_dir, image, mnt)) = setup("random_operations_through_the_mount_agree_with_tmpfs")
    else {
        return;
    };
    let ops: u64 = std::env::var("ULFS_MOUNT_MODEL_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let seed: u64 = std::env::var("ULFS_MOUNT_MODEL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_2026_1124);
    let model = model_dir();
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let mut rng = Rng::new(seed);
    for i in 0..ops {
        let op = rng.below(15);
        let a = NAMES[rng.below(NAMES.len() as u64) as usize];
        let b = NAMES[rng.below(NAMES.len() as u64) as usize];
        let (x, y) = (rng.next_u64(), rng.next_u64());
        let want = apply(model.path(), op, a, b, x, y);
        let got = apply(&mnt, op, a, b, x, y);
        assert_eq!(
            got, want,
            "operation {i} (seed {seed}): {op} {a} {b} {x} {y}"
        );
    }
    let want = tree(model.path());
    assert_eq!(tree(&mnt), want, "after {ops} operations");
    assert!(m.unmount().success());
    assert_clean(&image);
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["ro"]).unwrap();
    assert_eq!(tree(&mnt), want, "after a remount");
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// Four processes write, check and remove files at once, each in its own
/// directory; every file they leave holds what they wrote.
#[test]
fn four_processes_at_once() {
    let Some((_dir, image, mnt)) = setup("four_processes_at_once") else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let script = r#"
        d="$1/p$2"; mkdir "$d"
        i=0
        while [ $i -lt 40 ]; do
            head -c $((i * 4099 + $2)) /dev/urandom > "$d/tmp"
            cp "$d/tmp" "$d/f$i" && cmp "$d/tmp" "$d/f$i"
            if [ $((i % 3)) -eq 0 ]; then rm "$d/f$i"; fi
            i=$((i + 1))
        done
        mv "$d/tmp" "$d/last"
        sync
    "#;
    let children: Vec<_> = (0..4)
        .map(|p| {
            Command::new("sh")
                .arg("-ec")
                .arg(script)
                .arg("sh")
                .arg(&mnt)
                .arg(p.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    for p in 0..4 {
        let d = mnt.join(format!("p{p}"));
        let names = fs::read_dir(&d).unwrap().count();
        // 40 files, every third removed, and `last`.
        assert_eq!(names, 40 - 14 + 1, "p{p}");
        for i in (0..40).filter(|i| i % 3 != 0) {
            let len = fs::metadata(d.join(format!("f{i}"))).unwrap().len();
            assert_eq!(len, i * 4099 + p, "p{p}/f{i}");
        }
    }
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// A lazy unmount while a file is open: the descriptor keeps working, and
/// the server ends, committing everything, when the last one is closed.
#[test]
fn unmounting_with_files_still_open() {
    let Some((_dir, image, mnt)) = setup("unmounting_with_files_still_open") else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(mnt.join("open"))
        .unwrap();
    f.write_all_at(b"before ", 0).unwrap();
    // A plain unmount is refused while the file is open...
    let busy = Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!busy.status.success());
    // ...a lazy one detaches the mount at once.
    let lazy = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(lazy.status.success());
    assert!(!ulfs_testkit::fuse_mount::is_mounted(&mnt));
    f.write_all_at(b"and after", 7).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert!(m.wait().success());
    assert_clean(&image);
    let out = Command::new(ulfs())
        .args(["cat".as_ref(), image.as_os_str(), "/open".as_ref()])
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"before and after");
}

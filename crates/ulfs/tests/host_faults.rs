//! Misfortune from the host rather than from the image (issue 6, finding 1
//! and requirement 6): a sparse copy of an image, a full host file system,
//! an image file truncated under a running program. None of it may kill the
//! process with SIGBUS: a writable mount makes the image whole or refuses
//! with ENOSPC naming the shortfall, a read-only one reads, and a page lost
//! under the mapping is EIO and a read-only volume. A SIGBUS that is not
//! ulfs's still kills as before.
//!
//! The full-host cases mount a small tmpfs and need root; elsewhere they
//! print a SKIPPED line.

#[path = "common/host.rs"]
mod host;

use host::{Tmpfs, allocated, make_sparse};
use std::os::fd::AsRawFd;
use std::path::Path;
use ulfs::{Errno, Fs, FsckOptions, MkfsOptions, Mode, MountOptions, fsck, mkfs};
use ulfs_testkit::skip::skip;

const MIB: u64 = 1 << 20;

fn rw() -> MountOptions {
    MountOptions::default()
}

fn ro() -> MountOptions {
    MountOptions {
        read_only: true,
        ..Default::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed | 1)
        .collect()
}

fn put(fs: &mut Fs, path: &str, data: &[u8]) {
    let fd = fs
        .open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)
        .unwrap();
    assert_eq!(fs.pwrite(fd, data, 0).unwrap(), data.len());
    fs.close(fd).unwrap();
}

fn get(fs: &mut Fs, path: &str, len: usize, off: u64) -> ulfs::Result<Vec<u8>> {
    let fd = fs.open(path, libc::O_RDONLY, 0)?;
    let mut buf = vec![0u8; len];
    let got = fs.pread(fd, &mut buf, off);
    fs.close(fd)?;
    buf.truncate(got?);
    Ok(buf)
}

/// A file with zero blocks inside (they become holes of the image file in
/// a sparse copy) and one of plain data, in a 16 MiB image at `img`.
fn populate(img: &Path) -> (Vec<u8>, Vec<u8>) {
    mkfs(
        img,
        &MkfsOptions {
            size: 16 * MIB,
            ..Default::default()
        },
    )
    .unwrap();
    let data = pattern(200_000, 5);
    let mut zeros = vec![0u8; 64 << 10];
    zeros.extend(pattern(4096, 9));
    let mut fs = Fs::mount(img, rw()).unwrap();
    put(&mut fs, "/data", &data);
    put(&mut fs, "/zeros", &zeros);
    fs.mkdir("/dir", 0o755).unwrap();
    fs.unmount().unwrap();
    (data, zeros)
}

fn assert_clean(img: &Path) {
    let report = fsck(img, &mut FsckOptions::default()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn sparse_image_is_made_whole_at_a_writable_mount() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("q.img");
    let (data, zeros) = populate(&img);
    if make_sparse(&img) == 0 {
        skip(
            "sparse_image_is_made_whole_at_a_writable_mount",
            "the temp dir's file system cannot punch holes",
        );
        return;
    }
    assert!(allocated(&img) < 16 * MIB);
    // Read-only: left as it is.
    let mut fs = Fs::mount(&img, ro()).unwrap();
    assert_eq!(get(&mut fs, "/zeros", 1 << 20, 0).unwrap(), zeros);
    fs.unmount().unwrap();
    assert!(allocated(&img) < 16 * MIB);
    // Read-write: whole before the first store into the mapping.
    let mut fs = Fs::mount(&img, rw()).unwrap();
    assert!(
        allocated(&img) >= 16 * MIB,
        "holes left after a writable mount"
    );
    assert_eq!(get(&mut fs, "/data", 1 << 20, 0).unwrap(), data);
    assert_eq!(get(&mut fs, "/zeros", 1 << 20, 0).unwrap(), zeros);
    put(&mut fs, "/dir/new", &pattern(300_000, 7));
    fs.unmount().unwrap();
    assert_clean(&img);
    let mut fs = Fs::mount(&img, ro()).unwrap();
    assert_eq!(
        get(&mut fs, "/dir/new", 1 << 20, 0).unwrap(),
        pattern(300_000, 7)
    );
}

#[test]
fn sparse_image_on_a_full_host() {
    let t = match Tmpfs::mount(40 * MIB) {
        Ok(t) => t,
        Err(why) => return skip("sparse_image_on_a_full_host", &why),
    };
    let img = t.path().join("q.img");
    let (data, zeros) = populate(&img);
    assert!(make_sparse(&img) > 8 * MIB, "tmpfs punches holes");
    t.fill();
    // Read-only: everything reads, holes as the zeros they are.
    let mut fs = Fs::mount(&img, ro()).unwrap();
    assert_eq!(fs.info().total_blocks, 16 * MIB / 4096);
    assert_eq!(get(&mut fs, "/data", 1 << 20, 0).unwrap(), data);
    assert_eq!(get(&mut fs, "/zeros", 1 << 20, 0).unwrap(), zeros);
    assert!(fs.stat("/dir").is_ok());
    fs.unmount().unwrap();
    assert_clean(&img);
    // Read-write: refused, naming the shortfall, and nothing changed.
    let e = Fs::mount(&img, rw())
        .err()
        .expect("a writable mount is refused");
    assert_eq!(e.errno, Errno::ENOSPC, "{e}");
    assert!(e.message.contains("more bytes are needed"), "{e}");
    assert!(allocated(&img) < 16 * MIB);
    // With room again, it mounts, made whole.
    t.unfill();
    let mut fs = Fs::mount(&img, rw()).unwrap();
    assert!(allocated(&img) >= 16 * MIB);
    fs.mkdir("/dir/more", 0o755).unwrap();
    fs.unmount().unwrap();
    assert_clean(&img);
}

#[test]
fn image_truncated_under_the_program() {
    truncated_under_the_program(Mode::Journal);
}

#[test]
fn image_truncated_under_the_program_mode_none() {
    truncated_under_the_program(Mode::None);
}

fn truncated_under_the_program(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(
        &img,
        &MkfsOptions {
            size: 16 * MIB,
            mode,
            ..Default::default()
        },
    )
    .unwrap();
    let low = pattern(100_000, 3);
    let big = pattern(12 << 20, 4);
    let mut fs = Fs::mount(&img, rw()).unwrap();
    put(&mut fs, "/low", &low);
    put(&mut fs, "/big", &big);
    fs.sync().unwrap();
    assert_eq!(get(&mut fs, "/big", 4096, 11 << 20).unwrap().len(), 4096);
    // Someone else cuts the image file in half.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(8 * MIB)
        .unwrap();
    // A read in the lost half: EIO, not zeros, not a signal.
    assert_eq!(get(&mut fs, "/big", 4096, 11 << 20), Err(Errno::EIO));
    // The volume is read-only now.
    assert_eq!(fs.mkdir("/after", 0o755), Err(Errno::EROFS));
    if mode == Mode::Journal {
        assert!(fs.sync().is_err());
    }
    // (In mode `none` the unmount below is the first write after the
    // fault: it must not mark the image clean in place.)
    // Zeros now stand in for pages no one can name: no file data is
    // trusted, not even what the surviving half holds.
    assert_eq!(get(&mut fs, "/low", 1 << 20, 0), Err(Errno::EIO));
    assert!(
        fs.unmount().is_err(),
        "unmount of a faulted image must fail"
    );
    // What reached the image before the cut is still there.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    let mut fs = Fs::mount(&img, ro()).unwrap();
    assert_eq!(get(&mut fs, "/low", 1 << 20, 0).unwrap(), low);
    // The failed unmount did not mark the image clean.
    assert!(!fs.info().clean, "a faulted volume was marked clean");
}

#[test]
fn hole_punched_under_a_writable_mount_on_a_full_host() {
    let t = match Tmpfs::mount(40 * MIB) {
        Ok(t) => t,
        Err(why) => return skip("hole_punched_under_a_writable_mount_on_a_full_host", &why),
    };
    let img = t.path().join("q.img");
    let (data, _) = populate(&img);
    let mut fs = Fs::mount(&img, rw()).unwrap();
    // Someone punches the free blocks out of the image and fills the host.
    assert!(make_sparse(&img) > 8 * MIB);
    t.fill();
    // The stores into the holes cannot reach the image: the write itself
    // lands in the zero pages, but the loss is reported, as a failed
    // writeback is: at fsync, EIO; the volume goes read-only; reads fail.
    let fd = fs
        .open("/new", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    let _ = fs.pwrite(fd, &pattern(1 << 20, 2), 0);
    assert_eq!(fs.fsync(fd), Err(Errno::EIO));
    let _ = fs.close(fd);
    assert_eq!(fs.mkdir("/after", 0o755), Err(Errno::EROFS));
    assert_eq!(get(&mut fs, "/data", 1 << 20, 0), Err(Errno::EIO));
    assert!(fs.unmount().is_err());
    // The image holds its last committed state.
    t.unfill();
    let mut fs = Fs::mount(&img, ro()).unwrap();
    assert_eq!(get(&mut fs, "/data", 1 << 20, 0).unwrap(), data);
    assert!(fs.stat("/new").is_err());
}

/// Child half of `a_sigbus_elsewhere_still_kills`: a SIGBUS outside every
/// image mapping, with ulfs's handler installed.
#[test]
#[ignore = "run as a child process by a_sigbus_elsewhere_still_kills"]
fn sigbus_child() {
    let Ok(how) = std::env::var("ULFS_SIGBUS_CHILD") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("t.img");
    mkfs(&img, &MkfsOptions::default()).unwrap();
    let _fs = Fs::mount(&img, ro()).unwrap();
    if how == "kill" {
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGBUS) };
    } else {
        let other = dir.path().join("other");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&other)
            .unwrap();
        f.set_len(8192).unwrap();
        // SAFETY: a fresh shared mapping of our own two-page file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        f.set_len(0).unwrap();
        // SAFETY: in bounds of the mapping; the page is gone, which is the
        // point: this must raise SIGBUS.
        let v = unsafe { std::ptr::read_volatile(p.cast::<u8>().add(4096)) };
        println!("read {v}");
    }
    println!("SURVIVED");
}

#[test]
fn a_sigbus_elsewhere_still_kills() {
    use std::os::unix::process::ExitStatusExt;
    for how in ["fault", "kill"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sigbus_child", "--ignored", "--nocapture"])
            .env("ULFS_SIGBUS_CHILD", how)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{how}: {:?}\n{stdout}",
            out.status
        );
        assert!(!stdout.contains("SURVIVED"), "{how}: {stdout}");
    }
}

//! The memory budget meets a failing disk: writeback of the image fails
//! while the budget is releasing pages. Nothing the budget does may hide
//! that: the next fsync fails with EIO (the budget's own writeback calls
//! must not consume the error the kernel reports once per open file), and
//! reads in the same mount still return what was written (pages whose
//! writeback failed hold the only copy: they are never dropped).
//!
//! The image is a file on a small FUSE file system whose writes fail on
//! demand (tests/c/failing_fuse.c, built with libfuse3). Where FUSE or
//! libfuse3 is missing the test prints a `SKIPPED:` line (and fails under
//! `ULFS_REQUIRE_ALL_TESTS=1`; scripts/test.sh installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use ulfs::{Errno, Fs, MemoryBudget, MkfsOptions, MountOptions};
use ulfs_testkit::page_cache::resident_pages;
use ulfs_testkit::skip;

/// The FUSE server, mounted; unmounted and stopped when dropped.
struct Failing {
    server: Child,
    mnt: PathBuf,
    control: PathBuf,
}

impl Failing {
    /// Serves `backing` as `<dir>/mnt/img`, or says why it cannot.
    fn start(dir: &Path, backing: &Path) -> Result<Failing, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("needs /dev/fuse".into());
        }
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", "fuse3"])
            .output()
            .map_err(|e| format!("needs pkg-config ({e})"))?;
        if !flags.status.success() {
            return Err("needs libfuse3 (pkg-config fuse3)".into());
        }
        let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let bin = dir.join("failing_fuse");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/c/failing_fuse.c");
        let cc = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&bin)
            .arg(&src)
            .args(flags.split_whitespace())
            .output()
            .map_err(|e| format!("needs a C compiler ({e})"))?;
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let mnt = dir.join("mnt");
        let control = dir.join("fail");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::write(&control, "0").unwrap();
        let server = Command::new(&bin)
            .arg(backing)
            .arg(&control)
            .arg(&mnt)
            .args(["-f", "-s"])
            .spawn()
            .map_err(|e| format!("failing_fuse: {e}"))?;
        let mut f = Failing {
            server,
            mnt,
            control,
        };
        let start = Instant::now();
        while !f.image().exists() {
            if let Ok(Some(status)) = f.server.try_wait() {
                return Err(format!("the FUSE server exited ({status}): no FUSE here"));
            }
            assert!(start.elapsed() < Duration::from_secs(10), "FUSE mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(f)
    }

    fn image(&self) -> PathBuf {
        self.mnt.join("img")
    }

    /// From now on writes fail with `errno` (0: they succeed).
    fn fail_with(&self, errno: i32) {
        std::fs::write(&self.control, errno.to_string()).unwrap();
    }
}

impl Drop for Failing {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// The tests of this file one at a time. Each starts FUSE servers (fork +
/// exec) and mounts and remounts images: a server forked while another
/// test's image is open holds that image's open file, and with it its
/// `flock`, until it execs, so a remount in that window finds the image
/// "in use" (seen once, on a loaded machine).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new 32 MiB image served by the failing FUSE file system, or None
/// (the test `name` skipped) where there is no FUSE.
fn served(name: &str) -> Option<(tempfile::TempDir, Failing)> {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    let opts = MkfsOptions {
        size: 32 << 20,
        ..Default::default()
    };
    ulfs::mkfs(&backing, &opts).unwrap();
    match Failing::start(dir.path(), &backing) {
        Ok(fuse) => Some((dir, fuse)),
        Err(why) => {
            skip::skip(name, &why);
            None
        }
    }
}

/// The served image mounted with a 64 KiB memory budget.
fn mount_budgeted(fuse: &Failing) -> Fs {
    let opts = MountOptions {
        memory_budget: MemoryBudget::Bytes(64 << 10),
        ..Default::default()
    };
    Fs::mount(fuse.image(), opts).unwrap()
}

#[test]
fn a_failed_writeback_under_a_budget_still_fails_fsync() {
    let _serial = one_at_a_time();
    const MIB: usize = 1 << 20;
    for errno in [libc::EIO, libc::EINVAL, libc::ENOSYS] {
        let Some((_dir, fuse)) = served("a_failed_writeback_under_a_budget_still_fails_fsync")
        else {
            return;
        };
        let mut fs = mount_budgeted(&fuse);
        let fd = fs.open("/a", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let old = vec![b'x'; 2 * MIB];
        assert_eq!(fs.pwrite(fd, &old, 0).unwrap(), old.len());
        fs.fsync(fd).unwrap();
        // The budget is at work: most of the file was dropped already.
        let resident = resident_pages(&fuse.image());
        assert!(
            resident < MIB / 4096,
            "{resident} pages resident: no budget at work"
        );
        fuse.fail_with(errno);
        let new = vec![b'y'; 64 << 10];
        let mut written = 0;
        while written < 2 * MIB {
            // The volume may turn read-only once the failure shows; what
            // matters is that it does not say all is well.
            if fs.pwrite(fd, &new, written as u64).is_err() {
                break;
            }
            written += new.len();
        }
        // The disk recovers: a flush now writes whatever is still dirty,
        // but what failed to reach it must still be reported.
        fuse.fail_with(0);
        assert!(
            fs.fsync(fd).is_err(),
            "errno {errno}: fsync succeeded though writeback failed"
        );
        // What was written and not dropped reads back as written: never
        // the old bytes, silently.
        let mut back = vec![0u8; 64 << 10];
        for off in (0..2 * MIB).step_by(back.len()) {
            let want = if off < written { b'y' } else { b'x' };
            match fs.pread(fd, &mut back, off as u64) {
                Ok(n) => assert!(
                    n == back.len() && back.iter().all(|&b| b == want),
                    "errno {errno}: bytes at {off} are not what was written"
                ),
                Err(e) => assert_eq!(e, Errno::EIO, "errno {errno}"),
            }
        }
        let _ = fs.close(fd);
        let _ = fs.unmount();
    }
}

/// A writeback error that msync (fsync) reports, not the budget's own
/// wait, ends the budget too: it must not go on to drop the pages whose
/// writeback failed (clean, but the only copy of what was written), even
/// when the budget is set again; reads keep returning what was written.
#[test]
fn a_writeback_error_seen_by_fsync_ends_the_budget() {
    let _serial = one_at_a_time();
    for set_again in [false, true] {
        error_seen_by_fsync(set_again);
    }
}

fn error_seen_by_fsync(set_again: bool) {
    const MIB: usize = 1 << 20;
    let Some((_dir, fuse)) = served("a_writeback_error_seen_by_fsync_ends_the_budget") else {
        return;
    };
    let mut fs = mount_budgeted(&fuse);
    let fd = fs.open("/a", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let old = vec![b'x'; 2 * MIB];
    assert_eq!(fs.pwrite(fd, &old, 0).unwrap(), old.len());
    fs.fsync(fd).unwrap();
    // A fresh budget: an empty ring, so the small write below releases
    // nothing (and waits for nothing) on its own.
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    // A fresh mount (as a program starting): an empty ring.
    let mut fs = mount_budgeted(&fuse);
    let fd = fs.open("/a", libc::O_RDWR, 0o644).unwrap();
    fuse.fail_with(libc::EIO);
    // A small overwrite: one run of 8 blocks, within the window.
    let new = vec![b'y'; 32 << 10];
    assert_eq!(fs.pwrite(fd, &new, 0).unwrap(), new.len());
    let fsync = fs.fsync(fd);
    assert!(fsync.is_err());
    fuse.fail_with(0);
    if set_again {
        // The program (or ulfs_set_memory_budget) sets the budget again.
        fs.set_memory_budget(MemoryBudget::Bytes(64 << 10));
    }
    // Before anything else: the new bytes read back.
    let mut back = vec![0u8; 32 << 10];
    assert_eq!(fs.pread(fd, &mut back, 0), Ok(back.len()));
    assert!(back.iter().all(|&b| b == b'y'));
    // Read the rest of the file: the budget's window moves on.
    let mut rest = vec![0u8; 64 << 10];
    let mut off = 64 << 10;
    while off < 2 * MIB {
        let r = fs.pread(fd, &mut rest, off as u64);
        assert!(r.is_ok(), "{r:?}");
        off += rest.len();
    }
    let r = fs.pread(fd, &mut back, 0);
    let ys = back.iter().filter(|&&b| b == b'y').count();
    let xs = back.iter().filter(|&&b| b == b'x').count();
    assert!(
        r == Err(Errno::EIO) || ys == back.len(),
        "written bytes reverted: {ys} y, {xs} x"
    );
    let _ = fs.close(fd);
    let _ = fs.unmount();
}

//! An image mounted through `ulfs mount --foreground` for the length of a
//! test: started, waited for until the kernel lists the mount, and at the
//! end unmounted the way a user would (`fusermount3 -u`) with the server's
//! exit awaited, so the image is closed before the test checks it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why FUSE mounts cannot be tested here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse on this machine".into());
    }
    let found = Command::new("fusermount3")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if found.is_err() {
        return Some("no fusermount3 (Debian package fuse3)".into());
    }
    None
}

/// Whether a FUSE file system is mounted on `dir` now (one it is stacked
/// on does not count): `ulfs_fuse::is_fuse_mount`.
pub fn is_mounted(dir: &Path) -> bool {
    ulfs_fuse::is_fuse_mount(dir)
}

/// A test's scratch directory with a fresh image (`img`, of `size` as
/// `ulfs mkfs` takes it) and an empty mount point (`mnt`), or None, the
/// test skipped with the reason, where FUSE mounts cannot be tested.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub image: PathBuf,
    pub mnt: PathBuf,
}

impl Scratch {
    pub fn new(test: &str, ulfs: &Path, size: &str) -> Option<Scratch> {
        if let Some(why) = unavailable() {
            crate::skip::skip(test, &why);
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let (image, mnt) = (dir.path().join("img"), dir.path().join("mnt"));
        std::fs::create_dir(&mnt).unwrap();
        let out = Command::new(ulfs)
            .arg("mkfs")
            .arg(&image)
            .arg(size)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Scratch { dir, image, mnt })
    }
}

/// `ulfs fsck image` (`ulfs`: the binary) says clean.
pub fn assert_clean(ulfs: &Path, image: &Path) {
    let out = Command::new(ulfs).arg("fsck").arg(image).output().unwrap();
    assert!(
        out.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct FuseMount {
    child: Option<Child>,
    dir: PathBuf,
}

impl FuseMount {
    /// Runs `ulfs mount --foreground image dir -o opts` (`ulfs`: the
    /// binary's path) and waits up to 10 s for the mount.
    pub fn start(
        ulfs: &Path,
        image: &Path,
        dir: &Path,
        opts: &[&str],
    ) -> Result<FuseMount, String> {
        let mut cmd = Command::new(ulfs);
        cmd.arg("mount").arg("--foreground").arg(image).arg(dir);
        for o in opts {
            cmd.arg("-o").arg(o);
        }
        let child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", ulfs.display()))?;
        let mut m = FuseMount {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        let start = Instant::now();
        while !is_mounted(dir) {
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let mut err = String::new();
                if let Some(mut e) = m.child.take().and_then(|c| c.stderr) {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!("ulfs mount exited ({status}): {err}"));
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err("the mount did not appear within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(m)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// `fusermount3 -u`, then the server's exit status once it is gone.
    pub fn unmount(self) -> ExitStatus {
        let out = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.dir)
            .output()
            .expect("fusermount3 runs");
        assert!(
            out.status.success(),
            "fusermount3 -u {}: {}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait()
    }

    /// Waits for the server to exit by itself (after an unmount made some
    /// other way: a signal, umount).
    pub fn wait(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("not yet waited for");
        child.wait().expect("the server can be waited for")
    }
}

impl Drop for FuseMount {
    /// A test that failed half-way still leaves no mount behind.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.dir)
                .output();
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

//! The worker of ulfs-fuse and ulfs-fuse-writeback: the image mounted
//! with `ulfs mount --foreground` beside it (a directory next to the
//! image; `-o` options from the run, such as `writeback_cache`), the
//! POSIX workload run in the mount as on a host file system, and the
//! mount taken down with `fusermount3 -u` when the sweep ends. So the
//! same C workload measures the image through the kernel's FUSE path, and
//! other programs (tar) can work in the mount while the worker holds it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names the `ulfs` program for the worker (the run knows where it is).
pub const ULFS_ENV: &str = "ULFS_BENCH_ULFS";
/// The `-o` options of the mount, when the system has any.
pub const OPTIONS_ENV: &str = "ULFS_BENCH_FUSE_OPTIONS";

/// Where the image is mounted.
fn mount_point(image: &Path) -> PathBuf {
    image.with_extension("mnt")
}

/// The directory in the mount the workload works in.
pub fn work_dir(image: &Path) -> PathBuf {
    mount_point(image).join("w")
}

/// Serves requests on `image` mounted through FUSE; the exit status.
pub fn serve(image: &Path) -> i32 {
    match mounted(image) {
        Ok((mnt, mut server)) => {
            let work = work_dir(image);
            let status = match std::fs::create_dir_all(&work) {
                Ok(()) => crate::worker::serve("posix", &work),
                Err(e) => {
                    eprintln!("ulfs-bench fuse worker: {}: {e}", work.display());
                    1
                }
            };
            // The C loop works from inside the mount: out of it first, or
            // the unmount is refused as busy (then lazily, at worst).
            let _ = std::env::set_current_dir("/");
            let unmounted = Command::new("fusermount3")
                .arg("-u")
                .arg(&mnt)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if unmounted {
                let _ = server.wait();
            } else {
                // Files of the workload are still open here (fig. 11 keeps
                // its file open across requests): detached now, the
                // server ends when this process exits and they close.
                let _ = Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(&mnt)
                    .status();
            }
            let _ = std::fs::remove_dir(&mnt);
            status
        }
        Err(why) => {
            // Said as the workload says a missing peer: the cell is skipped.
            println!("err missing: {why}");
            1
        }
    }
}

/// Mounts `image` on `IMAGE.mnt` and waits (up to 10 s) for the mount.
fn mounted(image: &Path) -> Result<(PathBuf, std::process::Child), String> {
    let ulfs = std::env::var_os(ULFS_ENV).ok_or("the ulfs program is not known")?;
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse on this machine".into());
    }
    let mnt = mount_point(image);
    std::fs::create_dir_all(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
    let mut mount = Command::new(ulfs);
    mount.arg("mount").arg("--foreground").arg(image).arg(&mnt);
    if let Some(options) = std::env::var_os(OPTIONS_ENV) {
        mount.arg("-o").arg(options);
    }
    let mut server = mount
        // Nothing of the run's pipes: the run reads this worker's until
        // they close, and the server may outlive it if it is killed.
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("ulfs mount: {e}"))?;
    let start = Instant::now();
    while !ulfs_fuse::is_fuse_mount(&mnt) {
        if let Ok(Some(status)) = server.try_wait() {
            return Err(format!("ulfs mount ended ({status})"));
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = server.kill();
            return Err("ulfs mount did not mount within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok((mnt, server))
}

//! An ulfs image mounted on the host through FUSE: `ulfs mount` and
//! `mount -t fuse.ulfs`. The kernel sends requests over /dev/fuse (through
//! `fuser`, mounting with fusermount3), and `adapter.rs` serves them with
//! the image's `Volume` at the inode level: the same engine, journal and
//! rules that programs get in process, seen by every program on the host.
//!
//! Layering: `options` parses what the user asked, `attr` translates
//! between the volume's words and FUSE's, `adapter` serves requests; this
//! module mounts and runs a session until it is unmounted (by
//! `fusermount3 -u`, `umount`, or SIGTERM/SIGINT/SIGHUP to the server),
//! and unmounts the volume cleanly at the end, committing its journal.

mod adapter;
mod attr;
mod handles;
mod mounting;
mod options;

pub use adapter::{Committer, UlfsFuse};
pub use mounting::{fuse_mount_source, is_fuse_mount};
pub use options::MountConfig;

use std::path::Path;
use std::time::Duration;
use ulfs::MountOptions;
use ulfs::fs::Volume;

/// How often the server looks whether the running transaction is due
/// (the volume's commit interval, 5 s, decides when it is).
const COMMIT_CHECK: Duration = Duration::from_secs(1);

/// Mounts `image` on `mountpoint` and serves it until it is unmounted.
/// `ready` is called once the mount is in place (a daemon tells its
/// parent then). Errors say what failed, for the user.
pub fn serve(
    image: &Path,
    mountpoint: &Path,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> Result<(), String> {
    let opts = MountOptions {
        read_only: cfg.read_only,
        ..MountOptions::default()
    };
    let vol = Volume::mount(image, opts).map_err(|e| e.to_string())?;
    let config = cfg.fuser_config(&image.to_string_lossy());
    let fs = UlfsFuse::new(vol, cfg.clone());
    let committer = fs.committer();
    // SAFETY: geteuid has no preconditions.
    let session = if unsafe { libc::geteuid() } == 0 {
        let fd = mounting::mount_as_root(image, mountpoint, &cfg.kernel_mount())?;
        let acl = config.acl;
        fuser::Session::from_fd(fs, fd, acl, config).map_err(|e| {
            mounting::detach(image, mountpoint);
            format!("starting the session on {}: {e}", mountpoint.display())
        })?
    } else {
        fuser::Session::new(fs, mountpoint, &config)
            .map_err(|e| format!("cannot mount on {}: {e}", mountpoint.display()))?
    };
    // Termination signals commit what is done and detach the mount (at
    // once, even with files open); the session then ends, unmounting the
    // volume, when the last open file is closed.
    let (on_signal, src, dst) = (
        committer.clone(),
        image.to_path_buf(),
        mountpoint.to_path_buf(),
    );
    let signals = ctrlc::set_handler(move || {
        on_signal.sync();
        mounting::detach(&src, &dst);
    });
    if let Err(e) = signals {
        eprintln!("ulfs mount: SIGTERM and SIGINT will not unmount cleanly: {e}");
    }
    // An idle mount commits too: nothing else would until the next
    // request, and sync(2) never reaches a FUSE server.
    std::thread::spawn(move || {
        while committer.commit_if_due() {
            std::thread::sleep(COMMIT_CHECK);
        }
    });
    ready();
    session
        .run()
        .map_err(|e| format!("serving {}: {e}", mountpoint.display()))
}

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
mod options;

pub use adapter::UlfsFuse;
pub use options::MountConfig;

use std::path::Path;
use ulfs::MountOptions;
use ulfs::fs::Volume;

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
    let mut session = fuser::Session::new(UlfsFuse::new(vol, cfg.clone()), mountpoint, &config)
        .map_err(|e| format!("cannot mount on {}: {e}", mountpoint.display()))?;
    let mut unmounter = session.unmount_callable();
    // Termination signals unmount, which ends the session the way
    // `fusermount3 -u` does: the volume is unmounted and its journal
    // committed before the process exits.
    let signals = ctrlc::set_handler(move || {
        let _ = unmounter.unmount();
    });
    if let Err(e) = signals {
        eprintln!("ulfs mount: SIGTERM and SIGINT will not unmount cleanly: {e}");
    }
    ready();
    session
        .run()
        .map_err(|e| format!("serving {}: {e}", mountpoint.display()))
}

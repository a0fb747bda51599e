//! `fsck`: checks an image, and with `fsck_repair` puts it back in order.
//!
//! The check (`check.rs`) walks what is reachable from the root and compares
//! it with what the image claims: every block referenced once and marked
//! used in the group bitmaps (and no block marked used that nothing
//! references), group and superblock free counts, link counts, directory
//! parent pointers, and the directory index invariants (node kinds, key
//! order within and across leaves, each key matching its name's hash, entry
//! counts). Inodes that are live but unreachable are reported unless they
//! are orphans awaiting release. Cost is O(image metadata); it is a tool,
//! not the mount path.
//!
//! The repair (`repair.rs`, over the volume primitives of `fs/repair.rs`)
//! mounts the image read-write and fixes through the ordinary transactions
//! what can be fixed, then checks again: what the second check still finds
//! is reported as remaining.

mod check;
mod repair;

use crate::errno::Errno;
use crate::error::Error;
use crate::fs::{MountOptions, Volume};
use std::path::Path;

pub use repair::{RepairReport, fsck_repair};

/// Options of a check or a repair.
#[derive(Default)]
pub struct FsckOptions {
    /// Called now and then with (work done, work in all) of the current
    /// phase.
    pub progress: Option<Box<dyn FnMut(u64, u64)>>,
    /// Called when a phase begins: "checking", "repairing", "re-checking".
    /// A plain check has the one phase "checking".
    pub phase: Option<Box<dyn FnMut(&'static str)>>,
}

impl FsckOptions {
    pub(crate) fn begin(&mut self, phase: &'static str) {
        if let Some(p) = self.phase.as_mut() {
            p(phase);
        }
    }

    pub(crate) fn report(&mut self, done: u64, total: u64) {
        if let Some(p) = self.progress.as_mut() {
            p(done, total);
        }
    }
}

/// What a check found.
#[derive(Debug, Default, Clone)]
pub struct FsckReport {
    pub problems: Vec<String>,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub used_blocks: u64,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the image at `image`. `Err` means it could not be checked at all
/// (unreadable, or not a ulfs image); problems found go in the report.
pub fn fsck(image: impl AsRef<Path>, opts: &mut FsckOptions) -> Result<FsckReport, Error> {
    opts.begin("checking");
    let vol = Volume::mount(
        image.as_ref(),
        MountOptions {
            read_only: true,
            // The checker reads damaged blocks and judges them itself.
            verify_checksums: false,
            ..Default::default()
        },
    )?;
    Ok(check::check_volume(&vol, opts, false))
}

/// Checks the image held by `store` (a `SimDisk` in crash tests).
pub fn fsck_store(
    store: Box<dyn crate::store::BlockStore>,
    opts: &mut FsckOptions,
) -> Result<FsckReport, Error> {
    opts.begin("checking");
    let vol = Volume::mount_store(
        store,
        MountOptions {
            read_only: true,
            // The checker reads damaged blocks and judges them itself.
            verify_checksums: false,
            ..Default::default()
        },
        "image",
    )?;
    Ok(check::check_volume(&vol, opts, false))
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::new(e, e.to_string())
    }
}

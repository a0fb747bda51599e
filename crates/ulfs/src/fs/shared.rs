//! `SharedVolume`: one volume served to several threads at once (the FUSE
//! mount's request loops, the server's workers), under a read-write lock.
//! Calls that only read the volume (`&self`: lookups, stats, shared reads,
//! listings) share it and run side by side; every call that changes it
//! (`&mut self`) has it to itself, because changes join the one running
//! journal transaction, the undo record of the call in progress is the
//! volume's, and the write path keeps decoded inodes dirty in the open
//! table. Both users take the lock here, so they share one discipline:
//! a panic inside a call leaves the lock poisoned and is gone past (the
//! call's own journal undid it), and once the volume is unmounted every
//! later call is EIO rather than a use of a closed image.

use super::Volume;
use crate::errno::{Errno, Result};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The volume, and whether it is still mounted.
struct Core {
    vol: Volume,
    gone: bool,
}

/// A volume shared between threads; clones share the same volume.
#[derive(Clone)]
pub struct SharedVolume(Arc<RwLock<Core>>);

impl SharedVolume {
    pub fn new(vol: Volume) -> SharedVolume {
        SharedVolume(Arc::new(RwLock::new(Core { vol, gone: false })))
    }

    fn write(&self) -> RwLockWriteGuard<'_, Core> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> RwLockReadGuard<'_, Core> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the volume to itself, or EIO once it is unmounted.
    pub fn exclusive<T>(&self, f: impl FnOnce(&mut Volume) -> Result<T>) -> Result<T> {
        let mut core = self.write();
        if core.gone {
            return Err(Errno::EIO);
        }
        f(&mut core.vol)
    }

    /// Runs `f` on the volume shared with other readers, or EIO once it is
    /// unmounted.
    pub fn shared<T>(&self, f: impl FnOnce(&Volume) -> Result<T>) -> Result<T> {
        let core = self.read();
        if core.gone {
            return Err(Errno::EIO);
        }
        f(&core.vol)
    }

    /// Commits the running transaction if it is due (a timer's call, so
    /// that an idle volume's changes are as durable as the commit interval
    /// says); false once the volume is unmounted.
    pub fn commit_if_due(&self) -> bool {
        let mut core = self.write();
        if core.gone {
            return false;
        }
        if !core.vol.is_read_only() {
            let _ = core.vol.commit();
        }
        true
    }

    /// Makes everything done so far durable (as fsync); nothing once
    /// unmounted.
    pub fn sync(&self) {
        let mut core = self.write();
        if !core.gone {
            let _ = core.vol.sync();
        }
    }

    /// After a panic inside a call: the volume becomes read-only for good
    /// and nothing more is committed (`Volume::abandon`), because the call
    /// may have been cut in half.
    pub fn abandon(&self) {
        let mut core = self.write();
        if !core.gone {
            core.vol.abandon();
        }
    }

    /// Unmounts the volume once: `release` first lets go of what the
    /// users still hold (open references), then the volume commits, and
    /// is marked clean. `None` when it was unmounted already.
    pub fn unmount(&self, release: impl FnOnce(&mut Volume)) -> Option<Result<()>> {
        let mut core = self.write();
        if core.gone {
            return None;
        }
        core.gone = true;
        release(&mut core.vol);
        Some(core.vol.unmount())
    }
}

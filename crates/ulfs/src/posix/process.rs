//! `Process`: what one process has of a volume (its descriptor table,
//! working directory and umask), apart from the volume itself, so that one
//! volume can serve several processes (a server's clients) while the
//! in-process `Fs` owns exactly one of each.

use super::fdtable::FdTable;
use crate::fs::Volume;
use crate::types::Ino;

/// One process's view of a volume.
pub struct Process {
    pub(crate) fds: FdTable,
    pub(crate) cwd: Ino,
    pub(crate) umask: u32,
}

impl Process {
    /// A new process at the volume's root, with no descriptors and umask
    /// 022. The working directory holds its inode like an open descriptor
    /// (`Ctx::exit` lets it go).
    pub fn new(vol: &mut Volume) -> Process {
        let root = vol.root();
        vol.open_ref(root);
        Process {
            fds: FdTable::default(),
            cwd: root,
            umask: 0o022,
        }
    }
}

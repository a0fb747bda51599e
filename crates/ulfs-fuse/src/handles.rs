//! Open handles of a mount: the number the kernel holds for each open file
//! or directory, and the inode and open reference behind it. A table of
//! its own, beside the volume's lock rather than inside it, so that reads
//! (which share the volume) find their handle without excluding each
//! other. Lock order: the volume's lock, then this table's, never the
//! other way round.

use fuser::FileHandle;
use ulfs::fs::OpenId;
use ulfs::{Errno, Ino, Result};

/// An open handle: the inode it holds a reference on.
#[derive(Clone, Copy, Debug)]
pub struct Handle {
    pub ino: Ino,
    pub open: OpenId,
}

#[derive(Default)]
pub struct Handles {
    slots: Vec<Option<Handle>>,
    free: Vec<usize>,
}

impl Handles {
    /// A new handle for `h`; numbers start at 1 (0 is "no handle").
    pub fn insert(&mut self, h: Handle) -> FileHandle {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(h);
                i
            }
            None => {
                self.slots.push(Some(h));
                self.slots.len() - 1
            }
        };
        FileHandle(i as u64 + 1)
    }

    pub fn get(&self, fh: FileHandle) -> Result<Handle> {
        Self::index(fh)
            .and_then(|i| self.slots.get(i))
            .copied()
            .flatten()
            .ok_or(Errno::EBADF)
    }

    /// Takes `fh` out of the table; the caller drops its open reference.
    pub fn remove(&mut self, fh: FileHandle) -> Result<Handle> {
        let i = Self::index(fh).ok_or(Errno::EBADF)?;
        let h = self
            .slots
            .get_mut(i)
            .and_then(Option::take)
            .ok_or(Errno::EBADF)?;
        self.free.push(i);
        Ok(h)
    }

    /// Every handle still open, taken out (the unmount closes them).
    pub fn drain(&mut self) -> Vec<Handle> {
        self.free.clear();
        self.slots.drain(..).flatten().collect()
    }

    fn index(fh: FileHandle) -> Option<usize> {
        (fh.0 as usize).checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_reused_and_unknown_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("img");
        ulfs::mkfs(&image, &Default::default()).unwrap();
        let mut vol = ulfs::fs::Volume::mount(&image, Default::default()).unwrap();
        let open = vol.open_ref(vol.root());
        let id = |ino| Handle { ino, open };
        let mut t = Handles::default();
        let a = t.insert(id(10));
        let b = t.insert(id(11));
        assert_ne!(a, b);
        assert_eq!(t.get(a).unwrap().ino, 10);
        assert_eq!(t.remove(a).unwrap().ino, 10);
        assert_eq!(t.get(a).err(), Some(Errno::EBADF));
        assert_eq!(t.remove(a).err(), Some(Errno::EBADF));
        assert_eq!(t.get(FileHandle(0)).err(), Some(Errno::EBADF));
        assert_eq!(t.get(FileHandle(u64::MAX)).err(), Some(Errno::EBADF));
        assert_eq!(t.insert(id(12)), a, "a freed number is reused");
        let left: Vec<Ino> = t.drain().iter().map(|h| h.ino).collect();
        assert_eq!(left, vec![12, 11]);
        assert_eq!(t.get(b).err(), Some(Errno::EBADF));
    }
}

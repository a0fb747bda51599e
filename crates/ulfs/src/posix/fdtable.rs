//! Descriptors and open file descriptions, kept apart from the volume so a
//! server can give each client its own table over one shared volume.
//!
//! As in POSIX, a descriptor names an open file description (offset, access
//! mode, O_APPEND); `dup` makes a second descriptor for the same description,
//! so the two share one offset.

use crate::errno::{Errno, Result};
use crate::types::{Fd, Ino};

/// Highest number of descriptors a table hands out (EMFILE past it).
pub const MAX_FDS: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct OpenFile {
    pub ino: Ino,
    pub readable: bool,
    pub writable: bool,
    pub append: bool,
    pub is_dir: bool,
    /// Byte offset for files; the readdir cookie for directories.
    pub offset: u64,
    refs: u32,
}

impl OpenFile {
    pub fn new(ino: Ino, flags: i32, is_dir: bool) -> OpenFile {
        let acc = flags & libc::O_ACCMODE;
        OpenFile {
            ino,
            readable: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            writable: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
            is_dir,
            offset: 0,
            refs: 1,
        }
    }
}

#[derive(Default)]
pub struct FdTable {
    fds: Vec<Option<u32>>,
    files: Vec<Option<OpenFile>>,
    free_files: Vec<u32>,
}

impl FdTable {
    fn lowest_free_fd(&self, from: usize) -> Result<usize> {
        let fd = (from..self.fds.len())
            .find(|&i| self.fds[i].is_none())
            .unwrap_or(self.fds.len().max(from));
        if fd >= MAX_FDS {
            Err(Errno::EMFILE)
        } else {
            Ok(fd)
        }
    }

    fn bind(&mut self, fd: usize, file: u32) {
        if fd >= self.fds.len() {
            self.fds.resize(fd + 1, None);
        }
        self.fds[fd] = Some(file);
    }

    /// Installs a new open file description at the lowest free descriptor.
    pub fn insert(&mut self, file: OpenFile) -> Result<Fd> {
        let fd = self.lowest_free_fd(0)?;
        let idx = match self.free_files.pop() {
            Some(i) => {
                self.files[i as usize] = Some(file);
                i
            }
            None => {
                self.files.push(Some(file));
                (self.files.len() - 1) as u32
            }
        };
        self.bind(fd, idx);
        Ok(fd as Fd)
    }

    fn index(&self, fd: Fd) -> Result<u32> {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.fds.get(i).copied().flatten())
            .ok_or(Errno::EBADF)
    }

    #[inline]
    pub fn get(&self, fd: Fd) -> Result<&OpenFile> {
        let i = self.index(fd)?;
        self.files[i as usize].as_ref().ok_or(Errno::EBADF)
    }

    #[inline]
    pub fn get_mut(&mut self, fd: Fd) -> Result<&mut OpenFile> {
        let i = self.index(fd)?;
        self.files[i as usize].as_mut().ok_or(Errno::EBADF)
    }

    /// Closes `fd`; returns the inode when this was the description's last
    /// descriptor (the caller drops its open reference).
    pub fn close(&mut self, fd: Fd) -> Result<Option<Ino>> {
        let i = self.index(fd)?;
        self.fds[fd as usize] = None;
        let file = self.files[i as usize].as_mut().ok_or(Errno::EBADF)?;
        file.refs -= 1;
        if file.refs > 0 {
            return Ok(None);
        }
        let ino = file.ino;
        self.files[i as usize] = None;
        self.free_files.push(i);
        Ok(Some(ino))
    }

    /// A second descriptor, >= `from`, for the description of `fd`.
    pub fn dup_from(&mut self, fd: Fd, from: usize) -> Result<Fd> {
        let i = self.index(fd)?;
        let new = self.lowest_free_fd(from)?;
        self.files[i as usize].as_mut().ok_or(Errno::EBADF)?.refs += 1;
        self.bind(new, i);
        Ok(new as Fd)
    }

    /// Makes `new` refer to the description of `old`. Returns the inode
    /// whose last descriptor was closed by it, if any.
    pub fn dup2(&mut self, old: Fd, new: Fd) -> Result<(Fd, Option<Ino>)> {
        let i = self.index(old)?;
        if new < 0 || new as usize >= MAX_FDS {
            return Err(Errno::EBADF);
        }
        if old == new {
            return Ok((new, None));
        }
        let closed = if self.index(new).is_ok() {
            self.close(new)?
        } else {
            None
        };
        self.files[i as usize].as_mut().ok_or(Errno::EBADF)?.refs += 1;
        self.bind(new as usize, i);
        Ok((new, closed))
    }

    /// Every open descriptor (for unmount).
    pub fn open_fds(&self) -> Vec<Fd> {
        (0..self.fds.len())
            .filter(|&i| self.fds[i].is_some())
            .map(|i| i as Fd)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_fd_dup_and_shared_description() {
        let mut t = FdTable::default();
        let a = t.insert(OpenFile::new(10, libc::O_RDWR, false)).unwrap();
        let b = t.insert(OpenFile::new(11, libc::O_RDONLY, false)).unwrap();
        assert_eq!((a, b), (0, 1));
        let c = t.dup_from(a, 0).unwrap();
        assert_eq!(c, 2);
        t.get_mut(a).unwrap().offset = 77;
        assert_eq!(t.get(c).unwrap().offset, 77);
        assert_eq!(t.close(a).unwrap(), None);
        assert_eq!(t.close(c).unwrap(), Some(10));
        assert_eq!(t.get(c).unwrap_err(), Errno::EBADF);
        let (n, closed) = t.dup2(b, 5).unwrap();
        assert_eq!((n, closed), (5, None));
        assert_eq!(t.insert(OpenFile::new(12, 0, false)).unwrap(), 0);
        assert_eq!(t.dup2(9, 1).unwrap_err(), Errno::EBADF);
    }
}

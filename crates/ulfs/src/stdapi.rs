//! A `std::fs`-shaped layer over the syscall API: `File` (Read + Write +
//! Seek), `read_dir`, `create_dir_all`, `remove_dir_all`, `metadata`.
//!
//! It goes through `SharedFs`, the thread-safe wrapper: one mutex around an
//! `Fs`. Several `File`s can then be open at once, from several threads, as
//! with `std::fs`. Single-owner code that wants no lock uses `Fs` directly.

use crate::errno::Errno;
use crate::posix::Fs;
use crate::posix::dirents;
use crate::types::{DT_DIR, Fd, Ino, Stat};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::{Arc, Mutex, MutexGuard};

/// An `Fs` shared between handles and threads.
#[derive(Clone)]
pub struct SharedFs(Arc<Mutex<Fs>>);

impl SharedFs {
    pub fn new(fs: Fs) -> SharedFs {
        SharedFs(Arc::new(Mutex::new(fs)))
    }

    /// Locks the file system for a sequence of calls.
    pub fn lock(&self) -> MutexGuard<'_, Fs> {
        // A panic while the lock was held may have cut a call in half: the
        // file system is abandoned (read-only from then on, nothing more
        // committed), and the lock is usable again for reads.
        self.0.lock().unwrap_or_else(|poisoned| {
            let mut fs = poisoned.into_inner();
            fs.abandon();
            self.0.clear_poison();
            fs
        })
    }

    /// Starts a thread that commits the running transaction once it is due
    /// (`MountOptions::commit_interval`), even while the program makes no
    /// calls, so that a crash loses at most that interval of work done
    /// without fsync. The thread holds only a weak reference and ends when
    /// the last handle is dropped.
    pub fn spawn_committer(&self, every: std::time::Duration) -> std::thread::JoinHandle<()> {
        let weak = Arc::downgrade(&self.0);
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(fs) = weak.upgrade() else { return };
                let fs = SharedFs(fs);
                let mut g = fs.lock();
                // An error here (a failed flush) has already latched the
                // volume read-only; the next call reports it.
                let _ = g.commit_if_due();
            }
        })
    }

    /// Gives the `Fs` back when this is the last handle.
    pub fn into_inner(self) -> Option<Fs> {
        Arc::into_inner(self.0).map(|m| {
            m.into_inner().unwrap_or_else(|poisoned| {
                let mut fs = poisoned.into_inner();
                fs.abandon();
                fs
            })
        })
    }
}

/// An open file, closed on drop.
pub struct File {
    fs: SharedFs,
    fd: Fd,
}

impl File {
    /// Opens with raw `open(2)` flags and mode.
    pub fn open_with(
        fs: &SharedFs,
        path: impl AsRef<[u8]>,
        flags: i32,
        mode: u32,
    ) -> io::Result<File> {
        let fd = fs.lock().open(path, flags | libc::O_CLOEXEC, mode)?;
        Ok(File { fs: fs.clone(), fd })
    }

    /// Opens an existing file read-only, as `std::fs::File::open`.
    pub fn open(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<File> {
        File::open_with(fs, path, libc::O_RDONLY, 0)
    }

    /// Creates or truncates a file for writing, as `std::fs::File::create`.
    pub fn create(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<File> {
        File::open_with(
            fs,
            path,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            0o666,
        )
    }

    pub fn fd(&self) -> Fd {
        self.fd
    }

    pub fn metadata(&self) -> io::Result<Stat> {
        Ok(self.fs.lock().fstat(self.fd)?)
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        Ok(self.fs.lock().ftruncate(self.fd, len)?)
    }

    pub fn sync_all(&self) -> io::Result<()> {
        Ok(self.fs.lock().fsync(self.fd)?)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.fs.lock().read(self.fd, buf)?)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(self.fs.lock().write(self.fd, buf)?)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let (off, whence) = match pos {
            SeekFrom::Start(o) => (
                i64::try_from(o).map_err(|_| io::Error::from(Errno::EINVAL))?,
                libc::SEEK_SET,
            ),
            SeekFrom::Current(o) => (o, libc::SEEK_CUR),
            SeekFrom::End(o) => (o, libc::SEEK_END),
        };
        Ok(self.fs.lock().lseek(self.fd, off, whence)?)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.fs.lock().close(self.fd);
    }
}

/// Metadata of `path`, following symlinks.
pub fn metadata(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<Stat> {
    Ok(fs.lock().stat(path)?)
}

/// Creates `path` and every missing parent.
pub fn create_dir_all(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    let mut g = fs.lock();
    let mut prefix = Vec::with_capacity(path.len());
    for (i, comp) in path.split(|&c| c == b'/').enumerate() {
        if i > 0 {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(comp);
        if comp.is_empty() || comp == b"." {
            continue;
        }
        match g.mkdir(&prefix, 0o777) {
            Ok(()) => {}
            Err(Errno::EEXIST) if g.stat(&prefix)?.is_dir() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: Ino,
    /// `d_type` (DT_DIR, DT_REG, DT_LNK).
    pub file_type: u8,
}

/// Iterator over a directory, `.` and `..` skipped.
pub struct ReadDir {
    fs: SharedFs,
    fd: Fd,
    buf: Vec<u8>,
    pending: std::vec::IntoIter<dirents::Dirent>,
    done: bool,
}

/// Lists directory `path`.
pub fn read_dir(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<ReadDir> {
    let fd = fs
        .lock()
        .open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    Ok(ReadDir {
        fs: fs.clone(),
        fd,
        buf: vec![0; 16 * 1024],
        pending: Vec::new().into_iter(),
        done: false,
    })
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(d) = self.pending.next() {
                if d.name == b"." || d.name == b".." {
                    continue;
                }
                return Some(Ok(DirEntry {
                    name: d.name,
                    ino: d.ino,
                    file_type: d.dtype,
                }));
            }
            if self.done {
                return None;
            }
            let n = match self.fs.lock().getdents64(self.fd, &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            };
            if n == 0 {
                self.done = true;
                return None;
            }
            self.pending = dirents::parse(&self.buf[..n]).into_iter();
        }
    }
}

impl Drop for ReadDir {
    fn drop(&mut self) {
        let _ = self.fs.lock().close(self.fd);
    }
}

/// Removes `path` and everything below it (a symlink is removed, not
/// followed).
pub fn remove_dir_all(fs: &SharedFs, path: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    if !fs.lock().lstat(path)?.is_dir() {
        return Err(Errno::ENOTDIR.into());
    }
    // Collect first: removing while a listing is open is allowed, but a
    // plain list keeps the recursion simple and the lock short.
    let entries: Vec<DirEntry> = read_dir(fs, path)?.collect::<io::Result<_>>()?;
    for e in entries {
        let mut child = path.to_vec();
        child.push(b'/');
        child.extend_from_slice(&e.name);
        if e.file_type == DT_DIR {
            remove_dir_all(fs, &child)?;
        } else {
            fs.lock().unlink(&child)?;
        }
    }
    Ok(fs.lock().rmdir(path)?)
}

//! A read-only view of an image another process owns: the reader's side of
//! read leases (fs/changes.rs). A client of `ulfs serve` maps the image it
//! is served from, shared and read-only, so it sees the very page cache
//! the server writes file data into, and copies leased blocks out of it
//! with no request.
//!
//! The client opens the image itself, by the path the server names: the
//! kernel decides whether this process may read that file (a process that
//! may read the image may read every byte in it anyway), and the view is
//! kept only if the file opened is the one the server has (same device and
//! inode). The mapping is registered with the fault handler (`fault.rs`),
//! so an image truncated under it costs an EIO, not the process (unless
//! the program installed a SIGBUS handler of its own after ulfs that does
//! not pass the signal on). The file is closed once mapped.

use super::fault::Registration;
use crate::errno::{Errno, Result};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// An image mapped read-only beside the process that serves it. It keeps
/// no descriptor: a program served through `ulfs run --server` owns its
/// descriptor numbers and may close or reuse any of them.
pub struct ImageView {
    /// Dropped first: the handler must forget the range before it is
    /// unmapped.
    fault: Registration,
    map: memmap2::Mmap,
}

impl ImageView {
    /// Opens and maps the image at `path` if it is the file `(dev, ino)`;
    /// ESTALE when another file is there now.
    pub fn open(path: &Path, dev: u64, ino: u64) -> Result<ImageView> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
            .map_err(io_errno)?;
        let meta = file.metadata().map_err(io_errno)?;
        if (meta.dev(), meta.ino()) != (dev, ino) {
            return Err(Errno(libc::ESTALE));
        }
        let len = super::backing_size(&mut file).map_err(io_errno)?;
        let len = usize::try_from(len).map_err(|_| Errno::EFBIG)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a read-only shared mapping of an open file, of its
        // current size. Another process (the server) writes the file
        // while we read: the bytes are only copied out (`read`), never
        // borrowed for longer, and what a copy made during a change is
        // worth is decided by the lease (fs/changes.rs). Pages the file
        // loses later (a truncate) raise SIGBUS, which the registration
        // below turns into zeros and `faulted`.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file) }.map_err(io_errno)?;
        drop(file);
        // No descriptor for the handler to tell a hole from a loss: any
        // fault is a loss, and the client then reads through the server.
        let fault = Registration::new(map.as_ptr(), len, -1, false);
        Ok(ImageView { fault, map })
    }

    /// The image's size in bytes.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Copies the image's bytes at `off` into `dst`: EINVAL past the end,
    /// EIO once a fault has lost bytes of the view (what was copied may be
    /// zeros in their place).
    #[inline]
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let start = usize::try_from(off).map_err(|_| Errno::EINVAL)?;
        let src = start
            .checked_add(dst.len())
            .and_then(|end| self.map.get(start..end))
            .ok_or(Errno::EINVAL)?;
        super::copy_bytes(dst, src);
        if self.fault.faulted() {
            return Err(Errno::EIO);
        }
        Ok(())
    }
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_view_reads_what_the_file_holds_now_and_only_that_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let mut f = File::create(&p).unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let m = f.metadata().unwrap();
        let view = ImageView::open(&p, m.dev(), m.ino()).unwrap();
        assert_eq!(view.len(), 8192);
        let mut b = [0u8; 16];
        view.read(4090, &mut b).unwrap();
        assert_eq!(b, [7u8; 16]);
        // A write through another descriptor is seen: one page cache.
        std::os::unix::fs::FileExt::write_all_at(&f, &[9u8; 4], 4096).unwrap();
        view.read(4094, &mut b[..4]).unwrap();
        assert_eq!(&b[..4], &[7, 7, 9, 9]);
        assert_eq!(view.read(8190, &mut b), Err(Errno::EINVAL));
        assert_eq!(view.read(u64::MAX, &mut b), Err(Errno::EINVAL));
        // Another file at the path is not taken for the image.
        assert_eq!(
            ImageView::open(&p, m.dev(), m.ino() + 1).err(),
            Some(Errno(libc::ESTALE))
        );
        // A truncated image: an error, not a SIGBUS.
        f.set_len(100).unwrap();
        assert_eq!(view.read(4096, &mut b), Err(Errno::EIO));
    }
}

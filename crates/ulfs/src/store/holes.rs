//! Making an image file whole before it is mapped for writing.
//!
//! mkfs preallocates the image, but a copy made with `cp --sparse=always`,
//! `rsync -S`, `tar -S` or `fallocate -d` turns its zero ranges back into
//! holes. A store into a hole needs host space at the moment of the store,
//! and on a full host the kernel can only answer with SIGBUS. So a writable
//! store fills the holes first (fallocate), or refuses with ENOSPC naming
//! how many bytes are missing. The common case, a file with no hole, costs
//! nothing (the caller's fstat tells).

use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::fd::AsRawFd;

/// Fills every hole of the regular file `file` (`size` bytes long, of
/// which the host reports `allocated` bytes allocated: `st_blocks * 512`).
/// Fails with an `ErrorKind::StorageFull` error whose message names the
/// shortfall if the host file system has no room for them.
///
/// The test is the allocated size, not `SEEK_HOLE`: ext4 and tmpfs report
/// preallocated (unwritten) ranges as holes to `SEEK_HOLE`, though a store
/// there needs no new space, so `SEEK_HOLE` would call every fresh image
/// sparse. The caller already has `st_blocks` from its `fstat`, so a whole
/// image costs no system call at all.
pub fn fill_holes(file: &File, size: u64, allocated: u64) -> std::io::Result<()> {
    if allocated >= size {
        return Ok(());
    }
    let fd = file.as_raw_fd();
    let Ok(end) = libc::off_t::try_from(size) else {
        return Ok(());
    };
    let missing = size - allocated;
    let free = free_bytes(fd);
    let short = |free: u64| {
        Error::new(
            ErrorKind::StorageFull,
            format!(
                "the image file is sparse ({missing} of its bytes are holes, as a sparse copy leaves them) and the host file system has {free} bytes free: {} more bytes are needed to mount it read-write (a read-only mount works)",
                missing.saturating_sub(free).max(1)
            ),
        )
    };
    // Refused up front only when even the blocks reserved for root would
    // not do (a root writer may use them; fallocate tells in the end), so
    // that a hopeless attempt does not leave the host fuller.
    if let Some((_, all)) = free
        && all < missing
    {
        return Err(short(all));
    }
    // SAFETY: plain FFI call on a descriptor the caller owns; no memory.
    // Mode 0 allocates the holes and leaves data already there untouched
    // (glibc emulates it by writing where the host lacks fallocate).
    let rc = unsafe { libc::posix_fallocate(fd, 0, end) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC => Err(short(free.map_or(0, |(avail, _)| avail))),
        rc => Err(Error::from_raw_os_error(rc)),
    }
}

/// Bytes the file's host file system has free: (for an unprivileged
/// writer, in all), if it says.
pub(crate) fn free_bytes(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstatvfs writes only into `st`, a local.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatvfs(fd, &mut st) } != 0 {
        return None;
    }
    let (avail, all, unit): (u64, u64, u64) = (st.f_bavail, st.f_bfree, st.f_frsize);
    Some((avail.saturating_mul(unit), all.saturating_mul(unit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn punch(file: &File, off: i64, len: i64) -> bool {
        // SAFETY: plain FFI call on a descriptor the test owns.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        rc == 0
    }

    fn allocated(file: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        file.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn holes_are_filled() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, vec![7u8; 64 << 10]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        if !punch(&f, 8 << 10, 16 << 10) || !punch(&f, 60 << 10, 4 << 10) {
            return ulfs_testkit::skip::skip(
                "holes_are_filled",
                "the temp dir's file system cannot punch holes",
            );
        }
        assert!(allocated(&f) <= 44 << 10);
        fill_holes(&f, 64 << 10, allocated(&f)).unwrap();
        assert!(allocated(&f) >= 64 << 10);
        let back = std::fs::read(&p).unwrap();
        assert_eq!(&back[..8 << 10], &[7u8; 8 << 10][..]);
        assert!(back[8 << 10..24 << 10].iter().all(|&b| b == 0));
        assert_eq!(&back[24 << 10..60 << 10], &vec![7u8; 36 << 10][..]);
    }
}

//! The host's page cache as tests of the memory budget see it: how many
//! pages of a file are resident (mincore(2) on a mapping of our own), and
//! dropping them all first so a test starts as a fresh process would.

use std::os::fd::AsRawFd;
use std::path::Path;

/// Pages of the file at `path` in the host's page cache.
pub fn resident_pages(path: &Path) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0;
    }
    // SAFETY: a private read-only mapping of `len` bytes of an open file,
    // never read through: mincore only asks the kernel about its pages.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        at,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    let mut vec = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `at` is a live mapping of `len` bytes and `vec` holds one
    // byte per page of it; it is unmapped once, after.
    let r = unsafe { libc::mincore(at, len, vec.as_mut_ptr()) };
    let e = std::io::Error::last_os_error();
    // SAFETY: as above.
    unsafe { libc::munmap(at, len) };
    assert_eq!(r, 0, "mincore: {e}");
    vec.iter().filter(|v| *v & 1 != 0).count()
}

/// Writes the file's dirty pages out and drops all its pages from the
/// page cache (those no process maps).
pub fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: an fd call that touches no memory.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

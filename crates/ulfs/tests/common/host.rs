//! Host-side misfortune for the host-fault tests (of the ulfs crate and of
//! the CLI, which includes this file by path): a small tmpfs to fill, a
//! sparse copy made the way `fallocate -d` makes it.

#![allow(dead_code)]

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A tmpfs of a given size mounted on a temporary directory; unmounted on
/// drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts one, or says why it cannot (not root, no mount permission).
    pub fn mount(bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let opts = CString::new(format!("size={bytes}")).unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the
        // call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot mount a tmpfs (needs root): {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file of zeros until the tmpfs is full.
    pub fn fill(&self) {
        let mut f = File::create(self.path().join("fill")).unwrap();
        let chunk = vec![0u8; 1 << 16];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }

    /// Frees what `fill` took.
    pub fn unfill(&self) {
        std::fs::remove_file(self.path().join("fill")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Punches a hole over every all-zero 4 KiB block of `path`, as
/// `fallocate -d`, `cp --sparse=always`, `rsync -S` and `tar -S` leave a
/// copy. Returns the bytes now in holes (0 if the host cannot punch).
pub fn make_sparse(path: &Path) -> u64 {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut block = vec![0u8; 4096];
    let mut off = 0i64;
    let mut punched = 0;
    loop {
        let n = f.read(&mut block).unwrap();
        if n == 0 {
            break;
        }
        if n == block.len() && block.iter().all(|&b| b == 0) {
            // SAFETY: plain FFI call on a descriptor we own.
            let rc = unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    4096,
                )
            };
            if rc != 0 {
                return 0;
            }
            punched += 4096;
        }
        off += n as i64;
    }
    punched
}

/// Bytes of `path` the host has allocated (`st_blocks * 512`; SEEK_HOLE
/// cannot tell, as it calls preallocated ranges holes on ext4 and tmpfs).
pub fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

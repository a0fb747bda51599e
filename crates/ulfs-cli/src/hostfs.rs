//! Host-side file system helpers for import and export: timestamps with
//! nanoseconds, symlink-safe attribute changes and sparse-file discovery.
//!
//! std has no `lutimes` and no SEEK_DATA/SEEK_HOLE, which import and export
//! need to keep times exact and holes as holes; the few libc calls that
//! fill those gaps are kept here, behind safe functions.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use ulfs::Timespec;

/// `[atime, mtime]` of host metadata, in the order utimensat wants.
pub fn times_of(meta: &Metadata) -> [Timespec; 2] {
    [
        Timespec {
            sec: meta.atime(),
            nsec: meta.atime_nsec(),
        },
        Timespec {
            sec: meta.mtime(),
            nsec: meta.mtime_nsec(),
        },
    ]
}

/// Set atime and mtime of `path` itself (a symlink is not followed).
pub fn set_times(path: &Path, times: [Timespec; 2]) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let ts = times.map(|t| libc::timespec {
        tv_sec: t.sec as _,
        tv_nsec: t.nsec as _,
    });
    // SAFETY: `c` is a NUL-terminated path and `ts` two valid timespecs,
    // both alive for the duration of the call.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Byte ranges of `file` (of length `size`) that hold data, skipping holes.
/// Falls back to "all data" where the host file system cannot tell.
pub fn data_segments(file: &File, size: u64) -> io::Result<Vec<(u64, u64)>> {
    let fd = file.as_raw_fd();
    let mut segments = Vec::new();
    let mut off = 0u64;
    while off < size {
        let Some(start) = seek(fd, off, libc::SEEK_DATA)? else {
            break;
        };
        if start >= size {
            break;
        }
        let end = seek(fd, start, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
        if end <= start {
            // Inconsistent answers (a file changing under us): copy the rest.
            segments.push((start, size));
            break;
        }
        segments.push((start, end));
        off = end;
    }
    Ok(segments)
}

/// lseek that reports "no more data" (ENXIO) as `None` and treats a file
/// system without SEEK_DATA support (EINVAL) as one big data segment.
fn seek(fd: libc::c_int, off: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off_t =
        libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: lseek on a descriptor we own (borrowed from a live `File`).
    let r = unsafe { libc::lseek(fd, off_t, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(off)),
        Some(libc::EINVAL) => Ok(Some(u64::MAX)),
        _ => Err(err),
    }
}

/// Remove whatever non-directory is at `path` so a new entry can take its
/// place without writing through an old symlink or hard link.
pub fn remove_non_dir(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => Err(io::Error::from_raw_os_error(libc::EISDIR)),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Changing owners needs privileges; only root can restore them.
pub fn can_chown() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn segments_cover_written_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let f = File::create(&path).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", 16 << 20).unwrap();
        let size = f.metadata().unwrap().len();
        let segs = data_segments(&f, size).unwrap();
        assert!(segs.first().is_some_and(|s| s.0 == 0 && s.1 >= 4));
        assert!(segs.last().is_some_and(|s| s.0 <= 16 << 20 && s.1 == size));
        let covered: u64 = segs.iter().map(|(a, b)| b - a).sum();
        assert!(covered <= size);
    }

    #[test]
    fn set_times_keeps_nanoseconds_on_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink("nowhere", &link).unwrap();
        let t = [
            Timespec {
                sec: 1_000_000_000,
                nsec: 123,
            },
            Timespec {
                sec: 1_234_567_890,
                nsec: 987_654_321,
            },
        ];
        set_times(&link, t).unwrap();
        let m = std::fs::symlink_metadata(&link).unwrap();
        assert_eq!(times_of(&m), t);
    }
}

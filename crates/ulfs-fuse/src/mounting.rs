//! Putting the FUSE connection on the mount point and taking it off.
//!
//! As root the server mounts itself: it opens /dev/fuse and calls
//! mount(2) with the type `fuse.ulfs`, and hands the descriptor to
//! `fuser::Session::from_fd`, so fuser owns no mount. fuser's own mount
//! (`Session::new`) unmounts by path when its session is dropped, and a
//! session ends as soon as the kernel's unmount has sent DESTROY, before
//! the connection is marked dead: its check passes, and `umount2(path)`
//! then unmounts whatever is mounted there now (the file system the ulfs
//! mount was stacked on: seen in review, its files gone from view). Other
//! users go through fusermount3 (via `Session::new`), which refuses to
//! unmount anything but a FUSE mount of the same user.
//!
//! Unmounting on a signal is lazy (MNT_DETACH, `fusermount3 -u -z`): a
//! plain unmount fails while files are open and the signal would be lost;
//! detached, the mount is gone from view at once and the session ends,
//! committing everything, when the last open file is closed.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The mount flags and options of `cfg`, as mount(2) takes them.
pub struct KernelMount {
    pub flags: libc::c_ulong,
    pub allow_other: bool,
}

/// Mounts a new FUSE connection of type `fuse.ulfs` on `mountpoint` as
/// root; returns the /dev/fuse descriptor for `Session::from_fd`.
pub fn mount_as_root(
    source: &Path,
    mountpoint: &Path,
    km: &KernelMount,
) -> Result<OwnedFd, String> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e} (is the fuse module loaded?)"))?;
    let fd: OwnedFd = dev.into();
    use std::os::fd::AsRawFd;
    let mut data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,default_permissions",
        fd.as_raw_fd()
    );
    if km.allow_other {
        data.push_str(",allow_other");
    }
    let c = |p: &[u8]| CString::new(p).map_err(|_| "a path with a NUL byte".to_string());
    let (src, dst) = (
        c(source.as_os_str().as_bytes())?,
        c(mountpoint.as_os_str().as_bytes())?,
    );
    let (fstype, data) = (c(b"fuse.ulfs")?, c(data.as_bytes())?);
    // SAFETY: every pointer is a valid NUL-terminated string that lives
    // across the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            fstype.as_ptr(),
            km.flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(format!(
            "cannot mount on {}: {}",
            mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

/// The FUSE mounts on `mountpoint` now, as their sources: the fifth,
/// ninth (type `fuse` or `fuse.*`) and tenth fields of
/// /proc/self/mountinfo, paths escaped as mountinfo escapes them.
fn fuse_sources_on(mountpoint: &Path) -> Vec<String> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let want_dir = escape(mountpoint);
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-")?;
            let fuse = f
                .get(sep + 1)
                .is_some_and(|t| *t == "fuse" || t.starts_with("fuse."));
            (f.get(4) == Some(&want_dir.as_str()) && fuse)
                .then(|| f.get(sep + 2).unwrap_or(&"").to_string())
        })
        .collect()
}

/// The source (for `ulfs mount`, the image's path) of the topmost FUSE
/// mount on `dir`, unescaped; None when there is none.
pub fn fuse_mount_source(dir: &Path) -> Option<std::path::PathBuf> {
    let src = fuse_sources_on(dir).pop()?;
    use std::os::unix::ffi::OsStringExt;
    Some(std::ffi::OsString::from_vec(unescape(&src)).into())
}

/// mountinfo's `\ooo` escapes undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = |c: u8| c.is_ascii_digit() && c < b'8';
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|&c| oct(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Whether a FUSE file system is mounted on `dir` now (a mount it is
/// stacked on, of another type, does not count).
pub fn is_fuse_mount(dir: &Path) -> bool {
    !fuse_sources_on(dir).is_empty()
}

/// Whether `mountpoint` is now a FUSE mount of `source`, so that an
/// unmount never reaches a mount that is not ours.
pub fn is_ours(source: &Path, mountpoint: &Path) -> bool {
    fuse_sources_on(mountpoint).contains(&escape(source))
}

/// mountinfo's escaping of space, tab, newline and backslash.
fn escape(p: &Path) -> String {
    let mut s = String::new();
    for &b in p.as_os_str().as_bytes() {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => s.push_str(&format!("\\{b:03o}")),
            _ => s.push(b as char),
        }
    }
    s
}

/// Detaches `mountpoint` if it is still our mount: as root with
/// umount2(MNT_DETACH), otherwise with `fusermount3 -u -z`.
pub fn detach(source: &Path, mountpoint: &Path) {
    if !is_ours(source, mountpoint) {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        if let Ok(dst) = CString::new(mountpoint.as_os_str().as_bytes()) {
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
        }
    } else {
        let _ = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(mountpoint)
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_go_there_and_back() {
        for p in [
            "/plain/path",
            "/with space/and\\backslash",
            "/tab\there",
            "/new\nline",
        ] {
            let p = Path::new(p);
            assert_eq!(
                unescape(&escape(p)),
                p.as_os_str().as_bytes(),
                "{}",
                p.display()
            );
        }
        assert_eq!(unescape("/a\\040b"), b"/a b");
        // Not an escape: left as it is.
        assert_eq!(unescape("/a\\9x"), b"/a\\9x");
    }
}

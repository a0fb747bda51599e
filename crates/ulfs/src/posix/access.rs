//! `access(2)` and `faccessat2(2)`. For a verified caller (a server's
//! client) this is one more call judged by `perm`, for the ids the kernel
//! gave. For the host process, whose other calls are privileged (a
//! library has no other user to protect the image from), it is the one
//! place permission bits are judged, because programs ask `access` to
//! decide what to do (`test -w`, `shutil.which`, Python's `os.access`):
//! it answers as the kernel would for the process's user, the real ids by
//! default, the effective ids with `AT_EACCESS`, supplementary groups
//! included, root's overrides as `CAP_DAC_OVERRIDE` gives them. For the
//! host, only the file itself is judged, not the directories the walk
//! crosses.

use super::calls::{Ctx, p};
use super::perm::{self, Creds};
use crate::errno::{Errno, Result};
use crate::types::Fd;

/// The host process's real ids (or effective, with `effective`) and its
/// supplementary groups, as `access` judges them.
fn host_creds(effective: bool) -> Creds {
    // SAFETY: these four calls take no arguments and cannot fail.
    let (uid, gid) = unsafe {
        if effective {
            (libc::geteuid(), libc::getegid())
        } else {
            (libc::getuid(), libc::getgid())
        }
    };
    // SAFETY: with a size of 0, getgroups only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
    // SAFETY: `groups` has room for `n` entries.
    let n = unsafe { libc::getgroups(n.max(0), groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    Creds::new(uid, gid, groups)
}

impl Ctx<'_> {
    pub fn access(&mut self, path: impl AsRef<[u8]>, mode: i32) -> Result<()> {
        self.faccessat(libc::AT_FDCWD, path, mode, 0)
    }

    /// `faccessat2(2)` (plain `faccessat` is this with flags 0): `mode` is
    /// `F_OK` or any of `R_OK | W_OK | X_OK`; flags `AT_EACCESS`,
    /// `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`. Write permission on a
    /// read-only volume is EROFS, as on a read-only mount, and is asked
    /// before the bits are.
    pub fn faccessat(
        &mut self,
        dirfd: Fd,
        path: impl AsRef<[u8]>,
        mode: i32,
        flags: i32,
    ) -> Result<()> {
        if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
            return Err(Errno::EINVAL);
        }
        super::calls::check_flags(
            flags,
            libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH,
        )?;
        let ino = self.resolve_at(
            dirfd,
            p(&path),
            flags & libc::AT_SYMLINK_NOFOLLOW == 0,
            flags & libc::AT_EMPTY_PATH != 0,
        )?;
        if mode == libc::F_OK {
            return Ok(());
        }
        // The kernel asks the superblock first (sb_permission), then the
        // inode's bits.
        if mode & libc::W_OK != 0 && self.vol.is_read_only() {
            return Err(Errno::EROFS);
        }
        let st = self.vol.stat_ino(ino)?;
        // A verified caller is judged by the ids the kernel gave for it,
        // which are its effective ones (SO_PEERCRED): AT_EACCESS or not.
        let allowed = match self.proc.creds() {
            Some(who) => perm::permitted(&st, mode, who),
            None => perm::permitted(&st, mode, &host_creds(flags & libc::AT_EACCESS != 0)),
        };
        if !allowed {
            return Err(Errno::EACCES);
        }
        Ok(())
    }
}

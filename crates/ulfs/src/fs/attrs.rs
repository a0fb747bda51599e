//! Attribute changes as typed calls that carry POSIX's rules: mode, owner
//! (with the set-ID bits a change of owner drops) and times. The posix
//! layer (chmod, chown, utimensat and their forms) and the FUSE adapter
//! (setattr) both come here, so the rules live in one place instead of
//! in a closure over the raw inode at each caller. Permission checks are
//! the caller's: the library treats its caller as privileged, the kernel
//! checks for a FUSE mount (`default_permissions`).

use super::Volume;
use crate::errno::{Errno, Result};
use crate::types::{Ino, Timespec};

/// What to do with one timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// Leave it (UTIME_OMIT).
    Omit,
    /// The current time (UTIME_NOW).
    Now,
    /// This time.
    At(Timespec),
}

impl Volume {
    /// `chmod`: the permission bits (07777) become `mode`'s; the type
    /// stays. A symlink's mode means nothing: EOPNOTSUPP, as Linux's
    /// `fchmodat2(AT_SYMLINK_NOFOLLOW)`.
    pub fn set_mode(&mut self, ino: Ino, mode: u32) -> Result<()> {
        if self.stat_ino(ino)?.is_symlink() {
            return Err(Errno::EOPNOTSUPP);
        }
        self.setattr(ino, |i| i.mode = (i.mode & libc::S_IFMT) | (mode & 0o7777))
    }

    /// `chown`: `None` leaves an id as it is. Linux's `chown_common` for
    /// a caller with CAP_FSETID: any chown of something other than a
    /// directory drops set-user-ID, and set-group-ID when group execute is
    /// set (without it, the bit marks mandatory locking and stays).
    pub fn set_owner(&mut self, ino: Ino, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        self.setattr(ino, |i| {
            if let Some(uid) = uid {
                i.uid = uid;
            }
            if let Some(gid) = gid {
                i.gid = gid;
            }
            if i.mode & libc::S_IFMT != libc::S_IFDIR {
                i.mode &= !libc::S_ISUID;
                if i.mode & libc::S_IXGRP != 0 {
                    i.mode &= !libc::S_ISGID;
                }
            }
        })
    }

    /// `utimensat`: atime and mtime set, to now or to a given time; ctime
    /// moves to now whenever anything is set. Both `Omit`: nothing
    /// changes, not even ctime. EINVAL for a nanosecond field out of range.
    pub fn set_times(&mut self, ino: Ino, atime: SetTime, mtime: SetTime) -> Result<()> {
        for t in [atime, mtime] {
            if let SetTime::At(t) = t
                && !(0..1_000_000_000).contains(&t.nsec)
            {
                return Err(Errno::EINVAL);
            }
        }
        if atime == SetTime::Omit && mtime == SetTime::Omit {
            return Ok(());
        }
        let now = self.now();
        let pick = |t: SetTime, old: Timespec| match t {
            SetTime::Omit => old,
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        self.setattr(ino, |i| {
            i.atime = pick(atime, i.atime);
            i.mtime = pick(mtime, i.mtime);
        })
    }

    /// The generation of `ino`: with the inode number, a name for the
    /// file that a reused slot does not share (FUSE and NFS handles).
    pub fn generation(&self, ino: Ino) -> Result<u32> {
        Ok(self.inode(ino)?.generation)
    }
}

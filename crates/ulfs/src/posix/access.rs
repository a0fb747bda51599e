//! `access(2)` and `faccessat2(2)`: the one place where the library judges
//! permission bits. Every other call treats its caller as privileged (a
//! library has no other user to protect the image from), but programs ask
//! `access` to decide what to do (`test -w`, `shutil.which`, Python's
//! `os.access`), so it answers as the kernel would for the process's
//! user: the real ids by default, the effective ids with `AT_EACCESS`,
//! supplementary groups included, root's overrides as `CAP_DAC_OVERRIDE`
//! gives them. Only the file itself is judged: the walk to it does not
//! check search permission on the directories it crosses (no ulfs walk
//! does).

use super::calls::{Ctx, p};
use crate::errno::{Errno, Result};
use crate::types::{Fd, Stat};

/// The ids a check is made for.
struct Who {
    uid: u32,
    gid: u32,
}

impl Who {
    fn of_process(effective: bool) -> Who {
        // SAFETY: these four calls take no arguments and cannot fail.
        unsafe {
            if effective {
                Who {
                    uid: libc::geteuid(),
                    gid: libc::getegid(),
                }
            } else {
                Who {
                    uid: libc::getuid(),
                    gid: libc::getgid(),
                }
            }
        }
    }

    /// Whether the process is in group `gid` (primary or supplementary).
    fn in_group(&self, gid: u32) -> bool {
        if gid == self.gid {
            return true;
        }
        // SAFETY: with a size of 0, getgroups only returns the count.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        if n <= 0 {
            return false;
        }
        let mut groups = vec![0 as libc::gid_t; n as usize];
        // SAFETY: `groups` has room for `n` entries.
        let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
        n > 0 && groups[..n as usize].contains(&gid)
    }
}

/// The kernel's `generic_permission` for `want` (R_OK | W_OK | X_OK bits)
/// on `st`, for `who`.
fn permitted(st: &Stat, want: i32, who: &Who) -> bool {
    let want = want as u32 & 0o7;
    if who.uid == 0 {
        // CAP_DAC_OVERRIDE: read and write always; execute only where some
        // execute bit is set, or on a directory (search).
        return want & 0o1 == 0 || st.is_dir() || st.mode & 0o111 != 0;
    }
    let bits = if st.uid == who.uid {
        st.mode >> 6
    } else if who.in_group(st.gid) {
        st.mode >> 3
    } else {
        st.mode
    } & 0o7;
    bits & want == want
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
        if !permitted(&st, mode, &Who::of_process(flags & libc::AT_EACCESS != 0)) {
            return Err(Errno::EACCES);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(mode: u32, uid: u32, gid: u32) -> Stat {
        Stat {
            mode,
            uid,
            gid,
            ..Default::default()
        }
    }

    #[test]
    fn owner_group_and_other_bits_are_judged_in_that_order() {
        let me = Who {
            uid: 1000,
            gid: 1000,
        };
        let f = |mode, uid, gid| st(libc::S_IFREG | mode, uid, gid);
        // Owner bits decide for the owner, even when others may do more.
        assert!(!permitted(&f(0o077, 1000, 1000), libc::R_OK, &me));
        assert!(permitted(&f(0o600, 1000, 0), libc::R_OK | libc::W_OK, &me));
        // Group bits for a member of the file's group.
        assert!(permitted(&f(0o040, 0, 1000), libc::R_OK, &me));
        assert!(!permitted(&f(0o004, 0, 1000), libc::R_OK, &me));
        // Other bits for everyone else.
        assert!(permitted(&f(0o001, 0, 0), libc::X_OK, &me));
        assert!(!permitted(&f(0o001, 0, 0), libc::X_OK | libc::R_OK, &me));
    }

    #[test]
    fn root_may_read_and_write_anything_but_execute_only_with_a_bit() {
        let root = Who { uid: 0, gid: 0 };
        let f = st(libc::S_IFREG, 5, 5);
        assert!(permitted(&f, libc::R_OK | libc::W_OK, &root));
        assert!(!permitted(&f, libc::X_OK, &root));
        assert!(permitted(
            &st(libc::S_IFREG | 0o010, 5, 5),
            libc::X_OK,
            &root
        ));
        assert!(permitted(&st(libc::S_IFDIR, 5, 5), libc::X_OK, &root));
    }
}

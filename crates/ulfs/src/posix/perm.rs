//! Linux's permission rules, as pure functions of a file's attributes
//! (`Stat`) and the caller's credentials (`Creds`): no I/O, no system
//! call, so the same answer comes out wherever the call is judged.
//!
//! Who needs them: the in-process library (`Fs`) serves one process,
//! which already owns the image file; protecting the image from that
//! process is impossible (it can write the file directly) and pointless,
//! so the library treats its host as privileged and judges permission
//! bits only where a program asks (`access`). A server (`ulfs serve`)
//! holds the image for many client processes of possibly different
//! users, and must refuse what the kernel would refuse each of them. It
//! gets each client's effective ids and groups from the kernel
//! (`SO_PEERCRED`, `SO_PEERGROUPS` on the client's socket), never from
//! the client, and judges every call with these functions.
//!
//! Each function mirrors one kernel function (fs/namei.c, fs/attr.c,
//! fs/inode.c, fs/open.c, fs/utimes.c; Linux 6.x), with the kernel's
//! errno and, where a call makes several checks, its order:
//!
//! | ulfs                          | kernel                                          | errno  |
//! |-------------------------------|-------------------------------------------------|--------|
//! | [`permitted`], [`may_access`] | `generic_permission` (+ `acl_permission_check`) | EACCES |
//! | [`may_lookup`]                | `may_lookup` (X on each directory crossed)      | EACCES |
//! | [`may_create`]                | `may_create` (W+X on the parent)                | EACCES |
//! | [`may_delete`]                | `may_delete` + `check_sticky`/`__check_sticky`  | EACCES, EPERM, EISDIR, ENOTDIR |
//! | [`may_rename_dir_to_new_parent`] | `vfs_rename`'s W on a moved directory        | EACCES |
//! | [`open_access`]               | `may_open` (permission part), `build_open_flags`| EACCES, EPERM |
//! | [`chmod_mode`]                | `setattr_prepare` (ATTR_MODE), `in_group_or_capable` | EPERM |
//! | [`check_chown`]               | `chown_ok`, `chgrp_ok`                          | EPERM  |
//! | [`check_set_times`]           | `vfs_utimes` + `setattr_prepare`/`notify_change` (ATTR_TIMES_SET, ATTR_TOUCH) | EPERM, EACCES |
//! | [`new_node_mode`]             | `vfs_prepare_mode`, `mode_strip_sgid`, `inode_init_owner` | - |
//! | [`new_node_owner`]            | `inode_init_owner`                              | -      |
//! | [`mode_after_write`]          | `file_remove_privs`, `setattr_should_drop_suidgid`, `setattr_should_drop_sgid` | - |
//! | [`check_hardlink`]            | `may_linkat`, `safe_hardlink_source`            | EPERM  |
//!
//! Root is uid 0 with the capabilities the root user has: CAP_DAC_OVERRIDE
//! and CAP_DAC_READ_SEARCH (bits), CAP_FOWNER (acts as any file's owner),
//! CAP_CHOWN, CAP_FSETID (keeps set-ID bits). The kernel checks the
//! filesystem ids (fsuid, fsgid), which are the effective ids unless a
//! program calls setfsuid; `SO_PEERCRED` reports the effective ids.
//!
//! Not here: ACLs (ulfs has none), file attributes (immutable,
//! append-only: none either), read-only mounts (EROFS is the volume's
//! answer), and the type checks that come before permission (ELOOP on a
//! symlink, EISDIR on opening a directory for writing: the calls make
//! them, as `open_checks` does).

use crate::errno::{Errno, Result};
use crate::types::Stat;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_IFREG: u32 = libc::S_IFREG;
const S_ISUID: u32 = libc::S_ISUID;
const S_ISGID: u32 = libc::S_ISGID;
const S_ISVTX: u32 = libc::S_ISVTX;
const S_IXGRP: u32 = libc::S_IXGRP;
const S_IXUGO: u32 = 0o111;

/// The ids a call is judged for: what the kernel verified of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creds {
    uid: u32,
    gid: u32,
    /// Supplementary groups, sorted and without duplicates.
    groups: Box<[u32]>,
}

impl Creds {
    /// Credentials for (effective) `uid` and `gid` with supplementary
    /// `groups` (any order; duplicates and the primary group allowed).
    pub fn new(uid: u32, gid: u32, groups: impl Into<Vec<u32>>) -> Creds {
        let mut groups = groups.into();
        groups.sort_unstable();
        groups.dedup();
        Creds {
            uid,
            gid,
            groups: groups.into_boxed_slice(),
        }
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }

    pub fn gid(&self) -> u32 {
        self.gid
    }

    pub fn groups(&self) -> &[u32] {
        &self.groups
    }

    /// Whether the caller is in group `gid`, primary or supplementary
    /// (the kernel's `in_group_p`).
    pub fn in_group(&self, gid: u32) -> bool {
        gid == self.gid || self.groups.binary_search(&gid).is_ok()
    }

    /// uid 0: every capability the checks here consult.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Owner of `st`, or root (CAP_FOWNER): `inode_owner_or_capable`.
    fn owner_or_root(&self, st: &Stat) -> bool {
        st.uid == self.uid || self.is_root()
    }
}

/// `generic_permission`: whether `creds` may have `want` (any of `R_OK`,
/// `W_OK`, `X_OK`; for a directory X is search) on `st`. The class is
/// chosen first, then only its bits count: the owner is judged by the
/// owner bits even where the group or other bits allow more, and a
/// member of the file's group by the group bits even where the other
/// bits allow more. Root may read and write anything and search any
/// directory, but execute a file only when some execute bit is set.
pub fn permitted(st: &Stat, want: i32, creds: &Creds) -> bool {
    let want = want as u32 & 0o7;
    if creds.is_root() {
        // CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
        return want & 0o1 == 0 || st.is_dir() || st.mode & S_IXUGO != 0;
    }
    let bits = if st.uid == creds.uid {
        st.mode >> 6
    } else if creds.in_group(st.gid) {
        st.mode >> 3
    } else {
        st.mode
    } & 0o7;
    bits & want == want
}

/// [`permitted`] as a call's check: EACCES when not (`faccessat`,
/// `truncate` by path with `W_OK`, `chdir` with `X_OK`).
pub fn may_access(st: &Stat, want: i32, creds: &Creds) -> Result<()> {
    if permitted(st, want, creds) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// `may_lookup`: search permission on directory `dir`, which a walk needs
/// before it looks up a name in it (every directory of a path, the last
/// one's parent included, whatever the call then does with the name).
pub fn may_lookup(dir: &Stat, creds: &Creds) -> Result<()> {
    may_access(dir, libc::X_OK, creds)
}

/// `may_create`: write and search permission on the directory a new name
/// goes into (mkdir, mknod, symlink, link, open with O_CREAT of a missing
/// name, rename's target when it does not exist). The kernel says EEXIST
/// for a name that exists before it asks this.
pub fn may_create(dir: &Stat, creds: &Creds) -> Result<()> {
    may_access(dir, libc::W_OK | libc::X_OK, creds)
}

/// `may_delete`: whether `victim`, a name in `dir`, may be removed
/// (unlink, rmdir, rename's source, and the target a rename replaces).
/// `dir_op` says the call removes a directory: rmdir, or a rename whose
/// source is a directory. In the kernel's order: write and search on
/// `dir` (EACCES); then in a sticky directory, only the victim's owner,
/// the directory's owner or root (EPERM, before any type check); then
/// the type (ENOTDIR for a directory call on a non-directory, EISDIR for
/// the other way round).
pub fn may_delete(dir: &Stat, victim: &Stat, dir_op: bool, creds: &Creds) -> Result<()> {
    may_access(dir, libc::W_OK | libc::X_OK, creds)?;
    // check_sticky: CAP_FOWNER overrides it.
    if dir.mode & S_ISVTX != 0
        && victim.uid != creds.uid
        && dir.uid != creds.uid
        && !creds.is_root()
    {
        return Err(Errno::EPERM);
    }
    match (dir_op, victim.is_dir()) {
        (true, false) => Err(Errno::ENOTDIR),
        (false, true) => Err(Errno::EISDIR),
        _ => Ok(()),
    }
}

/// `vfs_rename`: a directory moved to another parent needs write
/// permission on itself, since its `..` entry changes. Checked after
/// [`may_delete`] on the source and [`may_create`] / [`may_delete`] on
/// the target; not for a rename within one directory.
pub fn may_rename_dir_to_new_parent(moved_dir: &Stat, creds: &Creds) -> Result<()> {
    may_access(moved_dir, libc::W_OK, creds)
}

/// `may_open`'s permission part, for an existing file (a file this very
/// open created is not checked: the kernel drops `acc_mode` for it).
/// Read and/or write by `O_ACCMODE` (the invalid mode 3 asks both, as
/// the kernel's `ACC_MODE` table does), write for `O_TRUNC` whatever the
/// access mode (EACCES); then `O_NOATIME` is for the owner or root only
/// (EPERM). `O_PATH` opens check nothing.
pub fn open_access(st: &Stat, flags: i32, creds: &Creds) -> Result<()> {
    if flags & libc::O_PATH != 0 {
        return Ok(());
    }
    let mut want = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => libc::R_OK,
        libc::O_WRONLY => libc::W_OK,
        _ => libc::R_OK | libc::W_OK,
    };
    if flags & libc::O_TRUNC != 0 {
        want |= libc::W_OK;
    }
    may_access(st, want, creds)?;
    if flags & libc::O_NOATIME != 0 && !creds.owner_or_root(st) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `chmod`/`fchmod`/`fchmodat` (`setattr_prepare` with ATTR_MODE): only
/// the owner or root may (EPERM). Returns the permission bits to store
/// (`new_mode & 0o7777`), without S_ISGID when the caller is neither in
/// the file's group nor root: otherwise anyone could make a file run
/// with a group they do not have.
pub fn chmod_mode(st: &Stat, new_mode: u32, creds: &Creds) -> Result<u32> {
    if !creds.owner_or_root(st) {
        return Err(Errno::EPERM);
    }
    let mode = new_mode & 0o7777;
    // in_group_or_capable (CAP_FSETID) on the file's own group.
    if !creds.in_group(st.gid) && !creds.is_root() {
        return Ok(mode & !S_ISGID);
    }
    Ok(mode)
}

/// `chown`/`fchown`/`fchownat`/`lchown` (`chown_ok`, `chgrp_ok`), with
/// `None` for -1 (leave as is). A uid given needs root, unless it is the
/// file's own uid and the caller its owner; a gid given needs root, or
/// the owner giving the file its own group or one the caller is in.
/// So a non-owner is refused even a no-op change; `chown(f, -1, -1)` is
/// allowed to anyone (it only changes ctime). EPERM.
pub fn check_chown(st: &Stat, uid: Option<u32>, gid: Option<u32>, creds: &Creds) -> Result<()> {
    if creds.is_root() {
        return Ok(());
    }
    let owner = st.uid == creds.uid;
    let uid_ok = uid.is_none_or(|u| owner && u == st.uid);
    let gid_ok = gid.is_none_or(|g| owner && (g == st.gid || creds.in_group(g)));
    if uid_ok && gid_ok {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

/// `utimensat`/`futimens`/`utimes`. `explicit` is false only when the
/// call sets both times to the current time (NULL times, or both
/// `UTIME_NOW`: `vfs_utimes` then asks ATTR_TOUCH): the owner, root or
/// anyone with write permission may (EACCES). Any other request,
/// including one `UTIME_NOW` with one `UTIME_OMIT`, is explicit
/// (ATTR_TIMES_SET) and needs the owner or root (EPERM). Both
/// `UTIME_OMIT` succeeds before any check, even of the path.
pub fn check_set_times(st: &Stat, explicit: bool, creds: &Creds) -> Result<()> {
    if creds.owner_or_root(st) {
        return Ok(());
    }
    if explicit {
        return Err(Errno::EPERM);
    }
    may_access(st, libc::W_OK, creds)
}

/// The mode a new node gets (`vfs_prepare_mode` + `inode_init_owner`),
/// given the mode asked for: its type (`S_IFDIR` for mkdir, `S_IFREG`
/// for open and creat, mknod's type) and permission bits, before the
/// umask. The umask is applied to the result (the kernel strips S_ISGID
/// before it masks, so the group-execute test sees what was asked; the
/// umask cannot touch the set-ID bits).
///
/// - A directory keeps `0o1777` of what it asked (mkdir drops set-ID
///   bits), and takes S_ISGID from a set-group-ID parent.
/// - Any other node loses S_ISGID under `mode_strip_sgid` (fs/inode.c):
///   only when it asks both S_ISGID and S_IXGRP, its parent is
///   set-group-ID (so the node gets the parent's group), and the caller
///   is neither in the parent's group nor root. A node made in a plain
///   directory gets the caller's own group, and keeps what it asked.
pub fn new_node_mode(dir: &Stat, mode: u32, creds: &Creds) -> u32 {
    let dir_sgid = dir.mode & S_ISGID != 0;
    if mode & S_IFMT == S_IFDIR {
        let mode = mode & (S_IFMT | 0o1777);
        return if dir_sgid { mode | S_ISGID } else { mode };
    }
    if mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP
        && dir_sgid
        && !creds.in_group(dir.gid)
        && !creds.is_root()
    {
        return mode & !S_ISGID;
    }
    mode
}

/// Owner and group of a new node in `dir` (`inode_init_owner`): the
/// caller's uid; the directory's group when the directory is
/// set-group-ID, else the caller's gid. The flag says the directory is
/// set-group-ID, which a new subdirectory inherits ([`new_node_mode`]
/// adds it).
pub fn new_node_owner(dir: &Stat, creds: &Creds) -> (u32, u32, bool) {
    if dir.mode & S_ISGID != 0 {
        (creds.uid, dir.gid, true)
    } else {
        (creds.uid, creds.gid, false)
    }
}

/// The mode a regular file gets when `creds` writes to it or truncates
/// it (`file_remove_privs`, `setattr_should_drop_suidgid`), or `None`
/// when it keeps its own. Only a regular file changes, never for root
/// (CAP_FSETID). S_ISUID always goes; S_ISGID goes when group-execute is
/// set, and (since Linux 6.2, `setattr_should_drop_sgid`) also without
/// it when the writer is not in the file's group. Not for a write of
/// nothing: the kernel returns before it gets here.
pub fn mode_after_write(st: &Stat, creds: &Creds) -> Option<u32> {
    if st.mode & S_IFMT != S_IFREG || creds.is_root() {
        return None;
    }
    let mut kill = st.mode & S_ISUID;
    if st.mode & S_ISGID != 0 && (st.mode & S_IXGRP != 0 || !creds.in_group(st.gid)) {
        kill |= S_ISGID;
    }
    (kill != 0).then_some(st.mode & !kill)
}

/// `may_linkat`: with `protected` (`/proc/sys/fs/protected_hardlinks`
/// set, as distributions do), a hard link to a file needs its owner or
/// root, or a "safe" source: a regular file, not set-user-ID, not
/// set-group-ID with group-execute, that the caller may both read and
/// write (EPERM). The kernel checks this before `may_create` on the new
/// name's directory.
pub fn check_hardlink(st: &Stat, protected: bool, creds: &Creds) -> Result<()> {
    if !protected || creds.owner_or_root(st) {
        return Ok(());
    }
    let safe = st.mode & S_IFMT == S_IFREG
        && st.mode & S_ISUID == 0
        && st.mode & (S_ISGID | S_IXGRP) != S_ISGID | S_IXGRP
        && permitted(st, libc::R_OK | libc::W_OK, creds);
    if safe { Ok(()) } else { Err(Errno::EPERM) }
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
    fn file(mode: u32, uid: u32, gid: u32) -> Stat {
        st(S_IFREG | mode, uid, gid)
    }
    fn dir(mode: u32, uid: u32, gid: u32) -> Stat {
        st(S_IFDIR | mode, uid, gid)
    }

    /// uid 1000, primary group 1000, also in 3000.
    fn me() -> Creds {
        Creds::new(1000, 1000, [3000, 1000, 3000])
    }
    fn root() -> Creds {
        Creds::new(0, 0, [])
    }

    const R: i32 = libc::R_OK;
    const W: i32 = libc::W_OK;
    const X: i32 = libc::X_OK;

    #[test]
    fn creds_sort_their_groups() {
        let c = Creds::new(5, 6, vec![9, 3, 9, 7]);
        assert_eq!(c.groups(), &[3, 7, 9]);
        assert!(c.in_group(6) && c.in_group(7) && !c.in_group(8));
        assert!(!c.is_root() && root().is_root());
    }

    #[test]
    fn owner_group_and_other_bits_are_judged_in_that_order() {
        let me = me();
        // Owner bits decide for the owner, even when others may do more.
        assert!(!permitted(&file(0o077, 1000, 1000), R, &me));
        assert!(permitted(&file(0o600, 1000, 0), R | W, &me));
        // Group bits for a member of the file's group (supplementary
        // too), even where the other bits allow more.
        assert!(permitted(&file(0o040, 0, 3000), R, &me));
        assert!(!permitted(&file(0o004, 0, 1000), R, &me));
        assert!(!permitted(&file(0o007, 0, 3000), R, &me));
        // Other bits for everyone else.
        assert!(permitted(&file(0o001, 0, 0), X, &me));
        assert!(!permitted(&file(0o001, 0, 0), X | R, &me));
        // F_OK asks nothing.
        assert!(permitted(&file(0, 0, 0), 0, &me));
    }

    #[test]
    fn root_may_read_and_write_anything_but_execute_only_with_a_bit() {
        let root = root();
        let f = file(0, 5, 5);
        assert!(permitted(&f, R | W, &root));
        assert!(!permitted(&f, X, &root));
        assert!(permitted(&file(0o010, 5, 5), X, &root));
        assert!(permitted(&dir(0, 5, 5), R | W | X, &root));
    }

    #[test]
    fn lookup_and_create_need_search_and_write() {
        let me = me();
        assert_eq!(may_lookup(&dir(0o600, 1000, 1000), &me), Err(Errno::EACCES));
        may_lookup(&dir(0o711, 0, 0), &me).unwrap();
        assert_eq!(may_create(&dir(0o755, 0, 0), &me), Err(Errno::EACCES));
        assert_eq!(may_create(&dir(0o300, 0, 3000), &me), Err(Errno::EACCES));
        may_create(&dir(0o030, 0, 3000), &me).unwrap();
        may_create(&dir(0, 0, 0), &root()).unwrap();
    }

    #[test]
    fn sticky_directories_keep_others_files() {
        let me = me();
        let tmp = dir(0o1777, 0, 0);
        may_delete(&tmp, &file(0o644, 1000, 0), false, &me).unwrap();
        assert_eq!(
            may_delete(&tmp, &file(0o666, 7, 7), false, &me),
            Err(Errno::EPERM)
        );
        // The sticky check comes before the type check.
        assert_eq!(
            may_delete(&tmp, &dir(0o777, 7, 7), false, &me),
            Err(Errno::EPERM)
        );
        // The directory's owner may remove anything in it; so may root.
        may_delete(&dir(0o1700, 1000, 0), &file(0, 7, 7), false, &me).unwrap();
        may_delete(&tmp, &file(0, 7, 7), false, &root()).unwrap();
        // Without the sticky bit, W+X on the directory is enough.
        may_delete(&dir(0o777, 0, 0), &file(0, 7, 7), false, &me).unwrap();
        assert_eq!(
            may_delete(&dir(0o555, 0, 0), &file(0o777, 1000, 0), false, &me),
            Err(Errno::EACCES)
        );
        // Type checks last.
        let mine = dir(0o777, 1000, 0);
        assert_eq!(may_delete(&mine, &mine, false, &me), Err(Errno::EISDIR));
        let f = file(0, 1000, 0);
        assert_eq!(may_delete(&mine, &f, true, &me), Err(Errno::ENOTDIR));
    }

    #[test]
    fn moving_a_directory_needs_write_on_it() {
        let me = me();
        assert_eq!(
            may_rename_dir_to_new_parent(&dir(0o555, 1000, 0), &me),
            Err(Errno::EACCES)
        );
        may_rename_dir_to_new_parent(&dir(0o755, 1000, 0), &me).unwrap();
        may_rename_dir_to_new_parent(&dir(0o555, 1000, 0), &root()).unwrap();
    }

    #[test]
    fn open_checks_access_mode_truncation_and_noatime() {
        let me = me();
        let theirs = file(0o644, 7, 7);
        open_access(&theirs, libc::O_RDONLY, &me).unwrap();
        for flags in [
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_ACCMODE,
            libc::O_RDONLY | libc::O_TRUNC,
        ] {
            assert_eq!(open_access(&theirs, flags, &me), Err(Errno::EACCES));
        }
        assert_eq!(
            open_access(&file(0o200, 1000, 0), libc::O_RDWR, &me),
            Err(Errno::EACCES)
        );
        open_access(&file(0, 1000, 0), libc::O_PATH, &me).unwrap();
        // O_NOATIME: owner or root; EACCES wins when both fail.
        let noatime = libc::O_RDONLY | libc::O_NOATIME;
        assert_eq!(open_access(&theirs, noatime, &me), Err(Errno::EPERM));
        open_access(&file(0o400, 1000, 0), noatime, &me).unwrap();
        open_access(&theirs, noatime, &root()).unwrap();
        assert_eq!(
            open_access(&file(0o600, 7, 7), noatime, &me),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn chmod_is_for_the_owner_and_guards_set_group_id() {
        let me = me();
        assert_eq!(
            chmod_mode(&file(0o644, 7, 7), 0o600, &me),
            Err(Errno::EPERM)
        );
        assert_eq!(
            chmod_mode(&file(0o644, 1000, 1000), S_IFREG | 0o2755, &me),
            Ok(0o2755)
        );
        assert_eq!(
            chmod_mode(&file(0o644, 1000, 3000), 0o2755, &me),
            Ok(0o2755)
        );
        // Not in the file's group: S_ISGID goes, S_ISUID stays.
        assert_eq!(chmod_mode(&file(0o644, 1000, 7), 0o6755, &me), Ok(0o4755));
        assert_eq!(chmod_mode(&file(0o644, 7, 7), 0o6755, &root()), Ok(0o6755));
    }

    #[test]
    fn chown_needs_root_except_for_an_owner_choosing_a_group() {
        let me = me();
        let mine = file(0o644, 1000, 1000);
        check_chown(&mine, None, None, &me).unwrap();
        check_chown(&mine, Some(1000), None, &me).unwrap();
        assert_eq!(check_chown(&mine, Some(1001), None, &me), Err(Errno::EPERM));
        check_chown(&mine, None, Some(3000), &me).unwrap();
        check_chown(&mine, Some(1000), Some(1000), &me).unwrap();
        assert_eq!(check_chown(&mine, None, Some(7), &me), Err(Errno::EPERM));
        // The owner may keep a group it is not in.
        check_chown(&file(0, 1000, 7), None, Some(7), &me).unwrap();
        // A non-owner may not even make a no-op change.
        let theirs = file(0o666, 7, 3000);
        assert_eq!(check_chown(&theirs, Some(7), None, &me), Err(Errno::EPERM));
        assert_eq!(
            check_chown(&theirs, None, Some(3000), &me),
            Err(Errno::EPERM)
        );
        check_chown(&theirs, None, None, &me).unwrap();
        check_chown(&theirs, Some(1), Some(2), &root()).unwrap();
    }

    #[test]
    fn times_now_need_write_explicit_times_need_the_owner() {
        let me = me();
        let writable = file(0o666, 7, 7);
        check_set_times(&writable, false, &me).unwrap();
        assert_eq!(check_set_times(&writable, true, &me), Err(Errno::EPERM));
        let readonly = file(0o444, 7, 7);
        assert_eq!(check_set_times(&readonly, false, &me), Err(Errno::EACCES));
        let mine = file(0o444, 1000, 7);
        check_set_times(&mine, true, &me).unwrap();
        check_set_times(&mine, false, &me).unwrap();
        check_set_times(&readonly, true, &root()).unwrap();
    }

    #[test]
    fn new_nodes_take_their_group_from_a_set_group_id_directory() {
        let me = me();
        let plain = dir(0o777, 0, 7);
        let sgid = dir(0o2777, 0, 7);
        assert_eq!(new_node_owner(&plain, &me), (1000, 1000, false));
        assert_eq!(new_node_owner(&sgid, &me), (1000, 7, true));
        // A subdirectory inherits S_ISGID; mkdir's own set-ID bits go.
        assert_eq!(new_node_mode(&sgid, S_IFDIR | 0o755, &me), S_IFDIR | 0o2755);
        assert_eq!(
            new_node_mode(&plain, S_IFDIR | 0o6755, &me),
            S_IFDIR | 0o755
        );
        assert_eq!(
            new_node_mode(&plain, S_IFDIR | 0o1777, &me),
            S_IFDIR | 0o1777
        );
        // A file asking S_ISGID|S_IXGRP where it would get a group the
        // caller is not in loses S_ISGID...
        assert_eq!(new_node_mode(&sgid, S_IFREG | 0o2755, &me), S_IFREG | 0o755);
        // ...but not without S_IXGRP, not for a member, not for root, and
        // not in a plain directory (the file gets the caller's group).
        assert_eq!(
            new_node_mode(&sgid, S_IFREG | 0o2745, &me),
            S_IFREG | 0o2745
        );
        let ours = dir(0o2777, 0, 3000);
        assert_eq!(
            new_node_mode(&ours, S_IFREG | 0o2755, &me),
            S_IFREG | 0o2755
        );
        assert_eq!(
            new_node_mode(&sgid, S_IFREG | 0o2755, &root()),
            S_IFREG | 0o2755
        );
        assert_eq!(
            new_node_mode(&plain, S_IFREG | 0o6755, &me),
            S_IFREG | 0o6755
        );
    }

    #[test]
    fn writing_kills_set_id_bits_for_everyone_but_root() {
        let me = me();
        assert_eq!(mode_after_write(&file(0o644, 1000, 1000), &me), None);
        assert_eq!(
            mode_after_write(&file(0o4755, 7, 7), &me),
            Some(S_IFREG | 0o755)
        );
        assert_eq!(
            mode_after_write(&file(0o6755, 1000, 1000), &me),
            Some(S_IFREG | 0o755)
        );
        // S_ISGID without group-execute stays for a member of the group...
        assert_eq!(mode_after_write(&file(0o2644, 1000, 3000), &me), None);
        // ...and goes for anyone else.
        assert_eq!(
            mode_after_write(&file(0o2666, 7, 7), &me),
            Some(S_IFREG | 0o666)
        );
        assert_eq!(mode_after_write(&file(0o6755, 7, 7), &root()), None);
        assert_eq!(mode_after_write(&dir(0o2777, 7, 7), &me), None);
    }

    #[test]
    fn protected_hardlinks_need_the_owner_or_a_safe_source() {
        let me = me();
        let theirs = file(0o644, 7, 7);
        check_hardlink(&theirs, false, &me).unwrap();
        assert_eq!(check_hardlink(&theirs, true, &me), Err(Errno::EPERM));
        check_hardlink(&file(0o666, 7, 7), true, &me).unwrap();
        check_hardlink(&file(0o600, 1000, 7), true, &me).unwrap();
        check_hardlink(&theirs, true, &root()).unwrap();
        for unsafe_mode in [0o4666, 0o2676] {
            let f = file(unsafe_mode, 7, 7);
            assert_eq!(check_hardlink(&f, true, &me), Err(Errno::EPERM));
        }
        // Set-group-ID without group-execute is no privilege.
        check_hardlink(&file(0o2666, 7, 7), true, &me).unwrap();
        let fifo = st(libc::S_IFIFO | 0o666, 7, 7);
        assert_eq!(check_hardlink(&fifo, true, &me), Err(Errno::EPERM));
    }
}

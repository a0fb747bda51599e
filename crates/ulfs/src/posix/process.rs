//! `Process`: what one process has of a volume (its descriptor table,
//! working directory, umask, and who it is), apart from the volume itself,
//! so that one volume can serve several processes (a server's clients)
//! while the in-process `Fs` owns exactly one of each.

use super::fdtable::FdTable;
use super::namei;
use super::perm::Creds;
use crate::errno::{Errno, Result};
use crate::fs::Volume;
use crate::types::{Fd, Ino};

/// Who a process's calls are made for, and so which of them are judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The process hosting the library: it owns the image file and could
    /// write it directly, so judging its calls would protect nothing. Its
    /// calls are privileged (only `access` judges permission bits, for the
    /// host's own ids, because programs ask it to decide what to do), and
    /// new files belong to its effective ids at the time of the call.
    Host,
    /// A user the kernel vouched for (a server's client, from its socket's
    /// peer credentials): every call is judged by Linux's rules for these
    /// ids (`perm`), and new files are theirs.
    Verified(Creds),
}

/// One process's view of a volume.
pub struct Process {
    pub(crate) fds: FdTable,
    pub(crate) cwd: Ino,
    pub(crate) umask: u32,
    pub(crate) identity: Identity,
}

impl Process {
    /// Whether any of this process's descriptors refers to inode `ino`
    /// (what decides, for a layer that keeps descriptors of its own,
    /// whether the process still has the file open).
    pub fn holds_ino(&self, ino: Ino) -> bool {
        self.fds.holds_ino(ino)
    }

    /// A new process of `identity` at the volume's root, with no
    /// descriptors and umask 022. The working directory holds its inode
    /// like an open descriptor (`Ctx::exit` lets it go).
    pub fn new(vol: &mut Volume, identity: Identity) -> Process {
        let root = vol.root();
        vol.open_ref(root);
        Process {
            fds: FdTable::default(),
            cwd: root,
            umask: 0o022,
            identity,
        }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Who the process is from now on: a server's process adopted by a
    /// new connection (after an exec, which may change the ids) is judged
    /// by the ids the kernel gave for that connection. Descriptors already
    /// open keep the access they were opened with, as on Linux.
    pub fn set_identity(&mut self, identity: Identity) {
        self.identity = identity;
    }

    /// The credentials calls are judged by; `None` for the host, whose
    /// calls are not judged.
    #[inline]
    pub fn creds(&self) -> Option<&Creds> {
        match &self.identity {
            Identity::Host => None,
            Identity::Verified(c) => Some(c),
        }
    }

    /// Owner and group of the files this process makes (before a
    /// set-group-ID directory gives its group): the verified ids, or the
    /// host process's effective ids now.
    pub(crate) fn owner(&self) -> (u32, u32) {
        match &self.identity {
            // SAFETY: geteuid/getegid take no arguments and cannot fail.
            Identity::Host => unsafe { (libc::geteuid(), libc::getegid()) },
            Identity::Verified(c) => (c.uid(), c.gid()),
        }
    }

    /// Where a relative path given with `dirfd` starts, as Linux's
    /// `path_init`: the working directory for `AT_FDCWD`, else the
    /// directory open as `dirfd` (EBADF, or ENOTDIR for another file). An
    /// absolute path ignores `dirfd` altogether.
    pub(crate) fn start(&self, vol: &Volume, dirfd: Fd, path: &[u8]) -> Result<Ino> {
        if path.first() == Some(&b'/') {
            return Ok(vol.root());
        }
        if dirfd == libc::AT_FDCWD {
            return Ok(self.cwd);
        }
        let f = self.fds.get(dirfd)?;
        if !f.is_dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(f.ino)
    }

    /// What `AT_EMPTY_PATH` with an empty path names: the file open as
    /// `dirfd` (any type), or the working directory for `AT_FDCWD`.
    pub(crate) fn empty_target(&self, dirfd: Fd) -> Result<Ino> {
        if dirfd == libc::AT_FDCWD {
            return Ok(self.cwd);
        }
        Ok(self.fds.get(dirfd)?.ino)
    }

    /// Resolves `path` from `dirfd` to an existing inode, as this process
    /// (its search permission judged); an empty path names `dirfd` itself
    /// when `empty_ok` (AT_EMPTY_PATH). Symlinks followed are added to
    /// `followed`, for the caller to touch their atime.
    pub(crate) fn resolve(
        &self,
        vol: &Volume,
        dirfd: Fd,
        path: &[u8],
        follow: bool,
        empty_ok: bool,
        followed: &mut Vec<Ino>,
    ) -> Result<Ino> {
        if path.is_empty() && empty_ok {
            return self.empty_target(dirfd);
        }
        namei::check_path(path)?;
        let start = self.start(vol, dirfd, path)?;
        namei::resolve(vol, start, path, follow, followed, self.creds())
    }
}

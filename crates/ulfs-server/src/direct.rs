//! Reads without a request (docs/SERVE.md "Direct reads"): the server
//! publishes every change of an open inode on a change board
//! (`ulfs::fs::changes`) and offers clients the board and the image file's
//! name (DIRECT); a client that may open the image itself maps it
//! read-only and reads the blocks of a read lease (LEASE) straight from
//! it, as long as the board says the file has not changed.
//!
//! What is offered is decided once, at start: a board (a sealed memfd)
//! and the image's absolute path, device and inode. An image that is not
//! a file of its own (a v1 image translated into memory, or a read-only
//! mount whose log was replayed in memory), or a machine without /proc,
//! gets no offer, and every read is a request, as before. Who may have it
//! is judged at each DIRECT, by the image's mode bits then (`may_read`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use ulfs::fs::Volume;
use ulfs::fs::changes::ChangeBoard;
use ulfs::posix::perm::Creds;
use ulfs::{Errno, Result};

/// What DIRECT answers.
pub(crate) struct Offer {
    pub board: Arc<ChangeBoard>,
    /// The image's absolute path, as /proc names the server's descriptor.
    pub path: Vec<u8>,
    pub dev: u64,
    pub ino: u64,
}

impl Offer {
    /// Sets the volume publishing its changes, and names its image; None
    /// (and nothing changed) when there is nothing to offer.
    pub fn new(vol: &mut Volume) -> Option<Offer> {
        let fd = vol.image_fd()?;
        let st = rustix::fs::fstat(fd).ok()?;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let path = link.into_os_string().into_encoded_bytes();
        // A deleted or anonymous file has no name a client could open.
        if !path.starts_with(b"/") || path.ends_with(b" (deleted)") {
            return None;
        }
        let board = Arc::new(ChangeBoard::new().ok()?);
        // A board nobody can map read-only is no offer.
        drop(board.read_only_fd().ok()?);
        vol.set_change_board(board.clone());
        Some(Offer {
            board,
            path,
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }

    /// A descriptor of the board for a client: read-only.
    pub fn board_fd(&self) -> Result<OwnedFd> {
        self.board.read_only_fd()
    }
}

/// Whether the image file's owner and mode bits (`st`, as fstat tells
/// them now) let `creds` read it. The board says when open files change,
/// which is for those who could read them anyway: a client the kernel
/// would refuse the image gets no board (the kernel's refusal of its open
/// would come too late for that). ACLs are not looked at: a client only
/// they would let in reads through the server, as before.
pub(crate) fn may_read(st: &rustix::fs::Stat, creds: &Creds) -> bool {
    let owner = ulfs::Stat {
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        ..Default::default()
    };
    ulfs::posix::perm::permitted(&owner, libc::R_OK, creds)
}

pub(crate) const NO_OFFER: Errno = Errno::ENOSYS;

#[cfg(test)]
mod tests {
    use super::*;

    fn image(mode: u32, uid: u32, gid: u32) -> rustix::fs::Stat {
        let f = tempfile::tempfile().unwrap();
        let mut st = rustix::fs::fstat(&f).unwrap();
        st.st_mode = libc::S_IFREG | mode;
        st.st_uid = uid;
        st.st_gid = gid;
        st
    }

    #[test]
    fn only_who_may_read_the_image_is_offered_the_board() {
        let private = image(0o600, 1000, 1000);
        assert!(may_read(&private, &Creds::new(1000, 1000, vec![])));
        assert!(may_read(&private, &Creds::new(0, 0, vec![])), "root");
        assert!(!may_read(&private, &Creds::new(1001, 1000, vec![1000])));
        let group = image(0o640, 1000, 50);
        assert!(may_read(&group, &Creds::new(1001, 1001, vec![50])));
        assert!(!may_read(&group, &Creds::new(1001, 1001, vec![51])));
        // The owner is judged by the owner bits alone, as the kernel does.
        let others = image(0o044, 1000, 50);
        assert!(!may_read(&others, &Creds::new(1000, 50, vec![])));
        assert!(may_read(&others, &Creds::new(1002, 1002, vec![])));
    }
}

//! Offsets a client keeps itself (docs/SERVE.md "Offsets"). An open file
//! description's offset belongs to the server, which shares it between
//! the processes a `fork` gave the description to. A description only
//! this client has (opened by it, never handed to a child) needs no such
//! sharing: the server says so when it opens one (`CQE_OFFSET_YOURS`: a
//! regular file, neither `O_PATH` nor `O_APPEND`), and from then on the
//! client keeps the offset: `lseek` to a set or relative place is answered
//! here, `read` and `write` become `pread` and `pwrite` at the kept offset
//! (so a `read` can be a direct read), and the server's copy is stale.
//!
//! The server's copy is brought up to date (`sync`: an LSEEK to the kept
//! offset) before any request that uses it: a lock relative to the
//! current offset (`SEEK_CUR`), and, taking the offset back for good,
//! `PREPARE_FORK`/`PREPARE_EXEC` (the child or the new program shares or
//! inherits it), `F_SETFL` with `O_APPEND`, and `copy_file_range` without
//! offsets. Descriptors follow `dup`, `dup2`, `F_DUPFD` and `close` here as
//! in the server, so two descriptors of one description share one offset.

use ulfs::Fd;

/// Descriptors this high leave their offset to the server (the table is
/// indexed by descriptor).
const MOST_FDS: usize = 4096;

/// The offsets of a client's own descriptions.
#[derive(Default)]
pub(crate) struct Offsets {
    /// By descriptor: 0 when the server keeps its offset, else the index
    /// of its description in `descriptions`, plus one.
    by_fd: Vec<u32>,
    descriptions: Vec<Description>,
    /// Descriptors whose offset is kept here.
    kept: usize,
    /// Keep none (`Client::set_kept_offsets`).
    pub off: bool,
}

#[derive(Clone, Copy, Default)]
struct Description {
    offset: u64,
    /// Whether the server's copy of the offset is this one.
    synced: bool,
    /// Descriptors naming it (0: a free entry).
    refs: u32,
    /// Its access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`), which orders
    /// a vector call's errors.
    access: i32,
}

/// A description whose offset the server must be told, and one of its
/// descriptors to tell it through.
#[derive(Debug)]
pub(crate) struct Unsynced {
    pub fd: Fd,
    pub offset: u64,
}

impl Offsets {
    /// Whether any descriptor's offset is kept here.
    #[inline]
    pub fn any(&self) -> bool {
        self.kept > 0
    }

    #[inline]
    fn index(&self, fd: Fd) -> Option<usize> {
        let i = *self.by_fd.get(usize::try_from(fd).ok()?)?;
        (i != 0).then(|| i as usize - 1)
    }

    /// `fd`'s offset, when it is kept here.
    #[inline]
    pub fn get(&self, fd: Fd) -> Option<u64> {
        Some(self.descriptions[self.index(fd)?].offset)
    }

    /// `fd`'s offset, when it is kept here, if its description was opened
    /// for `access` (`O_RDONLY` or `O_WRONLY`).
    pub fn get_for(&self, fd: Fd, access: i32) -> Option<u64> {
        let d = self.descriptions[self.index(fd)?];
        let mode = d.access & libc::O_ACCMODE;
        (mode == access || mode == libc::O_RDWR).then_some(d.offset)
    }

    /// Moves `fd`'s kept offset (the server's copy is now stale).
    #[inline]
    pub fn set(&mut self, fd: Fd, offset: u64) {
        if let Some(i) = self.index(fd) {
            let d = &mut self.descriptions[i];
            d.synced = d.synced && d.offset == offset;
            d.offset = offset;
        }
    }

    /// Records that the server's copy of `fd`'s offset is `offset` (it
    /// just set it).
    pub fn set_synced(&mut self, fd: Fd, offset: u64) {
        if let Some(i) = self.index(fd) {
            self.descriptions[i] = Description {
                offset,
                synced: true,
                ..self.descriptions[i]
            };
        }
    }

    /// A description the server just opened as `fd` with `flags`, at
    /// offset 0, whose offset is this client's to keep (false when `fd` is
    /// too high).
    pub fn opened(&mut self, fd: Fd, flags: i32) -> bool {
        self.closed(fd);
        let Some(slot) = usize::try_from(fd)
            .ok()
            .filter(|&f| f < MOST_FDS && !self.off)
        else {
            return false;
        };
        let fresh = Description {
            offset: 0,
            synced: true,
            refs: 1,
            access: flags & libc::O_ACCMODE,
        };
        let i = match self.descriptions.iter().position(|d| d.refs == 0) {
            Some(i) => {
                self.descriptions[i] = fresh;
                i
            }
            None => {
                self.descriptions.push(fresh);
                self.descriptions.len() - 1
            }
        };
        if self.by_fd.len() <= slot {
            self.by_fd.resize(slot + 1, 0);
        }
        self.by_fd[slot] = i as u32 + 1;
        self.kept += 1;
        true
    }

    /// `fd` no longer names its description.
    pub fn closed(&mut self, fd: Fd) {
        let Some(i) = self.index(fd) else {
            return;
        };
        self.by_fd[fd as usize] = 0;
        self.descriptions[i].refs -= 1;
        self.kept -= 1;
    }

    /// `new` names `old`'s description now (after a dup): Ok when the
    /// offset stays here (or was never here); Err with the description to
    /// sync and give back when `new` is too high to follow.
    pub fn duplicated(&mut self, old: Fd, new: Fd) -> Result<(), Unsynced> {
        if old == new {
            return Ok(());
        }
        self.closed(new);
        let Some(i) = self.index(old) else {
            return Ok(());
        };
        let Some(slot) = usize::try_from(new).ok().filter(|&f| f < MOST_FDS) else {
            return Err(Unsynced {
                fd: old,
                offset: self.descriptions[i].offset,
            });
        };
        if self.by_fd.len() <= slot {
            self.by_fd.resize(slot + 1, 0);
        }
        self.by_fd[slot] = i as u32 + 1;
        self.descriptions[i].refs += 1;
        self.kept += 1;
        Ok(())
    }

    /// `fd`'s description, if its offset is kept here and the server's copy
    /// is stale.
    pub fn unsynced(&self, fd: Fd) -> Option<Unsynced> {
        let d = self.descriptions[self.index(fd)?];
        (!d.synced).then_some(Unsynced {
            fd,
            offset: d.offset,
        })
    }

    /// Every description kept here whose server copy is stale, each with
    /// one of its descriptors.
    pub fn all_unsynced(&self) -> Vec<Unsynced> {
        let mut seen = vec![false; self.descriptions.len()];
        let mut out = Vec::new();
        for (fd, &i) in self.by_fd.iter().enumerate() {
            let Some(i) = (i as usize).checked_sub(1) else {
                continue;
            };
            let d = self.descriptions[i];
            if !seen[i] && !d.synced {
                seen[i] = true;
                out.push(Unsynced {
                    fd: fd as Fd,
                    offset: d.offset,
                });
            }
        }
        out
    }

    /// The server keeps `fd`'s description's offset from now on (every
    /// descriptor naming it). The caller has synced it.
    pub fn give_back(&mut self, fd: Fd) {
        let Some(i) = self.index(fd) else {
            return;
        };
        for slot in self.by_fd.iter_mut().filter(|s| **s == i as u32 + 1) {
            *slot = 0;
            self.kept -= 1;
        }
        self.descriptions[i].refs = 0;
    }

    /// The server keeps every offset from now on. The caller has synced
    /// them.
    pub fn give_back_all(&mut self) {
        *self = Offsets {
            off: self.off,
            ..Offsets::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_share_one_offset_until_the_last_is_closed() {
        let mut o = Offsets::default();
        assert!(o.opened(3, libc::O_RDWR));
        o.set(3, 10);
        o.duplicated(3, 7).unwrap();
        assert_eq!(o.get(7), Some(10));
        o.set(7, 20);
        assert_eq!(o.get(3), Some(20));
        o.closed(3);
        assert_eq!((o.get(3), o.get(7)), (None, Some(20)));
        // A fresh open reusing the number starts at 0, alone.
        assert!(o.opened(3, libc::O_RDWR));
        assert_eq!((o.get(3), o.get(7)), (Some(0), Some(20)));
        o.closed(7);
        o.closed(3);
        assert!(!o.any());
        o.opened(5, libc::O_WRONLY);
        assert_eq!(o.get_for(5, libc::O_RDONLY), None);
        assert_eq!(o.get_for(5, libc::O_WRONLY), Some(0));
    }

    #[test]
    fn only_moved_offsets_need_syncing_once_per_description() {
        let mut o = Offsets::default();
        o.opened(0, libc::O_RDWR);
        o.opened(1, libc::O_RDWR);
        o.duplicated(1, 2).unwrap();
        assert!(o.all_unsynced().is_empty());
        o.set(2, 5);
        o.set(0, 0);
        let u = o.all_unsynced();
        assert_eq!(u.len(), 1);
        assert_eq!((u[0].fd, u[0].offset), (1, 5));
        o.set_synced(1, 5);
        assert!(o.unsynced(2).is_none());
        o.give_back(2);
        assert_eq!((o.get(1), o.get(2), o.get(0)), (None, None, Some(0)));
        o.give_back_all();
        assert!(!o.any());
        o.off = true;
        assert!(!o.opened(0, libc::O_RDWR));
        o.give_back_all();
        assert!(o.off);
    }

    #[test]
    fn high_or_negative_descriptors_stay_with_the_server() {
        let mut o = Offsets::default();
        assert!(!o.opened(MOST_FDS as Fd, libc::O_RDWR));
        assert!(!o.opened(-1, libc::O_RDWR));
        o.opened(4, libc::O_RDWR);
        o.set(4, 9);
        let e = o.duplicated(4, MOST_FDS as Fd).unwrap_err();
        assert_eq!((e.fd, e.offset), (4, 9));
        assert_eq!(o.get(-5), None);
    }
}

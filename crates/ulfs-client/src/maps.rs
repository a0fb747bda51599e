//! Shared mappings through the server (MAP_SHARED, MSYNC, UNMAP; op.rs):
//! the server keeps one memfd (an *object*) per mapped file with the
//! file's bytes, and every client that maps the file maps that memfd, so
//! their stores meet in the kernel's page cache as two processes' mappings
//! of one host file do. The server keeps its own reads and writes of the
//! file coherent with the object, and writes the object back into the
//! file at MSYNC, at the last UNMAP, and when a client or the server goes.
//!
//! [`Client::map_shared`] gives the object id and the memfd; the caller
//! maps it itself (`mmap(addr, len, prot, MAP_SHARED | its flags, memfd,
//! offset)`: the memfd's offsets are the file's) and may close the memfd
//! once mapped. Each successful `map_shared` is one mapping to the
//! server, to be ended by one [`Client::unmap`] (after the caller's
//! `munmap` of all of it); [`Client::msync`] takes file offsets.
//!
//! The memfd comes over the control socket, sent by the server before it
//! answers: the answer in hand, the message is already queued, so it is
//! read without waiting, and anything else found there (the server gone,
//! garbage, nothing) is an error, never a hang.

use std::os::fd::OwnedFd;

use ulfs::{Errno, Fd, Result};
use ulfs_wire::{Msg, Op, control};

use crate::Client;

const ENOTCONN: Errno = Errno(libc::ENOTCONN);
const EPROTO: Errno = Errno(libc::EPROTO);

impl Client {
    /// `mmap(MAP_SHARED)` of `fd` at file offset `offset` (page-aligned)
    /// for `len` bytes with `prot`: the object id and its memfd, open for
    /// writing if `fd` is (so a read-only descriptor's mapping can never
    /// be made writable, as the kernel's cannot). Errors are `mmap`'s:
    /// EBADF, EINVAL (zero length, unaligned offset, unknown prot bits),
    /// EACCES (`fd` not readable, or PROT_WRITE on a descriptor that is
    /// not writable), ENODEV (not a regular file), EOVERFLOW, ENOMEM (past
    /// the server's bounds on mappings).
    pub fn map_shared(
        &mut self,
        fd: Fd,
        offset: u64,
        len: u64,
        prot: i32,
    ) -> Result<(u64, OwnedFd)> {
        let r = Self::req(Op::MapShared, fd, [offset, len, prot as u32 as u64, 0]);
        let cqe = self.chan.call(r)?;
        let object = cqe.result()?;
        match self.take_object(cqe.tag, object) {
            Ok(memfd) => Ok((object, memfd)),
            Err(e) => {
                // The server counts the mapping: let it go.
                let _ = self.unmap(object);
                Err(e)
            }
        }
    }

    /// The OBJECT message announced by the answer tagged `tag`.
    pub(crate) fn take_object(&mut self, tag: u32, object: u64) -> Result<OwnedFd> {
        loop {
            match control::try_recv(self.chan.socket()) {
                Ok(Msg::Object {
                    tag: t,
                    object: o,
                    memfd,
                    ..
                }) if t == tag && o == object => return Ok(memfd),
                // One a call cut short left behind: its memfd is closed
                // (dropped) and the queue read on; it is finite.
                Ok(Msg::Object { .. }) => continue,
                Ok(Msg::Gone) => return Err(ENOTCONN),
                Ok(_) => return Err(EPROTO),
                // The answer said the message was sent: a server that did
                // not is confused.
                Err(e) if e == Errno::EAGAIN => return Err(EPROTO),
                Err(e) => return Err(e),
            }
        }
    }

    /// `msync` of object `object`'s file range `[offset, offset + len)`
    /// (`offset` page-aligned): the server writes its bytes back into the
    /// file (up to the file's size); `MS_SYNC` also makes them durable.
    /// EINVAL for flags `msync` refuses, an unaligned offset, or an object
    /// this client does not map; ENOMEM for a range that wraps.
    pub fn msync(&mut self, object: u64, offset: u64, len: u64, flags: i32) -> Result<()> {
        let r = Self::req(Op::Msync, -1, [object, offset, len, flags as u32 as u64]);
        self.call(r).map(drop)
    }

    /// Ends one mapping of `object` (one `map_shared`), after the caller's
    /// `munmap`. The last mapping of the object, of any client, writes it
    /// back into the file. EINVAL for an object this client does not map.
    pub fn unmap(&mut self, object: u64) -> Result<()> {
        let r = Self::req(Op::Unmap, -1, [object, 0, 0, 0]);
        self.call(r).map(drop)
    }
}

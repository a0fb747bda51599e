//! A client process's life across `fork` and `exec`: the server keeps a
//! process's descriptors, working directory and locks in its own memory,
//! so a forked child or the program an exec starts carries on as the
//! server's process only by asking for it. The parent (or the process
//! about to exec) asks the server to set a process aside under a token
//! (PREPARE_FORK, PREPARE_EXEC); the new process connects and ADOPTs it.
//! The server checks that the adopter is who the token was made for (the
//! same pid after an exec, a child of the preparer after a fork), so a
//! token seen by some other program is worth nothing.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use ulfs::{Fd, Result};
use ulfs_wire::{AdoptKind, ClientChannel, Op, Req};

use crate::Client;

/// What identifies a process set aside in the server.
pub type Token = [u8; 16];

impl Client {
    /// Connects to the server at `socket` as the process set aside under
    /// `token`.
    pub fn adopt(socket: impl AsRef<Path>, token: &Token, kind: AdoptKind) -> Result<Client> {
        let (chan, id) = ClientChannel::adopt(socket.as_ref(), token, kind)?;
        Ok(Client { chan, id })
    }

    /// Before a `fork` (or a spawn): the child's process, set aside with
    /// the same descriptors (sharing their offsets with this process's),
    /// working directory and umask, and none of this process's POSIX locks.
    pub fn prepare_fork(&mut self) -> Result<Token> {
        self.token(Op::PrepareFork)
    }

    /// Before an `exec`: this process, set aside for the program the exec
    /// starts (with its descriptors and locks). If the exec fails, the
    /// next call on this client takes it back.
    pub fn prepare_exec(&mut self) -> Result<Token> {
        self.token(Op::PrepareExec)
    }

    fn token(&mut self, op: Op) -> Result<Token> {
        let cqe = self.call(Req::new(op))?;
        let mut t = [0; 16];
        t[..8].copy_from_slice(&cqe.aux[0].to_le_bytes());
        t[8..].copy_from_slice(&cqe.aux[1].to_le_bytes());
        Ok(t)
    }

    /// A new open file description of the file open as `fd`, with
    /// `flags` (opening `/proc/self/fd/N`), judged as an open of it.
    pub fn reopen(&mut self, fd: Fd, flags: i32) -> Result<Fd> {
        self.call_res(Self::req(Op::Reopen, fd, [flags as u64, 0, 0, 0]))
            .map(|v| v as Fd)
    }

    /// Moves the connection's descriptors: see `ClientChannel::relocate_fds`.
    pub fn relocate_fds(&mut self, relocate: impl FnMut(BorrowedFd<'_>) -> Option<OwnedFd>) {
        self.chan.relocate_fds(relocate);
    }

    /// The connection's descriptors (its socket, its kick eventfd).
    pub fn raw_fds(&self) -> [i32; 2] {
        self.chan.raw_fds()
    }
}

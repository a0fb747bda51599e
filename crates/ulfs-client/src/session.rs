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
use ulfs_wire::{AdoptKind, ClientChannel, Op};

use crate::Client;

/// What identifies a process set aside in the server.
pub type Token = [u8; 16];

impl Client {
    /// Connects to the server at `socket` as the process set aside under
    /// `token`.
    pub fn adopt(socket: impl AsRef<Path>, token: &Token, kind: AdoptKind) -> Result<Client> {
        let (chan, id) = ClientChannel::adopt(socket.as_ref(), token, kind)?;
        Ok(Client {
            chan,
            id,
            direct: Default::default(),
            offsets: Default::default(),
            umask: None,
        })
    }

    /// Before a `fork`: the child's process, set aside with the same
    /// descriptors (sharing their offsets with this process's), working
    /// directory and umask, none of this process's POSIX locks, and its
    /// shared mappings (the child's memory has them).
    pub fn prepare_fork(&mut self) -> Result<Token> {
        self.token(Op::PrepareFork, 1)
    }

    /// Before a spawn (`posix_spawn`, `system`, `popen`): as
    /// `prepare_fork`, for a child that starts another program at once and
    /// so has no mappings.
    pub fn prepare_spawn(&mut self) -> Result<Token> {
        self.token(Op::PrepareFork, 0)
    }

    /// Before an `exec`: a token for the program the exec starts, which
    /// adopts this process (descriptors, locks) once the exec has closed
    /// this connection. If the exec fails, this client simply goes on.
    pub fn prepare_exec(&mut self) -> Result<Token> {
        self.token(Op::PrepareExec, 0)
    }

    /// After a change of ids: a token for a new connection of this same
    /// process, adopting it with its shared mappings.
    pub fn prepare_reconnect(&mut self) -> Result<Token> {
        self.token(Op::PrepareExec, 1)
    }

    /// The fork, spawn or exec prepared under `token` did not happen: the
    /// server lets go of what it set aside for it at once (a child's
    /// process exits: its descriptions close, ending their `flock` and OFD
    /// locks), rather than after the 30 s an unadopted token lasts.
    pub fn cancel_token(&mut self, token: &Token) -> Result<()> {
        let [a0, a1] = ulfs_wire::op::token_words(token);
        self.call(Self::req(Op::CancelToken, -1, [a0, a1, 0, 0]))
            .map(drop)
    }

    fn token(&mut self, op: Op, flags: u64) -> Result<Token> {
        let cqe = self.call(Self::req(op, -1, [flags, 0, 0, 0]))?;
        Ok(ulfs_wire::op::token_from_words(cqe.aux))
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

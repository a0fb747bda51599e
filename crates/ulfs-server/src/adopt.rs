//! Processes set aside for whoever carries a client on: a forked child
//! (PREPARE_FORK), or the program an exec starts (PREPARE_EXEC). The
//! server keeps a client's descriptors, working directory and locks, and a
//! new process gets them only by presenting the token they were set aside
//! under on a connection of its own (ADOPT). A token is worth something
//! only to the process it was made for, as the kernel tells the server on
//! that connection: the same pid after an exec (which keeps it), a child
//! of the preparer after a fork (or, once the preparer is gone, a process
//! of the same user: a daemon's parent exits at once). Tokens are 128
//! random bits, so one cannot be guessed, and one nobody adopts in
//! `MAX_AGE` is dropped (its process exits, as if the child had died).
//!
//! A fork's process is a copy made at PREPARE_FORK. An exec's is the
//! client's own process: PREPARE_EXEC only *reserves* a token, the client
//! goes on as before (other threads' calls, a failed exec), and when its
//! connection ends while its pid still runs (the exec closed it), the
//! process is *parked* under the token for the new program. A connection
//! that ends with the process exiting (`PF_EXITING`, a zombie, gone) is a
//! plain exit. An ADOPT that arrives before the old connection's end was
//! seen ends it first (`Taken::Reserved`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ulfs::Errno;
use ulfs::posix::{Ctx, Process};
use ulfs_wire::AdoptKind;

use crate::Shared;

pub(crate) type Token = [u8; 16];

/// A client's reserved exec token, and whether its process keeps its
/// memory (a reconnection after a change of ids: its shared mappings go
/// along) or not (an exec: they end).
pub(crate) type ExecToken = (Token, bool);

/// How long a token waits for its process. A fork's child adopts before
/// `fork` returns in it, and an exec'd program at load: seconds are
/// generous. (An exec of a program that does not load the library, static
/// or set-user-ID, leaves its process parked this long.)
pub(crate) const MAX_AGE: Duration = Duration::from_secs(30);

/// Tokens outstanding in the whole server, and per preparing client: a
/// client that forks in a loop without children adopting is refused
/// (EAGAIN, as `fork` says when the system cannot make a process now).
const MAX_PENDING: usize = 4096;
const MAX_PENDING_PER_CLIENT: usize = 256;

/// A process waiting for its adopter.
pub(crate) struct Pending {
    pub proc: Process,
    pub kind: AdoptKind,
    /// The preparing client's pid and uid (kernel-verified).
    pub pid: u32,
    pub uid: u32,
    /// The client that prepared it.
    pub client: u64,
    /// Whose POSIX locks the process holds: the preparer's after an exec,
    /// a new owner after a fork.
    pub lock_owner: u64,
    /// Who holds the forked child's shared mappings meanwhile (`Maps`);
    /// 0 for an exec (the exec unmaps everything).
    pub holder: u64,
    pub made: Instant,
}

/// Why a token was not taken.
pub(crate) enum Taken {
    /// Not there, or not this process's: EACCES.
    Refused,
    /// An exec's token whose client (this id) has not been seen to end
    /// yet: end it, then try again.
    Reserved(u64),
}

pub(crate) struct Tokens {
    map: Mutex<HashMap<Token, Pending>>,
    /// Exec tokens not parked yet: their client and its pid.
    reserved: Mutex<HashMap<Token, (u64, u32)>>,
    /// Lock owners and mapping holders for forked children: numbered far
    /// above client ids, so the two never meet.
    next_owner: AtomicU64,
    /// How many processes (clients, and processes set aside) share each
    /// lock owner: a client and the exec it prepared are one process to
    /// the kernel, whose POSIX locks end only when the last of them goes.
    owners: Mutex<HashMap<u64, usize>>,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens {
            map: Mutex::default(),
            reserved: Mutex::default(),
            next_owner: AtomicU64::new(1 << 62),
            owners: Mutex::default(),
        }
    }
}

impl Tokens {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Pending>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A lock owner (and mapping holder) no client has.
    pub fn new_owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One more process shares `owner`.
    pub fn hold_owner(&self, owner: u64) {
        *self.owners().entry(owner).or_default() += 1;
    }

    /// A process sharing `owner` went; true when it was the last, whose
    /// going ends the owner's POSIX locks.
    pub fn let_go_owner(&self, owner: u64) -> bool {
        let mut owners = self.owners();
        match owners.get_mut(&owner) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                owners.remove(&owner);
                true
            }
        }
    }

    /// Sets `proc` aside; EAGAIN past the limits (the caller still owns
    /// the process then, and must let it exit).
    pub fn put(&self, p: Pending) -> Result<Token, (Errno, Box<Pending>)> {
        let mut map = self.map();
        let mine = map.values().filter(|o| o.client == p.client).count();
        if map.len() >= MAX_PENDING || mine >= MAX_PENDING_PER_CLIENT {
            return Err((Errno(libc::EAGAIN), Box::new(p)));
        }
        match new_token() {
            Ok(token) => {
                map.insert(token, p);
                Ok(token)
            }
            Err(e) => Err((e, Box::new(p))),
        }
    }

    /// An exec's token for `client` (pid `pid`), its process to be parked
    /// when its connection ends (`park`).
    pub fn reserve(&self, client: u64, pid: u32) -> Result<Token, Errno> {
        let token = new_token()?;
        self.reserved().insert(token, (client, pid));
        Ok(token)
    }

    fn reserved(&self) -> std::sync::MutexGuard<'_, HashMap<Token, (u64, u32)>> {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops a reservation (a second exec prepared, or the client exited).
    pub fn unreserve(&self, token: &Token) {
        self.reserved().remove(token);
    }

    /// The process of a reserved exec token, for its new program.
    pub fn park(&self, token: Token, p: Pending) {
        self.reserved().remove(&token);
        self.map().insert(token, p);
    }

    /// The process set aside under `token` for a process with pid
    /// `adopter` and uid `uid` (whose parent is `parent`), adopting as
    /// `kind`. Refused for a token that is not there, or not this
    /// process's (the token stays for its rightful adopter).
    pub fn take(
        &self,
        token: &Token,
        kind: AdoptKind,
        adopter: u32,
        uid: u32,
        parent: Option<u32>,
    ) -> Result<Pending, Taken> {
        let mut map = self.map();
        let ok = map.get(token).is_some_and(|p| {
            p.kind == kind
                && match kind {
                    AdoptKind::Exec => p.pid == adopter,
                    AdoptKind::Fork => parent == Some(p.pid) || (uid == p.uid && !running(p.pid)),
                }
        });
        if ok {
            return Ok(map.remove(token).expect("checked above"));
        }
        drop(map);
        match self.reserved().get(token) {
            Some(&(client, pid)) if kind == AdoptKind::Exec && pid == adopter => {
                Err(Taken::Reserved(client))
            }
            _ => Err(Taken::Refused),
        }
    }

    /// The token `client` prepared, taken back: the process set aside
    /// under it (for the caller to retire), or `None` for an exec's
    /// reserved token, now dropped. EACCES for another client's token,
    /// ENOENT for one not there.
    pub fn cancel(&self, token: &Token, client: u64) -> Result<Option<Pending>, Errno> {
        let mut map = self.map();
        match map.get(token) {
            Some(p) if p.client == client => return Ok(map.remove(token)),
            Some(_) => return Err(Errno::EACCES),
            None => {}
        }
        drop(map);
        let mut reserved = self.reserved();
        match reserved.get(token) {
            Some(&(c, _)) if c == client => {
                reserved.remove(token);
                Ok(None)
            }
            Some(_) => Err(Errno::EACCES),
            None => Err(Errno::ENOENT),
        }
    }

    /// Takes out the tokens older than `MAX_AGE` (every one when `all`),
    /// for the caller to let their processes exit.
    pub fn expired(&self, all: bool) -> Vec<Pending> {
        let mut map = self.map();
        let old: Vec<Token> = map
            .iter()
            .filter(|(_, p)| all || p.made.elapsed() > MAX_AGE)
            .map(|(t, _)| *t)
            .collect();
        old.iter().filter_map(|t| map.remove(t)).collect()
    }
}

fn new_token() -> Result<Token, Errno> {
    let mut token = [0u8; 16];
    match rustix::rand::getrandom(&mut token, rustix::rand::GetRandomFlags::empty()) {
        Ok(n) if n == token.len() => Ok(token),
        _ => Err(Errno::EIO),
    }
}

/// A process exits, as a process does: its descriptors close (with what
/// that ends of locks), and with the last process of its lock owner, the
/// owner's POSIX locks. While another process shares the owner (the
/// program an exec started, or the client whose exec failed), its closes
/// end no POSIX lock: that process still holds the files.
pub(crate) fn exit_process(s: &Shared, proc: &mut Process, lock_owner: u64, holder: u64) {
    let mut closed = Vec::new();
    let _ = s.vol.exclusive(|vol| {
        let r = Ctx { vol, proc }.exit_noting(|c| closed.push(c));
        s.maps.drop_client(vol, holder);
        r
    });
    let last = s.tokens.let_go_owner(lock_owner);
    // An owner with no locks: closing ends only what the descriptions
    // themselves hold (OFD and flock locks at their last close).
    let owner = if last {
        lock_owner
    } else {
        s.tokens.new_owner()
    };
    for c in &closed {
        s.locks.closed(owner, c);
    }
    if last {
        s.locks.exited(lock_owner);
    }
}

/// A process set aside that nobody will adopt exits.
pub(crate) fn retire(s: &Shared, mut p: Pending) {
    exit_process(s, &mut p.proc, p.lock_owner, p.holder);
}

/// Drops the tokens nobody adopted in time (all of them at shutdown).
pub(crate) fn sweep(s: &Shared, all: bool) {
    for p in s.tokens.expired(all) {
        retire(s, p);
    }
}

/// The fields of `/proc/PID/stat` after the command name (which is in
/// parentheses and may itself hold spaces and parentheses: the last `)`
/// ends it): state, ppid, pgrp, session, tty, tpgid, flags, ...
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    Some(rest.split_ascii_whitespace().map(str::to_string).collect())
}

/// The parent of process `pid`.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The kernel's PF_EXITING: the process is on its way out.
const PF_EXITING: u64 = 0x4;

/// Whether process `pid` runs: not gone, not a zombie, not exiting. A
/// connection of a running process that ended was closed by an exec.
pub(crate) fn running(pid: u32) -> bool {
    let Some(f) = stat_fields(pid) else {
        return false;
    };
    let state = f.first().map(String::as_str);
    let flags: u64 = f.get(6).and_then(|v| v.parse().ok()).unwrap_or(PF_EXITING);
    !matches!(state, Some("Z" | "X" | "x")) && flags & PF_EXITING == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn my_parent_is_found() {
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() } as u32;
        assert_eq!(parent_of(std::process::id()), Some(ppid));
        assert_eq!(parent_of(u32::MAX), None);
        assert!(running(std::process::id()));
        assert!(!running(u32::MAX));
        // A child that exited and was not reaped yet is a zombie: gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while running(pid) {
            assert!(std::time::Instant::now() < until, "true still runs");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
    }
}

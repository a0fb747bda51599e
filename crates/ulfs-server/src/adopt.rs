//! Processes set aside for whoever carries a client on: a forked child
//! (PREPARE_FORK), or the program an exec starts (PREPARE_EXEC). The
//! server keeps a client's descriptors, working directory and locks, and a
//! new process gets them only by presenting the token they were set aside
//! under on a connection of its own (ADOPT). A token is worth something
//! only to the process it was made for, as the kernel tells the server on
//! that connection: the same pid after an exec (which keeps it), a child
//! of the preparer after a fork. Tokens are 128 random bits, so one cannot
//! be guessed, and one nobody adopts in `MAX_AGE` is dropped (its process
//! exits, as if the child had died).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ulfs::Errno;
use ulfs::posix::{Ctx, Process};
use ulfs_wire::AdoptKind;

use crate::Shared;

pub(crate) type Token = [u8; 16];

/// How long a token waits for its process. A fork's child adopts before
/// `fork` returns in it, and an exec'd program at load: seconds are
/// generous, and a failed exec takes its token back at once.
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
    /// The preparing client's pid (kernel-verified).
    pub pid: u32,
    /// The client that prepared it.
    pub client: u64,
    /// Whose POSIX locks the process holds: the preparer's after an exec,
    /// a new owner after a fork.
    pub lock_owner: u64,
    /// Who holds the forked child's shared mappings meanwhile (`Maps`);
    /// 0 for an exec (the exec unmaps everything).
    pub holder: u64,
    made: Instant,
}

pub(crate) struct Tokens {
    map: Mutex<HashMap<Token, Pending>>,
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
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &self,
        proc: Process,
        kind: AdoptKind,
        pid: u32,
        client: u64,
        lock_owner: u64,
        holder: u64,
    ) -> Result<Token, (Errno, Box<Process>)> {
        let mut map = self.map();
        let mine = map.values().filter(|p| p.client == client).count();
        if map.len() >= MAX_PENDING || mine >= MAX_PENDING_PER_CLIENT {
            return Err((Errno(libc::EAGAIN), Box::new(proc)));
        }
        let mut token = [0u8; 16];
        if rustix::rand::getrandom(&mut token, rustix::rand::GetRandomFlags::empty())
            .ok()
            .filter(|&n| n == token.len())
            .is_none()
        {
            return Err((Errno::EIO, Box::new(proc)));
        }
        map.insert(
            token,
            Pending {
                proc,
                kind,
                pid,
                client,
                lock_owner,
                holder,
                made: Instant::now(),
            },
        );
        Ok(token)
    }

    /// The process set aside under `token` for a process with pid
    /// `adopter` (whose parent is `parent`), adopting as `kind`. EACCES
    /// for a token that is not there, or not this process's (the token
    /// stays for its rightful adopter).
    pub fn take(
        &self,
        token: &Token,
        kind: AdoptKind,
        adopter: u32,
        parent: Option<u32>,
    ) -> Result<Pending, Errno> {
        let mut map = self.map();
        let ok = map.get(token).is_some_and(|p| {
            p.kind == kind
                && match kind {
                    AdoptKind::Exec => p.pid == adopter,
                    AdoptKind::Fork => parent == Some(p.pid),
                }
        });
        if !ok {
            return Err(Errno::EACCES);
        }
        Ok(map.remove(token).expect("checked above"))
    }

    /// Takes back an exec token whose exec did not happen (the client
    /// made another request).
    pub fn cancel(&self, token: &Token) -> Option<Pending> {
        self.map().remove(token)
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

/// The parent of process `pid`, from `/proc/PID/stat` (field 4, after the
/// command name in parentheses, which may itself hold spaces and
/// parentheses: the last `)` ends it).
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
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
    }
}

//! File locks by Linux's rules, as a plain value: POSIX record locks
//! (`F_SETLK`, `F_SETLKW`, `F_GETLK`), open-file-description locks
//! (`F_OFD_*`) and `flock`. The rules live here, once, so that every
//! layer that must hold locks for programs (the preload library for the
//! processes of one `ulfs run`, the server for all of its clients) keeps
//! the same semantics; what differs between them (where the table lives,
//! how a waiter waits, how a dead holder is noticed) stays with them.
//!
//! - POSIX locks belong to a process (`Owner::Process(pid)`): a process's
//!   own never conflict with each other, a new one replaces the process's
//!   old ones on the range it covers (merging with adjacent ones of the
//!   same kind, splitting what sticks out), and closing *any* descriptor
//!   of the file drops all of them on that file
//!   ([`LockTable::release_process_on`]).
//! - OFD locks belong to an open file description (`Owner::Ofd(id)`):
//!   they conflict with other descriptions' locks and with POSIX locks of
//!   every process, and go when the description's last descriptor closes
//!   ([`LockTable::release_owner`]).
//! - `flock` locks belong to an open file description too
//!   (`Owner::Flock(id)`), cover the whole file, and never meet the other
//!   two kinds (Linux keeps them on a separate list).
//!
//! Nothing here blocks, sleeps or knows about processes beyond their
//! numbers: a request that meets another owner's lock is refused with
//! who is in the way ([`Refused::Conflict`]), and the caller decides
//! whether to wait (`F_SETLKW`, `flock` without `LOCK_NB`) and when to
//! try again. The table can cap its records, in total and per owner, so
//! that one client cannot make a server allocate without bound; past a
//! cap a request is refused with [`Refused::TooMany`] (ENOLCK).
//!
//! Ranges are half-open, `[start, end)`; `end == u64::MAX` runs to the
//! end of any file (a zero `l_len`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::types::Ino;

/// Who holds a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A POSIX record lock of process `pid` (its thread-group id).
    Process(u32),
    /// An OFD lock of the open file description with this id (ids must be
    /// unique among the descriptions the table sees).
    Ofd(u64),
    /// A `flock` lock of the open file description with this id.
    Flock(u64),
}

impl Owner {
    fn is_flock(self) -> bool {
        matches!(self, Owner::Flock(_))
    }

    /// What `F_GETLK` reports as `l_pid` for a lock of this owner: the
    /// process for a POSIX lock, -1 for a lock of an open file
    /// description (Linux's `locks_translate_pid`).
    pub fn reported_pid(self) -> i32 {
        match self {
            Owner::Process(pid) => pid as i32,
            Owner::Ofd(_) | Owner::Flock(_) => -1,
        }
    }
}

/// A held range, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub owner: Owner,
    pub write: bool,
    pub start: u64,
    pub end: u64,
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Unlock,
    Read,
    Write,
}

/// A lock in a request's way: what `F_GETLK` describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    pub owner: Owner,
    pub write: bool,
    pub start: u64,
    pub end: u64,
    /// `l_pid`: [`Owner::reported_pid`] of the holder.
    pub pid: i32,
}

/// Why a lock was not set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another owner holds a conflicting lock; this is the lowest one in
    /// the file (the holder a waiter waits for).
    Conflict(Blocking),
    /// The change would take the table, or the owner, past its cap on
    /// records (ENOLCK).
    TooMany,
}

/// Caps on the number of held ranges. A change that does not add records
/// (an unlock that splits nothing, a lock that merges) is never refused,
/// so an owner at its cap can always let go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Records of any one owner.
    pub per_owner: usize,
    /// Records in the whole table.
    pub total: usize,
}

impl Limits {
    pub const NONE: Limits = Limits {
        per_owner: usize::MAX,
        total: usize::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::NONE
    }
}

/// Every lock held on every file, by inode.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    by_ino: HashMap<Ino, Vec<Held>>,
    /// Records per owner: the caps, and a shortcut that makes releasing an
    /// owner that holds nothing (most closes) cost one lookup instead of a
    /// walk over every locked file.
    per_owner: HashMap<Owner, usize>,
    total: usize,
    limits: Limits,
}

/// Whether `owner` asking for `write` on `[start, end)` conflicts with
/// `h`: another owner in the same world (`flock` or record locks),
/// overlapping, and one of the two a write lock. Two POSIX locks of one
/// process have the same owner and so never conflict.
fn conflicts(owner: Owner, write: bool, start: u64, end: u64, h: &Held) -> bool {
    h.owner != owner
        && owner.is_flock() == h.owner.is_flock()
        && start < h.end
        && h.start < end
        && (write || h.write)
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable::default()
    }

    pub fn with_limits(limits: Limits) -> LockTable {
        LockTable {
            limits,
            ..LockTable::default()
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the caps; records already held stay (only growth is
    /// refused).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Records held, in all.
    pub fn len(&self) -> usize {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Records `owner` holds (on every file).
    pub fn held_by(&self, owner: Owner) -> usize {
        self.per_owner.get(&owner).copied().unwrap_or(0)
    }

    /// The locks held on `ino`, in no particular order.
    pub fn locks_on(&self, ino: Ino) -> &[Held] {
        self.by_ino.get(&ino).map_or(&[], Vec::as_slice)
    }

    /// Every lock, with its file.
    pub fn iter(&self) -> impl Iterator<Item = (Ino, &Held)> {
        self.by_ino
            .iter()
            .flat_map(|(ino, v)| v.iter().map(move |h| (*ino, h)))
    }

    /// The lowest lock in the file that conflicts with `owner` asking for
    /// `write` on `[start, end)` (`F_GETLK`; Linux reports the first on
    /// its list, which is ordered by start for one owner).
    pub fn conflict(
        &self,
        ino: Ino,
        owner: Owner,
        write: bool,
        start: u64,
        end: u64,
    ) -> Option<Blocking> {
        self.locks_on(ino)
            .iter()
            .filter(|h| conflicts(owner, write, start, end, h))
            .min_by_key(|h| h.start)
            .map(|h| Blocking {
                owner: h.owner,
                write: h.write,
                start: h.start,
                end: h.end,
                pid: h.owner.reported_pid(),
            })
    }

    /// Sets (or with `Kind::Unlock` clears) `owner`'s lock on
    /// `[start, end)` if no other owner's lock is in the way. An empty
    /// range asks for nothing. A `flock` request covers the whole file
    /// whatever range it names.
    pub fn try_set(
        &mut self,
        ino: Ino,
        owner: Owner,
        kind: Kind,
        start: u64,
        end: u64,
    ) -> Result<(), Refused> {
        let (start, end) = if owner.is_flock() {
            (0, u64::MAX)
        } else {
            (start, end)
        };
        if start >= end {
            return Ok(());
        }
        let write = kind == Kind::Write;
        if owner.is_flock() && kind != Kind::Unlock {
            let held = self.locks_on(ino);
            if held.iter().any(|h| h.owner == owner && h.write == write) {
                return Ok(());
            }
            // Linux converts a flock lock by taking the old one away
            // first (flock_lock_inode), whether or not the new one can be
            // had: a refused upgrade leaves the owner with nothing.
            if held.iter().any(|h| h.owner == owner) {
                let kept = held.iter().filter(|h| h.owner != owner).copied().collect();
                self.replace_on(ino, owner, kept);
            }
        }
        if kind != Kind::Unlock
            && let Some(b) = self.conflict(ino, owner, write, start, end)
        {
            return Err(Refused::Conflict(b));
        }
        let held = self.locks_on(ino);
        let kept = replaced(held, owner, kind, start, end);
        let mine_before = held.iter().filter(|h| h.owner == owner).count();
        let mine_after = kept.iter().filter(|h| h.owner == owner).count();
        if mine_after > mine_before {
            let grown = mine_after - mine_before;
            let total = self.total + grown;
            let owner_total = self.held_by(owner) + grown;
            if total > self.limits.total || owner_total > self.limits.per_owner {
                return Err(Refused::TooMany);
            }
        }
        self.replace_on(ino, owner, kept);
        Ok(())
    }

    /// Puts back a lock of `h.owner` without any check or merge: one the
    /// caller knows it held (a process's own locks, restored after an
    /// exec from where they were kept).
    pub fn restore(&mut self, ino: Ino, h: Held) {
        if h.start < h.end {
            self.by_ino.entry(ino).or_default().push(h);
            *self.per_owner.entry(h.owner).or_default() += 1;
            self.total += 1;
        }
    }

    /// Drops every lock `owner` holds (for OFD and `flock` owners: the
    /// description's last descriptor closed).
    pub fn release_owner(&mut self, owner: Owner) {
        if self.held_by(owner) == 0 {
            return;
        }
        self.by_ino.retain(|_, v| {
            v.retain(|h| h.owner != owner);
            !v.is_empty()
        });
        self.total -= self.per_owner.remove(&owner).unwrap_or(0);
    }

    /// Drops process `pid`'s POSIX locks on `ino`: it closed a descriptor
    /// of the file (any one of them: the POSIX rule every database
    /// library has to work around).
    pub fn release_process_on(&mut self, ino: Ino, pid: u32) {
        let owner = Owner::Process(pid);
        if self.held_by(owner) == 0 {
            return;
        }
        let Some(v) = self.by_ino.get(&ino) else {
            return;
        };
        if v.iter().any(|h| h.owner == owner) {
            let kept = v.iter().filter(|h| h.owner != owner).copied().collect();
            self.replace_on(ino, owner, kept);
        }
    }

    /// Drops every POSIX lock of process `pid` (it exited, or its client
    /// went away). Its OFD and `flock` locks belong to descriptions,
    /// which the caller releases as their last references go.
    pub fn release_process(&mut self, pid: u32) {
        self.release_owner(Owner::Process(pid));
    }

    /// Renames owners (descriptions opened again under new ids): `f` maps
    /// each owner to its new name. Counts follow.
    pub fn rekey(&mut self, mut f: impl FnMut(Owner) -> Owner) {
        self.per_owner.clear();
        for h in self.by_ino.values_mut().flatten() {
            h.owner = f(h.owner);
            *self.per_owner.entry(h.owner).or_default() += 1;
        }
    }

    /// Forgets every lock (a fork's child starts with none of its
    /// parent's).
    pub fn clear(&mut self) {
        self.by_ino.clear();
        self.per_owner.clear();
        self.total = 0;
    }

    /// Makes `kept` the locks on `ino`, where only `owner`'s differ from
    /// what is there now; keeps the counts.
    fn replace_on(&mut self, ino: Ino, owner: Owner, kept: Vec<Held>) {
        let before = self.locks_on(ino);
        let old = before.iter().filter(|h| h.owner == owner).count();
        let new = kept.iter().filter(|h| h.owner == owner).count();
        debug_assert_eq!(before.len() - old, kept.len() - new);
        self.total = self.total - old + new;
        match self.per_owner.entry(owner) {
            Entry::Occupied(mut e) => {
                let n = *e.get() - old + new;
                if n == 0 {
                    e.remove();
                } else {
                    *e.get_mut() = n;
                }
            }
            Entry::Vacant(e) => {
                if new > 0 {
                    e.insert(new);
                }
            }
        }
        if kept.is_empty() {
            self.by_ino.remove(&ino);
        } else {
            self.by_ino.insert(ino, kept);
        }
    }
}

/// `held` with `owner`'s locks on `[start, end)` replaced by the request:
/// what sticks out on either side stays, and a new lock merges with the
/// owner's adjacent locks of the same kind, as Linux's posix_lock_inode
/// does (so a lock taken byte by byte is one record, not thousands).
fn replaced(held: &[Held], owner: Owner, kind: Kind, start: u64, end: u64) -> Vec<Held> {
    let mut kept = Vec::with_capacity(held.len() + 2);
    for &h in held {
        if h.owner != owner || h.end <= start || end <= h.start {
            kept.push(h);
            continue;
        }
        if h.start < start {
            kept.push(Held { end: start, ..h });
        }
        if end < h.end {
            kept.push(Held { start: end, ..h });
        }
    }
    if kind == Kind::Unlock {
        return kept;
    }
    let mut new = Held {
        owner,
        write: kind == Kind::Write,
        start,
        end,
    };
    // What overlapped is cut away above, so only neighbours touching the
    // new range can join it.
    kept.retain(|h| {
        let joins =
            h.owner == owner && h.write == new.write && (h.end == new.start || new.end == h.start);
        if joins {
            new.start = new.start.min(h.start);
            new.end = new.end.max(h.end);
        }
        !joins
    });
    kept.push(new);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: u64 = u64::MAX;
    const P: Owner = Owner::Process(100);
    const Q: Owner = Owner::Process(200);

    fn refused_by(r: Result<(), Refused>) -> Option<Owner> {
        match r {
            Err(Refused::Conflict(b)) => Some(b.owner),
            _ => None,
        }
    }

    #[test]
    fn process_locks_never_conflict_with_each_other() {
        let mut t = LockTable::new();
        t.try_set(1, P, Kind::Write, 0, 100).unwrap();
        t.try_set(1, P, Kind::Write, 50, 200).unwrap();
        assert_eq!(t.conflict(1, P, true, 0, ALL), None);
        // One record: the second overlapped the first and merged.
        assert_eq!(t.locks_on(1).len(), 1);
        // An OFD lock conflicts with them, and is told the process.
        let r = t.try_set(1, Owner::Ofd(1), Kind::Read, 10, 20);
        assert_eq!(refused_by(r), Some(P));
        assert_eq!(
            t.conflict(1, Owner::Ofd(1), false, 10, 20).unwrap().pid,
            100
        );
        t.release_process_on(1, 100);
        t.try_set(1, Owner::Ofd(1), Kind::Read, 10, 20).unwrap();
        t.release_owner(Owner::Ofd(1));
        assert!(t.is_empty());
    }

    #[test]
    fn unlocking_the_middle_splits_a_lock() {
        let mut t = LockTable::new();
        let (a, b) = (Owner::Ofd(7), Owner::Ofd(8));
        t.try_set(2, a, Kind::Write, 0, 100).unwrap();
        t.try_set(2, a, Kind::Unlock, 40, 60).unwrap();
        assert_eq!(t.held_by(a), 2);
        assert!(t.conflict(2, b, false, 45, 55).is_none());
        let c = t.conflict(2, b, false, 0, 100).unwrap();
        assert_eq!((c.start, c.end, c.pid), (0, 40, -1));
        let c = t.conflict(2, b, false, 50, 100).unwrap();
        assert_eq!((c.start, c.end), (60, 100));
        // Readers share; a writer does not.
        t.try_set(2, a, Kind::Read, 0, 100).unwrap();
        t.try_set(2, b, Kind::Read, 0, 10).unwrap();
        assert_eq!(refused_by(t.try_set(2, b, Kind::Write, 0, 10)), Some(a));
        t.release_owner(a);
        t.try_set(2, b, Kind::Write, 0, 10).unwrap();
        t.release_owner(b);
        assert!(t.is_empty());
    }

    #[test]
    fn flock_is_its_own_world() {
        let mut t = LockTable::new();
        t.try_set(3, Owner::Flock(1), Kind::Write, 0, ALL).unwrap();
        t.try_set(3, P, Kind::Write, 0, ALL).unwrap();
        assert_eq!(
            refused_by(t.try_set(3, Owner::Ofd(1), Kind::Write, 0, ALL)),
            Some(P)
        );
        assert_eq!(
            refused_by(t.try_set(3, Owner::Flock(2), Kind::Read, 0, ALL)),
            Some(Owner::Flock(1))
        );
        t.release_owner(Owner::Flock(1));
        t.try_set(3, Owner::Flock(2), Kind::Read, 0, ALL).unwrap();
        t.release_owner(Owner::Flock(2));
        t.release_process_on(3, 100);
        assert!(t.is_empty());
    }

    #[test]
    fn adjacent_locks_of_one_owner_merge() {
        let mut t = LockTable::new();
        for b in 0..5000 {
            t.try_set(7, P, Kind::Write, b, b + 1).unwrap();
        }
        assert_eq!(t.locks_on(7).len(), 1);
        let c = t.conflict(7, Owner::Ofd(1), false, 1, 2).unwrap();
        assert_eq!((c.start, c.end), (0, 5000));
        // A read lock in the middle splits it; writing it again rejoins.
        t.try_set(7, P, Kind::Read, 10, 20).unwrap();
        assert_eq!(t.locks_on(7).len(), 3);
        t.try_set(7, P, Kind::Write, 10, 20).unwrap();
        assert_eq!(t.locks_on(7).len(), 1);
        assert_eq!((t.len(), t.held_by(P)), (1, 1));
        t.release_process_on(7, 100);
        assert!(t.is_empty());
    }

    #[test]
    fn converting_a_flock_lock_lets_the_old_one_go_first() {
        let mut t = LockTable::new();
        let (a, b) = (Owner::Flock(1), Owner::Flock(2));
        t.try_set(8, a, Kind::Read, 0, ALL).unwrap();
        t.try_set(8, b, Kind::Read, 0, ALL).unwrap();
        // Asking again for what is held changes nothing.
        t.try_set(8, a, Kind::Read, 0, ALL).unwrap();
        assert_eq!(t.len(), 2);
        // a cannot upgrade while b shares, but its shared lock is gone...
        assert_eq!(refused_by(t.try_set(8, a, Kind::Write, 0, ALL)), Some(b));
        assert_eq!(t.held_by(a), 0);
        // ...so b's upgrade succeeds.
        t.try_set(8, b, Kind::Write, 0, ALL).unwrap();
        t.release_owner(b);
        assert!(t.is_empty());
    }

    #[test]
    fn the_lowest_conflict_is_reported() {
        let mut t = LockTable::new();
        let a = Owner::Ofd(1);
        t.try_set(9, a, Kind::Write, 55, 60).unwrap();
        t.try_set(9, a, Kind::Write, 18, 30).unwrap();
        let c = t.conflict(9, Owner::Ofd(2), true, 0, 100).unwrap();
        assert_eq!((c.start, c.end), (18, 30));
        match t.try_set(9, Owner::Ofd(2), Kind::Read, 0, 100) {
            Err(Refused::Conflict(b)) => assert_eq!((b.start, b.end), (18, 30)),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn two_processes_posix_locks_conflict() {
        let mut t = LockTable::new();
        t.try_set(10, P, Kind::Read, 0, 100).unwrap();
        // Reads share across processes; a write waits, told the pid.
        t.try_set(10, Q, Kind::Read, 50, 150).unwrap();
        let r = t.try_set(10, Q, Kind::Write, 0, 10);
        assert_eq!(refused_by(r), Some(P));
        let c = t.conflict(10, Q, true, 0, 200).unwrap();
        assert_eq!((c.pid, c.start, c.end, c.write), (100, 0, 100, false));
        // Q's failed upgrade left its read lock as it was.
        assert_eq!(t.locks_on(10).iter().filter(|h| h.owner == Q).count(), 1);
        // P lets go by closing any descriptor of the file.
        t.release_process_on(10, 100);
        t.try_set(10, Q, Kind::Write, 0, 10).unwrap();
        // Q's locks stay on another file's close.
        t.release_process_on(11, 200);
        assert_eq!(t.held_by(Q), 2);
    }

    #[test]
    fn ofd_locks_meet_posix_locks_of_every_process() {
        let mut t = LockTable::new();
        let d = Owner::Ofd(42);
        t.try_set(12, d, Kind::Write, 0, 10).unwrap();
        for pid in [100, 200] {
            let c = t.conflict(12, Owner::Process(pid), false, 5, 6).unwrap();
            assert_eq!((c.owner, c.pid), (d, -1));
        }
        t.try_set(12, Q, Kind::Write, 10, 20).unwrap();
        assert_eq!(refused_by(t.try_set(12, d, Kind::Read, 0, ALL)), Some(Q));
        // A description shared by two processes (after a fork) is one
        // owner: either process may extend or drop its lock.
        t.try_set(12, d, Kind::Write, 0, 10).unwrap();
        assert_eq!(t.held_by(d), 1);
        // A process's exit does not take an OFD lock with it.
        t.release_process(200);
        assert_eq!(t.held_by(d), 1);
        assert!(t.conflict(12, P, false, 0, ALL).is_some());
        t.release_owner(d);
        assert!(t.is_empty());
    }

    #[test]
    fn release_process_frees_everything_of_a_pid() {
        let mut t = LockTable::new();
        for ino in 20..30 {
            t.try_set(ino, P, Kind::Write, 0, 5).unwrap();
            t.try_set(ino, P, Kind::Read, 10, 15).unwrap();
            t.try_set(ino, Q, Kind::Read, 20, 25).unwrap();
        }
        assert_eq!((t.held_by(P), t.held_by(Q), t.len()), (20, 10, 30));
        t.release_process(100);
        assert_eq!((t.held_by(P), t.len()), (0, 10));
        assert!(t.iter().all(|(_, h)| h.owner == Q));
        for ino in 20..30 {
            t.try_set(ino, Q, Kind::Write, 0, ALL).unwrap();
        }
        t.release_process(200);
        assert!(t.is_empty());
    }

    #[test]
    fn caps_refuse_growth_but_never_a_release() {
        let mut t = LockTable::with_limits(Limits {
            per_owner: 3,
            total: 5,
        });
        for i in 0..3 {
            t.try_set(30, P, Kind::Write, i * 10, i * 10 + 1).unwrap();
        }
        assert_eq!(
            t.try_set(30, P, Kind::Write, 100, 101),
            Err(Refused::TooMany)
        );
        // Merging into a held record adds none.
        t.try_set(30, P, Kind::Write, 1, 2).unwrap();
        // A split unlock adds one: refused at the cap...
        t.try_set(30, P, Kind::Write, 20, 30).unwrap();
        assert_eq!(
            t.try_set(30, P, Kind::Unlock, 22, 23),
            Err(Refused::TooMany)
        );
        // ...but dropping a whole record is always allowed.
        t.try_set(30, P, Kind::Unlock, 0, 2).unwrap();
        assert_eq!(t.held_by(P), 2);
        // The total cap counts every owner.
        t.try_set(30, Q, Kind::Read, 200, 201).unwrap();
        t.try_set(30, Q, Kind::Read, 300, 301).unwrap();
        t.try_set(30, Q, Kind::Read, 400, 401).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(
            t.try_set(30, Owner::Ofd(1), Kind::Read, 500, 501),
            Err(Refused::TooMany)
        );
    }

    #[test]
    fn rekey_moves_locks_and_counts() {
        let mut t = LockTable::new();
        t.try_set(40, Owner::Ofd(1), Kind::Write, 0, 10).unwrap();
        t.try_set(40, Owner::Flock(1), Kind::Read, 0, ALL).unwrap();
        t.rekey(|o| match o {
            Owner::Ofd(1) => Owner::Ofd(9),
            Owner::Flock(1) => Owner::Flock(9),
            o => o,
        });
        assert_eq!((t.held_by(Owner::Ofd(1)), t.held_by(Owner::Ofd(9))), (0, 1));
        t.release_owner(Owner::Flock(9));
        t.release_owner(Owner::Ofd(9));
        assert!(t.is_empty());
    }

    #[test]
    fn empty_ranges_ask_for_nothing() {
        let mut t = LockTable::new();
        t.try_set(50, P, Kind::Write, 5, 5).unwrap();
        assert!(t.is_empty());
        t.try_set(50, P, Kind::Write, 0, 10).unwrap();
        t.try_set(50, P, Kind::Unlock, 5, 5).unwrap();
        assert_eq!(t.locks_on(50).len(), 1);
    }
}

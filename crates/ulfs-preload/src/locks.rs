//! File locks on image files, emulated within the process: POSIX record
//! locks (`F_SETLK`, `F_SETLKW`, `F_GETLK`), open-file-description locks
//! (`F_OFD_*`) and `flock`. One process uses an image at a time (the image
//! lock), so only the owners inside this process can conflict, and the
//! rules are Linux's for them:
//!
//! - POSIX locks belong to the process: they never conflict with each
//!   other, a new one replaces the process's old ones on the range it
//!   covers, and closing *any* descriptor of the file drops them all.
//! - OFD locks belong to an open file description: they conflict with
//!   other descriptions' locks and with the process's POSIX locks, and go
//!   when the description's last descriptor is closed.
//! - `flock` locks belong to an open file description, cover the whole
//!   file, and never interact with the other two kinds.
//!
//! A waiting request (`F_SETLKW`, `flock` without `LOCK_NB`) waits for
//! another thread to let go, as on Linux.

use std::collections::HashMap;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};

use ulfs::{Errno, Ino};

/// Who holds a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Process,
    Ofd(u64),
    Flock(u64),
}

/// A held range, `[start, end)`; `end == u64::MAX` runs to infinity.
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

struct Table {
    by_ino: Mutex<HashMap<Ino, Vec<Held>>>,
    released: Condvar,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| Table {
    by_ino: Mutex::new(HashMap::new()),
    released: Condvar::new(),
});

fn table() -> MutexGuard<'static, HashMap<Ino, Vec<Held>>> {
    TABLE.by_ino.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `owner` asking for `write` on `[start, end)` conflicts with `h`.
fn conflicts(owner: Owner, write: bool, start: u64, end: u64, h: &Held) -> bool {
    let flock = |o: Owner| matches!(o, Owner::Flock(_));
    if h.owner == owner
        || flock(owner) != flock(h.owner)
        || (owner == Owner::Process && h.owner == Owner::Process)
    {
        return false;
    }
    start < h.end && h.start < end && (write || h.write)
}

/// The first lock another owner holds that conflicts with the request.
pub fn conflict(ino: Ino, owner: Owner, write: bool, start: u64, end: u64) -> Option<Held> {
    let t = table();
    t.get(&ino)?
        .iter()
        .find(|h| conflicts(owner, write, start, end, h))
        .copied()
}

/// Sets (or with `Kind::Unlock` clears) `owner`'s lock on `[start, end)`.
/// A conflict is EAGAIN, or with `wait` waits until it is gone.
pub fn set(
    ino: Ino,
    owner: Owner,
    kind: Kind,
    start: u64,
    end: u64,
    wait: bool,
) -> Result<(), Errno> {
    let mut t = table();
    if kind != Kind::Unlock {
        let write = kind == Kind::Write;
        loop {
            let busy = t
                .get(&ino)
                .is_some_and(|v| v.iter().any(|h| conflicts(owner, write, start, end, h)));
            if !busy {
                break;
            }
            if !wait {
                return Err(Errno::EAGAIN);
            }
            t = TABLE.released.wait(t).unwrap_or_else(|e| e.into_inner());
        }
    }
    let held = t.entry(ino).or_default();
    // The owner's locks on the range are replaced: what sticks out on
    // either side stays.
    let mut kept = Vec::with_capacity(held.len() + 2);
    for h in held.drain(..) {
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
    if kind != Kind::Unlock {
        kept.push(Held {
            owner,
            write: kind == Kind::Write,
            start,
            end,
        });
    }
    *held = kept;
    if held.is_empty() {
        t.remove(&ino);
    }
    TABLE.released.notify_all();
    Ok(())
}

/// Drops every lock `owner` holds (the last descriptor of its description
/// closed).
/// The open file descriptions were opened again (the image was handed
/// over and mounted again): their locks follow them to their new ids,
/// all at once (`moved` maps old id to new).
pub fn rekey(moved: &std::collections::HashMap<u64, u64>) {
    if moved.is_empty() {
        return;
    }
    let mut t = table();
    for held in t.values_mut() {
        for h in held.iter_mut() {
            h.owner = match h.owner {
                Owner::Ofd(id) => Owner::Ofd(*moved.get(&id).unwrap_or(&id)),
                Owner::Flock(id) => Owner::Flock(*moved.get(&id).unwrap_or(&id)),
                o => o,
            };
        }
    }
}

pub fn release_owner(owner: Owner) {
    let mut t = table();
    t.retain(|_, v| {
        v.retain(|h| h.owner != owner);
        !v.is_empty()
    });
    TABLE.released.notify_all();
}

/// Drops the process's POSIX locks on `ino` (any descriptor of it closed).
pub fn release_process(ino: Ino) {
    let mut t = table();
    if let Some(v) = t.get_mut(&ino) {
        v.retain(|h| h.owner != Owner::Process);
        if v.is_empty() {
            t.remove(&ino);
        }
    }
    TABLE.released.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test uses its own inode numbers: the table is process-wide.

    #[test]
    fn process_locks_never_conflict_with_each_other() {
        let ino = 1001;
        set(ino, Owner::Process, Kind::Write, 0, 100, false).unwrap();
        set(ino, Owner::Process, Kind::Write, 50, 200, false).unwrap();
        assert_eq!(conflict(ino, Owner::Process, true, 0, u64::MAX), None);
        // An OFD lock conflicts with them.
        assert_eq!(
            set(ino, Owner::Ofd(1), Kind::Read, 10, 20, false),
            Err(Errno::EAGAIN)
        );
        release_process(ino);
        set(ino, Owner::Ofd(1), Kind::Read, 10, 20, false).unwrap();
        release_owner(Owner::Ofd(1));
    }

    #[test]
    fn unlocking_the_middle_splits_a_lock() {
        let ino = 1002;
        set(ino, Owner::Ofd(7), Kind::Write, 0, 100, false).unwrap();
        set(ino, Owner::Ofd(7), Kind::Unlock, 40, 60, false).unwrap();
        assert!(conflict(ino, Owner::Ofd(8), false, 45, 55).is_none());
        let c = conflict(ino, Owner::Ofd(8), false, 0, 100).unwrap();
        assert_eq!((c.start, c.end), (0, 40));
        let c = conflict(ino, Owner::Ofd(8), false, 50, 100).unwrap();
        assert_eq!((c.start, c.end), (60, 100));
        // Readers share; a writer does not.
        set(ino, Owner::Ofd(7), Kind::Read, 0, 100, false).unwrap();
        set(ino, Owner::Ofd(8), Kind::Read, 0, 10, false).unwrap();
        assert_eq!(
            set(ino, Owner::Ofd(8), Kind::Write, 0, 10, false),
            Err(Errno::EAGAIN)
        );
        release_owner(Owner::Ofd(7));
        set(ino, Owner::Ofd(8), Kind::Write, 0, 10, false).unwrap();
        release_owner(Owner::Ofd(8));
    }

    #[test]
    fn flock_is_its_own_world() {
        let ino = 1003;
        set(ino, Owner::Flock(1), Kind::Write, 0, u64::MAX, false).unwrap();
        set(ino, Owner::Process, Kind::Write, 0, u64::MAX, false).unwrap();
        set(ino, Owner::Ofd(1), Kind::Write, 0, u64::MAX, false).unwrap_err();
        assert_eq!(
            set(ino, Owner::Flock(2), Kind::Read, 0, u64::MAX, false),
            Err(Errno::EAGAIN)
        );
        release_owner(Owner::Flock(1));
        set(ino, Owner::Flock(2), Kind::Read, 0, u64::MAX, false).unwrap();
        release_owner(Owner::Flock(2));
        release_process(ino);
    }

    #[test]
    fn a_waiting_lock_is_granted_when_another_thread_lets_go() {
        let ino = 1004;
        set(ino, Owner::Ofd(1), Kind::Write, 0, 10, false).unwrap();
        let t = std::thread::spawn(move || set(ino, Owner::Ofd(2), Kind::Write, 0, 10, true));
        std::thread::sleep(std::time::Duration::from_millis(20));
        release_owner(Owner::Ofd(1));
        t.join().unwrap().unwrap();
        release_owner(Owner::Ofd(2));
    }
}

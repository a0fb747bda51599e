//! File locks on image files: POSIX record locks (`F_SETLK`, `F_SETLKW`,
//! `F_GETLK`), open-file-description locks (`F_OFD_*`) and `flock`, by
//! Linux's rules:
//!
//! - POSIX locks belong to the process: its own never conflict with each
//!   other, a new one replaces the process's old ones on the range it
//!   covers, and closing *any* descriptor of the file drops them all. They
//!   survive an exec and are not inherited by a fork's child.
//! - OFD locks belong to an open file description: they conflict with
//!   other descriptions' locks and with POSIX locks of any process, and go
//!   when the description's last descriptor is closed.
//! - `flock` locks belong to an open file description, cover the whole
//!   file, and never interact with the other two kinds.
//!
//! This process's locks are kept here (owners by description id); the
//! other processes' of the run come from the run's shared memory
//! (`shared.rs`): a process writes its locks there as it lets go of the
//! image (`publish`) and the next to mount reads them (`load`). Only the
//! process holding the image does either, and every lock call is made
//! holding it, so what a call sees of the others is current. Locks of a
//! process that died without taking them back (killed) are dropped when
//! the next process loads them.
//!
//! A waiting request (`F_SETLKW`, `flock` without `LOCK_NB`) is refused
//! here with who is in the way; the caller (`io.rs`) waits outside the
//! file system's lock: for another thread on `wait_for_release`, for
//! another process by handing the image over between tries.
//!
//! Approximations: a lock belongs to the process that took it. A fork's
//! child does not share its parent's OFD and `flock` locks (on Linux the
//! description, and so the lock, is shared): the lock stays the parent's,
//! and the child meets it as another process's. OFD and `flock` locks held
//! before an exec stay until the process exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use ulfs::Ino;

use crate::shared::{self, LOCK_WORDS};

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

/// Which rules a lock follows (the owner kinds, without their ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Posix = 0,
    Ofd = 1,
    Flock = 2,
}

fn class(o: Owner) -> Class {
    match o {
        Owner::Process => Class::Posix,
        Owner::Ofd(_) => Class::Ofd,
        Owner::Flock(_) => Class::Flock,
    }
}

/// A lock of another process of the run (or this one's before its exec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Foreign {
    pid: u32,
    class: Class,
    write: bool,
    ino: Ino,
    start: u64,
    end: u64,
    /// The description's id in its process (0 for POSIX locks).
    id: u64,
}

impl Foreign {
    /// In shared memory: pid, class and mode in word 0, then the inode,
    /// the range and the id.
    fn encode(&self) -> [u64; LOCK_WORDS] {
        [
            self.pid as u64 | (self.class as u64) << 32 | (self.write as u64) << 40,
            self.ino,
            self.start,
            self.end,
            self.id,
        ]
    }

    /// None for a record no process of this library writes.
    fn decode(w: &[u64; LOCK_WORDS]) -> Option<Foreign> {
        let class = match (w[0] >> 32) & 0xff {
            0 => Class::Posix,
            1 => Class::Ofd,
            2 => Class::Flock,
            _ => return None,
        };
        (w[0] >> 41 == 0 && w[2] < w[3]).then_some(Foreign {
            pid: w[0] as u32,
            class,
            write: (w[0] >> 40) & 1 == 1,
            ino: w[1],
            start: w[2],
            end: w[3],
            id: w[4],
        })
    }

    fn of(pid: u32, ino: Ino, h: &Held) -> Foreign {
        Foreign {
            pid,
            class: class(h.owner),
            write: h.write,
            ino,
            start: h.start,
            end: h.end,
            id: match h.owner {
                Owner::Process => 0,
                Owner::Ofd(id) | Owner::Flock(id) => id,
            },
        }
    }
}

/// The other processes' locks, as loaded at this process's last mount.
static FOREIGN: Mutex<Vec<Foreign>> = Mutex::new(Vec::new());
/// This process's OFD and `flock` locks from before its exec (their
/// descriptions' ids are gone): kept, and published, until it exits.
static INHERITED: Mutex<Vec<Foreign>> = Mutex::new(Vec::new());
/// The first load of this program has taken back the process's locks
/// from before its exec.
static LOADED_ONCE: AtomicBool = AtomicBool::new(false);
/// The run's memory may hold locks of this process.
static PUBLISHED: AtomicBool = AtomicBool::new(false);

fn guard<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn me() -> u32 {
    std::process::id()
}

/// Whether `class` asking for `write` on `[start, end)` meets `other`'s
/// lock: the same world (`flock` or record locks), overlapping, and one
/// of them a write lock.
fn meets(class: Class, write: bool, start: u64, end: u64, other: &Foreign) -> bool {
    (class == Class::Flock) == (other.class == Class::Flock)
        && start < other.end
        && other.start < end
        && (write || other.write)
}

/// Whether `owner` asking for `write` on `[start, end)` conflicts with `h`
/// (a lock of this process).
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

/// What is in a request's way, for `F_GETLK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    pub write: bool,
    pub start: u64,
    pub end: u64,
    /// The holding process for a POSIX lock of another process; -1 for a
    /// lock of an open file description (as Linux reports it).
    pub pid: i32,
}

/// The first lock of another owner that conflicts with the request.
pub fn conflict(ino: Ino, owner: Owner, write: bool, start: u64, end: u64) -> Option<Blocking> {
    let local = table().get(&ino).and_then(|v| {
        v.iter()
            .find(|h| conflicts(owner, write, start, end, h))
            .map(|h| Blocking {
                write: h.write,
                start: h.start,
                end: h.end,
                pid: -1,
            })
    });
    local.or_else(|| {
        guard(&FOREIGN)
            .iter()
            .find(|f| f.ino == ino && meets(class(owner), write, start, end, f))
            .map(|f| Blocking {
                write: f.write,
                start: f.start,
                end: f.end,
                pid: if f.class == Class::Posix {
                    f.pid as i32
                } else {
                    -1
                },
            })
    })
}

/// Why a lock was not set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another owner in this process holds a conflicting lock.
    Local,
    /// Another process of the run does.
    Foreign,
    /// The run holds as many locks as its shared memory has room for.
    TooMany,
}

/// Sets (or with `Kind::Unlock` clears) `owner`'s lock on `[start, end)`
/// if nothing is in the way. Call holding the image.
pub fn try_set(ino: Ino, owner: Owner, kind: Kind, start: u64, end: u64) -> Result<(), Refused> {
    let mut t = table();
    if kind != Kind::Unlock {
        let write = kind == Kind::Write;
        if t.get(&ino)
            .is_some_and(|v| v.iter().any(|h| conflicts(owner, write, start, end, h)))
        {
            return Err(Refused::Local);
        }
        let foreign = guard(&FOREIGN);
        if foreign
            .iter()
            .any(|f| f.ino == ino && meets(class(owner), write, start, end, f))
        {
            return Err(Refused::Foreign);
        }
        let mine: usize = t.values().map(Vec::len).sum();
        if shared::has_lock_area()
            && foreign.len() + guard(&INHERITED).len() + mine + 2 > shared::LOCK_RECORDS
        {
            return Err(Refused::TooMany);
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

/// Waits (at most `limit`) for a lock of this process to be let go.
pub fn wait_for_release(limit: Duration) {
    let t = table();
    let _ = TABLE.released.wait_timeout(t, limit);
}

/// The open file descriptions were opened again (the image was handed
/// over and mounted again): their locks follow them to their new ids,
/// all at once (`moved` maps old id to new).
pub fn rekey(moved: &HashMap<u64, u64>) {
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

/// Drops every lock `owner` holds (the last descriptor of its description
/// closed).
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

/// In a fork's child: the parent's locks stay the parent's (its POSIX
/// locks are not inherited; see the module comment for the others).
pub fn in_child() {
    table().clear();
    guard(&INHERITED).clear();
    guard(&FOREIGN).clear();
    PUBLISHED.store(false, Ordering::Release);
}

/// Whether process `pid` still runs (a zombie does not: its locks went
/// with its exit).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 || crate::errno() == libc::EPERM;
    exists
        && std::fs::read(format!("/proc/{pid}/stat")).map_or(true, |s| {
            // "pid (comm) S ...": the state follows the last ')'.
            let state = s
                .iter()
                .rposition(|&b| b == b')')
                .and_then(|i| s.get(i + 2));
            state != Some(&b'Z')
        })
}

/// Right after mounting: reads the other processes' locks from the run's
/// memory (dropping those of processes that are gone). The first load
/// after an exec takes back the process's own: its POSIX locks, which an
/// exec keeps, and its other locks as `INHERITED`.
pub fn load() {
    if !shared::has_lock_area() {
        return;
    }
    let errno = crate::errno();
    let first = !LOADED_ONCE.swap(true, Ordering::AcqRel);
    let me = me();
    let mut live: HashMap<u32, bool> = HashMap::new();
    let mut foreign = Vec::new();
    for f in shared::read_locks().iter().filter_map(Foreign::decode) {
        if f.pid == me {
            if first {
                take_back(f);
            }
            continue;
        }
        if *live.entry(f.pid).or_insert_with(|| alive(f.pid)) {
            foreign.push(f);
        }
    }
    *guard(&FOREIGN) = foreign;
    crate::set_errno(errno);
}

/// One of this process's locks from before its exec.
fn take_back(f: Foreign) {
    PUBLISHED.store(true, Ordering::Release);
    if f.class == Class::Posix {
        table().entry(f.ino).or_default().push(Held {
            owner: Owner::Process,
            write: f.write,
            start: f.start,
            end: f.end,
        });
    } else {
        guard(&INHERITED).push(f);
    }
}

/// As the process lets go of the image: writes its locks into the run's
/// memory beside the others' (`exiting`: takes them all out).
pub fn publish(exiting: bool) {
    if !shared::has_lock_area() {
        return;
    }
    let me = me();
    let mut mine: Vec<Foreign> = Vec::new();
    if !exiting {
        for (ino, v) in table().iter() {
            mine.extend(v.iter().map(|h| Foreign::of(me, *ino, h)));
        }
        mine.extend(guard(&INHERITED).iter().copied());
    }
    if mine.is_empty() && !PUBLISHED.load(Ordering::Acquire) {
        return;
    }
    let mut all: Vec<[u64; LOCK_WORDS]> = shared::read_locks()
        .into_iter()
        .filter(|w| Foreign::decode(w).is_some_and(|f| f.pid != me))
        .collect();
    all.extend(mine.iter().map(Foreign::encode));
    if !shared::write_locks(&all) {
        crate::warn(
            "ulfs run: too many record locks in the run: this process's are not seen by the others",
        );
    }
    PUBLISHED.store(!mine.is_empty(), Ordering::Release);
}

/// Whether the run's memory may hold locks of this process (which its
/// exit must take out).
pub fn published() -> bool {
    PUBLISHED.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test uses its own inode numbers: the table is process-wide.
    // No run's shared memory in a unit test: no other process's locks.

    fn set(ino: Ino, owner: Owner, kind: Kind, start: u64, end: u64) -> Result<(), Refused> {
        try_set(ino, owner, kind, start, end)
    }

    #[test]
    fn process_locks_never_conflict_with_each_other() {
        let ino = 1001;
        set(ino, Owner::Process, Kind::Write, 0, 100).unwrap();
        set(ino, Owner::Process, Kind::Write, 50, 200).unwrap();
        assert_eq!(conflict(ino, Owner::Process, true, 0, u64::MAX), None);
        // An OFD lock conflicts with them.
        assert_eq!(
            set(ino, Owner::Ofd(1), Kind::Read, 10, 20),
            Err(Refused::Local)
        );
        release_process(ino);
        set(ino, Owner::Ofd(1), Kind::Read, 10, 20).unwrap();
        release_owner(Owner::Ofd(1));
    }

    #[test]
    fn unlocking_the_middle_splits_a_lock() {
        let ino = 1002;
        set(ino, Owner::Ofd(7), Kind::Write, 0, 100).unwrap();
        set(ino, Owner::Ofd(7), Kind::Unlock, 40, 60).unwrap();
        assert!(conflict(ino, Owner::Ofd(8), false, 45, 55).is_none());
        let c = conflict(ino, Owner::Ofd(8), false, 0, 100).unwrap();
        assert_eq!((c.start, c.end, c.pid), (0, 40, -1));
        let c = conflict(ino, Owner::Ofd(8), false, 50, 100).unwrap();
        assert_eq!((c.start, c.end), (60, 100));
        // Readers share; a writer does not.
        set(ino, Owner::Ofd(7), Kind::Read, 0, 100).unwrap();
        set(ino, Owner::Ofd(8), Kind::Read, 0, 10).unwrap();
        assert_eq!(
            set(ino, Owner::Ofd(8), Kind::Write, 0, 10),
            Err(Refused::Local)
        );
        release_owner(Owner::Ofd(7));
        set(ino, Owner::Ofd(8), Kind::Write, 0, 10).unwrap();
        release_owner(Owner::Ofd(8));
    }

    #[test]
    fn flock_is_its_own_world() {
        let ino = 1003;
        set(ino, Owner::Flock(1), Kind::Write, 0, u64::MAX).unwrap();
        set(ino, Owner::Process, Kind::Write, 0, u64::MAX).unwrap();
        set(ino, Owner::Ofd(1), Kind::Write, 0, u64::MAX).unwrap_err();
        assert_eq!(
            set(ino, Owner::Flock(2), Kind::Read, 0, u64::MAX),
            Err(Refused::Local)
        );
        release_owner(Owner::Flock(1));
        set(ino, Owner::Flock(2), Kind::Read, 0, u64::MAX).unwrap();
        release_owner(Owner::Flock(2));
        release_process(ino);
    }

    #[test]
    fn a_waiting_lock_is_granted_when_another_thread_lets_go() {
        let ino = 1004;
        set(ino, Owner::Ofd(1), Kind::Write, 0, 10).unwrap();
        let t = std::thread::spawn(move || {
            while set(ino, Owner::Ofd(2), Kind::Write, 0, 10) == Err(Refused::Local) {
                wait_for_release(Duration::from_millis(20));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        release_owner(Owner::Ofd(1));
        t.join().unwrap();
        assert!(conflict(ino, Owner::Ofd(3), false, 0, 1).is_some());
        release_owner(Owner::Ofd(2));
    }

    #[test]
    fn a_record_survives_its_trip_through_shared_memory() {
        let f = Foreign {
            pid: 4242,
            class: Class::Ofd,
            write: true,
            ino: 77,
            start: 5,
            end: u64::MAX,
            id: 9,
        };
        assert_eq!(Foreign::decode(&f.encode()), Some(f));
        // Garbage another process could not have written is ignored.
        assert_eq!(Foreign::decode(&[4242 | 7 << 32, 77, 5, 6, 0]), None);
        assert_eq!(Foreign::decode(&[4242, 77, 6, 5, 0]), None);
    }

    #[test]
    fn other_processes_posix_locks_conflict_and_name_their_pid() {
        let ino = 1005;
        let theirs = Foreign {
            pid: 4243,
            class: Class::Posix,
            write: false,
            ino,
            start: 0,
            end: 100,
            id: 0,
        };
        guard(&FOREIGN).push(theirs);
        // Another process's read lock: reads share, a write waits.
        set(ino, Owner::Process, Kind::Read, 0, 10).unwrap();
        assert_eq!(
            set(ino, Owner::Process, Kind::Write, 50, 60),
            Err(Refused::Foreign)
        );
        let c = conflict(ino, Owner::Process, true, 0, 10).unwrap();
        assert_eq!((c.pid, c.start, c.end, c.write), (4243, 0, 100, false));
        // flock is its own world.
        set(ino, Owner::Flock(5), Kind::Write, 0, u64::MAX).unwrap();
        guard(&FOREIGN).retain(|f| f.ino != ino);
        release_process(ino);
        release_owner(Owner::Flock(5));
    }
}

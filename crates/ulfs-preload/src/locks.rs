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
//! The rules themselves (conflicts, replacement with merge and split,
//! what a close releases) are `ulfs::posix::locks`, shared with the
//! server; this module holds this process's `LockTable` (its POSIX locks
//! as `Process(own pid)`, its descriptions' by description id) and adds
//! what only a run of separate processes needs. The other processes'
//! locks of the run come from the run's shared memory
//! (`shared.rs`): a process writes its locks there as it lets go of the
//! image (`publish`) and the next to mount reads them (`load`). Only the
//! process holding the image does either, and every lock call is made
//! holding it, so what a call sees of the others is current. Locks of a
//! process that died without taking them back (killed) are dropped when
//! the next process loads them.
//!
//! A waiting request (`F_SETLKW`, `flock` without `LOCK_NB`) is refused
//! here with who is in the way; the caller (`io.rs`) waits outside the
//! file system's lock, in short sleeps a signal can end: for another
//! thread, or for another process, letting the image go to it.
//!
//! Approximations: a lock belongs to the process that took it. A fork's
//! child does not share its parent's OFD and `flock` locks (on Linux the
//! description, and so the lock, is shared): the lock stays the parent's,
//! and the child meets it as another process's. OFD and `flock` locks held
//! before an exec stay until the process exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use ulfs::Ino;
use ulfs::posix::locks::{self as rules, Held, Limits, LockTable};

use crate::shared::{self, LOCK_WORDS};

pub use ulfs::posix::locks::Kind;

/// Who holds a lock, as this process names its own: its POSIX locks, or
/// one of its open file descriptions' (by description id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    Process,
    Ofd(u64),
    Flock(u64),
}

impl Owner {
    /// The table's name for it: the process by its pid.
    fn rules(self) -> rules::Owner {
        match self {
            Owner::Process => rules::Owner::Process(std::process::id()),
            Owner::Ofd(id) => rules::Owner::Ofd(id),
            Owner::Flock(id) => rules::Owner::Flock(id),
        }
    }
}

/// This process's locks.
static TABLE: LazyLock<Mutex<LockTable>> = LazyLock::new(Default::default);

fn table() -> MutexGuard<'static, LockTable> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which rules a lock follows (the owner kinds, without their ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Posix = 0,
    Ofd = 1,
    Flock = 2,
    /// Not a lock: a shared writable mapping of the file (`mmap.rs`
    /// refuses a second process one), published the same way.
    Mapping = 3,
}

fn class(o: rules::Owner) -> Class {
    match o {
        rules::Owner::Process(_) => Class::Posix,
        rules::Owner::Ofd(_) => Class::Ofd,
        rules::Owner::Flock(_) => Class::Flock,
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
    /// When the process started (`/proc/PID/stat`'s start time; 0 where
    /// that cannot be read): a later process that reuses the pid is not
    /// the holder.
    born: u64,
}

impl Foreign {
    /// In shared memory: pid, class and mode in word 0, then the inode,
    /// the range and the holder's start time.
    fn encode(&self) -> [u64; LOCK_WORDS] {
        [
            self.pid as u64 | (self.class as u64) << 32 | (self.write as u64) << 40,
            self.ino,
            self.start,
            self.end,
            self.born,
        ]
    }

    /// None for a record no process of this library writes.
    fn decode(w: &[u64; LOCK_WORDS]) -> Option<Foreign> {
        let class = match (w[0] >> 32) & 0xff {
            0 => Class::Posix,
            1 => Class::Ofd,
            2 => Class::Flock,
            3 => Class::Mapping,
            _ => return None,
        };
        (w[0] >> 41 == 0 && w[2] < w[3]).then_some(Foreign {
            pid: w[0] as u32,
            class,
            write: (w[0] >> 40) & 1 == 1,
            ino: w[1],
            start: w[2],
            end: w[3],
            born: w[4],
        })
    }

    fn mine(ino: Ino, h: &Held) -> Foreign {
        let (pid, born) = me();
        Foreign {
            pid,
            class: class(h.owner),
            write: h.write,
            ino,
            start: h.start,
            end: h.end,
            born,
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

/// This process: its pid and start time (read once per pid; atomics, not
/// a mutex, so that a fork cannot leave one held in the child).
fn me() -> (u32, u64) {
    static PID: AtomicU32 = AtomicU32::new(0);
    static BORN: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    if PID.load(Ordering::Acquire) != pid {
        BORN.store(start_time(pid).unwrap_or(0), Ordering::Release);
        PID.store(pid, Ordering::Release);
    }
    (pid, BORN.load(Ordering::Acquire))
}

/// A process's start time and whether it is a zombie, from
/// `/proc/PID/stat` ("pid (comm) S ... starttime ...": the state is the
/// first field after the name, the start time the twentieth).
fn proc_stat(pid: u32) -> Option<(u64, bool)> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.iter().rposition(|&b| b == b')')? + 1..];
    let mut fields = after.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let zombie = fields.next()? == b"Z";
    let start = std::str::from_utf8(fields.nth(18)?).ok()?.parse().ok()?;
    Some((start, zombie))
}

fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(start, _)| start)
}

/// Whether `class` asking for `write` on `[start, end)` meets `other`'s
/// lock: the same world (`flock` or record locks), overlapping, and one
/// of them a write lock.
fn meets(class: Class, write: bool, start: u64, end: u64, other: &Foreign) -> bool {
    other.class != Class::Mapping
        && (class == Class::Flock) == (other.class == Class::Flock)
        && start < other.end
        && other.start < end
        && (write || other.write)
}

/// What is in a request's way, for `F_GETLK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    pub write: bool,
    pub start: u64,
    pub end: u64,
    /// The holding process for a POSIX lock; -1 for a lock of an open
    /// file description (as Linux reports it).
    pub pid: i32,
}

/// The first lock of another owner that conflicts with the request.
pub fn conflict(ino: Ino, owner: Owner, write: bool, start: u64, end: u64) -> Option<Blocking> {
    let owner = owner.rules();
    let local = table()
        .conflict(ino, owner, write, start, end)
        .map(|b| Blocking {
            write: b.write,
            start: b.start,
            end: b.end,
            pid: b.pid,
        });
    let foreign = guard(&FOREIGN);
    let others = foreign
        .iter()
        .filter(|f| f.ino == ino && meets(class(owner), write, start, end, f) && alive(f))
        .map(|f| Blocking {
            write: f.write,
            start: f.start,
            end: f.end,
            pid: if f.class == Class::Posix {
                f.pid as i32
            } else {
                -1
            },
        });
    // The lowest in the file, as Linux's list is ordered.
    local.into_iter().chain(others).min_by_key(|b| b.start)
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
    let owner = owner.rules();
    let write = kind == Kind::Write;
    let flock = class(owner) == Class::Flock;
    // The table refuses what this process's own locks are in the way of;
    // the other processes' are checked here, and only when this
    // process's are not in the way (so `Local` wins, as a waiter for
    // another thread need not give the image away). A `flock` request
    // for the mode already held is granted without looking.
    let held = |t: &LockTable| {
        t.locks_on(ino)
            .iter()
            .any(|h| h.owner == owner && h.write == write)
    };
    if kind != Kind::Unlock
        && !(flock && held(&t))
        && t.conflict(ino, owner, write, start, end).is_none()
    {
        let mut foreign = guard(&FOREIGN);
        let in_the_way = |f: &Foreign| f.ino == ino && meets(class(owner), write, start, end, f);
        if foreign.iter().any(in_the_way) {
            // A holder that died since the mount (killed) holds nothing.
            let gone: Vec<(u32, u64)> = foreign
                .iter()
                .filter(|f| in_the_way(f) && !alive(f))
                .map(|f| (f.pid, f.born))
                .collect();
            foreign.retain(|f| !gone.contains(&(f.pid, f.born)));
            if foreign.iter().any(in_the_way) {
                if flock {
                    // Linux converts a flock lock by taking the old one
                    // away first, whether or not the new one can be had.
                    let _ = t.try_set(ino, owner, Kind::Unlock, 0, u64::MAX);
                }
                return Err(Refused::Foreign);
            }
        }
    }
    // The run's shared memory holds every process's records: this
    // process may add only as many as are left after the others'.
    let total = if shared::has_lock_area() {
        let others = guard(&FOREIGN).len() + guard(&INHERITED).len();
        shared::LOCK_RECORDS.saturating_sub(others)
    } else {
        usize::MAX
    };
    t.set_limits(Limits {
        total,
        ..Limits::NONE
    });
    t.try_set(ino, owner, kind, start, end)
        .map_err(|r| match r {
            rules::Refused::Conflict(_) => Refused::Local,
            rules::Refused::TooMany => Refused::TooMany,
        })
}

/// Another live process of the run that has `ino` mapped shared and
/// writable (as of this mount). Call holding the image.
pub fn mapped_elsewhere(ino: Ino) -> Option<u32> {
    guard(&FOREIGN)
        .iter()
        .find(|f| f.class == Class::Mapping && f.ino == ino && alive(f))
        .map(|f| f.pid)
}

/// Whether this process holds any lock.
pub fn holds_any() -> bool {
    !table().is_empty()
}

/// The open file descriptions were opened again (the image was handed
/// over and mounted again): their locks follow them to their new ids,
/// all at once (`moved` maps old id to new).
pub fn rekey(moved: &HashMap<u64, u64>) {
    if moved.is_empty() {
        return;
    }
    table().rekey(|o| match o {
        rules::Owner::Ofd(id) => rules::Owner::Ofd(*moved.get(&id).unwrap_or(&id)),
        rules::Owner::Flock(id) => rules::Owner::Flock(*moved.get(&id).unwrap_or(&id)),
        o => o,
    });
}

/// Drops every lock `owner` holds (the last descriptor of its description
/// closed).
pub fn release_owner(owner: Owner) {
    table().release_owner(owner.rules());
}

/// Drops the process's POSIX locks on `ino` (any descriptor of it closed).
pub fn release_process(ino: Ino) {
    let mut t = table();
    // Every close of an image file comes here: no pid asked of the
    // kernel when there is nothing to drop.
    if !t.is_empty() {
        t.release_process_on(ino, std::process::id());
    }
}

/// Runs `fork` with this module's tables held, so that no other thread
/// is half way through one in the child (whose copy of a held mutex would
/// stay held); in the child, the parent's locks stay the parent's (its
/// POSIX locks are not inherited; see the module comment for the others).
pub fn fork_guarded(fork: impl FnOnce() -> libc::pid_t) -> libc::pid_t {
    let mut t = table();
    let mut foreign = guard(&FOREIGN);
    let mut inherited = guard(&INHERITED);
    let pid = fork();
    if pid == 0 {
        t.clear();
        foreign.clear();
        inherited.clear();
        PUBLISHED.store(false, Ordering::Release);
    }
    pid
}

/// Whether the process that wrote `f` still runs: the same pid with the
/// same start time, and not a zombie (its locks went with its exit).
/// Without a readable `/proc`, whether the pid exists.
fn alive(f: &Foreign) -> bool {
    if f.born != 0 {
        return proc_stat(f.pid).is_some_and(|(start, zombie)| start == f.born && !zombie);
    }
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(f.pid as libc::pid_t, 0) } == 0;
    exists || crate::errno() == libc::EPERM
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
    let (pid, born) = me();
    let mut live: HashMap<(u32, u64), bool> = HashMap::new();
    let mut foreign = Vec::new();
    for f in shared::read_locks().iter().filter_map(Foreign::decode) {
        if (f.pid, f.born) == (pid, born) {
            if first {
                take_back(f);
            }
            continue;
        }
        if *live.entry((f.pid, f.born)).or_insert_with(|| alive(&f)) {
            foreign.push(f);
        }
    }
    *guard(&FOREIGN) = foreign;
    crate::set_errno(errno);
}

/// One of this process's locks from before its exec.
fn take_back(f: Foreign) {
    PUBLISHED.store(true, Ordering::Release);
    if f.class == Class::Mapping {
        // Mappings end at an exec.
        return;
    }
    if f.class == Class::Posix {
        table().restore(
            f.ino,
            Held {
                owner: rules::Owner::Process(f.pid),
                write: f.write,
                start: f.start,
                end: f.end,
            },
        );
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
    let mut mine: Vec<Foreign> = Vec::new();
    if !exiting {
        mine.extend(table().iter().map(|(ino, h)| Foreign::mine(ino, h)));
        mine.extend(guard(&INHERITED).iter().copied());
        let (pid, born) = me();
        mine.extend(
            crate::mmap::shared_writable_inos()
                .into_iter()
                .map(|ino| Foreign {
                    pid,
                    class: Class::Mapping,
                    write: true,
                    ino,
                    start: 0,
                    end: 1,
                    born,
                }),
        );
    }
    let foreign = guard(&FOREIGN);
    if mine.is_empty() && !PUBLISHED.load(Ordering::Acquire) && foreign.is_empty() {
        return;
    }
    // The others' as loaded at this mount (nobody else has written since:
    // this process held the image), without those of processes found
    // gone meanwhile.
    let all: Vec<[u64; LOCK_WORDS]> = foreign
        .iter()
        .chain(mine.iter())
        .map(Foreign::encode)
        .collect();
    drop(foreign);
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
    use std::time::Duration;

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
                std::thread::sleep(Duration::from_millis(5));
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
            born: 9,
        };
        assert_eq!(Foreign::decode(&f.encode()), Some(f));
        // Garbage another process could not have written is ignored.
        assert_eq!(Foreign::decode(&[4242 | 7 << 32, 77, 5, 6, 0]), None);
        assert_eq!(Foreign::decode(&[4242, 77, 6, 5, 0]), None);
    }

    /// A lock of a live process other than this one (the test runner's
    /// parent).
    fn theirs(ino: Ino, class: Class, write: bool, start: u64, end: u64) -> Foreign {
        let pid = std::os::unix::process::parent_id();
        Foreign {
            pid,
            class,
            write,
            ino,
            start,
            end,
            born: start_time(pid).unwrap_or(0),
        }
    }

    #[test]
    fn other_processes_posix_locks_conflict_and_name_their_pid() {
        let ino = 1005;
        let f = theirs(ino, Class::Posix, false, 0, 100);
        guard(&FOREIGN).push(f);
        // Another process's read lock: reads share, a write waits.
        set(ino, Owner::Process, Kind::Read, 0, 10).unwrap();
        assert_eq!(
            set(ino, Owner::Process, Kind::Write, 50, 60),
            Err(Refused::Foreign)
        );
        let c = conflict(ino, Owner::Process, true, 0, 10).unwrap();
        assert_eq!(
            (c.pid, c.start, c.end, c.write),
            (f.pid as i32, 0, 100, false)
        );
        // flock is its own world.
        set(ino, Owner::Flock(5), Kind::Write, 0, u64::MAX).unwrap();
        guard(&FOREIGN).retain(|f| f.ino != ino);
        release_process(ino);
        release_owner(Owner::Flock(5));
    }

    #[test]
    fn a_flock_upgrade_refused_by_another_process_drops_the_old_lock() {
        let ino = 1010;
        guard(&FOREIGN).push(theirs(ino, Class::Flock, false, 0, u64::MAX));
        set(ino, Owner::Flock(3), Kind::Read, 0, u64::MAX).unwrap();
        assert_eq!(
            set(ino, Owner::Flock(3), Kind::Write, 0, u64::MAX),
            Err(Refused::Foreign)
        );
        // As on Linux, the shared lock went with the failed conversion.
        assert!(table().locks_on(ino).is_empty());
        guard(&FOREIGN).retain(|f| f.ino != ino);
    }

    #[test]
    fn a_dead_holder_holds_nothing() {
        let ino = 1006;
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let born = start_time(std::process::id()).unwrap_or(0);
        guard(&FOREIGN).push(Foreign {
            pid,
            born,
            ..theirs(ino, Class::Posix, true, 0, u64::MAX)
        });
        assert_eq!(conflict(ino, Owner::Process, true, 0, 1), None);
        set(ino, Owner::Process, Kind::Write, 0, 1).unwrap();
        assert!(guard(&FOREIGN).iter().all(|f| f.ino != ino));
        // A live process with the same pid but another start time is not
        // the holder either (a pid used again).
        let f = theirs(ino, Class::Posix, true, 5, 6);
        guard(&FOREIGN).push(Foreign {
            born: f.born + 1,
            ..f
        });
        if f.born != 0 {
            set(ino, Owner::Process, Kind::Write, 5, 6).unwrap();
        }
        guard(&FOREIGN).retain(|f| f.ino != ino);
        release_process(ino);
    }

    #[test]
    fn adjacent_locks_of_one_owner_merge() {
        let ino = 1007;
        for b in 0..5000 {
            set(ino, Owner::Process, Kind::Write, b, b + 1).unwrap();
        }
        assert_eq!(table().locks_on(ino).len(), 1);
        let c = conflict(ino, Owner::Ofd(1), false, 1, 2).unwrap();
        assert_eq!((c.start, c.end), (0, 5000));
        // A read lock in the middle splits it; writing it again rejoins.
        set(ino, Owner::Process, Kind::Read, 10, 20).unwrap();
        assert_eq!(table().locks_on(ino).len(), 3);
        set(ino, Owner::Process, Kind::Write, 10, 20).unwrap();
        assert_eq!(table().locks_on(ino).len(), 1);
        release_process(ino);
    }

    #[test]
    fn converting_a_flock_lock_lets_the_old_one_go_first() {
        let ino = 1008;
        set(ino, Owner::Flock(1), Kind::Read, 0, u64::MAX).unwrap();
        set(ino, Owner::Flock(2), Kind::Read, 0, u64::MAX).unwrap();
        // 1 cannot upgrade while 2 shares, but its shared lock is gone...
        assert_eq!(
            set(ino, Owner::Flock(1), Kind::Write, 0, u64::MAX),
            Err(Refused::Local)
        );
        // ...so 2's upgrade succeeds.
        set(ino, Owner::Flock(2), Kind::Write, 0, u64::MAX).unwrap();
        release_owner(Owner::Flock(2));
    }

    #[test]
    fn the_lowest_conflict_is_reported() {
        let ino = 1009;
        set(ino, Owner::Ofd(1), Kind::Write, 55, 60).unwrap();
        set(ino, Owner::Ofd(1), Kind::Write, 18, 30).unwrap();
        let c = conflict(ino, Owner::Ofd(2), true, 0, 100).unwrap();
        assert_eq!((c.start, c.end), (18, 30));
        release_owner(Owner::Ofd(1));
    }
}

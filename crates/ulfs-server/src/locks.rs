//! The server's file locks: one `LockTable` (`ulfs::posix::locks`, Linux's
//! rules as a value) for every client, and what the wire needs around it:
//! decoding a LOCK request, resolving its range as `fcntl` does, naming
//! owners, and answering without ever waiting.
//!
//! **Owners.** A POSIX record lock belongs to the client's *lock owner*
//! (`State::lock_owner`: the client id, unless an exec adoption carried an
//! older one over), an OFD or `flock` lock to the open file description
//! (`FileDescription::id`, unique in the server's address space). The
//! table names processes by a `u32`, so each lock owner that has locked
//! anything gets a small key here, unique among live owners; never a
//! truncation of the `u64`, which would make two owners 2^32 connections
//! apart share their locks. The key also remembers the kernel-verified pid
//! that `F_GETLK` reports for the owner's locks.
//!
//! **Never waiting.** A request that meets another owner's lock is
//! answered `-EAGAIN` with `CQE_WOULD_BLOCK` and the holder's range; a
//! client that wants to wait (`F_SETLKW`, `flock` without `LOCK_NB`)
//! sleeps and asks again. So a worker never blocks on a client, and a
//! client that dies holding a lock frees it at its teardown.
//!
//! **Releases** (called from `dispatch.rs` for CLOSE and DUP2, from
//! `clients.rs` at teardown): any close of a descriptor of a file drops
//! the owner's POSIX locks on it; the last close of a description, in any
//! process, drops its OFD and `flock` locks; a client's teardown drops
//! every POSIX lock of its owner.
//!
//! **Bounds.** The table caps records per owner and in all
//! (`Limits::max_locks_per_owner`, `Limits::max_locks`): past them a
//! request is ENOLCK, and a release is never refused.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use ulfs::posix::Closed;
use ulfs::posix::locks::{self as rules, Blocking, Kind, LockTable, Owner, Refused};
use ulfs::{Errno, Ino};
use ulfs_wire::layout::CQE_WOULD_BLOCK;
use ulfs_wire::op::{LOCK_FLOCK, LOCK_GET, LOCK_OFD, LOCK_POSIX, LOCK_SET};
use ulfs_wire::{Cqe, Req};

/// Which rules a request follows (`a[0]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Posix,
    Ofd,
    Flock,
}

/// A LOCK request as decoded from the wire, before its range is resolved
/// against the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LockReq {
    pub class: Class,
    /// GET (`F_GETLK`) rather than SET.
    pub get: bool,
    /// `None`: `a[2]` is no lock type (EINVAL; for SET only once the range
    /// is found valid, as Linux checks in that order).
    pub kind: Option<Kind>,
    pub whence: i32,
    pub start: i64,
    pub len: i64,
}

fn kind_of(t: u64) -> Option<Kind> {
    match i32::try_from(t).ok()? {
        libc::F_RDLCK => Some(Kind::Read),
        libc::F_WRLCK => Some(Kind::Write),
        libc::F_UNLCK => Some(Kind::Unlock),
        _ => None,
    }
}

/// Whether `p1` carries a range: POSIX and OFD requests (16 bytes,
/// exactly); a `flock` ignores it.
pub(crate) fn wants_range(r: &Req) -> bool {
    r.a[0] != LOCK_FLOCK
}

/// Decodes `a[0..3]`: EINVAL for an unknown class or command, and for GET
/// asking about anything but a read or write lock (`fcntl_getlk` checks
/// that first). The range is [`LockReq::with_range`]'s, once `p1` is read.
pub(crate) fn decode(r: &Req) -> Result<LockReq, Errno> {
    let class = match r.a[0] {
        LOCK_POSIX => Class::Posix,
        LOCK_OFD => Class::Ofd,
        LOCK_FLOCK => Class::Flock,
        _ => return Err(Errno::EINVAL),
    };
    let get = match r.a[1] {
        LOCK_SET => false,
        LOCK_GET => true,
        _ => return Err(Errno::EINVAL),
    };
    let kind = kind_of(r.a[2]);
    if get && !matches!(kind, Some(Kind::Read | Kind::Write)) {
        return Err(Errno::EINVAL);
    }
    Ok(LockReq {
        class,
        get,
        kind,
        whence: libc::SEEK_SET,
        start: 0,
        len: 0,
    })
}

impl LockReq {
    /// The request with its range: whence `a[3]`, and start and length
    /// from the 16 bytes of `p1` (POSIX and OFD; a `flock` has none).
    pub fn with_range(self, r: &Req, b: &[u8; 16]) -> LockReq {
        LockReq {
            whence: r.a[3] as i32,
            start: i64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            len: i64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            ..self
        }
    }
}

/// The byte range `[start, end)` a `struct flock` names, for a descriptor
/// at offset `pos` of a file of `size` bytes, with Linux's errors in
/// Linux's order (`flock64_to_posix_lock`): an unknown whence EINVAL, a
/// start past `OFF_MAX` EOVERFLOW, a negative start EINVAL, an end past
/// `OFF_MAX` EOVERFLOW, a negative length reaching below 0 EINVAL. A zero
/// length runs to the end of any file (`end == u64::MAX`).
pub(crate) fn range(
    whence: i32,
    start: i64,
    len: i64,
    pos: u64,
    size: u64,
) -> Result<(u64, u64), Errno> {
    const OFF_MAX: i128 = i64::MAX as i128;
    let base = match whence {
        libc::SEEK_SET => 0i128,
        libc::SEEK_CUR => pos as i128,
        libc::SEEK_END => size as i128,
        _ => return Err(Errno::EINVAL),
    };
    if start as i128 > OFF_MAX - base {
        return Err(Errno::EOVERFLOW);
    }
    let from = base + start as i128;
    if from < 0 {
        return Err(Errno::EINVAL);
    }
    let (from, to) = match len {
        0 => return Ok((from as u64, u64::MAX)),
        n if n > 0 => {
            if n as i128 - 1 > OFF_MAX - from {
                return Err(Errno::EOVERFLOW);
            }
            (from, from + n as i128)
        }
        n => {
            if from + (n as i128) < 0 {
                return Err(Errno::EINVAL);
            }
            (from + n as i128, from)
        }
    };
    Ok((from as u64, to as u64))
}

/// What a resolved request is about: the file, the description, and
/// whether the descriptor may read and write (`fcntl`'s `EBADF` for a lock
/// its open mode does not allow).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub ino: Ino,
    pub description: u64,
    pub readable: bool,
    pub writable: bool,
    /// The description's offset and the file's size (SEEK_CUR, SEEK_END).
    pub pos: u64,
    pub size: u64,
}

/// Who asks: the client's lock owner and its pid as the kernel gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Who {
    pub lock_owner: u64,
    pub pid: i32,
}

/// A key no owner is given: the owner of a request from a lock owner that
/// holds nothing (a GET, an unlock), so that every other owner's lock
/// counts as another's.
const NOBODY: u32 = u32::MAX;

struct Inner {
    table: LockTable,
    /// Lock owner → its key in the table.
    keys: HashMap<u64, u32>,
    /// Key → (lock owner, pid) for `F_GETLK`.
    owners: HashMap<u32, (u64, i32)>,
    next_key: u32,
}

/// The server's locks (in `Shared`).
pub(crate) struct Locks {
    inner: Mutex<Inner>,
}

impl Locks {
    pub fn new(limits: &crate::Limits) -> Locks {
        Locks {
            inner: Mutex::new(Inner {
                table: LockTable::with_limits(rules::Limits {
                    per_owner: limits.max_locks_per_owner,
                    total: limits.max_locks,
                }),
                keys: HashMap::new(),
                owners: HashMap::new(),
                next_key: 0,
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // The table is changed by whole calls to its methods, each of
        // which leaves it consistent: a panic elsewhere left it usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a decoded request on its target: SET → `Ok(0)` when granted;
    /// GET → the `res` of op.rs's encoding (and `aux`); a conflict →
    /// `Err(EAGAIN)` with `CQE_WOULD_BLOCK` and the holder in `cqe`.
    pub fn request(&self, who: Who, q: &LockReq, t: &Target, cqe: &mut Cqe) -> Result<i64, Errno> {
        let (start, end) = match q.class {
            Class::Flock => (0, u64::MAX),
            _ => range(q.whence, q.start, q.len, t.pos, t.size)?,
        };
        let kind = q.kind.ok_or(Errno::EINVAL)?;
        if !q.get && q.class != Class::Flock {
            match kind {
                Kind::Read if !t.readable => return Err(Errno::EBADF),
                Kind::Write if !t.writable => return Err(Errno::EBADF),
                _ => {}
            }
        }
        let mut inner = self.inner();
        let owner = match q.class {
            Class::Posix if q.get || kind == Kind::Unlock => {
                Owner::Process(inner.keys.get(&who.lock_owner).copied().unwrap_or(NOBODY))
            }
            Class::Posix => Owner::Process(inner.key(who)),
            Class::Ofd => Owner::Ofd(t.description),
            Class::Flock => Owner::Flock(t.description),
        };
        if owner == Owner::Process(NOBODY) && kind == Kind::Unlock {
            // An owner that never locked anything holds nothing to let go.
            return Ok(0);
        }
        if q.get {
            let write = kind == Kind::Write;
            return Ok(
                match inner.table.conflict(t.ino, owner, write, start, end) {
                    Some(b) => {
                        cqe.aux = holder_range(&b);
                        let typ = if b.write {
                            libc::F_WRLCK
                        } else {
                            libc::F_RDLCK
                        };
                        typ as i64 | (inner.pid_of(b.owner) as u32 as i64) << 8
                    }
                    None => libc::F_UNLCK as i64,
                },
            );
        }
        match inner.table.try_set(t.ino, owner, kind, start, end) {
            Ok(()) => Ok(0),
            Err(Refused::Conflict(b)) => {
                cqe.flags |= CQE_WOULD_BLOCK;
                cqe.aux = holder_range(&b);
                Err(Errno::EAGAIN)
            }
            Err(Refused::TooMany) => Err(Errno(libc::ENOLCK)),
        }
    }

    /// A descriptor of `lock_owner`'s client was closed (CLOSE, or DUP2
    /// onto it, or its teardown): its POSIX locks on the file go, and the
    /// description's OFD and `flock` locks with its last descriptor.
    pub fn closed(&self, lock_owner: u64, c: &Closed) {
        let mut inner = self.inner();
        if let Some(&key) = inner.keys.get(&lock_owner) {
            inner.table.release_process_on(c.ino, key);
        }
        if c.last {
            inner.table.release_owner(Owner::Ofd(c.description));
            inner.table.release_owner(Owner::Flock(c.description));
        }
    }

    /// A descriptor the client kept for itself was closed: only what ends
    /// with the description (OFD and `flock` locks, at its last
    /// descriptor); the process's POSIX locks stay.
    pub fn kept_closed(&self, c: &Closed) {
        if c.last {
            let mut inner = self.inner();
            inner.table.release_owner(Owner::Ofd(c.description));
            inner.table.release_owner(Owner::Flock(c.description));
        }
    }

    /// A client went: every POSIX lock of its owner goes, and the owner's
    /// key with them.
    pub fn exited(&self, lock_owner: u64) {
        let mut inner = self.inner();
        if let Some(key) = inner.keys.remove(&lock_owner) {
            inner.table.release_process(key);
            inner.owners.remove(&key);
        }
    }

    /// Records held in all (tests, logs).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner().table.len()
    }
}

impl Inner {
    /// `who`'s key, given now if it has none: the next number not in use
    /// (live owners are at most the clients, so the search is short).
    fn key(&mut self, who: Who) -> u32 {
        if let Some(&k) = self.keys.get(&who.lock_owner) {
            // The same owner from a process that exec'd keeps its pid;
            // remember what the kernel said last all the same.
            self.owners.insert(k, (who.lock_owner, who.pid));
            return k;
        }
        let mut k = self.next_key;
        while k == NOBODY || self.owners.contains_key(&k) {
            k = k.wrapping_add(1);
        }
        self.next_key = k.wrapping_add(1);
        self.keys.insert(who.lock_owner, k);
        self.owners.insert(k, (who.lock_owner, who.pid));
        k
    }

    /// What `F_GETLK` says as `l_pid` for a lock of `owner`: the holding
    /// client's pid for a POSIX lock, -1 for a description's (Linux).
    fn pid_of(&self, owner: Owner) -> i32 {
        match owner {
            Owner::Process(k) => self.owners.get(&k).map_or(0, |&(_, pid)| pid),
            Owner::Ofd(_) | Owner::Flock(_) => -1,
        }
    }
}

/// A holder's range as the wire carries it: `[start, len]`, `len` 0 for a
/// lock that runs to the end of any file (as `struct flock`'s `l_len`).
fn holder_range(b: &Blocking) -> [u64; 2] {
    let len = if b.end == u64::MAX {
        0
    } else {
        b.end - b.start
    };
    [b.start, len]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ulfs_wire::Op;

    const E: u64 = u64::MAX;

    #[test]
    fn ranges_resolve_as_linux_does() {
        let set = libc::SEEK_SET;
        assert_eq!(range(set, 10, 5, 0, 0), Ok((10, 15)));
        assert_eq!(range(set, 10, 0, 0, 0), Ok((10, E)));
        assert_eq!(range(set, 10, -5, 0, 0), Ok((5, 10)));
        assert_eq!(range(set, 10, -10, 0, 0), Ok((0, 10)));
        assert_eq!(range(set, 10, -11, 0, 0), Err(Errno::EINVAL));
        assert_eq!(range(set, -1, 5, 0, 0), Err(Errno::EINVAL));
        assert_eq!(range(libc::SEEK_CUR, 2, 3, 100, 0), Ok((102, 105)));
        assert_eq!(range(libc::SEEK_CUR, -101, 3, 100, 0), Err(Errno::EINVAL));
        assert_eq!(range(libc::SEEK_END, -4, 4, 0, 50), Ok((46, 50)));
        assert_eq!(range(libc::SEEK_END, 0, 0, 0, 50), Ok((50, E)));
        assert_eq!(range(3, 0, 0, 0, 0), Err(Errno::EINVAL));
        assert_eq!(range(-1, 0, 0, 0, 0), Err(Errno::EINVAL));
        // Past what off_t holds.
        let max = i64::MAX;
        assert_eq!(range(set, max, 1, 0, 0), Ok((max as u64, max as u64 + 1)));
        assert_eq!(range(set, max, 2, 0, 0), Err(Errno::EOVERFLOW));
        assert_eq!(range(set, max, 0, 0, 0), Ok((max as u64, E)));
        assert_eq!(range(libc::SEEK_CUR, max, 1, 1, 0), Err(Errno::EOVERFLOW));
        assert_eq!(range(libc::SEEK_END, max, 1, 0, 1), Err(Errno::EOVERFLOW));
        assert_eq!(range(set, 0, i64::MIN, 0, 0), Err(Errno::EINVAL));
        assert_eq!(range(set, i64::MIN, 0, 0, 0), Err(Errno::EINVAL));
    }

    fn req(a: [u64; 4]) -> Req {
        let mut r = Req::new(Op::Lock);
        r.a = a;
        r
    }

    fn bytes(start: i64, len: i64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&start.to_le_bytes());
        b[8..].copy_from_slice(&len.to_le_bytes());
        b
    }

    fn decode_all(r: &Req, b: [u8; 16]) -> Result<LockReq, Errno> {
        let q = decode(r)?;
        Ok(if wants_range(r) {
            q.with_range(r, &b)
        } else {
            q
        })
    }

    #[test]
    fn requests_decode_and_bad_ones_are_einval() {
        let w = libc::F_WRLCK as u64;
        let q = decode_all(&req([LOCK_OFD, LOCK_SET, w, 1]), bytes(-3, 7)).unwrap();
        assert_eq!(
            q,
            LockReq {
                class: Class::Ofd,
                get: false,
                kind: Some(Kind::Write),
                whence: libc::SEEK_CUR,
                start: -3,
                len: 7,
            }
        );
        // flock ignores the range and the whence.
        let q = decode_all(&req([LOCK_FLOCK, LOCK_SET, 0, 99]), bytes(5, 5)).unwrap();
        assert_eq!((q.whence, q.start, q.len), (libc::SEEK_SET, 0, 0));
        assert_eq!(q.kind, Some(Kind::Read));
        for bad in [[3, 0, 0, 0], [E, 0, 0, 0], [0, 2, 0, 0], [0, E, 0, 0]] {
            assert_eq!(decode(&req(bad)), Err(Errno::EINVAL));
        }
        // GET of an unlock or of no type at all: EINVAL at once; SET of no
        // type: later (after the range).
        let un = libc::F_UNLCK as u64;
        assert_eq!(
            decode(&req([LOCK_POSIX, LOCK_GET, un, 0])),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            decode(&req([LOCK_POSIX, LOCK_GET, 7, 0])),
            Err(Errno::EINVAL)
        );
        let q = decode(&req([LOCK_POSIX, LOCK_SET, 1 << 40, 0])).unwrap();
        assert_eq!(q.kind, None);
        assert!(wants_range(&req([LOCK_POSIX, 0, 0, 0])));
        assert!(!wants_range(&req([LOCK_FLOCK, 0, 0, 0])));
    }

    fn target(ino: Ino, description: u64) -> Target {
        Target {
            ino,
            description,
            readable: true,
            writable: true,
            pos: 0,
            size: 100,
        }
    }

    fn set(class: Class, kind: Kind, start: i64, len: i64) -> LockReq {
        LockReq {
            class,
            get: false,
            kind: Some(kind),
            whence: libc::SEEK_SET,
            start,
            len,
        }
    }

    #[test]
    fn owners_get_keys_and_getlk_names_their_pid() {
        let locks = Locks::new(&crate::Limits::default());
        let a = Who {
            lock_owner: 1 << 40,
            pid: 4242,
        };
        let b = Who {
            lock_owner: (1 << 40) + (1 << 32),
            pid: 77,
        };
        let mut cqe = Cqe::ok(0, 0);
        let w = set(Class::Posix, Kind::Write, 10, 10);
        assert_eq!(locks.request(a, &w, &target(5, 1), &mut cqe), Ok(0));
        // Two owners 2^32 apart are two owners.
        let mut cqe = Cqe::ok(0, 0);
        assert_eq!(
            locks.request(b, &w, &target(5, 2), &mut cqe),
            Err(Errno::EAGAIN)
        );
        assert_eq!((cqe.flags, cqe.aux), (CQE_WOULD_BLOCK, [10, 10]));
        let mut cqe = Cqe::ok(0, 0);
        let get = LockReq { get: true, ..w };
        let res = locks.request(b, &get, &target(5, 2), &mut cqe).unwrap();
        assert_eq!(res & 0xff, libc::F_WRLCK as i64);
        assert_eq!((res >> 8) as u32 as i32, 4242);
        assert_eq!(cqe.aux, [10, 10]);
        // An OFD lock reports pid -1, and a lock to the end length 0.
        let mut cqe = Cqe::ok(0, 0);
        let o = set(Class::Ofd, Kind::Read, 50, 0);
        assert_eq!(locks.request(b, &o, &target(5, 2), &mut cqe), Ok(0));
        let get = LockReq {
            get: true,
            start: 40,
            ..set(Class::Posix, Kind::Write, 40, 0)
        };
        let mut cqe = Cqe::ok(0, 0);
        let res = locks.request(a, &get, &target(5, 1), &mut cqe).unwrap();
        assert_eq!(res & 0xff, libc::F_RDLCK as i64);
        assert_eq!((res >> 8) as u32 as i32, -1);
        assert_eq!(cqe.aux, [50, 0]);
        // A close by b of its description drops the OFD lock; a's exit
        // its POSIX lock.
        locks.closed(
            b.lock_owner,
            &Closed {
                ino: 5,
                description: 2,
                last_here: true,
                last: true,
                released: Ok(()),
            },
        );
        assert_eq!(locks.len(), 1);
        locks.exited(a.lock_owner);
        assert_eq!(locks.len(), 0);
        let mut cqe = Cqe::ok(0, 0);
        assert_eq!(locks.request(b, &w, &target(5, 2), &mut cqe), Ok(0));
    }

    #[test]
    fn open_modes_and_caps() {
        let limits = crate::Limits {
            max_locks_per_owner: 2,
            ..Default::default()
        };
        let locks = Locks::new(&limits);
        let who = Who {
            lock_owner: 9,
            pid: 1,
        };
        let ro = Target {
            writable: false,
            ..target(7, 3)
        };
        let mut cqe = Cqe::ok(0, 0);
        let w = set(Class::Posix, Kind::Write, 0, 1);
        assert_eq!(locks.request(who, &w, &ro, &mut cqe), Err(Errno::EBADF));
        // flock needs no mode.
        let f = set(Class::Flock, Kind::Write, 0, 0);
        assert_eq!(locks.request(who, &f, &ro, &mut cqe), Ok(0));
        // An unknown type: EINVAL, after the range's own errors.
        let bad = LockReq { kind: None, ..w };
        assert_eq!(locks.request(who, &bad, &ro, &mut cqe), Err(Errno::EINVAL));
        let bad = LockReq { start: -1, ..bad };
        assert_eq!(locks.request(who, &bad, &ro, &mut cqe), Err(Errno::EINVAL));
        let t = target(7, 3);
        assert_eq!(locks.request(who, &w, &t, &mut cqe), Ok(0));
        let w2 = set(Class::Posix, Kind::Write, 5, 1);
        assert_eq!(locks.request(who, &w2, &t, &mut cqe), Ok(0));
        let w3 = set(Class::Posix, Kind::Write, 9, 1);
        assert_eq!(
            locks.request(who, &w3, &t, &mut cqe),
            Err(Errno(libc::ENOLCK))
        );
        // An unlock of an owner that holds nothing is nothing.
        let other = Who {
            lock_owner: 10,
            pid: 2,
        };
        let un = set(Class::Posix, Kind::Unlock, 0, 0);
        assert_eq!(locks.request(other, &un, &t, &mut cqe), Ok(0));
        assert_eq!(locks.request(who, &un, &t, &mut cqe), Ok(0));
        assert_eq!(locks.len(), 1, "the flock lock stays");
    }
}

//! Open image files that cross from one process of a run into another.
//!
//! An image file's descriptor is a placeholder the kernel knows nothing
//! about, and its open file description lives in the mounted file system
//! of one process. Only one process holds the image at a time (the image
//! lock, `state.rs`), so a file crosses into another process by being
//! *handed over*: the process that lets go of the image notes each
//! descriptor's file (inode, birth time, status flags, offset) and marks
//! the descriptor pending (`fds.rs`); whichever process mounts the image
//! next opens the files of its pending descriptors again (`reopen`), by
//! inode, checking the birth time so that a number reused by a new file
//! is never taken for the old one.
//!
//! - Across an `exec`, the notes travel in the environment
//!   (`ULFS_RUN_FDS`), for the descriptors that survive the exec: a shell
//!   running `ls > /ulfs/out` opens the file, moves it onto descriptor 1
//!   and execs `ls`, which writes its listing there.
//! - Across a `fork`, the child's memory holds the same notes.
//!
//! POSIX shares an open file description's offset between the processes
//! holding it (`sh -c 'echo a; ls; echo b' > /ulfs/out` writes the three
//! outputs one after the other). So a description that two processes hold
//! gets a *slot* in the memory every process of the run maps
//! (`shared.rs`): the process letting go of the image writes the offset
//! there, and the one mounting it next reads it. The image lock orders
//! them, so the slot needs no lock of its own; a slot counts the
//! processes holding its description and is free again when none does.
//! When the table is full, a child of `fork` does not get the description
//! (its descriptor fails with EBADF): never an offset gone wrong silently.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, MutexGuard, OnceLock};

use ulfs::Fs;

use crate::real::real;
use crate::{fds, shared};

/// The image descriptors an exec hands over.
pub const ENV_FDS: &str = "ULFS_RUN_FDS";
/// A pending descriptor: what opens its file again.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    /// The kernel descriptor (a placeholder); -1 for a descriptor a
    /// mapping holds (`mmap.rs`), which only `u` names.
    fd: i32,
    /// Descriptors with the same group shared one open file description.
    group: u64,
    ino: u64,
    /// Birth time (seconds, nanoseconds): the inode's generation.
    born: (i64, i64),
    /// Access mode and status flags.
    flags: i32,
    /// The offset, when the description has no slot.
    offset: u64,
    slot: Option<u32>,
    /// The ulfs descriptor it had in this process (-1 when it came across
    /// an exec): it gets the same one back, so that a number a caller
    /// holds across a hand-over stays right.
    u: i32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pending descriptors (only while the image is let go).
fn pending() -> MutexGuard<'static, Vec<Held>> {
    static PENDING: Mutex<Vec<Held>> = Mutex::new(Vec::new());
    lock(&PENDING)
}

/// Slots of the descriptions open now, by ulfs description id.
fn slots_by_description() -> MutexGuard<'static, HashMap<u64, u32>> {
    static SLOTS: OnceLock<Mutex<HashMap<u64, u32>>> = OnceLock::new();
    lock(SLOTS.get_or_init(Default::default))
}

/// At load: the descriptors an exec handed over become pending. The notes
/// must name this process (the pid the exec kept), and each descriptor
/// must still be a placeholder (an `O_PATH` descriptor): notes left in an
/// environment for some other process are ignored, and a host file never
/// becomes an image file by a note. The notes are taken
/// out of the environment, so that nothing the program starts some other
/// way (`system`, `posix_spawn`) reads them again.
pub fn init() {
    let notes = std::env::var(ENV_FDS).ok();
    // SAFETY: at load, before `main`: no other thread reads the
    // environment.
    unsafe { std::env::remove_var(ENV_FDS) };
    // Notes are for the process that execs (an exec keeps the pid): ones
    // a program left in the environment of something it starts another
    // way are not this process's.
    // Or, from `posix_spawn`, for a child of the process that wrote them.
    let me = std::process::id().to_string();
    // SAFETY: getppid has no preconditions.
    let spawned_by = format!("p{}", unsafe { libc::getppid() });
    let Some(notes) = notes
        .as_deref()
        .and_then(|n| n.split_once('/'))
        .filter(|(pid, _)| *pid == me || *pid == spawned_by)
        .map(|(_, notes)| notes.to_string())
    else {
        return;
    };
    let mut held = pending();
    let mut dropped_slots = Vec::new();
    for h in notes.split(',').filter_map(parse) {
        let h = Held {
            slot: h.slot.filter(|&s| shared::exists(s)),
            ..h
        };
        if is_placeholder(h.fd) && !held.iter().any(|o| o.fd == h.fd) {
            fds::pend(h.fd);
            held.push(h);
        } else if let Some(s) = h.slot {
            dropped_slots.push(s);
        }
    }
    // The exec handed this process a hold on each slot: one it keeps no
    // descriptor of is let go.
    dropped_slots.sort_unstable();
    dropped_slots.dedup();
    for s in dropped_slots {
        if !held.iter().any(|h| h.slot == Some(s)) {
            shared::release(s);
        }
    }
}

pub(crate) fn is_placeholder(fd: i32) -> bool {
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_PATH != 0
}

/// One note: `fd:group:ino:born_sec:born_nsec:flags:offset:slot` (slot
/// `-` for none).
fn parse(note: &str) -> Option<Held> {
    let f: Vec<&str> = note.split(':').collect();
    let [fd, group, ino, sec, nsec, flags, offset, slot] = f.as_slice() else {
        return None;
    };
    Some(Held {
        fd: fd.parse().ok().filter(|&n: &i32| n >= 0)?,
        group: group.parse().ok()?,
        ino: ino.parse().ok()?,
        born: (sec.parse().ok()?, nsec.parse().ok()?),
        flags: flags.parse().ok()?,
        offset: offset.parse().ok()?,
        slot: match *slot {
            "-" => None,
            s => Some(s.parse().ok()?),
        },
        u: -1,
    })
}

fn note_text(h: &Held) -> String {
    let slot = h.slot.map_or("-".to_string(), |s| s.to_string());
    format!(
        "{}:{}:{}:{}:{}:{}:{}:{}",
        h.fd, h.group, h.ino, h.born.0, h.born.1, h.flags, h.offset, slot
    )
}

/// A pending descriptor is being used: mounting the image opens it again.
/// Whether the image is mounted now.
pub fn resolve() -> bool {
    crate::state::image().is_some_and(|i| i.ensure_mounted())
}

/// Flags a file is opened again with: what `open` would act on once
/// (creating, truncating) is done.
const OPEN_AGAIN_DROP: i32 =
    libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOCTTY;

/// Right after the image is mounted (with the file system's lock held):
/// opens the files of the pending descriptors again, one open file
/// description per group, at the offset its slot (or note) says. A file
/// that is gone (removed while another process held the image, or a
/// deleted file whose last commit reaped it) leaves its descriptors
/// failing with EBADF, said on standard error.
pub fn reopen(fs: &mut Fs) {
    let mut held = std::mem::take(&mut *pending());
    // In ascending order of the numbers they had: the lowest free number
    // an open takes is then never one a later descriptor needs back.
    held.sort_by_key(|h| (h.u < 0, h.u));
    let mut opened: HashMap<u64, Option<i32>> = HashMap::new();
    // This process's own descriptions (not an exec's) get new ids: their
    // OFD and flock locks follow.
    let mut moved: HashMap<u64, u64> = HashMap::new();
    for h in &held {
        let u = match opened.get(&h.group) {
            Some(Some(u0)) => fs.dup(*u0).ok().and_then(|t| place(fs, t, h.u)),
            Some(None) => None,
            None => {
                let u0 = open_again(fs, h).and_then(|t| place(fs, t, h.u));
                if u0.is_none() {
                    crate::warn(&format!(
                        "ulfs run: descriptor {}: its image file is gone (deleted while another process held the image); it fails with EBADF",
                        h.fd
                    ));
                    if let Some(s) = h.slot {
                        shared::release(s);
                    }
                }
                if let (Some(u0), true) = (u0, h.u >= 0)
                    && let Ok(d) = fs.file_description(u0)
                {
                    moved.insert(h.group, d.id);
                }
                opened.insert(h.group, u0);
                u0
            }
        };
        match u {
            _ if h.fd < 0 => {}
            Some(u) => fds::bind(h.fd, u),
            None => {
                fds::unbind(h.fd);
            }
        }
    }
    crate::locks::rekey(&moved);
}

/// Moves ulfs descriptor `t` to `target` (when there is one).
fn place(fs: &mut Fs, t: i32, target: i32) -> Option<i32> {
    if target < 0 || t == target {
        return Some(t);
    }
    let moved = fs.dup2(t, target);
    let _ = fs.close(t);
    moved.ok()
}

fn open_again(fs: &mut Fs, h: &Held) -> Option<i32> {
    let u = fs.open_ino(h.ino, h.flags & !OPEN_AGAIN_DROP).ok()?;
    let same = fs
        .fstat(u)
        .is_ok_and(|st| (st.btime.sec, st.btime.nsec) == h.born);
    if !same {
        let _ = fs.close(u);
        return None;
    }
    let offset = h.slot.and_then(shared::offset).unwrap_or(h.offset);
    let _ = fs.lseek(u, offset as i64, libc::SEEK_SET);
    if let (Some(s), Ok(d)) = (h.slot, fs.file_description(u)) {
        slots_by_description().insert(d.id, s);
    }
    Some(u)
}

/// Letting go of the image (with the file system's lock held, before it
/// is unmounted): every image descriptor's file is noted and the
/// descriptor marked pending, and the offsets of shared descriptions go
/// to their slots. `keep` false (the process is ending): nothing is
/// noted, and the process stops holding its slots.
pub fn capture(fs: &mut Fs, keep: bool) {
    let mut slots = slots_by_description();
    let mut held = Vec::new();
    let table = fds::bound_in(0, u32::MAX)
        .into_iter()
        .filter_map(|fd| Some((fd, fds::bound(fd)?)));
    let mappings = crate::mmap::descriptors().into_iter().map(|u| (-1, u));
    for (fd, u) in table.collect::<Vec<_>>().into_iter().chain(mappings) {
        let Ok(d) = fs.file_description(u) else {
            continue;
        };
        let offset = fs.lseek(u, 0, libc::SEEK_CUR).unwrap_or(0);
        let slot = slots.get(&d.id).copied();
        if let Some(s) = slot {
            shared::set_offset(s, offset);
        }
        if keep {
            let born = fs
                .fstat(u)
                .map(|st| (st.btime.sec, st.btime.nsec))
                .unwrap_or_default();
            held.push(Held {
                fd,
                group: d.id,
                ino: d.ino,
                born,
                flags: fs.fcntl_getfl(u).unwrap_or(libc::O_RDONLY),
                offset,
                slot,
                u,
            });
            if fd >= 0 {
                fds::pend(fd);
            }
        }
    }
    if !keep {
        for &s in slots.values() {
            shared::release(s);
        }
    }
    slots.clear();
    pending().extend(held);
}

/// Whether the image can be let go while these files are open (by
/// descriptors or mappings): not when the next commit would reap a
/// deleted file still open here. Locks go along: they live in this
/// process's table and follow their descriptions' new ids; mappings are
/// this process's memory, and their descriptors come back under the same
/// numbers.
pub fn can_hand_over(fs: &mut Fs) -> bool {
    let table = fds::bound_in(0, u32::MAX)
        .into_iter()
        .filter_map(fds::bound)
        .collect::<Vec<_>>();
    table
        .into_iter()
        .chain(crate::mmap::descriptors())
        .all(|u| fs.fstat(u).is_ok_and(|st| st.nlink > 0))
}

/// A process ends: it stops holding the slots of its pending descriptors.
pub fn release_all() {
    for h in pending().drain(..) {
        if let Some(s) = h.slot {
            shared::release(s);
        }
    }
    for (_, s) in slots_by_description().drain() {
        shared::release(s);
    }
}

/// A pending descriptor is closed (or replaced) before its file was
/// opened again: the process stops holding the slot when no other of its
/// descriptors shares the description.
pub fn forget(fd: i32) {
    let mut held = pending();
    let Some(i) = held.iter().position(|h| h.fd == fd) else {
        return;
    };
    let h = held.remove(i);
    if let Some(s) = h.slot
        && !held.iter().any(|o| o.group == h.group)
    {
        shared::release(s);
    }
}

/// The last descriptor (`u`) of description `id` is being closed (with
/// the file system's lock held): the processes still holding it find its
/// offset in the slot, which this one stops holding.
pub fn closing_description(fs: &mut ulfs_client::Backend, u: i32, id: u64) {
    let Some(s) = slots_by_description().remove(&id) else {
        return;
    };
    if let Ok(offset) = fs.lseek(u, 0, libc::SEEK_CUR) {
        shared::set_offset(s, offset);
    }
    shared::release(s);
}

/// Before a `fork` that hands the image over: each pending description
/// gets a slot (when one is free) and the child's hold on it. Returns the
/// slots the child holds (given back with `fork_failed` if no child was
/// made).
pub fn before_fork() -> Vec<u32> {
    let mut held = pending();
    let mut group_slot: HashMap<u64, Option<u32>> = HashMap::new();
    for h in held.iter_mut() {
        let s = *group_slot
            .entry(h.group)
            .or_insert_with(|| h.slot.or_else(|| shared::take(h.offset)));
        h.slot = s;
    }
    let child: Vec<u32> = group_slot.into_values().flatten().collect();
    for &s in &child {
        shared::hold(s);
    }
    child
}

pub fn fork_failed(child: Vec<u32>) {
    for s in child {
        shared::release(s);
    }
}

/// In the child of a `fork` that handed the image over: a description
/// with no slot stays the parent's (its descriptor fails with EBADF here).
pub fn in_child() {
    let unshared: Vec<i32> = pending()
        .iter()
        .filter(|h| h.slot.is_none() && h.fd >= 0)
        .map(|h| h.fd)
        .collect();
    for fd in unshared {
        fds::unbind(fd);
    }
    pending().retain(|h| h.slot.is_some());
}

/// In the child of a `fork` that kept the image in the parent: nothing is
/// handed over.
pub fn forget_all() {
    pending().clear();
    slots_by_description().clear();
}

/// Before an exec: the environment entries that hand the surviving
/// descriptors over (none when there are none). A description whose
/// descriptors all close at the exec stops being held by this process
/// first (if the exec fails, it carries on with the offset it had, no
/// longer shared).
pub fn env_for_exec() -> Vec<CString> {
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    let mut held = pending();
    // SAFETY: F_GETFD takes no argument.
    let survives =
        |fd: i32| fd >= 0 && unsafe { fcntl(fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC == 0;
    let surviving: Vec<bool> = held.iter().map(|h| survives(h.fd)).collect();
    let kept_groups: Vec<u64> = held
        .iter()
        .zip(&surviving)
        .filter(|(_, s)| **s)
        .map(|(h, _)| h.group)
        .collect();
    let mut released = std::collections::HashSet::new();
    for h in held.iter_mut() {
        if kept_groups.contains(&h.group) {
            continue;
        }
        if let Some(s) = h.slot.take() {
            h.offset = shared::offset(s).unwrap_or(h.offset);
            if released.insert(h.group) {
                shared::release(s);
            }
        }
    }
    let notes: Vec<String> = held
        .iter()
        .zip(&surviving)
        .filter(|(_, s)| **s)
        .map(|(h, _)| note_text(h))
        .collect();
    let mut out = Vec::new();
    if notes.is_empty() {
        return out;
    }
    let me = std::process::id();
    if let Ok(c) = CString::new(format!("{ENV_FDS}={me}/{}", notes.join(","))) {
        out.push(c);
    }
    out
}

/// This process's pending image descriptors, each with whether it is
/// close-on-exec (what a spawned child could get).
pub fn pending_fds() -> Vec<(i32, bool)> {
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    pending()
        .iter()
        .filter(|h| h.fd >= 0)
        // SAFETY: F_GETFD takes no argument.
        .map(|h| {
            (
                h.fd,
                unsafe { fcntl(h.fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0,
            )
        })
        .collect()
}

/// Before a `posix_spawn` (the image handed over): the environment entry
/// that hands the child its image descriptors (`child_fds`: the child's
/// descriptor and the pending descriptor of this process it copies), each
/// description shared through a slot, and the slots the child holds
/// (given back with `fork_failed` if the spawn fails). A description with
/// no slot free is not handed over (its descriptor fails with EBADF in the
/// child).
pub fn env_for_spawn(child_fds: &[(i32, i32)]) -> (Option<CString>, Vec<u32>) {
    let mut held = pending();
    let mut group_slot: HashMap<u64, Option<u32>> = HashMap::new();
    let mut notes = Vec::new();
    for &(child_fd, source) in child_fds {
        let Some(h) = held.iter().find(|h| h.fd == source).cloned() else {
            continue;
        };
        let slot = *group_slot
            .entry(h.group)
            .or_insert_with(|| h.slot.or_else(|| shared::take(h.offset)));
        let Some(slot) = slot else {
            continue;
        };
        for same in held.iter_mut().filter(|x| x.group == h.group) {
            same.slot = Some(slot);
        }
        notes.push(note_text(&Held {
            fd: child_fd,
            slot: Some(slot),
            ..h
        }));
    }
    let child: Vec<u32> = group_slot.into_values().flatten().collect();
    for &s in &child {
        shared::hold(s);
    }
    if notes.is_empty() {
        return (None, child);
    }
    let me = std::process::id();
    let entry = CString::new(format!("{ENV_FDS}=p{me}/{}", notes.join(","))).ok();
    (entry, child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_read_back_as_written() {
        let h = Held {
            fd: 1,
            group: 7,
            ino: 42,
            born: (1_700_000_000, 123),
            flags: libc::O_WRONLY | libc::O_APPEND,
            offset: 4096,
            slot: Some(3),
            u: -1,
        };
        assert_eq!(parse(&note_text(&h)), Some(h.clone()));
        let unshared = Held { slot: None, ..h };
        assert_eq!(parse(&note_text(&unshared)), Some(unshared));
    }

    #[test]
    fn malformed_notes_are_ignored() {
        for bad in [
            "",
            "1:2:3",
            "x:0:1:0:0:0:0:-",
            "-1:0:1:0:0:0:0:-",
            "1:0:1:0:0:0:0:s",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}

//! Walking a host tree by descriptor, for `import` (and the host side of
//! `export`): every call is relative to an open directory, so depth is
//! not bounded by PATH_MAX; directories deeper than `KEEP_OPEN` below the
//! current one are closed and found again through `..` (checked by device
//! and inode), so depth is not bounded by the descriptor limit either; and
//! the walk is a loop, so no depth overflows the call stack.

use std::io;
use std::os::unix::io::{AsFd, OwnedFd};

use crate::hostfs::{DirRef, HostDir, HostStat};

/// Directories kept open at once along a host walk: deeper ones are
/// closed and found again through `..` on the way back up, so a walk of
/// any depth needs only this many host descriptors.
const KEEP_OPEN: usize = 64;

/// The chain of host directories from a walk's top to where it is, with
/// at most `KEEP_OPEN` of them open.
pub struct HostStack {
    dirs: Vec<(Option<OwnedFd>, (u64, u64))>,
}

impl HostStack {
    pub fn new(top: HostDir) -> HostStack {
        HostStack {
            dirs: vec![(Some(top.fd), top.id)],
        }
    }

    /// The current directory (always open).
    pub fn top(&self) -> DirRef<'_> {
        let fd = self.dirs.last().and_then(|d| d.0.as_ref());
        DirRef {
            fd: fd.expect("the current directory is open").as_fd(),
        }
    }

    /// Makes `child` (a subdirectory of the current one) current.
    pub fn push(&mut self, child: HostDir) {
        let n = self.dirs.len();
        if n >= KEEP_OPEN {
            // Closed now, found again through `..` by `pop`.
            self.dirs[n - KEEP_OPEN].0 = None;
        }
        self.dirs.push((Some(child.fd), child.id));
    }

    /// Leaves the current directory for its parent, reopening the parent
    /// through `..` if it was closed, and checking it is the same one.
    pub fn pop(&mut self) -> io::Result<()> {
        let (fd, _) = self.dirs.pop().expect("pop below the top");
        let n = self.dirs.len();
        if n == 0 {
            return Ok(());
        }
        if let Some(slot) = n.checked_sub(KEEP_OPEN) {
            // The one closed when this level was pushed.
            self.reopen(slot)?;
        }
        if self.dirs[n - 1].0.is_some() {
            return Ok(());
        }
        let child = fd.expect("the current directory is open");
        let parent = DirRef { fd: child.as_fd() }.open_dir_at_dotdot()?;
        self.check_and_set(n - 1, parent)
    }

    fn reopen(&mut self, slot: usize) -> io::Result<()> {
        if self.dirs[slot].0.is_some() {
            return Ok(());
        }
        // Walk up from the nearest open directory below it.
        let mut from = slot + 1;
        while self.dirs[from].0.is_none() {
            from += 1;
        }
        for level in (slot..from).rev() {
            let child = self.dirs[level + 1].0.as_ref().expect("open");
            let parent = DirRef { fd: child.as_fd() }.open_dir_at_dotdot()?;
            self.check_and_set(level, parent)?;
        }
        Ok(())
    }

    fn check_and_set(&mut self, level: usize, dir: HostDir) -> io::Result<()> {
        if dir.id != self.dirs[level].1 {
            return Err(io::Error::other(
                "a directory above was moved during the walk",
            ));
        }
        self.dirs[level].0 = Some(dir.fd);
        Ok(())
    }
}

/// What a command does with a host tree.
pub trait Visit {
    /// The entries of the current directory `dir` (sorted by name, each
    /// lstat'ed), `rel` its path below the top; returns the names of the
    /// subdirectories to walk into, in order.
    fn dir(
        &mut self,
        dir: DirRef,
        rel: &[Vec<u8>],
        items: Vec<(Vec<u8>, HostStat)>,
    ) -> Vec<Vec<u8>>;

    /// After everything below the subdirectory `dir` (not for the top).
    fn leave(&mut self, _dir: DirRef, _rel: &[Vec<u8>]) {}

    /// A failure at `rel` (below the top); the walk goes on past it.
    fn error(&mut self, rel: &[u8], e: io::Error);

    /// True once the command wants no more (fail-fast).
    fn stop(&self) -> bool {
        false
    }
}

/// `rel` as one path (names joined by `/`).
pub fn join(rel: &[Vec<u8>]) -> Vec<u8> {
    rel.join(&b'/')
}

/// `rel` and then `name` as one path.
pub fn join_child(rel: &[Vec<u8>], name: &[u8]) -> Vec<u8> {
    let mut p = join(rel);
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Walks the tree below `top`, depth first, each directory's entries before
/// its subdirectories.
pub fn walk(top: HostDir, v: &mut impl Visit) {
    let mut stack = HostStack::new(top);
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut frames = vec![visit_dir(stack.top(), &names, v).into_iter()];
    while let Some(frame) = frames.last_mut() {
        if v.stop() {
            return;
        }
        let Some(name) = frame.next() else {
            frames.pop();
            if frames.is_empty() {
                return;
            }
            v.leave(stack.top(), &names);
            if let Err(e) = stack.pop() {
                // Lost our place: nothing more can be found where it should.
                v.error(&join(&names), e);
                return;
            }
            names.pop();
            continue;
        };
        match stack.top().open_dir_at(&name) {
            Ok(dir) => {
                names.push(name);
                stack.push(dir);
                frames.push(visit_dir(stack.top(), &names, v).into_iter());
            }
            Err(e) => v.error(&join_child(&names, &name), e),
        }
    }
}

fn visit_dir(dir: DirRef, rel: &[Vec<u8>], v: &mut impl Visit) -> Vec<Vec<u8>> {
    let names = match dir.names() {
        Ok(names) => names,
        Err(e) => {
            v.error(&join(rel), e);
            return Vec::new();
        }
    };
    let mut items = Vec::with_capacity(names.len());
    for name in names {
        match dir.stat_at(&name) {
            Ok(st) => items.push((name, st)),
            Err(e) => v.error(&join_child(rel, &name), e),
        }
    }
    v.dir(dir, rel, items)
}

//! Walking an image tree by descriptor, for `ls -R`, `rm -r`, `export`,
//! `du` and `chmod -R`/`chown -R`.
//!
//! Every call below the top is made relative to an open directory
//! descriptor (openat, fstatat, ...), never with a path built from the
//! top, so the depth of a tree is bounded by memory alone, not by PATH_MAX;
//! and the walk is a loop over an explicit stack, so no depth can overflow
//! the call stack. Paths are assembled only when a caller asks for one (a
//! header or a message), from the names on the stack.

use ulfs::{Errno, Fd, Fs, Stat};

use crate::dir;
use crate::error::{CliError, Failures};
use crate::imgpath;

/// One entry of a directory, as `fstatat(AT_SYMLINK_NOFOLLOW)` saw it.
pub struct Item {
    pub name: Vec<u8>,
    pub stat: Stat,
}

/// Where the walk is: the top's path and the names below it.
pub struct At<'a> {
    top: &'a [u8],
    below: &'a [Vec<u8>],
}

impl At<'_> {
    /// Depth below the top (0 for the top itself).
    pub fn depth(&self) -> usize {
        self.below.len()
    }

    /// The directory's own name (the top's path for the top).
    pub fn name(&self) -> &[u8] {
        self.below.last().map_or(self.top, |n| n.as_slice())
    }

    /// The full path of the directory, for headers and messages only
    /// (built in one pass: O(length)).
    pub fn path(&self) -> Vec<u8> {
        let mut p = self.top.to_vec();
        for n in self.below {
            if !p.ends_with(b"/") {
                p.push(b'/');
            }
            p.extend_from_slice(n);
        }
        p
    }

    /// The directory's path relative to the top (empty for the top).
    pub fn rel(&self) -> Vec<u8> {
        self.below.join(&b'/')
    }

    /// An entry's path relative to the top (for the host side of a copy).
    pub fn rel_child(&self, name: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        for n in self.below.iter().map(|n| n.as_slice()).chain([name]) {
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(n);
        }
        p
    }

    /// The full path of an entry of the directory.
    pub fn child(&self, name: &[u8]) -> Vec<u8> {
        imgpath::join(&self.path(), name)
    }
}

/// What a command does with the tree.
pub trait Visit {
    /// The entries of the directory open as `dir` (sorted by name); returns
    /// the names of the subdirectories to walk into, in order.
    fn dir(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>>;

    /// After everything below a subdirectory, still open as `fd`, while its
    /// parent is open as `parent` (not called for the top).
    fn leave(&mut self, _fs: &mut Fs, _parent: Fd, _fd: Fd, _at: &At) {}

    /// A failure at `path` (listing, stat or opening); the walk goes on
    /// past it unless `stop` then says otherwise.
    fn error(&mut self, path: &[u8], e: Errno);

    /// True once the command wants no more (fail-fast).
    fn stop(&self) -> bool {
        false
    }
}

struct Frame {
    fd: Fd,
    subdirs: std::vec::IntoIter<Vec<u8>>,
}

/// Walks the tree below the directory open as `top` (named `top_path` in
/// messages), depth first, each directory's entries before its
/// subdirectories. `top` stays open; everything the walk opens it closes.
pub fn walk(fs: &mut Fs, top: Fd, top_path: &[u8], v: &mut impl Visit) {
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut stack = vec![Frame {
        fd: top,
        subdirs: visit_dir(fs, top, top_path, &names, v).into_iter(),
    }];
    while let Some(frame) = stack.last_mut() {
        if v.stop() {
            break;
        }
        let parent = frame.fd;
        let Some(name) = frame.subdirs.next() else {
            let done = stack.pop().expect("a frame");
            if let Some(up) = stack.last() {
                v.leave(
                    fs,
                    up.fd,
                    done.fd,
                    &At {
                        top: top_path,
                        below: &names,
                    },
                );
                let _ = fs.close(done.fd);
                names.pop();
            }
            continue;
        };
        names.push(name);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        match fs.openat(parent, names.last().expect("pushed"), flags, 0) {
            Ok(fd) => {
                let subdirs = visit_dir(fs, fd, top_path, &names, v);
                stack.push(Frame {
                    fd,
                    subdirs: subdirs.into_iter(),
                });
            }
            Err(e) => {
                let at = At {
                    top: top_path,
                    below: &names,
                };
                v.error(&at.path(), e);
                names.pop();
            }
        }
    }
    // Stopped early: close what is still open below the top.
    for frame in stack.into_iter().skip(1) {
        let _ = fs.close(frame.fd);
    }
}

/// Lists and stats one directory's entries and hands them to the visitor.
/// A listing that fails part-way still yields what was read before it.
fn visit_dir(
    fs: &mut Fs,
    fd: Fd,
    top: &[u8],
    below: &[Vec<u8>],
    v: &mut impl Visit,
) -> Vec<Vec<u8>> {
    let at = At { top, below };
    let (names, failed) = dir::read_dir_fd(fs, fd);
    if let Some(e) = failed {
        v.error(&at.path(), e);
    }
    let mut items = Vec::with_capacity(names.len());
    for name in names {
        match fs.fstatat(fd, &name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => items.push(Item { name, stat }),
            Err(e) => v.error(&at.child(&name), e),
        }
    }
    v.dir(fs, fd, &at, items)
}

/// Calls `f` on every entry below the directory `top` (parents before
/// their contents), as `chmod -R` and `chown -R` need: each failure,
/// of `f` or of the walk, is reported as `cmd: path: message` and the
/// walk goes on.
pub fn each_below(
    fs: &mut Fs,
    top: &[u8],
    cmd: &str,
    failures: &mut Failures,
    f: impl FnMut(&mut Fs, Fd, &Item) -> ulfs::Result<()>,
) {
    struct Each<'a, F> {
        cmd: &'a str,
        failures: &'a mut Failures,
        f: F,
    }
    impl<F: FnMut(&mut Fs, Fd, &Item) -> ulfs::Result<()>> Visit for Each<'_, F> {
        fn dir(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
            let mut subdirs = Vec::new();
            for item in items {
                if let Err(e) = (self.f)(fs, dir, &item) {
                    let ctx = format!("{}: {}", self.cmd, imgpath::show(&at.child(&item.name)));
                    self.failures.report(CliError::errno(ctx, e));
                }
                if item.stat.is_dir() {
                    subdirs.push(item.name);
                }
            }
            subdirs
        }

        fn error(&mut self, path: &[u8], e: Errno) {
            let ctx = format!("{}: {}", self.cmd, imgpath::show(path));
            self.failures.report(CliError::errno(ctx, e));
        }
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let fd = match fs.open(top, flags, 0) {
        Ok(fd) => fd,
        Err(e) => {
            let ctx = format!("{cmd}: {}", imgpath::show(top));
            failures.report(CliError::errno(ctx, e));
            return;
        }
    };
    let mut each = Each { cmd, failures, f };
    walk(fs, fd, top, &mut each);
    let _ = fs.close(fd);
}

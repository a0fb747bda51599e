//! `ulfs export`: copy an image subtree (or one file) out to the host,
//! keeping modes, nanosecond times, symlinks, hard links and holes (and
//! owners when run as root — only root may set them on the host).
//!
//! Both trees are walked by descriptor — the image through walk.rs, the
//! host through `HostStack` — so depth is bounded by memory, not PATH_MAX.
//! A directory's entries are created as it is entered; its own mode and
//! times are set when it is left, after its contents exist (directories
//! are created owner-writable until then, so read-only ones can be
//! filled). An entry that fails (a damaged inode, a full host disk) is
//! reported and the export goes on with the rest, exiting non-zero at the
//! end; a file whose data fails part-way keeps what was readable. With
//! `--fail-fast` the first failure ends the export.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use ulfs::{Errno, Fd, Fs, Stat};

use crate::error::{CliError, CliResult, Failures};
use crate::hostfs::{self, HostDir};
use crate::hostwalk::HostStack;
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::progress::{Progress, Unit};
use crate::walk::{self, At, Item};

const CHUNK: usize = 1 << 20;

pub fn run(image_path: &Path, src: &[u8], host_dir: &Path, fail_fast: bool) -> CliResult {
    let mut failures = Failures::default();
    image::with_fs("export", image_path, Access::ReadOnly, |fs| {
        // Walk depth is bounded by memory, not by a descriptor limit.
        let _ = fs.set_max_fds(ulfs::posix::fdtable::MAX_FDS_CEILING);
        let top = fs
            .lstat(src)
            .map_err(|e| CliError::errno(format!("export: {}", show(src)), e))?;
        // Only once SRC is known to exist, so a typo leaves no empty dir behind.
        let host_err =
            |e: std::io::Error| CliError::io(format!("export: {}", host_dir.display()), &e);
        std::fs::create_dir_all(host_dir).map_err(host_err)?;
        let host = HostDir::open(host_dir).map_err(host_err)?;
        let mut exporter = Exporter {
            stack: HostStack::new(host),
            host_root: host_dir,
            buf: vec![0u8; CHUNK],
            links: HashMap::new(),
            progress: Progress::new("exporting", Unit::Bytes, 0),
            owner: hostfs::can_chown(),
            failures: &mut failures,
            fail_fast,
            stopped: false,
            entered: Vec::new(),
        };
        if !top.is_dir() {
            // A single file lands inside HOSTDIR under its own name.
            let name = imgpath::file_name(src)
                .ok_or_else(|| CliError::errno(format!("export: {}", show(src)), Errno::EINVAL))?;
            exporter.progress = Progress::new("exporting", Unit::Bytes, top.size);
            let to = Target {
                base: name,
                at: None,
                shown: src,
            };
            exporter.entry(fs, libc::AT_FDCWD, src, to, &top);
            exporter.progress.finish();
            return Ok(());
        }
        let fd = fs
            .open(src, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| CliError::errno(format!("export: {}", show(src)), e))?;
        let mut sizer = Sizer::default();
        walk::walk(fs, fd, src, &mut sizer);
        exporter.progress = Progress::new("exporting", Unit::Bytes, sizer.bytes);
        walk::walk(fs, fd, src, &mut exporter);
        let _ = fs.close(fd);
        if !exporter.stopped {
            // Mirror of import: HOSTDIR takes SRC's own attributes.
            let set = exporter.stack.top().set_attrs_at(
                b"",
                exporter.owner_of(&top),
                Some(top.mode & 0o7777),
                Some(times(&top)),
            );
            if let Err(e) = set {
                exporter.fail(CliError::io(format!("export: {}", host_dir.display()), &e));
            }
        }
        exporter.progress.finish();
        Ok(())
    })?;
    failures.finish()
}

fn times(st: &Stat) -> [ulfs::Timespec; 2] {
    [st.atime, st.mtime]
}

/// Bytes to copy, for the progress bar: each hard-linked file once.
#[derive(Default)]
struct Sizer {
    bytes: u64,
    seen: std::collections::HashSet<u64>,
}

impl walk::Visit for Sizer {
    fn dir(&mut self, _fs: &mut Fs, _dir: Fd, _at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
        let mut subdirs = Vec::new();
        for item in items {
            let st = &item.stat;
            if st.is_file() && (st.nlink < 2 || self.seen.insert(st.ino)) {
                self.bytes = self.bytes.saturating_add(st.size);
            }
            if st.is_dir() {
                subdirs.push(item.name);
            }
        }
        subdirs
    }

    // Failures are reported by the export pass itself.
    fn error(&mut self, _path: &[u8], _e: Errno) {}
}

struct Exporter<'a> {
    /// The host directory matching the image directory being walked.
    stack: HostStack,
    host_root: &'a Path,
    buf: Vec<u8>,
    /// Image inode of a multiply-linked file -> its first host copy (kept
    /// open to link to) and how many more links to expect.
    links: HashMap<u64, (File, u64)>,
    progress: Progress,
    owner: bool,
    failures: &'a mut Failures,
    fail_fast: bool,
    stopped: bool,
    /// Per entered image directory below the top: is its host twin open
    /// on the stack?
    entered: Vec<bool>,
}

/// Where an entry goes: its name in the current host directory; and, for
/// messages only (built on failure, as they cost the depth), where it is.
struct Target<'a> {
    base: &'a [u8],
    at: Option<&'a At<'a>>,
    shown: &'a [u8],
}

impl Target<'_> {
    /// The entry's path below the host root.
    fn rel(&self) -> Vec<u8> {
        self.at
            .map_or(self.base.to_vec(), |at| at.rel_child(self.base))
    }

    /// The entry's image path.
    fn shown(&self) -> Vec<u8> {
        self.at
            .map_or(self.shown.to_vec(), |at| at.child(self.base))
    }
}

enum Failure {
    Image(Errno),
    Host(std::io::Error),
}

impl Exporter<'_> {
    fn fail(&mut self, e: CliError) {
        self.failures.report(e);
        if self.fail_fast {
            self.stopped = true;
        }
    }

    fn owner_of(&self, st: &Stat) -> Option<(u32, u32)> {
        self.owner.then_some((st.uid, st.gid))
    }

    fn host_path(&self, rel: &[u8]) -> String {
        self.host_root
            .join(std::ffi::OsStr::from_bytes(rel))
            .display()
            .to_string()
    }

    /// Exports one entry `name` of the image directory open as `dir` into
    /// the current host directory as `host_name`. True for a directory
    /// whose host twin exists (to walk into).
    fn entry(&mut self, fs: &mut Fs, dir: Fd, name: &[u8], to: Target, st: &Stat) -> bool {
        match self.copy_entry(fs, dir, name, &to, st) {
            Ok(descend) => descend,
            Err(Failure::Image(e)) => {
                self.fail(CliError::errno(format!("export: {}", show(&to.shown())), e));
                false
            }
            Err(Failure::Host(e)) => {
                let at = self.host_path(&to.rel());
                self.fail(CliError::io(format!("export: {at}"), &e));
                false
            }
        }
    }

    fn copy_entry(
        &mut self,
        fs: &mut Fs,
        dir: Fd,
        name: &[u8],
        to: &Target,
        st: &Stat,
    ) -> Result<bool, Failure> {
        let base = to.base;
        let host = self.stack.top();
        if st.is_dir() {
            return match host.mkdir_at(base, 0o700) {
                Ok(()) => Ok(true),
                // Exporting over an existing tree merges directories.
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && host
                            .stat_at(base)
                            .is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR) =>
                {
                    Ok(true)
                }
                Err(e) => Err(Failure::Host(e)),
            };
        }
        if !(st.is_file() || st.is_symlink()) {
            eprintln!(
                "ulfs: export: {}: skipping special file",
                self.host_path(&to.rel())
            );
            return Ok(false);
        }
        host.remove_non_dir_at(base).map_err(Failure::Host)?;
        let owner = self.owner_of(st);
        if st.is_symlink() {
            let target = fs.readlinkat(dir, name).map_err(Failure::Image)?;
            host.symlink_at(&target, base).map_err(Failure::Host)?;
            return host
                .set_attrs_at(base, owner, None, Some(times(st)))
                .map(|()| false)
                .map_err(Failure::Host);
        }
        if st.nlink > 1
            && let Some((first, left)) = self.links.get_mut(&st.ino)
        {
            host.link_at(first, base).map_err(Failure::Host)?;
            *left -= 1;
            if *left == 0 {
                self.links.remove(&st.ino);
            }
            return Ok(false);
        }
        let file = host
            .open_file_at(base, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            .map_err(Failure::Host)?;
        let fd = fs
            .openat(dir, name, libc::O_RDONLY | libc::O_NOFOLLOW, 0)
            .map_err(Failure::Image)?;
        let copied = self.copy_data(fs, fd, &file, st.size);
        let _ = fs.close(fd);
        let written = copied?;
        file.set_len(st.size).map_err(Failure::Host)?;
        self.progress.add(st.size.saturating_sub(written));
        hostfs::set_fd_attrs(
            file.as_raw_fd(),
            owner,
            Some(st.mode & 0o7777),
            Some(times(st)),
        )
        .map_err(Failure::Host)?;
        if st.nlink > 1 {
            self.links.insert(st.ino, (file, st.nlink - 1));
        }
        Ok(false)
    }

    /// Copies only the data ranges of the image file, so holes stay holes
    /// on the host. Returns the bytes copied.
    fn copy_data(
        &mut self,
        fs: &mut Fs,
        fd: ulfs::Fd,
        file: &File,
        size: u64,
    ) -> Result<u64, Failure> {
        let mut written = 0u64;
        let mut off = 0u64;
        while off < size {
            let Some(start) = Self::seek(fs, fd, off, libc::SEEK_DATA)? else {
                break;
            };
            let end = Self::seek(fs, fd, start, libc::SEEK_HOLE)?
                .unwrap_or(size)
                .min(size);
            // `end <= start` would mean inconsistent answers; copy to the end.
            let end = if end <= start { size } else { end };
            let mut pos = start;
            while pos < end {
                let want = usize::try_from(end - pos)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                let n = fs
                    .pread(fd, &mut self.buf[..want], pos)
                    .map_err(Failure::Image)?;
                if n == 0 {
                    return Ok(written);
                }
                let data = self.buf.get(..n).ok_or(Failure::Image(Errno::EIO))?;
                file.write_all_at(data, pos).map_err(Failure::Host)?;
                pos += n as u64;
                written += n as u64;
                self.progress.add(n as u64);
            }
            off = end;
        }
        Ok(written)
    }

    /// SEEK_DATA/SEEK_HOLE on the image: `None` when no data remains;
    /// without hole support (EINVAL) everything counts as data.
    fn seek(fs: &mut Fs, fd: ulfs::Fd, off: u64, whence: i32) -> Result<Option<u64>, Failure> {
        let off_i = i64::try_from(off).map_err(|_| Failure::Image(Errno::EOVERFLOW))?;
        match fs.lseek(fd, off_i, whence) {
            Ok(pos) => Ok(Some(pos)),
            Err(e) if e == Errno::ENXIO => Ok(None),
            Err(e) if e == Errno::EINVAL && whence == libc::SEEK_DATA => Ok(Some(off)),
            Err(e) if e == Errno::EINVAL => Ok(Some(u64::MAX)),
            Err(e) => Err(Failure::Image(e)),
        }
    }
}

impl walk::Visit for Exporter<'_> {
    fn dir(&mut self, fs: &mut Fs, dir: Fd, at: &At, items: Vec<Item>) -> Vec<Vec<u8>> {
        if at.depth() > 0 {
            let opened = self.stack.top().open_dir_at(at.name());
            match opened {
                Ok(host) => {
                    self.stack.push(host);
                    self.entered.push(true);
                }
                Err(e) => {
                    self.entered.push(false);
                    let at_host = self.host_path(&at.rel());
                    self.fail(CliError::io(format!("export: {at_host}"), &e));
                    return Vec::new();
                }
            }
        }
        let mut subdirs = Vec::new();
        for item in items {
            if self.stopped {
                break;
            }
            let to = Target {
                base: &item.name,
                at: Some(at),
                shown: b"",
            };
            if self.entry(fs, dir, &item.name, to, &item.stat) && item.stat.is_dir() {
                subdirs.push(item.name);
            }
        }
        subdirs
    }

    fn leave(&mut self, fs: &mut Fs, _parent: Fd, fd: Fd, at: &At) {
        if !self.entered.pop().unwrap_or(false) {
            return;
        }
        // Built only for a message: it costs the depth.
        let host_at = |me: &Self| me.host_path(&at.rel());
        match fs.fstat(fd) {
            Ok(st) => {
                let owner = self.owner_of(&st);
                let set = self.stack.top().set_attrs_at(
                    b"",
                    owner,
                    Some(st.mode & 0o7777),
                    Some(times(&st)),
                );
                if let Err(e) = set {
                    let msg = format!("export: {}", host_at(self));
                    self.fail(CliError::io(msg, &e));
                }
            }
            Err(e) => self.fail(CliError::errno(format!("export: {}", show(&at.path())), e)),
        }
        if let Err(e) = self.stack.pop() {
            // Lost our place on the host: nothing more can go where it should.
            self.failures
                .report(CliError::io(format!("export: {}", host_at(self)), &e));
            self.stopped = true;
        }
    }

    fn error(&mut self, path: &[u8], e: Errno) {
        self.fail(CliError::errno(format!("export: {}", show(path)), e));
    }

    fn stop(&self) -> bool {
        self.stopped
    }
}

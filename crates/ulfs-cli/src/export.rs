//! `ulfs export`: copy an image subtree (or one file) out to the host,
//! keeping modes, nanosecond times, symlinks, hard links and holes (and
//! owners when run as root — only root may set them on the host).
//!
//! Same shape as import: scan the image first (sizes for the progress bar,
//! parents before children), create everything, then walk backwards to set
//! directory attributes after their contents exist. Directories are created
//! owner-writable and only get their real mode at the end, so read-only
//! directories can still be filled.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ulfs::{Errno, Fs, Stat};

use crate::dir;
use crate::error::{CliError, CliResult, at_path};
use crate::hostfs;
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::progress::{Progress, Unit};

const CHUNK: usize = 1 << 20;

/// One image object to copy: its image path and where it goes on the host.
struct Entry {
    src: Vec<u8>,
    host: PathBuf,
    stat: Stat,
}

pub fn run(image_path: &Path, src: &[u8], host_dir: &Path) -> CliResult {
    image::with_fs("export", image_path, Access::ReadOnly, |fs| {
        let top = fs
            .lstat(src)
            .map_err(|e| CliError::errno(format!("export: {}", show(src)), e))?;
        // Only once SRC is known to exist, so a typo leaves no empty dir behind.
        std::fs::create_dir_all(host_dir)
            .map_err(|e| CliError::io(format!("export: {}", host_dir.display()), &e))?;
        let entries = if top.is_dir() {
            scan(fs, src, host_dir)?
        } else {
            // A single file lands inside HOSTDIR under its own name.
            let name = imgpath::file_name(src)
                .ok_or_else(|| CliError::errno(format!("export: {}", show(src)), Errno::EINVAL))?;
            vec![Entry {
                src: src.to_vec(),
                host: host_dir.join(OsStr::from_bytes(name)),
                stat: top,
            }]
        };
        let total = unique_file_bytes(&entries);
        let mut exporter = Exporter {
            fs,
            buf: vec![0u8; CHUNK],
            links: HashMap::new(),
            progress: Progress::new("exporting", Unit::Bytes, total),
            chown: hostfs::can_chown(),
        };
        for entry in &entries {
            exporter.create(entry)?;
        }
        for entry in entries.iter().rev().filter(|e| e.stat.is_dir()) {
            exporter.set_attrs(&entry.host, &entry.stat)?;
        }
        if top.is_dir() {
            // Mirror of import: HOSTDIR takes SRC's own attributes.
            exporter.set_attrs(host_dir, &top)?;
        }
        exporter.progress.finish();
        Ok(())
    })
}

/// The tree below `src`, each directory before its contents, names sorted.
fn scan(fs: &mut Fs, src: &[u8], host_dir: &Path) -> CliResult<Vec<Entry>> {
    let mut entries = Vec::new();
    // Explicit stack: a hostile image may nest deeper than our call stack.
    let mut pending = vec![(src.to_vec(), host_dir.to_path_buf())];
    while let Some((dir_path, host)) = pending.pop() {
        let listing = dir::read_dir(fs, &dir_path).map_err(at_path("export", &dir_path))?;
        let mut subdirs = Vec::new();
        for name in listing {
            let child = imgpath::join(&dir_path, &name);
            let stat = fs.lstat(&child).map_err(at_path("export", &child))?;
            let child_host = host.join(OsStr::from_bytes(&name));
            if !(stat.is_dir() || stat.is_file() || stat.is_symlink()) {
                eprintln!("ulfs: export: {}: skipping special file", show(&child));
                continue;
            }
            if stat.is_dir() {
                subdirs.push((child.clone(), child_host.clone()));
            }
            entries.push(Entry {
                src: child,
                host: child_host,
                stat,
            });
        }
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(entries)
}

/// Bytes to copy, counting each hard-linked file once.
fn unique_file_bytes(entries: &[Entry]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    entries
        .iter()
        .filter(|e| e.stat.is_file() && (e.stat.nlink < 2 || seen.insert(e.stat.ino)))
        .map(|e| e.stat.size)
        .sum()
}

struct Exporter<'a> {
    fs: &'a mut Fs,
    buf: Vec<u8>,
    /// Image inode of multiply-linked files -> first host path.
    links: HashMap<u64, PathBuf>,
    progress: Progress,
    chown: bool,
}

enum Failure {
    Image(Errno),
    Host(std::io::Error),
}

impl Exporter<'_> {
    fn create(&mut self, entry: &Entry) -> CliResult {
        let host_err =
            |e: std::io::Error| CliError::io(format!("export: {}", entry.host.display()), &e);
        let img_err = |e: Errno| CliError::errno(format!("export: {}", show(&entry.src)), e);
        let st = &entry.stat;
        if st.is_dir() {
            return match DirBuilder::new().mode(0o700).create(&entry.host) {
                Ok(()) => Ok(()),
                // Exporting over an existing tree merges directories.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && entry.host.is_dir() => {
                    Ok(())
                }
                Err(e) => Err(host_err(e)),
            };
        }
        hostfs::remove_non_dir(&entry.host).map_err(host_err)?;
        if st.is_symlink() {
            let target = self.fs.readlink(&entry.src).map_err(img_err)?;
            std::os::unix::fs::symlink(OsStr::from_bytes(&target), &entry.host)
                .map_err(host_err)?;
            return self.set_attrs(&entry.host, st);
        }
        if st.nlink > 1 {
            if let Some(first) = self.links.get(&st.ino) {
                return std::fs::hard_link(first, &entry.host).map_err(host_err);
            }
            self.links.insert(st.ino, entry.host.clone());
        }
        match self.copy_file(entry) {
            Ok(()) => {}
            Err(Failure::Image(e)) => return Err(img_err(e)),
            Err(Failure::Host(e)) => return Err(host_err(e)),
        }
        self.set_attrs(&entry.host, st)
    }

    fn copy_file(&mut self, entry: &Entry) -> Result<(), Failure> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&entry.host)
            .map_err(Failure::Host)?;
        let fd = self
            .fs
            .open(&entry.src, libc::O_RDONLY, 0)
            .map_err(Failure::Image)?;
        let copied = self.copy_data(fd, &file, entry.stat.size);
        let closed = self.fs.close(fd).map_err(Failure::Image);
        let written = copied?;
        closed?;
        file.set_len(entry.stat.size).map_err(Failure::Host)?;
        self.progress.add(entry.stat.size.saturating_sub(written));
        Ok(())
    }

    /// Copies only the data ranges of the image file, so holes stay holes
    /// on the host. Returns the bytes copied.
    fn copy_data(&mut self, fd: ulfs::Fd, file: &std::fs::File, size: u64) -> Result<u64, Failure> {
        let mut written = 0u64;
        let mut off = 0u64;
        while off < size {
            let Some(start) = self.seek(fd, off, libc::SEEK_DATA)? else {
                break;
            };
            let end = self
                .seek(fd, start, libc::SEEK_HOLE)?
                .unwrap_or(size)
                .min(size);
            // `end <= start` would mean inconsistent answers; copy to the end.
            let end = if end <= start { size } else { end };
            let mut pos = start;
            while pos < end {
                let want = usize::try_from(end - pos)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                let n = self
                    .fs
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
    fn seek(&mut self, fd: ulfs::Fd, off: u64, whence: i32) -> Result<Option<u64>, Failure> {
        let off_i = i64::try_from(off).map_err(|_| Failure::Image(Errno::EOVERFLOW))?;
        match self.fs.lseek(fd, off_i, whence) {
            Ok(pos) => Ok(Some(pos)),
            Err(e) if e == Errno::ENXIO => Ok(None),
            Err(e) if e == Errno::EINVAL && whence == libc::SEEK_DATA => Ok(Some(off)),
            Err(e) if e == Errno::EINVAL => Ok(Some(u64::MAX)),
            Err(e) => Err(Failure::Image(e)),
        }
    }

    /// Owner (root only), then mode (chown clears set-id bits), then times.
    fn set_attrs(&mut self, host: &Path, st: &Stat) -> CliResult {
        let host_err = |e: std::io::Error| CliError::io(format!("export: {}", host.display()), &e);
        if self.chown {
            std::os::unix::fs::lchown(host, Some(st.uid), Some(st.gid)).map_err(host_err)?;
        }
        if !st.is_symlink() {
            std::fs::set_permissions(host, Permissions::from_mode(st.mode & 0o7777))
                .map_err(host_err)?;
        }
        hostfs::set_times(host, [st.atime, st.mtime]).map_err(host_err)
    }
}

//! `ulfs import`: copy a host directory tree into an image, keeping what
//! makes it the same tree — modes, owners, nanosecond times, symlinks,
//! hard links and holes.
//!
//! The host tree is scanned first (metadata only). That gives the byte
//! total for the progress bar, and an order in which every directory comes
//! before its contents; walking it backwards then sets directory times
//! after their contents are written, so creating children cannot disturb
//! them.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use ulfs::{Errno, Fs};

use crate::dir;
use crate::error::{CliError, CliResult};
use crate::hostfs;
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::progress::{Progress, Unit};

const CHUNK: usize = 1 << 20;

/// One host object to copy, named relative to the imported directory.
struct Entry {
    rel: PathBuf,
    meta: Metadata,
}

pub fn run(image_path: &Path, host_dir: &Path, dest: &[u8]) -> CliResult {
    let host_ctx = |p: &Path| format!("import: {}", p.display());
    // The operand itself may be a symlink to the directory to import.
    let top = std::fs::metadata(host_dir).map_err(|e| CliError::io(host_ctx(host_dir), &e))?;
    if !top.is_dir() {
        return Err(CliError::errno(host_ctx(host_dir), Errno::ENOTDIR));
    }
    let image_id = std::fs::metadata(image_path)
        .ok()
        .map(|m| (m.dev(), m.ino()));
    let entries = scan(host_dir, image_id)?;
    let total = unique_file_bytes(&entries);

    image::with_fs("import", image_path, Access::ReadWrite, |fs| {
        dir::mkdir_p(fs, dest, 0o755)
            .map_err(|e| CliError::errno(format!("import: {}", show(dest)), e))?;
        let mut importer = Importer {
            fs,
            host_dir,
            dest,
            buf: vec![0u8; CHUNK],
            links: HashMap::new(),
            progress: Progress::new("importing", Unit::Bytes, total),
        };
        for entry in &entries {
            importer.create(entry)?;
        }
        for entry in entries.iter().rev().filter(|e| e.meta.is_dir()) {
            importer.set_attrs(&importer.image_path(&entry.rel), &entry.meta)?;
        }
        // Like `cp -a HOSTDIR/. DEST`: the destination takes the source
        // directory's own attributes too, so an export reproduces it.
        importer.set_attrs(dest, &top)?;
        importer.progress.finish();
        importer
            .fs
            .sync()
            .map_err(|e| CliError::errno(format!("import: {}", show(dest)), e))
    })
}

/// Everything under `root` in an order where each directory precedes its
/// contents (and names are sorted, for reproducible images).
fn scan(root: &Path, image_id: Option<(u64, u64)>) -> CliResult<Vec<Entry>> {
    let mut entries = Vec::new();
    // Explicit stack: host trees can be deeper than our call stack.
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let dir_path = root.join(&rel);
        let ctx = || format!("import: {}", dir_path.display());
        let mut names = Vec::new();
        for item in std::fs::read_dir(&dir_path).map_err(|e| CliError::io(ctx(), &e))? {
            names.push(item.map_err(|e| CliError::io(ctx(), &e))?.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let mut subdirs = Vec::new();
        for name in names {
            let child_rel = rel.join(&name);
            let child = root.join(&child_rel);
            let meta = std::fs::symlink_metadata(&child)
                .map_err(|e| CliError::io(format!("import: {}", child.display()), &e))?;
            let ft = meta.file_type();
            if image_id == Some((meta.dev(), meta.ino())) {
                warn(&child, "skipping the image itself");
                continue;
            }
            if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
                warn(
                    &child,
                    &format!(
                        "skipping {} (ulfs stores only files, directories and symlinks)",
                        kind(&meta)
                    ),
                );
                continue;
            }
            if ft.is_dir() {
                subdirs.push(child_rel.clone());
            }
            entries.push(Entry {
                rel: child_rel,
                meta,
            });
        }
        // Reversed so the stack yields subdirectories in name order.
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(entries)
}

fn warn(path: &Path, what: &str) {
    eprintln!("ulfs: import: {}: {what}", path.display());
}

fn kind(meta: &Metadata) -> &'static str {
    match meta.mode() & libc::S_IFMT {
        libc::S_IFSOCK => "socket",
        libc::S_IFIFO => "fifo",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        _ => "special file",
    }
}

/// Bytes to copy, counting each hard-linked file once.
fn unique_file_bytes(entries: &[Entry]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    entries
        .iter()
        .filter(|e| {
            e.meta.is_file() && (e.meta.nlink() < 2 || seen.insert((e.meta.dev(), e.meta.ino())))
        })
        .map(|e| e.meta.len())
        .sum()
}

struct Importer<'a> {
    fs: &'a mut Fs,
    host_dir: &'a Path,
    dest: &'a [u8],
    buf: Vec<u8>,
    /// Host (dev, ino) of multiply-linked files -> first image path.
    links: HashMap<(u64, u64), Vec<u8>>,
    progress: Progress,
}

impl Importer<'_> {
    fn image_path(&self, rel: &Path) -> Vec<u8> {
        imgpath::join(self.dest, rel.as_os_str().as_bytes())
    }

    fn create(&mut self, entry: &Entry) -> CliResult {
        let path = self.image_path(&entry.rel);
        let img_err = |e: Errno| CliError::errno(format!("import: {}", show(&path)), e);
        let meta = &entry.meta;
        if meta.is_dir() {
            return match self.fs.mkdir(&path, meta.mode() & 0o7777) {
                Ok(()) => Ok(()),
                // Importing into an existing tree merges directories.
                Err(e) if e == Errno::EEXIST && self.fs.lstat(&path).is_ok_and(|s| s.is_dir()) => {
                    Ok(())
                }
                Err(e) => Err(img_err(e)),
            };
        }
        self.remove_non_dir(&path).map_err(img_err)?;
        if meta.file_type().is_symlink() {
            let host = self.host_dir.join(&entry.rel);
            let target = std::fs::read_link(&host)
                .map_err(|e| CliError::io(format!("import: {}", host.display()), &e))?;
            self.fs
                .symlink(target.as_os_str().as_bytes(), &path)
                .map_err(img_err)?;
            return self.set_attrs(&path, meta);
        }
        let key = (meta.dev(), meta.ino());
        if meta.nlink() > 1 {
            if let Some(first) = self.links.get(&key) {
                return self.fs.link(first, &path).map_err(img_err);
            }
            self.links.insert(key, path.clone());
        }
        self.copy_file(&entry.rel, &path, meta.len())?;
        self.set_attrs(&path, meta)
    }

    fn remove_non_dir(&mut self, path: &[u8]) -> ulfs::Result<()> {
        match self.fs.lstat(path) {
            Err(e) if e == Errno::ENOENT => Ok(()),
            Err(e) => Err(e),
            Ok(st) if st.is_dir() => Err(Errno::EISDIR),
            Ok(_) => self.fs.unlink(path),
        }
    }

    fn copy_file(&mut self, rel: &Path, path: &[u8], size: u64) -> CliResult {
        let host = self.host_dir.join(rel);
        let host_err = |e: std::io::Error| CliError::io(format!("import: {}", host.display()), &e);
        let img_err = |e: Errno| CliError::errno(format!("import: {}", show(path)), e);
        let file = File::open(&host).map_err(host_err)?;
        let segments = hostfs::data_segments(&file, size).map_err(host_err)?;
        let fd = self
            .fs
            .open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            .map_err(img_err)?;
        let copied = self.copy_segments(&file, fd, &segments);
        // Sets the size past a trailing hole; a no-op when data reached the end.
        let sized = copied.and_then(|n| {
            self.fs
                .ftruncate(fd, size)
                .map(|()| n)
                .map_err(Failure::Image)
        });
        let closed = self.fs.close(fd);
        let written = match sized {
            Ok(n) => n,
            Err(Failure::Image(e)) => return Err(img_err(e)),
            Err(Failure::Host(e)) => return Err(host_err(e)),
        };
        closed.map_err(img_err)?;
        // Holes count as done, so the bar ends at the scanned total.
        self.progress.add(size.saturating_sub(written));
        Ok(())
    }

    fn copy_segments(
        &mut self,
        file: &File,
        fd: ulfs::Fd,
        segments: &[(u64, u64)],
    ) -> Result<u64, Failure> {
        let mut written = 0u64;
        for &(start, end) in segments {
            let mut off = start;
            while off < end {
                let want = usize::try_from(end - off)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                let n = file
                    .read_at(&mut self.buf[..want], off)
                    .map_err(Failure::Host)?;
                if n == 0 {
                    // The host file shrank while we copied; take what exists.
                    return Ok(written);
                }
                write_all_at(self.fs, fd, &self.buf[..n], off).map_err(Failure::Image)?;
                off += n as u64;
                written += n as u64;
                self.progress.add(n as u64);
            }
        }
        Ok(written)
    }

    /// Owner, then mode (chown may clear set-id bits), then times last so
    /// nothing after them bumps the mtime.
    fn set_attrs(&mut self, path: &[u8], meta: &Metadata) -> CliResult {
        let img_err = |e: Errno| CliError::errno(format!("import: {}", show(path)), e);
        self.fs
            .lchown(path, meta.uid(), meta.gid())
            .map_err(img_err)?;
        if !meta.file_type().is_symlink() {
            self.fs.chmod(path, meta.mode() & 0o7777).map_err(img_err)?;
        }
        self.fs
            .utimensat(
                libc::AT_FDCWD,
                path,
                Some(hostfs::times_of(meta)),
                libc::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(img_err)
    }
}

enum Failure {
    Image(Errno),
    Host(std::io::Error),
}

fn write_all_at(fs: &mut Fs, fd: ulfs::Fd, mut data: &[u8], mut off: u64) -> ulfs::Result<()> {
    while !data.is_empty() {
        let n = fs.pwrite(fd, data, off)?;
        if n == 0 {
            // A write that makes no progress would loop forever.
            return Err(Errno::EIO);
        }
        data = data.get(n..).ok_or(Errno::EIO)?;
        off += n as u64;
    }
    Ok(())
}

//! `ulfs import`: copy a host directory tree into an image, keeping what
//! makes it the same tree — modes, owners, nanosecond times, symlinks,
//! hard links and holes.
//!
//! Both trees are walked by descriptor (hostwalk.rs on the host, *at calls
//! on the image), so depth is bounded by memory, not PATH_MAX. A
//! directory's entries are created as it is entered; its own owner, mode
//! and times are set when it is left, after its contents are written, so
//! creating children cannot disturb them.
//!
//! Files are read to their end, not to their stat size: /proc and sysfs
//! files report sizes that are not their lengths, and a file may grow or
//! shrink while it is read. What was read is stored, and a warning names
//! any file whose length differed from its stat size. A failing entry is
//! reported and the import goes on with the rest, exiting non-zero at the
//! end (`--fail-fast` stops at the first).
//!
//! A single file (or a symlink to one) is imported as DEST/<its name>, the
//! mirror of what export does with a single file.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use ulfs::{Errno, Fd, Fs, Timespec};

use crate::dir;
use crate::error::{CliError, CliResult, Failures};
use crate::hostfs::{self, DirRef, HostDir, HostStat};
use crate::hostwalk::{self, join};
use crate::image::{self, Access};
use crate::imgpath::{self, show};
use crate::progress::{Progress, Unit};

const CHUNK: usize = 1 << 20;

pub fn run(image_path: &Path, host_dir: &Path, dest: &[u8], fail_fast: bool) -> CliResult {
    let host_ctx = |p: &Path| format!("import: {}", p.display());
    let meta = std::fs::metadata(host_dir).map_err(|e| CliError::io(host_ctx(host_dir), &e))?;
    if !meta.is_dir() {
        return import_file(image_path, host_dir, dest);
    }
    // The operand itself may be a symlink to the directory to import.
    let open_top = || HostDir::open(host_dir).map_err(|e| CliError::io(host_ctx(host_dir), &e));
    let top = open_top()?;
    let top_stat = top
        .as_dir()
        .stat()
        .map_err(|e| CliError::io(host_ctx(host_dir), &e))?;
    let image_id = std::fs::metadata(image_path)
        .ok()
        .map(|m| (m.dev(), m.ino()));
    let mut sizer = Sizer::default();
    hostwalk::walk(top, &mut sizer);

    let mut failures = Failures::default();
    image::with_fs("import", image_path, Access::ReadWrite, |fs| {
        // Walk depth is bounded by memory, not by a descriptor limit.
        let _ = fs.set_max_fds(ulfs::posix::fdtable::MAX_FDS_CEILING);
        let img_err = |e: Errno| CliError::errno(format!("import: {}", show(dest)), e);
        dir::mkdir_p(fs, dest, 0o755).map_err(img_err)?;
        let dest_fd = fs
            .open(dest, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(img_err)?;
        let mut importer = Importer {
            fs,
            host_root: host_dir,
            dest,
            image_id,
            img: vec![dest_fd],
            entered: Vec::new(),
            buf: vec![0u8; CHUNK],
            links: HashMap::new(),
            progress: Progress::new("importing", Unit::Bytes, sizer.bytes),
            dir_stats: sizer.dirs,
            failures: &mut failures,
            fail_fast,
            stopped: false,
        };
        hostwalk::walk(open_top()?, &mut importer);
        if !importer.stopped {
            // Like `cp -a HOSTDIR/. DEST`: the destination takes the source
            // directory's own attributes too, so an export reproduces it.
            if let Err(e) = set_fd_attrs(importer.fs, dest_fd, &top_stat) {
                importer.fail(img_err(e));
            }
        }
        importer.progress.finish();
        for (fd, _) in std::mem::take(&mut importer.links).into_values() {
            let _ = importer.fs.close(fd);
        }
        let _ = importer.fs.close(dest_fd);
        importer.fs.sync().map_err(img_err)
    })?;
    failures.finish()
}

/// Imports the one file `src` as DEST/<its name>, keeping its mode,
/// owner and times, read to its end as every imported file is.
fn import_file(image_path: &Path, src: &Path, dest: &[u8]) -> CliResult {
    let host_err = |e: &io::Error| CliError::io(format!("import: {}", src.display()), e);
    let name = src
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .ok_or_else(|| host_err(&io::Error::from_raw_os_error(libc::EINVAL)))?;
    // Checked before opening: opening a fifo to read would wait for a writer.
    let kind = std::fs::metadata(src).map_err(|e| host_err(&e))?;
    // O_NONBLOCK too, should a fifo take the file's place in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(src)
        .map_err(|e| host_err(&e))?;
    let meta = file.metadata().map_err(|e| host_err(&e))?;
    if !kind.is_file() || !meta.is_file() {
        return Err(CliError::new(
            format!("import: {}", src.display()),
            "not a regular file or a directory (ulfs stores only files, directories and symlinks)",
        ));
    }
    let image = std::fs::metadata(image_path).ok();
    if image.is_some_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino())) {
        return Err(CliError::new(
            format!("import: {}", src.display()),
            "is the image itself",
        ));
    }
    let target = imgpath::join(dest, &name);
    let img_err = |e: Errno| CliError::errno(format!("import: {}", show(&target)), e);
    image::with_fs("import", image_path, Access::ReadWrite, |fs| {
        let dest_err = |e: Errno| CliError::errno(format!("import: {}", show(dest)), e);
        dir::mkdir_p(fs, dest, 0o755).map_err(dest_err)?;
        let dir = fs
            .open(dest, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(dest_err)?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let opened =
            remove_non_dir(fs, dir, &name).and_then(|()| fs.openat(dir, &name, flags, 0o600));
        let _ = fs.close(dir);
        let fd = opened.map_err(img_err)?;
        let mut buf = vec![0u8; CHUNK];
        let mut progress = Progress::new("importing", Unit::Bytes, meta.len());
        let copied = copy_to_end(fs, &mut buf, &mut progress, &file, fd, meta.len());
        progress.finish();
        let done = match copied {
            Ok(len) => {
                if len != meta.len() {
                    eprintln!(
                        "ulfs: import: {}: read {len} bytes where stat said {} (the file \
                         changed while read, or its size is not its length); stored as read",
                        src.display(),
                        meta.len()
                    );
                }
                let times = [
                    Timespec {
                        sec: meta.atime(),
                        nsec: meta.atime_nsec(),
                    },
                    Timespec {
                        sec: meta.mtime(),
                        nsec: meta.mtime_nsec(),
                    },
                ];
                fs.fchown(fd, meta.uid(), meta.gid())
                    .and_then(|()| fs.fchmod(fd, meta.mode() & 0o7777))
                    .and_then(|()| fs.futimens(fd, Some(times)))
                    .map_err(img_err)
            }
            Err(Failure::Image(e)) => Err(img_err(e)),
            Err(Failure::Host(e)) => Err(host_err(&e)),
        };
        let closed = fs.close(fd).map_err(img_err);
        done.and(closed)?;
        fs.sync().map_err(img_err)
    })
}

fn times_of(st: &HostStat) -> [Timespec; 2] {
    hostfs::stat_times(st)
}

fn kind_of(mode: u32) -> u32 {
    mode & libc::S_IFMT
}

/// Owner, then mode (chown may clear set-id bits), then times last so
/// nothing after them bumps the mtime.
fn set_fd_attrs(fs: &mut Fs, fd: Fd, st: &HostStat) -> ulfs::Result<()> {
    fs.fchown(fd, st.st_uid, st.st_gid)?;
    fs.fchmod(fd, st.st_mode & 0o7777)?;
    fs.futimens(fd, Some(times_of(st)))
}

/// The pre-scan: bytes to copy, for the progress bar (each hard-linked
/// file once), and each directory's stat as its parent listed it — before
/// anything read the directory, which moves its atime (relatime) — for the
/// times it gets in the image.
#[derive(Default)]
struct Sizer {
    bytes: u64,
    seen: std::collections::HashSet<(u64, u64)>,
    dirs: HashMap<(u64, u64), HostStat>,
}

impl hostwalk::Visit for Sizer {
    fn dir(
        &mut self,
        _dir: DirRef,
        _rel: &[Vec<u8>],
        items: Vec<(Vec<u8>, HostStat)>,
    ) -> Vec<Vec<u8>> {
        let mut subdirs = Vec::new();
        for (name, st) in items {
            match kind_of(st.st_mode) {
                libc::S_IFDIR => {
                    self.dirs.insert((st.st_dev, st.st_ino), st);
                    subdirs.push(name);
                }
                libc::S_IFREG if st.st_nlink < 2 || self.seen.insert((st.st_dev, st.st_ino)) => {
                    self.bytes = self.bytes.saturating_add(st.st_size as u64);
                }
                _ => {}
            }
        }
        subdirs
    }

    // Failures are reported by the import pass itself.
    fn error(&mut self, _rel: &[u8], _e: io::Error) {}
}

struct Importer<'a> {
    fs: &'a mut Fs,
    host_root: &'a Path,
    dest: &'a [u8],
    image_id: Option<(u64, u64)>,
    /// The image directory matching each host directory entered.
    img: Vec<Fd>,
    /// Per host directory entered below the top: is its image twin open?
    entered: Vec<bool>,
    buf: Vec<u8>,
    /// Host (dev, ino) of a multiply-linked file -> its image file (kept
    /// open to link to) and how many more links to expect.
    links: HashMap<(u64, u64), (Fd, u64)>,
    progress: Progress,
    /// Directory stats from the pre-scan, by (dev, ino).
    dir_stats: HashMap<(u64, u64), HostStat>,
    failures: &'a mut Failures,
    fail_fast: bool,
    stopped: bool,
}

enum Failure {
    Image(Errno),
    Host(io::Error),
}

impl Importer<'_> {
    fn fail(&mut self, e: CliError) {
        self.failures.report(e);
        if self.fail_fast {
            self.stopped = true;
        }
    }

    fn host_path(&self, rel: &[u8]) -> String {
        let p = self.host_root.join(std::ffi::OsStr::from_bytes(rel));
        p.display().to_string()
    }

    fn image_path(&self, rel: &[u8]) -> Vec<u8> {
        imgpath::join(self.dest, rel)
    }

    fn report(&mut self, rel: &[u8], f: Failure) {
        let e = match f {
            Failure::Image(e) => {
                CliError::errno(format!("import: {}", show(&self.image_path(rel))), e)
            }
            Failure::Host(e) => CliError::io(format!("import: {}", self.host_path(rel)), &e),
        };
        self.fail(e);
    }

    fn warn(&self, rel: &[u8], what: &str) {
        eprintln!("ulfs: import: {}: {what}", self.host_path(rel));
    }

    /// Copies one host entry into the current image directory; true for a
    /// directory to walk into.
    /// `dir` is the entry's directory below the top (its path is built
    /// only for messages, as it costs the depth).
    fn create(&mut self, host: DirRef, dir: &[Vec<u8>], name: &[u8], st: &HostStat) -> bool {
        let rel = || hostwalk::join_child(dir, name);
        if self.image_id == Some((st.st_dev, st.st_ino)) {
            self.warn(&rel(), "skipping the image itself");
            return false;
        }
        match self.create_entry(host, name, st, &rel) {
            Ok(descend) => descend,
            Err(f) => {
                self.report(&rel(), f);
                false
            }
        }
    }

    fn create_entry(
        &mut self,
        host: DirRef,
        name: &[u8],
        st: &HostStat,
        rel: &dyn Fn() -> Vec<u8>,
    ) -> Result<bool, Failure> {
        let img = *self.img.last().expect("the destination stays open");
        let fs = &mut *self.fs;
        match kind_of(st.st_mode) {
            libc::S_IFDIR => {
                return match fs.mkdirat(img, name, st.st_mode & 0o7777) {
                    Ok(()) => Ok(true),
                    // Importing into an existing tree merges directories.
                    Err(e)
                        if e == Errno::EEXIST
                            && fs
                                .fstatat(img, name, libc::AT_SYMLINK_NOFOLLOW)
                                .is_ok_and(|s| s.is_dir()) =>
                    {
                        Ok(true)
                    }
                    Err(e) => Err(Failure::Image(e)),
                };
            }
            libc::S_IFREG | libc::S_IFLNK => {}
            kind => {
                let what = match kind {
                    libc::S_IFSOCK => "socket",
                    libc::S_IFIFO => "fifo",
                    libc::S_IFCHR => "character device",
                    libc::S_IFBLK => "block device",
                    _ => "special file",
                };
                self.warn(
                    &rel(),
                    &format!("skipping {what} (ulfs stores only files, directories and symlinks)"),
                );
                return Ok(false);
            }
        }
        remove_non_dir(fs, img, name).map_err(Failure::Image)?;
        if kind_of(st.st_mode) == libc::S_IFLNK {
            let target = host.readlink_at(name).map_err(Failure::Host)?;
            fs.symlinkat(&target, img, name).map_err(Failure::Image)?;
            let nofollow = libc::AT_SYMLINK_NOFOLLOW;
            fs.fchownat(img, name, st.st_uid, st.st_gid, nofollow)
                .and_then(|()| fs.utimensat(img, name, Some(times_of(st)), nofollow))
                .map_err(Failure::Image)?;
            return Ok(false);
        }
        let key = (st.st_dev, st.st_ino);
        if st.st_nlink > 1
            && let Some((first, left)) = self.links.get_mut(&key)
        {
            fs.linkat(*first, b"", img, name, libc::AT_EMPTY_PATH)
                .map_err(Failure::Image)?;
            *left -= 1;
            if *left == 0 {
                let _ = fs.close(*first);
                self.links.remove(&key);
            }
            return Ok(false);
        }
        let file = host
            .open_file_at(name, libc::O_RDONLY, 0)
            .map_err(Failure::Host)?;
        let fd = fs
            .openat(
                img,
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o600,
            )
            .map_err(Failure::Image)?;
        let copied = self.copy_file(&file, fd, st.st_size as u64, rel);
        let done = copied.and_then(|()| set_fd_attrs(self.fs, fd, st).map_err(Failure::Image));
        if done.is_ok() && st.st_nlink > 1 {
            self.links.insert(key, (fd, st.st_nlink - 1));
        } else {
            let _ = self.fs.close(fd);
        }
        done.map(|()| false)
    }

    /// Copies `file` to its end; warns when its length was not its stat
    /// size.
    fn copy_file(
        &mut self,
        file: &File,
        fd: Fd,
        size: u64,
        rel: &dyn Fn() -> Vec<u8>,
    ) -> Result<(), Failure> {
        let len = copy_to_end(self.fs, &mut self.buf, &mut self.progress, file, fd, size)?;
        if len != size {
            self.warn(
                &rel(),
                &format!(
                    "read {len} bytes where stat said {size} (the file changed while \
                     read, or its size is not its length); stored as read"
                ),
            );
        }
        Ok(())
    }
}

/// Copies `file` (whose stat said `size` bytes) into the image file open
/// as `fd`, skipping the holes stat's size shows, reading to the file's
/// real end; the image file gets the length read, which is returned.
fn copy_to_end(
    fs: &mut Fs,
    buf: &mut [u8],
    progress: &mut Progress,
    file: &File,
    fd: Fd,
    size: u64,
) -> Result<u64, Failure> {
    let mut chunk = |off: u64, want: usize| -> Result<usize, Failure> {
        let n = file.read_at(&mut buf[..want], off).map_err(Failure::Host)?;
        write_all_at(fs, fd, &buf[..n], off).map_err(Failure::Image)?;
        progress.add(n as u64);
        Ok(n)
    };
    let segments = hostfs::data_segments(file, size).map_err(Failure::Host)?;
    let read = hostfs::read_segments(segments, size, CHUNK, &mut chunk)?;
    let len = if read.shrank || read.end > size {
        read.end
    } else {
        // Data ended at a segment's end: a trailing hole up to the stat
        // size, or a file that shrank there; its size now tells which.
        let now = file.metadata().map_err(Failure::Host)?.len();
        size.min(now).max(read.reached)
    };
    // Sets the size past a trailing hole; a no-op when data reached it.
    fs.ftruncate(fd, len).map_err(Failure::Image)?;
    // Holes count as done, so the bar ends near the scanned total.
    progress.add(size.saturating_sub(len));
    Ok(len)
}

impl hostwalk::Visit for Importer<'_> {
    fn dir(
        &mut self,
        host: DirRef,
        rel: &[Vec<u8>],
        items: Vec<(Vec<u8>, HostStat)>,
    ) -> Vec<Vec<u8>> {
        if let Some(name) = rel.last() {
            let parent = *self.img.last().expect("the destination stays open");
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
            match self.fs.openat(parent, name, flags, 0) {
                Ok(fd) => {
                    self.img.push(fd);
                    self.entered.push(true);
                }
                Err(e) => {
                    self.entered.push(false);
                    self.report(&join(rel), Failure::Image(e));
                    return Vec::new();
                }
            }
        }
        let mut subdirs = Vec::new();
        for (name, st) in items {
            if self.stopped {
                break;
            }
            if self.create(host, rel, &name, &st) {
                subdirs.push(name);
            }
        }
        subdirs
    }

    fn leave(&mut self, host: DirRef, rel: &[Vec<u8>]) {
        if !self.entered.pop().unwrap_or(false) {
            return;
        }
        let fd = self.img.pop().expect("entered");
        let set = host.stat().map_err(Failure::Host).and_then(|now| {
            let st = self
                .dir_stats
                .remove(&(now.st_dev, now.st_ino))
                .unwrap_or(now);
            set_fd_attrs(self.fs, fd, &st).map_err(Failure::Image)
        });
        let _ = self.fs.close(fd);
        if let Err(f) = set {
            self.report(&join(rel), f);
        }
    }

    fn error(&mut self, rel: &[u8], e: io::Error) {
        self.report(rel, Failure::Host(e));
    }

    fn stop(&self) -> bool {
        self.stopped
    }
}

/// Removes a non-directory `name` so a new entry can take its place.
fn remove_non_dir(fs: &mut Fs, dir: Fd, name: &[u8]) -> ulfs::Result<()> {
    match fs.fstatat(dir, name, libc::AT_SYMLINK_NOFOLLOW) {
        Err(e) if e == Errno::ENOENT => Ok(()),
        Err(e) => Err(e),
        Ok(st) if st.is_dir() => Err(Errno::EISDIR),
        Ok(_) => fs.unlinkat(dir, name, 0),
    }
}

fn write_all_at(fs: &mut Fs, fd: Fd, mut data: &[u8], mut off: u64) -> ulfs::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose stat size is larger than what it holds (it shrank, or
    /// sysfs) or smaller (it grew, or /proc) is stored as read.
    #[test]
    fn files_are_copied_to_their_end_whatever_stat_said() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("t.img");
        let opts = ulfs::MkfsOptions {
            size: 16 << 20,
            ..Default::default()
        };
        ulfs::mkfs(&img, &opts).unwrap();
        let mut fs = Fs::mount(&img, ulfs::MountOptions::default()).unwrap();
        let host = dir.path().join("h");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&host, &data).unwrap();
        let file = File::open(&host).unwrap();
        let mut buf = vec![0u8; CHUNK];
        let mut progress = Progress::new("test", Unit::Bytes, 0);
        for (i, claimed) in [0u64, 3, 4096, 10_000, 1 << 20].into_iter().enumerate() {
            let name = format!("/f{i}");
            let fd = fs.open(&name, libc::O_RDWR | libc::O_CREAT, 0o644).unwrap();
            let len = copy_to_end(&mut fs, &mut buf, &mut progress, &file, fd, claimed);
            assert!(matches!(len, Ok(10_000)), "stat size {claimed}");
            assert_eq!(fs.fstat(fd).unwrap().size, 10_000);
            let mut back = vec![0u8; 20_000];
            assert_eq!(fs.pread(fd, &mut back, 0).unwrap(), 10_000);
            assert_eq!(&back[..10_000], &data[..]);
            fs.close(fd).unwrap();
        }
        // A sparse file keeps its holes and its length.
        let sparse = dir.path().join("s");
        let f = File::create(&sparse).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", 8 << 20).unwrap();
        let size = f.metadata().unwrap().len();
        let f = File::open(&sparse).unwrap();
        let fd = fs.open("/s", libc::O_RDWR | libc::O_CREAT, 0o644).unwrap();
        let len = copy_to_end(&mut fs, &mut buf, &mut progress, &f, fd, size);
        assert!(matches!(len, Ok(l) if l == size));
        assert!(fs.fstat(fd).unwrap().blocks < 64, "holes were filled");
        let mut tail = [0u8; 4];
        fs.pread(fd, &mut tail, 8 << 20).unwrap();
        assert_eq!(&tail, b"tail");
        fs.close(fd).unwrap();
        fs.unmount().unwrap();
    }
}

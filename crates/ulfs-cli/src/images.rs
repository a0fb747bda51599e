//! The images one command works on, each mounted once.
//!
//! `cp` may name several images, or one image under two spellings
//! (`disk.img` and `./disk.img`, a hard link, a symlink). An image has one
//! writer or only readers (its flock), so mounting the same file twice —
//! once to read, once to write — would refuse itself as "in use". Images
//! are therefore told apart by the host file's (device, inode), each gets
//! one mount, read-write only if some operand writes to it, and every
//! operand on it shares that mount.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ulfs::Fs;

use crate::error::{CliError, CliResult};
use crate::image::{self, Access};

struct Mounted {
    path: PathBuf,
    id: (u64, u64),
    access: Access,
    fs: Option<Fs>,
}

#[derive(Default)]
pub struct Images {
    list: Vec<Mounted>,
}

impl Images {
    /// Registers `path`, returning its index; the same host file under
    /// another name gets the index it already has, with write access if
    /// either use needs it. Nothing is mounted yet.
    pub fn add(&mut self, cmd: &str, path: &Path, access: Access) -> CliResult<usize> {
        let meta = std::fs::metadata(path)
            .map_err(|e| CliError::io(format!("{cmd}: {}", path.display()), &e))?;
        let id = (meta.dev(), meta.ino());
        if let Some(i) = self.list.iter().position(|m| m.id == id) {
            if access == Access::ReadWrite {
                self.list[i].access = Access::ReadWrite;
            }
            return Ok(i);
        }
        self.list.push(Mounted {
            path: path.to_path_buf(),
            id,
            access,
            fs: None,
        });
        Ok(self.list.len() - 1)
    }

    /// Mounts every registered image; on a failure the ones already
    /// mounted are unmounted again (nothing was changed in them).
    pub fn mount_all(&mut self, cmd: &str) -> CliResult {
        for i in 0..self.list.len() {
            let m = &self.list[i];
            match image::mount(cmd, &m.path, m.access) {
                Ok(mut fs) => {
                    // Walk depth is bounded by memory, not by a descriptor limit.
                    let _ = fs.set_max_fds(ulfs::posix::fdtable::MAX_FDS_CEILING);
                    self.list[i].fs = Some(fs);
                }
                Err(e) => {
                    for m in &mut self.list[..i] {
                        if let Some(fs) = m.fs.take() {
                            let _ = image::unmount(cmd, &m.path, fs);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The mounted image `i` (after `mount_all`).
    pub fn fs(&mut self, i: usize) -> &mut Fs {
        self.list[i]
            .fs
            .as_mut()
            .expect("images are mounted before use")
    }

    /// Whether the host object (device, inode) is one of the images: a
    /// copy must never read it as a file nor write over it.
    pub fn is_image(&self, dev: u64, ino: u64) -> bool {
        self.list.iter().any(|m| m.id == (dev, ino))
    }

    /// Unmounts everything; the first failure is returned after all were
    /// tried (a failed unmount may mean data did not reach an image).
    pub fn unmount_all(self, cmd: &str) -> CliResult {
        let mut first = Ok(());
        for m in self.list {
            if let Some(fs) = m.fs {
                let r = image::unmount(cmd, &m.path, fs);
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }
}

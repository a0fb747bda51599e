//! An original ULFS (v1) image's tree copied into an ulfs `Volume`: every
//! directory and file, with the bytes and holes of each file. v1 keeps no
//! modes, owners, times or links, so directories get 0755, files 0644,
//! owner root, and every time is the one the volume stamps (the v1 image
//! file's modification time, for a reproducible result).
//!
//! The walk keeps the directories it has entered, so a directory named
//! twice (a loop or a second parent, which only damage makes) is an error
//! rather than endless copying. A file named twice becomes one file with
//! two links, which is what the two names meant.

use super::reader::{Inode, Kind, V1Image};
use crate::error::Error;
use crate::fs::Volume;
use crate::types::Ino;
use std::collections::{HashMap, HashSet};

/// File bytes gathered before one write into the volume.
const CHUNK: usize = 1 << 20;

/// What a translation copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    pub dirs: u64,
    pub files: u64,
    pub bytes: u64,
}

/// Copies the tree of `src` under the root of `vol` (which should be
/// empty).
pub fn translate(src: &V1Image, vol: &mut Volume) -> Result<Copied, Error> {
    let mut copied = Copied::default();
    let root = src.root()?;
    let mut entered = HashSet::from([root.ino]);
    let mut files: HashMap<u64, Ino> = HashMap::new();
    let mut todo = vec![(root, vol.root(), String::new())];
    while let Some((dir, into, path)) = todo.pop() {
        for e in src.entries(&dir)? {
            let shown = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let failed = |what: &str, err: crate::Errno| {
                Error::new(
                    err,
                    format!("copying {shown} from the v1 image: {what}: {err}"),
                )
            };
            match e.inode.kind {
                Kind::Dir => {
                    if !entered.insert(e.inode.ino) {
                        return Err(Error::new(
                            crate::Errno::EUCLEAN,
                            format!(
                                "damaged v1 image: {shown} names directory inode {} a second time (a loop in the tree)",
                                e.inode.ino
                            ),
                        ));
                    }
                    let ino = vol
                        .create(into, &e.name, libc::S_IFDIR | 0o755, 0, 0, b"")
                        .map_err(|err| failed("mkdir", err))?;
                    copied.dirs += 1;
                    todo.push((e.inode, ino, shown));
                }
                Kind::File => {
                    if let Some(&ino) = files.get(&e.inode.ino) {
                        vol.link(ino, into, &e.name)
                            .map_err(|err| failed("link", err))?;
                        continue;
                    }
                    let ino = vol
                        .create(into, &e.name, libc::S_IFREG | 0o644, 0, 0, b"")
                        .map_err(|err| failed("create", err))?;
                    copy_file(src, &e.inode, vol, ino).map_err(|err| match err {
                        Copy::Source(e) => e,
                        Copy::Target(err) => failed("write", err),
                    })?;
                    files.insert(e.inode.ino, ino);
                    copied.files += 1;
                    copied.bytes += e.inode.size;
                }
            }
        }
    }
    Ok(copied)
}

enum Copy {
    Source(Error),
    Target(crate::Errno),
}

/// The bytes of `file` into `ino`: runs of blocks gathered into writes of
/// up to `CHUNK`, holes left as holes, the size set at the end (a file may
/// end in a hole).
fn copy_file(src: &V1Image, file: &Inode, vol: &mut Volume, ino: Ino) -> Result<(), Copy> {
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK.min(file.size as usize));
    let mut buf_at = 0u64;
    let mut pos = 0u64;
    let flush = |buf: &mut Vec<u8>, at: u64, vol: &mut Volume| -> Result<(), Copy> {
        if !buf.is_empty() {
            vol.write_at(ino, buf, at).map_err(Copy::Target)?;
            buf.clear();
        }
        Ok(())
    };
    let mut target_err = None;
    src.for_each_block(file, |block| {
        let len = (file.size - pos).min(4096) as usize;
        match block {
            Some(b) => {
                if buf.is_empty() {
                    buf_at = pos;
                }
                buf.extend_from_slice(&b[..len]);
                if buf.len() >= CHUNK
                    && let Err(e) = flush(&mut buf, buf_at, vol)
                {
                    target_err = Some(e);
                    return Err(Error::new(crate::Errno::EIO, "stopped"));
                }
            }
            None => {
                if let Err(e) = flush(&mut buf, buf_at, vol) {
                    target_err = Some(e);
                    return Err(Error::new(crate::Errno::EIO, "stopped"));
                }
            }
        }
        pos += len as u64;
        Ok(())
    })
    .map_err(|e| target_err.take().unwrap_or(Copy::Source(e)))?;
    flush(&mut buf, buf_at, vol)?;
    vol.truncate_ino(ino, file.size).map_err(Copy::Target)
}

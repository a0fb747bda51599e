//! Original ULFS images ("v1", docs/FORMAT-V1.md): recognised by their magic, read with every pointer checked
//! (`reader.rs`), and translated into an ulfs image (`translate.rs`), so
//! that the one API reads them: `Volume::mount` of a v1 image gives a
//! read-only volume over a translation held in memory, and `ulfs convert`
//! writes the translation to a new image file.
//!
//! Why translate rather than serve v1 in place: the v1 format lacks most
//! of what the API reports (modes, times, links) and is read only, so a
//! second engine behind every call would buy nothing but risk; a
//! translation is checked once, completely, and after that every call is
//! the engine's own. The cost is memory for the translation (an anonymous
//! sparse file: the bytes of the files and a little metadata), which v1's
//! small unikernel images afford. The v1 image itself is opened read-only
//! under a shared lock and never written.

mod reader;
mod translate;

pub use reader::{Facts, MAGIC, V1Image, has_v1_magic, is_v1_image};
pub use translate::{Copied, translate};

use crate::error::Error;
use crate::fs::{MkfsOptions, Mode, MountOptions, Volume, format_store, mkfs};
use crate::store::{BlockStore, MemoryBudget, MmapStore};
use crate::types::Timespec;
use std::path::Path;

/// The ulfs image size a translation of `src` needs, with room to spare:
/// its used blocks, an inode slot (256 bytes) and a directory entry per
/// v1 inode, and block maps. The memory file behind a mounted translation
/// is sparse, so room not used costs nothing.
pub fn translated_size(src: &V1Image) -> u64 {
    let f = src.facts();
    let blocks = f.used_blocks + f.used_inodes / 8 + f.used_blocks / 512 + 4096;
    (blocks * 4096).max(src.bytes()).max(16 << 20)
}

/// The modification time of the v1 image file: every time in the
/// translation, so the same image always translates alike.
fn stamp(path: &Path) -> Timespec {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| Timespec {
            sec: m.mtime(),
            nsec: m.mtime_nsec(),
        })
        .unwrap_or_default()
}

/// Mounts a v1 image as a read-only volume: its translation, in memory.
/// Every change to it is EROFS; `opts` other than the clock are kept.
pub fn mount(path: &Path, opts: &MountOptions) -> Result<Volume, Error> {
    let src = V1Image::open(path)?;
    translated_volume(src, stamp(path), opts, &path.display().to_string())
}

/// `mount` of the v1 image held by `store` (a store opened for an ulfs
/// image that turned out to be v1: `ulfs run`'s); every time in the
/// translation is the epoch, as the store knows no file time.
pub fn mount_store(
    store: Box<dyn BlockStore>,
    opts: &MountOptions,
    shown: &str,
) -> Result<Volume, Error> {
    let src = V1Image::from_store(store, shown)?;
    translated_volume(src, Timespec::default(), opts, shown)
}

fn translated_volume(
    src: V1Image,
    time: Timespec,
    opts: &MountOptions,
    shown: &str,
) -> Result<Volume, Error> {
    let size = translated_size(&src);
    let file = memory_file(size).map_err(|e| Error::io(format!("{shown}: translating"), e))?;
    let store = MmapStore::from_sparse_file(file)
        .map_err(|e| Error::io(format!("{shown}: translating"), e))?;
    let mkfs = MkfsOptions {
        size,
        mode: Mode::None,
        label: "ulfs-v1".into(),
        fixed_time: Some(time),
        // The same image shows the same identity at every mount.
        uuid: Some(translation_uuid(&src, time)),
        ..Default::default()
    };
    let store = format_store(Box::new(store), &mkfs)
        .map_err(|e| Error::new(e, format!("{shown}: translating: {e}")))?;
    let mount = MountOptions {
        read_only: false,
        fixed_time: Some(time),
        // Memory, not a host file: there is nothing to page out to.
        memory_budget: MemoryBudget::Unlimited,
        ..*opts
    };
    let mut vol = Volume::mount_store(store, mount, shown)?;
    translate(&src, &mut vol)?;
    vol.sync()
        .map_err(|e| Error::new(e, format!("{shown}: translating: {e}")))?;
    vol.seal_as_v1(src.facts());
    Ok(vol)
}

/// A uuid for the translation of `src` that stays the same from mount to
/// mount: its size and time, and "ulv1".
fn translation_uuid(src: &V1Image, time: Timespec) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&time.sec.to_le_bytes());
    uuid[8..12].copy_from_slice(&(src.facts().max_blocks as u32).to_le_bytes());
    uuid[12..].copy_from_slice(b"ulv1");
    uuid
}

/// An anonymous file of `size` bytes, all a hole: memory for a
/// translation, freed with its last mapping.
fn memory_file(size: u64) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"ulfs-v1".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(size)?;
    Ok(file)
}

/// `ulfs convert`: a new ulfs image at `dst` (made with `opts`; size 0
/// means what `translated_size` says) holding every directory and file of
/// the v1 image at `src`, unmounted clean. The v1 image is only read.
pub fn convert(src: &Path, dst: &Path, opts: &MkfsOptions) -> Result<Copied, Error> {
    let image = V1Image::open(src)?;
    let time = stamp(src);
    let mut opts = opts.clone();
    if opts.size == 0 {
        opts.size = translated_size(&image);
    }
    mkfs(dst, &opts)?;
    let mount = MountOptions {
        fixed_time: Some(time),
        ..Default::default()
    };
    let mut vol = Volume::mount(dst, mount)?;
    let copied = translate(&image, &mut vol)?;
    let shown = dst.display();
    vol.unmount()
        .map_err(|e| Error::new(e, format!("{shown}: unmounting: {e}")))?;
    Ok(copied)
}

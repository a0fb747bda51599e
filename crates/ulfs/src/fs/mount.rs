//! Mounting: read both superblock copies, validate, map the image. The cost
//! is O(1) in the number of files (guarantee 4): nothing is scanned but the
//! orphan list, which holds only files that were open when the image was
//! last let go.

use super::Volume;
use crate::errno::{Errno, Result};
use crate::error::Error;
use crate::format::superblock::*;
use crate::store::{BlockStore, MemoryBudget, MmapStore, open_locked};
use crate::txn::Journal;
use crate::types::Timespec;
use std::path::Path;

/// Durability mode of an image (see docs/FORMAT.md and DESIGN.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In-place updates, as published ULFS: fastest; a crash may need fsck.
    None,
    /// Redo journal of metadata blocks (not implemented yet).
    Journal,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Journal => "journal",
        })
    }
}

/// Whether a read-write mount frees the orphan list's inodes. The repair
/// mounts without, to judge the list (which a damage may have pointed at a
/// linked file) with the namespace in hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reap {
    AtMount,
    Deferred,
}

#[derive(Debug, Clone, Copy)]
pub struct MountOptions {
    pub read_only: bool,
    /// Journal mode: commit the running transaction once it holds this many
    /// metadata blocks (0: a quarter of the journal).
    pub commit_blocks: u32,
    /// Journal mode: commit the running transaction once its first change
    /// is this old. Checked at every call, so an idle process commits at
    /// its next call or at unmount.
    pub commit_interval: std::time::Duration,
    /// Verify each metadata block's CRC32C when first read (EUCLEAN on a
    /// mismatch). Checkers turn this off to read damaged blocks and report
    /// them themselves.
    pub verify_checksums: bool,
    /// Stamp every change (file times, the superblock's mount and write
    /// times) with this time instead of the clock, so that the same calls
    /// on the same image make the same bytes: reproducible images, and fuzz
    /// inputs that mean the same thing in every run. `None`: the clock.
    pub fixed_time: Option<Timespec>,
    /// How much memory the image's file data may keep mapped in
    /// (store/budget.rs, store/residency.rs). By default, what the memory
    /// cgroup the process runs in allows; no limit there, no budget.
    pub memory_budget: MemoryBudget,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            commit_blocks: 0,
            commit_interval: std::time::Duration::from_secs(5),
            verify_checksums: true,
            fixed_time: None,
            memory_budget: MemoryBudget::Auto,
        }
    }
}

/// What `ulfs info` shows.
#[derive(Debug, Clone)]
pub struct Info {
    pub version: u32,
    pub label: String,
    pub uuid: [u8; 16],
    pub mode: Mode,
    pub block_size: u32,
    pub total_blocks: u64,
    pub free_blocks: u64,
    pub used_inodes: u64,
    /// An estimate, as `statfs`'s `f_ffree`: inodes are made on demand.
    pub free_inodes: u64,
    pub journal_blocks: u32,
    pub image_bytes: u64,
    /// Whether the image was cleanly unmounted before this mount.
    pub clean: bool,
    pub mount_count: u32,
    /// Journal transactions this mount found committed but not yet
    /// checkpointed, and replayed (in memory only, on a read-only mount).
    pub journal_replayed: u64,
    /// The image is an original ULFS (v1) image, mounted read-only as a
    /// translation held in memory; what it records.
    pub v1: Option<crate::v1::Facts>,
}

impl Volume {
    /// Mounts an image. An original ULFS (v1) image is recognised by its
    /// magic and mounted read-only, as its translation (`v1/`).
    pub fn mount(image: &Path, opts: MountOptions) -> std::result::Result<Volume, Error> {
        if crate::v1::is_v1_image(image) {
            return crate::v1::mount(image, &opts);
        }
        let shown = image.display();
        let file =
            open_locked(image, opts.read_only).map_err(|e| store_error(&shown.to_string(), e))?;
        Volume::mount_file(file, image, opts, Reap::AtMount)
    }

    /// Mounts an image already opened and locked by `open_locked` (fsck
    /// keeps one exclusive lock across its several mounts).
    pub(crate) fn mount_file(
        file: std::fs::File,
        image: &Path,
        opts: MountOptions,
        reap: Reap,
    ) -> std::result::Result<Volume, Error> {
        let shown = image.display().to_string();
        let store =
            MmapStore::from_file(file, opts.read_only).map_err(|e| store_error(&shown, e))?;
        Volume::mount_store_as(Box::new(store), opts, &shown, reap)
    }

    /// Mounts the image held by `store` (`shown` names it in messages).
    pub fn mount_store(
        store: Box<dyn BlockStore>,
        opts: MountOptions,
        shown: &str,
    ) -> std::result::Result<Volume, Error> {
        Volume::mount_store_as(store, opts, shown, Reap::AtMount)
    }

    fn mount_store_as(
        mut store: Box<dyn BlockStore>,
        opts: MountOptions,
        shown: &str,
        reap: Reap,
    ) -> std::result::Result<Volume, Error> {
        // An original ULFS image: mounted as its read-only translation
        // (v1/), whichever door it came through.
        if looks_like_ulfs_v1(store.block(0).ok()) {
            return crate::v1::mount_store(store, &opts, shown);
        }
        store.set_memory_budget(opts.memory_budget);
        let sb = pick_superblock(&*store, |bid| store.block(bid), shown)?;
        let read_only = opts.read_only || sb.feat_ro_compat & !RO_COMPAT_KNOWN != 0;
        if read_only && !opts.read_only {
            return Err(Error::new(
                Errno::EROFS,
                format!("{shown}: has features that allow read-only mounting only"),
            ));
        }
        if store.is_read_only() != read_only {
            return Err(Error::new(
                Errno::EROFS,
                format!("{shown}: store access does not match the mount"),
            ));
        }
        let clean = sb.state == STATE_CLEAN;
        let (j, sb, replayed) = if sb.mode == MODE_JOURNAL {
            let (j, replayed) = Journal::journaled(
                store,
                sb.journal_start,
                sb.journal_blocks,
                opts.verify_checksums,
            )
            .map_err(|e| Error::new(e, format!("{shown}: journal unreadable: {e}")))?;
            // Replay may have rewritten the superblock: read it again.
            let sb = pick_superblock(j.store(), |bid| j.peek(bid), shown)?;
            (j, sb, replayed)
        } else {
            // After a crash in mode `none` the checksums of blocks written
            // since the last checkpoint are stale: they are not judged until
            // `fsck --repair` reseals them.
            (
                Journal::in_place(store, clean && opts.verify_checksums),
                sb,
                Default::default(),
            )
        };
        let mut sb = sb;
        // Counters are hints (fsck recounts them): an impossible value is
        // clamped rather than trusted or refused.
        sb.free_blocks = sb.free_blocks.min(sb.data_blocks());
        let mut vol = Volume::assemble(j, sb, read_only, &opts);
        vol.replayed = replayed;
        if vol.sb.mode == MODE_NONE && !clean {
            // Rewritten only at checkpoints in mode `none`: stale after a crash.
            vol.recount_free_blocks()
                .map_err(|e| Error::new(e, format!("{shown}: cannot read the group maps: {e}")))?;
        }
        if !read_only {
            vol.open_for_writing(reap).map_err(|e| {
                let why = match e {
                    Errno::EUCLEAN if reap == Reap::AtMount => {
                        format!("the orphan list is damaged ({e}); `ulfs fsck --repair` mends it")
                    }
                    _ => e.to_string(),
                };
                Error::new(e, format!("{shown}: cannot mount read-write: {why}"))
            })?;
        }
        Ok(vol)
    }

    /// Keeps the image's file data mapped in within a new budget (what
    /// the old one left mapped in stays until the host evicts it).
    pub fn set_memory_budget(&mut self, budget: MemoryBudget) {
        self.j.set_memory_budget(budget);
    }

    /// Marks the image in use, reaps orphans and records the mount.
    fn open_for_writing(&mut self, reap: Reap) -> Result<()> {
        if reap == Reap::AtMount {
            self.reap_orphans()?;
        }
        self.sb.state = STATE_DIRTY;
        self.sb.mount_time = self.now().sec;
        self.sb.mount_count = self.sb.mount_count.wrapping_add(1);
        // Written now, not with the first change: a mount that crashes
        // before committing anything still leaves the image marked dirty
        // (in journal mode nothing else would put the superblock in a
        // transaction).
        self.sb_dirty = true;
        self.sync()?;
        Ok(())
    }

    /// Unmount: makes everything durable and marks the image clean.
    pub fn unmount(&mut self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        // After a failed flush, a panic or a fault on the mapping nothing
        // more may be written: the image keeps its last committed state and
        // is not marked clean (in mode `none` the mark would land in place).
        self.writable()?;
        self.reap_orphans()?;
        self.sb.state = STATE_CLEAN;
        self.sync_clean()
    }

    pub fn info(&self) -> Info {
        let sb = &self.sb;
        Info {
            version: sb.version,
            label: sb.label_str(),
            uuid: sb.uuid,
            mode: if sb.mode == MODE_JOURNAL {
                Mode::Journal
            } else {
                Mode::None
            },
            block_size: crate::format::BLOCK_SIZE as u32,
            total_blocks: sb.total_blocks,
            free_blocks: sb.free_blocks,
            used_inodes: sb.used_inodes,
            free_inodes: self.statfs().ffree,
            journal_blocks: sb.journal_blocks,
            image_bytes: self.j.store().blocks() * crate::format::BLOCK_SIZE as u64,
            clean: self.was_clean,
            mount_count: sb.mount_count,
            journal_replayed: self.replayed.transactions,
            v1: self.v1,
        }
    }
}

/// A clear error for an image that cannot be opened, locked or mapped.
pub(crate) fn store_error(shown: &str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EINVAL) => Error::new(
            Errno::EINVAL,
            format!("{shown}: too small to be a ulfs image"),
        ),
        Some(libc::EBUSY) => Error::new(Errno::EBUSY, in_use(shown)),
        Some(libc::EISDIR) => Error::new(
            Errno::EISDIR,
            format!("{shown}: is a directory, not an image"),
        ),
        Some(libc::ENOTBLK) => Error::new(
            Errno::ENOTBLK,
            format!("{shown}: not a regular file or a block device"),
        ),
        // A sparse image on a full host (store/holes.rs): the message names
        // the shortfall.
        None if e.kind() == std::io::ErrorKind::StorageFull => {
            Error::new(Errno::ENOSPC, format!("{shown}: {e}"))
        }
        _ => Error::io(shown, e),
    }
}

/// The message for an image another process (or another mount in this one)
/// holds: only one writer, or any number of readers, at a time.
pub(crate) fn in_use(shown: &str) -> String {
    format!("{shown}: in use: another mount holds it (one writer, or readers only, at a time)")
}

/// Decodes both superblock copies and picks the one to trust.
fn pick_superblock<'a>(
    store: &'a dyn BlockStore,
    read: impl Fn(u32) -> Result<&'a crate::format::Block>,
    shown: &str,
) -> std::result::Result<Superblock, Error> {
    let blocks = store.blocks();
    let pick = |bid| read(bid).map(|b| Superblock::decode(b, blocks));
    let primary = pick(SB_PRIMARY).map_err(|e| Error::new(e, format!("{shown}: unreadable")))?;
    let secondary =
        pick(SB_SECONDARY).map_err(|e| Error::new(e, format!("{shown}: unreadable")))?;
    // A copy this version does not understand may be the newer one (an
    // upgrade cut short): never fall back past it to the older copy.
    for copy in [&primary, &secondary] {
        if let Err(SbError::Unsupported(what)) = copy {
            return Err(Error::new(
                Errno::EOPNOTSUPP,
                format!("{shown}: unsupported {what}"),
            ));
        }
    }
    match (primary, secondary) {
        (Ok(a), Ok(b)) => Ok(if a.seq >= b.seq { a } else { b }),
        (Ok(a), Err(_)) | (Err(_), Ok(a)) => Ok(a),
        (Err(SbError::NotUlfs), Err(SbError::NotUlfs)) => {
            let hint = if looks_like_ulfs_v1(store.block(0).ok()) {
                " (it looks like an original ULFS v1 image, which this version cannot mount)"
            } else {
                ""
            };
            Err(Error::new(
                Errno::EINVAL,
                format!("{shown}: not a ulfs image{hint}"),
            ))
        }
        (Err(e), Err(SbError::NotUlfs)) | (Err(SbError::NotUlfs), Err(e)) | (Err(e), Err(_)) => {
            Err(Error::new(
                Errno::EUCLEAN,
                format!("{shown}: damaged superblock: {}", describe(&e)),
            ))
        }
    }
}

fn describe(e: &SbError) -> String {
    match e {
        SbError::NotUlfs => "bad magic".into(),
        SbError::BadCrc => "checksum mismatch".into(),
        SbError::Unsupported(s) => format!("unsupported {s}"),
        SbError::Corrupt(s) => s.clone(),
    }
}

/// The published ULFS writes magic 0x11089160 at offset 0 of block 0.
fn looks_like_ulfs_v1(b: Option<&crate::format::Block>) -> bool {
    b.is_some_and(|b| crate::format::get_u32(b, 0) == 0x1108_9160)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MkfsOptions, mkfs};

    /// A read-write mount makes the dirty mark, the mount count and time
    /// durable at once, in both modes: a crash before the first change
    /// leaves an image that says it was not unmounted cleanly.
    #[test]
    fn a_read_write_mount_is_recorded_before_any_change() {
        for mode in [Mode::Journal, Mode::None] {
            let dir = tempfile::tempdir().unwrap();
            let img = dir.path().join("img");
            let opts = MkfsOptions {
                size: 8 << 20,
                mode,
                ..Default::default()
            };
            mkfs(&img, &opts).unwrap();
            let v = Volume::mount(&img, MountOptions::default()).unwrap();
            assert!(v.info().clean, "{mode}: mkfs left it clean");
            // A crash: dropped without unmounting, nothing changed.
            drop(v);
            let v = Volume::mount(&img, MountOptions::default()).unwrap();
            let info = v.info();
            assert!(!info.clean, "{mode}: the crashed mount was recorded");
            assert_eq!(info.mount_count, 2, "{mode}");
            let mut v = v;
            v.unmount().unwrap();
            drop(v);
            let ro = MountOptions {
                read_only: true,
                ..Default::default()
            };
            let v = Volume::mount(&img, ro).unwrap();
            assert!(v.info().clean && v.info().mount_count == 2, "{mode}");
        }
    }
}

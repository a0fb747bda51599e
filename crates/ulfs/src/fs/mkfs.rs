//! Making a new image: geometry, map blocks, both superblocks and the root
//! directory. The image file is preallocated (fallocate) so that a full host
//! disk shows up here, as ENOSPC, and not later on a store into the
//! mapping (a sparse copy loses that reservation: the store makes the image
//! whole again at a writable mount, store/holes.rs).

use super::{Mode, Volume};
use crate::errno::Errno;
use crate::error::Error;
use crate::format::inode::Inode;
use crate::format::superblock::*;
use crate::format::*;
use crate::store::{BlockStore, MmapStore, backing_size, is_block_device, lock_image, open_locked};
use crate::types::Timespec;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Smallest image: superblocks, one map block and a little room.
pub const MIN_BLOCKS: u64 = 64;
/// Smallest journal region (header plus log).
pub const MIN_JOURNAL: u32 = 32;
/// Largest image: block ids are `u32`, so 2^32 blocks of 4 KiB (16 TiB).
pub const MAX_IMAGE_BYTES: u64 = (u32::MAX as u64 + 1) * BLOCK_SIZE as u64;

/// Smallest journal for an image of `groups` groups: an operation that
/// cannot be split (freeing a huge file or directory) changes at most one
/// map block per group plus a few others, and must fit one transaction
/// (a quarter of the journal is the commit threshold, so twice that).
pub fn min_journal(groups: u64) -> u32 {
    (MIN_JOURNAL as u64)
        .max(groups * 2 + 64)
        .min(u32::MAX as u64) as u32
}

/// Journal blocks for an image of `total` blocks: what was asked, or by
/// default 1/32 of the image, at least 64 and at most 32,768 (128 MiB),
/// never more than a quarter of the image, and never below `min_journal`.
pub fn journal_size(opts: &MkfsOptions, total: u64) -> u32 {
    match (opts.mode, opts.journal_blocks) {
        (_, Some(n)) => n,
        (Mode::None, None) => 0,
        (Mode::Journal, None) => {
            let groups = total.div_ceil(GROUP_SPAN as u64);
            (total / 32)
                .clamp(64, 32_768)
                .min(total / 4)
                .max(min_journal(groups) as u64) as u32
        }
    }
}

#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Image size in bytes (rounded down to whole blocks). On a block
    /// device, at most the device's size; 0 uses the whole device.
    pub size: u64,
    pub label: String,
    /// Overwrite an existing non-empty file.
    pub force: bool,
    pub mode: Mode,
    /// Blocks reserved for the journal region (default: none in mode `none`).
    pub journal_blocks: Option<u32>,
    /// The image's identity (default: random). Two images made with the
    /// same uuid, hash key and time from the same calls are byte for byte
    /// the same: reproducible images and fuzz inputs.
    pub uuid: Option<[u8; 16]>,
    /// The key of the directory name hash (default: random, so that names
    /// chosen to collide on one image do not collide on another).
    pub hash_key: Option<[u8; 16]>,
    /// The creation time written into the image (default: the clock).
    pub fixed_time: Option<Timespec>,
    /// Leave a new image file sparse instead of reserving its whole size:
    /// only the blocks mkfs writes take host space. For an image larger
    /// than the host's free space (to be copied onto a device, or mounted
    /// read-only); a read-write mount reserves the rest first, and is
    /// refused with ENOSPC naming the shortfall if the host lacks it.
    /// Image files only (EINVAL for a block device; `format_store`, which
    /// is given a store, ignores it).
    pub sparse: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            size: 64 << 20,
            label: String::new(),
            force: false,
            mode: Mode::Journal,
            journal_blocks: None,
            uuid: None,
            hash_key: None,
            fixed_time: None,
            sparse: false,
        }
    }
}

/// 32 random bytes from the kernel, for the hash seed and the uuid.
fn random_bytes() -> Result<[u8; 32], Error> {
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::io("reading /dev/urandom", e))?;
    Ok(buf)
}

/// Creates a ulfs image at `image`: a regular file (created, or replaced
/// with `force`) or a block device (its first `opts.size` bytes, the whole
/// device when `opts.size` is 0, at most 16 TiB of it; one that holds data
/// needs `force`). Sizes past 16 TiB are refused (EFBIG), as are paths that
/// are neither regular files nor block devices. An
/// image in use by a mount is refused (EBUSY) even with `force`.
pub fn mkfs(image: impl AsRef<Path>, opts: &MkfsOptions) -> Result<(), Error> {
    let path = image.as_ref();
    let shown = path.display().to_string();
    if opts.label.len() > LABEL_MAX {
        return Err(Error::new(
            Errno::EINVAL,
            format!("label longer than {LABEL_MAX} bytes"),
        ));
    }
    refuse_special_file(path, &shown)?;
    if is_block_device(path) {
        // The device's size decides the checks, so it is opened (and
        // locked) first; nothing is written before they pass.
        let mut dev = open_locked(path, false).map_err(|e| super::mount::store_error(&shown, e))?;
        let dev_size = backing_size(&mut dev).map_err(|e| Error::io(&shown, e))?;
        let size = match opts.size {
            0 => dev_size,
            n if n > dev_size => {
                return Err(Error::new(
                    Errno::EINVAL,
                    format!(
                        "{shown}: the device holds {dev_size} bytes, less than the {n} asked for (give 0 for the whole device)"
                    ),
                ));
            }
            n => n,
        };
        // The whole of a device larger than the format allows: its first
        // 16 TiB (an explicit larger size is refused by check_geometry).
        let size = if opts.size == 0 {
            size.min(MAX_IMAGE_BYTES)
        } else {
            size
        };
        let opts = MkfsOptions {
            size,
            ..opts.clone()
        };
        check_geometry(&shown, &opts)?;
        if opts.sparse {
            return Err(Error::new(
                Errno::EINVAL,
                format!("{shown}: a block device cannot be sparse (--sparse is for image files)"),
            ));
        }
        if !opts.force && holds_data(&dev).map_err(|e| Error::io(&shown, e))? {
            return Err(Error::new(
                Errno::EEXIST,
                format!("{shown} holds data (use --force to overwrite it)"),
            ));
        }
        return format_file(dev, &shown, &opts);
    }
    check_geometry(&shown, opts)?;
    let existed = path.exists();
    let result = make_file(path, &shown, opts);
    if let Err(e) = &result
        && !existed
        && e.errno != Errno::EBUSY
    {
        // Leave nothing half-made behind.
        let _ = std::fs::remove_file(path);
    }
    result
}

/// Refuses a path that is neither a regular file (or a name to create one
/// at) nor a block device: a character device, FIFO, socket or directory
/// cannot hold an image, and the OS's own error for them ("Invalid
/// argument" from /dev/null) says nothing useful.
fn refuse_special_file(path: &Path, shown: &str) -> Result<(), Error> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = meta.file_type();
    let (errno, what) = if kind.is_dir() {
        (Errno::EISDIR, "a directory")
    } else if kind.is_char_device() {
        (Errno::ENOTBLK, "a character device")
    } else if kind.is_fifo() {
        (Errno::ENOTBLK, "a FIFO")
    } else if kind.is_socket() {
        (Errno::ENOTBLK, "a socket")
    } else {
        return Ok(());
    };
    Err(Error::new(
        errno,
        format!("{shown}: is {what}; an image must be a regular file or a block device"),
    ))
}

/// Refuses sizes that cannot hold an image or its journal, or that the
/// format cannot address, before anything is written.
fn check_geometry(shown: &str, opts: &MkfsOptions) -> Result<(), Error> {
    if opts.size > MAX_IMAGE_BYTES {
        return Err(Error::new(
            Errno::EFBIG,
            format!(
                "{shown}: {} bytes is larger than the largest image, {MAX_IMAGE_BYTES} bytes (16 TiB: 2^32 blocks of 4 KiB)",
                opts.size
            ),
        ));
    }
    let total = opts.size / BLOCK_SIZE as u64;
    let journal = journal_size(opts, total) as u64;
    if total < MIN_BLOCKS + journal {
        // The smallest image this mode (and journal size) allows: a
        // journal is at least what one group needs.
        let least = MIN_BLOCKS
            + match opts.mode {
                Mode::Journal => journal.max(min_journal(1) as u64),
                Mode::None => journal,
            };
        return Err(Error::new(
            Errno::EINVAL,
            format!(
                "{shown}: {} bytes is too small for an image (at least {} KiB)",
                opts.size,
                least * 4
            ),
        ));
    }
    if opts.mode == Mode::Journal {
        let need = min_journal(
            total
                .saturating_sub(2 + journal)
                .div_ceil(GROUP_SPAN as u64),
        );
        if journal < need as u64 {
            return Err(Error::new(
                Errno::EINVAL,
                format!(
                    "{shown}: a journal of {journal} blocks is too small for this image (at least {need} blocks, {} KiB)",
                    need as u64 * 4
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the first two blocks (where any file system keeps its
/// superblock) hold anything but zeros.
fn holds_data(dev: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 2 * BLOCK_SIZE];
    dev.read_exact_at(&mut head, 0)?;
    Ok(head.iter().any(|&b| b != 0))
}

fn make_file(path: &Path, shown: &str, opts: &MkfsOptions) -> Result<(), Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(shown, e))?;
    lock_image(&file, false).map_err(|e| super::mount::store_error(shown, e))?;
    let existing = file.metadata().map_err(|e| Error::io(shown, e))?.len();
    if existing > 0 && !opts.force {
        return Err(Error::new(
            Errno::EEXIST,
            format!("{shown} exists and is not empty (use --force to overwrite it)"),
        ));
    }
    // check_geometry refused anything past MAX_IMAGE_BYTES.
    let total = opts.size / BLOCK_SIZE as u64;
    let bytes = total * BLOCK_SIZE as u64;
    file.set_len(0).map_err(|e| Error::io(shown, e))?;
    if opts.sparse {
        file.set_len(bytes).map_err(|e| {
            let _ = file.set_len(0);
            Error::io(shown, e)
        })?;
        // Kept to ask the host for its free space should the writes fail.
        let probe = file.try_clone().map_err(|e| Error::io(shown, e))?;
        let store = MmapStore::from_sparse_file(file).map_err(|e| Error::io(shown, e))?;
        return format_mapped(store, shown, opts).map_err(|e| host_was_full(e, &probe, shown));
    }
    // SAFETY: plain FFI call on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    if rc != 0 {
        let _ = file.set_len(0);
        return Err(Error::new(
            Errno(rc),
            match rc {
                libc::EFBIG => format!(
                    "{shown}: the host file system cannot hold a file of {bytes} bytes ({})",
                    Errno(rc)
                ),
                _ => format!("{shown}: cannot reserve {bytes} bytes: {}", Errno(rc)),
            },
        ));
    }
    format_file(file, shown, opts)
}

/// Maps the opened, locked image and formats its first `opts.size` bytes.
fn format_file(file: std::fs::File, shown: &str, opts: &MkfsOptions) -> Result<(), Error> {
    let store = MmapStore::from_file(file, false).map_err(|e| Error::io(shown, e))?;
    format_mapped(store, shown, opts)
}

/// A sparse image's writes go into holes, which take host space as they
/// are made: on a full host one faults, and the store reports EIO or,
/// latched, EROFS. Said as what it is, ENOSPC with the free space, and
/// the half-made image emptied.
fn host_was_full(e: Error, probe: &std::fs::File, shown: &str) -> Error {
    use std::os::fd::AsRawFd;
    let full = matches!(e.errno, Errno::EIO | Errno::EROFS)
        && crate::store::free_bytes(probe.as_raw_fd()).is_some_and(|(avail, _)| avail < 1 << 20);
    if !full {
        return e;
    }
    let _ = probe.set_len(0);
    let avail = crate::store::free_bytes(probe.as_raw_fd()).map_or(0, |f| f.0);
    Error::new(
        Errno::ENOSPC,
        format!(
            "{shown}: the host file system is full ({avail} bytes free): even a sparse image needs room for the blocks mkfs writes (superblocks, maps, the root directory and the journal's header)"
        ),
    )
}

fn format_mapped(store: MmapStore, shown: &str, opts: &MkfsOptions) -> Result<(), Error> {
    // A sparse image was made from an empty file: it holds only zeros.
    format_store_over(Box::new(store), opts, opts.sparse)
        .map(drop)
        .map_err(|e| {
            Error::new(
                e,
                format!("{shown}: writing the new file system failed: {e}"),
            )
        })
}

/// Formats the first `opts.size` bytes of a store (all of it if it is
/// smaller or `opts.size` is 0), for mkfs and for tests on a simulated
/// disk; gives the store back, synced.
pub fn format_store(
    store: Box<dyn BlockStore>,
    opts: &MkfsOptions,
) -> Result<Box<dyn BlockStore>, Errno> {
    format_store_over(store, opts, false)
}

/// `format_store`; `zeroed`: the store is known to hold only zeros (a new
/// sparse file), so the journal region is not written, and stays a hole.
fn format_store_over(
    store: Box<dyn BlockStore>,
    opts: &MkfsOptions,
    zeroed: bool,
) -> Result<Box<dyn BlockStore>, Errno> {
    let label = opts.label.as_str();
    let mut total = store.blocks().min(u32::MAX as u64 + 1);
    if opts.size > 0 {
        total = total.min(opts.size / BLOCK_SIZE as u64);
    }
    let journal = journal_size(opts, total);
    if total < MIN_BLOCKS + journal as u64 || label.len() > LABEL_MAX {
        return Err(Errno::EINVAL);
    }
    if opts.mode == Mode::Journal
        && journal
            < min_journal((total.saturating_sub(2 + journal as u64)).div_ceil(GROUP_SPAN as u64))
    {
        return Err(Errno::EINVAL);
    }
    let rnd = random_bytes().map_err(|e| e.errno)?;
    let first_group = 2 + journal;
    let group_count = (total - first_group as u64).div_ceil(GROUP_SPAN as u64) as u32;
    let now = opts.fixed_time.unwrap_or_else(Timespec::now);
    let mut sb = Superblock {
        version: FORMAT_VERSION,
        feat_compat: 0,
        feat_incompat: 0,
        feat_ro_compat: 0,
        mode: if opts.mode == Mode::Journal {
            MODE_JOURNAL
        } else {
            MODE_NONE
        },
        seq: 1,
        total_blocks: total,
        first_group,
        group_count,
        journal_start: 2,
        journal_blocks: journal,
        root_ino: 0,
        free_blocks: 0,
        used_inodes: 0,
        free_inodes: 0,
        inode_all_head: 0,
        inode_free_head: 0,
        orphan_head: 0,
        state: STATE_CLEAN,
        next_generation: 0,
        hash_key: opts
            .hash_key
            .unwrap_or_else(|| rnd[..16].try_into().expect("16 bytes")),
        uuid: opts
            .uuid
            .unwrap_or_else(|| rnd[16..].try_into().expect("16 bytes")),
        label: [0; 64],
        mkfs_time: now.sec,
        mount_time: 0,
        write_time: now.sec,
        mount_count: 0,
    };
    sb.label[..label.len()].copy_from_slice(label.as_bytes());
    let mut store = store;
    if journal > 0 {
        crate::txn::Journal::format_region(&mut *store, 2, journal, zeroed)?;
    }
    // mkfs writes in place: an image is not an image until it is finished.
    let j = crate::txn::Journal::in_place(store, false);
    let mut vol = Volume::assemble(j, sb.clone(), false, &Default::default());
    for g in 0..group_count {
        let map = sb.map_bid(g);
        let covered = (total - map as u64 - 1).min(MAP_BITS as u64) as u32;
        let b = vol.meta_mut(map)?;
        init_block(b, MAGIC_MAP);
        put_u32(b, MAP_FREE, covered);
        put_u32(b, MAP_GROUP, g);
        // Bits past the end of the image are set so they are never handed out.
        for i in covered..MAP_BITS {
            let off = MAP_BITMAP + (i / 8) as usize;
            b[off] |= 1 << (i % 8);
        }
        vol.sb.free_blocks += covered as u64;
    }
    // A placeholder root lets `alloc_inode` run; the real one replaces it.
    let mut root = Inode {
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        atime: now,
        mtime: now,
        ctime: now,
        btime: now,
        ..Default::default()
    };
    let ino = vol.alloc_inode(&mut root)?;
    root.parent = ino;
    vol.sb.root_ino = ino;
    vol.put_inode(ino, &root)?;
    vol.sync()?;
    Ok(vol.j.into_store())
}

impl Volume {
    /// Builds a volume over a store and a validated superblock.
    pub(crate) fn assemble(
        j: crate::txn::Journal,
        sb: Superblock,
        read_only: bool,
        opts: &super::MountOptions,
    ) -> Volume {
        let k0 = u64::from_le_bytes(sb.hash_key[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(sb.hash_key[8..].try_into().expect("8 bytes"));
        let was_clean = sb.state == STATE_CLEAN;
        let dev = u64::from_le_bytes(sb.uuid[..8].try_into().expect("8 bytes"));
        Volume {
            commit_blocks: match opts.commit_blocks {
                0 => (j.capacity() / 4).max(1),
                n => (n as usize).min(j.capacity()),
            },
            commit_interval: opts.commit_interval,
            j,
            sb,
            sb_dirty: false,
            alloc_group: 0,
            alloc_word: 0,
            open: Default::default(),
            kernel_refs: Default::default(),
            v1: None,
            read_only,
            was_clean,
            replayed: Default::default(),
            hash_key: (k0, k1),
            dev,
            fixed_time: opts.fixed_time,
            no_atime: false,
            call: None,
        }
    }
}

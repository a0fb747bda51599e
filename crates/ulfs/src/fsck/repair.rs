//! `fsck_repair`: check, repair what can be repaired, check again.
//!
//! 1. A strict check on a read-only mount. Strict means it also judges what
//!    only a clean unmount guarantees (checksums, counters, both superblock
//!    copies), since after a crash in mode `none` those are what needs
//!    fixing. A clean image that was unmounted cleanly is left untouched.
//! 2. A read-write mount (which replays the journal and, after a crash,
//!    recounts free blocks, but leaves the orphan list to the repair, which
//!    judges it with the namespace in hand), then `Volume::repair`
//!    (`fs/repair.rs`: bitmaps, link counts, lost+found, directory indexes,
//!    orphan list, counters, checksums), then a clean unmount (which frees
//!    the orphans the repair kept on the list).
//! 3. The strict check again. If problems remain and the first round fixed
//!    something, one more round runs, since a fix can uncover a problem
//!    the first walk could not see. What the last check still finds is
//!    `remaining`.
//!
//! The whole repair holds one exclusive lock on the image (its mounts share
//! the locked open file), so no other mount can start between its steps.
//!
//! `Err` means the image could not be checked or mounted read-write at
//! all (unreadable, not ulfs, both superblocks damaged, in use by another
//! mount): fsck(8)'s "operational error".

use super::{FsckOptions, FsckReport, check};
use crate::errno::Errno;
use crate::error::Error;
use crate::format::superblock::{
    MODE_JOURNAL, SB_PRIMARY, SB_SECONDARY, STATE_CLEAN, STATE_DIRTY, Superblock,
};
use crate::format::{
    BLOCK_SIZE, MAGIC_MAP, MAP_BITMAP, MAP_FREE, MAP_GROUP, init_block, journal, magic, put_u32,
    seal_block,
};
use crate::fs::{MountOptions, Reap, SharedBefore, Volume};
use crate::store::open_locked;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// What a repair did and what it left.
#[derive(Debug, Default, Clone)]
pub struct RepairReport {
    /// Problems the first check found.
    pub found: Vec<String>,
    /// What the repair changed, one line per fix.
    pub fixed: Vec<String>,
    /// Problems left after the repair.
    pub remaining: Vec<String>,
    /// The check made after the repair (counts of files, directories, ...).
    pub report: FsckReport,
}

impl RepairReport {
    /// fsck(8)'s exit status: 0 nothing wrong, 1 errors corrected, 4
    /// errors left uncorrected.
    pub fn exit_code(&self) -> i32 {
        if !self.remaining.is_empty() {
            4
        } else if !self.fixed.is_empty() || !self.found.is_empty() {
            1
        } else {
            0
        }
    }
}

/// What a strict check gives the repair: the report, whether the image
/// was unmounted cleanly, and the bytes of the blocks found referenced
/// twice as they read before any change (`SharedBefore`).
type Strict = (FsckReport, bool, SharedBefore);

/// Most shared blocks whose bytes are kept (16 MiB): past it, a copy takes
/// the block as it stands when it is made.
const SHARED_KEPT_MAX: usize = 4096;

fn strict_check(locked: &File, image: &Path, opts: &mut FsckOptions) -> Result<Strict, Error> {
    let vol = Volume::mount_file(
        share(locked, image)?,
        image,
        MountOptions {
            read_only: true,
            // The checker reads damaged blocks and judges them itself.
            verify_checksums: false,
            ..Default::default()
        },
        Reap::Deferred,
    )?;
    let clean = vol.sb.state == STATE_CLEAN;
    let (report, dups) = check::check_volume_shared(&vol, opts, true);
    // A block two owners name reads the same for both now; the repair
    // gives the later owner a copy, but may first change the block for the
    // earlier one (an inode block, a node resealed): the copy is made from
    // these bytes, so that the later owner still reads what it read.
    let mut before = SharedBefore::new();
    for bid in dups.into_iter().take(SHARED_KEPT_MAX) {
        if let Ok(b) = vol.j.data(bid) {
            before.insert(bid, Box::new(*b));
        }
    }
    Ok((report, clean, before))
}

/// Another descriptor of the locked open file: it shares the lock.
fn share(locked: &File, image: &Path) -> Result<File, Error> {
    locked
        .try_clone()
        .map_err(|e| Error::io(image.display(), e))
}

/// Gets the image ready for a read-write mount, by plain file I/O:
/// - a damaged superblock copy is rewritten from the valid one;
/// - both superblock copies are marked "not cleanly unmounted", so the
///   mount treats the image as after a crash: checksums are not trusted on
///   read (the repair judges and reseals them) and free counts are
///   recounted from the groups;
/// - a map block whose header is not a map block's (which would refuse the
///   mount) is replaced by one marking its whole group used, the safe state
///   until the repair rewrites it from what is really referenced.
///
/// Returns what it fixed.
fn prepare(locked: &File, image: &Path) -> Result<Vec<String>, Error> {
    let shown = image.display();
    let io = |e| Error::io(&shown, e);
    let mut f = share(locked, image)?;
    let blocks = f.seek(SeekFrom::End(0)).map_err(io)? / BLOCK_SIZE as u64;
    let mut b = [0u8; BLOCK_SIZE];
    let mut newest: Option<Superblock> = None;
    let mut damaged = Vec::new();
    // Whether the newest copy says the image was unmounted cleanly.
    let mut was_clean = false;
    for (bid, name) in [(SB_PRIMARY, "primary"), (SB_SECONDARY, "secondary")] {
        let off = bid as u64 * BLOCK_SIZE as u64;
        f.read_exact_at(&mut b, off).map_err(io)?;
        let Ok(mut sb) = Superblock::decode(&b, blocks) else {
            damaged.push((bid, name));
            continue;
        };
        if newest.as_ref().is_none_or(|n| sb.seq > n.seq) {
            was_clean = sb.state == STATE_CLEAN;
        }
        if sb.state != STATE_DIRTY {
            sb.state = STATE_DIRTY;
            sb.encode(&mut b);
            f.write_all_at(&b, off).map_err(io)?;
        }
        if newest.as_ref().is_none_or(|n| sb.seq > n.seq) {
            newest = Some(sb);
        }
    }
    let mut fixed = Vec::new();
    if let Some(sb) = &newest {
        for (bid, name) in damaged {
            sb.encode(&mut b);
            f.write_all_at(&b, bid as u64 * BLOCK_SIZE as u64)
                .map_err(io)?;
            fixed.push(format!(
                "the {name} superblock copy was damaged: rewritten from the other"
            ));
        }
    }
    if let Some(sb) = &newest
        && was_clean
    {
        fixed.extend(reset_journal_header(&f, sb, &shown)?);
    }
    if let Some(sb) = newest {
        for g in 0..sb.group_count {
            let map = sb.map_bid(g);
            let off = map as u64 * BLOCK_SIZE as u64;
            f.read_exact_at(&mut b, off).map_err(io)?;
            if magic(&b) == MAGIC_MAP {
                continue;
            }
            init_block(&mut b, MAGIC_MAP);
            put_u32(&mut b, MAP_FREE, 0);
            put_u32(&mut b, MAP_GROUP, g);
            b[MAP_BITMAP..].fill(0xFF);
            seal_block(&mut b);
            f.write_all_at(&b, off).map_err(io)?;
            fixed.push(format!(
                "group {g}: map block {map} was not a map block: replaced"
            ));
        }
    }
    f.sync_all().map_err(io)?;
    Ok(fixed)
}

/// A journal header that fails its checksum refuses every mount. On an
/// image unmounted cleanly the log holds nothing to replay (unmount
/// checkpoints it), so the header can be rewritten: replay is made to
/// start past every record left in the log, so none of them is replayed.
fn reset_journal_header(
    f: &File,
    sb: &Superblock,
    shown: &impl std::fmt::Display,
) -> Result<Vec<String>, Error> {
    if sb.mode != MODE_JOURNAL || sb.journal_blocks == 0 {
        return Ok(Vec::new());
    }
    let io = |e| Error::io(shown, e);
    let mut b = [0u8; BLOCK_SIZE];
    let start = sb.journal_start;
    f.read_exact_at(&mut b, start as u64 * BLOCK_SIZE as u64)
        .map_err(io)?;
    if journal::header_decode(&b).is_some() {
        return Ok(Vec::new());
    }
    let mut last = 0u64;
    let mut rec = [0u8; BLOCK_SIZE];
    for bid in start as u64 + 1..start as u64 + sb.journal_blocks as u64 {
        f.read_exact_at(&mut rec, bid * BLOCK_SIZE as u64)
            .map_err(io)?;
        // Intact records only, whose numbers are below SEQ_LIMIT.
        if journal::is_record(&rec) {
            last = last.max(journal::record_seq(&rec));
        }
    }
    journal::header_encode(&mut b, last + 1);
    f.write_all_at(&b, start as u64 * BLOCK_SIZE as u64)
        .map_err(io)?;
    Ok(vec![format!(
        "the journal header (block {start}) was damaged: rewritten (the image had been \
         unmounted cleanly, so its log held nothing to replay)"
    )])
}

/// Repairs the image at `image` in place; see the module comment.
pub fn fsck_repair(image: impl AsRef<Path>, opts: &mut FsckOptions) -> Result<RepairReport, Error> {
    let image = image.as_ref();
    if crate::v1::is_v1_image(image) {
        return Err(Error::new(
            Errno::EROFS,
            format!(
                "{}: an original ULFS (v1) image, which ulfs never writes; \
                 `ulfs fsck` without --repair checks it, `ulfs convert` makes an ulfs image of it",
                image.display()
            ),
        ));
    }
    opts.begin("checking");
    let locked = open_locked(image, false)
        .map_err(|e| crate::fs::store_error(&image.display().to_string(), e))?;
    let mut out = RepairReport::default();
    // Whether every checksum was to be valid (a clean unmount).
    let mut sealed = false;
    let mut shared = SharedBefore::new();
    match strict_check(&locked, image, opts) {
        Ok((before, was_clean, kept)) => {
            shared = kept;
            sealed = was_clean;
            if before.is_clean() && was_clean {
                out.report = before;
                return Ok(out);
            }
            out.found = before.problems;
        }
        // Damage that stops even a read-only mount (a map block that is
        // not one, after a crash) may be what `prepare` fixes; anything
        // else (not ulfs, unsupported, unreadable) is beyond repair.
        Err(e) if e.errno == Errno::EUCLEAN => {
            out.found = vec![format!("the image cannot be checked as it is: {e}")];
        }
        Err(e) => return Err(e),
    }
    // A round that lost something makes the next keep unowned blocks too.
    let mut lossy = false;
    for round in 0..2 {
        opts.begin("repairing");
        out.fixed.extend(prepare(&locked, image)?);
        // Repair must be able to read what it is about to fix.
        let mut vol = Volume::mount_file(
            share(&locked, image)?,
            image,
            MountOptions {
                verify_checksums: false,
                ..Default::default()
            },
            Reap::Deferred,
        )?;
        let (log, res) = {
            let mut progress = |done, total| opts.report(done, total);
            vol.repair(sealed, lossy, std::mem::take(&mut shared), &mut progress)
        };
        lossy |= log.lossy;
        let mut unfixed = log.unfixed;
        if let Err(e) = res {
            unfixed.push(format!("the repair had to stop: {e}"));
        }
        if let Err(e) = vol.unmount() {
            unfixed.push(format!("the repaired image could not be written back: {e}"));
        }
        drop(vol);
        let progressed = !log.fixed.is_empty();
        out.fixed.extend(log.fixed);
        opts.begin("re-checking");
        let (after, _, kept) = strict_check(&locked, image, opts)?;
        shared = kept;
        if after.is_clean() && unfixed.is_empty() || round == 1 || !progressed {
            out.remaining = after.problems.clone();
            out.remaining.extend(unfixed);
            out.report = after;
            break;
        }
    }
    Ok(out)
}

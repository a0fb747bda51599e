//! `ulfs resize IMAGE SIZE`: grows or shrinks an image offline, as
//! resize2fs does. The engine changes the size in one transaction
//! (ulfs::fs::Volume::resize, crash-safe in journal mode); this module
//! does what only the host can: checks the image first, makes a regular
//! file large enough before growing into it, cuts it after a shrink, and
//! turns the engine's refusals into advice.

use std::fs::OpenOptions;
use std::path::Path;

use ulfs::fs::Volume;
use ulfs::{Errno, MountOptions};

use crate::error::{CliError, CliResult};
use crate::image;

const BLOCK_SIZE: u64 = 4096;

pub struct Args<'a> {
    pub image: &'a Path,
    /// The new size in bytes (rounded down to whole blocks).
    pub size: u64,
    /// Skip the check that the image is consistent first.
    pub force: bool,
}

pub fn run(args: &Args<'_>) -> CliResult {
    let ctx = format!("resize: {}", args.image.display());
    let meta = std::fs::metadata(args.image).map_err(|e| CliError::io(&ctx, &e))?;
    let is_file = meta.file_type().is_file();
    if !is_file && !ulfs::store::is_block_device(args.image) {
        return Err(CliError::new(&ctx, "not a regular file or a block device"));
    }
    if ulfs::v1::is_v1_image(args.image) {
        return Err(CliError::new(
            &ctx,
            "an original ULFS (v1) image cannot be resized; `ulfs convert` makes an ulfs image of it",
        ));
    }
    let new_blocks = args.size / BLOCK_SIZE;
    if !args.force {
        let report = ulfs::fsck(args.image, &mut Default::default())
            .map_err(|e| image::whole_image_error("resize", args.image, &e))?;
        if !report.is_clean() {
            return Err(CliError::new(
                &ctx,
                format!(
                    "the image has {} problem(s); run `ulfs fsck --repair` first (or resize with --force)",
                    report.problems.len()
                ),
            ));
        }
    }
    let old_len = meta.len();
    let new_len = new_blocks * BLOCK_SIZE;
    // A regular file grows before the volume sees it (the engine only
    // grows into blocks the store holds); given back if the resize fails.
    let grew_file = is_file && new_len > old_len;
    if grew_file {
        set_len(args.image, new_len).map_err(|e| CliError::io(&ctx, &e))?;
    }
    let result = resize_volume(&ctx, args.image, new_blocks);
    match result {
        Ok((old, new)) => {
            if is_file && new_len < old_len {
                set_len(args.image, new_len).map_err(|e| CliError::io(&ctx, &e))?;
            }
            println!(
                "{}: {} -> {} ({} -> {} blocks)",
                args.image.display(),
                human(old * BLOCK_SIZE),
                human(new * BLOCK_SIZE),
                old,
                new
            );
            Ok(())
        }
        Err(e) => {
            if grew_file {
                let _ = set_len(args.image, old_len);
            }
            Err(e)
        }
    }
}

/// Mounts, resizes and unmounts; the old and new sizes in blocks.
fn resize_volume(ctx: &str, image: &Path, new_blocks: u64) -> CliResult<(u64, u64)> {
    let mut vol = Volume::mount(image, MountOptions::default())
        .map_err(|e| image::whole_image_error("resize", image, &e))?;
    let old = vol.info().total_blocks;
    if new_blocks == old {
        vol.unmount().map_err(|e| CliError::errno(ctx, e))?;
        return Ok((old, old));
    }
    let resized = vol.resize(new_blocks);
    // Refused or not, the image is unmounted cleanly: a refusal changes
    // nothing, and must not leave the image marked as not unmounted.
    let refusal = match resized {
        Ok(r) => {
            vol.unmount().map_err(|e| CliError::errno(ctx, e))?;
            return Ok((r.old_blocks, r.new_blocks));
        }
        Err(e) => refusal(ctx, image, &vol, new_blocks, e),
    };
    let _ = vol.unmount();
    Err(refusal)
}

/// Why `vol` refused to take `new_blocks`, in words.
fn refusal(ctx: &str, image: &Path, vol: &Volume, new_blocks: u64, e: Errno) -> CliError {
    match e {
        Errno::EINVAL => {
            let (min, max) = vol.resize_limits();
            let msg = if new_blocks < min {
                format!(
                    "{} is below the smallest image this one can be ({})",
                    human(new_blocks * BLOCK_SIZE),
                    human(min * BLOCK_SIZE)
                )
            } else if max < vol_store_blocks(image) {
                format!(
                    "at most {}: the journal is too small for a transaction over more groups",
                    human(max * BLOCK_SIZE)
                )
            } else {
                format!(
                    "at most {}: the size of the device",
                    human(max * BLOCK_SIZE)
                )
            };
            CliError::new(ctx, msg)
        }
        Errno::ENOSPC => {
            let way = vol.in_use_past(new_blocks).ok().flatten();
            CliError::new(
                ctx,
                match way {
                    Some(w) => format!(
                        "{} blocks ({}) are in use past {} (the first is block {}); remove files or choose a larger size",
                        w.blocks,
                        human(w.blocks * BLOCK_SIZE),
                        human(new_blocks * BLOCK_SIZE),
                        w.first
                    ),
                    None => "blocks are in use past the new size".into(),
                },
            )
        }
        e => CliError::errno(ctx, e),
    }
}

/// Blocks the image file or device holds.
fn vol_store_blocks(image: &Path) -> u64 {
    std::fs::File::open(image)
        .and_then(|mut f| ulfs::store::backing_size(&mut f))
        .map_or(0, |b| b / BLOCK_SIZE)
}

fn set_len(image: &Path, len: u64) -> std::io::Result<()> {
    OpenOptions::new().write(true).open(image)?.set_len(len)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

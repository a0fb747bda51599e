//! `ulfs mkfs`: create a fresh image.
//!
//! The dangerous part of mkfs is destroying an existing image by accident;
//! the core refuses (EEXIST) unless forced, and this module turns that
//! refusal into advice the user can act on.

use std::path::Path;

use ulfs::{Errno, MkfsOptions};

use crate::error::{CliError, CliResult};
use crate::image;

/// Block size of every ulfs image (docs/FORMAT.md); journal sizes are
/// given in bytes on the command line but stored in blocks.
const BLOCK_SIZE: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// No journal: in-place updates, fastest; a crash may need fsck.
    None,
    /// Metadata journal: crash-consistent, durable fsync (the default).
    Journal,
}

pub struct Args<'a> {
    pub image: &'a Path,
    pub size: u64,
    pub label: &'a str,
    pub force: bool,
    pub mode: ModeArg,
    pub journal_size: Option<u64>,
    pub sparse: bool,
}

pub fn run(args: &Args<'_>) -> CliResult {
    let ctx = format!("mkfs: {}", args.image.display());
    let mode = match args.mode {
        ModeArg::None => ulfs::Mode::None,
        ModeArg::Journal => ulfs::Mode::Journal,
    };
    if mode == ulfs::Mode::None && args.journal_size.is_some() {
        return Err(CliError::new(ctx, "--journal-size needs --mode journal"));
    }
    if args.label.len() > 63 {
        return Err(CliError::new(ctx, "label is longer than 63 bytes"));
    }
    let journal_blocks = match args.journal_size {
        None => None,
        Some(bytes) => {
            let blocks = bytes.div_ceil(BLOCK_SIZE);
            let blocks = u32::try_from(blocks)
                .map_err(|_| CliError::new(&ctx, "--journal-size is too large"))?;
            Some(blocks)
        }
    };
    let opts = MkfsOptions {
        size: args.size,
        label: args.label.to_string(),
        force: args.force,
        mode,
        journal_blocks,
        sparse: args.sparse,
        ..Default::default()
    };
    ulfs::mkfs(args.image, &opts).map_err(|e| {
        if e.errno == Errno::EEXIST {
            CliError::new(
                &ctx,
                "it exists and holds data; refusing to overwrite it (use --force to replace it)",
            )
        } else {
            image::whole_image_error("mkfs", args.image, &e)
        }
    })
}

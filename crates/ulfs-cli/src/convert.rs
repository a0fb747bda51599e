//! `ulfs convert V1IMAGE NEWIMAGE`: an original ULFS (v1) image into a new
//! ulfs image with every directory and file (ulfs::v1::convert, which
//! checks the v1 image as it reads it). The v1 image is only read; a new
//! image left half-made by a failure is removed, an existing one is only
//! replaced with --force, as mkfs does.

use std::path::Path;

use ulfs::{Errno, MkfsOptions};

use crate::error::{CliError, CliResult};
use crate::image;
use crate::mkfs::ModeArg;

pub struct Args<'a> {
    pub v1: &'a Path,
    pub image: &'a Path,
    /// Bytes; 0 sizes the new image to hold the translation.
    pub size: u64,
    pub force: bool,
    pub mode: ModeArg,
}

pub fn run(args: &Args<'_>) -> CliResult {
    let ctx = format!("convert: {}", args.v1.display());
    let meta = std::fs::metadata(args.v1).map_err(|e| CliError::io(&ctx, &e))?;
    if meta.is_dir() {
        return Err(CliError::new(&ctx, "is a directory"));
    }
    if !ulfs::v1::is_v1_image(args.v1) {
        return Err(CliError::new(
            &ctx,
            "not an original ULFS (v1) image (no v1 magic at its start)",
        ));
    }
    let made = !args.image.exists();
    let opts = MkfsOptions {
        size: args.size,
        force: args.force,
        mode: match args.mode {
            ModeArg::None => ulfs::Mode::None,
            ModeArg::Journal => ulfs::Mode::Journal,
        },
        ..Default::default()
    };
    match ulfs::v1::convert(args.v1, args.image, &opts) {
        Ok(c) => {
            println!(
                "{}: {} directories, {} files, {} bytes from {}",
                args.image.display(),
                c.dirs,
                c.files,
                c.bytes,
                args.v1.display()
            );
            Ok(())
        }
        Err(e) => {
            if made {
                let _ = std::fs::remove_file(args.image);
            }
            // EEXIST from mkfs: an image was there (a duplicate name in
            // a damaged v1 directory also gives EEXIST, from the copy).
            let held_data = std::fs::metadata(args.image).is_ok_and(|m| m.len() > 0);
            Err(
                if e.errno == Errno::EEXIST && !made && !args.force && held_data {
                    CliError::new(
                        format!("convert: {}", args.image.display()),
                        "it exists and holds data; refusing to overwrite it (use --force to replace it)",
                    )
                } else {
                    image::whole_image_error("convert", args.v1, &e)
                },
            )
        }
    }
}

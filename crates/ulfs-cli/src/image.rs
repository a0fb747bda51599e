//! Opening and closing an image for one command.
//!
//! Every command mounts once and unmounts once; keeping both here makes the
//! read-only/read-write choice explicit at each call site and guarantees
//! the unmount error is reported instead of being swallowed by `Drop`.

use std::path::Path;

use ulfs::{Fs, MountOptions};

use crate::error::{CliError, CliResult};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

pub fn mount(cmd: &str, image: &Path, access: Access) -> CliResult<Fs> {
    if access == Access::ReadWrite && ulfs::v1::is_v1_image(image) {
        return Err(CliError::new(
            format!("{cmd}: {}", image.display()),
            "an original ULFS (v1) image, which ulfs only reads; \
             `ulfs convert V1IMAGE NEWIMAGE` makes an ulfs image of it",
        ));
    }
    let opts = MountOptions {
        read_only: access == Access::ReadOnly,
        ..Default::default()
    };
    Fs::mount(image, opts).map_err(|e| whole_image_error(cmd, image, &e))
}

/// `cmd: IMAGE: message` for mkfs/mount/fsck failures. Some core messages
/// already start with the image path; it is not repeated then.
pub fn whole_image_error(cmd: &str, image: &Path, e: &ulfs::Error) -> CliError {
    let shown = image.display().to_string();
    if e.message.starts_with(&format!("{shown}: ")) {
        CliError::new(cmd, e.message.clone())
    } else {
        CliError::new(format!("{cmd}: {shown}"), e.message.clone())
    }
}

pub fn unmount(cmd: &str, image: &Path, fs: Fs) -> CliResult {
    fs.unmount()
        .map_err(|e| CliError::errno(format!("{cmd}: {}: unmount", image.display()), e))
}

/// Run `body` on the mounted image, then unmount. The body's error wins
/// (it is the cause); an unmount failure after a successful body is still
/// an error, since it may mean data did not reach the image.
pub fn with_fs<T>(
    cmd: &str,
    image: &Path,
    access: Access,
    body: impl FnOnce(&mut Fs) -> CliResult<T>,
) -> CliResult<T> {
    let mut fs = mount(cmd, image, access)?;
    let result = body(&mut fs);
    let unmounted = unmount(cmd, image, fs);
    let value = result?;
    unmounted?;
    Ok(value)
}

//! `ulfs cat`: copy files from the image to stdout, byte for byte.
//!
//! Like cat(1) it goes on with the next operand after one fails and exits
//! non-zero at the end, so one bad path does not hide the others' output.

use std::io::Write;
use std::path::Path;

use ulfs::{Errno, Fs};

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::show;

/// Large reads amortise the per-call cost; the image is memory-mapped so
/// this is a memcpy, not I/O.
const CHUNK: usize = 1 << 20;

enum CatError {
    Image(Errno),
    Stdout(std::io::Error),
}

pub fn run(image_path: &Path, paths: &[Vec<u8>]) -> CliResult {
    let mut failures = Failures::default();
    image::with_fs("cat", image_path, Access::ReadOnly, |fs| {
        let mut out = std::io::stdout().lock();
        let mut buf = vec![0u8; CHUNK];
        for path in paths {
            match cat_one(fs, path, &mut buf, &mut out) {
                Ok(()) => {}
                Err(CatError::Image(e)) => {
                    failures.report(CliError::errno(format!("cat: {}", show(path)), e))
                }
                // Nowhere left to write to: further operands are pointless.
                Err(CatError::Stdout(e)) => return Err(CliError::io("cat: stdout", &e)),
            }
        }
        out.flush().map_err(|e| CliError::io("cat: stdout", &e))
    })?;
    failures.finish()
}

fn cat_one(fs: &mut Fs, path: &[u8], buf: &mut [u8], out: &mut impl Write) -> Result<(), CatError> {
    let fd = fs.open(path, libc::O_RDONLY, 0).map_err(CatError::Image)?;
    let copied = copy_fd(fs, fd, buf, out);
    let closed = fs.close(fd).map_err(CatError::Image);
    copied?;
    closed
}

fn copy_fd(
    fs: &mut Fs,
    fd: ulfs::Fd,
    buf: &mut [u8],
    out: &mut impl Write,
) -> Result<(), CatError> {
    if fs.fstat(fd).map_err(CatError::Image)?.is_dir() {
        return Err(CatError::Image(Errno::EISDIR));
    }
    loop {
        let n = fs.read(fd, buf).map_err(CatError::Image)?;
        if n == 0 {
            return Ok(());
        }
        let data = buf.get(..n).ok_or(CatError::Image(Errno::EIO))?;
        out.write_all(data).map_err(CatError::Stdout)?;
    }
}

//! The example of the README's "Using ulfs from Rust", the same code, kept
//! here so that the test suite compiles it (`cargo test` builds examples;
//! change both together). `cargo run -p ulfs --example readme` makes
//! `disk.img` in the current directory (it must not exist yet), writes a
//! file there and reads it back.

use ulfs::{Fs, MkfsOptions, MountOptions, mkfs};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image = "disk.img";
    mkfs(
        image,
        &MkfsOptions {
            size: 64 << 20,
            ..Default::default()
        },
    )?;
    let mut fs = Fs::mount(image, MountOptions::default())?;
    fs.mkdir("/notes", 0o755)?;
    let fd = fs.open("/notes/hello.txt", libc::O_CREAT | libc::O_RDWR, 0o644)?;
    fs.write(fd, b"hello from Rust\n")?;
    let mut buf = [0u8; 64];
    let n = fs.pread(fd, &mut buf, 0)?;
    fs.close(fd)?;
    fs.unmount()?; // commits everything to the image
    print!("{}", String::from_utf8_lossy(&buf[..n]));
    Ok(())
}

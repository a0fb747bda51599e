//! `ulfs mount IMAGE DIR`: the image on the host through FUSE
//! (crates/ulfs-fuse), in the background by default, as fuse2fs and
//! sshfs do: the command returns once the mount is in place (or with the
//! reason it could not be made), and a server process serves it until it
//! is unmounted. `--foreground` serves in this process instead.
//!
//! In the background, every failure (a bad image, one in use, a busy
//! mount point, no FUSE) still reaches the user with the command's exit
//! status (`daemon.rs`).

use crate::error::{CliError, CliResult};
use std::path::{Path, PathBuf};
use ulfs_fuse::MountConfig;

pub struct Args<'a> {
    pub image: &'a Path,
    pub mountpoint: &'a Path,
    pub options: &'a [String],
    pub foreground: bool,
}

pub fn run(args: &Args) -> CliResult {
    // The volume's errors name the image themselves.
    let ctx = || "mount".to_string();
    let mut cfg = MountConfig::default();
    for list in args.options {
        cfg.parse_list(list)
            .map_err(|m| CliError::new(ctx(), m).with_code(crate::EXIT_USAGE))?;
    }
    // The server outlives the caller's working directory (it moves to /).
    let image = std::path::absolute(args.image)
        .map_err(|e| CliError::io(format!("mount: {}", args.image.display()), &e))?;
    let mountpoint = std::path::absolute(args.mountpoint)
        .map_err(|e| CliError::io(format!("mount: {}", args.mountpoint.display()), &e))?;
    let at = || format!("mount: {}", mountpoint.display());
    match std::fs::metadata(&mountpoint) {
        // ENOENT, or ENOTCONN where a killed server left its mount behind
        // (`fusermount3 -u` it first).
        Err(e) => return Err(CliError::io(at(), &e)),
        Ok(m) if !m.is_dir() => return Err(CliError::new(at(), "not a directory")),
        Ok(_) => {}
    }
    if args.foreground {
        return ulfs_fuse::serve(&image, &mountpoint, &cfg, || {})
            .map_err(|m| CliError::new(ctx(), m));
    }
    crate::daemon::daemonize(|ready| ulfs_fuse::serve(&image, &mountpoint, &cfg, ready))
        .map_err(|m| CliError::new(ctx(), m))
}

/// Called as `mount.ulfs` or `mount.fuse.ulfs` (links to this program),
/// as mount(8) calls a helper for `mount -t fuse.ulfs IMAGE DIR` and for
/// an fstab line of that type: `HELPER IMAGE DIR [-sfnv] [-o OPTIONS]
/// [-t TYPE]`. The command it stands for, or None when called otherwise.
/// A malformed call exits with status 2 at once.
pub fn as_mount_helper() -> Option<crate::Command> {
    let mut args = std::env::args_os();
    let me = PathBuf::from(args.next()?);
    let name = me.file_name()?.to_str()?;
    if name != "mount.ulfs" && name != "mount.fuse.ulfs" {
        return None;
    }
    let usage = |why: &str| -> ! {
        eprintln!("{name}: {why}\nusage: {name} IMAGE DIR [-o OPTIONS]");
        std::process::exit(crate::EXIT_USAGE)
    };
    let (mut positional, mut options) = (Vec::new(), Vec::new());
    let mut fake = false;
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-o") => match args.next().and_then(|o| o.into_string().ok()) {
                Some(o) => options.push(o),
                None => usage("-o needs a list of options"),
            },
            Some("-t") => {
                args.next();
            }
            // Sloppy, no mtab, verbose: nothing to do differently here.
            Some("-s" | "-n" | "-v") => {}
            Some("-f") => fake = true,
            Some(flag) if flag.starts_with('-') => usage(&format!("unknown flag {flag}")),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [image, mountpoint] = <[PathBuf; 2]>::try_from(positional)
        .unwrap_or_else(|_| usage("needs an image and a directory"));
    if fake {
        std::process::exit(0);
    }
    Some(crate::Command::Mount {
        image,
        mountpoint,
        options,
        foreground: false,
    })
}

/// How long `ulfs umount` waits for the server to let go of the image.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `ulfs umount DIR`: `fusermount3 -u DIR`, then waits until the server
/// has let go of the image (committed, marked clean, exited), so the
/// image can be used at once: `fusermount3 -u` returns as soon as the
/// kernel has detached the mount, a moment before. `lazy`: `-u -z`,
/// detached even with files open; nothing to wait for then (the server
/// ends when the last one is closed).
pub fn umount(dir: &Path, lazy: bool) -> CliResult {
    let ctx = || format!("umount: {}", dir.display());
    let dir = std::path::absolute(dir).map_err(|e| CliError::io(ctx(), &e))?;
    let image = ulfs_fuse::fuse_mount_source(&dir)
        .ok_or_else(|| CliError::new(ctx(), "not a FUSE mount point"))?;
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg(&dir)
        .output()
        .map_err(|e| CliError::new(ctx(), format!("fusermount3: {e} (Debian package fuse3)")))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(CliError::new(
            ctx(),
            why.trim().trim_start_matches("fusermount3: "),
        ));
    }
    if lazy || !image.is_file() {
        return Ok(());
    }
    // The server holds the image's lock until it has unmounted the volume.
    let start = std::time::Instant::now();
    loop {
        let free = std::fs::File::open(&image).is_ok_and(|f| match f.try_lock() {
            Ok(()) => {
                let _ = f.unlock();
                true
            }
            Err(_) => false,
        });
        if free {
            return Ok(());
        }
        if start.elapsed() > RELEASE_WAIT {
            return Err(CliError::new(
                ctx(),
                format!(
                    "unmounted, but the server still holds {} after {} s",
                    image.display(),
                    RELEASE_WAIT.as_secs()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

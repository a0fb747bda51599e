//! `ulfs mount IMAGE DIR`: the image on the host through FUSE
//! (crates/ulfs-fuse), in the background by default, as fuse2fs and
//! sshfs do: the command returns once the mount is in place (or with the
//! reason it could not be made), and a server process serves it until it
//! is unmounted. `--foreground` serves in this process instead.
//!
//! Daemonizing is a fork before anything is opened: the child mounts and
//! tells the parent over a pipe ("ok", or the error), so every failure
//! (a bad image, one in use, a busy mount point, no FUSE) reaches the
//! user with the command's exit status.

use crate::error::{CliError, CliResult};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
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
    daemonize(&image, &mountpoint, &cfg).map_err(|m| CliError::new(ctx(), m))
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

/// Forks a server that mounts and serves; returns when it says the mount
/// is ready, or with what it reported instead.
fn daemonize(image: &Path, mountpoint: &Path, cfg: &MountConfig) -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid two-int array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nobody.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the command is single-threaded here (nothing has started a
    // thread: argument parsing only), so the child may go on running
    // ordinary Rust code.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(read_end);
            let code = serve_in_child(image, mountpoint, cfg, std::fs::File::from(write_end));
            std::process::exit(code)
        }
        _child => {
            drop(write_end);
            let mut said = String::new();
            let _ = std::fs::File::from(read_end).read_to_string(&mut said);
            match said.as_str() {
                "ok" => Ok(()),
                "" => Err("the mount's server ended without a word".into()),
                why => Err(why.to_owned()),
            }
        }
    }
}

/// The server: a session of its own, detached from the terminal once the
/// mount is ready; its errors go to the parent until then.
fn serve_in_child(image: &Path, mountpoint: &Path, cfg: &MountConfig, pipe: std::fs::File) -> i32 {
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe { libc::setsid() };
    let mut pipe = Some(pipe);
    let served = ulfs_fuse::serve(image, mountpoint, cfg, || {
        // Closed once written: the parent reads to the end.
        if let Some(mut p) = pipe.take() {
            let _ = p.write_all(b"ok");
        }
        detach();
    });
    match served {
        Ok(()) => 0,
        Err(why) => {
            if let Some(mut p) = pipe.take() {
                let _ = p.write_all(why.as_bytes());
            }
            1
        }
    }
}

/// Standard streams to /dev/null and the working directory to `/`, so
/// the server holds no terminal and no directory busy.
fn detach() {
    let _ = std::env::set_current_dir("/");
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this
            // process owns; /dev/null stays open for the call.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
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

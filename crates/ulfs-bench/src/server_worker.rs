//! The worker of ulfs-server: the image served by `ulfs serve IMAGE
//! --socket IMAGE.sock -f`, a child process of the worker, and the C-API
//! workload connected to it (`ulfs_connect`, the worker's argument
//! `server:SOCKET`), so the client and the server are two processes, as
//! in real use. When the sweep ends, or the workload fails, the server is
//! stopped with SIGTERM (it commits and marks the image clean) and the
//! image is checked with fsck; either going wrong fails the worker. A
//! worker that dies some other way (killed after a hang) takes the server
//! with it: the server is told SIGTERM when its parent dies
//! (`PR_SET_PDEATHSIG`).
//!
//! Whole programs (tar, PostMark) run through the server under `ulfs run
//! --server`, on a server the experiment starts itself ([`Served`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Extra arguments for `ulfs serve` (`--workers 1 --spin-us 100`), split
/// at white space: to measure the server's settings; none by default (a
/// server as `ulfs serve` starts one).
pub const SERVE_ARGS_ENV: &str = "ULFS_BENCH_SERVE_ARGS";

/// Where the server listens: beside the image.
fn socket_path(image: &Path) -> PathBuf {
    image.with_extension("sock")
}

/// Where the server's own words go (its stderr): beside the image, not
/// into the run's pipes, which the run reads until every holder closes
/// them.
fn log_path(image: &Path) -> PathBuf {
    image.with_extension("serve.log")
}

/// Serves requests on `image` through a server; the exit status.
pub fn serve(image: &Path) -> i32 {
    let socket = socket_path(image);
    let log = log_path(image);
    let ulfs = match std::env::var_os(crate::fuse_worker::ULFS_ENV) {
        Some(u) => PathBuf::from(u),
        None => {
            println!("err ulfs serve: the ulfs program is not known");
            return 1;
        }
    };
    let mut server = match start(&ulfs, image, &socket, &log) {
        Ok(s) => s,
        Err(why) => {
            // The first request's answer: the system failed to start.
            println!("err ulfs serve: {why}");
            return 1;
        }
    };
    let mut target = std::ffi::OsString::from("server:");
    target.push(&socket);
    let status = crate::worker::serve("ulfs", Path::new(&target));
    let stopped = stop(&mut server, &log);
    // After a clean stop only: a server that had to be killed leaves the
    // journal to replay, and says so already.
    let checked = stopped.and_then(|()| fsck_clean(image));
    match checked {
        Ok(()) => status,
        Err(why) => {
            eprintln!("ulfs-bench server worker: {why}");
            if status == 0 { 1 } else { status }
        }
    }
}

/// A server the experiment runs programs through (`ulfs run --server`).
pub struct Served {
    child: Child,
    image: PathBuf,
    log: PathBuf,
    pub socket: PathBuf,
}

impl Served {
    /// `ulfs serve -f` on `image`, once it listens.
    pub fn start(ulfs: &Path, image: &Path) -> Result<Served, String> {
        let (socket, log) = (socket_path(image), log_path(image));
        let child = start(ulfs, image, &socket, &log)?;
        Ok(Served {
            child,
            image: image.to_path_buf(),
            log,
            socket,
        })
    }

    /// Stops the server (SIGTERM: it commits), then fsck of the image.
    pub fn finish(mut self) -> Result<(), String> {
        stop(&mut self.child, &self.log)?;
        fsck_clean(&self.image)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `ulfs serve -f` on `image` and waits (up to 10 s) until its
/// socket is there.
fn start(ulfs: &Path, image: &Path, socket: &Path, log: &Path) -> Result<Child, String> {
    // sun_path holds 108 bytes with the NUL.
    if socket.as_os_str().len() > 107 {
        return Err(format!("{}: too long for a UNIX socket", socket.display()));
    }
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("{}: {e}", socket.display()));
        }
        _ => {}
    }
    let stderr = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(ulfs);
    cmd.arg("serve")
        .arg(image)
        .arg("--socket")
        .arg(socket)
        .arg("-f")
        .args(
            std::env::var(SERVE_ARGS_ENV)
                .unwrap_or_default()
                .split_whitespace(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid, raise) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The worker died before the prctl: nobody would stop us.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGTERM);
            }
            Ok(())
        });
    }
    let mut server = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let started = Instant::now();
    loop {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(Some(status)) = server.try_wait() {
            return Err(format!("ended ({status}) {}", log_tail(log)));
        }
        if std::fs::symlink_metadata(socket).is_ok_and(|m| m.file_type().is_socket()) {
            return Ok(server);
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = server.kill();
            let _ = server.wait();
            return Err(format!("no socket within 10 s {}", log_tail(log)));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGTERM, then waits up to a minute for a clean exit (then SIGKILL).
fn stop(server: &mut Child, log: &Path) -> Result<(), String> {
    // SAFETY: kill has no memory-safety preconditions; the child is not
    // reaped yet, so its pid is still its own.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let started = Instant::now();
    loop {
        match server.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => {
                return Err(format!("ulfs serve stopped with {s} {}", log_tail(log)));
            }
            Ok(None) if started.elapsed() > Duration::from_secs(60) => {
                let _ = server.kill();
                let _ = server.wait();
                return Err(format!(
                    "ulfs serve still running 60 s after SIGTERM: killed {}",
                    log_tail(log)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("ulfs serve could not be waited for: {e}")),
        }
    }
}

/// The image, as the server left it, passes fsck.
fn fsck_clean(image: &Path) -> Result<(), String> {
    let report = ulfs::fsck(image, &mut ulfs::FsckOptions::default())
        .map_err(|e| format!("fsck could not check {}: {e}", image.display()))?;
    if report.is_clean() {
        Ok(())
    } else {
        Err(format!(
            "fsck of {} after the server stopped found {} problem(s): {}",
            image.display(),
            report.problems.len(),
            report.problems.join("; ")
        ))
    }
}

/// "(ulfs serve said: ...)": the end of the server's stderr, if any.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let cut = text.len().saturating_sub(400);
    let start = (cut..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    format!("(it said: {})", &text[start..])
}

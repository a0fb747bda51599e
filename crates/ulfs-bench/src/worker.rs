//! Workers: the processes that run the C workloads (`c/workload.c`) for
//! one system, and the parent's side of talking to them.
//!
//! A worker is this binary started as `ulfs-bench --internal-worker posix
//! DIR` or `... ulfs IMAGE`, possibly under `ulfs run` or inside a memory
//! cgroup. It lives for one sweep (all params and rounds of a figure), so
//! per-process costs (starting, mounting, loading libraries) are paid once
//! and not timed; or, for figs 8 and 9 and mount, for one measurement,
//! since its memory or its mount is what is measured. The parent sends one
//! request line at a time and reads one answer line, which keeps the
//! systems of a round strictly one after another. Whole programs
//! (PostMark) run under the same rules ([`run_program`]).

use std::ffi::{CString, c_char};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The first argument that makes this program a worker, or the mkfs of
/// an image inside a cgroup: not words a user would type as experiments.
pub const WORKER_ARG: &str = "--internal-worker";
pub const MKFS_ARG: &str = "--internal-mkfs";

/// The longest a request may take: the largest cells (a million files
/// created on a slow machine) take minutes, a hung worker forever.
const PATIENCE: Duration = Duration::from_secs(900);

/// The process groups of the workers alive now, for [`interrupt`].
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The run was told to stop (SIGINT, SIGTERM, SIGHUP): every worker is
/// sent SIGTERM (each is the leader of its own process group, so the
/// terminal's Ctrl-C reaches only the parent, which then decides), and
/// the experiments stop at their next step. Called from the signal
/// handler's thread.
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in live.iter() {
        // SAFETY: kill has no memory-safety preconditions; a group that
        // has already exited gives ESRCH, which is fine. SIGCONT first: a
        // stopped worker would keep SIGTERM pending.
        unsafe {
            libc::kill(-(pid as libc::pid_t), libc::SIGCONT);
            libc::kill(-(pid as libc::pid_t), libc::SIGTERM);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Whether a worker's error says the system lacks something the
/// experiment needs (a library, a peer not built yet), rather than
/// something going wrong: the first is a skip, the second also fails
/// the run. The C workload begins such answers with `missing:`; the
/// cgroup code says `skipped: no cgroup memory controller`.
pub fn is_missing(reason: &str) -> bool {
    reason.contains("missing:") || reason.contains("skipped:") || reason.contains(": interrupted")
}

fn forget(pid: u32) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

unsafe extern "C" {
    fn ulfs_bench_worker_posix(dir: *const c_char) -> i32;
    fn ulfs_bench_worker_ulfs(image: *const c_char) -> i32;
}

/// Runs as a worker (`ulfs-bench --internal-worker KIND WHERE`); returns the exit
/// status.
pub fn serve(kind: &str, place: &Path) -> i32 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = CString::new(place.as_os_str().as_bytes()) else {
        eprintln!("ulfs-bench worker: a path with a NUL byte");
        return 2;
    };
    match kind {
        // SAFETY: `c` is a NUL-terminated string that outlives the call;
        // the C loop only reads it.
        "posix" => unsafe { ulfs_bench_worker_posix(c.as_ptr()) },
        // SAFETY: as above.
        "ulfs" => unsafe { ulfs_bench_worker_ulfs(c.as_ptr()) },
        "fuse" => crate::fuse_worker::serve(place),
        "server" => crate::server_worker::serve(place),
        _ => {
            eprintln!("ulfs-bench worker: posix, ulfs, fuse or server, not {kind:?}");
            2
        }
    }
}

/// A running worker, spoken to line by line.
pub struct Worker {
    child: Child,
    /// Requests go here; `None` once closed (the worker's end of input).
    to: Option<ChildStdin>,
    from: BufReader<ChildStdout>,
    what: String,
    /// The last [`TAIL`] bytes the worker wrote on stderr.
    tail: Arc<Mutex<Vec<u8>>>,
    drain: Option<std::thread::JoinHandle<()>>,
    /// Killed by the run (a hang, an interrupt): its end says nothing new.
    killed: bool,
}

/// How much of a worker's stderr is kept for the message when it fails.
const TAIL: usize = 600;

impl Worker {
    /// Starts `cmd` (whose last arguments make it a worker) and waits for
    /// nothing: the first request finds out whether it came up.
    pub fn start(mut cmd: Command, what: &str) -> Result<Worker, String> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        if interrupted() {
            return Err(format!("{what}: interrupted"));
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{what}: cannot start the worker: {e}"))?;
        live.push(child.id());
        drop(live);
        let to = Some(child.stdin.take().ok_or("no worker stdin")?);
        let from = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
        let (tail, drain) = drain_stderr(&mut child);
        Ok(Worker {
            child,
            to,
            from,
            what: what.to_string(),
            tail,
            drain,
            killed: false,
        })
    }

    /// Sends one request; returns the numbers of an `ok` answer, or the
    /// worker's error (its own words, or how it died). A worker that does
    /// not answer within [`PATIENCE`] is killed, and one is not waited for
    /// once the run is interrupted.
    pub fn ask(&mut self, request: &str) -> Result<Vec<f64>, String> {
        self.ask_within(request, PATIENCE)
    }

    /// [`Worker::ask`] with its own limit on the wait.
    pub fn ask_within(&mut self, request: &str, patience: Duration) -> Result<Vec<f64>, String> {
        let sent = match self.to.as_mut() {
            Some(to) => writeln!(to, "{request}").and_then(|()| to.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        let mut line = String::new();
        let got = if sent.is_ok() {
            self.wait_for_answer(patience)?;
            self.from.read_line(&mut line).unwrap_or(0)
        } else {
            0
        };
        if got == 0 {
            return Err(self.death());
        }
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("ok") {
            rest.split_whitespace()
                .map(|w| {
                    w.parse::<f64>()
                        .map_err(|_| format!("{}: bad answer {line:?}", self.what))
                })
                .collect()
        } else if let Some(e) = line.strip_prefix("err ") {
            Err(e.to_string())
        } else {
            Err(format!("{}: bad answer {line:?}", self.what))
        }
    }

    /// Returns once the answer (or the end of the pipe) can be read.
    fn wait_for_answer(&mut self, patience: Duration) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let started = std::time::Instant::now();
        while self.from.buffer().is_empty() {
            let mut pfd = libc::pollfd {
                fd: self.from.get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, 200) };
            if n > 0 {
                return Ok(());
            }
            if interrupted() {
                let _ = self.child.kill();
                self.killed = true;
                return Err(format!("{}: interrupted", self.what));
            }
            if started.elapsed() > patience {
                let _ = self.child.kill();
                self.killed = true;
                return Err(format!(
                    "{}: no answer in {} s: the worker was killed",
                    self.what,
                    patience.as_secs()
                ));
            }
        }
        Ok(())
    }

    /// Why the worker stopped answering: its exit status or signal and
    /// the end of what it wrote on stderr.
    fn death(&mut self) -> String {
        let status = self.wait_limited();
        self.why(status)
    }

    /// The worker's end, waited for at most a minute (then killed).
    fn wait_limited(&mut self) -> Result<std::process::ExitStatus, String> {
        let started = std::time::Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    forget(self.child.id());
                    return Ok(status);
                }
                Ok(None) if started.elapsed() > Duration::from_secs(60) => {
                    let _ = self.child.kill();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("could not be waited for: {e}")),
            }
        }
    }

    fn why(&mut self, status: Result<std::process::ExitStatus, String>) -> String {
        let tail = stderr_tail(&self.tail, self.drain.take());
        describe(&format!("{}: the worker", self.what), status, &tail)
    }

    /// Asks the worker to finish and waits for it; an error if it did not
    /// exit cleanly (an unmount that failed, say).
    pub fn finish(mut self) -> Result<(), String> {
        if let Some(to) = self.to.as_mut() {
            let _ = writeln!(to, "quit");
            let _ = to.flush();
        }
        match self.wait_limited() {
            Ok(s) if s.success() => Ok(()),
            other => Err(self.why(other)),
        }
    }
}

/// A thread that reads the child's stderr all along, keeping its last
/// [`TAIL`] bytes: a chatty child never blocks on a full pipe, and a
/// failure can still quote what it said.
fn drain_stderr(child: &mut Child) -> (Arc<Mutex<Vec<u8>>>, Option<std::thread::JoinHandle<()>>) {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let drain = child.stderr.take().map(|mut err| {
        let tail = Arc::clone(&tail);
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(TAIL);
                t.drain(..excess);
            }
        })
    });
    (tail, drain)
}

/// What the child wrote last on stderr, once it has closed it.
fn stderr_tail(tail: &Mutex<Vec<u8>>, drain: Option<std::thread::JoinHandle<()>>) -> String {
    if let Some(t) = drain {
        let _ = t.join();
    }
    let text = tail.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&text).trim().to_string()
}

/// "`who` exited with status 3: <its last words>".
fn describe(who: &str, status: Result<std::process::ExitStatus, String>, tail: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (_, Some(sig)) => format!("died of signal {sig}"),
            _ => "stopped".to_string(),
        },
        Err(e) => e,
    };
    if tail.is_empty() {
        format!("{who} {how}")
    } else {
        format!("{who} {how}: {tail}")
    }
}

/// Runs a whole program (PostMark) as the workers run: in its own process
/// group, stopped by an interrupt, killed after [`PATIENCE`]. Its output
/// is discarded; an error says how it ended and the end of its stderr.
pub fn run_program(mut cmd: Command, what: &str) -> Result<(), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    if interrupted() {
        return Err(format!("{what}: interrupted"));
    }
    let mut child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    live.push(child.id());
    drop(live);
    let exit = pidfd(child.id());
    let (tail, drain) = drain_stderr(&mut child);
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if interrupted() || started.elapsed() > PATIENCE => {
                let _ = child.kill();
                let _ = child.wait();
                forget(child.id());
                return Err(if interrupted() {
                    format!("{what}: interrupted")
                } else {
                    format!(
                        "{what}: still running after {} s: killed",
                        PATIENCE.as_secs()
                    )
                });
            }
            Ok(None) => wait_a_little(exit.as_ref()),
            Err(e) => break Err(format!("could not be waited for: {e}")),
        }
    };
    forget(child.id());
    match status {
        Ok(s) if s.success() => Ok(()),
        other => Err(describe(what, other, &stderr_tail(&tail, drain))),
    }
}

/// A descriptor that becomes readable when the process `pid` (a child
/// not yet waited for) ends; `None` on a kernel without pidfds (before
/// 5.3).
fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a descriptor the call just opened, owned by nobody else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits up to 200 ms for a program to end. On its pidfd the wait ends
/// the moment it does: a sleep between looks at its status would add up
/// to the sleep to the wall time of a timed program (tar of a small tree
/// takes a few ms).
fn wait_a_little(exit: Option<&std::os::fd::OwnedFd>) {
    use std::os::fd::AsRawFd;
    match exit {
        Some(fd) => {
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, 200) };
        }
        None => std::thread::sleep(Duration::from_millis(2)),
    }
}

impl Drop for Worker {
    /// A worker left behind by an error must not outlive the run (it may
    /// hold an image or a loop mount busy). One still alive (it answered
    /// an error) is first let finish as after `quit`: the end of its input
    /// makes it unmount, or stop its server and check the image
    /// (ulfs-server); what goes wrong then is said on stderr, as the run
    /// has already failed. Killed if it takes more than a minute, and at
    /// once once the run is interrupted.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if interrupted() {
                let _ = self.child.kill();
                self.killed = true;
            }
            self.to = None;
            match self.wait_limited() {
                Ok(s) if s.success() => {}
                _ if self.killed => {}
                status => {
                    let why = self.why(status);
                    eprintln!("ulfs bench: after its failure, {why}");
                }
            }
        }
        let _ = self.child.try_wait();
        forget(self.child.id());
    }
}

//! Unmodified programs run three ways and compared: by the kernel in a host
//! directory, under `ulfs run` on a fresh image (in process), and under
//! `ulfs run --server` on a fresh image's `ulfs serve`. A test gives the
//! program as a command line naming its working directory (`/ulfs` in the
//! image), and gets the kernel's transcript once all three agreed: the
//! tests of `ulfs run` and `ulfs serve` that check a behaviour against
//! Linux call for call share this instead of each keeping a copy.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `ulfs serve -f` of an image, stopped by [`Server::stop`] (SIGTERM, which
/// must end it cleanly) or killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub socket: PathBuf,
}

impl Server {
    /// Starts `ulfs serve -f --socket SOCKET [extra] IMG` and waits until
    /// it listens.
    pub fn start(ulfs: &Path, img: &Path, socket: &Path, extra: &[&str]) -> Server {
        let child = Command::new(ulfs)
            .args(["serve", "-f", "--socket"])
            .arg(socket)
            .args(extra)
            .arg(img)
            .spawn()
            .expect("start ulfs serve");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the server never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child: Some(child),
            socket: socket.to_path_buf(),
        }
    }

    /// SIGTERM, and the server must exit with success.
    pub fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(child.wait().expect("wait").success(), "ulfs serve failed");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where a program runs.
pub enum Side<'a> {
    Kernel,
    /// `ulfs run IMG --`.
    InProcess(&'a Path),
    /// `ulfs run --server SOCKET --`.
    Served(&'a Path),
}

/// A differential run: the command line (`argv(dir)`: the program and its
/// arguments, working in `dir`), and what wraps the whole command (for
/// instance `sh -c 'umask 037; exec "$@"' parent`), if anything.
pub struct Diff<'a> {
    pub ulfs: &'a Path,
    pub argv: &'a dyn Fn(&str) -> Vec<String>,
    pub wrapper: &'a [&'a str],
    /// Standard error is part of the transcript (after a `--` line).
    pub with_stderr: bool,
}

impl Diff<'_> {
    /// The program's transcript on `side` in `dir`; it must succeed.
    pub fn transcript(&self, side: Side<'_>, dir: &str) -> String {
        let mut line: Vec<String> = self.wrapper.iter().map(|s| s.to_string()).collect();
        let ulfs = self.ulfs.to_string_lossy().into_owned();
        match side {
            Side::Kernel => {}
            Side::InProcess(img) => {
                line.extend([ulfs, "run".into(), img.to_string_lossy().into_owned()]);
                line.push("--".into());
            }
            Side::Served(socket) => {
                line.extend([ulfs, "run".into(), "--server".into()]);
                line.push(socket.to_string_lossy().into_owned());
                line.push("--".into());
            }
        }
        line.extend((self.argv)(dir));
        let out = Command::new(&line[0])
            .args(&line[1..])
            .output()
            .expect("run the program");
        assert!(
            out.status.success(),
            "{line:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut t = String::from_utf8_lossy(&out.stdout).into_owned();
        if self.with_stderr {
            t.push_str("--\n");
            t.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        t
    }

    /// Runs the program by the kernel in a new directory under `tmp`, in
    /// process on a new image and through a new server, asserts the three
    /// transcripts are the same, and returns the kernel's. `tmp` should
    /// be on tmpfs when offsets up to `i64::MAX` matter (ext4 stops lower).
    pub fn agree(&self, tmp: &Path, in_process: bool) -> String {
        let host = tmp.join("host");
        std::fs::create_dir(&host).expect("host directory");
        let kernel = self.transcript(Side::Kernel, host.to_str().expect("UTF-8 path"));
        if in_process {
            let img = new_image(self.ulfs, tmp, "img");
            let ours = self.transcript(Side::InProcess(&img), "/ulfs");
            assert_eq!(ours, kernel, "in process");
        }
        let img = new_image(self.ulfs, tmp, "served");
        let server = Server::start(self.ulfs, &img, &tmp.join("sock"), &[]);
        let ours = self.transcript(Side::Served(&server.socket), "/ulfs");
        server.stop();
        assert_eq!(ours, kernel, "through ulfs serve");
        crate::cli::ok(self.ulfs, &["fsck", img.to_str().expect("UTF-8 path")]);
        kernel
    }
}

/// A new 16 MiB image `name` in `dir`.
pub fn new_image(ulfs: &Path, dir: &Path, name: &str) -> PathBuf {
    let img = dir.join(name);
    crate::cli::ok(ulfs, &["mkfs", img.to_str().expect("UTF-8 path"), "16M"]);
    img
}

/// `argv` for a program given as a script: `[program, "-c", script, dir]`
/// (Python: `sys.argv[1]` is `dir`), or for a shell `[sh, "-c", script,
/// "sh", dir]` (`$1` is `dir`).
pub fn script(program: &str, script: &str) -> impl Fn(&str) -> Vec<String> {
    let (program, script) = (program.to_string(), script.to_string());
    move |dir: &str| {
        let mut v = vec![program.clone(), "-c".into(), script.clone()];
        if program == "sh" || program == "bash" {
            v.push("sh".into());
        }
        v.push(dir.into());
        v
    }
}

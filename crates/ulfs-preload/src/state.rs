//! The image a program runs on, and the program's logical working
//! directory (which may be inside the image, where the kernel cannot
//! follow it).
//!
//! The image is mounted when the program first touches a path in it (so
//! the processes of a pipeline that never do, such as `sort`, never hold
//! it; `ulfs run` checked that it mounts before starting the program) and
//! committed at exit (`exit.rs`). Only one process writes an image at a
//! time (the image lock), so across `fork` and `exec` the image is handed
//! over: the process commits and lets go of it first, and whichever
//! process next touches an image path mounts it again, waiting up to
//! `LOCK_WAIT` for the other to let go (a shell running `mkdir /ulfs/d`
//! forks, the child execs `mkdir`, which mounts, works and exits; then the
//! shell mounts again). Image files open at that moment go along
//! (`inherit.rs`): they are opened again at the next mount, in whichever
//! process. A process that cannot hand its files over (a deleted file
//! still open, which the commit would reap; mappings or locks of image
//! files) keeps the image across a `fork`; its child cannot use them
//! (they fail with EBADF) and waits like anyone else to mount.
//!
//! Served (`ulfs run --server`), the same slot holds a connection to the
//! server instead, made at the first call that needs it or adopted at
//! load (`served.rs`); nothing is handed over, as the server keeps every
//! process's files.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::owner::{Held, Owned};
use std::time::{Duration, Instant};

use ulfs::{Errno, Fs, MountOptions};
use ulfs_client::Backend;

/// The environment `ulfs run` hands to the program.
pub const ENV_IMAGE: &str = "ULFS_RUN_IMAGE";
pub const ENV_AT: &str = "ULFS_RUN_AT";
pub const ENV_RO: &str = "ULFS_RUN_RO";
/// `--memory-budget`: `auto`, `none` or bytes.
pub const ENV_MEMORY_BUDGET: &str = "ULFS_RUN_MEMORY_BUDGET";
/// The working directory, when an exec'ing program had it in the image:
/// its path, and its inode (which finds it even if renamed).
pub const ENV_CWD: &str = "ULFS_RUN_CWD";
pub const ENV_CWD_INO: &str = "ULFS_RUN_CWD_INO";

/// How long a mount waits for another process of the same run to let go
/// of the image.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long a mount lets a process already waiting go first.
const DEFER_MAX: Duration = Duration::from_millis(200);

pub struct Image {
    /// Lock-free while the program has one thread (owner.rs).
    fs: Owned<Slot>,
    /// Where the image appears, absolute, without a trailing slash.
    pub prefix: Vec<u8>,
    path: std::path::PathBuf,
    read_only: bool,
    cwd: Mutex<Cwd>,
    /// This process has mounted the image before.
    mounted_once: AtomicBool,
    /// A server owns the image (`served.rs`).
    served: bool,
}

enum Slot {
    /// Mounted here, or connected to the server. Boxed: the slot lives in
    /// a static, and the other states are empty.
    Mounted(Box<Backend>),
    /// Committed and let go (before a fork), or not yet mounted again.
    Unmounted,
    /// The process is exiting: nothing more is served.
    Closed,
}

/// The working directory the program believes in.
pub struct Cwd {
    /// Absolute and normalised: in the host's name space, which for a
    /// directory inside the image starts with the prefix.
    pub path: Vec<u8>,
    /// The working directory is inside the image: the kernel's stays where
    /// it was, and ulfs's is this one.
    pub in_image: bool,
    /// Its inode, noted when the image is let go, so that mounting again
    /// finds the same directory even if another program renamed it.
    pub ino: Option<u64>,
    /// It was removed while another program held the image: relative
    /// paths and `getcwd` fail with ENOENT, as in a removed directory.
    pub gone: bool,
}

static IMAGE: OnceLock<Image> = OnceLock::new();

/// Whether this process holds the image mounted now (read without the
/// file system's lock, on the path of host reads and writes).
static HELD: AtomicBool = AtomicBool::new(false);

/// Whether this process holds the image now.
#[inline]
pub fn held_here() -> bool {
    HELD.load(Ordering::Acquire)
}

/// The image (`None` when the program was not started by `ulfs run`).
pub fn image() -> Option<&'static Image> {
    IMAGE.get()
}

/// Reads the image's settings from the environment (mounting waits for
/// the first call that needs it).
pub fn init() {
    let served = crate::served::init();
    let path = match std::env::var_os(ENV_IMAGE) {
        Some(path) => path,
        None if served => Default::default(),
        None => return,
    };
    let prefix = std::env::var_os(ENV_AT)
        .map(|p| p.into_encoded_bytes())
        .unwrap_or_else(|| b"/ulfs".to_vec());
    let prefix = crate::route::normalize(&prefix);
    let prefix = prefix
        .strip_suffix(b"/")
        .map_or(prefix.clone(), <[u8]>::to_vec);
    if prefix.first() != Some(&b'/') || prefix.is_empty() {
        crate::fatal(&["ulfs run: the prefix must be an absolute path below /"]);
    }
    let host_cwd = std::env::current_dir()
        .map(|p| p.into_os_string().into_encoded_bytes())
        .unwrap_or_else(|_| b"/".to_vec());
    let image = Image {
        fs: Owned::new(Slot::Unmounted),
        prefix,
        path: path.into(),
        read_only: std::env::var_os(ENV_RO).is_some_and(|v| v == "1"),
        cwd: Mutex::new(Cwd {
            path: host_cwd,
            in_image: false,
            ino: None,
            gone: false,
        }),
        mounted_once: AtomicBool::new(false),
        served,
    };
    if let Some(c) = std::env::var_os(ENV_CWD) {
        let c = crate::route::normalize(c.as_encoded_bytes());
        let mut cwd = image.cwd();
        cwd.path = c.strip_suffix(b"/").map_or(c.clone(), <[u8]>::to_vec);
        cwd.in_image = true;
        cwd.ino = std::env::var(ENV_CWD_INO).ok().and_then(|v| v.parse().ok());
    }
    if IMAGE.set(image).is_err() {
        crate::fatal(&["ulfs run: the image was mounted twice"]);
    }
    if served && let Some(b) = crate::served::adopt_at_load() {
        let image = IMAGE.get().expect("just set");
        if let Ok(mut g) = image.fs.hold() {
            *g = Slot::Mounted(Box::new(b));
            image.mounted_once.store(true, Ordering::Release);
        }
    }
}

/// Before an exec: the process's POSIX locks on the files of its
/// close-on-exec image descriptors end (the exec closes them).
fn release_locks_of_closing_files(fs: &mut Fs) {
    let fcntl = crate::real::real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    for fd in crate::fds::bound_in(0, u32::MAX) {
        // SAFETY: F_GETFD takes no argument.
        let closing = unsafe { fcntl(fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0;
        if closing
            && let Some(u) = crate::fds::bound(fd)
            && let Ok(st) = fs.fstat(u)
        {
            crate::locks::release_process(st.ino);
        }
    }
}

/// The budget `ulfs run --memory-budget` asked for (what it writes is
/// `auto`, `none` or a number of bytes; anything else: auto).
fn memory_budget() -> ulfs::MemoryBudget {
    match std::env::var(ENV_MEMORY_BUDGET).as_deref() {
        Ok("none") => ulfs::MemoryBudget::Unlimited,
        Ok(n) => n
            .parse()
            .map_or(ulfs::MemoryBudget::Auto, ulfs::MemoryBudget::Bytes),
        Err(_) => ulfs::MemoryBudget::Auto,
    }
}

impl Image {
    /// Mounts the image, waiting up to `LOCK_WAIT` while another process
    /// holds it.
    fn mount(&self) -> Result<Fs, ulfs::Error> {
        let opts = MountOptions {
            read_only: self.read_only,
            memory_budget: memory_budget(),
            ..Default::default()
        };
        let shown = self.path.display().to_string();
        let start = Instant::now();
        // Another process waiting already goes first (this one may just
        // have let go for it): the image passes between processes in turn.
        while crate::shared::wanted() && start.elapsed() < DEFER_MAX {
            std::thread::sleep(Duration::from_millis(1));
        }
        let file = loop {
            let r = ulfs::store::open_locked(&self.path, self.read_only);
            // The holder lets go at its next call on a host descriptor
            // while someone waits (`shared.rs`).
            crate::shared::want(matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EBUSY)));
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(ulfs::Error::new(
                        Errno::EBUSY,
                        format!("{shown}: in use: another process of this run holds it"),
                    ));
                }
                Err(e) => return Err(ulfs::Error::io(&shown, e)),
                Ok(f) => break f,
            }
        };
        // The image's descriptor moves out of the program's way (the
        // program's numbering stays the kernel's, and a program closing
        // "all" its descriptors is kept off it: io.rs).
        let file = crate::fds::library_file(file);
        let store = ulfs::store::MmapStore::from_file(file, self.read_only)
            .map_err(|e| ulfs::Error::io(&shown, e))?;
        Fs::mount_store(Box::new(store), opts)
            .map_err(|e| ulfs::Error::new(e.errno, format!("{shown}: {}", e.message)))
    }

    /// Runs `f` on the file system, mounting it again first if it was let
    /// go. EIO once the process is exiting, or if it cannot be mounted
    /// (said on standard error).
    pub fn with<T>(&self, f: impl FnOnce(&mut Backend) -> ulfs::Result<T>) -> ulfs::Result<T> {
        self.serve(true, f)
    }

    /// As `with`, but never letting go for a waiting process first: for a
    /// call that already took its descriptor out of the table (a close),
    /// whose file a hand-over would not note.
    pub fn with_no_turn<T>(
        &self,
        f: impl FnOnce(&mut Backend) -> ulfs::Result<T>,
    ) -> ulfs::Result<T> {
        self.serve(false, f)
    }

    fn serve<T>(
        &self,
        turn: bool,
        f: impl FnOnce(&mut Backend) -> ulfs::Result<T>,
    ) -> ulfs::Result<T> {
        let _inside = crate::fds::LibraryCall::enter();
        let Ok(mut g) = self.fs.hold() else {
            // A signal handler called in while this thread was inside.
            return Err(Errno(libc::EDEADLK));
        };
        if let Slot::Mounted(fs) = &mut *g
            && (self.served || !(turn && crate::shared::wanted()))
        {
            return f(fs);
        }
        // Handing over and mounting make calls of their own: the
        // program's errno is kept through them (a successful call leaves
        // it as it found it, as libc's do).
        let errno = crate::errno();
        if !self.served && turn && matches!(*g, Slot::Mounted(_)) && crate::shared::wanted() {
            // Another process waits: it goes first (descriptor numbers
            // survive the hand-over, so the caller's stays right).
            self.hand_over(&mut g);
        }
        if matches!(*g, Slot::Unmounted) && self.served {
            let mut b = match crate::served::connect() {
                Ok(b) => b,
                Err(e) => {
                    crate::warn(&format!("ulfs run: cannot reach the server: {e}"));
                    return Err(Errno::ENOTCONN);
                }
            };
            self.restore_cwd_by_path(&mut b);
            *g = Slot::Mounted(Box::new(b));
            if !self.mounted_once.swap(true, Ordering::AcqRel) {
                crate::std_streams::on_first_mount();
            }
        }
        if matches!(*g, Slot::Unmounted) {
            let mut fs = match self.mount() {
                Ok(fs) => fs,
                Err(e) => {
                    crate::warn(&format!("ulfs run: cannot mount the image again: {e}"));
                    return Err(Errno::EIO);
                }
            };
            self.restore_cwd(&mut fs);
            crate::inherit::reopen(&mut fs);
            crate::locks::load();
            *g = Slot::Mounted(Box::new(Backend::Local(fs)));
            HELD.store(true, Ordering::Release);
            if !self.mounted_once.swap(true, Ordering::AcqRel) {
                crate::std_streams::on_first_mount();
            }
        }
        crate::set_errno(errno);
        match &mut *g {
            Slot::Mounted(fs) => f(fs),
            _ => Err(Errno::EIO),
        }
    }

    /// After mounting again: a working directory inside the image is found
    /// again by the inode noted when the image was let go (its path may
    /// have changed meanwhile), or, coming from an exec, by its path. If it
    /// is gone, it stays gone: never silently the image's root.
    fn restore_cwd(&self, fs: &mut Fs) {
        let mut cwd = self.cwd();
        if !cwd.in_image {
            return;
        }
        let found = match cwd.ino {
            Some(ino) => fs.chdir_ino(ino),
            None => {
                let inner = cwd
                    .path
                    .strip_prefix(self.prefix.as_slice())
                    .unwrap_or(b"/");
                fs.chdir(if inner.is_empty() { b"/" } else { inner })
            }
        };
        match found.and_then(|()| fs.getcwd()) {
            Ok(p) => {
                cwd.path = [self.prefix.as_slice(), if p == b"/" { b"" } else { &p }].concat();
                cwd.gone = false;
            }
            Err(_) => cwd.gone = true,
        }
    }

    /// A fresh connection to the server: a working directory inside the
    /// image (from an exec's environment) is found again by its path, and
    /// if it is gone, it stays gone.
    fn restore_cwd_by_path(&self, b: &mut Backend) {
        let mut cwd = self.cwd();
        if !cwd.in_image {
            return;
        }
        let inner = cwd
            .path
            .strip_prefix(self.prefix.as_slice())
            .unwrap_or(b"/")
            .to_vec();
        let inner = if inner.is_empty() {
            b"/".to_vec()
        } else {
            inner
        };
        cwd.gone = b.chdir(&inner).is_err();
    }

    /// Commits and unmounts what `slot` holds, noting the working
    /// directory's inode first, and the open image files (which stay
    /// pending when `keep`, to be opened again at the next mount). `when`
    /// names the moment for a message.
    fn let_go(&self, slot: Slot, when: &str, keep: bool) {
        let Slot::Mounted(b) = slot else {
            return;
        };
        let mut fs = match *b {
            Backend::Local(fs) => fs,
            // Disconnecting is the process's exit, for the server: it
            // closes the process's files and drops its locks.
            Backend::Remote(c) => {
                drop(c);
                crate::fds::set_server_fds([-1, -1]);
                return;
            }
        };
        HELD.store(false, Ordering::Release);
        crate::inherit::capture(&mut fs, keep);
        // At exit (`!keep`) the process's locks go with it.
        crate::locks::publish(!keep);
        {
            let mut cwd = self.cwd();
            if cwd.in_image && !cwd.gone {
                cwd.ino = fs.stat(".").ok().map(|s| s.ino);
            }
        }
        crate::fds::release_library_file();
        if let Err(e) = fs.unmount() {
            crate::warn(&format!(
                "ulfs run: committing the image {when} failed: {e}"
            ));
        }
    }

    /// Lets go of the image, files pending, unless this process cannot
    /// hand them over: for a process that waits for it (where the program
    /// may block), and before the program starts another program some way
    /// other than `fork` (`posix_spawn`, `system`, `popen`, whose children
    /// glibc makes with internal calls), so the new program can mount it.
    pub fn hand_over_now(&self) {
        let _inside = crate::fds::LibraryCall::enter();
        if let Ok(mut g) = self.fs.hold() {
            self.hand_over(&mut g);
        }
    }

    fn hand_over(&self, g: &mut Held<'_, Slot>) {
        if let Slot::Mounted(b) = &mut **g
            && let Some(fs) = b.local()
            && (!holds_files() || crate::inherit::can_hand_over(fs))
        {
            let slot = std::mem::replace(&mut **g, Slot::Unmounted);
            self.let_go(slot, "for another process", true);
        }
    }

    /// Mounts the image again if it was let go (so the working directory
    /// is found again); a failure is said when a call needs the image.
    /// Whether it is mounted.
    pub fn ensure_mounted(&self) -> bool {
        self.with(|_| Ok(())).is_ok()
    }

    pub fn cwd(&self) -> MutexGuard<'_, Cwd> {
        lock(&self.cwd)
    }

    /// Commits and unmounts for good (at exit); later calls get EIO.
    pub fn close(&self) {
        let _inside = crate::fds::LibraryCall::enter();
        if crate::locks::published() && !held_here() {
            // The run's memory still shows this process's locks: they are
            // taken out holding the image (others also drop a dead
            // process's, but a zombie's would stand until it is reaped).
            let _ = self.with(|_| Ok(()));
        }
        let Ok(mut g) = self.fs.hold() else {
            return; // exit from a signal handler inside a call
        };
        let slot = std::mem::replace(&mut *g, Slot::Closed);
        drop(g);
        self.let_go(slot, "at exit", false);
        crate::inherit::release_all();
    }

    /// Before an exec: commits and lets go of the image, its open files
    /// pending (the new program gets those that survive the exec; if the
    /// exec fails, the program goes on with them all).
    pub fn before_exec(&self) {
        let _inside = crate::fds::LibraryCall::enter();
        if self.served {
            // The process goes on in the new program: set aside under a
            // token the environment carries (`process.rs`).
            let Ok(mut g) = self.fs.hold() else {
                return;
            };
            if let Slot::Mounted(b) = &mut *g
                && let Some(c) = crate::served::client(b)
            {
                match c.prepare_exec() {
                    Ok(t) => crate::served::set_exec_token(Some(t)),
                    Err(e) => crate::warn(&format!(
                        "ulfs run: the image files cannot go along into the new program: {e}"
                    )),
                }
            }
            return;
        }
        if crate::locks::holds_any() {
            // The exec closes the close-on-exec descriptors, and closing
            // a descriptor of a file ends the process's POSIX locks on it:
            // mounted, so the locks the new program keeps are published.
            let _ = self.with_no_turn(|b| {
                if let Some(fs) = b.local() {
                    release_locks_of_closing_files(fs);
                }
                Ok(())
            });
        }
        let Ok(mut g) = self.fs.hold() else {
            return; // an exec from a signal handler inside a call
        };
        let slot = std::mem::replace(&mut *g, Slot::Unmounted);
        drop(g);
        self.let_go(slot, "before exec", true);
    }

    /// `fork`, done by `real_fork` with the file system's lock held (so no
    /// call is half done in either process). The image is committed and
    /// let go first, its open files handed over to both processes (as
    /// pending descriptors whose offsets they share), so the child, or
    /// what it execs, can mount it. A process that cannot hand its files
    /// over keeps the image; the child's copy is abandoned and dropped
    /// without writing anything (closing its copy of the image file, whose
    /// lock stays with the parent) and its image descriptors stop being
    /// image files.
    pub fn fork(&self, real_fork: impl FnOnce() -> libc::pid_t) -> libc::pid_t {
        let _inside = crate::fds::LibraryCall::enter();
        let Ok(mut g) = self.fs.hold() else {
            // A fork from a signal handler inside a call: the file system
            // is mid-change, and a child would carry a second live copy of
            // it. Refused, as a fork the system cannot make now.
            crate::warn(
                "ulfs run: fork refused: called from a signal handler during a call on the image",
            );
            return crate::fail(libc::EAGAIN);
        };
        if self.served {
            return self.fork_served(&mut g, real_fork);
        }
        let kept = match &mut *g {
            Slot::Mounted(b) => {
                let fs = b.local().expect("a run that is not served mounts locally");
                let keep = holds_files() && !crate::inherit::can_hand_over(fs);
                if keep {
                    let _ = fs.sync();
                } else {
                    let slot = std::mem::replace(&mut *g, Slot::Unmounted);
                    self.let_go(slot, "before fork", true);
                }
                keep
            }
            _ => false,
        };
        let child_slots = if kept {
            Vec::new()
        } else {
            crate::inherit::before_fork()
        };
        let pid = crate::locks::fork_guarded(real_fork);
        if pid < 0 {
            crate::inherit::fork_failed(child_slots);
        } else if pid == 0 && kept {
            HELD.store(false, Ordering::Release);
            if let Slot::Mounted(mut fs) = std::mem::replace(&mut *g, Slot::Unmounted) {
                // Read-only for good: dropping it writes nothing.
                fs.abandon();
                crate::fds::release_library_file();
                drop(fs);
            }
            crate::fds::forget_all();
            crate::inherit::forget_all();
        } else if pid == 0 {
            crate::inherit::in_child();
        }
        pid
    }

    /// Served, after the process changed its ids: a new connection, which
    /// the kernel describes with the new ids, adopts the process
    /// (`credentials.rs`). Not connected yet: the first call connects with
    /// the new ids anyway.
    pub fn reconnect(&self) {
        let _inside = crate::fds::LibraryCall::enter();
        let Ok(mut g) = self.fs.hold() else {
            return;
        };
        let Slot::Mounted(b) = &mut *g else {
            return;
        };
        let Some(c) = crate::served::client(b) else {
            return;
        };
        let again = c
            .prepare_reconnect()
            .and_then(|t| crate::served::adopt_own(&t));
        match again {
            Ok(new) => *g = Slot::Mounted(Box::new(new)),
            Err(e) => crate::warn(&format!(
                "ulfs run: after a change of ids, the image is still used with the old ones: {e}"
            )),
        }
    }

    /// `fork` of a served process: the child's process is prepared in the
    /// server first, and the child adopts it on its own connection.
    fn fork_served(
        &self,
        g: &mut Held<'_, Slot>,
        real_fork: impl FnOnce() -> libc::pid_t,
    ) -> libc::pid_t {
        let token = match &mut **g {
            Slot::Mounted(b) => crate::served::client(b).map(|c| c.prepare_fork()),
            _ => None,
        };
        let pid = real_fork();
        if pid < 0 {
            // No child: the server lets go of its process now (its
            // descriptions, and their flock and OFD locks, would stay
            // held for the 30 s an unadopted token lasts).
            if let (Some(Ok(t)), Slot::Mounted(b)) = (&token, &mut **g)
                && let Some(c) = crate::served::client(b)
            {
                let errno = crate::errno();
                let _ = c.cancel_token(t);
                crate::set_errno(errno);
            }
            return pid;
        }
        if pid != 0 {
            return pid;
        }
        let Some(token) = token else {
            return pid;
        };
        let Slot::Mounted(parent) = std::mem::replace(&mut **g, Slot::Unmounted) else {
            return pid;
        };
        let adopted = match token {
            Ok(t) => crate::served::adopt_in_child(parent, &t),
            Err(e) => {
                drop(parent);
                crate::fds::set_server_fds([-1, -1]);
                crate::warn(&format!(
                    "ulfs run: the server could not prepare the child of a fork: {e}; its image files are closed"
                ));
                None
            }
        };
        match adopted {
            Some(b) => **g = Slot::Mounted(Box::new(b)),
            None => crate::fds::forget_all(),
        }
        pid
    }
}

/// Whether the process holds image files open (descriptors, directory
/// streams, mappings): then letting go of the image must hand them over
/// (`inherit::can_hand_over`), as they live in its mounted file system.
fn holds_files() -> bool {
    crate::fds::open_count() > 0 || crate::mmap::count() > 0
}

/// A poisoned lock means a panic inside a call, which `ulfs` already turned
/// into a read-only volume: carrying on is safe.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

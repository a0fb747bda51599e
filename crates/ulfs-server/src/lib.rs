//! `ulfs serve`: one process owns an image and serves many client
//! processes, each over its own shared-memory channel (the design of "File
//! systems as processes", HotStorage'19, and uFS, SOSP'21). docs/SERVE.md
//! describes the whole; this crate is the server:
//!
//! - `clients`: who is connected; the handshake (the client's identity
//!   from the kernel, SO_PEERCRED and SO_PEERGROUPS, never from the
//!   client; its channel, created and sealed here) and the teardown when
//!   a client goes, however it goes;
//! - `worker`: the threads that serve channels: they sleep in one epoll
//!   while every channel is idle, and while one is busy they take its
//!   requests from shared memory with no system call per request;
//! - `spin`: whether a worker polls a quiet channel before letting it
//!   sleep (not while other programs keep the CPUs busy);
//! - `adopt`: processes set aside across a client's `fork` and `exec`
//!   (PREPARE_FORK, PREPARE_EXEC) until the new process ADOPTs them;
//! - `dispatch`: one request to one answer, through the engine's own calls
//!   (`posix::Ctx`), for the client's own `Process` on the one volume;
//! - `locks`: the one table of record, OFD and `flock` locks of every
//!   client (LOCK), released as descriptors close and clients go;
//! - `maps`: shared mappings (MAP_SHARED, MSYNC, UNMAP): a memfd per
//!   mapped inode that the clients map and the server keeps coherent with
//!   the file;
//! - `direct`: what lets clients read without a request (DIRECT, LEASE):
//!   the change board the volume publishes on, and the image they map.
//!
//! The wire itself (channel layout, records, control messages) is
//! `ulfs-wire`, shared with the clients.

mod adopt;
mod clients;
mod direct;
mod dispatch;
mod locks;
mod maps;
mod spin;
mod worker;

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use ulfs::Errno;
use ulfs::fs::{SharedVolume, Volume};

/// Bounds on what one client may take of the server.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The most descriptors a client may hold (its RLIMIT_NOFILE).
    pub max_fds: usize,
    /// The largest data area a client may ask for.
    pub max_channel_bytes: u32,
    /// The most bytes the data areas of all clients may take together
    /// (each is memory once written): a client that connects when less
    /// is left gets what is left, or is refused (EAGAIN) when that is not
    /// even one page.
    pub max_data_bytes: u64,
    /// The most clients at once; later connections are refused.
    pub max_clients: usize,
    /// The most clients one user (other than root) may have at once, so
    /// that one user's processes cannot take every slot from the others
    /// (every process of a program under `ulfs run --server` is a client).
    pub max_clients_per_user: usize,
    /// How long a connection may take to say HELLO before it is closed:
    /// a connection holds a client slot from accept, so one that never
    /// speaks must not hold it for good.
    pub hello_timeout: Duration,
    /// The most lock records one owner may hold (a client's POSIX locks,
    /// or one open file description's OFD or `flock` locks): ENOLCK past
    /// it. Adjacent ranges of one owner merge into one record.
    pub max_locks_per_owner: usize,
    /// The most lock records of all clients together: ENOLCK past it.
    pub max_locks: usize,
    /// The most shared mappings (MAP_SHARED not yet UNMAPped) one client
    /// may hold: ENOMEM past it, as `mmap` past `vm.max_map_count`.
    pub max_maps_per_client: usize,
    /// The most bytes of files the shared mappings of all clients may
    /// hold in memory together (each mapped page of each mapped file
    /// once, however many clients map it): ENOMEM past it.
    pub max_mapped_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_fds: 65_536,
            max_channel_bytes: ulfs_wire::layout::MAX_DATA_LEN,
            max_data_bytes: 1 << 30,
            max_clients: 1024,
            max_clients_per_user: 256,
            hello_timeout: Duration::from_secs(5),
            max_locks_per_owner: 4096,
            max_locks: 1 << 18,
            max_maps_per_client: 4096,
            max_mapped_bytes: 1 << 30,
        }
    }
}

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where clients connect (a UNIX socket, made here).
    pub socket: PathBuf,
    /// The socket file's permission bits: who may connect. What a client
    /// may then do is judged by its credentials.
    pub socket_mode: u32,
    /// Threads serving channels (at least 1).
    pub workers: usize,
    /// How long a worker keeps polling a channel that went quiet before
    /// it lets the channel sleep: a client's next request within it costs
    /// no wake-up. Spinning takes a core, so on a machine with few cores
    /// keep it short.
    pub spin: Duration,
    /// How often the running transaction is committed while nothing else
    /// commits it (the volume's commit interval).
    pub commit_every: Duration,
    /// Offer clients a read-only view of the image and read leases
    /// (DIRECT, LEASE; docs/SERVE.md "Direct reads"), so that their reads
    /// of files nobody changes take no request. Off: every read is one.
    pub direct_reads: bool,
    pub limits: Limits,
}

impl Config {
    pub fn new(socket: impl Into<PathBuf>) -> Config {
        Config {
            socket: socket.into(),
            socket_mode: 0o666,
            workers: default_workers(),
            spin: Duration::from_micros(20),
            commit_every: Duration::from_secs(5),
            direct_reads: true,
            limits: Limits::default(),
        }
    }
}

/// What the server's threads share.
pub(crate) struct Shared {
    pub vol: SharedVolume,
    pub cfg: Config,
    pub epoll: OwnedFd,
    /// Written once to stop every worker (level-triggered in the epoll).
    pub stop_fd: OwnedFd,
    pub stopping: AtomicBool,
    pub clients: clients::Clients,
    pub listener: ulfs_wire::Listener,
    /// Channels with requests waiting for a worker, in turn.
    pub ready: Mutex<VecDeque<u64>>,
    /// How many channels `ready` holds, read without its lock by a worker
    /// polling a quiet channel (it gives way when others wait).
    pub ready_len: std::sync::atomic::AtomicUsize,
    /// Bytes of data areas the live channels hold (`Limits::max_data_bytes`).
    pub data_bytes: std::sync::atomic::AtomicU64,
    /// The idle channels' kick eventfds: an epoll of their own (itself in
    /// `epoll`), so a worker polling a quiet channel can take the kicks
    /// that came meanwhile without touching anything else.
    pub kicks: OwnedFd,
    /// A descriptor kept open to be closed when the server runs out: it
    /// makes room to accept a connection and refuse it (EMFILE).
    pub spare: Mutex<Option<OwnedFd>>,
    /// The last accept error reported (an errno), so that a lasting one
    /// is logged once.
    pub accept_error: std::sync::atomic::AtomicI32,
    /// Where the volume publishes changes of open inodes, and the image
    /// file clients may map beside it (DIRECT); None when not offered.
    pub direct: Option<direct::Offer>,
    /// Every client's file locks.
    pub locks: locks::Locks,
    /// Every client's shared mappings.
    pub maps: maps::Maps,
    /// Processes set aside for a fork's child or an exec's program.
    pub tokens: adopt::Tokens,
}

/// The spare descriptor (`Shared::spare`).
pub(crate) fn open_spare() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

impl Shared {
    fn ready(&self) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push_ready(&self, id: u64) {
        let mut r = self.ready();
        r.push_back(id);
        self.ready_len.store(r.len(), Ordering::Relaxed);
    }

    pub fn pop_ready(&self) -> Option<u64> {
        let mut r = self.ready();
        let id = r.pop_front();
        self.ready_len.store(r.len(), Ordering::Relaxed);
        id
    }

    pub fn ready_is_empty(&self) -> bool {
        self.ready().is_empty()
    }

    pub fn spare(&self) -> std::sync::MutexGuard<'_, Option<OwnedFd>> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f`, which makes descriptors the server keeps for a client
    /// (an accepted socket, a channel, a shared-mapping object), with the
    /// spare descriptor in place first and its lock held: a descriptor
    /// freed while the spare was away goes back to the spare before any
    /// client can have it, and none is made while a refusal has the
    /// spare's room open (`worker::refuse_without_fds`). Without this, a
    /// channel made on another worker at that moment could take the room
    /// for good, and a server out of descriptors would stop answering new
    /// connections instead of refusing them.
    pub fn with_fd_room<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut spare = self.spare();
        if spare.is_none() {
            *spare = open_spare();
        }
        let r = f();
        drop(spare);
        r
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Why the server could not start.
#[derive(Debug)]
pub struct StartError {
    pub errno: Errno,
    pub message: String,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StartError {}

fn start_error(what: &str, path: &Path, e: Errno) -> StartError {
    StartError {
        errno: e,
        message: format!("{what} {}: {e}", path.display()),
    }
}

impl Server {
    /// Serves `vol` at `cfg.socket` until `stop` (or a fatal error). The
    /// volume is unmounted, committed and marked clean, when the server
    /// stops.
    pub fn start(mut vol: Volume, cfg: Config) -> Result<Server, StartError> {
        // A server that cannot start gives the image back as it found it
        // (unmounted cleanly), not as after a crash.
        let (listener, epoll, stop_fd, kicks) = match Self::sockets(&cfg) {
            Ok(fds) => fds,
            Err(e) => {
                let _ = vol.unmount();
                return Err(e);
            }
        };
        let workers = cfg.workers.max(1);
        let direct = cfg
            .direct_reads
            .then(|| direct::Offer::new(&mut vol))
            .flatten();
        let (locks, maps) = (locks::Locks::new(&cfg.limits), maps::Maps::new(&cfg.limits));
        let shared = Arc::new(Shared {
            vol: SharedVolume::new(vol),
            cfg,
            epoll,
            stop_fd,
            stopping: AtomicBool::new(false),
            clients: clients::Clients::default(),
            listener,
            ready: Mutex::new(VecDeque::new()),
            ready_len: std::sync::atomic::AtomicUsize::new(0),
            data_bytes: std::sync::atomic::AtomicU64::new(0),
            kicks,
            spare: Mutex::new(open_spare()),
            accept_error: std::sync::atomic::AtomicI32::new(0),
            direct,
            locks,
            maps,
            tokens: adopt::Tokens::default(),
        });
        if let Err(e) = worker::register_fixed(&shared) {
            let _ = shared.listener.remove();
            let _ = shared.vol.unmount(|_| {});
            return Err(start_error("epoll for", &shared.cfg.socket, e));
        }
        let mut threads = Vec::new();
        for i in 0..workers {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("ulfs-serve-{i}"))
                    .spawn(move || worker_thread(&s))
                    .expect("spawn a worker"),
            );
        }
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("ulfs-serve-commit".into())
                .spawn(move || committer(&s))
                .expect("spawn the committer"),
        );
        Ok(Server { shared, threads })
    }

    /// The listening socket, the epoll, the stop eventfd and the kicks'
    /// epoll.
    fn sockets(
        cfg: &Config,
    ) -> Result<(ulfs_wire::Listener, OwnedFd, OwnedFd, OwnedFd), StartError> {
        let listener = ulfs_wire::control::listen(&cfg.socket, cfg.socket_mode)
            .map_err(|e| start_error("cannot listen on", &cfg.socket, e))?;
        let sys = |e: rustix::io::Errno| Errno(e.raw_os_error());
        let made = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .map_err(|e| start_error("epoll for", &cfg.socket, sys(e)))
            .and_then(|epoll| {
                rustix::event::eventfd(
                    0,
                    rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
                )
                .map(|stop| (epoll, stop))
                .map_err(|e| start_error("eventfd for", &cfg.socket, sys(e)))
            })
            .and_then(|(epoll, stop)| {
                rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
                    .map(|kicks| (epoll, stop, kicks))
                    .map_err(|e| start_error("epoll for", &cfg.socket, sys(e)))
            });
        match made {
            Ok((epoll, stop, kicks)) => Ok((listener, epoll, stop, kicks)),
            Err(e) => {
                let _ = listener.remove();
                Err(e)
            }
        }
    }

    /// A handle that stops the server from anywhere (a signal handler's
    /// thread, a test).
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shared.clone())
    }

    /// How many clients are connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients.len()
    }

    /// Waits until the server is stopped, then lets every client go (each
    /// is told the server is gone: its calls fail with ENOTCONN), closes
    /// their files, writes their shared mappings back and unmounts the
    /// volume. The socket file is removed.
    pub fn join(mut self) -> ulfs::Result<()> {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // No new connections, then every client told; those still in the
        // listener's backlog too (nobody will accept them, and the
        // listener outlives `join` while a `Stopper` does).
        let _ = self.shared.listener.remove();
        self.shared.clients.drop_all(&self.shared);
        while let Ok(sock) = self.shared.listener.accept() {
            clients::refuse(sock, ulfs_wire::Msg::Gone);
        }
        adopt::sweep(&self.shared, true);
        // Every client's teardown wrote its mappings back; whatever is
        // left (nothing, unless a teardown was cut short) is written back
        // before the volume commits.
        let maps = &self.shared.maps;
        match self.shared.vol.unmount(|vol| maps.close_all(vol)) {
            Some(r) => r,
            None => Ok(()),
        }
    }
}

/// Stops a server: its workers finish the requests in hand and return.
#[derive(Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::Release);
        let _ = rustix::io::write(self.0.stop_fd.as_fd(), &1u64.to_ne_bytes());
    }
}

/// A worker, kept alive through a panic outside a request (a request's
/// own is caught where it is answered): the volume is abandoned as after
/// any panic in a call, and the worker goes on, so that clients are still
/// answered (EROFS) and torn down rather than left waiting on a server
/// with no workers.
fn worker_thread(s: &Shared) {
    loop {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker::run(s))) {
            Ok(()) => return,
            Err(_) => {
                eprintln!("ulfs serve: a worker panicked; the volume is read-only from now on");
                s.vol.abandon();
                worker::rearm_listener(s);
            }
        }
    }
}

/// Commits the running transaction on a timer, so that an idle server's
/// changes are as durable as the commit interval says; and closes the
/// connections that did not say HELLO in time.
fn committer(s: &Shared) {
    let tick = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while !s.stopping.load(Ordering::Acquire) {
        std::thread::sleep(tick);
        s.clients.close_silent(s, s.cfg.limits.hello_timeout);
        adopt::sweep(s, false);
        waited += tick;
        if waited >= s.cfg.commit_every {
            waited = Duration::ZERO;
            if !s.vol.commit_if_due() {
                return;
            }
        }
    }
}

/// Half the cores, at least one: the other half is for the clients. A
/// worker and its client each spin while busy, so more spinning threads
/// than cores make them take turns on the CPUs: on 2 cores, 2 workers and
/// 2 clients served 0.3-1.2 million 4 KiB preads a second together, 1
/// worker 1.0-1.8 million (`cargo run --release -p ulfs-client --example
/// latency`, docs/BENCHMARKS.md).
pub fn default_workers() -> usize {
    (std::thread::available_parallelism().map_or(1, |n| n.get()) / 2).max(1)
}

//! What the hostile tests share: a server in this process on a fresh
//! image, a raw client that maps its channel itself and may write any byte
//! of it, and a watchdog that turns a stalled call into a test failure
//! instead of a hung test.

#![allow(dead_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use ulfs::fs::Volume;
use ulfs::{Errno, MkfsOptions, Mode, MountOptions};
use ulfs_server::{Config, Server};
use ulfs_wire::layout::*;
use ulfs_wire::{Cqe, Geometry, Op, Req, Span, control};

pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);

pub fn mkfs(img: &Path, size: u64) {
    ulfs::mkfs(
        img,
        &MkfsOptions {
            size,
            mode: Mode::Journal,
            ..Default::default()
        },
    )
    .unwrap();
}

/// A server on a fresh journaled image in a temporary directory.
pub struct Served {
    pub dir: tempfile::TempDir,
    pub img: PathBuf,
    pub socket: PathBuf,
    pub server: Option<Server>,
}

pub fn serve(size: u64, tune: impl FnOnce(&mut Config)) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs(&img, size);
    let socket = dir.path().join("sock");
    let vol = unbusy(|| Volume::mount(&img, MountOptions::default()));
    let mut cfg = Config::new(&socket);
    cfg.workers = 2;
    tune(&mut cfg);
    let server = Server::start(vol, cfg).unwrap();
    Served {
        dir,
        img,
        socket,
        server: Some(server),
    }
}

impl Served {
    pub fn client(&self) -> ulfs_client::Client {
        ulfs_client::Client::connect(&self.socket).unwrap()
    }

    pub fn clients(&self) -> usize {
        self.server.as_ref().unwrap().clients()
    }

    /// Waits (a few seconds at most) until `n` clients are connected.
    pub fn wait_clients(&self, n: usize) {
        let until = Instant::now() + Duration::from_secs(10);
        while self.clients() != n {
            assert!(
                Instant::now() < until,
                "{} clients connected, expected {n}",
                self.clients()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the server (within seconds); the image must then be clean.
    pub fn stop(&mut self) {
        let server = self.server.take().unwrap();
        server.stopper().stop();
        within(20, "stopping the server", move || server.join().unwrap());
        assert_fsck_clean(&self.img);
    }
}

/// Retries `f` while the image is EBUSY. The image's lock belongs to its
/// open file description, which a child process forked meanwhile by
/// another test (`Command::spawn`) shares until it execs: for that moment
/// a closed image still looks in use.
pub fn unbusy<T>(mut f: impl FnMut() -> Result<T, ulfs::Error>) -> T {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if e.errno == Errno::EBUSY && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

pub fn assert_fsck_clean(img: &Path) {
    let report = unbusy(|| ulfs::fsck(img, &mut Default::default()));
    assert!(report.is_clean(), "{report:?}");
}

/// Runs `f` on its own thread and fails the test if it takes more than
/// `secs` seconds (a stalled server would otherwise hang the test).
pub fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    within_explained(secs, what, String::new, f)
}

/// As [`within`]; on a timeout the failure also says what `explain`
/// finds (the state of a server process, say).
pub fn within_explained<T: Send + 'static>(
    secs: u64,
    what: &str,
    explain: impl FnOnce() -> String,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no answer within {secs} s ({e}){}", explain()),
    }
}

/// What a process is doing, from /proc: how many descriptors it has open
/// and, per thread, its name, where it sleeps in the kernel and its
/// system call (for a test that finds a server stalled).
pub fn process_report(pid: u32) -> String {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let mut out = format!("\nprocess {pid}: {fds} descriptors open");
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let read = |f: &str| {
            std::fs::read_to_string(t.path().join(f))
                .map_or_else(|e| e.to_string(), |s| s.trim().to_string())
        };
        out += &format!(
            "\n  thread {:?} {}: wchan {}, syscall {}",
            t.file_name(),
            read("comm"),
            read("wchan"),
            read("syscall")
        );
    }
    out
}

/// A client that speaks the wire by hand: it maps the channel itself and
/// can write any byte of it, indices and header included.
pub struct Raw {
    pub sock: OwnedFd,
    pub kick: OwnedFd,
    pub geo: Geometry,
    pub id: u64,
    base: NonNull<u8>,
    len: usize,
    /// Our idea of the indices (an honest client's).
    pub tail: u32,
    pub head: u32,
    pub tag: u32,
}

// SAFETY: the mapping is plain shared memory owned by this value.
unsafe impl Send for Raw {}

impl Raw {
    pub fn connect(socket: &Path, want_sq: u32, want_data: u32) -> Result<Raw, Errno> {
        let sock = control::connect(socket)?;
        let w = control::hello(sock.as_fd(), want_sq, want_data)?;
        let len = w.geometry.total_len();
        // SAFETY: a fresh shared mapping of the memfd, which the server
        // sized to exactly `len` bytes and sealed against shrinking.
        let p = unsafe {
            rustix::mm::mmap(
                ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &w.memfd,
                0,
            )
        }
        .map_err(|e| Errno(e.raw_os_error()))?;
        Ok(Raw {
            sock,
            kick: w.kick,
            geo: w.geometry,
            id: w.client_id,
            base: NonNull::new(p.cast()).unwrap(),
            len,
            tail: 0,
            head: 0,
            tag: 1,
        })
    }

    pub fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= HEADER_LEN);
        // SAFETY: in the header page of our mapping, aligned.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }

    pub fn set(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::Release);
    }

    pub fn get(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::Acquire)
    }

    pub fn gone(&self) -> bool {
        self.get(OFF_SERVER_STATE) == STATE_GONE
    }

    /// Writes any bytes anywhere in the mapping.
    pub fn poke(&mut self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds of our mapping; raw copy (the server may read
        // concurrently, which is the point).
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(off), bytes.len())
        };
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn put(&mut self, off: u32, bytes: &[u8]) -> Span {
        let at = self.geo.data_off as usize + off as usize;
        self.poke(at, bytes);
        Span::new(off, bytes.len() as u32)
    }

    pub fn data(&self, span: Span) -> Vec<u8> {
        let at = self.geo.data_off as usize + span.off as usize;
        assert!(at + span.len as usize <= self.len);
        let mut v = vec![0u8; span.len as usize];
        // SAFETY: in bounds, checked above.
        unsafe { ptr::copy_nonoverlapping(self.base.as_ptr().add(at), v.as_mut_ptr(), v.len()) };
        v
    }

    /// Writes `req` into ring slot `index % sq_entries` (no publishing).
    pub fn put_req(&mut self, index: u32, req: &Req) {
        let slot = (index & (self.geo.sq_entries - 1)) as usize;
        let off = self.geo.sq_off() + slot * REQ_SIZE;
        // SAFETY: the slot is in the SQ of our mapping, aligned.
        unsafe { ptr::write_volatile(self.base.as_ptr().add(off).cast::<Req>(), *req) };
    }

    pub fn cqe_at(&self, index: u32) -> Cqe {
        let slot = (index & (self.geo.cq_entries - 1)) as usize;
        let off = self.geo.cq_off() + slot * CQE_SIZE;
        // SAFETY: the slot is in the CQ of our mapping, aligned.
        unsafe { ptr::read_volatile(self.base.as_ptr().add(off).cast::<Cqe>()) }
    }

    pub fn kick(&self) {
        let _ = rustix::io::write(&self.kick, &1u64.to_ne_bytes());
    }

    /// Publishes `req` as an honest client would (kicking always).
    pub fn submit(&mut self, mut req: Req) -> u32 {
        req.tag = self.tag;
        self.tag = self.tag.wrapping_add(1);
        self.put_req(self.tail, &req);
        self.tail = self.tail.wrapping_add(1);
        self.set(OFF_SQ_TAIL, self.tail);
        fence(Ordering::SeqCst);
        self.kick();
        req.tag
    }

    /// The next completion, polling for up to `timeout`; `None` if none
    /// came.
    pub fn reap(&mut self, timeout: Duration) -> Option<Cqe> {
        let until = Instant::now() + timeout;
        loop {
            if self.get(OFF_CQ_TAIL) != self.head {
                let c = self.cqe_at(self.head);
                self.head = self.head.wrapping_add(1);
                self.set(OFF_CQ_HEAD, self.head);
                return Some(c);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// One request and its answer (within seconds, or the test fails).
    pub fn call(&mut self, req: Req) -> Cqe {
        let tag = self.submit(req);
        let c = self
            .reap(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no answer to {req:?}"));
        assert_eq!(c.tag, tag, "answers come in order");
        c
    }

    pub fn res(&mut self, req: Req) -> Result<u64, Errno> {
        self.call(req).result()
    }

    /// A path request with the path at the start of the data area.
    pub fn path_req(&mut self, op: Op, fd: i32, path: &[u8], a: [u64; 4]) -> Req {
        let mut r = Req::new(op);
        r.fd = fd;
        r.a = a;
        r.p1 = self.put(0, path);
        r
    }

    /// Waits until the server marked the channel GONE.
    pub fn wait_gone(&self, secs: u64) -> bool {
        let until = Instant::now() + Duration::from_secs(secs);
        while !self.gone() {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Whether the server closed its end of the control socket.
    pub fn hung_up(&self, secs: u64) -> bool {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let mut fds = [rustix::event::PollFd::new(
                &self.sock,
                rustix::event::PollFlags::RDHUP,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            if let Ok(n) = rustix::event::poll(&mut fds, Some(&ts))
                && n > 0
                && fds[0].revents().intersects(
                    rustix::event::PollFlags::RDHUP
                        | rustix::event::PollFlags::HUP
                        | rustix::event::PollFlags::ERR,
                )
            {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `connect`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

pub fn open_flags(flags: i32, mode: u32) -> [u64; 4] {
    [flags as i64 as u64, mode as u64, 0, 0]
}

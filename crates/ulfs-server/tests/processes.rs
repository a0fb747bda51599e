//! Deaths across processes: a client process SIGKILLed in the middle of
//! 64 MiB writes, a server process SIGKILLed with clients in flight, and a
//! server that runs out of file descriptors. This test binary runs itself
//! again as the other process (the `child_*` tests, which do nothing
//! unless the environment says so).

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use ulfs::Errno;
use ulfs::fs::Volume;
use ulfs::{Fs, MountOptions};
use ulfs_server::{Config, Server};
use ulfs_wire::{ClientChannel, Op, Req, Span, control};

const ROLE: &str = "ULFS_SERVER_TEST_ROLE";
const SOCKET: &str = "ULFS_SERVER_TEST_SOCKET";
const IMAGE: &str = "ULFS_SERVER_TEST_IMAGE";
const NOFILE: &str = "ULFS_SERVER_TEST_NOFILE";
const READY: &str = "ULFS-SERVER-TEST-READY";

fn role(want: &str) -> Option<std::path::PathBuf> {
    (std::env::var(ROLE).ok()? == want).then(|| std::env::var_os(SOCKET).unwrap().into())
}

/// Runs this binary's test `name` as a child process with `env`, and waits
/// for it to print READY.
fn spawn(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> Kid {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.by_ref().any(|l| l.is_ok_and(|l| l.contains(READY)));
    assert!(ready, "{name} ended before it was ready");
    std::thread::spawn(move || lines.for_each(drop));
    Kid(child)
}

/// A child process, killed if the test fails before it does.
struct Kid(Child);

impl std::ops::Deref for Kid {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Kid {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigkill(child: &mut Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success());
}

/// The writer: a 64 MiB channel, a file it unlinks and holds open (under
/// a thousand descriptors), and 64 MiB writes to it in a loop until it is
/// killed.
#[test]
fn child_writer() {
    let Some(socket) = role("writer") else {
        return;
    };
    let (mut c, _) = ClientChannel::connect(&socket, 0, 64 << 20).unwrap();
    assert_eq!(c.geometry().data_len, 64 << 20);
    let name = format!("/victim{}", std::process::id());
    let p = c.put(0, name.as_bytes()).unwrap();
    let mut q = Req::new(Op::Openat);
    q.fd = libc::AT_FDCWD;
    q.a = open_flags(libc::O_CREAT | libc::O_RDWR, 0o644);
    q.p1 = p;
    let fd = c.call(q).unwrap().result().unwrap() as i32;
    let mut q = Req::new(Op::Unlinkat);
    q.fd = libc::AT_FDCWD;
    q.p1 = p;
    c.call(q).unwrap().result().unwrap();
    for _ in 0..1000 {
        let mut q = Req::new(Op::Dup);
        q.fd = fd;
        c.call(q).unwrap().result().unwrap();
    }
    c.data_mut().fill(0x77);
    for i in 0u64.. {
        let mut q = Req::new(Op::Pwrite);
        q.fd = fd;
        q.a[0] = (i % 2) << 20;
        q.p1 = Span::new(0, 64 << 20);
        assert_eq!(c.call(q).unwrap().result(), Ok(64 << 20));
        if i == 0 {
            println!("{READY}");
        }
    }
}

#[test]
fn a_client_killed_mid_write_leaves_the_server_and_others_unharmed() {
    let mut s = serve(512 << 20, |_| {});
    let mut watcher = s.client();
    // A client working all along.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let other = {
        let (stop, served) = (stop.clone(), served.clone());
        let mut c = s.client();
        std::thread::spawn(move || {
            let fd = c
                .open("/other", libc::O_CREAT | libc::O_RDWR, 0o644)
                .unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                c.pwrite(fd, &i.to_le_bytes(), 0).unwrap();
                c.stat("/other").unwrap();
                served.fetch_add(1, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            c.close(fd).unwrap();
            c.unlink("/other").unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    for (round, delay_ms) in [0u64, 40, 150].into_iter().enumerate() {
        let free0 = watcher.statfs("/").unwrap().bfree;
        let mut child = spawn(
            "child_writer",
            &[(ROLE, "writer".as_ref()), (SOCKET, s.socket.as_os_str())],
        );
        s.wait_clients(3);
        std::thread::sleep(Duration::from_millis(delay_ms));
        let before = served.load(Ordering::Relaxed);
        sigkill(&mut child);
        // The server notices, lets its requests finish, closes its 1001
        // descriptors: the unlinked 65 MiB file is freed.
        s.wait_clients(2);
        let until = Instant::now() + Duration::from_secs(10);
        // (A few blocks of slack: the root directory may grow for the
        // victim's name; its file is 16,000 blocks.)
        loop {
            let free = watcher.statfs("/").unwrap().bfree;
            if free + 8 >= free0 {
                break;
            }
            assert!(
                Instant::now() < until,
                "round {round}: the killed client's file was not freed: {free} free, {free0} before"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The other client went on.
        let until = Instant::now() + Duration::from_secs(10);
        while served.load(Ordering::Relaxed) < before + 10 {
            assert!(
                Instant::now() < until,
                "round {round}: the other client stalled"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!other.is_finished(), "the other client failed");
    }
    stop.store(true, Ordering::Relaxed);
    other.join().expect("the other client failed");
    watcher.nop().unwrap();
    drop(watcher);
    s.wait_clients(0);
    s.stop();
}

/// A server process on the image `IMAGE`, with at most `NOFILE` open
/// files if set; runs until killed.
#[test]
fn child_server() {
    let Some(socket) = role("server") else {
        return;
    };
    if let Some(n) = std::env::var(NOFILE)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let lim = rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, lim).unwrap();
    }
    let img = std::env::var_os(IMAGE).unwrap();
    let vol = unbusy(|| Volume::mount(Path::new(&img), MountOptions::default()));
    let mut cfg = Config::new(&socket);
    cfg.workers = 2;
    let server = Server::start(vol, cfg).unwrap();
    println!("{READY}");
    server.join().unwrap();
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15, 12 and 13 after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn a_sigkilled_server_leaves_enotconn_and_an_image_that_reopens_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs(&img, 256 << 20);
    let socket = dir.path().join("sock");
    let mut server = spawn(
        "child_server",
        &[
            (ROLE, "server".as_ref()),
            (SOCKET, socket.as_os_str()),
            (IMAGE, img.as_os_str()),
        ],
    );
    // Durable before the kill: a file written and fsynced.
    let mut a = ulfs_client::Client::connect(&socket).unwrap();
    a.mkdir("/kept", 0o755).unwrap();
    let fd = a
        .open("/kept/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    a.write(fd, b"fsynced before the kill").unwrap();
    a.fsync(fd).unwrap();
    // In flight at the kill: 64 MiB writes in a loop, and a raw client
    // with a request the server has not answered yet (its ring is stalled
    // by a CQ it never empties).
    let writer = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut c = ulfs_client::Client::connect(&socket).unwrap();
            let fd = c.open("/big", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
            let buf = vec![3u8; 64 << 20];
            loop {
                if let Err(e) = c.pwrite(fd, &buf, 0) {
                    return e;
                }
            }
        })
    };
    let mut idle = ulfs_client::Client::connect(&socket).unwrap();
    idle.nop().unwrap();
    let (mut waiting, _) = ClientChannel::connect(&socket, 1, 4096).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let sleeper = std::thread::spawn(move || {
        waiting.set_spin(Duration::ZERO);
        // The answer that never comes: the server dies first.
        let mut q = Req::new(Op::Nop);
        q.op = Op::Fsync as u16;
        q.fd = 12345;
        let mut last = Ok(());
        for _ in 0..1_000_000 {
            match waiting.call(q) {
                Ok(_) => {}
                Err(e) => {
                    last = Err(e);
                    break;
                }
            }
        }
        last
    });
    std::thread::sleep(Duration::from_millis(100));
    let killed = Instant::now();
    sigkill(&mut server);
    // Everyone hears ENOTCONN within seconds, nobody hangs.
    let e = within(5, "the writer after the kill", move || {
        writer.join().unwrap()
    });
    assert_eq!(e, ENOTCONN);
    let e = within(5, "a waiting client after the kill", move || {
        sleeper.join().unwrap()
    });
    assert_eq!(e, Err(ENOTCONN));
    let r = within(5, "an idle client after the kill", move || idle.nop());
    assert_eq!(r, Err(ENOTCONN));
    assert!(killed.elapsed() < Duration::from_secs(5));
    assert_eq!(a.stat("/kept/f"), Err(ENOTCONN));
    drop(a);
    // A new client cannot connect (nobody listens), and says so.
    let e = ulfs_client::Client::connect(&socket).map(drop).unwrap_err();
    assert!(
        e == Errno(libc::ECONNREFUSED) || e == Errno::ENOENT,
        "connect to a dead server: {e}"
    );
    // The image reopens: the journal replays, the fsynced file is whole.
    let mut fs = unbusy(|| Fs::mount(&img, MountOptions::default()));
    let fd = fs.open("/kept/f", libc::O_RDONLY, 0).unwrap();
    let mut b = [0u8; 64];
    let n = fs.read(fd, &mut b).unwrap();
    assert_eq!(&b[..n], b"fsynced before the kill");
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img);
}

#[test]
fn a_server_out_of_descriptors_refuses_and_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs(&img, 64 << 20);
    let socket = dir.path().join("sock");
    let mut server = spawn(
        "child_server",
        &[
            (ROLE, "server".as_ref()),
            (SOCKET, socket.as_os_str()),
            (IMAGE, img.as_os_str()),
            (NOFILE, "64".as_ref()),
        ],
    );
    // Far more connections than the server has descriptors for: each gets
    // an answer (a channel, or a refusal) within seconds, none hangs.
    let mut held = Vec::new();
    let mut refused = Vec::new();
    for i in 0..100 {
        let c = control::connect(&socket).unwrap();
        rustix::net::sockopt::set_socket_timeout(
            &c,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        let _ = control::send_hello(c.as_fd(), 0, 4096);
        match control::recv(c.as_fd()) {
            Ok(control::Msg::Welcome(w)) => held.push((c, w)),
            Ok(control::Msg::Refused(r)) => refused.push(r.errno),
            Err(e) if e == Errno::EAGAIN => panic!("connection {i}: no answer within 5 s"),
            // The server refused before reading our HELLO and closed.
            Err(e) => refused.push(e),
            Ok(m) => panic!("connection {i}: {m:?}"),
        }
    }
    assert!(!refused.is_empty(), "64 descriptors served 100 clients?");
    // Connections that say nothing, more than the server can accept: it
    // has no descriptor left for the next socket.
    let silent: Vec<_> = (0..100)
        .map(|_| control::connect(&socket).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // Being full is not spinning: the server is nearly idle now.
    let pid = server.id();
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(pid) - t0;
    assert!(used < 50, "the server used {used} ticks in a quiet second");
    // A client that comes now is told, not left waiting.
    let c = control::connect(&socket).unwrap();
    let r = within_explained(
        5,
        "a connection to a server out of descriptors",
        || process_report(pid),
        move || control::hello(c.as_fd(), 0, 4096).map(drop),
    );
    assert!(r.is_err(), "a channel without descriptors?");
    // Once clients go, new ones are served.
    drop(silent);
    drop(held);
    let until = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        match ulfs_client::Client::connect(&socket) {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < until, "never served again: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    c.nop().unwrap();
    drop(c);
    sigkill(&mut server);
}

/// `ulfs serve` itself (when the CLI is built beside this test): SIGTERM
/// with clients connected and requests in flight stops it, every client
/// gets ENOTCONN, the socket is gone and the image is clean.
#[test]
fn the_cli_server_stops_cleanly_on_sigterm() {
    // target/<profile>/deps/processes-… → target/<profile>/ulfs
    let exe = std::env::current_exe().unwrap();
    let ulfs = exe.parent().unwrap().parent().unwrap().join("ulfs");
    if !ulfs.exists() {
        ulfs_testkit::skip::skip(
            "the_cli_server_stops_cleanly_on_sigterm",
            "the ulfs binary is not built (cargo build -p ulfs-cli)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs(&img, 256 << 20);
    let socket = dir.path().join("sock");
    let mut server = Kid(Command::new(&ulfs)
        .arg("serve")
        .arg(&img)
        .arg("--socket")
        .arg(&socket)
        .args(["--workers", "2", "-f"])
        .spawn()
        .unwrap());
    let until = Instant::now() + Duration::from_secs(10);
    let mut a = loop {
        match ulfs_client::Client::connect(&socket) {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < until, "ulfs serve never listened: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    let fd = a.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = ulfs_client::Client::connect(&socket).unwrap();
                let fd = c
                    .open(format!("/w{w}"), libc::O_CREAT | libc::O_RDWR, 0o644)
                    .unwrap();
                let buf = vec![w as u8; 8 << 20];
                loop {
                    if let Err(e) = c.pwrite(fd, &buf, 0) {
                        return e;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let pid = rustix::process::Pid::from_raw(server.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    for w in writers {
        let e = within(10, "a writer after SIGTERM", move || w.join().unwrap());
        assert_eq!(e, ENOTCONN);
    }
    assert_eq!(a.write(fd, b"late"), Err(ENOTCONN));
    let st = within(20, "ulfs serve exiting", move || {
        let st = server.wait().unwrap();
        std::mem::forget(server);
        st
    });
    assert!(st.success(), "ulfs serve exited with {st}");
    assert!(!socket.exists(), "the socket file was left behind");
    assert_fsck_clean(&img);
    let mut fs = unbusy(|| Fs::mount(&img, MountOptions::default()));
    assert_eq!(fs.stat("/w0").unwrap().size, 8 << 20);
    fs.unmount().unwrap();
}

/// One user other than root may hold `Limits::max_clients_per_user`
/// connections, no more (EAGAIN), while root still connects: a user's
/// many processes cannot lock the others out.
#[test]
fn one_user_cannot_take_every_client_slot() {
    if !ulfs_testkit::host_files::is_root() {
        return ulfs_testkit::skip::skip(
            "one_user_cannot_take_every_client_slot",
            "needs root to connect as another user",
        );
    }
    let mut s = serve(32 << 20, |c| c.limits.max_clients_per_user = 2);
    let out = Command::new("setpriv")
        .args(["--reuid=1001", "--regid=1001", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "child_connects_three_times", "--nocapture"])
        .env(ROLE, "slots")
        .env(SOCKET, &s.socket)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("connections: ok ok EAGAIN"), "{said}");
    let _root = s.client();
    s.stop();
}

/// The other user's process of `one_user_cannot_take_every_client_slot`.
#[test]
fn child_connects_three_times() {
    let Some(socket) = role("slots") else {
        return;
    };
    let held: Vec<Result<ulfs_client::Client, Errno>> = (0..3)
        .map(|_| ulfs_client::Client::connect(&socket))
        .collect();
    let said: Vec<String> = held
        .iter()
        .map(|r| match r {
            Ok(_) => "ok".to_string(),
            Err(e) => e.name().unwrap_or("E?").to_string(),
        })
        .collect();
    println!("connections: {}", said.join(" "));
}

//! The channel between two processes: this test binary runs itself again
//! as the server (the `child_server` test, which does nothing unless the
//! environment says so), listening on a real socket path. The memfd and
//! eventfd cross by SCM_RIGHTS, the futex and the kick cross the process
//! boundary, and a SIGKILLed server must be noticed.

mod common;

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Rng, client, serve, welcome};
use ulfs_wire::{ClientChannel, Errno, Op, Req, control};

const SOCKET_ENV: &str = "ULFS_WIRE_TEST_SERVER_SOCKET";
const READY: &str = "ULFS-WIRE-SERVER-READY";

/// The server process: listens, accepts one client, checks its
/// credentials, grants a channel, serves until the client hangs up.
#[test]
fn child_server() {
    let Some(path) = std::env::var_os(SOCKET_ENV) else {
        return;
    };
    let listener = control::listen(Path::new(&path), 0o600).unwrap();
    println!("{READY}");
    let sock = listener.accept().unwrap();
    let creds = control::peer_credentials(sock.as_fd()).unwrap();
    if creds.pid != std::os::unix::process::parent_id() as i32 {
        control::send_refused(sock.as_fd(), Errno::EPERM, "not my parent").unwrap();
        panic!("peer {creds:?} is not the parent");
    }
    let (chan, kick) = welcome(&sock, 1 << 20);
    let spin = std::env::var("ULFS_WIRE_TEST_SPIN_US")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_micros(20), Duration::from_micros);
    serve(chan, kick, sock, spin);
    listener.remove().unwrap();
}

struct Server {
    child: Child,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn spawn(spin_us: u32) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ulfs.sock");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--nocapture", "--test-threads=1"])
            .env(SOCKET_ENV, &path)
            .env("ULFS_WIRE_TEST_SPIN_US", spin_us.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The harness prints its own words before ours on the same line.
        let ready = lines.by_ref().any(|l| l.is_ok_and(|l| l.contains(READY)));
        assert!(ready, "the server process ended before listening");
        // Keep reading, so the child's harness never writes to a closed pipe.
        thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            path,
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn thousands_of_round_trips_between_two_processes() {
    for spin_us in [20, 0] {
        let mut server = Server::spawn(spin_us);
        let (mut c, id) = ClientChannel::connect(&server.path, 0, 512 << 10).unwrap();
        assert_eq!(id, 42);
        assert_eq!(c.geometry().data_len, 512 << 10);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ spin_us as u64);
        let mut scratch = Vec::new();
        for i in 0..3000 {
            let len = match i % 3 {
                0 => rng.next() as usize % 256,
                1 => rng.next() as usize % 8192,
                _ => rng.next() as usize % (256 << 10),
            };
            client::echo(&mut c, &mut rng, len, &mut scratch);
        }
        for _ in 0..2000 {
            assert_eq!(c.call(Req::new(Op::Nop)).unwrap().result(), Ok(0));
        }
        if spin_us == 0 {
            // A server that never spins sleeps between requests: the kicks
            // crossed the process boundary.
            assert!(c.stats().kicks > 0, "{:?}", c.stats());
        }
        // Our hangup ends the server, which removes its socket.
        drop(c);
        let status = server.child.wait().unwrap();
        assert!(status.success(), "server exited with {status}");
        assert!(!server.path.exists());
    }
}

#[test]
fn a_sigkilled_server_gives_enotconn_within_a_second() {
    let server = Server::spawn(20);
    let (mut c, _) = ClientChannel::connect(&server.path, 4, 4096).unwrap();
    assert_eq!(c.call(Req::new(Op::Nop)).unwrap().result(), Ok(0));
    // FSYNC is never answered by the test server: the client waits.
    c.set_spin(Duration::ZERO);
    c.submit(&Req::new(Op::Fsync)).unwrap();
    let pid = server.child.id();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        Instant::now()
    });
    let r = c.wait(0);
    let returned = Instant::now();
    let killed = killer.join().unwrap();
    assert_eq!(r.unwrap_err(), Errno(libc::ENOTCONN));
    let after = returned.saturating_duration_since(killed);
    assert!(
        after < Duration::from_secs(1),
        "noticed {after:?} after the kill"
    );
    assert!(c.stats().timeouts >= 1);
    drop(server);
}

#[test]
fn a_refusal_is_the_callers_errno() {
    // A server that refuses everyone, in-process: connect → EACCES.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let l = control::listen(&path, 0o666).unwrap();
    let t = thread::spawn(move || {
        let s = l.accept().unwrap();
        assert!(matches!(
            control::recv(s.as_fd()).unwrap(),
            control::Msg::Hello { .. }
        ));
        control::send_refused(s.as_fd(), Errno::EACCES, "read-only for you").unwrap();
    });
    assert_eq!(
        ClientChannel::connect(&path, 0, 0).err(),
        Some(Errno::EACCES)
    );
    t.join().unwrap();
}

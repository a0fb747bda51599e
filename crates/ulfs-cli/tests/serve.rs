//! `ulfs serve` as users meet it: started in the background or the
//! foreground, clients connecting as different users (the kernel says who
//! they are), the image refused to others while served, SIGTERM ending it
//! cleanly and SIGKILL leaving an image the journal repairs and clients
//! that get ENOTCONN instead of hanging.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ulfs::Errno;
use ulfs_client::Client;
use ulfs_testkit::cli::{ok, refused};
use ulfs_testkit::host_files::is_root;
use ulfs_testkit::skip::skip;

fn ulfs() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ulfs"))
}

fn mkfs(dir: &Path) -> PathBuf {
    let img = dir.join("img");
    ok(ulfs(), &["mkfs".as_ref(), img.as_os_str(), "64M".as_ref()]);
    img
}

/// Waits until a client can connect (the server listens).
fn connect(socket: &Path) -> Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Client::connect(socket) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no server at {}: {e}", socket.display()),
        }
    }
}

/// `ulfs serve -f` as a child, and a client once it listens.
fn serve_foreground(img: &Path, socket: &Path) -> (Child, Client) {
    let child = Command::new(ulfs())
        .args(["serve", "-f", "--workers", "2", "--socket"])
        .arg(socket)
        .arg(img)
        .spawn()
        .unwrap();
    let c = connect(socket);
    (child, c)
}

fn fsck_clean(img: &Path) {
    ok(ulfs(), &["fsck".as_ref(), img.as_os_str()]);
}

#[test]
fn serve_in_the_background_refuses_the_image_to_others_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path());
    let socket = dir.path().join("sock");
    // Returns once it listens: a client can connect at once.
    ok(
        ulfs(),
        &[
            "serve".as_ref(),
            img.as_os_str(),
            "--socket".as_ref(),
            socket.as_os_str(),
        ],
    );
    let mut c = Client::connect(&socket).unwrap();
    let fd = c
        .open("/hello", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    c.write(fd, b"served\n").unwrap();
    c.close(fd).unwrap();
    // The image is the server's: others are told it is in use.
    let err = refused(ulfs(), &["ls".as_ref(), img.as_os_str()]);
    assert!(err.contains("in use"), "{err}");
    // A second server on the same socket is refused too.
    let err = refused(
        ulfs(),
        &[
            "serve".as_ref(),
            img.as_os_str(),
            "--socket".as_ref(),
            socket.as_os_str(),
        ],
    );
    assert!(!err.is_empty());
    // SIGTERM: the server commits, marks the image clean and goes; the
    // client is told.
    let pid = server_pid(&img);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_gone(pid);
    assert_eq!(c.nop(), Err(Errno::ENOTCONN));
    assert!(!socket.exists(), "the socket file was left behind");
    fsck_clean(&img);
    assert_eq!(
        ok(
            ulfs(),
            &["cat".as_ref(), img.as_os_str(), "/hello".as_ref()]
        ),
        "served\n"
    );
}

#[test]
fn a_server_that_cannot_start_says_why_and_leaves_the_image_clean() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path());
    let socket = dir.path().join("no/such/dir/sock");
    for fg in [false, true] {
        let mut args = vec![
            "serve".as_ref(),
            img.as_os_str(),
            "--socket".as_ref(),
            socket.as_os_str(),
        ];
        if fg {
            args.push("-f".as_ref());
        }
        let err = refused(ulfs(), &args);
        assert!(err.contains("cannot listen on"), "{err}");
        let info = ok(ulfs(), &["info".as_ref(), img.as_os_str()]);
        assert!(
            info.lines()
                .any(|l| l.starts_with("clean:") && l.ends_with("yes")),
            "{info}"
        );
    }
}

/// The pid of the process holding `img` open (the daemon), from /proc.
fn server_pid(img: &Path) -> i32 {
    let img = std::fs::canonicalize(img).unwrap();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        let exe = std::fs::read_link(e.path().join("exe")).unwrap_or_default();
        if exe.file_name() != Some("ulfs".as_ref()) {
            continue;
        }
        if fds
            .flatten()
            .any(|f| std::fs::read_link(f.path()).is_ok_and(|t| t == img))
        {
            return pid;
        }
    }
    panic!("no ulfs process holds {}", img.display());
}

fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: kill with signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_server_leaves_clients_enotconn_and_an_image_the_journal_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path());
    let socket = dir.path().join("sock");
    let (mut server, mut c) = serve_foreground(&img, &socket);
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.write(fd, &vec![7u8; 1 << 20]).unwrap();
    c.fsync(fd).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    // The client finds out within its wait slice, not never.
    let start = Instant::now();
    assert_eq!(c.write(fd, b"after"), Err(Errno::ENOTCONN));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // What fsync made durable is there; the journal makes the image clean.
    let out = ok(ulfs(), &["stat".as_ref(), img.as_os_str(), "/f".as_ref()]);
    assert!(out.contains("1048576"), "{out}");
    fsck_clean(&img);
    // A new server on the same socket path (the dead one's file is stale).
    let (mut server, mut c) = serve_foreground(&img, &socket);
    assert_eq!(c.stat("/f").unwrap().size, 1 << 20);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    fsck_clean(&img);
}

/// Runs lines of calls as `uid` (with supplementary group 3000) through a
/// client process of its own: this test binary again, as the child below.
fn as_user(socket: &Path, uid: u32, lines: &str) -> Vec<String> {
    let mut child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--groups=3000")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "client_child",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("ULFS_SERVE_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("= "))
        .map(str::to_string)
        .collect()
}

/// The client side of `as_user`: one call per line on stdin, each answer
/// on stdout as `= ok`, `= ERRNO` or `= MODE UID GID`.
#[test]
#[ignore = "the client process of two_users_are_judged_by_their_kernel_verified_ids"]
fn client_child() {
    use std::io::BufRead;
    let socket = std::env::var("ULFS_SERVE_SOCKET").expect("run by as_user");
    let mut c = Client::connect(&socket).unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let octal = |i: usize| u32::from_str_radix(w[i], 8).unwrap();
        let done = |r: Result<(), Errno>| r.map(|()| "ok".to_string());
        let r = match w[0] {
            "read" => done(c.open(w[1], libc::O_RDONLY, 0).and_then(|fd| c.close(fd))),
            "write" => done(c.open(w[1], libc::O_WRONLY, 0).and_then(|fd| c.close(fd))),
            "create" => done(
                c.open(
                    w[1],
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    octal(2),
                )
                .and_then(|fd| c.close(fd)),
            ),
            "mkdir" => done(c.mkdir(w[1], octal(2))),
            "unlink" => done(c.unlink(w[1])),
            "chmod" => done(c.chmod(w[1], octal(2))),
            "stat" => c
                .stat(w[1])
                .map(|st| format!("{:o} {} {}", st.mode, st.uid, st.gid)),
            op => panic!("no such call {op}"),
        };
        match r {
            Ok(s) => println!("= {s}"),
            Err(e) => println!("= {}", e.name().unwrap_or("E?")),
        }
    }
}

/// An image served to every user (its socket in a directory they can
/// reach), and root's client, which has set the scene: `/tmp` sticky and
/// world-writable, `/g` a set-group-ID directory of group 3000. Returns
/// the directories to keep, the image, the socket, the server and root.
fn users_scene() -> ([tempfile::TempDir; 2], PathBuf, PathBuf, Child, Client) {
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path());
    let sockdir = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(
        sockdir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let socket = sockdir.path().join("sock");
    let (server, mut root) = serve_foreground(&img, &socket);
    root.mkdir("/tmp", 0o777).unwrap();
    root.chmod("/tmp", 0o1777).unwrap();
    root.mkdir("/g", 0o777).unwrap();
    root.chown("/g", 0, 3000).unwrap();
    root.chmod("/g", 0o2775).unwrap();
    ([dir, sockdir], img, socket, server, root)
}

#[test]
fn two_users_are_judged_by_their_kernel_verified_ids() {
    const TEST: &str = "two_users_are_judged_by_their_kernel_verified_ids";
    if !is_root() {
        return skip(TEST, "needs root to run clients as other users");
    }
    if Command::new("setpriv").arg("--help").output().is_err() {
        return skip(TEST, "setpriv (util-linux) is not installed");
    }
    let (_dirs, img, socket, mut server, mut root) = users_scene();
    let alice = as_user(
        &socket,
        1001,
        "create /tmp/secret 600\ncreate /tmp/shared 640\nmkdir /tmp/alice 755\ncreate /g/new 644\nstat /g/new\nstat /tmp/secret\n",
    );
    assert_eq!(
        alice,
        [
            "ok",
            "ok",
            "ok",
            "ok",
            "100644 1001 3000",
            "100600 1001 1001"
        ],
        "as uid 1001"
    );
    // bob is in group 3000 too, but not alice's own group (1001).
    root.chown("/tmp/shared", 1001, 3000).unwrap();
    let bob = as_user(
        &socket,
        1002,
        "read /tmp/secret\nread /tmp/shared\nwrite /tmp/shared\ncreate /tmp/alice/x 644\nunlink /tmp/secret\nchmod /tmp/secret 666\ncreate /tmp/bobs 600\nunlink /tmp/bobs\n",
    );
    assert_eq!(
        bob,
        [
            "EACCES", "ok", "EACCES", "EACCES", "EPERM", "EPERM", "ok", "ok"
        ],
        "as uid 1002"
    );
    // Root reads everything.
    let fd = root.open("/tmp/secret", libc::O_RDWR, 0).unwrap();
    root.close(fd).unwrap();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    fsck_clean(&img);
}

/// Runs `script` (sh, `$1` = `dir`) as `uid` with supplementary group
/// 3000, standard error with standard output; `served` runs it under
/// `ulfs run --server SOCKET`.
fn script_as(uid: u32, script: &str, dir: &str, served: Option<&Path>) -> String {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--groups=3000");
    if let Some(socket) = served {
        cmd.arg(ulfs())
            .arg("run")
            .arg("--server")
            .arg(socket)
            .arg("--");
    }
    let full = format!("exec 2>&1\n{script}");
    let out = cmd.args(["sh", "-c", &full, "sh", dir]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Unmodified programs of two users through `ulfs run --server` get, call
/// for call, what the kernel gives the same users on tmpfs: a 0600 file
/// unreadable to the other, a directory not writable, a sticky directory's
/// files not removable, a set-group-ID directory's group given.
#[test]
fn two_users_programs_through_ulfs_run_agree_with_tmpfs() {
    const TEST: &str = "two_users_programs_through_ulfs_run_agree_with_tmpfs";
    if !is_root() {
        return skip(TEST, "needs root to run programs as other users");
    }
    if Command::new("setpriv").arg("--help").output().is_err() {
        return skip(TEST, "setpriv (util-linux) is not installed");
    }
    let alice = r#"cd "$1"
echo secret > tmp/secret; chmod 600 tmp/secret
echo shared > tmp/shared; chmod 640 tmp/shared
mkdir tmp/alice; echo g > g/new
stat -c '%n %a %u %g' g/new tmp/secret tmp/alice
"#;
    let bob = r#"cd "$1"
cat tmp/secret; cat tmp/shared; echo x >> tmp/shared
touch tmp/alice/x; rm -f tmp/secret; chmod 666 tmp/secret
echo mine > tmp/bobs; stat -c '%n %a %u %g' tmp/bobs; rm tmp/bobs
ls tmp
"#;
    let scene = |root_dir: &Path| {
        use std::os::unix::fs::{PermissionsExt, chown};
        let p = |m| std::fs::Permissions::from_mode(m);
        std::fs::create_dir(root_dir.join("tmp")).unwrap();
        std::fs::set_permissions(root_dir.join("tmp"), p(0o1777)).unwrap();
        std::fs::create_dir(root_dir.join("g")).unwrap();
        chown(root_dir.join("g"), Some(0), Some(3000)).unwrap();
        std::fs::set_permissions(root_dir.join("g"), p(0o2775)).unwrap();
    };
    // The kernel's answers, on tmpfs.
    let host = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::set_permissions(
        host.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    scene(host.path());
    let hdir = host.path().to_str().unwrap();
    let want_alice = script_as(1001, alice, hdir, None);
    std::os::unix::fs::chown(host.path().join("tmp/shared"), Some(1001), Some(3000)).unwrap();
    let want_bob = script_as(1002, bob, hdir, None);
    assert!(want_bob.contains("Permission denied"), "{want_bob}");

    // The same through a server: root sets the same scene through a
    // client of its own.
    let (_dirs, img, socket, mut server, mut root) = users_scene();
    let got_alice = script_as(1001, alice, "/ulfs", Some(&socket));
    assert_eq!(got_alice, want_alice, "uid 1001");
    root.chown("/tmp/shared", 1001, 3000).unwrap();
    let got_bob = script_as(1002, bob, "/ulfs", Some(&socket));
    assert_eq!(got_bob, want_bob, "uid 1002");
    drop(root);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    fsck_clean(&img);
}

/// A served program that drops root (setgroups, setgid, setuid, as a
/// daemon does) is judged by its new ids from then on, while the file it
/// opened as root stays readable through its descriptor, as on Linux.
#[test]
fn a_program_that_drops_root_is_judged_by_its_new_ids() {
    const TEST: &str = "a_program_that_drops_root_is_judged_by_its_new_ids";
    if !is_root() {
        return skip(TEST, "needs root to drop privileges");
    }
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path());
    let socket = dir.path().join("sock");
    let (mut server, mut root) = serve_foreground(&img, &socket);
    let fd = root
        .open("/secret", libc::O_CREAT | libc::O_WRONLY, 0o600)
        .unwrap();
    root.write(fd, b"root only").unwrap();
    root.close(fd).unwrap();
    let script = r#"
import os
kept = open("/ulfs/secret")
os.setgroups([]); os.setgid(1001); os.setuid(1001)
print(os.getuid(), kept.read())
for what, f in [("read", lambda: open("/ulfs/secret")), ("create", lambda: open("/ulfs/mine", "w"))]:
    try:
        f()
        print(what, "ok")
    except PermissionError:
        print(what, "EACCES")
"#;
    let out = Command::new(ulfs())
        .arg("run")
        .arg("--server")
        .arg(&socket)
        .args(["--", "python3", "-c", script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "1001 root only\nread EACCES\ncreate EACCES\n");
    drop(root);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    fsck_clean(&img);
}

//! The shell `system(3)` and `popen(3)` start inherits every descriptor of
//! the program that is not close-on-exec, image files included, sharing
//! their offsets (crates/ulfs-preload process.rs `shell_token`). Before,
//! in process it got none (`echo` to a standard output in the image said
//! "I/O error") and through a server only 0-2. Compared with the kernel
//! on a host directory, in process and through `ulfs serve`.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// `$1`: the directory to work in; prints the files' contents at the end.
const SCRIPT: &str = r#"
set -e
cd "$1"
printf 'line one\nline two\n' > f
exec 3<f
exec 4>>log
python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None)
libc.popen.restype = ctypes.c_void_p
os.system('head -n 1 <&3; echo system >&4')
print('after system', os.lseek(3, 0, os.SEEK_CUR))
w = libc.popen(b'cat >&4; echo popen-w >&4', b'w')
libc.fputs(b'through the pipe\n', ctypes.c_void_p(w))
print('pclose', libc.pclose(ctypes.c_void_p(w)))
r = libc.popen(b'cat <&3', b'r')
buf = ctypes.create_string_buffer(100)
libc.fgets(buf, 100, ctypes.c_void_p(r))
print('popen-r', buf.value)
libc.pclose(ctypes.c_void_p(r))
PY
exec 3<&- 4>&-
exec 1>>out
python3 -c 'import os; os.system("echo standard output in the image")'
exec 1>/dev/null
cat out log >&2
"#;

fn transcript(run: &[&str], dir: &str) -> String {
    let mut argv: Vec<&str> = Vec::new();
    if !run.is_empty() {
        argv.push(ULFS);
        argv.push("run");
        argv.extend(run);
        argv.push("--");
    }
    argv.extend(["sh", "-c", SCRIPT, "sh", dir]);
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The files' contents come on standard error.
    format!(
        "{}--\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn serve(img: &Path, socket: &Path) -> Child {
    let child = Command::new(ULFS)
        .args(["serve", "-f", "--socket"])
        .arg(socket)
        .arg(img)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn system_and_popen_shells_inherit_image_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let kernel = transcript(&[], host.to_str().unwrap());
    assert!(kernel.contains("standard output in the image"), "{kernel}");
    let img = dir.path().join("img");
    ulfs_testkit::cli::ok(Path::new(ULFS), &["mkfs", img.to_str().unwrap(), "16M"]);
    let in_process = transcript(&[img.to_str().unwrap()], "/ulfs");
    assert_eq!(in_process, kernel, "in process");
    let served_img = dir.path().join("served");
    ulfs_testkit::cli::ok(
        Path::new(ULFS),
        &["mkfs", served_img.to_str().unwrap(), "16M"],
    );
    let socket = dir.path().join("sock");
    let mut server = serve(&served_img, &socket);
    let served = transcript(&["--server", socket.to_str().unwrap()], "/ulfs");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    assert_eq!(served, kernel, "through ulfs serve");
}

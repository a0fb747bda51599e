//! The program's umask applies to files it creates in the image, as the
//! kernel applies it (crates/ulfs-preload umask.rs): set by the shell, by
//! the program (`os.umask`), inherited from the parent of `ulfs run`,
//! across fork and exec, for files, directories and temporary files. The
//! modes are compared, file for file, with the same script on a host
//! directory, in process and through `ulfs serve`. (Before, image files
//! got 022's modes whatever the program set: `umask 077` made 0644 files.)

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// `$1`: the directory to work in. Prints every file's mode, sorted.
const SCRIPT: &str = r#"
set -e
cd "$1"
touch inherited
umask 077
touch private; mkdir private-dir
umask 002
touch group; mkdir group-dir
umask 027
sh -c 'touch child; mkdir child-dir'
python3 - <<'PY'
import os, tempfile
open('python', 'w').close()
os.umask(0o066)
open('python-066', 'w').close()
os.mkdir('python-dir-066')
fd, name = tempfile.mkstemp(dir='.', prefix='tmp-')
os.rename(name, 'mkstemp')
os.rename(tempfile.mkdtemp(dir='.', prefix='tmp-'), 'mkdtemp')
pid = os.fork()
if pid == 0:
    os.umask(0o007)
    open('forked-007', 'w').close()
    os._exit(0)
os.waitpid(pid, 0)
open('parent-after-fork', 'w').close()
os.system('touch spawned')
PY
for f in *; do stat -c '%A %n' "$f"; done
"#;

/// The script's transcript in `dir`, run by `sh` (`run` empty) or under
/// `ulfs run` with arguments `run`, from a parent whose umask is 037.
fn transcript(run: &[&str], dir: &str) -> String {
    let mut argv: Vec<&str> = Vec::new();
    if !run.is_empty() {
        argv.push(ULFS);
        argv.push("run");
        argv.extend(run);
        argv.push("--");
    }
    argv.extend(["sh", "-c", SCRIPT, "sh", dir]);
    let out = Command::new("sh")
        .args(["-c", "umask 037; exec \"$@\"", "parent"])
        .args(&argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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
fn files_made_in_the_image_get_the_programs_umask() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    std::fs::create_dir(&host).unwrap();
    let kernel = transcript(&[], host.to_str().unwrap());
    assert!(kernel.contains("-rw------- private"), "{kernel}");
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

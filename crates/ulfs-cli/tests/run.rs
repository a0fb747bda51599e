//! `ulfs run`: unmodified programs on an image through the preload library,
//! each checked against the same run on a host tmpfs directory (the
//! transcripts must be equal), plus the run's own contract: exit status
//! and signals are the program's, the image is committed at exit (and
//! replayed after a kill), and what LD_PRELOAD cannot reach is refused.
//! The scripts marked so run a second time through `ulfs run --server`,
//! on an image an `ulfs serve` owns.
//!
//! The library is `libulfs_preload.so` next to the `ulfs` binary under
//! test, which `cargo build --workspace` builds (scripts/test.sh does it
//! before testing: `cargo test` alone does not build a cdylib).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The library must have been built with the binary: say how, not "file
/// not found" from deep inside a run.
fn require_library() {
    let lib = Path::new(ULFS).with_file_name("libulfs_preload.so");
    assert!(
        lib.is_file(),
        "{} is missing: build the workspace first (cargo build --workspace, as scripts/test.sh does)",
        lib.display()
    );
}

/// A fresh 64 MiB image in a fresh directory.
fn image() -> (tempfile::TempDir, PathBuf) {
    image_of("64M")
}

fn image_of(size: &str) -> (tempfile::TempDir, PathBuf) {
    require_library();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("run.img");
    let out = Command::new(ULFS)
        .args(["mkfs", img.to_str().unwrap(), size])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    (dir, img)
}

/// `ulfs run IMG [extra] -- program args...`.
fn run(img: &Path, extra: &[&str], program: &[&str]) -> Output {
    Command::new(ULFS)
        .arg("run")
        .arg(img)
        .args(extra)
        .arg("--")
        .args(program)
        .output()
        .unwrap()
}

fn ulfs(args: &[&str]) -> Output {
    Command::new(ULFS).args(args).output().unwrap()
}

/// A host directory on tmpfs (the reference side).
fn host_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Requires a clean fsck of the image.
fn assert_clean(img: &Path) {
    let out = ulfs(&["fsck", img.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "fsck: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Runs `script` with sh, once with `$1` a tmpfs directory and once with
/// `$1` = /ulfs under `ulfs run`, and requires equal transcripts (stdout
/// and stderr) and exit status 0. `$2` is a host scratch directory.
fn same_as_tmpfs(script: &str) -> (tempfile::TempDir, PathBuf, String) {
    same_as_tmpfs_on(script, "64M")
}

/// `same_as_tmpfs`, the program run with `ulfs run --server` on an image
/// `ulfs serve` owns (stopped with SIGTERM before the image is checked).
fn same_as_tmpfs_served(script: &str) -> (tempfile::TempDir, PathBuf, String) {
    same_as_tmpfs_with(script, "64M", true)
}

/// `ulfs serve -f IMG --socket DIR/sock`, stopped (SIGTERM, and waited
/// for) when dropped.
struct Server {
    child: std::process::Child,
    socket: PathBuf,
}

impl Server {
    fn start(img: &Path) -> Server {
        let socket = img.with_file_name("sock");
        let child = Command::new(ULFS)
            .args(["serve", "-f", "--socket"])
            .arg(&socket)
            .arg(img)
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "ulfs serve did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Server { child, socket }
    }

    /// `ulfs run --server SOCKET -- program args...`.
    fn run(&self, program: &[&str]) -> Output {
        Command::new(ULFS)
            .arg("run")
            .arg("--server")
            .arg(&self.socket)
            .arg("--")
            .args(program)
            .output()
            .unwrap()
    }

    fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "ulfs serve: {status:?}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// The first lines where two transcripts part, with a little context (a
/// whole transcript can be megabytes).
fn first_difference(a: &str, b: &str) -> String {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let i = la.iter().zip(&lb).take_while(|(x, y)| x == y).count();
    let from = i.saturating_sub(3);
    let show = |l: &[&str]| l[from.min(l.len())..(i + 5).min(l.len())].join("\n");
    format!(
        "transcripts part at line {} (ulfs run: {} lines, tmpfs: {} lines)\n--- ulfs run:\n{}\n--- tmpfs:\n{}",
        i + 1,
        la.len(),
        lb.len(),
        show(&la),
        show(&lb)
    )
}

/// `same_as_tmpfs` on an image of `size`.
fn same_as_tmpfs_on(script: &str, size: &str) -> (tempfile::TempDir, PathBuf, String) {
    same_as_tmpfs_with(script, size, false)
}

fn same_as_tmpfs_with(
    script: &str,
    size: &str,
    served: bool,
) -> (tempfile::TempDir, PathBuf, String) {
    let (dir, img) = image_of(size);
    // On tmpfs like the reference directory, so copies between the two
    // stay on one file system on the reference side (copy_file_range
    // across file systems is EXDEV there).
    let scratch_dir = host_dir();
    let scratch = scratch_dir.path().to_path_buf();
    let host = host_dir();
    let hs = |o: &Output| format!("{}{}", text(&o.stdout), text(&o.stderr));
    let reference = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(host.path())
        .arg(&scratch)
        .output()
        .unwrap();
    assert!(reference.status.success(), "on tmpfs: {}", hs(&reference));
    for e in std::fs::read_dir(&scratch).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    let program = ["sh", "-c", script, "sh", "/ulfs", scratch.to_str().unwrap()];
    let on_image = if served {
        let server = Server::start(&img);
        let out = server.run(&program);
        server.stop();
        out
    } else {
        run(&img, &[], &program)
    };
    let (u, t) = (hs(&on_image), hs(&reference));
    assert!(u == t, "{}", first_difference(&u, &t));
    assert!(on_image.status.success(), "{:?}", on_image.status);
    assert_clean(&img);
    (dir, img, hs(&on_image))
}

/// Coreutils and friends, one process each, started by a shell whose
/// working directory is inside the image.
#[test]
fn coreutils_agree_with_tmpfs() {
    coreutils_agree_with_tmpfs_in(false);
}

#[test]
fn coreutils_agree_with_tmpfs_through_a_server() {
    coreutils_agree_with_tmpfs_in(true);
}

fn coreutils_agree_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
cd "$1"
mkdir -p a/b/c
printf 'hello\n' > "$2/hello"
cp "$2/hello" a/f
printf 'second file\n' > "$2/g"
cp "$2/g" a/b/g
cp a/f a/b/c/copy
cp -a a z
mv a/b/g a/moved
ln -s f a/link
ln a/f a/hard
touch -d @1000000000 a/f
echo "--- find"
find . -printf '%y %m %n %p %l\n' | grep -v '^d' | sort
find . -type d | sort
echo "--- stat"
stat -c '%F %a %s %h %Y' a/f a/hard
stat -L -c '%F %s' a/link
echo "--- sums"
find . -type f | sort | xargs sha256sum
echo "--- tar"
tar -cf "$2/t.tar" a
tar -tf "$2/t.tar" | sort
mkdir x && tar -xf "$2/t.tar" -C x && find x | sort
echo "--- rm"
rm -r z x
ls -1 .
ls -l a | tail -n +2 | awk '{s = ($1 ~ /^d/) ? "dir" : $5; print $1, $2, s, $NF}'
echo "--- text"
cat a/f a/moved | wc -c
sort a/moved a/f
rm a/hard
gzip -k a/f && ls a | sort && gzip -dc a/f.gz
diff -r a a && echo same
du -s --apparent-size a/f
head -c 3 a/moved; echo
cd a && pwd | sed "s|^$1|PREFIX|" && cat ../a/f && cd ..
"#;
    same_as_tmpfs_with(script, "64M", served);
}

/// Python's os, shutil, pathlib, tempfile, scandir, walk and rmtree.
#[test]
fn python_agrees_with_tmpfs() {
    python_agrees_with_tmpfs_in(false);
}

#[test]
fn python_agrees_with_tmpfs_through_a_server() {
    python_agrees_with_tmpfs_in(true);
}

fn python_agrees_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
python3 - "$1" <<'EOF'
import os, sys, shutil, pathlib, tempfile
base = pathlib.Path(sys.argv[1])
os.chdir(base)
(base / "pkg" / "sub").mkdir(parents=True)
for i in range(20):
    (base / "pkg" / f"n{i:02}.txt").write_text(f"line {i}\n" * (i + 1))
(base / "pkg" / "sub" / "bin").write_bytes(bytes(range(256)) * 40)
with open("pkg/append.log", "a") as f:
    f.write("one\n")
with open("pkg/append.log", "a") as f:
    f.write("two\n")
print(open("pkg/append.log").read(), end="")
fd, tmp = tempfile.mkstemp(dir=base / "pkg", prefix="t-", suffix=".tmp")
os.write(fd, b"temp data")
os.close(fd)
os.replace(tmp, base / "pkg" / "renamed.tmp")
shutil.copytree(base / "pkg", base / "copy")
shutil.move(str(base / "copy" / "sub"), str(base / "moved-sub"))
print(sorted(e.name for e in os.scandir(base)))
for root, dirs, files in os.walk(base):
    dirs.sort()
    rel = os.path.relpath(root, base)
    sizes = [(f, os.stat(os.path.join(root, f)).st_size) for f in sorted(files)]
    print(rel, dirs, sizes)
print(os.path.exists("pkg/n05.txt"), os.path.isdir("pkg"), os.path.islink("pkg"))
os.symlink("n01.txt", "pkg/ln")
print(os.readlink("pkg/ln"), open("pkg/ln").read().strip())
print(os.getcwd() == str(base), os.access("pkg/n01.txt", os.R_OK | os.W_OK))
st = os.stat("pkg/sub/bin")
print(st.st_size, oct(st.st_mode & 0o777), st.st_nlink)
os.truncate("pkg/sub/bin", 100)
print(len(open("pkg/sub/bin", "rb").read()))
shutil.rmtree(base / "copy")
print(sorted(os.listdir(base)))
try:
    os.rmdir(base / "pkg")
except OSError as e:
    print("rmdir:", e.strerror)
try:
    open(base / "missing")
except FileNotFoundError as e:
    print("open:", e.strerror)
EOF
"#;
    same_as_tmpfs_with(script, "64M", served);
}

#[test]
fn exit_status_and_signals_are_the_programs() {
    let (_d, img) = image();
    let out = run(&img, &[], &["sh", "-c", "echo x > /ulfs/a; exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let out = run(&img, &[], &["sh", "-c", "kill -TERM $$"]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
    // What `exit 7` wrote was committed at exit.
    let cat = ulfs(&["cat", img.to_str().unwrap(), "/a"]);
    assert_eq!(text(&cat.stdout), "x\n");
    assert_clean(&img);
}

/// A program killed with SIGKILL cannot commit: the image stays
/// consistent (its journal is replayed at the next mount), and what was
/// committed before (here by `sync`) is kept.
#[test]
fn a_killed_program_leaves_a_consistent_image() {
    let (_d, img) = image();
    let out = run(
        &img,
        &[],
        &[
            "sh",
            "-c",
            "echo kept > /ulfs/a; sync; echo lost > /ulfs/b; kill -KILL $$",
        ],
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    let cat = ulfs(&["cat", img.to_str().unwrap(), "/a"]);
    assert_eq!(text(&cat.stdout), "kept\n", "{}", text(&cat.stderr));
    assert_clean(&img);
    let out = run(
        &img,
        &[],
        &["sh", "-c", "echo again > /ulfs/c && cat /ulfs/c"],
    );
    assert_eq!(text(&out.stdout), "again\n", "{}", text(&out.stderr));
}

#[test]
fn read_only_runs_change_nothing() {
    let (_d, img) = image();
    let out = run(&img, &[], &["sh", "-c", "echo data > /ulfs/f"]);
    assert!(out.status.success());
    let out = run(
        &img,
        &["--ro"],
        &[
            "sh",
            "-c",
            "cat /ulfs/f; echo more >> /ulfs/f; mkdir /ulfs/d",
        ],
    );
    assert_eq!(text(&out.stdout), "data\n");
    let err = text(&out.stderr);
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!out.status.success());
    let cat = ulfs(&["cat", img.to_str().unwrap(), "/f"]);
    assert_eq!(text(&cat.stdout), "data\n");
}

#[test]
fn another_prefix_and_paths_around_it() {
    let (_d, img) = image();
    let out = run(
        &img,
        &["--at", "/mnt/img/"],
        &[
            "sh",
            "-c",
            "echo in > /mnt/img/f && cat /mnt/img//./f && cd /mnt/img && cat f \
             && cat ../img/f && test ! -e /mnt/imgx && ls /mnt/img/.. >/dev/null 2>&1; \
             test -e /ulfs/f || echo no-default-prefix",
        ],
    );
    assert_eq!(
        text(&out.stdout),
        "in\nin\nin\nno-default-prefix\n",
        "{}",
        text(&out.stderr)
    );
}

/// What LD_PRELOAD cannot reach is refused with a clear message, and the
/// program is never run without its image.
#[test]
fn unreachable_programs_and_bad_arguments_are_refused() {
    let (dir, img) = image();
    let i = img.to_str().unwrap();
    let check = |args: &[&str], code: i32, words: &str| {
        let out = ulfs(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.starts_with("ulfs: run: ") && err.contains(words),
            "{args:?}: {err}"
        );
    };
    if Path::new("/sbin/ldconfig").is_file() && !is_dynamic(Path::new("/sbin/ldconfig")) {
        check(
            &["run", i, "--", "/sbin/ldconfig", "-p"],
            126,
            "statically linked",
        );
    }
    if let Some(setuid) = ["/usr/bin/passwd", "/usr/bin/su", "/bin/su"]
        .into_iter()
        .find(|p| is_setuid(Path::new(p)))
    {
        check(&["run", i, "--", setuid], 126, "set-user-ID");
    }
    // A copy of `true` with file capabilities (secure-execution mode).
    let capped = dir.path().join("capped-true");
    std::fs::copy("/bin/true", &capped).unwrap();
    let c = std::ffi::CString::new(capped.to_str().unwrap()).unwrap();
    // cap_net_raw, effective and permitted (VFS_CAP_REVISION_2).
    let caps: [u8; 20] = [
        0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let caps = [[1u8, 0, 0, 2].as_slice(), &caps[4..]].concat();
    // SAFETY: NUL-terminated strings and a buffer of the given length.
    let set = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            caps.as_ptr().cast(),
            caps.len(),
            0,
        )
    };
    if set == 0 {
        check(
            &["run", i, "--", capped.to_str().unwrap()],
            126,
            "file capabilities",
        );
    } else {
        ulfs_testkit::skip::skip(
            "unreachable_programs_and_bad_arguments_are_refused (file capabilities)",
            "cannot set security.capability here (not root?)",
        );
    }
    check(
        &["run", i, "--", "no-such-program-here"],
        127,
        "command not found",
    );
    check(
        &["run", i, "--allow-net", "--", "true"],
        2,
        "only go with --sandbox",
    );
    check(
        &["run", i, "--at", dir.path().to_str().unwrap(), "--", "true"],
        2,
        "is under the prefix",
    );
    check(&["run", i, "--at", "/proc", "--", "true"], 2, "would hide");
    check(
        &["run", i, "--at", "relative", "--", "true"],
        2,
        "absolute path",
    );
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    check(
        &["run", junk.to_str().unwrap(), "--", "true"],
        1,
        "junk.img",
    );
}

fn is_setuid(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.permissions().mode() & libc::S_ISUID != 0)
}

fn is_dynamic(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.windows(11).any(|w| w == b"ld-linux-x8"))
}

/// sqlite3 in both journal modes: 10,000 inserts in transactions, an index,
/// VACUUM and an integrity check (record locks and, for WAL, a shared
/// writable mapping of the -shm file, both emulated in the process).
#[test]
fn sqlite3_agrees_with_tmpfs() {
    sqlite3_agrees_with_tmpfs_in(false);
}

#[test]
fn sqlite3_agrees_with_tmpfs_through_a_server() {
    sqlite3_agrees_with_tmpfs_in(true);
}

fn sqlite3_agrees_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
for mode in delete wal; do
    {
        echo "pragma journal_mode=$mode;"
        echo "create table t(id integer primary key, name text, n integer);"
        for chunk in 0 1 2 3 4 5 6 7 8 9; do
            echo "begin;"
            seq $((chunk * 1000)) $((chunk * 1000 + 999)) |
                awk '{ printf "insert into t(name, n) values(%cname %d%c, %d);\n", 39, $1, 39, ($1 * 7) % 1000 }'
            echo "commit;"
        done
        echo "create index tn on t(n);"
        echo "select count(*), sum(n), max(name) from t;"
        echo "select n, count(*) from t where n < 5 group by n;"
        echo "delete from t where id % 3 = 0;"
        echo "vacuum;"
        echo "select count(*) from t;"
        echo "pragma integrity_check;"
    } | sqlite3 "$1/$mode.db"
    sqlite3 "$1/$mode.db" 'select count(*), sum(n) from t; pragma integrity_check;'
done
ls "$1"
"#;
    same_as_tmpfs_with(script, "64M", served);
}

/// mmap of image files through python: private and shared read-only
/// mappings see the file, a shared writable one writes it back.
#[test]
fn mmap_agrees_with_tmpfs() {
    mmap_agrees_with_tmpfs_in(false);
}

#[test]
fn mmap_agrees_with_tmpfs_through_a_server() {
    mmap_agrees_with_tmpfs_in(true);
}

fn mmap_agrees_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
python3 - "$1" <<'EOF'
import mmap, os, sys
p = os.path.join(sys.argv[1], "m.bin")
with open(p, "wb") as f:
    f.write(bytes(range(256)) * 64)
with open(p, "r+b") as f:
    ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print(len(ro), ro[:4].hex(), ro[-4:].hex(), ro.find(b"\xfe\xff\x00"))
    cp = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_COPY, offset=4096)
    cp[0:5] = b"COPY!"
    print(cp[:8])
    rw = mmap.mmap(f.fileno(), 8192)
    rw[10:15] = b"HELLO"
    rw.flush()
    rw[8000:8003] = b"END"
    rw.close()
    cp.close()
    ro.close()
with open(p, "rb") as f:
    data = f.read()
print(len(data), data[8:17], data[7998:8005], data[4096:4101])
# A shared mapping resized (ftruncate + mremap), written in its new part.
q = os.path.join(sys.argv[1], "grow.bin")
with open(q, "w+b") as f:
    f.write(b"a" * 4096)
    f.flush()
    m = mmap.mmap(f.fileno(), 4096)
    m.resize(3 * 4096)
    m[5000:5004] = b"GREW"
    m[-4:] = b"TAIL"
    m.close()
data = open(q, "rb").read()
print(len(data), data[4094:4098], data[5000:5004], data[-4:])
EOF
"#;
    same_as_tmpfs_with(script, "64M", served);
}

/// File locks between open file descriptions of one process (OFD locks
/// and flock conflict; POSIX locks of the process never do).
#[test]
fn locks_agree_with_tmpfs() {
    locks_agree_with_tmpfs_in(false);
}

#[test]
fn locks_agree_with_tmpfs_through_a_server() {
    locks_agree_with_tmpfs_in(true);
}

fn locks_agree_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
python3 - "$1" <<'EOF'
import fcntl, os, sys, struct
p = os.path.join(sys.argv[1], "lock")
a = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
b = os.open(p, os.O_RDWR)
fcntl.flock(a, fcntl.LOCK_EX)
try:
    fcntl.flock(b, fcntl.LOCK_SH | fcntl.LOCK_NB)
    print("flock: no conflict")
except BlockingIOError:
    print("flock: conflict")
fcntl.flock(a, fcntl.LOCK_UN)
fcntl.flock(b, fcntl.LOCK_SH | fcntl.LOCK_NB)
print("flock: shared after unlock")
fcntl.lockf(a, fcntl.LOCK_EX, 10, 0)
fcntl.lockf(b, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
print("posix: same process never conflicts")
F_OFD_SETLK, F_OFD_GETLK = 37, 36
fl = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 100, 10, 0)
fcntl.fcntl(a, F_OFD_SETLK, fl)
try:
    fcntl.fcntl(b, F_OFD_SETLK, fl)
    print("ofd: no conflict")
except BlockingIOError:
    print("ofd: conflict")
got = struct.unpack("hhqqi", fcntl.fcntl(b, F_OFD_GETLK, fl))
print("ofd getlk:", got[0] == fcntl.F_WRLCK, got[2], got[3], got[4])
os.close(a)
fcntl.fcntl(b, F_OFD_SETLK, fl)
print("ofd: free after close")
ro = os.open(p, os.O_RDONLY)
try:
    fcntl.lockf(ro, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError as e:
    print("write lock on read-only fd:", e.strerror)
os.close(b)
os.close(ro)
EOF
"#;
    same_as_tmpfs_with(script, "64M", served);
}

/// Nothing leaks to the kernel: real workloads run under `strace -f`, and
/// no system call that takes a file name names a path under the prefix or
/// any name that exists only in the image (relative paths from a working
/// directory inside the image included).
#[test]
fn no_image_path_reaches_the_kernel() {
    if Command::new("strace").arg("-V").output().is_err() {
        return ulfs_testkit::skip::skip(
            "no_image_path_reaches_the_kernel",
            "strace is not installed",
        );
    }
    let (dir, img) = image();
    let log = dir.path().join("strace.log");
    let script = r#"
set -e
cd /ulfs
mkdir image-only-dir
echo data > image-only-dir/image-only-a
cp image-only-dir/image-only-a image-only-dir/image-only-b
mv image-only-dir/image-only-b image-only-c
ln -s image-only-c image-only-link
ls -l . image-only-dir > /dev/null
stat image-only-c image-only-link > /dev/null
find . -name 'image-only*' | sort > /dev/null
cat image-only-c image-only-link > /dev/null
sha256sum image-only-dir/image-only-a > /dev/null
touch -d @1000 image-only-c
tar -cf /dev/null image-only-dir
python3 -c '
import os, shutil
os.makedirs("image-only-py/x", exist_ok=True)
open("image-only-py/x/image-only-f", "w").write("py")
print(sorted(os.listdir(".")), [w[0] for w in os.walk("/ulfs")])
shutil.rmtree("image-only-py")
' > /dev/null
sqlite3 image-only.db 'pragma journal_mode=wal; create table t(a); insert into t values(1); select * from t;' > /dev/null
realpath image-only-link /ulfs/image-only-dir/../image-only-c > /dev/null
readlink -f image-only-link > /dev/null
df /ulfs > /dev/null
stat -f /ulfs/image-only-c > /dev/null
python3 -c 'import os; os.path.realpath("image-only-link"); os.statvfs("/ulfs/image-only-c")'
rm -r image-only-dir
cd / && ls /ulfs > /dev/null
"#;
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=%file", "-e", "signal=none", "-o"])
        .arg(&log)
        .arg(ULFS)
        .arg("run")
        .arg(&img)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let trace = std::fs::read_to_string(&log).unwrap_or_default();
    if !out.status.success() && trace.contains("PTRACE") {
        return ulfs_testkit::skip::skip(
            "no_image_path_reaches_the_kernel",
            "strace cannot trace here",
        );
    }
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let mut calls = 0;
    let mut leaks = Vec::new();
    for line in trace.lines() {
        calls += 1;
        // The quoted arguments are the names; for execve only the first
        // (the program), as its argv may mention image paths freely.
        let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        let names = if line.contains("execve(") {
            &quoted[..quoted.len().min(1)]
        } else {
            &quoted[..]
        };
        if names
            .iter()
            .any(|n| n.starts_with("/ulfs") || n.contains("image-only"))
        {
            leaks.push(line.to_string());
        }
    }
    assert!(calls > 100, "too few calls traced: {calls}\n{trace}");
    assert!(
        leaks.is_empty(),
        "image paths reached the kernel:\n{}",
        leaks.join("\n")
    );
    assert_clean(&img);
}

/// Compiles tests/c/NAME.c into `dir`; the binary's path.
fn compile_c(dir: &Path, name: &str) -> PathBuf {
    compile_c_with(dir, name, name, &["-O1"])
}

/// Compiles tests/c/`name`.c with `flags` into `dir`/`bin_name`.
fn compile_c_with(dir: &Path, name: &str, bin_name: &str, flags: &[&str]) -> PathBuf {
    let bin = dir.join(bin_name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/c/{name}.c"));
    let cc = Command::new("cc")
        .args(flags)
        .args(["-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .expect("a C compiler (cc): scripts/test.sh installs gcc");
    assert!(cc.status.success(), "{}", text(&cc.stderr));
    bin
}

/// A single-threaded program takes no lock under `ulfs run`; a signal
/// handler calling into the image while the program is inside a call gets
/// EDEADLK (it deadlocked on the lock before), and nothing else goes wrong
/// (tests/c/run_signal_reentry.c).
#[test]
fn a_signal_handler_calling_in_mid_call_is_refused() {
    let (dir, img) = image();
    let bin = compile_c(dir.path(), "run_signal_reentry");
    // A deadlock (what the handler's call did on the lock) fails the test
    // after a minute instead of hanging it.
    let mut child = Command::new(ULFS)
        .arg("run")
        .arg(&img)
        .args(["--", bin.to_str().unwrap(), "/ulfs"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the program hung: a signal handler's call deadlocked");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "handler calls: at least 200",
        "handler failures other than EDEADLK: 0",
        "handler refused mid-call: yes",
        "read back as written: yes",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    assert_clean(&img);
}

/// glibc's fts over an image tree (tests/c/run_fts.c: physical and
/// logical walks, symlinks dangling and looping, FTS_SEEDOT, a compar
/// order, fts_set's SKIP, AGAIN and FOLLOW, fts_children).
#[test]
fn glibc_fts_agrees_with_tmpfs() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_fts");
    let script = format!("set -e\nmkdir \"$1/fts\"\n{} \"$1/fts\"\n", bin.display());
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(out.lines().count() > 20, "{out}");
}

/// A C program's calls that the other workloads do not reach (scandir,
/// readdir_r, telldir/seekdir, getdents64, copy_file_range and sendfile
/// in both directions, posix_fallocate, close_range, dup2 onto 0, fdopen,
/// threads on the image at once): tests/c/run_calls.c, compiled here.
#[test]
fn c_calls_agree_with_tmpfs() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_calls");
    let script = format!(
        "set -e\nmkdir \"$1/calls\"\n{} \"$1/calls\" \"$2/host-file\"\n",
        bin.display()
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(out.contains("threads: 0 failed"), "{out}");
    assert!(out.contains("content kept: yes"), "{out}");
}

/// gdbmtool (store and fetch 10,000 items: mmap and locks), fio (psync,
/// every block verified with crc32c; threads, as fio's processes would
/// share the image), postmark (its defaults, then 10,000 files, counts
/// only: its timings vary) and git (init, add, commit, rm, mv, status,
/// log, fsck; fixed dates, so the commit ids must match too).
#[test]
fn gdbm_fio_postmark_and_git_agree_with_tmpfs() {
    let script = r#"
set -e
cd "$1"
{
    i=0
    while [ $i -lt 10000 ]; do echo "store key$i value-$i-$((i * 31 % 997))"; i=$((i + 1)); done
    echo "fetch key4242"
    echo "fetch key9999"
    echo "count"
    echo "delete key17"
    echo "count"
} > "$2/gdbm-commands"
gdbmtool -n "$1/test.gdbm" < "$2/gdbm-commands"
gdbmtool -r "$1/test.gdbm" fetch key123
fio --name=verify --directory="$1" --ioengine=psync --rw=randwrite --bs=4k --size=16M \
    --verify=crc32c --do_verify=1 --thread --numjobs=2 --group_reporting \
    --output="$2/fio.out" && echo "fio: verified"
rm -f "$1"/verify.*
mkdir pm
printf 'set location %s/pm\nrun\nset number 10000\nrun\nquit\n' "$1" > "$2/pm.cfg"
postmark "$2/pm.cfg" | sed -e 's/ ([0-9.]* per second)//' | grep -v -e seconds -e megabytes -e '^Time'
ls pm | wc -l
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
export GIT_CONFIG_NOSYSTEM=1 HOME="$2" GIT_PAGER=cat
git init -q -b main repo
cd repo
mkdir -p src
for i in 1 2 3 4 5; do echo "file $i" > src/f$i.txt; done
git add .
git commit -q -m first
echo change >> src/f1.txt
git rm -q src/f2.txt
git mv src/f3.txt src/g3.txt
git status --short
git commit -q -am second
git log --oneline
git fsck --no-progress 2>&1
git status --short
git cat-file -p HEAD:src/f1.txt
"#;
    // 10,000 postmark files take some 80 MiB.
    let (_d, _img, out) = same_as_tmpfs_on(script, "256M");
    assert!(out.contains("fio: verified"), "{out}");
    assert!(out.contains("value-4242-"), "{out}");
}

/// `--allow-read` paths python3 needs under --sandbox when it is not the
/// system's (a pyenv or venv install outside /usr).
fn python_read_paths() -> Vec<String> {
    let out = Command::new("sh")
        .args([
            "-c",
            "command -v python3; python3 -c 'import sys; print(sys.base_prefix)'",
        ])
        .output()
        .unwrap();
    let mut extra = Vec::new();
    for line in text(&out.stdout).lines() {
        let p = Path::new(line);
        let system = ["/usr", "/bin", "/lib", "/opt"]
            .iter()
            .any(|s| p.starts_with(s));
        if !system && p.is_absolute() {
            // A shim directory's parent holds the tool the shim runs.
            let root = p
                .ancestors()
                .find(|a| {
                    a.parent() == Some(Path::new("/root")) || a.parent() == Some(Path::new("/home"))
                })
                .unwrap_or(p);
            extra.push(root.to_string_lossy().into_owned());
        }
    }
    extra.sort();
    extra.dedup();
    extra
}

/// --sandbox: a raw `openat` system call and libc `open` of a host file
/// fail inside and work outside; writing a host path fails; sockets other
/// than AF_UNIX fail unless --allow-net; python3 and sqlite3 run fully on
/// the image inside (temporary files in the image's /tmp).
#[test]
fn sandbox_confines_to_the_image() {
    let (dir, img) = image();
    // Where the kernel cannot confine, `--sandbox` must refuse (and this
    // test cannot show the confinement: a counted skip).
    let probe = run(&img, &["--sandbox"], &["true"]);
    if !probe.status.success() {
        let err = text(&probe.stderr);
        assert!(
            err.contains("refusing to run unconfined")
                || err.contains("Landlock")
                || err.contains("seccomp"),
            "{err}"
        );
        return ulfs_testkit::skip::skip("sandbox_confines_to_the_image", &err);
    }
    let host_file = dir.path().join("host-secret");
    std::fs::write(&host_file, "secret").unwrap();
    let written = dir.path().join("host-written");
    let mut extra: Vec<String> = Vec::new();
    for p in python_read_paths() {
        extra.push("--allow-read".into());
        extra.push(p);
    }
    let probe = r#"
import ctypes, errno, os, socket, sys
host, written = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(257, -100, host.encode(), os.O_RDONLY)
print("raw openat:", "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
try:
    open(host).read(); print("libc open: ok")
except OSError as e: print("libc open:", errno.errorcode[e.errno])
try:
    open(written, "w").write("x"); print("host write: ok")
except OSError as e: print("host write:", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close(); print("inet socket: ok")
except OSError as e: print("inet socket:", errno.errorcode[e.errno])
a, b = socket.socketpair(); print("unix socketpair: ok")
"#;
    let args = |sandbox: bool, net: bool| {
        let mut v: Vec<String> = Vec::new();
        if sandbox {
            v.push("--sandbox".into());
            v.extend(extra.iter().cloned());
        }
        if net {
            v.push("--allow-net".into());
        }
        v
    };
    let run_probe = |sandbox: bool, net: bool| {
        let a = args(sandbox, net);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = run(
            &img,
            &a,
            &[
                "python3",
                "-c",
                probe,
                host_file.to_str().unwrap(),
                written.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(
        run_probe(false, false),
        "raw openat: ok\nlibc open: ok\nhost write: ok\ninet socket: ok\nunix socketpair: ok\n"
    );
    std::fs::remove_file(&written).unwrap();
    assert_eq!(
        run_probe(true, false),
        "raw openat: EACCES\nlibc open: EACCES\nhost write: EACCES\ninet socket: EPERM\nunix socketpair: ok\n"
    );
    // A named UNIX socket on the host is out of reach too, and so is the
    // terminal's input queue: seccomp refuses TIOCSTI before the kernel
    // looks at the descriptor (outside, it would say ENOTTY here).
    let sock = dir.path().join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let probe2 = r#"
import errno, fcntl, socket, sys, termios
try:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("unix connect: ok")
except OSError as e: print("unix connect:", errno.errorcode[e.errno])
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("tiocsti: ok")
except OSError as e: print("tiocsti:", errno.errorcode[e.errno])
"#;
    let a = args(true, false);
    let mut a: Vec<&str> = a.iter().map(String::as_str).collect();
    a.push("--");
    let out = Command::new(ULFS)
        .arg("run")
        .arg(&img)
        .args(&a)
        .args(["python3", "-c", probe2, sock.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "unix connect: EPERM\ntiocsti: EPERM\n",
        "{}",
        text(&out.stderr)
    );
    drop(listener);
    assert!(!written.exists(), "the sandbox wrote the host");
    assert!(run_probe(true, true).contains("inet socket: ok"));

    // python3 and sqlite3 fully inside, on the image.
    let a = args(true, false);
    let mut a: Vec<&str> = a.iter().map(String::as_str).collect();
    a.push("--");
    let script = r#"
set -e
python3 -c '
import os, shutil, sqlite3, tempfile
os.makedirs("/ulfs/p/q", exist_ok=True)
open("/ulfs/p/q/f", "w").write("data")
shutil.copytree("/ulfs/p", "/ulfs/p2")
with tempfile.NamedTemporaryFile(dir=None) as t:
    print("tmp in the image:", t.name.startswith("/ulfs/tmp/"))
db = sqlite3.connect("/ulfs/p/db")
db.execute("create table t(a)")
db.executemany("insert into t values(?)", [(i,) for i in range(1000)])
db.commit()
print(sorted(os.listdir("/ulfs/p2/q")), db.execute("select sum(a) from t").fetchone())
'
sqlite3 /ulfs/p/db 'create index ia on t(a); vacuum; pragma integrity_check; select count(*) from t;'
"#;
    let out = Command::new(ULFS)
        .arg("run")
        .arg(&img)
        .args(&a)
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "tmp in the image: True\n['f'] (499500,)\nok\n1000\n",
        "{}",
        text(&out.stderr)
    );
    assert_clean(&img);
}

/// Programs started by programs: os.system and os.popen (glibc spawns
/// their shell internally), subprocess (fork or vfork and exec), a shell
/// pipeline and a working directory inside the image passed on.
#[test]
fn started_programs_agree_with_tmpfs() {
    started_programs_agree_with_tmpfs_in(false);
}

#[test]
fn started_programs_agree_with_tmpfs_through_a_server() {
    started_programs_agree_with_tmpfs_in(true);
}

fn started_programs_agree_with_tmpfs_in(served: bool) {
    let script = r#"
set -e
cd "$1"
python3 - <<'EOF'
import os, subprocess
open("a", "w").write("from python\n")
print(os.system("cat a && echo from-sh > b"))
print(open("b").read().strip())
print(subprocess.run(["cat", "a", "b"], capture_output=True, text=True).stdout.split())
os.mkdir("d")
print(subprocess.run("pwd | sed 's|.*/||'; ls", shell=True, cwd="d", capture_output=True, text=True).stdout.split())
with os.popen("ls") as p:
    print(p.read().split())
out = subprocess.run(["sh", "-c", "seq 1 500 | sort -n | tail -n 3"], capture_output=True, check=True)
open("c", "wb").write(out.stdout)
print(subprocess.run(["cat", "c"], capture_output=True, text=True).stdout.split())
EOF
"#;
    same_as_tmpfs_with(script, "64M", served);
}

/// A program that closes "all" its descriptors (closerange, closefrom,
/// close in a loop) must not close the library's: the image stays mapped,
/// locked against a second writer, and committed at exit. (Found by the
/// IO-safety check of a debug build: the image file's descriptor had been
/// closed under the library, dropping the image lock.)
#[test]
fn closing_every_descriptor_keeps_the_image() {
    let (_d, img) = image();
    let script = r#"
import fcntl, os, sys
open("/ulfs/a", "w").write("before")
os.closerange(3, 1 << 16)
for fd in range(3, 2048):
    try:
        os.close(fd)
    except OSError:
        pass
open("/ulfs/b", "w").write("after")
other = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("image lock lost")
except BlockingIOError:
    print("image lock held")
print(sorted(os.listdir("/ulfs")))
"#;
    let out = run(&img, &[], &["python3", "-c", script, img.to_str().unwrap()]);
    assert_eq!(
        text(&out.stdout),
        "image lock held\n['a', 'b']\n",
        "{}",
        text(&out.stderr)
    );
    assert!(out.status.success());
    let cat = ulfs(&["cat", img.to_str().unwrap(), "/a", "/b"]);
    assert_eq!(text(&cat.stdout), "beforeafter");
    assert_clean(&img);
}

/// Another program renames or removes the shell's working directory
/// while the shell has let go of the image: the shell's working directory
/// follows the directory (by inode) or is gone; it never becomes the
/// image's root (where `rm -f *` used to delete the wrong files).
#[test]
fn working_directory_moved_or_removed_by_another_program() {
    let script = r#"
set -e
cd "$1"
echo precious > precious.txt
mkdir -p work/tmp
echo s > work/tmp/scratch
cd work/tmp
mv "$1/work" "$1/work.old"
ls
rm -f *
cd "$1"
ls -R
mkdir gone
cd gone
rm -rf "$1/gone"
touch new 2>/dev/null || echo "touch: no such directory"
/bin/pwd >/dev/null 2>&1 || echo "pwd: no such directory"
cd "$1"
ls
"#;
    same_as_tmpfs(script);
}

/// execl, execlp and execle (variadic, so glibc's reach execve out of the
/// library's sight): what the program wrote before the exec is committed
/// and seen by the new program.
#[test]
fn execl_family_commits_first() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_execl");
    let b = bin.display();
    let script = format!(
        "set -e\n{b} \"$1\" l\n{b} \"$1\" lp\n{b} \"$1\" le\n{b} \"$1\" many | wc -l\nls \"$1\" | wc -l\n"
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(out.contains("written-before-exec-le"), "{out}");
    assert!(out.contains("\n30\n"), "{out}");
}

/// `/dev/fd/N`, `/proc/self/fd/N` and `/dev/stdout` naming an image
/// descriptor reopen the image file (the kernel would open the
/// placeholder, /dev/null, and the data would be lost).
#[test]
fn proc_fd_paths_reopen_image_files() {
    let script = r#"
set -e
cd "$1"
exec 3>out3
echo direct >&3
echo via-devfd > /dev/fd/3
echo appended >> /dev/fd/3
exec 3>&-
cat out3
python3 - <<'EOF'
import os
fd = os.open("p", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"abc")
with open("/proc/self/fd/%d" % fd) as f:
    print(repr(f.read()))
with open("/dev/fd/%d" % fd, "a") as f:
    f.write("def")
os.dup2(fd, 1)
with open("/dev/stdout", "w") as f:
    f.write("x")
os.close(1)
print(repr(open("p").read()), file=__import__("sys").stderr)
EOF
"#;
    same_as_tmpfs(script);
}

/// The standard streams on image files, as a C program uses them
/// (tests/c/run_std_streams.c): stdio after dup2 onto 1 and 2 and back,
/// freopen of stdout and stdin, a child started with the file as its
/// standard output (one offset shared with the parent), _exit in a child,
/// fclose(stdout).
#[test]
fn standard_streams_agree_with_tmpfs() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_std_streams");
    let script = format!("set -e\nmkdir \"$1/std\"\n{} \"$1/std\"\n", bin.display());
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(
        out.contains("child: [parent\nchild-sh\n/\nparent again\n]"),
        "{out}"
    );
}

/// posix_spawn file actions naming image files (tests/c/run_spawn_actions.c):
/// dup2 of an image descriptor onto the child's standard streams (one
/// offset shared with the parent), addopen of an image path (absolute and
/// relative), an addopen that fails, addclose, and a host addopen. Before,
/// glibc carried them out in the child out of the library's sight: the
/// child wrote to the placeholder (EBADF) or the kernel found no path.
#[test]
fn spawn_file_actions_agree_with_tmpfs() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_spawn_actions");
    let script = format!("set -e\nmkdir \"$1/sa\"\n{} \"$1/sa\"\n", bin.display());
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(
        out.contains("shared: [head\nfrom the child\ntail\n]"),
        "{out}"
    );
    assert!(out.contains("out: [one\nline two\n]"), "{out}");
}

/// SQLite in WAL mode from two processes at once: the processes of a run
/// share no mapped memory, so the second process's mapping of the WAL
/// index is refused (ENODEV, said on stderr) and its statement fails
/// with an error, never silently: every row is either stored or reported
/// failed (before, rows were lost with no error).
#[test]
fn concurrent_wal_writers_fail_loudly_never_silently() {
    let (_d, img) = image();
    let script = r#"
cd /ulfs
sqlite3 db 'pragma journal_mode=wal; create table t(a, b);' > /dev/null
for w in 0 1; do
  (for j in 1 2 3 4 5 6 7 8 9 10; do
     sqlite3 -cmd '.timeout 60000' db "insert into t values($w, $j);" 2>&1 | grep -c Error || true
   done) > "errors$w" &
done
wait
e=0; for n in $(cat errors0 errors1); do e=$((e + n)); done; echo "errors $e"
sqlite3 db 'select count(*) from t; pragma integrity_check;'
"#;
    let out = run(&img, &[], &["bash", "-c", script]);
    let stdout = text(&out.stdout);
    let errors: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("errors "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}{}", text(&out.stderr)));
    let rows: u32 = stdout
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}{}", text(&out.stderr)));
    assert_eq!(rows + errors, 20, "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with("ok\n"), "{stdout}");
    assert_clean(&img);
}

/// A process holding the image that waits on a condition variable
/// (`pthread_cond_wait`, `pthread_cond_timedwait`), a semaphore
/// (`sem_clockwait`, what python's locks use) or in the open of a FIFO,
/// for a child that must first write into the image
/// (tests/c/run_thread_waits.c): the wait lets the image go to the child
/// (before, the child failed with EIO after 10 s, and the FIFO waited on
/// itself).
#[test]
fn waits_on_threads_and_fifos_let_the_image_go() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_thread_waits");
    let script = format!(
        "set -e\nh=$(mktemp -d)\nmkdir \"$1/w\"\n{} \"$1/w\" \"$h\"\nrm -rf \"$h\"\n",
        bin.display()
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(out.contains("sem: child exit 0, wrote [sem]"), "{out}");
    assert!(out.contains("fifo read [through]"), "{out}");
}

/// Record locks and flock between the processes of a run
/// (tests/c/run_locks.c): a child meets its parent's POSIX lock (EAGAIN,
/// F_GETLK naming the parent) and waits for it with F_SETLKW; flock and
/// fcntl locks of one process keep another out; a lock goes when its
/// process exits or is killed; POSIX locks survive an exec. Then what
/// depends on it: two `flock(1)` commands one after the other, and four
/// loops of sqlite3 inserting into one database at once (before, each
/// process saw only its own locks: inserts were lost and sqlite3 reported
/// disk I/O errors).
#[test]
fn locks_between_processes_agree_with_tmpfs() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_locks");
    let script = format!(
        r#"set -e
mkdir "$1/c" "$1/sh"
{} "$1/c"
cd "$1/sh"
: > order
flock lk -c 'sleep 0.3; echo first >> order' &
sleep 0.1
flock lk -c 'echo second >> order'
wait
cat order
sqlite3 db 'create table t(x)'
for i in 1 2 3 4; do
  (for j in 1 2 3 4 5 6 7 8 9 10; do sqlite3 -cmd '.timeout 60000' db "insert into t values($i)"; done) &
done
wait
sqlite3 db 'select x, count(*) from t group by x; pragma integrity_check'
"#,
        bin.display()
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(
        out.contains("log: [parent unlocks\nchild has the lock\n]"),
        "{out}"
    );
    assert!(
        out.contains("F_SETLKW interrupted while trying: -1 Interrupted system call"),
        "{out}"
    );
    assert!(
        out.contains("F_SETLKW with an SA_RESTART handler: 0"),
        "{out}"
    );
    assert!(
        out.contains("first\nsecond\n1|10\n2|10\n3|10\n4|10\nok"),
        "{out}"
    );
}

/// Threads of one process fork while other threads use image descriptors
/// (tests/c/run_thread_forks.c): a fork hands the image over and every
/// descriptor is opened again at the next mount, possibly between another
/// thread's look-up of its descriptor and its use. No call fails (before,
/// a few calls a run failed with EBADF). Three runs, each against tmpfs.
#[test]
fn threads_forking_while_others_use_descriptors() {
    let (dir, _img) = image();
    let bin = compile_c(dir.path(), "run_thread_forks");
    let script = format!(
        "set -e\nfor r in 1 2 3; do mkdir \"$1/r$r\"; {} \"$1/r$r\"; done\n",
        bin.display()
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert_eq!(out.matches("failures: 0, bytes: 96000").count(), 3, "{out}");
}

/// The variadic output calls on image files (tests/c/run_printf.c):
/// dprintf and vdprintf on a descriptor, fwprintf and vfwprintf on a
/// stream, wprintf on a standard output that is an image file; plain and
/// with _FORTIFY_SOURCE, whose `__*_chk` forms are separate symbols.
#[test]
fn printf_family_agrees_with_tmpfs() {
    let (dir, _img) = image();
    let plain = compile_c_with(dir.path(), "run_printf", "printf_plain", &["-O1"]);
    let fortified = compile_c_with(
        dir.path(),
        "run_printf",
        "printf_fortified",
        &["-O2", "-D_FORTIFY_SOURCE=2"],
    );
    let script = format!(
        "set -e\nmkdir \"$1/p\" \"$1/f\"\n{} \"$1/p\"\n{} \"$1/f\"\n",
        plain.display(),
        fortified.display()
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(
        out.contains("d.txt: 30028 bytes, starts [dp-42-3.50-z|00007 f]"),
        "{out}"
    );
    assert!(
        out.contains("child: 0\no.txt: [child wprintf 5 \u{e9}t\u{e9}\n]"),
        "{out}"
    );
}

/// What shells do with redirections, in bash and in dash: builtins
/// writing into image files (the standard stream follows descriptor 1
/// there), programs started with image files as their standard streams
/// (the descriptors cross the exec), group commands and `sh -c` whose
/// commands share one offset, `exec` redirections kept across many
/// commands, here-documents, subshells and command substitution, and
/// python's subprocess writing into a file the parent holds open.
#[test]
fn shell_redirections_agree_with_tmpfs() {
    let body = r#"
cd "$1"
echo hello > f; printf '%s-%d\n' x 5 >> f; cat f
while read -r l; do echo "got $l"; done < f
exec 3> log; echo one >&3; ls -d / >&3; echo two >&3; exec 3>&-; cat log
exec 5>&1 > out2; echo redirected; ls -d /; echo after; exec 1>&5 5>&-; cat out2
{ echo a; ls -d /; echo b; } > g; cat g
sh -c 'echo one; ls -d /; echo two' > h; echo x >> h; cat h
( echo sub1; ls -d /; echo sub2 ) > s; x=$(cat s); echo "[$x]"
seq 1 20000 > big; sort -n -r < big > sorted; head -n 2 sorted; wc -l < sorted
seq 1 500 | sort -n -r | head -n 3 > piped; cat piped
for i in 1 2 3; do echo "n$i" >> loop; ls -d / >> loop; done; cat loop
cat <<END > here
heredoc line
END
cat here
ls /nonexistent-dir 2> e || true; sed 's/^ls: //' e
echo both > b 2>&1; ls -d / /nonexistent-dir >> b 2>&1 || true; sed 's/^ls: //' b
python3 -c 'import sys; print("py", sys.stdout.fileno())' > pyout; cat pyout
python3 - <<'PY'
import subprocess
with open("sub", "w") as f:
    f.write("head\n"); f.flush()
    subprocess.run(["echo", "child"], stdout=f, check=True)
    subprocess.run("echo shell; ls -d /", shell=True, stdout=f, check=True)
    f.write("tail\n")
print(open("sub").read(), end="")
PY
"#;
    let script = format!(
        "set -e\nmkdir \"$1/bash\" \"$1/dash\"\nbash -e -s -- \"$1/bash\" <<'BASH'\n{body}\nBASH\nsh -e -s -- \"$1/dash\" <<'DASH'\n{body}\nDASH\n"
    );
    let (_d, _img, out) = same_as_tmpfs(&script);
    assert!(out.contains("got x-5"), "{out}");
    assert!(out.contains("a\n/\nb\n"), "{out}");
}

/// Pipelines whose processes all use the image at once take turns on it
/// (one holds it at a time): a process holding it never blocks on a pipe
/// while another waits for it, in its own reads and writes and in stdio
/// on its standard streams. Every stage below reads or writes the image
/// while the others run, with more data than a pipe holds. A stage killed
/// by SIGPIPE keeps what it wrote to the image (committed before the
/// signal is delivered). Wide-character stdio (`rev`) on pipes and image
/// files, and a non-blocking pipe read while holding the image.
#[test]
fn pipelines_on_the_image_agree_with_tmpfs() {
    let script = r#"
set -e
cd "$1"
seq 1 100000 > big
cat big | sort -n -r > sorted; head -n 2 sorted; wc -l < sorted
sort -n big | uniq | tail -n 1 > last; cat last
grep 7 big | tee copy > /dev/null; wc -l < copy
sed s/1/x/ big | tee copy2 | wc -l; wc -l < copy2
cat big | gzip -c | tee big.gz | gzip -dc | tee copy3 | sha256sum
cmp big copy3 && echo same
gzip -dc < big.gz | awk '{ s += $1 } END { print s }' > sum; cat sum
tar cf - big copy | tar xf - -O | wc -c
python3 -c 'import sys; [print(l, end="") for l in open("big")]' | python3 -c '
import sys
n = 0
with open("py", "w") as f:
    for l in sys.stdin:
        f.write(l); n += 1
print(n)'
cmp big py && echo same-py
python3 -c '
import signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
cut = open("cut", "w")
for line in open("big"):
    cut.write(line); cut.flush()
    sys.stdout.write(line); sys.stdout.flush()
' | head -n 1
[ -s cut ] && cmp -n "$(wc -c < cut)" big cut && echo what-the-writer-wrote-before-sigpipe-is-kept
printf 'abc\nh\303\251llo\n' > wide
echo abc | rev; rev wide; rev < wide | cat; cat wide | rev > wide-rev; cat wide-rev
python3 - <<'EOF'
import errno, os
held = open("held", "w")
r, w = os.pipe()
os.set_blocking(r, False)
try:
    os.read(r, 1)
except BlockingIOError:
    print("non-blocking read of an empty pipe: EAGAIN")
EOF
"#;
    same_as_tmpfs(script);
}

/// A last path component `.` or `..` reaches the image as Linux would see
/// it (not folded away): `rmdir d/.` is EINVAL, `unlink d/.` EISDIR,
/// `rename d/. e` EBUSY; and `O_TMPFILE`, which ulfs refuses as a file
/// system without unnamed files does, sends python's `TemporaryFile` to
/// its fallback.
#[test]
fn last_dot_components_and_o_tmpfile_agree_with_tmpfs() {
    let script = r#"
set -e
python3 - "$1" <<'EOF'
import errno, os, sys, tempfile
d = sys.argv[1]
os.mkdir(f"{d}/x"); os.mkdir(f"{d}/x/y")
def t(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
t("rmdir x/y/.", lambda: os.rmdir(f"{d}/x/y/."))
t("rmdir x/y/..", lambda: os.rmdir(f"{d}/x/y/.."))
t("unlink x/.", lambda: os.unlink(f"{d}/x/."))
t("rename x/y/. z", lambda: os.rename(f"{d}/x/y/.", f"{d}/z"))
t("rename x/y x/y/..", lambda: os.rename(f"{d}/x/y", f"{d}/x/y/.."))
t("mkdir x/.", lambda: os.mkdir(f"{d}/x/."))
t("mkdir x/y/..", lambda: os.mkdir(f"{d}/x/y/.."))
t("stat x/y/./", lambda: os.stat(f"{d}/x/y/./"))
t("rmdir x/y/", lambda: os.rmdir(f"{d}/x/y/"))
t("O_TMPFILE read-only", lambda: os.open(f"{d}/x", os.O_TMPFILE | os.O_RDONLY))
t("O_TMPFILE in a file", lambda: os.open(f"{d}/x/.", os.O_TMPFILE | os.O_RDWR | os.O_CREAT))
with tempfile.TemporaryFile(dir=f"{d}/x") as f:
    f.write(b"temporary"); f.seek(0); print(f.read())
print(sorted(os.listdir(d)), sorted(os.listdir(f"{d}/x")))
EOF
"#;
    same_as_tmpfs(script);
}

/// The library's own descriptors (the image file, the run's shared
/// memory, the placeholder base, all at 1000 or above) are not open for
/// the program: reading, writing, duplicating or saving one with
/// `F_DUPFD` (as bash does for `exec 1001>file`) is EBADF, so no copy of
/// the locked image file escapes into the program. And handed-over
/// descriptor notes a program leaves in the environment of a program it
/// starts some other way never make a host descriptor an image file.
#[test]
fn library_descriptors_and_stray_notes_are_not_the_programs() {
    let (_d, img) = image();
    let script = r#"
import errno, fcntl, os, subprocess
open("/ulfs/s", "w").write("secret")
lib = [fd for fd in range(1000, 1010) if os.path.exists(f"/proc/self/fd/{fd}")]
print("library descriptors:", len(lib) >= 2)
for fd in lib:
    for name, call in [("read", lambda: os.read(fd, 1)), ("write", lambda: os.write(fd, b"x")),
                       ("dup", lambda: os.dup(fd)), ("dup2", lambda: os.dup2(fd, 50)),
                       ("F_DUPFD", lambda: fcntl.fcntl(fd, fcntl.F_DUPFD, 10)),
                       ("pwrite", lambda: os.pwrite(fd, b"x", 0)), ("ftruncate", lambda: os.ftruncate(fd, 0))]:
        try:
            call(); print(fd, name, "worked")
        except OSError as e:
            if e.errno != errno.EBADF: print(fd, name, errno.errorcode[e.errno])
st = os.stat("/ulfs/s")
os.environ["ULFS_RUN_FDS"] = f"{os.getpid()}/0:0:{st.st_ino}:0:0:0:0:-"
os.dup2(os.open("/etc/hostname", os.O_PATH), 0)
r = subprocess.run("cat", shell=True, capture_output=True)
os.system("cat > /ulfs/got 2>/dev/null")
print("cat of a stray note:", r.stdout != b"secret" and open("/ulfs/got").read() != "secret")
print(open("/ulfs/s").read())
"#;
    let out = run(&img, &[], &["python3", "-c", script]);
    assert_eq!(
        text(&out.stdout),
        "library descriptors: True\ncat of a stray note: True\nsecret\n",
        "{}",
        text(&out.stderr)
    );
    let bash = run(
        &img,
        &[],
        &[
            "bash",
            "-c",
            "exec 9>/ulfs/h9; exec 1001>/dev/null; echo b >&1000; echo in-h9 >&9; cat /ulfs/h9",
        ],
    );
    assert_eq!(text(&bash.stdout), "in-h9\n", "{}", text(&bash.stderr));
    assert_clean(&img);
}

/// A process that holds the image and then waits (for a child, on a
/// pipe read through stdio, in `poll` or a sleep) hands it over to the
/// processes it waits for: bash's `&` and `wait`, python's `Popen.wait`
/// and `multiprocessing.Pool`, a python process holding a shared
/// mapping while its child writes the image, `system` after a `chdir`
/// into the image (its command works there, not on the host), `make -j3` and `make > log`,
/// C `popen` read and written with stdio (more than a pipe holds, while
/// the program writes an image file and the command reads one), and
/// `flock FILE cmd` (a lock
/// held across the hand-over stays held in its process).
#[test]
fn waiting_processes_hand_the_image_over_agree_with_tmpfs() {
    waiting_processes_hand_the_image_over_agree_with_tmpfs_in(false);
}

#[test]
fn waiting_processes_hand_the_image_over_agree_with_tmpfs_through_a_server() {
    waiting_processes_hand_the_image_over_agree_with_tmpfs_in(true);
}

fn waiting_processes_hand_the_image_over_agree_with_tmpfs_in(served: bool) {
    let (dir, _img) = image();
    let popen = compile_c(dir.path(), "run_popen");
    let script = format!(
        r#"
set -e
cd "$1"
sort /etc/passwd > sorted & [ -d . ] && echo isdir; wait; wc -l < sorted
(sleep 0.2; seq 1 300 > list) & echo go > started; wait; wc -l < list
python3 - <<'EOF'
import multiprocessing, subprocess, time
p = subprocess.Popen(["sh", "-c", "sleep 0.2; echo child > c"])
open("p", "w").write("parent")
print(p.wait(), open("c").read().strip(), open("p").read())
time.sleep(0.1)
import mmap
with open("mapped", "wb") as f:
    f.write(b"0123456789" * 100)
mf = open("mapped", "r+b")
mm = mmap.mmap(mf.fileno(), 0)
mm[0:5] = b"HELLO"
mm.flush()
subprocess.run("echo mapped-and-handed-over > mc", shell=True, check=True)
print(open("mc").read().strip(), mm[0:10])
mm.close()
mf.close()
import os
os.mkdir("sysd")
os.chdir("sysd")
os.system("echo via-system > rel; basename $(pwd)")
print(open("rel").read().strip())
os.chdir("..")
def work(i):
    with open(f"w{{i}}", "w") as f:
        f.write(str(i * i))
    return open(f"w{{i}}").read()
if __name__ == "__main__":
    with multiprocessing.Pool(3) as pool:
        print(pool.map(work, range(6)))
EOF
mkdir m
printf 'all: a b c\na:\n\tsleep 0.2; seq 1 100 > a\nb:\n\tsleep 0.1; seq 1 200 > b\nc:\n\techo c > c\n' > m/Makefile
make -s -C m -j3; cat m/c; wc -l < m/a; wc -l < m/b
rm m/a m/b m/c; make -C m --no-print-directory > m/log 2>&1; sed 's/;.*//' m/log
seq 1 2000 > in
{popen}
wc -l < out
flock lockfile -c "echo inside-the-lock > locked"; cat locked
"#,
        popen = popen.display()
    );
    same_as_tmpfs_with(&script, "64M", served);
}

/// Two sqlite3 processes, each its own `ulfs run --server`, write one
/// database in WAL mode at once through one server: each keeps the
/// database open (its WAL index, the `-shm` file, mapped shared and
/// writable) while inserting 200 rows in as many transactions, waiting
/// for the other's locks (`.timeout`). Every row is there, the integrity
/// check passes, and the database is still in WAL mode.
#[test]
fn two_sqlite3_processes_share_a_wal_database_through_a_server() {
    let (_d, img) = image();
    let server = Server::start(&img);
    let out = server.run(&[
        "sqlite3",
        "/ulfs/db",
        "pragma journal_mode=wal; create table t(w, j);",
    ]);
    assert_eq!(text(&out.stdout), "wal\n", "{}", text(&out.stderr));
    let writers: Vec<std::process::Child> = (0..2)
        .map(|w| {
            let sql: String = (1..=200)
                .map(|j| format!("insert into t values({w}, {j});\n"))
                .collect();
            let script =
                format!("printf '%s' '{sql}' | sqlite3 -bail -cmd '.timeout 60000' /ulfs/db");
            Command::new(ULFS)
                .arg("run")
                .arg("--server")
                .arg(&server.socket)
                .args(["--", "sh", "-c", &script])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    let out = server.run(&[
        "sqlite3",
        "/ulfs/db",
        "select count(*), count(distinct w || '-' || j), sum(w) from t; pragma integrity_check; pragma journal_mode;",
    ]);
    assert_eq!(
        text(&out.stdout),
        "400|400|200\nok\nwal\n",
        "{}",
        text(&out.stderr)
    );
    server.stop();
    assert_clean(&img);
}

/// `make -j2` builds a small C project that lives on the image, through
/// a server: the compiler, assembler and linker of two jobs at once read
/// and write the image (sources in, objects and the program out), as on
/// tmpfs.
#[test]
fn make_j2_builds_a_c_project_on_the_image_through_a_server() {
    let script = r#"
set -e
mkdir "$1/proj"
cd "$1/proj"
cat > util.h <<'X'
int twice(int);
int square(int);
X
cat > main.c <<'X'
#include <stdio.h>
#include "util.h"
int main(void) { printf("%d %d\n", twice(21), square(12)); return 0; }
X
echo 'int twice(int x) { return 2 * x; }' > twice.c
echo 'int square(int x) { return x * x; }' > square.c
printf 'app: main.o twice.o square.o\n\tcc -o app main.o twice.o square.o\n%%.o: %%.c util.h\n\tcc -O1 -c -o $@ $<\nclean:\n\trm -f app *.o\n' > Makefile
make -j2 -s
cp app "$2/app"
"$2/app"
ls
touch square.c
make -j2 | sort
"$2/app"
make -s clean
ls
"#;
    same_as_tmpfs_served(script);
}

/// `make -C DIR` started by `ulfs run` itself, DIR in the image: every
/// command of the recipe runs (make crashed at its second: the library's
/// `posix_spawn` changed the environment make was passing to it).
#[test]
fn make_c_into_the_image_runs_every_recipe_line() {
    let (_d, img) = image();
    let setup = "mkdir /ulfs/m; printf 'all:\\n\\techo one\\n\\techo two\\n\\techo three\\n' > /ulfs/m/Makefile";
    let want = "echo one\none\necho two\ntwo\necho three\nthree\n";
    let out = run(&img, &[], &["sh", "-c", setup]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(
        &img,
        &[],
        &["make", "--no-print-directory", "-C", "/ulfs/m"],
    );
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
    assert!(out.status.success(), "{:?}", out.status);
    let server = Server::start(&img);
    let out = server.run(&["make", "--no-print-directory", "-C", "/ulfs/m"]);
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
    assert!(out.status.success(), "{:?}", out.status);
    server.stop();
    assert_clean(&img);
}

/// Paths relative to a host directory descriptor of an ancestor of the
/// prefix reach the image (rsync's receiver opens `/` and works from it):
/// mkdir, open, stat, rename with two such descriptors, unlink, rmdir.
#[test]
fn paths_from_a_parents_descriptor_reach_the_image() {
    parents_descriptor_in(false);
}

#[test]
fn paths_from_a_parents_descriptor_reach_the_image_through_a_server() {
    parents_descriptor_in(true);
}

fn parents_descriptor_in(served: bool) {
    let script = r#"
set -e
python3 - "$1" <<'EOF'
import os, sys
parent, name = os.path.split(sys.argv[1])
fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
os.mkdir(name + "/viafd", dir_fd=fd)
f = os.open(name + "/viafd/f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
os.write(f, b"through a parent's descriptor\n")
os.close(f)
print(os.stat(name + "/viafd/f", dir_fd=fd).st_size, os.listdir(sys.argv[1] + "/viafd"))
os.rename(name + "/viafd/f", name + "/viafd/g", src_dir_fd=fd, dst_dir_fd=fd)
print(open(sys.argv[1] + "/viafd/g").read(), end="")
os.unlink(name + "/viafd/g", dir_fd=fd)
os.rmdir(name + "/viafd", dir_fd=fd)
print(os.path.exists(sys.argv[1] + "/viafd"))
EOF
"#;
    same_as_tmpfs_with(script, "64M", served);
}

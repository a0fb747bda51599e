//! What `ulfs run --server` holds for a program beyond its own
//! descriptors. Descriptors it keeps for itself (a shared mapping's own
//! descriptor, the one a `truncate` through `/proc/self/fd/N` opens) close
//! without ending the process's POSIX locks: on Linux neither a mapping's
//! end nor a truncate by path closes a descriptor, so a lock the program
//! holds stays held (compared with the kernel on a host directory). And
//! the server's copy of a child whose fork failed is let go at once.

use std::path::Path;
use std::process::Command;
use ulfs_testkit::kernel_diff::{Diff, Server, new_image, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// `sys.argv[1]`: the directory to work in.
const SCRIPT: &str = r#"
import ctypes, fcntl, mmap, os, sys
f = os.path.join(sys.argv[1], 'locked')
fd = os.open(f, os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'x' * 8192)
def held():
    # Another process's lock of the whole file is refused while ours holds.
    pid = os.fork()
    if pid == 0:
        g = os.open(f, os.O_RDWR)
        try:
            fcntl.lockf(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os._exit(1)
        except OSError:
            os._exit(0)
    return os.waitpid(pid, 0)[1] == 0
fcntl.lockf(fd, fcntl.LOCK_EX)
print('locked', held())
os.truncate('/proc/self/fd/%d' % fd, 4096)
print('after a truncate through the link', held(), os.stat(f).st_size)
# libc's mmap and munmap (Python's mmap module keeps a dup of the
# descriptor, whose close ends the lock on the kernel too).
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
assert p not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
ctypes.memmove(p, b'y', 1)
assert libc.munmap(p, 4096) == 0
print('after munmap', held(), open(f, 'rb').read(1))
os.close(fd)
print('after close', held())
# A flock belongs to the description, which a mapping holds: it goes with
# the mapping once the descriptors are closed.
import subprocess
fd = os.open(f, os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
p = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
os.close(fd)
free = lambda: subprocess.run(['flock', '-n', f, 'true']).returncode == 0
print('flock with the mapping', free())
assert libc.munmap(p, 4096) == 0
print('flock after munmap', free())
"#;

#[test]
fn a_programs_locks_outlive_the_descriptors_the_library_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = Diff {
        ulfs: Path::new(ULFS),
        argv: &script("python3", SCRIPT),
        wrapper: &[],
        with_stderr: false,
    }
    .agree(dir.path(), true);
    assert!(kernel.contains("after munmap True"), "{kernel}");
}

/// A fork that fails (the user's process limit) leaves nothing held: the
/// server's copy of the would-be child is let go at once (CANCEL_TOKEN),
/// so a `flock` ends with the program's close, as on Linux, instead of
/// 30 s later when the unadopted token expires.
#[test]
fn a_failed_fork_holds_no_lock() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return ulfs_testkit::skip::skip(
            "a_failed_fork_holds_no_lock",
            "needs root, to run the program as another user whose process limit applies",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let img = new_image(Path::new(ULFS), dir.path(), "img");
    let socket = dir.path().join("sock");
    let server = Server::start(Path::new(ULFS), &img, &socket, &["--socket-mode", "666"]);
    ulfs_testkit::cli::ok(
        Path::new(ULFS),
        &[
            "run",
            "--server",
            socket.to_str().unwrap(),
            "--",
            "chmod",
            "777",
            "/ulfs",
        ],
    );
    let script = r#"
import fcntl, os, resource, subprocess
fd = os.open('/ulfs/f', os.O_CREAT | os.O_RDWR, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
resource.setrlimit(resource.RLIMIT_NPROC, (0, hard))
try:
    os.fork()
    print('forked')
except OSError as e:
    print('fork failed', e.errno == 11)
resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
os.close(fd)
print('free after close', subprocess.run(['flock', '-n', '/ulfs/f', 'true']).returncode == 0)
"#;
    let out = Command::new("setpriv")
        .args([
            "--reuid=4343",
            "--regid=4343",
            "--clear-groups",
            ULFS,
            "run",
            "--server",
        ])
        .arg(&socket)
        .args(["--", "python3", "-c", script])
        .output()
        .unwrap();
    server.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "fork failed True\nfree after close True\n"
    );
}

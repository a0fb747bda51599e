//! Offsets through `ulfs run --server` (docs/SERVE.md "Offsets"): a client
//! keeps the offset of a description only it has, and gives it back to the
//! server before a fork or an exec shares it. Unmodified programs that
//! share offsets across processes (a shell's redirections, `head` leaving
//! its input where it stopped, a forked child reading on where its parent
//! stopped) get, line for line, what the kernel gives them in a host
//! directory.

use std::path::Path;
use ulfs_testkit::kernel_diff::{Diff, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// Shared offsets, by a shell and its children and by a forked Python;
/// `$1` is the directory to work in.
const SCRIPT: &str = r#"
set -e
cd "$1"
printf '0123456789abcdefghij' > f
{ head -c 3; cat; } < f; echo
{ head -c 5 > /dev/null; head -c 2; echo; cat; } < f; echo
{ echo one; echo two; sh -c 'echo three'; } > g; cat g
exec 3<> f
head -c 4 <&3; echo
dd bs=1 count=2 <&3 2>/dev/null; echo
echo XY >&3
cat <&3; echo
exec 3>&-
python3 - <<'PY'
import fcntl, os
fd = os.open('f', os.O_RDWR)
os.lseek(fd, 2, os.SEEK_SET)
print(os.read(fd, 3))
dup = os.dup(fd)
pid = os.fork()
if pid == 0:
    print('child', os.read(dup, 2), os.lseek(fd, 0, os.SEEK_CUR), flush=True)
    os.write(fd, b'!')
    os._exit(0)
os.waitpid(pid, 0)
print('parent', os.lseek(fd, 0, os.SEEK_CUR), os.read(fd, 3))
fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
os.lseek(fd, 0, os.SEEK_SET)
os.write(fd, b'@')
print('append', os.lseek(fd, 0, os.SEEK_CUR), os.pread(fd, 40, 0))
w = os.open('w', os.O_CREAT | os.O_WRONLY, 0o644)
os.writev(w, [b'ab', b'cd'])
os.lseek(w, 1, os.SEEK_SET)
pid = os.fork()
if pid == 0:
    os.write(w, b'Z')
    os._exit(0)
os.waitpid(pid, 0)
os.write(w, b'Q')
print('shared writes', open('w', 'rb').read())
# An exec that fails: the process goes on, its offsets right.
e = os.open('f', os.O_RDONLY)
os.read(e, 4)
try:
    os.execv('/nonexistent/program', ['program'])
except OSError:
    pass
os.read(e, 2)
pid = os.fork()
if pid == 0:
    print('after a failed exec, child', os.read(e, 3), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print('after a failed exec', os.lseek(e, 0, os.SEEK_CUR), os.read(e, 2))
r = os.open('f', os.O_RDONLY)
os.lseek(r, 2**63 - 3, os.SEEK_SET)
try:
    print('readv at the end', os.readv(r, [bytearray(2), bytearray(2)]))
except OSError as e:
    print('readv at the end', e.errno)
PY
"#;

#[test]
fn programs_sharing_offsets_through_a_server_agree_with_the_kernel() {
    // tmpfs: offsets up to i64::MAX, as the engine's (ext4 stops lower).
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let kernel = Diff {
        ulfs: Path::new(ULFS),
        argv: &script("sh", SCRIPT),
        wrapper: &[],
        with_stderr: false,
    }
    .agree(dir.path(), false);
    assert!(kernel.contains("shared writes"), "{kernel}");
}

//! The shell `system(3)` and `popen(3)` start inherits every descriptor of
//! the program that is not close-on-exec, image files included, sharing
//! their offsets (crates/ulfs-preload process.rs `shell_token`). Before,
//! in process it got none (`echo` to a standard output in the image said
//! "I/O error") and through a server only 0-2. Compared with the kernel
//! on a host directory, in process and through `ulfs serve`.

use std::path::Path;
use ulfs_testkit::kernel_diff::{Diff, script};

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

#[test]
fn system_and_popen_shells_inherit_image_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    // The files' contents come on standard error.
    let kernel = Diff {
        ulfs: Path::new(ULFS),
        argv: &script("sh", SCRIPT),
        wrapper: &[],
        with_stderr: true,
    }
    .agree(dir.path(), true);
    assert!(kernel.contains("standard output in the image"), "{kernel}");
}

//! Path calls glibc makes with an internal system call (out of the
//! preload library's sight unless it defines the function itself):
//! `mkfifo`, `mkfifoat`, `lchmod`, `futimesat`, and `pathconf`'s statfs.
//! On an image path each acts in the image or fails there; none reaches a
//! host file. (`cd /ulfs &&
//! mkfifo p` made a FIFO named `p` in the host directory `ulfs run` was
//! started from, and said it had succeeded.)

use std::path::Path;
use std::process::Command;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

const SCRIPT: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return 'ok' if r == 0 else errno.errorcode[ctypes.get_errno()]
os.chdir('/ulfs')
open('f', 'w').close()
os.symlink('f', 'link')
print('mkfifo relative', call('mkfifo', b'p', 0o644))
print('mkfifo absolute', call('mkfifo', b'/ulfs/q', 0o644))
print('mkfifoat', call('mkfifoat', -100, b'r', 0o644))
print('lchmod', call('lchmod', b'link', 0o600), oct(os.lstat('link').st_mode), oct(os.stat('f').st_mode))
class Timeval(ctypes.Structure):
    _fields_ = [('sec', ctypes.c_long), ('usec', ctypes.c_long)]
tv = (Timeval * 2)(Timeval(1000, 0), Timeval(2000, 0))
d = os.open('.', os.O_RDONLY)
print('futimesat', call('futimesat', d, b'f', tv), os.stat('f').st_mtime)
ffd = os.open('f', os.O_RDONLY)
tv2 = (Timeval * 2)(Timeval(3000, 0), Timeval(4000, 0))
print('futimesat NULL', call('futimesat', ffd, None, tv2), os.stat('f').st_mtime)
print('mkfifo typed', call('mkfifo', b'typed', 0o100644))
print(sorted(os.listdir('.')))
print('pathconf', os.pathconf('f', 'PC_NAME_MAX'), os.pathconf('/ulfs', 'PC_PATH_MAX'),
      os.fpathconf(d, 'PC_SYMLINK_MAX'), os.pathconf('f', 'PC_FILESIZEBITS') > 32)
try:
    os.pathconf('missing', 'PC_NAME_MAX')
except OSError as e:
    print('pathconf missing', errno.errorcode[e.errno])
"#;

#[test]
fn calls_glibc_makes_internally_stay_in_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs_testkit::cli::ok(Path::new(ULFS), &["mkfs", img.to_str().unwrap(), "16M"]);
    let start = dir.path().join("start");
    std::fs::create_dir(&start).unwrap();
    let out = Command::new(ULFS)
        .args(["run", img.to_str().unwrap(), "--", "python3", "-c", SCRIPT])
        .current_dir(&start)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // lchmod of a symlink: Linux refuses to change a link's mode
    // (EOPNOTSUPP), as the engine does.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "mkfifo relative EPERM\nmkfifo absolute EPERM\nmkfifoat EPERM\n\
         lchmod ENOTSUP 0o120777 0o100644\nfutimesat ok 2000.0\n\
         futimesat NULL ok 4000.0\nmkfifo typed EINVAL\n['f', 'link']\n\
         pathconf 255 4096 4095 True\npathconf missing ENOENT\n"
    );
    let stray: Vec<_> = std::fs::read_dir(&start).unwrap().collect();
    assert!(stray.is_empty(), "files made on the host: {stray:?}");
}

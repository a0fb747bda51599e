//! A path whose last component is `.` or `..` names that entry to the
//! kernel, which refuses to rename, remove or unlink it, while `stat` and
//! `opendir` find the directory it leads to: `a/b/..` is `..` of `a/b`.
//! Relative paths that climb were folded to the directory they land on,
//! so `rename("a/b/..", "x")` from a working directory in the image
//! renamed `a`; and an absolute `/ulfs/a/b/..` climbed twice (it listed
//! the image's root, not `a`). Compared with the kernel, in process and
//! through a server.

use std::path::Path;
use ulfs_testkit::kernel_diff::{Diff, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

const SCRIPT: &str = r#"
import errno, os, sys
os.chdir(sys.argv[1])
os.makedirs('a/b')
open('a/f', 'w').close()
def show(label, call):
    try:
        r = call()
        print(label, 'ok' if r is None else r)
    except OSError as e:
        print(label, errno.errorcode[e.errno])
base = os.getcwd()
for p in ('a/b/..', 'a/b/.', 'a/b/../b/..', 'a/../a/b/..', base + '/a/b/..'):
    show('rename ' + p.replace(base, 'BASE'), lambda: os.rename(p, 'x'))
    show('rmdir ' + p.replace(base, 'BASE'), lambda: os.rmdir(p))
    show('unlink ' + p.replace(base, 'BASE'), lambda: os.unlink(p))
    show('mkdir ' + p.replace(base, 'BASE'), lambda: os.mkdir(p))
    show('list ' + p.replace(base, 'BASE'), lambda: sorted(os.listdir(p)))
    show('same as a ' + p.replace(base, 'BASE'), lambda: os.stat(p).st_ino == os.stat('a').st_ino)
print(sorted(os.listdir('.')), sorted(os.listdir('a')))
"#;

#[test]
fn a_last_dot_or_dotdot_is_never_the_directory_it_folds_to() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = Diff {
        ulfs: Path::new(ULFS),
        argv: &script("python3", SCRIPT),
        wrapper: &[],
        with_stderr: false,
    }
    .agree(dir.path(), true);
    assert!(kernel.contains("rename a/b/.. EBUSY"), "{kernel}");
}

//! A path whose last component is `.` or `..` names that entry to the
//! kernel, which refuses to rename, remove or unlink it, while `stat` and
//! `opendir` find the directory it leads to: `a/b/..` is `..` of `a/b`.
//! Relative paths that climb were folded to the directory they land on,
//! so `rename("a/b/..", "x")` from a working directory in the image
//! renamed `a`; and an absolute `/ulfs/a/b/..` climbed twice (it listed
//! the image's root, not `a`). Compared with the kernel, in process and
//! through a server.
//!
//! And a `..` in the middle of a path into the image is resolved after
//! what comes before it, as the kernel does: folded lexically,
//! `/ulfs/f/../g` found `g` where the kernel says ENOTDIR (`f` is a file),
//! `/ulfs/missing/../g` found it where the kernel says ENOENT, and
//! `/ulfs/ln/..` (a symlink to `a/b`) was the image's root, not `a`.

use std::path::Path;
use ulfs_testkit::kernel_diff::{Diff, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

/// What both scripts start with: into the directory given, a printer of
/// each call's answer (its result, or the errno's name).
const PRELUDE: &str = r#"
import errno, os, sys
os.chdir(sys.argv[1])
def show(label, call):
    try:
        r = call()
        print(label, 'ok' if r is None else r)
    except OSError as e:
        print(label, errno.errorcode[e.errno])
base = os.getcwd()
"#;

/// The transcript of `PRELUDE` + `body` run by python3, which must be the
/// same on the kernel, in process and through a server.
fn agreed(body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    Diff {
        ulfs: Path::new(ULFS),
        argv: &script("python3", &format!("{PRELUDE}{body}")),
        wrapper: &[],
        with_stderr: false,
    }
    .agree(dir.path(), true)
}

const SCRIPT: &str = r#"
os.makedirs('a/b')
open('a/f', 'w').close()
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
    let kernel = agreed(SCRIPT);
    assert!(kernel.contains("rename a/b/.. EBUSY"), "{kernel}");
}

const MIDDLE_SCRIPT: &str = r#"
os.makedirs('a/b')
open('a/f', 'w').close()
open('f', 'w').close()
os.symlink('a/b', 'ln')
same = lambda p, q: os.stat(p).st_ino == os.stat(q).st_ino
for pre in ('', base + '/', 'a/../', 'a/b/../../'):
    name = 'BASE/' if pre == base + '/' else pre
    show('stat ' + name + 'f/../a', lambda: same(pre + 'f/../a', 'a'))
    show('stat ' + name + 'missing/../a', lambda: same(pre + 'missing/../a', 'a'))
    show('stat ' + name + 'f/..', lambda: same(pre + 'f/..', '.'))
    show('list ' + name + 'ln/..', lambda: sorted(os.listdir(pre + 'ln/..')))
    show('same ' + name + 'ln/../f', lambda: same(pre + 'ln/../f', 'a/f'))
    show('mkdir ' + name + 'f/../x', lambda: os.mkdir(pre + 'f/../x'))
    show('open ' + name + 'a/b/../f', lambda: open(pre + 'a/b/../f').close())
os.chdir('a/b')
show('from a/b: ../../f/../a', lambda: same('../../f/../a', '../../a'))
show('from a/b: ../../ln/../f', lambda: same('../../ln/../f', '../f'))
os.chdir(base)
show('rename a/f ln/../g', lambda: os.rename('a/f', base + '/ln/../g'))
print(sorted(os.listdir('.')), sorted(os.listdir('a')))
"#;

#[test]
fn a_dotdot_in_the_middle_is_resolved_after_what_it_follows() {
    let kernel = agreed(MIDDLE_SCRIPT);
    assert!(kernel.contains("stat BASE/f/../a ENOTDIR"), "{kernel}");
    assert!(kernel.contains("list BASE/ln/.. ['b', 'f']"), "{kernel}");
}

//! What a program under `ulfs run` reaches through the kernel descriptor
//! that stands for an image file (its placeholder, crates/ulfs-preload
//! fds.rs) and its `/proc/self/fd/N` link. Calls that follow the link act
//! on the image's file, as the kernel's act on the file a descriptor has
//! open: compared call for call with the kernel on a host directory, in
//! process and through `ulfs serve`. What still reaches the placeholder
//! (calls on the link itself) must never touch a file anyone else uses: it
//! was the host's `/dev/null`, whose mode, owner and times a program
//! running as root changed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use ulfs_testkit::kernel_diff::{Diff, script};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn attributes(p: &Path) -> (u32, u32, u32, i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mode(), m.uid(), m.gid(), m.mtime(), m.atime())
}

#[test]
fn path_calls_through_an_image_descriptor_leave_dev_null_alone() {
    let lib = Path::new(ULFS).with_file_name("libulfs_preload.so");
    assert!(
        lib.is_file(),
        "build the workspace first: {}",
        lib.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs_testkit::cli::ok(Path::new(ULFS), &["mkfs", img.to_str().unwrap(), "16M"]);
    let null = Path::new("/dev/null");
    let before = attributes(null);
    // Every descriptor kind a program holds: O_PATH, read-only, and one
    // dup'ed onto stdin (/dev/stdin).
    let script = r#"
import os
open('/ulfs/x', 'w').write('data')
for flags in (os.O_PATH, os.O_RDONLY):
    fd = os.open('/ulfs/x', flags)
    p = '/proc/self/fd/%d' % fd
    for call in (lambda: os.chmod(p, 0o600), lambda: os.utime(p, (1, 1)),
                 lambda: os.chown(p, 4242, 4242)):
        try:
            call()
        except OSError:
            pass
    os.close(fd)
fd = os.open('/ulfs/x', os.O_RDONLY)
os.dup2(fd, 0)
for call in (lambda: os.chmod('/dev/stdin', 0o600), lambda: os.chown('/dev/stdin', 4242, 4242)):
    try:
        call()
    except OSError:
        pass
print('done')
"#;
    let out = Command::new(ULFS)
        .args(["run", img.to_str().unwrap(), "--", "python3", "-c", script])
        .output()
        .unwrap();
    let after = attributes(null);
    if after != before {
        // Put it back before failing: the machine needs its /dev/null.
        let _ = Command::new("chmod").args(["666", "/dev/null"]).status();
        let _ = Command::new("chown").args(["0:0", "/dev/null"]).status();
        let _ = Command::new("touch").arg("/dev/null").status();
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(after, before, "the host's /dev/null was changed");
}

/// Calls on `/proc/self/fd/N` and `/dev/stdin` for a file and a directory
/// open in every way, each printed with its outcome and what the file then
/// looks like by its own name; `sys.argv[1]` is the directory to work in.
const PROC_LINK_CALLS: &str = r#"
import ctypes, errno, os, sys
base = sys.argv[1]
out = []
libc = ctypes.CDLL(None, use_errno=True)
def linkat(old, new):
    # os.link calls link(), which does not follow: linkat(AT_FDCWD, old,
    # AT_FDCWD, new, AT_SYMLINK_FOLLOW), as programs link O_TMPFILE files.
    if libc.linkat(-100, old.encode(), -100, new.encode(), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def show(label, call):
    try:
        out.append('%s: %r' % (label, call()))
    except OSError as e:
        out.append('%s: %s' % (label, errno.errorcode[e.errno]))
f = os.path.join(base, 'f')
d = os.path.join(base, 'd')
os.mkdir(d)
open(os.path.join(d, 'inside'), 'w').close()
for kind, flags in (('path', os.O_PATH), ('ro', os.O_RDONLY), ('rw', os.O_RDWR)):
    with open(f, 'w') as w:
        w.write('hello world')
    fd = os.open(f, flags)
    p = '/proc/self/fd/%d' % fd
    show(kind + ' chmod', lambda: (os.chmod(p, 0o640), oct(os.stat(f).st_mode)))
    show(kind + ' stat', lambda: (os.stat(p).st_ino == os.stat(f).st_ino, os.stat(p).st_size))
    for q in ('//proc/self/fd/%d', '/proc/./self/fd/%d', '/nonexistent/../proc/self/fd/%d', '/proc/self/fd/0%d'):
        show(kind + ' stat ' + q, lambda: os.stat(q % fd).st_ino == os.stat(f).st_ino)
    show(kind + ' utime', lambda: (os.utime(p, (1000, 2000)), os.stat(f).st_atime, os.stat(f).st_mtime))
    show(kind + ' utime now', lambda: (os.utime(p), os.stat(f).st_mtime > 2000))
    show(kind + ' chown', lambda: (os.chown(p, 4242, 4343), os.stat(f).st_uid, os.stat(f).st_gid))
    show(kind + ' chown back', lambda: (os.chown(p, 0, 0), os.stat(f).st_uid))
    show(kind + ' access', lambda: (os.access(p, os.R_OK), os.access(p, os.X_OK)))
    show(kind + ' truncate', lambda: (os.truncate(p, 5), os.stat(f).st_size))
    show(kind + ' statvfs', lambda: os.statvfs(p).f_blocks == os.statvfs(base).f_blocks)
    show(kind + ' reopen', lambda: open(p).read())
    show(kind + ' getxattr', lambda: os.getxattr(p, 'user.none'))
    new = os.path.join(base, 'link-' + kind)
    show(kind + ' link', lambda: (os.link(p, new), os.path.exists(new)))
    show(kind + ' linkat follow', lambda: (linkat(p, new), os.stat(new).st_ino == os.stat(f).st_ino))
    show(kind + ' chdir', lambda: os.chdir(p))
    os.close(fd)
for kind, flags in (('dir path', os.O_PATH), ('dir ro', os.O_RDONLY)):
    fd = os.open(d, flags | os.O_DIRECTORY)
    p = '/proc/self/fd/%d' % fd
    show(kind + ' listdir', lambda: os.listdir(p))
    show(kind + ' chmod', lambda: (os.chmod(p, 0o750), oct(os.stat(d).st_mode)))
    show(kind + ' truncate', lambda: os.truncate(p, 0))
    show(kind + ' chdir', lambda: (os.chdir(p), os.listdir('.'), os.getcwd() == os.path.realpath(d)))
    os.chdir('/')
    os.close(fd)
fd = os.open(f, os.O_RDONLY)
os.dup2(fd, 0)
show('stdin chmod', lambda: (os.chmod('/dev/stdin', 0o600), oct(os.stat(f).st_mode)))
show('stdin stat', lambda: os.stat('/dev/stdin').st_ino == os.stat(f).st_ino)
print('\n'.join(out))
"#;

#[test]
fn calls_that_follow_an_image_descriptors_proc_link_act_on_its_file() {
    let dir = tempfile::tempdir().unwrap();
    Diff {
        ulfs: Path::new(ULFS),
        argv: &script("python3", PROC_LINK_CALLS),
        wrapper: &[],
        with_stderr: false,
    }
    .agree(dir.path(), true);
}

/// A path to an image descriptor's placeholder that the library cannot
/// tell is one (`/proc/<parent>/fd/N` from a child) reopens the placeholder
/// memfd: writing through it fails loudly, never writing bytes nobody
/// reads, and the image file is unchanged.
#[test]
fn writing_through_a_placeholder_the_library_cannot_see_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs_testkit::cli::ok(Path::new(ULFS), &["mkfs", img.to_str().unwrap(), "16M"]);
    let script = r#"
printf kept > /ulfs/f
exec 3>>/ulfs/f
( echo lost >> /proc/$$/fd/3 ) 2>/dev/null && echo "wrote"
exec 3>&-
cat /ulfs/f; echo
"#;
    let out = Command::new(ULFS)
        .args(["run", img.to_str().unwrap(), "--", "bash", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept\n");
}

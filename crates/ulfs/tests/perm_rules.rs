//! `ulfs::posix::perm` against the kernel it copies: a differential test.
//!
//! A table of files and directories (owners, groups, modes: sticky and
//! set-group-ID directories, 0600 files, a directory without search
//! permission in the middle of a path...) is made afresh on a tmpfs for
//! every case, as root. A forked child then takes another identity
//! (`setgroups`, `setresgid`, `setresuid`) and makes one real system call
//! on it (open with each access mode, mkdir, create, unlink, rmdir,
//! rename, chmod, chown, utimensat, link, a write to a set-user-ID
//! file...); the kernel's answer (success or errno), and for calls that
//! make or change a node its resulting mode and group, must be what the
//! rules in perm.rs predict from the same attributes, checked in the
//! kernel's order (the walk's search permission first).
//!
//! It needs root (to own files as other users and to become them); as
//! anyone else it prints a SKIPPED line.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ulfs::posix::perm::{self, Creds};
use ulfs::{Errno, Result, Stat};
use ulfs_testkit::host_files::is_root;
use ulfs_testkit::skip::skip;

/// The test user (also a member of `G`), another user, a group the test
/// user is in, and a group nobody is in.
const U: u32 = 1001;
const O: u32 = 1002;
const G: u32 = 3000;
const H: u32 = 4000;

struct Node {
    path: &'static str,
    dir: bool,
    mode: u32,
    uid: u32,
    gid: u32,
}

const fn d(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    Node {
        path,
        dir: true,
        mode,
        uid,
        gid,
    }
}

const fn f(path: &'static str, mode: u32, uid: u32, gid: u32) -> Node {
    Node {
        path,
        dir: false,
        mode,
        uid,
        gid,
    }
}

/// Made for every case, parents first.
const TREE: &[Node] = &[
    d("pub", 0o777, 0, 0),
    f("pub/f644_o", 0o644, O, O),
    f("pub/f600_o", 0o600, O, O),
    f("pub/f600_u", 0o600, U, U),
    f("pub/f066_u", 0o066, U, U),
    f("pub/f640_og", 0o640, O, G),
    f("pub/f604_og", 0o604, O, G),
    f("pub/f666_o", 0o666, O, O),
    f("pub/f644_uh", 0o644, U, H),
    f("pub/f4777_o", 0o4777, O, O),
    f("pub/f6777_o", 0o6777, O, O),
    f("pub/f2767_og", 0o2767, O, G),
    f("pub/f2666_o", 0o2666, O, O),
    d("pub/d777_o", 0o777, O, O),
    d("pub/d755_u", 0o755, U, U),
    d("sticky", 0o1777, 0, 0),
    f("sticky/f_u", 0o644, U, U),
    f("sticky/f_o", 0o666, O, O),
    d("sticky/d_o", 0o777, O, O),
    d("mine_sticky", 0o1777, U, U),
    f("mine_sticky/f_o", 0o666, O, O),
    d("ro", 0o755, 0, 0),
    f("ro/f666_o", 0o666, O, O),
    d("wonly", 0o733, 0, 0),
    f("wonly/f_o", 0o644, O, O),
    d("nox", 0o766, 0, 0),
    d("nox/sub", 0o777, 0, 0),
    f("nox/sub/f666", 0o666, 0, 0),
    d("grpx", 0o750, 0, G),
    f("grpx/f666", 0o666, 0, 0),
    d("sgid", 0o2777, 0, G),
    d("sgid_h", 0o2777, 0, H),
    d("mv", 0o777, 0, 0),
    d("mv/d555_u", 0o555, U, U),
    d("mv/d755_u", 0o755, U, U),
    d("mv/d555_o", 0o555, O, O),
    d("dst", 0o777, 0, 0),
];

#[derive(Clone, Copy, Debug)]
enum Times {
    /// `utimensat(path, NULL)`.
    Null,
    Now,
    Explicit,
    NowOmit,
}

#[derive(Clone, Copy)]
enum Op {
    Open(&'static str, i32),
    /// Open for writing and write one byte.
    Write(&'static str),
    /// Open for writing and `ftruncate` to 0.
    Truncate(&'static str),
    /// `open(O_CREAT | O_EXCL | O_WRONLY, mode)`.
    Create(&'static str, u32),
    Mkdir(&'static str, u32),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    Chmod(&'static str, u32),
    Chown(&'static str, Option<u32>, Option<u32>),
    Utimens(&'static str, Times),
    Link(&'static str, &'static str),
}

/// Modes in octal, as the failure messages show them.
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Open(p, flags) => write!(f, "open({p}, {flags:#o})"),
            Op::Write(p) => write!(f, "write({p})"),
            Op::Truncate(p) => write!(f, "ftruncate({p})"),
            Op::Create(p, m) => write!(f, "creat({p}, {m:#o})"),
            Op::Mkdir(p, m) => write!(f, "mkdir({p}, {m:#o})"),
            Op::Unlink(p) => write!(f, "unlink({p})"),
            Op::Rmdir(p) => write!(f, "rmdir({p})"),
            Op::Rename(a, b) => write!(f, "rename({a}, {b})"),
            Op::Chmod(p, m) => write!(f, "chmod({p}, {m:#o})"),
            Op::Chown(p, u, g) => write!(f, "chown({p}, {u:?}, {g:?})"),
            Op::Utimens(p, t) => write!(f, "utimensat({p}, {t:?})"),
            Op::Link(a, b) => write!(f, "link({a}, {b})"),
        }
    }
}

fn cases() -> Vec<Op> {
    use Op::*;
    let mut v = Vec::new();
    let files = [
        "pub/f644_o",
        "pub/f600_o",
        "pub/f600_u",
        "pub/f066_u",
        "pub/f640_og",
        "pub/f604_og",
        "pub/f666_o",
        "sticky/f_o",
        "ro/f666_o",
        "nox/sub/f666",
        "grpx/f666",
    ];
    let flags = [
        libc::O_RDONLY,
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_RDONLY | libc::O_TRUNC,
        libc::O_RDONLY | libc::O_NOATIME,
        libc::O_PATH,
    ];
    for p in files {
        for fl in flags {
            v.push(Open(p, fl));
        }
    }
    for p in ["pub/d777_o", "nox", "nox/sub", "mv/d555_u", "grpx"] {
        v.push(Open(p, libc::O_RDONLY | libc::O_DIRECTORY));
        v.push(Open(p, libc::O_RDONLY | libc::O_NOATIME));
    }
    for p in [
        "pub/f4777_o",
        "pub/f6777_o",
        "pub/f2767_og",
        "pub/f2666_o",
        "pub/f666_o",
    ] {
        v.push(Write(p));
        v.push(Truncate(p));
    }
    for (p, mode) in [
        ("pub/new", 0o2755),
        ("pub/new", 0o6755),
        ("ro/new", 0o644),
        ("nox/sub/new", 0o644),
        ("wonly/new", 0o644),
        ("sticky/new", 0o644),
        ("sgid/new", 0o2755),
        ("sgid/new", 0o2745),
        ("sgid_h/new", 0o2755),
        ("sgid_h/new", 0o2745),
        ("sgid_h/new", 0o6711),
    ] {
        v.push(Create(p, mode));
    }
    for (p, mode) in [
        ("pub/newd", 0o2755),
        ("pub/newd", 0o1777),
        ("pub/newd", 0o4755),
        ("ro/newd", 0o755),
        ("grpx/newd", 0o755),
        ("sgid/newd", 0o755),
        ("sgid_h/newd", 0o700),
    ] {
        v.push(Mkdir(p, mode));
    }
    for p in [
        "pub/f644_o",
        "pub/d777_o",
        "sticky/f_u",
        "sticky/f_o",
        "sticky/d_o",
        "mine_sticky/f_o",
        "ro/f666_o",
        "wonly/f_o",
        "nox/sub/f666",
    ] {
        v.push(Unlink(p));
    }
    for p in [
        "sticky/d_o",
        "pub/d755_u",
        "pub/d777_o",
        "pub/f644_o",
        "sticky/f_o",
    ] {
        v.push(Rmdir(p));
    }
    for (a, b) in [
        ("pub/f644_o", "pub/renamed"),
        ("pub/f644_o", "ro/x"),
        ("pub/f644_o", "sticky/f_o"),
        ("sticky/f_o", "pub/x"),
        ("sticky/f_o", "sticky/x"),
        ("mv/d555_u", "dst/d"),
        ("mv/d755_u", "dst/d"),
        ("mv/d555_o", "dst/d"),
        ("mv/d555_u", "mv/renamed"),
        ("mine_sticky/f_o", "dst/x"),
    ] {
        v.push(Rename(a, b));
    }
    for (p, mode) in [
        ("pub/f644_o", 0o600),
        ("pub/f600_u", 0o2755),
        ("pub/f640_og", 0o6755),
        ("pub/f644_uh", 0o2755),
        ("pub/f644_uh", 0o1644),
        ("pub/d755_u", 0o2755),
        ("nox/sub/f666", 0o644),
    ] {
        v.push(Chmod(p, mode));
    }
    for (p, uid, gid) in [
        ("pub/f600_u", Some(U), None),
        ("pub/f600_u", Some(O), None),
        ("pub/f600_u", None, Some(G)),
        ("pub/f600_u", None, Some(O)),
        ("pub/f600_u", Some(U), Some(U)),
        ("pub/f644_o", None, None),
        ("pub/f644_o", Some(O), None),
        ("pub/f644_o", None, Some(O)),
        ("pub/f644_o", None, Some(G)),
        ("pub/f644_uh", None, Some(H)),
        ("pub/f640_og", None, Some(G)),
    ] {
        v.push(Chown(p, uid, gid));
    }
    for p in ["pub/f666_o", "pub/f644_o", "pub/f600_u"] {
        for t in [Times::Null, Times::Now, Times::Explicit, Times::NowOmit] {
            v.push(Utimens(p, t));
        }
    }
    for (a, b) in [
        ("pub/f644_o", "pub/l"),
        ("pub/f666_o", "pub/l"),
        ("pub/f600_u", "pub/l"),
        ("pub/f4777_o", "pub/l"),
        ("pub/f6777_o", "pub/l"),
        ("pub/f2666_o", "pub/l"),
        ("pub/f666_o", "ro/l"),
        ("pub/f644_o", "ro/l"),
        ("pub/d777_o", "pub/l"),
    ] {
        v.push(Link(a, b));
    }
    v
}

/// An identity to test as: ids for the child, the same as `Creds`.
struct Who {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: &'static [u32],
}

const WHO: &[Who] = &[
    Who {
        name: "user in G",
        uid: U,
        gid: U,
        groups: &[G],
    },
    Who {
        name: "other user",
        uid: O,
        gid: O,
        groups: &[],
    },
    Who {
        name: "root",
        uid: 0,
        gid: 0,
        groups: &[],
    },
];

fn build(root: &Path) {
    for n in TREE {
        let p = root.join(n.path);
        if n.dir {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, b"").unwrap();
        }
        // chown first: it clears set-ID bits.
        std::os::unix::fs::chown(&p, Some(n.uid), Some(n.gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(n.mode)).unwrap();
    }
}

fn stat(root: &Path, rel: &str) -> Stat {
    let m = std::fs::symlink_metadata(root.join(rel)).unwrap();
    Stat {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        ..Default::default()
    }
}

fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Search permission on every directory the walk to `rel` crosses (the
/// case directory itself is root's and open to all).
fn walk(root: &Path, rel: &str, c: &Creds) -> Result<()> {
    let mut at = String::new();
    for part in parent(rel).split('/').filter(|s| !s.is_empty()) {
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(part);
        perm::may_lookup(&stat(root, &at), c)?;
    }
    Ok(())
}

/// What the node an operation makes or changes must look like after it.
struct After {
    path: &'static str,
    mode: u32,
    gid: Option<u32>,
}

/// perm.rs's answer for `op` as `c` on the tree at `root` (before it
/// runs), in the kernel's order of checks.
fn predict(root: &Path, op: Op, c: &Creds, protected: bool) -> (Result<()>, Option<After>) {
    let s = |rel| stat(root, rel);
    let mut after = None;
    let r = (|| -> Result<()> {
        match op {
            Op::Open(p, flags) => {
                walk(root, p, c)?;
                perm::open_access(&s(p), flags, c)
            }
            Op::Write(p) | Op::Truncate(p) => {
                walk(root, p, c)?;
                let st = s(p);
                perm::open_access(&st, libc::O_WRONLY, c)?;
                after = Some(After {
                    path: p,
                    mode: perm::mode_after_write(&st, c).unwrap_or(st.mode),
                    gid: None,
                });
                Ok(())
            }
            Op::Create(p, mode) | Op::Mkdir(p, mode) => {
                walk(root, p, c)?;
                let dir = s(parent(p));
                perm::may_create(&dir, c)?;
                let kind = match op {
                    Op::Mkdir(..) => libc::S_IFDIR,
                    _ => libc::S_IFREG,
                };
                // The child's umask is 0.
                let (_, gid, _) = perm::new_node_owner(&dir, c);
                after = Some(After {
                    path: p,
                    mode: perm::new_node_mode(&dir, kind | mode, c),
                    gid: Some(gid),
                });
                Ok(())
            }
            Op::Unlink(p) | Op::Rmdir(p) => {
                walk(root, p, c)?;
                perm::may_delete(&s(parent(p)), &s(p), matches!(op, Op::Rmdir(_)), c)
            }
            Op::Rename(a, b) => {
                walk(root, a, c)?;
                walk(root, b, c)?;
                let src = s(a);
                perm::may_delete(&s(parent(a)), &src, src.is_dir(), c)?;
                if root.join(b).exists() {
                    perm::may_delete(&s(parent(b)), &s(b), src.is_dir(), c)?;
                } else {
                    perm::may_create(&s(parent(b)), c)?;
                }
                if src.is_dir() && parent(a) != parent(b) {
                    perm::may_rename_dir_to_new_parent(&src, c)?;
                }
                Ok(())
            }
            Op::Chmod(p, mode) => {
                walk(root, p, c)?;
                let st = s(p);
                let m = perm::chmod_mode(&st, mode, c)?;
                after = Some(After {
                    path: p,
                    mode: st.mode & libc::S_IFMT | m,
                    gid: None,
                });
                Ok(())
            }
            Op::Chown(p, uid, gid) => {
                walk(root, p, c)?;
                perm::check_chown(&s(p), uid, gid, c)
            }
            Op::Utimens(p, t) => {
                walk(root, p, c)?;
                let explicit = matches!(t, Times::Explicit | Times::NowOmit);
                perm::check_set_times(&s(p), explicit, c)
            }
            Op::Link(a, b) => {
                walk(root, a, c)?;
                walk(root, b, c)?;
                let src = s(a);
                perm::check_hardlink(&src, protected, c)?;
                perm::may_create(&s(parent(b)), c)?;
                if src.is_dir() {
                    return Err(Errno::EPERM);
                }
                Ok(())
            }
        }
    })();
    (r, after)
}

/// An operation with its paths made ready, so that the forked child only
/// makes system calls (no allocation after a fork of a threaded test).
struct Ready {
    op: Op,
    a: CString,
    b: CString,
}

fn ready(root: &Path, op: Op) -> Ready {
    let c = |rel: &str| CString::new(root.join(rel).as_os_str().as_bytes()).unwrap();
    let (a, b) = match op {
        Op::Open(p, _)
        | Op::Write(p)
        | Op::Truncate(p)
        | Op::Create(p, _)
        | Op::Mkdir(p, _)
        | Op::Unlink(p)
        | Op::Rmdir(p)
        | Op::Chmod(p, _)
        | Op::Chown(p, ..)
        | Op::Utimens(p, _) => (c(p), c(p)),
        Op::Rename(a, b) | Op::Link(a, b) => (c(a), c(b)),
    };
    Ready { op, a, b }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// In the child: the system call(s) for `r`; 0 or the errno.
fn perform(r: &Ready) -> i32 {
    let a = r.a.as_ptr();
    let b = r.b.as_ptr();
    let ok = |rc: libc::c_int| if rc < 0 { errno() } else { 0 };
    // SAFETY: every pointer is a live NUL-terminated path or a local;
    // the descriptors are the ones just opened.
    unsafe {
        match r.op {
            Op::Open(_, flags) => {
                let fd = libc::open(a, flags);
                if fd < 0 {
                    return errno();
                }
                libc::close(fd);
                0
            }
            Op::Write(_) | Op::Truncate(_) => {
                let fd = libc::open(a, libc::O_WRONLY);
                if fd < 0 {
                    return errno();
                }
                let rc = if matches!(r.op, Op::Write(_)) {
                    libc::write(fd, b"x".as_ptr().cast(), 1) as libc::c_int
                } else {
                    libc::ftruncate(fd, 0)
                };
                let e = ok(rc);
                libc::close(fd);
                e
            }
            Op::Create(_, mode) => {
                let fd = libc::open(a, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, mode);
                if fd < 0 {
                    return errno();
                }
                libc::close(fd);
                0
            }
            Op::Mkdir(_, mode) => ok(libc::mkdir(a, mode)),
            Op::Unlink(_) => ok(libc::unlink(a)),
            Op::Rmdir(_) => ok(libc::rmdir(a)),
            Op::Rename(..) => ok(libc::rename(a, b)),
            Op::Chmod(_, mode) => ok(libc::chmod(a, mode)),
            Op::Chown(_, uid, gid) => ok(libc::chown(
                a,
                uid.unwrap_or(u32::MAX),
                gid.unwrap_or(u32::MAX),
            )),
            Op::Utimens(_, t) => {
                let ts = |sec, nsec| libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                };
                let times = match t {
                    Times::Null => None,
                    Times::Now => Some([ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_NOW)]),
                    Times::Explicit => Some([ts(1000, 0), ts(2000, 0)]),
                    Times::NowOmit => Some([ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT)]),
                };
                let p = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
                ok(libc::utimensat(libc::AT_FDCWD, a, p, 0))
            }
            Op::Link(..) => ok(libc::link(a, b)),
        }
    }
}

/// Exit statuses of a child that could not become `Who` (not errnos).
const SETUP_FAILED: i32 = 250;

/// Runs `r` in a child as `who`: 0, the errno, or `SETUP_FAILED`.
fn as_user(who: &Who, r: &Ready) -> i32 {
    let groups: Vec<libc::gid_t> = who.groups.to_vec();
    // SAFETY: fork, then only system calls in the child until _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(who.gid, who.gid, who.gid) != 0
                || libc::setresuid(who.uid, who.uid, who.uid) != 0
            {
                libc::_exit(SETUP_FAILED);
            }
            libc::umask(0);
            libc::_exit(perform(r));
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        libc::WEXITSTATUS(status)
    }
}

fn name(e: i32) -> String {
    if e == 0 {
        "success".into()
    } else {
        format!("{:?}", Errno(e))
    }
}

#[test]
fn perm_rules_agree_with_the_kernel() {
    const TEST: &str = "perm_rules_agree_with_the_kernel";
    if !is_root() {
        return skip(
            TEST,
            "needs root, to own files as other users and become them",
        );
    }
    let protected = std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    // A tmpfs where there is one; every directory above must be
    // searchable by the test users.
    let base = [Path::new("/dev/shm"), Path::new("/tmp")]
        .into_iter()
        .find(|p| p.is_dir())
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("ulfs-perm-")
        .tempdir_in(&base)
        .unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut checked = 0;
    let mut wrong = Vec::new();
    for (i, op) in cases().into_iter().enumerate() {
        for who in WHO {
            let root: PathBuf = scratch.path().join(format!("c{i}-{}", who.uid));
            std::fs::create_dir(&root).unwrap();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
            build(&root);
            let creds = Creds::new(who.uid, who.gid, who.groups);
            let (want, after) = predict(&root, op, &creds, protected);
            let want = want.err().map_or(0, Errno::raw);
            let got = as_user(who, &ready(&root, op));
            if got == SETUP_FAILED {
                return skip(
                    TEST,
                    "cannot take another user's ids here (setresuid failed)",
                );
            }
            checked += 1;
            if got != want {
                wrong.push(format!(
                    "{op:?} as {}: kernel {}, perm.rs {}",
                    who.name,
                    name(got),
                    name(want)
                ));
            } else if let (0, Some(a)) = (got, after) {
                let st = stat(&root, a.path);
                if st.mode != a.mode || a.gid.is_some_and(|g| g != st.gid) {
                    wrong.push(format!(
                        "{op:?} as {}: kernel left mode {:o} gid {}, perm.rs says mode {:o} gid {:?}",
                        who.name, st.mode, st.gid, a.mode, a.gid
                    ));
                }
            }
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
    eprintln!(
        "perm_rules: {checked} calls compared (protected_hardlinks={}), {} disagreements",
        u8::from(protected),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "perm.rs disagrees with the kernel:\n{}",
        wrong.join("\n")
    );
}

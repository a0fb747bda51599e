//! Calls made for a verified user (`Identity::Verified`, as a server's
//! clients are) are judged as Linux judges them: the same tree is made on
//! the image and in a tmpfs directory, then the same script of calls runs
//! through `Fs` for a uid and, as root, through the kernel under `setpriv`
//! for that uid; every answer (errno, or the owner and mode of what a call
//! made or changed) must agree. Without root the kernel side cannot run,
//! and the image side is checked against the answers written here.

mod common;

use std::process::Command;
use ulfs::posix::perm::Creds;
use ulfs::{Errno, Fs, Identity, Mode, MountOptions};
use ulfs_testkit::host_files::is_root;
use ulfs_testkit::skip::skip;

/// The tree, made as root: (kind, path, mode, uid, gid).
const TREE: &[(&str, &str, u32, u32, u32)] = &[
    ("dir", "a", 0o755, 1001, 1001),
    ("file", "a/secret", 0o600, 1001, 1001),
    ("file", "grp", 0o640, 1001, 3000),
    ("dir", "tmp", 0o1777, 0, 0),
    ("file", "tmp/theirs", 0o644, 1001, 1001),
    ("dir", "sg", 0o2775, 1001, 3000),
    ("dir", "closed", 0o700, 1001, 1001),
    ("file", "closed/f", 0o644, 1001, 1001),
    ("dir", "open", 0o777, 0, 0),
    ("file", "open/theirs", 0o666, 1001, 1001),
    ("dir", "mine", 0o755, 1002, 1002),
    ("dir", "mine/sub", 0o755, 1002, 1002),
    ("file", "mine/f", 0o644, 1002, 1002),
    ("file", "mine/suid", 0o6755, 1002, 3000),
    ("file", "mine/sgid", 0o2755, 1002, 1002),
];

/// The script: one call per line, `op path [args]`; what each answers is
/// compared. `stat P` answers `mode uid gid`; calls that make or change a
/// file are followed by a `stat` of it in the script.
const SCRIPT: &str = "
read a/secret
read grp
write grp
access a/secret 4
access grp 4
access grp 2
mkdir a/x 755
create a/new 644
create tmp/mine 644
stat tmp/mine
unlink tmp/mine
unlink tmp/theirs
rename tmp/theirs tmp/moved
stat closed/f
read closed/f
chdir closed
chdir a
create sg/new 2755
stat sg/new
mkdir sg/d 755
stat sg/d
chmod grp 666
chmod mine/f 2644
stat mine/f
chown mine/f -1 3000
stat mine/f
chown mine/f -1 4000
chown mine/f 1001 -1
chown open/theirs -1 -1
utimes open/theirs set
utimes open/theirs now
utimes grp now
write mine/suid
stat mine/suid
write mine/sgid
stat mine/sgid
truncate grp
truncate open/theirs
link a/secret open/l1
link open/theirs open/l2
stat open/l2
symlink x a/l
symlink x open/sl
rename open/theirs open/t2
rename mine/sub open/sub
stat open/sub
rmdir tmp
rmdir open/sub
noatime open/t2
noatime mine/f
";

/// What uid 1002 in group 3000 is answered here, without root (on Linux
/// with protected_hardlinks on, as every major distribution sets it).
const EXPECTED_1002: &str = "
EACCES
ok
EACCES
EACCES
ok
EACCES
EACCES
EACCES
ok
100644 1002 1002
ok
EPERM
EPERM
EACCES
EACCES
EACCES
ok
ok
102755 1002 3000
ok
42755 1002 3000
EPERM
ok
102644 1002 1002
ok
102644 1002 3000
EPERM
EPERM
ok
EPERM
ok
EACCES
ok
100755 1002 3000
ok
100755 1002 1002
EACCES
ok
EPERM
ok
100666 1001 1001
EACCES
ok
ok
ok
40755 1002 1002
EACCES
ok
EPERM
ok
";

fn errno_name(e: i32) -> String {
    Errno(e)
        .name()
        .map_or_else(|| format!("E{e}"), str::to_string)
}

/// One answer as a line: `ok`, the errno's name, or `mode uid gid`.
fn answer(r: Result<Option<(u32, u32, u32)>, i32>) -> String {
    match r {
        Ok(None) => "ok".into(),
        Ok(Some((mode, uid, gid))) => format!("{mode:o} {uid} {gid}"),
        Err(e) => errno_name(e),
    }
}

fn id(s: &str) -> u32 {
    if s == "-1" {
        u32::MAX
    } else {
        s.parse().unwrap()
    }
}

/// Runs the script on the image as `who`.
fn on_image(fs: &mut Fs) -> Vec<String> {
    let e = |r: Result<(), Errno>| r.map(|()| None).map_err(Errno::raw);
    SCRIPT
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            let path = format!("/{}", w[1]);
            let open = |fs: &mut Fs, flags: i32, mode: u32| {
                fs.open(&path, flags, mode).and_then(|fd| fs.close(fd))
            };
            let r = match w[0] {
                "read" => e(open(fs, libc::O_RDONLY, 0)),
                "write" => e(fs.open(&path, libc::O_WRONLY, 0).and_then(|fd| {
                    fs.write(fd, b"x")?;
                    fs.close(fd)
                })),
                "noatime" => e(open(fs, libc::O_RDONLY | libc::O_NOATIME, 0)),
                "access" => e(fs.access(&path, w[2].parse().unwrap())),
                "mkdir" => e(fs.mkdir(&path, u32::from_str_radix(w[2], 8).unwrap())),
                "create" => e(open(
                    fs,
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    u32::from_str_radix(w[2], 8).unwrap(),
                )),
                "stat" => fs
                    .stat(&path)
                    .map(|st| Some((st.mode, st.uid, st.gid)))
                    .map_err(Errno::raw),
                "unlink" => e(fs.unlink(&path)),
                "rmdir" => e(fs.rmdir(&path)),
                "rename" => e(fs.rename(&path, format!("/{}", w[2]))),
                "link" => e(fs.link(&path, format!("/{}", w[2]))),
                "symlink" => e(fs.symlink(w[1], format!("/{}", w[2]))),
                "chdir" => e(fs.chdir(&path).and_then(|()| fs.chdir("/"))),
                "chmod" => e(fs.chmod(&path, u32::from_str_radix(w[2], 8).unwrap())),
                "chown" => e(fs.chown(&path, id(w[2]), id(w[3]))),
                "truncate" => e(fs.truncate(&path, 0)),
                "utimes" => {
                    let times = (w[2] == "set").then_some(
                        [ulfs::Timespec {
                            sec: 1_000_000,
                            nsec: 0,
                        }; 2],
                    );
                    e(fs.utimensat(libc::AT_FDCWD, &path, times, 0))
                }
                op => panic!("no such op {op}"),
            };
            answer(r)
        })
        .collect()
}

/// The same script through the kernel, in `dir`, as `uid` with `groups`
/// (root makes the tree; the script runs under setpriv).
const KERNEL_SIDE: &str = r#"
import os, sys
os.chdir(sys.argv[1])
def st(p):
    s = os.stat(p, follow_symlinks=False)
    return "%o %d %d" % (s.st_mode, s.st_uid, s.st_gid)
def run(w):
    op, p = w[0], w[1]
    if op == "read": os.close(os.open(p, os.O_RDONLY))
    elif op == "noatime": os.close(os.open(p, os.O_RDONLY | os.O_NOATIME))
    elif op == "write":
        fd = os.open(p, os.O_WRONLY); os.write(fd, b"x"); os.close(fd)
    elif op == "access":
        if not os.access(p, int(w[2])): raise PermissionError(13, "")
    elif op == "mkdir": os.mkdir(p, int(w[2], 8))
    elif op == "create": os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, int(w[2], 8)))
    elif op == "stat": return st(p)
    elif op == "unlink": os.unlink(p)
    elif op == "rmdir": os.rmdir(p)
    elif op == "rename": os.rename(p, w[2])
    elif op == "link": os.link(p, w[2])
    elif op == "symlink": os.symlink(p, w[2])
    elif op == "chdir": os.chdir(p); os.chdir(sys.argv[1])
    elif op == "chmod": os.chmod(p, int(w[2], 8))
    elif op == "chown": os.chown(p, int(w[2]), int(w[3]))
    elif op == "truncate": os.truncate(p, 0)
    elif op == "utimes": os.utime(p, (1000000, 1000000) if w[2] == "set" else None)
    return "ok"
for line in sys.stdin.read().splitlines():
    if not line.strip(): continue
    try: print(run(line.split()))
    except OSError as e: print("E%d" % e.errno)
"#;

fn on_kernel(dir: &std::path::Path, uid: u32, groups: &[u32]) -> Vec<String> {
    use std::io::Write;
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        format!("--groups={}", list.join(","))
    };
    let mut child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg(groups)
        .args(["/usr/bin/python3", "-c", KERNEL_SIDE])
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SCRIPT.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kernel side failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| match l.strip_prefix('E') {
            Some(n) if n.parse::<i32>().is_ok() => errno_name(n.parse().unwrap()),
            _ => l.to_string(),
        })
        .collect()
}

/// The tree on a fresh image, made by the (privileged) host.
fn image_with_tree() -> (tempfile::TempDir, Fs) {
    let (dir, img) = common::image_in(16 << 20, Mode::Journal);
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    for &(kind, path, mode, uid, gid) in TREE {
        let path = format!("/{path}");
        if kind == "dir" {
            fs.mkdir(&path, 0o700).unwrap();
        } else {
            let fd = fs
                .open(&path, libc::O_CREAT | libc::O_WRONLY, 0o600)
                .unwrap();
            fs.close(fd).unwrap();
        }
        fs.chown(&path, uid, gid).unwrap();
        fs.chmod(&path, mode).unwrap();
    }
    (dir, fs)
}

fn tree_on_host(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for &(kind, path, mode, uid, gid) in TREE {
        let p = dir.join(path);
        if kind == "dir" {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, b"").unwrap();
        }
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn protected_hardlinks() -> bool {
    std::fs::read("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.first() == Some(&b'1'))
}

fn script_lines() -> Vec<&'static str> {
    SCRIPT.lines().filter(|l| !l.trim().is_empty()).collect()
}

fn compare(who: &str, image: &[String], expected: &[String]) {
    assert_eq!(image.len(), expected.len());
    let wrong: Vec<String> = script_lines()
        .iter()
        .zip(image.iter().zip(expected))
        .filter(|(_, (i, k))| i != k)
        .map(|(op, (i, k))| format!("{op}: image says {i}, expected {k}"))
        .collect();
    assert!(wrong.is_empty(), "as {who}:\n{}", wrong.join("\n"));
}

#[test]
fn a_verified_user_is_answered_as_linux_answers_it() {
    let (_dir, mut fs) = image_with_tree();
    fs.set_identity(Identity::Verified(Creds::new(1002, 1002, [3000])));
    let image = on_image(&mut fs);
    let mut expected: Vec<String> = EXPECTED_1002
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if !protected_hardlinks() {
        // Then anyone may link a file they can reach.
        let at = script_lines()
            .iter()
            .position(|l| l.starts_with("link a/secret"));
        expected[at.unwrap()] = "ok".into();
    }
    compare("uid 1002 (written answers)", &image, &expected);
}

#[test]
fn verified_users_agree_with_the_kernel_on_tmpfs() {
    const TEST: &str = "verified_users_agree_with_the_kernel_on_tmpfs";
    if !is_root() {
        return skip(TEST, "needs root to act as other users on the host");
    }
    if Command::new("setpriv").arg("--help").output().is_err() {
        return skip(TEST, "setpriv (util-linux) is not installed");
    }
    for (uid, gid, groups) in [
        (1002, 1002, vec![3000]),
        (1001, 1001, vec![]),
        (0, 0, vec![]),
    ] {
        let (_dir, mut fs) = image_with_tree();
        fs.set_identity(Identity::Verified(Creds::new(uid, gid, groups.clone())));
        let image = on_image(&mut fs);
        let host = tempfile::tempdir_in("/dev/shm").unwrap();
        tree_on_host(host.path());
        let kernel = on_kernel(host.path(), uid, &groups);
        compare(&format!("uid {uid}"), &image, &kernel);
    }
}

#[test]
fn the_host_is_privileged_as_before() {
    let (_dir, mut fs) = image_with_tree();
    // The host process may do all of it: nothing is judged.
    let fd = fs.open("/a/secret", libc::O_RDWR, 0).unwrap();
    fs.close(fd).unwrap();
    fs.unlink("/tmp/theirs").unwrap();
    fs.chmod("/grp", 0o600).unwrap();
    fs.mkdir("/closed/d", 0o755).unwrap();
}

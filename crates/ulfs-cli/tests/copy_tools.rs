//! End-to-end tests of the copy tools of the `ulfs` binary (issue 11):
//! `cp` between the host and images and between images, `mv`, `ln`,
//! `chmod`, `chown`, `touch`, `stat`, `du`, `tree`, the `--json` outputs,
//! single-file `import`/`export`, and that every command has an example in
//! its `--help` and in the README. Each test checks the image with `ulfs
//! fsck` after changing it.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use ulfs_testkit::host_files::{chmod, is_root, noise, set_times};

use serde_json::Value;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn ulfs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(ULFS).args(args).output().expect("run ulfs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn shown<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<String> {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Run and require success; returns stdout.
fn ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = ulfs(args);
    assert!(
        out.status.success(),
        "ulfs {:?} failed ({:?}):\nstdout: {}\nstderr: {}",
        shown(args),
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Run and require failure in the CLI's `ulfs: ...` shape; returns the
/// exit code and stderr.
fn fails<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String) {
    let out = ulfs(args);
    assert!(
        !out.status.success(),
        "ulfs {:?} unexpectedly succeeded: {}",
        shown(args),
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ulfs: "),
        "error not in `ulfs: ...` shape: {stderr:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// `IMAGE:/path`.
fn at(img: &Path, path: &str) -> String {
    format!("{}:{path}", img.display())
}

fn image(dir: &Path, name: &str, size: &str) -> PathBuf {
    let img = dir.join(name);
    ok(&["mkfs", s(&img), size]);
    img
}

fn fsck_clean(img: &Path) {
    let out = ulfs(&["fsck", s(img)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fsck {}: {}{}",
        img.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// `stat --json` of one path, as an object.
fn stat(img: &Path, path: &str) -> Value {
    let v = json(&ok(&["stat", s(img), path, "--json"]));
    let arr = v.as_array().expect("an array");
    assert_eq!(arr.len(), 1, "{v}");
    arr[0].clone()
}

fn time_of(v: &Value, which: &str) -> (i64, i64) {
    (
        v[which]["sec"].as_i64().unwrap(),
        v[which]["nsec"].as_i64().unwrap(),
    )
}

fn diff_r(a: &Path, b: &Path) {
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "diff -r {} {}:\n{}{}",
        a.display(),
        b.display(),
        text(&diff.stdout),
        text(&diff.stderr)
    );
}

/// What a faithful copy must keep, per path below the tree's top.
struct Expect {
    rel: &'static str,
    mode: u32,
    mtime: (i64, i64),
}

/// A host tree with symlinks (relative, absolute, dangling), hard links,
/// odd modes, nanosecond times, a sparse file and empty things.
fn build_tree(root: &Path) -> Vec<Expect> {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir(root.join("empty_dir")).unwrap();
    fs::write(root.join("a/b/c/deep.txt"), b"deep\n").unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("big.bin"), noise(3 << 20, 11)).unwrap();
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"head", 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"tail", 5 << 20).unwrap();
    sparse.set_len(6 << 20).unwrap();
    drop(sparse);
    fs::write(root.join("one"), b"shared\n").unwrap();
    fs::hard_link(root.join("one"), root.join("two")).unwrap();
    fs::hard_link(root.join("one"), root.join("a/three")).unwrap();
    std::os::unix::fs::symlink("../one", root.join("a/rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("abs")).unwrap();
    std::os::unix::fs::symlink("no/such/thing", root.join("dangling")).unwrap();
    fs::write(root.join("tool"), b"#!/bin/sh\n").unwrap();
    fs::write(root.join("a/secret"), b"s3cret").unwrap();
    let expect = vec![
        Expect {
            rel: "tool",
            mode: 0o4755,
            mtime: (1_500_000_001, 123_456_789),
        },
        Expect {
            rel: "a/secret",
            mode: 0o640,
            mtime: (1_300_000_000, 999_999_999),
        },
        Expect {
            rel: "big.bin",
            mode: 0o600,
            mtime: (1_700_000_100, 43),
        },
        Expect {
            rel: "a/rel",
            mode: 0o777,
            mtime: (1_222_222_222, 2),
        },
        // Directories last: their times must survive their contents.
        Expect {
            rel: "a/b",
            mode: 0o750,
            mtime: (900_000_000, 314_159_265),
        },
        Expect {
            rel: "a",
            mode: 0o711,
            mtime: (1_000_000_000, 20),
        },
    ];
    for e in &expect {
        let p = root.join(e.rel);
        if !fs::symlink_metadata(&p).unwrap().file_type().is_symlink() {
            chmod(&p, e.mode);
        }
        set_times(&p, (1_600_000_000, 7), e.mtime);
    }
    expect
}

fn check_tree(out: &Path, expect: &[Expect]) {
    for e in expect {
        let m = fs::symlink_metadata(out.join(e.rel)).unwrap();
        if !m.file_type().is_symlink() {
            assert_eq!(m.mode() & 0o7777, e.mode, "mode of {}", e.rel);
        }
        assert_eq!((m.mtime(), m.mtime_nsec()), e.mtime, "mtime of {}", e.rel);
    }
    let one = fs::metadata(out.join("one")).unwrap();
    for other in ["two", "a/three"] {
        let m = fs::metadata(out.join(other)).unwrap();
        assert_eq!(m.ino(), one.ino(), "{other} is no longer a hard link");
    }
    assert_eq!(one.nlink(), 3);
    assert_eq!(
        fs::read_link(out.join("dangling")).unwrap(),
        Path::new("no/such/thing")
    );
    let sparse = fs::metadata(out.join("sparse")).unwrap();
    assert_eq!(sparse.len(), 6 << 20);
    assert!(sparse.blocks() < 1024, "holes were filled: {sparse:?}");
}

// ---------------------------------------------------------------- cp

#[test]
fn cp_a_host_to_image_to_host_is_faithful() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "64M");
    let src = dir.path().join("src");
    let expect = build_tree(&src);
    if is_root() {
        std::os::unix::fs::lchown(src.join("a/secret"), Some(4242), Some(4343)).unwrap();
    }
    ok(&["cp", "-a", s(&src), &at(&img, "/")]);
    fsck_clean(&img);

    // In the image: modes, owners, nanosecond times and links as on the host.
    let tool = stat(&img, "/src/tool");
    assert_eq!(tool["mode"], 0o4755);
    assert_eq!(time_of(&tool, "mtime"), (1_500_000_001, 123_456_789));
    assert_eq!(time_of(&tool, "atime"), (1_600_000_000, 7));
    let host_secret = fs::metadata(src.join("a/secret")).unwrap();
    let secret = stat(&img, "/src/a/secret");
    assert_eq!(secret["uid"], host_secret.uid());
    assert_eq!(secret["gid"], host_secret.gid());
    assert_eq!(stat(&img, "/src/one")["nlink"], 3);
    assert_eq!(
        stat(&img, "/src/one")["inode"],
        stat(&img, "/src/a/three")["inode"]
    );
    assert_eq!(stat(&img, "/src/a/rel")["target"], "../one");

    let out = dir.path().join("out");
    ok(&["cp", "-a", &at(&img, "/src"), s(&out)]);
    check_tree(&out, &expect);
    if is_root() {
        let m = fs::metadata(out.join("a/secret")).unwrap();
        assert_eq!((m.uid(), m.gid()), (4242, 4343));
    }
    diff_r(&src, &out);

    // Again over the existing copy: a merge that changes nothing.
    ok(&["cp", "-a", &at(&img, "/src/."), s(&out)]);
    check_tree(&out, &expect);
    diff_r(&src, &out);
    fsck_clean(&img);
}

#[test]
fn cp_without_a_copies_contents_not_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "32M");
    let src = dir.path().join("src");
    build_tree(&src);
    ok(&["cp", "-r", s(&src), &at(&img, "/plain")]);
    let tool = stat(&img, "/plain/tool");
    // Mode less the set-id bits and the umask; new times; links split.
    let umask = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
        })
        .unwrap_or(0o022);
    assert_eq!(tool["mode"].as_u64().unwrap() as u32, 0o755 & !umask);
    assert_ne!(time_of(&tool, "mtime"), (1_500_000_001, 123_456_789));
    assert_eq!(stat(&img, "/plain/one")["nlink"], 1);
    assert_eq!(stat(&img, "/plain/a/rel")["type"], "symlink");
    assert_eq!(ok(&["cat", s(&img), "/plain/a/b/c/deep.txt"]), "deep\n");
    // One file, by name and into a directory; a symlink operand without
    // -r is followed.
    ok(&["cp", s(&src.join("one")), &at(&img, "/file")]);
    ok(&["cp", s(&src.join("a/rel")), &at(&img, "/plain/a/b/")]);
    assert_eq!(ok(&["cat", s(&img), "/file"]), "shared\n");
    assert_eq!(stat(&img, "/plain/a/b/rel")["type"], "file");
    assert_eq!(ok(&["cat", s(&img), "/plain/a/b/rel"]), "shared\n");
    // An existing file is replaced, not appended to.
    fs::write(dir.path().join("short"), b"x").unwrap();
    ok(&["cp", s(&dir.path().join("short")), &at(&img, "/file")]);
    assert_eq!(ok(&["cat", s(&img), "/file"]), "x");
    fsck_clean(&img);
}

#[test]
fn cp_between_two_images_and_inside_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = image(dir.path(), "a.img", "64M");
    let b = image(dir.path(), "b.img", "64M");
    let src = dir.path().join("src");
    let expect = build_tree(&src);
    ok(&["cp", "-a", s(&src), &at(&a, "/t")]);

    // Image to image: two images at once, then out to the host to compare.
    ok(&["cp", "-a", &at(&a, "/t"), &at(&b, "/copy")]);
    fsck_clean(&a);
    fsck_clean(&b);
    let out = dir.path().join("out");
    ok(&["cp", "-a", &at(&b, "/copy"), s(&out)]);
    check_tree(&out, &expect);
    diff_r(&src, &out);

    // Inside one image, and the same image under a second name: one
    // mount serves both (two would refuse each other as "in use").
    ok(&["cp", "-a", &at(&a, "/t"), &at(&a, "/t2")]);
    let alias = dir.path().join("alias.img");
    std::os::unix::fs::symlink(&a, &alias).unwrap();
    ok(&["cp", &at(&alias, "/t/one"), &at(&a, "/t2/four")]);
    assert_eq!(ok(&["cat", s(&a), "/t2/four"]), "shared\n");
    let out2 = dir.path().join("out2");
    ok(&["cp", "-a", &at(&a, "/t2"), s(&out2)]);
    fs::remove_file(out2.join("four")).unwrap();
    diff_r(&src, &out2);

    // Several sources from two images into one directory of a third place.
    ok(&["mkdir", s(&b), "/many"]);
    ok(&[
        "cp",
        &at(&a, "/t/one"),
        &at(&b, "/copy/tool"),
        s(&src.join("empty")),
        &at(&b, "/many"),
    ]);
    assert_eq!(ok(&["ls", s(&b), "/many"]), "empty\none\ntool\n");

    // An image only read is mounted read-only: it can be copied from while
    // another reader holds it, and a write to it is refused as in use.
    let reader = ulfs::Fs::mount(
        &a,
        ulfs::MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    ok(&["cp", &at(&a, "/t/one"), s(&dir.path().join("from_ro"))]);
    assert_eq!(fs::read(dir.path().join("from_ro")).unwrap(), b"shared\n");
    ok(&["cp", &at(&a, "/t/tool"), &at(&b, "/from_ro")]);
    let (_, err) = fails(&["cp", &at(&b, "/from_ro"), &at(&a, "/t/x")]);
    assert!(err.contains("in use"), "{err}");
    reader.unmount().unwrap();
    fsck_clean(&a);
    fsck_clean(&b);
}

#[test]
fn cp_refuses_clearly_and_leaves_the_image_alone() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "32M");
    let src = dir.path().join("src");
    build_tree(&src);
    ok(&["cp", "-a", s(&src), &at(&img, "/t")]);
    let before = ok(&["ls", s(&img), "-R", "/"]);

    let (code, err) = fails(&["cp", &at(&img, "/missing"), s(&dir.path().join("x"))]);
    assert_eq!(code, 1);
    assert!(err.contains("/missing: No such file or directory"), "{err}");
    assert!(!dir.path().join("x").exists());

    let (_, err) = fails(&["cp", s(&src), &at(&img, "/nodash_r")]);
    assert!(err.contains("-r not specified"), "{err}");

    let (_, err) = fails(&["cp", "-r", &at(&img, "/t"), &at(&img, "/t/a/")]);
    assert!(err.contains("into itself"), "{err}");

    let (_, err) = fails(&["cp", &at(&img, "/t/one"), &at(&img, "/t/two")]);
    assert!(err.contains("same file"), "{err}");

    let (_, err) = fails(&[
        "cp",
        s(&src.join("one")),
        s(&src.join("tool")),
        &at(&img, "/t/one"),
    ]);
    assert!(err.contains("Not a directory"), "{err}");

    let (_, err) = fails(&["cp", s(&src.join("one")), &at(&img, "/no/such/dir/x")]);
    assert!(err.contains("No such file or directory"), "{err}");

    let (_, err) = fails(&["cp", "-r", s(&src), &at(&img, "/t/one")]);
    assert!(err.contains("cannot overwrite non-directory"), "{err}");

    // Copying out over the image file itself is refused.
    let (_, err) = fails(&["cp", &at(&img, "/t/one"), s(&img)]);
    assert!(err.contains("refusing to overwrite"), "{err}");
    fsck_clean(&img);

    // No operand names an image: a usage error that says why.
    let (code, err) = fails(&["cp", s(&src.join("one")), s(&dir.path().join("y"))]);
    assert_eq!(code, 2);
    assert!(err.contains("IMAGE:/PATH"), "{err}");
    let out = ulfs(&["cp", &at(&img, "/t/one")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    assert_eq!(
        ok(&["ls", s(&img), "-R", "/"]),
        before,
        "a refused cp changed the image"
    );
    fsck_clean(&img);
}

/// An existing destination is written into, as cp(1) does: its inode,
/// hard links, owner and mode stay, a symlink is followed; a device,
/// FIFO or dangling symlink is refused, never replaced (review finding:
/// they were unlinked and made anew, so `cp img:/f /dev/null` as root
/// replaced the device).
#[test]
fn cp_writes_into_an_existing_destination_and_replaces_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "c.img", "16M");
    let src = dir.path().join("src");
    std::fs::write(&src, b"new contents").unwrap();
    ok(&["cp", s(&src), &at(&img, "/f")]);
    let d = dir.path().join("dst");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("target"), b"old").unwrap();
    std::fs::hard_link(d.join("target"), d.join("target_hl")).unwrap();
    chmod(&d.join("target"), 0o600);
    std::os::unix::fs::symlink("target", d.join("link")).unwrap();
    std::os::unix::fs::symlink("missing", d.join("dangling")).unwrap();
    let ino = std::fs::metadata(d.join("target")).unwrap().ino();
    // Through the symlink, into the file: the link and the inode stay.
    ok(&["cp", &at(&img, "/f"), s(&d.join("link"))]);
    assert!(
        std::fs::symlink_metadata(d.join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(d.join("target_hl")).unwrap(), b"new contents");
    let m = std::fs::metadata(d.join("target")).unwrap();
    assert_eq!((m.ino(), m.mode() & 0o777, m.nlink()), (ino, 0o600, 2));
    let (code, err) = fails(&["cp", &at(&img, "/f"), s(&d.join("dangling"))]);
    assert!(code == 1 && err.contains("dangling"), "{err}");
    assert!(!d.join("missing").exists());
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (code, err) = fails(&["cp", &at(&img, "/f"), s(&fifo)]);
    assert!(code == 1 && err.contains("not a regular file"), "{err}");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    if is_root() {
        let null = d.join("null");
        let c = std::ffi::CString::new(s(&null)).unwrap();
        // SAFETY: a valid C string.
        let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(made, 0);
        fails(&["cp", &at(&img, "/f"), s(&null)]);
        assert!(
            std::fs::symlink_metadata(&null)
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }
    // Inside the image: a second name of the destination sees the copy.
    ok(&["ln", s(&img), "/f", "/f_link"]);
    std::fs::write(&src, b"third").unwrap();
    ok(&["cp", s(&src), &at(&img, "/f")]);
    assert_eq!(ok(&["cat", s(&img), "/f_link"]), "third");
    fsck_clean(&img);
}

#[test]
fn image_operands_follow_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    fs::write(dir.path().join("hello"), b"hi\n").unwrap();
    ok(&["cp", s(&dir.path().join("hello")), &at(&img, "/hello")]);
    // A host directory whose name has a colon, and a host path after a
    // colon that is not absolute: both stay host paths.
    let colon_dir = dir.path().join("x:");
    fs::create_dir(&colon_dir).unwrap();
    ok(&[
        "cp",
        &at(&img, "/hello"),
        &format!("{}/y", colon_dir.display()),
    ]);
    assert_eq!(fs::read(colon_dir.join("y")).unwrap(), b"hi\n");
    let rel = format!("{}:rel", img.display());
    ok(&["cp", &at(&img, "/hello"), &rel]);
    assert_eq!(fs::read(&rel).unwrap(), b"hi\n");
    // `a:/b` beside a file `a` is an image operand; `./a:/b` is the host
    // file `b` in the host directory `a:`.
    fs::create_dir(dir.path().join("t.img:")).unwrap();
    let out = Command::new(ULFS)
        .current_dir(dir.path())
        .args(["cp", "t.img:/hello", "./t.img:/copied"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(dir.path().join("t.img:/copied")).unwrap(), b"hi\n");
    assert_eq!(ok(&["ls", s(&img)]), "hello\n");
    fsck_clean(&img);
}

// ---------------------------------------------------------------- mv, ln

#[test]
fn mv_moves_across_directories() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    ok(&["mkdir", s(&img), "/inbox/sub", "/archive", "-p"]);
    ok(&["touch", s(&img), "/inbox/a", "/inbox/sub/deep", "/inbox/b"]);
    let ino = stat(&img, "/inbox/a")["inode"].clone();

    ok(&["mv", s(&img), "/inbox/a", "/archive"]);
    assert_eq!(stat(&img, "/archive/a")["inode"], ino, "a move is a rename");
    ok(&["mv", s(&img), "/inbox/b", "/archive/renamed"]);
    ok(&["mv", s(&img), "/inbox/sub", "/archive/"]);
    assert_eq!(ok(&["ls", s(&img), "/inbox"]), "");
    assert_eq!(
        ok(&["tree", s(&img), "/archive"]),
        "/archive\n├── a\n├── renamed\n└── sub\n    └── deep\n\n1 directory, 3 files\n"
    );

    let (_, err) = fails(&["mv", s(&img), "/archive", "/archive/sub/x"]);
    assert!(err.contains("into itself"), "{err}");
    let (_, err) = fails(&["mv", s(&img), "/nope", "/archive"]);
    assert!(err.contains("/nope: No such file"), "{err}");
    let (_, err) = fails(&[
        "mv",
        s(&img),
        "/archive/a",
        "/archive/renamed",
        "/archive/a2",
    ]);
    assert!(err.contains("Not a directory"), "{err}");
    ok(&["mkdir", s(&img), "/archive/sub/a"]);
    let (_, err) = fails(&["mv", s(&img), "/archive/a", "/archive/sub"]);
    assert!(err.contains("cannot overwrite directory"), "{err}");
    ok(&["touch", s(&img), "/archive/keep"]);
    ok(&["mv", "-n", s(&img), "/archive/renamed", "/archive/keep"]);
    assert!(
        ok(&["ls", s(&img), "/archive"]).contains("renamed"),
        "-n replaced"
    );
    fsck_clean(&img);
}

#[test]
fn ln_makes_hard_and_symbolic_links() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    let host = dir.path().join("f");
    fs::write(&host, b"content\n").unwrap();
    ok(&["import", s(&img), s(&host), "/d"]);

    ok(&["ln", s(&img), "/d/f", "/d/hard"]);
    let f = stat(&img, "/d/f");
    let hard = stat(&img, "/d/hard");
    assert_eq!(f["inode"], hard["inode"]);
    assert_eq!(f["nlink"], 2);

    ok(&["ln", "-s", s(&img), "f", "/d/soft"]);
    let soft = stat(&img, "/d/soft");
    assert_eq!(soft["type"], "symlink");
    assert_eq!(soft["target"], "f");
    assert_eq!(ok(&["cat", s(&img), "/d/soft"]), "content\n");

    // Into a directory, under the targets' names.
    ok(&["mkdir", s(&img), "/e"]);
    ok(&["ln", s(&img), "/d/f", "/d/hard", "/e"]);
    assert_eq!(stat(&img, "/d/f")["nlink"], 4);

    let (_, err) = fails(&["ln", s(&img), "/d", "/dirlink"]);
    assert!(err.contains("hard link not allowed for directory"), "{err}");
    let (_, err) = fails(&["ln", s(&img), "/d/f", "/d/soft"]);
    assert!(err.contains("File exists"), "{err}");
    let (_, err) = fails(&["ln", s(&img), "/d/missing", "/d/x"]);
    assert!(err.contains("/d/missing: No such file"), "{err}");
    ok(&["ln", "-sf", s(&img), "/elsewhere", "/d/soft"]);
    assert_eq!(stat(&img, "/d/soft")["target"], "/elsewhere");
    fsck_clean(&img);
}

// ---------------------------------------------------------------- chmod, chown, touch

#[test]
fn chmod_chown_and_touch_show_in_stat_json() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    ok(&["mkdir", s(&img), "/d/sub", "-p"]);
    ok(&["touch", s(&img), "/d/f", "/d/sub/g"]);
    assert_eq!(stat(&img, "/d/f")["mode"], 0o644);
    assert_eq!(stat(&img, "/d/f")["size"], 0);
    ok(&["ln", "-s", s(&img), "f", "/d/link"]);

    ok(&["chmod", s(&img), "640", "/d/f"]);
    assert_eq!(stat(&img, "/d/f")["mode"], 0o640);
    ok(&["chmod", s(&img), "u+x,g-r,o+w", "/d/f"]);
    assert_eq!(stat(&img, "/d/f")["mode"], 0o702);
    ok(&["chmod", s(&img), "4755", "/d/link"]);
    assert_eq!(
        stat(&img, "/d/f")["mode"],
        0o4755,
        "a symlink operand is followed"
    );
    ok(&["chmod", "-R", s(&img), "go-rx", "/d"]);
    assert_eq!(stat(&img, "/d")["mode"], 0o700);
    assert_eq!(stat(&img, "/d/sub")["mode"], 0o700);
    assert_eq!(stat(&img, "/d/sub/g")["mode"], 0o600);
    assert_eq!(stat(&img, "/d/link")["mode"], 0o777);

    ok(&["chown", s(&img), "1234:5678", "/d/f"]);
    let f = stat(&img, "/d/f");
    assert_eq!(
        (f["uid"].as_u64(), f["gid"].as_u64()),
        (Some(1234), Some(5678))
    );
    ok(&["chown", s(&img), ":99", "/d/f"]);
    assert_eq!(stat(&img, "/d/f")["uid"], 1234);
    assert_eq!(stat(&img, "/d/f")["gid"], 99);
    ok(&["chown", "-h", s(&img), "7", "/d/link"]);
    assert_eq!(stat(&img, "/d/link")["uid"], 7);
    assert_eq!(stat(&img, "/d/f")["uid"], 1234);
    ok(&["chown", "-R", s(&img), "42:43", "/d"]);
    for p in ["/d", "/d/sub", "/d/sub/g", "/d/f", "/d/link"] {
        let v = stat(&img, p);
        assert_eq!(
            (v["uid"].as_u64(), v["gid"].as_u64()),
            (Some(42), Some(43)),
            "{p}"
        );
    }

    ok(&[
        "touch",
        s(&img),
        "-d",
        "@1234567890.123456789",
        "/d/f",
        "/d/new",
    ]);
    for p in ["/d/f", "/d/new"] {
        let v = stat(&img, p);
        assert_eq!(time_of(&v, "mtime"), (1_234_567_890, 123_456_789), "{p}");
        assert_eq!(time_of(&v, "atime"), (1_234_567_890, 123_456_789), "{p}");
    }
    ok(&["touch", "-m", s(&img), "-d", "2001-02-03T04:05:06Z", "/d/f"]);
    let v = stat(&img, "/d/f");
    assert_eq!(time_of(&v, "mtime"), (981_173_106, 0));
    assert_eq!(time_of(&v, "atime"), (1_234_567_890, 123_456_789));
    ok(&["touch", "-a", s(&img), "-r", "/d/f", "/d/new"]);
    assert_eq!(
        time_of(&stat(&img, "/d/new"), "atime"),
        (1_234_567_890, 123_456_789)
    );
    ok(&["touch", "-h", s(&img), "-d", "@100", "/d/link"]);
    assert_eq!(time_of(&stat(&img, "/d/link"), "mtime"), (100, 0));
    assert_eq!(time_of(&stat(&img, "/d/f"), "mtime"), (981_173_106, 0));
    ok(&["touch", "-c", s(&img), "/d/not_made"]);
    assert!(
        fails(&["stat", s(&img), "/d/not_made"])
            .1
            .contains("No such file")
    );
    let before = ok(&["touch", s(&img), "/d/plain"]);
    assert_eq!(before, "");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((time_of(&stat(&img, "/d/plain"), "mtime").0 - now).abs() < 60);

    // Bad input: a usage error, nothing changed.
    let snapshot = ok(&["stat", s(&img), "/d/f", "--json"]);
    for args in [
        vec!["chmod", s(&img), "u+q", "/d/f"],
        vec!["chmod", s(&img), "8888", "/d/f"],
        vec!["chown", s(&img), "root", "/d/f"],
        vec!["chown", s(&img), "1:", "/d/f"],
        vec!["touch", s(&img), "-d", "2001-02-30", "/d/f"],
        vec!["touch", s(&img), "-t", "9999", "/d/f"],
    ] {
        let (code, err) = fails(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    assert_eq!(ok(&["stat", s(&img), "/d/f", "--json"]), snapshot);
    let (code, err) = fails(&["chmod", s(&img), "600", "/d/missing", "/d/f"]);
    assert_eq!(code, 1);
    assert!(err.contains("/d/missing"), "{err}");
    assert_eq!(
        stat(&img, "/d/f")["mode"],
        0o600,
        "the other operand is done"
    );
    fsck_clean(&img);
}

// ---------------------------------------------------------------- stat, du, tree, json

#[test]
fn stat_shows_what_stat1_shows() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    let host = dir.path().join("data");
    fs::write(&host, noise(10_000, 3)).unwrap();
    chmod(&host, 0o644);
    set_times(&host, (1_000_000_000, 1), (1_100_000_000, 2));
    ok(&["import", s(&img), s(&host), "/"]);
    ok(&["ln", "-s", s(&img), "data", "/link"]);
    let out = ok(&["stat", s(&img), "/data", "/link"]);
    for want in [
        "  File: /data\n",
        "Size: 10000",
        "regular file",
        "Links: 1",
        "(0644/-rw-r--r--)",
        "  File: /link -> data\n",
        "symbolic link",
        ".000000002 ",
    ] {
        assert!(out.contains(want), "stat lacks {want:?}:\n{out}");
    }
    let v = stat(&img, "/data");
    assert_eq!(v["size"], 10_000);
    assert_eq!(v["blocks"], 24, "three 4 KiB blocks, in 512-byte units");
    assert_eq!(v["type"], "file");
    assert_eq!(v["name"], "data");
    assert_eq!(time_of(&v, "mtime"), (1_100_000_000, 2));
    let l = json(&ok(&["stat", "-L", s(&img), "/link", "--json"]));
    assert_eq!(l[0]["type"], "file");
    let (code, err) = fails(&["stat", s(&img), "/nope", "/data"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nope"), "{err}");
}

#[test]
fn du_adds_up_to_the_file_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "32M");
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    let sizes = [
        ("a", 1usize),
        ("b", 4096),
        ("c", 100_000),
        ("sub/d", 5000),
        ("sub/deeper/e", 1 << 20),
    ];
    for (i, (name, len)) in sizes.iter().enumerate() {
        fs::write(src.join(name), noise(*len, i as u64 + 1)).unwrap();
    }
    fs::hard_link(src.join("c"), src.join("sub/c_again")).unwrap();
    ok(&["cp", "-a", s(&src), &at(&img, "/t")]);

    let entries = json(&ok(&["ls", "-R", s(&img), "/t", "--json"]));
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 8, "{entries:?}");
    let top = stat(&img, "/t");
    // Each inode once (the hard link counts at its first name).
    let mut by_inode: HashMap<u64, &Value> = HashMap::new();
    for e in entries {
        by_inode.insert(e["inode"].as_u64().unwrap(), e);
    }
    let bytes: u64 = by_inode
        .values()
        .map(|e| e["size"].as_u64().unwrap())
        .sum::<u64>()
        + top["size"].as_u64().unwrap();
    let blocks: u64 = by_inode
        .values()
        .map(|e| e["blocks"].as_u64().unwrap())
        .sum::<u64>()
        + top["blocks"].as_u64().unwrap();
    let file_bytes: u64 = sizes.iter().map(|(_, l)| *l as u64).sum();
    assert!(bytes >= file_bytes);

    let line = |out: String| -> (String, String) {
        let l = out.lines().last().unwrap().to_string();
        let (n, p) = l.split_once('\t').unwrap();
        (n.to_string(), p.to_string())
    };
    assert_eq!(
        line(ok(&["du", "-sb", s(&img), "/t"])),
        (bytes.to_string(), "/t".into())
    );
    assert_eq!(
        line(ok(&["du", "-s", s(&img), "/t"])),
        ((blocks * 512).div_ceil(1024).to_string(), "/t".into())
    );
    assert_eq!(
        line(ok(&["du", "-s", "--apparent-size", s(&img), "/t"])).0,
        bytes.div_ceil(1024).to_string()
    );
    // Every directory, deepest first, the operand last; -a adds files.
    let all = ok(&["du", "-b", s(&img), "/t"]);
    let paths: Vec<&str> = all.lines().map(|l| l.split_once('\t').unwrap().1).collect();
    assert_eq!(paths, ["/t/sub/deeper", "/t/sub", "/t"]);
    let deeper = stat(&img, "/t/sub/deeper")["size"].as_u64().unwrap() + (1 << 20);
    assert!(
        all.starts_with(&format!("{deeper}\t/t/sub/deeper\n")),
        "{all}"
    );
    let with_files = ok(&["du", "-ab", s(&img), "/t"]);
    assert!(with_files.contains("100000\t/t/c\n"), "{with_files}");
    assert!(with_files.contains("0\t/t/sub/c_again\n"), "{with_files}");
    let d1 = ok(&["du", "-d", "1", s(&img), "/t"]);
    assert_eq!(d1.lines().count(), 2, "{d1}");
    let total = ok(&["du", "-sbc", s(&img), "/t/a", "/t/b"]);
    assert_eq!(total, "1\t/t/a\n4096\t/t/b\n4097\ttotal\n");
    let human = ok(&["du", "-sh", "--apparent-size", s(&img), "/t/sub/deeper/e"]);
    assert_eq!(human, "1.0M\t/t/sub/deeper/e\n");
    let (_, err) = fails(&["du", s(&img), "/missing"]);
    assert!(err.contains("/missing"), "{err}");
}

#[test]
fn tree_and_ls_tree_draw_the_same_tree() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    ok(&["mkdir", s(&img), "/r/a/x", "/r/b", "-p"]);
    ok(&[
        "touch",
        s(&img),
        "/r/a/x/deep",
        "/r/a/file",
        "/r/.hidden",
        "/r/z",
    ]);
    ok(&["ln", "-s", s(&img), "a/file", "/r/link"]);
    let want = "\
/r
├── .hidden
├── a
│   ├── file
│   └── x
│       └── deep
├── b
├── link -> a/file
└── z

3 directories, 5 files
";
    assert_eq!(ok(&["tree", s(&img), "/r"]), want);
    assert_eq!(ok(&["ls", s(&img), "/r", "--tree"]), want);
    let shallow = ok(&["tree", s(&img), "/r", "-L", "1"]);
    assert!(
        !shallow.contains("deep") && shallow.contains("├── a\n"),
        "{shallow}"
    );
    assert!(shallow.ends_with("\n2 directories, 3 files\n"), "{shallow}");
    let dirs = ok(&["tree", "-d", s(&img), "/r"]);
    assert_eq!(
        dirs,
        "/r\n├── a\n│   └── x\n└── b\n\n3 directories, 0 files\n"
    );
    let (_, err) = fails(&["tree", s(&img), "/none"]);
    assert!(err.contains("/none"), "{err}");
    // A control character in a name cannot break the drawing.
    ok(&["touch", s(&img), "/r/b/two\nlines"]);
    let drawn = ok(&["tree", s(&img), "/r/b"]);
    assert_eq!(drawn, "/r/b\n└── two?lines\n\n0 directories, 1 file\n");
}

#[test]
fn info_and_ls_json_parse_with_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "32M");
    let info = json(&ok(&["info", s(&img), "--json"]));
    assert_eq!(info["image_bytes"], 32 << 20);
    assert_eq!(info["block_size"], 4096);
    assert_eq!(info["mode"], "journal");
    assert_eq!(info["clean"], true);
    assert_eq!(info["uuid"].as_str().unwrap().len(), 36);
    assert_eq!(
        info["used_blocks"].as_u64().unwrap() + info["free_blocks"].as_u64().unwrap(),
        info["total_blocks"].as_u64().unwrap()
    );
    for field in [
        "format_version",
        "label",
        "used_inodes",
        "free_inodes",
        "journal_blocks",
        "journal_replayed",
        "mount_count",
    ] {
        assert!(!info[field].is_null(), "info --json lacks {field}");
    }

    ok(&["mkdir", s(&img), "/d/e", "-p"]);
    ok(&["touch", s(&img), "/d/f", "/d/e/g"]);
    ok(&["ln", "-s", s(&img), "f", "/d/l"]);
    let flat = json(&ok(&["ls", s(&img), "/d", "--json"]));
    let names: Vec<&str> = flat
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["e", "f", "l"]);
    let deep = json(&ok(&["ls", "-R", s(&img), "/d", "--json"]));
    let paths: Vec<&str> = deep
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/d/e", "/d/f", "/d/l", "/d/e/g"]);
    let first = &deep[0];
    for field in [
        "path",
        "name",
        "type",
        "mode",
        "mode_string",
        "size",
        "blocks",
        "block_size",
        "nlink",
        "inode",
        "uid",
        "gid",
        "atime",
        "mtime",
        "ctime",
        "btime",
        "target",
    ] {
        assert!(
            first.get(field).is_some(),
            "ls --json lacks {field}: {first}"
        );
    }
    assert_eq!(deep[2]["target"], "f");
    assert_eq!(deep[0]["type"], "directory");
    assert_eq!(deep[0]["mode_string"], "drwxr-xr-x");
    // A failing operand still leaves stdout one valid document.
    let out = ulfs(&["ls", s(&img), "/missing", "--json"]);
    assert!(!out.status.success());
    assert_eq!(json(&text(&out.stdout)), serde_json::json!([]));
}

// ---------------------------------------------------------------- import/export of one file

#[test]
fn import_and_export_accept_a_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), "t.img", "16M");
    let host = dir.path().join("report.txt");
    let data = noise(70_000, 9);
    fs::write(&host, &data).unwrap();
    chmod(&host, 0o640);
    set_times(&host, (1_200_000_000, 3), (1_250_000_000, 4));

    ok(&["import", s(&img), s(&host), "/docs/2024"]);
    assert_eq!(ok(&["ls", s(&img), "/docs/2024"]), "report.txt\n");
    let v = stat(&img, "/docs/2024/report.txt");
    assert_eq!(v["size"], 70_000);
    assert_eq!(v["mode"], 0o640);
    assert_eq!(time_of(&v, "mtime"), (1_250_000_000, 4));
    // Again: the file is replaced, not duplicated.
    fs::write(&host, b"v2").unwrap();
    ok(&["import", s(&img), s(&host), "/docs/2024"]);
    assert_eq!(ok(&["cat", s(&img), "/docs/2024/report.txt"]), "v2");
    fsck_clean(&img);

    let out = dir.path().join("out");
    ok(&["export", s(&img), "/docs/2024/report.txt", s(&out)]);
    assert_eq!(fs::read(out.join("report.txt")).unwrap(), b"v2");
    let (_, err) = fails(&["import", s(&img), s(&dir.path().join("absent")), "/x"]);
    assert!(err.contains("absent: No such file"), "{err}");
    fsck_clean(&img);
}

// ---------------------------------------------------------------- help and README

/// Every command listed by `ulfs help`.
fn commands() -> Vec<String> {
    let help = ok(&["help"]);
    let list = help.split("Commands:").nth(1).unwrap();
    let list = list.split("\n\n").next().unwrap();
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_has_an_example_in_help_and_readme() {
    let cmds = commands();
    for want in [
        "cp", "mv", "ln", "chmod", "chown", "touch", "stat", "du", "tree", "import",
    ] {
        assert!(
            cmds.iter().any(|c| c == want),
            "{want} missing from {cmds:?}"
        );
    }
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
        .expect("README.md");
    for cmd in &cmds {
        let help = ok(&["help", cmd]);
        let example = help
            .split("Example:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("`ulfs {cmd} --help` has no example:\n{help}"));
        assert!(
            example.trim_start().starts_with(&format!("ulfs {cmd} ")),
            "`ulfs {cmd} --help`'s example is not a {cmd} command: {example}"
        );
        assert!(
            readme.contains(&format!("\nulfs {cmd} ")),
            "README's command list has no `ulfs {cmd}` line"
        );
    }
}

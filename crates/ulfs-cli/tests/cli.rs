//! End-to-end tests of the `ulfs` binary: every command, its error paths,
//! and a full host -> image -> host round trip checked with the real
//! `diff -r --no-dereference`.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use ulfs_testkit::host_files::{chmod, is_root, noise, set_times};

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");

fn ulfs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(ULFS).args(args).output().expect("run ulfs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run and require success; returns stdout.
fn ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = ulfs(args);
    let shown: Vec<_> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert!(
        out.status.success(),
        "ulfs {shown:?} failed ({:?}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Run and require failure; returns stderr.
fn fails<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String) {
    let out = ulfs(args);
    let shown: Vec<_> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert!(
        !out.status.success(),
        "ulfs {shown:?} unexpectedly succeeded: {}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ulfs: "),
        "error not in `ulfs: ...` shape: {stderr:?}"
    );
    (out.status.code().unwrap_or(-1), stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn fresh_image(dir: &Path, size: &str) -> PathBuf {
    let img = dir.join("test.img");
    ok(&["mkfs", s(&img), size, "--label", "testvol"]);
    img
}

// ---------------------------------------------------------------- mkfs

#[test]
fn mkfs_twice_without_force_fails_and_keeps_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    ok(&["mkdir", s(&img), "/keepme"]);
    let before = fs::read(&img).unwrap();

    let (_, err) = fails(&["mkfs", s(&img), "16M"]);
    assert!(err.contains("--force"), "no hint about --force: {err}");
    assert_eq!(
        fs::read(&img).unwrap(),
        before,
        "refused mkfs modified the image"
    );
    assert_eq!(ok(&["ls", s(&img)]), "keepme\n");

    ok(&["mkfs", s(&img), "16M", "--force"]);
    assert_eq!(
        ok(&["ls", s(&img)]),
        "",
        "--force did not make a fresh file system"
    );
}

#[test]
fn mkfs_rejects_bad_sizes_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("x.img");
    for bad in [
        "12X",
        "1.5G",
        "",
        "-64M",
        "64 M",
        "M",
        "99999999999999999999",
    ] {
        let (code, err) = fails(&["mkfs", s(&img), bad]);
        assert_eq!(code, 2, "bad size {bad:?} exit code");
        assert!(err.contains("invalid size"), "size {bad:?}: {err}");
        assert!(!img.exists(), "image created for bad size {bad:?}");
    }
}

#[test]
fn mkfs_modes_and_journal_size() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("j.img");
    ok(&[
        "mkfs",
        s(&img),
        "16M",
        "--mode",
        "journal",
        "--journal-size",
        "1M",
    ]);
    let out = ok(&["info", s(&img)]);
    assert!(out.contains("journal"), "{out}");
    assert!(out.contains("256 blocks (1.0 MiB), empty"), "{out}");
    // Journal is the default.
    let def = dir.path().join("d.img");
    ok(&["mkfs", s(&def), "16M"]);
    let out = ok(&["info", s(&def)]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("mode:") && l.ends_with("journal")),
        "{out}"
    );
    // A journal size without a journal is a usage error, and creates nothing.
    let none = dir.path().join("n.img");
    let (_, err) = fails(&[
        "mkfs",
        s(&none),
        "16M",
        "--mode",
        "none",
        "--journal-size",
        "1M",
    ]);
    assert!(err.contains("--journal-size needs --mode journal"), "{err}");
    assert!(!none.exists());
    ok(&["mkfs", s(&none), "16M", "--mode", "none"]);
    let out = ok(&["info", s(&none)]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("journal:") && l.ends_with("none")),
        "{out}"
    );
}

// ---------------------------------------------------------------- info

#[test]
fn info_describes_a_fresh_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "32M");
    let out = ok(&["info", s(&img)]);
    for want in [
        "testvol",
        "4096",
        "33554432",
        "mode:",
        "journal",
        "clean:",
        "uuid:",
        "free blocks:",
        "used inodes:",
    ] {
        assert!(out.contains(want), "info lacks {want:?}:\n{out}");
    }
    let uuid_line = out.lines().find(|l| l.starts_with("uuid:")).unwrap();
    let uuid = uuid_line.split_whitespace().last().unwrap();
    assert_eq!(uuid.len(), 36, "uuid {uuid}");
    // Values are aligned in one column.
    let value_column = |l: &str| {
        let colon = l.find(':').expect("key: value line");
        colon + 1 + l[colon + 1..].find(|c| c != ' ').expect("a value")
    };
    let cols: std::collections::HashSet<usize> = out.lines().map(value_column).collect();
    assert_eq!(cols.len(), 1, "values not aligned:\n{out}");
}

#[test]
fn info_on_random_bytes_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    fs::write(&junk, noise(1 << 20, 7)).unwrap();
    let (code, err) = fails(&["info", s(&junk)]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!("ulfs: info: {}: ", junk.display())),
        "{err}"
    );
    assert!(err.lines().count() == 1, "expected one clear line: {err}");
    let (_, err) = fails(&["info", s(&dir.path().join("missing.img"))]);
    assert!(err.contains("missing.img"), "{err}");
}

#[test]
fn an_image_in_use_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    // A program holding the image read-write, as `ulfs run` would.
    let mut held = ulfs::Fs::mount(&img, ulfs::MountOptions::default()).unwrap();
    held.mkdir("/mine", 0o755).unwrap();
    for args in [
        vec!["mkdir", s(&img), "/other"],
        vec!["ls", s(&img)],
        vec!["mkfs", s(&img), "16M", "--force"],
    ] {
        let (code, err) = fails(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains("in use"), "{args:?}: {err}");
    }
    let (code, err) = fails(&["fsck", s(&img), "--repair"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("in use"), "{err}");
    held.unmount().unwrap();
    let listing = ok(&["ls", s(&img)]);
    assert!(listing.lines().any(|l| l == "mine"), "{listing}");
    ok(&["fsck", s(&img)]);
    // Not an image at all: a directory.
    let (_, err) = fails(&["info", s(dir.path())]);
    assert!(err.contains("is a directory"), "{err}");
}

// ---------------------------------------------------------------- cat

#[test]
fn cat_prints_files_and_reports_missing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    let blob = noise(3 << 20, 42);
    fs::write(src.join("blob"), &blob).unwrap();
    fs::write(src.join("d/hello"), b"hello\n").unwrap();
    ok(&["import", s(&img), s(&src)]);

    let out = ulfs(&["cat", s(&img), "/blob", "/d/hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut want = blob.clone();
    want.extend_from_slice(b"hello\n");
    assert!(
        out.stdout == want,
        "cat output differs from the imported bytes"
    );

    // Missing path: non-zero, ENOENT-style message, other operands still printed.
    let out = ulfs(&["cat", s(&img), "/nope", "/d/hello"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stdout, b"hello\n");
    let err = text(&out.stderr);
    assert!(
        err.contains("ulfs: cat: /nope: No such file or directory"),
        "{err}"
    );

    let (_, err) = fails(&["cat", s(&img), "/d"]);
    assert!(err.contains("Is a directory"), "{err}");
}

// ---------------------------------------------------------------- mkdir / rm

#[test]
fn mkdir_with_and_without_parents() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let (_, err) = fails(&["mkdir", s(&img), "/a/b/c"]);
    assert!(
        err.contains("/a/b/c") && err.contains("No such file or directory"),
        "{err}"
    );
    ok(&["mkdir", s(&img), "-p", "/a/b/c", "/a/x"]);
    ok(&["mkdir", s(&img), "-p", "/a/b"]);
    let (_, err) = fails(&["mkdir", s(&img), "/a"]);
    assert!(err.contains("File exists"), "{err}");
    assert_eq!(ok(&["ls", s(&img), "/a"]), "b\nx\n");
    let long = ok(&["ls", s(&img), "-l", "/a"]);
    assert!(long.starts_with("drwxr-xr-x "), "{long}");
}

#[test]
fn rm_files_dirs_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("full/sub/deeper")).unwrap();
    fs::write(src.join("full/sub/deeper/f"), b"x").unwrap();
    fs::write(src.join("full/g"), b"y").unwrap();
    fs::write(src.join("top"), b"z").unwrap();
    ok(&["import", s(&img), s(&src)]);

    let (_, err) = fails(&["rm", s(&img), "/full"]);
    assert!(
        err.contains("/full") && err.contains("Is a directory"),
        "{err}"
    );
    assert_eq!(
        ok(&["ls", s(&img), "/full"]),
        "g\nsub\n",
        "failed rm changed the directory"
    );

    let (_, err) = fails(&["rm", s(&img), "/missing"]);
    assert!(err.contains("No such file or directory"), "{err}");
    let (_, err) = fails(&["rm", s(&img), "-r", "/"]);
    assert!(err.contains("root"), "{err}");

    ok(&["rm", s(&img), "/top"]);
    ok(&["rm", s(&img), "-r", "/full"]);
    assert_eq!(ok(&["ls", s(&img)]), "");
    let fsck = ulfs(&["fsck", s(&img)]);
    assert_eq!(
        fsck.status.code(),
        Some(0),
        "fsck after rm -r: {}",
        text(&fsck.stdout)
    );
}

// ---------------------------------------------------------------- ls

#[test]
fn ls_long_shows_modes_owners_and_symlink_targets() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("d1/d2/d3")).unwrap();
    fs::write(src.join("script"), b"#!/bin/sh\n").unwrap();
    if is_root() {
        // Before chmod: chown clears set-id bits.
        std::os::unix::fs::lchown(src.join("script"), Some(1234), Some(5678)).unwrap();
    }
    chmod(&src.join("script"), 0o4751);
    fs::write(src.join("d1/d2/d3/leaf"), b"leaf").unwrap();
    std::os::unix::fs::symlink("d1/d2", src.join("link")).unwrap();
    chmod(&src.join("d1"), 0o750);
    set_times(&src.join("script"), (0, 0), (1_600_000_000, 0));
    ok(&["import", s(&img), s(&src)]);

    let out = ok(&["ls", s(&img), "-l"]);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.ends_with(name) || l.contains(&format!(" {name} -> ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"))
            .to_string()
    };
    assert!(line("d1").starts_with("drwxr-x--- "), "{out}");
    assert!(line("script").starts_with("-rwsr-x--x "), "{out}");
    assert!(line("script").contains(" 10 "), "size missing: {out}");
    assert!(line("script").contains("2020-09-1"), "mtime missing: {out}");
    if is_root() {
        assert!(
            line("script").contains(" 1234 5678 "),
            "owner missing: {out}"
        );
    }
    let link = line("link");
    assert!(link.starts_with("lrwxrwxrwx "), "{out}");
    assert!(link.ends_with(" link -> d1/d2"), "{out}");

    // Plain listing is sorted, one name a line; a file operand prints itself.
    assert_eq!(ok(&["ls", s(&img)]), "d1\nlink\nscript\n");
    assert_eq!(ok(&["ls", s(&img), "/d1/d2/d3/leaf"]), "/d1/d2/d3/leaf\n");
    // A symlink operand to a directory lists the directory (like ls).
    assert_eq!(ok(&["ls", s(&img), "/link"]), "d3\n");

    let rec = ok(&["ls", s(&img), "-R", "/d1"]);
    assert_eq!(rec, "/d1:\nd2\n\n/d1/d2:\nd3\n\n/d1/d2/d3:\nleaf\n");
    let rec_root = ok(&["ls", s(&img), "-R"]);
    assert!(rec_root.starts_with("/:\n"), "{rec_root}");
    assert!(rec_root.contains("\n/d1/d2/d3:\nleaf\n"), "{rec_root}");
    // Symlinked directories are not descended into.
    assert!(!rec_root.contains("/link:"), "{rec_root}");

    let (_, err) = fails(&["ls", s(&img), "/nothing"]);
    assert!(
        err.contains("ulfs: ls: /nothing: No such file or directory"),
        "{err}"
    );
}

// ---------------------------------------------------------------- fsck

#[test]
fn fsck_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let out = ulfs(&["fsck", s(&img)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fresh image: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    let junk = dir.path().join("junk.bin");
    fs::write(&junk, noise(1 << 20, 99)).unwrap();
    let (code, err) = fails(&["fsck", s(&junk)]);
    assert_eq!(code, 8, "{err}");
    let (code, _) = fails(&["fsck", s(&dir.path().join("absent.img"))]);
    assert_eq!(code, 8);
}

// ---------------------------------------------------------------- import/export

#[test]
fn import_skips_special_files_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("regular"), b"data").unwrap();
    let fifo = CString::new(src.join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let out = ulfs(&["import", s(&img), s(&src), "/into/here"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("pipe") && err.contains("skipping fifo"),
        "{err}"
    );
    assert_eq!(ok(&["ls", s(&img), "/into/here"]), "regular\n");

    // A single special file is refused in words (and not waited on).
    let (_, err) = fails(&["import", s(&img), s(&src.join("pipe"))]);
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn export_of_a_single_file_and_into_existing_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "16M");
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/file"), b"payload").unwrap();
    chmod(&src.join("sub/file"), 0o600);
    set_times(
        &src.join("sub/file"),
        (1_000_000_000, 5),
        (1_100_000_000, 777),
    );
    ok(&["import", s(&img), s(&src), "/x/y"]);

    let out = dir.path().join("out");
    ok(&["export", s(&img), "/x/y/sub/file", s(&out)]);
    let exported = out.join("file");
    assert_eq!(fs::read(&exported).unwrap(), b"payload");
    let m = fs::metadata(&exported).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600);
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_100_000_000, 777));

    // Exporting again over existing files replaces them.
    fs::write(&exported, b"stale and longer").unwrap();
    ok(&["export", s(&img), "/x/y/sub/file", s(&out)]);
    assert_eq!(fs::read(&exported).unwrap(), b"payload");

    let nowhere = dir.path().join("nowhere");
    let (_, err) = fails(&["export", s(&img), "/x/nothing", s(&nowhere)]);
    assert!(
        err.contains("/x/nothing") && err.contains("No such file"),
        "{err}"
    );
    assert!(!nowhere.exists(), "failed export left a directory behind");
}

struct Expect {
    rel: &'static str,
    mode: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
}

/// A host tree with everything a faithful copy must preserve.
fn build_tree(root: &Path) -> Vec<Expect> {
    fs::create_dir(root).unwrap();
    let long_name = "L".repeat(255);
    fs::write(root.join(&long_name), b"long name\n").unwrap();
    fs::create_dir(root.join(format!("{}d", "D".repeat(254)))).unwrap();

    let mut deep = root.to_path_buf();
    for i in 0..30 {
        deep.push(format!("level{i:02}"));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("bottom.txt"), b"deep down\n").unwrap();

    fs::write(root.join("empty"), b"").unwrap();
    fs::create_dir(root.join("emptydir")).unwrap();
    fs::write(root.join("big.bin"), noise(20 << 20, 0x1234_5678)).unwrap();

    // A file with a hole in the middle and one at the end.
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"start", 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &noise(5000, 3), 3 << 20).unwrap();
    sparse.set_len(6 << 20).unwrap();
    drop(sparse);

    fs::write(root.join("linked_a"), b"shared inode\n").unwrap();
    fs::hard_link(root.join("linked_a"), root.join("linked_b")).unwrap();

    fs::create_dir(root.join("links")).unwrap();
    std::os::unix::fs::symlink("../level00/level01", root.join("links/relative")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("links/absolute")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("links/dangling")).unwrap();

    fs::write(root.join("tool"), b"#!/bin/sh\necho hi\n").unwrap();
    chmod(&root.join("tool"), 0o755);
    fs::write(root.join("secret"), b"s3cret").unwrap();
    chmod(&root.join("secret"), 0o640);
    chmod(&root.join("links"), 0o750);

    let expect = vec![
        Expect {
            rel: "tool",
            mode: 0o755,
            atime: (1_500_000_000, 1),
            mtime: (1_500_000_001, 123_456_789),
        },
        Expect {
            rel: "secret",
            mode: 0o640,
            atime: (1_400_000_000, 0),
            mtime: (1_300_000_000, 999_999_999),
        },
        Expect {
            rel: "big.bin",
            mode: 0o644,
            atime: (1_700_000_000, 42),
            mtime: (1_700_000_100, 43),
        },
        Expect {
            rel: "links/relative",
            mode: 0o777,
            atime: (1_111_111_111, 1),
            mtime: (1_222_222_222, 2),
        },
        // Directories last: their times must survive their contents being written.
        Expect {
            rel: "links",
            mode: 0o750,
            atime: (1_000_000_000, 10),
            mtime: (1_000_000_000, 20),
        },
        Expect {
            rel: "level00/level01",
            mode: 0o755,
            atime: (900_000_000, 0),
            mtime: (900_000_000, 314_159_265),
        },
    ];
    for e in &expect {
        let p = root.join(e.rel);
        if !fs::symlink_metadata(&p).unwrap().file_type().is_symlink() {
            chmod(&p, e.mode);
        }
        set_times(&p, e.atime, e.mtime);
    }
    expect
}

#[test]
fn import_export_round_trip_is_faithful() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "128M");
    let src = dir.path().join("src");
    let expect = build_tree(&src);
    if is_root() {
        std::os::unix::fs::lchown(src.join("secret"), Some(4242), Some(4343)).unwrap();
    }

    ok(&["import", s(&img), s(&src)]);
    let out = dir.path().join("out");
    ok(&["export", s(&img), "/", s(&out)]);

    // Times and modes first: diff reads files and may move atimes.
    for e in &expect {
        let m = fs::symlink_metadata(out.join(e.rel)).unwrap();
        if !m.file_type().is_symlink() {
            assert_eq!(m.mode() & 0o7777, e.mode, "mode of {}", e.rel);
        }
        assert_eq!((m.mtime(), m.mtime_nsec()), e.mtime, "mtime of {}", e.rel);
        assert_eq!((m.atime(), m.atime_nsec()), e.atime, "atime of {}", e.rel);
    }
    if is_root() {
        let m = fs::metadata(out.join("secret")).unwrap();
        assert_eq!((m.uid(), m.gid()), (4242, 4343));
    }

    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&src)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "diff -r found differences:\n{}{}",
        text(&diff.stdout),
        text(&diff.stderr)
    );

    let a = fs::metadata(out.join("linked_a")).unwrap();
    let b = fs::metadata(out.join("linked_b")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hard link became two files");
    assert_eq!(a.nlink(), 2);
    assert_eq!(
        fs::read_link(out.join("links/dangling")).unwrap(),
        Path::new("does/not/exist")
    );
    assert_eq!(fs::metadata(out.join("sparse")).unwrap().len(), 6 << 20);
    assert_eq!(fs::metadata(out.join("empty")).unwrap().len(), 0);

    // The image itself reports the hard link and long names.
    let listing = ok(&["ls", s(&img), "-l"]);
    let linked: Vec<_> = listing
        .lines()
        .filter(|l| l.ends_with(" linked_a") || l.ends_with(" linked_b"))
        .collect();
    assert_eq!(linked.len(), 2, "{listing}");
    assert!(
        linked
            .iter()
            .all(|l| l.split_whitespace().nth(1) == Some("2")),
        "nlink: {linked:?}"
    );
    assert!(listing.contains(&"L".repeat(255)), "long name missing");
    let deep = ok(&[
        "cat",
        s(&img),
        &format!(
            "/{}/bottom.txt",
            (0..30)
                .map(|i| format!("level{i:02}"))
                .collect::<Vec<_>>()
                .join("/")
        ),
    ]);
    assert_eq!(deep, "deep down\n");

    let out = ulfs(&["fsck", s(&img)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fsck after import: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // Importing the same tree again over itself is a clean merge.
    ok(&["import", s(&img), s(&src)]);
    let again = dir.path().join("again");
    ok(&["export", s(&img), "/", s(&again)]);
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&src)
        .arg(&again)
        .status()
        .unwrap();
    assert!(diff.success(), "second import diverged");
}

// ---------------------------------------------------------------- fsck --repair

/// An image with a directory of files, imported from the host.
fn image_with_files(dir: &Path) -> PathBuf {
    let img = fresh_image(dir, "16M");
    let host = dir.join("host");
    fs::create_dir_all(host.join("d")).unwrap();
    for i in 0..50 {
        fs::write(
            host.join("d").join(format!("f{i}")),
            noise(3000 + i * 100, i as u64),
        )
        .unwrap();
    }
    ok(&["import", s(&img), s(&host), "/"]);
    img
}

/// Edits block `bid` of the image in place; `seal` recomputes its CRC.
fn edit_block(img: &Path, bid: usize, seal: bool, f: impl FnOnce(&mut [u8; 4096])) {
    let mut bytes = fs::read(img).unwrap();
    let b: &mut [u8; 4096] = (&mut bytes[bid * 4096..(bid + 1) * 4096])
        .try_into()
        .unwrap();
    f(b);
    if seal {
        ulfs::format::seal_block(b);
    }
    fs::write(img, &bytes).unwrap();
}

fn code_of(args: &[&str]) -> (i32, String) {
    let out = ulfs(args);
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

#[test]
fn fsck_repair_fixes_and_exits_like_fsck8() {
    let dir = tempfile::tempdir().unwrap();
    let img = image_with_files(dir.path());
    // A clean image: nothing to do, nothing changed.
    let before = fs::read(&img).unwrap();
    let (code, out) = code_of(&["fsck", "--repair", s(&img)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean"), "{out}");
    assert!(fs::read(&img).unwrap() == before);

    // Leak a free block in group 0's bitmap, and break the CRC of the map
    // block on top of it.
    let first_group = {
        let b = fs::read(&img).unwrap();
        u32::from_le_bytes(b[48..52].try_into().unwrap()) as usize
    };
    edit_block(&img, first_group, false, |b| {
        let i = (0..32640)
            .find(|i| b[16 + i / 8] & (1 << (i % 8)) == 0)
            .unwrap();
        b[16 + i / 8] |= 1 << (i % 8);
    });
    let (code, out) = code_of(&["fsck", s(&img)]);
    assert_eq!(code, 4, "{out}");
    let (code, out) = code_of(&["fsck", "--repair", s(&img)]);
    assert_eq!(code, 1, "errors corrected: {out}");
    assert!(out.contains("fixed: "), "{out}");
    assert!(out.contains("leaked"), "{out}");
    let (code, out) = code_of(&["fsck", s(&img)]);
    assert_eq!(code, 0, "after repair: {out}");
    let (code, out) = code_of(&["fsck", "-y", s(&img)]);
    assert_eq!(code, 0, "second repair: {out}");
    // The data survived.
    for i in [0usize, 17, 49] {
        let out = ulfs(&["cat", s(&img), &format!("/d/f{i}")]);
        assert!(out.status.success());
        assert_eq!(out.stdout, noise(3000 + i * 100, i as u64));
    }
}

#[test]
fn fsck_repair_reports_what_it_cannot_fix() {
    let dir = tempfile::tempdir().unwrap();
    let img = image_with_files(dir.path());
    // A file inode's mode destroyed (with a valid CRC), and a regular file
    // where /lost+found must be: the repair quarantines the inode but has
    // nowhere to put the blocks it may have owned, so it keeps them in use
    // and says so. (A destroyed root is made again, so it no longer serves.)
    let ino = {
        let mut fs = ulfs::Fs::mount(&img, ulfs::MountOptions::default()).unwrap();
        let fd = fs
            .open("/lost+found", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        fs.close(fd).unwrap();
        // f1, not f0: f0 holds zeros (noise with seed 0), and the repair
        // frees a block of zeros, which holds nothing to keep.
        let ino = fs.lstat("/d/f1").unwrap().ino as usize;
        fs.unmount().unwrap();
        ino
    };
    edit_block(&img, ino / 16, true, |b| {
        b[(ino % 16) * 256..(ino % 16) * 256 + 4].fill(0);
    });
    let (code, out) = code_of(&["fsck", "--repair", s(&img)]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("remaining: "), "{out}");
    assert!(out.contains("could not be repaired"), "{out}");

    // Both superblocks destroyed: nothing to repair from.
    let img2 = dir.path().join("nosb.img");
    ok(&["mkfs", s(&img2), "4M"]);
    edit_block(&img2, 0, false, |b| b.fill(0x5A));
    edit_block(&img2, 1, false, |b| b.fill(0x5A));
    let (code, err) = fails(&["fsck", "--repair", s(&img2)]);
    assert_eq!(code, 8, "{err}");
    let (code, _) = fails(&["fsck", "--repair", s(&dir.path().join("absent.img"))]);
    assert_eq!(code, 8);
}

// ---------------------------------------------------------------- deep trees, keep-going

/// A chain `/deep/d/d/.../d` of `levels` directories made through the API
/// (by descriptor: its paths pass PATH_MAX), with a file at the bottom.
fn deep_image(dir: &Path, levels: usize) -> PathBuf {
    let img = fresh_image(dir, "256M");
    let mut fs = ulfs::Fs::mount(&img, ulfs::MountOptions::default()).unwrap();
    fs.set_max_fds(8).unwrap();
    fs.mkdir("/deep", 0o755).unwrap();
    let mut at = fs
        .open("/deep", libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    for _ in 0..levels {
        fs.mkdirat(at, "d", 0o750).unwrap();
        let next = fs
            .openat(at, "d", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .unwrap();
        fs.close(at).unwrap();
        at = next;
    }
    let f = fs
        .openat(at, "leaf", libc::O_WRONLY | libc::O_CREAT, 0o644)
        .unwrap();
    assert_eq!(fs.write(f, b"bottom\n").unwrap(), 7);
    fs.close(f).unwrap();
    fs.close(at).unwrap();
    fs.unmount().unwrap();
    img
}

/// Reads `leaf` at the bottom of a host chain of `levels` `d` directories
/// below `top`, by descriptor (the path is past PATH_MAX).
fn read_deep_leaf(top: &Path, levels: usize) -> Vec<u8> {
    let c = CString::new(top.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; descriptors are closed below.
    let mut fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0);
    for _ in 0..levels {
        // SAFETY: a NUL-terminated name relative to a descriptor we hold.
        let next = unsafe { libc::openat(fd, c"d".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(next >= 0, "host chain too short");
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(fd) };
        fd = next;
    }
    // SAFETY: as above.
    let leaf = unsafe { libc::openat(fd, c"leaf".as_ptr(), libc::O_RDONLY) };
    assert!(leaf >= 0, "no leaf at the bottom");
    let mut buf = vec![0u8; 64];
    // SAFETY: reading into a buffer of that length.
    let n = unsafe { libc::read(leaf, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(leaf);
        libc::close(fd);
    }
    buf.truncate(n.max(0) as usize);
    buf
}

/// Removes a host chain made by `deep_image` + export. GNU rm and std's
/// remove_dir_all take minutes over 50,000 levels, so the chain is first
/// flattened: each level is renamed up to the top.
fn remove_deep_chain(top: &Path, levels: usize) {
    let c = CString::new(top.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; descriptors are closed below.
    let root = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(root >= 0);
    // SAFETY: dup of our own descriptor.
    let mut cur = unsafe { libc::dup(root) };
    for i in 0..levels {
        let flat = CString::new(format!("flat{i}")).unwrap();
        // SAFETY: NUL-terminated names relative to descriptors we hold.
        unsafe {
            assert_eq!(libc::renameat(cur, c"d".as_ptr(), root, flat.as_ptr()), 0);
            libc::close(cur);
            cur = libc::openat(root, flat.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        }
        assert!(cur >= 0);
    }
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(cur);
        libc::close(root);
    }
    fs::remove_dir_all(top).unwrap();
}

/// Finding 6: a 5,000-level tree (paths of 10,000 bytes) could not be
/// listed, exported or removed ("File name too long"). Walks are by
/// descriptor now, on the image and on the host.
#[test]
fn a_5000_level_tree_is_listed_exported_imported_and_removed() {
    const LEVELS: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let img = deep_image(dir.path(), LEVELS);

    let out = ulfs(&["ls", "-R", s(&img), "/deep"]);
    assert!(out.status.success(), "ls -R: {}", text(&out.stderr));
    let headers = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| l.ends_with(b":"));
    assert_eq!(headers.count(), LEVELS + 1);
    assert!(out.stdout.ends_with(b"\nleaf\n"));

    let host = dir.path().join("out");
    ok(&["export", s(&img), "/deep", s(&host)]);
    assert_eq!(read_deep_leaf(&host, LEVELS), b"bottom\n");

    // And back into a new image from the host, whose paths pass PATH_MAX.
    let img2 = dir.path().join("again.img");
    ok(&["mkfs", s(&img2), "256M"]);
    ok(&["import", s(&img2), s(&host), "/deep"]);
    let listing = ulfs(&["ls", "-R", s(&img2), "/deep"]);
    assert!(listing.status.success(), "{}", text(&listing.stderr));
    assert_eq!(listing.stdout, out.stdout, "the tree came back different");
    remove_deep_chain(&host, LEVELS);

    ok(&["rm", "-r", s(&img), "/deep"]);
    assert_eq!(ok(&["ls", s(&img), "/"]), "");
    ok(&["fsck", s(&img)]);
}

/// No recursion anywhere: 50,000 levels are exported and removed.
#[test]
fn a_50000_level_tree_overflows_no_stack() {
    const LEVELS: usize = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let img = deep_image(dir.path(), LEVELS);
    let host = dir.path().join("out");
    ok(&["export", s(&img), "/deep", s(&host)]);
    assert_eq!(read_deep_leaf(&host, LEVELS), b"bottom\n");
    remove_deep_chain(&host, LEVELS);
    ok(&["rm", "-r", s(&img), "/deep"]);
    assert_eq!(ok(&["ls", s(&img), "/"]), "");
}

/// Finding 6: /proc files (stat size 0) were imported empty and sysfs files
/// (stat size 4096) as 4,096 bytes of mostly NUL, silently. Both are read
/// to their end now, with a warning naming each.
#[test]
fn import_reads_proc_and_sysfs_files_to_their_end() {
    let dir = tempfile::tempdir().unwrap();
    let img = fresh_image(dir.path(), "64M");
    let out = ulfs(&["import", s(&img), "/proc/self/net", "/net"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("/proc/self/net/dev: read ") && err.contains("where stat said 0"),
        "{err}"
    );
    let dev = ulfs(&["cat", s(&img), "/net/dev"]).stdout;
    assert!(dev.starts_with(b"Inter-|"), "{}", text(&dev));

    let sys = Path::new("/sys/kernel/mm/transparent_hugepage");
    if !sys.join("enabled").exists() {
        println!("SKIP sysfs half: {} is not on this machine", sys.display());
        return;
    }
    let out = ulfs(&["import", s(&img), s(sys), "/thp"]);
    let err = text(&out.stderr);
    assert!(err.contains("enabled: read "), "{err}");
    let want = fs::read(sys.join("enabled")).unwrap();
    assert!(want.len() < 4096 && !want.is_empty());
    assert_eq!(ulfs(&["cat", s(&img), "/thp/enabled"]).stdout, want);
}

/// Finding 6: import stopped at the first failing entry. Now each failure
/// is reported, the rest imported, and the exit status is 1; --fail-fast
/// stops at the first.
#[test]
fn import_goes_on_past_a_failing_entry() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    fs::create_dir_all(host.join("sub")).unwrap();
    for name in ["a", "m", "sub/x", "z"] {
        fs::write(host.join(name), name).unwrap();
    }
    for flags in [&[][..], &["--fail-fast"][..]] {
        let img = dir.path().join(format!("t{}.img", flags.len()));
        ok(&["mkfs", s(&img), "16M"]);
        // A directory where the host has a file: that entry cannot be made.
        ok(&["mkdir", "-p", s(&img), "/m/keep"]);
        let mut args = vec!["import", s(&img), s(&host)];
        args.extend_from_slice(flags);
        let (code, err) = fails(&args);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("/m: Is a directory"), "{err}");
        assert_eq!(ok(&["cat", s(&img), "/a"]), "a");
        let rest = ulfs(&["cat", s(&img), "/sub/x", "/z"]);
        if flags.is_empty() {
            assert!(rest.status.success(), "{}", text(&rest.stderr));
            assert_eq!(text(&rest.stdout), "sub/xz");
        } else {
            assert!(!rest.status.success(), "--fail-fast went on");
        }
    }
}

/// Finding 6: export of a damaged image wrote nothing. Now everything
/// readable is exported and each unreadable entry is named.
#[test]
fn export_of_a_damaged_image_exports_what_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let img = image_with_files(dir.path());
    let (root, d, victim) = {
        let mut fs = ulfs::Fs::mount(
            &img,
            ulfs::MountOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let ino = |fs: &mut ulfs::Fs, p: &str| fs.stat(p).unwrap().ino as usize;
        (
            ino(&mut fs, "/"),
            ino(&mut fs, "/d"),
            ino(&mut fs, "/d/f49"),
        )
    };
    assert!(victim / 16 != root / 16 && victim / 16 != d / 16);
    // Garbage over f49's inode, its block's checksum left stale.
    edit_block(&img, victim / 16, false, |b| {
        b[(victim % 16) * 256..(victim % 16) * 256 + 64].fill(0xA5);
    });
    let out = dir.path().join("out");
    let (code, err) = fails(&["export", s(&img), "/", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/d/f49: "), "{err}");
    let mut exported = 0;
    for i in 0..50 {
        match fs::read(out.join("d").join(format!("f{i}"))) {
            Ok(data) => {
                assert_eq!(data, noise(3000 + i * 100, i as u64), "f{i}");
                exported += 1;
            }
            Err(_) => assert!(err.contains(&format!("/d/f{i}: ")), "f{i} missing silently"),
        }
    }
    assert!(
        exported >= 50 - 16,
        "only {exported} files exported:\n{err}"
    );
}

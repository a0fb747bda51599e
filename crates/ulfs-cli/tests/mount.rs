//! `ulfs mount`: the image on the host through FUSE, used by ordinary
//! programs and tools, unmounted as users unmount, and fsck-clean after
//! every test. Skipped, with the reason, where the machine has no FUSE.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use ulfs_testkit::fuse_mount::{FuseMount, Scratch, is_mounted};
use ulfs_testkit::skip::skip;

fn ulfs() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ulfs"))
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(ulfs()).args(args).output().unwrap()
}

/// A fresh image and an empty mount point in a temporary directory, or
/// None (the test skipped) without FUSE.
fn setup(test: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    Scratch::new(test, &ulfs(), "64M").map(|s| (s.dir, s.image, s.mnt))
}

fn assert_clean(image: &Path) {
    ulfs_testkit::fuse_mount::assert_clean(&ulfs(), image)
}

fn sh(script: &str) {
    let out = Command::new("sh").arg("-ec").arg(script).output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tree of the host's (this crate's sources, with a symlink and a hard
/// link added) copied in with `cp -a`, `tar` and `rsync -aH`, compared
/// with `diff -r`, then out again after a remount.
#[test]
fn a_tree_goes_in_and_out_with_cp_tar_and_diff() {
    let Some((dir, image, mnt)) = setup("a_tree_goes_in_and_out_with_cp_tar_and_diff") else {
        return;
    };
    let src = dir.path().join("src");
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    sh(&format!(
        "cp -a {crate_dir}/src {src} && ln -s main.rs {src}/link && ln {src}/main.rs {src}/hard",
        src = src.display()
    ));
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let (s, t) = (src.display(), mnt.display());
    sh(&format!("cp -a {s} {t}/cp && diff -r {s} {t}/cp"));
    sh(&format!(
        "mkdir {t}/tar && tar -C {s} -cf - . | tar -C {t}/tar -xf - && diff -r {s} {t}/tar"
    ));
    sh(&format!(
        "rsync -aH {s}/ {t}/rsync/ && diff -r {s} {t}/rsync"
    ));
    // Hard links and symlinks survive the trip.
    let a = std::fs::metadata(mnt.join("cp/main.rs")).unwrap();
    let b = std::fs::metadata(mnt.join("cp/hard")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(
        std::fs::read_link(mnt.join("tar/link")).unwrap(),
        Path::new("main.rs")
    );
    assert!(m.unmount().success());
    assert!(!is_mounted(&mnt));
    assert_clean(&image);
    // After a remount, read-only this time, the same tree comes out.
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["ro"]).unwrap();
    let out = dir.path().join("out");
    sh(&format!(
        "cp -a {t}/cp {o} && diff -r {s} {o}",
        o = out.display()
    ));
    let err = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// POSIX file semantics through the kernel: a file unlinked while open is
/// still read and written through its descriptor; rename's NOREPLACE and
/// EXCHANGE; truncate, times, modes, owners and set-group-ID directories;
/// FIFOs, sockets and device nodes.
#[test]
fn posix_semantics_hold_through_the_mount() {
    let Some((_dir, image, mnt)) = setup("posix_semantics_hold_through_the_mount") else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let p = |n: &str| mnt.join(n);
    {
        use std::io::{Read, Seek, Write};
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(p("open"))
            .unwrap();
        f.write_all(b"still here").unwrap();
        std::fs::remove_file(p("open")).unwrap();
        assert!(!p("open").exists());
        f.write_all(b", and more").unwrap();
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "still here, and more");
        assert_eq!(f.metadata().unwrap().nlink(), 0);
    }
    std::fs::write(p("a"), b"A").unwrap();
    std::fs::write(p("b"), b"B").unwrap();
    let rename2 = |flags: u32| {
        let (a, b) = (
            std::ffi::CString::new(p("a").to_str().unwrap()).unwrap(),
            std::ffi::CString::new(p("b").to_str().unwrap()).unwrap(),
        );
        // SAFETY: two valid C strings; renameat2 has no other preconditions.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                flags,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error())
        }
    };
    assert_eq!(rename2(libc::RENAME_NOREPLACE), Err(Some(libc::EEXIST)));
    rename2(libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read(p("a")).unwrap(), b"B");
    assert_eq!(std::fs::read(p("b")).unwrap(), b"A");
    // truncate up leaves a hole that reads as zeros; times as set.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p("a"))
        .unwrap();
    f.set_len(5000).unwrap();
    drop(f);
    let data = std::fs::read(p("a")).unwrap();
    assert_eq!((data.len(), data[0], data[4999]), (5000, b'B', 0));
    sh(&format!("touch -d @1000000000 {}", p("a").display()));
    assert_eq!(std::fs::metadata(p("a")).unwrap().mtime(), 1_000_000_000);
    // Modes, owners; a set-group-ID directory hands down its group.
    std::fs::create_dir(p("d")).unwrap();
    std::os::unix::fs::chown(p("d"), Some(12), Some(34)).unwrap();
    std::fs::set_permissions(p("d"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::fs::write(p("d/x"), b"").unwrap();
    let x = std::fs::metadata(p("d/x")).unwrap();
    assert_eq!(x.gid(), 34);
    let d = std::fs::metadata(p("d")).unwrap();
    assert_eq!((d.uid(), d.gid(), d.mode() & 0o7777), (12, 34, 0o2775));
    // A chown drops set-user-ID on a file.
    std::fs::set_permissions(p("b"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::chown(p("b"), Some(7), None).unwrap();
    assert_eq!(std::fs::metadata(p("b")).unwrap().mode() & 0o7777, 0o755);
    // Special files: a FIFO that works as one (the kernel serves it), a
    // socket bound to a path, devices with their numbers.
    let c = |n: &str| std::ffi::CString::new(p(n).to_str().unwrap()).unwrap();
    // SAFETY (the calls below): valid C strings.
    assert_eq!(unsafe { libc::mkfifo(c("fifo").as_ptr(), 0o640) }, 0);
    let dev = libc::makedev(8, 3);
    assert_eq!(
        unsafe { libc::mknod(c("blk").as_ptr(), libc::S_IFBLK | 0o600, dev) },
        0
    );
    assert_eq!(
        unsafe { libc::mknod(c("chr").as_ptr(), libc::S_IFCHR | 0o600, dev) },
        0
    );
    let sock = std::os::unix::net::UnixListener::bind(p("sock")).unwrap();
    use std::os::unix::fs::FileTypeExt;
    let t = |n: &str| std::fs::symlink_metadata(p(n)).unwrap();
    assert!(t("fifo").file_type().is_fifo() && t("fifo").mode() & 0o777 == 0o640);
    assert!(t("blk").file_type().is_block_device() && t("blk").rdev() == dev);
    assert!(t("chr").file_type().is_char_device() && t("chr").rdev() == dev);
    assert!(t("sock").file_type().is_socket());
    drop(sock);
    let writer = {
        let fifo = p("fifo");
        std::thread::spawn(move || std::fs::write(fifo, b"through the pipe").unwrap())
    };
    assert_eq!(std::fs::read(p("fifo")).unwrap(), b"through the pipe");
    writer.join().unwrap();
    let mut kinds: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            format!(
                "{} {:?}",
                e.file_name().to_string_lossy(),
                e.file_type().unwrap().is_fifo()
            )
        })
        .collect();
    kinds.sort();
    assert!(kinds.contains(&"fifo true".to_string()), "{kinds:?}");
    assert!(m.unmount().success());
    assert_clean(&image);
    // Seen in process after the unmount: the same names and bytes.
    let out = run(&["cat".as_ref(), image.as_os_str(), "/a".as_ref()]);
    assert_eq!(out.stdout.len(), 5000);
}

/// What the kernel reaches without opening it (an `O_PATH` descriptor, a
/// working directory) outlives its last name, with nlink 0, as on ext4;
/// and its blocks come back once the kernel lets go of it (its forget).
#[test]
fn unlinked_inodes_the_kernel_still_holds_answer_until_it_forgets_them() {
    let Some((_dir, image, mnt)) =
        setup("unlinked_inodes_the_kernel_still_holds_answer_until_it_forgets_them")
    else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let free_blocks = || {
        let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string and a zeroed statvfs to fill.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bfree
    };
    let file = mnt.join("f");
    // Made empty first: its inode's block is not freed with it.
    std::fs::write(&file, b"").unwrap();
    let empty = free_blocks();
    std::fs::write(&file, vec![5u8; 4 << 20]).unwrap();
    let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH) };
    assert!(fd >= 0);
    std::fs::remove_file(&file).unwrap();
    // SAFETY: a zeroed stat for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstat(fd, &mut st) };
    let err = std::io::Error::last_os_error();
    assert_eq!(r, 0, "fstat of an unlinked O_PATH descriptor: {err}");
    assert_eq!((st.st_nlink, st.st_size), (0, 4 << 20));
    assert!(free_blocks() < empty, "the blocks are still held");
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    // The kernel forgets the inode when it lets go of it; the server then
    // frees it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while free_blocks() < empty && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(free_blocks(), empty, "the unlinked file's blocks came back");
    // A directory removed while a process works in it.
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    let out = Command::new("sh")
        .current_dir(&d)
        .arg("-c")
        .arg(format!(
            "rmdir {d} && sleep 1.2 && stat -c %h . && ls -a . | wc -l",
            d = d.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n0\n");
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// Several request loops at once (`threads=4`): readers bypassing the
/// page cache (O_DIRECT, so every read reaches the server, where reads
/// share the volume) see exactly what was written while a writer makes,
/// fills and removes files and a lister walks the directory; reads still
/// move atime (relatime, recorded after the shared read).
#[test]
fn concurrent_readers_writers_and_listers_see_consistent_files() {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let Some((_dir, image, mnt)) =
        setup("concurrent_readers_writers_and_listers_see_consistent_files")
    else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["threads=4"]).unwrap();
    const READERS: usize = 4;
    const SIZE: usize = 4 << 20;
    let pattern = |r: usize, i: usize| (i / 4096 * 7 + r * 31) as u8;
    for r in 0..READERS {
        let bytes: Vec<u8> = (0..SIZE).map(|i| pattern(r, i)).collect();
        std::fs::write(mnt.join(format!("r{r}")), bytes).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = std::fs::metadata(mnt.join("r0")).unwrap();
    std::thread::scope(|scope| {
        for r in 0..READERS {
            let path = mnt.join(format!("r{r}"));
            scope.spawn(move || {
                // O_DIRECT wants an aligned buffer: a 4 KiB-aligned part
                // of a larger one.
                let mut raw = vec![0u8; (256 << 10) + 4096];
                let skew = raw.as_ptr().align_offset(4096);
                let buf = &mut raw[skew..skew + (256 << 10)];
                for _ in 0..3 {
                    let mut f = std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(&path)
                        .unwrap();
                    let mut at = 0;
                    loop {
                        let n = f.read(buf).unwrap();
                        if n == 0 {
                            break;
                        }
                        for (k, b) in buf[..n].iter().enumerate() {
                            assert_eq!(*b, pattern(r, at + k), "reader {r} at {}", at + k);
                        }
                        at += n;
                    }
                    assert_eq!(at, SIZE, "reader {r}");
                }
            });
        }
        let churn = mnt.join("churn");
        std::fs::create_dir(&churn).unwrap();
        let writer_dir = churn.clone();
        scope.spawn(move || {
            for i in 0..200 {
                let p = writer_dir.join(format!("w{i}"));
                let mut f = std::fs::File::create(&p).unwrap();
                f.write_all(&vec![i as u8; 20_000]).unwrap();
                drop(f);
                assert_eq!(std::fs::read(&p).unwrap(), vec![i as u8; 20_000]);
                if i % 2 == 0 {
                    std::fs::remove_file(&p).unwrap();
                }
            }
        });
        scope.spawn(move || {
            for _ in 0..200 {
                for e in std::fs::read_dir(&churn).unwrap() {
                    // A name listed may be gone by the time it is looked at.
                    let Ok(e) = e else { continue };
                    if let Ok(meta) = e.metadata() {
                        assert!(meta.len() <= 20_000);
                    }
                }
            }
        });
    });
    let names = std::fs::read_dir(mnt.join("churn")).unwrap().count();
    assert_eq!(names, 100, "the odd-numbered files stay");
    let after = std::fs::metadata(mnt.join("r0")).unwrap();
    assert!(
        after.atime() > before.atime() && after.atime() >= after.mtime(),
        "a read moved atime: {} -> {}",
        before.atime(),
        after.atime()
    );
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// relatime holds through the kernel's page cache: a file whose pages are
/// cached (written whole through the mount, then read) still gets its
/// atime moved by the first read after a change, and reading a symlink
/// moves its atime (review findings: cached pages kept across opens had
/// hidden such reads from the server).
#[test]
fn atime_follows_relatime_through_the_page_cache_and_symlinks() {
    let Some((_dir, image, mnt)) =
        setup("atime_follows_relatime_through_the_page_cache_and_symlinks")
    else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let f = mnt.join("f");
    std::fs::write(&f, vec![7u8; 8192]).unwrap();
    std::fs::read(&f).unwrap();
    let tick = || std::thread::sleep(std::time::Duration::from_millis(1100));
    for round in 0..2 {
        tick();
        sh(&format!("touch -m {}", f.display()));
        tick();
        std::fs::read(&f).unwrap();
        let st = std::fs::metadata(&f).unwrap();
        assert!(
            st.atime() > st.mtime(),
            "round {round}: atime {} not moved past mtime {}",
            st.atime(),
            st.mtime()
        );
    }
    let link = mnt.join("link");
    std::os::unix::fs::symlink("target", &link).unwrap();
    let before = std::fs::symlink_metadata(&link).unwrap().atime();
    tick();
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("target"));
    let after = std::fs::symlink_metadata(&link).unwrap().atime();
    assert!(after > before, "readlink moved atime: {before} -> {after}");
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// `ulfs mount` without --foreground returns once the mount is ready and
/// leaves a server behind; an image in use is refused with the usual
/// error; SIGTERM to the server unmounts cleanly; bad input is refused
/// before anything is mounted.
#[test]
fn the_daemon_mounts_refuses_a_second_writer_and_stops_cleanly() {
    let Some((_dir, image, mnt)) =
        setup("the_daemon_mounts_refuses_a_second_writer_and_stops_cleanly")
    else {
        return;
    };
    let out = run(&["mount".as_ref(), image.as_os_str(), mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mnt), "mounted when the command returns");
    std::fs::write(mnt.join("f"), b"daemon").unwrap();
    // A second mount of the same image is refused: the server holds it.
    let other = mnt.with_file_name("mnt2");
    std::fs::create_dir(&other).unwrap();
    let out = run(&["mount".as_ref(), image.as_os_str(), other.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
    assert!(!is_mounted(&other));
    // `umount` ends the server; the image is released and clean.
    let out = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_released(&image);
    assert_clean(&image);
    // `ulfs umount` returns once the server has let go: the image is
    // usable at once, and holds what was written.
    let out = run(&["mount".as_ref(), image.as_os_str(), mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(mnt.join("g"), b"then ulfs umount").unwrap();
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mnt));
    assert_clean(&image);
    let out = run(&["cat".as_ref(), image.as_os_str(), "/g".as_ref()]);
    assert_eq!(out.stdout, b"then ulfs umount");
    let out = run(&["umount".as_ref(), mnt.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a FUSE mount point"));
    // In the foreground, SIGTERM unmounts and the server exits 0.
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"daemon");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) }, 0);
    assert!(m.wait().success());
    assert!(!is_mounted(&mnt));
    assert_clean(&image);
    // Bad options and mount points: exit 2 and 1, nothing mounted.
    let out = run(&[
        "mount".as_ref(),
        image.as_os_str(),
        mnt.as_os_str(),
        "-o".as_ref(),
        "allow_others".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("allow_others"));
    let file = mnt.with_file_name("img");
    let out = run(&["mount".as_ref(), image.as_os_str(), file.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    let missing = mnt.with_file_name("no-such.img");
    let out = run(&["mount".as_ref(), missing.as_os_str(), mnt.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!is_mounted(&mnt));
    assert_clean(&image);
}

/// Waits (up to 10 s) until a writer can take the image: the daemon has
/// unmounted the volume and exited.
fn wait_released(image: &Path) {
    let start = std::time::Instant::now();
    loop {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(image)
            .unwrap();
        if f.try_lock().is_ok() {
            return;
        }
        assert!(
            start.elapsed().as_secs() < 10,
            "the server still holds the image"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Stopping the server harms nothing else and loses nothing done: an
/// unmount leaves the file system the mount was stacked on in place (the
/// server once unmounted it by path after its session ended); an idle
/// mount commits by itself, so a kill -9 after the commit interval loses
/// nothing; SIGTERM with a file open detaches at once and the server ends
/// when the file is closed, keeping what was written through it.
#[test]
fn stopping_the_server_loses_nothing_and_touches_nothing_else() {
    let Some((dir, image, mnt)) =
        setup("stopping_the_server_loses_nothing_and_touches_nothing_else")
    else {
        return;
    };
    // Stacked on a tmpfs of the test's own.
    let under = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&mnt)
        .output()
        .unwrap();
    if !under.status.success() {
        return skip(
            "stopping_the_server_loses_nothing_and_touches_nothing_else",
            "cannot mount a tmpfs (not root?)",
        );
    }
    std::fs::write(mnt.join("below"), b"kept").unwrap();
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    assert!(!mnt.join("below").exists());
    std::fs::write(mnt.join("idle"), b"written, then nothing").unwrap();
    assert!(m.unmount().success());
    assert_eq!(
        std::fs::read(mnt.join("below")).unwrap(),
        b"kept",
        "the tmpfs is still there"
    );
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    // Idle, then killed: the commit interval (5 s) bounds the loss.
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    std::fs::write(mnt.join("idle2"), b"committed while idle").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(7));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) }, 0);
    let _ = m.wait();
    let _ = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&mnt)
        .output();
    let out = run(&["cat".as_ref(), image.as_os_str(), "/idle2".as_ref()]);
    assert_eq!(out.stdout, b"committed while idle");
    // SIGTERM with a file open.
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(mnt.join("held"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"before ", 0).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) }, 0);
    let start = std::time::Instant::now();
    while is_mounted(&mnt) {
        assert!(
            start.elapsed().as_secs() < 10,
            "SIGTERM did not detach the mount"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    f.write_all_at(b"and after", 7).unwrap();
    drop(f);
    assert!(m.wait().success());
    assert_clean(&image);
    let out = run(&["cat".as_ref(), image.as_os_str(), "/held".as_ref()]);
    assert_eq!(out.stdout, b"before and after");
    drop(dir);
}

/// `-o noatime` leaves atime alone; `-o sync` makes a change durable
/// before the call returns (a kill -9 right after loses nothing).
#[test]
fn noatime_and_sync_are_kept() {
    let Some((_dir, image, mnt)) = setup("noatime_and_sync_are_kept") else {
        return;
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["noatime,sync"]).unwrap();
    std::fs::write(mnt.join("f"), b"x").unwrap();
    sh(&format!(
        "touch -a -d @1000000000 {}",
        mnt.join("f").display()
    ));
    std::fs::create_dir(mnt.join("d")).unwrap();
    let fifo = std::ffi::CString::new(mnt.join("p").to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let _ = std::fs::read(mnt.join("f")).unwrap();
    // Made by open(O_CREAT) and never written: the create alone is synced.
    std::fs::File::create(mnt.join("e")).unwrap();
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) }, 0);
    let _ = m.wait();
    let _ = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&mnt)
        .output();
    let out = run(&[
        "ls".as_ref(),
        "-l".as_ref(),
        image.as_os_str(),
        "/".as_ref(),
    ]);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        [" d", " e", " f", " p"].iter().all(|n| listing.contains(n)),
        "{listing}"
    );
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["ro"]).unwrap();
    assert_eq!(
        std::fs::metadata(mnt.join("f")).unwrap().atime(),
        1_000_000_000
    );
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// `-o allow_other` as root: another real user (uid 65534, through
/// setpriv) reads a 0644 file, is refused a 0600 one and cannot write
/// into a 0755 directory of root's: the kernel checks the modes and
/// owners the image stores.
#[test]
fn another_user_meets_the_modes_in_the_image() {
    let Some((_dir, image, mnt)) = setup("another_user_meets_the_modes_in_the_image") else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(
            "another_user_meets_the_modes_in_the_image",
            "needs root to act as a second user",
        );
    }
    let m = FuseMount::start(&ulfs(), &image, &mnt, &["allow_other"]).unwrap();
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(mnt.join("open"), b"for all").unwrap();
    std::fs::write(mnt.join("secret"), b"root only").unwrap();
    std::fs::set_permissions(mnt.join("open"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(mnt.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let as_nobody = |script: String| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(script)
            .output()
            .unwrap()
    };
    let read = as_nobody(format!("cat {}", mnt.join("open").display()));
    assert_eq!(
        read.stdout,
        b"for all",
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let denied = as_nobody(format!("cat {}", mnt.join("secret").display()));
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Permission denied"));
    let write = as_nobody(format!("echo x > {}", mnt.join("new").display()));
    assert!(!write.status.success());
    assert!(!mnt.join("new").exists());
    assert!(m.unmount().success());
    assert_clean(&image);
}

/// fio through the mount: random writes verified with crc32c, twice over
/// (the second run reads back what the first left after a remount).
#[test]
fn fio_verifies_what_it_wrote() {
    let Some((dir, image, mnt)) = setup("fio_verifies_what_it_wrote") else {
        return;
    };
    let fio = |mnt: &Path, rw: &str, verify_only: bool| {
        let mut c = Command::new("fio");
        c.args([
            "--name=ulfs",
            "--size=16m",
            "--bs=4k",
            "--ioengine=psync",
            "--verify=crc32c",
            "--do_verify=1",
            "--randseed=1234",
            &format!("--rw={rw}"),
            &format!("--directory={}", mnt.display()),
            &format!("--output={}", dir.path().join("fio.out").display()),
        ]);
        if verify_only {
            c.arg("--verify_only");
        }
        // fio leaves a verify state file in its working directory.
        c.current_dir(dir.path());
        let out = c.output().unwrap();
        let log = std::fs::read_to_string(dir.path().join("fio.out")).unwrap_or_default();
        assert!(
            out.status.success() && !log.contains("verify: bad"),
            "fio {rw}: {}{log}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    fio(&mnt, "randwrite", false);
    assert!(m.unmount().success());
    assert_clean(&image);
    let m = FuseMount::start(&ulfs(), &image, &mnt, &[]).unwrap();
    fio(&mnt, "randwrite", true);
    assert!(m.unmount().success());
    assert_clean(&image);
}

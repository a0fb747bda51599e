//! End-to-end behaviour of the syscall-shaped API on a real image: data,
//! holes, directories, links, renames, errors, persistence across mounts.

use ulfs::{Errno, Fs, MkfsOptions, MountOptions, RENAME_EXCHANGE, RENAME_NOREPLACE, mkfs};

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

mod common;
use ulfs_testkit::skip;

fn fresh(size: u64) -> (tempfile::TempDir, std::path::PathBuf, Fs) {
    let (dir, img) = common::image_in(size, ulfs::Mode::Journal);
    let fs = Fs::mount(&img, MountOptions::default()).unwrap();
    (dir, img, fs)
}

fn names(fs: &mut Fs, path: &str) -> Vec<String> {
    let fd = fs
        .open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::new();
    loop {
        let n = fs.getdents64(fd, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend(
            ulfs::parse_dirents(&buf[..n])
                .into_iter()
                .map(|d| String::from_utf8(d.name).unwrap()),
        );
    }
    fs.close(fd).unwrap();
    out.sort();
    out
}

#[test]
fn write_read_persist() {
    let (_d, img, mut fs) = fresh(16 << 20);
    let fd = fs.open("/hello", CREAT, 0o644).unwrap();
    assert_eq!(fs.write(fd, b"hello world").unwrap(), 11);
    assert_eq!(fs.lseek(fd, 0, libc::SEEK_SET).unwrap(), 0);
    let mut buf = [0u8; 32];
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 11);
    assert_eq!(&buf[..11], b"hello world");
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 0);
    let st = fs.fstat(fd).unwrap();
    assert_eq!(st.size, 11);
    assert_eq!(st.mode, libc::S_IFREG | 0o644);
    assert_eq!(st.nlink, 1);
    assert_eq!(st.blocks, 8);
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    let mut fs = Fs::mount(
        &img,
        MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let fd = fs.open("hello", libc::O_RDONLY, 0).unwrap();
    assert_eq!(fs.pread(fd, &mut buf, 6).unwrap(), 5);
    assert_eq!(&buf[..5], b"world");
    assert_eq!(fs.open("/x", CREAT, 0o644).unwrap_err(), Errno::EROFS);
    assert!(fs.info().clean);
}

#[test]
fn holes_and_truncate() {
    let (_d, _img, mut fs) = fresh(64 << 20);
    let fd = fs.open("/sparse", CREAT, 0o600).unwrap();
    // Taken after the create: the root directory's first leaf is allocated then.
    let before = fs.statfs("/").unwrap().bfree;
    let far = 1u64 << 40; // 1 TiB
    assert_eq!(fs.pwrite(fd, b"end", far).unwrap(), 3);
    let st = fs.fstat(fd).unwrap();
    assert_eq!(st.size, far + 3);
    assert!(st.blocks <= 8 * 4, "sparse file took {} sectors", st.blocks);
    let mut buf = [1u8; 8192];
    assert_eq!(fs.pread(fd, &mut buf, 12345).unwrap(), 8192);
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs.lseek(fd, 0, libc::SEEK_DATA).unwrap(), far & !4095);
    assert_eq!(fs.lseek(fd, 0, libc::SEEK_HOLE).unwrap(), 0);
    assert_eq!(fs.lseek(fd, far as i64, libc::SEEK_HOLE).unwrap(), far + 3);
    fs.ftruncate(fd, 10).unwrap();
    assert_eq!(fs.statfs("/").unwrap().bfree, before);
    fs.ftruncate(fd, 10000).unwrap();
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), 8192);
    assert!(buf.iter().all(|&b| b == 0));
    // Write, shrink into the block, grow: the cut part reads as zeros.
    fs.pwrite(fd, &[7u8; 4096], 0).unwrap();
    fs.ftruncate(fd, 100).unwrap();
    fs.ftruncate(fd, 4096).unwrap();
    fs.pread(fd, &mut buf[..4096], 0).unwrap();
    assert!(buf[..100].iter().all(|&b| b == 7));
    assert!(buf[100..4096].iter().all(|&b| b == 0));
    fs.close(fd).unwrap();
}

#[test]
fn big_file_crosses_every_map_level() {
    let (_d, _img, mut fs) = fresh(64 << 20);
    let fd = fs.open("/big", CREAT, 0o600).unwrap();
    // Blocks in the direct, single, double and triple trees.
    let offsets = [
        0u64,
        11,
        12,
        1031,
        1032,
        1032 + 1020 * 1020 - 1,
        1032 + 1020 * 1020,
        1 << 28,
    ];
    for (i, &blk) in offsets.iter().enumerate() {
        let data = [i as u8 + 1; 4096];
        assert_eq!(fs.pwrite(fd, &data, blk * 4096).unwrap(), 4096);
    }
    for (i, &blk) in offsets.iter().enumerate() {
        let mut got = [0u8; 4096];
        fs.pread(fd, &mut got, blk * 4096).unwrap();
        assert!(got.iter().all(|&b| b == i as u8 + 1), "block {blk}");
    }
    let free_with = fs.statfs("/").unwrap().bfree;
    fs.ftruncate(fd, 0).unwrap();
    let free_without = fs.statfs("/").unwrap().bfree;
    assert!(free_without > free_with + offsets.len() as u64);
    fs.close(fd).unwrap();
    fs.unlink("/big").unwrap();
}

#[test]
fn directories_and_errors() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    fs.mkdir("/a", 0o755).unwrap();
    fs.mkdir("/a/b", 0o755).unwrap();
    assert_eq!(fs.mkdir("/a", 0o755).unwrap_err(), Errno::EEXIST);
    assert_eq!(fs.rmdir("/a").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(fs.stat("/a").unwrap().nlink, 3);
    let fd = fs.open("/a/b/f", CREAT, 0o644).unwrap();
    fs.close(fd).unwrap();
    assert_eq!(
        fs.open("/a/b/f/x", CREAT, 0o644).unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(fs.stat("/a/b/f/").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(fs.stat("/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.unlink("/a/b").unwrap_err(), Errno::EISDIR);
    assert_eq!(fs.rmdir("/a/b/f").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(
        fs.stat(format!("/{}", "x".repeat(256))).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    let long = "y".repeat(255);
    fs.mkdir(format!("/{long}"), 0o700).unwrap();
    assert!(fs.stat(format!("//{long}//./")).unwrap().is_dir());
    assert_eq!(names(&mut fs, "/a"), [".", "..", "b"]);
    assert_eq!(fs.close(99).unwrap_err(), Errno::EBADF);
    fs.chdir("/a/b").unwrap();
    assert_eq!(fs.getcwd().unwrap(), b"/a/b");
    fs.rename("/a", "/renamed").unwrap();
    assert_eq!(fs.getcwd().unwrap(), b"/renamed/b");
    assert!(fs.stat("f").unwrap().is_file());
    assert_eq!(fs.stat("../../renamed/b/f").unwrap().size, 0);
    assert_eq!(
        fs.rename("/renamed", "/renamed/b/inside").unwrap_err(),
        Errno::EINVAL
    );
}

#[test]
fn links_symlinks_rename_flags() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    let fd = fs.open("/f", CREAT, 0o644).unwrap();
    fs.write(fd, b"data").unwrap();
    fs.close(fd).unwrap();
    fs.link("/f", "/g").unwrap();
    assert_eq!(fs.stat("/g").unwrap().nlink, 2);
    assert_eq!(fs.stat("/f").unwrap().ino, fs.stat("/g").unwrap().ino);
    fs.rename("/f", "/g").unwrap(); // same inode: nothing happens
    assert!(fs.stat("/f").is_ok());
    fs.symlink("f", "/s").unwrap();
    fs.symlink("/nowhere", "/dangling").unwrap();
    assert_eq!(fs.readlink("/s").unwrap(), b"f");
    assert_eq!(fs.stat("/s").unwrap().size, 4);
    assert!(fs.lstat("/s").unwrap().is_symlink());
    assert_eq!(fs.stat("/dangling").unwrap_err(), Errno::ENOENT);
    let long_target = "t/".repeat(300);
    fs.symlink(&long_target, "/longlink").unwrap();
    assert_eq!(fs.readlink("/longlink").unwrap(), long_target.as_bytes());
    fs.symlink("loop2", "/loop1").unwrap();
    fs.symlink("loop1", "/loop2").unwrap();
    assert_eq!(fs.stat("/loop1").unwrap_err(), Errno::ELOOP);
    assert_eq!(
        fs.open("/s", libc::O_RDONLY | libc::O_NOFOLLOW, 0)
            .unwrap_err(),
        Errno::ELOOP
    );
    let fd = fs.open("/h", CREAT, 0o644).unwrap();
    fs.close(fd).unwrap();
    assert_eq!(
        fs.rename2("/h", "/g", RENAME_NOREPLACE).unwrap_err(),
        Errno::EEXIST
    );
    fs.rename2("/h", "/g", RENAME_EXCHANGE).unwrap();
    assert_eq!(fs.stat("/h").unwrap().size, 4);
    assert_eq!(fs.stat("/g").unwrap().size, 0);
    fs.rename("/h", "/g").unwrap();
    assert_eq!(fs.stat("/h").unwrap_err(), Errno::ENOENT);
    // /f and /g are the same inode again (the exchange moved it to /h).
    assert_eq!(fs.stat("/f").unwrap().nlink, 2);
    assert_eq!(fs.stat("/f").unwrap().ino, fs.stat("/g").unwrap().ino);
}

#[test]
fn unlinked_open_file_lives_until_close() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    fs.mkdir("/warm", 0o755).unwrap(); // allocates the root's first leaf
    let before = fs.statfs("/").unwrap();
    let fd = fs.open("/tmp", CREAT, 0o644).unwrap();
    fs.write(fd, &[5u8; 100_000]).unwrap();
    let fd2 = fs.dup(fd).unwrap();
    fs.unlink("/tmp").unwrap();
    assert_eq!(fs.stat("/tmp").unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.fstat(fd).unwrap().nlink, 0);
    let mut buf = [0u8; 10];
    assert_eq!(fs.pread(fd, &mut buf, 99_990).unwrap(), 10);
    assert_eq!(buf, [5u8; 10]);
    fs.write(fd2, b"more").unwrap();
    assert_eq!(fs.fstat(fd).unwrap().size, 100_004);
    fs.close(fd).unwrap();
    assert!(fs.statfs("/").unwrap().bfree < before.bfree);
    fs.close(fd2).unwrap();
    assert_eq!(fs.statfs("/").unwrap().bfree, before.bfree);
}

#[test]
fn append_and_dup_share_offset() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    let fd = fs.open("/log", CREAT | libc::O_APPEND, 0o644).unwrap();
    fs.write(fd, b"one").unwrap();
    fs.lseek(fd, 0, libc::SEEK_SET).unwrap();
    fs.write(fd, b"two").unwrap();
    let mut buf = [0u8; 6];
    assert_eq!(fs.pread(fd, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf, b"onetwo");
    let d = fs.dup(fd).unwrap();
    fs.lseek(fd, 2, libc::SEEK_SET).unwrap();
    assert_eq!(fs.lseek(d, 0, libc::SEEK_CUR).unwrap(), 2);
    let e = fs.dup2(fd, 40).unwrap();
    assert_eq!(e, 40);
    assert_eq!(fs.lseek(40, 0, libc::SEEK_CUR).unwrap(), 2);
}

#[test]
fn full_disk_is_enospc_and_loses_nothing() {
    let (_d, _img, mut fs) = fresh(1 << 20);
    let fd = fs.open("/keep", CREAT, 0o644).unwrap();
    fs.write(fd, b"precious").unwrap();
    fs.close(fd).unwrap();
    let fd = fs.open("/fill", CREAT, 0o644).unwrap();
    let chunk = [9u8; 65536];
    let mut total = 0;
    loop {
        match fs.write(fd, &chunk) {
            Ok(n) => total += n,
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert!(total > 500_000);
    assert_eq!(fs.fstat(fd).unwrap().size, total as u64);
    let mut buf = [0u8; 8];
    let k = fs.open("/keep", libc::O_RDONLY, 0).unwrap();
    fs.read(k, &mut buf).unwrap();
    assert_eq!(&buf, b"precious");
    fs.close(fd).unwrap();
    fs.unlink("/fill").unwrap();
    let fd = fs.open("/again", CREAT, 0o644).unwrap();
    assert_eq!(fs.write(fd, &chunk).unwrap(), chunk.len());
}

/// A fallocate larger than the free space is refused before anything is
/// allocated: the volume is not left full by a call that failed.
#[test]
fn fallocate_that_cannot_fit_changes_nothing() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    let fd = fs.open("/f", CREAT, 0o644).unwrap();
    fs.write(fd, &[1u8; 10_000]).unwrap();
    let free = fs.statfs("/").unwrap().bfree;
    let st = fs.fstat(fd).unwrap();
    assert_eq!(fs.fallocate(fd, 0, 0, 300 << 20), Err(Errno::ENOSPC));
    assert_eq!(fs.fallocate(fd, 1, 4096, 300 << 20), Err(Errno::ENOSPC));
    assert_eq!(fs.statfs("/").unwrap().bfree, free);
    let after = fs.fstat(fd).unwrap();
    assert_eq!((after.size, after.blocks), (st.size, st.blocks));
    // What fits still works, up to the last free blocks.
    let room = (free - 16) * 4096;
    fs.fallocate(fd, 0, 10_000, room).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().size, 10_000 + room);
}

#[test]
fn refuses_non_images() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0xA5u8; 1 << 20]).unwrap();
    let err = Fs::mount(&junk, MountOptions::default()).err().unwrap();
    assert!(err.message.contains("not a ulfs image"), "{err}");
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, b"x").unwrap();
    assert!(Fs::mount(&tiny, MountOptions::default()).is_err());
    let img = dir.path().join("img");
    mkfs(&img, &MkfsOptions::default()).unwrap();
    let again = mkfs(&img, &MkfsOptions::default()).unwrap_err();
    assert_eq!(again.errno, Errno::EEXIST);
    mkfs(
        &img,
        &MkfsOptions {
            force: true,
            ..Default::default()
        },
    )
    .unwrap();
    // Damage both superblocks: refused, not trusted.
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[100] ^= 0xff;
    bytes[4096 + 100] ^= 0xff;
    std::fs::write(&img, &bytes).unwrap();
    let err = Fs::mount(&img, MountOptions::default()).err().unwrap();
    assert_eq!(err.errno, Errno::EUCLEAN, "{err}");
}

#[test]
fn unsupported_superblock_copy_is_never_passed_over() {
    let (_d, img, fs) = fresh(8 << 20);
    fs.unmount().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    // Make the primary copy claim a future format version (CRC kept valid).
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let block: &mut [u8; 4096] = (&mut bytes[..4096]).try_into().unwrap();
    ulfs::format::seal_block(block);
    std::fs::write(&img, &bytes).unwrap();
    let err = Fs::mount(&img, MountOptions::default()).err().unwrap();
    assert_eq!(err.errno, Errno::EOPNOTSUPP, "{err}");
    assert!(err.message.contains("format version 3"), "{err}");
}

#[test]
fn failed_mkfs_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("small.img");
    let err = mkfs(
        &img,
        &MkfsOptions {
            size: 4096,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.errno, Errno::EINVAL);
    assert!(err.message.contains("too small"), "{err}");
    assert!(!img.exists());
    assert!(!err.message.contains("os error"), "{err}");
}

/// The published ULFS's own images (shared/testdata/ulfs-v1) are recognised
/// and mounted read-only (as their translation: tests/v1_images.rs), not
/// mistaken for damage.
#[test]
fn original_ulfs_v1_image_is_recognised() {
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/ulfs-v1/sample-v1.img");
    if !sample.exists() {
        let reason = format!("needs the sample image {}", sample.display());
        return skip::skip("original_ulfs_v1_image_is_recognised", &reason);
    }
    let mut fs = Fs::mount(&sample, MountOptions::default()).unwrap();
    assert!(fs.info().v1.is_some());
    assert!(fs.stat("/README.txt").unwrap().is_file());
    assert_eq!(fs.mkdir("/x", 0o755), Err(Errno::EROFS));
    fs.unmount().unwrap();
}

/// Operations far larger than one transaction (a journal of the smallest
/// allowed size) commit their completed prefix and go on, and the result
/// checks clean. Without that, a 1 GiB fallocate or hole punch (about 260
/// index blocks) could not fit an 80-block journal at all.
#[test]
fn huge_operations_fit_a_small_journal() {
    let dir = match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let img = dir.path().join("small-journal.img");
    let size = 1200 << 20;
    let too_small = MkfsOptions {
        size,
        journal_blocks: Some(8),
        ..Default::default()
    };
    let err = mkfs(&img, &too_small).unwrap_err();
    assert!(err.message.contains("too small for this image"), "{err}");
    let groups = ((size >> 12) - 2).div_ceil(32641);
    let journal = ulfs::fs::min_journal(groups);
    mkfs(
        &img,
        &MkfsOptions {
            size,
            journal_blocks: Some(journal),
            ..Default::default()
        },
    )
    .unwrap();
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    let fd = fs.open("/big", CREAT, 0o644).unwrap();
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 253) as u8).collect();
    assert_eq!(fs.write(fd, &data).unwrap(), data.len());
    fs.fallocate(fd, 0, 8 << 20, 1 << 30).unwrap();
    assert_eq!(fs.fstat(fd).unwrap().size, (8 << 20) + (1 << 30));
    fs.fallocate(
        fd,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        4096,
        1 << 30,
    )
    .unwrap();
    let mut buf = vec![0u8; 8192];
    fs.pread(fd, &mut buf, 0).unwrap();
    assert_eq!(&buf[..4096], &data[..4096]);
    assert!(buf[4096..].iter().all(|&b| b == 0));
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    let report = ulfs::fsck(&img, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems);
}

/// `fcntl_getfl`/`fcntl_setfl` report and change what Linux's F_GETFL and
/// F_SETFL do, checked against a host tmpfs file opened the same ways.
#[test]
fn status_flags_match_linux() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    let host = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let hpath = std::ffi::CString::new(host.path().join("f").to_str().unwrap()).unwrap();
    let opens = [
        libc::O_RDONLY | libc::O_CREAT,
        libc::O_WRONLY | libc::O_APPEND,
        libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_TRUNC,
        libc::O_RDWR | libc::O_SYNC | libc::O_NOATIME,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_DSYNC,
    ];
    for flags in opens {
        let u = fs.open("/f", flags | libc::O_CREAT, 0o644).unwrap();
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let h = unsafe { libc::open(hpath.as_ptr(), flags | libc::O_CREAT, 0o644) };
        assert!(h >= 0);
        // SAFETY: F_GETFL takes no argument.
        let host_fl = unsafe { libc::fcntl(h, libc::F_GETFL) };
        assert_eq!(fs.fcntl_getfl(u).unwrap(), host_fl, "flags {flags:#o}");
        for set in [
            libc::O_APPEND,
            libc::O_NONBLOCK | libc::O_RDWR | libc::O_TRUNC,
            0,
        ] {
            fs.fcntl_setfl(u, set).unwrap();
            // SAFETY: F_SETFL with an int argument.
            unsafe { libc::fcntl(h, libc::F_SETFL, set) };
            // SAFETY: as above.
            let host_fl = unsafe { libc::fcntl(h, libc::F_GETFL) };
            assert_eq!(
                fs.fcntl_getfl(u).unwrap(),
                host_fl,
                "{flags:#o} then {set:#o}"
            );
        }
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(h) };
        fs.close(u).unwrap();
    }
    // O_APPEND set later makes writes append, for every descriptor of the
    // open file description.
    let u = fs.open("/g", CREAT, 0o644).unwrap();
    fs.write(u, b"abc").unwrap();
    let dup = fs.dup(u).unwrap();
    fs.lseek(u, 0, libc::SEEK_SET).unwrap();
    fs.fcntl_setfl(dup, libc::O_APPEND).unwrap();
    fs.write(u, b"d").unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(fs.pread(u, &mut buf, 0).unwrap(), 4);
    assert_eq!(&buf[..4], b"abcd");
    assert_eq!(fs.fcntl_getfl(9999), Err(Errno::EBADF));
    // A directory opened O_DIRECTORY | O_NOFOLLOW keeps both, as Linux's
    // f_flags do.
    fs.mkdir("/d", 0o755).unwrap();
    std::fs::create_dir(host.path().join("d")).unwrap();
    let dpath = std::ffi::CString::new(host.path().join("d").to_str().unwrap()).unwrap();
    for flags in [
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        libc::O_RDONLY | libc::O_DIRECTORY,
        libc::O_RDONLY,
    ] {
        let u = fs.open("/d", flags, 0).unwrap();
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let h = unsafe { libc::open(dpath.as_ptr(), flags) };
        assert!(h >= 0);
        // SAFETY: F_GETFL takes no argument; then closing our own descriptor.
        let host_fl = unsafe { libc::fcntl(h, libc::F_GETFL) };
        // SAFETY: as above.
        unsafe { libc::close(h) };
        assert_eq!(fs.fcntl_getfl(u).unwrap(), host_fl, "dir, flags {flags:#o}");
        fs.close(u).unwrap();
    }
}

/// O_TMPFILE: Linux's own checks first (EINVAL without write access or
/// with O_CREAT; ENOENT and ENOTDIR for the directory), then EOPNOTSUPP,
/// as Linux says for a file system without unnamed files; nothing is
/// created and nothing stays open.
#[test]
fn o_tmpfile_is_refused_as_by_a_file_system_without_it() {
    let (_d, _img, mut fs) = fresh(16 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    let created = fs
        .open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    fs.close(created).unwrap();
    let tmp = libc::O_TMPFILE;
    let cases = [
        ("/d", tmp | libc::O_RDWR, Errno::EOPNOTSUPP),
        ("/d", tmp | libc::O_WRONLY | libc::O_EXCL, Errno::EOPNOTSUPP),
        ("/d", tmp | libc::O_RDONLY, Errno::EINVAL),
        ("/d", tmp | libc::O_RDWR | libc::O_CREAT, Errno::EINVAL),
        ("/missing", tmp | libc::O_RDWR, Errno::ENOENT),
        ("/f", tmp | libc::O_RDWR, Errno::ENOTDIR),
    ];
    for (path, flags, want) in cases {
        assert_eq!(
            fs.open(path, flags, 0o600).err(),
            Some(want),
            "{path} {flags:#o}"
        );
    }
    assert_eq!(names(&mut fs, "/d"), [".", ".."]);
    // The lowest descriptor is free again: nothing leaked.
    assert_eq!(fs.open("/f", libc::O_RDONLY, 0).unwrap(), created);
}

/// The fs layer checks every name it is given, whoever the caller: a
/// FUSE request brings names of up to 1,024 bytes that no path resolution
/// has looked at, and a name longer than NAME_MAX once went into a
/// directory leaf whose record holds a one-byte length (the image was
/// damaged).
#[test]
fn the_volume_refuses_names_it_cannot_store() {
    use ulfs::fs::Volume;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs::mkfs(&img, &ulfs::MkfsOptions::default()).unwrap();
    let mut v = Volume::mount(&img, ulfs::MountOptions::default()).unwrap();
    let root = v.root();
    let file = v
        .create(root, b"f", libc::S_IFREG | 0o644, 0, 0, b"")
        .unwrap();
    let long = vec![b'n'; 256];
    let max = vec![b'm'; 255];
    for bad in [&long[..], b"", b"a/b", b".", b"..", b"nul\0"] {
        let want = match bad.len() {
            0 => Errno::ENOENT,
            256 => Errno::ENAMETOOLONG,
            _ => Errno::EINVAL,
        };
        let show = String::from_utf8_lossy(bad);
        assert_eq!(
            v.create(root, bad, libc::S_IFDIR | 0o755, 0, 0, b""),
            Err(want),
            "{show}"
        );
        assert_eq!(v.link(file, root, bad), Err(want), "{show}");
        assert_eq!(v.rename(root, b"f", root, bad, 0), Err(want), "{show}");
    }
    assert_eq!(v.lookup(root, &long), Err(Errno::ENAMETOOLONG));
    assert_eq!(v.unlink(root, &long), Err(Errno::ENAMETOOLONG));
    assert_eq!(v.rmdir(root, &long), Err(Errno::ENAMETOOLONG));
    // NAME_MAX itself is fine.
    let d = v
        .create(root, &max, libc::S_IFDIR | 0o755, 0, 0, b"")
        .unwrap();
    assert_eq!(v.lookup(root, &max), Ok(d));
    v.rmdir(root, &max).unwrap();
    v.unmount().unwrap();
    drop(v);
    let report = ulfs::fsck(&img, &mut ulfs::FsckOptions::default()).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// FIFOs, sockets and devices (what `ulfs mount`'s mknod makes) are names
/// and metadata: listed and stat'ed with their type and device number,
/// removed like files, refused with ENXIO when opened in process (there
/// is no kernel object behind them there); the first one marks the image
/// with the special-files feature, and the image checks clean.
#[test]
fn special_files_are_names_with_metadata() {
    use ulfs::fs::Volume;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs(&img, &MkfsOptions::default()).unwrap();
    let feature = || {
        let b = std::fs::read(&img).unwrap();
        u32::from_le_bytes(b[20..24].try_into().unwrap())
    };
    assert_eq!(feature(), 0, "a new image has no special files");
    let mut v = Volume::mount(&img, MountOptions::default()).unwrap();
    let root = v.root();
    let dev = libc::makedev(8, 3);
    for (name, mode) in [
        (&b"fifo"[..], libc::S_IFIFO),
        (b"sock", libc::S_IFSOCK),
        (b"chr", libc::S_IFCHR),
        (b"blk", libc::S_IFBLK),
    ] {
        v.mknod(root, name, mode | 0o640, dev, 7, 8).unwrap();
    }
    // Not a special type: create's business.
    assert_eq!(
        v.mknod(root, b"f", libc::S_IFREG | 0o644, 0, 0, 0),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        v.mknod(root, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0),
        Err(Errno::EEXIST)
    );
    v.unmount().unwrap();
    drop(v);
    assert_eq!(feature(), 1, "the special-files feature is set");
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    let st = fs.stat("/chr").unwrap();
    assert_eq!(
        (st.mode, st.rdev, st.uid, st.size),
        (libc::S_IFCHR | 0o640, dev, 7, 0)
    );
    assert_eq!(
        fs.stat("/fifo").unwrap().rdev,
        0,
        "only devices keep a number"
    );
    assert!(fs.stat("/sock").unwrap().is_special());
    assert_eq!(fs.open("/fifo", libc::O_RDONLY, 0), Err(Errno::ENXIO));
    assert_eq!(fs.open("/blk", libc::O_RDWR, 0), Err(Errno::ENXIO));
    let d = fs.open("/", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = fs.getdents64(d, &mut buf).unwrap();
    let types: Vec<(Vec<u8>, u8)> = ulfs::parse_dirents(&buf[..n])
        .into_iter()
        .map(|e| (e.name.to_vec(), e.dtype))
        .collect();
    assert!(
        types.contains(&(b"fifo".to_vec(), libc::DT_FIFO)),
        "{types:?}"
    );
    assert!(
        types.contains(&(b"blk".to_vec(), libc::DT_BLK)),
        "{types:?}"
    );
    fs.close(d).unwrap();
    fs.unlink("/sock").unwrap();
    fs.unmount().unwrap();
    let report = ulfs::fsck(&img, &mut ulfs::FsckOptions::default()).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

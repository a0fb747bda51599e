//! The decoded inodes of open files (fs/open_inodes.rs): changes the data
//! path keeps in them (a write into blocks a file already has, the atime of
//! a read) reach the image wherever the slot would have: at fsync, at the
//! commit interval, at unmount, and in parts when there are more of them
//! than one transaction holds.

use ulfs::store::{BlockStore, Fate, SimDisk};
use ulfs::{Fs, MkfsOptions, Mode, MountOptions, format_store};

fn formatted(blocks: u64, mode: Mode) -> Box<dyn BlockStore> {
    let opts = MkfsOptions {
        mode,
        ..Default::default()
    };
    format_store(Box::new(SimDisk::new(blocks)), &opts).unwrap()
}

/// What survives a power cut now: every write not yet flushed is lost.
fn after_power_cut(fs: &Fs) -> Fs {
    let image = fs.sim_disk().unwrap().crash_image(|_| Fate::Lost);
    Fs::mount_store(
        Box::new(SimDisk::from_image(image)),
        MountOptions::default(),
    )
    .unwrap()
}

fn read_all(fs: &mut Fs, path: &str) -> Vec<u8> {
    let fd = fs.open(path, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let n = fs.read(fd, &mut buf).unwrap();
    fs.close(fd).unwrap();
    buf.truncate(n);
    buf
}

/// Overwrites and appends inside a file's last block take the fast path;
/// fsync makes their size, bytes and times durable in both modes.
#[test]
fn fast_path_writes_are_durable_after_fsync() {
    for mode in [Mode::Journal, Mode::None] {
        let mut fs = Fs::mount_store(formatted(2048, mode), MountOptions::default()).unwrap();
        let fd = fs.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        fs.write(fd, b"0123456789").unwrap();
        fs.fsync(fd).unwrap();
        // Within the block the first write allocated: no allocation.
        fs.pwrite(fd, b"ab", 2).unwrap();
        fs.write(fd, b"-tail").unwrap();
        assert_eq!(fs.fstat(fd).unwrap().size, 15);
        let mtime = fs.fstat(fd).unwrap().mtime;
        fs.fsync(fd).unwrap();
        let mut after = after_power_cut(&fs);
        assert_eq!(read_all(&mut after, "/f"), b"01ab456789-tail", "{mode}");
        let st = after.stat("/f").unwrap();
        assert_eq!(st.size, 15, "{mode}");
        assert_eq!(st.mtime, mtime, "{mode}");
    }
}

/// A program that writes through the fast path and never calls fsync still
/// gets its changes committed once they are as old as the commit interval.
#[test]
fn fast_path_changes_commit_within_the_interval() {
    let opts = MountOptions {
        commit_interval: std::time::Duration::from_millis(30),
        ..Default::default()
    };
    let mut fs = Fs::mount_store(formatted(2048, Mode::Journal), opts).unwrap();
    let fd = fs.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.write(fd, b"first").unwrap();
    fs.fsync(fd).unwrap();
    fs.write(fd, b" second").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(60));
    // The coarse clock ticks every few milliseconds: keep writing until a
    // write sees the interval passed (a bounded number of times).
    for _ in 0..200 {
        fs.pwrite(fd, b"S", 6).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        if after_power_cut(&fs).stat("/f").unwrap().size == 12 {
            break;
        }
    }
    let mut after = after_power_cut(&fs);
    assert_eq!(read_all(&mut after, "/f"), b"first Second");
}

/// Reading thousands of open files changes the atime of each in memory;
/// written back when they close, they fill more inode blocks than one
/// transaction may hold, which must commit in parts (regression: unmount
/// failed with EIO and lost every file).
#[test]
fn thousands_of_atime_changes_commit_in_parts() {
    let mut fs = Fs::mount_store(formatted(8192, Mode::Journal), MountOptions::default()).unwrap();
    const FILES: usize = 4000;
    for i in 0..FILES {
        let fd = fs
            .open(format!("/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        fs.write(fd, format!("file {i}").as_bytes()).unwrap();
        fs.close(fd).unwrap();
    }
    fs.sync().unwrap();
    // Past a tick of the coarse clock the times come from (4 ms at
    // HZ=250, 10 at HZ=100): a read in the writes' tick leaves atime equal
    // to mtime, as Linux does, and the check below would see no change.
    std::thread::sleep(std::time::Duration::from_millis(25));
    let mut fds = Vec::new();
    for i in 0..FILES {
        let fd = fs.open(format!("/f{i}"), libc::O_RDONLY, 0).unwrap();
        let mut buf = [0u8; 32];
        let n = fs.read(fd, &mut buf).unwrap();
        assert_eq!(&buf[..n], format!("file {i}").as_bytes());
        fds.push(fd);
    }
    for fd in fds {
        fs.close(fd).unwrap();
    }
    fs.sync().unwrap();
    let mut after = after_power_cut(&fs);
    for i in (0..FILES).step_by(97) {
        let st = after.stat(format!("/f{i}")).unwrap();
        assert!(st.atime > st.mtime, "file {i}: the read's atime is durable");
        assert_eq!(
            read_all(&mut after, &format!("/f{i}")),
            format!("file {i}").as_bytes()
        );
    }
    fs.unmount().unwrap();
}

/// Two descriptors of one file share its decoded inode: a write through
/// one is seen by fstat, SEEK_END and O_APPEND through the other at once,
/// and by a path `stat`.
#[test]
fn descriptors_of_one_file_see_each_other() {
    let mut fs = Fs::mount_store(formatted(2048, Mode::Journal), MountOptions::default()).unwrap();
    let a = fs.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.write(a, &[1u8; 100]).unwrap();
    let b = fs.open("/f", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    fs.pwrite(a, &[2u8; 50], 100).unwrap();
    assert_eq!(fs.fstat(b).unwrap().size, 150);
    assert_eq!(fs.lseek(b, 0, libc::SEEK_END).unwrap(), 150);
    fs.write(b, &[3u8; 10]).unwrap();
    assert_eq!(fs.fstat(a).unwrap().size, 160);
    assert_eq!(fs.stat("/f").unwrap().size, 160);
    fs.close(a).unwrap();
    assert_eq!(fs.stat("/f").unwrap().size, 160);
    fs.close(b).unwrap();
    fs.unmount().unwrap();
}

/// The fields of a `struct stat` that a change can move.
fn stat_key(st: &libc::stat) -> [i64; 13] {
    [
        st.st_ino as i64,
        st.st_mode as i64,
        st.st_nlink as i64,
        st.st_uid as i64,
        st.st_gid as i64,
        st.st_size,
        st.st_blocks,
        st.st_atime,
        st.st_atime_nsec,
        st.st_mtime,
        st.st_mtime_nsec,
        st.st_ctime,
        st.st_ctime_nsec,
    ]
}

/// fstat answers from a `struct stat` it keeps while the inode is
/// unchanged: every kind of change, through the descriptor's fast path or
/// through a call by name, must make it build a new one.
#[test]
fn fstat_follows_every_change_of_an_open_inode() {
    use std::mem::MaybeUninit;
    for mode in [Mode::Journal, Mode::None] {
        let mut fs = Fs::mount_store(formatted(4096, mode), MountOptions::default()).unwrap();
        let fd = fs.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let dup = fs.dup(fd).unwrap();
        let check = |fs: &mut Fs, what: &str, path: &str| {
            let mut fast = MaybeUninit::uninit();
            assert!(fs.fstat_libc_decoded(fd, &mut fast), "{mode} {what}");
            // SAFETY: filled by the call that returned true.
            let fast = unsafe { fast.assume_init() };
            let mut slow = MaybeUninit::uninit();
            fs.fstat_libc(dup, &mut slow).unwrap();
            // SAFETY: filled by the call that returned Ok.
            let slow = unsafe { slow.assume_init() };
            let by_name = fs.stat(path).map(|s| s.to_libc());
            let fresh = by_name.unwrap_or_else(|_| fs.fstat(fd).unwrap().to_libc());
            assert_eq!(stat_key(&fast), stat_key(&fresh), "{mode}: after {what}");
            assert_eq!(stat_key(&slow), stat_key(&fresh), "{mode}: after {what}");
        };
        fs.write(fd, b"hello").unwrap();
        check(&mut fs, "a first write", "/f");
        check(&mut fs, "nothing", "/f");
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs.pwrite(fd, b"!", 2).unwrap();
        check(&mut fs, "an overwrite", "/f");
        fs.pwrite(fd, &[7u8; 9000], 5000).unwrap();
        check(&mut fs, "a write that allocates", "/f");
        let mut buf = [0u8; 16];
        fs.pread(fd, &mut buf, 0).unwrap();
        check(&mut fs, "a read", "/f");
        fs.truncate("/f", 100).unwrap();
        check(&mut fs, "truncate by name", "/f");
        fs.chmod("/f", 0o600).unwrap();
        check(&mut fs, "chmod", "/f");
        fs.chown("/f", 12, 34).unwrap();
        check(&mut fs, "chown", "/f");
        fs.utimensat(
            libc::AT_FDCWD,
            "/f",
            Some([ulfs::Timespec { sec: 5, nsec: 6 }; 2]),
            0,
        )
        .unwrap();
        check(&mut fs, "utimensat", "/f");
        fs.link("/f", "/g").unwrap();
        check(&mut fs, "link", "/g");
        fs.rename("/g", "/h").unwrap();
        check(&mut fs, "rename", "/h");
        // (A call undone after it changed the inode: the unit test
        // `an_undone_call_leaves_the_open_inode_as_the_slot`.)
        assert!(fs.link("/f", "/h").is_err());
        check(&mut fs, "a failed link", "/h");
        fs.unlink("/h").unwrap();
        fs.unlink("/f").unwrap();
        check(&mut fs, "unlink of every name", "/f");
        fs.ftruncate(fd, 3).unwrap();
        check(&mut fs, "ftruncate of an unlinked file", "/f");
    }
}

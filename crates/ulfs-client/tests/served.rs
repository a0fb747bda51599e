//! A server in this process (its own threads), and clients connected to it
//! over real sockets and channels: calls answer as the library's do, two
//! clients see one file system, a file one unlinks stays readable by the
//! other that holds it open, and a stopped server leaves a clean image and
//! clients that get ENOTCONN.

mod common;

use common::*;
use std::time::Duration;
use ulfs::{Errno, Fs, MountOptions};
use ulfs_client::Client;

#[test]
fn calls_through_the_server_answer_as_the_library() {
    let mut s = serve();
    let mut c = s.client();
    c.nop().unwrap();
    c.mkdir("/d", 0o755).unwrap();
    assert_eq!(c.mkdir("/d", 0o755), Err(Errno::EEXIST));
    let fd = c.open("/d/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    // A write larger than the data area is split, and reads back whole.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(c.write(fd, &big).unwrap(), big.len());
    let mut back = vec![0u8; big.len() + 10];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), big.len());
    assert_eq!(&back[..big.len()], &big[..]);
    assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), big.len() as u64);
    let st = c.fstat(fd).unwrap();
    assert_eq!(st.size, big.len() as u64);
    assert_eq!(c.stat("/d/f").unwrap(), st);
    c.symlink("f", "/d/l").unwrap();
    assert_eq!(c.readlink("/d/l").unwrap(), b"f");
    assert_eq!(c.stat("/d/l").unwrap().ino, st.ino);
    c.chdir("/d").unwrap();
    assert_eq!(c.getcwd().unwrap(), b"/d");
    c.rename("f", "g").unwrap();
    assert_eq!(c.stat("f"), Err(Errno::ENOENT));
    assert_eq!(c.close(fd), Ok(()));
    assert_eq!(c.close(fd), Err(Errno::EBADF));
    assert_eq!(c.read(77, &mut [0; 4]), Err(Errno::EBADF));
    assert_eq!(c.open("", libc::O_RDONLY, 0), Err(Errno::ENOENT));
    assert_eq!(
        c.open(vec![b'a'; 5000], libc::O_RDONLY, 0),
        Err(Errno::ENAMETOOLONG)
    );
    // A directory listing.
    let dfd = c.open(".", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = c.getdents64(dfd, &mut buf).unwrap();
    let names: Vec<Vec<u8>> = ulfs::parse_dirents(&buf[..n])
        .into_iter()
        .map(|d| d.name.to_vec())
        .collect();
    assert!(names.contains(&b"g".to_vec()) && names.contains(&b"l".to_vec()));
    c.unlink("g").unwrap();
    c.unlink("l").unwrap();
    c.chdir("/").unwrap();
    assert_eq!(c.rmdir("/d"), Ok(()));
    s.stop();
    drop(s.dir);
}

#[test]
fn clients_share_one_file_system_and_unlinked_files_live_while_open() {
    let mut s = serve();
    let (mut a, mut b) = (s.client(), s.client());
    let fd = a.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    a.write(fd, b"written by a").unwrap();
    // b sees it at once, under its own descriptors.
    let bfd = b.open("/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(b.read(bfd, &mut buf).unwrap(), 12);
    assert_eq!(&buf[..12], b"written by a");
    // Each client has its own working directory and umask.
    a.mkdir("/da", 0o777).unwrap();
    a.chdir("/da").unwrap();
    assert_eq!(b.getcwd().unwrap(), b"/");
    // b unlinks it; a still reads and writes it; names are gone for both.
    b.close(bfd).unwrap();
    b.unlink("/f").unwrap();
    assert_eq!(a.stat("/f"), Err(Errno::ENOENT));
    a.pwrite(fd, b"!", 12).unwrap();
    assert_eq!(a.pread(fd, &mut buf, 0).unwrap(), 13);
    assert_eq!(a.fstat(fd).unwrap().nlink, 0);
    let free_before = b.statfs("/").unwrap().bfree;
    a.close(fd).unwrap();
    // Its blocks come back once its last holder let go.
    let free_after = b.statfs("/").unwrap().bfree;
    assert!(free_after >= free_before, "{free_before} -> {free_after}");
    s.stop();
}

#[test]
fn a_client_that_goes_lets_go_of_its_files() {
    let mut s = serve();
    let mut keeper = s.client();
    // A file of its own first, so the inode block the next file's slot is
    // in exists already (inode blocks stay once made).
    let fd = keeper
        .open("/mine", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    keeper.close(fd).unwrap();
    let free = keeper.statfs("/").unwrap().bfree;
    {
        let mut gone = s.client();
        let fd = gone
            .open("/held", libc::O_CREAT | libc::O_RDWR, 0o644)
            .unwrap();
        gone.write(fd, &vec![1u8; 1 << 20]).unwrap();
        gone.unlink("/held").unwrap();
        // Dropped with the file open and unlinked: the server closes it.
    }
    let server = s.server.as_ref().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.clients() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the client was not torn down"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its megabyte is free again: the server closed the file for it.
    assert_eq!(keeper.statfs("/").unwrap().bfree, free);
    s.stop();
}

#[test]
fn a_stopped_server_leaves_clients_with_enotconn() {
    let mut s = serve();
    let mut c = s.client();
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.write(fd, b"kept").unwrap();
    s.stop();
    assert_eq!(c.nop(), Err(Errno::ENOTCONN));
    assert_eq!(c.write(fd, b"lost"), Err(Errno::ENOTCONN));
    // What was written before the stop is in the image.
    let mut fs = Fs::mount(&s.img, MountOptions::default()).unwrap();
    let fd = fs.open("/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(fs.read(fd, &mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"kept");
    assert_eq!(Client::connect(&s.socket).err(), Some(Errno::ENOENT));
}

/// A fork that did not happen: CANCEL_TOKEN lets the process the server
/// set aside for the child exit at once, so a `flock` on a description it
/// shared ends with the parent's close (not 30 s later); the token is
/// worth nothing after, and only its preparer may cancel it.
#[test]
fn a_cancelled_fork_lets_go_of_its_descriptions_at_once() {
    use ulfs_client::locks::{LockCmd, LockRequest};
    let mut s = serve();
    let (mut parent, mut other) = (s.client(), s.client());
    let fd = parent
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let ex = LockRequest::flock(libc::LOCK_EX | libc::LOCK_NB).unwrap();
    assert!(matches!(
        parent.lock(fd, LockCmd::Set, &ex).unwrap(),
        ulfs_client::locks::LockAnswer::Granted
    ));
    let token = parent.prepare_fork().unwrap();
    assert_eq!(other.cancel_token(&token), Err(Errno::EACCES));
    parent.close(fd).unwrap();
    // The set-aside child still holds the description, and its lock.
    let ofd = other.open("/f", libc::O_RDWR, 0).unwrap();
    assert!(matches!(
        other.lock(ofd, LockCmd::Set, &ex).unwrap(),
        ulfs_client::locks::LockAnswer::Blocked(_)
    ));
    parent.cancel_token(&token).unwrap();
    assert!(matches!(
        other.lock(ofd, LockCmd::Set, &ex).unwrap(),
        ulfs_client::locks::LockAnswer::Granted
    ));
    assert_eq!(parent.cancel_token(&token), Err(Errno::ENOENT));
    assert!(
        ulfs_client::Client::adopt(&s.socket, &token, ulfs_wire::AdoptKind::Fork).is_err(),
        "a cancelled token was adopted"
    );
    drop((parent, other));
    s.stop();
}

/// CLOSE of a descriptor a client says it kept for itself leaves the
/// process's POSIX locks only while the process still has the file open:
/// a lock never outlives the process's last descriptor of the file (it
/// would stay on the inode number, for the next file to get it).
#[test]
fn a_kept_close_never_leaves_a_lock_without_a_descriptor() {
    use ulfs_client::locks::{LockAnswer, LockClass, LockCmd, LockRequest};
    let mut s = serve();
    let (mut a, mut b) = (s.client(), s.client());
    let lock = LockRequest {
        class: LockClass::Posix,
        kind: libc::F_WRLCK,
        whence: libc::SEEK_SET,
        start: 0,
        len: 0,
    };
    let fa = a.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let kept = a.dup(fa).unwrap();
    assert!(matches!(
        a.lock(fa, LockCmd::Set, &lock).unwrap(),
        LockAnswer::Granted
    ));
    let fb = b.open("/f", libc::O_RDWR, 0).unwrap();
    // Another descriptor of the file is open: the lock stays.
    a.close_kept(kept).unwrap();
    assert!(matches!(
        b.lock(fb, LockCmd::Set, &lock).unwrap(),
        LockAnswer::Blocked(_)
    ));
    // The last one: the lock goes, kept or not.
    a.close_kept(fa).unwrap();
    assert!(matches!(
        b.lock(fb, LockCmd::Set, &lock).unwrap(),
        LockAnswer::Granted
    ));
    drop((a, b));
    s.stop();
}

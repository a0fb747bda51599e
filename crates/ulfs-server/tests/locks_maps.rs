//! Locks and shared mappings through a server in this process, with
//! clients over real sockets and channels: POSIX, OFD and `flock` locks
//! between clients (conflicts, `F_GETLK` with the holder's pid, release at
//! any close of the file, at the last close of a description, when a
//! client goes; ENOLCK past the caps), and `MAP_SHARED` mappings two
//! clients share (stores seen through the other mapping and the server's
//! reads, writes seen through the mappings, truncation, write-back at
//! MSYNC, at the last UNMAP, when a client goes and when the server
//! stops; the kernel's EACCES, EINVAL and ENODEV cases).
//!
//! The clients are in this process, so every POSIX lock's holder has this
//! process's pid: what F_GETLK reports is checked against it.

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::time::Duration;

use common::*;
use ulfs::{Errno, Fs, MountOptions};
use ulfs_client::Client;
use ulfs_client::locks::{Holder, LockAnswer, LockClass, LockCmd, LockRequest};

const RW: i32 = libc::O_RDWR | libc::O_CREAT;
const PROT_RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

fn me() -> i32 {
    std::process::id() as i32
}

fn posix(kind: i32, whence: i32, start: i64, len: i64) -> LockRequest {
    LockRequest {
        class: LockClass::Posix,
        kind,
        whence,
        start,
        len,
    }
}

fn ofd(kind: i32, start: i64, len: i64) -> LockRequest {
    LockRequest {
        class: LockClass::Ofd,
        ..posix(kind, libc::SEEK_SET, start, len)
    }
}

fn set(c: &mut Client, fd: i32, q: LockRequest) -> Result<LockAnswer, Errno> {
    c.lock(fd, LockCmd::Set, &q)
}

fn get(c: &mut Client, fd: i32, q: LockRequest) -> Result<LockAnswer, Errno> {
    c.lock(fd, LockCmd::Get, &q)
}

fn blocked(write: bool, start: u64, len: u64, pid: i32) -> LockAnswer {
    LockAnswer::Blocked(Holder {
        write,
        start,
        len,
        pid,
    })
}

const W: i32 = libc::F_WRLCK;
const R: i32 = libc::F_RDLCK;
const U: i32 = libc::F_UNLCK;
const SET: i32 = libc::SEEK_SET;

#[test]
fn posix_locks_conflict_between_clients_and_getlk_names_the_pid() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/db", RW, 0o644).unwrap();
    let fb = b.open("/db", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fa, &[7; 1000], 0), Ok(1000));

    assert_eq!(
        set(&mut a, fa, posix(W, SET, 0, 100)),
        Ok(LockAnswer::Granted)
    );
    // The other client meets it, and is told who holds it.
    let holder = blocked(true, 0, 100, me());
    assert_eq!(set(&mut b, fb, posix(R, SET, 50, 10)), Ok(holder));
    assert_eq!(get(&mut b, fb, posix(W, SET, 0, 0)), Ok(holder));
    assert_eq!(
        get(&mut b, fb, posix(W, SET, 100, 10)),
        Ok(LockAnswer::Free)
    );
    // A process's own locks are never in its way.
    assert_eq!(get(&mut a, fa, posix(W, SET, 0, 0)), Ok(LockAnswer::Free));
    assert_eq!(
        set(&mut a, fa, posix(R, SET, 0, 50)),
        Ok(LockAnswer::Granted)
    );
    // Readers share.
    assert_eq!(
        set(&mut b, fb, posix(R, SET, 10, 20)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(
        get(&mut b, fb, posix(W, SET, 60, 1)),
        Ok(blocked(true, 50, 50, me()))
    );
    assert_eq!(
        set(&mut b, fb, posix(W, SET, 100, 10)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(
        get(&mut a, fa, posix(R, SET, 0, 0)),
        Ok(blocked(true, 100, 10, me()))
    );

    // SEEK_CUR and SEEK_END are the server's: the description's offset
    // and the file's size.
    assert_eq!(a.lseek(fa, 300, SET), Ok(300));
    let cur = posix(W, libc::SEEK_CUR, 0, 10);
    assert_eq!(set(&mut a, fa, cur), Ok(LockAnswer::Granted));
    assert_eq!(
        get(&mut b, fb, posix(R, SET, 305, 1)),
        Ok(blocked(true, 300, 10, me()))
    );
    let end = posix(W, libc::SEEK_END, -10, 0);
    assert_eq!(set(&mut b, fb, end), Ok(LockAnswer::Granted));
    assert_eq!(
        get(&mut a, fa, posix(R, SET, 995, 1)),
        Ok(blocked(true, 990, 0, me()))
    );
    // Linux's errors.
    assert_eq!(set(&mut a, fa, posix(W, 3, 0, 0)), Err(Errno::EINVAL));
    assert_eq!(set(&mut a, fa, posix(W, SET, -1, 0)), Err(Errno::EINVAL));
    assert_eq!(set(&mut a, fa, posix(W, SET, 5, -6)), Err(Errno::EINVAL));
    assert_eq!(
        set(&mut a, fa, posix(W, SET, i64::MAX, 2)),
        Err(Errno::EOVERFLOW)
    );
    assert_eq!(set(&mut a, fa, posix(9, SET, 0, 0)), Err(Errno::EINVAL));
    assert_eq!(get(&mut a, fa, posix(U, SET, 0, 0)), Err(Errno::EINVAL));
    assert_eq!(set(&mut a, 999, posix(W, SET, 0, 0)), Err(Errno::EBADF));
    let ro = a.open("/db", libc::O_RDONLY, 0).unwrap();
    let wo = a.open("/db", libc::O_WRONLY, 0).unwrap();
    assert_eq!(set(&mut a, ro, posix(W, SET, 0, 1)), Err(Errno::EBADF));
    assert_eq!(set(&mut a, wo, posix(R, SET, 0, 1)), Err(Errno::EBADF));
    // Unlocking needs no mode; asking needs none either.
    assert_eq!(
        set(&mut a, ro, posix(U, SET, 2000, 1)),
        Ok(LockAnswer::Granted)
    );
    assert!(matches!(
        get(&mut a, wo, posix(R, SET, 0, 0)),
        Ok(LockAnswer::Blocked(_))
    ));
    s.stop();
}

#[test]
fn getlk_reports_the_lowest_holder_and_a_range_that_meets_nothing_is_free() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/f", RW, 0o644).unwrap();
    let fb = b.open("/f", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fa, &[1; 1000], 0), Ok(1000));
    assert_eq!(
        set(&mut a, fa, posix(W, SET, 500, 10)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(
        set(&mut a, fa, posix(R, SET, 100, 10)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(
        get(&mut b, fb, posix(W, SET, 0, 0)),
        Ok(blocked(false, 100, 10, me()))
    );
    // A negative length: the bytes before the start, [985, 990).
    let before_end = posix(W, libc::SEEK_END, -10, -5);
    assert_eq!(get(&mut b, fb, before_end), Ok(LockAnswer::Free));
    assert_eq!(
        get(&mut b, fb, posix(W, libc::SEEK_END, -495, -10)),
        Ok(blocked(true, 500, 10, me()))
    );
    s.stop();
}

#[test]
fn posix_locks_go_with_any_close_of_the_file() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let f1 = a.open("/f", RW, 0o644).unwrap();
    let f2 = a.open("/f", libc::O_RDONLY, 0).unwrap();
    let other = a.open("/other", RW, 0o644).unwrap();
    let fb = b.open("/f", RW, 0o644).unwrap();
    let q = posix(W, SET, 0, 0);
    assert_eq!(set(&mut a, f1, q), Ok(LockAnswer::Granted));
    assert!(matches!(set(&mut b, fb, q), Ok(LockAnswer::Blocked(_))));
    // Closing another file's descriptor changes nothing...
    a.close(other).unwrap();
    assert!(matches!(set(&mut b, fb, q), Ok(LockAnswer::Blocked(_))));
    // ...closing any descriptor of this file drops every lock on it.
    a.close(f2).unwrap();
    assert_eq!(set(&mut b, fb, q), Ok(LockAnswer::Granted));
    assert_eq!(
        set(&mut a, f1, q),
        Ok(blocked(true, 0, 0, me())),
        "b holds it now"
    );
    assert_eq!(
        set(&mut b, fb, posix(U, SET, 0, 0)),
        Ok(LockAnswer::Granted)
    );

    // DUP2 closing a descriptor of the file does the same.
    assert_eq!(set(&mut a, f1, q), Ok(LockAnswer::Granted));
    let f3 = a.open("/f", libc::O_RDONLY, 0).unwrap();
    let x = a.open("/other", RW, 0o644).unwrap();
    assert!(matches!(set(&mut b, fb, q), Ok(LockAnswer::Blocked(_))));
    assert_eq!(a.dup2(x, f3), Ok(f3));
    assert_eq!(set(&mut b, fb, q), Ok(LockAnswer::Granted));
    s.stop();
}

#[test]
fn locks_go_when_a_client_goes_and_a_waiter_gets_them() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/f", RW, 0o644).unwrap();
    let fb = b.open("/f", RW, 0o644).unwrap();
    let fb2 = b.open("/f", RW, 0o644).unwrap();
    assert_eq!(
        set(&mut a, fa, posix(W, SET, 0, 10)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(set(&mut a, fa, ofd(W, 20, 10)), Ok(LockAnswer::Granted));
    let ex = LockRequest::flock(libc::LOCK_EX).unwrap();
    assert_eq!(set(&mut a, fa, ex), Ok(LockAnswer::Granted));
    assert!(matches!(
        set(&mut b, fb, posix(W, SET, 0, 10)),
        Ok(LockAnswer::Blocked(_))
    ));
    assert_eq!(
        set(&mut b, fb, ofd(W, 20, 10)),
        Ok(blocked(true, 20, 10, -1))
    );
    assert_eq!(set(&mut b, fb2, ex), Ok(blocked(true, 0, 0, -1)));
    // b waits for the POSIX lock on one thread; a goes meanwhile.
    let waiter = std::thread::spawn(move || {
        b.lock_wait(fb, &posix(W, SET, 0, 10)).unwrap();
        b
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!waiter.is_finished(), "granted while a still holds it");
    drop(a);
    let mut b = within(10, "the waiter", move || waiter.join().unwrap());
    // Its OFD and flock locks went with it too.
    assert_eq!(set(&mut b, fb, ofd(W, 20, 10)), Ok(LockAnswer::Granted));
    assert_eq!(set(&mut b, fb2, ex), Ok(LockAnswer::Granted));
    s.wait_clients(1);
    s.stop();
}

#[test]
fn ofd_locks_belong_to_descriptions() {
    let mut s = serve(64 << 20, |_| {});
    let mut a = s.client();
    let d1 = a.open("/f", RW, 0o644).unwrap();
    let d2 = a.open("/f", RW, 0o644).unwrap();
    assert_eq!(set(&mut a, d1, ofd(W, 0, 100)), Ok(LockAnswer::Granted));
    // Another description of the same client meets it; so do the
    // client's own POSIX locks. The holder is reported as pid -1.
    assert_eq!(
        set(&mut a, d2, ofd(R, 10, 1)),
        Ok(blocked(true, 0, 100, -1))
    );
    assert_eq!(
        set(&mut a, d2, posix(R, SET, 10, 1)),
        Ok(blocked(true, 0, 100, -1))
    );
    assert_eq!(get(&mut a, d2, ofd(R, 0, 0)), Ok(blocked(true, 0, 100, -1)));
    // A dup is the same description: the same owner.
    let d3 = a.dup(d1).unwrap();
    assert_eq!(set(&mut a, d3, ofd(W, 50, 100)), Ok(LockAnswer::Granted));
    assert_eq!(get(&mut a, d2, ofd(R, 0, 0)), Ok(blocked(true, 0, 150, -1)));
    // Closing one of its descriptors keeps the lock; the last drops it.
    a.close(d1).unwrap();
    assert!(matches!(
        set(&mut a, d2, ofd(R, 10, 1)),
        Ok(LockAnswer::Blocked(_))
    ));
    a.close(d3).unwrap();
    assert_eq!(set(&mut a, d2, ofd(W, 0, 0)), Ok(LockAnswer::Granted));
    s.stop();
}

#[test]
fn flock_locks_are_their_own_world() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/f", RW, 0o644).unwrap();
    // flock needs no open mode: a read-only descriptor takes LOCK_EX.
    let fb = b.open("/f", libc::O_RDONLY, 0).unwrap();
    let (sh, ex, un) = (
        LockRequest::flock(libc::LOCK_SH | libc::LOCK_NB).unwrap(),
        LockRequest::flock(libc::LOCK_EX).unwrap(),
        LockRequest::flock(libc::LOCK_UN).unwrap(),
    );
    assert_eq!(LockRequest::flock(77), Err(Errno::EINVAL));
    assert_eq!(set(&mut b, fb, ex), Ok(LockAnswer::Granted));
    assert_eq!(set(&mut a, fa, sh), Ok(blocked(true, 0, 0, -1)));
    // Record locks do not meet flock locks.
    assert_eq!(
        set(&mut a, fa, posix(W, SET, 0, 0)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(set(&mut b, fb, un), Ok(LockAnswer::Granted));
    assert_eq!(set(&mut a, fa, sh), Ok(LockAnswer::Granted));
    assert_eq!(set(&mut b, fb, sh), Ok(LockAnswer::Granted));
    assert_eq!(set(&mut b, fb, ex), Ok(blocked(false, 0, 0, -1)));
    // b's failed upgrade let its shared lock go (Linux), so a upgrades.
    assert_eq!(set(&mut a, fa, ex), Ok(LockAnswer::Granted));
    s.stop();
}

#[test]
fn enolck_past_the_caps() {
    let mut s = serve(64 << 20, |cfg| {
        cfg.limits.max_locks_per_owner = 8;
        cfg.limits.max_locks = 12;
    });
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/f", RW, 0o644).unwrap();
    let fb = b.open("/f", RW, 0o644).unwrap();
    for i in 0..8 {
        assert_eq!(
            set(&mut a, fa, posix(W, SET, i * 10, 1)),
            Ok(LockAnswer::Granted)
        );
    }
    let enolck = Err(Errno(libc::ENOLCK));
    assert_eq!(set(&mut a, fa, posix(W, SET, 100, 1)), enolck);
    // Growing a record adds none; splitting one does.
    assert_eq!(
        set(&mut a, fa, posix(W, SET, 1, 3)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(set(&mut a, fa, posix(U, SET, 1, 1)), enolck);
    // A description is its own owner, under the same total.
    for i in 0..4 {
        assert_eq!(
            set(&mut b, fb, ofd(R, 200 + i * 10, 1)),
            Ok(LockAnswer::Granted)
        );
    }
    assert_eq!(set(&mut b, fb, ofd(R, 300, 1)), enolck);
    // Letting go is never refused, and makes room.
    assert_eq!(
        set(&mut a, fa, posix(U, SET, 0, 0)),
        Ok(LockAnswer::Granted)
    );
    assert_eq!(set(&mut b, fb, ofd(R, 300, 1)), Ok(LockAnswer::Granted));
    s.stop();
}

/// A client's `mmap` of an object's memfd, unmapped on drop.
struct Mapped {
    base: NonNull<u8>,
    len: usize,
}

impl Mapped {
    fn new(memfd: &OwnedFd, offset: u64, len: usize, prot: i32) -> Result<Mapped, Errno> {
        let prot = rustix::mm::ProtFlags::from_bits_truncate(prot as u32);
        // SAFETY: a fresh shared mapping of the memfd; no existing memory
        // is affected.
        let p = unsafe {
            rustix::mm::mmap(
                ptr::null_mut(),
                len,
                prot,
                rustix::mm::MapFlags::SHARED,
                memfd,
                offset,
            )
        }
        .map_err(|e| Errno(e.raw_os_error()))?;
        Ok(Mapped {
            base: NonNull::new(p.cast()).unwrap(),
            len,
        })
    }

    fn read(&self, off: usize, n: usize) -> Vec<u8> {
        assert!(off + n <= self.len);
        let mut v = vec![0u8; n];
        // SAFETY: in bounds of the mapping, checked above.
        unsafe { ptr::copy_nonoverlapping(self.base.as_ptr().add(off), v.as_mut_ptr(), n) };
        v
    }

    fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds of a writable mapping, checked above.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(off), bytes.len())
        };
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn pread(c: &mut Client, fd: i32, off: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let got = c.pread(fd, &mut v, off).unwrap();
    v.truncate(got);
    v
}

/// What the image holds for `path` once made durable: the server syncs,
/// and a copy of the image file (the server keeps the original locked) is
/// mounted and read. Reads through the server would see the mappings'
/// bytes; this sees only what was written back.
fn durable(s: &Served, c: &mut Client, path: &str) -> Vec<u8> {
    c.sync().unwrap();
    let copy = s.dir.path().join("copy");
    std::fs::copy(&s.img, &copy).unwrap();
    let bytes = read_image(&copy, path);
    std::fs::remove_file(&copy).unwrap();
    bytes
}

fn read_image(img: &Path, path: &str) -> Vec<u8> {
    let mut fs = unbusy(|| Fs::mount(img, MountOptions::default()));
    let fd = fs.open(path, libc::O_RDONLY, 0).unwrap();
    let size = fs.fstat(fd).unwrap().size as usize;
    let mut v = vec![0u8; size];
    assert_eq!(fs.pread(fd, &mut v, 0), Ok(size));
    fs.close(fd).unwrap();
    fs.unmount().unwrap();
    v
}

#[test]
fn two_clients_share_a_mapping() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/shm", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fa, &[b'x'; 8192], 0), Ok(8192));
    let fb = b.open("/shm", RW, 0o644).unwrap();
    let (oa, ma) = a.map_shared(fa, 0, 8192, PROT_RW).unwrap();
    let (ob, mb) = b.map_shared(fb, 0, 8192, PROT_RW).unwrap();
    assert_eq!(oa, ob, "one object per file");
    let (ma, mb) = (
        Mapped::new(&ma, 0, 8192, PROT_RW).unwrap(),
        Mapped::new(&mb, 0, 8192, PROT_RW).unwrap(),
    );
    assert_eq!(ma.read(0, 8192), vec![b'x'; 8192], "filled from the file");
    // A store through one mapping: seen through the other, and by the
    // server's reads of the file, for both clients.
    ma.write(100, b"stored by a");
    assert_eq!(mb.read(100, 11), b"stored by a");
    assert_eq!(pread(&mut b, fb, 95, 20), b"xxxxxstored by axxxx");
    assert_eq!(pread(&mut a, fa, 100, 11), b"stored by a");
    let mut buf = [0u8; 11];
    assert_eq!(b.lseek(fb, 100, SET), Ok(100));
    assert_eq!(b.read(fb, &mut buf), Ok(11));
    assert_eq!(&buf, b"stored by a");
    // A write through the server: seen through both mappings.
    assert_eq!(b.pwrite(fb, b"written by b", 4000), Ok(12));
    assert_eq!(ma.read(4000, 12), b"written by b");
    assert_eq!(
        a.write(fa, b"W")
            .and_then(|_| a.lseek(fa, 0, libc::SEEK_CUR)),
        Ok(1)
    );
    assert_eq!(mb.read(0, 2), b"Wx");

    // Growing as SQLite grows its -shm: a byte at the end of the next
    // region, then a mapping of it, filled from the file.
    assert_eq!(b.pwrite(fb, b"E", 16383), Ok(1));
    let (oc, mc) = b.map_shared(fb, 8192, 8192, PROT_RW).unwrap();
    assert_eq!(oc, oa);
    let mc = Mapped::new(&mc, 8192, 8192, PROT_RW).unwrap();
    assert_eq!(mc.read(0, 8191), vec![0; 8191]);
    assert_eq!(mc.read(8191, 1), b"E");
    mc.write(0, b"region two");
    assert_eq!(pread(&mut a, fa, 8192, 10), b"region two");
    assert_eq!(ma.read(100, 11), b"stored by a", "the first region kept");

    // A shrink zeroes what it cut off, in every mapping; a growth reads
    // as zeros.
    b.ftruncate(fb, 104).unwrap();
    assert_eq!(ma.read(100, 11), b"stor\0\0\0\0\0\0\0");
    assert_eq!(mc.read(0, 10), vec![0; 10]);
    b.ftruncate(fb, 200).unwrap();
    assert_eq!(pread(&mut a, fa, 100, 100), {
        let mut v = b"stor".to_vec();
        v.resize(100, 0);
        v
    });

    // Nothing stored was written back yet: the image holds the file as
    // written through the server (the WRITE of `W` included).
    let on_disk = durable(&s, &mut a, "/shm");
    assert_eq!(on_disk.len(), 200);
    assert_eq!(on_disk[0], b'W');
    assert_eq!(&on_disk[1..104], &[b'x'; 103][..]);

    a.msync(oa, 0, 8192, libc::MS_SYNC).unwrap();
    let on_disk = durable(&s, &mut a, "/shm");
    assert_eq!(&on_disk[..4], b"Wxxx");
    assert_eq!(&on_disk[100..104], b"stor");
    assert_eq!(&on_disk[104..], &[0; 96][..]);

    drop((ma, mb, mc));
    a.unmap(oa).unwrap();
    b.unmap(ob).unwrap();
    b.unmap(oc).unwrap();
    assert_eq!(a.unmap(oa), Err(Errno::EINVAL), "no mapping left");
    s.stop();
}

#[test]
fn write_back_at_msync_at_the_last_unmap_and_when_a_client_goes() {
    let mut s = serve(64 << 20, |_| {});
    let (mut a, mut b) = (s.client(), s.client());
    let fa = a.open("/m", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fa, &[b'a'; 4096], 0), Ok(4096));
    let (obj, memfd) = a.map_shared(fa, 0, 4096, PROT_RW).unwrap();
    let m = Mapped::new(&memfd, 0, 4096, PROT_RW).unwrap();
    m.write(0, b"hello");
    assert_eq!(&durable(&s, &mut a, "/m")[..5], b"aaaaa");
    a.msync(obj, 0, 4096, libc::MS_ASYNC).unwrap();
    assert_eq!(&durable(&s, &mut a, "/m")[..5], b"hello");

    // Another client maps it too: a's unmap is not the last, so it
    // writes nothing back; b's is.
    let fb = b.open("/m", libc::O_RDWR, 0).unwrap();
    let (obj_b, memfd_b) = b.map_shared(fb, 0, 4096, PROT_RW).unwrap();
    assert_eq!(obj_b, obj);
    let mb = Mapped::new(&memfd_b, 0, 4096, PROT_RW).unwrap();
    m.write(100, b"world");
    drop(m);
    a.unmap(obj).unwrap();
    assert_eq!(&durable(&s, &mut a, "/m")[100..105], b"aaaaa");
    assert_eq!(mb.read(100, 5), b"world", "b's mapping lives on");
    // msync is for clients that map the object.
    assert_eq!(a.msync(obj, 0, 4096, 0), Err(Errno::EINVAL));
    drop(mb);
    b.unmap(obj).unwrap();
    assert_eq!(&durable(&s, &mut a, "/m")[100..105], b"world");
    assert_eq!(pread(&mut b, fb, 100, 5), b"world");

    // A client that goes without unmapping: its teardown writes back.
    let (obj, memfd) = b.map_shared(fb, 0, 4096, PROT_RW).unwrap();
    assert_ne!(obj, obj_b, "a new object once the last one went");
    let m = Mapped::new(&memfd, 0, 4096, PROT_RW).unwrap();
    m.write(200, b"bye");
    drop(b);
    s.wait_clients(1);
    assert_eq!(&durable(&s, &mut a, "/m")[200..203], b"bye");
    assert_eq!(m.read(200, 3), b"bye", "the memory is the client's own");

    // The server's shutdown writes back what is still mapped.
    let (_, memfd) = a.map_shared(fa, 0, 4096, PROT_RW).unwrap();
    let m2 = Mapped::new(&memfd, 0, 4096, PROT_RW).unwrap();
    m2.write(300, b"at shutdown");
    s.stop();
    assert_eq!(&read_image(&s.img, "/m")[300..311], b"at shutdown");
}

#[test]
fn an_unlinked_mapped_file_lives_until_its_last_mapping_goes() {
    let mut s = serve(64 << 20, |_| {});
    let mut a = s.client();
    let free = |a: &mut Client| {
        a.sync().unwrap();
        let st = a.statfs("/").unwrap();
        (st.ffree, st.bfree)
    };
    // The first file made takes an inode block for good: made and
    // removed once before counting.
    let fd = a.open("/warm", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fd, &[5; 8192], 0), Ok(8192));
    a.close(fd).unwrap();
    a.unlink("/warm").unwrap();
    let before = free(&mut a);
    let fd = a.open("/gone", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(fd, &[5; 8192], 0), Ok(8192));
    let (obj, memfd) = a.map_shared(fd, 0, 8192, PROT_RW).unwrap();
    a.close(fd).unwrap();
    a.unlink("/gone").unwrap();
    // The mapping holds the file, as a kernel mapping does.
    assert_ne!(free(&mut a), before);
    let m = Mapped::new(&memfd, 0, 8192, PROT_RW).unwrap();
    m.write(0, b"still here");
    a.msync(obj, 0, 8192, libc::MS_SYNC).unwrap();
    drop(m);
    a.unmap(obj).unwrap();
    // Its last mapping let it go: its inode and blocks are free again.
    assert_eq!(free(&mut a), before);
    s.stop();
}

#[test]
fn ms_sync_makes_a_mapping_durable() {
    let mut s = serve(64 << 20, |_| {});
    let mut a = s.client();
    // A file that is one hole: the write-back allocates its blocks, in
    // the running transaction until something commits it.
    let fd = a.open("/hole", RW, 0o644).unwrap();
    a.ftruncate(fd, 8192).unwrap();
    a.sync().unwrap();
    let (obj, memfd) = a.map_shared(fd, 0, 8192, PROT_RW).unwrap();
    let m = Mapped::new(&memfd, 0, 8192, PROT_RW).unwrap();
    m.write(4096, b"durable");
    a.msync(obj, 0, 8192, libc::MS_SYNC).unwrap();
    // A copy of the image as it is now, without a sync of the client's:
    // what a crash would leave.
    let copy = s.dir.path().join("crash");
    std::fs::copy(&s.img, &copy).unwrap();
    assert_eq!(&read_image(&copy, "/hole")[4096..4103], b"durable");
    drop(m);
    a.unmap(obj).unwrap();
    s.stop();
}

#[test]
fn mappings_are_refused_as_the_kernel_refuses_them() {
    let mut s = serve(64 << 20, |cfg| {
        cfg.limits.max_maps_per_client = 3;
        cfg.limits.max_mapped_bytes = 64 << 10;
    });
    let (mut a, mut b) = (s.client(), s.client());
    let rw = a.open("/f", RW, 0o644).unwrap();
    assert_eq!(a.pwrite(rw, &[1; 4096], 0), Ok(4096));
    let ro = a.open("/f", libc::O_RDONLY, 0).unwrap();
    let wo = a.open("/f", libc::O_WRONLY, 0).unwrap();
    let dir = a.open("/", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let eacces = Errno::EACCES;
    assert_eq!(a.map_shared(ro, 0, 4096, PROT_RW).unwrap_err(), eacces);
    assert_eq!(
        a.map_shared(wo, 0, 4096, libc::PROT_READ).unwrap_err(),
        eacces
    );
    assert_eq!(a.map_shared(wo, 0, 4096, PROT_RW).unwrap_err(), eacces);
    assert_eq!(
        a.map_shared(dir, 0, 4096, libc::PROT_READ).unwrap_err(),
        Errno::ENODEV
    );
    assert_eq!(a.map_shared(rw, 0, 0, PROT_RW).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        a.map_shared(rw, 1, 4096, PROT_RW).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        a.map_shared(rw, 0, 4096, 1 << 8).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        a.map_shared(77, 0, 4096, PROT_RW).unwrap_err(),
        Errno::EBADF
    );
    assert_eq!(
        a.map_shared(rw, 1 << 62, 1 << 62, PROT_RW).unwrap_err(),
        Errno::EOVERFLOW
    );
    // A read-only descriptor's mapping is read-only for good: the memfd
    // it gets is, so the kernel refuses a writable mapping of it.
    let (obj, memfd) = a.map_shared(ro, 0, 4096, libc::PROT_READ).unwrap();
    assert_eq!(
        rustix::fs::fcntl_getfl(&memfd).unwrap() & rustix::fs::OFlags::RWMODE,
        rustix::fs::OFlags::RDONLY
    );
    assert_eq!(
        Mapped::new(&memfd, 0, 4096, PROT_RW).err(),
        Some(Errno::EACCES)
    );
    let m = Mapped::new(&memfd, 0, 4096, libc::PROT_READ).unwrap();
    assert_eq!(m.read(0, 4), [1; 4]);
    // Nor can it resize or seal the memfd it was given.
    assert!(rustix::fs::ftruncate(&memfd, 0).is_err());
    // A writable descriptor's mapping can be made writable later
    // (mprotect), as the kernel allows.
    let (obj2, memfd2) = a.map_shared(rw, 0, 4096, libc::PROT_READ).unwrap();
    assert_eq!(obj2, obj);
    let w = Mapped::new(&memfd2, 0, 4096, PROT_RW).unwrap();
    w.write(0, b"ok");
    assert_eq!(m.read(0, 2), b"ok");
    // Nobody shrinks it under the others' mappings, nor seals it (a
    // seal against growth would stop the server's next mapping).
    assert!(rustix::fs::ftruncate(&memfd2, 0).is_err());
    assert_eq!(
        rustix::fs::fcntl_add_seals(&memfd2, rustix::fs::SealFlags::GROW),
        Err(rustix::io::Errno::PERM)
    );
    // Objects are the mapping clients' only.
    let fb = b.open("/f", libc::O_RDWR, 0).unwrap();
    assert_eq!(b.unmap(obj), Err(Errno::EINVAL));
    assert_eq!(b.msync(obj, 0, 4096, 0), Err(Errno::EINVAL));
    assert_eq!(a.msync(obj + 100, 0, 4096, 0), Err(Errno::EINVAL));
    // msync's own checks.
    let both = libc::MS_ASYNC | libc::MS_SYNC;
    assert_eq!(a.msync(obj, 0, 4096, both), Err(Errno::EINVAL));
    assert_eq!(a.msync(obj, 0, 4096, 1 << 10), Err(Errno::EINVAL));
    assert_eq!(a.msync(obj, 1, 4096, 0), Err(Errno::EINVAL));
    assert_eq!(a.msync(obj, 4096, u64::MAX, 0), Err(Errno::ENOMEM));
    // The caps: mappings per client, bytes in all.
    let (o3, _m3) = a.map_shared(rw, 0, 4096, PROT_RW).unwrap();
    assert_eq!(
        a.map_shared(rw, 0, 4096, PROT_RW).unwrap_err(),
        Errno::ENOMEM
    );
    assert_eq!(
        b.map_shared(fb, 0, 128 << 10, PROT_RW).unwrap_err(),
        Errno::ENOMEM
    );
    // The part already held costs nothing again.
    let (o4, _m4) = b.map_shared(fb, 0, 60 << 10, PROT_RW).unwrap();
    assert_eq!(
        b.map_shared(fb, 60 << 10, 8 << 10, PROT_RW).unwrap_err(),
        Errno::ENOMEM
    );
    for o in [obj, obj2, o3] {
        a.unmap(o).unwrap();
    }
    b.unmap(o4).unwrap();
    drop((m, w));
    s.stop();
}

/// `/f` created read-write through a raw client.
fn raw_open(raw: &mut Raw) -> i32 {
    let open = raw.path_req(
        ulfs_wire::Op::Openat,
        libc::AT_FDCWD,
        b"/f",
        open_flags(RW, 0o644),
    );
    raw.res(open).unwrap() as i32
}

#[test]
fn a_map_answer_without_its_memfd_is_an_error_not_a_hang() {
    // A raw client asks for a mapping and never reads its socket: the
    // server sends and answers; a later well-behaved client is not
    // affected, and the raw client's mappings go with it.
    let mut s = serve(64 << 20, |_| {});
    let mut raw = Raw::connect(&s.socket, 0, 0).unwrap();
    let fd = raw_open(&mut raw);
    let mut w = ulfs_wire::Req::new(ulfs_wire::Op::Pwrite);
    w.fd = fd;
    w.p1 = raw.put(0, &[3; 4096]);
    assert_eq!(raw.res(w), Ok(4096));
    let mut q = ulfs_wire::Req::new(ulfs_wire::Op::MapShared);
    q.fd = fd;
    q.a = [0, 4096, PROT_RW as u64, 0];
    let obj = raw.res(q).unwrap();
    // The memfd is there, queued before the answer.
    match ulfs_wire::control::try_recv(raw.sock.as_fd()) {
        Ok(ulfs_wire::Msg::Object { object, .. }) => assert_eq!(object, obj),
        m => panic!("{m:?}"),
    }
    // Nothing else is: a reader that expected one gets EAGAIN at once.
    assert_eq!(
        ulfs_wire::control::try_recv(raw.sock.as_fd()).unwrap_err(),
        Errno::EAGAIN
    );
    let _again = raw.res(q).unwrap();
    drop(raw);
    s.wait_clients(0);
    let mut c = s.client();
    let f = c.open("/f", libc::O_RDWR, 0).unwrap();
    let (obj2, _) = c.map_shared(f, 0, 4096, PROT_RW).unwrap();
    assert_ne!(obj2, obj, "the raw client's object went with it");
    c.unmap(obj2).unwrap();
    s.stop();
}

#[test]
fn lock_requests_on_the_wire() {
    let mut s = serve(64 << 20, |_| {});
    let mut raw = Raw::connect(&s.socket, 0, 0).unwrap();
    let fd = raw_open(&mut raw);
    let lock = |a: [u64; 4], p1: ulfs_wire::Span| {
        let mut q = ulfs_wire::Req::new(ulfs_wire::Op::Lock);
        q.fd = fd;
        q.a = a;
        q.p1 = p1;
        q
    };
    let w = libc::F_WRLCK as u64;
    let mut range = [0u8; 16];
    range[8..].copy_from_slice(&10i64.to_le_bytes());
    let good = raw.put(0, &range);
    let dl = raw.geo.data_len;
    // A range that is not 16 bytes, or not in the data area.
    assert_eq!(
        raw.res(lock([0, 0, w, 0], ulfs_wire::Span::new(0, 8))),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        raw.res(lock([0, 0, w, 0], ulfs_wire::Span::new(dl - 8, 16))),
        Err(Errno::EFAULT)
    );
    // An unknown class or command is EINVAL before the span is looked at.
    let far = ulfs_wire::Span::new(u32::MAX, 16);
    assert_eq!(raw.res(lock([7, 0, w, 0], far)), Err(Errno::EINVAL));
    assert_eq!(raw.res(lock([0, 9, w, 0], far)), Err(Errno::EINVAL));
    // A bad descriptor before anything.
    let mut q = lock([7, 9, 99, 99], far);
    q.fd = 1000;
    assert_eq!(raw.res(q), Err(Errno::EBADF));
    // A flock's span is ignored, whatever it is.
    assert_eq!(raw.res(lock([2, 0, w, 77], far)), Ok(0));
    assert_eq!(raw.res(lock([0, 0, w, 0], good)), Ok(0));
    // A GET's answer, as op.rs encodes it: the type in the low byte, the
    // pid above it, the holder's range in aux.
    let mut c = s.client();
    let f = c.open("/f", libc::O_RDWR, 0).unwrap();
    assert_eq!(
        c.lock(f, LockCmd::Set, &posix(R, SET, 100, 0)),
        Ok(LockAnswer::Granted)
    );
    let mut at = [0u8; 16];
    at[..8].copy_from_slice(&150i64.to_le_bytes());
    let p = raw.put(0, &at);
    let cqe = raw.call(lock([0, 1, w, 0], p));
    assert_eq!(cqe.res & 0xff, libc::F_RDLCK as i64);
    assert_eq!((cqe.res >> 8) as u32 as i32, me());
    assert_eq!(cqe.aux, [100, 0]);
    // A refused SET: -EAGAIN, the flag, the holder's range.
    let cqe = raw.call(lock([0, 0, w, 0], p));
    assert_eq!(cqe.result(), Err(Errno::EAGAIN));
    assert_eq!(cqe.flags, ulfs_wire::layout::CQE_WOULD_BLOCK);
    assert_eq!(cqe.aux, [100, 0]);
    // And the client meets the raw client's lock.
    assert_eq!(
        c.lock(f, LockCmd::Get, &posix(R, SET, 5, 1)),
        Ok(blocked(true, 0, 10, me()))
    );
    drop(raw);
    s.wait_clients(1);
    assert_eq!(
        c.lock(f, LockCmd::Get, &posix(R, SET, 5, 1)),
        Ok(LockAnswer::Free)
    );
    s.stop();
}

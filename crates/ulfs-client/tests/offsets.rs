//! Offsets a client keeps itself (ulfs-client offsets.rs, docs/SERVE.md
//! "Offsets") against the kernel's: seeded random calls on descriptors
//! (open with every access mode and O_APPEND, dup, dup2, close, read,
//! write, readv, writev, every lseek whence with offsets in and out of
//! range, pread, pwrite, F_SETFL turning O_APPEND on and off, ftruncate,
//! and PREPARE_FORK, which hands every kept offset back to the server)
//! made on a client and on the same files in a host directory, answer for
//! answer, and the files the same at the end. Then what only the server
//! can show: a lock relative to a kept offset, seen by another client, and
//! SEEK_END answered by the client while another changes the size.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use ulfs::Errno;
use ulfs_client::Client;
use ulfs_client::locks::{LockClass, LockCmd, LockRequest};
use ulfs_testkit::rng::Rng;

const SLOTS: usize = 6;
const FILES: [&str; 2] = ["a", "b"];

fn sys<T: PartialOrd + Default>(r: T) -> Result<T, Errno> {
    if r < T::default() {
        Err(Errno(
            std::io::Error::last_os_error().raw_os_error().unwrap(),
        ))
    } else {
        Ok(r)
    }
}

fn show<T: std::fmt::Debug>(r: Result<T, Errno>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("errno {}", e.0),
    }
}

#[derive(Debug, Clone)]
enum Call {
    Open(usize, usize, i32),
    Dup(usize, usize),
    Dup2(usize, usize),
    Close(usize),
    Read(usize, usize),
    Readv(usize, usize, usize),
    Write(usize, Vec<u8>),
    Writev(usize, Vec<u8>, Vec<u8>),
    Lseek(usize, i64, i32),
    Pread(usize, usize, u64),
    Pwrite(usize, Vec<u8>, u64),
    Append(usize, bool),
    Getfl(usize),
    Ftruncate(usize, u64),
    PrepareFork,
}

fn random_call(rng: &mut Rng, seq: usize) -> Call {
    let slot = |rng: &mut Rng| rng.below(SLOTS as u64) as usize;
    let bytes = |rng: &mut Rng| {
        let n = [1, 7, 100, 4096, 5000][rng.below(5) as usize];
        (0..n).map(|i| (seq + i) as u8).collect::<Vec<u8>>()
    };
    let offset = |rng: &mut Rng| -> i64 {
        match rng.below(6) {
            0 => -(rng.below(5000) as i64) - 1,
            1 => i64::MAX - rng.below(3) as i64,
            2 => i64::MIN,
            _ => rng.below(12_000) as i64,
        }
    };
    match rng.below(30) {
        0..=2 => {
            let flags = [
                libc::O_RDWR,
                libc::O_RDONLY,
                libc::O_WRONLY,
                libc::O_RDWR | libc::O_APPEND,
            ][rng.below(4) as usize];
            Call::Open(slot(rng), rng.below(FILES.len() as u64) as usize, flags)
        }
        3 => Call::Dup(slot(rng), slot(rng)),
        4 => Call::Dup2(slot(rng), slot(rng)),
        5 => Call::Close(slot(rng)),
        6..=9 => Call::Read(slot(rng), [0, 1, 10, 4096, 9000][rng.below(5) as usize]),
        10 => Call::Readv(slot(rng), rng.below(300) as usize, rng.below(300) as usize),
        11..=14 => Call::Write(slot(rng), bytes(rng)),
        15 => Call::Writev(slot(rng), bytes(rng), bytes(rng)),
        16..=20 => {
            let whence = [
                libc::SEEK_SET,
                libc::SEEK_CUR,
                libc::SEEK_END,
                libc::SEEK_DATA,
                libc::SEEK_HOLE,
                7,
            ][rng.below(6) as usize];
            let off = if whence == libc::SEEK_CUR && rng.below(2) == 0 {
                0
            } else {
                offset(rng)
            };
            Call::Lseek(slot(rng), off, whence)
        }
        21 => Call::Pread(slot(rng), 100, rng.below(12_000)),
        22 => Call::Pwrite(slot(rng), bytes(rng), rng.below(12_000)),
        23 | 24 => Call::Append(slot(rng), rng.below(2) == 0),
        25 => Call::Getfl(slot(rng)),
        26 => Call::Ftruncate(slot(rng), rng.below(12_000)),
        27 if rng.below(4) == 0 => Call::PrepareFork,
        _ => Call::Lseek(slot(rng), 0, libc::SEEK_CUR),
    }
}

/// A digest of bytes read: their length and a hash.
fn digest(b: &[u8]) -> (usize, u64) {
    let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    });
    (b.len(), h)
}

struct Host {
    dir: std::path::PathBuf,
    fds: [Option<i32>; SLOTS],
}

struct Served {
    c: Client,
    fds: [Option<i32>; SLOTS],
}

impl Host {
    fn call(&mut self, call: &Call) -> String {
        let fd = |s: usize| self.fds[s].unwrap_or(-1);
        // SAFETY: plain system calls on this side's own descriptors and
        // buffers that outlive them.
        unsafe {
            match call {
                Call::Open(s, f, flags) => {
                    if let Some(old) = self.fds[*s].take() {
                        libc::close(old);
                    }
                    let p = CString::new(self.dir.join(FILES[*f]).as_os_str().as_bytes()).unwrap();
                    let r = sys(libc::open(p.as_ptr(), *flags));
                    self.fds[*s] = r.ok();
                    show(r.map(drop))
                }
                Call::Dup(a, b) => {
                    let r = sys(libc::dup(fd(*a)));
                    if let Ok(new) = r
                        && let Some(old) = self.fds[*b].replace(new)
                    {
                        libc::close(old);
                    }
                    show(r.map(drop))
                }
                Call::Dup2(a, b) => match self.fds[*b] {
                    Some(dst) => show(sys(libc::dup2(fd(*a), dst)).map(drop)),
                    None => self.call(&Call::Dup(*a, *b)),
                },
                Call::Close(s) => show(sys(libc::close(self.fds[*s].take().unwrap_or(-1)))),
                Call::Read(s, n) => {
                    let mut b = vec![0u8; *n];
                    let r = sys(libc::read(fd(*s), b.as_mut_ptr().cast(), *n));
                    show(r.map(|n| digest(&b[..n as usize])))
                }
                Call::Readv(s, x, y) => {
                    let (mut b1, mut b2) = (vec![0u8; *x], vec![0u8; *y]);
                    let iov = [
                        libc::iovec {
                            iov_base: b1.as_mut_ptr().cast(),
                            iov_len: *x,
                        },
                        libc::iovec {
                            iov_base: b2.as_mut_ptr().cast(),
                            iov_len: *y,
                        },
                    ];
                    let r = sys(libc::readv(fd(*s), iov.as_ptr(), 2));
                    show(r.map(|n| {
                        let all = [b1, b2].concat();
                        digest(&all[..n as usize])
                    }))
                }
                Call::Write(s, d) => show(sys(libc::write(fd(*s), d.as_ptr().cast(), d.len()))),
                Call::Writev(s, d1, d2) => {
                    let iov = [
                        libc::iovec {
                            iov_base: d1.as_ptr() as *mut _,
                            iov_len: d1.len(),
                        },
                        libc::iovec {
                            iov_base: d2.as_ptr() as *mut _,
                            iov_len: d2.len(),
                        },
                    ];
                    show(sys(libc::writev(fd(*s), iov.as_ptr(), 2)))
                }
                Call::Lseek(s, off, whence) => show(sys(libc::lseek(fd(*s), *off, *whence))),
                Call::Pread(s, n, off) => {
                    let mut b = vec![0u8; *n];
                    let r = sys(libc::pread(fd(*s), b.as_mut_ptr().cast(), *n, *off as i64));
                    show(r.map(|n| digest(&b[..n as usize])))
                }
                Call::Pwrite(s, d, off) => show(sys(libc::pwrite(
                    fd(*s),
                    d.as_ptr().cast(),
                    d.len(),
                    *off as i64,
                ))),
                Call::Append(s, on) => {
                    let fl = libc::fcntl(fd(*s), libc::F_GETFL);
                    if fl < 0 {
                        return show(sys(fl));
                    }
                    let fl = if *on {
                        fl | libc::O_APPEND
                    } else {
                        fl & !libc::O_APPEND
                    };
                    show(sys(libc::fcntl(fd(*s), libc::F_SETFL, fl)))
                }
                Call::Getfl(s) => show(sys(libc::fcntl(fd(*s), libc::F_GETFL))),
                Call::Ftruncate(s, len) => show(sys(libc::ftruncate(fd(*s), *len as i64))),
                Call::PrepareFork => "token".into(),
            }
        }
    }
}

impl Served {
    fn call(&mut self, call: &Call) -> String {
        let fd = |s: usize| self.fds[s].unwrap_or(-1);
        let c = &mut self.c;
        match call {
            Call::Open(s, f, flags) => {
                if let Some(old) = self.fds[*s].take() {
                    c.close(old).unwrap();
                }
                let r = c.open(FILES[*f], *flags, 0);
                self.fds[*s] = r.ok();
                show(r.map(drop))
            }
            Call::Dup(a, b) => {
                let r = c.dup(fd(*a));
                if let Ok(new) = r
                    && let Some(old) = self.fds[*b].replace(new)
                {
                    c.close(old).unwrap();
                }
                show(r.map(drop))
            }
            Call::Dup2(a, b) => match self.fds[*b] {
                Some(dst) => show(c.dup2(fd(*a), dst).map(drop)),
                None => self.call(&Call::Dup(*a, *b)),
            },
            Call::Close(s) => show(c.close(self.fds[*s].take().unwrap_or(-1)).map(|()| 0)),
            Call::Read(s, n) => {
                let mut b = vec![0u8; *n];
                show(c.read(fd(*s), &mut b).map(|n| digest(&b[..n])))
            }
            Call::Readv(s, x, y) => {
                let (mut b1, mut b2) = (vec![0u8; *x], vec![0u8; *y]);
                let r = c.readv(
                    fd(*s),
                    &mut [
                        std::io::IoSliceMut::new(&mut b1),
                        std::io::IoSliceMut::new(&mut b2),
                    ],
                );
                show(r.map(|n| digest(&[b1, b2].concat()[..n])))
            }
            Call::Write(s, d) => show(c.write(fd(*s), d)),
            Call::Writev(s, d1, d2) => show(c.writev(
                fd(*s),
                &[std::io::IoSlice::new(d1), std::io::IoSlice::new(d2)],
            )),
            Call::Lseek(s, off, whence) => show(c.lseek(fd(*s), *off, *whence)),
            Call::Pread(s, n, off) => {
                let mut b = vec![0u8; *n];
                show(c.pread(fd(*s), &mut b, *off).map(|n| digest(&b[..n])))
            }
            Call::Pwrite(s, d, off) => show(c.pwrite(fd(*s), d, *off)),
            Call::Append(s, on) => {
                let r = c.fcntl_getfl(fd(*s)).and_then(|fl| {
                    let fl = if *on {
                        fl | libc::O_APPEND
                    } else {
                        fl & !libc::O_APPEND
                    };
                    c.fcntl_setfl(fd(*s), fl)
                });
                show(r.map(|()| 0))
            }
            Call::Getfl(s) => show(c.fcntl_getfl(fd(*s))),
            Call::Ftruncate(s, len) => show(c.ftruncate(fd(*s), *len).map(|()| 0)),
            Call::PrepareFork => {
                c.prepare_spawn().unwrap();
                "token".into()
            }
        }
    }
}

#[test]
fn kept_offsets_answer_as_the_kernels_do() {
    let mut served = common::serve();
    // tmpfs: its largest offset is the engine's (i64::MAX; ext4 stops lower).
    let host_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    for seed in 1..=6u64 {
        let mut rng = Rng::new(seed);
        let dir = host_dir.path().join(seed.to_string());
        std::fs::create_dir(&dir).unwrap();
        let mut c = served.client();
        let root = format!("/{seed}");
        c.mkdir(&root, 0o755).unwrap();
        c.chdir(&root).unwrap();
        for f in FILES {
            std::fs::write(dir.join(f), b"").unwrap();
            let fd = c.open(f, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
            c.close(fd).unwrap();
        }
        let mut host = Host {
            dir: dir.clone(),
            fds: [None; SLOTS],
        };
        let mut ours = Served {
            c,
            fds: [None; SLOTS],
        };
        for seq in 0..1500 {
            let call = random_call(&mut rng, seq);
            let (want, got) = (host.call(&call), ours.call(&call));
            assert_eq!(got, want, "seed {seed}, call {seq}: {call:?}");
        }
        for f in FILES {
            let want = std::fs::read(dir.join(f)).unwrap();
            let fd = ours.c.open(f, libc::O_RDONLY, 0).unwrap();
            let mut got = vec![0u8; want.len() + 1];
            let n = ours.c.pread(fd, &mut got, 0).unwrap();
            assert_eq!(digest(&got[..n]), digest(&want), "seed {seed}, file {f}");
        }
    }
    served.stop();
}

#[test]
fn a_lock_relative_to_a_kept_offset_lands_where_it_says() {
    let mut served = common::serve();
    let mut a = served.client();
    let mut b = served.client();
    let fd = a.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    a.write(fd, &[7u8; 300]).unwrap();
    assert_eq!(a.lseek(fd, 100, libc::SEEK_SET).unwrap(), 100);
    let lock = |whence, start| LockRequest {
        class: LockClass::Posix,
        kind: libc::F_WRLCK,
        whence,
        start,
        len: 10,
    };
    a.lock(fd, LockCmd::Set, &lock(libc::SEEK_CUR, 5)).unwrap();
    let fb = b.open("/f", libc::O_RDWR, 0).unwrap();
    let whole = LockRequest {
        len: 0,
        ..lock(libc::SEEK_SET, 0)
    };
    let seen = b.lock(fb, LockCmd::Get, &whole);
    let holder = format!("{seen:?}");
    assert!(holder.contains("start: 105"), "{holder}");
    served.stop();
}

/// SEEK_END on a kept offset is answered from the kept fstat answer while
/// the file is unchanged: each answer must still be the size of the
/// moment, whoever changed the file (another client appending or
/// truncating, this client writing).
#[test]
fn seek_end_of_a_kept_offset_follows_every_change_of_size() {
    let mut served = common::serve();
    let mut a = served.client();
    let mut b = served.client();
    let fd = a.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let fb = b.open("/f", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    let mut rng = Rng::new(7);
    let mut size = 0u64;
    for i in 0..400 {
        match rng.below(6) {
            0 => {
                let n = 1 + rng.below(5000) as usize;
                b.write(fb, &vec![1u8; n]).unwrap();
                size += n as u64;
            }
            1 => {
                size = rng.below(size + 1);
                b.ftruncate(fb, size).unwrap();
            }
            2 => {
                let at = a.lseek(fd, 0, libc::SEEK_END).unwrap();
                let n = 1 + rng.below(300) as usize;
                a.write(fd, &vec![2u8; n]).unwrap();
                size = at + n as u64;
            }
            _ => {}
        }
        let back = rng.below(size + 1) as i64;
        assert_eq!(
            a.lseek(fd, -back, libc::SEEK_END),
            Ok(size - back as u64),
            "call {i}"
        );
        assert_eq!(
            a.lseek(fd, 0, libc::SEEK_CUR),
            Ok(size - back as u64),
            "call {i}"
        );
        assert_eq!(a.fstat(fd).unwrap().size, size, "call {i}");
        assert_eq!(
            a.lseek(fd, -(size as i64) - 1, libc::SEEK_END),
            Err(Errno::EINVAL),
            "call {i}"
        );
        assert_eq!(
            a.lseek(fd, i64::MAX, libc::SEEK_END).is_ok(),
            size == 0,
            "call {i}"
        );
    }
    // And unchanged, no SEEK_END is a request: the answers above came
    // from the client whenever they could.
    let before = a.channel().stats().requests;
    for back in 0..100 {
        let back = back.min(size as i64);
        assert_eq!(a.lseek(fd, -back, libc::SEEK_END), Ok(size - back as u64));
    }
    assert_eq!(a.channel().stats().requests, before);
    served.stop();
}

/// After PREPARE_EXEC no offset is kept: a descriptor opened (by another
/// thread) before the exec reaches the new program at the offset its
/// reads left, not at the server's stale 0.
#[test]
fn descriptors_opened_after_an_exec_was_prepared_keep_their_offset_in_the_server() {
    let mut served = common::serve();
    let mut c = served.client();
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.write(fd, b"0123456789abcdef").unwrap();
    c.close(fd).unwrap();
    let token = c.prepare_exec().unwrap();
    let fd = c.open("/f", libc::O_RDONLY, 0).unwrap();
    let mut b = [0u8; 10];
    assert_eq!(c.read(fd, &mut b).unwrap(), 10);
    // The exec: this connection ends, the same process adopts.
    drop(c);
    let mut c =
        ulfs_client::Client::adopt(&served.socket, &token, ulfs_wire::AdoptKind::Exec).unwrap();
    assert_eq!(c.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 10);
    assert_eq!(c.read(fd, &mut b[..3]).unwrap(), 3);
    assert_eq!(&b[..3], b"abc");
    served.stop();
}

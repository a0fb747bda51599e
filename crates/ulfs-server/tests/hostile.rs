//! A hostile client's view of `ulfs serve` (docs/SERVE.md, "When things
//! go wrong"): malformed and oversized requests get errors, a client that
//! breaks its ring is cut off, one that never takes its answers stalls only
//! itself, idle and surplus connections tie up nothing, a flooder does not
//! starve the others, the limits hold, a full image is ENOSPC, and a server
//! stopped with requests in flight leaves a clean image and clients that
//! get ENOTCONN. Every test ends with the image fsck-clean.

mod common;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use ulfs::Errno;
use ulfs_wire::layout::*;
use ulfs_wire::{Op, Req, Span, control};

const EFAULT: Errno = Errno::EFAULT;

fn req(op: Op, fd: i32, a: [u64; 4]) -> Req {
    let mut r = Req::new(op);
    r.fd = fd;
    r.a = a;
    r
}

/// Checks a client is served and the volume still takes changes (a caught
/// panic would have made it read-only for good).
fn assert_volume_healthy(s: &Served) {
    let socket = s.socket.clone();
    within(10, "a well-behaved client", move || {
        let mut c = ulfs_client::Client::connect(&socket).unwrap();
        c.nop().unwrap();
        let fd = c
            .open(
                "/healthy",
                libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC,
                0o644,
            )
            .unwrap();
        assert_eq!(c.write(fd, b"still writable").unwrap(), 14);
        let mut b = [0u8; 32];
        assert_eq!(c.pread(fd, &mut b, 0).unwrap(), 14);
        c.close(fd).unwrap();
        c.unlink("/healthy").unwrap();
    });
}

#[test]
fn malformed_requests_get_errors_and_change_nothing() {
    let mut s = serve(64 << 20, |_| {});
    let mut r = Raw::connect(&s.socket, 8, 16 << 10).unwrap();
    let dl = r.geo.data_len;
    assert_eq!(dl, 16 << 10);
    let p = r.path_req(
        Op::Openat,
        libc::AT_FDCWD,
        b"/f",
        open_flags(libc::O_CREAT | libc::O_RDWR, 0o644),
    );
    let fd = r.res(p).unwrap() as i32;
    let mut w = req(Op::Write, fd, [0; 4]);
    w.p1 = r.put(0, b"0123456789");
    assert_eq!(r.res(w), Ok(10));
    assert_eq!(r.res(req(Op::Lseek, fd, [0, 0, 0, 0])), Ok(0));
    let d = r.path_req(
        Op::Openat,
        libc::AT_FDCWD,
        b"/",
        open_flags(libc::O_RDONLY | libc::O_DIRECTORY, 0),
    );
    let dfd = r.res(d).unwrap() as i32;

    // Unknown codes, whatever the other fields say; the tag comes back.
    for op in [11u16, 43, 55, 97, 200, 0x7fff, 0xffff] {
        let mut q = Req::new(Op::Nop);
        q.op = op;
        q.fd = -77;
        q.a = [u64::MAX; 4];
        q.p1 = Span::new(u32::MAX, u32::MAX);
        let c = r.call(q);
        assert_eq!(c.result(), Err(Errno::ENOSYS), "op {op}");
    }

    // Spans outside the data area: EFAULT, and the call has no effect (a
    // read does not move the offset, a write does not grow the file).
    let bad_spans = [
        Span::new(dl, 1),
        Span::new(dl - 1, 2),
        Span::new(0, dl + 1),
        Span::new(u32::MAX, 1),
        Span::new(1, u32::MAX),
        Span::new(u32::MAX, u32::MAX),
    ];
    for sp in bad_spans {
        for op in [Op::Read, Op::Pread, Op::Write, Op::Pwrite] {
            let mut q = req(op, fd, [0; 4]);
            q.p1 = sp;
            assert_eq!(r.res(q), Err(EFAULT), "{op:?} {sp:?}");
        }
        // (Too small for one record is EINVAL, as Linux says first.)
        let mut q = req(Op::Getdents64, dfd, [0; 4]);
        q.p1 = sp;
        let e = r.res(q).unwrap_err();
        assert!(
            e == EFAULT || (e == Errno::EINVAL && sp.len < 24),
            "getdents64 {sp:?}: {e}"
        );
        for op in [Op::Openat, Op::Mkdirat, Op::Unlinkat, Op::Chdir, Op::Statfs] {
            let mut q = req(op, libc::AT_FDCWD, [0; 4]);
            q.p1 = sp;
            assert_eq!(r.res(q), Err(EFAULT), "{op:?} {sp:?}");
        }
        let mut q = req(Op::Fstat, fd, [0; 4]);
        q.p2 = sp;
        assert_eq!(r.res(q), Err(EFAULT), "fstat {sp:?}");
        let mut q = req(Op::Getcwd, -1, [0; 4]);
        q.p2 = sp;
        assert_eq!(r.res(q), Err(EFAULT), "getcwd {sp:?}");
    }
    assert_eq!(
        r.res(req(Op::Lseek, fd, [0, libc::SEEK_CUR as u64, 0, 0])),
        Ok(0),
        "an EFAULT read must not move the offset"
    );
    // The directory's position did not move either: a full listing still
    // starts with the first entry.
    let mut q = req(Op::Getdents64, dfd, [0; 4]);
    q.p1 = Span::new(0, 4096);
    let n = r.res(q).unwrap() as usize;
    assert!(
        ulfs::parse_dirents(&r.data(Span::new(0, n as u32)))
            .iter()
            .any(|d| d.name == b"f")
    );
    let mut st = req(Op::Fstat, fd, [0; 4]);
    st.p2 = Span::new(0, 128);
    r.res(st).unwrap();
    let size = ulfs_wire::WireStat::from_bytes(&r.data(Span::new(0, 128)))
        .unwrap()
        .stat()
        .size;
    assert_eq!(size, 10);
    // An output span too small for its record.
    let mut q = req(Op::Fstat, fd, [0; 4]);
    q.p2 = Span::new(0, 127);
    assert_eq!(r.res(q), Err(EFAULT));

    // Descriptors that are not open, negative, huge.
    for bad in [-1, -100, i32::MIN, i32::MAX, 1 << 20, 65_535, fd + 1000] {
        for op in [
            Op::Close,
            Op::Read,
            Op::Fstat,
            Op::Dup,
            Op::Fsync,
            Op::Fchdir,
            Op::FcntlGetfl,
            Op::FileDescription,
        ] {
            let mut q = req(op, bad, [0; 4]);
            q.p1 = Span::new(0, 16);
            q.p2 = Span::new(0, 128);
            assert_eq!(r.res(q), Err(Errno::EBADF), "{op:?} fd {bad}");
        }
    }

    // Huge and negative numbers where the engine expects sane ones.
    let checks: Vec<(Req, Errno)> = vec![
        (
            req(Op::Lseek, fd, [i64::MIN as u64, 0, 0, 0]),
            Errno::EINVAL,
        ),
        (req(Op::Lseek, fd, [0, 99, 0, 0]), Errno::EINVAL),
        (req(Op::Lseek, fd, [u64::MAX, 0, 0, 0]), Errno::EINVAL),
        (req(Op::Dupfd, fd, [u64::MAX, 0, 0, 0]), Errno::EINVAL),
        (req(Op::Dupfd, fd, [1 << 31, 0, 0, 0]), Errno::EINVAL),
        (req(Op::Dupfd, fd, [70_000, 0, 0, 0]), Errno::EINVAL),
        (req(Op::SetMaxFds, -1, [u64::MAX, 0, 0, 0]), Errno::EPERM),
        (req(Op::SetMaxFds, -1, [65_537, 0, 0, 0]), Errno::EPERM),
        (req(Op::Fallocate, fd, [0, 0, 0, 0]), Errno::EINVAL),
        (req(Op::Lock, fd, [u64::MAX; 4]), Errno::EINVAL),
        (req(Op::MapShared, fd, [u64::MAX; 4]), Errno::EINVAL),
        (req(Op::Msync, -1, [u64::MAX; 4]), Errno::EINVAL),
        (req(Op::Unmap, -1, [u64::MAX; 4]), Errno::EINVAL),
    ];
    for (q, want) in checks {
        assert_eq!(r.res(q), Err(want), "{q:?}");
    }
    let mut q = req(Op::Dup2, fd, [0; 4]);
    q.fd2 = -1;
    assert_eq!(r.res(q), Err(Errno::EBADF));
    q.fd2 = i32::MAX;
    assert_eq!(r.res(q), Err(Errno::EBADF));
    // Numbers the engine must refuse without overflowing (any error but
    // EIO, which would mean a caught panic).
    let odd: Vec<Req> = vec![
        req(Op::Pwrite, fd, [u64::MAX, 0, 0, 0]),
        req(Op::Pwrite, fd, [i64::MAX as u64, 0, 0, 0]),
        req(Op::Pread, fd, [u64::MAX, 0, 0, 0]),
        req(Op::Ftruncate, fd, [i64::MAX as u64, 0, 0, 0]),
        req(Op::Ftruncate, fd, [u64::MAX, 0, 0, 0]),
        req(Op::Fallocate, fd, [0, u64::MAX - 1, 10, 0]),
        req(Op::Fallocate, fd, [u64::MAX, 0, 1, 0]),
        req(Op::Fallocate, fd, [0, i64::MAX as u64, i64::MAX as u64, 0]),
        req(Op::Fallocate, fd, [0x3, u64::MAX, u64::MAX, 0]),
        req(Op::FcntlSetfl, fd, [u64::MAX, 0, 0, 0]),
        req(Op::Fchmod, fd, [u64::MAX, 0, 0, 0]),
        req(Op::Fchown, fd, [u64::MAX, u64::MAX, 0, 0]),
        req(Op::Umask, -1, [u64::MAX, 0, 0, 0]),
    ];
    for mut q in odd {
        q.p1 = Span::new(0, 1);
        match r.res(q) {
            Ok(_) => {}
            Err(e) => assert_ne!(e, Errno::EIO, "{q:?}"),
        }
    }
    let mut q = req(Op::Lseek, fd, [i64::MAX as u64, 0, 0, 0]);
    let _ = r.res(q);
    q.a = [i64::MAX as u64, libc::SEEK_CUR as u64, 0, 0];
    assert!(r.res(q).is_err(), "lseek past i64::MAX");
    assert!(r.res(req(Op::Umask, -1, [0o022, 0, 0, 0])).is_ok());

    // Times that are not times.
    let mut q = req(Op::Futimens, fd, [0; 4]);
    q.p2 = r.put(0, &[0u8; 31]);
    assert_eq!(r.res(q), Err(Errno::EINVAL));
    let mut t = [0u8; 32];
    t[8..16].copy_from_slice(&2_000_000_000i64.to_le_bytes());
    q.p2 = r.put(0, &t);
    assert_eq!(r.res(q), Err(Errno::EINVAL));
    q.p2 = Span::new(dl - 16, 32);
    assert_eq!(r.res(q), Err(EFAULT));

    // Flags nobody defined.
    let mut q = r.path_req(Op::Unlinkat, libc::AT_FDCWD, b"/f", [u64::MAX, 0, 0, 0]);
    assert_eq!(r.res(q), Err(Errno::EINVAL));
    q = r.path_req(Op::Renameat2, libc::AT_FDCWD, b"/f", [u64::MAX, 0, 0, 0]);
    q.fd2 = libc::AT_FDCWD;
    q.p2 = r.put(4096, b"/g");
    assert_eq!(r.res(q), Err(Errno::EINVAL));
    q = r.path_req(Op::Fstatat, libc::AT_FDCWD, b"/f", [u64::MAX, 0, 0, 0]);
    q.p2 = Span::new(8192, 128);
    assert_eq!(r.res(q), Err(Errno::EINVAL));

    // Nothing of that hurt the file, the client or the volume.
    let mut pr = req(Op::Pread, fd, [0; 4]);
    pr.p1 = Span::new(100, 64);
    assert_eq!(r.res(pr), Ok(10));
    assert_eq!(r.data(Span::new(100, 10)), b"0123456789");
    assert_eq!(r.res(Req::new(Op::Nop)), Ok(0));
    assert!(!r.gone());
    assert_volume_healthy(&s);
    drop(r);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn paths_at_the_limits_and_symlink_loops() {
    let mut s = serve(64 << 20, |_| {});
    let mut r = Raw::connect(&s.socket, 8, 16 << 10).unwrap();
    // 4095 bytes is the longest path (PATH_MAX counts the NUL): it is
    // walked (here it names nothing); 4096 is ENAMETOOLONG.
    let mut long = Vec::new();
    while long.len() < 4095 {
        long.extend_from_slice(b"/abcdefg");
    }
    long.truncate(4095);
    let q = r.path_req(Op::Openat, libc::AT_FDCWD, &long, open_flags(0, 0));
    assert_eq!(r.res(q), Err(Errno::ENOENT));
    long.push(b'x');
    let q = r.path_req(Op::Openat, libc::AT_FDCWD, &long, open_flags(0, 0));
    assert_eq!(r.res(q), Err(Errno::ENAMETOOLONG));
    let mut q = r.path_req(Op::Openat, libc::AT_FDCWD, b"", open_flags(0, 0));
    q.p1 = Span::new(0, 1 << 20);
    assert_eq!(r.res(q), Err(EFAULT), "a path longer than the data area");
    // A name of 256 bytes, a NUL inside a path.
    let q = r.path_req(Op::Mkdirat, libc::AT_FDCWD, &[b'n'; 256], [0o755, 0, 0, 0]);
    assert_eq!(r.res(q), Err(Errno::ENAMETOOLONG));
    let q = r.path_req(Op::Mkdirat, libc::AT_FDCWD, b"/a\0b", [0o755, 0, 0, 0]);
    assert_eq!(r.res(q), Err(Errno::EINVAL));
    let q = r.path_req(Op::Chdir, -1, b"", [0; 4]);
    assert_eq!(r.res(q), Err(Errno::ENOENT));

    // Deep directories: a cwd whose name is longer than the answer span.
    let name = [b'd'; 255];
    for _ in 0..20 {
        let q = r.path_req(Op::Mkdirat, libc::AT_FDCWD, &name, [0o755, 0, 0, 0]);
        r.res(q).unwrap();
        let q = r.path_req(Op::Chdir, -1, &name, [0; 4]);
        r.res(q).unwrap();
    }
    let mut q = req(Op::Getcwd, -1, [0; 4]);
    q.p2 = Span::new(0, 100);
    let c = r.call(q);
    assert_eq!(c.result(), Ok(100));
    assert_eq!(c.flags & CQE_TRUNCATED, CQE_TRUNCATED);
    assert_eq!(c.aux[0], 20 * 256);
    let q = r.path_req(Op::Chdir, -1, b"/", [0; 4]);
    r.res(q).unwrap();

    // Symlink loops and chains.
    let mut q = r.path_req(Op::Symlinkat, libc::AT_FDCWD, b"/l2", [0; 4]);
    q.p2 = r.put(4096, b"/l1");
    r.res(q).unwrap();
    let mut q = r.path_req(Op::Symlinkat, libc::AT_FDCWD, b"/l1", [0; 4]);
    q.p2 = r.put(4096, b"/l2");
    r.res(q).unwrap();
    let mut q = r.path_req(Op::Symlinkat, libc::AT_FDCWD, b"/self/x", [0; 4]);
    q.p2 = r.put(4096, b"/self");
    r.res(q).unwrap();
    for p in [&b"/l1"[..], b"/l2/x", b"/self", b"/self/x/y"] {
        let q = r.path_req(Op::Openat, libc::AT_FDCWD, p, open_flags(0, 0));
        assert_eq!(
            r.res(q),
            Err(Errno::ELOOP),
            "{}",
            String::from_utf8_lossy(p)
        );
        let mut q = r.path_req(Op::Fstatat, libc::AT_FDCWD, p, [0; 4]);
        q.p2 = Span::new(8192, 128);
        assert_eq!(r.res(q), Err(Errno::ELOOP));
    }
    // A long target (4095 bytes) is stored and read back cut to the span.
    let target = vec![b't'; 4095];
    let mut q = r.path_req(Op::Symlinkat, libc::AT_FDCWD, &target, [0; 4]);
    q.p2 = r.put(4096, b"/long");
    r.res(q).unwrap();
    let mut q = r.path_req(Op::Readlinkat, libc::AT_FDCWD, b"/long", [0; 4]);
    q.p2 = Span::new(8192, 4096);
    assert_eq!(r.res(q), Ok(4095));
    q.p2 = Span::new(8192, 10);
    let c = r.call(q);
    assert_eq!((c.res, c.flags, c.aux[0]), (10, CQE_TRUNCATED, 4095));
    for l in [&b"/l1"[..], b"/l2", b"/self", b"/long"] {
        let q = r.path_req(Op::Unlinkat, libc::AT_FDCWD, l, [0; 4]);
        r.res(q).unwrap();
    }
    assert_volume_healthy(&s);
    drop(r);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn a_client_that_breaks_its_ring_is_cut_off_alone() {
    let mut s = serve(64 << 20, |c| c.workers = 1);
    let mut good = s.client();
    good.nop().unwrap();
    let entries = 8;
    type Attack<'a> = Box<dyn Fn(&mut Raw) + 'a>;
    let attacks: Vec<Attack> = vec![
        // sq_tail jumps past the ring.
        Box::new(move |r: &mut Raw| r.set(OFF_SQ_TAIL, r.tail + entries + 1)),
        // sq_tail "wraps" below zero.
        Box::new(|r: &mut Raw| r.set(OFF_SQ_TAIL, u32::MAX)),
        Box::new(|r: &mut Raw| r.set(OFF_SQ_TAIL, 1 << 31)),
        // sq_tail moves backwards after some requests.
        Box::new(|r: &mut Raw| {
            for _ in 0..5 {
                r.call(Req::new(Op::Nop));
            }
            r.set(OFF_SQ_TAIL, r.tail.wrapping_sub(2));
        }),
    ];
    for (i, attack) in attacks.iter().enumerate() {
        let mut r = Raw::connect(&s.socket, entries, 4096).unwrap();
        s.wait_clients(2);
        attack(&mut r);
        r.kick();
        assert!(r.wait_gone(10), "attack {i}: the channel is not GONE");
        assert!(r.hung_up(10), "attack {i}: the socket was not closed");
        s.wait_clients(1);
        // Nothing more is answered on it.
        let before = r.get(OFF_CQ_TAIL);
        r.set(OFF_SQ_TAIL, before);
        r.kick();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.get(OFF_CQ_TAIL), before);
        good.nop().unwrap();
    }

    // Garbage in every header field the server does not own: it keeps
    // its own copies and goes on.
    let mut r = Raw::connect(&s.socket, entries, 4096).unwrap();
    r.poke(0, &[0xa5; 64]);
    r.set(OFF_SQ_HEAD, 12345);
    r.set(OFF_CQ_TAIL, 0);
    r.set(OFF_SERVER_STATE, STATE_GONE);
    r.set(OFF_CLIENT_WAITING, 1);
    r.set(OFF_SERVER_IDLE, 0xdead);
    r.set(OFF_LOCK_SEQ, u32::MAX);
    let tag = r.submit(Req::new(Op::Nop));
    // Our CQ tail was overwritten; the server's own goes on from 0.
    let until = Instant::now() + Duration::from_secs(10);
    while r.get(OFF_CQ_TAIL) == 0 {
        assert!(Instant::now() < until, "no answer after header garbage");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.cqe_at(0).tag, tag);
    assert_eq!(r.cqe_at(0).result(), Ok(0));
    drop(r);
    s.wait_clients(1);
    drop(good);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn a_client_that_never_takes_its_answers_stalls_only_itself() {
    let mut s = serve(64 << 20, |c| c.workers = 1);
    let mut good = s.client();
    let entries = 8u32;
    let mut r = Raw::connect(&s.socket, entries, 4096).unwrap();
    assert_eq!(r.geo.cq_entries, 64, "the CQ is at least the default");
    let cq = r.geo.cq_entries;
    // Fill the whole CQ without taking anything, entries at a time.
    let mut published = 0u32;
    while published < cq {
        for _ in 0..entries {
            let mut q = Req::new(Op::Nop);
            q.tag = published;
            r.put_req(published, &q);
            published += 1;
        }
        r.set(OFF_SQ_TAIL, published);
        r.kick();
        let until = Instant::now() + Duration::from_secs(10);
        while r.get(OFF_SQ_HEAD) != published {
            assert!(Instant::now() < until, "requests not taken");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // One more ring's worth: the CQ is full, nothing is taken, nobody
    // else notices.
    for _ in 0..entries {
        let mut q = Req::new(Op::Nop);
        q.tag = published;
        r.put_req(published, &q);
        published += 1;
    }
    r.set(OFF_SQ_TAIL, published);
    r.kick();
    for _ in 0..50 {
        good.nop().unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.get(OFF_CQ_TAIL), cq, "answers with no room in the CQ");
    assert!(!r.gone());

    // cq_head moved backwards, or past cq_tail: still full, still alone.
    for bogus in [u32::MAX - 1000, cq + 5, cq.wrapping_add(1 << 31)] {
        r.set(OFF_CQ_HEAD, bogus);
        r.kick();
        good.nop().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.get(OFF_CQ_TAIL), cq, "cq_head {bogus}");
        assert!(!r.gone());
    }
    // Taking the answers (and kicking) lets the rest through, in order.
    for i in 0..cq {
        assert_eq!(r.cqe_at(i).tag, i);
    }
    r.set(OFF_CQ_HEAD, cq);
    r.kick();
    let until = Instant::now() + Duration::from_secs(10);
    while r.get(OFF_CQ_TAIL) != published {
        assert!(Instant::now() < until, "the stalled requests never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in cq..published {
        assert_eq!(r.cqe_at(i).tag, i);
        assert_eq!(r.cqe_at(i).result(), Ok(0));
    }
    drop(r);
    drop(good);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn silent_and_garbled_connections_tie_up_no_worker() {
    let mut s = serve(64 << 20, |c| {
        c.workers = 1;
        // The silent ones are counted below: not closed meanwhile.
        c.limits.hello_timeout = Duration::from_secs(600);
    });
    // Connections that never say HELLO.
    let silent: Vec<_> = (0..200)
        .map(|_| control::connect(&s.socket).unwrap())
        .collect();
    // Garbage instead of a HELLO, a HELLO with fds attached, two HELLOs.
    let garbage = control::connect(&s.socket).unwrap();
    control::send_raw(garbage.as_fd(), &[0xffu8; 100], &[]).unwrap();
    let with_fds = control::connect(&s.socket).unwrap();
    let e = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    control::send_raw(
        with_fds.as_fd(),
        &control::encode_hello(0, 0),
        &[e.as_fd(), e.as_fd()],
    )
    .unwrap();
    let twice = control::connect(&s.socket).unwrap();
    control::hello(twice.as_fd(), 0, 0).unwrap();
    control::send_hello(twice.as_fd(), 0, 0).unwrap();
    // A HELLO, then gone before reading the WELCOME.
    for _ in 0..20 {
        let c = control::connect(&s.socket).unwrap();
        control::send_hello(c.as_fd(), 0, 0).unwrap();
        drop(c);
    }
    // Greedy wishes are clamped.
    let greedy = Raw::connect(&s.socket, u32::MAX, u32::MAX).unwrap();
    assert_eq!(greedy.geo.sq_entries, MAX_SQ_ENTRIES);
    assert_eq!(greedy.geo.data_len, MAX_DATA_LEN);
    // The one worker still serves a real client at once.
    let socket = s.socket.clone();
    within(10, "a client beside 200 silent ones", move || {
        let mut c = ulfs_client::Client::connect(&socket).unwrap();
        for _ in 0..100 {
            c.nop().unwrap();
        }
    });
    // The garbled ones were let go; the silent ones wait, holding no
    // channel.
    let waited = Instant::now() + Duration::from_secs(10);
    while s.clients() != 201 {
        assert!(
            Instant::now() < waited,
            "{} clients, expected the 200 silent ones and the greedy one",
            s.clients()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(silent);
    drop(greedy);
    drop((garbage, with_fds, twice));
    s.wait_clients(0);
    s.stop();
}

#[test]
fn a_connection_that_never_says_hello_is_closed_and_frees_its_slot() {
    let mut s = serve(64 << 20, |c| {
        c.limits.max_clients = 3;
        c.limits.hello_timeout = Duration::from_millis(200);
    });
    let silent: Vec<_> = (0..3)
        .map(|_| control::connect(&s.socket).unwrap())
        .collect();
    s.wait_clients(3);
    // Their slots come back once the timeout has passed...
    s.wait_clients(0);
    // ...each told why before its end.
    for sock in &silent {
        match control::recv(sock.as_fd()) {
            Ok(ulfs_wire::Msg::Refused(r)) => assert_eq!(r.errno, Errno(libc::ETIMEDOUT)),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // A real client is served (it says HELLO at once).
    let mut c = s.client();
    c.nop().unwrap();
    drop(c);
    s.stop();
}

#[test]
fn thousands_of_connections_beyond_max_clients_are_refused() {
    let mut s = serve(64 << 20, |c| {
        c.limits.max_clients = 1000;
    });
    let mut held = Vec::new();
    for _ in 0..1000 {
        held.push(control::connect(&s.socket).unwrap());
    }
    s.wait_clients(1000);
    // Every connection beyond the limit is refused with EAGAIN, promptly
    // and whatever the client does first.
    for i in 0..200 {
        let c = control::connect(&s.socket).unwrap();
        let r = within(10, "a refusal", move || control::recv(c.as_fd()));
        match r {
            Ok(control::Msg::Refused(r)) => assert_eq!(r.errno, Errno::EAGAIN),
            other => panic!("connection {i}: expected REFUSED, got {other:?}"),
        }
    }
    assert_eq!(s.clients(), 1000);
    // Once some go, others come in.
    held.truncate(990);
    s.wait_clients(990);
    let mut c = s.client();
    c.nop().unwrap();
    drop(c);
    drop(held);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn max_fds_holds_per_client() {
    let mut s = serve(64 << 20, |c| c.limits.max_fds = 100);
    let mut c = s.client();
    let mut fds = Vec::new();
    let first = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fds.push(first);
    loop {
        match c.dup(first) {
            Ok(fd) => fds.push(fd),
            Err(e) => {
                assert_eq!(e, Errno::EMFILE);
                break;
            }
        }
    }
    assert_eq!(fds.len(), 100);
    assert_eq!(c.open("/f", libc::O_RDONLY, 0), Err(Errno::EMFILE));
    assert_eq!(c.dup2(first, 100), Err(Errno::EBADF));
    assert_eq!(c.dupfd(first, 100), Err(Errno::EINVAL));
    assert_eq!(c.set_max_fds(101), Err(Errno::EPERM));
    // Another client has its own table.
    let mut d = s.client();
    let fd = d.open("/f", libc::O_RDONLY, 0).unwrap();
    d.close(fd).unwrap();
    // The unlinked file is freed when the hoarder goes.
    let free = |d: &mut ulfs_client::Client| d.statfs("/").unwrap().bfree;
    let before = free(&mut d);
    c.write(first, &vec![7u8; 4 << 20]).unwrap();
    c.unlink("/f").unwrap();
    assert!(free(&mut d) < before);
    drop(c);
    s.wait_clients(1);
    assert_eq!(free(&mut d), before);
    drop(d);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn many_requests_then_disconnect_releases_everything() {
    let mut s = serve(128 << 20, |_| {});
    let mut watcher = s.client();
    // The names exist once, so the directory has its room for them.
    for round in 0..5 {
        let fd = watcher
            .open(
                format!("/victim{round}"),
                libc::O_CREAT | libc::O_RDWR,
                0o644,
            )
            .unwrap();
        watcher.close(fd).unwrap();
        watcher.unlink(format!("/victim{round}")).unwrap();
    }
    let free0 = watcher.statfs("/").unwrap().bfree;
    for round in 0..5 {
        let mut r = Raw::connect(&s.socket, 64, 1 << 20).unwrap();
        let q = r.path_req(
            Op::Openat,
            libc::AT_FDCWD,
            format!("/victim{round}").as_bytes(),
            open_flags(libc::O_CREAT | libc::O_RDWR, 0o644),
        );
        let fd = r.res(q).unwrap() as i32;
        let q = r.path_req(
            Op::Unlinkat,
            libc::AT_FDCWD,
            format!("/victim{round}").as_bytes(),
            [0; 4],
        );
        r.res(q).unwrap();
        r.put(0, &vec![round as u8; 1 << 20]);
        // A full ring of 1 MiB writes and dups, then gone at once.
        for i in 0..64u32 {
            let mut q = req(Op::Pwrite, fd, [(i as u64 % 16) << 20, 0, 0, 0]);
            if i % 4 == 3 {
                q = req(Op::Dup, fd, [0; 4]);
            }
            q.p1 = Span::new(0, 1 << 20);
            q.tag = i;
            r.put_req(i, &q);
        }
        r.set(OFF_SQ_TAIL, 64);
        r.kick();
        std::thread::sleep(Duration::from_millis(round * 5));
        drop(r);
        s.wait_clients(1);
        assert_eq!(watcher.statfs("/").unwrap().bfree, free0, "round {round}");
    }
    watcher.nop().unwrap();
    drop(watcher);
    s.wait_clients(0);
    s.stop();
}

#[test]
fn a_flooding_client_does_not_starve_another() {
    // One worker: the flooder and the victim must share it.
    let mut s = serve(64 << 20, |c| c.workers = 1);
    let stop = Arc::new(AtomicBool::new(false));
    let flooded = Arc::new(AtomicU64::new(0));
    let mut flooders = Vec::new();
    for _ in 0..2 {
        let mut r = Raw::connect(&s.socket, 64, 4096).unwrap();
        let (stop, flooded) = (stop.clone(), flooded.clone());
        flooders.push(std::thread::spawn(move || {
            // Keep the ring full of NOPs; take answers as they come.
            while !stop.load(Ordering::Relaxed) {
                while r.tail.wrapping_sub(r.head) < 64 {
                    let q = Req::new(Op::Nop);
                    r.put_req(r.tail, &q);
                    r.tail = r.tail.wrapping_add(1);
                }
                r.set(OFF_SQ_TAIL, r.tail);
                r.kick();
                while r.get(OFF_CQ_TAIL) != r.head {
                    r.head = r.head.wrapping_add(1);
                    flooded.fetch_add(1, Ordering::Relaxed);
                }
                r.set(OFF_CQ_HEAD, r.head);
                std::hint::spin_loop();
            }
        }));
    }
    // And one that only kicks, as fast as it can, with nothing to do.
    let kicker = {
        let r = Raw::connect(&s.socket, 8, 4096).unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                r.kick();
            }
        })
    };
    // The flooders are being served...
    let until = Instant::now() + Duration::from_secs(10);
    while flooded.load(Ordering::Relaxed) < 1000 {
        assert!(Instant::now() < until, "the flooders are not served");
        std::thread::sleep(Duration::from_millis(1));
    }
    // ...and so is the victim, every call within seconds.
    let socket = s.socket.clone();
    let worst = within(30, "a client beside two flooders", move || {
        let mut c = ulfs_client::Client::connect(&socket).unwrap();
        let fd = c.open("/v", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let mut worst = Duration::ZERO;
        for i in 0..300u32 {
            let t = Instant::now();
            c.pwrite(fd, &i.to_le_bytes(), 0).unwrap();
            c.nop().unwrap();
            worst = worst.max(t.elapsed());
        }
        worst
    });
    assert!(worst < Duration::from_secs(5), "worst call took {worst:?}");
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    kicker.join().unwrap();
    s.wait_clients(0);
    s.stop();
}

#[test]
fn a_full_image_is_enospc_and_the_server_goes_on() {
    let mut s = serve(24 << 20, |_| {});
    let mut c = s.client();
    let fd = c.open("/big", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    let mut total = 0usize;
    let err = loop {
        match c.write(fd, &chunk) {
            Ok(n) if n == chunk.len() => total += n,
            Ok(n) => total += n,
            Err(e) => break e,
        }
        assert!(total < 64 << 20, "a 24 MiB image took {total} bytes");
    };
    assert_eq!(err, Errno::ENOSPC);
    assert!(total > 8 << 20, "only {total} bytes fit");
    // Creating is ENOSPC or works; nothing is EIO; other calls go on.
    let mut d = s.client();
    for i in 0..50 {
        match d.mkdir(format!("/d{i}"), 0o755) {
            Ok(()) | Err(Errno::ENOSPC) => {}
            Err(e) => panic!("mkdir on a full image: {e}"),
        }
    }
    assert_eq!(d.stat("/big").unwrap().size, total as u64);
    assert_eq!(c.fallocate(fd, 0, 0, 1 << 30), Err(Errno::ENOSPC));
    c.ftruncate(fd, 0).unwrap();
    assert_eq!(c.write(fd, b"room again").unwrap(), 10);
    c.close(fd).unwrap();
    drop((c, d));
    s.wait_clients(0);
    s.stop();
}

#[test]
fn stopping_with_requests_in_flight_leaves_a_clean_image() {
    let mut s = serve(128 << 20, |_| {});
    // Writers busy in loops, one raw client with a full ring it never
    // takes, one that sleeps waiting for an answer.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3 {
        let mut c = s.client();
        let stop = stop.clone();
        writers.push(std::thread::spawn(move || {
            let fd = c
                .open(
                    format!("/w{w}"),
                    libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC,
                    0o644,
                )
                .unwrap();
            // Within one request's data area (a longer write is split
            // into requests, and a stop between them would leave a size
            // that is no multiple of the write).
            let buf = vec![w as u8; 512 << 10];
            let mut i = 0u64;
            loop {
                match c.pwrite(fd, &buf, (i % 8) * (512 << 10)) {
                    Ok(_) => {}
                    Err(e) => return (e, i),
                }
                if i.is_multiple_of(5) {
                    let _ = c.fsync(fd);
                }
                i += 1;
                if stop.load(Ordering::Relaxed) && i > 10_000 {
                    return (Errno::EIO, i);
                }
            }
        }));
    }
    let mut r = Raw::connect(&s.socket, 8, 4096).unwrap();
    for i in 0..8u32 {
        r.put_req(i, &Req::new(Op::Sync));
    }
    r.set(OFF_SQ_TAIL, 8);
    r.kick();
    std::thread::sleep(Duration::from_millis(300));
    s.stop();
    for w in writers {
        let (e, i) = w.join().unwrap();
        assert_eq!(e, ENOTCONN, "a writer after {i} writes");
    }
    assert!(r.gone());
    assert!(r.hung_up(5));
    stop.store(true, Ordering::Relaxed);
    // The files written are there (they were whole writes).
    let mut fs = unbusy(|| ulfs::Fs::mount(&s.img, ulfs::MountOptions::default()));
    for w in 0..3 {
        let st = fs.stat(format!("/w{w}")).unwrap();
        assert!(st.size.is_multiple_of(512 << 10) && st.size > 0, "{st:?}");
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&s.img);
}

/// What a program sees when the server is full: `Client::connect` must
/// fail with the refusal's errno (EAGAIN), not with EPIPE from sending its
/// HELLO to a socket the server already closed after refusing. (The
/// server refuses at accept, before the HELLO; the REFUSED is in the
/// client's queue, but `ulfs_wire::control::hello` returns the send's
/// EPIPE without reading it. The fix belongs there: on EPIPE/ECONNRESET,
/// read the queued answer.)
#[test]
fn a_refused_client_gets_the_refusals_errno() {
    let mut s = serve(64 << 20, |c| c.limits.max_clients = 1);
    let held = control::connect(&s.socket).unwrap();
    s.wait_clients(1);
    let mut got = Vec::new();
    for _ in 0..20 {
        let socket = s.socket.clone();
        let r = within(10, "a refused connect", move || {
            ulfs_client::Client::connect(&socket).map(drop)
        });
        got.push(r.unwrap_err());
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(held);
    s.wait_clients(0);
    s.stop();
    assert!(
        got.iter().all(|&e| e == Errno::EAGAIN),
        "refused connects failed with {got:?}"
    );
}

/// A connection made while the server stops (its workers gone, its
/// listener not yet closed) is told GONE when the server is joined, even
/// while a `Stopper` keeps the server's state alive: it is not left
/// waiting for a WELCOME that never comes.
#[test]
fn connecting_while_the_server_stops_is_told_gone() {
    let mut s = serve(64 << 20, |_| {});
    let server = s.server.take().unwrap();
    let stopper = server.stopper();
    stopper.stop();
    std::thread::sleep(Duration::from_millis(100));
    // The workers are gone; the connection waits in the backlog.
    let late = control::connect(&s.socket).unwrap();
    control::send_hello(late.as_fd(), 0, 0).unwrap();
    within(20, "joining", move || server.join().unwrap());
    let r = within(5, "a connection made while stopping", move || {
        control::recv(late.as_fd())
    });
    assert!(matches!(r, Ok(control::Msg::Gone) | Err(ENOTCONN)), "{r:?}");
    assert!(!s.socket.exists());
    drop(stopper);
    assert_fsck_clean(&s.img);
}

/// DIRECT and LEASE (docs/SERVE.md "Direct reads") as a hostile client
/// sends them: no lease without the board, the board once per connection,
/// every bad descriptor and span refused, the server unharmed.
#[test]
fn direct_and_lease_refuse_what_they_must() {
    let mut s = serve(64 << 20, |_| {});
    let mut r = Raw::connect(&s.socket, 8, 16 << 10).unwrap();
    let open = |r: &mut Raw, path: &[u8], flags: i32| {
        let p = r.path_req(Op::Openat, libc::AT_FDCWD, path, open_flags(flags, 0o644));
        r.res(p).unwrap() as i32
    };
    let fd = open(&mut r, b"/f", libc::O_CREAT | libc::O_RDWR);
    let mut w = req(Op::Pwrite, fd, [0; 4]);
    w.p1 = r.put(0, &[7u8; 10_000]);
    assert_eq!(r.res(w), Ok(10_000));
    let lease = |r: &mut Raw, fd: i32, a: [u64; 4], p1: Span| {
        let mut q = req(Op::Lease, fd, a);
        q.p1 = p1;
        r.res(q)
    };
    let whole = Span::new(0, 4096);
    // No board yet: no block numbers.
    assert_eq!(lease(&mut r, fd, [0, 8, 0, 0], whole), Err(Errno::EPERM));

    // DIRECT: a span too small for the path, then the board and the path.
    let mut d = req(Op::Direct, -1, [0; 4]);
    d.p1 = Span::new(0, 3);
    assert_eq!(r.res(d), Err(Errno::ENAMETOOLONG));
    let mut d = req(Op::Direct, -1, [0; 4]);
    d.p1 = Span::new(0, 4096);
    let cqe = r.call(d);
    assert!(cqe.res > 0, "DIRECT: {cqe:?}");
    let path = r.data(Span::new(0, cqe.res as u32));
    let real = std::fs::canonicalize(&s.img).unwrap();
    assert_eq!(path, real.as_os_str().as_encoded_bytes());
    let st = std::fs::metadata(&s.img).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(cqe.aux, [st.dev(), st.ino()]);
    match control::try_recv(r.sock.as_fd()) {
        Ok(ulfs_wire::Msg::Object {
            object: 0, memfd, ..
        }) => {
            // Read-only, and no reopen of it may write.
            assert!(rustix::io::write(&memfd, &[1u8; 8]).is_err());
        }
        other => panic!("no board before the answer: {other:?}"),
    }
    // Once per connection: each answer costs a descriptor in flight.
    let mut again = req(Op::Direct, -1, [0; 4]);
    again.p1 = Span::new(0, 4096);
    assert_eq!(r.res(again), Err(Errno(libc::EALREADY)));

    // LEASE's checks.
    let runs = lease(&mut r, fd, [0, 8, 0, 0], whole);
    // The file was never read since it was written: its atime is due.
    assert!(
        runs == Err(Errno::EAGAIN) || runs == Err(Errno(libc::EALREADY)),
        "{runs:?}"
    );
    assert_eq!(lease(&mut r, -1, [0, 8, 0, 0], whole), Err(Errno::EBADF));
    assert_eq!(lease(&mut r, 999, [0, 8, 0, 0], whole), Err(Errno::EBADF));
    let wo = open(&mut r, b"/f", libc::O_WRONLY);
    assert_eq!(lease(&mut r, wo, [0, 8, 0, 0], whole), Err(Errno::EBADF));
    let dir = open(&mut r, b"/", libc::O_RDONLY | libc::O_DIRECTORY);
    assert_eq!(lease(&mut r, dir, [0, 8, 0, 0], whole), Err(Errno::EISDIR));
    assert_eq!(lease(&mut r, fd, [0, 0, 0, 0], whole), Err(EFAULT));
    assert_eq!(
        lease(&mut r, fd, [0, 8, 0, 0], Span::new(0, 31)),
        Err(EFAULT)
    );
    assert_eq!(
        lease(&mut r, fd, [0, 8, 0, 0], Span::new(16 << 10, 64)),
        Err(EFAULT)
    );
    assert_eq!(
        lease(&mut r, fd, [0, 8, 0, 0], Span::new(0, u32::MAX)),
        Err(EFAULT)
    );
    assert_eq!(
        lease(&mut r, fd, [u64::MAX, 8, 0, 0], whole),
        Err(Errno::EINVAL)
    );
    // Granted once a read has moved the atime and the clock has ticked.
    let mut rd = req(Op::Pread, fd, [0; 4]);
    rd.p1 = Span::new(0, 100);
    assert_eq!(r.res(rd), Ok(100));
    std::thread::sleep(Duration::from_millis(10));
    let mut rd = req(Op::Pread, fd, [0; 4]);
    rd.p1 = Span::new(0, 100);
    assert_eq!(r.res(rd), Ok(100));
    assert_eq!(lease(&mut r, fd, [0, u64::MAX, 0, 0], whole), Ok(1));
    let l = ulfs_wire::lease::decode(&r.data(Span::new(0, 4096))).unwrap();
    assert_eq!(l.size, 10_000);
    assert_eq!(l.runs.len(), 1);
    assert_eq!((l.runs[0].first, l.runs[0].blocks), (0, 3));
    drop(r);
    s.stop();
}

/// An O_PATH descriptor names a file and opens nothing: through the server
/// it reads, writes, locks, maps and leases nothing (EBADF), whatever
/// access mode came with it, as Linux's fdget refuses it. (An O_PATH open
/// checks no permission, so each of these would have read or changed a
/// file its client may not open.)
#[test]
fn an_o_path_descriptor_reads_writes_locks_and_maps_nothing() {
    let mut s = serve(64 << 20, |_| {});
    let mut r = Raw::connect(&s.socket, 8, 16 << 10).unwrap();
    let open = |r: &mut Raw, flags: i32| {
        let p = r.path_req(Op::Openat, libc::AT_FDCWD, b"/f", open_flags(flags, 0o600));
        r.res(p).unwrap() as i32
    };
    let rw = open(&mut r, libc::O_CREAT | libc::O_RDWR);
    let mut w = req(Op::Pwrite, rw, [0; 4]);
    w.p1 = r.put(0, b"secret");
    assert_eq!(r.res(w), Ok(6));
    for flags in [libc::O_PATH, libc::O_PATH | libc::O_RDWR] {
        let fd = open(&mut r, flags);
        let mut rd = req(Op::Pread, fd, [0; 4]);
        rd.p1 = Span::new(0, 6);
        assert_eq!(r.res(rd), Err(Errno::EBADF), "pread {flags:o}");
        let mut w = req(Op::Pwrite, fd, [0; 4]);
        w.p1 = r.put(0, b"PWNED!");
        assert_eq!(r.res(w), Err(Errno::EBADF), "pwrite {flags:o}");
        assert_eq!(r.res(req(Op::Ftruncate, fd, [0; 4])), Err(Errno::EBADF));
        let mut lk = req(
            Op::Lock,
            fd,
            [
                ulfs_wire::op::LOCK_POSIX,
                ulfs_wire::op::LOCK_SET,
                libc::F_RDLCK as u64,
                libc::SEEK_SET as u64,
            ],
        );
        lk.p1 = r.put(0, &[0u8; 16]);
        assert_eq!(r.res(lk), Err(Errno::EBADF), "lock {flags:o}");
        let flock = req(
            Op::Lock,
            fd,
            [
                ulfs_wire::op::LOCK_FLOCK,
                ulfs_wire::op::LOCK_SET,
                libc::F_RDLCK as u64,
                0,
            ],
        );
        assert_eq!(r.res(flock), Err(Errno::EBADF), "flock {flags:o}");
        let map = req(Op::MapShared, fd, [0, 4096, libc::PROT_READ as u64, 0]);
        assert_eq!(r.res(map), Err(Errno::EBADF), "map {flags:o}");
        // Naming the file still works: fstat, and F_GETFL shows O_PATH.
        let mut st = req(Op::Fstat, fd, [0; 4]);
        st.p2 = Span::new(8192, 128);
        assert_eq!(r.res(st), Ok(0));
        let fl = r.res(req(Op::FcntlGetfl, fd, [0; 4])).unwrap() as i32;
        assert_eq!(fl & (libc::O_PATH | libc::O_ACCMODE), libc::O_PATH);
    }
    drop(r);
    s.stop();
}

/// The data areas of all clients together stay within
/// `Limits::max_data_bytes`: a client that connects when less is left gets
/// what is left (and works with it), one that finds not even a page is
/// refused with EAGAIN, and a client's end gives its share back.
#[test]
fn data_areas_share_one_budget() {
    let mut s = serve(32 << 20, |c| c.limits.max_data_bytes = (5 << 20) / 2);
    let area = |c: &ulfs_client::Client| c.channel().geometry().data_len;
    let first = s.client();
    let second = s.client();
    let mut third = s.client();
    assert_eq!((area(&first), area(&second)), (1 << 20, 1 << 20));
    assert_eq!(area(&third), 1 << 19);
    let fourth = ulfs_client::Client::connect(&s.socket);
    assert_eq!(fourth.err(), Some(Errno::EAGAIN));
    // The smaller area serves calls longer than itself, a piece at a time.
    let fd = third
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(third.pwrite(fd, &data, 0).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(third.pread(fd, &mut back, 0).unwrap(), data.len());
    assert!(back == data);
    drop(first);
    s.wait_clients(2);
    assert_eq!(area(&s.client()), 1 << 20);
    drop((second, third));
    s.stop();
}

//! Random bytes over a real channel: a raw client fills its request ring,
//! its data area and, at the end of each round, its header and indices
//! with random (and half-valid) bytes and kicks, while a well-behaved
//! client works beside it. The server must answer every request it takes
//! (never EIO: that is a caught panic, which abandons the volume), never
//! stall, cut off only the client that broke its ring, keep serving the
//! other client, and leave an fsck-clean image when stopped.
//!
//! Deterministic per seed: a failure prints the round's seed;
//! `ULFS_SERVER_FUZZ_SEED=<seed>` replays that round first, and
//! `ULFS_SERVER_FUZZ_SECS` runs longer.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use ulfs::Errno;
use ulfs_testkit::rng::Rng;
use ulfs_wire::layout::*;
use ulfs_wire::{Op, Req, Span};

/// Answers seen: successes, and failures, over every round (a fuzz that
/// only ever gets errors would test little).
static OK: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
/// Successful calls that change the volume.
static CHANGED: AtomicU64 = AtomicU64::new(0);

/// Numbers that find edge cases more often than uniform ones.
fn number(rng: &mut Rng) -> u64 {
    const EDGES: [u64; 18] = [
        0,
        1,
        2,
        3,
        0o777,
        0o100644,
        0o40755,
        4095,
        4096,
        1 << 20,
        1 << 30,
        1 << 31,
        u32::MAX as u64,
        i64::MAX as u64,
        i64::MIN as u64,
        u64::MAX,
        u64::MAX - 1,
        (libc::AT_FDCWD as i64) as u64,
    ];
    match rng.below(4) {
        0 => EDGES[rng.below(EDGES.len() as u64) as usize],
        1 => rng.below(1 << 16),
        2 => flags(rng),
        _ => rng.next_u64(),
    }
}

/// A random mix of open / AT / RENAME flags.
fn flags(rng: &mut Rng) -> u64 {
    const BITS: [i32; 16] = [
        libc::O_RDONLY,
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_CREAT,
        libc::O_EXCL,
        libc::O_TRUNC,
        libc::O_APPEND,
        libc::O_DIRECTORY,
        libc::O_NOFOLLOW,
        libc::O_TMPFILE,
        libc::O_NOATIME,
        libc::AT_SYMLINK_NOFOLLOW,
        libc::AT_REMOVEDIR,
        libc::AT_EMPTY_PATH,
        libc::AT_EACCESS,
        libc::RENAME_EXCHANGE as i32,
    ];
    let mut f = 0i32;
    for _ in 0..rng.below(4) {
        f |= BITS[rng.below(BITS.len() as u64) as usize];
    }
    f as i64 as u64
}

fn fd(rng: &mut Rng, fds: &[i32]) -> i32 {
    match rng.below(10) {
        0..=3 if !fds.is_empty() => fds[rng.below(fds.len() as u64) as usize],
        0..=4 => libc::AT_FDCWD,
        5 => -1,
        6 => rng.below(70) as i32,
        7 => rng.next_u64() as i32,
        _ => rng.below(8) as i32,
    }
}

/// A path of a few components from a small alphabet (never "good", the
/// well-behaved client's directory), now and then raw bytes.
fn path(rng: &mut Rng) -> Vec<u8> {
    const PARTS: [&[u8]; 10] = [
        b"a", b"b", b"c", b"..", b".", b"x", b"lnk", b"", b"zz", b"fz",
    ];
    let mut p = Vec::new();
    match rng.below(8) {
        0 => {
            for _ in 0..rng.below(64) {
                p.push(rng.next_u64() as u8);
            }
            return p;
        }
        1 => p.extend_from_slice(b"/"),
        2 => p.extend_from_slice(b"/fz/"),
        _ => {}
    }
    for i in 0..1 + rng.below(4) {
        if i > 0 {
            p.push(b'/');
        }
        p.extend_from_slice(PARTS[rng.below(PARTS.len() as u64) as usize]);
    }
    if rng.below(20) == 0 {
        p.resize(4000 + rng.below(200) as usize, b'q');
    }
    p
}

/// A span for `bytes` (written there), or a random one, or junk.
fn span(rng: &mut Rng, r: &mut Raw, bytes: Option<&[u8]>) -> Span {
    let dl = r.geo.data_len;
    match (rng.below(10), bytes) {
        (0..=6, Some(b)) if (b.len() as u32) < dl => {
            let off = rng.below((dl - b.len() as u32) as u64 + 1) as u32;
            r.put(off, b)
        }
        (0..=7, _) => {
            let off = rng.below(dl as u64) as u32;
            let len = match rng.below(3) {
                0 => rng.below(256) as u32,
                1 => 128,
                _ => rng.below((dl - off) as u64 + 1) as u32,
            };
            Span::new(off, len.min(dl - off))
        }
        (8, _) => Span::new(0, 0),
        _ => Span::new(rng.next_u64() as u32, rng.next_u64() as u32),
    }
}

fn request(rng: &mut Rng, r: &mut Raw, fds: &[i32]) -> Req {
    let mut q = Req::new(Op::Nop);
    q.op = if rng.below(8) == 0 {
        rng.next_u64() as u16
    } else {
        Op::ALL[rng.below(Op::ALL.len() as u64) as usize] as u16
    };
    q.flags = if rng.below(10) == 0 {
        rng.next_u64() as u16
    } else {
        0
    };
    q.fd = fd(rng, fds);
    q.fd2 = fd(rng, fds);
    for a in &mut q.a {
        *a = number(rng);
    }
    if q.op == Op::Openat as u16 && rng.below(2) == 0 {
        q.a[0] = (libc::O_CREAT | libc::O_RDWR) as u64 | flags(rng);
        q.a[1] = 0o644;
    }
    // Offsets and lengths that would fill the image are rare.
    if matches!(
        Op::from_u16(q.op),
        Some(Op::Fallocate | Op::Ftruncate | Op::Pwrite | Op::Truncate)
    ) && rng.below(4) != 0
    {
        q.a[0] &= 0xffff;
        q.a[1] &= 0xffff;
        q.a[2] &= 0xffff;
    }
    let p1 = path(rng);
    q.p1 = span(rng, r, Some(&p1));
    let p2 = if rng.below(2) == 0 {
        path(rng)
    } else {
        let mut t = vec![0u8; rng.below(64) as usize];
        t.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        t
    };
    q.p2 = span(rng, r, Some(&p2));
    q
}

/// Takes every answer the server published, checking none is EIO (a
/// caught panic) and collecting new descriptors; waits until everything
/// published was answered. Panics if the server stalls.
fn settle(r: &mut Raw, sent: &[Req], fds: &mut Vec<i32>, seed: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let t = r.get(OFF_CQ_TAIL);
        while r.head != t {
            let c = r.cqe_at(r.head);
            let q = sent.get(r.head as usize).copied().unwrap_or_default();
            assert_ne!(
                c.result(),
                Err(Errno::EIO),
                "seed {seed:#x}: EIO (a caught panic?) for {q:?}"
            );
            if c.res >= 0 {
                OK.fetch_add(1, Ordering::Relaxed);
                if matches!(
                    Op::from_u16(q.op),
                    Some(
                        Op::Write
                            | Op::Pwrite
                            | Op::Mkdirat
                            | Op::Mknodat
                            | Op::Unlinkat
                            | Op::Renameat2
                            | Op::Linkat
                            | Op::Symlinkat
                            | Op::Ftruncate
                            | Op::Fallocate
                            | Op::Fchmodat
                            | Op::Utimensat
                    )
                ) {
                    CHANGED.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                FAILED.fetch_add(1, Ordering::Relaxed);
            }
            let made = matches!(
                Op::from_u16(q.op),
                Some(Op::Openat | Op::Dup | Op::Dupfd | Op::Dup2)
            );
            if made && c.res >= 0 && fds.len() < 256 {
                fds.push(c.res as i32);
            }
            r.head = r.head.wrapping_add(1);
        }
        r.set(OFF_CQ_HEAD, r.head);
        if r.head == r.tail && r.get(OFF_SQ_HEAD) == r.tail {
            return;
        }
        assert!(!r.gone(), "seed {seed:#x}: an honest ring was cut off");
        assert!(
            Instant::now() < until,
            "seed {seed:#x}: the server stalled: {} published, {} answered",
            r.tail,
            r.head
        );
        r.kick();
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn round(socket: &std::path::Path, seed: u64) {
    let mut rng = Rng::new(seed);
    let sq = [1u32, 2, 8, 64][rng.below(4) as usize];
    let data = [4096u32, 16 << 10, 64 << 10][rng.below(3) as usize];
    let mut r = Raw::connect(socket, sq, data).unwrap();
    let entries = r.geo.sq_entries;
    let mut sent: Vec<Req> = Vec::new();
    let mut fds: Vec<i32> = Vec::new();
    // Work in /fz (made by whichever round comes first).
    let q = r.path_req(Op::Mkdirat, libc::AT_FDCWD, b"/fz", [0o777, 0, 0, 0]);
    sent.push(q);
    let _ = r.call(q);
    let q = r.path_req(Op::Chdir, -1, b"/fz", [0; 4]);
    sent.push(q);
    r.call(q).result().unwrap();
    for _ in 0..40 {
        match rng.below(10) {
            // Random requests, published honestly.
            0..=5 => {
                for _ in 0..1 + rng.below(entries as u64) {
                    let mut q = request(&mut rng, &mut r, &fds);
                    q.tag = r.tail;
                    r.put_req(r.tail, &q);
                    sent.push(q);
                    r.tail = r.tail.wrapping_add(1);
                }
                r.set(OFF_SQ_TAIL, r.tail);
                r.kick();
            }
            // Random bytes over ring slots, then some of them published.
            6 => {
                let k = 1 + rng.below(entries as u64) as u32;
                for i in 0..k {
                    let mut b = [0u8; REQ_SIZE];
                    b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
                    let slot = (r.tail.wrapping_add(i) & (entries - 1)) as usize;
                    r.poke(r.geo.sq_off() + slot * REQ_SIZE, &b);
                    // What we wrote, for the report (its code is enough).
                    sent.push(Req {
                        op: u16::from_ne_bytes([b[0], b[1]]),
                        ..Req::default()
                    });
                }
                r.tail = r.tail.wrapping_add(k);
                r.set(OFF_SQ_TAIL, r.tail);
                r.kick();
            }
            // Random bytes over the data area while requests run.
            7 => {
                let dl = r.geo.data_len as usize;
                let off = rng.below(dl as u64) as usize;
                let len = (rng.below(8192) as usize).min(dl - off);
                let mut b = vec![0u8; len];
                b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
                r.poke(r.geo.data_off as usize + off, &b);
            }
            // cq_head moved anywhere while requests are published, then
            // put back: the server stalls this client, then resumes.
            8 => {
                r.set(OFF_CQ_HEAD, rng.next_u64() as u32);
                for _ in 0..1 + rng.below(entries as u64) {
                    let q = Req::new(Op::Nop);
                    r.put_req(r.tail, &q);
                    sent.push(q);
                    r.tail = r.tail.wrapping_add(1);
                }
                r.set(OFF_SQ_TAIL, r.tail);
                r.kick();
                std::thread::sleep(Duration::from_micros(rng.below(500)));
                r.set(OFF_CQ_HEAD, r.head);
            }
            // Flags the server only reads as hints.
            _ => {
                r.set(OFF_SERVER_IDLE, rng.next_u64() as u32);
                r.set(OFF_CLIENT_WAITING, rng.next_u64() as u32);
                r.set(OFF_SERVER_STATE, rng.next_u64() as u32);
                r.poke(0, &rng.next_u64().to_ne_bytes());
            }
        }
        settle(&mut r, &sent, &mut fds, seed);
    }
    // The end of the round: something destructive, or just a hang-up with
    // requests in flight.
    match rng.below(4) {
        0 => {
            // Random bytes over the whole header page.
            let mut b = vec![0u8; HEADER_LEN];
            b.iter_mut().for_each(|x| *x = rng.next_u64() as u8);
            r.poke(0, &b);
        }
        1 => r.set(OFF_SQ_TAIL, rng.next_u64() as u32),
        2 => {
            let len = r.len();
            for _ in 0..64 {
                let off = rng.below(len as u64 - 8) as usize;
                r.poke(off, &rng.next_u64().to_ne_bytes());
            }
        }
        _ => {
            for _ in 0..entries {
                let q = request(&mut rng, &mut r, &fds);
                r.put_req(r.tail, &q);
                r.tail = r.tail.wrapping_add(1);
            }
            r.set(OFF_SQ_TAIL, r.tail);
        }
    }
    r.kick();
    std::thread::sleep(Duration::from_micros(rng.below(2000)));
    drop(r);
}

#[test]
fn random_bytes_over_a_channel_never_hurt_the_server_or_its_other_clients() {
    let mut s = serve(128 << 20, |c| {
        c.workers = 2;
        c.limits.max_fds = 4096;
    });
    // The well-behaved client, working all along in /good.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let good = {
        let (stop, served) = (stop.clone(), served.clone());
        let socket = s.socket.clone();
        std::thread::spawn(move || {
            let mut c = ulfs_client::Client::connect(&socket).unwrap();
            c.mkdir("/good", 0o700).unwrap();
            let fd = c
                .open("/good/f", libc::O_CREAT | libc::O_RDWR, 0o600)
                .unwrap();
            c.write(fd, &[1u8; 1 << 16]).unwrap();
            let mut worst = Duration::ZERO;
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                c.nop().unwrap();
                c.pwrite(fd, &i.to_le_bytes(), (i as u64 % 1000) * 64)
                    .unwrap();
                let mut b = [0u8; 4];
                c.pread(fd, &mut b, (i as u64 % 1000) * 64).unwrap();
                assert_eq!(u32::from_le_bytes(b), i);
                assert_eq!(c.fstat(fd).unwrap().size, 1 << 16);
                worst = worst.max(t.elapsed());
                served.fetch_add(1, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            c.close(fd).unwrap();
            worst
        })
    };
    let secs: u64 = std::env::var("ULFS_SERVER_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut seeds: Vec<u64> = std::env::var("ULFS_SERVER_FUZZ_SEED")
        .ok()
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .into_iter()
        .collect();
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let seed = seeds
            .pop()
            .unwrap_or(0x5eed_0000_0000 ^ rounds.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        round(&s.socket, seed);
        rounds += 1;
        assert!(!good.is_finished(), "the well-behaved client failed");
    }
    let before = served.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        served.load(Ordering::Relaxed) > before,
        "the well-behaved client is not served any more"
    );
    stop.store(true, Ordering::Relaxed);
    let worst = good.join().expect("the well-behaved client failed");
    assert!(worst < Duration::from_secs(5), "a good call took {worst:?}");
    assert!(rounds >= 5, "only {rounds} rounds");
    let (ok, failed, changed) = (
        OK.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
        CHANGED.load(Ordering::Relaxed),
    );
    eprintln!(
        "{rounds} fuzz rounds: {ok} answers ok ({changed} changes), {failed} errors; \
         worst good call {worst:?}"
    );
    assert!(changed > 100 && failed > 100, "a fuzz that does little");
    // The fuzzed clients are all gone, their descriptors with them.
    s.wait_clients(0);
    // The volume still takes changes (no caught panic abandoned it).
    let mut c = s.client();
    let fd = c
        .open("/after", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    c.write(fd, b"after the fuzz").unwrap();
    c.close(fd).unwrap();
    drop(c);
    s.wait_clients(0);
    s.stop();
}

//! Direct reads (docs/SERVE.md "Direct reads"): a client's preads of a
//! leased file come from its own view of the image, with no request, and
//! still answer exactly what the server would: another client's
//! overwrites, appends, truncations, hole punches and shared mappings are
//! seen at once, relatime still moves atime, and a client that cannot
//! have a view reads through the server as before.

mod common;

use common::*;
use ulfs_client::Client;
use ulfs_testkit::rng::Rng;

/// Preads enough to have the view set up and the descriptor leased. A
/// file written within the server's clock tick has an atime relatime
/// still moves at the next one: no lease before that (`Volume::lease`).
fn warm(c: &mut Client, fd: i32) {
    let mut b = [0u8; 16];
    for _ in 0..8 {
        c.pread(fd, &mut b, 0).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(10));
    for _ in 0..4 {
        c.pread(fd, &mut b, 0).unwrap();
    }
}

fn requests(c: &Client) -> u64 {
    c.channel().stats().requests
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8 ^ seed)
        .collect()
}

#[test]
fn leased_reads_take_no_request_and_answer_what_the_file_holds() {
    let s = serve();
    let (mut reader, mut writer) = (s.client(), s.client());
    let w = writer
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let data = pattern(3 << 20, 1);
    assert_eq!(writer.pwrite(w, &data, 0).unwrap(), data.len());
    let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
    // The view keeps no descriptor of the image (a served program owns
    // its numbers): only the server's own (other tests' servers and
    // clients in this process have other images).
    let fds = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|p| p == s.img))
            .count()
    };
    let before = fds();
    warm(&mut reader, r);
    assert!(reader.direct_reads_ready(), "no view was set up");
    assert_eq!(fds(), before, "descriptors kept by the view");
    let before = requests(&reader);
    let mut b = vec![0u8; 5000];
    for i in 0..200u64 {
        let off = i * 12_345 % (3 << 20);
        let n = reader.pread(r, &mut b, off).unwrap();
        let want = &data[off as usize..(off as usize + 5000).min(data.len())];
        assert_eq!(&b[..n], want, "at {off}");
    }
    // A read past the end, and one straddling it.
    assert_eq!(reader.pread(r, &mut b, 4 << 20).unwrap(), 0);
    assert_eq!(reader.pread(r, &mut b, (3 << 20) - 10).unwrap(), 10);
    assert!(
        requests(&reader) - before <= 2,
        "{} requests for 202 leased reads",
        requests(&reader) - before
    );

    // Another client's changes are seen at once.
    writer.pwrite(w, b"OVERWRITE", 100).unwrap();
    assert_eq!(reader.pread(r, &mut b[..9], 100).unwrap(), 9);
    assert_eq!(&b[..9], b"OVERWRITE");
    writer.pwrite(w, b"appended", 3 << 20).unwrap();
    assert_eq!(reader.pread(r, &mut b, 3 << 20).unwrap(), 8);
    assert_eq!(&b[..8], b"appended");
    writer.ftruncate(w, 10_000).unwrap();
    assert_eq!(reader.pread(r, &mut b, 9_000).unwrap(), 1_000);
    assert_eq!(reader.pread(r, &mut b, 20_000).unwrap(), 0);
    writer
        .fallocate(
            w,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            4096,
        )
        .unwrap();
    assert_eq!(reader.pread(r, &mut b[..4096], 4096).unwrap(), 4096);
    assert!(
        b[..4096].iter().all(|&x| x == 0),
        "a punched hole reads zeros"
    );
    // A hole filled by a write far past the end.
    writer.pwrite(w, b"far", 50 << 20).unwrap();
    assert_eq!(reader.pread(r, &mut b[..3], 50 << 20).unwrap(), 3);
    assert_eq!(&b[..3], b"far");
    assert_eq!(reader.pread(r, &mut b[..10], 30 << 20).unwrap(), 10);
    assert_eq!(&b[..10], &[0; 10]);
}

#[test]
fn random_changes_and_leased_reads_agree_with_a_model() {
    // relatime (reads in the clock tick of a change are not leased), and
    // noatime (every read between two changes may be).
    for (seed, noatime) in [(1u64, false), (2, false), (3, true), (4, true)] {
        let s = serve_with(|v| v.set_no_atime(noatime));
        let (mut reader, mut writer) = (s.client(), s.client());
        let w = writer
            .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .unwrap();
        let mut model = pattern(300_000, seed as u8);
        writer.pwrite(w, &model, 0).unwrap();
        let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
        warm(&mut reader, r);
        let mut rng = Rng::new(seed);
        let mut buf = vec![0u8; 70_000];
        let (mut reads, mut used) = (0, 0);
        for step in 0..3000 {
            if step % 300 == 0 {
                // A clock tick with no change: reads may be leased again.
                warm(&mut reader, r);
            }
            match rng.below(10) {
                0 => {
                    let off = rng.below(400_000) as usize;
                    let bytes = pattern(rng.below(20_000) as usize + 1, step as u8);
                    writer.pwrite(w, &bytes, off as u64).unwrap();
                    if model.len() < off + bytes.len() {
                        model.resize(off + bytes.len(), 0);
                    }
                    model[off..off + bytes.len()].copy_from_slice(&bytes);
                }
                1 if step % 7 == 0 => {
                    let len = rng.below(400_000) as usize;
                    writer.ftruncate(w, len as u64).unwrap();
                    model.resize(len, 0);
                }
                2 if step % 5 == 0 => {
                    let off = rng.below(300_000) / 4096 * 4096;
                    let len = (rng.below(8) + 1) * 4096;
                    writer
                        .fallocate(
                            w,
                            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                            off,
                            len,
                        )
                        .unwrap();
                    let end = ((off + len) as usize).min(model.len());
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
                _ => {
                    let off = rng.below(420_000) as usize;
                    let len = rng.below(buf.len() as u64) as usize + 1;
                    let before = requests(&reader);
                    let n = reader.pread(r, &mut buf[..len], off as u64).unwrap();
                    used += requests(&reader) - before;
                    let want = &model[off.min(model.len())..(off + len).min(model.len())];
                    assert_eq!(n, want.len(), "seed {seed} step {step}: read at {off}");
                    assert!(buf[..n] == *want, "seed {seed} step {step}: read at {off}");
                    reads += 1;
                }
            }
        }
        // Runs of reads between changes are served from the view: fewer
        // requests than reads, though every change ends the lease (and
        // reads in the clock tick of a change are not leased).
        assert!(
            used < reads,
            "seed {seed}: {used} requests for {reads} reads"
        );
        if noatime {
            assert!(
                used < reads / 2,
                "seed {seed}: {used} requests for {reads} reads without atimes"
            );
        }
    }
}

#[test]
fn relatime_still_moves_atime_after_a_change() {
    let s = serve();
    let (mut reader, mut writer) = (s.client(), s.client());
    let w = writer
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    writer.pwrite(w, &pattern(100_000, 0), 0).unwrap();
    let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
    warm(&mut reader, r);
    let mut b = [0u8; 100];
    for _ in 0..3 {
        // A write makes the next read's atime due (it is not newer than
        // the change); the read must move it even though it is leased.
        std::thread::sleep(std::time::Duration::from_millis(20));
        writer.pwrite(w, b"x", 10).unwrap();
        let changed = writer.fstat(w).unwrap().mtime;
        reader.pread(r, &mut b, 0).unwrap();
        let st = reader.fstat(r).unwrap();
        assert!(
            st.atime >= changed,
            "atime {:?} < mtime {:?}",
            st.atime,
            changed
        );
        // Further reads are leased again once nothing is due any more. An
        // atime moved in the clock tick of the write equals the mtime, and
        // relatime moves it once more at the next tick (as Linux does): a
        // tick later, a refused lease and a read through the server again,
        // then a lease.
        std::thread::sleep(std::time::Duration::from_millis(10));
        let before = requests(&reader);
        for _ in 0..50 {
            reader.pread(r, &mut b, 0).unwrap();
        }
        let used = requests(&reader) - before;
        assert!(
            used <= 4,
            "{used} requests for 50 reads after the atime update"
        );
    }
}

#[test]
fn a_shared_mapping_ends_leases_and_its_bytes_are_read() {
    let s = serve();
    let (mut reader, mut mapper) = (s.client(), s.client());
    let m = mapper
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    mapper.pwrite(m, &pattern(8192, 3), 0).unwrap();
    let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
    warm(&mut reader, r);
    let (object, memfd) = mapper
        .map_shared(m, 0, 8192, libc::PROT_READ | libc::PROT_WRITE)
        .unwrap();
    // SAFETY: a fresh shared mapping of the object's memfd, 8 KiB long
    // (the server made it at least that), written and unmapped here only.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&memfd),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(b"MAPPED".as_ptr(), (p as *mut u8).add(200), 6);
        let mut b = [0u8; 6];
        assert_eq!(reader.pread(r, &mut b, 200).unwrap(), 6);
        assert_eq!(
            &b, b"MAPPED",
            "a store into a shared mapping, read by another client"
        );
        libc::munmap(p, 8192);
    }
    mapper.unmap(object).unwrap();
    let mut b = [0u8; 6];
    assert_eq!(reader.pread(r, &mut b, 200).unwrap(), 6);
    assert_eq!(&b, b"MAPPED");
}

#[test]
fn without_a_view_every_read_is_a_request_and_right() {
    let s = serve();
    let mut c = s.client();
    c.set_direct_reads(false);
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let data = pattern(50_000, 9);
    c.pwrite(fd, &data, 0).unwrap();
    warm(&mut c, fd);
    assert!(!c.direct_reads_ready());
    let before = requests(&c);
    let mut b = vec![0u8; 1000];
    for i in 0..20 {
        assert_eq!(c.pread(fd, &mut b, i * 1000).unwrap(), 1000);
        assert_eq!(b[..], data[i as usize * 1000..][..1000]);
    }
    assert_eq!(requests(&c) - before, 20);

    // An image this client cannot open by the name the server gives (moved
    // away since the server started): no view, the same answers.
    let moved = s.dir.path().join("moved");
    std::fs::rename(&s.img, &moved).unwrap();
    let mut c = s.client();
    let fd = c.open("/f", libc::O_RDONLY, 0).unwrap();
    warm(&mut c, fd);
    assert!(
        !c.direct_reads_ready(),
        "a view of whatever is at the old path"
    );
    assert_eq!(c.pread(fd, &mut b, 7000).unwrap(), 1000);
    assert_eq!(b[..], data[7000..8000]);
    std::fs::rename(&moved, &s.img).unwrap();
}

#[test]
fn descriptors_reused_for_other_files_are_not_read_by_an_old_lease() {
    let s = serve();
    let mut c = s.client();
    let a = pattern(20_000, 1);
    let b = pattern(20_000, 2);
    let fa = c.open("/a", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.pwrite(fa, &a, 0).unwrap();
    let fb = c.open("/b", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.pwrite(fb, &b, 0).unwrap();
    let mut buf = vec![0u8; 100];
    for round in 0..4 {
        warm(&mut c, fa);
        c.pread(fa, &mut buf, 500).unwrap();
        assert_eq!(buf[..], a[500..600], "round {round}");
        // The same number for another file, three ways.
        match round {
            0 => {
                c.close(fa).unwrap();
                assert_eq!(c.open("/b", libc::O_RDONLY, 0).unwrap(), fa);
            }
            1 => assert_eq!(c.dup2(fb, fa).unwrap(), fa),
            _ => {
                c.close(fa).unwrap();
                assert_eq!(c.dup(fb).unwrap(), fa);
            }
        }
        c.pread(fa, &mut buf, 500).unwrap();
        assert_eq!(
            buf[..],
            b[500..600],
            "round {round}: the old lease was used"
        );
        c.close(fa).unwrap();
        assert_eq!(c.open("/a", libc::O_RDONLY, 0).unwrap(), fa);
    }
}

#[test]
fn a_kept_fstat_answer_follows_every_change_of_the_file() {
    let s = serve();
    let (mut reader, mut other) = (s.client(), s.client());
    let o = other
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    other.pwrite(o, &pattern(10_000, 4), 0).unwrap();
    let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
    warm(&mut reader, r);
    reader.fstat(r).unwrap();
    reader.fstat(r).unwrap();
    let before = requests(&reader);
    for _ in 0..100 {
        reader.fstat(r).unwrap();
    }
    assert!(
        requests(&reader) - before <= 1,
        "{} requests for 100 fstats of an unchanged file",
        requests(&reader) - before
    );
    // Each change by the other client is in the next answer, as the
    // server's own fstat (asked for by path, never kept) gives it.
    type Change = Box<dyn Fn(&mut Client)>;
    let changes: Vec<Change> = vec![
        Box::new(move |c| {
            c.pwrite(o, b"more", 20_000).unwrap();
        }),
        Box::new(move |c| c.fchmod(o, 0o600).unwrap()),
        Box::new(|c| c.link("/f", "/g").unwrap()),
        Box::new(|c| c.unlink("/g").unwrap()),
        Box::new(move |c| c.ftruncate(o, 5).unwrap()),
        Box::new(move |c| {
            let t = ulfs::Timespec {
                sec: 1_000,
                nsec: 7,
            };
            c.futimens(o, Some([t, t])).unwrap()
        }),
        Box::new(|c| c.rename("/f", "/h").unwrap()),
    ];
    for (i, change) in changes.iter().enumerate() {
        std::thread::sleep(std::time::Duration::from_millis(5));
        change(&mut other);
        let kept = reader.fstat(r).unwrap();
        let path = if i + 1 == changes.len() { "/h" } else { "/f" };
        let fresh = other.stat(path).unwrap();
        assert_eq!(kept, fresh, "change {i}");
        for _ in 0..3 {
            assert_eq!(reader.fstat(r).unwrap(), fresh, "change {i}, asked again");
        }
    }
}

/// A leased read racing a change on another client is the file before
/// it or after it, never a mix: the leases end before the first byte
/// changes (`Volume::end_leases`), as a read through the server is
/// atomic against writes under the volume's lock.
#[test]
fn a_leased_read_never_sees_half_a_change() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const LEN: usize = 1 << 20;
    let s = serve_with(|v| v.set_no_atime(true));
    let mut writer = s.client();
    let w = writer
        .open("/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    writer.pwrite(w, &vec![b'A'; LEN], 0).unwrap();
    let stop = AtomicBool::new(false);
    let (mut torn, mut direct, mut reads) = (0, 0, 0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (a, b) = (vec![b'A'; LEN], vec![b'B'; LEN]);
            let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
            for i in 0.. {
                if std::time::Instant::now() > until {
                    break;
                }
                match i % 4 {
                    // Overwrites in place, whole.
                    0 => writer.pwrite(w, &a, 0).unwrap(),
                    1 => writer.pwrite(w, &b, 0).unwrap(),
                    // A truncate zeroes the tail of its last block in
                    // place; the write after it makes the file whole again.
                    2 => {
                        writer.ftruncate(w, 100).unwrap();
                        writer.pwrite(w, &a, 0).unwrap()
                    }
                    _ => writer.pwrite(w, &a, 0).unwrap(),
                };
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut reader = s.client();
        let r = reader.open("/f", libc::O_RDONLY, 0).unwrap();
        warm(&mut reader, r);
        let mut buf = vec![0u8; LEN];
        while !stop.load(Ordering::Relaxed) {
            let before = requests(&reader);
            let n = reader.pread(r, &mut buf, 0).unwrap();
            direct += u32::from(requests(&reader) == before);
            reads += 1;
            let first = buf[0];
            // Whole As, whole Bs, or the 100 bytes of As a truncate left.
            let whole = (n == LEN || n == 100) && buf[..n].iter().all(|&x| x == first);
            if !whole {
                torn += 1;
            }
        }
    });
    assert_eq!(torn, 0, "{torn} of {reads} reads saw half a change");
    assert!(direct > 0, "no read of {reads} was leased");
}

#[test]
fn a_stopped_server_ends_leased_reads_and_kept_answers_at_once() {
    let mut s = serve();
    let mut c = s.client();
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.pwrite(fd, &pattern(8192, 3), 0).unwrap();
    warm(&mut c, fd);
    // The first fstat learns the inode, the second is kept.
    c.fstat(fd).unwrap();
    c.fstat(fd).unwrap();
    let before = requests(&c);
    let mut b = [0u8; 16];
    c.pread(fd, &mut b, 4096).unwrap();
    c.fstat(fd).unwrap();
    assert_eq!(requests(&c), before, "the read and fstat were not direct");
    s.stop();
    // Within the lease's second, and with the view still mapped.
    assert_eq!(c.pread(fd, &mut b, 4096), Err(ulfs::Errno::ENOTCONN));
    assert_eq!(c.fstat(fd).map(drop), Err(ulfs::Errno::ENOTCONN));
}

//! Running one case: a fresh image and a fresh host directory (chrooted
//! when permitted), in a thread of its own; at the end the image is
//! unmounted, mounted again and compared again, then fsck'd.

use super::*;

/// A fresh host directory on tmpfs (or the temp dir without /dev/shm).
pub fn host_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("ulfs-model-")
        .tempdir_in(base)
        .expect("create host temp dir")
}

/// Confines this thread's view of `/` to `root` (own fs_struct, chroot,
/// chdir, umask 022 like a fresh `ulfs::Fs`). Returns false if chroot is not permitted.
pub fn enter_chroot(root: &[u8]) -> bool {
    let c = cpath(root);
    // SAFETY: unshare(CLONE_FS) gives this thread a private root/cwd/umask;
    // it touches no memory of ours.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        // SAFETY: umask has no memory effects. Without a private fs_struct
        // this is process-wide; every test in this binary sets the same value.
        unsafe { libc::umask(HOST_UMASK) };
        return false;
    }
    // SAFETY: umask only affects this thread's private fs_struct now.
    unsafe { libc::umask(HOST_UMASK) };
    // SAFETY: valid C strings; chroot/chdir affect only this thread's
    // private fs_struct (unshared above).
    unsafe { libc::chroot(c.as_ptr()) == 0 && libc::chdir(c"/".as_ptr()) == 0 }
}

/// Runs `ops` on a fresh image and a fresh tmpfs directory, in a dedicated
/// thread; `Err` describes the first divergence.
/// What a case's thread hands back for the check after remounting.
pub struct Finished {
    pub stats: CaseStats,
    /// ulfs's times of every node before unmount.
    pub times: Vec<(Vec<u8>, Times)>,
    /// The host tree's prefix as seen outside the thread's chroot.
    pub host_prefix: Vec<u8>,
    pub ulfs_prefix: Vec<u8>,
}

pub fn run_case(ops: &[Op]) -> Result<CaseStats, String> {
    run_case_via(ops, Via::Library)
}

/// `run_case`, reaching ulfs as `via` says.
pub fn run_case_via(ops: &[Op], via: Via) -> Result<CaseStats, String> {
    let img_dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let host_dir = host_tempdir();
    let img = img_dir.path().join("image");
    let hroot = host_dir.path().as_os_str().as_encoded_bytes().to_vec();
    let ops = ops.to_vec();
    let img2 = img.clone();
    let t = std::thread::spawn(move || run_in_thread(&img2, &hroot, &ops, via));
    let r = match t.join() {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panic while running the case: {msg}"))
        }
    };
    let fin = r?;
    // Unmounted: mount again (outside the chroot, where the image path
    // means what it did before) and compare again: the same tree
    // (contents, modes, owners, link counts against the host) and the
    // same times as before unmounting.
    let fs = Target::mount(&img, via).map_err(|e| format!("remount: {e}"))?;
    let mut h = Harness {
        host: HostSide {
            prefix: fin.host_prefix,
        },
        ulfs: UlfsSide {
            fs,
            prefix: fin.ulfs_prefix,
        },
        chrooted: false,
        slots: Slots::default(),
        trace: Vec::new(),
        stats: CaseStats::default(),
    };
    let again = h.ulfs_times()?;
    if again != fin.times {
        let diff: Vec<String> = fin
            .times
            .iter()
            .zip(&again)
            .filter(|(a, b)| a != b)
            .take(3)
            .map(|(a, b)| format!("{}: {:?} then {:?}", show_path(&a.0), a.1, b.1))
            .collect();
        return Err(format!(
            "times changed across unmount and mount (or the tree did): {diff:?}"
        ));
    }
    h.compare_trees()
        .map_err(|e| format!("after unmount and mount again: {e}"))?;
    let Harness { ulfs, .. } = h;
    ulfs.fs
        .unmount()
        .map_err(|e| format!("unmount after remount: {e:?}"))?;
    let stats = fin.stats;
    let report = ulfs::fsck(&img, &mut ulfs::FsckOptions::default())
        .map_err(|e| format!("fsck could not check the image: {e}"))?;
    if !report.is_clean() {
        return Err(format!(
            "fsck after the case found problems: {:?}\n(ops replayed cleanly against tmpfs)",
            report.problems
        ));
    }
    Ok(stats)
}

pub fn run_in_thread(img: &Path, hroot: &[u8], ops: &[Op], via: Via) -> Result<Finished, String> {
    let opts = MkfsOptions {
        size: IMAGE_SIZE,
        ..MkfsOptions::default()
    };
    ulfs::mkfs(img, &opts).map_err(|e| format!("mkfs: {e}"))?;
    // Before the chroot below: the image and the server's socket are
    // outside it (the server's threads, started here, keep the process's
    // root).
    let mut fs = Target::mount(img, via).map_err(|e| format!("mount: {e}"))?;
    let mode = if enter_chroot(hroot) {
        HostMode::Chroot
    } else {
        HostMode::Prefix
    };
    let (hpre, upre) = match mode {
        HostMode::Chroot => (Vec::new(), Vec::new()),
        HostMode::Prefix => {
            let mut h = hroot.to_vec();
            let mut u = Vec::new();
            for _ in 0..PREFIX_DEPTH {
                h.extend_from_slice(b"/q");
                u.extend_from_slice(b"/q");
                host::mkdir(&h, 0o755).map_err(|e| format!("host prefix: {}", errno_name(e)))?;
                fs.mkdir(&u, 0o755)
                    .map_err(|e| format!("ulfs prefix: {e:?}"))?;
            }
            (h, u)
        }
    };
    let mut h = Harness {
        host: HostSide { prefix: hpre },
        ulfs: UlfsSide { fs, prefix: upre },
        chrooted: matches!(mode, HostMode::Chroot),
        slots: Slots::default(),
        trace: Vec::new(),
        stats: CaseStats::default(),
    };
    h.run(ops)?;
    // Close everything; ulfs must accept each close.
    for (i, slot) in std::mem::take(&mut h.slots.0).into_iter().enumerate() {
        if let Some((hf, uf)) = slot {
            let _ = host::close(hf);
            if uf != CLOSED_FD {
                h.ulfs
                    .close(uf)
                    .map_err(|e| format!("final close of slot {i}: {}", errno_name(e)))?;
            }
        }
    }
    let times = h.ulfs_times()?;
    let host_prefix = if h.chrooted {
        hroot.to_vec()
    } else {
        h.host.prefix.clone()
    };
    let Harness { ulfs, stats, .. } = h;
    let ulfs_prefix = ulfs.prefix;
    ulfs.fs.unmount().map_err(|e| format!("unmount: {e:?}"))?;
    Ok(Finished {
        stats,
        times,
        host_prefix,
        ulfs_prefix,
    })
}

/// Replays a fixed sequence, panicking with the trace on divergence.
pub fn run_ops(ops: Vec<Op>) {
    if let Err(e) = run_case(&ops).map(|_| ()) {
        panic!("{e}");
    }
}

/// A small starting tree most cases begin with (`seeded = true`), so that
/// random ops collide with existing files, directories, symlinks and open
/// descriptors instead of mostly failing with ENOENT/EBADF.
pub fn seed_ops() -> Vec<Op> {
    let rw = Flags(libc::O_RDWR | libc::O_CREAT);
    vec![
        Op::Mkdir(p("d"), M(0o755)),
        Op::Mkdir(p("d/c"), M(0o700)),
        Op::Open(p("a"), rw, M(0o644)),
        Op::Write(S(0), 5000, b'A'),
        Op::Open(p("d/a"), Flags(libc::O_WRONLY | libc::O_CREAT), M(0o600)),
        Op::Write(S(1), 10, b'B'),
        Op::Symlink(p("d"), p("b")),
        Op::Symlink(p("../a"), p("d/b")),
        Op::Open(p("d"), Flags(libc::O_RDONLY | libc::O_DIRECTORY), M(0)),
    ]
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Skipped steps may be at most this share of all steps (in percent).
const MAX_SKIPPED_PERCENT: u64 = 10;

/// Random cases (proptest, run by hand rather than through the
/// `proptest!` macro so that the steps skipped across all cases can be
/// counted and reported once at the end), reaching ulfs as `via` says.
pub fn random_cases(name: &str, via: Via, cases: u32) {
    use proptest::test_runner::{Config, TestError, TestRunner};
    use std::sync::Mutex;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    });
    // Only the passing cases count (shrinking reruns failing ones).
    type Counts = std::collections::BTreeMap<&'static str, u64>;
    let totals: Mutex<(u64, u64, u64, Counts)> = Default::default();
    let strategy = (prop::bool::weighted(0.7), vec(op(), 1..=60));
    let result = runner.run(&strategy, |(seeded, ops)| {
        let mut all = if seeded { seed_ops() } else { Vec::new() };
        all.extend(ops);
        let stats = run_case_via(&all, via).map_err(TestCaseError::fail)?;
        let mut t = totals.lock().unwrap_or_else(|e| e.into_inner());
        t.0 += stats.steps;
        t.1 += stats.times_checked;
        t.2 += stats.succeeded;
        for why in stats.skipped {
            *t.3.entry(why).or_default() += 1;
        }
        Ok(())
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, (seeded, ops))) => {
            panic!("Test failed: {why}.\nminimal failing input: seeded = {seeded}, ops = {ops:?}")
        }
        Err(e) => panic!("{e}"),
    }
    let (steps, times, succeeded, skipped) = totals.into_inner().unwrap_or_else(|e| e.into_inner());
    let n_skipped: u64 = skipped.values().sum();
    eprintln!(
        "{name}: {cases} cases, {steps} steps compared ({succeeded} succeeded, \
         {times} node times checked), {n_skipped} skipped: {skipped:?}"
    );
    assert!(
        n_skipped * 100 <= steps * MAX_SKIPPED_PERCENT,
        "{n_skipped} of {steps} steps were skipped (more than {MAX_SKIPPED_PERCENT}%): {skipped:?}"
    );
    // Steps skipped for lack of privilege: a visible, counted skip (and a
    // failure where every test must run, as in CI, which runs as root).
    let unprivileged: u64 = PRIVILEGE_SKIPS
        .iter()
        .filter_map(|why| skipped.get(why))
        .sum();
    if unprivileged > 0 {
        ulfs_testkit::skip::skip(
            &format!("{name} (steps needing root or CAP_SYS_CHROOT)"),
            &format!("{unprivileged} steps not run without privileges"),
        );
    }
}

//! The data path's per-call costs (issue 9): fstat, lseek, small writes and
//! reads of an existing file, writes into a fresh file, and fig. 7's 1 KiB
//! calls, through the C API (what `ulfs bench`'s workers and `ulfs run`
//! call) and, for fstat and lseek, through `ulfs::Fs` directly, so the C
//! boundary's own cost is the difference of the two (kept under 2 ns).
//!
//! `cargo bench -p ulfs-capi --bench hot_path`. Images live on /dev/shm
//! when it exists (as `ulfs bench` puts them), in both durability modes.

use criterion::{Criterion, criterion_group, criterion_main};
use std::ffi::CString;
use std::hint::black_box;
use std::time::{Duration, Instant};
use ulfs::{Fs, MountOptions};
use ulfs_c::*;

const MIB: usize = 1 << 20;

fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn image(dir: &tempfile::TempDir, mode: &str) -> CString {
    let p = dir.path().join(format!("{mode}.img"));
    let path = CString::new(p.to_str().unwrap()).unwrap();
    let opts = CString::new(format!("mode={mode}")).unwrap();
    // SAFETY: both strings are NUL-terminated and live across the call.
    assert_eq!(
        unsafe { ulfs_mkfs(path.as_ptr(), 64 << 20, opts.as_ptr()) },
        0
    );
    path
}

struct Mounted(*mut ulfs_t);

impl Mounted {
    fn new(path: &CString) -> Mounted {
        let mut err = 0;
        // SAFETY: `path` is NUL-terminated; `err` is writable.
        let fs = unsafe { ulfs_mount(path.as_ptr(), 0, &mut err) };
        assert!(!fs.is_null(), "mount: {err}");
        Mounted(fs)
    }
    fn open(&self, name: &str, flags: i32) -> i32 {
        let name = CString::new(name).unwrap();
        // SAFETY: a live handle and a NUL-terminated name.
        let fd = unsafe { ulfs_open(self.0, name.as_ptr(), flags, 0o644) };
        assert!(fd >= 0, "open: {fd}");
        fd
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: the handle came from ulfs_mount and is dropped once.
        unsafe { ulfs_unmount(self.0) };
    }
}

/// A write then a read of `chunk` bytes at each chunk of 1 MiB in a fixed
/// shuffled order, as lseek + write + lseek + read (the original ULFS's
/// shape); returns the time per chunk.
fn seek_write_read(
    fs: &Mounted,
    fd: i32,
    chunk: usize,
    order: &[usize],
    buf: &mut [u8],
) -> Duration {
    let t = Instant::now();
    for &i in order {
        let off = (i * chunk) as i64;
        // SAFETY: a live handle; `buf` holds `chunk` bytes at `off`.
        unsafe {
            ulfs_lseek(fs.0, fd, off, libc::SEEK_SET);
            ulfs_write(fs.0, fd, buf.as_ptr().add(off as usize).cast(), chunk);
            ulfs_lseek(fs.0, fd, off, libc::SEEK_SET);
            ulfs_read(fs.0, fd, buf.as_mut_ptr().add(off as usize).cast(), chunk);
        }
    }
    t.elapsed() / order.len() as u32
}

fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn bench(c: &mut Criterion) {
    let dir = scratch();
    for mode in ["journal", "none"] {
        let path = image(&dir, mode);
        let mut g = c.benchmark_group(mode);
        g.warm_up_time(Duration::from_millis(300));
        g.measurement_time(Duration::from_secs(1));
        {
            let fs = Mounted::new(&path);
            let fd = fs.open("meta.dat", libc::O_CREAT | libc::O_RDWR);
            // SAFETY (all below): a live handle, a valid `stat` out-pointer.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            g.bench_function("c/fstat", |b| {
                b.iter(|| unsafe { ulfs_fstat(fs.0, black_box(fd), &mut st) })
            });
            g.bench_function("c/lseek", |b| {
                b.iter(|| unsafe { ulfs_lseek(fs.0, black_box(fd), 0, libc::SEEK_SET) })
            });
            let mut buf = vec![7u8; MIB];
            let over = fs.open("over.dat", libc::O_CREAT | libc::O_RDWR);
            // SAFETY: `buf` holds MIB bytes.
            assert_eq!(
                unsafe { ulfs_pwrite(fs.0, over, buf.as_ptr().cast(), MIB, 0) },
                MIB as isize
            );
            for chunk in [64, 512] {
                let order = shuffled(MIB / chunk);
                g.bench_function(format!("c/overwrite-{chunk}"), |b| {
                    b.iter_custom(|n| {
                        (0..n)
                            .map(|_| seek_write_read(&fs, over, chunk, &order[..256], &mut buf))
                            .sum()
                    })
                });
            }
            for chunk in [4096, 65536] {
                let order = shuffled(MIB / chunk);
                g.bench_function(format!("c/fresh-{chunk}"), |b| {
                    b.iter_custom(|n| {
                        let mut total = Duration::ZERO;
                        for _ in 0..n {
                            let fd =
                                fs.open("fresh.dat", libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC);
                            total += seek_write_read(&fs, fd, chunk, &order, &mut buf);
                            let name = CString::new("fresh.dat").unwrap();
                            // SAFETY: a live handle and descriptor.
                            unsafe {
                                ulfs_close(fs.0, fd);
                                ulfs_unlink(fs.0, name.as_ptr());
                            }
                        }
                        total
                    })
                });
            }
            g.bench_function("c/1k-calls-write-read-1mib", |b| {
                b.iter(|| {
                    let fd = fs.open("calls.dat", libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC);
                    // SAFETY: a live handle; `buf` holds 1 KiB at least.
                    unsafe {
                        for _ in 0..1024 {
                            ulfs_write(fs.0, fd, buf.as_ptr().cast(), 1024);
                        }
                        ulfs_lseek(fs.0, fd, 0, libc::SEEK_SET);
                        for _ in 0..1024 {
                            ulfs_read(fs.0, fd, buf.as_mut_ptr().cast(), 1024);
                        }
                        ulfs_close(fs.0, fd);
                    }
                })
            });
        }
        {
            let mut fs = Fs::mount(path.to_str().unwrap(), MountOptions::default()).unwrap();
            let fd = fs.open("meta.dat", libc::O_RDWR, 0).unwrap();
            g.bench_function("rust/fstat", |b| {
                b.iter(|| fs.fstat(black_box(fd)).map(|s| s.ino))
            });
            // The same work as the C call: the whole `struct stat` filled
            // (rust/fstat reads st_ino only, and the compiler drops the
            // rest): c/fstat less this is the boundary's cost.
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            g.bench_function("rust/fstat-libc", |b| {
                b.iter(|| {
                    let r = fs.fstat_libc(black_box(fd), &mut st);
                    black_box(&mut st);
                    r
                })
            });
            g.bench_function("rust/lseek", |b| {
                b.iter(|| fs.lseek(black_box(fd), 0, libc::SEEK_SET))
            });
            fs.close(fd).unwrap();
            fs.unmount().unwrap();
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

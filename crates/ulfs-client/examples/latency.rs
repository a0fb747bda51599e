//! Latency of one call through `ulfs serve` against the same call in
//! process and against the kernel on tmpfs (issue 12, requirement 7):
//! a null request (NOP; the kernel's getppid), `lseek(fd, 0, SEEK_CUR)`
//! (the client's own answer for an offset it keeps, and with kept offsets
//! off, a request), fstat, a 4 KiB pread of a cached file (leased,
//! straight from the client's view of the image, and with direct reads
//! off, a request each) and 4 KiB `read`s in a row (at a kept offset,
//! direct; at the server's, a request each). The server runs in this
//! process's threads (one worker),
//! talking to the client over the same memfd channel and socket a
//! separate process would use.
//!
//! Then the throughput of 1, 2 and 4 clients at once (threads, each with
//! its own connection): 4 KiB preads of one cached file, and stats of it
//! by name.
//!
//! `cargo run --release -p ulfs-client --example latency [ITERATIONS]`
//! (`ULFS_LATENCY_WORKERS=N`: the server's worker threads, default 1)

use std::hint::black_box;
use std::time::Instant;
use ulfs::fs::Volume;
use ulfs::{Fs, MkfsOptions, Mode, MountOptions};
use ulfs_client::Client;
use ulfs_server::{Config, Server};

/// Mean ns per call of `f`, best of five rounds (the machine's noise only
/// ever adds time).
fn measure(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .map_or(200_000, |s| s.parse().expect("a number of iterations"));
    let dir = tempfile::tempdir_in("/dev/shm").expect("a tmpfs directory");
    let img = dir.path().join("img");
    ulfs::mkfs(
        &img,
        &MkfsOptions {
            size: 64 << 20,
            mode: Mode::Journal,
            ..Default::default()
        },
    )
    .unwrap();
    let data = vec![5u8; 1 << 20];
    let mut buf = vec![0u8; 4096];

    // In process.
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    let fd = fs.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    fs.write(fd, &data).unwrap();
    let in_null = measure(n, || {
        black_box(fs.lseek(fd, 0, libc::SEEK_CUR).unwrap());
    });
    let in_seek = in_null;
    let in_read = measure(n, || {
        if fs.read(fd, &mut buf).unwrap() == 0 {
            fs.lseek(fd, 0, libc::SEEK_SET).unwrap();
        }
    });
    let in_fstat = measure(n, || {
        black_box(fs.fstat(fd).unwrap());
    });
    let in_pread = measure(n, || {
        black_box(fs.pread(fd, &mut buf, 8192).unwrap());
    });
    drop(fs);

    // The kernel, on tmpfs.
    let host = dir.path().join("host");
    std::fs::write(&host, &data).unwrap();
    let file = std::fs::File::open(&host).unwrap();
    let hfd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: getppid has no preconditions.
    let k_null = measure(n, || {
        black_box(unsafe { libc::getppid() });
    });
    // SAFETY: `hfd` is open.
    let k_seek = measure(n, || {
        black_box(unsafe { libc::lseek(hfd, 0, libc::SEEK_CUR) });
    });
    // SAFETY: `buf` has room for 4096 bytes; `hfd` is open.
    let k_read = measure(n, || unsafe {
        if libc::read(hfd, buf.as_mut_ptr().cast(), 4096) == 0 {
            libc::lseek(hfd, 0, libc::SEEK_SET);
        }
    });
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` has room for one struct stat; `hfd` is open.
    let k_fstat = measure(n, || {
        black_box(unsafe { libc::fstat(hfd, st.as_mut_ptr()) });
    });
    // SAFETY: `buf` has room for 4096 bytes; `hfd` is open.
    let k_pread = measure(n, || {
        black_box(unsafe { libc::pread(hfd, buf.as_mut_ptr().cast(), 4096, 8192) });
    });

    // Through the server.
    let socket = dir.path().join("sock");
    let vol = Volume::mount(&img, MountOptions::default()).unwrap();
    let workers: usize = std::env::var("ULFS_LATENCY_WORKERS").map_or(1, |w| w.parse().unwrap());
    let mut cfg = Config::new(&socket);
    cfg.workers = workers;
    let server = Server::start(vol, cfg).unwrap();
    let mut c = Client::connect(&socket).unwrap();
    let fd = c.open("/f", libc::O_RDONLY, 0).unwrap();
    let s_null = measure(n, || c.nop().unwrap());
    // The offset kept by the client (docs/SERVE.md "Offsets"), then the
    // server's.
    let reads = |c: &mut Client| {
        let seek = measure(n, || {
            black_box(c.lseek(fd, 0, libc::SEEK_CUR).unwrap());
        });
        let mut buf = vec![0u8; 4096];
        let read = measure(n, || {
            if c.read(fd, &mut buf).unwrap() == 0 {
                c.lseek(fd, 0, libc::SEEK_SET).unwrap();
            }
        });
        (seek, read)
    };
    let (s_seek, s_read) = reads(&mut c);
    c.set_kept_offsets(false).unwrap();
    let (s_seek_rt, s_read_rt) = reads(&mut c);
    let s_fstat = measure(n, || {
        black_box(c.fstat(fd).unwrap());
    });
    // Leased (docs/SERVE.md "Direct reads"), then every read a request.
    let s_pread = measure(n, || {
        black_box(c.pread(fd, &mut buf, 8192).unwrap());
    });
    c.set_direct_reads(false);
    let s_pread_rt = measure(n, || {
        black_box(c.pread(fd, &mut buf, 8192).unwrap());
    });
    let stats = c.channel().stats();
    drop(c);

    // Throughput with several clients at once, each in its own thread
    // with its own connection, reading 4 KiB of the same cached file or
    // stat'ing it by name: calls per second over all clients.
    let scaling: Vec<(usize, f64, f64)> = [1usize, 2, 4]
        .iter()
        .map(|&clients| {
            let per_client = n / 4;
            let run = |by_name: bool| {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..clients {
                        let socket = &socket;
                        s.spawn(move || {
                            let mut c = Client::connect(socket).unwrap();
                            let fd = c.open("/f", libc::O_RDONLY, 0).unwrap();
                            let mut buf = vec![0u8; 4096];
                            for i in 0..per_client {
                                if by_name {
                                    black_box(c.stat("/f").unwrap());
                                } else {
                                    let off = u64::from(i % 256) * 4096;
                                    black_box(c.pread(fd, &mut buf, off).unwrap());
                                }
                            }
                        });
                    }
                });
                (clients as u32 * per_client) as f64 / t.elapsed().as_secs_f64()
            };
            (clients, run(false), run(true))
        })
        .collect();
    server.stopper().stop();
    server.join().unwrap();

    println!("ns per call, best of 5 rounds of {n}");
    println!(
        "{:<12} {:>12} {:>12} {:>12}",
        "call", "in process", "kernel tmpfs", "ulfs serve"
    );
    for (name, a, b, s) in [
        ("null", in_null, k_null, s_null),
        ("lseek CUR", in_seek, k_seek, s_seek),
        ("  requested", in_seek, k_seek, s_seek_rt),
        ("read 4KiB", in_read, k_read, s_read),
        ("  requested", in_read, k_read, s_read_rt),
        ("fstat", in_fstat, k_fstat, s_fstat),
        ("pread 4KiB", in_pread, k_pread, s_pread),
        ("  requested", in_pread, k_pread, s_pread_rt),
    ] {
        println!("{name:<12} {a:>12.1} {b:>12.1} {s:>12.1}");
    }
    println!(
        "client slow paths: {} kicks, {} futex sleeps ({} timed out)",
        stats.kicks, stats.sleeps, stats.timeouts
    );
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "\nthroughput, all clients together ({cores} cores; the server has {workers} worker(s))"
    );
    println!("{:<8} {:>16} {:>16}", "clients", "pread 4KiB /s", "stat /s");
    for (clients, reads, stats) in scaling {
        println!("{clients:<8} {reads:>16.0} {stats:>16.0}");
    }
}

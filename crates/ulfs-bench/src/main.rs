//! `ulfs-bench`: measures ulfs in process against the same calls through
//! the kernel, in the same run, and reports ratios as the result
//! (BENCHMARKS.md). In memory (`/dev/shm`): the ULFS paper's lseek, fstat,
//! read-after-write and file-count experiments (figs 11, 12, 6, 7), for
//! ulfs in both durability modes against host tmpfs (and memcpy for
//! data). On the host disk: create + 4 KiB write + fsync + close per file,
//! the file-systems-as-processes experiment, for ulfs in both modes
//! against host ext4.
//!
//! This file owns the plan (which cells exist) and the order of the run;
//! the modules own how a repetition is timed (`workloads`), how many are
//! taken (`measure`), the peers (`peers`) and the output (`report`).

mod args;
mod measure;
mod peers;
mod report;
mod rng;
mod workloads;

use measure::{BatchRep, Budget, Rep, interleaved, interleaved_batches};
use peers::{HostPeer, Peer, UlfsPeer};
use report::{EXT4, FSYNC, JOURNAL, MEMCPY, NONE, Row, TMPFS};
use std::error::Error;
use std::path::Path;
use std::process::ExitCode;
use ulfs::Mode;
use workloads::{FILE_BYTES, FSYNC_BYTES, RAW_BYTES, RawPlan};

/// Seed of the chunk order; fixed so runs are comparable with each other.
const SEED: u64 = 0x756c_6673_6265_6e63;

/// The cells of one run. `--quick` keeps every workload and chunk size (so
/// the smoke test sees the whole shape of the output) but drops the large
/// call and file counts, which are what make a full run take time.
struct Plan {
    quick: bool,
    counts: &'static [u64],
    chunks: &'static [usize],
    /// Files per repetition of the file-count workload.
    files: &'static [usize],
    /// Size of the in-memory images: room for the largest file count.
    mem_image: u64,
    budget: Budget,
    fsync_files: usize,
    fsync_budget: Budget,
}

impl Plan {
    fn new(opts: &args::Options) -> Self {
        const CHUNKS: &[usize] = &[64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20];
        let fsync_files = opts.fsync_files();
        let fsync_budget = Budget::fsync(opts.quick);
        if opts.quick {
            Plan {
                quick: true,
                counts: &[100, 10_000],
                chunks: CHUNKS,
                files: &[1, 10],
                mem_image: 64 << 20,
                budget: Budget::quick(),
                fsync_files,
                fsync_budget,
            }
        } else {
            Plan {
                quick: false,
                counts: &[100, 10_000, 1_000_000],
                chunks: CHUNKS,
                files: &[1, 10, 100],
                mem_image: 256 << 20,
                budget: Budget::full(),
                fsync_files,
                fsync_budget,
            }
        }
    }

    /// Disk images: 64 MiB, or more for a large `--fsync-files`, so one
    /// repetition's files (a data block, an inode, directory growth)
    /// fit with room to spare.
    fn disk_image(&self) -> u64 {
        (64u64 << 20).max((self.fsync_files as u64 * (32 << 10)).next_multiple_of(1 << 20))
    }
}

fn main() -> ExitCode {
    let opts = match args::parse(std::env::args_os().skip(1)) {
        Ok(args::Parsed::Run(o)) => o,
        Ok(args::Parsed::Help) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ulfs-bench: {e}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ulfs-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &args::Options) -> Result<(), Box<dyn Error>> {
    if cfg!(debug_assertions) {
        eprintln!("ulfs-bench: warning: built without --release; numbers are not representative");
    }
    let plan = Plan::new(opts);
    let mem = peers::memory_dir();
    let mut rows = Vec::new();
    memory_workloads(&plan, &mem, &mut rows)?;
    if plan.fsync_files > 0 {
        fsync_workload(&plan, &peers::disk_dir(), &mut rows)?;
    }

    println!();
    print!("{}", report::table(&rows));
    println!(
        "\nns/op: median over repetitions; read-after-write op = one chunk's pwrite + pread;\n\
         file-count op = one 1 MiB file written, closed, reopened, read, closed.\n\
         a/b = time of a / time of b: tmpfs/journal > 1 means ulfs (journal) is faster,\n\
         none/journal < 1 means the journal costs that much over in-place updates."
    );
    if plan.fsync_files > 0 {
        println!();
        print!("{}", report::fsync_table(&rows));
        println!(
            "\nus/file: median over repetitions of create + {} KiB pwrite + fsync + close.\n\
             paper ext4: file systems as processes (HotStorage'19), their machine, for context only.",
            FSYNC_BYTES >> 10
        );
    }
    report::write_csv(&opts.out, &rows)?;
    println!("CSV: {}", opts.out.display());
    Ok(())
}

/// lseek, fstat, read-after-write and file-count on `/dev/shm`.
fn memory_workloads(plan: &Plan, mem: &Path, rows: &mut Vec<Row>) -> Result<(), Box<dyn Error>> {
    let mut journal = UlfsPeer::new(mem, Mode::Journal, plan.mem_image)?;
    let mut none = UlfsPeer::new(mem, Mode::None, plan.mem_image)?;
    let mut host = HostPeer::new(mem)?;
    println!(
        "ulfs-journal image: {} ({}, {} MiB)",
        journal.image().display(),
        peers::fs_kind(mem),
        plan.mem_image >> 20
    );
    println!(
        "ulfs-none image: {} ({}, {} MiB)",
        none.image().display(),
        peers::fs_kind(mem),
        plan.mem_image >> 20
    );
    println!(
        "host-tmpfs dir: {} ({})",
        host.dir().display(),
        peers::fs_kind(host.dir())
    );
    println!(
        "mode: {}; cpus: {}; read-after-write total {} bytes per repetition; file-count {} bytes per file",
        if plan.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        RAW_BYTES,
        FILE_BYTES
    );
    const PEERS: [&str; 3] = [JOURNAL, NONE, TMPFS];

    // lseek and fstat each get their own file, opened once: the figures
    // time the call on an open descriptor, not open itself.
    for (workload, name) in [("lseek", "lseek-empty"), ("fstat", "fstat-one")] {
        let fj = journal.create(name)?;
        let fn_ = none.create(name)?;
        let fh = host.create(name)?;
        for &n in plan.counts {
            eprintln!("measuring {workload} N={n}");
            let samples = {
                let (j, u, h) = (&mut journal, &mut none, &mut host);
                let mut reps: [Rep<'_>; 3] = if workload == "lseek" {
                    [
                        Box::new(move || workloads::lseek(j, fj, n)),
                        Box::new(move || workloads::lseek(u, fn_, n)),
                        Box::new(move || workloads::lseek(h, fh, n)),
                    ]
                } else {
                    [
                        Box::new(move || workloads::fstat(j, fj, n)),
                        Box::new(move || workloads::fstat(u, fn_, n)),
                        Box::new(move || workloads::fstat(h, fh, n)),
                    ]
                };
                interleaved(&plan.budget, n, &mut reps)?
            };
            push_rows(rows, workload, n, &PEERS, samples);
        }
        journal.close(fj)?;
        none.close(fn_)?;
        host.close(fh)?;
    }

    for &chunk in plan.chunks {
        eprintln!("measuring read-after-write chunk={chunk}");
        let raw = RawPlan::new(chunk, SEED);
        let [mut dst_j, mut dst_n, mut dst_h, mut file_m, mut dst_m] =
            std::array::from_fn(|_| vec![0u8; RAW_BYTES]);
        let samples = {
            let (j, u, h, r) = (&mut journal, &mut none, &mut host, &raw);
            let mut reps: [Rep<'_>; 4] = [
                Box::new(|| workloads::read_after_write(j, r, &mut dst_j)),
                Box::new(|| workloads::read_after_write(u, r, &mut dst_n)),
                Box::new(|| workloads::read_after_write(h, r, &mut dst_h)),
                Box::new(|| Ok(workloads::memcpy(r, &mut file_m, &mut dst_m))),
            ];
            interleaved(&plan.budget, raw.ops(), &mut reps)?
        };
        push_rows(
            rows,
            "read-after-write",
            chunk as u64,
            &[JOURNAL, NONE, TMPFS, MEMCPY],
            samples,
        );
    }

    let mut src = vec![0u8; FILE_BYTES];
    rng::SplitMix64::new(SEED).fill(&mut src);
    for &n in plan.files {
        eprintln!("measuring file-count files={n}");
        let names = workloads::names("fc", n);
        let [mut dst_j, mut dst_n, mut dst_h] = std::array::from_fn(|_| vec![0u8; FILE_BYTES]);
        let samples = {
            let (j, u, h, names, src) = (&mut journal, &mut none, &mut host, &names, &src);
            let mut reps: [Rep<'_>; 3] = [
                Box::new(|| workloads::file_count(j, names, src, &mut dst_j)),
                Box::new(|| workloads::file_count(u, names, src, &mut dst_n)),
                Box::new(|| workloads::file_count(h, names, src, &mut dst_h)),
            ];
            interleaved(&plan.budget, n as u64, &mut reps)?
        };
        push_rows(rows, "file-count", n as u64, &PEERS, samples);
    }

    journal.finish()?;
    none.finish()?;
    Ok(())
}

/// Create + 4 KiB write + fsync + close of `plan.fsync_files` files, on
/// the host disk: ulfs in both modes (each fsync an msync of the image
/// mapping) and the same calls through the kernel.
fn fsync_workload(plan: &Plan, disk: &Path, rows: &mut Vec<Row>) -> Result<(), Box<dyn Error>> {
    let size = plan.disk_image();
    let mut journal = UlfsPeer::new(disk, Mode::Journal, size)?;
    let mut none = UlfsPeer::new(disk, Mode::None, size)?;
    let mut host = HostPeer::new(disk)?;
    println!(
        "fsync: ulfs-journal image {} and ulfs-none image {} ({} MiB each); host-ext4 dir {}; \
         all on {}",
        journal.image().display(),
        none.image().display(),
        size >> 20,
        host.dir().display(),
        peers::fs_kind(disk)
    );
    let n = plan.fsync_files;
    eprintln!(
        "measuring fsync files={n} ({} repetitions per peer after one warm-up, \
         taking turns every {} files)",
        plan.fsync_budget.min_reps,
        FSYNC_BATCH.min(n)
    );
    let names = workloads::names("fs", n);
    let batch = FSYNC_BATCH.min(n);
    let batches: Vec<&[String]> = names.chunks(batch).collect();
    let mut src = vec![0u8; FSYNC_BYTES];
    rng::SplitMix64::new(SEED).fill(&mut src);
    let samples = {
        let (j, u, h, names, batches, src) =
            (&mut journal, &mut none, &mut host, &names, &batches, &src);
        let mut reps: [BatchRep<'_>; 3] = [
            Box::new(|b| fsync_step(j, names, batches, b, src)),
            Box::new(|b| fsync_step(u, names, batches, b, src)),
            Box::new(|b| fsync_step(h, names, batches, b, src)),
        ];
        interleaved_batches(&plan.fsync_budget, n as u64, batches.len(), &mut reps)?
    };
    push_rows(rows, FSYNC, n as u64, &[JOURNAL, NONE, EXT4], samples);
    journal.finish()?;
    none.finish()?;
    Ok(())
}

/// Files per batch of the fsync workload: the peers take turns every this
/// many files (see `measure::interleaved_batches`).
const FSYNC_BATCH: usize = 50;

fn fsync_step<P: Peer>(
    p: &mut P,
    names: &[String],
    batches: &[&[String]],
    batch: Option<usize>,
    src: &[u8],
) -> std::io::Result<std::time::Duration> {
    match batch {
        Some(b) => workloads::fsync_files(p, batches[b], src),
        None => workloads::fsync_cleanup(p, names).map(|()| std::time::Duration::ZERO),
    }
}

fn push_rows(
    rows: &mut Vec<Row>,
    workload: &'static str,
    param: u64,
    peers: &[&'static str],
    samples: Vec<measure::Sample>,
) {
    for (&peer, sample) in peers.iter().zip(samples) {
        rows.push(Row {
            workload,
            param,
            peer,
            sample,
        });
    }
}

//! `ulfs-bench`: the first benchmark. It measures ulfs in process against
//! the same calls on host tmpfs (and memcpy for data), in the same run, for
//! the ULFS paper's lseek, fstat and read-after-write experiments
//! (BENCHMARKS.md figs 11, 12, 6), and reports ratios as the result.
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

use measure::{Budget, Rep, interleaved};
use peers::{HostPeer, Peer, UlfsPeer};
use report::{MEMCPY, Row, TMPFS, ULFS};
use std::error::Error;
use std::process::ExitCode;
use workloads::{RAW_BYTES, RawPlan};

/// Seed of the chunk order; fixed so runs are comparable with each other.
const SEED: u64 = 0x756c_6673_6265_6e63;

/// The cells of one run. `--quick` keeps every workload and chunk size (so
/// the smoke test sees the whole shape of the output) but drops the large
/// call counts, which are what make a full run take time.
struct Plan {
    counts: &'static [u64],
    chunks: &'static [usize],
    budget: Budget,
}

impl Plan {
    fn new(quick: bool) -> Self {
        const CHUNKS: &[usize] = &[64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20];
        if quick {
            Plan {
                counts: &[100, 10_000],
                chunks: CHUNKS,
                budget: Budget::quick(),
            }
        } else {
            Plan {
                counts: &[100, 10_000, 1_000_000],
                chunks: CHUNKS,
                budget: Budget::full(),
            }
        }
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
    let plan = Plan::new(opts.quick);
    let mem = peers::memory_dir();
    let mut ulfs = UlfsPeer::new(&mem)?;
    let mut host = HostPeer::new(&mem)?;
    println!(
        "ulfs-api image: {} ({})",
        ulfs.image().display(),
        peers::fs_kind(&mem)
    );
    println!(
        "host-tmpfs dir: {} ({})",
        host.dir().display(),
        peers::fs_kind(host.dir())
    );
    println!(
        "mode: {}; cpus: {}; read-after-write total {} bytes per repetition\n",
        if opts.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        RAW_BYTES
    );

    let mut rows = Vec::new();

    // lseek and fstat each get their own file, opened once: the figures
    // time the call on an open descriptor, not open itself.
    for (workload, name) in [("lseek", "lseek-empty"), ("fstat", "fstat-one")] {
        let fu = ulfs.create(name)?;
        let fh = host.create(name)?;
        for &n in plan.counts {
            eprintln!("measuring {workload} N={n}");
            let samples = {
                let (u, h) = (&mut ulfs, &mut host);
                let mut reps: [Rep<'_>; 2] = if workload == "lseek" {
                    [
                        Box::new(move || workloads::lseek(u, fu, n)),
                        Box::new(move || workloads::lseek(h, fh, n)),
                    ]
                } else {
                    [
                        Box::new(move || workloads::fstat(u, fu, n)),
                        Box::new(move || workloads::fstat(h, fh, n)),
                    ]
                };
                interleaved(&plan.budget, n, &mut reps)?
            };
            push_rows(&mut rows, workload, n, &[ULFS, TMPFS], samples);
        }
        ulfs.close(fu)?;
        host.close(fh)?;
    }

    for &chunk in plan.chunks {
        eprintln!("measuring read-after-write chunk={chunk}");
        let raw = RawPlan::new(chunk, SEED);
        let (mut dst_u, mut dst_h) = (vec![0u8; RAW_BYTES], vec![0u8; RAW_BYTES]);
        let (mut file_m, mut dst_m) = (vec![0u8; RAW_BYTES], vec![0u8; RAW_BYTES]);
        let samples = {
            let (u, h, r) = (&mut ulfs, &mut host, &raw);
            let mut reps: [Rep<'_>; 3] = [
                Box::new(|| workloads::read_after_write(u, r, &mut dst_u)),
                Box::new(|| workloads::read_after_write(h, r, &mut dst_h)),
                Box::new(|| Ok(workloads::memcpy(r, &mut file_m, &mut dst_m))),
            ];
            interleaved(&plan.budget, raw.ops(), &mut reps)?
        };
        push_rows(
            &mut rows,
            "read-after-write",
            chunk as u64,
            &[ULFS, TMPFS, MEMCPY],
            samples,
        );
    }

    ulfs.finish()?;
    print!("{}", report::table(&rows));
    println!(
        "\nns/op: median over repetitions; read-after-write op = one chunk's pwrite + pread.\n\
         tmpfs/ulfs > 1 means ulfs is faster."
    );
    report::write_csv(&opts.out, &rows)?;
    println!("CSV: {}", opts.out.display());
    Ok(())
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

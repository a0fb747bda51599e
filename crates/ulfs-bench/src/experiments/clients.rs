//! `ulfs bench clients`: PostMark run by 1, 2 and 4 programs at once, each
//! in its own directory of one file system (issue 12, requirement 7): the
//! host's tmpfs and ext4, one `ulfs mount` (FUSE) and one `ulfs serve`
//! (the programs under `ulfs run --server`). The number is throughput:
//! every program's transactions together, per second of wall time from
//! the first start to the last end, so it grows with the programs as far
//! as the file system lets them run side by side (and the machine has
//! cores for them: the report says how many).
//!
//! A second figure runs one PostMark while busy loops (threads that never
//! sleep, one per core) keep the CPUs wanted: what a file system's calls
//! cost on a loaded machine, where a server that spins for its clients
//! loses its CPU for whole time slices (docs/SERVE.md "Spinning on a busy
//! machine").
//!
//! Each cell starts from nothing: a new image (its server or mount started
//! for the cell and stopped after, with fsck, outside the time) or an
//! emptied host directory. In-process ulfs (`ulfs run` without a server)
//! has no row: its processes take turns on the image, one at a time.

use super::fuse::remove_tree;
use super::programs::which;
use super::{Ctx, Experiment, image_for};
use crate::measure::rotation;
use crate::results::Unit;
use crate::systems::{Medium, Place, System};
use crate::worker::{interrupted, run_program};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const SYSTEMS: [System; 4] = [
    System::HostTmpfs,
    System::HostExt4,
    System::UlfsFuse,
    System::UlfsServer,
];

const FIGURE: &str = "clients-postmark";
const FIGURE_BUSY: &str = "clients-postmark-busy";

pub const CLIENTS: Experiment = Experiment {
    name: "clients",
    about: "PostMark by 1, 2 and 4 programs at once (each its own directory) on host tmpfs, ext4, \
            `ulfs mount` and `ulfs serve` (`ulfs run --server`): transactions per second, all together; \
            and one PostMark beside 0 and one-per-core busy loops",
    figures: &[FIGURE, FIGURE_BUSY],
    systems: &SYSTEMS,
    run: clients,
};

/// One PostMark's work.
struct Load {
    files: u64,
    transactions: u64,
}

fn clients(ctx: &mut Ctx) {
    let params: &[u64] = &[1, 2, 4];
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let busy_params: &[u64] = &[0, cores];
    let load = if ctx.quick {
        Load {
            files: 300,
            transactions: 2_000,
        }
    } else {
        Load {
            files: 1_000,
            transactions: 20_000,
        }
    };
    let rounds = ctx.slow_rounds();
    let cells = ((params.len() + busy_params.len()) * SYSTEMS.len() * rounds.total()) as u64;
    ctx.bar.inc_length(cells);
    ctx.bar.set_message("clients");
    let Some(program) = which("postmark") else {
        for sys in SYSTEMS {
            ctx.skip(
                &[FIGURE, FIGURE_BUSY],
                sys,
                "missing: postmark (Debian: apt-get install postmark)",
            );
        }
        ctx.bar.inc(cells);
        return;
    };
    // PostMark's files are 500 bytes to 9.77 KB, for every program.
    let place = ctx.place(
        "clients",
        Medium::Memory,
        image_for(load.files * largest_clients(params), 16 << 10),
    );
    let mut dead = [false; SYSTEMS.len()];
    // (figure, programs at once, busy loops beside them)
    let sweeps = params
        .iter()
        .map(|&n| (FIGURE, n, 0, n))
        .chain(busy_params.iter().map(|&b| (FIGURE_BUSY, 1, b, b)));
    for (figure, n, busy, param) in sweeps {
        let mut rates = vec![Vec::new(); SYSTEMS.len()];
        for round in 0..rounds.total() {
            for i in rotation(SYSTEMS.len(), round) {
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                if dead[i] {
                    continue;
                }
                let sys = SYSTEMS[i];
                let _loops = BusyLoops::start(busy);
                match cell(&place, sys, &program, n, &load) {
                    Ok(r) if round >= rounds.warmup => rates[i].push(r),
                    Ok(_) => {}
                    Err(e) => {
                        let why = format!("{n} programs, {busy} busy loops: {e}");
                        ctx.note(&format!("clients: {}: {why}", sys.name()));
                        ctx.failed(&[FIGURE, FIGURE_BUSY], sys, &why);
                        dead[i] = true;
                        rates[i].clear();
                    }
                }
            }
        }
        for (i, sys) in SYSTEMS.into_iter().enumerate() {
            ctx.record(figure, sys, param, Unit::OpsPerS, &rates[i]);
        }
    }
}

/// Threads that never sleep, until dropped: other programs wanting the
/// CPUs. They run in the bench's worker, not in the programs measured.
struct BusyLoops {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start(n: u64) -> BusyLoops {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyLoops { stop, threads }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn largest_clients(params: &[u64]) -> u64 {
    params.iter().copied().max().unwrap_or(1)
}

/// `n` PostMarks at once on `system`, from nothing; their transactions per
/// second together.
fn cell(
    place: &Place,
    system: System,
    postmark: &Path,
    n: u64,
    load: &Load,
) -> Result<f64, String> {
    let configs = place.memory.clone()?;
    let config = |i: u64, dir: &Path| -> Result<PathBuf, String> {
        let path = configs.join(format!("{}-{i}.pmrc", system.name()));
        let text = format!(
            "set location {}\nset number {}\nset transactions {}\nrun\nquit\n",
            dir.display(),
            load.files,
            load.transactions
        );
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    };
    let secs = match system {
        System::UlfsServer => {
            let served = place.served(system)?;
            let run = |program: &Path| place.through_server(&served.socket, program);
            let mut mkdir = run(Path::new("mkdir"))?;
            mkdir.args((0..n).map(|i| format!("/ulfs/c{i}")));
            run_program(mkdir, "mkdir")?;
            let mut cmds = Vec::new();
            for i in 0..n {
                let mut c = run(postmark)?;
                c.arg(config(i, &Path::new("/ulfs").join(format!("c{i}")))?);
                cmds.push(c);
            }
            let took = all_at_once(cmds);
            let stopped = served.finish();
            let t = took?;
            stopped?;
            t
        }
        System::UlfsFuse => {
            let (worker, dir) = place.mounted(system)?;
            let took = host_like(&dir, postmark, n, &config);
            let unmounted = worker.finish();
            let t = took?;
            unmounted?;
            t
        }
        _ => {
            let dir = place.home(system)?.join(system.name());
            remove_tree(&dir)?;
            let t = host_like(&dir, postmark, n, &config)?;
            remove_tree(&dir)?;
            t
        }
    };
    Ok((n * load.transactions) as f64 / secs)
}

/// `n` PostMarks in new directories under `dir` (a host directory, or a
/// new mount's).
fn host_like(
    dir: &Path,
    postmark: &Path,
    n: u64,
    config: &dyn Fn(u64, &Path) -> Result<PathBuf, String>,
) -> Result<f64, String> {
    let mut cmds = Vec::new();
    for i in 0..n {
        let d = dir.join(format!("c{i}"));
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        let mut c = Command::new(postmark);
        c.arg(config(i, &d)?);
        cmds.push(c);
    }
    all_at_once(cmds)
}

/// Runs every command at once; the wall time until the last ends, in
/// seconds, or the first failure.
fn all_at_once(cmds: Vec<Command>) -> Result<f64, String> {
    let start = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let running: Vec<_> = cmds
            .into_iter()
            .map(|c| s.spawn(move || run_program(c, "postmark")))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a runner panicked".into())))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok(secs)
}

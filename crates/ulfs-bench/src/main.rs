//! `ulfs-bench` (run as `ulfs bench`): the ULFS paper's experiments and its
//! peers', with every system of BENCHMARKS.md measured side by side in one
//! run, written as `results.csv`, one PNG per figure and `REPORT.md`.
//!
//! This file owns the command line and the order of a run; the
//! experiments (`experiments/`) own what is measured, the workers
//! (`worker.rs`, `c/workload.c`) how, `systems.rs` on what, and
//! `results.rs`, `plot.rs` and `report.rs` the output.

mod catalog;
mod cgroup;
mod experiments;
mod fuse_worker;
mod host;
mod measure;
mod plot;
mod report;
mod results;
mod server_worker;
mod systems;
mod worker;

// The ulfs C API the ulfs build of the workload calls: linked in from
// this crate, not a shared library.
use ulfs_c as _;

use clap::Parser;
use experiments::{Ctx, EXPERIMENTS, Experiment};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ulfs bench",
    bin_name = "ulfs bench",
    about = "Runs the ULFS paper's experiments and its peers' against host file systems, \
             side by side; writes results.csv, a PNG per figure and REPORT.md",
    after_help = "Experiments (--list says more): fig6 fig7 fig8 fig9 fig10 fig11 fig12 fig13 \
                  fig14 postmark fsync-loop open create mount fuse server clients. None named: all of them. \
                  ULFS_BENCH_DISK=DIR names the ext4 directory for the disk systems \
                  (`loop`: one made on a loop device for the run). docs/BENCHMARKS.md \
                  says what each experiment measures and how."
)]
struct Args {
    /// Small parameters and few rounds: about a minute for everything.
    #[arg(long)]
    quick: bool,
    /// Directory for results.csv, skips.csv, the PNGs and REPORT.md.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// Names the experiments and what each measures, then exits.
    #[arg(long)]
    list: bool,
    /// Draws the plots and the report again from DIR/results.csv (and
    /// skips.csv) of an earlier run, measuring nothing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["quick", "list", "experiments"])]
    replot: Option<PathBuf>,
    /// Experiments to run (default: all).
    #[arg(value_name = "EXPERIMENT")]
    experiments: Vec<String>,
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A worker (started by a run, maybe under `ulfs run`) goes straight to
    // the C loop: nothing else of this program runs in it.
    if argv.get(1).is_some_and(|a| a == worker::WORKER_ARG) {
        let (Some(kind), Some(place)) = (argv.get(2), argv.get(3)) else {
            eprintln!(
                "usage: ulfs-bench {} posix|ulfs|fuse|server DIR|IMAGE (started by ulfs bench)",
                worker::WORKER_ARG
            );
            return ExitCode::from(2);
        };
        let status = worker::serve(&kind.to_string_lossy(), Path::new(place));
        return ExitCode::from(u8::try_from(status).unwrap_or(1));
    }
    // An image made inside a cgroup (fig. 8): `ulfs-bench mkfs IMAGE BYTES
    // journal|none`, so that the `ulfs` binary is not needed for it.
    if argv.get(1).is_some_and(|a| a == worker::MKFS_ARG) {
        return hidden_mkfs(&argv[2..]);
    }
    let args = Args::parse_from(argv);
    if args.list {
        list();
        return ExitCode::SUCCESS;
    }
    let result = match &args.replot {
        Some(dir) => replot(dir),
        None => run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ulfs bench: {e}");
            // As a shell reports a program stopped by SIGINT.
            if worker::interrupted() {
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn hidden_mkfs(args: &[std::ffi::OsString]) -> ExitCode {
    let [image, bytes, mode] = args else {
        eprintln!(
            "usage: ulfs-bench {} IMAGE BYTES journal|none (started by ulfs bench)",
            worker::MKFS_ARG
        );
        return ExitCode::from(2);
    };
    let (Some(size), Some(mode)) = (
        bytes.to_str().and_then(|b| b.parse().ok()),
        match mode.to_str() {
            Some("journal") => Some(ulfs::Mode::Journal),
            Some("none") => Some(ulfs::Mode::None),
            _ => None,
        },
    ) else {
        eprintln!(
            "usage: ulfs-bench {} IMAGE BYTES journal|none (started by ulfs bench)",
            worker::MKFS_ARG
        );
        return ExitCode::from(2);
    };
    let opts = ulfs::MkfsOptions {
        size,
        mode,
        // The run removed any old image first: never overwrite here.
        force: false,
        ..ulfs::MkfsOptions::default()
    };
    match ulfs::mkfs(image, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn list() {
    for e in EXPERIMENTS {
        println!("{:<11} {}", e.name, e.about);
        println!("{:<11} figures: {}", "", e.figures.join(" "));
        let systems: Vec<&str> = e.systems.iter().map(|s| s.name()).collect();
        println!("{:<11} systems: {}", "", systems.join(" "));
    }
}

fn select(names: &[String]) -> Result<Vec<&'static Experiment>, String> {
    if names.is_empty() {
        return Ok(EXPERIMENTS.iter().collect());
    }
    let mut chosen = Vec::new();
    for n in names {
        let e = EXPERIMENTS.iter().find(|e| e.name == n).ok_or_else(|| {
            let all: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
            format!("no experiment {n:?}; there are: {}", all.join(" "))
        })?;
        if !chosen.iter().any(|c: &&Experiment| c.name == e.name) {
            chosen.push(e);
        }
    }
    Ok(chosen)
}

fn run(args: &Args) -> Result<(), String> {
    let chosen = select(&args.experiments)?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    // Checked before measuring: a run must not end by refusing to write.
    let earlier = earlier_results(&args.out, args.quick)?;
    // Ctrl-C (or SIGTERM, SIGHUP) stops the workers and the run, and
    // lets it remove its images (in memory, on tmpfs, they hold RAM).
    ctrlc::set_handler(worker::interrupt).map_err(|e| format!("a signal handler: {e}"))?;
    for gone in host::remove_leftovers()
        .into_iter()
        .chain(cgroup::remove_leftovers())
    {
        eprintln!("removed what a killed run left: {gone}");
    }
    if cfg!(debug_assertions) {
        eprintln!("ulfs bench: warning: a debug build; its numbers are not representative");
    }
    let tools = systems::Tools::find()?;
    let memory = host::memory_dir();
    let disk = host::disk_dir();
    let machine = host::machine();
    eprintln!("machine: {machine}");
    match &memory {
        Ok(d) => eprintln!(
            "memory:  {} ({})",
            d.path().display(),
            host::fs_name(d.path())
        ),
        Err(e) => eprintln!("memory:  none: {e}"),
    }
    match &disk {
        Ok(d) => eprintln!("disk:    {} ({})", d.path().display(), d.note),
        Err(e) => eprintln!("disk:    none: {e}"),
    }
    let disk_note = match &disk {
        Ok(d) => d.note.clone(),
        Err(e) => format!("no disk peer: {e}"),
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} cells, {elapsed} elapsed")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut ctx = Ctx {
        quick: args.quick,
        tools,
        memory,
        disk,
        rows: Vec::new(),
        skips: Vec::new(),
        failures: Vec::new(),
        bar,
    };
    let started = std::time::Instant::now();
    for e in &chosen {
        let t = std::time::Instant::now();
        (e.run)(&mut ctx);
        if worker::interrupted() {
            ctx.bar.finish_and_clear();
            // Dropping the context removes the run's directories, images
            // and loop mount.
            drop(ctx);
            return Err(format!("interrupted during {}: nothing written", e.name));
        }
        ctx.note(&format!(
            "{:<11} done in {:.1} s",
            e.name,
            t.elapsed().as_secs_f64()
        ));
    }
    ctx.bar.finish_and_clear();
    eprintln!(
        "measured in {:.0} s: {} rows, {} skips",
        started.elapsed().as_secs_f64(),
        ctx.rows.len(),
        ctx.skips.len()
    );
    let command = std::iter::once("ulfs bench".to_string())
        .chain(
            std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned()),
        )
        .collect::<Vec<_>>()
        .join(" ");
    let caption = format!("{machine}; {disk_note}; {}", host::today());
    let ran: Vec<&str> = chosen
        .iter()
        .flat_map(|e| e.figures.iter().copied())
        .collect();
    let (mut rows, mut skips) = earlier;
    rows.retain(|r| !ran.contains(&r.experiment.as_str()));
    skips.retain(|k| !ran.contains(&k.experiment.as_str()));
    let mut command = command;
    if !rows.is_empty() {
        let kept: std::collections::BTreeSet<&str> =
            rows.iter().map(|r| r.experiment.as_str()).collect();
        eprintln!(
            "kept {} figures of an earlier run in {}",
            kept.len(),
            args.out.display()
        );
        // The report says where every figure came from.
        let before = std::fs::read_to_string(args.out.join("run.txt")).unwrap_or_default();
        if let Some(earlier) = before.lines().nth(2).filter(|c| !c.is_empty()) {
            command = format!("{earlier}; then {command}");
        }
    }
    rows.extend(ctx.rows.iter().cloned());
    skips.extend(ctx.skips.iter().cloned());
    write_outputs(
        &args.out,
        &rows,
        &skips,
        &|f| ran.contains(&f),
        &caption,
        args.quick,
        &command,
    )?;
    for s in &ctx.skips {
        eprintln!("skipped: {} {}: {}", s.experiment, s.system, s.reason);
    }
    for fig in catalog::FIGURES {
        if ctx.rows.iter().any(|r| r.experiment == fig.name) {
            println!("{}: {}", fig.name, report::sentence(fig, &ctx.rows));
        }
    }
    if ctx.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the results are written, but something failed:\n  {}",
            ctx.failures.join("\n  ")
        ))
    }
}

/// `results.csv`, `skips.csv`, a PNG per figure with rows, `REPORT.md`.
/// `draw` names the figures whose plots are (re)drawn; the others keep
/// the PNG an earlier run drew, if there is one.
fn write_outputs(
    out: &Path,
    rows: &[results::Row],
    skips: &[results::Skip],
    draw: &dyn Fn(&str) -> bool,
    caption: &str,
    quick: bool,
    command: &str,
) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let csv = out.join("results.csv");
    results::write_csv(&csv, rows).map_err(|e| io(&csv, e))?;
    let skips_csv = out.join("skips.csv");
    results::write_skips(&skips_csv, skips).map_err(|e| io(&skips_csv, e))?;
    let mut pngs = Vec::new();
    // A plot that cannot be drawn costs its PNG, not the report.
    let mut unplotted = Vec::new();
    for fig in catalog::FIGURES {
        let mine: Vec<&results::Row> = rows.iter().filter(|r| r.experiment == fig.name).collect();
        let png = out.join(format!("{}.png", fig.name));
        if mine.is_empty() {
            // Measured again and nothing to show: an old plot would lie.
            if draw(fig.name) {
                let _ = std::fs::remove_file(&png);
            }
            continue;
        }
        if draw(fig.name)
            && let Err(e) = plot::draw(fig, &mine, caption, &png)
        {
            unplotted.push(format!("{}: {e}", png.display()));
            let _ = std::fs::remove_file(&png);
        }
        if png.is_file() {
            pngs.push(fig.name);
        }
    }
    let report_path = out.join("REPORT.md");
    let ctx = report::Context {
        machine: caption,
        quick,
        command,
        when: &host::today(),
    };
    report::write(&report_path, &ctx, rows, skips, &pngs).map_err(|e| io(&report_path, e))?;
    // Last: what --replot needs to caption and report as the run did, and
    // what tells a later run that this directory is a run's.
    let about = out.join("run.txt");
    let mode = if quick { "quick" } else { "full" };
    results::replace_file(&about, &format!("{caption}\n{mode}\n{command}\n"))
        .map_err(|e| io(&about, e))?;
    println!("results: {}", csv.display());
    println!("skips:   {}", skips_csv.display());
    println!("plots:   {} PNGs in {}", pngs.len(), out.display());
    println!("report:  {}", report_path.display());
    if unplotted.is_empty() {
        Ok(())
    } else {
        Err(format!("not plotted: {}", unplotted.join("; ")))
    }
}

/// What an earlier run left in `out`: its rows and skips (kept for the
/// figures this run does not measure) and its mode. An error, before
/// anything is measured, if `out` holds files that are not a run's (they
/// would be overwritten) or a run of the other mode (quick and full rows
/// must not be mixed in one report).
fn earlier_results(
    out: &Path,
    quick: bool,
) -> Result<(Vec<results::Row>, Vec<results::Skip>), String> {
    let refuse = |why: String| format!("{}: {why}; choose another --out", out.display());
    let read = |name: &str| -> Result<Option<String>, String> {
        match std::fs::read_to_string(out.join(name)) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", out.join(name).display())),
        }
    };
    let Some(about) = read("run.txt")? else {
        let empty = std::fs::read_dir(out)
            .map_err(|e| format!("{}: {e}", out.display()))?
            .next()
            .is_none();
        return if empty {
            Ok((Vec::new(), Vec::new()))
        } else {
            Err(refuse(
                "not empty, and not the output of `ulfs bench` (no run.txt)".into(),
            ))
        };
    };
    let mode = if quick { "quick" } else { "full" };
    if let Some(theirs) = about.lines().nth(1).filter(|m| *m != mode) {
        return Err(refuse(format!(
            "holds a {theirs} run, and this one is {mode}"
        )));
    }
    let not_ours = |e: std::io::Error| refuse(format!("not the results of `ulfs bench` ({e})"));
    let rows = match read("results.csv")? {
        Some(t) => results::read_csv(&t).map_err(not_ours)?,
        None => Vec::new(),
    };
    let skips = match read("skips.csv")? {
        Some(t) => results::read_skips(&t).map_err(not_ours)?,
        None => Vec::new(),
    };
    Ok((rows, skips))
}

/// Plots and report again from an earlier run's CSVs.
fn replot(dir: &Path) -> Result<(), String> {
    let read = |name: &str| -> Result<String, String> {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let rows = results::read_csv(&read("results.csv")?).map_err(|e| format!("results.csv: {e}"))?;
    let skips = match read("skips.csv") {
        Ok(t) => results::read_skips(&t).map_err(|e| format!("skips.csv: {e}"))?,
        Err(_) => Vec::new(),
    };
    // The run's own caption, mode and command; a CSV from elsewhere has
    // none, and is captioned with this machine.
    let about = read("run.txt").unwrap_or_default();
    let mut lines = about.lines();
    let caption = match lines.next() {
        Some(c) if !c.is_empty() => c.to_string(),
        _ => format!("{}; replotted {}", host::machine(), host::today()),
    };
    let quick = lines.next() == Some("quick");
    let command = lines.next().unwrap_or("ulfs bench --replot").to_string();
    write_outputs(dir, &rows, &skips, &|_| true, &caption, quick, &command)
}

//! The experiments of `ulfs bench`, what each names, and the machinery
//! they share: a [`Ctx`] collecting rows and skips, and [`sweep`], which
//! runs one request per (param, round, system) on long-lived workers.
//!
//! An experiment is one selectable unit (`fig6`, `open`, ...); it fills
//! one or more figures of `catalog.rs`. Each module owns a family:
//! `paper` (the ULFS paper's micro-benchmarks), `memory` (figs 8 and 9),
//! `programs` (real libraries and programs: gdbm, SQLite, PostMark),
//! `metadata` (fsync loop, open, create, mount), `fuse` (`ulfs mount`
//! against the host's file systems and ulfs in process) and `server`
//! (`ulfs serve`'s round trip against the kernel, in process and FUSE).

mod clients;
mod fuse;
mod memory;
mod metadata;
mod paper;
mod programs;
mod server;

use crate::host::Disk;
use crate::measure::{Rounds, mean_stddev, rotation};
use crate::results::{Row, Skip, Unit};
use crate::systems::{Medium, Place, System, Tools};
use crate::worker::{Worker, interrupted, is_missing};
use indicatif::ProgressBar;
use std::path::PathBuf;
use tempfile::TempDir;

pub struct Experiment {
    /// What the user selects it by (`ulfs bench fig6`).
    pub name: &'static str,
    /// One line for `--list`.
    pub about: &'static str,
    /// The figures (catalog names) it fills.
    pub figures: &'static [&'static str],
    /// The systems it compares: each gets rows in every figure, or skips
    /// that say why not.
    pub systems: &'static [System],
    pub run: fn(&mut Ctx),
}

/// The peers of the in-memory experiments.
pub const IN_MEMORY: [System; 5] = [
    System::HostTmpfs,
    System::UlfsJournal,
    System::UlfsNone,
    System::UlfsPreload,
    System::UlfsFuse,
];

/// The peers of the durable experiments, on the disk.
pub const ON_DISK: [System; 5] = [
    System::HostExt4,
    System::UlfsJournal,
    System::UlfsNone,
    System::UlfsPreload,
    System::UlfsFuse,
];

/// The peers of whole programs and libraries: only systems that serve
/// another program's own calls. ulfs's images in memory (against
/// host-tmpfs) and one on the disk (against host-ext4).
pub const PROGRAMS: [System; 6] = [
    System::HostTmpfs,
    System::HostExt4,
    System::UlfsPreload,
    System::UlfsPreloadNone,
    System::UlfsPreloadExt4,
    System::UlfsFuse,
];

pub static EXPERIMENTS: &[Experiment] = &[
    paper::FIG6,
    paper::FIG7,
    memory::FIG8,
    memory::FIG9,
    paper::FIG10,
    paper::FIG11,
    paper::FIG12,
    programs::FIG13,
    programs::FIG14,
    programs::POSTMARK,
    metadata::FSYNC_LOOP,
    metadata::OPEN,
    metadata::CREATE,
    metadata::MOUNT,
    fuse::FUSE,
    server::SERVER,
    clients::CLIENTS,
];

/// The state of a run: where files go, what was measured, what was not.
pub struct Ctx {
    pub quick: bool,
    pub tools: Tools,
    pub memory: Result<TempDir, String>,
    pub disk: Result<Disk, String>,
    pub rows: Vec<Row>,
    pub skips: Vec<Skip>,
    /// Things that went wrong after rows were taken (a worker that did
    /// not unmount cleanly): the run fails at the end because of them.
    pub failures: Vec<String>,
    pub bar: ProgressBar,
}

impl Ctx {
    pub fn rounds(&self) -> Rounds {
        if self.quick {
            Rounds { warmup: 1, kept: 2 }
        } else {
            Rounds { warmup: 1, kept: 5 }
        }
    }

    /// Fewer rounds for cells that take seconds each.
    pub fn slow_rounds(&self) -> Rounds {
        if self.quick {
            Rounds { warmup: 0, kept: 2 }
        } else {
            Rounds { warmup: 1, kept: 3 }
        }
    }

    pub fn skip(&mut self, figures: &[&str], system: System, reason: &str) {
        for f in figures {
            self.skips.push(Skip {
                experiment: f.to_string(),
                system: system.name().to_string(),
                reason: reason.to_string(),
            });
        }
    }

    /// The row of one (figure, system, param): the mean and spread of the
    /// kept rounds' values (none kept: no row).
    pub fn record(&mut self, figure: &str, system: System, param: u64, unit: Unit, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        let (value, stddev) = mean_stddev(values);
        self.rows.push(Row {
            experiment: figure.to_string(),
            system: system.name().to_string(),
            param,
            value,
            unit,
            stddev,
        });
    }

    /// A system that failed at some point: skipped from there on, and
    /// unless it only lacked something (a library, a peer not built),
    /// the run fails at the end, its results written.
    pub fn failed(&mut self, figures: &[&str], system: System, reason: &str) {
        self.skip(figures, system, reason);
        if !is_missing(reason) {
            self.failures.push(format!(
                "{} on {}: {reason}",
                figures.join(", "),
                system.name()
            ));
        }
    }

    /// Fresh directories for one experiment, in memory and on the disk
    /// (each, or why there is none), with ulfs images on `medium`.
    pub fn place(&self, name: &str, medium: Medium, image_bytes: u64) -> Place {
        let fresh = |base: Result<&std::path::Path, &String>| -> Result<PathBuf, String> {
            let d = base.map_err(Clone::clone)?.join(name);
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            Ok(d)
        };
        Place {
            tools: self.tools.clone(),
            memory: fresh(self.memory.as_ref().map(|d| d.path())),
            disk: fresh(self.disk.as_ref().map(|d| d.path())),
            medium,
            image_bytes,
        }
    }

    /// A line for the user, above the bar (which, when stderr is not a
    /// terminal, is hidden and would swallow it).
    pub fn note(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

/// One figure a sweep fills from the answers' numbers.
pub struct Output {
    pub figure: &'static str,
    pub unit: Unit,
}

/// One experiment's measurements on long-lived workers, one per system.
pub struct Sweep<'a> {
    pub name: &'static str,
    pub medium: Medium,
    pub systems: &'a [System],
    pub params: &'a [u64],
    pub rounds: Rounds,
    pub image_bytes: u64,
    pub outputs: &'a [Output],
    /// The request line for a system and a param.
    pub request: &'a dyn Fn(System, u64) -> String,
    /// An answer's numbers (nanoseconds, mostly) to one value per output.
    pub convert: &'a dyn Fn(u64, &[f64]) -> Vec<f64>,
}

/// Runs a sweep and records its rows (mean and spread over the kept
/// rounds) and skips (a system that could not start, or failed at some
/// param: it is dropped from there on, with the reason).
pub fn sweep(ctx: &mut Ctx, s: &Sweep) {
    let figures: Vec<&str> = s.outputs.iter().map(|o| o.figure).collect();
    let cells = (s.params.len() * s.rounds.total() * s.systems.len()) as u64;
    ctx.bar.inc_length(cells);
    ctx.bar.set_message(s.name);
    let place = ctx.place(s.name, s.medium, s.image_bytes);
    let mut workers: Vec<Option<Worker>> = Vec::new();
    let mut start_errors = Vec::new();
    for &sys in s.systems {
        match place.start(sys) {
            Ok(w) => workers.push(Some(w)),
            Err(e) => {
                workers.push(None);
                start_errors.push((sys, e));
            }
        }
    }
    for (sys, e) in start_errors {
        ctx.failed(&figures, sys, &e);
    }
    for &param in s.params {
        // values[system][output] over the kept rounds.
        let mut values = vec![vec![Vec::new(); s.outputs.len()]; s.systems.len()];
        for round in 0..s.rounds.total() {
            if interrupted() {
                return;
            }
            for i in rotation(s.systems.len(), round) {
                ctx.bar.inc(1);
                let sys = s.systems[i];
                let Some(w) = workers[i].as_mut() else {
                    continue;
                };
                match w.ask(&(s.request)(sys, param)) {
                    Ok(answer) if round >= s.rounds.warmup => {
                        let v = (s.convert)(param, &answer);
                        for (k, x) in v.into_iter().enumerate().take(s.outputs.len()) {
                            values[i][k].push(x);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let reason = format!("at {param}: {e}");
                        ctx.failed(&figures, sys, &reason);
                        ctx.note(&format!("{}: {}: {reason}", s.name, sys.name()));
                        workers[i] = None;
                        values[i].iter_mut().for_each(Vec::clear);
                    }
                }
            }
        }
        for (i, &sys) in s.systems.iter().enumerate() {
            for (k, out) in s.outputs.iter().enumerate() {
                ctx.record(out.figure, sys, param, out.unit, &values[i][k]);
            }
        }
    }
    for w in workers.into_iter().flatten() {
        if let Err(e) = w.finish() {
            ctx.failures.push(format!("{}: {e}", s.name));
        }
    }
}

/// Image size for up to `files` files of `bytes_each`: mkfs reserves the
/// whole image (in memory, for the in-memory experiments), so it is sized
/// to the experiment, with room for metadata, and at least 64 MiB.
pub fn image_for(files: u64, bytes_each: u64) -> u64 {
    let need = files * bytes_each + files * bytes_each / 4 + (32 << 20);
    need.max(64 << 20).next_multiple_of(1 << 20)
}

/// The largest of an experiment's params.
pub fn largest(params: &[u64]) -> u64 {
    params.iter().copied().max().unwrap_or(0)
}

/// An answer's nanoseconds in `unit`, each divided by `per` (the calls
/// or listings one number covers; 1 for a whole-workload time).
pub fn all_in(unit: Unit, answer: &[f64], per: u64) -> Vec<f64> {
    answer
        .iter()
        .map(|&ns| ns_to(unit, ns) / per as f64)
        .collect()
}

/// Nanoseconds to the unit a figure shows.
pub fn ns_to(unit: Unit, ns: f64) -> f64 {
    match unit {
        Unit::Ns => ns,
        Unit::Us => ns / 1e3,
        Unit::Ms => ns / 1e6,
        Unit::S => ns / 1e9,
        Unit::KiB | Unit::OpsPerS => ns,
    }
}

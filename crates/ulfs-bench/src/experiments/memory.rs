//! Memory (figs 8 and 9): what the fig. 7 workload costs in memory, and
//! what it costs in time when memory is scarce. Every measurement is a
//! new worker process on a new image, so what it is charged for is its
//! own; the systems take turns within each round, as in every sweep.

use super::{Ctx, Experiment, ns_to};
use crate::cgroup::Cgroup;
use crate::measure::rotation;
use crate::results::Unit;
use crate::systems::{Medium, Place, System};
use crate::worker::interrupted;
use std::time::Duration;

/// A FUSE mount's memory is the daemon's, not the program's: not a
/// peer here.
const FIG8_SYSTEMS: [System; 4] = [
    System::HostTmpfs,
    System::UlfsJournal,
    System::UlfsNone,
    System::UlfsPreload,
];

const FIG9_SYSTEMS: [System; 5] = [
    System::HostExt4,
    System::UlfsJournal,
    System::UlfsJournalNoBudget,
    System::UlfsNone,
    System::UlfsPreload,
];

pub const FIG8: Experiment = Experiment {
    name: "fig8",
    about: "peak memory (VmHWM, cgroup) of the fig. 7 workload, and resident memory after mount",
    figures: &[
        "fig8-memory-peak",
        "fig8-memory-cgroup",
        "fig8-memory-after-mount",
    ],
    systems: &FIG8_SYSTEMS,
    run: fig8,
};

/// An image for `files` files of 1 MiB and little more: mkfs reserves all
/// of it, and on tmpfs the reservation is memory charged to the system.
fn fig8_image(files: u64) -> u64 {
    (files * (5 << 18) + (8 << 20)).next_multiple_of(1 << 20)
}

fn fig8(ctx: &mut Ctx) {
    const CGROUP: &str = "fig8-memory-cgroup";
    let figures = FIG8.figures;
    let params: &[u64] = if ctx.quick { &[1, 10] } else { &[1, 10, 100] };
    let rounds = ctx.slow_rounds();
    ctx.bar
        .inc_length((params.len() * FIG8_SYSTEMS.len() * rounds.total()) as u64);
    ctx.bar.set_message("fig8");
    let mut place = ctx.place("fig8", Medium::Memory, 0);
    let cgroups = Cgroup::new(None).map(drop);
    if let Err(e) = &cgroups {
        for sys in FIG8_SYSTEMS {
            ctx.skip(&[CGROUP], sys, e);
        }
    }
    let mut dead = [false; FIG8_SYSTEMS.len()];
    // Once a cgroup figure cannot be read (memory.peak needs Linux 5.19),
    // the other two figures go on without it.
    let mut no_peak = [false; FIG8_SYSTEMS.len()];
    for &n in params {
        place.image_bytes = fig8_image(n);
        let mut after_mount = vec![Vec::new(); FIG8_SYSTEMS.len()];
        let mut hwm = vec![Vec::new(); FIG8_SYSTEMS.len()];
        let mut charged = vec![Vec::new(); FIG8_SYSTEMS.len()];
        for round in 0..rounds.total() {
            for i in rotation(FIG8_SYSTEMS.len(), round) {
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                let sys = FIG8_SYSTEMS[i];
                if dead[i] {
                    continue;
                }
                match one_process(&place, sys, n, cgroups.is_ok() && !no_peak[i]) {
                    Ok(m) if round >= rounds.warmup => {
                        after_mount[i].push(m.after_mount);
                        hwm[i].push(m.hwm);
                        match m.charged {
                            Some(Ok(kib)) => charged[i].push(kib),
                            Some(Err(e)) => {
                                ctx.failed(&[CGROUP], sys, &e);
                                no_peak[i] = true;
                            }
                            None => {}
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        ctx.failed(figures, sys, &format!("at {n} files: {e}"));
                        dead[i] = true;
                    }
                }
            }
        }
        for (i, sys) in FIG8_SYSTEMS.into_iter().enumerate() {
            if dead[i] {
                continue;
            }
            ctx.record(
                "fig8-memory-after-mount",
                sys,
                n,
                Unit::KiB,
                &after_mount[i],
            );
            ctx.record("fig8-memory-peak", sys, n, Unit::KiB, &hwm[i]);
            if !no_peak[i] {
                ctx.record(CGROUP, sys, n, Unit::KiB, &charged[i]);
            }
        }
    }
}

struct Memory {
    after_mount: f64,
    hwm: f64,
    /// The cgroup's peak, if the process ran in one (or why it is not
    /// known).
    charged: Option<Result<f64, String>>,
}

/// One new worker on a new image doing the fig. 7 workload: its resident
/// memory right after mount, its VmHWM at the end and, in a cgroup, the
/// group's peak. (On a reused image the pages of the last round's files
/// would be there already, charged to nobody new.)
fn one_process(place: &Place, sys: System, files: u64, in_cgroup: bool) -> Result<Memory, String> {
    let group = if in_cgroup {
        let g = Cgroup::new(None)?;
        place.prepare_in(sys, &g)?;
        Some(g)
    } else {
        place.prepare(sys)?;
        None
    };
    let mut w = match &group {
        Some(g) => place.start_in(sys, g)?,
        None => place.start_again(sys)?,
    };
    let mounted = w.ask("mounted")?;
    w.ask(&format!("files {files}"))?;
    let status = w.ask("status")?;
    w.finish()?;
    let (Some(&after_mount), Some(&hwm)) = (mounted.get(1), status.get(1)) else {
        return Err("a worker answered without its memory".into());
    };
    Ok(Memory {
        after_mount,
        hwm,
        charged: group.map(|g| g.peak().map(|bytes| bytes as f64 / 1024.0)),
    })
}

pub const FIG9: Experiment = Experiment {
    name: "fig9",
    about: "10 files of 1 MiB written and read under cgroup memory limits of 8, 4, 2 and 1 MiB",
    figures: &["fig9-memory-limit"],
    systems: &FIG9_SYSTEMS,
    run: fig9,
};

/// Files of fig. 9's workload: more than the largest limit holds.
const FIG9_FILES: u64 = 10;

fn fig9(ctx: &mut Ctx) {
    const FIGURE: &str = "fig9-memory-limit";
    // 0: no limit, the time each limit is judged against.
    let limits: &[u64] = &[0, 8, 4, 2, 1];
    let rounds = ctx.rounds();
    // Under a tight limit a process can spend minutes faulting in the
    // pages the kernel just reclaimed: that it does not finish is the
    // result, recorded as such.
    let patience = Duration::from_secs(if ctx.quick { 10 } else { 60 });
    let cells = (limits.len() * FIG9_SYSTEMS.len() * rounds.total()) as u64;
    ctx.bar.inc_length(cells);
    ctx.bar.set_message("fig9");
    if let Err(e) = Cgroup::new(Some(8 << 20)) {
        for sys in FIG9_SYSTEMS {
            ctx.skip(&[FIGURE], sys, &e);
        }
        ctx.bar.inc(cells);
        return;
    }
    // The files are on the disk: under a limit the kernel can write their
    // pages back and evict them, as with the paper's mapped image.
    let place = ctx.place("fig9", Medium::Disk, super::image_for(FIG9_FILES, 1 << 20));
    // A system that did not fit one limit is not tried under a tighter one.
    let mut gave_up: [Option<u64>; FIG9_SYSTEMS.len()] = [None; FIG9_SYSTEMS.len()];
    for &mib in limits {
        let mut times = vec![Vec::new(); FIG9_SYSTEMS.len()];
        let mut failed: Vec<Option<String>> = vec![None; FIG9_SYSTEMS.len()];
        for round in 0..rounds.total() {
            for i in rotation(FIG9_SYSTEMS.len(), round) {
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                if failed[i].is_some() || gave_up[i].is_some() {
                    continue;
                }
                match limited_run(&place, FIG9_SYSTEMS[i], mib << 20, patience) {
                    Ok(ns) if round >= rounds.warmup => times[i].push(ns_to(Unit::Ms, ns)),
                    Ok(_) => {}
                    Err(e) => failed[i] = Some(e),
                }
            }
        }
        for (i, sys) in FIG9_SYSTEMS.into_iter().enumerate() {
            if let Some(at) = gave_up[i] {
                ctx.skip(
                    &[FIGURE],
                    sys,
                    &format!("at {mib} MiB: not tried, as it did not fit {at} MiB"),
                );
                continue;
            }
            match &failed[i] {
                // What the figure is about: not fitting is a result.
                Some(e) if e.contains("OOM killer") || e.contains("no answer in") => {
                    ctx.skip(&[FIGURE], sys, &format!("at {mib} MiB: {e}"));
                    gave_up[i] = Some(mib);
                }
                Some(e) => ctx.failed(&[FIGURE], sys, &format!("at {mib} MiB: {e}")),
                None => ctx.record(FIGURE, sys, mib, Unit::Ms, &times[i]),
            }
        }
    }
}

/// The workload in a new worker limited to `limit` bytes, on a new image
/// whose pages are on the disk and not in memory: write plus read time,
/// or why it could not finish (the OOM killer, usually).
fn limited_run(place: &Place, sys: System, limit: u64, patience: Duration) -> Result<f64, String> {
    place.prepare(sys)?;
    place.evict(sys)?;
    let group = Cgroup::new((limit > 0).then_some(limit))?;
    let mut w = place.start_in(sys, &group)?;
    // 64 KiB calls: the process's own buffers must not be what fills the
    // limit (a 1 MiB buffer alone does at 1 MiB).
    let got = w.ask_within(&format!("files {FIG9_FILES} 65536"), patience);
    let got = got.and_then(|a| w.finish().map(|()| a));
    match got {
        Ok(a) if a.len() == 2 => Ok(a[0] + a[1]),
        Ok(_) => Err("a worker answered without two times".into()),
        Err(e) if group.oom_killed() => Err(format!("killed by the OOM killer ({e})")),
        Err(e) => Err(e),
    }
}

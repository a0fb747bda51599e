//! Memory (figs 8 and 9): what the fig. 7 workload costs in memory, and
//! what it costs in time when memory is scarce. Every measurement is a
//! new worker process, so its peak is its own.

use super::{Ctx, Experiment, image_for, largest, ns_to};
use crate::cgroup::Cgroup;
use crate::results::Unit;
use crate::systems::{Medium, Place, System};
use crate::worker::interrupted;

/// A FUSE mount's memory is the daemon's, not the program's: not a
/// peer here.
const FIG8_SYSTEMS: [System; 4] = [
    System::HostTmpfs,
    System::UlfsJournal,
    System::UlfsNone,
    System::UlfsPreload,
];

const FIG9_SYSTEMS: [System; 4] = [
    System::HostExt4,
    System::UlfsJournal,
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

fn fig8(ctx: &mut Ctx) {
    let figures = FIG8.figures;
    let params: &[u64] = if ctx.quick { &[1, 10] } else { &[1, 10, 100] };
    let rounds = ctx.slow_rounds();
    ctx.bar
        .inc_length((params.len() * FIG8_SYSTEMS.len() * rounds.total()) as u64);
    ctx.bar.set_message("fig8");
    let place = ctx.place("fig8", Medium::Memory, image_for(largest(params), 1 << 20));
    let cgroups = Cgroup::new(None).map(drop);
    if let Err(e) = &cgroups {
        for sys in FIG8_SYSTEMS {
            ctx.skip(&["fig8-memory-cgroup"], sys, e);
        }
    }
    for sys in FIG8_SYSTEMS {
        if let Err(e) = place.start(sys).and_then(|w| w.finish()) {
            ctx.skip(figures, sys, &e);
            ctx.bar.inc((params.len() * rounds.total()) as u64);
            continue;
        }
        'params: for &n in params {
            let (mut after_mount, mut hwm, mut charged) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds.total() {
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                match one_process(&place, sys, n, cgroups.is_ok()) {
                    Ok(m) if round >= rounds.warmup => {
                        after_mount.push(m.after_mount);
                        hwm.push(m.hwm);
                        charged.extend(m.charged);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        ctx.skip(figures, sys, &format!("at {n} files: {e}"));
                        break 'params;
                    }
                }
            }
            ctx.record("fig8-memory-after-mount", sys, n, Unit::KiB, &after_mount);
            ctx.record("fig8-memory-peak", sys, n, Unit::KiB, &hwm);
            ctx.record("fig8-memory-cgroup", sys, n, Unit::KiB, &charged);
        }
    }
}

struct Memory {
    after_mount: f64,
    hwm: f64,
    charged: Option<f64>,
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
    let charged = match &group {
        Some(g) => Some(g.peak()? as f64 / 1024.0),
        None => None,
    };
    Ok(Memory {
        after_mount,
        hwm,
        charged,
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
    // The files are on the disk: under a limit, the kernel can write
    // their pages back and evict them, as the paper's mapped image.
    let systems = FIG9_SYSTEMS;
    let limits: &[u64] = &[8, 4, 2, 1];
    let rounds = ctx.rounds();
    ctx.bar
        .inc_length((limits.len() * systems.len() * rounds.total()) as u64);
    ctx.bar.set_message("fig9");
    if let Err(e) = Cgroup::new(Some(8 << 20)) {
        for sys in systems {
            ctx.skip(&[FIGURE], sys, &format!("skipped: {e}"));
        }
        ctx.bar
            .inc((limits.len() * systems.len() * rounds.total()) as u64);
        return;
    }
    let place = ctx.place("fig9", Medium::Disk, image_for(FIG9_FILES, 1 << 20));
    for sys in systems {
        if let Err(e) = place.start(sys).and_then(|w| w.finish()) {
            ctx.skip(&[FIGURE], sys, &e);
            ctx.bar.inc((limits.len() * rounds.total()) as u64);
            continue;
        }
        for &mib in limits {
            let mut times = Vec::new();
            let mut failed = None;
            for round in 0..rounds.total() {
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                if failed.is_some() {
                    continue;
                }
                match limited_run(&place, sys, mib << 20) {
                    Ok(ns) if round >= rounds.warmup => times.push(ns_to(Unit::Ms, ns)),
                    Ok(_) => {}
                    Err(e) => failed = Some(e),
                }
            }
            match failed {
                Some(e) => ctx.skip(&[FIGURE], sys, &format!("at {mib} MiB: {e}")),
                None => ctx.record(FIGURE, sys, mib, Unit::Ms, &times),
            }
        }
    }
}

/// The workload in a new worker limited to `limit` bytes: write plus
/// read time, or why it could not finish (the OOM killer, usually).
fn limited_run(place: &Place, sys: System, limit: u64) -> Result<f64, String> {
    let group = Cgroup::new(Some(limit))?;
    let mut w = place.start_in(sys, &group)?;
    // 64 KiB calls: the process's own buffers must not be what fills the
    // limit (a 1 MiB buffer alone does at 1 MiB).
    let got = w.ask(&format!("files {FIG9_FILES} 65536"));
    let got = got.and_then(|a| w.finish().map(|()| a));
    match got {
        Ok(a) if a.len() == 2 => Ok(a[0] + a[1]),
        Ok(_) => Err("a worker answered without two times".into()),
        Err(e) if group.oom_killed() => Err(format!("killed by the OOM killer ({e})")),
        Err(e) => Err(e),
    }
}

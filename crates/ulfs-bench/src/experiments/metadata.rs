//! Metadata experiments from the other reference papers: the create +
//! write + fsync + close loop (file systems as processes, HotStorage'19),
//! open() of existing and missing names (Unikraft, EuroSys'21), create
//! and unlink rates in one large directory, and the mount of an image
//! holding many files.

use super::{
    Ctx, Experiment, IN_MEMORY, ON_DISK, Output, Sweep, all_in, image_for, largest, ns_to, sweep,
};
use crate::measure::rotation;
use crate::results::Unit;
use crate::systems::{Medium, System};
use crate::worker::interrupted;

const MOUNT_SYSTEMS: [System; 2] = [System::UlfsJournal, System::UlfsNone];

/// Image room per empty file: its inode (256 bytes) and its entry, with
/// plenty to spare.
const PER_FILE: u64 = 1 << 10;

pub const FSYNC_LOOP: Experiment = Experiment {
    name: "fsync-loop",
    about: "create + 4 KiB write + fsync + close of 100 and 1,000 files, on the host disk",
    figures: &["fsync-loop"],
    systems: &ON_DISK,
    run: fsync_loop,
};

fn fsync_loop(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick { &[50] } else { &[100, 1000] };
    sweep(
        ctx,
        &Sweep {
            name: "fsync-loop",
            medium: Medium::Disk,
            systems: &ON_DISK,
            params,
            rounds: ctx.slow_rounds(),
            image_bytes: image_for(largest(params), 8 << 10),
            outputs: &[Output {
                figure: "fsync-loop",
                unit: Unit::Us,
            }],
            request: &|_, n| format!("fsync {n}"),
            convert: &|n, a| all_in(Unit::Us, a, n),
        },
    );
}

pub const OPEN: Experiment = Experiment {
    name: "open",
    about: "open() of an existing and of a missing name in directories of 10 to 1,000,000 entries",
    figures: &["open-existing", "open-missing"],
    systems: &IN_MEMORY,
    run: open,
};

fn open(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[10, 100, 1000]
    } else {
        &[10, 100, 1000, 10_000, 100_000, 1_000_000]
    };
    let opens: u64 = if ctx.quick { 1000 } else { 10_000 };
    let request = move |_: System, n: u64| format!("open {n} {opens}");
    sweep(
        ctx,
        &Sweep {
            name: "open",
            medium: Medium::Memory,
            systems: &IN_MEMORY,
            params,
            rounds: ctx.rounds(),
            image_bytes: image_for(largest(params), PER_FILE),
            outputs: &[
                Output {
                    figure: "open-existing",
                    unit: Unit::Ns,
                },
                Output {
                    figure: "open-missing",
                    unit: Unit::Ns,
                },
            ],
            request: &request,
            convert: &move |_, a| a.iter().map(|&ns| ns / opens as f64).collect(),
        },
    );
}

pub const CREATE: Experiment = Experiment {
    name: "create",
    about: "create, then unlink, 1,000 to 1,000,000 files in one directory",
    figures: &["create", "create-unlink"],
    systems: &IN_MEMORY,
    run: create,
};

fn create(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[1000, 10_000]
    } else {
        &[1000, 10_000, 100_000, 1_000_000]
    };
    sweep(
        ctx,
        &Sweep {
            name: "create",
            medium: Medium::Memory,
            systems: &IN_MEMORY,
            params,
            rounds: ctx.slow_rounds(),
            image_bytes: image_for(largest(params), PER_FILE),
            outputs: &[
                Output {
                    figure: "create",
                    unit: Unit::Us,
                },
                Output {
                    figure: "create-unlink",
                    unit: Unit::Us,
                },
            ],
            request: &|_, n| format!("create {n}"),
            convert: &|n, a| all_in(Unit::Us, a, n),
        },
    );
}

pub const MOUNT: Experiment = Experiment {
    name: "mount",
    about: "mount time and resident memory of an image holding 1,000 to 1,000,000 files, and of new images of 64 MiB to 1 TiB",
    figures: &[
        "mount-time",
        "mount-memory",
        "mount-size-time",
        "mount-size-memory",
    ],
    systems: &MOUNT_SYSTEMS,
    run: mount,
};

fn mount(ctx: &mut Ctx) {
    const FIGURES: [&str; 2] = ["mount-time", "mount-memory"];
    let params: &[u64] = if ctx.quick {
        &[1000, 10_000]
    } else {
        &[1000, 10_000, 100_000, 1_000_000]
    };
    let systems = MOUNT_SYSTEMS;
    let rounds = ctx.rounds();
    ctx.bar
        .inc_length((params.len() * systems.len() * (1 + rounds.total())) as u64);
    ctx.bar.set_message("mount");
    let place = ctx.place(
        "mount",
        Medium::Memory,
        image_for(largest(params), PER_FILE),
    );
    let mut dead = [false; MOUNT_SYSTEMS.len()];
    for &n in params {
        // A new image holding n files per system, then rounds of new
        // processes mounting them, the systems taking turns.
        for (i, sys) in systems.into_iter().enumerate() {
            ctx.bar.inc(1);
            if dead[i] {
                continue;
            }
            let made = place.start(sys).and_then(|mut w| {
                w.ask(&format!("populate {n}"))?;
                w.finish()
            });
            if let Err(e) = made {
                ctx.failed(&FIGURES, sys, &format!("making an image of {n} files: {e}"));
                dead[i] = true;
            }
        }
        let what = format!("mounting {n} files");
        let Some((times, rss)) = mount_rounds(ctx, &FIGURES, &mut dead, &what, |sys| {
            place.start_again(sys)
        }) else {
            return;
        };
        for (i, sys) in systems.into_iter().enumerate() {
            if !dead[i] {
                ctx.record("mount-time", sys, n, Unit::Ms, &times[i]);
                ctx.record("mount-memory", sys, n, Unit::KiB, &rss[i]);
            }
        }
    }
    drop(place);
    mount_by_size(ctx);
}

/// Mount time and resident memory of new images of growing size: a mount
/// that allocates or reads anything per block (or per journal block)
/// shows here. The images are sparse (a 1 TiB image fits any host) and so
/// are mounted read-only, which writes nothing but is otherwise the same
/// mount: superblocks, journal replay, the orphan list.
fn mount_by_size(ctx: &mut Ctx) {
    const FIGURES: [&str; 2] = ["mount-size-time", "mount-size-memory"];
    let sizes: &[u64] = if ctx.quick {
        &[64 << 20, 16 << 30]
    } else {
        &[64 << 20, 16 << 30, 1 << 40]
    };
    let systems = MOUNT_SYSTEMS;
    let rounds = ctx.rounds();
    ctx.bar
        .inc_length((sizes.len() * systems.len() * (1 + rounds.total())) as u64);
    let place = ctx.place("mount-size", Medium::Memory, 0);
    for &bytes in sizes {
        let mib = bytes >> 20;
        let mut dead = [false; MOUNT_SYSTEMS.len()];
        for (i, sys) in systems.into_iter().enumerate() {
            ctx.bar.inc(1);
            if let Err(e) = place.make_sparse_image(sys, bytes) {
                ctx.failed(&FIGURES, sys, &format!("making a {mib} MiB image: {e}"));
                dead[i] = true;
            }
        }
        let what = format!("mounting {mib} MiB");
        let Some((times, rss)) = mount_rounds(ctx, &FIGURES, &mut dead, &what, |sys| {
            place.start_read_only(sys)
        }) else {
            return;
        };
        for (i, sys) in systems.into_iter().enumerate() {
            let _ = place.remove_image(sys);
            if !dead[i] {
                ctx.record("mount-size-time", sys, mib, Unit::Ms, &times[i]);
                ctx.record("mount-size-memory", sys, mib, Unit::KiB, &rss[i]);
            }
        }
    }
}

/// Per system: mount times (ms) and resident memory after mount (KiB).
type MountSamples = (Vec<Vec<f64>>, Vec<Vec<f64>>);

/// Rounds of new processes mounting each system's image (`start` makes the
/// worker), the systems taking turns: the mount times (ms) and resident
/// memory after mount (KiB) of the measured rounds, per system. A system
/// that fails is marked in `dead` and reported under `figures`. `None` if
/// the run was interrupted.
fn mount_rounds(
    ctx: &mut Ctx,
    figures: &[&str],
    dead: &mut [bool; MOUNT_SYSTEMS.len()],
    what: &str,
    start: impl Fn(System) -> Result<crate::worker::Worker, String>,
) -> Option<MountSamples> {
    let systems = MOUNT_SYSTEMS;
    let rounds = ctx.rounds();
    let mut times = vec![Vec::new(); systems.len()];
    let mut rss = vec![Vec::new(); systems.len()];
    for round in 0..rounds.total() {
        for i in rotation(systems.len(), round) {
            ctx.bar.inc(1);
            if interrupted() {
                return None;
            }
            if dead[i] {
                continue;
            }
            let got = start(systems[i]).and_then(|mut w| {
                let a = w.ask("mounted")?;
                w.finish()?;
                Ok(a)
            });
            match got {
                Ok(a) if a.len() == 2 && round >= rounds.warmup => {
                    times[i].push(ns_to(Unit::Ms, a[0]));
                    rss[i].push(a[1]);
                }
                Ok(_) => {}
                Err(e) => {
                    ctx.failed(figures, systems[i], &format!("{what}: {e}"));
                    dead[i] = true;
                }
            }
        }
    }
    Some((times, rss))
}

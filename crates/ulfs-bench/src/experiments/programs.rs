//! Real libraries and programs on each system: gdbm (fig. 13) and SQLite
//! (fig. 14) through the real shared libraries, loaded by the C workload
//! (so under `ulfs run` their own calls are what is served), and
//! Debian's PostMark. The ulfs API systems cannot run them: for these the
//! in-process route is `ulfs run` (ulfs-preload), on a journaled image
//! and on one without a journal.

use super::{Ctx, Experiment, Output, PROGRAMS, Sweep, all_in, image_for, largest, sweep};
use crate::measure::rotation;
use crate::results::Unit;
use crate::systems::{Medium, System};
use crate::worker::{interrupted, run_program};
use std::path::PathBuf;
use std::time::Instant;

pub const FIG13: Experiment = Experiment {
    name: "fig13",
    about: "gdbm store then fetch of 100 to 10,000 items through the real libgdbm",
    figures: &["fig13-gdbm-store", "fig13-gdbm-fetch"],
    systems: &PROGRAMS,
    run: fig13,
};

fn fig13(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[100, 1000]
    } else {
        &[100, 1000, 10_000]
    };
    library_sweep(ctx, "fig13", "gdbm", params, FIG13.figures);
}

pub const FIG14: Experiment = Experiment {
    name: "fig14",
    about: "SQLite insert then select of 1 to 1,000 rows (journal mode DELETE) through the real libsqlite3",
    figures: &["fig14-sqlite-insert", "fig14-sqlite-select"],
    systems: &PROGRAMS,
    run: fig14,
};

fn fig14(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[1, 10, 100]
    } else {
        &[1, 10, 100, 1000]
    };
    library_sweep(ctx, "fig14", "sqlite", params, FIG14.figures);
}

fn library_sweep(
    ctx: &mut Ctx,
    name: &'static str,
    op: &'static str,
    params: &[u64],
    figures: &'static [&'static str],
) {
    let request = move |_: System, n: u64| format!("{op} {n}");
    sweep(
        ctx,
        &Sweep {
            name,
            medium: Medium::Memory,
            systems: &PROGRAMS,
            params,
            rounds: ctx.slow_rounds(),
            image_bytes: 64 << 20,
            outputs: &[
                Output {
                    figure: figures[0],
                    unit: Unit::Ms,
                },
                Output {
                    figure: figures[1],
                    unit: Unit::Ms,
                },
            ],
            request: &request,
            convert: &|_, a| all_in(Unit::Ms, a, 1),
        },
    );
}

pub const POSTMARK: Experiment = Experiment {
    name: "postmark",
    about: "Debian's postmark (default transactions and sizes) over 1,000 to 100,000 files",
    figures: &["postmark"],
    systems: &PROGRAMS,
    run: postmark,
};

pub(super) fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(program))
        .find(|p| p.is_file())
}

fn postmark(ctx: &mut Ctx) {
    const FIGURE: &str = "postmark";
    let params: &[u64] = if ctx.quick {
        &[500, 1000]
    } else {
        &[1000, 10_000, 100_000]
    };
    let rounds = ctx.slow_rounds();
    ctx.bar
        .inc_length((params.len() * PROGRAMS.len() * rounds.total()) as u64);
    ctx.bar.set_message("postmark");
    let Some(program) = which("postmark") else {
        for sys in PROGRAMS {
            ctx.skip(
                &[FIGURE],
                sys,
                "missing: postmark (Debian: apt-get install postmark)",
            );
        }
        ctx.bar
            .inc((params.len() * PROGRAMS.len() * rounds.total()) as u64);
        return;
    };
    // PostMark's files are 500 bytes to 9.77 KB: two blocks each at most
    // on average, with room for its subdirectories.
    let place = ctx.place(
        "postmark",
        Medium::Memory,
        image_for(largest(params), 16 << 10),
    );
    let config_dir = match &place.memory {
        Ok(d) => d.clone(),
        Err(e) => {
            for sys in PROGRAMS {
                ctx.skip(&[FIGURE], sys, e);
            }
            return;
        }
    };
    let mut dead = vec![false; PROGRAMS.len()];
    for &files in params {
        let mut secs = vec![Vec::new(); PROGRAMS.len()];
        for round in 0..rounds.total() {
            for i in rotation(PROGRAMS.len(), round) {
                let sys = PROGRAMS[i];
                ctx.bar.inc(1);
                if interrupted() {
                    return;
                }
                if dead[i] {
                    continue;
                }
                let timed = place.program(sys, &program).and_then(|(mut cmd, dir)| {
                    let config = config_dir.join(format!("{}.pmrc", sys.name()));
                    let text = format!(
                        "set location {}\nset number {files}\nrun\nquit\n",
                        dir.display()
                    );
                    std::fs::write(&config, text).map_err(|e| e.to_string())?;
                    cmd.arg(&config);
                    let start = Instant::now();
                    run_program(cmd, "postmark")?;
                    Ok(start.elapsed().as_secs_f64())
                });
                match timed {
                    Ok(s) if round >= rounds.warmup => secs[i].push(s),
                    Ok(_) => {}
                    Err(e) => {
                        ctx.failed(&[FIGURE], sys, &format!("at {files} files: {e}"));
                        dead[i] = true;
                        secs[i].clear();
                    }
                }
            }
        }
        for (i, sys) in PROGRAMS.into_iter().enumerate() {
            ctx.record(FIGURE, sys, files, Unit::S, &secs[i]);
        }
    }
}

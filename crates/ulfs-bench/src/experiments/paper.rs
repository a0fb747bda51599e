//! The ULFS paper's micro-benchmarks (Cho & Bahn 2024, §5): read after
//! write (fig. 6), file count (fig. 7), readdir (fig. 10), lseek
//! (fig. 11) and fstat (fig. 12), all in memory against host tmpfs.

use super::{Ctx, Experiment, IN_MEMORY, Output, Sweep, all_in, image_for, largest, sweep};
use crate::results::Unit;
use crate::systems::{Medium, System};

const FIG6_SYSTEMS: [System; 6] = [
    System::HostTmpfs,
    System::UlfsJournal,
    System::UlfsNone,
    System::UlfsPreload,
    System::UlfsFuse,
    System::Memcpy,
];

/// Room for fig. 6's one file of 1 MiB and the small files of figs 10 to 12.
const SMALL_IMAGE: u64 = 64 << 20;

pub const FIG6: Experiment = Experiment {
    name: "fig6",
    about: "read after write, 64 B to 1 MiB chunks, fresh and existing file (and memcpy)",
    figures: &[
        "fig6-read-after-write-fresh",
        "fig6-read-after-write-overwrite",
        "fig6-seek-write-read-fresh",
        "fig6-seek-write-read-overwrite",
    ],
    systems: &FIG6_SYSTEMS,
    run: fig6,
};

fn fig6(ctx: &mut Ctx) {
    // 64 KiB as well: the original ULFS's bar includes it.
    const CHUNKS: [u64; 7] = [64, 512, 4 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20];
    for (how, figure) in [
        ("fresh", "fig6-read-after-write-fresh"),
        ("over", "fig6-read-after-write-overwrite"),
        ("seek-fresh", "fig6-seek-write-read-fresh"),
        ("seek-over", "fig6-seek-write-read-overwrite"),
    ] {
        let request = move |sys: System, chunk: u64| {
            let how = if sys == System::Memcpy { "memcpy" } else { how };
            format!("raw {how} {chunk}")
        };
        sweep(
            ctx,
            &Sweep {
                name: "fig6",
                medium: Medium::Memory,
                systems: &FIG6_SYSTEMS,
                params: &CHUNKS,
                rounds: more_rounds(ctx),
                image_bytes: SMALL_IMAGE,
                outputs: &[Output {
                    figure,
                    unit: Unit::Us,
                }],
                request: &request,
                convert: &|_, a| all_in(Unit::Us, a, 1),
            },
        );
    }
}

/// Small, fast cells get more rounds: their spread is mostly noise.
pub(super) fn more_rounds(ctx: &Ctx) -> crate::measure::Rounds {
    let r = ctx.rounds();
    crate::measure::Rounds {
        warmup: r.warmup,
        kept: r.kept * 2,
    }
}

pub const FIG7: Experiment = Experiment {
    name: "fig7",
    about: "1 to 100 files of 1 MiB written then read, one call per file, and in 1 KiB calls",
    figures: &[
        "fig7-file-count-write",
        "fig7-file-count-read",
        "fig7-small-calls-write",
        "fig7-small-calls-read",
    ],
    systems: &IN_MEMORY,
    run: fig7,
};

fn fig7(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[1, 10]
    } else {
        &[1, 2, 5, 10, 20, 50, 100]
    };
    // One call per file (the paper's 4 MB chunk is larger than a file),
    // then 1 KiB calls, as the original ULFS was also measured.
    for (call, write, read) in [
        (1u64 << 20, "fig7-file-count-write", "fig7-file-count-read"),
        (1 << 10, "fig7-small-calls-write", "fig7-small-calls-read"),
    ] {
        let request = move |_: System, n: u64| format!("files {n} {call}");
        sweep(
            ctx,
            &Sweep {
                name: "fig7",
                medium: Medium::Memory,
                systems: &IN_MEMORY,
                params,
                rounds: ctx.rounds(),
                image_bytes: image_for(largest(params), 1 << 20),
                outputs: &[
                    Output {
                        figure: write,
                        unit: Unit::Ms,
                    },
                    Output {
                        figure: read,
                        unit: Unit::Ms,
                    },
                ],
                request: &request,
                convert: &|_, a| all_in(Unit::Ms, a, 1),
            },
        );
    }
}

pub const FIG10: Experiment = Experiment {
    name: "fig10",
    about: "readdir of 10 to 1,000 entries with a 32 KiB and a 512-byte getdents buffer",
    figures: &["fig10-readdir", "fig10-readdir-small-buffer"],
    systems: &IN_MEMORY,
    run: fig10,
};

fn fig10(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick {
        &[10, 100, 1000]
    } else {
        &[10, 20, 50, 100, 200, 500, 1000]
    };
    // The paper lists each directory 1,000 times per measurement.
    let reps: u64 = if ctx.quick { 100 } else { 1000 };
    for (buffer, figure) in [
        (32u64 << 10, "fig10-readdir"),
        (512, "fig10-readdir-small-buffer"),
    ] {
        let request = move |_: System, n: u64| format!("readdir {n} {buffer} {reps}");
        sweep(
            ctx,
            &Sweep {
                name: "fig10",
                medium: Medium::Memory,
                systems: &IN_MEMORY,
                params,
                rounds: ctx.rounds(),
                image_bytes: SMALL_IMAGE,
                outputs: &[Output {
                    figure,
                    unit: Unit::Us,
                }],
                request: &request,
                convert: &move |_, a| all_in(Unit::Us, a, reps),
            },
        );
    }
}

fn calls(ctx: &Ctx) -> &'static [u64] {
    if ctx.quick {
        &[100, 1000, 10_000]
    } else {
        &[100, 1000, 10_000, 100_000, 1_000_000]
    }
}

pub const FIG11: Experiment = Experiment {
    name: "fig11",
    about: "lseek(fd, 0, SEEK_SET) on an empty file, 100 to 1,000,000 times",
    figures: &["fig11-lseek"],
    systems: &IN_MEMORY,
    run: fig11,
};

fn fig11(ctx: &mut Ctx) {
    repeated_call(ctx, "fig11", "fig11-lseek", "lseek");
}

pub const FIG12: Experiment = Experiment {
    name: "fig12",
    about: "fstat of one file, 100 to 1,000,000 times",
    figures: &["fig12-fstat"],
    systems: &IN_MEMORY,
    run: fig12,
};

fn fig12(ctx: &mut Ctx) {
    repeated_call(ctx, "fig12", "fig12-fstat", "fstat");
}

fn repeated_call(ctx: &mut Ctx, name: &'static str, figure: &'static str, op: &'static str) {
    let request = move |_: System, n: u64| format!("{op} {n}");
    sweep(
        ctx,
        &Sweep {
            name,
            medium: Medium::Memory,
            systems: &IN_MEMORY,
            params: calls(ctx),
            rounds: more_rounds(ctx),
            image_bytes: SMALL_IMAGE,
            outputs: &[Output {
                figure,
                unit: Unit::Us,
            }],
            request: &request,
            convert: &|_, a| all_in(Unit::Us, a, 1),
        },
    );
}

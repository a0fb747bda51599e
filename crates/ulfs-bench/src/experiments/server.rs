//! `ulfs bench server`: what a call costs through `ulfs serve` (issue 12,
//! requirement 7), against the same call on the kernel (tmpfs), in
//! process (the C API) and through `ulfs mount`: the least a call can do,
//! the least a call that must reach the server can do (back to back and
//! after a pause), fstat, and a 4 KiB pread of a cached file, each many
//! times over.
//!
//! Every system runs the same C loop (`do_null`, `do_roundtrip`,
//! `do_null_idle`, `do_fstat`, `do_pread4k` in c/workload.c). The C API has no call that
//! does nothing, so the null call is `lseek(fd, 0, SEEK_CUR)`, which only
//! reads the offset: in process a C call, on tmpfs a system call, through
//! FUSE a system call too (the kernel answers it, no request), and through
//! the server the client's own answer (it keeps the offset of a
//! description only it has: docs/SERVE.md "Offsets"). The round trip is
//! `statfs` of a file, which no cache answers: through the server one
//! request and its answer, through FUSE one request to its daemon (it was
//! `lseek(fd, 0, SEEK_END)` until the client answered that from its kept
//! fstat). Through FUSE, fstat and the cached pread are answered by the
//! kernel (its attribute cache, its page cache), through the server by
//! the client (its kept answer, its leased view of the image): those rows
//! measure the caches, which is what a user of either gets.

use super::paper::more_rounds;
use super::{Ctx, Experiment, Output, Sweep, all_in, image_for, sweep};
use crate::measure::Rounds;
use crate::results::Unit;
use crate::systems::{Medium, System};
use crate::worker::interrupted;

const SYSTEMS: [System; 4] = [
    System::HostTmpfs,
    System::UlfsJournal,
    System::UlfsFuse,
    System::UlfsServer,
];

const NULL: &str = "server-null";
const ROUND_TRIP: &str = "server-roundtrip";
const NULL_IDLE: &str = "server-null-idle";
const FSTAT: &str = "server-fstat";
const PREAD: &str = "server-pread";

/// The pause before each call of the idle figure: well past the server's
/// poll of a quiet client (20 µs) and the client's spin (5 µs).
const PAUSE_US: u64 = 1000;

pub const SERVER: Experiment = Experiment {
    name: "server",
    about: "`ulfs serve` against host tmpfs, ulfs in process and `ulfs mount`: \
            lseek(fd, 0, SEEK_CUR) (the null call), statfs back to back (a round trip) \
            and after 1 ms pauses, fstat, 4 KiB pread of a cached file",
    figures: &[NULL, ROUND_TRIP, NULL_IDLE, FSTAT, PREAD],
    systems: &SYSTEMS,
    run: server,
};

fn server(ctx: &mut Ctx) {
    let (busy, preads, idle): (u64, u64, u64) = if ctx.quick {
        (20_000, 20_000, 200)
    } else {
        (1_000_000, 200_000, 2_000)
    };
    let many = more_rounds(ctx);
    let cells: [(&'static str, u64, Rounds, &'static str); 5] = [
        (NULL, busy, many, "null"),
        (ROUND_TRIP, busy, many, "roundtrip"),
        (FSTAT, busy, many, "fstat"),
        (PREAD, preads, many, "pread4k"),
        (NULL_IDLE, idle, ctx.rounds(), "null-idle"),
    ];
    for (figure, calls, rounds, op) in cells {
        if interrupted() {
            return;
        }
        let request = move |_: System, n: u64| {
            if op == "null-idle" {
                format!("{op} {n} {PAUSE_US}")
            } else {
                format!("{op} {n}")
            }
        };
        sweep(
            ctx,
            &Sweep {
                name: figure,
                medium: Medium::Memory,
                systems: &SYSTEMS,
                params: &[calls],
                rounds,
                // pread's file of 1 MiB and little else.
                image_bytes: image_for(1, 1 << 20),
                outputs: &[Output {
                    figure,
                    unit: Unit::Ns,
                }],
                request: &request,
                // Per call.
                convert: &|n, a| all_in(Unit::Ns, a, n),
            },
        );
    }
}

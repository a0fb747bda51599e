//! Workloads for calls that commit part of their work (issue 6, finding 9)
//! and for the attribute calls (fdatasync, utimensat/futimens,
//! chown/fchown).
//!
//! How a committed part is forced: a write, fallocate or punch commits
//! mid-call when the running transaction nears the journal's capacity
//! (`txn_room(8)` in fs/file.rs). Data blocks are not journaled, so only
//! metadata blocks fill a transaction: the workload runs on the smallest
//! journal mkfs allows (`min_journal(1)` = 66 blocks: a transaction holds
//! 63 copies and `txn_room(8)` fails from 54 on) with a commit threshold of
//! 58, and before each big call dirties one indirect block per call (a
//! page written into each of many double-indirect regions of a sparse
//! file) so the transaction holds about 52-56 copies when the big call
//! starts. The big call then commits after its first block(s). A punch of
//! the whole sparse range dirties those indirect blocks again, one per
//! page, and commits in its middle. The counts (`m` below) are chosen
//! from that arithmetic, a few apart so that a small change in what a call
//! dirties still leaves some rounds committing part of their call; the
//! CI test asserts that states with a committed part of a write, of a
//! fallocate and of a punch were all checked.

use super::*;

/// Journal blocks of the partial-commit workload: the smallest allowed.
pub fn partial_journal() -> u32 {
    ulfs::fs::min_journal(1)
}

/// Byte offset of double-indirect region `j` of a file (each maps 1020
/// blocks, after 12 direct and 1020 single-indirect ones).
fn region(j: u64) -> u64 {
    (12 + 1020 + j * 1020) * PAGE
}

/// The big call of a round.
#[derive(Clone, Copy, Debug)]
enum Big {
    /// pwrite into the hole past the end of /p/b.
    Write,
    /// fallocate KEEP_SIZE over holes inside /p/b.
    FallocKeep,
    /// fallocate mode 0 from holes inside /p/b to past its end.
    FallocGrow,
}

pub fn wl_partial(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.op(Op::Mkdir {
        path: b"/p".to_vec(),
    });
    let s = r.open(b"/p/s", libc::O_CREAT | libc::O_RDWR);
    let b = r.open(b"/p/b", libc::O_CREAT | libc::O_RDWR);
    // (big call, indirect blocks dirtied before it)
    let rounds = [
        (Big::Write, 52),
        (Big::FallocKeep, 51),
        (Big::FallocGrow, 51),
        (Big::Write, 53),
        (Big::FallocKeep, 52),
        (Big::FallocGrow, 50),
        (Big::Write, 54),
        (Big::FallocKeep, 53),
    ];
    for (round, &(big, m)) in rounds.iter().cycle().take(rounds.len() * scale).enumerate() {
        // A fresh /p/b: 14 pages, then a hole.
        r.op(Op::Ftruncate { slot: b, len: 0 });
        r.op(Op::Pwrite {
            slot: b,
            off: 0,
            len: 14 * PAGE as usize - 100,
            fill: rng.next(),
        });
        // Attribute calls, synced by fdatasync or a full sync.
        let t0 = 1_600_000_000 + round as i64 * 1000;
        r.op(Op::Futimens {
            slot: b,
            times: [
                Timespec { sec: t0, nsec: 123 },
                Timespec {
                    sec: t0 + 7,
                    nsec: 999_999_999,
                },
            ],
        });
        r.op(Op::Fchown {
            slot: b,
            uid: 1000 + round as u32,
            gid: 2000,
        });
        if round % 2 == 0 {
            r.op(Op::Fdatasync { slot: b });
        } else {
            r.op(Op::Sync);
        }
        // One page into each of m double-indirect regions of /p/s: one
        // more indirect block in the transaction per call.
        let at = (round % 7) as u64 * PAGE;
        for j in 0..m {
            r.op(Op::Pwrite {
                slot: s,
                off: region(j) + at,
                len: PAGE as usize,
                fill: rng.next(),
            });
        }
        let size = r.size_of(b);
        match big {
            Big::Write => {
                let off = 16 * PAGE + 1 + rng.below(PAGE - 2);
                r.op(Op::Pwrite {
                    slot: b,
                    off,
                    len: 40 * PAGE as usize - rng.below(PAGE) as usize,
                    fill: rng.next(),
                });
            }
            Big::FallocKeep => {
                r.op(Op::Ftruncate {
                    slot: b,
                    len: size + 60 * PAGE,
                });
                r.op(Op::Fallocate {
                    slot: b,
                    mode: libc::FALLOC_FL_KEEP_SIZE,
                    off: size + 3 * PAGE + 5,
                    len: 40 * PAGE,
                });
            }
            Big::FallocGrow => {
                r.op(Op::Ftruncate {
                    slot: b,
                    len: size + 10 * PAGE,
                });
                r.op(Op::Fallocate {
                    slot: b,
                    mode: 0,
                    off: size + PAGE,
                    len: 40 * PAGE,
                });
            }
        }
        // Punch every page written into /p/s: the indirect blocks are
        // dirtied again, one per page, and the punch commits midway.
        let end = region(m) + PAGE / 2;
        r.op(Op::Fallocate {
            slot: s,
            mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off: rng.below(PAGE),
            len: end,
        });
        r.op(Op::Utimens {
            path: b"/p".to_vec(),
            times: [
                Timespec {
                    sec: t0 - 5,
                    nsec: 0,
                },
                Timespec { sec: t0, nsec: 1 },
            ],
        });
        r.op(Op::Chown {
            path: b"/p/s".to_vec(),
            uid: 3000 + round as u32,
            gid: 4000 + round as u32,
        });
        r.op(Op::Sync);
    }
    r.op(Op::Close { slot: s });
    r.op(Op::Close { slot: b });
}

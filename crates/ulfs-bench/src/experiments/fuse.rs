//! `ulfs bench fuse`: what a user of `ulfs mount` gets, against the host's
//! own file systems (tmpfs, ext4) and against ulfs in process, with and
//! without the mount's `writeback_cache` (issue 10, requirement 7). The
//! workloads are a user's: a large file written and read in 1 MiB calls,
//! 4 KiB random reads of it, small writes, create/stat/unlink of many
//! files, and `tar -x` of a real tree.
//!
//! The file and name workloads are requests to the C workload (`seqio`,
//! `metadata`), so every system runs the same loop. tar is a whole
//! program: on the hosts and in a FUSE mount it is run as is, in the
//! mount held by the system's worker; in process it runs under `ulfs run`
//! (ulfs-preload), which is the only way ulfs serves another program's
//! calls in its own process, so ulfs-journal (the C API) has no tar row.
//!
//! ulfs-server (`ulfs serve`, the C API's `ulfs_connect`) runs the file
//! and name workloads like ulfs-journal, so "faster than through FUSE"
//! reads off one table; its tar runs under `ulfs run --server` on a new
//! image's server.

use super::{Ctx, Experiment, Output, Sweep, image_for, largest, sweep};
use crate::measure::rotation;
use crate::results::Unit;
use crate::systems::{Medium, Place, System};
use crate::worker::{interrupted, run_program};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const SYSTEMS: [System; 7] = [
    System::HostTmpfs,
    System::HostExt4,
    System::UlfsJournal,
    System::UlfsPreload,
    System::UlfsFuse,
    System::UlfsFuseWriteback,
    System::UlfsServer,
];

/// The systems tar (another program) can run on.
fn runs_programs(system: System) -> bool {
    system != System::UlfsJournal
}

const IO_FIGURES: [&str; 4] = [
    "fuse-seq-write",
    "fuse-seq-read",
    "fuse-random-read",
    "fuse-small-write",
];
const NAME_FIGURES: [&str; 3] = ["fuse-create", "fuse-stat", "fuse-unlink"];
const TAR_FIGURE: &str = "fuse-tar-extract";

pub const FUSE: Experiment = Experiment {
    name: "fuse",
    about: "`ulfs mount` (with and without writeback_cache) against host tmpfs, ext4, ulfs in process and `ulfs serve`: \
            64 MiB written and read in 1 MiB calls, 4 KiB random reads, 4 KiB writes, \
            create/stat/unlink of 10,000 files, tar -x of /usr/include",
    figures: &[
        IO_FIGURES[0],
        IO_FIGURES[1],
        IO_FIGURES[2],
        IO_FIGURES[3],
        NAME_FIGURES[0],
        NAME_FIGURES[1],
        NAME_FIGURES[2],
        TAR_FIGURE,
    ],
    systems: &SYSTEMS,
    run: fuse,
};

fn fuse(ctx: &mut Ctx) {
    file_io(ctx);
    if interrupted() {
        return;
    }
    names(ctx);
    if interrupted() {
        return;
    }
    tar_extract(ctx);
}

/// One file of N MiB: written, read, read at random, written in 4 KiB
/// calls (`do_seqio` in c/workload.c).
fn file_io(ctx: &mut Ctx) {
    let (mib, reads): (u64, u64) = if ctx.quick { (16, 4096) } else { (64, 16_384) };
    let request = move |_: System, mib: u64| format!("seqio {mib} {reads}");
    sweep(
        ctx,
        &Sweep {
            name: "fuse-io",
            medium: Medium::Memory,
            systems: &SYSTEMS,
            params: &[mib],
            rounds: ctx.rounds(),
            // Room for both files: in journal mode the first file's
            // blocks may not be free again before the second is written.
            image_bytes: image_for(2, mib << 20),
            outputs: &IO_FIGURES.map(in_us),
            request: &request,
            // Per MiB for the sequential passes, per call for the random
            // reads.
            convert: &move |mib, a| {
                let per = [mib, mib, reads, mib];
                a.iter()
                    .zip(per)
                    .map(|(ns, n)| ns / 1e3 / n as f64)
                    .collect()
            },
        },
    );
}

fn in_us(figure: &'static str) -> Output {
    Output {
        figure,
        unit: Unit::Us,
    }
}

/// Create, stat and unlink of N empty files in one directory
/// (`do_metadata` in c/workload.c).
fn names(ctx: &mut Ctx) {
    let params: &[u64] = if ctx.quick { &[1000] } else { &[10_000] };
    sweep(
        ctx,
        &Sweep {
            name: "fuse-names",
            medium: Medium::Memory,
            systems: &SYSTEMS,
            params,
            rounds: ctx.slow_rounds(),
            image_bytes: image_for(largest(params), 1 << 10),
            outputs: &NAME_FIGURES.map(in_us),
            request: &|_, n| format!("metadata {n}"),
            convert: &|n, a| a.iter().map(|ns| ns / 1e3 / n as f64).collect(),
        },
    );
}

/// The tree tar extracts: all of /usr/include, or in `--quick` its
/// `linux` directory (the kernel's headers, on every Debian with a C
/// compiler). Real headers: many small files, some large, directories,
/// symbolic links.
fn tree(quick: bool) -> PathBuf {
    PathBuf::from(if quick {
        "/usr/include/linux"
    } else {
        "/usr/include"
    })
}

/// A tree's entries (the top directory included), bytes, and bytes with
/// each entry's rounded up to a block; symbolic links are not followed.
fn measure_tree(top: &Path) -> std::io::Result<(u64, u64, u64)> {
    let mut entries = 0;
    let mut bytes = 0;
    let mut blocks = 0;
    let mut todo = vec![top.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p)?;
        entries += 1;
        bytes += meta.len();
        blocks += meta.len().next_multiple_of(4096);
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                todo.push(e?.path());
            }
        }
    }
    Ok((entries, bytes, blocks))
}

/// `tar -x` of a real tree, a tarball made once per run, into a new empty
/// directory of each system; the wall time of the tar process. The last
/// round's extraction is compared with the archive (`tar -d`), untimed.
fn tar_extract(ctx: &mut Ctx) {
    let rounds = ctx.slow_rounds();
    let cells = (SYSTEMS.len() * rounds.total()) as u64;
    ctx.bar.inc_length(cells);
    ctx.bar.set_message("fuse-tar");
    let figures = [TAR_FIGURE];
    ctx.skip(
        &figures,
        System::UlfsJournal,
        "the C API runs no other program (in process, tar runs under `ulfs run`: ulfs-preload)",
    );
    let prepared = prepare_archive(ctx);
    let (tar, archive, entries, place) = match prepared {
        Ok(p) => p,
        Err(why) => {
            for sys in SYSTEMS.into_iter().filter(|s| runs_programs(*s)) {
                ctx.failed(&figures, sys, &why);
            }
            ctx.bar.inc(cells);
            return;
        }
    };
    let mut dead: Vec<bool> = SYSTEMS.iter().map(|s| !runs_programs(*s)).collect();
    let mut ms = vec![Vec::new(); SYSTEMS.len()];
    for round in 0..rounds.total() {
        let last = round + 1 == rounds.total();
        for i in rotation(SYSTEMS.len(), round) {
            ctx.bar.inc(1);
            if interrupted() {
                return;
            }
            if dead[i] {
                continue;
            }
            let sys = SYSTEMS[i];
            match extract(&place, sys, &tar, &archive, last) {
                Ok(t) if round >= rounds.warmup => ms[i].push(t),
                Ok(_) => {}
                Err(e) => {
                    let reason = format!("at {entries} entries: {e}");
                    ctx.note(&format!("fuse-tar: {}: {reason}", sys.name()));
                    ctx.failed(&figures, sys, &reason);
                    dead[i] = true;
                    ms[i].clear();
                }
            }
        }
    }
    for (i, sys) in SYSTEMS.into_iter().enumerate() {
        ctx.record(TAR_FIGURE, sys, entries, Unit::Ms, &ms[i]);
    }
}

/// tar, the tarball (in memory, so reading it costs every system the
/// same), the tree's number of entries, and the place (its images sized
/// to the tree); or why there is none.
fn prepare_archive(ctx: &mut Ctx) -> Result<(PathBuf, PathBuf, u64, Place), String> {
    let tar = super::programs::which("tar").ok_or("missing: tar (Debian: apt-get install tar)")?;
    let top = tree(ctx.quick);
    let (entries, bytes, blocks) = measure_tree(&top).map_err(|e| {
        format!(
            "missing: the tree to extract, {} (Debian: libc6-dev, linux-libc-dev): {e}",
            top.display()
        )
    })?;
    // A directory or an inode per entry besides the data.
    let place = ctx.place(
        "fuse-tar",
        Medium::Memory,
        image_for(1, blocks + entries * (4 << 10)),
    );
    let dir = place.memory.clone()?;
    let archive = dir.join("tree.tar");
    let (Some(parent), Some(name)) = (top.parent(), top.file_name()) else {
        return Err(format!("{}: not a directory to archive", top.display()));
    };
    let mut make = Command::new(&tar);
    make.arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(parent)
        .arg(name);
    run_program(make, "tar -c of the tree")?;
    ctx.note(&format!(
        "fuse-tar: {} ({entries} entries, {} MiB)",
        top.display(),
        bytes >> 20
    ));
    Ok((tar, archive, entries, place))
}

/// One extraction into a new, empty directory of `system`; its wall time
/// in ms. With `check`, the tree is then compared with the archive.
fn extract(
    place: &Place,
    system: System,
    tar: &Path,
    archive: &Path,
    check: bool,
) -> Result<f64, String> {
    let x = |mut cmd: Command, dir: &Path| {
        cmd.arg("-xf").arg(archive).arg("-C").arg(dir);
        cmd
    };
    // tar -d exits 1 naming what differs (its stderr ends the error).
    let d = |mut cmd: Command, dir: &Path| {
        cmd.arg("-df").arg(archive).arg("-C").arg(dir);
        run_program(cmd, "tar -d: the extracted tree differs from the archive")
    };
    if system.is_fuse() {
        // A new image, mounted for this extraction alone, so every round
        // starts from the same state; unmounting (the image's commit) is
        // not tar's time.
        let (worker, dir) = place.mounted(system)?;
        let took = timed(x(Command::new(tar), &dir));
        let checked = match (&took, check) {
            (Ok(_), true) => d(Command::new(tar), &dir),
            _ => Ok(()),
        };
        // Always: the mount must go before the next round's new image.
        let unmounted = worker.finish();
        let t = took?;
        checked?;
        unmounted?;
        return Ok(t);
    }
    if system == System::UlfsServer {
        // As a mount: a new image's server for this extraction alone; its
        // stop (the commit) is not tar's time.
        let served = place.served(system)?;
        let dir = Path::new("/ulfs");
        let took = timed(x(place.through_server(&served.socket, tar)?, dir));
        let checked = match (&took, check) {
            (Ok(_), true) => d(place.through_server(&served.socket, tar)?, dir),
            _ => Ok(()),
        };
        let stopped = served.finish();
        let t = took?;
        checked?;
        stopped?;
        return Ok(t);
    }
    if !matches!(system, System::UlfsPreload) {
        // A host system keeps its directory between rounds: emptied, so
        // that every round extracts into nothing, as on a new image.
        let dir = place.home(system)?.join(system.name());
        remove_tree(&dir)?;
    }
    // ulfs-preload: `ulfs run` on a new image; its start, mount and
    // final commit are part of the time, as for any program under it.
    let (cmd, dir) = place.program(system, tar)?;
    let t = timed(x(cmd, &dir))?;
    if check {
        let (cmd, dir) = place.program_again(system, tar)?;
        d(cmd, &dir)?;
    }
    if system != System::UlfsPreload {
        remove_tree(&dir)?;
    }
    Ok(t)
}

/// The wall time of a program, in ms.
fn timed(cmd: Command) -> Result<f64, String> {
    let start = Instant::now();
    run_program(cmd, "tar -x")?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

pub(super) fn remove_tree(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

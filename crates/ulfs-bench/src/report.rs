//! Output: the human table on stdout and the machine-readable CSV.
//!
//! The CSV is long-format (one row per workload, param, peer) so a plotting
//! script can pivot it any way and a new peer is a new row, not a new
//! column; the tables are the pivoted view a reader wants, with the ratios
//! that BENCHMARKS.md says are the actual result. A ratio `a/b` is always
//! time of `a` over time of `b`.

use crate::measure::Sample;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

pub const JOURNAL: &str = "ulfs-journal";
pub const NONE: &str = "ulfs-none";
pub const TMPFS: &str = "host-tmpfs";
pub const EXT4: &str = "host-ext4";
pub const MEMCPY: &str = "memcpy";

pub const FSYNC: &str = "fsync";

/// The file-systems-as-processes paper's ext4 figure for the fsync
/// workload, µs per file: printed beside ours for context, not a peer.
pub const PAPER_EXT4_US: f64 = 74.5;

pub struct Row {
    pub workload: &'static str,
    /// N for lseek/fstat, chunk size in bytes for read-after-write, the
    /// number of files for file-count and fsync.
    pub param: u64,
    pub peer: &'static str,
    pub sample: Sample,
}

pub fn write_csv(path: &Path, rows: &[Row]) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut s = String::from("workload,param,peer,ns_per_op,reps\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{:.3},{}",
            r.workload, r.param, r.peer, r.sample.ns_per_op, r.sample.reps
        );
    }
    std::fs::write(path, s)
}

fn param_label(workload: &str, param: u64) -> String {
    match workload {
        "read-after-write" => match param {
            p if p >= 1 << 20 && p.is_multiple_of(1 << 20) => format!("{} MiB", p >> 20),
            p if p >= 1 << 10 && p.is_multiple_of(1 << 10) => format!("{} KiB", p >> 10),
            p => format!("{p} B"),
        },
        "file-count" | FSYNC => format!("{param} files"),
        _ => format!("N={param}"),
    }
}

fn find<'a>(rows: &'a [Row], workload: &str, param: u64, peer: &str) -> Option<&'a Sample> {
    rows.iter()
        .find(|r| r.workload == workload && r.param == param && r.peer == peer)
        .map(|r| &r.sample)
}

fn ns(s: Option<&Sample>) -> String {
    match s {
        Some(s) if s.ns_per_op >= 100.0 => format!("{:.0}", s.ns_per_op),
        Some(s) => format!("{:.1}", s.ns_per_op),
        None => "-".into(),
    }
}

fn us(s: Option<&Sample>) -> String {
    s.map_or("-".into(), |s| format!("{:.1}", s.ns_per_op / 1e3))
}

/// `num / den` of two times: with the peer of interest as `den`, > 1 means
/// it is faster.
fn ratio(num: Option<&Sample>, den: Option<&Sample>) -> String {
    match (num, den) {
        (Some(a), Some(b)) if b.ns_per_op > 0.0 => format!("{:.2}x", a.ns_per_op / b.ns_per_op),
        _ => "-".into(),
    }
}

/// The (workload, param) cells in the order measured, filtered.
fn cells(rows: &[Row], keep: impl Fn(&str) -> bool) -> Vec<(&'static str, u64)> {
    let mut seen = Vec::new();
    for r in rows {
        if keep(r.workload) && !seen.contains(&(r.workload, r.param)) {
            seen.push((r.workload, r.param));
        }
    }
    seen
}

/// The in-memory workloads, one line per (workload, param): both modes of
/// ulfs, tmpfs and (for data) memcpy, with the ratios that are the result.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "workload",
        "param",
        "journal ns/op",
        "none ns/op",
        "none/journal",
        "tmpfs ns/op",
        "tmpfs/journal",
        "tmpfs/none",
        "memcpy ns/op",
        "journal/memcpy",
    ];
    let mut lines = vec![header.map(String::from).to_vec()];
    for (workload, param) in cells(rows, |w| w != FSYNC) {
        let j = find(rows, workload, param, JOURNAL);
        let n = find(rows, workload, param, NONE);
        let t = find(rows, workload, param, TMPFS);
        let m = find(rows, workload, param, MEMCPY);
        lines.push(vec![
            workload.to_string(),
            param_label(workload, param),
            ns(j),
            ns(n),
            ratio(n, j),
            ns(t),
            ratio(t, j),
            ratio(t, n),
            ns(m),
            ratio(j, m),
        ]);
    }
    render(&lines)
}

/// The fsync workload on the host disk, in µs per file, with the paper's
/// ext4 figure beside it.
pub fn fsync_table(rows: &[Row]) -> String {
    let header = [
        "workload",
        "param",
        "journal us/file",
        "none us/file",
        "none/journal",
        "ext4 us/file",
        "ext4/journal",
        "ext4/none",
        "paper ext4 us/file",
    ];
    let mut lines = vec![header.map(String::from).to_vec()];
    for (workload, param) in cells(rows, |w| w == FSYNC) {
        let j = find(rows, workload, param, JOURNAL);
        let n = find(rows, workload, param, NONE);
        let e = find(rows, workload, param, EXT4);
        lines.push(vec![
            workload.to_string(),
            param_label(workload, param),
            us(j),
            us(n),
            ratio(n, j),
            us(e),
            ratio(e, j),
            ratio(e, n),
            format!("{PAPER_EXT4_US:.1}"),
        ]);
    }
    render(&lines)
}

/// Aligns columns: the first two (text) left, the numbers right; a rule
/// under the header.
fn render(lines: &[Vec<String>]) -> String {
    let cols = lines.first().map_or(0, Vec::len);
    let mut width = vec![0; cols];
    for l in lines {
        for (w, c) in width.iter_mut().zip(l) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        for (j, c) in l.iter().enumerate() {
            if j < 2 {
                let _ = write!(out, "{c:<w$}  ", w = width[j]);
            } else {
                let _ = write!(out, "{c:>w$}  ", w = width[j]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        if i == 0 {
            let total = width.iter().sum::<usize>() + 2 * (cols - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

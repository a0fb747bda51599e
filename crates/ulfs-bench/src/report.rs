//! Output: the human table on stdout and the machine-readable CSV.
//!
//! The CSV is long-format (one row per workload, param, peer) so a plotting
//! script can pivot it any way and a new peer is a new row, not a new
//! column; the table is the pivoted view a reader wants, with the ratio
//! that BENCHMARKS.md says is the actual result.

use crate::measure::Sample;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

pub const ULFS: &str = "ulfs-api";
pub const TMPFS: &str = "host-tmpfs";
pub const MEMCPY: &str = "memcpy";

pub struct Row {
    pub workload: &'static str,
    /// N for lseek/fstat, chunk size in bytes for read-after-write.
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
    if workload == "read-after-write" {
        match param {
            p if p >= 1 << 20 && p.is_multiple_of(1 << 20) => format!("{} MiB", p >> 20),
            p if p >= 1 << 10 && p.is_multiple_of(1 << 10) => format!("{} KiB", p >> 10),
            p => format!("{p} B"),
        }
    } else {
        format!("N={param}")
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

fn ratio(num: Option<&Sample>, den: Option<&Sample>) -> String {
    match (num, den) {
        (Some(a), Some(b)) if b.ns_per_op > 0.0 => format!("{:.2}x", a.ns_per_op / b.ns_per_op),
        _ => "-".into(),
    }
}

/// One line per (workload, param), in the order measured.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "workload",
        "param",
        "ulfs ns/op",
        "tmpfs ns/op",
        "tmpfs/ulfs",
        "memcpy ns/op",
        "ulfs/memcpy",
    ];
    let mut lines: Vec<[String; 7]> = vec![header.map(String::from)];
    let mut seen: Vec<(&str, u64)> = Vec::new();
    for r in rows {
        if seen.contains(&(r.workload, r.param)) {
            continue;
        }
        seen.push((r.workload, r.param));
        let u = find(rows, r.workload, r.param, ULFS);
        let t = find(rows, r.workload, r.param, TMPFS);
        let m = find(rows, r.workload, r.param, MEMCPY);
        lines.push([
            r.workload.to_string(),
            param_label(r.workload, r.param),
            ns(u),
            ns(t),
            ratio(t, u),
            ns(m),
            ratio(u, m),
        ]);
    }
    let mut width = [0; 7];
    for l in &lines {
        for (w, c) in width.iter_mut().zip(l) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        for (j, c) in l.iter().enumerate() {
            // Text columns left-aligned, numbers right-aligned.
            if j < 2 {
                let _ = write!(out, "{c:<w$}  ", w = width[j]);
            } else {
                let _ = write!(out, "{c:>w$}  ", w = width[j]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        if i == 0 {
            let total = width.iter().sum::<usize>() + 2 * (width.len() - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

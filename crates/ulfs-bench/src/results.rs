//! The results of a run as data: one [`Row`] per (experiment, system,
//! param), the skips that stand in for rows a system could not produce,
//! and their CSV forms (`results.csv`, `skips.csv`).
//!
//! The CSV is long-format with exactly the columns the issue names
//! (`experiment,system,param,value,unit,stddev`) so other programs can
//! read it without knowing ulfs: a new system is new rows, never a new
//! column. Plots and the report are built from these rows alone, so a
//! CSV from an earlier run can be re-plotted (`--replot`).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// The header of `results.csv`, in order.
pub const CSV_HEADER: &str = "experiment,system,param,value,unit,stddev";
/// The header of `skips.csv`, in order.
pub const SKIPS_HEADER: &str = "experiment,system,reason";

/// What a value measures. Lower is better for every unit except those
/// [`Unit::higher_is_better`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Ns,
    Us,
    Ms,
    S,
    KiB,
    /// Operations per second.
    OpsPerS,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "us",
            Unit::Ms => "ms",
            Unit::S => "s",
            Unit::KiB => "KiB",
            Unit::OpsPerS => "ops/s",
        }
    }

    pub fn parse(s: &str) -> Option<Unit> {
        [
            Unit::Ns,
            Unit::Us,
            Unit::Ms,
            Unit::S,
            Unit::KiB,
            Unit::OpsPerS,
        ]
        .into_iter()
        .find(|u| u.as_str() == s)
    }

    pub fn higher_is_better(self) -> bool {
        matches!(self, Unit::OpsPerS)
    }
}

/// One measured value: the mean over the kept rounds and its sample
/// standard deviation (0 with a single round).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub experiment: String,
    pub system: String,
    pub param: u64,
    pub value: f64,
    pub unit: Unit,
    pub stddev: f64,
}

/// A system an experiment names but could not measure, and why (for
/// example "no cgroup memory controller", "killed by the OOM killer").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub experiment: String,
    pub system: String,
    pub reason: String,
}

/// Commas and newlines cannot appear in the fields we write (names are
/// ours), but a skip reason is free text: keep the CSV one line per skip.
fn clean(text: &str) -> String {
    text.replace([',', '\n', '\r'], ";")
}

/// Writes `text` to `path` through a temporary file renamed over it: a
/// full disk or a crash leaves the old file, never half of a new one (after
/// a merge, the old rows exist nowhere else).
pub fn replace_file(path: &Path, text: &str) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let mut tmp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))?;
    io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

pub fn write_csv(path: &Path, rows: &[Row]) -> io::Result<()> {
    let mut s = format!("{CSV_HEADER}\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{}",
            r.experiment,
            r.system,
            r.param,
            number(r.value),
            r.unit.as_str(),
            number(r.stddev)
        );
    }
    replace_file(path, &s)
}

pub fn write_skips(path: &Path, skips: &[Skip]) -> io::Result<()> {
    let mut s = format!("{SKIPS_HEADER}\n");
    for k in skips {
        let _ = writeln!(s, "{},{},{}", k.experiment, k.system, clean(&k.reason));
    }
    replace_file(path, &s)
}

/// Exactly the value (Rust prints the shortest decimal that reads back
/// as the same f64) and never in exponent notation, which a spreadsheet
/// might misread: a re-plot reads what the run measured.
fn number(v: f64) -> String {
    format!("{v}")
}

fn parse_err(line: usize, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("line {line}: {what}"))
}

/// Reads a `results.csv` written by [`write_csv`] (or by hand, in its
/// schema).
pub fn read_csv(text: &str) -> io::Result<Vec<Row>> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == CSV_HEADER => {}
        _ => return Err(parse_err(1, &format!("the header must be {CSV_HEADER}"))),
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let [experiment, system, param, value, unit, stddev] = f[..] else {
            return Err(parse_err(i + 1, "expected 6 fields"));
        };
        let num = |s: &str, what: &str| -> io::Result<f64> {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| parse_err(i + 1, &format!("{what} {s:?} is not a number")))
        };
        rows.push(Row {
            experiment: experiment.to_string(),
            system: system.to_string(),
            param: param
                .parse()
                .map_err(|_| parse_err(i + 1, &format!("param {param:?} is not an integer")))?,
            value: num(value, "value")?,
            unit: Unit::parse(unit)
                .ok_or_else(|| parse_err(i + 1, &format!("unknown unit {unit:?}")))?,
            stddev: num(stddev, "stddev")?,
        });
    }
    Ok(rows)
}

pub fn read_skips(text: &str) -> io::Result<Vec<Skip>> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == SKIPS_HEADER => {}
        _ => return Err(parse_err(1, &format!("the header must be {SKIPS_HEADER}"))),
    }
    let mut skips = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let mut f = line.splitn(3, ',');
        let (Some(e), Some(s), Some(r)) = (f.next(), f.next(), f.next()) else {
            return Err(parse_err(i + 1, "expected 3 fields"));
        };
        skips.push(Skip {
            experiment: e.to_string(),
            system: s.to_string(),
            reason: r.to_string(),
        });
    }
    Ok(skips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_survive_a_round_trip_through_csv() {
        let rows = vec![
            Row {
                experiment: "fig11-lseek".into(),
                system: "ulfs-none".into(),
                param: 1_000_000,
                value: 4321.5,
                unit: Unit::Us,
                stddev: 12.25,
            },
            Row {
                experiment: "postmark".into(),
                system: "host-ext4".into(),
                param: 1000,
                value: 0.1234,
                unit: Unit::S,
                stddev: 0.0,
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.csv");
        write_csv(&p, &rows).unwrap();
        let back = read_csv(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(back, rows);
    }

    #[test]
    fn a_skip_reason_with_commas_stays_one_record() {
        let skips = vec![Skip {
            experiment: "fig9-memory-limit".into(),
            system: "host-tmpfs".into(),
            reason: "killed, by the OOM killer\nat 1 MiB".into(),
        }];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.csv");
        write_skips(&p, &skips).unwrap();
        let back = read_skips(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].reason, "killed; by the OOM killer;at 1 MiB");
    }

    #[test]
    fn a_csv_with_another_schema_is_refused() {
        assert!(read_csv("workload,param,peer,ns_per_op,reps\n").is_err());
        let bad = format!("{CSV_HEADER}\nfig11-lseek,host-tmpfs,100,abc,us,0\n");
        assert!(read_csv(&bad).is_err());
        let bad = format!("{CSV_HEADER}\nfig11-lseek,host-tmpfs,100,1,parsecs,0\n");
        assert!(read_csv(&bad).is_err());
    }
}

//! `REPORT.md`: the run's results as a reader wants them, built from the
//! rows and skips alone (like the plots) so an old CSV can be re-reported.
//!
//! BENCHMARKS.md says a result is a ratio against a peer measured in the
//! same run: absolute times drift on shared machines, ratios hold. So each
//! figure gets a table of ratios to the figure's reference ulfs system,
//! oriented so that above 1 always means ulfs is better, with only the
//! reference's own value given in absolute terms; and one sentence saying
//! what the figure shows at its largest parameter, where the differences
//! in scaling are plainest. Systems that could not be measured are listed
//! with the reason, so a missing column is never a silent gap.

use crate::catalog::{FIGURES, Figure};
use crate::plot::{sort_systems, unit_text};
use crate::results::{Row, Skip, Unit};
use std::fmt::Write as _;
use std::path::Path;

pub struct Context<'a> {
    pub machine: &'a str,
    pub quick: bool,
    pub command: &'a str,
    pub when: &'a str,
}

const MISSING: &str = "–";

fn find<'a>(rows: &'a [Row], experiment: &str, param: u64, system: &str) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.experiment == experiment && r.param == param && r.system == system && r.value.is_finite()
    })
}

/// The ratio of `system` to the figure's reference at one param: system value / reference value for lower-is-better units, inverted for higher-is-better, so > 1 always means ulfs's reference system is better. None if either is missing or the reference value is 0.
pub fn ratio(
    rows: &[Row],
    experiment: &str,
    param: u64,
    system: &str,
    reference: &str,
) -> Option<f64> {
    let s = find(rows, experiment, param, system)?;
    let r = find(rows, experiment, param, reference)?;
    // Values in different units have no meaningful ratio.
    if r.value == 0.0 || s.unit != r.unit {
        return None;
    }
    let q = if r.unit.higher_is_better() {
        r.value / s.value
    } else {
        s.value / r.value
    };
    q.is_finite().then_some(q)
}

/// `significant` digits, keeping trailing zeros: "0.050", "1.0", "4.32".
fn sig(v: f64, significant: i32) -> (String, usize) {
    if v == 0.0 || !v.is_finite() {
        return ("0".to_string(), 0);
    }
    let decimals = (significant - 1 - v.abs().log10().floor() as i32).clamp(0, 15) as usize;
    (format!("{v:.decimals$}"), decimals)
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "12.3×": two significant digits below 10, one decimal (none if it is
/// 0) below 100, whole numbers above: all the precision a noisy ratio has.
fn factor(r: f64) -> String {
    if r >= 99.95 {
        format!("{}×", thousands(r.round() as u64))
    } else if r >= 9.995 {
        let s = format!("{r:.1}");
        format!("{}×", s.strip_suffix(".0").unwrap_or(&s))
    } else {
        format!("{}×", sig(r, 2).0)
    }
}

/// An absolute value: three significant digits, thousands separated
/// when large; returns the decimals used so the stddev can match them.
fn magnitude(v: f64) -> (String, usize) {
    if v.abs() >= 999.5 {
        let s = thousands(v.abs().round() as u64);
        (if v < 0.0 { format!("-{s}") } else { s }, 0)
    } else {
        sig(v, 3)
    }
}

/// "1,234 ± 12 µs"; the ± is left out for a single round (stddev 0).
fn absolute(r: &Row) -> String {
    let (v, decimals) = magnitude(r.value);
    let unit = unit_text(r.unit);
    if r.stddev > 0.0 && r.stddev.is_finite() {
        let sd = if decimals == 0 {
            thousands(r.stddev.round() as u64)
        } else {
            format!("{:.decimals$}", r.stddev)
        };
        format!("{v} ± {sd} {unit}")
    } else {
        format!("{v} {unit}")
    }
}

/// The unit in parentheses at the end of an x label: "bytes" in "chunk
/// size (bytes)", with the label before it.
fn split_label(x_label: &str) -> Option<(&str, &str)> {
    let open = x_label.rfind(" (")?;
    let unit = x_label[open + 2..].strip_suffix(')')?;
    Some((&x_label[..open], unit))
}

/// A param as a reader wants it: "4 KiB" for bytes, "8 MiB" when the
/// label names a unit, "1,000,000" otherwise.
fn param_text(fig: &Figure, p: u64) -> String {
    if let (Some(word), 0) = (fig.zero_means, p) {
        return word.to_string();
    }
    match split_label(fig.x_label) {
        Some((_, "bytes")) => {
            let mut v = p as f64;
            let mut unit = "B";
            for next in ["KiB", "MiB", "GiB", "TiB"] {
                if v < 1024.0 {
                    break;
                }
                v /= 1024.0;
                unit = next;
            }
            let n = format!("{v:.2}");
            let n = n.trim_end_matches('0').trim_end_matches('.');
            format!("{n} {unit}")
        }
        Some((_, unit)) => format!("{} {unit}", thousands(p)),
        None => thousands(p),
    }
}

/// "At 1,000,000 calls" or, when the label carries a unit, "At chunk size
/// 1 MiB".
fn at(fig: &Figure, p: u64) -> String {
    match split_label(fig.x_label) {
        Some((noun, _)) => format!("At {noun} {}", param_text(fig, p)),
        None => format!("At {} {}", thousands(p), fig.x_label),
    }
}

/// The systems with rows for `fig`, in the plots' order.
fn systems<'a>(fig: &Figure, rows: &'a [Row]) -> Vec<&'a str> {
    let mut names: Vec<&str> = rows
        .iter()
        .filter(|r| r.experiment == fig.name)
        .map(|r| r.system.as_str())
        .collect();
    sort_systems(&mut names);
    names.dedup();
    names
}

fn params(fig: &Figure, rows: &[Row], system: Option<&str>) -> Vec<u64> {
    let mut ps: Vec<u64> = rows
        .iter()
        .filter(|r| r.experiment == fig.name && r.value.is_finite())
        .filter(|r| system.is_none_or(|s| r.system == s))
        .map(|r| r.param)
        .collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}

/// One sentence saying what the figure shows, from its rows (see below).
pub fn sentence(fig: &Figure, rows: &[Row]) -> String {
    sentence_with(fig, rows, &[])
}

/// The system `system`'s ratios are taken against in `fig`.
fn reference_of<'a>(fig: &'a Figure, system: &str) -> &'a str {
    match fig.disk_reference {
        Some(d) if system == "host-ext4" => d,
        _ => fig.reference,
    }
}

fn sentence_with(fig: &Figure, rows: &[Row], skips: &[Skip]) -> String {
    let reference = fig.reference;
    let ps = params(fig, rows, Some(reference));
    let focus = if fig.focus_smallest {
        // A param of 0 that is not a number (no limit) is not the point.
        let numeric = ps.iter().find(|p| fig.zero_means.is_none() || **p > 0);
        numeric.or(ps.first())
    } else {
        ps.last()
    };
    let Some(&p) = focus else {
        let why = skips
            .iter()
            .find(|k| k.experiment == fig.name && k.system == reference)
            .map(|k| one_line(&k.reason));
        return match why {
            Some(why) => format!("No {reference} result: {}.", why.trim_end_matches('.')),
            None => format!("No {reference} result."),
        };
    };
    let Some(r) = find(rows, fig.name, p, reference) else {
        return format!("No {reference} result.");
    };
    let (verb, what, better) = match r.unit {
        Unit::KiB => ("uses", "the memory of", Some("less")),
        Unit::OpsPerS => ("achieves", "the throughput of", None),
        _ => ("takes", "the time of", Some("faster")),
    };
    let mut clauses = Vec::new();
    for sys in systems(fig, rows)
        .into_iter()
        .filter(|s| *s != reference && reference_of(fig, s) == reference)
    {
        let Some(o) = find(rows, fig.name, p, sys) else {
            continue;
        };
        if o.unit != r.unit || o.value == 0.0 {
            continue;
        }
        // The reference relative to the other system: below 1 is better
        // for time and memory, above 1 for throughput.
        let q = r.value / o.value;
        let of = if clauses.is_empty() { what } else { "that of" };
        let mut c = format!("{} {of} {sys}", factor(q));
        if let Some(word) = better.filter(|_| q > 0.0 && q < 0.95) {
            let _ = write!(c, " ({} {word})", factor(1.0 / q));
        }
        clauses.push(c);
    }
    let head = format!("{}, {reference}", at(fig, p));
    let main = match clauses.len() {
        0 => format!(
            "{head} {verb} {}; no other system has a result there",
            absolute(r)
        ),
        1 => format!("{head} {verb} {}", clauses[0]),
        n => format!(
            "{head} {verb} {} and {}",
            clauses[..n - 1].join(", "),
            clauses[n - 1]
        ),
    };
    // The disk pair, image and files both on ext4.
    let disk = fig.disk_reference.and_then(|d| {
        let (ours, theirs) = (
            find(rows, fig.name, p, d)?,
            find(rows, fig.name, p, "host-ext4")?,
        );
        (ours.unit == theirs.unit && theirs.value > 0.0).then(|| {
            format!(
                "; on the disk, {d} {verb} {} {what} host-ext4",
                factor(ours.value / theirs.value)
            )
        })
    });
    format!("{main}{}.", disk.unwrap_or_default())
}

/// A code span that survives backticks in `text`.
fn code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn table(s: &mut String, fig: &Figure, rows: &[Row]) {
    let reference = fig.reference;
    let all = systems(fig, rows);
    let params = params(fig, rows, None);
    if all.is_empty() || params.is_empty() {
        return;
    }
    let others: Vec<&str> = all.iter().copied().filter(|x| *x != reference).collect();
    // Without the reference there is nothing to divide by: give every
    // system's own value rather than a table of dashes.
    let absolute_only = !all.contains(&reference);
    let mut head = format!("| {} |", fig.x_label);
    if absolute_only {
        let _ = writeln!(
            s,
            "No {reference} rows, so this table gives absolute values.\n"
        );
    } else {
        let _ = write!(head, " {reference} (reference) |");
    }
    for o in &others {
        match reference_of(fig, o) {
            r if r != reference && !absolute_only => {
                let _ = write!(head, " {o} (vs {r}) |");
            }
            _ => {
                let _ = write!(head, " {o} |");
            }
        }
    }
    let columns = others.len() + usize::from(!absolute_only);
    let _ = writeln!(s, "{head}\n|---|{}", "---:|".repeat(columns));
    for &p in &params {
        let mut line = format!("| {} |", param_text(fig, p));
        if !absolute_only {
            let cell = find(rows, fig.name, p, reference).map_or(MISSING.to_string(), absolute);
            let _ = write!(line, " {cell} |");
        }
        for o in &others {
            let cell = if absolute_only {
                find(rows, fig.name, p, o).map(absolute)
            } else {
                ratio(rows, fig.name, p, o, reference_of(fig, o)).map(factor)
            };
            let _ = write!(line, " {} |", cell.as_deref().unwrap_or(MISSING));
        }
        let _ = writeln!(s, "{line}");
    }
    s.push('\n');
}

fn section(s: &mut String, fig: &Figure, rows: &[Row], skips: &[Skip], png: bool) {
    let _ = writeln!(s, "## {}\n\n{}\n", fig.title, code(fig.name));
    if png {
        let _ = writeln!(s, "![{}]({}.png)\n", fig.title, fig.name);
    }
    let _ = writeln!(s, "Workload: {}.\n", fig.workload);
    let _ = writeln!(s, "{}\n", sentence_with(fig, rows, skips));
    table(s, fig, rows);
    let mine: Vec<&Skip> = skips.iter().filter(|k| k.experiment == fig.name).collect();
    if !mine.is_empty() {
        s.push_str("Not measured:\n\n");
        for k in mine {
            let _ = writeln!(s, "- {}: {}", k.system, one_line(&k.reason));
        }
        s.push('\n');
    }
}

const HOW_TO_READ: &str = "Each table gives, per parameter, every system's value divided by the \
value of the figure's reference ulfs system (inverted where higher is better, as for \
throughput), so a number above 1 means ulfs is better than that system by that factor, and \
below 1 that the system beats ulfs. The reference column shows the reference's own value with \
its unit: the mean over the kept rounds ± its sample standard deviation (no ± after a single \
round). Ratios are what to compare across runs: the machine is shared and absolute times \
drift, while ratios measured side by side hold. A dash is a value that was not measured.";

/// Writes the report. `pngs` are the figure names that have a PNG named "<name>.png" next to the report.
pub fn write(
    path: &Path,
    ctx: &Context,
    rows: &[Row],
    skips: &[Skip],
    pngs: &[&str],
) -> std::io::Result<()> {
    let mut s = String::from("# ulfs bench report\n\n");
    let _ = writeln!(s, "- Machine: {}", one_line(ctx.machine));
    let _ = writeln!(s, "- When: {}", one_line(ctx.when));
    let _ = writeln!(s, "- Command: {}", code(&one_line(ctx.command)));
    let mode = if ctx.quick {
        "quick (reduced parameters and rounds: indicative only)"
    } else {
        "full"
    };
    let _ = writeln!(s, "- Run: {mode}\n");
    let _ = writeln!(s, "## How to read\n\n{HOW_TO_READ}\n");

    for fig in FIGURES {
        let has_rows = rows.iter().any(|r| r.experiment == fig.name);
        let has_skips = skips.iter().any(|k| k.experiment == fig.name);
        if has_rows || has_skips {
            section(&mut s, fig, rows, skips, pngs.contains(&fig.name));
        }
    }

    let known = |e: &str| FIGURES.iter().any(|f| f.name == e);
    let stray: Vec<&Skip> = skips.iter().filter(|k| !known(&k.experiment)).collect();
    let mut unknown: Vec<&str> = rows
        .iter()
        .map(|r| r.experiment.as_str())
        .filter(|e| !known(e))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    if !stray.is_empty() || !unknown.is_empty() {
        s.push_str("## Other experiments\n\n");
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.iter().map(|e| code(e)).collect();
            let _ = writeln!(
                s,
                "Rows for experiments this report does not describe (see `results.csv`): {}.\n",
                names.join(", ")
            );
        }
        for k in stray {
            let _ = writeln!(
                s,
                "- {} {}: {}",
                code(&k.experiment),
                k.system,
                one_line(&k.reason)
            );
        }
        s.push('\n');
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str) -> &'static Figure {
        FIGURES.iter().find(|f| f.name == name).unwrap()
    }

    fn row(exp: &str, system: &str, param: u64, value: f64, unit: Unit) -> Row {
        Row {
            experiment: exp.into(),
            system: system.into(),
            param,
            value,
            unit,
            stddev: value / 100.0,
        }
    }

    fn lseek() -> Vec<Row> {
        let e = "fig11-lseek";
        vec![
            row(e, "host-tmpfs", 100, 100.0, Unit::Us),
            row(e, "ulfs-journal", 100, 50.0, Unit::Us),
            row(e, "host-tmpfs", 1_000_000, 1000.0, Unit::Us),
            row(e, "ulfs-journal", 1_000_000, 50.0, Unit::Us),
            row(e, "ulfs-none", 1_000_000, 50.0, Unit::Us),
        ]
    }

    #[test]
    fn ratios_are_above_one_when_the_reference_is_better() {
        let rows = lseek();
        let r = |p, s| ratio(&rows, "fig11-lseek", p, s, "ulfs-journal");
        assert_eq!(r(1_000_000, "host-tmpfs"), Some(20.0));
        assert_eq!(r(100, "host-tmpfs"), Some(2.0));
        assert_eq!(r(1_000_000, "ulfs-none"), Some(1.0));
        assert_eq!(r(100, "ulfs-none"), None, "missing system");
        assert_eq!(r(7, "host-tmpfs"), None, "missing param");
        assert_eq!(
            ratio(&rows, "fig12-fstat", 100, "host-tmpfs", "ulfs-journal"),
            None
        );

        let e = "postmark";
        let ops = vec![
            row(e, "host-ext4", 10, 250.0, Unit::OpsPerS),
            row(e, "ulfs-preload", 10, 1000.0, Unit::OpsPerS),
            row(e, "ulfs-none", 10, 2000.0, Unit::OpsPerS),
        ];
        assert_eq!(ratio(&ops, e, 10, "host-ext4", "ulfs-preload"), Some(4.0));
        assert_eq!(ratio(&ops, e, 10, "ulfs-none", "ulfs-preload"), Some(0.5));

        let zero = vec![
            row(e, "host-ext4", 10, 250.0, Unit::S),
            row(e, "ulfs-preload", 10, 0.0, Unit::S),
        ];
        assert_eq!(ratio(&zero, e, 10, "host-ext4", "ulfs-preload"), None);
    }

    #[test]
    fn the_sentence_gives_the_factor_at_the_largest_param() {
        let s = sentence(fig("fig11-lseek"), &lseek());
        assert_eq!(
            s,
            "At 1,000,000 calls, ulfs-journal takes 0.050× the time of host-tmpfs \
             (20× faster) and 1.0× that of ulfs-none."
        );

        let e = "fig8-memory-peak";
        let mem = vec![
            row(e, "host-tmpfs", 100, 100_000.0, Unit::KiB),
            row(e, "ulfs-journal", 100, 40_000.0, Unit::KiB),
        ];
        let s = sentence(fig(e), &mem);
        assert!(
            s.contains("uses 0.40× the memory of host-tmpfs (2.5× less)"),
            "{s}"
        );

        let e = "fig6-read-after-write-fresh";
        let ops = vec![
            row(e, "host-tmpfs", 1 << 20, 100.0, Unit::OpsPerS),
            row(e, "ulfs-journal", 1 << 20, 300.0, Unit::OpsPerS),
            row(e, "ulfs-journal", 4096, 300.0, Unit::OpsPerS),
        ];
        let s = sentence(fig(e), &ops);
        assert!(s.starts_with("At chunk size 1 MiB, "), "{s}");
        assert!(
            s.contains("achieves 3.0× the throughput of host-tmpfs"),
            "{s}"
        );

        // Fig. 9 looks at the tightest limit, never at "no limit" (0).
        let e = "fig9-memory-limit";
        let limits = vec![
            row(e, "ulfs-journal", 0, 10.0, Unit::Ms),
            row(e, "ulfs-journal-no-budget", 0, 10.0, Unit::Ms),
            row(e, "ulfs-journal", 1, 40.0, Unit::Ms),
            row(e, "ulfs-journal-no-budget", 1, 400.0, Unit::Ms),
            row(e, "ulfs-journal", 2, 30.0, Unit::Ms),
        ];
        let s = sentence(fig(e), &limits);
        assert!(s.starts_with("At memory limit 1 MiB, "), "{s}");
        assert!(
            s.contains("0.10× the time of ulfs-journal-no-budget"),
            "{s}"
        );

        let no_ref = vec![row("fig12-fstat", "host-tmpfs", 100, 1.0, Unit::Us)];
        assert_eq!(
            sentence(fig("fig12-fstat"), &no_ref),
            "No ulfs-journal result."
        );
        let skips = [Skip {
            experiment: "fig12-fstat".into(),
            system: "ulfs-journal".into(),
            reason: "crashed\nat mount.".into(),
        }];
        assert_eq!(
            sentence_with(fig("fig12-fstat"), &no_ref, &skips),
            "No ulfs-journal result: crashed at mount."
        );
    }

    #[test]
    fn numbers_are_formatted_for_reading() {
        let f: Vec<String> = [0.84, 1.94, 0.0075, 12.34, 20.01, 435.2, 1234.0]
            .iter()
            .map(|r| factor(*r))
            .collect();
        assert_eq!(
            f,
            ["0.84×", "1.9×", "0.0075×", "12.3×", "20×", "435×", "1,234×"]
        );
        assert_eq!(
            param_text(fig("fig6-read-after-write-fresh"), 4096),
            "4 KiB"
        );
        assert_eq!(param_text(fig("fig6-read-after-write-fresh"), 64), "64 B");
        assert_eq!(param_text(fig("fig11-lseek"), 1_000_000), "1,000,000");
        assert_eq!(param_text(fig("fig9-memory-limit"), 8), "8 MiB");
        assert_eq!(param_text(fig("fig9-memory-limit"), 0), "none");
        let r = row("x", "y", 1, 4321.5, Unit::Us);
        assert_eq!(absolute(&r), "4,322 ± 43 µs");
        let r = Row {
            stddev: 0.0,
            ..row("x", "y", 1, 0.01234, Unit::S)
        };
        assert_eq!(absolute(&r), "0.0123 s");
    }

    #[test]
    fn the_report_has_tables_skips_and_only_the_listed_images() {
        let mut rows = lseek();
        rows.push(row("fig9-memory-limit", "ulfs-journal", 8, 10.0, Unit::Ms));
        rows.push(row("fig9-memory-limit", "host-tmpfs", 8, 30.0, Unit::Ms));
        let skip = |e: &str, s: &str, why: &str| Skip {
            experiment: e.into(),
            system: s.into(),
            reason: why.into(),
        };
        let skips = [
            skip("fig11-lseek", "host-ext4", "no disk file system here"),
            skip("fig12-fstat", "ulfs-journal", "crashed at mount"),
            skip("mystery", "ulfs-fuse", "no /dev/fuse"),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/REPORT.md");
        let ctx = Context {
            machine: "2 cores, test box",
            quick: true,
            command: "ulfs-bench --quick",
            when: "2026-11-24",
        };
        write(&path, &ctx, &rows, &skips, &["fig11-lseek"]).unwrap();
        let md = std::fs::read_to_string(&path).unwrap();
        for want in [
            "# ulfs bench report",
            "2 cores, test box",
            "`ulfs-bench --quick`",
            "## How to read",
            "## Fig. 11: lseek",
            "| calls | ulfs-journal (reference) | host-tmpfs | ulfs-none |",
            "| 1,000,000 | 50.0 ± 0.5 µs | 20× | 1.0× |",
            "| 100 | 50.0 ± 0.5 µs | 2.0× | – |",
            "![Fig. 11: lseek](fig11-lseek.png)",
            "- host-ext4: no disk file system here",
            "## Fig. 12: fstat",
            "No ulfs-journal result: crashed at mount.",
            "- ulfs-journal: crashed at mount",
            "| memory limit (MiB) | ulfs-journal (reference) | host-tmpfs |",
            "| 8 MiB | 10.0 ± 0.1 ms | 3.0× |",
            "## Other experiments",
            "- `mystery` ulfs-fuse: no /dev/fuse",
        ] {
            assert!(md.contains(want), "missing {want:?} in\n{md}");
        }
        assert!(!md.contains("fig9-memory-limit.png"));
        assert!(!md.contains("## Fig. 13"), "a figure with nothing to say");
        // Figures keep the catalog's order.
        assert!(md.find("## Fig. 9").unwrap() < md.find("## Fig. 11").unwrap());
    }
}

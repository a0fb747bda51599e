//! Smoke test: `ulfs bench --quick` runs every experiment end to end and
//! writes what it promises: `results.csv` in the agreed schema, a row for
//! every (figure, system) an experiment names or a stated skip, a valid
//! PNG per figure with rows, and a report. Timings are never asserted: the
//! machines are shared and noisy (BENCHMARKS.md).
//!
//! Runs the `ulfs` binary of the workspace (`bench` hands over to the
//! `ulfs-bench` beside it), so the workspace must be built first, as
//! `scripts/test.sh` does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ulfs_bin() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_ulfs-bench"));
    let ulfs = bench.with_file_name("ulfs");
    assert!(
        ulfs.is_file() && bench.with_file_name("libulfs_preload.so").is_file(),
        "{} or libulfs_preload.so is missing: cargo build --workspace first",
        ulfs.display()
    );
    ulfs
}

/// `--list`: experiment -> (figures, systems).
fn listed() -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let out = Command::new(ulfs_bin())
        .args(["bench", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut map = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        match words.first().map(String::as_str) {
            Some("figures:") => {
                map.entry(current.clone())
                    .or_insert_with(|| (Vec::new(), Vec::new()))
                    .0 = words[1..].to_vec()
            }
            Some("systems:") => {
                map.entry(current.clone())
                    .or_insert_with(|| (Vec::new(), Vec::new()))
                    .1 = words[1..].to_vec()
            }
            Some(name) => current = name.to_string(),
            None => {}
        }
    }
    map
}

fn png_dimensions(path: &Path) -> (u32, u32) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("{}: not a PNG: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // A plot, not a blank canvas: many distinct colours.
    let distinct: BTreeSet<&[u8]> = buf[..info.buffer_size()]
        .chunks(info.line_size / info.width as usize)
        .collect();
    assert!(distinct.len() > 5, "{}: a flat image", path.display());
    (info.width, info.height)
}

#[test]
fn a_quick_run_writes_every_figure_or_says_why_not() {
    let experiments = listed();
    assert_eq!(
        experiments.keys().cloned().collect::<BTreeSet<_>>(),
        [
            "fig6",
            "fig7",
            "fig8",
            "fig9",
            "fig10",
            "fig11",
            "fig12",
            "fig13",
            "fig14",
            "postmark",
            "fsync-loop",
            "open",
            "create",
            "mount",
            "fuse",
            "server",
            "clients"
        ]
        .map(String::from)
        .into(),
        "the issue's experiments, by name"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested").join("out");
    let run = Command::new(ulfs_bin())
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "ulfs bench failed: {stderr}");

    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("experiment,system,param,value,unit,stddev")
    );
    let mut have: BTreeSet<(String, String)> = BTreeSet::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 6, "{line}");
        let value: f64 = f[3].parse().unwrap();
        let stddev: f64 = f[5].parse().unwrap();
        assert!(value.is_finite() && value >= 0.0, "{line}");
        assert!(stddev.is_finite() && stddev >= 0.0, "{line}");
        f[2].parse::<u64>().unwrap();
        assert!(
            ["ns", "us", "ms", "s", "KiB", "ops/s"].contains(&f[4]),
            "{line}"
        );
        have.insert((f[0].to_string(), f[1].to_string()));
    }

    let skips = std::fs::read_to_string(out.join("skips.csv")).unwrap();
    let mut skip_lines = skips.lines();
    assert_eq!(skip_lines.next(), Some("experiment,system,reason"));
    let mut skipped: BTreeSet<(String, String)> = BTreeSet::new();
    for line in skip_lines {
        let f: Vec<&str> = line.splitn(3, ',').collect();
        assert_eq!(f.len(), 3, "{line}");
        // The reasons a run on a root machine with everything installed
        // may give: ulfs-fuse's whole programs and memory (not measured
        // yet; its other cells are), tar on the C API (which runs no
        // program), the OOM killer under fig. 9's tightest limits, or a
        // process there that thrashes without end.
        // Elsewhere (not root, no cgroups, programs not installed) what
        // is missing is said, and is a skip of this test's strictness;
        // scripts/test.sh requires all as root.
        let expected = f[1].starts_with("ulfs-fuse")
            || (f[0] == "fuse-tar-extract" && f[1] == "ulfs-journal")
            || (f[0] == "fig9-memory-limit"
                && (f[2].contains("OOM killer")
                    || f[2].contains("no answer in")
                    || f[2].contains("did not fit")));
        let environment = f[2].contains("missing:") || f[2].contains("skipped:");
        if !expected && environment && std::env::var_os("ULFS_REQUIRE_ALL_TESTS").is_none() {
            println!("SKIPPED: ulfs bench could not measure here: {line}");
        } else {
            assert!(expected, "unexpected skip: {line}");
        }
        skipped.insert((f[0].to_string(), f[1].to_string()));
    }

    for (name, (figures, systems)) in &experiments {
        assert!(!figures.is_empty() && !systems.is_empty(), "{name}");
        for figure in figures {
            for system in systems {
                let key = (figure.clone(), system.clone());
                assert!(
                    have.contains(&key) || skipped.contains(&key),
                    "{name}: no row and no skip for {figure} on {system}"
                );
            }
            // Every figure has rows, so every figure has a plot.
            assert!(
                have.iter().any(|(f, _)| f == figure),
                "{figure}: no rows at all"
            );
            let (w, h) = png_dimensions(&out.join(format!("{figure}.png")));
            assert!(w >= 640 && h >= 400, "{figure}.png is {w}x{h}");
        }
    }

    let report = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    for (figures, _) in experiments.values() {
        for figure in figures {
            assert!(
                report.contains(&format!("({figure}.png)")),
                "REPORT.md does not show {figure}.png"
            );
        }
    }

    // The plots and report come from the CSVs alone: drawn again, they
    // are there again.
    for figure in experiments.values().flat_map(|(f, _)| f) {
        std::fs::remove_file(out.join(format!("{figure}.png"))).unwrap();
    }
    let replot = Command::new(ulfs_bin())
        .args(["bench", "--replot"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        replot.status.success(),
        "{}",
        String::from_utf8_lossy(&replot.stderr)
    );
    for figure in experiments.values().flat_map(|(f, _)| f) {
        png_dimensions(&out.join(format!("{figure}.png")));
    }

    // One experiment again into the same directory: its figures are
    // measured anew, every other figure's rows and plots are kept.
    let before = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let again = Command::new(ulfs_bin())
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .arg("fig11")
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let after = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let others = |text: &str| -> BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with("fig11-"))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        others(&before),
        others(&after),
        "other figures' rows changed"
    );
    assert!(after.lines().any(|l| l.starts_with("fig11-lseek,")));
    let report = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(report.contains("(fig6-read-after-write-fresh.png)"));
}

#[test]
fn a_wrong_experiment_or_flag_is_refused_with_the_names() {
    let out = Command::new(ulfs_bin())
        .args(["bench", "--quick", "fig99"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fig99") && err.contains("fig6"), "{err}");
    let out = Command::new(ulfs_bin())
        .args(["bench", "--frobnicate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // An --out whose results.csv is not one of ours is refused before
    // anything is measured, and left as it was.
    let dir = tempfile::tempdir().unwrap();
    let theirs = "name,score\nalice,3\n";
    std::fs::write(dir.path().join("results.csv"), theirs).unwrap();
    let out = Command::new(ulfs_bin())
        .args(["bench", "--quick", "--out"])
        .arg(dir.path())
        .arg("fig11")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("choose another --out"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("results.csv")).unwrap(),
        theirs
    );
}

/// ulfs-server's worker starts `ulfs serve` for its image and stops it:
/// on `quit` it stops the server and checks the image (its exit status
/// says both went well); killed, it takes the server with it (SIGTERM on
/// the parent's death), which commits and marks the image clean.
#[test]
fn the_server_worker_stops_its_server_even_when_killed() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let ulfs = ulfs_bin();
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_ulfs-bench"));
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("s.img");
    let socket = dir.path().join("s.sock");
    let mkfs = Command::new(&ulfs)
        .arg("mkfs")
        .arg(&image)
        .arg("64M")
        .output()
        .unwrap();
    assert!(
        mkfs.status.success(),
        "{}",
        String::from_utf8_lossy(&mkfs.stderr)
    );
    for killed in [false, true] {
        let mut worker = Command::new(&bench)
            .args(["--internal-worker", "server"])
            .arg(&image)
            .env("ULFS_BENCH_ULFS", &ulfs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut to = worker.stdin.take().unwrap();
        let mut from = BufReader::new(worker.stdout.take().unwrap());
        for request in ["null 100", "fstat 100", "pread4k 100", "metadata 20"] {
            writeln!(to, "{request}").unwrap();
            let mut line = String::new();
            from.read_line(&mut line).unwrap();
            assert!(line.starts_with("ok "), "{request}: {line}");
        }
        assert!(socket.exists(), "the server listens beside the image");
        if killed {
            worker.kill().unwrap();
            worker.wait().unwrap();
        } else {
            writeln!(to, "quit").unwrap();
            assert!(worker.wait().unwrap().success(), "stop or fsck failed");
        }
        // The server removes its socket, then lets go of the image (fsck
        // is refused while it holds it).
        let start = std::time::Instant::now();
        let fsck = loop {
            let fsck = Command::new(&ulfs)
                .arg("fsck")
                .arg(&image)
                .output()
                .unwrap();
            if (fsck.status.success() && !socket.exists())
                || start.elapsed() > std::time::Duration::from_secs(30)
            {
                break fsck;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!socket.exists(), "the server outlived its worker");
        assert!(
            fsck.status.success(),
            "{}{}",
            String::from_utf8_lossy(&fsck.stdout),
            String::from_utf8_lossy(&fsck.stderr)
        );
        let info = Command::new(&ulfs)
            .arg("info")
            .arg(&image)
            .output()
            .unwrap();
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(
            info.lines()
                .any(|l| l.starts_with("clean:") && l.ends_with("yes")),
            "{info}"
        );
    }
}

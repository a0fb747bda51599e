//! Smoke test: the benchmark binary runs end to end in `--quick` mode and
//! writes a CSV with one sane row per (workload, param, peer). Timings are
//! never asserted: the machines are shared and noisy (BENCHMARKS.md).

use std::collections::HashMap;
use std::process::Command;

/// What `--quick` measures; kept in step with `Plan::new` in main.rs (and
/// the default `--fsync-files` of `--quick` in args.rs).
fn expected() -> Vec<(&'static str, u64, &'static str)> {
    const MEMORY: [&str; 3] = ["ulfs-journal", "ulfs-none", "host-tmpfs"];
    let mut rows = Vec::new();
    for workload in ["lseek", "fstat"] {
        for n in [100, 10_000] {
            for peer in MEMORY {
                rows.push((workload, n, peer));
            }
        }
    }
    for chunk in [64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20] {
        for peer in MEMORY.into_iter().chain(["memcpy"]) {
            rows.push(("read-after-write", chunk, peer));
        }
    }
    for files in [1, 10] {
        for peer in MEMORY {
            rows.push(("file-count", files, peer));
        }
    }
    for peer in ["ulfs-journal", "ulfs-none", "host-ext4"] {
        rows.push(("fsync", 50, peer));
    }
    rows
}

#[test]
fn quick_run_writes_a_complete_csv() {
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: the binary must create it.
    let out = dir.path().join("nested").join("quick.csv");
    let output = Command::new(env!("CARGO_BIN_EXE_ulfs-bench"))
        .arg("--quick")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "ulfs-bench failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for column in ["tmpfs/journal", "none/journal", "ext4/journal"] {
        assert!(
            stdout.contains(column),
            "no {column} column on stdout:\n{stdout}"
        );
    }

    let csv = std::fs::read_to_string(&out).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("workload,param,peer,ns_per_op,reps"));
    let mut got: HashMap<(String, u64, String), (f64, u64)> = HashMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 5, "bad row {line:?}");
        let key = (f[0].to_string(), f[1].parse().unwrap(), f[2].to_string());
        let val = (f[3].parse::<f64>().unwrap(), f[4].parse::<u64>().unwrap());
        assert!(got.insert(key, val).is_none(), "duplicate row {line:?}");
    }
    let want = expected();
    for (workload, param, peer) in &want {
        let key = (workload.to_string(), *param, peer.to_string());
        let Some(&(ns, reps)) = got.get(&key) else {
            panic!("no row for {key:?} in\n{csv}");
        };
        assert!(ns.is_finite() && ns > 0.0, "ns_per_op {ns} for {key:?}");
        assert!(reps >= 1, "reps {reps} for {key:?}");
    }
    assert_eq!(got.len(), want.len(), "unexpected extra rows in\n{csv}");
}

//! Replays every kept fuzz input through its harness: the corpus each
//! target grew (`fuzz/corpus/<target>/`) and the inputs that once found a
//! bug (`fuzz/regressions/<target>/`), so what fuzzing found stays fixed on
//! the stable toolchain that CI has. Fuzzing itself is run by hand
//! (`fuzz/README.md`). A target whose directories are missing fails: the
//! corpora live in the repository.

use std::path::{Path, PathBuf};
use ulfs_testkit::harness::{mount_and_use, ops_against_host, repair_never_worse};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs `harness` on every input kept for `target`; returns how many.
fn replay(target: &str, harness: fn(&[u8])) -> usize {
    let mut n = 0;
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.is_file() && p.file_name() != Some("README".as_ref()))
            .collect();
        files.sort();
        for file in files {
            let data = std::fs::read(&file).expect("read an input");
            let caught = std::panic::catch_unwind(|| harness(&data));
            assert!(caught.is_ok(), "{target}: {} fails", file.display());
            n += 1;
        }
    }
    eprintln!("{target}: {n} inputs replayed");
    n
}

#[test]
fn mount_and_use_inputs() {
    assert!(replay("mount_and_use", mount_and_use) > 0);
}

#[test]
fn repair_never_worse_inputs() {
    assert!(replay("repair_never_worse", repair_never_worse) > 0);
}

#[test]
fn ops_against_host_inputs() {
    assert!(replay("ops_against_host", ops_against_host) > 0);
}

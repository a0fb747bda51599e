//! `ulfs bench`: hands over to the `ulfs-bench` program built beside this
//! one (crate `ulfs-bench`). The benchmarks stay a program of their own so
//! that `ulfs` does not carry the plotting libraries, and so that the
//! benchmark's workers (which are `ulfs-bench` itself) start small.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::{CliError, CliResult};

const PROGRAM: &str = "ulfs-bench";

pub fn run(args: &[OsString]) -> CliResult {
    let me = std::env::current_exe().map_err(|e| CliError::io("bench", &e))?;
    let bench = me.with_file_name(PROGRAM);
    if !bench.is_file() {
        return Err(CliError::new(
            "bench",
            format!(
                "{} is missing: it is built with the workspace (cargo build --release)",
                bench.display()
            ),
        ));
    }
    // Only returns if the program could not be started.
    let e = Command::new(&bench).args(args).exec();
    Err(CliError::io(format!("bench: {}", bench.display()), &e))
}

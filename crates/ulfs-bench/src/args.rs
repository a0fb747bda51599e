//! Command-line options. Three flags do not justify a parser dependency, and
//! keeping the binary's dependency set small keeps its build fast for the
//! smoke test.

use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: ulfs-bench [--quick] [--out PATH] [--fsync-files N]

  --quick          small N and few repetitions (a few seconds; for smoke tests)
  --out PATH       CSV file to write (default bench-results/first.csv)
  --fsync-files N  files per repetition of the fsync workload (default 1000,
                   50 with --quick; 0 skips the workload)";

pub struct Options {
    pub quick: bool,
    pub out: PathBuf,
    /// `None`: the default for the mode (1,000, or 50 with `--quick`).
    pub fsync_files: Option<usize>,
}

impl Options {
    pub fn fsync_files(&self) -> usize {
        self.fsync_files
            .unwrap_or(if self.quick { 50 } else { 1000 })
    }
}

fn count(s: &str) -> Result<usize, String> {
    s.parse()
        .map_err(|_| format!("--fsync-files needs a number, not {s:?}"))
}

pub enum Parsed {
    Run(Options),
    Help,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut opts = Options {
        quick: false,
        out: PathBuf::from("bench-results/first.csv"),
        fsync_files: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(s) = arg.to_str() else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        match s {
            "--quick" => opts.quick = true,
            "--out" => {
                opts.out = args
                    .next()
                    .ok_or_else(|| "--out needs a path".to_string())?
                    .into();
            }
            "--fsync-files" => {
                let n = args
                    .next()
                    .ok_or_else(|| "--fsync-files needs a number".to_string())?;
                opts.fsync_files = Some(count(&n.to_string_lossy())?);
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            _ => {
                if let Some(path) = s.strip_prefix("--out=").filter(|p| !p.is_empty()) {
                    opts.out = path.into();
                } else if let Some(n) = s.strip_prefix("--fsync-files=") {
                    opts.fsync_files = Some(count(n)?);
                } else {
                    return Err(format!("unexpected argument {s:?}"));
                }
            }
        }
    }
    Ok(Parsed::Run(opts))
}

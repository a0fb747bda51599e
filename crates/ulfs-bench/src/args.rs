//! Command-line options. Two flags do not justify a parser dependency, and
//! keeping the binary's dependency set small keeps its build fast for the
//! smoke test.

use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: ulfs-bench [--quick] [--out PATH]

  --quick      small N and few repetitions (a few seconds; for smoke tests)
  --out PATH   CSV file to write (default bench-results/first.csv)";

pub struct Options {
    pub quick: bool,
    pub out: PathBuf,
}

pub enum Parsed {
    Run(Options),
    Help,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut opts = Options {
        quick: false,
        out: PathBuf::from("bench-results/first.csv"),
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
            "-h" | "--help" => return Ok(Parsed::Help),
            _ => match s.strip_prefix("--out=") {
                Some(path) if !path.is_empty() => opts.out = path.into(),
                _ => return Err(format!("unexpected argument {s:?}")),
            },
        }
    }
    Ok(Parsed::Run(opts))
}

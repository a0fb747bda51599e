//! `ulfs debug IMAGE [REQUEST]`: a small debugfs over `ulfs::inspect`. One
//! request from the command line, or (with none) one per line from stdin,
//! so a session can look at a block, then its owner, then that inode,
//! without opening the image again. Read-only: the inspector refuses a
//! writable store, so nothing here can change the image.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use ulfs::inspect::{DEFAULT_LIMIT, Inspector};

use crate::error::{CliError, CliResult, EXIT_FAILURE};

/// The requests, for `help`, errors and `--help` (a macro, so clap's
/// `after_help` can `concat!` it).
macro_rules! requests {
    () => {
        "  superblock                both copies, field by field, and which one mount takes
  block N [--disk] [--no-hex]  block N as the file system reads it (--disk: the bytes on disk)
  inode PATH|INO            every field of an inode, and where it lives
  tree PATH|INO             a directory's B+tree
  map PATH|INO              a file's block map: logical to physical runs, holes, indirect blocks
  journal                   the journal header, its records, what replay would install
  owner N                   what owns block N (an inode and its role, a map block, free, ...)
  help                      this list; quit (or end of input) ends a session"
    };
}
pub(crate) use requests;

const REQUESTS: &str = requests!();

pub fn run(image: &Path, all: bool, request: &[String]) -> CliResult {
    let ctx = format!("debug: {}", image.display());
    let insp =
        Inspector::open(image).map_err(|e| crate::image::whole_image_error("debug", image, &e))?;
    if let Some(e) = insp.mount_error() {
        eprintln!(
            "ulfs debug: the image does not mount ({}); showing raw blocks",
            e.message
        );
    }
    let limit = if all { None } else { Some(DEFAULT_LIMIT) };
    if !request.is_empty() {
        let words: Vec<&str> = request.iter().map(String::as_str).collect();
        let text = answer(&insp, &words, limit).map_err(|msg| CliError::new(&ctx, msg))?;
        return print(&text);
    }
    // A session: one request a line.
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut failed = false;
    let mut line = String::new();
    loop {
        if interactive {
            print!("debug> ");
            let _ = std::io::stdout().flush();
        }
        line.clear();
        if stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::io(&ctx, &e))?
            == 0
        {
            break;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.first() {
            None => continue,
            Some(&"quit") | Some(&"exit") | Some(&"q") => break,
            Some(_) => match answer(&insp, &words, limit) {
                Ok(text) => print(&text)?,
                Err(msg) => {
                    eprintln!("ulfs debug: {msg}");
                    failed = true;
                }
            },
        }
    }
    if failed && !interactive {
        return Err(CliError::reported(EXIT_FAILURE));
    }
    Ok(())
}

fn print(text: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| {
            if text.ends_with('\n') {
                Ok(())
            } else {
                out.write_all(b"\n")
            }
        })
        .map_err(|e| CliError::io("debug: stdout", &e))
}

/// The text for one request, or why there is none.
fn answer(insp: &Inspector, words: &[&str], limit: Option<usize>) -> Result<String, String> {
    let number = |w: Option<&&str>, what: &str| -> Result<u64, String> {
        let w = w.ok_or_else(|| format!("{what} needs a block number"))?;
        w.parse()
            .map_err(|_| format!("{what}: not a block number: {w:?}"))
    };
    let target = |w: Option<&&str>, what: &str| {
        let w = w.ok_or_else(|| format!("{what} needs a path or an inode number"))?;
        insp.target(w).map_err(|e| e.message)
    };
    let flags = |allowed: &[&str]| -> Result<Vec<String>, String> {
        let given: Vec<String> = words
            .iter()
            .skip(1)
            .filter(|w| w.starts_with("--"))
            .map(|w| w.to_string())
            .collect();
        match given.iter().find(|f| !allowed.contains(&f.as_str())) {
            Some(f) => Err(format!("{}: unknown flag {f}", words[0])),
            None => Ok(given),
        }
    };
    let args: Vec<&&str> = words
        .iter()
        .skip(1)
        .filter(|w| !w.starts_with("--"))
        .collect();
    let takes_one = matches!(
        words[0],
        "block" | "inode" | "stat" | "tree" | "dir" | "map" | "bmap" | "owner" | "icheck"
    );
    let takes_none = matches!(
        words[0],
        "superblock" | "super" | "sb" | "journal" | "log" | "help" | "?"
    );
    if (takes_one || takes_none) && args.len() > usize::from(takes_one) {
        return Err(format!(
            "{}: too many arguments ({})",
            words[0],
            words[1..].join(" ")
        ));
    }
    let arg = args.first().copied();
    let text = match words[0] {
        "superblock" | "super" | "sb" => {
            flags(&[])?;
            insp.superblock().map(|r| r.to_string())
        }
        "block" => {
            let f = flags(&["--disk", "--no-hex"])?;
            let bid = number(arg, "block")?;
            let report = if f.iter().any(|f| f == "--disk") {
                insp.block_on_disk(bid)
            } else {
                insp.block(bid)
            };
            report.map(|mut r| {
                if f.iter().any(|f| f == "--no-hex") {
                    r.show_hex = false;
                }
                r.to_string()
            })
        }
        "inode" | "stat" => {
            flags(&[])?;
            let ino = target(arg, "inode")?;
            insp.inode(ino).map(|r| r.to_string())
        }
        "tree" | "dir" => {
            flags(&[])?;
            let ino = target(arg, "tree")?;
            insp.dir_tree(ino, limit).map(|r| r.to_string())
        }
        "map" | "bmap" => {
            flags(&[])?;
            let ino = target(arg, "map")?;
            insp.block_map(ino, limit).map(|r| r.to_string())
        }
        "journal" | "log" => {
            flags(&[])?;
            insp.journal(limit).map(|r| r.to_string())
        }
        "owner" | "icheck" => {
            flags(&[])?;
            let bid = number(arg, "owner")?;
            insp.owner(bid).map(|r| r.to_string())
        }
        "help" | "?" => return Ok(REQUESTS.to_string()),
        other => {
            return Err(format!(
                "unknown request {other:?}; the requests:\n{REQUESTS}"
            ));
        }
    };
    text.map_err(|e| e.message)
}

//! `CliError`: the one error type every command returns.
//!
//! The CLI promises a fixed shape for failures (`ulfs: <context>: <message>`
//! on stderr and a meaningful exit status), so every error source — errno
//! from the core, whole-image `ulfs::Error`, host `io::Error` — is converted
//! here once instead of being formatted ad hoc by each command.

use std::fmt;

use ulfs::Errno;

/// Exit status for ordinary failures (as coreutils uses).
pub const EXIT_FAILURE: i32 = 1;

#[derive(Debug)]
pub struct CliError {
    /// What was being done, usually `command: path`.
    pub context: String,
    /// Why it failed; empty when the details were already printed.
    pub message: String,
    pub code: i32,
}

impl CliError {
    pub fn new(context: impl Into<String>, message: impl Into<String>) -> CliError {
        CliError {
            context: context.into(),
            message: message.into(),
            code: EXIT_FAILURE,
        }
    }

    /// A failure whose details were already reported (e.g. `cat a b` where
    /// only `a` failed): nothing more to print, only the exit status matters.
    pub fn reported(code: i32) -> CliError {
        CliError {
            context: String::new(),
            message: String::new(),
            code,
        }
    }

    pub fn errno(context: impl Into<String>, e: Errno) -> CliError {
        CliError::new(context, errno_text(e))
    }

    pub fn io(context: impl Into<String>, e: &std::io::Error) -> CliError {
        match e.raw_os_error() {
            Some(n) => CliError::new(context, errno_text(Errno(n))),
            None => CliError::new(context, e.to_string()),
        }
    }

    pub fn with_code(mut self, code: i32) -> CliError {
        self.code = code;
        self
    }

    /// Print to stderr in the CLI's fixed shape, unless already reported.
    pub fn print(&self) {
        if !self.message.is_empty() {
            eprintln!("ulfs: {self}");
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.context.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.context, self.message)
        }
    }
}

/// The strerror text alone ("No such file or directory"), as coreutils
/// prints it; std appends " (os error N)", which is noise for users.
pub fn errno_text(e: Errno) -> String {
    let full = std::io::Error::from_raw_os_error(e.raw()).to_string();
    let text = match full.find(" (os error ") {
        Some(i) => full[..i].to_string(),
        None => full,
    };
    // A damaged image: name the block and say what to do. Taking the
    // damage clears it, so the next error cannot name this block.
    match (e, ulfs::take_damage()) {
        (Errno::EUCLEAN, Some(damage)) => {
            format!("{text} ({damage}; run `ulfs fsck --repair`)")
        }
        (Errno::EUCLEAN, None) => format!("{text} (run `ulfs fsck` for details)"),
        _ => text,
    }
}

pub type CliResult<T = ()> = Result<T, CliError>;

/// Error mapper for a failed call on an image path: `cmd: path: strerror`.
pub fn at_path<'a>(cmd: &'a str, path: &'a [u8]) -> impl Fn(Errno) -> CliError + 'a {
    move |e| CliError::errno(format!("{cmd}: {}", String::from_utf8_lossy(path)), e)
}

/// Collects per-item failures for commands that, like coreutils, keep
/// going after one operand fails (`cat a b`, `rm a b`, `ls -R`) and exit
/// non-zero at the end.
#[derive(Default)]
pub struct Failures {
    count: usize,
}

impl Failures {
    pub fn report(&mut self, e: CliError) {
        e.print();
        self.count += 1;
    }

    pub fn finish(self) -> CliResult {
        if self.count == 0 {
            Ok(())
        } else {
            Err(CliError::reported(EXIT_FAILURE))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_text_drops_os_error_suffix() {
        assert_eq!(errno_text(Errno::ENOENT), "No such file or directory");
    }

    #[test]
    fn display_joins_context_and_message() {
        let e = CliError::errno("cat: /x", Errno::EISDIR);
        assert_eq!(e.to_string(), "cat: /x: Is a directory");
        assert_eq!(e.code, EXIT_FAILURE);
    }
}

//! Progress reporting for long jobs (import, export, cp, fsck).
//!
//! A bar is useful on a terminal and noise everywhere else (pipes, logs,
//! tests), and even on a terminal it only helps when the job is long. So the
//! bar appears lazily: only when stderr is a terminal, and only once the job
//! is known to be large or has already run for a second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Jobs at least this large get a bar from the start.
const LARGE_JOB_BYTES: u64 = 64 << 20;
/// Smaller jobs get one once they have run this long.
const SLOW_JOB: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
pub enum Unit {
    Bytes,
    /// Abstract work items (fsck reports its own units).
    Steps,
}

pub struct Progress {
    enabled: bool,
    unit: Unit,
    label: &'static str,
    total: u64,
    done: u64,
    start: Instant,
    bar: Option<ProgressBar>,
}

/// Whether a bar could show at all: callers skip work done only for the
/// bar (a pre-scan of the sizes to copy) when it could not.
pub fn on_terminal() -> bool {
    std::io::stderr().is_terminal()
}

impl Progress {
    pub fn new(label: &'static str, unit: Unit, total: u64) -> Progress {
        Progress {
            enabled: on_terminal(),
            unit,
            label,
            total,
            done: 0,
            start: Instant::now(),
            bar: None,
        }
    }

    pub fn add(&mut self, n: u64) {
        self.set(self.done.saturating_add(n), self.total);
    }

    /// Absolute position; `total` may change as the caller learns more.
    pub fn set(&mut self, done: u64, total: u64) {
        self.done = done;
        self.total = total;
        if self.bar.is_none() && self.wants_bar() {
            self.bar = Some(self.make_bar());
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    fn wants_bar(&self) -> bool {
        let large = matches!(self.unit, Unit::Bytes) && self.total >= LARGE_JOB_BYTES;
        self.enabled && (large || self.start.elapsed() >= SLOW_JOB)
    }

    fn make_bar(&self) -> ProgressBar {
        let template = match self.unit {
            Unit::Bytes => {
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}"
            }
            Unit::Steps => "{msg} [{bar:40}] {percent}% eta {eta}",
        };
        let bar = ProgressBar::new(self.total);
        // The template is a constant, so a parse failure is a programming
        // error; fall back to indicatif's default look rather than abort.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(self.label);
        bar
    }

    /// Remove the bar so that later messages start on a clean line.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

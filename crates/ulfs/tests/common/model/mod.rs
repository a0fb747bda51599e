//! The model test's harness (random POSIX call sequences run on ulfs and
//! on a tmpfs directory, compared call by call). What it proves and how is
//! told at the top of tests/model.rs.

use std::ffi::CString;
use std::fmt;
use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use ulfs::{Errno, MkfsOptions, Stat};

/// A descriptor number closed on both sides (above any RLIMIT_NOFILE here and
/// never handed out by ulfs): the "closed slot" of the model.
pub const CLOSED_FD: i32 = 100_000;

/// Image size for each case.
pub const IMAGE_SIZE: u64 = 32 << 20;

/// `S` values below this pick an open descriptor (see `S`).
pub const OPEN_SLOT_PICKS: u8 = 13;

/// The umask of the host thread: that of a freshly mounted `ulfs::Fs`.
pub const HOST_UMASK: libc::mode_t = 0o022;

/// Depth of the prefix used when chroot is not available.
pub const PREFIX_DEPTH: usize = 8;

mod at_ops;
mod harness;
mod libc_host;
mod ops;
mod outcomes;
mod run;
mod sides;
mod strategies;
mod target;

pub use harness::*;
pub use libc_host::*;
pub use ops::*;
pub use outcomes::*;
pub use run::*;
pub use sides::*;
pub use strategies::*;
pub use target::*;

//! The crash harness shared by tests/crash.rs (simulated power loss over a
//! `SimDisk`): model, crash points, read-back, checker, runner, workloads.
//! What it proves and how is told at the top of tests/crash.rs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ulfs::format::BLOCK_SIZE;
use ulfs::format::superblock::Superblock;
use ulfs::store::{BlockStore, Fate, SimDisk};
use ulfs::{
    Errno, Fd, Fs, FsckOptions, MkfsOptions, Mode, MountOptions, RENAME_EXCHANGE, Timespec,
    format_store, fsck, fsck_repair, fsck_store, parse_dirents,
};

pub const PAGE: u64 = 4096;
pub const SECTORS: usize = BLOCK_SIZE / 512;
/// Default seed of the CI run (each workload mixes in its name).
pub const CI_SEED: u64 = 0x5eed_c0de_0003;

mod apply;
mod check;
mod expect;
mod fates;
mod ops;
mod partial;
mod readback;
mod rng;
mod runner;
mod tree;
mod wl_partial;
mod workloads;

pub use apply::*;
pub use check::*;
pub use expect::*;
pub use fates::*;
pub use ops::*;
pub use partial::*;
pub use readback::*;
pub use rng::*;
pub use runner::*;
pub use tree::*;
pub use wl_partial::*;
pub use workloads::*;

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
    Errno, Fd, Fs, FsckOptions, MkfsOptions, Mode, MountOptions, RENAME_EXCHANGE, format_store,
    fsck_store, parse_dirents,
};

pub const PAGE: u64 = 4096;
pub const SECTORS: usize = BLOCK_SIZE / 512;
/// Default seed of the CI run (each workload mixes in its name).
pub const CI_SEED: u64 = 0x5eed_c0de_0003;

mod check;
mod expect;
mod fates;
mod ops;
mod readback;
mod rng;
mod runner;
mod tree;
mod workloads;

pub use check::*;
pub use expect::*;
pub use fates::*;
pub use ops::*;
pub use readback::*;
pub use rng::*;
pub use runner::*;
pub use tree::*;
pub use workloads::*;

//! Test support shared by ulfs's test suites and its fuzz targets, so that
//! each helper exists once:
//!
//! - [`sample`]: small images holding every kind of structure (directories
//!   with one leaf and with inner nodes, files from empty to indirect,
//!   inline and long symlinks, hard links), made in memory;
//! - [`snapshot`]: what a tree shows to a reader (kinds, contents, link
//!   targets), walked with budgets so a damaged image cannot make it hang;
//! - [`damage`]: patches decoded from arbitrary bytes and applied to an
//!   image, with or without resealing the block's checksum;
//! - [`page_cache`]: the host's page cache as the memory budget's tests
//!   see it (resident pages of a file, dropping them);
//! - [`rng`]: a deterministic random generator (xorshift64*);
//! - [`cli`], [`host_files`]: the `ulfs` binary run by a test, and the
//!   host files its tests make (bytes, exact times, modes);
//! - [`skip`]: a test that cannot run here says so (and fails where every
//!   test is required);
//! - [`fuse_mount`]: an image mounted with `ulfs mount --foreground` for
//!   the length of a test, and unmounted as a user would;
//! - [`harness`]: the three fuzz harnesses (mount a damaged image and use
//!   it; repair a damaged image and check that nothing readable was lost;
//!   run a call sequence against ulfs and the host's file system). The
//!   cargo-fuzz targets in `fuzz/` call them, and `tests/replay.rs` replays
//!   every kept input through them in the test suite.

pub mod cli;
pub mod damage;
pub mod fuse_mount;
pub mod harness;
pub mod host_files;
mod host_model;
pub mod kernel_diff;
pub mod page_cache;
pub mod rng;
pub mod sample;
pub mod skip;
pub mod snapshot;

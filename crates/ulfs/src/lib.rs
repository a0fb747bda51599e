//! ulfs: a file system that lives inside the process that uses it.
//!
//! One host file or block device is the whole file system (an *image*).
//! [`Fs::mount`] maps it into memory and serves POSIX calls as plain
//! function calls, with no system call on the data path.
//!
//! Layers, each using only those above it in this list (docs/ARCHITECTURE.md):
//! - [`format`]: on-disk records, encode/decode/validate, no I/O;
//! - [`store`]: the mapped image, bounds-checked block access, flush;
//! - [`txn`]: transactions, the only door to metadata blocks;
//! - [`fs`]: the engine: allocation, inodes, block maps, directories;
//! - [`posix`]: descriptors, paths, the syscall-shaped [`Fs`] API;
//! - [`stdapi`]: a `std::fs`-like layer with a thread-safe wrapper;
//! - [`fsck`]: the checker;
//! - [`inspect`]: a read-only look at every structure of an image (the
//!   library behind `ulfs debug`);
//! - [`v1`]: original ULFS images, read and translated (beside `fs`, which
//!   mounts them through it).

pub mod errno;
pub mod error;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod inspect;
pub mod posix;
pub mod stdapi;
pub mod store;
pub mod txn;
pub mod types;
pub mod v1;

pub use errno::{Errno, Result};
pub use error::Error;
pub use fs::{Info, MkfsOptions, Mode, MountOptions, format_store, mkfs};
pub use fsck::{FsckOptions, FsckReport, RepairReport, fsck, fsck_repair, fsck_store};
pub use posix::dirents::{Dirent, parse as parse_dirents};
pub use posix::{Fs, Identity};
pub use stdapi::{
    DirEntry, File, ReadDir, SharedFs, create_dir_all, metadata, read_dir, remove_dir_all,
};
pub use store::MemoryBudget;
pub use txn::{Damage, last_damaged_block, take_damage};
pub use types::*;

//! The C ABI of ulfs: the functions declared in `include/ulfs.h`, built into
//! `libulfs_c.a` and `libulfs_c.so`.
//!
//! This crate owns the boundary between C and the Rust core and nothing
//! else: every exported function checks its C arguments, calls the
//! `ulfs::Fs` method of the same name and returns the result or `-errno`
//! (Linux values), never unwinding into C. The file system logic stays in
//! the `ulfs` crate.
//!
//! - `backend`: what a handle's calls go to: an image mounted here, or a
//!   server (`ulfs serve`) reached with `ulfs_connect`;
//! - `ffi`: the opaque handle, the return convention, panic containment and
//!   pointer-to-slice conversions shared by all functions;
//! - `options`: the parser of `ulfs_mkfs`'s option string;
//! - `image`: mkfs, mount, connect, unmount, sync, statfs;
//! - `fd`: calls on descriptors (read, write, lseek, fstat, getdents64, ...);
//! - `vectored`: `readv` and `writev`;
//! - `paths`: calls on paths (open, stat, mkdir, rename, ...) and the
//!   working directory;
//! - `at`: the directory-relative forms (`openat`, `fstatat`, `statx`,
//!   `faccessat`, `utimensat`, ...) and `fchdir`.
//!
//! The functions are also re-exported at the crate root, so that Rust code
//! and tests can call the ABI exactly as C does.

mod at;
mod fd;
mod ffi;
mod image;
mod options;
mod paths;
mod vectored;

pub use at::*;
pub use fd::*;
pub use ffi::ulfs_t;
pub use image::*;
pub use paths::*;
pub use vectored::*;

//! Whole-image calls of the C ABI: `ulfs_mkfs`, `ulfs_mount`,
//! `ulfs_connect`, `ulfs_unmount`, `ulfs_sync`, `ulfs_statfs` and
//! `ulfs_set_memory_budget`.
//!
//! These are the calls that create, open, flush or close the image itself (as
//! opposed to one file in it). `ulfs_mount`, `ulfs_connect` and
//! `ulfs_unmount` are also the only places where the `Box` behind an
//! `ulfs_t *` is created and destroyed.

use std::ffi::{OsStr, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ulfs::{Errno, Fs, MemoryBudget, MountOptions};
use ulfs_client::Client;

use ulfs_client::Backend;

use crate::ffi::{c_bytes, fs_mut, guard, guard_fs, put, ulfs_t};
use crate::options::parse_mkfs_options;

/// `flags` bit of `ulfs_mount`: mount read-only.
pub const ULFS_RDONLY: c_int = 1;
/// `flags` bit of `ulfs_mount`: the handle may be used by several threads at
/// once; each call takes the handle's mutex (without it, no lock is taken).
pub const ULFS_THREADSAFE: c_int = 2;

/// Creates a file system in `image` (a host path) of `size` bytes.
/// `options` is NULL or a comma-separated list (see `options.rs`).
/// Returns 0 or `-errno`.
///
/// # Safety
/// `image` and `options` must each be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_mkfs(
    image: *const c_char,
    size: u64,
    options: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let image = unsafe { c_bytes(image) }?;
        let opts = if options.is_null() {
            parse_mkfs_options(size, b"")?
        } else {
            // SAFETY: non-NULL and NUL-terminated by the caller's contract.
            parse_mkfs_options(size, unsafe { c_bytes(options) }?)?
        };
        ulfs::mkfs(host_path(image)?, &opts).map_err(|e| e.errno)?;
        Ok(0)
    })
}

/// Mounts `image`. `flags` is 0 or a mix of `ULFS_RDONLY` and
/// `ULFS_THREADSAFE`. Returns the handle, or NULL
/// with the positive errno stored in `*err` (when `err` is not NULL).
///
/// # Safety
/// `image` must be NULL or a NUL-terminated string; `err` must be NULL or
/// valid for writing one `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_mount(
    image: *const c_char,
    flags: c_int,
    err: *mut c_int,
) -> *mut ulfs_t {
    let mut fs: *mut ulfs_t = std::ptr::null_mut();
    let r: c_int = guard(|| {
        if flags & !(ULFS_RDONLY | ULFS_THREADSAFE) != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let image = unsafe { c_bytes(image) }?;
        let opts = MountOptions {
            read_only: flags & ULFS_RDONLY != 0,
            ..Default::default()
        };
        let mounted = Fs::mount(host_path(image)?, opts).map_err(|e| e.errno)?;
        fs = ulfs_t::into_raw(Backend::Local(mounted), flags & ULFS_THREADSAFE != 0);
        Ok(0)
    });
    handle_or_err(fs, r, err)
}

/// The handle, or NULL with `-r` in `*err` (when `err` is not NULL).
fn handle_or_err(fs: *mut ulfs_t, r: c_int, err: *mut c_int) -> *mut ulfs_t {
    if r < 0 && !err.is_null() {
        // SAFETY: `err` is non-NULL and valid for one `int` by the contract.
        // (A failure here can only be EFAULT for NULL, excluded above.)
        let _ = unsafe { put(err, -r) };
    }
    fs
}

/// Connects to the server (`ulfs serve`) listening at `socket`: the handle
/// is a process of the server's, with its own descriptors and working
/// directory, judged by this process's user and groups as the kernel
/// reports them. Every `ulfs_*` call works on it as on a mounted image;
/// `ulfs_unmount` disconnects (the server closes the handle's descriptors
/// and goes on); `ulfs_set_memory_budget` is -EOPNOTSUPP. `flags` is 0 or
/// `ULFS_THREADSAFE`. Returns the handle, or NULL with the positive errno
/// in `*err`: ENOENT or ECONNREFUSED when no server listens there, EPROTO
/// for a server of another protocol version. Once the server is gone,
/// calls fail with -ENOTCONN.
///
/// # Safety
/// `socket` must be NULL or a NUL-terminated string; `err` must be NULL or
/// valid for writing one `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_connect(
    socket: *const c_char,
    flags: c_int,
    err: *mut c_int,
) -> *mut ulfs_t {
    let mut fs: *mut ulfs_t = std::ptr::null_mut();
    let r: c_int = guard(|| {
        if flags & !ULFS_THREADSAFE != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let socket = unsafe { c_bytes(socket) }?;
        let client = Client::connect(host_path(socket)?)?;
        fs = ulfs_t::into_raw(
            Backend::Remote(Box::new(client)),
            flags & ULFS_THREADSAFE != 0,
        );
        Ok(0)
    });
    handle_or_err(fs, r, err)
}

/// Flushes and closes the file system and frees `fs` (also when the flush
/// fails). Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle from `ulfs_mount`, not used by another
/// thread now and never used again after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_unmount(fs: *mut ulfs_t) -> c_int {
    guard(|| {
        // SAFETY: ownership of a live handle (or NULL) is handed back here,
        // exactly once, by the caller's contract.
        let fs = unsafe { ulfs_t::from_raw(fs) }.ok_or(Errno::EFAULT)?;
        fs.unmount()?;
        Ok(0)
    })
}

/// Makes everything done so far durable (as `syncfs`). Returns 0 or `-errno`.
///
/// # Safety
/// `fs` must be NULL or a live handle used by no other thread during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_sync(fs: *mut ulfs_t) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        fs.sync()?;
        Ok(0)
    })
}

/// `bytes` of `ulfs_set_memory_budget`: the budget the memory cgroup
/// allows, as at mount.
pub const ULFS_BUDGET_AUTO: i64 = -1;

/// Keeps the image's file data mapped in within about `bytes` from now on
/// (`MountOptions::memory_budget`): 0 for no budget (the host's page cache
/// decides), `ULFS_BUDGET_AUTO` for half of what the process's memory
/// cgroup leaves free, which is also what a mount starts with. Returns 0 or
/// `-errno` (EINVAL for another negative value).
///
/// # Safety
/// `fs` as for `ulfs_sync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_set_memory_budget(fs: *mut ulfs_t, bytes: i64) -> c_int {
    guard_fs(fs, || {
        let budget = match bytes {
            ULFS_BUDGET_AUTO => MemoryBudget::Auto,
            0 => MemoryBudget::Unlimited,
            b if b > 0 => MemoryBudget::Bytes(b as u64),
            _ => return Err(Errno::EINVAL),
        };
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        fs.set_memory_budget(budget)?;
        Ok(0)
    })
}

/// Fills `*buf` with file system statistics, as `statfs(2)`. Returns 0 or
/// `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_sync`; `path` NULL or NUL-terminated; `buf` NULL or valid
/// for writing one `struct statfs`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_statfs(
    fs: *mut ulfs_t,
    path: *const c_char,
    buf: *mut libc::statfs,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        if buf.is_null() {
            return Err(Errno::EFAULT);
        }
        let st = fs.statfs(path)?.to_libc();
        // SAFETY: `buf` is valid for one `struct statfs` by the caller's contract.
        unsafe { put(buf, st) }?;
        Ok(0)
    })
}

/// A host path from C bytes; an empty path is ENOENT, as for `open("")`.
fn host_path(bytes: &[u8]) -> Result<&Path, Errno> {
    if bytes.is_empty() {
        return Err(Errno::ENOENT);
    }
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

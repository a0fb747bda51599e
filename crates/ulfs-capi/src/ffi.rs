//! The plumbing every exported function shares: the opaque handle type, the
//! "result or `-errno`" return convention, panic containment, and the checked
//! conversions from C pointers to Rust references and slices.
//!
//! Kept in one place so that each `extern "C"` body in the other modules is a
//! few lines of argument checking around one `ulfs::Fs` call, and so that the
//! rules of the ABI (NULL gives `-EFAULT`, nothing unwinds into C, a buffer
//! length never exceeds what a Rust slice may hold) are written exactly once.

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_char, c_int};
use std::marker::{PhantomData, PhantomPinned};
use std::ops::{Deref, DerefMut};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use ulfs::{Errno, Fs, Timespec};
use ulfs_client::Backend;

/// The largest transfer one call performs, as Linux's `MAX_RW_COUNT`
/// (`INT_MAX` rounded down to a page): longer requests are shortened, which
/// POSIX allows, and every byte count fits in `ssize_t` and in a Rust slice.
pub(crate) const MAX_RW: usize = 0x7fff_f000;

/// The C side's `ulfs_t`: an opaque type that only ever exists behind a
/// pointer. The pointer really is a `Box<Handle>` turned into a raw pointer
/// by `ulfs_mount` and turned back by `ulfs_unmount`.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct ulfs_t {
    _private: [u8; 0],
    _not_send_sync_unpin: PhantomData<(*mut u8, PhantomPinned)>,
}

/// What an `ulfs_t *` points to: the file system (mounted here, or a
/// server's), and for a handle made with `ULFS_THREADSAFE` the mutex every
/// call takes first. Without it the
/// handle has no lock at all (one thread at a time, the caller's promise),
/// so the single-owner path pays for nothing but a branch.
pub(crate) struct Handle {
    lock: Option<Mutex<()>>,
    fs: UnsafeCell<Backend>,
}

/// The file system of a handle for the length of one call; holds the
/// handle's mutex when it has one. It has no `Drop` of its own: a panic in
/// a call is dealt with by `guard_fs`, and by the next call to take a
/// poisoned mutex, off the path every call takes.
pub(crate) struct FsRef<'a> {
    _held: Option<MutexGuard<'a, ()>>,
    fs: &'a mut Backend,
}

impl Deref for FsRef<'_> {
    type Target = Backend;
    fn deref(&self) -> &Backend {
        self.fs
    }
}

impl DerefMut for FsRef<'_> {
    fn deref_mut(&mut self) -> &mut Backend {
        self.fs
    }
}

impl ulfs_t {
    /// Hands a mounted file system to C, with a lock if `thread_safe`.
    pub(crate) fn into_raw(fs: Backend, thread_safe: bool) -> *mut ulfs_t {
        let handle = Handle {
            lock: thread_safe.then(|| Mutex::new(())),
            fs: UnsafeCell::new(fs),
        };
        Box::into_raw(Box::new(handle)).cast::<ulfs_t>()
    }

    /// Takes ownership back from C; `None` for NULL.
    ///
    /// # Safety
    /// `p` must be NULL or a pointer returned by `into_raw` that has not been
    /// given back yet; after this call the C side must not use it again.
    pub(crate) unsafe fn from_raw(p: *mut ulfs_t) -> Option<Backend> {
        if p.is_null() {
            return None;
        }
        // SAFETY: by the contract above `p` came from `Box::into_raw` of a
        // `Box<Handle>` and ownership is transferred back exactly once.
        let handle = unsafe { Box::from_raw(p.cast::<Handle>()) };
        Some(handle.fs.into_inner())
    }
}

/// A return type of the ABI: the success value, or `-errno` on failure.
pub(crate) trait NegErrno: Copy {
    fn neg_errno(e: Errno) -> Self;
}

impl NegErrno for i32 {
    fn neg_errno(e: Errno) -> Self {
        -e.raw()
    }
}

impl NegErrno for isize {
    fn neg_errno(e: Errno) -> Self {
        -(e.raw() as isize)
    }
}

impl NegErrno for i64 {
    fn neg_errno(e: Errno) -> Self {
        -i64::from(e.raw())
    }
}

/// Runs one ABI body: its value on success, `-errno` on error, and `-EIO` if
/// it panicked (a panic must never unwind into C, where it is undefined
/// behaviour; the default hook has already printed the panic message).
#[inline(always)]
pub(crate) fn guard<R: NegErrno>(body: impl FnOnce() -> Result<R, Errno>) -> R {
    guard_fs(std::ptr::null_mut(), body)
}

/// `guard` for a call on the file system `fs`: a panic may have cut the
/// call in half, so the file system is abandoned, read-only from then on
/// with nothing more committed (`ulfs::Fs::abandon`), before `-EIO` goes
/// back.
#[inline(always)]
pub(crate) fn guard_fs<R: NegErrno>(fs: *mut ulfs_t, body: impl FnOnce() -> Result<R, Errno>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => R::neg_errno(e),
        Err(_) => {
            abandon_after_panic(fs);
            R::neg_errno(Errno::EIO)
        }
    }
}

#[cold]
#[inline(never)]
fn abandon_after_panic(fs: *mut ulfs_t) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the handle the panicking call was given: NULL or live by
        // the caller's contract, which still holds.
        if let Ok(mut fs) = unsafe { fs_mut(fs) } {
            fs.abandon();
        }
    }));
}

/// The file system behind a handle, for one call; NULL is EFAULT. A
/// thread-safe handle's mutex is held until the `FsRef` is dropped.
///
/// # Safety
/// `fs` must be NULL or a live handle from `ulfs_mount`. Unless it was
/// mounted with `ULFS_THREADSAFE`, no other thread may use it while the
/// returned reference lives.
#[inline(always)]
pub(crate) unsafe fn fs_mut<'a>(fs: *mut ulfs_t) -> Result<FsRef<'a>, Errno> {
    // SAFETY: by the caller's contract `fs` is NULL (rejected by `as_ref`) or
    // a live `Box<Handle>` from `ulfs_mount`; a shared reference to it is
    // sound from any thread (the file system itself is only reached through
    // the `UnsafeCell` below).
    let handle = unsafe { fs.cast::<Handle>().as_ref() }.ok_or(Errno::EFAULT)?;
    let held = handle.lock.as_ref().map(|m| lock_handle(m, handle));
    // SAFETY: the reference is unique: either this thread holds the handle's
    // mutex (thread-safe handle, every call takes it), or the caller promises
    // no other thread uses the handle now.
    let fs = unsafe { &mut *handle.fs.get() };
    Ok(FsRef { _held: held, fs })
}

/// The file system behind a handle that has no lock; None for NULL or a
/// thread-safe handle (whose calls take the guarded way, `fs_mut`).
///
/// # Safety
/// As `fs_mut`.
#[inline(always)]
pub(crate) unsafe fn fs_unlocked<'a>(fs: *mut ulfs_t) -> Option<&'a mut Fs> {
    // SAFETY: as in `fs_mut`.
    let handle = unsafe { fs.cast::<Handle>().as_ref() }?;
    if handle.lock.is_some() {
        return None;
    }
    // SAFETY: no lock: the caller promises no other thread uses the
    // handle now, so the reference is unique.
    match unsafe { &mut *handle.fs.get() } {
        Backend::Local(fs) => Some(fs),
        Backend::Remote(_) => None,
    }
}

/// Takes a thread-safe handle's mutex (out of line: the single-owner path
/// of every call stays small).
#[inline(never)]
fn lock_handle<'a>(m: &'a Mutex<()>, handle: &'a Handle) -> MutexGuard<'a, ()> {
    m.lock().unwrap_or_else(|p| {
        m.clear_poison();
        let held = p.into_inner();
        // A call panicked holding the lock: the file system is abandoned
        // before anyone else uses it (reads still work).
        // SAFETY: this thread holds the mutex, so no other reference to
        // the file system exists.
        unsafe { &mut *handle.fs.get() }.abandon();
        held
    })
}

/// The bytes of a NUL-terminated C string (without the NUL); NULL is EFAULT.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid and
/// unmodified for `'a`.
pub(crate) unsafe fn c_bytes<'a>(p: *const c_char) -> Result<&'a [u8], Errno> {
    if p.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A read-only byte buffer from C, shortened to `MAX_RW`. NULL is allowed
/// only when `n` is 0 (as `write(fd, NULL, 0)` is).
///
/// # Safety
/// If `n > 0`, `p` must be NULL or valid for reads of `n` bytes for `'a`.
pub(crate) unsafe fn in_buf<'a>(p: *const u8, n: usize) -> Result<&'a [u8], Errno> {
    let n = n.min(MAX_RW);
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: non-NULL, readable for `n` (<= MAX_RW <= isize::MAX) bytes by
    // the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A writable byte buffer from C, shortened to `MAX_RW`. NULL is allowed only
/// when `n` is 0.
///
/// # Safety
/// If `n > 0`, `p` must be NULL or valid for writes of `n` bytes for `'a`
/// and not otherwise accessed during `'a`.
pub(crate) unsafe fn out_buf<'a>(p: *mut u8, n: usize) -> Result<&'a mut [u8], Errno> {
    let n = n.min(MAX_RW);
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: non-NULL, writable and unaliased for `n` (<= isize::MAX) bytes
    // by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Stores `v` through a C out-pointer; NULL is EFAULT.
///
/// # Safety
/// `p` must be NULL or valid for a write of one `T` (alignment included).
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> Result<(), Errno> {
    if p.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: non-NULL and valid for writing a `T` by the caller's contract;
    // `write` does not read or drop the old (possibly uninitialised) value.
    unsafe { p.write(v) };
    Ok(())
}

/// The `times[2]` argument of `utimensat`/`futimens`: NULL means "both
/// now" (`None`); each `tv_nsec` must be in `0..1e9` or be `UTIME_NOW` or
/// `UTIME_OMIT`, else EINVAL (as Linux).
///
/// # Safety
/// `p` must be NULL or valid for reading two `struct timespec`.
// `time_t` and `c_long` are `i64` on 64-bit Linux but not on every target.
#[allow(clippy::useless_conversion)]
pub(crate) unsafe fn c_times(p: *const libc::timespec) -> Result<Option<[Timespec; 2]>, Errno> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and readable for two `timespec` by the caller's contract.
    let raw = unsafe { [p.read(), p.add(1).read()] };
    let mut out = [Timespec::default(); 2];
    for (o, t) in out.iter_mut().zip(raw) {
        let nsec = i64::from(t.tv_nsec);
        let special = nsec == ulfs::UTIME_NOW || nsec == ulfs::UTIME_OMIT;
        if !special && !(0..1_000_000_000).contains(&nsec) {
            return Err(Errno::EINVAL);
        }
        *o = Timespec {
            sec: i64::from(t.tv_sec),
            nsec,
        };
    }
    Ok(Some(out))
}

/// A non-negative `off_t` as a Rust offset; negative is EINVAL.
pub(crate) fn offset(off: libc::off_t) -> Result<u64, Errno> {
    u64::try_from(off).map_err(|_| Errno::EINVAL)
}

/// A byte count as `ssize_t` (counts never exceed `MAX_RW`, so this cannot fail
/// in practice; a core returning more than asked is reported as EIO).
pub(crate) fn ssize(n: usize) -> Result<isize, Errno> {
    isize::try_from(n).map_err(|_| Errno::EIO)
}

/// Runs `op` on the file system and one path argument; 0 or `-errno`.
///
/// # Safety
/// `fs` NULL or a live handle used by no other thread during the call;
/// `path` NULL or NUL-terminated.
pub(crate) unsafe fn path_op(
    fs: *mut ulfs_t,
    path: *const c_char,
    op: impl FnOnce(&mut Backend, &[u8]) -> ulfs::Result<()>,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `path` is NULL or NUL-terminated, by the caller's contract.
        let path = unsafe { c_bytes(path) }?;
        op(&mut fs, path)?;
        Ok(0)
    })
}

/// Runs `op` on the file system and two path arguments; 0 or `-errno`.
///
/// # Safety
/// As `path_op`, for both `a` and `b`.
pub(crate) unsafe fn two_path_op(
    fs: *mut ulfs_t,
    a: *const c_char,
    b: *const c_char,
    op: impl FnOnce(&mut Backend, &[u8], &[u8]) -> ulfs::Result<()>,
) -> c_int {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `a` and `b` are NULL or NUL-terminated, by the contract.
        let (a, b) = unsafe { (c_bytes(a)?, c_bytes(b)?) };
        op(&mut fs, a, b)?;
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_maps_results_and_panics() {
        assert_eq!(guard(|| Ok(7i32)), 7);
        assert_eq!(guard::<i32>(|| Err(Errno::ENOENT)), -libc::ENOENT);
        assert_eq!(
            guard::<isize>(|| Err(Errno::EBADF)),
            -(libc::EBADF as isize)
        );
        assert_eq!(
            guard::<i64>(|| Err(Errno::EINVAL)),
            -i64::from(libc::EINVAL)
        );
        let r: i32 = guard(|| panic!("deliberate panic in a unit test"));
        assert_eq!(r, -libc::EIO);
    }

    /// A panic inside a call leaves the file system abandoned (changes
    /// refused with EROFS, reads still served): caught where the call is
    /// guarded, or, on a thread-safe handle, by the next call to take the
    /// mutex the panic poisoned.
    #[test]
    fn a_panic_in_a_call_abandons_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        for (thread_safe, caught_with_fs) in [(false, true), (true, true), (true, false)] {
            let image = dir
                .path()
                .join(format!("{thread_safe}-{caught_with_fs}.img"));
            let opts = ulfs::MkfsOptions {
                size: 4 << 20,
                ..Default::default()
            };
            ulfs::mkfs(&image, &opts).unwrap();
            let fs = ulfs::Fs::mount(&image, ulfs::MountOptions::default()).unwrap();
            let h = ulfs_t::into_raw(Backend::Local(fs), thread_safe);
            let body = || -> Result<i32, Errno> {
                // SAFETY: `h` is live and used by this thread only.
                let _fs = unsafe { fs_mut(h) }?;
                panic!("deliberate panic in a unit test")
            };
            let r = if caught_with_fs {
                guard_fs(h, body)
            } else {
                guard(body)
            };
            assert_eq!(r, -libc::EIO);
            let what =
                format!("thread-safe {thread_safe}, caught with the handle {caught_with_fs}");
            // SAFETY: `h` is live; the paths are NUL-terminated.
            unsafe {
                assert_eq!(
                    crate::ulfs_mkdir(h, c"/d".as_ptr(), 0o755),
                    -libc::EROFS,
                    "{what}"
                );
                let mut st: libc::stat = std::mem::zeroed();
                assert_eq!(crate::ulfs_stat(h, c"/".as_ptr(), &mut st), 0, "{what}");
                crate::ulfs_unmount(h);
            }
        }
    }

    #[test]
    fn null_pointers_are_efault() {
        // SAFETY: NULL is explicitly allowed by each helper's contract.
        unsafe {
            assert_eq!(c_bytes(std::ptr::null()), Err(Errno::EFAULT));
            assert_eq!(in_buf(std::ptr::null(), 1), Err(Errno::EFAULT));
            assert_eq!(in_buf(std::ptr::null(), 0), Ok(&[][..]));
            assert!(out_buf(std::ptr::null_mut(), 0).is_ok());
            assert_eq!(
                out_buf(std::ptr::null_mut(), 5).map(|b| b.len()),
                Err(Errno::EFAULT)
            );
            assert_eq!(put(std::ptr::null_mut::<u32>(), 1), Err(Errno::EFAULT));
            assert!(ulfs_t::from_raw(std::ptr::null_mut()).is_none());
            assert!(fs_mut(std::ptr::null_mut()).is_err());
        }
    }

    #[test]
    fn times_are_validated() {
        // SAFETY: NULL is allowed; the arrays below hold two timespecs each.
        unsafe {
            assert_eq!(c_times(std::ptr::null()), Ok(None));
            let ok = [
                libc::timespec {
                    tv_sec: 5,
                    tv_nsec: 999_999_999,
                },
                libc::timespec {
                    tv_sec: -1,
                    tv_nsec: libc::UTIME_OMIT,
                },
            ];
            let got = c_times(ok.as_ptr()).unwrap().unwrap();
            assert_eq!(
                got[0],
                Timespec {
                    sec: 5,
                    nsec: 999_999_999
                }
            );
            assert_eq!(got[1].nsec, ulfs::UTIME_OMIT);
            let now = [libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            }; 2];
            assert!(c_times(now.as_ptr()).is_ok());
            for bad in [-1, 1_000_000_000] {
                let t = [
                    libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    },
                    libc::timespec {
                        tv_sec: 0,
                        tv_nsec: bad,
                    },
                ];
                assert_eq!(c_times(t.as_ptr()), Err(Errno::EINVAL));
            }
        }
    }

    #[test]
    fn buffers_are_capped_and_offsets_checked() {
        let data = [1u8, 2, 3];
        // SAFETY: `data` is readable for 3 bytes.
        let s = unsafe { in_buf(data.as_ptr(), 3) }.unwrap();
        assert_eq!(s, &data);
        assert_eq!(offset(-1), Err(Errno::EINVAL));
        assert_eq!(offset(i64::MIN), Err(Errno::EINVAL));
        assert_eq!(offset(0), Ok(0));
        assert_eq!(offset(i64::MAX), Ok(i64::MAX as u64));
        assert_eq!(ssize(MAX_RW), Ok(MAX_RW as isize));
    }
}

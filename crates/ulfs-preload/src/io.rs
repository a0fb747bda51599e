//! The interposed calls that open files and work on descriptors: the
//! `open` family (with glibc's `_2` FORTIFY forms and the `64` aliases),
//! `close`, `read`/`write` and their positional and vectored forms,
//! `lseek`, `fstat`, `fsync`, `ftruncate`, `fchmod`, `fchown`, `fallocate`,
//! `posix_fadvise`, `dup`/`dup2`/`dup3` and `fcntl`.
//! A descriptor that is not an image file's goes to libc after one atomic
//! load (`fds::ulfs_fd`).
//!
//! `open` and `fcntl` are variadic in C. Stable Rust cannot define a
//! variadic function, so they are defined with their optional argument
//! as a plain one: on x86-64 and AArch64 Linux a variadic integer argument
//! travels exactly like a named one, and it is read only when the call
//! carries it (`O_CREAT`/`O_TMPFILE` for `open`, the commands that take an
//! argument for `fcntl`).

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_uint, c_void};
use ulfs_client::Backend;
use ulfs_client::locks::{LockAnswer, LockClass, LockCmd, LockRequest};

use libc::{iovec, mode_t, off_t, size_t, ssize_t};

use crate::fds;
use crate::locks::{self, Kind, Owner};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::{Image, image};
use crate::std_streams;
use crate::{fail, ret};

type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;

/// Runs `f` on the file system behind a descriptor known to be an image
/// file's.
fn on_image<T>(f: impl FnOnce(&mut Backend) -> ulfs::Result<T>) -> ulfs::Result<T> {
    match image() {
        Some(i) => i.with(f),
        None => Err(ulfs::Errno::EBADF),
    }
}

/// Bytes of a C string argument (NULL is left to the callee to refuse).
///
/// # Safety
/// `p` NULL or NUL-terminated.
pub unsafe fn arg<'a>(p: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: by the contract, a non-NULL `p` is NUL-terminated.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A rewritten path as a C string.
pub fn c_path(p: Vec<u8>) -> CString {
    CString::new(p).unwrap_or_else(|_| c"".to_owned())
}

/// The common body of every open: routes the path, and for the image
/// opens the file and binds a placeholder to it.
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn open_at(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let real_openat = real!(openat: OpenatFn);
    // SAFETY: by the contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        // SAFETY: the program's own arguments, passed on unchanged.
        return unsafe { real_openat(dirfd, path, flags, mode) };
    };
    if let Some(u) = fds::proc_fd_path(p) {
        return reopen_image(image, u, flags);
    }
    if fds::proc_fd_number(p).is_some_and(fds::is_library) {
        // The library's descriptor is not open, for the program.
        return fail(libc::ENOENT);
    }
    match route(image, dirfd, p) {
        Route::Host { dirfd, path: None } => {
            give_way_before_fifo(dirfd, path, flags);
            // SAFETY: the program's own arguments, passed on unchanged.
            unsafe { real_openat(dirfd, path, flags, mode) }
        }
        Route::Host {
            dirfd,
            path: Some(abs),
        } => {
            let c = c_path(abs);
            give_way_before_fifo(dirfd, c.as_ptr(), flags);
            // SAFETY: a NUL-terminated path that outlives the call.
            unsafe { real_openat(dirfd, c.as_ptr(), flags, mode) }
        }
        Route::Image { dirfd, path } => open_image(image, dirfd, &path, flags, mode),
    }
}

/// Opening a FIFO blocks until its other end is opened, perhaps by a
/// process waiting for the image: a process holding the image lets go of
/// it first (only then is the host path looked at, one `stat`).
fn give_way_before_fifo(dirfd: c_int, path: *const c_char, flags: c_int) {
    if flags & libc::O_NONBLOCK != 0 || !crate::state::held_here() || crate::fds::inside_library() {
        return;
    }
    let errno = crate::errno();
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let fstatat =
        real!(fstatat: unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int);
    // SAFETY: a NUL-terminated path (or NULL, refused) and a valid buffer.
    if unsafe { fstatat(dirfd, path, &mut st, 0) } == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFIFO
    {
        crate::turns::give_way();
    }
    crate::set_errno(errno);
}

/// Opens `/proc/self/fd/N` (or `/dev/fd/N`, `/dev/stdout`, ...) where N
/// is an image descriptor: as on Linux, a new open file description of
/// the same file (by inode), with the new flags; the kernel would open the
/// placeholder instead.
pub fn reopen_image(image: &Image, u: c_int, flags: c_int) -> c_int {
    if flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL {
        return fail(libc::EEXIST);
    }
    let clear = libc::O_CLOEXEC | libc::O_CREAT | libc::O_NOCTTY;
    behind_placeholder(image, flags, |fs| fs.reopen(u, flags & !clear))
}

/// Opens an image file behind a fresh placeholder descriptor.
pub fn open_image(image: &Image, dirfd: c_int, path: &[u8], flags: c_int, mode: c_uint) -> c_int {
    behind_placeholder(image, flags, |fs| {
        if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            fs.set_umask_to(crate::umask::current())?;
        }
        fs.openat(dirfd, path, flags & !libc::O_CLOEXEC, mode)
    })
}

/// A fresh placeholder (close-on-exec when `flags` say so) standing for
/// the image file `open` opens. It is bound under the file system's lock,
/// as every table change is (a hand-over notes the table's files).
fn behind_placeholder(
    image: &Image,
    flags: c_int,
    open: impl FnOnce(&mut Backend) -> ulfs::Result<c_int>,
) -> c_int {
    let ph = match fds::placeholder(flags & libc::O_CLOEXEC != 0) {
        Ok(fd) => fd,
        Err(e) => return fail(e),
    };
    let opened = image.with(|fs| {
        fds::bind(ph, open(fs)?);
        Ok(())
    });
    match opened {
        Ok(()) => {
            std_streams::follow(ph);
            ph
        }
        Err(e) => {
            fds::close_kernel(ph);
            fail(e.raw())
        }
    }
}

/// `open(2)`.
///
/// # Safety
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract is open's.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// `open64`: `open` (off_t is 64 bits).
///
/// # Safety
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's contract is open's.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// `openat(2)`.
///
/// # Safety
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's contract is openat's.
    unsafe { open_at(dirfd, path, flags, mode) }
}

/// `openat64`: `openat`.
///
/// # Safety
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller's contract is openat's.
    unsafe { open_at(dirfd, path, flags, mode) }
}

/// glibc's FORTIFY `open` (no mode: the checked form refuses O_CREAT
/// without one at compile time).
///
/// # Safety
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract is open's.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract is open's.
    unsafe { open_at(libc::AT_FDCWD, path, flags, 0) }
}

/// # Safety
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract is openat's.
    unsafe { open_at(dirfd, path, flags, 0) }
}

/// # Safety
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract is openat's.
    unsafe { open_at(dirfd, path, flags, 0) }
}

/// `creat(2)`.
///
/// # Safety
/// As libc's `creat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: the caller's contract is creat's.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// # Safety
/// As libc's `creat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's contract is creat's.
    unsafe { creat(path, mode) }
}

/// `close(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn close(fd: c_int) -> c_int {
    if fds::is_image(fd) {
        std_streams::before_change(fd);
    }
    match close_image(fd) {
        Some(r) => {
            fds::close_kernel(fd);
            std_streams::follow(fd);
            ret(r.map(|()| 0))
        }
        // The library's own descriptor (the image file, the placeholder
        // base): not the program's to close. A program closing "every"
        // descriptor is told it was not open, as it was not, for it.
        None if fds::is_library(fd) => fail(libc::EBADF),
        None => {
            let real_close = real!(close: unsafe extern "C" fn(c_int) -> c_int);
            // SAFETY: the program's own descriptor.
            unsafe { real_close(fd) }
        }
    }
}

/// Takes kernel descriptor `fd` out of the table and closes its image
/// file, with the locks the close ends: the process's POSIX locks on the
/// file, and the description's OFD and `flock` locks when it was its last
/// descriptor. `None` when `fd` was no image file's (a pending one is
/// forgotten without mounting, unless the process holds locks, which its
/// close may end). The table changes under the file system's lock, so a
/// hand-over to another process (which notes the table's files) never
/// misses it.
fn close_image(fd: c_int) -> Option<ulfs::Result<()>> {
    if fds::bound(fd).is_none() && !(fds::is_image(fd) && locks::holds_any()) {
        fds::unbind(fd);
        return None;
    }
    let image = image()?;
    // No hand-over first: the call is about a descriptor of this mount.
    let r = image.with_no_turn(|fs| {
        let Some(u) = fds::unbind(fd) else {
            return Ok(None);
        };
        let d = fs.file_description(u)?;
        if d.refs == 1 {
            crate::inherit::closing_description(fs, u, d.id);
        }
        fs.close(u)?;
        // Holding the image still: the next process to mount it sees the
        // locks gone.
        locks::release_process(d.ino);
        if d.refs == 1 {
            locks::release_owner(Owner::Ofd(d.id));
            locks::release_owner(Owner::Flock(d.id));
        }
        Ok(Some(()))
    });
    match r {
        Ok(Some(())) => Some(Ok(())),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    }
}

/// A mutable byte slice from a C buffer (EFAULT for NULL with a length).
///
/// # Safety
/// `buf` NULL or valid for `n` bytes.
unsafe fn buf_mut<'a>(buf: *mut c_void, n: size_t) -> ulfs::Result<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    // SAFETY: non-NULL and valid for `n` bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) })
}

/// # Safety
/// `buf` NULL or valid for `n` bytes.
unsafe fn buf_ref<'a>(buf: *const c_void, n: size_t) -> ulfs::Result<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    // SAFETY: non-NULL and valid for `n` bytes by the contract.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast(), n) })
}

fn count(r: ulfs::Result<usize>) -> ssize_t {
    ret(r.map(|n| n as ssize_t))
}

/// `read(2)`.
///
/// # Safety
/// As libc's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        if !crate::turns::before_read(fd) {
            return fail(libc::EINTR);
        }
        let real_read = real!(read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { real_read(fd, buf, n) };
    };
    // SAFETY: `buf` valid for `n` bytes by read's contract.
    count(unsafe { buf_mut(buf, n) }.and_then(|b| on_image(|fs| fs.read(u, b))))
}

/// `write(2)`.
///
/// # Safety
/// As libc's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        let real_write =
            real!(write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { crate::turns::write(fd, buf, n, real_write) };
    };
    // SAFETY: `buf` valid for `n` bytes by write's contract.
    count(unsafe { buf_ref(buf, n) }.and_then(|b| on_image(|fs| fs.write(u, b))))
}

/// A negative offset is EINVAL, as the kernel says.
fn offset(off: off_t) -> ulfs::Result<u64> {
    u64::try_from(off).map_err(|_| ulfs::Errno::EINVAL)
}

/// `pread(2)`.
///
/// # Safety
/// As libc's `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        let real_pread =
            real!(pread: unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { real_pread(fd, buf, n, off) };
    };
    // SAFETY: `buf` valid for `n` bytes by pread's contract.
    let r = offset(off)
        .and_then(|o| unsafe { buf_mut(buf, n) }.and_then(|b| on_image(|fs| fs.pread(u, b, o))));
    count(r)
}

/// # Safety
/// As libc's `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's contract is pread's.
    unsafe { pread(fd, buf, n, off) }
}

/// `pwrite(2)`.
///
/// # Safety
/// As libc's `pwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        let real_pwrite =
            real!(pwrite: unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { real_pwrite(fd, buf, n, off) };
    };
    // SAFETY: `buf` valid for `n` bytes by pwrite's contract.
    let r = offset(off)
        .and_then(|o| unsafe { buf_ref(buf, n) }.and_then(|b| on_image(|fs| fs.pwrite(u, b, o))));
    count(r)
}

/// # Safety
/// As libc's `pwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: the caller's contract is pwrite's.
    unsafe { pwrite(fd, buf, n, off) }
}

/// The iovecs of a vectored call as slices.
///
/// # Safety
/// `iov` NULL or valid for `n` iovecs, each valid for its length.
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> ulfs::Result<Vec<&'a mut [u8]>> {
    let n = usize::try_from(n).map_err(|_| ulfs::Errno::EINVAL)?;
    if n > libc::UIO_MAXIOV as usize {
        return Err(ulfs::Errno::EINVAL);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    // SAFETY: `iov` valid for `n` iovecs by the contract.
    let v = unsafe { std::slice::from_raw_parts(iov, n) };
    // SAFETY: each iovec valid for its length by the contract.
    v.iter()
        .map(|i| unsafe { buf_mut(i.iov_base, i.iov_len) })
        .collect()
}

/// `readv(2)`: the buffers filled in order (a short read ends the call),
/// as a file read behaves; the whole vector's range is checked first, and
/// through a server one that fits the channel is one request.
///
/// # Safety
/// As libc's `readv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        if !crate::turns::before_read(fd) {
            return fail(libc::EINTR);
        }
        let real_readv = real!(readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { real_readv(fd, iov, n) };
    };
    // SAFETY: readv's contract.
    let r = unsafe { iovecs(iov, n) }.and_then(|bufs| {
        on_image(|fs| {
            let mut slices: Vec<std::io::IoSliceMut> =
                bufs.into_iter().map(std::io::IoSliceMut::new).collect();
            fs.readv(u, &mut slices)
        })
    });
    count(r)
}

/// `writev(2)`: the buffers written in order.
///
/// # Safety
/// As libc's `writev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        let real_writev =
            real!(writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t);
        // SAFETY: the program's own arguments.
        return crate::turns::write_whole(fd, || unsafe { real_writev(fd, iov, n) });
    };
    // SAFETY: writev's contract.
    let r = unsafe { iovecs(iov, n) }.and_then(|bufs| {
        on_image(|fs| {
            let slices: Vec<std::io::IoSlice> =
                bufs.iter().map(|b| std::io::IoSlice::new(b)).collect();
            fs.writev(u, &slices)
        })
    });
    count(r)
}

/// `lseek(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        if fds::is_library(fd) {
            return fail(libc::EBADF);
        }
        let real_lseek = real!(lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t);
        // SAFETY: the program's own arguments.
        return unsafe { real_lseek(fd, off, whence) };
    };
    ret(on_image(|fs| fs.lseek(u, off, whence)).map(|o| o as off_t))
}

#[unsafe(no_mangle)]
pub extern "C" fn lseek64(fd: c_int, off: off_t, whence: c_int) -> off_t {
    lseek(fd, off, whence)
}

/// `fstat(2)` of an image descriptor into `st`.
///
/// # Safety
/// `st` NULL or writable for one `struct stat`.
pub unsafe fn fstat_image(u: c_int, st: *mut libc::stat) -> c_int {
    if st.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: `st` is non-NULL and writable for one `struct stat` by the
    // contract; `MaybeUninit` makes no claim on what it holds now.
    let out = unsafe { &mut *st.cast::<std::mem::MaybeUninit<libc::stat>>() };
    match on_image(|fs| fs.fstat_libc(u, out)) {
        Ok(()) => 0,
        Err(e) => fail(e.raw()),
    }
}

/// `fstat(2)`.
///
/// # Safety
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    match fds::ulfs_fd(fd) {
        // SAFETY: fstat's contract.
        Some(u) => unsafe { fstat_image(u, st) },
        None if fds::is_library(fd) => fail(libc::EBADF),
        None => {
            let real_fstat = real!(fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int);
            // SAFETY: the program's own arguments.
            unsafe { real_fstat(fd, st) }
        }
    }
}

/// # Safety
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat64(fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract is fstat's (the structs are one on 64-bit).
    unsafe { fstat(fd, st) }
}

/// glibc before 2.33 compiled `fstat` into this.
///
/// # Safety
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    match fds::ulfs_fd(fd) {
        // SAFETY: fstat's contract.
        Some(u) => unsafe { fstat_image(u, st) },
        None => {
            let real_fxstat =
                real!(__fxstat: unsafe extern "C" fn(c_int, c_int, *mut libc::stat) -> c_int);
            // SAFETY: the program's own arguments.
            unsafe { real_fxstat(ver, fd, st) }
        }
    }
}

/// # Safety
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { __fxstat(ver, fd, st) }
}

/// Defines a call on one descriptor: image descriptors go to `$image`,
/// others to libc's `$name`.
macro_rules! fd_call {
    ($(#[$doc:meta])* $name:ident($($a:ident: $t:ty),*) => |$fs:ident, $u:ident| $image:expr) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(fd: c_int $(, $a: $t)*) -> c_int {
            match fds::ulfs_fd(fd) {
                Some($u) => ret(on_image(|$fs| $image).map(|_| 0)),
                None if fds::is_library(fd) => fail(libc::EBADF),
                None => {
                    let f = real!($name: unsafe extern "C" fn(c_int $(, $t)*) -> c_int);
                    // SAFETY: the program's own arguments.
                    unsafe { f(fd $(, $a)*) }
                }
            }
        }
    };
}

fd_call!(
    /// `fsync(2)`.
    fsync() => |fs, u| fs.fsync(u)
);
fd_call!(
    /// `fdatasync(2)`.
    fdatasync() => |fs, u| fs.fdatasync(u)
);
fd_call!(
    /// `ftruncate(2)`.
    ftruncate(len: off_t) => |fs, u| offset(len).and_then(|l| fs.ftruncate(u, l))
);
fd_call!(
    /// `ftruncate64`: `ftruncate`.
    ftruncate64(len: off_t) => |fs, u| offset(len).and_then(|l| fs.ftruncate(u, l))
);
fd_call!(
    /// `fchmod(2)`.
    fchmod(mode: mode_t) => |fs, u| fs.fchmod(u, mode)
);
fd_call!(
    /// `fchown(2)`.
    fchown(uid: libc::uid_t, gid: libc::gid_t) => |fs, u| fs.fchown(u, uid, gid)
);
fd_call!(
    /// `fallocate(2)`.
    fallocate(mode: c_int, off: off_t, len: off_t) => |fs, u| {
        let (o, l) = (offset(off)?, offset(len)?);
        fs.fallocate(u, mode, o, l)
    }
);
fd_call!(
    /// `fallocate64`: `fallocate`.
    fallocate64(mode: c_int, off: off_t, len: off_t) => |fs, u| {
        let (o, l) = (offset(off)?, offset(len)?);
        fs.fallocate(u, mode, o, l)
    }
);
fd_call!(
    /// `futimens(3)`.
    futimens(times: *const libc::timespec) => |fs, u| {
        // SAFETY: NULL or two timespecs, by futimens's contract.
        let t = unsafe { crate::paths::times_of(times) };
        fs.futimens(u, t)
    }
);
fd_call!(
    /// `futimes(3)`: microseconds.
    futimes(tv: *const libc::timeval) => |fs, u| {
        // SAFETY: NULL or two timevals, by futimes's contract.
        let t = unsafe { crate::paths::times_of_timeval(tv) }?;
        fs.futimens(u, t)
    }
);

/// `posix_fadvise(2)` on an image file: advice only, taken as given. It
/// returns the error number rather than setting errno.
#[unsafe(no_mangle)]
pub extern "C" fn posix_fadvise(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    match fds::ulfs_fd(fd) {
        Some(_) if off < 0 || len < 0 || !(0..=5).contains(&advice) => libc::EINVAL,
        Some(_) => 0,
        None => {
            let f = real!(posix_fadvise: unsafe extern "C" fn(c_int, off_t, off_t, c_int) -> c_int);
            // SAFETY: the program's own arguments.
            unsafe { f(fd, off, len, advice) }
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn posix_fadvise64(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    posix_fadvise(fd, off, len, advice)
}

/// Makes kernel descriptor `new` (already a placeholder) another
/// descriptor of image descriptor `u`.
fn bind_dup(new: c_int, u: c_int) -> c_int {
    let dup = on_image(|fs| {
        let u2 = fs.dup(u)?;
        fds::bind(new, u2);
        Ok(())
    });
    match dup {
        Ok(()) => {
            std_streams::follow(new);
            new
        }
        Err(e) => {
            fds::close_kernel(new);
            fail(e.raw())
        }
    }
}

/// Before the kernel reuses descriptor `fd` (dup2 and dup3 close their
/// target): an image file it stood for is closed.
fn release(fd: c_int) {
    let _ = close_image(fd);
}

/// `dup(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn dup(fd: c_int) -> c_int {
    if fds::is_library(fd) {
        // Not the program's: as if it were not open.
        return fail(libc::EBADF);
    }
    let real_dup = real!(dup: unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: the program's own descriptor (or a placeholder of it).
    let new = unsafe { real_dup(fd) };
    match fds::ulfs_fd(fd) {
        Some(u) if new >= 0 => bind_dup(new, u),
        _ => new,
    }
}

/// `dup3(2)` (and `dup2` with flags 0, and the same descriptor twice
/// checked as dup2 does).
fn dup_onto(old: c_int, new: c_int, flags: c_int, is_dup2: bool) -> c_int {
    if fds::is_library(old) {
        // Not the program's: as if it were not open.
        return fail(libc::EBADF);
    }
    if is_dup2 && old == new {
        let real_fcntl = real!(fcntl: unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
        // SAFETY: F_GETFD takes no argument.
        return if unsafe { real_fcntl(old, libc::F_GETFD, 0) } < 0 {
            -1
        } else {
            new
        };
    }
    let real_dup3 = real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int);
    if fds::is_library(new) {
        // The kernel would close the library's descriptor there.
        return fail(libc::EBUSY);
    }
    let src = fds::ulfs_fd(old);
    if src.is_some() || fds::is_image(new) {
        std_streams::before_change(new);
    }
    // SAFETY: the program's own descriptors.
    let r = unsafe { real_dup3(old, new, flags) };
    if r < 0 {
        return r;
    }
    release(new);
    match src {
        Some(u) => bind_dup(new, u),
        None => {
            std_streams::follow(new);
            new
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    dup_onto(old, new, 0, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    dup_onto(old, new, flags, false)
}

/// `fcntl(2)`: on an image descriptor, F_DUPFD / F_DUPFD_CLOEXEC give a
/// new image descriptor, F_GETFD / F_SETFD work on the placeholder (the
/// close-on-exec flag is the kernel descriptor's), F_GETFL / F_SETFL on
/// the open file, and the record-lock commands (POSIX and OFD) on the
/// process's own lock table (`locks.rs`). Other descriptors go to libc.
#[unsafe(no_mangle)]
pub extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let real_fcntl = real!(fcntl: unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
    // The close-on-exec flag is the kernel descriptor's, image file or
    // not (so asking needs no mount).
    if fds::is_library(fd) {
        // The library's own descriptor: not open, for the program (a
        // shell saving it with F_DUPFD would otherwise copy the image's
        // locked file, or the run's shared memory).
        return fail(libc::EBADF);
    }
    let own_flag = matches!(cmd, libc::F_GETFD | libc::F_SETFD);
    let Some(u) = (!own_flag).then(|| fds::ulfs_fd(fd)).flatten() else {
        // SAFETY: the program's own arguments.
        return unsafe { real_fcntl(fd, cmd, arg) };
    };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: duplicating the placeholder.
            let new = unsafe { real_fcntl(fd, cmd, arg) };
            if new < 0 { new } else { bind_dup(new, u) }
        }
        libc::F_GETFL => ret(on_image(|fs| fs.fcntl_getfl(u))),
        libc::F_SETFL => ret(on_image(|fs| fs.fcntl_setfl(u, arg as c_int)).map(|()| 0)),
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => ret(record_lock(u, cmd, arg as *mut libc::flock).map(|()| 0)),
        _ => fail(libc::EINVAL),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl(fd, cmd, arg)
}

/// A record-lock command on image descriptor `u` (`struct flock` at `fl`).
fn record_lock(u: c_int, cmd: c_int, fl: *mut libc::flock) -> ulfs::Result<()> {
    if fl.is_null() {
        return Err(ulfs::Errno::EFAULT);
    }
    // SAFETY: non-NULL, and a `struct flock` by fcntl's contract.
    let req = unsafe { fl.read() };
    let ofd = matches!(
        cmd,
        libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW
    );
    if ofd && req.l_pid != 0 {
        return Err(ulfs::Errno::EINVAL);
    }
    if crate::served::socket().is_some() {
        let class = if ofd {
            LockClass::Ofd
        } else {
            LockClass::Posix
        };
        let q = LockRequest::from_flock(class, &req);
        let getlk = matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK);
        let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
        let out = match lock_on_server(u, &q, getlk, wait)? {
            LockAnswer::Blocked(h) if getlk => h.to_flock(),
            LockAnswer::Free => libc::flock {
                l_type: libc::F_UNLCK as i16,
                ..req
            },
            _ => return Ok(()),
        };
        // SAFETY: writable by fcntl's contract.
        unsafe { fl.write(out) };
        return Ok(());
    }
    let kind = match req.l_type as c_int {
        libc::F_UNLCK => Kind::Unlock,
        libc::F_RDLCK => Kind::Read,
        libc::F_WRLCK => Kind::Write,
        _ => return Err(ulfs::Errno::EINVAL),
    };
    let getlk = matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK);
    if getlk && kind == Kind::Unlock {
        return Err(ulfs::Errno::EINVAL);
    }
    let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
    // Every try holds the image: the other processes' locks are current.
    lock_until_set(wait, |fs| {
        let d = fs.file_description(u)?;
        let size = fs.fstat(u)?.size;
        let pos = fs.lseek(u, 0, libc::SEEK_CUR)?;
        let acc = fs.fcntl_getfl(u)? & libc::O_ACCMODE;
        let (start, end) = lock_range(&req, size, pos)?;
        let owner = if ofd {
            Owner::Ofd(d.id)
        } else {
            Owner::Process
        };
        if getlk {
            let mut out = req;
            match locks::conflict(d.ino, owner, kind == Kind::Write, start, end) {
                Some(b) => {
                    out.l_type = if b.write {
                        libc::F_WRLCK
                    } else {
                        libc::F_RDLCK
                    } as i16;
                    out.l_whence = libc::SEEK_SET as i16;
                    out.l_start = b.start as i64;
                    out.l_len = if b.end == u64::MAX {
                        0
                    } else {
                        (b.end - b.start) as i64
                    };
                    out.l_pid = b.pid;
                }
                None => out.l_type = libc::F_UNLCK as i16,
            }
            // SAFETY: writable by fcntl's contract.
            unsafe { fl.write(out) };
            return Ok(Ok(()));
        }
        match kind {
            Kind::Read if acc == libc::O_WRONLY => return Err(ulfs::Errno::EBADF),
            Kind::Write if acc == libc::O_RDONLY => return Err(ulfs::Errno::EBADF),
            _ => {}
        }
        Ok(locks::try_set(d.ino, owner, kind, start, end))
    })
}

/// A lock request the server judges (`ulfs run --server`): it keeps every
/// process's locks. A conflict is waited out here, trying again every few
/// milliseconds with the image let go meanwhile (the holder is another
/// process, or another thread of this one), EINTR as Linux after a signal
/// whose handler does not restart calls.
fn lock_on_server(u: c_int, q: &LockRequest, get: bool, wait: bool) -> ulfs::Result<LockAnswer> {
    let cmd = if get { LockCmd::Get } else { LockCmd::Set };
    let held = (wait && !get).then(crate::lock_waits::HeldSignals::hold);
    let pause_for_lock = |ms| held.as_ref().is_none_or(|h| h.pause(ms));
    loop {
        let answer = on_image(|b| match crate::served::client(b) {
            Some(c) => c.lock(u, cmd, q),
            None => Err(ulfs::Errno::EIO),
        })?;
        match answer {
            LockAnswer::Blocked(_) if !get && wait => {
                if !pause_for_lock(2) {
                    return Err(ulfs::Errno(libc::EINTR));
                }
            }
            LockAnswer::Blocked(_) if !get => return Err(ulfs::Errno::EAGAIN),
            other => return Ok(other),
        }
    }
}

/// The byte range `[start, end)` a `struct flock` names, for a file of
/// `size` bytes at offset `pos`.
fn lock_range(req: &libc::flock, size: u64, pos: u64) -> ulfs::Result<(u64, u64)> {
    let base = match req.l_whence as c_int {
        libc::SEEK_SET => 0i128,
        libc::SEEK_CUR => pos as i128,
        libc::SEEK_END => size as i128,
        _ => return Err(ulfs::Errno::EINVAL),
    };
    let start = base + req.l_start as i128;
    let (start, end) = match req.l_len {
        0 => (start, u64::MAX as i128),
        n if n > 0 => (start, start + n as i128),
        n => (start + n as i128, start),
    };
    if start < 0 {
        return Err(ulfs::Errno::EINVAL);
    }
    // Offsets past what off_t holds: EOVERFLOW, as Linux says.
    let last = i64::MAX as i128;
    if start > last || (req.l_len != 0 && end - 1 > last) {
        return Err(ulfs::Errno::EOVERFLOW);
    }
    Ok((start as u64, end.min(u64::MAX as i128) as u64))
}

/// How long a lock request waits for another process before giving up
/// with EDEADLK when this process cannot let go of the image for it.
const LOCK_STUCK: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `try_once` (a lock request, holding the image) until the lock is
/// set; with `wait`, a conflict is waited out as Linux does (without
/// `wait` it is EAGAIN): another thread's lock outside the file system's
/// lock, another process's while letting go of the image whenever
/// another process wants it (the holder must mount it to unlock; nothing
/// changes while this process holds it, so it tries again only after
/// letting go, or every `RETRY` for a holder that died). A signal whose
/// handler does not restart calls ends the wait with EINTR, as it ends
/// Linux's, whenever it comes (`lock_waits`).
fn lock_until_set(
    wait: bool,
    try_once: impl Fn(&mut Backend) -> ulfs::Result<Result<(), locks::Refused>>,
) -> ulfs::Result<()> {
    const RETRY: std::time::Duration = std::time::Duration::from_millis(200);
    let mut stuck_since = None;
    // A signal that comes between two sleeps must still end the wait.
    let held = wait.then(crate::lock_waits::HeldSignals::hold);
    let pause_for_lock = |ms| held.as_ref().is_none_or(|h| h.pause(ms));
    loop {
        match on_image(&try_once)? {
            Ok(()) => return Ok(()),
            Err(locks::Refused::TooMany) => return Err(ulfs::Errno(libc::ENOLCK)),
            Err(_) if !wait => return Err(ulfs::Errno::EAGAIN),
            Err(locks::Refused::Local) => {
                if !pause_for_lock(5) {
                    return Err(ulfs::Errno(libc::EINTR));
                }
            }
            Err(locks::Refused::Foreign) => {
                let since = std::time::Instant::now();
                while crate::state::held_here() && since.elapsed() < RETRY {
                    if crate::shared::wanted() {
                        crate::turns::give_way();
                    } else if !pause_for_lock(5) {
                        return Err(ulfs::Errno(libc::EINTR));
                    }
                }
                if crate::state::held_here() {
                    // Open files that cannot be handed over keep the image
                    // here: the holder of the lock cannot run.
                    let stuck = *stuck_since.get_or_insert_with(std::time::Instant::now);
                    if crate::shared::wanted() && stuck.elapsed() > LOCK_STUCK {
                        return Err(ulfs::Errno(libc::EDEADLK));
                    }
                }
            }
        }
    }
}

/// `lockf(3)`: glibc's calls `fcntl` internally, out of this library's
/// sight; here it is a POSIX lock from the current offset, as glibc's.
#[unsafe(no_mangle)]
pub extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    let Some(u) = fds::ulfs_fd(fd) else {
        let f = real!(lockf: unsafe extern "C" fn(c_int, c_int, off_t) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd, cmd, len) };
    };
    let mut fl = libc::flock {
        l_type: libc::F_WRLCK as i16,
        l_whence: libc::SEEK_CUR as i16,
        l_start: 0,
        l_len: len,
        l_pid: 0,
    };
    let fcntl_cmd = match cmd {
        libc::F_LOCK => libc::F_SETLKW,
        libc::F_TLOCK => libc::F_SETLK,
        libc::F_ULOCK => {
            fl.l_type = libc::F_UNLCK as i16;
            libc::F_SETLK
        }
        libc::F_TEST => {
            fl.l_type = libc::F_RDLCK as i16;
            if let Err(e) = record_lock(u, libc::F_GETLK, &mut fl) {
                return fail(e.raw());
            }
            // Locked by another process: EACCES, as glibc says.
            return if fl.l_type == libc::F_UNLCK as i16 || fl.l_pid == std::process::id() as i32 {
                0
            } else {
                fail(libc::EACCES)
            };
        }
        _ => return fail(libc::EINVAL),
    };
    ret(record_lock(u, fcntl_cmd, &mut fl).map(|()| 0))
}

/// `lockf64`: `lockf`.
#[unsafe(no_mangle)]
pub extern "C" fn lockf64(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    lockf(fd, cmd, len)
}

/// `flock(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    if fds::is_library(fd) {
        // The image lock is a `flock` on the library's descriptor.
        return fail(libc::EBADF);
    }
    let Some(u) = fds::ulfs_fd(fd) else {
        let f = real!(flock: unsafe extern "C" fn(c_int, c_int) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd, op) };
    };
    if crate::served::socket().is_some() {
        let r = LockRequest::flock(op)
            .and_then(|q| lock_on_server(u, &q, false, op & libc::LOCK_NB == 0));
        // EWOULDBLOCK is EAGAIN on Linux.
        return ret(r.map(|_| 0));
    }
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => Kind::Read,
        libc::LOCK_EX => Kind::Write,
        libc::LOCK_UN => Kind::Unlock,
        _ => return fail(libc::EINVAL),
    };
    let r = lock_until_set(op & libc::LOCK_NB == 0, |fs| {
        // An O_PATH descriptor takes no lock (flock's fdget).
        if fs.fcntl_getfl(u)? & libc::O_PATH != 0 {
            return Err(ulfs::Errno::EBADF);
        }
        let d = fs.file_description(u)?;
        Ok(locks::try_set(d.ino, Owner::Flock(d.id), kind, 0, u64::MAX))
    });
    ret(r.map(|()| 0))
}

/// `getdents64(2)` (glibc's wrapper) on an image directory.
///
/// # Safety
/// As libc's `getdents64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let Some(u) = fds::ulfs_fd(fd) else {
        let f = real!(getdents64: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd, buf, n) };
    };
    // SAFETY: `buf` valid for `n` bytes by the contract.
    count(unsafe { buf_mut(buf, n) }.and_then(|b| on_image(|fs| fs.getdents64(u, b))))
}

/// `posix_fallocate(3)`: returns the error number (errno untouched).
#[unsafe(no_mangle)]
pub extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    let Some(u) = fds::ulfs_fd(fd) else {
        let f = real!(posix_fallocate: unsafe extern "C" fn(c_int, off_t, off_t) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(fd, off, len) };
    };
    if off < 0 || len <= 0 {
        return libc::EINVAL;
    }
    match on_image(|fs| fs.fallocate(u, 0, off as u64, len as u64)) {
        Ok(()) => 0,
        Err(e) => e.raw(),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn posix_fallocate64(fd: c_int, off: off_t, len: off_t) -> c_int {
    posix_fallocate(fd, off, len)
}

/// `close_range(2)`: image descriptors in the range are closed here (or
/// with CLOSE_RANGE_CLOEXEC left to the kernel's flag on the placeholder,
/// so an exec closes them), then the kernel does its part.
#[unsafe(no_mangle)]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if first > last {
        return fail(libc::EINVAL);
    }
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && fds::open_count() > 0 {
        for fd in fds::bound_in(first, last) {
            std_streams::before_change(fd);
            release(fd);
            std_streams::follow(fd);
        }
    }
    let f = real!(close_range: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int);
    // The library's own descriptors are kept: the range is closed around
    // them.
    let mut from = first;
    for lib in fds::library_in(first, last) {
        let lib = lib as c_uint;
        if lib > from {
            // SAFETY: the program's own descriptors.
            if unsafe { f(from, lib - 1, flags) } != 0 {
                return -1;
            }
        }
        if lib == c_uint::MAX {
            return 0;
        }
        from = lib + 1;
    }
    if from > last {
        return 0;
    }
    // SAFETY: the program's own descriptors.
    unsafe { f(from, last, flags) }
}

/// `closefrom(3)`: `close_range(first, ~0, 0)`.
#[unsafe(no_mangle)]
pub extern "C" fn closefrom(first: c_int) {
    if first >= 0 {
        close_range(first as c_uint, c_uint::MAX, 0);
    }
}

/// `sync(2)`: the image's running transaction is committed too.
#[unsafe(no_mangle)]
pub extern "C" fn sync() {
    if let Some(i) = image() {
        let _ = i.with(|fs| fs.sync());
    }
    let f = real!(sync: unsafe extern "C" fn());
    // SAFETY: libc's sync.
    unsafe { f() }
}

/// `syncfs(2)`: on an image descriptor, commits the image.
#[unsafe(no_mangle)]
pub extern "C" fn syncfs(fd: c_int) -> c_int {
    match fds::ulfs_fd(fd) {
        Some(_) => ret(on_image(|fs| fs.sync()).map(|()| 0)),
        None => {
            let f = real!(syncfs: unsafe extern "C" fn(c_int) -> c_int);
            // SAFETY: the program's own descriptor.
            unsafe { f(fd) }
        }
    }
}

/// The positional vectored calls on an image file: each buffer in turn
/// at the advancing offset (a short transfer ends the call); `flags` of
/// the `2` forms other than 0 are EOPNOTSUPP here, and an offset of -1
/// there means the file's own offset, as Linux.
fn vectored_at(
    u: c_int,
    iov: *const iovec,
    n: c_int,
    off: i64,
    write: bool,
) -> ulfs::Result<usize> {
    // SAFETY: the vectored call's contract.
    let bufs = unsafe { iovecs(iov, n) }?;
    on_image(|fs| {
        let mut at = if off == -1 {
            None
        } else {
            Some(u64::try_from(off).map_err(|_| ulfs::Errno::EINVAL)?)
        };
        let mut total = 0;
        for b in bufs {
            let want = b.len();
            let got = match (at, write) {
                (Some(o), false) => fs.pread(u, b, o)?,
                (Some(o), true) => fs.pwrite(u, b, o)?,
                (None, false) => fs.read(u, b)?,
                (None, true) => fs.write(u, b)?,
            };
            total += got;
            at = at.map(|o| o + got as u64);
            if got < want {
                break;
            }
        }
        Ok(total)
    })
}

type VecAtFn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
type VecAt2Fn = unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;

macro_rules! vec_at {
    ($name:ident, $write:expr) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, iov: *const iovec, n: c_int, off: off_t) -> ssize_t {
            match fds::ulfs_fd(fd) {
                Some(_) if off < 0 => fail(libc::EINVAL),
                Some(u) => count(vectored_at(u, iov, n, off, $write)),
                None => {
                    let f = real!($name: VecAtFn);
                    // SAFETY: the program's own arguments.
                    unsafe { f(fd, iov, n, off) }
                }
            }
        }
    };
}

macro_rules! vec_at2 {
    ($name:ident, $write:expr) => {
        /// # Safety
        /// As libc's function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            n: c_int,
            off: off_t,
            flags: c_int,
        ) -> ssize_t {
            match fds::ulfs_fd(fd) {
                Some(_) if flags != 0 => fail(libc::EOPNOTSUPP),
                Some(_) if off < -1 => fail(libc::EINVAL),
                Some(u) => count(vectored_at(u, iov, n, off, $write)),
                None => {
                    let f = real!($name: VecAt2Fn);
                    // SAFETY: the program's own arguments.
                    unsafe { f(fd, iov, n, off, flags) }
                }
            }
        }
    };
}

vec_at!(preadv, false);
vec_at!(preadv64, false);
vec_at!(pwritev, true);
vec_at!(pwritev64, true);
vec_at2!(preadv2, false);
vec_at2!(preadv64v2, false);
vec_at2!(pwritev2, true);
vec_at2!(pwritev64v2, true);

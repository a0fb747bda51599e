//! Unique temporary names in the image: `mkstemp` and its variants and
//! `mkdtemp`. glibc makes the file with an internal `open` this library
//! cannot see, so for a template under the prefix the name is made here:
//! the trailing `XXXXXX` (before `suffixlen` bytes of suffix) replaced by
//! random letters and digits, the file created with `O_EXCL` (mode 0600)
//! or the directory with mode 0700, retried on EEXIST. The template is
//! updated in place, as the C functions do.

use std::ffi::{c_char, c_int};

use crate::io::arg;
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;
use crate::{fail, ret};

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const TRIES: u32 = 238_328; // 62^3, as glibc

/// Whether the template is an image path (and its length, checked).
///
/// # Safety
/// `template` NULL or NUL-terminated.
unsafe fn in_image(template: *const c_char) -> bool {
    // SAFETY: by the contract.
    match (image(), unsafe { arg(template) }) {
        (Some(i), Some(p)) => matches!(route(i, libc::AT_FDCWD, p), Route::Image { .. }),
        _ => false,
    }
}

/// A 64-bit random value from the kernel (no file descriptor involved).
fn random() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: a writable 8-byte buffer.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        // Time and address bits: enough for names retried on EEXIST.
        let t = ulfs::Timespec::now();
        return (t.nsec as u64) ^ ((t.sec as u64) << 20) ^ (&v as *const _ as u64);
    }
    u64::from_ne_bytes(v)
}

/// Fills the six X's and runs `make` on the name until it does not fail
/// with EEXIST. Returns what `make` returned, or -1 with errno.
///
/// # Safety
/// `template` a writable NUL-terminated string.
unsafe fn generate(
    template: *mut c_char,
    suffixlen: c_int,
    make: impl Fn(*const c_char) -> c_int,
) -> c_int {
    // SAFETY: by the contract.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffixlen).unwrap_or(usize::MAX);
    if suffix > len || len - suffix < 6 {
        return fail(libc::EINVAL);
    }
    let start = len - suffix - 6;
    // SAFETY: `start..start + 6` lies inside the string.
    let xs = unsafe { std::slice::from_raw_parts_mut(template.add(start).cast::<u8>(), 6) };
    if xs != b"XXXXXX" {
        return fail(libc::EINVAL);
    }
    for _ in 0..TRIES {
        let mut r = random();
        for x in xs.iter_mut() {
            *x = LETTERS[(r % LETTERS.len() as u64) as usize];
            r /= LETTERS.len() as u64;
        }
        let v = make(template);
        if v >= 0 || crate::errno() != libc::EEXIST {
            return v;
        }
    }
    fail(libc::EEXIST)
}

/// `mkostemps(3)`: the general form.
///
/// # Safety
/// As libc's `mkostemps`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkostemps(template: *mut c_char, suffixlen: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    if !unsafe { in_image(template) } {
        let f = real!(mkostemps: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { f(template, suffixlen, flags) };
    }
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    // SAFETY: the caller's contract; `open` reads the name we wrote.
    unsafe { generate(template, suffixlen, |p| crate::io::open(p, flags, 0o600)) }
}

/// # Safety
/// As libc's `mkstemp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, 0, 0) }
}

/// # Safety
/// As libc's `mkstemp64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, 0, 0) }
}

/// # Safety
/// As libc's `mkostemp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, 0, flags) }
}

/// # Safety
/// As libc's `mkostemp64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, 0, flags) }
}

/// # Safety
/// As libc's `mkstemps`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffixlen: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, suffixlen, 0) }
}

/// # Safety
/// As libc's `mkstemps64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffixlen: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { mkostemps(template, suffixlen, 0) }
}

/// `mkdtemp(3)`.
///
/// # Safety
/// As libc's `mkdtemp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's contract.
    if !unsafe { in_image(template) } {
        let f = real!(mkdtemp: unsafe extern "C" fn(*mut c_char) -> *mut c_char);
        // SAFETY: the program's own argument.
        return unsafe { f(template) };
    }
    let make = |p: *const c_char| {
        // SAFETY: `p` is the template, NUL-terminated.
        let name = unsafe { arg(p) }.unwrap_or_default();
        let image = image().expect("routed to the image");
        match route(image, libc::AT_FDCWD, name) {
            Route::Image { dirfd, path } => {
                ret(image.with(|fs| crate::paths::mkdir_at(fs, dirfd, &path, 0o700)))
            }
            Route::Host { .. } => fail(libc::EXDEV),
        }
    };
    // SAFETY: the caller's contract.
    if unsafe { generate(template, 0, make) } < 0 {
        std::ptr::null_mut()
    } else {
        template
    }
}

//! Wide-character stdio on streams of image files. glibc's cookie
//! streams (`stdio.rs`) have no wide-character side, and its wide calls
//! would crash on one; these serve the byte-stream forms over them, a
//! multibyte character at a time in the program's locale (`mbrtowc`,
//! `wcrtomb`): `fgetwc`, `getwc`, `getwchar`, `fgetws`, `fputwc`, `putwc`,
//! `putwchar`, `fputws`. Other streams go to glibc. The formatted output
//! calls (`fwprintf`, `wprintf`, ...) are variadic: `variadic.rs` serves
//! them through `fputws`. The wide `scanf` calls are not served: on a
//! stream of an image file they fail (-1), the stream being
//! byte-oriented.

use std::ffi::c_int;

use libc::{FILE, wchar_t};

use crate::real::real;

const WEOF: u32 = 0xffff_ffff;

unsafe extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    fn mbrtowc(
        pwc: *mut wchar_t,
        s: *const libc::c_char,
        n: usize,
        ps: *mut libc::mbstate_t,
    ) -> usize;
    fn wcrtomb(s: *mut libc::c_char, wc: wchar_t, ps: *mut libc::mbstate_t) -> usize;
}

/// One character from cookie stream `f`, or WEOF (end of file, an error,
/// or an invalid sequence: EILSEQ).
fn get(f: *mut FILE) -> u32 {
    let mut bytes = [0 as libc::c_char; 8];
    // SAFETY: a zeroed mbstate_t is the initial state.
    let mut state: libc::mbstate_t = unsafe { std::mem::zeroed() };
    for b in bytes.iter_mut() {
        // SAFETY: a live stream of this library.
        let c = unsafe { libc::fgetc(f) };
        if c == libc::EOF {
            return WEOF;
        }
        *b = c as libc::c_char;
        let mut wc: wchar_t = 0;
        // SAFETY: one more byte of the sequence, the state carried on.
        let r = unsafe { mbrtowc(&mut wc, b, 1, &mut state) };
        match r {
            usize::MAX => {
                crate::set_errno(libc::EILSEQ);
                return WEOF;
            }
            // Incomplete: one more byte.
            r if r == usize::MAX - 1 => continue,
            _ => return wc as u32,
        }
    }
    crate::set_errno(libc::EILSEQ);
    WEOF
}

/// Writes character `wc` to cookie stream `f`; WEOF on failure.
fn put(wc: wchar_t, f: *mut FILE) -> u32 {
    let mut buf = [0 as libc::c_char; 16];
    // SAFETY: a zeroed mbstate_t is the initial state.
    let mut state: libc::mbstate_t = unsafe { std::mem::zeroed() };
    let errno = crate::errno();
    // SAFETY: `buf` holds MB_CUR_MAX bytes and more.
    let mut n = unsafe { wcrtomb(buf.as_mut_ptr(), wc, &mut state) };
    if n == usize::MAX {
        crate::set_errno(errno);
        // No such character in the locale (anything past ASCII in the C
        // locale): glibc's wide streams write '?' for it and go on.
        buf[0] = b'?' as libc::c_char;
        n = 1;
    }
    // SAFETY: `n` bytes of `buf` to a live stream.
    if unsafe { libc::fwrite(buf.as_ptr().cast(), 1, n, f) } != n {
        return WEOF;
    }
    wc as u32
}

fn ours(f: *mut FILE) -> bool {
    crate::stdio::is_cookie_stream(f)
}

/// `fgetwc(3)`.
///
/// # Safety
/// As libc's `fgetwc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fgetwc(f: *mut FILE) -> u32 {
    if ours(f) {
        return get(f);
    }
    let g = real!(fgetwc: unsafe extern "C" fn(*mut FILE) -> u32);
    // SAFETY: the program's own stream.
    unsafe { g(f) }
}

/// `getwc(3)`.
///
/// # Safety
/// As libc's `getwc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getwc(f: *mut FILE) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { fgetwc(f) }
}

/// `getwchar(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn getwchar() -> u32 {
    // SAFETY: libc's stdin, read when called.
    unsafe { fgetwc(stdin) }
}

/// `fgetws(3)`.
///
/// # Safety
/// As libc's `fgetws`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fgetws(buf: *mut wchar_t, n: c_int, f: *mut FILE) -> *mut wchar_t {
    if !ours(f) {
        let g = real!(fgetws: unsafe extern "C" fn(*mut wchar_t, c_int, *mut FILE) -> *mut wchar_t);
        // SAFETY: the program's own arguments.
        return unsafe { g(buf, n, f) };
    }
    if n <= 0 || buf.is_null() {
        crate::set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let mut i = 0usize;
    while (i as c_int) < n - 1 {
        let wc = get(f);
        if wc == WEOF {
            break;
        }
        // SAFETY: `i < n - 1`: inside the caller's buffer.
        unsafe { *buf.add(i) = wc as wchar_t };
        i += 1;
        if wc == '\n' as u32 {
            break;
        }
    }
    if i == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `i <= n - 1`.
    unsafe { *buf.add(i) = 0 };
    buf
}

/// `fputwc(3)`.
///
/// # Safety
/// As libc's `fputwc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fputwc(wc: wchar_t, f: *mut FILE) -> u32 {
    if ours(f) {
        return put(wc, f);
    }
    let g = real!(fputwc: unsafe extern "C" fn(wchar_t, *mut FILE) -> u32);
    // SAFETY: the program's own arguments.
    unsafe { g(wc, f) }
}

/// `putwc(3)`.
///
/// # Safety
/// As libc's `putwc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn putwc(wc: wchar_t, f: *mut FILE) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { fputwc(wc, f) }
}

/// `putwchar(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn putwchar(wc: wchar_t) -> u32 {
    // SAFETY: libc's stdout, read when called.
    unsafe { fputwc(wc, stdout) }
}

/// `fputws(3)`.
///
/// # Safety
/// As libc's `fputws`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fputws(ws: *const wchar_t, f: *mut FILE) -> c_int {
    if !ours(f) {
        let g = real!(fputws: unsafe extern "C" fn(*const wchar_t, *mut FILE) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { g(ws, f) };
    }
    let mut i = 0;
    loop {
        // SAFETY: a NUL-terminated wide string, by the contract.
        let wc = unsafe { *ws.add(i) };
        if wc == 0 {
            return 1;
        }
        if put(wc, f) == WEOF {
            return -1;
        }
        i += 1;
    }
}

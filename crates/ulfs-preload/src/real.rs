//! The libc functions this library stands in front of. Every call that is
//! not for the image goes on to the next definition of the same symbol
//! (libc's), found once with `dlsym(RTLD_NEXT)` and cached, so a program
//! sees exactly the behaviour it would without the library.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of the next definition of `name` (NUL-terminated) after
/// this library's; aborts the program with a message when there is none,
/// as there is no sane way to go on.
pub fn lookup(cache: &AtomicUsize, name: &'static str) -> usize {
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated string literal; RTLD_NEXT asks the
    // dynamic linker for the definition after this object's.
    let sym = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if sym == 0 {
        crate::fatal(&["no libc definition of ", name.trim_end_matches('\0')]);
    }
    cache.store(sym, Ordering::Relaxed);
    sym
}

/// `real!(name: fn type)` evaluates to libc's own `name`, typed.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::lookup(&CACHE, concat!(stringify!($name), "\0"));
        // SAFETY: `p` is the address of libc's `$name`, whose C signature
        // is `$ty` (the caller's declaration mirrors glibc's prototype).
        unsafe { std::mem::transmute::<usize, $ty>(p) }
    }};
}
pub(crate) use real;

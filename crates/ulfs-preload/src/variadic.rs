//! The exported names of libc's variadic and `va_list` calls the library
//! serves: `dprintf`, `vdprintf` on image descriptors, and `fwprintf`,
//! `wprintf`, `vfwprintf`, `vwprintf` on streams of image files, each with
//! its fortified (`__*_chk`) form, which programs built with
//! `_FORTIFY_SOURCE` call instead; and `execl`, `execlp`, `execle`, which
//! must reach the library's `execv`/`execvp`/`execve` (`process.rs`) to
//! hand the image over, where glibc's call `execve` internally.
//!
//! Stable Rust cannot define a C-variadic function, so the bodies are C
//! (`variadic.c`, built by `build.rs`). A cdylib exports only the Rust
//! crate's own symbols (rustc's version script hides the C object's), so
//! each exported name here is a naked function that jumps to its C body:
//! a jump leaves every argument register and the stack as the caller set
//! them, which is all a variadic callee needs.

use libc::FILE;
use std::ffi::c_int;

/// Whether calls on descriptor `fd` are the library's to serve (an image
/// file's, or one of the library's own, which the program may not use).
#[unsafe(no_mangle)]
pub extern "C" fn ulfs_preload_serves_fd(fd: c_int) -> c_int {
    c_int::from(crate::fds::is_image(fd) || crate::fds::is_library(fd))
}

/// Whether stream `f` is a stream of an image file (a cookie stream).
#[unsafe(no_mangle)]
pub extern "C" fn ulfs_preload_serves_stream(f: *mut FILE) -> c_int {
    c_int::from(crate::stdio::is_cookie_stream(f))
}

/// `exported => body`: defines `exported` as a jump to the C function
/// `body`.
macro_rules! jump_to_c {
    ($($exported:ident => $body:ident),* $(,)?) => {
        unsafe extern "C" {
            $(fn $body();)*
        }
        $(
            #[unsafe(no_mangle)]
            #[unsafe(naked)]
            pub extern "C" fn $exported() {
                // The body has the exported function's C signature; the
                // jump hands it the caller's registers and stack as they
                // are, so it receives exactly the caller's arguments and
                // returns straight to the caller.
                #[cfg(target_arch = "x86_64")]
                core::arch::naked_asm!("jmp {}", sym $body);
                #[cfg(target_arch = "aarch64")]
                core::arch::naked_asm!("b {}", sym $body);
            }
        )*
    };
}

jump_to_c! {
    dprintf => ulfs_c_dprintf,
    vdprintf => ulfs_c_vdprintf,
    __dprintf_chk => ulfs_c_dprintf_chk,
    __vdprintf_chk => ulfs_c_vdprintf_chk,
    fwprintf => ulfs_c_fwprintf,
    vfwprintf => ulfs_c_vfwprintf,
    wprintf => ulfs_c_wprintf,
    vwprintf => ulfs_c_vwprintf,
    __fwprintf_chk => ulfs_c_fwprintf_chk,
    __vfwprintf_chk => ulfs_c_vfwprintf_chk,
    __wprintf_chk => ulfs_c_wprintf_chk,
    __vwprintf_chk => ulfs_c_vwprintf_chk,
    execl => ulfs_c_execl,
    execlp => ulfs_c_execlp,
    execle => ulfs_c_execle,
}

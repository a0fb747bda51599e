//! `realpath(3)` and `canonicalize_file_name(3)` for image paths. glibc
//! resolves with its own internal `readlink` and `lstat` calls, which would
//! ask the kernel about `/ulfs`; for a path in the image the resolution is
//! done here, component by component in the image (symlinks followed, up
//! to 40, an absolute target naming the image's root), and the answer is
//! given under the prefix.

use std::ffi::{c_char, c_int};
use ulfs_client::Backend;

use crate::fail;
use crate::io::{arg, c_path};
use crate::real::real;
use crate::route::{Route, route};
use crate::state::{Image, image};

/// The canonical image path of `path` (relative paths from ulfs's working
/// directory, `dirfd` AT_FDCWD), every component existing.
fn canonical(fs: &mut Backend, path: &[u8]) -> ulfs::Result<Vec<u8>> {
    let mut todo: Vec<Vec<u8>> = Vec::new();
    let push_all = |todo: &mut Vec<Vec<u8>>, p: &[u8]| {
        for c in p.split(|&b| b == b'/').rev().filter(|c| !c.is_empty()) {
            todo.push(c.to_vec());
        }
    };
    let mut done: Vec<Vec<u8>> = Vec::new();
    if path.first() != Some(&b'/') {
        let cwd = fs.getcwd()?;
        push_all(&mut todo, path);
        for c in cwd.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            done.push(c.to_vec());
        }
    } else {
        push_all(&mut todo, path);
    }
    if path.is_empty() {
        return Err(ulfs::Errno::ENOENT);
    }
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.as_slice() {
            b"." => continue,
            b".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        done.push(c);
        let here = [b"/".as_slice(), &done.join(&b'/')].concat();
        let st = fs.lstat(&here)?;
        if st.is_symlink() {
            links += 1;
            if links > 40 {
                return Err(ulfs::Errno::ELOOP);
            }
            let target = fs.readlink(&here)?;
            done.pop();
            if target.first() == Some(&b'/') {
                done.clear();
            }
            push_all(&mut todo, &target);
        } else if !todo.is_empty() && !st.is_dir() {
            return Err(ulfs::Errno::ENOTDIR);
        }
    }
    Ok([b"/".as_slice(), &done.join(&b'/')].concat())
}

/// The answer under the prefix.
fn shown(image: &Image, p: &[u8]) -> Vec<u8> {
    if p == b"/" {
        image.prefix.clone()
    } else {
        [image.prefix.as_slice(), p].concat()
    }
}

/// `realpath(3)`, with glibc's extension: a NULL `resolved` gets a
/// malloc'd buffer.
///
/// # Safety
/// As libc's `realpath`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let real_realpath =
        real!(realpath: unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char);
    // SAFETY: by realpath's contract.
    let (Some(image), Some(p)) = (image(), unsafe { arg(path) }) else {
        // SAFETY: the program's own arguments.
        return unsafe { real_realpath(path, resolved) };
    };
    let r = match route(image, libc::AT_FDCWD, p) {
        // SAFETY: the program's own arguments.
        Route::Host { path: None, .. } => return unsafe { real_realpath(path, resolved) },
        Route::Host {
            path: Some(abs), ..
        } => {
            let c = c_path(abs);
            // SAFETY: a NUL-terminated path and the program's buffer.
            return unsafe { real_realpath(c.as_ptr(), resolved) };
        }
        Route::Image { path, .. } => image.with(|fs| canonical(fs, &path)),
    };
    let out = match r {
        Ok(p) => shown(image, &p),
        Err(e) => {
            fail::<c_int>(e.raw());
            return std::ptr::null_mut();
        }
    };
    if out.len() >= libc::PATH_MAX as usize {
        fail::<c_int>(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    let buf = if resolved.is_null() {
        // SAFETY: malloc of a positive size; the caller frees it.
        let b = unsafe { libc::malloc(out.len() + 1) }.cast::<c_char>();
        if b.is_null() {
            fail::<c_int>(libc::ENOMEM);
            return std::ptr::null_mut();
        }
        b
    } else {
        resolved
    };
    // SAFETY: `buf` holds PATH_MAX bytes (the caller's, by realpath's
    // contract) or `out.len() + 1` (ours).
    unsafe {
        std::ptr::copy_nonoverlapping(out.as_ptr(), buf.cast::<u8>(), out.len());
        *buf.add(out.len()) = 0;
    }
    buf
}

/// `canonicalize_file_name(3)`: `realpath` into a malloc'd buffer.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: the caller's contract.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

/// glibc's FORTIFY `realpath`.
///
/// # Safety
/// As libc's `realpath`, `resolved` holding `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    len: libc::size_t,
) -> *mut c_char {
    if !resolved.is_null() && len < libc::PATH_MAX as usize {
        // glibc aborts here (a buffer overflow caught); so does this.
        crate::fatal(&["*** buffer overflow detected ***: realpath"]);
    }
    // SAFETY: the caller's contract.
    unsafe { realpath(path, resolved) }
}

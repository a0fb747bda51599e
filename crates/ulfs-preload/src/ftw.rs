//! `nftw(3)` and `ftw(3)` over image trees. glibc walks with internal
//! calls this library cannot see, so for a starting path in the image the
//! walk is done here with this library's own `opendir`/`readdir` and
//! `stat`/`lstat`, by glibc's rules: pre-order (or post-order with
//! `FTW_DEPTH`), symlinks followed unless `FTW_PHYS`, the walk stopping at
//! the first non-zero return of the callback (which `nftw` returns), and
//! glibc's `FTW_ACTIONRETVAL` (skip a subtree or its siblings). Entries
//! are visited in directory order; `nopenfd` is not needed (one stream is
//! open per level, and they are this library's, not the kernel's).
//! `FTW_CHDIR` changes into each directory before its entries are
//! visited, as glibc does.

use std::ffi::{CStr, CString, c_char, c_int};

use crate::io::arg;
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;

/// glibc's `struct FTW`.
#[repr(C)]
pub struct Ftw {
    base: c_int,
    level: c_int,
}

type NftwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int, *mut Ftw) -> c_int;
type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat, c_int) -> c_int;

// glibc's flags and type codes (<ftw.h>).
const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_DNR: c_int = 2;
const FTW_NS: c_int = 3;
const FTW_SL: c_int = 4;
const FTW_DP: c_int = 5;
const FTW_SLN: c_int = 6;
const FTW_PHYS: c_int = 1;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_CONTINUE: c_int = 0;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

/// What a visit asks of the walk.
enum Next {
    Go,
    SkipSubtree,
    SkipSiblings,
    Stop(c_int),
}

/// The program's callback, behind one shape for `nftw` and `ftw`.
type Visitor = Box<dyn FnMut(&CStr, Option<&libc::stat>, c_int, Ftw) -> c_int>;

struct Walk {
    flags: c_int,
    call: Visitor,
}

impl Walk {
    fn visit(
        &mut self,
        path: &CStr,
        st: Option<&libc::stat>,
        kind: c_int,
        base: usize,
        level: usize,
    ) -> Next {
        let ftw = Ftw {
            base: base as c_int,
            level: level as c_int,
        };
        let r = (self.call)(path, st, kind, ftw);
        if self.flags & FTW_ACTIONRETVAL == 0 {
            return if r == 0 { Next::Go } else { Next::Stop(r) };
        }
        match r {
            FTW_CONTINUE => Next::Go,
            FTW_SKIP_SUBTREE => Next::SkipSubtree,
            FTW_SKIP_SIBLINGS => Next::SkipSiblings,
            other => Next::Stop(other),
        }
    }

    /// Visits `path` (and below it); `base` is where its last component
    /// starts.
    fn walk(&mut self, path: &CStr, base: usize, level: usize) -> Next {
        let phys = self.flags & FTW_PHYS != 0;
        // SAFETY: zeroed memory is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a writable stat buffer; these
        // are this library's own stat calls.
        let r = unsafe {
            if phys {
                crate::paths::lstat(path.as_ptr(), &mut st)
            } else {
                crate::paths::stat(path.as_ptr(), &mut st)
            }
        };
        let kind = if r != 0 {
            // A dangling symlink, seen through `lstat`, or nothing at all.
            // SAFETY: as above.
            let l = !phys && unsafe { crate::paths::lstat(path.as_ptr(), &mut st) } == 0;
            if l && st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                FTW_SLN
            } else {
                FTW_NS
            }
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => FTW_D,
                libc::S_IFLNK => FTW_SL,
                _ => FTW_F,
            }
        };
        let stat = (kind != FTW_NS).then_some(&st);
        if kind != FTW_D {
            return self.visit(path, stat, kind, base, level);
        }
        let depth_first = self.flags & FTW_DEPTH != 0;
        // SAFETY: a NUL-terminated path; this library's own opendir.
        let dir = unsafe { crate::dirs::opendir(path.as_ptr()) };
        if dir.is_null() {
            // A directory that cannot be read is reported as such, once.
            return self.visit(path, stat, FTW_DNR, base, level);
        }
        if !depth_first {
            match self.visit(path, stat, FTW_D, base, level) {
                Next::Go => {}
                other => {
                    // SAFETY: closing our own stream.
                    unsafe { crate::dirs::closedir(dir) };
                    return match other {
                        Next::SkipSubtree => Next::Go,
                        o => o,
                    };
                }
            }
        }
        let mut saved_cwd = None;
        if self.flags & FTW_CHDIR != 0 {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
            // SAFETY: a NUL-terminated literal path.
            let fd = unsafe { crate::io::open(c".".as_ptr(), flags, 0) };
            saved_cwd = (fd >= 0).then_some(fd);
            // SAFETY: a NUL-terminated path.
            unsafe { crate::paths::chdir(path.as_ptr()) };
        }
        let mut outcome = Next::Go;
        loop {
            // SAFETY: our own stream, opened above.
            let e = unsafe { crate::dirs::readdir64(dir) };
            if e.is_null() {
                break;
            }
            // SAFETY: a live entry of our stream.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }
                .to_bytes()
                .to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            let mut child = path.to_bytes().to_vec();
            if !child.ends_with(b"/") {
                child.push(b'/');
            }
            let child_base = child.len();
            child.extend_from_slice(&name);
            let Ok(child) = CString::new(child) else {
                continue;
            };
            match self.walk(&child, child_base, level + 1) {
                Next::Go | Next::SkipSubtree => {}
                Next::SkipSiblings => break,
                stop @ Next::Stop(_) => {
                    outcome = stop;
                    break;
                }
            }
        }
        // SAFETY: closing our own stream.
        unsafe { crate::dirs::closedir(dir) };
        if let Some(fd) = saved_cwd {
            crate::paths::fchdir(fd);
            crate::io::close(fd);
        }
        if let Next::Stop(_) = outcome {
            return outcome;
        }
        if depth_first {
            return self.visit(path, stat, FTW_DP, base, level);
        }
        Next::Go
    }
}

/// Whether `path` starts a walk in the image.
///
/// # Safety
/// `path` NULL or NUL-terminated.
unsafe fn in_image(path: *const c_char) -> bool {
    // SAFETY: by the contract.
    match (image(), unsafe { arg(path) }) {
        (Some(i), Some(p)) => matches!(route(i, libc::AT_FDCWD, p), Route::Image { .. }),
        _ => false,
    }
}

/// Where the last component of `path` starts.
fn base_of(path: &[u8]) -> usize {
    let trimmed = path.len() - path.iter().rev().take_while(|&&b| b == b'/').count();
    path[..trimmed]
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1)
}

fn result(n: Next) -> c_int {
    match n {
        Next::Stop(r) => r,
        _ => 0,
    }
}

/// `nftw(3)`.
///
/// # Safety
/// As libc's `nftw`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nftw(
    path: *const c_char,
    f: Option<NftwFn>,
    nopenfd: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    if !unsafe { in_image(path) } {
        let real_nftw =
            real!(nftw: unsafe extern "C" fn(*const c_char, Option<NftwFn>, c_int, c_int) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { real_nftw(path, f, nopenfd, flags) };
    }
    let Some(f) = f else {
        return crate::fail(libc::EINVAL);
    };
    let mut w = Walk {
        flags,
        call: Box::new(move |p, st, kind, mut ftw| {
            let st = st.map_or(std::ptr::null(), |s| s as *const libc::stat);
            // SAFETY: the program's callback, given a live path, stat
            // (or NULL) and FTW record.
            unsafe { f(p.as_ptr(), st, kind, &mut ftw) }
        }),
    };
    // SAFETY: `path` is NUL-terminated (it was routed).
    let p = unsafe { CStr::from_ptr(path) };
    result(w.walk(p, base_of(p.to_bytes()), 0))
}

/// # Safety
/// As libc's `nftw64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nftw64(
    path: *const c_char,
    f: Option<NftwFn>,
    nopenfd: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { nftw(path, f, nopenfd, flags) }
}

/// `ftw(3)`: `nftw` without flags (symlinks followed), the callback
/// without the FTW record.
///
/// # Safety
/// As libc's `ftw`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftw(path: *const c_char, f: Option<FtwFn>, nopenfd: c_int) -> c_int {
    // SAFETY: the caller's contract.
    if !unsafe { in_image(path) } {
        let real_ftw =
            real!(ftw: unsafe extern "C" fn(*const c_char, Option<FtwFn>, c_int) -> c_int);
        // SAFETY: the program's own arguments.
        return unsafe { real_ftw(path, f, nopenfd) };
    }
    let Some(f) = f else {
        return crate::fail(libc::EINVAL);
    };
    let mut w = Walk {
        flags: 0,
        call: Box::new(move |p, st, kind, _| {
            let st = st.map_or(std::ptr::null(), |s| s as *const libc::stat);
            // ftw reports what nftw calls FTW_SLN as FTW_NS.
            let kind = if kind == FTW_SLN { FTW_NS } else { kind };
            // SAFETY: the program's callback with a live path and stat.
            unsafe { f(p.as_ptr(), st, kind) }
        }),
    };
    // SAFETY: `path` is NUL-terminated (it was routed).
    let p = unsafe { CStr::from_ptr(path) };
    result(w.walk(p, base_of(p.to_bytes()), 0))
}

/// # Safety
/// As libc's `ftw64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftw64(path: *const c_char, f: Option<FtwFn>, nopenfd: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { ftw(path, f, nopenfd) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_where_the_last_component_starts() {
        assert_eq!(base_of(b"/ulfs/a/b"), 8);
        assert_eq!(base_of(b"/ulfs/a/b/"), 8);
        assert_eq!(base_of(b"dir"), 0);
        assert_eq!(base_of(b"/"), 0);
    }
}

//! `posix_spawn` file actions on image files. glibc carries the actions
//! out in the child with its own system calls, out of this library's
//! sight: a `dup2` of an image descriptor would give the child the
//! placeholder (the kernel's `/dev/null`), and an `open` of an image path
//! would go to the kernel, which has no such path. So the actions a
//! program adds are recorded here, per actions object:
//!
//! - `addopen` of an image path opens the file at once, in this process,
//!   behind a close-on-exec placeholder, and becomes a `dup2` of it (the
//!   file is created or truncated when the action is added rather than
//!   when the child starts; a failure is the spawn's error, as it would
//!   be); the placeholder closes with the actions object;
//! - `adddup2`, `addclose`, `addclosefrom_np` and host `addopen`s go to
//!   glibc, and are replayed here over the descriptor numbers, so that at
//!   the spawn (`process.rs`) it is known which image descriptor each of
//!   the child's descriptors is; those the child keeps are handed over as
//!   an exec's are (`inherit::env_for_spawn`).

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{LazyLock, Mutex, MutexGuard};

use libc::{c_int, mode_t, posix_spawn_file_actions_t};

use crate::real::real;
use crate::route::{Route, route};

/// One recorded action, in the order added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Dup2 {
        from: c_int,
        to: c_int,
    },
    Close(c_int),
    CloseFrom(c_int),
    /// An image file this library opened behind placeholder `held`.
    Open {
        held: c_int,
        to: c_int,
    },
    /// An `addopen` of an image path that failed with this errno.
    Failed(c_int),
}

/// Recorded actions by the address of their actions object.
fn recorded() -> MutexGuard<'static, HashMap<usize, Vec<Action>>> {
    static RECORDED: LazyLock<Mutex<HashMap<usize, Vec<Action>>>> = LazyLock::new(Default::default);
    RECORDED.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(fa: *const posix_spawn_file_actions_t) -> usize {
    fa as usize
}

fn record(fa: *const posix_spawn_file_actions_t, a: Action) {
    recorded().entry(key(fa)).or_default().push(a);
}

/// Closes the placeholders an actions object holds and forgets it.
fn forget(fa: *const posix_spawn_file_actions_t) {
    let actions = recorded().remove(&key(fa)).unwrap_or_default();
    for a in actions {
        if let Action::Open { held, .. } = a {
            // A placeholder this module opened.
            crate::io::close(held);
        }
    }
}

/// `posix_spawn_file_actions_init(3)`: a fresh object at this address.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_init(
    fa: *mut posix_spawn_file_actions_t,
) -> c_int {
    recorded().remove(&key(fa));
    let f = real!(posix_spawn_file_actions_init: unsafe extern "C" fn(*mut posix_spawn_file_actions_t) -> c_int);
    // SAFETY: the program's own argument.
    unsafe { f(fa) }
}

/// `posix_spawn_file_actions_destroy(3)`.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_destroy(
    fa: *mut posix_spawn_file_actions_t,
) -> c_int {
    forget(fa);
    let f = real!(posix_spawn_file_actions_destroy: unsafe extern "C" fn(*mut posix_spawn_file_actions_t) -> c_int);
    // SAFETY: the program's own argument.
    unsafe { f(fa) }
}

/// `posix_spawn_file_actions_adddup2(3)`.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_adddup2(
    fa: *mut posix_spawn_file_actions_t,
    from: c_int,
    to: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_adddup2: unsafe extern "C" fn(*mut posix_spawn_file_actions_t, c_int, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    let r = unsafe { f(fa, from, to) };
    if r == 0 {
        record(fa, Action::Dup2 { from, to });
    }
    r
}

/// `posix_spawn_file_actions_addclose(3)`.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addclose(
    fa: *mut posix_spawn_file_actions_t,
    fd: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclose: unsafe extern "C" fn(*mut posix_spawn_file_actions_t, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    let r = unsafe { f(fa, fd) };
    if r == 0 {
        record(fa, Action::Close(fd));
    }
    r
}

/// `posix_spawn_file_actions_addclosefrom_np(3)`.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addclosefrom_np(
    fa: *mut posix_spawn_file_actions_t,
    from: c_int,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addclosefrom_np: unsafe extern "C" fn(*mut posix_spawn_file_actions_t, c_int) -> c_int);
    // SAFETY: the program's own arguments.
    let r = unsafe { f(fa, from) };
    if r == 0 {
        record(fa, Action::CloseFrom(from));
    }
    r
}

/// `posix_spawn_file_actions_addopen(3)`.
///
/// # Safety
/// As libc's function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn_file_actions_addopen(
    fa: *mut posix_spawn_file_actions_t,
    to: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    let f = real!(posix_spawn_file_actions_addopen: unsafe extern "C" fn(*mut posix_spawn_file_actions_t, c_int, *const c_char, c_int, mode_t) -> c_int);
    // SAFETY: a NUL-terminated path by the contract (NULL: none).
    let named = unsafe { crate::io::arg(path) };
    let image_path = match (crate::state::image(), named) {
        (Some(image), Some(p)) if to >= 0 => match route(image, libc::AT_FDCWD, p) {
            Route::Image { dirfd, path } => Some((image, dirfd, path)),
            Route::Host { .. } => None,
        },
        _ => None,
    };
    let Some((image, dirfd, inner)) = image_path else {
        // SAFETY: the program's own arguments.
        let r = unsafe { f(fa, to, path, flags, mode) };
        if r == 0 {
            // Whatever `to` was, the child's is a host file now.
            record(fa, Action::Close(to));
        }
        return r;
    };
    let errno = crate::errno();
    let held = crate::io::open_image(image, dirfd, &inner, flags | libc::O_CLOEXEC, mode as _);
    if held < 0 {
        record(fa, Action::Failed(crate::errno()));
        crate::set_errno(errno);
        return 0;
    }
    crate::set_errno(errno);
    // SAFETY: the program's actions object; `held` is open.
    let r = unsafe { posix_spawn_file_actions_adddup2(fa, held, to) };
    if r == 0 {
        // The dup2 just recorded is this open's.
        let mut all = recorded();
        if let Some(last) = all.get_mut(&key(fa)).and_then(|v| v.last_mut()) {
            *last = Action::Open { held, to };
        }
    } else {
        crate::io::close(held);
    }
    r
}

/// The error an `addopen` of an image path met, which the spawn reports
/// (as glibc reports the child's failed open).
pub fn failed_open(fa: *const posix_spawn_file_actions_t) -> Option<c_int> {
    recorded().get(&key(fa))?.iter().find_map(|a| match a {
        Action::Failed(e) => Some(*e),
        _ => None,
    })
}

/// The image descriptors a spawned child starts with: (its descriptor,
/// this process's descriptor it is a copy of), from `image_fds` (this
/// process's image descriptors, each with whether it is close-on-exec)
/// and the actions, in their order. A close-on-exec descriptor reaches
/// the child only as a `dup2` target.
pub fn child_image_fds(
    fa: *const posix_spawn_file_actions_t,
    image_fds: &[(c_int, bool)],
) -> Vec<(c_int, c_int)> {
    // Child descriptor -> (source in this process, close-on-exec).
    let mut child: HashMap<c_int, (c_int, bool)> = image_fds
        .iter()
        .map(|&(fd, cloexec)| (fd, (fd, cloexec)))
        .collect();
    let actions = if fa.is_null() {
        Vec::new()
    } else {
        recorded().get(&key(fa)).cloned().unwrap_or_default()
    };
    for a in actions {
        match a {
            Action::Dup2 { from, to } | Action::Open { held: from, to } => {
                // A dup2 onto itself clears close-on-exec (glibc 2.29).
                match child.get(&from).copied() {
                    Some((source, _)) => child.insert(to, (source, false)),
                    None => child.remove(&to),
                };
            }
            Action::Close(fd) => {
                child.remove(&fd);
            }
            Action::CloseFrom(from) => child.retain(|&fd, _| fd < from),
            Action::Failed(_) => {}
        }
    }
    let mut out: Vec<(c_int, c_int)> = child
        .into_iter()
        .filter(|(_, (_, cloexec))| !cloexec)
        .map(|(fd, (source, _))| (fd, source))
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_replayed_over_descriptor_numbers() {
        let mut fa = std::mem::MaybeUninit::<posix_spawn_file_actions_t>::zeroed();
        let fa = fa.as_mut_ptr();
        for a in [
            Action::Dup2 { from: 5, to: 1 },
            Action::Dup2 { from: 7, to: 2 },
            Action::Close(6),
            Action::Open { held: 9, to: 0 },
            Action::CloseFrom(20),
        ] {
            record(fa, a);
        }
        // 5 and 6 are image files; 7 is a host file; 9 is a close-on-exec
        // placeholder, as is 8; 30 goes with closefrom.
        let image = [(5, false), (6, false), (8, true), (9, true), (30, false)];
        assert_eq!(child_image_fds(fa, &image), vec![(0, 9), (1, 5), (5, 5)]);
        recorded().remove(&key(fa));
    }
}

//! The calls that change a process's user and group ids. A server judges
//! a client by the ids the kernel gave for its connection, so a served
//! process that changes its ids (a daemon dropping root, `su`-like
//! helpers) connects again once the change is made: the process is set
//! aside under a token (as for an exec) and adopted by a new connection,
//! which the kernel describes with the new ids. Its descriptors, working
//! directory and locks stay the process's; descriptors already open keep
//! the access they were opened with, as on Linux. Without a server the
//! library serves its own process, privileged: nothing to do.

use std::ffi::c_int;

use libc::{gid_t, size_t, uid_t};

use crate::real::real;

/// After a successful change of ids: the connection is made again.
fn changed(r: c_int) -> c_int {
    if r == 0
        && crate::served::socket().is_some()
        && let Some(image) = crate::state::image()
    {
        image.reconnect();
    }
    r
}

macro_rules! interpose {
    ($(fn $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[unsafe(no_mangle)]
            pub extern "C" fn $name($($arg: $ty),*) -> c_int {
                let f = real!($name: unsafe extern "C" fn($($ty),*) -> c_int);
                // SAFETY: the program's own arguments, to libc's function.
                changed(unsafe { f($($arg),*) })
            }
        )*
    };
}

interpose! {
    fn setuid(uid: uid_t);
    fn setgid(gid: gid_t);
    fn seteuid(uid: uid_t);
    fn setegid(gid: gid_t);
    fn setreuid(ruid: uid_t, euid: uid_t);
    fn setregid(rgid: gid_t, egid: gid_t);
    fn setresuid(ruid: uid_t, euid: uid_t, suid: uid_t);
    fn setresgid(rgid: gid_t, egid: gid_t, sgid: gid_t);
}

/// `setgroups(2)`: the supplementary groups, judged too.
///
/// # Safety
/// As libc's `setgroups`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setgroups(n: size_t, groups: *const gid_t) -> c_int {
    let f = real!(setgroups: unsafe extern "C" fn(size_t, *const gid_t) -> c_int);
    // SAFETY: the program's own arguments.
    changed(unsafe { f(n, groups) })
}

//! `ulfs run --server SOCKET`: the program's image calls go to a server
//! that owns the image (`ulfs serve`) instead of an image mounted in this
//! process, so several programs, and all the processes of each, use one
//! image at once. Nothing is handed over between processes then: the
//! server keeps each process's descriptors, working directory and locks,
//! and this module carries them across the calls that make processes.
//!
//! - `fork`: the parent asks the server for a copy of its process under a
//!   token (PREPARE_FORK: the same descriptors, their offsets shared), and
//!   the child ADOPTs it on a connection of its own before `fork` returns
//!   in it.
//! - `exec`: the process sets itself aside under a token (PREPARE_EXEC)
//!   and passes the token in the environment (`ULFS_RUN_TOKEN`) with which
//!   kernel descriptor stands for which ulfs descriptor. The new program
//!   ADOPTs it at load, binds the placeholders that survived the exec, and
//!   closes the ulfs descriptors whose placeholders the exec closed
//!   (close-on-exec ones, and those only mappings held), ending their
//!   POSIX locks as the kernel's close-on-exec does.
//! - `posix_spawn`, `system`, `popen`: as a fork whose child execs: a
//!   PREPARE_FORK token in the child's environment, adopted at load by a
//!   process whose parent made it.
//!
//! The server checks the pid of whoever adopts a token (the same pid after
//! an exec, a child of the preparer otherwise): a token that leaks into
//! some other program's environment is refused. A token nobody adopts
//! (the exec failed, the child died first) is dropped by the server.

use std::ffi::CString;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use ulfs_client::{Backend, Client, Token};
use ulfs_wire::AdoptKind;

use crate::fds;
use crate::real::real;

pub const ENV_SERVER: &str = "ULFS_RUN_SERVER";
pub const ENV_TOKEN: &str = "ULFS_RUN_TOKEN";

/// Where the server listens (`None` when the run mounts the image itself).
static SERVER: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// At load: whether this run is served, and where.
pub fn init() -> bool {
    match std::env::var_os(ENV_SERVER) {
        Some(p) if !p.is_empty() => SERVER.set(p.into()).is_ok() || SERVER.get().is_some(),
        _ => false,
    }
}

pub fn socket() -> Option<&'static std::path::Path> {
    SERVER.get().map(|p| p.as_path())
}

/// A new connection of this process's own (no token).
pub fn connect() -> ulfs::Result<Backend> {
    let server = socket().ok_or(ulfs::Errno::ENOTCONN)?;
    let mut c = Client::connect(server)?;
    keep_out_of_the_way(&mut c);
    Ok(Backend::Remote(Box::new(c)))
}

/// The connection's descriptors move to the library's range, as the
/// image file's do (`fds::library_file`): the program's numbering stays
/// the kernel's, and its closes do not reach them.
fn keep_out_of_the_way(c: &mut Client) {
    c.relocate_fds(|fd: BorrowedFd<'_>| {
        let high = fds::dup_high(fd);
        // SAFETY: a fresh descriptor nothing else owns.
        (high >= 0).then(|| unsafe { OwnedFd::from_raw_fd(high) })
    });
    fds::set_server_fds(c.raw_fds());
}

/// The client inside `b`, when the image is served.
pub fn client(b: &mut Backend) -> Option<&mut Client> {
    match b {
        Backend::Remote(c) => Some(c),
        Backend::Local(_) => None,
    }
}

/// In a forked child: its own connection, adopting the process its parent
/// prepared. The parent's connection (copied by the fork) is dropped
/// without a word: the parent still holds the socket, so the server sees
/// nothing of it.
pub fn adopt_in_child(parent: Box<Backend>, token: &Token) -> Option<Backend> {
    drop(parent);
    fds::set_server_fds([-1, -1]);
    let server = socket()?;
    match Client::adopt(server, token, AdoptKind::Fork) {
        Ok(mut c) => {
            keep_out_of_the_way(&mut c);
            Some(Backend::Remote(Box::new(c)))
        }
        Err(e) => {
            crate::warn(&format!(
                "ulfs run: the child of a fork could not join the server: {e}; its image files are closed"
            ));
            None
        }
    }
}

/// A new connection of this same process, adopting what `token` set
/// aside (PREPARE_EXEC): after a change of ids. The old connection goes
/// when the caller replaces it.
pub fn adopt_own(token: &Token) -> ulfs::Result<Backend> {
    let server = socket().ok_or(ulfs::Errno::ENOTCONN)?;
    let mut c = Client::adopt(server, token, AdoptKind::Exec)?;
    keep_out_of_the_way(&mut c);
    Ok(Backend::Remote(Box::new(c)))
}

/// The environment entry handing `token` to the next program, with its
/// descriptors: `binds` (kernel descriptor, ulfs descriptor) it keeps, and
/// the ulfs descriptors it must close (`drops`). `kind` is `e` for an exec
/// (this process's pid), `s` for a spawned child (its parent's pid).
fn token_entry(kind: char, token: &Token, binds: &[(i32, i32)], drops: &[i32]) -> String {
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let b: Vec<String> = binds.iter().map(|(fd, u)| format!("{fd}:{u}")).collect();
    let d: Vec<String> = drops.iter().map(i32::to_string).collect();
    format!(
        "{ENV_TOKEN}={kind}{}/{hex}/{}/{}",
        std::process::id(),
        b.join(","),
        d.join(",")
    )
}

/// What a token entry says, when it is for this process.
#[derive(Debug, PartialEq, Eq)]
struct Handed {
    kind: AdoptKind,
    token: Token,
    binds: Vec<(i32, i32)>,
    drops: Vec<i32>,
}

fn parse_entry(value: &str, me: u32, parent: u32) -> Option<Handed> {
    let mut parts = value.split('/');
    let who = parts.next()?;
    let (kind, pid) = match who.split_at_checked(1)? {
        ("e", pid) => (AdoptKind::Exec, pid.parse::<u32>().ok()?),
        ("s", pid) => (AdoptKind::Fork, pid.parse::<u32>().ok()?),
        _ => return None,
    };
    if (kind == AdoptKind::Exec && pid != me) || (kind == AdoptKind::Fork && pid != parent) {
        return None;
    }
    let hex = parts.next()?;
    if hex.len() != 32 {
        return None;
    }
    let mut token = [0u8; 16];
    for (i, b) in token.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    let binds = parts
        .next()?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|p| {
            let (fd, u) = p.split_once(':')?;
            Some((fd.parse().ok()?, u.parse().ok()?))
        })
        .collect::<Option<Vec<(i32, i32)>>>()?;
    let drops = parts
        .next()?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|u| u.parse().ok())
        .collect::<Option<Vec<i32>>>()?;
    if parts.next().is_some() {
        return None;
    }
    Some(Handed {
        kind,
        token,
        binds,
        drops,
    })
}

/// At load: the process a token in the environment set aside for this
/// program, adopted now (a token is good only briefly), its descriptors
/// bound to the placeholders that survived. The entry leaves the
/// environment, so nothing this program starts reads it again.
pub fn adopt_at_load() -> Option<Backend> {
    let value = std::env::var(ENV_TOKEN).ok();
    // SAFETY: at load, before `main`: no other thread reads the
    // environment.
    unsafe { std::env::remove_var(ENV_TOKEN) };
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    let h = parse_entry(value.as_deref()?, std::process::id(), parent)?;
    let server = socket()?;
    let mut c = match Client::adopt(server, &h.token, h.kind) {
        Ok(c) => c,
        Err(e) => {
            crate::warn(&format!(
                "ulfs run: could not carry on the image files of the process that started this program: {e}"
            ));
            return None;
        }
    };
    keep_out_of_the_way(&mut c);
    for &(fd, u) in &h.binds {
        if crate::inherit::is_placeholder(fd) {
            fds::bind(fd, u);
        } else {
            let _ = c.close(u);
        }
    }
    for &u in &h.drops {
        let _ = c.close(u);
    }
    Some(Backend::Remote(Box::new(c)))
}

/// Every image descriptor with whether it is close-on-exec.
pub fn image_fds() -> Vec<(i32, bool)> {
    let fcntl =
        real!(fcntl: unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_long) -> libc::c_int);
    fds::bound_in(0, u32::MAX)
        .into_iter()
        // SAFETY: F_GETFD takes no argument.
        .map(|fd| {
            (
                fd,
                unsafe { fcntl(fd, libc::F_GETFD, 0) } & libc::FD_CLOEXEC != 0,
            )
        })
        .collect()
}

/// The token `Image::before_exec` got, for the exec's environment.
static EXEC_TOKEN: Mutex<Option<Token>> = Mutex::new(None);

pub fn set_exec_token(t: Option<Token>) {
    *EXEC_TOKEN.lock().unwrap_or_else(|e| e.into_inner()) = t;
}

/// Tells the server the start prepared under `token` did not happen (it
/// lets go of what it set aside at once); the program's errno is kept.
pub fn cancel_token(token: &Token) {
    let Some(image) = crate::state::image() else {
        return;
    };
    let errno = crate::errno();
    let _ = image.with(|b| match client(b) {
        Some(c) => c.cancel_token(token),
        None => Ok(()),
    });
    crate::set_errno(errno);
}

/// The token of an exec that failed (taken: the next exec makes its own).
pub fn take_exec_token() -> Option<Token> {
    EXEC_TOKEN.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The entry for the exec about to happen, if it has a token.
pub fn exec_env() -> Option<CString> {
    let t = EXEC_TOKEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()?;
    exec_entry(&t)
}

/// The entry for an exec prepared under `token`: the descriptors that
/// survive it, and the rest to close.
pub fn exec_entry(token: &Token) -> Option<CString> {
    let mut binds = Vec::new();
    let mut drops = crate::mmap::descriptors();
    for (fd, cloexec) in image_fds() {
        let Some(u) = fds::bound(fd) else { continue };
        if cloexec {
            drops.push(u);
        } else {
            binds.push((fd, u));
        }
    }
    dedup_drops(&mut drops, &binds);
    CString::new(token_entry('e', token, &binds, &drops)).ok()
}

/// The entry for a spawned child prepared under `token`, which gets
/// `child_fds` (its descriptor, and this process's it copies).
pub fn spawn_entry(token: &Token, child_fds: &[(i32, i32)]) -> Option<CString> {
    let binds: Vec<(i32, i32)> = child_fds
        .iter()
        .filter_map(|&(child, source)| Some((child, fds::bound(source)?)))
        .collect();
    let mut drops: Vec<i32> = fds::bound_in(0, u32::MAX)
        .into_iter()
        .filter_map(fds::bound)
        .chain(crate::mmap::descriptors())
        .collect();
    dedup_drops(&mut drops, &binds);
    CString::new(token_entry('s', token, &binds, &drops)).ok()
}

/// A ulfs descriptor is closed only when no kept descriptor is it.
fn dedup_drops(drops: &mut Vec<i32>, binds: &[(i32, i32)]) {
    drops.sort_unstable();
    drops.dedup();
    drops.retain(|u| !binds.iter().any(|(_, b)| b == u));
}

/// A token for `system` and `popen`, whose children glibc starts out of
/// this library's sight with the program's own environment: set there for
/// the child (which takes it out of its own at load) and taken out of
/// this process's again after the start.
pub struct SpawnToken {
    set: bool,
    token: Option<Token>,
}

impl SpawnToken {
    pub fn before(b: &mut Backend) -> SpawnToken {
        let none = SpawnToken {
            set: false,
            token: None,
        };
        let Some(c) = client(b) else {
            return none;
        };
        let Ok(token) = c.prepare_spawn() else {
            return none;
        };
        // The shell inherits every descriptor not close-on-exec, as any
        // started program (glibc's `system` and `popen` spawn it with no
        // file actions but `popen`'s pipe, which replaces 0 or 1: the
        // child binds only the descriptors that are still placeholders).
        let child: Vec<(i32, i32)> = image_fds()
            .into_iter()
            .filter(|&(_, cloexec)| !cloexec)
            .map(|(fd, _)| (fd, fd))
            .collect();
        let Some(entry) = spawn_entry(&token, &child) else {
            let _ = c.cancel_token(&token);
            return none;
        };
        let entry = entry.to_string_lossy().into_owned();
        let Some((_, value)) = entry.split_once('=') else {
            let _ = c.cancel_token(&token);
            return none;
        };
        // SAFETY: just before starting a program, as `cwd_into_environment`
        // does; a thread reading the environment at that moment is the one
        // risk, as with any setenv.
        unsafe { std::env::set_var(ENV_TOKEN, value) };
        SpawnToken {
            set: true,
            token: Some(token),
        }
    }

    /// The shell was not started: the server lets go of its process now.
    pub fn cancel(&self) {
        if let Some(t) = &self.token {
            cancel_token(t);
        }
    }
}

impl Drop for SpawnToken {
    fn drop(&mut self) {
        if self.set {
            // SAFETY: as in `before`.
            unsafe { std::env::remove_var(ENV_TOKEN) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_only_for_their_process() {
        let token = *b"0123456789abcdef";
        let me = std::process::id();
        let e = token_entry('e', &token, &[(1, 4), (7, 5)], &[3, 9]);
        let value = e.split_once('=').unwrap().1;
        let h = parse_entry(value, me, 1).unwrap();
        assert_eq!(h.kind, AdoptKind::Exec);
        assert_eq!(h.token, token);
        assert_eq!(h.binds, vec![(1, 4), (7, 5)]);
        assert_eq!(h.drops, vec![3, 9]);
        assert_eq!(parse_entry(value, me + 1, 1), None);
        let s = token_entry('s', &token, &[], &[]);
        let value = s.split_once('=').unwrap().1;
        assert_eq!(parse_entry(value, 1, me).unwrap().kind, AdoptKind::Fork);
        assert_eq!(parse_entry(value, me, 1), None);
        for bad in [
            "",
            "x1/00/",
            "e1/zz/",
            &format!("e{me}/0123/1:2/"),
            &format!("e{me}/{}/1:x/", "0".repeat(32)),
        ] {
            assert_eq!(parse_entry(bad, me, 1), None, "{bad}");
        }
    }
}

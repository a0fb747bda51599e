//! Processes the program starts: `fork` hands the image over as
//! `state.rs` describes, and so do `posix_spawn`, `posix_spawnp`,
//! `system` and `popen` (whose children glibc makes with internal calls)
//! by letting go of the image first (their children get no image
//! descriptors); `vfork` is served by `fork` (a
//! vfork child shares the parent's memory, and with it the parent's
//! mounted file system, which it must not touch: an `_exit` there would
//! unmount the parent's image); the `exec` calls commit and let go of the
//! image first, so the new program (which inherits `LD_PRELOAD` and the
//! image's environment) mounts it itself; a working directory inside the
//! image goes along in the environment (`ULFS_RUN_CWD`), as the kernel's
//! would, and so do the image descriptors that survive the exec
//! (`ULFS_RUN_FDS`, `inherit.rs`).

use std::ffi::{CStr, CString, c_char, c_int};
use std::os::unix::ffi::OsStringExt;

use crate::real::real;
use crate::state::{ENV_CWD, ENV_CWD_INO, image};

/// `fork(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn fork() -> libc::pid_t {
    let real_fork = real!(fork: unsafe extern "C" fn() -> libc::pid_t);
    let _umask = crate::umask::held_across_fork();
    // SAFETY: libc's fork.
    let call = || unsafe { real_fork() };
    match image() {
        Some(i) => i.fork(call),
        None => call(),
    }
}

/// `vfork(2)`, served by `fork` (which POSIX allows).
#[unsafe(no_mangle)]
pub extern "C" fn vfork() -> libc::pid_t {
    fork()
}

/// After an exec that failed (an exec returns only then), served: the
/// process goes on, so its offsets may be kept here again and the
/// server's reservation for the new program is dropped.
fn after_failed_exec() {
    let (Some(image), Some(token)) = (image(), crate::served::take_exec_token()) else {
        return;
    };
    crate::served::cancel_token(&token);
    let errno = crate::errno();
    let _ = image.with(|b| match crate::served::client(b) {
        Some(c) => c.set_kept_offsets(true),
        None => Ok(()),
    });
    crate::set_errno(errno);
}

/// Before an exec: commit and let go, image descriptors pending.
fn before_exec() {
    if let Some(i) = image() {
        crate::mmap::write_back_all();
        i.before_exec();
    }
}

/// The environment an exec passes on: `envp` (or this process's) with
/// `ULFS_RUN_CWD` saying where in the image the working directory is, or
/// without it when it is on the host. `None` when there is no image.
///
/// # Safety
/// `envp` NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn env_for_exec(envp: *const *const c_char) -> Option<Vec<CString>> {
    // SAFETY: the caller's contract.
    let mut out = unsafe { env_carried(envp) }?;
    out.extend(crate::inherit::env_for_exec());
    out.extend(crate::served::exec_env());
    Some(out)
}

/// What a started child holds until it takes it: slots of shared offsets
/// (in process), or the server's token for its process (served). Given
/// back by `failed` when the child was not started.
#[derive(Default)]
pub struct ChildHolds {
    slots: Vec<u32>,
    token: Option<ulfs_client::Token>,
}

impl ChildHolds {
    pub fn failed(self) {
        crate::inherit::fork_failed(self.slots);
        if let Some(t) = &self.token {
            crate::served::cancel_token(t);
        }
    }
}

/// The environment a `posix_spawn` passes on: as an exec's, with the
/// descriptors the child keeps handed over (`inherit::env_for_spawn`),
/// and what the child holds.
///
/// # Safety
/// As `env_for_exec`.
unsafe fn env_for_spawn(
    envp: *const *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
) -> Option<(Vec<CString>, ChildHolds)> {
    // SAFETY: the caller's contract.
    let mut out = unsafe { env_carried(envp) }?;
    if crate::served::socket().is_some() {
        let child_fds = crate::spawn_actions::child_image_fds(actions, &crate::served::image_fds());
        let token = image()?.with(|b| match crate::served::client(b) {
            Some(c) => c.prepare_spawn().map(Some),
            None => Ok(None),
        });
        let mut holds = ChildHolds::default();
        if let Ok(Some(t)) = token {
            out.extend(crate::served::spawn_entry(&t, &child_fds));
            holds.token = Some(t);
        }
        return Some((out, holds));
    }
    let child_fds = crate::spawn_actions::child_image_fds(actions, &crate::inherit::pending_fds());
    let (notes, slots) = crate::inherit::env_for_spawn(&child_fds);
    out.extend(notes);
    Some((out, ChildHolds { slots, token: None }))
}

/// `envp` (or this process's environment) with what a started program
/// needs to run on the image: the carried variables, the shared memory,
/// and the working directory when it is in the image.
///
/// # Safety
/// As `env_for_exec`.
unsafe fn env_carried(envp: *const *const c_char) -> Option<Vec<CString>> {
    let image = image()?;
    let envp = if envp.is_null() {
        // SAFETY: `environ` is this process's environment array.
        unsafe { environ }.cast_const()
    } else {
        envp
    };
    let key = [ENV_CWD.as_bytes(), b"="].concat();
    let key_ino = [ENV_CWD_INO.as_bytes(), b"="].concat();
    // Entries this library writes afresh: never passed on stale.
    let ours = [
        key.clone(),
        key_ino.clone(),
        [crate::inherit::ENV_FDS.as_bytes(), b"="].concat(),
        [crate::shared::ENV_SHARED.as_bytes(), b"="].concat(),
        [crate::served::ENV_TOKEN.as_bytes(), b"="].concat(),
    ];
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: a NULL-terminated array, by the contract.
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            break;
        }
        // SAFETY: each entry is NUL-terminated.
        let s = unsafe { CStr::from_ptr(e) };
        if !ours.iter().any(|k| s.to_bytes().starts_with(k)) {
            out.push(s.to_owned());
        }
        i += 1;
    }
    carry_on(&mut out);
    if let Some(e) = crate::shared::env_entry().and_then(|e| CString::new(e).ok()) {
        out.push(e);
    }
    let cwd = image.cwd();
    if cwd.in_image {
        out.push(CString::new([key.as_slice(), &cwd.path].concat()).ok()?);
        if let Some(ino) = cwd.ino {
            out.push(CString::new([key_ino.as_slice(), ino.to_string().as_bytes()].concat()).ok()?);
        }
    }
    Some(out)
}

/// The variables that make a started program run on the image too, as
/// this process got them (recorded at load).
static CARRIED: std::sync::OnceLock<Vec<(Vec<u8>, Vec<u8>)>> = std::sync::OnceLock::new();

/// Records the variables an exec must carry on (`LD_PRELOAD` with this
/// library, and the image's settings), at load.
pub fn record_env() {
    let keys = [
        "LD_PRELOAD",
        crate::state::ENV_IMAGE,
        crate::state::ENV_AT,
        crate::state::ENV_RO,
        crate::served::ENV_SERVER,
    ];
    let v = keys
        .iter()
        .filter_map(|k| {
            std::env::var_os(k).map(|v| (k.as_bytes().to_vec(), v.into_encoded_bytes()))
        })
        .collect();
    let _ = CARRIED.set(v);
}

/// Adds to `out` the carried variables it lacks: a program that passes its
/// own environment to an exec (`execle`, `execve` with a made-up `envp`)
/// still starts a program that runs on the image.
fn carry_on(out: &mut Vec<CString>) {
    for (k, v) in CARRIED.get().map(Vec::as_slice).unwrap_or_default() {
        let key = [k.as_slice(), b"="].concat();
        let present = out.iter().any(|e| e.as_bytes().starts_with(&key));
        if !present && let Ok(c) = CString::new([key.as_slice(), v].concat()) {
            out.push(c);
        }
    }
}

/// A NULL-terminated pointer array over `v`.
fn ptrs(v: &[CString]) -> Vec<*const c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain([std::ptr::null()])
        .collect()
}

unsafe extern "C" {
    static environ: *mut *const c_char;
}

type ExecFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

/// `execve(2)`.
///
/// # Safety
/// As libc's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // The image is let go first: that notes the working directory's inode,
    // which the environment then carries.
    before_exec();
    // SAFETY: execve's contract.
    let env = unsafe { env_for_exec(envp) };
    let f = real!(execve: ExecFn);
    let envp = env.as_deref().map_or(envp, |e| ptrs(e).leak().as_ptr());
    // SAFETY: the program's own arguments, and an environment array that
    // lives on (leaked: it is needed until the exec, which replaces us).
    let failed = unsafe { f(path, argv, envp) };
    after_failed_exec();
    failed
}

/// `execvpe(3)`.
///
/// # Safety
/// As libc's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    before_exec();
    // SAFETY: execvpe's contract.
    let env = unsafe { env_for_exec(envp) };
    let f = real!(execvpe: ExecFn);
    let envp = env.as_deref().map_or(envp, |e| ptrs(e).leak().as_ptr());
    // SAFETY: as in execve.
    let failed = unsafe { f(file, argv, envp) };
    after_failed_exec();
    failed
}

/// `execv(3)`.
///
/// # Safety
/// As libc's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: execv takes this process's environment.
    unsafe { execve(path, argv, environ.cast_const()) }
}

/// `execvp(3)`.
///
/// # Safety
/// As libc's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: execvp takes this process's environment.
    unsafe { execvpe(file, argv, environ.cast_const()) }
}

/// Lets go of the image (when idle) before glibc starts a program.
/// Runs a `posix_spawn` with the environment that carries the image
/// (`envp` as is when there is no image); a failed spawn gives back the
/// child's slots.
///
/// # Safety
/// `envp` NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn spawn_with_env(
    envp: *const *mut c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    spawn: impl FnOnce(*const *mut c_char) -> c_int,
) -> c_int {
    if !actions.is_null()
        && let Some(e) = crate::spawn_actions::failed_open(actions)
    {
        return e;
    }
    // SAFETY: the caller's contract.
    let Some((env, holds)) = (unsafe { env_for_spawn(envp.cast(), actions) }) else {
        return spawn(envp);
    };
    let ptrs = ptrs(&env);
    let r = spawn(ptrs.as_ptr().cast());
    if r != 0 {
        holds.failed();
    }
    r
}

/// Before `system` or `popen` start a shell (after `before_shell`): in
/// the program's environment, for as long as the returned guard lives,
/// what hands the shell the program's image descriptors that are not
/// close-on-exec, as it inherits every such descriptor: served, a token
/// for the server's copy of this process; in process, the notes of the
/// descriptors let go (`inherit::env_for_spawn`).
pub fn shell_token() -> Option<ShellEnv> {
    let image = image()?;
    if crate::served::socket().is_some() {
        return image
            .with(|b| {
                Ok(ShellEnv::Served {
                    token: crate::served::SpawnToken::before(b),
                })
            })
            .ok();
    }
    let child_fds: Vec<(i32, i32)> = crate::inherit::pending_fds()
        .into_iter()
        .filter(|&(_, cloexec)| !cloexec)
        .map(|(fd, _)| (fd, fd))
        .collect();
    let (entry, slots) = crate::inherit::env_for_spawn(&child_fds);
    let value = entry
        .as_ref()
        .and_then(|e| e.to_str().ok()?.split_once('=').map(|(_, v)| v.to_string()));
    if let Some(v) = &value {
        // SAFETY: just before starting the shell, as `cwd_into_environment`
        // does; a thread reading the environment at that moment is the one
        // risk, as with any setenv.
        unsafe { std::env::set_var(crate::inherit::ENV_FDS, v) };
    }
    Some(ShellEnv::Local {
        set: value.is_some(),
        slots,
    })
}

/// What `shell_token` put in the environment, taken out when dropped.
pub enum ShellEnv {
    /// Its drop takes the token out of the environment again.
    Served {
        token: crate::served::SpawnToken,
    },
    Local {
        set: bool,
        slots: Vec<u32>,
    },
}

impl ShellEnv {
    /// The shell was not started: what was held for it is given back.
    pub fn failed(self) {
        match &self {
            ShellEnv::Local { slots, .. } => crate::inherit::fork_failed(slots.clone()),
            ShellEnv::Served { token } => token.cancel(),
        }
    }
}

impl Drop for ShellEnv {
    fn drop(&mut self) {
        if let ShellEnv::Local { set: true, .. } = self {
            // SAFETY: as in `shell_token`.
            unsafe { std::env::remove_var(crate::inherit::ENV_FDS) };
        }
    }
}

/// Before `posix_spawn`: the image is let go (without a server). The
/// program's environment is not touched: the spawn's own is made from it
/// (`env_carried`, which says where the working directory is), and the
/// program may be passing `environ` itself, which a `setenv` here could
/// move under it (make did: a `make -C DIR` inside the image crashed at
/// its second command, reading the array a `setenv` had freed).
pub fn before_spawn() {
    if let Some(i) = image() {
        i.hand_over_now();
    }
}

/// Before `system` and `popen`, which start their shell with the
/// program's own environment: as `before_spawn`, and the environment made
/// to say where the working directory is now.
pub fn before_shell() {
    if let Some(i) = image() {
        i.hand_over_now();
        cwd_into_environment(i);
    }
}

/// `system` and `popen` start their command with the program's own
/// environment: it is made to say where the working directory is now
/// (`ULFS_RUN_CWD`, or nothing when it is on the host), so that the
/// command's relative paths go where the program's would, never to the
/// directory `ulfs run` started in. Changed only when it differs.
fn cwd_into_environment(image: &crate::state::Image) {
    let (path, ino) = {
        let cwd = image.cwd();
        if cwd.in_image {
            (
                Some(std::ffi::OsString::from_vec(cwd.path.clone())),
                cwd.ino.map(|i| i.to_string()),
            )
        } else {
            (None, None)
        }
    };
    for (key, value) in [(ENV_CWD, path), (ENV_CWD_INO, ino.map(Into::into))] {
        if std::env::var_os(key) == value {
            continue;
        }
        // SAFETY: the environment changes only when the working
        // directory moved since the last start of a program, just before
        // starting one; a thread reading the environment at that moment
        // is the one risk, as with any setenv.
        unsafe {
            match &value {
                Some(v) => std::env::set_var(key, v),
                None => std::env::remove_var(key),
            }
        }
    }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// `posix_spawn(3)`: the image is let go of first (when no image file is
/// open), so the new program can mount it.
///
/// # Safety
/// As libc's `posix_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_spawn();
    let f = real!(posix_spawn: SpawnFn);
    // SAFETY: the program's own arguments, and an environment of ours.
    unsafe { spawn_with_env(envp, actions, |env| f(pid, path, actions, attr, argv, env)) }
}

/// `posix_spawnp(3)`: as `posix_spawn`.
///
/// # Safety
/// As libc's `posix_spawnp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    before_spawn();
    let f = real!(posix_spawnp: SpawnFn);
    // SAFETY: the program's own arguments, and an environment of ours.
    unsafe { spawn_with_env(envp, actions, |env| f(pid, file, actions, attr, argv, env)) }
}

/// `system(3)`: as `posix_spawn` (glibc spawns the shell internally).
///
/// # Safety
/// As libc's `system`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    before_shell();
    let env = shell_token();
    let f = real!(system: unsafe extern "C" fn(*const c_char) -> c_int);
    // SAFETY: the program's own argument.
    let status = unsafe { f(command) };
    if status == -1
        && let Some(env) = env
    {
        env.failed();
    }
    status
}

//! `ulfs run --sandbox`: the ULFS paper's confinement, done with today's
//! kernel. Applied by `ulfs run` to itself just before it execs the
//! program, so the program and everything it starts inherit it:
//!
//! - **Landlock** (crate `landlock`, ABI up to 7): the file system is
//!   denied except a read-and-execute allow-list (the system's programs,
//!   libraries, interpreters and configuration, `/proc`, the program and
//!   `libulfs_preload.so` themselves, and each `--allow-read PATH`), the
//!   null and random devices, and the image file itself (read and write:
//!   the program's files are served from it in process). Nothing on the
//!   host can be written except through descriptors the program already
//!   holds (its standard streams). TCP `bind` and `connect` are denied,
//!   signals and abstract UNIX sockets are scoped to the sandbox.
//! - **seccomp** (crate `seccompiler`): system calls a confined program
//!   never needs fail with EPERM (mounting, tracing, module and kernel
//!   loading, BPF, keys, namespaces, `open_by_handle_at`, io_uring, clock
//!   setting, ...), and so do `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`
//!   (typing into the user's terminal) and, unless `--allow-net`, every
//!   `socket` (network ones, and named UNIX sockets, which Landlock ABI 7
//!   does not guard on connect; `socketpair` stays).
//!
//! Where Landlock is not enforced in full or seccomp cannot be installed,
//! the run is refused: never run unconfined when confinement was asked for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::{CliError, CliResult};

/// What the confined program may reach.
pub struct Policy<'a> {
    pub image: &'a Path,
    pub program: &'a Path,
    pub library: &'a Path,
    pub allow_read: &'a [PathBuf],
    pub allow_net: bool,
}

/// Read-and-execute by default: what a dynamically linked program and its
/// interpreters need to start (missing ones are skipped).
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/proc",
    "/sys/devices/system/cpu",
];

/// Devices a program may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The Landlock ABI this is written for (Linux 6.12+); older kernels get
/// what they support only if it is all of this, else the run is refused.
const LANDLOCK_ABI: ABI = ABI::V7;

fn err(msg: impl Into<String>) -> CliError {
    CliError::new("run --sandbox", msg).with_code(126)
}

/// Confines this process (and what it execs) by `p`.
pub fn confine(p: &Policy) -> CliResult {
    landlock(p)?;
    seccomp(p.allow_net)
}

fn landlock(p: &Policy) -> CliResult {
    let abi = LANDLOCK_ABI;
    let le = |e: landlock::RulesetError| err(format!("Landlock: {e}"));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(le)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(le)?;
    if !p.allow_net {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(le)?;
    }
    let read = AccessFs::from_read(abi);
    let file_read = read & AccessFs::from_file(abi);
    let mut allowed: Vec<(&Path, BitFlags<AccessFs>)> = Vec::new();
    allowed.extend(SYSTEM_READ.iter().map(|d| (Path::new(*d), read)));
    for extra in p.allow_read {
        allowed.push((extra, if extra.is_dir() { read } else { file_read }));
    }
    allowed.push((p.program, file_read));
    allowed.push((p.library, file_read));
    let device = AccessFs::ReadFile | AccessFs::WriteFile;
    allowed.extend(DEVICES.iter().map(|d| (Path::new(*d), device)));
    allowed.push((
        p.image,
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
    ));
    let mut created = ruleset.create().map_err(le)?;
    for (path, access) in allowed {
        // A path this machine does not have is simply not allowed.
        let Ok(fd) = PathFd::new(path) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| err(format!("Landlock rule for {}: {e}", path.display())))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| err(format!("Landlock: {e}")))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(err(format!(
            "Landlock is not fully enforced on this kernel ({:?}); refusing to run unconfined",
            status.ruleset
        )));
    }
    Ok(())
}

/// System calls a confined program never needs.
const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_clock_settime,
    libc::SYS_settimeofday,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

fn seccomp(allow_net: bool) -> CliResult {
    let se = |e: seccompiler::BackendError| err(format!("seccomp: {e}"));
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&n| (n, Vec::new())).collect();
    // Pushing characters into the terminal's input (TIOCSTI), or the
    // console's equivalent (TIOCLINUX), would have the user's shell run
    // them after the program ends: outside the sandbox.
    let ioctl_rules = [libc::TIOCSTI, libc::TIOCLINUX]
        .iter()
        .map(|&req| {
            let c = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, req)
                .map_err(se)?;
            SeccompRule::new(vec![c]).map_err(se)
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    if !allow_net {
        // Named UNIX sockets are files Landlock (ABI 7) does not guard on
        // connect: no sockets at all, then (socketpair stays).
        rules.insert(libc::SYS_socket, Vec::new());
    }
    let arch = if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(se)?;
    let program: BpfProgram = filter.try_into().map_err(se)?;
    seccompiler::apply_filter(&program).map_err(|e| err(format!("seccomp: {e}")))
}

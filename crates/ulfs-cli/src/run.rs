//! `ulfs run IMAGE [--at /ulfs] [--ro] [--sandbox] [--memory-budget SIZE] -- PROGRAM
//! [ARGS...]`, or `ulfs run --server SOCKET [--at /ulfs] -- PROGRAM [ARGS...]`: runs an
//! unmodified, dynamically linked program with the image's files under a
//! prefix, served inside the program's own process by
//! `libulfs_preload.so` (crate `ulfs-preload`) through `LD_PRELOAD`.
//!
//! This module only prepares and checks: the image mounts (so a bad one is
//! reported here, in the CLI's words), the program exists and can be
//! reached by `LD_PRELOAD` (not statically linked, not set-user-ID, not
//! 32-bit), and the library is found. With `--sandbox` it confines itself
//! (`sandbox.rs`) first. Then it execs the program, so its exit status and
//! signals are the program's own. With `--server` the image is the one an
//! `ulfs serve` owns: it is checked by connecting to the server, and the
//! library sends the program's calls there (docs/SERVE.md).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::error::{CliError, CliResult};

/// The library's file name, and the variable that overrides where it is.
const LIB: &str = "libulfs_preload.so";
const ENV_LIB: &str = "ULFS_PRELOAD_LIB";

/// Where the image is.
pub enum Source<'a> {
    /// An image file the program mounts itself.
    Image(&'a Path),
    /// The socket of an `ulfs serve` that owns the image.
    Server(&'a Path),
}

pub struct Args<'a> {
    pub source: Source<'a>,
    pub at: &'a OsStr,
    pub read_only: bool,
    pub sandbox: bool,
    /// With `sandbox`: more paths the program may read (and execute).
    pub allow_read: &'a [PathBuf],
    /// With `sandbox`: network sockets allowed.
    pub allow_net: bool,
    /// `--memory-budget`: a size, `auto` or `none` (None: auto).
    pub memory_budget: Option<&'a str>,
    pub program: &'a OsStr,
    pub args: &'a [OsString],
}

fn err(msg: impl Into<String>) -> CliError {
    CliError::new("run", msg)
}

pub fn run(a: &Args) -> CliResult {
    if !a.sandbox && (a.allow_net || !a.allow_read.is_empty()) {
        return Err(err("--allow-read and --allow-net only go with --sandbox").with_code(2));
    }
    let at = a.at.as_bytes();
    if at.first() != Some(&b'/') || at.iter().all(|&b| b == b'/') {
        return Err(err(format!(
            "--at {}: the prefix must be an absolute path below /",
            a.at.to_string_lossy()
        ))
        .with_code(2));
    }
    let (file, what) = match a.source {
        Source::Image(p) => (p, "the image"),
        Source::Server(p) => (p, "the server's socket"),
    };
    let image = std::path::absolute(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
    if under(&image, at) {
        return Err(err(format!(
            "{what} {} is under the prefix {}: the program could not reach it \
             (choose another --at)",
            image.display(),
            a.at.to_string_lossy()
        ))
        .with_code(2));
    }
    let served = matches!(a.source, Source::Server(_));
    if served {
        for (given, flag, why) in [
            (a.read_only, "--ro", "the server decides (ulfs serve --ro)"),
            (
                a.sandbox,
                "--sandbox",
                "not yet: a confined program cannot connect to the server",
            ),
            (
                a.memory_budget.is_some(),
                "--memory-budget",
                "the server's memory is the server's",
            ),
        ] {
            if given {
                return Err(err(format!("{flag} does not go with --server: {why}")).with_code(2));
            }
        }
    }
    if ["/proc", "/dev", "/sys"]
        .iter()
        .any(|s| under(Path::new(s), at))
    {
        return Err(err(format!(
            "--at {}: that would hide the host's {} from the program",
            a.at.to_string_lossy(),
            ["/proc", "/dev", "/sys"]
                .iter()
                .find(|s| under(Path::new(s), at))
                .unwrap_or(&"")
        ))
        .with_code(2));
    }
    let budget = match a.memory_budget {
        // Confined, the program cannot read its cgroup's files: the budget
        // is found here, before, as the program's mount would find it.
        None | Some("auto") if a.sandbox => ulfs::MemoryBudget::Auto
            .resolve()
            .map_or("none".to_string(), |b| b.to_string()),
        None | Some("auto") => "auto".to_string(),
        Some("none") => "none".to_string(),
        Some(size) => crate::size::parse_size(size)
            .map_err(|e| err(format!("--memory-budget: {e} (or `auto`, `none`)")).with_code(2))?
            .to_string(),
    };
    if served {
        check_server(&image)?;
    } else {
        check_image(&image, a.read_only)?;
    }
    let program = find_program(a.program)?;
    let interpreter = check_program(&program)?;
    let lib = find_library()?;
    let mut preload = lib.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.arg0(a.program)
        .args(a.args)
        .env("LD_PRELOAD", preload)
        .env("ULFS_RUN_AT", a.at)
        .env("ULFS_RUN_MEMORY_BUDGET", budget)
        // What the library hands from one process of a run to the next
        // never comes from outside the run.
        .env_remove("ULFS_RUN_CWD")
        .env_remove("ULFS_RUN_CWD_INO")
        .env_remove("ULFS_RUN_FDS")
        .env_remove("ULFS_RUN_SHARED")
        .env_remove("ULFS_RUN_TOKEN");
    if served {
        cmd.env("ULFS_RUN_SERVER", &image)
            .env_remove("ULFS_RUN_IMAGE")
            .env_remove("ULFS_RUN_MEMORY_BUDGET");
    } else {
        cmd.env("ULFS_RUN_IMAGE", &image)
            .env_remove("ULFS_RUN_SERVER");
    }
    if a.read_only {
        cmd.env("ULFS_RUN_RO", "1");
    } else {
        cmd.env_remove("ULFS_RUN_RO");
    }
    if a.sandbox {
        // Temporary files go to the image: the host is not writable.
        if let Some(tmp) = image_tmp(&image, a.at, a.read_only)? {
            cmd.env("TMPDIR", tmp);
        }
        let mut allow: Vec<PathBuf> = a.allow_read.to_vec();
        allow.extend(interpreter);
        crate::sandbox::confine(&crate::sandbox::Policy {
            image: &image,
            program: &program,
            library: &lib,
            allow_read: &allow,
            allow_net: a.allow_net,
        })?;
    }
    let e = cmd.exec();
    Err(err(format!("{}: {e}", program.display())).with_code(126))
}

/// The image must mount (and is let go again at once): a bad image, or one
/// in use, is reported here rather than from inside the program.
fn check_image(image: &Path, read_only: bool) -> CliResult {
    let opts = ulfs::MountOptions {
        read_only,
        ..Default::default()
    };
    let fs = ulfs::Fs::mount(image, opts).map_err(|e| err(e.to_string()))?;
    fs.unmount()
        .map_err(|e| err(format!("{}: {e}", image.display())))
}

/// A server must answer at `socket` (the connection is dropped at once,
/// which the server takes as that process's exit).
fn check_server(socket: &Path) -> CliResult {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::metadata(socket).is_ok_and(|m| !m.file_type().is_socket()) {
        return Err(err(format!(
            "{}: not a socket (give the --socket path of a running `ulfs serve`)",
            socket.display()
        ))
        .with_code(2));
    }
    ulfs_client::Client::connect(socket).map(drop).map_err(|e| {
        let hint = match e.raw() {
            libc::ENOENT | libc::ECONNREFUSED => " (is `ulfs serve IMAGE --socket PATH` running?)",
            libc::EACCES => {
                " (the socket's mode does not let this user in: ulfs serve --socket-mode)"
            }
            _ => "",
        };
        err(format!("{}: {}{hint}", socket.display(), e))
    })
}

/// Whether `path` (absolute) is `prefix` or below it, comparing whole
/// components after folding `.`, `..` and repeated slashes.
fn under(path: &Path, prefix: &[u8]) -> bool {
    let fold = |b: &[u8]| -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        for c in b.split(|&x| x == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    out.pop();
                }
                c => out.push(c.to_vec()),
            }
        }
        out
    };
    let (p, x) = (fold(path.as_os_str().as_bytes()), fold(prefix));
    !x.is_empty() && p.starts_with(&x)
}

/// A sandboxed program's temporary directory, `PREFIX/tmp`, made in the
/// image when missing (none for a read-only run that has none).
fn image_tmp(image: &Path, at: &OsStr, read_only: bool) -> CliResult<Option<OsString>> {
    let opts = ulfs::MountOptions {
        read_only,
        ..Default::default()
    };
    let mut fs = ulfs::Fs::mount(image, opts).map_err(|e| err(e.to_string()))?;
    let exists = fs.stat("/tmp").is_ok_and(|s| s.is_dir());
    let made = !exists && !read_only && fs.mkdir("/tmp", 0o1777).is_ok();
    fs.unmount()
        .map_err(|e| err(format!("{}: {e}", image.display())))?;
    Ok((exists || made).then(|| {
        let mut t = at.to_os_string();
        t.push("/tmp");
        t
    }))
}

/// `PROGRAM` as execvp would find it: a name with a slash as it is, one
/// without searched in `PATH`. Exit status 127 when it is not found, as a
/// shell's.
fn find_program(name: &OsStr) -> CliResult<PathBuf> {
    let not_found = || err(format!("{}: command not found", name.to_string_lossy())).with_code(127);
    if name.is_empty() {
        return Err(not_found());
    }
    if name.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(not_found)
}

/// What `LD_PRELOAD` cannot reach is refused, never run without the
/// image: a statically linked or 32-bit program (the library is never
/// loaded into it), a set-user-ID or set-group-ID one (the dynamic linker
/// drops `LD_PRELOAD` for it). Scripts run through their interpreter,
/// which is checked when it is an ELF file. Returns the interpreters met
/// on the way (a sandboxed run must let them be read).
fn check_program(program: &Path) -> CliResult<Vec<PathBuf>> {
    let shown = program.display();
    let meta = program
        .metadata()
        .map_err(|e| err(format!("{shown}: {e}")).with_code(127))?;
    if meta.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
        return Err(err(format!(
            "{shown} is set-user-ID or set-group-ID: the dynamic linker ignores LD_PRELOAD for it, \
             so it could not see the image"
        ))
        .with_code(126));
    }
    if has_file_capabilities(program) {
        return Err(err(format!(
            "{shown} has file capabilities: the dynamic linker ignores LD_PRELOAD for it \
             (secure-execution mode), so it could not see the image"
        ))
        .with_code(126));
    }
    let mut head = Vec::new();
    std::fs::File::open(program)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .map_err(|e| err(format!("{shown}: {e}")).with_code(126))?;
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(b"");
        let interp = line
            .split(|&b| b == b' ' || b == b'\t')
            .find(|w| !w.is_empty())
            .unwrap_or(b"");
        if interp.is_empty() {
            return Ok(Vec::new());
        }
        let interp = PathBuf::from(OsStr::from_bytes(interp));
        let mut more = check_program(&interp)?;
        more.push(interp);
        return Ok(more);
    }
    match elf_kind(&head) {
        ElfKind::Dynamic | ElfKind::NotElf => Ok(Vec::new()),
        ElfKind::Static => Err(err(format!(
            "{shown} is statically linked: LD_PRELOAD cannot reach it, so it could not see the image"
        ))
        .with_code(126)),
        ElfKind::Not64 => Err(err(format!(
            "{shown} is not a 64-bit program: the ulfs library cannot be loaded into it"
        ))
        .with_code(126)),
    }
}

/// Whether `program` carries file capabilities (`security.capability`),
/// which put the dynamic linker in secure-execution mode as set-user-ID
/// does.
fn has_file_capabilities(program: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(program.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: NUL-terminated strings; a NULL buffer of size 0 only asks
    // for the attribute's size.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

#[derive(Debug, PartialEq)]
enum ElfKind {
    NotElf,
    Not64,
    /// Has a program interpreter (the dynamic linker).
    Dynamic,
    Static,
}

/// Reads an ELF header's class and looks for a `PT_INTERP` program header
/// among the first bytes of the file.
fn elf_kind(head: &[u8]) -> ElfKind {
    if !head.starts_with(b"\x7fELF") {
        return ElfKind::NotElf;
    }
    if head.get(4) != Some(&2) || head.get(5) != Some(&1) {
        return ElfKind::Not64;
    }
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u64_at = |o: usize| {
        head.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return ElfKind::Static;
    };
    const PT_INTERP: u32 = 3;
    let interp = (0..phnum as u64).any(|i| {
        let o = (phoff + i * phentsize as u64) as usize;
        head.get(o..o + 4)
            .is_some_and(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) == PT_INTERP)
    });
    if interp {
        ElfKind::Dynamic
    } else {
        ElfKind::Static
    }
}

/// The preload library: `ULFS_PRELOAD_LIB`, or next to this executable
/// (where cargo builds both), or in `../lib` (an installed layout).
fn find_library() -> CliResult<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_LIB) {
        let p = std::path::absolute(PathBuf::from(p)).map_err(|e| err(e.to_string()))?;
        return if p.is_file() {
            Ok(p)
        } else {
            Err(err(format!("{ENV_LIB}={}: no such file", p.display())))
        };
    }
    let exe = std::env::current_exe().map_err(|e| err(format!("locating ulfs: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    [dir.join(LIB), dir.join("../lib").join(LIB)]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            err(format!(
                "cannot find {LIB} next to {} or in ../lib: build the workspace \
                 (cargo build --release builds it with ulfs) or set {ENV_LIB}",
                exe.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_kinds_are_told_apart() {
        let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_kind(&own[..4096]), ElfKind::Dynamic);
        assert_eq!(elf_kind(b"#!/bin/sh\n"), ElfKind::NotElf);
        let mut not64 = own[..64].to_vec();
        not64[4] = 1;
        assert_eq!(elf_kind(&not64), ElfKind::Not64);
        // A header whose program headers hold no PT_INTERP.
        let mut stat = own[..4096].to_vec();
        let phoff = u64::from_le_bytes(stat[32..40].try_into().unwrap()) as usize;
        let (entsize, num) = (
            u16::from_le_bytes([stat[54], stat[55]]) as usize,
            u16::from_le_bytes([stat[56], stat[57]]) as usize,
        );
        for i in 0..num {
            let o = phoff + i * entsize;
            if stat[o..o + 4] == 3u32.to_le_bytes() {
                stat[o..o + 4].copy_from_slice(&1u32.to_le_bytes());
            }
        }
        assert_eq!(elf_kind(&stat), ElfKind::Static);
    }
}

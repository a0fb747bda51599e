//! The `ulfs` command: argument definitions and dispatch.
//!
//! Each subcommand lives in its own module; this file only describes the
//! command line (clap derive, so `--help` stays in sync with the code),
//! converts arguments into the modules' types and turns their errors into
//! the CLI's contract: `ulfs: <context>: <message>` on stderr and a
//! non-zero exit status.

mod bench;
mod cat;
mod dir;
mod error;
mod export;
mod format;
mod fsck;
mod hostfs;
mod hostwalk;
mod image;
mod imgpath;
mod import;
mod info;
mod ls;
mod mkdir;
mod mkfs;
mod mount;
mod progress;
mod rm;
mod run;
mod sandbox;
mod size;
mod walk;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::{CliError, CliResult};

/// Exit status of a malformed command line, as clap uses.
pub(crate) const EXIT_USAGE: i32 = 2;

#[derive(Parser)]
#[command(
    name = "ulfs",
    version,
    about = "Create, inspect and fill ulfs images (in-process file systems in one host file)",
    long_about = None,
    after_help = "Paths inside an image are absolute (e.g. /etc/passwd). SIZE values take \
                  K, M, G, T or P suffixes (powers of 1024), e.g. 64M."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create a new, empty image file of the given size
    Mkfs {
        /// Image file to create (or a block device)
        image: PathBuf,
        /// Image size: bytes, or with a K/M/G/T suffix (e.g. 64M, 2G); on a block device at most its size, 0 for all of it
        // Hyphen values allowed so "-64M" gets the size error, not "unknown flag".
        #[arg(allow_hyphen_values = true)]
        size: String,
        /// Volume label, up to 63 bytes
        #[arg(long, default_value = "")]
        label: String,
        /// Overwrite an existing non-empty file (its contents are lost)
        #[arg(long)]
        force: bool,
        /// Durability mode: "journal" (crash-consistent) or "none" (in place, as published ULFS)
        #[arg(long, value_enum, default_value_t = mkfs::ModeArg::Journal)]
        mode: mkfs::ModeArg,
        /// Journal size (bytes or with a K/M/G suffix; default 1/32 of the image, 256 KiB to 128 MiB)
        #[arg(long, value_name = "SIZE")]
        journal_size: Option<String>,
        /// Leave the image file sparse instead of reserving its whole size on the host: for an image larger than the host's free space, to copy onto a device or mount read-only (a read-write mount reserves it then, or is refused naming the shortfall)
        #[arg(long)]
        sparse: bool,
    },
    /// Show what an image's superblock records (size, usage, label, uuid, ...)
    Info {
        /// Image file
        image: PathBuf,
    },
    /// List a directory in the image (like ls -1, sorted by name, hidden names included)
    Ls {
        /// Image file
        image: PathBuf,
        /// Directory or file inside the image
        #[arg(default_value = "/")]
        path: OsString,
        /// Long format: mode, links, uid, gid, size, mtime, name (-> target)
        #[arg(short, long)]
        long: bool,
        /// List subdirectories recursively, each under a "path:" header
        #[arg(short = 'R', long)]
        recursive: bool,
    },
    /// Write files from the image to stdout
    Cat {
        /// Image file
        image: PathBuf,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Create directories in the image
    Mkdir {
        /// Image file
        image: PathBuf,
        /// Directories to create
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Create missing parents; existing directories are not an error
        #[arg(short, long)]
        parents: bool,
    },
    /// Remove files (and with -r, directories with their contents) from the image
    Rm {
        /// Image file
        image: PathBuf,
        /// Paths inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Remove directories and everything below them
        #[arg(short, long)]
        recursive: bool,
    },
    /// Copy the contents of a host directory into the image
    ///
    /// Keeps permission bits, owners, access and modification times (ns),
    /// symlinks (targets verbatim), hard links and holes. Sockets, fifos
    /// and devices are skipped with a warning. Like `cp -a HOSTDIR/. DEST`,
    /// DEST also takes HOSTDIR's own mode, owner and times.
    ///
    /// Files are read to their end, not to their stat size (so /proc and
    /// sysfs files keep their content); a file whose length differs from
    /// its stat size is stored as read, with a warning. An entry that fails
    /// is reported and the rest is imported; the exit status is then 1.
    /// Trees of any depth are walked (by descriptor, not by path).
    Import {
        /// Image file
        image: PathBuf,
        /// Host directory whose contents are copied
        hostdir: PathBuf,
        /// Directory inside the image (created with parents if missing)
        #[arg(default_value = "/")]
        dest: OsString,
        /// Stop at the first entry that fails (by default each failure is
        /// reported, the rest is imported, and the exit status is 1)
        #[arg(long)]
        fail_fast: bool,
    },
    /// Copy a directory (or one file) from the image to the host
    ///
    /// A directory's contents go into HOSTDIR; a single file is written as
    /// HOSTDIR/<name>. Keeps permission bits, times, symlinks, hard links
    /// and holes; owners too when run as root.
    ///
    /// Everything readable is exported from a damaged image: an entry that
    /// fails is reported (a file that fails part-way keeps what was read)
    /// and the rest is exported; the exit status is then 1. Trees of any
    /// depth are walked (by descriptor, not by path).
    Export {
        /// Image file
        image: PathBuf,
        /// Directory or file inside the image
        src: OsString,
        /// Host directory to copy into (created if missing)
        hostdir: PathBuf,
        /// Stop at the first entry that fails (by default each failure is
        /// reported, the rest is exported, and the exit status is 1)
        #[arg(long)]
        fail_fast: bool,
    },
    /// Run an unmodified program with the image's files under a prefix
    ///
    /// Paths under the prefix (default /ulfs) are served from the image
    /// inside the program's own process (LD_PRELOAD of libulfs_preload.so);
    /// everything else goes to the kernel unchanged. The exit status and
    /// signals are the program's. The image is committed when the program
    /// exits; one left by a kill is replayed at the next mount. Programs it
    /// starts run on the image too, one process writing it at a time.
    /// What is covered: docs/RUN.md.
    Run {
        /// Image file
        image: PathBuf,
        /// Where the image appears in the program's view
        #[arg(long, default_value = "/ulfs", value_name = "PREFIX")]
        at: OsString,
        /// Mount the image read-only (every change is EROFS)
        #[arg(long)]
        ro: bool,
        /// Confine the program: it may read only the system's programs,
        /// libraries and configuration (and --allow-read paths), write only
        /// its image and standard streams, and open no network sockets
        /// (Landlock and seccomp; refused where they are not available)
        #[arg(long)]
        sandbox: bool,
        /// With --sandbox: also let the program read (and execute) PATH
        #[arg(long, value_name = "PATH")]
        allow_read: Vec<PathBuf>,
        /// With --sandbox: allow network sockets
        #[arg(long)]
        allow_net: bool,
        /// Keep at most about SIZE of file data in memory (e.g. 8M):
        /// pages of streams already used are written back and dropped,
        /// sequential access is read ahead. `auto` (the default): half of
        /// what the memory cgroup's limit leaves free, no budget without a
        /// limit; `none` (or 0): no budget, the host's page cache decides
        #[arg(long, value_name = "SIZE|auto|none")]
        memory_budget: Option<String>,
        /// The program (searched in PATH) and its arguments
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
    /// Mount the image on a host directory through FUSE
    ///
    /// Returns once the mount is ready; a server process serves it until
    /// `fusermount3 -u DIR` or `umount DIR` (or SIGTERM to the server),
    /// which commits the journal and marks the image clean. The kernel
    /// checks permissions against the modes and owners in the image. An
    /// image another process writes is refused as in use. Options (-o,
    /// comma-separated): ro, rw, allow_other, default_permissions (always
    /// on), writeback_cache, uid=N, gid=N, umask=OCTAL, and the kernel's
    /// noatime, nosuid, nodev, noexec, sync, dirsync. docs/MOUNT.md.
    Mount {
        /// Image file
        image: PathBuf,
        /// Directory to mount it on
        mountpoint: PathBuf,
        /// Mount options, comma-separated (may be given more than once)
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Serve in this process, in the foreground, until unmounted
        #[arg(short = 'f', long)]
        foreground: bool,
    },
    /// Unmount what `ulfs mount` mounted, and wait until the image is free
    ///
    /// `fusermount3 -u DIR`, then waits (up to 60 s) until the server has
    /// committed the journal, marked the image clean and let go of it, so
    /// the image can be used as soon as this returns. Refused (busy) while
    /// files are open there, unless --lazy.
    Umount {
        /// The mount point
        mountpoint: PathBuf,
        /// Detach at once even with files open; the server ends when the
        /// last one is closed (nothing is waited for)
        #[arg(short = 'z', long)]
        lazy: bool,
    },
    /// Run the benchmarks: the ULFS paper's experiments against host file
    /// systems, with plots and a report (`ulfs bench --help` for options)
    ///
    /// Runs the `ulfs-bench` program built beside this one; every argument
    /// goes to it. docs/BENCHMARKS.md says what is measured and how.
    #[command(disable_help_flag = true)]
    Bench {
        /// Arguments for ulfs-bench: [--quick] [--out DIR] [--list]
        /// [--replot DIR] [EXPERIMENT...]
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Check an image for inconsistencies, and with --repair fix them
    ///
    /// The repair frees leaked blocks and marks used ones, sets link counts,
    /// moves unreachable files to /lost+found, rebuilds damaged directory
    /// indexes, recounts the superblock and reseals stale checksums (as
    /// left by a crash in mode none).
    ///
    /// Exit status, as fsck(8): 0 clean, 1 errors corrected (--repair),
    /// 4 errors left uncorrected, 8 the image could not be checked
    /// (unreadable or not an ulfs image).
    Fsck {
        /// Image file
        image: PathBuf,
        /// Repair what can be repaired, in place
        #[arg(long, short = 'y')]
        repair: bool,
    },
}

fn main() -> ExitCode {
    restore_sigpipe();
    let command = match mount::as_mount_helper() {
        Some(helper) => helper,
        None => Cli::parse().command,
    };
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.print();
            // Exit codes are small constants (1, 4, 8), always fit in u8.
            ExitCode::from(u8::try_from(e.code).unwrap_or(1))
        }
    }
}

/// Rust ignores SIGPIPE, which turns `ulfs cat ... | head` into an error
/// message; the default action ends the process quietly, as cat(1) does.
fn restore_sigpipe() {
    // SAFETY: installing the default disposition for SIGPIPE at start-up,
    // before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn parse_size_arg(s: &str) -> CliResult<u64> {
    size::parse_size(s).map_err(|msg| CliError::new("mkfs", msg).with_code(EXIT_USAGE))
}

fn run(command: Command) -> CliResult {
    let bytes = |paths: &[OsString]| {
        paths
            .iter()
            .map(|p| imgpath::from_arg(p))
            .collect::<Vec<_>>()
    };
    match command {
        Command::Mkfs {
            image,
            size,
            label,
            force,
            mode,
            journal_size,
            sparse,
        } => {
            // Parsed here rather than by clap so that a bad size is reported
            // in the CLI's own `ulfs: mkfs: ...` shape.
            let size = parse_size_arg(&size)?;
            let journal_size = journal_size.as_deref().map(parse_size_arg).transpose()?;
            mkfs::run(&mkfs::Args {
                image: &image,
                size,
                label: &label,
                force,
                mode,
                journal_size,
                sparse,
            })
        }
        Command::Info { image } => info::run(&image),
        Command::Ls {
            image,
            path,
            long,
            recursive,
        } => ls::run(
            &image,
            &imgpath::from_arg(&path),
            &ls::Options { long, recursive },
        ),
        Command::Cat { image, paths } => cat::run(&image, &bytes(&paths)),
        Command::Mkdir {
            image,
            paths,
            parents,
        } => mkdir::run(&image, &bytes(&paths), parents),
        Command::Rm {
            image,
            paths,
            recursive,
        } => rm::run(&image, &bytes(&paths), recursive),
        Command::Import {
            image,
            hostdir,
            dest,
            fail_fast,
        } => import::run(&image, &hostdir, &imgpath::from_arg(&dest), fail_fast),
        Command::Export {
            image,
            src,
            hostdir,
            fail_fast,
        } => export::run(&image, &imgpath::from_arg(&src), &hostdir, fail_fast),
        Command::Fsck { image, repair } => fsck::run(&image, repair),
        Command::Umount { mountpoint, lazy } => mount::umount(&mountpoint, lazy),
        Command::Mount {
            image,
            mountpoint,
            options,
            foreground,
        } => mount::run(&mount::Args {
            image: &image,
            mountpoint: &mountpoint,
            options: &options,
            foreground,
        }),
        Command::Bench { args } => bench::run(&args),
        Command::Run {
            image,
            at,
            ro,
            sandbox,
            allow_read,
            allow_net,
            memory_budget,
            command,
        } => run::run(&run::Args {
            image: &image,
            at: &at,
            read_only: ro,
            sandbox,
            allow_read: &allow_read,
            allow_net,
            memory_budget: memory_budget.as_deref(),
            program: &command[0],
            args: &command[1..],
        }),
    }
}

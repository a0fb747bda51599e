//! The `ulfs` command: argument definitions and dispatch.
//!
//! Each subcommand lives in its own module; this file only describes the
//! command line (clap derive, so `--help` stays in sync with the code),
//! converts arguments into the modules' types and turns their errors into
//! the CLI's contract: `ulfs: <context>: <message>` on stderr and a
//! non-zero exit status.

mod bench;
mod cat;
mod chmod;
mod chown;
mod convert;
mod copy;
mod cp;
mod daemon;
mod debug;
mod dir;
mod du;
mod error;
mod export;
mod format;
mod fsck;
mod generate;
mod hostfs;
mod hostwalk;
mod image;
mod images;
mod imgpath;
mod import;
mod info;
mod json;
mod ln;
mod ls;
mod mkdir;
mod mkfs;
mod mount;
mod mv;
mod operand;
mod progress;
mod resize;
mod rm;
mod run;
mod sandbox;
mod serve;
mod size;
mod stat;
mod touch;
mod tree;
mod walk;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, Parser, Subcommand};

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
                  K, M, G, T or P suffixes (powers of 1024), e.g. 64M. `cp` names files in \
                  images as IMAGE:/PATH (e.g. disk.img:/etc/passwd); the other commands take \
                  the image first, then paths inside it.\n\n\
                  Example:\n  ulfs mkfs disk.img 64M && ulfs cp -a ./photos disk.img:/ && ulfs tree disk.img"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create a new, empty image file of the given size
    #[command(after_help = "Example:\n  ulfs mkfs disk.img 256M --label data")]
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
    #[command(after_help = concat!(
        "With --json: ",
        json::info_fields!(),
        "\n\nExample:\n  ulfs info disk.img --json"
    ))]
    Info {
        /// Image file
        image: PathBuf,
        /// Print one JSON object instead of text (fields below)
        #[arg(long)]
        json: bool,
    },
    /// List a directory in the image (like ls -1, sorted by name, hidden names included)
    #[command(after_help = concat!(
        "With --json: one JSON array. ",
        json::entry_fields!(),
        "\n\nExample:\n  ulfs ls disk.img /etc -l"
    ))]
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
        /// Print one JSON array of the entries (with -R, of the whole
        /// tree; a symlink operand is shown itself, as with -l)
        #[arg(long)]
        json: bool,
        /// Draw the tree below the directory, as `ulfs tree`
        #[arg(long, conflicts_with_all = ["json", "long", "recursive"])]
        tree: bool,
    },
    /// Write files from the image to stdout
    #[command(after_help = "Example:\n  ulfs cat disk.img /etc/hostname")]
    Cat {
        /// Image file
        image: PathBuf,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Create directories in the image
    #[command(after_help = "Example:\n  ulfs mkdir disk.img /srv/www -p")]
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
    #[command(after_help = "Example:\n  ulfs rm disk.img /tmp -r")]
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
    /// Copy the contents of a host directory (or one file) into the image
    ///
    /// Keeps permission bits, owners, access and modification times (ns),
    /// symlinks (targets verbatim), hard links and holes. Sockets, fifos
    /// and devices are skipped with a warning. Like `cp -a HOSTDIR/. DEST`,
    /// DEST also takes HOSTDIR's own mode, owner and times. A single file
    /// is imported as DEST/<name>.
    ///
    /// Files are read to their end, not to their stat size (so /proc and
    /// sysfs files keep their content); a file whose length differs from
    /// its stat size is stored as read, with a warning. An entry that fails
    /// is reported and the rest is imported; the exit status is then 1.
    /// Trees of any depth are walked (by descriptor, not by path).
    #[command(after_help = "Example:\n  ulfs import disk.img ./site /srv/www")]
    Import {
        /// Image file
        image: PathBuf,
        /// Host directory whose contents are copied, or one file
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
    #[command(after_help = "Example:\n  ulfs export disk.img /srv/www ./backup")]
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
    /// Copy files and trees between the host and images, as cp(1)
    ///
    /// Each operand is a host path or IMAGE:/PATH, so a copy may go from
    /// the host into an image, out of one, or between images (two, or the
    /// same one). With several SOURCEs, or when DEST is an existing
    /// directory, each SOURCE is copied into DEST under its own name;
    /// otherwise SOURCE is copied as DEST. IMAGE:/ names an image's whole
    /// tree (its contents are merged into an existing DEST).
    ///
    /// Without -a a copy gets its source's permission bits less the umask,
    /// new times and the caller as owner; symlinks in a tree are copied as
    /// symlinks, and a symlink SOURCE is followed unless -r. An existing
    /// file at the destination is replaced; directories are merged. An
    /// entry that fails is reported, the rest is copied, and the exit
    /// status is then 1. Images only read are opened read-only.
    #[command(override_usage = "ulfs cp [-r] [-a] SOURCE... DEST", after_help = concat!(
        "An operand is IMAGE:/PATH when the text before its first ':' is an existing file \
         (not a directory) and the text after it starts with '/'; anything else is a host \
         path. A leading './' always makes a host path (./a:/b is the host file 'a:/b').",
        "\n\nExample:\n  ulfs cp -a ./photos disk.img:/home/me/"
    ))]
    Cp {
        /// Copy directories and everything below them
        #[arg(short = 'r', visible_short_alias = 'R', long)]
        recursive: bool,
        /// Archive: -r, and keep modes, times (ns), owners (on the host
        /// only as root), symlinks and hard links within the copy
        #[arg(short = 'a', long)]
        archive: bool,
        /// SOURCE... DEST: host paths or IMAGE:/PATH
        #[arg(required = true, num_args = 2.., value_name = "PATH")]
        operands: Vec<OsString>,
    },
    /// Move or rename files and directories inside the image, as mv(1)
    ///
    /// Each move is one atomic rename. With several SOURCEs, or when DEST
    /// is an existing directory, each SOURCE moves into DEST under its own
    /// name. (Between images: `ulfs cp -a`, then `ulfs rm -r`.)
    #[command(
        override_usage = "ulfs mv [-n] IMAGE SOURCE... DEST",
        after_help = "Example:\n  ulfs mv disk.img /inbox/report.pdf /archive/2024/"
    )]
    Mv {
        /// Image file
        image: PathBuf,
        /// SOURCE... DEST, inside the image
        #[arg(required = true, num_args = 2.., value_name = "PATH")]
        paths: Vec<OsString>,
        /// Never replace an existing DEST (skip that SOURCE)
        #[arg(short, long)]
        no_clobber: bool,
    },
    /// Make hard links (or with -s, symbolic links) inside the image, as ln(1)
    ///
    /// TARGET... LINK: when LINK is an existing directory each link is
    /// made in it under its TARGET's name. A symlink's TARGET is stored
    /// as given (relative to the link's directory when used).
    #[command(
        override_usage = "ulfs ln [-s] [-f] IMAGE TARGET... LINK",
        after_help = "Example:\n  ulfs ln -s disk.img ../lib/libfoo.so.1 /usr/lib/libfoo.so"
    )]
    Ln {
        /// Image file
        image: PathBuf,
        /// TARGET... LINK, inside the image
        #[arg(required = true, num_args = 2.., value_name = "PATH")]
        paths: Vec<OsString>,
        /// Make symbolic links instead of hard links
        #[arg(short, long)]
        symbolic: bool,
        /// Replace an existing LINK (not a directory)
        #[arg(short, long)]
        force: bool,
    },
    /// Change permission bits of files in the image, as chmod(1)
    ///
    /// MODE is octal (755, 4755) or symbolic (u+x, go-w, a=rX, g=u, +t,
    /// comma-separated), with chmod(1)'s meaning; a clause without u, g, o
    /// or a leaves the umask's bits alone. A symlink operand is followed;
    /// with -R symlinks inside the tree are left alone.
    #[command(after_help = "Example:\n  ulfs chmod disk.img u+x,go-w /usr/local/bin/tool")]
    Chmod {
        /// Image file
        image: PathBuf,
        /// Octal or symbolic mode
        #[arg(allow_hyphen_values = true)]
        mode: String,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Change everything below directories too
        #[arg(short = 'R', long)]
        recursive: bool,
    },
    /// Change the owner and group of files in the image, as chown(1)
    ///
    /// OWNER is UID, UID:GID or :GID, in numbers: an image's owners need
    /// not exist on this host, so names are not looked up. A symlink
    /// operand is followed unless -h; -R never follows symlinks.
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  ulfs chown disk.img 1000:1000 /home/me -R"
    )]
    Chown {
        /// Image file
        image: PathBuf,
        /// UID, UID:GID or :GID
        owner: String,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Change a symlink itself, not the file it points to
        #[arg(short = 'h', long)]
        no_dereference: bool,
        /// Change everything below directories too
        #[arg(short = 'R', long)]
        recursive: bool,
        /// Print help
        #[arg(long, action = ArgAction::Help)]
        help: Option<bool>,
    },
    /// Create empty files, or set their access and modification times, as touch(1)
    ///
    /// Without -d, -t or -r the time is now. DATE is @SECONDS[.FRACTION],
    /// now, or YYYY-MM-DD[ HH:MM[:SS[.FRACTION]]] (a T may separate date
    /// and time; a trailing Z, UTC or +HH:MM gives the zone, else local).
    /// New files get mode 0644.
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  ulfs touch disk.img /etc/stamp -d 2024-05-01T12:00:00Z"
    )]
    Touch {
        /// Image file
        image: PathBuf,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Change only the access time
        #[arg(short = 'a')]
        access: bool,
        /// Change only the modification time
        #[arg(short = 'm')]
        modify: bool,
        /// Do not create missing files
        #[arg(short = 'c', long)]
        no_create: bool,
        /// Change a symlink itself, not the file it points to (never creates)
        #[arg(short = 'h', long)]
        no_dereference: bool,
        /// Use DATE instead of now
        #[arg(short = 'd', long, value_name = "DATE", allow_hyphen_values = true)]
        date: Option<String>,
        /// Use [[CC]YY]MMDDhhmm[.ss] (local time) instead of now
        #[arg(short = 't', value_name = "STAMP")]
        stamp: Option<String>,
        /// Use the times of REF, a file inside the image
        #[arg(short = 'r', long, value_name = "REF")]
        reference: Option<OsString>,
        /// Print help
        #[arg(long, action = ArgAction::Help)]
        help: Option<bool>,
    },
    /// Show what the image records about files (size, mode, owner, times, ...), as stat(1)
    #[command(after_help = concat!(
        "With --json: one JSON array. ",
        json::entry_fields!(),
        "\n\nExample:\n  ulfs stat disk.img /etc/passwd --json"
    ))]
    Stat {
        /// Image file
        image: PathBuf,
        /// Files inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
        /// Follow a symlink operand (show the file it points to)
        #[arg(short = 'L', long)]
        dereference: bool,
        /// Print one JSON array, an object per file (fields below)
        #[arg(long)]
        json: bool,
    },
    /// Show the space files and trees take in the image, as du(1)
    ///
    /// Each directory's total is printed after its contents, in KiB of
    /// blocks used (directories' own blocks included); a file with several
    /// hard links counts once.
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  ulfs du disk.img /home -s -h"
    )]
    Du {
        /// Image file
        image: PathBuf,
        /// Files or directories inside the image
        #[arg(default_value = "/")]
        paths: Vec<OsString>,
        /// Print files too, not only directories
        #[arg(short = 'a', long)]
        all: bool,
        /// Print only a total for each operand
        #[arg(short = 's', long, conflicts_with = "max_depth")]
        summarize: bool,
        /// Print totals only N levels below an operand
        #[arg(short = 'd', long, value_name = "N")]
        max_depth: Option<usize>,
        /// Sizes in K, M, G (powers of 1024, rounded up)
        #[arg(short = 'h', long)]
        human_readable: bool,
        /// Apparent sizes (file lengths), in bytes
        #[arg(short = 'b', long)]
        bytes: bool,
        /// Apparent sizes (file lengths) instead of blocks used
        #[arg(long)]
        apparent_size: bool,
        /// Print a grand total last
        #[arg(short = 'c', long)]
        total: bool,
        /// Print help
        #[arg(long, action = ArgAction::Help)]
        help: Option<bool>,
    },
    /// Draw a directory of the image as a tree, as tree(1)
    #[command(after_help = "Example:\n  ulfs tree disk.img /etc -L 2")]
    Tree {
        /// Image file
        image: PathBuf,
        /// Directory inside the image
        #[arg(default_value = "/")]
        path: OsString,
        /// Descend at most LEVEL directories
        #[arg(short = 'L', long, value_name = "LEVEL", value_parser = clap::value_parser!(u64).range(1..))]
        level: Option<u64>,
        /// Directories only
        #[arg(short = 'd', long)]
        dirs_only: bool,
    },
    /// Run an unmodified program with the image's files under a prefix
    ///
    /// Paths under the prefix (default /ulfs) are served from the image
    /// inside the program's own process (LD_PRELOAD of libulfs_preload.so);
    /// everything else goes to the kernel unchanged. The exit status and
    /// signals are the program's. The image is committed when the program
    /// exits; one left by a kill is replayed at the next mount. Programs it
    /// starts run on the image too, one process writing it at a time.
    /// With --server, the image is the one `ulfs serve` owns, and any
    /// number of programs use it at once. What is covered: docs/RUN.md.
    #[command(
        after_help = "Example:\n  ulfs run disk.img -- python3 -c 'print(open(\"/ulfs/etc/hostname\").read())'\n  ulfs run --server /tmp/ulfs.sock -- sqlite3 /ulfs/app.db"
    )]
    Run {
        /// Image file (not with --server)
        #[arg(required_unless_present = "server")]
        image: Option<PathBuf>,
        /// Use the image `ulfs serve` serves at this socket instead of an
        /// image file: several programs share it at once, each judged by
        /// its own user's permissions
        #[arg(long, value_name = "SOCKET")]
        server: Option<PathBuf>,
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
        // Not `required`: clap allows no required positional after the
        // optional IMAGE; an empty command is refused below.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
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
    #[command(after_help = "Example:\n  ulfs mount disk.img /mnt/disk -o ro")]
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
    /// Serve the image to many programs at once, over shared memory
    ///
    /// One process owns the image; programs connect to SOCKET (the Rust
    /// client `ulfs_client::Client`, the C API's `ulfs_connect`) and each
    /// gets a private channel. The server takes each client's user and
    /// groups from the kernel and judges every call by them, as Linux
    /// would. Returns once the server listens, unless --foreground;
    /// SIGTERM stops it, committing the journal and marking the image
    /// clean. docs/SERVE.md.
    #[command(after_help = "Example:\n  ulfs serve disk.img --socket /run/disk.sock")]
    Serve {
        /// Image file
        image: PathBuf,
        /// Where clients connect (a UNIX socket made here)
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Threads serving clients (default: half the cores, at least one)
        #[arg(long, value_name = "N")]
        workers: Option<usize>,
        /// Serve the image read-only (every change is EROFS)
        #[arg(long)]
        ro: bool,
        /// Permission bits of the socket file: who may connect
        #[arg(long, value_name = "OCTAL", default_value = "666", value_parser = parse_octal)]
        socket_mode: u32,
        /// Microseconds a worker keeps polling a quiet client before it
        /// lets it sleep (0: never spin)
        #[arg(long, value_name = "US", default_value_t = 20)]
        spin_us: u64,
        /// Offer clients no view of the image: every read is a request
        /// (by default a client that may read the image file reads files
        /// nobody is changing straight from its own mapping of it)
        #[arg(long)]
        no_direct_reads: bool,
        /// Serve in this process, in the foreground
        #[arg(short = 'f', long)]
        foreground: bool,
    },
    /// Unmount what `ulfs mount` mounted, and wait until the image is free
    ///
    /// `fusermount3 -u DIR`, then waits (up to 60 s) until the server has
    /// committed the journal, marked the image clean and let go of it, so
    /// the image can be used as soon as this returns. Refused (busy) while
    /// files are open there, unless --lazy.
    #[command(after_help = "Example:\n  ulfs umount /mnt/disk")]
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
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  ulfs bench --quick --out /tmp/bench"
    )]
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
    #[command(after_help = "Example:\n  ulfs fsck disk.img --repair")]
    Fsck {
        /// Image file
        image: PathBuf,
        /// Repair what can be repaired, in place
        #[arg(long, short = 'y')]
        repair: bool,
    },
    /// Grow or shrink an image (offline), as resize2fs does
    ///
    /// Growing makes a regular image file larger first (a block device
    /// must already be as large); shrinking works when nothing is stored
    /// past the new size, and cuts the file after. The size changes in one
    /// journal transaction: a crash leaves the old size or the new one.
    /// The image is checked first (as `ulfs fsck`) unless --force.
    #[command(after_help = "Example:\n  ulfs resize disk.img 1G")]
    Resize {
        /// Image file (or block device), not in use
        image: PathBuf,
        /// New size: bytes, or with a K/M/G/T suffix (rounded down to 4 KiB)
        #[arg(allow_hyphen_values = true)]
        size: String,
        /// Resize without checking the image first
        #[arg(long)]
        force: bool,
    },
    /// Make an ulfs image holding the files of an original ULFS (v1) image
    ///
    /// Every directory and file is copied (v1 keeps no modes, owners or
    /// times: directories get 0755, files 0644, owner root, and every time
    /// is the v1 image's modification time). The v1 image is only read;
    /// a damaged one is refused with what is wrong. Other commands read
    /// v1 images directly, read-only.
    #[command(after_help = "Example:\n  ulfs convert old-ulfs.img disk.img")]
    Convert {
        /// The original ULFS image
        v1_image: PathBuf,
        /// The ulfs image to make
        image: PathBuf,
        /// Size of the new image (default: what the files need, with room)
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
        /// Replace an existing image file
        #[arg(long)]
        force: bool,
        /// Durability mode of the new image
        #[arg(long, value_enum, default_value_t = mkfs::ModeArg::Journal)]
        mode: mkfs::ModeArg,
    },
    /// Look inside an image, as debugfs does (read-only)
    ///
    /// One request from the command line, or none to read requests from
    /// stdin, one a line (`help` lists them): superblock, block N [--disk]
    /// [--no-hex], inode PATH|INO, tree PATH|INO, map PATH|INO, journal,
    /// owner N. Works on images that will not mount (from the raw blocks)
    /// and never writes the image.
    #[command(after_help = concat!(
        "Requests:\n",
        debug::requests!(),
        "\n\nExample:\n  ulfs debug disk.img map /var/log/syslog"
    ))]
    Debug {
        /// Image file (or block device)
        image: PathBuf,
        /// Show every entry, run and record (default: the first 16 of each node or list)
        #[arg(long)]
        all: bool,
        /// The request and its arguments (none: read requests from stdin)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        request: Vec<String>,
    },
    /// Write the man pages (one per command) into a directory
    #[command(hide = true)]
    GenerateMan {
        /// Directory for ulfs.1, ulfs-mkfs.1, ...
        dir: PathBuf,
    },
    /// Write a shell's completion script into a directory
    #[command(hide = true)]
    GenerateCompletions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
        /// Directory for the script
        dir: PathBuf,
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
        Command::Info { image, json } => info::run(&image, json),
        Command::Ls {
            image,
            path,
            tree: true,
            ..
        } => tree::run(
            &image,
            &imgpath::from_arg(&path),
            &tree::Options {
                level: None,
                dirs_only: false,
            },
        ),
        Command::Ls {
            image,
            path,
            long,
            recursive,
            json,
            tree: false,
        } => ls::run(
            &image,
            &imgpath::from_arg(&path),
            &ls::Options {
                long,
                recursive,
                json,
            },
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
        Command::Cp {
            recursive,
            archive,
            operands,
        } => cp::run(&operands, recursive, archive),
        Command::Mv {
            image,
            paths,
            no_clobber,
        } => mv::run(&image, &bytes(&paths), no_clobber),
        Command::Ln {
            image,
            paths,
            symbolic,
            force,
        } => ln::run(&image, &bytes(&paths), &ln::Options { symbolic, force }),
        Command::Chmod {
            image,
            mode,
            paths,
            recursive,
        } => chmod::run(&image, &mode, &bytes(&paths), recursive),
        Command::Chown {
            image,
            owner,
            paths,
            no_dereference,
            recursive,
            help: _,
        } => chown::run(
            &image,
            &owner,
            &bytes(&paths),
            &chown::Options {
                no_dereference,
                recursive,
            },
        ),
        Command::Touch {
            image,
            paths,
            access,
            modify,
            no_create,
            no_dereference,
            date,
            stamp,
            reference,
            help: _,
        } => touch::run(
            &image,
            &bytes(&paths),
            &touch::Options {
                no_create,
                access_only: access,
                modify_only: modify,
                no_dereference,
                date,
                stamp,
                reference: reference.as_deref().map(imgpath::from_arg),
            },
        ),
        Command::Stat {
            image,
            paths,
            dereference,
            json,
        } => stat::run(&image, &bytes(&paths), &stat::Options { dereference, json }),
        Command::Du {
            image,
            paths,
            all,
            summarize,
            max_depth,
            human_readable,
            bytes: in_bytes,
            apparent_size,
            total,
            help: _,
        } => du::run(
            &image,
            &bytes(&paths),
            &du::Options {
                all,
                summarize,
                max_depth,
                human: human_readable,
                bytes: in_bytes,
                apparent: apparent_size,
                total,
            },
        ),
        Command::Tree {
            image,
            path,
            level,
            dirs_only,
        } => tree::run(
            &image,
            &imgpath::from_arg(&path),
            &tree::Options {
                level: level.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
                dirs_only,
            },
        ),
        Command::Fsck { image, repair } => fsck::run(&image, repair),
        Command::Resize { image, size, force } => {
            let size = size::parse_size(&size)
                .map_err(|msg| CliError::new("resize", msg).with_code(EXIT_USAGE))?;
            resize::run(&resize::Args {
                image: &image,
                size,
                force,
            })
        }
        Command::Convert {
            v1_image,
            image,
            size,
            force,
            mode,
        } => {
            let size = size
                .as_deref()
                .map(|s| {
                    size::parse_size(s)
                        .map_err(|msg| CliError::new("convert", msg).with_code(EXIT_USAGE))
                })
                .transpose()?
                .unwrap_or(0);
            convert::run(&convert::Args {
                v1: &v1_image,
                image: &image,
                size,
                force,
                mode,
            })
        }
        Command::Debug {
            image,
            all,
            request,
        } => debug::run(&image, all, &request),
        Command::GenerateMan { dir } => generate::man_pages(Cli::command(), &dir),
        Command::GenerateCompletions { shell, dir } => {
            generate::completions(Cli::command(), shell, &dir)
        }
        Command::Umount { mountpoint, lazy } => mount::umount(&mountpoint, lazy),
        Command::Serve {
            image,
            socket,
            workers,
            ro,
            socket_mode,
            spin_us,
            no_direct_reads,
            foreground,
        } => serve::run(&serve::Args {
            image: &image,
            socket: &socket,
            workers,
            read_only: ro,
            socket_mode,
            spin_us,
            direct_reads: !no_direct_reads,
            foreground,
        }),
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
            server,
            at,
            ro,
            sandbox,
            allow_read,
            allow_net,
            memory_budget,
            command,
        } => {
            // With --server the first word is the program's when there is
            // no `--` (`ulfs run --server S ls -l`).
            let mut command = command;
            let image = match (&server, image) {
                (Some(_), Some(first)) => {
                    // A file that cannot be run is no program: most likely
                    // an image given as well, which the server's replaces.
                    use std::os::unix::fs::PermissionsExt;
                    if std::fs::metadata(&first)
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 == 0)
                    {
                        return Err(CliError::new(
                            "run",
                            format!(
                                "{}: not a program; with --server the image is the server's \
                                 (ulfs run --server SOCKET -- PROGRAM [ARGS...])",
                                first.display()
                            ),
                        )
                        .with_code(EXIT_USAGE));
                    }
                    command.insert(0, first.into_os_string());
                    None
                }
                (_, image) => image,
            };
            if command.is_empty() {
                return Err(CliError::new(
                    "run",
                    "no program given (ulfs run IMAGE -- PROGRAM [ARGS...])",
                )
                .with_code(EXIT_USAGE));
            }
            let source = match (&server, &image) {
                (Some(s), _) => run::Source::Server(s),
                (None, Some(i)) => run::Source::Image(i),
                (None, None) => unreachable!("clap requires one"),
            };
            run::run(&run::Args {
                source,
                at: &at,
                read_only: ro,
                sandbox,
                allow_read: &allow_read,
                allow_net,
                memory_budget: memory_budget.as_deref(),
                program: &command[0],
                args: &command[1..],
            })
        }
    }
}

/// An octal permission value (`--socket-mode 660`).
fn parse_octal(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s, 8) {
        Ok(v) if v <= 0o7777 => Ok(v),
        _ => Err(format!("'{s}' is not an octal mode (like 660)")),
    }
}

#[cfg(test)]
mod tests {
    /// clap checks the definition only in debug builds, and only for the
    /// command line being parsed: every subcommand is checked here at once
    /// (a release binary would have run a definition a debug one panics on).
    #[test]
    fn the_command_line_definition_is_valid() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}

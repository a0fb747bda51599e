//! The systems a run compares (BENCHMARKS.md's peers), by their names in
//! `results.csv`, and how a worker for each is started: on which
//! directory or image, in which process, under which command.

use crate::cgroup::Cgroup;
use crate::worker::{MKFS_ARG, WORKER_ARG, Worker};
use std::path::{Path, PathBuf};
use std::process::Command;
use ulfs::{MkfsOptions, Mode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    HostTmpfs,
    HostExt4,
    UlfsJournal,
    /// ulfs-journal with its memory budget turned off: the host's page
    /// cache alone decides what stays (fig. 9's other curve).
    UlfsJournalNoBudget,
    UlfsNone,
    /// The POSIX workload under `ulfs run` on a journaled image.
    UlfsPreload,
    /// The same on an image without a journal.
    UlfsPreloadNone,
    /// `ulfs run` on a journaled image on the ext4 disk, whatever the
    /// experiment's medium: the fair partner of host-ext4.
    UlfsPreloadExt4,
    /// The POSIX workload in a `ulfs mount` of a journaled image.
    UlfsFuse,
    /// The same mounted with `-o writeback_cache`: the kernel gathers
    /// writes in its page cache and sends them in large pieces.
    UlfsFuseWriteback,
    /// The C-API workload connected (`ulfs_connect`) to a `ulfs serve` of a
    /// journaled image, a process of its own started by the worker.
    UlfsServer,
    Memcpy,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::HostTmpfs => "host-tmpfs",
            System::HostExt4 => "host-ext4",
            System::UlfsJournal => "ulfs-journal",
            System::UlfsJournalNoBudget => "ulfs-journal-no-budget",
            System::UlfsNone => "ulfs-none",
            System::UlfsPreload => "ulfs-preload",
            System::UlfsPreloadNone => "ulfs-preload-none",
            System::UlfsPreloadExt4 => "ulfs-preload-ext4",
            System::UlfsFuse => "ulfs-fuse",
            System::UlfsFuseWriteback => "ulfs-fuse-writeback",
            System::UlfsServer => "ulfs-server",
            System::Memcpy => "memcpy",
        }
    }

    fn image_mode(self) -> Option<Mode> {
        match self {
            System::UlfsJournal
            | System::UlfsJournalNoBudget
            | System::UlfsPreload
            | System::UlfsPreloadExt4
            | System::UlfsFuse
            | System::UlfsFuseWriteback
            | System::UlfsServer => Some(Mode::Journal),
            System::UlfsNone | System::UlfsPreloadNone => Some(Mode::None),
            _ => None,
        }
    }

    /// Served through `ulfs mount`.
    pub fn is_fuse(self) -> bool {
        matches!(self, System::UlfsFuse | System::UlfsFuseWriteback)
    }
}

/// Why ulfs-fuse does not run whole programs (yet).
const FUSE_MISSING: &str = "missing: whole programs through `ulfs mount` are not measured yet";

/// Where an experiment's files live: memory (`/dev/shm`, against
/// host-tmpfs) or the disk (ext4, for the durable experiments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Medium {
    Memory,
    Disk,
}

/// The programs workers are started from.
#[derive(Clone)]
pub struct Tools {
    /// This binary (`ulfs-bench`), which is also the worker.
    pub me: PathBuf,
    /// The `ulfs` binary, for `ulfs run`; or why there is none.
    pub ulfs: Result<PathBuf, String>,
}

impl Tools {
    pub fn find() -> Result<Tools, String> {
        let me = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
        let sibling = me.with_file_name("ulfs");
        let ulfs = if sibling.is_file() {
            Ok(sibling)
        } else {
            Err(format!(
                "missing: the `ulfs` binary next to {} (build the workspace: cargo build --release)",
                me.display()
            ))
        };
        Ok(Tools { me, ulfs })
    }
}

/// Everything a worker needs to be started somewhere.
pub struct Place {
    pub tools: Tools,
    /// The experiment's own directory in memory (`/dev/shm`), or why
    /// there is none.
    pub memory: Result<PathBuf, String>,
    /// Its own directory on the ext4 disk, or why there is none.
    pub disk: Result<PathBuf, String>,
    /// Where the ulfs systems' images go (host-tmpfs is always in memory,
    /// host-ext4 always on the disk).
    pub medium: Medium,
    /// Size of an image made for a ulfs system (mkfs reserves all of it:
    /// on tmpfs, that much memory).
    pub image_bytes: u64,
}

impl Place {
    /// The directory a system's files or image go in.
    pub fn home(&self, system: System) -> Result<&Path, String> {
        let on = match system {
            System::HostTmpfs | System::Memcpy => Medium::Memory,
            System::HostExt4 | System::UlfsPreloadExt4 => Medium::Disk,
            _ => self.medium,
        };
        let dir = match on {
            Medium::Memory => &self.memory,
            Medium::Disk => &self.disk,
        };
        dir.as_deref().map_err(Clone::clone)
    }

    /// The image a ulfs system's workers use.
    pub fn image_path(&self, system: System) -> Result<PathBuf, String> {
        Ok(self.home(system)?.join(format!("{}.img", system.name())))
    }

    /// Makes the system's directory or a new image for it and starts a
    /// worker on it. `Err` is the reason the system is skipped.
    pub fn start(&self, system: System) -> Result<Worker, String> {
        self.prepare(system)?;
        self.start_again(system)
    }

    /// A new image for a ulfs system (nothing for a host system, whose
    /// workloads leave their directory as they found it).
    pub fn prepare(&self, system: System) -> Result<(), String> {
        if system.image_mode().is_some() {
            self.make_image(system)?;
        }
        Ok(())
    }

    /// Starts a worker on what an earlier [`Place::start`] made (its
    /// directory, or its image as left).
    pub fn start_again(&self, system: System) -> Result<Worker, String> {
        Worker::start(self.command(system)?, system.name())
    }

    /// Like [`Place::start_again`], the worker mounting the image
    /// read-only (a sparse image larger than the host's free space mounts
    /// no other way) and working in its root.
    pub fn start_read_only(&self, system: System) -> Result<Worker, String> {
        let mut cmd = self.command(system)?;
        cmd.env(READ_ONLY_ENV, "1");
        Worker::start(cmd, system.name())
    }

    /// A new sparse image of `bytes` for a ulfs system: mkfs writes its
    /// metadata only, so the image may be larger than the host's free
    /// space (mount it with [`Place::start_read_only`]).
    pub fn make_sparse_image(&self, system: System, bytes: u64) -> Result<(), String> {
        let mode = system.image_mode().ok_or("not a ulfs system")?;
        let image = self.image_path(system)?;
        remove_image(&image)?;
        let opts = MkfsOptions {
            size: bytes,
            mode,
            force: true,
            sparse: true,
            ..MkfsOptions::default()
        };
        ulfs::mkfs(&image, &opts).map_err(|e| format!("mkfs {}: {e}", image.display()))
    }

    /// Removes the image of a ulfs system.
    pub fn remove_image(&self, system: System) -> Result<(), String> {
        remove_image(&self.image_path(system)?)
    }

    /// Like [`Place::start_again`], the worker inside `group` from its
    /// first instruction.
    pub fn start_in(&self, system: System, group: &Cgroup) -> Result<Worker, String> {
        Worker::start(group.wrap(&self.command(system)?), system.name())
    }

    fn command(&self, system: System) -> Result<Command, String> {
        let name = system.name();
        let home = self.home(system)?;
        let mut cmd = match system {
            System::HostTmpfs | System::HostExt4 | System::Memcpy => {
                self.worker("posix", &home.join(name))
            }
            System::UlfsJournal | System::UlfsNone => {
                self.worker("ulfs", &self.image_path(system)?)
            }
            System::UlfsJournalNoBudget => {
                let mut c = self.worker("ulfs", &self.image_path(system)?);
                c.env(NO_BUDGET_ENV, "1");
                c
            }
            System::UlfsPreload | System::UlfsPreloadNone | System::UlfsPreloadExt4 => {
                let mut c = self.under_ulfs_run(system, &self.tools.me)?;
                c.args([WORKER_ARG, "posix", "/ulfs/w"]);
                c
            }
            System::UlfsFuse | System::UlfsFuseWriteback => {
                let ulfs = self.tools.ulfs.as_ref().map_err(Clone::clone)?;
                let mut c = self.worker("fuse", &self.image_path(system)?);
                c.env(crate::fuse_worker::ULFS_ENV, ulfs);
                if system == System::UlfsFuseWriteback {
                    c.env(crate::fuse_worker::OPTIONS_ENV, "writeback_cache");
                }
                c
            }
            System::UlfsServer => {
                let ulfs = self.tools.ulfs.as_ref().map_err(Clone::clone)?;
                let mut c = self.worker("server", &self.image_path(system)?);
                c.env(crate::fuse_worker::ULFS_ENV, ulfs);
                c
            }
        };
        // Only the system under test may be preloaded into a worker.
        cmd.env_remove("LD_PRELOAD");
        Ok(cmd)
    }

    /// A command running `program` on the system (ulfs-preload: under
    /// `ulfs run` on its image, made first) and the directory it is to
    /// work in. Host systems and ulfs-preload only: the ulfs API systems
    /// cannot serve another program's calls.
    pub fn program(&self, system: System, program: &Path) -> Result<(Command, PathBuf), String> {
        if matches!(
            system,
            System::UlfsPreload | System::UlfsPreloadNone | System::UlfsPreloadExt4
        ) {
            self.prepare(system)?;
        }
        self.program_again(system, program)
    }

    /// Like [`Place::program`], on what an earlier call left (ulfs-preload:
    /// its image as the last program left it), to look at it.
    pub fn program_again(
        &self,
        system: System,
        program: &Path,
    ) -> Result<(Command, PathBuf), String> {
        match system {
            System::HostTmpfs | System::HostExt4 => {
                let dir = self.home(system)?.join(system.name());
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                Ok((Command::new(program), dir))
            }
            System::UlfsPreload | System::UlfsPreloadNone | System::UlfsPreloadExt4 => Ok((
                self.under_ulfs_run(system, program)?,
                PathBuf::from("/ulfs"),
            )),
            System::UlfsFuse | System::UlfsFuseWriteback => Err(FUSE_MISSING.into()),
            System::UlfsServer => {
                Err("ulfs-server runs programs on a server: Place::served".into())
            }
            _ => Err(format!("{} cannot run another program", system.name())),
        }
    }

    /// A new image for a FUSE system, mounted by its worker (which holds
    /// the mount until it finishes), and the directory in the mount that
    /// other programs are to work in: how a whole program (tar) runs
    /// through `ulfs mount`. Returns once the mount is up.
    pub fn mounted(&self, system: System) -> Result<(Worker, PathBuf), String> {
        if !system.is_fuse() {
            return Err(format!(
                "{} is not served through ulfs mount",
                system.name()
            ));
        }
        let image = self.image_path(system)?;
        let mut worker = self.start(system)?;
        // The worker answers once it has mounted and entered the mount.
        worker.ask("status")?;
        Ok((worker, crate::fuse_worker::work_dir(&image)))
    }

    /// A new image for ulfs-server, served by an `ulfs serve` the caller
    /// stops ([`Served::finish`], which checks the image after). Programs
    /// run on it with [`Place::through_server`], in `/ulfs`.
    pub fn served(&self, system: System) -> Result<crate::server_worker::Served, String> {
        if system != System::UlfsServer {
            return Err(format!("{} is not served by ulfs serve", system.name()));
        }
        self.prepare(system)?;
        let ulfs = self.tools.ulfs.as_ref().map_err(Clone::clone)?;
        crate::server_worker::Served::start(ulfs, &self.image_path(system)?)
    }

    /// `ulfs run --server SOCKET --at /ulfs -- program`, arguments to
    /// follow.
    pub fn through_server(&self, socket: &Path, program: &Path) -> Result<Command, String> {
        let ulfs = self.tools.ulfs.as_ref().map_err(Clone::clone)?;
        let mut c = Command::new(ulfs);
        c.arg("run")
            .arg("--server")
            .arg(socket)
            .args(["--at", "/ulfs", "--"])
            .arg(program);
        Ok(c)
    }

    /// `ulfs run IMAGE --at /ulfs -- program`, arguments to follow.
    fn under_ulfs_run(&self, system: System, program: &Path) -> Result<Command, String> {
        let ulfs = self.tools.ulfs.as_ref().map_err(Clone::clone)?;
        let mut c = Command::new(ulfs);
        c.arg("run")
            .arg(self.image_path(system)?)
            .args(["--at", "/ulfs", "--"])
            .arg(program);
        Ok(c)
    }

    fn worker(&self, kind: &str, at: &Path) -> Command {
        let mut c = Command::new(&self.tools.me);
        c.arg(WORKER_ARG).arg(kind).arg(at);
        c
    }

    /// Like [`Place::prepare`], with the image made by a process inside
    /// `group` (this program's hidden `mkfs`): mkfs reserves the image's
    /// whole size (on tmpfs, memory), and that memory is the system's to
    /// be charged for.
    pub fn prepare_in(&self, system: System, group: &Cgroup) -> Result<(), String> {
        if system.is_fuse() {
            return Err("missing: the memory of `ulfs mount`'s server is not measured yet".into());
        }
        if system == System::UlfsServer {
            return Err("missing: the memory of `ulfs serve` is not measured yet".into());
        }
        let Some(mode) = system.image_mode() else {
            return Ok(());
        };
        let image = self.image_path(system)?;
        remove_image(&image)?;
        let mut mkfs = Command::new(&self.tools.me);
        mkfs.arg(MKFS_ARG)
            .arg(&image)
            .arg(self.image_bytes.to_string())
            .arg(if mode == Mode::None {
                "none"
            } else {
                "journal"
            });
        let out = group
            .wrap(&mkfs)
            .output()
            .map_err(|e| format!("mkfs: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "mkfs {}: {}",
                image.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Writes the system's image to its medium and drops it from the page
    /// cache, so the next process to use it is charged for what it reads
    /// (a page stays charged to whoever touched it first).
    pub fn evict(&self, system: System) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        if system.image_mode().is_none() {
            return Ok(());
        }
        let image = self.image_path(system)?;
        let f = std::fs::File::open(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        f.sync_all()
            .map_err(|e| format!("{}: {e}", image.display()))?;
        // SAFETY: a valid descriptor of an open file; no memory is passed.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "{}: posix_fadvise: {}",
                image.display(),
                std::io::Error::from_raw_os_error(rc)
            ))
        }
    }

    fn make_image(&self, system: System) -> Result<(), String> {
        let mode = system.image_mode().ok_or("not a ulfs system")?;
        let image = self.image_path(system)?;
        remove_image(&image)?;
        let opts = MkfsOptions {
            size: self.image_bytes,
            mode,
            force: true,
            ..MkfsOptions::default()
        };
        ulfs::mkfs(&image, &opts).map_err(|e| format!("mkfs {}: {e}", image.display()))
    }
}

/// Set for a ulfs worker that is to mount its image read-only
/// (c/workload.c reads it).
const READ_ONLY_ENV: &str = "ULFS_BENCH_READ_ONLY";
/// Tells a ulfs worker to turn its memory budget off after mounting
/// (`ulfs_set_memory_budget(fs, 0)`).
const NO_BUDGET_ENV: &str = "ULFS_BENCH_NO_BUDGET";

/// Removed, not overwritten: the old image's memory must go (on tmpfs a
/// reused page stays charged to whoever touched it first).
fn remove_image(image: &Path) -> Result<(), String> {
    match std::fs::remove_file(image) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", image.display()))
        }
        _ => Ok(()),
    }
}

impl Drop for Place {
    /// An experiment's files go with it: a million-file image is not
    /// left in memory for the next experiment to pay for.
    fn drop(&mut self) {
        for d in [&self.memory, &self.disk].into_iter().flatten() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

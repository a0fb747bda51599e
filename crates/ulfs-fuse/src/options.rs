//! `-o` mount options: what `ulfs mount`, `mount.ulfs` and an fstab line
//! pass, parsed once into what the adapter needs (`MountConfig`) and what
//! the kernel is told (`fuser::Config`). Unknown options are refused with
//! their name rather than passed on, so a typo is not silently ignored.

use fuser::{Config, MountOption, SessionACL};

/// A mount's options, as parsed from `-o` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountConfig {
    pub read_only: bool,
    /// `allow_other`: users other than the one who mounted may use it
    /// (with `default_permissions`, always on, the kernel checks modes).
    pub allow_other: bool,
    /// `writeback_cache`: the kernel gathers writes in its page cache.
    pub writeback_cache: bool,
    /// `uid=`/`gid=`: report every file as owned by these ids.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `umask=`: permission bits taken away from what is reported.
    pub umask: Option<u32>,
    /// Kernel flags passed on as they are (noatime, nosuid, ...).
    pub kernel: Vec<MountOption>,
    /// `threads=N`: request loops serving the mount (default: one per
    /// core, at least 2 and at most 8).
    pub threads: Option<usize>,
}

/// The most request loops `threads=` may ask for.
const MAX_THREADS: usize = 64;

impl MountConfig {
    /// Adds the options of one `-o` argument (comma-separated).
    pub fn parse_list(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            self.parse_one(opt)?;
        }
        Ok(())
    }

    fn parse_one(&mut self, opt: &str) -> Result<(), String> {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let id = |v: Option<&str>| -> Result<u32, String> {
            v.and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("mount option {name}= needs a number, got {opt:?}"))
        };
        match (name, value) {
            ("ro", None) => self.read_only = true,
            ("rw", None) => self.read_only = false,
            ("allow_other", None) => self.allow_other = true,
            // Always on: the kernel checks the modes and owners the image
            // stores. Accepted so that fstab lines written for other FUSE
            // file systems work.
            ("default_permissions", None) => {}
            ("writeback_cache", None) => self.writeback_cache = true,
            ("threads", v) => {
                let n = v
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|n| (1..=MAX_THREADS).contains(n))
                    .ok_or_else(|| {
                        format!("mount option threads= needs a number from 1 to {MAX_THREADS}, got {opt:?}")
                    })?;
                self.threads = Some(n);
            }
            ("uid", v) => self.uid = Some(id(v)?),
            ("gid", v) => self.gid = Some(id(v)?),
            ("umask", Some(v)) => {
                let m = u32::from_str_radix(v, 8)
                    .ok()
                    .filter(|m| *m <= 0o7777)
                    .ok_or_else(|| format!("mount option umask= needs an octal mode, got {v:?}"))?;
                self.umask = Some(m);
            }
            // What mount(8) and fstab lines add, that mean nothing here
            // (relatime is the kernel's default).
            (
                "auto" | "noauto" | "user" | "nouser" | "users" | "nofail" | "_netdev" | "defaults"
                | "relatime",
                None,
            ) => {}
            (flag, None) => match kernel_flag(flag) {
                Some(o) => self.kernel.push(o),
                None => return Err(format!("unknown mount option {opt:?}")),
            },
            _ => return Err(format!("unknown mount option {opt:?}")),
        }
        Ok(())
    }

    /// The flags mount(2) takes for this mount, as fuser would pass them
    /// (nosuid and nodev unless asked otherwise).
    pub fn kernel_mount(&self) -> crate::mounting::KernelMount {
        let has = |o: MountOption| self.kernel.contains(&o);
        let mut flags = 0;
        if !has(MountOption::Suid) {
            flags |= libc::MS_NOSUID;
        }
        if !has(MountOption::Dev) {
            flags |= libc::MS_NODEV;
        }
        for (o, f) in [
            (MountOption::NoExec, libc::MS_NOEXEC),
            (MountOption::NoAtime, libc::MS_NOATIME),
            (MountOption::Sync, libc::MS_SYNCHRONOUS),
            (MountOption::DirSync, libc::MS_DIRSYNC),
        ] {
            if has(o) {
                flags |= f;
            }
        }
        if self.read_only {
            flags |= libc::MS_RDONLY;
        }
        crate::mounting::KernelMount {
            flags,
            allow_other: self.allow_other,
        }
    }

    /// Whether `sync` (every change) or `dirsync` (namespace changes)
    /// asks for changes to be durable when the request returns.
    pub fn sync_writes(&self) -> bool {
        self.kernel.contains(&MountOption::Sync)
    }
    pub fn sync_dirs(&self) -> bool {
        self.sync_writes() || self.kernel.contains(&MountOption::DirSync)
    }

    /// How many request loops serve the mount: `threads=`, or one per
    /// core (at least 2, so a request waiting on the disk or on the
    /// volume's lock does not hold up the next one; at most 8).
    pub fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 8)
        })
    }

    /// Whether reads leave atime alone (`noatime`).
    pub fn no_atime(&self) -> bool {
        self.kernel.contains(&MountOption::NoAtime)
    }

    /// What fuser mounts with: the image's path as the source, `fuse.ulfs`
    /// as the type, kernel permission checks, and the flags given.
    pub fn fuser_config(&self, source: &str) -> Config {
        let mut c = Config::default();
        c.mount_options = vec![
            MountOption::FSName(source.to_owned()),
            MountOption::Subtype("ulfs".into()),
            MountOption::DefaultPermissions,
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        c.mount_options.extend(self.kernel.iter().cloned());
        if self.allow_other {
            c.acl = SessionACL::All;
        }
        c.n_threads = Some(self.threads());
        // Each loop reads its own clone of /dev/fuse's descriptor, so the
        // loops do not contend for one.
        c.clone_fd = true;
        c
    }
}

fn kernel_flag(name: &str) -> Option<MountOption> {
    Some(match name {
        "dev" => MountOption::Dev,
        "nodev" => MountOption::NoDev,
        "suid" => MountOption::Suid,
        "nosuid" => MountOption::NoSuid,
        "exec" => MountOption::Exec,
        "noexec" => MountOption::NoExec,
        "atime" => MountOption::Atime,
        "noatime" => MountOption::NoAtime,
        "dirsync" => MountOption::DirSync,
        "sync" => MountOption::Sync,
        "async" => MountOption::Async,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(list: &str) -> Result<MountConfig, String> {
        let mut c = MountConfig::default();
        c.parse_list(list).map(|()| c)
    }

    #[test]
    fn the_usual_options_parse() {
        let c = parsed("ro,allow_other,default_permissions,uid=1000,gid=100,umask=022").unwrap();
        assert!(c.read_only && c.allow_other);
        assert_eq!((c.uid, c.gid, c.umask), (Some(1000), Some(100), Some(0o22)));
        assert_eq!(
            parsed("threads=3").unwrap().fuser_config("/i").n_threads,
            Some(3)
        );
        assert!((2..=8).contains(&parsed("").unwrap().threads()));
        let c = parsed("rw,noatime,nosuid,writeback_cache,defaults,noauto").unwrap();
        assert!(!c.read_only && c.writeback_cache);
        assert_eq!(c.kernel, vec![MountOption::NoAtime, MountOption::NoSuid]);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        assert!(parsed("allow_others").unwrap_err().contains("allow_others"));
        assert!(parsed("uid=me").unwrap_err().contains("uid="));
        assert!(parsed("umask=999").unwrap_err().contains("umask="));
        assert!(parsed("umask=17777").is_err());
        assert!(parsed("ro=1").is_err());
        assert!(parsed("threads=0").unwrap_err().contains("threads="));
        assert!(parsed("threads=65").is_err());
        assert!(parsed("threads").is_err());
    }

    #[test]
    fn allow_other_opens_the_session_acl() {
        let c = parsed("allow_other").unwrap().fuser_config("/img");
        assert_eq!(c.acl, SessionACL::All);
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(
            c.mount_options
                .contains(&MountOption::FSName("/img".into()))
        );
    }
}

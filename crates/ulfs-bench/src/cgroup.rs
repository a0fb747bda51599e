//! Memory cgroups for one worker process each: to read the peak memory
//! charged to it (page cache and tmpfs pages included, which VmHWM does
//! not see) and to limit it (fig. 9). Both cgroup versions: v2 where a
//! cgroup2 hierarchy has the memory controller, else v1's memory
//! hierarchy. The group is made under the cgroup this process is in, so
//! limits above it still hold (under v2, when that group may not pass the
//! controller on, under the root instead), and removed when dropped.
//!
//! A worker joins its group before it executes anything (a `sh` that
//! writes its own pid into the group, then `exec`s the worker): memory it
//! touches while starting is charged too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

pub struct Cgroup {
    dir: PathBuf,
    version: Version,
}

/// Where a memory-controlled hierarchy is mounted, and which version.
fn hierarchy() -> Result<(PathBuf, Version), String> {
    let mounts =
        std::fs::read_to_string("/proc/mounts").map_err(|e| format!("/proc/mounts: {e}"))?;
    let mut v1 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let at = PathBuf::from(f[1]);
        if f[2] == "cgroup2" {
            let controllers =
                std::fs::read_to_string(at.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                return Ok((at, Version::V2));
            }
        } else if f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory") {
            v1 = Some(at);
        }
    }
    v1.map(|at| (at, Version::V1))
        .ok_or_else(|| "skipped: no cgroup memory controller on this machine".to_string())
}

/// A group of this run's under `base` whose children get the memory
/// controller (v2 allows processes only in leaves, and controllers only
/// where the parent passes them on).
fn v2_parent(base: &Path) -> Result<PathBuf, String> {
    let ours = base.join(format!("{}groups", crate::host::own_prefix()));
    let fresh = !ours.is_dir();
    if fresh {
        let _ = write(&base.join("cgroup.subtree_control"), "+memory");
        std::fs::create_dir(&ours).map_err(|e| format!("{}: {e}", ours.display()))?;
    }
    let ready = write(&ours.join("cgroup.subtree_control"), "+memory").and_then(|()| {
        let c = std::fs::read_to_string(ours.join("cgroup.controllers")).unwrap_or_default();
        if c.split_whitespace().any(|c| c == "memory") {
            Ok(())
        } else {
            Err(format!("{}: no memory controller", ours.display()))
        }
    });
    if ready.is_err() && fresh {
        let _ = std::fs::remove_dir(&ours);
    }
    ready.map(|()| ours)
}

/// This process's own group in that hierarchy (from /proc/self/cgroup).
fn own_group(root: &Path, version: Version) -> PathBuf {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let rel = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctl, path) = (f.next()?, f.next()?, f.next()?);
        let mine = match version {
            Version::V2 => id == "0" && ctl.is_empty(),
            Version::V1 => ctl.split(',').any(|c| c == "memory"),
        };
        mine.then(|| path.trim_start_matches('/').to_string())
    });
    let dir = root.join(rel.unwrap_or_default());
    if dir.is_dir() {
        dir
    } else {
        root.to_path_buf()
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.trim()
        .parse()
        .map_err(|_| format!("{}: not a number: {}", path.display(), s.trim()))
}

impl Cgroup {
    /// A new, empty group, limited to `limit` bytes (no swap) if given.
    pub fn new(limit: Option<u64>) -> Result<Cgroup, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let (root, version) = hierarchy()?;
        let mut parent = own_group(&root, version);
        if version == Version::V2 {
            // Our own group may hold processes, and v2 then refuses it
            // controllers for its children: the root is the other choice.
            let mut why = String::new();
            let mut made = None;
            for base in [parent.clone(), root.clone()] {
                match v2_parent(&base) {
                    Ok(p) => {
                        made = Some(p);
                        break;
                    }
                    Err(e) => why = e,
                }
            }
            parent = made.ok_or_else(|| {
                format!("skipped: no usable cgroup memory controller (cgroup v2: {why})")
            })?;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{}{n}", crate::host::own_prefix()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = Cgroup { dir, version };
        if let Some(bytes) = limit {
            match version {
                Version::V2 => {
                    write(&cg.dir.join("memory.max"), &bytes.to_string())?;
                    let _ = write(&cg.dir.join("memory.swap.max"), "0");
                }
                Version::V1 => {
                    write(&cg.dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    let memsw = cg.dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &bytes.to_string())?;
                    }
                }
            }
        }
        Ok(cg)
    }

    /// `cmd` made to join this group before it starts.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut w = Command::new("sh");
        w.arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => w.env(k, v),
                None => w.env_remove(k),
            };
        }
        w
    }

    /// The most memory charged to the group since it was made, in bytes.
    pub fn peak(&self) -> Result<u64, String> {
        match self.version {
            Version::V2 => {
                let peak = self.dir.join("memory.peak");
                if !peak.exists() {
                    return Err("missing: memory.peak (Linux 5.19 or later)".into());
                }
                read_u64(&peak)
            }
            Version::V1 => read_u64(&self.dir.join("memory.max_usage_in_bytes")),
        }
    }

    /// Whether the kernel's OOM killer killed a process of the group.
    pub fn oom_killed(&self) -> bool {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .any(|l| l.strip_prefix("oom_kill ").is_some_and(|n| n.trim() != "0"))
    }
}

/// Removes the groups of runs that were killed (their processes have
/// exited: a worker ends when its run's pipe closes). Returns what was
/// removed.
pub fn remove_leftovers() -> Vec<String> {
    let Ok((root, version)) = hierarchy() else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    let mut bases = vec![own_group(&root, version)];
    if bases[0] != root {
        bases.push(root);
    }
    let entries = bases
        .iter()
        .filter_map(|b| std::fs::read_dir(b).ok())
        .flat_map(|d| d.flatten());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if crate::host::pid_in(&name).is_none_or(crate::host::alive) {
            continue;
        }
        // v2 keeps the groups inside one of the run's own.
        if let Ok(inner) = std::fs::read_dir(e.path()) {
            for g in inner.flatten().filter(|g| g.path().is_dir()) {
                let _ = std::fs::remove_dir(g.path());
            }
        }
        if std::fs::remove_dir(e.path()).is_ok() {
            removed.push(e.path().display().to_string());
        }
    }
    removed
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have exited (workers are finished or killed
        // first); an empty group can be removed.
        let _ = std::fs::remove_dir(&self.dir);
        if self.version == Version::V2
            && let Some(parent) = self.dir.parent()
        {
            // Fails while sibling groups remain, which is fine.
            let _ = std::fs::remove_dir(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where cgroups can be made (root, a memory controller), a process
    /// started in one is charged there and a limit holds it; elsewhere
    /// the error says why.
    #[test]
    fn a_process_in_a_limited_group_is_charged_and_held() {
        let cg = match Cgroup::new(Some(64 << 20)) {
            Ok(cg) => cg,
            Err(e) => {
                assert!(!e.is_empty());
                eprintln!("no cgroup here: {e}");
                return;
            }
        };
        // 8 MiB of anonymous memory touched inside the group.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "head -c 8388608 /dev/zero | tail -c 1 > /dev/null"]);
        let st = cg.wrap(&cmd).status().unwrap();
        assert!(st.success());
        let peak = cg.peak().unwrap();
        assert!(peak > 0, "nothing charged");
        assert!(!cg.oom_killed());
        // A 64 MiB buffer cannot live under a 64 MiB limit with no swap.
        let mut big = Command::new("python3");
        big.args(["-c", "b = bytearray(96 << 20); print(len(b))"]);
        if let Ok(st) = cg.wrap(&big).status() {
            assert!(!st.success(), "96 MiB fit under a 64 MiB limit");
            assert!(cg.oom_killed());
        }
    }
}

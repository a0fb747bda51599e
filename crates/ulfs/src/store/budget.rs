//! The memory budget: how many bytes of the image's file data a process
//! keeps mapped in (store/residency.rs is what keeps to it), as the caller
//! asked for it or as the memory cgroup the process runs in allows.
//!
//! Detection reads the cgroup files the kernel exports and nothing else:
//! the process's group (/proc/self/cgroup) under where its hierarchy is
//! mounted (/sys/fs/cgroup, else as /proc/self/mountinfo says). cgroup v2:
//! the lowest `memory.max` or `memory.high` of the group and its
//! ancestors; v1 (a hierarchy with the memory controller): the lowest
//! `memory.limit_in_bytes`. The budget is half of what the limit leaves
//! free (usage less the group's inactive file pages, which the kernel
//! reclaims first) when file data is first touched, and at least an
//! eighth of the limit: the other half is for the process's own memory
//! and the metadata.

use std::path::{Path, PathBuf};

/// How much memory ulfs keeps the image's file data in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryBudget {
    /// From the memory cgroup the process runs in: half of what its limit
    /// leaves free at mount. No limit (or none found): no budget.
    #[default]
    Auto,
    /// No budget: the host's page cache decides, as for any mapped file.
    Unlimited,
    /// At most about this many bytes of file data stay mapped in.
    Bytes(u64),
}

/// The smallest budget kept to: below this the drop-behind window would
/// be a few pages, every call a system call, and a few interleaved streams
/// would not fit it.
pub const MIN_BUDGET: u64 = 128 << 10;

impl MemoryBudget {
    /// The budget in bytes, or None for no budget. `Bytes(0)` is no
    /// budget, as 0 is in the C API and on the command line.
    pub fn resolve(self) -> Option<u64> {
        match self {
            MemoryBudget::Unlimited | MemoryBudget::Bytes(0) => None,
            MemoryBudget::Bytes(b) => Some(b.max(MIN_BUDGET)),
            MemoryBudget::Auto => cgroup_limit()?.budget(),
        }
    }
}

/// The tightest memory limit over this process: where it is read, and
/// how much it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLimit {
    group: Group,
    /// Bytes.
    pub limit: u64,
}

impl CgroupLimit {
    /// Half of what the limit leaves free now, counting the group's
    /// inactive file pages as free (the kernel reclaims them first: a
    /// group that has done I/O sits near its limit with most of it
    /// reclaimable), and never less than an eighth of the limit.
    pub fn budget(&self) -> Option<u64> {
        let usage = self.usage()?;
        let stat = std::fs::read_to_string(self.group.dir.join("memory.stat")).unwrap_or_default();
        let reclaimable = stat_value(&stat, "inactive_file").unwrap_or(0);
        let working = usage.saturating_sub(reclaimable);
        let free = self.limit.saturating_sub(working);
        Some((free / 2).max(self.limit / 8).max(MIN_BUDGET))
    }

    /// What the group uses now, page cache included.
    fn usage(&self) -> Option<u64> {
        let file = match self.group.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        read_number(&self.group.dir.join(file))
    }
}

/// Bytes the tightest memory limit over this process leaves free now, or
/// None when there is no limit (or no memory cgroup to read). For tools;
/// the budget is `CgroupLimit::budget`.
pub fn cgroup_headroom() -> Option<u64> {
    let l = cgroup_limit()?;
    Some(l.limit.saturating_sub(l.usage()?))
}

/// The tightest memory limit over this process, if there is one: looked
/// up at the first mount of the process (about 50 µs: /proc/self/cgroup
/// and the limit files of the group and its ancestors) and remembered
/// (a process moved to another group later keeps the first answer).
pub fn cgroup_limit() -> Option<CgroupLimit> {
    static FOUND: std::sync::OnceLock<Option<CgroupLimit>> = std::sync::OnceLock::new();
    FOUND.get_or_init(look_up_limit).clone()
}

/// `cgroup_limit`, looked up. Cheap where cgroups are mounted where
/// systemd and Docker put them (the group from /proc/self/cgroup, its
/// limit files read directly); /proc/self/mountinfo is parsed only when
/// they are elsewhere.
fn look_up_limit() -> Option<CgroupLimit> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let group = match conventional_group(&membership) {
        Some(g) => g,
        None => {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            find_group(&mountinfo, &membership)?
        }
    };
    let limit = match group.version {
        Version::V1 => lowest_limit(&group.dir, &group.mount, &["memory.limit_in_bytes"]),
        Version::V2 => lowest_limit(&group.dir, &group.mount, &["memory.max", "memory.high"]),
    }?;
    // v1 writes "no limit" as a page-rounded i64::MAX; a limit above the
    // machine's memory limits nothing either.
    if limit >= i64::MAX as u64 / 2 || limit >= total_memory().unwrap_or(u64::MAX) {
        return None;
    }
    Some(CgroupLimit { group, limit })
}

/// The process's memory cgroup where cgroups are usually mounted:
/// /sys/fs/cgroup/memory for v1, /sys/fs/cgroup (or its `unified`) for v2.
fn conventional_group(membership: &str) -> Option<Group> {
    let root = Path::new("/sys/fs/cgroup");
    if let Some(path) = member_path(membership, |c| c.split(',').any(|c| c == "memory")) {
        let mount = root.join("memory");
        let dir = under(mount.to_str()?, "/", path);
        if dir.join("memory.limit_in_bytes").exists() {
            return Some(Group {
                version: Version::V1,
                mount,
                dir,
            });
        }
    }
    let path = member_path(membership, str::is_empty)?;
    for mount in [root.to_path_buf(), root.join("unified")] {
        let dir = under(mount.to_str()?, "/", path);
        if dir.join("memory.max").exists() {
            return Some(Group {
                version: Version::V2,
                mount,
                dir,
            });
        }
    }
    None
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Group {
    version: Version,
    /// Where the hierarchy is mounted.
    mount: PathBuf,
    /// The process's group in it.
    dir: PathBuf,
}

/// The process's memory cgroup: a v1 hierarchy with the memory controller
/// if one is mounted (hybrid systems mount both, and v1 then has the
/// controller), else the v2 one.
fn find_group(mountinfo: &str, membership: &str) -> Option<Group> {
    let mut v2 = None;
    for line in mountinfo.lines() {
        // id parent major:minor root mount-point options [tags] - type source super-options
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let before: Vec<&str> = before.split(' ').collect();
        let after: Vec<&str> = after.split(' ').collect();
        let (Some(root), Some(point), Some(kind)) = (before.get(3), before.get(4), after.first())
        else {
            continue;
        };
        let supers = after.get(2).copied().unwrap_or("");
        if *kind == "cgroup" && supers.split(',').any(|o| o == "memory") {
            let path = member_path(membership, |controllers| {
                controllers.split(',').any(|c| c == "memory")
            })?;
            return Some(Group {
                version: Version::V1,
                mount: PathBuf::from(unescape(point)),
                dir: under(point, root, path),
            });
        }
        if *kind == "cgroup2" && v2.is_none() {
            let path = member_path(membership, str::is_empty);
            v2 = path.map(|p| Group {
                version: Version::V2,
                mount: PathBuf::from(unescape(point)),
                dir: under(point, root, p),
            });
        }
    }
    v2.filter(|g| g.dir.join("memory.max").exists())
}

/// The path in /proc/self/cgroup of the line whose controller list
/// passes `wanted` ("N:controllers:path").
fn member_path(membership: &str, wanted: impl Fn(&str) -> bool) -> Option<&str> {
    membership.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        wanted(controllers).then_some(path)
    })
}

/// The directory of group `path` in a hierarchy mounted at `point`, whose
/// mount shows the hierarchy from `root` on (a container sees its own
/// group as the root).
fn under(point: &str, root: &str, path: &str) -> PathBuf {
    let root = unescape(root);
    let rel = path.strip_prefix(root.as_str()).unwrap_or(path);
    let mut dir = PathBuf::from(unescape(point));
    dir.extend(rel.split('/').filter(|c| !c.is_empty() && *c != ".."));
    dir
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let digits = b.get(i + 1..i + 4);
        match digits {
            Some(d) if b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lowest of `files` from `dir` up to the mount (a value that is not a
/// number, "max", counts as no limit); None if `dir` has none of them.
fn lowest_limit(dir: &Path, mount: &Path, files: &[&str]) -> Option<u64> {
    if !files.iter().any(|f| dir.join(f).exists()) {
        return None;
    }
    let mut lowest: Option<u64> = None;
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| d.starts_with(mount)) {
        for file in files {
            if let Some(v) = read_number(&d.join(file)) {
                lowest = Some(lowest.map_or(v, |l| l.min(v)));
            }
        }
        at = d.parent();
    }
    Some(lowest.unwrap_or(u64::MAX))
}

/// A file holding one number ("max" and anything else unreadable: None).
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` from a memory.stat.
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// MemTotal from /proc/meminfo, in bytes.
fn total_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
35 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
";

    #[test]
    fn a_v1_memory_hierarchy_wins_on_a_hybrid_system() {
        let membership = "4:memory:/box/app\n1:cpu:/\n0::/\n";
        let g = find_group(HYBRID, membership).unwrap();
        assert_eq!(g.version, Version::V1);
        assert_eq!(g.dir, Path::new("/sys/fs/cgroup/memory/box/app"));
        assert_eq!(g.mount, Path::new("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn a_container_sees_its_group_as_the_mount_root() {
        let mountinfo =
            "40 30 0:30 /kube/pod\\0401 /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(unescape("/kube/pod\\0401"), "/kube/pod 1");
        let dir = under("/sys/fs/cgroup", "/kube/pod\\0401", "/kube/pod 1/app");
        assert_eq!(dir, Path::new("/sys/fs/cgroup/app"));
        // Not a memory hierarchy on this machine (no memory.max there).
        assert_eq!(find_group(mountinfo, "0::/kube/pod 1/app\n"), None);
        // A path that tries to climb out stays inside.
        assert_eq!(under("/m", "/", "/../../etc"), Path::new("/m/etc"));
    }

    #[test]
    fn no_memory_hierarchy_no_group() {
        let mountinfo = "36 30 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(find_group(mountinfo, "1:cpu:/\n"), None);
        assert_eq!(find_group("garbage", ""), None);
    }

    #[test]
    fn v2_takes_the_lowest_limit_up_to_the_mount() {
        let d = tempfile::tempdir().unwrap();
        let leaf = d.path().join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(d.path().join("a/memory.max"), "8388608\n").unwrap();
        std::fs::write(d.path().join("a/memory.high"), "max\n").unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        let v2 = ["memory.max", "memory.high"];
        assert_eq!(lowest_limit(&leaf, d.path(), &v2), Some(8 << 20));
        std::fs::write(leaf.join("memory.high"), "1048576\n").unwrap();
        assert_eq!(lowest_limit(&leaf, d.path(), &v2), Some(1 << 20));
        // Nothing above the mount counts.
        assert_eq!(lowest_limit(&leaf, &leaf, &v2), Some(1 << 20));
        std::fs::remove_file(leaf.join("memory.high")).unwrap();
        assert_eq!(lowest_limit(&leaf, &leaf, &v2), Some(u64::MAX));
        // A group without the files has no limit to read.
        assert_eq!(
            lowest_limit(d.path(), d.path(), &["memory.limit_in_bytes"]),
            None
        );
    }

    #[test]
    fn stat_values_are_read_by_key() {
        let stat = "cache 4096\nhierarchical_memory_limit 1048576\nrss 0\n";
        assert_eq!(stat_value(stat, "hierarchical_memory_limit"), Some(1 << 20));
        assert_eq!(stat_value(stat, "cache"), Some(4096));
        assert_eq!(stat_value(stat, "missing"), None);
    }

    #[test]
    fn a_budget_asked_for_is_kept_and_never_tiny() {
        assert_eq!(MemoryBudget::Unlimited.resolve(), None);
        assert_eq!(MemoryBudget::Bytes(0).resolve(), None);
        assert_eq!(MemoryBudget::Bytes(8 << 20).resolve(), Some(8 << 20));
        assert_eq!(MemoryBudget::Bytes(1).resolve(), Some(MIN_BUDGET));
    }
}

//! The machine the run is on: its description (for captions and the
//! report), the directory each medium's files go in (`/dev/shm` for the
//! in-memory experiments, an ext4 directory for the durable ones), and
//! an ext4 file system on a loop device made for the run when the
//! machine's disk is something else.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

const EXT4_MAGIC: i64 = 0xEF53;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The `f_type` of the file system holding `p`.
pub fn fs_type(p: &Path) -> Option<i64> {
    let c = CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain old data; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid out-parameter.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    (r == 0).then_some(st.f_type as i64)
}

pub fn fs_name(p: &Path) -> &'static str {
    match fs_type(p) {
        Some(EXT4_MAGIC) => "ext4",
        Some(TMPFS_MAGIC) => "tmpfs",
        Some(0x9123_683E) => "btrfs",
        Some(0x5846_5342) => "xfs",
        Some(0x794C_7630) => "overlayfs",
        Some(_) => "another file system",
        None => "unknown",
    }
}

/// The start of the name of everything a run leaves on the host while it
/// runs (directories, images, the loop file, cgroups): with the run's pid
/// in it, a later run can tell a leftover of a run that was killed.
pub fn own_prefix() -> String {
    format!("ulfs-bench-{}-", std::process::id())
}

/// The pid in a name made with [`own_prefix`] (or the loop file's
/// `ulfs-bench-ext4-PID...`), if the name is one.
pub fn pid_in(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ulfs-bench-")?;
    let rest = rest.strip_prefix("ext4-").unwrap_or(rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The file every directory a run makes on the host holds: a leftover
/// is removed only with it inside, so a user's own `ulfs-bench-2026/`
/// (a results directory, say) is never taken for one.
const MARK: &str = ".ulfs-bench-run";

/// A new directory of this run in `base`, marked as the run's.
fn run_dir(base: &Path) -> std::io::Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(&own_prefix())
        .tempdir_in(base)?;
    let mark = std::fs::File::create(dir.path().join(MARK))?;
    // Locked while the run lives: a run in another pid namespace sharing
    // /dev/shm or /tmp has a pid this one cannot see, but its lock shows.
    mark.lock()?;
    MARKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((dir.path().to_path_buf(), mark));
    Ok(dir)
}

/// The run's locked mark files, held open (and locked) until it exits or
/// removes their directory.
static MARKS: std::sync::Mutex<Vec<(PathBuf, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Closes the mark file of a directory about to be removed (an open file
/// would keep a loop mount under it busy).
fn unmark(dir: &Path) {
    MARKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(d, _)| d != dir);
}

/// Whether a marked directory belongs to a run that is still going.
fn held(mark: &Path) -> bool {
    match std::fs::File::open(mark) {
        Ok(f) => matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// Whether anything is mounted at or under `path`.
fn mounts_under(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|at| Path::new(at).starts_with(path))
    })
}

/// Whether `path` is mounted (listed in /proc/mounts as a mount point).
fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&*path.to_string_lossy()))
    })
}

/// Removes what runs that were killed (SIGKILL, a crash) left in the
/// places runs use: their marked directories and images (in memory, on
/// tmpfs, they hold RAM), and a loop mount with its file. Returns what
/// was removed, to be said.
pub fn remove_leftovers() -> Vec<String> {
    let mut removed = Vec::new();
    let mut places: Vec<PathBuf> = ["/dev/shm", "/var/tmp", "/tmp"].map(PathBuf::from).into();
    places.extend(std::env::var_os("TMPDIR").map(PathBuf::from));
    places.extend(std::env::var_os("ULFS_BENCH_DISK").map(PathBuf::from));
    places.dedup();
    for place in places {
        let Ok(entries) = std::fs::read_dir(&place) else {
            continue;
        };
        // Loop mounts first: their directories are under the mount.
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| !e.file_name().to_string_lossy().ends_with("-mnt"));
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = pid_in(&name) else {
                continue;
            };
            if alive(pid) {
                continue;
            }
            let path = e.path();
            let ext4 = format!("ulfs-bench-ext4-{pid}");
            let mountpoint = place.join(format!("{ext4}-mnt"));
            let gone = if name == format!("{ext4}-mnt") {
                if mounted(&path) {
                    let _ = Command::new("umount").arg(&path).output();
                }
                // Only once unmounted and empty: never into a file system.
                std::fs::remove_dir(&path)
            } else if name == format!("{ext4}-loop.img") && path.is_file() {
                // Not while its file system is still mounted (a loop
                // device would stay attached to a deleted file).
                if mounted(&mountpoint) {
                    continue;
                }
                std::fs::remove_file(&path)
            } else if path.join(MARK).is_file() && !held(&path.join(MARK)) && !mounts_under(&path) {
                std::fs::remove_dir_all(&path)
            } else {
                continue;
            };
            if gone.is_ok() {
                removed.push(path.display().to_string());
            }
        }
    }
    removed
}

/// Where the in-memory experiments keep their files: `/dev/shm`, the
/// tmpfs the paper's in-memory peers compare with.
pub fn memory_dir() -> Result<TempDir, String> {
    let shm = Path::new("/dev/shm");
    if fs_type(shm) != Some(TMPFS_MAGIC) {
        return Err("missing: a tmpfs at /dev/shm (the in-memory experiments need one)".into());
    }
    run_dir(shm).map_err(|e| format!("/dev/shm: {e}"))
}

/// An ext4 directory for the durable experiments, and what it is.
pub struct Disk {
    pub dir: TempDir,
    pub note: String,
    /// The loop mount to undo at the end, if one was made.
    loop_mount: Option<LoopMount>,
}

impl Disk {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Finds an ext4 directory: `ULFS_BENCH_DISK` if set (`loop` asks for a
/// loop device), else the usual temporary directories; failing that,
/// makes ext4 on a loop device (needs root, `mkfs.ext4` and a loop
/// device).
pub fn disk_dir() -> Result<Disk, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    match std::env::var_os("ULFS_BENCH_DISK") {
        Some(d) if d == "loop" => return loop_disk(),
        Some(d) if fs_type(Path::new(&d)) == Some(EXT4_MAGIC) => candidates.push(d.into()),
        Some(d) => {
            return Err(format!(
                "ULFS_BENCH_DISK={}: not a directory on ext4 (or `loop` for one made for the run)",
                Path::new(&d).display()
            ));
        }
        None => {}
    }
    candidates.extend(std::env::var_os("TMPDIR").map(PathBuf::from));
    candidates.extend(["/var/tmp", "/tmp"].map(PathBuf::from));
    for c in &candidates {
        if fs_type(c) == Some(EXT4_MAGIC)
            && let Ok(dir) = run_dir(c)
        {
            return Ok(Disk {
                dir,
                note: format!("ext4 at {} ({})", c.display(), device_of(c)),
                loop_mount: None,
            });
        }
    }
    loop_disk()
}

/// A directory on ext4 made for the run on a loop device.
pub fn loop_disk() -> Result<Disk, String> {
    let m = LoopMount::make()?;
    let dir = run_dir(&m.mountpoint).map_err(|e| format!("the loop ext4: {e}"))?;
    Ok(Disk {
        dir,
        note: m.note.clone(),
        loop_mount: Some(m),
    })
}

/// The block device a directory's file system is on, from /proc/mounts.
fn device_of(p: &Path) -> String {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "device unknown".into();
    };
    let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?))
        })
        .filter(|(_, at)| p.starts_with(at))
        .max_by_key(|(_, at)| at.len())
        .map_or("device unknown".into(), |(dev, _)| format!("on {dev}"))
}

/// ext4 made for the run in a sparse file on the host disk, mounted
/// through a loop device; unmounted and removed when dropped.
struct LoopMount {
    file: PathBuf,
    mountpoint: PathBuf,
    note: String,
}

impl LoopMount {
    fn make() -> Result<LoopMount, String> {
        let why = "missing: an ext4 directory on this machine, and";
        let base = Path::new("/var/tmp");
        let file = base.join(format!("ulfs-bench-ext4-{}-loop.img", std::process::id()));
        let mountpoint = base.join(format!("ulfs-bench-ext4-{}-mnt", std::process::id()));
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{why} {cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{why} {cmd:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let f =
            std::fs::File::create(&file).map_err(|e| format!("{why} {}: {e}", file.display()))?;
        let sized = f.set_len(8 << 30);
        drop(f);
        let m = LoopMount {
            note: format!(
                "ext4 on a loop device made for this run (file {} on {})",
                file.display(),
                fs_name(base)
            ),
            file,
            mountpoint,
        };
        sized.map_err(|e| format!("{why} {}: {e}", m.file.display()))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&m.file))?;
        std::fs::create_dir_all(&m.mountpoint).map_err(|e| format!("{why} {e}"))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&m.file)
            .arg(&m.mountpoint))?;
        Ok(m)
    }
}

impl Drop for LoopMount {
    /// Only once unmounted: a loop device must not stay attached to a
    /// deleted file (the next run's clean-up retries what is left).
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mountpoint).output();
        if !mounted(&self.mountpoint) {
            let _ = std::fs::remove_dir(&self.mountpoint);
            let _ = std::fs::remove_file(&self.file);
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        unmark(self.dir.path());
        // The directory goes before the file system under it.
        let _ = std::fs::remove_dir_all(self.dir.path());
        drop(self.loop_mount.take());
    }
}

/// One line naming the machine: cores, CPU, memory, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or("? GiB".into(), |kib| {
            format!("{:.0} GiB", kib as f64 / (1 << 20) as f64)
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("?".into(), |s| s.trim().to_string());
    format!("{cores} cores, {cpu}, {mem_gib}, Linux {kernel}")
}

/// Today's date (UTC), for the report and captions.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (y, m, d) = ulfs::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn today_is_a_plausible_date() {
        let t = today();
        let parts: Vec<u32> = t.split('-').map(|p| p.parse().unwrap()).collect();
        assert!(parts[0] >= 2024, "{t}");
        assert!((1..=12).contains(&parts[1]), "{t}");
        assert!((1..=31).contains(&parts[2]), "{t}");
    }

    /// Where loop devices can be made (root, `mkfs.ext4`), the disk peer
    /// gets a real ext4 and nothing is left behind; elsewhere, a reason.
    #[test]
    fn a_loop_ext4_is_made_and_removed() {
        let disk = match loop_disk() {
            Ok(d) => d,
            Err(e) => {
                assert!(e.contains("missing: an ext4 directory"), "{e}");
                eprintln!("no loop device here: {e}");
                return;
            }
        };
        assert_eq!(fs_type(disk.path()), Some(EXT4_MAGIC));
        assert!(disk.note.contains("loop device"), "{}", disk.note);
        std::fs::write(disk.path().join("f"), b"x").unwrap();
        let backing = disk.loop_mount.as_ref().unwrap().file.clone();
        let mountpoint = disk.loop_mount.as_ref().unwrap().mountpoint.clone();
        drop(disk);
        assert!(!backing.exists(), "{} left behind", backing.display());
        assert!(!mountpoint.exists(), "{} left behind", mountpoint.display());
    }

    #[test]
    fn leftovers_of_dead_runs_are_told_from_live_ones() {
        assert_eq!(pid_in("ulfs-bench-123-abc"), Some(123));
        assert_eq!(pid_in("ulfs-bench-ext4-77-loop.img"), Some(77));
        assert_eq!(pid_in("ulfs-bench-"), None);
        assert_eq!(pid_in("other-123"), None);
        assert!(pid_in(&own_prefix()).is_some_and(alive));
        // A leftover of a pid that is not running goes; ours stays.
        let dead = (u32::MAX / 2..).find(|&p| !alive(p)).unwrap();
        let base = Path::new("/dev/shm");
        let theirs = base.join(format!("ulfs-bench-{dead}-x"));
        // A user's directory that only looks like one: never touched.
        let users = base.join(format!("ulfs-bench-{dead}-results"));
        let ours = run_dir(base).unwrap();
        std::fs::create_dir_all(theirs.join("sub")).unwrap();
        std::fs::write(theirs.join(MARK), dead.to_string()).unwrap();
        std::fs::create_dir_all(&users).unwrap();
        std::fs::write(users.join("results.csv"), "keep").unwrap();
        let removed = remove_leftovers();
        let users_kept = users.join("results.csv").exists();
        std::fs::remove_dir_all(&users).unwrap();
        assert!(!theirs.exists());
        assert!(
            removed
                .iter()
                .any(|r| r.ends_with(&format!("ulfs-bench-{dead}-x")))
        );
        assert!(ours.path().exists());
        assert!(users_kept, "a user's directory was removed");
    }

    #[test]
    fn the_machine_line_names_cores_and_kernel() {
        let m = machine();
        assert!(m.contains("cores"), "{m}");
        assert!(m.contains("Linux"), "{m}");
    }
}

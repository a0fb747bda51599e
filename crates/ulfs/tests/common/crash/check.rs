//! Checking one crash image: fsck as it is, mount (replay), read back and
//! compare, unmount, fsck again; optionally crash the recovery itself.

use super::*;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Extra work on some states.
#[derive(Clone, Copy)]
pub struct Extras {
    /// Write new things after the read-back, before unmount.
    pub probe: bool,
    /// After fsck, mount once more and read the same tree.
    pub remount: bool,
    /// Before anything, fsck the crash image read-only.
    pub raw_fsck: bool,
    /// Also crash the recovery itself: mount and unmount the image on a
    /// `SimDisk` and check crash states taken at its flushes the same way.
    pub crash_recovery: bool,
}

impl Extras {
    const PLAIN: Extras = Extras {
        probe: false,
        remount: false,
        raw_fsck: true,
        crash_recovery: false,
    };
}

/// A read-only store over a shared image (no copy).
pub struct SharedImage(pub Arc<Vec<u8>>);

impl BlockStore for SharedImage {
    fn blocks(&self) -> u64 {
        (self.0.len() / BLOCK_SIZE) as u64
    }
    fn is_read_only(&self) -> bool {
        true
    }
    fn block(&self, bid: u32) -> ulfs::Result<&[u8; BLOCK_SIZE]> {
        let off = bid as usize * BLOCK_SIZE;
        self.0
            .get(off..off + BLOCK_SIZE)
            .map(|b| b.try_into().expect("block"))
            .ok_or(Errno::EUCLEAN)
    }
    fn block_mut(&mut self, _: u32) -> ulfs::Result<&mut [u8; BLOCK_SIZE]> {
        Err(Errno::EROFS)
    }
    fn flush(&mut self) -> ulfs::Result<()> {
        Ok(())
    }
}

/// A read-write store over an owned image that hands the image back when
/// the file system drops it (at unmount). Writes are simply in place: the
/// recovery mount is not itself crash-tested here.
pub struct OwnedImage {
    pub img: Vec<u8>,
    pub back: Arc<Mutex<Vec<u8>>>,
}

impl Drop for OwnedImage {
    fn drop(&mut self) {
        *lock(&self.back) = std::mem::take(&mut self.img);
    }
}

impl BlockStore for OwnedImage {
    fn blocks(&self) -> u64 {
        (self.img.len() / BLOCK_SIZE) as u64
    }
    fn is_read_only(&self) -> bool {
        false
    }
    fn block(&self, bid: u32) -> ulfs::Result<&[u8; BLOCK_SIZE]> {
        let off = bid as usize * BLOCK_SIZE;
        self.img
            .get(off..off + BLOCK_SIZE)
            .map(|b| b.try_into().expect("block"))
            .ok_or(Errno::EUCLEAN)
    }
    fn block_mut(&mut self, bid: u32) -> ulfs::Result<&mut [u8; BLOCK_SIZE]> {
        let off = bid as usize * BLOCK_SIZE;
        self.img
            .get_mut(off..off + BLOCK_SIZE)
            .map(|b| b.try_into().expect("block"))
            .ok_or(Errno::EUCLEAN)
    }
    fn flush(&mut self) -> ulfs::Result<()> {
        Ok(())
    }
}

pub fn fsck_shared(img: &Arc<Vec<u8>>, what: &str) -> Result<(), String> {
    let r = fsck_store(
        Box::new(SharedImage(img.clone())),
        &mut FsckOptions::default(),
    )
    .map_err(|e| format!("fsck of {what} could not check it: {e}"))?;
    if r.is_clean() {
        Ok(())
    } else {
        Err(format!("fsck of {what}: {:#?}", r.problems))
    }
}

/// Checks one crash image: fsck of the image as it is (read-only, the
/// journal replayed in memory), a read-write mount (replay), the tree read
/// back against the allowed prefix states, unmount, fsck of what is left.
/// Returns the prefix state it matched.
pub fn check_image(img: Vec<u8>, ex: &Expect<'_>, extras: Extras) -> Result<Match, String> {
    let mut errors = Vec::new();
    let shared = Arc::new(img);
    if extras.raw_fsck {
        if let Err(e) = fsck_shared(&shared, "the crash image itself (read-only)") {
            errors.push(e);
        }
        // A read-only mount replays into memory only (file data logged by
        // a commit for fsync included): it must read an allowed state too.
        if let Err(e) = read_only_state(&shared, ex) {
            errors.push(e);
        }
    }
    if extras.crash_recovery
        && let Err(e) = crash_recovery(&shared, ex)
    {
        errors.push(e);
    }
    let img = Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
    let back = Arc::new(Mutex::new(Vec::new()));
    let store = OwnedImage {
        img,
        back: back.clone(),
    };
    let mut fs = match Fs::mount_store(Box::new(store), MountOptions::default()) {
        Ok(fs) => fs,
        Err(e) => {
            errors.push(format!("mount failed: {e}"));
            return Err(errors.join("\nand "));
        }
    };
    let found = match read_tree(&mut fs) {
        Ok(f) => f,
        Err(e) => {
            errors.push(format!("reading the tree back: {e}"));
            return Err(errors.join("\nand "));
        }
    };
    let matched = ex.matching(&found);
    if let Err(e) = &matched {
        errors.push(e.clone());
    } else if extras.probe
        && let Err(e) = probe(&mut fs)
    {
        errors.push(format!("writing after recovery: {e}"));
    }
    match fs.unmount() {
        Ok(()) => {
            let after = Arc::new(std::mem::take(&mut *lock(&back)));
            if let Err(e) = fsck_shared(&after, "the image after recovery and unmount") {
                errors.push(e);
            } else if extras.remount
                && errors.is_empty()
                && let Err(e) = remount_same(&after, &found)
            {
                errors.push(e);
            }
        }
        Err(e) => errors.push(format!("unmount after recovery failed: {e:?}")),
    }
    match matched {
        Ok(m) if errors.is_empty() => Ok(m),
        _ => Err(errors.join("\nand ")),
    }
}

/// The tree a read-only mount of the crash image reads, against the
/// allowed states.
fn read_only_state(img: &Arc<Vec<u8>>, ex: &Expect<'_>) -> Result<(), String> {
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    let mut fs = Fs::mount_store(Box::new(SharedImage(img.clone())), opts)
        .map_err(|e| format!("read-only mount failed: {e}"))?;
    let found = read_tree(&mut fs).map_err(|e| format!("reading the tree read-only: {e}"))?;
    ex.matching(&found)
        .map(drop)
        .map_err(|e| format!("read-only, {e}"))
}

thread_local! {
    /// Crash states checked inside recoveries (counted into the stats).
    pub static RECOVERY_STATES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A power cut during recovery (the replaying mount and its unmount) must
/// leave an image that is as good as the one recovery started from.
pub fn crash_recovery(img: &Arc<Vec<u8>>, ex: &Expect<'_>) -> Result<(), String> {
    let mids = Arc::new(Mutex::new(Vec::new()));
    let mut disk = SimDisk::from_image(img.to_vec());
    let sink = mids.clone();
    disk.on_flush(move |d| {
        // One state per flush: each changed block lost, written or torn.
        let changed = changed_blocks(d);
        if changed.is_empty() {
            return;
        }
        let mut rng = Rng::new(mix(d.flush_count(), changed.len() as u64));
        let p = rng.below(101);
        let fates: Vec<Fate> = changed
            .iter()
            .map(|&(_, diff)| {
                let torn = rng.next() as u8 & diff;
                if diff.count_ones() >= 2 && rng.chance(1, 8) && torn != 0 && torn != diff {
                    Fate::Torn(torn)
                } else if rng.below(100) < p {
                    Fate::Written
                } else {
                    Fate::Lost
                }
            })
            .collect();
        let img = d.crash_image(|bid| match changed.binary_search_by_key(&bid, |c| c.0) {
            Ok(i) => fates[i],
            Err(_) => Fate::Lost,
        });
        let shown: Vec<(u32, Fate)> = changed.iter().map(|c| c.0).zip(fates).collect();
        lock(&sink).push((d.flush_count(), fmt_fates(&shown), img));
    });
    let fs = Fs::mount_store(Box::new(disk), MountOptions::default())
        .map_err(|e| format!("mount (for crashing the recovery) failed: {e}"))?;
    fs.unmount()
        .map_err(|e| format!("unmount (for crashing the recovery) failed: {e:?}"))?;
    let mids = std::mem::take(&mut *lock(&mids));
    RECOVERY_STATES.set(RECOVERY_STATES.get() + mids.len() as u64);
    for (flush, fates, img) in mids {
        check_image(img, ex, Extras::PLAIN).map_err(|e| {
            format!("a crash during recovery (at its flush #{flush}, fates {fates}) leaves a bad state: {e}")
        })?;
    }
    Ok(())
}

/// Mode none's promise after a crash with blocks in flight: `fsck
/// --repair` succeeds, a re-check finds nothing, and the image mounts and
/// reads back whole (whatever state it shows). Returns whether the image
/// needed repair.
pub fn check_repaired(img: &[u8]) -> Result<bool, String> {
    // Repair syncs the image file: on tmpfs that costs nothing.
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .map_err(|e| format!("tempdir: {e}"))?;
    let path = dir.path().join("crash.img");
    std::fs::write(&path, img).map_err(|e| format!("write the crash image: {e}"))?;
    let rep = fsck_repair(&path, &mut FsckOptions::default())
        .map_err(|e| format!("fsck --repair could not run: {e}"))?;
    if !rep.remaining.is_empty() {
        return Err(format!(
            "fsck --repair left problems {:?} (found {:?}, fixed {:?})",
            rep.remaining, rep.found, rep.fixed
        ));
    }
    let again = fsck(&path, &mut FsckOptions::default())
        .map_err(|e| format!("re-check after repair could not run: {e}"))?;
    if !again.is_clean() {
        return Err(format!(
            "re-check after repair (which fixed {:?}) finds {:?}",
            rep.fixed, again.problems
        ));
    }
    let mut fs = Fs::mount(&path, MountOptions::default())
        .map_err(|e| format!("mount after repair: {e}"))?;
    read_tree(&mut fs).map_err(|e| format!("reading back after repair: {e}"))?;
    fs.unmount()
        .map_err(|e| format!("unmount after repair: {e:?}"))?;
    Ok(!rep.found.is_empty() || !rep.fixed.is_empty())
}

/// Mounting the recovered image again shows the same tree.
pub fn remount_same(img: &Arc<Vec<u8>>, found: &Found) -> Result<(), String> {
    let opts = MountOptions {
        read_only: true,
        ..Default::default()
    };
    let mut fs = Fs::mount_store(Box::new(SharedImage(img.clone())), opts)
        .map_err(|e| format!("second mount after recovery failed: {e}"))?;
    let again = read_tree(&mut fs).map_err(|e| format!("second read-back: {e}"))?;
    let (a, f) = (again.without_read_atimes(), found.without_read_atimes());
    if a != f {
        let diff: Vec<String> = f
            .keys()
            .chain(a.keys())
            .filter(|p| f.get(*p) != a.get(*p))
            .take(5)
            .map(|p| show(p))
            .collect();
        return Err(format!(
            "after recovery, unmount and mount again the tree changed at {diff:?}"
        ));
    }
    fs.unmount()
        .map_err(|e| format!("second unmount failed: {e:?}"))
}

/// New writes on a recovered image: allocation and the index must work.
pub fn probe(fs: &mut Fs) -> Result<(), String> {
    let e = |what: &str, e: Errno| format!("{what}: {e:?}");
    fs.mkdir("/zz-probe", 0o755).map_err(|x| e("mkdir", x))?;
    for i in 0..3 {
        let p = format!("/zz-probe/{i}-{}", "p".repeat(100));
        let fd = fs
            .open(&p, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644)
            .map_err(|x| e("open", x))?;
        let data = gen_data(i, 9000 + i as usize * 20000);
        let n = fs.write(fd, &data).map_err(|x| e("write", x))?;
        if n != data.len() {
            return Err(format!("short write {n}"));
        }
        fs.close(fd).map_err(|x| e("close", x))?;
    }
    fs.unlink(format!("/zz-probe/1-{}", "p".repeat(100)))
        .map_err(|x| e("unlink", x))?;
    Ok(())
}

//! The runner: drives the model and the file system call by call on a
//! `SimDisk`, taking crash states at every flush and after calls.

use super::*;

#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    pub points: u64,
    pub states: u64,
    pub torn_states: u64,
    pub max_changed: usize,
    pub flush_points: u64,
    /// States that matched an older prefix than the newest allowed one.
    pub older: u64,
    /// Of `states`, those taken during the recovery of another state.
    pub in_recovery: u64,
    /// States that showed a committed part of a call (and no more of it).
    pub partial: u64,
    /// Those by kind of call (`PartialKind::NAMES`).
    pub partial_kinds: [u64; 3],
    /// Mode none: states that fsck --repair had something to fix in.
    pub repaired: u64,
}

pub struct Replay {
    pub point: PointId,
    pub fates: Vec<(u32, Fate)>,
    pub reached: bool,
}

/// State the flush hook needs; the runner updates it around each call.
pub struct Shared {
    pub name: String,
    pub scale: usize,
    pub seed: u64,
    pub cfg: Cfg,
    pub armed: bool,
    /// snaps[k]: the model after k calls.
    pub snaps: Vec<Arc<Tree>>,
    pub ops: Vec<String>,
    /// Calls before the last completed fsync/sync.
    pub floor: usize,
    pub loose: Vec<Loose>,
    /// Calls since the last fsync/sync that may have committed part of
    /// their work.
    pub partials: Vec<Partial>,
    /// Index of the call in progress.
    pub in_op: Option<usize>,
    pub done: usize,
    pub after_every: usize,
    /// Flush count at the last after-call point that had nothing in flight.
    pub quiet_at: Option<u64>,
    pub stats: Stats,
    pub failure: Option<String>,
    pub replay: Option<Replay>,
}

impl Shared {
    pub fn crash_point(&mut self, d: &SimDisk, id: PointId) {
        if self.failure.is_some() {
            return;
        }
        let max = match self.in_op {
            Some(i) => i + 1,
            None => self.done,
        };
        if let Some(r) = &self.replay {
            if r.point != id {
                return;
            }
            let fates = r.fates.clone();
            let img = d.crash_image(|b| {
                fates
                    .iter()
                    .find(|(x, _)| *x == b)
                    .map_or(Fate::Lost, |(_, f)| *f)
            });
            self.replay.as_mut().expect("replay").reached = true;
            let ex = Expect {
                snaps: &self.snaps,
                floor: self.floor,
                max,
                loose: &self.loose,
                partials: &self.partials,
            };
            eprintln!(
                "replaying {id}: allowed states {}..={max}, {} changed blocks in flight {}",
                self.floor,
                changed_blocks(d).len(),
                fmt_fates(
                    &changed_blocks(d)
                        .iter()
                        .map(|&(b, _)| (b, Fate::Written))
                        .collect::<Vec<_>>()
                )
            );
            // Both variants of the checks a state can get.
            let plain = Extras {
                probe: false,
                remount: true,
                raw_fsck: true,
                crash_recovery: true,
            };
            let probed = Extras {
                probe: true,
                remount: false,
                raw_fsck: false,
                crash_recovery: false,
            };
            match check_image(img.clone(), &ex, plain)
                .and_then(|_| check_image(img.clone(), &ex, probed))
            {
                Ok(m) => eprintln!(
                    "replay: state passes (matches the state after {} calls{})",
                    m.k,
                    if m.part.is_some() {
                        " and a committed part of the next"
                    } else {
                        ""
                    }
                ),
                Err(e) => {
                    let path = save_image(&self.name, self.seed, id, &img);
                    self.failure = Some(format!("replay of {id} fails:\n{e}\nimage: {path}"));
                }
            }
            return;
        }
        let changed = changed_blocks(d);
        let b = match id {
            PointId::Flush(_) => {
                self.stats.flush_points += 1;
                self.cfg.at_flush
            }
            PointId::After(k) => {
                // Right after an fsync is always checked.
                if k % self.after_every != 0 && self.floor != self.done {
                    return;
                }
                if changed.is_empty() {
                    // Same image as the last quiet point, with a wider range
                    // of allowed states: nothing new to check.
                    if self.quiet_at == Some(d.flush_count()) {
                        return;
                    }
                    self.quiet_at = Some(d.flush_count());
                }
                self.cfg.after_op
            }
        };
        if self.cfg.mode == Mode::None && self.cfg.none_repair {
            self.repair_point(d, id, &changed, b);
            return;
        }
        if self.cfg.mode == Mode::None {
            // Mode none promises only the synced state.
            if !(matches!(id, PointId::After(_)) && self.floor == self.done) {
                return;
            }
        }
        self.stats.points += 1;
        self.stats.max_changed = self.stats.max_changed.max(changed.len());
        let mut rng = Rng::new(mix(self.seed, id.code()));
        let sets = if self.cfg.mode == Mode::None {
            vec![vec![Fate::Lost; changed.len()]]
        } else {
            fate_sets(&changed, &mut rng, b)
        };
        let ex = Expect {
            snaps: &self.snaps,
            floor: self.floor,
            max,
            loose: &self.loose,
            partials: &self.partials,
        };
        for fates in sets {
            let img = d.crash_image(|bid| match changed.binary_search_by_key(&bid, |c| c.0) {
                Ok(i) => fates[i],
                Err(_) => Fate::Lost,
            });
            let n = self.stats.states;
            self.stats.states += 1;
            if fates.iter().any(|f| matches!(f, Fate::Torn(_))) {
                self.stats.torn_states += 1;
            }
            let extras = Extras {
                probe: n % 2 == 1,
                remount: n.is_multiple_of(8),
                raw_fsck: true,
                // Mode none promises nothing for a crash during mount.
                crash_recovery: n % 16 == 3 && self.cfg.mode == Mode::Journal,
            };
            let before = RECOVERY_STATES.get();
            let res = check_image(img, &ex, extras);
            let nested = RECOVERY_STATES.get() - before;
            self.stats.states += nested;
            self.stats.in_recovery += nested;
            match res {
                Ok(Match { part: Some(i), .. }) => {
                    self.stats.partial += 1;
                    self.stats.partial_kinds[i] += 1;
                }
                Ok(m) if m.k < max => self.stats.older += 1,
                _ => {}
            }
            if let Err(e) = res {
                let compact: Vec<(u32, Fate)> = changed
                    .iter()
                    .zip(&fates)
                    .filter(|(_, f)| **f != Fate::Lost)
                    .map(|(c, f)| (c.0, *f))
                    .collect();
                let fates_s = fmt_fates(&compact);
                let img = d.crash_image(|bid| match changed.binary_search_by_key(&bid, |c| c.0) {
                    Ok(i) => fates[i],
                    Err(_) => Fate::Lost,
                });
                let path = save_image(&self.name, self.seed, id, &img);
                let during = match (id, self.in_op) {
                    (PointId::Flush(n), Some(i)) => {
                        format!("inside call {i} `{}`, flush #{n}", self.ops[i])
                    }
                    (PointId::Flush(n), None) => format!("flush #{n} between calls"),
                    (PointId::After(k), _) => format!("after call {k} `{}`", self.ops[k]),
                };
                let recent: Vec<String> = (self.floor.saturating_sub(1)..max)
                    .rev()
                    .take(12)
                    .map(|i| format!("    {i}: {}", self.ops[i]))
                    .collect();
                self.failure = Some(format!(
                    "CRASH STATE FAILED\n  workload `{}` (scale {}), seed {:#x}, point {id} ({during})\n  \
                     allowed prefix states {}..={max} (last completed fsync/sync before call {})\n  \
                     {} changed blocks in flight, fates (unlisted = lost): {fates_s}\n  \
                     problem: {e}\n  recent calls (newest first):\n{}\n  crash image saved: {path}\n  \
                     replay: ULFS_CRASH_REPLAY='{} {} {:#x} {id} {fates_s}' cargo test -p ulfs --test crash crash_replay -- --ignored --nocapture\n  \
                     or: replay(\"{}\", {}, {:#x}, \"{id}\", \"{fates_s}\")",
                    self.name,
                    self.scale,
                    self.seed,
                    self.floor,
                    self.floor,
                    changed.len(),
                    recent.join("\n"),
                    self.name,
                    self.scale,
                    self.seed,
                    self.name,
                    self.scale,
                    self.seed,
                ));
                return;
            }
        }
    }
}

impl Shared {
    /// Mode none, blocks in flight: each crash state with some of them lost
    /// or torn must come back consistent through fsck --repair.
    fn repair_point(&mut self, d: &SimDisk, id: PointId, changed: &[(u32, u8)], b: Budget) {
        if changed.is_empty() {
            return;
        }
        self.stats.points += 1;
        self.stats.max_changed = self.stats.max_changed.max(changed.len());
        let mut rng = Rng::new(mix(self.seed, id.code()));
        for fates in fate_sets(changed, &mut rng, b) {
            if fates.iter().all(|f| *f == Fate::Written) {
                // Nothing lost: the state as it runs, not a crash state.
                continue;
            }
            let img = d.crash_image(|bid| match changed.binary_search_by_key(&bid, |c| c.0) {
                Ok(i) => fates[i],
                Err(_) => Fate::Lost,
            });
            self.stats.states += 1;
            if fates.iter().any(|f| matches!(f, Fate::Torn(_))) {
                self.stats.torn_states += 1;
            }
            let res = check_repaired(&img);
            if res == Ok(true) {
                self.stats.repaired += 1;
            }
            if let Err(e) = res {
                let shown: Vec<(u32, Fate)> = changed.iter().map(|c| c.0).zip(fates).collect();
                let path = save_image(&self.name, self.seed, id, &img);
                self.failure = Some(format!(
                    "MODE NONE CRASH STATE NOT REPAIRED\n  workload `{}` (scale {}), seed {:#x}, point {id}\n  \
                     {} changed blocks in flight, fates: {}\n  problem: {e}\n  crash image saved: {path}",
                    self.name,
                    self.scale,
                    self.seed,
                    changed.len(),
                    fmt_fates(&shown)
                ));
                return;
            }
        }
    }
}

pub fn save_image(name: &str, seed: u64, id: PointId, img: &[u8]) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("crash-{name}-{seed:x}-{id}.img"));
    match std::fs::write(&path, img) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(could not save to {}: {e})", path.display()),
    }
}

/// How the store under a run answers `flush`.
pub const FLUSH_OK: u8 = 0;
/// EIO, nothing made durable (a failing disk).
pub const FLUSH_FAILS: u8 = 1;
/// Ok, nothing made durable (a disk that lies: for the self-test).
pub const FLUSH_LIES: u8 = 2;

/// A `SimDisk` whose flush behaviour can be switched mid-run (the disk
/// inside an `Fs` cannot be reached mutably).
pub struct WrappedStore {
    pub inner: SimDisk,
    pub flush: Arc<AtomicU8>,
}

impl BlockStore for WrappedStore {
    fn blocks(&self) -> u64 {
        self.inner.blocks()
    }
    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }
    fn block(&self, bid: u32) -> ulfs::Result<&[u8; BLOCK_SIZE]> {
        self.inner.block(bid)
    }
    fn block_mut(&mut self, bid: u32) -> ulfs::Result<&mut [u8; BLOCK_SIZE]> {
        self.inner.block_mut(bid)
    }
    fn flush(&mut self) -> ulfs::Result<()> {
        match self.flush.load(Ordering::SeqCst) {
            FLUSH_FAILS => Err(Errno::EIO),
            FLUSH_LIES => Ok(()),
            _ => self.inner.flush(),
        }
    }
    fn flush_range(&mut self, first: u32, count: u32) -> ulfs::Result<()> {
        match self.flush.load(Ordering::SeqCst) {
            FLUSH_FAILS => Err(Errno::EIO),
            FLUSH_LIES => Ok(()),
            _ => self.inner.flush_range(first, count),
        }
    }
    fn as_sim(&self) -> Option<&SimDisk> {
        Some(&self.inner)
    }
}

#[derive(Clone, Copy)]
pub struct Slot {
    pub fd: Fd,
    pub id: u32,
    pub append: bool,
}

pub struct Runner {
    pub fs: Option<Fs>,
    pub model: Tree,
    pub slots: Vec<Option<Slot>>,
    pub next_id: u32,
    pub sh: Arc<Mutex<Shared>>,
    pub flush: Arc<AtomicU8>,
}

/// What a workload needs besides its code.
pub struct Workload {
    pub name: &'static str,
    pub blocks: u64,
    /// Journal commit threshold in blocks (0: the default).
    pub commit_blocks: u32,
    /// Journal region in blocks (None: mkfs's default).
    pub journal_blocks: Option<u32>,
    pub run: fn(&mut Runner, &mut Rng, usize),
    /// Crash states the CI run of this workload must check at least.
    pub ci_min_states: u64,
    /// Check the point after every n-th call only (flush points: all).
    pub after_every: usize,
}

pub fn hash_key(seed: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&mix(seed, 1).to_le_bytes());
    key[8..].copy_from_slice(&mix(seed, 2).to_le_bytes());
    key
}

/// Pins the directory hash key to the seed, so that a run replays exactly.
pub fn pin_hash_key(store: &mut dyn BlockStore, seed: u64) {
    let blocks = store.blocks();
    let key = hash_key(seed);
    for bid in [0, 1] {
        let Ok(b) = store.block(bid) else { continue };
        let Ok(mut sb) = Superblock::decode(b, blocks) else {
            continue;
        };
        sb.hash_key = key;
        if let Ok(b) = store.block_mut(bid) {
            sb.encode(b);
        }
    }
    store.flush().expect("flush after pinning the hash key");
}

impl Runner {
    pub fn new(w: &Workload, seed: u64, scale: usize, cfg: Cfg, replay: Option<Replay>) -> Runner {
        let sh = Arc::new(Mutex::new(Shared {
            name: w.name.to_string(),
            scale,
            seed,
            cfg,
            armed: false,
            snaps: vec![Arc::new(Tree::new())],
            ops: Vec::new(),
            floor: 0,
            loose: Vec::new(),
            partials: Vec::new(),
            in_op: None,
            done: 0,
            after_every: w.after_every,
            quiet_at: None,
            stats: Stats::default(),
            failure: None,
            replay,
        }));
        let mut disk = SimDisk::new(w.blocks);
        let hook = sh.clone();
        disk.on_flush(move |d| {
            if std::thread::panicking() {
                return;
            }
            let mut s = lock(&hook);
            if s.armed {
                s.crash_point(d, PointId::Flush(d.flush_count()));
            }
        });
        let opts = MkfsOptions {
            mode: cfg.mode,
            journal_blocks: w.journal_blocks.filter(|_| cfg.mode == Mode::Journal),
            ..Default::default()
        };
        let flush = Arc::new(AtomicU8::new(FLUSH_OK));
        let disk = WrappedStore {
            inner: disk,
            flush: flush.clone(),
        };
        let mut store = format_store(Box::new(disk), &opts)
            .unwrap_or_else(|e| panic!("format_store(mode {}): {e:?}", cfg.mode));
        pin_hash_key(&mut *store, seed);
        let fs = Fs::mount_store(
            store,
            MountOptions {
                commit_blocks: w.commit_blocks,
                // Commits only at sync, size, unmount: deterministic.
                commit_interval: Duration::from_secs(100 * 24 * 3600),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("mount: {e}"));
        let pinned = Superblock::decode(
            fs.sim_disk().expect("sim").current()[..BLOCK_SIZE]
                .try_into()
                .expect("block"),
            w.blocks,
        )
        .map(|sb| sb.hash_key);
        assert_eq!(
            pinned,
            Ok(hash_key(seed)),
            "the pinned hash key did not take"
        );
        lock(&sh).armed = true;
        Runner {
            fs: Some(fs),
            model: Tree::new(),
            slots: vec![None; 8],
            next_id: 1,
            sh,
            flush,
        }
    }

    pub fn check_failure(&self) {
        let f = lock(&self.sh).failure.take();
        if let Some(f) = f {
            lock(&self.sh).armed = false;
            panic!("{f}");
        }
    }

    pub fn free_slot(&self) -> usize {
        self.slots
            .iter()
            .position(|s| s.is_none())
            .expect("a free descriptor slot")
    }

    pub fn open_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some())
            .collect()
    }

    pub fn slot(&self, s: usize) -> Slot {
        self.slots[s].unwrap_or_else(|| panic!("slot {s} is not open"))
    }

    pub fn exec(&mut self, op: &Op) -> Result<Option<Fd>, Errno> {
        let fs = self.fs.as_mut().expect("mounted");
        let fd_of = |slots: &[Option<Slot>], s: usize| slots[s].expect("open slot").fd;
        let expect_len = |n: usize, len: usize| {
            if n == len { Ok(()) } else { Err(Errno::EIO) }
        };
        match op {
            Op::Open { path, flags, .. } => return fs.open(path, *flags, 0o644).map(Some),
            Op::Close { slot } => fs.close(fd_of(&self.slots, *slot))?,
            Op::Pwrite {
                slot,
                off,
                len,
                fill,
            } => expect_len(
                fs.pwrite(fd_of(&self.slots, *slot), &gen_data(*fill, *len), *off)?,
                *len,
            )?,
            Op::Append { slot, len, fill } => expect_len(
                fs.write(fd_of(&self.slots, *slot), &gen_data(*fill, *len))?,
                *len,
            )?,
            Op::Ftruncate { slot, len } => fs.ftruncate(fd_of(&self.slots, *slot), *len)?,
            Op::Fsync { slot } => fs.fsync(fd_of(&self.slots, *slot))?,
            Op::Sync => fs.sync()?,
            Op::Truncate { path, len } => fs.truncate(path, *len)?,
            Op::Mkdir { path } => fs.mkdir(path, 0o755)?,
            Op::Rmdir { path } => fs.rmdir(path)?,
            Op::Unlink { path } => fs.unlink(path)?,
            Op::Rename { from, to, flags } => fs.rename2(from, to, *flags)?,
            Op::Link { from, to } => fs.link(from, to)?,
            Op::Symlink { target, path } => fs.symlink(target, path)?,
            Op::Chmod { path, perm } => fs.chmod(path, *perm)?,
            Op::Fdatasync { slot } => fs.fdatasync(fd_of(&self.slots, *slot))?,
            Op::Fallocate {
                slot,
                mode,
                off,
                len,
            } => fs.fallocate(fd_of(&self.slots, *slot), *mode, *off, *len)?,
            Op::Utimens { path, times } => fs.utimensat(libc::AT_FDCWD, path, Some(*times), 0)?,
            Op::Futimens { slot, times } => fs.futimens(fd_of(&self.slots, *slot), Some(*times))?,
            Op::Chown { path, uid, gid } => fs.chown(path, *uid, *gid)?,
            Op::Fchown { slot, uid, gid } => fs.fchown(fd_of(&self.slots, *slot), *uid, *gid)?,
        }
        Ok(None)
    }

    /// Runs one call on the model and on the file system, with crash points
    /// inside (at every flush) and after it.
    pub fn op(&mut self, op: Op) {
        let i = lock(&self.sh).done;
        let mut next = self.model.clone();
        let Applied {
            new_slot,
            loose,
            partial,
        } = self.apply(&mut next, &op, i);
        {
            let mut s = lock(&self.sh);
            s.snaps.push(Arc::new(next.clone().sealed()));
            s.ops.push(op.to_string());
            s.loose.extend(loose);
            s.partials.extend(partial);
            s.in_op = Some(i);
        }
        let res = self.exec(&op);
        {
            let mut s = lock(&self.sh);
            s.in_op = None;
            s.done = i + 1;
            // fdatasync is a full sync in ulfs (posix/mod.rs), so the
            // harness holds it to the same promise as fsync.
            if res.is_ok() && matches!(op, Op::Fsync { .. } | Op::Fdatasync { .. } | Op::Sync) {
                s.floor = i + 1;
                s.loose.clear();
                s.partials.clear();
            }
        }
        self.check_failure();
        let name = lock(&self.sh).name.clone();
        let fd = res.unwrap_or_else(|e| panic!("workload `{name}`: call {i} `{op}` failed: {e:?}"));
        match op {
            Op::Open { slot, .. } => {
                let mut s = new_slot.expect("open slot");
                s.fd = fd.expect("fd");
                assert!(self.slots[slot].is_none());
                self.slots[slot] = Some(s);
            }
            Op::Close { slot } => self.slots[slot] = None,
            _ => {}
        }
        self.model = next;
        {
            let d = self
                .fs
                .as_ref()
                .and_then(|f| f.sim_disk())
                .expect("runs on a SimDisk");
            let mut s = lock(&self.sh);
            s.crash_point(d, PointId::After(i));
        }
        self.check_failure();
    }

    // ----- conveniences for workloads

    pub fn open(&mut self, path: &[u8], flags: i32) -> usize {
        let slot = self.free_slot();
        self.op(Op::Open {
            slot,
            path: path.to_vec(),
            flags,
        });
        slot
    }

    /// open(O_CREAT|O_EXCL), pwrite, close: three calls.
    pub fn create(&mut self, path: &[u8], len: usize, fill: u64) {
        let s = self.open(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY);
        if len > 0 {
            self.op(Op::Pwrite {
                slot: s,
                off: 0,
                len,
                fill,
            });
        }
        self.op(Op::Close { slot: s });
    }

    pub fn size_of(&self, slot: usize) -> u64 {
        self.model.files[&self.slot(slot).id].size
    }

    /// fsync or sync with probability 1/den.
    pub fn maybe_sync(&mut self, rng: &mut Rng, den: u64) {
        if !rng.chance(1, den) {
            return;
        }
        let open = self.open_slots();
        if !open.is_empty() && rng.chance(2, 3) {
            let slot = *rng.pick(&open);
            self.op(Op::Fsync { slot });
        } else {
            self.op(Op::Sync);
        }
    }

    /// Closes everything, unmounts (the last crash points are inside the
    /// unmount's flushes), and checks the final image; returns the stats.
    pub fn finish(mut self) -> Stats {
        for s in self.open_slots() {
            self.op(Op::Close { slot: s });
        }
        // Unmount is a sync: treat it as one more call.
        {
            let mut s = lock(&self.sh);
            let i = s.done;
            let t = s.snaps[i].clone();
            s.snaps.push(t);
            s.ops.push("unmount".into());
            s.in_op = Some(i);
        }
        let r = self.fs.take().expect("mounted").unmount();
        let mut s = lock(&self.sh);
        s.armed = false;
        if let Some(f) = s.failure.take() {
            panic!("{f}");
        }
        r.unwrap_or_else(|e| panic!("unmount: {e:?}"));
        if let Some(rp) = &s.replay {
            assert!(
                rp.reached,
                "replay: crash point {} was never reached (has the code changed since?)",
                rp.point
            );
        }
        s.stats
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        // A panicking test must not re-enter the checks from unmount.
        lock(&self.sh).armed = false;
    }
}

//! Residency: keeps the file data a process has mapped in within a memory
//! budget (`MountOptions::memory_budget`), instead of leaving every page to
//! the host's page replacement.
//!
//! Why it exists: the image is mapped, so its pages live in the host's page
//! cache, charged to the process's memory cgroup. The host evicts them in
//! LRU order, which is the worst order for a single pass over more data
//! than fits (write a set of files, read them back: LRU evicts exactly what
//! is needed next), and a cgroup v1 limit never starts writeback of dirty
//! pages on its own, so a process that dirties more than its limit through
//! a mapping thrashes or is killed (the ULFS paper's fig. 9; its future
//! work asks for MRU replacement and fadvise hints).
//!
//! This module is the policy only: which block ranges to read ahead, to
//! send to writeback and to release. The store carries the actions out
//! (store/mmap.rs: madvise, sync_file_range, posix_fadvise). Only file data
//! is tracked: metadata is never released, so it stays resident as long as
//! the host allows.
//!
//! The policy, for a budget of B blocks:
//! - a drop-behind *window* of W = min(B, 1 MiB) blocks: data blocks are
//!   tracked as runs of consecutive ids, oldest first. Once the window
//!   holds more than W, its oldest runs are released until it holds W/2,
//!   so a stream never holds more than the budget, and a release is a few
//!   system calls per W/2 blocks.
//! - the rest, B - W, is *kept* (MRU-style): the first blocks touched
//!   (each counted once, up to 1,024 extents of them) are never released
//!   and stay resident as long as the host lets them. A workload that goes
//!   over more data than the budget again and again finds these in memory,
//!   and one within the budget is never released at all.
//! - only streams (runs of at least 8 blocks, fewer in a small window
//!   shared by interleaved streams) are dropped: scattered blocks
//!   (a database's pages) are left to the host's page replacement, which
//!   keeps the hot ones; a short run leaving the ring is only forgotten.
//! - dirty streams are sent to writeback (without waiting) once a quarter
//!   of the window is dirty and not yet sent, so a release seldom waits for
//!   the disk; a release still writes back and waits for what it drops, so
//!   nothing written is ever lost by dropping it.
//! - a read or write that continues a run (a store to a page not in
//!   memory faults it in first, as a read does) asks for the next W/4
//!   blocks (at most 128 KiB, and at most as many as it ran) ahead, from
//!   its fourth block on and again every half of that; pages read ahead
//!   and never used are not tracked (clean: the host reclaims them first).
//!
//! Releasing a block that is touched again is never wrong, only slower:
//! the page is mapped in again from the page cache or the image. The
//! tracking is a fixed ring, so touching a block allocates nothing.

use crate::format::Bid;

/// Something the store should do for the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Read `count` blocks from `first` into memory, without waiting.
    ReadAhead { first: Bid, count: u32 },
    /// Start writing back dirty blocks of the range, without waiting.
    WriteBack { first: Bid, count: u32 },
    /// Drop the range from memory: unmap it, write back (and wait for)
    /// whatever of it is dirty, then evict it from the page cache.
    Release { first: Bid, count: u32 },
}

/// Runs the ring remembers, least recently continued first; a stream pushed
/// out of it is released.
const RUNS: usize = 64;

/// Runs, newest first, that a touch may extend or fall into: a few
/// streams interleaved (a copy reads one file and writes another) still
/// form long runs.
const RECENT: usize = 16;

/// The most a stream reads ahead at a time, in blocks (128 KiB).
const MAX_AHEAD: u64 = 32;

/// Runs of at least this many blocks (or half the window, if less) are
/// streams.
const STREAM: u64 = 8;

/// The largest drop-behind window: big enough for efficient I/O, small
/// enough to leave most of a large budget to kept blocks.
const MAX_WINDOW: u64 = 256;

/// Extents of kept blocks the set can hold; past that nothing more is kept.
const KEPT_EXTENTS: usize = 1024;

/// The kept blocks, as sorted extents (a file read or written in order is
/// one extent), so that a block touched again counts once and a working
/// set within the budget is never released. Its room is allocated with the
/// budget, never while blocks are touched.
struct Kept {
    /// (first block, length), sorted, neither overlapping nor touching.
    extents: Vec<(Bid, u32)>,
    blocks: u64,
}

impl Kept {
    fn new(any: bool) -> Kept {
        Kept {
            extents: Vec::with_capacity(if any { KEPT_EXTENTS } else { 0 }),
            blocks: 0,
        }
    }

    /// Index of the first extent starting after `bid`.
    fn after(&self, bid: Bid) -> usize {
        self.extents.partition_point(|e| e.0 <= bid)
    }

    fn contains(&self, bid: Bid) -> bool {
        let i = self.after(bid);
        i > 0 && {
            let (first, len) = self.extents[i - 1];
            (bid as u64) < first as u64 + len as u64
        }
    }

    /// Adds `bid`, which is not in the set; false when there is no room.
    fn insert(&mut self, bid: Bid) -> bool {
        let i = self.after(bid);
        let joins_left = i > 0 && {
            let (first, len) = self.extents[i - 1];
            first as u64 + len as u64 == bid as u64 && len < u32::MAX
        };
        let joins_right = i < self.extents.len() && self.extents[i].0 as u64 == bid as u64 + 1;
        match (joins_left, joins_right) {
            (true, true)
                if (self.extents[i - 1].1 as u64) + 1 + (self.extents[i].1 as u64)
                    <= u32::MAX as u64 =>
            {
                self.extents[i - 1].1 += 1 + self.extents[i].1;
                self.extents.remove(i);
            }
            (true, _) => self.extents[i - 1].1 += 1,
            (false, true) if self.extents[i].1 < u32::MAX => {
                self.extents[i] = (bid, self.extents[i].1 + 1);
            }
            _ if self.extents.len() < self.extents.capacity() => self.extents.insert(i, (bid, 1)),
            _ => return false,
        }
        self.blocks += 1;
        true
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Run {
    first: Bid,
    count: u32,
    /// Part of the kept blocks: never released.
    kept: bool,
    dirty: bool,
    /// Leading blocks already sent to writeback.
    sent: u32,
}

impl Run {
    fn end(&self) -> u64 {
        self.first as u64 + self.count as u64
    }

    fn contains(&self, bid: Bid) -> bool {
        bid >= self.first && (bid as u64) < self.end()
    }
}

pub(crate) struct Residency {
    window: u64,
    /// The shortest run that counts as a stream: only streams are written
    /// back early and released.
    stream: u32,
    keep: u64,
    /// The blocks kept so far, each counted once.
    kept: Kept,
    ring: [Run; RUNS],
    /// Index of the oldest run, and how many there are.
    head: usize,
    len: usize,
    /// Blocks in runs that are not kept.
    windowed: u64,
    /// Dirty blocks of windowed runs not yet sent to writeback.
    unsent: u64,
}

impl Residency {
    /// A policy for a budget of `budget_blocks` blocks of file data (at
    /// least 32: smaller budgets are raised to that, below which a few
    /// interleaved streams no longer fit the window).
    pub(crate) fn new(budget_blocks: u64) -> Residency {
        let budget = budget_blocks.max(32);
        let window = budget.min(MAX_WINDOW);
        Residency {
            window,
            // Interleaved streams share the window: with a small one each
            // stream's runs stay short, and must still count as streams.
            stream: (window * 3 / 4 / (2 * RECENT as u64)).clamp(2, STREAM) as u32,
            keep: budget - window,
            kept: Kept::new(budget > window),
            ring: [Run::default(); RUNS],
            head: 0,
            len: 0,
            windowed: 0,
            unsent: 0,
        }
    }

    /// Whether `bid` continues `run`. A kept run grows only while blocks
    /// are being kept, so one long stream cannot make everything kept; a
    /// windowed run stops at half the window, so a stream is released in
    /// parts.
    fn extended_by(&self, run: &Run, bid: Bid, keeping: bool) -> bool {
        let longest = if run.kept {
            u32::MAX as u64
        } else {
            self.window / 2
        };
        run.end() == bid as u64 && run.kept == keeping && (run.count as u64) < longest
    }

    /// Makes the run `age` runs back the newest.
    fn renew(&mut self, age: usize) {
        for a in (1..=age).rev() {
            let (older, newer) = (self.slot(a), self.slot(a - 1));
            self.ring.swap(older, newer);
        }
    }

    /// A quarter of the window: how often a stream reads ahead, and how
    /// much dirty data is sent to writeback at a time.
    fn step(&self) -> u64 {
        (self.window / 4).max(1)
    }

    /// What a stream reads ahead at a time: a step, at most 128 KiB (what
    /// the kernel reads ahead by default), so that several interleaved
    /// streams' read-ahead does not fill the window; and never more than
    /// the stream has run so far, so a short file reads little past its
    /// end.
    fn ahead(&self) -> u64 {
        self.step().min(MAX_AHEAD)
    }

    /// Index in the ring of the run `age_from_newest` runs back.
    fn slot(&self, age_from_newest: usize) -> usize {
        (self.head + self.len - 1 - age_from_newest) % RUNS
    }

    /// A data block was read (`write` false) or written: returns through
    /// `act` what the store should do now.
    #[inline]
    pub(crate) fn touch(&mut self, bid: Bid, write: bool, mut act: impl FnMut(Action)) {
        // A kept block touched again stays kept, and is not counted again.
        let keeping =
            self.kept.contains(bid) || (self.kept.blocks < self.keep && self.kept.insert(bid));
        // A block of a recent run, or the block right after one; that run
        // becomes the newest (released last).
        let recent = (0..self.len.min(RECENT)).find(|&age| {
            let run = &self.ring[self.slot(age)];
            run.contains(bid) || self.extended_by(run, bid, keeping)
        });
        if let Some(age) = recent {
            self.renew(age);
            let i = self.slot(0);
            let run = &mut self.ring[i];
            if run.contains(bid) {
                if write && !run.dirty && !run.kept {
                    run.dirty = true;
                    self.unsent += (run.count - run.sent) as u64;
                }
                return self.settle(&mut act);
            }
            run.count += 1;
            if !run.kept {
                self.windowed += 1;
                run.dirty |= write;
                if run.dirty {
                    self.unsent += 1;
                }
            }
            // Read ahead once a run is seen to be sequential (its fourth
            // block), and again every half of what is read ahead, so the
            // next blocks are always being read while these are used. Writes too: a store to a page not in
            // memory faults it in first (from the image, or zeros for
            // blocks never written), one page per fault without this.
            // What is read ahead is not tracked: clean pages the host
            // reclaims first, at most `ahead` per stream, and a stream
            // that goes on touches them and so tracks them.
            let (end, count) = (run.end(), run.count as u64);
            let ahead = self.ahead().min(count);
            if count >= 4 && count % (ahead / 2).max(1) == 0 && end <= Bid::MAX as u64 {
                act(Action::ReadAhead {
                    first: end as Bid,
                    count: ahead.min((1u64 << 32) - end) as u32,
                });
            }
            return self.settle(&mut act);
        }
        let run = Run {
            first: bid,
            count: 1,
            kept: keeping,
            dirty: write && !keeping,
            sent: 0,
        };
        self.push(run, &mut act);
        self.settle(&mut act);
    }

    /// Adds `run` as the newest, making room in the ring first.
    fn push(&mut self, run: Run, act: &mut impl FnMut(Action)) {
        if self.len == RUNS {
            self.pop_oldest(act);
        }
        let i = (self.head + self.len) % RUNS;
        self.ring[i] = run;
        self.len += 1;
        if !run.kept {
            self.windowed += run.count as u64;
            if run.dirty {
                self.unsent += run.count as u64;
            }
        }
    }

    /// Sends dirty blocks to writeback and releases old runs as the
    /// window fills.
    fn settle(&mut self, act: &mut impl FnMut(Action)) {
        if self.unsent >= self.step() {
            for k in 0..self.len {
                let run = &mut self.ring[(self.head + k) % RUNS];
                if run.dirty && run.sent < run.count && run.count >= self.stream {
                    act(Action::WriteBack {
                        first: run.first + run.sent,
                        count: run.count - run.sent,
                    });
                    run.sent = run.count;
                }
            }
            self.unsent = 0;
        }
        if self.windowed > self.window {
            while self.windowed > self.window / 2 && self.len > 1 {
                self.pop_oldest(act);
            }
        }
    }

    fn pop_oldest(&mut self, act: &mut impl FnMut(Action)) {
        let run = self.ring[self.head];
        self.head = (self.head + 1) % RUNS;
        self.len -= 1;
        if run.kept {
            return;
        }
        self.windowed -= run.count as u64;
        if run.dirty {
            self.unsent -= self.unsent.min((run.count - run.sent) as u64);
        }
        // Scattered blocks (a database's pages) are left to the host's
        // page replacement, which keeps the hot ones: only what a stream
        // went through is dropped behind it.
        if run.count < self.stream {
            return;
        }
        act(Action::Release {
            first: run.first,
            count: run.count,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touches(r: &mut Residency, bids: impl IntoIterator<Item = Bid>, write: bool) -> Vec<Action> {
        let mut out = Vec::new();
        for b in bids {
            r.touch(b, write, |a| out.push(a));
        }
        out
    }

    fn released(actions: &[Action]) -> u64 {
        actions
            .iter()
            .map(|a| match a {
                Action::Release { count, .. } => *count as u64,
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn a_stream_never_holds_more_than_the_budget() {
        let mut r = Residency::new(64);
        let acts = touches(&mut r, 1000..11_000, true);
        // Everything but the last window's worth was released, in order.
        let held = 10_000 - released(&acts);
        assert!(held <= 64, "held {held}");
        let mut next = 1000;
        for a in &acts {
            if let Action::Release { first, count } = *a {
                assert_eq!(first, next);
                next += count;
            }
        }
    }

    #[test]
    fn dirty_blocks_are_sent_to_writeback_before_they_are_released() {
        let mut r = Residency::new(64);
        let acts = touches(&mut r, 0..1000, true);
        let mut sent_to = 0u64;
        for a in &acts {
            match *a {
                Action::WriteBack { first, count } => {
                    assert_eq!(first as u64, sent_to, "sent in order, once");
                    sent_to += count as u64;
                }
                Action::Release { first, count } => {
                    assert!(
                        first as u64 + count as u64 <= sent_to,
                        "{a:?} before it was sent"
                    );
                }
                Action::ReadAhead { .. } => {}
            }
        }
        // The writes are sent in batches of a quarter window, not per block.
        let sends = acts
            .iter()
            .filter(|a| matches!(a, Action::WriteBack { .. }))
            .count();
        assert!(sends <= 1000 / 16 + 2, "{sends} sends");
    }

    #[test]
    fn a_working_set_within_the_budget_is_never_released() {
        // 1,024 blocks: a window of 256, 768 kept. Ten passes over 700
        // blocks in two files, then scattered re-reads of them.
        let mut r = Residency::new(1024);
        for _ in 0..10 {
            let acts = touches(&mut r, (5000..5350).chain(9000..9350), false);
            assert_eq!(released(&acts), 0);
        }
        let acts = touches(&mut r, (0..5000).map(|i| 5000 + (i * 7) % 350), true);
        assert_eq!(released(&acts), 0);
        assert_eq!(r.kept.blocks, 700);
        assert_eq!(r.kept.extents, vec![(5000, 350), (9000, 350)]);
    }

    #[test]
    fn kept_extents_merge_and_stop_when_full() {
        let mut k = Kept::new(true);
        for b in [10, 12, 11, 9, 13, 30] {
            assert!(!k.contains(b));
            assert!(k.insert(b));
            assert!(k.contains(b));
        }
        assert_eq!(k.extents, vec![(9, 5), (30, 1)]);
        assert!(!k.contains(8) && !k.contains(14) && !k.contains(29));
        let mut k = Kept::new(true);
        for i in 0..KEPT_EXTENTS as Bid {
            assert!(k.insert(i * 2));
        }
        assert!(!k.insert(1_000_000), "full: nothing more is kept");
        assert!(k.insert(1), "joining two extents needs no room");
        assert_eq!(k.extents.len(), KEPT_EXTENTS - 1);
        assert_eq!(k.blocks, KEPT_EXTENTS as u64 + 1);
        assert_eq!(Kept::new(false).extents.capacity(), 0);
    }

    #[test]
    fn the_first_blocks_beyond_the_window_are_kept() {
        // A budget of 512 blocks: a window of 256, 256 kept.
        let mut r = Residency::new(512);
        let acts = touches(&mut r, 0..2000, false);
        for a in &acts {
            if let Action::Release { first, .. } = *a {
                assert!(first >= 256, "a kept block was released: {a:?}");
            }
        }
        assert!(2000 - released(&acts) <= 512);
    }

    #[test]
    fn a_sequential_read_asks_for_the_blocks_ahead() {
        let mut r = Residency::new(64);
        let acts = touches(&mut r, 100..164, false);
        let ahead: Vec<_> = acts
            .iter()
            .filter_map(|a| match *a {
                Action::ReadAhead { first, count } => Some((first, count)),
                _ => None,
            })
            .collect();
        // Once the run is seen to be sequential (4 blocks): as much as it
        // ran, growing to a quarter window (16 blocks here).
        assert_eq!(&ahead[..3], &[(104, 4), (106, 6), (108, 8)]);
        assert!(ahead.iter().all(|&(_, count)| count <= 16));
        // From then on every block was asked for before it was touched.
        for b in 108..164 {
            let i = (b - 100) as usize;
            let before = touches(&mut Residency::new(64), 100..100 + i as Bid, false);
            let covered = before.iter().any(|a| {
                matches!(*a, Action::ReadAhead { first, count } if (first..first + count).contains(&b))
            });
            assert!(covered, "block {b} was not read ahead");
        }
    }

    #[test]
    fn touching_the_same_block_again_counts_once() {
        let mut r = Residency::new(8);
        let acts = touches(&mut r, std::iter::repeat_n(7, 10_000), true);
        assert_eq!(released(&acts), 0);
        assert_eq!(r.windowed, 1);
    }

    #[test]
    fn scattered_blocks_are_left_to_the_host() {
        for budget in [8, 64, 1 << 20] {
            let mut r = Residency::new(budget);
            // Every other block, written: no runs form, nothing is sent or
            // released (the host's LRU keeps a database's hot pages), and
            // the bookkeeping stays within its ring.
            let acts = touches(&mut r, (0..10_000).map(|i| i * 2), true);
            assert_eq!(acts, Vec::new(), "budget {budget}");
            assert!(r.len <= RUNS);
            assert!(r.windowed <= budget.max(32));
        }
    }

    #[test]
    fn a_stream_among_scattered_blocks_is_still_dropped_behind() {
        let mut r = Residency::new(64);
        let mut acts = Vec::new();
        for i in 0..2000 {
            r.touch(100_000 + i, false, |a| acts.push(a));
            r.touch((i * 7919) % 50_000 * 2, false, |a| acts.push(a));
        }
        assert!(released(&acts) > 1500, "released {}", released(&acts));
        for a in &acts {
            if let Action::Release { first, .. } = a {
                assert!(*first >= 100_000, "a scattered block was released: {a:?}");
            }
        }
    }

    #[test]
    fn interleaved_streams_form_runs() {
        let mut r = Residency::new(64);
        let a = (0..1000).flat_map(|i| [i, 50_000 + i]);
        let acts = touches(&mut r, a, false);
        let releases = acts
            .iter()
            .filter(|a| matches!(a, Action::Release { .. }))
            .count();
        // Two streams: releases come in runs, not a block at a time.
        assert!(releases < 200, "{releases} releases");
    }

    /// Replays `bids` (block, written) through a policy of `budget` blocks
    /// as a model of the page cache driven only by its actions: the most
    /// blocks in memory at once, and the dirty blocks neither sent to
    /// writeback nor released (which writes back) at the end.
    fn model(budget: u64, bids: &[(Bid, bool)]) -> (usize, usize) {
        use std::collections::BTreeSet;
        let mut r = Residency::new(budget);
        let (mut mem, mut dirty) = (BTreeSet::new(), BTreeSet::new());
        let mut peak = 0;
        for &(b, w) in bids {
            mem.insert(b);
            if w {
                dirty.insert(b);
            }
            r.touch(b, w, |a| match a {
                Action::ReadAhead { first, count } => mem.extend(first..first + count),
                Action::WriteBack { first, count } => (first..first + count).for_each(|x| {
                    dirty.remove(&x);
                }),
                // A release writes back (and waits for) what it drops.
                Action::Release { first, count } => (first..first + count).for_each(|x| {
                    dirty.remove(&x);
                    mem.remove(&x);
                }),
            });
            peak = peak.max(mem.len());
        }
        (peak, dirty.len())
    }

    /// `streams` sequential streams of `blocks` blocks, interleaved block
    /// by block.
    fn interleaved(streams: u32, blocks: u32, write: bool) -> Vec<(Bid, bool)> {
        (0..blocks)
            .flat_map(|i| (0..streams).map(move |s| (s * 1_000_000 + i, write)))
            .collect()
    }

    #[test]
    fn interleaved_streams_are_written_back_and_dropped() {
        for budget in [32u64, 64, 256, 2048] {
            let keep = budget.saturating_sub(MAX_WINDOW) as usize;
            for streams in [1, 2, 3, 4, 6, 8] {
                let (peak, dirty) = model(budget, &interleaved(streams, 8000, true));
                // What is left dirty is what is kept and what is still in
                // the window; nothing in between slipped through.
                assert!(
                    dirty <= keep + budget.min(MAX_WINDOW) as usize,
                    "budget {budget}, {streams} writers: {dirty} dirty never sent"
                );
                assert!(
                    peak <= 2 * budget as usize + 64,
                    "budget {budget}, {streams} writers: {peak} blocks at the peak"
                );
                let (peak, _) = model(budget, &interleaved(streams, 8000, false));
                assert!(
                    peak <= 2 * budget as usize + 64,
                    "budget {budget}, {streams} readers: {peak} blocks at the peak"
                );
            }
        }
    }

    #[test]
    fn random_touches_keep_the_bookkeeping_consistent() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..400 {
            let budget = match round % 6 {
                0 => 0,
                1 => 8,
                2 => 9 + rnd() % 300,
                3 => u64::MAX,
                4 => 1 << 20,
                _ => 256 + rnd() % 5000,
            };
            let mut r = Residency::new(budget);
            let mut cur: Bid = (rnd() as Bid) | 0xffff_0000;
            for _ in 0..20_000 {
                let bid = match rnd() % 10 {
                    0..=5 => {
                        cur = cur.wrapping_add(1);
                        cur
                    }
                    6 => {
                        cur = rnd() as Bid;
                        cur
                    }
                    7 => u32::MAX - (rnd() % 4) as Bid,
                    8 => (rnd() % 64) as Bid,
                    _ => cur.wrapping_sub((rnd() % 20) as Bid),
                };
                let write = rnd() % 2 == 0;
                r.touch(bid, write, |a| match a {
                    Action::ReadAhead { first, count }
                    | Action::WriteBack { first, count }
                    | Action::Release { first, count } => {
                        assert!(count > 0);
                        let _ = first;
                    }
                });
                assert!(r.len <= RUNS && r.len >= 1);
                let w: u64 = (0..r.len)
                    .map(|k| r.ring[(r.head + k) % RUNS])
                    .filter(|run| !run.kept)
                    .map(|run| run.count as u64)
                    .sum();
                assert_eq!(w, r.windowed);
                assert!(r.kept.blocks <= r.keep);
                for k in 0..r.len {
                    let run = r.ring[(r.head + k) % RUNS];
                    assert!(run.sent <= run.count && run.count >= 1);
                    assert!(run.end() <= 1u64 << 32);
                }
                for e in r.kept.extents.windows(2) {
                    assert!((e[0].0 as u64 + e[0].1 as u64) <= e[1].0 as u64);
                }
                assert!(
                    r.windowed <= r.window || r.len == 1,
                    "{} > {}",
                    r.windowed,
                    r.window
                );
            }
        }
    }
}

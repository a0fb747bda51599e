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
//!   holds more than 3/4 W, its oldest runs are released until it holds W/2,
//!   so a stream never holds more than the budget, and a release is a few
//!   system calls per W/2 blocks.
//! - the rest, B - W, is *kept* (MRU-style): the first blocks touched
//!   (each counted once, up to 1,024 extents of them) are never released
//!   and stay resident as long as the host lets them. A workload that goes
//!   over more data than the budget again and again finds these in memory,
//!   and one within the budget is never released at all.
//! - only streams (runs of at least 8 blocks) are dropped: scattered blocks
//!   (a database's pages) are left to the host's page replacement, which
//!   keeps the hot ones; a short run leaving the ring is only forgotten.
//! - dirty streams are sent to writeback (without waiting) once a quarter
//!   of the window is dirty and not yet sent, so a release seldom waits for
//!   the disk; a release still writes back and waits for what it drops, so
//!   nothing written is ever lost by dropping it.
//! - a read or write that continues a run asks for the next W/4 blocks
//!   ahead (within the window: runs are released once they hold 3/4 of
//!   it), at its fourth block and every W/4 blocks after (a store to a
//!   page not in memory faults it in first, as a read does).
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
const RECENT: usize = 8;

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
    /// least 8: smaller budgets are raised to that).
    pub(crate) fn new(budget_blocks: u64) -> Residency {
        let budget = budget_blocks.max(8);
        let window = budget.min(MAX_WINDOW);
        Residency {
            window,
            stream: (window / 2).min(STREAM) as u32,
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

    /// A quarter of the window: what is read ahead at a time, and how
    /// much dirty data is sent to writeback at a time.
    fn step(&self) -> u64 {
        (self.window / 4).max(1)
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
            // Read ahead a step once a run is seen to be sequential (its
            // fourth block) and at every step after: the next step is read
            // while this one is used. Writes too: a store to a page not in
            // memory faults it in first (from the image, or zeros for
            // blocks never written), one page per fault without this. The
            // step read ahead is within the window (`settle`).
            let (end, count) = (run.end(), run.count as u64);
            let step = self.step();
            if (count == 4 || count % step == 0) && end <= Bid::MAX as u64 {
                act(Action::ReadAhead {
                    first: end as Bid,
                    count: step as u32,
                });
            }
            return self.settle(&mut act);
        }
        if self.len == RUNS {
            self.pop_oldest(&mut act);
        }
        let run = Run {
            first: bid,
            count: 1,
            kept: keeping,
            dirty: write && !keeping,
            sent: 0,
        };
        let i = (self.head + self.len) % RUNS;
        self.ring[i] = run;
        self.len += 1;
        if !keeping {
            self.windowed += 1;
            self.unsent += write as u64;
        }
        self.settle(&mut act);
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
        // A step of the window is kept for what was read ahead.
        if self.windowed > self.window - self.step() {
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
        assert!(sends <= 1000 / 16 + 1, "{sends} sends");
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
        assert!(!ahead.is_empty());
        // Once the run is seen to be sequential (4 blocks), then every
        // quarter window.
        assert_eq!(ahead[0], (104, 16));
        for (first, count) in ahead {
            assert_eq!(count, 16);
            assert!((100..=164).contains(&first));
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
            assert!(r.windowed <= budget.max(8));
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
}

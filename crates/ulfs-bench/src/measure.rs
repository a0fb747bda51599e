//! Repetition policy: how many times each cell runs and which number is
//! reported.
//!
//! The machines are shared and noisy, so the peers of one cell are run in
//! interleaved rounds (one repetition of each per round, rotating who goes
//! first): a burst of noise then hits all peers alike instead of one of
//! them, which is what keeps the ratios meaningful. The median over
//! repetitions is reported because it ignores the occasional descheduled
//! repetition that would dominate a mean.

use std::io;
use std::time::Duration;

pub struct Budget {
    /// Never fewer repetitions than this, however slow a cell is.
    pub min_reps: usize,
    /// Bounds the memory and time of cells whose repetitions are tiny.
    pub max_reps: usize,
    /// Stop once the slowest peer has spent this long being measured.
    pub target: Duration,
}

impl Budget {
    pub fn full() -> Self {
        Budget {
            min_reps: 5,
            max_reps: 100_000,
            target: Duration::from_millis(200),
        }
    }

    pub fn quick() -> Self {
        Budget {
            min_reps: 2,
            max_reps: 20,
            target: Duration::from_millis(2),
        }
    }

    /// The fsync workload: every repetition waits for real disk flushes
    /// (seconds for 1,000 files), so a fixed, small number of them.
    pub fn fsync(quick: bool) -> Self {
        let reps = if quick { 2 } else { 5 };
        Budget {
            min_reps: reps,
            max_reps: reps,
            target: Duration::ZERO,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub ns_per_op: f64,
    pub reps: usize,
}

/// One repetition of one peer: does untimed setup itself and returns the
/// timed part.
pub type Rep<'a> = Box<dyn FnMut() -> io::Result<Duration> + 'a>;

/// Warms every peer up once, then runs interleaved rounds until the budget
/// is spent. Returns one sample per peer, in the order given.
pub fn interleaved(
    budget: &Budget,
    ops_per_rep: u64,
    peers: &mut [Rep<'_>],
) -> io::Result<Vec<Sample>> {
    for rep in peers.iter_mut() {
        rep()?;
    }
    let n = peers.len();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); n];
    let mut spent = vec![Duration::ZERO; n];
    let mut round = 0;
    loop {
        for k in 0..n {
            let i = (round + k) % n;
            let d = (peers[i])()?;
            times[i].push(d);
            spent[i] += d;
        }
        round += 1;
        let slowest = spent.iter().max().copied().unwrap_or_default();
        if round >= budget.max_reps || (round >= budget.min_reps && slowest >= budget.target) {
            break;
        }
    }
    Ok(times
        .into_iter()
        .map(|t| Sample {
            ns_per_op: median_ns(t) / ops_per_rep as f64,
            reps: round,
        })
        .collect())
}

/// One peer of a batched cell: `Some(i)` runs batch `i` of a repetition
/// and returns its time; `None` ends the repetition (untimed cleanup).
pub type BatchRep<'a> = Box<dyn FnMut(Option<usize>) -> io::Result<Duration> + 'a>;

/// Like [`interleaved`], for cells whose repetitions take seconds (the
/// fsync workload): a repetition is split into `batches` batches and the
/// peers take turns batch by batch, rotating who goes first, so a burst of
/// disk noise lasting a second or two hits every peer instead of landing
/// in one peer's repetition. A repetition's time is the sum of its batches.
pub fn interleaved_batches(
    budget: &Budget,
    ops_per_rep: u64,
    batches: usize,
    peers: &mut [BatchRep<'_>],
) -> io::Result<Vec<Sample>> {
    let n = peers.len();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); n];
    let mut spent = vec![Duration::ZERO; n];
    // Round 0 is the warm-up and is not recorded.
    let mut round = 0;
    loop {
        let mut rep = vec![Duration::ZERO; n];
        for b in 0..batches {
            for k in 0..n {
                let i = (round + b + k) % n;
                rep[i] += (peers[i])(Some(b))?;
            }
        }
        for peer in peers.iter_mut() {
            peer(None)?;
        }
        if round > 0 {
            for (i, d) in rep.into_iter().enumerate() {
                times[i].push(d);
                spent[i] += d;
            }
        }
        round += 1;
        let reps = round - 1;
        let slowest = spent.iter().max().copied().unwrap_or_default();
        if reps >= budget.max_reps || (reps >= budget.min_reps && slowest >= budget.target) {
            break;
        }
    }
    Ok(times
        .into_iter()
        .map(|t| Sample {
            ns_per_op: median_ns(t) / ops_per_rep as f64,
            reps: round - 1,
        })
        .collect())
}

fn median_ns(mut t: Vec<Duration>) -> f64 {
    t.sort_unstable();
    let m = t.len() / 2;
    if t.len() % 2 == 1 {
        t[m].as_nanos() as f64
    } else {
        (t[m - 1].as_nanos() + t[m].as_nanos()) as f64 / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        let ms = |v: &[u64]| v.iter().map(|&x| Duration::from_nanos(x)).collect();
        assert_eq!(median_ns(ms(&[5, 1, 9])), 5.0);
        assert_eq!(median_ns(ms(&[4, 1, 9, 2])), 3.0);
    }
}

//! The LEASE answer's record (op.rs): a read lease (`ulfs::fs::changes`)
//! as bytes in the data area, little-endian.
//!
//! ```text
//! 0   u32 slot        the change counter's slot on the board
//! 4   u32 count       runs that follow
//! 8   u64 generation  the counter's value when the lease was taken
//! 16  u64 size        the file's size then
//! 24  u64 reserved    0
//! 32  count × { u64 first block, u64 image block (0: a hole), u32 blocks, u32 0 }
//! ```

use ulfs::fs::changes::{Lease, LeaseRun, SLOTS};

const HEADER: usize = 32;
const RUN: usize = 24;

/// The bytes a lease of `runs` runs takes.
pub const fn lease_len(runs: usize) -> usize {
    HEADER + runs * RUN
}

/// How many runs fit in `bytes`.
pub const fn runs_fitting(bytes: usize) -> usize {
    bytes.saturating_sub(HEADER) / RUN
}

/// Writes `lease` into `out`; None when it does not fit.
pub fn encode(lease: &Lease, out: &mut [u8]) -> Option<usize> {
    let n = lease_len(lease.runs.len());
    let out = out.get_mut(..n)?;
    out[0..4].copy_from_slice(&lease.slot.to_le_bytes());
    out[4..8].copy_from_slice(&(lease.runs.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&lease.generation.to_le_bytes());
    out[16..24].copy_from_slice(&lease.size.to_le_bytes());
    out[24..32].fill(0);
    for (r, b) in lease.runs.iter().zip(out[HEADER..].chunks_exact_mut(RUN)) {
        b[0..8].copy_from_slice(&r.first.to_le_bytes());
        b[8..16].copy_from_slice(&r.bid.to_le_bytes());
        b[16..20].copy_from_slice(&r.blocks.to_le_bytes());
        b[20..24].fill(0);
    }
    Some(n)
}

/// Reads a lease back; None for bytes that are not one (a short record, a
/// slot off the board, runs out of order or overlapping, or an empty run):
/// a client trusts nothing of a malformed answer.
pub fn decode(bytes: &[u8]) -> Option<Lease> {
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let head = bytes.get(..HEADER)?;
    let slot = u32_at(head, 0);
    let count = u32_at(head, 4) as usize;
    if slot >= SLOTS {
        return None;
    }
    let body = bytes.get(HEADER..lease_len(count))?;
    let mut runs = Vec::with_capacity(count);
    let mut next: Option<u64> = None;
    for b in body.chunks_exact(RUN) {
        let run = LeaseRun {
            first: u64_at(b, 0),
            bid: u64_at(b, 8),
            blocks: u32_at(b, 16),
        };
        if run.blocks == 0 || next.is_some_and(|n| n != run.first) {
            return None;
        }
        next = Some(run.first.checked_add(run.blocks as u64)?);
        runs.push(run);
    }
    Some(Lease {
        slot,
        generation: u64_at(head, 8),
        size: u64_at(head, 16),
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lease {
        Lease {
            slot: 12,
            generation: 7,
            size: 3 * 4096 + 5,
            runs: vec![
                LeaseRun {
                    first: 0,
                    blocks: 2,
                    bid: 100,
                },
                LeaseRun {
                    first: 2,
                    blocks: 2,
                    bid: 0,
                },
            ],
        }
    }

    #[test]
    fn a_lease_goes_over_and_comes_back_whole() {
        let mut b = vec![0u8; 256];
        let n = encode(&sample(), &mut b).unwrap();
        assert_eq!(n, lease_len(2));
        assert_eq!(decode(&b[..n]), Some(sample()));
        assert_eq!(encode(&sample(), &mut b[..n - 1]), None);
        assert_eq!(runs_fitting(n), 2);
    }

    #[test]
    fn malformed_leases_are_refused() {
        let mut b = vec![0u8; 256];
        let n = encode(&sample(), &mut b).unwrap();
        assert_eq!(decode(&b[..n - 1]), None, "short");
        let mut gap = b.clone();
        gap[HEADER + RUN..HEADER + RUN + 8].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(decode(&gap[..n]), None, "a gap between runs");
        let mut empty = b.clone();
        empty[HEADER + 16..HEADER + 20].fill(0);
        assert_eq!(decode(&empty[..n]), None, "an empty run");
        let mut slot = b.clone();
        slot[0..4].copy_from_slice(&SLOTS.to_le_bytes());
        assert_eq!(decode(&slot[..n]), None, "a slot off the board");
        let mut many = b.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&many), None, "more runs than bytes");
    }
}

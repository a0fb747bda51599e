//! Crash points and the fates of blocks in flight (lost, written, torn):
//! which crash images to build at a point, and their compact notation.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointId {
    /// At the end of call k (0-based).
    After(usize),
    /// Inside the flush that is the n-th of the disk (`flush_count` before it).
    Flush(u64),
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointId::After(k) => write!(f, "a{k}"),
            PointId::Flush(n) => write!(f, "f{n}"),
        }
    }
}

impl PointId {
    pub fn parse(s: &str) -> PointId {
        let (kind, n) = s.split_at(1);
        match kind {
            "a" => PointId::After(n.parse().expect("point number")),
            "f" => PointId::Flush(n.parse().expect("point number")),
            _ => panic!("crash point `{s}`: expected a<k> or f<n>"),
        }
    }
    pub fn code(&self) -> u64 {
        match *self {
            PointId::After(k) => (k as u64) << 1,
            PointId::Flush(n) => (n << 1) | 1,
        }
    }
}

pub fn fate_str(f: Fate) -> String {
    match f {
        Fate::Lost => "L".into(),
        Fate::Written => "W".into(),
        Fate::Torn(m) => format!("T{m:02x}"),
    }
}

/// `3-5W,7L,9T0f`; `-` when there is nothing.
pub fn fmt_fates(f: &[(u32, Fate)]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < f.len() {
        let (b, fate) = f[i];
        let mut j = i;
        if !matches!(fate, Fate::Torn(_)) {
            while j + 1 < f.len() && f[j + 1].1 == fate && f[j + 1].0 == f[j].0 + 1 {
                j += 1;
            }
        }
        if j > i {
            out.push(format!("{b}-{}{}", f[j].0, fate_str(fate)));
        } else {
            out.push(format!("{b}{}", fate_str(fate)));
        }
        i = j + 1;
    }
    if out.is_empty() {
        "-".into()
    } else {
        out.join(",")
    }
}

pub fn parse_fates(s: &str) -> Vec<(u32, Fate)> {
    let mut out = Vec::new();
    if s == "-" || s.is_empty() {
        return out;
    }
    for item in s.split(',') {
        let pos = item
            .find(['L', 'W', 'T'])
            .unwrap_or_else(|| panic!("fate `{item}`"));
        let (ids, fate) = item.split_at(pos);
        let fate = match &fate[..1] {
            "L" => Fate::Lost,
            "W" => Fate::Written,
            _ => Fate::Torn(u8::from_str_radix(&fate[1..], 16).expect("torn mask")),
        };
        let (a, b) = match ids.split_once('-') {
            Some((a, b)) => (a.parse().expect("bid"), b.parse().expect("bid")),
            None => {
                let a: u32 = ids.parse().expect("bid");
                (a, a)
            }
        };
        for bid in a..=b {
            out.push((bid, fate));
        }
    }
    out
}

/// How many crash states to try at each point.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Enumerate every lost/written subset up to this many changed blocks.
    pub full_upto: usize,
    /// Otherwise this many seeded random subsets (plus all-lost, all-written).
    pub random: usize,
    /// Extra states with torn blocks.
    pub torn: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    pub mode: Mode,
    pub at_flush: Budget,
    pub after_op: Budget,
    /// Mode none only: check every crash state with blocks in flight for
    /// what that mode promises (fsck --repair brings it back to a
    /// consistent image), instead of the synced state alone.
    pub none_repair: bool,
}

impl Cfg {
    pub fn ci() -> Cfg {
        Cfg {
            mode: mode_under_test(),
            at_flush: Budget {
                full_upto: 5,
                random: 24,
                torn: 6,
            },
            after_op: Budget {
                full_upto: 1,
                random: 1,
                torn: 1,
            },
            none_repair: false,
        }
    }
    pub fn long() -> Cfg {
        Cfg {
            mode: mode_under_test(),
            at_flush: Budget {
                full_upto: 10,
                random: 128,
                torn: 32,
            },
            after_op: Budget {
                full_upto: 3,
                random: 6,
                torn: 3,
            },
            none_repair: false,
        }
    }
}

/// `ULFS_CRASH_MODE=none` runs the harness on mode `none`, where only the
/// state right after an fsync with every later write lost is promised.
pub fn mode_under_test() -> Mode {
    match std::env::var("ULFS_CRASH_MODE").as_deref() {
        Ok("none") => Mode::None,
        _ => Mode::Journal,
    }
}

/// Fates for the changed blocks (bid, sectors that differ).
pub fn fate_sets(changed: &[(u32, u8)], rng: &mut Rng, b: Budget) -> Vec<Vec<Fate>> {
    let n = changed.len();
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    if n <= b.full_upto {
        for m in 0..1u64 << n {
            out.push(
                (0..n)
                    .map(|i| {
                        if m >> i & 1 == 1 {
                            Fate::Written
                        } else {
                            Fate::Lost
                        }
                    })
                    .collect(),
            );
        }
    } else {
        out.push(vec![Fate::Lost; n]);
        out.push(vec![Fate::Written; n]);
        for _ in 0..b.random {
            let p = rng.below(101);
            out.push(
                (0..n)
                    .map(|_| {
                        if rng.below(100) < p {
                            Fate::Written
                        } else {
                            Fate::Lost
                        }
                    })
                    .collect(),
            );
        }
    }
    // Torn: a block whose differing sectors are only partly written.
    let tearable: Vec<usize> = (0..n).filter(|&i| changed[i].1.count_ones() >= 2).collect();
    if !tearable.is_empty() {
        for _ in 0..b.torn {
            let p = rng.below(101);
            let mut v: Vec<Fate> = (0..n)
                .map(|_| {
                    if rng.below(100) < p {
                        Fate::Written
                    } else {
                        Fate::Lost
                    }
                })
                .collect();
            let k = 1 + rng.below(tearable.len().min(3) as u64) as usize;
            for _ in 0..k {
                let i = *rng.pick(&tearable);
                let diff = changed[i].1;
                let mask = loop {
                    let m = rng.next() as u8 & diff;
                    if m != 0 && m != diff {
                        break m;
                    }
                };
                v[i] = Fate::Torn(mask);
            }
            out.push(v);
        }
    }
    out
}

/// Blocks written since the last flush whose contents differ from the
/// durable copy, with the mask of differing sectors. (The fate of an
/// unchanged block does not matter.)
pub fn changed_blocks(d: &SimDisk) -> Vec<(u32, u8)> {
    let (dur, cur) = (d.durable(), d.current());
    d.unflushed()
        .filter_map(|bid| {
            let off = bid as usize * BLOCK_SIZE;
            let mut mask = 0u8;
            for s in 0..SECTORS {
                let r = off + s * 512..off + (s + 1) * 512;
                if dur[r.clone()] != cur[r] {
                    mask |= 1 << s;
                }
            }
            (mask != 0).then_some((bid, mask))
        })
        .collect()
}

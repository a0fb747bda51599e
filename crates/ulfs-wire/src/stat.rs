//! Fixed byte records for the stat family's answers: `WireStat` (every
//! field of `ulfs::Stat` plus a statx mask) and `WireStatFs` (every field
//! of `ulfs::StatFs`), and the 32-byte times argument of UTIMENSAT.
//!
//! Why not send `libc::stat`: its layout differs between architectures and
//! has no birth time, and a client converts to whichever struct its caller
//! asked for (`Stat::to_libc`, `Statx::to_libc`). The records are
//! little-endian byte arrays with explicit offsets, so their meaning does
//! not depend on a Rust struct's layout.
//!
//! `WireStat` layout (128 bytes):
//!
//! ```text
//!   0 dev u64      8 ino u64     16 nlink u64   24 rdev u64
//!  32 size u64    40 blocks u64  48 blksize u64
//!  56 mode u32    60 uid u32     64 gid u32     68 statx mask u32
//!  72 atime.sec i64   80 mtime.sec i64   88 ctime.sec i64   96 btime.sec i64
//! 104 atime.nsec u32 108 mtime.nsec u32 112 ctime.nsec u32 116 btime.nsec u32
//! 120 reserved (zero)
//! ```
//!
//! Nanoseconds travel as `u32`: a timestamp's are in `0..1_000_000_000`
//! (that is what lets the record fit 128 bytes). A value outside that
//! range, which no stat produces, is sent clamped.

use ulfs::{Stat, StatFs, Statx, Timespec};

/// Size of both records.
pub const WIRE_STAT_LEN: usize = 128;

/// `ulfs::Stat` (and a statx mask) as 128 little-endian bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireStat(pub [u8; WIRE_STAT_LEN]);

/// `ulfs::StatFs` as 128 little-endian bytes: its ten `u64` fields in
/// declaration order (`fs_type, bsize, blocks, bfree, bavail, files,
/// ffree, fsid, namelen, frsize`), then 48 reserved zero bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireStatFs(pub [u8; WIRE_STAT_LEN]);

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn nsec_to_wire(nsec: i64) -> u32 {
    nsec.clamp(0, 999_999_999) as u32
}

impl WireStat {
    /// A stat's record; `mask` is the statx mask (0 for `stat`/`fstat`).
    pub fn new(st: &Stat, mask: u32) -> WireStat {
        let mut b = [0u8; WIRE_STAT_LEN];
        put_u64(&mut b, 0, st.dev);
        put_u64(&mut b, 8, st.ino);
        put_u64(&mut b, 16, st.nlink);
        put_u64(&mut b, 24, st.rdev);
        put_u64(&mut b, 32, st.size);
        put_u64(&mut b, 40, st.blocks);
        put_u64(&mut b, 48, st.blksize);
        put_u32(&mut b, 56, st.mode);
        put_u32(&mut b, 60, st.uid);
        put_u32(&mut b, 64, st.gid);
        put_u32(&mut b, 68, mask);
        for (i, t) in [st.atime, st.mtime, st.ctime, st.btime].iter().enumerate() {
            put_u64(&mut b, 72 + 8 * i, t.sec as u64);
            put_u32(&mut b, 104 + 4 * i, nsec_to_wire(t.nsec));
        }
        WireStat(b)
    }

    pub fn from_stat(st: &Stat) -> WireStat {
        WireStat::new(st, 0)
    }

    pub fn from_statx(x: &Statx) -> WireStat {
        WireStat::new(&x.stat, x.mask)
    }

    pub fn stat(&self) -> Stat {
        let b = &self.0;
        let time = |i: usize| Timespec {
            sec: get_u64(b, 72 + 8 * i) as i64,
            nsec: get_u32(b, 104 + 4 * i) as i64,
        };
        Stat {
            dev: get_u64(b, 0),
            ino: get_u64(b, 8),
            nlink: get_u64(b, 16),
            rdev: get_u64(b, 24),
            size: get_u64(b, 32),
            blocks: get_u64(b, 40),
            blksize: get_u64(b, 48),
            mode: get_u32(b, 56),
            uid: get_u32(b, 60),
            gid: get_u32(b, 64),
            atime: time(0),
            mtime: time(1),
            ctime: time(2),
            btime: time(3),
        }
    }

    pub fn mask(&self) -> u32 {
        get_u32(&self.0, 68)
    }

    pub fn statx(&self) -> Statx {
        Statx {
            mask: self.mask(),
            stat: self.stat(),
        }
    }

    /// The record from the first 128 bytes of `b`; `None` if `b` is
    /// shorter.
    pub fn from_bytes(b: &[u8]) -> Option<WireStat> {
        Some(WireStat(b.get(..WIRE_STAT_LEN)?.try_into().ok()?))
    }

    pub fn as_bytes(&self) -> &[u8; WIRE_STAT_LEN] {
        &self.0
    }
}

impl WireStatFs {
    pub fn new(s: &StatFs) -> WireStatFs {
        let mut b = [0u8; WIRE_STAT_LEN];
        let fields = [
            s.fs_type, s.bsize, s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.fsid, s.namelen,
            s.frsize,
        ];
        for (i, v) in fields.into_iter().enumerate() {
            put_u64(&mut b, 8 * i, v);
        }
        WireStatFs(b)
    }

    pub fn statfs(&self) -> StatFs {
        let f = |i: usize| get_u64(&self.0, 8 * i);
        StatFs {
            fs_type: f(0),
            bsize: f(1),
            blocks: f(2),
            bfree: f(3),
            bavail: f(4),
            files: f(5),
            ffree: f(6),
            fsid: f(7),
            namelen: f(8),
            frsize: f(9),
        }
    }

    pub fn from_bytes(b: &[u8]) -> Option<WireStatFs> {
        Some(WireStatFs(b.get(..WIRE_STAT_LEN)?.try_into().ok()?))
    }

    pub fn as_bytes(&self) -> &[u8; WIRE_STAT_LEN] {
        &self.0
    }
}

/// Size of UTIMENSAT/FUTIMENS's `p2`.
pub const TIMES_LEN: usize = 32;

/// `[atime, mtime]` as UTIMENSAT's `p2` (four LE `i64`; nsec may be
/// `UTIME_NOW`/`UTIME_OMIT`, which is why these stay `i64`).
pub fn encode_times(t: &[Timespec; 2]) -> [u8; TIMES_LEN] {
    let mut b = [0u8; TIMES_LEN];
    for (i, v) in [t[0].sec, t[0].nsec, t[1].sec, t[1].nsec]
        .into_iter()
        .enumerate()
    {
        put_u64(&mut b, 8 * i, v as u64);
    }
    b
}

/// The inverse of [`encode_times`]: `None` for an empty `p2` (NULL times),
/// EINVAL for any other length than 32.
pub fn decode_times(b: &[u8]) -> Result<Option<[Timespec; 2]>, ulfs::Errno> {
    match b.len() {
        0 => Ok(None),
        TIMES_LEN => {
            let v = |i: usize| get_u64(b, 8 * i) as i64;
            Ok(Some([
                Timespec {
                    sec: v(0),
                    nsec: v(1),
                },
                Timespec {
                    sec: v(2),
                    nsec: v(3),
                },
            ]))
        }
        _ => Err(ulfs::Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts() -> impl Strategy<Value = Timespec> {
        (any::<i64>(), 0i64..1_000_000_000).prop_map(|(sec, nsec)| Timespec { sec, nsec })
    }

    prop_compose! {
        fn stat()(
            ids in any::<[u64; 7]>(),
            small in any::<[u32; 3]>(),
            times in [ts(), ts(), ts(), ts()],
        ) -> Stat {
            Stat {
                dev: ids[0], ino: ids[1], nlink: ids[2], rdev: ids[3], size: ids[4],
                blocks: ids[5], blksize: ids[6],
                mode: small[0], uid: small[1], gid: small[2],
                atime: times[0], mtime: times[1], ctime: times[2], btime: times[3],
            }
        }
    }

    proptest! {
        #[test]
        fn wire_stat_round_trips(st in stat(), mask in any::<u32>()) {
            let w = WireStat::new(&st, mask);
            prop_assert_eq!(w.stat(), st);
            prop_assert_eq!(w.mask(), mask);
            prop_assert_eq!(&w.0[120..], &[0u8; 8][..]);
            let back = WireStat::from_bytes(w.as_bytes()).unwrap();
            prop_assert_eq!(back.statx(), Statx { mask, stat: st });
        }

        #[test]
        fn wire_statfs_round_trips(v in any::<[u64; 10]>()) {
            let s = StatFs {
                fs_type: v[0], bsize: v[1], blocks: v[2], bfree: v[3], bavail: v[4],
                files: v[5], ffree: v[6], fsid: v[7], namelen: v[8], frsize: v[9],
            };
            let w = WireStatFs::new(&s);
            prop_assert_eq!(WireStatFs::from_bytes(&w.0).unwrap().statfs(), s);
            prop_assert_eq!(&w.0[80..], &[0u8; 48][..]);
        }

        #[test]
        fn times_round_trip(a in any::<[i64; 4]>()) {
            let t = [Timespec { sec: a[0], nsec: a[1] }, Timespec { sec: a[2], nsec: a[3] }];
            prop_assert_eq!(decode_times(&encode_times(&t)), Ok(Some(t)));
        }
    }

    #[test]
    fn layout_is_little_endian_at_the_documented_offsets() {
        let st = Stat {
            dev: 0x0102_0304_0506_0708,
            mode: 0o100644,
            atime: Timespec { sec: -1, nsec: 5 },
            btime: Timespec {
                sec: 7,
                nsec: 999_999_999,
            },
            ..Stat::default()
        };
        let w = WireStat::new(&st, 0x7ff);
        assert_eq!(&w.0[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&w.0[56..60], &0o100644u32.to_le_bytes());
        assert_eq!(&w.0[68..72], &0x7ffu32.to_le_bytes());
        assert_eq!(&w.0[72..80], &[0xff; 8]);
        assert_eq!(&w.0[104..108], &5u32.to_le_bytes());
        assert_eq!(&w.0[96..104], &7u64.to_le_bytes());
        assert_eq!(&w.0[116..120], &999_999_999u32.to_le_bytes());
        assert_eq!(WireStat::from_bytes(&w.0[..127]), None);
    }

    #[test]
    fn out_of_range_nanoseconds_are_clamped() {
        let st = Stat {
            mtime: Timespec { sec: 1, nsec: -3 },
            ctime: Timespec {
                sec: 1,
                nsec: 5_000_000_000,
            },
            ..Stat::default()
        };
        let back = WireStat::from_stat(&st).stat();
        assert_eq!(back.mtime.nsec, 0);
        assert_eq!(back.ctime.nsec, 999_999_999);
    }

    #[test]
    fn times_lengths() {
        assert_eq!(decode_times(&[]), Ok(None));
        assert_eq!(decode_times(&[0; 31]), Err(ulfs::Errno::EINVAL));
        assert_eq!(decode_times(&[0; 33]), Err(ulfs::Errno::EINVAL));
    }
}

//! The bytes of a channel: one memfd the server creates, sizes, seals and
//! shares with exactly one client.
//!
//! ```text
//! 0          Header (4 KiB): magic, version, geometry (informative), then
//!            each ring index and flag alone on a 64-byte line
//! 4096       SQ: sq_entries x 64-byte Req
//!            CQ: cq_entries x 32-byte Cqe
//! data_off   data area, data_len bytes, 4 KiB aligned
//! ```
//!
//! Everything here is a layout description: offsets, sizes and the
//! `#[repr(C)]` records. Both sides compute the same offsets from a
//! [`Geometry`]; the server never reads the geometry back from shared
//! memory (the client could have rewritten it), the client checks it once
//! at attach time. Each index gets its own cache line so that the two
//! processes never bounce a line one of them only reads: the client's
//! `sq_tail` and the server's `cq_tail` are written by one side each.
//!
//! Records are in the machine's byte order: both ends run on one machine.
//! (`WireStat` is explicitly little-endian because it is a byte record,
//! not a struct.)

use std::mem::{offset_of, size_of};
use std::sync::atomic::AtomicU32;

use ulfs::Errno;

/// First eight bytes of every channel.
pub const MAGIC: [u8; 8] = *b"ulfschn1";

/// Bytes before the SQ: the header's page.
pub const HEADER_LEN: usize = 4096;

/// Alignment of the data area: a page on the machines ulfs runs on, so a
/// read of a whole page in the data area touches one page.
pub const DATA_ALIGN: usize = 4096;

pub const DEFAULT_SQ_ENTRIES: u32 = 64;
pub const DEFAULT_CQ_ENTRIES: u32 = 64;
/// A 1 MiB data area: one request moves up to this much.
pub const DEFAULT_DATA_LEN: u32 = 1 << 20;
/// The most a HELLO may ask for (`--max-channel-bytes` may lower it).
pub const MAX_DATA_LEN: u32 = 64 << 20;
/// The least a channel has: a page, so a path of PATH_MAX always fits.
pub const MIN_DATA_LEN: u32 = 4096;
/// Ring sizes are powers of two up to these: the indices are free-running
/// `u32`s and a slot is `index % entries`, which stays continuous across
/// the wrap at 2^32 only for a power of two.
pub const MAX_SQ_ENTRIES: u32 = 1024;
pub const MAX_CQ_ENTRIES: u32 = 4096;

/// `server_state`: the server is serving the channel.
pub const STATE_ALIVE: u32 = 1;
/// `server_state`: the server let the channel go (shutdown, or the client
/// broke the ring protocol); nothing more will be answered.
pub const STATE_GONE: u32 = 2;

/// One index or flag, alone on its cache line.
#[repr(C, align(64))]
pub struct Line {
    pub value: AtomicU32,
}

/// The header page's layout. Never referenced as a whole in shared memory
/// (its plain fields may be rewritten by the client at any time): the
/// offsets below are taken from it, and each atomic is reached by its
/// offset.
#[repr(C)]
pub struct Header {
    pub magic: [u8; 8],
    pub version: u32,
    pub sq_entries: u32,
    pub cq_entries: u32,
    _pad0: u32,
    pub data_off: u64,
    pub data_len: u64,
    _pad1: [u8; 24],
    /// Requests published by the client (client writes, Release).
    pub sq_tail: Line,
    /// Requests taken by the server (server writes, Release).
    pub sq_head: Line,
    /// Completions published by the server; the client's futex word.
    pub cq_tail: Line,
    /// Completions taken by the client.
    pub cq_head: Line,
    /// Nonzero while the server may be asleep on this channel: a client
    /// that submits then writes the kick eventfd.
    pub server_idle: Line,
    /// Nonzero while the client may be asleep in FUTEX_WAIT on `cq_tail`:
    /// the server then wakes it after publishing.
    pub client_waiting: Line,
    /// `STATE_ALIVE` or `STATE_GONE`.
    pub server_state: Line,
    /// Reserved for a lock-release sequence (plan §1.5); zero for now.
    pub lock_seq: Line,
}

pub const OFF_MAGIC: usize = offset_of!(Header, magic);
pub const OFF_VERSION: usize = offset_of!(Header, version);
pub const OFF_SQ_ENTRIES: usize = offset_of!(Header, sq_entries);
pub const OFF_CQ_ENTRIES: usize = offset_of!(Header, cq_entries);
pub const OFF_DATA_OFF: usize = offset_of!(Header, data_off);
pub const OFF_DATA_LEN: usize = offset_of!(Header, data_len);
pub const OFF_SQ_TAIL: usize = offset_of!(Header, sq_tail);
pub const OFF_SQ_HEAD: usize = offset_of!(Header, sq_head);
pub const OFF_CQ_TAIL: usize = offset_of!(Header, cq_tail);
pub const OFF_CQ_HEAD: usize = offset_of!(Header, cq_head);
pub const OFF_SERVER_IDLE: usize = offset_of!(Header, server_idle);
pub const OFF_CLIENT_WAITING: usize = offset_of!(Header, client_waiting);
pub const OFF_SERVER_STATE: usize = offset_of!(Header, server_state);
pub const OFF_LOCK_SEQ: usize = offset_of!(Header, lock_seq);

const _: () = {
    assert!(size_of::<Line>() == 64);
    assert!(OFF_MAGIC == 0 && OFF_VERSION == 8 && OFF_SQ_ENTRIES == 12);
    assert!(OFF_CQ_ENTRIES == 16 && OFF_DATA_OFF == 24 && OFF_DATA_LEN == 32);
    assert!(OFF_SQ_TAIL == 64 && OFF_SQ_HEAD == 128 && OFF_CQ_TAIL == 192);
    assert!(OFF_CQ_HEAD == 256 && OFF_SERVER_IDLE == 320 && OFF_CLIENT_WAITING == 384);
    assert!(OFF_SERVER_STATE == 448 && OFF_LOCK_SEQ == 512);
    assert!(size_of::<Header>() == 576 && size_of::<Header>() <= HEADER_LEN);
};

/// A window of the data area: offsets, never pointers, so a client can
/// name nothing outside its own channel. Checked as `off + len <=
/// data_len` in `u64` (no overflow) before any use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub off: u32,
    pub len: u32,
}

impl Span {
    pub const EMPTY: Span = Span { off: 0, len: 0 };

    pub const fn new(off: u32, len: u32) -> Span {
        Span { off, len }
    }

    /// Whether the span lies inside a data area of `data_len` bytes.
    #[inline]
    pub const fn fits(self, data_len: u32) -> bool {
        self.off as u64 + self.len as u64 <= data_len as u64
    }

    /// The span's first `n` bytes (`n` clamped to its length): the part a
    /// short reply filled.
    #[inline]
    pub fn prefix(self, n: usize) -> Span {
        Span {
            off: self.off,
            len: self.len.min(u32::try_from(n).unwrap_or(u32::MAX)),
        }
    }
}

/// One request. What each field carries depends on `op`: see [`crate::op`].
/// The server copies it out of the ring once (a volatile read) and only
/// looks at its copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Req {
    /// An [`Op`](crate::op::Op) code.
    pub op: u16,
    /// Reserved for protocol-level flags; zero. (Call flags such as
    /// `O_*` or `AT_*` travel in `a`.)
    pub flags: u16,
    /// Chosen by the client, echoed in the completion.
    pub tag: u32,
    pub fd: i32,
    pub fd2: i32,
    /// Integer arguments. An `i32` argument is stored sign-extended and
    /// read back with `as i32`; the server ignores the upper bits.
    pub a: [u64; 4],
    pub p1: Span,
    pub p2: Span,
}

impl Req {
    /// A request for `op` with every argument zero and no fds (`-1`).
    pub const fn new(op: crate::op::Op) -> Req {
        Req {
            op: op as u16,
            flags: 0,
            tag: 0,
            fd: -1,
            fd2: -1,
            a: [0; 4],
            p1: Span::EMPTY,
            p2: Span::EMPTY,
        }
    }
}

/// One completion. `res >= 0` is the call's value (a count, an fd, an
/// offset); `res < 0` is `-errno` with Linux numbers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    pub tag: u32,
    /// `CQE_*` bits.
    pub flags: u32,
    pub res: i64,
    pub aux: [u64; 2],
}

/// `Cqe::flags`: the call would have blocked (a lock held by another
/// owner); `res` is `-EAGAIN` and `aux` names the holder (see `Op::Lock`).
pub const CQE_WOULD_BLOCK: u32 = 1;
/// `Cqe::flags`: the output did not fit its span and was cut; `aux[0]`
/// is the full length (`GETCWD`, `READLINKAT`).
pub const CQE_TRUNCATED: u32 = 2;
/// `Cqe::flags` of OPENAT and REOPEN: the new description's offset may be
/// kept by the client itself while no other process shares the
/// description (a regular file, opened neither `O_PATH` nor `O_APPEND`):
/// the server's copy of it is then stale until the client sets it again
/// with an LSEEK (docs/SERVE.md "Offsets").
pub const CQE_OFFSET_YOURS: u32 = 4;

impl Cqe {
    /// A success carrying `res` (which must be `>= 0`).
    pub const fn ok(tag: u32, res: i64) -> Cqe {
        Cqe {
            tag,
            flags: 0,
            res,
            aux: [0; 2],
        }
    }

    /// A failure: `res = -errno`.
    pub const fn err(tag: u32, e: Errno) -> Cqe {
        Cqe {
            tag,
            flags: 0,
            res: -(e.0 as i64),
            aux: [0; 2],
        }
    }

    /// From an engine result, as the server answers most calls.
    pub fn from_result(tag: u32, r: Result<i64, Errno>) -> Cqe {
        match r {
            Ok(v) => Cqe::ok(tag, v),
            Err(e) => Cqe::err(tag, e),
        }
    }

    /// `res` as a result. A negative value outside the errno range (a
    /// confused server) reads as EIO, never as a success.
    pub fn result(&self) -> Result<u64, Errno> {
        if self.res >= 0 {
            Ok(self.res as u64)
        } else if self.res >= -4095 {
            Err(Errno((-self.res) as i32))
        } else {
            Err(Errno::EIO)
        }
    }
}

pub const REQ_SIZE: usize = 64;
pub const CQE_SIZE: usize = 32;

const _: () = {
    assert!(size_of::<Span>() == 8);
    assert!(size_of::<Req>() == REQ_SIZE);
    assert!(size_of::<Cqe>() == CQE_SIZE);
    assert!(offset_of!(Req, op) == 0 && offset_of!(Req, flags) == 2);
    assert!(offset_of!(Req, tag) == 4 && offset_of!(Req, fd) == 8);
    assert!(offset_of!(Req, fd2) == 12 && offset_of!(Req, a) == 16);
    assert!(offset_of!(Req, p1) == 48 && offset_of!(Req, p2) == 56);
    assert!(offset_of!(Cqe, tag) == 0 && offset_of!(Cqe, flags) == 4);
    assert!(offset_of!(Cqe, res) == 8 && offset_of!(Cqe, aux) == 16);
    // Ring slots are naturally aligned: the SQ starts on a page and the
    // CQ right after a whole number of 64-byte slots.
    assert!(HEADER_LEN.is_multiple_of(REQ_SIZE) && REQ_SIZE.is_multiple_of(CQE_SIZE));
};

/// A channel's shape. The server chooses it (from a HELLO's wishes, with
/// [`Geometry::negotiate`]), keeps its own copy, and tells the client in
/// WELCOME; every offset into the channel is computed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    pub sq_entries: u32,
    pub cq_entries: u32,
    /// Where the data area starts; always [`Geometry::data_off_for`] of
    /// the ring sizes (kept so WELCOME states it and a client can check).
    pub data_off: u32,
    pub data_len: u32,
}

impl Default for Geometry {
    fn default() -> Geometry {
        Geometry::new(DEFAULT_SQ_ENTRIES, DEFAULT_CQ_ENTRIES, DEFAULT_DATA_LEN)
            .expect("the defaults are valid")
    }
}

impl Geometry {
    /// A geometry with these sizes, or EINVAL if they break the rules
    /// (power-of-two rings within bounds, `cq_entries >= sq_entries`, a
    /// page-multiple data area within bounds).
    pub fn new(sq_entries: u32, cq_entries: u32, data_len: u32) -> Result<Geometry, Errno> {
        let g = Geometry {
            sq_entries,
            cq_entries,
            data_off: Self::data_off_for(sq_entries, cq_entries),
            data_len,
        };
        g.validate()?;
        Ok(g)
    }

    /// The geometry a server grants for a HELLO's wishes: zero means the
    /// default, a ring is rounded up to a power of two, everything is
    /// clamped to the limits (the data area to `max_data`, itself at most
    /// [`MAX_DATA_LEN`]). The CQ is never smaller than the SQ, so a client
    /// that keeps at most `sq_entries` requests outstanding can never find
    /// the CQ full.
    pub fn negotiate(want_sq: u32, want_data: u32, max_data: u32) -> Geometry {
        let sq = match want_sq {
            0 => DEFAULT_SQ_ENTRIES,
            n => n.clamp(1, MAX_SQ_ENTRIES).next_power_of_two(),
        };
        let cq = sq.max(DEFAULT_CQ_ENTRIES);
        let max_data = max_data.clamp(MIN_DATA_LEN, MAX_DATA_LEN) & !(DATA_ALIGN as u32 - 1);
        let data = match want_data {
            0 => DEFAULT_DATA_LEN.min(max_data),
            n => {
                let rounded = (n as u64).div_ceil(DATA_ALIGN as u64) * DATA_ALIGN as u64;
                (rounded.min(max_data as u64) as u32).max(MIN_DATA_LEN)
            }
        };
        Geometry::new(sq, cq, data).expect("clamped to valid values")
    }

    /// Where the data area starts for these ring sizes.
    pub const fn data_off_for(sq_entries: u32, cq_entries: u32) -> u32 {
        let end = HEADER_LEN as u64
            + sq_entries as u64 * REQ_SIZE as u64
            + cq_entries as u64 * CQE_SIZE as u64;
        let aligned = end.div_ceil(DATA_ALIGN as u64) * DATA_ALIGN as u64;
        if aligned > u32::MAX as u64 {
            u32::MAX
        } else {
            aligned as u32
        }
    }

    /// EINVAL unless every rule holds (see [`Geometry::new`]); a client
    /// runs this on a WELCOME before mapping anything.
    pub fn validate(&self) -> Result<(), Errno> {
        let ring_ok = |n: u32, max: u32| n.is_power_of_two() && n <= max;
        let ok = ring_ok(self.sq_entries, MAX_SQ_ENTRIES)
            && ring_ok(self.cq_entries, MAX_CQ_ENTRIES)
            && self.cq_entries >= self.sq_entries
            && self.data_off == Self::data_off_for(self.sq_entries, self.cq_entries)
            && (MIN_DATA_LEN..=MAX_DATA_LEN).contains(&self.data_len)
            && (self.data_len as usize).is_multiple_of(DATA_ALIGN);
        if ok { Ok(()) } else { Err(Errno::EINVAL) }
    }

    pub const fn sq_off(&self) -> usize {
        HEADER_LEN
    }

    pub const fn cq_off(&self) -> usize {
        HEADER_LEN + self.sq_entries as usize * REQ_SIZE
    }

    /// The memfd's size: header, rings, data area.
    pub const fn total_len(&self) -> usize {
        self.data_off as usize + self.data_len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry_is_the_plans() {
        let g = Geometry::default();
        assert_eq!((g.sq_entries, g.cq_entries, g.data_len), (64, 64, 1 << 20));
        // Header page, 64 x 64 B of SQ, 64 x 32 B of CQ = 10 KiB, so the
        // data area starts on the fourth page.
        assert_eq!(g.sq_off(), 4096);
        assert_eq!(g.cq_off(), 4096 + 4096);
        assert_eq!(g.data_off, 12288);
        assert_eq!(g.total_len(), 12288 + (1 << 20));
        assert_eq!(g.validate(), Ok(()));
    }

    #[test]
    fn invalid_geometries_are_refused() {
        assert_eq!(Geometry::new(63, 64, 4096), Err(Errno::EINVAL));
        assert_eq!(Geometry::new(64, 32, 4096), Err(Errno::EINVAL));
        assert_eq!(Geometry::new(2048, 4096, 4096), Err(Errno::EINVAL));
        assert_eq!(Geometry::new(64, 64, 4097), Err(Errno::EINVAL));
        assert_eq!(Geometry::new(64, 64, 0), Err(Errno::EINVAL));
        assert_eq!(
            Geometry::new(64, 64, MAX_DATA_LEN + 4096),
            Err(Errno::EINVAL)
        );
        let mut g = Geometry::default();
        g.data_off += 4096;
        assert_eq!(g.validate(), Err(Errno::EINVAL));
    }

    #[test]
    fn negotiation_rounds_and_clamps() {
        assert_eq!(Geometry::negotiate(0, 0, MAX_DATA_LEN), Geometry::default());
        let g = Geometry::negotiate(100, 5000, MAX_DATA_LEN);
        assert_eq!((g.sq_entries, g.cq_entries, g.data_len), (128, 128, 8192));
        let g = Geometry::negotiate(u32::MAX, u32::MAX, u32::MAX);
        assert_eq!(
            (g.sq_entries, g.cq_entries, g.data_len),
            (1024, 1024, MAX_DATA_LEN)
        );
        let g = Geometry::negotiate(1, 1, 1 << 16);
        assert_eq!((g.sq_entries, g.cq_entries, g.data_len), (1, 64, 4096));
        // A server limit below the default caps the default too.
        assert_eq!(Geometry::negotiate(0, 0, 1 << 16).data_len, 1 << 16);
    }

    #[test]
    fn spans_are_checked_without_overflow() {
        assert!(Span::new(0, 4096).fits(4096));
        assert!(Span::new(4096, 0).fits(4096));
        assert!(!Span::new(4096, 1).fits(4096));
        assert!(!Span::new(u32::MAX, u32::MAX).fits(u32::MAX));
        assert!(!Span::new(1, u32::MAX).fits(u32::MAX));
        assert_eq!(Span::new(8, 100).prefix(10), Span::new(8, 10));
        assert_eq!(Span::new(8, 100).prefix(1000), Span::new(8, 100));
    }

    #[test]
    fn cqe_results() {
        assert_eq!(Cqe::ok(1, 7).result(), Ok(7));
        assert_eq!(Cqe::err(1, Errno::ENOENT).result(), Err(Errno::ENOENT));
        assert_eq!(Cqe::err(1, Errno::ENOENT).res, -2);
        let mut c = Cqe::ok(1, 0);
        c.res = i64::MIN;
        assert_eq!(c.result(), Err(Errno::EIO));
        c.res = -4096;
        assert_eq!(c.result(), Err(Errno::EIO));
    }
}

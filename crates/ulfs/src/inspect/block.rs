//! One block: where it lies (by position: superblock, journal region, map
//! block of group g, data area), what it claims to be (by magic), its
//! header and checksum, a decoded view of every metadata kind, and a hex
//! dump. In the data area a magic is only a claim: file data may hold any
//! bytes, and a block's kind is known from what points to it (FORMAT.md
//! 1), which `owner` finds; the report says so rather than guess.
//!
//! By default the block is shown as the file system reads it, with the
//! journal's committed copies replayed (in memory); `block_on_disk` shows
//! the disk's bytes. The report says when the two differ.

use super::journal::LogBlock;
use super::superblock::SuperblockCopy;
use super::text::{crc_verdict, dtype_name, hexdump, magic_kind, magic_text, quoted, runs};
use super::{Inspector, Place};
use crate::error::Error;
use crate::format::dirnode::*;
use crate::format::inode::Inode;
use crate::format::journal::*;
use crate::format::*;
use std::fmt::{self, Write};

/// The decoded view of a block, by its magic.
#[derive(Debug, Clone)]
pub enum BlockDecoded {
    /// No metadata magic: file data, a free block, or damage.
    None,
    Superblock(Box<SuperblockCopy>),
    JournalHeader {
        next_seq: u64,
        /// What replay reads (`header_decode`).
        valid: Option<u64>,
    },
    Descriptor {
        seq: u64,
        count: u32,
        homes: Vec<Bid>,
    },
    Commit {
        seq: u64,
        total: u32,
        data_crc: u32,
    },
    Map {
        group: u32,
        free: u32,
        /// Clear bits that stand for real blocks (what `free` must be),
        /// when the group is known.
        counted_free: Option<u32>,
        /// Data-area blocks the bitmap marks used (when the group is
        /// known), else bit indexes.
        used: Vec<u64>,
    },
    Inodes {
        next_all: Bid,
        next_free: Bid,
        used: u16,
    },
    Indirect {
        owner: u64,
        /// (index, block) of each non-zero pointer.
        pointers: Vec<(usize, Bid)>,
    },
    Leaf {
        owner: u64,
        count: usize,
        heap: u16,
        next: Bid,
        /// (key, ino, d_type, name) of each readable slot.
        entries: Vec<(u64, u64, u8, Vec<u8>)>,
    },
    Inner {
        owner: u64,
        count: usize,
        level: u16,
        children: Vec<(u64, Bid)>,
    },
}

/// One block, looked at.
#[derive(Debug, Clone)]
pub struct BlockReport {
    pub bid: Bid,
    pub place: Place,
    pub magic: u32,
    /// What the magic says it is.
    pub kind: Option<&'static str>,
    /// (stored, computed) checksum, for the metadata kinds (the journal
    /// header's covers its first sector).
    pub crc: Option<(u32, u32)>,
    /// In the data area: whether the bitmap marks it used.
    pub bitmap: Option<bool>,
    /// The bytes shown are the journal's committed copy, replayed in
    /// memory: the disk holds other bytes.
    pub from_journal: bool,
    /// The disk's bytes are shown although replay gives others.
    pub on_disk: bool,
    pub decoded: BlockDecoded,
    /// The decoded view and findings, as text lines.
    pub lines: Vec<String>,
    pub bytes: Box<Block>,
    /// Whether `Display` ends with the hex dump (on by default).
    pub show_hex: bool,
}

impl BlockReport {
    /// The hex dump alone.
    pub fn hexdump(&self) -> String {
        let mut s = String::new();
        hexdump(&mut s, self.bid as u64 * BLOCK_SIZE as u64, &self.bytes[..]);
        s
    }
}

/// At most this many entries of a list are decoded into text lines.
const LIST_MAX: usize = 64;

impl Inspector {
    /// Block `bid` as the file system reads it (journal replayed in
    /// memory).
    pub fn block(&self, bid: u64) -> Result<BlockReport, Error> {
        self.block_view(bid, false)
    }

    /// Block `bid` as the disk holds it.
    pub fn block_on_disk(&self, bid: u64) -> Result<BlockReport, Error> {
        self.block_view(bid, true)
    }

    fn block_view(&self, bid: u64, on_disk: bool) -> Result<BlockReport, Error> {
        let bid = self.check_arg_bid(bid)?;
        let differs = self.replay_differs(bid);
        let b = if on_disk {
            self.read_disk(bid)?
        } else {
            self.read(bid)?
        };
        let place = self.place(bid);
        let m = magic(b);
        let kind = magic_kind(m);
        let crc = match m {
            MAGIC_JOURNAL_HEADER => {
                let c = crc32c::crc32c(&b[..HDR_CRC]);
                let c = crc32c::crc32c_append(c, &[0; 4]);
                Some((
                    get_u32(b, HDR_CRC),
                    crc32c::crc32c_append(c, &b[HDR_CRC + 4..HEADER_BYTES]),
                ))
            }
            _ if kind.is_some() => Some((get_u32(b, HDR_CRC), block_crc(b))),
            _ => None,
        };
        let mut lines = Vec::new();
        if differs && !on_disk {
            let disk = self.read_disk(bid)?;
            lines.push(format!(
                "the journal holds a committed copy of this block: shown as replay installs it \
                 (in memory only); the disk holds magic {}, crc {}",
                magic_text(magic(disk)),
                crc_verdict(get_u32(disk, HDR_CRC), block_crc(disk))
            ));
        }
        if differs && on_disk {
            lines.push(
                "the journal holds a committed copy of this block, which replay installs: \
                 the disk's older bytes are shown"
                    .into(),
            );
        }
        self.position_notes(bid, place, m, &mut lines);
        let decoded = self.decode(bid, place, b, &mut lines);
        Ok(BlockReport {
            bid,
            place,
            magic: m,
            kind,
            crc,
            bitmap: self.bitmap_bit(bid),
            from_journal: differs && !on_disk,
            on_disk,
            decoded,
            lines,
            bytes: Box::new(*b),
            show_hex: true,
        })
    }

    /// What the position says of the block, where the magic may disagree.
    fn position_notes(&self, bid: Bid, place: Place, m: u32, lines: &mut Vec<String>) {
        let expect = match place {
            Place::PrimarySuperblock | Place::SecondarySuperblock => Some(MAGIC_SUPER),
            Place::JournalHeader => Some(MAGIC_JOURNAL_HEADER),
            Place::MapBlock { .. } => Some(MAGIC_MAP),
            _ => None,
        };
        if let Some(e) = expect
            && e != m
        {
            lines.push(format!(
                "DAMAGED: the position calls for magic {}, the block holds {}",
                magic_text(e),
                magic_text(m)
            ));
        }
        match place {
            Place::JournalLog => {
                let Some(sb) = &self.sb else { return };
                let (_, what) = self.scan_log(sb.journal_start, sb.journal_blocks);
                let idx = (bid - sb.journal_start - 1) as usize;
                lines.push(match what.get(idx) {
                    Some(LogBlock::Descriptor { seq }) => {
                        format!("in the log: a descriptor of transaction {seq}")
                    }
                    Some(LogBlock::Commit { seq }) => {
                        format!("in the log: the commit of transaction {seq}")
                    }
                    Some(LogBlock::Copy {
                        desc,
                        index,
                        home,
                        seq,
                    }) => format!(
                        "in the log: copy {index} of the descriptor at {desc}: block {home} as \
                         transaction {seq} installs it"
                    ),
                    _ => "in the log: no record (unused, or left from an earlier cycle)".into(),
                });
            }
            Place::Reserved if m != 0 => {
                lines.push("reserved space, not used by this version".into())
            }
            Place::Data { .. } => match magic_kind(m) {
                Some(kind @ ("superblock" | "map block")) => lines.push(format!(
                    "the magic of a {kind}, which never lies in the data area: file data, or \
                     damage"
                )),
                Some(kind) if kind.starts_with("journal") => lines.push(format!(
                    "the magic of a {kind}, which lies only in the journal region: file data \
                     (an image kept in a file), or damage"
                )),
                Some(_) => lines.push(
                    "in the data area the magic is a claim: what points to a block says what it \
                     is (see owner)"
                        .into(),
                ),
                None => lines.push(
                    "no metadata header: file data, a free block, or damage (see owner)".into(),
                ),
            },
            _ => {}
        }
    }

    /// The decoded view of a block by its magic.
    fn decode(&self, bid: Bid, place: Place, b: &Block, lines: &mut Vec<String>) -> BlockDecoded {
        match magic(b) {
            MAGIC_SUPER => {
                let c = SuperblockCopy::read(bid, b, self.store().blocks());
                for fld in &c.fields {
                    lines.push(format!("{:<16} {}", fld.name, fld.text));
                }
                lines.push(format!("verdict: {}", c.verdict));
                BlockDecoded::Superblock(Box::new(c))
            }
            MAGIC_JOURNAL_HEADER => {
                let next_seq = get_u64(b, 8);
                let valid = header_decode(b);
                lines.push(format!("next_seq {next_seq}"));
                if valid.is_none() {
                    lines.push("replay refuses this header (bad magic, checksum or seq)".into());
                }
                BlockDecoded::JournalHeader { next_seq, valid }
            }
            MAGIC_DESCRIPTOR => {
                let seq = record_seq(b);
                let count = get_u32(b, 16);
                let n = (count as usize).min(DESC_CAP);
                let homes: Vec<Bid> = (0..n).map(|i| get_u32(b, 32 + 4 * i)).collect();
                lines.push(format!("seq {seq}, count {count}"));
                if count as usize > DESC_CAP || count == 0 {
                    lines.push(format!("count out of range (1..={DESC_CAP})"));
                }
                for row in homes.chunks(12) {
                    let r: Vec<String> = row.iter().map(u32::to_string).collect();
                    lines.push(format!("homes {}", r.join(" ")));
                }
                BlockDecoded::Descriptor { seq, count, homes }
            }
            MAGIC_COMMIT => {
                let (seq, total, data_crc) = (record_seq(b), get_u32(b, 16), get_u32(b, 20));
                lines.push(format!(
                    "seq {seq}, {total} copies, data crc {data_crc:#010x}"
                ));
                BlockDecoded::Commit {
                    seq,
                    total,
                    data_crc,
                }
            }
            MAGIC_MAP => self.decode_map(place, b, lines),
            MAGIC_INODES => decode_inodes(bid, b, lines),
            MAGIC_INDIRECT => {
                let owner = get_u64(b, IND_OWNER);
                let pointers: Vec<(usize, Bid)> = (0..PTRS_PER_BLOCK as usize)
                    .map(|i| (i, get_u32(b, IND_PTRS + 4 * i)))
                    .filter(|&(_, p)| p != 0)
                    .collect();
                lines.push(format!(
                    "owner inode {owner}, {} non-zero pointers of {PTRS_PER_BLOCK}",
                    pointers.len()
                ));
                // Runs where both the index and the block go up by one.
                let mut run: Option<(usize, Bid, usize)> = None;
                let mut shown = 0;
                let mut flush = |run: (usize, Bid, usize), lines: &mut Vec<String>| {
                    shown += 1;
                    if shown <= LIST_MAX {
                        let (i, p, n) = run;
                        lines.push(if n == 1 {
                            format!("ptr[{i}] -> {p}")
                        } else {
                            format!(
                                "ptr[{i}..={}] -> {p}..={}",
                                i + n - 1,
                                p as u64 + n as u64 - 1
                            )
                        });
                    }
                };
                for &(i, p) in &pointers {
                    run = match run {
                        Some((ri, rp, n)) if ri + n == i && rp as u64 + n as u64 == p as u64 => {
                            Some((ri, rp, n + 1))
                        }
                        Some(r) => {
                            flush(r, lines);
                            Some((i, p, 1))
                        }
                        None => Some((i, p, 1)),
                    };
                }
                if let Some(r) = run {
                    flush(r, lines);
                }
                if shown > LIST_MAX {
                    lines.push(format!("... {} more runs", shown - LIST_MAX));
                }
                for &(i, p) in &pointers {
                    if let Some(why) = self.bid_fault(p) {
                        lines.push(format!("ptr[{i}] = {p} points {why}"));
                    }
                }
                BlockDecoded::Indirect { owner, pointers }
            }
            MAGIC_DIR_LEAF => {
                let owner = get_u64(b, NODE_OWNER);
                let count = node_count(b);
                let heap = get_u16(b, 18);
                let next = leaf_next(b);
                lines.push(format!(
                    "owner inode {owner}, {count} entries, heap {heap:#06x}, next leaf {next}"
                ));
                if let Err(e) = leaf_check(b) {
                    lines.push(format!("DAMAGED: {e}"));
                }
                let mut entries = Vec::new();
                for i in 0..count.min((BLOCK_SIZE - NODE_HDR) / 2) {
                    match leaf_rec(b, i) {
                        Ok(r) => {
                            let hash = match self.name_key(r.name) {
                                Some(k) if k != r.key & !0xF => "  (WRONG HASH)",
                                _ => "",
                            };
                            if i < LIST_MAX * 4 {
                                lines.push(format!(
                                    "[{i}] {:#018x} ino {} {} {}{hash}",
                                    r.key,
                                    r.ino,
                                    dtype_name(r.dtype),
                                    quoted(r.name)
                                ));
                            }
                            entries.push((r.key, r.ino, r.dtype, r.name.to_vec()));
                        }
                        Err(e) => lines.push(format!("[{i}] DAMAGED: {e}")),
                    }
                }
                BlockDecoded::Leaf {
                    owner,
                    count,
                    heap,
                    next,
                    entries,
                }
            }
            MAGIC_DIR_INNER => {
                let owner = get_u64(b, NODE_OWNER);
                let count = node_count(b);
                let level = inner_level(b);
                lines.push(format!(
                    "owner inode {owner}, {count} entries, level {level}"
                ));
                if let Err(e) = inner_check(b) {
                    lines.push(format!("DAMAGED: {e}"));
                }
                let children: Vec<(u64, Bid)> = (0..count.min(INNER_CAP))
                    .map(|i| inner_entry(b, i))
                    .collect();
                for (i, (k, c)) in children.iter().enumerate() {
                    lines.push(format!("[{i}] {k:#018x} -> {c}"));
                }
                BlockDecoded::Inner {
                    owner,
                    count,
                    level,
                    children,
                }
            }
            _ => BlockDecoded::None,
        }
    }

    /// A map block: its header, what its bitmap says, and the free count
    /// checked against it.
    fn decode_map(&self, place: Place, b: &Block, lines: &mut Vec<String>) -> BlockDecoded {
        let group = get_u32(b, MAP_GROUP);
        let free = get_u32(b, MAP_FREE);
        let bit = |i: u32| b[MAP_BITMAP + (i / 8) as usize] & (1 << (i % 8)) != 0;
        // The group whose blocks the bits stand for: its position's.
        let known = match place {
            Place::MapBlock { group: g } => Some(g),
            _ => None,
        };
        lines.push(format!("group field {group}, free {free}"));
        if let Some(g) = known
            && g != group
        {
            lines.push(format!(
                "DAMAGED: the map block of group {g} says group {group}"
            ));
        }
        let Some((sb, g)) = self.sb.as_ref().zip(known) else {
            let used: Vec<u64> = (0..MAP_BITS).filter(|&i| bit(i)).map(u64::from).collect();
            lines.push(format!(
                "bits set (the group is unknown here: bit indexes): {}",
                runs(used.iter().copied(), Some(LIST_MAX))
            ));
            return BlockDecoded::Map {
                group,
                free,
                counted_free: None,
                used,
            };
        };
        let first = sb.map_bid(g) as u64 + 1;
        let real = (sb.total_blocks.saturating_sub(first)).min(MAP_BITS as u64) as u32;
        let used: Vec<u64> = (0..real)
            .filter(|&i| bit(i))
            .map(|i| first + i as u64)
            .collect();
        let counted = real - used.len() as u32;
        if real == 0 {
            lines.push("covers no block of the image (the last group, cut at the end)".into());
        } else {
            lines.push(format!(
                "covers blocks {first}..={} ({real} blocks): {} used, {counted} free",
                first + real as u64 - 1,
                used.len()
            ));
        }
        if counted != free {
            lines.push(format!(
                "DAMAGED: the free count says {free}, the bitmap has {counted} free"
            ));
        }
        let past = MAP_BITS - real;
        if past > 0 {
            let set = (real..MAP_BITS).filter(|&i| bit(i)).count();
            lines.push(format!(
                "{past} positions past the end of the image: {set} set{}",
                if set as u32 == past {
                    ""
                } else {
                    " (they must all be set)"
                }
            ));
        }
        lines.push(format!(
            "used blocks: {}",
            runs(used.iter().copied(), Some(LIST_MAX))
        ));
        BlockDecoded::Map {
            group,
            free,
            counted_free: Some(counted),
            used,
        }
    }
}

/// An inode block: its header, and one line per slot in use.
fn decode_inodes(bid: Bid, b: &Block, lines: &mut Vec<String>) -> BlockDecoded {
    let next_all = get_u32(b, IBLK_NEXT_ALL);
    let next_free = get_u32(b, IBLK_NEXT_FREE);
    let used = get_u16(b, IBLK_USED);
    let slots: Vec<u64> = (1..INODES_PER_BLOCK)
        .filter(|s| used & (1 << s) != 0)
        .collect();
    lines.push(format!(
        "next_all {next_all}, next_free {next_free}, used {used:#06x} (slots in use: {})",
        runs(slots.iter().copied(), None)
    ));
    if used & 1 == 0 {
        lines.push("DAMAGED: bit 0 (the header's own) of used is clear".into());
    }
    for s in 1..INODES_PER_BLOCK as usize {
        let raw = &b[s * INODE_SIZE..(s + 1) * INODE_SIZE];
        let ino = ino_of(bid, s as u64);
        if used & (1 << s) == 0 {
            if raw.iter().any(|&c| c != 0) {
                lines.push(format!("slot {s:>2} (ino {ino}): free, but NOT zero"));
            }
            continue;
        }
        let i = Inode::decode(raw);
        let valid = match i.validate() {
            Ok(()) => String::new(),
            Err(w) => format!("  INVALID: {w}"),
        };
        lines.push(format!(
            "slot {s:>2} (ino {ino}): {} {:#o} nlink {} size {} blocks {}{valid}",
            super::text::type_name(i.mode),
            i.mode,
            i.nlink,
            i.size,
            i.blocks
        ));
    }
    BlockDecoded::Inodes {
        next_all,
        next_free,
        used,
    }
}

impl fmt::Display for BlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "block {} (image offset {:#x}): {}",
            self.bid,
            self.bid as u64 * BLOCK_SIZE as u64,
            self.place
        )?;
        let mut head = format!("magic {}", magic_text(self.magic));
        match self.kind {
            Some(k) => {
                let _ = write!(head, ": {k}");
            }
            None => head.push_str(": no metadata magic"),
        }
        if let Some((s, c)) = self.crc {
            let _ = write!(head, ", crc {}", crc_verdict(s, c));
        }
        match self.bitmap {
            Some(true) => head.push_str("; the bitmap marks it used"),
            Some(false) => head.push_str("; the bitmap marks it free"),
            None => {}
        }
        writeln!(f, "{head}")?;
        for l in &self.lines {
            writeln!(f, "  {l}")?;
        }
        if self.show_hex {
            writeln!(f)?;
            f.write_str(&self.hexdump())?;
        }
        Ok(())
    }
}

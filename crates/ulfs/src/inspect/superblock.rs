//! Both superblock copies, field by field with FORMAT.md section 4's names,
//! whatever their state, and which copy mount takes and why. Decoded here
//! from the offsets of that section rather than through
//! `Superblock::decode`, which gives nothing for a copy that fails its
//! checksum: a damaged copy is exactly the one worth reading. Its verdict
//! is `Superblock::decode`'s, so "valid" means what mount means.

use super::Inspector;
use super::text::{crc_verdict, magic_text, utc};
use crate::error::Error;
use crate::format::superblock::{
    INCOMPAT_SPECIAL_FILES, MODE_JOURNAL, MODE_NONE, SB_PRIMARY, SB_SECONDARY, STATE_CLEAN,
    STATE_DIRTY, SbError, Superblock,
};
use crate::format::*;
use crate::store::BlockStore;
use std::fmt::{self, Write};

/// How a field is shown.
#[derive(Clone, Copy)]
enum Shape {
    Magic,
    Crc,
    U32,
    Hex32,
    Features,
    Mode,
    State,
    U64,
    Time,
    Key,
    Uuid,
    Label,
}

/// FORMAT.md section 4, in order: (offset, name, shape).
const FIELDS: &[(usize, &str, Shape)] = &[
    (0, "magic", Shape::Magic),
    (4, "crc", Shape::Crc),
    (8, "version", Shape::U32),
    (12, "block_size", Shape::U32),
    (16, "feat_compat", Shape::Hex32),
    (20, "feat_incompat", Shape::Features),
    (24, "feat_ro_compat", Shape::Hex32),
    (28, "mode", Shape::Mode),
    (32, "seq", Shape::U64),
    (40, "total_blocks", Shape::U64),
    (48, "first_group", Shape::U32),
    (52, "group_count", Shape::U32),
    (56, "journal_start", Shape::U32),
    (60, "journal_blocks", Shape::U32),
    (64, "root_ino", Shape::U64),
    (72, "free_blocks", Shape::U64),
    (80, "used_inodes", Shape::U64),
    (88, "free_inodes", Shape::U64),
    (96, "inode_all_head", Shape::U32),
    (100, "inode_free_head", Shape::U32),
    (104, "orphan_head", Shape::U64),
    (112, "state", Shape::State),
    (116, "next_generation", Shape::U32),
    (120, "hash_key", Shape::Key),
    (136, "uuid", Shape::Uuid),
    (152, "label", Shape::Label),
    (216, "mkfs_time", Shape::Time),
    (224, "mount_time", Shape::Time),
    (232, "write_time", Shape::Time),
    (240, "mount_count", Shape::U32),
];

/// Where the fields end: the rest of the block is reserved, zero.
const FIELDS_END: usize = 244;

/// One field of one copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbField {
    pub offset: usize,
    pub name: &'static str,
    /// The integer stored (0 for the byte fields: key, uuid, label).
    pub value: u64,
    /// As people read it, with its meaning.
    pub text: String,
}

/// What `Superblock::decode` (mount's check, FORMAT.md 4.1) says of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbVerdict {
    Valid,
    /// Magic is not `ULFS`.
    NotUlfs,
    /// The checksum fails; `otherwise` is the verdict on the same bytes
    /// with the checksum recomputed (None: valid but for it).
    BadCrc {
        otherwise: Option<String>,
    },
    Unsupported(String),
    Corrupt(String),
}

impl fmt::Display for SbVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SbVerdict::Valid => f.write_str("valid"),
            SbVerdict::NotUlfs => f.write_str("not ulfs (bad magic)"),
            SbVerdict::BadCrc { otherwise: None } => {
                f.write_str("damaged: checksum mismatch (the fields are otherwise valid)")
            }
            SbVerdict::BadCrc { otherwise: Some(w) } => {
                write!(f, "damaged: checksum mismatch, and {w}")
            }
            SbVerdict::Unsupported(w) => write!(f, "unsupported: {w}"),
            SbVerdict::Corrupt(w) => write!(f, "corrupt: {w}"),
        }
    }
}

/// One superblock copy.
#[derive(Debug, Clone)]
pub struct SuperblockCopy {
    pub bid: Bid,
    pub crc_stored: u32,
    pub crc_computed: u32,
    pub fields: Vec<SbField>,
    /// Non-zero bytes in the reserved part (244..4096).
    pub reserved_nonzero: usize,
    pub verdict: SbVerdict,
    /// The decoded copy when it is valid.
    pub decoded: Option<Superblock>,
}

impl SuperblockCopy {
    /// A field by its FORMAT.md name.
    pub fn field(&self, name: &str) -> Option<&SbField> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub(super) fn read(bid: Bid, b: &Block, image_blocks: u64) -> SuperblockCopy {
        let fields = FIELDS
            .iter()
            .map(|&(offset, name, shape)| field(b, offset, name, shape))
            .collect();
        let verdict = match Superblock::decode(b, image_blocks) {
            Ok(_) => SbVerdict::Valid,
            Err(SbError::NotUlfs) => SbVerdict::NotUlfs,
            Err(SbError::BadCrc) => {
                let mut resealed = *b;
                seal_block(&mut resealed);
                SbVerdict::BadCrc {
                    otherwise: Superblock::decode(&resealed, image_blocks)
                        .err()
                        .map(|e| describe(&e)),
                }
            }
            Err(SbError::Unsupported(w)) => SbVerdict::Unsupported(w),
            Err(SbError::Corrupt(w)) => SbVerdict::Corrupt(w),
        };
        SuperblockCopy {
            bid,
            crc_stored: get_u32(b, HDR_CRC),
            crc_computed: block_crc(b),
            fields,
            reserved_nonzero: b[FIELDS_END..].iter().filter(|&&x| x != 0).count(),
            verdict,
            decoded: Superblock::decode(b, image_blocks).ok(),
        }
    }
}

fn describe(e: &SbError) -> String {
    match e {
        SbError::NotUlfs => "a bad magic".into(),
        SbError::BadCrc => "a checksum mismatch".into(),
        SbError::Unsupported(w) => format!("unsupported {w}"),
        SbError::Corrupt(w) => w.clone(),
    }
}

fn field(b: &Block, offset: usize, name: &'static str, shape: Shape) -> SbField {
    let u32v = || get_u32(b, offset) as u64;
    let (value, text) = match shape {
        Shape::Magic => (u32v(), magic_text(get_u32(b, offset))),
        Shape::Crc => (u32v(), crc_verdict(get_u32(b, offset), block_crc(b))),
        Shape::U32 => (u32v(), u32v().to_string()),
        Shape::Hex32 => (u32v(), format!("{:#x}", u32v())),
        Shape::Features => {
            let v = get_u32(b, offset);
            let mut t = format!("{v:#x}");
            if v & INCOMPAT_SPECIAL_FILES != 0 {
                t.push_str(" (special files)");
            }
            if v & !INCOMPAT_SPECIAL_FILES != 0 {
                let _ = write!(t, " (unknown {:#x})", v & !INCOMPAT_SPECIAL_FILES);
            }
            (v as u64, t)
        }
        Shape::Mode => {
            let v = get_u32(b, offset);
            let m = match v {
                MODE_NONE => "none",
                MODE_JOURNAL => "journal",
                _ => "unknown",
            };
            (v as u64, format!("{v} ({m})"))
        }
        Shape::State => {
            let v = get_u32(b, offset);
            let m = match v {
                STATE_CLEAN => "clean",
                STATE_DIRTY => "dirty: mounted read-write, or crashed",
                _ => "unknown",
            };
            (v as u64, format!("{v} ({m})"))
        }
        Shape::U64 => (get_u64(b, offset), get_u64(b, offset).to_string()),
        Shape::Time => {
            let s = get_i64(b, offset);
            let t = if s == 0 && name == "mount_time" {
                "0 (never)".to_string()
            } else {
                format!("{s} ({})", utc(s))
            };
            (s as u64, t)
        }
        Shape::Key => (
            0,
            format!(
                "k0={:#018x} k1={:#018x}",
                get_u64(b, offset),
                get_u64(b, offset + 8)
            ),
        ),
        Shape::Uuid => {
            let u = &b[offset..offset + 16];
            let hex: String = u.iter().map(|x| format!("{x:02x}")).collect();
            (
                0,
                format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ),
            )
        }
        Shape::Label => {
            let l = &b[offset..offset + 64];
            let end = l.iter().position(|&c| c == 0).unwrap_or(l.len());
            (0, super::text::quoted(&l[..end]))
        }
    };
    SbField {
        offset,
        name,
        value,
        text,
    }
}

/// Both copies, and which one is in use.
#[derive(Debug, Clone)]
pub struct SuperblockReport {
    /// Whole blocks in the image file.
    pub image_blocks: u64,
    pub primary: SuperblockCopy,
    pub secondary: SuperblockCopy,
    /// The copy mount takes (block 0 or 1), if any.
    pub chosen: Option<Bid>,
    /// Why, in words (FORMAT.md 4.2).
    pub why: String,
    /// The journal holds a committed copy of block 0, which replay
    /// installs (here in memory): that copy, as the file system reads it.
    pub replayed_primary: Option<SuperblockCopy>,
    /// The image could not be mounted: why.
    pub mount_error: Option<String>,
}

/// The copy mount takes, by FORMAT.md 4.2 (`fs/mount.rs`,
/// `pick_superblock`), from the raw blocks; `Err` says why none.
pub(super) fn pick(store: &dyn BlockStore) -> Result<Superblock, String> {
    let blocks = store.blocks();
    let decode = |bid| match store.block(bid) {
        Ok(b) => Superblock::decode(b, blocks),
        Err(_) => Err(SbError::NotUlfs),
    };
    choose(decode(SB_PRIMARY), decode(SB_SECONDARY)).map(|(_, sb, _)| sb)
}

/// (which copy, the copy, why) or why none.
fn choose(
    p: Result<Superblock, SbError>,
    s: Result<Superblock, SbError>,
) -> Result<(Bid, Superblock, String), String> {
    for (copy, name) in [(&p, "primary"), (&s, "secondary")] {
        if let Err(SbError::Unsupported(w)) = copy {
            return Err(format!(
                "mount refuses the image (EOPNOTSUPP): the {name} copy is unsupported ({w}), \
                 and may be the newer one"
            ));
        }
    }
    match (p, s) {
        (Ok(a), Ok(b)) if a.seq >= b.seq => {
            let why = if a.seq == b.seq {
                format!(
                    "both copies are valid with the same seq {}: the tie goes to the primary",
                    a.seq
                )
            } else {
                format!(
                    "both copies are valid: the primary's seq {} is the larger ({})",
                    a.seq, b.seq
                )
            };
            Ok((SB_PRIMARY, a, why))
        }
        (Ok(a), Ok(b)) => {
            let why = format!(
                "both copies are valid: the secondary's seq {} is the larger ({})",
                b.seq, a.seq
            );
            Ok((SB_SECONDARY, b, why))
        }
        (Ok(a), Err(e)) => Ok((
            SB_PRIMARY,
            a,
            format!(
                "only the primary is valid (the secondary: {})",
                describe(&e)
            ),
        )),
        (Err(e), Ok(b)) => Ok((
            SB_SECONDARY,
            b,
            format!(
                "only the secondary is valid (the primary: {})",
                describe(&e)
            ),
        )),
        (Err(SbError::NotUlfs), Err(SbError::NotUlfs)) => {
            Err("neither copy has the ULFS magic: not a ulfs image (EINVAL)".into())
        }
        (Err(a), Err(b)) => Err(format!(
            "no valid copy: mount refuses the image (EUCLEAN): primary: {}; secondary: {}",
            describe(&a),
            describe(&b)
        )),
    }
}

impl Inspector {
    /// Both superblock copies, field by field, and which one mount takes.
    /// Works on any image whose blocks 0 and 1 can be read.
    pub fn superblock(&self) -> Result<SuperblockReport, Error> {
        let store = self.store();
        let blocks = store.blocks();
        let copy = |bid| -> Result<SuperblockCopy, Error> {
            Ok(SuperblockCopy::read(bid, self.read_disk(bid)?, blocks))
        };
        let primary = copy(SB_PRIMARY)?;
        let secondary = copy(SB_SECONDARY)?;
        let replayed_primary = if self.replay_differs(SB_PRIMARY) {
            let b = self.read(SB_PRIMARY)?;
            Some(SuperblockCopy::read(SB_PRIMARY, b, blocks))
        } else {
            None
        };
        // Mount picks again after replay, which may have rewritten block 0
        // (never block 1): the pick is made on what replay leaves.
        let decode = |bid| {
            self.read(bid)
                .map_err(|_| SbError::NotUlfs)
                .and_then(|b| Superblock::decode(b, blocks))
        };
        let (chosen, mut why) = match choose(decode(SB_PRIMARY), decode(SB_SECONDARY)) {
            Ok((bid, _, why)) => (Some(bid), why),
            Err(why) => (None, why),
        };
        if replayed_primary.is_some() {
            why = format!("after replay, {why}");
        }
        Ok(SuperblockReport {
            image_blocks: blocks,
            primary,
            secondary,
            chosen,
            why,
            replayed_primary,
            mount_error: self.mount_error().map(|e| e.message.clone()),
        })
    }
}

impl fmt::Display for SuperblockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "superblock copies (the image file holds {} blocks of {BLOCK_SIZE} bytes)",
            self.image_blocks
        )?;
        match self.chosen {
            Some(b) => writeln!(
                f,
                "in use: the {} (block {b}): {}",
                if b == SB_PRIMARY {
                    "primary"
                } else {
                    "secondary"
                },
                self.why
            )?,
            None => writeln!(f, "in use: none: {}", self.why)?,
        }
        if let Some(e) = &self.mount_error {
            writeln!(f, "mount failed: {e}")?;
        }
        writeln!(f)?;
        let width = self
            .primary
            .fields
            .iter()
            .map(|x| x.text.len())
            .max()
            .unwrap_or(0)
            .clamp(20, 48);
        writeln!(
            f,
            "{:<16} {:>6}  {:<width$}  secondary (block 1)",
            "field", "offset", "primary (block 0)"
        )?;
        for (p, s) in self.primary.fields.iter().zip(&self.secondary.fields) {
            let second = if s.text == p.text { "same" } else { &s.text };
            writeln!(
                f,
                "{:<16} {:>6}  {:<width$}  {second}",
                p.name, p.offset, p.text
            )?;
        }
        let reserved = |c: &SuperblockCopy| match c.reserved_nonzero {
            0 => "zero".to_string(),
            n => format!("{n} non-zero bytes"),
        };
        writeln!(
            f,
            "{:<16} {:>6}  {:<width$}  {}",
            "reserved",
            FIELDS_END,
            reserved(&self.primary),
            reserved(&self.secondary)
        )?;
        writeln!(f, "verdict of the primary:   {}", self.primary.verdict)?;
        writeln!(f, "verdict of the secondary: {}", self.secondary.verdict)?;
        if let Some(r) = &self.replayed_primary {
            writeln!(f)?;
            writeln!(
                f,
                "the journal holds a committed copy of block 0, which replay installs \
                 (here in memory only); it differs from the disk in:"
            )?;
            for (new, old) in r.fields.iter().zip(&self.primary.fields) {
                if new.text != old.text {
                    writeln!(
                        f,
                        "  {:<16} {}  (on disk: {})",
                        new.name, new.text, old.text
                    )?;
                }
            }
            writeln!(f, "  verdict: {}", r.verdict)?;
        }
        if let Some(sb) = self.chosen.and_then(|b| {
            if b == SB_PRIMARY {
                self.replayed_primary.as_ref().unwrap_or(&self.primary)
            } else {
                &self.secondary
            }
            .decoded
            .clone()
        }) {
            writeln!(f)?;
            writeln!(f, "layout (from the copy in use):")?;
            if sb.journal_blocks > 0 {
                writeln!(
                    f,
                    "  journal region  blocks {}..={} (header at {})",
                    sb.journal_start,
                    sb.journal_start as u64 + sb.journal_blocks as u64 - 1,
                    sb.journal_start
                )?;
            } else {
                writeln!(f, "  journal region  none")?;
            }
            writeln!(
                f,
                "  data area       blocks {}..={}, {} groups of up to {MAP_BITS} blocks",
                sb.first_group,
                sb.total_blocks - 1,
                sb.group_count
            )?;
            let maps: Vec<String> = (0..sb.group_count.min(8))
                .map(|g| sb.map_bid(g).to_string())
                .collect();
            let etc = if sb.group_count > 8 { ", ..." } else { "" };
            writeln!(f, "  map blocks      {}{etc}", maps.join(", "))?;
            let (rb, rs) = ino_split(sb.root_ino).unwrap_or((0, 0));
            writeln!(
                f,
                "  root inode      {} (block {rb}, slot {rs})",
                sb.root_ino
            )?;
        }
        Ok(())
    }
}

//! One inode, every field of FORMAT.md section 7, and where it lives. The
//! slot is decoded as it is (`Inode::decode`) and judged apart
//! (`Inode::validate`), so an inode that reads refuse is still shown, with
//! the reason; a free slot is shown too (it should be zeros). The other
//! reports load their inode here, through the same checks of the inode
//! number and of the block that holds it.

use super::text::{crc_verdict, magic_text, mode_string, quoted, time, type_name};
use super::{Inspector, damaged, invalid};
use crate::error::Error;
use crate::format::inode::{FLAG_INLINE, INLINE_MAX, Inode};
use crate::format::*;
use crate::types::Ino;
use std::collections::HashSet;
use std::fmt::{self, Write};

/// An inode's slot, read.
pub(super) struct Loaded {
    pub bid: Bid,
    pub slot: usize,
    pub used: bool,
    pub inode: Inode,
    /// Why `Inode::validate` refuses it (None: it passes).
    pub invalid: Option<&'static str>,
}

/// Everything about one inode.
#[derive(Debug, Clone)]
pub struct InodeReport {
    pub ino: Ino,
    /// The inode block and the slot in it.
    pub bid: Bid,
    pub slot: usize,
    /// Byte offset of the slot in the image.
    pub image_offset: u64,
    /// The slot's bit in the block's `used` bitmap.
    pub slot_used: bool,
    /// The inode block's checksum: (stored, computed).
    pub block_crc: (u32, u32),
    /// The inode block shown is the journal's committed copy (replayed in
    /// memory), not the disk's.
    pub from_journal: bool,
    pub inode: Inode,
    /// Why `Inode::validate` refuses the slot (None: it passes).
    pub invalid: Option<String>,
    /// A free slot that is not all zeros.
    pub free_not_zero: bool,
    /// A symlink's target (inline, or read from its block).
    pub target: Option<Vec<u8>>,
    /// A directory's name, found in its parent by `name_key`.
    pub name: Option<Vec<u8>>,
    /// Position on the orphan list (0 = its head), if it is on it.
    pub orphan_position: Option<u64>,
    /// Other findings.
    pub notes: Vec<String>,
}

impl Inspector {
    /// Reads the slot of `ino`: the number must name a slot (slot and
    /// block not 0) of a block in the data area that carries the
    /// inode-block magic.
    pub(super) fn load_inode(&self, ino: Ino) -> Result<Loaded, Error> {
        let (bid, slot) = ino_split(ino).ok_or_else(|| {
            invalid(format!(
                "{ino} is not an inode number (its slot, ino % 16, or its block, ino / 16, is 0)"
            ))
        })?;
        self.geometry()?;
        if let Some(why) = self.bid_fault(bid) {
            return Err(invalid(format!(
                "inode {ino} would live in block {bid}, {why}"
            )));
        }
        let b = self.read(bid)?;
        if magic(b) != MAGIC_INODES {
            return Err(damaged(format!(
                "inode {ino} would live in block {bid}, which is not an inode block (magic {})",
                magic_text(magic(b))
            )));
        }
        let used = get_u16(b, IBLK_USED) & (1 << slot) != 0;
        let inode = Inode::decode(&b[slot * INODE_SIZE..(slot + 1) * INODE_SIZE]);
        let invalid = inode.validate().err();
        Ok(Loaded {
            bid,
            slot,
            used,
            inode,
            invalid,
        })
    }

    /// A live inode for the reports that walk its blocks: a free slot is
    /// an error; an invalid one is walked anyway (the report says so).
    pub(super) fn load_live(&self, ino: Ino) -> Result<Loaded, Error> {
        let l = self.load_inode(ino)?;
        if !l.used {
            return Err(invalid(format!(
                "inode {ino} is free (slot {} of block {} is not in use)",
                l.slot, l.bid
            )));
        }
        Ok(l)
    }

    /// Every field of inode `ino`, and where it lives.
    pub fn inode(&self, ino: Ino) -> Result<InodeReport, Error> {
        let l = self.load_inode(ino)?;
        let b = self.read(l.bid)?;
        let raw = &b[l.slot * INODE_SIZE..(l.slot + 1) * INODE_SIZE];
        let i = &l.inode;
        let mut notes = Vec::new();
        let target = if i.is_symlink() {
            self.symlink_target(i, &mut notes)
        } else {
            None
        };
        let name = if i.is_dir() && l.used {
            self.dir_name(ino, i, &mut notes)
        } else {
            None
        };
        if i.flags & FLAG_INLINE != 0
            && i.size as usize <= INLINE_MAX
            && i.inline[i.size as usize..].iter().any(|&c| c != 0)
        {
            notes.push("bytes after the inline target are not zero".into());
        }
        Ok(InodeReport {
            ino,
            bid: l.bid,
            slot: l.slot,
            image_offset: l.bid as u64 * BLOCK_SIZE as u64 + (l.slot * INODE_SIZE) as u64,
            slot_used: l.used,
            block_crc: (get_u32(b, HDR_CRC), block_crc(b)),
            from_journal: self.replay_differs(l.bid),
            inode: i.clone(),
            invalid: l.invalid.map(str::to_string),
            free_not_zero: !l.used && raw.iter().any(|&c| c != 0),
            target,
            name,
            orphan_position: self.orphan_position(ino, &mut notes),
            notes,
        })
    }

    /// A symlink's target: inline, or the first bytes of its logical
    /// block 0.
    fn symlink_target(&self, i: &Inode, notes: &mut Vec<String>) -> Option<Vec<u8>> {
        if i.flags & FLAG_INLINE != 0 {
            let len = (i.size as usize).min(INLINE_MAX);
            return Some(i.inline[..len].to_vec());
        }
        let p = i.map[0];
        if p == 0 {
            notes.push("a symlink stored in a block, but map[0] is 0".into());
            return None;
        }
        if let Some(why) = self.bid_fault(p) {
            notes.push(format!("the target's block pointer {p} points {why}"));
            return None;
        }
        let b = self.read(p).ok()?;
        let len = (i.size as usize).min(PATH_MAX);
        Some(b[..len.min(BLOCK_SIZE)].to_vec())
    }

    /// A directory's name in its parent, by its `name_key`.
    fn dir_name(&self, ino: Ino, i: &Inode, notes: &mut Vec<String>) -> Option<Vec<u8>> {
        if i.parent == ino || i.name_key == 0 {
            return None;
        }
        let parent = match self.load_live(i.parent) {
            Ok(p) if p.inode.is_dir() => p.inode,
            _ => {
                notes.push(format!("its parent {} is not a live directory", i.parent));
                return None;
            }
        };
        match self.entry_by_key(parent.map[0], i.name_key) {
            Some((_, e)) if e.ino == ino => Some(e.name),
            Some((_, e)) => {
                notes.push(format!(
                    "its name_key names {} in the parent, which is inode {}",
                    quoted(&e.name),
                    e.ino
                ));
                None
            }
            None => {
                notes.push("no entry of its parent has its name_key".into());
                None
            }
        }
    }

    /// Where `ino` is on the orphan list, walking it from the superblock
    /// through live slots, each once.
    fn orphan_position(&self, ino: Ino, notes: &mut Vec<String>) -> Option<u64> {
        let sb = self.sb.as_ref()?;
        let mut seen = HashSet::new();
        let mut at = sb.orphan_head;
        let mut pos = 0;
        while at != 0 {
            if at == ino {
                return Some(pos);
            }
            if !seen.insert(at) {
                notes.push(format!("the orphan list loops at inode {at}"));
                return None;
            }
            match self.load_live(at) {
                Ok(l) => at = l.inode.next_orphan,
                Err(e) => {
                    notes.push(format!("the orphan list breaks at inode {at}: {e}"));
                    return None;
                }
            }
            pos += 1;
        }
        None
    }
}

impl fmt::Display for InodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inode;
        writeln!(
            f,
            "inode {}: block {}, slot {} (image offset {:#x}, {INODE_SIZE} bytes)",
            self.ino, self.bid, self.slot, self.image_offset
        )?;
        writeln!(
            f,
            "  inode block crc {}; slot {}{}",
            crc_verdict(self.block_crc.0, self.block_crc.1),
            if self.slot_used {
                "in use"
            } else {
                "FREE (its bit in the block's used bitmap is clear)"
            },
            if self.from_journal {
                "; shown as the journal's committed copy (replayed in memory)"
            } else {
                ""
            }
        )?;
        if !self.slot_used {
            writeln!(
                f,
                "  the free slot is {}",
                if self.free_not_zero {
                    "NOT zero (stale bytes)"
                } else {
                    "zero"
                }
            )?;
        }
        match &self.invalid {
            None => writeln!(f, "  validation   passes (Inode::validate)")?,
            Some(w) => writeln!(f, "  validation   FAILS: {w} (reads refuse it: EUCLEAN)")?,
        }
        let row = |f: &mut fmt::Formatter<'_>, k: &str, v: String| writeln!(f, "  {k:<12} {v}");
        row(f, "type", type_name(i.mode))?;
        row(
            f,
            "mode",
            format!("{:#o} ({})", i.mode, mode_string(i.mode)),
        )?;
        row(f, "nlink", i.nlink.to_string())?;
        row(f, "uid", i.uid.to_string())?;
        row(f, "gid", i.gid.to_string())?;
        row(f, "size", format!("{} bytes", i.size))?;
        row(
            f,
            "blocks",
            format!(
                "{} (4 KiB blocks; st_blocks {})",
                i.blocks,
                i.blocks.saturating_mul(8)
            ),
        )?;
        row(f, "atime", time(i.atime.sec, i.atime.nsec))?;
        row(f, "mtime", time(i.mtime.sec, i.mtime.nsec))?;
        row(f, "ctime", time(i.ctime.sec, i.ctime.nsec))?;
        row(f, "btime", time(i.btime.sec, i.btime.nsec))?;
        let mut flags = format!("{:#x}", i.flags);
        if i.flags & FLAG_INLINE != 0 {
            flags.push_str(" (inline)");
        }
        row(f, "flags", flags)?;
        row(f, "generation", i.generation.to_string())?;
        row(f, "parent", i.parent.to_string())?;
        row(f, "name_key", format!("{:#018x}", i.name_key))?;
        row(f, "next_orphan", i.next_orphan.to_string())?;
        row(f, "entries", i.entries.to_string())?;
        let mut rdev = i.rdev.to_string();
        if i.rdev != 0 {
            let major = ((i.rdev >> 8) & 0xfff) | ((i.rdev >> 32) & !0xfff);
            let minor = (i.rdev & 0xff) | ((i.rdev >> 12) & !0xff);
            let _ = write!(rdev, " (major {major}, minor {minor})");
        }
        row(f, "rdev", rdev)?;
        if i.flags & FLAG_INLINE != 0 {
            row(
                f,
                "target",
                format!(
                    "{} (inline at offset 128, {} bytes)",
                    quoted(self.target.as_deref().unwrap_or_default()),
                    i.size
                ),
            )?;
        } else {
            if i.is_dir() {
                row(f, "index root", format!("map[0] = {}", i.map[0]))?;
                if i.map[1..].iter().any(|&p| p != 0) {
                    row(
                        f,
                        "map[1..15]",
                        format!("{:?} (should be zero)", &i.map[1..]),
                    )?;
                }
            } else {
                let direct: Vec<String> = i.map[..N_DIRECT].iter().map(u32::to_string).collect();
                row(f, "direct", format!("map[0..12] = {}", direct.join(" ")))?;
                row(f, "single", format!("map[12] = {}", i.map[N_DIRECT]))?;
                row(f, "double", format!("map[13] = {}", i.map[N_DIRECT + 1]))?;
                row(f, "triple", format!("map[14] = {}", i.map[N_DIRECT + 2]))?;
            }
            if let Some(t) = &self.target {
                row(
                    f,
                    "target",
                    format!("{} (in block {}, {} bytes)", quoted(t), i.map[0], i.size),
                )?;
            }
        }
        if let Some(n) = &self.name {
            row(
                f,
                "name",
                format!("{} in directory {}", quoted(n), i.parent),
            )?;
        }
        match self.orphan_position {
            Some(p) => row(f, "orphan", format!("on the orphan list, position {p}"))?,
            None if i.nlink == 0 && self.slot_used => row(
                f,
                "orphan",
                "nlink is 0 but it is not on the orphan list".into(),
            )?,
            None => {}
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}

//! The journal region (FORMAT.md 13.2 and 13.3): the header, every record
//! found in the log (descriptors with the home of each copy, commits with
//! their counts and checksums), the transactions they frame, and which of
//! them replay installs. Two readings of the same blocks:
//!
//! - a scan of the whole log, block by block, which finds every record,
//!   stale ones of earlier cycles included (copies are skipped by their
//!   descriptor's count; a data block never begins with a journal magic,
//!   `Journal::commit_for_sync` makes sure, so nothing else passes for a
//!   record);
//! - replay's own walk, from the header's `next_seq` at the first log
//!   block, with the format's record decoders and the same home checks as
//!   `txn/replay.rs`, which says exactly what a mount installs and where
//!   and why it stops.
//!
//! Both read the disk, not the replayed view: replay never rewrites the
//! region.

use super::text::{magic_tag, magic_text, more, range};
use super::{Inspector, damaged};
use crate::error::Error;
use crate::format::journal::*;
use crate::format::*;
use std::fmt;

/// The region's first block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalHeader {
    pub bid: Bid,
    pub magic: u32,
    /// CRC32C of the first 512 bytes (with the field as zero): (stored,
    /// computed).
    pub crc: (u32, u32),
    pub next_seq: u64,
    /// What replay reads (`header_decode`): None when it refuses the
    /// header (then mount fails: "journal unreadable").
    pub valid: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKind {
    /// `count` copies follow, for these home blocks (only as many as the
    /// count allows and the region holds).
    Descriptor { count: u32, homes: Vec<Bid> },
    /// The transaction's total copies and the CRC32C of all of them.
    Commit { total: u32, data_crc: u32 },
}

/// A descriptor or commit block found in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub at: Bid,
    pub seq: u64,
    pub crc_ok: bool,
    pub kind: RecordKind,
}

/// Records with one sequence number, in a row: descriptors (each with
/// its copies), then a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub seq: u64,
    /// First and last block of it in the log.
    pub first: Bid,
    pub last: Bid,
    /// (home, log position) of each copy.
    pub copies: Vec<(Bid, Bid)>,
    /// What each copy is by its magic: "UINO", "UDLF", ..., "data" for a
    /// file data block the commit logged, "zeros".
    pub copy_kinds: Vec<String>,
    /// The commit block and its (total, data CRC), if there is one.
    pub commit: Option<(Bid, u32, u32)>,
    /// CRC32C of the copies as they are in the log.
    pub data_crc: u32,
    /// Every record's checksum holds, the commit is there, and its count
    /// and data CRC match the copies.
    pub complete: bool,
    /// Replay installs it.
    pub replayed: bool,
    /// Older than the header's `next_seq`: installed and checkpointed.
    pub stale: bool,
}

/// What replay does, from the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayPlan {
    pub from_seq: u64,
    /// Transactions it installs: (seq, first block, copies).
    pub applied: Vec<(u64, Bid, usize)>,
    /// The block where it stops, and why.
    pub stop_at: Bid,
    pub why_stop: String,
}

/// The journal of an image.
#[derive(Debug, Clone)]
pub struct JournalReport {
    /// Mode `journal` with a region: false for mode `none`.
    pub present: bool,
    pub start: Bid,
    pub blocks: u32,
    pub header: Option<JournalHeader>,
    pub records: Vec<Record>,
    pub transactions: Vec<Transaction>,
    pub replay: Option<ReplayPlan>,
    /// What the read-only mount replayed in memory (transactions), None
    /// when it could not mount.
    pub mount_replayed: Option<u64>,
    /// Homes per transaction the text shows (None: all).
    pub limit: Option<usize>,
}

/// What the scan found at one log block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogBlock {
    Descriptor {
        seq: u64,
    },
    /// Copy `index` of the descriptor at `desc`, for home `home`.
    Copy {
        desc: Bid,
        index: usize,
        home: Bid,
        seq: u64,
    },
    Commit {
        seq: u64,
    },
    /// Nothing the scan recognises: unused, or the rest of an old cycle.
    Other,
}

fn sector_crc(b: &Block) -> u32 {
    let c = crc32c::crc32c(&b[..HDR_CRC]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &b[HDR_CRC + 4..HEADER_BYTES])
}

impl Inspector {
    /// The journal: header, records, transactions, and what replay
    /// installs. `limit`: homes per transaction the text shows (None:
    /// all). For mode `none`, a report that says there is no journal.
    pub fn journal(&self, limit: Option<usize>) -> Result<JournalReport, Error> {
        let sb = self.geometry()?;
        let mut r = JournalReport {
            present: self.journaled(),
            start: sb.journal_start,
            blocks: sb.journal_blocks,
            header: None,
            records: Vec::new(),
            transactions: Vec::new(),
            replay: None,
            mount_replayed: self.info().map(|i| i.journal_replayed),
            limit,
        };
        if !r.present {
            return Ok(r);
        }
        if r.blocks < 3 {
            return Err(damaged(format!(
                "the journal region has {} blocks: too small to hold a transaction",
                r.blocks
            )));
        }
        let hb = self.read_disk(r.start)?;
        r.header = Some(JournalHeader {
            bid: r.start,
            magic: magic(hb),
            crc: (get_u32(hb, HDR_CRC), sector_crc(hb)),
            next_seq: get_u64(hb, 8),
            valid: header_decode(hb),
        });
        r.records = self.scan_log(r.start, r.blocks).0;
        r.transactions = self.transactions(&r.records);
        if let Some(next) = header_decode(hb) {
            let plan = self.plan_replay(r.start, r.blocks, next);
            for t in &mut r.transactions {
                t.replayed = plan.applied.iter().any(|a| a.0 == t.seq && a.1 == t.first);
                t.stale = t.seq < next;
            }
            r.replay = Some(plan);
        }
        for t in &mut r.transactions {
            t.copy_kinds = t
                .copies
                .iter()
                .map(|&(_, pos)| self.read_disk(pos).map_or("?".into(), magic_tag))
                .collect();
        }
        Ok(r)
    }

    /// Every record of the log region `start + 1 .. start + blocks`, and
    /// what each block is.
    pub(super) fn scan_log(&self, start: Bid, blocks: u32) -> (Vec<Record>, Vec<LogBlock>) {
        let end = start as u64 + blocks as u64;
        let mut records = Vec::new();
        let mut what = vec![LogBlock::Other; blocks.saturating_sub(1) as usize];
        let mut at = start as u64 + 1;
        while at < end {
            let Ok(b) = self.read_disk(at as Bid) else {
                break;
            };
            let bid = at as Bid;
            let idx = (at - start as u64 - 1) as usize;
            let seq = record_seq(b);
            let crc_ok = block_crc_ok(b);
            match magic(b) {
                MAGIC_DESCRIPTOR => {
                    let count = get_u32(b, 16);
                    // A count beyond what a descriptor holds, or beyond the
                    // region, cannot be trusted to skip copies by.
                    let room = (end - at - 1).min(DESC_CAP as u64) as usize;
                    let n = (count as usize).min(room);
                    let homes: Vec<Bid> = (0..n).map(|i| get_u32(b, 32 + 4 * i)).collect();
                    what[idx] = LogBlock::Descriptor { seq };
                    let trusted = crc_ok && count as usize <= room && count > 0;
                    if trusted {
                        for (i, &home) in homes.iter().enumerate() {
                            what[idx + 1 + i] = LogBlock::Copy {
                                desc: bid,
                                index: i,
                                home,
                                seq,
                            };
                        }
                    }
                    records.push(Record {
                        at: bid,
                        seq,
                        crc_ok,
                        kind: RecordKind::Descriptor { count, homes },
                    });
                    at += if trusted { 1 + n as u64 } else { 1 };
                }
                MAGIC_COMMIT => {
                    what[idx] = LogBlock::Commit { seq };
                    records.push(Record {
                        at: bid,
                        seq,
                        crc_ok,
                        kind: RecordKind::Commit {
                            total: get_u32(b, 16),
                            data_crc: get_u32(b, 20),
                        },
                    });
                    at += 1;
                }
                _ => at += 1,
            }
        }
        (records, what)
    }

    /// Groups the records into transactions: descriptors of one sequence
    /// number in a row, closed by a commit of that number.
    fn transactions(&self, records: &[Record]) -> Vec<Transaction> {
        let mut out: Vec<Transaction> = Vec::new();
        // Whether every record of each transaction so far has a valid
        // checksum.
        let mut sound: Vec<bool> = Vec::new();
        let fresh = |r: &Record| Transaction {
            seq: r.seq,
            first: r.at,
            last: r.at,
            copies: Vec::new(),
            copy_kinds: Vec::new(),
            commit: None,
            data_crc: 0,
            complete: false,
            replayed: false,
            stale: false,
        };
        for r in records {
            let joins = out
                .last()
                .is_some_and(|t| t.seq == r.seq && t.commit.is_none());
            if !joins {
                out.push(fresh(r));
                sound.push(true);
            }
            let (Some(t), Some(ok)) = (out.last_mut(), sound.last_mut()) else {
                continue;
            };
            *ok &= r.crc_ok;
            match &r.kind {
                RecordKind::Descriptor { homes, .. } => {
                    t.copies.extend(
                        homes
                            .iter()
                            .enumerate()
                            .map(|(i, &h)| (h, r.at + 1 + i as Bid)),
                    );
                    t.last = r.at + homes.len() as Bid;
                }
                RecordKind::Commit { total, data_crc } => {
                    t.commit = Some((r.at, *total, *data_crc));
                    t.last = r.at;
                    let mut crc = 0u32;
                    for &(_, pos) in &t.copies {
                        if let Ok(b) = self.read_disk(pos) {
                            crc = crc32c::crc32c_append(crc, b);
                        }
                    }
                    t.data_crc = crc;
                    t.complete = *ok
                        && !t.copies.is_empty()
                        && *total as usize == t.copies.len()
                        && *data_crc == crc;
                }
            }
        }
        out
    }

    /// What replay does from `next_seq` (txn/replay.rs, `find`): the same
    /// decoders and checks, reading the disk.
    fn plan_replay(&self, start: Bid, blocks: u32, next_seq: u64) -> ReplayPlan {
        let end = start as u64 + blocks as u64;
        let total = self.store().blocks();
        let mut plan = ReplayPlan {
            from_seq: next_seq,
            applied: Vec::new(),
            stop_at: start + 1,
            why_stop: String::new(),
        };
        let mut seq = next_seq;
        let mut at = start as u64 + 1;
        'txn: loop {
            let first = at;
            let mut copies = 0usize;
            let mut crc = 0u32;
            loop {
                plan.stop_at = at.min(u32::MAX as u64) as Bid;
                if at >= end {
                    plan.why_stop = "the end of the region".into();
                    break 'txn;
                }
                let Ok(b) = self.read_disk(at as Bid) else {
                    plan.why_stop = "an unreadable block".into();
                    break 'txn;
                };
                if let Some((n, data_crc)) = commit_decode(b, seq) {
                    if n as usize != copies || data_crc != crc || copies == 0 {
                        plan.why_stop = format!(
                            "the commit of transaction {seq} does not match its copies \
                             (count {n} for {copies}, or their CRC): a torn transaction"
                        );
                        break 'txn;
                    }
                    plan.applied.push((seq, first as Bid, copies));
                    seq += 1;
                    at += 1;
                    continue 'txn;
                }
                let Some(homes) = descriptor_decode(b, seq) else {
                    plan.why_stop = self.not_a_record(b, seq);
                    break 'txn;
                };
                if at + 1 + homes.len() as u64 > end {
                    plan.why_stop = "a descriptor whose copies run past the region".into();
                    break 'txn;
                }
                for (i, &home) in homes.iter().enumerate() {
                    if home as u64 >= total
                        || (home as u64 >= start as u64 && (home as u64) < end)
                        || home == 1
                    {
                        plan.why_stop = format!(
                            "a descriptor of transaction {seq} naming home {home}, which replay \
                             never writes (outside the image, in the journal, or block 1)"
                        );
                        break 'txn;
                    }
                    if let Ok(c) = self.read_disk((at + 1 + i as u64) as Bid) {
                        crc = crc32c::crc32c_append(crc, c);
                    }
                    copies += 1;
                }
                at += 1 + homes.len() as u64;
            }
        }
        plan
    }

    /// Why a block is not a record of transaction `seq`.
    fn not_a_record(&self, b: &Block, seq: u64) -> String {
        let m = magic(b);
        if b.iter().all(|&x| x == 0) {
            return "zeros: no transaction was written here".into();
        }
        if matches!(m, MAGIC_DESCRIPTOR | MAGIC_COMMIT) {
            let kind = if m == MAGIC_DESCRIPTOR {
                "descriptor"
            } else {
                "commit"
            };
            if !block_crc_ok(b) {
                return format!("a {kind} whose checksum fails (torn, or damaged)");
            }
            let s = record_seq(b);
            if s == seq && m == MAGIC_DESCRIPTOR {
                return format!(
                    "a descriptor of transaction {seq} announcing {} copies (1..={DESC_CAP} \
                     are possible)",
                    get_u32(b, 16)
                );
            }
            if s >= SEQ_LIMIT {
                return format!("a {kind} with an impossible sequence number {s}");
            }
            if s < seq {
                return format!(
                    "a {kind} of transaction {s}, older than {seq}: left from an earlier cycle"
                );
            }
            return format!("a {kind} of transaction {s}, where {seq} was expected");
        }
        format!(
            "a block that is no record of transaction {seq} (magic {})",
            magic_text(m)
        )
    }
}

impl fmt::Display for JournalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.present {
            return writeln!(
                f,
                "no journal: the image is in mode none (journal_blocks = {}); changes are made \
                 in place",
                self.blocks
            );
        }
        writeln!(
            f,
            "journal region: blocks {} ({} blocks: header at {}, log {})",
            range(self.start as u64, self.blocks as u64),
            self.blocks,
            self.start,
            range(self.start as u64 + 1, self.blocks as u64 - 1)
        )?;
        if let Some(h) = &self.header {
            let crc = super::text::crc_verdict(h.crc.0, h.crc.1);
            writeln!(
                f,
                "header (block {}): magic {}, crc {crc}, next_seq {}{}",
                h.bid,
                magic_text(h.magic),
                h.next_seq,
                if h.valid.is_some() {
                    ""
                } else {
                    "  -- UNREADABLE: mount refuses the image (journal unreadable)"
                }
            )?;
        }
        let shown = self.limit.unwrap_or(usize::MAX);
        writeln!(f, "records in the log ({}):", self.records.len())?;
        for r in self.records.iter().take(shown) {
            let crc = if r.crc_ok { "crc valid" } else { "crc BAD" };
            match &r.kind {
                RecordKind::Descriptor { count, homes } => {
                    let list: Vec<String> = homes.iter().take(shown).map(u32::to_string).collect();
                    let etc = if homes.len() > shown { ", ..." } else { "" };
                    writeln!(
                        f,
                        "  block {}: descriptor, seq {}, {count} copies ({crc}): homes {}{etc}",
                        r.at,
                        r.seq,
                        list.join(", ")
                    )?;
                }
                RecordKind::Commit { total, data_crc } => writeln!(
                    f,
                    "  block {}: commit, seq {}, {total} copies, data crc {data_crc:#010x} ({crc})",
                    r.at, r.seq
                )?,
            }
        }
        let mut s = String::new();
        more(&mut s, "  ", self.records.len(), self.limit, "records");
        f.write_str(&s)?;
        writeln!(f, "transactions ({}):", self.transactions.len())?;
        // Those replay installs are always shown; of the others, the
        // first up to the limit.
        let mut others = 0;
        for t in &self.transactions {
            if !t.replayed {
                others += 1;
                if others > shown {
                    continue;
                }
            }
            let state = if t.replayed {
                "committed: replay installs it"
            } else if t.stale {
                "stale: older than next_seq, installed and checkpointed already"
            } else if t.complete {
                "complete, but replay stops before it"
            } else if t.commit.is_none() {
                "not committed (no commit record): replay ignores it"
            } else if t.copies.is_empty() {
                "a commit whose descriptor is gone (overwritten by a later cycle)"
            } else {
                "torn (its commit does not match its copies): replay ignores it"
            };
            writeln!(
                f,
                "  seq {} at blocks {}: {} copies; {state}",
                t.seq,
                range(t.first as u64, (t.last - t.first) as u64 + 1),
                t.copies.len()
            )?;
            if let Some((at, total, crc)) = t.commit {
                writeln!(
                    f,
                    "    commit at {at}: {total} copies, data crc {crc:#010x} ({})",
                    if crc == t.data_crc && total as usize == t.copies.len() {
                        "matches the copies".to_string()
                    } else {
                        format!("the copies give {:#010x}", t.data_crc)
                    }
                )?;
            }
            if t.copies.is_empty() {
                continue;
            }
            let homes: Vec<String> = t
                .copies
                .iter()
                .zip(
                    t.copy_kinds
                        .iter()
                        .map(String::as_str)
                        .chain(std::iter::repeat("?")),
                )
                .map(|(&(h, _), tag)| format!("{h} [{tag}]"))
                .collect();
            let list: Vec<&str> = homes.iter().take(shown).map(String::as_str).collect();
            writeln!(f, "    homes: {}", list.join(", "))?;
            let mut s = String::new();
            more(&mut s, "    ", homes.len(), self.limit, "homes");
            f.write_str(&s)?;
        }
        let mut s = String::new();
        let replayed = self.transactions.iter().filter(|t| t.replayed).count();
        more(
            &mut s,
            "  ",
            self.transactions.len() - replayed,
            self.limit,
            "transactions (stale, or not installed)",
        );
        f.write_str(&s)?;
        match &self.replay {
            Some(p) => {
                let blocks: usize = p.applied.iter().map(|a| a.2).sum();
                writeln!(
                    f,
                    "replay: from seq {} at block {}: installs {} transactions ({blocks} blocks); \
                     stops at block {}: {}",
                    p.from_seq,
                    self.start + 1,
                    p.applied.len(),
                    p.stop_at,
                    p.why_stop
                )?;
            }
            None => writeln!(f, "replay: none: the header is unreadable")?,
        }
        match self.mount_replayed {
            Some(n) => writeln!(
                f,
                "this read-only mount replayed {n} transactions, in memory only"
            )?,
            None => writeln!(f, "the image could not be mounted: nothing was replayed")?,
        }
        Ok(())
    }
}

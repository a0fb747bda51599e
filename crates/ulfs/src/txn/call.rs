//! The call boundary of the journal: `begin_call`, `end_call` and
//! `undo_call`, and the writes that record what a block held before the
//! call changed it (the record itself is undo.rs). This is what makes every
//! call atomic within a transaction that spans many calls (mod.rs, "Every
//! call is atomic").

use super::Journal;
use super::undo::{Before, PART};
use crate::errno::{Errno, Result};
use crate::format::{Bid, Block};

/// Puts back 256-byte part `part` of a block.
fn put_part(b: &mut Block, part: u8, bytes: &[u8; PART]) {
    let at = part as usize * PART;
    b[at..at + PART].copy_from_slice(bytes);
}

impl Journal {
    /// Begins a call: from here its changes can be undone.
    pub fn begin_call(&mut self) {
        debug_assert!(!self.call.open, "calls do not nest");
        // The record is empty: every call ends in `end_call` or `undo_call`
        // (a call cut off by a panic is undone before the next begins).
        self.call.open = true;
        let log = self.log.as_ref();
        self.call.order_len = log.map_or(0, |l| l.order.len());
        self.call.began = log.and_then(|l| l.began);
    }

    /// Whether a call began and neither ended nor was undone: the call
    /// panicked and the panic was caught.
    pub fn in_call(&self) -> bool {
        self.call.open
    }

    /// Ends a call that succeeded: its changes stay.
    pub fn end_call(&mut self) {
        self.rebase_call();
        self.call.open = false;
    }

    /// Moves the undo point to now: the call's changes so far stay (after
    /// a commit in the middle of a call, or at its end).
    pub(super) fn rebase_call(&mut self) {
        let log = self.log.as_ref();
        self.call
            .rebase(log.map_or(0, |l| l.order.len()), log.and_then(|l| l.began));
    }

    /// Records what `bid` holds before the call first changes it.
    pub(super) fn remember_whole(&mut self, bid: Bid) -> Result<()> {
        let before = match &self.log {
            Some(log) => match log.shadows.get(&bid) {
                Some(s) => Before::Whole(self.call.copy(s)),
                None => Before::Home,
            },
            None => Before::Whole(self.call.copy(self.store.block(bid)?)),
        };
        self.call.before.push((bid, before));
        Ok(())
    }

    /// Writes metadata block `bid` within the running transaction, like
    /// `meta_mut`, for a caller that changes only the 256-byte parts
    /// `parts` of it (an inode slot; a bitmap word and the map header's
    /// free count; one block pointer): a call's undo record keeps only
    /// those parts, so a small change on the data path costs a 256-byte
    /// copy instead of a whole block. The caller must change nothing else.
    #[inline]
    pub fn meta_mut_parts(&mut self, bid: Bid, parts: &[usize]) -> Result<&mut Block> {
        if self.failed {
            return Err(Errno::EROFS);
        }
        if self.call.open {
            let shadowed = self.log.as_ref().map(|l| l.shadows.get(&bid));
            match shadowed {
                // Journal, no shadow yet: undo drops the shadow.
                Some(None) => {
                    if self.call.needs_whole(bid) {
                        self.call.before.push((bid, Before::Home));
                    }
                }
                _ => {
                    for &part in parts {
                        if !self.call.needs_part(bid, part) {
                            continue;
                        }
                        let block = match shadowed {
                            Some(Some(s)) => &s[..],
                            _ => &self.store.block(bid)?[..],
                        };
                        let mut bytes = [0; PART];
                        bytes.copy_from_slice(&block[part * PART..(part + 1) * PART]);
                        let part = part as u8;
                        self.call.before.push((bid, Before::Part { part, bytes }));
                    }
                }
            }
        }
        self.write_block(bid)
    }

    /// Undoes everything the call in progress changed since it began (or
    /// since a commit inside it), and ends it. If a block cannot be put
    /// back, the journal latches read-only rather than go on from a state
    /// that is neither before nor after the call.
    pub fn undo_call(&mut self) {
        let mut before = std::mem::take(&mut self.call.before);
        let mut ok = true;
        while let Some((bid, was)) = before.pop() {
            match &mut self.log {
                Some(log) => match was {
                    Before::Home => {
                        log.drop_shadow(bid);
                        // The home is current again: verified on next read.
                        self.verified.remove(bid);
                    }
                    Before::Whole(copy) => {
                        if let Some(s) = log.shadows.insert(bid, copy) {
                            self.call.recycle(s);
                        }
                    }
                    Before::Part { part, bytes } => match log.shadows.get_mut(&bid) {
                        Some(s) => put_part(s, part, &bytes),
                        None => ok = false,
                    },
                },
                None => {
                    match self.store.block_mut(bid) {
                        Ok(home) => match was {
                            Before::Whole(copy) => {
                                home.copy_from_slice(&copy[..]);
                                self.call.recycle(copy);
                            }
                            Before::Part { part, bytes } => put_part(home, part, &bytes),
                            Before::Home => {}
                        },
                        Err(_) => ok = false,
                    }
                    // Sealed at the next checkpoint, as any block written.
                    self.in_place.wrote(bid);
                }
            }
        }
        if let Some(log) = &mut self.log {
            log.order.truncate(self.call.order_len);
            log.began = self.call.began;
            let q = &mut log.quarantine;
            for bid in &self.call.freed_added {
                q.running.remove(bid);
            }
            for bid in &self.call.fresh_added {
                q.fresh.remove(bid);
            }
            q.fresh.extend(self.call.fresh_removed.iter().copied());
        }
        if !ok {
            self.failed = true;
        }
        self.call.before = before;
        self.call.rebase(0, None);
        self.call.open = false;
    }
}

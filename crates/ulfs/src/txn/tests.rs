//! Tests of the journal as a whole: shadows, commit, replay, quarantine,
//! the checksum cache and damage reports, on a simulated disk.

use super::*;
use crate::format::{BLOCK_SIZE, MAGIC_MAP, init_block, seal_block};
use crate::store::{Fate, SimDisk};

fn in_place() -> Journal {
    Journal::in_place(Box::new(SimDisk::new(8)), false)
}

#[test]
fn checkpoint_seals_what_was_written() {
    let mut j = in_place();
    init_block(j.meta_mut(3).unwrap(), MAGIC_MAP);
    j.meta_mut(3).unwrap()[100] = 1;
    init_block(j.meta_mut(4).unwrap(), MAGIC_MAP);
    j.commit();
    assert!(!block_crc_ok(j.meta(3).unwrap()));
    j.checkpoint().unwrap();
    assert!(block_crc_ok(j.meta(3).unwrap()));
    assert!(block_crc_ok(j.meta(4).unwrap()));
}

#[test]
fn forgotten_blocks_are_not_sealed() {
    let mut j = in_place();
    init_block(j.meta_mut(5).unwrap(), MAGIC_MAP);
    j.forget(5);
    // The block now holds file data; sealing must not touch its bytes.
    j.data_mut(5).unwrap().fill(0xAB);
    j.checkpoint().unwrap();
    assert!(j.data(5).unwrap().iter().all(|&b| b == 0xAB));
}

fn journaled_disk() -> SimDisk {
    let mut d = SimDisk::new(64);
    Journal::format_region(&mut d, 2, 16, false).unwrap();
    d.flush().unwrap();
    d
}

fn open(d: SimDisk) -> (Journal, Replayed) {
    Journal::journaled(Box::new(d), 2, 16, true).unwrap()
}

fn disk_of(j: &Journal) -> &SimDisk {
    j.store().as_sim().unwrap()
}

#[test]
fn shadows_stay_private_until_commit() {
    let (mut j, _) = open(journaled_disk());
    init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
    j.meta_mut(40).unwrap()[200] = 7;
    assert_eq!(j.meta(40).unwrap()[200], 7, "reads see the shadow");
    assert_eq!(
        disk_of(&j).current()[40 * BLOCK_SIZE + 200],
        0,
        "the home is untouched"
    );
    j.commit_txn().unwrap();
    assert_eq!(
        disk_of(&j).current()[40 * BLOCK_SIZE + 200],
        7,
        "installed after commit"
    );
    assert!(block_crc_ok(j.meta(40).unwrap()));
}

#[test]
fn replay_applies_committed_and_ignores_torn() {
    let (mut j, _) = open(journaled_disk());
    init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
    j.meta_mut(40).unwrap()[200] = 1;
    j.commit_txn().unwrap();
    // Power cut after the commit: homes written or not, replay fixes it.
    let lost = disk_of(&j).crash_image(|_| Fate::Lost);
    let (j2, r) = open(SimDisk::from_image(lost));
    assert_eq!(r.transactions, 1);
    assert_eq!(j2.meta(40).unwrap()[200], 1);
    // A second transaction whose commit record never made it.
    j.meta_mut(41).unwrap()[300] = 2;
    j.log
        .as_mut()
        .unwrap()
        .write_copies(&mut *j.store, &[])
        .unwrap();
    j.flush().unwrap();
    let (j3, r) = open(SimDisk::from_image(disk_of(&j).current().to_vec()));
    assert_eq!(r.transactions, 1, "no commit record, no replay");
    assert_eq!(j3.data(41).unwrap()[300], 0);
}

#[test]
fn replay_twice_is_replay_once() {
    let (mut j, _) = open(journaled_disk());
    init_block(j.meta_mut(50).unwrap(), MAGIC_MAP);
    j.meta_mut(50).unwrap()[9] = 9;
    j.commit_txn().unwrap();
    let img = disk_of(&j).crash_image(|_| Fate::Lost);
    // Crash in the middle of replay: capture the disk at each of its
    // flushes, with every write in flight torn.
    let mids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut d = SimDisk::from_image(img);
    let sink = mids.clone();
    d.on_flush(move |disk| {
        sink.lock()
            .unwrap()
            .push(disk.crash_image(|_| Fate::Torn(0b1010_0101)))
    });
    let _ = open(d);
    let mids = mids.lock().unwrap();
    assert!(!mids.is_empty());
    for mid in mids.iter() {
        let (j2, _) = open(SimDisk::from_image(mid.clone()));
        assert_eq!(j2.meta(50).unwrap()[9], 9);
    }
}

#[test]
fn freed_blocks_wait_for_their_commit() {
    let (mut j, _) = open(journaled_disk());
    j.forget(45);
    assert!(j.is_quarantined(45), "the durable state still has it");
    assert_eq!(j.take_reuse_hint(), None);
    j.commit_txn().unwrap();
    assert!(!j.is_quarantined(45), "committed, and no copy in the log");
    assert_eq!(j.take_reuse_hint(), Some(45), "offered for reuse");
}

#[test]
fn freed_blocks_with_a_copy_in_the_log_wait_for_a_checkpoint() {
    let (mut j, _) = open(journaled_disk());
    init_block(j.meta_mut(45).unwrap(), MAGIC_MAP);
    j.commit_txn().unwrap();
    j.forget(45);
    j.commit_txn().unwrap();
    assert!(
        j.is_quarantined(45),
        "a replay would write the logged copy over its next contents"
    );
    j.checkpoint().unwrap();
    assert!(!j.is_quarantined(45));
    assert_eq!(j.take_reuse_hint(), Some(45));
    // The log is empty again: the same block freed once more (after
    // being written as data) needs only its commit.
    j.forget(45);
    j.commit_txn().unwrap();
    assert!(!j.is_quarantined(45));
}

#[test]
fn blocks_allocated_and_freed_in_one_transaction_need_no_quarantine() {
    let (mut j, _) = open(journaled_disk());
    j.note_alloc(46);
    j.forget(46);
    assert!(
        !j.is_quarantined(46),
        "never durable, never logged: reusable"
    );
    j.note_alloc(47);
    j.commit_txn().unwrap();
    j.forget(47);
    assert!(j.is_quarantined(47), "allocated by a committed transaction");
}

/// Regression (found by the real-process crash test): a block freed and
/// written again in one transaction must be logged once, or the commit
/// record's count does not match and replay drops the transaction.
#[test]
fn block_freed_and_rewritten_in_one_transaction_replays() {
    let (mut j, _) = open(journaled_disk());
    j.note_alloc(40);
    init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
    j.forget(40);
    init_block(j.meta_mut(40).unwrap(), MAGIC_MAP);
    j.meta_mut(40).unwrap()[100] = 4;
    j.meta_mut(41).unwrap()[100] = 1;
    j.commit_txn().unwrap();
    j.meta_mut(42).unwrap()[100] = 2;
    j.commit_txn().unwrap();
    let (j2, r) = open(SimDisk::from_image(disk_of(&j).crash_image(|_| Fate::Lost)));
    assert_eq!(r.transactions, 2);
    assert_eq!(j2.meta(40).unwrap()[100], 4);
    assert_eq!(j2.data(42).unwrap()[100], 2);
}

/// After a replay that stopped at a damaged record, new transactions
/// are numbered past every record left in the region.
#[test]
fn new_transactions_are_numbered_past_leftover_records() {
    let (mut j, _) = open(journaled_disk());
    for i in 0..3u8 {
        j.meta_mut(40 + i as u32).unwrap()[7] = i + 1;
        j.commit_txn().unwrap();
    }
    let mut img = disk_of(&j).crash_image(|_| Fate::Lost);
    // Damage the first transaction's descriptor (log block 3).
    img[3 * BLOCK_SIZE + 40] ^= 1;
    let (j2, r) = open(SimDisk::from_image(img));
    assert_eq!(r.transactions, 0);
    let next = j2.log.as_ref().unwrap().next_seq;
    assert!(
        next > 3,
        "leftover records of transactions 2 and 3: next is {next}"
    );
    // ...and the header says so before anything new is logged: a
    // transaction committed now must be found by the next replay.
    assert_eq!(header_decode(j2.store().block(2).unwrap()), Some(next));
    let mut j2 = j2;
    j2.meta_mut(45).unwrap()[500] = 5;
    j2.commit_txn().unwrap();
    let (j3, r) = open(SimDisk::from_image(
        disk_of(&j2).crash_image(|_| Fate::Lost),
    ));
    assert_eq!(r.transactions, 1);
    assert_eq!(j3.meta(45).unwrap()[500], 5);
}

#[test]
fn flush_failure_latches_read_only() {
    let mut d = journaled_disk();
    d.fail_flushes(true);
    let (mut j, _) = open(d);
    j.meta_mut(40).unwrap()[0] = 1;
    assert_eq!(j.commit_txn(), Err(Errno::EIO));
    assert_eq!(j.meta_mut(41).unwrap_err(), Errno::EROFS);
    assert_eq!(j.commit_txn(), Err(Errno::EROFS));
}

#[test]
fn damaged_block_is_reported_not_trusted() {
    let mut d = SimDisk::new(8);
    init_block(d.block_mut(5).unwrap(), MAGIC_MAP);
    seal_block(d.block_mut(5).unwrap());
    d.block_mut(5).unwrap()[999] ^= 1;
    let j = Journal::in_place(Box::new(d), true);
    assert_eq!(j.meta(5).unwrap_err(), Errno::EUCLEAN);
    assert_eq!(last_damaged_block(), Some(5));
    let damage = take_damage().unwrap();
    assert_eq!((damage.block, damage.not_metadata), (5, false));
    assert_eq!(take_damage(), None, "taken once");
}

#[test]
fn a_block_without_a_header_is_not_blamed_for_its_checksum() {
    let mut d = SimDisk::new(8);
    d.block_mut(6).unwrap().fill(0x5a);
    let j = Journal::in_place(Box::new(d), true);
    assert_eq!(j.meta(6).unwrap_err(), Errno::EUCLEAN);
    let damage = take_damage().unwrap();
    assert!(damage.not_metadata);
    assert!(damage.to_string().contains("pointer"), "{damage}");
}

/// Mount is O(1) in the log's size: after a clean unmount, replay reads
/// the header and one log block, however large the region.
#[test]
fn an_empty_log_is_not_scanned() {
    let mut d = SimDisk::new(4200);
    Journal::format_region(&mut d, 2, 4096, false).unwrap();
    d.flush().unwrap();
    let (mut j, _) = Journal::journaled(Box::new(d), 2, 4096, true).unwrap();
    for i in 0..20u32 {
        j.meta_mut(4100 + i % 7).unwrap()[9] = i as u8;
        j.commit_txn().unwrap();
    }
    j.checkpoint().unwrap();
    let img = disk_of(&j).current().to_vec();
    let d = SimDisk::from_image(img);
    let before = d.blocks_read();
    let (j2, r) = Journal::journaled(Box::new(d), 2, 4096, true).unwrap();
    assert_eq!(r.transactions, 0);
    // The header and the first log block (read twice: once as a
    // transaction, once to judge where replay stopped).
    let read = disk_of(&j2).blocks_read() - before;
    assert!(read <= 3, "mount read {read} blocks of the journal");
    assert_eq!(j2.log.as_ref().unwrap().next_seq, 21, "numbering goes on");
    assert_eq!(disk_of(&j2).flush_count(), 0, "nothing written at mount");
}

/// A crash before a commit record leaves a transaction without one:
/// replay applies what was committed before it, and numbers the next one
/// past every record the region can hold (the uncommitted one's
/// descriptor stays in the log and must never pair with a new commit).
#[test]
fn an_uncommitted_transaction_is_skipped() {
    let (mut j, _) = open(journaled_disk());
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_txn().unwrap();
    j.meta_mut(41).unwrap()[300] = 2;
    j.log
        .as_mut()
        .unwrap()
        .write_copies(&mut *j.store, &[])
        .unwrap();
    j.flush().unwrap();
    let (mut j2, r) = open(SimDisk::from_image(disk_of(&j).current().to_vec()));
    assert_eq!(r.transactions, 1);
    assert_eq!(
        j2.data(41).unwrap()[300],
        0,
        "the uncommitted one is not applied"
    );
    assert_eq!(j2.log.as_ref().unwrap().next_seq, 1 + 16, "past the region");
    assert_eq!(header_decode(j2.store().block(2).unwrap()), Some(1 + 16));
    j2.meta_mut(42).unwrap()[300] = 3;
    j2.commit_txn().unwrap();
    let (j3, r) = open(SimDisk::from_image(
        disk_of(&j2).crash_image(|_| Fate::Lost),
    ));
    assert_eq!(r.transactions, 1);
    assert_eq!(
        (j3.data(40).unwrap()[300], j3.data(42).unwrap()[300]),
        (1, 3)
    );
}

/// A torn (or rotten) commit record ends replay where records of later
/// transactions may follow: new transactions are numbered past anything
/// the region can hold, without reading the region to find out.
#[test]
fn a_torn_commit_record_makes_numbering_jump() {
    let (mut j, _) = open(journaled_disk());
    for i in 0..3u8 {
        j.meta_mut(40 + i as u32).unwrap()[300] = i + 1;
        j.commit_txn().unwrap();
    }
    let mut img = disk_of(&j).crash_image(|_| Fate::Lost);
    // Log blocks 3..: (descriptor, copy, commit) per transaction; tear
    // the second commit record's last sector.
    img[8 * BLOCK_SIZE + 4000] ^= 0xff;
    let d = SimDisk::from_image(img);
    let (mut j2, r) = open(d);
    assert_eq!(r.transactions, 1);
    let next = j2.log.as_ref().unwrap().next_seq;
    assert_eq!(next, 1 + 16, "the header's number plus the region's blocks");
    assert_eq!(header_decode(j2.store().block(2).unwrap()), Some(next));
    j2.meta_mut(45).unwrap()[300] = 9;
    j2.commit_txn().unwrap();
    let (j3, r) = open(SimDisk::from_image(
        disk_of(&j2).crash_image(|_| Fate::Lost),
    ));
    assert_eq!(r.transactions, 1);
    assert_eq!(j3.data(45).unwrap()[300], 9);
    assert_eq!(
        j3.data(42).unwrap()[300],
        0,
        "the third, after the tear, is lost"
    );
}

/// In place, a block written since the checkpoint has a stale checksum
/// until it: losing its place in the checksum cache to another block
/// must not make a read of it fail.
#[test]
fn an_unsealed_block_evicted_from_the_cache_still_reads() {
    let mut d = SimDisk::new(8300);
    for bid in [5, 5 + 8192] {
        init_block(d.block_mut(bid).unwrap(), MAGIC_MAP);
        seal_block(d.block_mut(bid).unwrap());
    }
    let mut j = Journal::in_place(Box::new(d), true);
    j.meta_mut(5).unwrap()[100] = 1;
    j.meta(5 + 8192).unwrap();
    assert_eq!(j.meta(5).unwrap()[100], 1);
    j.checkpoint().unwrap();
    j.meta(5 + 8192).unwrap();
    assert_eq!(j.meta(5).unwrap()[100], 1, "sealed by the checkpoint");
}

/// A commit for fsync logs the data blocks its transaction wrote and
/// flushes only its log records, once: a crash losing every other write
/// still finds data and metadata.
#[test]
fn a_commit_for_sync_flushes_only_its_log_records() {
    let (mut j, _) = open(journaled_disk());
    j.meta_mut(41).unwrap()[300] = 1;
    j.commit_txn().unwrap(); // the first transaction takes two flushes
    let flushes = disk_of(&j).flush_count();
    j.note_alloc(45);
    j.data_mut(45).unwrap().fill(7);
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_for_sync().unwrap();
    assert_eq!(disk_of(&j).flush_count(), flushes + 1, "one flush");
    assert!(
        disk_of(&j).unflushed().any(|b| b == 40),
        "the installed home waits for the checkpoint"
    );
    let (j2, r) = open(SimDisk::from_image(disk_of(&j).crash_image(|_| Fate::Lost)));
    assert_eq!(r.transactions, 2);
    assert!(j2.data(45).unwrap().iter().all(|&b| b == 7));
    assert_eq!(j2.meta(40).unwrap()[300], 1);
}

/// A logged data block written again must never get its older logged copy
/// replayed over the newer bytes once those are durable: the next commit
/// logs it again, or (when it logs no data) empties the log first.
#[test]
fn logged_data_written_again_is_not_replayed_over() {
    for again_for_sync in [true, false] {
        let (mut j, _) = open(journaled_disk());
        j.note_alloc(45);
        j.data_mut(45).unwrap().fill(7);
        j.meta_mut(40).unwrap()[300] = 1;
        j.commit_for_sync().unwrap();
        j.data_mut(45).unwrap()[0] = 9;
        j.meta_mut(41).unwrap()[300] = 2;
        if again_for_sync {
            j.commit_for_sync().unwrap();
        } else {
            j.commit_txn().unwrap();
        }
        let (j2, _) = open(SimDisk::from_image(disk_of(&j).crash_image(|_| Fate::Lost)));
        assert_eq!(j2.data(45).unwrap()[0], 9, "for sync: {again_for_sync}");
        assert_eq!(j2.data(45).unwrap()[1], 7);
        assert_eq!(j2.meta(41).unwrap()[300], 2);
    }
}

/// Found by review: with one-flush commits a commit record can be durable
/// while its descriptor is lost. Replay, which applied the transaction
/// before it, numbers the next one past the region, so the orphaned commit
/// record can never vouch for a new transaction's copies.
#[test]
fn a_commit_record_without_its_descriptor_is_never_paired() {
    // Crash states at each flush, with the descriptor of the second
    // transaction (log block 6) lost and everything else written.
    let at_flush = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut d = journaled_disk();
    let sink = at_flush.clone();
    d.on_flush(move |disk| {
        let img = disk.crash_image(|b| if b == 6 { Fate::Lost } else { Fate::Written });
        sink.lock().unwrap().push(img)
    });
    let (mut j, _) = open(d);
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_txn().unwrap(); // log blocks 3, 4, 5
    j.note_alloc(45);
    j.data_mut(45).unwrap().fill(7);
    j.meta_mut(41).unwrap()[300] = 2;
    let flushes = disk_of(&j).flush_count();
    j.commit_for_sync().unwrap(); // one flush: descriptor at block 6
    assert_eq!(disk_of(&j).flush_count(), flushes + 1);
    let img = at_flush.lock().unwrap().last().unwrap().clone();
    let (mut j2, r) = open(SimDisk::from_image(img));
    assert_eq!(r.transactions, 1);
    assert_eq!(j2.data(41).unwrap()[300], 0, "its descriptor is lost");
    let next = j2.log.as_ref().unwrap().next_seq;
    assert_eq!(next, 1 + 16);
    // The next transactions, of the same shape, crash the same way.
    j2.meta_mut(41).unwrap()[300] = 3;
    j2.commit_txn().unwrap();
    j2.meta_mut(42).unwrap()[300] = 4;
    j2.commit_txn().unwrap();
    let (j3, r) = open(SimDisk::from_image(
        disk_of(&j2).crash_image(|_| Fate::Lost),
    ));
    assert_eq!(r.transactions, 2);
    assert_eq!(j3.data(41).unwrap()[300], 3);
    assert_eq!(j3.data(42).unwrap()[300], 4);
}

/// The first transaction after the header is committed with two flushes
/// even for fsync: none of its records may be durable without its first
/// descriptor (replay.rs keeps the number only when that is absent).
#[test]
fn the_first_transaction_of_the_log_takes_two_flushes() {
    let (mut j, _) = open(journaled_disk());
    let flushes = disk_of(&j).flush_count();
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_for_sync().unwrap();
    assert_eq!(disk_of(&j).flush_count(), flushes + 2);
    j.meta_mut(40).unwrap()[300] = 2;
    j.commit_for_sync().unwrap();
    assert_eq!(disk_of(&j).flush_count(), flushes + 3);
}

/// Found by review: a read-only mount replays into memory, and file data
/// logged by a commit for fsync must be read from there too.
#[test]
fn a_read_only_mount_reads_replayed_file_data() {
    let (mut j, _) = open(journaled_disk());
    j.note_alloc(45);
    j.data_mut(45).unwrap().fill(7);
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_for_sync().unwrap();
    let img = disk_of(&j).crash_image(|_| Fate::Lost);
    let d = SimDisk::from_image(img).read_only();
    let (ro, r) = Journal::journaled(Box::new(d), 2, 16, true).unwrap();
    assert_eq!(r.transactions, 1);
    assert_eq!(ro.meta(40).unwrap()[300], 1);
    assert!(ro.data(45).unwrap().iter().all(|&b| b == 7));
}

/// Found by review: file data that begins like a journal record (an image
/// kept in a file) is never copied into the log, where a replay could
/// take it for one.
#[test]
fn data_that_looks_like_a_journal_record_is_not_logged() {
    let (mut j, _) = open(journaled_disk());
    j.meta_mut(40).unwrap()[300] = 1;
    j.commit_txn().unwrap();
    j.note_alloc(45);
    descriptor_encode(j.data_mut(45).unwrap(), 2, &[41]);
    j.meta_mut(41).unwrap()[300] = 2;
    j.commit_for_sync().unwrap();
    assert!(!j.log.as_ref().unwrap().logged_data.contains(&45));
    let (j2, r) = open(SimDisk::from_image(disk_of(&j).crash_image(|_| Fate::Lost)));
    assert_eq!(r.transactions, 2);
    assert_eq!(
        crate::format::magic(j2.data(45).unwrap()),
        MAGIC_DESCRIPTOR,
        "flushed in place"
    );
}

/// Found by review: the first transaction's descriptor and copies durable,
/// its commit record not. Replay applies nothing but has read a record of
/// the transaction, so the number is not reused: a new transaction at the
/// same place could otherwise be paired with that descriptor.
#[test]
fn a_descriptor_without_its_commit_record_makes_numbering_jump() {
    let (mut j, _) = open(journaled_disk());
    j.meta_mut(40).unwrap()[300] = 1;
    j.meta_mut(41).unwrap()[300] = 1;
    j.log
        .as_mut()
        .unwrap()
        .write_copies(&mut *j.store, &[])
        .unwrap();
    j.flush().unwrap();
    let (j2, r) = open(SimDisk::from_image(disk_of(&j).current().to_vec()));
    assert_eq!(r.transactions, 0);
    assert_eq!(j2.log.as_ref().unwrap().next_seq, 1 + 16);
    assert_eq!(header_decode(j2.store().block(2).unwrap()), Some(1 + 16));
}

/// Freeing blocks in a call copies none of them into its undo record (a
/// freed file's data would all be copied into memory: 256 MiB for a 256
/// MiB file in mode none); undoing the call still puts back what the call
/// wrote before freeing, and a shadow it dropped.
#[test]
fn freeing_blocks_copies_nothing_into_the_undo_record() {
    let mut j = Journal::in_place(Box::new(SimDisk::new(64)), false);
    j.direct_mut(3).unwrap().fill(7);
    j.begin_call();
    for bid in 10..60 {
        j.forget(bid);
    }
    assert!(
        j.call.before.is_empty(),
        "{} blocks copied",
        j.call.before.len()
    );
    // A block written by the call, then freed: its before-image is the
    // write's, and undo restores it.
    j.meta_mut(3).unwrap().fill(9);
    j.forget(3);
    j.undo_call();
    assert!(j.peek(3).unwrap().iter().all(|&b| b == 7));

    let (mut j, _) = open(journaled_disk());
    let home = j.peek(40).unwrap()[100];
    j.meta_mut(40).unwrap()[100] = home.wrapping_add(1);
    j.begin_call();
    j.forget(40);
    j.forget(41);
    assert_eq!(j.call.before.len(), 1, "only the dropped shadow");
    j.undo_call();
    assert_eq!(
        j.peek(40).unwrap()[100],
        home.wrapping_add(1),
        "the shadow is back"
    );
}

/// Mode none: a block written by an earlier call (so unsealed), freed by a
/// call that is then undone, still reads and is sealed at the checkpoint.
#[test]
fn an_undone_free_keeps_an_unsealed_block_readable() {
    let mut j = Journal::in_place(Box::new(SimDisk::new(8)), true);
    // Sealed once.
    init_block(j.meta_mut(5).unwrap(), MAGIC_MAP);
    j.checkpoint().unwrap();
    // An earlier call changes it: its CRC is stale until the checkpoint.
    j.begin_call();
    j.meta_mut(5).unwrap()[100] = 1;
    j.end_call();
    assert!(j.meta(5).is_ok());
    // A call frees it, then fails.
    j.begin_call();
    j.forget(5);
    j.undo_call();
    let now = j.meta(5).map(|b| b[100]);
    j.checkpoint().unwrap();
    let after = j.meta(5).map(|b| b[100]);
    assert_eq!((now, after), (Ok(1), Ok(1)));
}

/// Mode none: undoing the free of a data block does not make it a block to
/// seal (a checksum written into file data).
#[test]
fn an_undone_free_of_a_data_block_does_not_seal_it() {
    let mut j = Journal::in_place(Box::new(SimDisk::new(8)), true);
    j.data_mut(5).unwrap().fill(0xAB);
    j.begin_call();
    j.forget(5);
    j.undo_call();
    j.checkpoint().unwrap();
    assert!(j.data(5).unwrap().iter().all(|&b| b == 0xAB));
}

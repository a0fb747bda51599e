//! Journal records: the header that says where replay starts, and the
//! descriptor and commit blocks that frame each transaction in the log.
//! Pure encode/decode; layouts in docs/FORMAT.md, "Journal".
//!
//! The region is `journal_start .. journal_start + journal_blocks`. Its
//! first block holds the header, whose meaningful bytes fit in one 512-byte
//! sector so that rewriting it can never tear. The log follows: each
//! transaction is one or more descriptor blocks, each followed by the
//! copies of the metadata blocks it lists, and then one commit block.

use super::*;

pub const MAGIC_JOURNAL_HEADER: u32 = u32::from_le_bytes(*b"UJHD");
pub const MAGIC_DESCRIPTOR: u32 = u32::from_le_bytes(*b"UJDS");
pub const MAGIC_COMMIT: u32 = u32::from_le_bytes(*b"UJCM");

/// The header's bytes that count (and that its CRC covers).
pub const HEADER_BYTES: usize = 512;
const HDR_NEXT_SEQ: usize = 8;

const REC_SEQ: usize = 8; // u64: transaction sequence number
const DESC_COUNT: usize = 16; // u32: block copies that follow this descriptor
const DESC_BIDS: usize = 32; // u32 home block ids
/// Block copies one descriptor can announce.
pub const DESC_CAP: usize = (BLOCK_SIZE - DESC_BIDS) / 4;
const COMMIT_TOTAL: usize = 16; // u32: block copies in the whole transaction
const COMMIT_DATA_CRC: usize = 20; // u32: CRC32C of all copies, in log order

fn sector_crc(b: &Block) -> u32 {
    let c = crc32c::crc32c(&b[..HDR_CRC]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &b[HDR_CRC + 4..HEADER_BYTES])
}

/// Writes a header: replay starts with transaction `next_seq` at the first
/// log block. Bytes past the first sector are left alone.
pub fn header_encode(b: &mut Block, next_seq: u64) {
    b[..HEADER_BYTES].fill(0);
    put_u32(b, HDR_MAGIC, MAGIC_JOURNAL_HEADER);
    put_u64(b, HDR_NEXT_SEQ, next_seq);
    let c = sector_crc(b);
    put_u32(b, HDR_CRC, c);
}

/// The sequence number replay starts from, or `None` if the header is not
/// valid.
/// Sequence numbers at or past this are damage, never real: at a million
/// commits a second, counting from 1 would take 146,000 years to reach
/// it. Refusing them keeps `seq + 1` from ever overflowing.
pub const SEQ_LIMIT: u64 = 1 << 62;

pub fn header_decode(b: &Block) -> Option<u64> {
    (magic(b) == MAGIC_JOURNAL_HEADER && get_u32(b, HDR_CRC) == sector_crc(b))
        .then(|| get_u64(b, HDR_NEXT_SEQ))
        .filter(|&seq| seq < SEQ_LIMIT)
}

pub fn descriptor_encode(b: &mut Block, seq: u64, bids: &[Bid]) {
    debug_assert!(bids.len() <= DESC_CAP);
    init_block(b, MAGIC_DESCRIPTOR);
    put_u64(b, REC_SEQ, seq);
    put_u32(b, DESC_COUNT, bids.len() as u32);
    for (i, &bid) in bids.iter().enumerate() {
        put_u32(b, DESC_BIDS + 4 * i, bid);
    }
    seal_block(b);
}

/// The home block ids a descriptor of transaction `seq` announces, if the
/// block is one.
pub fn descriptor_decode(b: &Block, seq: u64) -> Option<Vec<Bid>> {
    if magic(b) != MAGIC_DESCRIPTOR || !block_crc_ok(b) || get_u64(b, REC_SEQ) != seq {
        return None;
    }
    let n = get_u32(b, DESC_COUNT) as usize;
    if n == 0 || n > DESC_CAP {
        return None;
    }
    Some((0..n).map(|i| get_u32(b, DESC_BIDS + 4 * i)).collect())
}

pub fn commit_encode(b: &mut Block, seq: u64, total: u32, data_crc: u32) {
    init_block(b, MAGIC_COMMIT);
    put_u64(b, REC_SEQ, seq);
    put_u32(b, COMMIT_TOTAL, total);
    put_u32(b, COMMIT_DATA_CRC, data_crc);
    seal_block(b);
}

/// (total copies, CRC of the copies) of a commit block of `seq`.
pub fn commit_decode(b: &Block, seq: u64) -> Option<(u32, u32)> {
    if magic(b) != MAGIC_COMMIT || !block_crc_ok(b) || get_u64(b, REC_SEQ) != seq {
        return None;
    }
    Some((get_u32(b, COMMIT_TOTAL), get_u32(b, COMMIT_DATA_CRC)))
}

/// Whether `b` is an intact descriptor or commit block (any sequence).
pub fn is_record(b: &Block) -> bool {
    matches!(magic(b), MAGIC_DESCRIPTOR | MAGIC_COMMIT)
        && block_crc_ok(b)
        && record_seq(b) < SEQ_LIMIT
}

/// The sequence number of a descriptor or commit block.
pub fn record_seq(b: &Block) -> u64 {
    get_u64(b, REC_SEQ)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by hostile images with valid checksums: a record or header
    /// whose sequence number is near u64::MAX overflowed `seq + 1`.
    #[test]
    fn impossible_sequence_numbers_are_damage() {
        let mut b = [0u8; BLOCK_SIZE];
        header_encode(&mut b, SEQ_LIMIT);
        assert_eq!(header_decode(&b), None);
        header_encode(&mut b, SEQ_LIMIT - 1);
        assert_eq!(header_decode(&b), Some(SEQ_LIMIT - 1));
        commit_encode(&mut b, u64::MAX, 1, 0);
        assert!(!is_record(&b));
        commit_encode(&mut b, 7, 1, 0);
        assert!(is_record(&b));
    }

    #[test]
    fn records_round_trip_and_reject_strangers() {
        let mut b = [0u8; BLOCK_SIZE];
        header_encode(&mut b, 42);
        assert_eq!(header_decode(&b), Some(42));
        b[4000] = 9; // outside the sector: ignored
        assert_eq!(header_decode(&b), Some(42));
        b[100] ^= 1;
        assert_eq!(header_decode(&b), None);

        descriptor_encode(&mut b, 7, &[10, 11, 12]);
        assert_eq!(descriptor_decode(&b, 7), Some(vec![10, 11, 12]));
        assert_eq!(
            descriptor_decode(&b, 8),
            None,
            "another transaction's descriptor"
        );
        commit_encode(&mut b, 7, 3, 0xdead);
        assert_eq!(commit_decode(&b, 7), Some((3, 0xdead)));
        assert!(is_record(&b));
        assert_eq!(record_seq(&b), 7);
        b[30] ^= 1;
        assert_eq!(commit_decode(&b, 7), None, "a torn commit ends replay");
        assert_eq!(DESC_CAP, 1016);
    }
}

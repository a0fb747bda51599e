//! On-disk records of the ulfs image: constants, byte-level accessors and the
//! encode/decode/validate code of each structure. No I/O happens here.
//!
//! Every structure is documented byte by byte in docs/FORMAT.md; the offsets
//! below are the single source of truth that document describes. All integers
//! are little-endian and every value read from an image is checked before it
//! is used as an index or a length.

pub mod dirnode;
pub mod inode;
pub mod journal;
pub mod superblock;

/// Block size in bytes. Fixed: block ids are `u32`, so an image is at most 16 TiB.
pub const BLOCK_SIZE: usize = 4096;
pub type Block = [u8; BLOCK_SIZE];

/// A block id: the block's index in the image. 0 is the primary superblock,
/// so 0 also means "none" inside pointers.
pub type Bid = u32;

/// The current format version written by mkfs.
pub const FORMAT_VERSION: u32 = 2;

/// Magic numbers at offset 0 of each metadata block (all ASCII, little-endian).
pub const MAGIC_SUPER: u32 = u32::from_le_bytes(*b"ULFS");
pub const MAGIC_MAP: u32 = u32::from_le_bytes(*b"UMAP");
pub const MAGIC_INODES: u32 = u32::from_le_bytes(*b"UINO");
pub const MAGIC_INDIRECT: u32 = u32::from_le_bytes(*b"UIND");
pub const MAGIC_DIR_LEAF: u32 = u32::from_le_bytes(*b"UDLF");
pub const MAGIC_DIR_INNER: u32 = u32::from_le_bytes(*b"UDIN");

/// Every metadata block starts with `magic: u32` at 0 and `crc: u32` at 4.
pub const HDR_MAGIC: usize = 0;
pub const HDR_CRC: usize = 4;

/// Map blocks: header then a bitmap covering the blocks that follow.
pub const MAP_FREE: usize = 8; // u32: free blocks in this group
pub const MAP_GROUP: usize = 12; // u32: group index
pub const MAP_BITMAP: usize = 16;
/// Blocks covered by one map block.
pub const MAP_BITS: u32 = ((BLOCK_SIZE - MAP_BITMAP) * 8) as u32;
/// A group is a map block followed by the blocks it covers.
pub const GROUP_SPAN: u32 = MAP_BITS + 1;

/// Indirect (block-map) blocks: header then `u32` block ids.
pub const IND_OWNER: usize = 8; // u64: inode number that owns the block
pub const IND_PTRS: usize = 16;
pub const PTRS_PER_BLOCK: u64 = ((BLOCK_SIZE - IND_PTRS) / 4) as u64;
/// Direct pointers in an inode, then single, double and triple indirect.
pub const N_DIRECT: usize = 12;
pub const N_MAP: usize = N_DIRECT + 3;
/// Largest number of logical blocks a file can have.
pub const MAX_FILE_BLOCKS: u64 =
    N_DIRECT as u64 + PTRS_PER_BLOCK + PTRS_PER_BLOCK * PTRS_PER_BLOCK + PTRS_PER_BLOCK.pow(3);

/// Inode blocks: slot 0 is the header, slots 1..16 hold inodes.
pub const INODE_SIZE: usize = 256;
pub const INODES_PER_BLOCK: u64 = (BLOCK_SIZE / INODE_SIZE) as u64;
pub const IBLK_NEXT_ALL: usize = 8; // u32: next inode block (list of all)
pub const IBLK_NEXT_FREE: usize = 12; // u32: next inode block with a free slot
pub const IBLK_USED: usize = 16; // u16: bit s set = slot s in use (bit 0 = header, always set)
pub const IBLK_FULL: u16 = 0xFFFF;

/// Longest name of a directory entry, and longest path.
pub const NAME_MAX: usize = 255;
pub const PATH_MAX: usize = 4096;

#[inline]
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4-byte slice"))
}
#[inline]
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8-byte slice"))
}
#[inline]
pub fn get_i64(b: &[u8], off: usize) -> i64 {
    get_u64(b, off) as i64
}
#[inline]
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
    put_u64(b, off, v as u64);
}

/// CRC32C of a metadata block, computed with its crc field taken as zero.
pub fn block_crc(b: &Block) -> u32 {
    let c = crc32c::crc32c(&b[..HDR_CRC]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &b[HDR_CRC + 4..])
}

/// Stores the block's CRC32C in its header.
pub fn seal_block(b: &mut Block) {
    let c = block_crc(b);
    put_u32(b, HDR_CRC, c);
}

/// Whether the stored CRC32C matches the block's contents.
pub fn block_crc_ok(b: &Block) -> bool {
    get_u32(b, HDR_CRC) == block_crc(b)
}

/// Starts a fresh metadata block: zeroed, with its magic.
pub fn init_block(b: &mut Block, magic: u32) {
    b.fill(0);
    put_u32(b, HDR_MAGIC, magic);
}

/// The magic number of a block.
#[inline]
pub fn magic(b: &Block) -> u32 {
    get_u32(b, HDR_MAGIC)
}

/// Inode number of slot `slot` of inode block `bid`: the number encodes where
/// the inode lives, so finding an inode is O(1) and needs no table.
#[inline]
pub fn ino_of(bid: Bid, slot: u64) -> u64 {
    bid as u64 * INODES_PER_BLOCK + slot
}

/// Splits an inode number into (inode block, slot), or `None` when it cannot
/// name an inode (slot 0 is the block's header).
#[inline]
pub fn ino_split(ino: u64) -> Option<(Bid, usize)> {
    let bid = ino / INODES_PER_BLOCK;
    let slot = (ino % INODES_PER_BLOCK) as usize;
    if slot == 0 || bid == 0 || bid > u32::MAX as u64 {
        return None;
    }
    Some((bid as Bid, slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ino_round_trip() {
        assert_eq!(ino_split(ino_of(77, 3)), Some((77, 3)));
        assert_eq!(ino_split(ino_of(77, 0)), None);
        assert_eq!(ino_split(5), None);
    }

    #[test]
    fn crc_seals_and_detects_damage() {
        let mut b = [0u8; BLOCK_SIZE];
        init_block(&mut b, MAGIC_MAP);
        b[100] = 7;
        seal_block(&mut b);
        assert!(block_crc_ok(&b));
        b[200] ^= 1;
        assert!(!block_crc_ok(&b));
    }

    #[test]
    fn geometry_constants() {
        assert_eq!(MAP_BITS, 32640);
        assert_eq!(PTRS_PER_BLOCK, 1020);
        // Sparse files of at least 1 TiB must be addressable.
        assert!(MAX_FILE_BLOCKS * BLOCK_SIZE as u64 > 1 << 40);
    }
}

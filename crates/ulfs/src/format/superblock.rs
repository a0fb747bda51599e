//! The superblock: the image's geometry, counters and identity.
//!
//! Two copies live in blocks 0 and 1. Each carries a sequence number and a
//! CRC32C; mount takes the valid copy with the higher sequence, so a torn
//! write of one copy never loses the image. Layout: docs/FORMAT.md.

use super::*;

pub const SB_PRIMARY: Bid = 0;
pub const SB_SECONDARY: Bid = 1;

const VERSION: usize = 8;
const BLOCK_SZ: usize = 12;
const FEAT_COMPAT: usize = 16;
const FEAT_INCOMPAT: usize = 20;
const FEAT_RO_COMPAT: usize = 24;
const MODE: usize = 28;
const SEQ: usize = 32;
const TOTAL_BLOCKS: usize = 40;
const FIRST_GROUP: usize = 48;
const GROUP_COUNT: usize = 52;
const JOURNAL_START: usize = 56;
const JOURNAL_BLOCKS: usize = 60;
const ROOT_INO: usize = 64;
const FREE_BLOCKS: usize = 72;
const USED_INODES: usize = 80;
const FREE_INODES: usize = 88;
const INODE_ALL_HEAD: usize = 96;
const INODE_FREE_HEAD: usize = 100;
const ORPHAN_HEAD: usize = 104;
const STATE: usize = 112;
const NEXT_GENERATION: usize = 116;
const HASH_KEY: usize = 120;
const UUID: usize = 136;
const LABEL: usize = 152;
pub const LABEL_MAX: usize = 63;
const MKFS_TIME: usize = 216;
const MOUNT_TIME: usize = 224;
const WRITE_TIME: usize = 232;
const MOUNT_COUNT: usize = 240;

/// `feat_incompat` bit: the image holds special files (FIFOs, sockets,
/// character and block devices: inodes of those types, with no blocks).
/// Set by the first one made; a reader that does not know the types would
/// take such inodes for damage (and a repair would remove them).
pub const INCOMPAT_SPECIAL_FILES: u32 = 1;

/// Feature bits this version understands. An image with an unknown
/// incompatible bit is refused; an unknown ro-compat bit allows read-only.
pub const INCOMPAT_KNOWN: u32 = INCOMPAT_SPECIAL_FILES;
pub const RO_COMPAT_KNOWN: u32 = 0;

/// `state`: set while mounted read-write, cleared by a clean unmount.
pub const STATE_CLEAN: u32 = 1;
pub const STATE_DIRTY: u32 = 0;

/// Durability mode recorded at mkfs.
pub const MODE_NONE: u32 = 0;
pub const MODE_JOURNAL: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub feat_compat: u32,
    pub feat_incompat: u32,
    pub feat_ro_compat: u32,
    pub mode: u32,
    pub seq: u64,
    pub total_blocks: u64,
    pub first_group: u32,
    pub group_count: u32,
    pub journal_start: u32,
    pub journal_blocks: u32,
    pub root_ino: u64,
    pub free_blocks: u64,
    pub used_inodes: u64,
    pub free_inodes: u64,
    pub inode_all_head: Bid,
    pub inode_free_head: Bid,
    pub orphan_head: u64,
    pub state: u32,
    pub next_generation: u32,
    pub hash_key: [u8; 16],
    pub uuid: [u8; 16],
    pub label: [u8; 64],
    pub mkfs_time: i64,
    pub mount_time: i64,
    pub write_time: i64,
    pub mount_count: u32,
}

/// Why a superblock copy was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbError {
    NotUlfs,
    BadCrc,
    Unsupported(String),
    Corrupt(String),
}

impl Superblock {
    /// Number of the group map block `g`.
    pub fn map_bid(&self, g: u32) -> Bid {
        self.first_group + g * GROUP_SPAN
    }

    /// The group that holds block `bid`, if it is a data-area block.
    pub fn group_of(&self, bid: Bid) -> Option<u32> {
        if bid < self.first_group || bid as u64 >= self.total_blocks {
            return None;
        }
        Some((bid - self.first_group) / GROUP_SPAN)
    }

    /// Blocks of the data area that can ever be allocated (map blocks excluded).
    pub fn data_blocks(&self) -> u64 {
        self.total_blocks - self.first_group as u64 - self.group_count as u64
    }

    pub fn label_str(&self) -> String {
        let end = self
            .label
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(self.label.len());
        String::from_utf8_lossy(&self.label[..end]).into_owned()
    }

    pub fn encode(&self, b: &mut Block) {
        init_block(b, MAGIC_SUPER);
        put_u32(b, VERSION, self.version);
        put_u32(b, BLOCK_SZ, BLOCK_SIZE as u32);
        put_u32(b, FEAT_COMPAT, self.feat_compat);
        put_u32(b, FEAT_INCOMPAT, self.feat_incompat);
        put_u32(b, FEAT_RO_COMPAT, self.feat_ro_compat);
        put_u32(b, MODE, self.mode);
        put_u64(b, SEQ, self.seq);
        put_u64(b, TOTAL_BLOCKS, self.total_blocks);
        put_u32(b, FIRST_GROUP, self.first_group);
        put_u32(b, GROUP_COUNT, self.group_count);
        put_u32(b, JOURNAL_START, self.journal_start);
        put_u32(b, JOURNAL_BLOCKS, self.journal_blocks);
        put_u64(b, ROOT_INO, self.root_ino);
        put_u64(b, FREE_BLOCKS, self.free_blocks);
        put_u64(b, USED_INODES, self.used_inodes);
        put_u64(b, FREE_INODES, self.free_inodes);
        put_u32(b, INODE_ALL_HEAD, self.inode_all_head);
        put_u32(b, INODE_FREE_HEAD, self.inode_free_head);
        put_u64(b, ORPHAN_HEAD, self.orphan_head);
        put_u32(b, STATE, self.state);
        put_u32(b, NEXT_GENERATION, self.next_generation);
        b[HASH_KEY..HASH_KEY + 16].copy_from_slice(&self.hash_key);
        b[UUID..UUID + 16].copy_from_slice(&self.uuid);
        b[LABEL..LABEL + 64].copy_from_slice(&self.label);
        put_i64(b, MKFS_TIME, self.mkfs_time);
        put_i64(b, MOUNT_TIME, self.mount_time);
        put_i64(b, WRITE_TIME, self.write_time);
        put_u32(b, MOUNT_COUNT, self.mount_count);
        seal_block(b);
    }

    /// Decodes and validates one superblock copy. `image_blocks` is the
    /// number of whole blocks the backing file or device holds.
    pub fn decode(b: &Block, image_blocks: u64) -> Result<Superblock, SbError> {
        if magic(b) != MAGIC_SUPER {
            return Err(SbError::NotUlfs);
        }
        if !block_crc_ok(b) {
            return Err(SbError::BadCrc);
        }
        let mut label = [0u8; 64];
        label.copy_from_slice(&b[LABEL..LABEL + 64]);
        let mut hash_key = [0u8; 16];
        hash_key.copy_from_slice(&b[HASH_KEY..HASH_KEY + 16]);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[UUID..UUID + 16]);
        let sb = Superblock {
            version: get_u32(b, VERSION),
            feat_compat: get_u32(b, FEAT_COMPAT),
            feat_incompat: get_u32(b, FEAT_INCOMPAT),
            feat_ro_compat: get_u32(b, FEAT_RO_COMPAT),
            mode: get_u32(b, MODE),
            seq: get_u64(b, SEQ),
            total_blocks: get_u64(b, TOTAL_BLOCKS),
            first_group: get_u32(b, FIRST_GROUP),
            group_count: get_u32(b, GROUP_COUNT),
            journal_start: get_u32(b, JOURNAL_START),
            journal_blocks: get_u32(b, JOURNAL_BLOCKS),
            root_ino: get_u64(b, ROOT_INO),
            free_blocks: get_u64(b, FREE_BLOCKS),
            used_inodes: get_u64(b, USED_INODES),
            free_inodes: get_u64(b, FREE_INODES),
            inode_all_head: get_u32(b, INODE_ALL_HEAD),
            inode_free_head: get_u32(b, INODE_FREE_HEAD),
            orphan_head: get_u64(b, ORPHAN_HEAD),
            state: get_u32(b, STATE),
            next_generation: get_u32(b, NEXT_GENERATION),
            hash_key,
            uuid,
            label,
            mkfs_time: get_i64(b, MKFS_TIME),
            mount_time: get_i64(b, MOUNT_TIME),
            write_time: get_i64(b, WRITE_TIME),
            mount_count: get_u32(b, MOUNT_COUNT),
        };
        if sb.version != FORMAT_VERSION {
            return Err(SbError::Unsupported(format!(
                "format version {} (this ulfs reads version {FORMAT_VERSION})",
                sb.version
            )));
        }
        if get_u32(b, BLOCK_SZ) != BLOCK_SIZE as u32 {
            return Err(SbError::Unsupported(format!(
                "block size {} (only {BLOCK_SIZE} is supported)",
                get_u32(b, BLOCK_SZ)
            )));
        }
        if sb.feat_incompat & !INCOMPAT_KNOWN != 0 {
            return Err(SbError::Unsupported(format!(
                "incompatible features {:#x}",
                sb.feat_incompat & !INCOMPAT_KNOWN
            )));
        }
        sb.check_geometry(image_blocks).map_err(SbError::Corrupt)?;
        Ok(sb)
    }

    /// The invariants that make every later bounds check meaningful.
    fn check_geometry(&self, image_blocks: u64) -> Result<(), String> {
        if self.total_blocks > u32::MAX as u64 + 1 {
            return Err(format!(
                "{} blocks exceed the 32-bit block-id space",
                self.total_blocks
            ));
        }
        if self.total_blocks > image_blocks {
            return Err(format!(
                "superblock says {} blocks but the image holds only {image_blocks}",
                self.total_blocks
            ));
        }
        if self.mode > MODE_JOURNAL {
            return Err(format!("unknown mode {}", self.mode));
        }
        let journal_end = self.journal_start as u64 + self.journal_blocks as u64;
        if self.journal_start < 2 || journal_end > self.first_group as u64 {
            return Err("journal region overlaps the superblocks or the data area".into());
        }
        if self.first_group as u64 >= self.total_blocks || self.group_count == 0 {
            return Err("no data area".into());
        }
        let span = self.total_blocks - self.first_group as u64;
        let want_groups = span.div_ceil(GROUP_SPAN as u64);
        if self.group_count as u64 != want_groups {
            return Err(format!(
                "{} groups recorded, geometry needs {want_groups}",
                self.group_count
            ));
        }
        for (what, bid) in [
            ("inode list", self.inode_all_head),
            ("free-inode list", self.inode_free_head),
        ] {
            if bid != 0 && (bid < self.first_group || bid as u64 >= self.total_blocks) {
                return Err(format!("{what} head {bid} is outside the data area"));
            }
        }
        if ino_split(self.root_ino)
            .is_none_or(|(bid, _)| bid < self.first_group || bid as u64 >= self.total_blocks)
        {
            return Err(format!(
                "root inode {} is not a valid inode number",
                self.root_ino
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            feat_compat: 0,
            feat_incompat: 0,
            feat_ro_compat: 0,
            mode: MODE_NONE,
            seq: 5,
            total_blocks: 100_000,
            first_group: 10,
            group_count: 4,
            journal_start: 2,
            journal_blocks: 8,
            root_ino: ino_of(11, 1),
            free_blocks: 1000,
            used_inodes: 1,
            free_inodes: 14,
            inode_all_head: 11,
            inode_free_head: 11,
            orphan_head: 0,
            state: STATE_CLEAN,
            next_generation: 1,
            hash_key: [3; 16],
            uuid: [4; 16],
            label: [0; 64],
            mkfs_time: 1,
            mount_time: 2,
            write_time: 3,
            mount_count: 1,
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        let mut b = [0u8; BLOCK_SIZE];
        sb.encode(&mut b);
        assert_eq!(Superblock::decode(&b, 100_000).unwrap(), sb);
    }

    #[test]
    fn rejects_damage_and_lies() {
        let sb = sample();
        let mut b = [0u8; BLOCK_SIZE];
        sb.encode(&mut b);
        assert_eq!(
            Superblock::decode(&b, 99_999),
            Err(SbError::Corrupt(
                "superblock says 100000 blocks but the image holds only 99999".into()
            ))
        );
        b[300] ^= 0xff;
        assert_eq!(Superblock::decode(&b, 100_000), Err(SbError::BadCrc));
        let zero = [0u8; BLOCK_SIZE];
        assert_eq!(Superblock::decode(&zero, 100_000), Err(SbError::NotUlfs));
        let mut bad = sample();
        bad.group_count = 9;
        bad.encode(&mut b);
        assert!(matches!(
            Superblock::decode(&b, 100_000),
            Err(SbError::Corrupt(_))
        ));
    }
}

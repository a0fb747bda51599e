//! The 256-byte inode record: metadata of one file, directory or symlink,
//! and the root of its block map (or, for directories, of its index tree).
//! Layout: docs/FORMAT.md, "Inodes".

use super::*;
use crate::types::Timespec;

const MODE: usize = 0;
const NLINK: usize = 4;
const UID: usize = 8;
const GID: usize = 12;
const SIZE: usize = 16;
const BLOCKS: usize = 24;
const ATIME_S: usize = 32;
const MTIME_S: usize = 40;
const CTIME_S: usize = 48;
const BTIME_S: usize = 56;
const ATIME_NS: usize = 64;
const MTIME_NS: usize = 68;
const CTIME_NS: usize = 72;
const BTIME_NS: usize = 76;
const FLAGS: usize = 80;
const GENERATION: usize = 84;
const PARENT: usize = 88;
const NAME_KEY: usize = 96;
const NEXT_ORPHAN: usize = 104;
const ENTRIES: usize = 112;
const RDEV: usize = 120;
const MAP: usize = 128;
/// Symlink targets up to this length live inside the inode, over the map.
pub const INLINE_MAX: usize = 120;

/// `flags`: the symlink target is stored inline at offset 128.
pub const FLAG_INLINE: u32 = 1;

/// Longest symlink target: a target must be shorter than `PATH_MAX`.
pub const SYMLINK_MAX: u64 = PATH_MAX as u64 - 1;
/// Largest file size the block map can address.
pub const MAX_SIZE: u64 = MAX_FILE_BLOCKS * BLOCK_SIZE as u64;
/// Most blocks an inode can own: a block id is a `u32`.
const MAX_BLOCKS: u64 = 1 << 32;
const NSEC_MAX: i64 = 999_999_999;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// File type and permission bits, as `st_mode`. 0 marks a free slot.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Bytes for files and symlinks; for directories, blocks * 4096.
    pub size: u64,
    /// 4 KiB blocks owned (data and block-map or index blocks).
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    pub flags: u32,
    pub generation: u32,
    /// Directories: the parent directory's inode number.
    pub parent: u64,
    /// Directories: the hash key of this directory's entry in its parent,
    /// so `getcwd` can find its name in O(log n).
    pub name_key: u64,
    /// Next inode in the orphan list (unlinked while open).
    pub next_orphan: u64,
    /// Directories: number of entries, `.` and `..` excluded.
    pub entries: u64,
    pub rdev: u64,
    /// Regular files and long symlinks: 12 direct block ids, then single,
    /// double and triple indirect. Directories: `map[0]` is the index root.
    pub map: [u32; N_MAP],
    /// Inline symlink target (valid when `flags & FLAG_INLINE`).
    pub inline: [u8; INLINE_MAX],
}

impl Default for Inode {
    fn default() -> Self {
        Inode {
            mode: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            size: 0,
            blocks: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            btime: Timespec::default(),
            flags: 0,
            generation: 0,
            parent: 0,
            name_key: 0,
            next_orphan: 0,
            entries: 0,
            rdev: 0,
            map: [0; N_MAP],
            inline: [0; INLINE_MAX],
        }
    }
}

impl Inode {
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == libc::S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == libc::S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == libc::S_IFLNK
    }
    /// A FIFO, socket, or character or block device: a name and its
    /// metadata (and `rdev`), no contents.
    pub fn is_special(&self) -> bool {
        is_special_type(self.file_type())
    }

    /// Decodes slot bytes as they are; `decode_valid` also validates them.
    pub fn decode(b: &[u8]) -> Inode {
        let ts = |s, ns| Timespec {
            sec: get_i64(b, s),
            nsec: get_u32(b, ns) as i64,
        };
        let mut map = [0u32; N_MAP];
        for (i, m) in map.iter_mut().enumerate() {
            *m = get_u32(b, MAP + 4 * i);
        }
        let mut inline = [0u8; INLINE_MAX];
        inline.copy_from_slice(&b[MAP..MAP + INLINE_MAX]);
        Inode {
            mode: get_u32(b, MODE),
            nlink: get_u32(b, NLINK),
            uid: get_u32(b, UID),
            gid: get_u32(b, GID),
            size: get_u64(b, SIZE),
            blocks: get_u64(b, BLOCKS),
            atime: ts(ATIME_S, ATIME_NS),
            mtime: ts(MTIME_S, MTIME_NS),
            ctime: ts(CTIME_S, CTIME_NS),
            btime: ts(BTIME_S, BTIME_NS),
            flags: get_u32(b, FLAGS),
            generation: get_u32(b, GENERATION),
            parent: get_u64(b, PARENT),
            name_key: get_u64(b, NAME_KEY),
            next_orphan: get_u64(b, NEXT_ORPHAN),
            entries: get_u64(b, ENTRIES),
            rdev: get_u64(b, RDEV),
            map,
            inline,
        }
    }

    pub fn encode(&self, b: &mut [u8]) {
        b[..INODE_SIZE].fill(0);
        put_u32(b, MODE, self.mode);
        put_u32(b, NLINK, self.nlink);
        put_u32(b, UID, self.uid);
        put_u32(b, GID, self.gid);
        put_u64(b, SIZE, self.size);
        put_u64(b, BLOCKS, self.blocks);
        for (t, s, ns) in [
            (self.atime, ATIME_S, ATIME_NS),
            (self.mtime, MTIME_S, MTIME_NS),
            (self.ctime, CTIME_S, CTIME_NS),
            (self.btime, BTIME_S, BTIME_NS),
        ] {
            put_i64(b, s, t.sec);
            put_u32(b, ns, t.nsec as u32);
        }
        put_u32(b, FLAGS, self.flags);
        put_u32(b, GENERATION, self.generation);
        put_u64(b, PARENT, self.parent);
        put_u64(b, NAME_KEY, self.name_key);
        put_u64(b, NEXT_ORPHAN, self.next_orphan);
        put_u64(b, ENTRIES, self.entries);
        put_u64(b, RDEV, self.rdev);
        if self.flags & FLAG_INLINE != 0 {
            b[MAP..MAP + INLINE_MAX].copy_from_slice(&self.inline);
        } else {
            for (i, m) in self.map.iter().enumerate() {
                put_u32(b, MAP + 4 * i, *m);
            }
        }
    }

    /// The one judgement of whether a used slot holds an inode that can be
    /// served: reads (`Volume::inode`) refuse what this refuses, and fsck
    /// reports it, so a check never passes what a read would then reject.
    /// It judges each field on its own (FORMAT.md section 7), and only what
    /// no repair could make sense of: a count or pointer that disagrees
    /// with the rest of the image is the walk's business (repair fixes
    /// it), while a slot failing here is garbage. `Err` says what is wrong.
    pub fn validate(&self) -> Result<(), &'static str> {
        let ty = self.file_type();
        if !matches!(ty, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK) && !is_special_type(ty) {
            return Err("not a file type");
        }
        if is_special_type(ty) && (self.size != 0 || self.blocks != 0 || self.map != [0; N_MAP]) {
            return Err("special file with contents");
        }
        if self.size > MAX_SIZE {
            return Err("size beyond the largest file");
        }
        if self.blocks > MAX_BLOCKS {
            return Err("block count beyond the image");
        }
        let times = [self.atime, self.mtime, self.ctime, self.btime];
        if times.iter().any(|t| !(0..=NSEC_MAX).contains(&t.nsec)) {
            return Err("a timestamp's nanoseconds out of range");
        }
        if self.flags & !FLAG_INLINE != 0 {
            return Err("unknown flags");
        }
        let inline = self.flags & FLAG_INLINE != 0;
        match ty {
            libc::S_IFLNK if inline => {
                if self.size > INLINE_MAX as u64 {
                    return Err("inline symlink longer than its room");
                }
                if self.blocks != 0 {
                    return Err("inline symlink owns blocks");
                }
            }
            libc::S_IFLNK if self.size > SYMLINK_MAX => {
                return Err("symlink longer than the longest target");
            }
            _ if inline => return Err("inline flag on a file or directory"),
            _ => {}
        }
        Ok(())
    }

    /// Decodes slot bytes and validates them (see `validate`).
    pub fn decode_valid(b: &[u8]) -> Result<Inode, &'static str> {
        let i = Inode::decode(b);
        i.validate().map(|()| i)
    }

    /// Reads just the fields the data path needs, without a full decode.
    pub fn peek_size(b: &[u8]) -> u64 {
        get_u64(b, SIZE)
    }
}

/// Whether `ty` (`mode & S_IFMT`) is one of the special file types.
pub fn is_special_type(ty: u32) -> bool {
    matches!(
        ty,
        libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_have_no_contents() {
        for ty in [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK] {
            let mut i = Inode {
                mode: ty | 0o600,
                nlink: 1,
                rdev: 0x0803,
                ..Default::default()
            };
            assert_eq!(i.validate(), Ok(()));
            i.size = 1;
            assert!(i.validate().is_err(), "{ty:o} with a size");
            i.size = 0;
            i.map[0] = 9;
            assert!(i.validate().is_err(), "{ty:o} with a block");
        }
        let odd = Inode {
            mode: 0o170000 | 0o644,
            ..Default::default()
        };
        assert!(odd.validate().is_err());
    }

    #[test]
    fn round_trip() {
        let mut i = Inode {
            mode: libc::S_IFREG | 0o644,
            nlink: 2,
            uid: 1000,
            gid: 100,
            size: 123456789,
            blocks: 31,
            mtime: Timespec {
                sec: -5,
                nsec: 999_999_999,
            },
            parent: 99,
            ..Default::default()
        };
        i.map[14] = 77;
        let mut b = [0u8; INODE_SIZE];
        i.encode(&mut b);
        let mut d = Inode::decode(&b);
        assert_eq!(d.map, i.map);
        d.inline = i.inline;
        assert_eq!(d.mode, i.mode);
        assert_eq!(d.mtime, i.mtime);
        assert_eq!(d.size, i.size);
        assert_eq!(Inode::peek_size(&b), 123456789);
    }
}

//! Between the volume's words and FUSE's: inode numbers (FUSE names the
//! root 1, the image names it what its superblock says), `Stat` to
//! `FileAttr` (with `uid=`/`gid=`/`umask=` applied), and times.

use crate::options::MountConfig;
use fuser::{FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ulfs::{Ino, Stat, Timespec};

/// FUSE's inode numbers for one volume: the root and inode 1 trade
/// places, every other number is the image's own.
#[derive(Clone, Copy, Debug)]
pub struct InoMap {
    pub root: Ino,
}

impl InoMap {
    pub fn to_fuse(self, ino: Ino) -> INodeNo {
        INodeNo(if ino == self.root {
            1
        } else if ino == 1 {
            self.root
        } else {
            ino
        })
    }

    pub fn to_ulfs(self, ino: INodeNo) -> Ino {
        match ino.0 {
            1 => self.root,
            n if n == self.root => 1,
            n => n,
        }
    }
}

pub fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn file_type_of_dtype(dtype: u8) -> FileType {
    match dtype {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn system_time(t: Timespec) -> SystemTime {
    let nsec = Duration::from_nanos(t.nsec.clamp(0, 999_999_999) as u64);
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec as u64) + nsec
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + nsec
    }
}

pub fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos() as i64,
        },
        Err(e) => {
            // Before 1970: round the seconds down, keep nsec positive.
            let d = e.duration();
            let (sec, nsec) = (d.as_secs() as i64, d.subsec_nanos() as i64);
            if nsec == 0 {
                Timespec { sec: -sec, nsec: 0 }
            } else {
                Timespec {
                    sec: -sec - 1,
                    nsec: 1_000_000_000 - nsec,
                }
            }
        }
    }
}

/// A time the kernel sent in a setattr, as fuser 0.18 hands it over.
/// fuser builds a time before 1970 as EPOCH - (|sec| + nsec) where the
/// kernel meant sec + nsec (a time of -1 s + 5 ns arrives as -1.000000005
/// s): undone here, so what is stored is what the program asked for.
/// fuser is pinned to 0.18.0 for this (Cargo.toml).
pub fn kernel_time(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => timespec(t),
        Err(e) => {
            let d = e.duration();
            Timespec {
                sec: -(d.as_secs() as i64),
                nsec: d.subsec_nanos() as i64,
            }
        }
    }
}

pub fn file_attr(st: &Stat, map: InoMap, cfg: &MountConfig) -> FileAttr {
    let perm = (st.mode & 0o7777) & !cfg.umask.unwrap_or(0);
    FileAttr {
        ino: map.to_fuse(st.ino),
        size: st.size,
        blocks: st.blocks,
        atime: system_time(st.atime),
        mtime: system_time(st.mtime),
        ctime: system_time(st.ctime),
        crtime: system_time(st.btime),
        kind: file_type(st.mode),
        perm: perm as u16,
        nlink: st.nlink.min(u32::MAX as u64) as u32,
        uid: cfg.uid.unwrap_or(st.uid),
        gid: cfg.gid.unwrap_or(st.gid),
        rdev: st.rdev as u32,
        blksize: st.blksize as u32,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_and_inode_one_trade_places() {
        for root in [1, 2, 77] {
            let m = InoMap { root };
            for ino in [1, 2, 3, 77, 1 << 40] {
                assert_eq!(m.to_ulfs(m.to_fuse(ino)), ino);
            }
            assert_eq!(m.to_fuse(root), INodeNo(1));
        }
    }

    #[test]
    fn times_go_there_and_back() {
        for (sec, nsec) in [
            (0, 0),
            (1_700_000_000, 123),
            (-1, 0),
            (-1, 5),
            (-86_400, 999_999_999),
        ] {
            let t = Timespec { sec, nsec };
            assert_eq!(timespec(system_time(t)), t, "{sec}.{nsec}");
        }
    }
}

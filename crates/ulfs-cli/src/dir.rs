//! Directory helpers on a mounted image: listing and `mkdir -p`.
//!
//! The core offers only the syscall-shaped `getdents64`; listing, import,
//! export and `rm -r` all need "the sorted names in this directory", so the
//! record decoding lives here once. Records come from the image, which may
//! be corrupt, so they are bounds-checked rather than trusted.

use ulfs::{Errno, Fs};

use crate::imgpath;

/// Fixed part of `struct linux_dirent64`: ino (8), off (8), reclen (2), type (1);
/// only reclen and the name are used.
const DIRENT_HEADER: usize = 19;

/// Names in the directory open as `fd` (read from its start) except `.`
/// and `..`, sorted bytewise (as `LC_ALL=C ls` does, so output is stable
/// across locales), and the error that cut the listing short, if one did:
/// the names read before it are still returned, so a damaged directory
/// gives up what it can. Callers lstat what they need: d_type may be
/// DT_UNKNOWN and lstat is authoritative.
pub fn read_dir_fd(fs: &mut Fs, fd: ulfs::Fd) -> (Vec<Vec<u8>>, Option<Errno>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut names = Vec::new();
    if let Err(e) = fs.lseek(fd, 0, libc::SEEK_SET) {
        return (names, Some(e));
    }
    let failed = loop {
        match fs.getdents64(fd, &mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                if let Err(e) = buf
                    .get(..n)
                    .ok_or(Errno::EIO)
                    .and_then(|chunk| parse_records(chunk, &mut names))
                {
                    break Some(e);
                }
            }
            Err(e) => break Some(e),
        }
    };
    names.sort_unstable();
    (names, failed)
}

fn parse_records(mut chunk: &[u8], out: &mut Vec<Vec<u8>>) -> ulfs::Result<()> {
    while !chunk.is_empty() {
        let header = chunk.get(..DIRENT_HEADER).ok_or(Errno::EIO)?;
        let reclen = u16::from_ne_bytes([header[16], header[17]]) as usize;
        let record = chunk
            .get(..reclen)
            .filter(|_| reclen > DIRENT_HEADER)
            .ok_or(Errno::EIO)?;
        let name_area = &record[DIRENT_HEADER..];
        let name_len = name_area.iter().position(|&b| b == 0).ok_or(Errno::EIO)?;
        let name = &name_area[..name_len];
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
        chunk = &chunk[reclen..];
    }
    Ok(())
}

/// Create `path` and any missing parents; an existing directory is fine.
pub fn mkdir_p(fs: &mut Fs, path: &[u8], mode: u32) -> ulfs::Result<()> {
    let mut prefix: Vec<u8> = if path.starts_with(b"/") {
        b"/".to_vec()
    } else {
        Vec::new()
    };
    for component in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        prefix = if prefix.is_empty() {
            component.to_vec()
        } else {
            imgpath::join(&prefix, component)
        };
        match fs.mkdir(&prefix, mode) {
            Ok(()) => {}
            // EEXIST may also hide a non-directory; stat tells which. Checking
            // existing components first would cost a lookup per level always.
            Err(e) if e == Errno::EEXIST => {
                if !fs.stat(&prefix)?.is_dir() {
                    return Err(Errno::ENOTDIR);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ino: u64, d_type: u8, name: &[u8]) -> Vec<u8> {
        let reclen = (DIRENT_HEADER + name.len() + 1).next_multiple_of(8);
        let mut r = vec![0u8; reclen];
        r[0..8].copy_from_slice(&ino.to_ne_bytes());
        r[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        r[18] = d_type;
        r[DIRENT_HEADER..DIRENT_HEADER + name.len()].copy_from_slice(name);
        r
    }

    #[test]
    fn parses_records_and_skips_dots() {
        let mut buf = record(1, ulfs::DT_DIR, b".");
        buf.extend(record(1, ulfs::DT_DIR, b".."));
        buf.extend(record(7, ulfs::DT_REG, b"hello"));
        let mut out = Vec::new();
        parse_records(&buf, &mut out).unwrap();
        assert_eq!(out, vec![b"hello".to_vec()]);
    }

    #[test]
    fn rejects_malformed_records() {
        let good = record(7, ulfs::DT_REG, b"hello");
        let mut zero_len = good.clone();
        zero_len[16..18].copy_from_slice(&0u16.to_ne_bytes());
        let mut too_long = good.clone();
        too_long[16..18].copy_from_slice(&4096u16.to_ne_bytes());
        let mut no_nul = good.clone();
        for b in &mut no_nul[DIRENT_HEADER..] {
            *b = b'x';
        }
        for bad in [&zero_len[..], &too_long[..], &no_nul[..], &good[..10]] {
            assert_eq!(parse_records(bad, &mut Vec::new()), Err(Errno::EIO));
        }
    }
}

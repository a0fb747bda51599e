//! `getdents64` records: the Linux `linux_dirent64` layout, so the bytes can
//! be handed to a C program (or the preloader) unchanged.
//!
//! ```text
//! u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]  (NUL, padded to 8)
//! ```
//! `d_off` is the cookie that resumes after the record: 1 after `.`, 2 after
//! `..`, and `key + 1` after an entry, so it stays valid while the
//! directory changes.

/// Size of a record for a name of `len` bytes.
pub fn reclen(len: usize) -> usize {
    (19 + len + 1).div_ceil(8) * 8
}

/// Appends one record to `buf` at `at`; false when it does not fit.
pub fn put(buf: &mut [u8], at: &mut usize, ino: u64, off: u64, dtype: u8, name: &[u8]) -> bool {
    let len = reclen(name.len());
    if *at + len > buf.len() {
        return false;
    }
    let r = &mut buf[*at..*at + len];
    r[0..8].copy_from_slice(&ino.to_ne_bytes());
    r[8..16].copy_from_slice(&(off as i64).to_ne_bytes());
    r[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
    r[18] = dtype;
    r[19..19 + name.len()].copy_from_slice(name);
    r[19 + name.len()..].fill(0);
    *at += len;
    true
}

/// One decoded record (for tests and Rust callers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub off: i64,
    pub dtype: u8,
    pub name: Vec<u8>,
}

/// Decodes the records `getdents64` wrote into `buf[..len]`.
pub fn parse(buf: &[u8]) -> Vec<Dirent> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 19 <= buf.len() {
        let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        if reclen < 20 || at + reclen > buf.len() {
            break;
        }
        let name = &buf[at + 19..at + reclen];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        out.push(Dirent {
            ino: u64::from_ne_bytes(buf[at..at + 8].try_into().expect("8 bytes")),
            off: i64::from_ne_bytes(buf[at + 8..at + 16].try_into().expect("8 bytes")),
            dtype: buf[at + 18],
            name: name[..end].to_vec(),
        });
        at += reclen;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_alignment() {
        let mut buf = [0u8; 64];
        let mut at = 0;
        assert!(put(&mut buf, &mut at, 5, 1, 4, b"."));
        assert_eq!(at, 24);
        assert!(put(&mut buf, &mut at, 6, 99, 8, b"hello"));
        assert!(!put(
            &mut buf,
            &mut at,
            7,
            100,
            8,
            b"does-not-fit-in-what-is-left"
        ));
        let d = parse(&buf[..at]);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[1],
            Dirent {
                ino: 6,
                off: 99,
                dtype: 8,
                name: b"hello".to_vec()
            }
        );
    }
}

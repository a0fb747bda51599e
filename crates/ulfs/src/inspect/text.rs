//! Text shared by every report: the hex dump, file modes, times, names and
//! magic numbers as people read them. Kept apart so that every report
//! spells a thing the same way (a CLI user compares one output with
//! another), and so that none of it can panic on any value an image holds.

use crate::format::journal::{MAGIC_COMMIT, MAGIC_DESCRIPTOR, MAGIC_JOURNAL_HEADER};
use crate::format::*;
use std::fmt::Write;

/// An `xxd`-like dump of `bytes`, whose first byte is at image offset
/// `base`: 16 bytes a line, in pairs, then the printable ASCII. A line
/// equal to the one before is shown as one `*` for the whole run (as `xxd
/// -a` and `hexdump` do: most metadata blocks are mostly zeros), but the
/// last line is always printed, so the end of the block is visible.
pub(super) fn hexdump(out: &mut String, base: u64, bytes: &[u8]) {
    let lines = bytes.len().div_ceil(16);
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in bytes.chunks(16).enumerate() {
        let last = i + 1 == lines;
        if !last && prev == Some(line) {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(line);
        let _ = write!(out, "{:08x}:", base + (i * 16) as u64);
        for pair in line.chunks(2) {
            out.push(' ');
            for b in pair {
                let _ = write!(out, "{b:02x}");
            }
        }
        // Pad a short last line so the ASCII column stays aligned: a
        // full line's pairs take 40 characters.
        let printed = line.len() / 2 * 5 + line.len() % 2 * 3;
        out.push_str(&" ".repeat(40 - printed + 2));
        for &b in line {
            out.push(if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            });
        }
        out.push('\n');
    }
}

/// `ls -l`'s ten characters for a mode.
pub(super) fn mode_string(mode: u32) -> String {
    let ty = match mode & libc::S_IFMT {
        libc::S_IFREG => '-',
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(ty);
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let special = |x: u32, sp: u32, on: char, off: char| match (mode & x != 0, mode & sp != 0) {
        (true, true) => on,
        (false, true) => off,
        (true, false) => 'x',
        (false, false) => '-',
    };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(0o100, 0o4000, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(0o010, 0o2000, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(0o001, 0o1000, 't', 'T'));
    s
}

/// The file type of a mode, in words.
pub(super) fn type_name(mode: u32) -> String {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "regular file".into(),
        libc::S_IFDIR => "directory".into(),
        libc::S_IFLNK => "symlink".into(),
        libc::S_IFIFO => "fifo".into(),
        libc::S_IFSOCK => "socket".into(),
        libc::S_IFCHR => "character device".into(),
        libc::S_IFBLK => "block device".into(),
        0 if mode == 0 => "none (free slot)".into(),
        t => format!("unknown type {t:#o}"),
    }
}

/// A directory entry's `d_type`, in words (FORMAT.md 9.2).
pub(super) fn dtype_name(t: u8) -> String {
    match t {
        1 => "fifo".into(),
        2 => "chr".into(),
        4 => "dir".into(),
        6 => "blk".into(),
        8 => "reg".into(),
        10 => "lnk".into(),
        12 => "sock".into(),
        t => format!("type{t}"),
    }
}

/// A name or symlink target as bytes: quoted, with what is not printable
/// escaped. Names are opaque bytes (FORMAT.md 9.1), so invalid UTF-8 is
/// shown byte by byte rather than replaced.
pub(super) fn quoted(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("{s:?}"),
        Err(_) => {
            let mut out = String::from("\"");
            for &c in b {
                match c {
                    b'"' => out.push_str("\\\""),
                    b'\\' => out.push_str("\\\\"),
                    0x20..=0x7e => out.push(c as char),
                    _ => {
                        let _ = write!(out, "\\x{c:02x}");
                    }
                }
            }
            out.push('"');
            out
        }
    }
}

/// What a block is by its magic, for the kinds ulfs writes.
pub(super) fn magic_kind(m: u32) -> Option<&'static str> {
    Some(match m {
        MAGIC_SUPER => "superblock",
        MAGIC_MAP => "map block",
        MAGIC_INODES => "inode block",
        MAGIC_INDIRECT => "indirect block",
        MAGIC_DIR_LEAF => "directory leaf",
        MAGIC_DIR_INNER => "directory inner node",
        MAGIC_JOURNAL_HEADER => "journal header",
        MAGIC_DESCRIPTOR => "journal descriptor",
        MAGIC_COMMIT => "journal commit",
        _ => return None,
    })
}

/// A magic number as its four ASCII letters when it has them, and in hex.
pub(super) fn magic_text(m: u32) -> String {
    let b = m.to_le_bytes();
    if b.iter().all(|c| c.is_ascii_graphic()) {
        format!("{} ({m:#010x})", String::from_utf8_lossy(&b))
    } else {
        format!("{m:#010x}")
    }
}

/// Four letters for a block's magic in short lists ("[UINO]"), or
/// "data" for a block without a metadata header.
pub(super) fn magic_tag(b: &Block) -> String {
    let m = magic(b);
    if magic_kind(m).is_some() {
        String::from_utf8_lossy(&m.to_le_bytes()).into_owned()
    } else if b.iter().all(|&x| x == 0) {
        "zeros".into()
    } else {
        "data".into()
    }
}

/// "ok" or "BAD (stored .., computed ..)".
pub(super) fn crc_verdict(stored: u32, computed: u32) -> String {
    if stored == computed {
        format!("{stored:#010x} (valid)")
    } else {
        format!("{stored:#010x} (BAD: computed {computed:#010x})")
    }
}

/// Seconds and nanoseconds since the epoch, with the UTC date.
pub(super) fn time(sec: i64, nsec: i64) -> String {
    format!("{sec}.{nsec:09} ({})", utc(sec))
}

/// Seconds since the epoch as a UTC date, without a time zone database.
pub(super) fn utc(sec: i64) -> String {
    let days = sec.div_euclid(86_400);
    let rem = sec.rem_euclid(86_400);
    let (y, m, d) = crate::types::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `first..=last` for a run, or the one number.
pub(super) fn range(first: u64, len: u64) -> String {
    if len <= 1 {
        first.to_string()
    } else {
        format!("{first}..={}", first + len - 1)
    }
}

/// Consecutive numbers of a sorted list, as runs: `3..=9, 12, 20..=21`.
/// At most `limit` runs are written, then how many more there are.
pub(super) fn runs(values: impl IntoIterator<Item = u64>, limit: Option<usize>) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for v in values {
        match runs.last_mut() {
            Some((first, len)) if *first + *len == v => *len += 1,
            _ => runs.push((v, 1)),
        }
    }
    let shown = limit.unwrap_or(usize::MAX).min(runs.len());
    let mut s = runs[..shown]
        .iter()
        .map(|&(f, l)| range(f, l))
        .collect::<Vec<_>>()
        .join(", ");
    if shown < runs.len() {
        let _ = write!(s, ", ... {} more runs", runs.len() - shown);
    }
    if s.is_empty() {
        s.push_str("none");
    }
    s
}

/// "... N more <what>" when a list was cut at `limit`.
pub(super) fn more(out: &mut String, indent: &str, total: usize, limit: Option<usize>, what: &str) {
    if let Some(l) = limit
        && total > l
    {
        let _ = writeln!(out, "{indent}... {} more {what}", total - l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_modes() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_369_343), "2026-11-22 17:42:23 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59 UTC");
        // The extremes must not overflow.
        let _ = utc(i64::MIN);
        let _ = utc(i64::MAX);
        assert_eq!(mode_string(0o40755), "drwxr-xr-x");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o41777), "drwxrwxrwt");
        assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
    }

    #[test]
    fn hexdump_stars_repeats_and_keeps_the_end() {
        let mut b = vec![0u8; 64];
        b[0] = b'U';
        let mut s = String::new();
        hexdump(&mut s, 0x1000, &b);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4, "{s}");
        assert!(lines[0].starts_with("00001000: 5500 0000"));
        assert!(lines[0].ends_with("U..............."));
        assert_eq!(lines[2], "*");
        assert!(lines[3].starts_with("00001030:"));
    }

    #[test]
    fn names_and_runs() {
        assert_eq!(quoted(b"a b"), "\"a b\"");
        assert_eq!(quoted(b"\xff\n"), "\"\\xff\\x0a\"");
        assert_eq!(runs([1, 2, 3, 7, 9, 10], None), "1..=3, 7, 9..=10");
        assert_eq!(runs([1, 3, 5], Some(2)), "1, 3, ... 1 more runs");
        assert_eq!(runs([], None), "none");
    }
}

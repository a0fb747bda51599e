//! Human-readable rendering shared by `ls`, `info`, `stat` and `du`: mode
//! strings, timestamps, byte counts, file types and UUIDs.
//!
//! These follow the conventions users already read fluently (`ls -l` mode
//! letters, `--time-style=long-iso` dates, binary units), so the output of
//! `ulfs` can be compared with the host's tools at a glance.

use ulfs::Timespec;

/// `drwxr-xr-x`-style rendering of `st_mode`, including set-id and sticky bits.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        libc::S_IFREG => '-',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    let triads = [
        (6, libc::S_ISUID, 's'),
        (3, libc::S_ISGID, 's'),
        (0, libc::S_ISVTX, 't'),
    ];
    for (shift, special_bit, special) in triads {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let exec = bits & 1 != 0;
        s.push(match (mode & special_bit != 0, exec) {
            (true, true) => special,
            (true, false) => special.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `t` broken down in the local time zone; `None` for times too far out
/// of range to break down (a hostile image).
fn local_tm(sec: i64) -> Option<libc::tm> {
    let secs = libc::time_t::try_from(sec).ok()?;
    // SAFETY: `tm` is a plain C struct (all-zero is valid) and localtime_r
    // only writes into the struct we pass; it is the reentrant variant.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    ok.then_some(tm)
}

/// `YYYY-MM-DD HH:MM` in the local time zone, like `ls --time-style=long-iso`.
pub fn local_time(t: Timespec) -> String {
    let Some(tm) = local_tm(t.sec) else {
        return format!("@{}", t.sec);
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        tm.tm_year as i64 + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    )
}

/// `YYYY-MM-DD HH:MM:SS.NNNNNNNNN +HHMM` in the local time zone, as
/// stat(1) prints times: nothing of the stored time is lost.
pub fn full_local_time(t: Timespec) -> String {
    let Some(tm) = local_tm(t.sec) else {
        return format!("@{}.{:09}", t.sec, t.nsec);
    };
    let off = tm.tm_gmtoff;
    let sign = if off < 0 { '-' } else { '+' };
    let off = off.unsigned_abs();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} {sign}{:02}{:02}",
        tm.tm_year as i64 + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        t.nsec,
        off / 3600,
        off % 3600 / 60
    )
}

/// What stat(1) calls a file type (`%F`).
pub fn type_words(mode: u32, size: u64) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG if size == 0 => "regular empty file",
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "character special file",
        libc::S_IFBLK => "block special file",
        _ => "weird file",
    }
}

/// `4.0K`, `12M`: du(1)'s `-h` (powers of 1024, rounded up, one decimal
/// below 10); plain bytes below 1 KiB.
pub fn du_human(n: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    if n < 1024 {
        return n.to_string();
    }
    let mut unit = 0;
    let mut scale = 1024u128;
    while (n as u128) >= scale * 1024 && unit + 1 < UNITS.len() {
        scale *= 1024;
        unit += 1;
    }
    let n = n as u128;
    // Tenths, rounded up, as du rounds sizes up.
    let tenths = (n * 10).div_ceil(scale);
    if tenths < 100 {
        format!("{}.{}{}", tenths / 10, tenths % 10, UNITS[unit])
    } else {
        let whole = n.div_ceil(scale);
        if whole >= 1024 && unit + 1 < UNITS.len() {
            format!("1.0{}", UNITS[unit + 1])
        } else {
            format!("{whole}{}", UNITS[unit])
        }
    }
}

/// `64.0 MiB`: one decimal, binary units; plain bytes below 1 KiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Canonical 8-4-4-4-12 lowercase hex form.
pub fn uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_strings() {
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o640), "-rw-r-----");
        assert_eq!(mode_string(libc::S_IFLNK | 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string(libc::S_IFREG | 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o2644), "-rw-r-Sr--");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1776), "drwxrwxrwT");
    }

    #[test]
    fn byte_counts() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn du_sizes() {
        assert_eq!(du_human(0), "0");
        assert_eq!(du_human(1023), "1023");
        assert_eq!(du_human(4096), "4.0K");
        assert_eq!(du_human(4097), "4.1K");
        assert_eq!(du_human(12 << 10), "12K");
        assert_eq!(du_human((10 << 20) - 1), "10M");
        assert_eq!(du_human(1536 << 20), "1.5G");
        assert_eq!(du_human((1 << 20) - 1), "1.0M");
    }

    #[test]
    fn type_words_as_stat() {
        assert_eq!(type_words(libc::S_IFREG | 0o644, 0), "regular empty file");
        assert_eq!(type_words(libc::S_IFREG | 0o644, 1), "regular file");
        assert_eq!(type_words(libc::S_IFLNK | 0o777, 3), "symbolic link");
    }

    #[test]
    fn uuid_layout() {
        let b: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(uuid(&b), "00010203-0405-0607-0809-0a0b0c0d0e0f");
    }
}

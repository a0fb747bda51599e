//! Human-readable rendering shared by `ls` and `info`: mode strings,
//! timestamps, byte counts and UUIDs.
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

/// `YYYY-MM-DD HH:MM` in the local time zone, like `ls --time-style=long-iso`.
pub fn local_time(t: Timespec) -> String {
    let secs = t.sec as libc::time_t;
    // SAFETY: `tm` is a plain C struct (all-zero is valid) and localtime_r
    // only writes into the struct we pass; it is the reentrant variant.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        // Far out-of-range times (a hostile image) cannot be broken down.
        return format!("@{}", t.sec);
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        tm.tm_year as i64 + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    )
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
    fn uuid_layout() {
        let b: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(uuid(&b), "00010203-0405-0607-0809-0a0b0c0d0e0f");
    }
}

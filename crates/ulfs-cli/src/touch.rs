//! `ulfs touch`: create empty files or set their times, as touch(1):
//! `-a`/`-m` for one time only, `-c` to create nothing, `-h` for a
//! symlink itself, and the time from `-d DATE`, `-t STAMP` or `-r REF`.
//!
//! Dates are parsed here rather than by a date library because only a few
//! unambiguous forms are worth accepting on a command line that writes to
//! an image: `@SECONDS[.FRACTION]`, `now`, and ISO 8601
//! `YYYY-MM-DD[ HH:MM[:SS[.FRACTION]]]` (a `T` may separate the parts;
//! a trailing `Z`, `UTC` or `+HH:MM` gives the zone, the local one
//! otherwise), plus `-t`'s `[[CC]YY]MMDDhhmm[.ss]`. Every field is range
//! checked: mktime(3) would silently turn February 30th into March 2nd.
//! The time is parsed before the image is opened, so a typo changes
//! nothing.

use std::path::Path;

use ulfs::{Errno, Timespec, civil_from_days, days_from_civil};

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::{self, show};

pub struct Options {
    pub no_create: bool,
    pub access_only: bool,
    pub modify_only: bool,
    pub no_dereference: bool,
    pub date: Option<String>,
    pub stamp: Option<String>,
    pub reference: Option<Vec<u8>>,
}

/// A new file's mode: what touch(1) yields under the usual umask 022 (in
/// library mode there is no umask; mkdir does the same).
const FILE_MODE: u32 = 0o644;

const NOW: Timespec = Timespec {
    sec: 0,
    nsec: ulfs::UTIME_NOW,
};
const OMIT: Timespec = Timespec {
    sec: 0,
    nsec: ulfs::UTIME_OMIT,
};

pub fn run(image_path: &Path, paths: &[Vec<u8>], opts: &Options) -> CliResult {
    let usage = |m: String| CliError::new("touch", m).with_code(crate::EXIT_USAGE);
    let given = [
        opts.date.is_some(),
        opts.stamp.is_some(),
        opts.reference.is_some(),
    ];
    if given.iter().filter(|&&g| g).count() > 1 {
        return Err(usage("give only one of -d, -t and -r".into()));
    }
    let fixed = match (&opts.date, &opts.stamp) {
        (Some(d), _) => Some(parse_date(d).map_err(usage)?),
        (_, Some(t)) => Some(parse_stamp(t).map_err(usage)?),
        _ => None,
    };
    let mut failures = Failures::default();
    image::with_fs("touch", image_path, Access::ReadWrite, |fs| {
        let [atime, mtime] = match (&opts.reference, fixed) {
            (Some(r), _) => {
                let st = fs
                    .stat(r)
                    .map_err(|e| CliError::errno(format!("touch: {}", show(r)), e))?;
                [st.atime, st.mtime]
            }
            (None, Some(t)) => [t, t],
            (None, None) => [NOW, NOW],
        };
        // -a alone keeps the mtime, -m alone the atime; both, or neither, set both.
        let times = match (opts.access_only, opts.modify_only) {
            (true, false) => [atime, OMIT],
            (false, true) => [OMIT, mtime],
            _ => [atime, mtime],
        };
        let flags = if opts.no_dereference {
            libc::AT_SYMLINK_NOFOLLOW
        } else {
            0
        };
        for path in paths {
            if let Err(e) = touch_one(fs, path, times, flags, opts) {
                failures.report(CliError::errno(format!("touch: {}", show(path)), e));
            }
        }
        Ok(())
    })?;
    failures.finish()
}

fn touch_one(
    fs: &mut ulfs::Fs,
    path: &[u8],
    times: [Timespec; 2],
    flags: i32,
    opts: &Options,
) -> ulfs::Result<()> {
    match fs.utimensat(libc::AT_FDCWD, path, Some(times), flags) {
        Err(e) if e == Errno::ENOENT => {}
        done => return done,
    }
    // Missing: -c says nothing; -h never creates (as touch(1)).
    if opts.no_create {
        return Ok(());
    }
    if opts.no_dereference || imgpath::file_name(path).is_none() {
        return Err(Errno::ENOENT);
    }
    let fd = fs.open(path, libc::O_WRONLY | libc::O_CREAT, FILE_MODE)?;
    let set = fs.futimens(fd, Some(times));
    let closed = fs.close(fd);
    set.and(closed)
}

/// `-d`: `@SECONDS[.FRACTION]`, `now`, or ISO 8601 date and time.
pub fn parse_date(s: &str) -> Result<Timespec, String> {
    let bad = |why: &str| {
        format!(
            "invalid date '{s}': {why} (give @SECONDS, now, or YYYY-MM-DD[ HH:MM[:SS[.N]]][Z|+HH:MM])"
        )
    };
    if s == "now" {
        return Ok(Timespec::now());
    }
    if let Some(epoch) = s.strip_prefix('@') {
        let (neg, digits) = match epoch.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, epoch),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("not a number of seconds"));
        }
        let sec: i64 = whole.parse().map_err(|_| bad("out of range"))?;
        let nsec = fraction(frac).ok_or_else(|| bad("bad fraction"))?;
        // -1.5 s is 2 s before the epoch plus 0.5 s.
        return Ok(match (neg, nsec) {
            (false, n) => Timespec { sec, nsec: n },
            (true, 0) => Timespec { sec: -sec, nsec: 0 },
            (true, n) => Timespec {
                sec: -sec - 1,
                nsec: 1_000_000_000 - n,
            },
        });
    }
    let (body, zone) = split_zone(s).ok_or_else(|| bad("bad time zone"))?;
    let (date, time) = match body.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (body, None),
    };
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d[..] else {
        return Err(bad("the date is not YYYY-MM-DD"));
    };
    let field = |v: &str, len: usize| -> Option<i64> {
        (v.len() == len && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (field(y, 4), field(mo, 2), field(da, 2)) else {
        return Err(bad("the date is not YYYY-MM-DD"));
    };
    let (mut hour, mut min, mut sec, mut nsec) = (0, 0, 0, 0);
    if let Some(t) = time {
        let (hms, frac) = t.split_once('.').unwrap_or((t, ""));
        let parts: Vec<&str> = hms.split(':').collect();
        let parsed = match parts[..] {
            [h, m] => field(h, 2).zip(field(m, 2)).map(|(h, m)| (h, m, 0)),
            [h, m, s] => field(h, 2)
                .zip(field(m, 2))
                .zip(field(s, 2))
                .map(|((h, m), s)| (h, m, s)),
            _ => None,
        };
        let Some((h, m, sc)) = parsed else {
            return Err(bad("the time is not HH:MM[:SS]"));
        };
        if !frac.is_empty() && parts.len() != 3 {
            return Err(bad("a fraction needs seconds"));
        }
        (hour, min, sec) = (h, m, sc);
        nsec = fraction(frac).ok_or_else(|| bad("bad fraction"))?;
    }
    let civil = Civil {
        year,
        month,
        day,
        hour,
        min,
        sec,
    };
    let secs = civil.to_epoch(zone).map_err(|why| bad(&why))?;
    Ok(Timespec { sec: secs, nsec })
}

/// `-t`: `[[CC]YY]MMDDhhmm[.ss]`, local time.
pub fn parse_stamp(s: &str) -> Result<Timespec, String> {
    let bad = |why: &str| format!("invalid time stamp '{s}': {why} (give [[CC]YY]MMDDhhmm[.ss])");
    let (main, secs) = s.split_once('.').unwrap_or((s, ""));
    let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
    if !digits(main) || (!secs.is_empty() && (secs.len() != 2 || !digits(secs))) {
        return Err(bad("not digits"));
    }
    if s.contains('.') && secs.is_empty() {
        return Err(bad("no seconds after '.'"));
    }
    let num = |v: &str| v.parse::<i64>().unwrap_or(0);
    let n = main.len();
    let year = match n {
        8 => current_year(),
        10 => {
            // POSIX: 69-99 are 1969-1999, 00-68 are 2000-2068.
            let yy = num(&main[..2]);
            if yy >= 69 { 1900 + yy } else { 2000 + yy }
        }
        12 => num(&main[..4]),
        _ => return Err(bad("wrong length")),
    };
    let rest = &main[n - 8..];
    let civil = Civil {
        year,
        month: num(&rest[0..2]),
        day: num(&rest[2..4]),
        hour: num(&rest[4..6]),
        min: num(&rest[6..8]),
        sec: if secs.is_empty() { 0 } else { num(secs) },
    };
    let sec = civil.to_epoch(Zone::Local).map_err(|why| bad(&why))?;
    Ok(Timespec { sec, nsec: 0 })
}

fn current_year() -> i64 {
    let days = Timespec::now().sec.div_euclid(86_400);
    civil_from_days(days).0
}

/// Nanoseconds from the digits after a decimal point (at most 9 count).
fn fraction(frac: &str) -> Option<i64> {
    if frac.is_empty() {
        return Some(0);
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut digits: String = frac.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    digits.parse().ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zone {
    Local,
    /// Seconds east of UTC.
    Offset(i64),
}

/// The date-time part and its zone (`Z`, ` UTC`, `+HH:MM`, `+HHMM`).
fn split_zone(s: &str) -> Option<(&str, Zone)> {
    if let Some(body) = s.strip_suffix('Z').or_else(|| s.strip_suffix(" UTC")) {
        return Some((body, Zone::Offset(0)));
    }
    // An offset needs a time before it: a date's own '-' is not one.
    let Some(t) = s.find(['T', ' ']) else {
        return Some((s, Zone::Local));
    };
    let Some(pos) = s[t..].rfind(['+', '-']).map(|p| p + t) else {
        return Some((s, Zone::Local));
    };
    let (body, off) = s.split_at(pos);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let digits: String = off[1..].chars().filter(|&c| c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i64 = digits[..2].parse().ok()?;
    let m: i64 = digits[2..].parse().ok()?;
    if h > 23 || m > 59 {
        return None;
    }
    Some((body.trim_end(), Zone::Offset(sign * (h * 3600 + m * 60))))
}

struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    min: i64,
    sec: i64,
}

impl Civil {
    fn to_epoch(&self, zone: Zone) -> Result<i64, String> {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let days_in = match self.month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap(self.year) => 29,
            2 => 28,
            _ => return Err("no such month".into()),
        };
        if !(1..=days_in).contains(&self.day) {
            return Err("no such day in that month".into());
        }
        // 60: a leap second, as touch(1) accepts.
        if self.hour > 23 || self.min > 59 || self.sec > 60 {
            return Err("no such time of day".into());
        }
        let days = days_from_civil(self.year, self.month, self.day);
        let wall = days * 86_400 + self.hour * 3600 + self.min * 60 + self.sec;
        match zone {
            Zone::Offset(off) => Ok(wall - off),
            Zone::Local => local_to_epoch(self),
        }
    }
}

/// Local wall-clock time to seconds since the epoch: the time zone rules
/// are the C library's (TZ, /etc/localtime), which only mktime(3) applies.
fn local_to_epoch(c: &Civil) -> Result<i64, String> {
    let out_of_range = || "out of range".to_string();
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = i32::try_from(c.year - 1900).map_err(|_| out_of_range())?;
    tm.tm_mon = (c.month - 1) as i32;
    tm.tm_mday = c.day as i32;
    tm.tm_hour = c.hour as i32;
    tm.tm_min = c.min as i32;
    tm.tm_sec = c.sec as i32;
    // Let the C library decide whether summer time applies.
    tm.tm_isdst = -1;
    // SAFETY: mktime reads and normalises the struct we own; nothing else
    // refers to it.
    let t = unsafe { libc::mktime(&mut tm) };
    if t == -1 && !(c.year == 1969 && c.month == 12 && c.day == 31) {
        return Err(out_of_range());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_forms() {
        assert_eq!(parse_date("@0"), Ok(Timespec { sec: 0, nsec: 0 }));
        assert_eq!(
            parse_date("@1700000000.25"),
            Ok(Timespec {
                sec: 1_700_000_000,
                nsec: 250_000_000
            })
        );
        assert_eq!(
            parse_date("@-1.5"),
            Ok(Timespec {
                sec: -2,
                nsec: 500_000_000
            })
        );
        for bad in [
            "@",
            "@x",
            "@1.x",
            "@ 5",
            "yesterday",
            "2024-13-01",
            "2024-02-30",
            "2024-1-1",
        ] {
            assert!(parse_date(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn iso_dates_with_zones() {
        let at = |s: &str| parse_date(s).unwrap();
        assert_eq!(at("1970-01-01T00:00:00Z").sec, 0);
        assert_eq!(at("2000-03-01 00:00 UTC").sec, 951_868_800);
        assert_eq!(at("2024-02-29T12:30:15.5Z").sec, 1_709_209_815);
        assert_eq!(at("2024-02-29T12:30:15.5Z").nsec, 500_000_000);
        assert_eq!(at("2024-02-29T14:30:15+02:00").sec, 1_709_209_815);
        assert_eq!(at("2024-02-29T07:30:15-0500").sec, 1_709_209_815);
        assert_eq!(at("1969-12-31T23:59:59Z").sec, -1);
        assert!(parse_date("2024-02-29T25:00Z").is_err());
        assert!(parse_date("2024-02-29T12:00+25:00").is_err());
    }

    #[test]
    fn stamps_and_civil_days() {
        for days in [-800_000, -1, 0, 1, 11_016, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert!(parse_stamp("202402291230.15").is_ok());
        for bad in [
            "2024022912",
            "20240229123",
            "202402301230",
            "202402291230.",
            "2402291230.1x",
        ] {
            assert!(parse_stamp(bad).is_err(), "accepted {bad:?}");
        }
    }
}

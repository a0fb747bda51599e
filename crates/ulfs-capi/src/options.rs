//! The parser of `ulfs_mkfs`'s option string.
//!
//! C callers cannot build a Rust `MkfsOptions`, so `ulfs_mkfs` takes the
//! options as a mount(8)-style comma-separated list. This module turns that
//! list into `ulfs::MkfsOptions`, rejecting anything it does not know with
//! EINVAL rather than silently ignoring a misspelt option. It is pure (no
//! FFI, no I/O) so that it can be unit-tested on its own.
//!
//! Grammar: items separated by `,`; empty items (`"a,,b"`, a trailing comma)
//! are ignored; a later item overrides an earlier one. Items:
//!
//! | item                 | meaning                                            |
//! |----------------------|----------------------------------------------------|
//! | `label=TEXT`         | volume label, UTF-8, at most 63 bytes, no `,`      |
//! | `force`              | overwrite an existing non-empty image file         |
//! | `mode=none`          | no journal (ULFS as published)                     |
//! | `mode=journal`       | journaled metadata                                 |
//! | `journal_blocks=N`   | journal size in 4 KiB blocks (decimal, N > 0)      |

use ulfs::{Errno, MkfsOptions, Mode};

/// The longest label the superblock holds, in bytes.
pub(crate) const MAX_LABEL: usize = 63;

/// Parses `text` (the bytes of the C string, without NUL) into mkfs options
/// for an image of `size` bytes. Unknown items, malformed values and
/// non-UTF-8 text are `EINVAL`.
pub(crate) fn parse_mkfs_options(size: u64, text: &[u8]) -> Result<MkfsOptions, Errno> {
    let mut opts = MkfsOptions {
        size,
        ..MkfsOptions::default()
    };
    let text = std::str::from_utf8(text).map_err(|_| Errno::EINVAL)?;
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        match (key, value) {
            ("label", Some(v)) if v.len() <= MAX_LABEL => opts.label = v.to_owned(),
            ("force", None) => opts.force = true,
            ("mode", Some("none")) => opts.mode = Mode::None,
            ("mode", Some("journal")) => opts.mode = Mode::Journal,
            ("journal_blocks", Some(v)) => opts.journal_blocks = Some(parse_count(v)?),
            _ => return Err(Errno::EINVAL),
        }
    }
    Ok(opts)
}

/// A positive decimal `u32` (digits only: no sign, no spaces, no hex).
fn parse_count(v: &str) -> Result<u32, Errno> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Errno::EINVAL);
    }
    match v.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<MkfsOptions, Errno> {
        parse_mkfs_options(1 << 20, s.as_bytes())
    }

    #[test]
    fn empty_gives_defaults_with_size() {
        let o = parse("").unwrap();
        let d = MkfsOptions::default();
        assert_eq!(o.size, 1 << 20);
        assert_eq!(o.label, d.label);
        assert_eq!(o.force, d.force);
        assert!(
            matches!(o.mode, Mode::Journal),
            "journal is the default mode"
        );
        assert_eq!(o.journal_blocks, None);
    }

    #[test]
    fn label_and_force() {
        let o = parse("label=foo,force").unwrap();
        assert_eq!(o.label, "foo");
        assert!(o.force);
        let o = parse("force,label=bar").unwrap();
        assert_eq!(o.label, "bar");
        assert!(o.force);
    }

    #[test]
    fn label_edge_cases() {
        assert_eq!(parse("label=").unwrap().label, "");
        assert_eq!(parse("label=a=b").unwrap().label, "a=b");
        assert_eq!(parse("label=x,label=y").unwrap().label, "y");
        let max = "l".repeat(MAX_LABEL);
        assert_eq!(parse(&format!("label={max}")).unwrap().label, max);
        assert_eq!(parse(&format!("label={max}l")).err(), Some(Errno::EINVAL));
        assert_eq!(parse("label=héllo").unwrap().label, "héllo");
        assert_eq!(parse("label").err(), Some(Errno::EINVAL));
    }

    #[test]
    fn mode_and_journal_blocks() {
        assert!(matches!(parse("mode=journal").unwrap().mode, Mode::Journal));
        assert!(matches!(
            parse("mode=journal,mode=none").unwrap().mode,
            Mode::None
        ));
        assert_eq!(
            parse("journal_blocks=256").unwrap().journal_blocks,
            Some(256)
        );
        for bad in [
            "mode=",
            "mode=JOURNAL",
            "journal_blocks=",
            "journal_blocks=0",
            "journal_blocks=-1",
            "journal_blocks=+5",
            "journal_blocks=0x10",
            "journal_blocks=99999999999",
            "journal_blocks= 5",
        ] {
            assert_eq!(parse(bad).err(), Some(Errno::EINVAL), "{bad:?}");
        }
    }

    #[test]
    fn unknown_or_malformed_items_are_einval() {
        for bad in [
            "bogus",
            "force=1",
            "label=x,bogus",
            "Label=x",
            " force",
            "force ",
            "=x",
        ] {
            assert_eq!(parse(bad).err(), Some(Errno::EINVAL), "{bad:?}");
        }
    }

    #[test]
    fn empty_items_are_ignored() {
        let o = parse(",label=a,,force,").unwrap();
        assert_eq!(o.label, "a");
        assert!(o.force);
    }

    #[test]
    fn non_utf8_is_einval() {
        assert_eq!(
            parse_mkfs_options(0, b"label=\xff").err(),
            Some(Errno::EINVAL)
        );
    }
}

//! `ulfs chown`: change owners in an image, as `chown OWNER[:GROUP]`.
//!
//! Owners are numbers: an image's uids and gids need not exist on the host
//! that edits it (an image built for a container, a device), so a name
//! looked up in the host's user database would be the wrong number as
//! often as not; names are refused with that said. The owner is parsed
//! before the image is opened, so a typo changes nothing. As chown(1): a
//! symlink operand is followed unless `-h`, and `-R` changes the entries
//! it meets themselves, never following a symlink.

use std::path::Path;

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::show;
use crate::walk;

/// `u32::MAX` (-1 to chown(2)) leaves an id unchanged.
const KEEP: u32 = u32::MAX;

/// `(uid, gid)` from `UID`, `UID:GID` or `:GID`; `KEEP` for the one not
/// given.
pub fn parse(s: &str) -> Result<(u32, u32), String> {
    let id = |part: &str, what: &str| -> Result<u32, String> {
        match part.parse::<u32>() {
            Ok(n) if n != KEEP => Ok(n),
            Ok(_) => Err(format!("invalid {what} '{part}': {KEEP} means 'unchanged'")),
            Err(_) if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
                Err(format!("invalid {what} '{part}': too large"))
            }
            Err(_) => Err(format!(
                "invalid {what} '{part}': give a number (an image's owners need not exist on \
                 this host, so names are not looked up)"
            )),
        }
    };
    match s.split_once(':') {
        None => Ok((id(s, "user")?, KEEP)),
        Some(("", "")) => Err(format!("invalid owner '{s}': give UID, UID:GID or :GID")),
        Some(("", group)) => Ok((KEEP, id(group, "group")?)),
        Some((user, "")) => Err(format!(
            "invalid owner '{s}': '{user}:' would mean {user}'s login group, which an image \
             does not know; give {user}:GID"
        )),
        Some((user, group)) => Ok((id(user, "user")?, id(group, "group")?)),
    }
}

pub struct Options {
    /// `-h`: change a symlink itself, not what it points to.
    pub no_dereference: bool,
    pub recursive: bool,
}

pub fn run(image_path: &Path, owner: &str, paths: &[Vec<u8>], opts: &Options) -> CliResult {
    let (uid, gid) =
        parse(owner).map_err(|m| CliError::new("chown", m).with_code(crate::EXIT_USAGE))?;
    let mut failures = Failures::default();
    image::with_fs("chown", image_path, Access::ReadWrite, |fs| {
        // -R implies -h, as chown(1)'s default -P: a tree never leads out
        // of itself through a symlink.
        let flags = if opts.no_dereference || opts.recursive {
            libc::AT_SYMLINK_NOFOLLOW
        } else {
            0
        };
        for path in paths {
            if let Err(e) = fs.fchownat(libc::AT_FDCWD, path, uid, gid, flags) {
                failures.report(CliError::errno(format!("chown: {}", show(path)), e));
                continue;
            }
            if opts.recursive && fs.lstat(path).is_ok_and(|st| st.is_dir()) {
                walk::each_below(fs, path, "chown", &mut failures, |fs, dir, item| {
                    fs.fchownat(dir, &item.name, uid, gid, libc::AT_SYMLINK_NOFOLLOW)
                });
            }
        }
        Ok(())
    })?;
    failures.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_forms() {
        assert_eq!(parse("1000"), Ok((1000, KEEP)));
        assert_eq!(parse("1000:50"), Ok((1000, 50)));
        assert_eq!(parse(":50"), Ok((KEEP, 50)));
        assert_eq!(parse("0:0"), Ok((0, 0)));
        for bad in [
            "",
            ":",
            "alice",
            "1000:",
            "1000:staff",
            "-1",
            "4294967295",
            "99999999999",
            "1:2:3",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
        assert!(parse("alice").unwrap_err().contains("number"));
    }
}

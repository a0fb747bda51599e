//! `ulfs chmod`: change permission bits in an image, with chmod(1)'s
//! modes: octal (`755`, `4755`) and symbolic (`u+x`, `go-w`, `a=rX`,
//! `g=u`, `+t`, comma-separated clauses).
//!
//! The symbolic grammar and its arithmetic follow GNU's modechange.c, so a
//! mode means here what it means to chmod(1) on the host: a clause without
//! a who-letter leaves the umask's bits alone, `X` is execute for a
//! directory or a file already executable by someone, and a directory's
//! set-id bits survive a mode that does not mention them. The mode is
//! parsed before the image is opened: a typo changes nothing. With `-R`
//! symlinks met in the tree are left alone (their mode means nothing, and
//! following them could leave the tree), as chmod(1) does.

use std::path::Path;

use crate::error::{CliError, CliResult, Failures};
use crate::image::{self, Access};
use crate::imgpath::show;
use crate::walk;

const ALL: u32 = 0o7777;
const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;

/// One change: what `apply` folds into a mode, as modechange.c's
/// `struct mode_change`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Change {
    op: u8,
    flag: Flag,
    /// The bits the who-letters name; 0 when none were given.
    affected: u32,
    value: u32,
    mentioned: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flag {
    Ordinary,
    /// `X`: execute if a directory or already executable by someone.
    XIfAnyX,
    /// `u`, `g` or `o` after the operator: copy that class's bits.
    CopyExisting,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Mode {
    changes: Vec<Change>,
}

pub fn parse(s: &str) -> Result<Mode, String> {
    let bad = || format!("invalid mode '{s}' (octal like 755, or symbolic like u+x,go-w)");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        if s.bytes().any(|b| b > b'7') {
            return Err(bad());
        }
        let value = u32::from_str_radix(s, 8).map_err(|_| bad())?;
        if value > ALL {
            return Err(bad());
        }
        // As chmod(1): up to four digits leave a directory's set-id bits
        // alone unless they are set; five or more say everything.
        let mentioned = if s.len() > 4 {
            ALL
        } else {
            (value & SET_ID) | libc::S_ISVTX | 0o777
        };
        return Ok(Mode {
            changes: vec![Change {
                op: b'=',
                flag: Flag::Ordinary,
                affected: ALL,
                value,
                mentioned,
            }],
        });
    }
    let mut changes = Vec::new();
    for clause in s.split(',') {
        let bytes = clause.as_bytes();
        let mut i = 0;
        let mut affected = 0;
        while let Some(&c) = bytes.get(i) {
            affected |= match c {
                b'u' => libc::S_ISUID | 0o700,
                b'g' => libc::S_ISGID | 0o070,
                b'o' => libc::S_ISVTX | 0o007,
                b'a' => ALL,
                _ => break,
            };
            i += 1;
        }
        if i == bytes.len() {
            return Err(bad());
        }
        while let Some(&op) = bytes.get(i) {
            if !matches!(op, b'+' | b'-' | b'=') {
                return Err(bad());
            }
            i += 1;
            let (mut value, mut flag) = (0, Flag::Ordinary);
            if let Some(&c @ (b'u' | b'g' | b'o')) = bytes.get(i) {
                value = match c {
                    b'u' => 0o700,
                    b'g' => 0o070,
                    _ => 0o007,
                };
                flag = Flag::CopyExisting;
                i += 1;
            } else {
                while let Some(&c) = bytes.get(i) {
                    value |= match c {
                        b'r' => 0o444,
                        b'w' => 0o222,
                        b'x' => 0o111,
                        b'X' => {
                            flag = Flag::XIfAnyX;
                            0
                        }
                        b's' => SET_ID,
                        b't' => libc::S_ISVTX,
                        _ => break,
                    };
                    i += 1;
                }
            }
            changes.push(Change {
                op,
                flag,
                affected,
                value,
                mentioned: if affected != 0 {
                    affected & value
                } else {
                    value
                },
            });
        }
    }
    Ok(Mode { changes })
}

impl Mode {
    /// The permission bits (`0o7777`) a file of mode `old` (its whole
    /// `st_mode`) gets, with `umask` for clauses without who-letters.
    pub fn apply(&self, old: u32, umask: u32) -> u32 {
        let dir = old & libc::S_IFMT == libc::S_IFDIR;
        let mut mode = old & ALL;
        for c in &self.changes {
            let omit = if dir { SET_ID & !c.mentioned } else { 0 };
            let mut value = c.value;
            match c.flag {
                Flag::Ordinary => {}
                Flag::CopyExisting => {
                    value &= mode;
                    let spread = |bits: u32| if value & bits != 0 { bits } else { 0 };
                    value |= spread(0o444) | spread(0o222) | spread(0o111);
                }
                Flag::XIfAnyX => {
                    if mode & 0o111 != 0 || dir {
                        value |= 0o111;
                    }
                }
            }
            value &= if c.affected != 0 { c.affected } else { !umask } & !omit;
            match c.op {
                b'=' => {
                    let preserved = if c.affected != 0 { !c.affected } else { umask } | omit;
                    mode = (mode & preserved) | value;
                }
                b'+' => mode |= value,
                _ => mode &= !value,
            }
        }
        mode & ALL
    }
}

pub fn run(image_path: &Path, mode: &str, paths: &[Vec<u8>], recursive: bool) -> CliResult {
    let mode = parse(mode).map_err(|m| CliError::new("chmod", m).with_code(crate::EXIT_USAGE))?;
    let umask = crate::hostfs::umask();
    let mut failures = Failures::default();
    image::with_fs("chmod", image_path, Access::ReadWrite, |fs| {
        for path in paths {
            let ctx = || format!("chmod: {}", show(path));
            // The operand itself: a symlink is followed, as chmod(1) does.
            let changed = fs
                .stat(path)
                .and_then(|st| fs.chmod(path, mode.apply(st.mode, umask)));
            if let Err(e) = changed {
                failures.report(CliError::errno(ctx(), e));
                continue;
            }
            if recursive && fs.lstat(path).is_ok_and(|st| st.is_dir()) {
                walk::each_below(fs, path, "chmod", &mut failures, |fs, dir, item| {
                    if item.stat.is_symlink() {
                        return Ok(());
                    }
                    fs.fchmodat(dir, &item.name, mode.apply(item.stat.mode, umask), 0)
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

    const FILE: u32 = libc::S_IFREG;
    const DIR: u32 = libc::S_IFDIR;

    fn m(spec: &str, old: u32) -> u32 {
        parse(spec).unwrap().apply(old, 0o022)
    }

    #[test]
    fn octal_modes() {
        assert_eq!(m("755", FILE | 0o600), 0o755);
        assert_eq!(m("4750", FILE | 0o644), 0o4750);
        assert_eq!(m("0", FILE | 0o777), 0);
        // A directory keeps its set-id bits unless five digits say otherwise.
        assert_eq!(m("755", DIR | 0o2775), 0o2755);
        assert_eq!(m("00755", DIR | 0o2775), 0o755);
    }

    #[test]
    fn symbolic_modes_as_gnu_chmod() {
        assert_eq!(m("u+x", FILE | 0o644), 0o744);
        assert_eq!(m("go-w", FILE | 0o666), 0o644);
        assert_eq!(m("a=r", FILE | 0o777), 0o444);
        assert_eq!(m("u=rwx,g=rx,o=", FILE), 0o750);
        assert_eq!(m("+x", FILE | 0o644), 0o755);
        // No who-letter: the umask's bits (022) are left alone.
        assert_eq!(m("+w", FILE | 0o444), 0o644);
        assert_eq!(m("=r", FILE | 0o666), 0o444 | 0o022);
        assert_eq!(m("a+X", FILE | 0o644), 0o644);
        assert_eq!(m("a+X", FILE | 0o744), 0o755);
        assert_eq!(m("a+X", DIR | 0o644), 0o755);
        assert_eq!(m("g=u", FILE | 0o640), 0o660);
        assert_eq!(m("u+s", FILE | 0o755), 0o4755);
        assert_eq!(m("+t", DIR | 0o777), 0o1777);
        assert_eq!(m("u+x-w", FILE | 0o644), 0o544);
    }

    #[test]
    fn bad_modes_are_refused() {
        for bad in [
            "", "8", "799", "77777", "u", "u+z", "q+x", "u+x,", "+x,,-w", "rwx",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}

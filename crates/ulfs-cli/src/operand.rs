//! `IMAGE:/path` operands, for the commands (`cp`) whose operands may be
//! on the host or in an image, mtools/e2tools style.
//!
//! The rule has to be decidable from the command line and the host alone,
//! and must leave every ordinary host path a host path: an operand is an
//! image operand only when the text before its first `:` names an
//! existing file that is not a directory (an image file or a block
//! device) and the text after the `:` is absolute. So `a:b`, `dir:/x`
//! (with `dir` a directory) and `missing.img:/x` stay host paths. The one
//! case this reads as an image that may have been meant as a host path
//! (`a:/b` beside a file named `a`) is forced onto the host with a leading
//! `./`: an operand starting with `./` is never an image operand.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where an operand is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    Host(PathBuf),
    Image { image: PathBuf, path: Vec<u8> },
}

/// The rule, for `--help` texts and error hints.
pub const RULE: &str = "An operand is IMAGE:/PATH when the text before its first ':' is an \
    existing file (not a directory) and the text after it starts with '/'; anything else is a \
    host path. A leading './' always makes a host path (./a:/b is the host file 'a:/b').";

pub fn parse(arg: &OsStr) -> Operand {
    classify(arg, |image| {
        std::fs::metadata(image).is_ok_and(|m| !m.is_dir())
    })
}

/// The rule, with the host's answer to "is this an existing non-directory"
/// passed in (so it can be tested without files).
fn classify(arg: &OsStr, is_file: impl Fn(&Path) -> bool) -> Operand {
    let bytes = arg.as_bytes();
    if !bytes.starts_with(b"./")
        && let Some(colon) = bytes.iter().position(|&b| b == b':')
    {
        let (image, rest) = (&bytes[..colon], &bytes[colon + 1..]);
        let image = Path::new(OsStr::from_bytes(image));
        if !image.as_os_str().is_empty() && rest.starts_with(b"/") && is_file(image) {
            return Operand::Image {
                image: image.to_path_buf(),
                path: rest.to_vec(),
            };
        }
    }
    Operand::Host(PathBuf::from(arg))
}

impl Operand {
    /// As the user wrote it, for messages.
    pub fn show(&self) -> String {
        match self {
            Operand::Host(p) => p.display().to_string(),
            Operand::Image { image, path } => {
                format!("{}:{}", image.display(), String::from_utf8_lossy(path))
            }
        }
    }

    /// The path bytes (host or image).
    pub fn path_bytes(&self) -> &[u8] {
        match self {
            Operand::Host(p) => p.as_os_str().as_bytes(),
            Operand::Image { path, .. } => path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_only_when_the_file_exists_and_the_path_is_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        std::fs::write(&img, b"x").unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let arg = |s: String| parse(OsStr::new(&s));

        assert_eq!(
            arg(format!("{}:/a/b", img.display())),
            Operand::Image {
                image: img.clone(),
                path: b"/a/b".to_vec()
            }
        );
        // Not absolute after the colon, a directory, a missing file: host.
        for host in [
            format!("{}:a/b", img.display()),
            format!("{}:/a", sub.display()),
            format!("{}:/a", dir.path().join("missing").display()),
            ":/a".to_string(),
            "plain/path".to_string(),
        ] {
            assert_eq!(arg(host.clone()), Operand::Host(PathBuf::from(&host)));
        }
    }

    #[test]
    fn a_leading_dot_slash_forces_the_host() {
        let only_a = |p: &Path| p == Path::new("a") || p == Path::new("./a");
        assert_eq!(
            classify(OsStr::new("a:/b"), only_a),
            Operand::Image {
                image: PathBuf::from("a"),
                path: b"/b".to_vec()
            }
        );
        assert_eq!(
            classify(OsStr::new("./a:/b"), only_a),
            Operand::Host(PathBuf::from("./a:/b"))
        );
    }
}

//! Paths inside an image, which are byte strings rather than host `Path`s.
//!
//! ulfs names are arbitrary bytes (except `/` and NUL), so the CLI keeps
//! them as `Vec<u8>` end to end and only turns them into text for messages.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// An image path given on the command line.
pub fn from_arg(arg: &OsStr) -> Vec<u8> {
    arg.as_bytes().to_vec()
}

/// `parent/name` without doubling the slash after `/`.
pub fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// The last component, ignoring trailing slashes; `None` for `/` or empty.
pub fn file_name(path: &[u8]) -> Option<&[u8]> {
    let trimmed = trim_trailing_slashes(path);
    let name = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    };
    match name {
        b"" | b"." | b".." => None,
        n => Some(n),
    }
}

fn trim_trailing_slashes(path: &[u8]) -> &[u8] {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    &path[..end]
}

/// True if the path names the root directory (`/`, `//`, `/./`, ...).
pub fn is_root(path: &[u8]) -> bool {
    !path.is_empty()
        && path
            .split(|&b| b == b'/')
            .all(|c| c.is_empty() || c == b".")
}

/// For messages: lossless for UTF-8, replacement characters otherwise.
pub fn show(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_handles_root() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(join(b"/a/", b"b"), b"/a/b");
    }

    #[test]
    fn file_name_of_paths() {
        assert_eq!(file_name(b"/a/b"), Some(&b"b"[..]));
        assert_eq!(file_name(b"/a/b//"), Some(&b"b"[..]));
        assert_eq!(file_name(b"b"), Some(&b"b"[..]));
        assert_eq!(file_name(b"/"), None);
        assert_eq!(file_name(b"/a/.."), None);
    }

    #[test]
    fn root_detection() {
        assert!(is_root(b"/"));
        assert!(is_root(b"//./"));
        assert!(!is_root(b"/a"));
        assert!(!is_root(b""));
    }
}

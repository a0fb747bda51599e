//! Which side serves a path: the image (paths under the prefix, and paths
//! relative to a directory inside it) or the kernel (everything else).
//!
//! An absolute path is judged after lexical normalisation (`//`, `.` and
//! `..` folded), so `/ulfs/../etc` is the host's `/etc` and `//ulfs/a` the
//! image's `/a`. A relative path is judged against the working directory
//! the program believes in: from inside the image it stays with ulfs
//! (whose working directory follows its directory by inode, as Linux's
//! does) unless it climbs with `..`, in which case it is made absolute and
//! judged again, so `cd /ulfs/a && cat ../../etc/passwd` reads the host's
//! file. From a host directory a relative path goes to the kernel unless
//! it can reach the prefix (from `/`, `ulfs/x` is the image's `/x`), and
//! so does a path relative to a host directory *descriptor* (rsync opens
//! `/` and then asks for `ulfs/...` from it): its directory is read back
//! from `/proc/self/fd` only when the path's first component names a
//! component of the prefix, or it climbs, so other calls pay nothing.
//! Once an absolute path is known to land in the image, its `..`s are
//! left to the engine, which resolves them as the kernel does (after a
//! file ENOTDIR, after a symlink from its target), unless the path climbs
//! above the image's root on the way (`/ulfs/../ulfs/a`, folded).

use crate::fds;
use crate::state::Image;

/// Where relative paths go from a working directory that was removed: a
/// path no host has, so every call finds nothing (ENOENT).
const GONE: &[u8] = b"/nonexistent/ulfs-run-working-directory-removed/";

/// Where a path argument goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// To the kernel, with `dirfd` and the path as given, or rewritten to
    /// an absolute path (when the working directory is in the image).
    Host { dirfd: i32, path: Option<Vec<u8>> },
    /// To ulfs: a ulfs directory descriptor (or `AT_FDCWD`) and a path in
    /// the image's name space.
    Image { dirfd: i32, path: Vec<u8> },
}

/// Folds `//`, `.` and `..` out of an absolute or relative path, keeping a
/// trailing slash (it means "must be a directory"). `..` never climbs
/// above `/`; a relative path keeps leading `..`s it cannot fold.
pub fn normalize(p: &[u8]) -> Vec<u8> {
    let absolute = p.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                if parts.last().is_some_and(|l| *l != b"..") {
                    parts.pop();
                } else if !absolute {
                    parts.push(c);
                }
            }
            _ => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(p.len() + 1);
    if absolute {
        out.push(b'/');
    }
    out.extend(parts.join(&b'/'));
    let trailing = (p.len() > 1 && p.ends_with(b"/")) || p.ends_with(b"/.") || p.ends_with(b"/..");
    if trailing && out.last().is_some_and(|&b| b != b'/') {
        out.push(b'/');
    }
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// The image path an absolute host path `abs` names, if it lands under
/// `prefix`. A last component `.` or `..` stays, after the folded path of
/// the directory it is in: Linux judges those entries itself (`rmdir` of
/// `d/.` is EINVAL, `unlink` EISDIR, `rename` EBUSY), so the image must see
/// them, not the directory they fold to (`a/b/..` is `..` of `a/b`, which
/// `stat` finds to be `a`, but which `rename` refuses).
fn image_path(prefix: &[u8], abs: &[u8]) -> Option<Vec<u8>> {
    let inner = under_prefix(prefix, &normalize(abs))?;
    if let Some(walked) = walked_in_image(prefix, abs) {
        return Some(walked);
    }
    let trimmed = &abs[..abs.len() - abs.iter().rev().take_while(|&&b| b == b'/').count()];
    let cut = trimmed
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    let last = &trimmed[cut..];
    if last != b"." && last != b".." {
        return Some(inner);
    }
    // The directory `last` is an entry of: inside the image, as the whole
    // path lands there (`/ulfs/..` does not).
    let mut p = under_prefix(prefix, &normalize(&trimmed[..cut]))?;
    if p.last() != Some(&b'/') {
        p.push(b'/');
    }
    p.extend_from_slice(last);
    Some(p)
}

/// The image path of `abs` with its `..`s kept, when `abs` is the prefix
/// followed by components that never climb above the image's root: the
/// engine then resolves each `..` after what comes before it, as the
/// kernel does: after a file it is ENOTDIR, after a missing name ENOENT,
/// after a symlink to a directory it climbs from the symlink's target.
/// (Folded lexically, `/ulfs/f/../g` was `/ulfs/g`, and `/ulfs/ln/..` the
/// directory holding the symlink.) `//` and `.` are folded, but a last
/// `.`, and a trailing slash, stay (they mean "a directory").
fn walked_in_image(prefix: &[u8], abs: &[u8]) -> Option<Vec<u8>> {
    let (comps, pre) = (components(abs), components(prefix));
    let mut i = 0;
    for want in pre {
        while comps.get(i) == Some(&&b"."[..]) {
            i += 1;
        }
        if comps.get(i) != Some(&want) {
            return None;
        }
        i += 1;
    }
    let rest = &comps[i..];
    let mut depth = 0usize;
    let mut out = Vec::with_capacity(abs.len());
    for (j, &c) in rest.iter().enumerate() {
        match c {
            b"." if j + 1 < rest.len() => continue,
            b"." => {}
            b".." => depth = depth.checked_sub(1)?,
            _ => depth += 1,
        }
        out.push(b'/');
        out.extend_from_slice(c);
    }
    let trailing = abs.ends_with(b"/") && !out.ends_with(b"/.") && !out.ends_with(b"/..");
    if out.is_empty() || trailing {
        out.push(b'/');
    }
    Some(out)
}

/// The names between a path's slashes.
fn components(p: &[u8]) -> Vec<&[u8]> {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect()
}

/// `//` and `.` folded out of a path, `..` kept.
pub fn fold_dots(p: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len());
    for c in p
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
    {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    out
}

/// The image path of a normalised absolute host path, if it is under
/// `prefix`.
fn under_prefix(prefix: &[u8], abs: &[u8]) -> Option<Vec<u8>> {
    let rest = abs.strip_prefix(prefix)?;
    match rest.first() {
        None => Some(b"/".to_vec()),
        Some(b'/') => Some(rest.to_vec()),
        _ => None,
    }
}

/// Routes `path` (as passed with `dirfd`, a kernel descriptor or
/// `AT_FDCWD`).
pub fn route(image: &Image, dirfd: i32, path: &[u8]) -> Route {
    if path.first() == Some(&b'/') {
        let n = normalize(path);
        return match image_path(&image.prefix, path) {
            Some(p) => Route::Image {
                dirfd: libc::AT_FDCWD,
                path: p,
            },
            // `/ulfs/../etc`: the kernel would look for the prefix, which
            // does not exist on the host; the folded path is what is meant.
            None if under_prefix(&image.prefix, &fold_dots(path)).is_some() => Route::Host {
                dirfd,
                path: Some(n),
            },
            None => Route::Host { dirfd, path: None },
        };
    }
    if dirfd != libc::AT_FDCWD {
        // Relative to a directory descriptor: its side serves the call.
        return match fds::ulfs_fd(dirfd) {
            Some(u) => Route::Image {
                dirfd: u,
                path: path.to_vec(),
            },
            None => match host_dir_reaching(dirfd, &image.prefix, path) {
                Some(p) => Route::Image {
                    dirfd: libc::AT_FDCWD,
                    path: p,
                },
                None => Route::Host { dirfd, path: None },
            },
        };
    }
    if image.cwd().in_image {
        // Whether the working directory still exists is known once the
        // image is mounted (it may have been let go, and the directory
        // renamed or removed by another program meanwhile).
        image.ensure_mounted();
    }
    let cwd = image.cwd();
    if cwd.in_image && cwd.gone && !path.is_empty() {
        // The working directory was removed: as in a removed directory,
        // nothing relative to it exists (a path the host has not either).
        return Route::Host {
            dirfd,
            path: Some([GONE, path].concat()),
        };
    }
    let climbs = path.split(|&b| b == b'/').any(|c| c == b"..");
    if cwd.in_image && !climbs {
        return Route::Image {
            dirfd: libc::AT_FDCWD,
            path: path.to_vec(),
        };
    }
    if path.is_empty() || (!cwd.in_image && !could_reach(&cwd.path, &image.prefix, path)) {
        return Route::Host { dirfd, path: None };
    }
    let mut abs = cwd.path.clone();
    abs.push(b'/');
    abs.extend_from_slice(path);
    let n = normalize(&abs);
    match image_path(&image.prefix, &abs) {
        Some(p) => Route::Image {
            dirfd: libc::AT_FDCWD,
            path: p,
        },
        None if cwd.in_image => Route::Host {
            dirfd,
            path: Some(n),
        },
        None => Route::Host { dirfd, path: None },
    }
}

/// The image path a relative `path` from host directory descriptor
/// `dirfd` names, when it lands under `prefix`.
fn host_dir_reaching(dirfd: i32, prefix: &[u8], path: &[u8]) -> Option<Vec<u8>> {
    let first = path.split(|&b| b == b'/').find(|c| !c.is_empty())?;
    let names_prefix = prefix.split(|&b| b == b'/').any(|c| c == first);
    let climbs = path.split(|&b| b == b'/').any(|c| c == b"..");
    if !names_prefix && !climbs {
        return None;
    }
    let dir = host_dir_path(dirfd)?;
    if !could_reach(&dir, prefix, path) {
        return None;
    }
    let mut abs = dir;
    abs.push(b'/');
    abs.extend_from_slice(path);
    image_path(prefix, &abs)
}

/// The path of host directory descriptor `dirfd`, as the kernel has it
/// (`/proc/self/fd/N`); `None` when it cannot say (no /proc, a deleted
/// directory).
fn host_dir_path(dirfd: i32) -> Option<Vec<u8>> {
    let readlink = crate::real::real!(readlink: unsafe extern "C" fn(*const libc::c_char, *mut libc::c_char, libc::size_t) -> libc::ssize_t);
    let link = std::ffi::CString::new(format!("/proc/self/fd/{dirfd}")).ok()?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a NUL-terminated path and a buffer of its length.
    let n = unsafe { readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 || n as usize >= buf.len() {
        return None;
    }
    buf.truncate(n as usize);
    // Not a path (a deleted directory says " (deleted)", anonymous files
    // "anon_inode:...").
    (buf.first() == Some(&b'/') && !buf.ends_with(b" (deleted)")).then_some(buf)
}

/// Whether a relative path from host directory `cwd` can land under
/// `prefix`: it climbs, or `cwd` is an ancestor of the prefix.
fn could_reach(cwd: &[u8], prefix: &[u8], path: &[u8]) -> bool {
    path.split(|&b| b == b'/').any(|c| c == b"..")
        || cwd == b"/"
        || prefix
            .strip_prefix(cwd)
            .is_some_and(|r| r.first() == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image path of `a` under the prefix `/ulfs`.
    fn k(a: &str) -> Option<String> {
        image_path(b"/ulfs", a.as_bytes()).map(|p| String::from_utf8(p).unwrap())
    }

    fn s(p: &str) -> Option<String> {
        Some(p.to_string())
    }

    #[test]
    fn a_last_dot_or_dotdot_reaches_the_image() {
        assert_eq!(k("/ulfs/d/."), s("/d/."));
        assert_eq!(k("/ulfs/d/./"), s("/d/."));
        assert_eq!(k("/ulfs/d/.."), s("/d/.."));
        assert_eq!(k("/ulfs/a/b/.."), s("/a/b/.."));
        assert_eq!(k("/ulfs/a/b/../"), s("/a/b/.."));
        assert_eq!(k("/ulfs/a/../b/.."), s("/a/../b/.."));
        assert_eq!(k("/ulfs/."), s("/."));
        assert_eq!(k("/ulfs/.."), None);
        assert_eq!(k("/ulfs/d/../.."), None);
        assert_eq!(k("/ulfs/d"), s("/d"));
        assert_eq!(k("/ulfs/d/"), s("/d/"));
        assert_eq!(k("/ulfs/./d"), s("/d"));
        assert_eq!(k("/etc/."), None);
    }

    #[test]
    fn a_dotdot_inside_the_image_is_left_to_the_engine() {
        assert_eq!(k("/ulfs/f/../g"), s("/f/../g"));
        assert_eq!(k("//ulfs/./a//../b/./c/"), s("/a/../b/c/"));
        assert_eq!(k("/./ulfs/a/.."), s("/a/.."));
        // Climbing above the image's root on the way: folded lexically.
        assert_eq!(k("/ulfs/../ulfs/a"), s("/a"));
        assert_eq!(k("/ulfs/a/../../ulfs/b/.."), s("/b/.."));
        assert_eq!(k("/ulfs/a/../../etc"), None);
        assert_eq!(k("/ulfsx/../ulfs/a"), s("/a"));
    }

    #[test]
    fn normalize_folds_lexically() {
        let n = |p: &str| String::from_utf8(normalize(p.as_bytes())).unwrap();
        assert_eq!(n("/ulfs/../etc"), "/etc");
        assert_eq!(n("//ulfs//a/./b"), "/ulfs/a/b");
        assert_eq!(n("/.."), "/");
        assert_eq!(n("/a/b/"), "/a/b/");
        assert_eq!(n("/a/b/.."), "/a/");
        assert_eq!(n("a/../../b"), "../b");
        assert_eq!(n("a/.."), ".");
        assert_eq!(n("/"), "/");
    }

    #[test]
    fn a_path_through_the_prefix_is_seen_as_one() {
        assert_eq!(fold_dots(b"//ulfs/./../etc"), b"/ulfs/../etc");
        assert!(under_prefix(b"/ulfs", &fold_dots(b"/ulfs/..")).is_some());
        assert!(under_prefix(b"/ulfs", &fold_dots(b"/usr/../ulfs")).is_none());
    }

    #[test]
    fn prefix_matches_whole_components() {
        let p = b"/ulfs";
        assert_eq!(under_prefix(p, b"/ulfs"), Some(b"/".to_vec()));
        assert_eq!(under_prefix(p, b"/ulfs/a/"), Some(b"/a/".to_vec()));
        assert_eq!(under_prefix(p, b"/ulfsx/a"), None);
        assert_eq!(under_prefix(p, b"/etc"), None);
    }

    #[test]
    fn relative_paths_reach_the_prefix_only_from_its_ancestors() {
        assert!(could_reach(b"/", b"/ulfs", b"ulfs/a"));
        assert!(could_reach(b"/mnt", b"/mnt/img", b"img"));
        assert!(!could_reach(b"/tmp", b"/ulfs", b"a/b"));
        assert!(could_reach(b"/tmp", b"/ulfs", b"../ulfs/a"));
        assert!(!could_reach(b"/mn", b"/mnt/img", b"t/img"));
    }
}

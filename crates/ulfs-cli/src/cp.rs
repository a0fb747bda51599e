//! `ulfs cp`: cp(1) in the mtools/e2tools style, whose operands are host
//! paths or `IMAGE:/path` (operand.rs), so files move between the host and
//! images, and between images, in one command.
//!
//! This module owns what cp(1) decides before any byte moves: where each
//! source goes (into DST when it is a directory, as DST otherwise), the
//! refusals that must come before anything is changed (several sources
//! and a DST that is not a directory, a directory without `-r`, a source
//! and destination that are the same file, a directory copied into
//! itself), and which images to mount how: each once (images.rs), read-only
//! when only read. The copying itself is copy.rs's.

use std::ffi::OsString;

use crate::EXIT_USAGE;
use crate::copy::{self, Copier, Dir, DirAt, Failure, Meta, Options, Place, Side, Src};
use crate::error::{CliError, CliResult};
use crate::image::Access;
use crate::images::Images;
use crate::imgpath;
use crate::operand::{self, Operand};
use crate::progress;

pub fn run(args: &[OsString], recursive: bool, archive: bool) -> CliResult {
    let ops: Vec<Operand> = args.iter().map(|a| operand::parse(a)).collect();
    let Some((dst, srcs)) = ops.split_last().filter(|(_, srcs)| !srcs.is_empty()) else {
        return Err(CliError::new("cp", "missing destination operand").with_code(EXIT_USAGE));
    };
    if ops.iter().all(|o| matches!(o, Operand::Host(_))) {
        let msg = format!(
            "no operand names an image (for a copy between host paths, use cp(1)). {}",
            operand::RULE
        );
        return Err(CliError::new("cp", msg).with_code(EXIT_USAGE));
    }
    let mut imgs = Images::default();
    let mut side = |op: &Operand, access| -> CliResult<Side> {
        match op {
            Operand::Host(_) => Ok(Side::Host),
            Operand::Image { image, .. } => imgs.add("cp", image, access).map(Side::Image),
        }
    };
    let src_sides = srcs
        .iter()
        .map(|op| side(op, Access::ReadOnly))
        .collect::<CliResult<Vec<_>>>()?;
    let dst_side = side(dst, Access::ReadWrite)?;
    imgs.mount_all("cp")?;
    let umask = crate::hostfs::umask();
    for side in src_sides.iter().chain([&dst_side]) {
        if let Side::Image(i) = side {
            // A copy without -a gets modes as cp(1) would give them here.
            imgs.fs(*i).umask(umask);
        }
    }
    let opts = Options {
        archive,
        host_owner: crate::hostfs::can_chown(),
        umask,
    };
    let job = Job {
        recursive: recursive || archive,
        dst,
        dst_side,
    };
    let copied = job.run(&mut imgs, srcs, &src_sides, opts);
    let unmounted = imgs.unmount_all("cp");
    match (copied, unmounted) {
        (Err(e), Err(u)) => {
            u.print();
            Err(e)
        }
        (copied, unmounted) => copied.and(unmounted),
    }
}

struct Job<'a> {
    /// `-r` or `-a`: directories are copied, symlink operands are not
    /// followed (cp(1)'s -P, its default when recursive).
    recursive: bool,
    dst: &'a Operand,
    dst_side: Side,
}

/// `path` on the side of `op`, as the user would write it.
fn shown(op: &Operand, path: &[u8]) -> String {
    match op {
        Operand::Host(_) => imgpath::show(path),
        Operand::Image { image, .. } => format!("{}:{}", image.display(), imgpath::show(path)),
    }
}

/// `parent` and `name` of a path that names a new entry; `None` for one
/// without a last component (`/`, `.`, `..`).
fn split(path: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let name = imgpath::file_name(path)?;
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let mut parent = &path[..end - name.len()];
    while parent.len() > 1 && parent.ends_with(b"/") {
        parent = &parent[..parent.len() - 1];
    }
    let parent = match parent {
        b"" => b".".to_vec(),
        p => p.to_vec(),
    };
    Some((parent, name.to_vec()))
}

impl Job<'_> {
    fn run(&self, imgs: &mut Images, srcs: &[Operand], sides: &[Side], opts: Options) -> CliResult {
        let follow = !self.recursive;
        let dpath = self.dst.path_bytes();
        let target = copy::stat_path(imgs, self.dst_side, dpath, true);
        let into_dir = matches!(&target, Ok(m) if m.is_dir());
        if srcs.len() > 1 && !into_dir {
            let ctx = format!("cp: {}", self.dst.show());
            let why = "the target of several sources must be an existing directory";
            return Err(match target {
                Err(f) => {
                    let e = f.at(ctx);
                    CliError::new(e.context, format!("{} ({why})", e.message))
                }
                Ok(_) => CliError::new(ctx, format!("Not a directory ({why})")),
            });
        }
        let metas: Vec<_> = srcs
            .iter()
            .zip(sides)
            .map(|(op, &side)| copy::stat_path(imgs, side, op.path_bytes(), follow))
            .collect();
        // The pre-scan is for the bar only: skipped where none can show.
        let mut total = 0u64;
        let mut dir_stats = copy::DirStats::new();
        if progress::on_terminal() {
            for ((op, &side), meta) in srcs.iter().zip(sides).zip(&metas) {
                if let Ok(m) = meta {
                    let path = op.path_bytes();
                    let n = copy::scan(imgs, side, path, m, self.recursive, &mut dir_stats);
                    total = total.saturating_add(n);
                }
            }
        }
        let mut copier = Copier::new(imgs, opts, total, dir_stats);
        for ((op, &side), meta) in srcs.iter().zip(sides).zip(metas) {
            match meta {
                Ok(meta) => self.one(&mut copier, op, side, &meta, into_dir),
                Err(f) => copier.report(f.at(format!("cp: {}", op.show()))),
            }
        }
        copier.finish()
    }

    /// Copies one source operand (stat'ed as `meta`), reporting failures.
    fn one(&self, copier: &mut Copier, src: &Operand, side: Side, meta: &Meta, into_dir: bool) {
        let spath = src.path_bytes();
        let src_shown = src.show();
        let refuse = |copier: &mut Copier, msg: String| {
            copier.report(CliError::new(format!("cp: {src_shown}"), msg));
        };
        if meta.is_dir() && !self.recursive {
            refuse(
                copier,
                "is a directory (-r not specified; omitting it)".into(),
            );
            return;
        }
        let dpath = self.dst.path_bytes();
        // Where it goes: an entry `name` of `parent`, or with no name (the
        // image root, `.`) the directory DST itself, merged into.
        let (parent, name) = if into_dir {
            (
                dpath.to_vec(),
                imgpath::file_name(spath).map(<[u8]>::to_vec),
            )
        } else {
            if dpath.ends_with(b"/") && !meta.is_dir() {
                let e = CliError::errno(format!("cp: {}", self.dst.show()), ulfs::Errno::ENOTDIR);
                copier.report(e);
                return;
            }
            match split(dpath) {
                Some((parent, name)) => (parent, Some(name)),
                None => {
                    let e = CliError::new(format!("cp: {}", self.dst.show()), "cannot create");
                    copier.report(e);
                    return;
                }
            }
        };
        let dst_shown = match &name {
            Some(n) if into_dir => shown(self.dst, &imgpath::join(dpath, n)),
            _ => self.dst.show(),
        };
        if name.is_none() && !meta.is_dir() {
            refuse(copier, "has no name to copy it under".into());
            return;
        }
        let parent_dir = match copy::open_dir_path(copier.imgs, self.dst_side, &parent) {
            Ok(d) => d,
            Err(f) => {
                copier.report(f.at(format!("cp: {}", shown(self.dst, &parent))));
                return;
            }
        };
        if side == self.dst_side
            && let Err(msg) = self.check_same(copier, src, side, meta, &parent_dir, name.as_deref())
        {
            parent_dir.close(copier.imgs);
            refuse(copier, format!("{msg} ({dst_shown})"));
            return;
        }
        let place = Place {
            src: &src_shown,
            dst: &dst_shown,
            below: &[],
        };
        let Some(name) = name else {
            // A directory merged into DST itself.
            match copy::open_dir_path(copier.imgs, side, spath) {
                Ok(src_dir) => copier.tree(src_dir, parent_dir, meta, false, &place),
                Err(f) => {
                    parent_dir.close(copier.imgs);
                    copier.report(f.at(format!("cp: {src_shown}")));
                }
            }
            return;
        };
        if !meta.is_dir() {
            let src = Src::Path(side, spath, !self.recursive);
            copier.top_leaf(src, meta, parent_dir.at(), &name, &place);
            parent_dir.close(copier.imgs);
            return;
        }
        let src_dir = match copy::open_dir_path(copier.imgs, side, spath) {
            Ok(d) => d,
            Err(f) => {
                parent_dir.close(copier.imgs);
                copier.report(f.at(format!("cp: {src_shown}")));
                return;
            }
        };
        let made = copier.make_dir(parent_dir.at(), &name).and_then(|created| {
            let dir = parent_dir.at().open_dir(copier.imgs, &name);
            dir.map(|d| (d, created)).map_err(copy::Fault::Dst)
        });
        parent_dir.close(copier.imgs);
        match made {
            Ok((dst_dir, created)) => copier.tree(src_dir, dst_dir, meta, created, &place),
            Err(f) => {
                src_dir.close(copier.imgs);
                copier.report_fault(f, || src_shown.clone(), || dst_shown.clone());
            }
        }
    }

    /// On one side: is the destination the source itself, or (for a
    /// directory) inside it? Either copy would destroy or never end.
    fn check_same(
        &self,
        copier: &mut Copier,
        src: &Operand,
        side: Side,
        meta: &Meta,
        parent: &Dir,
        name: Option<&[u8]>,
    ) -> Result<(), String> {
        let same = "is the same file as its destination".to_string();
        let imgs = &mut *copier.imgs;
        let Some(name) = name else {
            // Merging into DST itself.
            return match parent.at().id(imgs) {
                Ok(id) if id == meta.id() => Err(same),
                _ => self.not_inside(imgs, parent.at(), meta),
            };
        };
        if let Ok(existing) = parent.at().lstat(imgs, name) {
            let link = copy::stat_path(imgs, side, src.path_bytes(), false);
            let ids = [Some(meta.id()), link.ok().map(|m| m.id())];
            if ids.contains(&Some(existing.id())) {
                return Err(same);
            }
        }
        if meta.is_dir() {
            return self.not_inside(imgs, parent.at(), meta);
        }
        Ok(())
    }

    /// Fails when `meta`'s directory is `start` or one of its ancestors.
    fn not_inside(&self, imgs: &mut Images, start: DirAt, meta: &Meta) -> Result<(), String> {
        match ancestors_contain(imgs, start, meta.id()) {
            Ok(false) => Ok(()),
            Ok(true) => Err("cannot copy a directory into itself".into()),
            Err(f) => Err(f.at("").message),
        }
    }
}

/// Whether the directory `id` is `start` or above it, found by going up
/// through `..` until the root (whose `..` is itself).
fn ancestors_contain(imgs: &mut Images, start: DirAt, id: (u64, u64)) -> Result<bool, Failure> {
    let mut owned: Option<Dir> = None;
    let found = loop {
        let at = owned.as_ref().map_or(start, Dir::at);
        let here = match at.id(imgs) {
            Ok(here) => here,
            Err(f) => break Err(f),
        };
        if here == id {
            break Ok(true);
        }
        let up = match at.open_dir(imgs, b"..") {
            Ok(up) => up,
            Err(f) => break Err(f),
        };
        match up.at().id(imgs) {
            Ok(up_id) if up_id == here => {
                up.close(imgs);
                break Ok(false);
            }
            Ok(_) => {
                if let Some(old) = owned.replace(up) {
                    old.close(imgs);
                }
            }
            Err(f) => {
                up.close(imgs);
                break Err(f);
            }
        }
    };
    if let Some(d) = owned {
        d.close(imgs);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_names_the_new_entry() {
        let s = |p: &[u8]| {
            split(p).map(|(a, b)| (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap()))
        };
        assert_eq!(s(b"/a/b"), Some(("/a".into(), "b".into())));
        assert_eq!(s(b"/a"), Some(("/".into(), "a".into())));
        assert_eq!(s(b"a"), Some((".".into(), "a".into())));
        assert_eq!(s(b"x//y//"), Some(("x".into(), "y".into())));
        assert_eq!(s(b"//a"), Some(("/".into(), "a".into())));
        assert_eq!(s(b"/"), None);
        assert_eq!(s(b".."), None);
    }
}

//! The checker: whether a tree read back equals an allowed prefix state
//! (or an allowed part of a call that commits its finished part), under
//! the data rules of data=ordered.

use super::*;

/// What a crash state may show: a prefix state k in floor..=max, or the
/// state after k calls plus a committed part of call k (`partials`, for
/// floor <= k < max).
pub struct Expect<'a> {
    pub snaps: &'a [Arc<Tree>],
    pub floor: usize,
    pub max: usize,
    pub loose: &'a [Loose],
    pub partials: &'a [Partial],
}

/// Which allowed state a crash state matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    /// Calls completed in that state.
    pub k: usize,
    /// The state also holds a committed part of call k, of this kind
    /// (`PartialKind::index`).
    pub part: Option<usize>,
}

impl Expect<'_> {
    /// May byte `o` of file `id` read `v` in candidate state `k`?
    pub fn loose_ok(&self, id: u32, o: u64, v: u8, k: usize) -> bool {
        let mut zero_ok = false;
        let mut any = false;
        for l in self.loose {
            if l.id == id && l.start <= o && o < l.end && (!l.trunc_tail || k <= l.op) {
                any = true;
                zero_ok |= l.trunc_tail;
            }
        }
        if !any {
            return false;
        }
        if zero_ok && v == 0 {
            return true;
        }
        (self.floor..=self.max).any(|j| {
            self.snaps[j]
                .files
                .get(&id)
                .and_then(|f| f.byte(o))
                .is_some_and(|b| b == v)
        })
    }

    /// Differences between `found` and candidate state `k` (empty: equal).
    pub fn diff(&self, found: &Found, k: usize, limit: usize) -> Vec<String> {
        self.diff_tree(found, &self.snaps[k], k, limit)
    }

    /// Differences between `found` and the tree `t` of a state reached
    /// after `k` calls (the loose-byte rules depend on `k`).
    pub fn diff_tree(&self, found: &Found, t: &Tree, k: usize, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        macro_rules! push {
            ($($a:tt)*) => {{
                out.push(format!($($a)*));
                if out.len() >= limit {
                    return out;
                }
            }};
        }
        for p in t.nodes.keys() {
            if !found.nodes.contains_key(p) {
                push!("missing {} ({:?})", show(p), kind(&t.nodes[p]));
            }
        }
        for (p, n) in &found.nodes {
            if !t.nodes.contains_key(p) {
                push!("unexpected {} ({})", show(p), fkind(n));
            }
        }
        let subdirs = t.subdir_counts();
        let mut links: HashMap<u32, u64> = HashMap::new();
        for n in t.nodes.values() {
            if let Node::File(id) = n {
                *links.entry(*id).or_default() += 1;
            }
        }
        // Hard-link identity: the first path of each inode, both sides.
        let mut by_id: HashMap<u32, &Path> = HashMap::new();
        let mut by_ino: HashMap<u64, &Path> = HashMap::new();
        for (p, n) in &t.nodes {
            let Some(f) = found.nodes.get(p) else {
                continue;
            };
            match (n, f) {
                (
                    Node::Dir { perm, attrs },
                    FNode::Dir {
                        perm: fp,
                        nlink,
                        owner,
                        atime,
                        mtime,
                    },
                ) => {
                    if perm != fp {
                        push!("{}: dir mode {fp:o}, expected {perm:o}", show(p));
                    }
                    if let Some(d) = attrs_diff(attrs, *owner, *atime, *mtime) {
                        push!("{}: {d}", show(p));
                    }
                    let want = 2 + subdirs.get(p.as_slice()).copied().unwrap_or(0) as u64;
                    if *nlink != want {
                        push!("{}: dir nlink {nlink}, expected {want}", show(p));
                    }
                }
                (Node::Symlink(a), FNode::Symlink(b)) => {
                    if a != b {
                        push!("{}: symlink -> {}, expected {}", show(p), show(b), show(a));
                    }
                }
                (Node::File(id), FNode::File(ff)) => {
                    let r1 = *by_id.entry(*id).or_insert(p);
                    let r2 = *by_ino.entry(ff.ino).or_insert(p);
                    if r1 != r2 {
                        push!(
                            "{}: hard-link identity: same file as {} expected, found same as {}",
                            show(p),
                            show(r1),
                            show(r2)
                        );
                    }
                    let fd = &t.files[id];
                    if ff.perm != fd.perm {
                        push!("{}: mode {:o}, expected {:o}", show(p), ff.perm, fd.perm);
                    }
                    if let Some(d) = attrs_diff(&fd.attrs, ff.owner, ff.atime, ff.mtime) {
                        push!("{}: {d}", show(p));
                    }
                    let links = links[id];
                    if ff.nlink != links {
                        push!("{}: nlink {}, expected {links}", show(p), ff.nlink);
                    }
                    if ff.size != fd.size {
                        push!("{}: size {}, expected {}", show(p), ff.size, fd.size);
                        continue;
                    }
                    if let Some(d) = self.data_diff(*id, fd, ff, k) {
                        push!("{}: {d}", show(p));
                    }
                }
                (n, f) => push!("{}: is {}, expected {:?}", show(p), fkind(f), kind(n)),
            }
        }
        out
    }

    pub fn data_diff(&self, id: u32, fd: &FileData, ff: &FoundFile, k: usize) -> Option<String> {
        let zero = vec![0u8; PAGE as usize];
        let pages: BTreeSet<u64> = fd.pages.keys().chain(ff.pages.keys()).copied().collect();
        for pg in pages {
            if pg * PAGE >= fd.size {
                break;
            }
            // Allocation is metadata: exact in every prefix state.
            let (want, have) = (fd.pages.contains_key(&pg), ff.pages.contains_key(&pg));
            if want != have {
                let what = |x: bool| if x { "data" } else { "a hole" };
                return Some(format!(
                    "page {pg} is {}, expected {}",
                    what(have),
                    what(want)
                ));
            }
            let exp: &[u8] = fd.pages.get(&pg).map_or(&zero, |p| p);
            let got: &[u8] = ff.pages.get(&pg).map_or(&zero, |p| p);
            if exp == got {
                continue;
            }
            let n = (fd.size - pg * PAGE).min(PAGE) as usize;
            for i in 0..n {
                if exp[i] != got[i] && !self.loose_ok(id, pg * PAGE + i as u64, got[i], k) {
                    let o = pg * PAGE + i as u64;
                    let wrong = (i..n).take_while(|&j| exp[j] != got[j]).count();
                    return Some(format!(
                        "data differs at offset {o} (page {pg}{}): found {:02x?}, expected {:02x?} ({wrong}+ bytes)",
                        if ff.pages.contains_key(&pg) {
                            ""
                        } else {
                            ", a hole"
                        },
                        &got[i..(i + 8).min(n)],
                        &exp[i..(i + 8).min(n)],
                    ));
                }
            }
        }
        None
    }

    /// The candidate that matches, or a report of why none does.
    pub fn matching(&self, found: &Found) -> Result<Match, String> {
        self.matching_whole(found)
            .map(|k| Match { k, part: None })
            .or_else(|e| match self.matching_partial(found) {
                Some((k, kind)) => Ok(Match {
                    k,
                    part: Some(kind),
                }),
                None if self.partials.iter().any(|p| self.allows(p)) => Err(format!(
                    "{e}\n  (nor any allowed committed part of calls {:?})",
                    self.partials
                        .iter()
                        .filter(|p| self.allows(p))
                        .map(|p| p.op)
                        .collect::<Vec<_>>()
                )),
                None => Err(e),
            })
    }

    /// Whether the crash state may hold the committed part of `p`'s call.
    pub fn allows(&self, p: &Partial) -> bool {
        self.floor <= p.op && p.op < self.max
    }

    /// A call's committed part that `found` shows (the call's index and
    /// kind).
    fn matching_partial(&self, found: &Found) -> Option<(usize, usize)> {
        for p in self.partials.iter().filter(|p| self.allows(p)) {
            for t in p.candidates(&self.snaps[p.op], found) {
                if self.diff_tree(found, &t, p.op, 1).is_empty() {
                    return Some((p.op, p.kind.index()));
                }
            }
        }
        None
    }

    fn matching_whole(&self, found: &Found) -> Result<usize, String> {
        if !found.anomalies.is_empty() {
            return Err(format!("read-back anomalies: {:#?}", found.anomalies));
        }
        let shape = shape_of(found.nodes.iter().map(|(p, n)| match n {
            FNode::Dir { .. } => (p, 0, &[][..]),
            FNode::File(_) => (p, 1, &[][..]),
            FNode::Symlink(t) => (p, 2, &t[..]),
        }));
        // Full comparisons only where names and types can match.
        for k in (self.floor..=self.max).rev() {
            let s = self.snaps[k].shape;
            if (s == 0 || s == shape) && self.diff(found, k, 1).is_empty() {
                return Ok(k);
            }
        }
        let mut reports = Vec::new();
        for k in (self.floor..=self.max).rev() {
            let d = self.diff(found, k, 6);
            if d.is_empty() {
                return Ok(k);
            }
            if k == self.max || k == self.floor || reports.len() < 3 {
                reports.push(format!(
                    "  vs state after {k} calls:\n    {}",
                    d.join("\n    ")
                ));
            }
        }
        Err(format!(
            "the tree matches no allowed prefix state {}..={}:\n{}",
            self.floor,
            self.max,
            reports.join("\n")
        ))
    }
}

/// Owner always; atime and mtime where the model knows them.
fn attrs_diff(a: &Attrs, owner: (u32, u32), atime: Timespec, mtime: Timespec) -> Option<String> {
    if a.owner != owner {
        return Some(format!("owner {owner:?}, expected {:?}", a.owner));
    }
    match a.times {
        Some([at, mt]) if (at, mt) != (atime, mtime) => Some(format!(
            "times (atime, mtime) = ({atime:?}, {mtime:?}), expected ({at:?}, {mt:?})"
        )),
        _ => None,
    }
}

pub fn kind(n: &Node) -> &'static str {
    match n {
        Node::Dir { .. } => "dir",
        Node::File(_) => "file",
        Node::Symlink(_) => "symlink",
    }
}

pub fn fkind(n: &FNode) -> &'static str {
    match n {
        FNode::Dir { .. } => "dir",
        FNode::File(_) => "file",
        FNode::Symlink(_) => "symlink",
    }
}

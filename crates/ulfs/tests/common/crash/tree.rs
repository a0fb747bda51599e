//! The crash model: the expected tree as plain data (paths, nodes, file
//! pages), one snapshot per completed call.

use super::*;

pub type Path = Vec<u8>;

pub fn show(p: &[u8]) -> String {
    let s = String::from_utf8_lossy(p);
    if s.len() > 40 {
        format!("{}…{}", &s[..20], &s[s.len() - 12..])
    } else {
        s.into_owned()
    }
}

pub fn join(dir: &[u8], name: &[u8]) -> Path {
    let mut p = dir.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub fn parent_of(p: &[u8]) -> Path {
    match p.iter().rposition(|&c| c == b'/') {
        Some(0) => b"/".to_vec(),
        Some(i) => p[..i].to_vec(),
        None => b"/".to_vec(),
    }
}

pub fn is_under(p: &[u8], dir: &[u8]) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && (dir == b"/" || p[dir.len()] == b'/')
}

/// Owner and times of a file or directory. Times are known only while the
/// last call that set them was `utimensat`/`futimens` with explicit values;
/// any call that stamps the clock makes them unknown (not compared).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Attrs {
    pub owner: (u32, u32),
    /// (atime, mtime) when known.
    pub times: Option<[Timespec; 2]>,
}

impl Default for Attrs {
    fn default() -> Attrs {
        Attrs {
            owner: process_owner(),
            times: None,
        }
    }
}

/// Who owns what this process creates (ulfs stamps the effective ids).
pub fn process_owner() -> (u32, u32) {
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// One file's contents: pages the file system has allocated (written, or
/// preallocated by fallocate, past `size` too), bytes past `size` always
/// zero.
#[derive(Clone, Default, PartialEq)]
pub struct FileData {
    pub size: u64,
    pub pages: BTreeMap<u64, Arc<Vec<u8>>>,
    pub perm: u32,
    pub attrs: Attrs,
}

impl FileData {
    pub fn byte(&self, o: u64) -> Option<u8> {
        if o >= self.size {
            return None;
        }
        Some(
            self.pages
                .get(&(o / PAGE))
                .map_or(0, |p| p[(o % PAGE) as usize]),
        )
    }

    /// Writes `data` at `off`; returns the ranges overwritten in place
    /// (bytes below the old size in pages that were already allocated).
    pub fn write(&mut self, off: u64, data: &[u8]) -> Vec<(u64, u64)> {
        let mut loose = Vec::new();
        let old = self.size;
        let end = off + data.len() as u64;
        let mut at = off;
        while at < end {
            let pg = at / PAGE;
            let in_pg = (at % PAGE) as usize;
            let n = ((PAGE - at % PAGE).min(end - at)) as usize;
            let existed = self.pages.contains_key(&pg);
            if existed && at < old {
                loose.push((at, (at + n as u64).min(old)));
            }
            let page = self
                .pages
                .entry(pg)
                .or_insert_with(|| Arc::new(vec![0; PAGE as usize]));
            let src = (at - off) as usize;
            Arc::make_mut(page)[in_pg..in_pg + n].copy_from_slice(&data[src..src + n]);
            at += n as u64;
        }
        self.size = self.size.max(end);
        loose
    }

    /// Sets the size; returns the tail of the last kept page that a shrink
    /// zeroed in place. As ulfs's `set_size`, blocks past the new size go
    /// even when growing (preallocated ones).
    pub fn truncate(&mut self, len: u64) -> Option<(u64, u64)> {
        let old = self.size;
        self.size = len;
        let keep = len.div_ceil(PAGE);
        self.pages.retain(|&p, _| p < keep);
        if len >= old {
            return None;
        }
        if !len.is_multiple_of(PAGE)
            && let Some(p) = self.pages.get_mut(&(len / PAGE))
        {
            Arc::make_mut(p)[(len % PAGE) as usize..].fill(0);
            let tail_end = ((len / PAGE) + 1) * PAGE;
            return Some((len, tail_end.min(old)));
        }
        None
    }
    /// fallocate (mode 0 or KEEP_SIZE) of pages `first..last`: holes get
    /// zeroed pages; with `grow`, the size becomes at least `end`.
    pub fn preallocate(&mut self, first: u64, last: u64, grow_to: Option<u64>) {
        for pg in first..last {
            self.pages
                .entry(pg)
                .or_insert_with(|| Arc::new(vec![0; PAGE as usize]));
        }
        if let Some(end) = grow_to {
            self.size = self.size.max(end);
        }
    }

    /// PUNCH_HOLE|KEEP_SIZE of `off..end` (`end` already cut at the size):
    /// whole pages unmapped, partial pages zeroed in place. Returns the
    /// byte ranges zeroed in place.
    pub fn punch(&mut self, off: u64, end: u64) -> Vec<(u64, u64)> {
        let mut in_place = Vec::new();
        let mut pos = off;
        while pos < end {
            let pg = pos / PAGE;
            let n = (PAGE - pos % PAGE).min(end - pos);
            if n == PAGE {
                self.pages.remove(&pg);
            } else if let Some(p) = self.pages.get_mut(&pg) {
                let at = (pos % PAGE) as usize;
                Arc::make_mut(p)[at..at + n as usize].fill(0);
                in_place.push((pos, pos + n));
            }
            pos += n;
        }
        in_place
    }
}

#[derive(Clone, PartialEq, Debug)]
pub enum Node {
    Dir { perm: u32, attrs: Attrs },
    File(u32),
    Symlink(Vec<u8>),
}

impl Node {
    pub fn dir(perm: u32) -> Node {
        Node::Dir {
            perm,
            attrs: Attrs::default(),
        }
    }
}

/// The expected tree: paths (absolute, "/" included) to nodes, and file
/// contents by model inode id (hard links share an id).
#[derive(Clone)]
pub struct Tree {
    pub nodes: BTreeMap<Path, Node>,
    pub files: BTreeMap<u32, Arc<FileData>>,
    /// `shape_of` the tree when it became a snapshot (0: not computed).
    pub shape: u64,
}

/// A fingerprint of names, types and symlink targets: a quick test before
/// the full comparison.
pub fn shape_of<'a>(it: impl Iterator<Item = (&'a Path, u8, &'a [u8])>) -> u64 {
    it.fold(0u64, |acc, (p, kind, target)| {
        let h = str_hash(&String::from_utf8_lossy(p)) ^ str_hash(&String::from_utf8_lossy(target));
        acc.wrapping_add(splitmix(h ^ kind as u64))
    })
}

impl Tree {
    pub fn new() -> Tree {
        let mut nodes = BTreeMap::new();
        // mkfs makes the root owned by root.
        nodes.insert(
            b"/".to_vec(),
            Node::Dir {
                perm: 0o755,
                attrs: Attrs {
                    owner: (0, 0),
                    times: None,
                },
            },
        );
        Tree {
            nodes,
            files: BTreeMap::new(),
            shape: 0,
        }
    }

    pub fn shape(&self) -> u64 {
        shape_of(self.nodes.iter().map(|(p, n)| match n {
            Node::Dir { .. } => (p, 0, &[][..]),
            Node::File(_) => (p, 1, &[][..]),
            Node::Symlink(t) => (p, 2, &t[..]),
        }))
    }

    /// The tree as a snapshot, its shape computed.
    pub fn sealed(mut self) -> Tree {
        self.shape = self.shape();
        self
    }

    pub fn subtree(&self, dir: &[u8]) -> Vec<Path> {
        let mut start = dir.to_vec();
        if dir != b"/" {
            start.push(b'/');
        }
        self.nodes
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start))
            .filter(|(k, _)| k.as_slice() != dir)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn is_empty_dir(&self, dir: &[u8]) -> bool {
        self.subtree(dir).is_empty()
    }

    pub fn links(&self, id: u32) -> usize {
        self.nodes
            .values()
            .filter(|n| **n == Node::File(id))
            .count()
    }

    pub fn subdirs(&self, dir: &[u8]) -> usize {
        self.subdir_counts().get(dir).copied().unwrap_or(0)
    }

    /// Directories by path -> how many directories they hold.
    pub fn subdir_counts(&self) -> HashMap<&[u8], usize> {
        let mut m = HashMap::new();
        for (p, n) in &self.nodes {
            if matches!(n, Node::Dir { .. }) && p.as_slice() != b"/" {
                let cut = p.iter().rposition(|&c| c == b'/').unwrap_or(0).max(1);
                *m.entry(&p[..cut]).or_default() += 1;
            }
        }
        m
    }

    pub fn file_paths(&self) -> Vec<Path> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn dir_paths(&self) -> Vec<Path> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n, Node::Dir { .. }))
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn file_id(&self, p: &[u8]) -> u32 {
        match self.nodes.get(p) {
            Some(Node::File(id)) => *id,
            other => panic!("model: {} is not a file ({other:?})", show(p)),
        }
    }

    pub fn file_mut(&mut self, id: u32) -> &mut FileData {
        Arc::make_mut(self.files.get_mut(&id).expect("model file"))
    }

    /// Owner and times of the file or directory at `p`.
    pub fn attrs_mut(&mut self, p: &[u8]) -> &mut Attrs {
        if let Some(Node::File(id)) = self.nodes.get(p) {
            let id = *id;
            return &mut self.file_mut(id).attrs;
        }
        match self.nodes.get_mut(p) {
            Some(Node::Dir { attrs, .. }) => attrs,
            other => panic!("model: attributes of {} ({other:?})", show(p)),
        }
    }

    /// A call stamped the clock on `p` (its times are unknown from now on).
    pub fn stamp(&mut self, p: &[u8]) {
        if self.nodes.contains_key(p) {
            self.attrs_mut(p).times = None;
        }
    }

    /// Moves `from` (and its subtree) to `to`.
    pub fn move_node(&mut self, from: &[u8], to: &[u8]) {
        let sub = self.subtree(from);
        let node = self.nodes.remove(from).expect("model: rename source");
        let mut moved = Vec::new();
        for p in sub {
            let n = self.nodes.remove(&p).expect("subtree");
            let mut q = to.to_vec();
            q.extend_from_slice(&p[from.len()..]);
            moved.push((q, n));
        }
        self.nodes.insert(to.to_vec(), node);
        self.nodes.extend(moved);
    }
}

//! Reading a tree back from a mounted crash image through the POSIX
//! interface (names, modes, links, sizes, data through SEEK_DATA/HOLE).

use super::*;

#[derive(Clone, PartialEq, Debug)]
pub struct FoundFile {
    pub ino: u64,
    pub nlink: u64,
    pub perm: u32,
    pub owner: (u32, u32),
    /// atime as the first `lstat` of any of its names saw it (reading the
    /// file back moves it under relatime).
    pub atime: Timespec,
    pub mtime: Timespec,
    pub size: u64,
    /// Data pages (SEEK_DATA extents), each PAGE bytes, zero past EOF.
    pub pages: BTreeMap<u64, Vec<u8>>,
}

#[derive(Clone, PartialEq, Debug)]
pub enum FNode {
    Dir {
        perm: u32,
        nlink: u64,
        owner: (u32, u32),
        atime: Timespec,
        mtime: Timespec,
    },
    File(FoundFile),
    Symlink(Vec<u8>),
}

pub struct Found {
    pub nodes: BTreeMap<Path, FNode>,
    /// Things wrong whatever the expected state (e.g. a hole reading non-zero).
    pub anomalies: Vec<String>,
}

impl Found {
    /// The nodes without atimes, which reading the tree back moves (a
    /// read of a file, a listing of a directory; relatime): what a second
    /// read-back must show unchanged.
    pub fn without_read_atimes(&self) -> BTreeMap<Path, FNode> {
        let mut n = self.nodes.clone();
        for v in n.values_mut() {
            match v {
                FNode::File(f) => f.atime = Timespec::default(),
                FNode::Dir { atime, .. } => *atime = Timespec::default(),
                FNode::Symlink(_) => {}
            }
        }
        n
    }
}

pub fn e2s(what: &str, p: &[u8], e: Errno) -> String {
    format!("{what}({}) failed: {e:?}", show(p))
}

pub fn read_file(
    fs: &mut Fs,
    path: &[u8],
    size: u64,
    anomalies: &mut Vec<String>,
) -> Result<BTreeMap<u64, Vec<u8>>, String> {
    let fd = fs
        .open(path, libc::O_RDONLY | libc::O_NOFOLLOW, 0)
        .map_err(|e| e2s("open", path, e))?;
    let mut pages = BTreeMap::new();
    let mut pos = 0u64;
    let check_hole = |fs: &mut Fs, a: u64, b: u64, anomalies: &mut Vec<String>| {
        for at in [a, b.saturating_sub(PAGE).max(a)] {
            if at >= b {
                continue;
            }
            let mut buf = vec![0u8; (b - at).min(PAGE) as usize];
            match fs.pread(fd, &mut buf, at) {
                Ok(n) if n == buf.len() && buf.iter().all(|&c| c == 0) => {}
                r => anomalies.push(format!(
                    "{}: hole at {at} (of {a}..{b}) reads {:?} (non-zero or short)",
                    show(path),
                    r.map(|n| (n, buf.iter().position(|&c| c != 0)))
                )),
            }
        }
    };
    while pos < size {
        let data = match fs.lseek(fd, pos as i64, libc::SEEK_DATA) {
            Ok(d) => d,
            Err(Errno::ENXIO) => {
                check_hole(fs, pos, size, anomalies);
                break;
            }
            Err(e) => return Err(e2s("lseek(SEEK_DATA)", path, e)),
        };
        if data > pos {
            check_hole(fs, pos, data, anomalies);
        }
        let hole = fs
            .lseek(fd, data as i64, libc::SEEK_HOLE)
            .map_err(|e| e2s("lseek(SEEK_HOLE)", path, e))?;
        if hole <= data {
            anomalies.push(format!("{}: SEEK_HOLE({data}) = {hole}", show(path)));
            break;
        }
        let mut pg = data / PAGE;
        while pg * PAGE < hole {
            let mut buf = vec![0u8; PAGE as usize];
            let want = (size - pg * PAGE).min(PAGE) as usize;
            let n = fs
                .pread(fd, &mut buf[..want], pg * PAGE)
                .map_err(|e| e2s("pread", path, e))?;
            if n != want {
                anomalies.push(format!(
                    "{}: pread at {} gave {n} bytes, size says {want}",
                    show(path),
                    pg * PAGE
                ));
            }
            pages.insert(pg, buf);
            pg += 1;
        }
        pos = pg * PAGE;
    }
    let mut one = [0u8; 1];
    match fs.pread(fd, &mut one, size) {
        Ok(0) => {}
        r => anomalies.push(format!("{}: pread at EOF {size} gave {r:?}", show(path))),
    }
    fs.close(fd).map_err(|e| e2s("close", path, e))?;
    Ok(pages)
}

pub fn read_tree(fs: &mut Fs) -> Result<Found, String> {
    let mut nodes = BTreeMap::new();
    let mut anomalies = Vec::new();
    let st = fs.lstat("/").map_err(|e| e2s("lstat", b"/", e))?;
    nodes.insert(
        b"/".to_vec(),
        FNode::Dir {
            perm: st.mode & 0o7777,
            nlink: st.nlink,
            owner: (st.uid, st.gid),
            atime: st.atime,
            mtime: st.mtime,
        },
    );
    // First atime seen per inode: a later name of a file already read
    // shows the atime that read set.
    let mut first_atime: HashMap<u64, Timespec> = HashMap::new();
    let mut stack = vec![b"/".to_vec()];
    while let Some(dir) = stack.pop() {
        let fd = fs
            .open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| e2s("open", &dir, e))?;
        let mut buf = vec![0u8; 32 << 10];
        let mut entries = Vec::new();
        loop {
            let n = fs
                .getdents64(fd, &mut buf)
                .map_err(|e| e2s("getdents64", &dir, e))?;
            if n == 0 {
                break;
            }
            entries.extend(parse_dirents(&buf[..n]));
        }
        fs.close(fd).map_err(|e| e2s("close", &dir, e))?;
        for d in entries {
            if d.name == b"." || d.name == b".." {
                continue;
            }
            let path = join(&dir, &d.name);
            let st = fs.lstat(&path).map_err(|e| e2s("lstat", &path, e))?;
            let fmt = st.mode & libc::S_IFMT;
            let want_dt = match fmt {
                libc::S_IFDIR => libc::DT_DIR,
                libc::S_IFREG => libc::DT_REG,
                libc::S_IFLNK => libc::DT_LNK,
                _ => 0,
            };
            if d.dtype != want_dt {
                anomalies.push(format!(
                    "{}: d_type {} but mode {:o}",
                    show(&path),
                    d.dtype,
                    st.mode
                ));
            }
            if st.ino != d.ino {
                anomalies.push(format!(
                    "{}: d_ino {} but st_ino {}",
                    show(&path),
                    d.ino,
                    st.ino
                ));
            }
            let node = match fmt {
                libc::S_IFDIR => {
                    stack.push(path.clone());
                    FNode::Dir {
                        perm: st.mode & 0o7777,
                        nlink: st.nlink,
                        owner: (st.uid, st.gid),
                        atime: st.atime,
                        mtime: st.mtime,
                    }
                }
                libc::S_IFREG => FNode::File(FoundFile {
                    ino: st.ino,
                    nlink: st.nlink,
                    perm: st.mode & 0o7777,
                    owner: (st.uid, st.gid),
                    atime: *first_atime.entry(st.ino).or_insert(st.atime),
                    mtime: st.mtime,
                    size: st.size,
                    pages: read_file(fs, &path, st.size, &mut anomalies)?,
                }),
                libc::S_IFLNK => {
                    FNode::Symlink(fs.readlink(&path).map_err(|e| e2s("readlink", &path, e))?)
                }
                _ => return Err(format!("{}: unexpected mode {:o}", show(&path), st.mode)),
            };
            if nodes.insert(path.clone(), node).is_some() {
                anomalies.push(format!("{}: listed twice", show(&path)));
            }
        }
    }
    Ok(Found { nodes, anomalies })
}

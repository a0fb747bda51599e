//! glibc's `fts(3)` (`fts_open`, `fts_read`, `fts_children`, `fts_set`,
//! `fts_close`, and the `fts64_*` names glibc exports for the same code)
//! over image trees. glibc walks with internal calls this library cannot
//! see, so when every path given to `fts_open` is in the image the walk is
//! done here, with this library's own `opendir`/`readdir` and
//! `stat`/`lstat`, by glibc's rules: pre-order `FTS_D`, post-order
//! `FTS_DP`, `FTS_PHYSICAL`/`FTS_LOGICAL`/`FTS_COMFOLLOW`, `FTS_SEEDOT`,
//! cycle detection (`FTS_DC`), the `compar` order, and `fts_set`'s
//! `FTS_SKIP`, `FTS_AGAIN` and `FTS_FOLLOW`.
//!
//! The walk never changes directory (it behaves as if `FTS_NOCHDIR` were
//! always set, and says so in `fts_options`): `fts_accpath` is
//! `fts_path`, which every entry owns (glibc's point into one shared
//! buffer). `FTS_NOSTAT` still stats, and `FTS_XDEV` has nothing to do
//! (one image is one device). An entry lives until the walk moves past
//! its directory's `FTS_DP` (glibc frees it sooner), or `fts_close`.
//!
//! The `FTS *` the program holds is a `Stream`, whose first field has
//! glibc's `FTS` layout; the registry tells ours from glibc's, which go to
//! glibc. Entries are `FTSENT`s with glibc's layout, malloc'd with room
//! for the name (a flexible array member).

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char, c_int, c_long, c_short, c_ushort, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;
use std::sync::Mutex;

use crate::io::arg;
use crate::real::real;
use crate::route::{Route, route};
use crate::state::image;

/// glibc's `FTS` (x86_64 layout).
#[repr(C)]
pub struct Fts {
    fts_cur: *mut FtsEnt,
    fts_child: *mut FtsEnt,
    fts_array: *mut *mut FtsEnt,
    fts_dev: libc::dev_t,
    fts_path: *mut c_char,
    fts_rfd: c_int,
    fts_pathlen: c_int,
    fts_nitems: c_int,
    fts_compar: *const c_void,
    fts_options: c_int,
}

/// glibc's `FTSENT` (x86_64 layout; `FTSENT64` is the same there).
#[repr(C)]
pub struct FtsEnt {
    fts_cycle: *mut FtsEnt,
    fts_parent: *mut FtsEnt,
    fts_link: *mut FtsEnt,
    fts_number: c_long,
    fts_pointer: *mut c_void,
    fts_accpath: *mut c_char,
    fts_path: *mut c_char,
    fts_errno: c_int,
    fts_symfd: c_int,
    fts_pathlen: c_ushort,
    fts_namelen: c_ushort,
    fts_ino: libc::ino_t,
    fts_dev: libc::dev_t,
    fts_nlink: libc::nlink_t,
    fts_level: c_short,
    fts_info: c_ushort,
    fts_flags: c_ushort,
    fts_instr: c_ushort,
    fts_statp: *mut libc::stat,
    /// The first byte of the name; the allocation holds all of it.
    fts_name: [c_char; 1],
}

// Programs read these fields at glibc's offsets.
const _: () = assert!(size_of::<Fts>() == 72 && offset_of!(Fts, fts_options) == 64);
const _: () = assert!(offset_of!(FtsEnt, fts_ino) == 72 && offset_of!(FtsEnt, fts_level) == 96);
const _: () = assert!(offset_of!(FtsEnt, fts_statp) == 104 && offset_of!(FtsEnt, fts_name) == 112);

/// `fts_open`'s comparison: two `const FTSENT **`, as `qsort` passes them.
type Compar = Option<unsafe extern "C" fn(*const *const FtsEnt, *const *const FtsEnt) -> c_int>;
type QsortCompar = unsafe extern "C" fn(*const c_void, *const c_void) -> c_int;

// glibc's options and codes (<fts.h>).
const FTS_COMFOLLOW: c_int = 0x1;
const FTS_LOGICAL: c_int = 0x2;
const FTS_NOCHDIR: c_int = 0x4;
const FTS_SEEDOT: c_int = 0x20;
const FTS_OPTIONMASK: c_int = 0xff;
const FTS_NAMEONLY: c_int = 0x100;
const FTS_ROOTPARENTLEVEL: c_short = -1;

const FTS_D: c_ushort = 1;
const FTS_DC: c_ushort = 2;
const FTS_DEFAULT: c_ushort = 3;
const FTS_DNR: c_ushort = 4;
const FTS_DOT: c_ushort = 5;
const FTS_DP: c_ushort = 6;
const FTS_ERR: c_ushort = 7;
const FTS_F: c_ushort = 8;
const FTS_INIT: c_ushort = 9;
const FTS_NS: c_ushort = 10;
const FTS_SL: c_ushort = 12;
const FTS_SLNONE: c_ushort = 13;

const FTS_AGAIN: c_int = 1;
const FTS_FOLLOW: c_int = 2;
const FTS_NOINSTR: c_int = 3;
const FTS_SKIP: c_int = 4;

/// One walk. `fts` comes first, so a `*mut Stream` is the `FTS *`.
#[repr(C)]
struct Stream {
    fts: Fts,
    compar: Compar,
    /// The parent of the roots (level -1), as in glibc.
    root_parent: *mut FtsEnt,
    /// Current before the first `fts_read`: `FTS_INIT`, linked to the
    /// roots.
    init: *mut FtsEnt,
    /// Each read directory's entries, in walk order (the roots are the
    /// root parent's). Every entry but the two above is in one list.
    kids: HashMap<usize, Vec<*mut FtsEnt>>,
    /// `fts_children` read the current directory: `fts_read` descends
    /// into that list rather than reading it again.
    pending: bool,
    /// Out of memory: the walk cannot go on.
    stopped: bool,
}

/// The `FTS *`s that are ours.
static OURS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn is_ours(sp: *mut Fts) -> bool {
    let g = OURS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref().is_some_and(|s| s.contains(&(sp as usize)))
}

/// A new entry for `name` at `path`, zeroed but for the names, with a
/// zeroed `struct stat`; NULL (errno ENOMEM) when memory runs out.
fn new_entry(name: &[u8], path: &[u8], parent: *mut FtsEnt, level: c_short) -> *mut FtsEnt {
    let size = (offset_of!(FtsEnt, fts_name) + name.len() + 1).max(size_of::<FtsEnt>());
    // SAFETY: calloc of positive sizes; zero is a valid value for every
    // field of both structs (NULL pointers, zero integers).
    let (p, st, cpath) = unsafe {
        (
            libc::calloc(1, size).cast::<FtsEnt>(),
            libc::calloc(1, size_of::<libc::stat>()).cast::<libc::stat>(),
            libc::calloc(1, path.len() + 1).cast::<c_char>(),
        )
    };
    if p.is_null() || st.is_null() || cpath.is_null() {
        // SAFETY: each is NULL or a block just allocated.
        unsafe {
            libc::free(p.cast());
            libc::free(st.cast());
            libc::free(cpath.cast());
        }
        crate::fail::<c_int>(libc::ENOMEM);
        return null_mut();
    }
    // SAFETY: `p` has room for the header and `name.len() + 1` bytes from
    // `fts_name` (the NUL is already there from calloc); `cpath` has room
    // for `path` and its NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr().cast(), cpath, path.len());
        let name_at = p.cast::<u8>().add(offset_of!(FtsEnt, fts_name));
        std::ptr::copy_nonoverlapping(name.as_ptr(), name_at, name.len());
        (*p).fts_parent = parent;
        (*p).fts_path = cpath;
        // Never changing directory, the access path is the path.
        (*p).fts_accpath = cpath;
        (*p).fts_pathlen = path.len().min(usize::from(c_ushort::MAX)) as c_ushort;
        (*p).fts_namelen = name.len().min(usize::from(c_ushort::MAX)) as c_ushort;
        (*p).fts_level = level;
        (*p).fts_symfd = -1;
        (*p).fts_instr = FTS_NOINSTR as c_ushort;
        (*p).fts_statp = st;
    }
    p
}

/// Frees an entry made by `new_entry`.
///
/// # Safety
/// `p` from `new_entry`, not freed yet and no longer used.
unsafe fn free_entry(p: *mut FtsEnt) {
    // SAFETY: by the contract, all three blocks are `new_entry`'s.
    unsafe {
        libc::free((*p).fts_path.cast());
        libc::free((*p).fts_statp.cast());
        libc::free(p.cast());
    }
}

/// A root's name is the path as given until it is first returned; from
/// then on its last component (glibc's `fts_load`, quirks included: `/`
/// stays `/`, and `a/` becomes empty). Shortening in place is safe, and
/// doing it twice changes nothing.
///
/// # Safety
/// `p` a live entry.
unsafe fn load_root(p: *mut FtsEnt) {
    // SAFETY: a live entry: its name has `fts_namelen` bytes and a NUL.
    unsafe {
        let name_at = p.cast::<u8>().add(offset_of!(FtsEnt, fts_name));
        let len = usize::from((*p).fts_namelen);
        let name = std::slice::from_raw_parts(name_at, len);
        let Some(slash) = name.iter().rposition(|&b| b == b'/') else {
            return;
        };
        if slash == 0 && len == 1 {
            return;
        }
        let rest = len - slash - 1;
        std::ptr::copy(name_at.add(slash + 1), name_at, rest + 1);
        (*p).fts_namelen = rest as c_ushort;
    }
}

/// The path of an entry.
///
/// # Safety
/// `p` a live entry.
unsafe fn path_of<'a>(p: *const FtsEnt) -> &'a CStr {
    // SAFETY: `fts_path` is the entry's own NUL-terminated copy.
    unsafe { CStr::from_ptr((*p).fts_path) }
}

/// `path/name`, with one slash between them (glibc's rule).
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut child = dir.to_vec();
    if !child.ends_with(b"/") {
        child.push(b'/');
    }
    child.extend_from_slice(name);
    child
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Stream {
    fn option(&self, flag: c_int) -> bool {
        self.fts.fts_options & flag != 0
    }

    /// Stats `p` (following a symlink when `follow` or the walk is
    /// logical) and says what it is, as glibc's `fts_stat` does.
    ///
    /// # Safety
    /// `p` a live entry of this stream.
    unsafe fn stat_entry(&self, p: *mut FtsEnt, follow: bool) -> c_ushort {
        // SAFETY: a live entry: its path is NUL-terminated and its
        // `fts_statp` a writable `struct stat`; these are this library's
        // own stat calls.
        unsafe {
            let path = (*p).fts_path;
            let st = (*p).fts_statp;
            if follow || self.option(FTS_LOGICAL) {
                if crate::paths::stat(path, st) != 0 {
                    let err = crate::errno();
                    if err == libc::ENOENT && crate::paths::lstat(path, st) == 0 {
                        // A symlink whose target is missing.
                        crate::fail::<c_int>(0);
                        return FTS_SLNONE;
                    }
                    (*p).fts_errno = err;
                    st.write_bytes(0, 1);
                    return FTS_NS;
                }
            } else if crate::paths::lstat(path, st) != 0 {
                (*p).fts_errno = crate::errno();
                st.write_bytes(0, 1);
                return FTS_NS;
            }
            (*p).fts_ino = (*st).st_ino;
            (*p).fts_dev = (*st).st_dev;
            (*p).fts_nlink = (*st).st_nlink;
            match (*st).st_mode & libc::S_IFMT {
                libc::S_IFDIR => Self::dir_kind(p),
                libc::S_IFLNK => FTS_SL,
                libc::S_IFREG => FTS_F,
                _ => FTS_DEFAULT,
            }
        }
    }

    /// A directory is `FTS_DOT` (`.` or `..`), `FTS_DC` (an ancestor
    /// again: `fts_cycle` names it) or `FTS_D`.
    ///
    /// # Safety
    /// `p` a live entry whose ancestors are live.
    unsafe fn dir_kind(p: *mut FtsEnt) -> c_ushort {
        // SAFETY: a live entry, whose name has `fts_namelen` bytes, and
        // whose parents are live up to the root parent (level -1).
        unsafe {
            let name_at = p.cast::<u8>().add(offset_of!(FtsEnt, fts_name));
            let name = std::slice::from_raw_parts(name_at, usize::from((*p).fts_namelen));
            if is_dot(name) {
                return FTS_DOT;
            }
            let mut t = (*p).fts_parent;
            while !t.is_null() && (*t).fts_level > FTS_ROOTPARENTLEVEL {
                if (*t).fts_ino == (*p).fts_ino && (*t).fts_dev == (*p).fts_dev {
                    (*p).fts_cycle = t;
                    return FTS_DC;
                }
                t = (*t).fts_parent;
            }
        }
        FTS_D
    }

    /// Sorts with the program's `compar` (if any) and links the entries
    /// through `fts_link`, returning the first.
    fn sort_and_link(&self, list: &mut [*mut FtsEnt]) -> *mut FtsEnt {
        if let Some(c) = self.compar
            && list.len() > 1
        {
            // SAFETY: `list` holds `len` entry pointers; `c` compares two
            // `const FTSENT **`, which is what qsort passes (glibc sorts
            // the same way).
            unsafe {
                let c = std::mem::transmute::<
                    unsafe extern "C" fn(*const *const FtsEnt, *const *const FtsEnt) -> c_int,
                    QsortCompar,
                >(c);
                libc::qsort(
                    list.as_mut_ptr().cast(),
                    list.len(),
                    size_of::<usize>(),
                    Some(c),
                );
            }
        }
        for w in list.windows(2) {
            // SAFETY: live entries of this stream.
            unsafe { (*w[0]).fts_link = w[1] };
        }
        if let Some(&last) = list.last() {
            // SAFETY: as above.
            unsafe { (*last).fts_link = null_mut() };
        }
        list.first().copied().unwrap_or(null_mut())
    }

    /// Frees the entries read from directory `p` (and theirs).
    fn free_kids(&mut self, p: *mut FtsEnt) {
        let Some(list) = self.kids.remove(&(p as usize)) else {
            return;
        };
        for e in list {
            self.free_kids(e);
            // SAFETY: each entry is in exactly one list, now removed.
            unsafe { free_entry(e) };
        }
    }

    /// Reads directory `p` into a list of stat'd entries and returns the
    /// first (NULL for none). `reading` is `fts_read` (rather than
    /// `fts_children`), which marks an empty directory `FTS_DP` and an
    /// unreadable one `FTS_DNR`, as glibc's `fts_build` does.
    ///
    /// # Safety
    /// `p` a live directory entry of this stream.
    unsafe fn build(&mut self, p: *mut FtsEnt, reading: bool) -> *mut FtsEnt {
        self.free_kids(p);
        // SAFETY: a live entry: a NUL-terminated path; our own opendir.
        let dir = unsafe { crate::dirs::opendir((*p).fts_path) };
        if dir.is_null() {
            if reading {
                // SAFETY: a live entry.
                unsafe {
                    (*p).fts_info = FTS_DNR;
                    (*p).fts_errno = crate::errno();
                }
            }
            return null_mut();
        }
        // SAFETY: `p` is live and `dir` our stream on it.
        let list = unsafe { self.read_entries(p, dir) };
        // SAFETY: our own stream, opened above.
        unsafe { crate::dirs::closedir(dir) };
        let Some(mut list) = list else {
            return null_mut();
        };
        if list.is_empty() {
            if reading {
                // SAFETY: a live entry.
                unsafe { (*p).fts_info = FTS_DP };
            }
            return null_mut();
        }
        let first = self.sort_and_link(&mut list);
        self.kids.insert(p as usize, list);
        first
    }

    /// The entries of open directory stream `dir` of `p`, each stat'd;
    /// None when memory ran out (the walk stops).
    ///
    /// # Safety
    /// `p` a live directory entry, `dir` one of our streams on it.
    unsafe fn read_entries(
        &mut self,
        p: *mut FtsEnt,
        dir: *mut libc::DIR,
    ) -> Option<Vec<*mut FtsEnt>> {
        let mut list = Vec::new();
        // SAFETY: a live entry.
        let (dir_path, level) = unsafe { (path_of(p).to_bytes(), (*p).fts_level + 1) };
        loop {
            // SAFETY: our own stream.
            let e = unsafe { crate::dirs::readdir64(dir) };
            if e.is_null() {
                return Some(list);
            }
            // SAFETY: a live entry of the stream, valid until the next
            // readdir; the name is copied before then.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
            if is_dot(name) && !self.option(FTS_SEEDOT) {
                continue;
            }
            let child = new_entry(name, &join(dir_path, name), p, level);
            if child.is_null() {
                for e in list {
                    // SAFETY: made above, in no list yet.
                    unsafe { free_entry(e) };
                }
                self.stopped = true;
                return None;
            }
            // SAFETY: a live entry whose ancestors are live.
            unsafe { (*child).fts_info = self.stat_entry(child, false) };
            list.push(child);
        }
    }

    /// Makes `p` current and returns it.
    fn current(&mut self, p: *mut FtsEnt) -> *mut FtsEnt {
        // SAFETY: the entry being made current is live.
        if unsafe { (*p).fts_level } == 0 {
            // SAFETY: as above.
            unsafe { load_root(p) };
        }
        self.fts.fts_cur = p;
        self.fts.fts_child = null_mut();
        p
    }

    /// `fts_read`.
    ///
    /// # Safety
    /// A stream of ours, between `fts_open` and `fts_close`.
    unsafe fn read(&mut self) -> *mut FtsEnt {
        let p = self.fts.fts_cur;
        if p.is_null() || self.stopped {
            return null_mut();
        }
        // SAFETY: the current entry is live.
        let instr = c_int::from(unsafe { (*p).fts_instr });
        // SAFETY: as above.
        unsafe { (*p).fts_instr = FTS_NOINSTR as c_ushort };
        // SAFETY: as above.
        let info = unsafe { (*p).fts_info };
        if instr == FTS_AGAIN {
            // SAFETY: a live entry of this stream.
            unsafe { (*p).fts_info = self.stat_entry(p, false) };
            return p;
        }
        if instr == FTS_FOLLOW && (info == FTS_SL || info == FTS_SLNONE) {
            // SAFETY: as above.
            unsafe { (*p).fts_info = self.stat_entry(p, true) };
            return p;
        }
        if info == FTS_D {
            return self.descend(p, instr == FTS_SKIP);
        }
        self.leave(p)
    }

    /// After an `FTS_D`: its first entry, or the directory again as
    /// `FTS_DP` (skipped, or empty) or `FTS_DNR` (unreadable).
    fn descend(&mut self, p: *mut FtsEnt, skip: bool) -> *mut FtsEnt {
        let pending = std::mem::take(&mut self.pending);
        if skip {
            // SAFETY: the current entry is live.
            unsafe { (*p).fts_info = FTS_DP };
            return self.current(p);
        }
        let first = match self.kids.get(&(p as usize)) {
            Some(list) if pending => list[0],
            // SAFETY: a live directory entry of this stream.
            _ => unsafe { self.build(p, true) },
        };
        if first.is_null() {
            return if self.stopped {
                null_mut()
            } else {
                self.current(p)
            };
        }
        self.arrive(first, p)
    }

    /// Moves past `p`: to its next sibling, or up to its parent.
    fn leave(&mut self, p: *mut FtsEnt) -> *mut FtsEnt {
        // Done with `p`, and with all below it.
        self.free_kids(p);
        // SAFETY: `p` is live (only its entries were freed).
        let (next, parent) = unsafe { ((*p).fts_link, (*p).fts_parent) };
        self.arrive(next, parent)
    }

    /// Returns `cand` or the first sibling after it that `fts_set` did not
    /// skip; with none left, `parent` post-order (or the end of the walk).
    fn arrive(&mut self, mut cand: *mut FtsEnt, parent: *mut FtsEnt) -> *mut FtsEnt {
        while !cand.is_null() {
            // SAFETY: siblings of the current entry are live.
            let instr = c_int::from(unsafe { (*cand).fts_instr });
            match instr {
                // SAFETY: as above.
                FTS_SKIP => cand = unsafe { (*cand).fts_link },
                FTS_FOLLOW => {
                    // SAFETY: as above.
                    unsafe {
                        (*cand).fts_info = self.stat_entry(cand, true);
                        (*cand).fts_instr = FTS_NOINSTR as c_ushort;
                    }
                    return self.current(cand);
                }
                _ => return self.current(cand),
            }
        }
        // SAFETY: the parent of live entries is live.
        unsafe {
            if (*parent).fts_level == FTS_ROOTPARENTLEVEL {
                self.fts.fts_cur = null_mut();
                crate::fail::<c_int>(0);
                return null_mut();
            }
            (*parent).fts_info = if (*parent).fts_errno != 0 {
                FTS_ERR
            } else {
                FTS_DP
            };
        }
        self.current(parent)
    }

    /// `fts_children`.
    ///
    /// # Safety
    /// A stream of ours, between `fts_open` and `fts_close`.
    unsafe fn children(&mut self, instr: c_int) -> *mut FtsEnt {
        if instr != 0 && instr != FTS_NAMEONLY {
            crate::fail::<c_int>(libc::EINVAL);
            return null_mut();
        }
        crate::fail::<c_int>(0);
        let p = self.fts.fts_cur;
        if p.is_null() || self.stopped {
            return null_mut();
        }
        // SAFETY: the current entry is live.
        match unsafe { (*p).fts_info } {
            // SAFETY: as above.
            FTS_INIT => unsafe { (*p).fts_link },
            FTS_D => {
                // The names are read with their stat, FTS_NAMEONLY or not,
                // so fts_read can descend into this same list.
                // SAFETY: a live directory entry of this stream.
                let first = unsafe { self.build(p, false) };
                self.pending = !first.is_null();
                self.fts.fts_child = first;
                first
            }
            _ => null_mut(),
        }
    }

    /// Frees every entry; the stream itself is the caller's.
    fn free_all(&mut self) {
        let lists: Vec<_> = self.kids.drain().flat_map(|(_, l)| l).collect();
        for e in lists.into_iter().chain([self.root_parent, self.init]) {
            // SAFETY: every entry is in one list, or is one of the two
            // kept apart; each is freed once.
            unsafe { free_entry(e) };
        }
    }
}

/// Whether every path of a NULL-terminated `argv` is in the image (and
/// there is at least one).
///
/// # Safety
/// `argv` NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn all_in_image(argv: *const *const c_char) -> bool {
    let Some(image) = image() else {
        return false;
    };
    if argv.is_null() {
        return false;
    }
    let mut i = 0;
    loop {
        // SAFETY: by the contract, up to and including the NULL.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            return i > 0;
        }
        // SAFETY: by the contract.
        let Some(bytes) = (unsafe { arg(p) }) else {
            return false;
        };
        if bytes.is_empty() || !matches!(route(image, libc::AT_FDCWD, bytes), Route::Image { .. }) {
            return false;
        }
        i += 1;
    }
}

/// A stream over the roots in `argv`, all in the image.
///
/// # Safety
/// `argv` a NULL-terminated array of NUL-terminated strings.
unsafe fn open(argv: *const *const c_char, options: c_int, compar: Compar) -> *mut Fts {
    let root_parent = new_entry(b"", b"", null_mut(), FTS_ROOTPARENTLEVEL);
    let init = new_entry(b"", b"", root_parent, 0);
    let mut s = Box::new(Stream {
        fts: Fts {
            fts_cur: init,
            fts_child: null_mut(),
            fts_array: null_mut(),
            fts_dev: 0,
            fts_path: null_mut(),
            fts_rfd: -1,
            fts_pathlen: 0,
            fts_nitems: 0,
            fts_compar: compar.map_or(std::ptr::null(), |c| c as *const c_void),
            fts_options: options | FTS_NOCHDIR,
        },
        compar,
        root_parent,
        init,
        kids: HashMap::new(),
        pending: false,
        stopped: false,
    });
    if root_parent.is_null() || init.is_null() {
        // SAFETY: each is NULL or just made.
        unsafe {
            for e in [root_parent, init].into_iter().filter(|e| !e.is_null()) {
                free_entry(e);
            }
        }
        crate::fail::<c_int>(libc::ENOMEM);
        return null_mut();
    }
    // SAFETY: by the contract.
    let Some(mut roots) = (unsafe { make_roots(&s, argv) }) else {
        s.free_all();
        return null_mut();
    };
    let first = s.sort_and_link(&mut roots);
    // SAFETY: `init` and the first root are live.
    unsafe {
        (*init).fts_info = FTS_INIT;
        (*init).fts_link = first;
        s.fts.fts_dev = (*first).fts_dev;
    }
    s.kids.insert(root_parent as usize, roots);
    let p = Box::into_raw(s);
    let mut g = OURS.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashSet::new).insert(p as usize);
    p.cast()
}

/// The root entries, stat'd (following a symlink with `FTS_COMFOLLOW`);
/// None (errno ENOMEM) when memory runs out.
///
/// # Safety
/// `argv` a non-empty NULL-terminated array of NUL-terminated strings.
unsafe fn make_roots(s: &Stream, argv: *const *const c_char) -> Option<Vec<*mut FtsEnt>> {
    let mut roots = Vec::new();
    for i in 0.. {
        // SAFETY: by the contract, up to and including the NULL.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: by the contract.
        let path = unsafe { CStr::from_ptr(p) }.to_bytes();
        // A root's name is the path as given, as in glibc.
        let e = new_entry(path, path, s.root_parent, 0);
        if e.is_null() {
            for r in roots {
                // SAFETY: made above, in no list yet.
                unsafe { free_entry(r) };
            }
            return None;
        }
        // SAFETY: a live entry whose parent is the root parent.
        let info = unsafe { s.stat_entry(e, s.option(FTS_COMFOLLOW)) };
        // A root is never FTS_DOT: `fts_open(".")` walks `.`.
        // SAFETY: as above.
        unsafe { (*e).fts_info = if info == FTS_DOT { FTS_D } else { info } };
        roots.push(e);
    }
    Some(roots)
}

/// The stream of `sp`, if it is ours.
///
/// # Safety
/// `sp` is ours only while registered, i.e. between our `fts_open` and
/// `fts_close`, and used by one thread at a time, as with glibc.
unsafe fn ours<'a>(sp: *mut Fts) -> Option<&'a mut Stream> {
    // SAFETY: a registered pointer is a live `Stream` made by `open`.
    is_ours(sp).then(|| unsafe { &mut *sp.cast::<Stream>() })
}

/// `fts_open(3)`.
///
/// # Safety
/// As libc's `fts_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_open(
    argv: *const *const c_char,
    options: c_int,
    compar: Compar,
) -> *mut Fts {
    // SAFETY: by fts_open's contract.
    if !unsafe { all_in_image(argv) } {
        let f =
            real!(fts_open: unsafe extern "C" fn(*const *const c_char, c_int, Compar) -> *mut Fts);
        // SAFETY: the program's own arguments.
        return unsafe { f(argv, options, compar) };
    }
    if options & !FTS_OPTIONMASK != 0 {
        crate::fail::<c_int>(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: `argv` was checked to be a non-empty list of paths.
    unsafe { open(argv, options, compar) }
}

/// `fts_read(3)`.
///
/// # Safety
/// As libc's `fts_read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_read(sp: *mut Fts) -> *mut FtsEnt {
    // SAFETY: by fts_read's contract.
    match unsafe { ours(sp) } {
        // SAFETY: a live stream of ours.
        Some(s) => unsafe { s.read() },
        None => {
            let f = real!(fts_read: unsafe extern "C" fn(*mut Fts) -> *mut FtsEnt);
            // SAFETY: the program's own glibc stream.
            unsafe { f(sp) }
        }
    }
}

/// `fts_children(3)`.
///
/// # Safety
/// As libc's `fts_children`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_children(sp: *mut Fts, instr: c_int) -> *mut FtsEnt {
    // SAFETY: by fts_children's contract.
    match unsafe { ours(sp) } {
        // SAFETY: a live stream of ours.
        Some(s) => unsafe { s.children(instr) },
        None => {
            let f = real!(fts_children: unsafe extern "C" fn(*mut Fts, c_int) -> *mut FtsEnt);
            // SAFETY: the program's own glibc stream.
            unsafe { f(sp, instr) }
        }
    }
}

/// `fts_set(3)`: an instruction for `p`, acted on by the next
/// `fts_read` that reaches it.
///
/// # Safety
/// As libc's `fts_set`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_set(sp: *mut Fts, p: *mut FtsEnt, instr: c_int) -> c_int {
    if !is_ours(sp) {
        let f = real!(fts_set: unsafe extern "C" fn(*mut Fts, *mut FtsEnt, c_int) -> c_int);
        // SAFETY: the program's own glibc stream and entry.
        return unsafe { f(sp, p, instr) };
    }
    if !matches!(instr, 0 | FTS_AGAIN | FTS_FOLLOW | FTS_NOINSTR | FTS_SKIP) || p.is_null() {
        return crate::fail(libc::EINVAL);
    }
    // SAFETY: by the contract, an entry of this stream not yet freed.
    unsafe { (*p).fts_instr = instr as c_ushort };
    0
}

/// `fts_close(3)`: frees the stream and its entries (never having
/// changed directory, there is nothing to restore).
///
/// # Safety
/// As libc's `fts_close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts_close(sp: *mut Fts) -> c_int {
    let ours = {
        let mut g = OURS.lock().unwrap_or_else(|e| e.into_inner());
        g.as_mut().is_some_and(|s| s.remove(&(sp as usize)))
    };
    if !ours {
        let f = real!(fts_close: unsafe extern "C" fn(*mut Fts) -> c_int);
        // SAFETY: the program's own glibc stream.
        return unsafe { f(sp) };
    }
    // SAFETY: it was registered, so it is a `Box<Stream>` made by `open`;
    // no longer registered, nothing else frees it.
    let mut s = unsafe { Box::from_raw(sp.cast::<Stream>()) };
    s.free_all();
    0
}

/// `fts64_open`: glibc's `fts64_*` are its `fts_*` under other names
/// (one layout on x86_64), so the `fts_*` here serve both.
///
/// # Safety
/// As libc's `fts64_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_open(
    argv: *const *const c_char,
    options: c_int,
    compar: Compar,
) -> *mut Fts {
    // SAFETY: the caller's contract.
    unsafe { fts_open(argv, options, compar) }
}

/// # Safety
/// As libc's `fts64_read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_read(sp: *mut Fts) -> *mut FtsEnt {
    // SAFETY: the caller's contract.
    unsafe { fts_read(sp) }
}

/// # Safety
/// As libc's `fts64_children`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_children(sp: *mut Fts, instr: c_int) -> *mut FtsEnt {
    // SAFETY: the caller's contract.
    unsafe { fts_children(sp, instr) }
}

/// # Safety
/// As libc's `fts64_set`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_set(sp: *mut Fts, p: *mut FtsEnt, instr: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fts_set(sp, p, instr) }
}

/// # Safety
/// As libc's `fts64_close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fts64_close(sp: *mut Fts) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fts_close(sp) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_path_has_one_slash() {
        assert_eq!(join(b"/ulfs/a", b"b"), b"/ulfs/a/b");
        assert_eq!(join(b"/ulfs/a/", b"b"), b"/ulfs/a/b");
    }

    #[test]
    fn an_entry_holds_its_whole_name() {
        let p = new_entry(b"a-long-name.txt", b"/ulfs/a-long-name.txt", null_mut(), 0);
        assert!(!p.is_null());
        // SAFETY: a live entry with a NUL-terminated name.
        unsafe {
            let name = CStr::from_ptr((*p).fts_name.as_ptr());
            assert_eq!(name.to_bytes(), b"a-long-name.txt");
            assert_eq!((*p).fts_namelen, 15);
            assert_eq!((*p).fts_accpath, (*p).fts_path);
            free_entry(p);
        }
    }

    #[test]
    fn a_root_is_named_by_its_last_component() {
        let name = |path: &[u8]| {
            let p = new_entry(path, path, null_mut(), 0);
            // SAFETY: a live entry, freed once.
            unsafe {
                load_root(p);
                load_root(p);
                let n = CStr::from_ptr((*p).fts_name.as_ptr()).to_bytes().to_vec();
                assert_eq!(n.len(), usize::from((*p).fts_namelen));
                free_entry(p);
                n
            }
        };
        assert_eq!(name(b"/ulfs/a/b"), b"b");
        assert_eq!(name(b"b"), b"b");
        assert_eq!(name(b"/"), b"/");
        assert_eq!(name(b"/ulfs/a/"), b"");
    }
}

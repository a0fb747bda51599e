//! The call-sequence harness: the host's own file system is the model.
//!
//! Four input bytes make one call on a small set of relative paths (so that
//! calls meet each other's results). Each call runs on ulfs and in a fresh
//! host directory (memory-backed where the host has /dev/shm), and the two
//! outcomes (a value, or an errno) must be equal. At the end the trees
//! must be equal, again after ulfs is unmounted and mounted afresh, and
//! the image must check clean. Timestamps and owners are left to the model
//! test (tests/model*.rs), which knows Linux's rules for them.

use crate::sample::empty_image;
use crate::snapshot::{Budget, Shown, Snapshot, snapshot};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use ulfs::store::SimDisk;
use ulfs::{Fs, FsckOptions, Mode, MountOptions};

const PATHS: [&str; 8] = ["a", "b", "c", "a/x", "a/y", "b/x", "a/x/z", "c/q"];

/// What a call gave: a value (as text) or an errno.
type Outcome = Result<String, i32>;

#[derive(Debug, Clone, Copy)]
enum Call {
    Mkdir(usize),
    Create(usize),
    Write {
        path: usize,
        off: u64,
        len: usize,
        byte: u8,
    },
    Read {
        path: usize,
        off: u64,
        len: usize,
    },
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Symlink {
        target: usize,
        path: usize,
    },
    Truncate(usize, u64),
    Stat(usize),
    List(usize),
}

fn decode(data: &[u8]) -> Vec<Call> {
    data.chunks_exact(4)
        .map(|c| {
            let (a, b) = (c[1] as usize % PATHS.len(), c[2] as usize % PATHS.len());
            match c[0] % 12 {
                0 => Call::Mkdir(a),
                1 => Call::Create(a),
                2 => Call::Write {
                    path: a,
                    off: c[2] as u64 * 1021,
                    len: c[3] as usize * 61,
                    byte: c[1] ^ c[3],
                },
                3 => Call::Read {
                    path: a,
                    off: c[2] as u64 * 997,
                    len: c[3] as usize * 53 + 1,
                },
                4 => Call::Unlink(a),
                5 => Call::Rmdir(a),
                6 => Call::Rename(a, b),
                7 => Call::Link(a, b),
                8 => Call::Symlink { target: b, path: a },
                9 => Call::Truncate(a, c[2] as u64 * 509),
                10 => Call::Stat(a),
                _ => Call::List(a),
            }
        })
        .take(200)
        .collect()
}

/// See the module comment.
pub fn ops_against_host(data: &[u8]) {
    let mode = if data.first().copied().unwrap_or(0) & 1 == 0 {
        Mode::Journal
    } else {
        Mode::None
    };
    let calls = decode(data.get(1..).unwrap_or(&[]));
    let host_dir = scratch();
    let host = Host(host_dir.path().to_path_buf());
    let last = Arc::new(Mutex::new(Vec::new()));
    let mut disk = SimDisk::from_image(empty_image(mode).to_vec());
    let sink = last.clone();
    disk.on_flush(move |d| *sink.lock().expect("image lock") = d.current().to_vec());
    let mut fs = Fs::mount_store(Box::new(disk), MountOptions::default()).expect("mount");
    for (i, call) in calls.iter().enumerate() {
        let theirs = host.run(*call);
        let ours = on_ulfs(&mut fs, *call);
        assert_eq!(ours, theirs, "call {i} {call:?} (ulfs left, host right)");
    }
    let expected = host.snapshot();
    let seen = snapshot(&mut fs, Budget::default());
    assert_eq!(seen, expected, "trees differ after the calls");
    fs.unmount().expect("unmount");
    let image = std::mem::take(&mut *last.lock().expect("image lock"));
    let disk = SimDisk::from_image(image.clone()).read_only();
    let ro = MountOptions {
        read_only: true,
        ..Default::default()
    };
    let mut fs = Fs::mount_store(Box::new(disk), ro).expect("remount");
    assert_eq!(
        snapshot(&mut fs, Budget::default()),
        expected,
        "trees differ after a remount"
    );
    let report = ulfs::fsck_store(
        Box::new(SimDisk::from_image(image).read_only()),
        &mut FsckOptions::default(),
    )
    .expect("check");
    assert!(report.is_clean(), "{:?}", report.problems);
}

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().expect("a temporary directory")
}

fn data_for(len: usize, byte: u8) -> Vec<u8> {
    (0..len).map(|i| byte.wrapping_add(i as u8)).collect()
}

fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "dir",
        libc::S_IFREG => "file",
        libc::S_IFLNK => "link",
        _ => "other",
    }
}

fn on_ulfs(fs: &mut Fs, call: Call) -> Outcome {
    let p = |i: usize| format!("/{}", PATHS[i]);
    let e = |e: ulfs::Errno| e.raw();
    match call {
        Call::Mkdir(a) => fs.mkdir(p(a), 0o755).map(|()| String::new()).map_err(e),
        Call::Create(a) => {
            let fd = fs
                .open(p(a), libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)
                .map_err(e)?;
            fs.close(fd).map(|()| String::new()).map_err(e)
        }
        Call::Write {
            path,
            off,
            len,
            byte,
        } => {
            let fd = fs.open(p(path), libc::O_WRONLY, 0).map_err(e)?;
            let r = fs.pwrite(fd, &data_for(len, byte), off);
            let _ = fs.close(fd);
            r.map(|n| n.to_string()).map_err(e)
        }
        Call::Read { path, off, len } => {
            let fd = fs.open(p(path), libc::O_RDONLY, 0).map_err(e)?;
            let mut buf = vec![0u8; len];
            let r = fs.pread(fd, &mut buf, off);
            let _ = fs.close(fd);
            r.map(|n| format!("{:?}", &buf[..n])).map_err(e)
        }
        Call::Unlink(a) => fs.unlink(p(a)).map(|()| String::new()).map_err(e),
        Call::Rmdir(a) => fs.rmdir(p(a)).map(|()| String::new()).map_err(e),
        Call::Rename(a, b) => fs.rename(p(a), p(b)).map(|()| String::new()).map_err(e),
        Call::Link(a, b) => fs.link(p(a), p(b)).map(|()| String::new()).map_err(e),
        Call::Symlink { target, path } => fs
            .symlink(PATHS[target], p(path))
            .map(|()| String::new())
            .map_err(e),
        Call::Truncate(a, len) => fs.truncate(p(a), len).map(|()| String::new()).map_err(e),
        Call::Stat(a) => {
            let st = fs.lstat(p(a)).map_err(e)?;
            let size = if st.is_dir() { 0 } else { st.size };
            Ok(format!("{} {size} {}", kind_of(st.mode), st.nlink))
        }
        Call::List(a) => {
            let fd = fs
                .open(p(a), libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(e)?;
            let mut names = Vec::new();
            let mut buf = vec![0u8; 8192];
            let r = loop {
                match fs.getdents64(fd, &mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(n) => {
                        names.extend(ulfs::parse_dirents(&buf[..n]).into_iter().map(|d| d.name))
                    }
                    Err(err) => break Err(e(err)),
                }
            };
            let _ = fs.close(fd);
            r?;
            names.sort();
            Ok(format!("{names:?}"))
        }
    }
}

/// The host directory the calls are compared with.
struct Host(PathBuf);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn done(r: libc::c_int) -> Outcome {
    if r < 0 {
        Err(errno())
    } else {
        Ok(String::new())
    }
}

impl Host {
    fn path(&self, i: usize) -> CString {
        CString::new(self.0.join(PATHS[i]).as_os_str().as_bytes()).expect("no NUL")
    }

    fn run(&self, call: Call) -> Outcome {
        let p = |i| self.path(i);
        // SAFETY: every pointer passed below is a live NUL-terminated path
        // or a buffer of the length given with it; descriptors are opened
        // and closed here.
        unsafe {
            match call {
                Call::Mkdir(a) => done(libc::mkdir(p(a).as_ptr(), 0o755)),
                Call::Create(a) => {
                    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
                    let fd = libc::open(p(a).as_ptr(), flags, 0o644);
                    if fd < 0 {
                        return Err(errno());
                    }
                    done(libc::close(fd))
                }
                Call::Write {
                    path,
                    off,
                    len,
                    byte,
                } => {
                    let fd = libc::open(p(path).as_ptr(), libc::O_WRONLY);
                    if fd < 0 {
                        return Err(errno());
                    }
                    let data = data_for(len, byte);
                    let n = libc::pwrite(fd, data.as_ptr().cast(), len, off as i64);
                    let r = if n < 0 {
                        Err(errno())
                    } else {
                        Ok(n.to_string())
                    };
                    libc::close(fd);
                    r
                }
                Call::Read { path, off, len } => {
                    let fd = libc::open(p(path).as_ptr(), libc::O_RDONLY);
                    if fd < 0 {
                        return Err(errno());
                    }
                    let mut buf = vec![0u8; len];
                    let n = libc::pread(fd, buf.as_mut_ptr().cast(), len, off as i64);
                    let r = if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{:?}", &buf[..n as usize]))
                    };
                    libc::close(fd);
                    r
                }
                Call::Unlink(a) => done(libc::unlink(p(a).as_ptr())),
                Call::Rmdir(a) => done(libc::rmdir(p(a).as_ptr())),
                Call::Rename(a, b) => done(libc::rename(p(a).as_ptr(), p(b).as_ptr())),
                Call::Link(a, b) => done(libc::link(p(a).as_ptr(), p(b).as_ptr())),
                Call::Symlink { target, path } => {
                    let t = CString::new(PATHS[target]).expect("no NUL");
                    done(libc::symlink(t.as_ptr(), p(path).as_ptr()))
                }
                Call::Truncate(a, len) => done(libc::truncate(p(a).as_ptr(), len as i64)),
                Call::Stat(a) => {
                    let mut st: libc::stat = std::mem::zeroed();
                    if libc::lstat(p(a).as_ptr(), &mut st) < 0 {
                        return Err(errno());
                    }
                    let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
                    let size = if dir { 0 } else { st.st_size as u64 };
                    Ok(format!("{} {size} {}", kind_of(st.st_mode), st.st_nlink))
                }
                Call::List(a) => {
                    let dir = libc::opendir(p(a).as_ptr());
                    if dir.is_null() {
                        return Err(errno());
                    }
                    let mut names = Vec::new();
                    loop {
                        let ent = libc::readdir(dir);
                        if ent.is_null() {
                            break;
                        }
                        let name = std::ffi::CStr::from_ptr((*ent).d_name.as_ptr());
                        names.push(name.to_bytes().to_vec());
                    }
                    libc::closedir(dir);
                    names.sort();
                    Ok(format!("{names:?}"))
                }
            }
        }
    }

    /// The host tree in the shape `snapshot` gives for ulfs.
    fn snapshot(&self) -> Snapshot {
        let mut out = Snapshot::new();
        let mut todo = vec![(self.0.clone(), b"/".to_vec())];
        while let Some((dir, shown)) = todo.pop() {
            out.insert(shown.clone(), Shown::Dir);
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .expect("read a host directory")
                .map(|e| e.expect("a host entry"))
                .collect();
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let mut path = shown.clone();
                if path.len() > 1 {
                    path.push(b'/');
                }
                path.extend_from_slice(entry.file_name().as_bytes());
                let full = entry.path();
                let meta = std::fs::symlink_metadata(&full).expect("host metadata");
                if meta.is_dir() {
                    todo.push((full, path));
                } else if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&full).expect("host readlink");
                    out.insert(path, Shown::Link(target.as_os_str().as_bytes().to_vec()));
                } else {
                    let bytes = std::fs::read(&full).expect("host read");
                    let size = bytes.len() as u64;
                    let bytes = bytes[..bytes.len().min(Budget::default().file_bytes)].to_vec();
                    out.insert(path, Shown::File { size, bytes });
                }
            }
        }
        out
    }
}

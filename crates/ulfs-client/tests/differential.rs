//! Several clients of one server at once, against the same calls made on
//! tmpfs by as many threads of the host (issue 12, requirement 6). Each
//! client works in its own directory (seeded random calls: creates,
//! writes, truncates, renames, links, symlinks, removals, reads, stats),
//! so every answer is deterministic and must equal the host's; and all of
//! them write their own ranges of one shared file and append fixed-size
//! tagged records to one shared log, so the end state is deterministic
//! too: the same shared file, the same multiset of whole records. At the
//! end the image, mounted again after the server stopped, shows the same
//! tree as the host directory, and fsck finds it clean.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use ulfs::fs::Volume;
use ulfs::{Errno, MkfsOptions, Mode, MountOptions};
use ulfs_client::Client;
use ulfs_server::{Config, Server};
use ulfs_testkit::rng::Rng;
use ulfs_testkit::snapshot::{Budget, Shown, snapshot_host, snapshot_image};

const CLIENTS: usize = 3;
const OPS: usize = 1000;
const RECORD: usize = 64;
const STRIPE: u64 = 512;

/// One side's calls, by path from its root.
trait Side {
    fn call(&mut self, op: &Op) -> String;
}

#[derive(Debug, Clone)]
enum Op {
    Create(String, u32),
    Pwrite(String, u64, Vec<u8>),
    Append(String, Vec<u8>),
    Truncate(String, u64),
    Read(String),
    Stat(String),
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, String),
    Readlink(String),
}

fn random_op(rng: &mut Rng, me: usize, seq: usize) -> Op {
    let name = |rng: &mut Rng| {
        let names = [
            "f0", "f1", "f2", "f3", "d0", "d1", "d0/f0", "d0/f1", "d1/d2", "d1/d2/f",
        ];
        format!("/c{me}/{}", names[rng.below(names.len() as u64) as usize])
    };
    let bytes = |rng: &mut Rng, seq: usize| {
        let len = rng.below(3000) as usize;
        (0..len)
            .map(|i| (i + seq * 7 + me) as u8)
            .collect::<Vec<u8>>()
    };
    match rng.below(14) {
        0 => Op::Create(name(rng), [0o644, 0o600, 0o755][rng.below(3) as usize]),
        1 | 2 => Op::Pwrite(name(rng), rng.below(20_000), bytes(rng, seq)),
        3 => Op::Append(name(rng), bytes(rng, seq)),
        4 => Op::Truncate(name(rng), rng.below(30_000)),
        5 => Op::Read(name(rng)),
        6 => Op::Stat(name(rng)),
        7 => Op::Unlink(name(rng)),
        8 => Op::Mkdir(name(rng)),
        9 => Op::Rmdir(name(rng)),
        10 => Op::Rename(name(rng), name(rng)),
        11 => Op::Link(name(rng), name(rng)),
        12 => Op::Symlink(format!("t{}", rng.below(3)), name(rng)),
        _ => Op::Readlink(name(rng)),
    }
}

fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn show<T: std::fmt::Debug>(r: Result<T, Errno>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => e.name().unwrap_or("E?").to_string(),
    }
}

impl Side for Client {
    fn call(&mut self, op: &Op) -> String {
        let c = self;
        match op {
            Op::Create(p, mode) => show(
                c.open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, *mode)
                    .and_then(|fd| c.close(fd)),
            ),
            Op::Pwrite(p, off, data) => show(c.open(p, libc::O_WRONLY, 0).and_then(|fd| {
                let n = c.pwrite(fd, data, *off)?;
                c.close(fd)?;
                Ok(n)
            })),
            Op::Append(p, data) => show(c.open(p, libc::O_WRONLY | libc::O_APPEND, 0).and_then(
                |fd| {
                    let n = c.write(fd, data)?;
                    c.close(fd)?;
                    Ok(n)
                },
            )),
            Op::Truncate(p, len) => show(c.truncate(p, *len)),
            Op::Read(p) => show(c.open(p, libc::O_RDONLY, 0).and_then(|fd| {
                let mut buf = vec![0u8; 64 << 10];
                let n = c.read(fd, &mut buf)?;
                c.close(fd)?;
                Ok((n, hash(&buf[..n])))
            })),
            Op::Stat(p) => show(
                c.lstat(p)
                    .map(|st| (st.size * u64::from(!st.is_dir()), st.mode, st.nlink)),
            ),
            Op::Unlink(p) => show(c.unlink(p)),
            Op::Mkdir(p) => show(c.mkdir(p, 0o755)),
            Op::Rmdir(p) => show(c.rmdir(p)),
            Op::Rename(a, b) => show(c.rename(a, b)),
            Op::Link(a, b) => show(c.link(a, b)),
            Op::Symlink(t, p) => show(c.symlink(t, p)),
            Op::Readlink(p) => show(c.readlink(p)),
        }
    }
}

/// The host side: the same calls under a tmpfs directory.
struct Host(PathBuf);

fn cpath(root: &Path, p: &str) -> CString {
    CString::new(root.join(&p[1..]).as_os_str().as_bytes()).unwrap()
}

fn sys<T: PartialOrd + Default>(r: T) -> Result<T, Errno> {
    if r < T::default() {
        Err(Errno(
            std::io::Error::last_os_error().raw_os_error().unwrap(),
        ))
    } else {
        Ok(r)
    }
}

impl Side for Host {
    fn call(&mut self, op: &Op) -> String {
        let r = &self.0;
        // SAFETY (all blocks below): plain system calls on C strings made
        // here and buffers of the stated sizes.
        unsafe {
            let open =
                |p: &str, flags: i32, mode: u32| sys(libc::open(cpath(r, p).as_ptr(), flags, mode));
            match op {
                Op::Create(p, mode) => show(
                    open(p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, *mode).map(|fd| {
                        libc::close(fd);
                    }),
                ),
                Op::Pwrite(p, off, data) => show(open(p, libc::O_WRONLY, 0).and_then(|fd| {
                    let n = sys(libc::pwrite(
                        fd,
                        data.as_ptr().cast(),
                        data.len(),
                        *off as i64,
                    ));
                    libc::close(fd);
                    n.map(|n| n as usize)
                })),
                Op::Append(p, data) => {
                    show(open(p, libc::O_WRONLY | libc::O_APPEND, 0).and_then(|fd| {
                        let n = sys(libc::write(fd, data.as_ptr().cast(), data.len()));
                        libc::close(fd);
                        n.map(|n| n as usize)
                    }))
                }
                Op::Truncate(p, len) => {
                    show(sys(libc::truncate(cpath(r, p).as_ptr(), *len as i64)).map(drop))
                }
                Op::Read(p) => show(open(p, libc::O_RDONLY, 0).and_then(|fd| {
                    let mut buf = vec![0u8; 64 << 10];
                    let n = sys(libc::read(fd, buf.as_mut_ptr().cast(), buf.len()));
                    libc::close(fd);
                    let n = n? as usize;
                    Ok((n, hash(&buf[..n])))
                })),
                Op::Stat(p) => {
                    let mut st: libc::stat = std::mem::zeroed();
                    show(sys(libc::lstat(cpath(r, p).as_ptr(), &mut st)).map(|_| {
                        let dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
                        (
                            st.st_size as u64 * u64::from(!dir),
                            st.st_mode,
                            st.st_nlink as u32,
                        )
                    }))
                }
                Op::Unlink(p) => show(sys(libc::unlink(cpath(r, p).as_ptr())).map(drop)),
                Op::Mkdir(p) => show(sys(libc::mkdir(cpath(r, p).as_ptr(), 0o755)).map(drop)),
                Op::Rmdir(p) => show(sys(libc::rmdir(cpath(r, p).as_ptr())).map(drop)),
                Op::Rename(a, b) => {
                    show(sys(libc::rename(cpath(r, a).as_ptr(), cpath(r, b).as_ptr())).map(drop))
                }
                Op::Link(a, b) => {
                    show(sys(libc::link(cpath(r, a).as_ptr(), cpath(r, b).as_ptr())).map(drop))
                }
                Op::Symlink(t, p) => {
                    let t = CString::new(t.as_str()).unwrap();
                    show(sys(libc::symlink(t.as_ptr(), cpath(r, p).as_ptr())).map(drop))
                }
                Op::Readlink(p) => {
                    let mut buf = [0u8; 4096];
                    show(
                        sys(libc::readlink(
                            cpath(r, p).as_ptr(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                        ))
                        .map(|n| buf[..n as usize].to_vec()),
                    )
                }
            }
        }
    }
}

/// Client `me`'s whole run: its own calls, each followed by a stripe of
/// the shared file and a record of the log. Its answers, in order.
fn run_client(side: &mut dyn Side, me: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed + me as u64);
    let mut answers = vec![side.call(&Op::Mkdir(format!("/c{me}")))];
    for seq in 0..OPS {
        let op = random_op(&mut rng, me, seq);
        answers.push(format!("{op:?} -> {}", side.call(&op)));
        if seq % 4 == 0 {
            // The stripes of the shared file are this client's alone.
            let k = (seq / 4) as u64;
            let off = (k * CLIENTS as u64 + me as u64) * STRIPE;
            let stripe = vec![(me * 31 + seq) as u8; STRIPE as usize];
            answers.push(side.call(&Op::Pwrite("/shared".into(), off, stripe)));
            let mut record = format!("client {me} record {seq}").into_bytes();
            record.resize(RECORD, b'.');
            answers.push(side.call(&Op::Append("/log".into(), record)));
        }
    }
    answers
}

#[test]
fn clients_at_once_agree_with_the_host_on_tmpfs() {
    let seed = std::env::var("ULFS_SEED").map_or(0x5eed, |s| s.parse().unwrap());
    // SAFETY: umask has no preconditions; both sides create with 022.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs::mkfs(
        &img,
        &MkfsOptions {
            size: 128 << 20,
            mode: Mode::Journal,
            ..Default::default()
        },
    )
    .unwrap();
    let socket = dir.path().join("sock");
    let mut cfg = Config::new(&socket);
    cfg.workers = 2;
    let server = Server::start(Volume::mount(&img, MountOptions::default()).unwrap(), cfg).unwrap();
    let host = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut setup_image = Client::connect(&socket).unwrap();
    let mut setup_host = Host(host.path().to_path_buf());
    for side in [&mut setup_image as &mut dyn Side, &mut setup_host] {
        assert_eq!(side.call(&Op::Create("/shared".into(), 0o666)), "ok ()");
        assert_eq!(side.call(&Op::Create("/log".into(), 0o666)), "ok ()");
    }
    let (image_answers, host_answers) = std::thread::scope(|s| {
        let image: Vec<_> = (0..CLIENTS)
            .map(|me| {
                let socket = &socket;
                s.spawn(move || run_client(&mut Client::connect(socket).unwrap(), me, seed))
            })
            .collect();
        let hosts: Vec<_> = (0..CLIENTS)
            .map(|me| {
                let root = host.path().to_path_buf();
                s.spawn(move || run_client(&mut Host(root), me, seed))
            })
            .collect();
        (
            image
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>(),
            hosts
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>(),
        )
    });
    for me in 0..CLIENTS {
        for (i, (a, b)) in image_answers[me].iter().zip(&host_answers[me]).enumerate() {
            assert_eq!(a, b, "client {me}, call {i} (seed {seed})");
        }
    }
    drop(setup_image);
    server.stopper().stop();
    server.join().unwrap();
    let report = ulfs::fsck(&img, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{report:?}");

    // Mounted again: the same tree as the host's, but for the log's order.
    let mut on_image = snapshot_image(&img, Budget::default()).unwrap();
    let mut on_host = snapshot_host(host.path());
    let records = |shown: Option<Shown>| -> Vec<Vec<u8>> {
        let Some(Shown::File { bytes, .. }) = shown else {
            panic!("no log");
        };
        assert_eq!(bytes.len() % RECORD, 0, "a torn record");
        let mut r: Vec<Vec<u8>> = bytes.chunks(RECORD).map(<[u8]>::to_vec).collect();
        r.sort();
        r
    };
    let (image_log, host_log) = (
        records(on_image.remove(b"/log".as_slice())),
        records(on_host.remove(b"/log".as_slice())),
    );
    assert_eq!(image_log.len(), CLIENTS * OPS.div_ceil(4));
    assert_eq!(image_log, host_log);
    let differ: Vec<_> = on_host
        .iter()
        .filter(|(p, s)| on_image.get(*p) != Some(*s))
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .chain(
            on_image
                .keys()
                .filter(|p| !on_host.contains_key(*p))
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        )
        .collect();
    assert!(differ.is_empty(), "image and host differ at {differ:?}");
}

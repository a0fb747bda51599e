//! `ulfs-bench-preload`: unmodified programs under `ulfs run` against the
//! same programs on host file systems, in one run, as ratios
//! (docs/BENCHMARKS.md, "Programs under ulfs run").
//!
//! - A C program's per-call cost (`c/calls.c`, compiled here with `cc`):
//!   lseek, fstat, open+close of an existing file, 4 KiB pread; on tmpfs
//!   and under `ulfs run` (the same binary).
//! - sqlite3: 10,000 inserts in one transaction into a new database, then
//!   a count; on tmpfs, on ext4 (the host disk's /tmp, checked) and under
//!   `ulfs run`.
//! - PostMark: 2,000 files and 10,000 transactions; the same three.
//! - A shell script: 200 commands appending to one file (each a fork and
//!   exec, which under `ulfs run` hands the image and the open file over
//!   twice), then pipelines whose every stage uses the image (they take
//!   turns on it); the same three.
//!
//! Peers take turns (one round of each, `ROUNDS` rounds) and each value
//! is the median; the ratio is ulfs / peer, below 1 meaning ulfs is
//! faster. Needs `cc`, `sqlite3` and `postmark`, and the `ulfs` binary
//! and `libulfs_preload.so` built next to this one (`cargo build
//! --release`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const ROUNDS: usize = 5;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("ulfs-bench-preload: {e}");
        std::process::exit(1);
    }
}

#[derive(Clone, Copy)]
enum Prog {
    Sqlite,
    Postmark,
    Shell,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `ulfs` binary next to this one.
fn ulfs_bin() -> Res<PathBuf> {
    let me = std::env::current_exe()?;
    let u = me.with_file_name("ulfs");
    if !u.is_file() || !me.with_file_name("libulfs_preload.so").is_file() {
        return Err(format!(
            "{} or libulfs_preload.so is missing: cargo build --release first",
            u.display()
        )
        .into());
    }
    Ok(u)
}

fn check(out: std::process::Output, what: &str) -> Res<String> {
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where a command runs: directly in a host directory, or under
/// `ulfs run` with the image's /ulfs.
enum Place<'a> {
    Host(&'a Path),
    Image(&'a Path, &'a Path),
}

impl Place<'_> {
    fn dir(&self) -> PathBuf {
        match self {
            Place::Host(d) => d.to_path_buf(),
            Place::Image(..) => PathBuf::from("/ulfs"),
        }
    }
    fn command(&self, program: &Path) -> Command {
        match self {
            Place::Host(_) => Command::new(program),
            Place::Image(ulfs, img) => {
                let mut c = Command::new(ulfs);
                c.arg("run").arg(img).arg("--").arg(program);
                c
            }
        }
    }
}

fn fresh_image(ulfs: &Path, dir: &Path, name: &str, size: &str) -> Res<PathBuf> {
    let img = dir.join(name);
    let _ = std::fs::remove_file(&img);
    check(
        Command::new(ulfs)
            .arg("mkfs")
            .arg(&img)
            .arg(size)
            .output()?,
        "mkfs",
    )?;
    Ok(img)
}

fn which(name: &str) -> Res<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if p.is_empty() {
        return Err(format!("{name} is not installed").into());
    }
    Ok(PathBuf::from(p))
}

fn run() -> Res<()> {
    let ulfs = ulfs_bin()?;
    let work = tempfile::tempdir_in("/dev/shm")?;
    let disk = tempfile::tempdir()?;
    let shm = work.path().join("tmpfs");
    let ext4 = disk.path().join("ext4");
    std::fs::create_dir(&shm)?;
    std::fs::create_dir(&ext4)?;
    println!(
        "peers: tmpfs {} ({}), ext4 {} ({}); images on tmpfs; {ROUNDS} rounds, medians",
        shm.display(),
        fs_name(&shm),
        ext4.display(),
        fs_name(&ext4)
    );

    // The C program's calls.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/calls.c");
    let bin = work.path().join("calls");
    check(
        Command::new("cc")
            .arg("-O2")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()?,
        "cc",
    )?;
    let img = fresh_image(&ulfs, work.path(), "calls.img", "64M")?;
    let calls = ["lseek", "fstat", "open+close", "pread-4k"];
    let mut host_ns: Vec<Vec<f64>> = vec![Vec::new(); calls.len()];
    let mut ulfs_ns: Vec<Vec<f64>> = vec![Vec::new(); calls.len()];
    for _ in 0..ROUNDS {
        for (place, into) in [
            (Place::Host(&shm), &mut host_ns),
            (Place::Image(&ulfs, &img), &mut ulfs_ns),
        ] {
            let out = check(
                place
                    .command(&bin)
                    .arg(place.dir())
                    .arg("200000")
                    .output()?,
                "calls",
            )?;
            for line in out.lines() {
                let mut w = line.split_whitespace();
                let (Some(name), Some(ns)) = (w.next(), w.next()) else {
                    continue;
                };
                if let Some(i) = calls.iter().position(|c| *c == name) {
                    into[i].push(ns.parse()?);
                }
            }
        }
    }
    println!("\n| C program, per call | tmpfs | ulfs run | ratio |");
    println!("|---|---:|---:|---:|");
    for (i, name) in calls.iter().enumerate() {
        let (h, u) = (median(host_ns[i].clone()), median(ulfs_ns[i].clone()));
        println!("| {name} | {h:.0} ns | {u:.0} ns | {:.2}x |", u / h);
    }

    // sqlite3 and PostMark: wall time of the whole program.
    let sqlite = which("sqlite3")?;
    let postmark = which("postmark")?;
    let sql = work.path().join("inserts.sql");
    let mut text =
        String::from("begin;\ncreate table t(id integer primary key, name text, n integer);\n");
    for i in 0..10_000 {
        text.push_str(&format!(
            "insert into t(name, n) values('name {i}', {});\n",
            i * 7 % 1000
        ));
    }
    text.push_str("commit;\nselect count(*) from t;\n");
    std::fs::write(&sql, text)?;
    let pm_cfg = |dir: &Path| {
        format!(
            "set location {}\nset number 2000\nset transactions 10000\nrun\nquit\n",
            dir.display()
        )
    };
    let shell = "set -e; cd \"$1\"; for i in $(seq 200); do ls / >> log; done; \
                 seq 1 100000 > nums; cat nums | sort -n -r > sorted; \
                 sort -n sorted | uniq | tail -n 1 > last; grep 7 nums | tee sevens | wc -l > count";
    let mut rows = Vec::new();
    for (name, kind) in [
        ("sqlite3: 10,000 inserts", Prog::Sqlite),
        ("postmark: 2,000 files, 10,000 transactions", Prog::Postmark),
        ("sh: 200 commands >> a file, 3 pipelines", Prog::Shell),
    ] {
        let mut t = [Vec::new(), Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            let img = fresh_image(&ulfs, work.path(), "prog.img", "256M")?;
            let places = [
                Place::Host(&shm),
                Place::Host(&ext4),
                Place::Image(&ulfs, &img),
            ];
            for (k, place) in places.iter().enumerate() {
                let dir = place.dir();
                let elapsed = if let Prog::Shell = kind {
                    let target = dir.join(format!("sh{round}"));
                    if let Place::Host(_) = place {
                        std::fs::create_dir_all(&target)?;
                    }
                    let make = format!("mkdir -p \"$1\"; {shell}");
                    let start = Instant::now();
                    let out = place
                        .command(Path::new("/bin/sh"))
                        .args(["-c", &make, "sh"])
                        .arg(&target)
                        .output()?;
                    let elapsed = start.elapsed();
                    check(out, "sh")?;
                    elapsed
                } else if let Prog::Postmark = kind {
                    let cfg = work.path().join(format!("pm-{round}-{k}.cfg"));
                    let target = dir.join(format!("pm{round}"));
                    std::fs::write(&cfg, pm_cfg(&target))?;
                    if let Place::Host(_) = place {
                        std::fs::create_dir_all(&target)?;
                    }
                    let mut c = match place {
                        Place::Host(_) => Command::new(&postmark),
                        Place::Image(u, i) => {
                            let mut c = Command::new(u);
                            c.arg("run")
                                .arg(i)
                                .arg("--")
                                .arg("sh")
                                .arg("-c")
                                .arg(format!(
                                    "mkdir -p {} && exec {} {}",
                                    target.display(),
                                    postmark.display(),
                                    cfg.display()
                                ));
                            c
                        }
                    };
                    if let Place::Host(_) = place {
                        c.arg(&cfg);
                    }
                    let start = Instant::now();
                    check(c.stdout(Stdio::null()).output()?, "postmark")?;
                    start.elapsed()
                } else {
                    let db = dir.join(format!("bench-{round}.db"));
                    let start = Instant::now();
                    let out = place
                        .command(&sqlite)
                        .arg(&db)
                        .stdin(std::fs::File::open(&sql)?)
                        .output()?;
                    let elapsed = start.elapsed();
                    check(out, "sqlite3")?;
                    elapsed
                };
                t[k].push(elapsed.as_secs_f64() * 1e3);
            }
        }
        rows.push((
            name,
            median(t[0].clone()),
            median(t[1].clone()),
            median(t[2].clone()),
        ));
    }
    println!("\n| program, wall time | tmpfs | ext4 | ulfs run | ratio to tmpfs | ratio to ext4 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, shm, ext4, u) in rows {
        println!(
            "| {name} | {shm:.1} ms | {ext4:.1} ms | {u:.1} ms | {:.2}x | {:.2}x |",
            u / shm,
            u / ext4
        );
    }
    Ok(())
}

/// The file system a directory is on, by statfs magic.
fn fs_name(p: &Path) -> &'static str {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
    // SAFETY: zeroed memory is a valid statfs; a NUL-terminated path.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return "unknown";
    }
    match s.f_type {
        libc::TMPFS_MAGIC => "tmpfs",
        libc::EXT4_SUPER_MAGIC => "ext4",
        _ => "other",
    }
}

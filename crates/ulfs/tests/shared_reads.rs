//! The calls a server runs with the volume shared (`SharedCtx`) answer as
//! the same calls of `Ctx` do, defer exactly the access times `Ctx` would
//! have written, and run in threads beside a writer without tearing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use ulfs::fs::{SharedVolume, Volume};
use ulfs::posix::{Ctx, Deferred, Process, SharedCtx};
use ulfs::{Identity, Mode, MountOptions};

fn volume() -> (tempfile::TempDir, Volume) {
    let (dir, img) = common::image_in(32 << 20, Mode::Journal);
    let vol = Volume::mount(&img, MountOptions::default()).unwrap();
    (dir, vol)
}

#[test]
fn shared_reads_and_stats_answer_as_the_exclusive_calls() {
    let (_dir, mut vol) = volume();
    let mut proc = Process::new(&mut vol, Identity::Host);
    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut proc,
    };
    let fd = ctx.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    // A write through the descriptor leaves the new size in the open
    // inode only; the shared read must see it.
    ctx.write(fd, &[7u8; 10_000]).unwrap();
    ctx.symlink("f", "/link").unwrap();
    ctx.lseek(fd, 0, libc::SEEK_SET).unwrap();
    // The read first: it may move the atime (relatime, when a clock tick
    // passed since the write), which the stats below then show.
    let mut exclusive = vec![0u8; 4096];
    let n_ex = ctx.pread(fd, &mut exclusive, 8_000).unwrap();
    let want_stat = ctx.fstat(fd).unwrap();
    let want_at = ctx.fstatat(libc::AT_FDCWD, "/link", 0).unwrap();
    let want_x = ctx.statx(libc::AT_FDCWD, "/f", 0, libc::STATX_ALL).unwrap();
    let err = ctx.fstatat(libc::AT_FDCWD, "/nothing", 0).unwrap_err();

    let mut later = Deferred::default();
    let mut shared = SharedCtx {
        vol: &vol,
        proc: &mut proc,
    };
    assert_eq!(shared.fstat(fd).unwrap(), want_stat);
    assert_eq!(
        shared
            .fstatat(libc::AT_FDCWD, "/link", 0, &mut later)
            .unwrap(),
        want_at
    );
    let x = shared
        .statx(libc::AT_FDCWD, "/f", 0, libc::STATX_ALL, &mut later)
        .unwrap();
    assert_eq!((x.mask, x.stat), (want_x.mask, want_x.stat));
    assert_eq!(
        shared.fstatat(libc::AT_FDCWD, "/nothing", 0, &mut later),
        Err(err)
    );
    let mut buf = vec![0u8; 4096];
    assert_eq!(shared.pread(fd, &mut buf, 8_000, &mut later).unwrap(), n_ex);
    assert_eq!(buf[..n_ex], exclusive[..n_ex]);
    // read moves the descriptor's offset, as Ctx::read does.
    assert_eq!(shared.read(fd, &mut buf, &mut later).unwrap(), 4096);
    assert_eq!(shared.read(fd, &mut buf, &mut later).unwrap(), 4096);
    assert_eq!(
        shared.read(fd, &mut buf, &mut later).unwrap(),
        10_000 - 8192
    );
    assert_eq!(shared.read(fd, &mut buf, &mut later).unwrap(), 0);
    // Errors as the exclusive calls give them.
    let mut dir_buf = [0u8; 8];
    let dfd = Ctx {
        vol: &mut vol,
        proc: &mut proc,
    }
    .open("/", libc::O_RDONLY, 0)
    .unwrap();
    let mut shared = SharedCtx {
        vol: &vol,
        proc: &mut proc,
    };
    assert_eq!(
        shared.read(dfd, &mut dir_buf, &mut later),
        Err(ulfs::Errno::EISDIR)
    );
    assert_eq!(
        shared.pread(99, &mut dir_buf, 0, &mut later),
        Err(ulfs::Errno::EBADF)
    );
    assert_eq!(
        shared.pread(fd, &mut dir_buf, u64::MAX - 2, &mut later),
        Err(ulfs::Errno::EINVAL)
    );
}

#[test]
fn access_times_are_deferred_when_due_and_only_then() {
    let (_dir, mut vol) = volume();
    let mut proc = Process::new(&mut vol, Identity::Host);
    let fd = {
        let mut ctx = Ctx {
            vol: &mut vol,
            proc: &mut proc,
        };
        let fd = ctx.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        ctx.write(fd, b"hello").unwrap();
        ctx.symlink("f", "/link").unwrap();
        fd
    };
    // relatime: the first read after a change is due. Let the clock move
    // past the change's tick, or atime would equal mtime already.
    std::thread::sleep(std::time::Duration::from_millis(25));
    let before = SharedCtx {
        vol: &vol,
        proc: &mut proc,
    }
    .fstat(fd)
    .unwrap();
    let mut later = Deferred::default();
    let mut buf = [0u8; 5];
    SharedCtx {
        vol: &vol,
        proc: &mut proc,
    }
    .pread(fd, &mut buf, 0, &mut later)
    .unwrap();
    assert!(!later.is_empty(), "a due atime was not deferred");
    // Deferred, not written: the volume is unchanged until applied.
    let unchanged = vol.stat_ino(before.ino).unwrap();
    assert_eq!(unchanged.atime, before.atime);
    later.apply(&mut vol);
    assert!(later.is_empty());
    let after = vol.stat_ino(before.ino).unwrap();
    assert!(after.atime > before.atime, "{after:?} vs {before:?}");
    // Read again: no longer due, nothing deferred.
    SharedCtx {
        vol: &vol,
        proc: &mut proc,
    }
    .pread(fd, &mut buf, 0, &mut later)
    .unwrap();
    assert!(later.is_empty());
    // A symlink followed by a stat is an access of the link.
    let link = vol
        .stat_ino(vol.lookup(vol.root(), b"link").unwrap())
        .unwrap();
    SharedCtx {
        vol: &vol,
        proc: &mut proc,
    }
    .fstatat(libc::AT_FDCWD, "/link", 0, &mut later)
    .unwrap();
    later.apply(&mut vol);
    assert!(vol.stat_ino(link.ino).unwrap().atime > link.atime);
}

/// Readers in threads, each with its own process, read under the shared
/// lock while a writer appends records under the exclusive one: every
/// read sees whole records, and in the end all of them.
#[test]
fn readers_share_the_volume_while_a_writer_writes() {
    const RECORD: usize = 512;
    const RECORDS: usize = 2_000;
    let (_dir, mut vol) = volume();
    let mut writer = Process::new(&mut vol, Identity::Host);
    let fd = Ctx {
        vol: &mut vol,
        proc: &mut writer,
    }
    .open(
        "/log",
        libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND,
        0o644,
    )
    .unwrap();
    let readers: Vec<Process> = (0..2)
        .map(|_| Process::new(&mut vol, Identity::Host))
        .collect();
    let shared = SharedVolume::new(vol);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for mut proc in readers {
            let (shared, done) = (&shared, &done);
            s.spawn(move || {
                let rfd = shared
                    .exclusive(|vol| {
                        Ctx {
                            vol,
                            proc: &mut proc,
                        }
                        .open("/log", libc::O_RDONLY, 0)
                    })
                    .unwrap();
                let mut buf = vec![0u8; 64 * RECORD];
                let mut seen = 0;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let mut later = Deferred::default();
                    let n = shared
                        .shared(|vol| {
                            SharedCtx {
                                vol,
                                proc: &mut proc,
                            }
                            .pread(rfd, &mut buf, 0, &mut later)
                        })
                        .unwrap();
                    assert_eq!(n % RECORD, 0, "a torn record");
                    for (i, rec) in buf[..n].chunks(RECORD).enumerate() {
                        assert!(rec.iter().all(|&b| b == (i % 251) as u8), "record {i}");
                    }
                    seen = seen.max(n);
                    if !later.is_empty() {
                        shared
                            .exclusive(|vol| {
                                later.apply(vol);
                                Ok(())
                            })
                            .unwrap();
                    }
                    if finished {
                        break;
                    }
                }
                assert_eq!(seen, (64 * RECORD).min(RECORDS * RECORD));
            });
        }
        for i in 0..RECORDS {
            let rec = [(i % 251) as u8; RECORD];
            shared
                .exclusive(|vol| {
                    Ctx {
                        vol,
                        proc: &mut writer,
                    }
                    .write(fd, &rec)
                })
                .unwrap();
        }
        done.store(true, Ordering::Release);
    });
    let size = shared
        .shared(|vol| Ok(vol.stat_ino(vol.lookup(vol.root(), b"log")?)?.size))
        .unwrap();
    assert_eq!(size, (RECORD * RECORDS) as u64);
    assert!(shared.unmount(|_| {}).unwrap().is_ok());
}

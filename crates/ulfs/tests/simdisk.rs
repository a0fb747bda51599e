//! The whole stack runs on the simulated disk, and what `sync` promises is
//! visible there: after it, the durable image alone holds every change.

use ulfs::store::{BlockStore, Fate, SimDisk};
use ulfs::{Fs, MountOptions, format_store};

fn formatted(blocks: u64) -> Box<dyn BlockStore> {
    format_store(
        Box::new(SimDisk::new(blocks)),
        &ulfs::MkfsOptions::default(),
    )
    .unwrap()
}

#[test]
fn sync_makes_everything_durable() {
    let mut fs = Fs::mount_store(formatted(1024), MountOptions::default()).unwrap();
    fs.mkdir("/d", 0o755).unwrap();
    let fd = fs
        .open("/d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    fs.write(fd, &[7u8; 10_000]).unwrap();
    assert!(fs.sim_disk().unwrap().unflushed().count() > 0);
    fs.fsync(fd).unwrap();
    let disk = fs.sim_disk().unwrap();
    // Journal mode: after the commit record, shadows are installed at home
    // (dirty, not yet flushed); the journal is what makes them durable.
    // A power cut now, losing every unflushed write, loses nothing.
    let image = disk.crash_image(|_| Fate::Lost);
    let mut after = Fs::mount_store(
        Box::new(SimDisk::from_image(image)),
        MountOptions::default(),
    )
    .unwrap();
    assert_eq!(after.stat("/d/f").unwrap().size, 10_000);
    let mut buf = [0u8; 10];
    let fd = after.open("/d/f", libc::O_RDONLY, 0).unwrap();
    after.pread(fd, &mut buf, 9_990).unwrap();
    assert_eq!(buf, [7u8; 10]);
}

/// The time bound holds for an idle program too: with a committer thread,
/// a write followed by no call at all becomes durable within the interval.
#[test]
fn idle_program_commits_within_the_interval() {
    let opts = MountOptions {
        commit_interval: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    let fs = ulfs::SharedFs::new(Fs::mount_store(formatted(1024), opts).unwrap());
    let committer = fs.spawn_committer(std::time::Duration::from_millis(20));
    {
        let mut g = fs.lock();
        let fd = g
            .open("/idle", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .unwrap();
        g.write(fd, b"no fsync").unwrap();
        g.close(fd).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    let image = fs.lock().sim_disk().unwrap().crash_image(|_| Fate::Lost);
    let mut after = Fs::mount_store(
        Box::new(SimDisk::from_image(image)),
        MountOptions::default(),
    )
    .unwrap();
    assert_eq!(
        after.stat("/idle").unwrap().size,
        8,
        "committed by the committer thread"
    );
    drop(fs);
    committer.join().unwrap();
}

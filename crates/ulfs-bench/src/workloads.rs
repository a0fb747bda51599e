//! The timed bodies of the workloads: BENCHMARKS.md figs 11, 12, 6 and 7,
//! and the file-systems-as-processes fsync loop.
//! Each function performs one repetition and returns only the time of the
//! part being measured; setup and checking around it stay untimed.
//!
//! Results pass through `black_box` so the compiler cannot drop calls whose
//! results are unused, nor hoist a pure-looking ulfs call out of the loop.

use crate::peers::Peer;
use crate::rng::SplitMix64;
use std::hint::black_box;
use std::io;
use std::time::{Duration, Instant};

/// Fig 11: `lseek(fd, 0, SEEK_SET)` on an empty file, `n` times.
pub fn lseek<P: Peer>(p: &mut P, fd: i32, n: u64) -> io::Result<Duration> {
    let t = Instant::now();
    for _ in 0..n {
        black_box(p.rewind(black_box(fd))?);
    }
    Ok(t.elapsed())
}

/// Fig 12: `fstat` on one file, `n` times, using only `st_ino`.
pub fn fstat<P: Peer>(p: &mut P, fd: i32, n: u64) -> io::Result<Duration> {
    let t = Instant::now();
    for _ in 0..n {
        black_box(p.ino(black_box(fd))?);
    }
    Ok(t.elapsed())
}

/// Total data of one read-after-write repetition. 1 MiB rather than the
/// paper's "1 MB" so that every chunk size divides it.
pub const RAW_BYTES: usize = 1 << 20;

/// Fig 6's fixed inputs for one chunk size: the bytes to write and the
/// shuffled chunk offsets, shared by all peers so they do identical work.
pub struct RawPlan {
    pub chunk: usize,
    pub offsets: Vec<usize>,
    pub src: Vec<u8>,
}

impl RawPlan {
    pub fn new(chunk: usize, seed: u64) -> Self {
        assert!(chunk > 0 && RAW_BYTES.is_multiple_of(chunk));
        let mut rng = SplitMix64::new(seed ^ chunk as u64);
        let mut offsets: Vec<usize> = (0..RAW_BYTES / chunk).map(|i| i * chunk).collect();
        rng.shuffle(&mut offsets);
        let mut src = vec![0u8; RAW_BYTES];
        rng.fill(&mut src);
        RawPlan {
            chunk,
            offsets,
            src,
        }
    }

    /// One "op" is one chunk: a write plus the read of the same range.
    pub fn ops(&self) -> u64 {
        self.offsets.len() as u64
    }
}

/// Fig 6: into a fresh file, for each chunk in random order a `pwrite` and
/// then a `pread` of the same range. Creating and removing the file is not
/// timed (the figure is about data movement); the bytes read back are
/// checked after the clock stops, so a wrong answer cannot pass as fast.
pub fn read_after_write<P: Peer>(
    p: &mut P,
    plan: &RawPlan,
    dst: &mut [u8],
) -> io::Result<Duration> {
    const NAME: &str = "raw";
    dst.fill(0);
    let fd = p.create(NAME)?;
    let c = plan.chunk;
    let t = Instant::now();
    for &off in &plan.offsets {
        let w = p.pwrite(fd, &plan.src[off..off + c], off as u64)?;
        let r = p.pread(fd, &mut dst[off..off + c], off as u64)?;
        if w != c || r != c {
            return Err(io::Error::other(format!(
                "short transfer at offset {off}: wrote {w}, read {r} of {c} bytes"
            )));
        }
    }
    let d = t.elapsed();
    black_box(&mut *dst);
    p.close(fd)?;
    p.unlink(NAME)?;
    if dst != plan.src.as_slice() {
        let at = dst.iter().zip(&plan.src).position(|(a, b)| a != b);
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("read-after-write returned other bytes (first at {at:?}, chunk {c})"),
        ));
    }
    Ok(d)
}

/// The physical limit for fig 6: the same two copies per chunk (into the
/// "file", back out of it) done by memcpy on memory that is already mapped
/// and reused across repetitions, so no allocation or page fault is counted.
pub fn memcpy(plan: &RawPlan, file: &mut [u8], dst: &mut [u8]) -> Duration {
    let c = plan.chunk;
    let t = Instant::now();
    for &off in &plan.offsets {
        file[off..off + c].copy_from_slice(&plan.src[off..off + c]);
        // Escaping the pointer makes the compiler assume unknown code reads
        // the "file" here, so it cannot fuse the two copies into one.
        black_box(file.as_mut_ptr());
        dst[off..off + c].copy_from_slice(&file[off..off + c]);
    }
    let d = t.elapsed();
    black_box(&mut *dst);
    d
}

/// Size of each file in the file-count workload: the paper's "1 MB", as a
/// MiB like [`RAW_BYTES`].
pub const FILE_BYTES: usize = 1 << 20;

/// Names `prefix-0` .. `prefix-(n-1)`, made before the clock starts.
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Fig 7: `names.len()` files of [`FILE_BYTES`] each, every file written
/// by one `pwrite` (the paper's 4 MB chunk exceeds the file, so one I/O per
/// file) and closed, then every file opened and read back by one `pread`.
/// Timed: the creates, writes, closes, opens, reads and closes. Not timed:
/// unlinking the files and checking the bytes of the last file read (every
/// read's length is checked as it happens).
pub fn file_count<P: Peer>(
    p: &mut P,
    names: &[String],
    src: &[u8],
    dst: &mut [u8],
) -> io::Result<Duration> {
    let len = src.len();
    dst.fill(0);
    let t = Instant::now();
    for name in names {
        let fd = p.create(name)?;
        let w = p.pwrite(fd, src, 0)?;
        p.close(fd)?;
        if w != len {
            return Err(io::Error::other(format!("{name}: wrote {w} of {len}")));
        }
    }
    for name in names {
        let fd = p.open_read(name)?;
        let r = p.pread(fd, dst, 0)?;
        p.close(fd)?;
        if r != len {
            return Err(io::Error::other(format!("{name}: read {r} of {len}")));
        }
    }
    let d = t.elapsed();
    black_box(&mut *dst);
    for name in names {
        p.unlink(name)?;
    }
    if dst != src {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "file-count read back other bytes",
        ));
    }
    Ok(d)
}

/// Size of the write in the fsync workload.
pub const FSYNC_BYTES: usize = 4 << 10;

/// File systems as processes (HotStorage'19): for each file of `names`,
/// create, write [`FSYNC_BYTES`], fsync, close; all of it timed. One call
/// does one batch of a repetition (see `measure::interleaved_batches`).
pub fn fsync_files<P: Peer>(p: &mut P, names: &[String], src: &[u8]) -> io::Result<Duration> {
    let t = Instant::now();
    for name in names {
        let fd = p.create(name)?;
        let w = p.pwrite(fd, src, 0)?;
        if w != src.len() {
            return Err(io::Error::other(format!(
                "{name}: wrote {w} of {}",
                src.len()
            )));
        }
        p.fsync(fd)?;
        p.close(fd)?;
    }
    Ok(t.elapsed())
}

/// Ends a repetition of the fsync workload, untimed: unlinks its files and
/// syncs the whole peer, so that the next repetition's first fsync does not
/// commit this one's unlinks.
pub fn fsync_cleanup<P: Peer>(p: &mut P, names: &[String]) -> io::Result<()> {
    for name in names {
        p.unlink(name)?;
    }
    p.sync_all()
}

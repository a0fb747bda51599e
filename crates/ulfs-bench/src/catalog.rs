//! What each figure is: its name in `results.csv`, its title and axes, how
//! it is drawn, and the ulfs system its ratios are taken against. The
//! experiments (`experiments/`) produce rows under these names; the plots
//! (`plot.rs`) and the report (`report.rs`) read only this and the rows,
//! so a figure is described once.

/// How a figure is drawn: lines over a numeric parameter (most), or bar
/// groups when the parameter is a handful of settings (memory limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Lines,
    Bars,
}

pub struct Figure {
    /// The `experiment` column, e.g. `fig6-read-after-write-fresh`.
    pub name: &'static str,
    /// The plot's title, e.g. "Fig. 6: read after write (fresh file)".
    pub title: &'static str,
    /// What `param` is, with its unit: "chunk size (bytes)".
    pub x_label: &'static str,
    /// What `value` is; the unit comes from the rows.
    pub y_label: &'static str,
    pub log_x: bool,
    pub log_y: bool,
    pub shape: Shape,
    /// The system every ratio in the report is taken against.
    pub reference: &'static str,
    /// Where the reference's image is in memory but host-ext4 is on the
    /// disk: the ulfs system on the disk that host-ext4 is compared with
    /// instead (a RAM image against a disk would flatter ulfs).
    pub disk_reference: Option<&'static str>,
    /// The report's sentence looks at the smallest param rather than the
    /// largest (fig. 9: the tightest limit is the point of the figure).
    pub focus_smallest: bool,
    /// What a param of 0 means, when it is not a number (fig. 9: no
    /// limit). Such a param is also never the report's focus.
    pub zero_means: Option<&'static str>,
    /// The workload in one clause, for the report's sentence: "1 MiB
    /// written and read back in chunks of the given size, in random order".
    pub workload: &'static str,
}

const JOURNAL: &str = "ulfs-journal";
const PRELOAD: &str = "ulfs-preload";
const PRELOAD_EXT4: &str = "ulfs-preload-ext4";
const FUSE: &str = "ulfs-fuse";
const SERVER: &str = "ulfs-server";

/// A figure as most are: lines on log-log axes, ratios to ulfs-journal.
/// Entries below override what differs.
const fn figure(
    name: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    workload: &'static str,
) -> Figure {
    Figure {
        name,
        title,
        x_label,
        y_label,
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        disk_reference: None,
        focus_smallest: false,
        zero_means: None,
        workload,
    }
}

/// A figure of `ulfs bench fuse`: one parameter, so bar groups, on a log
/// scale (in process and through FUSE differ by orders of magnitude);
/// ratios to ulfs-fuse, the system the experiment is about.
const fn fuse_figure(
    name: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    workload: &'static str,
) -> Figure {
    Figure {
        log_x: false,
        shape: Shape::Bars,
        reference: FUSE,
        ..figure(name, title, x_label, y_label, workload)
    }
}

/// A figure of `ulfs bench server`: one parameter (the calls), bar
/// groups on a log scale; ratios to ulfs-server, the system it is about.
const fn server_figure(name: &'static str, title: &'static str, workload: &'static str) -> Figure {
    Figure {
        log_x: false,
        shape: Shape::Bars,
        reference: SERVER,
        ..figure(name, title, "calls", "time per call", workload)
    }
}

pub static FIGURES: &[Figure] = &[
    figure(
        "fig6-read-after-write-fresh",
        "Fig. 6: read after write, fresh file",
        "chunk size (bytes)",
        "time for 1 MiB",
        "1 MiB written to a new file and read back chunk by chunk (each chunk a write then a read, chunks in random order)",
    ),
    figure(
        "fig6-read-after-write-overwrite",
        "Fig. 6: read after write, existing file",
        "chunk size (bytes)",
        "time for 1 MiB",
        "1 MiB overwritten in an existing file and read back chunk by chunk (chunks in random order)",
    ),
    figure(
        "fig6-seek-write-read-fresh",
        "Fig. 6: lseek + write + lseek + read, fresh file",
        "chunk size (bytes)",
        "time for 1 MiB",
        "fig. 6 on a new file with lseek + write + lseek + read per chunk, as the original ULFS (which has no pread/pwrite) was measured",
    ),
    figure(
        "fig6-seek-write-read-overwrite",
        "Fig. 6: lseek + write + lseek + read, existing file",
        "chunk size (bytes)",
        "time for 1 MiB",
        "fig. 6 over an existing 1 MiB file with lseek + write + lseek + read per chunk, as the original ULFS was measured",
    ),
    figure(
        "fig7-file-count-write",
        "Fig. 7: file count, write",
        "files of 1 MiB",
        "time to write all files",
        "N new files of 1 MiB each written with one call per file",
    ),
    figure(
        "fig7-file-count-read",
        "Fig. 7: file count, read",
        "files of 1 MiB",
        "time to read all files",
        "N files of 1 MiB each read back with one call per file",
    ),
    figure(
        "fig7-small-calls-write",
        "Fig. 7: file count, write in 1 KiB calls",
        "files of 1 MiB",
        "time to write all files",
        "N new files of 1 MiB each written in 1 KiB calls",
    ),
    figure(
        "fig7-small-calls-read",
        "Fig. 7: file count, read in 1 KiB calls",
        "files of 1 MiB",
        "time to read all files",
        "N files of 1 MiB each read back in 1 KiB calls",
    ),
    Figure {
        log_y: false,
        ..figure(
            "fig8-memory-peak",
            "Fig. 8: peak resident memory (VmHWM)",
            "files of 1 MiB",
            "peak resident memory of the process",
            "the fig. 7 workload in a new process, whose VmHWM is read at the end",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "fig8-memory-cgroup",
            "Fig. 8: peak memory charged to the process's cgroup",
            "files of 1 MiB",
            "peak memory of the cgroup (page cache and tmpfs included)",
            "the fig. 7 workload in a new process alone in a memory cgroup, whose peak usage is read at the end",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "fig8-memory-after-mount",
            "Fig. 8: resident memory right after mount",
            "files of 1 MiB in the image",
            "resident memory after mount",
            "the VmRSS of the fig. 8 process right after it mounted its new image (a host system's: right after it started), before the workload",
        )
    },
    Figure {
        log_x: false,
        shape: Shape::Bars,
        focus_smallest: true,
        zero_means: Some("none"),
        ..figure(
            "fig9-memory-limit",
            "Fig. 9: file count under a cgroup memory limit",
            "memory limit (MiB)",
            "time to write and read 10 files of 1 MiB",
            "10 files of 1 MiB written and read back in 64 KiB calls by a new process whose cgroup may hold only the given memory (none: no limit, the time each limit is judged against), no swap (files and a new image on the disk, its pages dropped from the cache first; a run still going after 60 s is stopped); ulfs-journal keeps to the budget it finds in the cgroup, ulfs-journal-no-budget has it turned off",
        )
    },
    figure(
        "fig10-readdir",
        "Fig. 10: readdir (32 KiB getdents buffer)",
        "entries in the directory",
        "time to list the directory once",
        "a directory of N entries listed with getdents64 into a 32 KiB buffer, reading only inode numbers",
    ),
    figure(
        "fig10-readdir-small-buffer",
        "Fig. 10: readdir (512-byte getdents buffer)",
        "entries in the directory",
        "time to list the directory once",
        "a directory of N entries listed with getdents64 into a 512-byte buffer (many calls per listing)",
    ),
    figure(
        "fig11-lseek",
        "Fig. 11: lseek",
        "calls",
        "time for all calls",
        "lseek(fd, 0, SEEK_SET) on an empty file, N times",
    ),
    figure(
        "fig12-fstat",
        "Fig. 12: fstat",
        "calls",
        "time for all calls",
        "fstat of one file, N times, reading only st_ino",
    ),
    Figure {
        reference: PRELOAD,
        disk_reference: Some(PRELOAD_EXT4),
        ..figure(
            "fig13-gdbm-store",
            "Fig. 13: gdbm store",
            "items",
            "time to store all items",
            "N items of 4-byte keys and values stored into a new database through the real libgdbm",
        )
    },
    Figure {
        reference: PRELOAD,
        disk_reference: Some(PRELOAD_EXT4),
        ..figure(
            "fig13-gdbm-fetch",
            "Fig. 13: gdbm fetch",
            "items",
            "time to fetch all items",
            "the N items fetched back through the real libgdbm",
        )
    },
    Figure {
        reference: PRELOAD,
        disk_reference: Some(PRELOAD_EXT4),
        ..figure(
            "fig14-sqlite-insert",
            "Fig. 14: SQLite insert (journal mode DELETE)",
            "rows",
            "time to insert all rows",
            "N rows (id, string, float) of random values inserted one statement (one transaction) each through the real libsqlite3",
        )
    },
    Figure {
        reference: PRELOAD,
        disk_reference: Some(PRELOAD_EXT4),
        ..figure(
            "fig14-sqlite-select",
            "Fig. 14: SQLite select",
            "rows",
            "time to select all rows",
            "the N rows selected back through the real libsqlite3",
        )
    },
    Figure {
        reference: PRELOAD,
        disk_reference: Some(PRELOAD_EXT4),
        ..figure(
            "postmark",
            "PostMark",
            "files",
            "time of the whole run",
            "Debian's postmark with its default transactions and file sizes over N files",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "fsync-loop",
            "create + 4 KiB write + fsync + close",
            "files",
            "time per file",
            "N files each created, written 4 KiB, fsynced and closed, on the host disk",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "open-existing",
            "open() of an existing file",
            "entries in the directory",
            "time per open + close",
            "open and close of existing names picked at random in a directory of N entries",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "open-missing",
            "open() of a missing file",
            "entries in the directory",
            "time per failed open",
            "open of names that are not in a directory of N entries",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "create",
            "create rate in one directory",
            "files created in one directory",
            "time per create + close",
            "N empty files created (and closed) in one new directory",
        )
    },
    Figure {
        log_y: false,
        ..figure(
            "create-unlink",
            "unlink rate in one directory",
            "files in the directory",
            "time per unlink",
            "the N files of the create experiment unlinked in creation order",
        )
    },
    figure(
        "mount-time",
        "mount time",
        "files in the image",
        "time to mount",
        "a new process mounting an image that holds N files",
    ),
    Figure {
        log_y: false,
        ..figure(
            "mount-memory",
            "resident memory after mount",
            "files in the image",
            "resident memory after mount",
            "the VmRSS of a new process right after it mounted an image that holds N files",
        )
    },
    figure(
        "mount-size-time",
        "mount time by image size",
        "image size (MiB)",
        "time to mount",
        "a new process mounting, read-only, a new sparse image of the given size",
    ),
    Figure {
        log_y: false,
        ..figure(
            "mount-size-memory",
            "resident memory after mount, by image size",
            "image size (MiB)",
            "resident memory after mount",
            "the VmRSS of a new process right after it mounted, read-only, a new sparse image of the given size",
        )
    },
    fuse_figure(
        "fuse-seq-write",
        "ulfs mount: sequential write, 1 MiB calls",
        "file size (MiB)",
        "time per MiB",
        "a new file written in 1 MiB calls and closed, no fsync (open and close timed too); images and tmpfs in memory, ext4 on the disk",
    ),
    fuse_figure(
        "fuse-seq-read",
        "ulfs mount: sequential read, 1 MiB calls",
        "file size (MiB)",
        "time per MiB",
        "the file just written read back in 1 MiB calls from a new open: the host's page cache holds it, while through FUSE the open drops the kernel's cached pages (no keep_cache), so every byte comes from the server",
    ),
    fuse_figure(
        "fuse-random-read",
        "ulfs mount: 4 KiB random reads",
        "file size (MiB)",
        "time per read",
        "16,384 preads (4,096 in --quick) of 4 KiB at random block offsets (fixed seed) of that file, from a new open",
    ),
    fuse_figure(
        "fuse-small-write",
        "ulfs mount: sequential write, 4 KiB calls",
        "file size (MiB)",
        "time per MiB",
        "a new file of the same size written in 4 KiB calls and closed, no fsync: what writeback_cache gathers",
    ),
    fuse_figure(
        "fuse-create",
        "ulfs mount: create",
        "files",
        "time per file",
        "N empty files created (open with O_CREAT | O_EXCL, close) in one new directory",
    ),
    fuse_figure(
        "fuse-stat",
        "ulfs mount: stat",
        "files",
        "time per file",
        "each of the N new files stat'ed by name, in creation order",
    ),
    fuse_figure(
        "fuse-unlink",
        "ulfs mount: unlink",
        "files",
        "time per file",
        "each of the N files unlinked, in creation order",
    ),
    fuse_figure(
        "fuse-tar-extract",
        "ulfs mount: tar -x of a real tree",
        "entries in the tree",
        "time to extract",
        "GNU tar extracting a tarball of /usr/include (--quick: /usr/include/linux), made at the start of the run and kept in memory, into an empty directory: wall time of the tar process; in process it is `ulfs run` on a new image (its start, mount and final commit included), through FUSE a new mount (its unmount not included), through ulfs serve `ulfs run --server` on a new image's server (its stop not included)",
    ),
    server_figure(
        "server-null",
        "ulfs serve: null call (lseek SEEK_CUR), back to back",
        "lseek(fd, 0, SEEK_CUR) on an open empty file, N times back to back: in process a C call, on tmpfs and through FUSE a system call (the kernel answers it, no FUSE request), through ulfs serve the client's own answer (it keeps the offset of a description only it has: no request)",
    ),
    server_figure(
        "server-roundtrip",
        "ulfs serve: round trip (statfs), back to back",
        "statfs of a file, N times back to back: through ulfs serve one request and its answer over shared memory (the null round trip), through FUSE one request to its daemon and its answer (the kernel caches the name, not the answer), in process a C call, on tmpfs a system call",
    ),
    server_figure(
        "server-null-idle",
        "ulfs serve: round trip after a 1 ms pause",
        "statfs of a file, N times, each after a 1 ms sleep (untimed; each call timed alone, so about one clock read is included): through ulfs serve the channel has gone to sleep and the call wakes the server's worker; through FUSE the call wakes the daemon's thread",
    ),
    server_figure(
        "server-fstat",
        "ulfs serve: fstat",
        "fstat of one open file, N times, reading st_ino: through ulfs serve the client's kept answer while the file is unchanged (no request); through FUSE the kernel's attribute cache answers",
    ),
    server_figure(
        "server-pread",
        "ulfs serve: 4 KiB pread of a cached file",
        "4 KiB preads of a 1 MiB file read whole once before, block after block, N times, each block's stamp checked: through ulfs serve one request each (the data copied through the channel); through FUSE the kernel's page cache answers",
    ),
    Figure {
        log_x: false,
        log_y: false,
        shape: Shape::Bars,
        reference: SERVER,
        ..figure(
            "clients-postmark",
            "PostMark by several programs at once",
            "programs at once",
            "transactions per second, all together",
            "N PostMarks at once (each its own directory, 1,000 files, 20,000 transactions; --quick: 300 and 2,000), on one new file system each time: host directories, one `ulfs mount`, one `ulfs serve` with the programs under `ulfs run --server`; every program's transactions over the wall time from the first start to the last end",
        )
    },
    Figure {
        log_x: false,
        log_y: false,
        shape: Shape::Bars,
        reference: SERVER,
        ..figure(
            "clients-postmark-busy",
            "PostMark beside busy loops",
            "busy loops beside it",
            "transactions per second",
            "one PostMark (as in clients-postmark) while N threads of the bench's worker spin without sleeping (0, and one per core): the machine's CPUs wanted by other programs; on a new file system each time as in clients-postmark",
        )
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The issue fixes the naming: paper figures first (`fig6`..`fig14`),
    /// then the other experiments under these prefixes.
    #[test]
    fn every_figure_name_has_an_agreed_prefix_and_is_unique() {
        const PREFIXES: [&str; 17] = [
            "fig6-",
            "fig7-",
            "fig8-",
            "fig9-",
            "fig10-",
            "fig11-",
            "fig12-",
            "fig13-",
            "fig14-",
            "postmark",
            "fsync-loop",
            "open",
            "create",
            "mount",
            "fuse-",
            "server-",
            "clients-",
        ];
        let mut seen = std::collections::HashSet::new();
        for f in FIGURES {
            assert!(
                PREFIXES.iter().any(|p| f.name.starts_with(p)),
                "{} has no agreed prefix",
                f.name
            );
            assert!(seen.insert(f.name), "{} twice", f.name);
            assert!(f.reference.starts_with("ulfs-"));
        }
    }
}

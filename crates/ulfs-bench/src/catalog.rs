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
    /// The workload in one clause, for the report's sentence: "1 MiB
    /// written and read back in chunks of the given size, in random order".
    pub workload: &'static str,
}

const JOURNAL: &str = "ulfs-journal";
const PRELOAD: &str = "ulfs-preload";

pub static FIGURES: &[Figure] = &[
    Figure {
        name: "fig6-read-after-write-fresh",
        title: "Fig. 6: read after write, fresh file",
        x_label: "chunk size (bytes)",
        y_label: "time for 1 MiB",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "1 MiB written to a new file and read back chunk by chunk (each chunk a write then a read, chunks in random order)",
    },
    Figure {
        name: "fig6-read-after-write-overwrite",
        title: "Fig. 6: read after write, existing file",
        x_label: "chunk size (bytes)",
        y_label: "time for 1 MiB",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "1 MiB overwritten in an existing file and read back chunk by chunk (chunks in random order)",
    },
    Figure {
        name: "fig7-file-count-write",
        title: "Fig. 7: file count, write",
        x_label: "files of 1 MiB",
        y_label: "time to write all files",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "N new files of 1 MiB each written with one call per file",
    },
    Figure {
        name: "fig7-file-count-read",
        title: "Fig. 7: file count, read",
        x_label: "files of 1 MiB",
        y_label: "time to read all files",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "N files of 1 MiB each read back with one call per file",
    },
    Figure {
        name: "fig8-memory-peak",
        title: "Fig. 8: peak resident memory (VmHWM)",
        x_label: "files of 1 MiB",
        y_label: "peak resident memory of the process",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "the fig. 7 workload in a new process, whose VmHWM is read at the end",
    },
    Figure {
        name: "fig8-memory-cgroup",
        title: "Fig. 8: peak memory charged to the process's cgroup",
        x_label: "files of 1 MiB",
        y_label: "peak memory of the cgroup (page cache and tmpfs included)",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "the fig. 7 workload in a new process alone in a memory cgroup, whose peak usage is read at the end",
    },
    Figure {
        name: "fig8-memory-after-mount",
        title: "Fig. 8: resident memory right after mount",
        x_label: "files of 1 MiB in the image",
        y_label: "resident memory after mount",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "the VmRSS of the fig. 8 process right after it mounted its new image (a host system's: right after it started), before the workload",
    },
    Figure {
        name: "fig9-memory-limit",
        title: "Fig. 9: file count under a cgroup memory limit",
        x_label: "memory limit (MiB)",
        y_label: "time to write and read 10 files of 1 MiB",
        log_x: false,
        log_y: true,
        shape: Shape::Bars,
        reference: JOURNAL,
        workload: "10 files of 1 MiB written and read back in 64 KiB calls by a process whose cgroup may hold only the given memory, no swap (files and images on the disk)",
    },
    Figure {
        name: "fig10-readdir",
        title: "Fig. 10: readdir (32 KiB getdents buffer)",
        x_label: "entries in the directory",
        y_label: "time to list the directory once",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "a directory of N entries listed with getdents64 into a 32 KiB buffer, reading only inode numbers",
    },
    Figure {
        name: "fig10-readdir-small-buffer",
        title: "Fig. 10: readdir (512-byte getdents buffer)",
        x_label: "entries in the directory",
        y_label: "time to list the directory once",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "a directory of N entries listed with getdents64 into a 512-byte buffer (many calls per listing)",
    },
    Figure {
        name: "fig11-lseek",
        title: "Fig. 11: lseek",
        x_label: "calls",
        y_label: "time for all calls",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "lseek(fd, 0, SEEK_SET) on an empty file, N times",
    },
    Figure {
        name: "fig12-fstat",
        title: "Fig. 12: fstat",
        x_label: "calls",
        y_label: "time for all calls",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "fstat of one file, N times, reading only st_ino",
    },
    Figure {
        name: "fig13-gdbm-store",
        title: "Fig. 13: gdbm store",
        x_label: "items",
        y_label: "time to store all items",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: PRELOAD,
        workload: "N items of 4-byte keys and values stored into a new database through the real libgdbm",
    },
    Figure {
        name: "fig13-gdbm-fetch",
        title: "Fig. 13: gdbm fetch",
        x_label: "items",
        y_label: "time to fetch all items",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: PRELOAD,
        workload: "the N items fetched back through the real libgdbm",
    },
    Figure {
        name: "fig14-sqlite-insert",
        title: "Fig. 14: SQLite insert (journal mode DELETE)",
        x_label: "rows",
        y_label: "time to insert all rows",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: PRELOAD,
        workload: "N rows (id, string, float) of random values inserted one statement (one transaction) each through the real libsqlite3",
    },
    Figure {
        name: "fig14-sqlite-select",
        title: "Fig. 14: SQLite select",
        x_label: "rows",
        y_label: "time to select all rows",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: PRELOAD,
        workload: "the N rows selected back through the real libsqlite3",
    },
    Figure {
        name: "postmark",
        title: "PostMark",
        x_label: "files",
        y_label: "time of the whole run",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: PRELOAD,
        workload: "Debian's postmark with its default transactions and file sizes over N files",
    },
    Figure {
        name: "fsync-loop",
        title: "create + 4 KiB write + fsync + close",
        x_label: "files",
        y_label: "time per file",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "N files each created, written 4 KiB, fsynced and closed, on the host disk",
    },
    Figure {
        name: "open-existing",
        title: "open() of an existing file",
        x_label: "entries in the directory",
        y_label: "time per open + close",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "open and close of existing names picked at random in a directory of N entries",
    },
    Figure {
        name: "open-missing",
        title: "open() of a missing file",
        x_label: "entries in the directory",
        y_label: "time per failed open",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "open of names that are not in a directory of N entries",
    },
    Figure {
        name: "create",
        title: "create rate in one directory",
        x_label: "files created in one directory",
        y_label: "time per create + close",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "N empty files created (and closed) in one new directory",
    },
    Figure {
        name: "create-unlink",
        title: "unlink rate in one directory",
        x_label: "files in the directory",
        y_label: "time per unlink",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "the N files of the create experiment unlinked in creation order",
    },
    Figure {
        name: "mount-time",
        title: "mount time",
        x_label: "files in the image",
        y_label: "time to mount",
        log_x: true,
        log_y: true,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "a new process mounting an image that holds N files",
    },
    Figure {
        name: "mount-memory",
        title: "resident memory after mount",
        x_label: "files in the image",
        y_label: "resident memory after mount",
        log_x: true,
        log_y: false,
        shape: Shape::Lines,
        reference: JOURNAL,
        workload: "the VmRSS of a new process right after it mounted an image that holds N files",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The issue fixes the naming: paper figures first (`fig6`..`fig14`),
    /// then the other experiments under these prefixes.
    #[test]
    fn every_figure_name_has_an_agreed_prefix_and_is_unique() {
        const PREFIXES: [&str; 14] = [
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

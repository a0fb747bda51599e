//! The `--json` output of `ls`, `stat` and `info`: one place that owns its
//! field names, so the commands cannot drift apart and scripts can rely on
//! them (they are listed in each command's `--help`, from `entry_fields!`
//! and `info_fields!` here; a field is only ever added, never renamed).
//!
//! Names in an image are bytes; JSON strings are Unicode, so a name that is
//! not UTF-8 is shown with U+FFFD in place of its bad bytes. Times are
//! `{"sec": S, "nsec": N}` rather than one number: a double (what most JSON
//! readers, jq included, turn numbers into) cannot hold nanoseconds since
//! 1970 exactly.

use std::io::{self, Write};

use serde_json::{Value, json};
use ulfs::{Info, Stat, Timespec};

use crate::format::{mode_string, uuid};

/// For `--help`: the fields of an `ls --json` or `stat --json` entry (a
/// macro, so clap's `after_help` can `concat!` it with an example).
macro_rules! entry_fields {
    () => {
        "Each entry is an object: path, name, type (file, directory, symlink, fifo, socket, \
         char_device, block_device), mode (permission, set-id and sticky bits as a number), \
         mode_string (as ls -l), size, blocks (512-byte units), block_size, nlink, inode, uid, \
         gid, atime, mtime, ctime, btime (each {\"sec\": S, \"nsec\": N}) and target (a \
         symlink's target, null otherwise). Names that are not UTF-8 show U+FFFD for bad bytes."
    };
}
pub(crate) use entry_fields;

/// For `--help`: the fields of `info --json`.
macro_rules! info_fields {
    () => {
        "One object: format_version, label, uuid, mode (journal or none), clean, image_bytes, \
         block_size, total_blocks, used_blocks, free_blocks, used_inodes, free_inodes, \
         journal_blocks, journal_replayed, mount_count, v1 (null, or for an original ULFS \
         image what it records: max_blocks, used_blocks, used_inodes, inode_blocks; the \
         other fields then describe the read-only translation it is mounted as)."
    };
}
pub(crate) use info_fields;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn time(t: Timespec) -> Value {
    json!({ "sec": t.sec, "nsec": t.nsec })
}

/// The `type` field.
pub fn kind(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char_device",
        libc::S_IFBLK => "block_device",
        _ => "unknown",
    }
}

/// One file: `path` in the image, its `name` there, its stat and, for a
/// symlink, its target.
pub fn entry(path: &[u8], name: &[u8], st: &Stat, target: Option<&[u8]>) -> Value {
    json!({
        "path": text(path),
        "name": text(name),
        "type": kind(st.mode),
        "mode": st.mode & 0o7777,
        "mode_string": mode_string(st.mode),
        "size": st.size,
        "blocks": st.blocks,
        "block_size": st.blksize,
        "nlink": st.nlink,
        "inode": st.ino,
        "uid": st.uid,
        "gid": st.gid,
        "atime": time(st.atime),
        "mtime": time(st.mtime),
        "ctime": time(st.ctime),
        "btime": time(st.btime),
        "target": target.map(text),
    })
}

pub fn info(info: &Info) -> Value {
    let mode = match info.mode {
        ulfs::Mode::None => "none",
        ulfs::Mode::Journal => "journal",
    };
    json!({
        "format_version": info.version,
        "label": info.label,
        "uuid": uuid(&info.uuid),
        "mode": mode,
        "clean": info.clean,
        "image_bytes": info.image_bytes,
        "block_size": info.block_size,
        "total_blocks": info.total_blocks,
        "used_blocks": info.total_blocks.saturating_sub(info.free_blocks),
        "free_blocks": info.free_blocks,
        "used_inodes": info.used_inodes,
        "free_inodes": info.free_inodes,
        "journal_blocks": info.journal_blocks,
        "journal_replayed": info.journal_replayed,
        "mount_count": info.mount_count,
        "v1": info.v1.map(|v| json!({
            "max_blocks": v.max_blocks,
            "used_blocks": v.used_blocks,
            "used_inodes": v.used_inodes,
            "inode_blocks": v.inode_blocks,
        })),
    })
}

/// A JSON array written one element per line as the elements come, so a
/// listing of a million entries is never held whole in memory.
pub struct ArrayWriter<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> ArrayWriter<W> {
    pub fn new(mut out: W) -> io::Result<ArrayWriter<W>> {
        out.write_all(b"[")?;
        Ok(ArrayWriter { out, first: true })
    }

    pub fn push(&mut self, v: &Value) -> io::Result<()> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.out, v).map_err(io::Error::other)
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out
            .write_all(if self.first { b"]\n" } else { b"\n]\n" })?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_parse_back() {
        for n in [0, 1, 3] {
            let mut w = ArrayWriter::new(Vec::new()).unwrap();
            for i in 0..n {
                w.push(&json!({ "i": i })).unwrap();
            }
            let out = w.finish().unwrap();
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v.as_array().unwrap().len(), n);
        }
    }

    #[test]
    fn entries_keep_nanoseconds_and_bad_bytes_do_not_break_json() {
        let st = Stat {
            mode: libc::S_IFREG | 0o4755,
            mtime: Timespec {
                sec: 1_700_000_000,
                nsec: 123_456_789,
            },
            ..Default::default()
        };
        let v = entry(b"/a/\xff", b"\xff", &st, None);
        let back: Value = serde_json::from_str(&v.to_string()).unwrap();
        assert_eq!(back["mode"], 0o4755);
        assert_eq!(back["type"], "file");
        assert_eq!(back["mtime"]["nsec"], 123_456_789);
        assert_eq!(back["name"], "\u{fffd}");
        assert!(back["target"].is_null());
    }
}

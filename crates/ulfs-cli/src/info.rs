//! `ulfs info`: print what the superblock says about an image.
//!
//! The output is for people (aligned `key: value` lines), with the exact
//! numbers in parentheses next to the human ones; `--json` gives scripts
//! the same facts as one object (json.rs).

use std::io::Write;
use std::path::Path;

use ulfs::Info;

use crate::error::{CliError, CliResult};
use crate::format::{human_bytes, uuid};
use crate::image::{self, Access};
use crate::json;

pub fn run(image_path: &Path, as_json: bool) -> CliResult {
    let info = image::with_fs("info", image_path, Access::ReadOnly, |fs| Ok(fs.info()))?;
    let text = if as_json {
        format!("{:#}\n", json::info(&info))
    } else {
        render(&info)
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| CliError::io("info: stdout", &e))
}

/// The journal's size and what this mount found in it.
fn journal(info: &Info) -> String {
    if info.mode == ulfs::Mode::None {
        return "none".into();
    }
    let size = format!(
        "{} blocks ({})",
        info.journal_blocks,
        human_bytes(info.journal_blocks as u64 * info.block_size as u64)
    );
    match info.journal_replayed {
        0 => format!("{size}, empty"),
        n => format!(
            "{size}, {n} committed transaction(s) not yet checkpointed (replayed in memory for this view; the next read-write mount applies them)"
        ),
    }
}

fn render(info: &Info) -> String {
    let bs = info.block_size as u64;
    let used_blocks = info.total_blocks.saturating_sub(info.free_blocks);
    let mode = match info.mode {
        ulfs::Mode::None => "none",
        ulfs::Mode::Journal => "journal",
    };
    let label = if info.label.is_empty() {
        "(none)".to_string()
    } else {
        info.label.clone()
    };
    let rows: Vec<(&str, String)> = vec![
        ("format version", info.version.to_string()),
        ("label", label),
        ("uuid", uuid(&info.uuid)),
        ("mode", mode.to_string()),
        (
            "clean",
            match (info.clean, info.mode) {
                (true, _) => "yes",
                (false, ulfs::Mode::Journal) => "no (recovered from the journal at mount)",
                (false, ulfs::Mode::None) => "no (not unmounted cleanly: run ulfs fsck --repair)",
            }
            .to_string(),
        ),
        (
            "image size",
            format!(
                "{} ({} bytes)",
                human_bytes(info.image_bytes),
                info.image_bytes
            ),
        ),
        ("block size", format!("{} bytes", info.block_size)),
        ("total blocks", info.total_blocks.to_string()),
        (
            "used blocks",
            format!(
                "{used_blocks} ({})",
                human_bytes(used_blocks.saturating_mul(bs))
            ),
        ),
        (
            "free blocks",
            format!(
                "{} ({})",
                info.free_blocks,
                human_bytes(info.free_blocks.saturating_mul(bs))
            ),
        ),
        ("used inodes", info.used_inodes.to_string()),
        (
            "free inodes",
            format!("about {} (made on demand)", info.free_inodes),
        ),
        ("journal", journal(info)),
    ];
    let mut rows = rows;
    if let Some(v1) = &info.v1 {
        // What the v1 image records, then its translation (what this view
        // and every command see), which the rows below describe.
        let v1_rows = vec![
            (
                "format",
                "original ULFS (v1), read-only: shown as its translation (below); \
                 `ulfs convert` makes an ulfs image of it"
                    .to_string(),
            ),
            (
                "v1 size",
                format!(
                    "{} blocks ({})",
                    v1.max_blocks,
                    human_bytes(v1.max_blocks.saturating_mul(bs))
                ),
            ),
            ("v1 used blocks", v1.used_blocks.to_string()),
            (
                "v1 used inodes",
                format!("{} (in {} inode blocks)", v1.used_inodes, v1.inode_blocks),
            ),
        ];
        rows.splice(0..0, v1_rows);
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    rows.iter()
        .map(|(k, v)| format!("{:<width$} {v}\n", format!("{k}:")))
        .collect()
}

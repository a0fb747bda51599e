//! What the CLI says about a damaged image (issue 6, finding 5): the block
//! named is the one at fault, described for what it is (a metadata block
//! whose checksum fails, or a block that holds no metadata at all, which
//! points at the pointer that led there), `ls` names it as `cat` does, and
//! two errors in one run each name their own block.

use std::path::Path;
use std::process::Command;

const ULFS: &str = env!("CARGO_BIN_EXE_ulfs");
const BLOCK: usize = 4096;

fn ulfs(args: &[&str], image: &Path) -> (i32, String) {
    let out = Command::new(ULFS)
        .arg(args[0])
        .arg(image)
        .args(&args[1..])
        .output()
        .expect("run ulfs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An image with two directories of a few files and one file with an
/// indirect block; returns it with the blocks of each kind.
fn image(dir: &Path) -> (std::path::PathBuf, Vec<usize>, Vec<usize>) {
    let src = dir.join("src");
    for d in ["one", "two"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for i in 0..5 {
            std::fs::write(src.join(d).join(format!("f{i}")), format!("{d} {i}\n")).unwrap();
        }
    }
    std::fs::write(src.join("big"), vec![7u8; 100 << 10]).unwrap();
    let img = dir.join("a.img");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // Mode none: no journal region holding copies of the blocks to find.
    assert_eq!(ulfs(&["mkfs", "8M", "--mode", "none"], &img).0, 0);
    assert_eq!(ulfs(&["import", &s(&src), "/"], &img).0, 0);
    let bytes = std::fs::read(&img).unwrap();
    let with = |magic: &[u8]| -> Vec<usize> {
        (0..bytes.len() / BLOCK)
            .filter(|b| &bytes[b * BLOCK..b * BLOCK + 4] == magic)
            .collect()
    };
    (img, with(b"UDLF"), with(b"UIND"))
}

fn poke(img: &Path, at: usize, bytes: &[u8]) {
    let mut data = std::fs::read(img).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(img, data).unwrap();
}

#[test]
fn a_zeroed_indirect_block_is_named_as_holding_no_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _, indirect) = image(dir.path());
    assert_eq!(indirect.len(), 1);
    poke(&img, indirect[0] * BLOCK, &[0; BLOCK]);
    let (rc, err) = ulfs(&["cat", "/big"], &img);
    assert_eq!(rc, 1);
    let want = format!("block {} holds no metadata", indirect[0]);
    assert!(err.contains(&want) && err.contains("pointer"), "{err}");
    assert!(!err.contains("fails its checksum"), "{err}");
}

#[test]
fn ls_names_the_block_and_each_error_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (img, leaves, _) = image(dir.path());
    // Root, one and two: a leaf each.
    assert_eq!(leaves.len(), 3, "{leaves:?}");
    let mut flipped = Vec::new();
    for &leaf in &leaves {
        let mut copy = std::fs::read(&img).unwrap();
        copy[leaf * BLOCK + 300] ^= 0x55;
        let probe = dir.path().join("probe.img");
        std::fs::write(&probe, &copy).unwrap();
        // The root's own leaf stops everything; damage the other two.
        if ulfs(&["ls", "/"], &probe).0 == 0 {
            flipped.push(leaf);
        }
    }
    assert_eq!(flipped.len(), 2, "{leaves:?}");
    for &leaf in &flipped {
        poke(&img, leaf * BLOCK + 300, &[0x55 ^ 0xA5]);
    }
    let (rc, err) = ulfs(&["ls", "/", "-R"], &img);
    assert_eq!(rc, 1, "{err}");
    for leaf in &flipped {
        let want = format!("metadata block {leaf} fails its checksum");
        assert_eq!(err.matches(&want).count(), 1, "{err}");
    }
}

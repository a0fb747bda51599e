//! Original ULFS (v1) images: the sample made by the original tool
//! (../shared/testdata/ulfs-v1) reads through the API exactly as its
//! manifest says, read-only, the image untouched; damaged copies (loops
//! in the inode block list, in a file's block chain and in the tree,
//! pointers out of range, unknown types, names without an end, a
//! truncated file, random byte flips) give clear errors, never a panic
//! or a hang.

use std::path::{Path, PathBuf};
use ulfs::{Errno, Fs, MountOptions};
use ulfs_testkit::rng::Rng;
use ulfs_testkit::snapshot::{Budget, snapshot};

const BS: usize = 4096;

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/ulfs-v1/sample-v1.img")
}

fn manifest() -> String {
    std::fs::read_to_string(sample().with_file_name("sample-v1.json")).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The manifest's entries: (path, "dir" or "file", size, sha256).
fn entries(manifest: &str) -> Vec<(String, String, Option<u64>, Option<String>)> {
    // A flat, known shape: one object per entry, fields on their own lines.
    let mut out = Vec::new();
    let body = &manifest[manifest.find("\"entries\"").unwrap()..];
    for obj in body.split('{').skip(1) {
        let field = |name: &str| {
            let at = obj.find(&format!("\"{name}\": "))? + name.len() + 4;
            let rest = &obj[at..];
            let end = rest.find([',', '\n', '}']).unwrap();
            Some(rest[..end].trim().trim_matches('"').to_string())
        };
        out.push((
            field("path").unwrap(),
            field("type").unwrap(),
            field("size").map(|s| s.parse().unwrap()),
            field("sha256"),
        ));
    }
    out
}

fn absent(manifest: &str) -> Vec<String> {
    let start = manifest.find("\"absent\"").unwrap();
    let list = &manifest[start..manifest[start..].find(']').unwrap() + start];
    list.split('"')
        .filter(|s| s.starts_with('/'))
        .map(str::to_string)
        .collect()
}

fn read_all(fs: &mut Fs, path: &str) -> Result<Vec<u8>, Errno> {
    let fd = fs.open(path, libc::O_RDONLY, 0)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = fs.read(fd, &mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    fs.close(fd)?;
    Ok(out)
}

#[test]
fn the_sample_reads_as_its_manifest_says_and_stays_untouched() {
    let image = sample();
    let before = std::fs::read(&image).unwrap();
    let manifest = manifest();
    let mut fs = Fs::mount(&image, MountOptions::default()).unwrap();
    let listed = holds_the_manifest(&mut fs, &manifest);
    // Read-only: every change is EROFS.
    assert_eq!(fs.mkdir("/new", 0o755).err(), Some(Errno::EROFS));
    assert_eq!(
        fs.open("/README.txt", libc::O_WRONLY, 0).err(),
        Some(Errno::EROFS)
    );
    assert_eq!(fs.unlink("/empty").err(), Some(Errno::EROFS));
    let info = fs.info();
    let v1 = info.v1.expect("marked as a v1 image");
    assert_eq!(v1.max_blocks, (before.len() / BS) as u64);
    assert!(v1.used_inodes as usize > listed);
    fs.unmount().unwrap();
    assert!(
        std::fs::read(&image).unwrap() == before,
        "the v1 image changed"
    );
}

/// `v1::convert` makes an ulfs image that checks clean, holds the same
/// tree, and can be changed.
#[test]
fn a_converted_image_holds_the_tree_and_is_writable() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.img");
    let copied = ulfs::v1::convert(&sample(), &new, &Default::default()).unwrap();
    assert!(copied.files > 10 && copied.dirs >= 5, "{copied:?}");
    let report = ulfs::fsck(&new, &mut Default::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let mut fs = Fs::mount(&new, MountOptions::default()).unwrap();
    holds_the_manifest(&mut fs, &manifest());
    assert!(fs.info().v1.is_none());
    fs.mkdir("/new", 0o755).unwrap();
    fs.unmount().unwrap();
    // A damaged v1 image is refused before anything is written.
    let (_d, bad) = damaged(|img| put32(img, 2 * BS, 2));
    let err = ulfs::v1::convert(&bad, &dir.path().join("other.img"), &Default::default());
    assert!(err.unwrap_err().message.contains("loops"));
}

/// Checks every entry and absence of the manifest; the number of entries.
fn holds_the_manifest(fs: &mut Fs, manifest: &str) -> usize {
    let listed = entries(manifest);
    assert!(listed.len() > 10, "{listed:?}");
    for (path, kind, size, hash) in &listed {
        let st = fs
            .stat(path.as_str())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        if kind == "dir" {
            assert!(st.is_dir(), "{path}");
        } else {
            assert!(st.is_file(), "{path}");
            assert_eq!(Some(st.size), *size, "{path}");
            let bytes = read_all(fs, path).unwrap();
            assert_eq!(Some(sha256(&bytes)), *hash, "{path}");
        }
    }
    for path in absent(manifest) {
        assert_eq!(fs.stat(path.as_str()).err(), Some(Errno::ENOENT), "{path}");
    }
    listed.len()
}

/// A copy of the sample, changed by `damage`, in a temporary directory.
fn damaged(damage: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.img");
    let mut bytes = std::fs::read(sample()).unwrap();
    damage(&mut bytes);
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Byte offset of the inode an entry names.
fn inode_at(bid: u32, slot: u16) -> usize {
    bid as usize * BS + 16 + slot as usize * 24
}

/// Byte offset of the entry `name` in the first block of the directory
/// whose inode is at `inode`.
fn entry_at(img: &[u8], inode: usize, name: &str) -> usize {
    let data = le32(img, inode + 16) as usize * BS;
    (0..113)
        .map(|i| data + i * 36)
        .find(|&e| img[e..e + 26].split(|&c| c == 0).next() == Some(name.as_bytes()))
        .unwrap_or_else(|| panic!("no entry {name}"))
}

/// Byte offset of the inode of a path (each component in its directory's
/// first block: true of the sample).
fn inode_of(img: &[u8], path: &str) -> usize {
    let mut inode = inode_at(2, 0);
    for name in path.split('/').filter(|n| !n.is_empty()) {
        let e = entry_at(img, inode, name);
        inode = inode_at(
            le32(img, e + 28),
            u16::from_le_bytes([img[e + 32], img[e + 33]]),
        );
    }
    inode
}

fn refused(path: &Path, says: &str) {
    match Fs::mount(path, MountOptions::default()) {
        Ok(_) => panic!("a damaged v1 image mounted (expected: {says})"),
        Err(e) => {
            assert_eq!(e.errno, Errno::EUCLEAN, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
    }
}

#[test]
fn loops_in_the_image_are_errors_not_hangs() {
    // The inode block list points back to its first block.
    let (_d, p) = damaged(|img| put32(img, 2 * BS, 2));
    refused(&p, "inode block list loops");
    // The big file's chain of block-id blocks points back to itself.
    let (_d, p) = damaged(|img| {
        let big = inode_of(img, "/data/big");
        let chain = le32(img, big + 20) as usize;
        put32(img, chain * BS, chain as u32);
    });
    refused(&p, "loops at block");
    // /a/b/c names /a: a loop in the tree.
    let (_d, p) = damaged(|img| {
        let a = entry_at(img, inode_at(2, 0), "a");
        let c = inode_of(img, "/a/b/c");
        let free = entry_at(img, c, "..") + 36;
        img.copy_within(a..a + 36, free);
        img[free..free + 4].copy_from_slice(b"up\0\0");
        // The directory's size covers the new slot.
        let size = u64::from_le_bytes(img[c + 8..c + 16].try_into().unwrap());
        img[c + 8..c + 16].copy_from_slice(&(size.max(3 * 36)).to_le_bytes());
    });
    refused(&p, "a second time");
}

#[test]
fn bad_pointers_types_names_and_sizes_are_named() {
    let (_d, p) = damaged(|img| {
        let f = inode_of(img, "/README.txt");
        put32(img, f + 16, 0x7fff_ffff);
    });
    refused(&p, "outside");
    let (_d, p) = damaged(|img| {
        let f = inode_of(img, "/README.txt");
        put32(img, f, 3);
    });
    refused(&p, "unknown type 3");
    let (_d, p) = damaged(|img| {
        let e = entry_at(img, inode_at(2, 0), "README.txt");
        img[e..e + 26].fill(b'x');
    });
    refused(&p, "does not end");
    let (_d, p) = damaged(|img| {
        let f = inode_of(img, "/README.txt");
        img[f + 8..f + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    });
    refused(&p, "more than the image holds");
    let (_d, p) = damaged(|img| {
        let e = entry_at(img, inode_at(2, 0), "README.txt");
        img[e + 32] = 200;
    });
    refused(&p, "slot 200");
    let (_d, p) = damaged(|img| img.truncate(img.len() / 2));
    refused(&p, "truncated");
}

/// Random bytes flipped in the metadata of the sample (superblock, maps,
/// inode blocks, directory blocks, the big file's chain): every mount
/// either fails with an error or reads every name it lists; none panics.
#[test]
fn random_damage_never_panics_or_hangs() {
    let pristine = std::fs::read(sample()).unwrap();
    let big_chain = le32(&pristine, inode_of(&pristine, "/data/big") + 20) as usize;
    let meta_blocks: Vec<usize> = (0..8).chain([big_chain]).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.img");
    let mut rng = Rng::new(0x5eed_0001);
    let (mut mounted, mut refused) = (0, 0);
    for _ in 0..150 {
        let mut img = pristine.clone();
        for _ in 0..1 + rng.below(8) {
            let block = meta_blocks[rng.below(meta_blocks.len() as u64) as usize];
            let at = block * BS + rng.below(BS as u64) as usize;
            img[at] ^= 1 << rng.below(8);
        }
        std::fs::write(&path, &img).unwrap();
        match Fs::mount(&path, MountOptions::default()) {
            Err(e) => {
                assert!(!e.message.is_empty());
                refused += 1;
            }
            Ok(mut fs) => {
                mounted += 1;
                // Whatever mounted was checked whole: every name reads.
                let shown = snapshot(&mut fs, Budget::default());
                let bad: Vec<_> = shown.iter().filter(|(_, s)| !s.is_readable()).collect();
                assert!(bad.is_empty(), "{bad:?}");
            }
        }
    }
    assert!(
        mounted > 0 && refused > 0,
        "{mounted} mounted, {refused} refused"
    );
}

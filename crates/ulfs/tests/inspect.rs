//! `ulfs::inspect` (issue 11, requirement 4: the library behind `ulfs
//! debug`). Images are made through the public API (a directory of 2,000
//! names, whose index splits; a sparse file with a single and a double
//! indirect block; short and long symlinks; an unlinked-but-open file on a
//! crash image), then every report is checked against what the API says
//! (`Info`, `stat`, the names made), on a clean image, on a crash image
//! whose journal holds a committed transaction, on a mode `none` image, and
//! on damaged images (checksums broken, both superblocks gone, random
//! bytes in metadata blocks), which must give reports or errors, never a
//! panic. The image file must be byte-identical after every inspection.
//!
//! `ULFS_INSPECT_SHOW=1` prints every report (with `--nocapture`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use ulfs::format::BLOCK_SIZE;
use ulfs::inspect::{BlockDecoded, DirNodeKind, Extent, Inspector, Place, Role};
use ulfs::store::{Fate, SimDisk};
use ulfs::{Fs, MkfsOptions, Mode, MountOptions, format_store};

const BS: u64 = BLOCK_SIZE as u64;
const NAMES: usize = 2000;
const LONG_TARGET: usize = 300;

fn show(what: &str, text: &str) {
    if std::env::var_os("ULFS_INSPECT_SHOW").is_some() {
        println!("===== {what}\n{text}");
    }
}

fn write_at(fs: &mut Fs, path: &str, data: &[u8], at: u64) {
    let fd = fs
        .open(path, libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    assert_eq!(fs.pwrite(fd, data, at).unwrap(), data.len());
    fs.close(fd).unwrap();
}

fn long_target() -> String {
    let mut t = String::from("d/");
    while t.len() < LONG_TARGET {
        t.push_str("long/");
    }
    t.truncate(LONG_TARGET);
    t
}

/// Fills a mounted file system with one of each structure.
fn populate(fs: &mut Fs) {
    fs.mkdir("/big", 0o755).unwrap();
    for i in 0..NAMES {
        let fd = fs
            .open(
                format!("/big/name-{i:04}"),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        fs.close(fd).unwrap();
    }
    fs.mkdir("/d", 0o755).unwrap();
    write_at(fs, "/d/hello.txt", b"hello, world\n", 0);
    // Block 0, a hole, block 20 (single indirect), block 1100 (double).
    write_at(fs, "/sparse", b"head", 0);
    write_at(fs, "/sparse", b"twenty", 20 * BS);
    write_at(fs, "/sparse", b"far", 1100 * BS);
    fs.symlink("d/hello.txt", "/link").unwrap();
    fs.symlink(long_target(), "/longlink").unwrap();
}

/// A clean image, unmounted, in `dir`.
fn clean_image(dir: &Path, mode: Mode) -> PathBuf {
    let img = dir.join("clean.img");
    ulfs::mkfs(
        &img,
        &MkfsOptions {
            size: 16 << 20,
            mode,
            label: "inspect".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
    populate(&mut fs);
    fs.unmount().unwrap();
    img
}

/// Runs `f` on an inspector of `img` and checks the image is unchanged.
fn inspect<T>(img: &Path, f: impl FnOnce(&Inspector) -> T) -> T {
    let before = std::fs::read(img).unwrap();
    let out = {
        let insp = Inspector::open(img).unwrap();
        f(&insp)
    };
    assert!(
        std::fs::read(img).unwrap() == before,
        "inspecting changed the image"
    );
    out
}

#[test]
fn superblock_matches_info() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    inspect(&img, |insp| {
        assert!(insp.mount_error().is_none());
        let info = insp.info().unwrap();
        let r = insp.superblock().unwrap();
        show("superblock", &r.to_string());
        assert_eq!(r.chosen, Some(0));
        for copy in [&r.primary, &r.secondary] {
            assert_eq!(copy.verdict, ulfs::inspect::SbVerdict::Valid);
            assert_eq!(copy.crc_stored, copy.crc_computed);
            let v = |name: &str| copy.field(name).unwrap().value;
            assert_eq!(v("version"), info.version as u64);
            assert_eq!(v("block_size"), info.block_size as u64);
            assert_eq!(v("total_blocks"), info.total_blocks);
            assert_eq!(v("free_blocks"), info.free_blocks);
            assert_eq!(v("used_inodes"), info.used_inodes);
            assert_eq!(v("journal_blocks"), info.journal_blocks as u64);
            assert_eq!(v("mount_count"), info.mount_count as u64);
            assert_eq!(v("mode"), 1);
            assert_eq!(v("state"), 1, "clean");
            assert_eq!(copy.field("label").unwrap().text, "\"inspect\"");
        }
        assert!(r.replayed_primary.is_none());
        let text = r.to_string();
        for name in [
            "total_blocks",
            "free_blocks",
            "orphan_head",
            "hash_key",
            "uuid",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
        assert!(text.contains(&format!("{}", info.total_blocks)));
    });
}

#[test]
fn owner_block_map_and_inode_of_a_sparse_file() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    let (ino, st_blocks) = {
        let mut fs = Fs::mount(
            &img,
            MountOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let st = fs.stat("/sparse").unwrap();
        (st.ino, st.blocks)
    };
    inspect(&img, |insp| {
        assert_eq!(insp.resolve("/sparse").unwrap(), ino);
        assert_eq!(insp.target("/sparse").unwrap(), ino);
        assert_eq!(insp.target(&ino.to_string()).unwrap(), ino);
        let i = insp.inode(ino).unwrap();
        show("inode /sparse", &i.to_string());
        assert!(i.slot_used && i.invalid.is_none());
        assert_eq!(i.inode.size, 1100 * BS + 3);
        assert_eq!(i.inode.blocks * 8, st_blocks);
        assert_eq!((i.bid as u64) * 16 + i.slot as u64, ino);

        let m = insp.block_map(ino, None).unwrap();
        show("block map /sparse", &m.to_string());
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        assert_eq!(m.data_blocks, 3);
        // The single indirect block, and a double with one level-1 below.
        assert_eq!(m.indirect.len(), 3);
        assert_eq!(m.data_blocks + m.indirect.len() as u64, i.inode.blocks);
        assert!(matches!(
            m.extents[0],
            Extent::Mapped {
                logical: 0,
                len: 1,
                ..
            }
        ));
        assert_eq!(
            m.extents[1],
            Extent::Hole {
                logical: 1,
                len: 19
            }
        );
        assert_eq!(m.physical(5), Some(0), "a hole");
        let text = m.to_string();
        assert!(text.contains("hole"), "{text}");
        assert!(text.contains("single indirect") && text.contains("double indirect"));

        // Each data block's owner is this file at its logical block.
        for lblk in [0, 20, 1100] {
            let bid = m.physical(lblk).unwrap();
            assert_ne!(bid, 0);
            let o = insp.owner(bid as u64).unwrap();
            show(&format!("owner of block {bid}"), &o.to_string());
            assert_eq!(o.bitmap, Some(true));
            assert_eq!(o.owners.len(), 1, "{o}");
            assert_eq!(o.owners[0].role, Role::Data { ino, lblk });
            assert!(
                o.to_string()
                    .contains(&format!("data block {lblk} (logical) of inode {ino}"))
            );
        }
        for ind in &m.indirect {
            let o = insp.owner(ind.bid as u64).unwrap();
            assert!(
                matches!(o.owners[..], [ref x] if matches!(x.role, Role::Indirect { ino: i, level, .. } if i == ino && level == ind.level)),
                "{o}"
            );
        }
        // The inode block, a map block, a superblock, a free block.
        let o = insp.owner(i.bid as u64).unwrap();
        assert!(
            matches!(&o.owners[0].role, Role::InodeBlock { used, on_list: true, .. } if used.contains(&ino)),
            "{o}"
        );
        let sb = insp.superblock().unwrap();
        let first_group = sb.primary.field("first_group").unwrap().value;
        let o = insp.owner(first_group).unwrap();
        assert_eq!(o.owners[0].role, Role::MapBlock { group: 0 });
        assert_eq!(
            insp.owner(1).unwrap().owners[0].role,
            Role::Superblock { primary: false }
        );
        let total = sb.primary.field("total_blocks").unwrap().value;
        let o = insp.owner(total - 1).unwrap();
        show("owner of the last block", &o.to_string());
        assert!(o.owners.is_empty() && o.bitmap == Some(false), "{o}");
        assert!(o.to_string().contains("free"));
    });
}

#[test]
fn dir_tree_of_a_big_directory_shows_every_name() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    inspect(&img, |insp| {
        let ino = insp.resolve("/big").unwrap();
        let t = insp.dir_tree(ino, None).unwrap();
        let text = t.to_string();
        show("dir tree /big (all)", &text);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        assert!(t.depth >= 2, "depth {}", t.depth);
        assert!(t.inner_nodes().count() >= 1);
        assert!(t.leaves().count() >= 2);
        assert_eq!(t.entries, NAMES as u64);
        assert_eq!(t.inode_entries, NAMES as u64);
        let names: BTreeSet<String> = t
            .all_entries()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .collect();
        let want: BTreeSet<String> = (0..NAMES).map(|i| format!("name-{i:04}")).collect();
        assert_eq!(names, want);
        for n in &want {
            assert!(text.contains(&format!("\"{n}\"")), "{n} not shown");
        }
        assert!(t.all_entries().all(|e| e.hash_ok && e.dtype == 8));
        assert_eq!(t.chain, t.leaves().map(|l| l.bid).collect::<Vec<_>>());
        assert!(text.contains(&format!("depth {}", t.depth)));
        // Bounded by default: a few entries per leaf, and how many more.
        let short = insp.dir_tree(ino, Some(3)).unwrap().to_string();
        show("dir tree /big (3 per leaf)", &short);
        assert!(short.contains("more entries"));
        assert!(short.len() < text.len() / 4);
        // The root's one entry, and `/d` named in its parent.
        let d = insp.resolve("/d").unwrap();
        let i = insp.inode(d).unwrap();
        assert_eq!(i.name.as_deref(), Some(&b"d"[..]));
        let t = insp.dir_tree(d, None).unwrap();
        assert_eq!(t.depth, 1);
        assert!(
            matches!(&t.nodes[0].kind, DirNodeKind::Leaf { entries, .. } if entries[0].name == b"hello.txt")
        );
    });
}

#[test]
fn symlinks_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    inspect(&img, |insp| {
        let link = insp.resolve("/link").unwrap();
        let i = insp.inode(link).unwrap();
        show("inode /link", &i.to_string());
        assert_eq!(i.target.as_deref(), Some(&b"d/hello.txt"[..]));
        assert!(i.to_string().contains("inline"));
        let long = insp.resolve("/longlink").unwrap();
        let i = insp.inode(long).unwrap();
        assert_eq!(i.target.as_deref(), Some(long_target().as_bytes()));
        let m = insp.block_map(long, None).unwrap();
        assert_eq!(m.data_blocks, 1);
        let o = insp.owner(m.physical(0).unwrap() as u64).unwrap();
        assert_eq!(o.owners[0].role, Role::Data { ino: long, lblk: 0 });
        // A symlink is followed in the middle of a path, not at its end.
        let hello = insp.resolve("/d/hello.txt").unwrap();
        assert_eq!(insp.resolve("/link").unwrap(), link);
        let via = insp.resolve("/big/../d/./hello.txt").unwrap();
        assert_eq!(via, hello);
        assert!(insp.resolve("/nothing").is_err());
        assert!(insp.resolve("/d/hello.txt/x").is_err());
        assert!(insp.target("bogus").is_err());
        // Not an inode number, a free slot, a block that holds no inodes.
        assert!(insp.inode(0).is_err());
        assert!(insp.inode(16 * 5).is_err());
        assert!(insp.inode(u64::MAX).is_err());
        let free_slot = insp.inode(hello / 16 * 16 + 15);
        if let Ok(r) = free_slot {
            assert!(!r.slot_used);
        }
    });
}

#[test]
fn block_decodes_each_kind() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    inspect(&img, |insp| {
        let sb = insp.superblock().unwrap();
        let first_group = sb.primary.field("first_group").unwrap().value;
        let free = sb.primary.field("free_blocks").unwrap().value;
        let map = insp.block(first_group).unwrap();
        show("block: map block", &map.to_string());
        assert_eq!(map.place, Place::MapBlock { group: 0 });
        assert_eq!(map.kind, Some("map block"));
        let (s, c) = map.crc.unwrap();
        assert_eq!(s, c);
        match &map.decoded {
            BlockDecoded::Map {
                group,
                free: f,
                counted_free,
                used,
            } => {
                assert_eq!(*group, 0);
                assert_eq!(*f as u64, free, "one group holds every free block");
                assert_eq!(*counted_free, Some(*f));
                assert!(!used.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let text = map.to_string();
        assert!(text.contains("map block of group 0") && text.contains("used blocks:"));
        assert!(text.contains("*\n"), "the hex dump stars repeated lines");

        let b0 = insp.block(0).unwrap();
        show("block 0", &b0.to_string());
        assert!(matches!(b0.decoded, BlockDecoded::Superblock(_)));
        let jh = insp.block(2).unwrap();
        show("block 2", &jh.to_string());
        assert!(matches!(
            jh.decoded,
            BlockDecoded::JournalHeader { valid: Some(_), .. }
        ));

        let big = insp.resolve("/big").unwrap();
        let t = insp.dir_tree(big, Some(1)).unwrap();
        let inner = insp.block(t.root as u64).unwrap();
        show("block: inner node", &inner.to_string());
        assert!(matches!(
            inner.decoded,
            BlockDecoded::Inner { level: 1, .. }
        ));
        let leaf = t.leaves().next().unwrap().bid;
        let leaf = insp.block(leaf as u64).unwrap();
        show("block: leaf", &leaf.to_string());
        assert!(
            matches!(&leaf.decoded, BlockDecoded::Leaf { owner, entries, .. } if *owner == big && !entries.is_empty())
        );

        let sparse = insp.resolve("/sparse").unwrap();
        let m = insp.block_map(sparse, None).unwrap();
        let ind = insp.block(m.indirect[0].bid as u64).unwrap();
        show("block: indirect", &ind.to_string());
        assert!(
            matches!(&ind.decoded, BlockDecoded::Indirect { owner, pointers } if *owner == sparse && pointers.len() == 1)
        );
        let i = insp.inode(sparse).unwrap();
        let ib = insp.block(i.bid as u64).unwrap();
        show("block: inode block", &ib.to_string());
        assert!(matches!(ib.decoded, BlockDecoded::Inodes { .. }));
        let data = insp.block(m.physical(0).unwrap() as u64).unwrap();
        show("block: data", &data.to_string());
        assert!(matches!(data.decoded, BlockDecoded::None));
        assert_eq!(data.bitmap, Some(true));
        assert!(data.to_string().contains("head"));
        // Past the image: an error, not a panic.
        let total = sb.image_blocks;
        assert!(insp.block(total).is_err());
        assert!(insp.block(u64::MAX).is_err());
        assert!(insp.owner(total).is_err());
    });
}

/// A crash image in mode journal: a synced change whose home blocks were
/// lost, so the log holds a committed transaction; and a file unlinked
/// while open, so the orphan list is not empty.
fn crash_image(dir: &Path) -> (PathBuf, u64, u64) {
    let store = format_store(
        Box::new(SimDisk::new(4096)),
        &MkfsOptions {
            mode: Mode::Journal,
            ..Default::default()
        },
    )
    .unwrap();
    let mut fs = Fs::mount_store(store, MountOptions::default()).unwrap();
    fs.mkdir("/a", 0o755).unwrap();
    write_at(&mut fs, "/a/f", b"committed", 0);
    let fd = fs
        .open("/orphan", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    fs.write(fd, &[7u8; 10_000]).unwrap();
    let orphan = fs.fstat(fd).unwrap().ino;
    fs.unlink("/orphan").unwrap();
    let f = fs.stat("/a/f").unwrap().ino;
    fs.sync().unwrap();
    let image = fs.sim_disk().unwrap().crash_image(|_| Fate::Lost);
    fs.abandon();
    drop(fs);
    let img = dir.join("crash.img");
    std::fs::write(&img, image).unwrap();
    (img, orphan, f)
}

#[test]
fn journal_of_a_crash_lists_the_committed_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (img, orphan, f) = crash_image(dir.path());
    inspect(&img, |insp| {
        let j = insp.journal(None).unwrap();
        let text = j.to_string();
        show("journal after a crash", &text);
        assert!(j.present);
        let h = j.header.as_ref().unwrap();
        assert!(h.valid.is_some() && h.crc.0 == h.crc.1);
        let plan = j.replay.as_ref().unwrap();
        assert!(!plan.applied.is_empty());
        assert_eq!(j.mount_replayed, Some(plan.applied.len() as u64));
        let replayed: Vec<_> = j.transactions.iter().filter(|t| t.replayed).collect();
        assert_eq!(replayed.len(), plan.applied.len());
        for t in &replayed {
            assert!(t.complete && t.commit.is_some());
            assert!(
                t.copies
                    .iter()
                    .zip(&t.copy_kinds)
                    .any(|(&(home, _), kind)| home == 0 && kind == "ULFS"),
                "the superblock"
            );
        }
        assert!(text.contains("committed: replay installs it"));
        // Replayed in memory: the file and the orphan are there.
        assert_eq!(insp.resolve("/a/f").unwrap(), f);
        let sb = insp.superblock().unwrap();
        show("superblock after a crash", &sb.to_string());
        let replayed = sb.replayed_primary.as_ref().expect("block 0 is in the log");
        assert_eq!(replayed.field("orphan_head").unwrap().value, orphan);
        assert_eq!(replayed.field("state").unwrap().value, 0, "dirty");
        let i = insp.inode(orphan).unwrap();
        show("inode of the orphan", &i.to_string());
        assert_eq!(i.inode.nlink, 0);
        assert_eq!(i.orphan_position, Some(0));
        assert!(i.to_string().contains("on the orphan list"));
        let m = insp.block_map(orphan, None).unwrap();
        let o = insp.owner(m.physical(0).unwrap() as u64).unwrap();
        show("owner of the orphan's block", &o.to_string());
        assert_eq!(
            o.owners[0].role,
            Role::Data {
                ino: orphan,
                lblk: 0
            }
        );
        assert!(o.to_string().contains("unlinked"));
        // A home block of the transaction shows the journal's copy.
        let home = replayed_home(&j);
        let b = insp.block(home as u64).unwrap();
        show("a replayed home block", &b.to_string());
        assert!(b.from_journal);
        let d = insp.block_on_disk(home as u64).unwrap();
        assert!(!d.from_journal && d.bytes != b.bytes);
        // A log block is named by the journal scan.
        let t = j.transactions.iter().find(|t| t.replayed).unwrap();
        let o = insp.owner(t.first as u64).unwrap();
        assert!(
            matches!(o.owners[0].role, Role::JournalDescriptor { .. }),
            "{o}"
        );
        let (home, pos) = t.copies[0];
        let o = insp.owner(pos as u64).unwrap();
        assert!(
            matches!(o.owners[0].role, Role::JournalCopy { home: h, .. } if h == home),
            "{o}"
        );
    });
}

/// A home the replayed transactions write whose disk copy differs.
fn replayed_home(j: &ulfs::inspect::JournalReport) -> u32 {
    j.transactions
        .iter()
        .filter(|t| t.replayed)
        .flat_map(|t| t.copies.iter())
        .map(|&(home, _)| home)
        .find(|&h| h != 0)
        .unwrap()
}

#[test]
fn mode_none_has_no_journal() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::None);
    inspect(&img, |insp| {
        let j = insp.journal(None).unwrap();
        show("journal, mode none", &j.to_string());
        assert!(!j.present);
        assert!(j.to_string().contains("no journal"));
        let big = insp.resolve("/big").unwrap();
        assert_eq!(insp.dir_tree(big, None).unwrap().entries, NAMES as u64);
    });
    // Left by a crash after a sync, with a file unlinked while open: the
    // orphan list holds it, and the dirty image still mounts read-only.
    let orphan = {
        let mut fs = Fs::mount(&img, MountOptions::default()).unwrap();
        let fd = fs
            .open("/orphan", libc::O_CREAT | libc::O_RDWR, 0o644)
            .unwrap();
        fs.write(fd, b"still open").unwrap();
        let ino = fs.fstat(fd).unwrap().ino;
        fs.unlink("/orphan").unwrap();
        fs.sync().unwrap();
        fs.abandon();
        ino
    };
    inspect(&img, |insp| {
        assert!(insp.mount_error().is_none());
        let sb = insp.superblock().unwrap();
        show("superblock, mode none after a crash", &sb.to_string());
        assert_eq!(sb.primary.field("orphan_head").unwrap().value, orphan);
        assert_eq!(sb.primary.field("state").unwrap().value, 0);
        let i = insp.inode(orphan).unwrap();
        assert_eq!((i.inode.nlink, i.orphan_position), (0, Some(0)));
        let m = insp.block_map(orphan, None).unwrap();
        let o = insp.owner(m.physical(0).unwrap() as u64).unwrap();
        assert_eq!(
            o.owners[0].role,
            Role::Data {
                ino: orphan,
                lblk: 0
            }
        );
    });
}

/// Block numbers of one of each metadata kind of a clean image.
fn metadata_blocks(insp: &Inspector) -> Vec<(String, u32)> {
    let mut out = vec![
        ("primary superblock".to_string(), 0),
        ("secondary".into(), 1),
    ];
    let sb = insp.superblock().unwrap();
    let v = |n: &str| sb.primary.field(n).unwrap().value as u32;
    out.push(("map block".into(), v("first_group")));
    if v("journal_blocks") > 0 {
        out.push(("journal header".into(), v("journal_start")));
    }
    let big = insp.resolve("/big").unwrap();
    let t = insp.dir_tree(big, None).unwrap();
    out.push(("inner node".into(), t.root));
    out.push(("leaf".into(), t.leaves().nth(1).unwrap().bid));
    let root = insp.dir_tree(insp.resolve("/").unwrap(), None).unwrap();
    out.push(("root leaf".into(), root.root));
    let sparse = insp.resolve("/sparse").unwrap();
    let m = insp.block_map(sparse, None).unwrap();
    for b in &m.indirect {
        out.push((format!("indirect level {}", b.level), b.bid));
    }
    out.push(("inode block".into(), insp.inode(sparse).unwrap().bid));
    out.push(("root inode block".into(), insp.inode(big).unwrap().bid));
    out
}

/// Every report on `insp`, whatever the image; returns their text.
fn everything(insp: &Inspector, blocks: &[u32]) -> String {
    let mut out = String::new();
    let mut add = |r: Result<String, ulfs::Error>| match r {
        Ok(s) => {
            out.push_str(&s);
            out.push('\n');
        }
        Err(e) => {
            out.push_str("error: ");
            out.push_str(&e.message);
            out.push('\n');
        }
    };
    add(insp.superblock().map(|r| r.to_string()));
    add(insp.journal(Some(4)).map(|r| r.to_string()));
    for &b in blocks {
        add(insp.block(b as u64).map(|r| r.to_string()));
        add(insp.block_on_disk(b as u64).map(|r| r.to_string()));
        add(insp.owner(b as u64).map(|r| r.to_string()));
    }
    // By path, and by number: a damaged path may hide a sound inode.
    let root = insp
        .superblock()
        .ok()
        .and_then(|s| s.primary.field("root_ino").map(|f| f.value))
        .unwrap_or(49);
    let mut inos: Vec<u64> = (root..root + 4).collect();
    for path in [
        "/",
        "/big",
        "/d",
        "/d/hello.txt",
        "/sparse",
        "/link",
        "/longlink",
    ] {
        let ino = insp.resolve(path);
        add(ino.clone().map(|i| i.to_string()));
        inos.extend(ino);
    }
    for ino in inos {
        {
            add(insp.inode(ino).map(|r| r.to_string()));
            add(insp.dir_tree(ino, Some(2)).map(|r| r.to_string()));
            add(insp.block_map(ino, Some(4)).map(|r| r.to_string()));
        }
    }
    out
}

fn damaged_copy(dir: &Path, img: &Path, name: &str, f: impl FnOnce(&mut [u8])) -> PathBuf {
    let mut bytes = std::fs::read(img).unwrap();
    f(&mut bytes);
    let out = dir.join(name);
    std::fs::write(&out, bytes).unwrap();
    out
}

#[test]
fn damaged_metadata_gives_reports_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    let blocks = inspect(&img, metadata_blocks);
    let all: Vec<u32> = blocks.iter().map(|b| b.1).collect();
    for (what, bid) in &blocks {
        // Bytes in the body flipped: the checksum no longer holds.
        let bad = damaged_copy(dir.path(), &img, "flipped.img", |b| {
            let off = *bid as usize * BLOCK_SIZE + 300;
            for x in &mut b[off..off + 8] {
                *x ^= 0x5a;
            }
        });
        inspect(&bad, |insp| {
            let text = everything(insp, &all);
            show(&format!("damaged {what} ({bid})"), &text);
            let r = insp.block_on_disk(*bid as u64).unwrap();
            let (s, c) = r.crc.unwrap_or_else(|| panic!("{what}: {r}"));
            assert_ne!(s, c, "{what}");
            assert!(r.to_string().contains("BAD"), "{what}: {r}");
        });
    }
    // Both superblocks gone: the raw blocks remain.
    let bad = damaged_copy(dir.path(), &img, "nosb.img", |b| {
        b[..2 * BLOCK_SIZE].fill(0xee);
    });
    inspect(&bad, |insp| {
        assert!(insp.mount_error().is_some());
        let sb = insp.superblock().unwrap();
        show("no superblock", &sb.to_string());
        assert_eq!(sb.chosen, None);
        assert!(insp.resolve("/big").is_err());
        assert!(insp.journal(None).is_err());
        let b = insp.block(5).unwrap();
        assert_eq!(b.place, Place::Unknown);
        everything(insp, &all);
    });
    // The journal header destroyed: mount fails, the structures still
    // read from the raw blocks.
    let jstart = blocks.iter().find(|b| b.0 == "journal header").unwrap().1;
    let bad = damaged_copy(dir.path(), &img, "nojournal.img", |b| {
        b[jstart as usize * BLOCK_SIZE + 8] ^= 1;
    });
    inspect(&bad, |insp| {
        assert!(insp.mount_error().is_some());
        let j = insp.journal(None).unwrap();
        show("damaged journal header", &j.to_string());
        assert!(j.header.as_ref().unwrap().valid.is_none());
        assert!(j.to_string().contains("UNREADABLE"));
        let root = insp.dir_tree(root_ino(insp), None).unwrap();
        assert!(root.entries >= 5);
    });
}

fn root_ino(insp: &Inspector) -> u64 {
    insp.superblock()
        .unwrap()
        .primary
        .field("root_ino")
        .unwrap()
        .value
}

/// Seeded random damage: bytes of metadata blocks overwritten, headers
/// included, with the checksum recomputed half the time (as a crafted
/// image would be). Every report must come back. `ULFS_INSPECT_ROUNDS=n`
/// runs n rounds instead of 60.
#[test]
fn random_damage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    let blocks = inspect(&img, metadata_blocks);
    let all: Vec<u32> = blocks.iter().map(|b| b.1).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rounds = std::env::var("ULFS_INSPECT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(60);
    for round in 0..rounds {
        let (what, bid) = &blocks[next() as usize % blocks.len()];
        let reseal = round % 2 == 0;
        let edits: Vec<(usize, u8)> = (0..1 + next() % 6)
            .map(|_| {
                // Mostly the first bytes (headers, counts, pointers).
                let off = if next() % 2 == 0 {
                    next() as usize % 64
                } else {
                    next() as usize % BLOCK_SIZE
                };
                (off, next() as u8)
            })
            .collect();
        let bad = damaged_copy(dir.path(), &img, "random.img", |b| {
            let base = *bid as usize * BLOCK_SIZE;
            for &(off, v) in &edits {
                b[base + off] = v;
            }
            if reseal && !(*bid == 0 || *bid == 1) {
                let blk: &mut [u8; BLOCK_SIZE] =
                    (&mut b[base..base + BLOCK_SIZE]).try_into().unwrap();
                ulfs::format::seal_block(blk);
            }
        });
        let before = std::fs::read(&bad).unwrap();
        if let Ok(insp) = Inspector::open(&bad) {
            let text = everything(&insp, &all);
            show(&format!("round {round}: {what} ({bid}) {edits:?}"), &text);
        }
        assert!(std::fs::read(&bad).unwrap() == before);
    }
}

/// The inspector refuses a writable store: nothing here may write.
#[test]
fn a_writable_store_is_refused() {
    let store = format_store(Box::new(SimDisk::new(1024)), &MkfsOptions::default()).unwrap();
    let cell = std::sync::Mutex::new(Some(store));
    let r = Inspector::open_store_with("sim", &|| {
        Ok(cell.lock().unwrap().take().expect("one store"))
    });
    assert!(r.is_err());
}

/// Edits block `bid` of a copy of `img` and seals its checksum again, as
/// a crafted image would be.
fn crafted(dir: &Path, img: &Path, bid: u32, f: impl FnOnce(&mut [u8; BLOCK_SIZE])) -> PathBuf {
    damaged_copy(dir, img, "crafted.img", |b| {
        let base = bid as usize * BLOCK_SIZE;
        let blk: &mut [u8; BLOCK_SIZE] = (&mut b[base..base + BLOCK_SIZE]).try_into().unwrap();
        f(blk);
        ulfs::format::seal_block(blk);
    })
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Loops and lies with valid checksums, which random damage seldom
/// builds: every walk must stop, and say why.
#[test]
fn crafted_loops_are_bounded_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let img = clean_image(dir.path(), Mode::Journal);
    let blocks = inspect(&img, metadata_blocks);
    let all: Vec<u32> = blocks.iter().map(|b| b.1).collect();
    let at = |what: &str| blocks.iter().find(|b| b.0 == what).unwrap().1;
    let (root, big, sparse, sparse_data, orphan_head) = inspect(&img, |insp| {
        let sparse = insp.resolve("/sparse").unwrap();
        let data = insp.block_map(sparse, None).unwrap().physical(20).unwrap();
        (
            root_ino(insp),
            insp.resolve("/big").unwrap(),
            sparse,
            data,
            104,
        )
    });
    let check = |img: &Path, what: &str, f: &dyn Fn(&Inspector)| {
        inspect(img, |insp| {
            let text = everything(insp, &all);
            show(what, &text);
            f(insp);
        });
    };

    // The root's leaf chain loops on itself.
    let leaf = at("root leaf");
    let bad = crafted(dir.path(), &img, leaf, |b| put_u32(b, 20, leaf));
    check(&bad, "leaf chain loop", &|insp| {
        let t = insp.dir_tree(root, None).unwrap();
        assert!(t.problems.iter().any(|p| p.contains("loops")), "{t}");
    });
    // An inner node names itself as a child.
    let inner = at("inner node");
    let bad = crafted(dir.path(), &img, inner, |b| put_u32(b, 32 + 12 + 8, inner));
    check(&bad, "index loop", &|insp| {
        let t = insp.dir_tree(big, None).unwrap();
        assert!(!t.problems.is_empty(), "{t}");
    });
    // Indirect blocks that name themselves.
    let single = blocks.iter().find(|b| b.0 == "indirect level 1").unwrap().1;
    let double = at("indirect level 2");
    let bad = crafted(dir.path(), &img, single, |b| put_u32(b, 16, single));
    let bad2 = crafted(dir.path(), &bad, double, |b| put_u32(b, 20, double));
    check(&bad2, "indirect loops", &|insp| {
        let m = insp.block_map(sparse, None).unwrap();
        assert!(
            m.problems.iter().any(|p| p.contains("already named")),
            "{m}"
        );
        let o = insp.owner(sparse_data as u64).unwrap();
        assert!(
            matches!(o.owners[0].role, Role::Data { lblk: 20, .. }),
            "{o}"
        );
    });
    // The inode block list loops.
    let iblock = at("inode block");
    let bad = crafted(dir.path(), &img, iblock, |b| put_u32(b, 8, iblock));
    check(&bad, "inode list loop", &|insp| {
        let o = insp.owner(sparse_data as u64).unwrap();
        assert!(o.notes.iter().any(|n| n.contains("loops")), "{o}");
        assert!(
            matches!(o.owners[0].role, Role::Data { lblk: 20, .. }),
            "{o}"
        );
    });
    // The orphan list: the superblock names the sparse file, which names
    // itself.
    let bad = crafted(dir.path(), &img, 0, |b| put_u64(b, orphan_head, sparse));
    let bad = {
        let slot = (sparse % 16) as usize * 256;
        crafted(dir.path(), &bad, (sparse / 16) as u32, |b| {
            put_u64(b, slot + 104, sparse)
        })
    };
    check(&bad, "orphan loop", &|insp| {
        let i = insp.inode(big).unwrap();
        assert!(i.notes.iter().any(|n| n.contains("loops")), "{i}");
        assert_eq!(insp.inode(sparse).unwrap().orphan_position, Some(0));
    });
    // A descriptor of the next transaction announcing more copies than a
    // descriptor holds, and one naming homes replay never writes.
    let jstart = at("journal header");
    let next_seq = inspect(&img, |insp| {
        insp.journal(None).unwrap().header.unwrap().next_seq
    });
    let descriptor = |count: u32, homes: Vec<u32>| {
        move |b: &mut [u8; BLOCK_SIZE]| {
            b.fill(0);
            b[..4].copy_from_slice(b"UJDS");
            put_u64(b, 8, next_seq);
            put_u32(b, 16, count);
            for (i, &h) in homes.iter().enumerate() {
                put_u32(b, 32 + 4 * i, h);
            }
        }
    };
    let bad = crafted(dir.path(), &img, jstart + 1, descriptor(5000, vec![]));
    check(&bad, "descriptor count", &|insp| {
        let j = insp.journal(None).unwrap();
        let p = j.replay.as_ref().unwrap();
        assert!(p.applied.is_empty() && p.stop_at == jstart + 1, "{j}");
        assert!(p.why_stop.contains("announcing 5000 copies"), "{j}");
    });
    let bad = crafted(
        dir.path(),
        &img,
        jstart + 1,
        descriptor(3, vec![jstart, 1, u32::MAX]),
    );
    check(&bad, "descriptor homes", &|insp| {
        let j = insp.journal(None).unwrap();
        let p = j.replay.as_ref().unwrap();
        assert!(p.why_stop.contains("never writes"), "{j}");
    });
}

//! The crash workloads (each a seeded sequence of calls) and how the CI
//! and long runs drive them.

use super::*;

pub fn long_name(rng: &mut Rng, n: usize) -> Vec<u8> {
    const CH: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-.";
    let len = rng.range(30, 250) as usize;
    let mut v = format!("{n:05}-").into_bytes();
    while v.len() < len {
        v.push(*rng.pick(CH));
    }
    v
}

/// Many files in one directory, long names: the index splits (and shrinks
/// back as the storm of unlinks empties it).
pub fn wl_storm(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.op(Op::Mkdir {
        path: b"/d".to_vec(),
    });
    r.op(Op::Mkdir {
        path: b"/e".to_vec(),
    });
    let mut names: Vec<Path> = Vec::new();
    let mut n = 0;
    for _ in 0..240 * scale {
        if names.len() < 30 || rng.chance(8, 10) {
            let dir: &[u8] = if rng.chance(1, 10) { b"/e" } else { b"/d" };
            let p = join(dir, &long_name(rng, n));
            n += 1;
            let len = if rng.chance(1, 3) {
                rng.below(9000) as usize
            } else {
                0
            };
            r.create(&p, len, rng.next());
            names.push(p);
        } else {
            let i = rng.below(names.len() as u64) as usize;
            let p = names.swap_remove(i);
            r.op(Op::Unlink { path: p });
        }
        r.maybe_sync(rng, 25);
    }
    while names.len() > 5 {
        let i = rng.below(names.len() as u64) as usize;
        let p = names.swap_remove(i);
        r.op(Op::Unlink { path: p });
        r.maybe_sync(rng, 30);
    }
}

/// Renames: over existing files (some open), to new names across
/// directories, directories with contents, over empty directories, and
/// RENAME_EXCHANGE.
pub fn wl_rename(r: &mut Runner, rng: &mut Rng, scale: usize) {
    for d in ["/a", "/b", "/a/sub", "/a/sub/deep", "/c"] {
        r.op(Op::Mkdir { path: d.into() });
    }
    let mut n = 0;
    for d in ["/a", "/b", "/a/sub", "/a/sub/deep"] {
        for _ in 0..3 {
            let p = join(d.as_bytes(), format!("f{n}").as_bytes());
            n += 1;
            let len = rng.below(20000) as usize;
            r.create(&p, len, rng.next());
        }
    }
    r.op(Op::Sync);
    for _ in 0..70 * scale {
        let files = r.model.file_paths();
        let dirs = r.model.dir_paths();
        match rng.below(10) {
            // Over an existing file, sometimes one that is open.
            0..=2 if files.len() >= 2 => {
                let a = rng.pick(&files).clone();
                let b = rng.pick(&files).clone();
                if a == b {
                    continue;
                }
                let held = if rng.chance(1, 3) && r.open_slots().len() < 4 {
                    Some(r.open(&b, libc::O_RDWR))
                } else {
                    None
                };
                r.op(Op::Rename {
                    from: a,
                    to: b,
                    flags: 0,
                });
                if let Some(s) = held {
                    // Write to the replaced (now unlinked) file, then close.
                    let off = r.size_of(s);
                    r.op(Op::Pwrite {
                        slot: s,
                        off,
                        len: 5000,
                        fill: rng.next(),
                    });
                    r.maybe_sync(rng, 3);
                    r.op(Op::Close { slot: s });
                }
            }
            // To a new name, maybe in another directory.
            3..=4 if !files.is_empty() => {
                let a = rng.pick(&files).clone();
                let d = rng.pick(&dirs).clone();
                let to = join(&d, format!("r{n}").as_bytes());
                n += 1;
                r.op(Op::Rename {
                    from: a,
                    to,
                    flags: 0,
                });
            }
            // A directory to a new place (not into itself).
            5 => {
                let movable: Vec<&Path> = dirs.iter().filter(|d| d.as_slice() != b"/").collect();
                let a = (*rng.pick(&movable)).clone();
                let dst: Vec<&Path> = dirs
                    .iter()
                    .filter(|d| **d != a && !is_under(d, &a))
                    .collect();
                let d = (*rng.pick(&dst)).clone();
                let to = join(&d, format!("D{n}").as_bytes());
                n += 1;
                r.op(Op::Rename {
                    from: a,
                    to,
                    flags: 0,
                });
            }
            // A directory over an empty directory.
            6 => {
                let parent = rng.pick(&dirs).clone();
                let empty = join(&parent, format!("E{n}").as_bytes());
                n += 1;
                r.op(Op::Mkdir {
                    path: empty.clone(),
                });
                let movable: Vec<&Path> = dirs
                    .iter()
                    .filter(|d| d.as_slice() != b"/" && !is_under(&empty, d))
                    .collect();
                if !movable.is_empty() {
                    let a = (*rng.pick(&movable)).clone();
                    r.op(Op::Rename {
                        from: a,
                        to: empty,
                        flags: 0,
                    });
                }
            }
            // Exchange two entries (files or directories, not nested).
            7 => {
                let all: Vec<Path> = r
                    .model
                    .nodes
                    .keys()
                    .filter(|p| p.as_slice() != b"/")
                    .cloned()
                    .collect();
                let a = rng.pick(&all).clone();
                let b = rng.pick(&all).clone();
                if a != b && !is_under(&a, &b) && !is_under(&b, &a) {
                    r.op(Op::Rename {
                        from: a,
                        to: b,
                        flags: RENAME_EXCHANGE,
                    });
                }
            }
            // New files keep the supply up.
            _ => {
                let d = rng.pick(&dirs).clone();
                let p = join(&d, format!("n{n}").as_bytes());
                n += 1;
                let len = rng.below(30000) as usize;
                r.create(&p, len, rng.next());
            }
        }
        r.maybe_sync(rng, 8);
    }
}

/// Appends to one file across the direct -> single-indirect (12 blocks) and
/// single -> double-indirect (1032 blocks) boundaries, densely.
pub fn wl_bmap_dense(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.create(b"/small", 3000, rng.next());
    let s = r.open(b"/big", libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND);
    let target = 1040 * PAGE;
    let boundaries = [12 * PAGE, 1032 * PAGE];
    let mut size = 0u64;
    while size < target {
        let next_b = boundaries.iter().copied().find(|&b| b > size);
        let mut len = if rng.chance(1, 4) {
            rng.range(1, 9000)
        } else {
            rng.range(PAGE, 300 << 10)
        };
        if let Some(b) = next_b {
            // Approach the boundary, then cross it in one write.
            if size + len + 3000 > b && size + 3000 < b {
                len = b - 3000 - size;
            } else if size < b && size + 3000 >= b {
                len = 7000;
            }
        }
        r.op(Op::Append {
            slot: s,
            len: len as usize,
            fill: rng.next(),
        });
        size += len;
        r.maybe_sync(rng, 6);
    }
    r.op(Op::Close { slot: s });
    for _ in 0..scale {
        // Overwrite in place, then shrink back across both levels, grow.
        let w = r.open(b"/big", libc::O_WRONLY);
        let off = rng.below(size);
        r.op(Op::Pwrite {
            slot: w,
            off,
            len: 10000,
            fill: rng.next(),
        });
        size = size.max(off + 10000);
        r.maybe_sync(rng, 2);
        for len in [1033 * PAGE + 17, 1032 * PAGE, 13 * PAGE - 5, 3 * PAGE] {
            r.op(Op::Ftruncate { slot: w, len });
            r.maybe_sync(rng, 3);
        }
        r.op(Op::Pwrite {
            slot: w,
            off: 11 * PAGE,
            len: 3 * PAGE as usize,
            fill: rng.next(),
        });
        r.op(Op::Close { slot: w });
        r.maybe_sync(rng, 2);
    }
    r.op(Op::Unlink {
        path: b"/big".to_vec(),
    });
}

/// Sparse appends up to the triple-indirect level, hole writes, and
/// truncates back down across every level.
pub fn wl_bmap_sparse(r: &mut Runner, rng: &mut Rng, scale: usize) {
    let l1 = 12 * PAGE;
    let l2 = (12 + 1020) * PAGE;
    let l3 = (12 + 1020 + 1020 * 1020) * PAGE;
    for round in 0..2 * scale {
        let path = format!("/s{round}").into_bytes();
        let s = r.open(&path, libc::O_CREAT | libc::O_RDWR);
        let append = |r: &mut Runner, rng: &mut Rng, len: usize| {
            let off = r.size_of(s);
            r.op(Op::Pwrite {
                slot: s,
                off,
                len,
                fill: rng.next(),
            });
        };
        append(r, rng, (l1 - 700) as usize);
        append(r, rng, 9000); // across direct -> single
        r.maybe_sync(rng, 3);
        r.op(Op::Ftruncate {
            slot: s,
            len: l2 - 1000 - rng.below(3000),
        });
        append(r, rng, 6000); // across single -> double
        r.maybe_sync(rng, 3);
        r.op(Op::Ftruncate {
            slot: s,
            len: l3 - 500 - rng.below(3000),
        });
        append(r, rng, 12000); // across double -> triple
        r.maybe_sync(rng, 3);
        // Fill holes at every level.
        for off in [
            5 * PAGE + 100,
            l1 + 400 * PAGE + 7,
            l2 + 1020 * 3 * PAGE + 11,
            l3 - 5000 * PAGE,
        ] {
            r.op(Op::Pwrite {
                slot: s,
                off,
                len: 3000 + rng.below(6000) as usize,
                fill: rng.next(),
            });
            r.maybe_sync(rng, 4);
        }
        append(r, rng, 3 * PAGE as usize);
        r.maybe_sync(rng, 3);
        // Back down across the levels.
        for len in [l3 + 17, l3 - 1, l2 + 9 * PAGE, l2, l1 + 1, l1 - 3, 5000, 0] {
            r.op(Op::Ftruncate { slot: s, len });
            r.maybe_sync(rng, 4);
        }
        append(r, rng, 3 * PAGE as usize);
        r.op(Op::Ftruncate {
            slot: s,
            len: 2 << 20,
        });
        r.op(Op::Close { slot: s });
        if round % 2 == 0 {
            r.op(Op::Unlink { path });
        }
        r.maybe_sync(rng, 2);
    }
}

/// Shrinking and growing files (partial pages, holes, across the indirect
/// boundary) mixed with writes and overwrites.
pub fn wl_truncate(r: &mut Runner, rng: &mut Rng, scale: usize) {
    let mut slots = Vec::new();
    for i in 0..4 {
        let p = format!("/t{i}").into_bytes();
        let len = rng.below(60 * PAGE) as usize;
        r.create(&p, len, rng.next());
        slots.push(r.open(&p, libc::O_RDWR));
    }
    r.op(Op::Sync);
    for _ in 0..90 * scale {
        let i = rng.below(4) as usize;
        let s = slots[i];
        let size = r.size_of(s);
        match rng.below(6) {
            0 | 1 => {
                let off = rng.below(size + 3 * PAGE);
                let len = rng.range(1, 3 * PAGE) as usize;
                r.op(Op::Pwrite {
                    slot: s,
                    off,
                    len,
                    fill: rng.next(),
                });
            }
            2 | 3 => {
                let len = if rng.chance(1, 2) {
                    rng.below(size + 1)
                } else {
                    rng.below(70 * PAGE)
                };
                r.op(Op::Ftruncate { slot: s, len });
            }
            4 => {
                let len = [0, PAGE, 12 * PAGE, 12 * PAGE + 1, 13 * PAGE - 1][rng.below(5) as usize];
                r.op(Op::Truncate {
                    path: format!("/t{i}").into_bytes(),
                    len,
                });
            }
            _ => {
                // Shrink then grow right away: the tail must read as zeros.
                let cut = rng.below(size + 1);
                r.op(Op::Ftruncate { slot: s, len: cut });
                r.op(Op::Ftruncate {
                    slot: s,
                    len: cut + rng.range(1, 5 * PAGE),
                });
            }
        }
        r.maybe_sync(rng, 7);
    }
}

/// Hard links (across directories, writes through one name, unlinks of
/// some names), symlinks, and renames between names of one inode.
pub fn wl_links(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.op(Op::Mkdir {
        path: b"/l".to_vec(),
    });
    r.op(Op::Mkdir {
        path: b"/m".to_vec(),
    });
    r.create(b"/l/a", 10000, rng.next());
    r.op(Op::Link {
        from: b"/l/a".to_vec(),
        to: b"/m/a2".to_vec(),
    });
    r.op(Op::Link {
        from: b"/l/a".to_vec(),
        to: b"/l/a3".to_vec(),
    });
    let s = r.open(b"/m/a2", libc::O_WRONLY | libc::O_APPEND);
    r.op(Op::Append {
        slot: s,
        len: 70000,
        fill: rng.next(),
    });
    r.op(Op::Close { slot: s });
    r.op(Op::Unlink {
        path: b"/l/a".to_vec(),
    });
    r.op(Op::Rename {
        from: b"/l/a3".to_vec(),
        to: b"/m/a2".to_vec(),
        flags: 0,
    });
    r.op(Op::Symlink {
        target: b"/m/a2".to_vec(),
        path: b"/l/s".to_vec(),
    });
    r.op(Op::Symlink {
        target: "../nowhere/".repeat(20).into_bytes(),
        path: b"/l/dangling".to_vec(),
    });
    for n in 0..80 * scale {
        let files = r.model.file_paths();
        let dirs = r.model.dir_paths();
        let d = rng.pick(&dirs).clone();
        let fresh = join(&d, format!("x{n}").as_bytes());
        match rng.below(9) {
            0 | 1 if !files.is_empty() => {
                let from = rng.pick(&files).clone();
                r.op(Op::Link { from, to: fresh });
            }
            2 | 3 if files.len() > 1 => {
                let path = rng.pick(&files).clone();
                r.op(Op::Unlink { path });
            }
            4 if !files.is_empty() => {
                let p = rng.pick(&files).clone();
                let s = r.open(&p, libc::O_WRONLY | libc::O_APPEND);
                r.op(Op::Append {
                    slot: s,
                    len: rng.range(1, 20000) as usize,
                    fill: rng.next(),
                });
                r.op(Op::Close { slot: s });
            }
            5 if !files.is_empty() => {
                // rename between two names of one inode: nothing happens;
                // or onto another file.
                let a = rng.pick(&files).clone();
                let b = rng.pick(&files).clone();
                if a != b {
                    r.op(Op::Rename {
                        from: a,
                        to: b,
                        flags: 0,
                    });
                }
            }
            6 if !files.is_empty() => {
                let target = rng.pick(&files).clone();
                r.op(Op::Symlink {
                    target,
                    path: fresh,
                });
            }
            7 => {
                let links: Vec<Path> = r
                    .model
                    .nodes
                    .iter()
                    .filter(|(_, n)| matches!(n, Node::Symlink(_)))
                    .map(|(k, _)| k.clone())
                    .collect();
                if !links.is_empty() {
                    let path = rng.pick(&links).clone();
                    r.op(Op::Unlink { path });
                }
            }
            _ => {
                let len = rng.below(8000) as usize;
                r.create(&fresh, len, rng.next());
            }
        }
        r.maybe_sync(rng, 8);
    }
}

/// Unlinked-but-open files: written after unlink, synced while orphaned,
/// replaced by rename while open, released at the last close.
pub fn wl_orphan(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.op(Op::Mkdir {
        path: b"/o".to_vec(),
    });
    let mut held: Vec<usize> = Vec::new();
    for i in 0..14 * scale {
        let p = format!("/o/f{i}").into_bytes();
        let pages = rng.range(1, 40);
        r.create(&p, (pages * PAGE - rng.below(PAGE)) as usize, rng.next());
        r.maybe_sync(rng, 3);
        let s = r.open(&p, libc::O_RDWR);
        let s2 = rng.chance(1, 3).then(|| r.open(&p, libc::O_RDONLY));
        if rng.chance(1, 3) {
            // Replaced by a rename while open.
            let q = format!("/o/g{i}").into_bytes();
            r.create(&q, 5000, rng.next());
            r.op(Op::Rename {
                from: q,
                to: p.clone(),
                flags: 0,
            });
            r.op(Op::Unlink { path: p.clone() });
        } else {
            r.op(Op::Unlink { path: p.clone() });
        }
        // Grow the orphan, across the indirect boundary sometimes.
        let off = r.size_of(s);
        r.op(Op::Pwrite {
            slot: s,
            off,
            len: rng.range(1000, 20 * PAGE) as usize,
            fill: rng.next(),
        });
        r.maybe_sync(rng, 2);
        if rng.chance(1, 2) {
            let len = rng.below(r.size_of(s) + 1);
            r.op(Op::Ftruncate { slot: s, len });
        }
        if let Some(s2) = s2 {
            r.op(Op::Close { slot: s2 });
        }
        held.push(s);
        // Keep up to three orphans open at once; close the oldest.
        while held.len() > rng.range(0, 4) as usize {
            let s = held.remove(0);
            r.op(Op::Close { slot: s });
            r.maybe_sync(rng, 3);
        }
    }
}

/// Create/write/unlink loops (files with and without an indirect block,
/// directories whose index splits and that go away again) inside
/// transactions, so that blocks are allocated, freed and allocated again,
/// in the same or another role, before one commit. With the CI seed it
/// fails on commits 4abba41 and de93ad4 (right after a sync, a crash that
/// loses the unflushed home writes loses synced state: the journal bugs
/// fixed in de93ad4 and ad9891f) and passes since; other seeds often miss.
pub fn wl_churn(r: &mut Runner, rng: &mut Rng, scale: usize) {
    r.op(Op::Mkdir {
        path: b"/c".to_vec(),
    });
    r.create(b"/c/keep", 5 * PAGE as usize, rng.next());
    for i in 0..110 * scale {
        let p = format!("/c/f{}", i % 3).into_bytes();
        let pages = rng.range(1, 24);
        let s = r.open(&p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY);
        r.op(Op::Pwrite {
            slot: s,
            off: 0,
            len: (pages * PAGE - rng.below(PAGE)) as usize,
            fill: rng.next(),
        });
        r.op(Op::Close { slot: s });
        if rng.chance(1, 3) {
            // A directory whose index splits, then empties and goes away.
            let d = format!("/c/d{i}").into_bytes();
            r.op(Op::Mkdir { path: d.clone() });
            let n = rng.range(1, 30);
            for j in 0..n {
                let name = join(&d, &long_name(rng, j as usize));
                r.create(&name, 0, 0);
                if j % 2 == 1 {
                    r.op(Op::Unlink { path: name });
                }
            }
            for q in r.model.subtree(&d) {
                r.op(Op::Unlink { path: q });
            }
            r.op(Op::Rmdir { path: d });
        }
        if rng.chance(1, 4) {
            let s = r.open(b"/c/keep", libc::O_WRONLY | libc::O_APPEND);
            r.op(Op::Append {
                slot: s,
                len: rng.range(1, 3 * PAGE) as usize,
                fill: rng.next(),
            });
            r.op(Op::Close { slot: s });
        }
        r.op(Op::Unlink { path: p });
        r.maybe_sync(rng, 12);
    }
}

/// Explicit times a workload sets (distinct per call, nanoseconds too).
pub fn some_times(rng: &mut Rng) -> [Timespec; 2] {
    let t = 1_500_000_000 + rng.below(100_000_000) as i64;
    [
        Timespec {
            sec: t,
            nsec: rng.below(1_000_000_000) as i64,
        },
        Timespec {
            sec: t + rng.below(1000) as i64,
            nsec: rng.below(1_000_000_000) as i64,
        },
    ]
}

/// A seeded random mix of everything over a small namespace, attribute
/// calls (utimensat, futimens, chown, fchown) and fallocate included.
pub fn wl_mixed(r: &mut Runner, rng: &mut Rng, scale: usize) {
    let names: Vec<Path> = ["/a", "/b", "/c", "/a/x", "/a/y", "/b/x", "/b/z", "/a/x/q"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    for _ in 0..150 * scale {
        let p = rng.pick(&names).clone();
        let q = rng.pick(&names).clone();
        let parent_ok =
            |t: &Tree, p: &[u8]| matches!(t.nodes.get(&parent_of(p)), Some(Node::Dir { .. }));
        let t = &r.model;
        let node = t.nodes.get(&p).cloned();
        match (rng.below(15), node) {
            (0, None) if parent_ok(t, &p) => r.op(Op::Mkdir { path: p }),
            (1, None) if parent_ok(t, &p) => {
                let len = rng.below(40000) as usize;
                r.create(&p, len, rng.next())
            }
            (2, Some(Node::Dir { .. })) if t.is_empty_dir(&p) => r.op(Op::Rmdir { path: p }),
            (3, Some(Node::File(_) | Node::Symlink(_))) => r.op(Op::Unlink { path: p }),
            (4, Some(Node::File(_))) => {
                let s = r.open(&p, libc::O_RDWR);
                let size = r.size_of(s);
                r.op(Op::Pwrite {
                    slot: s,
                    off: rng.below(size + 2 * PAGE),
                    len: rng.range(1, 4 * PAGE) as usize,
                    fill: rng.next(),
                });
                r.maybe_sync(rng, 4);
                r.op(Op::Close { slot: s });
            }
            (5, Some(Node::File(_))) => {
                let len = rng.below(20 * PAGE);
                r.op(Op::Truncate { path: p, len });
            }
            (6, Some(Node::File(_))) if !t.nodes.contains_key(&q) && parent_ok(t, &q) => {
                r.op(Op::Link { from: p, to: q })
            }
            (7, None) if parent_ok(t, &p) => r.op(Op::Symlink { target: q, path: p }),
            (8 | 9, Some(src)) if p != q && !is_under(&q, &p) && parent_ok(t, &q) => {
                let ok = match (&src, t.nodes.get(&q)) {
                    (_, None) => true,
                    (Node::Dir { .. }, Some(Node::Dir { .. })) => t.is_empty_dir(&q),
                    (Node::Dir { .. }, Some(_)) => false,
                    (_, Some(Node::Dir { .. })) => false,
                    _ => true,
                };
                if ok {
                    r.op(Op::Rename {
                        from: p,
                        to: q,
                        flags: 0,
                    });
                }
            }
            (10, Some(Node::File(_) | Node::Dir { .. })) => r.op(Op::Chmod {
                path: p,
                perm: [0o600, 0o644, 0o755, 0o700][rng.below(4) as usize],
            }),
            (11, Some(Node::File(_) | Node::Dir { .. })) => {
                let times = some_times(rng);
                r.op(Op::Utimens { path: p, times })
            }
            (12, Some(Node::File(_) | Node::Dir { .. })) => r.op(Op::Chown {
                path: p,
                uid: rng.below(3) as u32 * 1000,
                gid: rng.below(3) as u32 * 1000 + 7,
            }),
            (13 | 14, Some(Node::File(_))) => {
                // Through a descriptor: times, owner, fallocate, fdatasync.
                let s = r.open(&p, libc::O_RDWR);
                let size = r.size_of(s);
                let mode = [
                    0,
                    libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                ][rng.below(3) as usize];
                r.op(Op::Fallocate {
                    slot: s,
                    mode,
                    off: rng.below(size + 2 * PAGE),
                    len: rng.range(1, 6 * PAGE),
                });
                if rng.chance(1, 2) {
                    let times = some_times(rng);
                    r.op(Op::Futimens { slot: s, times });
                } else {
                    r.op(Op::Fchown {
                        slot: s,
                        uid: 500,
                        gid: rng.below(2) as u32 * 500,
                    });
                }
                if rng.chance(1, 3) {
                    r.op(Op::Fdatasync { slot: s });
                }
                r.op(Op::Close { slot: s });
            }
            _ => {}
        }
        r.maybe_sync(rng, 10);
    }
}

pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "partial",
        blocks: 1024,
        // The commit threshold and journal size the partial commits need
        // (see wl_partial.rs); 66 is min_journal(1), checked by a test.
        commit_blocks: 58,
        journal_blocks: Some(66),
        run: wl_partial,
        ci_min_states: 1000,
        after_every: 8,
    },
    Workload {
        name: "churn",
        blocks: 1024,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_churn,
        ci_min_states: 500,
        after_every: 4,
    },
    Workload {
        name: "storm",
        blocks: 1024,
        commit_blocks: 16,
        journal_blocks: None,
        run: wl_storm,
        ci_min_states: 2500,
        after_every: 1,
    },
    Workload {
        name: "rename",
        blocks: 1024,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_rename,
        ci_min_states: 750,
        after_every: 1,
    },
    Workload {
        name: "bmap_dense",
        blocks: 2048,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_bmap_dense,
        ci_min_states: 400,
        after_every: 1,
    },
    Workload {
        name: "bmap_sparse",
        blocks: 1024,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_bmap_sparse,
        ci_min_states: 480,
        after_every: 1,
    },
    Workload {
        name: "truncate",
        blocks: 1024,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_truncate,
        ci_min_states: 850,
        after_every: 1,
    },
    Workload {
        name: "links",
        blocks: 1024,
        commit_blocks: 8,
        journal_blocks: None,
        run: wl_links,
        ci_min_states: 700,
        after_every: 1,
    },
    Workload {
        name: "orphan",
        blocks: 1024,
        commit_blocks: 0,
        journal_blocks: None,
        run: wl_orphan,
        ci_min_states: 750,
        after_every: 1,
    },
    Workload {
        name: "mixed",
        blocks: 1024,
        commit_blocks: 4,
        journal_blocks: None,
        run: wl_mixed,
        ci_min_states: 530,
        after_every: 1,
    },
];

pub fn workload(name: &str) -> &'static Workload {
    WORKLOADS
        .iter()
        .find(|w| w.name == name)
        .unwrap_or_else(|| panic!("no workload `{name}`"))
}

pub fn run_workload(
    name: &str,
    seed: u64,
    scale: usize,
    cfg: Cfg,
    replay: Option<Replay>,
) -> Stats {
    let w = workload(name);
    let t0 = Instant::now();
    let mut r = Runner::new(w, seed, scale, cfg, replay);
    let mut rng = Rng::new(mix(seed, 0xA11));
    (w.run)(&mut r, &mut rng, scale);
    let stats = r.finish();
    eprintln!(
        "crash workload {name} seed {seed:#x} scale {scale}: {} points ({} at flushes), {} states ({} torn, {} during a recovery, {} showing an older prefix, {} a committed part of a call {:?} by kind {:?}, {} repaired in mode none), max {} changed blocks in flight, {:.1?}",
        stats.points,
        stats.flush_points,
        stats.states,
        stats.torn_states,
        stats.in_recovery,
        stats.older,
        stats.partial,
        stats.partial_kinds,
        PartialKind::NAMES,
        stats.repaired,
        stats.max_changed,
        t0.elapsed()
    );
    stats
}

pub fn ci(name: &str) -> Stats {
    let cfg = Cfg::ci();
    // ULFS_CRASH_SEED, if set, replaces the fixed CI seed.
    let base = std::env::var("ULFS_CRASH_SEED")
        .ok()
        .filter(|s| !s.is_empty())
        .map_or(CI_SEED, |s| parse_u64(&s));
    let seed = mix(base, str_hash(name));
    let stats = run_workload(name, seed, 1, cfg, None);
    if cfg.mode == Mode::Journal {
        let min = workload(name).ci_min_states;
        assert!(
            stats.states >= min,
            "workload {name} checked only {} crash states (at least {min} expected)",
            stats.states
        );
    }
    stats
}

/// Replays one crash state (see the top of this file).
pub fn replay(name: &str, scale: usize, seed: u64, point: &str, fates: &str) {
    let rp = Replay {
        point: PointId::parse(point),
        fates: parse_fates(fates),
        reached: false,
    };
    run_workload(name, seed, scale, Cfg::long(), Some(rp));
}

pub fn parse_u64(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|e| panic!("bad number `{s}`: {e}"))
}

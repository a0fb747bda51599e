//! The model's semantics: what each call does to the expected tree, which
//! bytes it leaves loose under data=ordered, which times it stamps (ulfs
//! as Linux: a write, truncate or punch stamps the file's mtime, a growing
//! fallocate too; an entry added or removed stamps its directory's mtime;
//! chmod, chown, link and rename stamp only ctime, which is not compared),
//! and whether it can commit part of its work (see partial.rs).

use super::*;

/// What applying one call to the model produced besides the next tree.
pub struct Applied {
    pub new_slot: Option<Slot>,
    pub loose: Vec<Loose>,
    pub partial: Option<Partial>,
}

impl Runner {
    /// The model's effect of call `i`, `op`, on `t`.
    pub fn apply(&mut self, t: &mut Tree, op: &Op, i: usize) -> Applied {
        let mut loose = Vec::new();
        let mut mark = |id: u32, r: Vec<(u64, u64)>, tail: bool| {
            for (start, end) in r {
                loose.push(Loose {
                    op: i,
                    trunc_tail: tail,
                    id,
                    start,
                    end,
                });
            }
        };
        let mut new_slot = None;
        let mut partial = None;
        match op {
            Op::Open { path, flags, .. } => {
                let id = match t.nodes.get(path).cloned() {
                    Some(Node::File(id)) => {
                        assert!(flags & libc::O_EXCL == 0, "model: O_EXCL on existing");
                        if flags & libc::O_TRUNC != 0 && t.files[&id].size > 0 {
                            let tail = t.file_mut(id).truncate(0);
                            mark(id, tail.into_iter().collect(), true);
                            t.file_mut(id).attrs.times = None;
                        }
                        id
                    }
                    None => {
                        assert!(flags & libc::O_CREAT != 0, "model: open of missing file");
                        let id = self.next_id;
                        self.next_id += 1;
                        t.nodes.insert(path.clone(), Node::File(id));
                        t.files.insert(
                            id,
                            Arc::new(FileData {
                                perm: 0o644,
                                ..Default::default()
                            }),
                        );
                        t.stamp(&parent_of(path));
                        id
                    }
                    other => panic!("model: open of {other:?}"),
                };
                new_slot = Some(Slot {
                    fd: -1,
                    id,
                    append: flags & libc::O_APPEND != 0,
                });
            }
            Op::Close { .. } | Op::Fsync { .. } | Op::Fdatasync { .. } | Op::Sync => {}
            Op::Pwrite {
                slot,
                off,
                len,
                fill,
            } => {
                let s = self.slot(*slot);
                assert!(!s.append, "pwrite on an O_APPEND descriptor");
                let data = gen_data(*fill, *len);
                let f = t.file_mut(s.id);
                let r = f.write(*off, &data);
                f.attrs.times = None;
                mark(s.id, r, false);
                partial = Some(Partial {
                    op: i,
                    id: s.id,
                    kind: PartialKind::Write {
                        off: *off,
                        data: Arc::new(data),
                    },
                });
            }
            Op::Append { slot, len, fill } => {
                let s = self.slot(*slot);
                assert!(s.append);
                let data = gen_data(*fill, *len);
                let f = t.file_mut(s.id);
                let off = f.size;
                let r = f.write(off, &data);
                f.attrs.times = None;
                mark(s.id, r, false);
                partial = Some(Partial {
                    op: i,
                    id: s.id,
                    kind: PartialKind::Write {
                        off,
                        data: Arc::new(data),
                    },
                });
            }
            Op::Ftruncate { slot, len } => {
                let s = self.slot(*slot);
                let f = t.file_mut(s.id);
                let r = f.truncate(*len);
                f.attrs.times = None;
                mark(s.id, r.into_iter().collect(), true);
            }
            Op::Truncate { path, len } => {
                let id = t.file_id(path);
                let f = t.file_mut(id);
                let r = f.truncate(*len);
                f.attrs.times = None;
                mark(id, r.into_iter().collect(), true);
            }
            Op::Fallocate {
                slot,
                mode,
                off,
                len,
            } => {
                let s = self.slot(*slot);
                let f = t.file_mut(s.id);
                let end = off + len;
                if *mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
                    let end = end.min(f.size.max(*off));
                    let r = f.punch(*off, end);
                    f.attrs.times = None;
                    mark(s.id, r, false);
                    partial = Some(Partial {
                        op: i,
                        id: s.id,
                        kind: PartialKind::Punch { off: *off, end },
                    });
                } else {
                    assert!(*mode == 0 || *mode == libc::FALLOC_FL_KEEP_SIZE);
                    let grow = *mode == 0 && end > f.size;
                    f.preallocate(off / PAGE, end.div_ceil(PAGE), grow.then_some(end));
                    if grow {
                        f.attrs.times = None;
                    }
                    partial = Some(Partial {
                        op: i,
                        id: s.id,
                        kind: PartialKind::Falloc { off: *off, end },
                    });
                }
            }
            Op::Mkdir { path } => {
                assert!(!t.nodes.contains_key(path));
                t.nodes.insert(path.clone(), Node::dir(0o755));
                t.stamp(&parent_of(path));
            }
            Op::Rmdir { path } => {
                assert!(t.is_empty_dir(path));
                t.nodes.remove(path);
                t.stamp(&parent_of(path));
            }
            Op::Unlink { path } => {
                let n = t.nodes.remove(path).expect("model: unlink of missing");
                assert!(!matches!(n, Node::Dir { .. }));
                t.stamp(&parent_of(path));
            }
            Op::Rename { from, to, flags } => {
                if *flags == RENAME_EXCHANGE {
                    let a = t.subtree(from);
                    let b = t.subtree(to);
                    let na = t.nodes.remove(from).expect("exchange a");
                    let nb = t.nodes.remove(to).expect("exchange b");
                    let mut moved = Vec::new();
                    for p in a {
                        let n = t.nodes.remove(&p).expect("sub a");
                        let mut q = to.clone();
                        q.extend_from_slice(&p[from.len()..]);
                        moved.push((q, n));
                    }
                    for p in b {
                        let n = t.nodes.remove(&p).expect("sub b");
                        let mut q = from.clone();
                        q.extend_from_slice(&p[to.len()..]);
                        moved.push((q, n));
                    }
                    t.nodes.insert(to.clone(), na);
                    t.nodes.insert(from.clone(), nb);
                    t.nodes.extend(moved);
                    t.stamp(&parent_of(from));
                    t.stamp(&parent_of(to));
                } else {
                    assert_eq!(*flags, 0);
                    let src = t.nodes[from].clone();
                    match t.nodes.get(to) {
                        // Same inode under both names: POSIX says do nothing.
                        Some(n) if *n == src && matches!(src, Node::File(_)) => {}
                        Some(Node::Dir { .. }) => {
                            assert!(t.is_empty_dir(to) && matches!(src, Node::Dir { .. }));
                            t.nodes.remove(to);
                            t.move_node(from, to);
                            t.stamp(&parent_of(from));
                            t.stamp(&parent_of(to));
                        }
                        _ => {
                            assert!(!is_under(to, from));
                            t.nodes.remove(to);
                            t.move_node(from, to);
                            t.stamp(&parent_of(from));
                            t.stamp(&parent_of(to));
                        }
                    }
                }
            }
            Op::Link { from, to } => {
                let id = t.file_id(from);
                assert!(!t.nodes.contains_key(to));
                t.nodes.insert(to.clone(), Node::File(id));
                t.stamp(&parent_of(to));
            }
            Op::Symlink { target, path } => {
                assert!(!t.nodes.contains_key(path));
                t.nodes.insert(path.clone(), Node::Symlink(target.clone()));
                t.stamp(&parent_of(path));
            }
            Op::Chmod { path, perm } => match t.nodes.get_mut(path) {
                Some(Node::Dir { perm: p, .. }) => *p = *perm,
                Some(Node::File(id)) => {
                    let id = *id;
                    t.file_mut(id).perm = *perm;
                }
                other => panic!("model: chmod of {other:?}"),
            },
            Op::Utimens { path, times } => t.attrs_mut(path).times = Some(*times),
            Op::Futimens { slot, times } => {
                let id = self.slot(*slot).id;
                t.file_mut(id).attrs.times = Some(*times);
            }
            Op::Chown { path, uid, gid } => t.attrs_mut(path).owner = (*uid, *gid),
            Op::Fchown { slot, uid, gid } => {
                let id = self.slot(*slot).id;
                t.file_mut(id).attrs.owner = (*uid, *gid);
            }
        }
        Applied {
            new_slot,
            loose,
            partial,
        }
    }
}

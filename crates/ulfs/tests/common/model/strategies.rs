//! Proptest strategies for the model test: a small universe of colliding
//! paths, flags, modes, lengths and offsets.

use super::*;

pub fn component() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        40 => select(vec!["a", "b", "c", "d"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => Just(b".".to_vec()),
        2 => Just(b"..".to_vec()),
        1 => Just(vec![b'L'; 255]),
        1 => Just(vec![b'N'; 256]),
    ]
}

/// Mostly shallow: deep paths rarely exist.
pub fn depth() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop_oneof![
        5 => vec(component(), 1..=1),
        4 => vec(component(), 2..=2),
        2 => vec(component(), 3..=3),
    ]
}

pub fn path() -> impl Strategy<Value = P> {
    prop_oneof![
        40 => (depth(), 0u8..16, 0u8..12, 0u8..20).prop_map(
            |(comps, lead, trail, dbl)| {
                let sep: &[u8] = if dbl == 0 { b"//" } else { b"/" };
                let mut p = Vec::new();
                if lead == 0 {
                    p.push(b'/');
                }
                p.extend(comps.join(sep));
                if trail == 0 {
                    p.push(b'/');
                }
                P(p)
            }
        ),
        1 => Just(P(Vec::new())),
        1 => Just(P(b"/".to_vec())),
        1 => Just(P(b".".to_vec())),
    ]
}

pub fn flags() -> impl Strategy<Value = Flags> {
    (
        select(vec![libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR]),
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(acc, creat, excl, trunc, append, dir, nofollow)| {
            let mut f = acc;
            for (on, bit) in [
                (creat, libc::O_CREAT),
                (excl, libc::O_EXCL),
                (trunc, libc::O_TRUNC),
                (append, libc::O_APPEND),
                (dir, libc::O_DIRECTORY),
                (nofollow, libc::O_NOFOLLOW),
            ] {
                if on {
                    f |= bit;
                }
            }
            Flags(f)
        })
}

pub fn mode() -> impl Strategy<Value = M> {
    prop_oneof![
        8 => select(vec![0o644u32, 0o755, 0o600, 0o777]).prop_map(M),
        1 => select(vec![0o000u32, 0o4755, 0o2755, 0o1777, 0o7777, 0o070]).prop_map(M),
    ]
}

/// A uid or gid for chown: the caller's own, another, or "unchanged".
pub fn owner_id() -> impl Strategy<Value = u32> {
    select(vec![0u32, 1000, 4242, u32::MAX])
}

pub fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..200,
        1 => select(vec![0usize, 1, 4095, 4096, 4097, 5000, 9000]),
    ]
}

/// Offsets: mostly small, sometimes around block boundaries, occasionally
/// far out (holes through indirect block-map levels).
pub fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..10_000,
        2 => select(vec![4095u64, 4096, 4097, 8192, 12_288, 65_536]),
        1 => select(vec![
            (1u64 << 20) + 3,
            (4u64 << 20) + 123,
            (1u64 << 30) + 7,
            (16u64 << 30) + 5,
        ]),
    ]
}

pub fn seek_offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => -20i64..10_000,
        1 => select(vec![-1i64, -5000, 4096, 8192, 1 << 20, (1 << 30) + 7]),
    ]
}

pub fn slot() -> impl Strategy<Value = S> {
    (0u8..16).prop_map(S)
}

/// `AT_FDCWD` or a descriptor slot.
pub fn dir() -> impl Strategy<Value = D> {
    prop_oneof![
        1 => Just(D::Cwd),
        2 => slot().prop_map(D::Slot),
    ]
}

/// Flags of the *at calls, valid ones mostly, an unknown bit sometimes.
fn at_flags(valid: Vec<i32>) -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => select(valid),
        1 => Just(0x4000_0000),
    ]
}

/// The directory-relative calls (at_ops.rs).
pub fn at_op() -> impl Strategy<Value = Op> {
    let nofollow = libc::AT_SYMLINK_NOFOLLOW;
    let empty = libc::AT_EMPTY_PATH;
    prop_oneof![
        6 => (dir(), path(), flags(), mode()).prop_map(|(d, p, f, m)| Op::Openat(d, p, f, m)),
        4 => (dir(), path(), mode()).prop_map(|(d, p, m)| Op::Mkdirat(d, p, m)),
        3 => (dir(), path(), at_flags(vec![0, 0, libc::AT_REMOVEDIR]))
            .prop_map(|(d, p, f)| Op::Unlinkat(d, p, f)),
        3 => (dir(), path(), dir(), path(), select(vec![0u32, 0, 1, 2]))
            .prop_map(|(a, p, b, q, f)| Op::Renameat2(a, p, b, q, f)),
        2 => (dir(), path(), dir(), path(),
              at_flags(vec![0, libc::AT_SYMLINK_FOLLOW, empty]))
            .prop_map(|(a, p, b, q, f)| Op::Linkat(a, p, b, q, f)),
        3 => (dir(), path(), at_flags(vec![0, nofollow, empty, nofollow | empty]))
            .prop_map(|(d, p, f)| Op::Fstatat(d, p, f)),
        2 => (dir(), path(), at_flags(vec![0, nofollow, empty, libc::AT_STATX_DONT_SYNC]))
            .prop_map(|(d, p, f)| Op::Statx(d, p, f)),
        2 => (dir(), path(),
              select(vec![libc::F_OK, libc::R_OK, libc::W_OK, libc::X_OK,
                          libc::R_OK | libc::W_OK | libc::X_OK, 0o10]),
              at_flags(vec![0, libc::AT_EACCESS, nofollow, empty]))
            .prop_map(|(d, p, m, f)| Op::Faccessat(d, p, m, f)),
        2 => (dir(), path(), mode(), select(vec![0u32, libc::S_IFREG, libc::S_IFDIR, libc::S_IFMT]))
            .prop_map(|(d, p, m, t)| Op::Mknodat(d, p, M(m.0 | t))),
        1 => (dir(), path()).prop_map(|(d, p)| Op::Readlinkat(d, p)),
        1 => slot().prop_map(Op::Fchdir),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => classic_op(),
        1 => at_op(),
    ]
}

/// The calls named by path or descriptor alone.
fn classic_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        14 => (path(), flags(), mode()).prop_map(|(p, f, m)| Op::Open(p, f, m)),
        4 => slot().prop_map(Op::Close),
        6 => (slot(), len()).prop_map(|(s, n)| Op::Read(s, n)),
        8 => (slot(), len(), any::<u8>()).prop_map(|(s, n, b)| Op::Write(s, n, b)),
        3 => (slot(), len(), offset()).prop_map(|(s, n, o)| Op::Pread(s, n, o)),
        5 => (slot(), len(), offset(), any::<u8>()).prop_map(|(s, n, o, b)| Op::Pwrite(s, n, o, b)),
        5 => (slot(), seek_offset(), select(vec![
                libc::SEEK_SET, libc::SEEK_CUR, libc::SEEK_END, libc::SEEK_DATA, libc::SEEK_HOLE
            ]).prop_map(Whence)).prop_map(|(s, o, w)| Op::Lseek(s, o, w)),
        2 => slot().prop_map(Op::Fstat),
        3 => path().prop_map(Op::Stat),
        2 => path().prop_map(Op::Lstat),
        9 => (path(), mode()).prop_map(|(p, m)| Op::Mkdir(p, m)),
        3 => path().prop_map(Op::Rmdir),
        4 => path().prop_map(Op::Unlink),
        6 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        3 => (path(), path(), select(vec![0u32, 1, 2, 1, 2, 3, 8]))
            .prop_map(|(a, b, f)| Op::Rename2(a, b, f)),
        3 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        3 => (path(), path()).prop_map(|(t, l)| Op::Symlink(t, l)),
        2 => path().prop_map(Op::Readlink),
        3 => (path(), offset()).prop_map(|(p, n)| Op::Truncate(p, n)),
        3 => (slot(), offset()).prop_map(|(s, n)| Op::Ftruncate(s, n)),
        2 => (path(), mode()).prop_map(|(p, m)| Op::Chmod(p, m)),
        2 => slot().prop_map(Op::Dup),
        2 => (slot(), slot()).prop_map(|(a, b)| Op::Dup2(a, b)),
        2 => (slot(), select(vec![16usize, 64, 600, 4096])).prop_map(|(s, n)| Op::Getdents(s, n)),
        2 => path().prop_map(Op::ListDir),
        1 => slot().prop_map(Op::Fsync),
        1 => slot().prop_map(Op::Fdatasync),
        1 => (slot(), mode()).prop_map(|(s, m)| Op::Fchmod(s, m)),
        1 => (path(), owner_id(), owner_id()).prop_map(|(p, u, g)| Op::Chown(p, u, g)),
        1 => (slot(), owner_id(), owner_id()).prop_map(|(s, u, g)| Op::Fchown(s, u, g)),
        2 => path().prop_map(Op::Chdir),
        1 => Just(Op::Getcwd),
    ]
}

//! `ulfs_readv` and `ulfs_writev`: the checks of a C iovec array and the
//! conversion to Rust `IoSlice`s.
//!
//! Kept apart from the other descriptor calls because it is the one place
//! where C input could break Rust's aliasing rules: C may legally pass
//! overlapping iovecs to `readv`, which must not become overlapping
//! `&mut [u8]`, so that case reads through a bounce buffer and scatters the
//! bytes with raw copies, in iovec order, as the kernel would.

use std::ffi::c_int;
use std::io::{IoSlice, IoSliceMut};

use libc::{iovec, ssize_t};
use ulfs::Errno;

use crate::ffi::{MAX_RW, fs_mut, guard_fs, ssize, ulfs_t};

/// Most iovecs one `readv`/`writev` accepts, as Linux's `UIO_MAXIOV`.
const IOV_MAX: c_int = 1024;

/// The iovec array of `readv`/`writev`, checked as Linux does: count in
/// `0..=IOV_MAX`, total length representable in `ssize_t` (else EINVAL), no
/// NULL base with a non-zero length (EFAULT). The lengths are then shortened
/// so that the total is at most `MAX_RW`.
///
/// # Safety
/// `iov` must be NULL or readable for `cnt` iovecs.
unsafe fn iovecs(iov: *const iovec, cnt: c_int) -> Result<Vec<(*mut u8, usize)>, Errno> {
    if !(0..=IOV_MAX).contains(&cnt) {
        return Err(Errno::EINVAL);
    }
    if cnt == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(Errno::EFAULT);
    }
    // SAFETY: non-NULL and readable for `cnt` (> 0) iovecs by the contract.
    let iov = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total: usize = 0;
    for v in iov {
        total = total
            .checked_add(v.iov_len)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(Errno::EINVAL)?;
        if v.iov_base.is_null() && v.iov_len != 0 {
            return Err(Errno::EFAULT);
        }
    }
    let mut left = MAX_RW;
    Ok(iov
        .iter()
        .map(|v| {
            let len = v.iov_len.min(left);
            left -= len;
            (v.iov_base.cast::<u8>(), len)
        })
        .filter(|&(_, len)| len > 0)
        .collect())
}

/// Whether any two of the (non-empty) ranges share a byte.
fn overlapping(ranges: &[(*mut u8, usize)]) -> bool {
    let mut spans: Vec<(usize, usize)> = ranges
        .iter()
        .map(|&(p, n)| (p as usize, (p as usize).saturating_add(n)))
        .collect();
    spans.sort_unstable();
    spans.windows(2).any(|w| w[1].0 < w[0].1)
}

/// Reads into several buffers in order, as `readv(2)`. Returns the count or
/// `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `iov` NULL or readable for `iovcnt` iovecs, each
/// of which is writable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_readv(
    fs: *mut ulfs_t,
    fd: c_int,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `iov` is NULL or readable for `iovcnt` iovecs, by the contract.
        let ranges = unsafe { iovecs(iov, iovcnt) }?;
        if !overlapping(&ranges) {
            let mut bufs: Vec<IoSliceMut<'_>> = ranges
                .iter()
                // SAFETY: each range is non-NULL, writable for its length (by
                // the contract) and disjoint from the others (just checked).
                .map(|&(p, n)| IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(p, n) }))
                .collect();
            return ssize(fs.readv(fd, &mut bufs)?);
        }
        let mut bounce = vec![0u8; ranges.iter().map(|r| r.1).sum()];
        let got = fs.readv(fd, &mut [IoSliceMut::new(&mut bounce)])?;
        let mut src = &bounce[..got.min(bounce.len())];
        for &(p, n) in &ranges {
            let k = n.min(src.len());
            // SAFETY: `p` is writable for `n >= k` bytes by the contract, and
            // `bounce` is our own allocation, so the two do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, k) };
            src = &src[k..];
        }
        ssize(got)
    })
}

/// Writes several buffers in order, as `writev(2)`. Returns the count or
/// `-errno`.
///
/// # Safety
/// `fs` as for `ulfs_close`; `iov` NULL or readable for `iovcnt` iovecs, each
/// of which is readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ulfs_writev(
    fs: *mut ulfs_t,
    fd: c_int,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    guard_fs(fs, || {
        // SAFETY: `fs` is NULL or live and unshared, by the caller's contract.
        let mut fs = unsafe { fs_mut(fs) }?;
        // SAFETY: `iov` is NULL or readable for `iovcnt` iovecs, by the contract.
        let ranges = unsafe { iovecs(iov, iovcnt) }?;
        let bufs: Vec<IoSlice<'_>> = ranges
            .iter()
            // SAFETY: each range is non-NULL and readable for its length by
            // the contract; shared slices may overlap.
            .map(|&(p, n)| IoSlice::new(unsafe { std::slice::from_raw_parts(p.cast_const(), n) }))
            .collect();
        ssize(fs.writev(fd, &bufs)?)
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iovec_checks() {
        let mut a = [0u8; 4];
        let ok = [
            iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: 4,
            },
            iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            },
        ];
        // SAFETY: the arrays passed are readable for the counts given; NULL
        // is allowed.
        unsafe {
            assert_eq!(iovecs(ok.as_ptr(), 2).unwrap().len(), 1);
            assert_eq!(iovecs(ok.as_ptr(), -1).err(), Some(Errno::EINVAL));
            assert_eq!(iovecs(ok.as_ptr(), IOV_MAX + 1).err(), Some(Errno::EINVAL));
            assert!(iovecs(std::ptr::null(), 0).unwrap().is_empty());
            assert_eq!(iovecs(std::ptr::null(), 1).err(), Some(Errno::EFAULT));
            let null_base = [iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 1,
            }];
            assert_eq!(iovecs(null_base.as_ptr(), 1).err(), Some(Errno::EFAULT));
            let huge = [
                iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: isize::MAX as usize,
                },
                iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: 1,
                },
            ];
            assert_eq!(iovecs(huge.as_ptr(), 2).err(), Some(Errno::EINVAL));
            let big = [
                iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: MAX_RW - 1,
                },
                iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: 10,
                },
                iovec {
                    iov_base: a.as_mut_ptr().cast(),
                    iov_len: 10,
                },
            ];
            let r = iovecs(big.as_ptr(), 3).unwrap();
            assert_eq!(
                r.iter().map(|x| x.1).collect::<Vec<_>>(),
                vec![MAX_RW - 1, 1]
            );
        }
    }

    #[test]
    fn overlap_detection() {
        let mut a = [0u8; 16];
        let p = a.as_mut_ptr();
        // SAFETY: all offsets stay inside `a`.
        let (p4, p8) = unsafe { (p.add(4), p.add(8)) };
        assert!(!overlapping(&[(p, 4), (p4, 4), (p8, 8)]));
        assert!(!overlapping(&[(p8, 8), (p, 8)]));
        assert!(overlapping(&[(p, 5), (p4, 4)]));
        assert!(overlapping(&[(p8, 2), (p, 16)]));
        assert!(!overlapping(&[]));
    }

    #[test]
    fn null_handle_is_efault() {
        let null = std::ptr::null_mut();
        // SAFETY: a NULL handle is rejected before anything else is touched.
        unsafe {
            assert_eq!(
                ulfs_readv(null, 0, std::ptr::null(), 0),
                -(libc::EFAULT as isize)
            );
            assert_eq!(
                ulfs_writev(null, 0, std::ptr::null(), 0),
                -(libc::EFAULT as isize)
            );
        }
    }
}

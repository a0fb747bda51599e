//! The program's file-creation mask. The kernel keeps it (a process's
//! own, inherited across fork and exec); the engine's process has one of
//! its own, which it applies when it creates a file in the image, and
//! which would otherwise stay 022 whatever the program set: `umask 077;
//! touch /ulfs/key` made a 0644 file. `umask(3)` is interposed to note each
//! change, and every call that creates an image file first brings the
//! engine's mask in step (`Backend::set_umask_to`: a store in process; a
//! request to a server only when it changed), so image files get the
//! modes the kernel would give them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::mode_t;

use crate::real::real;

/// Not read from the kernel yet (this program's first creation reads it).
const UNKNOWN: u32 = u32::MAX;

static MASK: AtomicU32 = AtomicU32::new(UNKNOWN);

/// Held while the kernel's mask and `MASK` are brought in step (the first
/// read, each `umask`), so a thread's `umask` never lands between another
/// thread's read of the kernel and its store, which would keep a stale
/// mask for good.
static STEP: Mutex<()> = Mutex::new(());

/// Held across a `fork` (the caller drops it in parent and child alike),
/// so that a child never starts with it held by a thread it does not
/// have.
pub fn held_across_fork() -> std::sync::MutexGuard<'static, ()> {
    STEP.lock().unwrap_or_else(|e| e.into_inner())
}

/// The program's umask, as the kernel has it.
pub fn current() -> u32 {
    match MASK.load(Ordering::Acquire) {
        UNKNOWN => {
            let _step = STEP.lock().unwrap_or_else(|e| e.into_inner());
            match MASK.load(Ordering::Acquire) {
                UNKNOWN => {
                    let m = from_kernel();
                    MASK.store(m, Ordering::Release);
                    m
                }
                m => m,
            }
        }
        m => m,
    }
}

/// Linux shows a process's umask in /proc/self/status (since 4.7), which
/// reads it without changing it; else it is set and put back.
fn from_kernel() -> u32 {
    let shown = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
        });
    shown.unwrap_or_else(|| {
        let f = real!(umask: unsafe extern "C" fn(mode_t) -> mode_t);
        // SAFETY: umask cannot fail; the mask is put back at once.
        unsafe {
            let m = f(0o022);
            f(m);
            m & 0o777
        }
    })
}

/// `umask(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn umask(mask: mode_t) -> mode_t {
    let f = real!(umask: unsafe extern "C" fn(mode_t) -> mode_t);
    let _step = STEP.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask cannot fail.
    let old = unsafe { f(mask) };
    MASK.store(mask & 0o777, Ordering::Release);
    old
}

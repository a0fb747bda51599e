//! The file system's lock, free for a single-threaded program.
//!
//! The program's threads share one mounted file system, so every call
//! takes a lock; but most programs run on one thread, and there a lock
//! (two atomic read-modify-writes per call, about 8 ns here) guards
//! against nothing. glibc keeps `__libc_single_threaded` true until the
//! process first creates a thread (and never back): while it is true,
//! no other thread can exist, and a call takes no lock, only a plain
//! busy flag. The flag catches the one way a second call can start while
//! one is in progress on a single thread, a signal handler calling into
//! the image; that call fails with EDEADLK instead of reaching a file
//! system in the middle of a change (with the lock it would deadlock).
//!
//! A thread cannot normally appear while a lock-free call is in progress:
//! the library creates none, and the program's own code does not run
//! inside a call. It can in corner cases (a `pthread_atfork` handler run
//! by the `fork` the library makes while holding; a signal handler that
//! creates a thread). So a locking holder also waits for a lock-free one
//! to finish, and every holder knows its thread: a second hold by the
//! same thread, on either path, is refused (`Reentered`) rather than
//! deadlocking or reaching a file system in the middle of a change.
//! Where glibc does not say (another C library), every call locks. A
//! program that makes threads with a raw `clone(2)`, behind glibc's back,
//! leaves the flag true; glibc itself does not support such threads.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, Ordering, compiler_fence};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A value reached only through [`Owned::hold`].
pub struct Owned<T> {
    lock: Mutex<()>,
    /// A lock-free holder is inside (single-threaded).
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached by one holder at a time: through the mutex,
// or, while the process has one thread, through the busy flag (module
// comment).
unsafe impl<T: Send> Sync for Owned<T> {}

/// Access to the value, released on drop.
pub struct Held<'a, T> {
    owned: &'a Owned<T>,
    /// `None`: held lock-free.
    _guard: Option<Locked<'a>>,
}

/// The lock, held by this thread (`HOLDING` says so until it is dropped).
struct Locked<'a>(#[allow(dead_code)] MutexGuard<'a, ()>);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(false));
    }
}

thread_local! {
    /// This thread holds a value through the lock (a second hold on the
    /// same thread, from a signal handler, is refused, not deadlocked).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// A call started inside another on the same thread (a signal handler).
#[derive(Debug)]
pub struct Reentered;

impl<T> Owned<T> {
    pub const fn new(value: T) -> Owned<T> {
        Owned {
            lock: Mutex::new(()),
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Holds the value: lock-free while the process has one thread.
    #[inline]
    pub fn hold(&self) -> Result<Held<'_, T>, Reentered> {
        if single_threaded() {
            // Plain load and store: only this thread (and its signal
            // handlers, which see its program order) touch the flag.
            if self.busy.load(Ordering::Relaxed) {
                return Err(Reentered);
            }
            self.busy.store(true, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            return Ok(Held {
                owned: self,
                _guard: None,
            });
        }
        let guard = self.lock_slow()?;
        Ok(Held {
            owned: self,
            _guard: Some(guard),
        })
    }

    /// Whether this thread holds the value now (a signal handler
    /// interrupted its call).
    pub fn held_here(&self) -> bool {
        if self.busy.load(Ordering::Relaxed) && this_thread() == sole_thread() {
            return true;
        }
        HOLDING.with(Cell::get)
    }

    /// Takes the lock, unless this thread holds the value already; waits
    /// for a lock-free holder that was inside when threads appeared.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> Result<Locked<'_>, Reentered> {
        if HOLDING.with(Cell::get) {
            return Err(Reentered);
        }
        // A poisoned lock means a panic inside a call, which `ulfs` already
        // turned into a read-only volume: carrying on is safe.
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.busy.load(Ordering::Acquire) {
            if this_thread() == sole_thread() {
                return Err(Reentered);
            }
            std::thread::yield_now();
        }
        HOLDING.with(|h| h.set(true));
        Ok(Locked(guard))
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this holder is the only one (module comment).
        unsafe { &*self.owned.value.get() }
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` keeps the borrow unique.
        unsafe { &mut *self.owned.value.get() }
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        if self._guard.is_none() {
            compiler_fence(Ordering::SeqCst);
            // Release: a locking holder waiting for it sees its changes.
            self.owned.busy.store(false, Ordering::Release);
        }
    }
}

/// This thread's identity (`pthread_self`: a register read, no call into
/// the kernel).
#[inline]
fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// The address of glibc's `__libc_single_threaded` (0 if the C library
/// has none), and the thread that was the process's only one when it was
/// looked up: the main thread (in the child of a fork, the forking thread,
/// whose identity the child keeps; after an exec the new main thread).
/// While the flag is true that thread is the only one, so a lock-free
/// holder is it.
static FLAG: OnceLock<(usize, usize)> = OnceLock::new();

fn flag() -> (usize, usize) {
    *FLAG.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; a null result means
        // the C library has no such variable.
        let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) };
        (at as usize, this_thread())
    })
}

/// Looks the flag up: at load, on the main thread, rather than at a first
/// call that may be in a signal handler.
pub fn init() {
    flag();
}

fn sole_thread() -> usize {
    flag().1
}

/// Whether glibc says the process has never created a thread.
#[inline]
pub fn single_threaded() -> bool {
    let at = flag().0;
    // SAFETY: a non-null result is the address of glibc's `char` flag,
    // valid for the process's life; read volatile, as other code writes it.
    at != 0 && unsafe { std::ptr::read_volatile(at as *const u8) } != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test runner has threads: this is the locked path (the lock-free
    /// one is tests/c/run_signal_reentry.c's, under `ulfs run`).
    #[test]
    fn one_holder_at_a_time() {
        let owned = Owned::new(5u32);
        {
            let mut held = owned.hold().unwrap();
            *held += 1;
            assert!(owned.hold().is_err(), "a second holder on one thread");
        }
        assert_eq!(*owned.hold().unwrap(), 6);
    }
}

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
//! A thread cannot appear while a lock-free call is in progress: the
//! library creates none, and the program can only create one from its own
//! code, which does not run inside a call (a signal handler may not call
//! `pthread_create`). So a lock-free holder and a locking one never meet,
//! except in corner cases a review found and this does not handle yet: a
//! `pthread_atfork` handler that starts a thread while the library forks
//! (holding), or a signal handler that creates one mid-call. Where glibc
//! does not say (another C library), every call locks. A program that
//! makes threads with a raw `clone(2)`, behind glibc's back, leaves the
//! flag true; glibc itself does not support such threads. A
//! program that makes threads with a raw `clone(2)`, behind glibc's back,
//! leaves the flag true; glibc itself does not support such threads.

use std::cell::UnsafeCell;
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
    _guard: Option<MutexGuard<'a, ()>>,
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
        // A poisoned lock means a panic inside a call, which `ulfs` already
        // turned into a read-only volume: carrying on is safe.
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Held {
            owned: self,
            _guard: Some(guard),
        })
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
            self.owned.busy.store(false, Ordering::Relaxed);
        }
    }
}

/// Whether glibc says the process has never created a thread.
#[inline]
pub fn single_threaded() -> bool {
    static FLAG: OnceLock<usize> = OnceLock::new();
    let flag = *FLAG.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; a null result means
        // the C library has no such variable.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) as usize }
    });
    // SAFETY: a non-null result is the address of glibc's `char` flag,
    // valid for the process's life; read volatile, as other code writes it.
    flag != 0 && unsafe { std::ptr::read_volatile(flag as *const u8) } != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let owned = Owned::new(5u32);
        {
            let mut held = owned.hold().unwrap();
            *held += 1;
            if single_threaded() {
                assert!(owned.hold().is_err(), "a second holder on one thread");
            }
        }
        assert_eq!(*owned.hold().unwrap(), 6);
    }
}

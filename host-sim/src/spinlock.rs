//! The spin lock of the global TensorMap's shards (spec/runtime.md §3.2): test and
//! test-and-set with backoff, the lock word padded by the caller. Built on `crate::sync`, so
//! the loom models in `tests/loom.rs` check its mutual exclusion.

use crate::sync::{AtomicBool, MutPtr, Ordering, UnsafeCell};

/// A test-and-test-and-set spin lock. A thread that finds it taken spins with exponential
/// backoff and then yields its time slice (`crossbeam_utils::Backoff`): the map's critical
/// sections are a few hundred instructions, so waiting is short, and yielding keeps a waiter
/// from burning a core the holder needs.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `lock` gives one thread at a time access to the value (the Acquire swap that takes
// the lock synchronises with the Release store that gave it back), so sharing the lock between
// threads is sound whenever the value may move between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: the lock owns its value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting for it as long as needed.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        #[cfg(not(loom))]
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            // Test (a plain load, which keeps the line shared while the lock is held) and then
            // test-and-set.
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SpinGuard {
                    lock: self,
                    value: self.value.get_mut(),
                };
            }
            #[cfg(not(loom))]
            backoff.snooze();
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }
}

/// Access to a [`SpinLock`]'s value; dropping it releases the lock.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    value: MutPtr<T>,
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { self.value.deref() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this thread holds the lock, and `&mut self` makes
        // this the only reference through it.
        unsafe { self.value.deref() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

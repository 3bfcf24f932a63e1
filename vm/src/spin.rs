//! The spin lock of the global TensorMap (spec/runtime.md §3.2): test and test-and-set, the
//! waiting left to the caller (the device spins with a pause hint, the simulator backs off and
//! yields to the OS). The only `unsafe` code of `vm`; built on `crate::sync`, so the loom model
//! in `host-sim/tests/loom.rs` checks its mutual exclusion.

use crate::sync::{AtomicBool, MutPtr, Ordering, UnsafeCell};

/// A test-and-test-and-set spin lock.
#[derive(Debug)]
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `lock` gives one thread at a time access to the value (the Acquire exchange that takes
// the lock synchronises with the Release store that gave it back), so sharing the lock between
// threads is sound whenever the value may move between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: the lock owns its value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `value`.
    pub fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, calling `wait` each time it finds it taken.
    pub fn lock_with(&self, mut wait: impl FnMut()) -> SpinGuard<'_, T> {
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
            wait();
        }
    }

    /// Takes the lock, spinning with the processor's pause hint while it is taken (under loom:
    /// yielding to the other modelled threads).
    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.lock_with(|| {
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            core::hint::spin_loop();
        })
    }
}

/// Access to a [`SpinLock`]'s value; dropping it releases the lock.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    value: MutPtr<T>,
}

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { self.value.deref() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
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

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    /// Threads each add to a value through the lock, reading and writing it non-atomically:
    /// no update is lost, and under Miri (`scripts/miri.sh`) any access the lock failed to
    /// order would be reported as a data race.
    #[test]
    fn excludes_across_threads() {
        let (threads, rounds) = if cfg!(miri) { (3, 20) } else { (4, 10_000) };
        let lock = Arc::new(SpinLock::new(Vec::<u32>::new()));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for i in 0..rounds {
                        let mut g = lock.lock_with(core::hint::spin_loop);
                        let last = g.last().copied().unwrap_or(0);
                        g.push(last + 1);
                        let _ = (t, i);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let v = lock.lock();
        assert_eq!(v.len(), threads * rounds);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32 + 1));
    }
}

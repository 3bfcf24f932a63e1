//! Atomics and cells for the lock-free pieces: std's, or loom's under `--cfg loom`.

#[cfg(loom)]
pub use loom::cell::{MutPtr, UnsafeCell};
#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// `std::cell::UnsafeCell` with loom's interface: `get_mut` hands out a pointer that loom
/// tracks as a mutable access while it lives; here it is a raw pointer.
#[cfg(not(loom))]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    pub fn get_mut(&self) -> MutPtr<T> {
        MutPtr(self.0.get())
    }
}

/// A pointer into an [`UnsafeCell`] (loom's `MutPtr` interface).
#[cfg(not(loom))]
pub struct MutPtr<T>(*mut T);

#[cfg(not(loom))]
impl<T> MutPtr<T> {
    /// # Safety
    /// No other reference to the cell's value may be live while the result is.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn deref(&self) -> &mut T {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.0 }
    }
}

//! The atomics and cells of the runtime's lock-free pieces: `core`'s, or loom's under
//! `--cfg loom` (the model checks of `host-sim/tests/loom.rs` explore every interleaving of the
//! same code).

#[cfg(loom)]
pub use loom::cell::{MutPtr, UnsafeCell};
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

/// `core::cell::UnsafeCell` with loom's interface: `get_mut` hands out a pointer that loom
/// tracks as a mutable access while it lives; here it is a raw pointer.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    pub const fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }

    /// A pointer to the value.
    pub fn get_mut(&self) -> MutPtr<T> {
        MutPtr(self.0.get())
    }
}

/// A pointer into an [`UnsafeCell`] (loom's `MutPtr` interface).
#[cfg(not(loom))]
#[derive(Debug)]
pub struct MutPtr<T>(*mut T);

#[cfg(not(loom))]
impl<T> MutPtr<T> {
    /// The value.
    ///
    /// # Safety
    /// No other reference to the cell's value may be live while the result is.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn deref(&self) -> &mut T {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.0 }
    }
}

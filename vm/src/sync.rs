//! The atomics of the runtime's lock-free pieces: `core`'s, or loom's under `--cfg loom` (the
//! model checks of `host-sim/tests/loom.rs` explore every interleaving of the same code).

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

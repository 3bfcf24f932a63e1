//! # ptovm-host-sim
//!
//! The host side of ptovm. This part: the **reference expander** (`reference`), an
//! independent single-threaded walk of the whole program that is the ground truth for every
//! per-AICPU expansion, and the **dependency graph** (`deps`) built with a TensorMap over
//! regions in exact-match (pto-isa) or overlap mode. The threaded simulator comes next.

pub mod deps;
pub mod expand;
mod hash;
pub mod model;
pub mod reference;
#[cfg(not(loom))]
pub mod sim;
pub mod spinlock;
pub mod sync;
pub use ptovm_vm::waitlist;

pub use deps::{
    edges, heap_map, DepBuilder, DepMode, Edge, EdgeKind, HeapMap, HeapStorage, InOrderWindow,
};
pub use expand::{expand_aicpu, expand_all, Expansion};
pub use reference::{expand as reference_expand, RefTask};

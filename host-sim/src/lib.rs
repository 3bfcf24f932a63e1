//! # ptovm-host-sim
//!
//! The host side of ptovm: the **reference expander** (`reference`), an independent
//! single-threaded walk of the whole program that is the ground truth for every per-AICPU
//! expansion; the reference **dependency graph** (`deps`), built with its own TensorMap over
//! regions in exact-match (pto-isa) or overlap mode, and heap storage for `vm`'s fixed-capacity
//! one; the single-thread **measurements** behind `ptovm bench` (`measure`); and the threaded
//! **simulator** (`sim`), which runs `vm::sched` — the scheduler the device runs — on OS
//! threads with simulated AICores and checks every run against the reference; its kernels
//! (`kernel`) are no-ops, or real ones on real data in a computing run (`compute`), whose answer
//! is checked against the same kernels run in program order and against a model.

#[cfg(not(loom))]
pub mod compute;
pub mod deps;
pub mod expand;
mod hash;
#[cfg(not(loom))]
pub mod kernel;
pub mod latency;
pub mod measure;
#[cfg(not(loom))]
pub mod metg;
#[cfg(not(loom))]
pub mod model;
pub mod params;
pub mod reference;
#[cfg(not(loom))]
pub mod sim;
pub use ptovm_vm::waitlist;

pub use deps::{
    check_core_limits, check_run, core_limits, edges, heap_map, DepBuilder, DepMode, Edge,
    EdgeKind, HeapMap, HeapStorage, InOrderWindow,
};
pub use expand::{expand_aicpu, expand_all, Expansion, NEXT_TASK};
pub use params::{Defaults, DefaultsError};
pub use reference::{
    expand as reference_expand, expand_with as reference_expand_with, OnReadback, RefTask,
};

/// Memory for the values `n` AICPUs read back at the program's `READBACK`s
/// (`vm::sched::Aicpu::with_readback`, `vm::readback::read`): per AICPU, the elements of every
/// read-back array and one runtime-parameter block per `READBACK`.
pub fn readback_buffers<'x>(
    v: &ptovm_vm::Verified<'_>,
    p: &ptovm_vm::RuntimeParams<'_>,
    n: u32,
) -> (Vec<Vec<u32>>, Vec<Vec<ptovm_vm::Value<'x>>>) {
    let words = ptovm_vm::sched::readback_words(v, p);
    let blocks = ptovm_vm::sched::readback_blocks(v);
    (
        (0..n).map(|_| vec![0; words]).collect(),
        (0..n)
            .map(|_| vec![ptovm_vm::Value::Scalar(0); blocks])
            .collect(),
    )
}

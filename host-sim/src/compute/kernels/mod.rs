//! The simulator's kernel library (spec/kernels.md): a Rust function per kernel name the
//! bundled examples use, computing in `f32` on their regions' views and rounding once to each
//! output's element type. Each checks its regions' shapes and fails with a [`KernelError`]
//! that says which region and why, never with a panic.
//!
//! Every kernel is deterministic — sums run in a fixed order — so a task computes the same
//! bits wherever and whenever it runs: a run's answer can depend only on the order its
//! dependencies allow, which the in-order comparison checks.

mod attention;
mod dense;
mod moe;
mod sparse;

pub use attention::{
    attn_finalize, attn_init, attn_kernel, decode_chunk, decode_full, merge_states, online_softmax,
    pv_matmul, qk_matmul,
};
pub use dense::{
    add, matmul, matmul_silu, residual, rmsnorm, rope, rope_angle, silu, silu_mul, RMS_EPS,
};
pub use moe::{combine_topk, route_top2};
pub use sparse::{
    indexer_prolog, indexer_score, lightning_indexer, mla_prolog, sparse_attn, top_k,
};

use ptovm_vm::desc::Descriptor;

use super::View;
use crate::kernel::{Call, KernelError, Registry};

pub(crate) use dense::product;

/// Every kernel of the library, by the names the bundled examples give them.
pub fn library() -> Registry {
    type K = fn(&Call<'_>) -> Result<(), KernelError>;
    let table: &[(&str, K)] = &[
        // Dense layers (the LLaMA layer).
        ("matmul", matmul),
        ("matmul_q", matmul),
        ("matmul_k", matmul),
        ("matmul_v", matmul),
        ("matmul_o", matmul),
        ("matmul_gate", matmul),
        ("matmul_up", matmul),
        ("matmul_down", matmul),
        ("rmsnorm", rmsnorm),
        ("rope", rope),
        ("rope_q", rope),
        ("rope_k", rope),
        ("residual", residual),
        ("add", add),
        ("silu_mul", silu_mul),
        // Flash attention (the LLaMA layer) and whole-head attention.
        ("attn_init", attn_init),
        ("qk_matmul", qk_matmul),
        ("online_softmax", online_softmax),
        ("pv_matmul", pv_matmul),
        ("attn_finalize", attn_finalize),
        ("attn_kernel", attn_kernel),
        // Decode with split-KV.
        ("decode_chunk", decode_chunk),
        ("decode_full", decode_full),
        ("merge_states", merge_states),
        // Their tier variants (examples/decode_planned.pto): kernels tuned for short and long
        // sequences compute the same values.
        ("decode_chunk_short", decode_chunk),
        ("decode_chunk_long", decode_chunk),
        ("decode_full_short", decode_full),
        ("decode_full_long", decode_full),
        // Mixture of experts.
        ("router", matmul),
        ("route_top2", route_top2),
        ("expert_up", matmul_silu),
        ("expert_down", matmul),
        ("combine_topk", combine_topk),
        // DeepSeek V3.2's sparse attention.
        ("mla_prolog", mla_prolog),
        ("indexer_prolog", indexer_prolog),
        ("lightning_indexer", lightning_indexer),
        ("sparse_attn", sparse_attn),
    ];
    let mut r = Registry::new();
    for &(name, k) in table {
        r.register(name, k);
    }
    r
}

/// `Ok` when `ok`, else the region's error saying `what`.
pub(crate) fn check(
    ok: bool,
    region: &View<'_>,
    what: impl std::fmt::Display,
) -> Result<(), KernelError> {
    if ok {
        Ok(())
    } else {
        Err(region.error(what))
    }
}

/// Parameter `i` of the task.
pub(crate) fn param(d: &Descriptor, i: usize) -> Result<i64, KernelError> {
    d.params().get(i).copied().ok_or_else(|| {
        KernelError::new(format!(
            "the kernel reads parameter {i}, the task gives {}",
            d.params().len()
        ))
    })
}

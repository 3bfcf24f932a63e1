//! A task's declared duration (spec/bytecode.md §6.2): its kernel's cost expression evaluated
//! at the task — its parameters (`ARG`), the sizes of its regions (`SIZE`), runtime scalars and
//! constants. Nothing on the device reads it: the machine model does (`host_sim::model`).

use crate::desc::Binding;
use crate::format::CostUnit;
use crate::interp::{eval_postfix_with, Io};
use crate::opcodes::ExprOp;
use crate::params::RuntimeParams;
use crate::planning::ExprError;
use crate::Verified;

/// Why a task's cost could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// Evaluating the expression failed.
    #[error(transparent)]
    Expr(#[from] ExprError),
    /// The expression gave a negative duration.
    #[error("the cost is {0}, below zero")]
    Negative(i64),
}

/// The duration a task of kernel `kernel` with parameters `params` and regions `ios` declares
/// through the kernel's cost, in the cost's unit; `None` when the kernel declares none.
/// `tensors` are the program's tensors shaped by the launch (`Binding::declared`), which give
/// the extent of a dimension a region does not name.
pub fn task_cost(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    tensors: &[Binding],
    kernel: u16,
    params: &[i64],
    ios: &[Io],
) -> Result<Option<(u64, CostUnit)>, CostError> {
    let Some((start, unit)) = v.kernels().get(kernel as usize).and_then(|k| k.cost()) else {
        return Ok(None);
    };
    let value = eval_postfix_with(v.exprs(), p, start as u32, u32::MAX, |r| {
        match ExprOp::from_u8(r.opcode) {
            Some(ExprOp::ARG) => params.get(r.op1() as usize).copied().unwrap_or(0),
            Some(ExprOp::SIZE) => region_size(ios, tensors, r.op1() as usize, r.op2()),
            // The verifier admits no other leaf of this kind in a cost.
            _ => 0,
        }
    })
    .map_err(|e| CostError::Expr(e.into()))?;
    if value < 0 {
        return Err(CostError::Negative(value));
    }
    Ok(Some((value as u64, unit)))
}

/// `SIZE region dim` of a task with regions `ios`: the region's extent in dimension `dim − 1`
/// — the range it names, else the tensor's whole dimension (1 past the tensor's rank) — or,
/// for `dim` 0, the product of its extents over the dimensions it names and the tensor's rank
/// (saturating).
fn region_size(ios: &[Io], tensors: &[Binding], region: usize, dim: u32) -> i64 {
    let Some(io) = ios.get(region) else {
        return 0;
    };
    let shape = tensors.get(io.tensor as usize);
    let extent = |d: usize| -> i64 {
        match io.dims().get(d) {
            Some(&(lo, hi)) => hi.saturating_sub(lo).max(0),
            None => shape
                .filter(|b| d < b.rank as usize)
                .map_or(1, |b| b.dims[d] as i64),
        }
    };
    match dim {
        0 => {
            let rank = shape.map_or(0, |b| b.rank as usize);
            (0..io.dims().len().max(rank)).fold(1i64, |n, d| n.saturating_mul(extent(d)))
        }
        d => extent(d as usize - 1),
    }
}

//! Reading a tensor back (`READBACK`, spec/bytecode.md §5.9, spec/runtime.md §4.5): a point of
//! the program where every AICPU waits until every task before it has completed, reads a small
//! tensor its tasks wrote (a router's expert counts and token lists), and continues with those
//! values as a runtime array that later statements read.
//!
//! This module holds what the interpreter, the scheduler and the reference expander share: the
//! point itself ([`Readback`]), how a raw element is read as a value ([`value_of`]) and the
//! check the values pass before anything reads them ([`check_values`]). Waiting is the
//! scheduler's (`sched`), reading memory its environment's (`sched::Env::read_back`).

use crate::format::Record;
use crate::interp::RunError;
use crate::{DType, RuntimeParams, Value, Verified};

/// A `READBACK` the walk reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readback {
    /// Instruction index of the `READBACK`.
    pub pc: u32,
    /// The tensor read back.
    pub tensor: u16,
    /// The runtime array it replaces.
    pub slot: u16,
    /// Every element must be in `0 ..= bound` (the bound expression's value where the walk
    /// reached it).
    pub bound: i64,
    /// Its index among the program's `READBACK`s (in code order).
    pub index: u32,
}

/// The program's `READBACK` records with their instruction indices, in code order (at most
/// [`limits::MAX_READBACKS`]; the verifier lists them).
pub fn records<'v>(v: &'v Verified<'_>) -> impl Iterator<Item = (u32, &'v Record)> + 'v {
    let code = v.code();
    v.readbacks()
        .iter()
        .filter_map(move |(pc, _)| code.get(pc as usize).map(|r| (pc, r)))
}

/// The value of a raw element of a tensor of element type `dtype` (`I32` or `U32`, which the
/// verifier requires): a signed or an unsigned 32-bit integer.
#[inline]
pub fn value_of(dtype: u8, raw: u32) -> i64 {
    if dtype == DType::I32 as u8 {
        raw as i32 as i64
    } else {
        raw as i64
    }
}

/// Checks the raw elements `values` read back at `rb` from a tensor of element type `dtype`:
/// each in `0 ..= rb.bound`.
pub fn check_values(rb: &Readback, dtype: u8, values: &[u32]) -> Result<(), RunError> {
    for (i, &raw) in values.iter().enumerate() {
        let value = value_of(dtype, raw);
        if !(0..=rb.bound).contains(&value) {
            return Err(RunError::ReadbackRange {
                pc: rb.pc,
                slot: rb.slot,
                index: i as u32,
                value,
                bound: rb.bound,
            });
        }
    }
    Ok(())
}

/// Why [`read`] could not give new parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The values read back are out of range or break the launch's rules for arrays.
    Run(RunError),
    /// The buffers are smaller than the program's read-backs need.
    Short,
}

/// Reads back at `rb` into memory the caller owns for the whole launch: takes the next words
/// of `values` (as many as the runtime array has) and the next runtime-parameter block of
/// `slots` (shortening both), fills the words with the launch's values of the array, lets
/// `read` overwrite them with the tensor's elements (it returns whether it did), checks them
/// ([`check_values`], `RuntimeParams::rebind`) and returns the parameters to continue with:
/// `old` with the array replaced.
pub fn read<'p>(
    v: &Verified<'_>,
    old: &RuntimeParams<'p>,
    rb: &Readback,
    values: &mut &'p mut [u32],
    slots: &mut &'p mut [Value<'p>],
    read: impl FnOnce(&mut [u32]) -> bool,
) -> Result<RuntimeParams<'p>, ReadError> {
    let slot = rb.slot as usize;
    let launch = old.array(slot);
    let n = old.values().len();
    if values.len() < launch.len() || slots.len() < n {
        return Err(ReadError::Short);
    }
    let (now, rest) = core::mem::take(values).split_at_mut(launch.len());
    *values = rest;
    now.copy_from_slice(launch);
    read(now);
    let dtype = v.tensors().get(rb.tensor as usize).map_or(0, |t| t.dtype);
    check_values(rb, dtype, now).map_err(ReadError::Run)?;
    let now: &'p [u32] = now;
    let (block, rest) = core::mem::take(slots).split_at_mut(n);
    *slots = rest;
    block.copy_from_slice(old.values());
    block[slot] = Value::Array(now);
    let block: &'p [Value<'p>] = block;
    old.rebind(v, block)
        .map_err(|problem| ReadError::Run(RunError::ReadbackParams { pc: rb.pc, problem }))
}

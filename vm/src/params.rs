//! The runtime-parameter block: launch-time values of the program's slots (spec/bytecode.md
//! §3.6), and its validation before anything runs.

use crate::format::{Record, TensorEntry, DIM_IS_SLOT};
use crate::opcodes::Opcode;
use crate::{ParamKind, Verified};

/// The value of one runtime slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// A scalar slot's value.
    Scalar(u32),
    /// An array slot's values.
    Array(&'a [u32]),
}

/// What is wrong with a runtime-parameter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// Fewer or more values than the program has slots.
    #[error("the program has {expected} runtime parameters but {given} values were given")]
    Count {
        /// Slots of the program.
        expected: usize,
        /// Values given.
        given: usize,
    },
    /// A scalar given for an array slot or the reverse.
    #[error("runtime parameter {slot} is {expected} but a {given} was given")]
    Kind {
        /// The slot.
        slot: usize,
        /// Its kind.
        expected: &'static str,
        /// What was given.
        given: &'static str,
    },
    /// A sparse axis' indptr array with no entry.
    #[error(
        "runtime array {slot} is the indptr of a sparse axis and must have at least one entry"
    )]
    EmptyIndptr {
        /// The slot.
        slot: usize,
    },
    /// A sparse axis' indptr array that decreases.
    #[error("runtime array {slot} is the indptr of a sparse axis but decreases at index {at} ({prev} then {next})")]
    IndptrNotMonotone {
        /// The slot.
        slot: usize,
        /// Index of the smaller value.
        at: usize,
        /// Value before.
        prev: u32,
        /// Value at `at`.
        next: u32,
    },
    /// A sparse axis' indptr pointing past its indices array.
    #[error("runtime array {slot} (indptr) ends at {last} but its indices array {indices} has {len} entries")]
    IndptrPastIndices {
        /// The indptr slot.
        slot: usize,
        /// Its last value.
        last: u32,
        /// The indices slot.
        indices: usize,
        /// Its length.
        len: usize,
    },
    /// A flattened ragged or sparse axis whose `outer` count (read from runtime parameters
    /// only, so known at launch) is negative or larger than its array allows: a ragged axis
    /// sums `lengths[0 .. outer]`, a sparse axis reads `indptr[outer]`.
    #[error("a {what} axis has outer count {outer}, but its runtime array {slot} has {len} entries (at most {max} allowed)")]
    OuterOutOfRange {
        /// `ragged` or `sparse`.
        what: &'static str,
        /// The lengths (ragged) or indptr (sparse) slot.
        slot: usize,
        /// The outer count.
        outer: i64,
        /// The array's length.
        len: usize,
        /// The largest count allowed (`len` for ragged, `len − 1` for sparse).
        max: usize,
    },
    /// A planned value (spec/bytecode.md §3.6.2) could not be computed.
    #[error("planned value {plan}: {problem}")]
    Plan {
        /// Its index in the plan table (runtime slot `params + plan`).
        plan: u32,
        /// Why.
        problem: crate::planning::PlanProblem,
    },
    /// The runtime array a tensor is read back into (`READBACK`) does not have one entry per
    /// element of the tensor, or the tensor has more elements than a read-back may.
    #[error("runtime array {slot} is read back from a tensor of {elems} elements (at most 65536) but has {len} entries")]
    Readback {
        /// The array's slot.
        slot: usize,
        /// Its length.
        len: usize,
        /// The tensor's elements.
        elems: u64,
    },
    /// The AICPU id or count is invalid.
    #[error("AICPU {aicpu} of {count}: the count must be in 1..=64 and the id below it")]
    Aicpu {
        /// The id given.
        aicpu: u32,
        /// The count given.
        count: u32,
    },
}

/// A validated runtime-parameter block for one program, with the planned values computed
/// from it: runtime slots `0 .. params` are the given values, `params ..` the planned ones.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeParams<'p> {
    slots: &'p [Value<'p>],
    planned: [u32; crate::limits::MAX_PLANS as usize],
    plan_work: u64,
}

impl<'p> RuntimeParams<'p> {
    /// No values (for tests of expressions that read none).
    #[cfg(test)]
    pub(crate) fn empty() -> RuntimeParams<'static> {
        RuntimeParams {
            slots: &[],
            planned: [0; crate::limits::MAX_PLANS as usize],
            plan_work: 0,
        }
    }

    /// `slots` unchecked, with no planned values (for tests of expressions that read them).
    #[cfg(test)]
    pub(crate) fn unchecked(slots: &'p [Value<'p>]) -> RuntimeParams<'p> {
        RuntimeParams {
            slots,
            ..RuntimeParams::empty()
        }
    }

    /// Checks `slots` against the program: one value per slot, of the slot's kind; every sparse
    /// axis' indptr non-empty, non-decreasing and within its indices array; every flattened
    /// axis' `outer` count within its array when runtime parameters alone decide it. Then
    /// computes the program's planned values (`crate::planning`), in plan order.
    pub fn new(v: &Verified<'_>, slots: &'p [Value<'p>]) -> Result<RuntimeParams<'p>, ParamError> {
        Self::check_kinds(v, slots)?;
        let mut me = RuntimeParams {
            slots,
            planned: [0; crate::limits::MAX_PLANS as usize],
            plan_work: 0,
        };
        // Plans first: a flattened axis' `outer` may read one, and so may a tensor's shape.
        crate::planning::plan(v, &mut me)
            .map_err(|(plan, problem)| ParamError::Plan { plan, problem })?;
        me.check_arrays(v)?;
        for (_, r) in crate::readback::records(v) {
            let slot = (r.op2() & 0xFFFF) as usize;
            let len = me.array(slot).len();
            let elems = v.tensors().get(r.op1() as usize).map_or(0, |t| {
                (0..t.rank as usize)
                    .map(|d| u64::from(me.tensor_dim(t, d)))
                    .product()
            });
            if elems > crate::limits::MAX_READBACK_ELEMS as u64 || len as u64 != elems {
                return Err(ParamError::Readback { slot, len, elems });
            }
        }
        Ok(me)
    }

    /// These parameters with `slots` in place of the given values — the same kinds, runtime
    /// arrays read back (`READBACK`) replaced — checked as the launch checks them; the planned
    /// values are kept (computed at launch, they read no read-back array).
    pub fn rebind<'q>(
        &self,
        v: &Verified<'_>,
        slots: &'q [Value<'q>],
    ) -> Result<RuntimeParams<'q>, ParamError>
    where
        'p: 'q,
    {
        Self::check_kinds(v, slots)?;
        let me = RuntimeParams {
            slots,
            planned: self.planned,
            plan_work: self.plan_work,
        };
        me.check_arrays(v)?;
        Ok(me)
    }

    /// One value per slot, of the slot's kind.
    fn check_kinds(v: &Verified<'_>, slots: &[Value<'_>]) -> Result<(), ParamError> {
        let params = v.params();
        if slots.len() != params.len() {
            return Err(ParamError::Count {
                expected: params.len(),
                given: slots.len(),
            });
        }
        for (slot, (p, val)) in params.iter().zip(slots).enumerate() {
            let (expected, given) = match (ParamKind::from_u8(p.kind), val) {
                (Some(ParamKind::Scalar), Value::Scalar(_))
                | (Some(ParamKind::Array), Value::Array(_)) => continue,
                (Some(ParamKind::Scalar), _) => ("a scalar", "array"),
                _ => ("an array", "scalar"),
            };
            return Err(ParamError::Kind {
                slot,
                expected,
                given,
            });
        }
        Ok(())
    }

    /// Every sparse axis' indptr non-empty, non-decreasing and within its indices array;
    /// every flattened axis' `outer` count within its array when runtime parameters alone
    /// decide it.
    fn check_arrays(&self, v: &Verified<'_>) -> Result<(), ParamError> {
        for a in v.axes() {
            let op = Opcode::from_u8(a.opcode);
            if op.is_some_and(|o| o.is_sparse_axis()) {
                self.check_sparse(a)?;
            }
            if matches!(op, Some(Opcode::AXIS_RAGGED | Opcode::AXIS_SPARSE)) {
                self.check_outer(v, a)?;
            }
        }
        Ok(())
    }

    /// A flattened axis whose `outer` reads no loop variable has the same count wherever it
    /// is used: check it now (one that reads loop variables is checked when evaluated, as a
    /// `RunError::Index`; so is one whose evaluation fails).
    fn check_outer(&self, v: &Verified<'_>, a: &Record) -> Result<(), ParamError> {
        let Some(op) = Opcode::from_u8(a.opcode) else {
            return Ok(());
        };
        let Some(e) = op.axis_expr(a) else {
            return Ok(());
        };
        let exprs = v.exprs();
        if crate::interp::loops_read(exprs, e) > 0 {
            return Ok(());
        }
        let vars = [0i64; crate::limits::MAX_LOOP_DEPTH];
        let Ok(outer) = crate::interp::eval_postfix(exprs, self, &vars, e, 0) else {
            return Ok(());
        };
        let slot = a.op1() as usize;
        let len = self.array(slot).len();
        let (what, max) = if op == Opcode::AXIS_RAGGED {
            ("ragged", len)
        } else {
            ("sparse", len.saturating_sub(1))
        };
        if outer < 0 || outer as u64 > max as u64 {
            return Err(ParamError::OuterOutOfRange {
                what,
                slot,
                outer,
                len,
                max,
            });
        }
        Ok(())
    }

    fn check_sparse(&self, a: &Record) -> Result<(), ParamError> {
        let p = a.op1() as usize;
        let q = (a.op2() >> 16) as usize;
        let indptr = self.array(p);
        let Some(&last) = indptr.last() else {
            return Err(ParamError::EmptyIndptr { slot: p });
        };
        for (i, w) in indptr.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(ParamError::IndptrNotMonotone {
                    slot: p,
                    at: i + 1,
                    prev: w[0],
                    next: w[1],
                });
            }
        }
        let len = self.array(q).len();
        if last as usize > len {
            return Err(ParamError::IndptrPastIndices {
                slot: p,
                last,
                indices: q,
                len,
            });
        }
        Ok(())
    }

    /// The scalar in `slot`: a given one, or past them a planned value (0 if the slot is not
    /// a scalar, which verification excludes).
    #[inline]
    pub fn scalar(&self, slot: usize) -> u32 {
        match self.slots.get(slot) {
            Some(Value::Scalar(x)) => *x,
            _ => self.planned_value(slot),
        }
    }

    /// [`RuntimeParams::scalar`] past the given slots (kept out of the given scalars' path).
    #[cold]
    fn planned_value(&self, slot: usize) -> u32 {
        slot.checked_sub(self.slots.len())
            .and_then(|plan| self.planned.get(plan))
            .copied()
            .unwrap_or(0)
    }

    /// Records planned value `plan` and the planning work done so far.
    pub(crate) fn set_planned(&mut self, plan: usize, value: u32, work: u64) {
        if let Some(x) = self.planned.get_mut(plan) {
            *x = value;
        }
        self.plan_work = work;
    }

    /// The planned values (in plan-table order; those past the program's plan count are 0)
    /// and the expression nodes their computation evaluated.
    pub fn planned(&self) -> crate::planning::Planned {
        crate::planning::Planned {
            values: self.planned,
            work: self.plan_work,
        }
    }

    /// Extent of dimension `d` of tensor `t`: its declared size, or the runtime scalar it names
    /// ([`DIM_IS_SLOT`]).
    #[inline]
    pub fn tensor_dim(&self, t: &TensorEntry, d: usize) -> u32 {
        let x = t.dims.get(d).map_or(0, |x| x.get());
        if x & DIM_IS_SLOT != 0 {
            self.scalar((x & 0xFFFF) as usize)
        } else {
            x
        }
    }

    /// The array in `slot` (empty if the slot is not an array, which validation excludes).
    #[inline]
    pub fn array(&self, slot: usize) -> &'p [u32] {
        match self.slots.get(slot) {
            Some(Value::Array(a)) => a,
            _ => &[],
        }
    }

    /// All values.
    pub fn values(&self) -> &'p [Value<'p>] {
        self.slots
    }
}

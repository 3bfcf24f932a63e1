//! Planned values (spec/bytecode.md §3.6.2, §6.1): runtime scalars a launch computes from its
//! runtime parameters before any task, identically on every AICPU — FlashInfer's decode
//! planning (the smallest split-KV chunk size whose blocks fit the machine) written in the
//! module instead of a host planner.
//!
//! A planned value is an expression that may hold **reductions** (`sum`, `max`, `min` of an
//! expression over a range of values of a variable) and **searches** (the smallest value of a
//! range at which a monotone predicate holds, by binary search), nested at most
//! `limits::MAX_PLAN_NESTING` deep. Plans run in table order, each reading the runtime
//! parameters and the plans before it. Every expression node evaluated counts as one unit of
//! planning **work**, at most `limits::MAX_PLAN_WORK` a launch: a plan over a huge range fails
//! with an error instead of stalling the launch.

use crate::format::limits;
use crate::interp::{binary, divide, eval_leaf, unary, RunError};
use crate::opcodes::{ExprKind, ExprOp};
use crate::{Record, RuntimeParams, Verified};

/// Why an expression evaluated outside an instruction — a planned value, a kernel's cost
/// (`crate::cost`) — failed: what its evaluation raises, with no instruction to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Arithmetic overflowed 64-bit signed integers.
    #[error("arithmetic overflow")]
    Overflow,
    /// Division or remainder by zero.
    #[error("division by zero")]
    DivByZero,
    /// An index outside a runtime array.
    #[error("index {index} is outside runtime array {slot} ({len} entries)")]
    Index {
        /// The array's slot.
        slot: u16,
        /// The index.
        index: i64,
        /// The array's length.
        len: usize,
    },
}

impl From<RunError> for ExprError {
    fn from(e: RunError) -> ExprError {
        match e {
            RunError::DivByZero { .. } => ExprError::DivByZero,
            RunError::Index {
                slot, index, len, ..
            } => ExprError::Index { slot, index, len },
            // Expressions raise nothing else.
            _ => ExprError::Overflow,
        }
    }
}

/// Why a planned value could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanProblem {
    /// Its expression failed.
    #[error(transparent)]
    Expr(#[from] ExprError),
    /// A `max`, `min` or `search` over an empty range.
    #[error("{what} over the empty range [{lo}, {hi})")]
    EmptyRange {
        /// `max`, `min` or `search`.
        what: &'static str,
        /// The range's start.
        lo: i64,
        /// Its end (exclusive).
        hi: i64,
    },
    /// A search whose predicate does not hold at the range's last value.
    #[error("search over [{lo}, {hi}): the condition does not hold at {last}, so no value in the range satisfies it", last = hi - 1)]
    NeverHolds {
        /// The range's start.
        lo: i64,
        /// Its end (exclusive).
        hi: i64,
    },
    /// A value that is not a `u32` (planned values are runtime scalars).
    #[error("the value {0} is not in 0 ..= 4294967295")]
    NotU32(i64),
    /// More planning work than a launch allows.
    #[error(
        "planning evaluates more than {} expression nodes",
        limits::MAX_PLAN_WORK
    )]
    TooCostly,
}

impl From<RunError> for PlanProblem {
    fn from(e: RunError) -> PlanProblem {
        PlanProblem::Expr(e.into())
    }
}

/// The planned values of one launch, in plan-table order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Planned {
    /// The values (those past the program's plan count are 0).
    pub values: [u32; limits::MAX_PLANS as usize],
    /// Expression nodes evaluated to compute them (the planning's cost on an AICPU).
    pub work: u64,
}

/// Computes every planned value of `v` from the runtime parameters in `p` (whose planned
/// values are filled in one by one, so each plan reads those before it). Gives the failing
/// plan's index with the problem.
pub(crate) fn plan(v: &Verified<'_>, p: &mut RuntimeParams<'_>) -> Result<(), (u32, PlanProblem)> {
    let mut work = 0u64;
    for (i, entry) in v.plans().iter().enumerate() {
        let mut e = Evaluation {
            exprs: v.exprs(),
            p,
            vars: [0; limits::MAX_LOOP_DEPTH],
            work,
        };
        let x = e.eval(entry.expr.get() as u32).map_err(|e| (i as u32, e))?;
        work = e.work;
        let x = u32::try_from(x).map_err(|_| (i as u32, PlanProblem::NotU32(x)))?;
        p.set_planned(i, x, work);
    }
    Ok(())
}

type R<T> = Result<T, PlanProblem>;

/// One plan's evaluation: the pool, the runtime parameters (and the plans before it), the
/// values of the variables the enclosing reductions bind (by depth), and the work counted so
/// far in the launch.
struct Evaluation<'e, 'p> {
    exprs: &'e [Record],
    p: &'e RuntimeParams<'p>,
    vars: [i64; limits::MAX_LOOP_DEPTH],
    work: u64,
}

impl Evaluation<'_, '_> {
    /// The value of the plan expression at `start`: postfix evaluation as `eval_postfix` does
    /// it (every operator but the reductions and searches goes through its helpers, so they
    /// mean the same here), counting each node as work.
    fn eval(&mut self, start: u32) -> R<i64> {
        let mut st = [0i64; limits::MAX_EXPR_STACK];
        let mut sp = 0usize;
        let nodes = self.exprs.get(start as usize..).unwrap_or(&[]);
        for r in nodes.iter().take(limits::MAX_EXPR_LEN) {
            self.work += 1;
            if self.work > limits::MAX_PLAN_WORK {
                return Err(PlanProblem::TooCostly);
            }
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                break;
            };
            let pops = match op.kind() {
                ExprKind::End => break,
                ExprKind::Leaf => 0,
                ExprKind::Unary => 1,
                ExprKind::Binary | ExprKind::Binder => 2,
            };
            if sp < pops {
                break;
            }
            let operands = &st[sp - pops..sp];
            let value = match (op.kind(), operands) {
                (ExprKind::Binder, &[lo, hi]) => self.bind(op, r, lo, hi)?,
                _ => self.apply(r, operands)?,
            };
            sp -= pops;
            if sp < st.len() {
                st[sp] = value;
                sp += 1;
            }
        }
        Ok(if sp > 0 { st[sp - 1] } else { 0 })
    }

    /// One node that is not a binder, applied to its operands by the general evaluator's own
    /// operators (`eval_postfix`'s helpers: the same meaning and the same errors).
    fn apply(&self, r: &Record, operands: &[i64]) -> R<i64> {
        Ok(match *operands {
            [] => eval_leaf(r, self.p, &self.vars),
            [a] => unary(r.opcode, r.op1(), a, self.p, 0)?,
            [a, b, ..] => match binary(r.opcode, a, b, 0) {
                Some(x) => x?,
                // Division, remainder, `ceil_div`.
                None => divide(r.opcode, a, b, 0)?,
            },
        })
    }

    /// The body of the reduction `r` with its variable bound to `x`.
    fn at(&mut self, r: &Record, x: i64) -> R<i64> {
        self.vars[r.op1() as usize % limits::MAX_LOOP_DEPTH] = x;
        self.eval(r.op2())
    }

    /// A reduction or search (`op`, node `r`) over `[lo, hi)`: binds variable `r.op1()` to the
    /// range's values and evaluates the body `r.op2()` at each.
    fn bind(&mut self, op: ExprOp, r: &Record, lo: i64, hi: i64) -> R<i64> {
        let empty = |what| PlanProblem::EmptyRange { what, lo, hi };
        match op {
            ExprOp::SUM => {
                let mut sum = 0i64;
                for x in lo..hi.max(lo) {
                    sum = sum.checked_add(self.at(r, x)?).ok_or(ExprError::Overflow)?;
                }
                Ok(sum)
            }
            ExprOp::MAXOF | ExprOp::MINOF => {
                if lo >= hi {
                    return Err(empty(op.symbol()));
                }
                let mut best = self.at(r, lo)?;
                for x in lo + 1..hi {
                    let y = self.at(r, x)?;
                    best = if op == ExprOp::MAXOF {
                        best.max(y)
                    } else {
                        best.min(y)
                    };
                }
                Ok(best)
            }
            _ => {
                // SEARCH: the predicate must hold at the last value; then binary search keeps
                // `high` a value where it holds and `low` the smallest candidate (FlashInfer's
                // loop: `mid = (low + high) / 2`, holds → `high = mid`, else `low = mid + 1`).
                if lo >= hi {
                    return Err(empty("search"));
                }
                let (mut low, mut high) = (lo, hi - 1);
                if self.at(r, high)? == 0 {
                    return Err(PlanProblem::NeverHolds { lo, hi });
                }
                while low < high {
                    // No overflow: `low + (high − low) / 2` lies between them.
                    let mid = low + (high - low) / 2;
                    if self.at(r, mid)? != 0 {
                        high = mid;
                    } else {
                        low = mid + 1;
                    }
                }
                Ok(low)
            }
        }
    }
}

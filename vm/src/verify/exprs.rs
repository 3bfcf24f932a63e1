//! The expression pool's checks (spec/bytecode.md §7, steps 6 and 11): well-formed postfix
//! expressions, and each use of one in its context.

use super::*;

impl<'v, 'a> Checker<'v, 'a> {
    /// Context-free pass over the pool: it is a sequence of well-formed postfix expressions.
    pub(super) fn expr_pool(&mut self) -> R<()> {
        let mut sp = 0u32;
        let mut len = 0usize;
        for (i, r) in self.v.exprs.iter().enumerate() {
            let at = self.loc(Section::Exprs, i as u32, sizes::RECORD);
            let e = |problem| {
                Err(VerifyError {
                    kind: ErrorKind::Expr {
                        node: i as u32,
                        problem,
                    },
                    at,
                })
            };
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                return e(ExprProblem::UnknownOp(r.opcode));
            };
            if r.masked(op.fields()) != *r {
                return e(ExprProblem::NonCanonical);
            }
            len += 1;
            if len > limits::MAX_EXPR_LEN {
                return e(ExprProblem::TooLong);
            }
            match op {
                ExprOp::VAR => limit(
                    "loop depth",
                    r.op1() as u32,
                    limits::MAX_LOOP_DEPTH as u32 - 1,
                    at,
                )?,
                ExprOp::PARAM => self.slot(r.op1() as u32, ParamKind::Scalar, at)?,
                ExprOp::ELEM => self.slot(r.op1() as u32, ParamKind::Array, at)?,
                _ => {}
            }
            match op.kind() {
                ExprKind::End => {
                    if sp != 1 {
                        return e(ExprProblem::NotSingle(sp));
                    }
                    sp = 0;
                    len = 0;
                }
                ExprKind::Leaf => {
                    sp += 1;
                    if sp as usize > limits::MAX_EXPR_STACK {
                        return e(ExprProblem::Overflow);
                    }
                }
                ExprKind::Unary => {
                    if sp < 1 {
                        return e(ExprProblem::Underflow);
                    }
                }
                ExprKind::Binary => {
                    if sp < 2 {
                        return e(ExprProblem::Underflow);
                    }
                    sp -= 1;
                }
            }
        }
        if len != 0 {
            let n = self.v.exprs.len() as u32;
            return Err(VerifyError {
                kind: ErrorKind::Expr {
                    node: n,
                    problem: ExprProblem::Unterminated,
                },
                at: self.loc(Section::Exprs, n, sizes::RECORD),
            });
        }
        Ok(())
    }

    /// Checks the expression starting at node `idx` where `loops` loops enclose its use (or,
    /// with `loops == None`, where no loop variable may be read). Returns the number of
    /// enclosing loops it needs (deepest depth read + 1).
    pub(super) fn expr(&self, idx: u32, loops: Option<u32>, at: Location) -> R<u32> {
        let n = self.v.exprs.len() as u32;
        if idx >= n {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "expression",
                    index: idx,
                    len: n,
                },
                at,
            });
        }
        let mut sp = 0u32;
        let mut need = 0u32;
        for i in idx..n.min(idx + limits::MAX_EXPR_LEN as u32) {
            let e = |problem| {
                Err(VerifyError {
                    kind: ErrorKind::Expr { node: i, problem },
                    at,
                })
            };
            let Some(r) = self.v.exprs.get(i as usize) else {
                break;
            };
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                return e(ExprProblem::UnknownOp(r.opcode));
            };
            if op == ExprOp::VAR {
                let depth = r.op1() as u32;
                match loops {
                    None => return e(ExprProblem::VarNotAllowed),
                    Some(bound) if depth >= bound => {
                        return Err(VerifyError {
                            kind: ErrorKind::UnboundLoopVar { depth, bound },
                            at,
                        })
                    }
                    Some(_) => need = need.max(depth + 1),
                }
            }
            match op.kind() {
                ExprKind::End => {
                    if sp != 1 {
                        return e(ExprProblem::NotSingle(sp));
                    }
                    return Ok(need);
                }
                ExprKind::Leaf => sp += 1,
                ExprKind::Unary if sp < 1 => return e(ExprProblem::Underflow),
                ExprKind::Unary => {}
                ExprKind::Binary if sp < 2 => return e(ExprProblem::Underflow),
                ExprKind::Binary => sp -= 1,
            }
        }
        // Unreachable for a pool that passed `expr_pool`, kept as an error, not a panic.
        Err(VerifyError {
            kind: ErrorKind::Expr {
                node: idx,
                problem: ExprProblem::TooLong,
            },
            at,
        })
    }
}

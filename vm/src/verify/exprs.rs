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
            if op.kind() == ExprKind::Binder && r.op2() >= i as u32 {
                return e(ExprProblem::BodyNotBefore);
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
                ExprOp::ARG => limit(
                    "task parameter",
                    r.op1() as u32,
                    limits::MAX_TASK_PARAMS as u32 - 1,
                    at,
                )?,
                ExprOp::SIZE => {
                    limit(
                        "task region",
                        r.op1() as u32,
                        limits::MAX_TASK_IO as u32 - 1,
                        at,
                    )?;
                    limit("region dimension", r.op2(), limits::MAX_RANK as u32, at)?;
                }
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
                ExprKind::Binary | ExprKind::Binder => {
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

    /// Checks the plan table (spec/bytecode.md §3.6.2): each planned value's expression reads
    /// constants, the given runtime parameters, the planned values before it and the
    /// variables of the reductions and searches around the read, which nest at most
    /// `MAX_PLAN_NESTING` deep, each binding the next depth.
    /// A body several reductions share is checked for each: the nodes checked in all are at
    /// most [`PLAN_CHECK_NODES`], so a hostile file cannot make verification slow.
    pub(super) fn plans(&mut self) -> R<()> {
        let mut budget = PLAN_CHECK_NODES;
        for (i, p) in self.v.plans.iter().enumerate() {
            let at = self.loc(Section::Plans, i as u32, sizes::PLAN);
            let visible = self.v.params.len() as u32 + i as u32;
            let plan = PlanAt {
                visible,
                plan: i as u32,
                at,
            };
            self.plan_expr(p.expr.get() as u32, 0, &plan, &mut budget)?;
        }
        Ok(())
    }

    /// That `idx` is a node of the pool; gives the pool's length.
    fn expr_index(&self, idx: u32, at: Location) -> R<u32> {
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
        Ok(n)
    }

    /// Checks the plan expression at `idx`, evaluated inside `binders` reductions.
    fn plan_expr(&self, idx: u32, binders: u32, p: &PlanAt, budget: &mut u32) -> R<()> {
        let (visible, plan, at) = (p.visible, p.plan, p.at);
        let n = self.expr_index(idx, at)?;
        let plan_err = |problem| {
            Err(VerifyError {
                kind: ErrorKind::Plan { plan, problem },
                at,
            })
        };
        // The pool passed `expr_pool`: from `idx` the nodes are well formed up to an `END`
        // (if `idx` starts an expression; a body must, checked by the first node's stack).
        if idx > 0 && self.v.exprs[idx as usize - 1].opcode != ExprOp::END as u8 {
            return plan_err("an expression must start at the beginning of one");
        }
        for i in idx..n.min(idx + limits::MAX_EXPR_LEN as u32) {
            let r = &self.v.exprs[i as usize];
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                break;
            };
            *budget = match budget.checked_sub(1) {
                Some(b) => b,
                None => {
                    return plan_err("its reductions' bodies hold more than 65,536 nodes in all")
                }
            };
            match op {
                ExprOp::END => return Ok(()),
                ExprOp::VAR if r.op1() as u32 >= binders => {
                    return Err(VerifyError {
                        kind: ErrorKind::UnboundLoopVar {
                            depth: r.op1() as u32,
                            bound: binders,
                        },
                        at,
                    })
                }
                ExprOp::PARAM if r.op1() as u32 >= visible => {
                    return plan_err("it reads a planned value that is not computed before it");
                }
                ExprOp::ARG | ExprOp::SIZE => {
                    return Err(VerifyError {
                        kind: ErrorKind::Expr {
                            node: i,
                            problem: ExprProblem::CostOnly,
                        },
                        at,
                    })
                }
                _ if op.kind() == ExprKind::Binder => {
                    if r.op1() as u32 != binders {
                        return plan_err("a reduction must bind the next variable depth");
                    }
                    if binders as usize >= limits::MAX_PLAN_NESTING {
                        return plan_err("reductions nest more than 4 deep");
                    }
                    self.plan_expr(r.op2(), binders + 1, p, budget)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks the expression starting at node `idx` where `loops` loops enclose its use (or,
    /// with `loops == None`, where no loop variable may be read). Returns the number of
    /// enclosing loops it needs (deepest depth read + 1).
    pub(super) fn expr(&self, idx: u32, loops: Option<u32>, at: Location) -> R<u32> {
        let n = self.expr_index(idx, at)?;
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
            if matches!(op, ExprOp::ARG | ExprOp::SIZE) {
                return e(ExprProblem::CostOnly);
            }
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
                ExprKind::Binder => return e(ExprProblem::BinderOutsidePlan),
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

impl Checker<'_, '_> {
    /// Checks every kernel's cost expression (spec/bytecode.md §6.2): it starts an expression
    /// of the pool and reads no loop variable, only parameters the kernel's tasks pass and
    /// regions they name, and no reduction.
    pub(super) fn costs(&self) -> R<()> {
        for (i, k) in self.v.kernels.iter().enumerate() {
            let Some((idx, _)) = k.cost() else { continue };
            let at = self.loc(Section::Kernels, i as u32, sizes::KERNEL);
            let n = self.expr_index(idx as u32, at)?;
            let e = |node, problem| {
                Err(VerifyError {
                    kind: ErrorKind::Expr { node, problem },
                    at,
                })
            };
            if idx > 0 && self.v.exprs[idx as usize - 1].opcode != ExprOp::END as u8 {
                return e(idx as u32, ExprProblem::NotStart);
            }
            let out = |what, index: u32, len: u8| {
                Err(VerifyError {
                    kind: ErrorKind::OutOfRange {
                        what,
                        index,
                        len: len as u32,
                    },
                    at,
                })
            };
            for node in idx as u32..n.min(idx as u32 + limits::MAX_EXPR_LEN as u32) {
                let r = &self.v.exprs[node as usize];
                match ExprOp::from_u8(r.opcode) {
                    Some(ExprOp::END) | None => break,
                    Some(ExprOp::VAR) => return e(node, ExprProblem::VarNotAllowed),
                    Some(ExprOp::ARG) if r.op1() as u32 >= k.num_params as u32 => {
                        return out("task parameter of the kernel", r.op1() as u32, k.num_params)
                    }
                    Some(ExprOp::SIZE) if r.op1() as u32 >= k.num_args as u32 => {
                        return out("region of the kernel", r.op1() as u32, k.num_args)
                    }
                    Some(op) if op.kind() == ExprKind::Binder => {
                        return e(node, ExprProblem::BinderOutsidePlan)
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// The most expression nodes the plan checks visit, all plans together (a body shared by
/// several reductions counts once for each).
const PLAN_CHECK_NODES: u32 = 1 << 16;

/// The plan whose expression is being checked: the runtime slots it may read (below
/// `visible`), its index and where its entry is.
struct PlanAt {
    visible: u32,
    plan: u32,
    at: Location,
}

//! Expression evaluation (spec/bytecode.md §6) and region errors.

use super::*;

impl<'a, 'p> Interpreter<'a, 'p> {
    // ---------------------------------------------------------------- expressions

    #[inline]
    pub(super) fn expr_at(&self, i: u32) -> Record {
        self.v.exprs().get(i as usize).copied().unwrap_or_default()
    }

    /// Evaluates the expression at node `start`; `pc` locates errors.
    #[inline(always)]
    pub(super) fn eval(&self, start: u32, pc: u32) -> R<i64> {
        // Fast path: a single leaf, the common case of indices and keys.
        let exprs = self.v.exprs();
        if let (Some(first), Some(next)) =
            (exprs.get(start as usize), exprs.get(start as usize + 1))
        {
            if next.opcode == ExprOp::END as u8 {
                match first.opcode {
                    x if x == ExprOp::VAR as u8 => {
                        return Ok(self.vars[first.op1() as usize % limits::MAX_LOOP_DEPTH])
                    }
                    x if x == ExprOp::CONST as u8 => return Ok(first.op2() as i32 as i64),
                    x if x == ExprOp::PARAM as u8 => {
                        return Ok(self.p.scalar(first.op1() as usize) as i64)
                    }
                    _ => {}
                }
            }
        }
        self.eval_stack(start, pc)
    }

    /// The general evaluator.
    #[inline(never)]
    pub(super) fn eval_stack(&self, start: u32, pc: u32) -> R<i64> {
        eval_postfix(self.v.exprs(), &self.p, &self.vars, start, pc)
    }

    /// Whether the expression at `start` reads the loop variable at `depth`.
    pub(super) fn expr_reads(&self, start: u32, depth: u16) -> bool {
        for i in start..start + limits::MAX_EXPR_LEN as u32 {
            let r = self.expr_at(i);
            if r.opcode == ExprOp::END as u8 {
                return false;
            }
            if r.opcode == ExprOp::VAR as u8 && r.op1() == depth {
                return true;
            }
        }
        false
    }
}

/// The loops the expression at node `start` of `exprs` needs bound: its deepest `VAR` depth
/// plus one, 0 when it reads no loop variable (then runtime parameters alone decide it).
pub(crate) fn loops_read(exprs: &[Record], start: u32) -> u32 {
    exprs
        .iter()
        .skip(start as usize)
        .take(limits::MAX_EXPR_LEN)
        .take_while(|r| r.opcode != ExprOp::END as u8)
        .filter(|r| r.opcode == ExprOp::VAR as u8)
        .map(|r| r.op1() as u32 + 1)
        .max()
        .unwrap_or(0)
}

/// Evaluates the postfix expression at node `start` of `exprs` with a fixed stack; `pc` locates
/// errors.
#[inline(never)]
pub(crate) fn eval_postfix(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    start: u32,
    pc: u32,
) -> R<i64> {
    let mut st = [0i64; limits::MAX_EXPR_STACK];
    let mut sp = 0usize;
    let ovf = RunError::Overflow { pc };
    for i in start..start + limits::MAX_EXPR_LEN as u32 {
        let r = exprs.get(i as usize).copied().unwrap_or_default();
        let Some(op) = ExprOp::from_u8(r.opcode) else {
            break;
        };
        match op.kind() {
            ExprKind::End => return Ok(if sp > 0 { st[sp - 1] } else { 0 }),
            ExprKind::Leaf => {
                let x = match op {
                    ExprOp::CONST => r.op2() as i32 as i64,
                    ExprOp::VAR => vars[r.op1() as usize % limits::MAX_LOOP_DEPTH],
                    _ => p.scalar(r.op1() as usize) as i64,
                };
                if sp < st.len() {
                    st[sp] = x;
                    sp += 1;
                }
            }
            ExprKind::Unary => {
                if sp == 0 {
                    break;
                }
                let a = st[sp - 1];
                st[sp - 1] = match op {
                    ExprOp::NEG => a.checked_neg().ok_or(ovf)?,
                    ExprOp::NOT => (a == 0) as i64,
                    _ => {
                        let slot = r.op1();
                        let arr = p.array(slot as usize);
                        match usize::try_from(a).ok().and_then(|i| arr.get(i)) {
                            Some(x) => *x as i64,
                            None => {
                                return Err(RunError::Index {
                                    pc,
                                    slot,
                                    index: a,
                                    len: arr.len(),
                                })
                            }
                        }
                    }
                };
            }
            ExprKind::Binary => {
                if sp < 2 {
                    break;
                }
                let (a, b) = (st[sp - 2], st[sp - 1]);
                sp -= 1;
                st[sp - 1] = match op {
                    ExprOp::ADD => a.checked_add(b).ok_or(ovf)?,
                    ExprOp::SUB => a.checked_sub(b).ok_or(ovf)?,
                    ExprOp::MUL => a.checked_mul(b).ok_or(ovf)?,
                    ExprOp::DIV | ExprOp::MOD | ExprOp::CEILDIV => {
                        if b == 0 {
                            return Err(RunError::DivByZero { pc });
                        }
                        let q = a.checked_div(b).ok_or(ovf)?;
                        let m = a.checked_rem(b).ok_or(ovf)?;
                        match op {
                            ExprOp::DIV => q,
                            ExprOp::MOD => m,
                            _ if m != 0 && ((m > 0) == (b > 0)) => q + 1,
                            _ => q,
                        }
                    }
                    ExprOp::MIN => a.min(b),
                    ExprOp::MAX => a.max(b),
                    ExprOp::EQ => (a == b) as i64,
                    ExprOp::NE => (a != b) as i64,
                    ExprOp::LT => (a < b) as i64,
                    ExprOp::LE => (a <= b) as i64,
                    ExprOp::GT => (a > b) as i64,
                    ExprOp::GE => (a >= b) as i64,
                    ExprOp::AND => (a != 0 && b != 0) as i64,
                    _ => (a != 0 || b != 0) as i64,
                };
            }
        }
    }
    // Unreachable for verified expressions.
    Ok(if sp > 0 { st[sp - 1] } else { 0 })
}

/// The error of a region dimension that failed its checks (kept off the hot path).
#[cold]
pub(super) fn region_error(
    pc: u32,
    tensor: u16,
    dim: u8,
    start: i64,
    end: i64,
    extent: i64,
) -> RunError {
    if start < 0 || end < start {
        RunError::BadRegion {
            pc,
            tensor,
            dim,
            start,
            end,
        }
    } else {
        RunError::RegionBounds {
            pc,
            tensor,
            dim,
            start,
            end,
            extent,
        }
    }
}

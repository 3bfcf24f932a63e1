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
        eval_expr(self.v.exprs(), &self.p, &self.vars, start, pc)
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

/// Evaluates the expression at node `start` of `exprs`; `pc` locates errors. Fast paths: a
/// single leaf, the common case of indices and keys; two leaves and an operator, the common
/// case of conditions and offsets (`t == 0`, `t - 1`, `i + 1`). Anything else goes to
/// [`eval_postfix`].
#[inline(always)]
pub(crate) fn eval_expr(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    start: u32,
    pc: u32,
) -> R<i64> {
    let leaf = |r: &Record| match r.opcode {
        x if x == ExprOp::VAR as u8 => Some(vars[r.op1() as usize % limits::MAX_LOOP_DEPTH]),
        x if x == ExprOp::CONST as u8 => Some(r.op2() as i32 as i64),
        x if x == ExprOp::PARAM as u8 => Some(p.scalar(r.op1() as usize) as i64),
        _ => None,
    };
    let nodes = exprs.get(start as usize..).unwrap_or(&[]);
    match nodes {
        [x, end, ..] if end.opcode == ExprOp::END as u8 => {
            if let Some(x) = leaf(x) {
                return Ok(x);
            }
        }
        [a, b, op, end, ..] if end.opcode == ExprOp::END as u8 => {
            if let (Some(a), Some(b)) = (leaf(a), leaf(b)) {
                if let Some(x) = binary(op.opcode, a, b, pc) {
                    return x;
                }
            }
        }
        // Three leaves and two operators, `a op (b op c)` (`max(0, i - 1)`) or `(a op b) op
        // c` (`min(i + 2, W)`), evaluated in the postfix order, so an error is the one the
        // general evaluator gives (division, remainder and `ceil_div` go to it).
        [n0, n1, n2, n3, n4, end, ..] if end.opcode == ExprOp::END as u8 => {
            // The inner operation first, then the outer one's operands.
            let inner = match (leaf(n0), leaf(n1), leaf(n2), leaf(n3)) {
                (Some(a), Some(b), Some(c), None) => {
                    binary(n3.opcode, b, c, pc).map(|bc| bc.map(|bc| (a, bc)))
                }
                (Some(a), Some(b), None, Some(c)) => {
                    binary(n2.opcode, a, b, pc).map(|ab| ab.map(|ab| (ab, c)))
                }
                _ => None,
            };
            match inner {
                Some(Err(e)) => return Err(e),
                Some(Ok((l, r))) => {
                    if let Some(x) = binary(n4.opcode, l, r, pc) {
                        return x;
                    }
                }
                None => {}
            }
        }
        _ => {}
    }
    eval_postfix(exprs, p, vars, start, pc)
}

/// `a op b` for the binary operators that cannot divide by zero (overflow is their only
/// error); `None` for division, remainder and `ceil_div`, which [`eval_postfix`] computes.
#[inline(always)]
pub(crate) fn binary(op: u8, a: i64, b: i64, pc: u32) -> Option<R<i64>> {
    let ovf = RunError::Overflow { pc };
    Some(Ok(match ExprOp::from_u8(op)? {
        ExprOp::ADD => return Some(a.checked_add(b).ok_or(ovf)),
        ExprOp::SUB => return Some(a.checked_sub(b).ok_or(ovf)),
        ExprOp::MUL => return Some(a.checked_mul(b).ok_or(ovf)),
        ExprOp::MIN => a.min(b),
        ExprOp::MAX => a.max(b),
        ExprOp::EQ => (a == b) as i64,
        ExprOp::NE => (a != b) as i64,
        ExprOp::LT => (a < b) as i64,
        ExprOp::LE => (a <= b) as i64,
        ExprOp::GT => (a > b) as i64,
        ExprOp::GE => (a >= b) as i64,
        ExprOp::AND => (a != 0 && b != 0) as i64,
        ExprOp::OR => (a != 0 || b != 0) as i64,
        _ => return None,
    }))
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
/// errors. One dispatch on each node's opcode byte. A node that is no operator, or one that
/// finds too few operands, ends the evaluation, and a leaf beyond the stack is dropped (the
/// verifier rejects all three, spec/bytecode.md §6).
#[inline(never)]
pub(crate) fn eval_postfix(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    start: u32,
    pc: u32,
) -> R<i64> {
    eval_postfix_with(exprs, p, start, pc, |r| {
        vars[r.op1() as usize % limits::MAX_LOOP_DEPTH]
    })
}

/// [`eval_postfix`] with the values of the leaves that name something of the evaluation's
/// context — `VAR`, and in a kernel's cost `ARG` and `SIZE` — given by `leaf`.
#[inline(always)]
pub(crate) fn eval_postfix_with(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    start: u32,
    pc: u32,
    leaf: impl Fn(&Record) -> i64,
) -> R<i64> {
    const END: u8 = ExprOp::END as u8;
    const CONST: u8 = ExprOp::CONST as u8;
    const VAR: u8 = ExprOp::VAR as u8;
    const ARG: u8 = ExprOp::ARG as u8;
    const SIZE: u8 = ExprOp::SIZE as u8;
    const PARAM: u8 = ExprOp::PARAM as u8;
    const ELEM: u8 = ExprOp::ELEM as u8;
    const NEG: u8 = ExprOp::NEG as u8;
    const NOT: u8 = ExprOp::NOT as u8;
    const DIV: u8 = ExprOp::DIV as u8;
    const MOD: u8 = ExprOp::MOD as u8;
    const CEILDIV: u8 = ExprOp::CEILDIV as u8;
    let mut st = [0i64; limits::MAX_EXPR_STACK];
    let mut sp = 0usize;
    let nodes = exprs.get(start as usize..).unwrap_or(&[]);
    for r in nodes.iter().take(limits::MAX_EXPR_LEN) {
        let value = match r.opcode {
            END => break,
            CONST => r.op2() as i32 as i64,
            VAR | ARG | SIZE => leaf(r),
            PARAM => p.scalar(r.op1() as usize) as i64,
            NEG | NOT | ELEM => {
                let Some(top) = sp.checked_sub(1) else { break };
                st[top] = unary(r.opcode, r.op1(), st[top], p, pc)?;
                continue;
            }
            op => {
                if sp < 2 {
                    break;
                }
                let (a, b) = (st[sp - 2], st[sp - 1]);
                let x = match binary(op, a, b, pc) {
                    Some(x) => x?,
                    None if matches!(op, DIV | MOD | CEILDIV) => divide(op, a, b, pc)?,
                    // Not an operator.
                    None => break,
                };
                sp -= 1;
                st[sp - 1] = x;
                continue;
            }
        };
        if sp < st.len() {
            st[sp] = value;
            sp += 1;
        }
    }
    Ok(if sp > 0 { st[sp - 1] } else { 0 })
}

/// `NEG`, `NOT` or `ELEM` (operator `op`; `slot`: an `ELEM`'s array) of `a`, as
/// [`eval_postfix`] computes them.
#[inline(always)]
pub(crate) fn unary(op: u8, slot: u16, a: i64, p: &RuntimeParams<'_>, pc: u32) -> R<i64> {
    Ok(match op {
        x if x == ExprOp::NEG as u8 => a.checked_neg().ok_or(RunError::Overflow { pc })?,
        x if x == ExprOp::NOT as u8 => (a == 0) as i64,
        _ => elem(slot, a, p, pc)?,
    })
}

/// `a op b` for division (`DIV`), remainder (`MOD`) and `ceil_div` (any other `op`), the
/// operators [`binary`] leaves: spec/bytecode.md §6 says what they compute and raise.
#[inline]
pub(crate) fn divide(op: u8, a: i64, b: i64, pc: u32) -> R<i64> {
    if b == 0 {
        return Err(RunError::DivByZero { pc });
    }
    let ovf = RunError::Overflow { pc };
    let q = a.checked_div(b).ok_or(ovf)?;
    let m = a.checked_rem(b).ok_or(ovf)?;
    Ok(match op {
        x if x == ExprOp::DIV as u8 => q,
        x if x == ExprOp::MOD as u8 => m,
        _ if m != 0 && ((m > 0) == (b > 0)) => q + 1,
        _ => q,
    })
}

/// Element `a` of the runtime array in `slot`.
#[inline(always)]
pub(crate) fn elem(slot: u16, a: i64, p: &RuntimeParams<'_>, pc: u32) -> R<i64> {
    let arr = p.array(slot as usize);
    match usize::try_from(a).ok().and_then(|i| arr.get(i)) {
        Some(x) => Ok(*x as i64),
        None => Err(RunError::Index {
            pc,
            slot,
            index: a,
            len: arr.len(),
        }),
    }
}

/// The values of the loop variable at `depth` (which takes the values `0 .. ext`) for which
/// the predicate at node `start` holds, as a half-open interval, when the predicate is a
/// conjunction (`&&`) of comparisons of the variable plus or minus expressions that do not
/// read it with expressions that do not read it (`i >= a && i < b`, `i < pow2[t]`, `i == 0`,
/// `i + pow2[d] < W`): `Ok(None)` otherwise. Every operation that does not involve the
/// variable is performed as [`eval_postfix`] performs it, in its order; those that do cannot
/// fail (comparisons, `&&`, and sums that stay within 64 bits for every value `0 .. ext`, or
/// the predicate is not taken), so an error is the one evaluating the predicate at any value of
/// the variable would raise first.
pub(crate) fn eval_interval(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    (start, depth, ext): (u32, u16, u64),
    pc: u32,
) -> R<Option<(i128, i128)>> {
    #[derive(Clone, Copy)]
    enum V {
        /// A value that does not depend on the variable.
        Known(i64),
        /// The variable plus an offset.
        Var(i128),
        /// A condition that holds on an interval of the variable's values.
        Holds(i128, i128),
    }
    // `v + off` stays within 64 bits for every value `v` of `0 .. ext`.
    let fits = |off: i128| {
        let top = (ext.max(1) - 1) as i128 + off;
        off >= i64::MIN as i128 && top <= i64::MAX as i128
    };
    const ALL: (i128, i128) = (i128::MIN, i128::MAX);
    let mut st = [V::Known(0); limits::MAX_EXPR_STACK];
    let mut sp = 0usize;
    let nodes = exprs.get(start as usize..).unwrap_or(&[]);
    for r in nodes.iter().take(limits::MAX_EXPR_LEN) {
        let kind = ExprOp::from_u8(r.opcode).map(|o| o.kind());
        let v = match kind {
            Some(ExprKind::End) => break,
            // Planned values only: never in a loop's condition.
            Some(ExprKind::Binder) => return Ok(None),
            Some(ExprKind::Leaf) if r.opcode == ExprOp::VAR as u8 && r.op1() == depth => V::Var(0),
            Some(ExprKind::Leaf) => V::Known(eval_leaf(r, p, vars)),
            Some(ExprKind::Unary) => {
                let Some(top) = sp.checked_sub(1) else {
                    return Ok(None);
                };
                let V::Known(a) = st[top] else {
                    return Ok(None);
                };
                st[top] = V::Known(unary(r.opcode, r.op1(), a, p, pc)?);
                continue;
            }
            Some(ExprKind::Binary) => {
                if sp < 2 {
                    return Ok(None);
                }
                let (a, b) = (st[sp - 2], st[sp - 1]);
                let op = r.opcode;
                let x = match (a, b) {
                    (V::Known(a), V::Known(b)) => V::Known(match binary(op, a, b, pc) {
                        Some(x) => x?,
                        // Division, remainder, `ceil_div`: as the general evaluator divides.
                        None => divide(op, a, b, pc)?,
                    }),
                    // `v + c`, `c + v`, `v - c`.
                    (V::Var(o), V::Known(c)) | (V::Known(c), V::Var(o))
                        if op == ExprOp::ADD as u8
                            || (op == ExprOp::SUB as u8 && matches!(a, V::Var(_))) =>
                    {
                        let off = if op == ExprOp::ADD as u8 {
                            o + c as i128
                        } else {
                            o - c as i128
                        };
                        if !fits(off) {
                            return Ok(None);
                        }
                        V::Var(off)
                    }
                    // `v + o op c`, or `c op v + o` read as `v op' c - o`.
                    (V::Var(o), V::Known(c)) | (V::Known(c), V::Var(o)) => {
                        let c = c as i128 - o;
                        let flipped = matches!(b, V::Var(_));
                        let op = match (ExprOp::from_u8(op), flipped) {
                            (Some(ExprOp::LT), true) => ExprOp::GT,
                            (Some(ExprOp::LE), true) => ExprOp::GE,
                            (Some(ExprOp::GT), true) => ExprOp::LT,
                            (Some(ExprOp::GE), true) => ExprOp::LE,
                            (Some(o), _) => o,
                            (None, _) => return Ok(None),
                        };
                        let (lo, hi) = match op {
                            ExprOp::LT => (i128::MIN, c),
                            ExprOp::LE => (i128::MIN, c + 1),
                            ExprOp::GT => (c + 1, i128::MAX),
                            ExprOp::GE => (c, i128::MAX),
                            ExprOp::EQ => (c, c + 1),
                            _ => return Ok(None),
                        };
                        V::Holds(lo, hi)
                    }
                    (V::Holds(..) | V::Known(_), V::Holds(..) | V::Known(_))
                        if op == ExprOp::AND as u8 =>
                    {
                        let range = |x: V| match x {
                            V::Holds(lo, hi) => (lo, hi),
                            V::Known(0) => (0, 0),
                            _ => ALL,
                        };
                        let ((a0, a1), (b0, b1)) = (range(a), range(b));
                        V::Holds(a0.max(b0), a1.min(b1))
                    }
                    _ => return Ok(None),
                };
                sp -= 1;
                st[sp - 1] = x;
                continue;
            }
            None => return Ok(None),
        };
        if sp >= st.len() {
            return Ok(None);
        }
        st[sp] = v;
        sp += 1;
    }
    Ok(match (sp, st[0]) {
        (1, V::Holds(lo, hi)) => Some((lo, hi)),
        (1, V::Known(0)) => Some((0, 0)),
        (1, V::Known(_)) => Some(ALL),
        _ => None,
    })
}

/// The value of a leaf node (`CONST`, `VAR`, `PARAM`).
#[inline(always)]
pub(crate) fn eval_leaf(
    r: &Record,
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
) -> i64 {
    match r.opcode {
        x if x == ExprOp::CONST as u8 => r.op2() as i32 as i64,
        x if x == ExprOp::VAR as u8 => vars[r.op1() as usize % limits::MAX_LOOP_DEPTH],
        _ => p.scalar(r.op1() as usize) as i64,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcodes::ExprKind;

    /// The expression `op` applied to the loop variables at depths 0 and 1 (`v0 op v1`).
    fn vars_op(op: u8) -> [Record; 4] {
        [
            Record::new(ExprOp::VAR as u8, 0, 0, 0),
            Record::new(ExprOp::VAR as u8, 0, 1, 0),
            Record::new(op, 0, 0, 0),
            Record::new(ExprOp::END as u8, 0, 0, 0),
        ]
    }

    /// Where `eval_interval` gives an interval, the predicate holds exactly on it (the general
    /// evaluator says so at every value of the variable around it), it raises the error the
    /// general evaluator raises, and it gives none for predicates that are not a conjunction
    /// of comparisons of the bare variable (`!=`, arithmetic on the variable, `||`).
    #[test]
    fn intervals_agree_with_the_general_evaluator() {
        let node = |op: ExprOp, a: u16, b: u32| Record::new(op as u8, 0, a, b);
        let var = |d: u16| node(ExprOp::VAR, d, 0);
        let konst = |c: i32| node(ExprOp::CONST, 0, c as u32);
        let end = node(ExprOp::END, 0, 0);
        let p = RuntimeParams::empty();
        let outer = if cfg!(miri) { -1..=3 } else { -3..=8 };
        let (mut intervals, mut none) = (0, 0);
        // The loop's variable is depth 1; depth 0 is a variable of a loop around it.
        let mut check = |e: &[Record]| {
            for a in outer.clone() {
                let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
                vars[0] = a;
                match eval_interval(e, &p, &vars, (0, 1, 20), 9) {
                    Err(err) => {
                        assert_eq!(eval_postfix(e, &p, &vars, 0, 9), Err(err), "{e:?} at {a}")
                    }
                    Ok(None) => none += 1,
                    Ok(Some((lo, hi))) => {
                        intervals += 1;
                        // The variable's values: 0 .. 20.
                        for v in 0..20 {
                            vars[1] = v;
                            let holds = eval_postfix(e, &p, &vars, 0, 9).unwrap() != 0;
                            let inside = lo <= v as i128 && (v as i128) < hi;
                            assert_eq!(holds, inside, "{e:?} at {a}, {v}: [{lo}, {hi})");
                        }
                    }
                }
            }
        };
        let ops = [
            ExprOp::EQ,
            ExprOp::NE,
            ExprOp::LT,
            ExprOp::LE,
            ExprOp::GT,
            ExprOp::GE,
            ExprOp::ADD,
            ExprOp::OR,
        ];
        let and = node(ExprOp::AND, 0, 0);
        for c in ops {
            let c = node(c, 0, 0);
            check(&[var(1), var(0), c, end]);
            check(&[var(0), var(1), c, end]);
            // `v c x && 3 d v`; a known condition and `v c -1`.
            for d in &ops[..6] {
                let d = node(*d, 0, 0);
                check(&[var(1), var(0), c, konst(3), var(1), d, and, end]);
            }
            let gt = node(ExprOp::GT, 0, 0);
            check(&[var(0), konst(2), gt, var(1), konst(-1), c, and, end]);
        }
        // The variable plus or minus a known value (`x - v` and `v * x` are not taken); the
        // variable alone; divisions on the known side (by zero at 0); errors on the known
        // side: an index past a runtime array (the empty one), an overflow (but at 0); an
        // offset that overflows at some value of the variable (not taken: the general
        // evaluator raises it there).
        let (add, sub, lt, ge, eq, div, rem, mul) = (
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::SUB, 0, 0),
            node(ExprOp::LT, 0, 0),
            node(ExprOp::GE, 0, 0),
            node(ExprOp::EQ, 0, 0),
            node(ExprOp::DIV, 0, 0),
            node(ExprOp::MOD, 0, 0),
            node(ExprOp::MUL, 0, 0),
        );
        check(&[var(1), konst(1), add, var(0), lt, end]);
        check(&[var(1), var(0), add, konst(3), lt, end]);
        check(&[var(0), var(1), add, konst(3), ge, end]);
        check(&[var(1), var(0), sub, konst(2), eq, end]);
        check(&[konst(9), var(1), konst(4), add, var(0), sub, ge, end]);
        check(&[var(0), var(1), sub, konst(2), lt, end]);
        check(&[var(1), var(0), mul, konst(2), lt, end]);
        check(&[var(1), end]);
        check(&[var(1), konst(12), var(0), div, lt, end]);
        check(&[var(1), var(0), konst(3), rem, add, konst(5), lt, end]);
        check(&[var(1), var(0), node(ExprOp::ELEM, 0, 0), lt, end]);
        let big = konst(i32::MAX);
        check(&[var(1), var(0), big, mul, big, mul, big, mul, lt, end]);
        // v + x·big² + x·big² + 4·big > 0: at x = 1 the last sum overflows from v = 2 on.
        let gt = node(ExprOp::GT, 0, 0);
        check(&[
            var(1),
            var(0),
            big,
            mul,
            big,
            mul,
            add,
            var(0),
            big,
            mul,
            big,
            mul,
            add,
            big,
            konst(4),
            mul,
            add,
            konst(0),
            gt,
            end,
        ]);
        assert!(
            intervals > none && none > 0,
            "{intervals} intervals, {none} not"
        );
    }

    /// The two-leaf fast path computes what the general evaluator does, errors included, for
    /// every binary operator it takes, and leaves the others (those that can divide by zero) to
    /// it; the general evaluator divides as spec/bytecode.md §6 says.
    #[test]
    fn two_leaves_agree_with_the_general_evaluator() {
        let values = [
            0,
            1,
            -1,
            2,
            -7,
            1 << 40,
            i64::MAX,
            i64::MIN,
            i64::MAX - 1,
            i64::MIN + 1,
        ];
        let p = RuntimeParams::empty();
        for code in 0..=u8::MAX {
            let Some(op) = ExprOp::from_u8(code) else {
                continue;
            };
            if op.kind() != ExprKind::Binary {
                continue;
            }
            let exprs = vars_op(code);
            let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
            for a in values {
                for b in values {
                    (vars[0], vars[1]) = (a, b);
                    let general = eval_postfix(&exprs, &p, &vars, 0, 9);
                    match binary(code, a, b, 9) {
                        Some(fast) => assert_eq!(fast, general, "{op:?} {a} {b}"),
                        None => {
                            assert!(
                                matches!(op, ExprOp::DIV | ExprOp::MOD | ExprOp::CEILDIV),
                                "{op:?} is left to the general evaluator"
                            );
                            let want = match (b, op) {
                                (0, _) => Err(RunError::DivByZero { pc: 9 }),
                                (-1, _) if a == i64::MIN => Err(RunError::Overflow { pc: 9 }),
                                (_, ExprOp::DIV) => Ok(a / b),
                                (_, ExprOp::MOD) => Ok(a % b),
                                _ => Ok(a / b + (a % b != 0 && (a % b > 0) == (b > 0)) as i64),
                            };
                            assert_eq!(general, want, "{op:?} {a} {b}");
                        }
                    }
                }
            }
        }
    }

    /// Three leaves and two operators, in both shapes (`a op (b op c)`, `(a op b) op c`):
    /// [`eval_expr`]'s fast path gives what the general evaluator does, errors included, for
    /// every pair of binary operators (those that divide go to the general evaluator).
    #[test]
    fn three_leaves_agree_with_the_general_evaluator() {
        // Under Miri (`scripts/miri.sh`), which runs this a thousand times slower, fewer values
        // and one operator pair in seven.
        let values: &[i64] = if cfg!(miri) {
            &[-1, 3, i64::MAX]
        } else {
            &[0, 1, -1, 3, -7, i64::MAX, i64::MIN]
        };
        let sampled = |op1: u8, op2: u8| !cfg!(miri) || (op1 as u32 + op2 as u32).is_multiple_of(7);
        let p = RuntimeParams::empty();
        let binary = || {
            ExprOp::ALL
                .iter()
                .filter(|o| o.kind() == ExprKind::Binary)
                .map(|&o| o as u8)
        };
        let var = |d: u16| Record::new(ExprOp::VAR as u8, 0, d, 0);
        let end = Record::new(ExprOp::END as u8, 0, 0, 0);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        for op1 in binary() {
            for op2 in binary().filter(|&op2| sampled(op1, op2)) {
                let (o1, o2) = (Record::new(op1, 0, 0, 0), Record::new(op2, 0, 0, 0));
                let shapes = [
                    [var(0), var(1), var(2), o1, o2, end],
                    [var(0), var(1), o1, var(2), o2, end],
                ];
                for exprs in &shapes {
                    for &a in values {
                        for &b in values {
                            for &c in values {
                                vars[..3].copy_from_slice(&[a, b, c]);
                                assert_eq!(
                                    eval_expr(exprs, &p, &vars, 0, 9),
                                    eval_postfix(exprs, &p, &vars, 0, 9),
                                    "{op1:#x} {op2:#x} {a} {b} {c} {:?}",
                                    exprs[2].opcode
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

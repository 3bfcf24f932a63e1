//! Expressions folded for one run of a loop (spec/bytecode.md §5.8, "Emission"): what a kept
//! task record recomputes at each iteration, with every part that does not read the loop's
//! variable already computed.
//!
//! A kept record's fields that read the loop's variable otherwise than as itself (`(i + W / 3
//! + t % P) % W`, `i - pow2[(t + S - 1) % S]`, `max(0, i - 1)`) are evaluated again at every
//! iteration. Most of such an expression reads only runtime parameters and the variables of
//! the loops around (`W / 3 + t % P`), whose values do not change during the run. Folding
//! evaluates those parts once, when the record is kept, and leaves a short program of the
//! operations on the variable, each with its other operand inlined where that is a computed
//! value: `(i + W / 3 + t % P) % W` is `push i; + 333; + 1; % 1000`.
//!
//! The folded program computes what the expression does, errors included, at every value of
//! the variable: the parts it folded do not read the variable, so they give the same value at
//! every iteration, and they are folded only when they evaluate without error (then they
//! cannot fail at any iteration); the operations left are the expression's own on the
//! variable, applied in its order, by the evaluator's own operators. An expression that
//! folding cannot take (a node of a kind a task field does not hold, a part that fails, a
//! program longer than the room left) is evaluated in full, as before.

use super::*;

mod gather;
pub(super) use gather::{eval_gather, Gather, GATHER_NODES, NO_GATHER};

/// One operation of a folded expression: a stack machine whose top lives in a register.
#[derive(Clone, Copy, Debug)]
pub(super) struct FoldedNode {
    /// A computed value: the pushed constant, or the other operand of `RIGHT` / `LEFT`.
    k: i64,
    /// One of the forms below.
    form: u8,
    /// The expression operator (`ExprOp`) of a unary or binary node.
    op: u8,
    /// The runtime array of an `ELEM`.
    slot: u16,
    /// The form and the operator in one ([`code_of`]): the evaluators dispatch once a node.
    code: u8,
}

/// A node that is none (a template's unused room).
pub(super) const EMPTY_FOLDED: FoldedNode = FoldedNode::new(PUSH, 0, 0, 0);

impl Default for FoldedNode {
    /// Pushing the variable.
    fn default() -> FoldedNode {
        FoldedNode::new(PUSH_VAR, 0, 0, 0)
    }
}

impl FoldedNode {
    /// A node of form `form` with operator `op`, value `k` and array `slot`.
    pub(super) const fn new(form: u8, op: u8, k: i64, slot: u16) -> FoldedNode {
        FoldedNode {
            k,
            form,
            op,
            slot,
            code: code_of(form, op),
        }
    }
}

/// What a node computes, its form and its operator decided once when it is made, for the
/// operations region bounds are made of; [`GENERIC`] for the others, which the evaluator
/// ([`eval_node`]) takes by form and operator. Each code computes exactly what its form and
/// operator do (the proptests compare the evaluators with the expression's own).
const GENERIC: u8 = 0;
/// `PUSH_VAR`.
const C_PUSH_VAR: u8 = 1;
/// `PUSH`.
const C_PUSH: u8 = 2;
/// `top + k` (`RIGHT` or `LEFT` `ADD`: the same sum, the same overflow).
const C_ADD_K: u8 = 3;
/// `top - k` (`RIGHT SUB`).
const C_SUB_K: u8 = 4;
/// `k - top` (`LEFT SUB`).
const C_K_SUB: u8 = 5;
/// `top * k` (`RIGHT` or `LEFT` `MUL`).
const C_MUL_K: u8 = 6;
/// `min(top, k)`, `max(top, k)` (`RIGHT` or `LEFT`).
const C_MIN_K: u8 = 7;
const C_MAX_K: u8 = 8;
/// `top < k`, `top <= k`, `top > k`, `top >= k` (`RIGHT`).
const C_LT_K: u8 = 9;
const C_LE_K: u8 = 10;
const C_GT_K: u8 = 11;
const C_GE_K: u8 = 12;
/// `second + top`, `second * top`, `second - top` (`BINARY`).
const C_ADD: u8 = 13;
const C_MUL: u8 = 14;
const C_SUB: u8 = 15;
/// `array[top]` (`UNARY ELEM`).
const C_ELEM: u8 = 16;
/// Push the loop's variable plus `k` (`PUSH_VAR_ADD`: [`fuse`]).
const C_VAR_ADD_K: u8 = 17;
/// `array[top + k]`, `array[top * k]` (`ADD_ELEM`, `MUL_ELEM`: [`fuse`]).
const C_ADD_ELEM: u8 = 18;
const C_MUL_ELEM: u8 = 19;

/// [`FoldedNode::code`] of form `form` with operator `op`.
const fn code_of(form: u8, op: u8) -> u8 {
    const ADD: u8 = ExprOp::ADD as u8;
    const SUB: u8 = ExprOp::SUB as u8;
    const MUL: u8 = ExprOp::MUL as u8;
    const MIN: u8 = ExprOp::MIN as u8;
    const MAX: u8 = ExprOp::MAX as u8;
    const LT: u8 = ExprOp::LT as u8;
    const LE: u8 = ExprOp::LE as u8;
    const GT: u8 = ExprOp::GT as u8;
    const GE: u8 = ExprOp::GE as u8;
    const ELEM: u8 = ExprOp::ELEM as u8;
    match (form, op) {
        (PUSH_VAR, _) => C_PUSH_VAR,
        (PUSH, _) => C_PUSH,
        (RIGHT | LEFT, ADD) => C_ADD_K,
        (RIGHT, SUB) => C_SUB_K,
        (LEFT, SUB) => C_K_SUB,
        (RIGHT | LEFT, MUL) => C_MUL_K,
        (RIGHT | LEFT, MIN) => C_MIN_K,
        (RIGHT | LEFT, MAX) => C_MAX_K,
        (RIGHT, LT) => C_LT_K,
        (RIGHT, LE) => C_LE_K,
        (RIGHT, GT) => C_GT_K,
        (RIGHT, GE) => C_GE_K,
        (BINARY, ADD) => C_ADD,
        (BINARY, MUL) => C_MUL,
        (BINARY, SUB) => C_SUB,
        (UNARY, ELEM) => C_ELEM,
        (PUSH_VAR_ADD, _) => C_VAR_ADD_K,
        (ADD_ELEM, _) => C_ADD_ELEM,
        (MUL_ELEM, _) => C_MUL_ELEM,
        _ => GENERIC,
    }
}

/// Push the loop's variable.
const PUSH_VAR: u8 = 0;
/// Push `k`.
const PUSH: u8 = 1;
/// `top = op(top)`: `NEG`, `NOT`, `ELEM`.
const UNARY: u8 = 2;
/// `top = op(second, top)`, popping the second.
const BINARY: u8 = 3;
/// `top = op(top, k)`.
const RIGHT: u8 = 4;
/// `top = op(k, top)`.
const LEFT: u8 = 5;
/// Push the loop's variable plus `k`, checked as `+` is: a `PUSH_VAR` and the `RIGHT` or
/// `LEFT` `ADD` after it in one node ([`fuse`]).
const PUSH_VAR_ADD: u8 = 6;
/// `top = array[top + k]`, `top = array[top * k]` (the array in `slot`), each step checked:
/// a `RIGHT` or `LEFT` `ADD` or `MUL` and the `ELEM` after it in one node ([`fuse`]).
const ADD_ELEM: u8 = 7;
const MUL_ELEM: u8 = 8;

/// The nodes of folded expressions one kept record holds, for all its fields.
pub(super) const FOLDED_NODES: usize = 64;

/// Folds the expression at node `start` for the loop at `depth` (its variable stays; the
/// variables of the loops around have their values in `vars`) into `out`: gives the number of
/// nodes written, or `None` where the expression is evaluated in full (see the module's
/// comment) — `out` may then hold anything.
pub(super) fn fold(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    (start, depth): (u32, u8),
    out: &mut [FoldedNode],
) -> Option<usize> {
    // A part that fails is not folded, so where it fails does not matter.
    let pc = 0;
    /// What the abstract stack holds: a value computed now, or one the folded program
    /// computes (on its own stack, in the same order).
    #[derive(Clone, Copy)]
    enum V {
        Known(i64),
        Runs,
    }
    let mut st = [V::Known(0); limits::MAX_EXPR_STACK];
    let mut sp = 0usize;
    let mut n = 0usize;
    let mut emit = |node: FoldedNode| {
        *out.get_mut(n)? = node;
        n += 1;
        Some(())
    };
    let nodes = exprs.get(start as usize..).unwrap_or(&[]);
    for r in nodes.iter().take(limits::MAX_EXPR_LEN) {
        let op = r.opcode;
        let node = |form, k| FoldedNode::new(form, op, k, r.op1());
        let v = match ExprOp::from_u8(op)?.kind() {
            ExprKind::End => break,
            ExprKind::Leaf if op == ExprOp::VAR as u8 && r.op1() == depth as u16 => {
                emit(node(PUSH_VAR, 0))?;
                V::Runs
            }
            // A variable of a loop inside this one has no value here.
            ExprKind::Leaf if op == ExprOp::VAR as u8 && r.op1() > depth as u16 => return None,
            ExprKind::Leaf if matches!(ExprOp::from_u8(op)?, ExprOp::ARG | ExprOp::SIZE) => {
                return None
            }
            ExprKind::Leaf => V::Known(eval_leaf(r, p, vars)),
            ExprKind::Unary => {
                let top = st.get_mut(sp.checked_sub(1)?)?;
                match *top {
                    V::Known(a) => *top = V::Known(unary(op, r.op1(), a, p, pc).ok()?),
                    V::Runs => emit(node(UNARY, 0))?,
                }
                continue;
            }
            ExprKind::Binary => {
                if sp < 2 {
                    return None;
                }
                let x = match (st[sp - 2], st[sp - 1]) {
                    (V::Known(a), V::Known(b)) => V::Known(apply(op, a, b, pc).ok()?),
                    (V::Runs, V::Known(b)) => {
                        emit(node(RIGHT, b))?;
                        V::Runs
                    }
                    (V::Known(a), V::Runs) => {
                        emit(node(LEFT, a))?;
                        V::Runs
                    }
                    (V::Runs, V::Runs) => {
                        emit(node(BINARY, 0))?;
                        V::Runs
                    }
                };
                sp -= 1;
                st[sp - 1] = x;
                continue;
            }
            // Reductions and searches: planned values only, never in a task's field.
            ExprKind::Binder => return None,
        };
        *st.get_mut(sp)? = v;
        sp += 1;
    }
    match (sp, st[0]) {
        (1, V::Runs) => Some(n),
        (1, V::Known(k)) => {
            emit(FoldedNode::new(PUSH, 0, k, 0))?;
            Some(n)
        }
        _ => None,
    }
}

/// The values under a folded program's top (the first push saves a meaningless one, never
/// read), and how many there are.
struct Below {
    values: [i64; limits::MAX_EXPR_STACK],
    sp: usize,
}

impl Below {
    const fn new() -> Below {
        Below {
            values: [0; limits::MAX_EXPR_STACK],
            sp: 0,
        }
    }
    #[inline(always)]
    fn push(&mut self, x: i64) {
        self.values[self.sp % limits::MAX_EXPR_STACK] = x;
        self.sp = self.sp.wrapping_add(1);
    }
    #[inline(always)]
    fn pop(&mut self) -> i64 {
        self.sp = self.sp.wrapping_sub(1);
        self.values[self.sp % limits::MAX_EXPR_STACK]
    }
}

/// Evaluates the folded expression `nodes` with the loop's variable at `v`; `pc` locates
/// errors, as for the expression it was folded from.
#[inline(always)]
pub(super) fn eval_folded(nodes: &[FoldedNode], v: i64, p: &RuntimeParams<'_>, pc: u32) -> R<i64> {
    let mut below = Below::new();
    let mut top = 0i64;
    for n in nodes {
        top = eval_node(n, top, &mut below, v, p, pc)?;
    }
    Ok(top)
}

/// What node `n` makes of the top `x` (and of the values `below` it, for a push or a binary
/// node), the loop's variable at `v`. One `match` on the node's code: a node costs one
/// indirect jump (before, the operations on the top alone took a second one, a match of their
/// own behind the first).
#[inline(always)]
fn eval_node(
    n: &FoldedNode,
    x: i64,
    below: &mut Below,
    v: i64,
    p: &RuntimeParams<'_>,
    pc: u32,
) -> R<i64> {
    let ovf = RunError::Overflow { pc };
    Ok(match n.code {
        C_PUSH_VAR => {
            below.push(x);
            v
        }
        C_PUSH => {
            below.push(x);
            n.k
        }
        C_VAR_ADD_K => {
            below.push(x);
            v.checked_add(n.k).ok_or(ovf)?
        }
        C_ADD_ELEM => elem(n.slot, x.checked_add(n.k).ok_or(ovf)?, p, pc)?,
        C_MUL_ELEM => elem(n.slot, x.checked_mul(n.k).ok_or(ovf)?, p, pc)?,
        C_ADD => below.pop().checked_add(x).ok_or(ovf)?,
        C_SUB => below.pop().checked_sub(x).ok_or(ovf)?,
        C_MUL => below.pop().checked_mul(x).ok_or(ovf)?,
        C_ADD_K => x.checked_add(n.k).ok_or(ovf)?,
        C_SUB_K => x.checked_sub(n.k).ok_or(ovf)?,
        C_K_SUB => n.k.checked_sub(x).ok_or(ovf)?,
        C_MUL_K => x.checked_mul(n.k).ok_or(ovf)?,
        C_MIN_K => x.min(n.k),
        C_MAX_K => x.max(n.k),
        C_LT_K => (x < n.k) as i64,
        C_LE_K => (x <= n.k) as i64,
        C_GT_K => (x > n.k) as i64,
        C_GE_K => (x >= n.k) as i64,
        // (Its operator is `ELEM`: `unary` would ask again.)
        C_ELEM => elem(n.slot, x, p, pc)?,
        _ => match n.form {
            BINARY => apply(n.op, below.pop(), x, pc)?,
            RIGHT => apply(n.op, x, n.k, pc)?,
            LEFT => apply(n.op, n.k, x, pc)?,
            _ => unary(n.op, n.slot, x, p, pc)?,
        },
    })
}

/// Fuses, in the folded expression `nodes` (not a chain: [`is_chain`] reads the forms this
/// changes), pairs of nodes into one that computes the same and fails where the two do,
/// each step checked in the same order: a push of the loop's variable and the addition of a
/// constant right after it (`i + c`, `c + i`, and `i - c` as `i + (-c)` but for `c =
/// i64::MIN`, which has no negation); an addition or a multiplication by a constant and the
/// runtime-array element it indexes (`keep[x * 2]`, `keep[x + 1]`). Returns the nodes left,
/// in `nodes[..n]`: one dispatch fewer for each pair (random_nearest's bounds have five).
pub(super) fn fuse(nodes: &mut [FoldedNode]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < nodes.len() {
        let (node, next) = (nodes[i], nodes.get(i + 1).copied());
        let pair = next.and_then(|next| {
            if node.form == PUSH_VAR {
                return addend(&next).map(|k| (PUSH_VAR_ADD, k, 0));
            }
            if (next.form, ExprOp::from_u8(next.op)) != (UNARY, Some(ExprOp::ELEM)) {
                return None;
            }
            match (node.form, ExprOp::from_u8(node.op)) {
                (RIGHT | LEFT, Some(ExprOp::MUL)) => Some((MUL_ELEM, node.k, next.slot)),
                _ => addend(&node).map(|k| (ADD_ELEM, k, next.slot)),
            }
        });
        nodes[n] = match pair {
            Some((form, k, slot)) => {
                i += 1;
                FoldedNode::new(form, 0, k, slot)
            }
            None => node,
        };
        n += 1;
        i += 1;
    }
    n
}

/// Whether the folded expression `nodes` is a chain: the loop's variable, then operations on
/// the one value (`(i + 333 + 1) % 1000`, `max(0, i - 1)`), which [`eval_chain`] evaluates
/// without a stack from `nodes[1..]`.
pub(super) fn is_chain(nodes: &[FoldedNode]) -> bool {
    match nodes {
        [first, rest @ ..] => {
            first.form == PUSH_VAR && rest.iter().all(|n| matches!(n.form, UNARY | RIGHT | LEFT))
        }
        [] => false,
    }
}

/// Evaluates the operations `ops` of a chain ([`is_chain`]: its nodes after the first) on the
/// loop's variable at `v`; `pc` locates errors.
#[inline(always)]
pub(super) fn eval_chain(ops: &[FoldedNode], v: i64, p: &RuntimeParams<'_>, pc: u32) -> R<i64> {
    // Its nodes neither push nor pop (`is_chain`): the stack is never touched.
    let mut below = Below::new();
    let mut x = v;
    for n in ops {
        x = eval_node(n, x, &mut below, v, p, pc)?;
    }
    Ok(x)
}

/// A chain ([`is_chain`]) that only adds constants and takes minimums and maximums with
/// them, as the region bounds of neighbour patterns do (`i - 1`, `max(0, i - 1)`, `min(i + 2,
/// W)`, `max(i, 1) - 1`), and may end dividing by a constant (`i / 2`, `(i + 333 + 1) %
/// 1000`): `(min(max(v + before, lo), hi) + after) op k`, each step checked as the chain
/// checks it. Any run of minimums and maximums with constants is one `min(max(x, lo), hi)`
/// with `lo <= hi`: `max(c)` after it is the same with `lo`, `hi` raised to `c`, `min(c)` with
/// them lowered to `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Clamp {
    before: i64,
    lo: i64,
    hi: i64,
    after: i64,
    /// The division last (`ExprOp::DIV`, `MOD` or `CEILDIV`) and its divisor; `op` 0 for none.
    divide: (u8, i64),
}

/// The nodes a [`Clamp`] takes in a template's `folded` (its values as their `k`; the
/// division's operator as the last one's `op`).
pub(super) const CLAMP_NODES: usize = 5;

impl Clamp {
    /// The clamp the chain operations `ops` (a chain's nodes after the variable) compute:
    /// additions or subtractions of constants, then minimums and maximums with constants, then
    /// additions or subtractions again, then a division, a remainder or a division rounding up
    /// by a constant; `None` for any other chain.
    pub(super) fn of(ops: &[FoldedNode]) -> Option<Clamp> {
        let mut c = Clamp {
            before: 0,
            lo: i64::MIN,
            hi: i64::MAX,
            after: 0,
            divide: (0, 0),
        };
        let (before, rest) = additions(ops);
        c.before = before;
        let (lo, hi, rest) = bounds(rest);
        (c.lo, c.hi) = (lo, hi);
        let (after, rest) = additions(rest);
        c.after = after;
        match rest {
            [] => {}
            [last] => match (last.form, ExprOp::from_u8(last.op)) {
                (RIGHT, Some(ExprOp::DIV | ExprOp::MOD | ExprOp::CEILDIV)) => {
                    c.divide = (last.op, last.k);
                }
                _ => return None,
            },
            _ => return None,
        }
        (!ops.is_empty()).then_some(c)
    }

    /// Writes the clamp into `out`'s first [`CLAMP_NODES`] nodes; `None` (nothing written)
    /// without the room.
    pub(super) fn write(self, out: &mut [FoldedNode]) -> Option<()> {
        let out = out.get_mut(..CLAMP_NODES)?;
        let (op, k) = self.divide;
        let values = [self.before, self.lo, self.hi, self.after, k];
        for (j, (n, k)) in out.iter_mut().zip(values).enumerate() {
            *n = FoldedNode {
                k,
                op: if j == CLAMP_NODES - 1 { op } else { 0 },
                ..EMPTY_FOLDED
            };
        }
        Some(())
    }
}

/// The nodes of a clamp that changes nothing: what [`eval_clamp`] is given where a template
/// would not hold its clamp's nodes (never).
pub(super) const NO_CLAMP: [FoldedNode; CLAMP_NODES] = [
    EMPTY_FOLDED,
    FoldedNode {
        k: i64::MIN,
        ..EMPTY_FOLDED
    },
    FoldedNode {
        k: i64::MAX,
        ..EMPTY_FOLDED
    },
    EMPTY_FOLDED,
    EMPTY_FOLDED,
];

/// Whether the clamp [`Clamp::write`] wrote into `n` ends dividing.
pub(super) fn clamp_divides(n: &[FoldedNode; CLAMP_NODES]) -> bool {
    n[CLAMP_NODES - 1].op != 0
}

/// Evaluates the clamp [`Clamp::write`] wrote into `n` on the loop's variable at `v`, as the
/// chain it came from evaluates (`pc` locates an error: an overflow, a division by zero).
/// Without `DIVIDES` its division is left out: for a record none of whose clamps divides
/// (`clamp_divides`), so that its evaluation does not carry the division's code (the 1-D
/// stencil's generation is 8 % longer with it).
#[inline(always)]
pub(super) fn eval_clamp<const DIVIDES: bool>(
    n: &[FoldedNode; CLAMP_NODES],
    v: i64,
    pc: u32,
) -> R<i64> {
    let x = v.checked_add(n[0].k).ok_or(RunError::Overflow { pc })?;
    let x = x
        .max(n[1].k)
        .min(n[2].k)
        .checked_add(n[3].k)
        .ok_or(RunError::Overflow { pc })?;
    match n[4].op {
        op if DIVIDES && op != 0 => divide(op, x, n[4].k, pc),
        _ => Ok(x),
    }
}

/// Where a clamp is its variable plus a constant, or a constant ([`piece_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    /// Whether the clamp is `v + k` (else `k`).
    pub(super) slope: bool,
    /// The constant: exact, it may not fit an `i64` where `slope` is (though `v + k` does at
    /// every value of the piece).
    pub(super) k: i128,
    /// The piece's values of the variable, `from ..= to`.
    pub(super) from: i128,
    pub(super) to: i128,
}

/// The piece of the clamp [`Clamp::write`] wrote into `n` that holds the value `v` of its
/// variable: the values around `v` at which [`eval_clamp`] gives `v + k`, or `k`, and fails
/// at none — between the clamp's bounds or beyond one of them, inside one quotient of its
/// division, no step overflowing. `None` where it fails at `v`, or divides a negative value
/// or by a divisor not above zero there (then the pieces are not of this form, or not
/// worth it).
pub(super) fn piece_at(n: &[FoldedNode; CLAMP_NODES], v: i64) -> Option<Piece> {
    const MIN: i128 = i64::MIN as i128;
    const MAX: i128 = i64::MAX as i128;
    let (before, lo, hi, after) = (
        n[0].k as i128,
        n[1].k as i128,
        n[2].k as i128,
        n[3].k as i128,
    );
    if lo > hi {
        // (Never: `Clamp::of` keeps `lo <= hi`.)
        return None;
    }
    let v = v as i128;
    // `v + before` inside the `i64`s, then on one side of the bounds or between them.
    let x = v + before;
    let (from, to) = (MIN - before, MAX - before);
    if !(MIN..=MAX).contains(&x) {
        return None;
    }
    let mut p = if x < lo {
        Piece {
            slope: false,
            k: lo,
            from,
            to: to.min(lo - 1 - before),
        }
    } else if x > hi {
        Piece {
            slope: false,
            k: hi,
            from: from.max(hi + 1 - before),
            to,
        }
    } else {
        Piece {
            slope: true,
            k: before,
            from: from.max(lo - before),
            to: to.min(hi - before),
        }
    };
    // Then `+ after`, inside the `i64`s.
    p.k += after;
    if p.slope {
        (p.from, p.to) = (p.from.max(MIN - p.k), p.to.min(MAX - p.k));
    } else if !(MIN..=MAX).contains(&p.k) {
        return None;
    }
    let (op, d) = (n[CLAMP_NODES - 1].op, n[CLAMP_NODES - 1].k);
    if op == 0 {
        return Some(p);
    }
    if !p.slope {
        p.k = divide(op, p.k as i64, d, 0).ok()? as i128;
        return Some(p);
    }
    // `y = v + k` divided: inside the block of the values with `y`'s quotient.
    let (y, d) = (v + p.k, d as i128);
    if y < 0 || d <= 0 {
        return None;
    }
    let (first, last, slope, k) = match ExprOp::from_u8(op)? {
        ExprOp::DIV => (y / d * d, y / d * d + d - 1, false, y / d),
        ExprOp::MOD => (y / d * d, y / d * d + d - 1, true, p.k - y / d * d),
        ExprOp::CEILDIV => {
            let m = (y + d - 1) / d;
            (((m - 1) * d + 1).max(0), m * d, false, m)
        }
        _ => return None,
    };
    Some(Piece {
        slope,
        k,
        from: p.from.max(first - p.k),
        to: p.to.min(last - p.k),
    })
}

/// The run of minimums and maximums with constants at the start of `ops` as the bounds `lo
/// <= hi` of one `min(max(x, lo), hi)` (`i64::MIN`, `i64::MAX` for none), and the operations
/// after it: `max(c)` after such a pair is the pair raised to `c`, `min(c)` the pair lowered
/// to `c`.
fn bounds(ops: &[FoldedNode]) -> (i64, i64, &[FoldedNode]) {
    let (mut lo, mut hi, mut rest) = (i64::MIN, i64::MAX, ops);
    while let Some((n, tail)) = rest.split_first() {
        match (n.form, ExprOp::from_u8(n.op)) {
            (RIGHT | LEFT, Some(ExprOp::MIN)) => (lo, hi) = (lo.min(n.k), hi.min(n.k)),
            (RIGHT | LEFT, Some(ExprOp::MAX)) => (lo, hi) = (lo.max(n.k), hi.max(n.k)),
            _ => break,
        }
        rest = tail;
    }
    (lo, hi, rest)
}

/// The longest run of additions of constants at the start of `ops` that is one checked
/// addition, as their sum, and the operations after it. `x - k` is `x + (-k)`, overflowing
/// exactly when it does (but for `k = i64::MIN`, which has no negation). Two additions of
/// constants of one sign are one: `x + a + b` overflows in its first step or its second
/// exactly when `x + (a + b)` overflows, provided `a + b` itself does not (`x + 1 + 1` is `x
/// + 2`; `x + 1 - 1` stays two steps, since `x + 1` may overflow where `x` does not).
fn additions(ops: &[FoldedNode]) -> (i64, &[FoldedNode]) {
    let mut sum = 0i64;
    let mut rest = ops;
    while let Some((n, tail)) = rest.split_first() {
        let Some(k) = addend(n) else { break };
        let one_sign = (sum >= 0 && k >= 0) || (sum <= 0 && k <= 0);
        match sum.checked_add(k).filter(|_| one_sign) {
            Some(s) => sum = s,
            None => break,
        }
        rest = tail;
    }
    (sum, rest)
}

/// The constant node `n` adds to its operand: `k` for `x + k` and `k + x`, `-k` for `x - k`
/// (which overflows exactly when `x + (-k)` does), none for `x - i64::MIN` (`-k` has no
/// value) and any other node.
fn addend(n: &FoldedNode) -> Option<i64> {
    match (n.form, ExprOp::from_u8(n.op)) {
        (RIGHT | LEFT, Some(ExprOp::ADD)) => Some(n.k),
        (RIGHT, Some(ExprOp::SUB)) => n.k.checked_neg(),
        _ => None,
    }
}

/// `a op b` for any binary operator, as [`eval_postfix`] computes it.
#[inline(always)]
fn apply(op: u8, a: i64, b: i64, pc: u32) -> R<i64> {
    match binary(op, a, b, pc) {
        Some(x) => x,
        None => divide(op, a, b, pc),
    }
}

#[cfg(test)]
pub(super) mod tests {
    extern crate std;

    use super::*;
    use crate::params::Value;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    pub(in crate::interp) fn node(op: ExprOp, op1: u16, op2: u32) -> Record {
        Record::new(op as u8, 0, op1, op2)
    }

    /// Task Bench's `spread` offset, `(i + W / 3 + t % P) % W`: `i` the variable at depth 1,
    /// `t` at depth 0, `W` and `P` runtime scalars 0 and 1.
    pub(in crate::interp) fn spread_offset() -> [Record; 12] {
        [
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::CONST, 0, 3),
            node(ExprOp::DIV, 0, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::VAR, 0, 0),
            node(ExprOp::PARAM, 1, 0),
            node(ExprOp::MOD, 0, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::MOD, 0, 0),
            node(ExprOp::END, 0, 0),
        ]
    }

    /// A random well-formed postfix expression over the variables at depths 0 and 1, small
    /// constants, a runtime scalar and array, and every unary and binary operator.
    fn arb_expr() -> impl Strategy<Value = Vec<Record>> {
        let leaf = prop_oneof![
            (0u16..2).prop_map(|d| vec![node(ExprOp::VAR, d, 0)]),
            (-9i32..10).prop_map(|c| vec![node(ExprOp::CONST, 0, c as u32)]),
            Just(vec![node(ExprOp::CONST, 0, i32::MAX as u32)]),
            Just(vec![node(ExprOp::PARAM, 0, 0)]),
        ];
        let binary: Vec<ExprOp> = ExprOp::ALL
            .iter()
            .copied()
            .filter(|o| o.kind() == ExprKind::Binary)
            .collect();
        leaf.prop_recursive(4, 24, 2, move |inner| {
            prop_oneof![
                (
                    inner.clone(),
                    prop::sample::select(vec![ExprOp::NEG, ExprOp::NOT, ExprOp::ELEM])
                )
                    .prop_map(|(mut a, op)| {
                        // An element of the array (slot 1); of the scalar (slot 0), an
                        // element of no array: an error, at any index.
                        let slot = u16::from(op == ExprOp::ELEM && a.len() % 4 != 0);
                        a.push(node(op, slot, 0));
                        a
                    }),
                (inner.clone(), inner, prop::sample::select(binary.clone())).prop_map(
                    |(mut a, b, op)| {
                        a.extend(b);
                        a.push(node(op, 0, 0));
                        a
                    }
                ),
            ]
        })
        .prop_filter("the stack holds it", |e| {
            depth_of(e) <= limits::MAX_EXPR_STACK
        })
        .prop_map(|mut e| {
            e.push(node(ExprOp::END, 0, 0));
            e
        })
    }

    fn depth_of(e: &[Record]) -> usize {
        let (mut sp, mut most) = (0usize, 0usize);
        for r in e {
            match ExprOp::from_u8(r.opcode).map(|o| o.kind()) {
                Some(ExprKind::Leaf) => sp += 1,
                Some(ExprKind::Binary) => sp -= 1,
                _ => {}
            }
            most = most.max(sp);
        }
        most
    }

    const VALUES: [i64; 12] = [
        0,
        1,
        -1,
        2,
        3,
        -7,
        100,
        1 << 33,
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
        i64::MIN + 1,
    ];

    /// The interpreter's proptests' settings: `cases` cases, and under Miri
    /// (`scripts/miri.sh`) a few, with no failure file (its isolation has no current
    /// directory).
    pub(in crate::interp) fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases: if cfg!(miri) { 8 } else { cases },
            failure_persistence: if cfg!(miri) {
                None
            } else {
                ProptestConfig::default().failure_persistence
            },
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config(2000))]

        /// Folded for the loop at depth 1 (the variable at depth 0 fixed), an expression gives
        /// what the general evaluator gives, errors included, at every value of the variable;
        /// and folding takes it whenever its parts that do not read the variable evaluate.
        #[test]
        fn a_folded_expression_evaluates_as_the_expression(
            e in arb_expr(),
            outer in prop::sample::select(VALUES.to_vec()),
            scalar in prop::sample::select(vec![0u32, 1, 3, 1000, u32::MAX]),
        ) {
            let array = [5u32, 0, 7, u32::MAX];
            let slots = [Value::Scalar(scalar), Value::Array(&array)];
            let p = RuntimeParams::unchecked(&slots);
            let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
            vars[0] = outer;
            let mut out = [FoldedNode::default(); FOLDED_NODES];
            let Some(n) = fold(&e, &p, &vars, (0, 1), &mut out) else {
                // Only where a part that does not read the variable fails, or the program
                // is too long.
                let invariant = e.iter().all(|r| r.opcode != ExprOp::VAR as u8 || r.op1() == 0);
                if invariant {
                    prop_assert!(eval_postfix(&e, &p, &vars, 0, 9).is_err() || e.len() > FOLDED_NODES);
                }
                return Ok(());
            };
            let chain = is_chain(&out[..n]);
            let mut fused = out;
            let m = fuse(&mut fused[..n]);
            let mut gather = NO_GATHER;
            let gathers = Gather::of(&fused[..m]).map(|g| g.write(&mut gather)).is_some();
            for v in VALUES.iter().copied().chain(-3..40) {
                vars[1] = v;
                let want = eval_postfix(&e, &p, &vars, 0, 9);
                prop_assert_eq!(
                    eval_folded(&out[..n], v, &p, 9),
                    want,
                    "at {}: {:?} folded {:?}", v, e, &out[..n]
                );
                prop_assert_eq!(
                    eval_folded(&fused[..m], v, &p, 9),
                    want,
                    "at {}: {:?} fused {:?}", v, e, &fused[..m]
                );
                if chain {
                    prop_assert_eq!(eval_chain(&out[1..n], v, &p, 9), want);
                }
                if gathers {
                    prop_assert_eq!(eval_gather(&gather, v, &p, 9), want);
                }
                if let Some(c) = chain.then(|| Clamp::of(&out[1..n])).flatten() {
                    let mut nodes = NO_CLAMP;
                    c.write(&mut nodes).unwrap();
                    prop_assert_eq!(eval_clamp::<true>(&nodes, v, 9), want);
                }
            }
        }

        /// A chain of additions, subtractions, minimums, maximums, divisions, remainders and
        /// divisions rounding up with constants (either side) that [`Clamp::of`] takes
        /// evaluates as the chain does, overflows and divisions by zero included.
        #[test]
        fn a_clamp_evaluates_as_its_chain(
            ops in prop::collection::vec(
                (
                    prop::sample::select(vec![
                        ExprOp::ADD,
                        ExprOp::SUB,
                        ExprOp::MIN,
                        ExprOp::MAX,
                        ExprOp::DIV,
                        ExprOp::MOD,
                        ExprOp::CEILDIV,
                    ]),
                    prop::sample::select(vec![RIGHT, LEFT]),
                    prop::sample::select(VALUES.to_vec()),
                ),
                1..6,
            ),
        ) {
            let ops: Vec<FoldedNode> = ops
                .iter()
                .map(|&(op, form, k)| FoldedNode::new(form, op as u8, k, 0))
                .collect();
            if let Some(c) = Clamp::of(&ops) {
                prop_assert_clamp_is_chain(c, &ops)?;
            }
        }

        /// Every chain of additions of constants of one sign, then minimums and maximums with
        /// constants, then additions of one sign again, then at most one division, remainder
        /// or division rounding up by a constant (zero and -1 among them) is a clamp.
        #[test]
        fn additions_around_minimums_and_maximums_are_a_clamp(
            before in prop::collection::vec(0i64..4, 0..3),
            before_negative: bool,
            bounds in prop::collection::vec(
                (prop::bool::ANY, prop::sample::select(VALUES.to_vec())),
                0..4,
            ),
            after in prop::collection::vec(0i64..4, 0..3),
            after_negative: bool,
            divide in prop::option::of((
                prop::sample::select(vec![ExprOp::DIV, ExprOp::MOD, ExprOp::CEILDIV]),
                prop::sample::select(vec![0i64, 1, -1, 2, 3, -7, 1000, i64::MIN, i64::MAX]),
            )),
        ) {
            // `x + k` or `x - k` (`k + x` for some), all of one sign.
            let add = |(j, &k): (usize, &i64), negative: bool| match (negative, j % 2) {
                (true, _) => FoldedNode::new(RIGHT, ExprOp::SUB as u8, k, 0),
                (false, 0) => FoldedNode::new(RIGHT, ExprOp::ADD as u8, k, 0),
                (false, _) => FoldedNode::new(LEFT, ExprOp::ADD as u8, k, 0),
            };
            let mut ops: Vec<FoldedNode> =
                before.iter().enumerate().map(|a| add(a, before_negative)).collect();
            ops.extend(bounds.iter().enumerate().map(|(j, &(max, k))| {
                FoldedNode::new(
                    if j % 2 == 0 { RIGHT } else { LEFT },
                    if max { ExprOp::MAX } else { ExprOp::MIN } as u8,
                    k,
                    0,
                )
            }));
            ops.extend(after.iter().enumerate().map(|a| add(a, after_negative)));
            ops.extend(divide.map(|(op, k)| FoldedNode::new(RIGHT, op as u8, k, 0)));
            prop_assume!(!ops.is_empty());
            let c = Clamp::of(&ops);
            prop_assert!(c.is_some(), "{:?}", ops);
            prop_assert_clamp_is_chain(c.unwrap(), &ops)?;
        }
    }

    /// `c`, written into a template's nodes, evaluates as the chain `ops`, errors included.
    fn prop_assert_clamp_is_chain(c: Clamp, ops: &[FoldedNode]) -> Result<(), TestCaseError> {
        let p = RuntimeParams::unchecked(&[]);
        let mut nodes = NO_CLAMP;
        c.write(&mut nodes).unwrap();
        for v in VALUES.iter().copied().chain(-3..5) {
            prop_assert_eq!(
                eval_clamp::<true>(&nodes, v, 9),
                eval_chain(ops, v, &p, 9),
                "{:?} of {:?} at {}",
                c,
                ops,
                v
            );
        }
        Ok(())
    }

    /// Every pair `fuse` may make one node of, with every operand form, constants at the ends
    /// of the `i64`s and both a runtime array and a scalar (an element of no array), computes
    /// what the two nodes compute, errors included, at every value of the variable.
    #[test]
    fn fused_pairs_evaluate_as_the_pairs() {
        let array = [5u32, 0, 7, u32::MAX];
        let slots = [Value::Scalar(3), Value::Array(&array)];
        let p = RuntimeParams::unchecked(&slots);
        let ops = [
            (RIGHT, ExprOp::ADD),
            (LEFT, ExprOp::ADD),
            (RIGHT, ExprOp::SUB),
            (LEFT, ExprOp::SUB),
            (RIGHT, ExprOp::MUL),
            (LEFT, ExprOp::MUL),
        ];
        let (mut fused_pairs, mut programs) = (0, 0);
        for k in VALUES.iter().copied().chain(-3..5) {
            for (form, op) in ops {
                for slot in [0, 1] {
                    // The variable and the operation; then, after a step that keeps it from
                    // the push (`max` with the least `i64`), the operation and an element.
                    let step = FoldedNode::new(form, op as u8, k, 0);
                    let keep = FoldedNode::new(RIGHT, ExprOp::MAX as u8, i64::MIN, 0);
                    let elem = FoldedNode::new(UNARY, ExprOp::ELEM as u8, 0, slot);
                    let push = FoldedNode::default();
                    for nodes in [vec![push, step], vec![push, keep, step, elem]] {
                        let mut fused = nodes.clone();
                        let m = fuse(&mut fused);
                        fused_pairs += nodes.len() - m;
                        programs += 1;
                        // (Under Miri, a few values: every pair is still evaluated.)
                        let values = if cfg!(miri) {
                            &VALUES[..4]
                        } else {
                            &VALUES[..]
                        };
                        for v in values
                            .iter()
                            .copied()
                            .chain(-3..if cfg!(miri) { -2 } else { 10 })
                        {
                            assert_eq!(
                                eval_folded(&fused[..m], v, &p, 9),
                                eval_folded(&nodes, v, &p, 9),
                                "{nodes:?} fused {:?} at {v}",
                                &fused[..m]
                            );
                        }
                    }
                }
            }
        }
        // Fused: after the push, the additions (either side) and `x - k` but for `k =
        // i64::MIN`; before an element, those and the multiplications (either side). Of the
        // 20 constants, one is `i64::MIN`; each pair comes with both slots.
        assert_eq!(programs, 20 * 6 * 2 * 2);
        assert_eq!(fused_pairs, 2 * (2 * 20 + 19) + 2 * (4 * 20 + 19));
    }

    /// `i - t` with `t = i64::MIN` is no addition of `-t` (which has no value): fusing leaves
    /// it, and `(i - t) * i` overflows at `i = 0` as the expression does.
    #[test]
    fn a_subtraction_of_the_least_i64_is_not_fused() {
        let e = [
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::VAR, 0, 0),
            node(ExprOp::SUB, 0, 0),
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::MUL, 0, 0),
            node(ExprOp::END, 0, 0),
        ];
        let p = RuntimeParams::unchecked(&[]);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        vars[0] = i64::MIN;
        let mut out = [FoldedNode::default(); FOLDED_NODES];
        let n = fold(&e, &p, &vars, (0, 1), &mut out).unwrap();
        assert!(!is_chain(&out[..n]));
        assert_eq!(fuse(&mut out[..n]), n);
        assert_eq!(
            eval_folded(&out[..n], 0, &p, 9),
            Err(RunError::Overflow { pc: 9 })
        );
        // With `t = 5`, the push and the subtraction are one node.
        vars[0] = 5;
        let n = fold(&e, &p, &vars, (0, 1), &mut out).unwrap();
        let m = fuse(&mut out[..n]);
        assert_eq!((n, m), (4, 3));
        assert_eq!(out[0].form, PUSH_VAR_ADD);
        assert_eq!(eval_folded(&out[..m], 7, &p, 9), Ok(14));
    }

    /// The 1-D stencil's bounds, `max(0, i - 1)` and `min(i + 2, W)`, `i` the variable at
    /// depth 1 and `W` the node `w`.
    pub(in crate::interp) fn stencil_bounds(w: Record) -> ([Record; 6], [Record; 6]) {
        let start = [
            node(ExprOp::CONST, 0, 0),
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 1),
            node(ExprOp::SUB, 0, 0),
            node(ExprOp::MAX, 0, 0),
            node(ExprOp::END, 0, 0),
        ];
        let end = [
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 2),
            node(ExprOp::ADD, 0, 0),
            w,
            node(ExprOp::MIN, 0, 0),
            node(ExprOp::END, 0, 0),
        ];
        (start, end)
    }

    /// The 1-D stencil's bounds (`max(0, i - 1)`, `min(i + 2, W)` with W = 1,000) fold to
    /// clamps of `CLAMP_NODES` nodes, which do not fit in fewer.
    #[test]
    fn stencil_bounds_are_clamps() {
        let slots = [Value::Scalar(1000)];
        let p = RuntimeParams::unchecked(&slots);
        let vars = [0i64; limits::MAX_LOOP_DEPTH];
        let (start, end) = stencil_bounds(node(ExprOp::PARAM, 0, 0));
        for (e, want, at) in [
            (&start, (-1, 0, i64::MAX, 0, (0, 0)), [0, 0, 1, 998, 999]),
            (&end, (2, i64::MIN, 1000, 0, (0, 0)), [2, 3, 4, 1000, 1000]),
        ] {
            let mut out = [FoldedNode::default(); FOLDED_NODES];
            let n = fold(e, &p, &vars, (0, 1), &mut out).unwrap();
            assert!(is_chain(&out[..n]));
            let c = Clamp::of(&out[1..n]).unwrap();
            assert_eq!((c.before, c.lo, c.hi, c.after, c.divide), want);
            c.write(&mut out).unwrap();
            let nodes: &[FoldedNode; CLAMP_NODES] = out[..CLAMP_NODES].try_into().unwrap();
            for (v, x) in [0, 1, 2, 999, 1000].into_iter().zip(at) {
                assert_eq!(eval_clamp::<false>(nodes, v, 0), Ok(x));
                assert_eq!(eval_clamp::<true>(nodes, v, 0), Ok(x));
            }
            assert_eq!(c.write(&mut out[..CLAMP_NODES - 1]), None);
        }
        // An overflow is the chain's: `i - 1` at i64::MIN.
        let c = Clamp::of(&[FoldedNode::new(RIGHT, ExprOp::SUB as u8, 1, 0)]).unwrap();
        let mut nodes = [FoldedNode::default(); CLAMP_NODES];
        c.write(&mut nodes).unwrap();
        assert_eq!(
            eval_clamp::<false>(&nodes, i64::MIN, 5),
            Err(RunError::Overflow { pc: 5 })
        );
    }

    /// The end of the right neighbours random_nearest.pto read before it read one region
    /// (`092d5cf`), `min(i + 1, W) + (i + 1 < W) * keep[((t % P) * W + i) * 2 + 1]` (W, P
    /// scalars 0 and 1, `keep` the array in slot 2): thirteen nodes, each of a code of its own,
    /// giving what the expression gives at every `i`; with the left end (eleven) and two clamps
    /// (five each) it fits a template.
    #[test]
    fn random_nearest_bound_folds_to_coded_nodes() {
        let mut e = vec![
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 1),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::MIN, 0, 0),
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 1),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::LT, 0, 0),
        ];
        e.extend(keep_element(true));
        e.extend([
            node(ExprOp::MUL, 0, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::END, 0, 0),
        ]);
        let n = assert_folds_to_coded_nodes(&e, 13);
        assert!(11 + n + 2 * CLAMP_NODES <= FOLDED_NODES);
    }

    /// random_nearest.pto's region, `G[t - 1, max(i - keep[((t % P) * W + i) * 2], 0) : min(i +
    /// 1 + keep[((t % P) * W + i) * 2 + 1], W)]` (W, P scalars 0 and 1, `keep` the array in
    /// slot 2): 7 + 9 nodes, each of a code of its own (`i - keep[…]` is `C_SUB`), giving what
    /// the expressions give at every `i`, and their index error past the array.
    #[test]
    fn random_nearest_region_folds_to_coded_nodes() {
        let [start, end] = random_nearest_bounds();
        assert_folds_to_coded_nodes(&start, 7);
        assert_folds_to_coded_nodes(&end, 9);
    }

    /// random_nearest.pto's region bounds, `max(i - keep[((t % P) * W + i) * 2], 0)` and `min(i
    /// + 1 + keep[((t % P) * W + i) * 2 + 1], W)` (W, P scalars 0 and 1, `keep` the array in
    /// slot 2; `t` at depth 0, `i` at 1), in postfix.
    pub(in crate::interp) fn random_nearest_bounds() -> [Vec<Record>; 2] {
        let mut start = vec![node(ExprOp::VAR, 1, 0)];
        start.extend(keep_element(false));
        start.extend([
            node(ExprOp::SUB, 0, 0),
            node(ExprOp::CONST, 0, 0),
            node(ExprOp::MAX, 0, 0),
            node(ExprOp::END, 0, 0),
        ]);
        let mut end = vec![
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 1),
            node(ExprOp::ADD, 0, 0),
        ];
        end.extend(keep_element(true));
        end.extend([
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::MIN, 0, 0),
            node(ExprOp::END, 0, 0),
        ]);
        [start, end]
    }

    /// random_nearest's `keep[((t % P) * W + i) * 2]`, or with `right` the element after it
    /// (W, P scalars 0 and 1, `keep` the array in slot 2), in postfix.
    fn keep_element(right: bool) -> Vec<Record> {
        let mut e = vec![
            node(ExprOp::VAR, 0, 0),
            node(ExprOp::PARAM, 1, 0),
            node(ExprOp::MOD, 0, 0),
            node(ExprOp::PARAM, 0, 0),
            node(ExprOp::MUL, 0, 0),
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::CONST, 0, 2),
            node(ExprOp::MUL, 0, 0),
        ];
        if right {
            e.extend([node(ExprOp::CONST, 0, 1), node(ExprOp::ADD, 0, 0)]);
        }
        e.push(node(ExprOp::ELEM, 2, 0));
        e
    }

    /// Folds random_nearest's bound `e` for `i` (W = 8, P = 3 in slots 0 and 1, `keep` in slot
    /// 2, `t` = 4) and checks it: `len` nodes, each of a code of its own, giving what `e` gives
    /// at every `i` of the row, and its index error past the array (`i` = 20 reads past the 48
    /// elements). Returns the node count.
    fn assert_folds_to_coded_nodes(e: &[Record], len: usize) -> usize {
        let keep: Vec<u32> = (0..3 * 2 * 8).map(|k| (k * 7 % 3 == 0) as u32).collect();
        let slots = [Value::Scalar(8), Value::Scalar(3), Value::Array(&keep)];
        let p = RuntimeParams::unchecked(&slots);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        vars[0] = 4;
        let mut out = [FoldedNode::default(); FOLDED_NODES];
        let n = fold(e, &p, &vars, (0, 1), &mut out).unwrap();
        assert_eq!(n, len);
        assert!(
            out[..n].iter().all(|x| x.code != GENERIC),
            "{:?}",
            &out[..n]
        );
        for i in 0..8 {
            vars[1] = i;
            let want = eval_postfix(e, &p, &vars, 0, 0);
            assert!(want.is_ok());
            assert_eq!(eval_folded(&out[..n], i, &p, 0), want);
        }
        vars[1] = 20;
        let want = eval_postfix(e, &p, &vars, 0, 0);
        assert!(matches!(want, Err(RunError::Index { .. })));
        assert_eq!(eval_folded(&out[..n], 20, &p, 0), want);
        n
    }

    /// Task Bench's `spread` offset: the parts without the variable are computed once, and
    /// each remaining operation takes its computed operand inline.
    #[test]
    fn spread_folds_to_three_operations() {
        // (i + W / 3 + t % P) % W with W = 1000, P = 3, t = 4, i at depth 1.
        let e = spread_offset();
        let slots = [Value::Scalar(1000), Value::Scalar(3)];
        let p = RuntimeParams::unchecked(&slots);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        vars[0] = 4;
        let mut out = [FoldedNode::default(); FOLDED_NODES];
        let n = fold(&e, &p, &vars, (0, 1), &mut out).unwrap();
        let forms: Vec<(u8, i64)> = out[..n].iter().map(|x| (x.form, x.k)).collect();
        assert_eq!(
            forms,
            [(PUSH_VAR, 0), (RIGHT, 333), (RIGHT, 1), (RIGHT, 1000)]
        );
        assert_eq!(eval_folded(&out[..n], 999, &p, 0), Ok(333));
        assert!(is_chain(&out[..n]));
        assert_eq!(eval_chain(&out[1..n], 999, &p, 0), Ok(333));
        // A variable of a loop inside the one folded for has no value: not folded.
        assert_eq!(fold(&e, &p, &vars, (0, 0), &mut out), None);
        // Too little room: not folded.
        assert_eq!(fold(&e, &p, &vars, (0, 1), &mut out[..3]), None);
    }
}

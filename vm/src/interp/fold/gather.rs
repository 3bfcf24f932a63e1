//! Gathers: folded expressions that move the loop's variable by a runtime-array element read at
//! an affine index of the variable, then clamp it (spec/bytecode.md §5.8, "Emission").
//!
//! Irregular neighbourhoods name their bounds through a table of offsets: Task Bench's
//! random_nearest reads `G[t - 1, max(i - keep[((t % P) * W + i) * 2], 0) : min(i + 1 +
//! keep[… + 1], W)]`. Folded for the points' loop, each bound is five or six nodes
//! ([`super::fuse`]), and the folded evaluator pays a dispatch, a stack step and a loop turn
//! for each: about 150 instructions a bound, 390 of random_nearest's 900 a task in one
//! instance. A [`Gather`] keeps the numbers of
//!
//! ```text
//! min(max((v + a) ± array[(v + c) * m + d], lo), hi)
//! ```
//!
//! and evaluates them in straight-line code, each step checked as the node it comes from:
//! `v + a` first (its node is pushed first), then the index's sum, product and sum, the
//! element, the sum or difference, and the bounds. A step the node sequence does not have is
//! one that cannot fail (`+ 0`, `* 1`), so it overflows, or reads past the array, exactly
//! where the folded nodes do.

use super::*;

/// The numbers of a gather: `min(max((v + plus) ± array[(v + at) * times + then], lo), hi)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::interp) struct Gather {
    plus: i64,
    at: i64,
    times: i64,
    then: i64,
    /// The runtime array's slot.
    slot: u16,
    /// Whether the element is subtracted (else added).
    minus: bool,
    lo: i64,
    hi: i64,
}

/// The nodes a [`Gather`] takes in a template's `folded`: its numbers as their `k`, the
/// array's slot and the sign (the operator `SUB` or `ADD`) in the first.
pub(in crate::interp) const GATHER_NODES: usize = 6;

/// The nodes of the gather `v + array0[v]` (slot 0): what [`eval_gather`] is given where a
/// template would not hold its gather's nodes (never: a gather is only named once written).
pub(in crate::interp) const NO_GATHER: [FoldedNode; GATHER_NODES] = [
    FoldedNode::new(PUSH, ExprOp::ADD as u8, 0, 0),
    EMPTY_FOLDED,
    FoldedNode::new(PUSH, 0, 1, 0),
    EMPTY_FOLDED,
    FoldedNode::new(PUSH, 0, i64::MIN, 0),
    FoldedNode::new(PUSH, 0, i64::MAX, 0),
];

impl Gather {
    /// The gather the fused folded expression `nodes` ([`super::fuse`]) computes: the
    /// variable plus a constant (or the variable); the variable plus a constant again (or the
    /// variable), optionally multiplied by a constant, then the element it indexes, added to
    /// or multiplied by a constant first; the sum or the difference of the two; then minimums
    /// and maximums with constants. `None` for any other expression.
    pub(in crate::interp) fn of(nodes: &[FoldedNode]) -> Option<Gather> {
        let [first, second, rest @ ..] = nodes else {
            return None;
        };
        let (plus, at) = (variable_plus(first)?, variable_plus(second)?);
        // The index: `* times` (a node of its own, or fused with the element), `+ then`
        // (fused with the element), in that order.
        let (times, rest) = match rest {
            [n, tail @ ..] if n.code == C_MUL_K => (n.k, tail),
            _ => (1, rest),
        };
        let [element, combine, rest @ ..] = rest else {
            return None;
        };
        let (times, then) = match element.code {
            C_ELEM => (times, 0),
            C_ADD_ELEM => (times, element.k),
            // `(x * a) * b` is two checked steps, not one.
            C_MUL_ELEM if times == 1 => (element.k, 0),
            _ => return None,
        };
        let minus = match combine.code {
            C_ADD => false,
            C_SUB => true,
            _ => return None,
        };
        let (lo, hi, rest) = bounds(rest);
        rest.is_empty().then_some(Gather {
            plus,
            at,
            times,
            then,
            slot: element.slot,
            minus,
            lo,
            hi,
        })
    }

    /// Writes the gather into `out`'s first [`GATHER_NODES`] nodes; `None` (nothing written)
    /// without the room.
    pub(in crate::interp) fn write(self, out: &mut [FoldedNode]) -> Option<()> {
        let out = out.get_mut(..GATHER_NODES)?;
        let sign = if self.minus { ExprOp::SUB } else { ExprOp::ADD };
        let values = [self.plus, self.at, self.times, self.then, self.lo, self.hi];
        for (n, k) in out.iter_mut().zip(values) {
            *n = FoldedNode { k, ..EMPTY_FOLDED };
        }
        out[0].op = sign as u8;
        out[0].slot = self.slot;
        Some(())
    }
}

/// The constant a node that pushes the loop's variable adds to it: 0 for the variable itself.
fn variable_plus(n: &FoldedNode) -> Option<i64> {
    match n.code {
        C_PUSH_VAR => Some(0),
        C_VAR_ADD_K => Some(n.k),
        _ => None,
    }
}

/// Evaluates the gather [`Gather::write`] wrote into `n` on the loop's variable at `v`, as the
/// folded nodes it came from evaluate (`pc` locates an error: an overflow, an index past the
/// array).
#[inline(always)]
pub(in crate::interp) fn eval_gather(
    n: &[FoldedNode; GATHER_NODES],
    v: i64,
    p: &RuntimeParams<'_>,
    pc: u32,
) -> R<i64> {
    let ovf = RunError::Overflow { pc };
    let base = v.checked_add(n[0].k).ok_or(ovf)?;
    let index = v
        .checked_add(n[1].k)
        .and_then(|x| x.checked_mul(n[2].k))
        .and_then(|x| x.checked_add(n[3].k))
        .ok_or(ovf)?;
    let e = elem(n[0].slot, index, p, pc)?;
    let x = if n[0].op == ExprOp::SUB as u8 {
        base.checked_sub(e)
    } else {
        base.checked_add(e)
    };
    Ok(x.ok_or(ovf)?.max(n[4].k).min(n[5].k))
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::tests::{config, node, random_nearest_bounds};
    use super::*;
    use crate::params::Value;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    /// `v + a` as a postfix expression (`v` at depth 1): the variable alone for `None`.
    fn variable_plus_expr(a: Option<i64>) -> Vec<Record> {
        let mut e = vec![node(ExprOp::VAR, 1, 0)];
        if let Some(a) = a {
            e.extend([const_node(a), node(ExprOp::ADD, 0, 0)]);
        }
        e
    }

    /// The constant `k`, a 32-bit value (the edges of the 64-bit range come from the
    /// variable's values).
    fn const_node(k: i64) -> Record {
        node(ExprOp::CONST, 0, k as i32 as u32)
    }

    const VALUES: [i64; 10] = [
        0,
        1,
        -1,
        2,
        3,
        -7,
        1000,
        i32::MAX as i64,
        i32::MIN as i64,
        -2,
    ];

    proptest! {
        #![proptest_config(config(3000))]

        /// An expression of a gather's shape, folded and fused, is taken as a gather, which
        /// gives what the folded nodes and the expression give at every value of the
        /// variable, overflows and indices past the array included.
        #[test]
        fn a_gather_evaluates_as_its_expression(
            plus in prop::option::of(prop::sample::select(VALUES.to_vec())),
            at in prop::option::of(prop::sample::select(VALUES.to_vec())),
            times in prop::option::of(prop::sample::select(VALUES.to_vec())),
            then in prop::option::of(prop::sample::select(VALUES.to_vec())),
            minus: bool,
            clamps in prop::collection::vec(
                (prop::bool::ANY, prop::sample::select(VALUES.to_vec())),
                0..3,
            ),
            array in prop::collection::vec(prop::sample::select(vec![0u32, 1, 2, 7, u32::MAX]), 0..12),
        ) {
            // (v + plus) ± array[(v + at) * times + then], then the clamps.
            let mut e = variable_plus_expr(plus);
            e.extend(variable_plus_expr(at));
            if let Some(m) = times {
                e.extend([const_node(m), node(ExprOp::MUL, 0, 0)]);
            }
            if let Some(d) = then {
                e.extend([const_node(d), node(ExprOp::ADD, 0, 0)]);
            }
            e.push(node(ExprOp::ELEM, 1, 0));
            e.push(node(if minus { ExprOp::SUB } else { ExprOp::ADD }, 0, 0));
            for &(max, k) in &clamps {
                e.extend([const_node(k), node(if max { ExprOp::MAX } else { ExprOp::MIN }, 0, 0)]);
            }
            e.push(node(ExprOp::END, 0, 0));

            let slots = [Value::Scalar(0), Value::Array(&array)];
            let p = RuntimeParams::unchecked(&slots);
            let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
            let mut out = [FoldedNode::default(); FOLDED_NODES];
            let n = fold(&e, &p, &vars, (0, 1), &mut out).unwrap();
            let n = fuse(&mut out[..n]);
            let g = Gather::of(&out[..n]);
            prop_assert!(g.is_some(), "{:?}", &out[..n]);
            let g = g.unwrap();
            let mut nodes = NO_GATHER;
            g.write(&mut nodes).unwrap();
            let edges = [i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1, -(1 << 40), 1 << 40];
            for v in (-4..16).chain(edges) {
                vars[1] = v;
                let want = eval_postfix(&e, &p, &vars, 0, 9);
                prop_assert_eq!(eval_folded(&out[..n], v, &p, 9), want);
                prop_assert_eq!(eval_gather(&nodes, v, &p, 9), want, "at {}: {:?}", v, g);
            }
        }
    }

    /// random_nearest.pto's bounds are gathers: `max(i - keep[(c + i) * 2], 0)` and `min(i + 1
    /// + keep[(c + i) * 2 + 1], W)` (here W = 8, `t % P` = 1 so `c` = 8).
    #[test]
    fn random_nearest_bounds_are_gathers() {
        let keep: Vec<u32> = (0..3 * 2 * 8).map(|k| (k % 3 == 0) as u32).collect();
        let slots = [Value::Scalar(8), Value::Scalar(3), Value::Array(&keep)];
        let p = RuntimeParams::unchecked(&slots);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        vars[0] = 4;
        let gathers = random_nearest_bounds().map(|e| {
            let mut out = [FoldedNode::default(); FOLDED_NODES];
            let n = fold(&e, &p, &vars, (0, 1), &mut out).unwrap();
            let n = fuse(&mut out[..n]);
            (e, Gather::of(&out[..n]).unwrap())
        });
        let want = [
            Gather {
                plus: 0,
                at: 8,
                times: 2,
                then: 0,
                slot: 2,
                minus: true,
                lo: 0,
                hi: i64::MAX,
            },
            Gather {
                plus: 1,
                at: 8,
                times: 2,
                then: 1,
                slot: 2,
                minus: false,
                lo: i64::MIN,
                hi: 8,
            },
        ];
        for ((e, g), want) in gathers.iter().zip(want) {
            assert_eq!(*g, want);
            let mut nodes = NO_GATHER;
            g.write(&mut nodes).unwrap();
            // Every point of the row, and past the array (`i` = 20 reads past its 48).
            for i in (0..8).chain([20]) {
                vars[1] = i;
                assert_eq!(
                    eval_gather(&nodes, i, &p, 0),
                    eval_postfix(e, &p, &vars, 0, 0)
                );
            }
        }
    }

    /// Not gathers: the element first, two elements, a product before a product-and-element.
    #[test]
    fn other_shapes_are_not_gathers() {
        let v = FoldedNode::new(PUSH_VAR, 0, 0, 0);
        let elem = FoldedNode::new(UNARY, ExprOp::ELEM as u8, 0, 1);
        let sub = FoldedNode::new(BINARY, ExprOp::SUB as u8, 0, 0);
        let mul = FoldedNode::new(RIGHT, ExprOp::MUL as u8, 2, 0);
        let mul_elem = FoldedNode::new(MUL_ELEM, 0, 3, 1);
        // `array[v] - v`
        assert_eq!(Gather::of(&[v, elem, v, sub]), None);
        // `array[v] - array[v]`
        assert_eq!(Gather::of(&[v, elem, v, elem, sub]), None);
        // `v - array[v * 2 * 3]`
        assert_eq!(Gather::of(&[v, v, mul, mul_elem, sub]), None);
        // `v - array[v * 2]`, `v - array[v * 3]`
        assert!(Gather::of(&[v, v, mul, elem, sub]).is_some());
        assert!(Gather::of(&[v, v, mul_elem, sub]).is_some());
        // Too little room to write one.
        let g = Gather::of(&[v, v, mul_elem, sub]).unwrap();
        assert_eq!(g.write(&mut [EMPTY_FOLDED; GATHER_NODES - 1]), None);
    }
}

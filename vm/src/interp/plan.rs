//! Task sites decoded once into plans, and the task records an innermost loop keeps from one
//! iteration to the next (spec/bytecode.md §5.8, "Emission").

use super::fold::{
    clamp_divides, eval_chain, eval_clamp, eval_folded, eval_gather, fold, fuse, is_chain,
    piece_at, Clamp, FoldedNode, Gather, Piece, CLAMP_NODES, EMPTY_FOLDED, FOLDED_NODES,
    GATHER_NODES, NO_CLAMP, NO_GATHER,
};
use super::*;

/// How a task operand or region bound is computed, decoded once per task site.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Operand {
    /// OPERAND_CONST (value in `c`), OPERAND_VAR (depth in `a`), OPERAND_EXPR (start in `a`)
    /// or OPERAND_NEXT (the start plus one: a single index).
    kind: u8,
    a: u32,
    c: i64,
}

pub(super) const OPERAND_CONST: u8 = 0;
pub(super) const OPERAND_VAR: u8 = 1;
pub(super) const OPERAND_EXPR: u8 = 2;
pub(super) const OPERAND_NEXT: u8 = 3;
/// The start of a single-index dimension named by the variable at depth `a` of a loop over a
/// dense or dynamic axis no longer than the dimension: its values `0 .. extent` are always in
/// bounds, so the range `(v, v + 1)` needs no check.
pub(super) const OPERAND_INDEX: u8 = 4;
/// In a kept record's [`Template`] only: an expression folded for its loop, nodes `a .. a +
/// c` of the template's `folded`.
const OPERAND_FOLDED: u8 = 5;
/// Likewise, a folded expression that is a chain: its operations (after the variable) are
/// nodes `a .. a + c`.
const OPERAND_CHAIN: u8 = 6;
/// Likewise, a chain that is a [`Clamp`] (`max(0, i - 1)`), written in nodes `a .. a + c`.
const OPERAND_CLAMP: u8 = 7;
/// Likewise, a folded expression that is a [`Gather`] (`max(i - keep[(c + i) * 2], 0)`),
/// written in nodes `a .. a + c`.
const OPERAND_GATHER: u8 = 8;

/// One named region dimension of a task site: its bounds and the extent it is checked against
/// (`i64::MAX` for an implicit tensor).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PlanDim {
    start: Operand,
    end: Operand,
    extent: i64,
    /// Its region's position among the site's, and its own among the region's dimensions.
    io: u8,
    dim: u8,
}

/// One IO region of a task site.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PlanIo {
    tensor: u16,
    dir: u8,
    ndims: u8,
}

/// Task sites whose decoded form is cached: a site's plan is looked for first in the slot its
/// instruction index maps to, then in the others; a new one takes its own slot if that is
/// empty, else the next slot of a round robin over all of them (so the sites a loop uses, up
/// to this many, end up cached together whatever their indices: a plan the round robin placed
/// stays until it has come round again, after as many misses as there are slots).
pub(super) const PLAN_SITES: usize = 16;
/// Region dimensions a cached site may have in all; a larger site is decoded at every task.
pub(super) const PLAN_DIMS: usize = 12;

/// A task site decoded for emission. Runtime parameters do not change during a run, so `PARAM`
/// operands and tensor extents are resolved when the plan is made.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    site: u32,
    kernel: u16,
    pool: u8,
    tier: u8,
    nparams: u8,
    nio: u8,
    /// Named dimensions of all its regions (`dims[..ndims]`).
    ndims: u8,
    params: [Operand; limits::MAX_TASK_PARAMS],
    ios: [PlanIo; limits::MAX_TASK_IO],
    dims: [PlanDim; PLAN_DIMS],
    /// Whether every parameter is a loop variable, and then their depths: the parameters
    /// are copied without dispatching on their kind.
    vars_only: bool,
    param_depths: [u8; limits::MAX_TASK_PARAMS],
    /// Whether every named dimension is an [`OPERAND_INDEX`] one, and then `(region, dim,
    /// depth)` of each: the ranges are written without dispatching or checking.
    index_only: bool,
    index_dims: [[u8; 3]; PLAN_DIMS],
    /// `depth + 1` when `keep_template` found that the loop at `depth` cannot keep this
    /// site's record (a site's innermost loop is always the same), 0 before it looked.
    no_template: u8,
}

pub(super) const EMPTY_OPERAND: Operand = Operand {
    kind: 0,
    a: 0,
    c: 0,
};
pub(super) const EMPTY_DIM: PlanDim = PlanDim {
    start: EMPTY_OPERAND,
    end: EMPTY_OPERAND,
    extent: 0,
    io: 0,
    dim: 0,
};
pub(super) const EMPTY_PLAN: Plan = Plan {
    site: u32::MAX,
    kernel: 0,
    pool: 0,
    tier: 0,
    nparams: 0,
    nio: 0,
    ndims: 0,
    params: [EMPTY_OPERAND; limits::MAX_TASK_PARAMS],
    ios: [PlanIo {
        tensor: 0,
        dir: 0,
        ndims: 0,
    }; limits::MAX_TASK_IO],
    dims: [EMPTY_DIM; PLAN_DIMS],
    vars_only: false,
    param_depths: [0; limits::MAX_TASK_PARAMS],
    index_only: false,
    index_dims: [[0; 3]; PLAN_DIMS],
    no_template: 0,
};

#[inline(always)]
pub(super) fn operand(
    o: &Operand,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    pc: u32,
) -> R<i64> {
    operand_by(o, vars, |start| eval_expr(exprs, p, vars, start, pc))
}

/// The value of operand `o`, an expression's (at its start node) given by `eval`.
#[inline(always)]
fn operand_by(
    o: &Operand,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    eval: impl FnOnce(u32) -> R<i64>,
) -> R<i64> {
    match o.kind {
        OPERAND_CONST => Ok(o.c),
        OPERAND_VAR => Ok(vars[o.a as usize % limits::MAX_LOOP_DEPTH]),
        _ => eval(o.a),
    }
}

/// Whether operand `o` reads the variable of the loop at `depth` (or of a loop inside it).
fn reads_loop(exprs: &[Record], o: &Operand, depth: u8) -> bool {
    match o.kind {
        OPERAND_CONST | OPERAND_NEXT => false,
        OPERAND_VAR | OPERAND_INDEX => o.a >= depth as u32,
        _ => super::expr::loops_read(exprs, o.a) > depth as u32,
    }
}

/// What changes in `plan`'s record (site `pc`) from one iteration of its innermost loop (at
/// `depth`; `vars` holds the values of the loops around it) to the next
/// (`Interpreter::keep_template`): the loop's variable as a parameter and its index as a
/// region dimension, written directly; up to [`SLOW_FIELDS`] parameters and as many
/// dimensions that read it otherwise, recomputed, from their expressions folded for the
/// loop where they fold (`fold`). Written into `t` in place (a template is ~1 KiB, and a
/// loop of one iteration keeps one at every entry): its counts are reset, and the arrays are
/// read only up to them. `None` for a site with more (`t` is then left half written).
fn template_of(
    t: &mut Template,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    plan: &Plan,
    pc: u32,
    depth: u8,
) -> Option<()> {
    t.depth = depth;
    t.site = pc;
    t.nparams = plan.nparams;
    t.params = 0;
    t.ndims = 0;
    t.nslow_params = 0;
    t.nslow_dims = 0;
    t.nfolded = 0;
    for (i, o) in plan.params[..plan.nparams as usize].iter().enumerate() {
        if !reads_loop(exprs, o, depth) {
            continue;
        }
        if o.kind == OPERAND_VAR && o.a == depth as u32 {
            t.params |= 1 << i;
        } else {
            let o = t.folded_operand(exprs, p, vars, *o);
            *t.slow_params.get_mut(t.nslow_params as usize)? = (i as u8, o);
            t.nslow_params += 1;
        }
    }
    for d in &plan.dims[..plan.ndims as usize] {
        if !reads_loop(exprs, &d.start, depth) && !reads_loop(exprs, &d.end, depth) {
            continue;
        }
        if d.start.kind == OPERAND_INDEX && d.start.a == depth as u32 {
            t.dims[t.ndims as usize] = [d.io, d.dim];
            t.ndims += 1;
        } else {
            let mut d = *d;
            d.start = t.folded_operand(exprs, p, vars, d.start);
            d.end = t.folded_operand(exprs, p, vars, d.end);
            *t.slow_dims.get_mut(t.nslow_dims as usize)? = d;
            t.nslow_dims += 1;
        }
    }
    t.slow = t.nslow_params + t.nslow_dims > 0;
    t.clamps = {
        let t = &*t;
        let all_clamps = t.slow && t.slow_operands().all(|o| o.kind == OPERAND_CLAMP);
        if !all_clamps {
            NOT_CLAMPS
        } else if t.slow_operands().any(|o| clamp_divides(t.clamp_nodes(o))) {
            CLAMPS_DIVIDING
        } else {
            CLAMPS
        }
    };
    t.gathers = t.slow
        && t.clamps == NOT_CLAMPS
        && t.slow_operands()
            .all(|o| matches!(o.kind, OPERAND_CLAMP | OPERAND_GATHER));
    t.linear = NO_STRETCH;
    t.short_stretches = 0;
    if t.clamps != NOT_CLAMPS {
        t.clamps |= STRETCHING;
    }
    Some(())
}

/// A stretch that holds fewer than this many values of the loop's variable from the one it
/// was found at is *short*. Two short ones in a row end the record's looking for stretches
/// for the rest of its run (`Template::short_stretches`): `i / 2` changes at every second
/// value, and finding each stretch costs more than the evaluations it saves. (One is not
/// enough: a stencil's first point has a stretch of its own, the clamped one.)
const SHORTEST_STRETCH: i128 = 4;
const SHORT_STRETCHES: u8 = 2;

/// The stretch around the value `v` of the loop's variable at which every slow field of `t`,
/// a record whose slow fields are all clamps (`CLAMPS`, `CLAMPS_DIVIDING`), is `v` plus a
/// constant or a constant ([`piece_at`]) and passes the checks `recompute_by` makes there: a
/// dimension's start is not negative, its end is not below its start and not past its
/// extent ([`Template::linear`]). Writes each field's form into `t.linear_params` and
/// `t.linear_dims`. `None` where a clamp has no such piece at `v`, or a check fails there.
fn stretch_at(t: &mut Template, v: i64) -> Option<(i64, i64)> {
    const MIN: i128 = i64::MIN as i128;
    const MAX: i128 = i64::MAX as i128;
    let (mut lo, mut hi) = (MIN, MAX);
    let mut within = |(from, to): (i128, i128)| {
        (lo, hi) = (lo.max(from), hi.min(to));
    };
    // The field's form as `(v & mask) + k`.
    let mask = |p: &Piece| -(p.slope as i8);
    for j in 0..(t.nslow_params as usize).min(SLOW_FIELDS) {
        let p = piece_at(t.clamp_nodes(&t.slow_params[j].1), v)?;
        within((p.from, p.to));
        (t.linear_params[j], t.linear_masks[j]) = (p.k as i64, mask(&p));
    }
    for j in 0..(t.nslow_dims as usize).min(SLOW_FIELDS) {
        let pd = t.slow_dims[j];
        let start = piece_at(t.clamp_nodes(&pd.start), v)?;
        let end = if pd.end.kind == OPERAND_NEXT {
            Piece {
                k: start.k + 1,
                ..start
            }
        } else {
            piece_at(t.clamp_nodes(&pd.end), v)?
        };
        within((start.from, start.to));
        within((end.from, end.to));
        // `start >= 0`, `end <= extent` and `end >= start` at every value kept.
        let extent = pd.extent as i128;
        match start.slope {
            true => within((-start.k, MAX)),
            false if start.k < 0 => return None,
            false => {}
        }
        match end.slope {
            true => within((MIN, extent - end.k)),
            false if end.k > extent => return None,
            false => {}
        }
        match (start.slope, end.slope) {
            (false, true) => within((start.k - end.k, MAX)),
            (true, false) => within((MIN, end.k - start.k)),
            _ if end.k < start.k => return None,
            _ => {}
        }
        t.linear_dims[j] = (start.k as i64, end.k as i64);
        let masks = &mut t.linear_masks[SLOW_FIELDS + 2 * j..];
        (masks[0], masks[1]) = (mask(&start), mask(&end));
    }
    (lo <= hi).then_some((lo as i64, hi as i64))
}

/// The slow fields of a record made of clamps (`t.clamps` not `NOT_CLAMPS`): by
/// `write_linear` at a value `v` of the loop's variable inside the record's stretch
/// (`t.linear`); outside it, evaluated (`recompute_clamps`), and while the record is
/// `STRETCHING`, the stretch around `v` found. Out of line, as `recompute_clamps`: inlined
/// into `refill`, it lengthened the records without slow fields too.
#[inline(never)]
fn clamps_or_linear(task: &mut Task, t: &mut Template, v: i64) -> R<()> {
    if (t.linear.0..=t.linear.1).contains(&v) {
        write_linear(task, t, v);
        return Ok(());
    }
    match t.clamps {
        STRETCHING_CLAMPS => recompute_and_stretch::<false>(task, t, v),
        STRETCHING_CLAMPS_DIVIDING => recompute_and_stretch::<true>(task, t, v),
        // Stretches given up (`refill` evaluates a dividing record's clamps itself then: a
        // fourth arm there cost LLaMA's generation 1.7 %).
        CLAMPS => recompute_clamps::<false>(task, t, v),
        _ => recompute_clamps::<true>(task, t, v),
    }
}

/// [`clamps_or_linear`] outside the stretch: the clamps evaluated, then the stretch around
/// `v` found (`stretch_at`) and counted if short; after [`SHORT_STRETCHES`] short ones in a
/// row, the record stops looking (`STRETCHING` cleared). Out of line: the stretch's path
/// then needs no frame.
#[inline(never)]
fn recompute_and_stretch<const DIVIDES: bool>(task: &mut Task, t: &mut Template, v: i64) -> R<()> {
    recompute_clamps::<DIVIDES>(task, t, v)?;
    let s = stretch_at(t, v);
    t.linear = s.unwrap_or(NO_STRETCH);
    let long = s.is_some_and(|(_, hi)| hi as i128 - v as i128 + 1 >= SHORTEST_STRETCH);
    t.short_stretches = if long { 0 } else { t.short_stretches + 1 };
    if t.short_stretches >= SHORT_STRETCHES {
        t.clamps &= !STRETCHING;
    }
    Ok(())
}

/// [`recompute_clamps`] at a value `v` of the loop's variable inside `t.linear`: each slow
/// field is `(v & mask) + k` (every sum fits, and no check fails there).
#[inline(always)]
fn write_linear(task: &mut Task, t: &Template, v: i64) {
    let (params, dims) = t.linear_masks.split_at(SLOW_FIELDS);
    let n = (t.nslow_params as usize).min(SLOW_FIELDS);
    for ((&(i, _), &k), &m) in t.slow_params[..n].iter().zip(&t.linear_params).zip(params) {
        task.params[i as usize % limits::MAX_TASK_PARAMS] = (v & m as i64).wrapping_add(k);
    }
    let n = (t.nslow_dims as usize).min(SLOW_FIELDS);
    let slow = t.slow_dims[..n].iter().zip(&t.linear_dims);
    for ((pd, &(b, d)), m) in slow.zip(dims.chunks_exact(2)) {
        task.io[pd.io as usize % limits::MAX_TASK_IO].ranges[pd.dim as usize % limits::MAX_RANK] = (
            (v & m[0] as i64).wrapping_add(b),
            (v & m[1] as i64).wrapping_add(d),
        );
    }
}

/// The fields of a kept record (`t`) that read its loop's variable otherwise than as itself
/// or its index, evaluated and checked as `fill_task` evaluates and checks them, in its order.
#[inline(never)]
fn recompute(
    task: &mut Task,
    t: &Template,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
) -> R<()> {
    let v = vars[t.depth as usize % limits::MAX_LOOP_DEPTH];
    if t.gathers {
        return recompute_by(task, t, &Gathers { t, v, p });
    }
    recompute_in_full(task, t, exprs, p, vars, v)
}

/// [`recompute`] of a record with a slow field that is neither a clamp nor a gather: out of
/// line, so that the general evaluators' large frame is not set up for the records without
/// one (random_nearest's `recompute`, 193 → 165 instructions a task).
#[inline(never)]
fn recompute_in_full(
    task: &mut Task,
    t: &Template,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    v: i64,
) -> R<()> {
    recompute_by(
        task,
        t,
        &InFull {
            t,
            v,
            exprs,
            p,
            vars,
        },
    )
}

/// [`recompute`] for a record whose slow fields are all clamps (`Template::clamps`): without
/// the general evaluators inlined, it takes a fraction of the instructions (those evaluators
/// make `recompute` a function of a large frame, whatever field it evaluates).
#[inline(never)]
fn recompute_clamps<const DIVIDES: bool>(task: &mut Task, t: &Template, v: i64) -> R<()> {
    recompute_by(task, t, &Clamps::<DIVIDES> { t, v })
}

/// `Template::clamps`: not every slow field is made of clamps.
const NOT_CLAMPS: u8 = 0;
/// Every slow field is made of clamps, and none divides.
const CLAMPS: u8 = 1;
/// Every slow field is made of clamps, and at least one divides.
const CLAMPS_DIVIDING: u8 = 2;
/// With `CLAMPS` or `CLAMPS_DIVIDING`: the record looks for stretches
/// ([`Template::linear`]; until [`SHORT_STRETCHES`] in a row are short).
const STRETCHING: u8 = 4;
const STRETCHING_CLAMPS: u8 = CLAMPS | STRETCHING;
const STRETCHING_CLAMPS_DIVIDING: u8 = CLAMPS_DIVIDING | STRETCHING;

/// How [`recompute_by`] evaluates a slow field's operand (a trait rather than a closure: the
/// compiler then inlines the evaluation into the loop).
trait SlowValue {
    /// Operand `o` of a slow field, `pc` placing its error.
    fn value(&self, o: &Operand, pc: u32) -> R<i64>;
}

/// Any operand: [`slow_value`].
struct InFull<'x, 'p> {
    t: &'x Template,
    v: i64,
    exprs: &'x [Record],
    p: &'x RuntimeParams<'p>,
    vars: &'x [i64; limits::MAX_LOOP_DEPTH],
}

impl SlowValue for InFull<'_, '_> {
    #[inline(always)]
    fn value(&self, o: &Operand, pc: u32) -> R<i64> {
        slow_value(self.t, o, self.v, self.exprs, self.p, self.vars, pc)
    }
}

/// A clamp's operand (`OPERAND_CLAMP`); its division left out without `DIVIDES`.
struct Clamps<'x, const DIVIDES: bool> {
    t: &'x Template,
    v: i64,
}

impl<const DIVIDES: bool> SlowValue for Clamps<'_, DIVIDES> {
    #[inline(always)]
    fn value(&self, o: &Operand, pc: u32) -> R<i64> {
        eval_clamp::<DIVIDES>(self.t.clamp_nodes(o), self.v, pc)
    }
}

/// A clamp's operand or a gather's (`OPERAND_CLAMP`, `OPERAND_GATHER`: `Template::gathers`).
struct Gathers<'x, 'p> {
    t: &'x Template,
    v: i64,
    p: &'x RuntimeParams<'p>,
}

impl SlowValue for Gathers<'_, '_> {
    #[inline(always)]
    fn value(&self, o: &Operand, pc: u32) -> R<i64> {
        if o.kind == OPERAND_GATHER {
            eval_gather(self.t.gather_nodes(o), self.v, self.p, pc)
        } else {
            eval_clamp::<true>(self.t.clamp_nodes(o), self.v, pc)
        }
    }
}

/// The steps of [`recompute`], each slow field's operands evaluated by `e`.
#[inline(always)]
fn recompute_by(task: &mut Task, t: &Template, e: &impl SlowValue) -> R<()> {
    for &(i, o) in &t.slow_params[..t.nslow_params as usize % (SLOW_FIELDS + 1)] {
        task.params[i as usize % limits::MAX_TASK_PARAMS] = e.value(&o, t.site + 1 + i as u32)?;
    }
    for pd in &t.slow_dims[..t.nslow_dims as usize % (SLOW_FIELDS + 1)] {
        let opc = t.site + 1 + t.nparams as u32 + pd.io as u32;
        // `dim_range`'s steps written out: given this loop's values through a closure, the
        // compiler kept them out of line (75 instructions a task more on the stencil).
        let start = e.value(&pd.start, opc)?;
        let end = if pd.end.kind == OPERAND_NEXT {
            start.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
        } else {
            e.value(&pd.end, opc)?
        };
        let io = &mut task.io[pd.io as usize % limits::MAX_TASK_IO];
        if start < 0 || end < start || end > pd.extent {
            return Err(region_error(opc, io.tensor, pd.dim, start, end, pd.extent));
        }
        io.ranges[pd.dim as usize % limits::MAX_RANK] = (start, end);
    }
    Ok(())
}

/// The value of operand `o` of a kept record's slow field (its template `t`; the loop's
/// variable at `v`): from its folded form where it has one.
#[inline(always)]
fn slow_value(
    t: &Template,
    o: &Operand,
    v: i64,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    pc: u32,
) -> R<i64> {
    let nodes = || {
        t.folded
            .get(o.a as usize..o.a as usize + o.c as usize)
            .unwrap_or(&[])
    };
    match o.kind {
        OPERAND_CLAMP => eval_clamp::<true>(t.clamp_nodes(o), v, pc),
        OPERAND_CHAIN => eval_chain(nodes(), v, p, pc),
        OPERAND_GATHER => eval_gather(t.gather_nodes(o), v, p, pc),
        OPERAND_FOLDED => eval_folded(nodes(), v, p, pc),
        _ => operand_in_full(o, exprs, p, vars, pc),
    }
}

/// [`operand`] for a slow field that did not fold (rare: a part of it fails, or its folded
/// form has no room), by the general evaluator alone: `eval_expr`'s fast paths give what it
/// gives, and inlining them here would only make `recompute` larger.
#[inline(never)]
fn operand_in_full(
    o: &Operand,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    pc: u32,
) -> R<i64> {
    operand_by(o, vars, |start| eval_postfix(exprs, p, vars, start, pc))
}

/// The range of a region dimension that is not an unchecked index, before its checks (`opc`:
/// its IO record, which places an error).
#[inline(always)]
fn dim_range(
    pd: &PlanDim,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    opc: u32,
) -> R<(i64, i64)> {
    let start = operand(&pd.start, exprs, p, vars, opc)?;
    let end = if pd.end.kind == OPERAND_NEXT {
        start.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
    } else {
        operand(&pd.end, exprs, p, vars, opc)?
    };
    Ok((start, end))
}

/// Body sites of an innermost loop whose task records `leaf_loop` keeps from one iteration
/// to the next.
pub(super) const TEMPLATES: usize = 4;

/// What changes from one iteration to the next in a site's record kept by `leaf_loop`: the
/// parameters and the index dimensions named by the loop's own variable (every other field
/// reads only runtime parameters and the variables of the loops around it, which keep their
/// values for the whole run of the loop).
#[derive(Clone, Copy, Debug)]
pub(super) struct Template {
    /// The loop's depth: its variable is the value every field below takes.
    depth: u8,
    /// Bit `i`: parameter `i` is the loop's variable.
    params: u16,
    ndims: u8,
    /// `(region, dimension)` of the index dimensions named by the loop's variable.
    dims: [[u8; 2]; PLAN_DIMS],
    /// The instruction after the site (the next site of the loop's body, or its end).
    next: u32,
    /// The fields that read the loop's variable otherwise (`i * 2`, `max(0, i - 1)`):
    /// evaluated and checked again at every iteration, as `fill_task` does, in its order
    /// (parameters, then dimensions). Its site and parameter count place their errors.
    site: u32,
    nparams: u8,
    /// Whether there are any (`nslow_params + nslow_dims > 0`).
    slow: bool,
    /// Whether every one of them is made of clamps (`OPERAND_CLAMP`; a dimension's end may be
    /// its start plus one), and whether one of those divides: `recompute_clamps` evaluates
    /// them (`CLAMPS`, `CLAMPS_DIVIDING`; else `NOT_CLAMPS`); with `STRETCHING`, through
    /// the record's stretch where it holds the variable (`clamps_or_linear`).
    clamps: u8,
    /// Whether every one of them is a clamp or a gather (`OPERAND_GATHER`), not all clamps:
    /// `recompute` evaluates them without the general evaluators.
    gathers: bool,
    nslow_params: u8,
    slow_params: [(u8, Operand); SLOW_FIELDS],
    nslow_dims: u8,
    slow_dims: [PlanDim; SLOW_FIELDS],
    /// The nodes of the slow fields' folded expressions (`OPERAND_FOLDED`, `OPERAND_CHAIN`,
    /// `OPERAND_CLAMP`, `OPERAND_GATHER`), `nfolded` of them.
    folded: [FoldedNode; FOLDED_NODES],
    nfolded: u8,
    /// The *stretch*: the values `linear.0 ..= linear.1` of the loop's variable `v`, around
    /// the last one at which the clamps were evaluated, at which every slow field is `v` plus
    /// a constant or a constant and passes its checks (`stretch_at`; none, `(1, 0)`, unless
    /// every slow field is a clamp). There a slow parameter is `(v & m) + k` with `(m, k) =
    /// linear_params[j]`, a slow dimension `((v & a) + b, (v & c) + d)` with `(b, d) =
    /// linear_dims[j]` (`m`, `a`, `c`, from `linear_masks`, are `-1` or `0`), in wrapping
    /// arithmetic: the sums fit, a constant may not.
    linear: (i64, i64),
    linear_params: [i64; SLOW_FIELDS],
    linear_dims: [(i64, i64); SLOW_FIELDS],
    /// The masks `m` of `linear_params`, `(a, c)` of `linear_dims`, as `i8`s (the record
    /// stays small: the interpreter keeps four).
    linear_masks: [i8; 3 * SLOW_FIELDS],
    /// The short stretches found in a row ([`SHORTEST_STRETCH`]).
    short_stretches: u8,
}

impl Template {
    /// The nodes of the clamp `o` (`OPERAND_CLAMP`) names.
    #[inline(always)]
    fn clamp_nodes(&self, o: &Operand) -> &[FoldedNode; CLAMP_NODES] {
        self.nodes_at(o, &NO_CLAMP)
    }

    /// The `N` nodes from the one `o` names, or `none` where `folded` does not hold them
    /// (never: an operand names only nodes written for it).
    #[inline(always)]
    fn nodes_at<'t, const N: usize>(
        &'t self,
        o: &Operand,
        none: &'static [FoldedNode; N],
    ) -> &'t [FoldedNode; N] {
        self.folded
            .get(o.a as usize..o.a as usize + N)
            .and_then(|n| n.try_into().ok())
            .unwrap_or(none)
    }

    /// Every operand of a slow field (a dimension's end that is its start plus one is none).
    fn slow_operands(&self) -> impl Iterator<Item = &Operand> {
        let params = self.slow_params[..self.nslow_params as usize % (SLOW_FIELDS + 1)].iter();
        let dims = self.slow_dims[..self.nslow_dims as usize % (SLOW_FIELDS + 1)].iter();
        params
            .map(|(_, o)| o)
            .chain(dims.flat_map(|d| [&d.start, &d.end]))
            .filter(|o| o.kind != OPERAND_NEXT)
    }

    /// The nodes of the gather `o` (`OPERAND_GATHER`) names.
    #[inline(always)]
    fn gather_nodes(&self, o: &Operand) -> &[FoldedNode; GATHER_NODES] {
        self.nodes_at(o, &NO_GATHER)
    }

    /// Operand `o` of a slow field, folded for the template's loop into `folded` when it is
    /// an expression that folds and there is room; else `o` itself.
    fn folded_operand(
        &mut self,
        exprs: &[Record],
        p: &RuntimeParams<'_>,
        vars: &[i64; limits::MAX_LOOP_DEPTH],
        o: Operand,
    ) -> Operand {
        if o.kind != OPERAND_EXPR {
            return o;
        }
        let at = self.nfolded as usize;
        let Some(room) = self.folded.get_mut(at..) else {
            return o;
        };
        let Some(n) = fold(exprs, p, vars, (o.a, self.depth), room) else {
            return o;
        };
        if is_chain(&room[..n]) {
            if let Some(c) = Clamp::of(&room[1..n]) {
                if c.write(room).is_some() {
                    self.nfolded += CLAMP_NODES as u8;
                    return Operand {
                        kind: OPERAND_CLAMP,
                        a: at as u32,
                        c: CLAMP_NODES as i64,
                    };
                }
            }
            self.nfolded += n as u8;
            Operand {
                kind: OPERAND_CHAIN,
                a: at as u32 + 1,
                c: n as i64 - 1,
            }
        } else {
            let n = fuse(&mut room[..n]);
            if let Some(g) = Gather::of(&room[..n]) {
                if g.write(room).is_some() {
                    self.nfolded += GATHER_NODES as u8;
                    return Operand {
                        kind: OPERAND_GATHER,
                        a: at as u32,
                        c: GATHER_NODES as i64,
                    };
                }
            }
            self.nfolded += n as u8;
            Operand {
                kind: OPERAND_FOLDED,
                a: at as u32,
                c: n as i64,
            }
        }
    }
}

/// The most fields of each kind a kept record recomputes (a site with more is filled in full).
pub(super) const SLOW_FIELDS: usize = 4;

pub(super) const EMPTY_TEMPLATE: Template = Template {
    depth: 0,
    params: 0,
    ndims: 0,
    dims: [[0; 2]; PLAN_DIMS],
    next: 0,
    // No site's: `keep_template` reuses a template whose site is the one it keeps.
    site: u32::MAX,
    nparams: 0,
    slow: false,
    clamps: NOT_CLAMPS,
    gathers: false,
    nslow_params: 0,
    slow_params: [(0, EMPTY_OPERAND); SLOW_FIELDS],
    nslow_dims: 0,
    slow_dims: [EMPTY_DIM; SLOW_FIELDS],
    folded: [EMPTY_FOLDED; FOLDED_NODES],
    nfolded: 0,
    linear: NO_STRETCH,
    linear_params: [0; SLOW_FIELDS],
    linear_dims: [(0, 0); SLOW_FIELDS],
    linear_masks: [0; 3 * SLOW_FIELDS],
    short_stretches: 0,
};

/// [`Template::linear`] holding no value.
const NO_STRETCH: (i64, i64) = (1, 0);

impl<'a, 'p> Interpreter<'a, 'p> {
    pub(super) fn dim_extent(&self, t: &crate::format::TensorEntry, d: usize) -> i64 {
        self.p.tensor_dim(t, d) as i64
    }

    /// Decodes an expression into an operand (a constant or a loop variable when it is one).
    pub(super) fn operand_of(&self, start: u32) -> Operand {
        let first = self.expr_at(start);
        if self.expr_at(start + 1).opcode == ExprOp::END as u8 {
            match ExprOp::from_u8(first.opcode) {
                Some(ExprOp::CONST) => {
                    return Operand {
                        kind: OPERAND_CONST,
                        a: 0,
                        c: first.op2() as i32 as i64,
                    }
                }
                Some(ExprOp::VAR) => {
                    return Operand {
                        kind: OPERAND_VAR,
                        a: first.op1() as u32,
                        c: 0,
                    }
                }
                Some(ExprOp::PARAM) => {
                    return Operand {
                        kind: OPERAND_CONST,
                        a: 0,
                        c: self.p.scalar(first.op1() as usize) as i64,
                    }
                }
                _ => {}
            }
        }
        Operand {
            kind: OPERAND_EXPR,
            a: start,
            c: 0,
        }
    }

    /// Decodes the task site at `pc` into a plan; `None` if it has too many region dimensions.
    pub(super) fn make_plan(&self, pc: u32, r: Record) -> Option<Plan> {
        let np = ((r.op2() & 0xFFFF) as usize).min(limits::MAX_TASK_PARAMS);
        let nio = ((r.op2() >> 16) as usize).min(limits::MAX_TASK_IO);
        let mut plan = EMPTY_PLAN;
        plan.site = pc;
        plan.kernel = r.op1();
        plan.tier = r.flags;
        plan.pool = self.v.kernels().get(r.op1() as usize).map_or(0, |k| k.pool);
        plan.nparams = np as u8;
        plan.nio = nio as u8;
        for i in 0..np {
            let o = self.rec(pc + 1 + i as u32);
            plan.params[i] = match Opcode::from_u8(o.opcode) {
                Some(Opcode::PARAM_CONST) => Operand {
                    kind: OPERAND_CONST,
                    a: 0,
                    c: o.op2() as i32 as i64,
                },
                Some(Opcode::PARAM_LOOPVAR) => Operand {
                    kind: OPERAND_VAR,
                    a: o.op1() as u32,
                    c: 0,
                },
                _ => self.operand_of(o.op2()),
            };
        }
        let mut k = 0usize;
        for j in 0..nio {
            let o = self.rec(pc + 1 + (np + j) as u32);
            let t = self.v.tensors().get(o.op1() as usize)?;
            let declared = t.flags.get() & TENSOR_IMPLICIT == 0;
            let ndims = (o.flags as usize).min(limits::MAX_RANK);
            if k + ndims > PLAN_DIMS {
                return None;
            }
            // IO_INPUT, IO_OUTPUT, IO_INOUT are 0x23..0x25 and `Dir` is 1..3.
            let dir = o
                .opcode
                .wrapping_sub(Opcode::IO_INPUT as u8 - Dir::In as u8)
                & 3;
            plan.ios[j] = PlanIo {
                tensor: o.op1(),
                dir,
                ndims: ndims as u8,
            };
            for d in 0..ndims {
                let rd = self
                    .v
                    .regions()
                    .get(o.op2() as usize + d)
                    .copied()
                    .unwrap_or_default();
                let start = self.operand_of(rd.start.get() as u32);
                let end = if rd.end.get() == NONE16 {
                    Operand {
                        kind: OPERAND_NEXT,
                        a: 0,
                        c: 0,
                    }
                } else {
                    self.operand_of(rd.end.get() as u32)
                };
                let extent = if declared {
                    self.dim_extent(t, d)
                } else {
                    i64::MAX
                };
                let start = if start.kind == OPERAND_VAR
                    && end.kind == OPERAND_NEXT
                    && self.index_within(start.a, extent)
                {
                    Operand {
                        kind: OPERAND_INDEX,
                        ..start
                    }
                } else {
                    start
                };
                plan.dims[k] = PlanDim {
                    start,
                    end,
                    extent,
                    io: j as u8,
                    dim: d as u8,
                };
                k += 1;
            }
        }
        plan.ndims = k as u8;
        plan.vars_only = plan.params[..np].iter().all(|o| o.kind == OPERAND_VAR);
        for (d, o) in plan.param_depths.iter_mut().zip(&plan.params[..np]) {
            *d = o.a as u8;
        }
        plan.index_only = plan.dims[..k].iter().all(|d| d.start.kind == OPERAND_INDEX);
        for (x, d) in plan.index_dims.iter_mut().zip(&plan.dims[..k]) {
            *x = [d.io, d.dim, d.start.a as u8];
        }
        Some(plan)
    }

    /// Whether the variable at `depth` is that of an enclosing loop over a dense or dynamic
    /// axis (values `0 .. ext`, the same extent at every execution of the loop in this run)
    /// with `ext <= extent`.
    pub(super) fn index_within(&self, depth: u32, extent: i64) -> bool {
        self.frames[..=self.sp].iter().any(|f| {
            Opcode::from_u8(f.op).is_some_and(|o| o.class() == OpClass::Loop)
                && f.depth as u32 == depth
                && f.indices == NONE16
                && f.ext <= extent.max(0) as u64
                && self
                    .v
                    .axes()
                    .get(self.rec(f.at).op1() as usize)
                    .is_some_and(|a| {
                        a.opcode == Opcode::AXIS_DENSE as u8
                            || a.opcode == Opcode::AXIS_DENSE_DYN as u8
                    })
        })
    }

    /// After `fill_task` for the site at `pc` (followed by the instruction at `next`), the
    /// `k`-th of the innermost loop at `depth`: copies the record to `templates[k]` and notes
    /// the fields that read the loop's variable — the variable itself as a parameter and its
    /// index as a dimension ([`OPERAND_INDEX`]), written at each iteration, and up to
    /// [`SLOW_FIELDS`] of each kind that read it otherwise, recomputed and checked at each
    /// iteration (`template_of`; false, and nothing kept, for a site with more). The other
    /// fields read only runtime parameters and the variables of the loops around this one,
    /// which keep their values for the whole run of the loop: their values, and the outcome
    /// of their bounds checks, are the same at every iteration.
    pub(super) fn keep_template(&mut self, pc: u32, next: u32, k: usize, depth: u8) -> bool {
        let Some(slot) = self.plan_slot(pc) else {
            return false;
        };
        let plan = &self.plans[slot];
        if k >= TEMPLATES || plan.site != pc || plan.no_template == depth + 1 {
            return false;
        }
        // Slot `k` is free (`kept_slot`), but it may still hold the template this site had
        // in its loop's previous run: one without slow fields depends only on the site and
        // the loop (which fields are the loop's variable), not on the values of the loops
        // around it, and is reused as it is — a loop of one point keeps its record at every
        // task. A template with slow fields is written again: what they fold to depends on
        // those values.
        let t = &mut self.template_of[k];
        let still = t.site == pc && t.depth == depth && !t.slow;
        if !still && template_of(t, self.v.exprs(), &self.p, &self.vars, plan, pc, depth).is_none()
        {
            // Left half written: never reused.
            t.site = EMPTY_TEMPLATE.site;
            self.plans[slot].no_template = depth + 1;
            return false;
        }
        t.next = next;
        self.templates[k].copy_used(&self.task);
        true
    }

    /// The slot of the kept record (`kept`: the slots in use) of the site at `q`, else the
    /// first free slot, else `TEMPLATES` (none: the site is filled in full).
    #[inline]
    pub(super) fn kept_slot(&self, q: u32, kept: u32) -> usize {
        let mut free = TEMPLATES;
        for k in 0..TEMPLATES {
            if kept & 1 << k == 0 {
                free = free.min(k);
            } else if self.template_of[k].site == q {
                return k;
            }
        }
        free
    }

    /// Task `id` of the site whose record `templates[k]` keeps: only the fields that depend
    /// on the loop's variable change. Gives the instruction after the site, or the error
    /// `fill_task` would give.
    #[inline(always)]
    pub(super) fn refill(&mut self, k: usize, id: u64) -> R<u32> {
        let k = k % TEMPLATES;
        let (task, t) = (&mut self.templates[k], &mut self.template_of[k]);
        let v = self.vars[t.depth as usize % limits::MAX_LOOP_DEPTH];
        task.id = id;
        let mut m = t.params;
        while m != 0 {
            task.params[m.trailing_zeros() as usize % limits::MAX_TASK_PARAMS] = v;
            m &= m - 1;
        }
        for &[io, dim] in t.dims.iter().take(t.ndims as usize) {
            task.io[io as usize % limits::MAX_TASK_IO].ranges[dim as usize % limits::MAX_RANK] =
                (v, v + 1);
        }
        if t.slow {
            match t.clamps {
                NOT_CLAMPS => recompute(task, t, self.v.exprs(), &self.p, &self.vars)?,
                // (Stretches given up: `i / 2`.)
                CLAMPS_DIVIDING => recompute_clamps::<true>(task, t, v)?,
                _ => clamps_or_linear(task, t, v)?,
            }
        }
        Ok(t.next)
    }

    /// The plan slot holding the site at `pc`, if one does: its own slot first.
    #[inline]
    pub(super) fn plan_slot(&self, pc: u32) -> Option<usize> {
        let own = pc as usize % PLAN_SITES;
        if self.plans[own].site == pc {
            return Some(own);
        }
        self.plans.iter().position(|p| p.site == pc)
    }

    /// A new plan's slot: the site's own if it is empty, else the round robin's next.
    pub(super) fn plan_victim(&mut self, pc: u32) -> usize {
        let own = pc as usize % PLAN_SITES;
        if self.plans[own].site == EMPTY_PLAN.site {
            return own;
        }
        let slot = self.plan_next as usize % PLAN_SITES;
        self.plan_next = ((slot + 1) % PLAN_SITES) as u8;
        slot
    }

    pub(super) fn fill_task(&mut self, pc: u32, r: Record, id: u64) -> R<()> {
        let slot = match self.plan_slot(pc) {
            Some(slot) => slot,
            None => match self.make_plan(pc, r) {
                Some(plan) => {
                    let slot = self.plan_victim(pc);
                    self.plans[slot] = plan;
                    slot
                }
                None => return self.fill_task_decoding(pc, r, id),
            },
        };
        let Interpreter {
            v,
            p,
            vars,
            task,
            plans,
            ..
        } = self;
        let plan = &plans[slot];
        let exprs = v.exprs();
        task.id = id;
        task.kernel = plan.kernel;
        task.pool = plan.pool;
        task.tier = plan.tier;
        task.site = pc;
        task.nparams = plan.nparams;
        task.nio = plan.nio;
        let np = plan.nparams as usize;
        if plan.vars_only {
            for (dst, &d) in task.params.iter_mut().zip(&plan.param_depths[..np]) {
                *dst = vars[d as usize % limits::MAX_LOOP_DEPTH];
            }
        } else {
            for (i, (dst, o)) in task.params.iter_mut().zip(&plan.params[..np]).enumerate() {
                *dst = operand(o, exprs, p, vars, pc + 1 + i as u32)?;
            }
        }
        for (io, pio) in task.io.iter_mut().zip(&plan.ios[..plan.nio as usize]) {
            io.tensor = pio.tensor;
            io.dir = pio.dir;
            io.ndims = pio.ndims;
        }
        if plan.index_only {
            for &[io, dim, depth] in &plan.index_dims[..plan.ndims as usize] {
                let v = vars[depth as usize % limits::MAX_LOOP_DEPTH];
                task.io[io as usize % limits::MAX_TASK_IO].ranges
                    [dim as usize % limits::MAX_RANK] = (v, v + 1);
            }
            return Ok(());
        }
        // The named dimensions of all regions, in one pass (each knows its region and place).
        for pd in &plan.dims[..plan.ndims as usize] {
            let range = &mut task.io[pd.io as usize % limits::MAX_TASK_IO].ranges
                [pd.dim as usize % limits::MAX_RANK];
            if pd.start.kind == OPERAND_INDEX {
                let v = vars[pd.start.a as usize % limits::MAX_LOOP_DEPTH];
                *range = (v, v + 1);
                continue;
            }
            let opc = pc + 1 + np as u32 + pd.io as u32;
            let (start, end) = dim_range(pd, exprs, p, vars, opc)?;
            if start < 0 || end < start || end > pd.extent {
                let tensor = task.io[pd.io as usize % limits::MAX_TASK_IO].tensor;
                return Err(region_error(opc, tensor, pd.dim, start, end, pd.extent));
            }
            *range = (start, end);
        }
        Ok(())
    }

    /// Emission for a task site too large for a plan: decodes its records at every task.
    pub(super) fn fill_task_decoding(&mut self, pc: u32, r: Record, id: u64) -> R<()> {
        let np = (r.op2() & 0xFFFF) as usize;
        let nio = (r.op2() >> 16) as usize;
        let k = self
            .v
            .kernels()
            .get(r.op1() as usize)
            .copied()
            .unwrap_or_default();
        self.task.id = id;
        self.task.kernel = r.op1();
        self.task.pool = k.pool;
        self.task.tier = r.flags;
        self.task.site = pc;
        self.task.nparams = np as u8;
        self.task.nio = nio as u8;
        for i in 0..np.min(limits::MAX_TASK_PARAMS) {
            let opc = pc + 1 + i as u32;
            let o = self.rec(opc);
            self.task.params[i] = match Opcode::from_u8(o.opcode) {
                Some(Opcode::PARAM_CONST) => o.op2() as i32 as i64,
                Some(Opcode::PARAM_LOOPVAR) => self.vars[o.op1() as usize % limits::MAX_LOOP_DEPTH],
                _ => self.eval(o.op2(), opc)?,
            };
        }
        let regions = self.v.regions();
        for j in 0..nio.min(limits::MAX_TASK_IO) {
            let opc = pc + 1 + (np + j) as u32;
            let o = self.rec(opc);
            let tensor = o.op1();
            let Some(t) = self.v.tensors().get(tensor as usize) else {
                continue;
            };
            let declared = t.flags.get() & TENSOR_IMPLICIT == 0;
            // Only the dimensions the task names are materialised; the others are whole.
            let ndims = (o.flags as usize).min(limits::MAX_RANK);
            // IO_INPUT, IO_OUTPUT, IO_INOUT are 0x23..0x25 and `Dir` is 1..3.
            let dir = o
                .opcode
                .wrapping_sub(Opcode::IO_INPUT as u8 - Dir::In as u8)
                & 3;
            {
                let io = &mut self.task.io[j];
                io.tensor = tensor;
                io.dir = dir;
                io.ndims = ndims as u8;
            }
            let first = o.op2() as usize;
            for d in 0..ndims {
                let rd = regions.get(first + d).copied().unwrap_or_default();
                let start = self.eval(rd.start.get() as u32, opc)?;
                let end = if rd.end.get() == NONE16 {
                    start.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
                } else {
                    self.eval(rd.end.get() as u32, opc)?
                };
                if start < 0 || end < start {
                    return Err(RunError::BadRegion {
                        pc: opc,
                        tensor,
                        dim: d as u8,
                        start,
                        end,
                    });
                }
                if declared {
                    let extent = self.dim_extent(t, d);
                    if end > extent {
                        return Err(RunError::RegionBounds {
                            pc: opc,
                            tensor,
                            dim: d as u8,
                            start,
                            end,
                            extent,
                        });
                    }
                }
                self.task.io[j].ranges[d] = (start, end);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::interp::fold::tests::{config, node, spread_offset, stencil_bounds};
    use crate::params::Value;
    use proptest::prelude::*;
    use std::{vec, vec::Vec};

    /// A record of one task site with `params` parameters and one region of one dimension,
    /// each field an expression of `exprs` starting where it says (`end` `None`: the start
    /// plus one), checked against `extent`.
    fn plan_of(params: &[u32], (start, end): (u32, Option<u32>), extent: i64) -> Plan {
        let expr = |a| Operand {
            kind: OPERAND_EXPR,
            a,
            c: 0,
        };
        let mut plan = EMPTY_PLAN;
        plan.nparams = params.len() as u8;
        for (o, &a) in plan.params.iter_mut().zip(params) {
            *o = expr(a);
        }
        plan.nio = 1;
        plan.ndims = 1;
        plan.dims[0] = PlanDim {
            start: expr(start),
            end: end.map_or(
                Operand {
                    kind: OPERAND_NEXT,
                    ..EMPTY_OPERAND
                },
                expr,
            ),
            extent,
            io: 0,
            dim: 0,
        };
        plan
    }

    /// The 1-D stencil's read of `G[t - 1, max(0, i - 1) : min(i + 2, W)]`, `W` = 16: its
    /// stretch at the row's second point is `i - 1 : i + 2` from 1 to 14, where the clamps
    /// are evaluated no more; the first point and the last have their own.
    #[test]
    fn the_stencils_read_has_one_stretch_inside_the_row() {
        let (start, end) = stencil_bounds(node(ExprOp::CONST, 0, 16));
        let e = [start, end].concat();
        let p = RuntimeParams::unchecked(&[]);
        let vars = [0i64; limits::MAX_LOOP_DEPTH];
        let mut t = EMPTY_TEMPLATE;
        let plan = plan_of(&[], (0, Some(6)), 16);
        assert_eq!(template_of(&mut t, &e, &p, &vars, &plan, 7, 1), Some(()));
        assert_eq!((t.clamps, t.linear), (STRETCHING_CLAMPS, NO_STRETCH));
        let mut stretches = Vec::new();
        for v in 0..16 {
            let (mut by_clamps, mut by_either) = (Task::default(), Task::default());
            recompute_clamps::<false>(&mut by_clamps, &t, v).unwrap();
            clamps_or_linear(&mut by_either, &mut t, v).unwrap();
            assert_eq!(by_clamps.io[0].ranges[0], by_either.io[0].ranges[0], "{v}");
            if stretches.last() != Some(&t.linear) {
                stretches.push(t.linear);
            }
            if v == 1 {
                assert_eq!(t.linear_dims[0], (-1, 2));
                assert_eq!(t.linear_masks[SLOW_FIELDS..SLOW_FIELDS + 2], [-1, -1]);
            }
        }
        // At 0, `0 : i + 2` (the clamp's constant piece; its end within `W` up to 14, and
        // not below its start from -2); at 15, `i - 1 : 16`.
        assert_eq!(stretches, [(-2, 0), (1, 14), (15, 17)]);
    }

    /// `max(i + t, 0) + 3` with `t = i64::MAX - 5`: `i + t` fits up to `i = 5`, the sum
    /// only up to `i = 2`. The stretch found at 0 ends at 2, and the evaluation fails from 3
    /// on, as the expression does.
    #[test]
    fn a_stretch_ends_where_its_last_addition_overflows() {
        let e = [
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::VAR, 0, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::CONST, 0, 0),
            node(ExprOp::MAX, 0, 0),
            node(ExprOp::CONST, 0, 3),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::END, 0, 0),
            // The region `G[i + 0]`, a clamp too.
            node(ExprOp::VAR, 1, 0),
            node(ExprOp::CONST, 0, 0),
            node(ExprOp::ADD, 0, 0),
            node(ExprOp::END, 0, 0),
        ];
        let p = RuntimeParams::unchecked(&[]);
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        vars[0] = i64::MAX - 5;
        let mut t = EMPTY_TEMPLATE;
        let plan = plan_of(&[0], (8, None), 100);
        assert_eq!(template_of(&mut t, &e, &p, &vars, &plan, 7, 1), Some(()));
        assert_eq!(t.clamps, STRETCHING_CLAMPS);
        let mut task = Task::default();
        assert_eq!(clamps_or_linear(&mut task, &mut t, 0), Ok(()));
        assert_eq!(t.linear.1, 2);
        for v in 1..8 {
            let mut by_clamps = Task::default();
            let want = recompute_clamps::<false>(&mut by_clamps, &t, v);
            assert_eq!(clamps_or_linear(&mut task, &mut t, v), want, "{v}");
            assert_eq!(want.is_ok(), v <= 2, "{v}");
            if want.is_ok() {
                assert_eq!(task.params[0], by_clamps.params[0], "{v}");
            }
        }
    }

    /// A clamp `(min(max(i + a, lo), hi) + b) op d` of the loop's variable `i` (depth 1),
    /// `op` a division, a remainder or a division rounding up, each of its steps there or
    /// not; its constants small, or the variable at depth 0 (set to the extremes of an `i64`
    /// by the test) or its negation.
    fn arb_clamp() -> impl Strategy<Value = Vec<Record>> {
        let constant = prop_oneof![
            (-20i32..20).prop_map(|c| vec![node(ExprOp::CONST, 0, c as u32)]),
            Just(vec![node(ExprOp::VAR, 0, 0)]),
            Just(vec![node(ExprOp::VAR, 0, 0), node(ExprOp::NEG, 0, 0)]),
        ];
        let step = |ops: Vec<ExprOp>| {
            (
                prop::option::of(constant.clone()),
                prop::sample::select(ops),
            )
        };
        let division = prop::option::of((
            prop_oneof![
                (-3i32..8).prop_map(|c| vec![node(ExprOp::CONST, 0, c as u32)]),
                Just(vec![node(ExprOp::VAR, 0, 0)]),
            ],
            prop::sample::select(vec![ExprOp::DIV, ExprOp::MOD, ExprOp::CEILDIV]),
        ));
        (
            step(vec![ExprOp::ADD, ExprOp::SUB]),
            step(vec![ExprOp::MAX]),
            step(vec![ExprOp::MIN]),
            step(vec![ExprOp::ADD, ExprOp::SUB]),
            division,
        )
            .prop_map(|steps| {
                let mut e = vec![node(ExprOp::VAR, 1, 0)];
                let (k, op) = steps.4.map_or((None, ExprOp::DIV), |(k, op)| (Some(k), op));
                for (k, op) in [steps.0, steps.1, steps.2, steps.3, (k, op)] {
                    if let Some(k) = k {
                        e.extend(k);
                        e.push(node(op, 0, 0));
                    }
                }
                e.push(node(ExprOp::END, 0, 0));
                e
            })
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// A record whose slow fields are all clamps writes, at every value of its loop's
        /// variable, taken in any order, what `recompute_clamps` writes: through the stretch
        /// found at an earlier value where it holds the value (where the evaluation never
        /// fails), else by the evaluation, errors included.
        #[test]
        fn a_stretch_writes_what_recompute_writes(
            param in prop::option::of(arb_clamp()),
            start in arb_clamp(),
            end in prop::option::of(arb_clamp()),
            extent in prop::sample::select(vec![0i64, 1, 5, 16, 40, i64::MAX]),
            outer in prop::sample::select(vec![
                0i64, 3, 1 << 40, i64::MAX, i64::MIN, i64::MAX - 5, i64::MIN + 5,
            ]),
            jumps in prop::collection::vec(-60i64..60, 0..20),
        ) {
            let mut e = Vec::new();
            let mut at = |x: &[Record]| {
                let a = e.len() as u32;
                e.extend_from_slice(x);
                a
            };
            let params: Vec<u32> = param.iter().map(|x| at(x)).collect();
            let dim = (at(&start), end.as_deref().map(&mut at));
            let plan = plan_of(&params, dim, extent);
            let p = RuntimeParams::unchecked(&[]);
            let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
            vars[0] = outer;
            let mut t = EMPTY_TEMPLATE;
            prop_assert_eq!(template_of(&mut t, &e, &p, &vars, &plan, 7, 1), Some(()));
            prop_assume!(t.clamps != NOT_CLAMPS);
            let extremes = [i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1, 0, 1];
            // (Under Miri, fewer values in a row.)
            let row = if cfg!(miri) { -8..8 } else { -45..45 };
            let values = row.chain(jumps).chain(extremes);
            for v in values {
                let (mut by_clamps, mut by_either) = (Task::default(), Task::default());
                let want = recompute_clamps::<true>(&mut by_clamps, &t, v);
                let inside = (t.linear.0..=t.linear.1).contains(&v);
                let got = clamps_or_linear(&mut by_either, &mut t, v);
                prop_assert_eq!(got, want, "at {}", v);
                if inside {
                    prop_assert_eq!(want, Ok(()), "at {}", v);
                }
                if want.is_ok() {
                    prop_assert_eq!(by_clamps.params, by_either.params, "at {}", v);
                    prop_assert_eq!(by_clamps.io[0].ranges[0], by_either.io[0].ranges[0], "at {}", v);
                }
            }
        }
    }

    /// `template_of` writes into the slot's template, which still holds what the loop's
    /// previous entry put there: it drops what that entry folded, so a field folds again
    /// however often the loop is entered — a loop of one point enters at every task.
    #[test]
    fn a_template_rewritten_at_every_entry_folds_every_time() {
        // spread's offset as task parameter 0, folded for its loop at depth 1.
        let e = spread_offset();
        let slots = [Value::Scalar(1000), Value::Scalar(3)];
        let p = RuntimeParams::unchecked(&slots);
        let mut plan = EMPTY_PLAN;
        plan.nparams = 1;
        plan.params[0] = Operand {
            kind: OPERAND_EXPR,
            a: 0,
            c: 0,
        };
        let mut vars = [0i64; limits::MAX_LOOP_DEPTH];
        let mut t = EMPTY_TEMPLATE;
        for entry in 0..2 * FOLDED_NODES as i64 {
            vars[0] = entry;
            assert_eq!(template_of(&mut t, &e, &p, &vars, &plan, 7, 1), Some(()));
            // (`(i + 333 + t % 3) % 1000` folded for the entry: a clamp, five nodes.)
            assert_eq!(
                (t.nslow_params, t.nfolded, t.slow, t.clamps),
                (1, CLAMP_NODES as u8, true, STRETCHING_CLAMPS_DIVIDING),
                "{entry}"
            );
            assert_eq!(t.slow_params[0].1.kind, OPERAND_CLAMP, "{entry}");
            let o = t.slow_params[0].1;
            assert_eq!(
                slow_value(&t, &o, 999, &e, &p, &vars, 7),
                Ok((999 + 333 + entry % 3) % 1000),
                "{entry}"
            );
        }
    }
}

//! Which tensors cross AICPUs (spec/runtime.md §3.5): a launch-time analysis of the verified
//! program, its runtime parameters and the AICPU count, that every AICPU computes alike and
//! the scheduler uses to record most accesses without waiting for the others.
//!
//! Each tensor gets a [`Class`]:
//!
//! - **read-only**: no task site writes it. Its accesses make no dependency (every edge needs a
//!   write), so they are not recorded at all (weights).
//! - **local**: every site that accesses it names dimension 0 by a single index whose
//!   expression is the site's dispatch key (`affinity(key)`, or `hash(key)`, the same kind at
//!   every site) — or, under `static(v)`, is `v` itself, with every site's `v` looping over the
//!   same dense axis — or there is one AICPU. Two accesses that overlap have the same index
//!   there, so the same owner: the tensor's dependencies never cross AICPUs, and each AICPU
//!   keeps its accesses in a map of its own, in its own id order.
//! - **shared**: anything else, in the global map. With it come two task-id bounds: no task
//!   with id ≥ `writes_end` writes the tensor, none with id ≥ `accesses_end` accesses it. They
//!   are the ends of the top-level statements holding its last writing and last accessing site
//!   (top-level statements run one after another, so their tasks' ids are contiguous ranges).
//!
//! Independently, a tensor is **loop-indexed** when every site names it by exactly the variables
//! of the loops around it (`x[i, j]` inside `i` ⊃ `j`): overlapping accesses then run in site
//! order, so [`use_of`] skips the lookup of its first accesses and the record of reads no later
//! site writes.
//!
//! `tests/tests/share.rs` checks the classes of the bundled examples and, over random programs,
//! that no reference edge joins two AICPUs' accesses of a local tensor, that the bounds hold, and
//! that no access [`use_of`] does not look up (record) conflicts with an earlier (later) one.

use crate::format::{limits, PolicySpec, COND_HAS_ELSE, NONE16};
use crate::interp::{Interpreter, RunError};
use crate::opcodes::{Dir, OpClass, Opcode, Policy};
use crate::tmap::{Storage, TensorMap, Use};
use core::cell::Cell;

/// How the scheduler records a tensor's accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Class {
    /// Never written: not recorded.
    #[default]
    ReadOnly,
    /// Never crosses AICPUs: the AICPU's own map, no waiting.
    Local,
    /// The global map, after the other AICPUs have recorded what may conflict.
    Shared,
}

/// What the analysis found for one tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Its class.
    pub class: Class,
    /// No task with this id or above writes it (0 when nothing does).
    pub writes_end: u64,
    /// No task with this id or above accesses it.
    pub accesses_end: u64,
    /// Whether every site that accesses it names it `x[v0, v1, …]` by exactly the variables
    /// of the loops around the site, outermost first, each loop running over an axis whose
    /// values are its iteration indices (spec/runtime.md §3.5). Two accesses of different
    /// sites that overlap then run in the order of their sites, and two of one site belong to
    /// one task.
    pub loop_indexed: bool,
    /// The first site (instruction index of its `TASK`) that accesses it.
    pub first_site: u32,
    /// The first site that writes it (0 if none).
    pub first_write_site: u32,
    /// The last site that writes it (0 if none).
    pub last_write_site: u32,
    /// Whether its producers are named by the program's structure (spec/runtime.md §3.6): it
    /// is loop-indexed and local, and all its sites are statements of one loop body made of
    /// `TASK` statements only, at most [`CHAIN_SPAN`] of them. Its accesses then go to no map:
    /// [`chain`] gives each task's predecessors from their distance in ids.
    pub chained: bool,
    /// Whether it is carried by a loop (§3.7): local; the sites in the body of one loop `L`
    /// (made of at most `CHAIN_SPAN − 1` `TASK` statements, one of them writing it) name it
    /// by exactly the variables of the loops around `L`, so every iteration of `L` accesses
    /// one element; every other site names it by exactly the variables of the loops around
    /// it, and those before `L` name at least as many dimensions. Only `L`'s first iteration
    /// looks it up and its last records it; the rest follows from [`chain`].
    pub carried: bool,
    /// Whether it is **stepped** by an outermost loop `L` (spec/runtime.md §3.5): every site
    /// that accesses it is inside `L`, a loop over a dense or dynamic axis outside every
    /// other loop (so it runs once, its iterations in id order); every write names dimension
    /// 0 by exactly `L`'s variable `t`, every read by the single index `t − c`, `c ≥ 1`. A
    /// later write then writes a row no earlier read reads: reads are only looked up.
    pub stepped: bool,
    /// Whether it is stepped and **written once**: every write names it `x[t, v1, …]` by
    /// exactly the variables of the loops around the site (each over an axis whose values are
    /// its iteration indices), and any two writing sites lie in the two blocks of one `COND`.
    /// No two tasks then write one element, and no read comes before the write of what it
    /// reads: writes are only inserted.
    pub written_once: bool,
    /// For a chained tensor: the instruction index of the loop whose body holds every site
    /// that accesses it. For a carried one: its loop `L`.
    pub body: u32,
    /// During the walk: how every access was keyed so far (0: none yet; the policy kind, for
    /// `static` its loop's axis, and the dimension the key names); `UNKEYED` once one access
    /// was not.
    keyed: u32,
    /// During the walk: whether an access (a write) was seen, and one that did not name the
    /// tensor by its loops' variables.
    seen: bool,
    wrote: bool,
    unindexed: bool,
    /// During the walk: two sites sit in different loop bodies (or one outside every loop).
    scattered: bool,
    /// During the walk: the innermost loop of the first site that names it by the variables
    /// of all but that loop (the candidate `L` of a carried tensor), or `u32::MAX`.
    carry: u32,
    /// During the walk: the outermost loop of its first site (the candidate `L` of a stepped
    /// tensor), and whether an access broke the stepped rule.
    step_loop: u32,
    unstepped: bool,
}

/// The most `TASK` statements a loop body holding a chained tensor may have (§3.6): distances
/// between two of its tasks are below it, so a task's structural producers fit a `u64` mask,
/// and a scheduler remembers the slots of its last `CHAIN_SPAN` tasks.
pub const CHAIN_SPAN: u32 = 64;

const UNKEYED: u32 = u32::MAX;
/// Where `Sharing::keyed` holds the dimension its key names (below: the policy kind, and for
/// `static` its loop's axis + 1 from bit 8: below bit 21, `limits::MAX_AXES` being 4,096).
const KEY_DIM_SHIFT: u32 = 24;

/// Whether two expressions of the pool are the same node for node (so they have the same
/// value wherever both are evaluated).
fn same_expr(v: &crate::Verified<'_>, a: u16, b: u16) -> bool {
    let e = v.exprs();
    let (a, b) = (a as usize, b as usize);
    for k in 0..limits::MAX_EXPR_LEN {
        match (e.get(a + k), e.get(b + k)) {
            (Some(x), Some(y)) if x == y => {
                if x.opcode == crate::ExprOp::END as u8 {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

/// Whether expression `e` is exactly the loop variable at `depth`.
fn is_var(v: &crate::Verified<'_>, e: u16, depth: u8) -> bool {
    let x = v.exprs();
    let (a, b) = (x.get(e as usize), x.get(e as usize + 1));
    a.is_some_and(|r| r.opcode == crate::ExprOp::VAR as u8 && r.op1() == depth as u16)
        && b.is_some_and(|r| r.opcode == crate::ExprOp::END as u8)
}

/// Whether expression `e` is exactly the loop variable at `depth` minus a constant `c ≥ 1`
/// (`t - 1`).
fn is_var_before(v: &crate::Verified<'_>, e: u16, depth: u8) -> bool {
    let x = v.exprs();
    let node = |k: usize| x.get(e as usize + k);
    node(0).is_some_and(|r| r.opcode == crate::ExprOp::VAR as u8 && r.op1() == depth as u16)
        && node(1).is_some_and(|r| r.opcode == crate::ExprOp::CONST as u8 && r.op2() as i32 >= 1)
        && node(2).is_some_and(|r| r.opcode == crate::ExprOp::SUB as u8)
        && node(3).is_some_and(|r| r.opcode == crate::ExprOp::END as u8)
}

/// Whether region record `io` (an `IO_*`) names exactly `n` dimensions, dimension `d` by the
/// bare variable of the loop at depth `d`, and each of those loops runs over an axis
/// (`axis(d)`) whose values are its iteration indices.
fn named_by_loops(
    v: &crate::Verified<'_>,
    io: &crate::format::Record,
    n: usize,
    axis: impl Fn(usize) -> u16,
) -> bool {
    let regions = v.regions();
    io.flags as usize == n
        && (0..n).all(|d| {
            indexed_axis(v, axis(d))
                && regions
                    .get(io.op2() as usize + d)
                    .is_some_and(|r| r.end.get() == NONE16 && is_var(v, r.start.get(), d as u8))
        })
}

/// Whether a loop over `axis` gives its variable the iteration indices 0, 1, … (dense,
/// dynamic and ragged axes; a sparse axis gives the stored column indices, which may repeat).
fn indexed_axis(v: &crate::Verified<'_>, axis: u16) -> bool {
    v.axes().get(axis as usize).is_some_and(|a| {
        a.opcode == Opcode::AXIS_DENSE as u8
            || a.opcode == Opcode::AXIS_DENSE_DYN as u8
            || a.opcode == Opcode::AXIS_RAGGED as u8
            || a.opcode == Opcode::AXIS_RAGGED_ROW as u8
            || a.opcode == Opcode::AXIS_TILE as u8
    })
}

/// For a dense or dynamic axis (whose values are the iteration indices and whose extent does
/// not depend on loop variables): the first axis of the table equal to it, so two loops over
/// equal axes compare equal.
fn dense_axis(v: &crate::Verified<'_>, axis: u16) -> Option<u16> {
    let axes = v.axes();
    let a = axes.get(axis as usize)?;
    if a.opcode != Opcode::AXIS_DENSE as u8 && a.opcode != Opcode::AXIS_DENSE_DYN as u8 {
        return None;
    }
    axes.iter().position(|b| b == a).map(|i| i as u16)
}

/// The end (exclusive instruction index) of the statement at `pc`.
fn statement_end(v: &crate::Verified<'_>, pc: u32) -> u32 {
    let code = v.code();
    let r = code[pc as usize];
    match Opcode::from_u8(r.opcode).map(|o| o.class()) {
        Some(OpClass::Task) => pc + 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16),
        Some(OpClass::Loop) => r.op2(),
        Some(OpClass::Block) if r.opcode == Opcode::COND as u8 && r.flags & COND_HAS_ELSE != 0 => {
            code.get(r.op2() as usize).map_or(r.op2(), |e| e.op2())
        }
        Some(OpClass::Block) => r.op2(),
        _ => pc + 1,
    }
}

/// Why the analysis failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// Counting a statement's tasks failed (the run would fail the same way).
    #[error(transparent)]
    Run(#[from] RunError),
    /// `out` has fewer entries than the program has tensors.
    #[error("{got} tensor classes for {need} tensors")]
    Short {
        /// Tensors of the program.
        need: usize,
        /// Entries given.
        got: usize,
    },
}

/// Classifies every tensor of `interp`'s program into `out` (one entry per tensor, at least
/// as many as the program has). `interp` gives the program, its runtime parameters (task
/// counts), the AICPU count and the module's dispatch policy (a threshold's selected level);
/// it is not advanced. Every AICPU of a launch computes the same result.
pub fn analyze(interp: &Interpreter<'_, '_>, out: &mut [Sharing]) -> Result<(), ShareError> {
    let v = interp.program();
    let tensors = v.tensors().len();
    let got = out.len();
    let out = out
        .get_mut(..tensors)
        .ok_or(ShareError::Short { need: tensors, got })?;
    out.fill(Sharing::default());
    let module = interp.module_policy();
    let mut counter = interp.clone();
    let code = v.code();
    let last = code.len() as u32 - 1; // the HALT
    let regions = v.regions();
    let mut filters = [(0u32, PolicySpec::default()); limits::MAX_NESTING + 1];
    let mut nf = 0;
    // The enclosing loops: their ends, axes and instruction indices.
    let mut loops = [(0u32, 0u16, 0u32); limits::MAX_LOOP_DEPTH];
    let mut nl = 0;
    let (mut top_end, mut ids_end) = (0u32, 0u64);
    let mut pc = 0u32;
    while pc < last {
        while nf > 0 && filters[nf - 1].0 <= pc {
            nf -= 1;
        }
        while nl > 0 && loops[nl - 1].0 <= pc {
            nl -= 1;
        }
        if pc >= top_end {
            // A top-level statement: its tasks are the next contiguous range of ids.
            top_end = statement_end(v, pc).min(last);
            let n = counter.count_top(pc, top_end)?;
            ids_end = ids_end.checked_add(n).ok_or(RunError::TooManyTasks)?;
        }
        let r = code[pc as usize];
        if Opcode::from_u8(r.opcode).map(|o| o.class()) == Some(OpClass::Loop) && nl < loops.len() {
            loops[nl] = (r.op2(), r.op1(), pc);
            nl += 1;
        }
        if r.opcode == Opcode::DISPATCH_FILTER as u8 && nf < filters.len() {
            let kind = r.flags;
            let keyed = kind == Policy::Affinity as u8 || kind == Policy::Hash as u8;
            filters[nf] = (
                r.op2(),
                PolicySpec {
                    kind,
                    depth: if kind == Policy::StaticPartition as u8 {
                        r.op1() as u8
                    } else {
                        0
                    },
                    key: if keyed { r.operand1 } else { NONE16.into() },
                },
            );
            nf += 1;
        }
        if r.opcode != Opcode::TASK as u8 {
            pc += 1;
            continue;
        }
        let (params, ios) = (r.op2() & 0xFFFF, r.op2() >> 16);
        let policy = if nf > 0 { filters[nf - 1].1 } else { module };
        // How this site's owner follows from a region's dimension-0 index, if it does: the key
        // itself (affinity, hash), or, for a static partition, the index of the deciding loop
        // over a dense axis (the same axis everywhere, so the same blocks).
        let key = if policy.kind == Policy::Affinity as u8 || policy.kind == Policy::Hash as u8 {
            Some((policy.kind as u32, policy.key.get(), None))
        } else if policy.kind == Policy::StaticPartition as u8 {
            loops[..nl]
                .get(policy.depth as usize)
                .and_then(|&(_, axis, _)| dense_axis(v, axis))
                .map(|a| {
                    (
                        policy.kind as u32 | (a as u32 + 1) << 8,
                        NONE16,
                        Some(policy.depth),
                    )
                })
        } else {
            None
        };
        for k in 0..ios {
            let io = code[(pc + 1 + params + k) as usize];
            let Some(dir) = Opcode::from_u8(io.opcode).and_then(Dir::of_io) else {
                continue;
            };
            let Some(s) = out.get_mut(io.op1() as usize) else {
                continue;
            };
            s.accesses_end = ids_end;
            if dir != Dir::In {
                s.writes_end = ids_end;
                s.last_write_site = pc;
                if !s.wrote {
                    s.first_write_site = pc;
                    s.wrote = true;
                }
            }
            // The loop whose body holds the site directly.
            let body = if nl > 0 { loops[nl - 1].2 } else { u32::MAX };
            let outermost = if nl > 0 { loops[0].2 } else { u32::MAX };
            if !s.seen {
                s.first_site = pc;
                s.body = body;
                s.carry = u32::MAX;
                s.step_loop = outermost;
                s.seen = true;
            }
            if s.carry == u32::MAX && nl > 0 && io.flags as usize + 1 == nl {
                s.carry = body;
            }
            // Stepped by the outermost loop `L` around its first site? Every access inside
            // `L` (a loop over a dense or dynamic axis), its dimension 0 a single index:
            // `L`'s variable for a write, that variable minus a constant `c ≥ 1` for a read.
            let dim0 = regions.get(io.op2() as usize).filter(|_| io.flags >= 1);
            s.unstepped |= nl == 0
                || outermost != s.step_loop
                || dense_axis(v, loops[0].1).is_none()
                || !dim0.is_some_and(|d| {
                    d.end.get() == NONE16
                        && if dir == Dir::In {
                            is_var_before(v, d.start.get(), 0)
                        } else {
                            is_var(v, d.start.get(), 0)
                        }
                });
            s.scattered |= body != s.body || body == u32::MAX;
            // Named by the variables of the loops around the site, outermost first?
            s.unindexed |= !named_by_loops(v, &io, nl, |d| loops[d].1);
            // The first dimension the site names by a single index that is its key: the
            // owner follows from it. Every site must use the same dimension (and the same kind
            // of key): two accesses that overlap then have the same index there.
            let by_key = key.and_then(|(k, expr, depth)| {
                (0..(io.flags as u32).min(limits::MAX_RANK as u32)).find_map(|dim| {
                    regions.get((io.op2() + dim) as usize).and_then(|d| {
                        let keyed = d.end.get() == NONE16
                            && match depth {
                                None => same_expr(v, d.start.get(), expr),
                                Some(depth) => is_var(v, d.start.get(), depth),
                            };
                        keyed.then_some(k | dim << KEY_DIM_SHIFT)
                    })
                })
            });
            s.keyed = match (by_key, s.keyed) {
                (Some(k), 0) => k,
                (Some(k), was) if was == k => k,
                _ => UNKEYED,
            };
        }
        pc += 1 + params + ios;
    }
    let one = interp.aicpus() == 1;
    for s in out.iter_mut() {
        s.loop_indexed = s.seen && !s.unindexed;
        s.stepped = s.seen && !s.unstepped;
        // `writes_end == 0`: no task writes it (not even a site whose statement runs no task).
        s.class = if s.writes_end == 0 {
            Class::ReadOnly
        } else if one || s.keyed != UNKEYED {
            Class::Local
        } else {
            Class::Shared
        };
        s.chained = s.class == Class::Local
            && s.loop_indexed
            && !s.scattered
            && simple_body(v, s.body).is_some_and(|n| n <= CHAIN_SPAN);
    }
    for (x, s) in out.iter_mut().enumerate() {
        s.written_once = s.stepped && written_once(v, x as u16);
        s.carried = s.class == Class::Local
            && !s.loop_indexed
            && s.carry != u32::MAX
            && simple_body(v, s.carry).is_some_and(|n| n < CHAIN_SPAN)
            && carried_by(v, x as u16, s.carry);
        if s.carried {
            s.body = s.carry;
        }
    }
    Ok(())
}

/// Whether every site that accesses tensor `x` names it as a tensor carried by the loop at
/// `l` requires (§3.7), and one in `l`'s body writes it: those in `l`'s body by exactly the
/// variables of the loops around `l`, every other one by exactly the variables of the loops
/// around it — all those loops over axes whose values are their iteration indices — and
/// those before `l` by at least as many dimensions.
fn carried_by(v: &crate::Verified<'_>, x: u16, l: u32) -> bool {
    let code = v.code();
    let last = code.len() as u32 - 1;
    let mut loops = [(0u32, 0u16, 0u32); limits::MAX_LOOP_DEPTH];
    let mut nl = 0;
    let mut outer = usize::MAX; // the number of loops around `l`
    let mut writes = false;
    let mut pc = 0u32;
    while pc < last {
        while nl > 0 && loops[nl - 1].0 <= pc {
            nl -= 1;
        }
        let r = code[pc as usize];
        if Opcode::from_u8(r.opcode).map(|o| o.class()) == Some(OpClass::Loop) {
            if pc == l {
                outer = nl;
            }
            if nl < loops.len() {
                loops[nl] = (r.op2(), r.op1(), pc);
                nl += 1;
            }
        }
        if r.opcode != Opcode::TASK as u8 {
            pc += 1;
            continue;
        }
        let (ios, next) = task_ios(code, pc, r);
        let inside = nl > 0 && loops[nl - 1].2 == l;
        for io in ios {
            if io.op1() != x {
                continue;
            }
            let Some(dir) = Opcode::from_u8(io.opcode).and_then(Dir::of_io) else {
                return false;
            };
            // The loops whose variables name it: all but `l` inside, all of them outside.
            let named = if inside { nl - 1 } else { nl };
            if !named_by_loops(v, io, named, |d| loops[d].1) {
                return false;
            }
            writes |= inside && dir != Dir::In;
        }
        pc = next;
    }
    writes && outer != usize::MAX && named_before_at_least(v, x, l, outer)
}

/// The most sites that may write a tensor [`written_once`] accepts (Task Bench's patterns have
/// two: the first step's and the others', the blocks of one `COND`).
const MAX_ONCE_WRITERS: usize = 8;

/// Whether every site that writes tensor `x` names it by exactly the variables of the loops
/// around the site, each loop over an axis whose values are its iteration indices, and every
/// two of those sites are exclusive (`in_other_blocks`), so that no two tasks write one
/// element: two runs of one site differ in some loop's iteration, so in the dimension that
/// loop's variable names; two exclusive sites that run both do so in different iterations of
/// a loop around their `COND`, which both name by its variable.
fn written_once(v: &crate::Verified<'_>, x: u16) -> bool {
    let code = v.code();
    let last = code.len() as u32 - 1;
    let mut loops = [(0u32, 0u16); limits::MAX_LOOP_DEPTH];
    let mut nl = 0;
    let mut writers = [0u32; MAX_ONCE_WRITERS];
    let mut nw = 0;
    let mut pc = 0u32;
    while pc < last {
        while nl > 0 && loops[nl - 1].0 <= pc {
            nl -= 1;
        }
        let r = code[pc as usize];
        if Opcode::from_u8(r.opcode).map(|o| o.class()) == Some(OpClass::Loop) && nl < loops.len() {
            loops[nl] = (r.op2(), r.op1());
            nl += 1;
        }
        if r.opcode != Opcode::TASK as u8 {
            pc += 1;
            continue;
        }
        let (ios, next) = task_ios(code, pc, r);
        for io in ios {
            let dir = Opcode::from_u8(io.opcode).and_then(Dir::of_io);
            if io.op1() != x || dir == Some(Dir::In) {
                continue;
            }
            if !named_by_loops(v, io, nl, |d| loops[d].1) {
                return false;
            }
            if writers[..nw].contains(&pc) {
                continue;
            }
            if nw == writers.len() || !writers[..nw].iter().all(|&w| in_other_blocks(v, w, pc)) {
                return false;
            }
            writers[nw] = pc;
            nw += 1;
        }
        pc = next;
    }
    true
}

/// Whether instructions `a < b` lie in the then block and the else block of one `COND`: one
/// run of the `COND` runs at most one of them.
fn in_other_blocks(v: &crate::Verified<'_>, a: u32, b: u32) -> bool {
    let code = v.code();
    (0..a).any(|c| {
        let r = code[c as usize];
        let then_end = r.op2();
        r.opcode == Opcode::COND as u8
            && r.flags & COND_HAS_ELSE != 0
            && a < then_end
            && then_end < b
            && code.get(then_end as usize).is_some_and(|e| b < e.op2())
    })
}

/// Whether every site of `x` before the loop at `l` names at least `outer` dimensions, so
/// that the first write of each run of the loop covers it. (A site after it may name fewer:
/// it meets the runs' last iterations, which are recorded, and no later run of the loop
/// overlaps it — that run would have the same values of the loops the two share, so it
/// would be the same run.)
fn named_before_at_least(v: &crate::Verified<'_>, x: u16, l: u32, outer: usize) -> bool {
    let code = v.code();
    let mut pc = 0u32;
    while pc < l {
        let r = code[pc as usize];
        if r.opcode != Opcode::TASK as u8 {
            pc += 1;
            continue;
        }
        let (ios, next) = task_ios(code, pc, r);
        if ios
            .iter()
            .any(|io| io.op1() == x && (io.flags as usize) < outer)
        {
            return false;
        }
        pc = next;
    }
    true
}

/// The number of `TASK` statements of the body of the loop at `pc`, if the body holds nothing
/// else (each iteration then runs each of them once, so its tasks have consecutive ids).
fn simple_body(v: &crate::Verified<'_>, pc: u32) -> Option<u32> {
    let code = v.code();
    let r = code.get(pc as usize)?;
    if Opcode::from_u8(r.opcode).map(|o| o.class()) != Some(OpClass::Loop) {
        return None;
    }
    let (mut q, mut n) = (pc + 1, 0);
    while q < r.op2() {
        let t = code.get(q as usize)?;
        if t.opcode != Opcode::TASK as u8 {
            return None;
        }
        n += 1;
        q = task_ios(code, q, *t).1;
    }
    Some(n)
}

/// The `IO_*` records of the `TASK` at `pc` (its record `r`), and the instruction index after
/// them (the next statement).
fn task_ios(
    code: &[crate::format::Record],
    pc: u32,
    r: crate::format::Record,
) -> (&[crate::format::Record], u32) {
    let (params, ios) = (r.op2() & 0xFFFF, r.op2() >> 16);
    let start = pc + 1 + params;
    let ios = code
        .get(start as usize..(start + ios) as usize)
        .unwrap_or(&[]);
    (ios, start + ios.len() as u32)
}

/// Whether the `TASK` at `site` reads, and whether it writes, tensor `x`.
fn access(v: &crate::Verified<'_>, site: u32, x: u16) -> (bool, bool) {
    let code = v.code();
    let Some(&r) = code.get(site as usize) else {
        return (false, false);
    };
    let (mut reads, mut writes) = (false, false);
    for io in task_ios(code, site, r).0 {
        if io.op1() != x {
            continue;
        }
        match Opcode::from_u8(io.opcode).and_then(Dir::of_io) {
            Some(Dir::In) => reads = true,
            Some(Dir::Out) => writes = true,
            Some(Dir::InOut) => (reads, writes) = (true, true),
            None => {}
        }
    }
    (reads, writes)
}

/// What the program's structure says about the tasks of one site (§3.6–3.7), from
/// [`chain`]: the predecessors it names, as masks of distances in ids (bit `d`: task
/// `id − d`, `1 ≤ d < CHAIN_SPAN`), and for each region of a carried tensor (bit `k`: region
/// `k`) what the map does with it in its loop's first and last iterations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    /// Predecessors in the task's own iteration.
    pub within: u64,
    /// Predecessors in the previous iteration of its loop (carried tensors): named unless the
    /// task's iteration is the loop's first.
    pub across: u64,
    /// The regions of carried tensors.
    pub carried: u16,
    /// Of those, the ones looked up in the loop's first iteration (no write of the tensor
    /// before them in an iteration: they meet what came before the loop).
    pub find: u16,
    /// The ones recorded in the loop's last iteration (the body's last write of the tensor
    /// and the reads after it: what comes after the loop meets them).
    pub keep: u16,
}

impl Chain {
    /// The predecessors named for a task whose iteration flags ([`crate::Task::iter`]) are
    /// `iter`.
    #[inline]
    pub fn producers(&self, iter: u8) -> u64 {
        if iter & crate::interp::ITER_FIRST != 0 {
            self.within
        } else {
            self.within | self.across
        }
    }

    /// How region `k` (a carried tensor's: bit `k` of `carried`) of a task whose iteration
    /// flags are `iter` goes to the map: looked up in the first iteration if `find` (a
    /// write's lookup unlinks what came before the loop: the first write of the first
    /// iteration covers all of it), recorded in the last if `keep` (inserted: nothing of the
    /// element is left in the map to cover).
    #[inline]
    pub fn use_of(&self, k: usize, iter: u8) -> Use {
        let bit = 1u16 << (k % 16);
        let lookup = iter & crate::interp::ITER_FIRST != 0 && self.find & bit != 0;
        let record = iter & crate::interp::ITER_LAST != 0 && self.keep & bit != 0;
        match (lookup, record) {
            (true, true) => Use::Record,
            (true, false) => Use::Find,
            (false, true) => Use::Insert,
            (false, false) => Use::Skip,
        }
    }
}

/// What the program's structure says about the tasks of `site` through its chained (§3.6)
/// and carried (§3.7) tensors. For each such tensor the site accesses, walking its loop's
/// body: in the same iteration, the last earlier statement that writes it and, if the site
/// writes it, the statements that read it since; with no write before the site in the
/// iteration, a carried tensor's predecessors continue into the previous iteration (the
/// body's last write and, for a write, the reads after it) or, in the first iteration, are
/// found in the map. These are exactly the predecessors a map would find: every access of the
/// tensor in one iteration (for a carried tensor: in one run of its loop) names the same
/// element, and no other overlaps it.
pub fn chain(v: &crate::Verified<'_>, shares: &[Sharing], site: u32) -> Chain {
    let mut c = Chain::default();
    let code = v.code();
    let Some(&r) = code.get(site as usize) else {
        return c;
    };
    if r.opcode != Opcode::TASK as u8 {
        return c;
    }
    for (k, io) in task_ios(code, site, r).0.iter().enumerate().take(16) {
        let x = io.op1();
        let Some(s) = shares.get(x as usize).filter(|s| s.chained || s.carried) else {
            continue;
        };
        // Positions (in tasks) in the body: the last write before the site and the reads
        // since; the body's last write and the reads after it.
        let end = code.get(s.body as usize).map_or(0, |l| l.op2());
        let (mut q, mut pos, mut at) = (s.body + 1, 0u32, None);
        let (mut last_write, mut reads) = (None, 0u64);
        let (mut body_write, mut tail) = (None, 0u64);
        while q < end && pos < CHAIN_SPAN {
            let Some(t) = code.get(q as usize) else {
                break;
            };
            if q == site {
                at = Some((pos, last_write, reads));
            }
            match access(v, q, x) {
                (_, true) => {
                    (body_write, tail) = (Some(pos), 0);
                    if at.is_none() {
                        (last_write, reads) = (Some(pos), 0);
                    }
                }
                (true, false) => {
                    tail |= 1 << pos;
                    if at.is_none() {
                        reads |= 1 << pos;
                    }
                }
                _ => {}
            }
            pos += 1;
            q = task_ios(code, q, *t).1;
        }
        let Some((p, last_write, reads)) = at else {
            continue;
        };
        let (_, writes) = access(v, site, x);
        let add = |mask: &mut u64, from: u32, bits: u64| {
            let mut b = bits;
            while b != 0 {
                *mask |= 1 << (from - b.trailing_zeros());
                b &= b - 1;
            }
        };
        if let Some(w) = last_write {
            c.within |= 1 << (p - w);
        }
        if writes {
            add(&mut c.within, p, reads);
        }
        if s.carried {
            let bit = 1u16 << k;
            c.carried |= bit;
            let len = pos; // the body's task count (below CHAIN_SPAN)
            if let (None, Some(w)) = (last_write, body_write) {
                // The previous iteration's last write, and for a write the reads after it.
                c.across |= 1 << (p + len - w);
                if writes {
                    add(&mut c.across, p + len, tail);
                }
                c.find |= bit;
            }
            if body_write.is_some_and(|w| p >= w) {
                c.keep |= bit;
            }
        }
    }
    c
}

impl Sharing {
    /// For a local tensor whose owner follows from one dimension's index (§3.5): that
    /// dimension, and whether the key is a static partition's loop index (contiguous blocks
    /// of it per AICPU) rather than an affinity or hash key.
    pub fn key_dimension(&self) -> Option<(u32, bool)> {
        if self.class != Class::Local || self.keyed == 0 || self.keyed == UNKEYED {
            return None;
        }
        let kind = (self.keyed & 0xFF) as u8;
        Some((
            self.keyed >> KEY_DIM_SHIFT,
            kind == Policy::StaticPartition as u8,
        ))
    }
}

/// The dense table (spec/runtime.md §3.3, `TensorMap::set_dense`) a tensor's map gives it, as
/// `(rank, columns)`, among `aicpus` AICPUs: a stepped tensor (§3.5) of rank 1 or 2 writes its
/// rows point by point and reads one earlier row at a time, which a table of its rows answers
/// with a store a write and a load a cell read. Its columns are those one AICPU's map sees of a
/// row: all of them, or, for a local tensor keyed in dimension 1 by a static partition, a
/// block of them (`⌈columns / aicpus⌉`), so that the window's rows in flight fit in the rows.
/// `None` for any other tensor, and for one with no columns.
pub fn dense_table(s: &Sharing, b: &crate::desc::Binding, aicpus: u32) -> Option<(u8, u32)> {
    if !s.stepped || s.class == Class::ReadOnly {
        return None;
    }
    match b.rank {
        1 => Some((1, 1)),
        2 if b.dims[1] > 0 => {
            let cols = match s.key_dimension() {
                Some((1, true)) if aicpus > 1 => b.dims[1].div_ceil(aicpus),
                _ => b.dims[1],
            };
            Some((2, cols))
        }
        _ => None,
    }
}

/// The shape of a **written-once table** (spec/runtime.md §4.8, `sched::once`): a tensor
/// written once (§3.5) whose writers a table of its cells holds, outside the maps (for a
/// shared tensor, outside the global map's lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnceShape {
    /// The tensor's rank: 1 or 2.
    pub rank: u8,
    /// Its columns (dimension 1's extent; 1 for rank 1).
    pub cols: u32,
    /// The largest `c` of its reads of row `t − c` (0 when nothing reads it).
    pub reach: u32,
}

/// The written-once table tensor `x` (its analysis `s`, its binding `b`) may have among
/// `aicpus` AICPUs: a tensor written once of rank 1 or 2 whose every write names exactly its
/// rank's dimensions (a point: `x[t]` or `x[t, i]`) and every read one to its rank's
/// dimensions (row `t − c`, its columns a point or a range, or all of them) — shared, or local
/// with one AICPU, or local keyed in dimension 1 (each column then has one owner, which
/// writes and reads all of its rows). `None` for any other tensor.
pub fn once_shape(
    v: &crate::Verified<'_>,
    s: &Sharing,
    x: u16,
    b: &crate::desc::Binding,
    aicpus: u32,
) -> Option<OnceShape> {
    let class_fits = match s.class {
        Class::Shared => true,
        Class::Local => aicpus == 1 || (b.rank == 2 && matches!(s.key_dimension(), Some((1, _)))),
        Class::ReadOnly => false,
    };
    if !class_fits || !s.written_once || !(b.rank == 1 || b.rank == 2) {
        return None;
    }
    let cols = if b.rank == 2 { b.dims[1] } else { 1 };
    if cols == 0 {
        return None;
    }
    let code = v.code();
    let last = code.len() as u32 - 1;
    let mut reach = 0u32;
    let mut pc = 0u32;
    while pc < last {
        let r = code[pc as usize];
        if r.opcode != Opcode::TASK as u8 {
            pc += 1;
            continue;
        }
        let (ios, next) = task_ios(code, pc, r);
        for io in ios.iter().filter(|io| io.op1() == x) {
            let named = io.flags;
            match Opcode::from_u8(io.opcode).and_then(Dir::of_io) {
                Some(Dir::In) if (1..=b.rank).contains(&named) => {
                    // Stepped: dimension 0 is `t − c`, `c ≥ 1` (`is_var_before`).
                    let start = v.regions().get(io.op2() as usize)?.start.get();
                    let c = v.exprs().get(start as usize + 1)?.op2();
                    reach = reach.max(c);
                }
                Some(Dir::Out) if named == b.rank => {}
                _ => return None,
            }
        }
        pc = next;
    }
    Some(OnceShape {
        rank: b.rank,
        cols,
        reach,
    })
}

/// How region `io` of task `id` (generated by the `TASK` at instruction `site`) is recorded
/// (§3.5), and in which map (true: the global one): not at all for a read-only tensor. Of
/// any other, it is looked up unless its tensor is loop-indexed and no earlier site may
/// conflict (for a read, write it; for a write, access it), and recorded if it is a write,
/// or a read that a later write may follow (a task below `writes_end`, for a loop-indexed
/// tensor a site before its last writing site, and not of a stepped tensor). A tensor past `shares` is
/// treated as shared and always recorded.
pub fn use_of(shares: &[Sharing], id: u64, site: u32, io: &crate::Io) -> (Use, bool) {
    let Some(s) = shares.get(io.tensor as usize) else {
        return (Use::Record, true);
    };
    if s.chained {
        // Its producers come from `chain`; nothing else meets its accesses. (A carried
        // tensor's regions in its loop's body go by `Chain::use_of` instead of this.)
        return (Use::Skip, false);
    }
    let global = match s.class {
        Class::ReadOnly => return (Use::Skip, false),
        Class::Local => false,
        Class::Shared => true,
    };
    let earliest = if io.writes() {
        s.first_site
    } else {
        s.first_write_site
    };
    // A write of a tensor written once meets no earlier access (§3.5).
    let lookup = (!s.loop_indexed || site > earliest) && !(io.writes() && s.written_once);
    let record = io.writes()
        || (id < s.writes_end && (!s.loop_indexed || site < s.last_write_site) && !s.stepped);
    match (lookup, record) {
        (true, true) => (Use::Record, global),
        (true, false) => (Use::Lookup, global),
        (false, true) => (Use::Insert, global),
        (false, false) => (Use::Skip, false),
    }
}

/// The fewest elements a read of a stepped tensor must name for a join to stand for its
/// writers (spec/runtime.md §4.7; `sched::join`): a narrow read (the stencils', a point's)
/// has few writers, and a join for it would cost a lookup of its own and save nothing.
pub const JOIN_MIN: usize = 16;

/// Whether region `io` names at least [`JOIN_MIN`] elements (its unnamed dimensions counted
/// as 1).
pub fn wide(io: &crate::Io) -> bool {
    let elements = io.dims().iter().fold(1u64, |e, &(lo, hi)| {
        e.saturating_mul(hi.saturating_sub(lo).max(0) as u64)
    });
    elements >= JOIN_MIN as u64
}

/// How many sites [`SiteUses`] remembers (direct-mapped by instruction index).
pub const USE_SITES: usize = 16;

/// [`use_of`] for each region of a task and what [`chain`] says about its site, remembered
/// per site. They depend on the site alone: a site's tasks all belong to one top-level
/// statement, so they are all below a tensor's `writes_end` or all at or past it (§3.5), and
/// the rest of the rule reads only the site and its regions' tensors and directions, which
/// the site fixes. A carried tensor's regions then depend on the task's iteration flags
/// (§3.7): skipped in the middle iterations (remembered so), worked out in the first and
/// last. Also remembers which maps a site's regions need ([`TaskUses`]). Valid for one
/// program and one set of classes; [`SiteUses::default`] remembers nothing.
#[derive(Clone, Debug)]
pub struct SiteUses {
    site: [u32; USE_SITES],
    uses: [[(Use, bool); limits::MAX_TASK_IO]; USE_SITES],
    /// Whether the site has a region to look up or record in the local map, and one in the
    /// global map.
    needs: [Needs; USE_SITES],
    chains: [Chain; USE_SITES],
    /// The uses of the last task with regions of carried tensors, and their needs.
    task: [(Use, bool); limits::MAX_TASK_IO],
    task_needs: Needs,
    /// [`TaskUses::all_quiet`]'s memory: the map's insertion count when a site's tensors
    /// were last all found quiet (`u64::MAX`: not since the site was remembered), and the
    /// same for `task` (never kept).
    quiet_at: [Cell<u64>; USE_SITES],
    task_quiet_at: Cell<u64>,
}

/// `uses` with the regions of `done` (a bit each) skipped, in neither map, in `into`: the
/// regions a join (§4.7) or a written-once table (§4.8) answered.
#[inline]
pub fn skipping<'a>(
    uses: &[(Use, bool)],
    done: u32,
    into: &'a mut [(Use, bool); limits::MAX_TASK_IO],
) -> &'a [(Use, bool)] {
    for (k, (d, &u)) in into.iter_mut().zip(uses).enumerate() {
        *d = if done & 1 << k != 0 {
            (Use::Skip, false)
        } else {
            u
        };
    }
    &into[..uses.len()]
}

/// What [`SiteUses::remembered`] says of a task.
#[derive(Clone, Copy, Debug)]
pub struct Remembered<'a> {
    /// Each region's use and whether it goes to the global map (`use_of`).
    pub regions: &'a [(Use, bool)],
    /// The predecessors the program names, by distance ([`Chain::producers`]).
    pub chain: u64,
}

/// How a task's regions go to the maps ([`SiteUses::of`]).
#[derive(Clone, Copy, Debug)]
pub struct TaskUses<'a> {
    /// Each region's use and whether it goes to the global map (`use_of`).
    pub regions: &'a [(Use, bool)],
    /// The predecessors the program names, by distance ([`Chain::producers`]).
    pub chain: u64,
    /// Whether some region is to be looked up or recorded in the global map (not
    /// [`Use::Skip`], global): without one, the global map has nothing to do.
    pub global: bool,
    needs: &'a Needs,
    quiet_at: &'a Cell<u64>,
}

impl TaskUses<'_> {
    /// The tensors of the regions for the local map, each once: when every region that
    /// goes to a map is only looked up (a read, [`Use::Lookup`] or [`Use::Find`]), the local
    /// map has nothing to find and nothing to change while all of them are quiet
    /// ([`TaskUses::all_quiet`]).
    pub fn quiet(&self) -> &[u16] {
        let n = self.needs;
        &n.quiet[..n.nquiet as usize]
    }

    /// Whether every tensor of [`TaskUses::quiet`] is quiet in `map`
    /// ([`TensorMap::quiet`]). The answer is remembered for the site while the map inserts
    /// nothing (only an insertion gives a tensor a live entry): the next tasks of the site
    /// check one count instead.
    #[inline]
    pub fn all_quiet<S: Storage>(&self, map: &mut TensorMap<S>) -> bool {
        let n = map.inserted();
        if self.quiet_at.get() == n {
            return true;
        }
        self.check_quiet(map, n)
    }

    #[inline(never)]
    fn check_quiet<S: Storage>(&self, map: &mut TensorMap<S>, n: u64) -> bool {
        let quiet = self.quiet().iter().all(|&x| map.quiet(x));
        if quiet {
            self.quiet_at.set(n);
        }
        quiet
    }

    /// The regions a join stands for (spec/runtime.md §4.7), a bit each: reads of stepped
    /// tensors, only looked up, wide enough ([`Needs::joinable`]).
    #[inline]
    pub fn joinable(&self) -> u32 {
        self.needs.joinable
    }

    /// Whether the local map has something to do for the task: some region is to be looked
    /// up or recorded there (not [`Use::Skip`], not global), and not every region that goes
    /// to a map is a read only looked up while the local map's tensors are all quiet
    /// ([`TaskUses::all_quiet`]).
    #[inline]
    pub fn local_needed<S: Storage>(&self, map: &mut TensorMap<S>) -> bool {
        match self.needs.local {
            LOCAL_NONE => false,
            LOCAL_UNLESS_QUIET => !self.all_quiet(map),
            _ => true,
        }
    }
}

/// [`Needs::local`]: no region for the local map.
const LOCAL_NONE: u8 = 0;
/// Regions for the local map, and some region that goes to a map written or recorded.
const LOCAL_ALWAYS: u8 = 1;
/// Regions for the local map, and every region that goes to a map only looked up: the local
/// map has nothing to do while its tensors are quiet.
const LOCAL_UNLESS_QUIET: u8 = 2;

/// Adds tensor `x` to the first `len` of `list` unless it is there (a task's regions fit
/// `list`, so there is room).
fn add_once(list: &mut [u16; limits::MAX_TASK_IO], len: &mut u8, x: u16) {
    let have = &list[..*len as usize];
    if !have.contains(&x) {
        list[have.len() % limits::MAX_TASK_IO] = x;
        *len += 1;
    }
}

/// Whether `uses` (of the regions `ios`) has a region for the local map and one for the
/// global map, and whether all those regions are reads only looked up; the tensors of the
/// regions for the local map, each once; and those of the global map's regions when every one
/// of them is only looked up ([`Use::Lookup`]), each once.
fn needs(uses: &[(Use, bool)], ios: &[crate::Io], shares: &[Sharing]) -> Needs {
    let mut n = Needs::default();
    let mut local = false;
    let mut lookups_only = true;
    let mut shared_lookups_only = true;
    for (k, (&(u, global), io)) in uses.iter().zip(ios).enumerate() {
        if u == Use::Lookup
            && !io.writes()
            && shares.get(io.tensor as usize).is_some_and(|s| s.stepped)
            && wide(io)
        {
            n.joinable |= 1 << k;
        }
        if u != Use::Skip {
            if global {
                n.global = true;
                shared_lookups_only &= u == Use::Lookup;
                add_once(&mut n.shared, &mut n.nshared, io.tensor);
            } else {
                local = true;
                add_once(&mut n.quiet, &mut n.nquiet, io.tensor);
            }
            lookups_only &= matches!(u, Use::Lookup | Use::Find) && !io.writes();
        }
    }
    n.local = match (local, lookups_only) {
        (false, _) => LOCAL_NONE,
        (true, true) => LOCAL_UNLESS_QUIET,
        (true, false) => LOCAL_ALWAYS,
    };
    // A read a join may stand for asks the joins, whatever the maps hold (§4.7); a region
    // for the global map, that map, unless it is only looked up (`any_shared`).
    n.any = if n.joinable != 0 || n.global {
        LOCAL_ALWAYS
    } else {
        n.local
    };
    n.any_shared = if n.joinable != 0 || !shared_lookups_only {
        LOCAL_ALWAYS
    } else {
        n.local
    };
    if !shared_lookups_only {
        n.nshared = 0;
    }
    n
}

/// What [`needs`] says about a site's regions.
#[derive(Clone, Copy, Debug, Default)]
struct Needs {
    /// Whether a region goes to the local map, and whether every region that goes to a map
    /// is only looked up: [`LOCAL_NONE`], [`LOCAL_ALWAYS`] or [`LOCAL_UNLESS_QUIET`].
    local: u8,
    global: bool,
    /// `local`, or [`LOCAL_ALWAYS`] if a region goes to the global map or a join may stand
    /// for a read ([`SiteUses::no_map`]).
    any: u8,
    /// The same, but for the regions of the global map only looked up, which
    /// [`SiteUses::no_map_shared`] asks about ([`Needs::shared`]).
    any_shared: u8,
    nquiet: u8,
    /// The tensors of the regions for the global map, each once, when they are all looked
    /// up (`any_shared` is [`LOCAL_ALWAYS`] otherwise): the map has nothing to do for them
    /// while none of them has a live writer there ([`SiteUses::no_map_shared`]).
    shared: [u16; limits::MAX_TASK_IO],
    nshared: u8,
    /// The regions only looked up that read a stepped tensor, a bit each, that name at least
    /// [`JOIN_MIN`] elements in the task the site was remembered from: those a join stands
    /// for (spec/runtime.md §4.7). A heuristic (a site's regions are usually as wide in all
    /// its tasks): a join stands for any read of a stepped tensor.
    joinable: u32,
    /// The tensors of the regions for the local map (`TaskUses::quiet`).
    quiet: [u16; limits::MAX_TASK_IO],
}

impl Default for SiteUses {
    fn default() -> SiteUses {
        SiteUses {
            site: [u32::MAX; USE_SITES],
            uses: [[(Use::Skip, false); limits::MAX_TASK_IO]; USE_SITES],
            needs: [Needs::default(); USE_SITES],
            chains: [Chain::default(); USE_SITES],
            task: [(Use::Skip, false); limits::MAX_TASK_IO],
            task_needs: Needs::default(),
            quiet_at: core::array::from_fn(|_| Cell::new(u64::MAX)),
            task_quiet_at: Cell::new(u64::MAX),
        }
    }
}

impl SiteUses {
    /// The uses of `t`, whose site (remembered in entry `k`, its [`chain`] `c`) has regions of
    /// carried tensors and which is in its loop's first or last iteration, into `task`.
    #[inline(never)]
    fn at_ends(&mut self, k: usize, c: Chain, t: &crate::Task, shares: &[Sharing]) {
        let ios = t.ios();
        for (j, u) in self.task.iter_mut().enumerate().take(ios.len()) {
            *u = if c.carried & 1 << j != 0 {
                (c.use_of(j, t.iter), false)
            } else {
                self.uses[k][j]
            };
        }
        self.task_needs = needs(&self.task[..ios.len()], ios, shares);
        self.task_quiet_at.set(u64::MAX);
    }

    /// Works out and remembers, in entry `k`, the uses of `t`'s site, whose [`chain`] is `c`.
    #[inline(never)]
    fn remember(&mut self, k: usize, shares: &[Sharing], t: &crate::Task, c: Chain) {
        let ios = t.ios();
        for (j, (u, io)) in self.uses[k].iter_mut().zip(ios).enumerate() {
            // A carried tensor's region: skipped except in its loop's first and last
            // iterations, which go by `Chain::use_of` in `of_with`.
            *u = if c.carried & 1 << j != 0 {
                (Use::Skip, false)
            } else {
                use_of(shares, t.id, t.site, io)
            };
        }
        self.needs[k] = needs(&self.uses[k][..ios.len()], ios, shares);
        self.chains[k] = c;
        self.site[k] = t.site;
        self.quiet_at[k].set(u64::MAX);
    }

    /// How each region of `t` goes to the maps, in order (`use_of`, and for a carried
    /// tensor's region [`Chain::use_of`]), and the predecessors the program names
    /// ([`Chain::producers`]).
    #[inline]
    pub fn of(
        &mut self,
        v: &crate::Verified<'_>,
        shares: &[Sharing],
        t: &crate::Task,
    ) -> TaskUses<'_> {
        self.of_with(shares, t, |site| chain(v, shares, site))
    }

    /// The predecessors the program names for `t` ([`Chain::producers`]) when its site is
    /// remembered and neither a map nor a join has anything to do for it: no read a join may
    /// stand for ([`TaskUses::joinable`]), no region for the global map, and no region for
    /// the local map or only reads of tensors found all quiet at the map's insertion count
    /// `inserted` ([`TaskUses::all_quiet`], whose memory this reads). `None`: ask
    /// [`SiteUses::of`], which says what to do. Changes nothing: a quick first look for a
    /// caller that then skips the maps (the written-once tables are the caller's to ask).
    #[inline]
    pub fn no_map(&self, t: &crate::Task, inserted: u64) -> Option<u64> {
        let k = self.entry(t)?;
        self.quiet(k, self.needs[k].any, inserted)
            .then(|| self.chains[k].producers(t.iter))
    }

    /// [`SiteUses::no_map`] for a caller with a global map: the regions for it may also be
    /// lookups, of tensors `idle` finds without a live writer there (it is called with them,
    /// each once).
    #[inline]
    pub fn no_map_shared(
        &self,
        t: &crate::Task,
        inserted: u64,
        idle: impl FnOnce(&[u16]) -> bool,
    ) -> Option<u64> {
        let k = self.entry(t)?;
        let n = &self.needs[k];
        if !self.quiet(k, n.any_shared, inserted) {
            return None;
        }
        let shared = (n.nshared as usize).min(limits::MAX_TASK_IO);
        (shared == 0 || idle(&n.shared[..shared])).then(|| self.chains[k].producers(t.iter))
    }

    /// Whether the local map has nothing to do for entry `k`'s tasks by `any`
    /// ([`Needs::any`] or [`Needs::any_shared`]): no region for it, or only reads of tensors
    /// found all quiet at insertion count `inserted`.
    #[inline(always)]
    fn quiet(&self, k: usize, any: u8, inserted: u64) -> bool {
        match any {
            LOCAL_NONE => true,
            LOCAL_UNLESS_QUIET => self.quiet_at[k].get() == inserted,
            _ => false,
        }
    }

    /// What is remembered of `t`'s site, when it is and its uses are `t`'s — `t` is not in
    /// the first or last iteration of a carried tensor's loop. `None`: ask
    /// [`SiteUses::of`]. Changes nothing.
    #[inline]
    pub fn remembered(&self, t: &crate::Task) -> Option<Remembered<'_>> {
        let k = self.entry(t)?;
        Some(Remembered {
            regions: self.uses[k].get(..t.ios().len())?,
            chain: self.chains[k].producers(t.iter),
        })
    }

    /// The entry remembering `t`'s site, when there is one and its uses are `t`'s (`t` is not
    /// in the first or last iteration of a carried tensor's loop).
    #[inline(always)]
    fn entry(&self, t: &crate::Task) -> Option<usize> {
        let k = t.site as usize % USE_SITES;
        let c = &self.chains[k];
        let ends = t.iter & (crate::interp::ITER_FIRST | crate::interp::ITER_LAST) != 0;
        (self.site[k] == t.site && (c.carried == 0 || !ends)).then_some(k)
    }

    /// [`TaskUses::joinable`] of site `site` if it is remembered, else 0: for a caller that
    /// needs it before asking for a task's uses (the one-instance measurement's site plans).
    #[inline]
    pub fn joinable_at(&self, site: u32) -> u32 {
        let k = site as usize % USE_SITES;
        if self.site[k] == site {
            self.needs[k].joinable
        } else {
            0
        }
    }

    /// [`SiteUses::of`] with the site's [`chain`] from `chain_of` (asked only when the site
    /// is not remembered): for a caller that keeps them already.
    #[inline]
    pub fn of_with(
        &mut self,
        shares: &[Sharing],
        t: &crate::Task,
        chain_of: impl FnOnce(u32) -> Chain,
    ) -> TaskUses<'_> {
        let k = t.site as usize % USE_SITES;
        let ios = t.ios();
        if self.site[k] != t.site {
            self.remember(k, shares, t, chain_of(t.site));
        }
        let c = self.chains[k];
        let ends = t.iter & (crate::interp::ITER_FIRST | crate::interp::ITER_LAST);
        if c.carried == 0 || ends == 0 {
            let n = &self.needs[k];
            return TaskUses {
                regions: &self.uses[k][..ios.len()],
                chain: c.producers(t.iter),
                global: n.global,
                needs: n,
                quiet_at: &self.quiet_at[k],
            };
        }
        self.at_ends(k, c, t, shares);
        let n = &self.task_needs;
        TaskUses {
            regions: &self.task[..ios.len()],
            chain: c.producers(t.iter),
            global: n.global,
            needs: n,
            quiet_at: &self.task_quiet_at,
        }
    }
}

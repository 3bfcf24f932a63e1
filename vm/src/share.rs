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
use crate::tmap::Use;

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
    /// [`producers`] gives each task's predecessors from their distance in ids.
    pub chained: bool,
    /// The instruction index of the loop whose body holds every site that accesses it, when
    /// they all sit directly in one loop's body.
    pub body: u32,
    /// During the walk: how every access was keyed so far (0: none yet; the policy kind, and
    /// for `static` its loop's axis); `UNKEYED` once one access was not.
    keyed: u32,
    /// During the walk: whether an access (a write) was seen, and one that did not name the
    /// tensor by its loops' variables.
    seen: bool,
    wrote: bool,
    unindexed: bool,
    /// During the walk: two sites sit in different loop bodies (or one outside every loop).
    scattered: bool,
}

/// The most `TASK` statements a loop body holding a chained tensor may have (§3.6): distances
/// between two of its tasks are below it, so a task's structural producers fit a `u64` mask,
/// and a scheduler remembers the slots of its last `CHAIN_SPAN` tasks.
pub const CHAIN_SPAN: u32 = 64;

const UNKEYED: u32 = u32::MAX;

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

/// Whether a loop over `axis` gives its variable the iteration indices 0, 1, … (dense,
/// dynamic and ragged axes; a sparse axis gives the stored column indices, which may repeat).
fn indexed_axis(v: &crate::Verified<'_>, axis: u16) -> bool {
    v.axes().get(axis as usize).is_some_and(|a| {
        a.opcode == Opcode::AXIS_DENSE as u8
            || a.opcode == Opcode::AXIS_DENSE_DYN as u8
            || a.opcode == Opcode::AXIS_RAGGED as u8
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
            top_end = statement_end(&v, pc).min(last);
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
                .and_then(|&(_, axis, _)| dense_axis(&v, axis))
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
            if !s.seen {
                s.first_site = pc;
                s.body = body;
                s.seen = true;
            }
            s.scattered |= body != s.body || body == u32::MAX;
            // Named by the variables of the loops around the site, outermost first?
            s.unindexed |= io.flags as usize != nl
                || !loops[..nl]
                    .iter()
                    .all(|&(_, axis, _)| indexed_axis(&v, axis))
                || !(0..nl).all(|d| {
                    regions.get(io.op2() as usize + d).is_some_and(|r| {
                        r.end.get() == NONE16 && is_var(&v, r.start.get(), d as u8)
                    })
                });
            let by_key = key.filter(|(_, expr, depth)| {
                io.flags >= 1
                    && regions.get(io.op2() as usize).is_some_and(|d| {
                        d.end.get() == NONE16
                            && match depth {
                                None => same_expr(&v, d.start.get(), *expr),
                                Some(depth) => is_var(&v, d.start.get(), *depth),
                            }
                    })
            });
            s.keyed = match (by_key, s.keyed) {
                (Some((k, _, _)), 0) => k,
                (Some((k, _, _)), was) if was == k => k,
                _ => UNKEYED,
            };
        }
        pc += 1 + params + ios;
    }
    let one = interp.aicpus() == 1;
    for s in out.iter_mut() {
        s.loop_indexed = s.seen && !s.unindexed;
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
            && simple_body(&v, s.body).is_some_and(|n| n <= CHAIN_SPAN);
    }
    Ok(())
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
        q += 1 + (t.op2() & 0xFFFF) + (t.op2() >> 16);
    }
    Some(n)
}

/// Whether the `TASK` at `site` reads, and whether it writes, tensor `x`.
fn access(v: &crate::Verified<'_>, site: u32, x: u16) -> (bool, bool) {
    let code = v.code();
    let Some(r) = code.get(site as usize) else {
        return (false, false);
    };
    let (params, ios) = (r.op2() & 0xFFFF, r.op2() >> 16);
    let (mut reads, mut writes) = (false, false);
    for k in 0..ios {
        let Some(io) = code.get((site + 1 + params + k) as usize) else {
            break;
        };
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

/// The predecessors that the program's structure names for a task of `site` through its
/// chained tensors (§3.6), as a mask: bit `d` set means task `id − d` (`1 ≤ d <
/// CHAIN_SPAN`). For each chained tensor the site accesses, walking its loop body up to the
/// site: the last earlier statement that writes it, and, if the site writes it, the
/// statements that read it since — the edges a map would find, since every access of the
/// tensor in one iteration names the same region and none in another iteration overlaps it.
pub fn producers(v: &crate::Verified<'_>, shares: &[Sharing], site: u32) -> u64 {
    let code = v.code();
    let Some(r) = code.get(site as usize) else {
        return 0;
    };
    if r.opcode != Opcode::TASK as u8 {
        return 0;
    }
    let (params, ios) = (r.op2() & 0xFFFF, r.op2() >> 16);
    let mut mask = 0u64;
    for k in 0..ios {
        let Some(io) = code.get((site + 1 + params + k) as usize) else {
            break;
        };
        let x = io.op1();
        let Some(s) = shares.get(x as usize).filter(|s| s.chained) else {
            continue;
        };
        // Positions (in tasks) in the body: the last write before the site, the reads since.
        let (mut q, mut pos) = (s.body + 1, 0u32);
        let (mut last_write, mut reads) = (None, 0u64);
        while q < site && pos < CHAIN_SPAN {
            let Some(t) = code.get(q as usize) else {
                break;
            };
            match access(v, q, x) {
                (_, true) => (last_write, reads) = (Some(pos), 0),
                (true, false) => reads |= 1 << pos,
                _ => {}
            }
            pos += 1;
            q += 1 + (t.op2() & 0xFFFF) + (t.op2() >> 16);
        }
        if let Some(w) = last_write {
            mask |= 1 << (pos - w);
        }
        if access(v, site, x).1 {
            let mut r = reads;
            while r != 0 {
                mask |= 1 << (pos - r.trailing_zeros());
                r &= r - 1;
            }
        }
    }
    mask
}

/// How region `io` of task `id` (generated by the `TASK` at instruction `site`) is recorded
/// (§3.5), and in which map (true: the global one): not at all for a read-only tensor. Of
/// any other, it is looked up unless its tensor is loop-indexed and no earlier site may
/// conflict (for a read, write it; for a write, access it), and recorded if it is a write,
/// or a read that a later write may follow (a task below `writes_end`, and for a
/// loop-indexed tensor a site before its last writing site). A tensor past `shares` is
/// treated as shared and always recorded.
pub fn use_of(shares: &[Sharing], id: u64, site: u32, io: &crate::Io) -> (Use, bool) {
    let Some(s) = shares.get(io.tensor as usize) else {
        return (Use::Record, true);
    };
    if s.chained {
        // Its producers come from `producers`; nothing else meets its accesses.
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
    let lookup = !s.loop_indexed || site > earliest;
    let record =
        io.writes() || (id < s.writes_end && (!s.loop_indexed || site < s.last_write_site));
    match (lookup, record) {
        (true, true) => (Use::Record, global),
        (true, false) => (Use::Lookup, global),
        (false, true) => (Use::Insert, global),
        (false, false) => (Use::Skip, false),
    }
}

/// How many sites [`SiteUses`] remembers (direct-mapped by instruction index).
pub const USE_SITES: usize = 16;

/// [`use_of`] for each region of a task and its structural [`producers`], remembered per
/// site. They depend on the site alone: a site's tasks all belong to one top-level statement,
/// so they are all below a tensor's `writes_end` or all at or past it (§3.5), and the rest of
/// the rule reads only the site and its regions' tensors and directions, which the site fixes.
/// Valid for one program and one set of classes; [`SiteUses::default`] remembers nothing.
#[derive(Clone, Copy, Debug)]
pub struct SiteUses {
    site: [u32; USE_SITES],
    uses: [[(Use, bool); limits::MAX_TASK_IO]; USE_SITES],
    producers: [u64; USE_SITES],
}

impl Default for SiteUses {
    fn default() -> SiteUses {
        SiteUses {
            site: [u32::MAX; USE_SITES],
            uses: [[(Use::Skip, false); limits::MAX_TASK_IO]; USE_SITES],
            producers: [0; USE_SITES],
        }
    }
}

impl SiteUses {
    /// `use_of(shares, t.id, t.site, io)` for every region `io` of `t`, in order, and
    /// `producers(v, shares, t.site)`.
    #[inline]
    pub fn of(
        &mut self,
        v: &crate::Verified<'_>,
        shares: &[Sharing],
        t: &crate::Task,
    ) -> (&[(Use, bool)], u64) {
        let k = t.site as usize % USE_SITES;
        let ios = t.ios();
        if self.site[k] != t.site {
            for (u, io) in self.uses[k].iter_mut().zip(ios) {
                *u = use_of(shares, t.id, t.site, io);
            }
            self.producers[k] = producers(v, shares, t.site);
            self.site[k] = t.site;
        }
        (&self.uses[k][..ios.len()], self.producers[k])
    }
}

//! The schedule's knobs about loops (spec/pto.md §4.6), applied to the syntax tree before it is
//! lowered: `order v = sequential | parallel | interleaved(n)` and `affinity v = core_group`;
//! `affinity v = core_local | spread` and `prefetch v = n` are refused with an error.
//!
//! `interleaved(n)` (seed 000 §5.3, `PTO_ORDER(batch, PTO_INTERLEAVED(4))`) changes the order in
//! which tasks are generated, so it is a rewrite of the loop nest in the language itself: the
//! interpreter, the reference expander, counting and subtree skipping then see ordinary loops
//! and agree by construction, and dependencies follow the new program order. A loop `b in A`
//! whose body is one loop `c in C(b)` becomes
//!
//! ```text
//! parallel_for b__group in tile(A, n) {            // the groups of n consecutive values of b
//!   parallel_for c in ROUNDS {                     // round c: the c-th iteration of each b
//!     parallel_for b__member in dense[n] {         // the group's values of b, in order
//!       cond b__group * n + b__member < extent(A) {          // the last group may be partial
//!         cond c < extent(C(b)) { BODY }           // b has fewer than `ROUNDS` iterations
//! ```
//!
//! with `b` standing for `b__group * n + b__member` in `BODY` and in the schedule's expressions.
//! `ROUNDS` is `C` itself when `C`'s extent does not depend on `b` (and then the last `cond` is
//! left out); otherwise it runs to the largest extent over all `b`, a planned value
//! `b__rounds` computed at launch (so `A`'s extent and `C`'s may then read no other loop
//! variable). Each loop keeps its kind (`parallel_for` / `for_each`).

use super::*;
use crate::ast::{Knob, PlanDecl};

mod interleave;

use interleave::{alias, schedule_subst};

type Ordering = (Ident, Option<(u64, Span)>);

/// What the schedule asks of the loops that bind one variable.
#[derive(Default)]
struct Wish {
    order: Option<Ordering>,
    /// Whether a loop of the workload binds the variable (checked after the walk).
    found: bool,
    /// The knob's span, for messages.
    span: Span,
}

/// Applies the schedule's per-loop knobs to a copy of `ast`: `None` when it has none.
pub(super) fn apply(
    rep: &Reporter<'_>,
    ast: &ModuleAst,
    workload: usize,
    schedule: Option<usize>,
) -> R<Option<ModuleAst>> {
    let Some(si) = schedule else {
        return Ok(None);
    };
    let s = &ast.schedules[si];
    if !s
        .knobs
        .iter()
        .any(|k| matches!(k.value, KnobValue::PerLoop(..)))
    {
        return Ok(None);
    }
    let mut wishes: HashMap<String, Wish> = HashMap::new();
    let mut seen: HashMap<(String, String), Span> = HashMap::new();
    let mut affinity: Option<(Ident, Span)> = None;
    for k in &s.knobs {
        let KnobValue::PerLoop(var, value, arg) = &k.value else {
            continue;
        };
        let span = k
            .key
            .span
            .to(arg.map_or(value.as_ref().map_or(var.span, |v| v.span), |a| a.1));
        if seen
            .insert((k.key.name.clone(), var.name.clone()), span)
            .is_some()
        {
            return Err(rep.error(
                DiagKind::DuplicateName,
                span,
                format!("`{} {}` is set twice", k.key.name, var.name),
            ));
        }
        match (k.key.name.as_str(), value) {
            ("prefetch", _) => {
                return Err(rep.error(
                    DiagKind::Type,
                    span,
                    format!(
                        "`prefetch {}` is not supported: ptovm's kernels read their inputs from the regions of their own descriptor, and no prefetch hint reaches a kernel or the simulator (remove the knob)",
                        var.name
                    ),
                ))
            }
            ("affinity", Some(v)) => match v.name.as_str() {
                "core_group" => {
                    no_arg(rep, v, *arg)?;
                    if let Some((prev, _)) = &affinity {
                        return Err(rep.error(
                            DiagKind::Type,
                            span,
                            format!(
                                "`affinity {} = core_group` and `affinity {} = core_group`: tasks keep to one AICPU's cores by one key only",
                                prev.name, var.name
                            ),
                        ));
                    }
                    affinity = Some((var.clone(), span));
                    wishes.entry(var.name.clone()).or_default().span = span;
                }
                "core_local" | "spread" => {
                    return Err(rep.error(
                        DiagKind::Type,
                        v.span,
                        format!(
                            "`affinity {} = {}` is not supported: an AICPU hands a ready task to whichever of its own cores is idle, so ptovm can keep a loop's tasks on one AICPU's core group (`core_group`) but not on one core or across all cores",
                            var.name, v.name
                        ),
                    ))
                }
                other => {
                    return Err(rep.error(
                        DiagKind::Type,
                        v.span,
                        format!("unknown affinity `{other}`; expected core_group (core_local and spread are not supported)"),
                    ))
                }
            },
            (_, Some(v)) => {
                match (v.name.as_str(), arg) {
                    ("sequential" | "parallel", None) => {}
                    ("sequential" | "parallel", Some((_, s))) => {
                        return Err(rep.error(
                            DiagKind::Type,
                            *s,
                            format!("`{}` takes no argument", v.name),
                        ))
                    }
                    ("interleaved", Some((n, s))) => {
                        if *n == 0 || *n > MAX_INTERLEAVE {
                            return Err(rep.error(
                                DiagKind::Overflow,
                                *s,
                                format!(
                                    "`interleaved(n)` takes a group of 1 ..= {} values; {n} is not one",
                                    MAX_INTERLEAVE
                                ),
                            ));
                        }
                    }
                    ("interleaved", None) => {
                        return Err(rep.error(
                            DiagKind::Type,
                            v.span,
                            "`interleaved` needs the group size: `interleaved(N)`",
                        ))
                    }
                    (other, _) => {
                        return Err(rep.error(
                            DiagKind::Type,
                            v.span,
                            format!("unknown order `{other}`; expected sequential, parallel or interleaved(N)"),
                        ))
                    }
                }
                let w = wishes.entry(var.name.clone()).or_default();
                w.order = Some((v.clone(), *arg));
                w.span = span;
            }
            // The parser gives `order` and `affinity` a value; a syntax tree built otherwise
            // gets an error, not a panic.
            (key, None) => {
                return Err(rep.error(
                    DiagKind::Syntax,
                    span,
                    format!("`{key} {}` needs a value", var.name),
                ))
            }
        }
    }
    let mut out = ast.clone();
    let mut r = Rewrite {
        rep,
        wishes,
        plans: vec![],
        params: &ast.workloads[workload].params,
        names: HashSet::new(),
    };
    r.names
        .extend(ast.plans.iter().map(|p| p.name.name.clone()));
    r.names
        .extend(ast.params.iter().map(|p| p.name.name.clone()));
    let mut body = std::mem::take(&mut out.workloads[workload].body);
    r.stmts(&mut body, &mut vec![])?;
    out.workloads[workload].body = body;
    for (name, w) in &r.wishes {
        if !w.found {
            return Err(rep.error(
                DiagKind::UnknownName,
                w.span,
                format!(
                    "no loop of workload `{}` binds `{name}` (a schedule's `order` and `affinity` name a loop variable of its workload's own body)",
                    ast.workloads[workload].name.name
                ),
            ));
        }
    }
    out.plans.append(&mut r.plans);
    // The schedule: `affinity v = core_group` is `dispatch = affinity(v)`; then every
    // expression reads an interleaved variable as its value.
    let sched = &mut out.schedules[si];
    if let Some((var, span)) = affinity {
        if let Some(k) = sched.knobs.iter().find(|k| k.key.name == "dispatch") {
            return Err(rep.error(
                DiagKind::Type,
                span,
                format!(
                    "`affinity {} = core_group` keeps each value's tasks on one AICPU's core group, which is the dispatch policy `affinity({})`, but this schedule sets `dispatch` too (line {}): keep one",
                    var.name,
                    var.name,
                    crate::diag::Diagnostic::new(crate::diag::Severity::Error, DiagKind::Type, "", rep.file, rep.src, k.key.span).line
                ),
            ));
        }
        let e = Expr {
            kind: ExprK::Name(var.name.clone()),
            span: var.span,
        };
        sched.knobs.push(Knob {
            key: Ident {
                name: "dispatch".into(),
                span,
            },
            value: KnobValue::Dispatch(PolicyAst::Affinity(e), span),
        });
    }
    for (b, alias) in &r.aliases() {
        schedule_subst(rep, sched, b, alias)?;
    }
    Ok(Some(out))
}

fn no_arg(rep: &Reporter<'_>, v: &Ident, arg: Option<(u64, Span)>) -> R<()> {
    match arg {
        Some((_, s)) => {
            Err(rep.error(DiagKind::Type, s, format!("`{}` takes no argument", v.name)))
        }
        None => Ok(()),
    }
}

struct Rewrite<'r, 's, 'a> {
    rep: &'r Reporter<'s>,
    wishes: HashMap<String, Wish>,
    /// The planned values the rewrite adds (computed after the module's own).
    plans: Vec<PlanDecl>,
    /// The workload's parameter axes.
    params: &'a [(Ident, Axis)],
    /// Names the rewrite's own names must not take: plans, declared runtime parameters, and
    /// (added as met) every loop variable.
    names: HashSet<String>,
}

/// The largest group `interleaved(n)` takes (a group is a `dense[n]` loop).
const MAX_INTERLEAVE: u64 = 65_535;

impl Rewrite<'_, '_, '_> {
    /// Every interleaved variable with its value, `v__group * n + v__member`.
    fn aliases(&self) -> Vec<(String, Expr)> {
        let mut v: Vec<(String, Expr)> = self
            .wishes
            .iter()
            .filter_map(|(name, w)| match &w.order {
                Some((o, Some((n, _)))) if o.name == "interleaved" && *n > 1 => {
                    Some((name.clone(), alias(name, *n, w.span)))
                }
                _ => None,
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    fn stmts(&mut self, body: &mut [Stmt], outer: &mut Vec<String>) -> R<()> {
        for s in body.iter_mut() {
            self.stmt(s, outer)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &mut Stmt, outer: &mut Vec<String>) -> R<()> {
        match &mut s.kind {
            StmtK::Loop { op, var, body, .. } => {
                self.names.insert(var.name.clone());
                outer.push(var.name.clone());
                self.stmts(body, outer)?;
                outer.pop();
                let Some(w) = self.wishes.get_mut(&var.name) else {
                    return Ok(());
                };
                w.found = true;
                let Some((o, arg)) = w.order.clone() else {
                    return Ok(());
                };
                match o.name.as_str() {
                    "sequential" => *op = Opcode::FOR_EACH,
                    "parallel" if *op == Opcode::FOR_EACH => *op = Opcode::PARALLEL_FOR,
                    "parallel" => {}
                    _ => {
                        let n = arg.map_or(1, |a| a.0);
                        if n > 1 {
                            let span = w.span;
                            self.interleave(s, n, outer, span)?;
                        }
                    }
                }
            }
            StmtK::Cond { then, els, .. } => {
                self.stmts(then, outer)?;
                if let Some(e) = els {
                    self.stmts(e, outer)?;
                }
            }
            StmtK::Combine(b) | StmtK::Sequential(b) | StmtK::Dispatch(_, _, b) => {
                self.stmts(b, outer)?
            }
            StmtK::Call { .. } | StmtK::Task { .. } | StmtK::Wait { .. } => {}
        }
        Ok(())
    }
}

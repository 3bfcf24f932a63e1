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
use crate::ast::{Dim, Knob, PlanDecl, Resource, Schedule};

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
            (_, None) => unreachable!("the parser gives order and affinity a value"),
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

    /// `axis`, or the declared axis of the workload parameter it names.
    fn declared<'x>(&'x self, axis: &'x Axis) -> &'x Axis {
        match axis {
            Axis::Ref(p) => self
                .params
                .iter()
                .find(|(n, _)| n.name == p.name)
                .map_or(axis, |(_, a)| a),
            _ => axis,
        }
    }

    /// The extent of `axis` as an expression (a tile's: its base's, with its size), or an error
    /// naming what `role` needs.
    fn extent(
        &self,
        axis: &Axis,
        var: &Ident,
        role: &str,
        tile_ok: bool,
    ) -> R<(Expr, Option<Expr>)> {
        match axis {
            Axis::Dense(n, s) => Ok((
                Expr {
                    kind: ExprK::Int(*n),
                    span: *s,
                },
                None,
            )),
            Axis::DenseDyn(id) => Ok((
                Expr {
                    kind: ExprK::Name(id.name.clone()),
                    span: id.span,
                },
                None,
            )),
            Axis::RaggedRow(row, lengths) => Ok((
                Expr {
                    kind: ExprK::Elem(lengths.clone(), Box::new(row.clone())),
                    span: row.span,
                },
                None,
            )),
            Axis::Ref(p) => match self.params.iter().find(|(n, _)| n.name == p.name) {
                Some((_, a)) => self.extent(a, var, role, tile_ok),
                None => Err(self.rep.error(
                    DiagKind::UnknownName,
                    p.span,
                    format!("`{}` is not a parameter of the workload", p.name),
                )),
            },
            Axis::Tile(base, size, _) if tile_ok => {
                let (e, _) = self.extent(base, var, role, false)?;
                Ok((e, Some(size.clone())))
            }
            _ => Err(self.rep.error(
                DiagKind::Type,
                var.span,
                format!(
                    "`{}`: {role} must be dense[N], dense_dyn(n) or dense_dyn(lengths[row]){} (the ragged and sparse axes have no per-value extent to interleave by)",
                    var.name,
                    if tile_ok { ", or a tile of one" } else { "" }
                ),
            )),
        }
    }

    /// Rewrites the loop `s` (binding `b`) as `interleaved(n)` (see the module's comment).
    fn interleave(&mut self, s: &mut Stmt, n: u64, outer: &[String], span: Span) -> R<()> {
        let StmtK::Loop {
            op: b_op,
            var: b,
            axis: a,
            body,
        } = &mut s.kind
        else {
            return Ok(());
        };
        let [Stmt {
            kind:
                StmtK::Loop {
                    op: c_op,
                    var: c,
                    axis: c_axis,
                    body: inner,
                },
            span: c_span,
        }] = body.as_mut_slice()
        else {
            return Err(self.rep.error(
                DiagKind::Type,
                s.span,
                format!(
                    "`order {0} = interleaved({n})` interleaves the iterations of the loop directly inside `{0}`'s: this loop's body must be exactly that one loop ({1} statement(s) here)",
                    b.name,
                    body.len()
                ),
            ));
        };
        if let Some(w) = self.wishes.get(&c.name) {
            if w.order.as_ref().is_some_and(|o| o.0.name == "interleaved") {
                return Err(self.rep.error(
                    DiagKind::Type,
                    w.span,
                    format!(
                        "`{}` and `{}` are both interleaved, one directly inside the other: interleave one of them",
                        b.name, c.name
                    ),
                ));
            }
        }
        let (e, _) = self.extent(a, b, "an interleaved loop's axis", false)?;
        let (x, size) = self.extent(
            c_axis,
            c,
            "the axis of the loop an interleaved loop holds",
            true,
        )?;
        let group = format!("{}__group", b.name);
        let member = format!("{}__member", b.name);
        let rounds = format!("{}__rounds", b.name);
        for name in [&group, &member, &rounds] {
            if self.names.contains(name) || mentions_stmts(inner, name) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    span,
                    format!("interleaving `{}` names a loop variable or planned value `{name}`, a name this module already uses", b.name),
                ));
            }
        }
        self.names.extend([group.clone(), member.clone()]);
        let value = alias(&b.name, n, span);
        let subst_b = |r: &Self, e: &Expr| -> R<Expr> {
            let mut e = e.clone();
            r.expr(&mut e, &b.name, &value, None)?;
            Ok(e)
        };
        // The rounds: `c`'s own axis when its extent does not depend on `b`, else up to the
        // largest extent over every `b`, planned at launch.
        let varies = mentions(&x, &b.name) || size.as_ref().is_some_and(|z| mentions(z, &b.name));
        let (rounds_axis, cond_x) = if !varies {
            (c_axis.clone(), None)
        } else {
            if let Some(z) = size.as_ref().filter(|z| mentions(z, &b.name)) {
                return Err(self.rep.error(
                    DiagKind::Type,
                    z.span,
                    format!(
                        "interleaving `{}`: the tile size of `{}`'s axis reads `{}`; the rounds need one tile size for every value",
                        b.name, c.name, b.name
                    ),
                ));
            }
            for (what, ex, allowed) in [
                ("the extent of", &e, None),
                ("the extent of", &x, Some(&b.name)),
            ] {
                if let Some(v) = outer
                    .iter()
                    .find(|v| Some(*v) != allowed && mentions(ex, v))
                {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        ex.span,
                        format!(
                            "interleaving `{}`: {what} this axis reads loop variable `{v}`, but the number of rounds is planned at launch, from runtime parameters and `{}` alone",
                            b.name, b.name
                        ),
                    ));
                }
            }
            let sp = span;
            let ex = |kind| Expr { kind, span: sp };
            let bin = |op, l: Expr, r: Expr| ex(ExprK::Bin(op, Box::new(l), Box::new(r)));
            let id = |name: &str| Ident {
                name: name.to_string(),
                span: sp,
            };
            let r_var = format!("{}__round", b.name);
            let sum = |body: Expr| {
                ex(ExprK::Bind(
                    ExprOp::SUM,
                    id(&b.name),
                    Box::new(ex(ExprK::Int(0))),
                    Box::new(e.clone()),
                    Box::new(body),
                ))
            };
            // The largest extent, 0 over no values: the smallest r ≥ 0 that no extent exceeds,
            // searched up to their sum (which none exceeds).
            let largest = ex(ExprK::Bind(
                ExprOp::SEARCH,
                id(&r_var),
                Box::new(ex(ExprK::Int(0))),
                Box::new(bin(ExprOp::ADD, sum(x.clone()), ex(ExprK::Int(1)))),
                Box::new(bin(
                    ExprOp::EQ,
                    sum(bin(ExprOp::GT, x.clone(), ex(ExprK::Name(r_var.clone())))),
                    ex(ExprK::Int(0)),
                )),
            ));
            self.plans.push(PlanDecl {
                name: id(&rounds),
                expr: largest,
            });
            let dyn_axis = Axis::DenseDyn(id(&rounds));
            let (axis, limit) = match &size {
                Some(z) => (
                    Axis::Tile(Box::new(dyn_axis), z.clone(), sp),
                    bin(ExprOp::CEILDIV, subst_b(self, &x)?, z.clone()),
                ),
                None => (dyn_axis, subst_b(self, &x)?),
            };
            (axis, Some(limit))
        };
        // The body, with `b` as its value and `c`'s tile bounds as this `b`'s.
        let tile = match &size {
            Some(z) if varies => Some((c.name.clone(), z.clone(), subst_b(self, &x)?)),
            _ => None,
        };
        let mut body_c = std::mem::take(inner);
        for st in body_c.iter_mut() {
            self.subst_stmt(st, &b.name, &value, tile.as_ref())?;
        }
        let sp = span;
        let ex = |kind| Expr { kind, span: sp };
        let cond = |pred: Expr, then: Vec<Stmt>| Stmt {
            kind: StmtK::Cond {
                pred,
                then,
                els: None,
            },
            span: sp,
        };
        let mut member_body = match cond_x {
            Some(limit) => vec![cond(
                ex(ExprK::Bin(
                    ExprOp::LT,
                    Box::new(ex(ExprK::Name(c.name.clone()))),
                    Box::new(limit),
                )),
                body_c,
            )],
            None => body_c,
        };
        let whole_groups = matches!(e.kind, ExprK::Int(v) if v % n == 0);
        if !whole_groups {
            member_body = vec![cond(
                ex(ExprK::Bin(
                    ExprOp::LT,
                    Box::new(value.clone()),
                    Box::new(e.clone()),
                )),
                member_body,
            )];
        }
        let id = |name: &str| Ident {
            name: name.to_string(),
            span: b.span,
        };
        let members = Stmt {
            kind: StmtK::Loop {
                op: *b_op,
                var: id(&member),
                axis: Axis::Dense(n, sp),
                body: member_body,
            },
            span: s.span,
        };
        let rounds_loop = Stmt {
            kind: StmtK::Loop {
                op: *c_op,
                var: c.clone(),
                axis: rounds_axis,
                body: vec![members],
            },
            span: *c_span,
        };
        let groups_axis = Axis::Tile(Box::new(self.declared(a).clone()), ex(ExprK::Int(n)), sp);
        s.kind = StmtK::Loop {
            op: *b_op,
            var: id(&group),
            axis: groups_axis,
            body: vec![rounds_loop],
        };
        Ok(())
    }

    /// `b` replaced by `value` in a statement of an interleaved loop's body; a use of `b` that
    /// cannot take an expression is an error. With `tile`, `tile_start(c)` and `tile_end(c)`
    /// become `c`'s tile bounds for this `b` (its size, its base's extent).
    fn subst_stmt(
        &self,
        s: &mut Stmt,
        b: &str,
        value: &Expr,
        tile: Option<&(String, Expr, Expr)>,
    ) -> R<()> {
        let not_expr = |id: &Ident, what: &str| -> R<()> {
            if id.name == b {
                return Err(self.rep.error(
                    DiagKind::Type,
                    id.span,
                    format!("`{b}` is interleaved, so its value is computed from the group and the member: it cannot be {what} here (use it in an expression)"),
                ));
            }
            Ok(())
        };
        match &mut s.kind {
            StmtK::Loop {
                var, axis, body, ..
            } => {
                if var.name == b || tile.is_some_and(|t| t.0 == var.name) {
                    return Err(self.rep.error(
                        DiagKind::DuplicateName,
                        var.span,
                        format!(
                            "loop variable `{}` is already bound by an enclosing loop",
                            var.name
                        ),
                    ));
                }
                self.subst_axis(axis, b, value, tile, &not_expr)?;
                for st in body.iter_mut() {
                    self.subst_stmt(st, b, value, tile)?;
                }
            }
            StmtK::Cond { pred, then, els } => {
                self.expr(pred, b, value, tile)?;
                for st in then.iter_mut().chain(els.iter_mut().flatten()) {
                    self.subst_stmt(st, b, value, tile)?;
                }
            }
            StmtK::Combine(body) | StmtK::Sequential(body) => {
                for st in body.iter_mut() {
                    self.subst_stmt(st, b, value, tile)?;
                }
            }
            StmtK::Dispatch(p, _, body) => {
                self.policy(p, b, value, &not_expr)?;
                for st in body.iter_mut() {
                    self.subst_stmt(st, b, value, tile)?;
                }
            }
            StmtK::Call { args, .. } => {
                for a in args.iter() {
                    not_expr(a, "passed to a call")?;
                }
            }
            StmtK::Wait { bound, .. } => self.expr(bound, b, value, tile)?,
            StmtK::Task {
                selector,
                args,
                resources,
                ..
            } => {
                for e in selector.iter_mut().chain(args.iter_mut()) {
                    self.expr(e, b, value, tile)?;
                }
                for Resource { dims, .. } in resources.iter_mut() {
                    for Dim { start, end } in dims.iter_mut() {
                        self.expr(start, b, value, tile)?;
                        if let Some(e) = end {
                            self.expr(e, b, value, tile)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn subst_axis(
        &self,
        axis: &mut Axis,
        b: &str,
        value: &Expr,
        tile: Option<&(String, Expr, Expr)>,
        not_expr: &dyn Fn(&Ident, &str) -> R<()>,
    ) -> R<()> {
        match axis {
            Axis::Dense(..) => Ok(()),
            Axis::DenseDyn(id) | Axis::Ref(id) => not_expr(id, "an axis"),
            Axis::Ragged(e, id) | Axis::RaggedRow(e, id) => {
                not_expr(id, "an array")?;
                self.expr(e, b, value, tile)
            }
            Axis::Sparse(e, p, q) | Axis::SparseRow(e, p, q) => {
                not_expr(p, "an array")?;
                not_expr(q, "an array")?;
                self.expr(e, b, value, tile)
            }
            Axis::Tile(base, size, _) => {
                self.subst_axis(base, b, value, tile, not_expr)?;
                self.expr(size, b, value, tile)
            }
        }
    }

    fn policy(
        &self,
        p: &mut PolicyAst,
        b: &str,
        value: &Expr,
        not_expr: &dyn Fn(&Ident, &str) -> R<()>,
    ) -> R<()> {
        match p {
            PolicyAst::Affinity(e) | PolicyAst::Hash(e) => self.expr(e, b, value, None),
            PolicyAst::Static(v) => not_expr(v, "a `static` partition's loop variable"),
            PolicyAst::Threshold(sel, levels, default) => {
                self.expr(sel, b, value, None)?;
                for (_, _, p) in levels.iter_mut() {
                    self.policy(p, b, value, not_expr)?;
                }
                self.policy(default, b, value, not_expr)
            }
            PolicyAst::RoundRobin(_) | PolicyAst::WorkSteal => Ok(()),
        }
    }

    fn expr(
        &self,
        e: &mut Expr,
        b: &str,
        value: &Expr,
        tile: Option<&(String, Expr, Expr)>,
    ) -> R<()> {
        match &mut e.kind {
            ExprK::Int(_) => {}
            ExprK::Name(n) if n == b => {
                *e = Expr {
                    kind: value.kind.clone(),
                    span: e.span,
                }
            }
            ExprK::Name(_) => {}
            ExprK::Elem(arr, i) => {
                if arr.name == b {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        arr.span,
                        format!("`{b}` is a loop variable, not a runtime array"),
                    ));
                }
                self.expr(i, b, value, tile)?;
            }
            ExprK::Un(_, x) => self.expr(x, b, value, tile)?,
            ExprK::Bin(_, x, y) => {
                self.expr(x, b, value, tile)?;
                self.expr(y, b, value, tile)?;
            }
            ExprK::TileBound(end, v) => match tile {
                Some((c, size, extent)) if v.name == *c => {
                    let sp = e.span;
                    let ex = |kind| Expr { kind, span: sp };
                    let bin = |op, l: Expr, r: Expr| ex(ExprK::Bin(op, Box::new(l), Box::new(r)));
                    let var = ex(ExprK::Name(c.clone()));
                    *e = if *end {
                        bin(
                            ExprOp::MIN,
                            bin(
                                ExprOp::MUL,
                                bin(ExprOp::ADD, var, ex(ExprK::Int(1))),
                                size.clone(),
                            ),
                            extent.clone(),
                        )
                    } else {
                        bin(ExprOp::MUL, var, size.clone())
                    };
                }
                _ if v.name == b => {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        v.span,
                        format!("`{b}` is not a `tile(…)` loop's variable"),
                    ))
                }
                _ => {}
            },
            ExprK::Bind(_, _, lo, hi, body) => {
                self.expr(lo, b, value, tile)?;
                self.expr(hi, b, value, tile)?;
                self.expr(body, b, value, tile)?;
            }
        }
        Ok(())
    }
}

/// An interleaved variable's value: `b__group * n + b__member`.
fn alias(b: &str, n: u64, span: Span) -> Expr {
    let ex = |kind| Expr { kind, span };
    let name = |s: String| ex(ExprK::Name(s));
    ex(ExprK::Bin(
        ExprOp::ADD,
        Box::new(ex(ExprK::Bin(
            ExprOp::MUL,
            Box::new(name(format!("{b}__group"))),
            Box::new(ex(ExprK::Int(n))),
        ))),
        Box::new(name(format!("{b}__member"))),
    ))
}

/// Whether `e` reads the name `v` (as a variable or a tile bound's variable).
fn mentions(e: &Expr, v: &str) -> bool {
    match &e.kind {
        ExprK::Int(_) => false,
        ExprK::Name(n) => n == v,
        ExprK::Elem(a, i) => a.name == v || mentions(i, v),
        ExprK::Un(_, x) => mentions(x, v),
        ExprK::Bin(_, x, y) => mentions(x, v) || mentions(y, v),
        ExprK::TileBound(_, t) => t.name == v,
        ExprK::Bind(_, var, lo, hi, body) => {
            mentions(lo, v) || mentions(hi, v) || (var.name != v && mentions(body, v))
        }
    }
}

/// Whether a statement list names `v` anywhere (a loop variable, an expression, an axis).
fn mentions_stmts(body: &[Stmt], v: &str) -> bool {
    fn axis(a: &Axis, v: &str) -> bool {
        match a {
            Axis::Dense(..) => false,
            Axis::DenseDyn(id) | Axis::Ref(id) => id.name == v,
            Axis::Ragged(e, id) | Axis::RaggedRow(e, id) => id.name == v || mentions(e, v),
            Axis::Sparse(e, p, q) | Axis::SparseRow(e, p, q) => {
                p.name == v || q.name == v || mentions(e, v)
            }
            Axis::Tile(base, size, _) => axis(base, v) || mentions(size, v),
        }
    }
    body.iter().any(|s| match &s.kind {
        StmtK::Loop {
            var, axis: a, body, ..
        } => var.name == v || axis(a, v) || mentions_stmts(body, v),
        StmtK::Cond { pred, then, els } => {
            mentions(pred, v)
                || mentions_stmts(then, v)
                || els.as_deref().is_some_and(|e| mentions_stmts(e, v))
        }
        StmtK::Combine(b) | StmtK::Sequential(b) | StmtK::Dispatch(_, _, b) => mentions_stmts(b, v),
        StmtK::Call { args, .. } => args.iter().any(|a| a.name == v),
        StmtK::Wait { tensor, bound } => tensor.name == v || mentions(bound, v),
        StmtK::Task {
            selector,
            args,
            resources,
            ..
        } => {
            selector.iter().chain(args.iter()).any(|e| mentions(e, v))
                || resources.iter().any(|r| {
                    r.dims.iter().any(|d| {
                        mentions(&d.start, v) || d.end.as_ref().is_some_and(|e| mentions(e, v))
                    })
                })
        }
    })
}

/// The schedule's expressions with the interleaved variable `b` as its value.
fn schedule_subst(rep: &Reporter<'_>, s: &mut Schedule, b: &str, value: &Expr) -> R<()> {
    let r = Rewrite {
        rep,
        wishes: HashMap::new(),
        plans: vec![],
        params: &[],
        names: HashSet::new(),
    };
    let not_expr = |id: &Ident, what: &str| -> R<()> {
        if id.name == b {
            return Err(rep.error(
                DiagKind::Type,
                id.span,
                format!("`{b}` is interleaved, so its value is computed from the group and the member: it cannot be {what}"),
            ));
        }
        Ok(())
    };
    for k in s.knobs.iter_mut() {
        match &mut k.value {
            KnobValue::Dispatch(p, _) => r.policy(p, b, value, &not_expr)?,
            KnobValue::Expr(e) => r.expr(e, b, value, None)?,
            _ => {}
        }
    }
    Ok(())
}

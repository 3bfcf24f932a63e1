//! `order b = interleaved(n)`: the rewrite of a loop nest (see `order`'s comment for its
//! shape) — the axes' extents it needs, the new loops, the interleaved variable's value put in
//! place of its name in the body and the schedule, and the checks that it can be.

use super::*;
use crate::ast::{Dim, Resource, Schedule};

impl Rewrite<'_, '_, '_> {
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
    pub(super) fn interleave(
        &mut self,
        s: &mut Stmt,
        n: u64,
        outer: &[String],
        span: Span,
    ) -> R<()> {
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
                    return Err(super::super::rebound(self.rep, var));
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
            ExprK::RegionSize(..) => {}
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
pub(super) fn alias(b: &str, n: u64, span: Span) -> Expr {
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
        ExprK::RegionSize(..) => false,
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
pub(super) fn schedule_subst(rep: &Reporter<'_>, s: &mut Schedule, b: &str, value: &Expr) -> R<()> {
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

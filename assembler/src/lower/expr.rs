//! Expressions, names and axes.

use super::*;
use ptovm_vm::format::CostUnit;

impl<'a> Lower<'a, '_, '_> {
    /// The loop depth `name` reads in context `ctx`, or `None` for a runtime parameter.
    pub(super) fn var_depth(&self, name: &str, span: Span, ctx: Ctx) -> R<Option<u32>> {
        match self.meaning(name, span, ctx)? {
            Meaning::Var(d) => Ok(Some(d)),
            Meaning::Named(..) => Ok(None),
        }
    }

    /// What `name` means in an expression in context `ctx`: a loop variable, or the runtime
    /// scalar it names (through the current frame's call aliases).
    pub(super) fn meaning(&self, name: &str, span: Span, ctx: Ctx) -> R<Meaning<'a>> {
        let named = |n: &str| Meaning::Named(n.to_string(), None);
        match ctx {
            Ctx::Scope => match self.resolve(name, self.cur) {
                // A loop variable of another loop would otherwise be read as a runtime
                // parameter of the same name: almost certainly a mistake.
                Meaning::Named(n, _) if self.var_depths.contains_key(&n) => Err(self.rep.error(
                    DiagKind::UnknownName,
                    span,
                    format!("loop variable `{n}` is not bound here (it belongs to a loop that does not enclose this point){}", self.via_call(name)),
                )),
                m => Ok(m),
            },
            Ctx::Workload => match self.var_depths.get(name) {
                Some(Some(d)) => Ok(Meaning::Var(*d)),
                Some(None) => Err(self.rep.error(DiagKind::Type, span, format!("loop variable `{name}` is bound at different depths in the workload; a schedule cannot tell which is meant"))),
                None => Ok(named(name)),
            },
            Ctx::Cost => {
                if self.var_depths.contains_key(name) {
                    Err(self.rep.error(DiagKind::Type, span, format!("`{name}` is a loop variable; a kernel's cost reads its own parameters, `size(arg)`, `extent(arg, d)` and runtime parameters")))
                } else {
                    Ok(named(name))
                }
            }
            Ctx::Tier => {
                if self.var_depths.contains_key(name) {
                    Err(self.rep.error(DiagKind::Type, span, format!("`{name}` is a loop variable; a tier's condition reads only its tier set's value and runtime parameters")))
                } else {
                    Ok(named(name))
                }
            }
            Ctx::Plan => match self.plan_vars.iter().rposition(|v| v == name) {
                Some(d) => Ok(Meaning::Var(d as u32)),
                None => Ok(named(name)),
            },
            Ctx::NoVars | Ctx::WaitBound => {
                let what = if matches!(ctx, Ctx::WaitBound) {
                    "a `wait`'s bound stands outside every loop and"
                } else {
                    "a threshold selector is evaluated at launch and"
                };
                if self.var_depths.contains_key(name) {
                    Err(self.rep.error(DiagKind::Type, span, format!("`{name}` is a loop variable; {what} may only read runtime parameters")))
                } else {
                    Ok(named(name))
                }
            }
        }
    }

    /// Lowers an expression into the pool; returns its first node.
    pub(super) fn expr(&mut self, e: &Expr, ctx: Ctx) -> R<u16> {
        // A reduction's body is an expression of its own, before the one that holds it.
        self.lower_bodies(e, ctx)?;
        let start = self.m.exprs.len();
        let depth = self.emit_expr(e, ctx)?;
        self.m.exprs.push(Record::new(ExprOp::END as u8, 0, 0, 0));
        let len = self.m.exprs.len() - start;
        if depth > limits::MAX_EXPR_STACK {
            return Err(self.rep.error(DiagKind::Limit, e.span, format!("expression too complex: it needs {depth} evaluation stack entries, the limit is {}", limits::MAX_EXPR_STACK)));
        }
        if len > limits::MAX_EXPR_LEN {
            return Err(self.rep.error(
                DiagKind::Limit,
                e.span,
                format!(
                    "expression too long: {len} nodes, the limit is {}",
                    limits::MAX_EXPR_LEN
                ),
            ));
        }
        let nodes = self.m.exprs[start..].to_vec();
        if let Some(&id) = self.expr_ids.get(&nodes) {
            self.m.exprs.truncate(start);
            return Ok(id);
        }
        self.limit(
            self.m.exprs.len(),
            limits::MAX_EXPRS as usize,
            "expression nodes",
            e.span,
        )?;
        self.expr_ids.insert(nodes, start as u16);
        Ok(start as u16)
    }

    /// Emits postfix nodes; returns the stack depth the sub-expression needs.
    pub(super) fn emit_expr(&mut self, e: &Expr, ctx: Ctx) -> R<usize> {
        let push = |l: &mut Self, op: ExprOp, op1: u16, op2: u32| {
            l.m.exprs.push(Record::new(op as u8, 0, op1, op2))
        };
        match &e.kind {
            ExprK::Int(v) => {
                let v = self.int32(*v, e.span)?;
                push(self, ExprOp::CONST, 0, v as u32);
                Ok(1)
            }
            ExprK::Name(n) if self.tier_subst.as_ref().is_some_and(|(v, _)| v == n) => {
                // A tier's value: the task's selector, in the task's scope (and not itself
                // substituted again).
                let Some((v, sel)) = self.tier_subst.take() else {
                    return Ok(0);
                };
                let d = self.emit_expr(&sel, Ctx::Scope);
                self.tier_subst = Some((v, sel));
                d
            }
            ExprK::Name(n)
                if matches!(ctx, Ctx::Cost)
                    && self
                        .cost_of
                        .is_some_and(|k| k.params.iter().any(|p| &p.name == n)) =>
            {
                let k = self.cost_of.map_or(0, |k| {
                    k.params.iter().position(|p| &p.name == n).unwrap_or(0)
                });
                push(self, ExprOp::ARG, k as u16, 0);
                Ok(1)
            }
            ExprK::RegionSize(arg, dim) => {
                let Some(k) = self.cost_of.filter(|_| matches!(ctx, Ctx::Cost)) else {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        e.span,
                        "`size(…)` and `extent(…)` measure a task's region: they may only be used in a kernel's `cost(…)`",
                    ));
                };
                let Some(j) = k.args.iter().position(|(_, a)| a.name == arg.name) else {
                    return Err(self.rep.error(
                        DiagKind::UnknownName,
                        arg.span,
                        format!(
                            "kernel `{}` has no argument `{}` (its arguments: {})",
                            k.name.name,
                            arg.name,
                            k.args
                                .iter()
                                .map(|(_, a)| a.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                };
                let dim = match dim {
                    None => 0,
                    Some((d, span)) if *d < limits::MAX_RANK as u64 => *d as u32 + 1,
                    Some((d, span)) => {
                        return Err(self.rep.error(
                            DiagKind::Limit,
                            *span,
                            format!(
                                "dimension {d}: a region has at most {} dimensions (0 .. {})",
                                limits::MAX_RANK,
                                limits::MAX_RANK - 1
                            ),
                        ))
                    }
                };
                push(self, ExprOp::SIZE, j as u16, dim);
                Ok(1)
            }
            ExprK::Name(n) => {
                match self.meaning(n, e.span, ctx)? {
                    Meaning::Var(d) => push(self, ExprOp::VAR, d as u16, 0),
                    Meaning::Named(name, _) => {
                        let s = self.slot(&Ident { name, span: e.span }, ParamKind::Scalar)?;
                        push(self, ExprOp::PARAM, s, 0);
                    }
                }
                Ok(1)
            }
            ExprK::Elem(arr, idx) => {
                // The array's name, through the current frame's call aliases.
                let name = match ctx {
                    Ctx::Scope => match self.resolve(&arr.name, self.cur) {
                        Meaning::Named(n, _) => Some(n),
                        Meaning::Var(_) => None,
                    },
                    _ => Some(arr.name.clone()),
                };
                let name = match name {
                    Some(n) if !matches!(self.var_depths.get(&n), Some(Some(_))) => n,
                    _ => {
                        return Err(self.rep.error(
                            DiagKind::Type,
                            arr.span,
                            format!(
                                "`{}` is a loop variable, not a runtime array{}",
                                arr.name,
                                self.via_call(&arr.name)
                            ),
                        ))
                    }
                };
                let d = self.emit_expr(idx, ctx)?;
                let s = self.slot(
                    &Ident {
                        name,
                        span: arr.span,
                    },
                    ParamKind::Array,
                )?;
                push(self, ExprOp::ELEM, s, 0);
                Ok(d)
            }
            ExprK::Un(op, a) => {
                let d = self.emit_expr(a, ctx)?;
                push(self, *op, 0, 0);
                Ok(d)
            }
            ExprK::Bin(op, a, b) => {
                let da = self.emit_expr(a, ctx)?;
                let db = self.emit_expr(b, ctx)?;
                push(self, *op, 0, 0);
                Ok(da.max(db + 1))
            }
            ExprK::TileBound(end, var) => {
                let tile = match self.meaning(&var.name, var.span, ctx)? {
                    Meaning::Var(d) => self.tiles.get(&d).cloned().map(|t| (d, t)),
                    Meaning::Named(..) => None,
                };
                let Some((d, t)) = tile else {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        var.span,
                        format!(
                            "`{}` is not the variable of an enclosing `tile(…)` loop",
                            var.name
                        ),
                    ));
                };
                let rec = |op: ExprOp, op1: u16, op2: u32| Record::new(op as u8, 0, op1, op2);
                // start = v × size; end = min((v + 1) × size, extent).
                let mut nodes = vec![rec(ExprOp::VAR, d as u16, 0)];
                if *end {
                    nodes.extend([rec(ExprOp::CONST, 0, 1), rec(ExprOp::ADD, 0, 0)]);
                }
                nodes.extend(t.size.iter().copied());
                nodes.push(rec(ExprOp::MUL, 0, 0));
                if *end {
                    nodes.extend(t.extent.iter().copied());
                    nodes.push(rec(ExprOp::MIN, 0, 0));
                }
                let depth = stack_need(&nodes);
                self.m.exprs.extend(nodes);
                Ok(depth)
            }
            ExprK::Bind(op, _, lo, hi, body) => {
                let dl = self.emit_expr(lo, ctx)?;
                let dh = self.emit_expr(hi, ctx)?;
                let body = self.bodies.get(&(&**body as *const Expr)).copied();
                let Some(body) = body else {
                    // `lower_bodies` lowered it (or refused the reduction) first.
                    return Err(self.rep.error(
                        DiagKind::Type,
                        e.span,
                        "internal error: a reduction's body was not lowered",
                    ));
                };
                push(self, *op, self.plan_vars.len() as u16, body as u32);
                Ok(dl.max(dh + 1))
            }
        }
    }

    /// For a loop over `axis_id` when it is a tiled axis: its size and its base's extent as
    /// nodes (`tile_start`, `tile_end`).
    pub(super) fn tile_bounds(&self, axis_id: u16, span: Span) -> R<Option<TileBounds>> {
        let a = self.m.axes[axis_id as usize];
        if a.opcode != Opcode::AXIS_TILE as u8 {
            return Ok(None);
        }
        let nodes = |start: u32| -> Vec<Record> {
            self.m.exprs[start as usize..]
                .iter()
                .take_while(|r| r.opcode != ExprOp::END as u8)
                .copied()
                .collect()
        };
        let base = self.m.axes[a.op1() as usize];
        let rec = |op: ExprOp, op1: u16, op2: u32| Record::new(op as u8, 0, op1, op2);
        let extent = match Opcode::from_u8(base.opcode) {
            Some(Opcode::AXIS_DENSE) => {
                let n = self.int32(base.op2() as u64, span)?;
                vec![rec(ExprOp::CONST, 0, n as u32)]
            }
            Some(Opcode::AXIS_DENSE_DYN) => vec![rec(ExprOp::PARAM, base.op1(), 0)],
            _ => {
                let mut row = nodes(base.op2());
                row.push(rec(ExprOp::ELEM, base.op1(), 0));
                row
            }
        };
        Ok(Some(TileBounds {
            size: nodes(a.op2()),
            extent,
        }))
    }

    /// Lowers the body of every reduction and search in `e` (innermost first), each with its
    /// variable bound, into [`Lower::bodies`]; refuses them outside a planned value.
    pub(super) fn lower_bodies(&mut self, e: &Expr, ctx: Ctx) -> R<()> {
        match &e.kind {
            ExprK::Int(_) | ExprK::Name(_) | ExprK::TileBound(..) | ExprK::RegionSize(..) => Ok(()),
            ExprK::Elem(_, a) | ExprK::Un(_, a) => self.lower_bodies(a, ctx),
            ExprK::Bin(_, a, b) => {
                self.lower_bodies(a, ctx)?;
                self.lower_bodies(b, ctx)
            }
            ExprK::Bind(op, var, lo, hi, body) => {
                if !matches!(ctx, Ctx::Plan) {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        e.span,
                        format!("`{}(v in …)` may only compute a `@plan` value (it is evaluated once, at launch)", op.symbol()),
                    ));
                }
                self.lower_bodies(lo, ctx)?;
                self.lower_bodies(hi, ctx)?;
                if self.plan_vars.len() >= limits::MAX_PLAN_NESTING {
                    return Err(self.rep.error(
                        DiagKind::Nesting,
                        e.span,
                        format!(
                            "reductions and searches nest more than {} deep",
                            limits::MAX_PLAN_NESTING
                        ),
                    ));
                }
                if self.plan_vars.contains(&var.name) {
                    return Err(self.rep.error(
                        DiagKind::DuplicateName,
                        var.span,
                        format!("`{}` is already bound by an enclosing reduction", var.name),
                    ));
                }
                self.plan_vars.push(var.name.clone());
                let id = self.expr(body, ctx);
                self.plan_vars.pop();
                self.bodies.insert(&**body as *const Expr, id?);
                Ok(())
            }
        }
    }

    /// Registers the `@plan` names (before the workload reads them).
    pub(super) fn plan_names(&mut self) -> R<()> {
        let ast = self.ast;
        if ast.plans.len() > limits::MAX_PLANS as usize {
            let p = &ast.plans[limits::MAX_PLANS as usize];
            return Err(self.rep.error(
                DiagKind::Limit,
                p.name.span,
                format!("more than {} planned values", limits::MAX_PLANS),
            ));
        }
        for (i, p) in ast.plans.iter().enumerate() {
            self.name_fits(&p.name)?;
            let clash = if self.plan_ids.contains_key(&p.name.name) {
                Some("another `@plan`")
            } else if ast.params.iter().any(|d| d.name.name == p.name.name) {
                Some("a `@param`")
            } else {
                None
            };
            if let Some(what) = clash {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    p.name.span,
                    format!("`{}` is already {what}", p.name.name),
                ));
            }
            self.plan_ids.insert(p.name.name.clone(), i as u16);
        }
        Ok(())
    }

    /// Lowers the `@plan` values (after the workload, so the given runtime parameters keep
    /// their slots) and gives every read of one its slot, `params + i`.
    /// Lowers every kernel's `cost(…)` (spec/pto.md §4.8) into its entry.
    pub(super) fn costs(&mut self) -> R<()> {
        let ast = self.ast;
        for (decl, i) in ast.kernels.iter().zip(0..) {
            let Some(c) = &decl.cost else { continue };
            let unit = match &c.unit {
                None => CostUnit::Ns,
                Some(u) if u.name == "ns" => CostUnit::Ns,
                Some(u) if u.name == "cycles" => CostUnit::Cycles,
                Some(u) => {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        u.span,
                        format!("`{}` is not a unit of a cost: `ns` or `cycles`", u.name),
                    ))
                }
            };
            self.cost_of = Some(decl);
            let expr = self.expr(&c.expr, Ctx::Cost);
            self.cost_of = None;
            let entry = &mut self.m.kernels[i].entry;
            entry.cost_expr = U16::new(expr?);
            entry.cost_unit = unit as u8;
        }
        Ok(())
    }

    pub(super) fn plans(&mut self) -> R<()> {
        let ast = self.ast;
        for (i, p) in ast.plans.iter().enumerate() {
            self.plan_now = Some(i as u16);
            let expr = self.expr(&p.expr, Ctx::Plan)?;
            self.m.plans.push(crate::model::Plan {
                name: p.name.name.clone(),
                expr,
            });
        }
        self.plan_now = None;
        let base = self.m.params.len() as u16;
        let place = |slot: u16| {
            if slot >= PLAN_MARK {
                slot - PLAN_MARK + base
            } else {
                slot
            }
        };
        for r in &mut self.m.exprs {
            if r.opcode == ExprOp::PARAM as u8 {
                *r = Record::new(r.opcode, r.flags, place(r.op1()), r.op2());
            }
        }
        for r in &mut self.m.axes {
            if r.opcode == Opcode::AXIS_DENSE_DYN as u8 {
                *r = Record::new(r.opcode, r.flags, place(r.op1()), r.op2());
            }
        }
        for t in &mut self.m.tensors {
            for d in t.entry.dims.iter_mut() {
                let x = d.get();
                if x & DIM_IS_SLOT != 0 {
                    *d = U32::new(DIM_IS_SLOT | place((x & 0xFFFF) as u16) as u32);
                }
            }
        }
        Ok(())
    }

    /// Loops a task needs around it when the expression at `start` is a dispatch key.
    pub(super) fn need_of(&self, start: u16) -> u32 {
        let mut need = 0;
        for r in &self.m.exprs[start as usize..] {
            match ExprOp::from_u8(r.opcode) {
                Some(ExprOp::VAR) => need = need.max(r.op1() as u32 + 1),
                Some(op) if op.kind() == ExprKind::End => break,
                _ => {}
            }
        }
        need
    }

    pub(super) fn add_axis(&mut self, r: Record, span: Span) -> R<u16> {
        if let Some(&id) = self.axis_ids.get(&r) {
            return Ok(id);
        }
        let id = self.m.axes.len();
        self.limit(id + 1, limits::MAX_AXES as usize, "axes", span)?;
        self.m.axes.push(r);
        self.axis_ids.insert(r, id as u16);
        Ok(id as u16)
    }

    /// Lowers an axis in the current scope; returns (axis index, is sparse).
    pub(super) fn axis(&mut self, a: &'a Axis) -> R<(u16, bool)> {
        match a {
            Axis::Dense(n, span) => {
                let n = self.u32(*n, *span, 0, "extent")?;
                Ok((
                    self.add_axis(Record::new(Opcode::AXIS_DENSE as u8, 0, 0, n), *span)?,
                    false,
                ))
            }
            Axis::DenseDyn(name) => {
                let s = self.param_slot(name, ParamKind::Scalar)?;
                Ok((
                    self.add_axis(
                        Record::new(Opcode::AXIS_DENSE_DYN as u8, 0, s, 0),
                        name.span,
                    )?,
                    false,
                ))
            }
            Axis::Ragged(row, lens) => {
                let e = self.expr(row, Ctx::Scope)?;
                let s = self.param_slot(lens, ParamKind::Array)?;
                Ok((
                    self.add_axis(
                        Record::new(Opcode::AXIS_RAGGED as u8, 0, s, e as u32),
                        lens.span,
                    )?,
                    false,
                ))
            }
            Axis::RaggedRow(row, lens) => {
                let s = self.param_slot(lens, ParamKind::Array)?;
                let e = self.expr(row, Ctx::Scope)?;
                Ok((
                    self.add_axis(
                        Record::new(Opcode::AXIS_RAGGED_ROW as u8, 0, s, e as u32),
                        lens.span,
                    )?,
                    false,
                ))
            }
            Axis::Sparse(row, indptr, indices) | Axis::SparseRow(row, indptr, indices) => {
                let op = if matches!(a, Axis::Sparse(..)) {
                    Opcode::AXIS_SPARSE
                } else {
                    Opcode::AXIS_SPARSE_ROW
                };
                let e = self.expr(row, Ctx::Scope)?;
                let p = self.param_slot(indptr, ParamKind::Array)?;
                let i = self.param_slot(indices, ParamKind::Array)?;
                let r = Record::new(op as u8, 0, p, (e as u32) | ((i as u32) << 16));
                Ok((self.add_axis(r, indptr.span)?, true))
            }
            Axis::Tile(base, size, span) => {
                if !matches!(
                    **base,
                    Axis::Dense(..) | Axis::DenseDyn(_) | Axis::RaggedRow(..)
                ) {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        *span,
                        "`tile(axis, size)` tiles a `dense[N]`, `dense_dyn(n)` or `dense_dyn(lengths[row])` axis",
                    ));
                }
                let (b, _) = self.axis(base)?;
                let e = self.expr(size, Ctx::Scope)?;
                Ok((
                    self.add_axis(Record::new(Opcode::AXIS_TILE as u8, 0, b, e as u32), *span)?,
                    false,
                ))
            }
            Axis::Ref(name) => match self.resolve(&name.name, self.cur) {
                // A parameter of the selected workload, possibly passed down by calls: lowered
                // in that workload's scope (a ragged or sparse parameter's `outer` or `row`
                // may read its loop variables).
                Meaning::Named(_, Some(inner)) => {
                    let saved = std::mem::replace(&mut self.cur, 0);
                    let r = self.axis(inner);
                    self.cur = saved;
                    r
                }
                Meaning::Var(_) => Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "`{}` is a loop variable, a value, not an axis{}",
                        name.name,
                        self.via_call(&name.name)
                    ),
                )),
                Meaning::Named(..) => Err(self.rep.error(
                    DiagKind::UnknownName,
                    name.span,
                    format!(
                        "unknown axis `{}`: not a parameter of this workload{}",
                        name.name,
                        self.via_call(&name.name)
                    ),
                )),
            },
        }
    }
}

/// The evaluation stack postfix `nodes` need (each well formed: leaves push, unary operators
/// keep, binary ones pop one).
fn stack_need(nodes: &[Record]) -> usize {
    let (mut sp, mut most) = (0usize, 0usize);
    for r in nodes {
        match ExprOp::from_u8(r.opcode).map(|o| o.kind()) {
            Some(ExprKind::Leaf) => sp += 1,
            Some(ExprKind::Binary | ExprKind::Binder) => sp = sp.saturating_sub(1),
            _ => {}
        }
        most = most.max(sp);
    }
    most
}

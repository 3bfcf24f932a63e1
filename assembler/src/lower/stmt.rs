//! Statements and tasks: the code section.

use super::*;

impl<'a> Lower<'a, '_, '_> {
    pub(super) fn emit(&mut self, op: Opcode, flags: u8, op1: u16, op2: u32) -> usize {
        self.m.code.push(Record::new(op as u8, flags, op1, op2));
        self.m.code.len() - 1
    }

    pub(super) fn patch_end(&mut self, at: usize, span: Span) -> R<()> {
        let end = self.m.code.len();
        self.limit(
            end + 1,
            limits::MAX_INSTRUCTIONS as usize,
            "instructions",
            span,
        )?;
        let op1 = self.m.code[at].op1();
        let r = self.m.code[at];
        self.m.code[at] = Record::new(r.opcode, r.flags, op1, end as u32);
        Ok(())
    }

    pub(super) fn open(&mut self, span: Span) -> R<()> {
        self.frames += 1;
        if self.frames > limits::MAX_NESTING {
            return Err(self.rep.error(
                DiagKind::Nesting,
                span,
                format!("statements nested deeper than {}", limits::MAX_NESTING),
            ));
        }
        Ok(())
    }

    pub(super) fn count(&self, n: usize, span: Span) -> R<u16> {
        u16::try_from(n).map_err(|_| {
            self.rep.error(
                DiagKind::Limit,
                span,
                format!("{n} statements in one block; the limit is 65535"),
            )
        })
    }

    pub(super) fn stmts(&mut self, body: &'a [Stmt]) -> R<()> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &'a Stmt) -> R<()> {
        self.limit(
            self.m.code.len() + 1,
            limits::MAX_INSTRUCTIONS as usize,
            "instructions",
            s.span,
        )?;
        match &s.kind {
            StmtK::Loop {
                op,
                var,
                axis,
                body,
            } => {
                self.open(s.span)?;
                if self.scope.len() >= limits::MAX_LOOP_DEPTH {
                    return Err(self.rep.error(
                        DiagKind::Nesting,
                        s.span,
                        format!("loops nested deeper than {}", limits::MAX_LOOP_DEPTH),
                    ));
                }
                if self.bound_here(&var.name) {
                    return Err(super::rebound(self.rep, var));
                }
                let (axis_id, sparse) = self.axis(axis)?;
                if *op == Opcode::SELECT && !sparse {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        s.span,
                        "`select` needs a sparse axis: `select v in sparse(outer, indptr, indices)` or `sparse_row(row, indptr, indices)`",
                    ));
                }
                let at = self.emit(*op, 0, axis_id, 0);
                let depth = self.scope.len() as u32;
                if let Some(t) = self.tile_bounds(axis_id, s.span)? {
                    self.tiles.insert(depth, t);
                }
                self.scope.push(var.name.clone());
                self.stmts(body)?;
                self.scope.pop();
                self.tiles.remove(&depth);
                self.patch_end(at, s.span)?;
                self.frames -= 1;
            }
            StmtK::Wait { tensor, bound } => self.wait(s, tensor, bound)?,
            StmtK::Cond { pred, then, els } => {
                self.open(s.span)?;
                self.guards += 1;
                let e = self.expr(pred, Ctx::Scope)?;
                let at = self.emit(
                    Opcode::COND,
                    if els.is_some() { COND_HAS_ELSE } else { 0 },
                    e,
                    0,
                );
                self.stmts(then)?;
                self.patch_end(at, s.span)?;
                if let Some(els) = els {
                    let n = self.count(els.len(), s.span)?;
                    let at = self.emit(Opcode::SEQUENTIAL, 0, n, 0);
                    self.stmts(els)?;
                    self.patch_end(at, s.span)?;
                }
                self.guards -= 1;
                self.frames -= 1;
            }
            StmtK::Combine(b) | StmtK::Sequential(b) => {
                self.open(s.span)?;
                let op = if matches!(s.kind, StmtK::Combine(_)) {
                    Opcode::COMBINE
                } else {
                    Opcode::SEQUENTIAL
                };
                let n = self.count(b.len(), s.span)?;
                let at = self.emit(op, 0, n, 0);
                self.stmts(b)?;
                self.patch_end(at, s.span)?;
                self.frames -= 1;
            }
            StmtK::Dispatch(p, pspan, b) => {
                self.open(s.span)?;
                let (flags, arg, need) = match p {
                    PolicyAst::RoundRobin(None) | PolicyAst::WorkSteal => {
                        (Policy::RoundRobin, 0u16, 0u32)
                    }
                    PolicyAst::Affinity(e) | PolicyAst::Hash(e) => {
                        let key = self.expr(e, Ctx::Scope)?;
                        let k = if matches!(p, PolicyAst::Hash(_)) {
                            Policy::Hash
                        } else {
                            Policy::Affinity
                        };
                        (k, key, self.need_of(key))
                    }
                    PolicyAst::Static(v) => match self.var_depth(&v.name, v.span, Ctx::Scope)? {
                        Some(d) => (Policy::StaticPartition, d as u16, d + 1),
                        None => {
                            return Err(self.rep.error(
                                DiagKind::UnknownName,
                                v.span,
                                format!("`{}` is not an enclosing loop variable", v.name),
                            ))
                        }
                    },
                    PolicyAst::RoundRobin(Some(_)) => {
                        return Err(self.rep.error(
                            DiagKind::Type,
                            *pspan,
                            "the AICPU count can only be set in a schedule",
                        ))
                    }
                    PolicyAst::Threshold(..) => {
                        return Err(self.rep.error(
                            DiagKind::Type,
                            *pspan,
                            "a threshold policy can only be a schedule's dispatch",
                        ))
                    }
                };
                let at = self.emit(Opcode::DISPATCH_FILTER, flags as u8, arg, 0);
                let saved = std::mem::replace(&mut self.need, (need, *pspan));
                self.guards += 1;
                self.stmts(b)?;
                self.guards -= 1;
                self.need = saved;
                self.patch_end(at, s.span)?;
                self.frames -= 1;
            }
            StmtK::Call { target, args } => self.call(target, args)?,
            StmtK::Task {
                kernel,
                selector: Some(sel),
                args,
                resources,
            } => self.tiered_task(s, kernel, sel, args, resources)?,
            StmtK::Task {
                kernel,
                selector: None,
                args,
                resources,
            } => {
                if self.tier_sets.contains_key(&kernel.name) {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        kernel.span,
                        format!(
                            "`{0}` is a tier set: give the value it chooses by, `task @{0}[value](…)`",
                            kernel.name
                        ),
                    ));
                }
                self.task(s, kernel, args, resources, 0)?
            }
        }
        Ok(())
    }

    /// `wait T <= bound` (spec/pto.md §4.7): a `READBACK` of tensor `T` into the runtime
    /// array `T`, at the top level of the workload.
    fn wait(&mut self, s: &Stmt, tensor: &Ident, bound: &Expr) -> R<()> {
        if !self.scope.is_empty() || self.guards > 0 || self.cur != 0 {
            return Err(self.rep.error(
                DiagKind::Type,
                s.span,
                "`wait` stands at the top level of the workload (inside `sequential` or `combine` at most), where every AICPU reaches it once: not in a loop, a `cond`, a dispatch block or a called workload",
            ));
        }
        let Some(&tid) = self.tensor_ids.get(&tensor.name) else {
            return Err(self.rep.error(
                DiagKind::UnknownName,
                tensor.span,
                format!(
                    "`{}` is not a declared tensor (`wait` reads back a tensor its tasks write: declare it with `@tensor {}: i32[...]`)",
                    tensor.name, tensor.name
                ),
            ));
        };
        let t = &self.m.tensors[tid as usize].entry;
        if t.dtype != DType::I32 as u8 && t.dtype != DType::U32 as u8 {
            return Err(self.rep.error(
                DiagKind::Type,
                tensor.span,
                format!(
                    "`{}` is read back as a runtime array of integers: its elements must be i32 or u32",
                    tensor.name
                ),
            ));
        }
        if !self.waited.insert(tensor.name.clone()) {
            return Err(self.rep.error(
                DiagKind::DuplicateName,
                tensor.span,
                format!("`{}` is read back twice", tensor.name),
            ));
        }
        let slot = self.slot(tensor, ParamKind::Array)?;
        let b = self.expr(bound, Ctx::WaitBound)?;
        self.emit(Opcode::READBACK, 0, tid, slot as u32 | (b as u32) << 16);
        Ok(())
    }

    pub(super) fn task(
        &mut self,
        s: &Stmt,
        kernel: &Ident,
        args: &[Expr],
        resources: &[crate::ast::Resource],
        tier: u8,
    ) -> R<()> {
        let (need, pspan) = self.need;
        if need as usize > self.scope.len() {
            let line = self.line_of(pspan);
            return Err(self.rep.error(
                DiagKind::Type,
                s.span,
                format!(
                    "the dispatch policy at line {} reads the loop variable at depth {}, but this task is inside only {} loop(s)",
                    line,
                    need - 1,
                    self.scope.len()
                ),
            ));
        }
        if args.len() > limits::MAX_TASK_PARAMS {
            return Err(self.rep.error(
                DiagKind::Limit,
                kernel.span,
                format!(
                    "{} task parameters; the limit is {}",
                    args.len(),
                    limits::MAX_TASK_PARAMS
                ),
            ));
        }
        if let Some(st) = self.stream {
            if st.need as usize > self.scope.len() {
                let line = self.line_of(st.span);
                return Err(self.rep.error(
                    DiagKind::Type,
                    s.span,
                    format!(
                        "`stream_by` at line {} reads the loop variable at depth {}, but this task is inside only {} loop(s)",
                        line,
                        st.need - 1,
                        self.scope.len()
                    ),
                ));
            }
        }
        let streamed = usize::from(self.stream.is_some());
        if resources.len() + streamed > limits::MAX_TASK_IO {
            return Err(self.rep.error(
                DiagKind::Limit,
                kernel.span,
                format!(
                    "{} task resources{}; the limit is {}",
                    resources.len(),
                    if streamed == 1 {
                        " and the stream-order record of `stream_by`"
                    } else {
                        ""
                    },
                    limits::MAX_TASK_IO
                ),
            ));
        }
        let (kid, decl) = match self.kernel_ids.get(&kernel.name) {
            Some(k) => *k,
            None => {
                self.rep.warn(
                    DiagKind::UndeclaredKernel,
                    kernel.span,
                    format!(
                        "kernel `{}` is not declared: it runs on the vector pool and every resource is treated as read-write (declare it with `@kernel {}(...): cube|vector(in a, out b, ...)`)",
                        kernel.name, kernel.name
                    ),
                );
                self.name_fits(kernel)?;
                let id = self.m.kernels.len();
                self.limit(id + 1, limits::MAX_KERNELS as usize, "kernels", kernel.span)?;
                self.m.kernels.push(Kernel {
                    name: kernel.name.clone(),
                    entry: KernelEntry {
                        pool: Pool::Vector as u8,
                        flags: KERNEL_UNDECLARED,
                        ..Default::default()
                    },
                });
                self.kernel_ids
                    .insert(kernel.name.clone(), (id as u16, None));
                (id as u16, None)
            }
        };
        if let Some(d) = decl {
            if d.params.len() != args.len() {
                return Err(self.rep.error(
                    DiagKind::Arity,
                    kernel.span,
                    format!(
                        "kernel `{}` takes {} parameter(s) but {} are given",
                        kernel.name,
                        d.params.len(),
                        args.len()
                    ),
                ));
            }
            if d.args.len() != resources.len() {
                return Err(self.rep.error(
                    DiagKind::Arity,
                    kernel.span,
                    format!(
                        "kernel `{}` takes {} resource(s) but {} are given",
                        kernel.name,
                        d.args.len(),
                        resources.len()
                    ),
                ));
            }
        }
        self.emit(
            Opcode::TASK,
            tier,
            kid,
            args.len() as u32 | ((resources.len() + streamed) as u32) << 16,
        );
        for a in args {
            let var = match &a.kind {
                ExprK::Name(n) => match self.resolve(n, self.cur) {
                    Meaning::Var(d) => Some(d),
                    Meaning::Named(..) => None,
                },
                _ => None,
            };
            match (&a.kind, var) {
                (ExprK::Int(v), _) => {
                    let v = self.int32(*v, a.span)?;
                    self.emit(Opcode::PARAM_CONST, 0, 0, v as u32);
                }
                (_, Some(d)) => {
                    self.emit(Opcode::PARAM_LOOPVAR, 0, d as u16, 0);
                }
                _ => {
                    let e = self.expr(a, Ctx::Scope)?;
                    self.emit(Opcode::PARAM_EXPR, 0, 0, e as u32);
                }
            }
        }
        for (i, r) in resources.iter().enumerate() {
            let tid = match self.tensor_ids.get(&r.name.name) {
                Some(t) => *t,
                None => {
                    self.rep.warn(
                        DiagKind::UndeclaredTensor,
                        r.name.span,
                        format!("resource `{}` has no `@tensor` declaration: its shape is unknown and its regions are not bounds-checked", r.name.name),
                    );
                    self.add_tensor(
                        &r.name,
                        TensorEntry {
                            flags: U32::new(TENSOR_IMPLICIT),
                            ..Default::default()
                        },
                    )?
                }
            };
            let t = &self.m.tensors[tid as usize].entry;
            if r.dims.len() > limits::MAX_RANK {
                return Err(self.rep.error(
                    DiagKind::Limit,
                    r.span,
                    format!(
                        "{} region dimensions; the limit is {}",
                        r.dims.len(),
                        limits::MAX_RANK
                    ),
                ));
            }
            if t.flags.get() & TENSOR_IMPLICIT == 0 && r.dims.len() > t.rank as usize {
                return Err(self.rep.error(
                    DiagKind::Type,
                    r.span,
                    format!(
                        "tensor `{}` has rank {} but {} indices are given",
                        r.name.name,
                        t.rank,
                        r.dims.len()
                    ),
                ));
            }
            let first = if r.dims.is_empty() {
                0
            } else {
                self.m.regions.len()
            };
            let mut dims = Vec::with_capacity(r.dims.len());
            for d in &r.dims {
                let start = self.expr(&d.start, Ctx::Scope)?;
                let end = match &d.end {
                    Some(e) => self.expr(e, Ctx::Scope)?,
                    None => NONE16,
                };
                dims.push(RegionDim {
                    start: U16::new(start),
                    end: U16::new(end),
                });
            }
            self.m.regions.extend(dims);
            self.limit(
                self.m.regions.len(),
                limits::MAX_REGIONS as usize,
                "region dimensions",
                r.span,
            )?;
            let dir = match decl {
                Some(d) => Dir::from_name(&d.args[i].0.name).unwrap_or(Dir::InOut),
                None => Dir::InOut,
            };
            self.emit(dir.io_opcode(), r.dims.len() as u8, tid, first as u32);
        }
        if let Some(st) = self.stream {
            self.emit(Dir::InOut.io_opcode(), 1, st.tensor, st.region);
        }
        Ok(())
    }
}

/// The tensors a workload body reads back (`wait`), with where (nested ones too, which are
/// then reported where they stand).
pub(super) fn collect_waits(body: &[Stmt], out: &mut HashMap<String, Span>) {
    for s in body {
        match &s.kind {
            StmtK::Wait { tensor, .. } => {
                out.entry(tensor.name.clone()).or_insert(s.span);
            }
            StmtK::Loop { body, .. }
            | StmtK::Combine(body)
            | StmtK::Sequential(body)
            | StmtK::Dispatch(_, _, body) => collect_waits(body, out),
            StmtK::Cond { then, els, .. } => {
                collect_waits(then, out);
                if let Some(e) = els {
                    collect_waits(e, out);
                }
            }
            StmtK::Call { .. } | StmtK::Task { .. } => {}
        }
    }
}

//! Semantic checks and lowering of a `.pto` syntax tree to a [`Module`] (spec/pto.md §5–6).
//! Every check reports the first problem with its source location.

use std::collections::{HashMap, HashSet};

use ptovm_vm::format::{
    limits, KernelEntry, PolicySpec, RegionDim, TensorEntry, COND_HAS_ELSE, DIM_IS_SLOT,
    KERNEL_UNDECLARED, NONE16, TENSOR_IMPLICIT,
};
use ptovm_vm::{
    DType, Dir, ExprKind, ExprOp, Opcode, ParamKind, Policy, Pool, ReadyPolicy, Record,
    StartPolicy, Timing, WindowMode,
};
use zerocopy::little_endian::{U16, U32};

use crate::ast::{
    Axis, Expr, ExprK, Ident, KernelDecl, KnobValue, ModuleAst, PolicyAst, Stmt, StmtK, Workload,
};
use crate::diag::{AsmError, DiagKind, Reporter, Span};
use crate::model::{Kernel, Module, Param, Tensor};

/// Which workload and schedule of a module to assemble.
#[derive(Clone, Debug, Default)]
pub struct Select {
    /// Workload name; default: the first.
    pub workload: Option<String>,
    /// Schedule name; default: the first schedule for the workload.
    pub schedule: Option<String>,
}

/// The schedule name given to a module that has no `@schedule` for its workload.
pub const DEFAULT_SCHEDULE: &str = "default";

/// How names in an expression resolve.
#[derive(Clone, Copy)]
enum Ctx {
    /// Loop variables of the enclosing loops (the lowering's scope).
    Scope,
    /// Loop variables by name anywhere in the workload (schedule expressions).
    Workload,
    /// No loop variables (threshold selectors).
    NoVars,
}

type R<T> = Result<T, AsmError>;

struct Lower<'a, 'r, 's> {
    rep: &'r mut Reporter<'s>,
    m: Module,
    slots: HashMap<String, u16>,
    tensor_ids: HashMap<String, u16>,
    kernel_ids: HashMap<String, (u16, Option<&'a KernelDecl>)>,
    axis_ids: HashMap<Record, u16>,
    /// Expressions already in the pool (identical ones are shared).
    expr_ids: HashMap<Vec<Record>, u16>,
    wparams: HashMap<String, &'a Axis>,
    scope: Vec<String>,
    frames: usize,
    /// Loop variable name → its depth, or `None` if the name is bound at several depths.
    var_depths: HashMap<String, Option<u32>>,
    /// Loops a task needs around it for the policy in force, and that policy's text span.
    need: (u32, Span),
}

/// Lowers the selected workload of `ast`.
pub fn lower(rep: &mut Reporter<'_>, ast: &ModuleAst, sel: &Select) -> R<Module> {
    let eof = Span::new(rep.src.len(), rep.src.len());
    // Names must be unique per kind.
    let mut seen: HashMap<(&str, &str), Span> = HashMap::new();
    let items = ast
        .workloads
        .iter()
        .map(|w| ("workload", &w.name))
        .chain(ast.schedules.iter().map(|s| ("schedule", &s.name)))
        .chain(ast.tensors.iter().map(|t| ("tensor", &t.name)))
        .chain(ast.kernels.iter().map(|k| ("kernel", &k.name)));
    for (kind, id) in items {
        if let Some(prev) = seen.insert((kind, id.name.as_str()), id.span) {
            let d = crate::diag::Diagnostic::new(
                crate::diag::Severity::Error,
                DiagKind::DuplicateName,
                "",
                rep.file,
                rep.src,
                prev,
            );
            return Err(rep.error(
                DiagKind::DuplicateName,
                id.span,
                format!("{kind} `{}` is already defined at line {}", id.name, d.line),
            ));
        }
    }
    for s in &ast.schedules {
        if !ast.workloads.iter().any(|w| w.name.name == s.workload.name) {
            return Err(rep.error(
                DiagKind::UnknownName,
                s.workload.span,
                format!(
                    "schedule `{}` is for unknown workload `{}`",
                    s.name.name, s.workload.name
                ),
            ));
        }
    }
    let w: &Workload = match &sel.workload {
        Some(n) => match ast.workloads.iter().find(|w| &w.name.name == n) {
            Some(w) => w,
            None => {
                return Err(rep.error(
                    DiagKind::UnknownName,
                    eof,
                    format!(
                        "the module has no workload `{n}` (it has: {})",
                        names(ast.workloads.iter().map(|w| &w.name.name))
                    ),
                ))
            }
        },
        None => match ast.workloads.first() {
            Some(w) => w,
            None => return Err(rep.error(DiagKind::Syntax, eof, "the module has no `@workload`")),
        },
    };
    let sched = match &sel.schedule {
        Some(n) => match ast.schedules.iter().find(|s| &s.name.name == n) {
            Some(s) if s.workload.name == w.name.name => Some(s),
            Some(s) => {
                return Err(rep.error(
                    DiagKind::UnknownName,
                    s.workload.span,
                    format!(
                        "schedule `{n}` is for workload `{}`, not `{}`",
                        s.workload.name, w.name.name
                    ),
                ))
            }
            None => {
                return Err(rep.error(
                    DiagKind::UnknownName,
                    eof,
                    format!(
                        "the module has no schedule `{n}` (it has: {})",
                        names(ast.schedules.iter().map(|s| &s.name.name))
                    ),
                ))
            }
        },
        None => ast
            .schedules
            .iter()
            .find(|s| s.workload.name == w.name.name),
    };
    let sched_name = sched.map_or(DEFAULT_SCHEDULE.to_string(), |s| s.name.name.clone());
    let mut l = Lower {
        rep,
        m: Module::new(&w.name.name, &sched_name),
        slots: HashMap::new(),
        tensor_ids: HashMap::new(),
        kernel_ids: HashMap::new(),
        axis_ids: HashMap::new(),
        expr_ids: HashMap::new(),
        wparams: HashMap::new(),
        scope: vec![],
        frames: 0,
        var_depths: HashMap::new(),
        need: (0, Span::default()),
    };
    l.m.code.clear();
    l.name_fits(&w.name)?;
    if let Some(s) = sched {
        l.name_fits(&s.name)?;
    }
    // Workload parameters: dense axes are entered now (so their runtime slots come first);
    // ragged and sparse ones are lowered where they are used, in that scope.
    for (name, axis) in &w.params {
        if l.wparams.insert(name.name.clone(), axis).is_some() {
            return Err(l.rep.error(
                DiagKind::DuplicateName,
                name.span,
                format!("parameter `%{}` is already defined", name.name),
            ));
        }
        match axis {
            Axis::Dense(..) | Axis::DenseDyn(..) => {
                l.axis(axis)?;
            }
            Axis::Ref(r) => {
                return Err(l.rep.error(
                    DiagKind::Type,
                    r.span,
                    "a workload parameter's type must be an axis, not another parameter",
                ))
            }
            _ => {}
        }
    }
    for t in &ast.tensors {
        l.tensor_decl(t)?;
    }
    for k in &ast.kernels {
        l.kernel_decl(k)?;
    }
    collect_vars(&w.body, 0, &mut l.var_depths);
    if let Some(s) = sched {
        l.schedule(s)?;
    }
    l.stmts(&w.body)?;
    l.m.code.push(Record::new(Opcode::HALT as u8, 0, 0, 0));
    let names = l.m.workload.len()
        + l.m.schedule.len()
        + l.m.params.iter().map(|p| p.name.len()).sum::<usize>()
        + l.m.tensors.iter().map(|t| t.name.len()).sum::<usize>()
        + l.m.kernels.iter().map(|k| k.name.len()).sum::<usize>();
    l.limit(
        names,
        limits::MAX_STRTAB as usize,
        "bytes of names",
        w.name.span,
    )?;
    l.limit(
        l.m.code.len(),
        limits::MAX_INSTRUCTIONS as usize,
        "instructions",
        w.name.span,
    )?;
    Ok(l.m)
}

/// `a, b, c`, or `none` for no names.
fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(String::as_str).collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

fn collect_vars(body: &[Stmt], depth: u32, out: &mut HashMap<String, Option<u32>>) {
    for s in body {
        match &s.kind {
            StmtK::Loop { var, body, .. } => {
                let e = out.entry(var.name.clone()).or_insert(Some(depth));
                if *e != Some(depth) {
                    *e = None;
                }
                collect_vars(body, depth + 1, out);
            }
            StmtK::Cond { then, els, .. } => {
                collect_vars(then, depth, out);
                if let Some(e) = els {
                    collect_vars(e, depth, out);
                }
            }
            StmtK::Combine(b) | StmtK::Sequential(b) | StmtK::Dispatch(_, _, b) => {
                collect_vars(b, depth, out)
            }
            StmtK::Task { .. } => {}
        }
    }
}

impl<'a> Lower<'a, '_, '_> {
    fn limit(&self, n: usize, max: usize, what: &str, span: Span) -> R<()> {
        if n > max {
            return Err(self.rep.error(
                DiagKind::Limit,
                span,
                format!("too many {what}: {n}, the format allows {max}"),
            ));
        }
        Ok(())
    }

    /// Names are stored in the bytecode's string table, at most 255 bytes each.
    fn name_fits(&self, name: &Ident) -> R<()> {
        if name.name.len() > limits::MAX_NAME_LEN {
            return Err(self.rep.error(
                DiagKind::Limit,
                name.span,
                format!(
                    "a name of {} bytes; the limit is {}",
                    name.name.len(),
                    limits::MAX_NAME_LEN
                ),
            ));
        }
        Ok(())
    }

    fn slot(&mut self, name: &Ident, kind: ParamKind) -> R<u16> {
        if let Some(&s) = self.slots.get(&name.name) {
            let have = self.m.params[s as usize].kind;
            if have != kind {
                return Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "runtime parameter `{}` is used as {} here but as {} elsewhere",
                        name.name,
                        kind.name(),
                        have.name()
                    ),
                ));
            }
            return Ok(s);
        }
        self.name_fits(name)?;
        let s = self.m.params.len();
        self.limit(
            s + 1,
            limits::MAX_PARAMS as usize,
            "runtime parameters",
            name.span,
        )?;
        self.m.params.push(Param {
            name: name.name.clone(),
            kind,
        });
        self.slots.insert(name.name.clone(), s as u16);
        Ok(s as u16)
    }

    fn int32(&self, v: u64, span: Span) -> R<i32> {
        i32::try_from(v).map_err(|_| {
            self.rep.error(
                DiagKind::Overflow,
                span,
                format!("integer {v} does not fit in 32 bits (the largest is 2147483647)"),
            )
        })
    }

    fn u32(&self, v: u64, span: Span, min: u64, what: &str) -> R<u32> {
        if v < min {
            return Err(self.rep.error(
                DiagKind::Overflow,
                span,
                format!("{what} must be at least {min}"),
            ));
        }
        u32::try_from(v).map_err(|_| {
            self.rep.error(
                DiagKind::Overflow,
                span,
                format!("{what} {v} does not fit in 32 bits"),
            )
        })
    }

    fn var_depth(&self, name: &str, span: Span, ctx: Ctx) -> R<Option<u32>> {
        match ctx {
            Ctx::Scope => match self.scope.iter().rposition(|v| v == name) {
                Some(d) => Ok(Some(d as u32)),
                // A loop variable of another loop would otherwise be read as a runtime
                // parameter of the same name: almost certainly a mistake.
                None if self.var_depths.contains_key(name) => Err(self.rep.error(
                    DiagKind::UnknownName,
                    span,
                    format!("loop variable `{name}` is not bound here (it belongs to a loop that does not enclose this point)"),
                )),
                None => Ok(None),
            },
            Ctx::Workload => match self.var_depths.get(name) {
                Some(Some(d)) => Ok(Some(*d)),
                Some(None) => Err(self.rep.error(DiagKind::Type, span, format!("loop variable `{name}` is bound at different depths in the workload; a schedule cannot tell which is meant"))),
                None => Ok(None),
            },
            Ctx::NoVars => {
                if self.var_depths.contains_key(name) {
                    Err(self.rep.error(DiagKind::Type, span, format!("`{name}` is a loop variable; a threshold selector is evaluated at launch and may only read runtime parameters")))
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Lowers an expression into the pool; returns its first node.
    fn expr(&mut self, e: &Expr, ctx: Ctx) -> R<u16> {
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
    fn emit_expr(&mut self, e: &Expr, ctx: Ctx) -> R<usize> {
        let push = |l: &mut Self, op: ExprOp, op1: u16, op2: u32| {
            l.m.exprs.push(Record::new(op as u8, 0, op1, op2))
        };
        match &e.kind {
            ExprK::Int(v) => {
                let v = self.int32(*v, e.span)?;
                push(self, ExprOp::CONST, 0, v as u32);
                Ok(1)
            }
            ExprK::Name(n) => {
                match self.var_depth(n, e.span, ctx)? {
                    Some(d) => push(self, ExprOp::VAR, d as u16, 0),
                    None => {
                        let s = self.slot(
                            &Ident {
                                name: n.clone(),
                                span: e.span,
                            },
                            ParamKind::Scalar,
                        )?;
                        push(self, ExprOp::PARAM, s, 0);
                    }
                }
                Ok(1)
            }
            ExprK::Elem(arr, idx) => {
                if self
                    .var_depth(&arr.name, arr.span, Ctx::Workload)
                    .ok()
                    .flatten()
                    .is_some()
                    || self.scope.contains(&arr.name)
                {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        arr.span,
                        format!("`{}` is a loop variable, not a runtime array", arr.name),
                    ));
                }
                let d = self.emit_expr(idx, ctx)?;
                let s = self.slot(arr, ParamKind::Array)?;
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
        }
    }

    /// Loops a task needs around it when the expression at `start` is a dispatch key.
    fn need_of(&self, start: u16) -> u32 {
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

    fn add_axis(&mut self, r: Record, span: Span) -> R<u16> {
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
    fn axis(&mut self, a: &'a Axis) -> R<(u16, bool)> {
        match a {
            Axis::Dense(n, span) => {
                let n = self.u32(*n, *span, 0, "extent")?;
                Ok((
                    self.add_axis(Record::new(Opcode::AXIS_DENSE as u8, 0, 0, n), *span)?,
                    false,
                ))
            }
            Axis::DenseDyn(name) => {
                let s = self.slot(name, ParamKind::Scalar)?;
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
                let s = self.slot(lens, ParamKind::Array)?;
                Ok((
                    self.add_axis(
                        Record::new(Opcode::AXIS_RAGGED as u8, 0, s, e as u32),
                        lens.span,
                    )?,
                    false,
                ))
            }
            Axis::RaggedRow(row, lens) => {
                let s = self.slot(lens, ParamKind::Array)?;
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
                let p = self.slot(indptr, ParamKind::Array)?;
                let i = self.slot(indices, ParamKind::Array)?;
                let r = Record::new(op as u8, 0, p, (e as u32) | ((i as u32) << 16));
                Ok((self.add_axis(r, indptr.span)?, true))
            }
            Axis::Ref(name) => match self.wparams.get(&name.name) {
                Some(inner) => self.axis(inner),
                None => Err(self.rep.error(
                    DiagKind::UnknownName,
                    name.span,
                    format!(
                        "unknown axis `{}`: not a parameter of this workload",
                        name.name
                    ),
                )),
            },
        }
    }

    fn tensor_decl(&mut self, t: &crate::ast::TensorDecl) -> R<()> {
        let dtype = DType::from_name(&t.dtype.name)
            .filter(|d| *d != DType::Unknown)
            .ok_or_else(|| {
                self.rep.error(
                    DiagKind::Type,
                    t.dtype.span,
                    format!("unknown element type `{}`", t.dtype.name),
                )
            })?;
        if t.dims.len() > limits::MAX_RANK {
            return Err(self.rep.error(
                DiagKind::Limit,
                t.name.span,
                format!(
                    "tensor `{}` has {} dimensions; the limit is {}",
                    t.name.name,
                    t.dims.len(),
                    limits::MAX_RANK
                ),
            ));
        }
        let mut entry = TensorEntry {
            dtype: dtype as u8,
            rank: t.dims.len() as u8,
            ..Default::default()
        };
        for (i, d) in t.dims.iter().enumerate() {
            entry.dims[i] = U32::new(match d {
                Ok((v, span)) => {
                    if *v == 0 || *v >= DIM_IS_SLOT as u64 {
                        return Err(self.rep.error(
                            DiagKind::Overflow,
                            *span,
                            format!("dimension {v} is outside 1..=2147483647"),
                        ));
                    }
                    *v as u32
                }
                Err(name) => DIM_IS_SLOT | self.slot(name, ParamKind::Scalar)? as u32,
            });
        }
        self.add_tensor(&t.name, entry)?;
        Ok(())
    }

    fn add_tensor(&mut self, name: &Ident, entry: TensorEntry) -> R<u16> {
        self.name_fits(name)?;
        let id = self.m.tensors.len();
        self.limit(id + 1, limits::MAX_TENSORS as usize, "tensors", name.span)?;
        self.m.tensors.push(Tensor {
            name: name.name.clone(),
            entry,
        });
        self.tensor_ids.insert(name.name.clone(), id as u16);
        Ok(id as u16)
    }

    fn kernel_decl(&mut self, k: &'a KernelDecl) -> R<()> {
        let pool = Pool::from_name(&k.pool.name).ok_or_else(|| {
            self.rep.error(
                DiagKind::Type,
                k.pool.span,
                format!(
                    "unknown pool `{}`; expected `cube` or `vector`",
                    k.pool.name
                ),
            )
        })?;
        if k.params.len() > limits::MAX_TASK_PARAMS {
            return Err(self.rep.error(
                DiagKind::Limit,
                k.name.span,
                format!(
                    "kernel `{}` has {} parameters; the limit is {}",
                    k.name.name,
                    k.params.len(),
                    limits::MAX_TASK_PARAMS
                ),
            ));
        }
        if k.args.len() > limits::MAX_KERNEL_ARGS {
            return Err(self.rep.error(
                DiagKind::Limit,
                k.name.span,
                format!(
                    "kernel `{}` has {} arguments; the limit is {}",
                    k.name.name,
                    k.args.len(),
                    limits::MAX_KERNEL_ARGS
                ),
            ));
        }
        let mut names = HashSet::new();
        for n in k.params.iter().chain(k.args.iter().map(|(_, n)| n)) {
            if !names.insert(n.name.as_str()) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    n.span,
                    format!("`{}` is named twice in kernel `{}`", n.name, k.name.name),
                ));
            }
        }
        let mut dirs = 0u32;
        for (i, (d, _)) in k.args.iter().enumerate() {
            let dir = Dir::from_name(&d.name).ok_or_else(|| {
                self.rep.error(
                    DiagKind::Type,
                    d.span,
                    format!(
                        "unknown direction `{}`; expected `in`, `out` or `inout`",
                        d.name
                    ),
                )
            })?;
            dirs |= (dir as u32) << (2 * i);
        }
        let entry = KernelEntry {
            pool: pool as u8,
            num_params: k.params.len() as u8,
            num_args: k.args.len() as u8,
            arg_dirs: U32::new(dirs),
            ..Default::default()
        };
        self.name_fits(&k.name)?;
        let id = self.m.kernels.len();
        self.limit(id + 1, limits::MAX_KERNELS as usize, "kernels", k.name.span)?;
        self.m.kernels.push(Kernel {
            name: k.name.name.clone(),
            entry,
        });
        self.kernel_ids
            .insert(k.name.name.clone(), (id as u16, Some(k)));
        Ok(())
    }

    fn policy_spec(&mut self, p: &PolicyAst, span: Span) -> R<(PolicySpec, u32)> {
        let none = U16::new(NONE16);
        Ok(match p {
            PolicyAst::RoundRobin(_) | PolicyAst::WorkSteal => (
                PolicySpec {
                    kind: Policy::RoundRobin as u8,
                    depth: 0,
                    key: none,
                },
                0,
            ),
            PolicyAst::Affinity(e) | PolicyAst::Hash(e) => {
                let key = self.expr(e, Ctx::Workload)?;
                let kind = if matches!(p, PolicyAst::Hash(_)) {
                    Policy::Hash
                } else {
                    Policy::Affinity
                };
                (
                    PolicySpec {
                        kind: kind as u8,
                        depth: 0,
                        key: U16::new(key),
                    },
                    self.need_of(key),
                )
            }
            PolicyAst::Static(v) => match self.var_depth(&v.name, v.span, Ctx::Workload)? {
                Some(d) => (
                    PolicySpec {
                        kind: Policy::StaticPartition as u8,
                        depth: d as u8,
                        key: none,
                    },
                    d + 1,
                ),
                None => {
                    return Err(self.rep.error(
                        DiagKind::UnknownName,
                        v.span,
                        format!("`{}` is not a loop variable of the workload", v.name),
                    ))
                }
            },
            PolicyAst::Threshold(..) => {
                return Err(self.rep.error(
                    DiagKind::Type,
                    span,
                    "a threshold level cannot itself be a threshold policy",
                ))
            }
        })
    }

    fn schedule(&mut self, s: &crate::ast::Schedule) -> R<()> {
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for k in &s.knobs {
            if let Some(_prev) = seen.insert(k.key.name.as_str(), k.key.span) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    k.key.span,
                    format!("schedule knob `{}` is set twice", k.key.name),
                ));
            }
            let key = k.key.name.as_str();
            match &k.value {
                KnobValue::Dispatch(p, span) => self.dispatch_knob(p, *span)?,
                KnobValue::Int(v, span) => {
                    let c = &mut self.m.config;
                    match key {
                        "streams" => {
                            if *v == 0 || *v > u16::MAX as u64 {
                                return Err(self.rep.error(
                                    DiagKind::Overflow,
                                    *span,
                                    "streams must be in 1..=65535",
                                ));
                            }
                            c.streams = U16::new(*v as u16);
                        }
                        "aicpus" => self.set_aicpus(*v, *span)?,
                        "window" | "task_window" => {
                            let v = self.u32(*v, *span, 1, "the task window")?;
                            self.m.config.window = U32::new(v);
                        }
                        "pipeline_depth" => {
                            let v = self.u32(*v, *span, 0, "pipeline_depth")?;
                            self.m.config.pipeline_depth = U32::new(v);
                        }
                        _ => {
                            let v = self.u32(*v, *span, 0, "batch_deps")?;
                            self.m.config.batch_deps = U32::new(v);
                        }
                    }
                }
                KnobValue::Named(n, arg) => self.named_knob(key, n, *arg)?,
                KnobValue::Unknown => self.rep.warn(
                    DiagKind::UnknownKnob,
                    k.key.span,
                    format!("unknown schedule knob `{key}` is ignored"),
                ),
            }
        }
        Ok(())
    }

    fn set_aicpus(&mut self, v: u64, span: Span) -> R<()> {
        if v == 0 || v > limits::MAX_AICPUS as u64 {
            return Err(self.rep.error(
                DiagKind::Overflow,
                span,
                format!("the AICPU count must be in 1..={}", limits::MAX_AICPUS),
            ));
        }
        self.m.config.num_aicpus = U16::new(v as u16);
        Ok(())
    }

    fn named_knob(&mut self, key: &str, n: &Ident, arg: Option<(u64, Span)>) -> R<()> {
        let bad = |l: &Self, msg: String| Err(l.rep.error(DiagKind::Type, n.span, msg));
        let want_arg = |l: &Self, needed: bool| -> R<u32> {
            match (needed, arg) {
                (true, Some((v, s))) => l.u32(v, s, 1, "the argument"),
                (true, None) => Err(l.rep.error(
                    DiagKind::Type,
                    n.span,
                    format!("`{}` needs an argument: `{}(N)`", n.name, n.name),
                )),
                (false, Some((_, s))) => {
                    Err(l
                        .rep
                        .error(DiagKind::Type, s, format!("`{}` takes no argument", n.name)))
                }
                (false, None) => Ok(0),
            }
        };
        match key {
            "timing" => {
                let Some(t) = Timing::from_name(&n.name) else {
                    return bad(self, format!("unknown timing `{}`; expected immediate, batched(N), interleaved(N) or rate_limit(N)", n.name));
                };
                let a = want_arg(self, t != Timing::Immediate)?;
                self.m.config.timing = t as u8;
                self.m.config.timing_arg = U32::new(a);
            }
            "ready" => {
                let Some(r) = ReadyPolicy::from_name(&n.name) else {
                    return bad(
                        self,
                        format!(
                            "unknown ready policy `{}`; expected fifo or work_steal",
                            n.name
                        ),
                    );
                };
                want_arg(self, false)?;
                self.m.config.ready = r as u8;
            }
            "start" => {
                let Some(s) = StartPolicy::from_name(&n.name) else {
                    return bad(self, format!("unknown start policy `{}`; expected immediate, after_orchestration or threshold(N)", n.name));
                };
                let a = want_arg(self, s == StartPolicy::Threshold)?;
                self.m.config.start = s as u8;
                self.m.config.start_threshold = U32::new(a);
            }
            _ => {
                let Some(w) = WindowMode::from_name(&n.name) else {
                    return bad(
                        self,
                        format!(
                            "unknown window mode `{}`; expected stall, abort or benchmark",
                            n.name
                        ),
                    );
                };
                want_arg(self, false)?;
                self.m.config.window_mode = w as u8;
            }
        }
        Ok(())
    }

    fn dispatch_knob(&mut self, p: &PolicyAst, span: Span) -> R<()> {
        match p {
            PolicyAst::Threshold(sel, levels, default) => {
                let sel = self.expr(sel, Ctx::NoVars)?;
                if levels.len() + 1 > limits::MAX_LEVELS {
                    return Err(self.rep.error(
                        DiagKind::Limit,
                        span,
                        format!(
                            "a threshold policy has at most {} levels, the default included",
                            limits::MAX_LEVELS
                        ),
                    ));
                }
                let mut need = 0;
                let mut prev: Option<u64> = None;
                let all = levels
                    .iter()
                    .map(|(t, s, p)| (Some((*t, *s)), p))
                    .chain(std::iter::once((None, default.as_ref())));
                let c_levels: Vec<(u32, PolicySpec)> = {
                    let mut v = vec![];
                    for (t, p) in all {
                        let t = match t {
                            Some((t, s)) => {
                                if prev.is_some_and(|p| t <= p) {
                                    return Err(self.rep.error(
                                        DiagKind::Type,
                                        s,
                                        "thresholds must strictly increase",
                                    ));
                                }
                                if t >= u32::MAX as u64 {
                                    return Err(self.rep.error(DiagKind::Overflow, s, "a threshold must be below 4294967295 (the default level covers the rest)"));
                                }
                                prev = Some(t);
                                t as u32
                            }
                            None => u32::MAX,
                        };
                        if matches!(p, PolicyAst::RoundRobin(Some(_))) {
                            return Err(self.rep.error(DiagKind::Type, span, "the AICPU count can only be set by a top-level `round_robin(N)` or `aicpus = N`"));
                        }
                        let (spec, n) = self.policy_spec(p, span)?;
                        need = need.max(n);
                        v.push((t, spec));
                    }
                    v
                };
                let c = &mut self.m.config;
                c.policy = PolicySpec {
                    kind: Policy::Threshold as u8,
                    depth: 0,
                    key: U16::new(NONE16),
                };
                c.selector = U16::new(sel);
                c.num_levels = c_levels.len() as u8;
                for (i, (t, spec)) in c_levels.into_iter().enumerate() {
                    c.thresholds[i] = U32::new(t);
                    c.levels[i] = spec;
                }
                self.need = (need, span);
            }
            _ => {
                if let PolicyAst::RoundRobin(Some((n, s))) = p {
                    self.set_aicpus(*n, *s)?;
                }
                if matches!(p, PolicyAst::WorkSteal) {
                    self.m.config.ready = ReadyPolicy::WorkSteal as u8;
                }
                let (spec, need) = self.policy_spec(p, span)?;
                self.m.config.policy = spec;
                self.need = (need, span);
            }
        }
        Ok(())
    }

    fn emit(&mut self, op: Opcode, flags: u8, op1: u16, op2: u32) -> usize {
        self.m.code.push(Record::new(op as u8, flags, op1, op2));
        self.m.code.len() - 1
    }

    fn patch_end(&mut self, at: usize, span: Span) -> R<()> {
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

    fn open(&mut self, span: Span) -> R<()> {
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

    fn count(&self, n: usize, span: Span) -> R<u16> {
        u16::try_from(n).map_err(|_| {
            self.rep.error(
                DiagKind::Limit,
                span,
                format!("{n} statements in one block; the limit is 65535"),
            )
        })
    }

    fn stmts(&mut self, body: &'a [Stmt]) -> R<()> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &'a Stmt) -> R<()> {
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
                if self.scope.contains(&var.name) {
                    return Err(self.rep.error(
                        DiagKind::DuplicateName,
                        var.span,
                        format!(
                            "loop variable `{}` is already bound by an enclosing loop",
                            var.name
                        ),
                    ));
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
                self.scope.push(var.name.clone());
                self.stmts(body)?;
                self.scope.pop();
                self.patch_end(at, s.span)?;
                self.frames -= 1;
            }
            StmtK::Cond { pred, then, els } => {
                self.open(s.span)?;
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
                self.stmts(b)?;
                self.need = saved;
                self.patch_end(at, s.span)?;
                self.frames -= 1;
            }
            StmtK::Task {
                kernel,
                args,
                resources,
            } => self.task(s, kernel, args, resources)?,
        }
        Ok(())
    }

    fn task(
        &mut self,
        s: &Stmt,
        kernel: &Ident,
        args: &[Expr],
        resources: &[crate::ast::Resource],
    ) -> R<()> {
        let (need, pspan) = self.need;
        if need as usize > self.scope.len() {
            let d = crate::diag::Diagnostic::new(
                crate::diag::Severity::Error,
                DiagKind::Type,
                "",
                self.rep.file,
                self.rep.src,
                pspan,
            );
            return Err(self.rep.error(
                DiagKind::Type,
                s.span,
                format!(
                    "the dispatch policy at line {} reads the loop variable at depth {}, but this task is inside only {} loop(s)",
                    d.line,
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
        if resources.len() > limits::MAX_TASK_IO {
            return Err(self.rep.error(
                DiagKind::Limit,
                kernel.span,
                format!(
                    "{} task resources; the limit is {}",
                    resources.len(),
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
            0,
            kid,
            args.len() as u32 | (resources.len() as u32) << 16,
        );
        for a in args {
            match &a.kind {
                ExprK::Int(v) => {
                    let v = self.int32(*v, a.span)?;
                    self.emit(Opcode::PARAM_CONST, 0, 0, v as u32);
                }
                ExprK::Name(n) if self.scope.contains(n) => {
                    let d = self.scope.iter().rposition(|v| v == n).unwrap_or(0);
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
        Ok(())
    }
}

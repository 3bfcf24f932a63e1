//! Semantic checks and lowering of a `.pto` syntax tree to a [`Module`] (spec/pto.md §5–6).
//! Every check reports the first problem with its source location.

use std::collections::{HashMap, HashSet};

use ptovm_vm::format::{
    limits, KernelEntry, PolicySpec, RegionDim, TensorEntry, COND_HAS_ELSE, DIM_IS_SLOT,
    KERNEL_UNDECLARED, LAYOUT_REPLICATE, LAYOUT_SHARD, NONE16, TENSOR_IMPLICIT, TENSOR_STREAM,
};
use ptovm_vm::sched::CoreAlloc;
use ptovm_vm::{
    DType, Dir, ExprKind, ExprOp, InfoKind, Opcode, ParamKind, Policy, Pool, ReadyPolicy, Record,
    StartPolicy, Timing, WindowMode,
};
use zerocopy::little_endian::{U16, U32};

use crate::ast::{
    Axis, Expr, ExprK, Ident, KernelDecl, KnobValue, ModuleAst, ParamDecl, ParamValue, PolicyAst,
    Stmt, StmtK, Workload,
};
use crate::diag::{AsmError, DiagKind, Reporter, Span};
use crate::model::{Kernel, Module, Param, Tensor};

mod decls;
mod expr;
mod order;
mod schedule;
mod scope;
mod stmt;
mod tiers;

use scope::{Binding, Frame, Meaning};

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
    /// A `wait`'s bound: runtime parameters and planned values, no loop variable.
    WaitBound,
    /// A planned value: the variables of the reductions around (`Lower::plan_vars`), no loop
    /// variable.
    Plan,
    /// A tier's condition: its tier set's value (`Lower::tier_subst`) and runtime parameters.
    Tier,
    /// A kernel's cost: its parameters and region sizes (`Lower::cost_of`) and runtime
    /// parameters, no loop variable.
    Cost,
}

/// The slot a planned value's name lowers to until the given slots are all known: plan `i`
/// becomes runtime slot `params + i` when lowering ends (`Lower::place_plans`).
const PLAN_MARK: u16 = 0x8000;

type R<T> = Result<T, AsmError>;

struct Lower<'a, 'r, 's> {
    rep: &'r mut Reporter<'s>,
    ast: &'a ModuleAst,
    m: Module,
    /// `@param` declarations by name: a slot takes its default when first used.
    param_decls: HashMap<String, &'a ParamDecl>,
    slots: HashMap<String, u16>,
    tensor_ids: HashMap<String, u16>,
    kernel_ids: HashMap<String, (u16, Option<&'a KernelDecl>)>,
    axis_ids: HashMap<Record, u16>,
    /// Expressions already in the pool (identical ones are shared).
    expr_ids: HashMap<Vec<Record>, u16>,
    /// The workload being lowered (frame 0) and the workloads `call`ed into it, innermost last.
    calls: Vec<Frame<'a>>,
    /// The frame names resolve in: the innermost, except while a parameter axis of an outer
    /// frame is lowered in that frame's scope.
    cur: usize,
    /// Loop variables of the enclosing loops by depth (all frames).
    scope: Vec<String>,
    frames: usize,
    /// Loop variable name → its depth, or `None` if the name is bound at several depths.
    var_depths: HashMap<String, Option<u32>>,
    /// Loops a task needs around it for the policy in force, and that policy's text span.
    need: (u32, Span),
    /// `stream_by`: the order every task joins (spec/pto.md §4.2).
    stream: Option<StreamOrder>,
    /// `--streams N`: replaces the schedule's `streams`.
    streams_override: Option<u16>,
    /// `@plan` names → their index (the order they are computed in).
    plan_ids: HashMap<String, u16>,
    /// The plan being lowered: only the plans before it may be read.
    plan_now: Option<u16>,
    /// The variables of the reductions around the point being lowered, outermost first.
    plan_vars: Vec<String>,
    /// Each reduction body's expression, lowered before the expression holding it.
    bodies: HashMap<*const Expr, u16>,
    /// The enclosing `tile(…)` loops by depth: their tile size and their base axis's extent as
    /// expression nodes, for `tile_start` and `tile_end`.
    tiles: HashMap<u32, TileBounds>,
    /// Tier sets by name (checked before the workload is lowered).
    tier_sets: HashMap<String, &'a crate::ast::TierDecl>,
    /// While a tier's condition is lowered: its value's name and the task's selector, which
    /// the name stands for.
    tier_subst: Option<(String, Expr)>,
    /// While a kernel's cost is lowered: the kernel's declaration (its parameter and argument
    /// names).
    cost_of: Option<&'a KernelDecl>,
    /// The schedule's `workspace = N` knob, where it is written.
    workspace_span: Option<Span>,
    /// The tensors the workload reads back (`wait T <= bound`) and where, and those whose
    /// `wait` is lowered already: only then may an expression read the runtime array `T`.
    waits: HashMap<String, Span>,
    waited: HashSet<String>,
    /// Conds and dispatch blocks around the point being lowered (a `wait` is at none).
    guards: usize,
}

/// A `tile(…)` loop's size and its base axis's extent, as postfix nodes (no `END`) that read
/// the same values wherever they are copied: loop variables by depth, runtime slots.
#[derive(Clone)]
struct TileBounds {
    size: Vec<Record>,
    extent: Vec<Record>,
}

/// How `stream_by` lowers: every task gets one more IO record, an `IO_INOUT` of its stream's
/// element of the stream-order tensor, so the TensorMap orders each stream's tasks.
#[derive(Clone, Copy)]
struct StreamOrder {
    /// The stream-order tensor.
    tensor: u16,
    /// The region dimension every task's stream record uses (`key % streams`).
    region: u32,
    /// Loops a task needs around it for the key.
    need: u32,
    /// The `stream_by` knob's text.
    span: Span,
}

/// Lowers the selected workload of `ast`.
/// `streams` overrides the schedule's stream count (`ptovm asm --streams N`), before `stream_by`
/// is lowered with it.
pub fn lower(
    rep: &mut Reporter<'_>,
    ast: &ModuleAst,
    sel: &Select,
    streams: Option<u16>,
) -> R<Module> {
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
    scope::check_levels(rep, ast)?;
    // The schedule's per-loop knobs rewrite a copy of the module (`order`).
    let wi = ast
        .workloads
        .iter()
        .position(|x| std::ptr::eq(x, w))
        .unwrap_or(0);
    let si = sched.and_then(|s| ast.schedules.iter().position(|x| std::ptr::eq(x, s)));
    let rewritten = order::apply(rep, ast, wi, si)?;
    let ast = rewritten.as_ref().unwrap_or(ast);
    let w = &ast.workloads[wi];
    let sched = si.map(|i| &ast.schedules[i]);
    let mut l = Lower {
        rep,
        ast,
        m: Module::new(&w.name.name, &sched_name),
        param_decls: HashMap::new(),
        slots: HashMap::new(),
        tensor_ids: HashMap::new(),
        kernel_ids: HashMap::new(),
        axis_ids: HashMap::new(),
        expr_ids: HashMap::new(),
        calls: vec![Frame {
            base: 0,
            params: HashMap::new(),
            name: &w.name.name,
            call: w.name.span,
        }],
        cur: 0,
        scope: vec![],
        frames: 0,
        var_depths: HashMap::new(),
        need: (0, Span::default()),
        stream: None,
        streams_override: streams,
        plan_ids: HashMap::new(),
        plan_now: None,
        plan_vars: vec![],
        bodies: HashMap::new(),
        tiles: HashMap::new(),
        tier_sets: HashMap::new(),
        tier_subst: None,
        cost_of: None,
        workspace_span: None,
        waits: HashMap::new(),
        waited: HashSet::new(),
        guards: 0,
    };
    l.m.code.clear();
    l.name_fits(&w.name)?;
    if let Some(s) = sched {
        l.name_fits(&s.name)?;
    }
    l.m.config.level = w.level as u8 | (sched.map_or(0, |s| s.level as u8) << 4);
    l.header()?;
    l.param_decls()?;
    l.plan_names()?;
    // Workload parameters: dense axes are entered now (so their runtime slots come first);
    // ragged and sparse ones are lowered where they are used, in that scope.
    for (name, axis) in &w.params {
        if l.calls[0]
            .params
            .insert(name.name.clone(), Binding::Declared(axis))
            .is_some()
        {
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
    l.tier_decls()?;
    scope::collect_vars(ast, &w.body, 0, &mut l.var_depths, &mut vec![&w.name.name]);
    let layouts = match sched {
        Some(s) => l.schedule(s)?,
        None => vec![],
    };
    l.workspaces_fit()?;
    stmt::collect_waits(&w.body, &mut l.waits);
    l.stmts(&w.body)?;
    l.m.code.push(Record::new(Opcode::HALT as u8, 0, 0, 0));
    l.name_stream_tensor();
    // Layouts apply to implicit tensors too, which exist only once the body is lowered.
    l.layouts(&layouts)?;
    // After the body: a runtime parameter only a cost reads gets the last slots.
    l.costs()?;
    l.plans()?;
    l.unused_param_decls();
    let names = l.m.workload.len()
        + l.m.schedule.len()
        + l.m.info.iter().map(|(_, t)| t.len()).sum::<usize>()
        + l.m.params.iter().map(|p| p.name.len()).sum::<usize>()
        + l.m.plans.iter().map(|p| p.name.len()).sum::<usize>()
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

/// The error for a loop that rebinds `var`, a variable of an enclosing loop (spec/pto.md §3).
fn rebound(rep: &Reporter<'_>, var: &Ident) -> AsmError {
    rep.error(
        DiagKind::DuplicateName,
        var.span,
        format!(
            "loop variable `{}` is already bound by an enclosing loop",
            var.name
        ),
    )
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

impl<'a> Lower<'a, '_, '_> {
    /// The 1-based source line of `span` (for messages that point at a second place).
    fn line_of(&self, span: Span) -> usize {
        crate::diag::Diagnostic::new(
            crate::diag::Severity::Error,
            DiagKind::Syntax,
            "",
            self.rep.file,
            self.rep.src,
            span,
        )
        .line
    }

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
        if let Some(&at) = self.waits.get(&name.name) {
            if self.plan_now.is_some() {
                return Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "`{}` is read back by the `wait` at line {}; a planned value is computed at launch, before any task, and cannot read it",
                        name.name,
                        self.line_of(at)
                    ),
                ));
            }
            if !self.waited.contains(&name.name) {
                return Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "`{}` is read back by the `wait` at line {}: read it after that statement (before it, the runtime array holds the launch's values, not the tensor's)",
                        name.name,
                        self.line_of(at)
                    ),
                ));
            }
        }
        if let Some(&i) = self.plan_ids.get(&name.name) {
            if kind != ParamKind::Scalar {
                return Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "`{}` is a planned value, a scalar, not a runtime {}",
                        name.name,
                        kind.name()
                    ),
                ));
            }
            if self.plan_now.is_some_and(|now| i >= now) {
                return Err(self.rep.error(
                    DiagKind::Type,
                    name.span,
                    format!(
                        "planned value `{}` is computed {} this one: a plan reads only the plans above it",
                        name.name,
                        if self.plan_now == Some(i) { "by" } else { "after" }
                    ),
                ));
            }
            return Ok(PLAN_MARK + i);
        }
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
        let default = match self.param_decls.get(&name.name) {
            Some(d) => Some(self.default_value(d, kind, name.span)?),
            None => None,
        };
        self.m.params.push(Param {
            name: name.name.clone(),
            kind,
            default,
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
}

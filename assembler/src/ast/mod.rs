//! Syntax tree of a `.pto` module (spec/pto.md), and its recursive-descent parser over the
//! `nom`-recognised tokens. Recursion is bounded (statement and expression nesting limits), so
//! no text can overflow the stack.

use ptovm_vm::{limits, ExprOp, InfoKind, Level, Opcode};

use crate::diag::{AsmError, DiagKind, Reporter, Span};
use crate::lexer::{int_value, lex, Tok, Token};

/// A name and where it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where.
    pub span: Span,
}

/// An integer expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    /// What.
    pub kind: ExprK,
    /// Where.
    pub span: Span,
}

/// Expression forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExprK {
    /// An integer literal.
    Int(u64),
    /// A loop variable or a runtime scalar.
    Name(String),
    /// `name[index]`: an element of a runtime array.
    Elem(Ident, Box<Expr>),
    /// Unary operator.
    Un(ExprOp, Box<Expr>),
    /// Binary operator or `min` / `max` / `ceil_div`.
    Bin(ExprOp, Box<Expr>, Box<Expr>),
    /// `tile_start(v)` (false) or `tile_end(v)` (true): the first element of the tile a
    /// `tile(…)` loop's variable `v` stands for, or the end of it (exclusive; the last tile's
    /// is the axis's extent).
    TileBound(bool, Ident),
    /// `size(arg)` (no dimension) or `extent(arg, d)`: the elements of the task's region for
    /// kernel argument `arg`, or its extent in dimension `d` (a kernel's `cost` only).
    RegionSize(Ident, Option<(u64, Span)>),
    /// A reduction or search (`@plan` values only): `sum(v in lo .. hi: body)` and `max`,
    /// `min`, `search` alike (`lo ..= hi` is written `lo .. hi + 1` here).
    Bind(ExprOp, Ident, Box<Expr>, Box<Expr>, Box<Expr>),
}

/// An iteration axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Axis {
    /// `dense[N]`.
    Dense(u64, Span),
    /// `dense_dyn(name)`.
    DenseDyn(Ident),
    /// `ragged(outer, lengths)` (PTO-WSP): one flattened axis over the first `outer` rows.
    Ragged(Expr, Ident),
    /// `sparse(outer, indptr, indices)` (PTO-WSP): the stored indices of the first `outer`
    /// rows.
    Sparse(Expr, Ident, Ident),
    /// `dense_dyn(lengths[row])` (ptovm): the indices 0 .. `lengths[row]` of one row.
    RaggedRow(Expr, Ident),
    /// `sparse_row(row, indptr, indices)` (ptovm): the stored indices of one row.
    SparseRow(Expr, Ident, Ident),
    /// `%param` or `param`: a workload parameter's axis.
    Ref(Ident),
    /// `tile(axis, size)` (ptovm; PTO-WSP's `PTO_TILE`): the tiles of `size` elements of a
    /// dense, dynamic or ragged-row axis, the last one partial.
    Tile(Box<Axis>, Expr, Span),
}

/// A dispatch policy as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyAst {
    /// `round_robin` or `round_robin(N)`.
    RoundRobin(Option<(u64, Span)>),
    /// `affinity(expr)` or `dispatch_by(expr)`.
    Affinity(Expr),
    /// `hash(expr)`.
    Hash(Expr),
    /// `work_steal`: round robin generation, work-stealing ready queues.
    WorkSteal,
    /// `static(v)`: block partition of loop variable `v`'s range.
    Static(Ident),
    /// `threshold(selector, T: policy, ..., policy)`.
    Threshold(Expr, Vec<(u64, Span, PolicyAst)>, Box<PolicyAst>),
}

/// A region dimension: `i` or `a : b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dim {
    /// First index.
    pub start: Expr,
    /// End (exclusive) for a range.
    pub end: Option<Expr>,
}

/// A task resource: `Name` or `Name[dims]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Tensor name.
    pub name: Ident,
    /// Region dimensions; empty for the whole tensor.
    pub dims: Vec<Dim>,
    /// Where.
    pub span: Span,
}

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stmt {
    /// What.
    pub kind: StmtK,
    /// Where (the keyword).
    pub span: Span,
}

/// Statement forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StmtK {
    /// `parallel_for` / `for_each` / `select`.
    Loop {
        /// PARALLEL_FOR, FOR_EACH or SELECT.
        op: Opcode,
        /// Loop variable.
        var: Ident,
        /// Axis.
        axis: Axis,
        /// Body.
        body: Vec<Stmt>,
    },
    /// `cond pred { } else { }`.
    Cond {
        /// Predicate.
        pred: Expr,
        /// Then block.
        then: Vec<Stmt>,
        /// Else block.
        els: Option<Vec<Stmt>>,
    },
    /// `combine { }`.
    Combine(Vec<Stmt>),
    /// `sequential { }`.
    Sequential(Vec<Stmt>),
    /// `dispatch policy { }`.
    Dispatch(PolicyAst, Span, Vec<Stmt>),
    /// `call @w(args)`: the workload `w` expanded here, its parameters bound to the arguments.
    Call {
        /// The workload called.
        target: Ident,
        /// Arguments: names in the caller's scope.
        args: Vec<Ident>,
    },
    /// `wait T <= bound` (ptovm): every task before it completes, then tensor `T` is read
    /// back as the runtime array `T`, each element in `0 ..= bound`.
    Wait {
        /// The tensor (and the runtime array it becomes).
        tensor: Ident,
        /// The bound of its elements: runtime scalars and planned values.
        bound: Expr,
    },
    /// `task @k(args) resources(...)`.
    Task {
        /// Kernel name, or a tier set's with `selector`.
        kernel: Ident,
        /// `task @tiers[selector](…)`: the value a tier set chooses the kernel by.
        selector: Option<Expr>,
        /// Scalar arguments.
        args: Vec<Expr>,
        /// Resources.
        resources: Vec<Resource>,
    },
}

/// A schedule knob `key = value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnobValue {
    /// `dispatch = policy`.
    Dispatch(PolicyAst, Span),
    /// `key = N`.
    Int(u64, Span),
    /// `key = name` or `key = name(N)`.
    Named(Ident, Option<(u64, Span)>),
    /// `layout T = (S(k), R, ...)`: the tensor and each dimension (`None` for `R`, `Some(k)`
    /// for `S(k)`).
    Layout(Ident, Vec<(Option<(u64, Span)>, Span)>),
    /// `spatial_map = (a, b, ...)`: the grid, and the whole value's span.
    SpatialMap(Vec<(u64, Span)>, Span),
    /// `stream_by = key`: an expression over the workload's loop variables and runtime
    /// scalars.
    Expr(Expr),
    /// `order v = name(N)`, `affinity v = name` (the value, its argument) or `prefetch v = N`
    /// (no name, the depth): a knob about the loops binding `v` (applied by
    /// `lower::order` before the workload is lowered).
    PerLoop(Ident, Option<Ident>, Option<(u64, Span)>),
    /// A knob ptovm does not know (skipped with a warning).
    Unknown,
}

/// One knob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Knob {
    /// Key.
    pub key: Ident,
    /// Value.
    pub value: KnobValue,
}

/// `@workload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Name.
    pub name: Ident,
    /// `@workload[npu]` or `[cpu]`; PTO-WSP's default is `cpu`.
    pub level: Level,
    /// `%p: axis` parameters.
    pub params: Vec<(Ident, Axis)>,
    /// Body.
    pub body: Vec<Stmt>,
}

/// `@schedule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Name.
    pub name: Ident,
    /// `@schedule[npu]` or `[cpu]`; PTO-WSP's default is `cpu`.
    pub level: Level,
    /// Workload it schedules.
    pub workload: Ident,
    /// Knobs.
    pub knobs: Vec<Knob>,
    /// Its opening `{`.
    pub open: Span,
}

/// `@tensor` (ptovm extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDecl {
    /// Name.
    pub name: Ident,
    /// Element type.
    pub dtype: Ident,
    /// Dimensions: a size or a runtime scalar name.
    pub dims: Vec<Result<(u64, Span), Ident>>,
}

/// `@kernel` (ptovm extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDecl {
    /// Name.
    pub name: Ident,
    /// Scalar parameter names.
    pub params: Vec<Ident>,
    /// `cube` or `vector`.
    pub pool: Ident,
    /// Arguments: direction and name.
    pub args: Vec<(Ident, Ident)>,
    /// `workspace(N)`: scratch bytes each task gets while it runs, and where it is written.
    pub workspace: Option<(u64, Span)>,
    /// `cost(expr [, unit])`: one task's duration on the machine model.
    pub cost: Option<CostDecl>,
    /// `cores(N)`: the most of its tasks that run at once, and where it is written.
    pub cores: Option<(u64, Span)>,
}

/// `cost(expr [, ns | cycles])` on a `@kernel` (ptovm extension): a task's duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostDecl {
    /// The duration: the kernel's parameters, `size(arg)`, `extent(arg, d)`, runtime
    /// parameters and constants.
    pub expr: Expr,
    /// `ns` (the default) or `cycles`.
    pub unit: Option<Ident>,
}

/// `@param NAME = value` (ptovm extension): a runtime parameter's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// Name.
    pub name: Ident,
    /// `N` (a scalar) or `[a, b, ...]` (an array).
    pub value: ParamValue,
}

/// `@plan NAME = expr` (ptovm extension): a runtime scalar computed at launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanDecl {
    /// Name.
    pub name: Ident,
    /// Its expression (reductions and searches allowed).
    pub expr: Expr,
}

/// `@tiers NAME(v) { cond: kernel … default: kernel }` (ptovm extension; PTO-WSP's
/// `PTO_TIER_DEF`): kernel variants chosen by a value `v`, the first tier whose condition holds,
/// else the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierDecl {
    /// Name.
    pub name: Ident,
    /// The value's name in the conditions.
    pub var: Ident,
    /// The tiers in order: condition and kernel.
    pub tiers: Vec<(Expr, Ident)>,
    /// The default's kernel (required; its absence is reported at lowering, located).
    pub default: Option<Ident>,
    /// The whole declaration.
    pub span: Span,
}

/// A default value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamValue {
    /// A scalar.
    Scalar(u64, Span),
    /// An array.
    Array(Vec<(u64, Span)>),
}

/// A whole module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleAst {
    /// The module header (`module "…"`, `version "…"`, `target "…" | "…"`), in text order.
    pub header: Vec<(InfoKind, String, Span)>,
    /// Runtime-parameter declarations.
    pub params: Vec<ParamDecl>,
    /// Planned values, in text order (the order they are computed in).
    pub plans: Vec<PlanDecl>,
    /// Tier sets.
    pub tiers: Vec<TierDecl>,
    /// Workloads in order.
    pub workloads: Vec<Workload>,
    /// Schedules in order.
    pub schedules: Vec<Schedule>,
    /// Tensor declarations.
    pub tensors: Vec<TensorDecl>,
    /// Kernel declarations.
    pub kernels: Vec<KernelDecl>,
}

/// Deepest parenthesised expression nesting the parser accepts.
mod expr;
mod parse;

pub use parse::{parse, MAX_EXPR_NESTING};

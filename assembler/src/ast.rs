//! Syntax tree of a `.pto` module (spec/pto.md), and its recursive-descent parser over the
//! `nom`-recognised tokens. Recursion is bounded (statement and expression nesting limits), so
//! no text can overflow the stack.

use ptovm_vm::{limits, ExprOp, Opcode};

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
    /// `task @k(args) resources(...)`.
    Task {
        /// Kernel name.
        kernel: Ident,
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
    /// Workload it schedules.
    pub workload: Ident,
    /// Knobs.
    pub knobs: Vec<Knob>,
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
}

/// A whole module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleAst {
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
pub const MAX_EXPR_NESTING: usize = 64;

struct Parser<'r, 's> {
    rep: &'r Reporter<'s>,
    toks: Vec<Token<'s>>,
    pos: usize,
    nesting: usize,
    expr_nesting: usize,
    /// Nodes of the top-level expression being parsed.
    expr_nodes: usize,
}

type PR<T> = Result<T, AsmError>;

/// Parses module text.
pub fn parse(rep: &Reporter<'_>) -> PR<ModuleAst> {
    let toks = lex(rep, rep.src)?;
    let mut p = Parser {
        rep,
        toks,
        pos: 0,
        nesting: 0,
        expr_nesting: 0,
        expr_nodes: 0,
    };
    p.module()
}

fn describe(t: &Token<'_>) -> String {
    match t.kind {
        Tok::Eof => "end of file".to_string(),
        _ => format!("`{}`", t.text),
    }
}

impl<'s> Parser<'_, 's> {
    fn peek(&self) -> Token<'s> {
        self.toks[self.pos.min(self.toks.len() - 1)]
    }
    fn peek2(&self) -> Token<'s> {
        self.toks[(self.pos + 1).min(self.toks.len() - 1)]
    }
    fn bump(&mut self) -> Token<'s> {
        let t = self.peek();
        if t.kind != Tok::Eof {
            self.pos += 1;
        }
        t
    }
    fn err<T>(&self, span: Span, msg: impl Into<String>) -> PR<T> {
        Err(self.rep.error(DiagKind::Syntax, span, msg))
    }
    fn expected<T>(&self, what: &str) -> PR<T> {
        let t = self.peek();
        self.err(t.span, format!("expected {what}, found {}", describe(&t)))
    }
    fn eat(&mut self, s: &str) -> bool {
        if self.peek().is(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, s: &str) -> PR<Token<'s>> {
        if self.peek().is(s) {
            Ok(self.bump())
        } else {
            self.expected(&format!("`{s}`"))
        }
    }
    /// After a list element: `true` at the closing token (consumed), `false` after a `,`.
    fn list_end(&mut self, close: &str) -> PR<bool> {
        if self.eat(close) {
            return Ok(true);
        }
        if self.eat(",") {
            return Ok(false);
        }
        self.expected(&format!("`,` or `{close}`"))
    }

    fn ident(&mut self, what: &str) -> PR<Ident> {
        let t = self.peek();
        if t.kind == Tok::Ident {
            self.pos += 1;
            Ok(Ident {
                name: t.text.to_string(),
                span: t.span,
            })
        } else {
            self.expected(what)
        }
    }
    /// A keyword (or a value the grammar spells as one, such as a dtype or a knob's value),
    /// lower-cased: keywords match in any case, as in PTO-WSP. Names keep their case.
    fn keyword(&mut self, what: &str) -> PR<Ident> {
        let mut id = self.ident(what)?;
        id.name.make_ascii_lowercase();
        Ok(id)
    }
    fn int(&mut self, what: &str) -> PR<(u64, Span)> {
        let t = self.peek();
        if t.kind != Tok::Int {
            return self.expected(what);
        }
        self.pos += 1;
        match int_value(t.text) {
            Some(v) => Ok((v, t.span)),
            None => Err(self.rep.error(
                DiagKind::Overflow,
                t.span,
                format!("integer literal {} does not fit in 64 bits", t.text),
            )),
        }
    }
    fn enter(&mut self, span: Span) -> PR<()> {
        self.nesting += 1;
        if self.nesting > limits::MAX_NESTING {
            return Err(self.rep.error(
                DiagKind::Nesting,
                span,
                format!("statements nested deeper than {}", limits::MAX_NESTING),
            ));
        }
        Ok(())
    }

    fn module(&mut self) -> PR<ModuleAst> {
        let mut m = ModuleAst::default();
        loop {
            let t = self.peek();
            if t.kind == Tok::Eof {
                return Ok(m);
            }
            if self.eat(";") {
                continue;
            }
            if !t.is("@") {
                return self.expected("`@workload`, `@schedule`, `@tensor` or `@kernel`");
            }
            self.bump();
            let kw = self.keyword("`workload`, `schedule`, `tensor` or `kernel` after `@`")?;
            match kw.name.as_str() {
                "workload" => m.workloads.push(self.workload()?),
                "schedule" => m.schedules.push(self.schedule()?),
                "tensor" => m.tensors.push(self.tensor()?),
                "kernel" => m.kernels.push(self.kernel()?),
                other => return self.err(kw.span, format!("unknown item `@{other}`; expected `@workload`, `@schedule`, `@tensor` or `@kernel`")),
            }
        }
    }

    fn workload(&mut self) -> PR<Workload> {
        let name = self.ident("a workload name")?;
        self.expect("(")?;
        let mut params = vec![];
        if !self.eat(")") {
            loop {
                self.expect("%")?;
                let n = self.ident("a parameter name after `%`")?;
                self.expect(":")?;
                let a = self.axis()?;
                params.push((n, a));
                if self.list_end(")")? {
                    break;
                }
            }
        }
        let body = self.block()?;
        Ok(Workload { name, params, body })
    }

    fn axis(&mut self) -> PR<Axis> {
        if self.eat("%") {
            return Ok(Axis::Ref(self.ident("a workload parameter name")?));
        }
        let kw = self.ident("an axis (`dense[N]`, `dense_dyn(n)`, `dense_dyn(lengths[row])`, `ragged(outer, lengths)`, `sparse(outer, indptr, indices)`, `sparse_row(row, indptr, indices)` or a parameter)")?;
        let lower = kw.name.to_ascii_lowercase();
        match lower.as_str() {
            "dense" => {
                self.expect("[")?;
                let (n, s) = self.int("an extent")?;
                self.expect("]")?;
                Ok(Axis::Dense(n, s))
            }
            "dense_dyn" => {
                self.expect("(")?;
                let n = self.ident("a runtime parameter name")?;
                let axis = if self.eat("[") {
                    let row = self.expr()?;
                    self.expect("]")?;
                    Axis::RaggedRow(row, n)
                } else {
                    Axis::DenseDyn(n)
                };
                self.expect(")")?;
                Ok(axis)
            }
            "ragged" => {
                self.expect("(")?;
                let outer = self.expr()?;
                self.expect(",")?;
                let lens = self.ident("the name of a lengths array")?;
                self.expect(")")?;
                Ok(Axis::Ragged(outer, lens))
            }
            "sparse" | "sparse_row" => {
                let row_form = lower == "sparse_row";
                self.expect("(")?;
                let first = self.expr()?;
                self.expect(",")?;
                let indptr = self.ident("the name of an indptr array")?;
                self.expect(",")?;
                let indices = self.ident("the name of an indices array")?;
                self.expect(")")?;
                Ok(if row_form {
                    Axis::SparseRow(first, indptr, indices)
                } else {
                    Axis::Sparse(first, indptr, indices)
                })
            }
            _ => Ok(Axis::Ref(kw)),
        }
    }

    fn block(&mut self) -> PR<Vec<Stmt>> {
        let open = self.expect("{")?;
        self.enter(open.span)?;
        let mut out = vec![];
        loop {
            if self.eat("}") {
                break;
            }
            // `;` or `,` may separate statements (PTO-WSP's printer writes `,` between the
            // statements of a `combine` and `;` after those of a `sequential`).
            if self.eat(";") || self.eat(",") {
                continue;
            }
            if self.peek().kind == Tok::Eof {
                return self.err(open.span, "this `{` is never closed");
            }
            out.push(self.stmt()?);
        }
        self.nesting -= 1;
        Ok(out)
    }

    fn stmt(&mut self) -> PR<Stmt> {
        let kw = self.keyword("a statement (`parallel_for`, `for_each`, `select`, `cond`, `combine`, `sequential`, `dispatch` or `task`)")?;
        let span = kw.span;
        let kind = match kw.name.as_str() {
            "parallel_for" | "for_each" | "select" => {
                let op = match kw.name.as_str() {
                    "parallel_for" => Opcode::PARALLEL_FOR,
                    "for_each" => Opcode::FOR_EACH,
                    _ => Opcode::SELECT,
                };
                let var = self.ident("a loop variable")?;
                self.expect("in")?;
                let axis = self.axis()?;
                let body = self.block()?;
                StmtK::Loop {
                    op,
                    var,
                    axis,
                    body,
                }
            }
            "cond" => {
                let pred = self.expr()?;
                let then = self.block()?;
                let els = if self.eat("else") {
                    if self.peek().is("cond") {
                        self.enter(span)?;
                        let s = self.stmt()?;
                        self.nesting -= 1;
                        Some(vec![s])
                    } else {
                        Some(self.block()?)
                    }
                } else {
                    None
                };
                StmtK::Cond { pred, then, els }
            }
            "combine" => StmtK::Combine(self.block()?),
            "sequential" => StmtK::Sequential(self.block()?),
            "dispatch" => {
                let start = self.peek().span;
                let pol = self.policy()?;
                let pspan = start.to(self.toks[self.pos.saturating_sub(1)].span);
                StmtK::Dispatch(pol, pspan, self.block()?)
            }
            "task" => {
                self.expect("@")?;
                let kernel = self.ident("a kernel name")?;
                self.expect("(")?;
                let mut args = vec![];
                if !self.eat(")") {
                    loop {
                        args.push(self.expr()?);
                        if self.list_end(")")? {
                            break;
                        }
                    }
                }
                let mut resources = vec![];
                if self.eat("resources") {
                    self.expect("(")?;
                    if !self.eat(")") {
                        loop {
                            resources.push(self.resource()?);
                            if self.list_end(")")? {
                                break;
                            }
                        }
                    }
                }
                StmtK::Task {
                    kernel,
                    args,
                    resources,
                }
            }
            other => return self.err(span, format!("unknown statement `{other}`")),
        };
        Ok(Stmt { kind, span })
    }

    fn resource(&mut self) -> PR<Resource> {
        let name = self.ident("a resource (tensor) name")?;
        let mut dims = vec![];
        if self.eat("[") {
            loop {
                let start = self.expr()?;
                let end = if self.eat(":") {
                    Some(self.expr()?)
                } else {
                    None
                };
                dims.push(Dim { start, end });
                if self.list_end("]")? {
                    break;
                }
            }
        }
        let span = name.span.to(self.toks[self.pos.saturating_sub(1)].span);
        Ok(Resource { name, dims, span })
    }

    fn policy(&mut self) -> PR<PolicyAst> {
        let kw = self.keyword("a dispatch policy (`round_robin`, `affinity(e)`, `hash(e)`, `dispatch_by(e)`, `work_steal`, `static(v)` or `threshold(...)`)")?;
        match kw.name.as_str() {
            "round_robin" => {
                if self.eat("(") {
                    let n = self.int("an AICPU count")?;
                    self.expect(")")?;
                    Ok(PolicyAst::RoundRobin(Some(n)))
                } else {
                    Ok(PolicyAst::RoundRobin(None))
                }
            }
            "affinity" | "hash" | "dispatch_by" => {
                self.expect("(")?;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(if kw.name == "hash" {
                    PolicyAst::Hash(e)
                } else {
                    PolicyAst::Affinity(e)
                })
            }
            "work_steal" => Ok(PolicyAst::WorkSteal),
            "static" => {
                self.expect("(")?;
                let v = self.ident("a loop variable")?;
                self.expect(")")?;
                Ok(PolicyAst::Static(v))
            }
            "threshold" => {
                self.expect("(")?;
                let sel = self.expr()?;
                let mut levels = vec![];
                loop {
                    self.expect(",")?;
                    if self.peek().kind == Tok::Int {
                        let (t, s) = self.int("a threshold")?;
                        self.expect(":")?;
                        let p = self.policy()?;
                        levels.push((t, s, p));
                    } else {
                        let p = self.policy()?;
                        self.expect(")")?;
                        return Ok(PolicyAst::Threshold(sel, levels, Box::new(p)));
                    }
                }
            }
            other => self.err(kw.span, format!("unknown dispatch policy `{other}`")),
        }
    }

    fn schedule(&mut self) -> PR<Schedule> {
        let name = self.ident("a schedule name")?;
        self.expect("for")?;
        let workload = self.ident("the workload this schedule is for")?;
        let open = self.expect("{")?;
        let mut knobs = vec![];
        loop {
            if self.eat("}") {
                break;
            }
            if self.eat(";") || self.eat(",") {
                continue;
            }
            if self.peek().kind == Tok::Eof {
                return self.err(open.span, "this `{` is never closed");
            }
            let key = self.keyword("a schedule knob (`key = value`)")?;
            self.expect("=")?;
            let value = match key.name.as_str() {
                "dispatch" => {
                    let start = self.peek().span;
                    let p = self.policy()?;
                    KnobValue::Dispatch(p, start.to(self.toks[self.pos - 1].span))
                }
                "streams" | "aicpus" | "window" | "pipeline_depth" | "batch_deps"
                | "task_window" => {
                    let (v, s) = self.int("an integer")?;
                    KnobValue::Int(v, s)
                }
                "timing" | "ready" | "start" | "window_mode" => {
                    let n = self.keyword("a value")?;
                    let arg = if self.eat("(") {
                        let a = self.int("an integer")?;
                        self.expect(")")?;
                        Some(a)
                    } else {
                        None
                    };
                    KnobValue::Named(n, arg)
                }
                _ => {
                    self.skip_value();
                    KnobValue::Unknown
                }
            };
            knobs.push(Knob { key, value });
        }
        Ok(Schedule {
            name,
            workload,
            knobs,
        })
    }

    /// Skips an unknown knob's value: balanced tokens up to `;`, `}` or the next `key =`.
    fn skip_value(&mut self) {
        let mut depth = 0usize;
        loop {
            let t = self.peek();
            if t.kind == Tok::Eof {
                return;
            }
            if depth == 0
                && (t.is(";")
                    || t.is("}")
                    || (t.kind == Tok::Ident
                        && self.peek2().is("=")
                        && self.pos > 0
                        && !self.toks[self.pos - 1].is("=")))
            {
                return;
            }
            if t.is("(") || t.is("[") || t.is("{") {
                depth += 1;
            } else if (t.is(")") || t.is("]") || t.is("}")) && depth > 0 {
                depth -= 1;
            }
            self.bump();
        }
    }

    fn tensor(&mut self) -> PR<TensorDecl> {
        let name = self.ident("a tensor name")?;
        self.expect(":")?;
        let dtype = self.keyword("an element type (f16, bf16, f32, ...)")?;
        self.expect("[")?;
        let mut dims = vec![];
        if !self.eat("]") {
            loop {
                if self.peek().kind == Tok::Int {
                    dims.push(Ok(self.int("a dimension")?));
                } else {
                    dims.push(Err(
                        self.ident("a dimension (an integer or a runtime parameter name)")?
                    ));
                }
                if self.list_end("]")? {
                    break;
                }
            }
        }
        Ok(TensorDecl { name, dtype, dims })
    }

    fn kernel(&mut self) -> PR<KernelDecl> {
        let name = self.ident("a kernel name")?;
        self.expect("(")?;
        let mut params = vec![];
        if !self.eat(")") {
            loop {
                params.push(self.ident("a parameter name")?);
                if self.list_end(")")? {
                    break;
                }
            }
        }
        self.expect(":")?;
        let pool = self.keyword("a pool (`cube` or `vector`)")?;
        self.expect("(")?;
        let mut args = vec![];
        if !self.eat(")") {
            loop {
                let dir = self.keyword("a direction (`in`, `out` or `inout`)")?;
                let n = self.ident("an argument name")?;
                args.push((dir, n));
                if self.list_end(")")? {
                    break;
                }
            }
        }
        Ok(KernelDecl {
            name,
            params,
            pool,
            args,
        })
    }

    // ---- expressions: precedence climbing ----

    fn expr(&mut self) -> PR<Expr> {
        self.expr_nesting += 1;
        if self.expr_nesting > MAX_EXPR_NESTING {
            let s = self.peek().span;
            return Err(self.rep.error(
                DiagKind::Nesting,
                s,
                format!("expression nested deeper than {MAX_EXPR_NESTING}"),
            ));
        }
        if self.expr_nesting == 1 {
            self.expr_nodes = 0;
        }
        let r = self.binary(0);
        self.expr_nesting -= 1;
        r
    }

    /// Counts one node of the current expression. An expression longer than the bytecode can
    /// hold is rejected here, which also bounds the tree (and every recursion over it).
    fn node(&mut self, span: Span) -> PR<()> {
        self.expr_nodes += 1;
        if self.expr_nodes >= limits::MAX_EXPR_LEN {
            return Err(self.rep.error(
                DiagKind::Limit,
                span,
                format!(
                    "expression too long: more than {} operators and operands (the bytecode limit is {} nodes)",
                    limits::MAX_EXPR_LEN - 1,
                    limits::MAX_EXPR_LEN
                ),
            ));
        }
        Ok(())
    }

    fn binop(t: &Token<'_>) -> Option<(ExprOp, u8)> {
        if t.kind != Tok::Punct {
            return None;
        }
        Some(match t.text {
            "||" => (ExprOp::OR, 1),
            "&&" => (ExprOp::AND, 2),
            "==" => (ExprOp::EQ, 3),
            "!=" => (ExprOp::NE, 3),
            "<" => (ExprOp::LT, 4),
            "<=" => (ExprOp::LE, 4),
            ">" => (ExprOp::GT, 4),
            ">=" => (ExprOp::GE, 4),
            "+" => (ExprOp::ADD, 5),
            "-" => (ExprOp::SUB, 5),
            "*" => (ExprOp::MUL, 6),
            "/" => (ExprOp::DIV, 6),
            "%" => (ExprOp::MOD, 6),
            _ => return None,
        })
    }

    fn binary(&mut self, min: u8) -> PR<Expr> {
        let mut lhs = self.unary()?;
        // Left-associative loop: iteration, not recursion, per operator at one level.
        while let Some((op, prec)) = Self::binop(&self.peek()) {
            if prec <= min {
                break;
            }
            let t = self.bump();
            self.node(t.span)?;
            self.expr_nesting += 1;
            if self.expr_nesting > MAX_EXPR_NESTING {
                let s = self.peek().span;
                return Err(self.rep.error(
                    DiagKind::Nesting,
                    s,
                    format!("expression nested deeper than {MAX_EXPR_NESTING}"),
                ));
            }
            let rhs = self.binary(prec);
            self.expr_nesting -= 1;
            let rhs = rhs?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprK::Bin(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> PR<Expr> {
        let t = self.peek();
        if t.is("-") || t.is("!") {
            self.bump();
            self.node(t.span)?;
            self.expr_nesting += 1;
            if self.expr_nesting > MAX_EXPR_NESTING {
                return Err(self.rep.error(
                    DiagKind::Nesting,
                    t.span,
                    format!("expression nested deeper than {MAX_EXPR_NESTING}"),
                ));
            }
            let e = self.unary();
            self.expr_nesting -= 1;
            let e = e?;
            let op = if t.is("-") { ExprOp::NEG } else { ExprOp::NOT };
            let span = t.span.to(e.span);
            return Ok(Expr {
                kind: ExprK::Un(op, Box::new(e)),
                span,
            });
        }
        self.primary()
    }

    fn primary(&mut self) -> PR<Expr> {
        let t = self.peek();
        match t.kind {
            Tok::Int => {
                let (v, span) = self.int("an integer")?;
                self.node(span)?;
                Ok(Expr {
                    kind: ExprK::Int(v),
                    span,
                })
            }
            Tok::Ident => {
                self.bump();
                self.node(t.span)?;
                let fun = match t.text.to_ascii_lowercase().as_str() {
                    "min" => Some(ExprOp::MIN),
                    "max" => Some(ExprOp::MAX),
                    "ceil_div" => Some(ExprOp::CEILDIV),
                    _ => None,
                };
                if let (Some(op), true) = (fun, self.peek().is("(")) {
                    self.bump();
                    let a = self.expr()?;
                    self.expect(",")?;
                    let b = self.expr()?;
                    let close = self.expect(")")?;
                    return Ok(Expr {
                        kind: ExprK::Bin(op, Box::new(a), Box::new(b)),
                        span: t.span.to(close.span),
                    });
                }
                if self.eat("[") {
                    let i = self.expr()?;
                    let close = self.expect("]")?;
                    let id = Ident {
                        name: t.text.to_string(),
                        span: t.span,
                    };
                    return Ok(Expr {
                        kind: ExprK::Elem(id, Box::new(i)),
                        span: t.span.to(close.span),
                    });
                }
                Ok(Expr {
                    kind: ExprK::Name(t.text.to_string()),
                    span: t.span,
                })
            }
            _ if t.is("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            _ => self.expected("an expression"),
        }
    }
}
